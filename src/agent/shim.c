/*
 * shim.c - `gpuorch-shim`: runs one attempt's command and records its outcome
 * atomically in the attempt directory (see shim.h). It is an executable of
 * its own that links libc only (shim_fence.c, cgroup.c, fsutil.c, errbuf.c,
 * monotime.c and err.c are compiled into it): it starts once per attempt, as
 * root, and the fewer libraries ld.so maps the faster and the smaller what
 * runs as root. So the status is JSON written with snprintf, and the
 * options are read by a table of its own (util/opts needs jsonv).
 *
 * Signals: the handler only sets a flag. The forwarded signals and SIGCHLD
 * stay blocked except inside sigsuspend() (ppoll() with --fence, which also
 * wakes for the watchdog's next look), so a signal that arrives between the
 * loop's checks is not lost: it wakes the next wait at once.
 */
/* pipe2, ppoll and close_range are Linux calls, declared only under _GNU_SOURCE. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/cgroup.h"
#include "agent/shim.h"
#include "util/fsutil.h"
#include "util/errbuf.h"
#include "util/monotime.h"
#include "base/banned.h"

/* The signals forwarded to the command's process group. */
static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP};
#define NFORWARDED (sizeof(forwarded) / sizeof(forwarded[0]))

/* Set by the handler, cleared by the loop: the only mutable globals. */
static volatile sig_atomic_t pending[NFORWARDED];
static volatile sig_atomic_t child_changed;

static void on_signal(int sig)
{
    if (sig == SIGCHLD) {
        child_changed = 1;
        return;
    }
    for (size_t i = 0; i < NFORWARDED; i++)
        if (forwarded[i] == sig)
            pending[i] = 1;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Writes DIR/NAME as a whole or not at all (fsutil_write_atomic), mode
 * 0640: the agent reads it through the attempt directory's group. On
 * failure a message in err. */
static int write_atomic(const char *dir, const char *name, const char *data, char *err,
                        size_t errlen)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: path too long", dir);
    return fsutil_write_atomic(path, data, strlen(data), 0640, 0, err, errlen);
}

/* ---- options ---- */

/* The command's environment from --env-fd; more is not a job's. */
#define ENV_MAX_BYTES (1 << 20)

struct shim_args {
    const char *dir, *out, *errpath; /* attempt directory; custom output files */
    const char *user, *cgroup, *workdir;
    const char *fence; /* the agent's fence file (--fence); NULL: no watchdog */
    bool allow_root, help;
    bool append;                /* custom output files appended to, else truncated first */
    int64_t ready_arg, env_arg; /* --ready-fd, --env-fd as given; 0: not given */
    int ready_fd, env_fd;       /* -1: none */
    char *envbuf;               /* --env-fd's strings, NUL-separated */
    char **envv;                /* pointers into envbuf; NULL: the shim's own environment */
    char **cmd;
};

/* The job's account, looked up by the shim before it forks (so that an
 * unknown user is reported without a command process). */
struct account {
    bool set;
    struct passwd pw;
    char buf[16384]; /* getpwnam_r's strings */
};

/* ---- the command's process ---- */

/* Opens `path` on a descriptor above 2, so that dup2 onto 0..2 in the child
 * always clears its close-on-exec flag. */
static int open_high(const char *path, int flags, mode_t mode)
{
    int fd = open(path, flags | O_CLOEXEC, mode);
    if (fd >= 0 && fd <= 2) {
        int hi = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        int e = errno;
        close(fd);
        errno = e;
        fd = hi;
    }
    return fd;
}

/* Marks every descriptor above 2 close-on-exec: what the agent leaked to the
 * shim must not reach the job. */
static void cloexec_above_stdio(void)
{
    if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
        return;
    struct rlimit rl;
    int max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? (int)rl.rlim_cur : 65536;
    for (int fd = 3; fd < max; fd++)
        fcntl(fd, F_SETFD, FD_CLOEXEC);
}

/* Opens ATTEMPT_DIR/NAME for appending, as root where the shim is root: the
 * file then belongs to the job's user and the attempt directory's group
 * (which the agent reads through), mode 0640. */
static int open_default_log(const struct shim_args *o, const struct account *a, const char *name,
                            char *msg, size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", o->dir, name);
    int fd = open_high(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0640);
    if (fd < 0)
        return errbuf_set(msg, len, -errno, "open %s: %s", path, strerror(errno));
    struct stat st;
    if (a->set && (stat(o->dir, &st) < 0 || fchown(fd, a->pw.pw_uid, st.st_gid) < 0 ||
                   fchmod(fd, 0640) < 0)) {
        int e = errno;
        close(fd);
        return errbuf_set(msg, len, -e, "chown %s to %s: %s", path, a->pw.pw_name, strerror(e));
    }
    return fd;
}

/* Becomes the job's user for good: groups, gid, uid, then checks that it
 * stuck and that root cannot be taken back. */
static int switch_user(const struct account *a, char *msg, size_t len)
{
    uid_t uid = a->pw.pw_uid;
    gid_t gid = a->pw.pw_gid;
    const char *name = a->pw.pw_name;
    /* A non-root shim runs jobs as its own user and cannot initgroups. */
    if (uid != 0 && getuid() == uid && geteuid() == uid)
        return 0;
    const char *call = initgroups(name, gid) < 0 ? "initgroups"
                       : setgid(gid) < 0         ? "setgid"
                       : setuid(uid) < 0         ? "setuid"
                                                 : NULL;
    if (call)
        return errbuf_set(msg, len, -errno, "user %s: %s: %s", name, call, strerror(errno));
    if (getuid() != uid || geteuid() != uid || getgid() != gid || getegid() != gid ||
        (uid != 0 && setuid(0) == 0)) {
        return errbuf_set(msg, len, GPO_EPERM, "user %s: the switch to uid %ld did not stick", name,
                          (long)uid);
    }
    return 0;
}

/* HOME, USER, LOGNAME, SHELL from passwd, where the environment lacks them;
 * then the working directory, entered with the user's permissions. */
static int enter_session(const struct shim_args *o, const struct account *a, char *msg, size_t len)
{
    if (a->set) {
        const char *vars[][2] = {{"HOME", a->pw.pw_dir},
                                 {"USER", a->pw.pw_name},
                                 {"LOGNAME", a->pw.pw_name},
                                 {"SHELL", a->pw.pw_shell}};
        for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
            if (vars[i][1] && vars[i][1][0] && setenv(vars[i][0], vars[i][1], 0) < 0)
                return errbuf_set(msg, len, -errno, "setenv %s: %s", vars[i][0], strerror(errno));
    }
    if (o->workdir) {
        if (chdir(o->workdir) < 0)
            return errbuf_set(msg, len, -errno, "chdir %s: %s", o->workdir, strerror(errno));
    } else if (a->set) {
        /* As login(1) does: the home directory, else the root. */
        if ((!a->pw.pw_dir || chdir(a->pw.pw_dir) < 0) && chdir("/") < 0)
            return errbuf_set(msg, len, -errno, "chdir /: %s", strerror(errno));
    }
    return 0;
}

/* Everything between fork and exec that can fail, in the order that keeps
 * root's powers away from the user's choices: into the cgroup, the default
 * log files, drop privileges, then the user's own output files and working
 * directory. Fills fds (stdin, stdout, stderr). */
static int prepare_child(const struct shim_args *o, const struct account *a, int fds[3], char *msg,
                         size_t len)
{
    char why[SHIM_ERROR_MAX];
    int rc;
    if (o->cgroup && (rc = cgroup_attach(o->cgroup, 0, why, sizeof(why))) < 0)
        return errbuf_set(msg, len, rc, "cgroup: %s", why);
    if ((fds[0] = open_high("/dev/null", O_RDONLY, 0)) < 0)
        return errbuf_set(msg, len, -errno, "open /dev/null: %s", strerror(errno));
    if (!o->out && (rc = fds[1] = open_default_log(o, a, "stdout", msg, len)) < 0)
        return rc;
    if (!o->errpath && (rc = fds[2] = open_default_log(o, a, "stderr", msg, len)) < 0)
        return rc;
    if (a->set && (rc = switch_user(a, msg, len)) < 0)
        return rc;
    /* Only now, as the user: nothing in it reached a root process. */
    if (o->envv) {
        clearenv();
        for (char **v = o->envv; *v; v++)
            if (putenv(*v) != 0)
                return errbuf_set(msg, len, -errno, "putenv: %s", strerror(errno));
    }
    /* O_APPEND either way: tasks and steps writing one file do not
     * overwrite each other. One path for both streams is opened once, so
     * their lines stay in the order written. */
    const char *custom[3] = {NULL, o->out, o->errpath};
    int flags = O_WRONLY | O_CREAT | O_APPEND | (o->append ? 0 : O_TRUNC);
    for (int i = 1; i < 3; i++) {
        if (!custom[i])
            continue;
        if (i == 2 && custom[1] && strcmp(custom[1], custom[2]) == 0) {
            fds[2] = fds[1];
            continue;
        }
        fds[i] = open_high(custom[i], flags, 0640);
        if (fds[i] < 0)
            return errbuf_set(msg, len, -errno, "open %s: %s", custom[i], strerror(errno));
    }
    return enter_session(o, a, msg, len);
}

/* In the forked child: never returns. Reports why the command did not start
 * on `report` (close-on-exec, so a successful exec closes it with nothing
 * sent). */
static void run_child(const struct shim_args *o, const struct account *a, int report)
{
    if (o->ready_fd >= 0)
        close(o->ready_fd);
    setpgid(0, 0);
    struct sigaction sa = {.sa_handler = SIG_DFL};
    sigemptyset(&sa.sa_mask);
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaction(sig, &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    char msg[SHIM_ERROR_MAX] = "";
    int fds[3] = {-1, -1, -1};
    if (prepare_child(o, a, fds, msg, sizeof(msg)) == 0) {
        int e = 0;
        for (int i = 0; i < 3 && !e; i++)
            if (dup2(fds[i], i) < 0)
                e = errno;
        if (!e) {
            cloexec_above_stdio();
            execvp(o->cmd[0], o->cmd);
            e = errno;
        }
        errbuf_set(msg, sizeof(msg), -e, "execvp %s: %s", o->cmd[0], strerror(e));
    }
    /* One write under PIPE_BUF: the parent reads it whole. */
    while (write(report, msg, strlen(msg)) < 0 && errno == EINTR)
        ;
    _exit(127);
}

/* --fence's watchdog: one look, and the signal it calls for. Returns the ms
 * to the next look, -1 for none. */
static int64_t watch(const struct shim_args *o, struct shim_watch *w, pid_t pid)
{
    enum shim_watch_action was = w->action;
    struct shim_fence f = {0};
    bool have = w->action == SHIM_WATCH_NONE && shim_fence_read(o->fence, &f) == 0;
    int64_t next = shim_fence_step(w, &f, have, monotime_ms());
    if (w->action == was)
        return next;
    if (w->action == SHIM_WATCH_TERM) {
        fprintf(stderr,
                "gpuorch-shim: no controller reached by the agent for %lld ms (lease in %s): "
                "SIGTERM to the command\n",
                (long long)w->unreached_ms, o->fence);
        if (kill(-pid, SIGTERM) < 0)
            kill(pid, SIGTERM);
        return next;
    }
    fprintf(stderr, "gpuorch-shim: the fence's grace is over: SIGKILL to the command\n");
    if (kill(-pid, SIGKILL) < 0)
        kill(pid, SIGKILL);
    if (o->cgroup) /* its processes that left the group too */
        cgroup_kill(o->cgroup, NULL, 0);
    return -1;
}

/* Blocks until the child is reaped, forwarding signals meanwhile, and with
 * --fence watching the agent's lease. */
static int wait_child(const struct shim_args *o, struct shim_watch *w, pid_t pid,
                      const sigset_t *wait_mask, int *ret_status)
{
    int64_t next = o->fence ? 0 : -1;
    int64_t look_at = monotime_ms();
    for (;;) {
        for (size_t i = 0; i < NFORWARDED; i++) {
            if (!pending[i])
                continue;
            pending[i] = 0;
            /* The group, so that the command's own children get it too; the
             * pid alone if the child has not made its group yet. */
            if (kill(-pid, forwarded[i]) < 0)
                kill(pid, forwarded[i]);
        }
        if (next >= 0 && monotime_ms() >= look_at) {
            next = watch(o, w, pid);
            look_at = monotime_ms() + (next > 0 ? next : 0);
        }
        child_changed = 0;
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            *ret_status = st;
            return 0;
        }
        if (r < 0 && errno != EINTR)
            return -errno;
        if (r != 0)
            continue;
        if (next < 0) {
            sigsuspend(wait_mask);
            continue;
        }
        int64_t left = look_at - monotime_ms();
        if (left <= 0)
            continue;
        struct timespec ts = {(time_t)(left / 1000), (long)(left % 1000) * 1000000};
        ppoll(NULL, 0, &ts, wait_mask); /* a signal or the next look, whichever first */
    }
}

/* ---- outcome ---- */

struct run {
    const char *dir;
    int64_t started_ms, ended_ms;
    pid_t pid;
    int wait_status;
    uint64_t oom_kills; /* in the command's cgroup when it ended */
    int64_t fenced_ms;  /* the watchdog's SIGTERM came this long unreached; 0: none */
    char error[SHIM_ERROR_MAX];
};

/* Appends s to out[*o..len) as the inside of a JSON string: quotes,
 * backslashes and control characters escaped, every byte that is not part
 * of well-formed UTF-8 (RFC 3629's table) replaced by '?'. */
static void json_text(char *out, size_t len, size_t *o, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p && *o + 8 < len) {
        unsigned c = *p;
        size_t n = c < 0x80                 ? 1
                   : c >= 0xC2 && c <= 0xDF ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4
                                            : 0;
        /* The second byte's narrower ranges: no overlong forms, surrogates,
         * or code points above U+10FFFF. */
        unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
        unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        for (size_t k = 1; k < n; k++)
            if (p[k] < (k == 1 ? lo : 0x80) || p[k] > (k == 1 ? hi : 0xBF))
                n = 0;
        if (n == 0) {
            out[(*o)++] = '?';
            p++;
        } else if (c == '"' || c == '\\') {
            out[(*o)++] = '\\';
            out[(*o)++] = (char)c;
            p++;
        } else if (c < 0x20 || c == 0x7F) {
            *o += (size_t)snprintf(out + *o, len - *o, "\\u%04x", c);
            p++;
        } else {
            memcpy(out + *o, p, n);
            *o += n;
            p += n;
        }
    }
    out[*o] = '\0';
}

/* Writes the status file (shim.h's one line of JSON); returns the shim's
 * exit status. */
static int finish(const struct run *r)
{
    char line[2048];
    size_t o = 0;
    int code = 127;
    if (!r->error[0] && WIFSIGNALED(r->wait_status)) {
        code = 128 + WTERMSIG(r->wait_status);
        o += (size_t)snprintf(line, sizeof(line), "{\"signal\":%d", WTERMSIG(r->wait_status));
    } else {
        if (!r->error[0])
            code = WEXITSTATUS(r->wait_status);
        o += (size_t)snprintf(line, sizeof(line), "{\"exit_code\":%d", code);
    }
    if (r->error[0]) {
        o += (size_t)snprintf(line + o, sizeof(line) - o, ",\"error\":\"");
        json_text(line, sizeof(line) - 2, &o, r->error);
        line[o++] = '"';
    }
    o += (size_t)snprintf(line + o, sizeof(line) - o,
                          ",\"started_ms\":%lld,\"ended_ms\":%lld,\"pid\":%ld",
                          (long long)r->started_ms, (long long)r->ended_ms, (long)r->pid);
    if (r->oom_kills > 0)
        o += (size_t)snprintf(line + o, sizeof(line) - o, ",\"oom_kills\":%llu",
                              (unsigned long long)r->oom_kills);
    if (r->fenced_ms > 0)
        o += (size_t)snprintf(line + o, sizeof(line) - o, ",\"fenced_ms\":%lld",
                              (long long)r->fenced_ms);
    snprintf(line + o, sizeof(line) - o, "}\n");
    char err[512];
    int rc = write_atomic(r->dir, "status", line, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "gpuorch-shim: cannot write the status: %s\n", err);
        return SHIM_EXIT_FAILURE;
    }
    return code;
}

/* Writes DIR/pid whole or not at all (a temporary file renamed), without
 * fsync: the pid only matters while the command runs, and no process
 * survives a crash of the machine, so it need not reach the disk (two
 * fsyncs less on every launch's path). */
static void write_pid(const char *dir, pid_t pid)
{
    char buf[32], tmp[4096], path[4096];
    int n = snprintf(buf, sizeof(buf), "%ld\n", (long)pid);
    bool ok = (size_t)snprintf(path, sizeof(path), "%s/pid", dir) < sizeof(path) &&
              (size_t)snprintf(tmp, sizeof(tmp), "%s/pid.tmp", dir) < sizeof(tmp);
    int fd = ok ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0640) : -1;
    ok = fd >= 0 && fsutil_write_all(fd, buf, (size_t)n) == 0;
    ok = fd >= 0 && close(fd) == 0 && ok && rename(tmp, path) == 0;
    /* Not fatal: the status file, written later, carries the pid too. */
    if (!ok) {
        fprintf(stderr, "gpuorch-shim: cannot write the pid in %s: %s\n", dir, strerror(errno));
        unlink(tmp);
    }
}

/* Forks and execs the command, then waits for it; fills r. */
static void run_command(struct run *r, const struct shim_args *o, const struct account *a,
                        const sigset_t *wait_mask)
{
    int report[2];
    r->started_ms = now_ms();
    if (pipe2(report, O_CLOEXEC) < 0) {
        snprintf(r->error, sizeof(r->error), "pipe: %s", strerror(errno));
        return;
    }
    pid_t pid = fork();
    if (pid == 0)
        run_child(o, a, report[1]);
    close(report[1]);
    if (pid < 0) {
        snprintf(r->error, sizeof(r->error), "fork: %s", strerror(errno));
        close(report[0]);
        return;
    }
    /* Also here, so that the group exists before any signal is forwarded,
     * and the command is in its cgroup before its pid is known: a kill
     * through the cgroup then cannot miss it. The child joins by itself
     * too; a second move into the same cgroup changes nothing. */
    setpgid(pid, pid);
    if (o->cgroup)
        cgroup_attach(o->cgroup, pid, NULL, 0);
    r->pid = pid;
    write_pid(r->dir, pid);
    if (o->ready_fd >= 0)
        close(o->ready_fd);
    ssize_t n;
    while ((n = read(report[0], r->error, sizeof(r->error) - 1)) < 0 && errno == EINTR)
        ;
    r->error[n > 0 ? n : 0] = '\0';
    close(report[0]);
    struct shim_watch w = {.action = SHIM_WATCH_NONE};
    if (o->fence)
        monotime_boot_id(w.boot_id);
    if (wait_child(o, &w, pid, wait_mask, &r->wait_status) < 0 && !r->error[0])
        snprintf(r->error, sizeof(r->error), "waitpid: %s", strerror(errno));
    if (w.action != SHIM_WATCH_NONE)
        r->fenced_ms = w.unreached_ms > 0 ? w.unreached_ms : 1;
    r->ended_ms = now_ms();
    /* The kernel counts its kills at the memory limit in the cgroup; the
     * count is there once the command is reaped. */
    uint64_t kills = 0;
    if (o->cgroup && cgroup_oom_kills(o->cgroup, &kills, NULL, 0) == 0)
        r->oom_kills = kills > INT64_MAX ? INT64_MAX : kills;
}

/* Looks up --user before anything forks; refuses uid 0 without
 * --allow-root. A message in r->error if not. */
static int resolve_user(const struct shim_args *o, struct account *a, struct run *r)
{
    if (!o->user)
        return 0;
    struct passwd *res = NULL;
    int e = getpwnam_r(o->user, &a->pw, a->buf, sizeof(a->buf), &res);
    if (!res) {
        snprintf(r->error, sizeof(r->error), "user %s: %s", o->user,
                 e ? strerror(e) : "no such user");
        return e ? -e : GPO_ENOENT;
    }
    if (a->pw.pw_uid == 0 && !o->allow_root) {
        snprintf(r->error, sizeof(r->error), "user %s: uid 0 refused without --allow-root",
                 o->user);
        return GPO_EPERM;
    }
    a->set = true;
    return 0;
}

#define USAGE_LINE                                                                                 \
    "usage: gpuorch-shim --dir ATTEMPT_DIR [--user NAME [--allow-root]] [--cgroup DIR]\n"          \
    "                    [--workdir DIR] [--stdout PATH] [--stderr PATH] [--append]\n"             \
    "                    [--ready-fd FD] [--env-fd FD] [--fence FILE]\n"                           \
    "                    -- COMMAND [ARG...]\n"

static int usage(const char *msg)
{
    fprintf(stderr, "gpuorch-shim: %s\n" USAGE_LINE, msg);
    return SHIM_EXIT_FAILURE;
}

static void help(void)
{
    printf(USAGE_LINE
           "\n"
           "Runs one attempt's command for the node agent (gpuorch agent), in a session\n"
           "of its own so that it outlives the agent. It writes the command's pid to\n"
           "ATTEMPT_DIR/pid and, once it exits, its exit code or signal to\n"
           "ATTEMPT_DIR/status (JSON, written to a temporary file and renamed); stdout\n"
           "and stderr go to ATTEMPT_DIR/stdout and ATTEMPT_DIR/stderr unless given.\n"
           "SIGTERM, SIGINT and SIGHUP are passed on to the command's process group.\n\n"
           "  --user NAME    run the command as NAME (never uid 0 without --allow-root)\n"
           "  --cgroup DIR   put the command in cgroup DIR; the shim stays outside\n"
           "  --workdir DIR  run the command in DIR (default: the user's home, or /)\n"
           "  --stdout PATH, --stderr PATH\n"
           "                 its output files, truncated first unless --append; one\n"
           "                 path for both is opened once\n"
           "  --ready-fd FD  close FD once the pid file is written\n"
           "  --env-fd FD    the command's environment, NUL-separated NAME=VALUE\n"
           "                 strings read from FD (default: the shim's own)\n"
           "  --fence FILE   the agent's fence file: once its lease has run out (the\n"
           "                 agent dead or stopped), SIGTERM to the command, SIGKILL\n"
           "                 after its grace\n\n"
           "Exit status: the command's, 128 + its signal, or 125 on a usage error or\n"
           "when the status cannot be written.\n");
}

/* A descriptor option's value: an open descriptor (above 2, as the table
 * says), made close-on-exec so the command never inherits it. */
static int take_fd(int64_t fd, int *ret)
{
    if (fcntl((int)fd, F_SETFD, FD_CLOEXEC) < 0)
        return GPO_EINVAL;
    *ret = (int)fd;
    return 0;
}

/* Reads --env-fd to its end: NUL-terminated NAME=VALUE strings. */
static int read_env(struct shim_args *o)
{
    size_t len = 0, cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        close(o->env_fd);
        return usage("out of memory");
    }
    ssize_t got = 1;
    while (got != 0) {
        if (len + 1 >= cap) {
            char *nb = cap < ENV_MAX_BYTES ? realloc(buf, cap * 2) : NULL;
            if (!nb)
                break;
            buf = nb;
            cap *= 2;
        }
        got = read(o->env_fd, buf + len, cap - len - 1);
        if (got < 0 && errno != EINTR)
            break;
        len += got > 0 ? (size_t)got : 0;
    }
    close(o->env_fd);
    o->envbuf = buf;
    if (got != 0 || (len > 0 && buf[len - 1] != '\0'))
        return usage("--env-fd: unreadable, over 1 MiB, or not NUL-terminated strings");
    for (size_t i = 0; i < len; i++)
        n += buf[i] == '\0';
    if (!(o->envv = calloc(n + 1, sizeof(*o->envv))))
        return usage("out of memory");
    for (size_t i = 0, k = 0; i < len; i += strlen(buf + i) + 1) {
        if (!strchr(buf + i, '=') || buf[i] == '=')
            return usage("--env-fd: an entry is not NAME=VALUE");
        o->envv[k++] = buf + i;
    }
    return 0;
}

/* The options: a table, as every command's (util/opts is not linked in). */
enum opt_kind { OPT_STRING, OPT_FD, OPT_FLAG, OPT_HELP };
#define ARG(member) offsetof(struct shim_args, member)
static const struct {
    const char *name;
    enum opt_kind kind;
    size_t offset;
} shim_opts[] = {
    {"dir", OPT_STRING, ARG(dir)},        {"stdout", OPT_STRING, ARG(out)},
    {"stderr", OPT_STRING, ARG(errpath)}, {"user", OPT_STRING, ARG(user)},
    {"cgroup", OPT_STRING, ARG(cgroup)},  {"workdir", OPT_STRING, ARG(workdir)},
    {"fence", OPT_STRING, ARG(fence)},    {"ready-fd", OPT_FD, ARG(ready_arg)},
    {"env-fd", OPT_FD, ARG(env_arg)},     {"allow-root", OPT_FLAG, ARG(allow_root)},
    {"append", OPT_FLAG, ARG(append)},    {"help", OPT_HELP, ARG(help)},
};
#define NSHIM_OPTS (sizeof(shim_opts) / sizeof(shim_opts[0]))

/* Stores one option's value (NULL for a flag) into o. 0 or SHIM_EXIT_FAILURE. */
static int store_opt(size_t k, const char *v, struct shim_args *o)
{
    char *at = (char *)o + shim_opts[k].offset;
    if (shim_opts[k].kind == OPT_FLAG) {
        *(bool *)(void *)at = true;
    } else if (shim_opts[k].kind == OPT_STRING) {
        *(const char **)(void *)at = v;
    } else {
        char *end;
        errno = 0;
        long n = strtol(v, &end, 10);
        if (errno || *end || end == v || n < 3 || n > INT32_MAX) {
            char msg[64];
            snprintf(msg, sizeof(msg), "--%s: not an open descriptor above 2", shim_opts[k].name);
            return usage(msg);
        }
        *(int64_t *)(void *)at = n;
    }
    return 0;
}

/* The options before "--", in order (the first mistake is the one told):
 * --NAME VALUE or --NAME=VALUE, a value never empty nor starting with '-'.
 * *ret_cmd: the index in argv of the word after "--", or 0 when there is
 * no "--". 0, 1 after --help, or SHIM_EXIT_FAILURE. */
static int read_flags(int argc, char **argv, struct shim_args *o, int *ret_cmd)
{
    *ret_cmd = 0;
    for (int i = 1; i < argc; i++) {
        const char *w = argv[i];
        if (strcmp(w, "--") == 0) {
            *ret_cmd = i + 1;
            return 0;
        }
        if (strcmp(w, "-h") == 0)
            w = "--help";
        if (strncmp(w, "--", 2) != 0)
            return usage("unknown option");
        const char *eq = strchr(w + 2, '=');
        size_t len = eq ? (size_t)(eq - w - 2) : strlen(w + 2), k = 0;
        while (k < NSHIM_OPTS &&
               (strlen(shim_opts[k].name) != len || memcmp(shim_opts[k].name, w + 2, len) != 0))
            k++;
        if (k == NSHIM_OPTS)
            return usage("unknown option");
        enum opt_kind kind = shim_opts[k].kind;
        if (kind == OPT_HELP) {
            help();
            return 1;
        }
        const char *v = NULL;
        if (kind == OPT_FLAG && eq)
            return usage("unknown option");
        if (kind != OPT_FLAG) {
            v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
            if (!v || !*v || v[0] == '-')
                return usage("an option lacks its value");
        }
        if (store_opt(k, v, o))
            return SHIM_EXIT_FAILURE;
    }
    return 0;
}

/* Frees what parse_args allocated, also after it failed. */
static void args_release(struct shim_args *o)
{
    free(o->envv);
    free(o->envbuf);
}

/* Fills o from argv; returns 0, 1 after --help, or SHIM_EXIT_FAILURE; o is
 * released with args_release either way. */
static int parse_args(int argc, char **argv, struct shim_args *o)
{
    *o = (struct shim_args){.ready_fd = -1, .env_fd = -1};
    int cmd = 0;
    int rc = read_flags(argc, argv, o, &cmd);
    if (rc)
        return rc;
    if (!o->dir)
        return usage("--dir is required");
    if (!cmd || cmd >= argc)
        return usage("no command after --");
    if (o->ready_arg && take_fd(o->ready_arg, &o->ready_fd) < 0)
        return usage("--ready-fd: not an open descriptor above 2");
    if (o->env_arg && take_fd(o->env_arg, &o->env_fd) < 0)
        return usage("--env-fd: not an open descriptor above 2");
    o->cmd = argv + cmd;
    return o->env_fd >= 0 ? read_env(o) : 0;
}

int shim_main(int argc, char **argv)
{
    struct shim_args o;
    int rc = parse_args(argc, argv, &o);
    if (rc) {
        args_release(&o);
        return rc == 1 ? 0 : rc;
    }

    /* A process group leader cannot setsid (EPERM); such a shim was started
     * by a shell with job control and already has a group of its own. */
    if (setsid() < 0 && errno != EPERM) {
        fprintf(stderr, "gpuorch-shim: setsid: %s\n", strerror(errno));
        args_release(&o);
        return SHIM_EXIT_FAILURE;
    }
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    for (size_t k = 0; k < NFORWARDED; k++)
        sigaddset(&block, forwarded[k]);
    sigprocmask(SIG_BLOCK, &block, &old);
    struct sigaction sa = {.sa_handler = on_signal};
    sigfillset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    for (size_t k = 0; k < NFORWARDED; k++)
        sigaction(forwarded[k], &sa, NULL);
    sigset_t wait_mask = old;
    for (size_t k = 0; k < NFORWARDED; k++)
        sigdelset(&wait_mask, forwarded[k]);
    sigdelset(&wait_mask, SIGCHLD);

    struct run r = {.dir = o.dir};
    struct account *a = calloc(1, sizeof(*a));
    if (!a)
        snprintf(r.error, sizeof(r.error), "out of memory");
    if (a && resolve_user(&o, a, &r) == 0)
        run_command(&r, &o, a, &wait_mask);
    else
        r.started_ms = r.ended_ms = now_ms();
    free(a);
    args_release(&o);
    return finish(&r);
}

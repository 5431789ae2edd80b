/*
 * shim.c - `gpuorch shim`: runs one attempt's command and records its outcome
 * atomically in the attempt directory (see shim.h).
 *
 * Signals: the handler only sets a flag. The forwarded signals and SIGCHLD
 * stay blocked except inside sigsuspend(), so a signal that arrives between
 * the loop's checks is not lost: it wakes the next sigsuspend at once.
 */
/* pipe2 and close_range are Linux calls, declared only under _GNU_SOURCE. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
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

#include <jansson.h>

#include "agent/cgroup.h"
#include "agent/shim.h"
#include "util/fsutil.h"
#include "util/jsonv.h"
#include "util/opts.h"
#include "util/errbuf.h"
#include "base/banned.h"

/* The status file is tiny; a bigger one is not ours. */
#define STATUS_MAX_BYTES 65536

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

/* Blocks until the child is reaped, forwarding signals meanwhile. */
static int wait_child(pid_t pid, const sigset_t *wait_mask, int *ret_status)
{
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
        child_changed = 0;
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            *ret_status = st;
            return 0;
        }
        if (r < 0 && errno != EINTR)
            return -errno;
        if (r == 0)
            sigsuspend(wait_mask);
    }
}

/* ---- outcome ---- */

struct run {
    const char *dir;
    int64_t started_ms, ended_ms;
    pid_t pid;
    int wait_status;
    uint64_t oom_kills; /* in the command's cgroup when it ended */
    char error[SHIM_ERROR_MAX];
};

/* Writes the status file; returns the shim's exit status. */
static int finish(const struct run *r)
{
    json_t *o = json_object();
    int code = 127;
    if (!r->error[0] && WIFSIGNALED(r->wait_status)) {
        code = 128 + WTERMSIG(r->wait_status);
        json_object_set_new(o, "signal", json_integer(WTERMSIG(r->wait_status)));
    } else {
        if (!r->error[0])
            code = WEXITSTATUS(r->wait_status);
        json_object_set_new(o, "exit_code", json_integer(code));
    }
    if (r->error[0])
        json_object_set_new(o, "error", json_string(r->error));
    json_object_set_new(o, "started_ms", json_integer(r->started_ms));
    json_object_set_new(o, "ended_ms", json_integer(r->ended_ms));
    json_object_set_new(o, "pid", json_integer(r->pid));
    if (r->oom_kills > 0)
        json_object_set_new(o, "oom_kills", json_integer((json_int_t)r->oom_kills));
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    char err[512] = "out of memory";
    char *line = s ? malloc(strlen(s) + 2) : NULL;
    int rc = GPO_ENOMEM;
    if (line) {
        snprintf(line, strlen(s) + 2, "%s\n", s);
        rc = write_atomic(r->dir, "status", line, err, sizeof(err));
    }
    free(line);
    free(s);
    if (rc) {
        fprintf(stderr, "gpuorch shim: cannot write the status: %s\n", err);
        return SHIM_EXIT_FAILURE;
    }
    return code;
}

static void write_pid(const char *dir, pid_t pid)
{
    char buf[32], err[512];
    snprintf(buf, sizeof(buf), "%ld\n", (long)pid);
    /* Not fatal: the status file, written later, carries the pid too. */
    if (write_atomic(dir, "pid", buf, err, sizeof(err)) != 0)
        fprintf(stderr, "gpuorch shim: cannot write the pid: %s\n", err);
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
    if (wait_child(pid, wait_mask, &r->wait_status) < 0 && !r->error[0])
        snprintf(r->error, sizeof(r->error), "waitpid: %s", strerror(errno));
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
    "usage: gpuorch shim --dir ATTEMPT_DIR [--user NAME [--allow-root]] [--cgroup DIR]\n"          \
    "                    [--workdir DIR] [--stdout PATH] [--stderr PATH] [--append]\n"             \
    "                    [--ready-fd FD] [--env-fd FD]\n"                                          \
    "                    -- COMMAND [ARG...]\n"

static int usage(const char *msg)
{
    fprintf(stderr, "gpuorch shim: %s\n" USAGE_LINE, msg);
    return SHIM_EXIT_FAILURE;
}

static void help(void)
{
    printf(USAGE_LINE
           "\n"
           "Runs one attempt's command for the node agent, in a session of its own so\n"
           "that it outlives the agent. It writes the command's pid to ATTEMPT_DIR/pid\n"
           "and, once it exits, its exit code or signal to ATTEMPT_DIR/status (JSON,\n"
           "written to a temporary file and renamed); stdout and stderr go to\n"
           "ATTEMPT_DIR/stdout and ATTEMPT_DIR/stderr unless given. SIGTERM, SIGINT\n"
           "and SIGHUP are passed on to the command's process group.\n\n"
           "  --user NAME    run the command as NAME (never uid 0 without --allow-root)\n"
           "  --cgroup DIR   put the command in cgroup DIR; the shim stays outside\n"
           "  --workdir DIR  run the command in DIR (default: the user's home, or /)\n"
           "  --stdout PATH, --stderr PATH\n"
           "                 its output files, truncated first unless --append; one\n"
           "                 path for both is opened once\n"
           "  --ready-fd FD  close FD once the pid file is written\n"
           "  --env-fd FD    the command's environment, NUL-separated NAME=VALUE\n"
           "                 strings read from FD (default: the shim's own)\n\n"
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

#define ARG(member) offsetof(struct shim_args, member)
#define STRING(name_, member)                                                                      \
    {                                                                                              \
        .name = name_, .type = OPTS_STRING, .flags = OPTS_NONEMPTY, .offset = ARG(member)          \
    }
#define DESCRIPTOR(name_, member)                                                                  \
    {                                                                                              \
        .name = name_, .type = OPTS_INT, .min = 3, .max = INT32_MAX, .offset = ARG(member)         \
    }

static const struct opts_opt shim_opts[] = {
    STRING("dir", dir),
    STRING("stdout", out),
    STRING("stderr", errpath),
    STRING("user", user),
    STRING("cgroup", cgroup),
    STRING("workdir", workdir),
    DESCRIPTOR("ready-fd", ready_arg),
    DESCRIPTOR("env-fd", env_arg),
    {.name = "allow-root", .type = OPTS_FLAG, .offset = ARG(allow_root)},
    {.name = "append", .type = OPTS_FLAG, .offset = ARG(append)},
    {.name = "help", .short_name = 'h', .type = OPTS_HELP, .offset = ARG(help)},
};

/* The options before "--", in order (the first mistake is the one told);
 * *ret_cmd: the index in argv of the word after "--", or 0 when there is
 * no "--". 0, 1 after --help, or SHIM_EXIT_FAILURE. */
static int read_flags(int argc, char **argv, struct shim_args *o, int *ret_cmd)
{
    struct opts p;
    opts_init(&p, argc - 1, argv + 1, OPTS_TABLE(shim_opts), 0);
    *ret_cmd = 0;
    for (;;) {
        const struct opts_opt *opt = NULL;
        const char *v = NULL;
        char err[256];
        int k = opts_next(&p, &opt, &v, err, sizeof(err));
        if (k == OPTS_END)
            return 0;
        if (k == OPTS_DASHDASH) {
            *ret_cmd = p.i + 1;
            return 0;
        }
        if (k == OPTS_ARG || p.fault == OPTS_FAULT_UNKNOWN || p.fault == OPTS_FAULT_EXTRA_VALUE)
            return usage("unknown option");
        if (k < 0 || (v && !*v))
            return usage("an option lacks its value");
        if (opt->type == OPTS_HELP) {
            help();
            return 1;
        }
        if (opts_store(opt, v, o, err, sizeof(err)) != 0) {
            char name[32], msg[64];
            snprintf(msg, sizeof(msg), "%s: not an open descriptor above 2",
                     opts_name(opt, name, sizeof(name)));
            return usage(msg);
        }
    }
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
        fprintf(stderr, "gpuorch shim: setsid: %s\n", strerror(errno));
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

/* ---- reading the outcome ---- */

struct status_doc {
    int64_t exit_code, signal, started_ms, ended_ms, pid, oom_kills;
    char *error;
    enum jsonv_presence has_exit, has_signal;
};

static const struct jsonv_field status_fields[] = {
    {.name = "exit_code",
     .kind = JSONV_INT64,
     .flags = JSONV_PRESENCE,
     .offset = offsetof(struct status_doc, exit_code),
     .min = 0,
     .max = 255,
     .presence_offset = offsetof(struct status_doc, has_exit)},
    {.name = "signal",
     .kind = JSONV_INT64,
     .flags = JSONV_PRESENCE,
     .offset = offsetof(struct status_doc, signal),
     .min = 1,
     .max = 64,
     .presence_offset = offsetof(struct status_doc, has_signal)},
    {.name = "error",
     .kind = JSONV_STRING,
     .offset = offsetof(struct status_doc, error),
     .max = 4096},
    {.name = "started_ms",
     .kind = JSONV_INT64,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct status_doc, started_ms),
     .min = 0,
     .max = INT64_MAX},
    {.name = "ended_ms",
     .kind = JSONV_INT64,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct status_doc, ended_ms),
     .min = 0,
     .max = INT64_MAX},
    {.name = "pid",
     .kind = JSONV_INT64,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct status_doc, pid),
     .min = 0,
     .max = INT32_MAX},
    {.name = "oom_kills",
     .kind = JSONV_INT64,
     .offset = offsetof(struct status_doc, oom_kills),
     .min = 0,
     .max = INT64_MAX},
};
#define NSTATUS_FIELDS (sizeof(status_fields) / sizeof(status_fields[0]))

static int decode_status(const char *path, const char *buf, size_t len, struct shim_status *ret,
                         char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o)
        return errbuf_set(err, errlen, GPO_ECORRUPT, "%s: %s", path, jerr.text);
    struct status_doc d = {0};
    char msg[256];
    int rc = jsonv_decode(o, status_fields, NSTATUS_FIELDS, &d, msg, sizeof(msg));
    json_decref(o);
    if (rc == GPO_ENOMEM)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    if (rc)
        return errbuf_set(err, errlen, GPO_ECORRUPT, "%s: %s", path, msg);
    if ((d.has_exit == JSONV_GIVEN) == (d.has_signal == JSONV_GIVEN)) {
        jsonv_release(status_fields, NSTATUS_FIELDS, &d);
        return errbuf_set(err, errlen, GPO_ECORRUPT, "%s: expected one of exit_code and signal",
                          path);
    }
    *ret = (struct shim_status){.signaled = d.has_signal == JSONV_GIVEN,
                                .exit_code = (int)d.exit_code,
                                .signal = (int)d.signal,
                                .started_ms = d.started_ms,
                                .ended_ms = d.ended_ms,
                                .pid = (pid_t)d.pid,
                                .oom_kills = (uint64_t)d.oom_kills};
    snprintf(ret->error, sizeof(ret->error), "%s", d.error ? d.error : "");
    jsonv_release(status_fields, NSTATUS_FIELDS, &d);
    return 0;
}

int shim_read_status(const char *dir, struct shim_status *ret, char *err, size_t errlen)
{
    if (!dir || !ret)
        return errbuf_set(err, errlen, GPO_EINVAL, "shim_read_status: NULL argument");
    char path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s/status", dir) >= sizeof(path))
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: path too long", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT
                   ? errbuf_set(err, errlen, GPO_ENOENT, "%s: no status yet", path)
                   : errbuf_set(err, errlen, GPO_EIO, "open %s: %s", path, strerror(errno));
    char *buf = malloc(STATUS_MAX_BYTES + 1);
    size_t len = 0;
    ssize_t n = 0;
    while (buf && len < STATUS_MAX_BYTES + 1 &&
           ((n = read(fd, buf + len, STATUS_MAX_BYTES + 1 - len)) > 0 || (n < 0 && errno == EINTR)))
        len += n > 0 ? (size_t)n : 0;
    int e = errno;
    close(fd);
    int rc;
    if (!buf)
        rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    else if (n < 0)
        rc = errbuf_set(err, errlen, GPO_EIO, "read %s: %s", path, strerror(e));
    else if (len > STATUS_MAX_BYTES)
        rc = errbuf_set(err, errlen, GPO_ECORRUPT, "%s: larger than %d bytes", path,
                        STATUS_MAX_BYTES);
    else
        rc = decode_status(path, buf, len, ret, err, errlen);
    free(buf);
    return rc;
}

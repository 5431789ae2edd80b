/*
 * privsrv.c - the agent's privileged process (privsrv.h).
 *
 * It receives one message at a time, finds its type in a static table that
 * also gives the exact size, checks each field, and only then acts. Its only
 * other events are its children's deaths: SIGCHLD stays blocked except
 * inside ppoll, whose wake-up reaps them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/close_range.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/cgroup.h"
#include "agent/journal.h"
#include "agent/priv.h"
#include "agent/privsrv.h"
#include "agent/privsrv_check.h"
#include "gpu/gpu.h"
#include "util/errbuf.h"
#include "util/fsutil.h"
#include "base/banned.h"

/* How long a launch waits for the shim to write its pid file. Only a hung
 * shim takes this long; the launch then succeeds anyway. */
#define READY_TIMEOUT_MS 30000

/* The privileged process's state: a copy of the configuration. */
struct privsrv {
    int fd;
    char attempts[PRIV_PATH_MAX];    /* STATE_DIR/attempts */
    char shim_exe[PRIV_PATH_MAX];    /* resolved and checked at start (check_exe) */
    char state[PRIV_PATH_MAX];       /* STATE_DIR */
    char mps_control[PRIV_PATH_MAX]; /* as shim_exe; "": none */
    char fence_file[PRIV_PATH_MAX];  /* every shim's --fence; "": none */
    struct cgroup_root *cg;          /* NULL: process groups */
    bool allow_root;
    bool cgroup_root_ours; /* remove the cgroup root at exit */
    gid_t agent_gid;
    uid_t agent_uid;
    uid_t uid; /* its own, effective */
    gid_t gid;
    char name[PRIV_USER_MAX]; /* its own user's name; "" without a passwd entry */
    char nvml[PRIV_PATH_MAX]; /* the NVML library for MIG changes; "": the default */
    struct gpu_backend *gpus; /* opened at the first MIG change (in the served child) */
};

/* ==== the privileged side: checks that need the system ==== */

/* Who the command runs as: the named user, or the privileged process's own. */
struct runas {
    char name[PRIV_USER_MAX]; /* for the shim's --user; "" without a passwd entry */
    uid_t uid;
    gid_t gid;
};

/* The launch's user, looked up, then checked (privsrv_check_runas). */
static int check_user(const struct privsrv *s, const struct priv_req_launch *q, struct runas *ra,
                      char *msg, size_t len)
{
    *ra = (struct runas){.uid = s->uid, .gid = s->gid};
    /* Named even when it is our own, so that the shim sets HOME and friends. */
    memcpy(ra->name, q->has_user ? q->unix_user : s->name, sizeof(ra->name));
    if (q->has_user) {
        struct passwd pw, *res = NULL;
        char buf[16384];
        int e = getpwnam_r(q->unix_user, &pw, buf, sizeof(buf), &res);
        if (!res)
            return errbuf_set(msg, len, GPO_EINVAL, "unix_user: %s: %s", q->unix_user,
                              e ? strerror(e) : "no such user");
        ra->uid = pw.pw_uid;
        ra->gid = pw.pw_gid;
    }
    struct privsrv_self self = {.uid = s->uid, .allow_root = s->allow_root};
    return privsrv_check_runas(&self, q->has_user ? q->unix_user : NULL, ra->uid, msg, len);
}

/* ==== the privileged side: files ==== */

/* DIR/NAME written whole or not at all (fsutil_write_atomic), mode 0640:
 * the agent reads it through the attempt directory's group. */
static int write_atomic(const char *dir, const char *name, const char *data, char *msg, size_t len)
{
    char path[PRIV_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return fsutil_write_atomic(path, data, strlen(data), 0640, 0, msg, len);
}

static bool exists_in(const char *dir, const char *name)
{
    struct stat st;
    char path[PRIV_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return lstat(path, &st) == 0;
}

/* ATTEMPTS/J.A into buf. */
static void attempt_dir(const struct privsrv *s, uint64_t job, uint32_t attempt, char *buf,
                        size_t len)
{
    snprintf(buf, len, "%s/%" PRIu64 ".%" PRIu32, s->attempts, job, attempt);
}

/* Creates (or, after a launch that never got as far as the shim, reuses)
 * the attempt directory: 02750, the privileged user's, group agent_gid. */
static int make_attempt_dir(const struct privsrv *s, const char *dir, char *msg, size_t len)
{
    struct stat st;
    if (mkdir(dir, 0750) < 0) {
        if (errno != EEXIST)
            return errbuf_set(msg, len, GPO_EIO, "mkdir %s: %s", dir, strerror(errno));
        if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != s->uid)
            return errbuf_set(msg, len, GPO_EIO, "%s: exists and is not our directory", dir);
        if (exists_in(dir, "status") || exists_in(dir, "pid"))
            return errbuf_set(msg, len, GPO_EEXIST, "%s: this attempt was launched already", dir);
    }
    /* Through a descriptor of the directory itself: a symlink put in its
     * place since the mkdir is refused, never followed as root. */
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0 || st.st_uid != s->uid ||
        fchown(fd, s->uid, s->agent_gid) < 0 || fchmod(fd, 02750) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return errbuf_set(msg, len, GPO_EIO, "chown/chmod %s: %s", dir, strerror(e));
    }
    close(fd);
    return 0;
}

static int write_attempt_json(const char *dir, const struct runas *ra,
                              const struct priv_req_launch *q, const char *cgroup, char *msg,
                              size_t len)
{
    char out[2 * PRIV_PATH_MAX], errp[2 * PRIV_PATH_MAX];
    errbuf_set(out, sizeof(out), 0, "%s%s", q->has_stdout ? "" : dir,
               q->has_stdout ? q->stdout_path : "/stdout");
    errbuf_set(errp, sizeof(errp), 0, "%s%s", q->has_stderr ? "" : dir,
               q->has_stderr ? q->stderr_path : "/stderr");
    json_t *o = json_pack("{s:I,s:I,s:s,s:s,s:s}", "uid", (json_int_t)ra->uid, "gid",
                          (json_int_t)ra->gid, "stdout", out, "stderr", errp, "cgroup", cgroup);
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    char *line = text ? malloc(strlen(text) + 2) : NULL;
    int rc = errbuf_set(msg, len, GPO_ENOMEM, "out of memory");
    if (line) {
        snprintf(line, strlen(text) + 2, "%s\n", text);
        rc = write_atomic(dir, "attempt.json", line, msg, len);
    }
    free(line);
    free(text);
    return rc;
}

/* The attempt's cgroup as attempt.json records it ("" for none). Returns 0,
 * GPO_ENOENT (no attempt directory), GPO_EIO. */
static int read_attempt_cgroup(const char *dir, char *cg, size_t cglen, char *msg, size_t len)
{
    struct stat st;
    char path[PRIV_PATH_MAX + 64];
    if (lstat(dir, &st) < 0)
        return errno == ENOENT ? errbuf_set(msg, len, GPO_ENOENT, "%s: no such attempt", dir)
                               : errbuf_set(msg, len, GPO_EIO, "%s: %s", dir, strerror(errno));
    cg[0] = '\0';
    snprintf(path, sizeof(path), "%s/attempt.json", dir);
    json_error_t jerr;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!o) /* a launch that stopped before it: no process either */
        return access(path, F_OK) == 0 ? errbuf_set(msg, len, GPO_EIO, "%s: %s", path, jerr.text)
                                       : 0;
    const char *s = json_string_value(json_object_get(o, "cgroup"));
    int rc = 0;
    if (s && strlen(s) >= cglen)
        rc = errbuf_set(msg, len, GPO_EIO, "%s: cgroup path too long", path);
    else if (s)
        snprintf(cg, cglen, "%s", s);
    json_decref(o);
    return rc;
}

/* The command's process group, from ATTEMPT_DIR/pid; 0 when there is none. */
static pid_t read_pgid(const char *dir)
{
    char path[PRIV_PATH_MAX + 64], buf[32] = "";
    snprintf(path, sizeof(path), "%s/pid", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    return privsrv_check_pgid(buf, n > 0 ? (size_t)n : 0);
}

/* ==== the privileged side: actions ==== */

/* SHIM_EXE --dir D [--user U [--allow-root]] [--cgroup C] [--workdir W]
 *   [--stdout P] [--stderr P] --ready-fd 3 --env-fd 4 [--fence F] -- ARGV.
 *   Caller frees with free(). */
static const char **shim_command(const struct privsrv *s, const struct priv_req_launch *q,
                                 const struct runas *ra, const char *dir, const char *cg,
                                 char **cmd)
{
    const char **v = calloc(24 + (size_t)q->argc, sizeof(*v));
    size_t n = 0;
    if (!v)
        return NULL;
    v[n++] = s->shim_exe;
    v[n++] = "--dir";
    v[n++] = dir;
    if (ra->name[0]) {
        v[n++] = "--user";
        v[n++] = ra->name;
        if (ra->uid == 0)
            v[n++] = "--allow-root";
    }
    const char *opt[][2] = {{"--cgroup", cg[0] ? cg : NULL},
                            {"--workdir", q->has_workdir ? q->workdir : NULL},
                            {"--stdout", q->has_stdout ? q->stdout_path : NULL},
                            {"--stderr", q->has_stderr ? q->stderr_path : NULL},
                            {"--ready-fd", "3"},
                            {"--env-fd", "4"},
                            {"--fence", s->fence_file[0] ? s->fence_file : NULL}};
    for (size_t i = 0; i < sizeof(opt) / sizeof(opt[0]); i++) {
        if (!opt[i][1])
            continue;
        v[n++] = opt[i][0];
        v[n++] = opt[i][1];
    }
    if (q->append) /* sbatch's --open-mode=append */
        v[n++] = "--append";
    v[n++] = "--";
    for (uint32_t i = 0; i < q->argc; i++)
        v[n++] = cmd[i];
    v[n] = NULL;
    return v;
}

/* In the forked child: stdin /dev/null, stdout and stderr to shim.log, the
 * ready pipe on 3, the job's environment to read on 4, nothing else open;
 * then the shim, with an environment of our own: the shim runs as root, and
 * nothing of a job's (LD_PRELOAD, ...) may reach it. Never returns; an exec
 * failure is reported on the ready pipe. */
static void exec_shim(const struct privsrv *s, const char *dir, const char **argv, int ready,
                      int env)
{
    static char *const shim_env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    const int reset[] = {SIGCHLD, SIGINT, SIGHUP, SIGPIPE};
    for (size_t i = 0; i < sizeof(reset) / sizeof(reset[0]); i++)
        sigaction(reset[i], &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    char log[PRIV_PATH_MAX + 64];
    snprintf(log, sizeof(log), "%s/shim.log", dir);
    int rfd = fcntl(ready, F_DUPFD_CLOEXEC, 10), efd = fcntl(env, F_DUPFD_CLOEXEC, 10);
    int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
    int lfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0640);
    const char *what = "open";
    int report = rfd >= 0 ? rfd : ready;
    int e = errno;
    if (rfd >= 0 && efd >= 0 && nul >= 0 && lfd >= 0) {
        what = "dup2";
        if (dup2(nul, 0) < 0 || dup2(lfd, 1) < 0 || dup2(lfd, 2) < 0 || dup2(rfd, 3) < 0 ||
            dup2(efd, 4) < 0) {
            e = errno;
        } else {
            report = 3;
            close_range(5, ~0U, 0);
            /* The privileged process's 027 is not the job's. */
            umask(022);
            execve(s->shim_exe, (char *const *)argv, shim_env);
            e = errno;
            what = "exec";
        }
    }
    char m[PRIV_MSG_MAX];
    int n = snprintf(m, sizeof(m), "%s %s: %s", what, s->shim_exe, strerror(e));
    if (write(report, m, n > 0 && (size_t)n < sizeof(m) ? (size_t)n : sizeof(m) - 1) < 0)
        _exit(126);
    _exit(127);
}

/* Waits for end-of-file (the shim wrote its pid file, or gave up) or a
 * message (exec failed) on the ready pipe. Returns the message's length, 0
 * at end-of-file, GPO_ETIMEDOUT (or poll's -errno) when none came. */
static ssize_t wait_ready(int fd, char *buf, size_t len)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        int64_t left = READY_TIMEOUT_MS - ((int64_t)(t.tv_sec - t0.tv_sec) * 1000 +
                                           (t.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0)
            return GPO_ETIMEDOUT;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, (int)left);
        if (r < 0 && errno != EINTR)
            return -errno;
        if (r <= 0)
            continue;
        ssize_t n = read(fd, buf, len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        return n < 0 ? 0 : n;
    }
}

/* Forks the shim and waits until it is ready. */
static int spawn(const struct privsrv *s, const struct priv_req_launch *q, const struct runas *ra,
                 const char *dir, const char *cg, char **cmd, struct priv_reply *rep)
{
    char *msg = rep->msg;
    size_t len = sizeof(rep->msg);
    const char **argv = shim_command(s, q, ra, dir, cg, cmd);
    int ready[2], env[2];
    if (!argv)
        return errbuf_set(msg, len, GPO_ENOMEM, "out of memory");
    if (pipe2(ready, O_CLOEXEC) < 0) {
        free(argv);
        return errbuf_set(msg, len, GPO_EIO, "pipe: %s", strerror(errno));
    }
    if (pipe2(env, O_CLOEXEC) < 0) {
        int e = errno;
        free(argv);
        close(ready[0]);
        close(ready[1]);
        return errbuf_set(msg, len, GPO_EIO, "pipe: %s", strerror(e));
    }
    /* Room for the whole environment, so the write below never waits. */
    fcntl(env[1], F_SETPIPE_SZ, 2 * PRIV_STRINGS_MAX);
    pid_t pid = fork();
    if (pid == 0)
        exec_shim(s, dir, argv, ready[1], env[0]);
    int e = errno;
    close(ready[1]);
    close(env[0]);
    free(argv);
    /* A shim that died meanwhile (EPIPE) shows in the ready pipe below. */
    for (uint32_t i = 0; pid > 0 && i < q->nenv; i++) {
        const char *kv = cmd[q->argc + 1 + i];
        if (fsutil_write_all(env[1], kv, strlen(kv) + 1) < 0)
            break;
    }
    close(env[1]);
    if (pid < 0) {
        close(ready[0]);
        return errbuf_set(msg, len, GPO_EIO, "fork: %s", strerror(e));
    }
    char why[PRIV_MSG_MAX];
    ssize_t n = wait_ready(ready[0], why, sizeof(why));
    close(ready[0]);
    if (n > 0) {
        why[n] = '\0';
        return errbuf_set(msg, len, GPO_EIO, "%s", why);
    }
    if (n == 0 && !exists_in(dir, "pid") && !exists_in(dir, "status"))
        return errbuf_set(msg, len, GPO_EIO,
                          "the shim (pid %ld) stopped before the command "
                          "started: see %s/shim.log",
                          (long)pid, dir);
    /* Not reaped before the next request: its /proc entry is still there. */
    uint64_t start;
    if (journal_proc_start_time(pid, &start) != 0)
        return errbuf_set(msg, len, GPO_EIO, "the shim (pid %ld): no start time in /proc",
                          (long)pid);
    rep->pid = pid;
    rep->start_time = start;
    return 0;
}

/* A script job's file, written by the agent in STATE_DIR/scripts: checked
 * (privsrv_check_script), then given to the job's user, mode 0700. */
static int give_script(const struct privsrv *s, const struct runas *ra, const char *argv0,
                       uint64_t job, uint32_t attempt, char *msg, size_t len)
{
    char want[PRIV_PATH_MAX + 64];
    /* s->attempts is STATE_DIR/attempts: its parent holds scripts/. */
    size_t base = strlen(s->attempts) - strlen("attempts");
    snprintf(want, sizeof(want), "%.*sscripts/%" PRIu64 ".%" PRIu32, (int)base, s->attempts, job,
             attempt);
    int fd = open(want, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return errbuf_set(msg, len, GPO_EINVAL, "script: %s: %s", want, strerror(e));
    }
    int rc = privsrv_check_script(argv0, want, st.st_mode, st.st_uid, (uint64_t)st.st_nlink,
                                  s->agent_uid, msg, len);
    if (!rc && (fchown(fd, ra->uid, ra->gid) != 0 || fchmod(fd, 0700) != 0))
        rc = errbuf_set(msg, len, GPO_EIO, "script: chown %s: %s", want, strerror(errno));
    close(fd);
    return rc;
}

static void do_launch(struct privsrv *s, const void *req, struct priv_reply *rep)
{
    const struct priv_req_launch *q = req;
    char *msg = rep->msg;
    size_t len = sizeof(rep->msg);
    struct runas ra;
    char **cmd = NULL;
    if ((rep->rc = privsrv_check_launch(q, &cmd, msg, len)))
        return;
    if ((rep->rc = check_user(s, q, &ra, msg, len)))
        goto out;
    if (q->has_script && (rep->rc = give_script(s, &ra, cmd[0], q->job, q->attempt, msg, len)))
        goto out;
    char dir[PRIV_PATH_MAX + 32], cg[CGROUP_PATH_MAX] = "", why[PRIV_MSG_MAX];
    attempt_dir(s, q->job, q->attempt, dir, sizeof(dir));
    if ((rep->rc = make_attempt_dir(s, dir, msg, len)))
        goto out;
    if (s->cg && cgroup_create(s->cg, q->job, q->attempt, q->cpu_milli, q->mem_mib, cg, sizeof(cg),
                               why, sizeof(why)) != 0) {
        rep->rc = errbuf_set(msg, len, GPO_EIO, "cgroup: %s", why);
        goto out;
    }
    rep->rc = write_attempt_json(dir, &ra, q, cg, msg, len);
    if (!rep->rc)
        rep->rc = spawn(s, q, &ra, dir, cg, cmd, rep);
    if (rep->rc && cg[0])
        cgroup_remove(cg, NULL, 0);
out:
    free(cmd);
}

/* Checks a signal or cleanup request; fills the attempt's directory and
 * cgroup ("" for none). */
static int check_attempt(const struct privsrv *s, const struct priv_req_attempt *q, char *dir,
                         size_t dirlen, char *cg, size_t cglen, char *msg, size_t len)
{
    int rc = privsrv_check_attempt(q, msg, len);
    if (rc)
        return rc;
    attempt_dir(s, q->job, q->attempt, dir, dirlen);
    if ((rc = read_attempt_cgroup(dir, cg, cglen, msg, len)))
        return rc;
    if (cg[0] && !privsrv_check_cgroup(cg, q->job, q->attempt))
        return errbuf_set(msg, len, GPO_EIO, "%s/attempt.json: cgroup %s is not this attempt's",
                          dir, cg);
    return 0;
}

/* The job's signal to the command's process alone (--signal=B:): its pid
 * is its process group's (the shim made it a leader), and where there is a
 * cgroup it must still be in it. */
static void signal_leader(const char *dir, const char *cg, int sig, struct priv_reply *rep)
{
    pid_t pid = read_pgid(dir);
    bool in = pid > 0 && !cg[0];
    pid_t *pids = NULL;
    size_t n = 0;
    char why[PRIV_MSG_MAX];
    if (pid > 0 && cg[0] && cgroup_pids(cg, &pids, &n, why, sizeof(why)) == 0) {
        for (size_t k = 0; k < n && !in; k++)
            in = pids[k] == pid;
        free(pids);
    }
    if (in && kill(pid, sig) < 0 && errno != ESRCH)
        rep->rc = errbuf_set(rep->msg, sizeof(rep->msg), GPO_EIO, "kill %ld: %s", (long)pid,
                             strerror(errno));
}

static void do_signal(struct privsrv *s, const void *req, struct priv_reply *rep)
{
    const struct priv_req_attempt *q = req;
    char dir[PRIV_PATH_MAX + 32], cg[CGROUP_PATH_MAX];
    if ((rep->rc =
             check_attempt(s, q, dir, sizeof(dir), cg, sizeof(cg), rep->msg, sizeof(rep->msg))))
        return;
    if (q->flags & PRIV_SIGNAL_LEADER) {
        signal_leader(dir, cg, q->sig, rep);
        return;
    }
    if (cg[0]) {
        char why[PRIV_MSG_MAX];
        int rc = q->sig == SIGKILL ? cgroup_kill(cg, why, sizeof(why))
                                   : cgroup_signal(cg, q->sig, why, sizeof(why));
        if (rc && rc != GPO_ENOENT)
            rep->rc = errbuf_set(rep->msg, sizeof(rep->msg), GPO_EIO, "%s", why);
        return;
    }
    pid_t pg = read_pgid(dir);
    if (pg > 0 && kill(-pg, q->sig) < 0 && errno != ESRCH)
        rep->rc = errbuf_set(rep->msg, sizeof(rep->msg), GPO_EIO, "kill -%ld: %s", (long)pg,
                             strerror(errno));
}

static void do_cleanup(struct privsrv *s, const void *req, struct priv_reply *rep)
{
    const struct priv_req_attempt *q = req;
    char dir[PRIV_PATH_MAX + 32], cg[CGROUP_PATH_MAX];
    if ((rep->rc =
             check_attempt(s, q, dir, sizeof(dir), cg, sizeof(cg), rep->msg, sizeof(rep->msg))))
        return;
    rep->empty = 1;
    if (cg[0]) {
        char why[PRIV_MSG_MAX];
        bool populated = false;
        int rc = cgroup_populated(cg, &populated, why, sizeof(why));
        if (rc == 0 && !populated)
            rc = cgroup_remove(cg, why, sizeof(why));
        if (rc == GPO_ENOENT)
            rc = 0;
        if (rc == GPO_EBUSY || (rc == 0 && populated))
            rep->empty = 0;
        else if (rc)
            rep->rc = errbuf_set(rep->msg, sizeof(rep->msg), GPO_EIO, "%s", why);
        return;
    }
    pid_t pg = read_pgid(dir);
    if (pg > 0 && (kill(-pg, 0) == 0 || errno == EPERM))
        rep->empty = 0;
}

static void do_attribute(struct privsrv *s, const void *req, struct priv_reply *rep)
{
    privsrv_do_attribute(s->attempts, req, rep);
}

/* A MIG change through the process's own NVML backend, opened once. */
static void do_mig(struct privsrv *s, const void *req, struct priv_reply *rep)
{
    const struct priv_req_mig *q = req;
    if ((rep->rc = privsrv_check_mig(q, rep->msg, sizeof(rep->msg))))
        return;
    if (!s->gpus && (rep->rc = gpu_backend_open(s->nvml[0] ? s->nvml : NULL, &s->gpus, rep->msg,
                                                sizeof(rep->msg))))
        return;
    if (q->gpu >= gpu_count(s->gpus)) {
        rep->rc =
            errbuf_set(rep->msg, sizeof(rep->msg), GPO_EINVAL,
                       "gpu: %" PRIu32 ", but NVML finds %u GPU(s)", q->gpu, gpu_count(s->gpus));
        return;
    }
    struct gpu_mig_instance made;
    rep->rc = q->op == PRIV_MIG_CREATE
                  ? gpu_mig_create(s->gpus, q->gpu, q->profile_id, q->start, &made, rep->msg,
                                   sizeof(rep->msg))
                  : gpu_mig_destroy(s->gpus, q->gpu, q->instance, rep->msg, sizeof(rep->msg));
}

static int do_step(struct privsrv *s, const void *req, struct priv_reply *rep)
{
    struct privsrv_self self = {.uid = s->uid, .allow_root = s->allow_root};
    return privsrv_do_step(s->attempts, &self, req, rep);
}

static void do_mps(struct privsrv *s, const void *req, struct priv_reply *rep)
{
    privsrv_do_mps(s->state, s->mps_control, req, rep);
}

/* The table of requests: type and handler (privsrv_check_request checks the
 * size). Nothing else is done. A handler may return a descriptor to pass
 * with the reply (closed once sent), else -1. */
static const struct handler {
    uint32_t type;
    void (*fn)(struct privsrv *s, const void *req, struct priv_reply *rep);
    int (*fn_fd)(const char *attempts, const void *req, struct priv_reply *rep);
    int (*fn_srv_fd)(struct privsrv *s, const void *req, struct priv_reply *rep);
} handlers[] = {
    {PRIV_REQ_LAUNCH, do_launch, NULL, NULL},
    {PRIV_REQ_SIGNAL, do_signal, NULL, NULL},
    {PRIV_REQ_CLEANUP, do_cleanup, NULL, NULL},
    {PRIV_REQ_ATTRIBUTE, do_attribute, NULL, NULL},
    {PRIV_REQ_LOG_OPEN, NULL, privsrv_do_log_open, NULL},
    {PRIV_REQ_STEP, NULL, NULL, do_step},
    {PRIV_REQ_STEP_PTY, NULL, NULL, do_step},
    {PRIV_REQ_MIG, do_mig, NULL, NULL},
    {PRIV_REQ_MPS, do_mps, NULL, NULL},
};

/* Answers one request into rep; returns the descriptor to pass, or -1. */
static int dispatch(struct privsrv *s, const void *buf, size_t n, struct priv_reply *rep)
{
    uint32_t type;
    if ((rep->rc = privsrv_check_request(buf, n, &type, rep->msg, sizeof(rep->msg))))
        return -1;
    for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++) {
        if (handlers[i].type != type)
            continue;
        if (handlers[i].fn_fd)
            return handlers[i].fn_fd(s->attempts, buf, rep);
        if (handlers[i].fn_srv_fd)
            return handlers[i].fn_srv_fd(s, buf, rep);
        handlers[i].fn(s, buf, rep);
        return -1;
    }
    rep->rc = errbuf_set(rep->msg, sizeof(rep->msg), GPO_EINVAL, "type: %" PRIu32 " has no handler",
                         type);
    return -1;
}

/* Wakes ppoll; the loop reaps. */
static void on_child(int sig)
{
    (void)sig;
}

/* The socket on 3, /dev/null on 0..2, nothing else open; SIGCHLD blocked but
 * in ppoll; the terminal's SIGINT and SIGHUP ignored (the agent decides). */
static void become_server(struct privsrv *s, sigset_t *ret_waitmask)
{
    prctl(PR_SET_NAME, "gpuorch-priv", 0, 0, 0);
    if (s->fd != 3 && dup3(s->fd, 3, O_CLOEXEC) < 0)
        _exit(1);
    s->fd = 3;
    close_range(4, ~0U, 0);
    if (chdir("/") < 0)
        _exit(1);
    umask(027); /* what it writes is for the agent's group, read-only */
    int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (nul < 0)
        _exit(1);
    for (int i = 0; i < 3; i++)
        if (nul != i && dup2(nul, i) < 0)
            _exit(1);
    if (nul > 3)
        close(nul);
    struct sigaction sa = {.sa_handler = on_child};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGPIPE, &sa, NULL);
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    sigprocmask(SIG_SETMASK, &block, NULL);
    sigemptyset(ret_waitmask);
}

/* The privileged process: one request, one reply, until the socket closes. */
void privsrv_serve(struct privsrv *s, int fd)
{
    s->fd = fd;
    sigset_t waitmask;
    become_server(s, &waitmask);
    void *buf = malloc(sizeof(struct priv_req_launch));
    void *reply = malloc(sizeof(struct priv_reply));
    if (!buf || !reply)
        _exit(1);
    for (;;) {
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
        int r = ppoll(&pfd, 1, NULL, &waitmask);
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0)
            continue;
        /* MSG_TRUNC: n is the whole message's size, so an oversized one is
         * refused by its size rather than read in part. No request carries a
         * descriptor: one that came is closed. */
        int stray = -1;
        ssize_t n = privsrv_recv(s->fd, buf, sizeof(struct priv_req_launch), &stray);
        if (stray >= 0)
            close(stray);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* the agent is gone */
        struct priv_reply *rep = reply;
        memset(rep, 0, sizeof(*rep));
        int pass = dispatch(s, buf, (size_t)n, rep);
        ssize_t sent = privsrv_send(s->fd, rep, sizeof(*rep), pass);
        if (pass >= 0)
            close(pass);
        if (sent != (ssize_t)sizeof(*rep))
            break;
    }
    /* The node's own cgroup directory goes once no attempt's cgroup is left
     * in it (rmdir refuses while one is: running jobs keep theirs). */
    if (s->cg && s->cgroup_root_ours)
        cgroup_remove(cgroup_root_path(s->cg), NULL, 0); /* with its v1 directories */
    _exit(0);
}

/* ==== its configuration, checked in the agent before the fork ==== */

/* Whether st may be trusted with what runs as root: ours (or root's), and
 * writable by nobody else. */
static bool trusted(const struct stat *st)
{
    return (st->st_uid == 0 || st->st_uid == geteuid()) && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

/* A program the privileged process execs as root (the shim every launch
 * runs, the MPS control program), resolved once here (symbolic links
 * followed) into out (PRIV_PATH_MAX bytes) and checked: a regular
 * executable file, it and its directory owned by root or by us and
 * writable by no one else, so that nobody but root (or our own user) can
 * change what runs. `field` names it in messages. */
static int check_exe(const char *field, const char *path, char *out, char *err, size_t errlen)
{
    char *real = realpath(path, NULL);
    if (!real)
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: %s: %s", field, path, strerror(errno));
    struct stat st, dir;
    char *slash = strrchr(real, '/');
    int rc = 0;
    if ((size_t)snprintf(out, PRIV_PATH_MAX, "%s", real) >= PRIV_PATH_MAX)
        rc = errbuf_set(err, errlen, GPO_EINVAL, "%s: longer than %d bytes", field,
                        PRIV_PATH_MAX - 1);
    else if (stat(real, &st) != 0 || access(real, X_OK) != 0)
        rc = errbuf_set(err, errlen, GPO_EINVAL, "%s: %s: %s", field, real, strerror(errno));
    else if (!S_ISREG(st.st_mode) || !trusted(&st))
        rc = errbuf_set(err, errlen, GPO_EPERM,
                        "%s: %s: not a regular file of root's (or ours) that only its "
                        "owner may write",
                        field, real);
    if (!rc && slash) {
        *slash = '\0';
        if (stat(slash == real ? "/" : real, &dir) != 0 || !trusted(&dir))
            rc = errbuf_set(err, errlen, GPO_EPERM,
                            "%s: its directory %s is not root's (or ours), or others may "
                            "write to it",
                            field, slash == real ? "/" : real);
    }
    free(real);
    return rc;
}

static int check_config(const struct priv_config *cfg, struct privsrv *s, char *err, size_t errlen)
{
    if (!cfg || !cfg->state_dir || cfg->state_dir[0] != '/')
        return errbuf_set(err, errlen, GPO_EINVAL, "state_dir: not an absolute path");
    if (!cfg->shim_exe || cfg->shim_exe[0] != '/')
        return errbuf_set(err, errlen, GPO_EINVAL, "shim_exe: not an absolute path");
    /* Room for "/J.A/attempt.json" in the privileged side's buffers. */
    if ((size_t)snprintf(s->attempts, sizeof(s->attempts), "%s/attempts", cfg->state_dir) >=
        sizeof(s->attempts) - 64)
        return errbuf_set(err, errlen, GPO_EINVAL, "state_dir: longer than %d bytes",
                          PRIV_PATH_MAX - 128);
    if (cfg->mps_control && cfg->mps_control[0] != '/')
        return errbuf_set(err, errlen, GPO_EINVAL, "mps_control: not an absolute path");
    if (cfg->fence_file &&
        (cfg->fence_file[0] != '/' || (size_t)snprintf(s->fence_file, sizeof(s->fence_file), "%s",
                                                       cfg->fence_file) >= sizeof(s->fence_file)))
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "fence_file: not an absolute path of at most %d bytes",
                          PRIV_PATH_MAX - 1);
    snprintf(s->state, sizeof(s->state), "%s", cfg->state_dir);
    int rc = check_exe("shim_exe", cfg->shim_exe, s->shim_exe, err, errlen);
    if (!rc && cfg->mps_control)
        rc = check_exe("mps_control", cfg->mps_control, s->mps_control, err, errlen);
    if (rc)
        return rc;
    if (cfg->nvml && (size_t)snprintf(s->nvml, sizeof(s->nvml), "%s", cfg->nvml) >= sizeof(s->nvml))
        return errbuf_set(err, errlen, GPO_EINVAL, "nvml: longer than %d bytes", PRIV_PATH_MAX - 1);
    s->allow_root = cfg->allow_root;
    s->cgroup_root_ours = cfg->cgroup_root_ours;
    s->agent_gid = cfg->agent_gid;
    s->agent_uid = cfg->agent_uid;
    s->uid = geteuid();
    s->gid = getegid();
    struct passwd pw, *res = NULL;
    char buf[16384];
    if (getpwuid_r(s->uid, &pw, buf, sizeof(buf), &res) == 0 && res &&
        strlen(pw.pw_name) < sizeof(s->name))
        memcpy(s->name, pw.pw_name, strlen(pw.pw_name) + 1);
    if (mkdir(s->attempts, 0750) != 0 && errno != EEXIST)
        return errbuf_set(err, errlen, GPO_EIO, "mkdir %s: %s", s->attempts, strerror(errno));
    /* Also an existing one: the agent's group may have changed (--run-as). */
    int fd = open(s->attempts, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        rc = errbuf_set(err, errlen, GPO_EIO, "%s: %s", s->attempts, strerror(errno));
    else if (st.st_gid != s->agent_gid && fchown(fd, s->uid, s->agent_gid) != 0)
        rc = errbuf_set(err, errlen, GPO_EIO, "chown %s: %s", s->attempts, strerror(errno));
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Opens the cgroup root where one is configured; the note says how it went. */
static void open_cgroups(const struct priv_config *cfg, struct privsrv *s, char *note,
                         size_t notelen)
{
    char why[PRIV_MSG_MAX - 64];
    if (!cfg->cgroup_root) {
        errbuf_set(note, notelen, 0, "no cgroup root configured");
        return;
    }
    if (cgroup_root_open(cfg->cgroup_root, &s->cg, why, sizeof(why)) != 0) {
        s->cg = NULL;
        errbuf_set(note, notelen, 0, "cgroup root %s: %s", cfg->cgroup_root, why);
        return;
    }
    errbuf_set(note, notelen, 0, "cgroups under %s (CPU limits: %s, memory limits: %s)",
               cgroup_root_path(s->cg), cgroup_kind_name(cgroup_root_kind(s->cg, "cpu")),
               cgroup_kind_name(cgroup_root_kind(s->cg, "memory")));
}

int privsrv_new(const struct priv_config *cfg, struct privsrv **ret, char *note, size_t notelen,
                char *err, size_t errlen)
{
    struct privsrv *s = calloc(1, sizeof(*s));
    if (!s)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    s->fd = -1;
    int rc = check_config(cfg, s, err, errlen);
    if (rc) {
        free(s);
        return rc;
    }
    open_cgroups(cfg, s, note, notelen);
    *ret = s;
    return 0;
}

bool privsrv_has_cgroups(const struct privsrv *s)
{
    return s && s->cg;
}

void privsrv_free(struct privsrv *s)
{
    if (!s)
        return;
    cgroup_root_close(s->cg);
    gpu_backend_close(s->gpus);
    free(s);
}

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
#include <linux/close_range.h>
#include <signal.h>
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

#include "agent/shim.h"
#include "util/jsonv.h"
#include "util/errbuf.h"
#include "util/banned.h"

/* The status file is tiny; a bigger one is not ours. */
#define STATUS_MAX_BYTES 65536

/* The signals forwarded to the command's process group. */
static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP};
#define NFORWARDED (sizeof(forwarded) / sizeof(forwarded[0]))

/* Set by the handler, cleared by the loop: the only mutable globals. */
static volatile sig_atomic_t pending[NFORWARDED];
static volatile sig_atomic_t child_changed;

const char *shim_strerror(int err)
{
    switch (err) {
    case SHIM_OK:
        return "success";
#define SHIM_ERR_CASE(name, value, text)                                                           \
    case SHIM_##name:                                                                              \
        return text;
        SHIM_ERRNO_MAP(SHIM_ERR_CASE)
#undef SHIM_ERR_CASE
    }
    return "unknown error";
}

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

static int write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Writes DIR/NAME as a whole or not at all: NAME.tmp, fsync, rename, fsync of
 * the directory. On failure a message in err. */
static int write_atomic(const char *dir, const char *name, const char *data, char *err,
                        size_t errlen)
{
    char tmp[4096], path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path) ||
        (size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
        return errbuf_set(err, errlen, SHIM_EINVAL, "%s: path too long", dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0)
        return errbuf_set(err, errlen, SHIM_EIO, "open %s: %s", tmp, strerror(errno));
    const char *call = NULL;
    if (write_all(fd, data, strlen(data)) < 0)
        call = "write";
    else if (fsync(fd) < 0)
        call = "fsync";
    int e = errno;
    /* Closed before the rename: nothing touches the file once it has its name. */
    if (close(fd) < 0 && !call) {
        call = "close";
        e = errno;
    }
    if (!call && rename(tmp, path) < 0) {
        call = "rename";
        e = errno;
    }
    if (call) {
        unlink(tmp);
        return errbuf_set(err, errlen, SHIM_EIO, "%s %s: %s", call, tmp, strerror(e));
    }
    /* The rename is durable only once the directory is. */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) < 0) {
        e = errno;
        if (dfd >= 0)
            close(dfd);
        return errbuf_set(err, errlen, SHIM_EIO, "fsync %s: %s", dir, strerror(e));
    }
    close(dfd);
    return 0;
}

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

/* In the forked child: never returns. Reports an exec failure's errno on
 * `report` (close-on-exec, so a successful exec closes it with nothing sent). */
static void run_child(char **argv, const int fds[3], int report)
{
    setpgid(0, 0);
    struct sigaction sa = {.sa_handler = SIG_DFL};
    sigemptyset(&sa.sa_mask);
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaction(sig, &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int e = 0;
    for (int i = 0; i < 3 && !e; i++)
        if (dup2(fds[i], i) < 0)
            e = errno;
    if (!e) {
        cloexec_above_stdio();
        execvp(argv[0], argv);
        e = errno;
    }
    while (write(report, &e, sizeof(e)) < 0 && errno == EINTR)
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
            return -1;
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
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    char err[512] = "out of memory";
    char *line = s ? malloc(strlen(s) + 2) : NULL;
    int rc = SHIM_ENOMEM;
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

/* Opens stdin, stdout, stderr for the command; a message in r->error if not. */
static int open_stdio(struct run *r, const char *out, const char *errpath, int fds[3])
{
    char defout[4096], deferr[4096];
    snprintf(defout, sizeof(defout), "%s/stdout", r->dir);
    snprintf(deferr, sizeof(deferr), "%s/stderr", r->dir);
    const char *paths[3] = {"/dev/null", out ? out : defout, errpath ? errpath : deferr};
    for (int i = 0; i < 3; i++) {
        fds[i] = i == 0 ? open_high(paths[i], O_RDONLY, 0)
                        : open_high(paths[i], O_WRONLY | O_CREAT | O_APPEND, 0640);
        if (fds[i] < 0) {
            snprintf(r->error, sizeof(r->error), "open %s: %s", paths[i], strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* Forks and execs the command, then waits for it; fills r. */
static void run_command(struct run *r, char **argv, const int fds[3], const sigset_t *wait_mask)
{
    int report[2];
    r->started_ms = now_ms();
    if (pipe2(report, O_CLOEXEC) < 0) {
        snprintf(r->error, sizeof(r->error), "pipe: %s", strerror(errno));
        return;
    }
    pid_t pid = fork();
    if (pid == 0)
        run_child(argv, fds, report[1]);
    close(report[1]);
    if (pid < 0) {
        snprintf(r->error, sizeof(r->error), "fork: %s", strerror(errno));
        close(report[0]);
        return;
    }
    /* Also here, so that the group exists before any signal is forwarded. */
    setpgid(pid, pid);
    r->pid = pid;
    write_pid(r->dir, pid);
    int e = 0;
    ssize_t n;
    while ((n = read(report[0], &e, sizeof(e))) < 0 && errno == EINTR)
        ;
    close(report[0]);
    if (n == (ssize_t)sizeof(e))
        snprintf(r->error, sizeof(r->error), "execvp %s: %s", argv[0], strerror(e));
    if (wait_child(pid, wait_mask, &r->wait_status) < 0 && !r->error[0])
        snprintf(r->error, sizeof(r->error), "waitpid: %s", strerror(errno));
    r->ended_ms = now_ms();
}

static int usage(const char *msg)
{
    fprintf(stderr,
            "gpuorch shim: %s\n"
            "usage: gpuorch shim --dir ATTEMPT_DIR [--stdout PATH] [--stderr PATH] -- COMMAND "
            "[ARG...]\n",
            msg);
    return SHIM_EXIT_FAILURE;
}

int shim_main(int argc, char **argv)
{
    const char *dir = NULL, *out = NULL, *errpath = NULL;
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: gpuorch shim --dir ATTEMPT_DIR [--stdout PATH] [--stderr PATH] -- "
                   "COMMAND [ARG...]\n\n"
                   "Runs one attempt's command for the node agent, in a session of its own so\n"
                   "that it outlives the agent. It writes the command's pid to ATTEMPT_DIR/pid\n"
                   "and, once it exits, its exit code or signal to ATTEMPT_DIR/status (JSON,\n"
                   "written to a temporary file and renamed); stdout and stderr go to\n"
                   "ATTEMPT_DIR/stdout and ATTEMPT_DIR/stderr unless given. SIGTERM, SIGINT\n"
                   "and SIGHUP are passed on to the command's process group.\n\n"
                   "Exit status: the command's, 128 + its signal, or 125 on a usage error or\n"
                   "when the status cannot be written.\n");
            return 0;
        }
        const char **opt = strcmp(argv[i], "--dir") == 0      ? &dir
                           : strcmp(argv[i], "--stdout") == 0 ? &out
                           : strcmp(argv[i], "--stderr") == 0 ? &errpath
                                                              : NULL;
        if (!opt || i + 1 >= argc || !*argv[i + 1])
            return usage(opt ? "an option lacks its value" : "unknown option");
        *opt = argv[++i];
    }
    if (!dir)
        return usage("--dir is required");
    if (i + 1 >= argc)
        return usage("no command after --");
    char **cmd = argv + i + 1;

    /* A process group leader cannot setsid (EPERM); such a shim was started
     * by a shell with job control and already has a group of its own. */
    if (setsid() < 0 && errno != EPERM) {
        fprintf(stderr, "gpuorch shim: setsid: %s\n", strerror(errno));
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

    struct run r = {.dir = dir};
    int fds[3] = {-1, -1, -1};
    if (open_stdio(&r, out, errpath, fds) == 0)
        run_command(&r, cmd, fds, &wait_mask);
    else
        r.started_ms = r.ended_ms = now_ms();
    for (int k = 0; k < 3; k++)
        if (fds[k] >= 0)
            close(fds[k]);
    return finish(&r);
}

/* ---- reading the outcome ---- */

struct status_doc {
    int64_t exit_code, signal, started_ms, ended_ms, pid;
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
};
#define NSTATUS_FIELDS (sizeof(status_fields) / sizeof(status_fields[0]))

static int decode_status(const char *path, const char *buf, size_t len, struct shim_status *ret,
                         char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o)
        return errbuf_set(err, errlen, SHIM_ECORRUPT, "%s: %s", path, jerr.text);
    struct status_doc d = {0};
    char msg[256];
    int rc = jsonv_decode(o, status_fields, NSTATUS_FIELDS, &d, msg, sizeof(msg));
    json_decref(o);
    if (rc == JSONV_ENOMEM)
        return errbuf_set(err, errlen, SHIM_ENOMEM, "out of memory");
    if (rc)
        return errbuf_set(err, errlen, SHIM_ECORRUPT, "%s: %s", path, msg);
    if ((d.has_exit == JSONV_GIVEN) == (d.has_signal == JSONV_GIVEN)) {
        jsonv_release(status_fields, NSTATUS_FIELDS, &d);
        return errbuf_set(err, errlen, SHIM_ECORRUPT, "%s: expected one of exit_code and signal",
                          path);
    }
    *ret = (struct shim_status){.signaled = d.has_signal == JSONV_GIVEN,
                                .exit_code = (int)d.exit_code,
                                .signal = (int)d.signal,
                                .started_ms = d.started_ms,
                                .ended_ms = d.ended_ms,
                                .pid = (pid_t)d.pid};
    snprintf(ret->error, sizeof(ret->error), "%s", d.error ? d.error : "");
    jsonv_release(status_fields, NSTATUS_FIELDS, &d);
    return 0;
}

int shim_read_status(const char *dir, struct shim_status *ret, char *err, size_t errlen)
{
    if (!dir || !ret)
        return errbuf_set(err, errlen, SHIM_EINVAL, "shim_read_status: NULL argument");
    char path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s/status", dir) >= sizeof(path))
        return errbuf_set(err, errlen, SHIM_EINVAL, "%s: path too long", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT
                   ? errbuf_set(err, errlen, SHIM_ENOENT, "%s: no status yet", path)
                   : errbuf_set(err, errlen, SHIM_EIO, "open %s: %s", path, strerror(errno));
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
        rc = errbuf_set(err, errlen, SHIM_ENOMEM, "out of memory");
    else if (n < 0)
        rc = errbuf_set(err, errlen, SHIM_EIO, "read %s: %s", path, strerror(e));
    else if (len > STATUS_MAX_BYTES)
        rc = errbuf_set(err, errlen, SHIM_ECORRUPT, "%s: larger than %d bytes", path,
                        STATUS_MAX_BYTES);
    else
        rc = decode_status(path, buf, len, ret, err, errlen);
    free(buf);
    return rc;
}

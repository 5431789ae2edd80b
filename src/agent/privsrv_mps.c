/*
 * privsrv_mps.c - CUDA MPS control daemons, one per GPU, for the agent's
 * privileged process (priv.h: priv_mps; privsrv.h).
 *
 * NVIDIA's MPS documentation: `nvidia-cuda-mps-control -d` starts the
 * control daemon in the background; it reads CUDA_VISIBLE_DEVICES (the GPU
 * it serves), CUDA_MPS_PIPE_DIRECTORY (its pipes and sockets, and the
 * nvidia-cuda-mps-control.pid file it writes) and CUDA_MPS_LOG_DIRECTORY
 * (control.log, server.log); `echo quit | nvidia-cuda-mps-control` with
 * the same pipe directory shuts it down. The daemon is not our child once
 * -d has put it in the background, so its end is seen by its pid.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/close_range.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/priv.h"
#include "agent/privsrv.h"
#include "agent/privsrv_check.h"
#include "util/errbuf.h"
#include "util/text.h"
#include "util/monotime.h"
#include "base/banned.h"

#define POLL_MS    20
#define OUTPUT_MAX 200 /* bytes of the control program's output in a message */

struct mps_dirs {
    char gpu[PRIV_PATH_MAX]; /* STATE/mps/UUID */
    /* dirs_of keeps gpu 48 bytes short of PRIV_PATH_MAX: these fit. */
    char pipe[PRIV_PATH_MAX + 16]; /* .../pipe: CUDA_MPS_PIPE_DIRECTORY */
    char log[PRIV_PATH_MAX + 16];  /* .../log: CUDA_MPS_LOG_DIRECTORY */
    char out[PRIV_PATH_MAX + 16];  /* .../control.out: the control program's output */
    char pid[PRIV_PATH_MAX + 64];  /* .../pipe/nvidia-cuda-mps-control.pid */
};

/* A directory at path, mode 0755 whatever our umask (clients of every user
 * reach the pipes through it); one that is there must be a directory. */
static int make_dir(const char *path, char *msg, size_t len)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return errbuf_set(msg, len, GPO_EIO, "mkdir %s: %s", path, strerror(errno));
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return errbuf_set(msg, len, GPO_EIO, "%s: not a directory", path);
    if ((st.st_mode & 07777) != 0755 && chmod(path, 0755) != 0)
        return errbuf_set(msg, len, GPO_EIO, "chmod %s: %s", path, strerror(errno));
    return 0;
}

static int dirs_of(const char *state, const char *uuid, struct mps_dirs *d, char *msg, size_t len)
{
    char top[PRIV_PATH_MAX];
    snprintf(top, sizeof(top), "%s/mps", state);
    int n = snprintf(d->gpu, sizeof(d->gpu), "%s/%s", top, uuid);
    if (n < 0 || (size_t)n + 48 >= sizeof(d->gpu))
        return errbuf_set(msg, len, GPO_EINVAL, "uuid: %s/mps/UUID would be too long", state);
    snprintf(d->pipe, sizeof(d->pipe), "%s/pipe", d->gpu);
    snprintf(d->log, sizeof(d->log), "%s/log", d->gpu);
    snprintf(d->out, sizeof(d->out), "%s/control.out", d->gpu);
    snprintf(d->pid, sizeof(d->pid), "%s/nvidia-cuda-mps-control.pid", d->pipe);
    int rc = make_dir(top, msg, len);
    rc = rc ? rc : make_dir(d->gpu, msg, len);
    rc = rc ? rc : make_dir(d->pipe, msg, len);
    return rc ? rc : make_dir(d->log, msg, len);
}

static void pause_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Whether pid runs (a zombie does not: nobody may reap a daemon's). */
static bool alive(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno != EPERM)
        return false;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return true; /* no /proc: kill(2) said it is there */
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')'); /* "PID (COMM) STATE ..." */
    return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

/* The daemon its pid file names, when that process runs; else 0. */
static pid_t daemon_pid(const struct mps_dirs *d)
{
    char buf[32];
    int fd = open(d->pid, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *end = NULL;
    long v = strtol(buf, &end, 10);
    if (end == buf || (*end && *end != '\n') || v < 2 || v > PRIV_PID_MAX)
        return 0;
    return alive((pid_t)v) ? (pid_t)v : 0;
}

/* The control program's output, one line of at most OUTPUT_MAX bytes. */
static void output_of(const struct mps_dirs *d, char *buf, size_t len)
{
    buf[0] = '\0';
    int fd = open(d->out, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    ssize_t n = fd >= 0 ? read(fd, buf, len - 1) : -1;
    if (fd >= 0)
        close(fd);
    buf[n > 0 ? n : 0] = '\0';
    text_fit_line(buf, len - 1);
}

/* In the child: the control program with our fixed environment. */
static void exec_control(const char *control, const char *uuid, const struct mps_dirs *d,
                         const char *arg, int in, int out)
{
    char cvd[PRIV_UUID_MAX + 32], pipe_env[PRIV_PATH_MAX + 64], log_env[PRIV_PATH_MAX + 64];
    snprintf(cvd, sizeof(cvd), "CUDA_VISIBLE_DEVICES=%s", uuid);
    snprintf(pipe_env, sizeof(pipe_env), "CUDA_MPS_PIPE_DIRECTORY=%s", d->pipe);
    snprintf(log_env, sizeof(log_env), "CUDA_MPS_LOG_DIRECTORY=%s", d->log);
    char path_env[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
    char *const envp[] = {cvd, pipe_env, log_env, path_env, NULL};
    char *const argv[] = {(char *)control, (char *)arg, NULL};
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
        _exit(127);
    close_range(3, ~0U, 0);
    /* Ignored signals stay ignored across exec: give the daemon the defaults. */
    struct sigaction sa = {.sa_handler = SIG_DFL};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGPIPE, &sa, NULL);
    sigaction(SIGCHLD, &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    umask(022);
    execve(control, argv, envp);
    _exit(127);
}

/* Runs `control [arg]` with `input` (NULL: none) on its stdin and waits up
 * to PRIV_MPS_WAIT_MS for it: 0 when it exited 0, else GPO_EIO with its
 * output in msg. */
static int run_control(const char *control, const char *uuid, const struct mps_dirs *d,
                       const char *arg, const char *input, char *msg, size_t len)
{
    int in[2] = {-1, -1};
    if (input ? pipe2(in, O_CLOEXEC) != 0 : (in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
        return errbuf_set(msg, len, GPO_EIO, "pipe: %s", strerror(errno));
    int out = open(d->out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640);
    pid_t pid = out >= 0 ? fork() : -1;
    if (pid == 0)
        exec_control(control, uuid, d, arg, in[0], out);
    int err = errno;
    close(in[0]);
    if (out >= 0)
        close(out);
    if (pid < 0) {
        if (in[1] >= 0)
            close(in[1]);
        return errbuf_set(msg, len, GPO_EIO, "%s: %s", out < 0 ? d->out : "fork", strerror(err));
    }
    if (input) {
        /* A program that exits without reading leaves EPIPE (SIGPIPE is ignored here). */
        ssize_t w = write(in[1], input, strlen(input));
        (void)w;
        close(in[1]);
    }
    int status = 0;
    pid_t got = 0;
    for (int64_t until = monotime_ms() + PRIV_MPS_WAIT_MS;
         (got = waitpid(pid, &status, WNOHANG)) == 0 && monotime_ms() < until;)
        pause_ms(POLL_MS);
    const char *what = arg ? arg : "(quit on stdin)";
    if (got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return errbuf_set(msg, len, GPO_EIO, "%s %s did not finish within %d ms", control, what,
                          PRIV_MPS_WAIT_MS);
    }
    if (got < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char text[OUTPUT_MAX + 1];
        output_of(d, text, sizeof(text));
        return errbuf_set(msg, len, GPO_EIO, "%s %s: %s %d%s%s", control, what,
                          got > 0 && WIFSIGNALED(status) ? "killed by signal" : "exit status",
                          got > 0 && WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
                          text[0] ? ": " : "", text);
    }
    return 0;
}

static int start(const char *control, const char *uuid, const struct mps_dirs *d, char *msg,
                 size_t len)
{
    pid_t pid = daemon_pid(d);
    if (pid)
        return errbuf_set(msg, len, 0, "running already (pid %d)", (int)pid);
    int rc = run_control(control, uuid, d, "-d", NULL, msg, len);
    for (int64_t until = monotime_ms() + PRIV_MPS_WAIT_MS;
         !rc && !(pid = daemon_pid(d)) && monotime_ms() < until;)
        pause_ms(POLL_MS);
    if (!rc && !pid)
        return errbuf_set(msg, len, GPO_EIO, "%s -d: no running daemon named in %s within %d ms",
                          control, d->pid, PRIV_MPS_WAIT_MS);
    return rc ? rc : errbuf_set(msg, len, 0, "started (pid %d)", (int)pid);
}

static int quit(const char *control, const char *uuid, const struct mps_dirs *d, char *msg,
                size_t len)
{
    pid_t pid = daemon_pid(d);
    if (!pid)
        return errbuf_set(msg, len, 0, "none running");
    int rc = run_control(control, uuid, d, NULL, "quit\n", msg, len);
    bool up = true;
    for (int64_t until = monotime_ms() + PRIV_MPS_WAIT_MS;
         !rc && (up = alive(pid)) && monotime_ms() < until;)
        pause_ms(POLL_MS);
    if (!rc && up)
        return errbuf_set(msg, len, GPO_EIO,
                          "the control daemon (pid %d) still runs %d ms after "
                          "quit",
                          (int)pid, PRIV_MPS_WAIT_MS);
    return rc ? rc : errbuf_set(msg, len, 0, "quit (pid %d)", (int)pid);
}

void privsrv_do_mps(const char *state, const char *control, const void *req, struct priv_reply *rep)
{
    struct priv_req_mps q;
    memcpy(&q, req, sizeof(q));
    if ((rep->rc = privsrv_check_mps(&q, rep->msg, sizeof(rep->msg))) != 0)
        return;
    if (!control[0]) {
        rep->rc = errbuf_set(rep->msg, sizeof(rep->msg), GPO_ENOENT,
                             "mps_control: nvidia-cuda-mps-control is not on the agent's PATH "
                             "(or give --mps-control PATH)");
        return;
    }
    struct mps_dirs d;
    if ((rep->rc = dirs_of(state, q.uuid, &d, rep->msg, sizeof(rep->msg))) != 0)
        return;
    rep->rc = q.op == PRIV_MPS_START ? start(control, q.uuid, &d, rep->msg, sizeof(rep->msg))
                                     : quit(control, q.uuid, &d, rep->msg, sizeof(rep->msg));
}

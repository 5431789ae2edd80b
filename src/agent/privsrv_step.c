/*
 * privsrv_step.c - the privileged process's step request (priv.h:
 * priv_step_spawn): one task of a job step, started by a keeper.
 *
 * The keeper is a child of the privileged process, root, in the attempt's
 * cgroup. It forks the task (which drops to the attempt's user before its
 * exec), then relays: the task's stdout and stderr pipes to the agent's
 * socket as frames, the agent's signal bytes to the task's process group,
 * and the task's end as the last frame. Root stays in the keeper only to
 * signal and to outlive nothing: it exits right after the task's end. A
 * task on a pseudo-terminal (PRIV_REQ_STEP_PTY) has the terminal in place
 * of the pipes, and the agent's frames (input, window size, hangup) in
 * place of signal bytes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/close_range.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/cgroup.h"
#include "agent/privsrv.h"
#include "agent/privsrv_check.h"
#include "util/errbuf.h"
#include "util/fsutil.h"
#include "util/stepframe.h"
#include "base/banned.h"

/* After the task's exit, how long its output may still take to reach EOF
 * (a daemon it left may hold the pipes). */
#define DRAIN_MS 1000

/* Who and where the task runs: from attempt.json and the password file. */
struct step_target {
    uid_t uid;
    gid_t gid;
    char name[PRIV_USER_MAX];
    char home[PRIV_PATH_MAX];
    char cgroup[CGROUP_PATH_MAX];
};

static bool exists_in(const char *dir, const char *name)
{
    struct stat st;
    char path[PRIV_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return lstat(path, &st) == 0;
}

/* The running attempt's user and cgroup, checked. */
static int find_target(const char *attempts, const struct privsrv_self *self,
                       const struct priv_req_launch *q, struct step_target *t, char *msg,
                       size_t len)
{
    char dir[PRIV_PATH_MAX + 32], path[PRIV_PATH_MAX + 64];
    snprintf(dir, sizeof(dir), "%s/%" PRIu64 ".%" PRIu32, attempts, q->job, q->attempt);
    snprintf(path, sizeof(path), "%s/attempt.json", dir);
    json_error_t jerr;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!o)
        return errbuf_set(msg, len, GPO_ENOENT, "job %" PRIu64 ".%" PRIu32 ": no such attempt here",
                          q->job, q->attempt);
    json_t *uid = json_object_get(o, "uid"), *gid = json_object_get(o, "gid");
    const char *cg = json_string_value(json_object_get(o, "cgroup"));
    int rc = 0;
    if (!json_is_integer(uid) || !json_is_integer(gid) || json_integer_value(uid) < 0 ||
        json_integer_value(uid) >= (json_int_t)UINT32_MAX || json_integer_value(gid) < 0 ||
        json_integer_value(gid) >= (json_int_t)UINT32_MAX || !cg || strlen(cg) >= sizeof(t->cgroup))
        rc = errbuf_set(msg, len, GPO_EIO, "%s: no uid, gid or cgroup", path);
    else if (cg[0] && !privsrv_check_cgroup(cg, q->job, q->attempt))
        rc = errbuf_set(msg, len, GPO_EIO, "%s: cgroup %s is not this attempt's", path, cg);
    if (!rc) {
        t->uid = (uid_t)json_integer_value(uid);
        t->gid = (gid_t)json_integer_value(gid);
        snprintf(t->cgroup, sizeof(t->cgroup), "%s", cg);
    }
    json_decref(o);
    if (!rc && (!exists_in(dir, "pid") || exists_in(dir, "status")))
        rc = errbuf_set(msg, len, GPO_ESTATE, "job %" PRIu64 ".%" PRIu32 ": not running here",
                        q->job, q->attempt);
    if (rc)
        return rc;
    struct passwd pw, *res = NULL;
    char buf[16384];
    if (getpwuid_r(t->uid, &pw, buf, sizeof(buf), &res) != 0 || !res ||
        strlen(pw.pw_name) >= sizeof(t->name))
        return errbuf_set(msg, len, GPO_EINVAL, "uid %ld: no user of that uid", (long)t->uid);
    snprintf(t->name, sizeof(t->name), "%s", pw.pw_name);
    snprintf(t->home, sizeof(t->home), "%s", pw.pw_dir && pw.pw_dir[0] == '/' ? pw.pw_dir : "/");
    return privsrv_check_runas(self, t->uid == self->uid ? NULL : t->name, t->uid, msg, len);
}

/* In the task, before its exec: default signals, stdio, the user, the
 * directory, the environment. tty >= 0: the terminal's slave, its
 * controlling terminal (in a session of its own) and its stdio; else stdin
 * /dev/null, out and err. Never returns. */
static void exec_task(const struct step_target *t, const char *workdir, char **cmd, size_t argc,
                      int tty, int out, int err)
{
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    const int reset[] = {SIGCHLD, SIGINT, SIGHUP, SIGPIPE, SIGTERM};
    for (size_t i = 0; i < sizeof(reset) / sizeof(reset[0]); i++)
        sigaction(reset[i], &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (tty >= 0) {
        if (setsid() < 0 || ioctl(tty, TIOCSCTTY, 0) < 0)
            _exit(126);
        out = err = tty;
    } else {
        setpgid(0, 0);
    }
    int in = tty >= 0 ? tty : open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
        _exit(126);
    close_range(3, ~0U, 0);
    const char *call = NULL;
    if (geteuid() == 0 && t->uid != 0)
        call = initgroups(t->name, t->gid) < 0 ? "initgroups"
               : setgid(t->gid) < 0            ? "setgid"
               : setuid(t->uid) < 0            ? "setuid"
                                               : NULL;
    if (!call && t->uid != 0 && setuid(0) == 0)
        call = "setuid (root came back)";
    if (!call && chdir(workdir ? workdir : t->home) < 0)
        call = "chdir";
    if (!call) {
        umask(022);
        environ = cmd + argc + 1;
        execvp(cmd[0], cmd);
        call = "exec";
    }
    dprintf(2, "gpuorch: %s %s: %s\n", call, strcmp(call, "exec") ? "" : cmd[0], strerror(errno));
    _exit(127);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One frame on the agent's socket: false once the agent is gone. */
static bool send_frame(int sock, enum stepframe_type type, const void *data, size_t n)
{
    uint8_t head[STEPFRAME_HEAD];
    stepframe_head(&(struct stepframe){.type = type, .len = (uint32_t)n}, head);
    return fsutil_write_all(sock, head, sizeof(head)) == 0 &&
           (n == 0 || fsutil_write_all(sock, data, n) == 0);
}

/* The keeper's end: what the task left in its process group goes with it,
 * and its status is the last frame. Never returns. */
static void finish(int sock, pid_t task, int status, bool agent)
{
    kill(-task, SIGKILL);
    uint8_t data[8];
    stepframe_exit_data(WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                        WIFSIGNALED(status) ? WTERMSIG(status) : 0, data);
    if (agent)
        send_frame(sock, STEPFRAME_EXIT, data, sizeof(data));
    _exit(0);
}

/* The keeper's relay; never returns. */
static void keep(int sock, pid_t task, int out, int err)
{
    int pidfd = (int)syscall(SYS_pidfd_open, task, 0);
    int status = 0;
    bool exited = false, agent = true;
    int64_t kill_at = 0, drain_until = 0;
    int fds[2] = {out, err};
    while (fds[0] >= 0 || fds[1] >= 0 || !exited) {
        int64_t now = now_ms();
        if (exited && now >= drain_until)
            break;
        if (kill_at && now >= kill_at) {
            kill(-task, SIGKILL);
            kill_at = 0;
        }
        struct pollfd p[4] = {{.fd = fds[0], .events = POLLIN},
                              {.fd = fds[1], .events = POLLIN},
                              {.fd = agent ? sock : -1, .events = POLLIN},
                              {.fd = exited ? -1 : pidfd, .events = POLLIN}};
        /* Without a pidfd (an old kernel) the exit is polled for. */
        poll(p, 4, pidfd >= 0 && !exited && !kill_at ? 1000 : 100);
        for (int i = 0; i < 2; i++) {
            char buf[16384];
            ssize_t n = p[i].revents ? read(fds[i], buf, sizeof(buf)) : 1;
            if (p[i].revents && n <= 0 && !(n < 0 && errno == EINTR)) {
                close(fds[i]);
                fds[i] = -1;
            } else if (p[i].revents && n > 0 && agent &&
                       !send_frame(sock, i ? STEPFRAME_STDERR : STEPFRAME_STDOUT, buf, (size_t)n)) {
                agent = false;
                kill(-task, SIGKILL);
            }
        }
        unsigned char sig = 0;
        ssize_t got = p[2].revents ? read(sock, &sig, 1) : -1;
        if (p[2].revents && got <= 0 && !(got < 0 && errno == EINTR)) {
            /* The agent let go of the task: it ends. */
            agent = false;
            kill(-task, SIGTERM);
            kill_at = now_ms() + PRIV_STEP_GRACE_MS;
        } else if (got == 1 && (sig == SIGINT || sig == SIGTERM || sig == SIGKILL)) {
            kill(-task, sig);
        }
        if (!exited && waitpid(task, &status, WNOHANG) == task) {
            exited = true;
            drain_until = now_ms() + DRAIN_MS;
        }
    }
    finish(sock, task, status, agent);
}

/* The task's terminal: what the keeper reads from the caller (frames, a
 * partial one kept) and what waits to be written to the master. */
struct term {
    int master, slave; /* -1 once closed */
    uint8_t in[STEPFRAME_HEAD + STEPFRAME_DATA_MAX];
    size_t in_len;
    uint8_t pend[2 * STEPFRAME_DATA_MAX];
    size_t pend_len;
    bool hung; /* HANGUP, or the caller left: the master is closed */
};

static void hang_up(struct term *tm, int64_t *kill_at)
{
    if (tm->master >= 0)
        close(tm->master);
    tm->master = -1;
    tm->hung = true;
    if (!*kill_at)
        *kill_at = now_ms() + PRIV_STEP_GRACE_MS;
}

/* The caller's whole frames, applied: input queued, the size set, a
 * hangup. What does not fit yet stays in tm->in. */
static void take_input(struct term *tm, int64_t *kill_at)
{
    size_t at = 0;
    struct stepframe f;
    while (tm->in_len - at >= STEPFRAME_HEAD && stepframe_parse(tm->in + at, &f) == 0 &&
           tm->in_len - at >= STEPFRAME_HEAD + f.len) {
        const uint8_t *d = tm->in + at + STEPFRAME_HEAD;
        if (f.type == STEPFRAME_STDIN && tm->pend_len + f.len > sizeof(tm->pend))
            break; /* the task reads slowly: the rest waits */
        if (f.type == STEPFRAME_STDIN && !tm->hung) {
            memcpy(tm->pend + tm->pend_len, d, f.len);
            tm->pend_len += f.len;
        } else if (f.type == STEPFRAME_WINSIZE && tm->master >= 0) {
            struct winsize ws = {0};
            stepframe_winsize_read(d, &ws.ws_row, &ws.ws_col);
            (void)ioctl(tm->master, TIOCSWINSZ, &ws);
        } else if (f.type == STEPFRAME_HANGUP) {
            hang_up(tm, kill_at);
        }
        at += STEPFRAME_HEAD + f.len;
    }
    if (tm->in_len - at >= STEPFRAME_HEAD && stepframe_parse(tm->in + at, &f) != 0)
        at = tm->in_len; /* a frame that does not parse: dropped with what follows */
    memmove(tm->in, tm->in + at, tm->in_len - at);
    tm->in_len -= at;
}

/* The keeper's relay for a task on a terminal; never returns. */
static void keep_pty(int sock, pid_t task, struct term *tm)
{
    int pidfd = (int)syscall(SYS_pidfd_open, task, 0);
    int status = 0;
    bool exited = false, agent = true;
    int64_t kill_at = 0, drain_until = 0;
    (void)fcntl(tm->master, F_SETFL, O_NONBLOCK);
    while (tm->master >= 0 || !exited) {
        int64_t now = now_ms();
        if (exited && now >= drain_until)
            break;
        if (kill_at && now >= kill_at) {
            kill(-task, SIGKILL);
            kill_at = 0;
        }
        bool room = tm->in_len < sizeof(tm->in);
        struct pollfd p[3] = {
            {.fd = tm->master, .events = (short)(POLLIN | (tm->pend_len ? POLLOUT : 0))},
            {.fd = agent && room ? sock : -1, .events = POLLIN},
            {.fd = exited ? -1 : pidfd, .events = POLLIN}};
        poll(p, 3, pidfd >= 0 && !exited && !kill_at ? 1000 : 100);
        if (tm->master >= 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
            char buf[16384];
            ssize_t n = read(tm->master, buf, sizeof(buf));
            if (n > 0 && agent && !send_frame(sock, STEPFRAME_STDOUT, buf, (size_t)n)) {
                agent = false;
                hang_up(tm, &kill_at);
            } else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
                close(tm->master); /* EIO: no process holds the terminal any more */
                tm->master = -1;
            }
        }
        if (tm->master >= 0 && (p[0].revents & POLLOUT)) {
            ssize_t n = write(tm->master, tm->pend, tm->pend_len);
            if (n > 0) {
                memmove(tm->pend, tm->pend + n, tm->pend_len - (size_t)n);
                tm->pend_len -= (size_t)n;
            }
        }
        if (p[1].revents) {
            ssize_t n = read(sock, tm->in + tm->in_len, sizeof(tm->in) - tm->in_len);
            if (n <= 0 && !(n < 0 && (errno == EINTR || errno == EAGAIN))) {
                agent = false; /* the caller let go of the task: the terminal hangs up */
                hang_up(tm, &kill_at);
            } else if (n > 0) {
                tm->in_len += (size_t)n;
            }
        }
        take_input(tm, &kill_at);
        if (!exited && waitpid(task, &status, WNOHANG) == task) {
            exited = true;
            drain_until = now_ms() + DRAIN_MS;
            if (tm->slave >= 0)
                close(tm->slave); /* the master then reads to EIO */
            tm->slave = -1;
        }
    }
    finish(sock, task, status, agent);
}

/* A pseudo-terminal for the task: master and slave (the slave kept open by
 * the keeper until the task ends, so the master never reads EIO before the
 * task opened it), the slave given to the job's user, as a login's is. */
static int open_pty(const struct step_target *t, struct term *tm, char *why, size_t len)
{
    char name[128];
    tm->master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (tm->master < 0 || grantpt(tm->master) < 0 || unlockpt(tm->master) < 0 ||
        ptsname_r(tm->master, name, sizeof(name)) != 0)
        return errbuf_set(why, len, GPO_EIO, "pseudo-terminal: %s", strerror(errno));
    struct group gr, *res = NULL;
    char buf[4096];
    gid_t tty = getgrnam_r("tty", &gr, buf, sizeof(buf), &res) == 0 && res ? gr.gr_gid : t->gid;
    if (geteuid() == 0 && (chown(name, t->uid, tty) < 0 || chmod(name, 0620) < 0))
        return errbuf_set(why, len, GPO_EIO, "%s: %s", name, strerror(errno));
    tm->slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (tm->slave < 0)
        return errbuf_set(why, len, GPO_EIO, "%s: %s", name, strerror(errno));
    return 0;
}

/* The keeper, in the privileged process's child: joins the cgroup, forks
 * the task, relays. Never returns. */
static void run_keeper(const struct step_target *t, const struct priv_req_launch *q, char **cmd,
                       int sock, bool pty)
{
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGCHLD, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* Nothing of the privileged process's (its socket to the agent) stays open. */
    if (sock > 3)
        close_range(3, (unsigned)sock - 1, 0);
    close_range((unsigned)sock + 1, ~0U, 0);
    char why[PRIV_MSG_MAX] = "";
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    static struct term tm = {.master = -1, .slave = -1};
    if ((t->cgroup[0] && cgroup_attach(t->cgroup, 0, why, sizeof(why)) != 0) ||
        (pty && open_pty(t, &tm, why, sizeof(why)) != 0) ||
        (!pty && (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0))) {
        char m[PRIV_MSG_MAX + 32];
        int n = snprintf(m, sizeof(m), "the task's keeper: %s", why[0] ? why : strerror(errno));
        send_frame(sock, STEPFRAME_ERROR, m, n > 0 ? (size_t)n : 0);
        _exit(1);
    }
    pid_t task = fork();
    if (task == 0) {
        close(sock);
        exec_task(t, q->has_workdir ? q->workdir : NULL, cmd, q->argc, pty ? tm.slave : -1, out[1],
                  err[1]);
    }
    if (!pty) {
        close(out[1]);
        close(err[1]);
    }
    if (task < 0) {
        char m[128];
        int n = snprintf(m, sizeof(m), "fork: %s", strerror(errno));
        send_frame(sock, STEPFRAME_ERROR, m, n > 0 ? (size_t)n : 0);
        _exit(1);
    }
    if (pty)
        keep_pty(sock, task, &tm);
    setpgid(task, task);
    keep(sock, task, out[0], err[0]);
}

int privsrv_do_step(const char *attempts, const struct privsrv_self *self, const void *req,
                    struct priv_reply *rep)
{
    const struct priv_req_launch *q = req;
    char *msg = rep->msg;
    size_t len = sizeof(rep->msg);
    char **cmd = NULL;
    struct step_target t;
    if ((rep->rc = privsrv_check_step(q, &cmd, msg, len)))
        return -1;
    int sv[2] = {-1, -1};
    if ((rep->rc = find_target(attempts, self, q, &t, msg, len)) == 0 &&
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        rep->rc = errbuf_set(msg, len, GPO_EIO, "socketpair: %s", strerror(errno));
    pid_t keeper = rep->rc ? -1 : fork();
    if (keeper == 0) {
        close(sv[0]);
        run_keeper(&t, q, cmd, sv[1], q->type == PRIV_REQ_STEP_PTY);
    }
    free(cmd);
    if (sv[1] >= 0)
        close(sv[1]);
    if (!rep->rc && keeper < 0) {
        rep->rc = errbuf_set(msg, len, GPO_EIO, "fork: %s", strerror(errno));
        close(sv[0]);
        return -1;
    }
    return rep->rc ? -1 : sv[0];
}

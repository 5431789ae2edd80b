/*
 * priv.c - the agent's privileged half (see priv.h).
 *
 * The agent's side: it packs a request into a fixed struct and waits for
 * the reply, under a mutex. The privileged process it forks is privsrv.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/priv.h"
#include "agent/privsrv.h"
#include "util/errbuf.h"
#include "base/banned.h"

struct priv {
    pthread_mutex_t mu;
    bool mu_ready;
    int fd;    /* the agent's end of the socketpair; -1 when closed */
    pid_t pid; /* the privileged process; -1 when none */
    bool dead;
    bool has_cgroups;
    bool is_root; /* the privileged process's euid is 0 */
    char note[PRIV_MSG_MAX];
    struct priv_req_launch *buf; /* the request being packed, under mu */
};

/* ==== the agent's side ==== */

int priv_start(const struct priv_config *cfg, struct priv **ret, char *err, size_t errlen)
{
    if (!ret)
        return errbuf_set(err, errlen, GPO_EINVAL, "priv_start: NULL argument");
    struct priv *p = calloc(1, sizeof(*p));
    if (!p)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    struct privsrv *s = NULL;
    int rc = privsrv_new(cfg, &s, p->note, sizeof(p->note), err, errlen);
    if (rc) {
        free(p);
        return rc;
    }
    p->has_cgroups = privsrv_has_cgroups(s);
    p->is_root = geteuid() == 0;
    p->fd = -1;
    p->pid = -1;
    p->mu_ready = pthread_mutex_init(&p->mu, NULL) == 0;
    p->buf = malloc(sizeof(*p->buf));
    if (!p->mu_ready || !p->buf) {
        privsrv_free(s);
        priv_stop(p);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        rc = errbuf_set(err, errlen, GPO_EIO, "socketpair: %s", strerror(errno));
    } else {
        /* A launch request is one message: make room for it. */
        int size = 2 * (int)sizeof(struct priv_req_launch);
        setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
        pid_t pid = fork();
        if (pid == 0) {
            close(sv[0]);
            privsrv_serve(s, sv[1]);
        }
        int e = errno;
        close(sv[1]);
        if (pid < 0) {
            close(sv[0]);
            rc = errbuf_set(err, errlen, GPO_EIO, "fork: %s", strerror(e));
        } else {
            p->fd = sv[0];
            p->pid = pid;
        }
    }
    privsrv_free(s); /* the privileged process has its copy */
    if (rc) {
        priv_stop(p);
        return rc;
    }
    *ret = p;
    return 0;
}

void priv_stop(struct priv *p)
{
    if (!p)
        return;
    if (p->fd >= 0)
        close(p->fd);
    if (p->pid > 0)
        while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    if (p->mu_ready)
        pthread_mutex_destroy(&p->mu);
    free(p->buf);
    free(p);
}

pid_t priv_pid(const struct priv *p)
{
    return p ? p->pid : -1;
}

bool priv_is_root(const struct priv *p)
{
    return p && p->is_root;
}

bool priv_has_cgroups(const struct priv *p)
{
    return p && p->has_cgroups;
}

const char *priv_cgroup_note(const struct priv *p)
{
    return p ? p->note : "";
}

static bool known_code(int rc)
{
    /* The codes privsrv.c answers with. */
    return rc == GPO_EINVAL || rc == GPO_ENOMEM || rc == GPO_EPIPE || rc == GPO_EEXIST ||
           rc == GPO_ENOENT || rc == GPO_EIO || rc == GPO_EPERM || rc == GPO_EACCES ||
           rc == -ELOOP || rc == GPO_ETIMEDOUT || rc == GPO_ESTATE;
}

/* A reply's code and message into err. */
static int reply_code(const struct priv_reply *rep, char *err, size_t errlen)
{
    if (rep->rc == 0)
        return 0;
    return errbuf_set(err, errlen, known_code(rep->rc) ? rep->rc : GPO_EIO, "%s", rep->msg);
}

/* One request, one reply; the caller holds p->mu. ret_fd NULL: a
 * descriptor that comes with the reply is closed; else *ret_fd is it, or
 * -1. */
static int call_fd(struct priv *p, const void *req, size_t len, struct priv_reply *rep, int *ret_fd,
                   char *err, size_t errlen)
{
    ssize_t n = -1; /* the reply's length; stays -1 when no reply was read */
    int fd = -1;
    if (!p->dead) {
        ssize_t sent = privsrv_send(p->fd, req, len, -1);
        if (sent < 0 && errno == EMSGSIZE)
            return errbuf_set(err, errlen, GPO_EINVAL, "request: %zu bytes, too large", len);
        if (sent == (ssize_t)len)
            n = privsrv_recv(p->fd, rep, sizeof(*rep), &fd);
    }
    if (fd >= 0 && (!ret_fd || n != (ssize_t)sizeof(*rep))) {
        close(fd);
        fd = -1;
    }
    if (ret_fd)
        *ret_fd = fd;
    if (n != (ssize_t)sizeof(*rep)) {
        p->dead = true;
        return errbuf_set(err, errlen, GPO_EPIPE, "the privileged process (pid %ld) is gone",
                          (long)p->pid);
    }
    rep->msg[sizeof(rep->msg) - 1] = '\0';
    return reply_code(rep, err, errlen);
}

static int call(struct priv *p, const void *req, size_t len, struct priv_reply *rep, char *err,
                size_t errlen)
{
    return call_fd(p, req, len, rep, NULL, err, errlen);
}

int priv_call_raw(struct priv *p, const void *req, size_t len, char *err, size_t errlen)
{
    if (!p || !req)
        return errbuf_set(err, errlen, GPO_EINVAL, "priv_call_raw: NULL argument");
    struct priv_reply *rep = malloc(sizeof(*rep));
    if (!rep)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    pthread_mutex_lock(&p->mu);
    int rc = call(p, req, len, rep, err, errlen);
    pthread_mutex_unlock(&p->mu);
    free(rep);
    return rc;
}

/* Copies an optional string into its fixed array; *has says if it was given. */
static int pack_string(const char *field, const char *src, char *dst, size_t size, uint8_t *has,
                       char *err, size_t errlen)
{
    *has = src != NULL;
    if (!src)
        return 0;
    size_t n = strlen(src);
    if (n >= size)
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: longer than %zu bytes", field, size - 1);
    memcpy(dst, src, n + 1);
    return 0;
}

/* argv then env into q->strings. */
static int pack_strings(struct priv_req_launch *q, const struct priv_launch *req, char *err,
                        size_t errlen)
{
    size_t off = 0;
    for (size_t i = 0; i < req->argc + req->nenv; i++) {
        bool is_arg = i < req->argc;
        const char *s = is_arg ? req->argv[i] : req->env[i - req->argc];
        if (!s)
            return errbuf_set(err, errlen, GPO_EINVAL, "%s[%zu]: NULL", is_arg ? "argv" : "env",
                              is_arg ? i : i - req->argc);
        size_t n = strlen(s) + 1;
        if (n > PRIV_STRINGS_MAX - off)
            return errbuf_set(err, errlen, GPO_EINVAL, "argv and env: over %d bytes in all",
                              PRIV_STRINGS_MAX);
        memcpy(q->strings + off, s, n);
        off += n;
    }
    q->strings_len = (uint32_t)off;
    return 0;
}

int priv_launch(struct priv *p, const struct priv_launch *req, pid_t *ret_pid,
                uint64_t *ret_start_time, char *err, size_t errlen)
{
    if (!p || !req || !ret_pid || !ret_start_time || (req->argc && !req->argv) ||
        (req->nenv && !req->env))
        return errbuf_set(err, errlen, GPO_EINVAL, "priv_launch: NULL argument");
    if (req->argc > PRIV_STRINGS_N || req->nenv > PRIV_STRINGS_N - req->argc)
        return errbuf_set(err, errlen, GPO_EINVAL, "argc + nenv: over %d strings", PRIV_STRINGS_N);
    pthread_mutex_lock(&p->mu);
    struct priv_req_launch *q = p->buf;
    memset(q, 0, sizeof(*q));
    *q = (struct priv_req_launch){.type = PRIV_REQ_LAUNCH,
                                  .attempt = req->attempt,
                                  .job = req->job,
                                  .mem_mib = req->mem_mib,
                                  .cpu_milli = req->cpu_milli,
                                  .argc = (uint32_t)req->argc,
                                  .nenv = (uint32_t)req->nenv,
                                  .has_script = req->script ? 1 : 0,
                                  .append = req->append ? 1 : 0};
    struct priv_reply rep;
    int rc;
    if ((rc = pack_string("unix_user", req->unix_user, q->unix_user, sizeof(q->unix_user),
                          &q->has_user, err, errlen)) ||
        (rc = pack_string("workdir", req->workdir, q->workdir, sizeof(q->workdir), &q->has_workdir,
                          err, errlen)) ||
        (rc = pack_string("stdout_path", req->stdout_path, q->stdout_path, sizeof(q->stdout_path),
                          &q->has_stdout, err, errlen)) ||
        (rc = pack_string("stderr_path", req->stderr_path, q->stderr_path, sizeof(q->stderr_path),
                          &q->has_stderr, err, errlen)) ||
        (rc = pack_strings(q, req, err, errlen)) ||
        (rc = call(p, q, sizeof(*q), &rep, err, errlen))) {
        pthread_mutex_unlock(&p->mu);
        return rc;
    }
    pthread_mutex_unlock(&p->mu);
    *ret_pid = rep.pid;
    *ret_start_time = rep.start_time;
    return 0;
}

static int attempt_call(struct priv *p, uint32_t type, uint64_t job, uint32_t attempt, int sig,
                        uint32_t flags, bool *ret_empty, char *err, size_t errlen)
{
    if (!p)
        return errbuf_set(err, errlen, GPO_EINVAL, "NULL priv");
    struct priv_req_attempt q = {
        .type = type, .attempt = attempt, .job = job, .sig = sig, .flags = flags};
    struct priv_reply rep;
    pthread_mutex_lock(&p->mu);
    int rc = call(p, &q, sizeof(q), &rep, err, errlen);
    pthread_mutex_unlock(&p->mu);
    if (rc == 0 && ret_empty)
        *ret_empty = rep.empty != 0;
    return rc;
}

int priv_signal(struct priv *p, uint64_t job, uint32_t attempt, int sig, char *err, size_t errlen)
{
    return attempt_call(p, PRIV_REQ_SIGNAL, job, attempt, sig, 0, NULL, err, errlen);
}

int priv_signal_job(struct priv *p, uint64_t job, uint32_t attempt, int sig, bool leader, char *err,
                    size_t errlen)
{
    uint32_t flags = PRIV_SIGNAL_JOB | (leader ? PRIV_SIGNAL_LEADER : 0);
    return attempt_call(p, PRIV_REQ_SIGNAL, job, attempt, sig, flags, NULL, err, errlen);
}

int priv_cleanup(struct priv *p, uint64_t job, uint32_t attempt, bool *ret_empty, char *err,
                 size_t errlen)
{
    if (!ret_empty)
        return errbuf_set(err, errlen, GPO_EINVAL, "priv_cleanup: NULL argument");
    return attempt_call(p, PRIV_REQ_CLEANUP, job, attempt, 0, 0, ret_empty, err, errlen);
}

int priv_mps(struct priv *p, enum priv_mps_op op, const char *uuid, char *err, size_t errlen)
{
    if (!p || !uuid)
        return errbuf_set(err, errlen, GPO_EINVAL, "priv_mps: NULL argument");
    struct priv_req_mps q = {.type = PRIV_REQ_MPS, .op = (uint32_t)op};
    if (strlen(uuid) >= sizeof(q.uuid))
        return errbuf_set(err, errlen, GPO_EINVAL, "uuid: longer than %d bytes", PRIV_UUID_MAX - 1);
    memcpy(q.uuid, uuid, strlen(uuid) + 1);
    struct priv_reply rep;
    pthread_mutex_lock(&p->mu);
    int rc = call(p, &q, sizeof(q), &rep, err, errlen);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

static int mig_call(struct priv *p, const struct priv_req_mig *q, char *err, size_t errlen)
{
    if (!p)
        return errbuf_set(err, errlen, GPO_EINVAL, "NULL priv");
    struct priv_reply rep;
    pthread_mutex_lock(&p->mu);
    int rc = call(p, q, sizeof(*q), &rep, err, errlen);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int priv_mig_create(struct priv *p, unsigned gpu, unsigned profile_id, unsigned start, char *err,
                    size_t errlen)
{
    struct priv_req_mig q = {.type = PRIV_REQ_MIG,
                             .op = PRIV_MIG_CREATE,
                             .gpu = gpu,
                             .profile_id = profile_id,
                             .start = start};
    return mig_call(p, &q, err, errlen);
}

int priv_mig_destroy(struct priv *p, unsigned gpu, unsigned instance_id, char *err, size_t errlen)
{
    struct priv_req_mig q = {
        .type = PRIV_REQ_MIG, .op = PRIV_MIG_DESTROY, .gpu = gpu, .instance = instance_id};
    return mig_call(p, &q, err, errlen);
}

int priv_attribute(struct priv *p, const pid_t *pids, size_t n, uint64_t *jobs, uint32_t *attempts,
                   char *err, size_t errlen)
{
    if (!p || (n && (!pids || !jobs || !attempts)))
        return errbuf_set(err, errlen, GPO_EINVAL, "priv_attribute: NULL argument");
    struct priv_reply *rep = malloc(sizeof(*rep));
    if (!rep)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    int rc = 0;
    for (size_t at = 0; !rc && at < n;) {
        /* At most PRIV_PIDS_MAX a request. */
        size_t k = 0;
        struct priv_req_attribute q = {.type = PRIV_REQ_ATTRIBUTE};
        while (k < PRIV_PIDS_MAX && at + k < n) {
            q.pids[k] = (int32_t)pids[at + k];
            k++;
        }
        q.n = (uint32_t)k;
        pthread_mutex_lock(&p->mu);
        rc = call(p, &q, sizeof(q), rep, err, errlen);
        pthread_mutex_unlock(&p->mu);
        for (size_t i = 0; !rc && i < k; i++) {
            jobs[at + i] = rep->jobs[i];
            attempts[at + i] = rep->attempts[i];
        }
        at += k;
    }
    free(rep);
    return rc;
}

/* Waits up to ms for the log child's answer on sock. */
static int log_answer(int sock, int64_t ms, struct priv_reply *rep, int *ret_fd, char *err,
                      size_t errlen)
{
    struct pollfd pfd = {.fd = sock, .events = POLLIN};
    int r;
    while ((r = poll(&pfd, 1, (int)ms)) < 0 && errno == EINTR)
        ;
    if (r == 0)
        return errbuf_set(err, errlen, GPO_ETIMEDOUT, "the log file did not open within %lld ms",
                          (long long)ms);
    int fd = -1;
    ssize_t n = r > 0 ? privsrv_recv(sock, rep, sizeof(*rep), &fd) : -1;
    if (n != (ssize_t)sizeof(*rep) || (rep->rc == 0 && fd < 0)) {
        if (fd >= 0)
            close(fd);
        return errbuf_set(err, errlen, GPO_EIO, "the log file's opener ended without an answer");
    }
    rep->msg[sizeof(rep->msg) - 1] = '\0';
    if (rep->rc != 0 && fd >= 0)
        close(fd);
    if (rep->rc == 0)
        *ret_fd = fd;
    return reply_code(rep, err, errlen);
}

int priv_log_open(struct priv *p, uint64_t job, uint32_t attempt, enum priv_stream stream,
                  int64_t timeout_ms, int *ret_fd, int64_t *ret_size, char *err, size_t errlen)
{
    if (!p || !ret_fd || !ret_size)
        return errbuf_set(err, errlen, GPO_EINVAL, "priv_log_open: NULL argument");
    struct priv_req_log q = {
        .type = PRIV_REQ_LOG_OPEN, .attempt = attempt, .job = job, .stream = (uint32_t)stream};
    struct priv_reply *rep = calloc(1, sizeof(*rep));
    if (!rep)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    int sock = -1, fd = -1;
    pthread_mutex_lock(&p->mu);
    int rc = call_fd(p, &q, sizeof(q), rep, &sock, err, errlen);
    pthread_mutex_unlock(&p->mu);
    if (!rc && sock < 0)
        rc = errbuf_set(err, errlen, GPO_EIO, "log open: no answer socket came");
    /* The wait is outside the lock: the file may take long to open. */
    if (!rc)
        rc =
            log_answer(sock, timeout_ms > 0 ? timeout_ms : PRIV_LOG_OPEN_MS, rep, &fd, err, errlen);
    if (sock >= 0)
        close(sock);
    int64_t size = rep->size;
    free(rep);
    if (rc)
        return rc;
    *ret_fd = fd;
    *ret_size = size;
    return 0;
}

int priv_step_spawn(struct priv *p, const struct priv_step *req, int *ret_fd, char *err,
                    size_t errlen)
{
    if (!p || !req || !ret_fd || !req->argv || (req->nenv && !req->env))
        return errbuf_set(err, errlen, GPO_EINVAL, "priv_step_spawn: NULL argument");
    if (req->argc > PRIV_STRINGS_N || req->nenv > PRIV_STRINGS_N - req->argc)
        return errbuf_set(err, errlen, GPO_EINVAL, "argc + nenv: over %d strings", PRIV_STRINGS_N);
    struct priv_launch as_launch = {
        .argv = req->argv, .argc = req->argc, .env = req->env, .nenv = req->nenv};
    struct priv_reply *rep = calloc(1, sizeof(*rep));
    if (!rep)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    int fd = -1;
    pthread_mutex_lock(&p->mu);
    struct priv_req_launch *q = p->buf;
    memset(q, 0, sizeof(*q));
    q->type = req->pty ? PRIV_REQ_STEP_PTY : PRIV_REQ_STEP;
    q->job = req->job;
    q->attempt = req->attempt;
    q->argc = (uint32_t)req->argc;
    q->nenv = (uint32_t)req->nenv;
    int rc = pack_string("workdir", req->workdir, q->workdir, sizeof(q->workdir), &q->has_workdir,
                         err, errlen);
    rc = rc ? rc : pack_strings(q, &as_launch, err, errlen);
    rc = rc ? rc : call_fd(p, q, sizeof(*q), rep, &fd, err, errlen);
    pthread_mutex_unlock(&p->mu);
    free(rep);
    if (!rc && fd < 0)
        rc = errbuf_set(err, errlen, GPO_EIO, "step: no keeper socket came");
    if (rc)
        return rc;
    *ret_fd = fd;
    return 0;
}

/*
 * priv.c - the agent's privileged half (see priv.h).
 *
 * The agent's side: it packs a request into a fixed struct and waits for
 * the reply, under a mutex. The privileged process it forks is privsrv.c.
 */
#define _GNU_SOURCE
#include <errno.h>
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
           rc == GPO_ENOENT || rc == GPO_EIO;
}

/* One request, one reply; the caller holds p->mu. */
static int call(struct priv *p, const void *req, size_t len, struct priv_reply *rep, char *err,
                size_t errlen)
{
    ssize_t n = -1; /* the reply's length; stays -1 when no reply was read */
    if (!p->dead) {
        ssize_t sent;
        while ((sent = send(p->fd, req, len, MSG_NOSIGNAL)) < 0 && errno == EINTR)
            ;
        if (sent < 0 && errno == EMSGSIZE)
            return errbuf_set(err, errlen, GPO_EINVAL, "request: %zu bytes, too large", len);
        if (sent == (ssize_t)len)
            while ((n = recv(p->fd, rep, sizeof(*rep), MSG_TRUNC)) < 0 && errno == EINTR)
                ;
    }
    if (n != (ssize_t)sizeof(*rep)) {
        p->dead = true;
        return errbuf_set(err, errlen, GPO_EPIPE, "the privileged process (pid %ld) is gone",
                          (long)p->pid);
    }
    rep->msg[sizeof(rep->msg) - 1] = '\0';
    if (rep->rc == 0)
        return 0;
    return errbuf_set(err, errlen, known_code(rep->rc) ? rep->rc : GPO_EIO, "%s", rep->msg);
}

int priv_call_raw(struct priv *p, const void *req, size_t len, char *err, size_t errlen)
{
    if (!p || !req)
        return errbuf_set(err, errlen, GPO_EINVAL, "priv_call_raw: NULL argument");
    struct priv_reply rep;
    pthread_mutex_lock(&p->mu);
    int rc = call(p, req, len, &rep, err, errlen);
    pthread_mutex_unlock(&p->mu);
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
                                  .nenv = (uint32_t)req->nenv};
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
                        bool *ret_empty, char *err, size_t errlen)
{
    if (!p)
        return errbuf_set(err, errlen, GPO_EINVAL, "NULL priv");
    struct priv_req_attempt q = {
        .type = type, .attempt = attempt, .job = job, .sig = sig, .pad = 0};
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
    return attempt_call(p, PRIV_REQ_SIGNAL, job, attempt, sig, NULL, err, errlen);
}

int priv_cleanup(struct priv *p, uint64_t job, uint32_t attempt, bool *ret_empty, char *err,
                 size_t errlen)
{
    if (!ret_empty)
        return errbuf_set(err, errlen, GPO_EINVAL, "priv_cleanup: NULL argument");
    return attempt_call(p, PRIV_REQ_CLEANUP, job, attempt, 0, ret_empty, err, errlen);
}

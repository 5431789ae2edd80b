/*
 * logsrv.c - the agent's log server (logsrv.h): the request, the opens on
 * worker threads, answers read straight from the log file, follow streams
 * and the server's life (the watcher thread is logsrv_watch.c, the files
 * logsrv_files.c).
 *
 * Every open of a log file (and the read of attempt.json) happens on a
 * worker thread of its own, never on the HTTP polling thread: a request is
 * suspended until its worker completes it, and a follow stream whose file
 * is not there yet starts one open at a time and sleeps until it ends. So a
 * path that blocks (a FIFO, a dead NFS server) holds up only its own
 * request. Every read of an open log happens in a stream's read callback,
 * on the polling thread, with pread at the stream's own position: regular
 * files in the page cache answer at once, and no copy of a log is ever held
 * in memory. A follow stream's read that finds nothing checks for the
 * status file and otherwise sleeps until the watcher wakes it.
 */
#include "agent/logsrv.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "agent/logsrv_files.h"
#include "agent/logsrv_int.h"
#include "http/http.h"
#include "util/errbuf.h"
#include "base/banned.h"

/* ---- the request ---- */

/* A decimal integer, the whole string, at most 18 digits (no '+'). */
static bool parse_int(const char *text, bool negative_ok, int64_t *ret)
{
    const char *digits = text && negative_ok && text[0] == '-' ? text + 1 : text;
    if (!digits || !*digits || strlen(digits) > 18 ||
        strspn(digits, "0123456789") != strlen(digits))
        return false;
    *ret = strtoll(text, NULL, 10);
    return true;
}

static bool parse_flag(const char *v, bool *ret)
{
    bool on = strcmp(v, "1") == 0 || strcmp(v, "true") == 0;
    bool off = strcmp(v, "0") == 0 || strcmp(v, "false") == 0;
    if (on || off)
        *ret = on;
    return on || off;
}

/* A 400 about one parameter; returns false, for parse_request. */
__attribute__((format(printf, 3, 4))) static bool
bad_request(struct http_request *req, const char *code, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    http_request_error(req, 400, code, "%s", msg);
    return false;
}

/* Reads the request; answers 400 itself and returns false on a problem. */
static bool parse_request(struct http_request *req, struct logq *q)
{
    *q = (struct logq){.stream = "stdout", .head = strcmp(http_request_method(req), "HEAD") == 0};
    if (!parse_int(http_request_param(req, "job"), false, &q->job) || q->job < 1)
        return bad_request(req, "invalid_path", "job: expected a positive integer");
    if (!parse_int(http_request_param(req, "attempt"), false, &q->attempt) || q->attempt < 1)
        return bad_request(req, "invalid_path", "attempt: expected a positive integer");
    for (size_t i = 0; i < http_request_query_count(req); i++) {
        const char *name, *v;
        http_request_query_at(req, i, &name, &v);
        if (strcmp(name, "stream") == 0) {
            if (strcmp(v, "stdout") != 0 && strcmp(v, "stderr") != 0)
                return bad_request(req, "invalid_query", "stream: expected stdout or stderr");
            q->stream = strcmp(v, "stdout") == 0 ? "stdout" : "stderr";
        } else if (strcmp(name, "offset") == 0) {
            if (!parse_int(v, true, &q->offset))
                return bad_request(req, "invalid_query",
                                   "offset: expected an integer (-N: the last N bytes)");
        } else if (strcmp(name, "follow") == 0) {
            if (!parse_flag(v, &q->follow))
                return bad_request(req, "invalid_query", "follow: expected 1 or 0");
        } else {
            return bad_request(req, "invalid_query",
                               "unknown query parameter '%.40s' (stream, offset, follow)", name);
        }
    }
    return true;
}

/* ---- answers without follow: the bytes [pos, end) of an open file ---- */

struct span {
    int fd;
    off_t pos, end;
};

static ssize_t span_read(void *ctx, char *buf, size_t max)
{
    struct span *s = ctx;
    if (s->pos >= s->end)
        return HTTP_STREAM_END;
    size_t want = (size_t)(s->end - s->pos) < max ? (size_t)(s->end - s->pos) : max;
    ssize_t n;
    do
        n = pread(s->fd, buf, want, s->pos);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return HTTP_STREAM_ERROR;
    if (n == 0) /* cut shorter meanwhile: what there was is all there is */
        return HTTP_STREAM_END;
    s->pos += n;
    return n;
}

static void span_free(void *ctx)
{
    struct span *s = ctx;
    if (s->fd >= 0)
        close(s->fd);
    free(s);
}

/* ---- opens, on worker threads ---- */

/* One open: a request's first (req), or a follow stream's next (f, with a
 * reference). */
struct opening {
    struct logsrv *l;
    struct http_request *req;
    struct follow *f;
    struct logq q;
    uid_t uid;
    char dir[DIR_MAX];
    char path[PATH_MAX];
};

/* Room for one more open: false while stopping or at LOGSRV_MAX_OPENS. */
static bool opening_begin(struct logsrv *l)
{
    pthread_mutex_lock(&l->mu);
    bool room = !l->stopping && l->nopen < LOGSRV_MAX_OPENS;
    l->nopen += room;
    pthread_mutex_unlock(&l->mu);
    return room;
}

static void opening_end(struct logsrv *l, struct opening *o)
{
    free(o);
    pthread_mutex_lock(&l->mu);
    l->nopen--;
    pthread_cond_broadcast(&l->idle);
    pthread_mutex_unlock(&l->mu);
}

/* Runs fn(o) on a detached thread of its own. 0 or -errno. */
static int opening_spawn(void *(*fn)(void *), struct opening *o)
{
    pthread_attr_t attr;
    pthread_t t;
    if (pthread_attr_init(&attr) != 0)
        return GPO_ENOMEM;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, fn, o);
    pthread_attr_destroy(&attr);
    return -rc;
}

static int open_once(const struct opening *o, int *fd, int64_t *size)
{
    struct logsrv *l = o->l;
    if (l->open)
        return l->open(l->open_ctx, o->q.job, o->q.attempt, o->q.stream, o->path, o->uid, fd, size);
    return logsrv_file_open(o->path, o->uid, fd, size);
}

/* The open, with its second look: a log refused as not the job's may be
 * one the shim is creating (a follow waits for it: GPO_ENOENT) or may have
 * been handed over since (looked at again). */
static int open_log(const struct opening *o, int *fd, int64_t *size)
{
    int rc = open_once(o, fd, size);
    if ((rc == GPO_EPERM || rc == GPO_EACCES) && o->q.follow &&
        logsrv_being_created(o->path, o->dir))
        return GPO_ENOENT;
    if (rc == GPO_EPERM || rc == GPO_EACCES)
        rc = open_once(o, fd, size);
    return rc;
}

/* ---- follow streams ---- */

/* Whether another stream uses inotify watch wd (watches are per inode). */
static bool wd_shared(const struct logsrv *l, const struct follow *self, int wd)
{
    for (const struct follow *f = l->follows; f; f = f->next) {
        if (f != self && (f->wd_file == wd || f->wd_dir == wd))
            return true;
    }
    return false;
}

/* The log file opened: its watch. Under l->mu. */
static void follow_opened(struct follow *f, int fd)
{
    struct logsrv *l = f->l;
    f->fd = fd;
    if (l->ifd >= 0)
        f->wd_file = inotify_add_watch(l->ifd, f->path, IN_MODIFY);
}

static void follow_unref(struct follow *f)
{
    struct logsrv *l = f->l;
    pthread_mutex_lock(&l->mu);
    bool last = --f->refs == 0;
    pthread_mutex_unlock(&l->mu);
    if (!last)
        return;
    if (f->fd >= 0)
        close(f->fd);
    http_stream_release(f->st);
    free(f);
}

static void follow_free(void *ctx)
{
    struct follow *f = ctx;
    struct logsrv *l = f->l;
    pthread_mutex_lock(&l->mu);
    if (f->listed) {
        *(f->prev ? &f->prev->next : &l->follows) = f->next;
        if (f->next)
            f->next->prev = f->prev;
        l->nfollow--;
        f->listed = false;
    }
    if (f->wd_file >= 0 && !wd_shared(l, f, f->wd_file))
        inotify_rm_watch(l->ifd, f->wd_file);
    if (f->wd_dir >= 0 && f->wd_dir != f->wd_file && !wd_shared(l, f, f->wd_dir))
        inotify_rm_watch(l->ifd, f->wd_dir);
    f->wd_file = f->wd_dir = -1;
    f->closed = true;
    pthread_mutex_unlock(&l->mu);
    follow_unref(f);
}

/* The attempt ended (its status file exists), or its directory is gone. */
static bool follow_over(const struct follow *f)
{
    struct stat st;
    return stat(f->status, &st) == 0 || (errno == ENOENT && stat(f->dir, &st) != 0);
}

/* A follow's open, on its worker: the file once it is there, then a wake. */
static void *reopen_main(void *arg)
{
    struct opening *o = arg;
    struct follow *f = o->f;
    struct logsrv *l = o->l;
    int fd = -1;
    int64_t size = 0;
    int rc = open_log(o, &fd, &size);
    pthread_mutex_lock(&l->mu);
    if (rc == 0 && !f->closed && f->fd < 0)
        follow_opened(f, fd);
    else if (rc == 0)
        close(fd);
    else if (rc != GPO_ENOENT)
        f->broken = true; /* not a file of the job's own */
    f->opening = false;
    struct http_stream *st = f->closed ? NULL : f->st;
    if (st)
        http_stream_ref(st);
    pthread_mutex_unlock(&l->mu);
    http_stream_wake(st); /* NULL: not registered yet; the watcher's tick wakes it */
    http_stream_release(st);
    follow_unref(f);
    opening_end(l, o);
    return NULL;
}

/* Starts the next open of a follow whose file is not open: 0 (started, or
 * put off to the next wake when the opens are at their cap), or -errno. */
static int follow_reopen(struct follow *f, bool over)
{
    struct logsrv *l = f->l;
    if (!opening_begin(l))
        return 0;
    struct opening *o = calloc(1, sizeof(*o));
    if (!o) {
        opening_end(l, NULL);
        return GPO_ENOMEM;
    }
    *o = (struct opening){.l = l, .f = f, .q = f->q, .uid = f->uid};
    snprintf(o->dir, sizeof(o->dir), "%s", f->dir);
    snprintf(o->path, sizeof(o->path), "%s", f->path);
    pthread_mutex_lock(&l->mu);
    f->refs++;
    f->opening = true;
    f->last_look |= over;
    pthread_mutex_unlock(&l->mu);
    int rc = opening_spawn(reopen_main, o);
    if (rc) {
        pthread_mutex_lock(&l->mu);
        f->refs--;
        f->opening = false;
        pthread_mutex_unlock(&l->mu);
        opening_end(l, o);
    }
    return rc;
}

static ssize_t follow_read(void *ctx, char *buf, size_t max)
{
    struct follow *f = ctx;
    struct logsrv *l = f->l;
    for (int pass = 0; pass < 2; pass++) {
        pthread_mutex_lock(&l->mu);
        int fd = f->fd;
        bool opening = f->opening, broken = f->broken, last_look = f->last_look;
        pthread_mutex_unlock(&l->mu);
        if (broken)
            return HTTP_STREAM_ERROR;
        if (fd < 0 && opening)
            return 0;
        if (fd < 0) {
            /* Opened off this thread: a path that blocks holds up no other
             * stream. Once the attempt has ended, one last open decides. */
            bool over = follow_over(f);
            if (over && last_look)
                return HTTP_STREAM_END;
            return follow_reopen(f, over) == 0 ? 0 : HTTP_STREAM_ERROR;
        }
        ssize_t n;
        do
            n = pread(fd, buf, max, f->pos);
        while (n < 0 && errno == EINTR);
        if (n != 0) {
            f->pos += n > 0 ? n : 0;
            return n > 0 ? n : HTTP_STREAM_ERROR;
        }
        /* Nothing new. If the attempt has ended, the file is complete: one
         * more look takes what was written just before the status file. */
        if (pass == 0 && !follow_over(f))
            return 0;
    }
    return HTTP_STREAM_END;
}

/* A follow stream for the request (suspended, on its worker): 503 over the
 * cap. Completes the request in every case. */
static void follow_start(const struct opening *o, int fd, off_t start)
{
    struct logsrv *l = o->l;
    struct http_request *req = o->req;
    struct follow *f = calloc(1, sizeof(*f));
    if (!f) {
        if (fd >= 0)
            close(fd);
        http_request_complete_error(req, 500, "internal", "out of memory");
        return;
    }
    /* Two references: MHD's, and this function's until it is done with f
     * (the stream may end, and MHD let go of it, before the listing below). */
    *f = (struct follow){.l = l,
                         .q = o->q,
                         .fd = fd,
                         .uid = o->uid,
                         .pos = start,
                         .refs = 2,
                         .wd_file = -1,
                         .wd_dir = -1};
    snprintf(f->path, sizeof(f->path), "%s", o->path);
    snprintf(f->dir, sizeof(f->dir), "%s", o->dir);
    snprintf(f->status, sizeof(f->status), "%s/%s", o->dir, LOGSRV_STATUS_FILE);
    /* The slot is taken with the check: the 200 may reach the client, and
     * its next request be checked, before this stream is listed. */
    pthread_mutex_lock(&l->mu);
    bool full = l->nfollow + l->nstarting >= LOGSRV_MAX_FOLLOW;
    if (!full)
        l->nstarting++;
    pthread_mutex_unlock(&l->mu);
    if (full) { /* never listed, watched or streamed: nothing else holds it */
        if (fd >= 0)
            close(fd);
        free(f);
        http_request_add_header(req, "Retry-After", "1");
        http_request_complete_error(req, 503, "too_many_streams",
                                    "%u log streams are open on this node; try again later",
                                    LOGSRV_MAX_FOLLOW);
        return;
    }
    struct http_stream *st = NULL;
    if (http_request_complete_stream(req, 200, LOGSRV_CONTENT_TYPE, follow_read, follow_free, f,
                                     &st) != 0) {
        pthread_mutex_lock(&l->mu);
        l->nstarting--;
        pthread_mutex_unlock(&l->mu);
        follow_unref(f); /* answered 500 and released; follow_free has run */
        return;
    }
    bool kick = false;
    pthread_mutex_lock(&l->mu);
    l->nstarting--;
    if (!f->closed) {
        f->st = st;
        st = NULL;
        f->listed = true;
        f->next = l->follows;
        if (f->next)
            f->next->prev = f;
        l->follows = f;
        l->nfollow++;
        if (l->ifd >= 0) {
            f->wd_dir = inotify_add_watch(l->ifd, f->dir, IN_CREATE | IN_MOVED_TO | IN_ONLYDIR);
            if (f->fd >= 0)
                f->wd_file = inotify_add_watch(l->ifd, f->path, IN_MODIFY);
            kick = f->wd_dir < 0 || (f->fd >= 0 && f->wd_file < 0);
        }
    }
    pthread_mutex_unlock(&l->mu);
    http_stream_release(st); /* a stream cut before it was listed */
    follow_unref(f);
    if (kick) { /* the watcher polls faster while some stream has no watch */
        uint64_t one = 1;
        ssize_t n = write(l->efd, &one, sizeof(one));
        (void)n;
    }
}

/* ---- the route ---- */

/* Completes a request whose open failed: 403, 404, 503 or 500. */
static void answer_failed(const struct opening *o, int rc, const char *msg)
{
    struct http_request *req = o->req;
    const struct logq *q = &o->q;
    if (rc == GPO_EPERM)
        http_request_complete_error(req, 403, "forbidden",
                                    "%s of attempt %" PRId64 ".%" PRId64
                                    ": %s is not a regular file owned by uid %u",
                                    q->stream, q->job, q->attempt, o->path, (unsigned)o->uid);
    else if (rc == GPO_EACCES || rc == -ELOOP)
        http_request_complete_error(req, 403, "forbidden",
                                    "%s of attempt %" PRId64 ".%" PRId64 ": %s: %s", q->stream,
                                    q->job, q->attempt, o->path, gpo_strerror(rc));
    else if (rc == GPO_ETIMEDOUT)
        http_request_complete_error(req, 503, "log_unavailable",
                                    "%s of attempt %" PRId64 ".%" PRId64
                                    ": %s did not open in time",
                                    q->stream, q->job, q->attempt, o->path);
    else
        http_request_complete_error(req, 500, "internal", "%s", msg[0] ? msg : gpo_strerror(rc));
}

/* A request's first open, on its worker: attempt.json, the log, the answer. */
static void *request_main(void *arg)
{
    struct opening *o = arg;
    struct logsrv *l = o->l;
    const struct logq *q = &o->q;
    char msg[PATH_MAX + 128] = "";
    int rc =
        logsrv_attempt_load(o->dir, q->stream, &o->uid, o->path, sizeof(o->path), msg, sizeof(msg));
    int fd = -1;
    int64_t size = 0;
    if (rc == GPO_ENOENT) {
        http_request_complete_error(o->req, 404, "not_found",
                                    "no attempt %" PRId64 ".%" PRId64 " on this node", q->job,
                                    q->attempt);
        opening_end(l, o);
        return NULL;
    }
    if (!rc)
        rc = open_log(o, &fd, &size);
    if (rc && rc != GPO_ENOENT) { /* ENOENT: not there yet, empty (a follow waits) */
        answer_failed(o, rc, msg);
        opening_end(l, o);
        return NULL;
    }
    off_t start = q->offset >= 0 ? q->offset : size + q->offset > 0 ? size + q->offset : 0;
    if (q->follow && !q->head) {
        follow_start(o, fd, start);
        opening_end(l, o);
        return NULL;
    }
    char text[32];
    snprintf(text, sizeof(text), "%lld", (long long)size);
    if (http_request_add_header(o->req, LOGSRV_SIZE_HEADER, text) == 0 && q->head) {
        /* The headers only: no stream (MHD sends no body to a HEAD). */
        if (fd >= 0)
            close(fd);
        http_request_complete(o->req, 200, NULL);
        opening_end(l, o);
        return NULL;
    }
    struct span *s = malloc(sizeof(*s));
    if (!s) {
        if (fd >= 0)
            close(fd);
        free(s);
        http_request_complete_error(o->req, 500, "internal", "out of memory");
        opening_end(l, o);
        return NULL;
    }
    /* fd -1 or nothing to send: a span that ends at once. */
    *s = (struct span){.fd = fd, .pos = start, .end = fd < 0 ? start : size};
    http_request_complete_stream(o->req, 200, LOGSRV_CONTENT_TYPE, span_read, span_free, s, NULL);
    opening_end(l, o);
    return NULL;
}

static int h_logs(struct http_request *req, void *ctx)
{
    struct logsrv *l = ctx;
    struct logq q;
    if (!parse_request(req, &q))
        return 0;
    if (!opening_begin(l)) {
        http_request_add_header(req, "Retry-After", "1");
        return http_request_error(req, 503, "too_many_opens",
                                  "%u log files are being opened on this node; try again later",
                                  LOGSRV_MAX_OPENS);
    }
    struct opening *o = calloc(1, sizeof(*o));
    if (!o) {
        opening_end(l, NULL);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    *o = (struct opening){.l = l, .req = req, .q = q};
    snprintf(o->dir, sizeof(o->dir), "%s/%s/%" PRId64 ".%" PRId64, l->state_dir,
             LOGSRV_ATTEMPTS_DIR, q.job, q.attempt);
    /* Everything that touches the files runs on the worker: a log on a
     * path that blocks holds up only its own request. */
    int rc = http_request_suspend(req, 0, NULL, NULL);
    if (rc) {
        opening_end(l, o);
        return http_request_error(req, 503, "unavailable", "%s", gpo_strerror(rc));
    }
    if ((rc = opening_spawn(request_main, o)) != 0) {
        opening_end(l, o);
        http_request_complete_error(req, 500, "internal", "%s", gpo_strerror(rc));
    }
    return 0;
}

static bool authorize(struct http_request *req, unsigned route_flags, void *ctx)
{
    struct logsrv *l = ctx;
    (void)route_flags;
    const char *bearer = http_request_bearer(req);
    size_t n = bearer ? strlen(bearer) : 0;
    pthread_mutex_lock(&l->mu);
    bool ok = l->toklen > 0 && n == l->toklen && sodium_memcmp(bearer, l->token, n) == 0;
    pthread_mutex_unlock(&l->mu);
    if (!ok) {
        http_request_add_header(req, "WWW-Authenticate", "Bearer");
        http_request_error(req, 401, "unauthorized", "a valid bearer token is required");
    }
    return ok;
}

static const struct http_route routes[] = {
    {"GET", "/v1/attempts/{job}/{attempt}/logs", h_logs, 0},
};

/* ---- life ---- */

static bool token_ok(const char *token)
{
    static const char b64token[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                   "0123456789-._~+/=";
    return !token || (strlen(token) <= HTTP_TOKEN_MAX && strspn(token, b64token) == strlen(token));
}

int logsrv_set_token(struct logsrv *l, const char *token)
{
    if (!l || !token_ok(token))
        return GPO_EINVAL;
    size_t n = token ? strlen(token) : 0;
    pthread_mutex_lock(&l->mu);
    sodium_memzero(l->token, sizeof(l->token));
    memcpy(l->token, token ? token : "", n);
    l->toklen = n;
    pthread_mutex_unlock(&l->mu);
    return 0;
}

uint16_t logsrv_port(const struct logsrv *l)
{
    return l ? http_server_port(l->http) : 0;
}

int logsrv_new(const struct logsrv_config *cfg, struct logsrv **ret, char *err, size_t errlen)
{
    if (!cfg || !ret || !cfg->state_dir || !cfg->state_dir[0])
        return errbuf_set(err, errlen, GPO_EINVAL, "logsrv: no state directory");
    if (strlen(cfg->state_dir) > LOGSRV_STATE_DIR_MAX)
        return errbuf_set(err, errlen, GPO_EINVAL, "logsrv: state directory over %d bytes",
                          LOGSRV_STATE_DIR_MAX);
    if (!token_ok(cfg->token))
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "logsrv: the token is too long or has characters a bearer token "
                          "cannot");
    if (sodium_init() < 0)
        return errbuf_set(err, errlen, GPO_ECRYPTO, "logsrv: libsodium could not start");
    struct logsrv *l = calloc(1, sizeof(*l));
    if (!l)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    l->ifd = l->efd = -1;
    int rc = GPO_ENOMEM;
    l->mu_init = pthread_mutex_init(&l->mu, NULL) == 0;
    l->idle_init = pthread_cond_init(&l->idle, NULL) == 0;
    l->open = cfg->open;
    l->open_ctx = cfg->open_ctx;
    if (!l->mu_init || !l->idle_init || !(l->state_dir = strdup(cfg->state_dir))) {
        errbuf_set(err, errlen, rc, "out of memory");
        goto fail;
    }
    logsrv_set_token(l, cfg->token);
    l->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC); /* -1: the fallback tick */
    if ((l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        rc = errbuf_set(err, errlen, -errno, "logsrv: eventfd: %s", strerror(errno));
        goto fail;
    }
    size_t nroutes = sizeof(routes) / sizeof(routes[0]) + cfg->nextra;
    if (!(l->routes = calloc(nroutes, sizeof(*l->routes)))) {
        errbuf_set(err, errlen, rc, "out of memory");
        goto fail;
    }
    memcpy(l->routes, routes, sizeof(routes));
    for (size_t k = 0; k < cfg->nextra; k++)
        l->routes[sizeof(routes) / sizeof(routes[0]) + k] = cfg->extra_routes[k];
    struct http_config hc = {.bind_addr = cfg->bind_addr,
                             .port = cfg->port,
                             .routes = l->routes,
                             .nroutes = nroutes,
                             .authorize = authorize,
                             .ctx = l};
    char msg[512];
    if ((rc = http_server_new(&hc, &l->http, msg, sizeof(msg))) != 0 ||
        (rc = http_server_start(l->http, msg, sizeof(msg))) != 0) {
        rc = errbuf_set(err, errlen, rc, "logsrv: %s", msg);
        goto fail;
    }
    if ((rc = pthread_create(&l->watcher, NULL, logsrv_watcher_main, l)) != 0) {
        rc = errbuf_set(err, errlen, -rc, "logsrv: watcher thread: %s", strerror(rc));
        goto fail;
    }
    l->watcher_started = true;
    *ret = l;
    return 0;
fail:
    logsrv_free(l);
    return rc;
}

void logsrv_free(struct logsrv *l)
{
    if (!l)
        return;
    if (l->mu_init && l->idle_init) { /* opens in flight end first: they use l */
        pthread_mutex_lock(&l->mu);
        l->stopping = true;
        while (l->nopen)
            pthread_cond_wait(&l->idle, &l->mu);
        pthread_mutex_unlock(&l->mu);
    }
    http_server_free(l->http); /* cuts every stream: each follow_free has run */
    if (l->watcher_started) {
        pthread_mutex_lock(&l->mu);
        l->quit = true;
        pthread_mutex_unlock(&l->mu);
        uint64_t one = 1;
        ssize_t n = write(l->efd, &one, sizeof(one));
        (void)n;
        pthread_join(l->watcher, NULL);
    }
    if (l->ifd >= 0)
        close(l->ifd);
    if (l->efd >= 0)
        close(l->efd);
    if (l->mu_init)
        pthread_mutex_destroy(&l->mu);
    if (l->idle_init)
        pthread_cond_destroy(&l->idle);
    sodium_memzero(l->token, sizeof(l->token));
    free(l->state_dir);
    free(l->routes);
    free(l);
}

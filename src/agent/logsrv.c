/*
 * logsrv.c - the agent's log server (logsrv.h): the request, the attempt's
 * files, answers read straight from the log file, follow streams and the one
 * watcher thread that wakes them.
 *
 * Every read of a log file happens in a stream's read callback, on the HTTP
 * polling thread, with pread at the stream's own position: regular files in
 * the page cache answer at once, and no copy of a log is ever held in memory.
 * A follow stream's read that finds nothing checks for the status file and
 * otherwise sleeps until the watcher wakes it. The watcher takes references
 * to the streams it wakes under the lock and wakes them after letting go of
 * it, since a wake calls into MHD and MHD calls follow_free with its own
 * locks held.
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

#include "http/http.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define MAX_EVENT_WDS 64 /* distinct watches one batch of events names; more: wake all */
/* An attempt's directory: room for a file name after it within PATH_MAX. */
#define DIR_MAX (PATH_MAX - 64)
/* Room for "/attempts/JOB.ATTEMPT" after the state directory. */
_Static_assert(LOGSRV_STATE_DIR_MAX + 64 < DIR_MAX, "a state directory leaves room");

/* One follow stream. */
struct follow {
    struct logsrv *l;
    struct http_stream *st; /* our handle; NULL until registered */
    int fd;                 /* the log file; -1 until it exists */
    uid_t uid;
    off_t pos;           /* the next byte to send */
    int wd_file, wd_dir; /* inotify watches; -1: none */
    bool listed;         /* in l->follows */
    struct follow *prev, *next;
    char path[PATH_MAX];   /* the log file */
    char dir[DIR_MAX];     /* the attempt's directory */
    char status[PATH_MAX]; /* its status file */
};

struct logsrv {
    struct http_server *http;
    char *state_dir;
    int ifd; /* inotify; -1 when unavailable */
    int efd; /* eventfd: wakes the watcher (quit, a stream without watches) */
    pthread_t watcher;
    bool mu_init, watcher_started;
    pthread_mutex_t mu;
    /* under mu: */
    char token[HTTP_TOKEN_MAX + 1];
    size_t toklen;
    struct follow *follows;
    size_t nfollow;
    bool quit;
};

/* ---- the attempt and its files ---- */

/* What a request asked for. */
struct logq {
    int64_t job, attempt;
    const char *stream; /* "stdout" or "stderr" */
    int64_t offset;     /* negative: from the end */
    bool follow, head;
};

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

/* The whole of a small file (NUL-terminated) into *ret (caller frees), and
 * its owner. 0, GPO_ENOENT, -EFBIG, -errno. */
static int read_small(const char *path, size_t max, char **ret, size_t *ret_len, uid_t *ret_owner)
{
    int fd = open(path, O_RDONLY | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    char *buf = malloc(max + 1);
    size_t len = 0;
    int rc = !buf ? GPO_ENOMEM : fstat(fd, &st) != 0 ? -errno : 0;
    while (rc == 0 && len <= max) {
        ssize_t n = read(fd, buf + len, max + 1 - len);
        if (n < 0 && errno != EINTR)
            rc = -errno;
        else if (n == 0)
            break;
        else if (n > 0)
            len += (size_t)n;
    }
    close(fd);
    if (rc == 0 && len > max)
        rc = -EFBIG;
    if (rc) {
        free(buf);
        return rc;
    }
    buf[len] = '\0';
    *ret = buf;
    *ret_len = len;
    *ret_owner = st.st_uid;
    return 0;
}

/* From dir/attempt.json: the attempt's uid and the path of `stream`. 0;
 * GPO_ENOENT (no such attempt); GPO_EINVAL with a message (a malformed file, or
 * one the launcher did not write: only root or the agent's own user may own
 * it, since the uid in it decides which files may be read). */
static int attempt_load(const char *dir, const char *stream, uid_t *ret_uid, char *path,
                        size_t pathlen, char *err, size_t errlen)
{
    char file[PATH_MAX], *text = NULL;
    size_t len = 0;
    uid_t owner = 0;
    snprintf(file, sizeof(file), "%s/%s", dir, LOGSRV_ATTEMPT_FILE);
    int rc = read_small(file, LOGSRV_ATTEMPT_MAX, &text, &len, &owner);
    if (rc == GPO_ENOENT || rc == -ENOTDIR)
        return GPO_ENOENT;
    if (rc)
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: %s", file, gpo_strerror(rc));
    if (owner != 0 && owner != geteuid()) {
        free(text);
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: owned by uid %u, not by root or the agent",
                          file, (unsigned)owner);
    }
    json_error_t je;
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    json_t *uid = json_object_get(o, "uid"), *p = json_object_get(o, stream);
    rc = 0;
    if (!json_is_object(o))
        rc = errbuf_set(err, errlen, GPO_EINVAL, "%s: not a JSON object", file);
    else if (!json_is_integer(uid) || json_integer_value(uid) < 0 ||
             json_integer_value(uid) >= (json_int_t)UINT32_MAX)
        rc = errbuf_set(err, errlen, GPO_EINVAL, "%s: uid: expected an integer", file);
    else if (p && (!json_is_string(p) || json_string_value(p)[0] != '/' ||
                   strlen(json_string_value(p)) != json_string_length(p) ||
                   json_string_length(p) >= pathlen))
        rc = errbuf_set(err, errlen, GPO_EINVAL, "%s: %s: expected an absolute path", file, stream);
    if (rc == 0) {
        *ret_uid = (uid_t)json_integer_value(uid);
        if (p)
            snprintf(path, pathlen, "%s", json_string_value(p));
        else
            snprintf(path, pathlen, "%s/%s", dir, stream);
    }
    json_decref(o);
    return rc;
}

/* Opens a log file for reading and checks it after the open. 0 and *ret_fd,
 * *ret_size; GPO_ENOENT (not there yet); GPO_EPERM (not a regular file owned by
 * uid); -errno. */
static int log_open(const char *path, uid_t uid, int *ret_fd, off_t *ret_size)
{
    int fd = open(path, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOTDIR ? GPO_ENOENT : -errno;
    struct stat st;
    int rc = fstat(fd, &st) != 0                        ? -errno
             : !S_ISREG(st.st_mode) || st.st_uid != uid ? GPO_EPERM
                                                        : 0;
    if (rc) {
        close(fd);
        return rc;
    }
    *ret_fd = fd;
    *ret_size = st.st_size;
    return 0;
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
    close(s->fd);
    free(s);
}

/*
 * The shim creates a default log file as root and then gives it to the job's
 * user (fchown): a log that is root's, empty, in the attempt's own directory,
 * while the attempt runs (no status file), is one being created, and a
 * follow waits for it rather than refusing it.
 */
static bool being_created(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    struct stat st;
    char status[DIR_MAX + 32];
    snprintf(status, sizeof(status), "%s/%s", dir, LOGSRV_STATUS_FILE);
    return strncmp(path, dir, n) == 0 && path[n] == '/' && !strchr(path + n + 1, '/') &&
           lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0 && st.st_size == 0 &&
           stat(status, &st) != 0;
}

/* ---- follow streams ---- */

/* Whether another listed follow uses watch wd. Under l->mu. */
static bool wd_shared(const struct logsrv *l, const struct follow *self, int wd)
{
    for (const struct follow *f = l->follows; f; f = f->next)
        if (f != self && (f->wd_file == wd || f->wd_dir == wd))
            return true;
    return false;
}

/* The log file appeared and was opened: keep it and watch it (a failed
 * watch leaves the file to the watcher's fallback tick). */
static void follow_opened(struct follow *f, int fd)
{
    struct logsrv *l = f->l;
    pthread_mutex_lock(&l->mu);
    f->fd = fd;
    if (l->ifd >= 0)
        f->wd_file = inotify_add_watch(l->ifd, f->path, IN_MODIFY);
    pthread_mutex_unlock(&l->mu);
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
    }
    if (f->wd_file >= 0 && !wd_shared(l, f, f->wd_file))
        inotify_rm_watch(l->ifd, f->wd_file);
    if (f->wd_dir >= 0 && f->wd_dir != f->wd_file && !wd_shared(l, f, f->wd_dir))
        inotify_rm_watch(l->ifd, f->wd_dir);
    pthread_mutex_unlock(&l->mu);
    if (f->fd >= 0)
        close(f->fd);
    http_stream_release(f->st);
    free(f);
}

/* The attempt ended (its status file exists), or its directory is gone. */
static bool follow_over(const struct follow *f)
{
    struct stat st;
    return stat(f->status, &st) == 0 || (errno == ENOENT && stat(f->dir, &st) != 0);
}

static ssize_t follow_read(void *ctx, char *buf, size_t max)
{
    struct follow *f = ctx;
    for (int pass = 0; pass < 2; pass++) {
        if (f->fd < 0) {
            int fd;
            off_t size;
            int rc = log_open(f->path, f->uid, &fd, &size);
            if (rc == GPO_EPERM) {
                /* Still root's while the shim creates it: wait for the hand-over
                 * (the next write or tick). Else it may have been handed over
                 * since the open (a file never goes back to root): look again. */
                if (being_created(f->path, f->dir))
                    return 0;
                rc = log_open(f->path, f->uid, &fd, &size);
            }
            if (rc == 0)
                follow_opened(f, fd);
            else if (rc != GPO_ENOENT)
                return HTTP_STREAM_ERROR; /* not a file of the job's own */
        }
        ssize_t n = 0;
        if (f->fd >= 0) {
            do
                n = pread(f->fd, buf, max, f->pos);
            while (n < 0 && errno == EINTR);
        }
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

/* A follow stream for the request: 503 over the cap. Answers in every case. */
static int follow_start(struct logsrv *l, struct http_request *req, const struct logq *q,
                        const char *dir, const char *path, uid_t uid, int fd, off_t start)
{
    struct follow *f = calloc(1, sizeof(*f));
    if (!f) {
        if (fd >= 0)
            close(fd);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    *f = (struct follow){.l = l, .fd = fd, .uid = uid, .pos = start, .wd_file = -1, .wd_dir = -1};
    snprintf(f->path, sizeof(f->path), "%s", path);
    snprintf(f->dir, sizeof(f->dir), "%s", dir);
    snprintf(f->status, sizeof(f->status), "%s/%s", dir, LOGSRV_STATUS_FILE);
    pthread_mutex_lock(&l->mu);
    bool full = l->nfollow >= LOGSRV_MAX_FOLLOW;
    pthread_mutex_unlock(&l->mu);
    if (full) {
        follow_free(f);
        http_request_add_header(req, "Retry-After", "1");
        return http_request_error(req, 503, "too_many_streams",
                                  "%u log streams are open on this node; try again later",
                                  LOGSRV_MAX_FOLLOW);
    }
    struct http_stream *st = NULL;
    int rc = http_request_respond_stream(req, 200, LOGSRV_CONTENT_TYPE, follow_read, follow_free, f,
                                         &st);
    if (rc) /* f is freed */
        return http_request_error(req, 500, "internal", "attempt %" PRId64 ".%" PRId64 ": %s",
                                  q->job, q->attempt, gpo_strerror(rc));
    bool kick = false;
    pthread_mutex_lock(&l->mu);
    f->st = st;
    f->listed = true;
    f->next = l->follows;
    if (f->next)
        f->next->prev = f;
    l->follows = f;
    l->nfollow++;
    if (l->ifd >= 0) {
        f->wd_dir = inotify_add_watch(l->ifd, dir, IN_CREATE | IN_MOVED_TO | IN_ONLYDIR);
        if (fd >= 0)
            f->wd_file = inotify_add_watch(l->ifd, path, IN_MODIFY);
        kick = f->wd_dir < 0 || (fd >= 0 && f->wd_file < 0);
    }
    pthread_mutex_unlock(&l->mu);
    if (kick) { /* the watcher polls faster while some stream has no watch */
        uint64_t one = 1;
        ssize_t n = write(l->efd, &one, sizeof(one));
        (void)n;
    }
    return 0;
}

/* ---- the route ---- */

static int h_logs(struct http_request *req, void *ctx)
{
    struct logsrv *l = ctx;
    struct logq q;
    if (!parse_request(req, &q))
        return 0;
    char dir[DIR_MAX], path[PATH_MAX], msg[PATH_MAX + 128];
    snprintf(dir, sizeof(dir), "%s/%s/%" PRId64 ".%" PRId64, l->state_dir, LOGSRV_ATTEMPTS_DIR,
             q.job, q.attempt);
    uid_t uid = 0;
    int rc = attempt_load(dir, q.stream, &uid, path, sizeof(path), msg, sizeof(msg));
    if (rc == GPO_ENOENT)
        return http_request_error(req, 404, "not_found",
                                  "no attempt %" PRId64 ".%" PRId64 " on this node", q.job,
                                  q.attempt);
    if (rc)
        return http_request_error(req, 500, "internal", "%s", msg);
    int fd = -1;
    off_t size = 0;
    rc = log_open(path, uid, &fd, &size);
    if (rc == GPO_EPERM && q.follow && being_created(path, dir))
        rc = GPO_ENOENT; /* not handed to the job's user yet: the follow waits for it (and its
                          * HEAD says so: 200, nothing yet) */
    else if (rc == GPO_EPERM)
        rc = log_open(path, uid, &fd, &size); /* handed over since the open? */
    if (rc == GPO_EPERM)
        return http_request_error(req, 403, "forbidden",
                                  "%s of attempt %" PRId64 ".%" PRId64
                                  ": %s is not a regular file owned by uid %u",
                                  q.stream, q.job, q.attempt, path, (unsigned)uid);
    if (rc == GPO_EACCES || rc == -ELOOP)
        return http_request_error(req, 403, "forbidden",
                                  "%s of attempt %" PRId64 ".%" PRId64 ": %s: %s", q.stream, q.job,
                                  q.attempt, path, gpo_strerror(rc));
    if (rc && rc != GPO_ENOENT)
        return http_request_error(req, 500, "internal", "%s: %s", path, gpo_strerror(rc));
    off_t start = q.offset >= 0 ? q.offset : size + q.offset > 0 ? size + q.offset : 0;
    if (q.follow && !q.head)
        return follow_start(l, req, &q, dir, path, uid, fd, start);
    char text[32];
    snprintf(text, sizeof(text), "%lld", (long long)size);
    bool empty = fd < 0 || start >= size || q.head;
    struct span *s = empty ? NULL : malloc(sizeof(*s));
    if (http_request_add_header(req, LOGSRV_SIZE_HEADER, text) != 0 || (!empty && !s)) {
        if (fd >= 0)
            close(fd);
        free(s);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    if (empty) {
        if (fd >= 0)
            close(fd);
        return http_request_respond_bytes(req, 200, LOGSRV_CONTENT_TYPE, NULL, 0);
    }
    *s = (struct span){.fd = fd, .pos = start, .end = size};
    rc = http_request_respond_stream(req, 200, LOGSRV_CONTENT_TYPE, span_read, span_free, s, NULL);
    return rc ? http_request_error(req, 500, "internal", "%s", gpo_strerror(rc)) : 0;
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

/* ---- the watcher ---- */

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wakes every follow stream (all) or those with a watch in wds. */
static void wake_streams(struct logsrv *l, bool all, const int *wds, size_t nwd)
{
    struct http_stream *list[LOGSRV_MAX_FOLLOW];
    size_t n = 0;
    pthread_mutex_lock(&l->mu);
    for (struct follow *f = l->follows; f && n < LOGSRV_MAX_FOLLOW; f = f->next) {
        bool hit = all;
        for (size_t i = 0; !hit && i < nwd; i++)
            hit = f->wd_file == wds[i] || f->wd_dir == wds[i];
        if (hit) {
            http_stream_ref(f->st);
            list[n++] = f->st;
        }
    }
    pthread_mutex_unlock(&l->mu);
    for (size_t i = 0; i < n; i++) {
        http_stream_wake(list[i]);
        http_stream_release(list[i]);
    }
}

/* Reads the pending inotify events into wds; false when they were too many
 * to name (the queue overflowed, or more than MAX_EVENT_WDS watches). */
static bool read_events(int ifd, int *wds, size_t *nwd)
{
    union {
        struct inotify_event ev;
        char bytes[4096];
    } buf;
    bool named = true;
    ssize_t len;
    while ((len = read(ifd, buf.bytes, sizeof(buf.bytes))) > 0) {
        for (size_t at = 0; at + sizeof(struct inotify_event) <= (size_t)len;) {
            struct inotify_event ev;
            memcpy(&ev, buf.bytes + at, sizeof(ev));
            at += sizeof(ev) + ev.len;
            if (ev.mask & IN_Q_OVERFLOW)
                named = false;
            size_t i = 0;
            while (i < *nwd && wds[i] != ev.wd)
                i++;
            if (i == *nwd && *nwd < MAX_EVENT_WDS)
                wds[(*nwd)++] = ev.wd;
            else if (i == *nwd)
                named = false;
        }
    }
    return named;
}

static void *watcher_main(void *arg)
{
    struct logsrv *l = arg;
    int64_t last_tick = mono_ms();
    for (;;) {
        pthread_mutex_lock(&l->mu);
        bool quit = l->quit, unwatched = l->ifd < 0;
        for (const struct follow *f = l->follows; f && !unwatched; f = f->next)
            unwatched = f->wd_dir < 0 || (f->fd >= 0 && f->wd_file < 0);
        pthread_mutex_unlock(&l->mu);
        if (quit)
            break;
        int64_t period = unwatched ? LOGSRV_FALLBACK_MS : LOGSRV_TICK_MS;
        int64_t left = last_tick + period - mono_ms();
        struct pollfd p[2] = {{.fd = l->efd, .events = POLLIN}, {.fd = l->ifd, .events = POLLIN}};
        int n = poll(p, l->ifd >= 0 ? 2 : 1, left > 0 ? (int)left : 0);
        if (n > 0 && (p[0].revents & POLLIN)) {
            uint64_t v;
            ssize_t r = read(l->efd, &v, sizeof(v));
            (void)r;
        }
        int wds[MAX_EVENT_WDS];
        size_t nwd = 0;
        bool all = false;
        if (n > 0 && l->ifd >= 0 && (p[1].revents & POLLIN))
            all = !read_events(l->ifd, wds, &nwd);
        if (mono_ms() - last_tick >= period) {
            all = true;
            last_tick = mono_ms();
        }
        if (all || nwd)
            wake_streams(l, all, wds, nwd);
    }
    return NULL;
}

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
    if (!l->mu_init || !(l->state_dir = strdup(cfg->state_dir))) {
        errbuf_set(err, errlen, rc, "out of memory");
        goto fail;
    }
    logsrv_set_token(l, cfg->token);
    l->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC); /* -1: the fallback tick */
    if ((l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        rc = errbuf_set(err, errlen, -errno, "logsrv: eventfd: %s", strerror(errno));
        goto fail;
    }
    struct http_config hc = {.bind_addr = cfg->bind_addr,
                             .port = cfg->port,
                             .routes = routes,
                             .nroutes = sizeof(routes) / sizeof(routes[0]),
                             .authorize = authorize,
                             .ctx = l};
    char msg[512];
    if ((rc = http_server_new(&hc, &l->http, msg, sizeof(msg))) != 0 ||
        (rc = http_server_start(l->http, msg, sizeof(msg))) != 0) {
        rc = errbuf_set(err, errlen, rc, "logsrv: %s", msg);
        goto fail;
    }
    if ((rc = pthread_create(&l->watcher, NULL, watcher_main, l)) != 0) {
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
    sodium_memzero(l->token, sizeof(l->token));
    free(l->state_dir);
    free(l);
}

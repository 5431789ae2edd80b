/*
 * logs.c - GET /v1/jobs/{id}/logs: an attempt's stdout or stderr, read
 * through the log server of the node that ran it (src/agent/logsrv.h).
 *
 * The handler decides everything that needs the server's state (who may
 * read, which attempt, which node, its URL and token) and suspends the
 * request; a worker thread, one per proxied request and at most PROXY_MAX at
 * once, then talks to the agent with the blocking HTTP client and touches
 * nothing of the server's but that request. It asks the agent with HEAD
 * first, so that the agent's status (404, 403, ...) is known before the
 * answer starts (a follow's HEAD is a follow's: a log the shim has not
 * handed to the job's user yet is one to wait for); an error is passed on
 * with the agent's code and message, which a GET fetches (if that GET finds
 * the log, handed over between the two asks, the answer goes on as for a
 * 200); a 200 becomes a streamed answer fed from the agent's body through
 * a bounded buffer (the worker waits while the client reads slower than the
 * agent sends). When the client leaves, the stream closes, the next piece
 * or the once-a-second call of httpc_stream sees it, and the worker stops.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/api/api.h"
#include "server/srv.h"
#include "util/httpc.h"
#include "base/banned.h"

#define PROXY_MAX       64u                 /* proxied requests at once */
#define PROXY_BUF       ((size_t)64 * 1024) /* bytes between the agent and a slow client */
#define HEAD_TIMEOUT_MS 10000L              /* the agent's HEAD and error answers */
#define NODE_HEADER     "X-Gpuorch-Node"
#define LAUNCH_WAIT_MS  30000 /* a follow waits this long for its attempt to be launched */
#define LAUNCH_POLL_MS  200

/* What the request asked for. */
struct logs_query {
    int64_t attempt; /* 0: the current one, else the last one */
    const char *stream;
    int64_t offset;
    bool follow;
    int64_t rank;
    bool current; /* the job's current attempt (its agent may not have launched it yet) */
};

/* One proxied request, shared by its worker and (once streaming) its
 * answer's read callback: freed when both have let go. */
struct proxy {
    struct server *s; /* its logs_workers counts this worker; stop waits for it */
    pthread_mutex_t mu;
    pthread_cond_t room; /* the buffer has room, or the client left */
    unsigned refs;
    char *buf; /* PROXY_BUF bytes; [off, len) not sent yet */
    size_t off, len;
    bool eof, failed, gone;
    struct http_stream *st;
    /* the worker's own: */
    struct http_request *req; /* until completed */
    char node[CLUSTER_HOST_MAX + 1];
    char url[HTTPC_URL_MAX];
    char token[AUTH_LOG_TOKEN_LEN + 1];
    char path[528];       /* the agent's path, query included */
    bool wait_launch;     /* follow of the current attempt: a 404 may mean "not launched yet" */
    char plain_path[512]; /* the same without follow: the GET of an error's message */
};

static void proxy_unref(struct proxy *p)
{
    pthread_mutex_lock(&p->mu);
    bool last = --p->refs == 0;
    pthread_mutex_unlock(&p->mu);
    if (!last)
        return;
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->room);
    free(p->buf);
    free(p);
}

/* ---- the answer's side (the HTTP polling thread) ---- */

static ssize_t proxy_read(void *ctx, char *buf, size_t max)
{
    struct proxy *p = ctx;
    pthread_mutex_lock(&p->mu);
    size_t n = p->len - p->off < max ? p->len - p->off : max;
    memcpy(buf, p->buf + p->off, n);
    p->off += n;
    if (p->off == p->len)
        p->off = p->len = 0;
    ssize_t rc = n ? (ssize_t)n : p->failed ? HTTP_STREAM_ERROR : p->eof ? HTTP_STREAM_END : 0;
    if (n)
        pthread_cond_signal(&p->room);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

/* The answer is over (sent, cut, or the client left). */
static void proxy_gone(void *ctx)
{
    struct proxy *p = ctx;
    pthread_mutex_lock(&p->mu);
    p->gone = true;
    pthread_cond_signal(&p->room);
    pthread_mutex_unlock(&p->mu);
    proxy_unref(p);
}

/* ---- the worker ---- */

/* httpc_stream's callback: copies a piece of the agent's body into the
 * buffer, waiting for room; non-zero once the client has left. */
static int proxy_data(const void *data, size_t len, void *ctx)
{
    struct proxy *p = ctx;
    const char *at = data;
    pthread_mutex_lock(&p->mu);
    while (!p->gone && len > 0) {
        if (p->off > 0) {
            memmove(p->buf, p->buf + p->off, p->len - p->off);
            p->len -= p->off;
            p->off = 0;
        }
        size_t n = PROXY_BUF - p->len < len ? PROXY_BUF - p->len : len;
        memcpy(p->buf + p->len, at, n);
        p->len += n;
        at += n;
        len -= n;
        pthread_mutex_unlock(&p->mu);
        http_stream_wake(p->st);
        pthread_mutex_lock(&p->mu);
        if (len > 0 && p->len == PROXY_BUF && !p->gone) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&p->room, &p->mu, &ts);
        }
    }
    bool gone = p->gone;
    pthread_mutex_unlock(&p->mu);
    if (!gone && !data) /* the once-a-second call: lets the stream see a client that left */
        http_stream_wake(p->st);
    return gone;
}

/* Passes on an agent's error answer (status, body) with the node named. */
static void pass_error(struct proxy *p, long status, const struct httpc_response *r)
{
    json_t *o = json_loadb(r->body, r->len, 0, NULL);
    json_t *e = json_object_get(o, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    if (status == 401) /* the node refused our token: not the user's problem */
        http_request_complete_error(p->req, 502, "node_unauthorized",
                                    "node %s refused the controller's log token", p->node);
    else if (status < 400 || status > 599)
        http_request_complete_error(p->req, 502, "node_error", "node %s answered %ld", p->node,
                                    status);
    else if (code && msg) {
        if (status == 503)
            http_request_add_header(p->req, "Retry-After", "1");
        http_request_complete_error(p->req, (unsigned)status, code, "node %s: %s", p->node, msg);
    } else
        http_request_complete_error(p->req, (unsigned)status, "node_error", "node %s answered %ld",
                                    p->node, status);
    json_decref(o);
}

/* Asks the agent with HEAD; answers the request itself unless it is a 200.
 * Returns true to go on with the stream. */
static bool proxy_head(struct proxy *p, struct httpc *c)
{
    char err[512];
    struct httpc_response r = {0};
    int rc;
    long status;
    /* The controller marks an attempt running when it assigns it; its agent
     * launches it within about a second. A follow of it waits for that. */
    for (int64_t waited = 0;; waited += LAUNCH_POLL_MS) {
        rc = httpc_request(c, "HEAD", p->path, NULL, 0, HEAD_TIMEOUT_MS, &r, err, sizeof(err));
        status = r.status;
        httpc_response_release(&r);
        if (rc || status != 404 || !p->wait_launch || waited >= LAUNCH_WAIT_MS ||
            atomic_load(&p->s->logs_stop))
            break;
        nanosleep(&(struct timespec){0, LAUNCH_POLL_MS * 1000000L}, NULL);
    }
    if (rc == 0 && status == 200)
        return true;
    if (rc == 0) /* the error's message comes with a GET */
        rc = httpc_request(c, "GET", p->plain_path, NULL, 0, HEAD_TIMEOUT_MS, &r, err, sizeof(err));
    bool go_on = false;
    if (rc)
        http_request_complete_error(p->req, 502, "node_unreachable", "node %s: %s", p->node, err);
    else if (r.status == 200)
        go_on = true; /* the log is there now: handed to the job's user between the two asks */
    else
        pass_error(p, r.status, &r);
    httpc_response_release(&r);
    return go_on;
}

static void proxy_run(struct proxy *p)
{
    char err[512];
    struct httpc *c = NULL;
    if (httpc_new(p->url, p->token, &c, err, sizeof(err)) != 0) {
        http_request_complete_error(p->req, 502, "node_unreachable", "node %s: %s", p->node, err);
        return;
    }
    if (!proxy_head(p, c)) {
        httpc_free(c);
        return;
    }
    http_request_add_header(p->req, NODE_HEADER, p->node);
    p->refs++; /* the answer's, dropped in proxy_gone (no other thread knows p yet) */
    if (http_request_complete_stream(p->req, 200, "text/plain", proxy_read, proxy_gone, p,
                                     &p->st) != 0) {
        httpc_free(c);
        return;
    }
    long status = 0;
    int rc = httpc_stream(c, p->path, 0, proxy_data, p, &status, err, sizeof(err));
    pthread_mutex_lock(&p->mu);
    if (rc == 0 && status == 200)
        p->eof = true;
    else
        p->failed = true; /* cut: the client sees a body that did not end */
    pthread_mutex_unlock(&p->mu);
    http_stream_wake(p->st);
    http_stream_release(p->st);
    httpc_free(c);
}

static void *proxy_main(void *arg)
{
    struct proxy *p = arg;
    struct server *s = p->s;
    proxy_run(p);
    proxy_unref(p);
    atomic_fetch_sub(&s->logs_workers, 1); /* last: the server may be freed after it */
    return NULL;
}

/* ---- the handler (the polling thread) ---- */

static bool parse_int(const char *text, bool negative_ok, int64_t *ret)
{
    const char *digits = text && negative_ok && text[0] == '-' ? text + 1 : text;
    if (!digits || !*digits || strlen(digits) > 18 ||
        strspn(digits, "0123456789") != strlen(digits))
        return false;
    *ret = strtoll(text, NULL, 10);
    return true;
}

__attribute__((format(printf, 2, 3))) static bool bad_query(struct http_request *req,
                                                            const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    http_request_error(req, 400, "invalid_query", "%s", msg);
    return false;
}

/* Reads the query; answers 400 itself and returns false on a problem. */
static bool parse_query(struct http_request *req, struct logs_query *q)
{
    *q = (struct logs_query){.stream = "stdout"};
    for (size_t i = 0; i < http_request_query_count(req); i++) {
        const char *name, *v;
        http_request_query_at(req, i, &name, &v);
        if (strcmp(name, "attempt") == 0) {
            if (!parse_int(v, false, &q->attempt) || q->attempt < 1)
                return bad_query(req, "attempt: expected a positive integer");
        } else if (strcmp(name, "stream") == 0) {
            if (strcmp(v, "stdout") != 0 && strcmp(v, "stderr") != 0)
                return bad_query(req, "stream: expected stdout or stderr");
            q->stream = strcmp(v, "stdout") == 0 ? "stdout" : "stderr";
        } else if (strcmp(name, "offset") == 0) {
            if (!parse_int(v, true, &q->offset))
                return bad_query(req, "offset: expected an integer (-N: the last N bytes)");
        } else if (strcmp(name, "follow") == 0) {
            bool on = strcmp(v, "1") == 0 || strcmp(v, "true") == 0;
            if (!on && strcmp(v, "0") != 0 && strcmp(v, "false") != 0)
                return bad_query(req, "follow: expected 1 or 0");
            q->follow = on;
        } else if (strcmp(name, "rank") == 0) {
            if (!parse_int(v, false, &q->rank) || q->rank > 65535)
                return bad_query(req, "rank: expected an integer from 0 to 65535");
        } else {
            return bad_query(req,
                             "unknown query parameter '%.40s' (attempt, stream, offset, follow, "
                             "rank)",
                             name);
        }
    }
    return true;
}

/* The node of attempt q->attempt of job `id` at rank q->rank, from the
 * store's attempt rows (an attempt no longer current). Answers 404/400/500
 * itself and returns false on a problem. */
static bool stored_node(struct server *s, struct http_request *req, int64_t id,
                        const struct logs_query *q, char *node, size_t len)
{
    struct store_job row = {0};
    if (store_job_get(s->store, id, &row) != 0) {
        http_request_error(req, 500, "internal", "job %" PRId64 ": the store failed", id);
        return false;
    }
    const struct store_attempt *a = NULL;
    for (size_t k = 0; k < row.nattempts && !a; k++)
        if (row.attempts[k].attempt == q->attempt)
            a = &row.attempts[k];
    struct attempt att = {0};
    bool ok = false;
    if (!a)
        http_request_error(req, 404, "not_found", "job %" PRId64 " has no attempt %" PRId64, id,
                           q->attempt);
    else if (attempt_decode(a->nodes, &att) != 0)
        http_request_error(req, 500, "internal",
                           "job %" PRId64 ", attempt %" PRId64 ": its nodes do not read back", id,
                           q->attempt);
    else if ((size_t)q->rank >= att.nparts)
        http_request_error(req, 400, "invalid_query",
                           "rank: attempt %" PRId64 " of job %" PRId64 " ran on %zu node(s)",
                           q->attempt, id, att.nparts);
    else
        ok = snprintf(node, len, "%s", att.parts[q->rank].node) < (int)len;
    attempt_release(&att);
    store_job_release(&row);
    return ok;
}

/* Who may read (as GET /v1/jobs/{id}), which attempt, on which node. Answers
 * itself and returns false on a problem. */
static bool attempt_node(struct server *s, struct http_request *req, struct logs_query *q,
                         int64_t *ret_id, char *node, size_t len)
{
    int64_t id;
    if (!parse_int(http_request_param(req, "id"), false, &id) || id < 1) {
        http_request_error(req, 400, "invalid_path", "job id: expected a positive integer");
        return false;
    }
    pthread_mutex_lock(&s->lock);
    const struct job *j = jobs_find(&s->jobs, id);
    bool found = j != NULL, may = j && auth_user_may(api_request_user(req), j->team);
    int64_t current = j ? j->att.n : 0, last = j ? j->attempts : 0;
    size_t nparts = j && current ? j->att.nparts : 0;
    if (may && !q->attempt)
        q->attempt = current ? current : last;
    bool here = may && q->attempt && q->attempt == current && (size_t)q->rank < nparts;
    q->current = here;
    if (here)
        snprintf(node, len, "%s", j->att.parts[q->rank].node);
    pthread_mutex_unlock(&s->lock);
    *ret_id = id;
    if (!found) {
        http_request_error(req, 404, "not_found", "no job %" PRId64, id);
        return false;
    }
    if (!may) {
        http_request_error(req, 403, "forbidden", "job %" PRId64 " belongs to another team", id);
        return false;
    }
    if (!q->attempt) {
        http_request_error(req, 404, "not_found", "job %" PRId64 " has not run yet", id);
        return false;
    }
    if (q->attempt == current && !here) {
        http_request_error(req, 400, "invalid_query",
                           "rank: attempt %" PRId64 " of job %" PRId64 " runs on %zu node(s)",
                           current, id, nparts);
        return false;
    }
    if (q->attempt > last && q->attempt != current) {
        http_request_error(req, 404, "not_found", "job %" PRId64 " has no attempt %" PRId64, id,
                           q->attempt);
        return false;
    }
    return here || stored_node(s, req, id, q, node, len);
}

/* The log server of node `name`: base URL "http://ADDR:PORT" and its token.
 * Takes the lock itself. 0, GPO_ENOENT (unknown node, or it registered no
 * log port), GPO_ENAMETOOLONG (a buffer too small). */
static int log_endpoint(struct server *s, const char *name, char *url, size_t urllen, char *token,
                        size_t toklen)
{
    int rc = GPO_ENOENT;
    pthread_mutex_lock(&s->lock);
    const struct cluster_node *n = cluster_node_get(&s->cluster, name);
    if (n && n->addr && n->log_port) {
        bool v6 = strchr(n->addr, ':') != NULL;
        int k = snprintf(url, urllen, "http://%s%s%s:%u", v6 ? "[" : "", n->addr, v6 ? "]" : "",
                         n->log_port);
        rc = k < 0 || (size_t)k >= urllen || toklen < AUTH_LOG_TOKEN_LEN + 1 ? GPO_ENAMETOOLONG : 0;
    }
    pthread_mutex_unlock(&s->lock);
    if (rc == 0)
        auth_node_log_token(&s->auth, name, token);
    return rc;
}

static int job_logs(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    struct logs_query q;
    char node[CLUSTER_HOST_MAX + 1];
    int64_t id;
    if (!parse_query(req, &q) || !attempt_node(s, req, &q, &id, node, sizeof(node)))
        return 0;
    struct proxy *p = calloc(1, sizeof(*p));
    char *buf = malloc(PROXY_BUF);
    if (!p || !buf) {
        free(p);
        free(buf);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    *p = (struct proxy){
        .s = s, .refs = 1, .buf = buf, .req = req, .wait_launch = q.follow && q.current};
    snprintf(p->node, sizeof(p->node), "%s", node);
    int rc = log_endpoint(s, node, p->url, sizeof(p->url), p->token, sizeof(p->token));
    int n = snprintf(p->plain_path, sizeof(p->plain_path),
                     "/v1/attempts/%" PRId64 "/%" PRId64 "/logs?stream=%s&offset=%" PRId64, id,
                     q.attempt, q.stream, q.offset);
    snprintf(p->path, sizeof(p->path), "%s%s", p->plain_path, q.follow ? "&follow=1" : "");
    if (rc || n < 0 || (size_t)n >= sizeof(p->plain_path)) {
        free(buf);
        free(p);
        return http_request_error(req, 502, "node_unreachable", "node %s: no log server registered",
                                  node);
    }
    if (atomic_fetch_add(&s->logs_workers, 1) >= PROXY_MAX) {
        atomic_fetch_sub(&s->logs_workers, 1);
        free(buf);
        free(p);
        http_request_add_header(req, "Retry-After", "1");
        return http_request_error(req, 503, "too_many_streams",
                                  "%u log requests are being proxied; try again later", PROXY_MAX);
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->room, NULL);
    pthread_attr_t attr;
    pthread_t t;
    bool attr_ok = pthread_attr_init(&attr) == 0;
    if (!attr_ok || http_request_suspend(req, 0, NULL, NULL) != 0) {
        if (attr_ok)
            pthread_attr_destroy(&attr);
        atomic_fetch_sub(&s->logs_workers, 1);
        proxy_unref(p);
        return http_request_error(req, 503, "unavailable", "the server is stopping");
    }
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&t, &attr, proxy_main, p);
    pthread_attr_destroy(&attr);
    if (rc) {
        atomic_fetch_sub(&s->logs_workers, 1);
        proxy_unref(p);
        return http_request_complete_error(req, 503, "unavailable",
                                           "no thread for the log request: %s", strerror(rc));
    }
    return 0;
}

static const struct http_route routes[] = {
    {"GET", "/v1/jobs/{id}/logs", job_logs, 0, NULL},
};
const struct api_routes api_logs_routes = {routes, sizeof(routes) / sizeof(routes[0])};

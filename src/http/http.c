/*
 * http.c - routes and JSON answers over libmicrohttpd: one polling thread
 * (epoll) for all connections, one timer thread for suspended requests'
 * deadlines. Taking the target apart and matching it against the route table
 * is route.c's (pure, see route.h); this file is the server, the requests'
 * lifetime, their bodies and answers, suspension and the timer.
 *
 * How it fits MHD:
 *  - We bind the listen socket ourselves and hand it to MHD, so that a
 *    failure can be named ("bind 127.0.0.1:80: Permission denied") and IPv6
 *    needs nothing special.
 *  - The request object is made in the URI-log callback from the raw
 *    request target, so that we split the path before any decoding (a %2F
 *    stays inside its segment) and parse the query ourselves. It is freed by
 *    reference count: MHD holds one until NOTIFY_COMPLETED, a suspension one
 *    until its completion, a running timeout callback one. That is why a
 *    completion is always safe to make, even after the client left or the
 *    server stopped: the request it names is still there.
 *  - An answer is stored on the request and queued by the access handler
 *    on the polling thread: right after the handler, or, for a suspended
 *    request, when MHD calls the handler again after MHD_resume_connection.
 *    So MHD_queue_response only ever runs on MHD's own thread.
 *  - srv->mu guards every field another thread may touch (state, resp,
 *    refs, lists). No MHD call and no callback runs under it, since MHD
 *    may hold its own locks while it calls us.
 *  - The server object itself lives until the last request is released,
 *    for completions owed after http_server_free.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "http/http.h"
#include "http/route.h"
#include "util/banned.h"

#define MSG_MAX 512

enum req_state {
    REQ_RECEIVING,  /* headers and body arriving, then the handler */
    REQ_SUSPENDING, /* the handler called http_request_suspend; MHD not told yet */
    REQ_SUSPENDED,  /* MHD-suspended, waiting for its completion */
    REQ_RESUMING,   /* answered while suspended; MHD will call us to queue it */
    REQ_ANSWERED,   /* the answer is queued */
    REQ_DONE,       /* MHD is done with it */
};

struct hdr {
    char *name, *value;
};

struct http_request {
    struct http_server *srv;
    struct MHD_Connection *conn;    /* NULL once REQ_DONE */
    const struct http_route *route; /* the matched row of cfg.routes */
    char method[32];
    struct route_target target; /* path, query and parameters */
    char client[INET6_ADDRSTRLEN];
    int64_t start_us;
    bool headers_seen, in_handler, body_unexpected, body_too_big, body_oom;
    char *body;
    size_t body_len, body_cap;
    json_t *json;
    struct hdr hdrs[HTTP_MAX_RESP_HEADERS];
    size_t nhdrs;
    unsigned status; /* of the stored or queued answer */
    /* under srv->mu from the handler on */
    struct MHD_Response *resp; /* the stored answer, not yet queued */
    bool resp_shared;          /* one of srv's prebuilt answers: not ours to destroy */
    enum req_state state;
    unsigned refs;
    bool suspend_held; /* a completion is owed */
    http_timeout_fn on_timeout;
    void *timeout_ctx;
    unsigned timeout_ms;
    int64_t deadline_us;
    bool armed;                         /* in the timer list */
    struct http_request *tprev, *tnext; /* timer list, by deadline */
    struct http_request *prev, *next;   /* srv->suspended */
    union {
        max_align_t align;
        unsigned char bytes[HTTP_APP_DATA_SIZE];
    } app; /* the server's own, zeroed at the start */
};

struct http_server {
    struct http_config cfg; /* strings cleared: only routes and callbacks kept */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char addr_text[64];
    char *tls_cert, *tls_key;
    struct route_table *table;
    struct MHD_Response *resp_oom, *resp_stop;
    struct MHD_Daemon *daemon;
    uint16_t port;
    pthread_t timer;
    bool sync_init, started, timer_quit;
    pthread_mutex_t mu;
    pthread_cond_t timer_cond; /* the timer list's head changed, or quit */
    pthread_cond_t idle_cond;  /* resuming or nlive went down */
    bool stopping, freed;
    size_t resuming; /* MHD_resume_connection calls in flight off the polling thread */
    size_t nlive;    /* requests MHD holds */
    size_t nreqs;    /* request objects not freed */
    struct http_request *suspended;
    struct http_request *thead, *ttail;
};

static const char OOM_BODY[] =
    "{\"error\":{\"status\":500,\"code\":\"internal\",\"message\":\"out of memory\"}}";
static const char STOP_BODY[] =
    "{\"error\":{\"status\":503,\"code\":\"unavailable\",\"message\":\"the server is stopping\"}}";

const char *http_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
#define HTTP_ERR_CASE(name, value, text)                                                           \
    case value:                                                                                    \
        return text;
        HTTP_ERRNO_MAP(HTTP_ERR_CASE)
#undef HTTP_ERR_CASE
    default:
        return "unknown error";
    }
}

__attribute__((format(printf, 3, 4))) static void seterr(char *err, size_t len, const char *fmt,
                                                         ...)
{
    va_list ap;
    if (!err || len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void wait_until(pthread_cond_t *c, pthread_mutex_t *m, int64_t deadline_us)
{
    struct timespec ts = {.tv_sec = deadline_us / 1000000,
                          .tv_nsec = (long)(deadline_us % 1000000) * 1000};
    pthread_cond_timedwait(c, m, &ts);
}

/* ---- building answers (any thread: they touch only the request's headers) ---- */

static bool status_ok(unsigned status)
{
    return status >= 100 && status <= 599;
}

/* A response over `data`; with MHD_RESPMEM_MUST_FREE the data is ours to
 * free() and is freed here on failure. */
static int build_bytes(struct http_request *req, const char *ctype, const void *data, size_t len,
                       enum MHD_ResponseMemoryMode mode, struct MHD_Response **ret)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)data, mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE)
            free((void *)data);
        return HTTP_ENOMEM;
    }
    bool ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype) == MHD_YES;
    for (size_t i = 0; ok && i < req->nhdrs; i++)
        ok = MHD_add_response_header(r, req->hdrs[i].name, req->hdrs[i].value) == MHD_YES;
    if (!ok) {
        MHD_destroy_response(r);
        return HTTP_ENOMEM;
    }
    *ret = r;
    return 0;
}

static int build_json(struct http_request *req, json_t *body, struct MHD_Response **ret)
{
    char *s = NULL;
    if (body) {
        s = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
        json_decref(body);
        if (!s)
            return HTTP_ENOMEM;
    }
    return build_bytes(req, "application/json", s ? s : "", s ? strlen(s) : 0,
                       s ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT, ret);
}

__attribute__((format(printf, 4, 0))) static int build_error(struct http_request *req,
                                                             unsigned status, const char *code,
                                                             const char *fmt, va_list ap,
                                                             struct MHD_Response **ret)
{
    char msg[MSG_MAX];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    route_utf8_sanitize(msg);
    json_t *o = json_pack("{s:{s:i,s:s,s:s}}", "error", "status", (int)status, "code", code,
                          "message", msg);
    if (!o)
        return HTTP_ENOMEM;
    return build_json(req, o, ret);
}

/* Stores r (NULL: the prebuilt out-of-memory answer) as the answer. Under
 * srv->mu once other threads may see the request. */
static void set_shared(struct http_request *req, struct MHD_Response *r, unsigned status)
{
    req->resp = r;
    req->resp_shared = true;
    req->status = status;
}

static void set_resp(struct http_request *req, struct MHD_Response *r, unsigned status)
{
    if (!r)
        set_shared(req, req->srv->resp_oom, 500);
    else
        req->resp = r, req->resp_shared = false, req->status = status;
}

static void drop_resp(struct http_request *req)
{
    if (req->resp && !req->resp_shared)
        MHD_destroy_response(req->resp);
    req->resp = NULL;
}

/* In the handler or hook: may the request be answered now? */
static bool can_answer(const struct http_request *req)
{
    return req->state == REQ_RECEIVING && !req->resp && req->conn;
}

static int answer(struct http_request *req, int rc, struct MHD_Response *r, unsigned status)
{
    if (rc == 0)
        set_resp(req, r, status);
    return rc;
}

/* ---- request lifetime ---- */

static void server_destroy(struct http_server *srv);

static void request_unref(struct http_request *req)
{
    struct http_server *srv = req->srv;
    pthread_mutex_lock(&srv->mu);
    bool last = --req->refs == 0, srv_last = false;
    if (last) {
        srv->nreqs--;
        srv_last = srv->freed && srv->nreqs == 0;
    }
    pthread_mutex_unlock(&srv->mu);
    if (!last)
        return;
    drop_resp(req);
    json_decref(req->json);
    for (size_t i = 0; i < req->nhdrs; i++) {
        free(req->hdrs[i].name);
        free(req->hdrs[i].value);
    }
    free(req->body);
    route_target_release(&req->target);
    free(req);
    if (srv_last)
        server_destroy(srv);
}

/* The timer list is sorted by deadline; a new one usually goes last, since
 * long-polls share a timeout, so insertion scans from the tail. */
static void timer_arm(struct http_server *srv, struct http_request *req)
{
    struct http_request *p = srv->ttail;
    req->deadline_us = mono_us() + (int64_t)req->timeout_ms * 1000;
    while (p && p->deadline_us > req->deadline_us)
        p = p->tprev;
    req->tprev = p;
    req->tnext = p ? p->tnext : srv->thead;
    *(req->tnext ? &req->tnext->tprev : &srv->ttail) = req;
    *(p ? &p->tnext : &srv->thead) = req;
    req->armed = true;
    if (srv->thead == req)
        pthread_cond_signal(&srv->timer_cond);
}

static void timer_disarm(struct http_server *srv, struct http_request *req)
{
    if (!req->armed)
        return;
    *(req->tprev ? &req->tprev->tnext : &srv->thead) = req->tnext;
    *(req->tnext ? &req->tnext->tprev : &srv->ttail) = req->tprev;
    req->tprev = req->tnext = NULL;
    req->armed = false;
}

static void list_remove(struct http_server *srv, struct http_request *req)
{
    *(req->prev ? &req->prev->next : &srv->suspended) = req->next;
    if (req->next)
        req->next->prev = req->prev;
    req->prev = req->next = NULL;
}

static void *timer_main(void *arg)
{
    struct http_server *srv = arg;
    pthread_mutex_lock(&srv->mu);
    while (!srv->timer_quit) {
        struct http_request *req = srv->thead;
        if (!req) {
            pthread_cond_wait(&srv->timer_cond, &srv->mu);
            continue;
        }
        if (req->deadline_us > mono_us()) {
            wait_until(&srv->timer_cond, &srv->mu, req->deadline_us);
            continue;
        }
        timer_disarm(srv, req);
        req->refs++; /* alive through the callback, whoever completes it */
        pthread_mutex_unlock(&srv->mu);
        req->on_timeout(req, req->timeout_ctx);
        request_unref(req);
        pthread_mutex_lock(&srv->mu);
    }
    pthread_mutex_unlock(&srv->mu);
    return NULL;
}

/* ---- dispatch: routing, authorization and the body ---- */

/* Answers an error in a dispatch stage; returns false (the request stops). */
__attribute__((format(printf, 4, 5))) static bool fail(struct http_request *req, unsigned status,
                                                       const char *code, const char *fmt, ...)
{
    struct MHD_Response *r = NULL;
    va_list ap;
    va_start(ap, fmt);
    int rc = build_error(req, status, code, fmt, ap, &r);
    va_end(ap);
    set_resp(req, rc ? NULL : r, status);
    return false;
}

static bool fail_route(struct http_request *req, const struct route_error *e)
{
    return fail(req, e->status, e->code, "%s", e->message);
}

/* 405: the Allow header lists the methods of every route on this path. */
static bool not_allowed(struct http_request *req)
{
    char allow[256];
    route_table_allow(req->srv->table, &req->target, allow, sizeof(allow));
    if (http_request_add_header(req, "Allow", allow) != 0)
        return fail(req, 500, "internal", "out of memory");
    return fail(req, 405, "method_not_allowed", "%s is not allowed on %s (allowed: %s)",
                req->method, req->target.path, allow);
}

/* Steps 1, 2 and 5 of the dispatch order in http.h. Step 5 (the path
 * parameters' length and UTF-8) runs here, before steps 3 and 4, although
 * http.h lists it after them. */
static bool route(struct http_request *req)
{
    const struct http_server *srv = req->srv;
    struct route_error e;
    size_t i = 0;
    if (route_target_parse(&req->target, &e) != 0)
        return fail_route(req, &e);
    enum route_match m = route_table_match(srv->table, &req->target, req->method, &i);
    if (m == ROUTE_NO_PATH)
        return fail(req, 404, "not_found", "no such endpoint: %s", req->target.path);
    if (m == ROUTE_NO_METHOD)
        return not_allowed(req);
    req->route = &srv->cfg.routes[i];
    return route_target_bind(&req->target, srv->table, i, &e) == 0 || fail_route(req, &e);
}

static bool authorize(struct http_request *req)
{
    const struct http_server *srv = req->srv;
    unsigned flags = req->route->flags;
    if (!srv->cfg.authorize || (flags & HTTP_ROUTE_PUBLIC))
        return true;
    bool ok = srv->cfg.authorize(req, flags, srv->cfg.ctx);
    if (ok && !req->resp)
        return true;
    if (!req->resp)
        fail(req, 403, "forbidden", "access denied");
    return false;
}

/* Decided from the headers, before any body byte is read. */
static bool body_precheck(struct http_request *req)
{
    const struct http_server *srv = req->srv;
    const char *cl =
        MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    unsigned long long n = cl ? strtoull(cl, NULL, 10) : 0;
    if (!(req->route->flags & (HTTP_ROUTE_JSON_BODY | HTTP_ROUTE_RAW_BODY)))
        return n == 0 || fail(req, 400, "body_not_allowed", "%s %s takes no request body",
                              req->method, req->route->pattern);
    if (n > srv->cfg.body_limit)
        return fail(req, 413, "body_too_large", "the request body is over the limit of %zu bytes",
                    srv->cfg.body_limit);
    return true;
}

static void take_upload(struct http_request *req, const char *data, size_t n)
{
    size_t limit = req->srv->cfg.body_limit;
    if (!(req->route->flags & (HTTP_ROUTE_JSON_BODY | HTTP_ROUTE_RAW_BODY)))
        req->body_unexpected = true;
    if (req->body_unexpected || req->body_too_big || req->body_oom)
        return; /* discarded, never buffered */
    if (n > limit - req->body_len) {
        req->body_too_big = true;
    } else if (req->body_len + n > req->body_cap) {
        size_t cap = req->body_cap ? req->body_cap * 2 : 4096;
        cap = cap < req->body_len + n ? req->body_len + n : cap;
        cap = cap > limit ? limit : cap;
        char *b = realloc(req->body, cap);
        if (b) {
            req->body = b;
            req->body_cap = cap;
        }
        req->body_oom = !b;
    }
    if (req->body_too_big || req->body_oom) {
        free(req->body);
        req->body = NULL;
        req->body_len = req->body_cap = 0;
        return;
    }
    memcpy(req->body + req->body_len, data, n);
    req->body_len += n;
}

static const char *json_kind(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

static bool body_check(struct http_request *req)
{
    json_error_t e;
    if (req->body_too_big)
        return fail(req, 413, "body_too_large", "the request body is over the limit of %zu bytes",
                    req->srv->cfg.body_limit);
    if (req->body_unexpected)
        return fail(req, 400, "body_not_allowed", "%s %s takes no request body", req->method,
                    req->route->pattern);
    if (req->body_oom)
        return fail(req, 500, "internal", "out of memory");
    if (!(req->route->flags & HTTP_ROUTE_JSON_BODY))
        return true;
    if (req->body_len == 0)
        return fail(req, 400, "empty_body", "the request body is empty; a JSON object is required");
    json_t *j = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &e);
    if (!j) {
        switch (json_error_code(&e)) {
        case json_error_invalid_utf8:
            return fail(req, 400, "invalid_utf8",
                        "the request body is not valid UTF-8 (line %d, column %d)", e.line,
                        e.column);
        case json_error_duplicate_key:
            return fail(req, 400, "duplicate_key", "duplicate key at line %d, column %d: %s",
                        e.line, e.column, e.text);
        case json_error_out_of_memory:
            return fail(req, 500, "internal", "out of memory");
        default:
            return fail(req, 400, "invalid_json", "invalid JSON at line %d, column %d: %s", e.line,
                        e.column, e.text);
        }
    }
    if (!json_is_object(j)) {
        fail(req, 400, "not_an_object", "the request body must be a JSON object, not %s",
             json_kind(j));
        json_decref(j);
        return false;
    }
    req->json = j;
    return true;
}

/* ---- MHD callbacks (the polling thread) ---- */

static enum MHD_Result queue_answer(struct http_request *req)
{
    struct http_server *srv = req->srv;
    pthread_mutex_lock(&srv->mu);
    if (!req->resp)
        set_resp(req, NULL, 500);
    struct MHD_Response *r = req->resp;
    bool shared = req->resp_shared;
    unsigned status = req->status;
    req->resp = NULL;
    req->state = REQ_ANSWERED;
    pthread_mutex_unlock(&srv->mu);
    enum MHD_Result ok = MHD_queue_response(req->conn, status, r);
    if (!shared)
        MHD_destroy_response(r);
    return ok;
}

static bool is_stopping(struct http_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    bool stopping = srv->stopping;
    pthread_mutex_unlock(&srv->mu);
    return stopping;
}

/* After the handler: queue its answer, or tell MHD about its suspension. */
static enum MHD_Result after_handler(struct http_request *req)
{
    struct http_server *srv = req->srv;
    pthread_mutex_lock(&srv->mu);
    enum req_state state = req->state;
    bool answered = req->resp != NULL, stopping = srv->stopping;
    if (state == REQ_SUSPENDING && !answered && stopping)
        set_shared(req, srv->resp_stop, 503), answered = true;
    pthread_mutex_unlock(&srv->mu);
    if (state == REQ_RECEIVING && !answered) { /* no other thread knows of req */
        if (stopping)
            fail(req, 503, "unavailable", "the server is stopping");
        else
            fail(req, 500, "internal", "the handler of %s %s gave no answer", req->method,
                 req->route->pattern);
    }
    if (state != REQ_SUSPENDING || answered)
        return queue_answer(req);
    MHD_suspend_connection(req->conn);
    pthread_mutex_lock(&srv->mu);
    if (req->resp || srv->stopping) { /* it came while we were suspending */
        if (!req->resp)
            set_shared(req, srv->resp_stop, 503);
        req->state = REQ_RESUMING;
        pthread_mutex_unlock(&srv->mu);
        MHD_resume_connection(req->conn);
        return MHD_YES;
    }
    req->state = REQ_SUSPENDED;
    req->next = srv->suspended;
    if (req->next)
        req->next->prev = req;
    srv->suspended = req;
    if (req->timeout_ms)
        timer_arm(srv, req);
    pthread_mutex_unlock(&srv->mu);
    return MHD_YES;
}

static enum MHD_Result run_handler(struct http_request *req)
{
    if (!body_check(req))
        return queue_answer(req);
    req->in_handler = true;
    (void)req->route->handler(req, req->srv->cfg.ctx);
    req->in_handler = false;
    return after_handler(req);
}

static enum MHD_Result on_headers(struct http_request *req, const char *method)
{
    req->headers_seen = true;
    snprintf(req->method, sizeof(req->method), "%s", method);
    if (route(req)) {
        if (is_stopping(req->srv)) /* after_handler checks again for suspensions */
            fail(req, 503, "unavailable", "the server is stopping");
        else if (authorize(req) && body_precheck(req))
            return MHD_YES;
    }
    return queue_answer(req);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls)
{
    struct http_request *req = *con_cls;
    (void)cls, (void)conn, (void)url, (void)version;
    if (!req)
        return MHD_NO; /* on_uri ran out of memory */
    if (!req->headers_seen)
        return on_headers(req, method);
    pthread_mutex_lock(&req->srv->mu);
    enum req_state state = req->state;
    pthread_mutex_unlock(&req->srv->mu);
    if (state == REQ_RESUMING)
        return queue_answer(req);
    if (state != REQ_RECEIVING)
        return MHD_NO;
    if (*upload_size) {
        take_upload(req, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    return run_handler(req);
}

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    struct http_server *srv = cls;
    struct http_request *req = calloc(1, sizeof(*req));
    if (!req || route_target_init(&req->target, uri) != 0) {
        free(req);
        return NULL;
    }
    req->srv = srv;
    req->conn = conn;
    req->refs = 1;
    req->start_us = mono_us();
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, req->client,
                  sizeof(req->client));
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr,
                  req->client, sizeof(req->client));
    pthread_mutex_lock(&srv->mu);
    srv->nreqs++;
    srv->nlive++;
    pthread_mutex_unlock(&srv->mu);
    return req;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct http_server *srv = cls;
    struct http_request *req = *con_cls;
    (void)conn, (void)toe;
    if (!req)
        return;
    *con_cls = NULL;
    pthread_mutex_lock(&srv->mu);
    unsigned status = req->state == REQ_ANSWERED ? req->status : 0;
    req->state = REQ_DONE;
    req->conn = NULL;
    srv->nlive--;
    pthread_cond_broadcast(&srv->idle_cond);
    pthread_mutex_unlock(&srv->mu);
    if (srv->cfg.access_log) {
        struct http_access a = {
            .method = req->method,
            .path = req->target.path,
            .client = req->client,
            .status = status,
            .duration_us = mono_us() - req->start_us,
        };
        srv->cfg.access_log(&a, srv->cfg.ctx);
    }
    request_unref(req);
}

/* ---- the server ---- */

static int parse_bind(struct http_server *srv, const char *addr, char *err, size_t errlen)
{
    char buf[INET6_ADDRSTRLEN + 2];
    size_t n = strlen(addr);
    struct sockaddr_in *v4 = (struct sockaddr_in *)(void *)&srv->addr;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)(void *)&srv->addr;
    if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']' && n - 2 < sizeof(buf))
        snprintf(buf, sizeof(buf), "%.*s", (int)(n - 2), addr + 1);
    else
        snprintf(buf, sizeof(buf), "%s", n < sizeof(buf) ? addr : "");
    if (addr[0] != '[' && inet_pton(AF_INET, buf, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(srv->cfg.port);
        srv->addrlen = sizeof(*v4);
        snprintf(srv->addr_text, sizeof(srv->addr_text), "%s", buf);
    } else if (inet_pton(AF_INET6, buf, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(srv->cfg.port);
        srv->addrlen = sizeof(*v6);
        snprintf(srv->addr_text, sizeof(srv->addr_text), "[%s]", buf);
    } else {
        seterr(err, errlen, "bind address '%.64s': not an IPv4 or IPv6 literal", addr);
        return HTTP_EINVAL;
    }
    return 0;
}

/* Reads a whole PEM file (NUL-terminated) into *ret. */
static int read_pem(const char *what, const char *path, char **ret, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *buf = f ? malloc(HTTP_TLS_FILE_MAX + 1) : NULL;
    size_t n = buf ? fread(buf, 1, HTTP_TLS_FILE_MAX + 1, f) : 0;
    int rc = 0;
    if (!f)
        seterr(err, errlen, "%s %s: %s", what, path, strerror(errno)), rc = HTTP_ESYS;
    else if (!buf)
        seterr(err, errlen, "%s %s: out of memory", what, path), rc = HTTP_ENOMEM;
    else if (ferror(f))
        seterr(err, errlen, "%s %s: read error", what, path), rc = HTTP_ESYS;
    else if (n > HTTP_TLS_FILE_MAX || n == 0)
        seterr(err, errlen, "%s %s: %s", what, path, n ? "over 1 MiB" : "empty"), rc = HTTP_EINVAL;
    if (f)
        fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *ret = buf;
    return 0;
}

static struct MHD_Response *static_json(const char *body)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    if (r &&
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json") != MHD_YES) {
        MHD_destroy_response(r);
        r = NULL;
    }
    return r;
}

static void server_destroy(struct http_server *srv)
{
    if (srv->resp_oom)
        MHD_destroy_response(srv->resp_oom);
    if (srv->resp_stop)
        MHD_destroy_response(srv->resp_stop);
    if (srv->sync_init) {
        pthread_mutex_destroy(&srv->mu);
        pthread_cond_destroy(&srv->timer_cond);
        pthread_cond_destroy(&srv->idle_cond);
    }
    free(srv->tls_cert);
    free(srv->tls_key);
    route_table_free(srv->table);
    free(srv);
}

static int init_sync(struct http_server *srv)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return HTTP_ENOMEM;
    bool ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
              pthread_mutex_init(&srv->mu, NULL) == 0;
    if (ok && pthread_cond_init(&srv->timer_cond, &ca) != 0) {
        pthread_mutex_destroy(&srv->mu);
        ok = false;
    }
    if (ok && pthread_cond_init(&srv->idle_cond, &ca) != 0) {
        pthread_cond_destroy(&srv->timer_cond);
        pthread_mutex_destroy(&srv->mu);
        ok = false;
    }
    pthread_condattr_destroy(&ca);
    srv->sync_init = ok;
    return ok ? 0 : HTTP_ENOMEM;
}

int http_server_new(const struct http_config *cfg, struct http_server **ret_srv, char *err,
                    size_t errlen)
{
    struct http_server *srv;
    int rc = HTTP_ENOMEM;
    seterr(err, errlen, "%s", "");
    if (!cfg || !ret_srv || (cfg->nroutes && !cfg->routes)) {
        seterr(err, errlen, "no config, or routes missing");
        return HTTP_EINVAL;
    }
    if (!(srv = calloc(1, sizeof(*srv)))) {
        seterr(err, errlen, "out of memory");
        return HTTP_ENOMEM;
    }
    srv->cfg = *cfg;
    srv->cfg.bind_addr = srv->cfg.tls_cert_file = srv->cfg.tls_key_file = NULL;
    srv->cfg.body_limit = cfg->body_limit ? cfg->body_limit : HTTP_DEFAULT_BODY_LIMIT;
    srv->cfg.conn_limit = cfg->conn_limit ? cfg->conn_limit : HTTP_DEFAULT_CONN_LIMIT;
    srv->cfg.conn_timeout_s =
        cfg->conn_timeout_s ? cfg->conn_timeout_s : HTTP_DEFAULT_CONN_TIMEOUT_S;
    if ((rc = init_sync(srv)) != 0)
        goto fail;
    rc = HTTP_ENOMEM;
    srv->resp_oom = static_json(OOM_BODY);
    srv->resp_stop = static_json(STOP_BODY);
    if (!srv->resp_oom || !srv->resp_stop)
        goto fail;
    if ((rc = route_table_new(cfg->routes, cfg->nroutes, &srv->table, err, errlen)) != 0)
        return server_destroy(srv), rc;
    if ((rc = parse_bind(srv, cfg->bind_addr ? cfg->bind_addr : HTTP_DEFAULT_BIND, err, errlen)))
        return server_destroy(srv), rc;
    if (!cfg->tls_cert_file != !cfg->tls_key_file) {
        seterr(err, errlen, "TLS needs both a certificate and a key file");
        return server_destroy(srv), HTTP_EINVAL;
    }
    if (cfg->tls_cert_file &&
        ((rc = read_pem("TLS certificate", cfg->tls_cert_file, &srv->tls_cert, err, errlen)) ||
         (rc = read_pem("TLS key", cfg->tls_key_file, &srv->tls_key, err, errlen))))
        return server_destroy(srv), rc;
    *ret_srv = srv;
    return 0;
fail:
    seterr(err, errlen, "out of memory");
    server_destroy(srv);
    return rc;
}

static int listen_socket(struct http_server *srv, int *ret_fd, char *err, size_t errlen)
{
    const int one = 1;
    struct sockaddr_storage bound;
    socklen_t blen = sizeof(bound);
    const char *what = "socket";
    int fd = socket(srv->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0 &&
        (what = "setsockopt", setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one))) == 0 &&
        (what = "bind", bind(fd, (const struct sockaddr *)&srv->addr, srv->addrlen)) == 0 &&
        (what = "listen", listen(fd, SOMAXCONN)) == 0 &&
        (what = "getsockname", getsockname(fd, (struct sockaddr *)&bound, &blen)) == 0) {
        srv->port =
            ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)(void *)&bound)->sin_port
                                             : ((struct sockaddr_in6 *)(void *)&bound)->sin6_port);
        *ret_fd = fd;
        return 0;
    }
    seterr(err, errlen, "%s %s:%u: %s", what, srv->addr_text, (unsigned)srv->cfg.port,
           strerror(errno));
    if (fd >= 0)
        close(fd);
    return HTTP_ESYS;
}

int http_server_start(struct http_server *srv, char *err, size_t errlen)
{
    int fd, rc;
    bool tls = srv->tls_cert != NULL;
    seterr(err, errlen, "%s", "");
    if (srv->started) {
        seterr(err, errlen, "the server was started before");
        return HTTP_ESTATE;
    }
    if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        seterr(err, errlen, "this libmicrohttpd was built without TLS");
        return HTTP_ETLS;
    }
    if ((rc = listen_socket(srv, &fd, err, errlen)) != 0)
        return rc;
    struct MHD_OptionItem opts[] = {
        {MHD_OPTION_LISTEN_SOCKET, fd, NULL},
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)srv->cfg.conn_limit, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)srv->cfg.conn_timeout_s, NULL},
        {tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, srv->tls_cert},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, srv->tls_key},
        {MHD_OPTION_END, 0, NULL},
    };
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
    flags |= (tls ? MHD_USE_TLS : 0) | (srv->addr.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    srv->timer_quit = false;
    if ((rc = pthread_create(&srv->timer, NULL, timer_main, srv)) != 0) {
        seterr(err, errlen, "timer thread: %s", strerror(rc));
        close(fd);
        return HTTP_ESYS;
    }
    srv->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_access, srv, MHD_OPTION_ARRAY, opts,
                                   MHD_OPTION_URI_LOG_CALLBACK, on_uri, srv,
                                   MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_END);
    if (!srv->daemon) {
        pthread_mutex_lock(&srv->mu);
        srv->timer_quit = true;
        pthread_cond_signal(&srv->timer_cond);
        pthread_mutex_unlock(&srv->mu);
        pthread_join(srv->timer, NULL);
        /* MHD owns fd from the call on and closed it (0.9.75 does on every failure
         * after reading its options): closing it again could hit a reused number. */
        seterr(err, errlen, "start %s:%u: libmicrohttpd refused %s", srv->addr_text,
               (unsigned)srv->port, tls ? "the TLS certificate or key" : "to start");
        return tls ? HTTP_ETLS : HTTP_ESYS;
    }
    srv->started = true;
    return 0;
}

uint16_t http_server_port(const struct http_server *srv)
{
    return srv && srv->started ? srv->port : 0;
}

void http_server_stop(struct http_server *srv)
{
    struct http_request *list, *next;
    if (!srv)
        return;
    pthread_mutex_lock(&srv->mu);
    if (!srv->started || srv->stopping) {
        pthread_mutex_unlock(&srv->mu);
        return;
    }
    srv->stopping = srv->timer_quit = true;
    while (srv->thead)
        timer_disarm(srv, srv->thead);
    pthread_cond_signal(&srv->timer_cond);
    pthread_mutex_unlock(&srv->mu);
    pthread_join(srv->timer, NULL); /* a running timeout callback finishes first */
    MHD_socket lfd = MHD_quiesce_daemon(srv->daemon);
    pthread_mutex_lock(&srv->mu);
    list = srv->suspended;
    srv->suspended = NULL;
    for (struct http_request *r = list; r; r = r->next) {
        r->state = REQ_RESUMING; /* completions now only release */
        set_shared(r, srv->resp_stop, 503);
    }
    pthread_mutex_unlock(&srv->mu);
    for (struct http_request *r = list; r; r = next) {
        next = r->next; /* r may be gone once resumed */
        r->prev = r->next = NULL;
        MHD_resume_connection(r->conn);
    }
    int64_t deadline = mono_us() + (int64_t)HTTP_STOP_GRACE_MS * 1000;
    pthread_mutex_lock(&srv->mu);
    while (srv->resuming > 0 || (srv->nlive > 0 && mono_us() < deadline))
        wait_until(&srv->idle_cond, &srv->mu, srv->resuming ? mono_us() + 100000 : deadline);
    pthread_mutex_unlock(&srv->mu);
    MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
}

void http_server_free(struct http_server *srv)
{
    if (!srv)
        return;
    http_server_stop(srv);
    pthread_mutex_lock(&srv->mu);
    srv->freed = true;
    bool last = srv->nreqs == 0;
    pthread_mutex_unlock(&srv->mu);
    if (last)
        server_destroy(srv);
}

/* ---- the request API ---- */

const char *http_request_method(const struct http_request *req)
{
    return req->method;
}

const char *http_request_path(const struct http_request *req)
{
    return req->target.path;
}

const struct http_route *http_request_route(const struct http_request *req)
{
    return req->route;
}

const char *http_request_param(const struct http_request *req, const char *name)
{
    size_t n = name ? strlen(name) : 0;
    const struct route_target *t = &req->target;
    for (size_t i = 0; i < t->nparam; i++)
        if (t->param[i].name_len == n && memcmp(t->param[i].name, name, n) == 0)
            return t->param[i].value;
    return NULL;
}

const char *http_request_query(const struct http_request *req, const char *name)
{
    const struct route_target *t = &req->target;
    for (size_t i = 0; name && i < t->nquery; i++)
        if (strcmp(t->query_kv[i].name, name) == 0)
            return t->query_kv[i].value;
    return NULL;
}

size_t http_request_query_count(const struct http_request *req)
{
    return req->target.nquery;
}

int http_request_query_at(const struct http_request *req, size_t i, const char **ret_name,
                          const char **ret_value)
{
    if (i >= req->target.nquery)
        return HTTP_EINVAL;
    if (ret_name)
        *ret_name = req->target.query_kv[i].name;
    if (ret_value)
        *ret_value = req->target.query_kv[i].value;
    return 0;
}

const char *http_request_header(struct http_request *req, const char *name)
{
    if (!req->conn || !name)
        return NULL;
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *http_request_bearer(struct http_request *req)
{
    static const char b64token[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                   "0123456789-._~+/";
    const char *v = http_request_header(req, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!v || strncasecmp(v, "Bearer ", 7) != 0)
        return NULL;
    for (v += 7; *v == ' ';)
        v++;
    size_t n = strspn(v, b64token);
    n += strspn(v + n, "=");
    if (n == 0 || v[n] != '\0' || n > HTTP_TOKEN_MAX)
        return NULL;
    return v;
}

const char *http_request_client(const struct http_request *req)
{
    return req->client;
}

void *http_request_app_data(struct http_request *req)
{
    return req->app.bytes;
}

json_t *http_request_json(const struct http_request *req)
{
    return req->json;
}

const void *http_request_body(const struct http_request *req, size_t *ret_len)
{
    if (ret_len)
        *ret_len = req->body_len;
    return req->body_len ? req->body : NULL;
}

int http_request_add_header(struct http_request *req, const char *name, const char *value)
{
    static const char *const reserved[] = {"Content-Type", "Content-Length", "Transfer-Encoding",
                                           "Connection"};
    if (!name || !value || !name[0] || strpbrk(value, "\r\n") ||
        req->nhdrs == HTTP_MAX_RESP_HEADERS)
        return HTTP_EINVAL;
    for (const char *p = name; *p; p++)
        if (!route_is_tchar(*p))
            return HTTP_EINVAL;
    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
        if (strcasecmp(name, reserved[i]) == 0)
            return HTTP_EINVAL;
    if (!req->suspend_held && !can_answer(req))
        return HTTP_ESTATE;
    struct hdr *h = &req->hdrs[req->nhdrs];
    h->name = strdup(name);
    h->value = strdup(value);
    if (!h->name || !h->value) {
        free(h->name);
        free(h->value);
        return HTTP_ENOMEM;
    }
    req->nhdrs++;
    return 0;
}

int http_request_respond_json(struct http_request *req, unsigned status, json_t *body)
{
    struct MHD_Response *r = NULL;
    if (!can_answer(req) || !status_ok(status)) {
        json_decref(body);
        return status_ok(status) ? HTTP_ESTATE : HTTP_EINVAL;
    }
    int rc = build_json(req, body, &r);
    return answer(req, rc, r, status);
}

static int respond_mem(struct http_request *req, unsigned status, const char *ctype,
                       const void *data, size_t len, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = NULL;
    if (!can_answer(req))
        return HTTP_ESTATE;
    if (!status_ok(status) || !ctype || !ctype[0] || strpbrk(ctype, "\r\n") || (len && !data))
        return HTTP_EINVAL;
    if (len == 0)
        data = "", mode = MHD_RESPMEM_PERSISTENT;
    if (mode == MHD_RESPMEM_MUST_FREE) {
        void *copy = malloc(len);
        if (!copy)
            return HTTP_ENOMEM;
        data = memcpy(copy, data, len);
    }
    int rc = build_bytes(req, ctype, data, len, mode, &r);
    return answer(req, rc, r, status);
}

int http_request_respond_bytes(struct http_request *req, unsigned status, const char *content_type,
                               const void *data, size_t len)
{
    return respond_mem(req, status, content_type, data, len, MHD_RESPMEM_MUST_FREE);
}

int http_request_respond_static(struct http_request *req, unsigned status, const char *content_type,
                                const void *data, size_t len)
{
    return respond_mem(req, status, content_type, data, len, MHD_RESPMEM_PERSISTENT);
}

int http_request_error(struct http_request *req, unsigned status, const char *code, const char *fmt,
                       ...)
{
    struct MHD_Response *r = NULL;
    va_list ap;
    if (!can_answer(req))
        return HTTP_ESTATE;
    if (!status_ok(status) || !code || !fmt)
        return HTTP_EINVAL;
    va_start(ap, fmt);
    int rc = build_error(req, status, code, fmt, ap, &r);
    va_end(ap);
    return answer(req, rc, r, status);
}

int http_request_suspend(struct http_request *req, unsigned timeout_ms, http_timeout_fn on_timeout,
                         void *ctx)
{
    struct http_server *srv = req->srv;
    if (timeout_ms > HTTP_MAX_TIMEOUT_MS || (timeout_ms && !on_timeout))
        return HTTP_EINVAL;
    if (!req->in_handler || !can_answer(req))
        return HTTP_ESTATE;
    pthread_mutex_lock(&srv->mu);
    int rc = srv->stopping ? HTTP_ESTOPPED : 0;
    if (rc == 0) {
        req->state = REQ_SUSPENDING;
        req->suspend_held = true;
        req->refs++;
        req->timeout_ms = timeout_ms;
        req->on_timeout = on_timeout;
        req->timeout_ctx = ctx;
    }
    pthread_mutex_unlock(&srv->mu);
    return rc;
}

/* Stores the answer r (NULL: the prebuilt 500) of a suspended request and
 * resumes it; or, if it was answered already (the server stopped), only
 * releases it. */
static int complete_with(struct http_request *req, int rc, struct MHD_Response *r, unsigned status)
{
    struct http_server *srv = req->srv;
    struct MHD_Connection *resume = NULL;
    pthread_mutex_lock(&srv->mu);
    if (!req->suspend_held) {
        pthread_mutex_unlock(&srv->mu);
        if (r)
            MHD_destroy_response(r);
        return HTTP_ESTATE;
    }
    req->suspend_held = false;
    if (req->state == REQ_SUSPENDING || req->state == REQ_SUSPENDED) {
        set_resp(req, r, status);
        r = NULL;
    }
    if (req->state == REQ_SUSPENDED) {
        timer_disarm(srv, req);
        list_remove(srv, req);
        req->state = REQ_RESUMING;
        resume = req->conn;
        srv->resuming++;
    }
    pthread_mutex_unlock(&srv->mu);
    if (r)
        MHD_destroy_response(r);
    if (resume) {
        MHD_resume_connection(resume);
        pthread_mutex_lock(&srv->mu);
        if (--srv->resuming == 0)
            pthread_cond_broadcast(&srv->idle_cond);
        pthread_mutex_unlock(&srv->mu);
    }
    request_unref(req);
    return rc;
}

__attribute__((format(printf, 5, 6))) static int build_errorf(struct http_request *req,
                                                              struct MHD_Response **ret,
                                                              unsigned status, const char *code,
                                                              const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = build_error(req, status, code, fmt, ap, ret);
    va_end(ap);
    return rc;
}

int http_request_complete(struct http_request *req, unsigned status, json_t *body)
{
    struct MHD_Response *r = NULL;
    int rc;
    if (status_ok(status)) {
        rc = build_json(req, body, &r);
    } else {
        json_decref(body);
        build_errorf(req, &r, 500, "internal", "completed with invalid status %u", status);
        rc = HTTP_EINVAL;
        status = 500;
    }
    return complete_with(req, rc, r, status);
}

int http_request_complete_error(struct http_request *req, unsigned status, const char *code,
                                const char *fmt, ...)
{
    struct MHD_Response *r = NULL;
    va_list ap;
    if (!status_ok(status) || !code || !fmt) {
        build_errorf(req, &r, 500, "internal", "completed with an invalid error");
        return complete_with(req, HTTP_EINVAL, r, 500);
    }
    va_start(ap, fmt);
    int rc = build_error(req, status, code, fmt, ap, &r);
    va_end(ap);
    return complete_with(req, rc, r, status);
}
/*
 * http.c - a request's life over libmicrohttpd: the object and its reference
 * count, the timer thread for suspended requests' deadlines, dispatch
 * (routing, authorization, the body), MHD's callbacks, the request
 * accessors, and suspension and completion. Taking the target apart and
 * matching it against the route table is route.c's (pure, see route.h); the
 * server's own life is server.c's, building answers respond.c's. How the
 * pieces fit MHD: internal.h.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include <jansson.h>
#include <microhttpd.h>

#include "http/framing.h"
#include "http/http.h"
#include "http/internal.h"
#include "http/route.h"
#include "base/banned.h"

int64_t http_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void http_wait_until(pthread_cond_t *c, pthread_mutex_t *m, int64_t deadline_us)
{
    struct timespec ts = {.tv_sec = deadline_us / 1000000,
                          .tv_nsec = (long)(deadline_us % 1000000) * 1000};
    pthread_cond_timedwait(c, m, &ts);
}

void http_addr_text(const struct sockaddr *sa, char *buf, size_t len)
{
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, buf,
                  (socklen_t)len);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, buf,
                  (socklen_t)len);
}

/* ---- request lifetime ---- */

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
    http_drop_resp(req);
    json_decref(req->json);
    for (size_t i = 0; i < req->nhdrs; i++) {
        free(req->hdrs[i].name);
        free(req->hdrs[i].value);
    }
    free(req->body);
    route_target_release(&req->target);
    free(req);
    if (srv_last)
        http_server_destroy(srv);
}

/* The timer list is sorted by deadline; a new one usually goes last, since
 * long-polls share a timeout, so insertion scans from the tail. */
static void timer_arm(struct http_server *srv, struct http_request *req)
{
    struct http_request *p = srv->ttail;
    req->deadline_us = http_mono_us() + (int64_t)req->timeout_ms * 1000;
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

void http_timer_disarm(struct http_server *srv, struct http_request *req)
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

void *http_timer_main(void *arg)
{
    struct http_server *srv = arg;
    pthread_mutex_lock(&srv->mu);
    while (!srv->timer_quit) {
        struct http_request *req = srv->thead;
        if (!req) {
            pthread_cond_wait(&srv->timer_cond, &srv->mu);
            continue;
        }
        if (req->deadline_us > http_mono_us()) {
            http_wait_until(&srv->timer_cond, &srv->mu, req->deadline_us);
            continue;
        }
        http_timer_disarm(srv, req);
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
    int rc = http_build_error(req, status, code, fmt, ap, &r);
    va_end(ap);
    http_set_resp(req, rc ? NULL : r, status);
    return false;
}

static enum MHD_Result framing_field(void *cls, enum MHD_ValueKind kind, const char *key,
                                     size_t key_size, const char *value, size_t value_size)
{
    (void)kind;
    http_framing_field(cls, key, key_size, value, value_size);
    return MHD_YES;
}

/* Step 0, before routing: the framing rules of framing.h over the fields as
 * MHD parsed them, for the requests the accept gate did not see (later ones
 * on a kept-alive connection, TLS) and as a second line behind it. A refusal
 * closes the connection: its body's end is unknown. */
static bool framing_ok(struct http_request *req, const char *version)
{
    struct http_framing f;
    const char *msg = "";
    http_framing_init(&f, version && strcmp(version, MHD_HTTP_VERSION_1_0) == 0);
    MHD_get_connection_values_n(req->conn, MHD_HEADER_KIND, framing_field, &f);
    unsigned status = http_framing_verdict(&f, &msg);
    if (status == 0)
        return true;
    fail(req, status,
         status == 413   ? "body_too_large"
         : status == 501 ? "not_implemented"
                         : "invalid_framing",
         "%s", msg);
    if (!req->resp_shared &&
        MHD_add_response_header(req->resp, MHD_HTTP_HEADER_CONNECTION, "close") != MHD_YES) {
        http_drop_resp(req);
        http_set_resp(req, NULL, 500);
    }
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

/* Steps 1, 1a, 2 and 5 of the dispatch order in http.h. Step 5 (the path
 * parameters' length and UTF-8) runs here, before steps 3 and 4, although
 * http.h lists it after them. */
static bool route(struct http_request *req)
{
    const struct http_server *srv = req->srv;
    struct route_error e;
    size_t i = 0;
    if (route_target_parse(&req->target, &e) != 0)
        return fail_route(req, &e);
    if (srv->cfg.admit && !srv->cfg.admit(req, srv->cfg.ctx)) {
        if (!req->resp)
            fail(req, 503, "unavailable", "not serving this request now");
        return false;
    }
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
        http_set_resp(req, NULL, 500);
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
        http_set_shared(req, srv->resp_stop, 503), answered = true;
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
            http_set_shared(req, srv->resp_stop, 503);
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

static enum MHD_Result on_headers(struct http_request *req, const char *method, const char *version)
{
    req->headers_seen = true;
    snprintf(req->method, sizeof(req->method), "%s", method);
    if (framing_ok(req, version) && route(req)) {
        if (is_stopping(req->srv)) /* after_handler checks again for suspensions */
            fail(req, 503, "unavailable", "the server is stopping");
        else if (authorize(req) && body_precheck(req))
            return MHD_YES;
    }
    return queue_answer(req);
}

enum MHD_Result http_on_access(void *cls, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    struct http_request *req = *con_cls;
    (void)cls, (void)conn, (void)url;
    if (!req)
        return MHD_NO; /* on_uri ran out of memory */
    if (!req->headers_seen)
        return on_headers(req, method, version);
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

void *http_on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
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
    req->start_us = http_mono_us();
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    http_addr_text(ci ? ci->client_addr : NULL, req->client, sizeof(req->client));
    pthread_mutex_lock(&srv->mu);
    srv->nreqs++;
    srv->nlive++;
    pthread_mutex_unlock(&srv->mu);
    return req;
}

void http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
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
            .duration_us = http_mono_us() - req->start_us,
        };
        srv->cfg.access_log(&a, srv->cfg.ctx);
    }
    request_unref(req);
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

const char *http_request_raw_query(const struct http_request *req)
{
    return req->target.query;
}

const struct http_route *http_request_route(const struct http_request *req)
{
    return req->route;
}

const void *http_request_route_arg(const struct http_request *req)
{
    return req->route ? req->route->arg : NULL;
}

const char *http_request_param(const struct http_request *req, const char *name)
{
    if (!name)
        return NULL;
    size_t n = strlen(name);
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
        return GPO_EINVAL;
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

int http_request_suspend(struct http_request *req, unsigned timeout_ms, http_timeout_fn on_timeout,
                         void *ctx)
{
    struct http_server *srv = req->srv;
    if (timeout_ms > HTTP_MAX_TIMEOUT_MS || (timeout_ms && !on_timeout))
        return GPO_EINVAL;
    if (!req->in_handler || !http_can_answer(req))
        return GPO_ESTATE;
    pthread_mutex_lock(&srv->mu);
    int rc = srv->stopping ? GPO_ESHUTDOWN : 0;
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
        return GPO_ESTATE;
    }
    req->suspend_held = false;
    if (req->state == REQ_SUSPENDING || req->state == REQ_SUSPENDED) {
        http_set_resp(req, r, status);
        r = NULL;
    }
    if (req->state == REQ_SUSPENDED) {
        http_timer_disarm(srv, req);
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
    int rc = http_build_error(req, status, code, fmt, ap, ret);
    va_end(ap);
    return rc;
}

int http_request_complete(struct http_request *req, unsigned status, json_t *body)
{
    struct MHD_Response *r = NULL;
    int rc;
    if (http_status_ok(status)) {
        rc = http_build_json(req, body, &r);
    } else {
        json_decref(body);
        build_errorf(req, &r, 500, "internal", "completed with invalid status %u", status);
        rc = GPO_EINVAL;
        status = 500;
    }
    return complete_with(req, rc, r, status);
}

int http_request_complete_error(struct http_request *req, unsigned status, const char *code,
                                const char *fmt, ...)
{
    struct MHD_Response *r = NULL;
    va_list ap;
    if (!http_status_ok(status) || !code || !fmt) {
        build_errorf(req, &r, 500, "internal", "completed with an invalid error");
        return complete_with(req, GPO_EINVAL, r, 500);
    }
    va_start(ap, fmt);
    int rc = http_build_error(req, status, code, fmt, ap, &r);
    va_end(ap);
    return complete_with(req, rc, r, status);
}

/*
 * proxy.c - a worker: its evhttp server, the choice of a service for each
 * request, the hold queue, and the exchange with a replica, streamed both
 * ways as it arrives (router.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/resource.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "router/router.h"
#include "util/jsonv.h"
#include "base/banned.h"

/* The incoming connections by descriptor: a descriptor names one
 * connection of the process at a time, and only the worker that owns the
 * connection touches its slot. */
static struct rt_client **clients;
static size_t nclients;
static pthread_once_t clients_once = PTHREAD_ONCE_INIT;

static void clients_init(void)
{
    struct rlimit rl;
    size_t n = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                   ? (size_t)rl.rlim_cur
                   : 65536;
    if (n > (1u << 22))
        n = 1u << 22;
    // NOLINTNEXTLINE(bugprone-sizeof-expression): *clients is a pointer (an array of them)
    clients = calloc(n, sizeof(*clients));
    nclients = clients ? n : 0;
}

void rt_reply(struct evhttp_request *req, int code, const char *reason, const char *type,
              const char *body)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", type);
    struct evbuffer *b = evbuffer_new();
    if (b)
        evbuffer_add(b, body, strlen(body));
    evhttp_send_reply(req, code, reason, b);
    if (b)
        evbuffer_free(b);
}

void rt_reply_error(struct evhttp_request *req, int code, const char *reason, const char *type,
                    const char *code_name, const char *msg)
{
    json_t *o =
        json_pack("{s:{s:s,s:s,s:s}}", "error", "message", msg, "type", type, "code", code_name);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    rt_reply(req, code, reason, "application/json", text ? text : "{}");
    free(text);
}

static void count_code(struct rt_stats *st, int code)
{
    if (st && code >= 100 && code < 100 + RT_CODES)
        atomic_fetch_add(&st->codes[code - 100], 1);
}

/* ---- incoming connections ---- */

static void client_closed(struct evhttp_connection *evcon, void *arg)
{
    struct rt_client *c = arg;
    (void)evcon;
    atomic_fetch_sub(&c->w->r->connections, 1);
    if (c->fd >= 0 && (size_t)c->fd < nclients && clients[c->fd] == c)
        clients[c->fd] = NULL;
    if (c->x)
        rt_exchange_lost(c->x);
    free(c);
}

/* The connection's record, made at its first request; NULL when over
 * --max-connections (the caller answers 503 and closes). */
static struct rt_client *client_of(struct rt_worker *w, struct evhttp_request *req, bool *full)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    *full = false;
    if (fd < 0 || (size_t)fd >= nclients)
        return NULL;
    if (clients[fd] && clients[fd]->evcon == evcon)
        return clients[fd];
    if (atomic_fetch_add(&w->r->connections, 1) >= (unsigned)w->r->a.max_connections) {
        atomic_fetch_sub(&w->r->connections, 1);
        *full = true;
        return NULL;
    }
    struct rt_client *c = calloc(1, sizeof(*c));
    if (!c) {
        atomic_fetch_sub(&w->r->connections, 1);
        return NULL;
    }
    c->w = w;
    c->evcon = evcon;
    c->fd = fd;
    clients[fd] = c;
    evhttp_connection_set_closecb(evcon, client_closed, c);
    return c;
}

/* ---- framing ---- */

static bool length_ok(const char *v)
{
    if (!*v || strlen(v) > 18)
        return false;
    for (const char *p = v; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

/* Strict framing: one Content-Length of digits only, never next to a
 * Transfer-Encoding (evhttp itself prefers chunked and takes the first
 * length, which lets a proxy and its upstream read different bodies). */
const char *rt_framing_fault(const struct evkeyvalq *h)
{
    const char *cl = NULL;
    bool te = false;
    for (const struct evkeyval *kv = TAILQ_FIRST(h); kv; kv = TAILQ_NEXT(kv, next)) {
        if (!strcasecmp(kv->key, "Transfer-Encoding"))
            te = true;
        if (strcasecmp(kv->key, "Content-Length") != 0)
            continue;
        if (!length_ok(kv->value))
            return "malformed Content-Length";
        if (cl && strcmp(cl, kv->value) != 0)
            return "conflicting Content-Length headers";
        cl = kv->value;
    }
    if (cl && te)
        return "Content-Length with Transfer-Encoding";
    return NULL;
}

/* ---- routing ---- */

static const char *const openai_paths[] = {"/v1/chat/completions", "/v1/completions",
                                           "/v1/embeddings", NULL};

static bool is_openai(const char *path)
{
    for (size_t k = 0; openai_paths[k]; k++)
        if (!strcmp(path, openai_paths[k]))
            return true;
    return false;
}

/* The service of a request and the URI to forward; 0, or a status already
 * answered. */
static int route(struct rt_worker *w, struct evhttp_request *req, const struct rt_service **ret,
                 char **ret_uri)
{
    const char *uri = evhttp_request_get_uri(req);
    const struct evhttp_uri *pu = evhttp_request_get_evhttp_uri(req);
    const char *path = pu ? evhttp_uri_get_path(pu) : NULL;
    if (!path || !*path)
        path = "/";
    const struct rt_table *t = w->table;
    if (!strncmp(uri, "/s/", 3)) {
        const char *name = uri + 3;
        size_t len = strcspn(name, "/?");
        const struct rt_service *s = rt_find_name(t, name, len);
        if (!s) {
            rt_reply_error(req, 404, "Not Found", "invalid_request_error", "service_not_found",
                           "no such service");
            return 404;
        }
        const char *rest = name + len;
        size_t n = strlen(rest) + 2;
        char *fwd = malloc(n);
        if (!fwd)
            return 500;
        snprintf(fwd, n, "%s%s", *rest == '/' ? "" : "/", rest);
        *ret = s;
        *ret_uri = fwd;
        return 0;
    }
    const struct rt_service *s =
        rt_find_host(t, evhttp_find_header(evhttp_request_get_input_headers(req), "Host"));
    if (!s && evhttp_request_get_command(req) == EVHTTP_REQ_POST && is_openai(path)) {
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t len = evbuffer_get_length(in);
        const char *body = len ? (const char *)evbuffer_pullup(in, -1) : "";
        json_t *o = json_loadb(body, len, 0, NULL);
        const char *model = json_string_value(json_object_get(o, "model"));
        if (!model) {
            json_decref(o);
            rt_reply_error(req, 400, "Bad Request", "invalid_request_error", "invalid_request",
                           "the body is not a JSON object with a string 'model'");
            return 400;
        }
        s = rt_find_model(t, model);
        if (!s) {
            char known[2048], msg[2600], q[JSONV_QUOTE_MAX + 4];
            rt_models_list(t, known, sizeof(known));
            snprintf(msg, sizeof(msg), "unknown model '%s' (known: %s)",
                     jsonv_quote(model, strlen(model), q), *known ? known : "none");
            json_decref(o);
            rt_reply_error(req, 404, "Not Found", "invalid_request_error", "model_not_found", msg);
            return 404;
        }
        json_decref(o);
    }
    if (!s) {
        rt_reply_error(req, 404, "Not Found", "invalid_request_error", "not_found",
                       "no service answers this path or host (use /s/SERVICE/..., a service's "
                       "host, or a known 'model')");
        return 404;
    }
    *ret = s;
    *ret_uri = strdup(uri);
    return *ret_uri ? 0 : 500;
}

static const char *api_key(struct evhttp_request *req)
{
    const struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *a = evhttp_find_header(h, "Authorization");
    if (a && !strncasecmp(a, "Bearer ", 7))
        return a + 7;
    return evhttp_find_header(h, "x-api-key");
}

static void own_route(struct rt_worker *w, struct evhttp_request *req, const char *path)
{
    if (!strcmp(path, "/healthz")) {
        rt_reply(req, 200, "OK", "text/plain", w->table ? "ok\n" : "ok (no routing table yet)\n");
        return;
    }
    size_t len = 0;
    char *text = !strcmp(path, "/metrics") ? rt_metrics_text(w->r, w->table, &len)
                                           : rt_models_json(w->table);
    if (!text) {
        rt_reply(req, 500, "Internal Server Error", "text/plain", "out of memory\n");
        return;
    }
    rt_reply(req, 200, "OK",
             !strcmp(path, "/metrics") ? "text/plain; version=0.0.4" : "application/json", text);
    free(text);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    struct rt_worker *w = arg;
    bool full = false;
    struct rt_client *c = client_of(w, req, &full);
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    if (!c) {
        evhttp_add_header(out, "Connection", "close");
        evhttp_add_header(out, "Retry-After", "1");
        rt_reply(req, 503, "Service Unavailable", "text/plain",
                 full ? "too many connections\n" : "out of memory\n");
        return;
    }
    const char *fault = rt_framing_fault(evhttp_request_get_input_headers(req));
    if (fault) {
        evhttp_add_header(out, "Connection", "close");
        rt_reply_error(req, 400, "Bad Request", "invalid_request_error", "bad_framing", fault);
        return;
    }
    const struct evhttp_uri *pu = evhttp_request_get_evhttp_uri(req);
    const char *path = pu && evhttp_uri_get_path(pu) ? evhttp_uri_get_path(pu) : "/";
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if ((cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD) &&
        (!strcmp(path, "/healthz") || !strcmp(path, "/metrics") || !strcmp(path, "/v1/models"))) {
        own_route(w, req, path);
        return;
    }
    if (!w->table) {
        evhttp_add_header(out, "Retry-After", "1");
        rt_reply_error(req, 503, "Service Unavailable", "server_error", "no_routes",
                       "the router has not heard from the controller yet");
        return;
    }
    const struct rt_service *s = NULL;
    char *uri = NULL;
    int rc = route(w, req, &s, &uri);
    if (rc == 500)
        rt_reply(req, 500, "Internal Server Error", "text/plain", "out of memory\n");
    if (rc)
        return;
    if (!rt_key_ok(s, api_key(req))) {
        free(uri);
        count_code(s->stats, 401);
        rt_reply_error(req, 401, "Unauthorized", "invalid_request_error", "invalid_api_key",
                       "this service needs an API key (Authorization: Bearer KEY or x-api-key)");
        return;
    }
    rt_exchange_start(w, c, req, s, uri);
}

/* ---- the worker ---- */

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct rt_worker *w = arg;
    struct rt_table *t = router_table(w->r);
    if (t != w->table) {
        struct rt_table *old = w->table;
        w->table = t;
        rt_pool_sweep(w, old);
        rt_table_unref(old);
    } else {
        rt_table_unref(t);
    }
    rt_held_retry(w);
}

void rt_worker_wake(struct rt_worker *w)
{
    event_active(w->wake, EV_READ, 0);
}

int rt_worker_new(struct router *r, size_t index, int listen_fd, struct rt_worker **ret)
{
    pthread_once(&clients_once, clients_init);
    if (!nclients)
        return GPO_ENOMEM;
    struct rt_worker *w = calloc(1, sizeof(*w));
    if (!w)
        return GPO_ENOMEM;
    w->r = r;
    w->index = index;
    w->seed = (uint64_t)rt_now_us() * (index + 1) | 1;
    TAILQ_INIT(&w->held);
    /* The change list folds evhttp's many enable/disable calls of a loop
     * iteration into one epoll_ctl per descriptor. */
    struct event_config *cfg = event_config_new();
    if (cfg)
        event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    w->base = cfg ? event_base_new_with_config(cfg) : NULL;
    if (cfg)
        event_config_free(cfg);
    w->http = w->base ? evhttp_new(w->base) : NULL;
    w->wake = w->base ? event_new(w->base, -1, EV_READ, on_wake, w) : NULL;
    if (!w->http || !w->wake || evhttp_accept_socket(w->http, listen_fd) != 0) {
        rt_worker_free(w);
        return GPO_ENOMEM;
    }
    evhttp_set_max_headers_size(w->http, (ev_ssize_t)r->a.max_header);
    evhttp_set_max_body_size(w->http, (ev_ssize_t)r->a.max_body);
    evhttp_set_timeout(w->http, (int)r->a.idle_timeout_s);
    evhttp_set_allowed_methods(w->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    evhttp_set_default_content_type(w->http, "application/json");
    evhttp_set_gencb(w->http, on_request, w);
    w->table = router_table(r);
    *ret = w;
    return 0;
}

void *rt_worker_run(void *arg)
{
    struct rt_worker *w = arg;
    event_base_dispatch(w->base);
    return NULL;
}

void rt_worker_free(struct rt_worker *w)
{
    if (!w)
        return;
    if (w->wake)
        event_free(w->wake);
    if (w->http)
        evhttp_free(w->http);
    if (w->base)
        event_base_free(w->base);
    rt_table_unref(w->table);
    free(w);
}

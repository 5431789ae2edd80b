/*
 * proxy.c - a worker: its listening socket, its client connections (read
 * into their own buffer, parsed by http1.c, answered with send() from
 * their own buffer), the choice of a service for each request, and the
 * router's own pages (router.h).
 *
 * Every socket is registered once with EV_READ|EV_WRITE|EV_ET|EV_PERSIST:
 * no epoll_ctl per request. Edge-triggered means a socket is read until
 * it is drained (a short read, or EAGAIN) or until the reader stops on
 * purpose, which it remembers (rd_more) and resumes itself; a write that
 * would block waits for the next writable edge (wr_blocked).
 */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "router/router.h"
#include "util/jsonv.h"
#include "base/banned.h"

#define IN_SIZE         16384 /* a client connection's read buffer */
#define ACCEPT_BATCH    64    /* connections taken per wake of the listener */
#define LINGER_S        2     /* reading to the end after an answer that closes */
#define ACCEPT_PAUSE_MS 200   /* out of descriptors: the listener rests this long */

static const char *const methods_ok[] = {"GET",    "POST",    "HEAD",  "PUT",
                                         "DELETE", "OPTIONS", "PATCH", NULL};

/* ---- answers of the router's own ---- */

void rt_reply(struct rt_client *c, int code, const char *reason, const char *type, const char *body,
              size_t len, const char *extra, bool close)
{
    close = close || !c->rq.keep_alive || c->rq.stage != RT_DONE;
    int rc = rt_buf_printf(&c->out,
                           "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s\r\n",
                           code, reason, type, len, extra ? extra : "",
                           close           ? "Connection: close\r\n"
                           : !c->rq.http11 ? "Connection: keep-alive\r\n"
                                           : "");
    if (!rc && c->rq.method != HTTP_HEAD)
        rc = rt_buf_add(&c->out, body, len);
    rt_client_done(c, close || rc != 0);
}

void rt_reply_error(struct rt_client *c, int code, const char *reason, const char *type,
                    const char *code_name, const char *msg, const char *extra, bool close)
{
    json_t *o =
        json_pack("{s:{s:s,s:s,s:s}}", "error", "message", msg, "type", type, "code", code_name);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    rt_reply(c, code, reason, "application/json", text ? text : "{}", text ? strlen(text) : 2,
             extra, close);
    free(text);
}

static void reply_text(struct rt_client *c, int code, const char *reason, const char *text,
                       const char *extra, bool close)
{
    rt_reply(c, code, reason, "text/plain", text, strlen(text), extra, close);
}

static void count_code(struct rt_stats *st, int code)
{
    if (st && code >= 100 && code < 100 + RT_CODES)
        atomic_fetch_add(&st->codes[code - 100], 1);
}

/* ---- routing ---- */

static const char *const openai_paths[] = {"/v1/chat/completions", "/v1/completions",
                                           "/v1/embeddings", NULL};

static bool is_openai(const char *path, size_t len)
{
    for (size_t k = 0; openai_paths[k]; k++)
        if (strlen(openai_paths[k]) == len && !strncmp(path, openai_paths[k], len))
            return true;
    return false;
}

static bool path_is(const char *path, size_t len, const char *want)
{
    return strlen(want) == len && !strncmp(path, want, len);
}

/* The service of c's request, with c->uri set to the URI to forward; NULL
 * when answered here. */
static const struct rt_service *route(struct rt_client *c, const char *uri, const char *path,
                                      size_t plen)
{
    const struct rt_table *t = c->w->table;
    const struct rt_service *s = NULL;
    c->uri.len = 0;
    if (!strncmp(uri, "/s/", 3)) {
        const char *name = uri + 3;
        size_t len = strcspn(name, "/?");
        if (!(s = rt_find_name(t, name, len))) {
            rt_reply_error(c, 404, "Not Found", "invalid_request_error", "service_not_found",
                           "no such service", NULL, false);
            return NULL;
        }
        const char *rest = name + len;
        if ((*rest != '/' && rt_buf_add(&c->uri, "/", 1)) ||
            rt_buf_add(&c->uri, rest, strlen(rest) + 1)) {
            reply_text(c, 500, "Internal Server Error", "out of memory\n", NULL, true);
            return NULL;
        }
        return s;
    }
    s = rt_find_host(t, rt_msg_get(&c->rq.m, "Host"));
    if (!s && c->rq.method == HTTP_POST && is_openai(path, plen)) {
        json_t *o = json_loadb(c->rq.body.data ? c->rq.body.data : "", c->rq.body.len, 0, NULL);
        const char *model = json_string_value(json_object_get(o, "model"));
        if (!model) {
            json_decref(o);
            rt_reply_error(c, 400, "Bad Request", "invalid_request_error", "invalid_request",
                           "the body is not a JSON object with a string 'model'", NULL, false);
            return NULL;
        }
        s = rt_find_model(t, model);
        if (!s) {
            char known[2048], msg[2600], q[JSONV_QUOTE_MAX + 4];
            rt_models_list(t, known, sizeof(known));
            snprintf(msg, sizeof(msg), "unknown model '%s' (known: %s)",
                     jsonv_quote(model, strlen(model), q), *known ? known : "none");
            json_decref(o);
            rt_reply_error(c, 404, "Not Found", "invalid_request_error", "model_not_found", msg,
                           NULL, false);
            return NULL;
        }
        json_decref(o);
    }
    if (!s) {
        rt_reply_error(c, 404, "Not Found", "invalid_request_error", "not_found",
                       "no service answers this path or host (use /s/SERVICE/..., a service's "
                       "host, or a known 'model')",
                       NULL, false);
        return NULL;
    }
    if (rt_buf_add(&c->uri, uri, strlen(uri) + 1)) {
        reply_text(c, 500, "Internal Server Error", "out of memory\n", NULL, true);
        return NULL;
    }
    return s;
}

static const char *api_key(const struct rt_msg *m)
{
    const char *a = rt_msg_get(m, "Authorization");
    if (a && !strncasecmp(a, "Bearer ", 7))
        return a + 7;
    return rt_msg_get(m, "x-api-key");
}

static void own_route(struct rt_client *c, const char *path, size_t plen)
{
    struct rt_worker *w = c->w;
    if (path_is(path, plen, "/healthz")) {
        reply_text(c, 200, "OK", w->table ? "ok\n" : "ok (no routing table yet)\n", NULL, false);
        return;
    }
    bool metrics = path_is(path, plen, "/metrics");
    size_t len = 0;
    char *text = metrics ? rt_metrics_text(w->r, w->table, &len) : rt_models_json(w->table);
    if (!text) {
        reply_text(c, 500, "Internal Server Error", "out of memory\n", NULL, false);
        return;
    }
    rt_reply(c, 200, "OK", metrics ? "text/plain; version=0.0.4" : "application/json", text,
             metrics ? len : strlen(text), NULL, false);
    free(text);
}

static bool method_ok(int method)
{
    const char *name = http_method_str((enum http_method)method);
    for (size_t k = 0; methods_ok[k]; k++)
        if (!strcmp(name, methods_ok[k]))
            return true;
    return false;
}

/* A whole request is in c->rq: answer it here or start its exchange. */
static void on_request(struct rt_client *c)
{
    struct rt_worker *w = c->w;
    if (!c->counted) {
        reply_text(c, 503, "Service Unavailable", "too many connections\n", "Retry-After: 1\r\n",
                   true);
        return;
    }
    if (!method_ok(c->rq.method)) {
        rt_reply_error(c, 405, "Method Not Allowed", "invalid_request_error", "bad_method",
                       "the router forwards GET, POST, HEAD, PUT, DELETE, OPTIONS and PATCH", NULL,
                       false);
        return;
    }
    const char *uri = rt_msg_line(&c->rq.m);
    const char *path = uri;
    if (*uri != '/') { /* absolute form: the path after the authority */
        const char *p = strstr(uri, "://");
        path = p ? p + 3 + strcspn(p + 3, "/") : uri;
    }
    size_t plen = strcspn(path, "?#");
    if (!plen) {
        path = "/";
        plen = 1;
    }
    if ((c->rq.method == HTTP_GET || c->rq.method == HTTP_HEAD) &&
        (path_is(path, plen, "/healthz") || path_is(path, plen, "/metrics") ||
         path_is(path, plen, "/v1/models"))) {
        own_route(c, path, plen);
        return;
    }
    if (!w->table) {
        rt_reply_error(c, 503, "Service Unavailable", "server_error", "no_routes",
                       "the router has not heard from the controller yet", "Retry-After: 1\r\n",
                       false);
        return;
    }
    const struct rt_service *s = route(c, uri, path, plen);
    if (!s)
        return;
    if (!rt_key_ok(s, api_key(&c->rq.m))) {
        count_code(s->stats, 401);
        rt_reply_error(c, 401, "Unauthorized", "invalid_request_error", "invalid_api_key",
                       "this service needs an API key (Authorization: Bearer KEY or x-api-key)",
                       NULL, false);
        return;
    }
    rt_exchange_start(c, s);
}

/* ---- client connections ---- */

void rt_client_kill(struct rt_client *c)
{
    if (c->dead)
        return;
    c->dead = true;
    if (c->busy) {
        c->busy = false;
        rt_exchange_lost(&c->x);
    }
    event_del(c->ev);
    close(c->fd);
    c->fd = -1;
    if (c->counted)
        atomic_fetch_sub(&c->w->r->connections, 1);
    c->next_dead = c->w->dead_clients;
    c->w->dead_clients = c;
}

static void client_free(struct rt_client *c)
{
    event_free(c->ev);
    rt_reqr_release(&c->rq);
    rt_buf_release(&c->in);
    rt_buf_release(&c->out);
    rt_buf_release(&c->uri);
    free(c);
}

void rt_worker_reap(struct rt_worker *w)
{
    while (w->dead_clients) {
        struct rt_client *c = w->dead_clients;
        w->dead_clients = c->next_dead;
        client_free(c);
    }
    while (w->dead_conns) {
        struct rt_conn *k = w->dead_conns;
        w->dead_conns = k->next;
        rt_conn_free(k);
    }
}

/* Written and closing: shut for writing, then read what the client still
 * sends until it closes (so that our answer is not lost to a reset). */
static void client_linger(struct rt_client *c)
{
    struct timeval tv = {LINGER_S, 0};
    c->lingering = true;
    c->rd_more = true;
    if (shutdown(c->fd, SHUT_WR) != 0 || event_add(c->ev, &tv) != 0)
        rt_client_kill(c);
}

bool rt_client_flush(struct rt_client *c)
{
    if (c->dead)
        return false;
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            c->wr_blocked = true;
            return true;
        }
        rt_client_kill(c);
        return false;
    }
    c->wr_blocked = false;
    c->out.len = c->out_off = 0;
    if (c->closing && !c->lingering && !c->busy) {
        client_linger(c);
        return !c->dead;
    }
    if (c->busy)
        rt_exchange_resume(&c->x);
    return true;
}

/* Makes room to read into c->in: what was parsed goes. 0 when none. */
static size_t in_room(struct rt_client *c)
{
    if (c->in_off == c->in.len) {
        c->in.len = c->in_off = 0;
    } else if (c->in_off > 0 && c->in.cap - c->in.len < IN_SIZE / 4) {
        memmove(c->in.data, c->in.data + c->in_off, c->in.len - c->in_off);
        c->in.len -= c->in_off;
        c->in_off = 0;
    }
    return c->in.cap - c->in.len;
}

/* Parses what c->in holds while no request is being answered. */
static void client_parse(struct rt_client *c)
{
    while (!c->busy && !c->closing && !c->dead && c->in_off < c->in.len) {
        c->in_off += rt_reqr_feed(&c->rq, c->in.data + c->in_off, c->in.len - c->in_off);
        if (c->rq.stage == RT_FAULT) {
            c->busy = true;
            rt_reply_error(c, c->rq.fault_code,
                           c->rq.fault_code == 413 ? "Payload Too Large" : "Bad Request",
                           "invalid_request_error", "bad_framing", c->rq.fault, NULL, true);
            break;
        }
        if (c->rq.stage == RT_BODY && c->rq.expect_continue && !c->continued) {
            c->continued = true;
            if (rt_buf_str(&c->out, "HTTP/1.1 100 Continue\r\n\r\n")) {
                rt_client_kill(c);
                return;
            }
        }
        if (c->rq.stage != RT_DONE)
            break;
        c->busy = true;
        on_request(c);
    }
}

void rt_client_done(struct rt_client *c, bool close)
{
    if (c->dead)
        return;
    c->busy = false;
    c->continued = false;
    if (close)
        c->closing = true;
    if (!c->closing) {
        rt_reqr_next(&c->rq);
        if (c->in_off < c->in.len || c->rd_more)
            event_active(c->ev, EV_READ, 0); /* a request waits: after this callback */
    }
}

/* Reads c until the socket is drained (or c stops on purpose). */
static void client_read(struct rt_client *c, bool rdhup)
{
    for (;;) {
        if (!c->busy && !c->lingering)
            client_parse(c);
        if (c->dead || !c->rd_more)
            return;
        if (c->closing && !c->lingering)
            return; /* nothing more is taken before the answer is out */
        size_t room = in_room(c);
        if (!room) {
            if (c->lingering) {
                c->in.len = c->in_off = 0;
                room = c->in.cap;
            } else {
                return; /* full while answering: read again when done */
            }
        }
        ssize_t n = recv(c->fd, c->in.data + c->in.len, room, 0);
        if (n > 0) {
            c->in.len += (size_t)n;
            if (c->lingering)
                c->in.len = c->in_off = 0;
            if ((size_t)n < room && !rdhup)
                c->rd_more = false;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            c->rd_more = false;
            if (!c->busy && !c->lingering)
                client_parse(c);
            return;
        }
        rt_client_kill(c); /* closed, or reset: an answer under way is cut */
        return;
    }
}

static void client_event(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    struct rt_client *c = arg;
    struct rt_worker *w = c->w;
    if (what & EV_TIMEOUT) {
        if (c->lingering || (!c->busy && c->out_off == c->out.len))
            rt_client_kill(c); /* idle past --idle-timeout, or done lingering */
    }
    if ((what & EV_WRITE) && !c->dead && c->out_off < c->out.len)
        rt_client_flush(c);
    if ((what & (EV_READ | EV_CLOSED)) && !c->dead) {
        c->rd_more = true;
        client_read(c, (what & EV_CLOSED) != 0);
    }
    if (!c->dead && !c->wr_blocked && c->out_off < c->out.len)
        rt_client_flush(c);
    rt_worker_reap(w);
}

static void client_new(struct rt_worker *w, int fd, const struct sockaddr_storage *sa)
{
    struct rt_client *c = calloc(1, sizeof(*c));
    if (!c || rt_buf_reserve(&c->in, IN_SIZE)) {
        free(c);
        close(fd);
        return;
    }
    c->w = w;
    c->fd = fd;
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (sa->ss_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, c->peer, sizeof(c->peer));
    else if (sa->ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, c->peer,
                  sizeof(c->peer));
    rt_reqr_init(&c->rq, (size_t)w->r->a.max_header, (size_t)w->r->a.max_body);
    c->x.c = c;
    /* Past --max-connections the connection is taken, answered 503 at its
     * first request and closed. */
    if (atomic_fetch_add(&w->r->connections, 1) < (unsigned)w->r->a.max_connections)
        c->counted = true;
    else
        atomic_fetch_sub(&w->r->connections, 1);
    struct timeval idle = {w->r->a.idle_timeout_s, 0};
    c->ev = event_new(w->base, fd, EV_READ | EV_WRITE | EV_ET | EV_PERSIST | EV_CLOSED,
                      client_event, c);
    if (!c->ev || event_add(c->ev, &idle) != 0) {
        if (c->counted)
            atomic_fetch_sub(&w->r->connections, 1);
        if (c->ev)
            event_free(c->ev);
        rt_reqr_release(&c->rq);
        rt_buf_release(&c->in);
        free(c);
        close(fd);
        return;
    }
    /* The request is often there already: read it now, not after a wake. */
    c->rd_more = true;
    client_read(c, false);
}

static void accept_again(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct rt_worker *w = arg;
    if (event_add(w->accept_ev, NULL) != 0)
        router_log("worker %zu: listening again failed", w->index);
}

static void on_accept(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct rt_worker *w = arg;
    for (int k = 0; k < ACCEPT_BATCH; k++) {
        struct sockaddr_storage sa = {.ss_family = AF_UNSPEC};
        socklen_t sl = sizeof(sa);
        int cfd = accept4(fd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* the listener is level-triggered: without a pause it would
                 * spin; the backlog waits a moment */
                struct timeval pause = {0, (suseconds_t)ACCEPT_PAUSE_MS * 1000};
                if (!w->accept_short)
                    router_log("worker %zu: accept: %s (pausing %d ms at a time)", w->index,
                               strerror(errno), ACCEPT_PAUSE_MS);
                w->accept_short = true;
                event_del(w->accept_ev);
                if (event_base_once(w->base, -1, EV_TIMEOUT, accept_again, w, &pause) != 0)
                    accept_again(-1, 0, w);
            }
            break; /* EAGAIN */
        }
        w->accept_short = false;
        client_new(w, cfd, &sa);
    }
    rt_worker_reap(w);
}

/* ---- the worker ---- */

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct rt_worker *w = arg;
    uint64_t v;
    if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        router_log("worker %zu: reading its wake: %s", w->index, strerror(errno));
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
    rt_worker_reap(w);
}

void rt_worker_wake(struct rt_worker *w)
{
    uint64_t one = 1;
    if (write(w->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        router_log("worker %zu: waking it: %s", w->index, strerror(errno));
}

int rt_worker_new(struct router *r, size_t index, int listen_fd, struct rt_worker **ret)
{
    struct rt_worker *w = calloc(1, sizeof(*w));
    if (!w)
        return GPO_ENOMEM;
    w->r = r;
    w->index = index;
    w->listen_fd = listen_fd;
    w->seed = (uint64_t)rt_now_us() * (index + 1) | 1;
    TAILQ_INIT(&w->held);
    /* One thread per base, and other threads only write the eventfd: no
     * locks in the loop. */
    struct event_config *cfg = event_config_new();
    if (cfg)
        event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
    w->base = cfg ? event_base_new_with_config(cfg) : NULL;
    if (cfg)
        event_config_free(cfg);
    w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    w->wake = w->base && w->wake_fd >= 0
                  ? event_new(w->base, w->wake_fd, EV_READ | EV_PERSIST, on_wake, w)
                  : NULL;
    w->accept_ev =
        w->base ? event_new(w->base, listen_fd, EV_READ | EV_PERSIST, on_accept, w) : NULL;
    if (!w->wake || !w->accept_ev || event_add(w->wake, NULL) != 0 ||
        event_add(w->accept_ev, NULL) != 0) {
        rt_worker_free(w);
        return GPO_ENOMEM;
    }
    http_parser_set_max_header_size((uint32_t)r->a.max_header);
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
    if (w->accept_ev)
        event_free(w->accept_ev);
    if (w->wake_fd > 0)
        close(w->wake_fd);
    if (w->base)
        event_base_free(w->base);
    rt_table_unref(w->table);
    free(w);
}

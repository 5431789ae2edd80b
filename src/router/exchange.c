/*
 * exchange.c - one request through a replica: the choice of an endpoint,
 * the hold queue while none can take it, the keep-alive connections, and
 * the answer streamed back piece by piece as it arrives (router.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "router/router.h"
#include "base/banned.h"

#define IDLE_CONNS_MAX     256  /* idle connections a worker keeps per endpoint */
#define UPSTREAM_TIMEOUT_S 3600 /* a replica silent this long has failed */
#define VIA                "1.1 gpuorch-router"
#define STREAM_HIGH        (1 << 20) /* bytes waiting for a slow client before the replica waits */

struct rt_exchange {
    TAILQ_ENTRY(rt_exchange) link; /* in the worker's held list */
    struct rt_worker *w;
    struct rt_client *c;         /* NULL once the client's connection closed */
    struct evhttp_request *down; /* the client's request; NULL once libevent freed it */
    bool down_owned;             /* its connection is gone: ours to free */
    struct rt_table *table;      /* keeps s alive (a reference) */
    const struct rt_service *s;
    struct rt_stats *st; /* a reference */
    char *uri;
    struct rt_endpoint *ep; /* a reference while sent */
    struct rt_conn *conn;
    struct evhttp_request *up; /* NULL once done */
    struct event *timer;       /* while held */
    bool held, started, retried;
    bool paused; /* the replica's connection is not read until the client catches up */
    int code;
    int64_t t0;
};

static void exchange_send(struct rt_exchange *x, const struct rt_endpoint *avoid);

/* ---- the connection pool ---- */

static void conn_free_later(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct rt_conn *c = arg;
    evhttp_connection_free(c->evcon);
    free(c);
}

/* A connection to ep: an idle one of this worker's, else a new one. Busy
 * connections are in no list: the exchange holds its own. */
static struct rt_conn *pool_get(struct rt_worker *w, struct rt_endpoint *ep)
{
    struct rt_conn *c = ep->pool[w->index];
    if (c) {
        ep->pool[w->index] = c->next;
        ep->nidle[w->index]--;
        c->next = NULL;
        return c;
    }
    if (!(c = calloc(1, sizeof(*c))))
        return NULL;
    c->evcon = evhttp_connection_base_new(w->base, NULL, ep->addr, ep->port);
    if (!c->evcon) {
        free(c);
        return NULL;
    }
    evhttp_connection_set_timeout(c->evcon, UPSTREAM_TIMEOUT_S);
    return c;
}

/* Frees c once the loop is out of its callbacks. */
static void conn_drop(struct rt_worker *w, struct rt_conn *c)
{
    struct timeval now = {0, 0};
    if (event_base_once(w->base, -1, EV_TIMEOUT, conn_free_later, c, &now) != 0) {
        evhttp_connection_free(c->evcon); /* not in one of its callbacks here */
        free(c);
    }
}

static void pool_put(struct rt_worker *w, struct rt_endpoint *ep, struct rt_conn *c)
{
    if (atomic_load(&ep->gone) || ep->nidle[w->index] >= IDLE_CONNS_MAX) {
        conn_drop(w, c);
        return;
    }
    c->next = ep->pool[w->index];
    ep->pool[w->index] = c;
    ep->nidle[w->index]++;
}

void rt_pool_sweep(struct rt_worker *w, const struct rt_table *old)
{
    for (size_t i = 0; old && i < old->nservices; i++)
        for (size_t k = 0; k < old->services[i].neps; k++) {
            struct rt_endpoint *ep = old->services[i].eps[k].ep;
            if (!atomic_load(&ep->gone))
                continue;
            while (ep->pool[w->index]) {
                struct rt_conn *c = ep->pool[w->index];
                ep->pool[w->index] = c->next;
                conn_drop(w, c);
            }
            ep->nidle[w->index] = 0;
        }
}

/* ---- the end of an exchange ---- */

static struct bufferevent *bev_of(struct evhttp_connection *evcon)
{
    return evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
}

/* Reads the replica again; what it sent meanwhile is passed on at once. */
static void resume(struct rt_exchange *x)
{
    struct bufferevent *bev = x->conn ? bev_of(x->conn->evcon) : NULL;
    x->paused = false;
    if (!bev)
        return;
    bufferevent_enable(bev, EV_READ);
    bufferevent_trigger(bev, EV_READ, 0); /* may end x: nothing of it is used after */
}

static void unhold(struct rt_exchange *x)
{
    if (!x->held)
        return;
    TAILQ_REMOVE(&x->w->held, x, link);
    x->w->nheld--;
    x->held = false;
    event_free(x->timer);
    x->timer = NULL;
    rt_stats_load(x->st, &x->st->queued, -1);
}

/* Gives the endpoint back: its connection to the pool, its count down. */
static void release_endpoint(struct rt_exchange *x)
{
    if (!x->ep)
        return;
    if (x->conn)
        pool_put(x->w, x->ep, x->conn);
    x->conn = NULL;
    atomic_fetch_sub(&x->ep->inflight, 1);
    rt_stats_load(x->st, &x->st->inflight, -1);
    rt_endpoint_unref(x->ep);
    x->ep = NULL;
}

static void exchange_free(struct rt_exchange *x)
{
    struct rt_worker *w = x->w;
    bool waiting = atomic_load(&x->st->queued) > 0;
    unhold(x);
    release_endpoint(x);
    if (x->code) {
        if (x->code >= 100 && x->code < 100 + RT_CODES)
            atomic_fetch_add(&x->st->codes[x->code - 100], 1);
        rt_hist_add(&x->st->total, rt_now_us() - x->t0);
    }
    if (x->c)
        x->c->x = NULL;
    if (x->down_owned)
        evhttp_request_free(x->down);
    rt_stats_unref(x->st);
    rt_table_unref(x->table);
    free(x->uri);
    free(x);
    /* A slot freed: requests held here, or by other workers, may go (each
     * worker walks its own list, from its loop). */
    if (waiting)
        for (size_t k = 0; k < w->r->nworkers; k++)
            rt_worker_wake(w->r->workers[k]);
}

/* Answers the client (when still there) and ends the exchange. */
static void exchange_fail(struct rt_exchange *x, int code, const char *reason, const char *type,
                          const char *code_name, const char *msg, const char *retry_after)
{
    x->code = code;
    if (x->down && !x->down_owned) {
        if (retry_after)
            evhttp_add_header(evhttp_request_get_output_headers(x->down), "Retry-After",
                              retry_after);
        rt_reply_error(x->down, code, reason, type, code_name, msg);
        x->down = NULL;
    }
    exchange_free(x);
}

void rt_exchange_lost(struct rt_exchange *x)
{
    x->c = NULL;
    if (x->down && !evhttp_request_get_connection(x->down))
        x->down_owned = true; /* libevent let go of it: ours to free */
    else
        x->down = NULL; /* libevent frees it with the connection */
    x->paused = false;  /* the cancel resets the replica's connection */
    if (x->up) {
        evhttp_cancel_request(x->up); /* no callback follows */
        x->up = NULL;
    }
    exchange_free(x);
}

/* ---- the hold queue ---- */

static void held_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct rt_exchange *x = arg;
    unhold(x);
    exchange_fail(x, 503, "Service Unavailable", "server_error", "queue_timeout",
                  "no replica could take the request within the queue timeout", "1");
}

static void hold(struct rt_exchange *x)
{
    const struct rt_service *s = x->s;
    if (atomic_load(&x->st->queued) >= s->queue_limit) {
        exchange_fail(x, 503, "Service Unavailable", "server_error", "queue_full",
                      "no replica can take the request and the queue is full", "1");
        return;
    }
    struct timeval tv = {.tv_sec = s->queue_timeout_ms / 1000,
                         .tv_usec = (s->queue_timeout_ms % 1000) * 1000};
    x->timer = evtimer_new(x->w->base, held_timeout, x);
    if (!x->timer || evtimer_add(x->timer, &tv) != 0) {
        if (x->timer)
            event_free(x->timer);
        x->timer = NULL;
        exchange_fail(x, 503, "Service Unavailable", "server_error", "queue_full", "out of memory",
                      "1");
        return;
    }
    x->held = true;
    TAILQ_INSERT_TAIL(&x->w->held, x, link);
    x->w->nheld++;
    bool first = atomic_load(&x->st->queued) == 0;
    rt_stats_load(x->st, &x->st->queued, 1);
    if (first)
        rt_report_soon(x->w->r); /* a service at zero starts a replica now */
}

void rt_held_retry(struct rt_worker *w)
{
    struct rt_exchange *x = TAILQ_FIRST(&w->held);
    while (x) {
        struct rt_exchange *next = TAILQ_NEXT(x, link);
        const struct rt_service *s = rt_find_name(w->table, x->st->name, strlen(x->st->name));
        if (!s) {
            unhold(x);
            exchange_fail(x, 503, "Service Unavailable", "server_error", "service_gone",
                          "the service is no longer routed", "1");
        } else if (rt_pick(s, NULL, &w->seed)) {
            unhold(x);
            if (x->table != w->table) {
                rt_table_unref(x->table);
                x->table = rt_table_ref(w->table);
            }
            x->s = s;
            exchange_send(x, NULL);
        }
        x = next;
    }
}

/* ---- the upstream request ---- */

static const char *const hop_by_hop[] = {"Connection", "Keep-Alive",        "TE",
                                         "Trailer",    "Transfer-Encoding", "Upgrade",
                                         "Expect",     "Content-Length",    NULL};

/* Whether a header stays on this hop: the hop-by-hop ones, Proxy-*, and
 * those the Connection header names. */
static bool hop_only(const char *key, const char *connection)
{
    for (size_t k = 0; hop_by_hop[k]; k++)
        if (!strcasecmp(key, hop_by_hop[k]))
            return true;
    if (!strncasecmp(key, "Proxy-", 6))
        return true;
    size_t n = strlen(key);
    for (const char *p = connection; p && *p;) {
        p += strspn(p, " \t,");
        size_t len = strcspn(p, " \t,");
        if (len == n && !strncasecmp(p, key, n))
            return true;
        p += len;
    }
    return false;
}

static void copy_headers(const struct evkeyvalq *from, struct evkeyvalq *to)
{
    const char *connection = evhttp_find_header(from, "Connection");
    for (const struct evkeyval *kv = TAILQ_FIRST(from); kv; kv = TAILQ_NEXT(kv, next))
        if (!hop_only(kv->key, connection))
            evhttp_add_header(to, kv->key, kv->value);
}

static void add_joined(struct evkeyvalq *h, const char *key, const char *old, const char *v)
{
    char buf[2048];
    if (old && strlen(old) < 1500)
        snprintf(buf, sizeof(buf), "%s, %s", old, v);
    else
        snprintf(buf, sizeof(buf), "%s", v);
    evhttp_remove_header(h, key);
    evhttp_add_header(h, key, buf);
}

static void forward_headers(struct rt_exchange *x, struct evhttp_request *up, size_t body_len)
{
    const struct evkeyvalq *in = evhttp_request_get_input_headers(x->down);
    struct evkeyvalq *out = evhttp_request_get_output_headers(up);
    copy_headers(in, out);
    char *peer = NULL;
    ev_uint16_t port = 0;
    struct evhttp_connection *evcon = evhttp_request_get_connection(x->down);
    if (evcon)
        evhttp_connection_get_peer(evcon, &peer, &port);
    if (peer)
        add_joined(out, "X-Forwarded-For", evhttp_find_header(in, "X-Forwarded-For"), peer);
    const char *host = evhttp_find_header(in, "Host");
    if (host && !evhttp_find_header(in, "X-Forwarded-Host"))
        evhttp_add_header(out, "X-Forwarded-Host", host);
    if (!evhttp_find_header(in, "X-Forwarded-Proto"))
        evhttp_add_header(out, "X-Forwarded-Proto", "http");
    add_joined(out, "Via", evhttp_find_header(in, "Via"), VIA);
    if (!host) {
        char h[PROTO_HOST_MAX + 8];
        snprintf(h, sizeof(h), "%s:%u", x->ep->addr, x->ep->port);
        evhttp_add_header(out, "Host", h);
    }
    enum evhttp_cmd_type cmd = evhttp_request_get_command(x->down);
    if (body_len || cmd == EVHTTP_REQ_POST || cmd == EVHTTP_REQ_PUT || cmd == EVHTTP_REQ_PATCH) {
        char n[32];
        snprintf(n, sizeof(n), "%zu", body_len);
        evhttp_add_header(out, "Content-Length", n);
    }
}

static int up_headers(struct evhttp_request *up, void *arg)
{
    struct rt_exchange *x = arg;
    int code = evhttp_request_get_response_code(up);
    const struct evkeyvalq *in = evhttp_request_get_input_headers(up);
    if (!x->down || x->down_owned || code < 100 || rt_framing_fault(in))
        return -1; /* the client is gone, or the replica's framing is not to be trusted */
    struct evkeyvalq *out = evhttp_request_get_output_headers(x->down);
    copy_headers(in, out);
    const char *cl = evhttp_find_header(in, "Content-Length");
    if (cl)
        evhttp_add_header(out, "Content-Length", cl);
    add_joined(out, "Via", evhttp_find_header(in, "Via"), VIA);
    x->code = code;
    x->started = true;
    rt_hist_add(&x->st->ttfb, rt_now_us() - x->t0);
    const char *line = evhttp_request_get_response_code_line(up);
    evhttp_send_reply_start(x->down, code, line ? line : "");
    return 0;
}

static void on_flushed(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    resume(arg);
}

static void up_chunk(struct evhttp_request *up, void *arg)
{
    struct rt_exchange *x = arg;
    struct evbuffer *in = evhttp_request_get_input_buffer(up);
    if (!x->down || x->down_owned || !x->started) {
        evbuffer_drain(in, evbuffer_get_length(in));
        return;
    }
    /* Back-pressure: past STREAM_HIGH bytes unsent to the client, the
     * replica's connection waits until they are written. */
    struct bufferevent *down = bev_of(evhttp_request_get_connection(x->down));
    size_t pending = down ? evbuffer_get_length(bufferevent_get_output(down)) : 0;
    struct bufferevent *upb = bev_of(x->conn->evcon);
    if (!x->paused && (!upb || pending + evbuffer_get_length(in) <= STREAM_HIGH)) {
        evhttp_send_reply_chunk(x->down, in);
        return;
    }
    /* Paused, every chunk carries the callback: a plain send would drop it
     * (one write callback per connection), and the replica would wait for
     * ever. evhttp may pass more chunks of what it already read. */
    x->paused = true;
    bufferevent_disable(upb, EV_READ);
    evhttp_send_reply_chunk_with_cb(x->down, in, on_flushed, x);
}

/* The client's connection, closed without ending the answer: a stream cut
 * short must not look complete. */
static void cut_client(struct rt_exchange *x)
{
    struct evhttp_connection *evcon = x->down ? evhttp_request_get_connection(x->down) : NULL;
    if (x->c)
        x->c->x = NULL; /* its close callback must not end x too */
    x->c = NULL;
    x->down = NULL;
    if (evcon)
        evhttp_connection_free(evcon);
}

static void up_done(struct evhttp_request *up, void *arg)
{
    struct rt_exchange *x = arg;
    x->up = NULL;      /* libevent frees it */
    x->paused = false; /* its connection is done or reset: evhttp reads it as it will */
    bool ok = up && x->started && evhttp_request_get_response_code(up) >= 100;
    if (ok) {
        struct evbuffer *in = evhttp_request_get_input_buffer(up);
        if (x->down && !x->down_owned) {
            if (evbuffer_get_length(in))
                evhttp_send_reply_chunk(x->down, in);
            evhttp_send_reply_end(x->down);
            x->down = NULL;
        }
        exchange_free(x);
        return;
    }
    if (x->started) {
        cut_client(x);
        exchange_free(x);
        return;
    }
    /* Nothing reached the client yet: once more, on another endpoint. */
    struct rt_endpoint *failed = x->ep;
    if (failed)
        atomic_fetch_add(&failed->refs, 1);
    release_endpoint(x);
    if (x->retried || !x->down || x->down_owned || !failed) {
        rt_endpoint_unref(failed);
        exchange_fail(x, 502, "Bad Gateway", "server_error", "upstream_error",
                      "the replica failed before it answered", NULL);
        return;
    }
    x->retried = true;
    exchange_send(x, failed);
    rt_endpoint_unref(failed);
}

/* Sends x to an endpoint other than `avoid` (a retry: none is a 502), or
 * holds it while none can take it. */
static void exchange_send(struct rt_exchange *x, const struct rt_endpoint *avoid)
{
    struct rt_endpoint *ep = rt_pick(x->s, avoid, &x->w->seed);
    if (!ep && avoid) {
        exchange_fail(x, 502, "Bad Gateway", "server_error", "upstream_error",
                      "the replica failed before it answered, and no other can take it", NULL);
        return;
    }
    if (!ep) {
        hold(x);
        return;
    }
    atomic_fetch_add(&ep->refs, 1);
    x->ep = ep;
    atomic_fetch_add(&ep->inflight, 1);
    atomic_fetch_add(&ep->requests, 1);
    rt_stats_load(x->st, &x->st->inflight, 1);
    x->conn = pool_get(x->w, ep);
    x->up = x->conn ? evhttp_request_new(up_done, x) : NULL;
    if (!x->up) {
        exchange_fail(x, 500, "Internal Server Error", "server_error", "internal", "out of memory",
                      NULL);
        return;
    }
    evhttp_request_set_header_cb(x->up, up_headers);
    evhttp_request_set_chunked_cb(x->up, up_chunk);
    struct evbuffer *body = evhttp_request_get_input_buffer(x->down);
    size_t len = evbuffer_get_length(body);
    forward_headers(x, x->up, len);
    if (len)
        evbuffer_add(evhttp_request_get_output_buffer(x->up), evbuffer_pullup(body, -1), len);
    if (evhttp_make_request(x->conn->evcon, x->up, evhttp_request_get_command(x->down), x->uri) !=
        0) {
        x->up = NULL; /* freed by evhttp_make_request */
        exchange_fail(x, 502, "Bad Gateway", "server_error", "upstream_error",
                      "could not send the request to the replica", NULL);
    }
}

void rt_exchange_start(struct rt_worker *w, struct rt_client *c, struct evhttp_request *req,
                       const struct rt_service *s, char *uri)
{
    struct rt_exchange *x = calloc(1, sizeof(*x));
    if (!x) {
        free(uri);
        rt_reply(req, 500, "Internal Server Error", "text/plain", "out of memory\n");
        return;
    }
    x->w = w;
    x->c = c;
    x->down = req;
    x->table = rt_table_ref(w->table);
    x->s = s;
    x->st = s->stats;
    atomic_fetch_add(&x->st->refs, 1);
    x->uri = uri;
    x->t0 = rt_now_us();
    atomic_fetch_add(&x->st->requests, 1);
    c->x = x;
    exchange_send(x, NULL);
}

/*
 * exchange.c - one request through a replica: the choice of an endpoint,
 * the hold queue while none can take it, the keep-alive connections to
 * replicas, and the answer passed to the client piece by piece as it
 * arrives, with back-pressure from a slow client (router.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "router/router.h"
#include "base/banned.h"

#define IDLE_CONNS_MAX     256       /* idle connections a worker keeps per endpoint */
#define UPSTREAM_TIMEOUT_S 3600      /* a replica silent this long has failed */
#define STREAM_HIGH        (1 << 20) /* bytes waiting for a slow client before the replica waits */

/* Where a request goes after its replica failed before any byte of its
 * answer reached the client: a reused connection (the replica may have
 * closed it idle) is tried once afresh on the same endpoint, then once
 * another endpoint, then 502. */
struct retry {
    const struct rt_endpoint *avoid;
    struct rt_endpoint *fresh;
    struct rt_endpoint *ref; /* keeps the failed endpoint alive while avoided */
};

static void exchange_send(struct rt_exchange *x, struct retry *t);
static void conn_event(evutil_socket_t fd, short what, void *arg);

/* ---- connections to replicas ---- */

static void pool_unlink(struct rt_conn *k)
{
    struct rt_conn **head = &k->ep->pool[k->w->index];
    if (k->prev)
        k->prev->next = k->next;
    else
        *head = k->next;
    if (k->next)
        k->next->prev = k->prev;
    k->prev = k->next = NULL;
    k->ep->nidle[k->w->index]--;
}

static void conn_kill(struct rt_conn *k)
{
    if (k->dead)
        return;
    if (!k->x)
        pool_unlink(k); /* an idle one is in its pool */
    k->x = NULL;
    k->dead = true;
    event_del(k->ev);
    close(k->fd);
    k->fd = -1;
    k->next = k->w->dead_conns;
    k->w->dead_conns = k;
}

void rt_conn_free(struct rt_conn *k)
{
    if (k->ev)
        event_free(k->ev);
    rt_resr_release(&k->rs);
    rt_buf_release(&k->out);
    free(k);
}

/* The endpoint's address: an IP literal, else resolved (blocking, rare:
 * the controller gives addresses). */
static int endpoint_addr(const struct rt_endpoint *ep, struct sockaddr_storage *sa, socklen_t *len)
{
    struct sockaddr_in *v4 = (struct sockaddr_in *)sa;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)sa;
    memset(sa, 0, sizeof(*sa));
    if (inet_pton(AF_INET, ep->addr, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(ep->port);
        *len = sizeof(*v4);
        return 0;
    }
    if (inet_pton(AF_INET6, ep->addr, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(ep->port);
        *len = sizeof(*v6);
        return 0;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(ep->addr, NULL, &hints, &ai) != 0 || !ai)
        return GPO_EINVAL;
    memcpy(sa, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    if (sa->ss_family == AF_INET)
        v4->sin_port = htons(ep->port);
    else
        v6->sin6_port = htons(ep->port);
    return 0;
}

/* A new connection to ep, connected or connecting; NULL when it failed at
 * once (refused, out of memory). */
static struct rt_conn *conn_new(struct rt_worker *w, struct rt_endpoint *ep)
{
    struct sockaddr_storage sa;
    socklen_t sl = 0;
    if (endpoint_addr(ep, &sa, &sl))
        return NULL;
    struct rt_conn *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->w = w;
    k->ep = ep;
    k->fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (k->fd < 0) {
        free(k);
        return NULL;
    }
    int one = 1;
    (void)setsockopt(k->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(k->fd, (struct sockaddr *)&sa, sl) != 0) {
        if (errno != EINPROGRESS) {
            close(k->fd);
            free(k);
            return NULL;
        }
        k->connecting = true;
    }
    struct timeval tv = {UPSTREAM_TIMEOUT_S, 0};
    k->ev = event_new(w->base, k->fd, EV_READ | EV_WRITE | EV_ET | EV_PERSIST | EV_CLOSED,
                      conn_event, k);
    if (!k->ev || event_add(k->ev, &tv) != 0) {
        close(k->fd);
        rt_conn_free(k);
        return NULL;
    }
    return k;
}

/* A connection to ep: an idle one of this worker's (unless fresh), else a
 * new one. Busy connections are in no list: the exchange holds its own. */
static struct rt_conn *pool_get(struct rt_worker *w, struct rt_endpoint *ep, bool fresh)
{
    struct rt_conn *k = fresh ? NULL : ep->pool[w->index];
    if (k) {
        pool_unlink(k);
        k->reused = true;
        return k;
    }
    return conn_new(w, ep);
}

static void pool_put(struct rt_conn *k)
{
    struct rt_worker *w = k->w;
    struct rt_endpoint *ep = k->ep;
    if (atomic_load(&ep->gone) || ep->nidle[w->index] >= IDLE_CONNS_MAX) {
        conn_kill(k);
        return;
    }
    k->x = NULL;
    k->paused = false;
    k->prev = NULL;
    k->next = ep->pool[w->index];
    if (k->next)
        k->next->prev = k;
    ep->pool[w->index] = k;
    ep->nidle[w->index]++;
}

void rt_pool_sweep(struct rt_worker *w, const struct rt_table *old)
{
    for (size_t i = 0; old && i < old->nservices; i++)
        for (size_t k = 0; k < old->services[i].neps; k++) {
            struct rt_endpoint *ep = old->services[i].eps[k].ep;
            if (!atomic_load(&ep->gone))
                continue;
            while (ep->pool[w->index])
                conn_kill(ep->pool[w->index]);
        }
}

/* ---- the end of an exchange ---- */

static void unhold(struct rt_exchange *x)
{
    if (!x->held)
        return;
    struct rt_worker *w = x->c->w;
    TAILQ_REMOVE(&w->held, x, link);
    w->nheld--;
    x->held = false;
    event_free(x->timer);
    x->timer = NULL;
    rt_stats_load(x->st, &x->st->queued, -1);
}

/* Gives the endpoint back: its connection to the pool (reuse) or closed,
 * its count down. */
static void release_endpoint(struct rt_exchange *x, bool reuse)
{
    if (x->conn) {
        if (reuse)
            pool_put(x->conn);
        else
            conn_kill(x->conn);
        x->conn = NULL;
    }
    if (!x->ep)
        return;
    atomic_fetch_sub(&x->ep->inflight, 1);
    rt_stats_load(x->st, &x->st->inflight, -1);
    rt_endpoint_unref(x->ep);
    x->ep = NULL;
}

/* The exchange's counts and references; the client is answered apart. */
static void exchange_end(struct rt_exchange *x)
{
    struct rt_worker *w = x->c->w;
    bool waiting = atomic_load(&x->st->queued) > 0;
    unhold(x);
    release_endpoint(x, false);
    if (x->code) {
        if (x->code >= 100 && x->code < 100 + RT_CODES)
            atomic_fetch_add(&x->st->codes[x->code - 100], 1);
        rt_hist_add(&x->st->total, rt_now_us() - x->t0);
    }
    rt_stats_unref(x->st);
    rt_table_unref(x->table);
    x->st = NULL;
    x->table = NULL;
    x->s = NULL;
    /* A slot freed: requests held here, or by other workers, may go (each
     * worker walks its own list, from its loop). */
    if (waiting)
        for (size_t k = 0; k < w->r->nworkers; k++)
            rt_worker_wake(w->r->workers[k]);
}

/* Ends the exchange and answers the client with an error. */
static void exchange_fail(struct rt_exchange *x, int code, const char *reason, const char *type,
                          const char *code_name, const char *msg, bool retry_after)
{
    struct rt_client *c = x->c;
    x->code = code;
    exchange_end(x);
    rt_reply_error(c, code, reason, type, code_name, msg, retry_after ? "Retry-After: 1\r\n" : NULL,
                   false);
    rt_client_flush(c);
}

void rt_exchange_lost(struct rt_exchange *x)
{
    exchange_end(x); /* a connection in the middle of an answer is closed */
}

/* ---- the hold queue ---- */

static void held_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct rt_exchange *x = arg;
    struct rt_worker *w = x->c->w;
    unhold(x);
    exchange_fail(x, 503, "Service Unavailable", "server_error", "queue_timeout",
                  "no replica could take the request within the queue timeout", true);
    rt_worker_reap(w);
}

static void hold(struct rt_exchange *x)
{
    const struct rt_service *s = x->s;
    struct rt_worker *w = x->c->w;
    if (atomic_load(&x->st->queued) >= s->queue_limit) {
        exchange_fail(x, 503, "Service Unavailable", "server_error", "queue_full",
                      "no replica can take the request and the queue is full", true);
        return;
    }
    struct timeval tv = {.tv_sec = s->queue_timeout_ms / 1000,
                         .tv_usec = (s->queue_timeout_ms % 1000) * 1000};
    x->timer = evtimer_new(w->base, held_timeout, x);
    if (!x->timer || evtimer_add(x->timer, &tv) != 0) {
        if (x->timer)
            event_free(x->timer);
        x->timer = NULL;
        exchange_fail(x, 503, "Service Unavailable", "server_error", "queue_full", "out of memory",
                      true);
        return;
    }
    x->held = true;
    TAILQ_INSERT_TAIL(&w->held, x, link);
    w->nheld++;
    bool first = atomic_load(&x->st->queued) == 0;
    rt_stats_load(x->st, &x->st->queued, 1);
    if (first)
        rt_report_soon(w->r); /* a service at zero starts a replica now */
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
                          "the service is no longer routed", true);
        } else if (rt_pick(s, NULL, &w->seed)) {
            unhold(x);
            if (x->table != w->table) {
                rt_table_unref(x->table);
                x->table = rt_table_ref(w->table);
            }
            x->s = s;
            struct retry t = {0};
            exchange_send(x, &t);
        }
        x = next;
    }
}

/* ---- the upstream side ---- */

/* Plans the next try into *t; false when there is none (502 answered). */
static bool plan_retry(struct rt_exchange *x, struct retry *t)
{
    bool reused = x->conn && x->conn->reused;
    struct rt_endpoint *failed = x->ep;
    if (failed)
        atomic_fetch_add(&failed->refs, 1);
    release_endpoint(x, false);
    rt_endpoint_unref(t->ref);
    *t = (struct retry){.ref = failed};
    if (failed && reused && !x->fresh) {
        x->fresh = true;
        t->fresh = failed;
        return true;
    }
    if (x->retried || !failed) {
        exchange_fail(x, 502, "Bad Gateway", "server_error", "upstream_error",
                      "the replica failed before it answered", false);
        return false;
    }
    x->retried = true;
    t->avoid = failed;
    return true;
}

/* The replica's connection failed (closed, reset, bad framing, silent). */
static void conn_failed(struct rt_conn *k)
{
    struct rt_exchange *x = k->x;
    if (!x) {
        conn_kill(k);
        return;
    }
    if (x->started) {
        rt_client_kill(x->c); /* a stream cut short must not look complete */
        return;
    }
    struct retry t = {0};
    if (plan_retry(x, &t))
        exchange_send(x, &t);
    else
        rt_endpoint_unref(t.ref);
}

/* The answer is whole in the client's buffer. */
static void answered(struct rt_exchange *x, bool reuse)
{
    struct rt_client *c = x->c;
    struct rt_conn *k = x->conn;
    bool close = k->rs.close_out;
    /* an answer before the whole request went (a replica may refuse early)
     * leaves the connection in the middle of a request: not reused */
    release_endpoint(x, reuse && !k->connecting && k->out.len == 0);
    exchange_end(x);
    rt_client_done(c, close);
    rt_client_flush(c);
}

static bool conn_flush(struct rt_conn *k)
{
    while (k->out_off < k->out.len) {
        ssize_t n = send(k->fd, k->out.data + k->out_off, k->out.len - k->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            k->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            k->wr_blocked = true;
            return true;
        }
        return false; /* the caller fails the connection */
    }
    k->wr_blocked = false;
    k->out.len = k->out_off = 0;
    return true;
}

/* Reads the replica's answer until the socket is drained, the answer ends,
 * or the client falls STREAM_HIGH behind. */
static void conn_read(struct rt_conn *k, bool rdhup)
{
    struct rt_worker *w = k->w;
    struct rt_exchange *x = k->x;
    while (!k->paused && k->rd_more) {
        ssize_t n = recv(k->fd, w->rbuf, sizeof(w->rbuf), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            k->rd_more = false;
            break;
        }
        if (!x) { /* an idle connection that closes, or speaks out of turn */
            conn_kill(k);
            return;
        }
        size_t fed = 0;
        if (n > 0) {
            if ((size_t)n < sizeof(w->rbuf) && !rdhup)
                k->rd_more = false;
            fed = rt_resr_feed(&k->rs, w->rbuf, (size_t)n);
        } else if (n == 0) {
            rt_resr_eof(&k->rs);
        } else {
            conn_failed(k);
            return;
        }
        if (k->rs.stage == RT_FAULT) {
            conn_failed(k);
            return;
        }
        if (!x->started && k->rs.stage != RT_HEAD) {
            x->started = true;
            x->code = k->rs.status;
            rt_hist_add(&x->st->ttfb, rt_now_us() - x->t0);
        }
        if (k->rs.stage == RT_DONE) {
            answered(x, n > 0 && fed == (size_t)n && k->rs.keep_alive);
            return;
        }
        if (n == 0) { /* not reached: the close ends or breaks the answer */
            conn_failed(k);
            return;
        }
        if (x->c->out.len - x->c->out_off > STREAM_HIGH) {
            k->paused = true; /* rd_more kept: read again when the client caught up */
            break;
        }
    }
    if (x && !x->c->dead && !x->c->wr_blocked)
        rt_client_flush(x->c);
}

void rt_exchange_resume(struct rt_exchange *x)
{
    struct rt_conn *k = x->conn;
    if (k && k->paused) {
        k->paused = false;
        event_active(k->ev, EV_READ, 0); /* after this callback */
    }
}

static void conn_event(evutil_socket_t fd, short what, void *arg)
{
    struct rt_conn *k = arg;
    struct rt_worker *w = k->w;
    if (what & EV_TIMEOUT) {
        conn_failed(k);
        rt_worker_reap(w);
        return;
    }
    if (k->connecting && (what & (EV_READ | EV_WRITE))) {
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err) {
            conn_failed(k);
            rt_worker_reap(w);
            return;
        }
        k->connecting = false;
        if (!conn_flush(k)) {
            conn_failed(k);
            rt_worker_reap(w);
            return;
        }
    } else if ((what & EV_WRITE) && k->wr_blocked && !conn_flush(k)) {
        conn_failed(k);
        rt_worker_reap(w);
        return;
    }
    if (what & (EV_READ | EV_CLOSED)) {
        k->rd_more = true;
        conn_read(k, (what & EV_CLOSED) != 0);
    }
    rt_worker_reap(w);
}

/* Sends x to ep (on a new connection when fresh); false when that failed
 * at once (x keeps ep and its connection for plan_retry). */
static bool send_to(struct rt_exchange *x, struct rt_endpoint *ep, bool fresh)
{
    struct rt_client *c = x->c;
    struct rt_worker *w = c->w;
    atomic_fetch_add(&ep->refs, 1);
    x->ep = ep;
    atomic_fetch_add(&ep->inflight, 1);
    atomic_fetch_add(&ep->requests, 1);
    rt_stats_load(x->st, &x->st->inflight, 1);
    struct rt_conn *k = pool_get(w, ep, fresh);
    if (!k)
        return false;
    k->x = x;
    x->conn = k;
    rt_resr_start(&k->rs, &c->out, (size_t)w->r->a.max_header, c->rq.method == HTTP_HEAD,
                  c->rq.http11, !c->rq.keep_alive);
    k->out.len = k->out_off = 0;
    char host[PROTO_HOST_MAX + 8];
    snprintf(host, sizeof(host), "%s:%u", ep->addr, ep->port);
    if (rt_req_forward(&c->rq, c->uri.data, c->peer, host, &k->out))
        return false;
    return k->connecting || conn_flush(k);
}

/* Sends x where t says (t->fresh on a new connection, else a pick other
 * than t->avoid: none is a 502), held while none can take it; failures at
 * once are retried as plan_retry says. Takes t->ref. */
static void exchange_send(struct rt_exchange *x, struct retry *t)
{
    for (;;) {
        struct rt_endpoint *ep = t->fresh ? t->fresh : rt_pick(x->s, t->avoid, &x->c->w->seed);
        if (!ep && t->avoid) {
            exchange_fail(x, 502, "Bad Gateway", "server_error", "upstream_error",
                          "the replica failed before it answered, and no other can take it", false);
            break;
        }
        if (!ep) {
            hold(x);
            break;
        }
        if (send_to(x, ep, t->fresh != NULL) || !plan_retry(x, t))
            break;
    }
    rt_endpoint_unref(t->ref);
    t->ref = NULL;
}

void rt_exchange_start(struct rt_client *c, const struct rt_service *s)
{
    struct rt_exchange *x = &c->x;
    *x = (struct rt_exchange){
        .c = c,
        .table = rt_table_ref(c->w->table),
        .s = s,
        .st = s->stats,
        .t0 = rt_now_us(),
    };
    atomic_fetch_add(&x->st->refs, 1);
    atomic_fetch_add(&x->st->requests, 1);
    struct retry t = {0};
    exchange_send(x, &t);
}

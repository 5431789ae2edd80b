/*
 * replica_probe.c - the prober thread (replica.h): every replica's probe
 * and /metrics read as non-blocking HTTP/1.0 GETs to 127.0.0.1, in one
 * poll(2) loop with an eventfd that wakes it for a new replica, an ended
 * one, or the stop.
 *
 * Why sockets by hand rather than libcurl's multi interface: a GET to a
 * loopback port whose answer ends when the replica closes it (HTTP/1.0: no
 * chunks, no keep-alive, no TLS, no name to resolve) is a connect, a send
 * and reads to the end; the loop then needs no handle per request and no
 * timer callbacks, and a probe every REPLICA_FAST_MS costs a refused
 * connect until the replica listens. The calls never block, so the loop
 * runs them under the table's lock.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agent/replica_int.h"
#include "util/monotime.h"
#include "base/banned.h"

#define PROBE_BODY_MAX 65536 /* a probe's answer: its status is what counts */

static int64_t real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void replica_conn_close(struct replica_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->buf);
    *c = (struct replica_conn){.fd = -1};
}

/* Opens a GET of path on 127.0.0.1:port: 0 (in flight) or -errno (failed
 * at once: nothing listens yet, say). */
static int conn_start(struct replica_conn *c, uint32_t port, const char *path, int64_t now,
                      int64_t timeout_ms, size_t max)
{
    replica_conn_close(c);
    /* A space (or a byte outside printable ASCII) would end the request's
     * target: it goes %-encoded, as a client sends it. */
    char target[3 * PROTO_SERVE_PATH_MAX + 1];
    size_t t = 0;
    for (const unsigned char *p = (const unsigned char *)path; *p && t + 4 < sizeof(target); p++) {
        if (*p > ' ' && *p < 0x7f)
            target[t++] = (char)*p;
        else
            t += (size_t)snprintf(target + t, sizeof(target) - t, "%%%02X", *p);
    }
    target[t] = '\0';
    int n = snprintf(c->req, sizeof(c->req),
                     "GET %s HTTP/1.0\r\nHost: 127.0.0.1:%" PRIu32
                     "\r\nUser-Agent: gpuorch-agent\r\nAccept: */*\r\n\r\n",
                     target, port);
    if (n < 0 || (size_t)n >= sizeof(c->req))
        return -ENAMETOOLONG;
    c->reqlen = (size_t)n;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return -errno;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        c->phase = REPLICA_CONN_WRITING;
    } else if (errno == EINPROGRESS) {
        c->phase = REPLICA_CONN_CONNECTING;
    } else {
        int rc = -errno;
        replica_conn_close(c);
        return rc;
    }
    c->deadline_ms = now + timeout_ms;
    c->max = max;
    return 0;
}

enum io {
    IO_BUSY,
    IO_DONE,   /* the replica closed the answer: c->buf holds it */
    IO_FULL,   /* the answer is longer than c->max: c->buf holds its start */
    IO_FAILED, /* refused, reset, or out of memory */
};

/* Moves a GET on after poll said revents. */
static enum io conn_io(struct replica_conn *c, short revents)
{
    if (c->phase == REPLICA_CONN_CONNECTING) {
        int e = 0;
        socklen_t elen = sizeof(e);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &elen) != 0 || e != 0)
            return IO_FAILED;
        if (!(revents & POLLOUT))
            return (revents & (POLLERR | POLLHUP)) ? IO_FAILED : IO_BUSY;
        c->phase = REPLICA_CONN_WRITING;
    }
    if (c->phase == REPLICA_CONN_WRITING) {
        ssize_t k = send(c->fd, c->req + c->sent, c->reqlen - c->sent, MSG_NOSIGNAL);
        if (k < 0)
            return errno == EAGAIN || errno == EINTR ? IO_BUSY : IO_FAILED;
        c->sent += (size_t)k;
        if (c->sent < c->reqlen)
            return IO_BUSY;
        c->phase = REPLICA_CONN_READING;
        return IO_BUSY;
    }
    for (;;) {
        if (c->cap - c->len < 4096 + 1) {
            size_t cap = c->cap ? 2 * c->cap : 8192;
            if (cap > c->max + 4096 + 1)
                cap = c->max + 4096 + 1;
            if (cap <= c->cap) {
                c->buf[c->len] = '\0';
                return IO_FULL;
            }
            char *b = realloc(c->buf, cap);
            if (!b)
                return IO_FAILED;
            c->buf = b;
            c->cap = cap;
        }
        ssize_t k = recv(c->fd, c->buf + c->len, c->cap - c->len - 1, 0);
        if (k == 0) {
            c->buf[c->len] = '\0';
            return IO_DONE;
        }
        if (k < 0)
            return errno == EAGAIN || errno == EINTR ? IO_BUSY : IO_FAILED;
        c->len += (size_t)k;
    }
}

/* The answer's status, or 0 when it has none. */
static int conn_status(const struct replica_conn *c)
{
    int status = c->buf ? replica_http_status(c->buf, c->len) : 0;
    return status > 0 ? status : 0;
}

/* ---- one replica's round -------------------------------------------------- */

static void on_event(struct replica *r, struct replica_rep *a, enum replica_event ev, int64_t now)
{
    if (ev == REPLICA_SAME)
        return;
    if (ev == REPLICA_READY) {
        a->ep.ready = true;
        if (a->ep.ready_ms == PROTO_NONE)
            a->ep.ready_ms = real_ms();
        a->metric_next_ms = now;
    } else {
        a->ep.ready = false;
    }
    if (ev == REPLICA_EXPIRED)
        replica_conn_close(&a->pc);
    char line[128] = "ready";
    if (ev == REPLICA_UNREADY)
        snprintf(line, sizeof(line), "not ready: its probe failed %" PRIu32 " time(s) in a row",
                 a->probe.failures);
    else if (ev == REPLICA_EXPIRED)
        snprintf(line, sizeof(line), "not ready within its startup timeout (%" PRId64 " s)",
                 a->startup_timeout_s);
    r->cfg.log("job %" PRIu64 ".%" PRIu32 ": replica %" PRIu32 " of %s on port %" PRIu32 ": %s",
               a->job, a->attempt, a->replica, a->service, a->port, line);
    if (r->cfg.wake)
        r->cfg.wake(r->cfg.arg);
}

/* The metric from a /metrics answer. */
static void read_metric(struct replica *r, struct replica_rep *a)
{
    int status = conn_status(&a->mc);
    const char *body = a->mc.buf ? strstr(a->mc.buf, "\r\n\r\n") : NULL;
    double v = 0;
    int64_t milli = PROTO_NONE;
    if (status >= 200 && status < 300 && body &&
        replica_metric_sum(body + 4, a->mc.len - (size_t)(body + 4 - a->mc.buf), a->metric, &v) ==
            0)
        milli = (int64_t)llround(v * 1000);
    if (milli == a->ep.metric_milli)
        return;
    a->ep.metric_milli = milli;
    if (r->cfg.wake)
        r->cfg.wake(r->cfg.arg);
}

/* A failed probe, and why (for the not-ready report's reason). */
static void probe_failed(struct replica *r, struct replica_rep *a, int64_t now, const char *fmt,
                         ...) __attribute__((format(printf, 4, 5)));
static void probe_failed(struct replica *r, struct replica_rep *a, int64_t now, const char *fmt,
                         ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->last_failure, sizeof(a->last_failure), fmt, ap);
    va_end(ap);
    on_event(r, a, replica_probe_result(&a->probe, false, now), now);
}

/* Starts what is due, times out what is late; lowers *timeout to the next
 * thing due. */
static void rep_step(struct replica *r, struct replica_rep *a, int64_t now, int64_t *timeout)
{
    on_event(r, a, replica_probe_check(&a->probe, now), now);
    if (a->pc.fd >= 0 && now >= a->pc.deadline_ms) {
        replica_conn_close(&a->pc);
        probe_failed(r, a, now, "no answer within %" PRId64 " ms", a->probe_timeout_ms);
    }
    if (a->mc.fd >= 0 && now >= a->mc.deadline_ms) {
        replica_conn_close(&a->mc);
        a->metric_next_ms = now + REPLICA_METRIC_MS;
    }
    int rc =
        !a->probe.expired && a->pc.fd < 0 && now >= a->probe.next_ms
            ? conn_start(&a->pc, a->port, a->probe_path, now, a->probe_timeout_ms, PROBE_BODY_MAX)
            : 0;
    if (rc)
        probe_failed(r, a, now, "%s", strerror(-rc));
    if (a->metric && a->ep.ready && a->mc.fd < 0 && now >= a->metric_next_ms &&
        conn_start(&a->mc, a->port, "/metrics", now, a->probe_timeout_ms, REPLICA_BODY_MAX) != 0)
        a->metric_next_ms = now + REPLICA_METRIC_MS;
    int64_t due[3] = {INT64_MAX, INT64_MAX, INT64_MAX};
    if (a->pc.fd >= 0)
        due[0] = a->pc.deadline_ms;
    else if (!a->probe.expired)
        due[0] = a->probe.next_ms;
    if (a->mc.fd >= 0)
        due[1] = a->mc.deadline_ms;
    else if (a->metric && a->ep.ready)
        due[1] = a->metric_next_ms;
    if (!a->probe.ever_ready && !a->probe.expired)
        due[2] = a->probe.deadline_ms;
    for (size_t k = 0; k < 3; k++) {
        if (due[k] - now < *timeout)
            *timeout = due[k] - now < 0 ? 0 : due[k] - now;
    }
}

/* After poll: moves a GET on; a finished one gives its result. */
static void rep_io(struct replica *r, struct replica_rep *a, struct replica_conn *c, short revents,
                   int64_t now)
{
    enum io io = conn_io(c, revents);
    if (io == IO_BUSY)
        return;
    if (c == &a->pc) { /* its status is what counts, however long the answer */
        int status = io == IO_DONE || io == IO_FULL ? conn_status(c) : 0;
        replica_conn_close(c);
        if (status >= 200 && status < 300)
            on_event(r, a, replica_probe_result(&a->probe, true, now), now);
        else if (status)
            probe_failed(r, a, now, "HTTP %d", status);
        else
            probe_failed(r, a, now, io == IO_FAILED ? "the connection failed" : "no HTTP answer");
        return;
    }
    if (io == IO_DONE)
        read_metric(r, a);
    replica_conn_close(c);
    a->metric_next_ms = now + REPLICA_METRIC_MS;
}

static short conn_events(const struct replica_conn *c)
{
    return c->phase == REPLICA_CONN_READING ? POLLIN : POLLOUT;
}

/* ---- the thread --------------------------------------------------------------- */

struct polled {
    struct pollfd *fds;
    struct replica_rep **rep;
    struct replica_conn **conn;
    size_t cap;
};

/* Room for n descriptors: false when out of memory. */
static bool polled_fit(struct polled *p, size_t n)
{
    if (n <= p->cap)
        return true;
    size_t cap = n + 16;
    struct pollfd *fds = realloc(p->fds, cap * sizeof(*fds));
    if (!fds)
        return false;
    p->fds = fds;
    // NOLINTNEXTLINE(bugprone-sizeof-expression): *rep is a pointer (an array of them)
    struct replica_rep **rep = realloc(p->rep, cap * sizeof(*rep));
    if (!rep)
        return false;
    p->rep = rep;
    // NOLINTNEXTLINE(bugprone-sizeof-expression): *conn is a pointer (an array of them)
    struct replica_conn **conn = realloc(p->conn, cap * sizeof(*conn));
    if (!conn)
        return false;
    p->conn = conn;
    p->cap = cap;
    return true;
}

/* Drops ended replicas; steps the others and lists their sockets. Under
 * the lock. Returns how many descriptors p lists (the eventfd first). */
static size_t round_start(struct replica *r, struct polled *p, int64_t now, int64_t *timeout)
{
    for (size_t i = 0; i < r->n;) {
        if (r->v[i]->gone) {
            replica_rep_free(r->v[i]);
            r->v[i] = r->v[--r->n];
        } else {
            i++;
        }
    }
    if (!polled_fit(p, 1 + 2 * r->n)) {
        *timeout = 100;
        return 0;
    }
    size_t n = 0;
    p->fds[n++] = (struct pollfd){.fd = r->wake_fd, .events = POLLIN};
    for (size_t k = 0; k < r->n; k++) {
        struct replica_rep *a = r->v[k];
        rep_step(r, a, now, timeout);
        struct replica_conn *cs[] = {&a->pc, &a->mc};
        for (size_t c = 0; c < 2; c++) {
            if (cs[c]->fd < 0)
                continue;
            p->fds[n] = (struct pollfd){.fd = cs[c]->fd, .events = conn_events(cs[c])};
            p->rep[n] = a;
            p->conn[n++] = cs[c];
        }
    }
    return n;
}

static void *prober_main(void *arg)
{
    struct replica *r = arg;
    struct polled p = {0};
    pthread_mutex_lock(&r->lock);
    while (!r->stop) {
        int64_t timeout = 1000;
        size_t n = round_start(r, &p, monotime_ms(), &timeout);
        pthread_mutex_unlock(&r->lock);
        int k = n ? poll(p.fds, n, (int)timeout) : poll(NULL, 0, (int)timeout);
        pthread_mutex_lock(&r->lock);
        if (k <= 0 || n == 0)
            continue;
        uint64_t v;
        if (p.fds[0].revents & POLLIN && read(r->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
            r->cfg.log("replica probes: reading the wake-up: %s", strerror(errno));
        int64_t now = monotime_ms();
        /* Only this thread frees a replica or closes its sockets. */
        for (size_t i = 1; i < n; i++) {
            if (p.fds[i].revents && !p.rep[i]->gone && p.conn[i]->fd == p.fds[i].fd)
                rep_io(r, p.rep[i], p.conn[i], p.fds[i].revents, now);
        }
    }
    pthread_mutex_unlock(&r->lock);
    free(p.fds);
    free(p.rep);
    free(p.conn);
    return NULL;
}

int replica_thread_start(struct replica *r)
{
    if (r->started)
        return 0;
    if (r->wake_fd < 0 && (r->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
        return -errno;
    int rc = pthread_create(&r->thread, NULL, prober_main, r);
    if (rc)
        return -rc;
    r->started = true;
    return 0;
}

void replica_thread_wake(struct replica *r)
{
    uint64_t one = 1;
    if (r->wake_fd >= 0 && write(r->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        r->cfg.log("replica probes: waking the prober: %s", strerror(errno));
}

void replica_thread_stop(struct replica *r)
{
    pthread_mutex_lock(&r->lock);
    bool started = r->started;
    r->stop = true;
    pthread_mutex_unlock(&r->lock);
    replica_thread_wake(r);
    if (started)
        pthread_join(r->thread, NULL);
    if (r->wake_fd >= 0)
        close(r->wake_fd);
    r->wake_fd = -1;
}

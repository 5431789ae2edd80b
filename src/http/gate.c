/*
 * gate.c - the accept gate: a thread that accepts plain-HTTP connections,
 * peeks at each one's first bytes until its first request's head is in,
 * judges their framing (framing.h) and either hands the connection, its
 * bytes still unread, to libmicrohttpd (MHD_add_connection) or answers the
 * one refusal itself and closes.
 *
 * Why it exists: libmicrohttpd 0.9.75 answers a Content-Length it cannot
 * read (abc, -1, +5, 2^70) itself, and sends that answer's head twice
 * (connection.c, MHD_connection_handle_idle: the HEADERS_RECEIVED case
 * overwrites the state transmit_error_response set, so START_REPLY builds
 * the head again); no callback of ours runs in between. What the gate passes
 * MHD never takes that path. Later requests on a kept-alive connection and
 * TLS connections (ciphertext cannot be peeked) are read by MHD alone; the
 * access handler checks their fields again (http.c).
 *
 * The gate waits for new data with edge-triggered epoll, since peeking
 * leaves the bytes readable. A refusal is sent, the write side shut, and
 * what the client still sends drained until it closes or HTTP_GATE_LINGER_MS
 * pass, so that the client reads the answer rather than a reset.
 */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "http/framing.h"
#include "http/http.h"
#include "http/internal.h"
#include "base/banned.h"

#define HTTP_GATE_LINGER_MS 2000
#define GATE_EVENTS         64
#define ACCEPT_PAUSE_MS     100 /* out of descriptors: accept again after this */

struct pend {
    int fd;
    bool lingering; /* refused: draining until the client closes */
    bool eof;       /* the client shut its write side */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char client[INET6_ADDRSTRLEN];
    int64_t start_us, deadline_us;
    unsigned slot; /* its index in gate->pends */
};

struct http_gate {
    struct http_server *srv;
    int lfd, ep, efd;
    pthread_t thread;
    struct pend **pends; /* conn_limit slots, the first npend in use */
    unsigned npend;
    int64_t accept_paused_until; /* 0: accepting */
    char buf[HTTP_HEAD_MAX];     /* the gate thread's peek buffer */
};

/* Takes p out of g->pends (the last one moves into its slot) and frees it. */
static void pend_free(struct http_gate *g, struct pend *p)
{
    struct pend *last = g->pends[--g->npend];
    g->pends[p->slot] = last;
    last->slot = p->slot;
    free(p);
}

static void pend_close(struct http_gate *g, struct pend *p)
{
    /* Explicitly out of the epoll set: a copy of the descriptor in a forked
     * child would keep it there, with p freed. */
    (void)epoll_ctl(g->ep, EPOLL_CTL_DEL, p->fd, NULL);
    close(p->fd);
    pend_free(g, p);
}

static void pend_handover(struct http_gate *g, struct pend *p)
{
    (void)epoll_ctl(g->ep, EPOLL_CTL_DEL, p->fd, NULL);
    int fd = p->fd;
    struct sockaddr_storage addr = p->addr;
    socklen_t addrlen = p->addrlen;
    pend_free(g, p);
    /* MHD owns fd from here and closes it when it cannot take it. */
    (void)MHD_add_connection(g->srv->daemon, fd, (const struct sockaddr *)&addr, addrlen);
}

static const char *reason(unsigned status)
{
    switch (status) {
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 431:
        return "Request Header Fields Too Large";
    case 501:
        return "Not Implemented";
    default:
        return "Bad Request";
    }
}

static void drain(struct pend *p)
{
    char junk[4096];
    ssize_t n = 0;
    /* At most 256 KiB a turn: a client streaming fast does not hold the gate
     * (edge-triggered: the rest wakes it again, or the linger ends). */
    for (unsigned k = 0; k < 64 && (n = recv(p->fd, junk, sizeof(junk), 0)) > 0; k++)
        ;
    if (n > 0)
        return;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        p->eof = true;
}

/* Sends the one answer (the standard error body, Connection: close), shuts
 * the write side and starts lingering. */
static void pend_refuse(struct http_gate *g, struct pend *p, const struct http_scan_refusal *r)
{
    char body[256], msg[1024];
    const char *code = r->status == 400   ? "invalid_framing"
                       : r->status == 413 ? "body_too_large"
                       : r->status == 501 ? "not_implemented"
                                          : "head_too_large";
    int blen = snprintf(body, sizeof(body),
                        "{\"error\":{\"status\":%u,\"code\":\"%s\",\"message\":\"%s\"}}", r->status,
                        code, r->message);
    int n = snprintf(msg, sizeof(msg),
                     "HTTP/1.1 %u %s\r\nConnection: close\r\nContent-Type: application/json\r\n"
                     "Content-Length: %d\r\n\r\n%s",
                     r->status, reason(r->status), blen, body);
    /* A few hundred bytes into an empty send buffer: one call sends them. */
    (void)send(p->fd, msg, (size_t)n, MSG_NOSIGNAL);
    (void)shutdown(p->fd, SHUT_WR);
    p->lingering = true;
    p->deadline_us = http_mono_us() + (int64_t)HTTP_GATE_LINGER_MS * 1000;
    const struct http_server *srv = g->srv;
    if (srv->cfg.access_log) {
        struct http_access a = {.method = r->method,
                                .path = r->path,
                                .client = p->client,
                                .status = r->status,
                                .duration_us = http_mono_us() - p->start_us};
        srv->cfg.access_log(&a, srv->cfg.ctx);
    }
    drain(p);
    if (p->eof)
        pend_close(g, p);
}

static void pend_inspect(struct http_gate *g, struct pend *p)
{
    if (p->lingering) {
        drain(p);
        if (p->eof)
            pend_close(g, p);
        return;
    }
    ssize_t n = recv(p->fd, g->buf, sizeof(g->buf), MSG_PEEK);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        pend_close(g, p);
        return;
    }
    struct http_scan_refusal r;
    switch (http_framing_scan(g->buf, (size_t)n, p->eof, &r)) {
    case HTTP_SCAN_MORE:
        return;
    case HTTP_SCAN_PASS:
        pend_handover(g, p);
        return;
    case HTTP_SCAN_REFUSE:
        pend_refuse(g, p, &r);
        return;
    }
}

static void accept_all(struct http_gate *g)
{
    for (;;) {
        struct sockaddr_storage addr;
        socklen_t alen = sizeof(addr);
        int fd = accept4(g->lfd, (struct sockaddr *)&addr, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
            /* the listen socket stays readable: stop watching it a while, not spin */
            struct epoll_event off = {.events = 0, .data.ptr = &g->lfd};
            (void)epoll_ctl(g->ep, EPOLL_CTL_MOD, g->lfd, &off);
            g->accept_paused_until = http_mono_us() + (int64_t)ACCEPT_PAUSE_MS * 1000;
        }
        if (fd < 0)
            return; /* EAGAIN, or an error of that one connection */
        struct pend *p = g->npend < g->srv->cfg.conn_limit ? calloc(1, sizeof(*p)) : NULL;
        if (!p) {
            close(fd);
            continue;
        }
        p->fd = fd;
        p->addr = addr;
        p->addrlen = alen;
        p->start_us = http_mono_us();
        p->deadline_us = p->start_us + (int64_t)g->srv->cfg.conn_timeout_s * 1000000;
        http_addr_text((const struct sockaddr *)&p->addr, p->client, sizeof(p->client));
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = p};
        if (epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            free(p);
            continue;
        }
        p->slot = g->npend;
        g->pends[g->npend++] = p;
        pend_inspect(g, p); /* its head may be there already */
    }
}

/* Closes the connections whose time is up; returns the ms to the next. */
static int expire(struct http_gate *g)
{
    int64_t now = http_mono_us(), next = g->accept_paused_until ? g->accept_paused_until : -1;
    if (g->accept_paused_until && g->accept_paused_until <= now) {
        struct epoll_event on = {.events = EPOLLIN, .data.ptr = &g->lfd};
        (void)epoll_ctl(g->ep, EPOLL_CTL_MOD, g->lfd, &on);
        g->accept_paused_until = 0;
        next = -1;
    }
    for (unsigned i = 0; i < g->npend;) {
        struct pend *p = g->pends[i];
        if (p->deadline_us <= now) {
            pend_close(g, p); /* the last one moves into slot i */
            continue;
        }
        if (next < 0 || p->deadline_us < next)
            next = p->deadline_us;
        i++;
    }
    if (next < 0)
        return -1;
    int64_t ms = (next - now) / 1000 + 1;
    return ms > 60000 ? 60000 : (int)ms; /* wakes up to look again: no overflow */
}

static void *gate_main(void *arg)
{
    struct http_gate *g = arg;
    struct epoll_event evs[GATE_EVENTS];
    for (;;) {
        int n = epoll_wait(g->ep, evs, GATE_EVENTS, expire(g));
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &g->efd)
                return NULL;
            if (evs[i].data.ptr == &g->lfd) {
                accept_all(g);
                continue;
            }
            struct pend *p = evs[i].data.ptr;
            if (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                p->eof = true;
            pend_inspect(g, p);
        }
    }
}

static void gate_free(struct http_gate *g)
{
    while (g->npend > 0)
        pend_close(g, g->pends[g->npend - 1]);
    free(g->pends);
    if (g->ep >= 0)
        close(g->ep);
    if (g->efd >= 0)
        close(g->efd);
    if (g->lfd >= 0)
        close(g->lfd);
    free(g);
}

int http_gate_start(struct http_server *srv, int listen_fd, struct http_gate **ret)
{
    struct http_gate *g = calloc(1, sizeof(*g));
    if (!g) {
        close(listen_fd);
        return GPO_ENOMEM;
    }
    g->srv = srv;
    g->lfd = listen_fd;
    // NOLINTNEXTLINE(bugprone-sizeof-expression): *g->pends is a pointer (an array of them)
    g->pends = calloc(srv->cfg.conn_limit, sizeof(*g->pends));
    g->ep = epoll_create1(EPOLL_CLOEXEC);
    g->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event le = {.events = EPOLLIN, .data.ptr = &g->lfd};
    struct epoll_event ee = {.events = EPOLLIN, .data.ptr = &g->efd};
    int rc = g->ep < 0 || g->efd < 0 ? -errno : g->pends ? 0 : GPO_ENOMEM;
    if (rc == 0 && (epoll_ctl(g->ep, EPOLL_CTL_ADD, g->lfd, &le) != 0 ||
                    epoll_ctl(g->ep, EPOLL_CTL_ADD, g->efd, &ee) != 0))
        rc = -errno;
    if (rc == 0)
        rc = -pthread_create(&g->thread, NULL, gate_main, g);
    if (rc != 0) {
        gate_free(g);
        return rc;
    }
    *ret = g;
    return 0;
}

void http_gate_stop(struct http_gate *g)
{
    if (!g)
        return;
    uint64_t one = 1;
    if (write(g->efd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        abort(); /* an eventfd below its maximum always takes a write */
    pthread_join(g->thread, NULL);
    gate_free(g);
}

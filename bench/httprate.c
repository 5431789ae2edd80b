/*
 * httprate.c - HTTP/1.1 load at a fixed rate (open loop) or as fast as the
 * server answers (closed loop), with latency percentiles. bench/loadgen.md
 * ("httprate") says how to run it; bench/router.sh uses it.
 *
 * Open loop (--rate R): request i is due at start + i/R whatever happened to
 * the ones before it. A due request goes out on an idle keep-alive connection;
 * when every connection is busy it waits for one, and its latency still runs
 * from the moment it was due, so a stall shows in the percentiles instead of
 * slowing the sender (no coordinated omission). Closed loop (--rate 0): every
 * connection sends its next request as soon as the last answer is in.
 *
 * One thread, non-blocking sockets in epoll and a timerfd for the schedule:
 * a thread per connection would cost a wake-up per response on the cores the
 * server under test shares. Responses are framed by Content-Length, chunked
 * encoding or the close; bodies are counted, not kept. Every latency is kept;
 * percentiles are nearest-rank over the requests after --warmup.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <fcntl.h>

#include "base/banned.h"

#define HR_CONN_MAX     4096
#define HR_REQUESTS_MAX 20000000L
#define HR_RBUF         65536 /* also the longest response head */
#define HR_REQ_MAX      8192
#define HR_TIMER_TAG    UINT64_MAX

struct hr_opts {
    const char *url, *method, *body, *host;
    const char *headers[16];
    int nheaders;
    long rate, connections, warmup_s, expect;
    double duration_s;
    bool json;
};

enum hr_phase { HR_IDLE, HR_HEAD, HR_LEN, HR_CSIZE, HR_CDATA, HR_CCRLF, HR_TRAILER, HR_TOCLOSE };

struct hr_conn {
    int fd;
    enum hr_phase phase;
    bool close_after;
    int status;
    uint64_t due;    /* when the request in flight was due (open) or sent (closed) */
    uint64_t remain; /* body or chunk bytes left */
    size_t len, sent;
    char buf[HR_RBUF];
};

struct hr_run {
    const struct hr_opts *opt;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char req[HR_REQ_MAX];
    size_t reqlen;
    int ep, tfd;
    struct hr_conn *conns;
    long *idle; /* a stack of idle connection indices */
    long nidle;
    uint64_t t0, t_warm, t_end, period_ns;
    uint64_t next;         /* index of the next request to send (open loop) */
    uint64_t starved_upto; /* requests below it were due with no free connection */
    uint64_t t_last;       /* the last answer */
    uint64_t done, errors, reconnects, unexpected, late, warm_done;
    uint64_t *lat;
    size_t nlat, caplat;
    uint64_t status[600];
    char err[200];
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("httprate: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see httprate --help)\n", stderr);
    return -EINVAL;
}

static int parse_long(const char *flag, const char *s, long min, long max, long *ret)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return usage_error("%s: expected an integer in %ld..%ld, got '%s'", flag, min, max, s);
    *ret = v;
    return 0;
}

static bool text_is_clean(const char *s, bool spaces)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f || (!spaces && *s == ' '))
            return false;
    return true;
}

/* ---- target: http://127.x.x.x:PORT/PATH, loopback only ---- */

static int target_resolve(struct hr_run *run, char *path, size_t pathlen, char *hostport,
                          size_t hplen)
{
    const char *url = run->opt->url;
    if (strncmp(url, "http://", 7) != 0)
        return usage_error("--url: only http:// URLs are supported, got '%s'", url);
    const char *p = url + 7, *slash = p + strcspn(p, "/");
    char host[96], port[8] = "80";
    if ((size_t)(slash - p) >= hplen || slash == p)
        return usage_error("--url: no host, or one too long, in '%s'", url);
    snprintf(hostport, hplen, "%.*s", (int)(slash - p), p);
    snprintf(host, sizeof(host), "%s", hostport);
    char *close_br = host[0] == '[' ? strchr(host, ']') : NULL;
    char *colon = strrchr(close_br ? close_br : host, ':');
    if (colon) {
        *colon = '\0';
        snprintf(port, sizeof(port), "%s", colon + 1);
        long v;
        if (parse_long("--url port", port, 1, 65535, &v) < 0)
            return -EINVAL;
    }
    if (close_br) {
        *close_br = '\0';
        memmove(host, host + 1, strlen(host));
    }
    snprintf(path, pathlen, "%s", *slash ? slash : "/");
    if (!text_is_clean(path, false))
        return usage_error("--url: the path has spaces or control bytes");
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
    hints.ai_flags = AI_NUMERICSERV | (strcmp(host, "localhost") ? AI_NUMERICHOST : 0);
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0)
        return usage_error("--url: '%s' is not a loopback address or localhost (%s)", host,
                           gai_strerror(rc));
    const struct sockaddr *sa = res->ai_addr;
    bool loop =
        sa->sa_family == AF_INET
            ? ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr) >> 24 == 127
            : IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr);
    if (loop) {
        memcpy(&run->addr, sa, res->ai_addrlen);
        run->addrlen = res->ai_addrlen;
    }
    freeaddrinfo(res);
    if (!loop)
        return usage_error("--url: refusing '%s': only 127.0.0.0/8 and ::1 are allowed", host);
    return 0;
}

static int request_build(struct hr_run *run)
{
    char path[4096], hostport[96];
    const struct hr_opts *o = run->opt;
    int rc = target_resolve(run, path, sizeof(path), hostport, sizeof(hostport));
    if (rc < 0)
        return rc;
    size_t blen = o->body ? strlen(o->body) : 0;
    int n = snprintf(run->req, sizeof(run->req), "%s %s HTTP/1.1\r\nHost: %s\r\n", o->method, path,
                     o->host ? o->host : hostport);
    for (int i = 0; i < o->nheaders && n > 0 && (size_t)n < sizeof(run->req); i++)
        n += snprintf(run->req + n, sizeof(run->req) - (size_t)n, "%s\r\n", o->headers[i]);
    if (n > 0 && (size_t)n < sizeof(run->req) && o->body)
        n += snprintf(run->req + n, sizeof(run->req) - (size_t)n,
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n", blen);
    if (n > 0 && (size_t)n < sizeof(run->req))
        n += snprintf(run->req + n, sizeof(run->req) - (size_t)n, "\r\n%s", o->body ? o->body : "");
    if (n < 0 || (size_t)n >= sizeof(run->req))
        return usage_error("the request is longer than %d bytes", HR_REQ_MAX);
    run->reqlen = (size_t)n;
    return 0;
}

/* ---- connections ---- */

static int conn_open(struct hr_run *run, long i)
{
    struct hr_conn *c = &run->conns[i];
    int one = 1, fd = socket(run->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    /* A blocking connect on loopback, then non-blocking for the traffic. */
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0 ||
        connect(fd, (const struct sockaddr *)&run->addr, run->addrlen) < 0 ||
        fcntl(fd, F_SETFL, O_NONBLOCK) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)i};
    if (epoll_ctl(run->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    c->fd = fd;
    c->phase = HR_IDLE;
    c->len = 0;
    return 0;
}

__attribute__((format(printf, 2, 3))) static void note_error(struct hr_run *run, const char *fmt,
                                                             ...)
{
    run->errors++;
    if (run->err[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(run->err, sizeof(run->err), fmt, ap);
    va_end(ap);
}

static void conn_idle(struct hr_run *run, long i)
{
    run->conns[i].phase = HR_IDLE;
    run->idle[run->nidle++] = i;
}

/* Closes and reopens connection i; on failure it stays out of use. */
static void conn_reopen(struct hr_run *run, long i, bool counted)
{
    close(run->conns[i].fd);
    run->conns[i].fd = -1;
    if (counted)
        run->reconnects++;
    int rc = conn_open(run, i);
    if (rc < 0)
        note_error(run, "reconnect: %s", strerror(-rc));
    else
        conn_idle(run, i);
}

static void conn_send(struct hr_run *run, long i, uint64_t due)
{
    struct hr_conn *c = &run->conns[i];
    c->due = due;
    c->phase = HR_HEAD;
    c->sent = 0;
    c->status = 0;
    c->close_after = false;
    ssize_t k = send(c->fd, run->req, run->reqlen, MSG_NOSIGNAL);
    if (k == (ssize_t)run->reqlen)
        return;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        note_error(run, "send: %s", strerror(errno));
        conn_reopen(run, i, false);
        return;
    }
    c->sent = k < 0 ? 0 : (size_t)k;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u64 = (uint64_t)i};
    epoll_ctl(run->ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void conn_send_rest(struct hr_run *run, long i)
{
    struct hr_conn *c = &run->conns[i];
    ssize_t k = send(c->fd, run->req + c->sent, run->reqlen - c->sent, MSG_NOSIGNAL);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (k < 0) {
        note_error(run, "send: %s", strerror(errno));
        conn_reopen(run, i, false);
        return;
    }
    c->sent += (size_t)k;
    if (c->sent == run->reqlen) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)i};
        epoll_ctl(run->ep, EPOLL_CTL_MOD, c->fd, &ev);
    }
}

/* ---- responses ---- */

static void lat_add(struct hr_run *run, uint64_t ns)
{
    if (run->nlat == run->caplat) {
        size_t cap = run->caplat ? run->caplat * 2 : 65536;
        uint64_t *p = realloc(run->lat, cap * sizeof(*p));
        if (!p)
            return; /* the figure then covers fewer requests; never seen */
        run->lat = p;
        run->caplat = cap;
    }
    run->lat[run->nlat++] = ns;
}

static void response_done(struct hr_run *run, long i)
{
    struct hr_conn *c = &run->conns[i];
    uint64_t t = now_ns();
    bool ok = run->opt->expect ? c->status == run->opt->expect : c->status / 100 == 2;
    run->done++;
    run->t_last = t;
    if (c->due >= run->t_warm) {
        lat_add(run, t - c->due);
        run->status[c->status]++;
        run->warm_done++;
    }
    if (!ok && !run->unexpected++ && !run->err[0])
        snprintf(run->err, sizeof(run->err), "unexpected status %d", c->status);
    if (c->close_after || c->len > 0) {
        if (c->len > 0)
            note_error(run, "bytes after a complete response (pipelining is not expected)");
        conn_reopen(run, i, true);
        return;
    }
    conn_idle(run, i);
}

/* The head in c->buf[0..n): status, framing. 0, or -EPROTO. */
static int head_parse(struct hr_run *run, struct hr_conn *c, size_t n)
{
    char *line = c->buf, *end = c->buf + n, *eol;
    if (n < 12 || strncmp(line, "HTTP/1.", 7) != 0 || (line[7] != '0' && line[7] != '1') ||
        line[8] != ' ')
        return -EPROTO;
    c->status = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
    if (c->status < 100 || c->status > 599)
        return -EPROTO;
    c->close_after = line[7] == '0';
    long long clen = -1;
    bool chunked = false;
    for (line = (char *)memchr(line, '\n', (size_t)(end - line)) + 1; line < end; line = eol + 1) {
        eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol || eol == line || (eol == line + 1 && *line == '\r'))
            break;
        char *colon = memchr(line, ':', (size_t)(eol - line));
        if (!colon)
            return -EPROTO;
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t nlen = (size_t)(colon - line), vlen = (size_t)(eol - v);
        if (nlen == 14 && !strncasecmp(line, "Content-Length", 14)) {
            char *e;
            errno = 0;
            long long x = strtoll(v, &e, 10);
            if (errno || e == v || x < 0 || (clen >= 0 && clen != x))
                return -EPROTO;
            clen = x;
        } else if (nlen == 17 && !strncasecmp(line, "Transfer-Encoding", 17)) {
            chunked = memmem(v, vlen, "chunked", 7) != NULL;
        } else if (nlen == 10 && !strncasecmp(line, "Connection", 10)) {
            if (memmem(v, vlen, "close", 5))
                c->close_after = true;
            else if (memmem(v, vlen, "keep-alive", 10))
                c->close_after = false;
        }
    }
    if (c->status < 200) {
        c->phase = HR_HEAD; /* an interim response: the real one follows */
    } else if (c->status == 204 || c->status == 304 || !strcmp(run->opt->method, "HEAD")) {
        c->phase = HR_LEN;
        c->remain = 0;
    } else if (chunked) {
        c->phase = HR_CSIZE;
    } else if (clen >= 0) {
        c->phase = HR_LEN;
        c->remain = (uint64_t)clen;
    } else {
        c->phase = HR_TOCLOSE;
        c->close_after = true;
    }
    return 0;
}

static void buf_consume(struct hr_conn *c, size_t n)
{
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
}

/* Walks what c->buf holds: 1 when a response is complete, 0 for more bytes,
 * -EPROTO on a malformed one. */
static int conn_parse(struct hr_run *run, struct hr_conn *c)
{
    for (;;) {
        char *eol = c->len ? memchr(c->buf, '\n', c->len) : NULL;
        size_t k;
        switch (c->phase) {
        case HR_IDLE:
            return c->len ? -EPROTO : 0;
        case HR_HEAD: {
            char *h = c->len >= 4 ? memmem(c->buf, c->len, "\r\n\r\n", 4) : NULL;
            if (!h)
                return c->len == sizeof(c->buf) ? -EPROTO : 0;
            size_t n = (size_t)(h - c->buf) + 4;
            if (head_parse(run, c, n) < 0)
                return -EPROTO;
            buf_consume(c, n);
            break;
        }
        case HR_LEN:
        case HR_CDATA:
            k = c->remain < c->len ? (size_t)c->remain : c->len;
            buf_consume(c, k);
            c->remain -= k;
            if (c->remain)
                return 0;
            if (c->phase == HR_LEN)
                return 1;
            c->phase = HR_CCRLF;
            break;
        case HR_CCRLF:
            if (c->len < 2)
                return 0;
            if (c->buf[0] != '\r' || c->buf[1] != '\n')
                return -EPROTO;
            buf_consume(c, 2);
            c->phase = HR_CSIZE;
            break;
        case HR_CSIZE: {
            if (!eol)
                return c->len > 64 ? -EPROTO : 0;
            char *e;
            errno = 0;
            unsigned long long size = strtoull(c->buf, &e, 16);
            if (errno || e == c->buf || (*e != '\r' && *e != ';' && *e != '\n'))
                return -EPROTO;
            buf_consume(c, (size_t)(eol - c->buf) + 1);
            c->remain = size;
            c->phase = size ? HR_CDATA : HR_TRAILER;
            break;
        }
        case HR_TRAILER: {
            if (!eol)
                return 0;
            bool empty = eol == c->buf || (eol == c->buf + 1 && c->buf[0] == '\r');
            buf_consume(c, (size_t)(eol - c->buf) + 1);
            if (empty)
                return 1;
            break;
        }
        case HR_TOCLOSE:
            c->len = 0;
            return 0;
        }
    }
}

static void conn_readable(struct hr_run *run, long i)
{
    struct hr_conn *c = &run->conns[i];
    for (;;) {
        ssize_t n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            enum hr_phase ph = c->phase;
            if (ph == HR_TOCLOSE) {
                c->close_after = true;
                c->len = 0;
                response_done(run, i);
                return;
            }
            if (ph != HR_IDLE)
                note_error(run, "%s while reading a response",
                           n == 0 ? "the server closed the connection" : strerror(errno));
            /* An idle connection the server closed: open another. */
            for (long j = 0; j < run->nidle; j++)
                if (run->idle[j] == i) {
                    run->idle[j] = run->idle[--run->nidle];
                    break;
                }
            conn_reopen(run, i, ph == HR_IDLE);
            return;
        }
        c->len += (size_t)n;
        int rc = conn_parse(run, c);
        if (rc < 0) {
            note_error(run, "malformed response (status %d)", c->status);
            conn_reopen(run, i, false);
            return;
        }
        if (rc == 1) {
            response_done(run, i);
            return;
        }
    }
}

/* ---- the schedule ---- */

static uint64_t total_requests(const struct hr_run *run)
{
    const struct hr_opts *o = run->opt;
    return (uint64_t)((double)o->rate * ((double)o->warmup_s + o->duration_s));
}

static void timer_arm(struct hr_run *run, uint64_t at)
{
    struct itimerspec its = {
        .it_value = {.tv_sec = (time_t)(at / 1000000000u), .tv_nsec = (long)(at % 1000000000u)}};
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
        its.it_value.tv_nsec = 1; /* zero would disarm it */
    timerfd_settime(run->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

/* Sends what is due on idle connections. A request that found none is
 * charged from its due time; one sent on time from its send time, so that the
 * timer's own wake-up delay is not counted against the server. */
static void dispatch(struct hr_run *run)
{
    uint64_t t = now_ns();
    if (run->opt->rate == 0) {
        while (run->nidle > 0 && t < run->t_end)
            conn_send(run, run->idle[--run->nidle], t);
        return;
    }
    uint64_t total = total_requests(run);
    while (run->next < total && run->nidle > 0) {
        uint64_t due = run->t0 + run->next * run->period_ns;
        if (due > t)
            break;
        bool waited = run->next < run->starved_upto;
        if (waited && t - due > 1000000u)
            run->late++;
        run->next++;
        conn_send(run, run->idle[--run->nidle], waited ? due : t);
    }
    if (run->next < total && run->nidle == 0 && t >= run->t0) {
        /* Every request due by now found no free connection. */
        uint64_t upto = (t - run->t0) / run->period_ns + 1;
        run->starved_upto = upto > run->starved_upto ? upto : run->starved_upto;
    }
    if (run->next < total)
        timer_arm(run, run->t0 + run->next * run->period_ns);
}

static long busy(const struct hr_run *run)
{
    long n = 0;
    for (long i = 0; i < run->opt->connections; i++)
        n += run->conns[i].fd >= 0 && run->conns[i].phase != HR_IDLE;
    return n;
}

static int run_load(struct hr_run *run)
{
    const struct hr_opts *o = run->opt;
    struct epoll_event evs[256];
    uint64_t total = total_requests(run);
    for (;;) {
        uint64_t t = now_ns();
        bool sent_all = o->rate ? run->next >= total : t >= run->t_end;
        if (sent_all && busy(run) == 0)
            return 0;
        if (t > run->t_end + 10000000000u) {
            note_error(run, "%ld requests unanswered 10 s after the end", busy(run));
            run->errors += (uint64_t)busy(run) - 1;
            return 0;
        }
        int n = epoll_wait(run->ep, evs, 256, o->rate ? 1000 : 100);
        if (n < 0 && errno != EINTR)
            return -errno;
        for (int k = 0; k < n; k++) {
            uint64_t tag = evs[k].data.u64;
            if (tag == HR_TIMER_TAG) {
                uint64_t ticks;
                if (read(run->tfd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
                    return -errno;
                continue;
            }
            long i = (long)tag;
            if (run->conns[i].fd < 0)
                continue;
            if ((evs[k].events & EPOLLOUT) && run->conns[i].sent < run->reqlen)
                conn_send_rest(run, i);
            if (evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                conn_readable(run, i);
        }
        dispatch(run);
    }
}

/* ---- report ---- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static double pct(const uint64_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t r = (size_t)(p / 100.0 * (double)n + 0.999999);
    return (double)v[(r ? r : 1) - 1] / 1e6;
}

static void report(struct hr_run *run, double cpu_s)
{
    const struct hr_opts *o = run->opt;
    qsort(run->lat, run->nlat, sizeof(*run->lat), cmp_u64);
    size_t n = run->nlat;
    /* Over the measured window, or up to the last answer when answers ran late. */
    double late_s = run->t_last > run->t_warm ? (double)(run->t_last - run->t_warm) / 1e9 : 0;
    double secs = late_s > o->duration_s * 1.01 ? late_s : o->duration_s;
    double rps = secs > 0 ? (double)run->warm_done / secs : 0;
    double p50 = pct(run->lat, n, 50), p90 = pct(run->lat, n, 90), p99 = pct(run->lat, n, 99),
           p999 = pct(run->lat, n, 99.9), mx = n ? (double)run->lat[n - 1] / 1e6 : 0;
    cpu_set_t set;
    int allowed = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : -1;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (o->json) {
        printf("{\"target\": \"%s\", \"mode\": \"%s\", \"rate\": %ld, \"connections\": %ld, "
               "\"seconds\": %.3f, \"requests\": %zu, \"requests_per_s\": %.1f, "
               "\"latency_ms\": {\"p50\": %.3f, \"p90\": %.3f, \"p99\": %.3f, \"p999\": %.3f, "
               "\"max\": %.3f}, \"errors\": %" PRIu64 ", \"reconnects\": %" PRIu64
               ", \"late\": %" PRIu64 ", \"unexpected\": %" PRIu64
               ", \"cpus\": %d, \"online\": %ld, \"cpu_s\": %.3f, \"status\": {",
               o->url, o->rate ? "open" : "closed", o->rate, o->connections, secs, n, rps, p50, p90,
               p99, p999, mx, run->errors, run->reconnects, run->late, run->unexpected, allowed,
               online, cpu_s);
        const char *sep = "";
        for (int s = 0; s < 600; s++)
            if (run->status[s]) {
                printf("%s\"%d\": %" PRIu64, sep, s, run->status[s]);
                sep = ", ";
            }
        printf("}}\n");
        return;
    }
    printf("target       %s %s\n", o->method, o->url);
    if (o->rate)
        printf("mode         open loop, %ld requests/s for %.1f s (after %ld s of warm-up), "
               "%ld keep-alive connections\n",
               o->rate, secs, o->warmup_s, o->connections);
    else
        printf("mode         closed loop, %ld keep-alive connections for %.1f s (after %ld s "
               "of warm-up)\n",
               o->connections, secs, o->warmup_s);
    printf("cpus         %d of %ld online; httprate used %.2f s of CPU (%.0f%% of one core)\n",
           allowed, online, cpu_s, 100.0 * cpu_s / (secs + (double)o->warmup_s));
    printf("requests     %zu (errors %" PRIu64 ", reconnects %" PRIu64
           ", sent over 1 ms late for want of a free connection %" PRIu64 ")\n",
           n, run->errors, run->reconnects, run->late);
    printf("requests/s   %.1f\n", rps);
    printf("latency ms   p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n", p50, p90, p99, p999,
           mx);
    printf("status      ");
    for (int s = 0; s < 600; s++)
        if (run->status[s])
            printf(" %d: %" PRIu64, s, run->status[s]);
    printf("\n");
}

/* ---- options, main ---- */

static const char help[] =
    "usage: httprate --url http://127.0.0.1:PORT/PATH [--rate R] [--duration S]\n"
    "                [--warmup S] [--connections C] [--method M] [--body-json TEXT]\n"
    "                [--header 'Name: value']... [--host HOST] [--expect STATUS] [--json]\n"
    "  --rate R         requests per second, open loop (0: closed loop; default 1000)\n"
    "  --duration S     seconds measured (default 10; may be fractional)\n"
    "  --warmup S       seconds sent first and not counted (default 1)\n"
    "  --connections C  keep-alive connections (default 16 open loop, 64 closed)\n"
    "  --method M       GET (default), POST, HEAD, ...\n"
    "  --body-json TEXT a body, sent with Content-Type: application/json\n"
    "  --header H       an extra header line (up to 16)\n"
    "  --host HOST      the Host header (default the URL's host:port)\n"
    "  --expect STATUS  the status counted as success (default any 2xx)\n"
    "  --json           one JSON object instead of the table\n"
    "Exit: 0 when every answer had the expected status, 1 on any other or a\n"
    "transport error, 2 on usage errors. Loopback targets only.\n";

static int opts_parse(int argc, char **argv, struct hr_opts *o)
{
    long conns = -1, dur_ms = 10000;
    *o = (struct hr_opts){.method = "GET", .rate = 1000, .warmup_s = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(help, stdout);
            exit(0);
        } else if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        }
        if (!v)
            return usage_error("%s: needs a value", a);
        i++;
        if (!strcmp(a, "--url")) {
            o->url = v;
        } else if (!strcmp(a, "--rate")) {
            rc = parse_long(a, v, 0, 10000000, &o->rate);
        } else if (!strcmp(a, "--duration")) {
            char *e;
            double d = strtod(v, &e);
            if (e == v || *e || d <= 0 || d > 3600)
                return usage_error("--duration: expected seconds in (0, 3600], got '%s'", v);
            dur_ms = (long)(d * 1000);
        } else if (!strcmp(a, "--warmup")) {
            rc = parse_long(a, v, 0, 600, &o->warmup_s);
        } else if (!strcmp(a, "--connections")) {
            rc = parse_long(a, v, 1, HR_CONN_MAX, &conns);
        } else if (!strcmp(a, "--method")) {
            if (!text_is_clean(v, false) || !*v)
                return usage_error("--method: '%s' is not a method", v);
            o->method = v;
        } else if (!strcmp(a, "--body-json")) {
            o->body = v;
        } else if (!strcmp(a, "--host")) {
            if (!text_is_clean(v, false))
                return usage_error("--host: spaces or control bytes in '%s'", v);
            o->host = v;
        } else if (!strcmp(a, "--header")) {
            if (o->nheaders == 16 || !strchr(v, ':') || !text_is_clean(v, true))
                return usage_error("--header: expected 'Name: value' (at most 16), got '%s'", v);
            o->headers[o->nheaders++] = v;
        } else if (!strcmp(a, "--expect")) {
            rc = parse_long(a, v, 100, 599, &o->expect);
        } else {
            return usage_error("unknown flag '%s'", a);
        }
        if (rc < 0)
            return rc;
    }
    if (!o->url)
        return usage_error("--url is required");
    o->duration_s = (double)dur_ms / 1000.0;
    o->connections = conns > 0 ? conns : o->rate ? 16 : 64;
    if ((double)o->rate * ((double)o->warmup_s + o->duration_s) > (double)HR_REQUESTS_MAX)
        return usage_error("--rate x (--duration + --warmup) is over %ld requests",
                           HR_REQUESTS_MAX);
    return 0;
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

int main(int argc, char **argv)
{
    struct hr_opts o;
    static struct hr_run run;
    if (opts_parse(argc, argv, &o) < 0)
        return 2;
    run.opt = &o;
    if (request_build(&run) < 0)
        return 2;
    run.ep = epoll_create1(EPOLL_CLOEXEC);
    run.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    run.conns = calloc((size_t)o.connections, sizeof(*run.conns));
    run.idle = calloc((size_t)o.connections, sizeof(*run.idle));
    struct epoll_event tev = {.events = EPOLLIN, .data.u64 = HR_TIMER_TAG};
    if (run.ep < 0 || run.tfd < 0 || !run.conns || !run.idle ||
        epoll_ctl(run.ep, EPOLL_CTL_ADD, run.tfd, &tev) < 0) {
        perror("httprate: setup");
        return 1;
    }
    for (long i = 0; i < o.connections; i++) {
        int rc = conn_open(&run, i);
        if (rc < 0) {
            fprintf(stderr, "httprate: cannot connect to %s: %s\n", o.url, strerror(-rc));
            return 1;
        }
        run.idle[run.nidle++] = i;
    }
    double cpu0 = cpu_seconds();
    run.period_ns = o.rate ? 1000000000u / (uint64_t)o.rate : 0;
    run.t0 = now_ns();
    run.t_warm = run.t0 + (uint64_t)o.warmup_s * 1000000000u;
    run.t_end = run.t_warm + (uint64_t)(o.duration_s * 1e9);
    dispatch(&run);
    int rc = run_load(&run);
    if (rc < 0) {
        fprintf(stderr, "httprate: epoll: %s\n", strerror(-rc));
        return 1;
    }
    if (o.rate == 0)
        run.warm_done = run.nlat; /* closed loop: answers to requests sent after the warm-up */
    report(&run, cpu_seconds() - cpu0);
    if (run.err[0])
        fprintf(stderr, "httprate: first problem: %s\n", run.err);
    return run.errors || run.unexpected ? 1 : 0;
}

/*
 * loadgen.c - how many durable submits per second does the controller take,
 * and how long does each wait? bench/loadgen.md says how to run it.
 *
 * C connections, each a thread with a blocking socket, send POST requests back
 * to back on keep-alive HTTP/1.1 connections, one in flight per connection (as
 * a CLI or client library would), and read each response in full. Threads, not
 * one epoll loop: a blocking client per connection is the simplest that cannot
 * get the protocol wrong; it costs a wake-up per response, so the report gives
 * the CPU time loadgen used on the cores it shares with the server.
 *
 * Every latency is kept (--requests and --duration are capped to fit in
 * memory); percentiles are nearest-rank. Connections are made before the clock
 * starts. The fsync probe runs before the load so that neither disturbs the
 * other.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/uio.h>

#include "base/banned.h"

#define LG_CONN_MAX     1024
#define LG_REQUESTS_MAX 10000000L /* 80 MB of latencies */
#define LG_BODY_MAX     (8L << 20)
#define LG_TEXT_MAX     4096  /* URL path, token */
#define LG_RBUF         16384 /* read buffer, and so the longest header line */
#define LG_HEADERS_MAX  256
#define LG_SNIPPET      160 /* body bytes of an unexpected response kept for the message */
#define LG_FSYNC_N      200
#define LG_FSYNC_BLOCK  4096
#define LG_EOF          1
#define MS(ns)          ((ns) / 1e6)
#define PER_S(n, s)     ((s) > 0 ? (n) / (s) : 0.0)

struct lg_opts {
    const char *url, *token, *body_file, *body_json, *fsync_dir;
    long connections, requests, duration_s, expect, timeout_s;
    bool idempotency, json;
};

/* Shared by the workers: read-only once they run, but for the request
 * counter and the start gate. */
struct lg_run {
    const struct lg_opts *opt;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char *head; /* request line and fixed headers, without the final CRLF */
    char *body;
    size_t headlen, bodylen;
    atomic_long left; /* requests not yet claimed (--requests) */
    long pid;         /* for Idempotency-Key; getpid is a system call */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long ready; /* workers that connected, or failed to */
    bool go, abort;
};

struct lg_reader {
    int fd;
    size_t off, len;
    char buf[LG_RBUF];
};

struct lg_worker {
    struct lg_run *run;
    pthread_t tid;
    unsigned index;
    uint64_t seq; /* requests sent, for Idempotency-Key */
    uint64_t *lat;
    size_t nlat, caplat;
    uint64_t status[600];
    uint64_t errors, reconnects, unexpected, t_first, t_last;
    char err[200]; /* the first transport error */
    char bad[256]; /* the first unexpected response */
    struct lg_reader rd;
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
    fputs("loadgen: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see loadgen --help)\n", stderr);
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

/* No byte that could end a header line or split a request line. */
static bool text_is_clean(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s <= 0x20 || *s == 0x7f)
            return false;
    return true;
}

/* ---- target: URL, loopback check, address ---- */

struct lg_url {
    char host[64], port[8], hostport[80], path[LG_TEXT_MAX];
};

static int url_parse(const char *url, struct lg_url *ret)
{
    if (strncmp(url, "http://", 7) != 0)
        return usage_error("--url: only http:// URLs are supported, got '%s'", url);
    const char *p = url + 7, *h = p + (*p == '['), *hend = *p == '[' ? strchr(h, ']') : NULL;
    if (*p == '[' && !hend)
        return usage_error("--url: unclosed '[' in '%s'", url);
    if (!hend)
        hend = p + strcspn(p, ":/");
    const char *rest = hend + (*p == '['), *path = rest + strcspn(rest, "/");
    size_t hlen = (size_t)(hend - h), plen = (size_t)(path - rest);
    long port = 80;
    if (hlen == 0 || hlen >= sizeof(ret->host) || (size_t)(path - p) >= sizeof(ret->hostport))
        return usage_error("--url: no host, or one too long, in '%s'", url);
    if (plen > 0) {
        char digits[8] = "";
        if (rest[0] != ':' || plen > sizeof(digits))
            return usage_error("--url: bad port in '%s'", url);
        memcpy(digits, rest + 1, plen - 1);
        if (parse_long("--url port", digits, 1, 65535, &port) < 0)
            return -EINVAL;
    }
    if (strlen(path) >= sizeof(ret->path) || !text_is_clean(path))
        return usage_error("--url: the path is too long or has spaces or control bytes");
    snprintf(ret->host, sizeof(ret->host), "%.*s", (int)hlen, h);
    snprintf(ret->port, sizeof(ret->port), "%ld", port);
    snprintf(ret->hostport, sizeof(ret->hostport), "%.*s", (int)(path - p), p);
    snprintf(ret->path, sizeof(ret->path), "%s", *path ? path : "/");
    return 0;
}

static bool addr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr) >> 24 == 127;
    if (sa->sa_family != AF_INET6)
        return false;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

static int sock_connect(const struct sockaddr *sa, socklen_t len, long timeout_s, int *ret_fd)
{
    struct timeval tv = {.tv_sec = timeout_s};
    int one = 1, fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 || connect(fd, sa, len) < 0) {
        int e = errno == EINPROGRESS ? ETIMEDOUT : errno; /* the send timeout bounds connect */
        close(fd);
        return -e;
    }
    *ret_fd = fd;
    return 0;
}

/* Numeric addresses or "localhost" only, so that no lookup leaves the
 * machine; every address must be loopback. The first that accepts a
 * connection is the target. */
static int target_resolve(struct lg_run *run, const struct lg_url *u)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
    hints.ai_flags = AI_NUMERICSERV | (strcmp(u->host, "localhost") ? AI_NUMERICHOST : 0);
    int rc = getaddrinfo(u->host, u->port, &hints, &res);
    if (rc != 0)
        return usage_error("--url: '%s' is not a loopback address or localhost (%s)", u->host,
                           gai_strerror(rc));
    for (ai = res; ai; ai = ai->ai_next)
        if (!addr_is_loopback(ai->ai_addr)) {
            freeaddrinfo(res);
            return usage_error("--url: refusing '%s': only 127.0.0.0/8 and ::1 are allowed",
                               u->host);
        }
    rc = -ENOENT;
    for (ai = res; ai && rc < 0; ai = ai->ai_next) {
        int fd;
        if ((rc = sock_connect(ai->ai_addr, ai->ai_addrlen, run->opt->timeout_s, &fd)) == 0) {
            close(fd);
            memcpy(&run->addr, ai->ai_addr, ai->ai_addrlen);
            run->addrlen = ai->ai_addrlen;
        }
    }
    freeaddrinfo(res);
    if (rc < 0)
        fprintf(stderr, "loadgen: cannot connect to %s: %s\n", u->hostport, strerror(-rc));
    return rc < 0 ? -ECONNREFUSED : 0;
}

static int body_load(struct lg_run *run, const struct lg_opts *o)
{
    size_t n = o->body_json ? strlen(o->body_json) : LG_BODY_MAX + 1;
    if (!(run->body = malloc(n + 1)))
        return -ENOMEM;
    if (o->body_json) {
        memcpy(run->body, o->body_json, n);
        run->bodylen = n;
        return 0;
    }
    FILE *f = fopen(o->body_file, "rb");
    if (!f)
        return usage_error("--body: cannot open '%s': %s", o->body_file, strerror(errno));
    run->bodylen = fread(run->body, 1, n, f);
    int bad = ferror(f) ? EIO : run->bodylen > LG_BODY_MAX ? EFBIG : 0;
    fclose(f);
    if (bad)
        return usage_error("--body: '%s': %s (at most %ld bytes)", o->body_file, strerror(bad),
                           LG_BODY_MAX);
    return 0;
}

/* ---- one connection: send a request, read a response ---- */

static int send_all(int fd, struct iovec *iov, int n)
{
    struct msghdr m = {0};
    while (n > 0) {
        m.msg_iov = iov;
        m.msg_iovlen = (size_t)n;
        ssize_t k = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
        for (; n > 0 && (size_t)k >= iov->iov_len; iov++, n--)
            k -= (ssize_t)iov->iov_len;
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + k;
            iov->iov_len -= (size_t)k;
        }
    }
    return 0;
}

/* 0: more bytes in r->buf; LG_EOF: the peer closed; or -errno. */
static int rd_fill(struct lg_reader *r)
{
    memmove(r->buf, r->buf + r->off, r->len - r->off);
    r->len -= r->off;
    r->off = 0;
    if (r->len == sizeof(r->buf))
        return -E2BIG;
    for (;;) {
        ssize_t n = recv(r->fd, r->buf + r->len, sizeof(r->buf) - r->len, 0);
        if (n >= 0) {
            r->len += (size_t)n;
            return n ? 0 : LG_EOF;
        }
        if (errno != EINTR)
            return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
    }
}

/* One line without its CRLF, NUL-terminated in place; valid until the next
 * read. A close before the line ends is an error. */
static int rd_line(struct lg_reader *r, char **ret_line)
{
    char *nl;
    while (!(nl = memchr(r->buf + r->off, '\n', r->len - r->off))) {
        int rc = rd_fill(r);
        if (rc != 0)
            return rc == LG_EOF ? -ECONNRESET : rc;
    }
    *ret_line = r->buf + r->off;
    r->off = (size_t)(nl - r->buf) + 1;
    nl[nl > *ret_line && nl[-1] == '\r' ? -1 : 0] = '\0';
    return 0;
}

/* Skips n bytes (n < 0: up to the close), keeping the first in keep[]. */
static int rd_skip(struct lg_reader *r, int64_t n, char *keep, size_t *kept)
{
    while (n != 0) {
        int rc = r->off == r->len ? rd_fill(r) : 0;
        if (rc == LG_EOF && n < 0)
            return 0;
        if (rc != 0)
            return rc == LG_EOF ? -ECONNRESET : rc;
        size_t k = r->len - r->off, c;
        k = n > 0 && (uint64_t)n < k ? (size_t)n : k;
        c = *kept + k < LG_SNIPPET ? k : LG_SNIPPET - *kept;
        memcpy(keep + *kept, r->buf + r->off, c);
        *kept += c;
        r->off += k;
        n = n < 0 ? n : n - (int64_t)k;
    }
    return 0;
}

static int rd_chunked(struct lg_reader *r, char *keep, size_t *kept)
{
    char *line, *end;
    int rc;
    for (;;) {
        if ((rc = rd_line(r, &line)) < 0)
            return rc;
        errno = 0;
        unsigned long long size = strtoull(line, &end, 16);
        if (errno || end == line || (*end && *end != ';' && *end != ' ') || size > (1ull << 40))
            return -EPROTO;
        if (size == 0)
            break;
        if ((rc = rd_skip(r, (int64_t)size, keep, kept)) < 0 || (rc = rd_line(r, &line)) < 0)
            return rc;
        if (*line)
            return -EPROTO;
    }
    for (int i = 0; i < LG_HEADERS_MAX; i++) /* trailers, up to the empty line */
        if ((rc = rd_line(r, &line)) < 0 || !*line)
            return rc;
    return -EPROTO;
}

struct lg_resp {
    int status;
    bool close; /* the server closes after this response */
    size_t kept;
    char keep[LG_SNIPPET];
};

static int rd_headers(struct lg_reader *r, struct lg_resp *resp, int64_t *clen, bool *chunked)
{
    for (int i = 0; i < LG_HEADERS_MAX; i++) {
        char *line, *v, *end;
        int rc = rd_line(r, &line);
        if (rc < 0 || !*line)
            return rc;
        if (!(v = strchr(line, ':')))
            return -EPROTO;
        *v++ = '\0';
        v += strspn(v, " \t");
        if (!strcasecmp(line, "Content-Length")) {
            errno = 0;
            long long n = strtoll(v, &end, 10);
            if (errno || end == v || n < 0 || (*clen >= 0 && *clen != n))
                return -EPROTO;
            *clen = n;
        } else if (!strcasecmp(line, "Transfer-Encoding")) {
            *chunked = strcasestr(v, "chunked") != NULL;
        } else if (!strcasecmp(line, "Connection")) {
            resp->close = strcasestr(v, "close") || (resp->close && !strcasestr(v, "keep-alive"));
        }
    }
    return -EPROTO;
}

static int read_response(struct lg_reader *r, struct lg_resp *resp)
{
    for (;;) {
        char *line;
        int64_t clen = -1;
        bool chunked = false;
        int rc = rd_line(r, &line);
        if (rc < 0)
            return rc;
        if (strncmp(line, "HTTP/1.", 7) != 0 || (line[7] != '0' && line[7] != '1') ||
            line[8] != ' ' || sscanf(line + 9, "%3d", &resp->status) != 1 || resp->status < 100 ||
            resp->status > 599 || resp->status == 101)
            return -EPROTO;
        resp->close = line[7] == '0'; /* HTTP/1.0 closes unless it says keep-alive */
        resp->kept = 0;
        if ((rc = rd_headers(r, resp, &clen, &chunked)) < 0)
            return rc;
        if (resp->status < 200)
            continue; /* an interim response: the real one follows */
        if (resp->status == 204 || resp->status == 304)
            return 0;
        if (chunked)
            return rd_chunked(r, resp->keep, &resp->kept);
        resp->close |= clen < 0; /* the body runs up to the close */
        return rd_skip(r, clen, resp->keep, &resp->kept);
    }
}

/* ---- workers ---- */

static int worker_request(struct lg_worker *w)
{
    const struct lg_run *run = w->run;
    const struct lg_opts *o = run->opt;
    char idem[96];
    struct lg_resp resp;
    int n = o->idempotency ? snprintf(idem, sizeof(idem), "\r\nIdempotency-Key: lg-%ld-%u-%" PRIu64,
                                      run->pid, w->index, w->seq + 1)
                           : 0;
    struct iovec iov[4] = {{run->head, run->headlen},
                           {idem, (size_t)n},
                           {(void *)"\r\n\r\n", 4},
                           {run->body, run->bodylen}};
    if (w->nlat == w->caplat) {
        size_t cap = w->caplat ? w->caplat * 2 : 4096;
        uint64_t *lat = realloc(w->lat, cap * sizeof(*lat));
        if (!lat)
            return -ENOMEM;
        w->lat = lat;
        w->caplat = cap;
    }
    uint64_t t0 = now_ns();
    w->seq++;
    int rc = send_all(w->rd.fd, iov, 4);
    if (rc < 0 || (rc = read_response(&w->rd, &resp)) < 0)
        return rc;
    w->lat[w->nlat++] = now_ns() - t0;
    w->status[resp.status]++;
    bool expected = o->expect ? resp.status == o->expect : resp.status / 100 == 2;
    if (!expected && w->unexpected++ == 0) {
        for (size_t i = 0; i < resp.kept; i++)
            if ((unsigned char)resp.keep[i] < 0x20 || resp.keep[i] == 0x7f)
                resp.keep[i] = ' ';
        snprintf(w->bad, sizeof(w->bad), "%d %.*s", resp.status, (int)resp.kept, resp.keep);
    }
    if (resp.close) {
        close(w->rd.fd);
        w->rd.fd = -1;
    }
    return 0;
}

static int worker_note(struct lg_worker *w, const char *what, int rc)
{
    if (w->errors++ == 0)
        snprintf(w->err, sizeof(w->err), "connection %u: %s: %s", w->index, what,
                 rc == -EPROTO       ? "malformed HTTP response"
                 : rc == -ECONNRESET ? "connection closed before a whole response"
                                     : strerror(-rc));
    return rc;
}

static int worker_connect(struct lg_worker *w)
{
    const struct lg_run *run = w->run;
    w->rd.off = w->rd.len = 0;
    int rc = sock_connect((const struct sockaddr *)&run->addr, run->addrlen, run->opt->timeout_s,
                          &w->rd.fd);
    return rc < 0 ? worker_note(w, "connect", rc) : 0;
}

static void *worker_main(void *arg)
{
    struct lg_worker *w = arg;
    struct lg_run *run = w->run;
    const struct lg_opts *o = run->opt;
    int rc = worker_connect(w);

    pthread_mutex_lock(&run->mu); /* all connect before the clock starts */
    run->ready++;
    pthread_cond_broadcast(&run->cv);
    while (!run->go)
        pthread_cond_wait(&run->cv, &run->mu);
    rc = run->abort ? -ECANCELED : rc;
    pthread_mutex_unlock(&run->mu);

    w->t_first = w->t_last = now_ns();
    uint64_t deadline = w->t_first + (uint64_t)o->duration_s * 1000000000u;
    while (rc == 0) {
        if (o->duration_s ? now_ns() >= deadline : atomic_fetch_sub(&run->left, 1) <= 0)
            break;
        if (w->rd.fd < 0 && (rc = worker_connect(w)) == 0)
            w->reconnects++;
        if (rc == 0 && (rc = worker_request(w)) == -ENOMEM)
            worker_note(w, "recording latency", rc);
        else if (rc < 0 && w->rd.fd >= 0) { /* counted; the next request reconnects */
            worker_note(w, "request", rc);
            close(w->rd.fd);
            w->rd.fd = -1;
            rc = 0;
        }
    }
    w->t_last = now_ns();
    if (w->rd.fd >= 0)
        close(w->rd.fd);
    return NULL;
}

/* Starts the workers, opens the gate once all have connected, waits for them;
 * returns how many started. */
static long run_workers(struct lg_run *run, struct lg_worker *w, long n)
{
    long started = 0;
    for (; started < n; started++) {
        w[started].run = run;
        w[started].index = (unsigned)started;
        w[started].rd.fd = -1;
        if (pthread_create(&w[started].tid, NULL, worker_main, &w[started]) != 0) {
            fprintf(stderr, "loadgen: cannot start thread %ld\n", started);
            break;
        }
    }
    pthread_mutex_lock(&run->mu);
    while (run->ready < started)
        pthread_cond_wait(&run->cv, &run->mu);
    run->go = true;
    run->abort = started < n;
    pthread_cond_broadcast(&run->cv);
    pthread_mutex_unlock(&run->mu);
    for (long i = 0; i < started; i++)
        pthread_join(w[i].tid, NULL);
    return started;
}

/* ---- results ---- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest rank: the smallest value with at least p% of all at or below it. */
static uint64_t pct(const uint64_t *sorted, size_t n, unsigned p)
{
    size_t rank = ((uint64_t)n * p + 99) / 100;
    return n == 0 ? 0 : sorted[rank ? rank - 1 : 0];
}

struct lg_fsync {
    uint64_t p50, p99, max;
    bool tmpfs; /* where fsync does nothing */
};

/* Appends: a growing file makes fdatasync write metadata too, as a log's
 * commits do. */
static int fsync_probe(const char *dir, struct lg_fsync *ret)
{
    char path[PATH_MAX], block[LG_FSYNC_BLOCK];
    uint64_t t[LG_FSYNC_N];
    struct statfs sf;
    int rc = 0, n = snprintf(path, sizeof(path), "%s/.loadgen-fsync-XXXXXX", dir);
    int fd = n > 0 && (size_t)n < sizeof(path) ? mkstemp(path) : -1;
    if (fd < 0)
        return usage_error("--fsync-probe: cannot create a file in '%s': %s", dir,
                           strerror(n > 0 && (size_t)n < sizeof(path) ? errno : ENAMETOOLONG));
    memset(block, 'g', sizeof(block));
    for (int i = 0; i < LG_FSYNC_N && rc == 0; i++) {
        uint64_t t0 = now_ns();
        if (write(fd, block, sizeof(block)) != (ssize_t)sizeof(block) || fdatasync(fd) < 0)
            rc = errno ? errno : EIO;
        t[i] = now_ns() - t0;
    }
    ret->tmpfs = fstatfs(fd, &sf) == 0 && sf.f_type == TMPFS_MAGIC;
    close(fd);
    unlink(path);
    if (rc) {
        fprintf(stderr, "loadgen: --fsync-probe: writing in '%s': %s\n", dir, strerror(rc));
        return -EIO;
    }
    qsort(t, LG_FSYNC_N, sizeof(t[0]), cmp_u64);
    ret->p50 = pct(t, LG_FSYNC_N, 50);
    ret->p99 = pct(t, LG_FSYNC_N, 99);
    ret->max = t[LG_FSYNC_N - 1];
    return 0;
}

struct lg_total {
    uint64_t requests, errors, reconnects, unexpected, status[600];
    uint64_t p50, p90, p99, max;
    double seconds, cpu_s;
    const char *err, *bad; /* the first of any worker, or NULL */
    char cpus[1024];       /* the CPUs loadgen may run on */
    char want[8];          /* the statuses that count as success: "2xx" or --expect */
};

static void cpus_format(char *buf, size_t cap)
{
    cpu_set_t set;
    size_t len = 0;
    buf[0] = '\0';
    if (sched_getaffinity(0, sizeof(set), &set) < 0)
        return;
    for (int c = 0; c < CPU_SETSIZE && len + 8 < cap; c++)
        if (CPU_ISSET(c, &set))
            len += (size_t)snprintf(buf + len, cap - len, "%s%d", len ? "," : "", c);
}

/* Sums the workers; all their latencies, sorted, give the percentiles. */
static int total_collect(struct lg_worker *w, long n, struct lg_total *t)
{
    size_t nlat = 0, k = 0;
    uint64_t t_first = UINT64_MAX, t_last = 0;
    for (long i = 0; i < n; i++)
        nlat += w[i].nlat;
    uint64_t *all = malloc((nlat ? nlat : 1) * sizeof(*all));
    if (!all)
        return -ENOMEM;
    for (long i = 0; i < n; k += w[i].nlat, i++) {
        memcpy(all + k, w[i].lat, w[i].nlat * sizeof(*all));
        t->errors += w[i].errors;
        t->reconnects += w[i].reconnects;
        t->unexpected += w[i].unexpected;
        for (int s = 0; s < 600; s++)
            t->status[s] += w[i].status[s];
        t_first = w[i].t_first < t_first ? w[i].t_first : t_first;
        t_last = w[i].t_last > t_last ? w[i].t_last : t_last;
        t->err = !t->err && w[i].errors ? w[i].err : t->err;
        t->bad = !t->bad && w[i].unexpected ? w[i].bad : t->bad;
    }
    qsort(all, nlat, sizeof(*all), cmp_u64);
    t->requests = nlat;
    t->seconds = t_last > t_first ? (double)(t_last - t_first) / 1e9 : 0;
    t->p50 = pct(all, nlat, 50);
    t->p90 = pct(all, nlat, 90);
    t->p99 = pct(all, nlat, 99);
    t->max = nlat ? all[nlat - 1] : 0;
    free(all);
    cpus_format(t->cpus, sizeof(t->cpus));
    return 0;
}

static void report_table(const struct lg_opts *o, const struct lg_total *t,
                         const struct lg_fsync *fs)
{
    printf("target       %s\nconnections  %ld (a thread each, keep-alive)\n", o->url,
           o->connections);
    printf("cpus         %s of %ld online; loadgen used %.2f s of CPU (%.0f%% of one core)\n",
           t->cpus, sysconf(_SC_NPROCESSORS_ONLN), t->cpu_s, 100 * PER_S(t->cpu_s, t->seconds));
    printf("requests     %" PRIu64 " (transport errors %" PRIu64 ", reconnects %" PRIu64 ")\n",
           t->requests, t->errors, t->reconnects);
    printf("seconds      %.3f\nrequests/s   %.1f\n", t->seconds, PER_S(t->requests, t->seconds));
    printf("ok/s         %.1f (status %s)\n", PER_S(t->requests - t->unexpected, t->seconds),
           t->want);
    printf("latency ms   p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\nstatus      ", MS(t->p50),
           MS(t->p90), MS(t->p99), MS(t->max));
    for (int s = 100; s < 600; s++)
        if (t->status[s])
            printf(" %d: %" PRIu64, s, t->status[s]);
    printf("%s\n", t->requests ? "" : " none");
    if (fs)
        printf(
            "fsync ms     p50 %.3f  p99 %.3f  max %.3f (%d x 4 KiB append + fdatasync in %s%s)\n",
            MS(fs->p50), MS(fs->p99), MS(fs->max), LG_FSYNC_N, o->fsync_dir,
            fs->tmpfs ? "; tmpfs: fsync does nothing" : "");
}

static void json_str(const char *key, const char *s)
{
    printf("\"%s\":\"", key);
    for (; *s; s++)
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", (unsigned char)*s);
        else
            putchar(*s);
    printf("\",");
}

static void report_json(const struct lg_opts *o, const struct lg_total *t,
                        const struct lg_fsync *fs, bool ok)
{
    printf("{");
    json_str("url", o->url);
    json_str("ok_status", t->want);
    json_str("cpus", t->cpus);
    printf("\"connections\":%ld,\"cpus_online\":%ld,\"cpu_s\":%.3f,\"requests\":%" PRIu64
           ",\"errors\":%" PRIu64 ",\"reconnects\":%" PRIu64 ",\"unexpected\":%" PRIu64
           ",\"seconds\":%.6f,\"requests_per_s\":%.3f,\"ok_per_s\":%.3f,",
           o->connections, sysconf(_SC_NPROCESSORS_ONLN), t->cpu_s, t->requests, t->errors,
           t->reconnects, t->unexpected, t->seconds, PER_S(t->requests, t->seconds),
           PER_S(t->requests - t->unexpected, t->seconds));
    printf("\"latency_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},\"status\":{",
           MS(t->p50), MS(t->p90), MS(t->p99), MS(t->max));
    for (int s = 100, first = 1; s < 600; s++)
        if (t->status[s]) {
            printf("%s\"%d\":%" PRIu64, first ? "" : ",", s, t->status[s]);
            first = 0;
        }
    printf("},");
    if (fs) {
        printf("\"fsync_ms\":{\"p50\":%.3f,\"p99\":%.3f,\"max\":%.3f,\"n\":%d,", MS(fs->p50),
               MS(fs->p99), MS(fs->max), LG_FSYNC_N);
        json_str("dir", o->fsync_dir);
        printf("\"block_bytes\":%d,\"tmpfs\":%s},", LG_FSYNC_BLOCK, fs->tmpfs ? "true" : "false");
    }
    printf("\"ok\":%s}\n", ok ? "true" : "false");
}

static const char usage_text[] =
    "usage: loadgen --url http://127.0.0.1:PORT/v1/jobs (--body FILE | --body-json JSON)\n"
    "               [--token TOKEN] [--connections C] [--requests N | --duration S]\n"
    "               [--idempotency] [--expect CODE] [--timeout S] [--fsync-probe DIR] [--json]\n"
    "\n"
    "Sends POST requests back to back over C keep-alive HTTP/1.1 connections (a thread and\n"
    "one request in flight per connection); reports requests/s and latency percentiles.\n"
    "\n"
    "  --url URL          http://HOST[:PORT][/PATH]; HOST is an address in 127.0.0.0/8,\n"
    "                     [::1] or localhost: other targets are refused\n"
    "  --body FILE        the request body (Content-Type: application/json), at most 8 MiB\n"
    "  --body-json JSON   the request body, inline\n"
    "  --token TOKEN      send 'Authorization: Bearer TOKEN' (no such header without it)\n"
    "  --connections C    concurrent connections, 1..1024 (default 8)\n"
    "  --requests N       send N requests in all, 1..10000000 (default 1000)\n"
    "  --duration S       or send for S seconds, 1..3600 (requests in flight then finish)\n"
    "  --idempotency      send 'Idempotency-Key: lg-<pid>-<conn>-<seq>', unique per request\n"
    "                     (conn counts from 0, seq from 1 on each connection)\n"
    "  --expect CODE      the one status that counts as success (default: any 2xx)\n"
    "  --timeout S        give up on a connect, send or response after S seconds,\n"
    "                     1..3600 (default 30)\n"
    "  --fsync-probe DIR  first append 4 KiB to a temporary file in DIR and fdatasync it,\n"
    "                     200 times: the disk's fsync latency (p50, p99, max)\n"
    "  --json             print one JSON object instead of the table\n"
    "  --help             this text\n"
    "\n"
    "Latency runs from the first byte sent to the last byte of the response; percentiles\n"
    "are nearest-rank over every request. Connections are made before the clock starts;\n"
    "one that the server closes is reopened and counted. Pin with taskset ('taskset -c 1\n"
    "loadgen ...'): the report gives the CPUs loadgen was allowed and the CPU time it used.\n"
    "\n"
    "Exit status: 0 every response as expected; 1 other statuses, transport errors or a\n"
    "failed fsync probe; 2 usage errors.\n";

enum lg_kind { K_STR, K_LONG, K_BOOL };

static const struct lg_flag {
    const char *name;
    enum lg_kind kind;
    size_t off;
    long min, max;
} lg_flags[] = {
    {"--url", K_STR, offsetof(struct lg_opts, url), 0, 0},
    {"--token", K_STR, offsetof(struct lg_opts, token), 0, 0},
    {"--body", K_STR, offsetof(struct lg_opts, body_file), 0, 0},
    {"--body-json", K_STR, offsetof(struct lg_opts, body_json), 0, 0},
    {"--fsync-probe", K_STR, offsetof(struct lg_opts, fsync_dir), 0, 0},
    {"--connections", K_LONG, offsetof(struct lg_opts, connections), 1, LG_CONN_MAX},
    {"--requests", K_LONG, offsetof(struct lg_opts, requests), 1, LG_REQUESTS_MAX},
    {"--duration", K_LONG, offsetof(struct lg_opts, duration_s), 1, 3600},
    {"--expect", K_LONG, offsetof(struct lg_opts, expect), 100, 599},
    {"--timeout", K_LONG, offsetof(struct lg_opts, timeout_s), 1, 3600},
    {"--idempotency", K_BOOL, offsetof(struct lg_opts, idempotency), 0, 0},
    {"--json", K_BOOL, offsetof(struct lg_opts, json), 0, 0},
};

/* 0, 1 after --help, or -EINVAL with the message printed. */
static int opts_parse(int argc, char **argv, struct lg_opts *o)
{
    *o = (struct lg_opts){.connections = 8, .timeout_s = 30};
    for (int i = 1; i < argc; i++) {
        const struct lg_flag *f = NULL;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_text, stdout);
            return 1;
        }
        for (size_t k = 0; k < sizeof(lg_flags) / sizeof(lg_flags[0]) && !f; k++)
            f = strcmp(argv[i], lg_flags[k].name) ? NULL : &lg_flags[k];
        if (!f)
            return usage_error("unknown argument '%s'", argv[i]);
        void *field = (char *)o + f->off;
        if (f->kind == K_BOOL)
            *(bool *)field = true;
        else if (++i == argc)
            return usage_error("%s needs a value", f->name);
        else if (f->kind == K_STR)
            *(const char **)field = argv[i];
        else if (parse_long(f->name, argv[i], f->min, f->max, field) < 0)
            return -EINVAL;
    }
    if (!o->url)
        return usage_error("--url is required");
    if (!o->body_file == !o->body_json)
        return usage_error("give exactly one of --body FILE and --body-json JSON");
    if (o->requests && o->duration_s)
        return usage_error("--requests and --duration exclude each other");
    if (o->token && (strlen(o->token) >= LG_TEXT_MAX || !*o->token || !text_is_clean(o->token)))
        return usage_error("--token: empty, too long, or has spaces or control bytes");
    o->requests = o->duration_s ? 0 : o->requests ? o->requests : 1000;
    return 0;
}

/* Flags and files first, then the fsync probe, then the target: the usage
 * errors come before any connection is tried. */
static int run_prepare(struct lg_run *run, const struct lg_opts *o, struct lg_fsync *fs)
{
    struct lg_url u;
    size_t cap = 512 + 2 * LG_TEXT_MAX;
    int rc;
    if ((rc = url_parse(o->url, &u)) < 0 || (rc = body_load(run, o)) < 0)
        return rc;
    if (!(run->head = malloc(cap)))
        return -ENOMEM;
    int n = snprintf(run->head, cap,
                     "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: gpuorch-loadgen\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu%s%s",
                     u.path, u.hostport, run->bodylen, o->token ? "\r\nAuthorization: Bearer " : "",
                     o->token ? o->token : "");
    run->headlen = (size_t)n;
    atomic_init(&run->left, o->requests);
    run->pid = (long)getpid();
    if (o->fsync_dir && (rc = fsync_probe(o->fsync_dir, fs)) < 0)
        return rc;
    return target_resolve(run, &u);
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
    struct lg_opts o;
    struct lg_run run = {
        .opt = &o, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    struct lg_fsync fs;
    struct lg_total t = {.want = "2xx"};
    struct lg_worker *w = NULL;
    long started = 0;
    int rc = opts_parse(argc, argv, &o), status = 1;
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if ((rc = run_prepare(&run, &o, &fs)) < 0)
        goto out;
    if (!(w = calloc((size_t)o.connections, sizeof(*w)))) {
        rc = -ENOMEM;
        goto out;
    }
    double cpu0 = cpu_seconds();
    started = run_workers(&run, w, o.connections);
    t.cpu_s = cpu_seconds() - cpu0;
    if ((rc = total_collect(w, started, &t)) < 0)
        goto out;
    if (o.expect)
        snprintf(t.want, sizeof(t.want), "%ld", o.expect);
    bool ok = started == o.connections && !t.errors && !t.unexpected && t.requests > 0;
    if (o.json)
        report_json(&o, &t, o.fsync_dir ? &fs : NULL, ok);
    else
        report_table(&o, &t, o.fsync_dir ? &fs : NULL);
    fflush(stdout);
    if (t.unexpected)
        fprintf(stderr, "loadgen: %" PRIu64 " responses were not %s (first: %s)\n", t.unexpected,
                t.want, t.bad);
    if (t.errors)
        fprintf(stderr, "loadgen: %" PRIu64 " transport errors (first: %s)\n", t.errors, t.err);
    if (!t.requests && !t.errors)
        fprintf(stderr, "loadgen: no request completed\n");
    status = ok ? 0 : 1;
out:
    if (rc == -ENOMEM)
        fprintf(stderr, "loadgen: out of memory\n");
    for (long i = 0; i < started; i++)
        free(w[i].lat);
    free(w);
    free(run.head);
    free(run.body);
    return rc == -EINVAL ? 2 : status;
}

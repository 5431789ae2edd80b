/* test_http_stream.c - streamed answers over loopback: pieces produced by
 * another thread arrive in order through sleeps and wakes, a wake during a
 * read is not lost, a body from a read that never sleeps, completion of a
 * suspended request with a stream, a client that leaves mid-stream (its
 * context freed exactly once, counted with an atomic), a stop with streams
 * open, and the argument checks. Clients: libcurl through util/httpc.h, and a
 * raw socket that reads the chunked body itself. Every test starts its own
 * server on 127.0.0.1, port 0. */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "http/http.h"
#include "util/httpc.h"
#include "base/banned.h"

#define WAIT_LIMIT_S 10 /* a generous deadline for events, never a timing assertion */
#define NPIECES      20
#define BIG_BYTES    (1u << 20)
#define NSTREAMS     4

struct env;

/* One stream's source: pieces queued by a producer, read on the polling thread. */
struct feed {
    struct env *e;
    char buf[8192];
    size_t len, off;
    bool end;
    bool racy;      /* the first empty read waits for a wake to land during it */
    size_t big_off; /* /big: bytes produced so far */
};

struct env {
    struct http_server *srv;
    uint16_t port;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    struct http_stream *st[NSTREAMS]; /* handles the handlers published, in order */
    struct feed *feed[NSTREAMS];
    size_t nst;
    struct http_request *later; /* /later's suspended request */
    atomic_int freed;           /* free_ctx calls */
    atomic_int empty_reads;     /* reads that found nothing */
    bool race_waiting;          /* a racy read is waiting for its wake */
    bool race_woken;
    int bad_rc[5];         /* /bad's return codes, checked by the test thread */
    const size_t *got_len; /* got_enough: wait until *got_len >= want_len */
    size_t want_len;
};

static struct timespec deadline(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += WAIT_LIMIT_S;
    return ts;
}

/* Waits (e->mu held) until cond_fn(e) holds; fails the test at the deadline. */
static void wait_for(struct env *e, bool (*cond_fn)(struct env *))
{
    struct timespec dl = deadline();
    while (!cond_fn(e))
        assert_int_not_equal(pthread_cond_timedwait(&e->cond, &e->mu, &dl), ETIMEDOUT);
}

/* ---- the routes ---- */

static ssize_t feed_read(void *ctx, char *buf, size_t max)
{
    struct feed *f = ctx;
    struct env *e = f->e;
    pthread_mutex_lock(&e->mu);
    if (f->off == f->len && !f->end && f->racy) {
        /* The producer appends and wakes while this read still runs. */
        f->racy = false;
        e->race_waiting = true;
        pthread_cond_broadcast(&e->cond);
        struct timespec dl = deadline();
        while (!e->race_woken)
            if (pthread_cond_timedwait(&e->cond, &e->mu, &dl) == ETIMEDOUT)
                break;
        pthread_mutex_unlock(&e->mu);
        return 0; /* nothing now, as far as this read knew */
    }
    size_t n = f->len - f->off < max ? f->len - f->off : max;
    memcpy(buf, f->buf + f->off, n);
    f->off += n;
    if (f->off == f->len)
        f->off = f->len = 0;
    bool end = f->end && n == 0;
    if (n == 0 && !end) {
        atomic_fetch_add(&e->empty_reads, 1);
        pthread_cond_broadcast(&e->cond);
    }
    pthread_mutex_unlock(&e->mu);
    return n ? (ssize_t)n : end ? HTTP_STREAM_END : 0;
}

static void feed_free(void *ctx)
{
    struct feed *f = ctx;
    struct env *e = f->e;
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->nst; i++)
        if (e->feed[i] == f)
            e->feed[i] = NULL;
    atomic_fetch_add(&e->freed, 1);
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->mu);
    free(f);
}

static struct feed *feed_new(struct env *e, bool racy)
{
    struct feed *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->e = e;
    f->racy = racy;
    return f;
}

static int publish(struct http_request *req, struct env *e, struct feed *f, unsigned status)
{
    struct http_stream *st = NULL;
    int rc = http_request_respond_stream(req, status, "text/plain", feed_read, feed_free, f, &st);
    if (rc)
        return rc;
    pthread_mutex_lock(&e->mu);
    if (e->nst < NSTREAMS) { /* the tests open no more */
        e->feed[e->nst] = f;
        e->st[e->nst++] = st;
    }
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

static int h_pieces(struct http_request *req, void *ctx)
{
    struct env *e = ctx;
    http_request_add_header(req, "X-Stream", "pieces");
    return publish(req, e, feed_new(e, false), 200);
}

static int h_racy(struct http_request *req, void *ctx)
{
    struct env *e = ctx;
    return publish(req, e, feed_new(e, true), 200);
}

/* A read that never sleeps: BIG_BYTES of a pattern, no handle kept. */
static ssize_t big_read(void *ctx, char *buf, size_t max)
{
    struct feed *f = ctx;
    if (f->big_off == BIG_BYTES)
        return HTTP_STREAM_END;
    size_t n = BIG_BYTES - f->big_off < max ? BIG_BYTES - f->big_off : max;
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)('a' + (f->big_off + i) % 26);
    f->big_off += n;
    return (ssize_t)n;
}

static int h_big(struct http_request *req, void *ctx)
{
    return http_request_respond_stream(req, 200, "text/plain", big_read, feed_free,
                                       feed_new(ctx, false), NULL);
}

static int h_later(struct http_request *req, void *ctx)
{
    struct env *e = ctx;
    int rc = http_request_suspend(req, 0, NULL, NULL);
    if (rc)
        return rc;
    pthread_mutex_lock(&e->mu);
    e->later = req;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

/* Argument checks: the codes go to the test thread (no assert off it). */
static int h_bad(struct http_request *req, void *ctx)
{
    struct env *e = ctx;
    const char *plain = "text/plain";
    int rc[5] = {
        http_request_respond_stream(req, 42, plain, feed_read, feed_free, feed_new(e, 0), NULL),
        http_request_respond_stream(req, 200, plain, NULL, feed_free, feed_new(e, 0), NULL),
        http_request_respond_stream(req, 200, "a\r\nb", feed_read, feed_free, feed_new(e, 0), NULL),
        http_request_respond_stream(req, 200, plain, feed_read, feed_free, feed_new(e, 0), NULL),
        http_request_respond_stream(req, 200, plain, feed_read, feed_free, feed_new(e, 0), NULL),
    };
    pthread_mutex_lock(&e->mu);
    memcpy(e->bad_rc, rc, sizeof(rc));
    pthread_mutex_unlock(&e->mu);
    return 0; /* the fourth stream answers; its read finds nothing and sleeps */
}

static const struct http_route routes[] = {
    {"GET", "/pieces", h_pieces, 0}, {"GET", "/racy", h_racy, 0}, {"GET", "/big", h_big, 0},
    {"GET", "/later", h_later, 0},   {"GET", "/bad", h_bad, 0},
};

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cond, NULL);
    struct http_config cfg = {.bind_addr = "127.0.0.1",
                              .routes = routes,
                              .nroutes = sizeof(routes) / sizeof(routes[0]),
                              .ctx = e};
    char err[256];
    assert_int_equal(http_server_new(&cfg, &e->srv, err, sizeof(err)), 0);
    assert_int_equal(http_server_start(e->srv, err, sizeof(err)), 0);
    e->port = http_server_port(e->srv);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    http_server_free(e->srv);
    for (size_t i = 0; i < e->nst; i++)
        http_stream_release(e->st[i]);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cond);
    free(e);
    return 0;
}

/* ---- producers ---- */

/* Appends text to stream i's feed (or ends it) and wakes the stream. */
static void feed_put(struct env *e, size_t i, const char *text, bool end)
{
    pthread_mutex_lock(&e->mu);
    struct feed *f = e->feed[i];
    if (f) {
        size_t n = strlen(text);
        assert_true(f->len + n <= sizeof(f->buf));
        memcpy(f->buf + f->len, text, n);
        f->len += n;
        f->end = f->end || end;
    }
    struct http_stream *st = e->st[i];
    pthread_mutex_unlock(&e->mu);
    http_stream_wake(st);
}

static bool one_stream(struct env *e)
{
    return e->nst >= 1;
}

static bool one_freed(struct env *e)
{
    return atomic_load(&e->freed) >= 1;
}

/* ---- a raw client that reads the chunked body itself ---- */

struct raw {
    int fd;
    char buf[1 << 16];
    size_t len; /* bytes in buf not consumed yet */
};

static void raw_open(struct raw *c, uint16_t port, const char *method, const char *path)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    struct timeval tv = {.tv_sec = WAIT_LIMIT_S};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c->len = 0;
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(c->fd >= 0);
    assert_int_equal(setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    assert_int_equal(connect(c->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    char req[256];
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: t\r\n\r\n", method, path);
    assert_int_equal(send(c->fd, req, (size_t)n, MSG_NOSIGNAL), n);
}

/* Reads more into the buffer: false when the connection closed. */
static bool raw_fill(struct raw *c)
{
    assert_true(c->len < sizeof(c->buf));
    ssize_t n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
    if (n <= 0)
        return false;
    c->len += (size_t)n;
    return true;
}

static void raw_consume(struct raw *c, size_t n)
{
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
}

/* The line up to CRLF (without it) into out; false when closed first. */
static bool raw_line(struct raw *c, char *out, size_t outlen)
{
    char *crlf;
    while (!(crlf = memmem(c->buf, c->len, "\r\n", 2)))
        if (!raw_fill(c))
            return false;
    size_t n = (size_t)(crlf - c->buf);
    snprintf(out, outlen, "%.*s", (int)n, c->buf);
    raw_consume(c, n + 2);
    return true;
}

/* The head: status returned, head text (lower-cased) into head. */
static int raw_head(struct raw *c, char *head, size_t headlen)
{
    char line[1024];
    size_t at = 0;
    assert_true(raw_line(c, line, sizeof(line)));
    int status = (int)strtol(line + 9, NULL, 10);
    head[0] = '\0';
    while (raw_line(c, line, sizeof(line)) && line[0]) {
        for (char *p = line; *p; p++)
            *p = (char)((*p >= 'A' && *p <= 'Z') ? *p + 32 : *p);
        at += (size_t)snprintf(head + at, headlen - at, "%s\n", line);
        assert_true(at < headlen);
    }
    return status;
}

/* One chunk into out (NUL-terminated): its size; 0 for the last chunk; -1
 * when the connection closed first. */
static long raw_chunk(struct raw *c, char *out, size_t outlen)
{
    char line[64];
    if (!raw_line(c, line, sizeof(line)))
        return -1;
    long n = strtol(line, NULL, 16);
    assert_true(n >= 0 && (size_t)n < outlen);
    while (c->len < (size_t)n + 2)
        if (!raw_fill(c))
            return -1;
    memcpy(out, c->buf, (size_t)n);
    out[n] = '\0';
    raw_consume(c, (size_t)n + 2);
    return n;
}

/* ---- the tests ---- */

struct collected {
    struct env *e;
    char data[NPIECES * 32];
    size_t len;
};

static int collect(const void *data, size_t len, void *ctx)
{
    struct collected *c = ctx;
    if (len == 0) /* httpc's once-a-second call */
        return 0;
    pthread_mutex_lock(&c->e->mu);
    if (len > sizeof(c->data) - c->len) /* more than the test sent: fails the length check */
        len = sizeof(c->data) - c->len;
    memcpy(c->data + c->len, data, len);
    c->len += len;
    pthread_cond_broadcast(&c->e->cond);
    pthread_mutex_unlock(&c->e->mu);
    return 0;
}

struct client {
    struct env *e;
    struct collected got;
    const char *path;
    int rc;
    long status;
};

static void *client_main(void *arg)
{
    struct client *cl = arg;
    char url[64], err[256];
    struct httpc *c = NULL;
    snprintf(url, sizeof(url), "http://127.0.0.1:%u", (unsigned)cl->e->port);
    cl->rc = httpc_new(url, NULL, &c, err, sizeof(err));
    if (cl->rc == 0)
        cl->rc = httpc_stream(c, cl->path, 0, collect, &cl->got, &cl->status, err, sizeof(err));
    httpc_free(c);
    return NULL;
}

static struct client *client_start(struct env *e, const char *path, pthread_t *t)
{
    struct client *cl = calloc(1, sizeof(*cl));
    assert_non_null(cl);
    cl->e = e;
    cl->got.e = e;
    cl->path = path;
    assert_int_equal(pthread_create(t, NULL, client_main, cl), 0);
    return cl;
}

static bool got_enough(struct env *e)
{
    return *e->got_len >= e->want_len;
}

static bool reads_found_nothing(struct env *e)
{
    return (size_t)atomic_load(&e->empty_reads) >= e->want_len;
}

/* Waits up to ms for the condition variable (e->mu held), failing the test
 * once the overall deadline dl has passed: for loops that poll a producer. */
static void tick(struct env *e, long ms, const struct timespec *dl)
{
    struct timespec t, now;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += ms * 1000 * 1000;
    t.tv_sec += t.tv_nsec / 1000000000;
    t.tv_nsec %= 1000000000;
    pthread_cond_timedwait(&e->cond, &e->mu, &t);
    clock_gettime(CLOCK_REALTIME, &now);
    assert_true(now.tv_sec < dl->tv_sec || (now.tv_sec == dl->tv_sec && now.tv_nsec < dl->tv_nsec));
}

static void pieces_arrive_in_order_across_sleeps_and_wakes(void **state)
{
    struct env *e = *state;
    pthread_t t;
    struct client *cl = client_start(e, "/pieces", &t);
    pthread_mutex_lock(&e->mu);
    wait_for(e, one_stream);
    pthread_mutex_unlock(&e->mu);
    char expect[NPIECES * 32];
    size_t at = 0;
    for (int k = 0; k < NPIECES; k++) {
        /* the stream has nothing and goes to sleep before each piece */
        pthread_mutex_lock(&e->mu);
        e->want_len = (size_t)k + 1;
        wait_for(e, reads_found_nothing);
        pthread_mutex_unlock(&e->mu);
        char piece[32];
        snprintf(piece, sizeof(piece), "piece %d;", k);
        at += (size_t)snprintf(expect + at, sizeof(expect) - at, "%s", piece);
        feed_put(e, 0, piece, false);
        /* the client has it before the next is made: the stream slept between */
        pthread_mutex_lock(&e->mu);
        e->got_len = &cl->got.len;
        e->want_len = at;
        wait_for(e, got_enough);
        pthread_mutex_unlock(&e->mu);
    }
    feed_put(e, 0, "", true);
    pthread_join(t, NULL);
    assert_int_equal(cl->rc, 0);
    assert_int_equal(cl->status, 200);
    assert_int_equal(cl->got.len, at);
    assert_memory_equal(cl->got.data, expect, at);
    pthread_mutex_lock(&e->mu);
    wait_for(e, one_freed); /* MHD lets go of the answer once the end is sent */
    pthread_mutex_unlock(&e->mu);
    assert_int_equal(atomic_load(&e->freed), 1);
    assert_true(http_stream_closed(e->st[0]));
    http_stream_wake(e->st[0]); /* closed: nothing happens */
    free(cl);
}

static bool race_waiting(struct env *e)
{
    return e->race_waiting;
}

static void a_wake_during_a_read_is_not_lost(void **state)
{
    struct env *e = *state;
    struct raw c;
    char head[2048], chunk[256];
    raw_open(&c, e->port, "GET", "/racy");
    pthread_mutex_lock(&e->mu);
    wait_for(e, race_waiting); /* the read runs, and has seen nothing */
    struct feed *f = e->feed[0];
    memcpy(f->buf, "late", 4);
    f->len = 4;
    f->end = true;
    e->race_woken = true;
    struct http_stream *st = e->st[0];
    pthread_mutex_unlock(&e->mu);
    http_stream_wake(st); /* lands while that read still runs */
    pthread_mutex_lock(&e->mu);
    pthread_cond_broadcast(&e->cond); /* now let the read return its 0 */
    pthread_mutex_unlock(&e->mu);
    assert_int_equal(raw_head(&c, head, sizeof(head)), 200);
    assert_non_null(strstr(head, "transfer-encoding: chunked"));
    assert_int_equal(raw_chunk(&c, chunk, sizeof(chunk)), 4);
    assert_string_equal(chunk, "late");
    assert_int_equal(raw_chunk(&c, chunk, sizeof(chunk)), 0);
    close(c.fd);
}

static void a_read_that_never_sleeps_sends_a_large_body(void **state)
{
    struct env *e = *state;
    /* count bytes and check the pattern without keeping them */
    struct raw *c = malloc(sizeof(*c));
    assert_non_null(c);
    char head[2048];
    static char chunk[HTTP_STREAM_BLOCK + 1];
    raw_open(c, e->port, "GET", "/big");
    assert_int_equal(raw_head(c, head, sizeof(head)), 200);
    size_t total = 0;
    long n;
    while ((n = raw_chunk(c, chunk, sizeof(chunk))) > 0) {
        for (long i = 0; i < n; i++)
            assert_int_equal(chunk[i], 'a' + (total + (size_t)i) % 26);
        total += (size_t)n;
    }
    assert_int_equal(n, 0);
    assert_int_equal(total, BIG_BYTES);
    close(c->fd);
    free(c);
    pthread_mutex_lock(&e->mu);
    wait_for(e, one_freed);
    pthread_mutex_unlock(&e->mu);
    assert_int_equal(atomic_load(&e->freed), 1);
}

static bool later_suspended(struct env *e)
{
    return e->later != NULL;
}

static void a_suspended_request_completes_with_a_stream_from_another_thread(void **state)
{
    struct env *e = *state;
    struct raw c;
    char head[2048], chunk[256];
    raw_open(&c, e->port, "GET", "/later");
    pthread_mutex_lock(&e->mu);
    wait_for(e, later_suspended);
    struct http_request *req = e->later;
    pthread_mutex_unlock(&e->mu);
    struct feed *f = feed_new(e, false);
    memcpy(f->buf, "from a worker", 13);
    f->len = 13;
    struct http_stream *st = NULL;
    assert_int_equal(http_request_add_header(req, "X-Node", "n1"), 0);
    assert_int_equal(http_request_complete_stream(req, 201, "text/plain; charset=utf-8", feed_read,
                                                  feed_free, f, &st),
                     0);
    assert_int_equal(raw_head(&c, head, sizeof(head)), 201);
    assert_non_null(strstr(head, "x-node: n1"));
    assert_non_null(strstr(head, "content-type: text/plain; charset=utf-8"));
    assert_int_equal(raw_chunk(&c, chunk, sizeof(chunk)), 13);
    assert_string_equal(chunk, "from a worker");
    pthread_mutex_lock(&e->mu);
    f->end = true;
    pthread_mutex_unlock(&e->mu);
    http_stream_wake(st);
    assert_int_equal(raw_chunk(&c, chunk, sizeof(chunk)), 0);
    close(c.fd);
    pthread_mutex_lock(&e->mu);
    wait_for(e, one_freed);
    pthread_mutex_unlock(&e->mu);
    http_stream_release(st);
    assert_int_equal(atomic_load(&e->freed), 1);
}

static void a_client_that_leaves_mid_stream_frees_the_context_once(void **state)
{
    struct env *e = *state;
    struct raw c;
    char head[2048], chunk[256];
    raw_open(&c, e->port, "GET", "/pieces");
    pthread_mutex_lock(&e->mu);
    wait_for(e, one_stream);
    pthread_mutex_unlock(&e->mu);
    feed_put(e, 0, "first", false);
    assert_int_equal(raw_head(&c, head, sizeof(head)), 200);
    assert_non_null(strstr(head, "x-stream: pieces"));
    assert_int_equal(raw_chunk(&c, chunk, sizeof(chunk)), 5);
    close(c.fd); /* the stream sleeps: only a wake lets the server notice */
    struct http_stream *st = e->st[0];
    pthread_mutex_lock(&e->mu);
    struct timespec dl = deadline();
    while (!one_freed(e)) {
        pthread_mutex_unlock(&e->mu);
        http_stream_wake(st); /* a producer's periodic wake, nothing to send */
        pthread_mutex_lock(&e->mu);
        tick(e, 20, &dl);
    }
    pthread_mutex_unlock(&e->mu);
    assert_true(http_stream_closed(st));
    for (int k = 0; k < 3; k++)
        http_stream_wake(st); /* the producer has not noticed yet: harmless */
    feed_put(e, 0, "late", true);
    http_server_stop(e->srv);
    assert_int_equal(atomic_load(&e->freed), 1);
}

static void a_client_that_leaves_while_data_flows_frees_the_context_once(void **state)
{
    struct env *e = *state;
    struct raw c;
    char head[2048];
    raw_open(&c, e->port, "GET", "/pieces");
    pthread_mutex_lock(&e->mu);
    wait_for(e, one_stream);
    pthread_mutex_unlock(&e->mu);
    assert_int_equal(raw_head(&c, head, sizeof(head)) >= 0, 1);
    close(c.fd);
    /* keep producing: the writes fail and MHD closes the connection */
    char piece[4096];
    memset(piece, 'x', sizeof(piece) - 1);
    piece[sizeof(piece) - 1] = '\0';
    pthread_mutex_lock(&e->mu);
    struct timespec dl = deadline();
    while (!one_freed(e)) {
        bool room = e->feed[0] && e->feed[0]->len == 0;
        pthread_mutex_unlock(&e->mu);
        if (room)
            feed_put(e, 0, piece, false);
        else
            http_stream_wake(e->st[0]);
        pthread_mutex_lock(&e->mu);
        tick(e, 5, &dl);
    }
    pthread_mutex_unlock(&e->mu);
    http_server_stop(e->srv);
    assert_int_equal(atomic_load(&e->freed), 1);
}

static bool all_streams(struct env *e)
{
    return e->nst == NSTREAMS;
}

static void stop_with_streams_open_ends_each_and_frees_each_context_once(void **state)
{
    struct env *e = *state;
    struct raw c[NSTREAMS];
    char head[2048], chunk[256];
    for (int i = 0; i < NSTREAMS; i++) {
        raw_open(&c[i], e->port, "GET", "/pieces");
        pthread_mutex_lock(&e->mu);
        while (e->nst <= (size_t)i) {
            struct timespec dl = deadline();
            assert_int_not_equal(pthread_cond_timedwait(&e->cond, &e->mu, &dl), ETIMEDOUT);
        }
        pthread_mutex_unlock(&e->mu);
    }
    pthread_mutex_lock(&e->mu);
    wait_for(e, all_streams);
    pthread_mutex_unlock(&e->mu);
    /* half of them sent something first; all sleep now */
    for (int i = 0; i < NSTREAMS; i += 2) {
        feed_put(e, (size_t)i, "hello", false);
        assert_int_equal(raw_head(&c[i], head, sizeof(head)), 200);
        assert_int_equal(raw_chunk(&c[i], chunk, sizeof(chunk)), 5);
    }
    http_server_stop(e->srv);
    assert_int_equal(atomic_load(&e->freed), NSTREAMS);
    for (int i = 0; i < NSTREAMS; i++) {
        assert_true(http_stream_closed(e->st[i]));
        http_stream_wake(e->st[i]); /* after stop: nothing */
        if (i % 2 == 0)             /* cut, not ended: no last chunk */
            assert_int_equal(raw_chunk(&c[i], chunk, sizeof(chunk)), -1);
        close(c[i].fd);
    }
    /* handles outlive the server object: teardown frees it, then releases them */
}

static void completing_after_stop_closes_the_stream_unsent(void **state)
{
    struct env *e = *state;
    struct raw c;
    char head[2048];
    raw_open(&c, e->port, "GET", "/later");
    pthread_mutex_lock(&e->mu);
    wait_for(e, later_suspended);
    struct http_request *req = e->later;
    pthread_mutex_unlock(&e->mu);
    http_server_stop(e->srv); /* answers it 503 */
    assert_int_equal(raw_head(&c, head, sizeof(head)), 503);
    close(c.fd);
    struct http_stream *st = NULL;
    assert_int_equal(http_request_complete_stream(req, 200, "text/plain", feed_read, feed_free,
                                                  feed_new(e, false), &st),
                     0);
    assert_non_null(st);
    assert_true(http_stream_closed(st));
    assert_int_equal(atomic_load(&e->freed), 1);
    http_stream_wake(st);
    http_stream_release(st);
}

static void bad_arguments_are_refused_and_their_context_freed(void **state)
{
    struct env *e = *state;
    struct raw c;
    char head[2048];
    raw_open(&c, e->port, "GET", "/bad");
    assert_int_equal(raw_head(&c, head, sizeof(head)), 200);
    pthread_mutex_lock(&e->mu);
    int want[5] = {GPO_EINVAL, GPO_EINVAL, GPO_EINVAL, 0, GPO_ESTATE};
    for (int i = 0; i < 5; i++)
        assert_int_equal(e->bad_rc[i], want[i]);
    pthread_mutex_unlock(&e->mu);
    assert_int_equal(atomic_load(&e->freed), 4); /* the refused ones' contexts */
    close(c.fd);
    http_server_stop(e->srv);
    assert_int_equal(atomic_load(&e->freed), 5);
}

static void head_of_a_stream_sends_headers_only(void **state)
{
    struct env *e = *state;
    struct raw c;
    char head[2048];
    raw_open(&c, e->port, "HEAD", "/big");
    assert_int_equal(raw_head(&c, head, sizeof(head)), 200);
    pthread_mutex_lock(&e->mu);
    wait_for(e, one_freed);
    pthread_mutex_unlock(&e->mu);
    close(c.fd);
    http_server_stop(e->srv);
    assert_int_equal(atomic_load(&e->freed), 1);
}

int main(void)
{
#define TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        TEST(pieces_arrive_in_order_across_sleeps_and_wakes),
        TEST(a_wake_during_a_read_is_not_lost),
        TEST(a_read_that_never_sleeps_sends_a_large_body),
        TEST(a_suspended_request_completes_with_a_stream_from_another_thread),
        TEST(a_client_that_leaves_mid_stream_frees_the_context_once),
        TEST(a_client_that_leaves_while_data_flows_frees_the_context_once),
        TEST(stop_with_streams_open_ends_each_and_frees_each_context_once),
        TEST(completing_after_stop_closes_the_stream_unsent),
        TEST(bad_arguments_are_refused_and_their_context_freed),
        TEST(head_of_a_stream_sends_headers_only),
    };
#undef TEST
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * router.h - `gpuorch router`: the HTTP/1.1 reverse proxy in front of
 * serving replicas (docs/router.md).
 *
 * Threads: two control threads (libcurl, util/httpc), one long-polling the
 * routing table from the controller, one posting the load report every
 * second (and at once when a hold queue fills from empty); N worker
 * threads each run a libevent base (plain events, no bufferevents, no
 * evhttp) listening on the same port (SO_REUSEPORT), with their own
 * keep-alive connections to the replicas. HTTP/1.1 framing is Node's
 * http-parser (http1.c); each socket is registered once, edge-triggered,
 * read into its connection's buffer and written with send() straight from
 * it, so a proxied request costs about four system calls (docs/router.md).
 *
 * The table is an immutable snapshot (struct rt_table), swapped by pointer
 * under router.lock and held by reference count: a worker keeps the one it
 * routes with until the poll thread wakes it for a new one. Services
 * and endpoints keep their identity (and counters) from one snapshot to the
 * next: the poll thread reuses the objects of the snapshot it replaces.
 * Counters that several threads change are atomics.
 */
#ifndef GPUORCH_ROUTER_ROUTER_H
#define GPUORCH_ROUTER_ROUTER_H

#include <pthread.h>
#include <sys/queue.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <http_parser.h>

#include "proto/proto.h"
#include "util/token.h"

#define RT_THREADS_MAX 64
#define RT_HIST_BOUNDS (PROTO_LATENCY_BUCKETS - 1) /* latency bounds (proto_latency_bounds_s) */
#define RT_CODES       500                         /* statuses 100..599 */

struct router_args {
    const char *server, *join_file, *listen, *name;
    int64_t threads, max_connections, max_body, max_header, idle_timeout_s;
    bool help;
};

struct event;
struct event_base;
struct rt_client;
struct rt_conn;
struct rt_service;
struct rt_table;
struct rt_worker;
struct httpc;

/* A replica's endpoint; lives as long as a snapshot or a request holds it. */
struct rt_endpoint {
    atomic_int refs;
    int64_t job, attempt;
    uint32_t replica;
    char addr[PROTO_HOST_MAX + 1];
    uint16_t port;
    atomic_bool gone;                     /* no longer in the table: free idle connections */
    atomic_uint inflight;                 /* requests sent, answer not ended */
    atomic_uint requests;                 /* arrived this report interval */
    struct rt_conn *pool[RT_THREADS_MAX]; /* each worker's own idle connections */
    uint32_t nidle[RT_THREADS_MAX];
};

/* A latency histogram, filled by any worker. */
struct rt_hist {
    atomic_ullong counts[RT_HIST_BOUNDS + 1]; /* the last: above every bound */
    atomic_ullong sum_us;
};

/* A service's counters, kept across snapshots. */
struct rt_stats {
    atomic_int refs;
    char name[PROTO_SPEC_NAME_MAX + 1];
    atomic_uint inflight, queued, requests;
    atomic_ullong load_us;         /* integral of (inflight + queued) over time, in us */
    atomic_llong load_at;          /* monotonic us of the last change of inflight + queued */
    atomic_ullong codes[RT_CODES]; /* answers by status, from 100 */
    struct rt_hist ttfb, total;
    /* The report thread's own: total's counts already reported. */
    unsigned long long total_reported[RT_HIST_BOUNDS + 1];
};

struct rt_route_ep {
    struct rt_endpoint *ep; /* a reference */
    bool draining;
};

struct rt_service {
    char *name, *model;
    char **hosts;
    size_t nhosts;
    uint8_t (*keys)[TOKEN_HASH_LEN];
    size_t nkeys;
    uint32_t concurrency_limit, queue_limit;
    int64_t queue_timeout_ms;
    struct rt_route_ep *eps;
    size_t neps;
    struct rt_stats *stats; /* a reference */
};

/* One snapshot of the routing table. */
struct rt_table {
    atomic_int refs;
    int64_t rev;
    struct rt_service *services;
    size_t nservices;
};

struct router {
    struct router_args a;
    char token[512];
    char name[PROTO_HOST_MAX + 1];
    pthread_mutex_t lock; /* table */
    struct rt_table *table;
    bool have_table; /* a table came from the controller at least once */
    atomic_bool stop;
    atomic_bool report_now; /* a queue went from empty to not */
    pthread_mutex_t wake_lock;
    pthread_cond_t wake; /* the control thread's: report now */
    struct rt_worker *workers[RT_THREADS_MAX];
    size_t nworkers;
    struct httpc *poll_client, *report_client; /* each used by its own control thread */
    atomic_uint connections;
    int64_t started_us;
};

/* ---- http1.c: HTTP/1.1 messages over http-parser (no I/O) ---- */

/* A growable byte buffer; {0} is an empty one. */
struct rt_buf {
    char *data;
    size_t len, cap;
};
/* 0, or GPO_ENOMEM (b unchanged). */
int rt_buf_reserve(struct rt_buf *b, size_t more);
int rt_buf_add(struct rt_buf *b, const void *p, size_t n);
int rt_buf_str(struct rt_buf *b, const char *s);
int rt_buf_printf(struct rt_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends each string given (rt_buf_cat(b, "a", s, "\r\n")). */
int rt_buf_cat_(struct rt_buf *b, ...) __attribute__((sentinel));
#define rt_buf_cat(b, ...) rt_buf_cat_((b), __VA_ARGS__, (const char *)NULL)
void rt_buf_release(struct rt_buf *b);

/* A header: offsets of its NUL-ended name and value in the arena, and
 * their lengths. */
struct rt_hdr {
    uint32_t name, value, name_len, value_len;
};

/* A message's head as parsed: the request's URL or the response's reason
 * (the "line"), then the headers, every string copied into the arena (so
 * the bytes read may go as soon as they are parsed). */
struct rt_msg {
    struct rt_buf arena;
    struct rt_hdr *hdrs;
    size_t nhdrs, caphdrs;
    uint32_t line;
    int at;            /* the string being collected */
    size_t head_bytes; /* against max_header */
    const char *fault; /* set by a callback that refused */
};
/* The URL (request) or reason (response); "" before any. */
const char *rt_msg_line(const struct rt_msg *m);
const char *rt_msg_name(const struct rt_msg *m, size_t k);
const char *rt_msg_value(const struct rt_msg *m, size_t k);
/* The first value of header `name` (any case), or NULL. */
const char *rt_msg_get(const struct rt_msg *m, const char *name);
/* Whether header `key` stays on its hop: hop-by-hop ones, Proxy-*, those
 * that `connection` (the Connection header's value, may be NULL) names. */
bool rt_hop_only(const char *key, const char *connection);

enum rt_stage { RT_HEAD, RT_BODY, RT_DONE, RT_FAULT };

/* A client connection's requests, one at a time. The body is collected
 * whole (at most max_body; the route may need its "model"), chunked or not;
 * the message stays until rt_reqr_next. */
struct rt_reqr {
    http_parser p;
    struct rt_msg m;
    struct rt_buf body;
    size_t max_header, max_body;
    enum rt_stage stage; /* RT_DONE: a whole request; RT_FAULT: see fault */
    const char *fault;   /* what is wrong, for the 400 (or 413) */
    int fault_code;
    int method; /* enum http_method */
    bool keep_alive, http11, expect_continue;
};
void rt_reqr_init(struct rt_reqr *r, size_t max_header, size_t max_body);
void rt_reqr_release(struct rt_reqr *r);
/* Parses up to len bytes; returns how many it took. It stops after a
 * whole request (stage RT_DONE: the rest waits for rt_reqr_next) or at a
 * fault (RT_FAULT, for good: the connection is to be closed). */
size_t rt_reqr_feed(struct rt_reqr *r, const char *data, size_t len);
/* After RT_DONE: ready for the next request. */
void rt_reqr_next(struct rt_reqr *r);
/* The request r holds as it goes to a replica (appended to out): uri,
 * end-to-end headers, X-Forwarded-For (peer appended; "" adds none),
 * X-Forwarded-Host/-Proto, Via, Host (host_fallback when the client sent
 * none), the body with its Content-Length. 0 or GPO_ENOMEM. */
int rt_req_forward(const struct rt_reqr *r, const char *uri, const char *peer,
                   const char *host_fallback, struct rt_buf *out);

/* A replica's answer to one request, read as it arrives and written, as it
 * is parsed, into what the client gets (out, borrowed): the head with the
 * replica's status and end-to-end headers, its Content-Length or else
 * chunked (an HTTP/1.0 client: the close ends the body), Via; the body
 * passed on piece by piece. Interim answers (1xx but 101) are dropped. */
struct rt_resr {
    http_parser p;
    struct rt_msg m;
    struct rt_buf *out;
    size_t max_header;
    bool head_req, client11, client_close;
    enum rt_stage stage; /* RT_HEAD, RT_BODY (the head is out), RT_DONE, RT_FAULT */
    const char *fault;
    int status;
    bool interim, chunk_out;
    bool close_out;  /* the client's connection closes after the answer */
    bool keep_alive; /* at RT_DONE: the replica's connection may serve again */
};
/* Ready for the answer to a request (its buffers kept from the last). */
void rt_resr_start(struct rt_resr *r, struct rt_buf *out, size_t max_header, bool head_req,
                   bool client11, bool client_close);
void rt_resr_release(struct rt_resr *r);
/* Parses up to len bytes; returns how many it took (it stops at RT_DONE). */
size_t rt_resr_feed(struct rt_resr *r, const char *data, size_t len);
/* The replica closed: RT_DONE for a body the close ends, else RT_FAULT. */
void rt_resr_eof(struct rt_resr *r);

/* ---- table.c ---- */
/* A new snapshot of `m` (borrowed) reusing the services' counters and the
 * endpoints of `old` (may be NULL); endpoints of old that the new one lacks
 * are marked gone. 0 and *ret (rt_table_unref), GPO_ENOMEM, GPO_EINVAL (a
 * key hash not hex). */
int rt_table_build(const struct proto_routes *m, const struct rt_table *old, struct rt_table **ret);
struct rt_table *rt_table_ref(struct rt_table *t);
void rt_table_unref(struct rt_table *t);
void rt_endpoint_unref(struct rt_endpoint *ep);
void rt_stats_unref(struct rt_stats *s);
/* The router's current table, a reference (NULL: none yet). */
struct rt_table *router_table(struct router *r);

/* Lookups: NULL when none. */
const struct rt_service *rt_find_name(const struct rt_table *t, const char *name, size_t len);
const struct rt_service *rt_find_host(const struct rt_table *t, const char *host);
const struct rt_service *rt_find_model(const struct rt_table *t, const char *model);
/* Whether `key` opens s (true when s has no keys). Constant time per key. */
bool rt_key_ok(const struct rt_service *s, const char *key);
/* A ready endpoint with room, by two random choices (fewest in flight),
 * skipping `avoid` (may be NULL); NULL when none can take a request.
 * `seed`: the worker's random state. */
struct rt_endpoint *rt_pick(const struct rt_service *s, const struct rt_endpoint *avoid,
                            uint64_t *seed);

int64_t rt_now_us(void);
/* Adds delta (+1/-1) to s's inflight or queued, keeping the load integral. */
void rt_stats_load(struct rt_stats *s, atomic_uint *which, int delta);
void rt_hist_add(struct rt_hist *h, int64_t us);

/* ---- control.c: the control threads (the poll, the report) ---- */
int rt_control_start(struct router *r, pthread_t ret[2], char *err, size_t errlen);
/* Asks for a report at once (a queue went from empty to not). */
void rt_report_soon(struct router *r);

/* ---- proxy.c: the workers and their client connections ---- */

TAILQ_HEAD(rt_held_list, rt_exchange);

struct rt_worker {
    struct router *r;
    size_t index;
    struct event_base *base;
    struct event *accept_ev, *wake;
    int listen_fd, wake_fd; /* wake_fd: an eventfd, written from any thread */
    struct rt_table *table; /* what this worker routes with (a reference) */
    uint64_t seed;
    struct rt_held_list held; /* requests waiting for an endpoint */
    size_t nheld;
    struct rt_client *dead_clients; /* closed in a callback, freed after it */
    struct rt_conn *dead_conns;
    bool accept_short; /* accept ran out of descriptors (logged once) */
    char rbuf[65536];  /* what replicas send is parsed from here, then copied out */
    pthread_t thread;
};

/* One request through a replica (embedded in its client connection). */
struct rt_exchange {
    TAILQ_ENTRY(rt_exchange) link; /* in the worker's held list */
    struct rt_client *c;
    struct rt_table *table; /* keeps s alive (a reference) */
    const struct rt_service *s;
    struct rt_stats *st;    /* a reference */
    struct rt_endpoint *ep; /* a reference while sent */
    struct rt_conn *conn;
    struct event *timer; /* while held */
    bool held, started, retried, fresh;
    int code;
    int64_t t0;
};

/* A client connection. */
struct rt_client {
    struct rt_worker *w;
    int fd;
    struct event *ev; /* read and write, edge-triggered, registered once */
    bool counted;     /* in router.connections (not one past --max-connections) */
    bool busy;        /* a request is being answered: x is live */
    bool rd_more;     /* the socket may hold more than was read */
    bool wr_blocked;  /* the last send would have blocked */
    bool closing;     /* close once out is written */
    bool lingering;   /* written and shut for writing: reading to the end */
    bool dead;
    bool continued; /* 100 Continue sent for this request */
    struct rt_reqr rq;
    struct rt_buf in, out; /* in: read, parsed from in_off; out: written from out_off */
    size_t in_off, out_off;
    struct rt_buf uri; /* the URI forwarded, NUL-ended */
    char peer[48];
    struct rt_exchange x;
    struct rt_client *next_dead;
};

/* A keep-alive connection of a worker to an endpoint. */
struct rt_conn {
    struct rt_worker *w;
    struct rt_endpoint *ep; /* borrowed: the pool it idles in is the endpoint's */
    int fd;
    struct event *ev;
    struct rt_exchange *x; /* NULL while idle */
    struct rt_resr rs;
    struct rt_buf out; /* the request, written from out_off */
    size_t out_off;
    bool connecting, reused, paused, rd_more, wr_blocked, dead;
    struct rt_conn *prev, *next; /* in the endpoint's idle list of this worker */
};

int rt_worker_new(struct router *r, size_t index, int listen_fd, struct rt_worker **ret);
/* Runs the worker's loop until router.stop (its own thread). */
void *rt_worker_run(void *arg);
/* Wakes a worker (from any thread): a new table, or a slot freed. */
void rt_worker_wake(struct rt_worker *w);
void rt_worker_free(struct rt_worker *w);
/* /metrics's text and GET /v1/models's body (caller frees), NULL when out
 * of memory; t may be NULL. */
char *rt_metrics_text(struct router *r, const struct rt_table *t, size_t *ret_len);
char *rt_models_json(const struct rt_table *t);
/* The known model names, ", "-separated, into buf. */
void rt_models_list(const struct rt_table *t, char *buf, size_t len);

/* Answers c's request with body (borrowed) or an OpenAI-style error, and
 * ends the request; extra: more header lines ("Name: v\r\n"), may be NULL;
 * close: the connection closes after. */
void rt_reply(struct rt_client *c, int code, const char *reason, const char *type, const char *body,
              size_t len, const char *extra, bool close);
void rt_reply_error(struct rt_client *c, int code, const char *reason, const char *type,
                    const char *code_name, const char *msg, const char *extra, bool close);
/* The request on c is answered (its answer is in c->out): the next may go. */
void rt_client_done(struct rt_client *c, bool close);
/* Writes what c->out holds; false when c died of it. */
bool rt_client_flush(struct rt_client *c);
/* Closes c (its exchange lost); freed after the callback. */
void rt_client_kill(struct rt_client *c);
/* Frees what died in this callback (the end of every top-level one). */
void rt_worker_reap(struct rt_worker *w);

/* ---- exchange.c: one request through a replica ---- */
/* Starts c->x for the request c->rq; s is in w->table, c->uri the URI. */
void rt_exchange_start(struct rt_client *c, const struct rt_service *s);
/* The client's connection closed under the exchange. */
void rt_exchange_lost(struct rt_exchange *x);
/* After a table swap, or a slot freed: tries every held request again. */
void rt_held_retry(struct rt_worker *w);
/* Frees the worker's idle connections to endpoints gone from the table. */
void rt_pool_sweep(struct rt_worker *w, const struct rt_table *old);
/* The client caught up with a paused answer: the replica is read again. */
void rt_exchange_resume(struct rt_exchange *x);
/* Frees a closed connection (rt_worker_reap). */
void rt_conn_free(struct rt_conn *k);

/* ---- router.c ---- */
int router_command(int argc, char **argv);
void router_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif

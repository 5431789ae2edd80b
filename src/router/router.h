/*
 * router.h - `gpuorch router`: the HTTP/1.1 reverse proxy in front of
 * serving replicas (docs/router.md).
 *
 * Threads: two control threads (libcurl, util/httpc), one long-polling the
 * routing table from the controller, one posting the load report every
 * second (and at once when a hold queue fills from empty); N worker
 * threads each run a libevent base with an evhttp server listening on the
 * same port (SO_REUSEPORT) and their own keep-alive connections to the
 * replicas.
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
struct evhttp;
struct evhttp_connection;
struct evhttp_request;
struct evkeyvalq;
struct rt_exchange;
struct rt_service;
struct rt_table;
struct httpc;

/* One keep-alive connection of a worker to an endpoint. */
struct rt_conn {
    struct evhttp_connection *evcon;
    struct rt_conn *next; /* in the idle list */
};

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

/* ---- proxy.c: the workers ---- */

struct rt_worker {
    struct router *r;
    size_t index;
    struct event_base *base;
    struct evhttp *http;
    struct event *wake;
    struct rt_table *table; /* what this worker routes with (a reference) */
    uint64_t seed;
    TAILQ_HEAD(rt_held_list, rt_exchange) held; /* requests waiting for an endpoint */
    size_t nheld;
    pthread_t thread;
};

/* An incoming connection, from its first request until it closes. */
struct rt_client {
    struct rt_worker *w;
    struct evhttp_connection *evcon;
    int fd;
    struct rt_exchange *x; /* the request being proxied, if any */
};

int rt_worker_new(struct router *r, size_t index, int listen_fd, struct rt_worker **ret);
/* Runs the worker's loop until router.stop (its own thread). */
void *rt_worker_run(void *arg);
/* Wakes a worker (from any thread): a new table. */
void rt_worker_wake(struct rt_worker *w);
void rt_worker_free(struct rt_worker *w);
/* /metrics's text and GET /v1/models's body (caller frees), NULL when out
 * of memory; t may be NULL. */
char *rt_metrics_text(struct router *r, const struct rt_table *t, size_t *ret_len);
char *rt_models_json(const struct rt_table *t);
/* The known model names, ", "-separated, into buf. */
void rt_models_list(const struct rt_table *t, char *buf, size_t len);

/* Answers req with body (text, borrowed) or an OpenAI-style error. */
void rt_reply(struct evhttp_request *req, int code, const char *reason, const char *type,
              const char *body);
void rt_reply_error(struct evhttp_request *req, int code, const char *reason, const char *type,
                    const char *code_name, const char *msg);
/* What is wrong with a message's framing headers, or NULL. */
const char *rt_framing_fault(const struct evkeyvalq *h);

/* ---- exchange.c: one request through a replica ---- */
/* Takes uri (malloc'd, the URI to forward); s is in w->table. */
void rt_exchange_start(struct rt_worker *w, struct rt_client *c, struct evhttp_request *req,
                       const struct rt_service *s, char *uri);
/* The client's connection closed under the exchange. */
void rt_exchange_lost(struct rt_exchange *x);
/* After a table swap: tries every held request again. */
void rt_held_retry(struct rt_worker *w);
/* Frees the worker's idle connections to endpoints gone from the table. */
void rt_pool_sweep(struct rt_worker *w, const struct rt_table *old);

/* ---- router.c ---- */
int router_command(int argc, char **argv);
void router_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif

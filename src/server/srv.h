/*
 * srv.h - the controller's one server object: its configuration, its clock,
 * the store and the HTTP server, and each subsystem (jobs, nodes, config,
 * cost, monitor, auth, sched, serve), started and stopped by server.c from a table.
 * Subsystems below sched and api never see this struct: they get what they
 * use at their init.
 *
 * Threads and the lock. Handlers run on the HTTP polling thread, store
 * completions on the store's writer thread, the scheduling loop on its own.
 * `lock` (the state lock) guards the configuration, jobs, nodes, config,
 * cost, monitor and serve (each header says what it owns); sched's core state is
 * the loop thread's; auth does not change after start. Nobody holds the lock
 * across a store commit: commits are asynchronous (the loop releases the
 * lock while it waits for its own), and their completions take the lock
 * themselves to apply what was committed.
 *
 * Write-through. A change is built as a store batch from the current state,
 * committed, and applied to memory only in the completion, once durable; the
 * request that caused it is suspended meanwhile and answered from there. So
 * memory never holds what the disk does not.
 *
 * Time. The clock is here, once: the loop and the handlers read it through
 * srv_now_ms and pass the time down; nothing below reads a clock.
 */
#ifndef GPUORCH_SERVER_SRV_H
#define GPUORCH_SERVER_SRV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "http/http.h"
#include "server/auth/auth.h"
#include "server/config/config.h"
#include "server/cost/cost.h"
#include "server/jobs/jobs.h"
#include "server/monitor/monitor.h"
#include "server/nodes/nodes.h"
#include "store/store.h"

struct sched;
struct serve;
struct migctl;
struct lead;

struct server_config {
    char *data_dir;
    char *bind; /* address literal */
    uint16_t port;
    char *tls_cert, *tls_key;
    size_t body_limit;
    int64_t pass_interval_ms; /* the loop's timer */
    int64_t node_timeout_ms;
    bool access_log;                /* one line per request on stderr */
    char *port_file;                /* where to write the port once it serves, or NULL */
    char *cost_tz;                  /* --cost-timezone: budgets' months; NULL: UTC */
    bool metrics_public;            /* --metrics-public: GET /metrics without a token */
    int64_t metrics_retention_days; /* --metrics-retention-days (default 30) */
    int64_t metrics_minute_ms;      /* --metrics-minute-ms: for tests only (default 60000) */
    bool recover;                   /* --recover: a damaged store is recovered, not refused */
    int64_t idempotency_ttl_ms;     /* --idempotency-ttl: how long a key names its job */
    /* Several controllers (docs/admin-guide.md, "Several controllers"). */
    char *store_url;  /* --store: NULL for SQLite in data_dir, else postgres://... */
    char *advertise;  /* --advertise: the URL followers redirect to; NULL: from --listen */
    int64_t lease_ms; /* --lease: the leader's lease in the store (default 5 s) */
    /* Node fencing: an agent that has reached no leader for fence_lease_ms
     * stops its jobs (SIGTERM, SIGKILL after fence_grace_ms); the controller
     * ends a silent node's attempts only after last heartbeat + lease +
     * grace + SRV_FENCE_MARGIN_MS, and never before the node timeout. 0: off. */
    int64_t fence_lease_ms;
    int64_t fence_grace_ms;
};

/* Slack between an agent's fence deadline and the controller's requeue:
 * process exit after SIGKILL, and clock rates. */
#define SRV_FENCE_MARGIN_MS 2000

/* The server's clock: wall time (ms since the epoch, UTC) and a monotonic
 * one (ns), for durations. Tests replace them. */
struct srv_clock {
    int64_t (*now_ms)(void *ctx);
    int64_t (*mono_ns)(void);
    void *ctx;
};

struct server {
    struct server_config cfg;
    struct srv_clock clock;
    struct store *store;
    struct http_server *http;
    struct http_route *routes; /* the HTTP server's (api_routes_build) */
    int64_t epoch;             /* this controller's leader epoch */
    struct lead *lead;         /* lead/lead.h: whether it leads (borrowed; NULL: always) */

    pthread_mutex_t lock; /* the state lock */
    struct cluster cluster;
    struct jobs jobs;
    struct nodes nodes;
    struct config config;
    struct cost cost;
    struct monitor monitor;
    struct auth auth;         /* immutable after start */
    struct sched *sched;      /* sched/sched.h */
    struct serve *serve;      /* serve/serve.h: the serving runtime */
    struct migctl *mig;       /* mig/mig.h: MIG instances and repartition plans */
    atomic_uint logs_workers; /* log proxy threads alive (api/logs.c) */
    atomic_bool logs_stop;    /* set at stop: proxy workers give up waiting */
};

/* Ms since the epoch, UTC, by the server's clock. */
int64_t srv_now_ms(const struct server *s);
/* Nanoseconds of the server's monotonic clock. */
int64_t srv_mono_ns(const struct server *s);
/* The same in ms: what durations (a node's silence) are measured on. */
int64_t srv_mono_ms(const struct server *s);

/* The real clocks (CLOCK_REALTIME, CLOCK_MONOTONIC). */
int64_t srv_clock_realtime_ms(void *ctx);
int64_t srv_clock_monotonic_ns(void);

/*
 * Makes the subsystems of s (its cfg and clock set; the store opened) wire
 * up, without starting anything: for server.c, and for tests that drive
 * the subsystems with no HTTP server or loop thread. 0 or GPO_ENOMEM.
 */
int srv_init(struct server *s);
/* Frees what srv_init made and what the subsystems hold (not the store). */
void srv_release(struct server *s);

#endif

/*
 * serve.h - the serving runtime: what the controller knows of each service's
 * replicas while it runs, and what it does about them. A replica is a job
 * (its spec's serve part names the service, the replica's number and the
 * generation it runs); this subsystem submits those jobs, drains and stops
 * them, rolls them on a new generation, replaces failed ones with a back-off,
 * and tells the routers where the ready ones listen (docs/serving.md).
 *
 * Owns: struct serve: per service its replicas (job, number, generation,
 * state, node, port, readiness, in-flight requests), the autoscaler's state
 * and last decision, what was observed, the crash-loop back-off; the routers'
 * latest load reports (a report older than SERVE_REPORT_TTL_MS counts 0);
 * the routing table's revision and the routers' long-polls waiting for it.
 * The services themselves are the configuration's (struct cluster_service).
 *
 * Lock: the controller's state lock guards everything here (borrowed at
 * serve_init). Functions taking a server are called with it held, except
 * serve_release_waiters and the long-poll timeout, which take it
 * themselves. The reconcile (serve_tick) runs on the scheduling loop's
 * thread, as a task of its table; its writes are committed asynchronously
 * and applied in their completions, as the API's are.
 *
 * A controller restart rebuilds the replicas from the jobs (serve_load) and
 * their endpoints from the agents' next reports.
 */
#ifndef GPUORCH_SERVER_SERVE_SERVE_H
#define GPUORCH_SERVER_SERVE_SERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cluster/cluster.h"
#include "core/autoscale.h"
#include "http/http.h"
#include "proto/proto.h"

struct server;
struct prom;
struct job;

#define SERVE_TICK_MS          1000          /* the reconcile's period */
#define SERVE_REPORT_TTL_MS    3000          /* a router's report counts this long */
#define SERVE_ROUTER_FORGET_MS 60000         /* a router silent this long: its record is reused */
#define SERVE_BACKOFF_MIN_MS   INT64_C(1000) /* the first failure's back-off */
#define SERVE_BACKOFF_MAX_MS   (INT64_C(300) * 1000) /* doubling up to this */
#define SERVE_BACKOFF_RESET_MS                                                                     \
    (INT64_C(600) * 1000)           /* ready this long: the failures are forgiven */
#define SERVE_WAIT_DEFAULT_MS 30000 /* a routes long-poll's default wait */
#define SERVE_WAIT_MAX_MS     60000

#define SERVE_REPLICA_STATES(X)                                                                    \
    X(STARTING, "starting") /* pending or launched, not ready yet */                               \
    X(READY, "ready")       /* in the routers' table, takes requests */                            \
    X(DRAINING, "draining") /* in the table, takes nothing new; stopped once idle */               \
    X(FAILED, "failed")     /* out of the table; being stopped and replaced */
enum serve_replica_state {
#define SERVE_REPLICA_ENUM(name, text) SERVE_##name,
    SERVE_REPLICA_STATES(SERVE_REPLICA_ENUM)
#undef SERVE_REPLICA_ENUM
        SERVE_NSTATES
};

/* "starting", ...; "unknown" out of range. */
const char *serve_replica_state_name(enum serve_replica_state st);

struct serve_replica {
    int64_t job;
    uint32_t replica;
    uint64_t generation;
    enum serve_replica_state state;
    int64_t attempt;                 /* of the last endpoint report; 0: none */
    char node[CLUSTER_HOST_MAX + 1]; /* "" until reported */
    uint32_t port;                   /* 0 until reported */
    int64_t ready_ms;                /* when it became ready; 0: not yet */
    int64_t drain_ms;                /* when it began draining or failed */
    uint32_t inflight;               /* the routers' latest reports, summed */
    int64_t metric_milli;            /* its own metric; PROTO_NONE: none */
    bool killing;                    /* its kill is committed or on its way */
};

/* The crash-loop back-off: no replica starts before until_ms. */
struct serve_backoff {
    uint32_t failures; /* in a row; 0: none */
    int64_t until_ms;
    char reason[200];
};

/* The answers of the last SERVE_LATENCY_WINDOW_S seconds by total latency
 * (the routers' reports, summed): one slot per second. */
#define SERVE_LATENCY_WINDOW_S 60
struct serve_latency {
    int64_t at_s[SERVE_LATENCY_WINDOW_S]; /* the second a slot holds; 0: none */
    uint32_t counts[SERVE_LATENCY_WINDOW_S][PROTO_LATENCY_BUCKETS];
};

struct serve_service {
    char *name;
    struct serve_replica *v;
    size_t n, cap;
    uint32_t next_replica;      /* the next replica's number */
    uint32_t submitting;        /* replica jobs whose commit has not completed */
    struct autoscale_state *as; /* owned (large) */
    struct autoscale_decision decision;
    int64_t decision_ms; /* 0: none yet */
    int32_t decision_from;
    int64_t concurrency_milli, rps_milli, metric_milli; /* observed; metric PROTO_NONE: none */
    uint32_t queued, inflight;
    struct serve_latency *latency; /* owned; made at the first report that carries one */
    char blocked[400]; /* why no replica may be submitted now (the team's budget); "" if none */
    struct serve_backoff backoff;
    int64_t drain_timeout_ms; /* the configuration's, kept for a deleted service */
    bool deleted;             /* gone from the configuration: drained, then forgotten */
};

/* One router's latest report, the part kept. */
struct serve_load_replica {
    int64_t job;
    uint32_t inflight;
};
struct serve_load {
    char *service;
    int64_t concurrency_milli;
    uint32_t inflight, queued, requests;
    struct serve_load_replica *replicas;
    size_t nreplicas;
};
struct serve_router {
    char *name;
    int64_t at_ms;
    int64_t interval_ms;
    struct serve_load *loads;
    size_t nloads;
};

struct serve_waiter;

struct serve {
    pthread_mutex_t *lock;    /* borrowed: the state lock */
    struct serve_service **v; /* by name */
    size_t n, cap;
    struct serve_router *routers; /* by name */
    size_t nrouters, routers_cap;
    int64_t rev;                  /* of the routing table */
    struct serve_waiter *waiters; /* routers' long-polls */
    int64_t last_tick_ms;
    bool urgent; /* a router holds a request for a service at zero: reconcile at once */
};

void serve_init(struct serve *sv, pthread_mutex_t *lock);
/* Frees every runtime (waiters must have been released). */
void serve_release(struct serve *sv);

/* At start, after the jobs are loaded: the replicas of the jobs that have
 * not ended (their spec's serve part). 0 or GPO_ENOMEM with a message. */
int serve_load(struct server *s, char *err, size_t errlen);

/* ---- the reconcile (serve/reconcile.c) ----------------------------------- */

/* When the reconcile is due next (server time, ms): a tick after the last
 * (now_ms when the last is later, the wall clock stepped back), now when a
 * router asked for a replica, INT64_MAX while there is no service. */
int64_t serve_due_ms(const struct server *s, int64_t now_ms);
/* One reconcile at now_ms: the jobs' states into the replicas, the
 * observations into each autoscaler, its decision acted on (replica jobs
 * submitted, drained, stopped, rolled, replaced). On the loop's thread. */
void serve_tick(struct server *s, int64_t now_ms);

/* ---- reports (serve/serve.c) --------------------------------------------- */

/* Job j's RUNNING report from `node` carried endpoint ep (port not 0):
 * the replica's port and readiness. Not a replica: nothing. */
void serve_endpoint(struct server *s, const struct job *j, const char *node,
                    const struct proto_endpoint *ep, int64_t now_ms);

/* A router's report (borrowed) at now_ms replaces its last one; a service
 * with a queued request and no replica asks for a reconcile at once. 0 or
 * GPO_ENOMEM. */
int serve_router_report(struct server *s, const struct proto_router_report *rep, int64_t now_ms);

/* ---- the routing table (serve/routes.c) ---------------------------------- */

/* The table as GET /v1/router/routes answers it (proto_routes' JSON): a new
 * object, or NULL when out of memory. */
json_t *serve_routes_json(struct server *s);
/* The table changed: its revision moves and the long-polls are answered. */
void serve_routes_changed(struct server *s);
/* A service was written or deleted (the configuration's write completion,
 * lock held): the routers learn its name, hosts, keys and limits at once,
 * and the next turn of the loop reconciles it. */
void serve_service_changed(struct server *s);
/* Suspends a router's long-poll until the revision moves or wait_ms pass.
 * 0, or GPO_* when it did not suspend (the caller answers then). */
int serve_routes_wait(struct server *s, struct http_request *req, unsigned wait_ms);
/* Answers every long-poll with 503 (the server is stopping). Takes the lock. */
void serve_release_waiters(struct server *s);

/* ---- what people see (serve/status.c) ------------------------------------ */

/* The "status" of service `svc` at now_ms (GET /v1/services): a new object,
 * or NULL when out of memory; its "cost" is 0 until serve_status_cost. */
json_t *serve_status_json(struct server *s, const struct cluster_service *svc, int64_t now_ms);
/* Fills status.cost (GPU-hours and cost of every replica job a service ever
 * had, from the ledger) of each service object in the array `services`.
 * NOT under the lock: it reads the store, then takes the lock. */
void serve_status_cost(struct server *s, json_t *services, int64_t now_ms);
/* The families gpuorch_service_replicas{service,state},
 * gpuorch_service_desired_replicas{service},
 * gpuorch_service_requests_inflight{service} into p. */
void serve_metrics(const struct serve *sv, struct prom *p);

/* ---- pure parts (serve/plan.c) ------------------------------------------- */

/* The back-off after `failures` failures in a row: 1 s doubling to 5 min. */
int64_t serve_backoff_ms(uint32_t failures);

/* What one reconcile does to a service's replicas. */
struct serve_plan {
    int32_t start; /* replica jobs to submit, at the current generation */
    size_t *drain; /* indices into the replicas to drain (caller's array of n) */
    size_t ndrain;
};

/*
 * The plan for replicas v[0..n) (plus `submitting` jobs on their way, which
 * count as starting) toward `desired` at `generation`: start what is
 * missing; on a generation change roll with a surge of one (a new replica
 * starts while all the old ones serve; an old one drains once the count is
 * over); over the count, drain the starting ones first (old generation
 * first), then ready ones, old generation first, fewest in flight first.
 * Draining and failed replicas do not count. `hold_starts`: the back-off
 * holds new replicas.
 */
void serve_plan_make(const struct serve_replica *v, size_t n, uint32_t submitting, int32_t desired,
                     uint64_t generation, bool hold_starts, struct serve_plan *out);

/* Whether draining replica r is done at now_ms: nothing in flight, or the
 * drain timeout passed. */
bool serve_drain_done(const struct serve_replica *r, int64_t now_ms, int64_t drain_timeout_ms);

#endif

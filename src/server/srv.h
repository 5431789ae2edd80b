/*
 * srv.h - the controller's private header: the one server object and what
 * its modules (server.c, auth.c, jobs.c, api_*.c, loop.c) share.
 *
 * Threads and the lock. Handlers run on the HTTP polling thread; store
 * completions on the store's writer thread; the scheduling loop on its own.
 * Everything in struct server below `lock` is guarded by it, but `sched`
 * (the core's carry-over), which only the loop thread touches, also while
 * it runs a pass with the lock released. Nobody holds the lock across a
 * store commit: commits are asynchronous (the loop releases the lock while
 * it waits for its own), and their completions take the lock themselves to
 * apply what was committed.
 *
 * Write-through. A change is built as a store batch from the current state,
 * committed, and applied to memory only in the completion, once durable; the
 * request that caused it is suspended meanwhile and answered from there.
 * So memory never holds what the disk does not.
 */
#ifndef GPUORCH_SERVER_SRV_H
#define GPUORCH_SERVER_SRV_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "http/http.h"
#include "cluster/jobspec.h"
#include "cluster/cluster.h"
#include "core/sched.h"
#include "store/store.h"

/* The states of a job, as the API and the store name them. */
#define SRV_JOB_STATES(X)                                                                          \
    X(PENDING, "PENDING", false)                                                                   \
    X(RUNNING, "RUNNING", false)                                                                   \
    X(COMPLETED, "COMPLETED", true)                                                                \
    X(FAILED, "FAILED", true)                                                                      \
    X(CANCELLED, "CANCELLED", true)                                                                \
    X(TIMEOUT, "TIMEOUT", true)                                                                    \
    X(PREEMPTED, "PREEMPTED", true)                                                                \
    X(NODE_FAIL, "NODE_FAIL", true)

enum srv_job_state {
#define SRV_JOB_STATE_ENUM(name, text, final) SRV_JOB_##name,
    SRV_JOB_STATES(SRV_JOB_STATE_ENUM)
#undef SRV_JOB_STATE_ENUM
        SRV_JOB_NSTATES
};

const char *srv_job_state_name(enum srv_job_state s);
/* -1 if `name` is no state. */
int srv_job_state_parse(const char *name);
bool srv_job_state_final(enum srv_job_state s);

/* A user as the API sees it (from the token). */
struct srv_user {
    int64_t id;
    char name[64];
    char team[64];      /* "" when none */
    char unix_user[33]; /* "" when none */
    bool admin;
    bool valid; /* set by srv_authorize */
};

/* One GPU an attempt holds, by name (indices change when the cluster does). */
struct srv_share {
    char *node;
    char *uuid;
    uint32_t milli;
    uint32_t mem_mib;
    /* The GPU's latest sample while the attempt holds it (ingest.c);
     * sample_ms 0: none yet. */
    int64_t sample_ms;
    int32_t util_pct;     /* -1: not reported */
    int64_t mem_used_mib; /* -1: not reported */
};

/* One node's part of an attempt: CPUs and host memory there. */
struct srv_part {
    char *node;
    uint32_t cpus;
    uint64_t mem_mib;
    bool completed; /* a gang's rank here reported COMPLETED (in memory: the agent
                       repeats the report until the whole gang has) */
};

/* idle.c's view of one attempt (all 0: not seen yet). Times in ms. */
struct srv_idle_track {
    int64_t active_ms;      /* last sample of a GPU of it at or above the threshold, or when
                               the tracker first saw it running */
    int64_t since_ms;       /* flagged: the idle stretch began then (= active_ms); 0: not */
    int64_t flagged_ms;     /* when it was flagged */
    int64_t warned_ms;      /* requeue/cancel: when it was warned; 0: not */
    int64_t action_ms;      /* ... and when the action is due */
    uint32_t threshold_pct; /* the policy it was flagged under */
    int64_t window_s;
    enum cluster_idle_action action;
};

/* A job's current attempt, while it holds resources (assigned, running or
 * being killed) and until its end is reported. */
struct srv_attempt {
    int64_t n;         /* 1, 2, ...: the attempt's number; 0: none active */
    bool running;      /* the agent reported it started */
    bool kill;         /* the controller wants it stopped */
    char *kill_reason; /* "preempted", "cancelled" (owned) */
    int64_t kill_ms;   /* when the kill was decided */
    int64_t grace_ms;
    int64_t start_ms;
    bool borrowed;
    struct srv_part *parts;
    size_t nparts;
    struct srv_share *shares;
    size_t nshares;
    /* Samples of the attempt's GPUs since its current ledger segment began:
     * ingest.c adds, ledger.c takes them into the segment's row and zeroes
     * them. A GPU shared by several attempts counts for each. */
    uint64_t util_sum;     /* utilization_pct summed over the samples */
    uint64_t util_samples; /* GPU samples */
    uint64_t idle_samples; /* of which under the team's idle threshold */
    /* The open ledger segment (ledger.c): since seg_start_ms at seg_rate_micro
     * per hour (its GPUs' prices then: a price change closes it); seg_seq is
     * the seq of its next ledger row. seg_start_ms 0: not opened yet. */
    int64_t seg_start_ms, seg_seq, seg_rate_micro;
    /* A price change that closes the open segment is being committed: its row
     * ends at seg_pending_ms, and the next row's seq is seg_pending_seq (0:
     * none pending). An end planned meanwhile starts its row there, so the
     * two rows meet instead of overlapping, whichever commits first (when the
     * end does, srv_end_apply also charges the change's row to the totals).
     * seg_pending_util: the samples its row took (sum, samples, idle). */
    int64_t seg_pending_ms, seg_pending_seq;
    uint64_t seg_pending_util[3];
    int64_t seg_pending_start_ms, seg_pending_cost; /* that row's start and cost */
    struct srv_idle_track idle;                     /* idle.c's tracker */
};

/* A job in memory: everything the API and the loop read, mirrored from its
 * store row. */
struct srv_job {
    int64_t id;
    int64_t user_id;
    char *user;      /* owned */
    char *unix_user; /* owned, or NULL: the account its attempts run as */
    char *team;      /* owned */
    enum srv_job_state state;
    int64_t submit_ms, updated_ms;
    int64_t array_id, array_index; /* STORE_NULL: not in an array */
    char *reason;                  /* owned, or NULL: why it ended or was requeued */
    struct jobspec spec;
    /* From the last scheduling pass, for a pending job. */
    char *wait;           /* owned, or NULL: the reason it waits */
    int64_t est_start_ms; /* -1: unknown */
    int64_t queued_ms;    /* when it (re)entered the queue: the core's submit time */
    int64_t attempts;     /* attempts made so far (the last one's number) */
    uint32_t failures;    /* attempts that ended FAILED, TIMEOUT or NODE_FAIL */
    int64_t cost_micro;   /* its ledger rows (ledger.c); the open segment accrues apart */
    struct srv_attempt att;
};

/* Frees what an attempt holds and zeroes it. */
void srv_attempt_release(struct srv_attempt *a);
/* The attempt's nodes and GPUs as stored (attempts.nodes / attempts.gpus):
 * new JSON texts (caller frees), or -ENOMEM. */
int srv_attempt_encode(const struct srv_attempt *a, char **ret_nodes, char **ret_gpus);
/* Reads them back into *a (parts and shares only); 0 or -EINVAL. */
int srv_attempt_decode(const char *nodes, struct srv_attempt *a);
/* Adds attempt a of `job` to b as its row in `state` (end_ms, exit_code and
 * signal STORE_NULL when not known; reason may be NULL), made under `epoch`.
 * 0 or -ENOMEM. */
int srv_attempt_row(struct store_batch *b, int64_t epoch, int64_t job, const struct srv_attempt *a,
                    const char *state, const char *reason, int64_t end_ms, int64_t exit_code,
                    int64_t signal);

/* An attempt that ended, waiting for the loop to charge its usage. */
struct srv_ended {
    int64_t job;
    int64_t end_ms;
    struct srv_attempt att; /* owned */
};

/* A node's runtime: heartbeats, the revision of its assignments, and the
 * agents' long-polls waiting for it to change. */
struct srv_waiter;
struct srv_node_rt {
    char name[CLUSTER_HOST_MAX + 1];
    int64_t last_heartbeat_ms;
    uint64_t rev;
    struct srv_waiter *waiters;
    json_t *sample;    /* owned, or NULL: the last heartbeat's GPU figures */
    json_t *dirty;     /* owned, or NULL: UUIDs of GPUs that an ended job's processes
                          still occupy; passes offer them no work */
    int64_t sample_ms; /* when it arrived */
};

struct server_config {
    char *data_dir;
    char *bind; /* address literal */
    uint16_t port;
    char *tls_cert, *tls_key;
    size_t body_limit;
    int64_t pass_interval_ms; /* the loop's timer */
    int64_t node_timeout_ms;
    bool quiet;                     /* no access log */
    char *cost_tz;                  /* --cost-timezone: budgets' months; NULL: UTC */
    bool metrics_public;            /* --metrics-public: GET /metrics without a token */
    int64_t metrics_retention_days; /* --metrics-retention-days (default 30) */
    int64_t metrics_minute_ms;      /* --metrics-minute-ms: for tests only (default 60000) */
};

/* GET /metrics' own histograms (api_metrics.c), kept in memory since start. */
#define SRV_WAIT_BUCKETS   14   /* gpuorch_wait_seconds: 1 s .. 1 day */
#define SRV_PASS_BUCKETS   14   /* gpuorch_scheduling_pass_duration_seconds: 1 ms .. 10 s */
#define SRV_WAIT_HISTS_MAX 4096 /* (team, class) pairs; later new pairs are not counted */
struct srv_wait_hist {
    char team[CLUSTER_NAME_MAX + 1];
    char priority[CLUSTER_NAME_MAX + 1];
    uint64_t counts[SRV_WAIT_BUCKETS]; /* per bucket, not cumulative */
    uint64_t count;                    /* all observations, those over the last bound too */
    double sum_s;
};
struct srv_metrics {
    struct srv_wait_hist *waits; /* sorted by (team, priority) */
    size_t nwaits, waits_cap;
    uint64_t pass_counts[SRV_PASS_BUCKETS];
    uint64_t pass_count;
    double pass_sum_s;
};

struct server {
    struct server_config cfg;
    struct store *store;
    struct http_server *http;
    int64_t epoch; /* this controller's leader epoch */
    char admin_token_path[4096];
    uint8_t join_hash[32];    /* SHA-256 of the join token */
    uint8_t logs_key[32];     /* DATA/logs.key: the key of the log tokens nodes get */
    atomic_uint logs_workers; /* log proxy threads alive (api_logs.c) */
    atomic_bool logs_stop;    /* set by stop: proxy workers give up waiting */

    pthread_mutex_t lock;
    /* guarded by lock: */
    struct cluster cluster;       /* teams, pools, classes, nodes (users: the store) */
    struct srv_node_rt *nodes_rt; /* sorted by name; one per model node */
    size_t nnodes_rt, nodes_rt_cap;
    struct sched_state sched; /* the core's carry-over */
    struct sched_policy policy;
    bool loop_dirty, stopping;
    pthread_cond_t loop_cv;
    pthread_t loop_thread;
    bool loop_started;
    uint64_t passes;
    int64_t state_saved_ms; /* when the loop last committed the core's state */
    /* Attempts that ended since the last pass: the loop charges their last
     * stretch of GPU-time to fair share and LAS (sched_state_charge_end). */
    struct srv_ended *ended;
    size_t nended, ended_cap;
    uint32_t next_config_id; /* the next id of a team, pool or class */
    bool config_busy;        /* a configuration write is being committed */
    struct srv_job **jobs;   /* sorted by id (ids only grow) */
    size_t njobs, jobs_cap;
    uint64_t submits;                   /* jobs accepted since start */
    struct srv_cost *cost;              /* ledger.c's totals and budgets' months */
    int64_t idle_tick_ms;               /* idle.c: the last tick (samples older are not fresh) */
    struct srv_idle_count *idle_counts; /* idle.c: actions taken per team */
    size_t nidle_counts;
    struct srv_metrics metrics; /* api_metrics.c: wait and pass histograms */
    struct series *series;      /* ingest.c: GPU samples (its own lock; see series.h) */
    struct srv_ingest *ingest;  /* ingest.c: owners, minute flushes, lag */
};

/* Clock: ms since the epoch, UTC. */
int64_t srv_now_ms(void);

/* ---- jobs.c: the job table (callers hold the lock) ---- */

/* The job with `id`, or NULL. */
struct srv_job *srv_job_find(struct server *s, int64_t id);
/* The index in s->jobs of the first job whose id is >= `id` (njobs if none). */
size_t srv_job_index(const struct server *s, int64_t id);
/* Adds a job (taken) with an id above every other; 0 or -ENOMEM. */
int srv_job_add(struct server *s, struct srv_job *j);
/* Frees a job; NULL is fine. */
void srv_job_free(struct srv_job *j);
/* The job as the API shows it: a new object, or NULL when out of memory. */
json_t *srv_job_to_json(const struct srv_job *j);
/* Builds a job from its store row (spec parsed back); 0, or -EINVAL with a
 * message when the stored spec does not parse. */
int srv_job_from_row(const struct store_job *row, const char *user, struct srv_job **ret, char *err,
                     size_t errlen);

/* ---- auth.c ---- */

/* Route flags: admins only; node agents (the join token) only. */
#define SRV_ROUTE_ADMIN HTTP_ROUTE_USER_FLAG(0)
#define SRV_ROUTE_AGENT HTTP_ROUTE_USER_FLAG(1)

/* http_authorize_fn: a bearer token of a known user, and an admin for
 * SRV_ROUTE_ADMIN routes; answers 401/403 itself otherwise. */
bool srv_authorize(struct http_request *req, unsigned route_flags, void *ctx);
/* The user the request was authorized as (valid in the handler). */
const struct srv_user *srv_request_user(struct http_request *req);
/* May `u` see and act on jobs of `team`? Admins: all; members: their team. */
bool srv_user_may(const struct srv_user *u, const char *team);

/*
 * At first start (no user in the store): creates the user "admin" (role
 * admin) and its token, written to DATA_DIR/admin.token with mode 0600.
 * Sets s->admin_token_path either way. 0, or a negative code with a message.
 */
int srv_auth_bootstrap(struct server *s, char *err, size_t errlen);

/* ---- api_*.c: route handlers ---- */

extern const struct http_route srv_routes[];
extern const size_t srv_nroutes;

/* The request's JSON body (a copy: caller json_decref's) with "name" set to
 * the path's `name`; a body may repeat the name, not contradict it. NULL
 * when it answered (400, 500) itself. */
json_t *srv_body_named(struct http_request *req, const char *name);

int srv_api_health(struct http_request *req, void *ctx);
int srv_api_job_submit(struct http_request *req, void *ctx);
int srv_api_job_get(struct http_request *req, void *ctx);
int srv_api_job_list(struct http_request *req, void *ctx);
int srv_api_job_cancel(struct http_request *req, void *ctx);
int srv_api_job_logs(struct http_request *req, void *ctx);

/* The bearer token node `name`'s log server accepts: HMAC-SHA-256 of the name
 * under logs_key, in hex (SRV_LOG_TOKEN_LEN characters and a NUL), so that a
 * restart issues the same tokens and one node's token opens no other node. */
#define SRV_LOG_TOKEN_LEN 64
void srv_node_log_token(const struct server *s, const char *name, char out[SRV_LOG_TOKEN_LEN + 1]);
/* The log server of node `name`: base URL "http://ADDR:PORT" and its token.
 * Takes s->lock itself. 0, -ENOENT (unknown node, or it registered no log
 * port), -ENAMETOOLONG (a buffer too small). */
int srv_node_log_endpoint(struct server *s, const char *name, char *url, size_t urllen, char *token,
                          size_t toklen);
int srv_api_whoami(struct http_request *req, void *ctx);
int srv_api_config_list(struct http_request *req, void *ctx);
int srv_api_config_get(struct http_request *req, void *ctx);
int srv_api_config_put(struct http_request *req, void *ctx);
int srv_api_config_delete(struct http_request *req, void *ctx);
int srv_api_user_list(struct http_request *req, void *ctx);
int srv_api_user_get(struct http_request *req, void *ctx);
int srv_api_user_put(struct http_request *req, void *ctx);
int srv_api_user_delete(struct http_request *req, void *ctx);
int srv_api_token_issue(struct http_request *req, void *ctx);
int srv_api_node_put(struct http_request *req, void *ctx);
int srv_api_node_heartbeat(struct http_request *req, void *ctx);
int srv_api_node_assignments(struct http_request *req, void *ctx);
int srv_api_node_report(struct http_request *req, void *ctx);
int srv_api_node_list(struct http_request *req, void *ctx);
int srv_api_node_drain(struct http_request *req, void *ctx);
int srv_api_metrics_series(struct http_request *req, void *ctx);
/* api_cost.c: GET /v1/cost, GET /v1/budgets */
int srv_api_cost(struct http_request *req, void *ctx);
int srv_api_budgets(struct http_request *req, void *ctx);

/* ---- nodes (api_nodes.c) ---- */

/* The runtime of node `name`, or NULL. Under the lock. */
struct srv_node_rt *srv_node_rt_find(struct server *s, const char *name);
/* Adds the runtime of a node (heartbeat now); 0 or -ENOMEM. Under the lock. */
int srv_node_rt_add(struct server *s, const char *name, int64_t now_ms);
/* The node's assignments changed: bumps its revision and answers its
 * long-polls. Under the lock. */
void srv_node_changed(struct server *s, const char *name);
/* Answers every long-poll (the server is stopping). */
void srv_nodes_release_waiters(struct server *s);
/* Loads nodes and GPU type ids from the store into the model. */
int srv_nodes_load(struct server *s, char *err, size_t errlen);

/* ---- the scheduling loop (loop.c) ---- */

/* Starts the loop thread; 0 or -errno. */
int srv_loop_start(struct server *s);
/* Asks for a pass soon (an event). Under the lock. */
void srv_loop_wake(struct server *s);
/* Stops the loop thread and waits for it. Not under the lock. */
void srv_loop_stop(struct server *s);
/* Loads the scheduler's state and the active attempts; 0 or an error. */
int srv_loop_load(struct server *s, char *err, size_t errlen);

/* An attempt's end, as an agent or the node timeout reports it. srv_end_plan
 * adds to `b` the rows for ending job j's current attempt in `att_state`
 * ("COMPLETED", ...) and fills *ret with the job's next state, without
 * changing j; srv_end_apply applies it after the commit (under the lock). */
struct srv_end {
    int64_t job, attempt;
    char att_state[16];
    enum srv_job_state job_state;
    char reason[160];
    int64_t end_ms, exit_code, signal;
    bool failure;
    int64_t cost_micro;  /* of the ledger rows planned with the end */
    int64_t pending_seq; /* the attempt's seg_pending_seq when planned (0: none) */
};
int srv_end_plan(struct server *s, const struct srv_job *j, const char *att_state,
                 int64_t exit_code, int64_t signal, const char *reason, int64_t now_ms,
                 struct srv_end *ret, struct store_batch *b);
void srv_end_apply(struct server *s, const struct srv_end *e);

/* ---- GET /metrics (api_metrics.c) ---- */

/* The Prometheus exposition of the cluster (docs/prometheus.md). */
int srv_api_metrics(struct http_request *req, void *ctx);
/* A job of `team` and class `priority` started after waiting wait_ms since it
 * was (re)queued. Under the lock. */
void srv_metrics_observe_wait(struct server *s, const char *team, const char *priority,
                              int64_t wait_ms);
/* A scheduling pass took duration_ns. Under the lock. */
void srv_metrics_observe_pass(struct server *s, int64_t duration_ns);
/* Frees what s->metrics holds. */
void srv_metrics_release(struct server *s);

/* The meta key of the next configuration id. */
#define SRV_META_NEXT_ID "config_next_id"
/* Set once the first start has made the default priority class. */
#define SRV_META_SEEDED "classes_seeded"

/* Loads teams, pools and priority classes from the store into s->cluster. */
int srv_config_load(struct server *s, char *err, size_t errlen);

#endif

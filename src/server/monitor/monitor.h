/*
 * monitor.h - what the controller measures: agents' GPU samples into the
 * series (the last hour raw, one-minute aggregates to the store) and into
 * the attempts that hold the GPUs, the queue length, idle GPUs (flagged,
 * warned, acted on by the team's policy), the wait and pass histograms, and
 * the Prometheus families built from all of it.
 *
 * Owns: struct monitor: the series (series.h, private to this folder, with a
 * mutex of its own so that readers need not hold the state lock), the ingest
 * bookkeeping, the histograms and the idle actions' counters. Reads the
 * configuration, the jobs and the nodes' runtimes, and writes minute
 * aggregates to the store (all borrowed at monitor_init).
 *
 * Lock: the controller's state lock, held by every caller unless said
 * otherwise; the series' own lock is taken after it, never before.
 */
#ifndef GPUORCH_SERVER_MONITOR_MONITOR_H
#define GPUORCH_SERVER_MONITOR_MONITOR_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cluster/cluster.h"
#include "server/jobs/jobs.h"
#include "proto/proto.h"
#include "server/nodes/nodes.h"
#include "store/store.h"
#include "util/prom.h"

/* Lags are kept for the last MONITOR_LAG_WINDOW heartbeats. */
#define MONITOR_LAG_WINDOW 8192
/* The histograms' buckets and the (team, class) pairs counted. */
#define MONITOR_WAIT_BUCKETS   14   /* gpuorch_wait_seconds: 1 s .. 1 day */
#define MONITOR_PASS_BUCKETS   14   /* gpuorch_scheduling_pass_duration_seconds: 1 ms .. 10 s */
#define MONITOR_WAIT_HISTS_MAX 4096 /* later new pairs are not counted */

struct monitor_ingest;
struct monitor_idle_count;
struct series;

struct monitor_wait_hist {
    char team[CLUSTER_NAME_MAX + 1];
    char priority[CLUSTER_NAME_MAX + 1];
    uint64_t counts[MONITOR_WAIT_BUCKETS]; /* per bucket, not cumulative */
    uint64_t count;                        /* all observations, those over the last bound too */
    double sum_s;
};

struct monitor_config {
    int64_t node_timeout_ms;  /* a sample older than this is not shown in /metrics */
    int64_t retention_days;   /* of the stored one-minute aggregates (0: 30) */
    int64_t minute_ms;        /* the length of a "minute" (0: 60,000; other values in tests) */
    int64_t (*mono_ns)(void); /* the server's monotonic clock: time spent ingesting */
};

struct monitor {
    struct monitor_config cfg;
    pthread_mutex_t *lock;         /* borrowed: the state lock */
    const struct cluster *cluster; /* borrowed */
    struct jobs *jobs;             /* borrowed */
    struct nodes *nodes;           /* borrowed */
    struct store *store;           /* borrowed */
    struct series *series;         /* its own lock (series.h) */
    struct monitor_ingest *ingest;
    struct monitor_wait_hist *waits; /* sorted by (team, priority) */
    size_t nwaits, waits_cap;
    uint64_t pass_counts[MONITOR_PASS_BUCKETS];
    uint64_t pass_count;
    double pass_sum_s;
    int64_t idle_tick_ms; /* the idle tracker's last tick: older samples are not fresh */
    struct monitor_idle_count *idle_counts;
    size_t nidle_counts;
};

/* Makes the series and the bookkeeping, with times relative to now_ms. Not
 * under the lock (before the server serves). 0 or GPO_ENOMEM. */
int monitor_init(struct monitor *m, const struct monitor_config *cfg, pthread_mutex_t *lock,
                 const struct cluster *cluster, struct jobs *jobs, struct nodes *nodes,
                 struct store *store, int64_t now_ms);
/* After the loop and the HTTP server stopped, and after the store closed
 * (flush completions count into it). Zeroed and half-made are fine. */
void monitor_release(struct monitor *m);

/* ---- samples ------------------------------------------------------------- */

/*
 * One heartbeat's sample from node `node` (borrowed) that arrived at
 * now_ms: each GPU into the series, and
 * into every attempt holding it (utilization accumulators, latest figures
 * on its share, the attempt's open minute). Who holds a GPU is looked up in
 * a per-node table rebuilt only when the node's revision moves.
 */
void monitor_heartbeat(struct monitor *m, const char *node, const struct proto_heartbeat *hb,
                       int64_t now_ms);

/*
 * The loop's timer (at least every pass interval): a queue-length point (at
 * most one a second), and once the minute has turned, the closed minutes of
 * every GPU and attempt to the store in one batch, committed asynchronously;
 * once an hour also the delete of minutes older than the retention.
 */
void monitor_tick(struct monitor *m, int64_t now_ms);

/* At a clean stop: every minute, the open ones too, to the store (queued;
 * closing the store commits it). */
void monitor_flush_all(struct monitor *m, int64_t now_ms);

struct monitor_stats {
    uint64_t heartbeats;    /* heartbeats with samples ingested since start */
    uint64_t gpu_samples;   /* GPU samples ingested */
    uint64_t owned_samples; /* of which charged to attempts */
    /* Lag: arrival at the controller minus the agent's sampled_at_ms, over the
     * last MONITOR_LAG_WINDOW heartbeats that carried it; -1: none yet. */
    int64_t lag_last_ms, lag_p50_ms, lag_p99_ms, lag_max_ms;
    uint64_t lag_count;       /* heartbeats with a sampled_at_ms since start */
    double lag_sum_s;         /* their lags summed (a Prometheus summary's _sum) */
    uint64_t minutes_flushed; /* minute rows committed */
    uint64_t flushes_failed;  /* batches that failed (their rows are lost) */
    uint64_t minutes_dropped; /* closed minutes nobody took in time */
    uint64_t gpus;            /* GPUs in the series */
    uint64_t ingest_ns;       /* time spent ingesting since start */
};

/* The counters and the lag percentiles now. */
void monitor_stats(const struct monitor *m, struct monitor_stats *ret);

/* ---- the series API ------------------------------------------------------ */

/* What GET /v1/metrics/series reads: a metric of a group over a grid of steps. */
enum monitor_metric {
    MONITOR_GPU_UTIL,
    MONITOR_MEM_USED,
    MONITOR_POWER,
    MONITOR_TEMPERATURE,
    MONITOR_QUEUE_LENGTH,
    /* the services' (monitor_services): by service only */
    MONITOR_SVC_READY,   /* ready replicas */
    MONITOR_SVC_DESIRED, /* what the autoscaler wants */
    MONITOR_SVC_RPS,     /* requests per second */
    MONITOR_SVC_P50,     /* latency over the last minute, s */
    MONITOR_SVC_P99,
};
/* At most this many keys in one query. */
#define MONITOR_QUERY_KEYS_MAX 64

enum monitor_by {
    MONITOR_BY_NODE,
    MONITOR_BY_TEAM,
    MONITOR_BY_GPU,
    MONITOR_BY_JOB,
    MONITOR_BY_PRIORITY,
    MONITOR_BY_TOTAL,
    MONITOR_BY_SERVICE
};

struct monitor_query {
    enum monitor_metric metric;
    enum monitor_by by;
    /* only these groups (borrowed; nkeys 0: every group) */
    const char *const *keys;
    size_t nkeys;
    /* by node or gpu: only this node's GPUs (borrowed), or NULL */
    const char *node;
    /* by team or job (and the queue by team): only this team's groups
     * (borrowed), or NULL for every team's */
    const char *only_team;
    int64_t since_ms, step_ms, until_ms;
    size_t nsteps;
};

/* One service's figures now (monitor_services). */
struct monitor_service_point {
    const char *name, *team;
    uint32_t ready, desired;
    int64_t rps_milli;      /* requests per second x 1000 */
    int64_t p50_ms, p99_ms; /* latency over the last minute; -1: no answer in it */
};

/*
 * The services' figures at now_ms (at most one point a second a service is
 * kept, as the queue length's): into rings of the last hour, and each closed
 * minute to the store with the queue length's (kind gauge, keys
 * "service/TEAM/NAME/ready" ...), for GET /v1/metrics/series by service.
 */
void monitor_services(struct monitor *m, const struct monitor_service_point *v, size_t n,
                      int64_t now_ms);

/* "gpu_util", ...: the names the query uses; NULL out of range. */
const char *monitor_metric_name(enum monitor_metric m);
/* Parse a name; -1 when it is none. */
int monitor_metric_parse(const char *name);
int monitor_by_parse(const char *name);

/*
 * The answer of a query (already checked): within the rings' reach (the last
 * hour, since the controller started) from the raw samples, before it from
 * the stored one-minute aggregates; each step's value is the mean of every
 * sample of the group in it. Called WITHOUT the state lock (it reads the
 * store, then takes the lock for the jobs' teams). A new object, or NULL
 * with *ret_err (GPO_ENOMEM or a store code).
 */
json_t *monitor_series_query(struct monitor *m, const struct monitor_query *q, int64_t now_ms,
                             int *ret_err);

/* ---- the histograms ----------------------------------------------------- */

/* A job of `team` and class `priority` started after waiting wait_ms since
 * it was (re)queued. */
void monitor_observe_wait(struct monitor *m, const char *team, const char *priority,
                          int64_t wait_ms);
/* A scheduling pass took duration_ns. */
void monitor_observe_pass(struct monitor *m, int64_t duration_ns);

/* ---- idle GPUs ---------------------------------------------------------- */

/*
 * Running jobs whose GPUs all stay under their team's utilization threshold
 * for the team's window are flagged; by the team's policy they are only
 * reported, or warned and then requeued or cancelled (docs/idle.md). The
 * tracker's state lives in each attempt (struct attempt_idle), so it starts
 * over with every attempt and, after a controller restart, from the
 * restart: nothing is acted on before a whole window has been observed.
 * The decision for one attempt at one tick is a pure function
 * (monitor_idle_step) of what the tick observed (monitor_idle_observe), the
 * team's policy and the time, so that tests drive it with synthetic samples.
 */

/* What one tick saw of an attempt's GPUs. */
struct monitor_idle_obs {
    bool busy;       /* a GPU of it had a fresh sample at or above the threshold */
    bool all_fresh;  /* every GPU of it had a fresh sample (with a utilization) */
    int64_t busy_ms; /* busy: the newest such sample's time */
};

/* Fresh samples of one tick: (node, GPU UUID) -> utilization, sorted by
 * node and UUID. */
struct monitor_idle_gpu {
    const char *node; /* borrowed from the caller */
    const char *uuid; /* borrowed from the node's heartbeat */
    uint32_t util_pct;
    int64_t sample_ms;
};
struct monitor_idle_samples {
    struct monitor_idle_gpu *gpus;
    size_t n, cap;
};

/* Adds the GPUs of node `node`'s heartbeat (both borrowed: they must
 * outlive *t) taken at sample_ms; GPUs without a utilization are left out.
 * Call monitor_idle_samples_sort once all are in. 0 or GPO_ENOMEM. */
int monitor_idle_samples_add(struct monitor_idle_samples *t, const char *node,
                             const struct proto_heartbeat *hb, int64_t sample_ms);
void monitor_idle_samples_sort(struct monitor_idle_samples *t);
/* Frees the table (not the samples); zeroes it. */
void monitor_idle_samples_release(struct monitor_idle_samples *t);

/* What `t` says of attempt a's GPUs (its shares) under threshold_pct. */
struct monitor_idle_obs monitor_idle_observe(const struct attempt *a,
                                             const struct monitor_idle_samples *t,
                                             uint32_t threshold_pct);

enum monitor_idle_event {
    MONITOR_IDLE_NONE = 0,
    MONITOR_IDLE_FLAGGED, /* just flagged (report: that is all) */
    MONITOR_IDLE_WARNED,  /* just flagged, and the action is due at action_ms */
    MONITOR_IDLE_CLEARED, /* busy again: flag and warning dropped */
    MONITOR_IDLE_ACT,     /* the warning ran out while still idle: requeue or cancel now */
};

/*
 * Advances the tracker `tr` of one attempt by a tick at `now` that observed
 * `obs`, under policy `p` (borrowed). The first tick only starts the clock
 * (the attempt counts as active then). A busy observation clears; an idle
 * one with every GPU fresh flags once now - last active >= window, and with
 * requeue or cancel sets the action due warning_s later, returned as
 * MONITOR_IDLE_ACT at the first idle, all-fresh tick at or after it. A tick
 * with a GPU not fresh (and none busy) changes nothing. ACT is returned
 * once: the caller kills the attempt, after which it is not stepped again.
 */
enum monitor_idle_event monitor_idle_step(struct attempt_idle *tr, const struct cluster_idle *p,
                                          const struct monitor_idle_obs *obs, int64_t now);

/* An attempt the idle policy acts on: requeue or cancel it. */
struct monitor_idle_act {
    int64_t job, attempt;
    enum cluster_idle_action action;
    char team[CLUSTER_NAME_MAX + 1];
    char detail[96]; /* the kill's words: "idle: GPUs under 10% for 30m" */
};

/*
 * One tick at `now`: reads the nodes' samples newer than the last tick,
 * steps every running attempt that is not being killed, logs flags,
 * warnings and actions (stderr), and returns in *ret (caller frees; NULL
 * when none) the attempts whose action is due, for the caller to kill.
 * 0 or GPO_ENOMEM (this tick sees nothing).
 */
int monitor_idle_tick(struct monitor *m, int64_t now, struct monitor_idle_act **ret, size_t *ret_n);

/* The kill of act a was committed and applied: counted and logged. */
void monitor_idle_acted(struct monitor *m, const struct monitor_idle_act *a);

/* The job's "idle" member: null, or {"since", "flagged_at", "threshold_pct",
 * "window_s", "action", "warned_at", "action_at"} (times RFC 3339, the last
 * two null under report). A new reference, or NULL when out of memory. */
json_t *monitor_idle_job_json(const struct job *j);

/* ---- /metrics -------------------------------------------------------------- */

/*
 * Writes the monitor's families into p at now_ms: DCGM exporter's GPU
 * figures (from each node's latest sample, with the holding job's hpc_job,
 * team and project), the queue, the histograms and `passes` (the loop's
 * count), jobs per state, quotas, nodes and GPUs per state, heartbeat ages
 * and the ingest lag. 0 or GPO_ENOMEM.
 */
int monitor_metrics(struct monitor *m, struct prom *p, int64_t now_ms, uint64_t passes);

/*
 * The idle families: gpuorch_job_idle{hpc_job,team,project} 1 for each
 * flagged job, gpuorch_idle_jobs{team} (flagged jobs per team, every team
 * listed) and gpuorch_idle_actions_total{team,action} (requeues and cancels
 * since the controller started).
 */
void monitor_idle_metrics(struct monitor *m, struct prom *p);

#endif

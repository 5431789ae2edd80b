/*
 * ingest.h - agents' heartbeat samples into the controller's series
 * (series.h), the attempts' utilization accumulators and their latest
 * figures, the queue-length series, and the per-minute flush of closed
 * minute aggregates to the store (with the retention delete).
 *
 * Who holds a GPU is looked up in a per-node table of owners, rebuilt only
 * when the node's assignment revision (srv_node_rt.rev) moves, so a sample
 * costs a few hash lookups and never a scan of every job.
 *
 * Every function runs under s->lock unless said otherwise.
 */
#ifndef GPUORCH_SERVER_INGEST_H
#define GPUORCH_SERVER_INGEST_H

#include <stdint.h>

#include <jansson.h>

struct server;
struct srv_ingest;

/* Lags are kept for the last SRV_INGEST_LAG_WINDOW heartbeats. */
#define SRV_INGEST_LAG_WINDOW 8192

struct srv_ingest_stats {
    uint64_t heartbeats;    /* heartbeats with samples ingested since start */
    uint64_t gpu_samples;   /* GPU samples ingested */
    uint64_t owned_samples; /* of which charged to attempts */
    /* Lag: arrival at the controller minus the agent's sampled_at_ms, over the
     * last SRV_INGEST_LAG_WINDOW heartbeats that carried it; -1: none yet. */
    int64_t lag_last_ms, lag_p50_ms, lag_p99_ms, lag_max_ms;
    uint64_t lag_count;       /* heartbeats with a sampled_at_ms since start */
    double lag_sum_s;         /* their lags summed (a Prometheus summary's _sum) */
    uint64_t minutes_flushed; /* minute rows committed */
    uint64_t flushes_failed;  /* batches that failed (their rows are lost) */
    uint64_t minutes_dropped; /* closed minutes nobody took in time */
    uint64_t gpus;            /* GPUs in the series */
    uint64_t ingest_ns;       /* time spent ingesting since start */
};

/*
 * Makes s->series and s->ingest from s->cfg (metrics_minute_ms,
 * metrics_retention_days), with times relative to now_ms. Not under the lock
 * (before the server serves). 0 or -ENOMEM.
 */
int srv_ingest_init(struct server *s, int64_t now_ms);
/* Frees them; NULL members are fine. After the loop and the HTTP server stop. */
void srv_ingest_free(struct server *s);

/*
 * One heartbeat's sample from node `node` (borrowed: {"gpus": [...],
 * "sampled_at_ms": T}) that arrived at now_ms: each GPU into the series, and
 * into every attempt holding it (utilization accumulators, latest figures on
 * its share, the attempt's open minute).
 */
void srv_ingest_heartbeat(struct server *s, const char *node, const json_t *sample, int64_t now_ms);

/*
 * The loop's timer (at least every pass interval): a queue-length point (at
 * most one a second), and once the minute has turned, the closed minutes of
 * every GPU and attempt to the store in one batch, committed asynchronously;
 * once an hour also the delete of minutes older than the retention.
 */
void srv_ingest_tick(struct server *s, int64_t now_ms);

/* At a clean stop: every minute, the open ones too, to the store (queued;
 * store_close commits it). */
void srv_ingest_flush_all(struct server *s, int64_t now_ms);

/* The counters and the lag percentiles now. */
void srv_ingest_stats(struct server *s, struct srv_ingest_stats *ret);

#endif

/*
 * series.h - the controller's in-memory history of every GPU's samples, the
 * open one-minute aggregates of GPUs and running attempts, and the queue
 * length over time.
 *
 * Pure: no I/O and no clock (every call that needs the time is given `now`);
 * private to src/server/monitor (monitor.h is the subsystem's header).
 * One mutex of its own guards everything, so readers (the series API, the
 * job JSON, /metrics) need not hold the server's lock; callers that do hold
 * it take the series' lock after it, never before.
 *
 * Per GPU (keyed by UUID, with its node, index and GPU type): a ring of the
 * latest raw samples (SERIES_POINT_BYTES each), read only within the last
 * `horizon_ms`; a short history of which job held it (the first owner of a
 * shared GPU) so that samples can be charged to jobs and teams; and the
 * minute being aggregated.
 *
 * Sizes with the defaults (ring of 3,600 points = an hour at the agents' 1 Hz):
 * 3,600 x 12 bytes = 42.2 KiB of ring + 512 bytes of owners + ~200 bytes of
 * bookkeeping, so about 43 KiB per GPU; 1,000 nodes x 8 GPUs: ~345 MiB.
 * The queue length: 3,600 x 8 bytes = 28 KiB per key (total, each team and
 * each priority class).
 *
 * Minutes. Every sample also goes into the open minute of its GPU (and, with
 * series_job_put, of the attempt that holds it). A minute closes when a
 * sample of a later minute arrives or when series_minutes_take is called
 * after its end; closed minutes wait in a list (at most SERIES_PENDING_MAX)
 * until taken.
 *
 * Values: utilization 0..100 %, memory used MiB, power in milliwatts as the
 * agents send it (kept in watts in the ring), temperature in degrees C. A
 * value of SERIES_UNKNOWN is a figure the GPU did not report.
 */
#ifndef GPUORCH_SERVER_MONITOR_SERIES_H
#define GPUORCH_SERVER_MONITOR_SERIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SERIES_UNKNOWN        INT64_MIN
#define SERIES_RING_DEFAULT   3600
#define SERIES_HORIZON_MS     (3600 * INT64_C(1000))
#define SERIES_MINUTE_MS      (60 * INT64_C(1000))
#define SERIES_OWNERS         64     /* owner changes remembered per GPU */
#define SERIES_PENDING_MAX    200000 /* closed minutes waiting to be taken */
#define SERIES_POINT_BYTES    12
#define SERIES_QPOINT_BYTES   8
#define SERIES_QUEUE_KEYS_MAX 4096

struct series;

/* One sample of one GPU, as the agent reported it. */
struct series_sample {
    int64_t util_pct;     /* 0..100 */
    int64_t mem_used_mib; /* >= 0 */
    int64_t power_mw;     /* >= 0 */
    int64_t temp_c;
};

/* Which GPU (strings borrowed from the series, valid under its callbacks). */
struct series_gpu_info {
    const char *uuid;
    const char *node;
    const char *gpu_type; /* "" when not known */
    uint32_t index;
};

enum series_metric {
    SERIES_UTIL,  /* % */
    SERIES_MEM,   /* MiB */
    SERIES_POWER, /* W */
    SERIES_TEMP,  /* C */
};

enum series_kind { SERIES_KIND_GPU, SERIES_KIND_JOB };

/* A closed minute (owned by the array series_minutes_take returns). */
struct series_minute {
    enum series_kind kind;
    char *key;   /* GPU UUID, or "JOB.ATTEMPT" */
    char *label; /* the GPU's node, or the job's team */
    int64_t minute_ms;
    uint32_t samples;      /* samples with a utilization */
    uint32_t util_max;     /* % */
    uint32_t idle_samples; /* of which under the idle threshold */
    uint32_t temp_max_c;   /* 0 when none reported */
    uint64_t util_sum;
    uint64_t mem_sum_mib, mem_max_mib;
    uint64_t power_sum_mw;
};

/*
 * A new series: rings of ring_cap points (1..1,000,000; SERIES_RING_DEFAULT),
 * read within horizon_ms (>= 1000), minutes of minute_ms (>= 100; 60,000 but
 * in tests), times kept relative to base_ms (now). NULL when out of memory or
 * an argument is out of range. Free with series_free.
 */
struct series *series_new(int64_t base_ms, uint32_t ring_cap, int64_t horizon_ms,
                          int64_t minute_ms);
/* NULL is fine. */
void series_free(struct series *s);

int64_t series_minute_ms(const struct series *s);
/* The time before which the rings hold nothing: base_ms, or now - horizon. */
int64_t series_ring_start(const struct series *s, int64_t now_ms);

/*
 * Records sample v of GPU `info` (strings copied; a GPU is added at its first
 * sample; its node, index and type are updated when they change) taken at
 * t_ms, held by job `job` (0: none), into its ring and open minute; idle_pct:
 * utilization below this counts as idle. Samples older than the GPU's latest
 * are dropped. 0, GPO_EINVAL (no UUID), GPO_ENOMEM (nothing recorded).
 */
int series_gpu_put(struct series *s, const struct series_gpu_info *info, int64_t t_ms,
                   const struct series_sample *v, int64_t job, uint32_t idle_pct);

/*
 * Adds one GPU sample v taken at t_ms to the open minute of attempt `key`
 * ("JOB.ATTEMPT"), whose team is `label` (both copied). 0, GPO_EINVAL, GPO_ENOMEM.
 */
int series_job_put(struct series *s, const char *key, const char *label, int64_t t_ms,
                   const struct series_sample *v, uint32_t idle_pct);

/* The latest sample of GPU `uuid` and its time, if it is within the horizon
 * of now_ms: 0, or GPO_ENOENT. */
int series_gpu_latest(struct series *s, const char *uuid, int64_t now_ms, struct series_sample *ret,
                      int64_t *ret_t_ms);

/*
 * Calls fn for each sample in [since_ms, until_ms) within the horizon of
 * now_ms, GPU by GPU, oldest first: uuid NULL for every GPU, or one. `job`
 * is the job that held the GPU then (0: none). fn runs under the series'
 * lock: it must not call the series.
 */
typedef void (*series_sample_fn)(void *ctx, const struct series_gpu_info *g, int64_t job,
                                 int64_t t_ms, const struct series_sample *v);
void series_scan(struct series *s, const char *uuid, int64_t since_ms, int64_t until_ms,
                 int64_t now_ms, series_sample_fn fn, void *ctx);

/*
 * The mean of metric m over the samples of the GPUs uuids[0, n) (every GPU
 * when uuids is NULL) in each step of the grid since_ms + k * step_ms,
 * k < nsteps: ret_means[k], NaN where a step has no sample. 0 or GPO_EINVAL.
 */
int series_points(struct series *s, const char *const *uuids, size_t n, enum series_metric m,
                  int64_t since_ms, int64_t step_ms, size_t nsteps, int64_t now_ms,
                  double *ret_means);

/* The value of metric m in v as a double, NaN when unknown. */
double series_value(const struct series_sample *v, enum series_metric m);

/*
 * Closes every open minute that ended by now_ms and hands out every closed
 * minute: *ret (caller frees with series_minutes_free) and *ret_n, oldest
 * first. 0 or GPO_ENOMEM (nothing taken).
 */
int series_minutes_take(struct series *s, int64_t now_ms, struct series_minute **ret,
                        size_t *ret_n);
void series_minutes_free(struct series_minute *m, size_t n);

/* Closed minutes dropped because nobody took them in time. */
uint64_t series_minutes_dropped(struct series *s);

/* Number of GPUs known. */
size_t series_gpu_count(struct series *s);

/*
 * The queue length: one point of `key` ("total", "team/NAME",
 * "priority/NAME") with value at t_ms. A point closer than 1 s to the key's
 * latest replaces it. 0, GPO_EINVAL, GPO_ENOMEM.
 */
int series_queue_put(struct series *s, const char *key, uint32_t value, int64_t t_ms);

/* Calls fn for each queue point in [since_ms, until_ms) within the horizon,
 * key by key (in the order they were first put), oldest first; under the lock. */
typedef void (*series_queue_fn)(void *ctx, const char *key, int64_t t_ms, uint32_t value);
void series_queue_scan(struct series *s, int64_t since_ms, int64_t until_ms, int64_t now_ms,
                       series_queue_fn fn, void *ctx);

#endif

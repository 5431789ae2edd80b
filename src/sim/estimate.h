/*
 * estimate.h - the time limit the simulator gives each job. Traces carry no
 * time limits, and backfill needs one; a job's own duration must not leak
 * into it (only the sjf and srtf oracles are told durations). The estimate
 * is the 90th percentile of the durations of the jobs that finished before
 * it arrived, of its team and size class (fractions, 1, 2, 3-4, 5-8, 9-16,
 * 17 and more GPUs); with fewer than 10 of those, of all finished jobs; with
 * fewer than 10 of those, none (the caller uses the policy's default). Jobs
 * are never killed at it.
 *
 * Durations are counted in buckets a quarter of a power of two wide (19 %
 * apart), from 1 s to 2^40 s: a percentile is a walk over 160 counters, and
 * an estimate is at most one bucket (19 %) above the true percentile.
 */
#ifndef GPUORCH_SIM_ESTIMATE_H
#define GPUORCH_SIM_ESTIMATE_H

#include <stdint.h>

#define SIM_ESTIMATE_BUCKETS   160
#define SIM_ESTIMATE_CLASSES   7
#define SIM_ESTIMATE_MIN_COUNT 10

struct sim_estimate_hist {
    uint32_t n;
    uint32_t count[SIM_ESTIMATE_BUCKETS];
};

struct sim_estimate {
    uint32_t nteams;
    struct sim_estimate_hist *hist; /* [team * classes + class], then one for all */
};

/* 0, or GPO_ENOMEM. */
int sim_estimate_init(struct sim_estimate *e, uint32_t nteams);
void sim_estimate_release(struct sim_estimate *e);

/* Counts a finished job of `team` (< nteams, else only in the total) that
 * held `gpu_milli` and ran `duration_s` in all. */
void sim_estimate_add(struct sim_estimate *e, uint32_t team, int64_t gpu_milli, int64_t duration_s);

/* The estimate for a job of `team` asking for `gpu_milli`, in seconds, or -1
 * when there is none yet. */
int64_t sim_estimate_s(const struct sim_estimate *e, uint32_t team, int64_t gpu_milli);

#endif

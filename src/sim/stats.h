/*
 * stats.h - the figures of one replay: job completion times, waits,
 * utilization, fairness.
 *
 * Definitions (docs/simulator.md):
 * - JCT: end - submit, over the jobs that ended;
 * - queueing delay (wait): the part of the JCT the job did not hold GPUs
 *   (before its first start and after each preemption);
 * - makespan: from the first submit to the last end;
 * - GPU utilization: useful GPU-time (restart penalties excluded) between the
 *   first and the last submit, over the cluster's GPUs times that span;
 * - a team's share: its part of that useful GPU-time;
 * - fragmented GPUs: GPUs that fractional jobs use only in part (what is
 *   left of them can take only another fraction), time-weighted over that
 *   window;
 * - Jain's fairness index over the teams with demand in the window, of the
 *   fraction of their demand they were served there: each job demands its
 *   GPUs for its duration or until the last submit, whichever comes first.
 */
#ifndef GPUORCH_SIM_STATS_H
#define GPUORCH_SIM_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "core/explain.h"
#include "sim/engine.h"

struct sim_summary {
    const char *policy; /* borrowed */
    size_t jobs;        /* jobs replayed (those of queues some team takes) */
    size_t ended;
    size_t unschedulable;
    size_t dropped;                     /* trace jobs of queues no team takes */
    size_t reasons[SCHED_REASON_COUNT]; /* unschedulable jobs per reason */
    double makespan_s;
    double jct_avg_s, jct_p50_s, jct_p95_s, jct_p99_s;
    double wait_avg_s, wait_p99_s;
    double gpu_utilization; /* 0..1 */
    /* GPUs partly used by fractional jobs, on average over the window (time-weighted) */
    double fragmented_gpus;
    double jain_fairness; /* 1/n..1; 1 with one team */
    uint64_t preemptions;
    uint64_t passes;
    double total_gpus;
    size_t nteams;
    char **team_names;  /* borrowed from the result */
    double *team_share; /* per team, 0..1 (owned) */
};

/* Computes the figures of a result. 0 or GPO_ENOMEM. The summary borrows
 * `policy` and the result's team names: keep both alive while it is used. */
int sim_summary_compute(const struct sim_result *r, const char *policy, struct sim_summary *ret);
void sim_summary_release(struct sim_summary *s);

/* The q-quantile (0..1) of sorted values, nearest rank; 0 for none. */
double sim_quantile(const double *sorted, size_t n, double q);

#endif

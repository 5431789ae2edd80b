/*
 * engine.h - the discrete-event replay of a trace through the scheduler core.
 *
 * The engine plays the controller: jobs arrive at their submit times, a
 * scheduling pass (the very sched_pass the controller calls) runs whenever
 * something changed (an arrival, an end, an eviction), its starts and
 * preemptions are applied, and jobs end when their work is done. Time jumps
 * from one event to the next: a quiet day of trace costs nothing.
 *
 * What the trace does not say, the engine decides, the same way for every
 * policy (docs/simulator.md):
 * - a job asks for its GPUs and nothing else (no CPU or host memory figure);
 *   a whole-GPU job larger than every node is a multi-node gang;
 * - its time limit, which backfill plans with, is an estimate that does not
 *   depend on its own duration: the 90th percentile of the durations of the
 *   jobs of its team and size that ended before it was submitted (then of all
 *   teams, then the policy's default). The job is never killed at it;
 * - every job can be preempted and resumes from its last progress, paying
 *   `restart_penalty_s` of lost time at each restart;
 * - the oracles sjf and srtf alone read durations: sjf orders by the true
 *   duration, srtf by the true remaining time and preempts for it.
 *
 * Two hooks serve the replays of serving and training together
 * (serve_shared.h), and do nothing when left zero:
 * - opts->extra: jobs the trace does not have (serving's replicas), each of
 *   a team of the spec, in a priority class "serving" added above the
 *   trace's (the controller seeds the same: above "normal", may preempt).
 *   They are not checkpointable, so neither LAS nor migration evicts them;
 *   a reclaim can, only if they were started over their team's guarantee.
 *   The oracles leave them alone (their order key and class are theirs), and
 *   their time limit is estimated as any job's. Their results are
 *   out->extra, and out->jobs and every figure of sim_result (useful
 *   GPU-time, team demand and shares, the window) are the trace's alone,
 *   the samples excepted (they count every job).
 * - opts->held_gpus: the cluster's last GPUs (in node order: the last
 *   pool's last nodes) offered to no job, a static split's GPUs reserved
 *   for serving; total_gpus_milli leaves them out.
 */
#ifndef GPUORCH_SIM_ENGINE_H
#define GPUORCH_SIM_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/explain.h"
#include "core/model.h"
#include "sim/policy.h"
#include "sim/spec.h"
#include "sim/trace.h"

struct sim_opts {
    int64_t restart_penalty_s; /* >= 0; paid at every restart after a preemption */
    /* Run a pass at every step, even one where jobs only arrived and nothing
     * could start (see engine.c's pass_needed): slower, and the same results;
     * the tests check that. */
    bool pass_every_step;
    /* Jobs added to the trace's (see above), in submit order; NULL: none. */
    const struct sim_extra_job *extra;
    size_t nextra;
    /* The cluster's last held_gpus GPUs take no job (see above); <= its GPUs. */
    uint32_t held_gpus;
};

/* A job added to the trace's: it arrives at submit_ms and, once placed,
 * runs duration_ms (restart penalties aside). */
struct sim_extra_job {
    int64_t submit_ms;   /* >= 0, non-decreasing through opts->extra */
    int64_t duration_ms; /* >= 0 */
    int64_t gpu_milli;   /* 1 .. 999, or whole GPUs (a multiple of 1000) */
    uint32_t team;       /* index into spec->teams */
};

/* What happened to one trace job. Times in seconds of trace time. */
struct sim_job_result {
    uint32_t trace_index; /* into trace->jobs */
    uint32_t team;        /* index into spec->teams */
    int64_t submit_s;
    int64_t duration_s;
    int64_t gpu_milli;
    int64_t first_start_s;  /* -1: never started */
    int64_t first_start_ms; /* the same in milliseconds */
    int64_t end_s;          /* -1: never ended (unschedulable) */
    int64_t running_s;      /* time it held GPUs, restart penalties and graces included */
    uint32_t preemptions;
    bool unschedulable;
    enum sched_reason reason; /* why it never ran, when unschedulable */
    char *placement;          /* its last attempt's nodes, "node:gpus;..." (owned) */
};

/* The cluster's state after each step of the replay. */
struct sim_sample {
    int64_t t_s;
    int64_t busy_milli; /* GPU milli held by running jobs */
    uint32_t pending;
    uint32_t running;
    uint32_t partial_gpus; /* GPUs partly used by fractional jobs: the rest of them is stranded */
};

struct sim_result {
    struct sim_job_result *jobs; /* one per job kept (in trace order) */
    size_t njobs;
    struct sim_job_result *extra; /* one per opts->extra job, in its order (trace_index:
                                   * its index there); inside the jobs array, past njobs */
    size_t nextra;
    size_t ndropped;            /* trace jobs of queues no team takes */
    struct sim_sample *samples; /* in time order */
    size_t nsamples;
    uint64_t preemptions;
    uint64_t passes;
    int64_t total_gpus_milli; /* the cluster's GPUs */
    int64_t first_submit_s, last_submit_s, last_end_s;
    /* Useful GPU-time (restart penalties excluded), in GPU-seconds: all of it,
     * and the part that fell between the first and the last submit. */
    double useful_gpu_s, useful_window_gpu_s;
    double *team_useful_window_gpu_s; /* per team */
    double *team_demand_window_gpu_s; /* per team: what its jobs could have used in that window */
    size_t nteams;
    char **team_names; /* borrowed from the spec */
    size_t samples_cap;
};

void sim_result_init(struct sim_result *r);
void sim_result_release(struct sim_result *r);

/*
 * Replays `trace` on the cluster of `spec` under `policy`. Fills *out (an
 * initialised, empty result). 0; GPO_EINVAL with one line in `err` (a spec the
 * core rejects, a policy it rejects, a bad extra job, held_gpus above the
 * cluster's GPUs); GPO_ENOMEM.
 */
int sim_run(const struct sim_trace *trace, const struct sim_spec *spec,
            const struct sim_policy *policy, const struct sim_opts *opts, struct sim_result *out,
            char *err, size_t errlen);

#endif

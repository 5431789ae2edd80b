/*
 * serve_shared.h - serving and training on one cluster (`gpuorch sim
 * --serve ... --trace JOBS.csv [--split N]`, docs/simulator.md "Serving and
 * training together").
 *
 * The entry point the CLI (serve_cmd.c) calls when --trace comes with
 * --serve. For each serving policy, one replay of every service's request
 * trace and of the job trace on the one cluster of `spec`:
 * - split_gpu_milli 0: shared. Serving's replicas and training's jobs hold
 *   GPUs of the same pools under one quota and the same preemption rules
 *   (the job policy's);
 * - split_gpu_milli > 0: a static split. That many GPU milli are reserved
 *   for serving (its replicas never hold more, sim_serve_opts.gpu_cap_milli),
 *   training runs on the rest of the cluster.
 *
 * The caller owns every array. in->traces[s] is service s's request trace;
 * the out arrays are indexed [p * nservices + s] (serving, policy p, service
 * s) and [p] (training, under serving policy p), each element initialised
 * and empty (sim_serve_result_init, sim_result_init) before the call, and
 * released by the caller afterwards whatever the return (on error, what was
 * filled so far is there to release). The caller computes the figures
 * (sim_serve_summarize, sim_summary_compute) from the results.
 *
 * `spec` may be changed by the call (the split's GPUs taken out of its
 * pools, a team added for serving): training's results borrow its team
 * names, so the caller keeps it alive until they are released, then
 * releases it (sim_spec_release).
 *
 * 0; GPO_EINVAL with one line in `err` (a split larger than the cluster, a
 * replica that fits no node, a service or job policy the engines reject);
 * GPO_ENOMEM.
 *
 * How (serve_shared.c; docs/simulator.md says the same):
 * - shared: each service's replay first runs alone, with no cap; each of
 *   its replicas becomes a job (sim_opts.extra, engine.h) of the team
 *   "serving" in the class "serving" (above the trace's, may preempt, as
 *   the controller seeds it), submitted when the policy asked for it,
 *   holding gpu_milli for its life (from its start to its end), on the job
 *   replay's cluster. The request trace's time 0 is serve_offset_ms of the
 *   job trace's (serving's own figures stay on its clock).
 *   A spec with a team named "serving" gives the replicas its quota (over
 *   its guarantee they are borrowed, and a reclaim may evict one: counted
 *   in `replica_preemptions`; the serving replay does not see it).
 *   Otherwise the team is added, guaranteed every pool whole: nothing
 *   reclaims from it, a replica ranks before training's borrowed work even
 *   where classes do not order (fifo), and the team is left out of
 *   training's team figures (sim_result.nteams). Training's figures are its
 *   jobs' alone (engine.h); serving's GPU use is in serving's.
 *   Each replica's placement delay (first start less submit) then goes back
 *   to the serving replay (sim_serve_opts.start_delay_ms, its k-th replica
 *   asked), which runs again, and so does the job replay with the new
 *   replicas, until the delays the job replay gives are those serving ran
 *   with (converged) or SIM_SERVE_SHARED_ROUNDS job replays ran. The
 *   results are the last round's: serving replayed with the delays of the
 *   round before. A replica scaled away before it was placed (life 0) is
 *   still a job of the replay, placed and gone at once.
 * - split: serving's replay runs with gpu_cap_milli = split_gpu_milli
 *   (several services: shared out in proportion to each one's peak in a
 *   replay with no cap, rounded down to its whole replicas, at least one);
 *   training's with the cluster's last split_gpu_milli / 1000 GPUs held from
 *   it (sim_opts.held_gpus: the last pool's last nodes, whole nodes first),
 *   so split_gpu_milli is whole GPUs. One round.
 */
#ifndef GPUORCH_SIM_SERVE_SHARED_H
#define GPUORCH_SIM_SERVE_SHARED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/engine.h"
#include "sim/policy.h"
#include "sim/reqtrace.h"
#include "sim/serve.h"
#include "sim/serve_policy.h"
#include "sim/spec.h"
#include "sim/trace.h"

struct sim_serve_shared_in {
    const struct sim_reqtrace *traces;        /* one per service */
    const struct sim_serve_service *services; /* nservices */
    size_t nservices;
    const struct sim_serve_policy *policies; /* serving policies, npolicies */
    size_t npolicies;
    const struct sim_trace *jobs;        /* the job trace */
    struct sim_spec *spec;               /* the cluster (see above) */
    const struct sim_policy *job_policy; /* training's scheduling policy */
    const struct sim_opts *job_opts;     /* restart penalty; may be NULL */
    int64_t split_gpu_milli;             /* 0: shared; > 0: reserved for serving */
    /* Shared: the job trace's time (ms) at which the request traces' time 0
     * falls, >= 0 (the CLI: --from's, so that a window of the job trace
     * starts with the requests; without --from, 0: both traces from 0). */
    int64_t serve_offset_ms;
};

#define SIM_SERVE_SHARED_ROUNDS 3 /* job replays at most, shared */

/* How one serving policy's replay went (the output says it). */
struct sim_serve_shared_stat {
    uint32_t rounds;     /* job replays run: 1 .. SIM_SERVE_SHARED_ROUNDS (split: 1) */
    bool converged;      /* the last round's delays are those serving ran with (split: true) */
    size_t replicas;     /* replica jobs in the last job replay (split: 0) */
    size_t delayed;      /* of them, placed later than asked */
    size_t moved;        /* of them, with a delay more than a second (a tick of serving's
                          * replay) off the one serving ran with: 0 when converged */
    double delay_mean_s; /* placement delay over the replicas */
    double delay_max_s;
    uint64_t replica_preemptions;
    int64_t cap_gpu_milli; /* split: the GPUs serving had (the services' caps summed) */
};

struct sim_serve_shared_out {
    struct sim_serve_result *serve;      /* npolicies * nservices, [p * nservices + s] */
    struct sim_result *jobs;             /* npolicies: training under serving policy p */
    struct sim_serve_shared_stat *stats; /* npolicies, or NULL */
};

int sim_serve_shared_run(const struct sim_serve_shared_in *in, struct sim_serve_shared_out *out,
                         char *err, size_t errlen);

#endif

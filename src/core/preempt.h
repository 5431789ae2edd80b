/*
 * preempt.h - choosing which running jobs to evict for a blocked job.
 *
 * Which jobs may be evicted is the pass's call (a lower priority class,
 * borrowed work for a team reclaiming its guarantee, a more-served
 * checkpointable job under LAS); this module chooses among them. Least work
 * lost goes first: work since the job's last checkpoint (or its start), in
 * GPU-ms, then the lower job id. Only jobs on the nodes the blocked job will
 * use are kept. Jobs already being evicted count as gone.
 */
#ifndef GPUORCH_CORE_PREEMPT_H
#define GPUORCH_CORE_PREEMPT_H

#include <stddef.h>
#include <stdint.h>

#include "core/model.h"
#include "core/view.h"

/* A running job that may be evicted, with the work its eviction loses. */
struct preempt_cand {
    uint32_t run; /* index into the running set */
    uint64_t job;
    int64_t lost_gpu_ms;
};

/* Work lost by evicting `run` at `now_ms`, in GPU-ms. */
int64_t preempt_lost_gpu_ms(const struct sched_running *run, int64_t now_ms);

/* Sorts candidates: least work lost first, then lower job id. 0 or
 * GPO_ENOMEM (unchanged). */
int preempt_sort(struct preempt_cand *cands, size_t n);

/* Hands out the evictable candidates for the job being planned, least work
 * lost first: writes the next one to *ret and returns true, or returns false
 * when there are no more. The plan pulls only as many as it needs. */
typedef bool (*preempt_next_fn)(void *ctx, struct preempt_cand *ret);

/*
 * Plans room for `job` in groups `allowed` (NULL: all eligible), ending at
 * `end_ms` (for reservations). `leaving` lists running jobs already being
 * evicted (indices into `running`); `next` hands out the evictable ones, in
 * order. Returns 1 with *ret_nvictims indices (into the sequence `next`
 * handed out, *ret_given long) written to ret_victims (room for all of them)
 * and the placement in *out; 0 if no eviction makes room; GPO_ENOMEM. The
 * view is tried on in place and put back exactly (through `log`, an empty
 * scratch log the caller keeps), so it is not changed.
 */
int preempt_plan(struct view *view, const struct sched_running_set *running,
                 const uint32_t *leaving, size_t nleaving, const struct sched_job *job,
                 const bool *allowed, int64_t end_ms, preempt_next_fn next, void *ctx,
                 uint32_t *ret_victims, size_t *ret_nvictims, size_t *ret_given,
                 struct view_place *out, struct view_undo *log);

#endif

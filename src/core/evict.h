/*
 * evict.h - preemption decisions within a pass.
 *
 * Who may be evicted for a blocked job (a lower class, borrowed work for a
 * reclaim, a more-served job under LAS), bounded work per pass, and the claims
 * that give the freed room to the job it was freed for. preempt.h chooses
 * among the victims.
 */
#ifndef GPUORCH_CORE_EVICT_H
#define GPUORCH_CORE_EVICT_H

#include "core/pass.h"

/* Tries to make room for job i ending at `end`: 1 planned (preempts and a
 * claim recorded, its room held), 0 not, or an error. */
int evict_try(struct pass *p, uint32_t i, int64_t end);

/* Records the eviction of running job `run` (index into the running set) for
 * job j, and takes what it holds out of the pass's sums. 0 or GPO_ENOMEM. */
int evict_record(struct pass *p, const struct sched_job *j, uint32_t run, int64_t lost_gpu_ms,
                 enum sched_preempt_why why);

/* What job j asks for, in milli-GPU, as LAS weighs a victim against it: LAS
 * never evicts a job that holds more (a job sized by memory: one GPU). */
int64_t evict_las_want(const struct sched_job *j);

/* Might job j, in LAS queue `lasq`, evict anything under LAS: a running
 * checkpointable job in a queue above it (of its team, within teams) that
 * holds no more than it asks for? A cheap necessary condition. */
bool evict_may_preempt_las(const struct pass *p, const struct sched_job *j, uint32_t lasq);

/* Might job j preempt anything by its class or by a reclaim? Likewise. */
bool evict_may_preempt_other(const struct pass *p, const struct sched_job *j);

/* A plan failed in this pass for a job of this kind and no larger. */
bool evict_failed_before(const struct pass *p, const struct sched_job *j);

/* Remembers that a plan failed for job j. */
void evict_note_failure(struct pass *p, const struct sched_job *j);

/* Could evicting all it may evict, plus what is free, add up to job j? */
bool evict_may_suffice(struct pass *p, const struct sched_job *j);

/* Records a claim: `victims` leave for `job`, planned onto `nodes`. */
int evict_add_claim(struct pass *p, uint64_t job, const uint64_t *victims, uint32_t n,
                    const uint32_t *nodes, uint32_t nnodes, int64_t since);

#endif

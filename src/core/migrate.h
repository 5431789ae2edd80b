/*
 * migrate.h - moving running jobs to defragment free GPUs.
 *
 * A single-node job can wait while enough GPUs are free, because no one node
 * has enough of them: a long one-GPU job on each of several nodes is all it
 * takes. With policy->migrate, such a job may move checkpointable single-node
 * jobs of no higher class off one node, when every one of them fits on free
 * GPUs elsewhere at once. Each moved job is evicted (with the grace period)
 * and holds its new place through a claim, so it restarts as soon as it has
 * left; the job it moved for claims the node. No one waits for another: the
 * moved jobs lose only the restart.
 */
#ifndef GPUORCH_CORE_MIGRATE_H
#define GPUORCH_CORE_MIGRATE_H

#include "core/pass.h"

/* Might job j make room by moving jobs: a single-node job of whole GPUs, some
 * group it could use has as many free, and a job that could move runs? A
 * cheap necessary condition. */
bool migrate_may(struct pass *p, const struct sched_job *j);

/* After the ordered loop, when every job has had its turn at the free GPUs
 * and what is still free would stay idle: one waiting job of each shape that
 * migrate_may allows (under fair share, of a team at or below the mean
 * share), in the pass's order, tries to make room on one node by moving jobs
 * away; if it can, it waits as preempting, its room held as evict_try holds
 * it. At most MAX_PLANS tries. 0 or GPO_ENOMEM. */
int migrate_pass_end(struct pass *p);

#endif

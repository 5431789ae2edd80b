/*
 * admit.h - deciding one pending job: start it, or say why it waits.
 *
 * Placement within quota and reservations, the reason a job waits, its
 * preemptions and its reservation; and the freeze: once no job left can
 * change anything but its own wait, the rest are settled in one sweep.
 */
#ifndef GPUORCH_CORE_ADMIT_H
#define GPUORCH_CORE_ADMIT_H

#include "core/pass.h"

/* Decides pending job i. 0 or GPO_ENOMEM. */
int admit_job(struct pass *p, uint32_t i);

/* Are all shapes with jobs still to rank inert (their rank cannot matter)? */
bool admit_frozen(struct pass *p, const uint32_t *cshapes, size_t ncshapes);

/* The wait of a job the ordered loop did not reach, but for the job id (the
 * caller's to set). Only once that loop is over: the answer is kept per shape
 * for the rest of the pass. */
const struct sched_wait *admit_unranked_wait(struct pass *p, uint32_t i);

/* order_within_fn: does pending job i fit its team's guarantee somewhere? */
bool admit_within_guarantee(void *ctx, uint32_t i);

#endif

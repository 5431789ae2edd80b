/*
 * shape.h - jobs grouped by what they ask for, and their validation.
 *
 * A queue of 100,000 jobs holds a few hundred distinct requests (shapes): what
 * depends only on the request (validation, quota checks, the last failed
 * placement) is worked out once per shape.
 */
#ifndef GPUORCH_CORE_SHAPE_H
#define GPUORCH_CORE_SHAPE_H

#include "core/pass.h"

/* The one pass over the queue: each id into p->ids (a duplicate is
 * GPO_EINVAL), each job to its shape (p->jshape) and its order copy
 * (p->ojob). Each shape is validated on its first job; a job of an invalid
 * shape gets that job's wait, a job that fits the free capacity or may
 * preempt is put in cands (room for every job; *ret_ncands of them, in queue
 * order). 0, GPO_EINVAL or GPO_ENOMEM. */
int shape_find(struct pass *p, uint32_t *cands, size_t *ret_ncands);

/* Checks pending job i on its own and against the cluster; false (with a
 * final wait set) if it can never run. Sets J_FIT0 if it fits free capacity now. */
bool shape_validate(struct pass *p, uint32_t i);

#endif

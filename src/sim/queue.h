/*
 * queue.h - the simulator's pending jobs, kept in the layout sched_pass
 * reads: a contiguous array of requests in job order, so a pass takes it as
 * it is instead of gathering 96-byte requests from all over the job table.
 *
 * Beside each request: the job's index and the reason it waited in the last
 * pass. Entries live in [head, head + n) of the arrays. Removing the jobs a
 * pass started moves only the entries before the last removed one (they
 * shift towards the end and head advances): passes start jobs mostly near
 * the front, so most of the queue never moves.
 */
#ifndef GPUORCH_SIM_QUEUE_H
#define GPUORCH_SIM_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model.h"

#define SIM_QUEUE_GONE 0xff /* reason of an entry to remove (sim_queue_compact) */

struct sim_queue {
    uint32_t *job;         /* job index */
    struct sched_job *req; /* the request sched_pass sees */
    uint8_t *reason;       /* enum sched_reason of the last pass, or SIM_QUEUE_GONE */
    size_t head, n, cap;
    size_t nsorted; /* entries [head, head + nsorted) are in job order */
};

void sim_queue_init(struct sim_queue *q);
void sim_queue_release(struct sim_queue *q);

/* Appends job `job` with its request (copied), reason 0 (none yet).
 * 0 or GPO_ENOMEM. */
int sim_queue_push(struct sim_queue *q, uint32_t job, const struct sched_job *req);

/* Puts the entries back in job order, if a push broke it: the pushes since
 * the last sort are sorted and merged into the rest, which moves only the
 * entries between them. 0 or GPO_ENOMEM. */
int sim_queue_sort(struct sim_queue *q);

/* Drops the entries whose reason is SIM_QUEUE_GONE; `last_gone` is the
 * position (0-based from head) of the last of them. */
void sim_queue_compact(struct sim_queue *q, size_t last_gone);

#endif

/*
 * backfill.h - EASY backfill's look-ahead: when and where a blocked job can
 * start if running jobs end at their time limits.
 *
 * The pass reserves those nodes for the highest-ranked blocked job of each
 * pool, from that time on; a lower job may then start only where it cannot
 * delay the reservation: on other nodes, or on reserved ones if its own time
 * limit ends before the reservation starts.
 */
#ifndef GPUORCH_CORE_BACKFILL_H
#define GPUORCH_CORE_BACKFILL_H

#include <stddef.h>
#include <stdint.h>

#include "core/model.h"
#include "core/view.h"

/* Resources a running job gives back, and when (its start plus time limit). */
struct backfill_release {
    int64_t end_ms;
    uint64_t job;
    const struct sched_alloc *alloc; /* borrowed */
};

/* Sorts releases by end, ties by job id. 0 or GPO_ENOMEM (unchanged). */
int backfill_sort(struct backfill_release *rel, size_t n);

/*
 * Finds the earliest time, at or after `now_ms`, when `job` fits in the groups
 * `allowed` (NULL: all eligible) once the releases (sorted) up to then have
 * happened, on nodes no reservation holds. Returns 1 and fills *ret_start_ms
 * and *out (arrays as for view_place); 0 if it never fits; GPO_ENOMEM.
 * The releases are tried on the view in place and undone through `log` (an
 * empty scratch log the caller keeps), so the view is not changed.
 */
int backfill_shadow(struct view *view, const struct sched_job *job, const bool *allowed,
                    const struct backfill_release *rel, size_t nrel, int64_t now_ms,
                    int64_t *ret_start_ms, struct view_place *out, struct view_undo *log);

#endif

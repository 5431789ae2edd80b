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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model.h"
#include "core/view.h"

/* Resources a running job gives back, and when (its start plus time limit). */
struct backfill_release {
    int64_t end_ms;
    uint64_t job;
    const struct sched_alloc *alloc; /* borrowed */
    bool assumed; /* end_ms assumes the policy's default limit: the job has no time limit */
};

/*
 * The releases of a pass, read in order of end, ties by job id. A look-ahead
 * reads them only until its job fits (on philly's first 58 days at --load
 * 0.9, 15 of some 370 on average), so they are ordered as they are read:
 * the first ones found so far in `sorted`, the rest in a binary heap, built
 * at the first read. A release added after reads began takes its place in
 * that order.
 */
struct backfill_releases {
    struct backfill_release *sorted; /* [0, nsorted): the first in order */
    size_t nsorted, sorted_cap;
    struct backfill_release *heap; /* the rest: a min-heap once `heaped` */
    size_t nheap, heap_cap;
    bool heaped;
};

void backfill_releases_init(struct backfill_releases *rs);
void backfill_releases_release(struct backfill_releases *rs);

/* Makes room for n more adds before the first read. 0 or GPO_ENOMEM. */
int backfill_releases_reserve(struct backfill_releases *rs, size_t n);

/* Adds one; each job at most once. 0 or GPO_ENOMEM (unchanged). */
int backfill_releases_add(struct backfill_releases *rs, const struct backfill_release *rel);

/* The release i-th in order (from 0), or NULL past the last, or on
 * GPO_ENOMEM (*ret_err set). The pointer holds until the next call. */
const struct backfill_release *backfill_releases_at(struct backfill_releases *rs, size_t i,
                                                    int *ret_err);

/*
 * Finds the earliest time, at or after `now_ms`, when `job` fits in the groups
 * `allowed` (NULL: all eligible) once the releases up to then have
 * happened, on nodes no reservation holds. Returns 1 and fills *ret_start_ms,
 * *ret_assumed (whether a release up to then ends at an assumed time, so the
 * start is no promise) and *out (arrays as for view_place); 0 if it never
 * fits; GPO_ENOMEM.
 * The releases are tried on the view in place and undone through `log` (an
 * empty scratch log the caller keeps), so the view is not changed.
 */
int backfill_shadow(struct view *view, const struct sched_job *job, const bool *allowed,
                    struct backfill_releases *rel, int64_t now_ms, int64_t *ret_start_ms,
                    bool *ret_assumed, struct view_place *out, struct view_undo *log);

#endif

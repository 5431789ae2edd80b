#include <stdint.h>
#include <stdlib.h>

#include "core/backfill.h"
#include "core/err.h"
#include "core/sort.h"
#include "util/banned.h"

static bool release_before(const struct backfill_release *x, const struct backfill_release *y)
{
    return x->end_ms != y->end_ms ? x->end_ms < y->end_ms : x->job < y->job;
}

SORT_DEFINE(sort_releases, struct backfill_release, release_before)

int backfill_sort(struct backfill_release *rel, size_t n)
{
    return sort_releases(rel, n);
}

/* Whole GPUs on node n that count toward a gang of `job` in `view`. */
static uint32_t gang_whole(const struct view *view, const struct sched_job *job,
                           const bool *allowed, uint32_t n)
{
    const struct view_node *vn = &view->nodes[n];
    if (!vn->usable || vn->resv >= 0 || (allowed && !allowed[vn->group]) ||
        !view_group_eligible(view, job, vn->group))
        return 0;
    return view_node_whole_for(view, job, n);
}

int backfill_shadow(struct view *view, const struct sched_job *job, const bool *allowed,
                    const struct backfill_release *rel, size_t nrel, int64_t now_ms,
                    int64_t *ret_start_ms, struct view_place *out, struct view_undo *log)
{
    bool gang = job->gpus > 0 && job->multi_node;
    uint64_t sum = 0;
    if (gang) {
        for (uint32_t n = 0; n < view->cluster->nnodes; n++)
            sum += gang_whole(view, job, allowed, n);
    }
    int found = 0, err = 0;
    for (size_t i = 0; i < nrel && !found; i++) {
        const struct sched_alloc *a = rel[i].alloc;
        bool touched_fits = false;
        if (gang) {
            for (uint32_t p = 0; p < a->nnodes; p++)
                sum -= gang_whole(view, job, allowed, a->nodes[p].node);
        }
        if ((err = view_apply_logged(view, a, true, log)))
            break;
        for (uint32_t p = 0; p < a->nnodes; p++) {
            uint32_t n = a->nodes[p].node;
            if (gang)
                sum += gang_whole(view, job, allowed, n);
            else if (!touched_fits && view->nodes[n].resv < 0 &&
                     (!allowed || allowed[view->nodes[n].group]))
                touched_fits = view_node_fits(view, job, n);
        }
        if (gang ? sum < (uint64_t)job->gpus && !touched_fits : !touched_fits)
            continue;
        /* Something fits now: let placement choose, as it would at that time. */
        unsigned miss = 0;
        if (view_place(view, job, allowed, INT64_MAX, false, out, &miss)) {
            *ret_start_ms = rel[i].end_ms > now_ms ? rel[i].end_ms : now_ms;
            found = 1;
        }
    }
    view_undo(view, log);
    return err ? err : found;
}

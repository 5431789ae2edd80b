#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/backfill.h"
#include "base/err.h"
#include "base/sort.h"
#include "base/vec.h"
#include "base/banned.h"

static bool release_before(const struct backfill_release *x, const struct backfill_release *y)
{
    return x->end_ms != y->end_ms ? x->end_ms < y->end_ms : x->job < y->job;
}

void backfill_releases_init(struct backfill_releases *rs)
{
    memset(rs, 0, sizeof(*rs));
}

void backfill_releases_release(struct backfill_releases *rs)
{
    if (!rs)
        return;
    free(rs->sorted);
    free(rs->heap);
    memset(rs, 0, sizeof(*rs));
}

SIFT_DOWN_DEFINE(sift_down, struct backfill_release, release_before)

static void sift_up(struct backfill_release *h, size_t i)
{
    struct backfill_release x = h[i];
    while (i > 0 && release_before(&x, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = x;
}

int backfill_releases_reserve(struct backfill_releases *rs, size_t n)
{
    return vec_grow((void **)&rs->heap, &rs->heap_cap, rs->nheap + n, sizeof(*rs->heap));
}

int backfill_releases_add(struct backfill_releases *rs, const struct backfill_release *rel)
{
    if (rs->nsorted && release_before(rel, &rs->sorted[rs->nsorted - 1])) {
        /* Before one already read: it joins the ordered part. */
        if (vec_grow((void **)&rs->sorted, &rs->sorted_cap, rs->nsorted + 1, sizeof(*rs->sorted)))
            return GPO_ENOMEM;
        size_t k = rs->nsorted++;
        for (; k > 0 && release_before(rel, &rs->sorted[k - 1]); k--)
            rs->sorted[k] = rs->sorted[k - 1];
        rs->sorted[k] = *rel;
        return 0;
    }
    if (vec_grow((void **)&rs->heap, &rs->heap_cap, rs->nheap + 1, sizeof(*rs->heap)))
        return GPO_ENOMEM;
    rs->heap[rs->nheap++] = *rel;
    if (rs->heaped)
        sift_up(rs->heap, rs->nheap - 1);
    return 0;
}

const struct backfill_release *backfill_releases_at(struct backfill_releases *rs, size_t i,
                                                    int *ret_err)
{
    if (i >= rs->nsorted && rs->nheap) {
        if (!rs->heaped) {
            for (size_t k = rs->nheap / 2; k-- > 0;)
                sift_down(rs->heap, rs->nheap, k);
            rs->heaped = true;
        }
        size_t want = i < rs->nsorted + rs->nheap ? i + 1 : rs->nsorted + rs->nheap;
        if (vec_grow((void **)&rs->sorted, &rs->sorted_cap, want, sizeof(*rs->sorted))) {
            *ret_err = GPO_ENOMEM;
            return NULL;
        }
        while (rs->nsorted <= i && rs->nheap) {
            rs->sorted[rs->nsorted++] = rs->heap[0];
            rs->heap[0] = rs->heap[--rs->nheap];
            if (rs->nheap)
                sift_down(rs->heap, rs->nheap, 0);
        }
    }
    return i < rs->nsorted ? &rs->sorted[i] : NULL;
}

/* Whole GPUs on node n that count toward a gang of `job` in `view`. */
static uint32_t gang_whole(const struct view *view, const struct sched_job *job,
                           const bool *allowed, uint32_t n)
{
    const struct view_node *vn = &view->nodes[n];
    if (!vn->usable || vn->resv >= 0 || (allowed && !allowed[vn->group]) ||
        !view_group_eligible(view, job, vn->group) ||
        (sched_job_shaped(job) && !view_node_admits(view, job, n)))
        return 0;
    return view_node_whole_for(view, job, n);
}

int backfill_shadow(struct view *view, const struct sched_job *job, const bool *allowed,
                    struct backfill_releases *rel, int64_t now_ms, int64_t *ret_start_ms,
                    bool *ret_assumed, struct view_place *out, struct view_undo *log)
{
    /* Nothing released makes room where no allowed group could ever hold
     * the job (its GPUs are all in MIG mode, held, or on nodes not up). */
    bool could = false;
    for (uint32_t g = 0; g < view->ngroups && !could; g++)
        could = (!allowed || allowed[g]) && view_group_eligible(view, job, g) &&
                view_group_could_hold(view, job, g);
    if (!could)
        return 0;
    /* A fewest-nodes gang fits once enough GPUs are free together; an
     * exact-N gang is tried where a node could take a member. */
    bool gang = job->gpus > 0 && job->multi_node && job->nodes <= 1;
    uint64_t sum = 0;
    if (gang) {
        for (uint32_t n = 0; n < view->cluster->nnodes; n++)
            sum += gang_whole(view, job, allowed, n);
    }
    int found = 0, err = 0;
    bool assumed = false;
    const struct backfill_release *r;
    for (size_t i = 0; !found && (r = backfill_releases_at(rel, i, &err)); i++) {
        const struct sched_alloc *a = r->alloc;
        assumed |= r->assumed;
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
            *ret_start_ms = r->end_ms > now_ms ? r->end_ms : now_ms;
            *ret_assumed = assumed;
            found = 1;
        }
    }
    view_undo(view, log);
    return err ? err : found;
}

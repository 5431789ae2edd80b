#include <stdint.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "base/err.h"
#include "core/preempt.h"
#include "base/sort.h"
#include "base/banned.h"

int64_t preempt_lost_gpu_ms(const struct sched_running *run, int64_t now_ms)
{
    int64_t since = run->start_ms;
    if (run->job && run->job->checkpointable && run->checkpoint_ms > since)
        since = run->checkpoint_ms;
    int64_t span = now_ms > since ? now_ms - since : 0;
    int64_t milli = 0;
    for (uint32_t i = 0; i < run->alloc.nshares; i++)
        milli += run->alloc.shares[i].milli;
    if (!milli)
        milli = 1; /* a CPU-only job still loses its work */
    return span / SCHED_MILLI * milli + span % SCHED_MILLI * milli / SCHED_MILLI;
}

static bool cand_before(const struct preempt_cand *x, const struct preempt_cand *y)
{
    return x->lost_gpu_ms != y->lost_gpu_ms ? x->lost_gpu_ms < y->lost_gpu_ms : x->job < y->job;
}

SORT_DEFINE(sort_cands, struct preempt_cand, cand_before)

int preempt_sort(struct preempt_cand *cands, size_t n)
{
    return sort_cands(cands, n);
}

static bool uses_node(const struct sched_alloc *a, const struct view_place *p)
{
    for (uint32_t i = 0; i < a->nnodes; i++) {
        for (uint32_t j = 0; j < p->nnodes; j++) {
            if (a->nodes[i].node == p->nodes[j].node)
                return true;
        }
    }
    return false;
}

static uint64_t gang_sum(const struct view *v, const struct sched_job *job, const bool *allowed,
                         uint32_t n)
{
    const struct view_node *vn = &v->nodes[n];
    if (!vn->usable || (allowed && !allowed[vn->group]) ||
        !view_group_eligible(v, job, vn->group) ||
        (sched_job_shaped(job) && !view_node_admits(v, job, n)))
        return 0;
    return view_node_whole_for(v, job, n);
}

/* Does allocation a hold the MIG instance of share s? */
static bool holds_instance(const struct sched_alloc *a, const struct sched_share *s)
{
    for (uint32_t i = 0; i < a->nshares; i++) {
        const struct sched_share *h = &a->shares[i];
        if (h->mig && h->gpu == s->gpu && h->mig_start == s->mig_start)
            return true;
    }
    return false;
}

/*
 * A placement on a MIG instance needs only the victims that held it, not
 * every job on its node (those hold other instances, or other GPUs): keep
 * those if, with them (and the jobs already leaving) gone, the node fits
 * the job; *ret_n 0 otherwise (the caller keeps the node's). 0 or
 * GPO_ENOMEM; the view is put back.
 */
static int mig_victims(struct view *view, const struct sched_running_set *running,
                       const uint32_t *leaving, size_t nleaving, const struct sched_job *job,
                       const struct sched_alloc *const *taken, size_t given,
                       const struct view_place *out, uint32_t *ret_victims, size_t *ret_n,
                       struct view_undo *log)
{
    size_t n = 0;
    int err = 0;
    for (size_t i = 0; i < nleaving && !err; i++)
        err = view_apply_logged(view, &running->jobs[leaving[i]].alloc, true, log);
    for (size_t i = 0; i < given && !err; i++) {
        if (holds_instance(taken[i], &out->shares[0])) {
            err = view_apply_logged(view, taken[i], true, log);
            ret_victims[n++] = (uint32_t)i;
        }
    }
    bool fits = !err && n && view_node_fits(view, job, out->nodes[0].node);
    view_undo(view, log);
    *ret_n = fits ? n : 0;
    return err;
}

int preempt_plan(struct view *view, const struct sched_running_set *running,
                 const uint32_t *leaving, size_t nleaving, const struct sched_job *job,
                 const bool *allowed, int64_t end_ms, preempt_next_fn next, void *ctx,
                 uint32_t *ret_victims, size_t *ret_nvictims, size_t *ret_given,
                 struct view_place *out, struct view_undo *log)
{
    int err = 0;
    for (size_t i = 0; i < nleaving && !err; i++)
        err = view_apply_logged(view, &running->jobs[leaving[i]].alloc, true, log);

    unsigned miss = 0;
    int found = 0;
    size_t given = 0, n = 0;
    /* The victims' allocations, in the order handed out, for the pruning below. */
    const struct sched_alloc **taken = NULL;
    size_t taken_cap = 0;
    if (err) {
        /* fall through to the undo */
    } else if (view_place(view, job, allowed, end_ms, false, out, &miss)) {
        found = 1; /* the jobs already leaving make room: evict nobody new */
    } else {
        /* A fewest-nodes gang fits once enough GPUs are free together; an
         * exact-N gang is tried where a node could take a member. */
        bool gang = job->gpus > 0 && job->multi_node && job->nodes <= 1;
        uint64_t sum = 0;
        for (uint32_t nd = 0; gang && nd < view->cluster->nnodes; nd++)
            sum += gang_sum(view, job, allowed, nd);
        struct preempt_cand cand;
        while (!found && !err && next(ctx, &cand)) {
            const struct sched_alloc *a = &running->jobs[cand.run].alloc;
            if (given == taken_cap) {
                size_t cap = taken_cap ? 2 * taken_cap : 64;
                // NOLINTNEXTLINE(bugprone-sizeof-expression): *p is a pointer (an array of them)
                const struct sched_alloc **t = gpo_realloc(taken, cap * sizeof(*t));
                if (!t) {
                    err = GPO_ENOMEM;
                    break;
                }
                taken = t;
                taken_cap = cap;
            }
            taken[given++] = a;
            bool try_place = false;
            for (uint32_t p = 0; gang && p < a->nnodes; p++)
                sum -= gang_sum(view, job, allowed, a->nodes[p].node);
            if ((err = view_apply_logged(view, a, true, log)))
                break;
            for (uint32_t p = 0; p < a->nnodes; p++) {
                uint32_t nd = a->nodes[p].node;
                if (gang)
                    sum += gang_sum(view, job, allowed, nd);
                else if (!allowed || allowed[view->nodes[nd].group])
                    try_place = try_place || view_node_fits(view, job, nd);
            }
            if (gang)
                try_place = sum >= (uint64_t)job->gpus;
            if (try_place && view_place(view, job, allowed, end_ms, false, out, &miss))
                found = 1;
        }
    }
    view_undo(view, log);
    if (found && !err && out->nshares == 1 && out->shares[0].mig)
        err = mig_victims(view, running, leaving, nleaving, job, taken, given, out, ret_victims, &n,
                          log);
    bool by_instance = n > 0;
    for (size_t i = 0; found && !err && !by_instance && i < given; i++) {
        if (uses_node(taken[i], out))
            ret_victims[n++] = (uint32_t)i;
    }
    free(taken);
    *ret_given = given;
    if (err)
        return err;
    *ret_nvictims = n;
    return found;
}

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "core/admit.h"
#include "core/evict.h"
#include "base/vec.h"
#include "base/banned.h"

static int record_start(struct pass *p, uint32_t i)
{
    struct sched_result *r = p->res;
    const struct sched_job *j = &p->q->jobs[i];
    const struct view_place *pl = &p->place;
    if (vec_grow((void **)&r->starts, &r->starts_cap, r->nstarts + 1, sizeof(*r->starts)))
        return GPO_ENOMEM;
    struct sched_node_part *parts = pass_arena_alloc(r, pl->nnodes * sizeof(*parts));
    struct sched_share *shares =
        pass_arena_alloc(r, (pl->nshares ? pl->nshares : 1) * sizeof(*shares));
    if (!parts || !shares)
        return GPO_ENOMEM;
    memcpy(parts, pl->nodes, pl->nnodes * sizeof(*parts));
    memcpy(shares, pl->shares, pl->nshares * sizeof(*shares));
    struct sched_start *s = &r->starts[r->nstarts++];
    s->job = j->id;
    s->alloc = (struct sched_alloc){parts, pl->nnodes, shares, pl->nshares};

    uint32_t g;
    int64_t milli;
    quota_alloc_usage(&p->view, &s->alloc, &g, &milli);
    s->borrowed = g != SCHED_NONE && !quota_within_guarantee(&p->quota, j->team, g, milli);
    if (g != SCHED_NONE) {
        quota_add(&p->quota, j->team, g, milli);
        p->group_starts[g]++;
        pass_update_guar_left(p, j->team);
    }
    p->team_starts[j->team]++;
    p->version++;
    view_apply(&p->view, &s->alloc, false);
    order_note_start(&p->order, j->team, g != SCHED_NONE ? p->view.groups[g].gpu_type : SCHED_NONE,
                     milli);
    /* r->starts moves as it grows: backfill gets its own copy of the allocation,
     * in the arena, which never moves. */
    struct sched_alloc *kept = pass_arena_alloc(r, sizeof(*kept));
    if (!kept)
        return GPO_ENOMEM;
    *kept = s->alloc;
    p->jflag[i] |= J_STARTED | J_DONE;
    return backfill_releases_add(&p->rels, &(struct backfill_release){job_end(p, j, p->now), j->id,
                                                                      kept, j->time_limit_ms <= 0});
}

/* The reservation, in EASY style: one per pool, for its highest-ranked blocked job. */
static int try_reserve(struct pass *p, uint32_t i)
{
    const struct sched_job *j = &p->q->jobs[i];
    for (uint32_t g = 0; g < p->view.ngroups; g++) {
        if (p->allowed[g] && p->pool_resv[p->view.groups[g].pool] >= 0)
            return 0;
    }
    int64_t start;
    bool assumed = false;
    int found = backfill_shadow(&p->view, j, p->allowed, &p->rels, p->now, &start, &assumed,
                                &p->place, &p->undo);
    if (found == 0)
        p->shapes_of[p->jshape[i]].reserve_fail_version = p->version + 1;
    if (found <= 0)
        return found;
    int r = pass_hold_place(p, j->id, start);
    if (r < 0)
        return r;
    p->pool_resv[p->view.groups[p->place.group].pool] = r;
    /* The reservation holds its nodes from `start` either way; the time is
     * told only when every job it waits for has a limit. */
    p->jwait[i].est_start_ms = assumed ? SCHED_EST_NO_LIMIT : start;
    return 1;
}

/* Would the job have fitted the free capacity the pass began with (in the
 * groups its quota allows now)? Then higher-ranked jobs took its room: the
 * "priority" reason. Only asked when something started where it could go. */
static bool fit_at_start(struct pass *p, uint32_t i)
{
    const struct sched_job *j = &p->q->jobs[i];
    bool started = false;
    for (uint32_t g = 0; g < p->view.ngroups && !started; g++)
        started = p->allowed[g] && p->group_starts[g];
    if (!started)
        return false;
    struct jshape *sh = &p->shapes_of[p->jshape[i]];
    uint32_t stamp = p->team_starts[j->team] + 1;
    if (sh->fit_stamp == stamp)
        return sh->fits;
    bool fits = false;
    p->pristine.headroom = p->headroom;
    if (sched_job_wants_gpu(j) && !sched_job_gang(j)) {
        /* Only nodes that had a GPU free when the pass began can answer yes. */
        for (uint32_t k = 0; k < p->nfree0 && !fits; k++) {
            uint32_t n = p->free0[k];
            fits = p->allowed[p->pristine.nodes[n].group] && view_node_fits(&p->pristine, j, n);
        }
    } else {
        unsigned miss = 0;
        fits = view_place(&p->pristine, j, p->allowed, INT64_MAX, true, &p->place, &miss);
    }
    sh->fit_stamp = stamp;
    sh->fits = fits;
    return fits;
}

/* Why a job with Slurm's shape found no room, when its shape is what
 * stops it; SCHED_REASON_NONE otherwise. */
static enum sched_reason explain_shaped(const struct sched_job *j, unsigned miss)
{
    if (j->nodes > 1 && (miss & VIEW_MISS_NODES))
        return j->exclusive            ? SCHED_REASON_EXCLUSIVE
               : view_job_node_gpus(j) ? SCHED_REASON_NODES
                                       : SCHED_REASON_NODES_HOST;
    if (!(miss & VIEW_MISS_SHAPE))
        return SCHED_REASON_NONE;
    if (j->exclusive)
        return SCHED_REASON_EXCLUSIVE;
    return j->mem_whole_node ? SCHED_REASON_WHOLE_MEM : SCHED_REASON_FEATURES;
}

/* Why a job that did not fit waits: the reason and the job in the way; for
 * an exact-N gang, how many nodes could take a member (*ret_have). */
static enum sched_reason explain_miss(struct pass *p, uint32_t i, unsigned miss, int64_t end,
                                      uint32_t nallowed, uint32_t neligible, uint64_t *ret_other,
                                      uint32_t *ret_have)
{
    const struct sched_job *j = &p->q->jobs[i];
    *ret_other = 0;
    *ret_have = p->place.nodes_have;
    if (miss & VIEW_MISS_RESV) {
        int32_t br = p->place.blocking_resv;
        unsigned m2 = 0;
        if (view_place(&p->view, j, p->allowed, end, true, &p->place, &m2)) {
            *ret_other = br >= 0 ? p->view.resvs[br].job : 0;
            return SCHED_REASON_RESERVED;
        }
    }
    if (nallowed < neligible) {
        unsigned m2 = 0;
        if (view_place(&p->view, j, p->eligible, end, true, &p->place, &m2))
            return SCHED_REASON_QUOTA;
    }
    /* The GPUs were there but not the CPUs or memory beside them; or they were
     * free when the pass began and higher-ranked jobs took them; or not. */
    if ((miss & VIEW_MISS_HOST) &&
        !(miss & (VIEW_MISS_GPU | VIEW_MISS_GANG | VIEW_MISS_NODES | VIEW_MISS_SHAPE)))
        return SCHED_REASON_HOST;
    if ((p->jflag[i] & J_FIT0) && fit_at_start(p, i))
        return SCHED_REASON_PRIORITY;
    enum sched_reason shaped = explain_shaped(j, miss);
    if (shaped != SCHED_REASON_NONE)
        return shaped;
    if (j->multi_node && (miss & VIEW_MISS_GANG))
        return SCHED_REASON_GANG;
    if (sched_job_mig_only(j))
        return pass_mig_reason(p, j, p->eligible, ret_other);
    return sched_job_wants_gpu(j) ? SCHED_REASON_NO_GPU : SCHED_REASON_HOST;
}

/* Starts job i if it fits the groups allowed; otherwise finds why it waits,
 * and may preempt or reserve for it. */
static int place_or_explain(struct pass *p, uint32_t i, uint32_t nallowed, uint32_t neligible)
{
    const struct sched_job *j = &p->q->jobs[i];
    uint32_t type = j->gpu_type, pool = j->pool;
    int64_t end = job_end(p, j, p->now);
    /* A job shaped like one that found no room finds none either, until
     * something starts or a reservation or block changes the view (version),
     * or its team's usage changes (team_starts): on a full cluster, a lookup
     * per job instead of a placement. */
    struct jshape *sh = &p->shapes_of[p->jshape[i]];
    enum sched_reason why;
    uint64_t other;
    uint32_t have;
    if (sh->missed && sh->miss_version == p->version &&
        sh->miss_team_starts == p->team_starts[j->team]) {
        why = sh->why;
        other = sh->other;
        have = sh->nodes_have;
    } else {
        unsigned miss = 0;
        if (view_place(&p->view, j, p->allowed, end, false, &p->place, &miss))
            return record_start(p, i);
        why = explain_miss(p, i, miss, end, nallowed, neligible, &other, &have);
        sh->missed = true;
        sh->miss_version = p->version;
        sh->miss_team_starts = p->team_starts[j->team];
        sh->why = why;
        sh->other = other;
        sh->nodes_have = have;
    }
    pass_set_wait(p, i, why, pool, type, other, NULL);
    pass_set_nodes(p, i, have);
    if (why == SCHED_REASON_RESERVED || why == SCHED_REASON_QUOTA)
        return 0;

    if (p->pol->preemption && (p->jflag[i] & J_POT) && !evict_failed_before(p, j)) {
        int pr = evict_try(p, i, end);
        if (pr < 0)
            return pr;
        if (pr > 0) {
            pass_set_wait(p, i, SCHED_REASON_PREEMPTING, pool, type, 0, NULL);
            p->jwait[i].est_start_ms = p->now + p->pol->preempt_grace_ms;
            return 0;
        }
        evict_note_failure(p, j);
    }
    if (p->pol->backfill) {
        int rr = try_reserve(p, i);
        if (rr < 0)
            return rr;
    } else {
        pass_block_pools(p, j->id);
    }
    return 0;
}

int admit_job(struct pass *p, uint32_t i)
{
    const struct sched_job *j = &p->q->jobs[i];
    p->res->decisions++;
    uint32_t nallowed;
    uint32_t neligible = pass_allowed(p, i, &nallowed);
    uint32_t type = j->gpu_type, pool = j->pool;
    if (!nallowed) {
        pass_set_wait(p, i, SCHED_REASON_QUOTA, pool, type, 0, NULL);
        return 0;
    }
    if (!p->pol->backfill) {
        uint64_t b = pass_blocked_by(p);
        if (b) {
            pass_set_wait(p, i, SCHED_REASON_BLOCKED, pool, type, b, NULL);
            return 0;
        }
        /* Pools blocked by a higher job are closed to this one, even if it may
         * also run elsewhere. */
        for (uint32_t g = 0; g < p->view.ngroups; g++) {
            if (p->allowed[g] && p->pool_block[p->view.groups[g].pool]) {
                p->allowed[g] = false;
                p->eligible[g] = false;
                nallowed--;
                neligible--;
            }
        }
    }
    p->view.headroom = p->headroom;
    int err = place_or_explain(p, i, nallowed, neligible);
    p->view.headroom = NULL;
    return err;
}

/*
 * Would ranking any of shape s's remaining candidates change nothing but its
 * own wait? That is: it finds no room, cannot preempt, and needs no
 * reservation (its pools have one, or backfill found none). Then its reason
 * does not depend on its rank. The shape's jobs share everything this looks
 * at but, under LAS, their queue: the candidate in the least-served queue
 * stands for them (sh->rep), as what a job may evict only shrinks as its
 * queue rises. Probing a shape's placement here has no side effect but the
 * shape's miss cache.
 */
static bool shape_inert(struct pass *p, uint32_t s)
{
    struct jshape *sh = &p->shapes_of[s];
    uint32_t rep = sh->rep;
    const struct sched_job *j = &p->q->jobs[rep];
    uint32_t nallowed;
    uint32_t neligible = pass_allowed(p, rep, &nallowed);
    if (!nallowed)
        return true; /* quota */
    if (!p->pol->backfill)
        return pass_blocked_by(p) != 0; /* else it might block its pools */
    if (!(sh->missed && sh->miss_version == p->version &&
          sh->miss_team_starts == p->team_starts[j->team])) {
        int64_t end = job_end(p, j, p->now);
        unsigned miss = 0;
        p->view.headroom = p->headroom;
        bool fits = view_place(&p->view, j, p->allowed, end, false, &p->place, &miss);
        if (!fits) {
            uint64_t other;
            uint32_t have;
            sh->why = explain_miss(p, rep, miss, end, nallowed, neligible, &other, &have);
            sh->other = other;
            sh->nodes_have = have;
            sh->missed = true;
            sh->miss_version = p->version;
            sh->miss_team_starts = p->team_starts[j->team];
        }
        p->view.headroom = NULL;
        if (fits)
            return false;
    }
    if (sh->why == SCHED_REASON_RESERVED || sh->why == SCHED_REASON_QUOTA)
        return true;
    if (p->pol->preemption && sh->pot && p->nplans < MAX_PLANS && !evict_failed_before(p, j) &&
        evict_may_suffice(p, j))
        return false;
    if (sh->reserve_fail_version == p->version + 1)
        return true;
    for (uint32_t g = 0; g < p->view.ngroups; g++) {
        if (p->allowed[g] && p->pool_resv[p->view.groups[g].pool] < 0)
            return false;
    }
    return true;
}

/* Are all shapes still waiting to be ranked inert? */
bool admit_frozen(struct pass *p, const uint32_t *cshapes, size_t ncshapes)
{
    for (size_t k = 0; k < ncshapes; k++) {
        if (p->shapes_of[cshapes[k]].remaining && !shape_inert(p, cshapes[k]))
            return false;
    }
    return true;
}

/*
 * The wait of a job the ordered loop did not reach: a candidate left when the
 * rest froze gets what ranking would have given it, its shape's (see
 * shape_inert); a job never ranked waits for quota or for capacity.
 */
static struct sched_wait unranked_wait(struct pass *p, uint32_t i)
{
    const struct sched_job *j = &p->q->jobs[i];
    const struct jshape *sh = &p->shapes_of[p->jshape[i]];
    uint32_t nallowed = pass_allowed_count(p, i);
    if (!p->pol->backfill)
        pass_allowed(p, i, &nallowed); /* blocked_by reads p->allowed */
    if (!nallowed)
        return make_wait(j, SCHED_REASON_QUOTA, j->pool, j->gpu_type, 0, NULL);
    uint64_t blocker = p->pol->backfill ? 0 : pass_blocked_by(p);
    if (blocker)
        return make_wait(j, SCHED_REASON_BLOCKED, j->pool, j->gpu_type, blocker, NULL);
    struct sched_wait w;
    if (p->jflag[i] & J_CAND) {
        w = make_wait(j, sh->why, j->pool, j->gpu_type, sh->other, NULL);
        wait_set_nodes(&w, j, sh->nodes_have);
        return w;
    }
    if (sched_job_shaped(j)) {
        /* Once per shape: where its placement fails says why. */
        unsigned miss = 0;
        if (!view_place(&p->view, j, NULL, INT64_MAX, true, &p->place, &miss)) {
            enum sched_reason why = explain_shaped(j, miss);
            if (why != SCHED_REASON_NONE) {
                w = make_wait(j, why, j->pool, j->gpu_type, 0, NULL);
                wait_set_nodes(&w, j, p->place.nodes_have);
                return w;
            }
        }
    }
    uint64_t other = 0;
    enum sched_reason why = j->multi_node            ? SCHED_REASON_GANG
                            : sched_job_mig_only(j)  ? pass_mig_reason(p, j, NULL, &other)
                            : sched_job_wants_gpu(j) ? SCHED_REASON_NO_GPU
                                                     : SCHED_REASON_HOST;
    return make_wait(j, why, j->pool, j->gpu_type, other, NULL);
}

/* Everything above depends on the job's shape and on whether it was a
 * candidate, and nothing changes once the ordered loop is over: each shape's
 * two answers are worked out once, and each job gets a copy with its id. */
const struct sched_wait *admit_unranked_wait(struct pass *p, uint32_t i)
{
    struct jshape *sh = &p->shapes_of[p->jshape[i]];
    unsigned k = (p->jflag[i] & J_CAND) ? 1 : 0;
    if (!(sh->swept & (1u << k))) {
        sh->sweep[k] = unranked_wait(p, i);
        pass_wait_numbers(p, &p->q->jobs[i], &sh->sweep[k]);
        sh->swept |= (uint8_t)(1u << k);
    }
    return &sh->sweep[k];
}

/* order_within_fn: does pending job i fit within its team's guarantee in
 * some group it could use? */
bool admit_within_guarantee(void *ctx, uint32_t i)
{
    struct pass *p = ctx;
    const struct sched_job *j = &p->q->jobs[i];
    if (!p->guar_left[j->team])
        return false; /* the common case on a busy cluster: nothing left to check */
    struct jshape *sh = &p->shapes_of[p->jshape[i]];
    uint32_t stamp = p->team_starts[j->team] + 1;
    if (sh->within_stamp == stamp)
        return sh->within;
    bool within = false;
    for (uint32_t g = 0; g < p->view.ngroups && !within; g++) {
        size_t k = (size_t)j->team * p->quota.ngroups + g;
        if (p->quota.guar[k] <= p->quota.used[k] || !view_group_eligible(&p->view, j, g))
            continue;
        within = p->quota.used[k] + view_job_milli(&p->view, j, g) <= p->quota.guar[k];
    }
    sh->within_stamp = stamp;
    sh->within = within;
    return within;
}

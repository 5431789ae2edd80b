#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "core/admit.h"
#include "core/backfill.h"
#include "base/err.h"
#include "core/evict.h"
#include "core/idmap.h"
#include "core/migrate.h"
#include "core/order.h"
#include "core/pass.h"
#include "core/preempt.h"
#include "core/quota.h"
#include "core/sched.h"
#include "core/shape.h"
#include "base/sort.h"
#include "core/state.h"
#include "base/vec.h"
#include "core/view.h"
#include "base/banned.h"

/* ---- result and its arena (chunks never move, so pointers into them hold) ---- */

void sched_result_init(struct sched_result *result)
{
    if (!result)
        return;
    memset(result, 0, sizeof(*result));
    result->las_crossing_ms = INT64_MAX;
}

void sched_result_release(struct sched_result *result)
{
    if (!result)
        return;
    idmap_release(result->ids);
    free(result->ids);
    if (result->scratch) {
        free(result->scratch->shapes);
        free(result->scratch->skeys);
        free(result->scratch);
    }
    pass_arena_reset(result);
    free(result->arena);
    free(result->starts);
    free(result->preempts);
    free(result->reserves);
    free(result->waits);
    memset(result, 0, sizeof(*result));
}

static void result_clear(struct sched_result *r)
{
    pass_arena_reset(r);
    r->nstarts = r->npreempts = r->nreserves = r->nwaits = 0;
    r->overcommitted = NULL;
    r->novercommitted = 0;
    r->decisions = 0;
    r->las_crossing_ms = INT64_MAX;
}

/* A running job by id, for merging the running set into the attained table. */
struct run_by_id {
    uint64_t job;
    uint32_t r;
};

static bool run_before(const struct run_by_id *x, const struct run_by_id *y)
{
    return x->job < y->job;
}

SORT_DEFINE(sort_run_by_id, struct run_by_id, run_before)

/* What running job r attained since the last pass, in GPU-ms (p->rmilli[r]
 * is the sum of its shares). */
static int64_t attained_since(const struct pass *p, uint32_t r)
{
    const struct sched_running *run = &p->run->jobs[r];
    int64_t since = run->start_ms > p->st->last_pass_ms ? run->start_ms : p->st->last_pass_ms;
    int64_t span = p->now > since ? p->now - since : 0;
    int64_t milli = p->rmilli[r];
    return span / SCHED_MILLI * milli + span % SCHED_MILLI * milli / SCHED_MILLI;
}

/*
 * Attained service of every running job at `now` (p->rattained): the state's
 * plus what it got since the last pass. The running set is sorted by id
 * (p->rby_id) and merged with the state's table, which is sorted already: one
 * walk, not a search per running job. Known before the shapes are, so that
 * LAS's possible victims (p->las_min_victim) are too: running checkpointable
 * jobs past the first threshold.
 */
static int running_attained(struct pass *p)
{
    const struct sched_state *st = p->st;
    size_t nr = p->run->njobs;
    p->rby_id = gpo_malloc((nr ? nr : 1) * sizeof(*p->rby_id));
    p->rattained = gpo_malloc((nr ? nr : 1) * sizeof(*p->rattained));
    if (!p->rby_id || !p->rattained)
        return GPO_ENOMEM;
    for (size_t r = 0; r < nr; r++)
        p->rby_id[r] = (struct run_by_id){p->run->jobs[r].job->id, (uint32_t)r};
    if (sort_run_by_id(p->rby_id, nr))
        return GPO_ENOMEM;
    size_t a = 0;
    for (size_t k = 0; k < nr; k++) {
        uint32_t r = p->rby_id[k].r;
        const struct sched_running *rj = &p->run->jobs[r];
        int64_t old = 0;
        for (; a < st->nattained && st->attained[a].job <= p->rby_id[k].job; a++) {
            if (st->attained[a].job == p->rby_id[k].job)
                old = st->attained[a].gpu_ms;
        }
        p->rattained[r] = old + attained_since(p, r);
        if (!p->las_min_victim || rj->preempting || !(p->rbits[r] & R_CKPT) ||
            p->rgroup[r] == SCHED_NONE)
            continue;
        uint32_t rq = order_las_queue(p->pol, p->rattained[r]);
        int64_t *mt = &p->las_min_victim[(size_t)p->rteam[r] * SCHED_LAS_MAX_QUEUES];
        int64_t *ma = &p->las_min_victim[(size_t)p->c->nteams * SCHED_LAS_MAX_QUEUES];
        for (uint32_t q = 0; q < rq && q < SCHED_LAS_MAX_QUEUES; q++) {
            mt[q] = p->rmilli[r] < mt[q] ? p->rmilli[r] : mt[q];
            ma[q] = p->rmilli[r] < ma[q] ? p->rmilli[r] : ma[q];
        }
    }
    return 0;
}

/*
 * Under LAS a shape's jobs were made candidates if a job in queue 0 could
 * evict something (shape_find runs before the queues are known). A job
 * served past a threshold may evict only jobs in a queue above its own: when
 * nothing it may evict is running, and it did not fit the free capacity when
 * the pass began, it can neither start nor evict in this pass, and is no
 * longer a candidate (add_firsts still ranks the first of its kind, for the
 * reservation). On a busy cluster that is most of the queue: the jobs LAS
 * evicted, waiting for the newer ones to be served.
 */
static void drop_las_hopeless(struct pass *p, uint32_t *cands, size_t *ret_ncands)
{
    size_t n = 0;
    for (size_t k = 0; k < *ret_ncands; k++) {
        uint32_t i = cands[k];
        const struct jshape *sh = &p->shapes_of[p->jshape[i]];
        if (p->lasq[i] > 0 && !(p->jflag[i] & J_FIT0) && !sh->pot_other &&
            !evict_may_preempt_las(p, &p->q->jobs[i], p->lasq[i])) {
            p->jflag[i] &= (uint8_t) ~(J_CAND | J_POT);
            continue;
        }
        cands[n++] = i;
    }
    *ret_ncands = n;
}

/*
 * The new attained table, sorted by job: the state's entries of jobs still
 * queued, and every running job's (running_attained). Under LAS the same walk
 * gives each queued and running job its queue (jobs that never ran stay in
 * queue 0, as lasq starts zeroed).
 */
static int compute_attained(struct pass *p)
{
    const struct sched_state *st = p->st;
    size_t nr = p->run->njobs, n = 0, a = 0;
    p->attained = gpo_malloc((st->nattained + nr + 1) * sizeof(*p->attained));
    if (!p->attained)
        return GPO_ENOMEM;
    for (size_t k = 0; k <= nr; k++) {
        bool last = k == nr;
        uint64_t upto = last ? 0 : p->rby_id[k].job;
        for (; a < st->nattained && (last || st->attained[a].job < upto); a++) {
            uint32_t v = idmap_get(p->ids, st->attained[a].job);
            if (v == IDMAP_NONE || (v & IDMAP_RUNNING))
                continue;
            p->attained[n++] = st->attained[a];
            if (p->lasq && !(p->jflag[v] & J_DONE))
                p->lasq[v] = (uint8_t)order_las_queue(p->pol, st->attained[a].gpu_ms);
        }
        if (last)
            break;
        for (; a < st->nattained && st->attained[a].job == upto; a++)
            ; /* the running job's old entry, counted in rattained */
        uint32_t r = p->rby_id[k].r;
        p->attained[n++] = (struct sched_attained){upto, p->rattained[r]};
        if (p->rlasq)
            p->rlasq[r] = (uint8_t)order_las_queue(p->pol, p->rattained[r]);
    }
    p->nattained = n;
    return 0;
}

/* When a job holding `milli` with `attained` GPU-ms at `now` crosses
 * threshold `thr`: the first time the next pass's attained_since reaches it. */
static int64_t crossing_ms(int64_t now, int64_t attained, int64_t thr, int64_t milli)
{
    int64_t need = thr - attained;
    if (need <= 0)
        return INT64_MAX; /* crossed already: its queue says so */
    if (need > INT64_MAX / SCHED_MILLI - milli)
        return INT64_MAX;
    int64_t span = (need * SCHED_MILLI + milli - 1) / milli;
    return span > INT64_MAX - now ? INT64_MAX : now + span;
}

/* When a job of `team` in LAS queue q, holding `milli` with `attained`, next
 * crosses a threshold, if a waiting job could then evict it (most: the
 * largest waiting job per team key and queue, or any below, 0 if none; any
 * size will do under las_evict_larger); else INT64_MAX. */
static int64_t crossing_if_evictable(const struct pass *p, const int64_t *most, uint32_t team,
                                     uint32_t q, int64_t attained, int64_t milli)
{
    size_t k = order_las_team_only(p->pol) ? team : p->c->nteams;
    int64_t need = p->pol->las_evict_larger ? 1 : milli;
    if (milli <= 0 || q >= p->pol->nlas_thresholds || most[k * SCHED_LAS_MAX_QUEUES + q] < need)
        return INT64_MAX;
    return crossing_ms(p->now, attained, p->pol->las_thresholds_gpu_ms[q], milli);
}

/*
 * result->las_crossing_ms (see sched.h). A job of queue q crossing into q + 1
 * may be evicted by a waiting job of queue q or below, at least as large (any
 * size under las_evict_larger), of
 * its team under within-team LAS: the largest such waiting job per (team,
 * queue) is known in one walk of the queue. A superset: the class order and
 * the groups the waiting job may use are not looked at.
 */
static int las_crossing(struct pass *p)
{
    const struct sched_policy *pol = p->pol;
    if (!p->lasq || !p->rlasq || !pol->preemption || !pol->nlas_thresholds)
        return 0;
    size_t nk = (size_t)p->c->nteams + 1, nq = p->q->njobs;
    bool team_only = order_las_team_only(pol);
    int64_t *most = pass_scratch(p, nk * SCHED_LAS_MAX_QUEUES * sizeof(*most), true);
    int64_t *swant = pass_scratch(p, p->nshapes * sizeof(*swant), false);
    if (!most || !swant)
        return GPO_ENOMEM;
    /* By shape: the walk reads only the pass's small per-job arrays. */
    for (uint32_t s = 0; s < p->nshapes; s++)
        swant[s] = evict_las_want(&p->q->jobs[p->shapes_of[s].first]);
    for (size_t i = 0; i < nq; i++) {
        const struct jshape *sh = &p->shapes_of[p->jshape[i]];
        if ((p->jflag[i] & J_STARTED) || !sh->valid)
            continue;
        int64_t *m =
            &most[(team_only ? sh->team : p->c->nteams) * SCHED_LAS_MAX_QUEUES + p->lasq[i]];
        int64_t w = swant[p->jshape[i]];
        if (w > *m) /* rarely: no store for the next job's load to wait on */
            *m = w;
    }
    for (size_t k = 0; k < nk; k++) {
        for (uint32_t q = 1; q < SCHED_LAS_MAX_QUEUES; q++) {
            int64_t *m = &most[k * SCHED_LAS_MAX_QUEUES + q];
            *m = m[-1] > *m ? m[-1] : *m; /* queue q or below */
        }
    }
    int64_t best = INT64_MAX;
    for (size_t r = 0; r < p->run->njobs; r++) {
        if (p->run->jobs[r].preempting || !(p->rbits[r] & R_CKPT) || p->rgroup[r] == SCHED_NONE)
            continue;
        int64_t t =
            crossing_if_evictable(p, most, p->rteam[r], p->rlasq[r], p->rattained[r], p->rmilli[r]);
        best = t < best ? t : best;
    }
    /* Jobs started in this pass run from now with what they had attained. */
    const struct sched_result *res = p->res;
    for (size_t s = 0; s < res->nstarts; s++) {
        uint32_t i = idmap_get(p->ids, res->starts[s].job), g;
        if (i == IDMAP_NONE || (i & IDMAP_RUNNING) || !p->q->jobs[i].checkpointable)
            continue;
        int64_t milli;
        quota_alloc_usage(&p->view, &res->starts[s].alloc, &g, &milli);
        const struct sched_attained *a =
            state_find_attained(p->attained, p->nattained, res->starts[s].job);
        int64_t t = crossing_if_evictable(p, most, p->q->jobs[i].team, p->lasq[i],
                                          a ? a->gpu_ms : 0, milli);
        best = t < best ? t : best;
    }
    p->res->las_crossing_ms = best;
    return 0;
}

static int collect_reserves(struct pass *p)
{
    struct sched_result *r = p->res;
    struct view *v = &p->view;
    if (!v->nresvs)
        return 0;
    if (vec_grow((void **)&r->reserves, &r->reserves_cap, v->nresvs, sizeof(*r->reserves)))
        return GPO_ENOMEM;
    /* count[k]: nodes of view reservation k; at[k]: its index in the result.
     * A moved job's hold on its new place (migrate.h) is not a reservation
     * of a waiting job: it stays out. */
    uint32_t *count = gpo_calloc(2 * (size_t)v->nresvs, sizeof(*count));
    if (!count)
        return GPO_ENOMEM;
    uint32_t *at = count + v->nresvs;
    for (uint32_t n = 0; n < p->c->nnodes; n++) {
        if (v->nodes[n].resv >= 0)
            count[v->nodes[n].resv]++;
    }
    uint32_t nr = 0;
    for (uint32_t k = 0; k < v->nresvs; k++) {
        uint32_t qi = idmap_get(p->ids, v->resvs[k].job);
        at[k] = UINT32_MAX;
        if (qi != IDMAP_NONE && (qi & IDMAP_RUNNING))
            continue;
        struct sched_reserve *s = &r->reserves[nr];
        s->job = v->resvs[k].job;
        s->start_ms = v->resvs[k].start_ms;
        s->nnodes = 0;
        s->nodes = pass_arena_alloc(r, (count[k] ? count[k] : 1) * sizeof(*s->nodes));
        if (!s->nodes) {
            free(count);
            return GPO_ENOMEM;
        }
        at[k] = nr++;
    }
    for (uint32_t n = 0; n < p->c->nnodes; n++) {
        int32_t k = v->nodes[n].resv;
        if (k >= 0 && at[k] != UINT32_MAX)
            r->reserves[at[k]].nodes[r->reserves[at[k]].nnodes++] = n;
    }
    r->nreserves = nr;
    free(count);
    return 0;
}

/* When a claim's grace is over (and its hold starts), not before now. */
static int64_t claim_until(const struct pass *p, const struct sched_claim *cl)
{
    int64_t until = cl->since_ms + p->pol->preempt_grace_ms;
    return until > p->now ? until : p->now;
}

/* A claim whose job still runs is a moved job's (migrate.h): while it leaves,
 * its new place stays held for it. Dropped once it runs on without leaving. */
static int hold_mover(struct pass *p, const struct sched_claim *cl, uint32_t ri)
{
    if (cl->nvictims || !p->run->jobs[ri].preempting)
        return 0;
    int r = pass_hold_nodes(p, cl->job, claim_until(p, cl), cl->nodes, cl->nnodes);
    if (r < 0)
        return r;
    return evict_add_claim(p, cl->job, NULL, 0, cl->nodes, cl->nnodes, cl->since_ms);
}

/* Claims carried over: a preemptor whose victims are still leaving waits for
 * them; one whose victims are gone goes first. Returns the ready ones' queue
 * indices in *ready. */
static int carry_claims(struct pass *p, uint32_t *ready, size_t *ret_nready)
{
    size_t nready = 0;
    for (size_t k = 0; k < p->st->nclaims; k++) {
        const struct sched_claim *cl = &p->st->claims[k];
        uint32_t qi = idmap_get(p->ids, cl->job);
        if (qi != IDMAP_NONE && (qi & IDMAP_RUNNING)) {
            int err = hold_mover(p, cl, qi & ~IDMAP_RUNNING);
            if (err)
                return err;
            continue;
        }
        if (qi == IDMAP_NONE || (p->jflag[qi] & J_DONE))
            continue;
        bool waiting = false;
        for (uint32_t v = 0; v < cl->nvictims; v++) {
            uint32_t ri = idmap_get(p->ids, cl->victims[v]);
            if (ri != IDMAP_NONE && (ri & IDMAP_RUNNING)) {
                waiting = true;
                break;
            }
        }
        if (!waiting) {
            ready[nready++] = qi;
            continue;
        }
        /* Hold its planned nodes and its victims' for the preemptor until
         * they have left. */
        int r = pass_hold_nodes(p, cl->job, claim_until(p, cl), cl->nodes, cl->nnodes);
        if (r < 0)
            return r;
        for (uint32_t v = 0; v < cl->nvictims; v++) {
            uint32_t ri = idmap_get(p->ids, cl->victims[v]);
            if (ri == IDMAP_NONE || !(ri & IDMAP_RUNNING))
                continue;
            const struct sched_alloc *a = &p->run->jobs[ri & ~IDMAP_RUNNING].alloc;
            for (uint32_t n = 0; n < a->nnodes; n++)
                view_resv_hold(&p->view, (uint32_t)r, a->nodes[n].node);
        }
        pass_set_wait(p, qi, SCHED_REASON_PREEMPTING, p->q->jobs[qi].pool, p->q->jobs[qi].gpu_type,
                      0, NULL);
        p->jwait[qi].est_start_ms = claim_until(p, cl);
        p->res->decisions++;
        int err = evict_add_claim(p, cl->job, cl->victims, cl->nvictims, cl->nodes, cl->nnodes,
                                  cl->since_ms);
        if (err)
            return err;
    }
    *ret_nready = nready;
    return 0;
}

/* The (team, class, pool) of shape s's jobs, as an index into add_firsts' table. */
static size_t first_key(const struct pass *p, uint32_t s)
{
    const struct sched_cluster *c = p->c;
    const struct order_job *j = &p->ojob[p->shapes_of[s].first];
    uint32_t pool = shape_key_pool(&p->skeys[s]);
    return ((size_t)j->team * c->nclasses + j->prio) * (c->npools + 1) +
           (pool == SCHED_ANY ? c->npools : pool);
}

/* Job i as the first of its (team, class, pool) so far (key k), if it comes
 * before the one there (less-served LAS queue, then submit time, then id). */
static void keep_first(const struct pass *p, uint32_t *first, size_t k, uint32_t i)
{
    const struct order_job *j = &p->ojob[i];
    uint32_t f = first[k];
    const struct order_job *fj = f == SCHED_NONE ? NULL : &p->ojob[f];
    bool before = !fj || (p->lasq && p->lasq[i] != p->lasq[f] ? p->lasq[i] < p->lasq[f]
                          : j->submit_ms != fj->submit_ms     ? j->submit_ms < fj->submit_ms
                                                              : j->id < fj->id);
    if (before)
        first[k] = i;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/*
 * Jobs that cannot fit the free capacity now and cannot preempt cannot start
 * in this pass, whatever their rank; only the first such job of each (team,
 * class, pool) is still ranked, since it may be the one that earns a pool's
 * reservation. Adds those to cands[0, *ret_ncands), which stays in queue order.
 *
 * Outside LAS the first of a shape is its earliest job (shape_find found it),
 * so the firsts come from the shapes; LAS, or a shape whose earliest job is a
 * preemptor already decided, takes the way over every job.
 */
static int add_firsts(struct pass *p, uint32_t *cands, size_t *ret_ncands)
{
    const struct sched_cluster *c = p->c;
    size_t nq = p->q->njobs, ncands = *ret_ncands;
    size_t nkey = (size_t)c->nteams * c->nclasses * (c->npools + 1);
    uint32_t *first = NULL;
    if (nkey <= (1u << 20) && !(first = pass_scratch(p, nkey * sizeof(*first), false)))
        return GPO_ENOMEM;
    if (!first) {
        /* Too many keys to keep: every job is ranked. */
        ncands = 0;
        for (size_t i = 0; i < nq; i++) {
            if (!(p->jflag[i] & J_DONE)) {
                p->jflag[i] |= J_CAND;
                cands[ncands++] = (uint32_t)i;
            }
        }
        *ret_ncands = ncands;
        return 0;
    }
    for (size_t k = 0; k < nkey; k++)
        first[k] = SCHED_NONE;
    bool per_job = p->lasq != NULL;
    for (uint32_t s = 0; s < p->nshapes && !per_job; s++) {
        const struct jshape *sh = &p->shapes_of[s];
        if (!sh->valid || sh->fit0 || sh->pot)
            continue;
        if (p->jflag[sh->best] & J_DONE)
            per_job = true;
        else
            keep_first(p, first, first_key(p, s), sh->best);
    }
    if (per_job) {
        for (size_t k = 0; k < nkey; k++)
            first[k] = SCHED_NONE;
        size_t *skey = pass_scratch(p, p->nshapes * sizeof(*skey), false);
        if (!skey)
            return GPO_ENOMEM;
        for (uint32_t s = 0; s < p->nshapes; s++)
            skey[s] = first_key(p, s);
        for (size_t i = 0; i < nq; i++) {
            if (!(p->jflag[i] & (J_DONE | J_CAND)))
                keep_first(p, first, skey[p->jshape[i]], (uint32_t)i);
        }
    }
    size_t nf = 0;
    for (size_t k = 0; k < nkey; k++) {
        if (first[k] != SCHED_NONE) {
            p->jflag[first[k]] |= J_CAND;
            first[nf++] = first[k];
        }
    }
    qsort(first, nf, sizeof(*first), cmp_u32);
    /* Merge from the back: the two lists hold different jobs. */
    for (size_t a = ncands, b = nf, w = ncands + nf; b > 0;) {
        if (a > 0 && cands[a - 1] > first[b - 1])
            cands[--w] = cands[--a];
        else
            cands[--w] = first[--b];
    }
    *ret_ncands = ncands + nf;
    return 0;
}

static int check_args(const struct sched_cluster *c, const struct sched_queue *q,
                      const struct sched_running_set *run, const struct sched_policy *pol,
                      const struct sched_state *st, int64_t now)
{
    if (!c || !q || !run || !pol || !st)
        return GPO_EINVAL;
    if ((q->njobs && !q->jobs) || (run->njobs && !run->jobs))
        return GPO_EINVAL;
    if (q->njobs > SCHED_MAX_JOBS || run->njobs > SCHED_MAX_JOBS)
        return GPO_E2BIG;
    if (now < 0 || now < st->last_pass_ms)
        return GPO_EINVAL;
    if (sched_policy_check(pol, NULL) || sched_cluster_check(c, NULL))
        return GPO_EINVAL;
    for (size_t r = 0; r < run->njobs; r++) {
        const struct sched_job *j = run->jobs[r].job;
        if (!j || j->team >= c->nteams || j->prio >= c->nclasses)
            return GPO_EINVAL;
    }
    return 0;
}

/* Field by field: GCC copies the struct, by assignment or memcpy, with rep
 * movs, which takes some 30 cycles to start; the sweep below copies one per
 * waiting job per pass. */
static inline void wait_copy(struct sched_wait *dst, const struct sched_wait *src)
{
    dst->job = src->job;
    dst->reason = src->reason;
    dst->team = src->team;
    dst->pool = src->pool;
    dst->gpu_type = src->gpu_type;
    dst->other_job = src->other_job;
    dst->est_start_ms = src->est_start_ms;
    dst->field = src->field;
    dst->need_milli = src->need_milli;
    dst->free_milli = src->free_milli;
}

/* The pass's tables: the view of free capacity, the id map (running jobs
 * first: a queued job with a running job's id is then a duplicate), quotas,
 * the order's usage, the per-pass arrays and the running set's attained
 * service. */
static int pass_begin(struct pass *p)
{
    const struct sched_running_set *run = p->run;
    size_t nr = run->njobs;
    uint64_t bad_job = 0;
    int err;
    if ((err = view_init(&p->view, p->c, run, p->pol->packing, &bad_job)))
        return err;
    if (!p->res->ids && !(p->res->ids = gpo_calloc(1, sizeof(*p->res->ids))))
        return GPO_ENOMEM;
    p->ids = p->res->ids;
    if ((err = idmap_init(p->ids, p->q->njobs + nr)))
        return err;
    for (size_t r = 0; r < nr; r++) {
        if (idmap_put(p->ids, run->jobs[r].job->id, (uint32_t)r | IDMAP_RUNNING))
            return GPO_EINVAL;
    }
    if ((err = quota_init(&p->quota, p->c, &p->view)) ||
        (err = order_init(&p->order, p->c, &p->view, run, p->pol, p->st, p->now)) ||
        (err = pass_alloc(p)))
        return err;
    return running_attained(p);
}

/* What the running set brings to the pass: the releases backfill plans with
 * (a leaving job's at the end of its grace), the list of leaving jobs, and
 * under LAS the milli each team holds per group and queue. */
static int running_releases(struct pass *p)
{
    const struct sched_running_set *run = p->run;
    size_t nr = run->njobs;
    int err = backfill_releases_reserve(&p->rels, nr + 16);
    if (err)
        return err;
    for (size_t r = 0; r < nr; r++) {
        const struct sched_running *rj = &run->jobs[r];
        if (rj->preempting) {
            p->rflag[r] |= R_LEAVING;
            p->leaving[p->nleaving++] = (uint32_t)r;
        }
        struct backfill_release rel = {
            rj->preempting ? p->now + p->pol->preempt_grace_ms : job_end(p, rj->job, rj->start_ms),
            rj->job->id, &rj->alloc, !rj->preempting && rj->job->time_limit_ms <= 0};
        if ((err = backfill_releases_add(&p->rels, &rel)))
            return err;
    }
    if (!p->rlasq)
        return 0;
    for (size_t r = 0; r < nr; r++) {
        if (p->rgroup[r] != SCHED_NONE && !run->jobs[r].preempting && (p->rbits[r] & R_CKPT))
            p->las_milli[((size_t)p->rteam[r] * p->view.ngroups + p->rgroup[r]) *
                             SCHED_LAS_MAX_QUEUES +
                         p->rlasq[r]] += p->rmilli[r];
    }
    return 0;
}

/* pass_allowed's cache, per shape and group (none when that is too many cells). */
static int shape_caches(struct pass *p)
{
    size_t cells = (size_t)p->nshapes * p->view.ngroups;
    if (!cells || cells > (1u << 22))
        return 0;
    p->shape_allowed = pass_scratch(p, cells * sizeof(*p->shape_allowed), false);
    p->shape_eligible = pass_scratch(p, cells * sizeof(*p->shape_eligible), false);
    p->shape_headroom = pass_scratch(p, cells * sizeof(*p->shape_headroom), false);
    return p->shape_allowed && p->shape_eligible && p->shape_headroom ? 0 : GPO_ENOMEM;
}

/* The candidates of the ordered loop, in queue order: the claims carried
 * over (their ready preemptors into `ready`), less those decided by them and
 * LAS's hopeless ones, plus the first job of each key (add_firsts). */
static int candidates_settle(struct pass *p, uint32_t *cands, size_t *ret_ncands, uint32_t *ready,
                             size_t *ret_nready)
{
    size_t ncands = *ret_ncands;
    int err = carry_claims(p, ready, ret_nready);
    if (err)
        return err;
    if (p->nclaims) {
        /* Preemptors still waiting for their victims are decided already. */
        size_t n = 0;
        for (size_t k = 0; k < ncands; k++) {
            if (!(p->jflag[cands[k]] & J_DONE))
                cands[n++] = cands[k];
        }
        ncands = n;
    }
    if (p->lasq)
        drop_las_hopeless(p, cands, &ncands);
    *ret_ncands = ncands;
    return add_firsts(p, cands, ret_ncands);
}

/*
 * The ordered loop: candidates ranked one at a time, each admitted (started,
 * or given its wait, a preemption or a reservation). Now and then it asks
 * whether what is left is frozen (see shape_inert), and if so leaves the rest
 * to the sweep in result_finish: on a full cluster that is most of the queue.
 * cshapes: room for one entry per shape.
 */
static int rank_candidates(struct pass *p, const uint32_t *cands, size_t ncands, uint32_t *cshapes)
{
    int err = order_begin(&p->order, p->ojob, cands, ncands, p->lasq, admit_within_guarantee, p);
    if (err)
        return err;
    size_t ncshapes = 0, since_check = 0, check_every;
    struct jshape *shapes = p->shapes_of;
    const uint32_t *jshape = p->jshape;
    const uint8_t *lasq = p->lasq;
    for (size_t k = 0; k < ncands; k++) {
        struct jshape *sh = &shapes[jshape[cands[k]]];
        if (!sh->remaining++) {
            cshapes[ncshapes++] = jshape[cands[k]];
            sh->rep = cands[k];
        } else if (lasq && lasq[cands[k]] < lasq[sh->rep]) {
            sh->rep = cands[k];
        }
    }
    check_every = p->pol->frozen_check_every ? p->pol->frozen_check_every
                  : ncshapes > 256           ? ncshapes
                                             : 256;
    for (uint32_t i; (i = order_next(&p->order)) != SCHED_NONE;) {
        if (p->jflag[i] & J_DONE)
            continue;
        p->shapes_of[p->jshape[i]].remaining--;
        if ((err = admit_job(p, i)))
            return err;
        if (++since_check >= check_every) {
            since_check = 0;
            if (admit_frozen(p, cshapes, ncshapes))
                break; /* the rest get their shape's wait in the sweep */
        }
    }
    return 0;
}

/* The result's last parts: the overcommitted running jobs, every waiting
 * job's wait (one sweep in queue order: the waits of jobs the ordered loop
 * did not reach, and the waits squeezed together over started jobs), the
 * reservations and the next LAS crossing. */
static int result_finish(struct pass *p)
{
    struct sched_result *r = p->res;
    size_t nq = p->q->njobs;
    if (p->view.novercommitted) {
        r->overcommitted = pass_arena_alloc(r, p->view.novercommitted * sizeof(*r->overcommitted));
        if (!r->overcommitted)
            return GPO_ENOMEM;
        for (uint32_t k = 0; k < p->view.novercommitted; k++)
            r->overcommitted[k] = p->run->jobs[p->view.overcommitted[k]].job->id;
        r->novercommitted = p->view.novercommitted;
    }
    for (size_t i = 0; i < nq; i++) {
        if (p->jflag[i] & J_STARTED)
            continue;
        if (!(p->jflag[i] & J_DONE)) {
            wait_copy(&r->waits[r->nwaits], admit_unranked_wait(p, (uint32_t)i));
            r->waits[r->nwaits].job = p->ojob[i].id;
            r->decisions++;
        } else if (r->nwaits != i) {
            wait_copy(&r->waits[r->nwaits], &r->waits[i]);
        }
        r->nwaits++;
    }
    int err = collect_reserves(p);
    return err ? err : las_crossing(p);
}

static int run_pass(struct pass *p)
{
    size_t nq = p->q->njobs, ncands = 0, nready = 0;
    int err = pass_begin(p);
    if (err)
        return err;
    uint32_t *cands = pass_scratch(p, nq * sizeof(*cands), false);
    uint32_t *ready = pass_scratch(p, p->st->nclaims * sizeof(*ready), false);
    if (!cands || !ready)
        return GPO_ENOMEM;
    /* The queue, read once: shapes, validation, candidates (see shape_find). */
    if ((err = shape_find(p, cands, &ncands)) || (err = compute_attained(p)))
        return err;
    uint32_t *cshapes = pass_scratch(p, p->nshapes * sizeof(*cshapes), false);
    if (!cshapes)
        return GPO_ENOMEM;
    if ((err = running_releases(p)) || (err = shape_caches(p)) ||
        (err = candidates_settle(p, cands, &ncands, ready, &nready)))
        return err;
    /* Preemptors whose victims have left go first: the room is theirs. */
    for (size_t k = 0; k < nready; k++) {
        uint32_t i = ready[k];
        if (p->jflag[i] & J_DONE)
            continue;
        p->jflag[i] |= J_CAND;
        if ((err = admit_job(p, i)))
            return err;
    }
    if ((err = rank_candidates(p, cands, ncands, cshapes)) || (err = migrate_pass_end(p)))
        return err;
    return result_finish(p);
}

int sched_pass(const struct sched_cluster *cluster, const struct sched_queue *queue,
               const struct sched_running_set *running, const struct sched_policy *policy,
               struct sched_state *state, int64_t now_ms, struct sched_result *result)
{
    if (!result)
        return GPO_EINVAL;
    result_clear(result);
    int err = check_args(cluster, queue, running, policy, state, now_ms);
    if (err)
        return err;
    struct pass p = {.c = cluster,
                     .q = queue,
                     .run = running,
                     .pol = policy,
                     .st = state,
                     .res = result,
                     .now = now_ms};
    err = run_pass(&p);
    if (!err)
        err = order_commit(&p.order, state);
    if (!err) {
        /* Nothing below can fail: the state moves to `now` in one step. */
        free(state->attained);
        state->attained = p.attained;
        state->nattained = state->attained_cap = p.nattained;
        p.attained = NULL;
        free(state->claims);
        state->claims = p.claims;
        state->nclaims = p.nclaims;
        state->claims_cap = p.claims_cap;
        p.claims = NULL;
        state->last_pass_ms = now_ms;
    } else {
        result_clear(result);
    }
    pass_free(&p);
    return err;
}

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "core/pass.h"
#include "base/vec.h"
#include "base/banned.h"

/* The result's arena: chunks never move, so pointers into them hold. */
struct sched_arena_chunk {
    struct sched_arena_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

static uint32_t compute_allowed_now(struct pass *p, const struct sched_job *j,
                                    uint32_t *ret_nallowed);

void pass_set_wait(struct pass *p, uint32_t i, enum sched_reason reason, uint32_t pool,
                   uint32_t gpu_type, uint64_t other, const char *field)
{
    p->jwait[i] = make_wait(&p->q->jobs[i], reason, pool, gpu_type, other, field);
    pass_wait_numbers(p, &p->q->jobs[i], &p->jwait[i]);
    p->jflag[i] |= J_DONE;
}

void pass_wait_numbers(struct pass *p, const struct sched_job *j, struct sched_wait *w)
{
    if ((w->reason != SCHED_REASON_NO_GPU && w->reason != SCHED_REASON_GANG) ||
        (j->gpus <= 0 && j->gpu_milli <= 0))
        return;
    bool whole = j->gpus > 0;
    int64_t best = 0;
    /* A gang is placed within one group: the most any group has free. */
    for (uint32_t g = 0; g < p->view.ngroups; g++) {
        if (!view_group_eligible(&p->view, j, g))
            continue;
        view_group_refresh(&p->view, g);
        const struct view_group *grp = &p->view.groups[g];
        int64_t v = !whole          ? (int64_t)grp->max_free_milli
                    : j->multi_node ? (int64_t)grp->sum_free_whole * SCHED_MILLI
                                    : (int64_t)grp->max_free_whole * SCHED_MILLI;
        best = v > best ? v : best;
    }
    w->need_milli = whole ? (int64_t)j->gpus * SCHED_MILLI : j->gpu_milli;
    w->free_milli = best;
}

enum sched_reason pass_mig_reason(struct pass *p, const struct sched_job *j, const bool *groups,
                                  uint64_t *ret_other)
{
    const struct mig_type *type = NULL;
    uint64_t free = 0, total = 0;
    int profile = -1;
    for (uint32_t g = 0; g < p->view.ngroups; g++) {
        if (groups ? !groups[g] : !view_group_eligible(&p->view, j, g))
            continue;
        const struct mig_type *t = p->view.groups[g].mig_type;
        int q = view_group_mig_profile(&p->view, j, g);
        if (q < 0 || (type && t != type))
            continue;
        uint32_t f, n;
        view_group_mig_count(&p->view, j, g, false, &f, &n);
        type = t;
        profile = q;
        free += f;
        total += n;
    }
    if (!type) {
        *ret_other = explain_mig_other_of(j, 0, 0);
        return SCHED_REASON_MIG_ABSENT;
    }
    *ret_other = explain_mig_other(type->id, (unsigned)profile, (uint32_t)free,
                                   total < UINT32_MAX ? (uint32_t)total : UINT32_MAX);
    return total ? SCHED_REASON_NO_MIG : SCHED_REASON_MIG_ABSENT;
}

/* compute_allowed for pending job i, from its shape's cache while its team's
 * usage has not changed. */
uint32_t pass_allowed(struct pass *p, uint32_t i, uint32_t *ret_nallowed)
{
    const struct sched_job *j = &p->q->jobs[i];
    uint32_t ng = p->view.ngroups;
    if (!p->shape_allowed)
        return compute_allowed_now(p, j, ret_nallowed);
    struct jshape *sh = &p->shapes_of[p->jshape[i]];
    size_t at = (size_t)p->jshape[i] * ng;
    uint32_t stamp = p->team_starts[j->team] + 1;
    if (sh->allowed_stamp != stamp) {
        sh->neligible = compute_allowed_now(p, j, &sh->nallowed);
        memcpy(p->shape_allowed + at, p->allowed, ng * sizeof(*p->allowed));
        memcpy(p->shape_eligible + at, p->eligible, ng * sizeof(*p->eligible));
        memcpy(p->shape_headroom + at, p->headroom, ng * sizeof(*p->headroom));
        sh->allowed_stamp = stamp;
    } else {
        memcpy(p->allowed, p->shape_allowed + at, ng * sizeof(*p->allowed));
        memcpy(p->eligible, p->shape_eligible + at, ng * sizeof(*p->eligible));
        memcpy(p->headroom, p->shape_headroom + at, ng * sizeof(*p->headroom));
    }
    *ret_nallowed = sh->nallowed;
    return sh->neligible;
}

/* How many groups job i's quota allows now, without filling the scratch
 * arrays when its shape's cache is fresh. */
uint32_t pass_allowed_count(struct pass *p, uint32_t i)
{
    const struct jshape *sh = &p->shapes_of[p->jshape[i]];
    if (p->shape_allowed && sh->allowed_stamp == p->team_starts[sh->team] + 1)
        return sh->nallowed;
    uint32_t nallowed;
    pass_allowed(p, i, &nallowed);
    return nallowed;
}

/* Groups the job may use now: eligible, and with quota headroom. Returns how
 * many are eligible (*ret_nallowed: how many also have headroom). */
static uint32_t compute_allowed_now(struct pass *p, const struct sched_job *j,
                                    uint32_t *ret_nallowed)
{
    struct view *v = &p->view;
    uint32_t ne = 0, na = 0;
    for (uint32_t g = 0; g < v->ngroups; g++) {
        p->eligible[g] = view_group_eligible(v, j, g);
        p->allowed[g] = false;
        if (!p->eligible[g])
            continue;
        ne++;
        int64_t milli = view_job_milli(v, j, g);
        int64_t limit = quota_limit(&p->quota, j->team, g);
        int64_t used = p->quota.used[(size_t)j->team * p->quota.ngroups + g];
        p->headroom[g] = limit == INT64_MAX ? INT64_MAX : limit - used;
        if (quota_allows(&p->quota, j->team, g, milli)) {
            p->allowed[g] = true;
            na++;
        }
    }
    *ret_nallowed = na;
    return ne;
}

void pass_update_guar_left(struct pass *p, uint32_t team)
{
    bool left = false;
    for (uint32_t g = 0; g < p->quota.ngroups && !left; g++) {
        size_t k = (size_t)team * p->quota.ngroups + g;
        left = p->quota.used[k] < p->quota.guar[k];
    }
    p->guar_left[team] = left;
}

/* The pools a job's allowed groups lie in are all blocked (backfill off)? */
uint64_t pass_blocked_by(const struct pass *p)
{
    uint64_t blocker = 0;
    for (uint32_t g = 0; g < p->view.ngroups; g++) {
        if (!p->allowed[g])
            continue;
        uint64_t b = p->pool_block[p->view.groups[g].pool];
        if (!b)
            return 0;
        blocker = b;
    }
    return blocker;
}

void pass_block_pools(struct pass *p, uint64_t job)
{
    p->version++;
    for (uint32_t g = 0; g < p->view.ngroups; g++) {
        uint32_t pool = p->view.groups[g].pool;
        if (p->allowed[g] && !p->pool_block[pool])
            p->pool_block[pool] = job;
    }
}

/* Holds the nodes of the current placement for `job` from `start_ms` on. */
int pass_hold_place(struct pass *p, uint64_t job, int64_t start_ms)
{
    p->version++;
    int r = view_resv_add(&p->view, job, start_ms);
    if (r < 0)
        return r;
    for (uint32_t k = 0; k < p->place.nnodes; k++)
        view_resv_hold(&p->view, (uint32_t)r, p->place.nodes[k].node);
    return r;
}

int pass_hold_nodes(struct pass *p, uint64_t job, int64_t start_ms, const uint32_t *nodes,
                    uint32_t n)
{
    p->version++;
    int r = view_resv_add(&p->view, job, start_ms);
    if (r < 0)
        return r;
    for (uint32_t k = 0; k < n; k++) {
        if (nodes[k] < p->c->nnodes)
            view_resv_hold(&p->view, (uint32_t)r, nodes[k]);
    }
    return r;
}

static int cmp_class_order(const void *a, const void *b, const struct sched_cluster *c)
{
    int32_t x = c->classes[*(const uint32_t *)a].order, y = c->classes[*(const uint32_t *)b].order;
    return (x > y) - (x < y);
}

/* Scratch for one pass, from the result's arena: freed all at once when the
 * next pass resets it, which spares the pass some 40 malloc/free pairs.
 * Never NULL for 0 bytes; zeroed when asked. NULL: out of memory. */
void *pass_scratch(struct pass *p, size_t bytes, bool zero)
{
    void *m = pass_arena_alloc(p->res, bytes ? bytes : 1);
    if (m && zero)
        memset(m, 0, bytes);
    return m;
}

/* Points `ptr` at n elements of the pass's scratch (zeroed when asked);
 * false if out of memory. */
#define PASS_ARRAY(p, ptr, n, zero)                                                                \
    (((ptr) = pass_scratch((p), (size_t)(n) * sizeof(*(ptr)), (zero))) != NULL)

/* The arrays per pending job, per running job, per pool, group and team. */
static int alloc_arrays(struct pass *p)
{
    size_t nq = p->q->njobs, nr = p->run->njobs;
    uint32_t ng = p->view.ngroups ? p->view.ngroups : 1;
    if (!PASS_ARRAY(p, p->jflag, nq, true))
        return GPO_ENOMEM;
    /* Waits are written straight into the result (one per queued job, in queue
     * order), which keeps its memory from pass to pass; started jobs are
     * squeezed out at the end. */
    if (vec_grow((void **)&p->res->waits, &p->res->waits_cap, nq ? nq : 1, sizeof(*p->res->waits)))
        return GPO_ENOMEM;
    p->jwait = p->res->waits;
    if (!PASS_ARRAY(p, p->rflag, nr, true) || !PASS_ARRAY(p, p->rank, p->c->nclasses, false) ||
        !PASS_ARRAY(p, p->allowed, p->view.ngroups, false) ||
        !PASS_ARRAY(p, p->eligible, p->view.ngroups, false) ||
        !PASS_ARRAY(p, p->pcand, nr, false) || !PASS_ARRAY(p, p->pbuf, nr, false) ||
        !PASS_ARRAY(p, p->victims, nr, false) || !PASS_ARRAY(p, p->leaving, nr, false) ||
        !PASS_ARRAY(p, p->pool_resv, p->c->npools, false) ||
        !PASS_ARRAY(p, p->pool_block, p->c->npools, true) ||
        !PASS_ARRAY(p, p->headroom, ng, false) || !PASS_ARRAY(p, p->group_starts, ng, true) ||
        !PASS_ARRAY(p, p->team_starts, p->c->nteams, true) ||
        !PASS_ARRAY(p, p->guar_left, p->c->nteams, true))
        return GPO_ENOMEM;
    return 0;
}

/* Ranks classes by order into p->rank (equal orders share a rank) and sets
 * p->nranks. */
static int rank_classes(struct pass *p)
{
    uint32_t *idx = gpo_malloc((p->c->nclasses ? p->c->nclasses : 1) * sizeof(*idx));
    if (!idx)
        return GPO_ENOMEM;
    for (uint32_t k = 0; k < p->c->nclasses; k++)
        idx[k] = k;
    for (uint32_t a = 1; a < p->c->nclasses; a++) { /* few classes: insertion sort */
        uint32_t v = idx[a], b = a;
        while (b > 0 && cmp_class_order(&idx[b - 1], &v, p->c) > 0) {
            idx[b] = idx[b - 1];
            b--;
        }
        idx[b] = v;
    }
    int32_t rank = 0;
    for (uint32_t k = 0; k < p->c->nclasses; k++) {
        if (k > 0 && p->c->classes[idx[k]].order != p->c->classes[idx[k - 1]].order)
            rank++;
        p->rank[idx[k]] = rank;
    }
    free(idx);
    p->nranks = (uint32_t)rank + 1;
    return 0;
}

/* The running set, read once: each job's group and GPUs, which are also the
 * teams' quota usage (before guar_left and excess read it). */
static int read_running(struct pass *p)
{
    size_t nr = p->run->njobs;
    uint32_t ng = p->view.ngroups ? p->view.ngroups : 1;
    if (!PASS_ARRAY(p, p->rgroup, nr, false) || !PASS_ARRAY(p, p->rmilli, nr, false) ||
        !PASS_ARRAY(p, p->rorder, nr, false) || !PASS_ARRAY(p, p->rteam, nr, false) ||
        !PASS_ARRAY(p, p->rbits, nr, false) || !PASS_ARRAY(p, p->pwhy, nr, false) ||
        !PASS_ARRAY(p, p->within_g, ng, false) ||
        !PASS_ARRAY(p, p->rank_milli, (size_t)ng * p->nranks, true))
        return GPO_ENOMEM;
    for (size_t k = 0; k < nr; k++) {
        const struct sched_running *run = &p->run->jobs[k];
        quota_alloc_usage(&p->view, &run->alloc, &p->rgroup[k], &p->rmilli[k]);
        if (p->rgroup[k] != SCHED_NONE)
            quota_add(&p->quota, run->job->team, p->rgroup[k], p->rmilli[k]);
        p->rorder[k] = p->c->classes[run->job->prio].order;
        p->rteam[k] = run->job->team;
        bool movable = run->job->checkpointable && !run->preempting && run->job->gpus > 0 &&
                       !run->job->multi_node && !sched_job_shaped(run->job) &&
                       run->alloc.nnodes == 1 && p->rgroup[k] != SCHED_NONE;
        p->rbits[k] =
            (uint8_t)((run->borrowed ? R_BORROWED : 0) | (run->job->checkpointable ? R_CKPT : 0) |
                      (movable ? R_MOVABLE : 0));
        p->nmovable += movable;
        if (p->rgroup[k] != SCHED_NONE && !run->preempting)
            p->rank_milli[(size_t)p->rgroup[k] * p->nranks + p->rank[run->job->prio]] +=
                p->rmilli[k];
    }
    for (uint32_t t = 0; t < p->c->nteams; t++)
        pass_update_guar_left(p, t);
    return 0;
}

/* The shape tables the result keeps from pass to pass, and the per-job
 * arrays shape_find fills. */
static int take_shapes(struct pass *p)
{
    size_t nq = p->q->njobs;
    if (!p->res->scratch && !(p->res->scratch = gpo_calloc(1, sizeof(*p->res->scratch))))
        return GPO_ENOMEM;
    p->shapes_of = p->res->scratch->shapes;
    p->shapes_cap = p->res->scratch->shapes_cap;
    p->skeys = p->res->scratch->skeys;
    p->skeys_cap = p->res->scratch->skeys_cap;
    p->scratch_taken = true;
    if (!PASS_ARRAY(p, p->jshape, nq, false) || !PASS_ARRAY(p, p->ojob, nq, false))
        return GPO_ENOMEM;
    return 0;
}

/* The free capacity the pass began with: a copy of the view, the nodes that
 * had a GPU free, and each team's milli over its guarantee per group. */
static int keep_pristine(struct pass *p)
{
    int err = view_clone(&p->pristine, &p->view);
    if (err)
        return err;
    if (!PASS_ARRAY(p, p->free0, p->c->nnodes, false))
        return GPO_ENOMEM;
    for (uint32_t n = 0; n < p->c->nnodes; n++) {
        const struct view_node *vn = &p->view.nodes[n];
        if (vn->usable && (vn->free_whole || vn->nshared || vn->mig_free))
            p->free0[p->nfree0++] = n;
    }
    size_t nq_cells = (size_t)p->c->nteams * p->view.ngroups;
    if (!PASS_ARRAY(p, p->excess, nq_cells, false))
        return GPO_ENOMEM;
    for (size_t k = 0; k < nq_cells; k++) {
        int64_t over = p->quota.used[k] - p->quota.guar[k];
        p->excess[k] = over > 0 ? over : 0;
    }
    return 0;
}

/* LAS's arrays, per pending and running job and per team, group and queue. */
static int alloc_las(struct pass *p)
{
    size_t nq = p->q->njobs, nr = p->run->njobs, nt = p->c->nteams;
    if (!PASS_ARRAY(p, p->lasq, nq, true) || !PASS_ARRAY(p, p->rlasq, nr, true) ||
        !PASS_ARRAY(p, p->las_milli, nt * p->view.ngroups * SCHED_LAS_MAX_QUEUES, true) ||
        !PASS_ARRAY(p, p->las_min_victim, (nt + 1) * SCHED_LAS_MAX_QUEUES, false))
        return GPO_ENOMEM;
    for (size_t t = 0; t < (nt + 1) * SCHED_LAS_MAX_QUEUES; t++)
        p->las_min_victim[t] = INT64_MAX;
    return 0;
}

int pass_alloc(struct pass *p)
{
    int err;
    if ((err = alloc_arrays(p)) || (err = rank_classes(p)) || (err = read_running(p)) ||
        (err = take_shapes(p)) || (err = keep_pristine(p)))
        return err;
    if (order_uses_las(p->pol) && (err = alloc_las(p)))
        return err;
    for (uint32_t k = 0; k < p->c->npools; k++)
        p->pool_resv[k] = -1;
    return 0;
}

void pass_free(struct pass *p)
{
    free(p->rby_id);
    free(p->rattained);
    /* The pass's scratch arrays are in the result's arena (pass_scratch). */
    view_release(&p->view);
    quota_release(&p->quota);
    order_release(&p->order);
    free(p->place.nodes);
    free(p->place.shares);
    if (p->scratch_taken) {
        /* Kept for the next pass (vec_grow leaves them valid even when it fails). */
        p->res->scratch->shapes = p->shapes_of;
        p->res->scratch->shapes_cap = p->shapes_cap;
        p->res->scratch->skeys = p->skeys;
        p->res->scratch->skeys_cap = p->skeys_cap;
    }
    view_release(&p->pristine);
    view_undo_release(&p->undo);
    backfill_releases_release(&p->rels);
    free(p->attained);
    free(p->claims);
}

void *pass_arena_alloc(struct sched_result *r, size_t bytes)
{
    /* A carve is an allocation the fault hook may fail, as a malloc is: every
     * caller's check is then one a test can reach. */
    if (gpo_alloc_fault())
        return NULL;
    bytes = (bytes + 15) & ~(size_t)15;
    struct sched_arena_chunk *c = r->arena;
    if (!c || c->size - c->used < bytes) {
        size_t size = bytes > 65536 ? bytes : 65536;
        struct sched_arena_chunk *n = gpo_malloc(sizeof(*n) + size);
        if (!n)
            return NULL;
        n->next = c;
        n->size = size;
        n->used = 0;
        r->arena = c = n;
    }
    void *p = c->data + c->used;
    c->used += bytes;
    return p;
}

void pass_arena_reset(struct sched_result *r)
{
    struct sched_arena_chunk *c = r->arena;
    if (!c)
        return;
    if (c->next) {
        /* Several chunks: one as large as all of them, so that the next pass,
         * which needs about as much, takes one. */
        size_t total = 0;
        for (struct sched_arena_chunk *k = c; k; k = k->next)
            total += k->size;
        struct sched_arena_chunk *one = gpo_malloc(sizeof(*one) + total);
        struct sched_arena_chunk *rest = one ? c : c->next;
        while (rest) {
            struct sched_arena_chunk *next = rest->next;
            free(rest);
            rest = next;
        }
        if (one) {
            one->size = total;
            r->arena = c = one;
        }
    }
    c->next = NULL;
    c->used = 0;
}

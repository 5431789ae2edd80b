#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/backfill.h"
#include "core/err.h"
#include "core/idmap.h"
#include "core/order.h"
#include "core/preempt.h"
#include "core/quota.h"
#include "core/sched.h"
#include "core/vec.h"
#include "core/view.h"
#include "util/banned.h"

/* ---- result and its arena (chunks never move, so pointers into them hold) ---- */

struct sched_arena_chunk {
    struct sched_arena_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

static void *arena_alloc(struct sched_result *r, size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t)15;
    struct sched_arena_chunk *c = r->arena;
    if (!c || c->size - c->used < bytes) {
        size_t size = bytes > 65536 ? bytes : 65536;
        struct sched_arena_chunk *n = malloc(sizeof(*n) + size);
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

static void arena_reset(struct sched_result *r)
{
    struct sched_arena_chunk *c = r->arena;
    if (!c)
        return;
    /* Keep the newest (largest) chunk, free the rest. */
    struct sched_arena_chunk *rest = c->next;
    while (rest) {
        struct sched_arena_chunk *next = rest->next;
        free(rest);
        rest = next;
    }
    c->next = NULL;
    c->used = 0;
}

void sched_result_init(struct sched_result *result)
{
    memset(result, 0, sizeof(*result));
}

void sched_result_release(struct sched_result *result)
{
    if (!result)
        return;
    arena_reset(result);
    free(result->arena);
    free(result->starts);
    free(result->preempts);
    free(result->reserves);
    free(result->waits);
    memset(result, 0, sizeof(*result));
}

static void result_clear(struct sched_result *r)
{
    arena_reset(r);
    r->nstarts = r->npreempts = r->nreserves = r->nwaits = 0;
    r->overcommitted = NULL;
    r->novercommitted = 0;
    r->decisions = 0;
}

/* ---- the pass ---- */

enum {
    J_INVALID = 1 << 0, /* final reason set by validation */
    J_FIT0 = 1 << 1,    /* fitted the free capacity at pass start */
    J_CAND = 1 << 2,    /* handed to the ordered loop */
    J_STARTED = 1 << 3,
    J_DONE = 1 << 4, /* reason decided */
    J_POT = 1 << 5,  /* might preempt */
};

enum {
    R_LEAVING = 1 << 0, /* being preempted (by the caller, or chosen in this pass) */
};

enum {
    R_BORROWED = 1 << 0,
    R_CKPT = 1 << 1,
};

struct fail {
    uint32_t team, prio, pool, gpu_type;
    uint8_t kind;
    int64_t size;
};

#define MAX_FAILS 64
/* Preemption plans a pass may try. Each costs a scan of the running set; a
 * pass is bounded, and a job that found no plan tries again next pass. */
#define MAX_PLANS 64

/* Jobs that ask for the same thing (team, class, pool, type, sizes, limit):
 * a queue of 100,000 jobs holds a few hundred such shapes, so what depends
 * only on the request is worked out once per shape. */
struct jshape {
    /* hot: read for every job of the shape (the first cache line) */
    uint64_t hash;  /* of key */
    uint32_t first; /* queue index of the first job of this shape */
    uint32_t team;
    uint32_t allowed_stamp; /* compute_allowed's answer, while team_starts + 1 matches; 0: none */
    uint32_t nallowed, neligible;
    uint32_t remaining; /* candidates of this shape not yet ranked */
    bool valid;         /* validation passed (else first's wait is final) */
    bool fit0;          /* fitted the free capacity when the pass began */
    bool pot;           /* might preempt */
    bool missed;        /* the placement that last found no room for it, and why: */
    enum sched_reason why;
    uint64_t other;
    /* cold */
    uint64_t miss_version;
    uint32_t miss_team_starts;
    uint32_t fit_stamp; /* fit_at_start's answer, likewise */
    bool fits;
    bool within; /* within_guarantee's answer, likewise */
    uint32_t within_stamp;
    uint64_t reserve_fail_version; /* backfill found no time for it (version + 1; 0: no) */
    struct sched_job key;          /* the request, with id, submit and labels zeroed */
};

struct pass {
    const struct sched_cluster *c;
    const struct sched_queue *q;
    const struct sched_running_set *run;
    const struct sched_policy *pol;
    struct sched_state *st;
    struct sched_result *res;
    int64_t now;

    struct view view;
    struct quota quota;
    struct order order;
    struct idmap ids;

    uint8_t *jflag;
    struct sched_wait *jwait; /* per pending job */
    uint8_t *lasq;            /* per pending job (LAS only) */
    uint8_t *rflag;           /* per running job */
    uint32_t *rgroup;         /* per running job: its group (SCHED_NONE: holds nothing) */
    int64_t *rmilli;          /* per running job: milli-GPU it holds */
    int32_t *rorder;          /* per running job: its class's order */
    uint32_t *rteam;          /* per running job: its team */
    uint8_t *rbits;           /* per running job: R_BORROWED, R_CKPT */
    bool *within_g;           /* per group, scratch: the job at hand fits its guarantee there */
    uint8_t *pwhy;            /* per preemption candidate, scratch: why it may be evicted */
    int64_t *rank_milli; /* [group * nranks + rank]: milli held by running, not leaving, jobs */
    uint32_t nranks;
    uint32_t nplans;        /* preemption plans tried in this pass */
    uint8_t *rlasq;         /* per running job (LAS only) */
    int32_t *rank;          /* class index -> rank by order (0 lowest) */
    bool *allowed;          /* per group, scratch */
    int64_t *excess;        /* [team * ngroups + group]: milli over guarantee, reclaimable */
    int64_t *headroom;      /* per group: the current job's team's quota left, milli */
    uint32_t *group_starts; /* per group: jobs started there in this pass */
    uint32_t *team_starts;  /* per team: jobs started in this pass */
    bool *guar_left;        /* per team: some group where it holds less than its guarantee */
    struct view pristine;   /* free capacity when the pass began */
    struct view_undo undo;  /* scratch log for trying releases on the view */
    uint32_t *free0;        /* nodes that had a GPU free when the pass began */
    uint32_t nfree0;
    struct jshape *shapes_of; /* distinct requests */
    uint32_t nshapes;
    uint32_t *jshape; /* per pending job: its shape */
    /* per shape x group, for compute_allowed's cache (NULL: too many to keep) */
    bool *shape_allowed, *shape_eligible;
    int64_t *shape_headroom;
    uint64_t version; /* bumped whenever the view changes: a start, a hold, a block */
    bool *eligible;   /* per group, scratch */

    struct view_place place;
    uint32_t place_cap;

    struct backfill_release *rel;
    size_t nrel, rel_cap;
    size_t nrel_sorted; /* rel[0, nrel_sorted) is in order; starts append after it */

    struct preempt_cand *pcand; /* every running job, least work lost first */
    size_t npcand;
    bool pcand_ready;
    struct preempt_cand *pbuf; /* candidates for one job */
    uint32_t *victims;
    uint32_t *leaving;
    size_t nleaving;

    int32_t *pool_resv;   /* EASY reservation per pool, -1 none */
    uint64_t *pool_block; /* backfill off: job blocking the pool, 0 none */

    struct fail fails[MAX_FAILS];
    size_t nfails;

    struct sched_attained *attained; /* new attained table, sorted by job */
    size_t nattained;
    struct sched_claim *claims; /* new claims */
    size_t nclaims, claims_cap;
};

static bool wants_gpu(const struct sched_job *j)
{
    return j->gpus > 0 || j->gpu_milli > 0 || j->gpu_mem_mib > 0;
}

static int64_t job_end(const struct pass *p, const struct sched_job *j, int64_t start)
{
    int64_t limit = j->time_limit_ms > 0 ? j->time_limit_ms : p->pol->default_time_limit_ms;
    return start > INT64_MAX - limit ? INT64_MAX : start + limit;
}

static struct sched_wait make_wait(const struct sched_job *j, enum sched_reason reason,
                                   uint32_t pool, uint32_t gpu_type, uint64_t other,
                                   const char *field)
{
    return (struct sched_wait){.job = j->id,
                               .reason = reason,
                               .team = j->team,
                               .pool = pool,
                               .gpu_type = gpu_type,
                               .other_job = other,
                               .est_start_ms = -1,
                               .field = field};
}

static void set_wait(struct pass *p, uint32_t i, enum sched_reason reason, uint32_t pool,
                     uint32_t gpu_type, uint64_t other, const char *field)
{
    p->jwait[i] = make_wait(&p->q->jobs[i], reason, pool, gpu_type, other, field);
    p->jflag[i] |= J_DONE;
}

/* Could some node (or, for a gang, the group) of group g ever hold the job,
 * were it empty? The largest node's figures first; only a group of unlike
 * nodes or GPUs needs a look at every node. */
static bool group_can_hold(const struct pass *p, const struct sched_job *j, uint32_t g)
{
    const struct view_group *grp = &p->view.groups[g];
    const struct sched_cluster *c = p->c;
    int64_t need_mem = j->min_gpu_mem_mib > j->gpu_mem_mib ? j->min_gpu_mem_mib : j->gpu_mem_mib;
    bool gang = j->gpus > 0 && j->multi_node;
    uint32_t want = j->gpus > 0 ? (uint32_t)j->gpus : wants_gpu(j) ? 1 : 0;
    if (gang) {
        if (grp->uniform)
            return (uint64_t)j->gpus <= grp->total_gpus;
        uint64_t total = 0;
        for (uint32_t k = 0; k < grp->nnodes; k++) {
            const struct sched_node *n = &c->nodes[grp->nodes[k]];
            for (uint32_t i = 0; i < n->ngpus; i++)
                total += (int64_t)c->gpus[n->gpu_first + i].mem_mib >= need_mem;
        }
        return total >= (uint64_t)j->gpus;
    }
    if (want > grp->max_node_gpus || (uint32_t)j->cpus > grp->max_node_cpus ||
        (uint64_t)j->mem_mib > grp->max_node_mem_mib)
        return false;
    if (grp->uniform)
        return true;
    for (uint32_t k = 0; k < grp->nnodes; k++) {
        const struct sched_node *n = &c->nodes[grp->nodes[k]];
        if (n->cpus < (uint32_t)j->cpus || n->mem_mib < (uint64_t)j->mem_mib)
            continue;
        uint32_t fit = 0;
        for (uint32_t i = 0; i < n->ngpus && fit < want; i++)
            fit += (int64_t)c->gpus[n->gpu_first + i].mem_mib >= need_mem;
        if (fit >= want)
            return true;
    }
    return false;
}

/* Checks a pending job on its own: sizes, indices, and whether any node could
 * ever hold it. Sets a final reason and returns false if not. Also notes
 * whether it fits the free capacity now (J_FIT0). */
static bool validate_job(struct pass *p, uint32_t i)
{
    const struct sched_cluster *c = p->c;
    const struct sched_job *j = &p->q->jobs[i];
    uint32_t pool = j->pool, type = j->gpu_type;
    const char *field = NULL;
    if (j->team >= c->nteams) {
        set_wait(p, i, SCHED_REASON_UNKNOWN_TEAM, SCHED_NONE, SCHED_NONE, 0, "team");
        return false;
    }
    if (j->prio >= c->nclasses) {
        set_wait(p, i, SCHED_REASON_UNKNOWN_CLASS, SCHED_NONE, SCHED_NONE, 0, "priority");
        return false;
    }
    if (pool != SCHED_ANY && pool >= c->npools) {
        set_wait(p, i, SCHED_REASON_UNKNOWN_POOL, SCHED_NONE, SCHED_NONE, 0, "pool");
        return false;
    }
    if (type != SCHED_ANY && type >= c->ngpu_types) {
        set_wait(p, i, SCHED_REASON_UNKNOWN_TYPE, SCHED_NONE, SCHED_NONE, 0, "gpu_type");
        return false;
    }
    if (j->gpus < 0)
        field = "gpus is negative";
    else if (j->gpu_milli < 0)
        field = "gpu_milli is negative";
    else if (j->gpu_mem_mib < 0)
        field = "gpu_mem_mib is negative";
    else if (j->min_gpu_mem_mib < 0)
        field = "min_gpu_mem_mib is negative";
    else if (j->cpus < 0)
        field = "cpus is negative";
    else if (j->mem_mib < 0)
        field = "mem_mib is negative";
    else if (j->time_limit_ms < 0)
        field = "time_limit_ms is negative";
    else if ((j->gpus > 0) + (j->gpu_milli > 0) + (j->gpu_mem_mib > 0) > 1)
        field = "give only one of gpus, gpu_milli and gpu_mem_mib";
    else if (j->gpu_milli >= SCHED_MILLI)
        field = "gpu_milli must be 1..999 (whole GPUs go in gpus)";
    else if (j->multi_node && j->gpus <= 0)
        field = "multi_node needs a whole number of gpus";
    else if (j->gpus > (int32_t)SCHED_MAX_GPUS_PER_NODE * 1024)
        field = "gpus is over the limit";
    if (field) {
        set_wait(p, i, SCHED_REASON_BAD_SIZE, pool, type, 0, field);
        return false;
    }

    /* Against the cluster: some group must be able to hold it, ever. */
    bool any_match = false, any_size = false, any_quota = false;
    bool fit0 = false;
    struct view *v = &p->view;
    for (uint32_t g = 0; g < v->ngroups; g++) {
        const struct view_group *grp = &v->groups[g];
        if (pool != SCHED_ANY && grp->pool != pool)
            continue;
        if (wants_gpu(j) &&
            (grp->gpu_type == SCHED_NONE || (type != SCHED_ANY && type != grp->gpu_type)))
            continue;
        any_match = true;
        if (!view_group_eligible(v, j, g))
            continue; /* GPU memory constraint */
        bool size_ok = group_can_hold(p, j, g);
        if (!size_ok)
            continue;
        any_size = true;
        int64_t milli = model_job_milli(j, grp->gpu_mem_mib);
        int64_t limit = quota_limit(&p->quota, j->team, g);
        if (limit != INT64_MAX && milli > limit)
            continue;
        any_quota = true;
        if (!fit0 && view_group_may_fit(v, j, g, false))
            fit0 = true;
    }
    if (!any_match) {
        set_wait(p, i, SCHED_REASON_NO_MATCH, pool, type, 0, NULL);
        return false;
    }
    if (!any_size) {
        set_wait(p, i, j->multi_node ? SCHED_REASON_GANG_TOO_LARGE : SCHED_REASON_TOO_LARGE, pool,
                 type, 0, NULL);
        return false;
    }
    if (!any_quota) {
        set_wait(p, i, SCHED_REASON_QUOTA_NEVER, pool, type, 0, NULL);
        return false;
    }
    if (fit0)
        p->jflag[i] |= J_FIT0;
    return true;
}

/* Groups the job may use now: eligible, and with quota headroom. Returns how
 * many are eligible (*ret_nallowed: how many also have headroom). */
static uint32_t compute_allowed_now(struct pass *p, const struct sched_job *j,
                                    uint32_t *ret_nallowed);

/* compute_allowed for pending job i, from its shape's cache while its team's
 * usage has not changed. */
static uint32_t compute_allowed(struct pass *p, uint32_t i, uint32_t *ret_nallowed)
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
static uint32_t allowed_count(struct pass *p, uint32_t i)
{
    const struct jshape *sh = &p->shapes_of[p->jshape[i]];
    if (p->shape_allowed && sh->allowed_stamp == p->team_starts[sh->team] + 1)
        return sh->nallowed;
    uint32_t nallowed;
    compute_allowed(p, i, &nallowed);
    return nallowed;
}

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
        int64_t milli = model_job_milli(j, v->groups[g].gpu_mem_mib);
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

static void update_guar_left(struct pass *p, uint32_t team)
{
    bool left = false;
    for (uint32_t g = 0; g < p->quota.ngroups && !left; g++) {
        size_t k = (size_t)team * p->quota.ngroups + g;
        left = p->quota.used[k] < p->quota.guar[k];
    }
    p->guar_left[team] = left;
}

static int record_start(struct pass *p, uint32_t i)
{
    struct sched_result *r = p->res;
    const struct sched_job *j = &p->q->jobs[i];
    const struct view_place *pl = &p->place;
    if (vec_grow((void **)&r->starts, &r->starts_cap, r->nstarts + 1, sizeof(*r->starts)) ||
        vec_grow((void **)&p->rel, &p->rel_cap, p->nrel + 1, sizeof(*p->rel)))
        return GPO_ENOMEM;
    struct sched_node_part *parts = arena_alloc(r, pl->nnodes * sizeof(*parts));
    struct sched_share *shares = arena_alloc(r, (pl->nshares ? pl->nshares : 1) * sizeof(*shares));
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
        update_guar_left(p, j->team);
    }
    p->team_starts[j->team]++;
    p->version++;
    view_apply(&p->view, &s->alloc, false);
    order_note_start(&p->order, j->team, g != SCHED_NONE ? p->view.groups[g].gpu_type : SCHED_NONE,
                     milli);
    /* r->starts moves as it grows: backfill gets its own copy of the allocation,
     * in the arena, which never moves. */
    struct sched_alloc *kept = arena_alloc(r, sizeof(*kept));
    if (!kept)
        return GPO_ENOMEM;
    *kept = s->alloc;
    p->rel[p->nrel++] = (struct backfill_release){job_end(p, j, p->now), j->id, kept};
    p->jflag[i] |= J_STARTED | J_DONE;
    return 0;
}

/* The pools a job's allowed groups lie in are all blocked (backfill off)? */
static uint64_t blocked_by(const struct pass *p)
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

static void block_pools(struct pass *p, uint64_t job)
{
    p->version++;
    for (uint32_t g = 0; g < p->view.ngroups; g++) {
        uint32_t pool = p->view.groups[g].pool;
        if (p->allowed[g] && !p->pool_block[pool])
            p->pool_block[pool] = job;
    }
}

/* What may be evicted for one pending job, worked out once per job. */
struct victim_rule {
    int32_t order;    /* the job's class order */
    bool may_preempt; /* its class may evict lower ones */
    uint32_t team;
    bool las; /* LAS: more-served checkpointable jobs */
    uint8_t lasq;
};

static void victim_rule_init(struct pass *p, const struct sched_job *j, struct victim_rule *ret)
{
    const struct sched_prio_class *cls = &p->c->classes[j->prio];
    *ret = (struct victim_rule){.order = cls->order,
                                .may_preempt = cls->may_preempt,
                                .team = j->team,
                                .las = p->pol->order == SCHED_ORDER_LAS && p->lasq,
                                .lasq = p->lasq ? p->lasq[j - p->q->jobs] : 0};
    /* Reclaim needs the job to fit within its team's guarantee in the victim's group. */
    for (uint32_t g = 0; g < p->view.ngroups; g++)
        p->within_g[g] = p->eligible[g] &&
                         quota_within_guarantee(&p->quota, j->team, g,
                                                model_job_milli(j, p->view.groups[g].gpu_mem_mib));
}

/* May running job r be evicted under `rule`, and why? */
static bool victim_ok(const struct pass *p, const struct victim_rule *rule, uint32_t r,
                      enum sched_preempt_why *ret_why)
{
    uint32_t g = p->rgroup[r];
    if (g == SCHED_NONE || !p->eligible[g])
        return false;
    int32_t vo = p->rorder[r];
    if (rule->may_preempt && vo < rule->order) {
        *ret_why = SCHED_PREEMPT_PRIORITY;
        return true;
    }
    uint32_t vteam = p->rteam[r];
    if ((p->rbits[r] & R_BORROWED) && p->within_g[g] && vteam != rule->team &&
        p->quota.used[(size_t)vteam * p->quota.ngroups + g] >
            p->quota.guar[(size_t)vteam * p->quota.ngroups + g]) {
        *ret_why = SCHED_PREEMPT_RECLAIM;
        return true;
    }
    if (rule->las && (p->rbits[r] & R_CKPT) && vo <= rule->order && p->rlasq[r] > rule->lasq) {
        *ret_why = SCHED_PREEMPT_LAS;
        return true;
    }
    return false;
}

static uint8_t job_kind(const struct sched_job *j)
{
    return j->gpus > 0 ? (j->multi_node ? 2 : 1) : (j->gpu_milli > 0 ? 3 : 4);
}

static int64_t job_size(const struct sched_job *j)
{
    return j->gpus > 0 ? j->gpus : j->gpu_milli > 0 ? j->gpu_milli : j->gpu_mem_mib;
}

static bool failed_before(const struct pass *p, const struct sched_job *j)
{
    for (size_t f = 0; f < p->nfails; f++) {
        const struct fail *x = &p->fails[f];
        if (x->team == j->team && x->prio == j->prio && x->pool == j->pool &&
            x->gpu_type == j->gpu_type && x->kind == job_kind(j) && x->size <= job_size(j))
            return true;
    }
    return false;
}

static void note_failure(struct pass *p, const struct sched_job *j)
{
    if (p->nfails < MAX_FAILS)
        p->fails[p->nfails++] =
            (struct fail){j->team, j->prio, j->pool, j->gpu_type, job_kind(j), job_size(j)};
}

/* Records a claim: `victims` leave for `job`, which was planned onto `nodes`. */
static int add_claim(struct pass *p, uint64_t job, const uint64_t *victims, uint32_t n,
                     const uint32_t *nodes, uint32_t nnodes, int64_t since)
{
    if (vec_grow((void **)&p->claims, &p->claims_cap, p->nclaims + 1, sizeof(*p->claims)))
        return GPO_ENOMEM;
    struct sched_claim *cl = &p->claims[p->nclaims++];
    memset(cl, 0, sizeof(*cl));
    cl->job = job;
    cl->since_ms = since;
    for (uint32_t v = 0; v < n && cl->nvictims < SCHED_CLAIM_VICTIMS; v++)
        cl->victims[cl->nvictims++] = victims[v];
    for (uint32_t k = 0; k < nnodes && cl->nnodes < SCHED_CLAIM_NODES; k++)
        cl->nodes[cl->nnodes++] = nodes[k];
    return 0;
}

/* Holds the nodes of the current placement for `job` from `start_ms` on. */
static int hold_place(struct pass *p, uint64_t job, int64_t start_ms)
{
    p->version++;
    int r = view_resv_add(&p->view, job, start_ms);
    if (r < 0)
        return r;
    for (uint32_t k = 0; k < p->place.nnodes; k++)
        view_resv_hold(&p->view, (uint32_t)r, p->place.nodes[k].node);
    return r;
}

/* Tries to make room for job i by preemption. 1 planned, 0 not, or an error. */
/* Could evicting everything the job may evict, plus what is free, add up to
 * its size in some group? A necessary condition, from per-group sums, that
 * spares most hopeless jobs the scan of the running set. */
static bool eviction_may_suffice(struct pass *p, const struct sched_job *j)
{
    if (p->pol->order == SCHED_ORDER_LAS)
        return true;
    const struct sched_prio_class *cls = &p->c->classes[j->prio];
    for (uint32_t g = 0; g < p->view.ngroups; g++) {
        if (!p->eligible[g])
            continue;
        const struct view_group *grp = &p->view.groups[g];
        view_group_refresh(&p->view, g);
        int64_t need = model_job_milli(j, grp->gpu_mem_mib);
        int64_t have = (int64_t)grp->sum_free_whole * SCHED_MILLI;
        if (cls->may_preempt) {
            for (uint32_t k = 0; k < (uint32_t)p->rank[j->prio]; k++)
                have += p->rank_milli[(size_t)g * p->nranks + k];
        }
        if (quota_within_guarantee(&p->quota, j->team, g, need)) {
            for (uint32_t t = 0; t < p->c->nteams; t++) {
                if (t != j->team)
                    have += p->excess[(size_t)t * p->quota.ngroups + g];
            }
        }
        if (have >= need || (need < SCHED_MILLI && have > 0))
            return true;
    }
    return false;
}

static int try_preempt(struct pass *p, uint32_t i, int64_t end)
{
    const struct sched_job *j = &p->q->jobs[i];
    struct sched_result *r = p->res;
    if (p->nplans >= MAX_PLANS || !eviction_may_suffice(p, j))
        return 0;
    p->nplans++;
    if (!p->pcand_ready) {
        for (size_t k = 0; k < p->run->njobs; k++) {
            p->pcand[k] = (struct preempt_cand){(uint32_t)k, p->run->jobs[k].job->id,
                                                preempt_lost_gpu_ms(&p->run->jobs[k], p->now)};
        }
        preempt_sort(p->pcand, p->run->njobs);
        p->npcand = p->run->njobs;
        p->pcand_ready = true;
    }
    /* A reclaim takes a team's borrowed work only down to its guarantee: keep,
     * least work lost first, as much of each team's excess as it covers. */
    struct victim_rule rule;
    victim_rule_init(p, j, &rule);
    size_t n = 0;
    for (size_t k = 0; k < p->npcand; k++) {
        uint32_t run = p->pcand[k].run;
        enum sched_preempt_why why;
        if ((p->rflag[run] & R_LEAVING) || !victim_ok(p, &rule, run, &why))
            continue;
        if (why == SCHED_PREEMPT_RECLAIM) {
            size_t q = (size_t)p->run->jobs[run].job->team * p->quota.ngroups + p->rgroup[run];
            if (p->excess[q] < p->rmilli[run])
                continue;
            p->excess[q] -= p->rmilli[run];
        }
        p->pwhy[n] = (uint8_t)why;
        p->pbuf[n++] = p->pcand[k];
    }
    /* Undo the budget: the plan may keep fewer, and the next job starts afresh. */
    for (size_t k = 0; k < n; k++) {
        uint32_t run = p->pbuf[k].run;
        if (p->pwhy[k] == SCHED_PREEMPT_RECLAIM)
            p->excess[(size_t)p->run->jobs[run].job->team * p->quota.ngroups + p->rgroup[run]] +=
                p->rmilli[run];
    }
    if (!n)
        return 0;
    size_t nv = 0;
    int found = preempt_plan(&p->view, p->run, p->leaving, p->nleaving, j, p->allowed, end, p->pbuf,
                             n, p->victims, &nv, &p->place, &p->undo);
    if (found <= 0)
        return found;
    if (!nv)
        return 0; /* room comes from jobs already leaving: nothing new to evict */
    if (vec_grow((void **)&r->preempts, &r->preempts_cap, r->npreempts + nv, sizeof(*r->preempts)))
        return GPO_ENOMEM;
    uint64_t ids[SCHED_CLAIM_VICTIMS];
    for (size_t k = 0; k < nv; k++) {
        const struct preempt_cand *pc = &p->pbuf[p->victims[k]];
        r->preempts[r->npreempts++] =
            (struct sched_preempt){.job = pc->job,
                                   .for_job = j->id,
                                   .grace_ms = p->pol->preempt_grace_ms,
                                   .lost_gpu_ms = pc->lost_gpu_ms,
                                   .why = (enum sched_preempt_why)p->pwhy[p->victims[k]]};
        p->rflag[pc->run] |= R_LEAVING;
        p->leaving[p->nleaving++] = pc->run;
        uint32_t vg = p->rgroup[pc->run];
        if (r->preempts[r->npreempts - 1].why == SCHED_PREEMPT_RECLAIM)
            p->excess[(size_t)p->run->jobs[pc->run].job->team * p->quota.ngroups + vg] -=
                p->rmilli[pc->run];
        if (vg != SCHED_NONE)
            p->rank_milli[(size_t)vg * p->nranks + p->rank[p->run->jobs[pc->run].job->prio]] -=
                p->rmilli[pc->run];
        if (k < SCHED_CLAIM_VICTIMS)
            ids[k] = pc->job;
    }
    uint32_t nodes[SCHED_CLAIM_NODES], nn = 0;
    for (uint32_t k = 0; k < p->place.nnodes && nn < SCHED_CLAIM_NODES; k++)
        nodes[nn++] = p->place.nodes[k].node;
    int err =
        add_claim(p, j->id, ids, (uint32_t)(nv < SCHED_CLAIM_VICTIMS ? nv : SCHED_CLAIM_VICTIMS),
                  nodes, nn, p->now);
    if (err)
        return err;
    int hr = hold_place(p, j->id, p->now + p->pol->preempt_grace_ms);
    return hr < 0 ? hr : 1;
}

/* Puts the releases in order: the running set's are sorted once, the jobs
 * started since are sorted and merged in (a pass may start thousands). */
static int sort_releases(struct pass *p)
{
    size_t done = p->nrel_sorted, n = p->nrel;
    if (done == n)
        return 0;
    backfill_sort(p->rel + done, n - done);
    if (done) {
        struct backfill_release *tmp = malloc(n * sizeof(*tmp));
        if (!tmp)
            return GPO_ENOMEM;
        size_t a = 0, b = done, k = 0;
        while (a < done || b < n) {
            bool take_a = b == n || (a < done && (p->rel[a].end_ms < p->rel[b].end_ms ||
                                                  (p->rel[a].end_ms == p->rel[b].end_ms &&
                                                   p->rel[a].job < p->rel[b].job)));
            tmp[k++] = take_a ? p->rel[a++] : p->rel[b++];
        }
        memcpy(p->rel, tmp, n * sizeof(*tmp));
        free(tmp);
    }
    p->nrel_sorted = n;
    return 0;
}

/* The reservation, in EASY style: one per pool, for its highest-ranked blocked job. */
static int try_reserve(struct pass *p, uint32_t i)
{
    const struct sched_job *j = &p->q->jobs[i];
    for (uint32_t g = 0; g < p->view.ngroups; g++) {
        if (p->allowed[g] && p->pool_resv[p->view.groups[g].pool] >= 0)
            return 0;
    }
    int err = sort_releases(p);
    if (err)
        return err;
    int64_t start;
    int found =
        backfill_shadow(&p->view, j, p->allowed, p->rel, p->nrel, p->now, &start, &p->place);
    if (found == 0)
        p->shapes_of[p->jshape[i]].reserve_fail_version = p->version + 1;
    if (found <= 0)
        return found;
    int r = hold_place(p, j->id, start);
    if (r < 0)
        return r;
    p->pool_resv[p->view.groups[p->place.group].pool] = r;
    p->jwait[i].est_start_ms = start;
    return 1;
}

static uint64_t shape_hash(const struct sched_job *k, uint32_t team_starts)
{
    uint64_t h = 1469598103934665603ULL;
    const uint64_t parts[] = {k->team,
                              k->prio,
                              k->pool,
                              k->gpu_type,
                              (uint64_t)k->gpus,
                              (uint64_t)k->gpu_milli,
                              (uint64_t)k->gpu_mem_mib,
                              (uint64_t)k->min_gpu_mem_mib,
                              (uint64_t)k->cpus,
                              (uint64_t)k->mem_mib,
                              k->multi_node,
                              team_starts};
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
        h = (h ^ parts[i]) * 1099511628211ULL;
    return h;
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
    if (wants_gpu(j) && !(j->gpus > 0 && j->multi_node)) {
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

/* Why a job that did not fit waits: the reason and the job in the way. */
static enum sched_reason explain_miss(struct pass *p, uint32_t i, unsigned miss, int64_t end,
                                      uint32_t nallowed, uint32_t neligible, uint64_t *ret_other)
{
    const struct sched_job *j = &p->q->jobs[i];
    *ret_other = 0;
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
    if ((miss & VIEW_MISS_HOST) && !(miss & (VIEW_MISS_GPU | VIEW_MISS_GANG)))
        return SCHED_REASON_HOST;
    if ((p->jflag[i] & J_FIT0) && fit_at_start(p, i))
        return SCHED_REASON_PRIORITY;
    if (j->multi_node && (miss & VIEW_MISS_GANG))
        return SCHED_REASON_GANG;
    return wants_gpu(j) ? SCHED_REASON_NO_GPU : SCHED_REASON_HOST;
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
    if (sh->missed && sh->miss_version == p->version &&
        sh->miss_team_starts == p->team_starts[j->team]) {
        why = sh->why;
        other = sh->other;
    } else {
        unsigned miss = 0;
        if (view_place(&p->view, j, p->allowed, end, false, &p->place, &miss))
            return record_start(p, i);
        why = explain_miss(p, i, miss, end, nallowed, neligible, &other);
        sh->missed = true;
        sh->miss_version = p->version;
        sh->miss_team_starts = p->team_starts[j->team];
        sh->why = why;
        sh->other = other;
    }
    set_wait(p, i, why, pool, type, other, NULL);
    if (why == SCHED_REASON_RESERVED || why == SCHED_REASON_QUOTA)
        return 0;

    if (p->pol->preemption && (p->jflag[i] & J_POT) && !failed_before(p, j)) {
        int pr = try_preempt(p, i, end);
        if (pr < 0)
            return pr;
        if (pr > 0) {
            set_wait(p, i, SCHED_REASON_PREEMPTING, pool, type, 0, NULL);
            p->jwait[i].est_start_ms = p->now + p->pol->preempt_grace_ms;
            return 0;
        }
        note_failure(p, j);
    }
    if (p->pol->backfill) {
        int rr = try_reserve(p, i);
        if (rr < 0)
            return rr;
    } else {
        block_pools(p, j->id);
    }
    return 0;
}

static int process_job(struct pass *p, uint32_t i)
{
    const struct sched_job *j = &p->q->jobs[i];
    p->res->decisions++;
    uint32_t nallowed;
    uint32_t neligible = compute_allowed(p, i, &nallowed);
    uint32_t type = j->gpu_type, pool = j->pool;
    if (!nallowed) {
        set_wait(p, i, SCHED_REASON_QUOTA, pool, type, 0, NULL);
        return 0;
    }
    if (!p->pol->backfill) {
        uint64_t b = blocked_by(p);
        if (b) {
            set_wait(p, i, SCHED_REASON_BLOCKED, pool, type, b, NULL);
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
 * Would ranking job i (of shape s, represented by its first job) change
 * nothing but its own wait? That is: it finds no room, cannot preempt, and
 * needs no reservation (its pools have one, or backfill found none). Then its
 * reason does not depend on its rank. Probing a shape's placement here has no
 * side effect but the shape's miss cache.
 */
static bool shape_inert(struct pass *p, uint32_t s)
{
    struct jshape *sh = &p->shapes_of[s];
    uint32_t rep = sh->first;
    const struct sched_job *j = &p->q->jobs[rep];
    uint32_t nallowed;
    uint32_t neligible = compute_allowed(p, rep, &nallowed);
    if (!nallowed)
        return true; /* quota */
    if (!p->pol->backfill)
        return blocked_by(p) != 0; /* else it might block its pools */
    if (!(sh->missed && sh->miss_version == p->version &&
          sh->miss_team_starts == p->team_starts[j->team])) {
        int64_t end = job_end(p, j, p->now);
        unsigned miss = 0;
        p->view.headroom = p->headroom;
        bool fits = view_place(&p->view, j, p->allowed, end, false, &p->place, &miss);
        if (!fits) {
            uint64_t other;
            sh->why = explain_miss(p, rep, miss, end, nallowed, neligible, &other);
            sh->other = other;
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
    if (p->pol->preemption && sh->pot && p->nplans < MAX_PLANS && !failed_before(p, j) &&
        eviction_may_suffice(p, j))
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
static bool frozen(struct pass *p, const uint32_t *cshapes, size_t ncshapes)
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
    uint32_t nallowed = allowed_count(p, i);
    if (!p->pol->backfill)
        compute_allowed(p, i, &nallowed); /* blocked_by reads p->allowed */
    if (!nallowed)
        return make_wait(j, SCHED_REASON_QUOTA, j->pool, j->gpu_type, 0, NULL);
    uint64_t blocker = p->pol->backfill ? 0 : blocked_by(p);
    if (blocker)
        return make_wait(j, SCHED_REASON_BLOCKED, j->pool, j->gpu_type, blocker, NULL);
    if (p->jflag[i] & J_CAND)
        return make_wait(j, sh->why, j->pool, j->gpu_type, sh->other, NULL);
    enum sched_reason why = j->multi_node  ? SCHED_REASON_GANG
                            : wants_gpu(j) ? SCHED_REASON_NO_GPU
                                           : SCHED_REASON_HOST;
    return make_wait(j, why, j->pool, j->gpu_type, 0, NULL);
}

/* order_within_fn: does pending job i fit within its team's guarantee in
 * some group it could use? */
static bool within_guarantee(void *ctx, uint32_t i)
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
        within = p->quota.used[k] + model_job_milli(j, p->view.groups[g].gpu_mem_mib) <=
                 p->quota.guar[k];
    }
    sh->within_stamp = stamp;
    sh->within = within;
    return within;
}

/* Might job j preempt anything at all? A cheap necessary condition. */
static bool may_preempt(const struct pass *p, const struct sched_job *j)
{
    const struct sched_cluster *c = p->c;
    if (c->classes[j->prio].may_preempt && p->rank[j->prio] > 0)
        return true;
    if (p->pol->order == SCHED_ORDER_LAS)
        return true;
    /* Reclaim: the team has a guarantee left somewhere the job could go. */
    for (uint32_t g = 0; g < p->view.ngroups; g++) {
        size_t k = (size_t)j->team * p->quota.ngroups + g;
        if (p->quota.guar[k] > p->quota.used[k] && view_group_eligible(&p->view, j, g))
            return true;
    }
    return false;
}

static int cmp_class_order(const void *a, const void *b, const struct sched_cluster *c)
{
    int32_t x = c->classes[*(const uint32_t *)a].order, y = c->classes[*(const uint32_t *)b].order;
    return (x > y) - (x < y);
}

static int pass_alloc(struct pass *p)
{
    size_t nq = p->q->njobs, nr = p->run->njobs;
    p->jflag = calloc(nq ? nq : 1, 1);
    /* Waits are written straight into the result (one per queued job, in queue
     * order), which keeps its memory from pass to pass; started jobs are
     * squeezed out at the end. */
    if (vec_grow((void **)&p->res->waits, &p->res->waits_cap, nq ? nq : 1, sizeof(*p->res->waits)))
        return GPO_ENOMEM;
    p->jwait = p->res->waits;
    p->rflag = calloc(nr ? nr : 1, 1);
    p->rank = malloc((p->c->nclasses ? p->c->nclasses : 1) * sizeof(*p->rank));
    p->allowed = malloc((p->view.ngroups ? p->view.ngroups : 1) * sizeof(*p->allowed));
    p->eligible = malloc((p->view.ngroups ? p->view.ngroups : 1) * sizeof(*p->eligible));
    p->pcand = malloc((nr ? nr : 1) * sizeof(*p->pcand));
    p->pbuf = malloc((nr ? nr : 1) * sizeof(*p->pbuf));
    p->victims = malloc((nr ? nr : 1) * sizeof(*p->victims));
    p->leaving = malloc((nr ? nr : 1) * sizeof(*p->leaving));
    p->pool_resv = malloc((p->c->npools ? p->c->npools : 1) * sizeof(*p->pool_resv));
    p->pool_block = calloc(p->c->npools ? p->c->npools : 1, sizeof(*p->pool_block));
    uint32_t ng = p->view.ngroups ? p->view.ngroups : 1;
    p->headroom = malloc(ng * sizeof(*p->headroom));
    p->group_starts = calloc(ng, sizeof(*p->group_starts));
    p->team_starts = calloc(p->c->nteams ? p->c->nteams : 1, sizeof(*p->team_starts));
    p->guar_left = calloc(p->c->nteams ? p->c->nteams : 1, sizeof(*p->guar_left));
    if (!p->guar_left)
        return GPO_ENOMEM;
    for (uint32_t t = 0; t < p->c->nteams; t++)
        update_guar_left(p, t);
    p->shapes_of = malloc((nq ? nq : 1) * sizeof(*p->shapes_of));
    p->jshape = malloc((nq ? nq : 1) * sizeof(*p->jshape));
    if (!p->headroom || !p->group_starts || !p->team_starts || !p->shapes_of || !p->jshape)
        return GPO_ENOMEM;
    int err = view_clone(&p->pristine, &p->view);
    if (err)
        return err;
    p->free0 = malloc((p->c->nnodes ? p->c->nnodes : 1) * sizeof(*p->free0));
    if (!p->free0)
        return GPO_ENOMEM;
    for (uint32_t n = 0; n < p->c->nnodes; n++) {
        const struct view_node *vn = &p->view.nodes[n];
        if (vn->usable && (vn->free_whole || vn->nshared))
            p->free0[p->nfree0++] = n;
    }
    size_t nq_cells = (size_t)p->c->nteams * p->view.ngroups;
    p->excess = malloc((nq_cells ? nq_cells : 1) * sizeof(*p->excess));
    if (!p->excess)
        return GPO_ENOMEM;
    for (size_t k = 0; k < nq_cells; k++) {
        int64_t over = p->quota.used[k] - p->quota.guar[k];
        p->excess[k] = over > 0 ? over : 0;
    }
    p->rel_cap = nr + 16;
    p->rel = malloc(p->rel_cap * sizeof(*p->rel));
    if (!p->jflag || !p->jwait || !p->rflag || !p->rank || !p->allowed || !p->eligible ||
        !p->pcand || !p->pbuf || !p->victims || !p->leaving || !p->pool_resv || !p->pool_block ||
        !p->rel)
        return GPO_ENOMEM;
    if (p->pol->order == SCHED_ORDER_LAS) {
        p->lasq = calloc(nq ? nq : 1, 1);
        p->rlasq = calloc(nr ? nr : 1, 1);
        if (!p->lasq || !p->rlasq)
            return GPO_ENOMEM;
    }
    for (uint32_t k = 0; k < p->c->npools; k++)
        p->pool_resv[k] = -1;
    /* Rank classes by order; equal orders share a rank. */
    uint32_t *idx = malloc((p->c->nclasses ? p->c->nclasses : 1) * sizeof(*idx));
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
    p->rgroup = malloc((nr ? nr : 1) * sizeof(*p->rgroup));
    p->rmilli = malloc((nr ? nr : 1) * sizeof(*p->rmilli));
    p->rorder = malloc((nr ? nr : 1) * sizeof(*p->rorder));
    p->rteam = malloc((nr ? nr : 1) * sizeof(*p->rteam));
    p->rbits = malloc((nr ? nr : 1) * sizeof(*p->rbits));
    p->pwhy = malloc((nr ? nr : 1) * sizeof(*p->pwhy));
    p->within_g = malloc(ng * sizeof(*p->within_g));
    if (!p->rorder || !p->rteam || !p->rbits || !p->pwhy || !p->within_g)
        return GPO_ENOMEM;
    p->rank_milli = calloc((size_t)ng * p->nranks, sizeof(*p->rank_milli));
    if (!p->rgroup || !p->rmilli || !p->rank_milli)
        return GPO_ENOMEM;
    for (size_t k = 0; k < nr; k++) {
        const struct sched_running *run = &p->run->jobs[k];
        quota_alloc_usage(&p->view, &run->alloc, &p->rgroup[k], &p->rmilli[k]);
        p->rorder[k] = p->c->classes[run->job->prio].order;
        p->rteam[k] = run->job->team;
        p->rbits[k] =
            (uint8_t)((run->borrowed ? R_BORROWED : 0) | (run->job->checkpointable ? R_CKPT : 0));
        if (p->rgroup[k] != SCHED_NONE && !run->preempting)
            p->rank_milli[(size_t)p->rgroup[k] * p->nranks + p->rank[run->job->prio]] +=
                p->rmilli[k];
    }
    return 0;
}

static void pass_free(struct pass *p)
{
    view_release(&p->view);
    quota_release(&p->quota);
    order_release(&p->order);
    idmap_release(&p->ids);
    free(p->place.nodes);
    free(p->place.shares);
    free(p->jflag);
    free(p->lasq);
    free(p->rflag);
    free(p->rgroup);
    free(p->rmilli);
    free(p->rorder);
    free(p->rteam);
    free(p->rbits);
    free(p->pwhy);
    free(p->within_g);
    free(p->rank_milli);
    free(p->rlasq);
    free(p->rank);
    free(p->allowed);
    free(p->excess);
    free(p->headroom);
    free(p->group_starts);
    free(p->team_starts);
    free(p->free0);
    free(p->shapes_of);
    free(p->jshape);
    free(p->shape_allowed);
    free(p->shape_eligible);
    free(p->shape_headroom);
    free(p->guar_left);
    view_clone_release(&p->pristine);
    view_undo_release(&p->undo);
    free(p->eligible);
    free(p->rel);
    free(p->pcand);
    free(p->pbuf);
    free(p->victims);
    free(p->leaving);
    free(p->pool_resv);
    free(p->pool_block);
    free(p->attained);
    free(p->claims);
}

/* Attained service at `now`: the state's, plus what running jobs got since
 * the last pass; kept for jobs still queued or running. Sorted by job. */
static int compute_attained(struct pass *p)
{
    const struct sched_state *st = p->st;
    size_t nr = p->run->njobs, n = 0;
    p->attained = malloc((st->nattained + nr + 1) * sizeof(*p->attained));
    if (!p->attained)
        return GPO_ENOMEM;
    for (size_t k = 0; k < st->nattained; k++) {
        uint32_t v = idmap_get(&p->ids, st->attained[k].job);
        if (v != IDMAP_NONE && !(v & IDMAP_RUNNING))
            p->attained[n++] = st->attained[k];
    }
    for (size_t r = 0; r < nr; r++) {
        const struct sched_running *run = &p->run->jobs[r];
        const struct sched_attained *old =
            state_find_attained(st->attained, st->nattained, run->job->id);
        int64_t since = run->start_ms > st->last_pass_ms ? run->start_ms : st->last_pass_ms;
        int64_t span = p->now > since ? p->now - since : 0;
        int64_t milli = 0;
        for (uint32_t i = 0; i < run->alloc.nshares; i++)
            milli += run->alloc.shares[i].milli;
        int64_t add = span / SCHED_MILLI * milli + span % SCHED_MILLI * milli / SCHED_MILLI;
        p->attained[n++] = (struct sched_attained){run->job->id, (old ? old->gpu_ms : 0) + add};
    }
    qsort(p->attained, n, sizeof(*p->attained), state_cmp_attained);
    p->nattained = n;
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
    uint32_t *count = calloc(v->nresvs, sizeof(*count));
    if (!count)
        return GPO_ENOMEM;
    for (uint32_t n = 0; n < p->c->nnodes; n++) {
        if (v->nodes[n].resv >= 0)
            count[v->nodes[n].resv]++;
    }
    for (uint32_t k = 0; k < v->nresvs; k++) {
        struct sched_reserve *s = &r->reserves[k];
        s->job = v->resvs[k].job;
        s->start_ms = v->resvs[k].start_ms;
        s->nnodes = 0;
        s->nodes = arena_alloc(r, (count[k] ? count[k] : 1) * sizeof(*s->nodes));
        if (!s->nodes) {
            free(count);
            return GPO_ENOMEM;
        }
    }
    for (uint32_t n = 0; n < p->c->nnodes; n++) {
        int32_t k = v->nodes[n].resv;
        if (k >= 0)
            r->reserves[k].nodes[r->reserves[k].nnodes++] = n;
    }
    r->nreserves = v->nresvs;
    free(count);
    return 0;
}

/* Claims carried over: a preemptor whose victims are still leaving waits for
 * them; one whose victims are gone goes first. Returns the ready ones' queue
 * indices in *ready. */
static int carry_claims(struct pass *p, uint32_t *ready, size_t *ret_nready)
{
    size_t nready = 0;
    for (size_t k = 0; k < p->st->nclaims; k++) {
        const struct sched_claim *cl = &p->st->claims[k];
        uint32_t qi = idmap_get(&p->ids, cl->job);
        if (qi == IDMAP_NONE || (qi & IDMAP_RUNNING) || (p->jflag[qi] & J_DONE))
            continue;
        bool waiting = false;
        for (uint32_t v = 0; v < cl->nvictims; v++) {
            uint32_t ri = idmap_get(&p->ids, cl->victims[v]);
            if (ri != IDMAP_NONE && (ri & IDMAP_RUNNING)) {
                waiting = true;
                break;
            }
        }
        if (!waiting) {
            ready[nready++] = qi;
            continue;
        }
        /* Hold the victims' nodes for the preemptor until they have left. */
        int64_t until = cl->since_ms + p->pol->preempt_grace_ms;
        int r = view_resv_add(&p->view, cl->job, until > p->now ? until : p->now);
        if (r < 0)
            return r;
        for (uint32_t v = 0; v < cl->nvictims; v++) {
            uint32_t ri = idmap_get(&p->ids, cl->victims[v]);
            if (ri == IDMAP_NONE || !(ri & IDMAP_RUNNING))
                continue;
            const struct sched_alloc *a = &p->run->jobs[ri & ~IDMAP_RUNNING].alloc;
            for (uint32_t n = 0; n < a->nnodes; n++)
                view_resv_hold(&p->view, (uint32_t)r, a->nodes[n].node);
        }
        set_wait(p, qi, SCHED_REASON_PREEMPTING, p->q->jobs[qi].pool, p->q->jobs[qi].gpu_type, 0,
                 NULL);
        int64_t est = cl->since_ms + p->pol->preempt_grace_ms;
        p->jwait[qi].est_start_ms = est > p->now ? est : p->now;
        p->res->decisions++;
        for (uint32_t n = 0; n < cl->nnodes; n++) {
            if (cl->nodes[n] < p->c->nnodes)
                view_resv_hold(&p->view, (uint32_t)r, cl->nodes[n]);
        }
        int err =
            add_claim(p, cl->job, cl->victims, cl->nvictims, cl->nodes, cl->nnodes, cl->since_ms);
        if (err)
            return err;
    }
    *ret_nready = nready;
    return 0;
}

/* The request part of a job: what validation, the fit checks and placement look at. */
static struct sched_job shape_key(const struct sched_job *j)
{
    struct sched_job k = *j;
    k.id = 0;
    k.submit_ms = 0;
    k.project = k.model = 0;
    k.checkpointable = false;
    return k;
}

/* One pass over the queue: each job's id goes into the id map (a second
 * occurrence is an error of the call), and each job gets its shape
 * (p->jshape), one per distinct request. The shape table grows with the
 * shapes, not the queue, so it stays in cache. */
static int find_shapes(struct pass *p)
{
    size_t nq = p->q->njobs, size = 1024;
    uint32_t maxg = 1;
    uint32_t *table = malloc(size * sizeof(*table));
    if (!table)
        return GPO_ENOMEM;
    for (size_t k = 0; k < size; k++)
        table[k] = SCHED_NONE;
    p->nshapes = 0;
    for (size_t i = 0; i < nq; i++) {
        const struct sched_job *j = &p->q->jobs[i];
        if (idmap_put(&p->ids, j->id, (uint32_t)i)) {
            free(table);
            return GPO_EINVAL;
        }
        struct sched_job key = shape_key(j);
        uint64_t hash = shape_hash(&key, (uint32_t)key.time_limit_ms);
        uint32_t s_before = p->nshapes;
        for (size_t h = hash & (size - 1);; h = (h + 1) & (size - 1)) {
            uint32_t s = table[h];
            if (s == SCHED_NONE) {
                s = p->nshapes++;
                memset(&p->shapes_of[s], 0, sizeof(p->shapes_of[s]));
                p->shapes_of[s].key = key;
                p->shapes_of[s].hash = hash;
                p->shapes_of[s].team = key.team;
                p->shapes_of[s].first = (uint32_t)i;
                table[h] = s;
                p->jshape[i] = s;
                break;
            }
            if (p->shapes_of[s].hash == hash &&
                memcmp(&p->shapes_of[s].key, &key, sizeof(key)) == 0) {
                p->jshape[i] = s;
                break;
            }
        }
        if (p->nshapes == s_before + 1) {
            int32_t g = j->gpus; /* a new shape: the placement scratch must hold it */
            if (g > 0 && (uint32_t)g > maxg && g <= (int32_t)SCHED_MAX_GPUS_PER_NODE * 1024)
                maxg = (uint32_t)g;
        }
        if (2 * p->nshapes > size) {
            /* Keep the table at most half full: double it and re-insert. */
            uint32_t *bigger = malloc(2 * size * sizeof(*bigger));
            if (!bigger) {
                free(table);
                return GPO_ENOMEM;
            }
            size *= 2;
            for (size_t k = 0; k < size; k++)
                bigger[k] = SCHED_NONE;
            for (uint32_t s = 0; s < p->nshapes; s++) {
                size_t h = p->shapes_of[s].hash & (size - 1);
                while (bigger[h] != SCHED_NONE)
                    h = (h + 1) & (size - 1);
                bigger[h] = s;
            }
            free(table);
            table = bigger;
        }
    }
    free(table);
    p->place_cap = maxg;
    p->place.nodes = malloc(maxg * sizeof(*p->place.nodes));
    p->place.shares = malloc(maxg * sizeof(*p->place.shares));
    return p->place.nodes && p->place.shares ? 0 : GPO_ENOMEM;
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
        return GPO_ELIMIT;
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

static int run_pass(struct pass *p)
{
    const struct sched_queue *q = p->q;
    const struct sched_running_set *run = p->run;
    size_t nq = q->njobs, nr = run->njobs;
    int err;
    uint64_t bad_job = 0;

    if ((err = view_init(&p->view, p->c, run, p->pol->packing, &bad_job)))
        return err;
    if ((err = idmap_init(&p->ids, nq + nr)))
        return err;
    for (size_t r = 0; r < nr; r++) {
        if (idmap_put(&p->ids, run->jobs[r].job->id, (uint32_t)r | IDMAP_RUNNING))
            return GPO_EINVAL;
    }
    if ((err = quota_init(&p->quota, p->c, &p->view, run)) ||
        (err = order_init(&p->order, p->c, &p->view, run, p->pol, p->st, p->now)) ||
        (err = pass_alloc(p)) || (err = find_shapes(p)) || (err = compute_attained(p)))
        return err;

    for (size_t r = 0; r < nr; r++) {
        const struct sched_running *rj = &run->jobs[r];
        if (rj->preempting) {
            p->rflag[r] |= R_LEAVING;
            p->leaving[p->nleaving++] = (uint32_t)r;
        }
        p->rel[p->nrel++] = (struct backfill_release){
            rj->preempting ? p->now + p->pol->preempt_grace_ms : job_end(p, rj->job, rj->start_ms),
            rj->job->id, &rj->alloc};
        if (p->rlasq)
            p->rlasq[r] = (uint8_t)order_las_queue(
                p->pol, state_find_attained(p->attained, p->nattained, rj->job->id)->gpu_ms);
    }

    /* Validate, and find which jobs can be considered at all. */
    uint32_t *cands = malloc((nq ? nq : 1) * sizeof(*cands));
    uint32_t *cshapes = malloc((nq ? nq : 1) * sizeof(*cshapes));
    uint32_t *ready = malloc((p->st->nclaims ? p->st->nclaims : 1) * sizeof(*ready));
    if (!cands || !ready || !cshapes) {
        free(cands);
        free(cshapes);
        free(ready);
        return GPO_ENOMEM;
    }
    size_t ncands = 0, nready = 0;
    size_t cells = (size_t)p->nshapes * p->view.ngroups;
    if (cells && cells <= (1u << 22)) {
        p->shape_allowed = malloc(cells * sizeof(*p->shape_allowed));
        p->shape_eligible = malloc(cells * sizeof(*p->shape_eligible));
        p->shape_headroom = malloc(cells * sizeof(*p->shape_headroom));
        if (!p->shape_allowed || !p->shape_eligible || !p->shape_headroom) {
            err = GPO_ENOMEM;
            goto out;
        }
    }
    for (size_t i = 0; i < nq; i++) {
        struct jshape *sh = &p->shapes_of[p->jshape[i]];
        if (sh->first == i) {
            sh->valid = validate_job(p, (uint32_t)i);
            sh->fit0 = (p->jflag[i] & J_FIT0) != 0;
            sh->pot = sh->valid && p->pol->preemption && may_preempt(p, &q->jobs[i]);
        } else if (!sh->valid) {
            p->jwait[i] = p->jwait[sh->first];
            p->jwait[i].job = q->jobs[i].id;
            p->jflag[i] |= J_DONE;
        } else if (sh->fit0) {
            p->jflag[i] |= J_FIT0;
        }
        if (!sh->valid)
            continue;
        if (p->lasq) {
            const struct sched_attained *a =
                state_find_attained(p->attained, p->nattained, q->jobs[i].id);
            p->lasq[i] = (uint8_t)order_las_queue(p->pol, a ? a->gpu_ms : 0);
        }
    }
    if ((err = carry_claims(p, ready, &nready)))
        goto out;
    /* Jobs that cannot fit the free capacity now and cannot preempt cannot start in this
     * pass, whatever their rank; only the first such job of each (team, class, pool) is
     * still ranked, since it may be the one that earns a pool's reservation. */
    size_t nkey = (size_t)p->c->nteams * p->c->nclasses * (p->c->npools + 1);
    uint32_t *first = nkey <= (1u << 20) ? malloc(nkey * sizeof(*first)) : NULL;
    if (first) {
        for (size_t k = 0; k < nkey; k++)
            first[k] = SCHED_NONE;
    }
    for (size_t i = 0; i < nq; i++) {
        const struct sched_job *j = &q->jobs[i];
        if (p->jflag[i] & J_DONE)
            continue;
        if (p->shapes_of[p->jshape[i]].pot)
            p->jflag[i] |= J_POT;
        if ((p->jflag[i] & (J_FIT0 | J_POT)) || !first) {
            p->jflag[i] |= J_CAND;
            continue;
        }
        size_t k = ((size_t)j->team * p->c->nclasses + j->prio) * (p->c->npools + 1) +
                   (j->pool == SCHED_ANY ? p->c->npools : j->pool);
        uint32_t f = first[k];
        const struct sched_job *fj = f == SCHED_NONE ? NULL : &q->jobs[f];
        bool before = !fj || (p->lasq && p->lasq[i] != p->lasq[f] ? p->lasq[i] < p->lasq[f]
                              : j->submit_ms != fj->submit_ms     ? j->submit_ms < fj->submit_ms
                                                                  : j->id < fj->id);
        if (before)
            first[k] = (uint32_t)i;
    }
    for (size_t k = 0; first && k < nkey; k++) {
        if (first[k] != SCHED_NONE)
            p->jflag[first[k]] |= J_CAND;
    }
    free(first);
    for (size_t i = 0; i < nq; i++) {
        if ((p->jflag[i] & J_CAND) && !(p->jflag[i] & J_DONE))
            cands[ncands++] = (uint32_t)i;
    }

    /* Preemptors whose victims have left go first: the room is theirs. */
    for (size_t k = 0; k < nready; k++) {
        uint32_t i = ready[k];
        if (p->jflag[i] & J_DONE)
            continue;
        p->jflag[i] |= J_CAND;
        if ((err = process_job(p, i)))
            goto out;
    }
    if ((err = order_begin(&p->order, q->jobs, cands, ncands, p->lasq, within_guarantee, p)))
        goto out;
    /* Rank candidates one at a time; now and then, ask whether what is left
     * is frozen (see shape_inert), and if so settle it in one sweep: on a full
     * cluster that is most of the queue. */
    size_t ncshapes = 0, since_check = 0, check_every;
    for (size_t k = 0; k < ncands; k++) {
        struct jshape *sh = &p->shapes_of[p->jshape[cands[k]]];
        if (!sh->remaining++)
            cshapes[ncshapes++] = p->jshape[cands[k]];
    }
    check_every = ncshapes > 256 ? ncshapes : 256;
    for (uint32_t i; (i = order_next(&p->order)) != SCHED_NONE;) {
        if (p->jflag[i] & J_DONE)
            continue;
        p->shapes_of[p->jshape[i]].remaining--;
        if ((err = process_job(p, i)))
            goto out;
        if (++since_check >= check_every) {
            since_check = 0;
            if (frozen(p, cshapes, ncshapes))
                break; /* the rest get their shape's wait in the sweep below */
        }
    }

    struct sched_result *r = p->res;
    if (p->view.novercommitted) {
        r->overcommitted = arena_alloc(r, p->view.novercommitted * sizeof(*r->overcommitted));
        if (!r->overcommitted) {
            err = GPO_ENOMEM;
            goto out;
        }
        for (uint32_t k = 0; k < p->view.novercommitted; k++)
            r->overcommitted[k] = run->jobs[p->view.overcommitted[k]].job->id;
        r->novercommitted = p->view.novercommitted;
    }
    /* One sweep in queue order: the waits of jobs not reached by the ordered
     * loop, and the waits squeezed together over started jobs. */
    for (size_t i = 0; i < nq; i++) {
        if (p->jflag[i] & J_STARTED)
            continue;
        if (!(p->jflag[i] & J_DONE)) {
            r->waits[r->nwaits] = unranked_wait(p, (uint32_t)i);
            r->decisions++;
        } else if (r->nwaits != i) {
            r->waits[r->nwaits] = r->waits[i];
        }
        r->nwaits++;
    }
    err = collect_reserves(p);
out:
    free(cands);
    free(cshapes);
    free(ready);
    return err;
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

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "core/evict.h"
#include "base/vec.h"
#include "base/banned.h"

/* What may be evicted for one pending job, worked out once per job. */
struct victim_rule {
    int32_t order;    /* the job's class order */
    bool may_preempt; /* its class may evict lower ones */
    uint32_t team;
    bool las;       /* LAS: more-served checkpointable jobs */
    bool team_only; /* within-team LAS: of the job's own team only */
    const struct sched_job *job;
    uint8_t lasq;
};

/* Pending job j's LAS queue (0 outside LAS). */
static uint8_t job_lasq(const struct pass *p, const struct sched_job *j)
{
    return p->lasq ? p->lasq[j - p->q->jobs] : 0;
}

static void victim_rule_init(struct pass *p, const struct sched_job *j, struct victim_rule *ret)
{
    const struct sched_prio_class *cls = &p->c->classes[j->prio];
    *ret = (struct victim_rule){.order = cls->order,
                                .may_preempt = cls->may_preempt,
                                .team = j->team,
                                .las = p->lasq != NULL,
                                .team_only = order_las_team_only(p->pol),
                                .job = j,
                                .lasq = job_lasq(p, j)};
    /* Reclaim needs the job to fit within its team's guarantee in the victim's group. */
    for (uint32_t g = 0; g < p->view.ngroups; g++)
        p->within_g[g] = p->eligible[g] && quota_within_guarantee(&p->quota, j->team, g,
                                                                  view_job_milli(&p->view, j, g));
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
    if (rule->las && (p->rbits[r] & R_CKPT) && vo <= rule->order && p->rlasq[r] > rule->lasq &&
        (!rule->team_only || vteam == rule->team) &&
        (p->pol->las_evict_larger || p->rmilli[r] <= view_job_milli(&p->view, rule->job, g))) {
        /* Never a job larger than the one it makes room for (unless the policy
         * says so): that would strand GPUs and requeue work that is harder to
         * place than what it admits. */
        *ret_why = SCHED_PREEMPT_LAS;
        return true;
    }
    return false;
}

enum { KIND_MIG = 5 };

static uint8_t job_kind(const struct sched_job *j)
{
    if (j->mig_types)
        return KIND_MIG;
    return j->gpus > 0 ? (j->multi_node ? 2 : 1) : (j->gpu_milli > 0 ? 3 : 4);
}

/* A MIG request's size is its profiles and memory as one key: one that is
 * not the same request needs its own plan. */
static int64_t job_size(const struct sched_job *j)
{
    if (j->mig_types) {
        int64_t k = j->mig_types;
        for (unsigned t = 0; t < MIG_NTYPES; t++)
            k |= (int64_t)j->mig_profile[t] << (4 + 4 * t);
        return k | j->gpu_mem_mib << 20;
    }
    return j->gpus > 0 ? j->gpus : j->gpu_milli > 0 ? j->gpu_milli : j->gpu_mem_mib;
}

/*
 * A failed plan stands for later jobs that could evict no more and need no
 * less: of the same team, class, pool, type and kind, and no smaller. Under
 * LAS what a job may evict grows with its size (never a job larger than it,
 * unless las_evict_larger) and shrinks as its queue rises: there it stands
 * only for jobs of the same size in the same queue or above.
 */
bool evict_failed_before(const struct pass *p, const struct sched_job *j)
{
    if (sched_job_shaped(j))
        return false; /* its nodes, features and wholeness are not in the memo's key */
    uint8_t lasq = job_lasq(p, j);
    for (size_t f = 0; f < p->nfails; f++) {
        const struct fail *x = &p->fails[f];
        if (x->team != j->team || x->prio != j->prio || x->pool != j->pool ||
            x->gpu_type != j->gpu_type || x->kind != job_kind(j))
            continue;
        bool same_only = p->lasq || x->kind == KIND_MIG;
        if (same_only ? x->size == job_size(j) && x->lasq <= lasq : x->size <= job_size(j))
            return true;
    }
    return false;
}

void evict_note_failure(struct pass *p, const struct sched_job *j)
{
    if (p->nfails < MAX_FAILS && !sched_job_shaped(j))
        p->fails[p->nfails++] = (struct fail){j->team,     j->prio,        j->pool,    j->gpu_type,
                                              job_kind(j), job_lasq(p, j), job_size(j)};
}

/* Records a claim: `victims` leave for `job`, which was planned onto `nodes`. */
int evict_add_claim(struct pass *p, uint64_t job, const uint64_t *victims, uint32_t n,
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

/* Could evicting everything the job may evict, plus what is free, add up to
 * its size in some group? A necessary condition, from per-group sums, that
 * spares most hopeless jobs the scan of the running set. */
/* Milli held in group g by checkpointable jobs in a LAS queue above job j's
 * (of j's team only under within-team LAS): what LAS may evict for it there. */
static int64_t las_evictable(const struct pass *p, const struct sched_job *j, uint32_t g)
{
    if (!p->lasq)
        return 0;
    uint32_t q0 = p->lasq[j - p->q->jobs] + 1u;
    bool team_only = order_las_team_only(p->pol);
    int64_t have = 0;
    for (uint32_t t = team_only ? j->team : 0; t < p->c->nteams; t++) {
        const int64_t *m = &p->las_milli[((size_t)t * p->view.ngroups + g) * SCHED_LAS_MAX_QUEUES];
        for (uint32_t q = q0; q < SCHED_LAS_MAX_QUEUES; q++)
            have += m[q];
        if (team_only)
            break;
    }
    return have;
}

bool evict_may_suffice(struct pass *p, const struct sched_job *j)
{
    const struct sched_prio_class *cls = &p->c->classes[j->prio];
    for (uint32_t g = 0; g < p->view.ngroups; g++) {
        if (!p->eligible[g])
            continue;
        const struct view_group *grp = &p->view.groups[g];
        view_group_refresh(&p->view, g);
        int64_t need = view_job_milli(&p->view, j, g);
        /* An instance is not made of free whole GPUs: only evictions free one. */
        int64_t have = sched_job_mig_only(j) ? 0 : (int64_t)grp->sum_free_whole * SCHED_MILLI;
        if (cls->may_preempt) {
            for (uint32_t k = 0; k < (uint32_t)p->rank[j->prio]; k++)
                have += p->rank_milli[(size_t)g * p->nranks + k];
        }
        have += las_evictable(p, j, g);
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

/* preempt_next_fn over the running set, least work lost first: the jobs the
 * rule lets go, each recorded in p->pbuf / p->pwhy as it is handed out. A
 * reclaim takes a team's borrowed work only down to its guarantee: the
 * team's excess is a budget the handed-out jobs draw on. */
struct victim_iter {
    struct pass *p;
    const struct victim_rule *rule;
    size_t pos, n;
};

static bool next_victim(void *ctx, struct preempt_cand *ret)
{
    struct victim_iter *it = ctx;
    struct pass *p = it->p;
    while (it->pos < p->npcand) {
        const struct preempt_cand *c = &p->pcand[it->pos++];
        enum sched_preempt_why why;
        if ((p->rflag[c->run] & R_LEAVING) || !victim_ok(p, it->rule, c->run, &why))
            continue;
        if (why == SCHED_PREEMPT_RECLAIM) {
            size_t q = (size_t)p->rteam[c->run] * p->quota.ngroups + p->rgroup[c->run];
            if (p->excess[q] < p->rmilli[c->run])
                continue;
            p->excess[q] -= p->rmilli[c->run];
        }
        p->pwhy[it->n] = (uint8_t)why;
        p->pbuf[it->n++] = *c;
        *ret = *c;
        return true;
    }
    return false;
}

int evict_record(struct pass *p, const struct sched_job *j, uint32_t run, int64_t lost_gpu_ms,
                 enum sched_preempt_why why)
{
    struct sched_result *r = p->res;
    if (vec_grow((void **)&r->preempts, &r->preempts_cap, r->npreempts + 1, sizeof(*r->preempts)))
        return GPO_ENOMEM;
    r->preempts[r->npreempts++] = (struct sched_preempt){.job = p->run->jobs[run].job->id,
                                                         .for_job = j->id,
                                                         .grace_ms = p->pol->preempt_grace_ms,
                                                         .lost_gpu_ms = lost_gpu_ms,
                                                         .why = why};
    p->rflag[run] |= R_LEAVING;
    p->leaving[p->nleaving++] = run;
    uint32_t vg = p->rgroup[run];
    if (vg == SCHED_NONE)
        return 0;
    if (why == SCHED_PREEMPT_RECLAIM)
        p->excess[(size_t)p->rteam[run] * p->quota.ngroups + vg] -= p->rmilli[run];
    p->rank_milli[(size_t)vg * p->nranks + p->rank[p->run->jobs[run].job->prio]] -= p->rmilli[run];
    if (p->las_milli && (p->rbits[run] & R_CKPT))
        p->las_milli[((size_t)p->rteam[run] * p->view.ngroups + vg) * SCHED_LAS_MAX_QUEUES +
                     p->rlasq[run]] -= p->rmilli[run];
    return 0;
}

int evict_try(struct pass *p, uint32_t i, int64_t end)
{
    const struct sched_job *j = &p->q->jobs[i];
    if (p->nplans >= MAX_PLANS || !evict_may_suffice(p, j))
        return 0;
    p->nplans++;
    if (!p->pcand_ready) {
        for (size_t k = 0; k < p->run->njobs; k++) {
            p->pcand[k] = (struct preempt_cand){(uint32_t)k, p->run->jobs[k].job->id,
                                                preempt_lost_gpu_ms(&p->run->jobs[k], p->now)};
        }
        if (preempt_sort(p->pcand, p->run->njobs))
            return GPO_ENOMEM;
        p->npcand = p->run->njobs;
        p->pcand_ready = true;
    }
    struct victim_rule rule;
    victim_rule_init(p, j, &rule);
    struct victim_iter it = {.p = p, .rule = &rule};
    size_t nv = 0, given = 0;
    int found = preempt_plan(&p->view, p->run, p->leaving, p->nleaving, j, p->allowed, end,
                             next_victim, &it, p->victims, &nv, &given, &p->place, &p->undo);
    /* Undo the reclaim budget: the plan may keep fewer, and the next job starts afresh. */
    for (size_t k = 0; k < given; k++) {
        uint32_t run = p->pbuf[k].run;
        if (p->pwhy[k] == SCHED_PREEMPT_RECLAIM)
            p->excess[(size_t)p->rteam[run] * p->quota.ngroups + p->rgroup[run]] += p->rmilli[run];
    }
    if (found <= 0)
        return found;
    if (!nv)
        return 0; /* room comes from jobs already leaving: nothing new to evict */
    uint64_t ids[SCHED_CLAIM_VICTIMS];
    for (size_t k = 0; k < nv; k++) {
        const struct preempt_cand *pc = &p->pbuf[p->victims[k]];
        int err = evict_record(p, j, pc->run, pc->lost_gpu_ms,
                               (enum sched_preempt_why)p->pwhy[p->victims[k]]);
        if (err)
            return err;
        if (k < SCHED_CLAIM_VICTIMS)
            ids[k] = pc->job;
    }
    uint32_t nodes[SCHED_CLAIM_NODES], nn = 0;
    for (uint32_t k = 0; k < p->place.nnodes && nn < SCHED_CLAIM_NODES; k++)
        nodes[nn++] = p->place.nodes[k].node;
    int err = evict_add_claim(p, j->id, ids,
                              (uint32_t)(nv < SCHED_CLAIM_VICTIMS ? nv : SCHED_CLAIM_VICTIMS),
                              nodes, nn, p->now);
    if (err)
        return err;
    int hr = pass_hold_place(p, j->id, p->now + p->pol->preempt_grace_ms);
    return hr < 0 ? hr : 1;
}

int64_t evict_las_want(const struct sched_job *j)
{
    return j->gpus > 0        ? (int64_t)j->gpus * SCHED_MILLI
           : j->gpu_milli > 0 ? j->gpu_milli
                              : SCHED_MILLI; /* by memory: at most one GPU */
}

bool evict_may_preempt_las(const struct pass *p, const struct sched_job *j, uint32_t lasq)
{
    if (!p->las_min_victim || lasq >= SCHED_LAS_MAX_QUEUES)
        return false;
    int64_t want = p->pol->las_evict_larger ? INT64_MAX - 1 : evict_las_want(j);
    size_t k = order_las_team_only(p->pol) ? j->team : p->c->nteams;
    return p->las_min_victim[k * SCHED_LAS_MAX_QUEUES + lasq] <= want;
}

bool evict_may_preempt_other(const struct pass *p, const struct sched_job *j)
{
    const struct sched_cluster *c = p->c;
    if (c->classes[j->prio].may_preempt && p->rank[j->prio] > 0)
        return true;
    /* Reclaim: the team has a guarantee left somewhere the job could go. */
    for (uint32_t g = 0; g < p->view.ngroups; g++) {
        size_t k = (size_t)j->team * p->quota.ngroups + g;
        if (p->quota.guar[k] > p->quota.used[k] && view_group_eligible(&p->view, j, g))
            return true;
    }
    return false;
}

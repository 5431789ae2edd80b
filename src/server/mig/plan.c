/*
 * plan.c - one planning turn per scheduling pass (mig.h): the MIG GPUs as
 * the core's planner sees them, the pending demand, the core's plan for
 * dynamic groups, the plan towards a configured layout for static ones,
 * and the attempts whose instance went away before they started.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/vec.h"
#include "server/mig/mig_int.h"
#include "server/sched/sched.h"
#include "server/srv.h"
#include "base/banned.h"

/* ---- the pass's view ---------------------------------------------------------- */

/* The view's GPU `uuid` of node `node`, or SCHED_NONE. The view's nodes
 * are the cluster's, in its order: by name. */
static uint32_t view_gpu(const struct cluster_view *view, const char *node, const char *uuid)
{
    uint32_t lo = 0, hi = view->c.nnodes;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(view->nodes[mid].name, node);
        if (c == 0) {
            const struct sched_node *n = &view->nodes[mid];
            for (uint32_t g = n->gpu_first; g < n->gpu_first + n->ngpus; g++)
                if (strcmp(view->gpu_uuid[g], uuid) == 0)
                    return g;
            return SCHED_NONE;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return SCHED_NONE;
}

void migctl_view(struct server *s, struct cluster_view *view)
{
    const struct migctl *m = s->mig;
    /* Until a node's first heartbeat (since this controller started) its
     * instances are its stored registration's, maybe stale: none offered. */
    for (uint32_t g = 0; g < view->c.ngpus; g++) {
        if (!view->gpus[g].mig_n)
            continue; /* no instance to hold back: no lookup on the pass's path */
        const struct node_rt *rt = nodes_find(&s->nodes, view->nodes[view->gpu_node[g]].name);
        if (!rt || !rt->has_sample)
            view->gpus[g].mig_n = 0;
    }
    for (size_t k = 0; m && k < m->nplans; k++) {
        const struct migctl_plan *p = &m->plans[k];
        uint32_t g = view_gpu(view, p->node, p->uuid);
        if (g == SCHED_NONE)
            continue;
        struct sched_gpu *sg = &view->gpus[g];
        uint8_t out = 0;
        for (uint8_t i = 0; i < sg->mig_n; i++) {
            bool gone = false;
            for (uint8_t d = 0; d < p->core.ndestroy && !gone; d++)
                gone = p->core.destroy[d].start == sg->mig[i].start &&
                       p->core.destroy[d].profile == sg->mig[i].profile;
            if (!gone)
                sg->mig[out++] = sg->mig[i];
        }
        sg->mig_n = out;
    }
}

/* ---- the GPUs ------------------------------------------------------------------ */

/* A MIG GPU of the turn: the core's form, and where it is. */
struct turn_gpu {
    struct mig_gpu mg;
    const struct cluster_node *node;
    const struct cluster_gpu *gpu;
    const struct cluster_mig *setting;
};

/* GPU g of node n as the planner sees it; its damping state kept in st.
 * False where the GPU is no MIG GPU the planner can work with. */
static bool turn_gpu_of(struct server *s, const struct migctl_holders *held,
                        const struct cluster_node *n, const struct cluster_gpu *g, int64_t now_ms,
                        struct turn_gpu *ret)
{
    const struct mig_type *t = g->mig_enabled ? mig_type_find(g->gpu_type) : NULL;
    struct migctl_gpu *st = t ? migctl_gpu_get(s->mig, n->name, g->uuid) : NULL;
    if (!st)
        return false; /* no MIG GPU (or out of memory: left alone this turn) */
    const struct node_rt *rt = nodes_find(&s->nodes, n->name);
    const struct migctl_plan *inflight = migctl_plan_find(s->mig, n->name, g->uuid);
    bool frozen = inflight || !rt || rt->hold || rt->lost || nodes_is_dirty(rt, g->uuid) ||
                  g->mig_pending != g->mig_enabled || (st->retry_ms && now_ms < st->retry_ms);
    struct mig_gpu mg = {.type = t, .changed_ms = st->changed_ms};
    uint8_t seen = 0;
    for (size_t k = 0; k < g->nmig && mg.n < MIG_MAX_INSTANCES; k++) {
        const struct cluster_mig_instance *mi = &g->mig[k];
        int p = mi->profile ? mig_profile_lookup(t, mi->profile, NULL, 0) : GPO_ENOENT;
        if (p < 0 || !mi->uuid || mi->ci_id < 0 || mi->start >= MIG_SLOTS) {
            frozen = true; /* slots the planner cannot account for, or no MIG device yet */
            continue;
        }
        struct mig_instance in = {.profile = (uint8_t)p,
                                  .start = (uint8_t)mi->start,
                                  .busy =
                                      migctl_holders_find(held, n->name, g->uuid, mi->start) != 0,
                                  .idle_since_ms = now_ms};
        for (uint8_t i = 0; i < st->n; i++)
            if (st->inst[i].start == in.start && st->inst[i].profile == in.profile && !in.busy)
                in.idle_since_ms = st->inst[i].idle_since_ms;
        /* What a plan in flight destroys serves no demand (core/mig.h). */
        for (uint8_t d = 0; inflight && d < inflight->core.ndestroy; d++)
            if (inflight->core.destroy[d].start == in.start &&
                inflight->core.destroy[d].profile == in.profile)
                in.busy = true;
        mg.inst[mg.n++] = in;
    }
    /* What was seen now: a new instance is idle since now, a busy one
     * becomes idle when its job's end is first seen. */
    for (uint8_t i = 0; i < mg.n; i++) {
        st->inst[seen].start = mg.inst[i].start;
        st->inst[seen].profile = mg.inst[i].profile;
        st->inst[seen++].idle_since_ms = mg.inst[i].idle_since_ms;
    }
    st->n = seen;
    mg.frozen = frozen;
    *ret = (struct turn_gpu){.mg = mg, .node = n, .gpu = g};
    return true;
}

/* ---- static layouts ------------------------------------------------------------- */

static uint8_t slots_of(const struct mig_type *t, uint8_t profile, uint8_t start)
{
    struct mig_instance one = {.profile = profile, .start = start};
    return mig_layout_slots(t, &one, 1);
}

/* The layout setting `cm` means on type t into target (room for
 * MIG_MAX_INSTANCES): 0, 1 (MIG off: not ours to do), or GPO_* with err. */
static int static_target(const struct mig_type *t, const struct cluster_mig *cm,
                         struct mig_instance *target, size_t *nt, char *err, size_t errlen)
{
    bool enabled = true;
    int rc = cluster_mig_layout(cm, t, target, nt, &enabled, err, errlen);
    return rc ? rc : enabled ? 0 : 1;
}

void migctl_static_plan(const struct mig_gpu *mg, const struct mig_instance *target, size_t nt,
                        struct mig_gpu_plan *ret)
{
    const struct mig_type *t = mg->type;
    memset(ret, 0, sizeof(*ret));
    bool in_target[MIG_MAX_INSTANCES] = {false}, present[MIG_MAX_INSTANCES] = {false};
    uint8_t blocked = 0, target_slots = 0; /* slots of busy or kept instances; of the target */
    for (size_t k = 0; k < nt; k++)
        target_slots |= slots_of(t, target[k].profile, target[k].start);
    for (uint8_t i = 0; i < mg->n; i++) {
        for (size_t k = 0; k < nt; k++)
            if (target[k].profile == mg->inst[i].profile && target[k].start == mg->inst[i].start)
                in_target[i] = present[k] = true;
        if (in_target[i] || mg->inst[i].busy)
            blocked |= slots_of(t, mg->inst[i].profile, mg->inst[i].start);
    }
    uint8_t making = 0;
    for (size_t k = 0; k < nt; k++) {
        uint8_t sl = slots_of(t, target[k].profile, target[k].start);
        if (present[k] || (sl & blocked))
            continue;
        ret->create[ret->ncreate].profile = target[k].profile;
        ret->create[ret->ncreate++].start = target[k].start;
        making |= sl;
    }
    for (uint8_t i = 0; i < mg->n; i++) {
        uint8_t sl = slots_of(t, mg->inst[i].profile, mg->inst[i].start);
        if (in_target[i] || mg->inst[i].busy || !((sl & making) || !(sl & target_slots)))
            continue;
        ret->destroy[ret->ndestroy].instance = i;
        ret->destroy[ret->ndestroy].profile = mg->inst[i].profile;
        ret->destroy[ret->ndestroy++].start = mg->inst[i].start;
    }
}

static void static_turn(struct server *s, const struct turn_gpu *tg, int64_t now_ms)
{
    char err[200];
    struct mig_instance target[MIG_MAX_INSTANCES];
    size_t nt = 0;
    int rc = static_target(tg->mg.type, tg->setting, target, &nt, err, sizeof(err));
    struct migctl_gpu *st = migctl_gpu_get(s->mig, tg->node->name, tg->gpu->uuid);
    if (rc < 0 && st && !st->layout_logged) {
        st->layout_logged = true;
        fprintf(stderr, "gpuorch server: node %s GPU %s: static MIG layout not applied: %s\n",
                tg->node->name, tg->gpu->uuid, err);
    }
    if (rc || tg->mg.frozen)
        return;
    struct mig_gpu_plan plan;
    migctl_static_plan(&tg->mg, target, nt, &plan);
    char why[80];
    snprintf(why, sizeof(why), "static %s", tg->setting->layout ? tg->setting->layout : "counts");
    if ((plan.ndestroy || plan.ncreate) &&
        migctl_plan_add(s, tg->node->name, tg->gpu, tg->mg.type, &plan, why, now_ms))
        fprintf(stderr, "gpuorch server: MIG plan not made: out of memory\n");
}

/* ---- dynamic groups ------------------------------------------------------------- */

static struct migctl_group *group_get(struct migctl *m, const char *key)
{
    for (size_t k = 0; k < m->ngroups; k++)
        if (strcmp(m->groups[k].key, key) == 0)
            return &m->groups[k];
    if (vec_grow((void **)&m->groups, &m->groups_cap, m->ngroups + 1, sizeof(*m->groups)))
        return NULL;
    struct migctl_group *g = &m->groups[m->ngroups++];
    snprintf(g->key, sizeof(g->key), "%s", key);
    mig_plan_state_init(&g->st);
    return g;
}

/* The pass's pending MIG demand (core/sched.h's sched_mig_demand), all
 * pools: *ret a new array of *ret_n. */
static int demand_all(const struct cluster_view *view, const struct sched_job *queue, size_t nqueue,
                      const struct sched_result *res, struct sched_mig_demand **ret, size_t *ret_n)
{
    size_t cap = res->nwaits + 1, n = 0;
    struct sched_mig_demand *v = calloc(cap, sizeof(*v));
    if (!v)
        return GPO_ENOMEM;
    struct sched_queue q = {(struct sched_job *)queue, nqueue};
    int rc = sched_mig_demand(&view->c, &q, res, v, cap, &n);
    if (rc) {
        free(v);
        return rc;
    }
    *ret = v;
    *ret_n = n;
    return 0;
}

/* The demand of pool `pool` (a view index) out of all[0 .. n), in order. */
static size_t demand_of(const struct sched_mig_demand *all, size_t n, uint32_t pool,
                        struct mig_demand *ret)
{
    size_t out = 0;
    for (size_t k = 0; k < n; k++)
        if (all[k].pool == pool)
            ret[out++] = all[k].demand;
    return out;
}

/* The GPUs of tg[0 .. n) that follow setting `cm` (one group): the core's plan. */
static void dynamic_turn(struct server *s, const struct cluster_view *view,
                         const struct sched_mig_demand *all, size_t nall, struct turn_gpu *tg,
                         size_t n, const char *key, const char *pool, int64_t now_ms)
{
    const struct cluster_mig *cm = tg[0].setting;
    struct mig_gpu *gpus = calloc(n, sizeof(*gpus));
    struct mig_gpu_plan *plans = calloc(n, sizeof(*plans));
    struct mig_demand *demand = calloc(nall ? nall : 1, sizeof(*demand));
    int64_t pi = sched_pool_find(&view->c, pool);
    struct migctl_group *grp = group_get(s->mig, key);
    int rc = gpus && plans && demand && grp ? 0 : GPO_ENOMEM;
    size_t nd = !rc && pi >= 0 ? demand_of(all, nall, (uint32_t)pi, demand) : 0;
    for (size_t k = 0; !rc && k < n; k++)
        gpus[k] = tg[k].mg;
    struct mig_plan_spec spec = {.settle_ms = cm->settle_ms,
                                 .hold_ms = cm->hold_ms,
                                 .min_interval_ms = cm->min_interval_ms,
                                 .keep_free = cm->keep_free,
                                 .max_repartitions = cm->max_repartitions};
    size_t changed = 0;
    if (!rc && (rc = mig_plan(&grp->st, &spec, now_ms, gpus, n, demand, nd, plans, &changed)) != 0)
        fprintf(stderr, "gpuorch server: MIG planner for %s: %s\n", key, gpo_strerror(rc));
    for (size_t k = 0; !rc && changed && k < n; k++) {
        if ((plans[k].ndestroy || plans[k].ncreate) &&
            migctl_plan_add(s, tg[k].node->name, tg[k].gpu, tg[k].mg.type, &plans[k], "dynamic",
                            now_ms))
            rc = GPO_ENOMEM;
    }
    if (rc == GPO_ENOMEM)
        fprintf(stderr, "gpuorch server: MIG plans for %s not made: out of memory\n", key);
    free(gpus);
    free(plans);
    free(demand);
}

/* ---- attempts whose instance went away ---------------------------------------- */

/* Whether node n still reports the MIG instance share sh names; until the
 * node's first heartbeat since this controller started, its stored
 * instances may be stale: taken as there. */
static bool instance_there(const struct server *s, const struct attempt_share *sh)
{
    const struct node_rt *rt = nodes_find(&s->nodes, sh->node);
    if (rt && !rt->has_sample)
        return true;
    const struct cluster_node *n = cluster_node_get(&s->cluster, sh->node);
    for (size_t g = 0; n && g < n->ngpus; g++) {
        const struct cluster_gpu *gpu = &n->gpus[g];
        if (strcmp(gpu->uuid, sh->uuid) != 0)
            continue;
        for (size_t k = 0; k < gpu->nmig; k++)
            if (gpu->mig[k].start == sh->mig_start && gpu->mig[k].uuid && gpu->mig[k].profile &&
                strcmp(gpu->mig[k].profile, sh->mig_profile) == 0)
                return true;
    }
    return false;
}

const struct attempt_share *migctl_share_gone(const struct server *s, const struct attempt *a)
{
    for (size_t k = 0; k < a->nshares; k++)
        if (a->shares[k].mig && !instance_there(s, &a->shares[k]))
            return &a->shares[k];
    return NULL;
}

/* Attempts not started yet whose instance is gone end NODE_FAIL (requeued
 * or failed by their retry policy, as on a lost node). */
static void end_orphans(struct server *s, int64_t now_ms)
{
    struct sched_end *ends = NULL;
    size_t n = 0, cap = 0;
    struct store_batch *b = NULL;
    int rc = 0;
    for (size_t k = 0; k < s->jobs.n && !rc; k++) {
        const struct job *j = s->jobs.v[k];
        const struct attempt_share *sh =
            j->att.n && !j->att.running && !j->att.kill ? migctl_share_gone(s, &j->att) : NULL;
        if (!sh)
            continue;
        char why[CLUSTER_HOST_MAX + CLUSTER_UUID_MAX + 96];
        snprintf(why, sizeof(why), "MIG instance %s at slot %u of GPU %s on node %s is gone",
                 sh->mig_profile, sh->mig_start, sh->uuid, sh->node);
        if ((!b && !(b = store_batch_new())) ||
            vec_grow((void **)&ends, &cap, n + 1, sizeof(*ends)) ||
            sched_end_plan(s, j, ATTEMPT_NODE_FAIL, STORE_NULL, STORE_NULL, why, now_ms, &ends[n],
                           b))
            rc = GPO_ENOMEM;
        else
            fprintf(stderr, "gpuorch server: job %" PRId64 " attempt %" PRId64 ": %s\n", j->id,
                    j->att.n, why),
                n++;
    }
    if (rc)
        store_batch_free(b);
    else if (b && sched_commit_unlocked(s, b, "ends of attempts on gone MIG instances") == 0)
        for (size_t k = 0; k < n; k++)
            sched_end_apply(s, &ends[k]);
    free(ends);
}

/* ---- the turn ------------------------------------------------------------------- */

static void drop_stale(struct server *s, int64_t now_ms)
{
    struct migctl *m = s->mig;
    for (size_t k = 0; k < m->nplans;) {
        struct migctl_plan *p = &m->plans[k];
        if (now_ms - p->sent_ms < MIGCTL_PLAN_TIMEOUT_MS) {
            k++;
            continue;
        }
        fprintf(stderr,
                "gpuorch server: MIG plan %" PRIu64 " on node %s GPU %s: no report in %" PRId64
                " s, dropped (the heartbeats' layout stands)\n",
                p->id, p->node, p->uuid, MIGCTL_PLAN_TIMEOUT_MS / 1000);
        char node[CLUSTER_HOST_MAX + 1];
        snprintf(node, sizeof(node), "%s", p->node);
        m->timed_out++;
        migctl_plan_drop(m, p);
        nodes_changed(&s->nodes, node);
    }
}

/* The dynamic GPUs of tg[0 .. n) by group (their setting: a pool's or a
 * node's own), each group in node order: tg is reordered. */
static void dynamic_groups(struct server *s, const struct cluster_view *view,
                           const struct sched_job *queue, size_t nqueue,
                           const struct sched_result *res, struct turn_gpu *tg, size_t n,
                           int64_t now_ms)
{
    struct sched_mig_demand *all = NULL;
    size_t nall = 0;
    int rc = n ? demand_all(view, queue, nqueue, res, &all, &nall) : 0;
    if (rc) {
        fprintf(stderr, "gpuorch server: MIG demand not read: %s\n", gpo_strerror(rc));
        return;
    }
    for (size_t a = 0; a < n;) {
        /* Move the group of tg[a] to tg[a ..), keeping order (an insertion). */
        size_t b = a + 1;
        for (size_t k = a + 1; k < n; k++) {
            if (tg[k].setting != tg[a].setting)
                continue;
            struct turn_gpu x = tg[k];
            memmove(&tg[b + 1], &tg[b], (k - b) * sizeof(*tg));
            tg[b++] = x;
        }
        const struct cluster_node *nd = tg[a].node;
        char key[CLUSTER_HOST_MAX + 8];
        snprintf(key, sizeof(key), "%s %s", nd->mig ? "node" : "pool",
                 nd->mig ? nd->name : nd->pool);
        dynamic_turn(s, view, all, nall, tg + a, b - a, key, nd->pool, now_ms);
        a = b;
    }
    free(all);
}

void migctl_pass(struct server *s, const struct cluster_view *view, const struct sched_job *queue,
                 size_t nqueue, const struct sched_result *res, int64_t now_ms)
{
    if (!s->mig)
        return;
    drop_stale(s, now_ms);
    struct migctl_holders held = {0};
    bool have_held = false; /* built at the first node with a layout to keep */
    size_t ntg = 0, cap = 0;
    struct turn_gpu *tg = NULL;
    int rc = 0;
    for (size_t k = 0; !rc && k < s->cluster.nnodes; k++) {
        const struct cluster_node *n = &s->cluster.nodes[k];
        const struct cluster_mig *cm = migctl_setting(&s->cluster, n);
        if (!cm || cm->mode == CLUSTER_MIG_OFF || n->state != CLUSTER_NODE_UP)
            continue;
        if (!have_held && (rc = migctl_holders_build(s, &held)) != 0)
            break;
        have_held = true;
        for (size_t g = 0; !rc && g < n->ngpus; g++) {
            if (vec_grow((void **)&tg, &cap, ntg + 1, sizeof(*tg))) {
                rc = GPO_ENOMEM;
                break;
            }
            if (!turn_gpu_of(s, &held, n, &n->gpus[g], now_ms, &tg[ntg]))
                continue;
            tg[ntg].setting = cm;
            if (cm->mode == CLUSTER_MIG_STATIC)
                static_turn(s, &tg[ntg], now_ms);
            else
                ntg++;
        }
    }
    if (!rc)
        dynamic_groups(s, view, queue, nqueue, res, tg, ntg, now_ms);
    if (rc)
        fprintf(stderr, "gpuorch server: MIG planning turn skipped: out of memory\n");
    free(tg);
    migctl_holders_release(&held);
    end_orphans(s, now_ms);
}

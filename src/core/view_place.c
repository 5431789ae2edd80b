/*
 * view_place.c - placement on a view (view_place, view_node_fits,
 * view_node_whole_for in view.h): which GPUs and nodes one job gets. The
 * view's state and its bookkeeping are in view.c.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "core/view.h"
#include "base/banned.h"

struct ctx {
    struct view *view;
    const struct sched_job *job;
    int64_t end_ms;
    bool ignore_resv;
    unsigned miss;
    int32_t blocking_resv;
    uint32_t have; /* exact-N gang: the most nodes of one group that could take a member */
    bool shaped;   /* sched_job_shaped: the node-level checks apply */
};

/* May the job use node n, as far as reservations go? Records the blocker. */
static bool resv_allows(struct ctx *x, uint32_t n)
{
    int32_t r = x->view->nodes[n].resv;
    if (r < 0 || x->ignore_resv || x->end_ms <= x->view->resvs[r].start_ms)
        return true;
    x->miss |= VIEW_MISS_RESV;
    if (x->blocking_resv < 0)
        x->blocking_resv = r;
    return false;
}

/* The O(1) group test before a scan; a group whose only room is on nodes
 * reserved from before the job would end is a reservation miss, not a scan. */
static bool group_may_fit(struct ctx *x, uint32_t g)
{
    int32_t r;
    if (view_group_may_fit_by(x->view, x->job, g, x->end_ms, x->ignore_resv, &r))
        return true;
    if (r >= 0) {
        x->miss |= VIEW_MISS_RESV;
        if (x->blocking_resv < 0)
            x->blocking_resv = r;
    }
    return false;
}

/* CPUs or host memory a node must give a gang member holding k of the job's
 * GPUs (a fewest-nodes gang splits them by GPUs; an exact-N gang's even
 * share is member_host_fits'). A whole node's memory (mem_mib 0) is checked
 * apart, by view_node_admits. */
static uint32_t part_cpus(const struct sched_job *job, uint32_t k)
{
    if (job->gpus <= 0 || !job->multi_node)
        return (uint32_t)job->cpus;
    return (uint32_t)(((uint64_t)job->cpus * k + (uint64_t)job->gpus - 1) / (uint64_t)job->gpus);
}

static uint64_t part_mem(const struct sched_job *job, uint32_t k)
{
    if (job->gpus <= 0 || !job->multi_node)
        return (uint64_t)job->mem_mib;
    return ((uint64_t)job->mem_mib * k + (uint64_t)job->gpus - 1) / (uint64_t)job->gpus;
}

/* An exact-N gang's share of CPUs and memory on each of its nodes. */
static uint32_t member_cpus(const struct sched_job *job)
{
    return (uint32_t)(job->cpus / job->nodes);
}

static uint64_t member_mem(const struct sched_job *job)
{
    return (uint64_t)(job->mem_mib / job->nodes);
}

static bool member_host_fits(const struct view_node *vn, const struct sched_job *job)
{
    return vn->free_cpus >= member_cpus(job) && vn->free_mem_mib >= member_mem(job);
}

static bool host_fits(const struct view_node *vn, const struct sched_job *job, uint32_t k)
{
    return vn->free_cpus >= part_cpus(job, k) && vn->free_mem_mib >= part_mem(job, k);
}

bool view_node_admits(const struct view *view, const struct sched_job *job, uint32_t n)
{
    const struct sched_node *node = &view->cluster->nodes[n];
    const struct view_node *vn = &view->nodes[n];
    if (!sched_job_features_ok(job, node->features))
        return false;
    if ((job->exclusive || job->mem_whole_node) && vn->free_mem_mib != node->mem_mib)
        return false;
    return !job->exclusive || (vn->free_cpus == node->cpus && vn->free_whole == node->ngpus);
}

/* The node-level part of a check: features, whole nodes, whole memory.
 * Records a miss of that kind. */
static bool shaped_admits(struct ctx *x, uint32_t n)
{
    if (view_node_admits(x->view, x->job, n))
        return true;
    x->miss |= VIEW_MISS_SHAPE;
    return false;
}

/* Ordinary jobs pass at the first test, on a flag read once per placement. */
static inline bool admits(struct ctx *x, uint32_t n)
{
    return !x->shaped || shaped_admits(x, n);
}

/* The GPU has the memory the job needs: its minimum, and all of a memory request. */
static bool gpu_mem_ok(const struct sched_job *job, const struct sched_gpu *gpu)
{
    return job->min_gpu_mem_mib <= (int64_t)gpu->mem_mib &&
           job->gpu_mem_mib <= (int64_t)gpu->mem_mib;
}

uint32_t view_node_whole_for(const struct view *view, const struct sched_job *job, uint32_t n)
{
    const struct sched_node *node = &view->cluster->nodes[n];
    if (job->min_gpu_mem_mib <= 0)
        return view->nodes[n].free_whole;
    uint32_t k = 0;
    for (uint32_t i = 0; i < node->ngpus; i++) {
        uint32_t gi = node->gpu_first + i;
        k += view->gpus[gi].free_milli == SCHED_MILLI &&
             sched_gpu_offered(&view->cluster->gpus[gi]) &&
             gpu_mem_ok(job, &view->cluster->gpus[gi]);
    }
    return k;
}

/* Is candidate (a) better than (b) for the packing? Scores are "free after". */
static bool better(enum sched_packing p, uint64_t a, uint32_t an, uint64_t b, uint32_t bn)
{
    if (a != b)
        return p == SCHED_PACK_BINPACK ? a < b : a > b;
    return an < bn;
}

/* Picks k wholly free GPUs of node n, preferring one NVLink domain (the
 * fullest one that still holds k, so larger domains stay whole). */
static void pick_whole_gpus(const struct view *view, const struct sched_job *job, uint32_t n,
                            uint32_t k, struct sched_share *out)
{
    const struct sched_node *node = &view->cluster->nodes[n];
    int32_t best_dom = INT32_MIN;
    uint32_t best_free = UINT32_MAX;
    for (uint32_t i = 0; i < node->ngpus && k > 1; i++) {
        int32_t dom = view->cluster->gpus[node->gpu_first + i].nvlink_domain;
        if (dom < 0)
            continue;
        bool seen = false;
        for (uint32_t j = 0; j < i && !seen; j++)
            seen = view->cluster->gpus[node->gpu_first + j].nvlink_domain == dom;
        if (seen)
            continue;
        uint32_t f = 0;
        for (uint32_t j = i; j < node->ngpus; j++) {
            uint32_t gj = node->gpu_first + j;
            const struct sched_gpu *g = &view->cluster->gpus[gj];
            f += g->nvlink_domain == dom && sched_gpu_offered(g) &&
                 view->gpus[gj].free_milli == SCHED_MILLI && gpu_mem_ok(job, g);
        }
        if (f >= k && f < best_free) {
            best_free = f;
            best_dom = dom;
        }
    }
    uint32_t got = 0;
    for (int pass = 0; pass < 2 && got < k; pass++) {
        for (uint32_t i = 0; i < node->ngpus && got < k; i++) {
            uint32_t gi = node->gpu_first + i;
            const struct sched_gpu *g = &view->cluster->gpus[gi];
            if (!sched_gpu_offered(g) || view->gpus[gi].free_milli != SCHED_MILLI ||
                !gpu_mem_ok(job, g))
                continue;
            bool in_dom = best_dom != INT32_MIN && g->nvlink_domain == best_dom;
            if (pass == 0 && best_dom != INT32_MIN && !in_dom)
                continue;
            bool taken = false;
            for (uint32_t j = 0; j < got && !taken; j++)
                taken = out[j].gpu == gi;
            if (taken)
                continue;
            out[got++] =
                (struct sched_share){.gpu = gi, .milli = SCHED_MILLI, .mem_mib = g->mem_mib};
        }
    }
}

static void fill_single(struct view_place *out, const struct view *view,
                        const struct sched_job *job, uint32_t n)
{
    out->nnodes = 1;
    out->nodes[0] = (struct sched_node_part){
        .node = n, .cpus = (uint32_t)job->cpus, .mem_mib = (uint64_t)job->mem_mib};
    out->group = view->nodes[n].group;
}

/* One-node whole-GPU job (or a CPU-only job, k = 0). */
static bool place_whole_single(struct ctx *x, const bool *allowed, struct view_place *out)
{
    struct view *view = x->view;
    const struct sched_job *job = x->job;
    uint32_t k = job->gpus > 0 ? (uint32_t)job->gpus : 0;
    uint32_t best = SCHED_NONE;
    uint64_t best_score = 0;
    for (uint32_t g = 0; g < view->ngroups; g++) {
        if ((allowed && !allowed[g]) || !view_group_eligible(view, job, g))
            continue;
        if (k && !group_may_fit(x, g)) {
            x->miss |= VIEW_MISS_GPU;
            continue;
        }
        const struct view_group *grp = &view->groups[g];
        for (uint32_t i = 0; i < grp->nnodes; i++) {
            uint32_t n = grp->nodes[i];
            const struct view_node *vn = &view->nodes[n];
            if (!vn->usable || vn->free_whole < k)
                continue;
            uint32_t w = k ? view_node_whole_for(view, job, n) : 0;
            if (w < k || !admits(x, n))
                continue;
            if (!host_fits(vn, job, k)) {
                x->miss |= VIEW_MISS_HOST;
                continue;
            }
            uint64_t score =
                k ? (uint64_t)(w - k) : (uint64_t)(vn->free_cpus - (uint32_t)job->cpus);
            if (best != SCHED_NONE && !better(view->packing, score, n, best_score, best))
                continue;
            if (!resv_allows(x, n))
                continue;
            best = n;
            best_score = score;
        }
    }
    if (best == SCHED_NONE) {
        if (!(x->miss & (VIEW_MISS_HOST | VIEW_MISS_RESV)))
            x->miss |= VIEW_MISS_GPU;
        return false;
    }
    fill_single(out, view, job, best);
    out->nshares = k;
    if (k)
        pick_whole_gpus(view, job, best, k, out->shares);
    return true;
}

/* GPU gi as core/mig.h sees it: its instances, busy where the view has
 * them taken. */
static void mig_gpu_of(const struct view *view, uint32_t gi, struct mig_gpu *ret)
{
    const struct sched_gpu *gpu = &view->cluster->gpus[gi];
    uint8_t free = view->gpus[gi].mig_free;
    ret->type = gpu->mig_type;
    ret->frozen = false;
    ret->changed_ms = INT64_MIN;
    ret->n = gpu->mig_n < MIG_MAX_INSTANCES ? gpu->mig_n : MIG_MAX_INSTANCES;
    for (unsigned k = 0; k < ret->n; k++)
        ret->inst[k] = (struct mig_instance){.profile = gpu->mig[k].profile,
                                             .start = gpu->mig[k].start,
                                             .busy = !(free & (1u << k)),
                                             .idle_since_ms = INT64_MIN};
}

/* Is MIG pick a better than b for the packing? Binpack: fewer free slots
 * on its GPU (mig_place's rule), spread: more; then the better capacity left. */
static bool mig_better(enum sched_packing packing, const struct mig_pick *a,
                       const struct mig_pick *b)
{
    if (a->free_slots != b->free_slots)
        return packing == SCHED_PACK_BINPACK ? a->free_slots < b->free_slots
                                             : a->free_slots > b->free_slots;
    return a->capacity > b->capacity;
}

/* Has GPU gi (of MIG type t) a free instance of profile p the job may use? */
static bool gpu_mig_free(const struct view *view, const struct sched_job *job, uint32_t gi,
                         const struct mig_type *t, unsigned p)
{
    const struct sched_gpu *gpu = &view->cluster->gpus[gi];
    if (!view->gpus[gi].mig_free || gpu->mig_type != t || gpu->held || !gpu_mem_ok(job, gpu))
        return false;
    for (uint8_t m = view->gpus[gi].mig_free; m; m &= (uint8_t)(m - 1)) {
        if (gpu->mig[__builtin_ctz(m)].profile == p)
            return true;
    }
    return false;
}

/* Node n's instance for the job (profile p of its group's MIG type): the
 * one mig_place picks among its MIG GPUs (one call, so the profile's name
 * is resolved once). *ret_gpu the GPU's index. */
static bool node_mig_pick(const struct view *view, const struct sched_job *job, uint32_t n,
                          unsigned p, struct mig_pick *ret, uint32_t *ret_gpu)
{
    const struct sched_node *node = &view->cluster->nodes[n];
    const struct mig_type *t = view->groups[view->nodes[n].group].mig_type;
    struct mig_request req = {.profile = t->profiles[p].name};
    struct mig_gpu mg[SCHED_MAX_GPUS_PER_NODE];
    uint32_t at[SCHED_MAX_GPUS_PER_NODE], k = 0;
    for (uint32_t i = 0; i < node->ngpus && i < SCHED_MAX_GPUS_PER_NODE; i++) {
        uint32_t gi = node->gpu_first + i;
        if (!gpu_mig_free(view, job, gi, t, p))
            continue;
        mig_gpu_of(view, gi, &mg[k]);
        at[k++] = gi;
    }
    if (!k || mig_place(mg, k, &req, ret))
        return false;
    *ret_gpu = at[ret->gpu];
    return true;
}

/* Has node n a free instance of profile p (group's type) on a GPU the job may use? */
static bool node_mig_free(const struct view *view, const struct sched_job *job, uint32_t n,
                          unsigned p)
{
    const struct sched_node *node = &view->cluster->nodes[n];
    const struct mig_type *t = view->groups[view->nodes[n].group].mig_type;
    for (uint32_t i = 0; i < node->ngpus; i++) {
        if (gpu_mig_free(view, job, node->gpu_first + i, t, p))
            return true;
    }
    return false;
}

/* The job's instance charge in group g, or -1 where it takes none there or
 * its team's quota headroom cannot pay it. */
static int64_t mig_charge_ok(const struct view *view, const struct sched_job *job, uint32_t g,
                             int *ret_profile)
{
    int p = view_group_mig_profile(view, job, g);
    if (p < 0)
        return -1;
    int64_t charge = mig_profile_charge_milli(view->groups[g].mig_type, (unsigned)p);
    if (view->headroom && view->headroom[g] < charge)
        return -1; /* the instance would take the team over quota */
    *ret_profile = p;
    return charge;
}

/* A free MIG instance of the job's profile: each node's mig_place pick,
 * the best across nodes by the packing (view.h). */
static bool place_mig(struct ctx *x, const bool *allowed, struct view_place *out)
{
    struct view *view = x->view;
    const struct sched_job *job = x->job;
    uint32_t best_node = SCHED_NONE, best_gpu = 0;
    int64_t best_charge = 0;
    struct mig_pick best = {0};
    for (uint32_t g = 0; g < view->ngroups; g++) {
        int p;
        if ((allowed && !allowed[g]) || !view_group_eligible(view, job, g))
            continue;
        int64_t charge = mig_charge_ok(view, job, g, &p);
        if (charge < 0)
            continue;
        uint32_t nfree, total;
        view_group_mig_count(view, job, g, false, &nfree, &total);
        if (!nfree) {
            x->miss |= VIEW_MISS_GPU;
            continue;
        }
        const struct view_group *grp = &view->groups[g];
        for (uint32_t i = 0; i < grp->nnodes; i++) {
            uint32_t n = grp->nodes[i];
            const struct view_node *vn = &view->nodes[n];
            struct mig_pick pick = {0};
            uint32_t gi = 0;
            if (!vn->usable || !vn->mig_free || !admits(x, n) ||
                !node_mig_pick(view, job, n, (unsigned)p, &pick, &gi))
                continue;
            if (!host_fits(vn, job, 0)) {
                x->miss |= VIEW_MISS_HOST;
                continue;
            }
            if (best_node != SCHED_NONE && !mig_better(view->packing, &pick, &best))
                continue;
            if (!resv_allows(x, n))
                continue;
            best = pick;
            best_gpu = gi;
            best_node = n;
            best_charge = charge;
            /* Binpack: no GPU of the group has fewer free slots than the
             * instance itself, and every such pick leaves none free: the
             * group's first is its best (other groups, of other MIG types,
             * may still do better). */
            if (view->packing == SCHED_PACK_BINPACK &&
                pick.free_slots == grp->mig_type->profiles[pick.profile].size)
                break;
        }
    }
    if (best_node == SCHED_NONE)
        return false;
    const struct mig_type *t = view->cluster->gpus[best_gpu].mig_type;
    fill_single(out, view, job, best_node);
    out->nshares = 1;
    out->shares[0] = (struct sched_share){.gpu = best_gpu,
                                          .milli = (uint32_t)best_charge,
                                          .mem_mib = t->profiles[best.profile].mem_mib,
                                          .mig = true,
                                          .mig_start = best.start,
                                          .mig_profile = best.profile};
    return true;
}

/* Fraction or memory of one GPU: shared GPUs first, then (a memory request
 * that may take one) a MIG instance, then a fresh GPU. A MIG-only job: an
 * instance. */
static bool place_fraction(struct ctx *x, const bool *allowed, struct view_place *out)
{
    struct view *view = x->view;
    const struct sched_job *job = x->job;
    const struct sched_cluster *c = view->cluster;
    uint32_t best_gpu = SCHED_NONE, best_node = SCHED_NONE;
    uint64_t best_score = 0;
    uint32_t best_milli = 0, best_mem = 0;
    if (sched_job_mig_only(job)) {
        if (place_mig(x, allowed, out))
            return true;
        if (!(x->miss & (VIEW_MISS_HOST | VIEW_MISS_RESV)))
            x->miss |= VIEW_MISS_GPU;
        return false;
    }
    for (int fresh = 0; fresh < 2 && best_gpu == SCHED_NONE; fresh++) {
        if (fresh && job->mig_types && place_mig(x, allowed, out))
            return true;
        for (uint32_t g = 0; g < view->ngroups; g++) {
            if ((allowed && !allowed[g]) || !view_group_eligible(view, job, g))
                continue;
            if (!group_may_fit(x, g)) {
                x->miss |= VIEW_MISS_GPU;
                continue;
            }
            const struct view_group *grp = &view->groups[g];
            for (uint32_t i = 0; i < grp->nnodes; i++) {
                uint32_t n = grp->nodes[i];
                const struct view_node *vn = &view->nodes[n];
                if (!vn->usable || (fresh ? !vn->free_whole : !vn->nshared) || !admits(x, n))
                    continue;
                const struct sched_node *node = &c->nodes[n];
                for (uint32_t j = 0; j < node->ngpus; j++) {
                    uint32_t gi = node->gpu_first + j;
                    const struct sched_gpu *gpu = &c->gpus[gi];
                    const struct view_gpu *vg = &view->gpus[gi];
                    if (!sched_gpu_offered(gpu) || !gpu_mem_ok(job, gpu))
                        continue;
                    if (fresh ? vg->free_milli != SCHED_MILLI
                              : !(vg->free_milli > 0 && vg->free_milli < SCHED_MILLI))
                        continue;
                    uint32_t milli, mem;
                    sched_job_gpu_claim(job, gpu, &milli, &mem);
                    if (vg->free_milli < milli || vg->free_mem_mib < mem)
                        continue;
                    if (view->headroom && view->headroom[g] < (int64_t)milli)
                        continue; /* this GPU's share would take the team over quota */
                    if (!host_fits(vn, job, 0)) {
                        x->miss |= VIEW_MISS_HOST;
                        break;
                    }
                    /* Shared: tightest GPU. Fresh: the node with the fewest whole
                     * GPUs free (binpack), so untouched nodes stay whole. */
                    uint64_t score = fresh ? vn->free_whole : vg->free_milli - milli;
                    if (best_gpu != SCHED_NONE &&
                        !better(view->packing, score, n, best_score, best_node))
                        continue;
                    if (!resv_allows(x, n))
                        break;
                    best_gpu = gi;
                    best_node = n;
                    best_score = score;
                    best_milli = milli;
                    best_mem = mem;
                    if (fresh)
                        break; /* the node's lowest fresh GPU */
                }
            }
        }
    }
    if (best_gpu == SCHED_NONE) {
        if (!(x->miss & (VIEW_MISS_HOST | VIEW_MISS_RESV)))
            x->miss |= VIEW_MISS_GPU;
        return false;
    }
    fill_single(out, view, job, best_node);
    out->nshares = 1;
    out->shares[0] =
        (struct sched_share){.gpu = best_gpu, .milli = best_milli, .mem_mib = best_mem};
    return true;
}

/* How many of a gang's k GPUs node n can hold: its free whole GPUs, cut down
 * to what its free CPUs and host memory allow for that share of the job. */
static uint32_t gang_cap(const struct view *view, const struct sched_job *job, uint32_t n,
                         uint32_t k)
{
    const struct view_node *vn = &view->nodes[n];
    if (!vn->usable || !vn->free_whole)
        return 0;
    uint32_t t = view_node_whole_for(view, job, n);
    if (t > k)
        t = k;
    while (t > 0 && !host_fits(vn, job, t))
        t--;
    return t;
}

/* gang_cap, and none on a node the job's node-level asks refuse. A node
 * with no GPU free, the common case on a busy cluster, costs no call. */
static inline uint32_t gang_cap_for(const struct ctx *x, uint32_t n, uint32_t k)
{
    const struct view_node *vn = &x->view->nodes[n];
    if (!vn->usable || !vn->free_whole)
        return 0;
    uint32_t w = gang_cap(x->view, x->job, n, k);
    return w && x->shaped && !view_node_admits(x->view, x->job, n) ? 0 : w;
}

/* The group where a gang of k GPUs needs the fewest nodes (the first of
 * equals), counted from a histogram of its nodes' free counts; SCHED_NONE
 * when none holds it, with x->miss saying why. */
static uint32_t gang_group(struct ctx *x, const bool *allowed, uint32_t k)
{
    struct view *view = x->view;
    const struct sched_job *job = x->job;
    uint32_t best_group = SCHED_NONE, best_count = UINT32_MAX;
    for (uint32_t g = 0; g < view->ngroups; g++) {
        if ((allowed && !allowed[g]) || !view_group_eligible(view, job, g))
            continue;
        if (!group_may_fit(x, g)) {
            x->miss |= VIEW_MISS_GANG;
            continue;
        }
        /* Count how few nodes could do it: a selection of the largest free counts. */
        const struct view_group *grp = &view->groups[g];
        uint32_t hist[SCHED_MAX_GPUS_PER_NODE + 1] = {0};
        for (uint32_t i = 0; i < grp->nnodes; i++) {
            uint32_t n = grp->nodes[i];
            uint32_t w = gang_cap_for(x, n, k);
            if (!w) {
                if (view->nodes[n].free_whole)
                    x->miss |= VIEW_MISS_HOST;
                continue;
            }
            if (!resv_allows(x, n))
                continue;
            hist[w]++;
        }
        uint32_t need = k, count = 0;
        for (int w = SCHED_MAX_GPUS_PER_NODE; w > 0 && need; w--) {
            for (uint32_t m = 0; m < hist[w] && need; m++) {
                need -= (uint32_t)w < need ? (uint32_t)w : need;
                count++;
            }
        }
        if (need) {
            x->miss |= VIEW_MISS_GANG;
            continue;
        }
        if (count < best_count) {
            best_count = count;
            best_group = g;
        }
    }
    return best_group;
}

/* A gang across the fewest nodes of one group: the nodes with the most free
 * GPUs first; the last piece on the tightest node that holds it (binpack). */
static bool place_gang(struct ctx *x, const bool *allowed, struct view_place *out)
{
    struct view *view = x->view;
    const struct sched_job *job = x->job;
    uint32_t k = (uint32_t)job->gpus;
    uint32_t best_group = gang_group(x, allowed, k);
    if (best_group == SCHED_NONE)
        return false;

    /* Lay the gang out: nodes by free GPUs, descending, ties to the lower index
     * (a counting sort over the free count: one pass, no comparisons). */
    const struct view_group *grp = &view->groups[best_group];
    uint32_t *cand = view->node_scratch;
    uint32_t start[SCHED_MAX_GPUS_PER_NODE + 2] = {0};
    uint32_t ncand = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < grp->nnodes; i++) {
            uint32_t n = grp->nodes[i];
            uint32_t w = gang_cap_for(x, n, k);
            if (!w)
                continue;
            int32_t r = view->nodes[n].resv;
            if (r >= 0 && !x->ignore_resv && x->end_ms > view->resvs[r].start_ms)
                continue;
            uint32_t slot = SCHED_MAX_GPUS_PER_NODE - w; /* most free first */
            if (pass == 0)
                start[slot + 1]++;
            else
                cand[start[slot]++] = n;
        }
        if (pass == 0) {
            for (uint32_t b = 1; b < SCHED_MAX_GPUS_PER_NODE + 2; b++)
                start[b] += start[b - 1];
            ncand = start[SCHED_MAX_GPUS_PER_NODE + 1];
        }
    }
    uint32_t need = k;
    out->nnodes = 0;
    out->nshares = 0;
    for (uint32_t i = 0; i < ncand && need; i++) {
        uint32_t n = cand[i], w = gang_cap_for(x, n, k);
        uint32_t take = w < need ? w : need;
        if (take == need && view->packing == SCHED_PACK_BINPACK) {
            /* The last piece: the tightest remaining node that holds it. */
            uint32_t best = n, bw = w;
            for (uint32_t j = i + 1; j < ncand; j++) {
                uint32_t m = cand[j], wm = gang_cap_for(x, m, k);
                if (wm >= need && (wm < bw || (wm == bw && m < best))) {
                    best = m;
                    bw = wm;
                }
            }
            n = best;
        }
        out->nodes[out->nnodes++] = (struct sched_node_part){
            .node = n, .cpus = part_cpus(job, take), .mem_mib = part_mem(job, take)};
        pick_whole_gpus(view, job, n, take, out->shares + out->nshares);
        out->nshares += take;
        need -= take;
    }
    out->group = best_group;
    return need == 0;
}

/* An exact-N gang's score of node n (the tighter the lower), bounded for a
 * counting sort: the whole GPUs left over, or the CPUs for a CPU-only gang. */
enum { EXACT_BUCKETS = SCHED_MAX_GPUS_PER_NODE + 1 };

/* Could node n take one member of an exact-N gang (k GPUs and its share of
 * CPUs and memory)? Sets *ret_score when it could. */
static bool member_fits(struct ctx *x, uint32_t n, uint32_t k, uint32_t *ret_score)
{
    const struct view_node *vn = &x->view->nodes[n];
    if (!vn->usable || vn->free_whole < k)
        return false;
    uint32_t w = k ? view_node_whole_for(x->view, x->job, n) : 0;
    if (w < k || !admits(x, n))
        return false;
    if (!member_host_fits(vn, x->job)) {
        x->miss |= VIEW_MISS_HOST;
        return false;
    }
    uint32_t left = k ? w - k : vn->free_cpus - member_cpus(x->job);
    *ret_score = left < EXACT_BUCKETS - 1 ? left : EXACT_BUCKETS - 1;
    return true;
}

/* Group g's qualifying nodes by score; how many there are. */
static uint32_t exact_hist(struct ctx *x, uint32_t g, uint32_t k, uint32_t hist[EXACT_BUCKETS])
{
    const struct view_group *grp = &x->view->groups[g];
    uint32_t count = 0, score;
    memset(hist, 0, EXACT_BUCKETS * sizeof(*hist));
    for (uint32_t i = 0; i < grp->nnodes; i++) {
        uint32_t n = grp->nodes[i];
        if (member_fits(x, n, k, &score) && resv_allows(x, n)) {
            hist[score]++;
            count++;
        }
    }
    return count;
}

/* The bucket order the packing wants: binpack the tightest first. */
static uint32_t exact_bucket(enum sched_packing packing, uint32_t b)
{
    return packing == SCHED_PACK_BINPACK ? b : EXACT_BUCKETS - 1 - b;
}

/* The group where N nodes can each take a member, best packed (the sum of
 * the N best scores), ties to the lower group; SCHED_NONE if none. */
static uint32_t exact_group(struct ctx *x, const bool *allowed, uint32_t N, uint32_t k)
{
    struct view *view = x->view;
    uint32_t best = SCHED_NONE;
    uint64_t best_sum = 0;
    uint32_t hist[EXACT_BUCKETS];
    for (uint32_t g = 0; g < view->ngroups; g++) {
        if ((allowed && !allowed[g]) || !view_group_eligible(view, x->job, g))
            continue;
        view_group_refresh(view, g);
        if (view->groups[g].nnodes < N || (k && view->groups[g].max_free_whole < k)) {
            x->miss |= VIEW_MISS_NODES;
            continue;
        }
        uint32_t count = exact_hist(x, g, k, hist);
        x->have = count > x->have ? count : x->have;
        if (count < N) {
            x->miss |= VIEW_MISS_NODES;
            continue;
        }
        uint64_t sum = 0;
        for (uint32_t b = 0, need = N; b < EXACT_BUCKETS && need; b++) {
            uint32_t s = exact_bucket(view->packing, b), take = hist[s] < need ? hist[s] : need;
            sum += (uint64_t)take * s;
            need -= take;
        }
        if (best == SCHED_NONE || better(view->packing, sum, g, best_sum, best)) {
            best = g;
            best_sum = sum;
        }
    }
    return best;
}

/* Exactly N distinct nodes of one group, each with gpus/N whole GPUs and its
 * share of CPUs and memory: the best-scored nodes, ties to the lower index. */
static bool place_exact(struct ctx *x, const bool *allowed, struct view_place *out)
{
    struct view *view = x->view;
    const struct sched_job *job = x->job;
    uint32_t N = (uint32_t)job->nodes, k = view_job_node_gpus(job);
    uint32_t g = exact_group(x, allowed, N, k);
    if (g == SCHED_NONE)
        return false;
    const struct view_group *grp = &view->groups[g];
    uint32_t hist[EXACT_BUCKETS], start[EXACT_BUCKETS + 1] = {0}, score;
    struct ctx quiet = *x; /* the same checks again: their misses are known */
    exact_hist(&quiet, g, k, hist);
    for (uint32_t b = 0; b < EXACT_BUCKETS; b++)
        start[b + 1] = start[b] + hist[exact_bucket(view->packing, b)];
    uint32_t *cand = view->node_scratch;
    uint32_t slot_of[EXACT_BUCKETS];
    for (uint32_t b = 0; b < EXACT_BUCKETS; b++)
        slot_of[exact_bucket(view->packing, b)] = b;
    for (uint32_t i = 0; i < grp->nnodes; i++) {
        uint32_t n = grp->nodes[i];
        if (member_fits(&quiet, n, k, &score) && resv_allows(&quiet, n))
            cand[start[slot_of[score]]++] = n;
    }
    out->nnodes = 0;
    out->nshares = 0;
    for (uint32_t i = 0; i < N; i++) {
        uint32_t n = cand[i];
        out->nodes[out->nnodes++] = (struct sched_node_part){
            .node = n, .cpus = member_cpus(job), .mem_mib = member_mem(job)};
        if (k)
            pick_whole_gpus(view, job, n, k, out->shares + out->nshares);
        out->nshares += k;
    }
    out->group = g;
    return true;
}

/* Exclusive and whole-memory jobs hold all of each node they got: every
 * CPU and MiB, and (exclusive) every GPU whole. */
static void take_whole_nodes(const struct view *view, const struct sched_job *job,
                             struct view_place *out)
{
    const struct sched_cluster *c = view->cluster;
    if (job->exclusive)
        out->nshares = 0;
    for (uint32_t i = 0; i < out->nnodes; i++) {
        const struct sched_node *node = &c->nodes[out->nodes[i].node];
        out->nodes[i].mem_mib = node->mem_mib;
        if (!job->exclusive)
            continue;
        out->nodes[i].cpus = node->cpus;
        for (uint32_t g = 0; g < node->ngpus; g++) {
            uint32_t gi = node->gpu_first + g;
            out->shares[out->nshares++] = (struct sched_share){
                .gpu = gi, .milli = SCHED_MILLI, .mem_mib = c->gpus[gi].mem_mib};
        }
    }
}

bool view_place(struct view *view, const struct sched_job *job, const bool *allowed, int64_t end_ms,
                bool ignore_resv, struct view_place *out, unsigned *ret_miss)
{
    struct ctx x = {.view = view,
                    .job = job,
                    .end_ms = end_ms,
                    .ignore_resv = ignore_resv,
                    .blocking_resv = -1,
                    .shaped = sched_job_shaped(job)};
    bool ok;
    out->nodes_have = 0;
    if (job->nodes > 1) {
        ok = place_exact(&x, allowed, out);
        out->nodes_have = x.have;
    } else if (sched_job_gang(job)) {
        ok = place_whole_single(&x, allowed, out);
        if (!ok) {
            unsigned single_miss = x.miss;
            x.miss = 0;
            ok = place_gang(&x, allowed, out);
            x.miss |= single_miss & (VIEW_MISS_HOST | VIEW_MISS_RESV);
        }
    } else if (job->gpus > 0 || !sched_job_wants_gpu(job)) {
        ok = place_whole_single(&x, allowed, out);
    } else {
        ok = place_fraction(&x, allowed, out);
    }
    out->blocking_resv = x.blocking_resv;
    if (ok && (job->exclusive || job->mem_whole_node))
        take_whole_nodes(view, job, out);
    if (!ok && ret_miss)
        *ret_miss = x.miss;
    return ok;
}

bool view_node_fits(const struct view *view, const struct sched_job *job, uint32_t n)
{
    const struct view_node *vn = &view->nodes[n];
    if (!vn->usable || !view_group_eligible(view, job, vn->group))
        return false;
    if (sched_job_shaped(job) && !view_node_admits(view, job, n))
        return false;
    if (job->nodes > 1)
        return view_node_whole_for(view, job, n) >= view_job_node_gpus(job) &&
               member_host_fits(vn, job);
    if (job->gpus > 0)
        return view_node_whole_for(view, job, n) >= (uint32_t)job->gpus &&
               host_fits(vn, job, (uint32_t)job->gpus);
    if (!host_fits(vn, job, 0))
        return false;
    if (!sched_job_wants_gpu(job))
        return true;
    if (job->mig_types) {
        int p;
        if (vn->mig_free && mig_charge_ok(view, job, vn->group, &p) >= 0 &&
            node_mig_free(view, job, n, (unsigned)p))
            return true;
        if (sched_job_mig_only(job))
            return false;
    }
    const struct sched_node *node = &view->cluster->nodes[n];
    for (uint32_t i = 0; i < node->ngpus; i++) {
        uint32_t gi = node->gpu_first + i;
        const struct sched_gpu *gpu = &view->cluster->gpus[gi];
        uint32_t milli, mem;
        if (!sched_gpu_offered(gpu) || !gpu_mem_ok(job, gpu))
            continue;
        sched_job_gpu_claim(job, gpu, &milli, &mem);
        if (view->headroom && view->headroom[vn->group] < (int64_t)milli)
            continue;
        if (view->gpus[gi].free_milli >= milli && view->gpus[gi].free_mem_mib >= mem)
            return true;
    }
    return false;
}

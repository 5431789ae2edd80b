#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "core/view.h"
#include "base/banned.h"

static uint32_t node_type_slot(const struct sched_cluster *c, const struct sched_node *n)
{
    return n->ngpus ? c->gpus[n->gpu_first].type : c->ngpu_types;
}

static bool gpu_take(struct view *view, uint32_t gi, uint32_t milli, uint32_t mem, bool give);
static bool share_take(struct view *view, const struct sched_share *s, bool give);

/* A GPU whose instances are offered: in MIG mode with a catalogue type, not held. */
static bool mig_offered(const struct sched_gpu *gpu)
{
    return gpu->mig_enabled && gpu->mig_type && !gpu->held;
}

/* Takes a node part's CPUs and host memory, saturating at 0; whether they
 * were over what the node had free. */
static bool node_take(struct view_node *vn, const struct sched_node_part *p)
{
    bool over = vn->free_cpus < p->cpus || vn->free_mem_mib < p->mem_mib;
    vn->free_cpus = vn->free_cpus > p->cpus ? vn->free_cpus - p->cpus : 0;
    vn->free_mem_mib = vn->free_mem_mib > p->mem_mib ? vn->free_mem_mib - p->mem_mib : 0;
    return over;
}

/* view_apply for view_init: every group is dirty (rescanned when first
 * read), so there are no aggregates to keep up and no node to track. */
static bool apply_fresh(struct view *view, const struct sched_alloc *alloc)
{
    bool over = false;
    for (uint32_t i = 0; i < alloc->nshares; i++)
        over |= share_take(view, &alloc->shares[i], false);
    for (uint32_t i = 0; i < alloc->nnodes; i++)
        over |= node_take(&view->nodes[alloc->nodes[i].node], &alloc->nodes[i]);
    return over;
}

/* The groups of (pool, GPU type), in order of their first node, and each
 * one's slice of view->group_nodes (filled by add_nodes). */
static int make_groups(struct view *view)
{
    const struct sched_cluster *c = view->cluster;
    for (uint32_t n = 0; n < c->nnodes; n++) {
        const struct sched_node *node = &c->nodes[n];
        size_t slot = (size_t)node->pool * (c->ngpu_types + 1) + node_type_slot(c, node);
        if (view->group_index[slot] == SCHED_NONE)
            view->group_index[slot] = view->ngroups++;
    }
    view->groups = gpo_calloc(view->ngroups ? view->ngroups : 1, sizeof(*view->groups));
    view->group_nodes = gpo_malloc((c->nnodes ? c->nnodes : 1) * sizeof(*view->group_nodes));
    uint32_t *counts = gpo_calloc(view->ngroups ? view->ngroups : 1, sizeof(*counts));
    if (!view->groups || !view->group_nodes || !counts) {
        free(counts);
        return GPO_ENOMEM;
    }
    for (uint32_t n = 0; n < c->nnodes; n++) {
        const struct sched_node *node = &c->nodes[n];
        uint32_t type = node_type_slot(c, node);
        uint32_t g = view->group_index[(size_t)node->pool * (c->ngpu_types + 1) + type];
        view->groups[g].pool = node->pool;
        view->groups[g].gpu_type = type == c->ngpu_types ? SCHED_NONE : type;
        counts[g]++;
    }
    uint32_t off = 0;
    for (uint32_t g = 0; g < view->ngroups; g++) {
        view->groups[g].nodes = view->group_nodes + off;
        off += counts[g];
    }
    free(counts);
    return 0;
}

/* MIG GPU gi into its node and group: every instance free, counted per
 * profile; one GPU of capacity. The group's MIG type is its first MIG
 * GPU's (sched_cluster_check: one per gpu_type). */
static void add_mig_gpu(struct view *view, struct view_group *grp, uint32_t gi)
{
    const struct sched_gpu *gpu = &view->cluster->gpus[gi];
    struct view_node *vn = &view->nodes[view->gpu_node[gi]];
    if (!grp->mig_type)
        grp->mig_type = gpu->mig_type;
    if (grp->mig_type != gpu->mig_type)
        return;
    uint32_t n = gpu->mig_n < MIG_MAX_INSTANCES ? gpu->mig_n : MIG_MAX_INSTANCES;
    view->gpus[gi].mig_free = (uint8_t)((1u << n) - 1u);
    vn->mig_free = (uint16_t)(vn->mig_free + n);
    if (!vn->usable)
        return;
    grp->cap_milli += SCHED_MILLI;
    for (const struct sched_mig_instance *in = gpu->mig; in < gpu->mig + n; in++) {
        if (in->profile < MIG_MAX_PROFILES)
            grp->mig_total[in->profile]++;
    }
}

/* Node n into its group: its free capacity (all of it), and the group's
 * largest node, memory and whether its nodes are alike. */
static void add_node(struct view *view, uint32_t n)
{
    const struct sched_cluster *c = view->cluster;
    const struct sched_node *node = &c->nodes[n];
    uint32_t type = node_type_slot(c, node);
    uint32_t g = view->group_index[(size_t)node->pool * (c->ngpu_types + 1) + type];
    struct view_group *grp = &view->groups[g];
    struct view_node *vn = &view->nodes[n];
    grp->nodes[grp->nnodes++] = n;
    vn->group = g;
    vn->free_cpus = node->cpus;
    vn->free_mem_mib = node->mem_mib;
    vn->usable = node->state == SCHED_NODE_UP;
    vn->resv = -1;
    if (grp->nnodes == 1) {
        grp->uniform = true;
    } else {
        const struct sched_node *first = &c->nodes[grp->nodes[0]];
        grp->uniform = grp->uniform && first->ngpus == node->ngpus && first->cpus == node->cpus &&
                       first->mem_mib == node->mem_mib;
    }
    if (node->ngpus > grp->max_node_gpus)
        grp->max_node_gpus = node->ngpus;
    if (node->cpus > grp->max_node_cpus)
        grp->max_node_cpus = node->cpus;
    if (node->mem_mib > grp->max_node_mem_mib)
        grp->max_node_mem_mib = node->mem_mib;
    grp->total_gpus += node->ngpus;
    for (uint32_t i = 0; i < node->ngpus; i++) {
        uint32_t gi = node->gpu_first + i;
        const struct sched_gpu *gpu = &c->gpus[gi];
        view->gpu_node[gi] = n;
        if (grp->gpu_mem_mib && gpu->mem_mib != grp->gpu_mem_mib)
            grp->uniform = false;
        if (gpu->mem_mib > grp->gpu_mem_mib)
            grp->gpu_mem_mib = gpu->mem_mib;
        if (mig_offered(gpu))
            add_mig_gpu(view, grp, gi);
        if (!sched_gpu_offered(gpu))
            continue;
        view->gpus[gi].free_milli = SCHED_MILLI;
        view->gpus[gi].free_mem_mib = gpu->mem_mib;
        vn->free_whole++;
        if (vn->usable)
            grp->cap_milli += SCHED_MILLI;
    }
    if (vn->usable) {
        grp->plain_gpus += vn->free_whole;
        if (vn->free_whole > grp->max_node_plain)
            grp->max_node_plain = vn->free_whole;
    }
    grp->dirty = true;
}

/* Subtracts every running allocation (see view_init). */
static int take_running(struct view *view, const struct sched_running_set *running,
                        uint64_t *ret_bad_job)
{
    const struct sched_cluster *c = view->cluster;
    for (size_t r = 0; running && r < running->njobs; r++) {
        const struct sched_alloc *a = &running->jobs[r].alloc;
        bool bad = (a->nnodes && !a->nodes) || (a->nshares && !a->shares);
        for (uint32_t i = 0; !bad && i < a->nnodes; i++)
            bad = a->nodes[i].node >= c->nnodes;
        for (uint32_t i = 0; !bad && i < a->nshares; i++)
            bad = a->shares[i].gpu >= c->ngpus;
        if (bad) {
            if (ret_bad_job)
                *ret_bad_job = running->jobs[r].job ? running->jobs[r].job->id : 0;
            return GPO_EINVAL;
        }
        if (apply_fresh(view, a)) {
            if (!view->overcommitted) {
                view->overcommitted = gpo_malloc(running->njobs * sizeof(*view->overcommitted));
                if (!view->overcommitted)
                    return GPO_ENOMEM;
            }
            view->overcommitted[view->novercommitted++] = (uint32_t)r;
        }
    }
    return 0;
}

int view_init(struct view *view, const struct sched_cluster *c,
              const struct sched_running_set *running, enum sched_packing packing,
              uint64_t *ret_bad_job)
{
    memset(view, 0, sizeof(*view));
    view->cluster = c;
    view->packing = packing;
    size_t slots = (size_t)c->npools * (c->ngpu_types + 1);
    view->gpus = gpo_calloc(c->ngpus ? c->ngpus : 1, sizeof(*view->gpus));
    view->gpu_node = gpo_calloc(c->ngpus ? c->ngpus : 1, sizeof(*view->gpu_node));
    view->nodes = gpo_calloc(c->nnodes ? c->nnodes : 1, sizeof(*view->nodes));
    view->node_scratch = gpo_calloc(c->nnodes ? c->nnodes : 1, sizeof(*view->node_scratch));
    view->group_index = gpo_malloc((slots ? slots : 1) * sizeof(*view->group_index));
    int err = GPO_ENOMEM;
    if (view->gpus && view->gpu_node && view->nodes && view->node_scratch && view->group_index) {
        for (size_t i = 0; i < slots; i++)
            view->group_index[i] = SCHED_NONE;
        err = make_groups(view);
    }
    for (uint32_t n = 0; !err && n < c->nnodes; n++)
        add_node(view, n);
    if (!err)
        err = take_running(view, running, ret_bad_job);
    if (err)
        view_release(view);
    return err;
}

void view_release(struct view *view)
{
    if (!view)
        return;
    if (!view->clone) {
        free(view->gpu_node);
        free(view->group_nodes);
        free(view->group_index);
        free(view->overcommitted);
    }
    free(view->gpus);
    free(view->nodes);
    free(view->groups);
    free(view->resvs);
    free(view->node_scratch);
    memset(view, 0, sizeof(*view));
}

int view_clone(struct view *dst, const struct view *src)
{
    const struct sched_cluster *c = src->cluster;
    memset(dst, 0, sizeof(*dst));
    dst->cluster = c;
    dst->packing = src->packing;
    dst->ngroups = src->ngroups;
    /* Shared, read-only parts: the clone never frees them. */
    dst->clone = true;
    dst->gpu_node = src->gpu_node;
    dst->headroom = src->headroom;
    dst->group_index = src->group_index;
    dst->group_nodes = src->group_nodes;
    dst->gpus = gpo_malloc((c->ngpus ? c->ngpus : 1) * sizeof(*dst->gpus));
    dst->nodes = gpo_malloc((c->nnodes ? c->nnodes : 1) * sizeof(*dst->nodes));
    dst->groups = gpo_malloc((src->ngroups ? src->ngroups : 1) * sizeof(*dst->groups));
    dst->node_scratch = gpo_malloc((c->nnodes ? c->nnodes : 1) * sizeof(*dst->node_scratch));
    if (src->nresvs)
        dst->resvs = gpo_malloc(src->nresvs * sizeof(*dst->resvs));
    if (!dst->gpus || !dst->nodes || !dst->groups || !dst->node_scratch ||
        (src->nresvs && !dst->resvs)) {
        view_release(dst);
        return GPO_ENOMEM;
    }
    memcpy(dst->gpus, src->gpus, c->ngpus * sizeof(*dst->gpus));
    memcpy(dst->nodes, src->nodes, c->nnodes * sizeof(*dst->nodes));
    memcpy(dst->groups, src->groups, src->ngroups * sizeof(*dst->groups));
    if (src->nresvs)
        memcpy(dst->resvs, src->resvs, src->nresvs * sizeof(*dst->resvs));
    dst->nresvs = dst->resvs_cap = src->nresvs;
    return 0;
}

uint32_t view_group_of(const struct view *view, uint32_t pool, uint32_t gpu_type)
{
    const struct sched_cluster *c = view->cluster;
    if (pool >= c->npools)
        return SCHED_NONE;
    uint32_t t = gpu_type == SCHED_NONE ? c->ngpu_types : gpu_type;
    if (t > c->ngpu_types)
        return SCHED_NONE;
    return view->group_index[(size_t)pool * (c->ngpu_types + 1) + t];
}

bool view_group_eligible(const struct view *view, const struct sched_job *job, uint32_t g)
{
    const struct view_group *grp = &view->groups[g];
    if (job->pool != SCHED_ANY && job->pool != grp->pool)
        return false;
    if (!sched_job_wants_gpu(job))
        return true;
    if (grp->gpu_type == SCHED_NONE)
        return false;
    if (job->gpu_type != SCHED_ANY && job->gpu_type != grp->gpu_type)
        return false;
    if (job->min_gpu_mem_mib > (int64_t)grp->gpu_mem_mib)
        return false;
    if (job->mig_types) {
        /* An instance of its profile here, or (a memory request) a share. */
        if (view_group_mig_profile(view, job, g) >= 0)
            return true;
        if (sched_job_mig_only(job))
            return false;
    }
    if (job->gpu_mem_mib > (int64_t)grp->gpu_mem_mib)
        return false;
    return true;
}

static uint32_t node_max_free_milli(const struct view *view, uint32_t n)
{
    const struct sched_node *node = &view->cluster->nodes[n];
    const struct view_node *vn = &view->nodes[n];
    if (vn->free_whole)
        return SCHED_MILLI;
    if (!vn->nshared)
        return 0;
    uint32_t best = 0;
    for (uint32_t i = 0; i < node->ngpus; i++) {
        uint32_t f = view->gpus[node->gpu_first + i].free_milli;
        if (f > best)
            best = f;
    }
    return best;
}

/* Node n's free instances into its group's counts (a refresh). */
static void count_node_mig(const struct view *view, struct view_group *grp, uint32_t n)
{
    const struct sched_node *node = &view->cluster->nodes[n];
    bool open = view->nodes[n].resv < 0;
    for (uint32_t i = 0; i < node->ngpus; i++) {
        uint32_t gi = node->gpu_first + i;
        const struct sched_gpu *gpu = &view->cluster->gpus[gi];
        for (uint8_t m = view->gpus[gi].mig_free; m && gpu->mig_type == grp->mig_type;
             m &= (uint8_t)(m - 1)) {
            unsigned p = gpu->mig[__builtin_ctz(m)].profile;
            if (p >= MIG_MAX_PROFILES)
                continue;
            grp->mig_free[p]++;
            grp->mig_free_open[p] += open;
        }
    }
}

bool view_group_could_hold(const struct view *view, const struct sched_job *job, uint32_t g)
{
    const struct view_group *grp = &view->groups[g];
    if (job->gpus > 0) {
        if (job->nodes > 1 || !job->multi_node)
            return grp->max_node_plain >= view_job_node_gpus(job);
        return grp->plain_gpus >= (uint64_t)job->gpus;
    }
    if (!sched_job_wants_gpu(job))
        return true;
    int p = view_group_mig_profile(view, job, g);
    bool mig = p >= 0 && p < MIG_MAX_PROFILES && grp->mig_total[p] > 0;
    return mig || (!sched_job_mig_only(job) && grp->plain_gpus > 0);
}

int64_t view_job_milli_mig(const struct view *view, const struct sched_job *job, uint32_t g)
{
    const struct view_group *grp = &view->groups[g];
    int p = view_group_mig_profile(view, job, g);
    int64_t mig = p >= 0 ? mig_profile_charge_milli(grp->mig_type, (unsigned)p) : 0;
    if (sched_job_mig_only(job))
        return mig;
    int64_t frac = sched_job_milli(job, grp->gpu_mem_mib);
    return mig > 0 && mig < frac ? mig : frac;
}

void view_group_mig_count(struct view *view, const struct sched_job *job, uint32_t g, bool open,
                          uint32_t *ret_free, uint32_t *ret_total)
{
    int p = view_group_mig_profile(view, job, g);
    *ret_free = *ret_total = 0;
    if (p < 0 || p >= MIG_MAX_PROFILES)
        return;
    view_group_refresh(view, g);
    const struct view_group *grp = &view->groups[g];
    *ret_free = open ? grp->mig_free_open[p] : grp->mig_free[p];
    *ret_total = grp->mig_total[p];
}

void view_group_refresh(struct view *view, uint32_t g)
{
    struct view_group *grp = &view->groups[g];
    if (!grp->dirty)
        return;
    grp->max_free_whole = grp->max_free_whole_open = 0;
    grp->sum_free_whole = grp->sum_free_whole_open = 0;
    grp->max_free_milli = grp->max_free_milli_open = 0;
    grp->resv_latest = -1;
    if (grp->mig_type) {
        /* Apart, so that groups without MIG pay nothing for it. */
        memset(grp->mig_free, 0, sizeof(grp->mig_free));
        memset(grp->mig_free_open, 0, sizeof(grp->mig_free_open));
        for (uint32_t i = 0; i < grp->nnodes; i++) {
            const struct view_node *vn = &view->nodes[grp->nodes[i]];
            if (vn->usable && vn->mig_free)
                count_node_mig(view, grp, grp->nodes[i]);
        }
    }
    for (uint32_t i = 0; i < grp->nnodes; i++) {
        uint32_t n = grp->nodes[i];
        const struct view_node *vn = &view->nodes[n];
        if (!vn->usable)
            continue;
        if (vn->resv >= 0 && (grp->resv_latest < 0 || view->resvs[vn->resv].start_ms >
                                                          view->resvs[grp->resv_latest].start_ms))
            grp->resv_latest = vn->resv;
        uint32_t milli = node_max_free_milli(view, n);
        if (vn->free_whole > grp->max_free_whole)
            grp->max_free_whole = vn->free_whole;
        grp->sum_free_whole += vn->free_whole;
        if (milli > grp->max_free_milli)
            grp->max_free_milli = milli;
        if (vn->resv >= 0)
            continue;
        if (vn->free_whole > grp->max_free_whole_open)
            grp->max_free_whole_open = vn->free_whole;
        grp->sum_free_whole_open += vn->free_whole;
        if (milli > grp->max_free_milli_open)
            grp->max_free_milli_open = milli;
    }
    grp->dirty = false;
}

bool view_group_may_fit(struct view *view, const struct sched_job *job, uint32_t g, bool open)
{
    view_group_refresh(view, g);
    const struct view_group *grp = &view->groups[g];
    if (job->gpus > 0) {
        uint32_t maxw = open ? grp->max_free_whole_open : grp->max_free_whole;
        uint64_t sum = open ? grp->sum_free_whole_open : grp->sum_free_whole;
        if (job->nodes > 1)
            return maxw >= view_job_node_gpus(job) && sum >= (uint64_t)job->gpus;
        if (job->multi_node)
            return sum >= (uint64_t)job->gpus;
        return maxw >= (uint32_t)job->gpus;
    }
    if (job->mig_types) {
        int p = view_group_mig_profile(view, job, g);
        bool mig =
            p >= 0 && p < MIG_MAX_PROFILES && (open ? grp->mig_free_open[p] : grp->mig_free[p]) > 0;
        if (mig || sched_job_mig_only(job))
            return mig;
    }
    if (sched_job_wants_gpu(job)) {
        uint32_t milli = 0, mem = 0;
        struct sched_gpu probe = {.mem_mib = grp->gpu_mem_mib};
        sched_job_gpu_claim(job, &probe, &milli, &mem);
        return (open ? grp->max_free_milli_open : grp->max_free_milli) >= milli;
    }
    return grp->nnodes > 0;
}

bool view_group_may_fit_by(struct view *view, const struct sched_job *job, uint32_t g,
                           int64_t end_ms, bool ignore_resv, int32_t *ret_resv)
{
    *ret_resv = -1;
    if (view_group_may_fit(view, job, g, !ignore_resv))
        return true;
    if (ignore_resv || !view_group_may_fit(view, job, g, false))
        return false;
    /* Only reserved nodes have room: usable if the job ends before one starts. */
    int32_t r = view->groups[g].resv_latest;
    if (r >= 0 && end_ms <= view->resvs[r].start_ms)
        return true;
    *ret_resv = r;
    return false;
}

static bool gpu_take(struct view *view, uint32_t gi, uint32_t milli, uint32_t mem, bool give)
{
    struct view_gpu *vg = &view->gpus[gi];
    struct view_node *vn = &view->nodes[view->gpu_node[gi]];
    bool offered = sched_gpu_offered(&view->cluster->gpus[gi]);
    bool was_whole = offered && vg->free_milli == SCHED_MILLI;
    bool was_shared = offered && vg->free_milli > 0 && vg->free_milli < SCHED_MILLI;
    bool over = false;
    if (give && !offered)
        return false; /* what leaves a held GPU is not offered again */
    if (give) {
        vg->free_milli += milli;
        vg->free_mem_mib += mem;
        if (vg->free_milli > SCHED_MILLI)
            vg->free_milli = SCHED_MILLI;
        if (vg->free_mem_mib > view->cluster->gpus[gi].mem_mib)
            vg->free_mem_mib = view->cluster->gpus[gi].mem_mib;
    } else {
        /* Saturating: a running allocation over what the GPU now has (it shrank,
         * or the caller's records disagree) leaves it full, never negative. */
        over = !view->cluster->gpus[gi].held && (vg->free_milli < milli || vg->free_mem_mib < mem);
        vg->free_milli = vg->free_milli > milli ? vg->free_milli - milli : 0;
        vg->free_mem_mib = vg->free_mem_mib > mem ? vg->free_mem_mib - mem : 0;
    }
    bool is_whole = offered && vg->free_milli == SCHED_MILLI;
    bool is_shared = offered && vg->free_milli > 0 && vg->free_milli < SCHED_MILLI;
    vn->free_whole = (uint16_t)(vn->free_whole - was_whole + is_whole);
    vn->nshared = (uint16_t)(vn->nshared - was_shared + is_shared);
    return over;
}

/* Instance k of GPU gi became free (d = 1) or busy (d = -1): its node's
 * count, and its group's where the group's counts are fresh (sums are
 * exact; a dirty group recounts on refresh). */
static void mig_moved(struct view *view, uint32_t gi, unsigned k, int d)
{
    const struct sched_gpu *gpu = &view->cluster->gpus[gi];
    struct view_node *vn = &view->nodes[view->gpu_node[gi]];
    struct view_group *grp = &view->groups[vn->group];
    vn->mig_free = (uint16_t)(vn->mig_free + d);
    unsigned p = gpu->mig[k].profile;
    if (grp->dirty || !vn->usable || p >= MIG_MAX_PROFILES || gpu->mig_type != grp->mig_type)
        return;
    grp->mig_free[p] = (uint32_t)((int64_t)grp->mig_free[p] + d);
    if (vn->resv < 0)
        grp->mig_free_open[p] = (uint32_t)((int64_t)grp->mig_free_open[p] + d);
}

/* The index in gpu->mig[] of the instance share s names (start and
 * profile), or -1. */
static int mig_index(const struct sched_gpu *gpu, const struct sched_share *s)
{
    if (!gpu->mig_enabled || !gpu->mig_type)
        return -1;
    for (uint32_t k = 0; k < gpu->mig_n && k < MIG_MAX_INSTANCES; k++) {
        if (gpu->mig[k].start == s->mig_start && gpu->mig[k].profile == s->mig_profile)
            return (int)k;
    }
    return -1;
}

/* A share on a MIG instance: takes or gives the instance. Taking one that
 * is busy already, or that the GPU does not have (its layout changed under
 * a running job, or the records disagree), is over capacity; a missing one
 * leaves the whole GPU full, as any overcommit does. */
static bool mig_take(struct view *view, const struct sched_share *s, bool give)
{
    const struct sched_gpu *gpu = &view->cluster->gpus[s->gpu];
    struct view_gpu *vg = &view->gpus[s->gpu];
    int k = mig_index(gpu, s);
    if (give) {
        if (k < 0 || gpu->held || (vg->mig_free & (1u << k)))
            return false; /* what leaves a held GPU is not offered again */
        vg->mig_free = (uint8_t)(vg->mig_free | (1u << k));
        mig_moved(view, s->gpu, (unsigned)k, 1);
        return false;
    }
    if (k >= 0 && (vg->mig_free & (1u << k))) {
        vg->mig_free = (uint8_t)(vg->mig_free & ~(1u << k));
        mig_moved(view, s->gpu, (unsigned)k, -1);
        return false;
    }
    if (k < 0) {
        for (uint8_t m = vg->mig_free; m; m &= (uint8_t)(m - 1))
            mig_moved(view, s->gpu, (unsigned)__builtin_ctz(m), -1);
        vg->mig_free = 0;
        gpu_take(view, s->gpu, SCHED_MILLI, gpu->mem_mib, false);
    }
    return !gpu->held;
}

static bool share_take(struct view *view, const struct sched_share *s, bool give)
{
    if (s->mig)
        return mig_take(view, s, give);
    return gpu_take(view, s->gpu, s->milli, s->mem_mib, give);
}

/* Node n's free capacity moved from (old_whole, old_milli): bring its group's
 * aggregates along without a scan where that is exact (sums always; maxima
 * when they rise, or when the node was not the one holding them), else mark
 * the group for a rescan. */
static void node_moved(struct view *view, uint32_t n, uint32_t old_whole, uint32_t old_milli)
{
    struct view_node *vn = &view->nodes[n];
    struct view_group *grp = &view->groups[vn->group];
    if (grp->dirty || !vn->usable)
        return;
    uint32_t new_whole = vn->free_whole, new_milli = node_max_free_milli(view, n);
    bool open = vn->resv < 0;
    grp->sum_free_whole += (uint64_t)new_whole - old_whole;
    if (open)
        grp->sum_free_whole_open += (uint64_t)new_whole - old_whole;
    struct {
        uint32_t *max;
        uint32_t old, now;
        bool counts;
    } m[4] = {{&grp->max_free_whole, old_whole, new_whole, true},
              {&grp->max_free_whole_open, old_whole, new_whole, open},
              {&grp->max_free_milli, old_milli, new_milli, true},
              {&grp->max_free_milli_open, old_milli, new_milli, open}};
    for (int k = 0; k < 4 && !grp->dirty; k++) {
        if (!m[k].counts)
            continue;
        if (m[k].now > *m[k].max)
            *m[k].max = m[k].now;
        else if (m[k].now < m[k].old && m[k].old == *m[k].max)
            grp->dirty = true; /* the node that held the maximum lost some */
    }
}

bool view_apply(struct view *view, const struct sched_alloc *alloc, bool give)
{
    /* Each node's figures before, so its group's aggregates can follow. */
    enum { TRACK = 64 };
    uint32_t old_whole[TRACK], old_milli[TRACK];
    uint32_t ntrack = alloc->nnodes <= TRACK ? alloc->nnodes : 0;
    for (uint32_t i = 0; i < ntrack; i++) {
        uint32_t n = alloc->nodes[i].node;
        old_whole[i] = view->nodes[n].free_whole;
        old_milli[i] = node_max_free_milli(view, n);
    }
    bool over = false;
    for (uint32_t i = 0; i < alloc->nshares; i++) {
        const struct sched_share *s = &alloc->shares[i];
        over |= share_take(view, s, give);
        uint32_t n = view->gpu_node[s->gpu];
        bool listed = false;
        for (uint32_t k = 0; k < ntrack && !listed; k++)
            listed = alloc->nodes[k].node == n;
        if (!listed)
            view->groups[view->nodes[n].group].dirty = true;
    }
    for (uint32_t i = 0; i < alloc->nnodes; i++) {
        const struct sched_node_part *p = &alloc->nodes[i];
        struct view_node *vn = &view->nodes[p->node];
        if (give) {
            vn->free_cpus += p->cpus;
            vn->free_mem_mib += p->mem_mib;
        } else {
            over |= node_take(vn, p);
        }
        if (i < ntrack)
            node_moved(view, p->node, old_whole[i], old_milli[i]);
        else
            view->groups[vn->group].dirty = true;
    }
    return over;
}

static int undo_reserve(void **a, void **b, size_t *cap, size_t need, size_t ea, size_t eb)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 64;
    while (n < need)
        n *= 2;
    void *na = gpo_realloc(*a, n * ea);
    if (!na)
        return GPO_ENOMEM;
    *a = na;
    void *nb = gpo_realloc(*b, n * eb);
    if (!nb)
        return GPO_ENOMEM;
    *b = nb;
    *cap = n;
    return 0;
}

int view_apply_logged(struct view *view, const struct sched_alloc *alloc, bool give,
                      struct view_undo *log)
{
    if (undo_reserve((void **)&log->gpu, (void **)&log->gpu_old, &log->gpu_cap,
                     log->ngpu + alloc->nshares, sizeof(*log->gpu), sizeof(*log->gpu_old)) ||
        undo_reserve((void **)&log->node, (void **)&log->node_old, &log->node_cap,
                     log->nnode + alloc->nnodes + alloc->nshares, sizeof(*log->node),
                     sizeof(*log->node_old)))
        return GPO_ENOMEM;
    for (uint32_t i = 0; i < alloc->nshares; i++) {
        uint32_t gi = alloc->shares[i].gpu;
        log->gpu[log->ngpu] = gi;
        log->gpu_old[log->ngpu++] = view->gpus[gi];
        uint32_t n = view->gpu_node[gi]; /* its node's counts change too */
        log->node[log->nnode] = n;
        log->node_old[log->nnode++] = view->nodes[n];
    }
    for (uint32_t i = 0; i < alloc->nnodes; i++) {
        uint32_t n = alloc->nodes[i].node;
        log->node[log->nnode] = n;
        log->node_old[log->nnode++] = view->nodes[n];
    }
    view_apply(view, alloc, give);
    return 0;
}

void view_undo(struct view *view, struct view_undo *log)
{
    while (log->ngpu) {
        log->ngpu--;
        view->gpus[log->gpu[log->ngpu]] = log->gpu_old[log->ngpu];
    }
    while (log->nnode) {
        log->nnode--;
        uint32_t n = log->node[log->nnode];
        view->nodes[n] = log->node_old[log->nnode];
        view->groups[view->nodes[n].group].dirty = true;
    }
}

void view_undo_release(struct view_undo *log)
{
    if (!log)
        return;
    free(log->gpu);
    free(log->gpu_old);
    free(log->node);
    free(log->node_old);
    memset(log, 0, sizeof(*log));
}

int view_resv_add(struct view *view, uint64_t job, int64_t start_ms)
{
    if (view->nresvs == view->resvs_cap) {
        uint32_t cap = view->resvs_cap ? view->resvs_cap * 2 : 8;
        struct view_resv *r = gpo_realloc(view->resvs, cap * sizeof(*r));
        if (!r)
            return GPO_ENOMEM;
        view->resvs = r;
        view->resvs_cap = cap;
    }
    view->resvs[view->nresvs] = (struct view_resv){.job = job, .start_ms = start_ms};
    return (int)view->nresvs++;
}

void view_resv_hold(struct view *view, uint32_t r, uint32_t node)
{
    struct view_node *vn = &view->nodes[node];
    if (vn->resv >= 0)
        return;
    vn->resv = (int32_t)r;
    view->groups[vn->group].dirty = true;
}

#include <stdint.h>
#include <string.h>

#include "base/err.h"
#include "core/model.h"
#include "base/banned.h"

#define SECOND_MS 1000LL
#define HOUR_MS   (3600 * SECOND_MS)
#define DAY_MS    (24 * HOUR_MS)

void sched_policy_default(struct sched_policy *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->order = SCHED_ORDER_FAIRSHARE;
    ret->within = SCHED_WITHIN_LAS;
    ret->packing = SCHED_PACK_BINPACK;
    ret->backfill = true;
    ret->preemption = true;
    ret->migrate = true;
    ret->fairshare_half_life_ms = 7 * DAY_MS;
    ret->nlas_thresholds = 3;
    ret->las_thresholds_gpu_ms[0] = 4 * HOUR_MS;
    ret->las_thresholds_gpu_ms[1] = 40 * HOUR_MS;
    ret->las_thresholds_gpu_ms[2] = 400 * HOUR_MS;
    ret->preempt_grace_ms = 30 * SECOND_MS;
    ret->default_time_limit_ms = DAY_MS;
}

static const char *const order_names[] = {
    [SCHED_ORDER_FIFO] = "fifo",
    [SCHED_ORDER_PRIORITY] = "priority",
    [SCHED_ORDER_FAIRSHARE] = "fairshare",
    [SCHED_ORDER_LAS] = "las",
};

static const char *const packing_names[] = {
    [SCHED_PACK_BINPACK] = "binpack",
    [SCHED_PACK_SPREAD] = "spread",
};

static const char *const within_names[] = {
    [SCHED_WITHIN_SUBMIT] = "submit",
    [SCHED_WITHIN_LAS] = "las",
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

const char *sched_order_name(enum sched_order order)
{
    return (unsigned)order < NELEM(order_names) ? order_names[order] : "unknown";
}

const char *sched_packing_name(enum sched_packing packing)
{
    return (unsigned)packing < NELEM(packing_names) ? packing_names[packing] : "unknown";
}

const char *sched_within_name(enum sched_within within)
{
    return (unsigned)within < NELEM(within_names) ? within_names[within] : "unknown";
}

static int parse_name(const char *const *names, size_t n, const char *name, int *ret)
{
    for (size_t i = 0; name && i < n; i++) {
        if (strcmp(names[i], name) == 0) {
            *ret = (int)i;
            return 0;
        }
    }
    return GPO_EINVAL;
}

int sched_order_parse(const char *name, enum sched_order *ret)
{
    int v;
    int err = parse_name(order_names, NELEM(order_names), name, &v);
    if (!err)
        *ret = (enum sched_order)v;
    return err;
}

int sched_packing_parse(const char *name, enum sched_packing *ret)
{
    int v;
    int err = parse_name(packing_names, NELEM(packing_names), name, &v);
    if (!err)
        *ret = (enum sched_packing)v;
    return err;
}

int sched_within_parse(const char *name, enum sched_within *ret)
{
    int v;
    int err = parse_name(within_names, NELEM(within_names), name, &v);
    if (!err)
        *ret = (enum sched_within)v;
    return err;
}

static int bad(const char **ret, const char *what, int err)
{
    if (ret)
        *ret = what;
    return err;
}

int sched_policy_check(const struct sched_policy *p, const char **ret_field)
{
    if (!p)
        return bad(ret_field, "policy", GPO_EINVAL);
    if ((unsigned)p->order >= NELEM(order_names))
        return bad(ret_field, "order", GPO_EINVAL);
    if ((unsigned)p->within >= NELEM(within_names))
        return bad(ret_field, "within", GPO_EINVAL);
    if ((unsigned)p->packing >= NELEM(packing_names))
        return bad(ret_field, "packing", GPO_EINVAL);
    if (p->fairshare_half_life_ms <= 0)
        return bad(ret_field, "fairshare_half_life_ms", GPO_EINVAL);
    if (p->nlas_thresholds > SCHED_LAS_MAX_QUEUES - 1)
        return bad(ret_field, "nlas_thresholds", GPO_EINVAL);
    for (uint32_t i = 0; i < p->nlas_thresholds; i++) {
        if (p->las_thresholds_gpu_ms[i] <= 0 ||
            (i > 0 && p->las_thresholds_gpu_ms[i] <= p->las_thresholds_gpu_ms[i - 1]))
            return bad(ret_field, "las_thresholds_gpu_ms", GPO_EINVAL);
    }
    if (p->preempt_grace_ms < 0)
        return bad(ret_field, "preempt_grace_ms", GPO_EINVAL);
    if (p->default_time_limit_ms <= 0)
        return bad(ret_field, "default_time_limit_ms", GPO_EINVAL);
    return 0;
}

/* A GPU's MIG fields (see sched_cluster_check); *types[t] the mig_type of
 * gpu_type t's GPUs seen so far. */
static int check_gpu_mig(const struct sched_gpu *gpu, const struct mig_type **types,
                         const char **ret_what)
{
    if (gpu->mig_n > MIG_MAX_INSTANCES)
        return bad(ret_what, "gpu: mig_n is over MIG_MAX_INSTANCES", GPO_E2BIG);
    if (gpu->mig_n && !gpu->mig_enabled)
        return bad(ret_what, "gpu: mig_n is set but mig_enabled is false", GPO_EINVAL);
    if (!gpu->mig_type) {
        if (gpu->mig_enabled && gpu->mig_n)
            return bad(ret_what, "gpu: mig_type is NULL on a MIG GPU with instances", GPO_EINVAL);
        return 0;
    }
    if (mig_type_at(gpu->mig_type->id) != gpu->mig_type)
        return bad(ret_what, "gpu: mig_type is not an entry of the MIG catalogue", GPO_EINVAL);
    if (types[gpu->type] && types[gpu->type] != gpu->mig_type)
        return bad(ret_what, "gpu: GPUs of one gpu_type with different mig_type", GPO_EINVAL);
    types[gpu->type] = gpu->mig_type;
    struct mig_instance inst[MIG_MAX_INSTANCES];
    for (uint32_t k = 0; k < gpu->mig_n; k++)
        inst[k] = (struct mig_instance){.profile = gpu->mig[k].profile, .start = gpu->mig[k].start};
    if (mig_layout_check(gpu->mig_type, inst, gpu->mig_n, NULL, 0))
        return bad(ret_what, "gpu: mig instances break the placement table (mig_layout_check)",
                   GPO_EINVAL);
    return 0;
}

int sched_job_mig_check(const struct sched_job *j, const char **ret_field)
{
    if (!j)
        return bad(ret_field, "job", GPO_EINVAL);
    if (!j->mig_types)
        return 0;
    if (j->mig_types >> MIG_NTYPES)
        return bad(ret_field, "mig_types has a bit for no MIG type of the catalogue", GPO_EINVAL);
    for (unsigned t = 0; t < MIG_NTYPES; t++) {
        if ((j->mig_types & (1u << t)) && j->mig_profile[t] >= mig_type_at(t)->nprofiles)
            return bad(ret_field, "mig_profile is out of range for its MIG type", GPO_EINVAL);
    }
    if (j->gpus > 0 || j->gpu_milli > 0)
        return bad(ret_field,
                   "a MIG profile goes alone or with gpu_mem_mib, not with gpus or gpu_milli",
                   GPO_EINVAL);
    if (j->multi_node || j->nodes > 1 || j->exclusive)
        return bad(ret_field,
                   "a MIG instance is part of one GPU: no multi_node, nodes or exclusive",
                   GPO_EINVAL);
    return 0;
}

int sched_cluster_check(const struct sched_cluster *c, const char **ret_what)
{
    const struct mig_type *mig_of_type[SCHED_MAX_GPU_TYPES] = {0};
    if (!c)
        return bad(ret_what, "cluster", GPO_EINVAL);
    if (c->nnodes > SCHED_MAX_NODES || c->ngpus > SCHED_MAX_NODES * 8u ||
        c->npools > SCHED_MAX_POOLS || c->ngpu_types > SCHED_MAX_GPU_TYPES ||
        c->nteams > SCHED_MAX_TEAMS || c->nclasses > SCHED_MAX_CLASSES)
        return bad(ret_what, "cluster: a count is over its limit", GPO_E2BIG);
    if ((c->nnodes && !c->nodes) || (c->ngpus && !c->gpus) || (c->npools && !c->pools) ||
        (c->ngpu_types && !c->gpu_types) || (c->nteams && !c->teams) ||
        (c->nclasses && !c->classes))
        return bad(ret_what, "cluster: an array is NULL", GPO_EINVAL);
    uint32_t next_gpu = 0;
    for (uint32_t n = 0; n < c->nnodes; n++) {
        const struct sched_node *node = &c->nodes[n];
        if (node->pool >= c->npools)
            return bad(ret_what, "node: pool index out of range", GPO_EINVAL);
        if ((unsigned)node->state > SCHED_NODE_DOWN)
            return bad(ret_what, "node: state", GPO_EINVAL);
        if (node->ngpus > SCHED_MAX_GPUS_PER_NODE)
            return bad(ret_what, "node: more GPUs than SCHED_MAX_GPUS_PER_NODE", GPO_E2BIG);
        /* GPU ranges are laid out in node order and never overlap. */
        if (node->ngpus && (node->gpu_first < next_gpu || node->gpu_first > c->ngpus ||
                            node->ngpus > c->ngpus - node->gpu_first))
            return bad(ret_what, "node: gpu range out of order or out of range", GPO_EINVAL);
        if (node->ngpus)
            next_gpu = node->gpu_first + node->ngpus;
        for (uint32_t i = 0; i < node->ngpus; i++) {
            const struct sched_gpu *gpu = &c->gpus[node->gpu_first + i];
            if (gpu->type >= c->ngpu_types)
                return bad(ret_what, "gpu: type index out of range", GPO_EINVAL);
            if (gpu->type != c->gpus[node->gpu_first].type)
                return bad(ret_what, "node: GPUs of different types", GPO_EINVAL);
            if (gpu->mem_mib == 0)
                return bad(ret_what, "gpu: memory is 0", GPO_EINVAL);
            int err = check_gpu_mig(gpu, mig_of_type, ret_what);
            if (err)
                return err;
        }
    }
    for (uint32_t t = 0; t < c->nteams; t++) {
        const struct sched_team *team = &c->teams[t];
        if (team->weight < 1)
            return bad(ret_what, "team: weight must be >= 1", GPO_EINVAL);
        if (team->borrow_limit_milli < -1)
            return bad(ret_what, "team: borrow_limit_milli must be >= -1", GPO_EINVAL);
        if (team->nquotas && !team->quotas)
            return bad(ret_what, "team: quotas array is NULL", GPO_EINVAL);
        for (uint32_t q = 0; q < team->nquotas; q++) {
            const struct sched_quota *quota = &team->quotas[q];
            if (quota->pool >= c->npools || quota->gpu_type >= c->ngpu_types)
                return bad(ret_what, "quota: pool or gpu_type index out of range", GPO_EINVAL);
            if (quota->guaranteed_milli < 0 || quota->borrow_limit_milli < -1)
                return bad(ret_what, "quota: negative guarantee or limit", GPO_EINVAL);
            for (uint32_t r = 0; r < q; r++) {
                if (team->quotas[r].pool == quota->pool &&
                    team->quotas[r].gpu_type == quota->gpu_type)
                    return bad(ret_what, "quota: two entries for one pool and type", GPO_EINVAL);
            }
        }
    }
    return 0;
}

#define FIND(array, count)                                                                         \
    do {                                                                                           \
        if (!c || !name)                                                                           \
            return GPO_ENOENT;                                                                     \
        for (uint32_t i = 0; i < (count); i++) {                                                   \
            if ((array)[i].name && strcmp((array)[i].name, name) == 0)                             \
                return i;                                                                          \
        }                                                                                          \
        return GPO_ENOENT;                                                                         \
    } while (0)

int64_t sched_pool_find(const struct sched_cluster *c, const char *name)
{
    FIND(c->pools, c->npools);
}

int64_t sched_gpu_type_find(const struct sched_cluster *c, const char *name)
{
    FIND(c->gpu_types, c->ngpu_types);
}

int64_t sched_team_find(const struct sched_cluster *c, const char *name)
{
    FIND(c->teams, c->nteams);
}

int64_t sched_class_find(const struct sched_cluster *c, const char *name)
{
    FIND(c->classes, c->nclasses);
}

const struct sched_quota *sched_team_quota(const struct sched_team *team, uint32_t pool,
                                           uint32_t gpu_type)
{
    for (uint32_t q = 0; team && team->quotas && q < team->nquotas; q++) {
        if (team->quotas[q].pool == pool && team->quotas[q].gpu_type == gpu_type)
            return &team->quotas[q];
    }
    return NULL;
}

void sched_job_gpu_claim(const struct sched_job *job, const struct sched_gpu *gpu,
                         uint32_t *ret_milli, uint32_t *ret_mem_mib)
{
    if (!job || !gpu || !ret_milli || !ret_mem_mib)
        return;
    uint64_t mem = gpu->mem_mib;
    if (job->gpus > 0) {
        *ret_milli = SCHED_MILLI;
        *ret_mem_mib = (uint32_t)mem;
    } else if (job->gpu_milli > 0) {
        *ret_milli = (uint32_t)job->gpu_milli;
        *ret_mem_mib = (uint32_t)(mem * (uint64_t)job->gpu_milli / SCHED_MILLI);
    } else if (job->gpu_mem_mib > 0 && mem > 0) {
        uint64_t m = (uint64_t)job->gpu_mem_mib;
        uint64_t milli = (m * SCHED_MILLI + mem - 1) / mem;
        *ret_milli = (uint32_t)(milli > SCHED_MILLI ? SCHED_MILLI : milli);
        *ret_mem_mib = (uint32_t)(m > mem ? mem : m);
    } else {
        *ret_milli = 0;
        *ret_mem_mib = 0;
    }
}

int64_t sched_job_milli(const struct sched_job *job, uint32_t gpu_mem_mib)
{
    if (!job)
        return GPO_EINVAL;
    if (job->gpus > 0)
        return (int64_t)job->gpus * SCHED_MILLI;
    struct sched_gpu probe = {.mem_mib = gpu_mem_mib};
    uint32_t milli, mem;
    sched_job_gpu_claim(job, &probe, &milli, &mem);
    return milli;
}

/*
 * mig_demand.c - a pass's pending MIG demand, for the dynamic planner
 * (sched_mig_demand in sched.h).
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/err.h"
#include "core/sched.h"
#include "base/banned.h"

/* Waits that more instances would end: no instance free or none there, or
 * free ones taken by higher-ranked jobs; for a memory request that may also
 * take a share, no GPU. */
static bool wants_instance(const struct sched_job *j, enum sched_reason reason)
{
    return reason == SCHED_REASON_NO_MIG || reason == SCHED_REASON_MIG_ABSENT ||
           reason == SCHED_REASON_PRIORITY ||
           (reason == SCHED_REASON_NO_GPU && !sched_job_mig_only(j));
}

static bool same_entry(const struct sched_mig_demand *a, const struct sched_mig_demand *b)
{
    return a->pool == b->pool && a->demand.type == b->demand.type &&
           a->demand.req.profile == b->demand.req.profile &&
           a->demand.req.mem_mib == b->demand.req.mem_mib;
}

/* Job j's entry (count 1), or false where it has none: no pool with MIG
 * GPUs of its types. pool_types[p]: the MIG types pool p has; of_type[t]:
 * gpu_type t's MIG type. */
static bool entry_of(const struct sched_cluster *c, const struct sched_job *j,
                     const uint8_t *pool_types, const struct mig_type *const *of_type,
                     struct sched_mig_demand *ret)
{
    const struct mig_type *t = NULL;
    unsigned types = j->mig_types;
    if (j->gpu_type != SCHED_ANY) {
        t = j->gpu_type < c->ngpu_types ? of_type[j->gpu_type] : NULL;
        if (!t || !(types & (1u << t->id)))
            return false;
        types = 1u << t->id;
    }
    uint32_t pool = j->pool;
    if (pool == SCHED_ANY) {
        for (pool = 0; pool < c->npools && !(pool_types[pool] & types); pool++)
            ;
    }
    if (pool >= c->npools || !(pool_types[pool] & types))
        return false;
    types &= pool_types[pool];
    if (!t && !(types & (types - 1)))
        t = mig_type_at((unsigned)__builtin_ctz(types));
    struct mig_request req = {.profile = NULL, .mem_mib = (uint64_t)j->gpu_mem_mib};
    if (sched_job_mig_only(j)) {
        unsigned id = t ? t->id : (unsigned)__builtin_ctz(types);
        req = (struct mig_request){.profile = mig_type_at(id)->profiles[j->mig_profile[id]].name};
    }
    *ret = (struct sched_mig_demand){.pool = pool, .demand = {.type = t, .req = req, .count = 1}};
    return true;
}

int sched_mig_demand(const struct sched_cluster *c, const struct sched_queue *q,
                     const struct sched_result *res, struct sched_mig_demand *ret, size_t cap,
                     size_t *ret_n)
{
    if (!c || !q || !res || (cap && !ret) || !ret_n || (q->njobs && !q->jobs) ||
        (res->nwaits && !res->waits) || sched_cluster_check(c, NULL))
        return GPO_EINVAL;
    uint8_t pool_types[SCHED_MAX_POOLS];
    const struct mig_type *of_type[SCHED_MAX_GPU_TYPES];
    memset(pool_types, 0, sizeof(pool_types));
    memset((void *)of_type, 0, sizeof(of_type));
    for (uint32_t n = 0; n < c->nnodes; n++) {
        const struct sched_node *node = &c->nodes[n];
        for (uint32_t i = 0; i < node->ngpus; i++) {
            const struct sched_gpu *gpu = &c->gpus[node->gpu_first + i];
            if (!gpu->mig_enabled || !gpu->mig_type || gpu->held || node->state != SCHED_NODE_UP)
                continue;
            pool_types[node->pool] |= (uint8_t)(1u << gpu->mig_type->id);
            of_type[gpu->type] = gpu->mig_type;
        }
    }
    size_t need = 0, w = 0;
    struct sched_mig_demand last = {0}, e;
    for (size_t i = 0; i < q->njobs && w < res->nwaits; i++) {
        const struct sched_job *j = &q->jobs[i];
        if (res->waits[w].job != j->id)
            continue; /* started in the pass */
        const struct sched_wait *wait = &res->waits[w++];
        if (!j->mig_types || sched_job_mig_check(j, NULL) || !wants_instance(j, wait->reason) ||
            !entry_of(c, j, pool_types, of_type, &e))
            continue;
        if (need && same_entry(&last, &e)) {
            last.demand.count++;
        } else {
            if (need && need <= cap)
                ret[need - 1] = last;
            last = e;
            need++;
        }
    }
    if (need && need <= cap)
        ret[need - 1] = last;
    *ret_n = need;
    return need > cap ? GPO_E2BIG : 0;
}

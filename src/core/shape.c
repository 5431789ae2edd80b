#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/shape.h"
#include "core/vec.h"
#include "util/banned.h"

static uint64_t mix(uint64_t h, uint64_t v)
{
    return (h ^ v) * 0x100000001b3ULL;
}

/* Hash of the request part of a job: the fields shape_same compares. */
static uint64_t shape_hash(const struct sched_job *j)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    h = mix(h, (uint64_t)j->team << 32 | j->prio);
    h = mix(h, (uint64_t)j->pool << 32 | j->gpu_type);
    h = mix(h, (uint64_t)(uint32_t)j->gpus << 32 | (uint32_t)j->gpu_milli);
    h = mix(h, (uint64_t)j->gpu_mem_mib);
    h = mix(h, (uint64_t)j->min_gpu_mem_mib);
    h = mix(h, (uint64_t)(uint32_t)j->cpus << 1 | j->multi_node);
    h = mix(h, (uint64_t)j->mem_mib);
    h = mix(h, (uint64_t)j->time_limit_ms);
    return h ^ h >> 29;
}

/* Do two jobs ask for the same thing? (Not: id, submit time, labels,
 * checkpointing: those never change where or whether a job fits.) */
static bool shape_same(const struct sched_job *a, const struct sched_job *b)
{
    return a->team == b->team && a->prio == b->prio && a->pool == b->pool &&
           a->gpu_type == b->gpu_type && a->gpus == b->gpus && a->gpu_milli == b->gpu_milli &&
           a->gpu_mem_mib == b->gpu_mem_mib && a->min_gpu_mem_mib == b->min_gpu_mem_mib &&
           a->cpus == b->cpus && a->mem_mib == b->mem_mib && a->multi_node == b->multi_node &&
           a->time_limit_ms == b->time_limit_ms;
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
int shape_find(struct pass *p)
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
        if (idmap_put(p->ids, j->id, (uint32_t)i)) {
            free(table);
            return GPO_EINVAL;
        }
        uint64_t hash = shape_hash(j);
        uint32_t s_before = p->nshapes;
        for (size_t h = hash & (size - 1);; h = (h + 1) & (size - 1)) {
            uint32_t s = table[h];
            if (s == SCHED_NONE) {
                s = p->nshapes++;
                memset(&p->shapes_of[s], 0, sizeof(p->shapes_of[s]));
                p->shapes_of[s].key = shape_key(j);
                p->shapes_of[s].hash = hash;
                p->shapes_of[s].team = j->team;
                p->shapes_of[s].first = (uint32_t)i;
                table[h] = s;
                p->jshape[i] = s;
                break;
            }
            if (p->shapes_of[s].hash == hash && shape_same(&p->shapes_of[s].key, j)) {
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
    p->place.nodes = malloc(maxg * sizeof(*p->place.nodes));
    p->place.shares = malloc(maxg * sizeof(*p->place.shares));
    return p->place.nodes && p->place.shares ? 0 : GPO_ENOMEM;
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
bool shape_validate(struct pass *p, uint32_t i)
{
    const struct sched_cluster *c = p->c;
    const struct sched_job *j = &p->q->jobs[i];
    uint32_t pool = j->pool, type = j->gpu_type;
    const char *field = NULL;
    if (j->team >= c->nteams) {
        pass_set_wait(p, i, SCHED_REASON_UNKNOWN_TEAM, SCHED_NONE, SCHED_NONE, 0, "team");
        return false;
    }
    if (j->prio >= c->nclasses) {
        pass_set_wait(p, i, SCHED_REASON_UNKNOWN_CLASS, SCHED_NONE, SCHED_NONE, 0, "priority");
        return false;
    }
    if (pool != SCHED_ANY && pool >= c->npools) {
        pass_set_wait(p, i, SCHED_REASON_UNKNOWN_POOL, SCHED_NONE, SCHED_NONE, 0, "pool");
        return false;
    }
    if (type != SCHED_ANY && type >= c->ngpu_types) {
        pass_set_wait(p, i, SCHED_REASON_UNKNOWN_TYPE, SCHED_NONE, SCHED_NONE, 0, "gpu_type");
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
        pass_set_wait(p, i, SCHED_REASON_BAD_SIZE, pool, type, 0, field);
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
        pass_set_wait(p, i, SCHED_REASON_NO_MATCH, pool, type, 0, NULL);
        return false;
    }
    if (!any_size) {
        pass_set_wait(p, i, j->multi_node ? SCHED_REASON_GANG_TOO_LARGE : SCHED_REASON_TOO_LARGE,
                      pool, type, 0, NULL);
        return false;
    }
    if (!any_quota) {
        pass_set_wait(p, i, SCHED_REASON_QUOTA_NEVER, pool, type, 0, NULL);
        return false;
    }
    if (fit0)
        p->jflag[i] |= J_FIT0;
    return true;
}

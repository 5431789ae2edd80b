#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "core/evict.h"
#include "core/shape.h"
#include "base/vec.h"
#include "base/banned.h"

static uint64_t pair(uint32_t lo, uint32_t hi)
{
    return (uint64_t)lo | (uint64_t)hi << 32;
}

/* multi_node, exclusive, whole memory, the number of terms (5 and more alike:
 * all invalid), whether it asks for MIG, and the node count (negative ones
 * alike, and those over the limit: each kind has one verdict), in 32 bits. */
static uint32_t shape_bits(const struct sched_job *j)
{
    if (!(j->nodes | j->exclusive | j->mem_whole_node | j->nconstraint | j->mig_types))
        return (uint32_t)j->multi_node; /* the common case, at the cost of one test */
    uint32_t nodes = j->nodes < 0                           ? 0xffffffu
                     : (uint32_t)j->nodes > SCHED_MAX_NODES ? 0xfffffeu
                                                            : (uint32_t)j->nodes;
    uint32_t terms = j->nconstraint < 7 ? j->nconstraint : 7;
    return (uint32_t)j->multi_node | (uint32_t)j->exclusive << 1 |
           (uint32_t)j->mem_whole_node << 2 | terms << 3 | (uint32_t)(j->mig_types != 0) << 6 |
           nodes << 8;
}

/* A MIG request's fields as one word (the key's words say only that there is one). */
static uint64_t mig_word(const struct sched_job *j)
{
    uint64_t w = j->mig_types;
    for (unsigned t = 0; t < MIG_NTYPES; t++)
        w |= (uint64_t)j->mig_profile[t] << (8 + 8 * t);
    return w;
}

static struct shape_key key_of(const struct sched_job *j)
{
    return (struct shape_key){{
        [SHAPE_W_TEAM_PRIO] = pair(j->team, j->prio),
        [SHAPE_W_POOL_TYPE] = pair(j->pool, j->gpu_type),
        [SHAPE_W_GPUS] = pair((uint32_t)j->gpus, (uint32_t)j->gpu_milli),
        [SHAPE_W_CPUS] = pair((uint32_t)j->cpus, shape_bits(j)),
        [SHAPE_W_GPU_MEM] = (uint64_t)j->gpu_mem_mib,
        [SHAPE_W_MIN_GPU_MEM] = (uint64_t)j->min_gpu_mem_mib,
        [SHAPE_W_MEM] = (uint64_t)j->mem_mib,
        [SHAPE_W_LIMIT] = (uint64_t)j->time_limit_ms,
    }};
}

/* A constraint and a MIG request's profiles are not in the key's words
 * (only their count and presence are): jobs whose words agree compare them
 * too, apart, as only those that have one pay for it. */
static bool same_extras(const struct sched_job *a, const struct sched_job *b)
{
    if (a->mig_types && mig_word(a) != mig_word(b))
        return false;
    uint64_t d = 0;
    for (uint32_t t = 0; t < SCHED_CONSTRAINT_TERMS; t++)
        d |= t < a->nconstraint ? a->constraint[t] ^ b->constraint[t] : 0;
    return d == 0;
}

static inline bool same_terms(const struct sched_job *a, const struct sched_job *b)
{
    /* One test in the probe loop of every job: neither (nor has b: both are in the key). */
    return !(a->nconstraint | a->mig_types) || same_extras(a, b);
}

/* Each word multiplied by its own odd constant, the products summed: the
 * multiplies do not wait for one another. Then one final mix. */
static uint64_t key_hash(const uint64_t w[SHAPE_WORDS])
{
    uint64_t h = w[0] * 0x9e3779b97f4a7c15ULL + w[1] * 0xc2b2ae3d27d4eb4fULL +
                 w[2] * 0x165667b19e3779f9ULL + w[3] * 0xd6e8feb86659fd93ULL +
                 w[4] * 0xff51afd7ed558ccdULL + w[5] * 0xc4ceb9fe1a85ec53ULL +
                 w[6] * 0x94d049bb133111ebULL + w[7] * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ULL;
    return h ^ h >> 32;
}

static bool key_same(const uint64_t a[SHAPE_WORDS], const uint64_t b[SHAPE_WORDS])
{
    uint64_t d = 0;
    for (int k = 0; k < SHAPE_WORDS; k++)
        d |= a[k] ^ b[k];
    return d == 0;
}

/* A slot of the shape table: the hash's upper half (a cheap first check)
 * and the shape. */
struct slot {
    uint32_t tag;
    uint32_t shape;
};

static struct slot *table_new(size_t size)
{
    struct slot *t = gpo_malloc(size * sizeof(*t));
    for (size_t k = 0; t && k < size; k++)
        t[k] = (struct slot){0, SCHED_NONE};
    return t;
}

/* Doubles the shape table (it is kept at most half full) and re-inserts
 * the shapes. 0 or GPO_ENOMEM (the table as it was). */
static int table_grow(const struct pass *p, struct slot **table, size_t *size)
{
    size_t n = 2 * *size;
    struct slot *bigger = table_new(n);
    if (!bigger)
        return GPO_ENOMEM;
    for (uint32_t t = 0; t < p->nshapes; t++) {
        size_t b = p->shapes_of[t].hash & (n - 1);
        while (bigger[b].shape != SCHED_NONE)
            b = (b + 1) & (n - 1);
        bigger[b] = (struct slot){(uint32_t)(p->shapes_of[t].hash >> 32), t};
    }
    free(*table);
    *table = bigger;
    *size = n;
    return 0;
}

/* Pending job i, of request `key`, starts a new shape: validated once, on
 * this first job; it and the shape's later jobs are candidates of the
 * ordered loop when it fits the free capacity now or may preempt. Returns
 * the shape, or SCHED_NONE when out of memory. */
static uint32_t shape_new(struct pass *p, uint32_t i, const struct shape_key *key, uint64_t hash)
{
    const struct sched_job *j = &p->q->jobs[i];
    if (vec_grow((void **)&p->shapes_of, &p->shapes_cap, p->nshapes + 1, sizeof(*p->shapes_of)) ||
        vec_grow((void **)&p->skeys, &p->skeys_cap, p->nshapes + 1, sizeof(*p->skeys)))
        return SCHED_NONE;
    uint32_t s = p->nshapes++;
    p->jshape[i] = s;
    p->skeys[s] = *key;
    struct jshape *sh = &p->shapes_of[s];
    memset(sh, 0, sizeof(*sh));
    sh->hash = hash;
    sh->team = j->team;
    sh->first = sh->best = i;
    sh->best_submit_ms = j->submit_ms;
    sh->best_id = j->id;
    sh->valid = shape_validate(p, i);
    sh->fit0 = (p->jflag[i] & J_FIT0) != 0;
    /* Under LAS the job's queue is not known yet: queue 0, the one that may
     * evict the most, stands for all (see drop_las_hopeless). */
    sh->pot_other = sh->valid && p->pol->preemption && evict_may_preempt_other(p, j);
    sh->pot = sh->pot_other || (sh->valid && p->pol->preemption && evict_may_preempt_las(p, j, 0));
    sh->cand_bits = !sh->valid ? 0
                               : (uint8_t)((sh->fit0 ? J_FIT0 : 0) | (sh->pot ? J_POT : 0) |
                                           (sh->fit0 || sh->pot ? J_CAND : 0));
    return s;
}

/* Job i joins shape s, found already: it may be the shape's earliest, and
 * takes the shape's verdict. */
static void shape_join(struct pass *p, uint32_t i, uint32_t s, uint32_t *cands, size_t *ncands)
{
    const struct sched_job *j = &p->q->jobs[i];
    struct jshape *sh = &p->shapes_of[s];
    if (j->submit_ms < sh->best_submit_ms ||
        (j->submit_ms == sh->best_submit_ms && j->id < sh->best_id)) {
        sh->best = i;
        sh->best_submit_ms = j->submit_ms;
        sh->best_id = j->id;
    }
    if (!sh->valid) {
        p->jwait[i] = p->jwait[sh->first];
        p->jwait[i].job = j->id;
        p->jflag[i] |= J_DONE;
    } else if (sh->cand_bits) {
        p->jflag[i] |= sh->cand_bits;
        cands[(*ncands)++] = i;
    }
}

/*
 * The one pass over the queue. Each job's id goes into the id map (a second
 * occurrence is an error of the call); each job gets its shape (p->jshape),
 * one per distinct request, and its compact copy for ordering (p->ojob); each
 * shape learns its earliest job. The shape table and keys grow with the
 * shapes, not the queue, so they stay in cache; later steps read p->jshape
 * and p->ojob, not the queue.
 */
int shape_find(struct pass *p, uint32_t *cands, size_t *ret_ncands)
{
    size_t ncands = 0;
    size_t nq = p->q->njobs, size = 1024;
    uint32_t maxg = 1;
    struct slot *table = table_new(size);
    if (!table)
        return GPO_ENOMEM;
    p->nshapes = 0;
    int err = 0;
    /* Loaded once: the calls in the loop could otherwise, for all the
     * compiler knows, change them. */
    const struct sched_job *jobs = p->q->jobs;
    struct idmap *ids = p->ids;
    struct order_job *ojob = p->ojob;
    uint32_t *jshape = p->jshape;
    for (size_t i = 0; i < nq; i++) {
        const struct sched_job *j = &jobs[i];
        if (idmap_put(ids, j->id, (uint32_t)i)) {
            err = GPO_EINVAL;
            break;
        }
        ojob[i] = (struct order_job){j->id, j->submit_ms, j->team, j->prio};
        struct shape_key key = key_of(j);
        const uint64_t *w = key.w;
        uint64_t hash = key_hash(w); /* MIG profiles apart share it: few, they probe on */
        uint32_t tag = (uint32_t)(hash >> 32), s;
        size_t h = hash & (size - 1);
        for (;; h = (h + 1) & (size - 1)) {
            s = table[h].shape;
            if (s == SCHED_NONE)
                break;
            if (table[h].tag == tag && key_same(p->skeys[s].w, w) &&
                same_terms(j, &jobs[p->shapes_of[s].first]))
                break;
        }
        jshape[i] = s;
        if (s != SCHED_NONE) {
            shape_join(p, (uint32_t)i, s, cands, &ncands);
            continue;
        }
        if ((s = shape_new(p, (uint32_t)i, &key, hash)) == SCHED_NONE) {
            err = GPO_ENOMEM;
            break;
        }
        table[h] = (struct slot){tag, s};
        if (p->shapes_of[s].cand_bits) {
            p->jflag[i] |= p->shapes_of[s].cand_bits;
            cands[ncands++] = (uint32_t)i;
        }
        int32_t g = j->gpus; /* the placement scratch must hold it */
        if (g > 0 && (uint32_t)g > maxg && g <= (int32_t)SCHED_MAX_GPUS_PER_NODE * 1024)
            maxg = (uint32_t)g;
        if (j->nodes > 0 && (uint32_t)j->nodes > maxg && (uint32_t)j->nodes <= p->c->nnodes)
            maxg = (uint32_t)j->nodes;
        if (j->exclusive && p->c->ngpus > maxg)
            maxg = p->c->ngpus; /* it holds every GPU of its nodes */
        if (2 * (size_t)p->nshapes > size && (err = table_grow(p, &table, &size)))
            break;
    }
    free(table);
    if (err)
        return err;
    *ret_ncands = ncands;
    p->place.nodes = gpo_malloc(maxg * sizeof(*p->place.nodes));
    p->place.shares = gpo_malloc(maxg * sizeof(*p->place.shares));
    return p->place.nodes && p->place.shares ? 0 : GPO_ENOMEM;
}

/* Could node n, were it empty, take the job (one member of an exact-N
 * gang): its GPUs with the memory asked, CPUs, memory and features? */
static bool node_can_hold(const struct sched_cluster *c, const struct sched_job *j, uint32_t n,
                          uint32_t want, int64_t need_mem)
{
    const struct sched_node *node = &c->nodes[n];
    int64_t share = j->nodes > 1 ? j->nodes : 1;
    int64_t mem = j->mem_whole_node ? 0 : j->mem_mib / share;
    if ((int64_t)node->cpus < j->cpus / share || (int64_t)node->mem_mib < mem ||
        !sched_job_features_ok(j, node->features))
        return false;
    uint32_t fit = 0;
    for (uint32_t i = 0; i < node->ngpus && fit < want; i++)
        fit += (int64_t)c->gpus[node->gpu_first + i].mem_mib >= need_mem;
    return fit >= want;
}

/* How many nodes of group g could, were they empty, take a member of an
 * exact-N gang (or the job)? Stops counting at `enough`. */
static uint32_t group_nodes_holding(const struct pass *p, const struct sched_job *j, uint32_t g,
                                    uint32_t enough)
{
    const struct view_group *grp = &p->view.groups[g];
    int64_t need_mem = j->min_gpu_mem_mib > j->gpu_mem_mib ? j->min_gpu_mem_mib : j->gpu_mem_mib;
    uint32_t want = j->gpus > 0 ? view_job_node_gpus(j) : sched_job_wants_gpu(j) ? 1 : 0;
    uint32_t count = 0;
    for (uint32_t k = 0; k < grp->nnodes && count < enough; k++)
        count += node_can_hold(p->c, j, grp->nodes[k], want, need_mem);
    return count;
}

/* Could some node (or, for a gang, the group) of group g ever hold the job,
 * were it empty? The largest node's figures first; only a group of unlike
 * nodes or GPUs, or a job with a constraint, needs a look at every node. */
static bool group_can_hold(const struct pass *p, const struct sched_job *j, uint32_t g)
{
    const struct view_group *grp = &p->view.groups[g];
    const struct sched_cluster *c = p->c;
    int64_t need_mem = j->min_gpu_mem_mib > j->gpu_mem_mib ? j->min_gpu_mem_mib : j->gpu_mem_mib;
    bool gang = j->gpus > 0 && j->multi_node && j->nodes == 0;
    uint32_t want = j->gpus > 0 ? (uint32_t)j->gpus : sched_job_wants_gpu(j) ? 1 : 0;
    if (j->nodes > 1) {
        uint32_t N = (uint32_t)j->nodes;
        return grp->nnodes >= N && group_nodes_holding(p, j, g, N) >= N;
    }
    if (gang) {
        if (grp->uniform && !j->nconstraint)
            return (uint64_t)j->gpus <= grp->total_gpus;
        uint64_t total = 0;
        for (uint32_t k = 0; k < grp->nnodes; k++) {
            const struct sched_node *n = &c->nodes[grp->nodes[k]];
            if (!sched_job_features_ok(j, n->features))
                continue;
            for (uint32_t i = 0; i < n->ngpus; i++)
                total += (int64_t)c->gpus[n->gpu_first + i].mem_mib >= need_mem;
        }
        return total >= (uint64_t)j->gpus;
    }
    uint64_t mem = j->mem_whole_node ? 0 : (uint64_t)j->mem_mib;
    if (want > grp->max_node_gpus || (uint32_t)j->cpus > grp->max_node_cpus ||
        mem > grp->max_node_mem_mib)
        return false;
    if (grp->uniform && !j->nconstraint)
        return true;
    return group_nodes_holding(p, j, g, 1) >= 1;
}

/* The first thing wrong with a job's Slurm shape, or NULL. */
static const char *shape_field(const struct sched_job *j)
{
    if (j->nodes < 0)
        return "nodes is negative";
    if ((uint32_t)j->nodes > SCHED_MAX_NODES)
        return "nodes is over the limit";
    if (j->nconstraint > SCHED_CONSTRAINT_TERMS)
        return "constraint has more terms than the core keeps";
    if (j->exclusive && (j->gpu_milli > 0 || j->gpu_mem_mib > 0))
        return "exclusive takes whole nodes, not a share of one GPU";
    if (j->mem_whole_node && j->mem_mib > 0)
        return "mem_mib must be 0 with mem_whole_node (it takes each node's whole memory)";
    if (j->nodes <= 1)
        return NULL;
    if (j->gpu_milli > 0 || j->gpu_mem_mib > 0)
        return "a share of one GPU cannot span nodes";
    if (j->gpus % j->nodes)
        return "gpus must divide evenly over nodes";
    if (j->cpus % j->nodes)
        return "cpus must divide evenly over nodes";
    if (!j->mem_whole_node && j->mem_mib % j->nodes)
        return "mem_mib must divide evenly over nodes";
    return NULL;
}

/* The first thing wrong with a job's sizes, or NULL. */
static const char *size_field(const struct sched_job *j)
{
    if (j->gpus < 0)
        return "gpus is negative";
    if (j->gpu_milli < 0)
        return "gpu_milli is negative";
    if (j->gpu_mem_mib < 0)
        return "gpu_mem_mib is negative";
    if (j->min_gpu_mem_mib < 0)
        return "min_gpu_mem_mib is negative";
    if (j->cpus < 0)
        return "cpus is negative";
    if (j->mem_mib < 0)
        return "mem_mib is negative";
    if (j->time_limit_ms < 0)
        return "time_limit_ms is negative";
    if ((j->gpus > 0) + (j->gpu_milli > 0) + (j->gpu_mem_mib > 0) > 1)
        return "give only one of gpus, gpu_milli and gpu_mem_mib";
    if (j->gpu_milli >= SCHED_MILLI)
        return "gpu_milli must be 1..999 (whole GPUs go in gpus)";
    if (j->multi_node && j->gpus <= 0 && j->nodes <= 1)
        return "multi_node needs a whole number of gpus";
    if (j->gpus > (int32_t)SCHED_MAX_GPUS_PER_NODE * 1024)
        return "gpus is over the limit";
    const char *mig = NULL;
    if (j->mig_types && sched_job_mig_check(j, &mig))
        return mig;
    return shape_field(j);
}

/* Checks a pending job on its own: sizes, indices, and whether any node could
 * ever hold it. Sets a final reason and returns false if not. Also notes
 * whether it fits the free capacity now (J_FIT0). */
bool shape_validate(struct pass *p, uint32_t i)
{
    const struct sched_cluster *c = p->c;
    const struct sched_job *j = &p->q->jobs[i];
    uint32_t pool = j->pool, type = j->gpu_type;
    const char *field;
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
    field = size_field(j);
    if (field) {
        pass_set_wait(p, i, SCHED_REASON_BAD_SIZE, pool, type, 0, field);
        return false;
    }

    /* Against the cluster: some group must be able to hold it, ever. */
    bool any_match = false, any_size = false, any_quota = false, any_features = !j->nconstraint;
    bool any_type = false; /* a MIG-only job: some group of its pool and type, MIG or not */
    bool fit0 = false;
    uint32_t most_nodes = 0;
    struct view *v = &p->view;
    for (uint32_t g = 0; g < v->ngroups; g++) {
        const struct view_group *grp = &v->groups[g];
        if (pool != SCHED_ANY && grp->pool != pool)
            continue;
        if (sched_job_wants_gpu(j) &&
            (grp->gpu_type == SCHED_NONE || (type != SCHED_ANY && type != grp->gpu_type)))
            continue;
        any_type = true;
        if (sched_job_mig_only(j) && view_group_mig_profile(v, j, g) < 0)
            continue; /* no GPU in MIG mode of a type it has a profile for */
        any_match = true;
        if (!view_group_eligible(v, j, g))
            continue; /* GPU memory constraint */
        for (uint32_t k = 0; !any_features && k < grp->nnodes; k++)
            any_features = sched_job_features_ok(j, c->nodes[grp->nodes[k]].features);
        bool size_ok = group_can_hold(p, j, g);
        if (!size_ok) {
            if (j->nodes > 1) {
                uint32_t have = group_nodes_holding(p, j, g, UINT32_MAX);
                most_nodes = have > most_nodes ? have : most_nodes;
            }
            continue;
        }
        any_size = true;
        int64_t milli = view_job_milli(v, j, g);
        int64_t limit = quota_limit(&p->quota, j->team, g);
        if (limit != INT64_MAX && milli > limit)
            continue;
        any_quota = true;
        if (!fit0 && view_group_may_fit(v, j, g, false))
            fit0 = true;
    }
    if (!any_match && any_type) {
        pass_set_wait(p, i, SCHED_REASON_MIG_NEVER, pool, type, explain_mig_other_of(j, 0, 0),
                      NULL);
        return false;
    }
    if (!any_match) {
        pass_set_wait(p, i, SCHED_REASON_NO_MATCH, pool, type, 0, NULL);
        return false;
    }
    if (!any_features) {
        pass_set_wait(p, i, SCHED_REASON_FEATURES_NEVER, pool, type, 0, NULL);
        return false;
    }
    if (!any_size && j->nodes > 1) {
        pass_set_wait(p, i, SCHED_REASON_NODES_NEVER, pool, type, 0, NULL);
        pass_set_nodes(p, i, most_nodes);
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

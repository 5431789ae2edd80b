/*
 * model.h - what the scheduler core sees: cluster, teams, jobs, policy.
 *
 * Everything here is plain data owned by the caller (the controller or the
 * simulator). The core borrows it for the length of one call and never keeps a
 * pointer into it. Units are integers as DESIGN.md says: GPU shares in
 * milli-GPU (SCHED_MILLI is one whole GPU), memory in MiB, CPUs as whole
 * cores, times in milliseconds.
 *
 * Names are resolved once, by the caller, into indices: a job refers to its
 * pool, GPU type, team and priority class by their index in the cluster's
 * arrays (sched_*_find turn a name into one). Keeping strings out of the hot
 * path is what lets a pass over 100,000 jobs stay in milliseconds. Teams and
 * GPU types also carry a stable `id`: the scheduler state (decayed usage) is
 * keyed by ids, so a restart or a reordered configuration resumes it.
 */
#ifndef GPUORCH_CORE_MODEL_H
#define GPUORCH_CORE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/mig.h"

#define SCHED_MILLI             1000       /* one whole GPU, in milli-GPU */
#define SCHED_ANY               UINT32_MAX /* job's pool or gpu_type: no constraint */
#define SCHED_NONE              UINT32_MAX /* no index */
#define SCHED_MAX_GPUS_PER_NODE 64         /* more per node is rejected by validation */
#define SCHED_MAX_NODES         (1u << 20) /* limits on every caller-controlled count */
#define SCHED_MAX_TEAMS         4096
#define SCHED_MAX_POOLS         1024
#define SCHED_MAX_GPU_TYPES     256
#define SCHED_MAX_CLASSES       64
#define SCHED_MAX_JOBS          (1u << 24)
#define SCHED_LAS_MAX_QUEUES    8
#define SCHED_MAX_FEATURES      64 /* node features: bits of sched_node.features */
#define SCHED_CONSTRAINT_TERMS  4  /* AND-terms of a job's constraint, joined by OR */

enum sched_node_state {
    SCHED_NODE_UP = 0,
    SCHED_NODE_DRAINING, /* running work stays, nothing new starts */
    SCHED_NODE_DOWN,     /* nothing runs; its capacity does not count */
};

/*
 * One physical GPU. MIG: `mig_slices` is the number of compute slices the GPU
 * can be cut into (7 on A100/H100/H200, 0 where MIG is not supported) and
 * `mig_enabled` says MIG mode is on. A GPU in MIG mode is never offered to
 * whole-GPU or fractional requests: its capacity belongs to its instances,
 * `mig[0 .. mig_n)`, the GPU instances the node reports (each a profile of
 * `mig_type` at its start slot: core/mig.h). A job that asks for a MIG
 * profile (sched_job.mig_types) takes one free instance of that profile;
 * which instances are free is the view's business (running allocations name
 * their instance by start slot and profile: sched_share.mig). `mig_type` is the GPU's
 * entry in the MIG catalogue (NULL: the type has no MIG, or MIG is off).
 */
struct sched_mig_instance {
    uint8_t profile; /* index into mig_type->profiles */
    uint8_t start;   /* first memory slot, 0..MIG_SLOTS-1 */
};

struct sched_gpu {
    uint32_t type;         /* index into cluster->gpu_types */
    uint32_t mem_mib;      /* total memory */
    int32_t nvlink_domain; /* same value on one node = one NVLink/NVSwitch fabric; -1 none */
    uint8_t mig_slices;
    bool mig_enabled;
    bool held;     /* offered for no new work: an ended job's processes still run on it
                      (a dirty GPU); work already on it keeps what it holds */
    uint8_t mig_n; /* instances in mig[], when mig_enabled */
    const struct mig_type *mig_type; /* borrowed from the catalogue; NULL: no MIG */
    struct sched_mig_instance mig[MIG_MAX_INSTANCES];
};

struct sched_node {
    const char *name; /* borrowed; for messages only */
    uint32_t pool;    /* index into cluster->pools */
    enum sched_node_state state;
    uint32_t cpus;
    uint64_t mem_mib;   /* host memory */
    uint32_t gpu_first; /* this node's GPUs are cluster->gpus[gpu_first .. +ngpus) */
    uint32_t ngpus;
    uint64_t features; /* bit f: the node has feature f (the caller maps names to bits) */
};

struct sched_gpu_type {
    uint32_t id;      /* stable across restarts; keys the fair-share state */
    const char *name; /* e.g. "H100-80GB" */
};

struct sched_pool {
    const char *name; /* a set of nodes, like a Slurm partition or a Kueue ResourceFlavor */
};

/*
 * A team's share of one pool and GPU type, as Kueue's nominalQuota and
 * borrowingLimit. The team may always use `guaranteed_milli` there (reclaiming
 * it by preemption from borrowers), and beyond it may borrow idle capacity up
 * to `borrow_limit_milli` more (-1: no limit). Borrowed work is preemptible.
 */
struct sched_quota {
    uint32_t pool;
    uint32_t gpu_type;
    int64_t guaranteed_milli;
    int64_t borrow_limit_milli;
};

struct sched_team {
    uint32_t id;      /* stable across restarts; keys the fair-share state */
    const char *name; /* borrowed */
    uint32_t weight;  /* fair-share target above the floor; >= 1 */
    /* Borrowing limit for every pool and type the team has no quota entry for
     * (its guarantee there is 0); -1: no limit. */
    int64_t borrow_limit_milli;
    const struct sched_quota *quotas; /* borrowed; at most one per (pool, gpu_type) */
    uint32_t nquotas;
};

struct sched_prio_class {
    const char *name; /* borrowed */
    int32_t order;    /* higher runs first */
    bool may_preempt; /* may evict running work of a lower order */
};

struct sched_cluster {
    const struct sched_node *nodes;
    uint32_t nnodes;
    const struct sched_gpu *gpus;
    uint32_t ngpus;
    const struct sched_pool *pools;
    uint32_t npools;
    const struct sched_gpu_type *gpu_types;
    uint32_t ngpu_types;
    const struct sched_team *teams;
    uint32_t nteams;
    const struct sched_prio_class *classes;
    uint32_t nclasses;
};

/*
 * A job's request. The GPU part is exactly one of: `gpus` whole GPUs, a
 * fraction `gpu_milli` (1..999) of one GPU, or `gpu_mem_mib` of one GPU's
 * memory; all three zero is a CPU-only job. A fraction also takes that share
 * of the GPU's memory, and a memory request that share of its compute
 * (rounded up), so both kinds pack by the same two numbers.
 *
 * `multi_node`: a whole-GPU job that may span nodes as a gang (all or nothing,
 * on the fewest nodes); its CPUs and host memory are split over the nodes in
 * proportion to the GPUs each holds. Otherwise a job never leaves one node.
 *
 * `nodes` N > 1 is Slurm's --nodes: exactly N distinct nodes of one group,
 * each holding gpus/N whole GPUs, cpus/N CPUs and mem_mib/N MiB (the totals
 * must divide by N; a share of one GPU cannot be spread), whatever
 * multi_node says; 0 or 1: as above. `exclusive`: only wholly free nodes
 * (every GPU offered and free, every CPU and MiB free), and the allocation
 * holds all of each node it gets, which quota and fair share charge.
 * `mem_whole_node` (--mem=0): each node's whole host memory, on nodes where
 * no job holds memory; mem_mib must then be 0. `constraint`: the node's
 * features must hold every bit of at least one of the first `nconstraint`
 * masks (an OR of AND-terms, as Slurm's "a&b|c"); 0 terms: any node.
 *
 * Sizes are signed so that a negative value coming from an API or a trace is
 * reported as such rather than wrapping into a huge request.
 */
struct sched_job {
    uint64_t id;             /* unique; ties in every order go to the lower id */
    int64_t submit_ms;       /* time the job (or its requeue) entered the queue */
    uint32_t team;           /* index into cluster->teams */
    uint32_t prio;           /* index into cluster->classes */
    uint32_t pool;           /* index into cluster->pools, or SCHED_ANY */
    uint32_t gpu_type;       /* index into cluster->gpu_types, or SCHED_ANY */
    int32_t gpus;            /* whole GPUs */
    int32_t gpu_milli;       /* or a fraction of one GPU */
    int64_t gpu_mem_mib;     /* or an amount of one GPU's memory */
    int64_t min_gpu_mem_mib; /* each GPU used must have at least this much memory */
    int32_t cpus;
    int32_t nodes;         /* exactly this many nodes when > 1 */
    int64_t mem_mib;       /* host memory */
    int64_t time_limit_ms; /* 0: none (backfill then uses policy->default_time_limit_ms) */
    uint32_t project;      /* caller's label ids: carried, never interpreted */
    uint32_t model;
    bool multi_node;
    bool checkpointable; /* can resume after preemption; LAS only preempts these */
    bool exclusive;
    bool mem_whole_node;
    uint8_t nconstraint; /* terms used in constraint (0..SCHED_CONSTRAINT_TERMS) */
    uint64_t constraint[SCHED_CONSTRAINT_TERMS];
    /* A MIG instance: bit t of mig_types set means that on a MIG GPU of
     * catalogue type t (mig_type_at(t)) the job takes one instance of
     * profile mig_profile[t] (an index into that type's profiles). The
     * caller resolves the request once (mig_request_resolve for each type):
     * a profile by name ("--gpus 1g.10gb") sets the types that have it and
     * leaves gpus, gpu_milli and gpu_mem_mib 0, so the job runs only on an
     * instance; a GPU memory request (gpu_mem_mib) may also set the types
     * with a profile large enough, and then takes either a share of a
     * GPU not in MIG mode or an instance. 0: no MIG. */
    uint8_t mig_types;
    uint8_t mig_profile[MIG_NTYPES];
};

/* One GPU's part of an allocation. On a MIG GPU (`mig` true) it is one
 * instance, named by its start slot; milli is the instance's charge
 * (mig_profile_charge_milli) and mem_mib its memory. */
struct sched_share {
    uint32_t gpu;        /* index into cluster->gpus */
    uint32_t milli;      /* 1000 for a whole GPU */
    uint32_t mem_mib;    /* GPU memory held */
    bool mig;            /* a MIG instance of the GPU */
    uint8_t mig_start;   /* with mig: the instance's start slot */
    uint8_t mig_profile; /* with mig: index into the GPU's mig_type->profiles */
};

/* One node's part of an allocation. */
struct sched_node_part {
    uint32_t node;
    uint32_t cpus;
    uint64_t mem_mib;
};

struct sched_alloc {
    struct sched_node_part *nodes;
    uint32_t nnodes;
    struct sched_share *shares;
    uint32_t nshares;
};

/* A job that holds resources now. Everything is borrowed from the caller. */
struct sched_running {
    const struct sched_job *job;
    struct sched_alloc alloc;
    int64_t start_ms;
    int64_t checkpoint_ms; /* last checkpoint of a checkpointable job; 0: none */
    bool borrowed;         /* started over its team's guarantee: a reclaim may evict it */
    bool preempting;       /* the caller has signalled it; it frees its resources on exit */
};

struct sched_queue {
    const struct sched_job *jobs;
    size_t njobs;
};

struct sched_running_set {
    const struct sched_running *jobs;
    size_t njobs;
};

enum sched_order {
    SCHED_ORDER_FIFO = 0,  /* submit time only; priority classes ignored for order */
    SCHED_ORDER_PRIORITY,  /* priority class, then submit time */
    SCHED_ORDER_FAIRSHARE, /* class, then team's dominant share over weight, then submit */
    SCHED_ORDER_LAS,       /* class, then least attained GPU-service queue, then submit */
};

/* How a team's own jobs are ordered among themselves under fairshare (the
 * teams themselves are ordered by fair share). */
enum sched_within {
    SCHED_WITHIN_SUBMIT = 0, /* submit time: each team's queue is FIFO */
    SCHED_WITHIN_LAS,        /* Tiresias within the team: least attained service queue
                              * first, and a job may evict its own team's checkpointable
                              * jobs of a more-served queue */
};

enum sched_packing {
    SCHED_PACK_BINPACK = 0, /* tightest fit: keeps whole nodes free for large jobs */
    SCHED_PACK_SPREAD,      /* loosest fit: spreads load and heat */
};

struct sched_policy {
    enum sched_order order;
    enum sched_within within; /* under fairshare only */
    enum sched_packing packing;
    bool backfill;
    bool preemption;
    /* With preemption: a single-node job that finds no node with room, while
     * enough GPUs are free, moves checkpointable single-node jobs off one
     * node onto free GPUs elsewhere (each evicted and held a place to restart
     * at once), so that fragmented free GPUs serve it. */
    bool migrate;
    int64_t fairshare_half_life_ms;
    /* LAS: attained GPU-service (milli-GPU x ms / 1000, i.e. GPU-ms) thresholds that
     * move a job to the next queue; nlas_thresholds + 1 queues. */
    uint32_t nlas_thresholds;
    int64_t las_thresholds_gpu_ms[SCHED_LAS_MAX_QUEUES - 1];
    /* LAS may evict a running job larger than the waiting job it makes room
     * for. Off by default: that strands GPUs and requeues work that is harder
     * to place than what it admits; on traces of long, large jobs it brings
     * LAS nearer SRTF (docs/simulator.md). */
    bool las_evict_larger;
    int64_t preempt_grace_ms;      /* SIGTERM to SIGKILL; also the estimated wait */
    int64_t default_time_limit_ms; /* runtime assumed for jobs without a limit */
    /* Tuning, not policy: candidates ranked between two checks of whether the
     * rest of the queue is frozen (then settled in one sweep). 0: the default
     * (every 256, or every shape's count if more). Results never depend on
     * it; the tests check that. */
    uint32_t frozen_check_every;
};

/* Sets *ret to the default policy (see docs/scheduling.md for the why):
 * fairshare order between teams and LAS within each, backfill on, preemption
 * on, binpack, 7-day half-life, LAS thresholds 4, 40 and 400 GPU-hours, 30 s
 * grace, 24 h default limit. */
void sched_policy_default(struct sched_policy *ret);

/* Names of the enums above, for messages and configuration ("fifo", "binpack", ...). */
const char *sched_order_name(enum sched_order order);
const char *sched_packing_name(enum sched_packing packing);
const char *sched_within_name(enum sched_within within);
/* Parse a name; 0 and *ret set on success, GPO_EINVAL otherwise. */
int sched_order_parse(const char *name, enum sched_order *ret);
int sched_packing_parse(const char *name, enum sched_packing *ret);
int sched_within_parse(const char *name, enum sched_within *ret);

/* Checks a policy's fields are in range. 0 or GPO_EINVAL; *ret_field (may be
 * NULL) is set to the name of the first bad field. */
int sched_policy_check(const struct sched_policy *policy, const char **ret_field);

/*
 * Checks the cluster is consistent: every index in range, GPU ranges inside
 * the GPU array and not shared between nodes, counts under the SCHED_MAX_*
 * limits, weights >= 1, quotas non-negative; and MIG: mig_n at most
 * MIG_MAX_INSTANCES, instances only with mig_enabled, mig_type a catalogue
 * entry (set wherever a GPU in MIG mode reports instances), the layout one
 * mig_layout_check accepts, and one mig_type for all GPUs of one gpu_type.
 * 0 or GPO_EINVAL / GPO_E2BIG; *ret_what (may be NULL) names the first
 * problem and its field ("gpu: mig_type is NULL on a MIG GPU with instances").
 */
int sched_cluster_check(const struct sched_cluster *cluster, const char **ret_what);

/* Index of the pool, GPU type, team or class with this name, or
 * GPO_ENOENT (negative). Linear: for configuration time, not passes. */
int64_t sched_pool_find(const struct sched_cluster *cluster, const char *name);
int64_t sched_gpu_type_find(const struct sched_cluster *cluster, const char *name);
int64_t sched_team_find(const struct sched_cluster *cluster, const char *name);
int64_t sched_class_find(const struct sched_cluster *cluster, const char *name);

/* The quota entry of a team for (pool, gpu_type), or NULL (guarantee 0, the
 * team's default borrowing limit; also for a NULL team). */
const struct sched_quota *sched_team_quota(const struct sched_team *team, uint32_t pool,
                                           uint32_t gpu_type);

/* GPU milli and GPU memory that `job` takes on one GPU of `gpu` kind (0 and 0
 * for a CPU-only job). Whole GPUs take all of both. A NULL argument sets nothing. */
void sched_job_gpu_claim(const struct sched_job *job, const struct sched_gpu *gpu,
                         uint32_t *ret_milli, uint32_t *ret_mem_mib);

/* Total milli-GPU a job takes on GPUs with `gpu_mem_mib` of memory each:
 * gpus * 1000, its fraction, or its memory's share of such a GPU (rounded up).
 * GPO_EINVAL for a NULL job. */
int64_t sched_job_milli(const struct sched_job *job, uint32_t gpu_mem_mib);

/* Does the job ask for a GPU at all (whole GPUs, a fraction or GPU memory)? */
static inline bool sched_job_wants_gpu(const struct sched_job *job)
{
    return job->gpus > 0 || job->gpu_milli > 0 || job->gpu_mem_mib > 0 || job->mig_types != 0;
}

/* The profile index the job takes on a MIG GPU of catalogue type t, or -1
 * where it takes none there (no bit for t, or t NULL). */
static inline int sched_job_mig_profile(const struct sched_job *job, const struct mig_type *t)
{
    if (!t || t->id >= MIG_NTYPES || !(job->mig_types & (1u << t->id)))
        return -1;
    return job->mig_profile[t->id];
}

/* Checks a job's MIG fields: bits only for catalogue types, each set bit's
 * profile index in range for its type, and a MIG request alone (by profile)
 * or with gpu_mem_mib, on one node: not with gpus, gpu_milli, multi_node,
 * nodes > 1 or exclusive. 0 or GPO_EINVAL with *ret_field (may be NULL) a
 * sentence naming the field. */
int sched_job_mig_check(const struct sched_job *job, const char **ret_field);

/* Does the job run only on a MIG instance (a profile by name)? */
static inline bool sched_job_mig_only(const struct sched_job *job)
{
    return job->mig_types != 0 && job->gpus <= 0 && job->gpu_milli <= 0 && job->gpu_mem_mib <= 0;
}

/* Is the job a gang over several nodes: exactly `nodes` > 1, or the fewest
 * nodes for its whole GPUs (multi_node)? */
static inline bool sched_job_gang(const struct sched_job *job)
{
    return job->nodes > 1 || (job->nodes == 0 && job->multi_node && job->gpus > 0);
}

/* Does the job ask for more than capacity: a node count, whole nodes, a
 * node's whole memory or node features? Such jobs are never migrated. */
static inline bool sched_job_shaped(const struct sched_job *job)
{
    return job->nodes > 1 || job->exclusive || job->mem_whole_node || job->nconstraint > 0;
}

/* Do node features `features` satisfy the job's constraint? */
static inline bool sched_job_features_ok(const struct sched_job *job, uint64_t features)
{
    if (!job->nconstraint)
        return true;
    for (uint32_t t = 0; t < job->nconstraint && t < SCHED_CONSTRAINT_TERMS; t++) {
        if ((features & job->constraint[t]) == job->constraint[t])
            return true;
    }
    return false;
}

/* May new work be placed on this GPU (not in MIG mode, not held)? */
static inline bool sched_gpu_offered(const struct sched_gpu *gpu)
{
    return !gpu->mig_enabled && !gpu->held;
}

#endif

/*
 * view.h - the free capacity of the cluster during one pass, and placement.
 *
 * A view is built from the cluster and the running set: what each GPU and node
 * has free. Nodes are grouped by (pool, GPU type), the unit of quotas and of
 * aggregate checks: each group keeps the largest number of whole GPUs free on
 * one node, the most milli-GPU free on one GPU, and their sums, so that a job
 * that cannot fit anywhere is rejected in O(1) instead of by a scan. That is
 * what keeps a pass over a full cluster with 100,000 pending jobs cheap.
 *
 * Placement (view_place) finds GPUs and nodes for one job:
 *  - a one-node job never leaves its node; a multi-node gang takes the fewest
 *    nodes, all or nothing, from one group; an exact-N gang N distinct nodes
 *    of one group, an even share on each;
 *  - an exclusive job takes wholly free nodes and holds all of them; a job
 *    with a node's whole memory takes nodes where no job holds memory; a
 *    constraint admits only nodes whose features satisfy it;
 *  - binpack takes the tightest node that fits (whole nodes stay free for big
 *    jobs), spread the loosest; ties go to the lower node index;
 *  - a multi-GPU job prefers GPUs of one NVLink domain;
 *  - a fractional job goes onto a GPU that is already shared before a fresh
 *    GPU is opened;
 *  - a MIG job (sched_job.mig_types) takes one free instance of its profile
 *    on a GPU in MIG mode: on each node the instance mig_place picks (the
 *    GPU with the least free space, there the instance whose use leaves the
 *    best free capacity); across nodes binpack takes the pick with the
 *    fewest free slots on its GPU, then the best capacity left, spread the
 *    most free slots (ties to the lower node). A GPU memory request that may
 *    also take an instance tries, in order: a non-MIG GPU already shared, a
 *    MIG instance, a fresh non-MIG GPU (so instances are used before a
 *    whole GPU is opened for a share). GPUs in MIG mode never take whole-GPU
 *    or fractional work, and a MIG-only job never takes a non-MIG GPU.
 * Nodes held by a reservation are offered only to jobs that end before it
 * starts.
 *
 * MIG in the view: each MIG GPU's free instances (view_gpu.mig_free; an
 * instance is busy while a running allocation's share names it by GPU,
 * start slot and profile), each node's count of them, and each group's
 * count per profile (mig_free, over usable nodes) for the O(1) test. A MIG
 * GPU is one that is in MIG mode with a catalogue type (mig_enabled and
 * mig_type), not held.
 */
#ifndef GPUORCH_CORE_VIEW_H
#define GPUORCH_CORE_VIEW_H

#include <stdbool.h>
#include <stdint.h>

#include "core/model.h"

struct view_gpu {
    uint32_t free_milli;
    uint32_t free_mem_mib;
    uint8_t mig_free; /* MIG GPU: bit k set while instance k of its mig[] is free */
};

struct view_node {
    uint32_t free_cpus;
    uint64_t free_mem_mib;
    uint32_t group;
    uint16_t free_whole; /* GPUs wholly free (and not in MIG mode) */
    uint16_t nshared;    /* GPUs partly used that still have milli free */
    bool usable;         /* up: new work may start here */
    uint16_t mig_free;   /* free MIG instances on its GPUs (any profile) */
    int32_t resv;        /* index of the reservation holding the node, or -1 */
};

struct view_group {
    uint32_t pool;
    uint32_t gpu_type; /* SCHED_NONE: nodes without GPUs */
    uint32_t *nodes;   /* ascending node indices */
    uint32_t nnodes;
    uint32_t gpu_mem_mib;   /* largest GPU memory in the group */
    uint32_t max_node_gpus; /* largest node, whatever its state */
    uint32_t max_node_cpus;
    uint64_t max_node_mem_mib;
    bool
        uniform; /* every node has the same GPU count, CPUs and memory, every GPU the same memory */
    uint64_t total_gpus; /* all GPUs, whatever their state */
    int64_t cap_milli;   /* GPUs of usable nodes: not in MIG mode, or MIG GPUs (one GPU each) */
    /* MIG: the catalogue type of the group's MIG GPUs (NULL: none), and per
     * profile the instances on usable nodes (fixed for the pass) */
    const struct mig_type *mig_type;
    uint32_t mig_total[MIG_MAX_PROFILES];
    /* GPUs offered to whole-GPU and fractional work (not MIG, not held) on
     * usable nodes: the most on one node, and all (fixed for the pass) */
    uint32_t max_node_plain;
    uint64_t plain_gpus;
    /* aggregates over usable nodes; "open" ones leave reserved nodes out */
    bool dirty;
    uint32_t max_free_whole, max_free_whole_open;
    uint64_t sum_free_whole, sum_free_whole_open;
    uint32_t max_free_milli, max_free_milli_open;                         /* on one GPU */
    uint32_t mig_free[MIG_MAX_PROFILES], mig_free_open[MIG_MAX_PROFILES]; /* free instances */
    int32_t resv_latest; /* of the reservations holding usable nodes here, the one that
                          * starts last (-1: none): a job ending after it can use no
                          * reserved node of the group */
};

struct view_resv {
    uint64_t job;
    int64_t start_ms; /* nodes are free to jobs that end by then; INT64_MAX: never */
};

struct view {
    const struct sched_cluster *cluster;
    enum sched_packing packing;
    struct view_gpu *gpus;
    struct view_node *nodes;
    struct view_group *groups;
    uint32_t ngroups;
    bool clone; /* made by view_clone: the read-only tables are src's */
    /* read-only after view_init, shared with clones: */
    uint32_t *gpu_node;    /* GPU index -> node index */
    uint32_t *group_nodes; /* storage behind groups[].nodes */
    uint32_t
        *group_index; /* [pool * (ngpu_types + 1) + type or ngpu_types] -> group or SCHED_NONE */
    struct view_resv *resvs;
    uint32_t nresvs, resvs_cap;
    uint32_t *node_scratch; /* nnodes entries, for placement */
    /* Quota headroom per group (milli-GPU) for the job being placed, or NULL:
     * a memory request's share depends on the GPU it lands on, so placement
     * checks it GPU by GPU. Set by the caller around view_place. */
    const int64_t *headroom;
    /* Running jobs (indices into the running set) whose allocation took more
     * than a GPU or node had: a double booking or a node that shrank. */
    uint32_t *overcommitted;
    uint32_t novercommitted;
};

/* Builds the view: groups, then subtracts every running allocation. Returns 0,
 * GPO_ENOMEM, or GPO_EINVAL when an allocation names an index out of range
 * (ret_bad_job then set to its id). An allocation that takes more than a GPU
 * or node has is not an error: the GPU or node is left full (nothing new goes
 * there) and the job is listed in view->overcommitted, for the caller to
 * report. One inconsistent node must not stop the whole cluster's scheduling.
 * The view borrows `cluster` until view_release. */
int view_init(struct view *view, const struct sched_cluster *cluster,
              const struct sched_running_set *running, enum sched_packing packing,
              uint64_t *ret_bad_job);
void view_release(struct view *view);

/* Makes dst a copy of src's free capacity and reservations, sharing src's
 * read-only tables (src must outlive dst; view_release(dst) leaves them).
 * 0 or GPO_ENOMEM. */
int view_clone(struct view *dst, const struct view *src);

/* Group of (pool, gpu_type) or SCHED_NONE; gpu_type SCHED_NONE for nodes without GPUs. */
uint32_t view_group_of(const struct view *view, uint32_t pool, uint32_t gpu_type);

/* Whether the job's pool, type, and memory constraints admit group g. */
bool view_group_eligible(const struct view *view, const struct sched_job *job, uint32_t g);

/* The job's profile on group g's MIG GPUs, or -1 (the group has none of
 * the job's MIG types). */
static inline int view_group_mig_profile(const struct view *view, const struct sched_job *job,
                                         uint32_t g)
{
    return job->mig_types ? sched_job_mig_profile(job, view->groups[g].mig_type) : -1;
}

int64_t view_job_milli_mig(const struct view *view, const struct sched_job *job, uint32_t g);

/* Milli-GPU the job is charged in group g (quota, fair share, LAS): as
 * sched_job_milli on the group's GPUs, and for a MIG job the instance's
 * charge (mig_profile_charge_milli); a memory request that may take either
 * is charged the lesser (placement then checks headroom GPU by GPU). */
static inline int64_t view_job_milli(const struct view *view, const struct sched_job *job,
                                     uint32_t g)
{
    if (!job->mig_types)
        return sched_job_milli(job, view->groups[g].gpu_mem_mib);
    return view_job_milli_mig(view, job, g);
}

/* Free instances (open: on nodes no reservation holds) and instances of
 * the job's profile in group g, after a refresh; 0 and 0 where the job
 * takes none there. */
void view_group_mig_count(struct view *view, const struct sched_job *job, uint32_t g, bool open,
                          uint32_t *ret_free, uint32_t *ret_total);

/* Could the job fit group g were every running job gone (its offered GPUs,
 * MIG instances and node sizes; not host resources, not reservations)? A
 * job for which no allowed group could is not worth a look-ahead. */
bool view_group_could_hold(const struct view *view, const struct sched_job *job, uint32_t g);

/* Recomputes g's aggregates if they are stale. */
void view_group_refresh(struct view *view, uint32_t g);

/* O(1) test after refresh: could the job fit in g's free capacity? `open`:
 * only nodes no reservation holds. */
bool view_group_may_fit(struct view *view, const struct sched_job *job, uint32_t g, bool open);

/* The same for a job ending at end_ms: counts reserved nodes only if it could
 * end before the latest reservation there starts. Sets *ret_resv to the
 * reservation in the way when that is all that stops it (else -1). */
bool view_group_may_fit_by(struct view *view, const struct sched_job *job, uint32_t g,
                           int64_t end_ms, bool ignore_resv, int32_t *ret_resv);

/* Takes (give = false) or gives back (give = true) an allocation's resources.
 * Taking saturates at zero; returns true if it had to (over capacity). */
bool view_apply(struct view *view, const struct sched_alloc *alloc, bool give);

/*
 * A log of what view_apply_logged changed, so that view_undo can put the view
 * back exactly: backfill's look-ahead and preemption planning try releases on
 * the live view instead of copying it.
 */
struct view_undo {
    uint32_t *gpu;
    struct view_gpu *gpu_old;
    size_t ngpu, gpu_cap;
    uint32_t *node;
    struct view_node *node_old;
    size_t nnode, node_cap;
};

/* view_apply, recording the GPUs and nodes it touches first. 0 or GPO_ENOMEM
 * (nothing applied). */
int view_apply_logged(struct view *view, const struct sched_alloc *alloc, bool give,
                      struct view_undo *log);
/* Restores everything logged since the log was empty, newest first, and empties it. */
void view_undo(struct view *view, struct view_undo *log);
void view_undo_release(struct view_undo *log);

/* Adds a reservation; returns its index or GPO_ENOMEM. */
int view_resv_add(struct view *view, uint64_t job, int64_t start_ms);
/* Marks node n held by reservation r (first holder wins). */
void view_resv_hold(struct view *view, uint32_t r, uint32_t node);

/* Could the job start on node n alone, free capacity and eligibility only
 * (no reservations; quota only as view->headroom prices a share of a GPU)?
 * A fewest-nodes gang counts as fitting when its whole request fits there;
 * an exact-N gang when one member (its per-node share) does. */
bool view_node_fits(const struct view *view, const struct sched_job *job, uint32_t n);

/* Node n as the job's node-level asks go: its features hold the constraint;
 * for exclusive, it is wholly free; for exclusive or a whole node's memory,
 * no job holds memory there. */
bool view_node_admits(const struct view *view, const struct sched_job *job, uint32_t n);

/* Whole GPUs the job needs on each node it gets: gpus/nodes for an exact-N
 * gang, else gpus (0 without whole GPUs). */
static inline uint32_t view_job_node_gpus(const struct sched_job *job)
{
    if (job->gpus <= 0)
        return 0;
    return job->nodes > 1 ? (uint32_t)(job->gpus / job->nodes) : (uint32_t)job->gpus;
}

/* Whole GPUs of node n the job could use (free, not MIG, memory constraint). */
uint32_t view_node_whole_for(const struct view *view, const struct sched_job *job, uint32_t n);

/* What blocked a failed placement, for explanations. */
enum view_miss {
    VIEW_MISS_GPU = 1 << 0,   /* no node with the GPUs free */
    VIEW_MISS_HOST = 1 << 1,  /* GPUs free, but not the CPUs or host memory beside them */
    VIEW_MISS_GANG = 1 << 2,  /* gang: not enough nodes together */
    VIEW_MISS_RESV = 1 << 3,  /* would fit on nodes a reservation holds */
    VIEW_MISS_NODES = 1 << 4, /* exact-N gang: fewer than N nodes could take a member */
    VIEW_MISS_SHAPE = 1 << 5, /* nodes refused by features, exclusivity, whole memory */
};

/* Placement output: scratch arrays owned by the caller, sized for the job. */
struct view_place {
    struct sched_node_part *nodes;
    uint32_t nnodes;
    struct sched_share *shares;
    uint32_t nshares;
    uint32_t group;
    int32_t blocking_resv; /* with VIEW_MISS_RESV: the reservation in the way */
    uint32_t nodes_have;   /* exact-N gang: the most nodes of one group that could take a member */
};

/*
 * Finds a placement for `job` among the groups g with allowed[g] true (NULL:
 * all eligible groups), not using reserved nodes unless the job ends
 * (`end_ms`) by the reservation's start, or `ignore_resv`. Returns true and
 * fills *out (whose arrays must hold max(1, gpus, nodes) entries each, and
 * `out->nodes` as many as the group has nodes; `out->shares` every GPU of
 * the cluster for an exclusive job); the view is not changed
 * (view_apply does that). Returns false and sets *ret_miss otherwise.
 */
bool view_place(struct view *view, const struct sched_job *job, const bool *allowed, int64_t end_ms,
                bool ignore_resv, struct view_place *out, unsigned *ret_miss);

#endif

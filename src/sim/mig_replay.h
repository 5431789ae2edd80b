/*
 * mig_replay.h - `gpuorch sim --mig`: a job trace replayed on MIG-capable
 * nodes without MIG, with a static layout on every GPU, or with the core's
 * dynamic planner (core/mig.h's mig_place and mig_plan, driven directly).
 *
 * The replay is its own small event loop, not sim/engine.c's: the core's
 * scheduler pass does not know MIG instances yet. It is the same for every
 * mode, so that only the sharing differs:
 *
 *  - queue: FIFO with backfill by fit. At every event, the pending pods are
 *    tried in submit order and each one that fits starts; a pod that does
 *    not fit waits without holding back those behind it (no reservation).
 *  - a pod with a fraction f of a GPU needs ceil(8 f) of its 8 memory slots
 *    (its memory share: 0.46 of 80 GB is 36.8 GB, 4 slots of 10 GB); under
 *    MIG it takes the smallest compute profile of at least that many slots,
 *    fewest compute slices first (0.46 -> 3g.40gb, 0.2 -> 1g.20gb,
 *    0.8 -> 7g.80gb); a pod of k whole GPUs takes k full-GPU instances (7g)
 *    on one node.
 *  - exclusive: every pod takes whole GPUs (ceil(f)), MISO's
 *    "unpartitioned"; shared: fractions packed onto one GPU while their sum
 *    is at most 1, with no isolation (what gpuorch does today without MIG).
 *  - static: every GPU keeps its layout; a pod takes a free instance of its
 *    profile, else the smallest free larger one (own_profile: only its
 *    own); a pod for which no GPU has such an instance is unschedulable.
 *  - dynamic: the GPUs start with `initial`; at every event and whenever a
 *    damping rule's time runs out, mig_plan gets the pending demand (per
 *    profile, in queue order of first appearance); each GPU plan takes
 *    `repartition_delay_ms`, during which the GPU is frozen and the
 *    instances it destroys are unusable, then mig_gpu_plan_apply. A pod of
 *    several GPUs is planned for on one node: the node with the most GPUs
 *    that hold no busy instance, with a planner state of its own. Pods
 *    take larger free instances as under static unless own_profile.
 *
 * Times in the trace are seconds; the replay works in milliseconds.
 */
#ifndef GPUORCH_SIM_MIG_REPLAY_H
#define GPUORCH_SIM_MIG_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/mig.h"
#include "sim/trace.h"

#define SIM_MIG_MAX_GPUS_PER_NODE 16
#define SIM_MIG_MAX_NODES         10000
#define SIM_MIG_MAX_SEGMENTS      16

enum sim_mig_mode {
    SIM_MIG_EXCLUSIVE, /* no MIG: whole GPUs per pod */
    SIM_MIG_SHARED,    /* no MIG: fractions packed, no isolation */
    SIM_MIG_STATIC,
    SIM_MIG_DYNAMIC,
};

/* One GPU's layout (a named one, counts or MIG off). */
struct sim_mig_layout {
    bool enabled; /* false: MIG off, the GPU is one whole-GPU instance */
    uint8_t n;
    struct mig_instance inst[MIG_MAX_INSTANCES];
};

struct sim_mig_opts {
    enum sim_mig_mode mode;
    const struct mig_type *type;
    uint32_t nodes, gpus_per_node;
    /* static: the cluster's GPUs in node order, segs[0].gpus of them with
     * segs[0].layout, then the next segment's (the counts sum to the
     * cluster's GPUs); dynamic: every GPU starts with segs[0].layout. */
    struct {
        struct sim_mig_layout layout;
        uint32_t gpus;
    } segs[SIM_MIG_MAX_SEGMENTS];
    size_t nsegs;
    struct mig_plan_spec plan;
    int64_t repartition_delay_ms; /* >= 0 */
    /* A pod takes an instance of its own profile only, never a larger free
     * one (under dynamic, the planner makes its profile instead; a static
     * layout without it makes the pod unschedulable). */
    bool own_profile;
    double compress;        /* > 0: submit times (from the first kept) divided by it */
    int64_t max_duration_s; /* > 0: durations cut to it; 0: as in the trace */
};

struct sim_mig_result {
    size_t jobs;          /* GPU pods replayed */
    size_t unschedulable; /* pods that can never start (left out of the averages) */
    size_t stuck;         /* pods still waiting when nothing else could happen (a bug: 0) */
    double jct_avg_s, wait_avg_s, wait_p99_s;
    double makespan_s;           /* last end minus first submit */
    double stranded_gpus;        /* time-weighted GPUs idle while pods wait that no waiting pod
                                    can use as the layout stands (sim_mig_run) */
    double busy_gpu_hours;       /* charged GPU-time: slots / 8 of each instance, the share
                                    when shared, whole GPUs when exclusive */
    double capacity_gpu_hours;   /* the cluster's GPUs over the makespan */
    uint64_t repartitions;       /* GPU plans applied (dynamic) */
    uint64_t destroyed, created; /* instances, by those plans */
    uint64_t events;             /* steps of the event loop */
};

/*
 * Replays the GPU pods of `trace` (CPU-only rows are skipped) under `o`.
 * Fills *out. 0; GPO_EINVAL with one line in `err` for bad options or when
 * the replay breaks an invariant (a plan that names a busy instance, a plan
 * that does not apply); GPO_ENOMEM.
 *
 * Stranded capacity, sampled after every step and weighted by the time to
 * the next: while a pod waits, the free capacity no waiting pod can use now
 * or, under dynamic, after a create: free instances of profiles no waiting
 * pod takes (a free full instance serves a waiting pod of k GPUs only on a
 * node with k of them); slots outside every instance (static: all of them;
 * dynamic: where no waiting pod's profile has a placement, an empty GPU
 * counting as a full instance for pods of several GPUs); shared: a GPU's free
 * share smaller than every waiting fraction (and not a whole free GPU a
 * waiting whole-GPU pod could take); exclusive and whole GPUs: free GPUs on
 * nodes where no waiting pod fits. 0 while nothing waits.
 */
int sim_mig_run(const struct sim_trace *trace, const struct sim_mig_opts *o,
                struct sim_mig_result *out, char *err, size_t errlen);

/* The profile index of type t a share of `gpu_milli` (1..999) takes, by the
 * rule above; or the largest (7g) for whole GPUs. */
int sim_mig_profile_for_share(const struct mig_type *t, int64_t gpu_milli);

/*
 * One GPU's layout from its spelling: a named layout (mig_layout_named:
 * "all-balanced", "all-1g.10gb", "all-disabled") or counts,
 * "3g.40gb=1+2g.20gb=1+1g.10gb=2" (mig_layout_from_counts). 0, or
 * GPO_EINVAL / GPO_ENOENT with `err` naming what is wrong.
 */
int sim_mig_layout_parse(const struct mig_type *t, const char *spec, struct sim_mig_layout *ret,
                         char *err, size_t errlen);

#endif

/*
 * mig.h - NVIDIA MIG in the core: the profile catalogue, layouts, the
 * placement of one request onto instances, and the dynamic planner that
 * turns idle capacity into the profiles the queue asks for (issue 25).
 *
 * Pure: no I/O, no clock, no allocation. Every function works on plain
 * structs the caller owns; `now_ms` is a parameter. The catalogue is static
 * const data: a `const struct mig_type *` is valid for the whole program.
 *
 * The model. A MIG GPU has 8 memory slots (0..7) and 7 compute slices. An
 * instance is a profile at a placement: a start slot and a size in memory
 * slots (a 3g instance takes 4 slots and starts at 0 or 4). The driver
 * refuses a placement that overlaps another instance's slots, and that is
 * the only constraint between instances (nvmlDeviceCreateGpuInstance-
 * WithPlacement: "Creation of new GPU instance will fail if there is overlap
 * with the already occupied memory slices"); every non-overlapping set of
 * valid placements fits within the 7 compute slices, since slot 7 is only
 * ever taken by profiles with fewer compute slices than memory slots.
 *
 * The charge. A MIG instance is charged by its memory slots: `size / 8` of
 * a GPU, in milli (1g: 125, 1g.20gb and 2g: 250, 3g and 4g: 500, 7g: 1000).
 * Slots, not compute slices, because the slots are what an instance takes
 * from others: four 1g.20gb instances fill an H100 (4 x 250 = 1000) though
 * they use 4 of its 7 compute slices, and two 3g instances fill it (2 x 500)
 * with 6 of 7. By slots the charges of every valid layout sum to at most
 * 1000, and a full layout sums to 1000 except where slot 7 is left to no one
 * (seven 1g: 875). Compute slices would charge a 1g.20gb 143 for a quarter
 * of the GPU. mig_profile_charge_milli gives it.
 *
 * Profiles in the catalogue: A100-40GB, A100-80GB, H100-80GB, H200-141GB,
 * each with its six compute profiles and its one media-extension profile
 * (1g.*+me: one 1g instance of the GPU may hold the media engines; NVML id
 * 20). The guide's 2g+me profile is A30's, not one of these types'. Memory is what the driver
 * reports for the profile
 * (`nvidia-smi mig -lgip`), which is a little less than the name says
 * (1g.10gb on an H100: 9984 MiB); where a node reports its own profiles,
 * its figures win (the wiring wave). Sources in mig.c.
 *
 * How it is meant to be used:
 *
 *  - Input validation (config, `apply -f`, job submission): mig_type_lookup,
 *    mig_profile_lookup, mig_profile_check (a name on any type, for a job
 *    without a GPU type), mig_profile_for_mem, mig_layout_check (a layout
 *    by placements), mig_layout_from_counts (by counts, as mig-parted) and
 *    mig_layout_named. Each fills `err` with a sentence naming the bad field
 *    and what was expected, and returns GPO_ENOENT (no such type or profile)
 *    or GPO_EINVAL (a bad value, a layout that breaks the placement table).
 *    Nothing is changed on error.
 *
 *  - The scheduler pass (core/view.h, sched_pass): the caller gives each
 *    GPU its reported instances (sched_gpu.mig, mig_type) and a job its
 *    profile per MIG type (sched_job.mig_types, mig_profile, resolved with
 *    mig_request_resolve); the view turns each node's MIG GPUs into struct
 *    mig_gpu (`busy` where a running allocation's share names the
 *    instance) and mig_place picks the GPU and the free instance; the pass
 *    marks it busy in its view and charges the job
 *    mig_profile_charge_milli. A request that finds no instance waits with
 *    a reason that names the profile (SCHED_REASON_NO_MIG, or
 *    SCHED_REASON_MIG_ABSENT where none of the profile exists);
 *    sched_mig_demand (core/sched.h) lists those waits per pool, in queue
 *    order, as the struct mig_demand entries mig_plan takes, so that in a
 *    dynamic pool the planner creates what mig_place_new finds room for.
 *
 *  - The planner, once per pass per dynamic pool: mig_plan over all MIG
 *    GPUs of the pool and the pool's pending demand (struct mig_demand, in
 *    queue order, from the same requests), with a mig_plan_state the
 *    controller keeps per pool. It returns per GPU the instances to destroy
 *    (always idle ones) and those to create. The controller commits the
 *    plan and sends it to the agent; until the agent reports, it passes that
 *    GPU `frozen` and the instances the plan destroys `busy`, so that
 *    neither mig_place nor the planner uses them (its other instances stay
 *    schedulable). On the report it keeps the new layout, with changed_ms
 *    the plan's time where it destroyed something (mig_gpu_plan_apply does
 *    both for a simulator).
 *
 *  - The agent-side plan: a struct mig_gpu_plan names destroys by the
 *    instance's (profile, start), stable across reports (mig_gpu_plan_apply
 *    gives the layout it leads to); the agent destroys then creates, one GPU
 *    at a time, with nvmlDeviceCreateGpuInstanceWithPlacement and the
 *    profile's nvml_id (then one compute instance spanning the GPU
 *    instance, which is what CUDA sees as the MIG device). It re-checks `busy` itself before each
 * destroy (NVML answers IN_USE anyway) and reports the result; on failure the controller keeps the
 * layout the agent reports, so the previous layout stays schedulable.
 *
 *  - The simulator: the same mig_place and mig_plan over its own
 *    struct mig_gpu arrays; it applies a plan with mig_gpu_plan_apply after
 *    its modelled repartition delay. Costs: mig_place is one look at each
 *    GPU; mig_plan is one look at each GPU per demand entry plus one per GPU
 *    it repartitions (a GPU that just got an instance is tried first for
 *    the next one). Measured at -O2: 5000 H100s, 4700 pending requests and
 *    1657 GPUs repartitioned in one plan, 0.35-0.45 s on a loaded 2-core
 *    machine; the next plan, with nothing left to change, 0.1 ms.
 */
#ifndef GPUORCH_CORE_MIG_H
#define GPUORCH_CORE_MIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MIG_SLOTS         8 /* memory slots of a MIG GPU */
#define MIG_SLICES        7 /* compute slices */
#define MIG_MAX_INSTANCES 7 /* GPU instances a GPU can hold */
#define MIG_MAX_PROFILES  8 /* profiles of one GPU type */
#define MIG_NTYPES        4 /* GPU types in the catalogue */

/* One GPU instance profile of one GPU type. */
struct mig_profile {
    const char *name;   /* as nvidia-smi shows it, without "MIG ": "1g.10gb" */
    uint8_t nvml_id;    /* the profile id (nvidia-smi's ID column; what
                           nvmlDeviceCreateGpuInstance takes): 1g = 19 */
    uint8_t nvml_index; /* NVML_GPU_INSTANCE_PROFILE_* (the argument of
                           nvmlDeviceGetGpuInstanceProfileInfo): 1g = 0 */
    uint8_t slices;     /* compute slices, 1..7 */
    uint8_t size;       /* memory slots a placement takes, 1..8 */
    bool media;         /* a +me profile: holds the media engines */
    uint8_t max_count;  /* instances of it a GPU can hold */
    uint8_t nstarts;    /* valid placements: start slot starts[k], `size` slots */
    uint8_t starts[7];
    uint32_t mem_mib; /* memory the driver gives the instance */
};

/* One GPU type with MIG. Profiles are ordered by (size, slices, media):
 * the smallest first. */
struct mig_type {
    const char *name; /* the project's gpu_type name: "H100-80GB" */
    const struct mig_profile *profiles;
    uint32_t mem_mib; /* the whole GPU's memory with MIG off */
    uint8_t id;       /* 0 .. MIG_NTYPES-1, for callers' small tables */
    uint8_t nprofiles;
};

/* The catalogue, in id order. */
const struct mig_type *mig_type_at(unsigned id);

/* The type named `name` (case-insensitive), or NULL where it has no MIG. */
const struct mig_type *mig_type_find(const char *name);

/* As mig_type_find, for input: GPO_ENOENT with `err` naming the type and
 * the types that have MIG ("GPU type \"L40S\" has no MIG; MIG GPU types:
 * A100-40GB, ..."). *ret set only on success. */
int mig_type_lookup(const char *name, const struct mig_type **ret, char *err, size_t errsize);

/* The index of profile `name` in t->profiles: case-insensitive, with an
 * optional "MIG " or "mig-" prefix (nvidia-smi's and Kubernetes'
 * spellings); "1g.10gb.me" reads as "1g.10gb+me" (mig-parted's). Returns the
 * index or GPO_ENOENT, with `err` naming the type's profiles. */
int mig_profile_lookup(const struct mig_type *t, const char *name, char *err, size_t errsize);

/* The index of the profile with NVML profile id `nvml_id`, or GPO_ENOENT. */
int mig_profile_by_nvml_id(const struct mig_type *t, unsigned nvml_id);

/* 0 if some type of the catalogue has profile `name` (a request without a
 * GPU type); GPO_ENOENT with `err` listing every known name otherwise. */
int mig_profile_check(const char *name, char *err, size_t errsize);

/* The smallest profile whose memory holds `mem_mib` (> 0): the least
 * memory, then the fewest compute slices; never a +me profile. Returns the
 * index, or GPO_EINVAL (0 MiB) / GPO_ENOENT (larger than the largest
 * profile) with `err` saying so. */
int mig_profile_for_mem(const struct mig_type *t, uint64_t mem_mib, char *err, size_t errsize);

/* A profile's charge, milli-GPU: size * 1000 / 8 (see the top). 0 for a
 * bad index. */
int64_t mig_profile_charge_milli(const struct mig_type *t, unsigned profile);

/* ---- layouts ---------------------------------------------------------- */

/* One GPU instance. */
struct mig_instance {
    uint8_t profile;       /* index into type->profiles */
    uint8_t start;         /* first memory slot */
    bool busy;             /* a job holds it (running or starting): never destroyed */
    int64_t idle_since_ms; /* since when it holds no job: its creation or its last
                              job's end (the planner's hold rule); INT64_MIN: long ago */
};

/* Checks a layout of `n` instances against the type's placement table:
 * every profile index valid, every start one of the profile's, no two
 * instances on one slot, no more of a profile than the GPU holds, at most
 * MIG_MAX_INSTANCES. Instances are numbered from 0, as given. `err`:
 * "instance 3 (3g.40gb at slot 2): 3g.40gb starts at slot 0 or 4",
 * "instance 2 (1g.10gb at slot 1): overlaps instance 0 (2g.20gb at slots 0-1)".
 * 0 or GPO_EINVAL. */
int mig_layout_check(const struct mig_type *t, const struct mig_instance *inst, size_t n, char *err,
                     size_t errsize);

/* The bit mask of memory slots the instances take (bit k: slot k); bad
 * profile indices take nothing. */
uint8_t mig_layout_slots(const struct mig_type *t, const struct mig_instance *inst, size_t n);

/* A layout from a count per profile, as mig-parted's `mig-devices`
 * ({"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}): counts[k] instances of
 * t->profiles[k] (ncounts <= t->nprofiles; missing ones 0). The largest
 * profiles are placed first, each where mig_place_new would; the result
 * (room for MIG_MAX_INSTANCES in ret) is sorted by start, idle, and passes
 * mig_layout_check. GPO_EINVAL with `err` where they do not fit: "no room
 * on a H100-80GB for the 1st 4g.40gb beside ...", "8 instances: a
 * H100-80GB holds at most 7". Whenever some valid layout has these counts,
 * this finds one (checked over every layout by the tests). */
int mig_layout_from_counts(const struct mig_type *t, const uint32_t *counts, size_t ncounts,
                           struct mig_instance *ret, size_t *ret_n, char *err, size_t errsize);

/* A named layout, in the spirit of NVIDIA's mig-parted (its
 * config-default.yaml):
 *   "all-disabled"   MIG off: *ret_enabled false, no instance;
 *   "all-enabled"    MIG on, no instance;
 *   "all-<profile>"  as many instances of the profile as the GPU holds
 *                    ("all-1g.10gb": seven on an H100-80GB, four on an
 *                    A100-40GB, whose 1g.10gb takes two slots);
 *   "all-balanced"   mig-parted's per type: two of the smallest 1g, one
 *                    2g, one 3g (H100-80GB: 2 x 1g.10gb, 2g.20gb, 3g.40gb).
 * Case-insensitive. Fills ret[0 .. *ret_n) (room for MIG_MAX_INSTANCES)
 * as mig_layout_from_counts does. GPO_ENOENT with `err` naming the known
 * names for the type. */
int mig_layout_named(const struct mig_type *t, const char *name, struct mig_instance *ret,
                     size_t *ret_n, bool *ret_enabled, char *err, size_t errsize);

/* ---- placement -------------------------------------------------------- */

/* One MIG GPU as placement and the planner see it. The caller builds it
 * from the node's report (and for the planner keeps changed_ms and each
 * instance's idle_since_ms across passes). */
struct mig_gpu {
    const struct mig_type *type; /* borrowed from the catalogue */
    int64_t changed_ms;          /* when its layout last changed by a plan;
                                    INT64_MIN: never */
    struct mig_instance inst[MIG_MAX_INSTANCES];
    bool frozen; /* the planner leaves it alone: a plan in flight,
                    a static layout, a GPU being drained */
    uint8_t n;
};

/* What a job asks for: a profile by name, or GPU memory (the smallest
 * profile that fits, per GPU type). */
struct mig_request {
    const char *profile; /* borrowed; NULL: by memory */
    uint64_t mem_mib;    /* when profile is NULL: > 0 */
};

/* The profile index `req` means on type t, or GPO_ENOENT where t has no
 * such profile or none large enough. */
int mig_request_resolve(const struct mig_type *t, const struct mig_request *req);

/* Where a request goes. */
struct mig_pick {
    uint32_t gpu;     /* index into the array given */
    int32_t instance; /* mig_place: index into that GPU's inst[];
                         mig_place_new: -1 (an instance to create) */
    uint8_t profile;  /* index into the GPU's type->profiles */
    uint8_t start;    /* the instance's start slot */
    /* What the choice was made by, for callers that compare picks from
     * several calls (the scheduler's view, one node at a time): */
    uint8_t free_slots; /* the GPU's free slots before (mig_place: not busy;
                           mig_place_new: in no instance) */
    uint32_t capacity;  /* the free capacity the pick leaves (below); higher is better */
};

/* The free (not busy) instance for `req` among `gpus`: on the GPU with the
 * least free space that has one (free space: slots no busy instance takes),
 * and there the instance whose use leaves the best free capacity (below);
 * ties to the lower GPU index, then the lower start. Frozen GPUs count.
 * 0 and *ret, or GPO_ENOENT (no free instance fits). */
int mig_place(const struct mig_gpu *gpus, size_t ngpus, const struct mig_request *req,
              struct mig_pick *ret);

/* Where a new instance for `req` could be created in slots no instance
 * takes, without destroying anything: the GPU with the fewest such slots
 * that has a valid placement for it, and there the placement that leaves
 * the best free capacity. Frozen GPUs are skipped. 0 and *ret (instance
 * -1), or GPO_ENOENT.
 *
 * "Best free capacity" of a set of free slots: for each compute profile of
 * the type from the largest down, how many instances of it alone could be
 * created there; compared in that order (lexicographically). So a 1g goes to
 * slot 6 of an empty H100, not 0: a 4g stays possible at 0. A 3g goes to
 * slot 4, leaving the 4g at 0. */
int mig_place_new(const struct mig_gpu *gpus, size_t ngpus, const struct mig_request *req,
                  struct mig_pick *ret);

/* ---- the dynamic planner ---------------------------------------------- */

/*
 * Damping: the rules that keep a layout from flapping under an alternating
 * queue, and their parameters.
 *
 *  1. settle_ms: demand for a (type, profile) reshapes GPUs only once it has
 *     been pending, without a pass where it was zero, for settle_ms. A blip
 *     of demand creates nothing. (Unsettled demand still protects: an idle
 *     instance it could use is never destroyed.)
 *  2. hold_ms: an idle instance is destroyed only once it has been idle for
 *     hold_ms (since its creation or its last job's end: idle_since_ms). A
 *     new instance so lives at least hold_ms.
 *  3. min_interval_ms: a GPU loses instances at most once per
 *     min_interval_ms (from changed_ms). Creating instances in free slots
 *     destroys nothing and is never delayed.
 *  4. Only surplus is destroyed: an idle instance of profile q goes only
 *     while the pool's idle instances of q outnumber the pending demand for
 *     q (settled or not) plus keep_free.
 *  5. max_repartitions (optional): at most this many GPUs lose instances
 *     in one plan.
 *
 * So under a queue that alternates between profiles faster than hold_ms,
 * a GPU changes at most once per max(hold_ms, min_interval_ms) after a
 * change, and demand shorter than settle_ms changes nothing.
 */
struct mig_plan_spec {
    int64_t settle_ms;         /* >= 0 */
    int64_t hold_ms;           /* >= 0 */
    int64_t min_interval_ms;   /* >= 0 */
    uint32_t keep_free;        /* idle instances of each profile kept from destruction */
    uint32_t max_repartitions; /* GPUs one plan may destroy instances on; 0: no limit
                                  (a bound on one pass's churn and work) */
};

/* settle 30 s, hold 5 min, min interval 5 min, keep_free 0, no limit on
 * repartitions per plan. */
void mig_plan_spec_default(struct mig_plan_spec *spec);

/* Per pool, kept by the caller across passes (fixed size; copy it to replay). */
struct mig_plan_state {
    int64_t since_ms[MIG_NTYPES][MIG_MAX_PROFILES]; /* pending since; INT64_MIN: none */
};
void mig_plan_state_init(struct mig_plan_state *st);

/* Pending demand: `count` requests of one kind, in queue order (the first
 * entry is served first). type NULL: the requests may run on any type (they
 * count on each type where they resolve). */
struct mig_demand {
    const struct mig_type *type;
    struct mig_request req;
    uint32_t count;
};

/* The plan for one GPU: destroy the named instances (each named by its
 * profile and start, and inst[] index at planning time), then create. */
struct mig_gpu_plan {
    uint8_t ndestroy, ncreate;
    struct {
        uint8_t instance; /* index into the GPU's inst[] given to mig_plan */
        uint8_t profile, start;
    } destroy[MIG_MAX_INSTANCES];
    struct {
        uint8_t profile, start;
    } create[MIG_MAX_INSTANCES];
};

/*
 * One planning pass over the MIG GPUs of a pool. For each demand entry in
 * order and each of its requests: an idle instance it can use serves it;
 * else, once its demand is settled, a new instance is planned in free slots
 * (as mig_place_new picks); else on the GPU where destroying the fewest
 * slots of destroyable idle instances (the rules above) makes room, ties to
 * the best free capacity left. The first request of an entry that finds no
 * room ends that entry; later entries still run.
 *
 * plans[0 .. ngpus) are filled (zeroed first); a plan never names a busy
 * instance or a frozen GPU, and every GPU's layout after its plan passes
 * mig_layout_check. *ret_changed (may be NULL): GPUs with a non-empty plan.
 * Updates st (demand since). Deterministic: the same inputs give the same
 * plan. GPO_EINVAL for a bad spec or a GPU without a type, st unchanged.
 */
int mig_plan(struct mig_plan_state *st, const struct mig_plan_spec *spec, int64_t now_ms,
             const struct mig_gpu *gpus, size_t ngpus, const struct mig_demand *demand,
             size_t ndemand, struct mig_gpu_plan *plans, size_t *ret_changed);

/* The GPU after its plan: destroyed instances removed (the others keep
 * their order), created ones appended idle with idle_since_ms now_ms;
 * changed_ms set to now_ms where the plan destroyed something. GPO_EINVAL
 * (gpu unchanged) where the plan does not fit the GPU: an instance it
 * destroys is not there as named or is busy now, a create overlaps. */
int mig_gpu_plan_apply(struct mig_gpu *gpu, const struct mig_gpu_plan *plan, int64_t now_ms);

#endif

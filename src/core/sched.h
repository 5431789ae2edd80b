/*
 * sched.h - one scheduling pass: the decisions, and the state carried between
 * passes.
 *
 * sched_pass takes the cluster, the pending queue, the running set, the policy
 * and `now`, and returns what to do: start these jobs on these GPUs, preempt
 * those, hold a reservation, and why every other job waits. It is a pure
 * function of its inputs and of `state`, the explicit carry-over the caller
 * persists (decayed fair-share usage, attained service, preemption claims; see
 * state.h): the same inputs and state give the same decisions, ties going to
 * the lower job id. Reservations are recomputed every pass and returned as
 * decisions.
 *
 * What the caller does with the decisions: it commits them, then on the next
 * pass lists started jobs in the running set, and preempted ones there with
 * `preempting` set until they exit (after the grace period), then requeues
 * them; a job that leaves the running set is charged its last stretch of
 * usage with sched_state_charge_end. A preempted job's resources go to the job
 * it was evicted for: the state remembers that claim.
 */
#ifndef GPUORCH_CORE_SCHED_H
#define GPUORCH_CORE_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "core/explain.h"
#include "core/model.h"
#include "core/state.h"

enum sched_preempt_why {
    SCHED_PREEMPT_PRIORITY = 0, /* a higher priority class that may preempt */
    SCHED_PREEMPT_RECLAIM,      /* a team taking back its guaranteed share from a borrower */
    SCHED_PREEMPT_LAS,          /* a job in a less-served LAS queue */
    SCHED_PREEMPT_MIGRATE,      /* moved to free GPUs elsewhere, to make one node's room */
};

struct sched_start {
    uint64_t job;
    struct sched_alloc alloc; /* arrays owned by the result */
    bool borrowed;            /* over the team's guarantee: preemptible by reclaim */
};

struct sched_preempt {
    uint64_t job;     /* the running job to evict (SIGTERM now, SIGKILL after grace) */
    uint64_t for_job; /* the pending job it makes room for */
    int64_t grace_ms;
    int64_t lost_gpu_ms; /* work lost since its last checkpoint (or start) */
    enum sched_preempt_why why;
};

struct sched_reserve {
    uint64_t job;
    int64_t start_ms; /* when the reserved resources are expected free */
    uint32_t *nodes;  /* owned by the result */
    uint32_t nnodes;
};

struct sched_arena_chunk;
struct idmap;
struct sched_scratch;

/* Everything one pass decided. Initialise with sched_result_init; each pass
 * overwrites it (reusing its memory); release with sched_result_release. Keep
 * one result for a loop of passes: it also holds what the next pass reuses
 * (the id map and its window over recent ids, the shape tables). */
struct sched_result {
    struct sched_start *starts;
    size_t nstarts;
    struct sched_preempt *preempts;
    size_t npreempts;
    struct sched_reserve *reserves;
    size_t nreserves;
    struct sched_wait *waits; /* one per pending job not started, in queue order */
    size_t nwaits;
    uint64_t *overcommitted; /* running jobs over their GPUs' or nodes' capacity */
    size_t novercommitted;
    size_t decisions; /* pending jobs evaluated in the pass */
    /* Under LAS with preemption: the earliest time a running job (or one
     * started in this pass) crosses its next LAS threshold while a job still
     * waiting could then evict it. A pass then may decide differently though
     * nothing else changed: the caller should run one. INT64_MAX: none. */
    int64_t las_crossing_ms;
    /* private: storage behind the arrays above */
    struct sched_arena_chunk *arena;
    struct idmap *ids;             /* the pass's id map, kept for the next pass */
    struct sched_scratch *scratch; /* the pass's shape tables, likewise */
    size_t starts_cap, preempts_cap, reserves_cap, waits_cap;
};

void sched_result_init(struct sched_result *result);
void sched_result_release(struct sched_result *result);

/*
 * Runs one pass at time `now_ms` (>= state->last_pass_ms).
 *
 * Returns 0 and fills *result; or GPO_EINVAL for a NULL argument, an invalid
 * cluster or policy, a running job whose allocation names a GPU or node out of
 * range, or a job id that appears twice; or GPO_ENOMEM. On error, `state` is
 * unchanged and *result is emptied.
 *
 * Running allocations that take more than a GPU or node has (a double booking,
 * or a node that lost capacity) do not stop the pass: that GPU or node is
 * treated as full and the jobs are listed in result->overcommitted, for the
 * caller to report.
 *
 * A pending job that is itself invalid (negative size, unknown pool, larger
 * than any node, ...) is not an error of the pass: it gets a final reason in
 * result->waits and the rest of the queue is scheduled.
 */
int sched_pass(const struct sched_cluster *cluster, const struct sched_queue *queue,
               const struct sched_running_set *running, const struct sched_policy *policy,
               struct sched_state *state, int64_t now_ms, struct sched_result *result);

/*
 * The pending MIG demand of the pass that filled `result` (from `queue`,
 * the queue it was given), for the controller's dynamic planner: one entry
 * per run of like requests, in the queue's order, each with the pool it is
 * counted in and a struct mig_demand that mig_plan takes (the entries of
 * one pool, in order, are that pool's demand). A job counts when it waits
 * for an instance (NO_MIG: none free; MIG_ABSENT: none of its profile
 * exists, the case where mig_place_new may find room for the planner to
 * create one; PRIORITY: higher-ranked jobs took the free ones) or is a
 * memory request that may take an instance and waits for GPUs (NO_GPU).
 * Its pool: its own, or for any pool the first that has MIG GPUs of its
 * types (a job is counted once). Its type: the MIG type of its gpu_type, or
 * where it has none, of its only type in that pool, else NULL (any type
 * where the request resolves). Its request: its profile's name (a MIG-only
 * job) or its GPU memory.
 *
 * Writes at most `cap` entries to ret (at most result->nwaits are ever
 * needed) and *ret_n the number there are; 0, GPO_E2BIG (ret full, *ret_n
 * saying how many there are), or GPO_EINVAL (a NULL argument, an invalid
 * cluster). Pure: reads its arguments only; the strings are the catalogue's.
 */
struct sched_mig_demand {
    uint32_t pool;            /* index into cluster->pools */
    struct mig_demand demand; /* type NULL: any MIG type of the pool it resolves on */
};

int sched_mig_demand(const struct sched_cluster *cluster, const struct sched_queue *queue,
                     const struct sched_result *result, struct sched_mig_demand *ret, size_t cap,
                     size_t *ret_n);

#endif

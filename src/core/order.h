/*
 * order.h - the order in which a pass considers pending jobs, and the usage
 * that fair share and LAS rank by.
 *
 * Priority class comes first (except under fifo). Then work that fits within
 * its team's guarantee goes before work that would borrow (as Kueue admits
 * within nominal quota first): a team uses its guarantee before anyone
 * borrows it, so reclaims are the exception, not the rule. Then by policy:
 *  - fifo / priority: submit time;
 *  - fairshare: the team's dominant share over its weight, lowest first. A
 *    team's share on a GPU type is (decayed usage + current allocation x H/ln 2)
 *    / capacity of that type, with H the half-life: recent history plus what
 *    it holds now, counted as if it ran one more mean life. Its dominant share
 *    is the largest over types (DRF). The allocation term makes the order react
 *    within a pass: each start raises its team's share before the next pick.
 *  - las: the Tiresias queue of the job's attained GPU-service (discretized by
 *    the policy's thresholds), least served first.
 * Under fairshare, a team's own jobs go by submit time, or (within = las) by
 * their LAS queue first, as in Tiresias but inside the team.
 * Ties always go to the earlier submit, then the lower job id.
 */
#ifndef GPUORCH_CORE_ORDER_H
#define GPUORCH_CORE_ORDER_H

#include <stddef.h>
#include <stdint.h>

#include "core/model.h"
#include "core/sched.h"
#include "core/view.h"

struct order_key;
struct order_seg;

/* Does pending job `idx` fit within its team's guarantee somewhere it could
 * run, given what the team holds now? Asked each time a team's next job
 * comes up. */
typedef bool (*order_within_fn)(void *ctx, uint32_t idx);

struct order {
    const struct sched_cluster *cluster;
    const struct sched_policy *policy;
    double *usage;  /* [team * ngpu_types + type]: decayed GPU-ms at now */
    int64_t *alloc; /* [team * ngpu_types + type]: milli-GPU held now */
    int64_t *cap;   /* [type]: milli-GPU of usable nodes */
    /* iteration */
    struct order_key *keys;
    struct order_seg *segs;
    size_t nsegs, seg_pos;
    uint32_t *heap;
    size_t nheap;
    order_within_fn within;
    void *within_ctx;
    int64_t pending_seg; /* segment popped last, pushed back on the next call; -1 none */
};

/*
 * Computes usage at `now`: the state's decayed usage, decayed further by the
 * time since the last pass, plus what the running set used since then
 * (integrated exactly under the decay), and the current allocations. The
 * state is not changed (order_commit does that). 0 or GPO_ENOMEM.
 */
int order_init(struct order *o, const struct sched_cluster *cluster, const struct view *view,
               const struct sched_running_set *running, const struct sched_policy *policy,
               const struct sched_state *state, int64_t now_ms);
void order_release(struct order *o);

/* Writes the usage at `now` back into the state (ids as keys). 0 or GPO_ENOMEM,
 * state unchanged on error. */
int order_commit(const struct order *o, struct sched_state *state);

/* Does the policy rank jobs by LAS queue: across the cluster (las), or within
 * each team (fairshare with within = las)? */
bool order_uses_las(const struct sched_policy *policy);
/* Under within-team LAS, LAS preemption stays inside the team. */
bool order_las_team_only(const struct sched_policy *policy);

/* LAS queue (0 = least served) of a job with `attained_gpu_ms` of service. */
uint32_t order_las_queue(const struct sched_policy *policy, int64_t attained_gpu_ms);

/* The team's dominant share over its weight, as fair share ranks it. */
double order_team_share(const struct order *o, uint32_t team);

/* What ordering reads of a pending job: a compact copy the pass makes while
 * it reads the queue, so that ranking does not walk the queue again. */
struct order_job {
    uint64_t id;
    int64_t submit_ms;
    uint32_t team, prio;
};

/*
 * Prepares to hand out `cands` (indices into jobs) in the policy's order.
 * `lasq` gives each job's LAS queue by job index (only read under las);
 * `within` (may be NULL: nothing is) says which jobs fit their team's
 * guarantee. Each team's jobs (per class) form a heap, so a job is ordered
 * only when it is handed out; teams compete through a heap whose keys are
 * refreshed as their jobs start. 0 or GPO_ENOMEM.
 */
int order_begin(struct order *o, const struct order_job *jobs, const uint32_t *cands, size_t n,
                const uint8_t *lasq, order_within_fn within, void *ctx);

/* The next job index, or SCHED_NONE when all have been handed out. */
uint32_t order_next(struct order *o);

/* Records that a job of `team` started on `milli` of GPU type `gpu_type`
 * (SCHED_NONE for none): fair share sees it at once. */
void order_note_start(struct order *o, uint32_t team, uint32_t gpu_type, int64_t milli);

#endif

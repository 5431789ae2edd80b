/*
 * pass.h - the context of one scheduling pass, shared by the modules that
 * make up sched_pass (private to src/core; nothing outside includes it).
 *
 * sched.c drives the pass; shape.c groups the queue by request and validates
 * it; admit.c decides each job (start, explain, reserve) and freezes the rest;
 * evict.c decides preemptions. This file holds the state they share and the
 * small helpers they all use (pass.c).
 */
#ifndef GPUORCH_CORE_PASS_H
#define GPUORCH_CORE_PASS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/backfill.h"
#include "core/explain.h"
#include "core/idmap.h"
#include "core/model.h"
#include "core/order.h"
#include "core/preempt.h"
#include "core/quota.h"
#include "core/sched.h"
#include "core/view.h"

enum {
    J_FIT0 = 1 << 1, /* fitted the free capacity at pass start */
    J_CAND = 1 << 2, /* handed to the ordered loop */
    J_STARTED = 1 << 3,
    J_DONE = 1 << 4, /* reason decided */
    J_POT = 1 << 5,  /* might preempt */
};

enum {
    R_LEAVING = 1 << 0, /* being preempted (by the caller, or chosen in this pass) */
};

enum {
    R_BORROWED = 1 << 0,
    R_CKPT = 1 << 1,
    R_MOVABLE = 1 << 2, /* migrate may move it: checkpointable, whole GPUs on one node */
};

struct fail {
    uint32_t team, prio, pool, gpu_type;
    uint8_t kind;
    uint8_t lasq; /* the job's LAS queue (LAS only) */
    int64_t size;
};

#define MAX_FAILS 64
/* Preemption plans a pass may try. Each costs a scan of the running set; a
 * pass is bounded, and a job that found no plan tries again next pass. */
#define MAX_PLANS 64

/* Jobs that ask for the same thing (team, class, pool, type, sizes, limit):
 * a queue of 100,000 jobs holds a few hundred such shapes, so what depends
 * only on the request is worked out once per shape. */
struct jshape {
    /* hot: read for every job of the shape (the first cache line) */
    uint64_t hash;  /* of key */
    uint32_t first; /* queue index of the first job of this shape */
    uint32_t best;  /* and of its earliest (submit time, then id): */
    int64_t best_submit_ms;
    uint64_t best_id;
    uint32_t team;
    uint32_t allowed_stamp; /* compute_allowed's answer, while team_starts + 1 matches; 0: none */
    uint32_t nallowed, neligible;
    uint32_t remaining; /* candidates of this shape not yet ranked */
    uint32_t rep;       /* the candidate that stands for them: the least-served under LAS */
    bool valid;         /* validation passed (else first's wait is final) */
    bool fit0;          /* fitted the free capacity when the pass began */
    bool pot;           /* might preempt */
    bool pot_other;     /* might preempt by its class or a reclaim, not only by LAS */
    uint8_t cand_bits;  /* J_FIT0, J_POT, J_CAND as its jobs get them (0: not candidates) */
    bool missed;        /* the placement that last found no room for it, and why: */
    enum sched_reason why;
    uint64_t other;
    uint32_t nodes_have; /* exact-N gang: nodes that could take a member */
    /* cold */
    uint64_t miss_version;
    uint32_t miss_team_starts;
    uint32_t fit_stamp; /* fit_at_start's answer, likewise */
    bool fits;
    bool within; /* within_guarantee's answer, likewise */
    uint32_t within_stamp;
    uint64_t reserve_fail_version; /* backfill found no time for it (version + 1; 0: no) */
    uint8_t swept;                 /* bit k: sweep[k] is made (k = 1: a candidate) */
    struct sched_wait sweep[2];    /* the wait of its jobs the ordered loop did not reach */
};

/* The request part of a job, as eight words (compared and hashed word by
 * word): what validation, the fit checks and placement look at. Not: id,
 * submit time, labels, checkpointing, which never change where or whether a
 * job fits. Each word is built in registers from the job's fields (see
 * shape.c), never by storing narrow fields and reading them back wide, which
 * stalls the CPU's store forwarding. */
enum {
    SHAPE_W_TEAM_PRIO = 0, /* team | prio << 32 */
    SHAPE_W_POOL_TYPE,     /* pool | gpu_type << 32 */
    SHAPE_W_GPUS,          /* gpus | gpu_milli << 32 */
    SHAPE_W_CPUS,          /* cpus | shape_bits() << 32: multi_node, exclusive, whole memory,
                              terms, nodes */
    SHAPE_W_GPU_MEM,
    SHAPE_W_MIN_GPU_MEM,
    SHAPE_W_MEM,
    SHAPE_W_LIMIT,
    SHAPE_WORDS
};

struct shape_key {
    uint64_t w[SHAPE_WORDS];
};

static inline uint32_t shape_key_pool(const struct shape_key *k)
{
    return (uint32_t)k->w[SHAPE_W_POOL_TYPE];
}

/* What a pass keeps in the result for the next one: arrays that grow with
 * the shapes, so that a pass does not regrow them from nothing. */
struct sched_scratch {
    struct jshape *shapes;
    struct shape_key *skeys;
    size_t shapes_cap, skeys_cap;
};

struct pass {
    const struct sched_cluster *c;
    const struct sched_queue *q;
    const struct sched_running_set *run;
    const struct sched_policy *pol;
    struct sched_state *st;
    struct sched_result *res;
    int64_t now;

    struct view view;
    struct quota quota;
    struct order order;
    struct idmap *ids; /* the result's, reused from pass to pass */

    uint8_t *jflag;
    struct sched_wait *jwait; /* per pending job */
    uint8_t *lasq;            /* per pending job (LAS only) */
    uint8_t *rflag;           /* per running job */
    uint32_t *rgroup;         /* per running job: its group (SCHED_NONE: holds nothing) */
    int64_t *rmilli;          /* per running job: milli-GPU it holds */
    int32_t *rorder;          /* per running job: its class's order */
    uint32_t *rteam;          /* per running job: its team */
    uint8_t *rbits;           /* per running job: R_BORROWED, R_CKPT, R_MOVABLE */
    bool *within_g;           /* per group, scratch: the job at hand fits its guarantee there */
    uint8_t *pwhy;            /* per preemption candidate, scratch: why it may be evicted */
    int64_t *rank_milli; /* [group * nranks + rank]: milli held by running, not leaving, jobs */
    uint32_t nranks;
    uint32_t nplans;   /* preemption plans tried in this pass */
    uint8_t *rlasq;    /* per running job (LAS only) */
    uint32_t nmovable; /* running jobs with R_MOVABLE */
    /* per node, its R_MOVABLE jobs: mv_runs[mv_start[n] .. mv_start[n + 1])
     * (built by migrate.c on first use; NULL until then) */
    uint32_t *mv_start, *mv_runs;
    /* [(team * ngroups + group) * SCHED_LAS_MAX_QUEUES + queue]: milli held by
     * checkpointable running, not leaving, jobs (LAS only) */
    int64_t *las_milli;
    /* [(team, then one for all teams) * SCHED_LAS_MAX_QUEUES + q]: the least
     * milli a running checkpointable job in a LAS queue above q holds, known
     * before the shapes are (LAS only; INT64_MAX: none): whether a job in
     * queue q may evict anything. */
    int64_t *las_min_victim;
    int32_t *rank;          /* class index -> rank by order (0 lowest) */
    bool *allowed;          /* per group, scratch */
    int64_t *excess;        /* [team * ngroups + group]: milli over guarantee, reclaimable */
    int64_t *headroom;      /* per group: the current job's team's quota left, milli */
    uint32_t *group_starts; /* per group: jobs started there in this pass */
    uint32_t *team_starts;  /* per team: jobs started in this pass */
    bool *guar_left;        /* per team: some group where it holds less than its guarantee */
    struct view pristine;   /* free capacity when the pass began */
    struct view_undo undo;  /* scratch log for trying releases on the view */
    uint32_t *free0;        /* nodes that had a GPU free when the pass began */
    uint32_t nfree0;
    struct jshape *shapes_of; /* distinct requests */
    uint32_t nshapes;
    size_t shapes_cap, skeys_cap; /* of shapes_of and skeys, which grow with the shapes */
    bool scratch_taken;           /* shapes_of and skeys came from res->scratch */
    uint32_t *jshape;             /* per pending job: its shape */
    struct order_job *ojob;       /* per pending job: id, submit, team, class (read once) */
    struct shape_key *skeys;      /* per shape: its request */
    /* per shape x group, for compute_allowed's cache (NULL: too many to keep) */
    bool *shape_allowed, *shape_eligible;
    int64_t *shape_headroom;
    uint64_t version; /* bumped whenever the view changes: a start, a hold, a block */
    bool *eligible;   /* per group, scratch */

    struct view_place place;

    struct backfill_releases rels; /* the running set's and this pass's starts */

    struct preempt_cand *pcand; /* every running job, least work lost first */
    size_t npcand;
    bool pcand_ready;
    struct preempt_cand *pbuf; /* candidates for one job */
    uint32_t *victims;
    uint32_t *leaving;
    size_t nleaving;

    int32_t *pool_resv;   /* EASY reservation per pool, -1 none */
    uint64_t *pool_block; /* backfill off: job blocking the pool, 0 none */

    struct fail fails[MAX_FAILS];
    size_t nfails;

    struct run_by_id *rby_id;        /* the running set sorted by job id (sched.c) */
    int64_t *rattained;              /* per running job: its attained service at `now`, GPU-ms */
    struct sched_attained *attained; /* new attained table, sorted by job */
    size_t nattained;
    struct sched_claim *claims; /* new claims */
    size_t nclaims, claims_cap;
};

static inline int64_t job_end(const struct pass *p, const struct sched_job *j, int64_t start)
{
    int64_t limit = j->time_limit_ms > 0 ? j->time_limit_ms : p->pol->default_time_limit_ms;
    return start > INT64_MAX - limit ? INT64_MAX : start + limit;
}

static inline struct sched_wait make_wait(const struct sched_job *j, enum sched_reason reason,
                                          uint32_t pool, uint32_t gpu_type, uint64_t other,
                                          const char *field)
{
    return (struct sched_wait){.job = j->id,
                               .reason = reason,
                               .team = j->team,
                               .pool = pool,
                               .gpu_type = gpu_type,
                               .other_job = other,
                               .est_start_ms = -1,
                               .field = field,
                               .need_milli = 0,
                               .free_milli = 0};
}

/* For a reason that counts nodes: the job's node count and GPUs per node,
 * and `have` nodes that could take its share. Other reasons are left. */
static inline void wait_set_nodes(struct sched_wait *w, const struct sched_job *j, uint32_t have)
{
    if (!explain_counts_nodes(w->reason))
        return;
    w->nodes.need = j->nodes > 1 ? (uint32_t)j->nodes & 0xffffffu : 1;
    w->nodes.gpus = view_job_node_gpus(j) & 0xffu;
    w->nodes.have = have;
}

/* Sets job i's wait (and marks it decided). */
void pass_set_wait(struct pass *p, uint32_t i, enum sched_reason reason, uint32_t pool,
                   uint32_t gpu_type, uint64_t other, const char *field);
/* Job i's wait counts nodes, if its reason does (wait_set_nodes). */
static inline void pass_set_nodes(struct pass *p, uint32_t i, uint32_t have)
{
    wait_set_nodes(&p->jwait[i], &p->q->jobs[i], have);
}

/* For a "resources" or "gang" wait of job j: what it needs and what the
 * view has free for it now (explain.h: need_milli, free_milli). */
void pass_wait_numbers(struct pass *p, const struct sched_job *j, struct sched_wait *w);

/* Why MIG-only job j finds no instance: "no free instance" with the free
 * and total count of its profile over the groups it may use (`groups`, or
 * NULL: every eligible one; those of the first one's MIG type), or "none
 * exists" where there are none; *ret_other the wait's `mig` word. */
enum sched_reason pass_mig_reason(struct pass *p, const struct sched_job *j, const bool *groups,
                                  uint64_t *ret_other);

/* Groups job i may use now (p->eligible, p->allowed, p->headroom filled);
 * returns how many are eligible, *ret_nallowed how many have quota left.
 * Cached per shape while the team's usage is unchanged. */
uint32_t pass_allowed(struct pass *p, uint32_t i, uint32_t *ret_nallowed);
/* Just the count of allowed groups, without filling the scratch arrays when cached. */
uint32_t pass_allowed_count(struct pass *p, uint32_t i);
/* Recomputes whether a team still holds less than its guarantee somewhere. */
void pass_update_guar_left(struct pass *p, uint32_t team);
/* Backfill off: the job blocking every pool p->allowed covers, or 0. */
uint64_t pass_blocked_by(const struct pass *p);
/* Backfill off: blocks the pools p->allowed covers for `job`. */
void pass_block_pools(struct pass *p, uint64_t job);
/* Holds the nodes of p->place for `job` from `start_ms` on; the reservation's
 * index or GPO_ENOMEM. */
int pass_hold_place(struct pass *p, uint64_t job, int64_t start_ms);
/* The same for a list of node indices (a claim's; out-of-range ones are
 * skipped: the cluster may have shrunk since). */
int pass_hold_nodes(struct pass *p, uint64_t job, int64_t start_ms, const uint32_t *nodes,
                    uint32_t n);
/* Allocates the per-pass arrays (pass_free releases them, also half-made). */
int pass_alloc(struct pass *p);
void pass_free(struct pass *p);
/* Scratch for this pass only, from the result's arena (gone at the next
 * reset); zeroed when asked. NULL if out of memory. */
void *pass_scratch(struct pass *p, size_t bytes, bool zero);
/* Memory that lives as long as the result: chunks never move. NULL if out of memory. */
void *pass_arena_alloc(struct sched_result *r, size_t bytes);
/* Empties the arena, keeping one chunk as large as all it had. */
void pass_arena_reset(struct sched_result *r);

#endif

/*
 * jobs.h - the controller's jobs: every job in memory (mirrored from its store
 * row), its current attempt, the states both go through, the causes of a
 * kill, and what ending an attempt does to its job.
 *
 * Owns: the job table (struct jobs), each struct job and its attempt. The
 * attempt carries per-attempt state that other subsystems own and this one
 * only stores: the cost ledger's open segment (struct attempt_segment,
 * cost/cost.h) and the idle tracker (struct attempt_idle, monitor/monitor.h).
 *
 * Lock: the controller's state lock (struct server.lock) guards the table and
 * everything in it; nothing here takes a lock, reads the clock or talks to the
 * store: times are arguments, store rows go into a caller's batch.
 */
#ifndef GPUORCH_SERVER_JOBS_JOBS_H
#define GPUORCH_SERVER_JOBS_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "cluster/jobspec.h"
#include "store/store.h"

/* ---- states ------------------------------------------------------------- */

/* A job's states, as the API and the store name them; X(name, text, final). */
#define JOB_STATES(X)                                                                              \
    X(PENDING, "PENDING", false)                                                                   \
    X(RUNNING, "RUNNING", false)                                                                   \
    X(COMPLETED, "COMPLETED", true)                                                                \
    X(FAILED, "FAILED", true)                                                                      \
    X(CANCELLED, "CANCELLED", true)                                                                \
    X(TIMEOUT, "TIMEOUT", true)                                                                    \
    X(PREEMPTED, "PREEMPTED", true)                                                                \
    X(NODE_FAIL, "NODE_FAIL", true)

enum job_state {
#define JOB_STATE_ENUM(name, text, final) JOB_##name,
    JOB_STATES(JOB_STATE_ENUM)
#undef JOB_STATE_ENUM
        JOB_NSTATES
};

/* "PENDING", ...; "UNKNOWN" out of range. */
const char *job_state_name(enum job_state s);
/* The state named `name`, or -1. */
int job_state_parse(const char *name);
bool job_state_final(enum job_state s);

/*
 * An attempt's states, as the store, the API and the agents name them;
 * X(name, text, holds): an attempt holds its resources while ASSIGNED,
 * RUNNING or KILLING; the others are how it ended (an agent reports all but
 * NODE_FAIL, which the controller decides when a node stops heartbeating).
 */
#define ATTEMPT_STATES(X)                                                                          \
    X(ASSIGNED, "ASSIGNED", true)                                                                  \
    X(RUNNING, "RUNNING", true)                                                                    \
    X(KILLING, "KILLING", true)                                                                    \
    X(COMPLETED, "COMPLETED", false)                                                               \
    X(FAILED, "FAILED", false)                                                                     \
    X(TIMEOUT, "TIMEOUT", false)                                                                   \
    X(CANCELLED, "CANCELLED", false)                                                               \
    X(PREEMPTED, "PREEMPTED", false)                                                               \
    X(NODE_FAIL, "NODE_FAIL", false)

enum attempt_state {
#define ATTEMPT_STATE_ENUM(name, text, holds) ATTEMPT_##name,
    ATTEMPT_STATES(ATTEMPT_STATE_ENUM)
#undef ATTEMPT_STATE_ENUM
        ATTEMPT_NSTATES
};

const char *attempt_state_name(enum attempt_state s);
int attempt_state_parse(const char *name);
bool attempt_state_holds(enum attempt_state s);

/*
 * Why the controller stops an attempt: X(name, stored, preempted). `stored`
 * begins the reason the attempt's KILLING row and the agent's kill carry
 * (an idle kill adds the idle policy's words after it); `preempted` says the
 * agent reports the end as PREEMPTED (else CANCELLED).
 */
#define KILL_CAUSES(X)                                                                             \
    X(PREEMPTED, "preempted", true)      /* the scheduler needs its GPUs */                        \
    X(CANCELLED, "cancelled", false)     /* a user cancelled the job */                            \
    X(IDLE_REQUEUE, "preempted: ", true) /* its team's idle policy requeues it */                  \
    X(IDLE_CANCEL, "", false)            /* its team's idle policy cancels it */                   \
    X(REQUEUE, "requeued", true)         /* a user requeued the job (scontrol requeue) */

enum kill_cause {
    KILL_NONE = 0,
#define KILL_CAUSE_ENUM(name, stored, preempted) KILL_##name,
    KILL_CAUSES(KILL_CAUSE_ENUM)
#undef KILL_CAUSE_ENUM
};

/* The agent reports an attempt killed for `cause` as PREEMPTED (true) or CANCELLED. */
bool kill_cause_preempts(enum kill_cause cause);

/*
 * Who holds a pending job back from the scheduler (scontrol's hold):
 * X(name, stored, wait). `stored` is the store's jobs.hold; `wait` the
 * reason the job waits with (code "hold", as Slurm's JobHeldUser and
 * JobHeldAdmin). A user may not release an admin's hold.
 */
#define JOB_HOLDS(X)                                                                               \
    X(USER, "user", "hold: held by user")                                                          \
    X(ADMIN, "admin", "hold: held by an admin")

enum job_hold {
    JOB_HOLD_NONE = 0,
#define JOB_HOLD_ENUM(name, stored, wait) JOB_HOLD_##name,
    JOB_HOLDS(JOB_HOLD_ENUM)
#undef JOB_HOLD_ENUM
};

/* "user", "admin"; NULL for JOB_HOLD_NONE (the store's NULL). */
const char *job_hold_name(enum job_hold h);
/* The hold a stored name says (NULL: none), or -1 for an unknown name. */
int job_hold_parse(const char *stored);
/* The wait reason of a job held by h; NULL for none. */
const char *job_hold_wait(enum job_hold h);

/* ---- attempts ----------------------------------------------------------- */

/* One GPU an attempt holds, by name (core indices change with the cluster). */
struct attempt_share {
    char *node;
    char *uuid;
    uint32_t milli;
    uint32_t mem_mib;
    /* A MIG instance of the GPU (mig true): named by its profile and start
     * slot, as the node reports it (stored as "mig": {"profile", "start"}). */
    bool mig;
    uint8_t mig_start;
    char mig_profile[24]; /* "1g.10gb" */
    /* The GPU's latest sample while the attempt holds it (monitor's ingest);
     * sample_ms 0: none yet. */
    int64_t sample_ms;
    int32_t util_pct;     /* -1: not reported */
    int64_t mem_used_mib; /* -1: not reported */
};

/* One node's part of an attempt: CPUs and host memory there. */
struct attempt_part {
    char *node;
    uint32_t cpus;
    uint64_t mem_mib;
    bool completed; /* a gang's rank here reported COMPLETED (in memory only: the
                       agent repeats the report until the whole gang has) */
};

/* The idle tracker's state (monitor/monitor.h owns it; all 0: not seen yet). */
struct attempt_idle {
    int64_t active_ms;      /* last sample of a GPU of it at or above the threshold, or when
                               the tracker first saw it running */
    int64_t since_ms;       /* flagged: the idle stretch began then; 0: not flagged */
    int64_t flagged_ms;     /* when it was flagged */
    int64_t warned_ms;      /* requeue/cancel: when it was warned; 0: not */
    int64_t action_ms;      /* ... and when the action is due */
    uint32_t threshold_pct; /* the policy it was flagged under */
    int64_t window_s;
    enum cluster_idle_action action;
};

/*
 * The cost ledger's open segment of an attempt (cost/cost.h owns it): a
 * stretch at one price, since start_ms at rate_micro per hour; seq is the
 * seq of its next ledger row; start_ms 0: not opened yet.
 *
 * A price change that closes the open segment may be being committed: its
 * row ends at pending_ms and the next row's seq is pending_seq (0: none
 * pending); an end planned meanwhile starts its row there, so that the two
 * rows meet instead of overlapping, whichever commits first.
 * pending_util: the samples its row took (sum, samples, idle).
 */
struct attempt_segment {
    int64_t start_ms, seq, rate_micro;
    int64_t pending_ms, pending_seq;
    uint64_t pending_util[3];
    int64_t pending_start_ms, pending_cost; /* that row's start and cost */
};

/* A job's current attempt, while it holds resources (assigned, running or
 * being killed) and until its end is applied. */
struct attempt {
    int64_t n;            /* 1, 2, ...: the attempt's number; 0: none active */
    bool running;         /* the agent reported it started */
    enum kill_cause kill; /* KILL_NONE, or why the controller wants it stopped */
    char *kill_detail;    /* owned, or NULL: an idle kill's words ("idle: GPUs under ...") */
    int64_t grace_ms;     /* of the kill: SIGTERM, then SIGKILL after it */
    int64_t start_ms;
    bool borrowed;
    struct attempt_part *parts;
    size_t nparts;
    struct attempt_share *shares;
    size_t nshares;
    /* Samples of the attempt's GPUs since its open ledger segment began
     * (monitor adds, the ledger takes them into the segment's row). A GPU
     * shared by several attempts counts for each. */
    uint64_t util_sum;     /* utilization_pct summed over the samples */
    uint64_t util_samples; /* GPU samples */
    uint64_t idle_samples; /* of which under the team's idle threshold */
    struct attempt_segment seg;
    struct attempt_idle idle;
};

/* Frees what an attempt holds and zeroes it; a zeroed one is fine. */
void attempt_release(struct attempt *a);

/* Whether attempt a has a part on node `node`. */
bool attempt_on_node(const struct attempt *a, const char *node);

/*
 * Marks attempt a to be stopped for `cause` (detail: an idle kill's words,
 * copied; else NULL) with `grace_ms` between SIGTERM and SIGKILL. The one
 * place an attempt is marked for a kill: callers then tell its nodes
 * (sched/sched.h does both). A user's cancel wins over a kill under way for
 * another cause (the job ends CANCELLED, not requeued); any other kill of an
 * attempt being killed changes nothing. 0; GPO_ESTATE when it holds nothing
 * or is being killed already (nothing changes); GPO_ENOMEM.
 */
int attempt_kill(struct attempt *a, enum kill_cause cause, const char *detail, int64_t grace_ms);

/* The reason a kill is stored and sent with: the cause's words, then the
 * detail. Writes into buf (len bytes) and returns it. */
const char *attempt_kill_reason(const struct attempt *a, char *buf, size_t len);

/*
 * The kill a stored KILLING row's reason records (NULL: a preemption, as
 * rows written before causes existed say nothing else): the cause and, for
 * an idle kill, its detail (a pointer into `reason`).
 */
enum kill_cause attempt_kill_parse(const char *reason, const char **ret_detail);

/* The attempt's nodes and GPUs as stored (attempts.nodes and .gpus): new
 * JSON texts (caller frees), or GPO_ENOMEM. */
int attempt_encode(const struct attempt *a, char **ret_nodes, char **ret_gpus);
/* Reads the stored nodes `text` back into *a (parts and shares only); 0,
 * GPO_EINVAL (malformed), GPO_ENOMEM. On failure *a may hold part of it:
 * release it. */
int attempt_decode(const char *text, struct attempt *a);

/*
 * Adds attempt a of job `job`, made under `epoch`, to b as its row in
 * `state` (end_ms, exit_code and signal STORE_NULL while unknown; reason
 * NULL for none). 0 or GPO_ENOMEM.
 */
int attempt_row(struct store_batch *b, int64_t epoch, int64_t job, const struct attempt *a,
                enum attempt_state state, const char *reason, int64_t end_ms, int64_t exit_code,
                int64_t signal);

/* ---- jobs --------------------------------------------------------------- */

/* A job in memory: everything the API and the loop read. */
struct job {
    int64_t id;
    int64_t user_id;
    char *user;      /* owned */
    char *unix_user; /* owned, or NULL: the account its attempts run as */
    char *team;      /* owned */
    enum job_state state;
    int64_t submit_ms, updated_ms;
    int64_t array_id, array_index; /* STORE_NULL: not in an array */
    char *reason;                  /* owned, or NULL: why it ended or was requeued */
    enum job_hold hold;            /* a pending job's hold (the store's jobs.hold) */
    struct jobspec spec;           /* spec.begin: not eligible before then */
    /* From the last scheduling pass, for a pending job. */
    char *wait;           /* owned, or NULL: the reason it waits */
    int64_t est_start_ms; /* -1: unknown; SCHED_EST_NO_LIMIT: its reservation waits for
                             jobs without a time limit */
    int64_t queued_ms;    /* when it (re)entered the queue: the core's submit time */
    int64_t attempts;     /* attempts made so far (the last one's number) */
    uint32_t failures;    /* attempts that ended FAILED, TIMEOUT or NODE_FAIL */
    int64_t cost_micro;   /* its ledger rows; the open segment accrues apart */
    struct attempt att;
};

/* Frees a job; NULL is fine. */
void job_free(struct job *j);

/* Sets the job's wait reason (text copied; NULL: none) and estimated start
 * (-1: unknown). Out of memory leaves no reason. */
void job_set_wait(struct job *j, const char *text, int64_t est_start_ms);

/* Whether pending job j is kept out of the scheduler's pass at now_ms: held,
 * or its begin time (spec.begin) not reached. Then its wait reason says so
 * ("hold: held by user", "deferred: begin time not reached (starts at
 * ...)", the begin time its estimated start) and *ret_begin_ms gets the
 * begin time (0 for a hold). Out of memory leaves no reason. */
bool job_held_back(struct job *j, int64_t now_ms, int64_t *ret_begin_ms);

/* Builds a job from its store row (the stored spec parsed back); `user` is
 * its user's name. 0, GPO_EINVAL with a message (an unknown state, a spec
 * that does not parse), GPO_ENOMEM. */
int job_from_row(const struct store_job *row, const char *user, struct job **ret, char *err,
                 size_t errlen);

/* The job table: jobs sorted by id (ids only grow), never freed while the
 * controller runs (a pointer to a job stays valid). */
struct jobs {
    struct job **v;
    size_t n, cap;
};

void jobs_init(struct jobs *t);
/* Frees every job; the table is empty afterwards. */
void jobs_release(struct jobs *t);

/* The job with `id`, or NULL. */
struct job *jobs_find(const struct jobs *t, int64_t id);
/* The index of the first job whose id is >= `id` (t->n if none). */
size_t jobs_index(const struct jobs *t, int64_t id);
/* Adds j (taken on success) with an id above every other's: 0, GPO_EINVAL
 * (an id not above the last), GPO_ENOMEM. */
int jobs_add(struct jobs *t, struct job *j);

/* A job of `team` (team NULL: any team) that has not ended, or (cls not
 * NULL) one of priority class `cls`; NULL when there is none. */
const struct job *jobs_find_live(const struct jobs *t, const char *team, const char *cls);

/* Tasks of array `array_id` that hold resources now. */
size_t jobs_array_active(const struct jobs *t, int64_t array_id);

/* ---- GPUs in use ------------------------------------------------------------ */

/* One share of a GPU that a live attempt holds (node, UUID and job borrowed
 * from the table; milli: the share as the quota charges it, 1000 for a whole
 * GPU, 250 for a 0.25 job, a MIG instance its memory slots' fraction). */
struct gpu_holder {
    const char *node, *uuid;
    const struct job *job;
    uint32_t milli;
};

/* Every share of every attempt that holds resources, sorted by (node, UUID,
 * job id), into *ret (caller frees). 0 or GPO_ENOMEM. */
int jobs_gpu_holders(const struct jobs *t, struct gpu_holder **ret, size_t *ret_n);

/* The range [*lo, *hi) of v[0..n) that holds GPU `uuid` on `node`. */
void jobs_gpu_holders_of(const struct gpu_holder *v, size_t n, const char *node, const char *uuid,
                         size_t *lo, size_t *hi);

/*
 * How much of one GPU is in use, in milli-GPU: the shares its holders
 * v[lo..hi) hold, summed, at most a whole GPU (1000). The one definition of
 * "GPUs in use" (docs/monitoring.md): the nodes' gpus_in_use, the dashboard's
 * tile, `gpuorch top` and gpuorch_gpus{state="allocated"} all add this up,
 * so a GPU holding only a 0.25 job is a quarter of a GPU in use.
 */
uint32_t jobs_gpu_milli_in_use(const struct gpu_holder *v, size_t lo, size_t hi);

/* The GPU shares attempt a holds, in milli-GPU (a 0.25 job: 250; two whole
 * GPUs: 2000). */
int64_t attempt_gpu_milli(const struct attempt *a);

/* ---- submissions ------------------------------------------------------------ */

/* A submission as the table takes it: the spec (normalized: team filled
 * in) and who submitted it. */
struct job_submit {
    struct jobspec spec;
    int64_t user_id;
    char user[64];
    char unix_user[33]; /* "" when none */
    int64_t submit_ms;
    size_t ntasks;              /* jobs it makes: 1, or the array's tasks */
    enum job_hold hold;         /* its jobs are stored held (spec.hold: by whom) */
    int64_t idempotency_ttl_ms; /* how long the key names the job (0: the store's default) */
};

/* Frees what sub holds (not sub). */
void job_submit_release(struct job_submit *sub);

/*
 * The checks a submission's spec needs the configuration for, as sbatch's
 * refusals at submit: the pool by its name or an alias, the GPU type by
 * cluster_gpu_type_match among the types the cluster knows (its nodes',
 * quotas' and the type table's; any type while it knows none), the
 * constraint's features among the nodes' (cluster_constraint_masks), and
 * Slurm's shape against the nodes the controller knows ("Requested node
 * configuration is not available": more nodes than the pool has of that
 * type and features, more GPUs, CPUs or memory per node than any has, an
 * exclusive share of a GPU). The spec gets the canonical pool and type
 * names. `m` borrowed (under the server's lock). 0, GPO_EINVAL with one
 * line naming the field, or GPO_ENOMEM.
 */
int job_submit_resolve(const struct cluster *m, struct jobspec *spec, char *err, size_t errlen);

/* Adds to b the rows of sub's jobs (the first carrying the Idempotency-Key
 * `key`, or NULL; with a key, the expired keys are pruned in the same batch).
 * 0 or GPO_ENOMEM. */
int job_submit_rows(const struct job_submit *sub, const char *key, struct store_batch *b);

/* After the commit gave the jobs ids[0..n): adds them to the table, the
 * first into *ret_first. 0 or GPO_ENOMEM (the jobs added so far stay; the
 * rest are on disk, and a restart loads them). */
int job_submit_apply(struct jobs *t, const struct job_submit *sub, const int64_t *ids, size_t n,
                     struct job **ret_first);

/* ---- the end of an attempt ---------------------------------------------- */

/*
 * What ending job j's current attempt in state `att` does (exit_code and
 * signal STORE_NULL when not known; reason: the agent's or the controller's
 * words, or NULL), decided at now_ms without changing anything: the job's
 * next state, its reason, whether the end counts as a failure, and the
 * attempt row's reason. The rules:
 *  - killed by its team's idle policy: requeued (PREEMPTED) or cancelled,
 *    whatever the job's own requeue setting, with the idle words;
 *  - being cancelled, or ended CANCELLED: CANCELLED;
 *  - COMPLETED: COMPLETED;
 *  - PREEMPTED: back to PENDING if the job requeues, else PREEMPTED;
 *  - FAILED, TIMEOUT, NODE_FAIL: back to PENDING while retries are left
 *    (max_retries), else that state; these count as failures.
 */
struct job_end {
    int64_t job, attempt;
    enum attempt_state att_state;
    char att_reason[160]; /* the attempt row's reason ("" for none) */
    enum job_state job_state;
    char reason[160]; /* the job's reason afterwards ("" for none) */
    int64_t end_ms, exit_code, signal;
    bool failure;
};
void job_end_decide(const struct job *j, enum attempt_state att, int64_t exit_code, int64_t signal,
                    const char *reason, int64_t now_ms, struct job_end *ret);

/*
 * Applies a committed end to job j (its attempt must be e->attempt): the
 * state, reason, failures and queue time change, and the attempt moves out
 * into *ret_att (the caller charges and releases it). The job's rows were
 * written by the caller's batch.
 */
void job_end_apply(struct job *j, const struct job_end *e, struct attempt *ret_att);

/* Adds to b the job's row update for end e. 0 or GPO_ENOMEM. */
int job_end_row(struct store_batch *b, const struct job_end *e);

#endif

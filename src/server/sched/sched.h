/*
 * sched.h - the scheduling loop and what changes attempts: one thread that
 * wakes on events (a submit, an attempt's end, a node change, a cancel) or
 * on its timer, runs the periodic tasks (node timeouts, idle GPUs, budgets,
 * a scheduling pass, the monitor's minute), and the transitions of an
 * attempt that touch several subsystems at once: its start (a pass's
 * decision), its kill (preemption, cancel, idle policy), and its end (an
 * agent's report, a node that stopped heartbeating).
 *
 * A pass is four steps, each a function a unit test can drive without a
 * daemon: input (the core's view built from memory under the lock), decide
 * (sched_pass on copies, without the lock), commit (the decisions and the
 * core's carry-over state in one store transaction under the leader epoch,
 * the lock released while it waits) and apply (memory changes and agents are
 * told, only once the commit is durable). Events that arrive during a pass
 * mark the loop dirty and are served by the next one: one pass at a time,
 * coalesced.
 *
 * Owns: struct sched: the core's carry-over state (decayed usage, attained
 * service, claims), the policy, the loop thread, the attempts that ended
 * since the last pass (their last stretch is charged to fair share then).
 *
 * Lock: the controller's state lock guards everything here but `state`,
 * which only the loop thread touches (also while it runs a pass with the
 * lock released). Functions taking a server are called with the lock held
 * unless said otherwise.
 */
#ifndef GPUORCH_SERVER_SCHED_SCHED_H
#define GPUORCH_SERVER_SCHED_SCHED_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "core/apply.h"
#include "core/sched.h"
#include "server/jobs/jobs.h"
#include "store/store.h"

struct server;
struct name_index;

/* An attempt that ended, waiting for the loop to charge its usage. */
struct sched_ended {
    int64_t job;
    int64_t end_ms;
    struct attempt att; /* owned */
};

/* Why a pass runs: the events that ask for one (sched_wake), in the order
 * that names a pass asked for by several, then the timer. A pass runs soon
 * after any of them (the gap below) but SCHED_WHY_SUBMIT while the last pass
 * left jobs waiting: a submission then frees no capacity, and the next pass
 * waits the longest gap, so that a storm of submissions costs a few passes a
 * second. */
#define SCHED_WHY_TABLE(X)                                                                         \
    X(SCHED_WHY_END, "end")       /* an attempt ended: its GPUs are free */                        \
    X(SCHED_WHY_NODE, "node")     /* a node registered, rejoined or has GPUs again */              \
    X(SCHED_WHY_CANCEL, "cancel") /* a pending job cancelled: its dependents may fail */           \
    X(SCHED_WHY_SUBMIT, "submit") /* a job submitted */                                            \
    X(SCHED_WHY_CHANGE, "change") /* a job held, released, requeued or updated */                  \
    X(SCHED_WHY_SERVE, "serve")   /* a service written; a request held for a service at zero */    \
    X(SCHED_WHY_TIMER, "timer")   /* none of them: the loop's timer */
#define SCHED_WHY_ENUM(e, name) e,
enum sched_why { SCHED_WHY_TABLE(SCHED_WHY_ENUM) SCHED_NWHY };
#undef SCHED_WHY_ENUM

/* The name of `why` ("end", ... "timer"). */
const char *sched_why_name(enum sched_why why);

/* A task another subsystem runs on the loop's thread, under the lock,
 * before the pass (the serving runtime's reconcile): due_ms says when
 * (server time; now_ms at the latest when its last run is later than
 * now_ms, the wall clock stepped back), run runs it. Set before
 * sched_start; NULL: none. */
struct sched_hook {
    int64_t (*due_ms)(const struct server *s, int64_t now_ms);
    void (*run)(struct server *s, int64_t now_ms);
};

/* What another subsystem does in each pass, under the lock (the MIG
 * planner, mig/mig.h): `view` may change the pass's view before it
 * decides; `done` runs once its decisions are applied, with its view, its
 * queue (in order) and its result. NULL: nothing. */
struct sched_pass_hooks {
    void (*view)(struct server *s, struct cluster_view *view);
    void (*done)(struct server *s, const struct cluster_view *view, const struct sched_job *queue,
                 size_t nqueue, const struct sched_result *res, int64_t now_ms);
};

struct sched {
    struct sched_state state; /* the loop thread's only */
    struct sched_hook hook;
    struct sched_pass_hooks pass_hooks;
    struct sched_policy policy;
    int64_t pass_interval_ms; /* the timer */
    int64_t node_timeout_ms;
    bool dirty, stopping; /* dirty: an event since the last pass (`wants` says which) */
    unsigned wants;       /* 1 << enum sched_why of each event since the last pass */
    bool backlog;         /* the last pass left jobs waiting */
    pthread_cond_t cv;
    pthread_t thread;
    bool started;
    uint64_t passes;
    uint64_t passes_by[SCHED_NWHY]; /* passes by why they ran */
    int64_t pass_cost_ns;           /* how long the last pass held the lock or a core: its
                                       time (monotonic clock) less its commits' waits */
    int64_t commit_ns;              /* the loop's time in sched_commit_unlocked, in all */
    int64_t state_saved_ms;         /* when the loop last committed the core's state */
    int64_t last_pass_ms;           /* when the last pass ended (0: none yet) */
    int64_t chores_ms;     /* when the other periodic tasks last ran (timeouts, monitor, ...) */
    bool chores_dirty;     /* an event since then */
    int64_t next_begin_ms; /* the earliest begin time of a job the last pass left out
                              for it (0: none): the next pass is due then */
    struct sched_ended *ended;
    size_t nended, ended_cap;
    struct sched_result result;     /* kept from pass to pass (its scratch memory) */
    struct sched_run_table running; /* the pass's running set, from its input to its apply
                                       (the entries borrow the input's requests) */
};

/* The loop's state with the default policy; 0 or GPO_* (a condition variable). */
int sched_init(struct sched *sc, int64_t pass_interval_ms, int64_t node_timeout_ms);
void sched_release(struct sched *sc);

/* At start (after the jobs are loaded): the core's carry-over state and the
 * attempts that hold resources, from the store; the failures each job has
 * used of its retries. 0, or an error with a message. */
int sched_load(struct server *s, char *err, size_t errlen);

/* Starts the loop thread; 0 or GPO_*. Not under the lock. */
int sched_start(struct server *s);
/* Asks for a pass soon, for `why` (an event, not SCHED_WHY_TIMER): at once
 * when the gap since the last pass allows (see sched_pass_due_ms). */
void sched_wake(struct sched *sc, enum sched_why why);
/* Stops the loop thread and waits for it; a clean stop flushes the
 * monitor's open minutes and saves the core's state. Not under the lock. */
void sched_stop(struct server *s);

/* One turn of the loop at now_ms: every periodic task and a pass, whether
 * due or not. For tests, which run the loop without its thread. */
void sched_turn(struct server *s, int64_t now_ms);

/*
 * The server's time (ms) at which the next pass is due: with an event
 * pending, the last pass's end plus a gap that follows the last pass's cost
 * (SCHED_PASS_GAP_FACTOR times it, within SCHED_PASS_GAP_FLOOR_MS and
 * SCHED_PASS_GAP_MAX_MS; the maximum for a submission behind a backlog);
 * without one, the last pass's end plus the timer's interval; now_ms when
 * the last pass's end is later than now_ms (the wall clock stepped back).
 */
int64_t sched_pass_due_ms(const struct sched *sc, int64_t now_ms);

/* What the loop thread does when it wakes at now_ms: the periodic tasks
 * that are due (node timeouts, idle GPUs and budgets on their own timer,
 * then the pass when due, then the monitor's tick on that timer). Returns
 * the server's time of the next due task. For tests too, with their clock. */
int64_t sched_tick(struct server *s, int64_t now_ms);

/* The loop's own families for GET /metrics: gpuorch_sched_passes_total by
 * trigger (p borrowed; prom's sticky error). */
struct prom;
void sched_metrics(const struct sched *sc, struct prom *p);

/* ---- a pass, step by step ------------------------------------------------ */

/* What a pass works on, built from memory under the lock. */
struct sched_input {
    struct cluster_view view;
    struct sched_job *reqs; /* the queue first, then the running set's */
    struct job **jobs;      /* reqs[k]'s job */
    size_t nqueue, nreqs;
    struct sched_running *running; /* the attempts that hold resources */
    size_t nrunning;
    struct sched_node_part *parts; /* their allocations' parts and shares */
    struct sched_share *shares;
    struct name_index *node_index; /* the view's nodes by name */
    struct job **dep_failed;       /* pending jobs whose afterok dependency failed */
    char (*dep_reason)[96];
    size_t ndep_failed;
};
void sched_input_release(struct sched_input *in);

/*
 * Step 1: the core's view of the configuration (dirty GPUs held back), the
 * queue (pending jobs whose dependencies are met, within their array's cap,
 * by id), the running set (every attempt that holds resources, whatever its
 * job's state: the run table of core/apply.h, struct sched's `running`), and
 * the jobs failed by their dependencies. Wait reasons of jobs that cannot be
 * queued are set here. The attempts that ended since the last pass are
 * charged first (sched_apply_end). 0, or an error with a message.
 */
int sched_input(struct server *s, struct sched_input *in, char *err, size_t errlen);

/* Step 2: the core's decisions into s's pass result, at now_ms (never before
 * the last pass's time). Not under the lock: it works on `in` only. */
int sched_decide(struct server *s, struct sched_input *in, int64_t now_ms);

/* What the commit of a pass carries into its apply: the new attempts. */
struct sched_plan {
    struct attempt *atts; /* one per start */
    size_t natts;
    bool save_state; /* the core's state goes to disk with it */
};
void sched_plan_release(struct sched_plan *p);

/*
 * Step 3: builds the decisions (attempts started, kills for preemption,
 * jobs failed by their dependencies) and, when due, the core's state, and
 * commits them in one transaction under the leader epoch, with the lock
 * released meanwhile. 0 (also when there was nothing to commit), or the
 * store's code (nothing is applied then).
 */
int sched_commit(struct server *s, const struct sched_input *in, int64_t now_ms,
                 struct sched_plan *plan);

/* Step 4: the committed decisions into memory and into the run table
 * (sched_apply_result: a decision the running set contradicts is logged);
 * agents are told. A job cancelled while the commit ran still gets its
 * attempt, to be killed at once. Wait reasons of the jobs that wait are
 * set. */
void sched_apply(struct server *s, const struct sched_input *in, struct sched_plan *plan,
                 int64_t now_ms);

/* ---- transitions of an attempt ------------------------------------------ */

/* Adds to b the row that records job j's kill for `cause` (detail: an idle
 * kill's words). 0 or GPO_ENOMEM. */
int sched_kill_row(struct server *s, struct store_batch *b, const struct job *j,
                   enum kill_cause cause, const char *detail);
/* Marks job j's attempt killed (attempt_kill) and tells its nodes; the
 * agents stop it and report its end. 0, or attempt_kill's code. */
int sched_kill_apply(struct server *s, struct job *j, enum kill_cause cause, const char *detail,
                     int64_t grace_ms);

/*
 * A user's cancel of job j (not ended, not being killed) at now_ms: a job
 * that holds resources gets its attempt's KILLING row (the kill is applied
 * after the commit; the agent reports CANCELLED and the end cancels the
 * job); a pending job its CANCELLED row. *ret_attempt: the attempt to kill
 * (0: none). 0 or GPO_ENOMEM.
 */
int sched_cancel_plan(struct server *s, const struct job *j, int64_t now_ms, struct store_batch *b,
                      int64_t *ret_attempt);
/* After the commit: the kill of `attempt` (when it is still the job's), or
 * the pending job cancelled and the loop woken (its dependents may fail).
 * The job, or NULL when it is gone. */
struct job *sched_cancel_apply(struct server *s, int64_t id, int64_t attempt, int64_t now_ms);

/* An attempt's end being committed: the job's decision and the ledger's. */
struct sched_end {
    struct job_end end;
    int64_t cost_micro;  /* of the ledger rows planned with the end */
    int64_t pending_seq; /* the segment's pending_seq when planned (0: none) */
};

/*
 * Adds to b the rows of ending job j's current attempt in state `att`
 * (exit_code and signal STORE_NULL when not known; reason may be NULL) at
 * now_ms: the attempt's row, its ledger rows, the job's row; fills *ret
 * without changing j. 0 or GPO_ENOMEM.
 */
int sched_end_plan(struct server *s, const struct job *j, enum attempt_state att, int64_t exit_code,
                   int64_t signal, const char *reason, int64_t now_ms, struct sched_end *ret,
                   struct store_batch *b);
/* After the commit: the job's state, its cost, its nodes told, its last
 * stretch kept for the next pass to charge, the loop woken. Nothing when
 * the job's attempt is no longer e's. */
void sched_end_apply(struct server *s, const struct sched_end *e);

/* Commits b (taken) with the lock released meanwhile; logs a failure as
 * "WHAT not committed". 0 or the store's code. */
int sched_commit_unlocked(struct server *s, struct store_batch *b, const char *what);

#endif

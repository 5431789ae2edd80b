/*
 * fixture.h - building clusters, queues and running sets for core tests, and
 * a small driver that plays the caller's part between passes (start what was
 * started, evict what was preempted, end jobs when their run time is up).
 *
 * Everything lives in one heap-allocated struct fx with fixed capacities, so
 * tests stay short: fx_new, a few fx_* builders, fx_pass, asserts, fx_free.
 */
#ifndef GPUORCH_TESTS_FIXTURE_H
#define GPUORCH_TESTS_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/model.h"
#include "core/sched.h"

#define FX_MAX_NODES  2048
#define FX_MAX_GPUS   (FX_MAX_NODES * 8)
#define FX_MAX_JOBS   20000
#define FX_MAX_SMALL  64
#define FX_MAX_SHARES 32

/* A job the driver knows about: its request and, for fx_step, how long it runs. */
struct fx_job {
    struct sched_job req;
    int64_t run_ms;     /* work left to do (fx_step); 0: never ends by itself */
    int64_t started_ms; /* -1 while pending */
    int64_t ends_ms;    /* when fx_step ends it */
    int64_t kill_ms;    /* being preempted: evicted at this time; -1 none */
    int preemptions;
    int starts;
    bool done;
    bool borrowed;
    struct sched_alloc alloc;
    struct sched_node_part parts[FX_MAX_SHARES];
    struct sched_share shares[FX_MAX_SHARES];
};

struct fx {
    struct sched_node nodes[FX_MAX_NODES];
    struct sched_gpu gpus[FX_MAX_GPUS];
    struct sched_pool pools[FX_MAX_SMALL];
    struct sched_gpu_type types[FX_MAX_SMALL];
    struct sched_team teams[FX_MAX_SMALL];
    struct sched_quota quotas[FX_MAX_SMALL][FX_MAX_SMALL];
    struct sched_prio_class classes[FX_MAX_SMALL];
    char names[FX_MAX_NODES][16];
    struct sched_cluster c;
    struct sched_policy pol;
    struct sched_state st;
    struct sched_result res;

    struct fx_job jobs[FX_MAX_JOBS];
    uint32_t njobs;
    /* built by fx_pass from jobs[] */
    struct sched_job queue[FX_MAX_JOBS];
    uint32_t queue_of[FX_MAX_JOBS]; /* queue index -> jobs[] index */
    struct sched_running running[FX_MAX_JOBS];
    uint32_t running_of[FX_MAX_JOBS];
    size_t nqueue, nrunning;
    int64_t now;
    int64_t gpu_ms_done; /* GPU-ms of work completed by fx_step (milli x ms / 1000) */
};

struct fx *fx_new(void);
void fx_free(struct fx *fx);
/* cmocka teardown: frees the fixture a test left in *state, also when an
 * assertion failed. */
int fx_teardown(void **state);

uint32_t fx_pool(struct fx *fx, const char *name);
uint32_t fx_type(struct fx *fx, const char *name);
/* Adds `count` nodes; returns the first node's index. Each GPU gets memory
 * `gpu_mem_mib`; NVLink domains split the node's GPUs in halves when `nvlink`. */
uint32_t fx_nodes(struct fx *fx, uint32_t count, uint32_t pool, uint32_t type, uint32_t ngpus,
                  uint32_t gpu_mem_mib, uint32_t cpus, uint64_t mem_mib);
uint32_t fx_team(struct fx *fx, const char *name, uint32_t weight, int64_t borrow_limit_milli);
void fx_quota(struct fx *fx, uint32_t team, uint32_t pool, uint32_t type, int64_t guaranteed,
              int64_t borrow_limit);
uint32_t fx_class(struct fx *fx, const char *name, int32_t order, bool may_preempt);

/* Adds a pending job with sensible defaults (1 GPU, 1 CPU, 1 GiB, any pool and
 * type, first team and class, submitted now, 1 h limit); returns it to adjust. */
struct sched_job *fx_job(struct fx *fx, uint64_t id);
struct fx_job *fx_get(struct fx *fx, uint64_t id);

/* Fills fx->queue and fx->running from the jobs not done (pending ones form
 * the queue, started ones the running set) and points *q and *r at them. */
void fx_collect(struct fx *fx, struct sched_queue *q, struct sched_running_set *r);

/* fx_collect, then one pass at `now`. Returns sched_pass's code. */
int fx_pass(struct fx *fx, int64_t now);

/* Applies the last pass's decisions: starts (copies the allocation) and
 * preemptions (the job is evicted at now + grace and requeued then). */
void fx_apply(struct fx *fx);

/* Ends a running job now (completed); it leaves the running set. */
void fx_finish(struct fx *fx, uint64_t id);

/* Moves time to `now`: evicts preempted jobs whose grace is over (requeued,
 * work since start lost unless checkpointable), ends jobs whose run time is
 * done, charging each one's usage since the last pass (sched_state_charge_end)
 * as the controller does. Then fx_pass + fx_apply. Returns the pass's code. */
int fx_step(struct fx *fx, int64_t now);

/* The earliest time a running job ends (run_ms) or is evicted, or -1: the
 * next moment fx_step has something to do. */
int64_t fx_next_event(const struct fx *fx);

/* A deterministic PRNG (splitmix64): tests own their randomness. */
uint64_t fx_rng_next(uint64_t *state);
/* Uniform in [lo, hi]. */
int64_t fx_rng_range(uint64_t *state, int64_t lo, int64_t hi);

const struct sched_wait *fx_wait(const struct fx *fx, uint64_t id);
const struct sched_start *fx_start(const struct fx *fx, uint64_t id);
const struct sched_preempt *fx_preempt(const struct fx *fx, uint64_t id);
bool fx_running(const struct fx *fx, uint64_t id);

/* Node of the first share (or part) of a started job's allocation. */
uint32_t fx_start_node(const struct fx *fx, uint64_t id);

#endif

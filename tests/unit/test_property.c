/*
 * test_property.c - thousands of seeded random workloads through sched_pass,
 * under an invariant checker.
 *
 * A small driver plays the controller: jobs arrive, start where a pass says,
 * run their work, finish, are preempted (they exit after the grace period,
 * keeping their work up to the last checkpoint if checkpointable) and are
 * requeued, or are cancelled; nodes drain, fail (their jobs are requeued), go
 * down and come back. A job leaving the running set is charged with
 * sched_state_charge_end, as a controller does. Every time lies on a grid of
 * STEP_MS, so GPU-time held is an exact integer, comparable with what the core
 * accounted.
 *
 * After every pass the checker verifies capacity, quotas and the borrowed flag,
 * that a job is placed at most once, that allocations have the shape of the
 * request, that every waiting job gets one wait (final exactly when no node
 * could ever hold it, see job_possible), that no job waits for resources the
 * pass left free, that preemptions evict running jobs for a reason the policy
 * allows, and that the core's attained service and lost work match what the
 * driver saw; at the end of a workload, that GPU-time is conserved. Same seed,
 * same decisions: a rerun (also with the state rebuilt from its arrays before
 * every pass, as after a restart, or with the queue and running arrays
 * shuffled) must give the same hash of every result.
 *
 * Out of memory: for a sample of the passes of a sample of the workloads,
 * every allocation the pass makes (N of them, counted with base/alloc.h's
 * hook) is failed in turn, the 1st, the 2nd, ... the Nth, on a copy of the
 * state, with a fresh result and with one warmed by an undisturbed run of the
 * same pass (its id map, arena and arrays then carried, as from pass to
 * pass). Each such pass must return GPO_ENOMEM with the state unchanged and
 * the result emptied, and the same pass retried without a fault must decide
 * what the undisturbed pass decided and leave the same state.
 *
 * All workloads run once in the group setup; each test case then reports the
 * violations of its invariant, with the seed of each failing workload. To
 * replay one seed with a trace of every pass: PROPERTY_SEED=0x... test_property.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "base/err.h"
#include "core/explain.h"
#include "core/model.h"
#include "core/sched.h"
#include "base/banned.h"

#define STEP_MS            10000
#define MAX_NODES          8
#define MAX_GPUS           (MAX_NODES * 8)
#define MAX_POOLS          3
#define MAX_TYPES          2
#define MAX_TEAMS          4
#define MAX_CLASSES        3
#define MAX_JOBS           64
#define MAX_STEPS          40
#define MAX_SHARES         16 /* the largest valid request: 16 whole GPUs */
#define WORKLOADS_PER_BASE 800

/* Workload seeds: base + k for k < WORKLOADS_PER_BASE. */
static const uint64_t seed_bases[] = {
    0x6770756f72636801ull,
    0x0123456789abcdefull,
    0xdeadbeefcafe0000ull,
    0x5eed5eed00000000ull,
};
#define NSEEDS (sizeof(seed_bases) / sizeof(seed_bases[0]) * WORKLOADS_PER_BASE)

/* ---- PRNG: splitmix64 ---- */

struct rng {
    uint64_t s;
};

static uint64_t rng_next(struct rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint32_t rng_below(struct rng *r, uint32_t n)
{
    return (uint32_t)(rng_next(r) % n);
}

static bool rng_chance(struct rng *r, uint32_t percent)
{
    return rng_below(r, 100) < percent;
}

/* ---- invariants and the report ---- */

#define INVARIANTS(X)                                                                              \
    X(PASS, "sched_pass succeeds on valid input")                                                  \
    X(CAPACITY, "no GPU, CPU or host memory over capacity; new work only on usable GPUs")          \
    X(QUOTA, "team usage within guarantee + borrowing limit")                                      \
    X(BORROWED, "borrowed exactly when usage + job exceeds the guarantee")                         \
    X(ONCE, "every job placed at most once")                                                       \
    X(GPU_TIME, "GPU-time held == useful + checkpointed + lost + in progress")                     \
    X(SERVICE, "attained service and lost work match what jobs held")                              \
    X(SHAPE, "allocations match the request")                                                      \
    X(WAITS, "one wait per waiting job, in queue order")                                           \
    X(FINAL, "final reasons only for invalid or impossible jobs, always for invalid ones")         \
    X(UNSCHEDULABLE, "a job no node could ever hold gets a final reason")                          \
    X(IDLE, "no job waits for resources that the pass left free")                                  \
    X(EXPLAIN, "a job waiting for 'priority' fit the free capacity when the pass began")           \
    X(PREEMPT, "preemptions evict running jobs for an allowed reason")                             \
    X(SAME_SEED, "the same seed gives the same decisions")                                         \
    X(RESTART, "a state rebuilt from its arrays gives the same decisions")                         \
    X(QUEUE_ORDER, "the order of the queue and running arrays changes no decision")                \
    X(ENOMEM, "a pass whose allocation fails returns GPO_ENOMEM and changes nothing")

enum inv {
#define INV_ENUM(name, text) INV_##name,
    INVARIANTS(INV_ENUM)
#undef INV_ENUM
        INV_COUNT
};

static const char *const inv_text[] = {
#define INV_TEXT(name, text) text,
    INVARIANTS(INV_TEXT)
#undef INV_TEXT
};

#define REPORT_KEEP 5

/* What the workloads exercised: a test fails if a feature was never hit. */
#define COVERAGE(X)                                                                                \
    X(starts)                                                                                      \
    X(borrowed_starts)                                                                             \
    X(guaranteed_starts)                                                                           \
    X(fraction_starts)                                                                             \
    X(mem_starts)                                                                                  \
    X(cpu_only_starts)                                                                             \
    X(gang_starts)                                                                                 \
    X(exact_gang_starts)                                                                           \
    X(preempt_priority)                                                                            \
    X(preempt_reclaim)                                                                             \
    X(preempt_las)                                                                                 \
    X(preempt_migrate)                                                                             \
    X(completions)                                                                                 \
    X(checkpoint_saves)                                                                            \
    X(lost_work)                                                                                   \
    X(past_limit)                                                                                  \
    X(final_waits)                                                                                 \
    X(quota_waits)                                                                                 \
    X(reserved_waits)                                                                              \
    X(blocked_waits)                                                                               \
    X(preempting_waits)                                                                            \
    X(reserves)                                                                                    \
    X(drain_events)                                                                                \
    X(down_events)                                                                                 \
    X(node_failures)                                                                               \
    X(cancels)                                                                                     \
    X(cpu_node_starts)                                                                             \
    X(possible_jobs)                                                                               \
    X(impossible_jobs)

struct coverage {
#define COV_FIELD(name) unsigned long name;
    COVERAGE(COV_FIELD)
#undef COV_FIELD
};

struct report {
    unsigned long workloads, passes;
    unsigned long count[INV_COUNT];
    unsigned long count_mixed[INV_COUNT]; /* of those, in clusters with mixed GPU memory */
    unsigned nkept[INV_COUNT];
    char kept[INV_COUNT][REPORT_KEEP][400];
    struct coverage cov;
    unsigned long fault_passes;   /* passes whose every allocation was failed in turn */
    unsigned long fault_allocs;   /* allocations failed so */
    unsigned long fault_absorbed; /* failed, and the pass did without it */
};

/* ---- the simulated world ---- */

enum pjob_state { PJ_FUTURE, PJ_PENDING, PJ_RUNNING, PJ_DONE };

struct pjob {
    struct sched_job req;
    enum pjob_state state;
    bool bad;      /* built invalid on purpose */
    bool possible; /* the oracle: some node could hold it on an empty cluster */
    int64_t arrive_ms;
    int64_t work_ms;       /* work to do in all */
    int64_t left_ms;       /* work still to do */
    int64_t ckpt_every_ms; /* checkpointable: checkpoint interval */
    int64_t saved_ms;      /* work kept by checkpoints of earlier attempts */
    int64_t start_ms;
    int64_t kill_ms; /* preempted: exits then; -1 none */
    int64_t milli;   /* milli-GPU of the current allocation */
    int64_t seen;    /* milli-GPU x ms held, up to the last pass or exit (the core's account) */
    bool borrowed;
    struct sched_alloc alloc;
    struct sched_node_part parts[MAX_NODES];
    struct sched_share shares[MAX_SHARES];
};

enum mode {
    MODE_CHECK = 0, /* run every check */
    MODE_RERUN,     /* same seed again, without the per-pass checks */
    MODE_RESTART,   /* same seed, state rebuilt from its arrays before every pass */
    MODE_SHUFFLE,   /* same seed, queue and running arrays in a random order */
    MODE_FAULT,     /* same seed, every allocation of sampled passes failed in turn */
};

struct world {
    uint64_t seed;
    bool mixed; /* one GPU type comes in two memory sizes */
    enum mode mode;
    bool trace;
    struct report *rep;

    struct sched_node nodes[MAX_NODES];
    struct sched_gpu gpus[MAX_GPUS];
    uint32_t gpu_node[MAX_GPUS];
    struct sched_pool pools[MAX_POOLS];
    struct sched_gpu_type types[MAX_TYPES];
    struct sched_team teams[MAX_TEAMS];
    struct sched_quota quotas[MAX_TEAMS][MAX_POOLS * MAX_TYPES];
    struct sched_prio_class classes[MAX_CLASSES];
    struct sched_cluster c;
    struct sched_policy pol;

    struct pjob jobs[MAX_JOBS];
    uint32_t njobs;
    uint32_t job_of_id[MAX_JOBS + 1]; /* ids are 1..njobs */

    uint32_t nsteps;
    int32_t ev_node[MAX_STEPS];   /* node event before the pass of each step, -1 none */
    bool ev_down[MAX_STEPS];      /* down/up rather than drain/undrain */
    bool ev_fail[MAX_STEPS];      /* going down with jobs on it: they are requeued */
    int32_t ev_cancel[MAX_STEPS]; /* a user cancels this job (index), -1 none */
    struct rng shuffle;

    int64_t now;
    struct sched_job queue[MAX_JOBS];
    uint32_t queue_job[MAX_JOBS];
    size_t nqueue;
    struct sched_running running[MAX_JOBS];
    uint32_t running_job[MAX_JOBS];
    size_t nrunning;

    /* milli-GPU x ms held (metered step by step), and what became of it: work
     * of completed jobs, work kept by checkpoints, work lost to preemption,
     * node failure or cancellation */
    int64_t held, useful, saved, lost;

    uint64_t pass_hash[MAX_STEPS];
    uint8_t pass_kind[MAX_STEPS]; /* pass_kind() of each pass */
    uint64_t fault_steps;         /* MODE_FAULT: bit s, fail the allocations of pass s */
    struct sched_state st;
    struct sched_result res;
};

static const char *const pool_names[MAX_POOLS] = {"p0", "p1", "p2"};
static const char *const type_names[MAX_TYPES] = {"A100", "H100"};
static const uint32_t type_mem[MAX_TYPES][2] = {{40960, 81920}, {81920, 143360}};
static const char *const node_names[MAX_NODES] = {"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"};
static const char *const team_names[MAX_TEAMS] = {"t0", "t1", "t2", "t3"};
static const char *const class_names[MAX_CLASSES] = {"c0", "c1", "c2"};

__attribute__((format(printf, 3, 4))) static void violation(struct world *w, enum inv k,
                                                            const char *fmt, ...)
{
    struct report *rep = w->rep;
    rep->count[k]++;
    rep->count_mixed[k] += w->mixed;
    if (w->trace || rep->nkept[k] < REPORT_KEEP) {
        char msg[320];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (w->trace)
            printf("# VIOLATION %s: %s\n", inv_text[k], msg);
        if (rep->nkept[k] < REPORT_KEEP)
            snprintf(rep->kept[k][rep->nkept[k]++], sizeof(rep->kept[k][0]),
                     "seed 0x%016llx%s t=%llds: %s", (unsigned long long)w->seed,
                     w->mixed ? " (mixed GPU memory)" : "", (long long)(w->now / 1000), msg);
    }
}

#define CHECK(w, k, cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond))                                                                               \
            violation((w), INV_##k, __VA_ARGS__);                                                  \
    } while (0)

static void describe_job(const struct sched_job *j, char *buf, size_t size)
{
    snprintf(buf, size,
             "job %llu (team %u class %u pool %d type %d gpus %d%s milli %d mem %lld "
             "min_mem %lld cpus %d host %lld)",
             (unsigned long long)j->id, j->team, j->prio, j->pool == SCHED_ANY ? -1 : (int)j->pool,
             j->gpu_type == SCHED_ANY ? -1 : (int)j->gpu_type, j->gpus,
             j->multi_node ? " gang" : "", j->gpu_milli, (long long)j->gpu_mem_mib,
             (long long)j->min_gpu_mem_mib, j->cpus, (long long)j->mem_mib);
}

/* ---- quotas as the model defines them ---- */

static int64_t guar_of(const struct world *w, uint32_t team, uint32_t pool, uint32_t type)
{
    const struct sched_quota *q = sched_team_quota(&w->teams[team], pool, type);
    return q ? q->guaranteed_milli : 0;
}

/* Guarantee plus borrowing limit; INT64_MAX where the limit is -1. */
static int64_t limit_of(const struct world *w, uint32_t team, uint32_t pool, uint32_t type)
{
    const struct sched_quota *q = sched_team_quota(&w->teams[team], pool, type);
    int64_t borrow = q ? q->borrow_limit_milli : w->teams[team].borrow_limit_milli;
    return borrow < 0 ? INT64_MAX : (q ? q->guaranteed_milli : 0) + borrow;
}

static bool wants_gpu(const struct sched_job *j)
{
    return j->gpus > 0 || j->gpu_milli > 0 || j->gpu_mem_mib > 0;
}

/* Milli-GPU a memory request takes on a GPU of `mem` MiB. */
static int64_t mem_milli(int64_t req, uint32_t mem)
{
    return (req * SCHED_MILLI + mem - 1) / mem;
}

/*
 * The oracle: could the job run on an empty cluster, with every node up? A
 * field out of range makes it invalid; otherwise some node (or, for a gang,
 * the nodes of one pool and GPU type together) must have the GPUs of the
 * right type and memory, the CPUs and host memory, and the team's limit
 * there must admit its milli-GPU. GPUs in MIG mode count: their mode may change.
 */
struct held;
static bool exact_fits(const struct world *w, const struct held *h, const struct sched_job *j,
                       bool now, uint32_t *ret_node);

static bool job_possible(const struct world *w, const struct sched_job *j)
{
    const struct sched_cluster *c = &w->c;
    if (j->team >= c->nteams || j->prio >= c->nclasses ||
        (j->pool != SCHED_ANY && j->pool >= c->npools) ||
        (j->gpu_type != SCHED_ANY && j->gpu_type >= c->ngpu_types))
        return false;
    if (j->gpus < 0 || j->gpu_milli < 0 || j->gpu_mem_mib < 0 || j->min_gpu_mem_mib < 0 ||
        j->cpus < 0 || j->mem_mib < 0 || j->time_limit_ms < 0)
        return false;
    if ((j->gpus > 0) + (j->gpu_milli > 0) + (j->gpu_mem_mib > 0) > 1 ||
        j->gpu_milli >= SCHED_MILLI || (j->multi_node && j->gpus <= 0))
        return false;
    if (j->nodes > 1) {
        uint32_t n;
        return j->gpus % j->nodes == 0 && j->cpus % j->nodes == 0 && j->mem_mib % j->nodes == 0 &&
               exact_fits(w, NULL, j, false, &n);
    }
    if (j->multi_node) {
        for (uint32_t p = 0; p < c->npools; p++) {
            for (uint32_t t = 0; t < c->ngpu_types; t++) {
                if ((j->pool != SCHED_ANY && j->pool != p) ||
                    (j->gpu_type != SCHED_ANY && j->gpu_type != t))
                    continue;
                int64_t count = 0;
                for (uint32_t n = 0; n < c->nnodes; n++) {
                    const struct sched_node *node = &w->nodes[n];
                    if (node->pool != p || !node->ngpus || w->gpus[node->gpu_first].type != t)
                        continue;
                    for (uint32_t i = 0; i < node->ngpus; i++)
                        count += w->gpus[node->gpu_first + i].mem_mib >= j->min_gpu_mem_mib;
                }
                if (count >= j->gpus && limit_of(w, j->team, p, t) >= (int64_t)j->gpus * 1000)
                    return true;
            }
        }
        return false;
    }
    for (uint32_t n = 0; n < c->nnodes; n++) {
        const struct sched_node *node = &w->nodes[n];
        if ((j->pool != SCHED_ANY && node->pool != j->pool) || node->cpus < (uint32_t)j->cpus ||
            node->mem_mib < (uint64_t)j->mem_mib)
            continue;
        if (!wants_gpu(j))
            return true;
        if (!node->ngpus)
            continue;
        uint32_t type = w->gpus[node->gpu_first].type;
        if (j->gpu_type != SCHED_ANY && j->gpu_type != type)
            continue;
        int32_t count = 0;
        uint32_t best_mem = 0;
        for (uint32_t i = 0; i < node->ngpus; i++) {
            uint32_t mem = w->gpus[node->gpu_first + i].mem_mib;
            if (mem < j->min_gpu_mem_mib || mem < j->gpu_mem_mib)
                continue;
            count++;
            best_mem = mem > best_mem ? mem : best_mem;
        }
        if (!count || count < j->gpus)
            continue;
        int64_t milli = j->gpus > 0        ? (int64_t)j->gpus * SCHED_MILLI
                        : j->gpu_milli > 0 ? j->gpu_milli
                                           : mem_milli(j->gpu_mem_mib, best_mem);
        if (limit_of(w, j->team, node->pool, type) >= milli)
            return true;
    }
    return false;
}

/* ---- generation ---- */

static void gen_cluster(struct world *w, struct rng *r)
{
    struct sched_cluster *c = &w->c;
    c->npools = 1 + rng_below(r, MAX_POOLS);
    c->ngpu_types = 1 + rng_below(r, MAX_TYPES);
    for (uint32_t p = 0; p < c->npools; p++)
        w->pools[p].name = pool_names[p];
    for (uint32_t t = 0; t < c->ngpu_types; t++)
        w->types[t] = (struct sched_gpu_type){.id = 100 + t, .name = type_names[t]};
    /* Sometimes one type comes in two memory sizes (A100 40 GB and 80 GB). */
    bool mixed = w->mixed = rng_chance(r, 15);
    c->nnodes = 2 + rng_below(r, MAX_NODES - 1);
    for (uint32_t n = 0; n < c->nnodes; n++) {
        static const uint32_t ngpus_of[] = {2, 4, 8};
        static const uint32_t cpus_of[] = {16, 32, 64};
        uint32_t type = rng_below(r, c->ngpu_types);
        uint32_t ngpus = rng_chance(r, 5) ? 0 : ngpus_of[rng_below(r, 3)];
        uint32_t mem = type_mem[type][mixed ? rng_below(r, 2) : 0];
        uint32_t roll = rng_below(r, 100);
        bool nvlink = rng_chance(r, 80);
        int32_t mig = ngpus && rng_chance(r, 8) ? (int32_t)rng_below(r, ngpus) : -1;
        w->nodes[n] = (struct sched_node){.name = node_names[n],
                                          .pool = rng_below(r, c->npools),
                                          .state = roll < 80   ? SCHED_NODE_UP
                                                   : roll < 90 ? SCHED_NODE_DRAINING
                                                               : SCHED_NODE_DOWN,
                                          .cpus = cpus_of[rng_below(r, 3)],
                                          .mem_mib = (uint64_t)131072 << rng_below(r, 3),
                                          .gpu_first = c->ngpus,
                                          .ngpus = ngpus};
        for (uint32_t i = 0; i < ngpus; i++) {
            w->gpu_node[c->ngpus] = n;
            w->gpus[c->ngpus++] = (struct sched_gpu){
                .type = type,
                .mem_mib = mem,
                .nvlink_domain = nvlink && ngpus >= 4 ? (int32_t)(i * 2 / ngpus) : -1,
                .mig_slices = 7,
                .mig_enabled = (int32_t)i == mig};
        }
    }
    static const int64_t borrow_of[] = {-1, -1, 500, 2000, 8000, 0};
    static const int64_t guar_of_pick[] = {0, 500, 1000, 2000, 4000, 8000, 16000};
    static const int64_t qborrow_of[] = {-1, 0, 1000, 4000};
    c->nteams = 1 + rng_below(r, MAX_TEAMS);
    for (uint32_t t = 0; t < c->nteams; t++) {
        struct sched_team *team = &w->teams[t];
        *team = (struct sched_team){.id = 1000 + t,
                                    .name = team_names[t],
                                    .weight = 1 + rng_below(r, 4),
                                    .borrow_limit_milli = borrow_of[rng_below(r, 6)],
                                    .quotas = w->quotas[t]};
        for (uint32_t p = 0; p < c->npools; p++) {
            for (uint32_t g = 0; g < c->ngpu_types; g++) {
                if (!rng_chance(r, 60))
                    continue;
                w->quotas[t][team->nquotas++] =
                    (struct sched_quota){.pool = p,
                                         .gpu_type = g,
                                         .guaranteed_milli = guar_of_pick[rng_below(r, 7)],
                                         .borrow_limit_milli = qborrow_of[rng_below(r, 4)]};
            }
        }
    }
    c->nclasses = 2 + rng_below(r, MAX_CLASSES - 1);
    for (uint32_t k = 0; k < c->nclasses; k++)
        w->classes[k] = (struct sched_prio_class){.name = class_names[k],
                                                  .order = (int32_t)rng_below(r, 4) * 10,
                                                  .may_preempt = rng_chance(r, 50)};
}

static void gen_policy(struct world *w, struct rng *r)
{
    static const int64_t half_lives[] = {60000, 600000, 3600000, 7 * 24 * 3600000LL};
    struct sched_policy *p = &w->pol;
    sched_policy_default(p);
    p->order = (enum sched_order)rng_below(r, 4);
    p->within = (enum sched_within)rng_below(r, 2);
    p->packing = (enum sched_packing)rng_below(r, 2);
    p->backfill = rng_chance(r, 50);
    p->preemption = rng_chance(r, 60);
    p->preempt_grace_ms = (int64_t)rng_below(r, 3) * STEP_MS;
    p->default_time_limit_ms = (int64_t)(1 + rng_below(r, 30)) * STEP_MS;
    p->fairshare_half_life_ms = half_lives[rng_below(r, 4)];
    p->nlas_thresholds = rng_below(r, 4);
    int64_t t = (int64_t)(1 + rng_below(r, 8)) * 10000;
    for (uint32_t i = 0; i < p->nlas_thresholds; i++) {
        p->las_thresholds_gpu_ms[i] = t;
        t *= 2 + rng_below(r, 4);
    }
    p->migrate = rng_chance(r, 50);
    p->las_evict_larger = rng_chance(r, 30);
}

static void gen_job(struct world *w, struct rng *r, struct pjob *pj)
{
    static const int32_t whole_of[] = {1, 1, 1, 1, 2, 2, 3, 4, 4, 8, 8, 16};
    static const int64_t min_mem_of[] = {40960, 81920, 143360};
    struct sched_job *j = &pj->req;
    const struct sched_cluster *c = &w->c;
    pj->arrive_ms =
        rng_chance(r, 50) ? STEP_MS : (int64_t)(1 + rng_below(r, w->nsteps / 2 + 1)) * STEP_MS;
    j->team = rng_below(r, c->nteams);
    j->prio = rng_below(r, c->nclasses);
    /* Mostly a pool and type some node has; sometimes any, or a pair none has. */
    const struct sched_node *near = &w->nodes[rng_below(r, c->nnodes)];
    bool exists = rng_chance(r, 85);
    j->pool = rng_chance(r, 50) ? SCHED_ANY : exists ? near->pool : rng_below(r, c->npools);
    const struct sched_gpu *near_gpu = near->ngpus ? &w->gpus[near->gpu_first] : NULL;
    j->gpu_type = rng_chance(r, 50)    ? SCHED_ANY
                  : exists && near_gpu ? near_gpu->type
                                       : rng_below(r, c->ngpu_types);
    uint32_t near_mem = near_gpu ? near_gpu->mem_mib : type_mem[0][0];
    uint32_t kind = rng_below(r, 100);
    if (kind < 40) {
        j->gpus = whole_of[rng_below(r, 12)];
    } else if (kind < 46) {
        j->gpus = 2 + (int32_t)rng_below(r, 15);
        j->multi_node = true;
    } else if (kind < 50) {
        j->nodes = 2 + (int32_t)rng_below(r, 2); /* exact-N: an even share on each */
        j->gpus = j->nodes * (1 + (int32_t)rng_below(r, 4));
        j->multi_node = true;
    } else if (kind < 75) {
        j->gpu_milli = 50 * (1 + (int32_t)rng_below(r, 19));
    } else if (kind < 92) {
        j->gpu_mem_mib =
            1024 * (1 + (int64_t)rng_below(r, rng_chance(r, 90) ? near_mem / 1024 : 80));
    } else {
        j->gpu_type = SCHED_ANY; /* CPU only */
    }
    if (wants_gpu(j) && rng_chance(r, 15))
        j->min_gpu_mem_mib = rng_chance(r, 70) ? near_mem : min_mem_of[rng_below(r, 3)];
    j->cpus = 1 + (int32_t)rng_below(r, j->multi_node ? 8 : 16);
    j->mem_mib = 1024 * (1 + (int64_t)rng_below(r, j->multi_node ? 32 : 64));
    if (j->nodes > 1) {
        j->cpus *= j->nodes;
        j->mem_mib *= j->nodes;
    }
    j->time_limit_ms = rng_chance(r, 20) ? 0 : (int64_t)(1 + rng_below(r, 20)) * STEP_MS;
    j->checkpointable = rng_chance(r, 40);
    pj->work_ms = pj->left_ms = (int64_t)(1 + rng_below(r, 20)) * STEP_MS;
    pj->ckpt_every_ms = (int64_t)(1 + rng_below(r, 4)) * STEP_MS;
}

/* Breaks a job on purpose: a bad size, an index out of range, or too large. */
static void make_invalid(struct world *w, struct rng *r, struct sched_job *j)
{
    const struct sched_cluster *c = &w->c;
    j->gpus = 1;
    j->gpu_milli = 0;
    j->gpu_mem_mib = 0;
    j->multi_node = false;
    j->nodes = 0;
    switch (rng_below(r, 15)) {
    case 0:
        j->gpus = -1;
        break;
    case 1:
        j->gpus = 0;
        j->gpu_milli = -5;
        break;
    case 2:
        j->cpus = -1;
        break;
    case 3:
        j->pool = c->npools + 2;
        break;
    case 4:
        j->gpu_type = c->ngpu_types + 1;
        break;
    case 5:
        j->team = c->nteams + 1;
        break;
    case 6:
        j->prio = c->nclasses;
        break;
    case 7:
        j->gpus = 1000;
        break;
    case 8:
        j->gpus = 0;
        j->gpu_milli = 1500;
        break;
    case 9:
        j->gpus = 2;
        j->gpu_milli = 100;
        break;
    case 10:
        j->gpus = 0;
        j->gpu_milli = 200;
        j->multi_node = true;
        break;
    case 11:
        j->gpus = 10000;
        j->multi_node = true;
        break;
    case 12:
        j->mem_mib = -1;
        break;
    case 13:
        j->time_limit_ms = -STEP_MS;
        break;
    default:
        j->min_gpu_mem_mib = (int64_t)1 << 30;
        break;
    }
}

static void world_generate(struct world *w, uint64_t seed, enum mode mode, struct report *rep)
{
    struct sched_result keep = w->res;
    sched_state_release(&w->st);
    memset(w, 0, sizeof(*w));
    w->res = keep;
    sched_state_init(&w->st);
    w->seed = seed;
    w->mode = mode;
    w->rep = rep;
    w->c = (struct sched_cluster){.nodes = w->nodes,
                                  .gpus = w->gpus,
                                  .pools = w->pools,
                                  .gpu_types = w->types,
                                  .teams = w->teams,
                                  .classes = w->classes};
    w->shuffle.s = seed ^ 0x5bd1e995u;

    struct rng r = {seed};
    gen_cluster(w, &r);
    gen_policy(w, &r);
    w->nsteps = 10 + rng_below(&r, MAX_STEPS - 9);
    uint32_t nvalid = 10 + rng_below(&r, 51);
    uint32_t ninvalid = rng_chance(&r, 30) ? 1 + rng_below(&r, 3) : 0;
    w->njobs = nvalid + ninvalid;
    for (uint32_t k = 0; k < w->njobs; k++) {
        struct pjob *pj = &w->jobs[k];
        gen_job(w, &r, pj);
        if (k >= nvalid) {
            make_invalid(w, &r, &pj->req);
            pj->bad = true;
        }
        pj->kill_ms = -1;
        pj->req.id = k + 1;
    }
    for (uint32_t s = 0; s < w->nsteps; s++) {
        w->ev_node[s] = rng_chance(&r, 30) ? (int32_t)rng_below(&r, w->c.nnodes) : -1;
        w->ev_down[s] = rng_chance(&r, 40);
        w->ev_fail[s] = rng_chance(&r, 30);
        w->ev_cancel[s] = rng_chance(&r, 10) ? (int32_t)rng_below(&r, nvalid) : -1;
    }
    /* Ids in a random order, so that index and id order differ. */
    for (uint32_t k = w->njobs; k > 1; k--) {
        uint32_t o = rng_below(&r, k);
        uint64_t id = w->jobs[k - 1].req.id;
        w->jobs[k - 1].req.id = w->jobs[o].req.id;
        w->jobs[o].req.id = id;
    }
    for (uint32_t k = 0; k < w->njobs; k++) {
        w->job_of_id[w->jobs[k].req.id] = k;
        w->jobs[k].possible = job_possible(w, &w->jobs[k].req);
        rep->cov.possible_jobs += w->jobs[k].possible;
        rep->cov.impossible_jobs += !w->jobs[k].possible && !w->jobs[k].bad;
    }
}

/* ---- the driver ---- */

static int64_t alloc_milli(const struct sched_alloc *a)
{
    int64_t m = 0;
    for (uint32_t i = 0; i < a->nshares; i++)
        m += a->shares[i].milli;
    return m;
}

static struct pjob *job_by_id(struct world *w, uint64_t id)
{
    return id >= 1 && id <= w->njobs ? &w->jobs[w->job_of_id[id]] : NULL;
}

/* Last checkpoint of a running job at `now` (0: none yet, or not checkpointable). */
static int64_t last_checkpoint(const struct pjob *pj, int64_t now)
{
    if (!pj->req.checkpointable || now - pj->start_ms < pj->ckpt_every_ms)
        return 0;
    return pj->start_ms + (now - pj->start_ms) / pj->ckpt_every_ms * pj->ckpt_every_ms;
}

static struct sched_running running_of(const struct pjob *pj, int64_t now)
{
    return (struct sched_running){.job = &pj->req,
                                  .alloc = pj->alloc,
                                  .start_ms = pj->start_ms,
                                  .checkpoint_ms = last_checkpoint(pj, now),
                                  .borrowed = pj->borrowed,
                                  .preempting = pj->kill_ms >= 0};
}

/* A job leaves the running set at `end`, as the caller tells the core: its
 * attained service must then be every GPU-ms it held, in all its attempts. */
static void job_leave(struct world *w, struct pjob *pj, int64_t end)
{
    int64_t last = w->st.last_pass_ms;
    pj->seen += pj->milli * (end - (pj->start_ms > last ? pj->start_ms : last));
    struct sched_running run = running_of(pj, end);
    int rc = sched_state_charge_end(&w->st, &w->c, &w->pol, &run, end);
    CHECK(w, SERVICE, rc == 0, "sched_state_charge_end returned %d", rc);
    int64_t got = sched_state_attained(&w->st, pj->req.id);
    CHECK(w, SERVICE, got == pj->seen / 1000,
          "job %llu left with %lld GPU-ms attained, but held %lld GPU-ms",
          (unsigned long long)pj->req.id, (long long)got, (long long)(pj->seen / 1000));
}

static void job_complete(struct world *w, struct pjob *pj, int64_t end)
{
    job_leave(w, pj, end);
    w->useful += pj->milli * (end - pj->start_ms);
    CHECK(w, GPU_TIME, pj->saved_ms + (end - pj->start_ms) == pj->work_ms,
          "job %llu finished with %lld ms of work done, needs %lld", (unsigned long long)pj->req.id,
          (long long)(pj->saved_ms + end - pj->start_ms), (long long)pj->work_ms);
    if (pj->req.time_limit_ms > 0 && end - pj->start_ms > pj->req.time_limit_ms)
        w->rep->cov.past_limit++;
    pj->state = PJ_DONE;
    w->rep->cov.completions++;
}

/* A preempted job exits at `at`: work up to its last checkpoint is kept. */
static void job_evict(struct world *w, struct pjob *pj, int64_t at)
{
    job_leave(w, pj, at);
    int64_t ran = at - pj->start_ms;
    int64_t kept = pj->req.checkpointable ? ran / pj->ckpt_every_ms * pj->ckpt_every_ms : 0;
    w->saved += pj->milli * kept;
    w->lost += pj->milli * (ran - kept);
    w->rep->cov.checkpoint_saves += kept > 0;
    w->rep->cov.lost_work += ran > kept;
    pj->saved_ms += kept;
    pj->left_ms -= kept;
    pj->state = PJ_PENDING;
    pj->req.submit_ms = at;
    pj->kill_ms = -1;
}

static bool node_empty(const struct world *w, uint32_t n)
{
    for (uint32_t k = 0; k < w->njobs; k++) {
        const struct pjob *pj = &w->jobs[k];
        for (uint32_t i = 0; pj->state == PJ_RUNNING && i < pj->alloc.nnodes; i++) {
            if (pj->parts[i].node == n)
                return false;
        }
    }
    return true;
}

/* A user cancels a job: a waiting one leaves the queue, a running one is
 * killed and its work since the start is lost. */
static void cancel_event(struct world *w, uint32_t step)
{
    if (w->ev_cancel[step] < 0)
        return;
    struct pjob *pj = &w->jobs[w->ev_cancel[step]];
    if (pj->state == PJ_RUNNING) {
        job_leave(w, pj, w->now);
        w->lost += pj->milli * (w->now - pj->start_ms);
    }
    if (pj->state == PJ_RUNNING || pj->state == PJ_PENDING) {
        pj->state = PJ_DONE;
        w->rep->cov.cancels++;
    }
}

/* Nodes drain and come back; a node goes down (when it fails, its jobs are
 * requeued, keeping their checkpoints) and comes back up. */
static void node_event(struct world *w, uint32_t step)
{
    if (w->ev_node[step] < 0)
        return;
    uint32_t nid = (uint32_t)w->ev_node[step];
    struct sched_node *n = &w->nodes[nid];
    if (w->ev_down[step]) {
        bool empty = node_empty(w, nid);
        if (n->state == SCHED_NODE_DOWN) {
            n->state = SCHED_NODE_UP;
        } else if (empty || w->ev_fail[step]) {
            for (uint32_t k = 0; !empty && k < w->njobs; k++) {
                struct pjob *pj = &w->jobs[k];
                for (uint32_t i = 0; pj->state == PJ_RUNNING && i < pj->alloc.nnodes; i++) {
                    if (pj->parts[i].node == nid)
                        job_evict(w, pj, w->now);
                }
            }
            n->state = SCHED_NODE_DOWN;
            w->rep->cov.down_events++;
            w->rep->cov.node_failures += !empty;
        }
    } else if (n->state == SCHED_NODE_UP) {
        n->state = SCHED_NODE_DRAINING;
        w->rep->cov.drain_events++;
    } else {
        n->state = SCHED_NODE_UP;
    }
}

static void shuffle_u32(struct rng *r, uint32_t *a, size_t n)
{
    for (size_t k = n; k > 1; k--) {
        uint32_t o = rng_below(r, (uint32_t)k);
        uint32_t t = a[k - 1];
        a[k - 1] = a[o];
        a[o] = t;
    }
}

static void build_sets(struct world *w)
{
    w->nqueue = w->nrunning = 0;
    for (uint32_t k = 0; k < w->njobs; k++) {
        if (w->jobs[k].state == PJ_PENDING)
            w->queue_job[w->nqueue++] = k;
        else if (w->jobs[k].state == PJ_RUNNING)
            w->running_job[w->nrunning++] = k;
    }
    if (w->mode == MODE_SHUFFLE) {
        shuffle_u32(&w->shuffle, w->queue_job, w->nqueue);
        shuffle_u32(&w->shuffle, w->running_job, w->nrunning);
    }
    for (size_t i = 0; i < w->nqueue; i++)
        w->queue[i] = w->jobs[w->queue_job[i]].req;
    for (size_t i = 0; i < w->nrunning; i++)
        w->running[i] = running_of(&w->jobs[w->running_job[i]], w->now);
}

/* As after a restart: a fresh state filled from the old one's arrays, in reverse. */
static void rebuild_state(struct world *w)
{
    struct sched_state fresh;
    sched_state_init(&fresh);
    fresh.last_pass_ms = w->st.last_pass_ms;
    for (size_t k = w->st.nusage; k-- > 0;) {
        const struct sched_usage *u = &w->st.usage[k];
        assert_int_equal(sched_state_add_usage(&fresh, u->team_id, u->gpu_type_id, u->gpu_ms), 0);
    }
    for (size_t k = w->st.nattained; k-- > 0;)
        assert_int_equal(
            sched_state_add_attained(&fresh, w->st.attained[k].job, w->st.attained[k].gpu_ms), 0);
    if (w->st.nclaims) {
        fresh.claims = malloc(w->st.nclaims * sizeof(*fresh.claims));
        assert_non_null(fresh.claims);
        memcpy(fresh.claims, w->st.claims, w->st.nclaims * sizeof(*fresh.claims));
        fresh.nclaims = fresh.claims_cap = w->st.nclaims;
    }
    sched_state_release(&w->st);
    w->st = fresh;
}

/* ---- hashing the decisions ---- */

static uint64_t mix(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t hash_result(const struct sched_result *res)
{
    uint64_t h = mix(0xcbf29ce484222325ull, res->nstarts);
    for (size_t s = 0; s < res->nstarts; s++) {
        const struct sched_start *st = &res->starts[s];
        h = mix(mix(mix(h, st->job), st->borrowed), st->alloc.nnodes);
        for (uint32_t i = 0; i < st->alloc.nnodes; i++)
            h = mix(mix(mix(h, st->alloc.nodes[i].node), st->alloc.nodes[i].cpus),
                    st->alloc.nodes[i].mem_mib);
        h = mix(h, st->alloc.nshares);
        for (uint32_t i = 0; i < st->alloc.nshares; i++)
            h = mix(mix(mix(h, st->alloc.shares[i].gpu), st->alloc.shares[i].milli),
                    st->alloc.shares[i].mem_mib);
    }
    h = mix(h, res->npreempts);
    for (size_t p = 0; p < res->npreempts; p++) {
        const struct sched_preempt *pr = &res->preempts[p];
        h = mix(mix(mix(mix(mix(h, pr->job), pr->for_job), (uint64_t)pr->grace_ms),
                    (uint64_t)pr->lost_gpu_ms),
                pr->why);
    }
    h = mix(h, res->nreserves);
    for (size_t k = 0; k < res->nreserves; k++) {
        const struct sched_reserve *rv = &res->reserves[k];
        h = mix(mix(mix(h, rv->job), (uint64_t)rv->start_ms), rv->nnodes);
        for (uint32_t i = 0; i < rv->nnodes; i++)
            h = mix(h, rv->nodes[i]);
    }
    /* Waits come in queue order: summed, so that the queue's order does not count. */
    uint64_t waits = 0;
    for (size_t k = 0; k < res->nwaits; k++) {
        const struct sched_wait *wt = &res->waits[k];
        waits += mix(mix(mix(mix(mix(mix(0xcbf29ce484222325ull, wt->job), wt->reason), wt->pool),
                             wt->gpu_type),
                         wt->other_job),
                     (uint64_t)wt->est_start_ms);
    }
    return mix(mix(h, res->nwaits), waits);
}

/* ---- checks on one pass ---- */

/* The start's shape: pool, type, memory, node count, shares, CPUs and memory. */
static void check_shape(struct world *w, const struct sched_job *j, const struct sched_alloc *a)
{
    char d[200];
    describe_job(j, d, sizeof(d));
    const struct sched_cluster *c = &w->c;
    if (a->nnodes < 1 || a->nnodes > c->nnodes || a->nshares > MAX_SHARES) {
        violation(w, INV_SHAPE, "%s: %u nodes, %u shares", d, a->nnodes, a->nshares);
        return;
    }
    for (uint32_t i = 0; i < a->nnodes; i++) {
        if (a->nodes[i].node >= c->nnodes) {
            violation(w, INV_SHAPE, "%s: node index %u out of range", d, a->nodes[i].node);
            return;
        }
        for (uint32_t k = 0; k < i; k++)
            CHECK(w, SHAPE, a->nodes[k].node != a->nodes[i].node, "%s: node %u listed twice", d,
                  a->nodes[i].node);
        const struct sched_node *node = &w->nodes[a->nodes[i].node];
        CHECK(w, SHAPE, j->pool == SCHED_ANY || node->pool == j->pool, "%s: node %u is in pool %u",
              d, a->nodes[i].node, node->pool);
        CHECK(w, CAPACITY, node->state == SCHED_NODE_UP, "%s started on node %u in state %d", d,
              a->nodes[i].node, (int)node->state);
    }
    CHECK(w, SHAPE, j->multi_node || a->nnodes == 1, "%s: not a gang but on %u nodes", d,
          a->nnodes);
    uint32_t per_node[MAX_NODES] = {0};
    for (uint32_t s = 0; s < a->nshares; s++) {
        const struct sched_share *sh = &a->shares[s];
        if (sh->gpu >= c->ngpus) {
            violation(w, INV_SHAPE, "%s: GPU index %u out of range", d, sh->gpu);
            return;
        }
        const struct sched_gpu *gpu = &w->gpus[sh->gpu];
        uint32_t node = w->gpu_node[sh->gpu], part = a->nnodes;
        for (uint32_t i = 0; i < a->nnodes; i++)
            part = a->nodes[i].node == node ? i : part;
        CHECK(w, SHAPE, part < a->nnodes, "%s: GPU %u on node %u, not among its nodes", d, sh->gpu,
              node);
        if (part < a->nnodes)
            per_node[part]++;
        for (uint32_t k = 0; k < s; k++)
            CHECK(w, SHAPE, a->shares[k].gpu != sh->gpu, "%s: GPU %u listed twice", d, sh->gpu);
        CHECK(w, SHAPE, j->gpu_type == SCHED_ANY || gpu->type == j->gpu_type,
              "%s: GPU %u has type %u", d, sh->gpu, gpu->type);
        CHECK(w, SHAPE, gpu->mem_mib >= j->min_gpu_mem_mib, "%s: GPU %u has %u MiB", d, sh->gpu,
              gpu->mem_mib);
        CHECK(w, CAPACITY, !gpu->mig_enabled, "%s: GPU %u is in MIG mode", d, sh->gpu);
        if (j->gpus > 0) {
            CHECK(w, SHAPE, sh->milli == SCHED_MILLI && sh->mem_mib == gpu->mem_mib,
                  "%s: whole GPU %u given as %u milli, %u MiB", d, sh->gpu, sh->milli, sh->mem_mib);
        } else if (j->gpu_milli > 0) {
            CHECK(w, SHAPE,
                  sh->milli == (uint32_t)j->gpu_milli &&
                      sh->mem_mib == (uint64_t)gpu->mem_mib * (uint32_t)j->gpu_milli / 1000,
                  "%s: fraction on GPU %u (%u MiB) given as %u milli, %u MiB", d, sh->gpu,
                  gpu->mem_mib, sh->milli, sh->mem_mib);
        } else if (j->gpu_mem_mib > 0) {
            CHECK(w, SHAPE,
                  j->gpu_mem_mib <= gpu->mem_mib && sh->mem_mib == j->gpu_mem_mib &&
                      sh->milli == mem_milli(j->gpu_mem_mib, gpu->mem_mib),
                  "%s: memory request on GPU %u (%u MiB) given as %u milli, %u MiB", d, sh->gpu,
                  gpu->mem_mib, sh->milli, sh->mem_mib);
        }
        if (a->nshares > 0 && part < a->nnodes) {
            uint32_t n0 = w->gpu_node[a->shares[0].gpu];
            CHECK(w, SHAPE,
                  w->nodes[node].pool == w->nodes[n0].pool &&
                      gpu->type == w->gpus[a->shares[0].gpu].type,
                  "%s: gang spans pools or GPU types", d);
        }
    }
    uint32_t want = j->gpus > 0 ? (uint32_t)j->gpus : wants_gpu(j) ? 1 : 0;
    CHECK(w, SHAPE, a->nshares == want, "%s: %u GPU shares, wants %u", d, a->nshares, want);
    if (!j->multi_node) {
        CHECK(w, SHAPE,
              a->nodes[0].cpus == (uint32_t)j->cpus && a->nodes[0].mem_mib == (uint64_t)j->mem_mib,
              "%s: given %u cpus, %llu MiB", d, a->nodes[0].cpus,
              (unsigned long long)a->nodes[0].mem_mib);
        return;
    }
    if (j->nodes > 1) {
        CHECK(w, SHAPE, a->nnodes == (uint32_t)j->nodes, "%s: exact gang of %d nodes on %u", d,
              (int)j->nodes, a->nnodes);
        for (uint32_t i = 0; i < a->nnodes; i++)
            CHECK(w, SHAPE, per_node[i] == (uint32_t)(j->gpus / j->nodes),
                  "%s: exact gang node %u holds %u GPUs", d, a->nodes[i].node, per_node[i]);
    }
    /* A gang's CPUs and memory: each node its share, in proportion to its GPUs, rounded up. */
    for (uint32_t i = 0; i < a->nnodes; i++) {
        uint64_t k = per_node[i], g = (uint64_t)j->gpus;
        CHECK(w, SHAPE, k > 0, "%s: gang node %u holds none of its GPUs", d, a->nodes[i].node);
        CHECK(w, SHAPE,
              a->nodes[i].cpus == ((uint64_t)j->cpus * k + g - 1) / g &&
                  a->nodes[i].mem_mib == ((uint64_t)j->mem_mib * k + g - 1) / g,
              "%s: gang node %u with %llu GPUs given %u cpus, %llu MiB", d, a->nodes[i].node,
              (unsigned long long)k, a->nodes[i].cpus, (unsigned long long)a->nodes[i].mem_mib);
    }
}

/* Group (pool, type) of an allocation, as quotas count it. False: it holds no node. */
static bool alloc_group(const struct world *w, const struct sched_alloc *a, uint32_t *ret_pool,
                        uint32_t *ret_type)
{
    uint32_t node;
    if (a->nshares && a->shares[0].gpu < w->c.ngpus)
        node = w->gpu_node[a->shares[0].gpu];
    else if (a->nnodes && a->nodes[0].node < w->c.nnodes)
        node = a->nodes[0].node;
    else
        return false;
    if (!w->nodes[node].ngpus)
        return false;
    *ret_pool = w->nodes[node].pool;
    *ret_type = w->gpus[w->nodes[node].gpu_first].type;
    return true;
}

/* What the running jobs hold: per GPU, per node, and per team and group. */
struct held {
    uint32_t milli[MAX_GPUS];
    uint64_t gmem[MAX_GPUS], cpus[MAX_NODES], mem[MAX_NODES];
    int64_t team[MAX_TEAMS][MAX_POOLS][MAX_TYPES];
};

static void held_compute(const struct world *w, struct held *h)
{
    memset(h, 0, sizeof(*h));
    for (uint32_t k = 0; k < w->njobs; k++) {
        const struct pjob *pj = &w->jobs[k];
        if (pj->state != PJ_RUNNING)
            continue;
        for (uint32_t i = 0; i < pj->alloc.nshares; i++) {
            h->milli[pj->shares[i].gpu] += pj->shares[i].milli;
            h->gmem[pj->shares[i].gpu] += pj->shares[i].mem_mib;
        }
        for (uint32_t i = 0; i < pj->alloc.nnodes; i++) {
            h->cpus[pj->parts[i].node] += pj->parts[i].cpus;
            h->mem[pj->parts[i].node] += pj->parts[i].mem_mib;
        }
        uint32_t p, t;
        if (alloc_group(w, &pj->alloc, &p, &t))
            h->team[pj->req.team][p][t] += pj->milli;
    }
}

/* An exact-N gang fits if N UP nodes of one (pool, type) group each have
 * gpus/N whole GPUs free of the memory asked, and its share of CPUs and
 * memory. `h` NULL: an empty cluster, every node up, MIG GPUs counted (they
 * may change mode). The team's limit as in job_fits. */
static bool exact_fits(const struct world *w, const struct held *h, const struct sched_job *j,
                       bool now, uint32_t *ret_node)
{
    uint32_t N = (uint32_t)j->nodes, k = (uint32_t)j->gpus / N;
    for (uint32_t pool = 0; pool < w->c.npools; pool++) {
        if (j->pool != SCHED_ANY && j->pool != pool)
            continue;
        for (uint32_t type = 0; type < w->c.ngpu_types; type++) {
            if (j->gpu_type != SCHED_ANY && j->gpu_type != type)
                continue;
            int64_t base = now && h ? h->team[j->team][pool][type] : 0;
            if (base + (int64_t)j->gpus * SCHED_MILLI > limit_of(w, j->team, pool, type))
                continue;
            uint32_t count = 0;
            for (uint32_t n = 0; n < w->c.nnodes; n++) {
                const struct sched_node *node = &w->nodes[n];
                if (node->pool != pool || !node->ngpus || w->gpus[node->gpu_first].type != type ||
                    (h && node->state != SCHED_NODE_UP) ||
                    (h ? h->cpus[n] : 0) + (uint64_t)(j->cpus / j->nodes) > node->cpus ||
                    (h ? h->mem[n] : 0) + (uint64_t)(j->mem_mib / j->nodes) > node->mem_mib)
                    continue;
                uint32_t whole = 0;
                for (uint32_t i = 0; i < node->ngpus; i++) {
                    const struct sched_gpu *gpu = &w->gpus[node->gpu_first + i];
                    whole += gpu->mem_mib >= j->min_gpu_mem_mib &&
                             (!h || (!gpu->mig_enabled && h->milli[node->gpu_first + i] == 0));
                }
                if (whole >= k) {
                    count++;
                    *ret_node = n;
                }
            }
            if (count >= N)
                return true;
        }
    }
    return false;
}

/*
 * Could the (valid) job start on one usable node of what `h` leaves free,
 * ignoring reservations and queue order? The team's limit must admit it:
 * ever (`now` false), or on top of its usage in `h`. A gang counts only when
 * one node holds all of it.
 */
/* A multi-node gang fits if one (pool, type) group's UP nodes together hold its
 * GPUs, each node taking as many as its free CPUs and host memory allow for
 * that share of the job (the CPUs and memory split in proportion). */
static bool gang_fits(const struct world *w, const struct held *h, const struct sched_job *j,
                      bool now, uint32_t *ret_node)
{
    for (uint32_t pool = 0; pool < w->c.npools; pool++) {
        if (j->pool != SCHED_ANY && j->pool != pool)
            continue;
        for (uint32_t type = 0; type < w->c.ngpu_types; type++) {
            if (j->gpu_type != SCHED_ANY && j->gpu_type != type)
                continue;
            int64_t limit = limit_of(w, j->team, pool, type);
            int64_t base = now ? h->team[j->team][pool][type] : 0;
            if (base + (int64_t)j->gpus * SCHED_MILLI > limit)
                continue;
            uint64_t sum = 0;
            for (uint32_t n = 0; n < w->c.nnodes; n++) {
                const struct sched_node *node = &w->nodes[n];
                if (node->state != SCHED_NODE_UP || node->pool != pool || !node->ngpus ||
                    w->gpus[node->gpu_first].type != type)
                    continue;
                uint64_t whole = 0;
                for (uint32_t i = 0; i < node->ngpus; i++) {
                    const struct sched_gpu *gpu = &w->gpus[node->gpu_first + i];
                    whole += !gpu->mig_enabled && gpu->mem_mib >= j->min_gpu_mem_mib &&
                             h->milli[node->gpu_first + i] == 0;
                }
                uint64_t t = whole < (uint64_t)j->gpus ? whole : (uint64_t)j->gpus;
                while (t > 0 && (h->cpus[n] + ((uint64_t)j->cpus * t + (uint64_t)j->gpus - 1) /
                                                  (uint64_t)j->gpus >
                                     node->cpus ||
                                 h->mem[n] + ((uint64_t)j->mem_mib * t + (uint64_t)j->gpus - 1) /
                                                 (uint64_t)j->gpus >
                                     node->mem_mib))
                    t--;
                if (t)
                    *ret_node = n;
                sum += t;
            }
            if (sum >= (uint64_t)j->gpus)
                return true;
        }
    }
    return false;
}

static bool job_fits(const struct world *w, const struct held *h, const struct sched_job *j,
                     bool now, uint32_t *ret_node)
{
    if (j->nodes > 1)
        return exact_fits(w, h, j, now, ret_node);
    if (j->multi_node && j->gpus > 0 && gang_fits(w, h, j, now, ret_node))
        return true;
    for (uint32_t n = 0; n < w->c.nnodes; n++) {
        const struct sched_node *node = &w->nodes[n];
        if (node->state != SCHED_NODE_UP || (j->pool != SCHED_ANY && node->pool != j->pool) ||
            h->cpus[n] + (uint64_t)j->cpus > node->cpus ||
            h->mem[n] + (uint64_t)j->mem_mib > node->mem_mib)
            continue;
        *ret_node = n;
        if (!wants_gpu(j))
            return true;
        if (!node->ngpus)
            continue;
        uint32_t type = w->gpus[node->gpu_first].type;
        if (j->gpu_type != SCHED_ANY && j->gpu_type != type)
            continue;
        int64_t limit = limit_of(w, j->team, node->pool, type);
        int64_t base = now ? h->team[j->team][node->pool][type] : 0;
        int32_t whole = 0;
        for (uint32_t i = 0; i < node->ngpus; i++) {
            uint32_t g = node->gpu_first + i;
            const struct sched_gpu *gpu = &w->gpus[g];
            if (gpu->mig_enabled || gpu->mem_mib < j->min_gpu_mem_mib ||
                gpu->mem_mib < j->gpu_mem_mib)
                continue;
            uint32_t milli, mem;
            sched_job_gpu_claim(j, gpu, &milli, &mem);
            whole += h->milli[g] == 0;
            if (j->gpus <= 0 && h->milli[g] + milli <= SCHED_MILLI &&
                h->gmem[g] + mem <= gpu->mem_mib && base + milli <= limit)
                return true;
        }
        if (j->gpus > 0 && whole >= j->gpus && base + (int64_t)j->gpus * SCHED_MILLI <= limit)
            return true;
    }
    return false;
}

static bool valid_indices(const struct world *w, const struct sched_job *j)
{
    return j->team < w->c.nteams && j->prio < w->c.nclasses;
}

static void check_starts(struct world *w, bool started[MAX_JOBS])
{
    const struct sched_result *res = &w->res;
    struct held h;
    held_compute(w, &h);
    for (size_t s = 0; s < res->nstarts; s++) {
        const struct sched_start *st = &res->starts[s];
        struct pjob *pj = job_by_id(w, st->job);
        if (!pj) {
            violation(w, INV_ONCE, "start of unknown job %llu", (unsigned long long)st->job);
            continue;
        }
        uint32_t k = (uint32_t)(pj - w->jobs);
        CHECK(w, ONCE, pj->state == PJ_PENDING && !started[k], "job %llu started while %s",
              (unsigned long long)st->job,
              started[k]                ? "started earlier in this pass"
              : pj->state == PJ_RUNNING ? "running"
                                        : "not queued");
        started[k] = true;
        char d[200];
        describe_job(&pj->req, d, sizeof(d));
        CHECK(w, FINAL, pj->possible, "%s started, but no node could ever hold it", d);
        if (!valid_indices(w, &pj->req))
            continue;
        check_shape(w, &pj->req, &st->alloc);
        w->rep->cov.starts++;
        w->rep->cov.gang_starts += st->alloc.nnodes > 1;
        w->rep->cov.exact_gang_starts += pj->req.nodes > 1;
        w->rep->cov.fraction_starts += pj->req.gpu_milli > 0;
        w->rep->cov.mem_starts += pj->req.gpu_mem_mib > 0;
        w->rep->cov.cpu_only_starts += !wants_gpu(&pj->req);
        uint32_t p, t;
        if (!alloc_group(w, &st->alloc, &p, &t)) {
            /* On a node without GPUs: no quota applies. */
            CHECK(w, BORROWED, !st->borrowed, "%s: borrowed on a node without GPUs", d);
            w->rep->cov.cpu_node_starts++;
            continue;
        }
        int64_t milli = alloc_milli(&st->alloc);
        int64_t *u = &h.team[pj->req.team][p][t];
        int64_t guar = guar_of(w, pj->req.team, p, t);
        bool over = *u + milli > guar;
        CHECK(w, BORROWED, st->borrowed == over,
              "%s: borrowed=%d, but team usage %lld + %lld milli vs guarantee %lld in pool %u "
              "type %u",
              d, st->borrowed, (long long)*u, (long long)milli, (long long)guar, p, t);
        *u += milli;
        if (st->borrowed)
            w->rep->cov.borrowed_starts++;
        else
            w->rep->cov.guaranteed_starts++;
    }
}

static void check_waits(struct world *w, const bool started[MAX_JOBS])
{
    const struct sched_result *res = &w->res;
    size_t k = 0;
    bool in_order = true;
    for (size_t i = 0; i < w->nqueue; i++) {
        uint32_t jk = w->queue_job[i];
        struct pjob *pj = &w->jobs[jk];
        if (started[jk])
            continue;
        if (k >= res->nwaits || res->waits[k].job != pj->req.id) {
            in_order = false;
            break;
        }
        const struct sched_wait *wt = &res->waits[k++];
        char d[200];
        describe_job(&pj->req, d, sizeof(d));
        if (wt->reason <= SCHED_REASON_NONE || wt->reason >= SCHED_REASON_COUNT) {
            violation(w, INV_WAITS, "%s: reason %d", d, (int)wt->reason);
            continue;
        }
        bool final = explain_is_final(wt->reason);
        CHECK(w, FINAL, !final || !pj->possible,
              "%s waits for final reason '%s' (%s), but it fits "
              "the cluster",
              d, explain_code(wt->reason), wt->field ? wt->field : "");
        CHECK(w, FINAL, final || !pj->bad, "%s is invalid, but waits for '%s'", d,
              explain_code(wt->reason));
        CHECK(w, UNSCHEDULABLE, final || pj->possible, "%s can never run, but waits for '%s'", d,
              explain_code(wt->reason));
        CHECK(w, WAITS, wt->team == pj->req.team, "%s: wait names team %u", d, wt->team);
        CHECK(w, WAITS, wt->reason != SCHED_REASON_BLOCKED || !w->pol.backfill,
              "%s: blocked with backfill on", d);
        CHECK(w, WAITS, wt->reason != SCHED_REASON_PREEMPTING || w->pol.preemption,
              "%s: preempting with preemption off", d);
        struct coverage *cov = &w->rep->cov;
        cov->final_waits += final;
        cov->quota_waits += wt->reason == SCHED_REASON_QUOTA;
        cov->reserved_waits += wt->reason == SCHED_REASON_RESERVED;
        cov->blocked_waits += wt->reason == SCHED_REASON_BLOCKED;
        cov->preempting_waits += wt->reason == SCHED_REASON_PREEMPTING;
        if ((k & 3) == 0) {
            char buf[256];
            int n = explain_format(&w->c, wt, buf, sizeof(buf));
            CHECK(w, WAITS, n > 0 && (size_t)n < sizeof(buf) && strlen(buf) == (size_t)n,
                  "%s: explain_format gave %d", d, n);
        }
    }
    CHECK(w, WAITS, in_order && k == res->nwaits,
          "%zu waits for %zu queued jobs (%zu started), or not in queue order", res->nwaits,
          w->nqueue, res->nstarts);
    for (size_t r = 0; r < res->nreserves; r++) {
        const struct pjob *pj = job_by_id(w, res->reserves[r].job);
        CHECK(w, WAITS, pj && pj->state == PJ_PENDING && !started[pj - w->jobs],
              "reservation for job %llu, which is not waiting",
              (unsigned long long)res->reserves[r].job);
        for (uint32_t i = 0; i < res->reserves[r].nnodes; i++)
            CHECK(w, WAITS, res->reserves[r].nodes[i] < w->c.nnodes, "reservation on node %u",
                  res->reserves[r].nodes[i]);
        w->rep->cov.reserves++;
    }
}

/* GPU memory of the first GPU a running job holds (all of an allocation's
 * GPUs are of one type). */
static uint32_t victim_gpu_mem(const struct world *w, const struct pjob *v)
{
    return v->alloc.nshares ? w->c.gpus[v->alloc.shares[0].gpu].mem_mib : 0;
}

static void check_preempts(struct world *w, const bool started[MAX_JOBS])
{
    const struct sched_result *res = &w->res;
    CHECK(w, PREEMPT, w->pol.preemption || res->npreempts == 0,
          "%zu preemptions with preemption off", res->npreempts);
    for (size_t p = 0; p < res->npreempts; p++) {
        const struct sched_preempt *pr = &res->preempts[p];
        struct pjob *v = job_by_id(w, pr->job), *f = job_by_id(w, pr->for_job);
        if (!v || !f || v->state != PJ_RUNNING || f->state != PJ_PENDING) {
            violation(w, INV_PREEMPT, "job %llu preempted for job %llu: not running / not waiting",
                      (unsigned long long)pr->job, (unsigned long long)pr->for_job);
            continue;
        }
        char dv[200], df[200];
        describe_job(&v->req, dv, sizeof(dv));
        describe_job(&f->req, df, sizeof(df));
        CHECK(w, PREEMPT, v->kill_ms < 0, "%s preempted while already preempting", dv);
        for (size_t q = 0; q < p; q++)
            CHECK(w, PREEMPT, res->preempts[q].job != pr->job, "%s preempted twice in one pass",
                  dv);
        CHECK(w, PREEMPT, !started[f - w->jobs], "%s preempts for %s, which started", dv, df);
        CHECK(w, PREEMPT, pr->grace_ms == w->pol.preempt_grace_ms, "%s: grace %lld", dv,
              (long long)pr->grace_ms);
        const struct sched_prio_class *vc = &w->classes[v->req.prio],
                                      *fc = &w->classes[f->req.prio];
        switch (pr->why) {
        case SCHED_PREEMPT_PRIORITY:
            CHECK(w, PREEMPT, fc->may_preempt && fc->order > vc->order,
                  "%s preempted by priority for %s", dv, df);
            w->rep->cov.preempt_priority++;
            break;
        case SCHED_PREEMPT_RECLAIM:
            CHECK(w, PREEMPT, v->borrowed && v->req.team != f->req.team,
                  "%s (borrowed=%d) reclaimed for %s", dv, v->borrowed, df);
            w->rep->cov.preempt_reclaim++;
            break;
        case SCHED_PREEMPT_LAS:
            CHECK(w, PREEMPT,
                  (w->pol.order == SCHED_ORDER_LAS ||
                   (w->pol.order == SCHED_ORDER_FAIRSHARE && w->pol.within == SCHED_WITHIN_LAS &&
                    v->req.team == f->req.team)) &&
                      v->req.checkpointable && vc->order <= fc->order &&
                      (w->pol.las_evict_larger ||
                       v->milli <= sched_job_milli(&f->req, victim_gpu_mem(w, v))),
                  "%s preempted by LAS for %s", dv, df);
            w->rep->cov.preempt_las++;
            break;
        case SCHED_PREEMPT_MIGRATE:
            /* Moved: a checkpointable single-node job of whole GPUs and no
             * higher class, for a single-node job of whole GPUs. */
            CHECK(w, PREEMPT,
                  w->pol.migrate && v->req.checkpointable && vc->order <= fc->order &&
                      v->req.gpus > 0 && !v->req.multi_node && f->req.gpus > 0 &&
                      !f->req.multi_node,
                  "%s moved for %s", dv, df);
            w->rep->cov.preempt_migrate++;
            break;
        default:
            violation(w, INV_PREEMPT, "%s: reason %d", dv, (int)pr->why);
        }
        int64_t ckpt = last_checkpoint(v, w->now);
        int64_t since = ckpt > v->start_ms ? ckpt : v->start_ms;
        int64_t milli = v->milli ? v->milli : 1;
        CHECK(w, SERVICE, pr->lost_gpu_ms == milli * (w->now - since) / 1000,
              "%s: lost_gpu_ms %lld, but it ran %lld ms on %lld milli since its last checkpoint",
              dv, (long long)pr->lost_gpu_ms, (long long)(w->now - since), (long long)milli);
    }
}

/* Capacity and quotas over everything running, after the starts. */
static void check_capacity(struct world *w, const struct held *h)
{
    for (uint32_t g = 0; g < w->c.ngpus; g++)
        CHECK(w, CAPACITY, h->milli[g] <= SCHED_MILLI && h->gmem[g] <= w->gpus[g].mem_mib,
              "GPU %u holds %u milli and %llu MiB of %u", g, h->milli[g],
              (unsigned long long)h->gmem[g], w->gpus[g].mem_mib);
    for (uint32_t n = 0; n < w->c.nnodes; n++)
        CHECK(w, CAPACITY, h->cpus[n] <= w->nodes[n].cpus && h->mem[n] <= w->nodes[n].mem_mib,
              "node %u holds %llu cpus and %llu MiB of %u and %llu", n,
              (unsigned long long)h->cpus[n], (unsigned long long)h->mem[n], w->nodes[n].cpus,
              (unsigned long long)w->nodes[n].mem_mib);
    for (uint32_t t = 0; t < w->c.nteams; t++) {
        for (uint32_t p = 0; p < w->c.npools; p++) {
            for (uint32_t g = 0; g < w->c.ngpu_types; g++) {
                int64_t limit = limit_of(w, t, p, g);
                CHECK(w, QUOTA, h->team[t][p][g] <= limit,
                      "team %u uses %lld milli in pool %u type %u, limit %lld (guarantee %lld)", t,
                      (long long)h->team[t][p][g], p, g, (long long)limit,
                      (long long)guar_of(w, t, p, g));
            }
        }
    }
}

/*
 * A job left waiting for resources must not fit what the pass left free
 * (with backfill on: off, blocked pools are closed to later jobs); one
 * waiting because higher-ranked jobs took the GPUs must have fit what was
 * free when the pass began.
 */
static void check_idle(struct world *w, const struct held *before, const struct held *after)
{
    for (size_t k = 0; k < w->res.nwaits; k++) {
        const struct sched_wait *wt = &w->res.waits[k];
        const struct pjob *pj = job_by_id(w, wt->job);
        if (!pj || !pj->possible)
            continue;
        char d[200];
        describe_job(&pj->req, d, sizeof(d));
        uint32_t n = 0;
        bool resources = wt->reason == SCHED_REASON_NO_GPU || wt->reason == SCHED_REASON_HOST ||
                         wt->reason == SCHED_REASON_GANG || wt->reason == SCHED_REASON_PRIORITY;
        CHECK(w, IDLE, !resources || !w->pol.backfill || !job_fits(w, after, &pj->req, true, &n),
              "%s waits for '%s', but fits node %u after the pass", d, explain_code(wt->reason), n);
        CHECK(w, EXPLAIN,
              wt->reason != SCHED_REASON_PRIORITY || job_fits(w, before, &pj->req, false, &n),
              "%s waits for 'priority', but did not fit when the pass began", d);
    }
}

/* The core's attained service is what the passes saw each job hold. */
static void check_attained(struct world *w, const bool in_pass[MAX_JOBS])
{
    const struct sched_state *st = &w->st;
    for (size_t k = 0; k < st->nattained; k++) {
        const struct pjob *pj = job_by_id(w, st->attained[k].job);
        CHECK(w, SERVICE, pj && in_pass[pj - w->jobs],
              "attained service kept for job %llu, which left",
              (unsigned long long)st->attained[k].job);
        CHECK(w, SERVICE, k == 0 || st->attained[k - 1].job < st->attained[k].job,
              "attained table not sorted by job");
    }
    for (uint32_t k = 0; k < w->njobs; k++) {
        const struct pjob *pj = &w->jobs[k];
        if (!in_pass[k])
            continue;
        int64_t got = sched_state_attained(st, pj->req.id);
        CHECK(w, SERVICE, got == pj->seen / 1000,
              "job %llu attained %lld GPU-ms, but held %lld GPU-ms in the passes",
              (unsigned long long)pj->req.id, (long long)got, (long long)(pj->seen / 1000));
    }
}

static void trace_pass(const struct world *w)
{
    const struct sched_result *res = &w->res;
    printf("# t=%llds queue %zu running %zu\n", (long long)(w->now / 1000), w->nqueue, w->nrunning);
    for (size_t s = 0; s < res->nstarts; s++) {
        const struct sched_start *st = &res->starts[s];
        printf("#   start %llu%s on node %u:", (unsigned long long)st->job,
               st->borrowed ? " (borrowed)" : "", st->alloc.nnodes ? st->alloc.nodes[0].node : 0);
        for (uint32_t i = 0; i < st->alloc.nshares; i++)
            printf(" gpu%u=%u", st->alloc.shares[i].gpu, st->alloc.shares[i].milli);
        printf("\n");
    }
    for (size_t p = 0; p < res->npreempts; p++)
        printf("#   preempt %llu for %llu (why %d, lost %lld)\n",
               (unsigned long long)res->preempts[p].job,
               (unsigned long long)res->preempts[p].for_job, (int)res->preempts[p].why,
               (long long)res->preempts[p].lost_gpu_ms);
    for (size_t k = 0; k < res->nwaits; k++) {
        char buf[256];
        explain_format(&w->c, &res->waits[k], buf, sizeof(buf));
        printf("#   wait %llu: %s\n", (unsigned long long)res->waits[k].job, buf);
    }
}

/* ---- out of memory: every allocation of a pass failed in turn ---- */

static void state_copy(struct sched_state *dst, const struct sched_state *src)
{
    sched_state_init(dst);
    dst->last_pass_ms = src->last_pass_ms;
    dst->usage = malloc((src->nusage + 1) * sizeof(*dst->usage));
    dst->attained = malloc((src->nattained + 1) * sizeof(*dst->attained));
    dst->claims = malloc((src->nclaims + 1) * sizeof(*dst->claims));
    assert_true(dst->usage && dst->attained && dst->claims);
    if (src->nusage)
        memcpy(dst->usage, src->usage, src->nusage * sizeof(*dst->usage));
    if (src->nattained)
        memcpy(dst->attained, src->attained, src->nattained * sizeof(*dst->attained));
    if (src->nclaims)
        memcpy(dst->claims, src->claims, src->nclaims * sizeof(*dst->claims));
    dst->nusage = dst->usage_cap = src->nusage;
    dst->nattained = dst->attained_cap = src->nattained;
    dst->nclaims = dst->claims_cap = src->nclaims;
}

static bool bytes_equal(const void *a, const void *b, size_t n)
{
    return !n || !memcmp(a, b, n);
}

/* Every field a caller persists, compared (capacities are not). */
static bool state_equal(const struct sched_state *a, const struct sched_state *b)
{
    return a->last_pass_ms == b->last_pass_ms && a->nusage == b->nusage &&
           a->nattained == b->nattained && a->nclaims == b->nclaims &&
           bytes_equal(a->usage, b->usage, a->nusage * sizeof(*a->usage)) &&
           bytes_equal(a->attained, b->attained, a->nattained * sizeof(*a->attained)) &&
           bytes_equal(a->claims, b->claims, a->nclaims * sizeof(*a->claims));
}

static bool result_empty(const struct sched_result *r)
{
    return !r->nstarts && !r->npreempts && !r->nreserves && !r->nwaits && !r->novercommitted;
}

/* What a pass did, as bits (for choosing passes to fail allocations in):
 * a preemption for each enum sched_preempt_why, a reservation, a claim
 * carried in, a LAS crossing. */
enum {
    PK_RESERVE = 1 << 4,
    PK_CLAIM = 1 << 5,
    PK_LAS_CROSSING = 1 << 6,
    PK_KINDS = 7,
};

static uint8_t pass_kind(const struct sched_result *res, size_t nclaims)
{
    uint8_t k = 0;
    for (size_t p = 0; p < res->npreempts; p++)
        k |= (uint8_t)(1u << (res->preempts[p].why & 3));
    k |= res->nreserves ? PK_RESERVE : 0;
    k |= nclaims ? PK_CLAIM : 0;
    k |= res->las_crossing_ms != INT64_MAX ? PK_LAS_CROSSING : 0;
    return k;
}

/* The passes MODE_FAULT fails allocations in, without and with a warm result. */
static uint64_t fault_sample(void)
{
    uint64_t mask = 0;
    for (uint32_t s = 2; s < MAX_STEPS; s += 5)
        mask |= 1ull << s;
    return mask;
}

static bool fault_warm(uint32_t step)
{
    return step / 5 % 2 == 1;
}

/* This step's pass on `st` into `res`. */
static int pass_into(struct world *w, struct sched_state *st, struct sched_result *res)
{
    struct sched_queue q = {w->queue, w->nqueue};
    struct sched_running_set rs = {w->running, w->nrunning};
    return sched_pass(&w->c, &q, &rs, &w->pol, st, w->now, res);
}

/* A fresh result, warmed when `warm` by an undisturbed run of this step's
 * pass (on a copy of the state), as a result is from one pass to the next. */
static void result_fresh(struct world *w, struct sched_result *res, bool warm)
{
    sched_result_init(res);
    if (!warm)
        return;
    struct sched_state tmp;
    state_copy(&tmp, &w->st);
    int rc = pass_into(w, &tmp, res);
    CHECK(w, ENOMEM, rc == 0, "the warm-up pass returned %d", rc);
    sched_state_release(&tmp);
}

/*
 * Fails each allocation of this step's pass in turn (on copies: the world's
 * state and result are left alone). Returns the hash of the undisturbed
 * pass's decisions, for the caller to compare with the world's own pass.
 */
static uint64_t fault_pass(struct world *w, bool warm)
{
    const char *how = warm ? "warm" : "fresh";
    struct sched_state ref_st, st;
    struct sched_result ref, res;
    state_copy(&ref_st, &w->st);
    result_fresh(w, &ref, warm);
    uint64_t before = gpo_alloc_count();
    int rc0 = pass_into(w, &ref_st, &ref);
    uint64_t n = gpo_alloc_count() - before;
    uint64_t h0 = rc0 ? (uint64_t)rc0 : hash_result(&ref);
    w->rep->fault_passes++;
    for (uint64_t at = 1; at <= n; at++) {
        state_copy(&st, &w->st);
        result_fresh(w, &res, warm);
        gpo_alloc_fail_at(at);
        int rc = pass_into(w, &st, &res);
        gpo_alloc_fail_at(0);
        w->rep->fault_allocs++;
        bool absorbed = rc != GPO_ENOMEM;
        if (!absorbed) {
            CHECK(w, ENOMEM, state_equal(&st, &w->st),
                  "allocation %llu of %llu (%s result) failed: the pass changed the state",
                  (unsigned long long)at, (unsigned long long)n, how);
            CHECK(w, ENOMEM, result_empty(&res),
                  "allocation %llu of %llu (%s result) failed: the result was not emptied",
                  (unsigned long long)at, (unsigned long long)n, how);
            rc = pass_into(w, &st, &res);
        } else {
            w->rep->fault_absorbed++; /* it must then be as if nothing failed */
        }
        uint64_t h = rc ? (uint64_t)rc : hash_result(&res);
        CHECK(w, ENOMEM, rc == rc0 && h == h0 && state_equal(&st, &ref_st),
              "allocation %llu of %llu (%s result) failed: the pass %s returned %d and decides "
              "otherwise than undisturbed",
              (unsigned long long)at, (unsigned long long)n, how,
              absorbed ? "that did without it" : "retried", rc);
        sched_state_release(&st);
        sched_result_release(&res);
    }
    sched_state_release(&ref_st);
    sched_result_release(&ref);
    return h0;
}

/* ---- one step: exits, arrivals, the pass, its checks, and applying it ---- */

static void world_step(struct world *w, uint32_t step)
{
    bool check = w->mode == MODE_CHECK;
    w->now = (int64_t)(step + 1) * STEP_MS;
    for (uint32_t k = 0; k < w->njobs; k++) {
        struct pjob *pj = &w->jobs[k];
        if (pj->state == PJ_RUNNING) {
            int64_t end = pj->start_ms + pj->left_ms;
            if (end <= w->now && (pj->kill_ms < 0 || end <= pj->kill_ms))
                job_complete(w, pj, end);
            else if (pj->kill_ms >= 0 && pj->kill_ms <= w->now)
                job_evict(w, pj, pj->kill_ms);
        } else if (pj->state == PJ_FUTURE && pj->arrive_ms <= w->now) {
            pj->state = PJ_PENDING;
            pj->req.submit_ms = pj->arrive_ms;
        }
    }
    node_event(w, step);
    cancel_event(w, step);
    build_sets(w);
    if (w->mode == MODE_RESTART)
        rebuild_state(w);

    bool in_pass[MAX_JOBS] = {false}, started[MAX_JOBS] = {false};
    int64_t last = w->st.last_pass_ms;
    for (size_t i = 0; i < w->nrunning; i++) {
        struct pjob *pj = &w->jobs[w->running_job[i]];
        int64_t since = pj->start_ms > last ? pj->start_ms : last;
        pj->seen += pj->milli * (w->now - since);
    }
    for (uint32_t k = 0; k < w->njobs; k++)
        in_pass[k] = w->jobs[k].state == PJ_PENDING || w->jobs[k].state == PJ_RUNNING;

    bool fault = w->mode == MODE_FAULT && (w->fault_steps >> step & 1);
    uint64_t fault_hash = fault ? fault_pass(w, fault_warm(step)) : 0;
    size_t nclaims = w->st.nclaims;
    struct sched_queue q = {w->queue, w->nqueue};
    struct sched_running_set rs = {w->running, w->nrunning};
    int rc = sched_pass(&w->c, &q, &rs, &w->pol, &w->st, w->now, &w->res);
    w->rep->passes++;
    if (rc != 0) {
        violation(w, INV_PASS, "sched_pass returned %d", rc);
        w->pass_hash[step] = (uint64_t)rc;
        return;
    }
    w->pass_hash[step] = hash_result(&w->res);
    w->pass_kind[step] = pass_kind(&w->res, nclaims);
    CHECK(w, ENOMEM, !fault || fault_hash == w->pass_hash[step],
          "a pass on a copy of the state decides otherwise than the world's");
    if (w->trace)
        trace_pass(w);
    struct held before, after;
    if (check) {
        held_compute(w, &before);
        CHECK(w, CAPACITY, w->res.novercommitted == 0, "%zu running jobs reported overcommitted",
              w->res.novercommitted);
        check_starts(w, started);
        check_waits(w, started);
        check_preempts(w, started);
        check_attained(w, in_pass);
    }

    /* Apply: starts, then preemptions (a zero grace exits at once). */
    for (size_t s = 0; s < w->res.nstarts; s++) {
        const struct sched_start *st = &w->res.starts[s];
        struct pjob *pj = job_by_id(w, st->job);
        if (!pj || pj->state != PJ_PENDING || !valid_indices(w, &pj->req) ||
            st->alloc.nnodes > MAX_NODES || st->alloc.nshares > MAX_SHARES)
            continue;
        bool in_range = true;
        for (uint32_t i = 0; i < st->alloc.nnodes; i++)
            in_range = in_range && st->alloc.nodes[i].node < w->c.nnodes;
        for (uint32_t i = 0; i < st->alloc.nshares; i++)
            in_range = in_range && st->alloc.shares[i].gpu < w->c.ngpus;
        if (!in_range)
            continue;
        memcpy(pj->parts, st->alloc.nodes, st->alloc.nnodes * sizeof(*pj->parts));
        memcpy(pj->shares, st->alloc.shares, st->alloc.nshares * sizeof(*pj->shares));
        pj->alloc =
            (struct sched_alloc){pj->parts, st->alloc.nnodes, pj->shares, st->alloc.nshares};
        pj->milli = alloc_milli(&pj->alloc);
        pj->borrowed = st->borrowed;
        pj->start_ms = w->now;
        pj->state = PJ_RUNNING;
    }
    if (check) {
        held_compute(w, &after);
        check_capacity(w, &after);
        check_idle(w, &before, &after);
    }
    for (size_t p = 0; p < w->res.npreempts; p++) {
        struct pjob *pj = job_by_id(w, w->res.preempts[p].job);
        if (pj && pj->state == PJ_RUNNING && pj->kill_ms < 0 && pj->start_ms < w->now)
            pj->kill_ms = w->now + w->res.preempts[p].grace_ms;
    }
    for (uint32_t k = 0; k < w->njobs; k++) {
        struct pjob *pj = &w->jobs[k];
        if (pj->state == PJ_RUNNING && pj->kill_ms >= 0 && pj->kill_ms <= w->now)
            job_evict(w, pj, pj->kill_ms);
    }
    /* The meter: what runs now holds its GPUs until the next step. */
    for (uint32_t k = 0; k < w->njobs; k++) {
        if (w->jobs[k].state == PJ_RUNNING)
            w->held += w->jobs[k].milli * STEP_MS;
    }
}

static void world_run(struct world *w)
{
    w->rep->workloads++;
    for (uint32_t s = 0; s < w->nsteps; s++)
        world_step(w, s);
    if (w->mode != MODE_CHECK)
        return;
    int64_t end = (int64_t)(w->nsteps + 1) * STEP_MS, in_progress = 0;
    for (uint32_t k = 0; k < w->njobs; k++) {
        const struct pjob *pj = &w->jobs[k];
        if (pj->state == PJ_RUNNING)
            in_progress += pj->milli * (end - pj->start_ms);
        CHECK(w, FINAL, !pj->bad || pj->state == PJ_PENDING || pj->state == PJ_FUTURE,
              "job %llu, invalid, left the queue", (unsigned long long)pj->req.id);
    }
    CHECK(w, GPU_TIME, w->held == w->useful + w->saved + w->lost + in_progress,
          "held %lld GPU-ms, but useful %lld + checkpointed %lld + lost %lld + running %lld = %lld",
          (long long)(w->held / 1000), (long long)(w->useful / 1000), (long long)(w->saved / 1000),
          (long long)(w->lost / 1000), (long long)(in_progress / 1000),
          (long long)((w->useful + w->saved + w->lost + in_progress) / 1000));
}

static void trace_world(const struct world *w)
{
    static const char *const state_names[] = {"up", "draining", "down"};
    const struct sched_cluster *c = &w->c;
    printf("# seed 0x%016llx: %u pools, %u types, order %s, %s, backfill %d, preemption %d, "
           "grace %llds, default limit %llds, %u steps\n",
           (unsigned long long)w->seed, c->npools, c->ngpu_types, sched_order_name(w->pol.order),
           sched_packing_name(w->pol.packing), w->pol.backfill, w->pol.preemption,
           (long long)(w->pol.preempt_grace_ms / 1000),
           (long long)(w->pol.default_time_limit_ms / 1000), w->nsteps);
    for (uint32_t n = 0; n < c->nnodes; n++) {
        const struct sched_node *node = &w->nodes[n];
        const struct sched_gpu *g = node->ngpus ? &w->gpus[node->gpu_first] : NULL;
        printf("#   node %u: pool %u, %u x type %d (%u MiB), %u cpus, %llu MiB, %s\n", n,
               node->pool, node->ngpus, g ? (int)g->type : -1, g ? g->mem_mib : 0, node->cpus,
               (unsigned long long)node->mem_mib, state_names[node->state]);
    }
    for (uint32_t t = 0; t < c->nteams; t++) {
        printf("#   team %u: weight %u, default borrow %lld;", t, w->teams[t].weight,
               (long long)w->teams[t].borrow_limit_milli);
        for (uint32_t k = 0; k < w->teams[t].nquotas; k++) {
            const struct sched_quota *q = &w->teams[t].quotas[k];
            printf(" (pool %u type %u: %lld + %lld)", q->pool, q->gpu_type,
                   (long long)q->guaranteed_milli, (long long)q->borrow_limit_milli);
        }
        printf("\n");
    }
    for (uint32_t k = 0; k < c->nclasses; k++)
        printf("#   class %u: order %d%s\n", k, w->classes[k].order,
               w->classes[k].may_preempt ? ", may preempt" : "");
    for (uint32_t k = 0; k < w->njobs; k++) {
        char d[200];
        describe_job(&w->jobs[k].req, d, sizeof(d));
        printf("#   %s arrives %llds, work %llds, limit %llds%s%s\n", d,
               (long long)(w->jobs[k].arrive_ms / 1000), (long long)(w->jobs[k].work_ms / 1000),
               (long long)(w->jobs[k].req.time_limit_ms / 1000),
               w->jobs[k].req.checkpointable ? ", checkpointable" : "",
               w->jobs[k].possible ? "" : ", impossible");
    }
}

/* ---- the suite ---- */

struct suite {
    struct world *w;
    struct report rep;
    uint64_t seeds[NSEEDS];
    uint64_t hashes[NSEEDS][MAX_STEPS];
    uint8_t kinds[NSEEDS][MAX_STEPS];
    size_t nseeds;
};

static struct world *world_new(void)
{
    struct world *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    sched_state_init(&w->st);
    sched_result_init(&w->res);
    return w;
}

static void world_free(struct world *w)
{
    if (!w)
        return;
    sched_state_release(&w->st);
    sched_result_release(&w->res);
    free(w);
}

static int suite_setup(void **state)
{
    struct suite *s = calloc(1, sizeof(*s));
    if (!s)
        return -1;
    s->w = world_new();
    const char *only = getenv("PROPERTY_SEED");
    if (only && *only) {
        s->seeds[s->nseeds++] = strtoull(only, NULL, 0);
    } else {
        for (size_t b = 0; b < sizeof(seed_bases) / sizeof(seed_bases[0]); b++) {
            for (uint64_t k = 0; k < WORKLOADS_PER_BASE; k++)
                s->seeds[s->nseeds++] = seed_bases[b] + k;
        }
    }
    for (size_t k = 0; k < s->nseeds; k++) {
        world_generate(s->w, s->seeds[k], MODE_CHECK, &s->rep);
        s->w->trace = only && *only;
        if (s->w->trace)
            trace_world(s->w);
        world_run(s->w);
        memcpy(s->hashes[k], s->w->pass_hash, sizeof(s->hashes[k]));
        memcpy(s->kinds[k], s->w->pass_kind, sizeof(s->kinds[k]));
    }
    *state = s;
    return 0;
}

static int suite_teardown(void **state)
{
    struct suite *s = *state;
    if (s)
        world_free(s->w);
    free(s);
    return 0;
}

/* Fails, printing the kept examples, if invariant k was ever violated. */
static void expect_no_violation(void **state, enum inv k)
{
    const struct suite *s = *state;
    assert_non_null(s);
    assert_true(s->rep.workloads > 0 && s->rep.passes > 0);
    if (!s->rep.count[k])
        return;
    for (unsigned i = 0; i < s->rep.nkept[k]; i++)
        print_error("%s\n", s->rep.kept[k][i]);
    fail_msg("%s: %lu violations (%lu with mixed GPU memory) in %lu workloads (%lu passes); "
             "replay one with PROPERTY_SEED=<seed>",
             inv_text[k], s->rep.count[k], s->rep.count_mixed[k], s->rep.workloads, s->rep.passes);
}

static void random_workloads_pass_without_error(void **state)
{
    expect_no_violation(state, INV_PASS);
}

static void random_workloads_never_overcommit_gpus_cpus_or_memory(void **state)
{
    expect_no_violation(state, INV_CAPACITY);
}

static void random_workloads_keep_teams_within_guarantee_plus_borrow_limit(void **state)
{
    expect_no_violation(state, INV_QUOTA);
}

static void start_is_borrowed_exactly_when_over_the_guarantee(void **state)
{
    expect_no_violation(state, INV_BORROWED);
}

static void every_job_is_placed_at_most_once(void **state)
{
    expect_no_violation(state, INV_ONCE);
}

static void gpu_time_held_is_useful_checkpointed_or_lost_work(void **state)
{
    expect_no_violation(state, INV_GPU_TIME);
}

static void attained_service_and_lost_work_match_what_jobs_held(void **state)
{
    expect_no_violation(state, INV_SERVICE);
}

static void allocations_match_pool_type_memory_and_size_of_the_request(void **state)
{
    expect_no_violation(state, INV_SHAPE);
}

static void every_waiting_job_gets_exactly_one_wait(void **state)
{
    expect_no_violation(state, INV_WAITS);
}

static void final_reasons_only_for_invalid_or_impossible_jobs(void **state)
{
    expect_no_violation(state, INV_FINAL);
}

static void job_that_no_node_could_hold_gets_a_final_reason(void **state)
{
    expect_no_violation(state, INV_UNSCHEDULABLE);
}

static void no_job_waits_for_resources_left_free(void **state)
{
    expect_no_violation(state, INV_IDLE);
}

static void priority_reason_only_when_the_job_fit_at_pass_start(void **state)
{
    expect_no_violation(state, INV_EXPLAIN);
}

static void preemptions_evict_running_jobs_for_an_allowed_reason(void **state)
{
    expect_no_violation(state, INV_PREEMPT);
}

static void random_workloads_exercise_every_feature(void **state)
{
    const struct suite *s = *state;
    assert_non_null(s);
    if (s->nseeds < NSEEDS)
        skip(); /* a single replayed seed covers what it covers */
    const struct coverage *c = &s->rep.cov;
    print_message("# %lu workloads, %lu passes\n", s->rep.workloads, s->rep.passes);
#define COV_CHECK(name)                                                                            \
    print_message("#   %-18s %lu\n", #name, c->name);                                              \
    if (!c->name)                                                                                  \
        fail_msg("the random workloads never hit " #name);
    COVERAGE(COV_CHECK)
#undef COV_CHECK
}

/* Reruns every `stride`-th seed in `mode` and compares the hash of every pass. */
static void rerun_and_compare(void **state, enum mode mode, size_t stride, enum inv k)
{
    struct suite *s = *state;
    assert_non_null(s);
    struct report scratch;
    memset(&scratch, 0, sizeof(scratch));
    for (size_t i = 0; i < s->nseeds; i += stride) {
        struct report *rep = &scratch;
        world_generate(s->w, s->seeds[i], mode, rep);
        world_run(s->w);
        for (uint32_t p = 0; p < s->w->nsteps; p++) {
            if (s->w->pass_hash[p] != s->hashes[i][p]) {
                s->w->rep = &s->rep;
                s->w->now = (int64_t)(p + 1) * STEP_MS;
                violation(s->w, k, "pass %u: decisions differ from the first run", p);
                break;
            }
        }
    }
    expect_no_violation(state, k);
}

static void same_seed_gives_same_decisions(void **state)
{
    rerun_and_compare(state, MODE_RERUN, 2, INV_SAME_SEED);
}

static void state_rebuilt_from_its_arrays_gives_same_decisions(void **state)
{
    rerun_and_compare(state, MODE_RESTART, 4, INV_RESTART);
}

static void queue_and_running_order_change_no_decision(void **state)
{
    rerun_and_compare(state, MODE_SHUFFLE, 4, INV_QUEUE_ORDER);
}

/* Sampled passes with each of their allocations failed in turn (see the top
 * of the file); the world's own passes must decide as in the first run. */
static void failed_allocation_fails_the_pass_and_changes_nothing(void **state)
{
    struct suite *s = *state;
    assert_non_null(s);
    struct report *scratch = calloc(1, sizeof(*scratch));
    uint64_t *steps = calloc(s->nseeds, sizeof(*steps));
    assert_true(scratch && steps);
    /* Every 32nd workload's sample of passes, and the first few passes of
     * each kind (what they did decides what they allocate). */
    size_t stride = s->nseeds < NSEEDS ? 1 : 32;
    unsigned taken[PK_KINDS] = {0};
    for (size_t i = 0; i < s->nseeds; i++) {
        if (i % stride == 0)
            steps[i] = fault_sample();
        for (uint32_t p = 0; p < MAX_STEPS; p++) {
            for (unsigned b = 0; b < PK_KINDS; b++) {
                if ((s->kinds[i][p] >> b & 1) && taken[b] < 4) {
                    taken[b]++;
                    steps[i] |= 1ull << p;
                }
            }
        }
    }
    for (size_t i = 0; i < s->nseeds; i++) {
        if (!steps[i])
            continue;
        world_generate(s->w, s->seeds[i], MODE_FAULT, scratch);
        s->w->fault_steps = steps[i];
        world_run(s->w);
        for (uint32_t p = 0; p < s->w->nsteps; p++) {
            if (s->w->pass_hash[p] != s->hashes[i][p]) {
                s->w->now = (int64_t)(p + 1) * STEP_MS;
                violation(s->w, INV_ENOMEM, "pass %u: decisions differ from the first run", p);
                break;
            }
        }
    }
    print_message("# %lu passes with each of their allocations failed: %lu allocations, %lu of "
                  "them done without\n",
                  scratch->fault_passes, scratch->fault_allocs, scratch->fault_absorbed);
    struct report *rep = &s->rep;
    rep->count[INV_ENOMEM] += scratch->count[INV_ENOMEM];
    for (unsigned k = 0; k < scratch->nkept[INV_ENOMEM] && rep->nkept[INV_ENOMEM] < REPORT_KEEP;
         k++)
        memcpy(rep->kept[INV_ENOMEM][rep->nkept[INV_ENOMEM]++], scratch->kept[INV_ENOMEM][k],
               sizeof(rep->kept[0][0]));
    bool none = scratch->fault_allocs == 0;
    free(scratch);
    free(steps);
    if (none)
        fail_msg("no allocation was failed: the sample is empty");
    expect_no_violation(state, INV_ENOMEM);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_workloads_pass_without_error),
        cmocka_unit_test(random_workloads_never_overcommit_gpus_cpus_or_memory),
        cmocka_unit_test(random_workloads_keep_teams_within_guarantee_plus_borrow_limit),
        cmocka_unit_test(start_is_borrowed_exactly_when_over_the_guarantee),
        cmocka_unit_test(every_job_is_placed_at_most_once),
        cmocka_unit_test(gpu_time_held_is_useful_checkpointed_or_lost_work),
        cmocka_unit_test(attained_service_and_lost_work_match_what_jobs_held),
        cmocka_unit_test(allocations_match_pool_type_memory_and_size_of_the_request),
        cmocka_unit_test(every_waiting_job_gets_exactly_one_wait),
        cmocka_unit_test(final_reasons_only_for_invalid_or_impossible_jobs),
        cmocka_unit_test(job_that_no_node_could_hold_gets_a_final_reason),
        cmocka_unit_test(no_job_waits_for_resources_left_free),
        cmocka_unit_test(priority_reason_only_when_the_job_fit_at_pass_start),
        cmocka_unit_test(preemptions_evict_running_jobs_for_an_allowed_reason),
        cmocka_unit_test(random_workloads_exercise_every_feature),
        cmocka_unit_test(same_seed_gives_same_decisions),
        cmocka_unit_test(state_rebuilt_from_its_arrays_gives_same_decisions),
        cmocka_unit_test(queue_and_running_order_change_no_decision),
        cmocka_unit_test(failed_allocation_fails_the_pass_and_changes_nothing),
    };
    return cmocka_run_group_tests(tests, suite_setup, suite_teardown);
}

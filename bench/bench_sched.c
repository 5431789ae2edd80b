/*
 * bench_sched.c - how fast is one scheduling pass, and how much memory does it
 * take per pending job?
 *
 * Builds a cluster (by default 1,250 nodes x 8 H100-80GB = 10,000 GPUs in two
 * pools), eight teams with guarantees and weights, three priority classes and
 * 100,000 pending jobs of mixed sizes, then measures sched_pass under the
 * default policy:
 *
 *   full      one pass over the empty cluster (time, decisions, decisions/s);
 *   one-ends  the starts of that pass applied (the cluster full), one running
 *             job ended a minute later, and the next pass timed with the state
 *             the previous pass carried over, as the controller would run it.
 *             Twice: right after the first pass ("first"), and once a small
 *             controller loop (ctl_*) has settled the reclaims that the fill
 *             made due ("settled");
 *   memory    the queue's own bytes per pending job, plus the peak heap the
 *             pass allocates (counted by wrapping malloc, see below) per job.
 *
 * Only the sched_pass call is timed (CLOCK_MONOTONIC). bench/run.sh runs this
 * pinned to one core, then case by case under callgrind, where client
 * requests (bench_timed_pass) count the timed passes and nothing else.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if BENCH_COUNT_MALLOC
#include <malloc.h>
#endif
#if BENCH_HAVE_CALLGRIND
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#define CALLGRIND_TOGGLE_COLLECT
#endif

#include "base/err.h"
#include "core/mig.h"
#include "core/model.h"
#include "core/sched.h"
#include "base/banned.h"

#define NTEAMS            8
#define NPOOLS            2
#define NCLASSES          3
#define GPUS_PER_NODE     8
#define GPU_MEM_MIB       81559u             /* H100-80GB as nvidia-smi reports it */
#define NODE_CPUS         192u               /* 2 x 96-core sockets */
#define NODE_MEM_MIB      (2048u * 1024)     /* 2 TiB */
#define NOW0_MS           (3600 * 1000 * 24) /* the first pass runs a day after the epoch */
#define ONE_ENDS_AFTER_MS 60000              /* the job ends a minute after the last pass */
#define SETTLE_STEP_MS    10000              /* the controller's passes while settling */
#define SETTLE_MAX_PASSES 60

/* ---- counting heap (glibc only; off under sanitizers, see meson.build) ----
 *
 * The core allocates with malloc/calloc/realloc/free. Defining them here
 * interposes them for the whole process (glibc supports replacing malloc), so
 * the bench can count the bytes in use and their peak around one pass without
 * touching src/core. The sizes are malloc_usable_size's, i.e. what the
 * allocator really set aside (chunk headers aside). These two counters are the
 * bench's only mutable globals: an allocator has nowhere else to keep them. */
#if BENCH_COUNT_MALLOC
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void *__libc_memalign(size_t align, size_t size);
extern void __libc_free(void *p);

static size_t heap_now, heap_peak;

static void heap_add(void *p)
{
    if (!p)
        return;
    heap_now += malloc_usable_size(p);
    if (heap_now > heap_peak)
        heap_peak = heap_now;
}

static void heap_sub(void *p)
{
    if (p)
        heap_now -= malloc_usable_size(p);
}

void *malloc(size_t size)
{
    void *p = __libc_malloc(size);
    heap_add(p);
    return p;
}

void *calloc(size_t n, size_t size)
{
    void *p = __libc_calloc(n, size);
    heap_add(p);
    return p;
}

void *realloc(void *old, size_t size)
{
    size_t was = old ? malloc_usable_size(old) : 0;
    void *p = __libc_realloc(old, size);
    if (p || size == 0)
        heap_now -= was;
    heap_add(p);
    return p;
}

void free(void *p)
{
    heap_sub(p);
    __libc_free(p);
}

void *memalign(size_t align, size_t size)
{
    void *p = __libc_memalign(align, size);
    heap_add(p);
    return p;
}

void *aligned_alloc(size_t align, size_t size)
{
    return memalign(align, size);
}

int posix_memalign(void **ret, size_t align, size_t size)
{
    void *p = memalign(align, size);
    if (!p)
        return ENOMEM;
    *ret = p;
    return 0;
}

static bool heap_counting(void)
{
    return true;
}

static void heap_mark(size_t *ret_now)
{
    *ret_now = heap_now;
    heap_peak = heap_now;
}

static size_t heap_peak_now(void)
{
    return heap_peak;
}

static size_t heap_in_use(void)
{
    return heap_now;
}
#else
static bool heap_counting(void)
{
    return false;
}

static void heap_mark(size_t *ret_now)
{
    *ret_now = 0;
}

static size_t heap_peak_now(void)
{
    return 0;
}

static size_t heap_in_use(void)
{
    return 0;
}
#endif

/* ---- options ---- */

enum bench_case {
    CASE_FULL = 1 << 0,
    CASE_ONE_ENDS_FIRST = 1 << 1,
    CASE_ONE_ENDS_SETTLED = 1 << 2,
    CASE_MEMORY = 1 << 3,
    CASE_ONE_ENDS = CASE_ONE_ENDS_FIRST | CASE_ONE_ENDS_SETTLED,
    CASE_ALL = CASE_FULL | CASE_ONE_ENDS | CASE_MEMORY,
};

static const struct {
    const char *name;
    unsigned value;
} case_names[] = {
    {"full", CASE_FULL},
    {"one-ends", CASE_ONE_ENDS},
    {"one-ends-first", CASE_ONE_ENDS_FIRST},
    {"one-ends-settled", CASE_ONE_ENDS_SETTLED},
    {"memory", CASE_MEMORY},
    {"all", CASE_ALL},
};

struct bench_opts {
    uint32_t nodes;
    uint32_t jobs;
    uint32_t runs;
    uint64_t seed;
    unsigned cases;
    bool mig; /* the serve pool in MIG mode, fractions as MIG profiles */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench_sched [--jobs N] [--nodes N] [--runs N] [--seed N] [--mig]\n"
            "                   [--case full|one-ends|one-ends-first|one-ends-settled|memory|all]\n"
            "\n"
            "Times sched_pass (default policy) on a cluster of N nodes x 8 H100-80GB\n"
            "(default 1250 nodes = 10,000 GPUs) with N pending jobs (default 100000):\n"
            "  full              one pass over the empty cluster: ms, decisions, decisions/s\n"
            "  one-ends-first    the first pass's starts applied (cluster full), one job\n"
            "                    ends a minute later: the pass that follows, in ms\n"
            "  one-ends-settled  the same once the controller has settled (passes every\n"
            "                    10 s until one decides nothing): the pass that follows\n"
            "  one-ends          both of the above\n"
            "  memory            bytes per pending job: the queue's own, plus the pass's\n"
            "                    peak heap (full pass and one-ends-first pass)\n"
            "--mig: the serve pool's GPUs in MIG mode (mig-parted's all-balanced: two\n"
            "1g.10gb, a 2g.20gb and a 3g.40gb each), and the fractional jobs ask for\n"
            "MIG profiles instead (0.25 GPU: 2g.20gb, 0.5: 3g.40gb); whole-GPU jobs that\n"
            "named the serve pool ask for the train pool.\n"
            "Each timed case runs --runs times (default 7): median, min and max.\n"
            "A decision is one pending job evaluated in a pass (sched_result.decisions).\n");
}

static int parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *ret)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-') {
        fprintf(stderr, "bench_sched: %s needs a number\n", opt);
        return -1;
    }
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max) {
        fprintf(stderr, "bench_sched: %s: '%s' is not a number in %" PRIu64 "..%" PRIu64 "\n", opt,
                s, min, max);
        return -1;
    }
    *ret = v;
    return 0;
}

/* 0 to run, 1 to exit with success (--help), -1 on a bad option. */
static int parse_opts(int argc, char **argv, struct bench_opts *o)
{
    *o =
        (struct bench_opts){.nodes = 1250, .jobs = 100000, .runs = 7, .seed = 1, .cases = CASE_ALL};
    for (int a = 1; a < argc; a++) {
        const char *opt = argv[a], *val = a + 1 < argc ? argv[a + 1] : NULL;
        uint64_t v;
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(opt, "--mig")) {
            o->mig = true;
            continue;
        } else if (!strcmp(opt, "--jobs")) {
            if (parse_u64(opt, val, 1, SCHED_MAX_JOBS / 2, &v))
                return -1;
            o->jobs = (uint32_t)v;
        } else if (!strcmp(opt, "--nodes")) {
            if (parse_u64(opt, val, 4, SCHED_MAX_NODES / GPUS_PER_NODE, &v))
                return -1;
            o->nodes = (uint32_t)v;
        } else if (!strcmp(opt, "--runs")) {
            if (parse_u64(opt, val, 1, 1000, &v))
                return -1;
            o->runs = (uint32_t)v;
        } else if (!strcmp(opt, "--seed")) {
            if (parse_u64(opt, val, 0, UINT64_MAX, &v))
                return -1;
            o->seed = v;
        } else if (!strcmp(opt, "--case")) {
            size_t k;
            for (k = 0; val && k < sizeof(case_names) / sizeof(case_names[0]); k++) {
                if (!strcmp(val, case_names[k].name))
                    break;
            }
            if (!val || k == sizeof(case_names) / sizeof(case_names[0])) {
                fprintf(stderr, "bench_sched: --case: full, one-ends, one-ends-first, "
                                "one-ends-settled, memory or all\n");
                return -1;
            }
            o->cases = case_names[k].value;
        } else {
            fprintf(stderr, "bench_sched: unknown option '%s' (try --help)\n", opt);
            return -1;
        }
        a++;
    }
    return 0;
}

/* ---- helpers ---- */

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "bench_sched: out of memory\n");
        exit(1);
    }
    return p;
}

/* splitmix64: a fixed, seedable workload. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* Uniform in 0..n-1 (n small: the modulo bias is immaterial here). */
static uint32_t rng_below(uint64_t *s, uint32_t n)
{
    return (uint32_t)(rng_next(s) % n);
}

static double ms_since(const struct timespec *t0, const struct timespec *t1)
{
    return (double)(t1->tv_sec - t0->tv_sec) * 1e3 + (double)(t1->tv_nsec - t0->tv_nsec) / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct stats {
    double median, min, max;
};

static struct stats stats_of(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    return (struct stats){med, v[0], v[n - 1]};
}

/* ---- the workload ---- */

struct bench {
    struct bench_opts opt;

    struct sched_node *nodes;
    struct sched_gpu *gpus;
    char (*names)[16];
    struct sched_pool pools[NPOOLS];
    struct sched_gpu_type types[1];
    struct sched_team teams[NTEAMS];
    struct sched_quota quotas[NTEAMS][NPOOLS];
    struct sched_prio_class classes[NCLASSES];
    struct sched_cluster c;
    struct sched_policy pol;

    struct sched_job *jobs; /* every job, in submit order */
    size_t njobs;

    /* what a pass is given: built from jr[] (see ctl_build), or all jobs */
    struct sched_job *queue;
    size_t nqueue;
    struct sched_running *running;
    size_t nrunning;
    struct job_run *jr; /* per job: the caller's record (status, allocation) */
    int64_t now;
};

/* --mig: the serve pool's GPUs (nodes from `first`) in MIG mode, all-balanced. */
static void mig_serve_pool(struct bench *b, uint32_t first)
{
    const struct mig_type *t = mig_type_find("H100-80GB");
    struct mig_instance inst[MIG_MAX_INSTANCES];
    size_t n = 0;
    bool on = false;
    if (!t || mig_layout_named(t, "all-balanced", inst, &n, &on, NULL, 0))
        abort();
    for (size_t gi = (size_t)first * GPUS_PER_NODE; gi < (size_t)b->opt.nodes * GPUS_PER_NODE;
         gi++) {
        struct sched_gpu *g = &b->gpus[gi];
        g->mig_enabled = on;
        g->mig_type = t;
        g->mig_n = (uint8_t)n;
        for (size_t k = 0; k < n; k++)
            g->mig[k] = (struct sched_mig_instance){inst[k].profile, inst[k].start};
    }
}

/* --mig: a fraction of 250 or 500 milli asks for a 2g or a 3g instead. */
static void mig_request(struct sched_job *j)
{
    const struct mig_type *t = mig_type_find("H100-80GB");
    int p = mig_profile_lookup(t, j->gpu_milli <= 250 ? "2g.20gb" : "3g.40gb", NULL, 0);
    if (p < 0)
        abort();
    j->gpu_milli = 0;
    j->mig_types = (uint8_t)(1u << t->id);
    j->mig_profile[t->id] = (uint8_t)p;
}

static void build_cluster(struct bench *b)
{
    uint32_t nn = b->opt.nodes;
    /* "train": HGX H100 nodes, all 8 GPUs on one NVSwitch fabric; "serve": PCIe
     * H100 nodes with NVLink bridges between pairs of GPUs. */
    uint32_t ntrain = nn - nn / 5;
    b->nodes = xcalloc(nn, sizeof(*b->nodes));
    b->gpus = xcalloc((size_t)nn * GPUS_PER_NODE, sizeof(*b->gpus));
    b->names = xcalloc(nn, sizeof(*b->names));
    b->pools[0] = (struct sched_pool){"train"};
    b->pools[1] = (struct sched_pool){"serve"};
    b->types[0] = (struct sched_gpu_type){.id = 1, .name = "H100-80GB"};
    for (uint32_t n = 0; n < nn; n++) {
        uint32_t pool = n < ntrain ? 0 : 1;
        snprintf(b->names[n], sizeof(b->names[n]), "%s%04u", pool ? "s" : "t", n);
        b->nodes[n] = (struct sched_node){.name = b->names[n],
                                          .pool = pool,
                                          .state = SCHED_NODE_UP,
                                          .cpus = NODE_CPUS,
                                          .mem_mib = NODE_MEM_MIB,
                                          .gpu_first = n * GPUS_PER_NODE,
                                          .ngpus = GPUS_PER_NODE};
        for (uint32_t g = 0; g < GPUS_PER_NODE; g++) {
            b->gpus[n * GPUS_PER_NODE + g] =
                (struct sched_gpu){.type = 0,
                                   .mem_mib = GPU_MEM_MIB,
                                   .nvlink_domain = pool ? (int32_t)(g / 2) : 0,
                                   .mig_slices = 7,
                                   .mig_enabled = false};
        }
    }

    /* Guarantees as a share (percent) of each pool; 0: borrow only. */
    static const struct {
        const char *name;
        uint32_t weight;
        uint32_t train_pct, serve_pct;
    } teams[NTEAMS] = {
        {"llm-pretrain", 4, 30, 0}, {"llm-finetune", 2, 15, 0}, {"vision", 2, 10, 0},
        {"speech", 1, 10, 0},       {"research", 1, 10, 5},     {"recsys", 2, 5, 10},
        {"serving", 3, 0, 50},      {"interns", 1, 0, 0},
    };
    int64_t cap[NPOOLS] = {(int64_t)ntrain * GPUS_PER_NODE * SCHED_MILLI,
                           (int64_t)(nn - ntrain) * GPUS_PER_NODE * SCHED_MILLI};
    for (uint32_t t = 0; t < NTEAMS; t++) {
        uint32_t nq = 0;
        uint32_t pct[NPOOLS] = {teams[t].train_pct, teams[t].serve_pct};
        for (uint32_t p = 0; p < NPOOLS; p++) {
            if (pct[p])
                b->quotas[t][nq++] = (struct sched_quota){.pool = p,
                                                          .gpu_type = 0,
                                                          .guaranteed_milli = cap[p] * pct[p] / 100,
                                                          .borrow_limit_milli = -1};
        }
        b->teams[t] = (struct sched_team){.id = 100 + t,
                                          .name = teams[t].name,
                                          .weight = teams[t].weight,
                                          /* interns may borrow at most 5% of a pool */
                                          .borrow_limit_milli = t == 7 ? cap[0] / 20 : -1,
                                          .quotas = b->quotas[t],
                                          .nquotas = nq};
    }
    b->classes[0] = (struct sched_prio_class){"batch", 0, false};
    b->classes[1] = (struct sched_prio_class){"normal", 100, false};
    b->classes[2] = (struct sched_prio_class){"urgent", 1000, true};

    if (b->opt.mig)
        mig_serve_pool(b, ntrain);
    b->c = (struct sched_cluster){.nodes = b->nodes,
                                  .nnodes = nn,
                                  .gpus = b->gpus,
                                  .ngpus = nn * GPUS_PER_NODE,
                                  .pools = b->pools,
                                  .npools = NPOOLS,
                                  .gpu_types = b->types,
                                  .ngpu_types = 1,
                                  .teams = b->teams,
                                  .nteams = NTEAMS,
                                  .classes = b->classes,
                                  .nclasses = NCLASSES};
    sched_policy_default(&b->pol);
}

/* Percent of jobs of each shape: mostly one GPU, some 2/4/8, a few gangs,
 * some fractions of a GPU (time-sliced inference and notebooks). */
static const struct {
    uint32_t permille;
    int32_t gpus;
    int32_t milli;
    bool gang;
} job_shapes[] = {
    {600, 1, 0, false}, {50, 0, 250, false}, {50, 0, 500, false}, {130, 2, 0, false},
    {90, 4, 0, false},  {60, 8, 0, false},   {15, 16, 0, true},   {5, 32, 0, true},
};

static const int64_t time_limits_ms[] = {
    0, /* none: the policy's default (24 h) */
    30 * 60 * 1000,
    3600 * 1000,
    4 * 3600 * 1000,
    12 * 3600 * 1000,
    24 * 3600 * 1000,
    72 * 3600 * 1000,
};

static void build_jobs(struct bench *b)
{
    uint64_t rng = b->opt.seed;
    free(b->jobs);
    b->njobs = b->opt.jobs;
    b->jobs = xcalloc(b->njobs, sizeof(*b->jobs));
    /* Team mix: the big teams submit most. */
    static const uint32_t team_permille[NTEAMS] = {250, 150, 120, 100, 120, 80, 120, 60};
    for (size_t i = 0; i < b->njobs; i++) {
        struct sched_job *j = &b->jobs[i];
        uint32_t r = rng_below(&rng, 1000), acc = 0;
        size_t s = 0;
        while (s + 1 < sizeof(job_shapes) / sizeof(job_shapes[0]) &&
               r >= acc + job_shapes[s].permille)
            acc += job_shapes[s++].permille;
        r = rng_below(&rng, 1000);
        acc = 0;
        uint32_t team = 0;
        while (team + 1 < NTEAMS && r >= acc + team_permille[team])
            acc += team_permille[team++];
        uint32_t cls = rng_below(&rng, 100);
        uint32_t prio = cls < 30 ? 0 : cls < 99 ? 1 : 2; /* 30% batch, 69% normal, 1% urgent */
        uint32_t where = rng_below(&rng, 100);
        uint32_t pool = where < 80 ? SCHED_ANY : where < 92 ? 0 : 1;
        if (job_shapes[s].gang)
            pool = 0; /* gangs train */
        int32_t gpus = job_shapes[s].gpus, milli = job_shapes[s].milli;
        *j = (struct sched_job){
            .id = 1000000 + i,
            /* submitted over the last 20 h, in id order, 100 ms steps */
            .submit_ms = NOW0_MS - 20 * 3600 * 1000 + (int64_t)(i * 720000 / b->njobs) * 100,
            .team = team,
            .prio = prio,
            .pool = pool,
            .gpu_type = rng_below(&rng, 4) == 0 ? 0 : SCHED_ANY,
            .gpus = gpus,
            .gpu_milli = milli,
            .min_gpu_mem_mib = rng_below(&rng, 10) == 0 ? 40000 : 0,
            .cpus = gpus > 0 ? 16 * (gpus < 8 ? gpus : 8) : 4,
            .mem_mib = gpus > 0 ? (int64_t)(gpus < 8 ? gpus : 8) * 200 * 1024 : 32 * 1024,
            .time_limit_ms =
                time_limits_ms[rng_below(&rng, sizeof(time_limits_ms) / sizeof(time_limits_ms[0]))],
            .project = rng_below(&rng, 40),
            .model = rng_below(&rng, 25),
            .multi_node = job_shapes[s].gang,
            .checkpointable = rng_below(&rng, 2) == 0,
        };
        if (b->opt.mig && milli > 0)
            mig_request(j);
        else if (b->opt.mig && j->pool == 1)
            j->pool = 0; /* whole GPUs are in the train pool only */
    }
}

/* The timed call. Under callgrind (bench/run.sh: --instr-atstart=no
 * --collect-atstart=no), the client requests count this sched_pass call and
 * nothing else; natively they are a few no-op instructions. Not inlined, so
 * that --toggle-collect=bench_timed_pass* works too where the requests are
 * missing. Returns the pass's code. */
__attribute__((noinline)) static int bench_timed_pass(struct bench *b, struct sched_state *st,
                                                      int64_t now, struct sched_result *res,
                                                      double *ret_ms)
{
    struct sched_queue q = {b->queue, b->nqueue};
    struct sched_running_set r = {b->running, b->nrunning};
    struct timespec t0, t1;
    CALLGRIND_START_INSTRUMENTATION;
    CALLGRIND_TOGGLE_COLLECT;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int err = sched_pass(&b->c, &q, &r, &b->pol, st, now, res);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CALLGRIND_TOGGLE_COLLECT;
    CALLGRIND_STOP_INSTRUMENTATION;
    *ret_ms = ms_since(&t0, &t1);
    return err;
}

static void check_pass(int err, const char *what)
{
    if (err) {
        fprintf(stderr, "bench_sched: %s: sched_pass failed: %s (%d)\n", what, gpo_strerror(err),
                err);
        exit(1);
    }
}

/* The queue is every job, nothing runs. */
static void reset_empty(struct bench *b)
{
    free(b->queue);
    free(b->running);
    b->running = NULL;
    b->queue = xcalloc(b->njobs, sizeof(*b->queue));
    memcpy(b->queue, b->jobs, b->njobs * sizeof(*b->queue));
    b->nqueue = b->njobs;
    b->nrunning = 0;
}

/* Deep copy of a scheduler state, so that each run starts from the same one. */
static void state_copy(struct sched_state *dst, const struct sched_state *src)
{
    sched_state_init(dst);
    dst->last_pass_ms = src->last_pass_ms;
    dst->usage = xcalloc(src->nusage, sizeof(*dst->usage));
    if (src->nusage)
        memcpy(dst->usage, src->usage, src->nusage * sizeof(*dst->usage));
    dst->nusage = dst->usage_cap = src->nusage;
    dst->attained = xcalloc(src->nattained, sizeof(*dst->attained));
    if (src->nattained)
        memcpy(dst->attained, src->attained, src->nattained * sizeof(*dst->attained));
    dst->nattained = dst->attained_cap = src->nattained;
    dst->claims = xcalloc(src->nclaims, sizeof(*dst->claims));
    if (src->nclaims)
        memcpy(dst->claims, src->claims, src->nclaims * sizeof(*dst->claims));
    dst->nclaims = dst->claims_cap = src->nclaims;
}

static void print_result_counts(const char *label, const struct sched_result *res)
{
    printf("%s decisions=%zu starts=%zu preempts=%zu reserves=%zu waits=%zu\n", label,
           res->decisions, res->nstarts, res->npreempts, res->nreserves, res->nwaits);
}

static void case_full(struct bench *b)
{
    uint32_t runs = b->opt.runs;
    double *ms = xcalloc(runs, sizeof(*ms));
    struct sched_result res;
    sched_result_init(&res);
    size_t decisions = 0;
    reset_empty(b);
    for (uint32_t k = 0; k < runs; k++) {
        struct sched_state st;
        sched_state_init(&st);
        check_pass(bench_timed_pass(b, &st, NOW0_MS, &res, &ms[k]), "full pass");
        decisions = res.decisions;
        sched_state_release(&st);
    }
    print_result_counts("full_pass", &res);
    struct stats s = stats_of(ms, runs);
    double dps = s.median > 0 ? (double)decisions / (s.median / 1e3) : 0;
    printf("full_pass_ms median=%.2f min=%.2f max=%.2f runs=%u goal<1000 %s\n", s.median, s.min,
           s.max, runs, s.median < 1000 ? "MET" : "MISSED");
    printf("decisions_per_s=%.0f (decisions=%zu / median) goal>=100000 %s\n", dps, decisions,
           dps >= 100000 ? "MET" : "MISSED");
    sched_result_release(&res);
    free(ms);
}

/* ---- the caller's part: a small controller loop ----
 *
 * What gpuorch's controller does between passes, reduced to what a pass sees:
 * started jobs join the running set (their allocations copied, since the
 * result's arrays are reused by the next pass), preempted ones stay there
 * marked `preempting` until their grace period is over, then go back to the
 * queue (requeued: submitted again at that time). Jobs end only when the bench
 * says so. */

enum job_status { JS_PENDING = 0, JS_RUNNING, JS_LEAVING, JS_DONE };

struct job_run {
    uint8_t status;
    bool borrowed;
    int64_t start_ms, kill_ms;
    struct sched_alloc alloc; /* nodes and shares in one heap block, owned */
};

static void ctl_init(struct bench *b, struct sched_state *st)
{
    build_jobs(b); /* afresh: requeues change submit times */
    free(b->queue);
    free(b->running);
    b->jr = xcalloc(b->njobs, sizeof(*b->jr));
    b->queue = xcalloc(b->njobs, sizeof(*b->queue));
    b->running = xcalloc(b->njobs, sizeof(*b->running));
    b->nqueue = b->nrunning = 0;
    b->now = NOW0_MS;
    sched_state_init(st);
}

static void ctl_release(struct bench *b)
{
    for (size_t i = 0; b->jr && i < b->njobs; i++)
        free(b->jr[i].alloc.nodes);
    free(b->jr);
    free(b->queue);
    free(b->running);
    b->jr = NULL;
    b->queue = NULL;
    b->running = NULL;
    b->nqueue = b->nrunning = 0;
}

/* The queue (in submit order) and the running set, from the jobs' status. */
static void ctl_build(struct bench *b)
{
    b->nqueue = b->nrunning = 0;
    for (size_t i = 0; i < b->njobs; i++) {
        struct job_run *r = &b->jr[i];
        if (r->status == JS_PENDING)
            b->queue[b->nqueue++] = b->jobs[i];
        else if (r->status == JS_RUNNING || r->status == JS_LEAVING)
            b->running[b->nrunning++] =
                (struct sched_running){.job = &b->jobs[i],
                                       .alloc = r->alloc,
                                       .start_ms = r->start_ms,
                                       .borrowed = r->borrowed,
                                       .preempting = r->status == JS_LEAVING};
    }
}

static size_t job_index(const struct bench *b, uint64_t id)
{
    size_t i = (size_t)(id - b->jobs[0].id); /* ids are dense, in job order */
    if (id < b->jobs[0].id || i >= b->njobs) {
        fprintf(stderr, "bench_sched: pass names unknown job %" PRIu64 "\n", id);
        exit(1);
    }
    return i;
}

static void ctl_apply(struct bench *b, const struct sched_result *res)
{
    for (size_t k = 0; k < res->nstarts; k++) {
        const struct sched_start *s = &res->starts[k];
        struct job_run *r = &b->jr[job_index(b, s->job)];
        size_t pbytes = s->alloc.nnodes * sizeof(*s->alloc.nodes);
        size_t sbytes = s->alloc.nshares * sizeof(*s->alloc.shares);
        unsigned char *blk = xcalloc(1, pbytes + sbytes);
        memcpy(blk, s->alloc.nodes, pbytes);
        if (sbytes)
            memcpy(blk + pbytes, s->alloc.shares, sbytes);
        free(r->alloc.nodes);
        r->alloc =
            (struct sched_alloc){(struct sched_node_part *)(void *)blk, s->alloc.nnodes,
                                 (struct sched_share *)(void *)(blk + pbytes), s->alloc.nshares};
        r->status = JS_RUNNING;
        r->start_ms = b->now;
        r->borrowed = s->borrowed;
    }
    for (size_t k = 0; k < res->npreempts; k++) {
        struct job_run *r = &b->jr[job_index(b, res->preempts[k].job)];
        if (r->status == JS_RUNNING) {
            r->status = JS_LEAVING;
            r->kill_ms = b->now + res->preempts[k].grace_ms;
        }
    }
}

/* Moves time on: preempted jobs whose grace is over leave and are requeued. */
static void ctl_advance(struct bench *b, int64_t now)
{
    b->now = now;
    for (size_t i = 0; i < b->njobs; i++) {
        struct job_run *r = &b->jr[i];
        if (r->status != JS_LEAVING || r->kill_ms > now)
            continue;
        free(r->alloc.nodes);
        r->alloc = (struct sched_alloc){0};
        r->status = JS_PENDING;
        b->jobs[i].submit_ms = r->kill_ms;
    }
}

/* One untimed pass at b->now, its decisions applied. */
static void ctl_pass(struct bench *b, struct sched_state *st, struct sched_result *res)
{
    ctl_build(b);
    struct sched_queue q = {b->queue, b->nqueue};
    struct sched_running_set r = {b->running, b->nrunning};
    check_pass(sched_pass(&b->c, &q, &r, &b->pol, st, b->now, res), "setup pass");
    ctl_apply(b, res);
}

static void ctl_report(const struct bench *b, const char *label, const struct sched_result *res)
{
    size_t n[4] = {0};
    uint64_t used = 0, total = (uint64_t)b->c.ngpus * SCHED_MILLI;
    for (size_t i = 0; i < b->njobs; i++) {
        const struct job_run *r = &b->jr[i];
        n[r->status]++;
        if (r->status != JS_RUNNING && r->status != JS_LEAVING)
            continue;
        for (uint32_t k = 0; k < r->alloc.nshares; k++)
            used += r->alloc.shares[k].milli;
    }
    printf("%s: running=%zu preempting=%zu pending=%zu gpu_milli_used=%" PRIu64 "/%" PRIu64
           " (%.2f%%); that pass: starts=%zu preempts=%zu reserves=%zu\n",
           label, n[JS_RUNNING], n[JS_LEAVING], n[JS_PENDING], used, total,
           100.0 * (double)used / (double)total, res->nstarts, res->npreempts, res->nreserves);
}

/*
 * Fills the cluster: the first pass on the empty cluster, its starts applied.
 * With `settle`, then plays the controller on (a pass every SETTLE_STEP_MS,
 * preempted jobs leaving after their grace) until a pass decides nothing new
 * and nothing is leaving: the reclaims and claims that follow a first fill are
 * over. Leaves the carried-over state in *st.
 */
static void ctl_fill(struct bench *b, struct sched_state *st, bool settle, struct sched_result *res)
{
    ctl_init(b, st);
    ctl_pass(b, st, res);
    ctl_report(b, "cluster_after_first_pass", res);
    if (settle) {
        uint32_t passes = 0;
        bool settled = false;
        while (!settled && passes < SETTLE_MAX_PASSES) {
            ctl_advance(b, b->now + SETTLE_STEP_MS);
            ctl_pass(b, st, res);
            passes++;
            bool leaving = false;
            for (size_t i = 0; i < b->njobs && !leaving; i++)
                leaving = b->jr[i].status == JS_LEAVING;
            settled = !res->nstarts && !res->npreempts && !leaving;
        }
        char label[64];
        snprintf(label, sizeof(label), "cluster_settled passes=%u%s", passes,
                 settled ? "" : " (NOT settled)");
        ctl_report(b, label, res);
    }
}

/* Ends one running job: the first single whole-GPU one (the commonest kind),
 * or else the first running one. Returns its id. */
static uint64_t ctl_end_one(struct bench *b)
{
    size_t pick = SIZE_MAX;
    for (size_t i = 0; i < b->njobs; i++) {
        if (b->jr[i].status != JS_RUNNING)
            continue;
        if (pick == SIZE_MAX)
            pick = i;
        if (b->jobs[i].gpus == 1) {
            pick = i;
            break;
        }
    }
    if (pick == SIZE_MAX) {
        fprintf(stderr, "bench_sched: nothing runs\n");
        exit(1);
    }
    free(b->jr[pick].alloc.nodes);
    b->jr[pick].alloc = (struct sched_alloc){0};
    b->jr[pick].status = JS_DONE;
    return b->jobs[pick].id;
}

/* Fills the cluster (settled or not), ends one job a minute later, and times
 * the pass that follows, each run from a copy of the carried-over state. */
static void time_one_ends(struct bench *b, bool settle, const char *label)
{
    uint32_t runs = b->opt.runs;
    double *ms = xcalloc(runs, sizeof(*ms));
    struct sched_state carried;
    /* The controller's result, kept from pass to pass as the API intends: the
     * timed pass reuses what the passes before it left there. */
    struct sched_result res;
    sched_result_init(&res);
    ctl_fill(b, &carried, settle, &res);
    ctl_advance(b, b->now + ONE_ENDS_AFTER_MS);
    uint64_t ended = ctl_end_one(b);
    ctl_build(b);
    printf("%s: job %" PRIu64 " ended; running=%zu pending=%zu\n", label, ended, b->nrunning,
           b->nqueue);
    for (uint32_t k = 0; k < runs; k++) {
        struct sched_state st;
        state_copy(&st, &carried);
        check_pass(bench_timed_pass(b, &st, b->now, &res, &ms[k]), label);
        sched_state_release(&st);
    }
    char what[64];
    snprintf(what, sizeof(what), "%s_pass", label);
    print_result_counts(what, &res);
    struct stats s = stats_of(ms, runs);
    double dps = s.median > 0 ? (double)res.decisions / (s.median / 1e3) : 0;
    printf("%s_pass_ms median=%.3f min=%.3f max=%.3f runs=%u goal<10 %s (decisions/s=%.0f)\n",
           label, s.median, s.min, s.max, runs, s.median < 10 ? "MET" : "MISSED", dps);
    sched_result_release(&res);
    sched_state_release(&carried);
    ctl_release(b);
    free(ms);
}

/* Peak heap one pass allocates over what was in use before it, on a fresh
 * result and state (so the result's arrays count too). */
static size_t pass_peak_bytes(struct bench *b, struct sched_state *st, int64_t now,
                              size_t *ret_retained)
{
    struct sched_result res;
    sched_result_init(&res);
    size_t before;
    double ms;
    heap_mark(&before);
    check_pass(bench_timed_pass(b, st, now, &res, &ms), "memory pass");
    size_t peak = heap_peak_now() - before;
    *ret_retained = heap_in_use() - before;
    sched_result_release(&res);
    return peak;
}

static void case_memory(struct bench *b)
{
    if (!heap_counting()) {
        printf("bytes_per_pending_job not measured: malloc counting needs glibc and no "
               "sanitizer (see bench/meson.build)\n");
        return;
    }
    size_t queue_bytes = sizeof(struct sched_job);
    size_t retained;

    reset_empty(b);
    struct sched_state st;
    sched_state_init(&st);
    size_t n_full = b->nqueue;
    size_t peak_full = pass_peak_bytes(b, &st, NOW0_MS, &retained);
    size_t kept_full = retained;
    sched_state_release(&st);

    struct sched_state carried;
    struct sched_result fill_res;
    sched_result_init(&fill_res);
    ctl_fill(b, &carried, false, &fill_res);
    sched_result_release(&fill_res);
    ctl_advance(b, b->now + ONE_ENDS_AFTER_MS);
    ctl_end_one(b);
    ctl_build(b);
    size_t n_one = b->nqueue, n_run = b->nrunning;
    size_t peak_one = pass_peak_bytes(b, &carried, b->now, &retained);
    sched_state_release(&carried);
    ctl_release(b);

    double per_full = (double)peak_full / (double)n_full;
    double per_one = (double)peak_one / (double)n_one;
    double worst = per_full > per_one ? per_full : per_one;
    printf("memory full_pass: pending=%zu pass_peak_bytes=%zu (%.1f/job) "
           "kept_after_pass=%zu (result+state)\n",
           n_full, peak_full, per_full, kept_full);
    printf("memory one_ends_pass: pending=%zu running=%zu pass_peak_bytes=%zu (%.1f/job) "
           "kept_after_pass=%zu\n",
           n_one, n_run, peak_one, per_one, retained);
    double total = (double)queue_bytes + worst;
    printf("bytes_per_pending_job=%.0f (queue sizeof(struct sched_job)=%zu + pass peak %.0f) "
           "goal<=1024 %s\n",
           total, queue_bytes, worst, total <= 1024 ? "MET" : "MISSED");
}

int main(int argc, char **argv)
{
    struct bench b;
    memset(&b, 0, sizeof(b));
    setvbuf(stdout, NULL, _IOLBF, 0); /* each figure as it comes, also into a pipe */
    int r = parse_opts(argc, argv, &b.opt);
    if (r)
        return r > 0 ? 0 : 2;
    build_cluster(&b);
    build_jobs(&b);
    const char *why;
    if (sched_cluster_check(&b.c, &why)) {
        fprintf(stderr, "bench_sched: invalid cluster: %s\n", why);
        return 1;
    }
    printf("bench_sched: nodes=%u gpus=%u (H100-80GB, 8/node) pools=%d teams=%d classes=%d "
           "pending=%zu runs=%u seed=%" PRIu64 "\n",
           b.c.nnodes, b.c.ngpus, NPOOLS, NTEAMS, NCLASSES, b.njobs, b.opt.runs, b.opt.seed);
    printf("policy: order=%s packing=%s backfill=%s preemption=%s (sched_policy_default)\n",
           sched_order_name(b.pol.order), sched_packing_name(b.pol.packing),
           b.pol.backfill ? "on" : "off", b.pol.preemption ? "on" : "off");
    if (b.opt.mig)
        printf("mig: serve pool in MIG mode (all-balanced), fractions as 2g.20gb / 3g.40gb\n");

    /* A missed goal is a result, printed as such, not a failure of the program. */
    if (b.opt.cases & CASE_FULL)
        case_full(&b);
    /* "Cluster full, one job ends": right after the first fill (the pass that
     * follows also plans the reclaims the fill made due), and once the
     * controller has settled (only the ended job's GPU is new). */
    if (b.opt.cases & CASE_ONE_ENDS_FIRST)
        time_one_ends(&b, false, "one_ends");
    if (b.opt.cases & CASE_ONE_ENDS_SETTLED)
        time_one_ends(&b, true, "one_ends_settled");
    if (b.opt.cases & CASE_MEMORY)
        case_memory(&b);

    free(b.jobs);
    free(b.queue);
    free(b.running);
    free(b.nodes);
    free(b.gpus);
    free(b.names);
    return 0;
}

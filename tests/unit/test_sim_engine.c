/* test_sim_engine.c - the simulator's event loop on small cases whose answers
 * were worked out by hand: strict FIFO against the SJF oracle, head-of-line
 * blocking, a reclaim with its grace period and restart penalty, jobs that
 * can never run, queues no team takes, and the figures computed from it all.
 * Traces and specs are built in memory, so only the engine is under test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "sim/engine.h"
#include "sim/stats.h"

/* ---- building inputs ---- */

#define MAX_JOBS    64
#define RANDOM_JOBS 16 /* jobs per random workload, but below */

struct world {
    struct sim_trace trace;
    struct sim_trace_job jobs[MAX_JOBS];
    char *queues[4];
    struct sim_spec spec;
    struct sim_spec_pool pool;
    struct sim_spec_team teams[2];
    char *team_queues[2][1];
    struct sim_spec_quota quotas[2];
};

/* One pool of `nodes` nodes with `gpus` GPUs each; teams "a" (queue "qa")
 * and "b" (queue "qb"), no guarantees, no borrowing limits. */
static void world_init(struct world *w, uint32_t nodes, uint32_t gpus)
{
    memset(w, 0, sizeof(*w));
    w->queues[0] = "qa";
    w->queues[1] = "qb";
    w->queues[2] = "nobody";
    w->trace.jobs = w->jobs;
    w->trace.queues = w->queues;
    w->trace.nqueues = 3;
    w->pool = (struct sim_spec_pool){.name = "p",
                                     .nodes = nodes,
                                     .gpus_per_node = gpus,
                                     .gpu_type = "GPU",
                                     .gpu_mem_mib = 81920,
                                     .cpus = 64,
                                     .mem_mib = 512 * 1024,
                                     .nvlink = true};
    const char *names[2] = {"a", "b"};
    for (int t = 0; t < 2; t++) {
        w->team_queues[t][0] = w->queues[t];
        w->teams[t] = (struct sim_spec_team){.name = (char *)names[t],
                                             .weight = 1,
                                             .queues = w->team_queues[t],
                                             .nqueues = 1,
                                             .borrow_limit_milli = -1,
                                             .pool = SIM_NONE};
    }
    w->spec = (struct sim_spec){
        .pools = &w->pool, .npools = 1, .teams = w->teams, .nteams = 2, .unmapped_team = SIM_NONE};
}

static void add_job(struct world *w, const char *id, int64_t submit, int64_t duration,
                    int64_t gpu_milli, uint32_t queue)
{
    assert_true(w->trace.njobs < MAX_JOBS);
    w->jobs[w->trace.njobs] = (struct sim_trace_job){.id = id,
                                                     .submit_s = submit,
                                                     .duration_s = duration,
                                                     .gpu_milli = gpu_milli,
                                                     .queue = queue,
                                                     .gpu_type = SIM_NONE,
                                                     .line = (uint32_t)w->trace.njobs + 2};
    w->trace.njobs++;
}

static void run_policy(const struct world *w, const struct sim_policy *pol,
                       const struct sim_opts *opts, struct sim_result *r)
{
    char err[256] = "";
    sim_result_init(r);
    int e = sim_run(&w->trace, &w->spec, pol, opts, r, err, sizeof(err));
    if (e)
        fail_msg("sim_run(%s): %d: %s", pol->name, e, err);
}

/* LAS thresholds the random workloads' jobs (1-300 s) cross: one and five
 * GPU-minutes. */
static void low_las_thresholds(struct sim_policy *pol)
{
    pol->core.nlas_thresholds = 2;
    pol->core.las_thresholds_gpu_ms[0] = 60 * 1000;
    pol->core.las_thresholds_gpu_ms[1] = 300 * 1000;
}

static void run(const struct world *w, const char *policy, int64_t penalty, struct sim_result *r)
{
    struct sim_policy pol;
    assert_int_equal(sim_policy_find(policy, &pol), 0);
    struct sim_opts opts = {.restart_penalty_s = penalty};
    run_policy(w, &pol, &opts, r);
}

static const struct sim_job_result *job(const struct sim_result *r, size_t k)
{
    assert_true(k < r->njobs);
    return &r->jobs[k];
}

/* ---- cases ---- */

/* One GPU. a: t=0 for 100 s; b: t=1 for 10 s; c: t=2 for 1 s.
 * FIFO: a 0-100, b 100-110, c 110-111: JCTs 100, 109, 109.
 * SJF:  a 0-100 (alone at t=0), then c 100-101, b 101-111: JCTs 100, 110, 99. */
static void test_fifo_against_sjf(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 1, 1);
    add_job(&w, "a", 0, 100, 1000, 0);
    add_job(&w, "b", 1, 10, 1000, 0);
    add_job(&w, "c", 2, 1, 1000, 0);
    struct sim_result r;
    run(&w, "fifo", 0, &r);
    const int64_t fifo_end[] = {100, 110, 111}, fifo_start[] = {0, 100, 110};
    for (size_t k = 0; k < 3; k++) {
        assert_int_equal(job(&r, k)->first_start_s, fifo_start[k]);
        assert_int_equal(job(&r, k)->end_s, fifo_end[k]);
        assert_int_equal(job(&r, k)->preemptions, 0);
    }
    struct sim_summary s;
    assert_int_equal(sim_summary_compute(&r, "fifo", &s), 0);
    assert_int_equal(s.ended, 3);
    assert_true(s.jct_avg_s > 105.99 && s.jct_avg_s < 106.01); /* (100 + 109 + 109) / 3 */
    assert_true(s.wait_avg_s > 68.99 && s.wait_avg_s < 69.01); /* (0 + 99 + 108) / 3 */
    assert_int_equal((int64_t)s.makespan_s, 111);
    assert_int_equal((int64_t)s.jct_p50_s, 109);
    /* Busy from 0 to the last submit (t=2): utilization 1. */
    assert_true(s.gpu_utilization > 0.999 && s.gpu_utilization < 1.001);
    sim_summary_release(&s);
    sim_result_release(&r);

    run(&w, "sjf", 0, &r);
    const int64_t sjf_end[] = {100, 111, 101};
    for (size_t k = 0; k < 3; k++)
        assert_int_equal(job(&r, k)->end_s, sjf_end[k]);
    assert_int_equal(sim_summary_compute(&r, "sjf", &s), 0);
    assert_true(s.jct_avg_s > 102.99 && s.jct_avg_s < 103.01); /* (100 + 110 + 99) / 3 */
    sim_summary_release(&s);
    sim_result_release(&r);
}

/* One node of 2 GPUs. a: t=0, 1 GPU for 100 s; b: t=1, 2 GPUs for 10 s;
 * c: t=2, 1 GPU for 50 s. Strict FIFO: c may not pass b, though a GPU is
 * free: a 0-100, b 100-110, c 110-160. */
static void test_strict_fifo_blocks_the_line(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 1, 2);
    add_job(&w, "a", 0, 100, 1000, 0);
    add_job(&w, "b", 1, 10, 2000, 0);
    add_job(&w, "c", 2, 50, 1000, 0);
    struct sim_result r;
    run(&w, "fifo", 0, &r);
    assert_int_equal(job(&r, 1)->first_start_s, 100);
    assert_int_equal(job(&r, 2)->first_start_s, 110);
    assert_int_equal(job(&r, 2)->end_s, 160);
    sim_result_release(&r);
    /* Backfill does not let c pass either: with no history, every estimate is
     * the policy's day, and c's day would outlast a's, delaying b. */
    run(&w, "fifo-backfill", 0, &r);
    assert_int_equal(job(&r, 1)->first_start_s, 100);
    assert_int_equal(job(&r, 2)->first_start_s, 110);
    sim_result_release(&r);
    /* The SJF oracle plans with true durations. b (2 GPUs) is reserved for
     * a's true end at 100; c (50 s) ends at 52 before that, so it backfills at
     * once. d (1 s, t=3) ranks first but finds no GPU, holds the pool's
     * reservation for c's end, and runs 52-53; b still starts at 100. */
    add_job(&w, "d", 3, 1, 1000, 0);
    run(&w, "sjf", 0, &r);
    assert_int_equal(job(&r, 2)->first_start_s, 2);
    assert_int_equal(job(&r, 2)->end_s, 52);
    assert_int_equal(job(&r, 3)->first_start_s, 52);
    assert_int_equal(job(&r, 3)->end_s, 53);
    assert_int_equal(job(&r, 1)->first_start_s, 100);
    sim_result_release(&r);
}

/* One GPU. Team a (no guarantee) borrows it from t=0 for 100 s of work; team
 * b, guaranteed the GPU, submits 20 s of work at t=10. The default policy
 * reclaims: a gets 30 s of grace (it runs until t=40, 40 s done), b runs
 * 40-60, a restarts at 60, pays a 5 s penalty and does its last 60 s: ends at
 * 125 having held the GPU 105 s. */
static void test_reclaim_with_grace_and_restart_penalty(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 1, 1);
    w.quotas[0] =
        (struct sim_spec_quota){.pool = 0, .guaranteed_milli = 1000, .borrow_limit_milli = -1};
    w.teams[1].quotas = &w.quotas[0];
    w.teams[1].nquotas = 1;
    add_job(&w, "a", 0, 100, 1000, 0);
    add_job(&w, "b", 10, 20, 1000, 1);
    struct sim_result r;
    run(&w, "default", 5, &r);
    const struct sim_job_result *a = job(&r, 0), *b = job(&r, 1);
    assert_int_equal(a->first_start_s, 0);
    assert_int_equal(a->preemptions, 1);
    assert_int_equal(b->first_start_s, 40);
    assert_int_equal(b->end_s, 60);
    assert_int_equal(a->end_s, 125);
    assert_int_equal(a->running_s, 105);
    assert_int_equal(r.preemptions, 1);
    /* Useful GPU-time: 100 + 20 s, the penalty not counted. */
    assert_true(r.useful_gpu_s > 119.99 && r.useful_gpu_s < 120.01);
    struct sim_summary s;
    assert_int_equal(sim_summary_compute(&r, "default", &s), 0);
    assert_true(s.wait_avg_s > 24.99 && s.wait_avg_s < 25.01); /* a 20, b 30 */
    assert_int_equal(s.preemptions, 1);
    sim_summary_release(&s);
    sim_result_release(&r);
    /* Strict FIFO never preempts: b waits for a. */
    run(&w, "fifo", 5, &r);
    assert_int_equal(job(&r, 1)->first_start_s, 100);
    assert_int_equal(r.preemptions, 0);
    sim_result_release(&r);
}

/* A job larger than the cluster is reported with its reason, never run; a
 * job of a queue no team takes is dropped and counted. */
static void test_unschedulable_and_dropped(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 2, 2);
    add_job(&w, "ok", 0, 10, 1000, 0);
    add_job(&w, "huge", 1, 10, 8000, 1);
    add_job(&w, "orphan", 2, 10, 1000, 2);
    add_job(&w, "frac", 3, 10, 250, 0);
    struct sim_result r;
    run(&w, "default", 0, &r);
    assert_int_equal(r.njobs, 3);
    assert_int_equal(r.ndropped, 1);
    assert_false(job(&r, 0)->unschedulable);
    assert_true(job(&r, 1)->unschedulable);
    assert_int_equal(job(&r, 1)->reason, SCHED_REASON_GANG_TOO_LARGE);
    assert_int_equal(job(&r, 1)->end_s, -1);
    assert_int_equal(job(&r, 2)->end_s, 13); /* the fraction, on the GPU beside "ok" */
    struct sim_summary s;
    assert_int_equal(sim_summary_compute(&r, "default", &s), 0);
    assert_int_equal(s.unschedulable, 1);
    assert_int_equal(s.reasons[SCHED_REASON_GANG_TOO_LARGE], 1);
    assert_int_equal(s.dropped, 1);
    assert_int_equal(s.ended, 2);
    sim_summary_release(&s);
    sim_result_release(&r);
}

/* Two teams on 4 GPUs, each with 4 one-GPU jobs of 100 s at t=0: fair share
 * serves both alike, and Jain's index over what each got of its demand is 1. */
static void test_fair_share_is_fair(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 1, 4);
    static const char *ids[8] = {"a0", "a1", "a2", "a3", "b0", "b1", "b2", "b3"};
    for (uint32_t k = 0; k < 8; k++)
        add_job(&w, ids[k], 0, 100, 1000, k / 4);
    add_job(&w, "last", 50, 1, 1000, 0); /* the window: 0 to 50 */
    struct sim_result r;
    run(&w, "default", 0, &r);
    struct sim_summary s;
    assert_int_equal(sim_summary_compute(&r, "default", &s), 0);
    assert_true(s.team_share[0] > 0.49 && s.team_share[0] < 0.51);
    assert_true(s.jain_fairness > 0.999);
    sim_summary_release(&s);
    sim_result_release(&r);
    /* FIFO hands the GPUs to the lower ids: team a first. */
    run(&w, "fifo", 0, &r);
    assert_int_equal(sim_summary_compute(&r, "fifo", &s), 0);
    assert_true(s.team_share[0] > 0.99);
    assert_true(s.jain_fairness < 0.51); /* one team got all, the other none: 1/2 */
    sim_summary_release(&s);
    sim_result_release(&r);
}

/* A team given a pool runs only there: with a second, idle pool, its second
 * job still waits for the first's node; the other team's job may go anywhere. */
static void test_team_pinned_to_its_pool(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 1, 1);
    struct sim_spec_pool pools[2] = {w.pool, w.pool};
    pools[1].name = "q";
    w.spec.pools = pools;
    w.spec.npools = 2;
    w.teams[0].pool = 0;
    add_job(&w, "a1", 0, 100, 1000, 0);
    add_job(&w, "a2", 1, 100, 1000, 0);
    add_job(&w, "b1", 2, 100, 1000, 1);
    struct sim_result r;
    run(&w, "default", 0, &r);
    assert_int_equal(job(&r, 1)->first_start_s, 100); /* not on pool q's idle GPU */
    assert_string_equal(job(&r, 1)->placement, "p-0:1");
    assert_int_equal(job(&r, 2)->first_start_s, 2); /* team b: any pool */
    assert_string_equal(job(&r, 2)->placement, "q-0:1");
    sim_result_release(&r);
}

/* Fractions share a GPU before a fresh one opens (under either packing): two
 * halves fill one GPU (none left partly used); two 0.6 fractions cannot
 * share, and leave two GPUs 40 % stranded for the whole window. */
static void test_fragmented_gpus(void **state)
{
    (void)state;
    const int64_t sizes[2] = {500, 600};
    const double want[2] = {0, 2};
    const char *policies[2] = {"default", "spread"};
    for (int k = 0; k < 2; k++) {
        for (int p = 0; p < 2; p++) {
            struct world w;
            world_init(&w, 2, 1);
            add_job(&w, "f1", 0, 100, sizes[k], 0);
            add_job(&w, "f2", 0, 100, sizes[k], 0);
            add_job(&w, "end", 50, 1, 0, 0); /* the window: 0 to 50 */
            struct sim_result r;
            struct sim_summary s;
            run(&w, policies[p], 0, &r);
            assert_int_equal(sim_summary_compute(&r, policies[p], &s), 0);
            assert_true(s.fragmented_gpus > want[k] - 0.001 && s.fragmented_gpus < want[k] + 0.001);
            sim_summary_release(&s);
            sim_result_release(&r);
        }
    }
}

/* n random jobs (ids[k] their names) from the generator *x: bursts 0-31 s
 * apart, quarter GPUs to 8-GPU gangs, 1-300 s, either team. */
static void random_jobs(struct world *w, char (*ids)[8], int n, uint64_t *x)
{
    int64_t t = 0;
    for (int k = 0; k < n; k++) {
        *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
        snprintf(ids[k], sizeof(ids[k]), "j%d", k % 10000);
        t += (int64_t)(*x >> 59);
        int64_t size = (*x >> 20) % 8;
        int64_t milli = size == 0 ? 250 : size == 7 ? 8000 : 1000 * (size % 4 + 1);
        add_job(w, ids[k], t, (int64_t)(*x >> 40) % 300 + 1, milli, (uint32_t)(*x >> 33) % 2);
    }
}

/* Two replays of one workload gave the same schedule. */
static void assert_same_schedule(const struct sim_result *a, const struct sim_result *b, int round,
                                 const char *policy, const char *how)
{
    assert_int_equal(a->njobs, b->njobs);
    for (size_t k = 0; k < a->njobs; k++) {
        if (a->jobs[k].first_start_s != b->jobs[k].first_start_s ||
            a->jobs[k].end_s != b->jobs[k].end_s)
            fail_msg("round %d, %s, job %zu: %s gave start %lld end %lld against %lld %lld", round,
                     policy, k, how, (long long)a->jobs[k].first_start_s,
                     (long long)a->jobs[k].end_s, (long long)b->jobs[k].first_start_s,
                     (long long)b->jobs[k].end_s);
    }
    assert_int_equal(a->preemptions, b->preemptions);
}

/* Skipping the pass of a step where jobs only arrived and none could start
 * changes nothing: random workloads (two teams, one with a guarantee, whole
 * and fractional jobs, gangs) replayed both ways give the same schedule. */
static void test_skipped_passes_change_nothing(void **state)
{
    (void)state;
    static char ids[RANDOM_JOBS][8];
    uint64_t x = 12345;
    /* The last two with low LAS thresholds: a crossing is a pass of its own.
     * Only in the rounds without a guarantee: a pass may start a job that a
     * waiting job could evict once it runs (seen: a borrowed job another team
     * then reclaims; a job of a higher LAS queue, backfilled past a larger job
     * of a lower one), and the next pass does. When that next pass comes then
     * depends on which steps run one (docs/simulator.md). */
    const char *policies[] = {"default", "fifo", "fifo-backfill", "las",
                              "spread",  "sjf",  "default",       "las"};
    size_t nlow = 2, npol = sizeof(policies) / sizeof(policies[0]);
    uint64_t skipped = 0;
    for (int round = 0; round < 40; round++) {
        struct world w;
        world_init(&w, 3, 4);
        w.quotas[0] =
            (struct sim_spec_quota){.pool = 0, .guaranteed_milli = 4000, .borrow_limit_milli = -1};
        w.teams[1].quotas = &w.quotas[0];
        w.teams[1].nquotas = round % 2;
        random_jobs(&w, ids, RANDOM_JOBS, &x);
        for (size_t p = 0; p < npol; p++) {
            struct sim_opts skip = {.restart_penalty_s = 10}, every = skip;
            every.pass_every_step = true;
            struct sim_policy pol;
            assert_int_equal(sim_policy_find(policies[p], &pol), 0);
            if (p >= npol - nlow && round % 2)
                continue; /* see above */
            if (p >= npol - nlow)
                low_las_thresholds(&pol);
            struct sim_result a, b;
            run_policy(&w, &pol, &skip, &a);
            run_policy(&w, &pol, &every, &b);
            assert_true(a.passes <= b.passes);
            skipped += b.passes - a.passes;
            assert_same_schedule(&a, &b, round, policies[p],
                                 p >= npol - nlow ? "skipping passes (low thresholds)"
                                                  : "skipping passes");
            sim_result_release(&a);
            sim_result_release(&b);
        }
    }
    assert_true(skipped > 100); /* the rule was exercised */
}

/* The core stops ranking candidates once the rest of the queue is frozen
 * (sched.c, admit.c's shape_inert): when it checks must not change what
 * starts. Random workloads under LAS with low thresholds, so that jobs of
 * one shape sit in different LAS queues, replayed with a check after every
 * candidate and with none, give the same schedule. */
static void test_frozen_check_changes_nothing(void **state)
{
    (void)state;
    static char ids[MAX_JOBS][8];
    uint64_t x = 99;
    /* The last: las with las_evict_larger, whose victims do not shrink with size. */
    const char *policies[] = {"las", "default", "las"};
    uint64_t preemptions = 0;
    for (int round = 0; round < 24; round++) {
        struct world w;
        world_init(&w, 2, 8);
        random_jobs(&w, ids, MAX_JOBS, &x);
        for (size_t p = 0; p < sizeof(policies) / sizeof(policies[0]); p++) {
            struct sim_policy pol;
            assert_int_equal(sim_policy_find(policies[p], &pol), 0);
            low_las_thresholds(&pol);
            pol.core.las_evict_larger = p == 2;
            struct sim_opts opts = {.restart_penalty_s = 5};
            struct sim_result a, b;
            pol.core.frozen_check_every = 1;
            run_policy(&w, &pol, &opts, &a);
            pol.core.frozen_check_every = UINT32_MAX;
            run_policy(&w, &pol, &opts, &b);
            assert_same_schedule(&a, &b, round, policies[p], "checking every candidate");
            preemptions += a.preemptions;
            sim_result_release(&a);
            sim_result_release(&b);
        }
    }
    assert_true(preemptions > 100); /* LAS queues were exercised */
}

/* The same inputs, replayed twice, give the same results. */
static void test_same_inputs_same_results(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, 2, 4);
    static char ids[RANDOM_JOBS][8];
    uint64_t x = 7;
    for (int k = 0; k < RANDOM_JOBS; k++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        snprintf(ids[k], sizeof(ids[k]), "j%d", k);
        add_job(&w, ids[k], k * 5, (int64_t)(x >> 40) % 500 + 1,
                1000 * (int64_t)((x >> 20) % 4 + 1), (uint32_t)(x >> 60) % 2);
    }
    const char *policies[] = {"default", "fifo", "las", "sjf", "srtf"};
    for (size_t p = 0; p < sizeof(policies) / sizeof(policies[0]); p++) {
        struct sim_result r1, r2;
        run(&w, policies[p], 30, &r1);
        run(&w, policies[p], 30, &r2);
        assert_int_equal(r1.njobs, r2.njobs);
        for (size_t k = 0; k < r1.njobs; k++) {
            assert_int_equal(r1.jobs[k].first_start_s, r2.jobs[k].first_start_s);
            assert_int_equal(r1.jobs[k].end_s, r2.jobs[k].end_s);
            assert_int_equal(r1.jobs[k].preemptions, r2.jobs[k].preemptions);
            assert_true(r1.jobs[k].end_s >= 0);
            assert_true(r1.jobs[k].end_s >= r1.jobs[k].submit_s + r1.jobs[k].duration_s);
        }
        assert_int_equal(r1.preemptions, r2.preemptions);
        sim_result_release(&r1);
        sim_result_release(&r2);
    }
}

static void test_policy_names(void **state)
{
    (void)state;
    struct sim_policy p;
    size_t count = 0;
    for (const char *n; (n = sim_policy_name(count)); count++) {
        assert_int_equal(sim_policy_find(n, &p), 0);
        assert_string_equal(p.name, n);
    }
    assert_int_equal(count, 9);
    assert_int_equal(sim_policy_find("fifo", &p), 0);
    assert_false(p.core.backfill);
    assert_false(p.core.preemption);
    assert_int_equal(sim_policy_find("srtf", &p), 0);
    assert_int_equal(p.oracle, SIM_ORACLE_SRTF);
    assert_int_equal(sim_policy_find("nope", &p), GPO_ENOENT);
    assert_int_equal(sim_policy_find(NULL, &p), GPO_ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_against_sjf),
        cmocka_unit_test(test_strict_fifo_blocks_the_line),
        cmocka_unit_test(test_reclaim_with_grace_and_restart_penalty),
        cmocka_unit_test(test_unschedulable_and_dropped),
        cmocka_unit_test(test_fair_share_is_fair),
        cmocka_unit_test(test_team_pinned_to_its_pool),
        cmocka_unit_test(test_fragmented_gpus),
        cmocka_unit_test(test_skipped_passes_change_nothing),
        cmocka_unit_test(test_frozen_check_changes_nothing),
        cmocka_unit_test(test_same_inputs_same_results),
        cmocka_unit_test(test_policy_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

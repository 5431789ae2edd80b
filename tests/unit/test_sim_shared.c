/* test_sim_shared.c - serving and training on one cluster (serve_shared.h)
 * and the job replay's hooks it rests on (engine.h: extra jobs in the
 * "serving" class, GPUs held back for a split), on small cases worked out by
 * hand. Traces and specs are built in memory. */
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

#define MAX_JOBS 64

struct world {
    struct sim_trace trace;
    struct sim_trace_job jobs[MAX_JOBS];
    char *queues[2];
    struct sim_spec spec; /* parsed: heap-owned, as serve_shared expects */
};

/* A spec from YAML text; the trace's queue "qa" is team "a"'s. */
static void world_init(struct world *w, const char *yaml)
{
    memset(w, 0, sizeof(*w));
    w->queues[0] = "qa";
    w->trace.jobs = w->jobs;
    w->trace.queues = w->queues;
    w->trace.nqueues = 1;
    char err[256] = "";
    int e = sim_spec_parse(&w->spec, yaml, strlen(yaml), "test.yaml", err, sizeof(err));
    if (e)
        fail_msg("spec: %s", err);
}

static void world_release(struct world *w)
{
    sim_spec_release(&w->spec);
}

static void add_job(struct world *w, const char *id, int64_t submit, int64_t duration,
                    int64_t gpu_milli)
{
    assert_true(w->trace.njobs < MAX_JOBS);
    w->jobs[w->trace.njobs] = (struct sim_trace_job){.id = id,
                                                     .submit_s = submit,
                                                     .duration_s = duration,
                                                     .gpu_milli = gpu_milli,
                                                     .queue = 0,
                                                     .gpu_type = SIM_NONE,
                                                     .line = (uint32_t)w->trace.njobs + 2};
    w->trace.njobs++;
}

/* One pool p of `nodes` x `gpus`; team a (queue qa) with no guarantee and
 * team serving guaranteed the whole pool, as serve_shared adds it. */
static const char *spec_text(char *buf, size_t len, int nodes, int gpus, int a_guaranteed)
{
    snprintf(buf, len,
             "pools:\n"
             "  - {name: p, nodes: %d, gpus_per_node: %d}\n"
             "teams:\n"
             "  - name: a\n"
             "    queues: [qa]\n"
             "    quotas: [{pool: p, guaranteed_gpus: %d}]\n"
             "  - name: serving\n"
             "    quotas: [{pool: p, guaranteed_gpus: %d}]\n",
             nodes, gpus, a_guaranteed, nodes * gpus);
    return buf;
}

static int run_with(const struct world *w, const char *policy, const struct sim_opts *opts,
                    struct sim_result *r, char *err, size_t errlen)
{
    struct sim_policy pol;
    assert_int_equal(sim_policy_find(policy, &pol), 0);
    sim_result_init(r);
    return sim_run(&w->trace, &w->spec, &pol, opts, r, err, errlen);
}

static void run_ok(const struct world *w, const char *policy, const struct sim_opts *opts,
                   struct sim_result *r)
{
    char err[256] = "";
    int e = run_with(w, policy, opts, r, err, sizeof(err));
    if (e)
        fail_msg("sim_run(%s): %d: %s", policy, e, err);
}

/* ---- the job replay's hooks ---- */

/* One GPU. Training job a: t=0, 100 s. A replica asked at t=10 for 20 s.
 * default (preemption on): the replica's class evicts a, which has its 30 s
 * of grace (runs to t=40, 40 s done); the replica runs 40-60 (placement
 * delay 30 s); a restarts at 60, pays the 5 s penalty and its last 60 s:
 * ends at 125, JCT 125. fifo (no preemption): the replica waits for a's end
 * at 100 (delay 90 s). */
static void test_replica_preempts_training(void **state)
{
    (void)state;
    char buf[512];
    struct world w;
    world_init(&w, spec_text(buf, sizeof(buf), 1, 1, 0));
    add_job(&w, "a", 0, 100, 1000);
    const struct sim_extra_job rep = {.submit_ms = 10000, .duration_ms = 20000,
                                      .gpu_milli = 1000, .team = 1};
    struct sim_opts opts = {.restart_penalty_s = 5, .extra = &rep, .nextra = 1};
    struct sim_result r;
    run_ok(&w, "default", &opts, &r);
    assert_int_equal(r.njobs, 1);
    assert_int_equal(r.nextra, 1);
    const struct sim_job_result *a = &r.jobs[0], *x = &r.extra[0];
    assert_int_equal(a->preemptions, 1);
    assert_int_equal(a->end_s, 125);
    assert_int_equal(a->running_s, 105);
    assert_int_equal(x->first_start_ms, 40000);
    assert_int_equal(x->end_s, 60);
    assert_int_equal(x->preemptions, 0);
    assert_int_equal(r.preemptions, 1);
    /* The figures are the trace's: a's 100 GPU-s of work, not the replica's. */
    assert_true(r.useful_gpu_s > 99.99 && r.useful_gpu_s < 100.01);
    struct sim_summary s;
    assert_int_equal(sim_summary_compute(&r, "default", &s), 0);
    assert_int_equal(s.jobs, 1);
    assert_true(s.jct_avg_s > 124.99 && s.jct_avg_s < 125.01);
    sim_summary_release(&s);
    sim_result_release(&r);

    run_ok(&w, "fifo", &opts, &r);
    assert_int_equal(r.jobs[0].preemptions, 0);
    assert_int_equal(r.jobs[0].end_s, 100);
    assert_int_equal(r.extra[0].first_start_ms, 100000);
    sim_result_release(&r);
    world_release(&w);
}

/* One GPU. A replica holds it from t=0 for 50 s; training job b asks at
 * t=1. No rule lets training evict a replica: not the priority class (below
 * it), not LAS or migration (a replica is not checkpointable), not srtf's
 * classes (below serving's), not a reclaim (team a is guaranteed the GPU, but
 * the replica runs within serving's guarantee): b starts at 50 under each. */
static void test_training_never_preempts_a_replica(void **state)
{
    (void)state;
    char buf[512];
    struct world w;
    world_init(&w, spec_text(buf, sizeof(buf), 1, 1, 1));
    add_job(&w, "b", 1, 10, 1000);
    const struct sim_extra_job rep = {.submit_ms = 0, .duration_ms = 50000,
                                      .gpu_milli = 1000, .team = 1};
    struct sim_opts opts = {.extra = &rep, .nextra = 1};
    const char *pols[] = {"default", "las", "fairshare", "srtf", "sjf", "priority"};
    for (size_t k = 0; k < sizeof(pols) / sizeof(*pols); k++) {
        struct sim_result r;
        run_ok(&w, pols[k], &opts, &r);
        assert_int_equal(r.extra[0].first_start_ms, 0);
        assert_int_equal(r.extra[0].preemptions, 0);
        assert_int_equal(r.extra[0].end_s, 50);
        assert_int_equal(r.jobs[0].first_start_s, 50);
        assert_int_equal(r.jobs[0].end_s, 60);
        sim_result_release(&r);
    }
    world_release(&w);
}

/* Two nodes of 2 GPUs, the last 2 held back (node p-1): x, y, z of 1 GPU at
 * t=0 for 10 s: x and y on p-0 at once, z at 10 on p-0; a 3-GPU job never
 * runs. The cluster's GPUs count 2. */
static void test_held_gpus_take_no_job(void **state)
{
    (void)state;
    char buf[512];
    struct world w;
    world_init(&w, spec_text(buf, sizeof(buf), 2, 2, 0));
    add_job(&w, "x", 0, 10, 1000);
    add_job(&w, "y", 0, 10, 1000);
    add_job(&w, "z", 0, 10, 1000);
    add_job(&w, "big", 0, 10, 3000);
    const char *pols[] = {"default", "fifo", "srtf"};
    for (size_t k = 0; k < sizeof(pols) / sizeof(*pols); k++) {
        struct sim_opts opts = {.held_gpus = 2};
        struct sim_result r;
        run_ok(&w, pols[k], &opts, &r);
        assert_int_equal(r.total_gpus_milli, 2000);
        for (size_t j = 0; j < 3; j++) {
            assert_non_null(r.jobs[j].placement);
            assert_string_equal(r.jobs[j].placement, "p-0:1");
        }
        assert_int_equal(r.jobs[0].first_start_s, 0);
        assert_int_equal(r.jobs[1].first_start_s, 0);
        assert_int_equal(r.jobs[2].first_start_s, 10);
        assert_true(r.jobs[3].unschedulable);
        for (size_t i = 0; i < r.nsamples; i++)
            assert_true(r.samples[i].busy_milli <= 2000);
        sim_result_release(&r);
    }
    /* Held back: nothing else changes. Not held: z starts at once on p-1. */
    struct sim_opts none = {0};
    struct sim_result r;
    run_ok(&w, "default", &none, &r);
    assert_int_equal(r.total_gpus_milli, 4000);
    assert_int_equal(r.jobs[2].first_start_s, 0);
    assert_false(r.jobs[3].unschedulable);
    sim_result_release(&r);
    /* More held than there are. */
    struct sim_opts over = {.held_gpus = 5};
    char err[256] = "";
    assert_int_equal(run_with(&w, "default", &over, &r, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "5 GPUs held back from a cluster of 4"));
    world_release(&w);
}

/* Every bad extra job is an error naming the field. */
static void test_bad_extra_jobs(void **state)
{
    (void)state;
    char buf[512];
    struct world w;
    world_init(&w, spec_text(buf, sizeof(buf), 1, 2, 0));
    add_job(&w, "a", 0, 10, 1000);
    const struct {
        struct sim_extra_job x[2];
        const char *msg;
    } cases[] = {
        {{{0, 10, 1000, 1}, {0, 10, 1000, 2}}, "extra job 1: bad team"},
        {{{5, 10, 1000, 1}, {4, 10, 1000, 1}}, "extra job 1: bad submit_ms"},
        {{{-1, 10, 1000, 1}, {4, 10, 1000, 1}}, "extra job 0: bad submit_ms"},
        {{{0, -1, 1000, 1}, {4, 10, 1000, 1}}, "extra job 0: bad duration_ms"},
        {{{0, 10, 1500, 1}, {4, 10, 1000, 1}}, "extra job 0: bad gpu_milli"},
        {{{0, 10, 0, 1}, {4, 10, 1000, 1}}, "extra job 0: bad gpu_milli"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(*cases); k++) {
        struct sim_opts opts = {.extra = cases[k].x, .nextra = 2};
        struct sim_result r;
        char err[256] = "";
        assert_int_equal(run_with(&w, "default", &opts, &r, err, sizeof(err)), GPO_EINVAL);
        assert_string_equal(err, cases[k].msg);
    }
    world_release(&w);
}

/* A mixed workload: training jobs of 1-4 GPUs and replicas of 1 GPU on 2
 * nodes of 4. The same inputs give the same results; a pass at every step
 * gives the same as the skipped passes (engine.c's pass_needed with the
 * serving class). Every policy. */
static void test_same_inputs_same_results(void **state)
{
    (void)state;
    char buf[512];
    struct world w;
    world_init(&w, spec_text(buf, sizeof(buf), 2, 4, 0));
    uint32_t seed = 12345;
    static char ids[MAX_JOBS][8];
    int64_t t = 0;
    for (int k = 0; k < 40; k++) {
        seed = seed * 1103515245u + 12345u;
        t += (seed >> 8) % 20;
        snprintf(ids[k], sizeof(ids[k]), "j%d", k);
        add_job(&w, ids[k], t, 5 + (int64_t)((seed >> 12) % 200), 1000 * (1 + (seed >> 20) % 4));
    }
    struct sim_extra_job reps[12];
    for (int k = 0; k < 12; k++) {
        seed = seed * 1103515245u + 12345u;
        reps[k] = (struct sim_extra_job){.submit_ms = 30000LL * k + (seed >> 16) % 1000,
                                         .duration_ms = 10000 + (seed >> 8) % 90000,
                                         .gpu_milli = 1000,
                                         .team = 1};
    }
    for (size_t p = 0; sim_policy_name(p); p++) {
        struct sim_opts a = {.restart_penalty_s = 3, .extra = reps, .nextra = 12};
        struct sim_opts b = a, every = a;
        every.pass_every_step = true;
        struct sim_result ra, rb, re;
        run_ok(&w, sim_policy_name(p), &a, &ra);
        run_ok(&w, sim_policy_name(p), &b, &rb);
        run_ok(&w, sim_policy_name(p), &every, &re);
        for (size_t i = 0; i < ra.njobs + ra.nextra; i++) {
            const struct sim_job_result *x = &ra.jobs[i], *y = &rb.jobs[i], *z = &re.jobs[i];
            assert_int_equal(x->first_start_ms, y->first_start_ms);
            assert_int_equal(x->end_s, y->end_s);
            assert_int_equal(x->preemptions, y->preemptions);
            assert_int_equal(x->first_start_ms, z->first_start_ms);
            assert_int_equal(x->end_s, z->end_s);
            assert_int_equal(x->preemptions, z->preemptions);
            assert_true(x->end_s >= 0);
        }
        for (size_t i = 0; i < ra.nextra; i++)
            assert_int_equal(ra.extra[i].preemptions, 0);
        sim_result_release(&ra);
        sim_result_release(&rb);
        sim_result_release(&re);
    }
    world_release(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replica_preempts_training),
        cmocka_unit_test(test_training_never_preempts_a_replica),
        cmocka_unit_test(test_held_gpus_take_no_job),
        cmocka_unit_test(test_bad_extra_jobs),
        cmocka_unit_test(test_same_inputs_same_results),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

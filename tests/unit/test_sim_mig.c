/* test_sim_mig.c - the MIG replay (sim/mig_replay.h): the share-to-profile
 * rule on every type, layouts by name and by counts with their errors, and
 * 200 random workloads replayed under every mode, which must keep the
 * replay's invariants: every schedulable pod ends, none waits less than 0,
 * no more GPU-time is charged than the cluster has, a static layout of full
 * GPUs replays exactly as whole GPUs per pod, and the dynamic planner never
 * fails its own checks (a plan naming a busy instance, a plan that does not
 * apply). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "core/mig.h"
#include "sim/mig_replay.h"
#include "sim/trace.h"
#include "fixture.h"

static const char *profile_name(const struct mig_type *t, int64_t milli)
{
    int p = sim_mig_profile_for_share(t, milli);
    return p < 0 ? "?" : t->profiles[p].name;
}

static void test_share_to_profile(void **state)
{
    (void)state;
    const struct mig_type *h = mig_type_find("H100-80GB"), *a = mig_type_find("A100-40GB");
    const struct mig_type *g = mig_type_find("H200-141GB");
    assert_non_null(h);
    assert_non_null(a);
    assert_non_null(g);
    /* ceil(8 f) slots, the smallest profile of that size, fewest slices */
    assert_string_equal(profile_name(h, 1), "1g.10gb");
    assert_string_equal(profile_name(h, 125), "1g.10gb");
    assert_string_equal(profile_name(h, 126), "1g.20gb");
    assert_string_equal(profile_name(h, 250), "1g.20gb");
    assert_string_equal(profile_name(h, 251), "3g.40gb");
    assert_string_equal(profile_name(h, 460), "3g.40gb");
    assert_string_equal(profile_name(h, 500), "3g.40gb");
    assert_string_equal(profile_name(h, 501), "7g.80gb");
    assert_string_equal(profile_name(h, 1000), "7g.80gb");
    assert_string_equal(profile_name(h, 8000), "7g.80gb");
    assert_string_equal(profile_name(a, 100), "1g.5gb");
    assert_string_equal(profile_name(a, 200), "1g.10gb");
    assert_string_equal(profile_name(a, 460), "3g.20gb");
    assert_string_equal(profile_name(g, 460), "3g.71gb");
    assert_string_equal(profile_name(g, 900), "7g.141gb");
}

static void test_layouts(void **state)
{
    (void)state;
    const struct mig_type *h = mig_type_find("H100-80GB");
    struct sim_mig_layout l;
    char err[512];
    assert_int_equal(sim_mig_layout_parse(h, "all-balanced", &l, err, sizeof(err)), 0);
    assert_true(l.enabled);
    assert_int_equal(l.n, 4);
    assert_int_equal(sim_mig_layout_parse(h, "all-disabled", &l, err, sizeof(err)), 0);
    assert_false(l.enabled);
    assert_int_equal(sim_mig_layout_parse(h, "3g.40gb=1+1g.10gb=3", &l, err, sizeof(err)), 0);
    assert_int_equal(l.n, 4);
    for (unsigned k = 0; k < l.n; k++)
        assert_true(l.inst[k].idle_since_ms == INT64_MIN && !l.inst[k].busy);
    assert_int_equal(sim_mig_layout_parse(h, "all-9g.90gb", &l, err, sizeof(err)), GPO_ENOENT);
    assert_non_null(strstr(err, "all-balanced"));
    assert_int_equal(sim_mig_layout_parse(h, "3g.40gb=3", &l, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "layout '3g.40gb=3'"));
    assert_int_equal(sim_mig_layout_parse(h, "9g.1gb=1", &l, err, sizeof(err)), GPO_ENOENT);
    assert_non_null(strstr(err, "9g.1gb"));
    assert_int_equal(sim_mig_layout_parse(h, "3g.40gb", &l, err, sizeof(err)), GPO_ENOENT);
    assert_int_equal(sim_mig_layout_parse(h, "3g.40gb=x", &l, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "expected a count"));
    assert_int_equal(sim_mig_layout_parse(h, "1g.10gb=8", &l, err, sizeof(err)), GPO_EINVAL);
    assert_int_equal(sim_mig_layout_parse(h, "=1", &l, err, sizeof(err)), GPO_ENOENT);
}

/* A random trace of n pods: fractions of the shares the Alibaba trace has,
 * whole GPUs of 1, 2, 4 or 8 (or none when `no_gangs`), in submit order. */
static void random_trace(struct sim_trace *t, struct sim_trace_job *jobs, size_t n, uint64_t *rng,
                         bool no_gangs)
{
    static const int64_t fractions[] = {100, 200, 250, 300, 460, 500, 600, 800};
    static const int64_t wholes[] = {1000, 1000, 1000, 2000, 4000, 8000};
    int64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        at += (int64_t)(fx_rng_next(rng) % 120);
        uint64_t r = fx_rng_next(rng);
        int64_t milli = r % 2 ? fractions[r / 2 % 8] : wholes[r / 2 % (no_gangs ? 3 : 6)];
        jobs[i] = (struct sim_trace_job){.id = "j",
                                         .submit_s = at,
                                         .duration_s = (int64_t)(fx_rng_next(rng) % 900),
                                         .gpu_milli = milli,
                                         .gpu_type = SIM_NONE};
    }
    memset(t, 0, sizeof(*t));
    t->jobs = jobs;
    t->njobs = n;
}

static struct sim_mig_opts opts_for(enum sim_mig_mode mode, const struct mig_type *t,
                                    const char *layout)
{
    struct sim_mig_opts o = {.mode = mode,
                             .type = t,
                             .nodes = 2,
                             .gpus_per_node = 8,
                             .repartition_delay_ms = 5000,
                             .compress = 1,
                             .own_profile = mode == SIM_MIG_DYNAMIC,
                             .nsegs = 1};
    o.segs[0].gpus = 16;
    mig_plan_spec_default(&o.plan);
    char err[512];
    assert_int_equal(sim_mig_layout_parse(t, layout, &o.segs[0].layout, err, sizeof(err)), 0);
    return o;
}

static void check_result(const struct sim_mig_result *r, size_t n)
{
    assert_int_equal(r->jobs, n);
    assert_int_equal(r->stuck, 0);
    assert_true(r->wait_avg_s >= 0 && r->wait_p99_s >= 0);
    assert_true(r->jct_avg_s >= r->wait_avg_s);
    assert_true(r->busy_gpu_hours <= r->capacity_gpu_hours + 1e-9);
    assert_true(r->stranded_gpus >= 0 && r->stranded_gpus <= 16);
}

static void test_random_workloads(void **state)
{
    (void)state;
    const struct mig_type *h = mig_type_find("H100-80GB");
    struct sim_trace_job jobs[150];
    uint64_t rng = 2025;
    char err[512];
    for (int w = 0; w < 200; w++) {
        struct sim_trace t;
        bool no_gangs = w % 2 == 0;
        random_trace(&t, jobs, 150, &rng, no_gangs);
        struct sim_mig_opts o[] = {
            opts_for(SIM_MIG_EXCLUSIVE, h, "all-enabled"),
            opts_for(SIM_MIG_SHARED, h, "all-enabled"),
            opts_for(SIM_MIG_STATIC, h, "all-7g.80gb"),
            opts_for(SIM_MIG_STATIC, h, "all-balanced"),
            opts_for(SIM_MIG_DYNAMIC, h, "all-enabled"),
            opts_for(SIM_MIG_DYNAMIC, h, "all-7g.80gb"),
        };
        o[5].plan = (struct mig_plan_spec){0}; /* undamped: the most churn */
        o[5].repartition_delay_ms = (int64_t)(w % 3) * 1000;
        struct sim_mig_result r[6];
        for (size_t m = 0; m < 6; m++) {
            int e = sim_mig_run(&t, &o[m], &r[m], err, sizeof(err));
            if (e)
                fail_msg("workload %d mode %zu: %s", w, m, err);
            check_result(&r[m], 150);
        }
        /* whole GPUs per pod, with or without a layout of full GPUs: the same
         * schedule when no pod spans GPUs (with gangs, the node each takes
         * may differ: best fit against mig_place's lowest GPU) */
        if (no_gangs) {
            assert_true(r[0].jct_avg_s == r[2].jct_avg_s);
            assert_true(r[0].wait_p99_s == r[2].wait_p99_s);
        }
        assert_int_equal(r[0].unschedulable, 0);
        assert_int_equal(r[4].unschedulable, 0);
        assert_int_equal(r[3].unschedulable > 0, true); /* balanced has no 7g */
        assert_int_equal(r[2].repartitions + r[3].repartitions, 0);
        /* the same inputs, the same figures */
        struct sim_mig_result again;
        assert_int_equal(sim_mig_run(&t, &o[4], &again, err, sizeof(err)), 0);
        assert_memory_equal(&again, &r[4], sizeof(again));
    }
}

static void test_bad_options(void **state)
{
    (void)state;
    const struct mig_type *h = mig_type_find("H100-80GB");
    struct sim_trace_job jobs[4];
    uint64_t rng = 7;
    struct sim_trace t;
    random_trace(&t, jobs, 4, &rng, true);
    struct sim_mig_opts o = opts_for(SIM_MIG_SHARED, h, "all-enabled");
    struct sim_mig_result r;
    char err[128];
    o.nodes = 0;
    assert_int_equal(sim_mig_run(&t, &o, &r, err, sizeof(err)), GPO_EINVAL);
    o.nodes = 2;
    o.compress = 0;
    assert_int_equal(sim_mig_run(&t, &o, &r, err, sizeof(err)), GPO_EINVAL);
    o.compress = 1;
    o.gpus_per_node = SIM_MIG_MAX_GPUS_PER_NODE + 1;
    assert_int_equal(sim_mig_run(&t, &o, &r, err, sizeof(err)), GPO_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_share_to_profile),
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_random_workloads),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

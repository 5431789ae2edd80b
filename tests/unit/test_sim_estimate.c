/* test_sim_estimate.c - the simulator's time-limit estimate: the 90th
 * percentile of earlier durations of a job's team and size class (the top of
 * its bucket, at most 19 % above), then of all jobs, then none; and the
 * size classes that keep teams' small and large jobs apart. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/model.h"
#include "sim/estimate.h"

static void none_until_ten_jobs_finished(void **state)
{
    (void)state;
    struct sim_estimate e;
    assert_int_equal(sim_estimate_init(&e, 2), 0);
    for (int k = 0; k < SIM_ESTIMATE_MIN_COUNT - 1; k++) {
        sim_estimate_add(&e, 0, SCHED_MILLI, 100);
        assert_int_equal(sim_estimate_s(&e, 0, SCHED_MILLI), -1);
    }
    sim_estimate_add(&e, 0, SCHED_MILLI, 100);
    int64_t est = sim_estimate_s(&e, 0, SCHED_MILLI);
    assert_true(est >= 100 && est <= 119); /* the top of 100's bucket */
    sim_estimate_release(&e);
}

static void the_90th_percentile_of_the_team_and_size(void **state)
{
    (void)state;
    struct sim_estimate e;
    assert_int_equal(sim_estimate_init(&e, 2), 0);
    /* Team 0, one GPU: 1..100 s; the 90th of 100 values is 90 s. */
    for (int64_t d = 1; d <= 100; d++)
        sim_estimate_add(&e, 0, SCHED_MILLI, d);
    int64_t est = sim_estimate_s(&e, 0, SCHED_MILLI);
    assert_true(est >= 90 && est <= 107);
    /* 8-GPU jobs of team 0 and team 1's jobs have their own counts. */
    for (int k = 0; k < 20; k++)
        sim_estimate_add(&e, 1, SCHED_MILLI, 5);
    for (int k = 0; k < 10; k++)
        sim_estimate_add(&e, 0, 8 * SCHED_MILLI, 1000);
    est = sim_estimate_s(&e, 0, 8 * SCHED_MILLI);
    assert_true(est >= 1000 && est <= 1190);
    est = sim_estimate_s(&e, 1, SCHED_MILLI);
    assert_true(est >= 5 && est <= 6);
    /* 5 to 8 GPUs are one class. 9 GPUs are another, with too few finished:
     * all jobs' (130 durations: 20 of 5 s, 1..100 s, 10 of 1,000 s; the
     * 117th is 97 s). */
    assert_int_equal(sim_estimate_s(&e, 0, 5 * SCHED_MILLI),
                     sim_estimate_s(&e, 0, 8 * SCHED_MILLI));
    int64_t all = sim_estimate_s(&e, 0, 9 * SCHED_MILLI);
    assert_true(all >= 97 && all <= 116);
    assert_int_equal(sim_estimate_s(&e, 1, 8 * SCHED_MILLI), all);
    assert_int_equal(sim_estimate_s(&e, 0, 2 * SCHED_MILLI), all); /* not the 1-GPU class */
    assert_int_not_equal(all, sim_estimate_s(&e, 0, SCHED_MILLI));
    /* Fractions are a class of their own: none yet, so all jobs'; then their own. */
    assert_int_equal(sim_estimate_s(&e, 0, 500), all);
    for (int k = 0; k < 10; k++)
        sim_estimate_add(&e, 0, 500, 3);
    est = sim_estimate_s(&e, 0, 500);
    assert_true(est >= 3 && est <= 4);
    est = sim_estimate_s(&e, 0, SCHED_MILLI);
    assert_true(est >= 90 && est <= 107);
    sim_estimate_release(&e);
}

static void durations_out_of_range_stay_in_the_end_buckets(void **state)
{
    (void)state;
    struct sim_estimate e;
    assert_int_equal(sim_estimate_init(&e, 1), 0);
    for (int k = 0; k < 10; k++)
        sim_estimate_add(&e, 0, SCHED_MILLI, 0);
    assert_int_equal(sim_estimate_s(&e, 0, SCHED_MILLI),
                     2); /* [1 s, 2^(1/4) s): its top, rounded up */
    for (int k = 0; k < 100; k++)
        sim_estimate_add(&e, 0, SCHED_MILLI, INT64_MAX / 2);
    assert_true(sim_estimate_s(&e, 0, SCHED_MILLI) >= ((int64_t)1 << 39));
    sim_estimate_release(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(none_until_ten_jobs_finished),
        cmocka_unit_test(the_90th_percentile_of_the_team_and_size),
        cmocka_unit_test(durations_out_of_range_stay_in_the_end_buckets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_server_serve.c - the serving runtime's pure parts: the crash-loop
 * back-off, which replicas a reconcile starts and drains (scale up from
 * zero, scale down by fewest in flight, a roll with a surge of one), when a
 * drain is done, and a scaled-down kill's stored reason read back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "server/jobs/jobs.h"
#include "server/serve/serve.h"
#include "base/banned.h"

#define T0 1800000000000

static struct serve_replica rep(uint32_t n, uint64_t gen, enum serve_replica_state st,
                                uint32_t inflight)
{
    return (struct serve_replica){
        .job = 100 + n, .replica = n, .generation = gen, .state = st, .inflight = inflight};
}

static void plan(const struct serve_replica *v, size_t n, uint32_t submitting, int32_t desired,
                 uint64_t gen, bool hold, struct serve_plan *out, size_t *drain)
{
    *out = (struct serve_plan){.drain = drain};
    serve_plan_make(v, n, submitting, desired, gen, hold, out);
}

static void the_back_off_doubles_from_a_second_to_five_minutes(void **state)
{
    (void)state;
    assert_int_equal(serve_backoff_ms(0), 0);
    assert_int_equal(serve_backoff_ms(1), 1000);
    assert_int_equal(serve_backoff_ms(2), 2000);
    assert_int_equal(serve_backoff_ms(5), 16000);
    assert_int_equal(serve_backoff_ms(9), 256000);
    assert_int_equal(serve_backoff_ms(10), SERVE_BACKOFF_MAX_MS);
    assert_int_equal(serve_backoff_ms(4000000000u), SERVE_BACKOFF_MAX_MS);
}

static void a_service_at_zero_starts_what_it_is_asked_for(void **state)
{
    (void)state;
    struct serve_plan p;
    size_t drain[4];
    plan(NULL, 0, 0, 1, 1, false, &p, drain);
    assert_int_equal(p.start, 1);
    assert_int_equal(p.ndrain, 0);
    /* A submission on its way counts: no second replica for the same want. */
    plan(NULL, 0, 1, 1, 1, false, &p, drain);
    assert_int_equal(p.start, 0);
    /* The back-off holds new replicas. */
    plan(NULL, 0, 0, 3, 1, true, &p, drain);
    assert_int_equal(p.start, 0);
}

static void draining_and_failed_replicas_do_not_count(void **state)
{
    (void)state;
    struct serve_replica v[] = {rep(1, 1, SERVE_READY, 0), rep(2, 1, SERVE_DRAINING, 3),
                                rep(3, 1, SERVE_FAILED, 0)};
    struct serve_plan p;
    size_t drain[3];
    plan(v, 3, 0, 2, 1, false, &p, drain);
    assert_int_equal(p.start, 1);
    assert_int_equal(p.ndrain, 0);
}

static void scaling_down_drains_starting_then_the_fewest_in_flight(void **state)
{
    (void)state;
    struct serve_replica v[] = {rep(1, 1, SERVE_READY, 3), rep(2, 1, SERVE_READY, 1),
                                rep(3, 1, SERVE_READY, 2), rep(4, 1, SERVE_STARTING, 0)};
    struct serve_plan p;
    size_t drain[4];
    plan(v, 4, 0, 2, 1, false, &p, drain);
    assert_int_equal(p.start, 0);
    assert_int_equal(p.ndrain, 2);
    assert_int_equal(drain[0], 3); /* the one not serving yet */
    assert_int_equal(drain[1], 1); /* then the ready one with 1 in flight */
    plan(v, 4, 0, 0, 1, false, &p, drain);
    assert_int_equal(p.ndrain, 4);
}

static void a_roll_keeps_the_old_replicas_until_a_new_one_is_ready(void **state)
{
    (void)state;
    struct serve_plan p;
    size_t drain[4];
    /* Generation 2 arrives: one new replica beside both old ones. */
    struct serve_replica v[4] = {rep(1, 1, SERVE_READY, 0), rep(2, 1, SERVE_READY, 4)};
    plan(v, 2, 0, 2, 2, false, &p, drain);
    assert_int_equal(p.start, 1);
    assert_int_equal(p.ndrain, 0);
    /* It starts: nothing drains, nothing more starts. */
    v[2] = rep(3, 2, SERVE_STARTING, 0);
    plan(v, 3, 0, 2, 2, false, &p, drain);
    assert_int_equal(p.start, 0);
    assert_int_equal(p.ndrain, 0);
    /* It is ready: the old one with fewer in flight drains. */
    v[2].state = SERVE_READY;
    plan(v, 3, 0, 2, 2, false, &p, drain);
    assert_int_equal(p.start, 0);
    assert_int_equal(p.ndrain, 1);
    assert_int_equal(drain[0], 0);
    /* It drains: the next new one starts beside the last old one. */
    v[0].state = SERVE_DRAINING;
    plan(v, 3, 0, 2, 2, false, &p, drain);
    assert_int_equal(p.start, 1);
    assert_int_equal(p.ndrain, 0);
}

static void a_drain_ends_when_idle_after_a_tick_or_at_its_timeout(void **state)
{
    (void)state;
    struct serve_replica r = rep(1, 1, SERVE_DRAINING, 2);
    r.drain_ms = T0;
    assert_false(serve_drain_done(&r, T0 + 5000, 30000));
    assert_true(serve_drain_done(&r, T0 + 30000, 30000));
    r.inflight = 0;
    assert_false(serve_drain_done(&r, T0, 30000)); /* a router may not have seen it yet */
    assert_true(serve_drain_done(&r, T0 + SERVE_TICK_MS, 30000));
}

static void a_scaled_down_kill_reads_back_as_a_cancel(void **state)
{
    (void)state;
    const char *detail = NULL;
    assert_int_equal(attempt_kill_parse("cancelled: scaled down", &detail), KILL_CANCELLED);
    assert_string_equal(detail, ": scaled down");
    assert_int_equal(attempt_kill_parse("cancelled", &detail), KILL_CANCELLED);
    assert_null(detail);
    assert_int_equal(attempt_kill_parse("cancelledx", &detail), KILL_PREEMPTED);
    struct attempt a = {.n = 1, .start_ms = T0, .nparts = 0};
    assert_int_equal(attempt_kill(&a, KILL_CANCELLED, ": scaled down", 1000), 0);
    char buf[160];
    assert_string_equal(attempt_kill_reason(&a, buf, sizeof(buf)), "cancelled: scaled down");
    attempt_release(&a);
}

static void replica_states_have_one_name_each(void **state)
{
    (void)state;
    assert_string_equal(serve_replica_state_name(SERVE_STARTING), "starting");
    assert_string_equal(serve_replica_state_name(SERVE_READY), "ready");
    assert_string_equal(serve_replica_state_name(SERVE_DRAINING), "draining");
    assert_string_equal(serve_replica_state_name(SERVE_FAILED), "failed");
    assert_string_equal(serve_replica_state_name(SERVE_NSTATES), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_back_off_doubles_from_a_second_to_five_minutes),
        cmocka_unit_test(a_service_at_zero_starts_what_it_is_asked_for),
        cmocka_unit_test(draining_and_failed_replicas_do_not_count),
        cmocka_unit_test(scaling_down_drains_starting_then_the_fewest_in_flight),
        cmocka_unit_test(a_roll_keeps_the_old_replicas_until_a_new_one_is_ready),
        cmocka_unit_test(a_drain_ends_when_idle_after_a_tick_or_at_its_timeout),
        cmocka_unit_test(a_scaled_down_kill_reads_back_as_a_cancel),
        cmocka_unit_test(replica_states_have_one_name_each),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

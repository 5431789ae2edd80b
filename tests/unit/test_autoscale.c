/*
 * test_autoscale.c - the pure autoscaler (core/autoscale.h): golden cases
 * computed by hand (a burst enters panic, panic holds and ends, the scale to
 * zero waits the grace to the second, a cold start asks for one at once, rate
 * limits, min and max, the scale-down delay, the startup headroom and the
 * startup's rules (the delay at least two startups, one step down per
 * startup, panic waiting for the replicas starting, a backlog counted as
 * work), every
 * metric by the same rule, the reasons people read), and seeded random
 * streams under which the count stays in min..max and within the rate limits.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "core/autoscale.h"
#include "base/banned.h"

#define S 1000LL /* one second, ms */

/* A service under test: its spec, state and the replicas it has. With
 * `follow`, the replicas become what the last decision asked for (the
 * caller started or stopped them at once), as a closed loop. */
struct rig {
    struct autoscale_spec spec;
    struct autoscale_state st;
    struct autoscale_input in;
    struct autoscale_decision d;
    bool follow;
};

static struct rig *rig_new(void)
{
    struct rig *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    autoscale_spec_default(&r->spec);
    r->spec.max = 100;
    r->spec.scale_down_delay_ms = 0;
    r->spec.headroom = false;
    autoscale_state_init(&r->st, 0);
    r->in.spec = &r->spec;
    r->follow = true;
    return r;
}

/* Two rigs alike but for the GPU part: `rigs[0]` with the headroom (and the
 * startup's rules), `rigs[1]` without, both with a startup of startup_ms
 * measured. */
static void rigs_on_off(struct rig *rigs[2], int64_t startup_ms)
{
    for (int k = 0; k < 2; k++) {
        rigs[k] = rig_new();
        rigs[k]->spec.headroom = k == 0;
        autoscale_startup(&rigs[k]->st, startup_ms);
    }
}

/* The decision at t_ms (seconds' starts in these tests). */
static int32_t decide(struct rig *r, int64_t t_ms)
{
    r->in.now_ms = t_ms;
    autoscale_decide(&r->st, &r->in, &r->d);
    if (r->follow) {
        r->in.ready = r->d.desired;
        r->in.starting = 0;
    }
    return r->d.desired;
}

/* An observation of value_milli at t_ms, then a decision there. */
static int32_t step(struct rig *r, int64_t t_ms, int64_t value_milli)
{
    autoscale_observe(&r->st, t_ms, value_milli);
    return decide(r, t_ms);
}

/* One observation and decision per second over [from_s, to_s). */
static int32_t run(struct rig *r, int64_t from_s, int64_t to_s, int64_t value_milli)
{
    int32_t d = r->d.desired;
    for (int64_t s = from_s; s < to_s; s++)
        d = step(r, s * S, value_milli);
    return d;
}

static void test_metric_names_parse_and_print(void **state)
{
    (void)state;
    for (int m = 0; m < AUTOSCALE_NMETRICS; m++)
        assert_int_equal(autoscale_metric_parse(autoscale_metric_name((enum autoscale_metric)m)),
                         m);
    assert_string_equal(autoscale_metric_name(AUTOSCALE_METRIC_CONCURRENCY), "concurrency");
    assert_string_equal(autoscale_metric_name(AUTOSCALE_METRIC_RPS), "rps");
    assert_string_equal(autoscale_metric_name(AUTOSCALE_METRIC_REPLICA), "replica");
    assert_null(autoscale_metric_name(AUTOSCALE_NMETRICS));
    assert_int_equal(autoscale_metric_parse("foo"), GPO_EINVAL);
    assert_int_equal(autoscale_metric_parse("Concurrency"), GPO_EINVAL);
    assert_int_equal(autoscale_metric_parse(""), GPO_EINVAL);
    assert_int_equal(autoscale_metric_parse(NULL), GPO_EINVAL);
}

static void test_spec_defaults_are_the_documented_ones(void **state)
{
    (void)state;
    struct autoscale_spec s;
    memset(&s, 0x55, sizeof(s));
    autoscale_spec_default(&s);
    assert_int_equal(s.metric, AUTOSCALE_METRIC_CONCURRENCY);
    assert_int_equal(s.target_milli, 1000);
    assert_int_equal(s.min, 0);
    assert_int_equal(s.max, 1);
    assert_int_equal(s.stable_window_ms, 60 * S);
    assert_int_equal(s.panic_window_ms, 6 * S);
    assert_int_equal(s.panic_threshold_pct, 200);
    assert_int_equal(s.max_up_rate_pct, 1000);
    assert_int_equal(s.max_down_rate_pct, 200);
    assert_int_equal(s.scale_down_delay_ms, 30 * S);
    assert_int_equal(s.zero_grace_ms, 30 * S);
    assert_true(s.headroom);
}

/* Knative's windows average the seconds that have data: a second with no
 * report is missing, a report of 0 is data. */
static void test_missing_seconds_do_not_count_as_zero(void **state)
{
    (void)state;
    struct rig *r = rig_new();
    r->in.ready = 1;
    r->follow = false;
    autoscale_observe(&r->st, 0, 4000);
    assert_int_equal(decide(r, 50 * S), 4); /* one second of 4 in 60: the mean is 4 */
    assert_string_equal(r->d.reason, "1 -> 4: concurrency 4.0 over target 1 for 60 s");
    for (int64_t s = 1; s <= 3; s++)
        autoscale_observe(&r->st, s * S, 0);
    assert_int_equal(decide(r, 50 * S), 1); /* 4, 0, 0, 0: the mean is 1 */
    free(r);
}

static void test_observation_older_than_the_ring_is_ignored(void **state)
{
    (void)state;
    struct rig *r = rig_new();
    r->follow = false;
    r->in.ready = 2;
    int64_t now = (AUTOSCALE_BUCKETS + 10) * S;
    autoscale_observe(&r->st, now, 2000);
    autoscale_observe(&r->st, now - AUTOSCALE_BUCKETS * S, 90000); /* same slot, an hour older */
    assert_int_equal(decide(r, now), 2);
    free(r);
}

/* 1 request in flight for 70 s on one replica, then 10: the first second of
 * the burst lifts the panic window's mean to (5 * 1 + 10) / 6 = 2.5, which
 * wants 3 >= 200 % of 1 ready. */
static void test_burst_enters_panic_within_the_panic_window(void **state)
{
    (void)state;
    struct rig *r = rig_new();
    assert_int_equal(run(r, 0, 70, 1000), 1);
    assert_false(r->d.panic);
    assert_int_equal(step(r, 70 * S, 10000), 3);
    assert_true(r->d.panic);
    assert_string_equal(r->d.reason, "1 -> 3: concurrency 2.5 over target 1 for 6 s (panic)");
    /* Within the panic window the count reaches what the burst wants. */
    assert_int_equal(run(r, 71, 76, 10000), 10);
    assert_true(r->d.panic);
    free(r);
}

/* The same burst for 10 s, then back to 1: in panic the count never goes
 * down; it was triggered last at 70 s (later seconds want less than twice
 * the ready count), so it ends at 130 s and the stable window takes over:
 * seconds 71..130 hold 9 of 10 and 51 of 1, a mean of 2.35, so 3 are wanted
 * and the down rate (200 %: 10 -> 5) allows 5. */
static void test_no_scale_down_in_panic_and_leaving_it_after_the_stable_window(void **state)
{
    (void)state;
    struct rig *r = rig_new();
    run(r, 0, 70, 1000);
    assert_int_equal(run(r, 70, 80, 10000), 10);
    int32_t last = r->d.desired;
    for (int64_t s = 80; s < 130; s++) {
        int32_t d = step(r, s * S, 1000);
        assert_true(r->d.panic);
        assert_true(d >= last);
        last = d;
    }
    assert_int_equal(last, 10);
    assert_string_equal(r->d.reason, "10 -> 10: steady (concurrency 1.0, target 1, panic)");
    assert_int_equal(step(r, 130 * S, 1000), 5);
    assert_false(r->d.panic);
    assert_string_equal(r->d.reason,
                        "10 -> 5: concurrency 2.4 under target 1 for 60 s (rate limit)");
    free(r);
}

/* A panic that re-triggers is extended: the stable window counts from the
 * last trigger, not the first. A second of 20 on one ready replica keeps
 * the panic window over twice the ready count for 6 s: the burst at 10 s
 * triggers through 15 s (alone it would end at 75 s), the one at 50 s
 * through 55 s, so the panic ends at 115 s. */
static void test_panic_retriggered_is_extended(void **state)
{
    (void)state;
    struct rig *r = rig_new();
    r->follow = false;
    r->in.ready = 1;
    run(r, 0, 10, 1000);
    step(r, 10 * S, 20000);
    assert_true(r->d.panic);
    run(r, 11, 50, 1000);
    step(r, 50 * S, 20000);
    run(r, 51, 76, 1000);
    assert_true(r->d.panic);
    run(r, 76, 115, 1000);
    assert_true(r->d.panic);
    step(r, 115 * S, 1000);
    assert_false(r->d.panic);
    free(r);
}

/* Stable window 6 s, grace 30 s: the last request at 99 s; the replica is
 * kept through 128 s and let go at 129 s, not one second before. */
static void test_scale_to_zero_only_after_the_grace_with_no_request(void **state)
{
    (void)state;
    struct rig *r = rig_new();
    r->spec.stable_window_ms = 6 * S;
    assert_int_equal(run(r, 0, 100, 1000), 1);
    assert_int_equal(run(r, 100, 129, 0), 1);
    assert_string_equal(r->d.reason, "1 -> 1: no request for 29 s (grace 30 s)");
    assert_int_equal(step(r, 129 * S, 0), 0);
    assert_string_equal(r->d.reason, "1 -> 0: no request for 30 s");
    assert_int_equal(run(r, 130, 200, 0), 0);
    free(r);
}

/* A queued request also counts as a request: it restarts the grace. */
static void test_queued_request_restarts_the_grace(void **state)
{
    (void)state;
    struct rig *r = rig_new();
    r->spec.stable_window_ms = 6 * S;
    run(r, 0, 10, 1000);
    run(r, 10, 30, 0);
    r->in.queued = 1;
    assert_int_equal(step(r, 30 * S, 0), 1);
    r->in.queued = 0;
    assert_int_equal(run(r, 31, 60, 0), 1);
    assert_int_equal(step(r, 60 * S, 0), 0);
    free(r);
}

static void test_min_one_never_scales_to_zero(void **state)
{
    (void)state;
    struct rig *r = rig_new();
    r->spec.min = 1;
    r->spec.stable_window_ms = 6 * S;
    run(r, 0, 10, 3000);
    assert_int_equal(run(r, 10, 300, 0), 1);
    free(r);
}

/* At zero, with 0 observed for a long time (or nothing observed at all), a
 * request waiting at the router asks for one replica at once. */
static void test_queued_request_at_zero_gives_one_at_once(void **state)
{
    (void)state;
    struct rig *r = rig_new();
    assert_int_equal(run(r, 0, 200, 0), 0);
    r->in.queued = 1;
    assert_int_equal(step(r, 200 * S, 0), 1);
    assert_string_equal(r->d.reason, "0 -> 1: 1 request waiting (cold start)");

    struct rig *fresh = rig_new();
    fresh->in.queued = 3;
    assert_int_equal(decide(fresh, 5 * S), 1);
    assert_string_equal(fresh->d.reason, "0 -> 1: 3 requests waiting (cold start)");
    /* Starting replicas are capacity being added: no second one is asked. */
    fresh->follow = false;
    fresh->in.ready = 0;
    fresh->in.starting = 1;
    assert_int_equal(decide(fresh, 6 * S), 1);
    free(fresh);
    free(r);
}

/* Up: at most ceil(2 * 200 %) = 4 from 2 ready; down: at least
 * floor(10 * 100 / 200) = 5 from 10 ready. */
static void test_rate_limits_up_and_down(void **state)
{
    (void)state;
    struct rig *up = rig_new();
    up->follow = false;
    up->spec.max_up_rate_pct = 200;
    up->in.ready = 2;
    autoscale_observe(&up->st, 0, 20000);
    assert_int_equal(decide(up, 0), 4);
    assert_string_equal(up->d.reason,
                        "2 -> 4: concurrency 20.0 over target 1 for 6 s (panic, rate limit)");

    struct rig *down = rig_new();
    down->follow = false;
    down->spec.min = 1;
    down->spec.stable_window_ms = 6 * S;
    down->in.ready = 10;
    run(down, 0, 6, 0);
    assert_int_equal(down->d.desired, 5);
    down->in.ready = 5;
    assert_int_equal(step(down, 6 * S, 0), 2);
    down->in.ready = 2;
    assert_int_equal(step(down, 7 * S, 0), 1);
    free(down);
    free(up);
}

/* A rate of 100 % would freeze the count: one step either way still goes. */
static void test_rate_limits_of_100_pct_still_move_one_step(void **state)
{
    (void)state;
    struct rig *r = rig_new();
    r->spec.max_up_rate_pct = r->spec.max_down_rate_pct = 100;
    r->spec.panic_threshold_pct = 100000;
    r->spec.stable_window_ms = 6 * S;
    r->follow = false;
    r->in.ready = 4;
    autoscale_observe(&r->st, 0, 9000);
    assert_int_equal(decide(r, 0), 5);
    assert_string_equal(r->d.reason, "4 -> 5: concurrency 9.0 over target 1 for 6 s (rate limit)");
    run(r, 10, 16, 1000);
    assert_int_equal(r->d.desired, 3);
    free(r);
}

static void test_min_and_max_clamp(void **state)
{
    (void)state;
    struct rig *r = rig_new();
    r->spec.max = 3;
    r->follow = false;
    r->in.ready = 3;
    autoscale_observe(&r->st, 0, 50000);
    assert_int_equal(decide(r, 0), 3);
    assert_string_equal(r->d.reason, "3 -> 3: steady (concurrency 50.0, target 1, panic, max 3)");

    struct rig *m = rig_new();
    m->spec.min = 2;
    m->follow = false;
    autoscale_observe(&m->st, 0, 0);
    assert_int_equal(decide(m, 0), 2);
    assert_string_equal(m->d.reason, "0 -> 2: concurrency 0.0 over target 1 for 60 s (min 2)");
    free(m);
    free(r);
}

/* A delay of 20 s holds the highest want: 5 replicas at 5 in flight, then
 * 1; the stable window (6 s) still wants 5 in the first second of the drop
 * (t0) and 4 in the next, so 5 holds through t0 + 19 and 4 comes at t0 + 20. */
static void test_scale_down_delay_holds_the_peak(void **state)
{
    (void)state;
    struct rig *r = rig_new();
    r->spec.stable_window_ms = 6 * S;
    r->spec.panic_threshold_pct = 100000;
    r->spec.scale_down_delay_ms = 20 * S;
    assert_int_equal(run(r, 0, 10, 5000), 5);
    assert_int_equal(run(r, 10, 30, 1000), 5);
    assert_string_equal(r->d.reason,
                        "5 -> 5: steady (concurrency 1.0, target 1, scale-down delay)");
    assert_int_equal(step(r, 30 * S, 1000), 4);
    free(r);
}

/* The startup's rules on the way down, with the headroom on and a startup of
 * 20 s measured, the spec's delay 0: the delay is two startups, 40 s (as in
 * test_scale_down_delay_holds_the_peak, t0 = 10 s: 5 through 49 s, 4 at
 * 50 s), then one step down per startup: 4 holds through 69 s and the down
 * rate gives 2 at 70 s (from 4: at least 2); 2, the want recorded at 70 s,
 * holds its 40 s: 1 at 110 s. Without the headroom, Knative's course: 5, 4,
 * 3, 3, 2, 1 from 10 s. */
static void test_startup_holds_and_paces_the_scale_down(void **state)
{
    (void)state;
    struct rig *rigs[2];
    rigs_on_off(rigs, 20 * S);
    struct rig *on = rigs[0], *off = rigs[1];
    for (int k = 0; k < 2; k++) {
        rigs[k]->spec.stable_window_ms = 6 * S;
        rigs[k]->spec.panic_threshold_pct = 100000;
        assert_int_equal(run(rigs[k], 0, 10, 5000), 5);
    }
    assert_int_equal(run(on, 10, 50, 1000), 5);
    assert_string_equal(on->d.reason,
                        "5 -> 5: steady (concurrency 1.0, target 1, scale-down delay)");
    assert_int_equal(step(on, 50 * S, 1000), 4);
    assert_int_equal(run(on, 51, 70, 1000), 4);
    assert_string_equal(
        on->d.reason, "4 -> 4: steady (concurrency 1.0, target 1, one step down per 20 s startup)");
    assert_int_equal(step(on, 70 * S, 1000), 2);
    assert_int_equal(run(on, 71, 110, 1000), 2);
    assert_int_equal(step(on, 110 * S, 1000), 1);

    int32_t want[] = {5, 4, 3, 3, 2, 1};
    for (int64_t k = 0; k < 6; k++)
        assert_int_equal(step(off, (10 + k) * S, 1000), want[k]);
    free(on);
    free(off);
}

/* The backlog's rule never counts less than what is in flight at the
 * replicas: W measured at 0.5 s on short requests (2 in flight at 4 per
 * second), then 30 s of long ones, 10 in flight and 5 queued at 2 per
 * second. Over the stable window the concurrency is 8.5, the queue 2.5 and
 * the rate 3 per second: the arrivals' 3 * 0.5 = 1.5 would be 2 replicas
 * with 10 requests running; the replicas' 8.5 - 2.5 = 6.0 counts, plus
 * 2.5 * 0.5 / 60 for the queue: 7 replicas. */
static void test_backlog_never_counts_less_than_in_flight(void **state)
{
    (void)state;
    struct rig *rigs[2];
    rigs_on_off(rigs, 60 * S);
    struct rig *r = rigs[0];
    free(rigs[1]);
    r->follow = false;
    r->in.ready = 6;
    r->spec.panic_threshold_pct = 100000;
    for (int64_t s = 0; s < 60; s++) {
        autoscale_observe(&r->st, s * S, s < 30 ? 2000 : 15000);
        autoscale_observe_load(&r->st, s * S, s < 30 ? 4000 : 2000, s < 30 ? 0 : 5);
    }
    assert_int_equal(decide(r, 59 * S), 7);
    assert_string_equal(r->d.reason, "6 -> 7: concurrency 8.5 over target 1 for 60 s "
                                     "(queue counted as work 6.0)");
    free(r);
}

/* The pace holds the last decision's count, not ready plus starting: in a
 * roll the controller starts a surge replica of the new generation beside
 * the old one, which the autoscaler sees starting. One ready, one starting,
 * 1 in flight with a target of 1: the count stays 1 at every decision
 * (holding "ready + starting" would ask for 2, and the roll would surge
 * again on top of it). */
static void test_pace_holds_the_decision_not_a_surge_replica(void **state)
{
    (void)state;
    struct rig *rigs[2];
    rigs_on_off(rigs, 2 * S);
    struct rig *r = rigs[0];
    free(rigs[1]);
    r->follow = false;
    r->in.ready = 1;
    r->in.starting = 1;
    for (int64_t s = 0; s < 20; s++) {
        assert_int_equal(step(r, s * S, 1000), 1);
        assert_false(strstr(r->d.reason, "one step down") != NULL);
    }
    free(r);
}

/* A backlog counts as work: 30 s of 2 in flight at 4 requests per second
 * with no queue (Little's law: 0.5 s a request), then 30 s with 38 queued
 * besides (40 in flight, the same 4 per second). The stable window's
 * concurrency is 21 and would ask for 21 (the rate limit gives 20 of 2
 * ready); counted as work it is the arrivals' 4 * 0.5 = 2 in flight (as
 * many as at the replicas, 21 - 19) plus the mean queue's 19 finished
 * within the 60 s startup, 19 * 0.5 / 60 = 0.16: 2.2, 3 replicas. Without
 * load reports, the concurrency's 20. */
static void test_backlog_counts_as_work_not_concurrency(void **state)
{
    (void)state;
    struct rig *rigs[2];
    rigs_on_off(rigs, 60 * S);
    for (int k = 0; k < 2; k++) {
        rigs[k]->follow = false;
        rigs[k]->in.ready = 2;
        rigs[k]->spec.panic_threshold_pct = 100000;
        rigs[k]->spec.headroom = true;
        for (int64_t s = 0; s < 60; s++) {
            autoscale_observe(&rigs[k]->st, s * S, s < 30 ? 2000 : 40000);
            if (k == 0)
                autoscale_observe_load(&rigs[k]->st, s * S, 4000, s < 30 ? 0 : 38);
        }
    }
    assert_int_equal(decide(rigs[0], 59 * S), 3);
    assert_string_equal(rigs[0]->d.reason, "2 -> 3: concurrency 21.0 over target 1 for 60 s "
                                           "(queue counted as work 2.2)");
    assert_int_equal(decide(rigs[1], 59 * S), 20);
    free(rigs[0]);
    free(rigs[1]);
}

/* In panic, replicas that are starting have not had their effect yet: the
 * count grows only when the panic window wants the threshold (200 %) times
 * the ready and starting together. Panic window 1 s, a startup of 1 s
 * measured (too short a fit for any headroom): 8 in flight on 1 ready asks
 * for 8; with 7 of them starting, 12 asks for no more (12 < 2 * 8), 16 for
 * 16. Without the headroom, Knative's rule: 12 asks for 12. */
static void test_panic_waits_for_the_replicas_starting(void **state)
{
    (void)state;
    struct rig *rigs[2];
    rigs_on_off(rigs, 1 * S);
    struct rig *on = rigs[0], *off = rigs[1];
    for (int k = 0; k < 2; k++) {
        rigs[k]->follow = false;
        rigs[k]->spec.panic_window_ms = 1 * S;
        rigs[k]->spec.max_up_rate_pct = 10000;
        rigs[k]->in.ready = 1;
        assert_int_equal(step(rigs[k], 0, 8000), 8);
        assert_true(rigs[k]->d.panic);
        rigs[k]->in.starting = 7;
    }
    assert_int_equal(step(on, 1 * S, 12000), 8);
    assert_string_equal(on->d.reason, "8 -> 8: steady (concurrency 12.0, target 1, panic)");
    assert_int_equal(step(on, 2 * S, 16000), 16);
    assert_int_equal(step(on, 3 * S, 1000), 16); /* still no scale-down in panic */
    assert_true(on->d.panic);
    assert_int_equal(step(off, 1 * S, 12000), 12);
    free(on);
    free(off);
}

/* A ramp of +0.5 in flight per second from 0, a measured startup of 20 s:
 * at 29 s the stable mean is 7.25 and the panic window's slope 0.5/s, so
 * the headroom adds 0.5 * 20 = 10 to the value: 18 wanted, not 8. */
static void test_headroom_adds_replicas_for_a_growing_ramp(void **state)
{
    (void)state;
    struct rig *rigs[2];
    rigs_on_off(rigs, 20 * S);
    struct rig *on = rigs[0], *off = rigs[1];
    for (int k = 0; k < 2; k++) {
        rigs[k]->follow = false;
        rigs[k]->in.ready = 10;
        rigs[k]->spec.panic_threshold_pct = 100000;
        for (int64_t s = 0; s < 30; s++)
            autoscale_observe(&rigs[k]->st, s * S, 500 * s);
    }
    assert_int_equal(decide(on, 29 * S), 18);
    assert_string_equal(on->d.reason, "10 -> 18: concurrency 7.3 over target 1 for 60 s "
                                      "(headroom 10.0 for a 20 s startup)");
    assert_int_equal(decide(off, 29 * S), 8);
    assert_string_equal(off->d.reason, "10 -> 8: concurrency 7.3 under target 1 for 60 s");
    free(on);
    free(off);
}

static void test_no_headroom_for_flat_traffic_or_without_a_measured_startup(void **state)
{
    (void)state;
    struct rig *flat = rig_new(), *unmeasured = rig_new();
    flat->spec.headroom = unmeasured->spec.headroom = true;
    flat->spec.panic_threshold_pct = unmeasured->spec.panic_threshold_pct = 100000;
    autoscale_startup(&flat->st, 60 * S);
    for (int64_t s = 0; s < 30; s++) {
        autoscale_observe(&flat->st, s * S, 5000);
        autoscale_observe(&unmeasured->st, s * S, 500 * s);
    }
    flat->follow = unmeasured->follow = false;
    flat->in.ready = unmeasured->in.ready = 5;
    assert_int_equal(decide(flat, 29 * S), 5);
    assert_string_equal(flat->d.reason, "5 -> 5: steady (concurrency 5.0, target 1)");
    assert_int_equal(decide(unmeasured, 29 * S), 8);
    free(unmeasured);
    free(flat);
}

/* Noise is no trend: concurrency alternating 2 and 8 each second (a flat
 * mean of 5) with a measured startup of 60 s. A line through the panic
 * window's last 6 seconds (2, 8, 2, 8, 2, 8) rises 0.51 per second, which
 * over a 60 s startup would add 31 in flight: 36 replicas. The trend is
 * fitted over the startup's 60 s, where the slope is 0.003 per second and
 * far inside its standard error: no headroom, 5 replicas. */
static void test_no_headroom_for_noise_however_long_the_startup(void **state)
{
    (void)state;
    struct rig *r = rig_new();
    r->spec.headroom = true;
    r->spec.panic_threshold_pct = 100000;
    r->follow = false;
    r->in.ready = 5;
    autoscale_startup(&r->st, 60 * S);
    for (int64_t s = 0; s < 60; s++)
        autoscale_observe(&r->st, s * S, s % 2 ? 8000 : 2000);
    assert_int_equal(decide(r, 59 * S), 5);
    assert_string_equal(r->d.reason, "5 -> 5: steady (concurrency 5.0, target 1)");
    free(r);
}

/* The measured startup is a moving mean: the first is taken whole, later
 * ones move it by a share. */
static void test_startup_is_a_moving_mean(void **state)
{
    (void)state;
    struct autoscale_state *st = calloc(1, sizeof(*st));
    assert_non_null(st);
    autoscale_state_init(st, 0);
    autoscale_startup(st, 10 * S);
    assert_int_equal(st->startup_ms, 10 * S);
    autoscale_startup(st, 30 * S);
    assert_int_equal(st->startup_ms, 20 * S);
    autoscale_startup(st, -5); /* not a startup */
    assert_int_equal(st->startup_ms, 20 * S);
    for (int k = 0; k < 100; k++)
        autoscale_startup(st, 90 * S);
    assert_true(st->startup_ms > 89 * S && st->startup_ms <= 90 * S);
    free(st);
}

/* Requests per second and a replica's own metric scale by the same rule as
 * concurrency, and say which they are. */
static void test_rps_and_replica_metric_use_the_same_rule(void **state)
{
    (void)state;
    static const enum autoscale_metric metrics[] = {AUTOSCALE_METRIC_CONCURRENCY,
                                                    AUTOSCALE_METRIC_RPS, AUTOSCALE_METRIC_REPLICA};
    static const char *const reasons[] = {
        "2 -> 7: concurrency 12.5 over target 2 for 6 s (panic)",
        "2 -> 7: rps 12.5 over target 2 for 6 s (panic)",
        "2 -> 7: metric 12.5 over target 2 for 6 s (panic)",
    };
    for (int k = 0; k < 3; k++) {
        struct rig *r = rig_new();
        r->spec.metric = metrics[k];
        r->spec.target_milli = 2000;
        r->follow = false;
        r->in.ready = 2;
        for (int64_t s = 0; s < 6; s++)
            autoscale_observe(&r->st, s * S, 12500);
        assert_int_equal(decide(r, 5 * S), 7);
        assert_string_equal(r->d.reason, reasons[k]);
        free(r);
    }
}

/* The reasons people read in `service show`. */
static void test_reason_strings(void **state)
{
    (void)state;
    struct rig *r = rig_new();
    r->spec.target_milli = 2000;
    r->spec.max = 10;
    r->follow = false;
    r->in.ready = 2;
    r->in.starting = 1;
    for (int64_t s = 0; s < 6; s++)
        autoscale_observe(&r->st, s * S, 9600);
    decide(r, 5 * S);
    assert_string_equal(r->d.reason, "3 -> 5: concurrency 9.6 over target 2 for 6 s (panic)");
    free(r);

    r = rig_new();
    r->spec.target_milli = 2000;
    r->follow = false;
    r->in.ready = 5;
    run(r, 0, 60, 4100);
    assert_string_equal(r->d.reason, "5 -> 3: concurrency 4.1 under target 2 for 60 s");
    free(r);

    r = rig_new();
    r->follow = false;
    r->in.ready = 1;
    run(r, 0, 31, 0);
    assert_string_equal(r->d.reason, "1 -> 0: no request for 30 s");
    free(r);

    r = rig_new();
    r->in.queued = 1;
    decide(r, 0);
    assert_string_equal(r->d.reason, "0 -> 1: 1 request waiting (cold start)");
    free(r);

    r = rig_new();
    r->spec.target_milli = 2000;
    r->follow = false;
    r->in.ready = 2;
    run(r, 0, 10, 3900);
    assert_string_equal(r->d.reason, "2 -> 2: steady (concurrency 3.9, target 2)");
    r->spec.target_milli = 800;
    r->in.ready = 5;
    run(r, 10, 11, 3900);
    assert_string_equal(r->d.reason, "5 -> 5: steady (concurrency 3.9, target 0.8)");
    free(r);

    r = rig_new();
    r->follow = false;
    r->in.ready = 2;
    decide(r, 0);
    assert_int_equal(r->d.desired, 2);
    assert_string_equal(r->d.reason, "2 -> 2: steady (no observation for 60 s)");
    free(r);
}

/* ---- seeded random streams --------------------------------------------- */

static uint64_t next_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static int64_t pick(uint64_t *x, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(next_rand(x) % (uint64_t)(hi - lo + 1));
}

static void random_spec(uint64_t *x, struct autoscale_spec *s)
{
    autoscale_spec_default(s);
    s->metric = (enum autoscale_metric)pick(x, 0, AUTOSCALE_NMETRICS - 1);
    s->target_milli = pick(x, 100, 5000);
    s->max = (int32_t)pick(x, 1, 40);
    s->min = (int32_t)pick(x, 0, s->max < 3 ? s->max : 3);
    s->stable_window_ms = pick(x, 6, 120) * S;
    s->panic_window_ms = pick(x, 1, s->stable_window_ms / S) * S;
    s->panic_threshold_pct = (int32_t)pick(x, 101, 400);
    s->max_up_rate_pct = (int32_t)pick(x, 100, 2000);
    s->max_down_rate_pct = (int32_t)pick(x, 100, 400);
    s->scale_down_delay_ms = pick(x, 0, 90) * S;
    s->zero_grace_ms = pick(x, 0, 60) * S;
    s->headroom = pick(x, 0, 1);
}

/* One stream in a closed loop (the replicas become what was asked): the
 * count is in min..max, moves within the rate limits of the ready count
 * (or to min, or to the one a waiting request needs), and reaches 0 only a
 * whole grace after the last request. */
static void random_stream(uint64_t seed)
{
    uint64_t x = seed;
    struct rig *r = rig_new();
    random_spec(&x, &r->spec);
    const struct autoscale_spec *s = &r->spec;
    int64_t t = pick(&x, 0, 100000) * S, last_request = t;
    autoscale_state_init(&r->st, t);
    int64_t level = pick(&x, 0, 20000);
    for (int k = 0; k < 1500; k++) {
        t += pick(&x, 200, 3000);
        if (pick(&x, 0, 30) == 0)
            level = pick(&x, 0, 4) == 0 ? 0 : pick(&x, 0, 60000); /* a burst or a lull */
        if (pick(&x, 0, 500) == 0)
            autoscale_startup(&r->st, pick(&x, 1, 300) * S);
        if (pick(&x, 0, 9) > 0) {
            int64_t v = level ? level + pick(&x, -level / 4, level / 4) : 0;
            autoscale_observe(&r->st, t, v);
            if (v > 0)
                last_request = t;
        }
        r->in.queued = pick(&x, 0, 40) == 0 ? (int32_t)pick(&x, 1, 5) : 0;
        if (r->in.queued)
            last_request = t;
        if (pick(&x, 0, 1)) /* the backlog's rule: load reports in some streams' seconds */
            autoscale_observe_load(&r->st, t, pick(&x, 0, 20000), r->in.queued);
        int32_t ready = r->in.ready;
        int32_t d = decide(r, t);
        int64_t base = ready > 1 ? ready : 1;
        int64_t up = (base * s->max_up_rate_pct + 99) / 100;
        int64_t down = (int64_t)ready * 100 / s->max_down_rate_pct;
        up = up > ready ? up : ready + 1; /* one step either way at least */
        down = down < ready ? down : (ready > 0 ? ready - 1 : 0);
        int64_t hi = up > s->min ? up : s->min;
        int64_t lo = down < s->max ? down : s->max;
        if (d < s->min || d > s->max || d > hi || d < lo ||
            (d == 0 && ready > 0 && t - last_request < s->zero_grace_ms) ||
            (d == 0 && r->in.queued > 0))
            fail_msg("seed %#llx step %d t %lld: %d ready -> %d (%s)", (unsigned long long)seed, k,
                     (long long)t, ready, d, r->d.reason);
        assert_true(strlen(r->d.reason) > 0 && strlen(r->d.reason) < sizeof(r->d.reason));
    }
    free(r);
}

static void test_random_streams_stay_in_bounds_and_rate_limits(void **state)
{
    (void)state;
    for (uint64_t k = 1; k <= 60; k++)
        random_stream(0x9e3779b97f4a7c15ULL * k);
}

/* The state is a plain struct: a copy replays the same decisions. */
static void test_copied_state_replays_the_same_decisions(void **state)
{
    (void)state;
    struct rig *a = rig_new(), *b = calloc(1, sizeof(*b));
    assert_non_null(b);
    uint64_t x = 42;
    a->spec.max = 20;
    for (int64_t s = 0; s < 100; s++)
        step(a, s * S, pick(&x, 0, 9000));
    memcpy(b, a, sizeof(*a));
    b->in.spec = &b->spec;
    for (int64_t s = 100; s < 300; s++) {
        int64_t v = pick(&x, 0, 9000);
        assert_int_equal(step(a, s * S, v), step(b, s * S, v));
        assert_string_equal(a->d.reason, b->d.reason);
    }
    free(b);
    free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metric_names_parse_and_print),
        cmocka_unit_test(test_spec_defaults_are_the_documented_ones),
        cmocka_unit_test(test_missing_seconds_do_not_count_as_zero),
        cmocka_unit_test(test_observation_older_than_the_ring_is_ignored),
        cmocka_unit_test(test_burst_enters_panic_within_the_panic_window),
        cmocka_unit_test(test_no_scale_down_in_panic_and_leaving_it_after_the_stable_window),
        cmocka_unit_test(test_panic_retriggered_is_extended),
        cmocka_unit_test(test_scale_to_zero_only_after_the_grace_with_no_request),
        cmocka_unit_test(test_queued_request_restarts_the_grace),
        cmocka_unit_test(test_min_one_never_scales_to_zero),
        cmocka_unit_test(test_queued_request_at_zero_gives_one_at_once),
        cmocka_unit_test(test_rate_limits_up_and_down),
        cmocka_unit_test(test_rate_limits_of_100_pct_still_move_one_step),
        cmocka_unit_test(test_min_and_max_clamp),
        cmocka_unit_test(test_scale_down_delay_holds_the_peak),
        cmocka_unit_test(test_startup_holds_and_paces_the_scale_down),
        cmocka_unit_test(test_panic_waits_for_the_replicas_starting),
        cmocka_unit_test(test_pace_holds_the_decision_not_a_surge_replica),
        cmocka_unit_test(test_backlog_counts_as_work_not_concurrency),
        cmocka_unit_test(test_backlog_never_counts_less_than_in_flight),
        cmocka_unit_test(test_headroom_adds_replicas_for_a_growing_ramp),
        cmocka_unit_test(test_no_headroom_for_flat_traffic_or_without_a_measured_startup),
        cmocka_unit_test(test_no_headroom_for_noise_however_long_the_startup),
        cmocka_unit_test(test_startup_is_a_moving_mean),
        cmocka_unit_test(test_rps_and_replica_metric_use_the_same_rule),
        cmocka_unit_test(test_reason_strings),
        cmocka_unit_test(test_random_streams_stay_in_bounds_and_rate_limits),
        cmocka_unit_test(test_copied_state_replays_the_same_decisions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_agent_jobsignal.c - sbatch's --signal timer: due SECS before the
 * time limit, at once when the limit is closer, never without a time limit
 * or a signal, never again once sent (or journaled as sent). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>

#include <cmocka.h>

#include "agent/jobsignal.h"
#include "base/banned.h"

static void test_signal_is_due_its_seconds_before_the_time_limit(void **state)
{
    (void)state;
    struct proto_spec s = {
        .time_limit_s = 600, .signal = SIGUSR1, .signal_before_s = 90, .signal_batch_only = true};
    struct jobsignal js = {0};
    int64_t start = 1000000, limit = start + 600 * 1000;
    jobsignal_arm(&js, &s, limit);
    assert_int_equal(js.sig, SIGUSR1);
    assert_true(js.leader);
    assert_false(jobsignal_due(&js, start));
    assert_false(jobsignal_due(&js, limit - 90 * 1000 - 1));
    assert_true(jobsignal_due(&js, limit - 90 * 1000));
    assert_int_equal(jobsignal_next(&js, start, 1000), 1000);
    assert_int_equal(jobsignal_next(&js, limit - 90 * 1000 - 250, 1000), 250);
    assert_int_equal(jobsignal_next(&js, limit, 1000), 0);
}

static void test_signal_is_due_at_once_when_the_limit_is_closer(void **state)
{
    (void)state;
    struct proto_spec s = {.time_limit_s = 30, .signal = SIGUSR2, .signal_before_s = 60};
    struct jobsignal js = {0};
    jobsignal_arm(&js, &s, 5000 + 30 * 1000);
    assert_true(jobsignal_due(&js, 5000));
    assert_false(js.leader);
    /* On a clock that starts near 0, still armed. */
    struct jobsignal early = {0};
    jobsignal_arm(&early, &s, 10);
    assert_true(jobsignal_due(&early, 10));
}

static void test_no_signal_without_a_time_limit_a_signal_or_after_it_was_sent(void **state)
{
    (void)state;
    struct proto_spec no_limit = {.signal = SIGUSR1, .signal_before_s = 60};
    struct proto_spec no_signal = {.time_limit_s = 600};
    struct proto_spec both = {.time_limit_s = 600, .signal = SIGUSR1, .signal_before_s = 60};
    struct jobsignal a = {0}, b = {0}, sent = {.sent = true};
    jobsignal_arm(&a, &no_limit, 0);
    jobsignal_arm(&b, &no_signal, 600000);
    jobsignal_arm(&sent, &both, 600000);
    for (int64_t now = 0; now <= 1200000; now += 300000) {
        assert_false(jobsignal_due(&a, now));
        assert_false(jobsignal_due(&b, now));
        assert_false(jobsignal_due(&sent, now));
        assert_int_equal(jobsignal_next(&sent, now, 1000), 1000);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signal_is_due_its_seconds_before_the_time_limit),
        cmocka_unit_test(test_signal_is_due_at_once_when_the_limit_is_closer),
        cmocka_unit_test(test_no_signal_without_a_time_limit_a_signal_or_after_it_was_sent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_agent_replica.c - a serving replica's pure parts (agent/replica.h):
 * the readiness state machine (fast probes until the first success, then
 * the period; not ready after the threshold of failures in a row, ready
 * again on a success; expired at the startup timeout only when never
 * ready, once), the Prometheus text's metric summed over label sets (quoted
 * braces, other names with the same prefix, comments, timestamps,
 * unreadable values; none, and a sum that is not finite), an HTTP status
 * line whole or not, the replica's environment, a free port, and the
 * table's reports (owed until acknowledged, then only on a change; the
 * metric at most once a second). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/replica.h"
#include "base/banned.h"

static const struct proto_serve serve = {
    .service = "chat",
    .replica = 3,
    .generation = 1,
    .probe_path = "/health",
    .probe_period_ms = 1000,
    .probe_timeout_ms = 500,
    .probe_failures = 3,
    .startup_timeout_s = 60,
    .metric = "reqs",
};

static void test_probes_are_fast_until_ready_then_periodic(void **state)
{
    (void)state;
    struct replica_probe p;
    replica_probe_init(&p, &serve, 0, 5);
    assert_int_equal(p.next_ms, 5);
    for (int64_t t = 5; t < 100; t += 10) {
        assert_int_equal(replica_probe_result(&p, false, t), REPLICA_SAME);
        assert_int_equal(p.next_ms, t + REPLICA_FAST_MS);
        assert_false(p.ready);
    }
    assert_int_equal(replica_probe_result(&p, true, 100), REPLICA_READY);
    assert_true(p.ready && p.ever_ready);
    assert_int_equal(p.next_ms, 1100);
    assert_int_equal(replica_probe_result(&p, true, 1100), REPLICA_SAME);
    /* failures after ready wait the period too */
    assert_int_equal(replica_probe_result(&p, false, 2100), REPLICA_SAME);
    assert_int_equal(p.next_ms, 3100);
}

static void test_ready_is_lost_after_the_threshold_in_a_row_only(void **state)
{
    (void)state;
    struct replica_probe p;
    replica_probe_init(&p, &serve, 0, 0);
    assert_int_equal(replica_probe_result(&p, true, 10), REPLICA_READY);
    assert_int_equal(replica_probe_result(&p, false, 20), REPLICA_SAME);
    assert_int_equal(replica_probe_result(&p, false, 30), REPLICA_SAME);
    assert_int_equal(replica_probe_result(&p, true, 40), REPLICA_SAME); /* the count restarts */
    assert_int_equal(replica_probe_result(&p, false, 50), REPLICA_SAME);
    assert_int_equal(replica_probe_result(&p, false, 60), REPLICA_SAME);
    assert_true(p.ready);
    assert_int_equal(replica_probe_result(&p, false, 70), REPLICA_UNREADY);
    assert_false(p.ready);
    assert_int_equal(replica_probe_result(&p, false, 80), REPLICA_SAME);
    assert_int_equal(replica_probe_result(&p, true, 90), REPLICA_READY);
    /* once ready, the startup timeout no longer applies */
    assert_int_equal(replica_probe_check(&p, 1000000), REPLICA_SAME);
    assert_int_equal(replica_probe_result(&p, false, 1000000), REPLICA_SAME);
}

static void test_a_replica_never_ready_expires_at_its_startup_timeout_once(void **state)
{
    (void)state;
    struct replica_probe p;
    replica_probe_init(&p, &serve, 1000, 2000); /* launched at 1000: deadline 61000 */
    assert_int_equal(p.deadline_ms, 61000);
    assert_int_equal(replica_probe_check(&p, 60999), REPLICA_SAME);
    assert_int_equal(replica_probe_check(&p, 61000), REPLICA_EXPIRED);
    assert_true(p.expired);
    assert_int_equal(replica_probe_check(&p, 62000), REPLICA_SAME);
    assert_int_equal(replica_probe_result(&p, true, 62000), REPLICA_SAME);
    assert_false(p.ready);
    /* a success that comes in after the deadline is too late */
    replica_probe_init(&p, &serve, 0, 0);
    assert_int_equal(replica_probe_result(&p, true, 60000), REPLICA_EXPIRED);
    assert_false(p.ready);
}

static double sum_of(const char *text, const char *name, int want_rc)
{
    double v = -1;
    assert_int_equal(replica_metric_sum(text, strlen(text), name, &v), want_rc);
    return v;
}

static void test_a_metric_is_summed_over_its_label_sets(void **state)
{
    (void)state;
    static const char text[] = "# HELP reqs requests waiting\n"
                               "# TYPE reqs gauge\n"
                               "reqs{model=\"a\"} 2\n"
                               "reqs{model=\"b}\\\"c\",x=\"\"} 1.5 1700000000000\n"
                               "reqs_total 100\n"
                               "reqsother{a=\"1\"} 7\n"
                               "vllm:num_requests_waiting{model_name=\"m\"} 4\r\n"
                               "reqs{model=\"c\"} not-a-number\n"
                               "  reqs 0.25";
    assert_true(sum_of(text, "reqs", 0) == 3.75);
    assert_true(sum_of(text, "vllm:num_requests_waiting", 0) == 4);
    assert_true(sum_of(text, "reqs_total", 0) == 100);
    sum_of(text, "req", GPO_ENOENT);
    sum_of("", "reqs", GPO_ENOENT);
    sum_of("# reqs 5\n", "reqs", GPO_ENOENT);
    sum_of("reqs NaN\n", "reqs", GPO_ERANGE);
    sum_of("reqs +Inf\n", "reqs", GPO_ERANGE);
    sum_of("reqs 1e300\nreqs 1e300\n", "reqs", GPO_ERANGE);
    assert_true(sum_of("reqs -2\n", "reqs", 0) == -2);
}

static void test_an_http_status_line_is_read_when_whole(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int want;
    } cases[] = {
        {"HTTP/1.1 200 OK\r\n", 200},
        {"HTTP/1.0 503 Service Unavailable\r\n", 503},
        {"HTTP/1.1 204", 204},
        {"HTTP/1.1 20", 0},
        {"HTTP/1.", 0},
        {"", 0},
        {"HTTP/2 200", GPO_EINVAL},
        {"HTTP/1.1 2000", GPO_EINVAL},
        {"hello", GPO_EINVAL},
        {"HTTP/1.1 0xx", GPO_EINVAL},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        int got = replica_http_status(cases[k].text, strlen(cases[k].text));
        if (got != cases[k].want)
            fail_msg("'%s': %d, expected %d", cases[k].text, got, cases[k].want);
    }
}

static void test_a_replica_gets_its_port_and_names(void **state)
{
    (void)state;
    struct launch_strv env = {0};
    assert_int_equal(replica_env(&serve, 41234, &env), 0);
    assert_int_equal(env.n, 3);
    assert_string_equal(env.v[0], "PORT=41234");
    assert_string_equal(env.v[1], "GPUORCH_SERVICE=chat");
    assert_string_equal(env.v[2], "GPUORCH_REPLICA=3");
    launch_strv_release(&env);
    uint32_t port = 0;
    assert_int_equal(replica_port_pick(&port), 0);
    assert_true(port >= 1 && port <= 65535);
    /* it is free: a replica can listen on it */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_ANY)};
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    close(fd);
}

static void test_reports_are_owed_until_acknowledged_then_on_change(void **state)
{
    (void)state;
    struct replica *r = NULL;
    assert_int_equal(replica_new(&(struct replica_config){0}, &r), 0);
    struct replica_state st;
    assert_int_equal(replica_report(r, 9, 1, 0, &st), GPO_ENOENT);
    /* a port nothing listens on: the probe fails, fast, and it stays not ready */
    uint32_t port = 0;
    assert_int_equal(replica_port_pick(&port), 0);
    assert_int_equal(replica_add(r, 9, 1, &serve, port, 0), 0);
    assert_int_equal(replica_add(r, 9, 1, &serve, port, 0), GPO_EEXIST);
    assert_int_equal(replica_report(r, 9, 1, 0, &st), 0);
    assert_int_equal(st.ep.port, port);
    assert_false(st.ep.ready);
    assert_int_equal(st.ep.metric_milli, PROTO_NONE);
    assert_int_equal(st.ep.ready_ms, PROTO_NONE);
    assert_true(st.owed); /* none acknowledged yet */
    assert_false(st.expired);
    assert_int_equal(st.startup_timeout_s, 60);
    replica_sent(r, 9, 1, &st.ep, 0);
    assert_int_equal(replica_report(r, 9, 1, 10, &st), 0);
    assert_false(st.owed);
    /* what the controller has differs: owed at once for readiness, after a
     * second for the metric alone */
    struct proto_endpoint was = st.ep;
    was.ready = true;
    replica_sent(r, 9, 1, &was, 10);
    assert_int_equal(replica_report(r, 9, 1, 20, &st), 0);
    assert_true(st.owed);
    was = st.ep;
    was.metric_milli = 5000;
    replica_sent(r, 9, 1, &was, 20);
    assert_int_equal(replica_report(r, 9, 1, 20 + REPLICA_METRIC_MS - 1, &st), 0);
    assert_false(st.owed);
    assert_int_equal(replica_report(r, 9, 1, 20 + REPLICA_METRIC_MS, &st), 0);
    assert_true(st.owed);
    replica_remove(r, 9, 1);
    assert_int_equal(replica_report(r, 9, 1, 0, &st), GPO_ENOENT);
    replica_remove(r, 9, 1); /* unknown: fine */
    replica_free(r);
    replica_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probes_are_fast_until_ready_then_periodic),
        cmocka_unit_test(test_ready_is_lost_after_the_threshold_in_a_row_only),
        cmocka_unit_test(test_a_replica_never_ready_expires_at_its_startup_timeout_once),
        cmocka_unit_test(test_a_metric_is_summed_over_its_label_sets),
        cmocka_unit_test(test_an_http_status_line_is_read_when_whole),
        cmocka_unit_test(test_a_replica_gets_its_port_and_names),
        cmocka_unit_test(test_reports_are_owed_until_acknowledged_then_on_change),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

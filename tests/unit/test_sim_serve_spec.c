/* test_sim_serve_spec.c - the serving replay's service spec: the YAML of
 * `gpuorch service apply -f` plus `simulate:`, mapped field by field into
 * struct sim_serve_service; the controller's defaults; the JSON form; every
 * kind of bad field named by file, line and field, whether the controller's
 * decoder or the simulate section refuses it; what the simulator cannot
 * model; and the shipped specs for the Azure traces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "sim/serve_spec.h"
#include "base/banned.h"

static char err[512];

/* The service part every case shares (8 lines), then what the case adds. */
#define BASE                                                                                       \
    "name: chat\n"                                                                                 \
    "team: ml\n"                                                                                   \
    "command: [python3, server.py]\n"                                                              \
    "resources:\n"                                                                                 \
    "  gpus: 1\n"                                                                                  \
    "min: 0\n"                                                                                     \
    "max: 4\n"                                                                                     \
    "concurrency_limit: 8\n"
#define SIMULATE                                                                                   \
    "simulate:\n"                                                                                  \
    "  prefill_tps: 5000\n"                                                                        \
    "  decode_tps: 400\n"                                                                          \
    "  max_batch: 8\n"                                                                             \
    "  startup_s: 20.5\n"                                                                          \
    "  slo:\n"                                                                                     \
    "    ttft_s: 2\n"

static int parse(const char *text, struct sim_serve_service *svc)
{
    memset(err, 'x', sizeof(err)); /* a message must overwrite this and end */
    return sim_serve_spec_parse(text, strlen(text), "s.yaml", svc, err, sizeof(err));
}

/* An error: GPO_EINVAL and one line with `want` in it. */
static void assert_error(const char *text, const char *want)
{
    struct sim_serve_service svc;
    int rc = parse(text, &svc);
    if (rc != GPO_EINVAL || !memchr(err, '\0', sizeof(err)) || !strstr(err, want) ||
        strchr(err, '\n'))
        fail_msg("want GPO_EINVAL '%s', got %d '%.512s'", want, rc, err);
}

static void test_every_field_maps_into_the_service(void **state)
{
    (void)state;
    static const char text[] = BASE "queue:\n"
                                    "  limit: 50\n"
                                    "  timeout_ms: 20000\n"
                                    "drain_timeout_s: 10\n"
                                    "autoscaling:\n"
                                    "  metric: concurrency\n"
                                    "  target: 4\n"
                                    "  stable_window_s: 30\n"
                                    "  scale_to_zero_grace_s: 45\n"
                                    "simulate:\n"
                                    "  prefill_tps: 5000.5\n"
                                    "  decode_tps: 400\n"
                                    "  decode_tps_request: 50\n"
                                    "  max_batch: 8\n"
                                    "  startup_s: 20\n"
                                    "  slo:\n"
                                    "    ttft_s: 1.5\n"
                                    "    tpot_ms: 100\n"
                                    "    e2e_s: 30\n";
    struct sim_serve_service s;
    assert_int_equal(parse(text, &s), 0);
    assert_string_equal(s.name, "chat");
    assert_int_equal(s.autoscale.metric, AUTOSCALE_METRIC_CONCURRENCY);
    assert_int_equal(s.autoscale.target_milli, 4000);
    assert_int_equal(s.autoscale.min, 0);
    assert_int_equal(s.autoscale.max, 4);
    assert_int_equal(s.autoscale.stable_window_ms, 30000);
    assert_int_equal(s.autoscale.zero_grace_ms, 45000);
    assert_int_equal(s.concurrency_limit, 8);
    assert_int_equal(s.queue_limit, 50);
    assert_int_equal(s.queue_timeout_ms, 20000);
    assert_int_equal(s.drain_timeout_ms, 10000);
    assert_int_equal(s.gpu_milli, 1000);
    assert_true(s.model.prefill_tps == 5000.5);
    assert_true(s.model.decode_tps == 400);
    assert_true(s.model.decode_tps_request == 50);
    assert_int_equal(s.model.max_batch, 8);
    assert_int_equal(s.model.startup_ms, 20000);
    assert_int_equal(s.slo.ttft_ms, 1500);
    assert_int_equal(s.slo.tpot_ms, 100);
    assert_int_equal(s.slo.e2e_ms, 30000);
}

/* What the spec leaves out is the controller's default: queue 1000 for 60 s,
 * drain 30 s, a target of 70 % of the concurrency limit (8 -> 5.6), the
 * autoscaler's windows; one request decodes at the batch's rate; unset SLO
 * parts are 0. */
static void test_defaults_are_the_controllers(void **state)
{
    (void)state;
    struct sim_serve_service s, d;
    assert_int_equal(parse(BASE SIMULATE, &s), 0);
    assert_int_equal(s.queue_limit, 1000);
    assert_int_equal(s.queue_timeout_ms, 60000);
    assert_int_equal(s.drain_timeout_ms, 30000);
    assert_int_equal(s.autoscale.target_milli, 5600);
    struct autoscale_spec a;
    autoscale_spec_default(&a);
    assert_int_equal(s.autoscale.stable_window_ms, a.stable_window_ms);
    assert_int_equal(s.autoscale.panic_window_ms, a.panic_window_ms);
    assert_int_equal(s.autoscale.headroom, a.headroom);
    assert_true(s.model.decode_tps_request == 400);
    assert_int_equal(s.model.startup_ms, 20500);
    assert_int_equal(s.slo.ttft_ms, 2000);
    assert_int_equal(s.slo.tpot_ms, 0);
    assert_int_equal(s.slo.e2e_ms, 0);
    /* the same service as JSON reads the same */
    static const char json[] =
        "{\"name\": \"chat\", \"team\": \"ml\", \"command\": [\"python3\", \"server.py\"],"
        " \"resources\": {\"gpus\": 1}, \"min\": 0, \"max\": 4, \"concurrency_limit\": 8,"
        " \"simulate\": {\"prefill_tps\": 5000, \"decode_tps\": 400, \"max_batch\": 8,"
        " \"startup_s\": 20.5, \"slo\": {\"ttft_s\": 2}}}";
    assert_int_equal(parse(json, &d), 0);
    assert_string_equal(d.name, s.name);
    assert_int_equal(d.autoscale.target_milli, s.autoscale.target_milli);
    assert_int_equal(d.autoscale.stable_window_ms, s.autoscale.stable_window_ms);
    assert_int_equal(d.queue_limit, s.queue_limit);
    assert_int_equal(d.gpu_milli, s.gpu_milli);
    assert_true(d.model.prefill_tps == s.model.prefill_tps);
    assert_true(d.model.decode_tps_request == s.model.decode_tps_request);
    assert_int_equal(d.model.startup_ms, s.model.startup_ms);
    assert_int_equal(d.slo.ttft_ms, s.slo.ttft_ms);
}

static void test_a_fraction_of_a_gpu_is_milli(void **state)
{
    (void)state;
    struct sim_serve_service s;
    assert_int_equal(parse("name: half\nteam: ml\ncommand: [x]\nresources:\n  gpus: 0.5\n"
                           "min: 1\nmax: 2\n" SIMULATE,
                           &s),
                     0);
    assert_int_equal(s.gpu_milli, 500);
    assert_int_equal(s.autoscale.min, 1);
}

static void test_without_simulate_says_what_to_add(void **state)
{
    (void)state;
    assert_error(BASE, "s.yaml:1: no 'simulate' section: add the replica model");
    assert_error(BASE, "prefill_tps, decode_tps, max_batch, startup_s");
}

/* The simulate section's fields: each named with its line (BASE is lines
 * 1-8, simulate: line 9). */
static void test_bad_simulate_fields_name_line_and_field(void **state)
{
    (void)state;
    assert_error(BASE "simulate:\n  prefill_tps: 5000\n  decode_tps: 400\n  max_batch: 0\n",
                 "s.yaml:12: simulate.max_batch: expected an integer from 1 to 4096, got 0");
    assert_error(BASE "simulate:\n  prefill_tps: 5000\n  decode_tps: 400\n  max_batch: 4097\n",
                 "s.yaml:12: simulate.max_batch: expected an integer from 1 to 4096, got 4097");
    assert_error(BASE "simulate:\n  prefill_tps: fast\n",
                 "s.yaml:10: simulate.prefill_tps: expected a number > 0 and <= 1e+09, got "
                 "a string ('fast')");
    assert_error(BASE "simulate:\n  prefill_tps: 0\n", "s.yaml:10: simulate.prefill_tps");
    assert_error(BASE "simulate:\n  prefill_tps: 1\n", "s.yaml:9: simulate.decode_tps: required");
    assert_error(BASE "simulate:\n  prefill_tps: 1\n  decode_tps: 10\n  decode_tps_request: 20\n",
                 "s.yaml:12: simulate.decode_tps_request: 20 is above decode_tps (10)");
    assert_error(BASE "simulate:\n  prefill_tps: 1\n  decode_tps: 1\n  max_batch: 1\n"
                      "  startup_s: -1\n",
                 "s.yaml:13: simulate.startup_s: expected a number >= 0");
    assert_error(BASE "simulate:\n  prefill_tps: 1\n  decode_tps: 1\n  max_batch: 1\n"
                      "  startup_s: 0\n",
                 "simulate.slo: required field missing");
    assert_error(BASE "simulate:\n  prefill_tps: 1\n  decode_tps: 1\n  max_batch: 1\n"
                      "  startup_s: 0\n  slo: {}\n",
                 "s.yaml:14: simulate.slo: expected at least one of ttft_s, tpot_ms, e2e_s");
    assert_error(BASE "simulate:\n  prefill_tps: 1\n  decode_tps: 1\n  max_batch: 1\n"
                      "  startup_s: 0\n  slo:\n    ttft_s: -2\n",
                 "s.yaml:15: simulate.slo.ttft_s: expected a number > 0");
    assert_error(BASE "simulate:\n  prefill_tps: 1\n  decode_tps: 1\n  max_batch: 1\n"
                      "  startup_s: 0\n  slo:\n    tpot_ms: 0.0001\n",
                 "s.yaml:15: simulate.slo.tpot_ms: 0.0001 is below one millisecond");
    assert_error(BASE "simulate:\n  prefill_tps: 1\n  warp: 9\n",
                 "s.yaml:11: simulate.warp: unknown field (expected one of: prefill_tps");
    assert_error(BASE "simulate: 3\n", "s.yaml:9: simulate: expected a mapping");
}

/* The controller's decoder refuses these; its message gets the field's line. */
static void test_service_fields_are_the_controllers_with_their_line(void **state)
{
    (void)state;
    assert_error(BASE "queue:\n  limit: -1\n" SIMULATE, "s.yaml:10: field 'queue.limit'");
    assert_error(BASE "replicas: 3\n" SIMULATE, "s.yaml:9: unknown field 'replicas'");
    assert_error("name: chat\ncommand: [x]\nresources:\n  gpus: 1\nmin: 0\nmax: 1\n" SIMULATE,
                 "s.yaml:1: missing required field 'team'");
    assert_error(BASE "autoscaling:\n  metric: latency\n" SIMULATE,
                 "s.yaml:10: field 'autoscaling.metric': unknown 'latency'");
    /* and the simulator's own limits */
    assert_error("name: cpu\nteam: ml\ncommand: [x]\nresources:\n  gpus: 0\n  cpus: 2\nmin: 0\n"
                 "max: 1\n" SIMULATE,
                 "s.yaml:5: resources.gpus: a simulated replica needs GPUs");
    assert_error(BASE "autoscaling:\n  metric: replica\n  replica_metric: kv_usage\n"
                      "  target: 0.8\n" SIMULATE,
                 "s.yaml:10: autoscaling.metric: 'replica' scales on a value the replicas "
                 "export");
}

static void test_one_service_per_file(void **state)
{
    (void)state;
    assert_error("services:\n  - name: a\n", "s.yaml:1: expected one service: a mapping");
    assert_error("- 1\n", "expected one service");
    assert_error("name: [\n", "s.yaml:");
    struct sim_serve_service s;
    assert_int_equal(sim_serve_spec_parse("", 0, NULL, &s, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "service"));
}

static void test_the_shipped_azure_specs_load(void **state)
{
    (void)state;
    const char *data = getenv("SIM_TEST_DATA");
    assert_non_null(data);
    const char *names[] = {"conv", "code"};
    for (size_t k = 0; k < 2; k++) {
        char path[4096];
        struct sim_serve_service s;
        snprintf(path, sizeof(path), "%s/../../sim/azure_%s.yaml", data, names[k]);
        if (sim_serve_spec_load(path, &s, err, sizeof(err)))
            fail_msg("%s: %s", path, err);
        /* docs/simulator.md's replica model: one H100, an 8B model */
        assert_int_equal(s.gpu_milli, 1000);
        assert_true(s.model.prefill_tps == 10000 && s.model.decode_tps == 2400);
        assert_true(s.model.decode_tps_request == 80);
        assert_int_equal(s.model.max_batch, 32);
        assert_int_equal(s.model.startup_ms, 60000);
        assert_int_equal(s.concurrency_limit, k == 0 ? 32 : 8);
        assert_int_equal(s.autoscale.target_milli, k == 0 ? 8000 : 2000);
        assert_int_equal(s.autoscale.max, 20);
        assert_int_equal(s.slo.ttft_ms, 2000);
        assert_int_equal(s.slo.tpot_ms, 100);
    }
    struct sim_serve_service s;
    assert_int_equal(sim_serve_spec_load("/nonexistent/x.yaml", &s, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "/nonexistent/x.yaml: No such file"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_field_maps_into_the_service),
        cmocka_unit_test(test_defaults_are_the_controllers),
        cmocka_unit_test(test_a_fraction_of_a_gpu_is_milli),
        cmocka_unit_test(test_without_simulate_says_what_to_add),
        cmocka_unit_test(test_bad_simulate_fields_name_line_and_field),
        cmocka_unit_test(test_service_fields_are_the_controllers_with_their_line),
        cmocka_unit_test(test_one_service_per_file),
        cmocka_unit_test(test_the_shipped_azure_specs_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

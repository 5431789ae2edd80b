/* test_cluster_service.c - services as configuration: a minimal spec and its
 * defaults, the contract's full example through to_json and back (API and
 * stored forms), every bad field with its exact message, the target from a
 * concurrency limit, what changes the replicas' shape, a replica's job spec
 * (its "serve" part through jobspec's JSON, refused from the API), and the
 * cluster's add/replace/remove (ASan reports leaks). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "base/err.h"
#include "cluster/cluster.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define BASE         "\"name\": \"chat\", \"team\": \"ml\", \"command\": [\"serve\"], \"max\": 2"

static json_t *parse(const char *text)
{
    json_error_t jerr;
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (!j)
        fail_msg("test JSON does not parse: %s: %s", text, jerr.text);
    return j;
}

static void decode_ok(const char *text, unsigned flags, struct cluster_service *ret)
{
    json_t *body = parse(text);
    char err[512] = "";
    int rc = cluster_service_decode(body, flags, ret, err, sizeof(err));
    json_decref(body);
    if (rc != 0)
        fail_msg("refused with %d: %s (for %.200s)", rc, err, text);
}

static void test_minimal_service_gets_the_defaults(void **state)
{
    (void)state;
    struct cluster_service s;
    decode_ok("{" BASE "}", 0, &s);
    assert_string_equal(s.name, "chat");
    assert_null(s.user);
    assert_int_equal(s.id, 0);
    assert_string_equal(s.replica.name, "chat");
    assert_string_equal(s.replica.team, "ml");
    assert_string_equal(s.replica.priority, "serving");
    assert_string_equal(s.replica.argv[0], "serve");
    assert_int_equal(s.replica.cpus, 1);
    assert_int_equal(s.replica.mem_mib, 1024);
    assert_null(s.replica.serve.service);
    assert_string_equal(s.probe_path, "/health");
    assert_int_equal(s.probe_period_ms, 1000);
    assert_int_equal(s.probe_timeout_ms, 1000);
    assert_int_equal(s.probe_failures, 3);
    assert_int_equal(s.startup_timeout_s, 900);
    assert_int_equal(s.drain_timeout_s, 30);
    assert_int_equal(s.concurrency_limit, 0);
    assert_int_equal(s.queue_limit, 1000);
    assert_int_equal(s.queue_timeout_ms, 60000);
    assert_int_equal(s.nhosts, 0);
    assert_int_equal(s.nkeys, 0);
    assert_null(s.replica_metric);
    struct autoscale_spec d;
    cluster_service_autoscale_default(&d);
    const struct autoscale_spec *a = &s.autoscale;
    assert_int_equal(a->metric, AUTOSCALE_METRIC_CONCURRENCY);
    assert_int_equal(a->target_milli, d.target_milli);
    assert_int_equal(a->min, 0);
    assert_int_equal(a->max, 2);
    assert_int_equal(a->stable_window_ms, d.stable_window_ms);
    assert_int_equal(a->panic_window_ms, d.panic_window_ms);
    assert_int_equal(a->panic_threshold_pct, d.panic_threshold_pct);
    assert_int_equal(a->max_up_rate_pct, d.max_up_rate_pct);
    assert_int_equal(a->max_down_rate_pct, d.max_down_rate_pct);
    assert_int_equal(a->scale_down_delay_ms, d.scale_down_delay_ms);
    assert_int_equal(a->zero_grace_ms, d.zero_grace_ms);
    assert_int_equal(a->headroom, d.headroom);
    cluster_service_release(&s);
}

static const char full[] =
    "{\"name\": \"chat\", \"team\": \"ml\", \"project\": \"assistant\", \"model\": \"llama-3-8b\","
    " \"command\": [\"python3\", \"/opt/gpuorch/examples/serving/server.py\"], \"script\": null,"
    " \"env\": {\"MODEL_LOAD_S\": \"20\"}, \"workdir\": \"/srv/models\","
    " \"resources\": {\"gpus\": 1, \"gpu_mem_mib\": 0, \"min_gpu_mem_mib\": 0,"
    " \"gpu_type\": \"H100-80GB\", \"cpus\": 4, \"mem_mib\": 16384, \"pool\": \"default\"},"
    " \"priority\": \"serving\","
    " \"readiness\": {\"path\": \"/health\", \"period_ms\": 1000, \"timeout_ms\": 1000,"
    " \"failure_threshold\": 3},"
    " \"startup_timeout_s\": 900, \"drain_timeout_s\": 30, \"min\": 0, \"max\": 8,"
    " \"concurrency_limit\": 4, \"queue\": {\"limit\": 1000, \"timeout_ms\": 60000},"
    " \"hosts\": [\"chat.example.com\"],"
    " \"api_key_sha256\": [\"" /* 64 hex */
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"],"
    " \"autoscaling\": {\"metric\": \"replica\", \"replica_metric\": "
    "\"vllm:num_requests_waiting\", \"target\": 0.8, \"stable_window_s\": 60,"
    " \"panic_window_s\": 6, \"panic_threshold_pct\": 200, \"max_scale_up_rate_pct\": 1000,"
    " \"max_scale_down_rate_pct\": 200, \"scale_down_delay_s\": 0,"
    " \"scale_to_zero_grace_s\": 30, \"headroom\": true},"
    " \"generation\": 3, \"user\": \"alice\"}";

static void test_full_spec_round_trips_in_both_forms(void **state)
{
    (void)state;
    struct cluster_service s;
    decode_ok(full, 0, &s);
    assert_int_equal(s.autoscale.metric, AUTOSCALE_METRIC_REPLICA);
    assert_int_equal(s.autoscale.target_milli, 800);
    assert_string_equal(s.replica_metric, "vllm:num_requests_waiting");
    assert_string_equal(s.replica.pool, "default");
    assert_int_equal(s.replica.gpus, 1);
    assert_int_equal(s.generation, 3);
    assert_string_equal(s.user, "alice");
    json_t *want = parse(full), *got = cluster_service_to_json(&s, 0);
    assert_non_null(got);
    if (!json_equal(want, got)) {
        char *g = json_dumps(got, JSON_SORT_KEYS);
        fail_msg("to_json differs: %s", g);
    }
    assert_null(json_object_get(got, "id"));
    json_decref(want);

    s.id = 7;
    json_t *stored = cluster_service_to_json(&s, CLUSTER_STORED);
    assert_int_equal(json_integer_value(json_object_get(stored, "id")), 7);
    char err[256] = "";
    struct cluster_service back;
    assert_int_equal(cluster_service_decode(stored, CLUSTER_STORED, &back, err, sizeof(err)), 0);
    json_t *again = cluster_service_to_json(&back, CLUSTER_STORED);
    assert_true(json_equal(stored, again));
    assert_true(cluster_service_same_shape(&s, &back));
    /* The API form refuses "id", the stored form needs it. */
    assert_int_equal(cluster_service_decode(stored, 0, &back, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "unknown field 'id'");
    assert_int_equal(cluster_service_decode(got, CLUSTER_STORED, &back, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "missing required field 'id'");
    json_decref(got);
    json_decref(stored);
    json_decref(again);
    cluster_service_release(&back);
    cluster_service_release(&s);
}

static const struct {
    const char *body, *msg;
} bad[] = {
    {"{\"name\": \"chat\", \"team\": \"ml\", \"command\": [\"x\"], \"max\": 2, \"min\": 3}",
     "field 'min': 3 is more than 'max' 2"},
    {"{" BASE ", \"autoscaling\": {\"target\": 0}}",
     "field 'autoscaling.target': expected a number above 0 (at most 1e+06)"},
    {"{" BASE ", \"autoscaling\": {\"target\": -1.5}}",
     "field 'autoscaling.target': expected a number above 0 (at most 1e+06)"},
    {"{" BASE ", \"autoscaling\": {\"target\": \"2\"}}",
     "field 'autoscaling.target': expected a number, got a string"},
    {"{" BASE ", \"autoscaling\": {\"metric\": \"foo\"}}",
     "field 'autoscaling.metric': unknown 'foo' (expected concurrency, rps, replica)"},
    {"{" BASE ", \"autoscaling\": {\"metric\": \"replica\"}}",
     "missing required field 'autoscaling.replica_metric' (the metric 'replica' scales on a "
     "metric of the replica's own /metrics)"},
    {"{" BASE ", \"autoscaling\": {\"replica_metric\": \"m\"}}",
     "field 'autoscaling.replica_metric': only with the metric 'replica'"},
    {"{" BASE ", \"autoscaling\": {\"metric\": \"replica\", \"replica_metric\": \"a b\"}}",
     "field 'autoscaling.replica_metric': 'a b' is not a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*, "
     "at most 200 bytes)"},
    {"{" BASE ", \"autoscaling\": {\"panic_window_s\": 90}}",
     "field 'autoscaling.panic_window_s': 90 is longer than 'stable_window_s' 60"},
    {"{" BASE ", \"autoscaling\": {\"panic_threshold_pct\": 100}}",
     "field 'autoscaling.panic_threshold_pct': 100 is out of range 101..100000"},
    {"{" BASE ", \"autoscaling\": {\"speed\": 1}}", "unknown field 'autoscaling.speed'"},
    {"{" BASE ", \"readiness\": {\"path\": \"health\"}}",
     "field 'readiness.path': expected a path starting with '/' (at most 1024 bytes)"},
    {"{" BASE ", \"readiness\": {\"period_ms\": 5}}",
     "field 'readiness.period_ms': 5 is out of range 100..3600000"},
    {"{" BASE ", \"resources\": {\"gpus\": 1.5}}",
     "field 'resources.gpus': 1.5 is neither whole GPUs nor a fraction below 1"},
    {"{" BASE ", \"resources\": {\"gpus\": 1, \"gpu_mem_mib\": 10}}",
     "fields 'resources.gpus' and 'resources.gpu_mem_mib' are exclusive: ask for GPUs or for a "
     "share of one GPU's memory"},
    {"{" BASE ", \"resources\": {\"gpu\": 1}}",
     "unknown field 'resources.gpu' (expected gpus, gpu_mem_mib, min_gpu_mem_mib, gpu_type, cpus, "
     "mem_mib, pool)"},
    {"{" BASE ", \"resources\": [1]}", "field 'resources': expected an object, got an array"},
    {"{" BASE ", \"replicas\": 2}", "unknown field 'replicas'"},
    {"{" BASE ", \"script\": \"x\"}", "fields 'command' and 'script' are exclusive: give one"},
    {"{" BASE ", \"workdir\": \"srv\"}",
     "field 'workdir': must be an absolute path (start with '/')"},
    {"{\"name\": \"chat\", \"command\": [\"x\"], \"max\": 2}",
     "missing required field 'team' (the team whose quota the replicas use)"},
    {"{\"name\": \"chat\", \"team\": \"ml\", \"max\": 2}",
     "missing required field 'command' or 'script'"},
    {"{\"name\": \"chat\", \"team\": \"ml\", \"command\": [\"x\"]}",
     "missing required field 'max'"},
    {"{\"name\": \"chat\", \"team\": \"ml\", \"command\": [\"x\"], \"max\": 0}",
     "field 'max': 0 is out of range 1..1000"},
    {"{\"name\": \"Chat X\", \"team\": \"ml\", \"command\": [\"x\"], \"max\": 2}",
     "field 'name': 'Chat X' is not a valid name (1 to 63 bytes of a-z, 0-9, '-', '_' and '.', "
     "starting with a letter or digit)"},
    {"{" BASE ", \"hosts\": [\"a b\"]}", "field 'hosts[0]': 'a b' is not a host name"},
    {"{" BASE ", \"api_key_sha256\": [\"ABC\"]}",
     "field 'api_key_sha256[0]': expected 64 lowercase hex digits (a key's SHA-256)"},
    {"{" BASE ", \"queue\": {\"timeout_ms\": 0}}",
     "field 'queue.timeout_ms': 0 is out of range 1..3600000"},
    {"{" BASE ", \"startup_timeout_s\": 0}",
     "field 'startup_timeout_s': 0 is out of range 1..86400"},
    {"{\"name\": \"chat\", \"team\": \"m l\", \"command\": [\"x\"], \"max\": 2}",
     "field 'team': 'm l' may hold only letters, digits, '.', '_' and '-'"},
};

static void test_every_bad_field_is_named_and_nothing_is_set(void **state)
{
    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        json_t *body = parse(bad[i].body);
        struct cluster_service s, fresh;
        memset(&s, 0xA5, sizeof(s));
        memset(&fresh, 0xA5, sizeof(fresh));
        char err[512] = "";
        int rc = cluster_service_decode(body, 0, &s, err, sizeof(err));
        json_decref(body);
        if (rc != -EINVAL || strcmp(err, bad[i].msg) != 0)
            fail_msg("%s:\n got  %d '%s'\n want '%s'", bad[i].body, rc, err, bad[i].msg);
        assert_memory_equal(&s, &fresh, sizeof(s));
    }
}

static void test_concurrency_limit_sets_the_target_unless_given(void **state)
{
    (void)state;
    struct cluster_service s;
    decode_ok("{" BASE ", \"concurrency_limit\": 4}", 0, &s);
    assert_int_equal(s.autoscale.target_milli, 2800); /* 70 % of 4 */
    cluster_service_release(&s);
    decode_ok("{" BASE ", \"concurrency_limit\": 4, \"autoscaling\": {\"target\": 3}}", 0, &s);
    assert_int_equal(s.autoscale.target_milli, 3000);
    cluster_service_release(&s);
    decode_ok("{" BASE ", \"concurrency_limit\": 4, \"autoscaling\": {\"metric\": \"rps\"}}", 0,
              &s);
    struct autoscale_spec d;
    cluster_service_autoscale_default(&d);
    assert_int_equal(s.autoscale.target_milli, d.target_milli);
    cluster_service_release(&s);
}

static void test_only_replica_fields_change_the_shape(void **state)
{
    (void)state;
    struct cluster_service a, b;
    decode_ok("{" BASE ", \"env\": {\"A\": \"1\"}}", 0, &a);
    decode_ok("{" BASE ", \"env\": {\"A\": \"1\"}, \"min\": 1, \"concurrency_limit\": 9,"
              " \"hosts\": [\"x.example\"], \"autoscaling\": {\"target\": 5}}",
              0, &b);
    assert_true(cluster_service_same_shape(&a, &b));
    cluster_service_release(&b);
    static const char *const changes[] = {
        "\"env\": {\"A\": \"2\"}",
        "\"env\": {\"A\": \"1\"}, \"resources\": {\"cpus\": 2}",
        "\"env\": {\"A\": \"1\"}, \"readiness\": {\"path\": \"/ready\"}",
        "\"env\": {\"A\": \"1\"}, \"startup_timeout_s\": 60",
        "\"env\": {\"A\": \"1\"}, \"priority\": \"high\"",
    };
    for (size_t i = 0; i < ARRAY_LEN(changes); i++) {
        char text[512];
        snprintf(text, sizeof(text), "{" BASE ", %s}", changes[i]);
        decode_ok(text, 0, &b);
        if (cluster_service_same_shape(&a, &b))
            fail_msg("%s: the same shape", changes[i]);
        cluster_service_release(&b);
    }
    cluster_service_release(&a);
}

static void test_replica_spec_carries_serve_through_stored_json_only(void **state)
{
    (void)state;
    struct cluster_service s;
    decode_ok("{" BASE ", \"generation\": 4, \"autoscaling\": {\"metric\": \"replica\","
              " \"replica_metric\": \"vllm:num_requests_waiting\"}, \"readiness\":"
              " {\"path\": \"/ready\"}, \"startup_timeout_s\": 60}",
              0, &s);
    struct jobspec r;
    char err[256] = "";
    assert_int_equal(cluster_service_replica_spec(&s, 0, &r, err, sizeof(err)), -EINVAL);
    assert_int_equal(cluster_service_replica_spec(&s, 3, &r, err, sizeof(err)), 0);
    assert_false(r.requeue);
    assert_int_equal(r.time_limit_s, 0);
    assert_string_equal(r.name, "chat");
    assert_string_equal(r.serve.service, "chat");
    assert_int_equal(r.serve.replica, 3);
    assert_int_equal(r.serve.generation, 4);
    assert_string_equal(r.serve.probe_path, "/ready");
    assert_int_equal(r.serve.probe_period_ms, 1000);
    assert_int_equal(r.serve.probe_failures, 3);
    assert_int_equal(r.serve.startup_timeout_s, 60);
    assert_string_equal(r.serve.metric, "vllm:num_requests_waiting");
    assert_null(s.replica.serve.service); /* the template is left alone */

    json_t *o = jobspec_to_json(&r);
    json_t *want = parse("{\"service\": \"chat\", \"replica\": 3, \"generation\": 4,"
                         " \"probe_path\": \"/ready\", \"probe_period_ms\": 1000,"
                         " \"probe_timeout_ms\": 1000, \"probe_failures\": 3,"
                         " \"startup_timeout_s\": 60, \"metric\": \"vllm:num_requests_waiting\"}");
    assert_true(json_equal(json_object_get(o, "serve"), want));
    json_decref(want);
    struct jobspec back, copy;
    if (jobspec_decode_stored(o, &back, err, sizeof(err)))
        fail_msg("stored replica refused: %s", err);
    assert_string_equal(back.serve.service, "chat");
    assert_string_equal(back.serve.metric, "vllm:num_requests_waiting");
    json_t *again = jobspec_to_json(&back);
    assert_true(json_equal(o, again));
    json_decref(again);
    assert_int_equal(jobspec_copy(&back, &copy), 0);
    assert_ptr_not_equal(copy.serve.service, back.serve.service);
    assert_string_equal(copy.serve.probe_path, "/ready");
    jobspec_release(&copy);
    jobspec_release(&back);
    assert_int_equal(jobspec_decode(o, &back, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "field 'serve': set by the controller on service replicas only");
    json_object_set_new(json_object_get(o, "serve"), "probe_path", json_string("ready"));
    assert_int_equal(jobspec_decode_stored(o, &back, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "field 'serve.probe_path': expected a path starting with '/'");
    json_decref(o);

    /* A plain job has no "serve" key, and null is no replica. */
    json_t *plain = jobspec_to_json(&s.replica);
    assert_null(json_object_get(plain, "serve"));
    json_object_set_new(plain, "serve", json_null());
    assert_int_equal(jobspec_decode(plain, &back, err, sizeof(err)), 0);
    assert_null(back.serve.service);
    jobspec_release(&back);
    json_decref(plain);
    jobspec_release(&r);
    cluster_service_release(&s);
}

static void test_cluster_keeps_services_by_name(void **state)
{
    (void)state;
    struct cluster m;
    cluster_init(&m);
    struct cluster_service a, b;
    char err[256] = "";
    decode_ok("{" BASE "}", 0, &a);
    assert_int_equal(cluster_service_add(&m, &a, err, sizeof(err)), -EINVAL); /* no id */
    a.id = 5;
    assert_int_equal(cluster_service_add(&m, &a, err, sizeof(err)), 0);
    assert_null(a.name);
    decode_ok("{\"name\": \"chat\", \"team\": \"ml\", \"command\": [\"x\"], \"max\": 4}", 0, &b);
    assert_int_equal(cluster_service_replace(&m, &b, err, sizeof(err)), 0);
    const struct cluster_service *got = cluster_service_get(&m, "chat");
    assert_non_null(got);
    assert_int_equal(got->id, 5);
    assert_int_equal(got->autoscale.max, 4);
    assert_null(cluster_service_get(&m, "other"));
    assert_int_equal(cluster_service_remove(&m, "other"), -ENOENT);
    decode_ok("{" BASE "}", 0, &a);
    a.id = 6;
    free(a.name);
    a.name = strdup("alpha");
    free(a.replica.name);
    a.replica.name = strdup("alpha");
    assert_int_equal(cluster_service_add(&m, &a, err, sizeof(err)), 0);
    assert_int_equal(m.nservices, 2);
    assert_string_equal(m.services[0].name, "alpha");
    assert_int_equal(cluster_service_remove(&m, "chat"), 0);
    assert_int_equal(m.nservices, 1);
    cluster_release(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minimal_service_gets_the_defaults),
        cmocka_unit_test(test_full_spec_round_trips_in_both_forms),
        cmocka_unit_test(test_every_bad_field_is_named_and_nothing_is_set),
        cmocka_unit_test(test_concurrency_limit_sets_the_target_unless_given),
        cmocka_unit_test(test_only_replica_fields_change_the_shape),
        cmocka_unit_test(test_replica_spec_carries_serve_through_stored_json_only),
        cmocka_unit_test(test_cluster_keeps_services_by_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

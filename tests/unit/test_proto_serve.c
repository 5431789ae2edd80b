/* test_proto_serve.c - a serving replica's parts of the controller-agent
 * messages: the spec's "serve" round trips and reads into proto_serve; a
 * spec without it (absent or null) is no replica's and encodes without it;
 * each field of "serve" out of its range or of the wrong type is refused by
 * name; a RUNNING report's "endpoint" round trips, its metric a JSON number
 * held in thousandths, its ready_ms null until ready; a bad endpoint field
 * and an endpoint on an end's report are refused by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "proto/proto.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define UUID0        "GPU-00000000-0000-4000-8000-000000000000"

#define SERVE                                                                                      \
    "{\"service\": \"chat\", \"replica\": 3, \"generation\": 2, \"probe_path\": \"/health\", "     \
    "\"probe_period_ms\": 1000, \"probe_timeout_ms\": 1000, \"probe_failures\": 3, "               \
    "\"startup_timeout_s\": 900, \"metric\": \"vllm:num_requests_waiting\"}"

static json_t *parse(const char *text)
{
    json_error_t e;
    json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, &e);
    if (!o)
        fail_msg("bad test JSON: %s: %s", e.text, text);
    return o;
}

/* A run of job 5 whose spec has `serve` (JSON text, or NULL: no key). */
static json_t *run_with(const char *serve)
{
    json_t *a = parse("{\"job\": 5, \"attempt\": 1, \"action\": \"run\", \"gpus\": [{\"uuid\": "
                      "\"" UUID0 "\", \"milli\": 1000, \"mem_mib\": 0}], \"user\": \"bob\", "
                      "\"unix_user\": null, \"spec\": {\"command\": [\"/bin/true\"]}, \"gang\": "
                      "{\"nodes\": [\"n1\"], \"rank\": 0, \"master_addr\": \"n1\", "
                      "\"master_port\": 20000}}");
    if (serve)
        json_object_set_new(json_object_get(a, "spec"), "serve",
                            json_loads(serve, JSON_DECODE_ANY, NULL));
    return a;
}

static void test_a_replicas_serve_decodes_and_round_trips(void **state)
{
    (void)state;
    json_t *a = run_with(SERVE), *out = NULL;
    struct proto_attempt m, again;
    char err[256] = "";
    if (proto_attempt_decode(a, &m, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    const struct proto_serve *s = &m.spec.serve;
    assert_string_equal(s->service, "chat");
    assert_int_equal(s->replica, 3);
    assert_int_equal(s->generation, 2);
    assert_string_equal(s->probe_path, "/health");
    assert_int_equal(s->probe_period_ms, 1000);
    assert_int_equal(s->probe_timeout_ms, 1000);
    assert_int_equal(s->probe_failures, 3);
    assert_int_equal(s->startup_timeout_s, 900);
    assert_string_equal(s->metric, "vllm:num_requests_waiting");
    assert_int_equal(proto_attempt_encode(&m, &out), 0);
    json_t *want = parse(SERVE);
    assert_true(json_equal(json_object_get(json_object_get(out, "spec"), "serve"), want));
    assert_int_equal(proto_attempt_decode(out, &again, err, sizeof(err)), 0);
    assert_string_equal(again.spec.serve.metric, "vllm:num_requests_waiting");
    proto_attempt_release(&again);
    proto_attempt_release(&m);
    json_decref(want);
    json_decref(out);
    json_decref(a);
}

static void test_a_spec_without_serve_is_no_replica_and_writes_none(void **state)
{
    (void)state;
    const char *forms[] = {NULL, "null"};
    for (size_t k = 0; k < ARRAY_LEN(forms); k++) {
        json_t *a = run_with(forms[k]), *out = NULL;
        struct proto_attempt m;
        assert_int_equal(proto_attempt_decode(a, &m, NULL, 0), 0);
        assert_null(m.spec.serve.service);
        assert_null(m.spec.serve.probe_path);
        assert_int_equal(proto_attempt_encode(&m, &out), 0);
        assert_null(json_object_get(json_object_get(out, "spec"), "serve"));
        proto_attempt_release(&m);
        json_decref(out);
        json_decref(a);
    }
    /* a metric of null is none */
    json_t *a = run_with(SERVE);
    json_object_set_new(json_object_get(json_object_get(a, "spec"), "serve"), "metric",
                        json_null());
    struct proto_attempt m;
    assert_int_equal(proto_attempt_decode(a, &m, NULL, 0), 0);
    assert_null(m.spec.serve.metric);
    proto_attempt_release(&m);
    json_decref(a);
}

static const struct bad_serve {
    const char *key, *value; /* value NULL: the key deleted */
    int rc;
    const char *msg;
} bad_serve[] = {
    {"service", NULL, GPO_EINVAL, "missing required field 'spec.serve.service'"},
    {"service", "\"\"", GPO_ERANGE, "field 'spec.serve.service'"},
    {"service", "\"a\\nb\"", GPO_EINVAL, "field 'spec.serve.service'"},
    {"replica", "0", GPO_ERANGE, "field 'spec.serve.replica'"},
    {"replica", "\"3\"", GPO_EINVAL, "field 'spec.serve.replica'"},
    {"generation", "-1", GPO_ERANGE, "field 'spec.serve.generation'"},
    {"probe_path", "\"health\"", GPO_EINVAL,
     "field 'spec.serve.probe_path': expected a path that starts with '/'"},
    {"probe_path", "\"/a b\"", GPO_EINVAL, "field 'spec.serve.probe_path': holds a space"},
    {"probe_path", NULL, GPO_EINVAL, "missing required field 'spec.serve.probe_path'"},
    {"probe_period_ms", "99", GPO_ERANGE, "field 'spec.serve.probe_period_ms'"},
    {"probe_period_ms", "3600001", GPO_ERANGE, "field 'spec.serve.probe_period_ms'"},
    {"probe_timeout_ms", "9", GPO_ERANGE, "field 'spec.serve.probe_timeout_ms'"},
    {"probe_timeout_ms", "600001", GPO_ERANGE, "field 'spec.serve.probe_timeout_ms'"},
    {"probe_failures", "0", GPO_ERANGE, "field 'spec.serve.probe_failures'"},
    {"probe_failures", "1001", GPO_ERANGE, "field 'spec.serve.probe_failures'"},
    {"startup_timeout_s", "0", GPO_ERANGE, "field 'spec.serve.startup_timeout_s'"},
    {"startup_timeout_s", "86401", GPO_ERANGE, "field 'spec.serve.startup_timeout_s'"},
    {"startup_timeout_s", "1.5", GPO_EINVAL, "field 'spec.serve.startup_timeout_s'"},
    {"metric", "\"\"", GPO_ERANGE, "field 'spec.serve.metric'"},
    {"metric", "\"9lives\"", GPO_EINVAL, "field 'spec.serve.metric': not a Prometheus"},
    {"metric", "\"a{b}\"", GPO_EINVAL, "field 'spec.serve.metric': not a Prometheus"},
    {"colour", "1", GPO_EINVAL, "unknown field 'spec.serve.colour'"},
};

static void test_every_bad_serve_field_is_refused_by_name(void **state)
{
    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(bad_serve); i++) {
        const struct bad_serve *b = &bad_serve[i];
        json_t *a = run_with(SERVE);
        json_t *serve = json_object_get(json_object_get(a, "spec"), "serve");
        if (b->value)
            json_object_set_new(serve, b->key, json_loads(b->value, JSON_DECODE_ANY, NULL));
        else
            json_object_del(serve, b->key);
        struct proto_attempt m;
        memset(&m, 0x5a, sizeof(m));
        struct proto_attempt before = m;
        char err[512] = "";
        int rc = proto_attempt_decode(a, &m, err, sizeof(err));
        if (rc != b->rc || !strstr(err, b->msg))
            fail_msg("%s = %s: rc %d, '%s'; expected %d, '%s'", b->key,
                     b->value ? b->value : "(deleted)", rc, err, b->rc, b->msg);
        assert_memory_equal(&m, &before, sizeof(m));
        json_decref(a);
    }
    json_t *a = run_with("[]");
    struct proto_attempt m;
    char err[256] = "";
    assert_int_equal(proto_attempt_decode(a, &m, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "field 'spec.serve'"));
    json_decref(a);
}

/* ---- the endpoint ------------------------------------------------------- */

static void test_an_endpoint_round_trips_its_metric_in_thousandths(void **state)
{
    (void)state;
    json_t *o = parse("{\"state\": \"RUNNING\", \"endpoint\": {\"port\": 41234, \"ready\": true, "
                      "\"metric\": 3.25, \"ready_ms\": 1700000000123}}");
    struct proto_report r, again;
    char err[256] = "";
    if (proto_report_decode(o, &r, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_int_equal(r.endpoint.port, 41234);
    assert_true(r.endpoint.ready);
    assert_int_equal(r.endpoint.metric_milli, 3250);
    assert_int_equal(r.endpoint.ready_ms, INT64_C(1700000000123));
    json_t *out = NULL;
    assert_int_equal(proto_report_encode(&r, &out), 0);
    assert_true(json_equal(o, out));
    assert_int_equal(proto_report_decode(out, &again, err, sizeof(err)), 0);
    assert_memory_equal(&again.endpoint, &r.endpoint, sizeof(r.endpoint));
    json_decref(out);
    json_decref(o);
    /* an integer metric is a number too; a negative one keeps its sign */
    o = parse("{\"state\": \"RUNNING\", \"endpoint\": {\"port\": 1, \"ready\": false, "
              "\"metric\": -7}}");
    assert_int_equal(proto_report_decode(o, &r, err, sizeof(err)), 0);
    assert_int_equal(r.endpoint.metric_milli, -7000);
    json_decref(o);
}

static void test_an_endpoint_not_ready_has_null_ready_ms_and_no_metric(void **state)
{
    (void)state;
    struct proto_report r = {
        .state = PROTO_STATE_RUNNING,
        .exit_code = PROTO_NONE,
        .signal = PROTO_NONE,
        .endpoint = {.port = 8000, .metric_milli = PROTO_NONE, .ready_ms = PROTO_NONE}};
    json_t *out = NULL;
    assert_int_equal(proto_report_encode(&r, &out), 0);
    json_t *want =
        parse("{\"state\": \"RUNNING\", \"endpoint\": {\"port\": 8000, \"ready\": false, "
              "\"metric\": null, \"ready_ms\": null}}");
    assert_true(json_equal(out, want));
    struct proto_report back;
    assert_int_equal(proto_report_decode(out, &back, NULL, 0), 0);
    assert_int_equal(back.endpoint.metric_milli, PROTO_NONE);
    assert_int_equal(back.endpoint.ready_ms, PROTO_NONE);
    assert_false(back.endpoint.ready);
    json_decref(want);
    json_decref(out);
    /* a report without one has port 0, and writes none */
    json_t *o = parse("{\"state\": \"RUNNING\"}");
    assert_int_equal(proto_report_decode(o, &back, NULL, 0), 0);
    assert_int_equal(back.endpoint.port, 0);
    assert_int_equal(proto_report_encode(&back, &out), 0);
    assert_null(json_object_get(out, "endpoint"));
    json_decref(out);
    json_decref(o);
}

static const struct bad_endpoint {
    const char *text;
    int rc;
    const char *msg;
} bad_endpoint[] = {
    {"{\"state\": \"RUNNING\", \"endpoint\": {\"ready\": true}}", GPO_EINVAL,
     "missing required field 'endpoint.port'"},
    {"{\"state\": \"RUNNING\", \"endpoint\": {\"port\": 0, \"ready\": true}}", GPO_ERANGE,
     "field 'endpoint.port'"},
    {"{\"state\": \"RUNNING\", \"endpoint\": {\"port\": 65536, \"ready\": true}}", GPO_ERANGE,
     "field 'endpoint.port'"},
    {"{\"state\": \"RUNNING\", \"endpoint\": {\"port\": 1}}", GPO_EINVAL,
     "missing required field 'endpoint.ready'"},
    {"{\"state\": \"RUNNING\", \"endpoint\": {\"port\": 1, \"ready\": 1}}", GPO_EINVAL,
     "field 'endpoint.ready'"},
    {"{\"state\": \"RUNNING\", \"endpoint\": {\"port\": 1, \"ready\": true, \"metric\": \"3\"}}",
     GPO_EINVAL, "field 'endpoint.metric'"},
    {"{\"state\": \"RUNNING\", \"endpoint\": {\"port\": 1, \"ready\": true, \"metric\": 1e16}}",
     GPO_ERANGE, "field 'endpoint.metric'"},
    {"{\"state\": \"RUNNING\", \"endpoint\": {\"port\": 1, \"ready\": true, \"ready_ms\": -1}}",
     GPO_ERANGE, "field 'endpoint.ready_ms'"},
    {"{\"state\": \"RUNNING\", \"endpoint\": {\"port\": 1, \"ready\": true, \"addr\": \"x\"}}",
     GPO_EINVAL, "unknown field 'endpoint.addr'"},
    {"{\"state\": \"RUNNING\", \"endpoint\": null}", GPO_EINVAL, "field 'endpoint'"},
    {"{\"state\": \"FAILED\", \"endpoint\": {\"port\": 1, \"ready\": false}}", GPO_EINVAL,
     "field 'endpoint': only a RUNNING report has one, not FAILED"},
};

static void test_every_bad_endpoint_field_is_refused_by_name(void **state)
{
    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(bad_endpoint); i++) {
        const struct bad_endpoint *b = &bad_endpoint[i];
        json_t *o = parse(b->text);
        struct proto_report m;
        memset(&m, 0x5a, sizeof(m));
        struct proto_report before = m;
        char err[512] = "";
        int rc = proto_report_decode(o, &m, err, sizeof(err));
        if (rc != b->rc || !strstr(err, b->msg))
            fail_msg("%s: rc %d, '%s'; expected %d, '%s'", b->text, rc, err, b->rc, b->msg);
        assert_memory_equal(&m, &before, sizeof(m));
        json_decref(o);
    }
}

static void test_an_endpoint_that_cannot_be_written_is_refused(void **state)
{
    (void)state;
    struct proto_report r = {
        .state = PROTO_STATE_RUNNING,
        .exit_code = PROTO_NONE,
        .signal = PROTO_NONE,
        .endpoint = {.port = 70000, .metric_milli = PROTO_NONE, .ready_ms = PROTO_NONE}};
    json_t *out = NULL;
    assert_int_equal(proto_report_encode(&r, &out), GPO_EINVAL);
    assert_null(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_replicas_serve_decodes_and_round_trips),
        cmocka_unit_test(test_a_spec_without_serve_is_no_replica_and_writes_none),
        cmocka_unit_test(test_every_bad_serve_field_is_refused_by_name),
        cmocka_unit_test(test_an_endpoint_round_trips_its_metric_in_thousandths),
        cmocka_unit_test(test_an_endpoint_not_ready_has_null_ready_ms_and_no_metric),
        cmocka_unit_test(test_every_bad_endpoint_field_is_refused_by_name),
        cmocka_unit_test(test_an_endpoint_that_cannot_be_written_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

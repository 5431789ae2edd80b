/* test_proto_router.c - the controller-router messages: a routing table and
 * a router's report decode to what they say, encode back to the same, keep
 * their defaults when keys are left out, and a bad value is refused by its
 * path with nothing kept. */
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
#define HASH         "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

#define EPA(addr, port, more)                                                                      \
    "{\"replica\": 1, \"job\": 41, \"attempt\": 2, \"addr\": \"" addr "\", \"port\": " port more "}"
#define EP(more)         EPA("10.0.0.5", "41234", more)
#define SVC(more)        "{\"name\": \"chat\"" more "}"
#define ROUTES(services) "{\"rev\": 7, \"services\": [" services "]}"
#define LOAD(more)                                                                                 \
    "{\"name\": \"chat\", \"concurrency\": 2.5, \"inflight\": 2, \"queued\": 1, \"requests\": "    \
    "9" more "}"
#define REPORT(services) "{\"router\": \"r1\", \"interval_ms\": 1000, \"services\": [" services "]}"

static json_t *load(const char *text)
{
    json_error_t je;
    json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        fail_msg("bad test JSON: %s: %s", je.text, text);
    return o;
}

static void test_a_routing_table_decodes_and_encodes_back_the_same(void **state)
{
    (void)state;
    json_t *o = load(
        ROUTES(SVC(", \"model\": \"llama\", \"hosts\": [\"chat.example.com\"], "
                   "\"key_hashes\": [\"" HASH "\"], \"concurrency_limit\": 4, "
                   "\"queue_limit\": 10, \"queue_timeout_ms\": 500, \"endpoints\": "
                   "[" EP(", \"state\": \"ready\"") ", " EP(", \"state\": \"draining\"") "]")));
    struct proto_routes m;
    char err[256] = "";
    if (proto_routes_decode(o, &m, err, sizeof(err)))
        fail_msg("%s", err);
    assert_int_equal(m.rev, 7);
    assert_int_equal(m.nservices, 1);
    const struct proto_route_service *s = &m.services[0];
    assert_string_equal(s->name, "chat");
    assert_string_equal(s->model, "llama");
    assert_int_equal(s->nhosts, 1);
    assert_string_equal(s->hosts[0], "chat.example.com");
    assert_null(s->hosts[1]);
    assert_int_equal(s->nkeys, 1);
    assert_string_equal(s->key_hashes[0], HASH);
    assert_int_equal(s->concurrency_limit, 4);
    assert_int_equal(s->queue_limit, 10);
    assert_int_equal(s->queue_timeout_ms, 500);
    assert_int_equal(s->nendpoints, 2);
    assert_int_equal(s->endpoints[0].job, 41);
    assert_int_equal(s->endpoints[0].attempt, 2);
    assert_int_equal(s->endpoints[0].port, 41234);
    assert_string_equal(s->endpoints[0].addr, "10.0.0.5");
    assert_int_equal(s->endpoints[0].state, PROTO_ENDPOINT_READY);
    assert_int_equal(s->endpoints[1].state, PROTO_ENDPOINT_DRAINING);
    json_t *back = NULL;
    assert_int_equal(proto_routes_encode(&m, &back), 0);
    assert_true(json_equal(o, back));
    proto_routes_release(&m);
    assert_null(m.services);
    json_decref(back);
    json_decref(o);
}

static void test_a_service_left_bare_takes_the_defaults(void **state)
{
    (void)state;
    json_t *o = load(ROUTES(SVC("")));
    struct proto_routes m;
    char err[256] = "";
    if (proto_routes_decode(o, &m, err, sizeof(err)))
        fail_msg("%s", err);
    const struct proto_route_service *s = &m.services[0];
    assert_string_equal(s->model, "chat"); /* the name */
    assert_int_equal(s->nhosts, 0);
    assert_non_null(s->hosts);
    assert_null(s->hosts[0]);
    assert_int_equal(s->nkeys, 0);
    assert_null(s->key_hashes[0]);
    assert_int_equal(s->concurrency_limit, 0);
    assert_int_equal(s->queue_limit, 1000);
    assert_int_equal(s->queue_timeout_ms, 60000);
    assert_int_equal(s->nendpoints, 0);
    proto_routes_release(&m);
    json_decref(o);
}

static void test_a_report_decodes_its_concurrency_in_thousandths_and_back(void **state)
{
    (void)state;
    json_t *o = load(REPORT(LOAD(", \"replicas\": [{\"job\": 41, \"attempt\": 2, \"inflight\": "
                                 "2, \"requests\": 9}]")));
    struct proto_router_report m;
    char err[256] = "";
    if (proto_router_report_decode(o, &m, err, sizeof(err)))
        fail_msg("%s", err);
    assert_string_equal(m.router, "r1");
    assert_int_equal(m.interval_ms, 1000);
    assert_int_equal(m.nservices, 1);
    assert_string_equal(m.services[0].name, "chat");
    assert_int_equal(m.services[0].concurrency_milli, 2500);
    assert_int_equal(m.services[0].inflight, 2);
    assert_int_equal(m.services[0].queued, 1);
    assert_int_equal(m.services[0].requests, 9);
    assert_int_equal(m.services[0].nreplicas, 1);
    assert_int_equal(m.services[0].replicas[0].job, 41);
    assert_int_equal(m.services[0].replicas[0].requests, 9);
    json_t *back = NULL;
    assert_int_equal(proto_router_report_encode(&m, &back), 0);
    assert_true(json_equal(o, back));
    proto_router_report_release(&m);
    json_decref(back);
    json_decref(o);
}

static void test_a_report_carries_its_answers_by_latency_when_it_has_them(void **state)
{
    (void)state;
    json_t *o = load(REPORT(LOAD(", \"latency_counts\": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, "
                                 "13, 4294967295], \"replicas\": []")));
    struct proto_router_report m;
    char err[256] = "";
    if (proto_router_report_decode(o, &m, err, sizeof(err)))
        fail_msg("%s", err);
    assert_true(m.services[0].has_latency);
    for (uint32_t k = 0; k + 1 < PROTO_LATENCY_BUCKETS; k++)
        assert_int_equal(m.services[0].latency[k], k);
    assert_int_equal(m.services[0].latency[PROTO_LATENCY_BUCKETS - 1], UINT32_MAX);
    json_t *back = NULL;
    assert_int_equal(proto_router_report_encode(&m, &back), 0);
    assert_true(json_equal(o, back));
    proto_router_report_release(&m);
    json_decref(back);
    json_decref(o);
    /* An older router's report has none, and encodes back without the key. */
    o = load(REPORT(LOAD("")));
    if (proto_router_report_decode(o, &m, err, sizeof(err)))
        fail_msg("%s", err);
    assert_false(m.services[0].has_latency);
    assert_int_equal(proto_router_report_encode(&m, &back), 0);
    assert_null(
        json_object_get(json_array_get(json_object_get(back, "services"), 0), "latency_counts"));
    proto_router_report_release(&m);
    json_decref(back);
    json_decref(o);
    /* The bounds rise. */
    for (size_t k = 1; k + 1 < PROTO_LATENCY_BUCKETS; k++)
        assert_true(proto_latency_bounds_s[k] > proto_latency_bounds_s[k - 1]);
}

static void test_an_encoder_refuses_a_missing_name(void **state)
{
    (void)state;
    struct proto_route_service s = {.name = NULL, .queue_timeout_ms = 1};
    struct proto_routes m = {.rev = 1, .services = &s, .nservices = 1};
    json_t *o = NULL;
    assert_int_equal(proto_routes_encode(&m, &o), GPO_EINVAL);
    assert_null(o);
    struct proto_load_service l = {.name = NULL};
    struct proto_router_report r = {
        .router = "r1", .interval_ms = 1, .services = &l, .nservices = 1};
    assert_int_equal(proto_router_report_encode(&r, &o), GPO_EINVAL);
    struct proto_route_endpoint ep = {.replica = 1, .addr = "a", .state = 9};
    struct proto_route_service s2 = {.name = "x", .endpoints = &ep, .nendpoints = 1};
    m.services = &s2;
    assert_int_equal(proto_routes_encode(&m, &o), GPO_EINVAL);
}

static const struct refused {
    bool report; /* a router's report, else a routing table */
    const char *text;
    int rc;
    const char *msg;
} refused[] = {
    {false, ROUTES(SVC(", \"endpoints\": [" EP("") ", " EPA("10.0.0.5", "0", "") "]")), GPO_ERANGE,
     "field 'services[0].endpoints[1].port': 0 is out of range 1..65535"},
    {false, ROUTES(SVC(", \"endpoints\": [" EP(", \"state\": \"gone\"") "]")), GPO_EINVAL,
     "'services[0].endpoints[0].state'"},
    {false, ROUTES(SVC(", \"endpoints\": [{\"replica\": 1}]")), GPO_EINVAL,
     "missing required field 'services[0].endpoints[0].job'"},
    {false, ROUTES(SVC(", \"endpoints\": [" EPA("a\\nb", "1", "") "]")), GPO_EINVAL,
     "'services[0].endpoints[0].addr'"},
    {false, ROUTES(SVC(", \"key_hashes\": [\"abc\"]")), GPO_ERANGE, "'services[0].key_hashes[0]'"},
    {false,
     ROUTES(
         SVC(", \"key_hashes\": [\"9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A"
             "08\"]")),
     GPO_EINVAL, "field 'services[0].key_hashes[0]': expected 64 lowercase hex digits"},
    {false, ROUTES(SVC("") ", " SVC("")), GPO_EINVAL,
     "field 'services[1].name': 'chat' is also services[0]'s"},
    {false, ROUTES(SVC(", \"queue_timeout_ms\": 0")), GPO_ERANGE, "'services[0].queue_timeout_ms'"},
    {false, ROUTES(SVC(", \"queue_limit\": 100001")), GPO_ERANGE, "'services[0].queue_limit'"},
    {false, ROUTES(SVC(", \"hosts\": [\"\"]")), GPO_ERANGE, "'services[0].hosts[0]'"},
    {false, ROUTES(SVC(", \"extra\": 1")), GPO_EINVAL, "unknown field 'services[0].extra'"},
    {false, "{\"rev\": -1, \"services\": []}", GPO_ERANGE, "'rev'"},
    {false, "{\"rev\": 1}", GPO_EINVAL, "missing required field 'services'"},
    {true,
     REPORT("{\"name\": \"chat\", \"concurrency\": -1, \"inflight\": 0, \"queued\": 0, "
            "\"requests\": 0}"),
     GPO_ERANGE, "'services[0].concurrency'"},
    {true,
     REPORT(LOAD(", \"replicas\": [{\"job\": 0, \"attempt\": 1, \"inflight\": 0, "
                 "\"requests\": 0}]")),
     GPO_ERANGE, "'services[0].replicas[0].job'"},
    {true, REPORT(LOAD(", \"latency_counts\": [1, 2]")), GPO_EINVAL,
     "field 'services[0].latency_counts': expected an array of 15 whole numbers"},
    {true, REPORT(LOAD(", \"latency_counts\": [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1]")),
     GPO_EINVAL, "'services[0].latency_counts'"},
    {true, REPORT(LOAD(", \"latency_counts\": \"many\"")), GPO_EINVAL,
     "'services[0].latency_counts'"},
    {true, "{\"router\": \"r1\", \"interval_ms\": 0, \"services\": []}", GPO_ERANGE,
     "'interval_ms'"},
    {true, "{\"router\": \"\", \"interval_ms\": 1, \"services\": []}", GPO_ERANGE, "'router'"},
};

static void test_every_bad_value_is_refused_by_its_path(void **state)
{
    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(refused); i++) {
        const struct refused *r = &refused[i];
        json_t *o = load(r->text);
        union {
            struct proto_routes routes;
            struct proto_router_report report;
        } m;
        memset(&m, 0x5a, sizeof(m));
        unsigned char before[sizeof(m)];
        memcpy(before, &m, sizeof(m));
        char err[256] = "";
        int rc = r->report ? proto_router_report_decode(o, &m.report, err, sizeof(err))
                           : proto_routes_decode(o, &m.routes, err, sizeof(err));
        if (rc != r->rc || !strstr(err, r->msg))
            fail_msg("case %zu: %d '%s', expected %d '%s'", i, rc, err, r->rc, r->msg);
        assert_memory_equal(&m, before, sizeof(m));
        json_decref(o);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_routing_table_decodes_and_encodes_back_the_same),
        cmocka_unit_test(test_a_service_left_bare_takes_the_defaults),
        cmocka_unit_test(test_a_report_decodes_its_concurrency_in_thousandths_and_back),
        cmocka_unit_test(test_a_report_carries_its_answers_by_latency_when_it_has_them),
        cmocka_unit_test(test_an_encoder_refuses_a_missing_name),
        cmocka_unit_test(test_every_bad_value_is_refused_by_its_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_router_table.c - the router's table (src/router/table.c): a new
 * snapshot keeps the counters of the services and endpoints it shares with
 * the one before and marks the others gone; lookups by name, host (port
 * aside, any case) and model (else name); API keys by their SHA-256; the
 * choice of an endpoint skips draining ones, full ones and the one to avoid,
 * and of two takes the one with fewer in flight. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "router/router.h"
#include "base/banned.h"

static struct rt_table *build(const char *text, const struct rt_table *old)
{
    json_error_t je;
    json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        fail_msg("bad test JSON: %s", je.text);
    struct proto_routes m;
    char err[256] = "";
    if (proto_routes_decode(o, &m, err, sizeof(err)))
        fail_msg("%s", err);
    json_decref(o);
    struct rt_table *t = NULL;
    assert_int_equal(rt_table_build(&m, old, &t), 0);
    proto_routes_release(&m);
    return t;
}

#define EP(job, port, state)                                                                       \
    "{\"replica\": " #job ", \"job\": " #job ", \"attempt\": 1, \"addr\": \"127.0.0.1\", "         \
    "\"port\": " #port ", \"state\": \"" state "\"}"

static const char *const two =
    "{\"rev\": 1, \"services\": [{\"name\": \"chat\", \"model\": \"llama\", \"hosts\": "
    "[\"Chat.Example.com\"], \"concurrency_limit\": 2, \"endpoints\": [" EP(
        1, 1001, "ready") ", " EP(2, 1002,
                                  "ready") ", " EP(3, 1003,
                                                   "draining") "]}, {\"name\": \"embed\"}]}";

static void test_a_new_snapshot_keeps_what_it_shares_and_marks_the_rest_gone(void **state)
{
    (void)state;
    struct rt_table *a = build(two, NULL);
    atomic_store(&a->services[0].eps[0].ep->inflight, 1);
    atomic_store(&a->services[0].stats->requests, 7);
    struct rt_table *b = build("{\"rev\": 2, \"services\": [{\"name\": \"chat\", \"endpoints\": "
                               "[" EP(1, 1001, "ready") "]}]}",
                               a);
    assert_ptr_equal(b->services[0].eps[0].ep, a->services[0].eps[0].ep);
    assert_int_equal(atomic_load(&b->services[0].eps[0].ep->inflight), 1);
    assert_ptr_equal(b->services[0].stats, a->services[0].stats);
    assert_false(atomic_load(&a->services[0].eps[0].ep->gone));
    assert_true(atomic_load(&a->services[0].eps[1].ep->gone));
    assert_true(atomic_load(&a->services[0].eps[2].ep->gone));
    rt_table_unref(a); /* b keeps what it shares */
    assert_int_equal(atomic_load(&b->services[0].stats->requests), 7);
    rt_table_unref(b);
}

static void test_lookups_by_name_host_and_model(void **state)
{
    (void)state;
    struct rt_table *t = build(two, NULL);
    assert_ptr_equal(rt_find_name(t, "chat/x", 4), &t->services[0]);
    assert_null(rt_find_name(t, "cha", 3));
    assert_ptr_equal(rt_find_host(t, "chat.example.COM:8081"), &t->services[0]);
    assert_null(rt_find_host(t, "chat.example.com.evil"));
    assert_null(rt_find_host(t, NULL));
    assert_ptr_equal(rt_find_model(t, "llama"), &t->services[0]);
    assert_ptr_equal(rt_find_model(t, "chat"), &t->services[0]); /* its name answers too */
    assert_ptr_equal(rt_find_model(t, "embed"), &t->services[1]);
    assert_null(rt_find_model(t, "gpt"));
    char names[64];
    rt_models_list(t, names, sizeof(names));
    assert_string_equal(names, "llama, embed");
    rt_table_unref(t);
}

static void test_an_api_key_opens_its_service_only(void **state)
{
    (void)state;
    uint8_t h[TOKEN_HASH_LEN];
    char hex[TOKEN_HASH_HEX_LEN + 1];
    assert_int_equal(token_hash("sk-1", h), 0);
    assert_int_equal(token_hash_hex(h, hex, sizeof(hex)), 0);
    char text[512];
    snprintf(text, sizeof(text),
             "{\"rev\": 1, \"services\": [{\"name\": \"k\", \"key_hashes\": [\"%s\"]}, "
             "{\"name\": \"open\"}]}",
             hex);
    struct rt_table *t = build(text, NULL);
    assert_true(rt_key_ok(&t->services[0], "sk-1"));
    assert_false(rt_key_ok(&t->services[0], "sk-2"));
    assert_false(rt_key_ok(&t->services[0], NULL));
    assert_false(rt_key_ok(&t->services[0], ""));
    assert_true(rt_key_ok(&t->services[1], NULL));
    rt_table_unref(t);
}

static void test_the_choice_skips_draining_full_and_avoided_endpoints(void **state)
{
    (void)state;
    struct rt_table *t = build(two, NULL);
    const struct rt_service *s = &t->services[0];
    struct rt_endpoint *e1 = s->eps[0].ep, *e2 = s->eps[1].ep, *e3 = s->eps[2].ep;
    uint64_t seed = 42;
    atomic_store(&e1->inflight, 1);
    for (int k = 0; k < 50; k++) /* of two, fewer in flight; never the draining one */
        assert_ptr_equal(rt_pick(s, NULL, &seed), e2);
    atomic_store(&e2->inflight, 2); /* at the limit */
    for (int k = 0; k < 50; k++)
        assert_ptr_equal(rt_pick(s, NULL, &seed), e1);
    assert_null(rt_pick(s, e1, &seed));
    atomic_store(&e1->inflight, 2);
    assert_null(rt_pick(s, NULL, &seed));
    atomic_store(&e1->inflight, 0);
    atomic_store(&e1->gone, true);
    assert_null(rt_pick(s, NULL, &seed));
    assert_false(atomic_load(&e3->gone));               /* draining: listed, never chosen */
    assert_null(rt_pick(&t->services[1], NULL, &seed)); /* no endpoint */
    rt_table_unref(t);
}

static void test_the_load_integral_is_in_flight_times_time(void **state)
{
    (void)state;
    struct rt_stats st = {0};
    rt_stats_load(&st, &st.inflight, 1);
    rt_stats_load(&st, &st.queued, 1);
    assert_int_equal(atomic_load(&st.inflight), 1);
    assert_int_equal(atomic_load(&st.queued), 1);
    int64_t before = atomic_load(&st.load_at);
    rt_stats_load(&st, &st.inflight, -1);
    int64_t after = atomic_load(&st.load_at);
    /* two held or in flight between the last two changes */
    assert_true(atomic_load(&st.load_us) >= (unsigned long long)(after - before) * 2);
    assert_int_equal(atomic_load(&st.inflight), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_new_snapshot_keeps_what_it_shares_and_marks_the_rest_gone),
        cmocka_unit_test(test_lookups_by_name_host_and_model),
        cmocka_unit_test(test_an_api_key_opens_its_service_only),
        cmocka_unit_test(test_the_choice_skips_draining_full_and_avoided_endpoints),
        cmocka_unit_test(test_the_load_integral_is_in_flight_times_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

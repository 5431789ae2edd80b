/* test_cli_apply.c - `gpuorch apply` without a server: the document's shape
 * (YAML with lines, JSON, every refusal before anything is sent), the merge
 * of the file's fields onto the server's object, and the comparison that
 * makes a second run change nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "cli/apply.h"
#include "cli/cli.h"
#include "base/banned.h"

static json_t *J(const char *text)
{
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    if (!v)
        fail_msg("bad test JSON: %s", text);
    return v;
}

static void documents_are_yaml_or_json_with_lines_for_messages(void **state)
{
    (void)state;
    const char *yaml = "# the cluster\n"
                       "pools:\n"
                       "  - name: main\n"
                       "teams:\n"
                       "  - name: research\n"
                       "    quotas:\n"
                       "      - {pool: main, guaranteed: 8}\n"
                       "users:\n";
    struct apply_doc d;
    char err[512];
    assert_int_equal(apply_doc_parse(yaml, strlen(yaml), "c.yaml", &d, err, sizeof(err)), 0);
    assert_int_equal(json_array_size(json_object_get(d.root, "teams")), 1);
    assert_int_equal(apply_doc_line(&d, "teams[0]"), 5);
    assert_int_equal(apply_doc_line(&d, "pools[0]"), 3);
    apply_doc_release(&d);

    /* JSON (tabs and all, which YAML refuses) reads too, without lines. */
    const char *json = "{\n\t\"priority_classes\": [{\"name\": \"high\", \"order\": 20}]\n}";
    assert_int_equal(apply_doc_parse(json, strlen(json), "c.json", &d, err, sizeof(err)), 0);
    assert_string_equal(
        json_string_value(json_object_get(
            json_array_get(json_object_get(d.root, "priority_classes"), 0), "name")),
        "high");
    apply_doc_release(&d);

    /* The cluster's settings: one object, not a list. */
    const char *set = "settings:\n  private_data: [jobs, usage]\npools: []\n";
    assert_int_equal(apply_doc_parse(set, strlen(set), "s.yaml", &d, err, sizeof(err)), 0);
    assert_int_equal(
        json_array_size(json_object_get(json_object_get(d.root, "settings"), "private_data")), 2);
    apply_doc_release(&d);
    apply_doc_release(NULL);
}

static void a_document_of_the_wrong_shape_is_refused_with_its_line(void **state)
{
    (void)state;
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"- name: main\n", "f.yaml: expected an object with settings, pools, priority_classes, "
                           "teams, users, prices, services or nodes"},
        {"pools: []\nteam:\n  - name: a\n",
         "f.yaml:2: unknown list 'team' (expected settings, pools, priority_classes, teams, "
         "users, prices, services or nodes)"},
        {"settings:\n  - private_data: true\n", "f.yaml:1: 'settings' must be an object"},
        {"teams:\n  name: a\n", "f.yaml:1: 'teams' must be a list of objects"},
        {"teams:\n  - weight: 2\n", "f.yaml:2: teams[0]: expected an object with a 'name'"},
        {"teams:\n  - name: ''\n", "f.yaml:2: teams[0]: expected an object with a 'name'"},
        {"teams:\n  - name: 7\n", "f.yaml:2: teams[0]: expected an object with a 'name'"},
        {"users:\n  - name: a\n    unix_user: a\n  - name: a\n    unix_user: b\n",
         "f.yaml:4: users[1]: 'a' is also users[0]"},
        {"pools:\n  - name: a\n  - name: b\n    name: c\n", "f.yaml:4: duplicate key"},
        {"pools: [\n", "f.yaml:2: invalid YAML"},
        {"", "f.yaml: the document is empty"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct apply_doc d = {.root = (json_t *)1};
        char err[512] = "";
        int rc =
            apply_doc_parse(cases[k].text, strlen(cases[k].text), "f.yaml", &d, err, sizeof(err));
        if (rc != GPO_EUSAGE || strncmp(err, cases[k].want, strlen(cases[k].want)) != 0)
            fail_msg("case %zu: rc %d, '%s'", k, rc, err);
        assert_ptr_equal(d.root, (json_t *)1);
    }
}

static void the_file_merges_onto_the_server_object(void **state)
{
    (void)state;
    json_t *cur = J("{\"name\": \"research\", \"weight\": 1, \"borrow_limit\": 4,"
                    " \"quotas\": [{\"pool\": \"main\", \"guaranteed\": 8, \"borrow_limit\": -1},"
                    "              {\"pool\": \"old\", \"guaranteed\": 1, \"borrow_limit\": -1}]}");
    json_t *file = J("{\"name\": \"research\", \"weight\": 2, \"borrow_limit\": null,"
                     " \"quotas\": [{\"pool\": \"main\", \"guaranteed\": 4, \"gpu_type\": null}]}");
    json_t *m = apply_merge(cur, file);
    /* weight from the file; borrow_limit removed; the file's list replaces the
     * server's, without its nulls. */
    json_t *want = J("{\"name\": \"research\", \"weight\": 2,"
                     " \"quotas\": [{\"pool\": \"main\", \"guaranteed\": 4}]}");
    assert_true(json_equal(m, want));
    json_decref(m);
    json_decref(want);
    /* Nothing on the server: the file without its nulls. */
    m = apply_merge(NULL, file);
    want = J("{\"name\": \"research\", \"weight\": 2,"
             " \"quotas\": [{\"pool\": \"main\", \"guaranteed\": 4}]}");
    assert_true(json_equal(m, want));
    json_decref(m);
    json_decref(want);
    /* Nested objects merge key by key. */
    json_t *a = J("{\"x\": {\"a\": 1, \"b\": 2}}"), *b = J("{\"x\": {\"b\": 3, \"a\": null}}");
    m = apply_merge(a, b);
    want = J("{\"x\": {\"b\": 3}}");
    assert_true(json_equal(m, want));
    json_decref(m);
    json_decref(want);
    json_decref(a);
    json_decref(b);
    json_decref(cur);
    json_decref(file);
}

static void an_object_is_unchanged_when_it_holds_what_the_file_says(void **state)
{
    (void)state;
    /* What GET answers after PUT {"quotas": [{"pool": "main", "guaranteed": 8}]}:
     * the API's defaults filled in, a whole number of GPUs as an integer. */
    json_t *server =
        J("{\"name\": \"r\", \"weight\": 1, \"borrow_limit\": -1,"
          " \"quotas\": [{\"pool\": \"main\", \"guaranteed\": 8, \"borrow_limit\": -1}]}");
    static const struct {
        const char *file;
        bool same;
    } cases[] = {
        {"{\"name\": \"r\", \"quotas\": [{\"pool\": \"main\", \"guaranteed\": 8}]}", true},
        {"{\"name\": \"r\", \"quotas\": [{\"pool\": \"main\", \"guaranteed\": 8.0}]}", true},
        {"{\"name\": \"r\", \"weight\": 1, \"borrow_limit\": -1}", true},
        {"{\"name\": \"r\", \"description\": null}", true},
        {"{\"name\": \"r\"}", true},
        {"{\"name\": \"r\", \"weight\": 2}", false},
        {"{\"name\": \"r\", \"borrow_limit\": null}", false},
        {"{\"name\": \"r\", \"quotas\": []}", false},
        {"{\"name\": \"r\", \"quotas\": [{\"pool\": \"main\", \"guaranteed\": 8,"
         " \"gpu_type\": \"A100\"}]}",
         false},
        {"{\"name\": \"r\", \"quotas\": [{\"pool\": \"main\", \"guaranteed\": 8}, {\"pool\": \"b\","
         " \"guaranteed\": 1}]}",
         false},
        {"{\"name\": \"r\", \"weight\": \"1\"}", false},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        json_t *f = J(cases[k].file);
        if (apply_subset(f, server) != cases[k].same)
            fail_msg("case %zu (%s): want %s", k, cases[k].file,
                     cases[k].same ? "same" : "changed");
        /* And what a PUT of the merge would leave is the same on a second look. */
        json_t *m = apply_merge(server, f);
        assert_true(apply_subset(f, m));
        json_decref(m);
        json_decref(f);
    }
    json_decref(server);
}

/* A pool's "mig": a layout replaces the server's (its counts are the whole
 * layout), the planner's settings merge, "off" is what a pool without one
 * shows, and durations compare by value. */
static void a_pools_mig_is_one_setting(void **state)
{
    (void)state;
    static const struct {
        const char *server, *file, *merged;
        bool same;
    } cases[] = {
        {"{\"name\": \"p\", \"mig\": {\"layout\": {\"1g.10gb\": 7}}}",
         "{\"name\": \"p\", \"mig\": {\"layout\": {\"3g.40gb\": 2}}}",
         "{\"name\": \"p\", \"mig\": {\"layout\": {\"3g.40gb\": 2}}}", false},
        {"{\"name\": \"p\", \"mig\": {\"layout\": {\"1g.10gb\": 2, \"3g.40gb\": 1}}}",
         "{\"name\": \"p\", \"mig\": {\"layout\": {\"1g.10gb\": 2}}}",
         "{\"name\": \"p\", \"mig\": {\"layout\": {\"1g.10gb\": 2}}}", false},
        {"{\"name\": \"p\", \"mig\": {\"dynamic\": true, \"settle\": \"30s\", \"hold\": \"10m\"}}",
         "{\"name\": \"p\", \"mig\": {\"layout\": \"all-1g.10gb\"}}",
         "{\"name\": \"p\", \"mig\": {\"layout\": \"all-1g.10gb\"}}", false},
        {"{\"name\": \"p\", \"mig\": {\"layout\": \"all-1g.10gb\"}}",
         "{\"name\": \"p\", \"mig\": {\"dynamic\": true, \"hold\": \"10m\"}}",
         "{\"name\": \"p\", \"mig\": {\"dynamic\": true, \"hold\": \"10m\"}}", false},
        {"{\"name\": \"p\", \"mig\": {\"dynamic\": true, \"settle\": \"30s\", \"hold\": \"10m\"}}",
         "{\"name\": \"p\", \"mig\": {\"dynamic\": true, \"settle\": 60}}",
         "{\"name\": \"p\", \"mig\": {\"dynamic\": true, \"settle\": 60, \"hold\": \"10m\"}}",
         false},
        {"{\"name\": \"p\", \"mig\": {\"dynamic\": true, \"settle\": \"30s\", \"hold\": \"5m\"}}",
         "{\"name\": \"p\", \"mig\": {\"dynamic\": true, \"settle\": 30, \"hold\": \"300s\"}}",
         NULL, true},
        {"{\"name\": \"p\", \"mig\": {\"layout\": {\"1g.10gb\": 7}}}",
         "{\"name\": \"p\", \"mig\": {\"layout\": {\"1g.10gb\": 7}}}", NULL, true},
        /* the server shows profiles in the catalogue's spelling */
        {"{\"name\": \"p\", \"mig\": {\"layout\": {\"1g.10gb+me\": 1, \"2g.20gb\": 1}}}",
         "{\"name\": \"p\", \"mig\": {\"layout\": {\"MIG 2G.20GB\": 1, \"1g.10gb.me\": 1}}}", NULL,
         true},
        {"{\"name\": \"p\", \"mig\": {\"layout\": {\"2g.20gb\": 1}}}",
         "{\"name\": \"p\", \"mig\": {\"layout\": {\"mig-2g.20gb\": 2}}}",
         "{\"name\": \"p\", \"mig\": {\"layout\": {\"mig-2g.20gb\": 2}}}", false},
        {"{\"name\": \"p\"}", "{\"name\": \"p\", \"mig\": \"off\"}", NULL, true},
        {"{\"name\": \"p\"}", "{\"name\": \"p\", \"mig\": false}", NULL, true},
        {"{\"name\": \"p\", \"mig\": {\"layout\": \"all-1g.10gb\"}}",
         "{\"name\": \"p\", \"mig\": \"off\"}", "{\"name\": \"p\", \"mig\": \"off\"}", false},
        {"{\"name\": \"p\", \"mig\": {\"dynamic\": true, \"hold\": \"5m\"}}",
         "{\"name\": \"p\", \"mig\": {\"dynamic\": true, \"hold\": \"6m\"}}",
         "{\"name\": \"p\", \"mig\": {\"dynamic\": true, \"hold\": \"6m\"}}", false},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        json_t *server = J(cases[k].server), *f = J(cases[k].file);
        if (apply_subset(f, server) != cases[k].same)
            fail_msg("case %zu (%s): want %s", k, cases[k].file,
                     cases[k].same ? "same" : "changed");
        json_t *m = apply_merge(server, f);
        if (cases[k].merged) {
            json_t *want = J(cases[k].merged);
            if (!json_equal(m, want)) {
                char *got = json_dumps(m, JSON_SORT_KEYS);
                fail_msg("case %zu: merged into %s", k, got);
            }
            json_decref(want);
        }
        assert_true(apply_subset(f, m));
        json_decref(m);
        json_decref(f);
        json_decref(server);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(documents_are_yaml_or_json_with_lines_for_messages),
        cmocka_unit_test(a_pools_mig_is_one_setting),
        cmocka_unit_test(a_document_of_the_wrong_shape_is_refused_with_its_line),
        cmocka_unit_test(the_file_merges_onto_the_server_object),
        cmocka_unit_test(an_object_is_unchanged_when_it_holds_what_the_file_says),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

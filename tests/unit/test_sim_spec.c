/* test_sim_spec.c - cluster specs: a YAML and a JSON spec read to the same
 * structs; every default; queue names that look like numbers kept as written;
 * every kind of bad field named by file, line (YAML) and path, with the spec
 * left empty; the caps; the shipped Helios spec; the cluster derived from a
 * hand-built trace; and scaling. */
#include <math.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "base/err.h"
#include "sim/spec.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static char err[512];

static int parse(struct sim_spec *s, const char *name, const char *text)
{
    memset(err, 'x', sizeof(err)); /* a message must overwrite this and end */
    return sim_spec_parse(s, text, strlen(text), name, err, sizeof(err));
}

static void assert_empty(const struct sim_spec *s)
{
    assert_null(s->pools);
    assert_null(s->teams);
    assert_int_equal(s->npools, 0);
    assert_int_equal(s->nteams, 0);
    assert_int_equal(s->unmapped_team, SIM_NONE);
}

/* An error: the code, one line naming what `want` says, the spec empty. */
static void assert_error(const struct sim_spec *s, int rc, int want_rc, const char *want,
                         const char *what)
{
    if (rc != want_rc || !strstr(err, want) || strchr(err, '\n') || !memchr(err, '\0', 512))
        fail_msg("%s: want %d '%s', got %d '%.512s'", what, want_rc, want, rc, err);
    assert_empty(s);
}

/* Every field, in YAML's forms: octal, hex, exponent, a !!str tag, flow style. */
static const char full_yaml[] = "# every field\n"
                                "pools:\n"
                                "  - name: a100\n"
                                "    nodes: 0o4\n"
                                "    gpus_per_node: 8\n"
                                "    gpu_type: !!str A100-80GB\n"
                                "    gpu_mem_gib: 79.5\n"
                                "    cpus: 0x60\n"
                                "    mem_gib: 1.00025e3\n"
                                "    nvlink: false\n"
                                "  - {name: t4, nodes: 10, gpus_per_node: 1, nvlink: True}\n"
                                "teams:\n"
                                "  - name: research\n"
                                "    queues: [r1, \"r2\"]\n"
                                "    weight: 3\n"
                                "    borrow_limit_gpus: 2.5\n"
                                "    quotas:\n"
                                "      - pool: a100\n"
                                "        guaranteed_gpus: 16.25\n"
                                "        borrow_limit_gpus: 0.0004\n"
                                "      - pool: t4\n"
                                "  - name: prod\n"
                                "    queues: []\n"
                                "    pool: t4\n"
                                "unmapped_queues: prod\n";

static const char full_json[] =
    "  {\"pools\": [{\"name\": \"a100\", \"nodes\": 4, \"gpus_per_node\": 8,\n"
    "    \"gpu_type\": \"A100-80GB\", \"gpu_mem_gib\": 79.5, \"cpus\": 96,\n"
    "    \"mem_gib\": 1000.25, \"nvlink\": false},\n"
    "   {\"name\": \"t4\", \"nodes\": 10, \"gpus_per_node\": 1, \"nvlink\": true}],\n"
    " \"teams\": [{\"name\": \"research\", \"queues\": [\"r1\", \"r2\"], \"weight\": 3,\n"
    "    \"borrow_limit_gpus\": 2.5, \"quotas\": [{\"pool\": \"a100\", \"guaranteed_gpus\": "
    "16.25,\n"
    "    \"borrow_limit_gpus\": 0.0004}, {\"pool\": \"t4\"}]},\n"
    "   {\"name\": \"prod\", \"queues\": [], \"pool\": \"t4\"}],\n"
    " \"unmapped_queues\": \"prod\"}\n";

static void assert_full_spec(const struct sim_spec *s)
{
    assert_int_equal(s->npools, 2);
    const struct sim_spec_pool *a = &s->pools[0], *t4 = &s->pools[1];
    assert_string_equal(a->name, "a100");
    assert_int_equal(a->nodes, 4);
    assert_int_equal(a->gpus_per_node, 8);
    assert_string_equal(a->gpu_type, "A100-80GB");
    assert_int_equal(a->gpu_mem_mib, 81408); /* 79.5 GiB */
    assert_int_equal(a->cpus, 96);
    assert_int_equal(a->mem_mib, 1024256); /* 1000.25 GiB */
    assert_false(a->nvlink);
    assert_string_equal(t4->name, "t4");
    assert_int_equal(t4->nodes, 10);
    assert_int_equal(t4->gpus_per_node, 1);
    assert_true(t4->nvlink);
    assert_int_equal(t4->cpus, 8); /* the defaults */
    assert_int_equal(s->nteams, 2);
    const struct sim_spec_team *r = &s->teams[0], *p = &s->teams[1];
    assert_string_equal(r->name, "research");
    assert_int_equal(r->nqueues, 2);
    assert_string_equal(r->queues[0], "r1");
    assert_string_equal(r->queues[1], "r2");
    assert_int_equal(r->weight, 3);
    assert_int_equal(r->borrow_limit_milli, 2500);
    assert_int_equal(r->nquotas, 2);
    assert_int_equal(r->quotas[0].pool, 0);
    assert_int_equal(r->quotas[0].guaranteed_milli, 16250);
    assert_int_equal(r->quotas[0].borrow_limit_milli, 0); /* 0.4 milli rounds to 0 */
    assert_int_equal(r->quotas[1].pool, 1);
    assert_int_equal(r->quotas[1].guaranteed_milli, 0);
    assert_int_equal(r->quotas[1].borrow_limit_milli, -1);
    assert_int_equal(r->pool, SIM_NONE); /* no pool: any */
    assert_string_equal(p->name, "prod");
    assert_int_equal(p->nqueues, 0);
    assert_int_equal(p->pool, 1);
    assert_int_equal(s->unmapped_team, 1);
}

static void test_yaml_and_json_give_the_same_spec(void **state)
{
    (void)state;
    struct sim_spec y, j;
    assert_int_equal(parse(&y, "t.yaml", full_yaml), 0);
    assert_string_equal(err, "");
    assert_full_spec(&y);
    assert_int_equal(parse(&j, "t.json", full_json), 0);
    assert_full_spec(&j);
    sim_spec_release(&y);
    sim_spec_release(&j);
    assert_empty(&y);
    sim_spec_release(NULL);
    /* A UTF-8 byte order mark before either is skipped. */
    char bom[sizeof(full_yaml) + sizeof(full_json) + 3] = "\xef\xbb\xbf";
    memcpy(bom + 3, full_json, sizeof(full_json));
    assert_int_equal(parse(&j, "t.json", bom), 0);
    assert_full_spec(&j);
    sim_spec_release(&j);
    /* ... and the text after it is still read as JSON, where a queue is a string. */
    static const char typed[] =
        "{\"pools\": [{\"name\": \"p\", \"nodes\": 1, \"gpus_per_node\": 1}],"
        " \"teams\": [{\"name\": \"t\", \"queues\": [7]}]}";
    memcpy(bom + 3, typed, sizeof(typed));
    assert_error(&j, parse(&j, "t.json", bom), GPO_EINVAL, "t.json: teams[0].queues[0]: expected",
                 "bom");
    memcpy(bom + 3, full_yaml, sizeof(full_yaml));
    assert_int_equal(parse(&y, "t.yaml", bom), 0);
    assert_full_spec(&y);
    sim_spec_release(&y);
}

static size_t allocs_left;

static void *failing_malloc(size_t n)
{
    if (allocs_left == 0)
        return NULL;
    allocs_left--;
    return malloc(n);
}

/* Each of jansson's allocations in turn fails: out of memory, the spec
 * empty, nothing leaked (the sanitizer checks), until all succeed. */
static void parse_under_failing_allocations(const char *name, const char *text)
{
    for (size_t n = 0;; n++) {
        struct sim_spec s;
        allocs_left = n;
        json_set_alloc_funcs(failing_malloc, free);
        int rc = parse(&s, name, text);
        json_set_alloc_funcs(malloc, free);
        if (rc == 0) {
            assert_true(n > 10);
            assert_full_spec(&s);
            sim_spec_release(&s);
            return;
        }
        char what[64];
        snprintf(what, sizeof(what), "%s, allocation %zu failing", name, n);
        /* jansson's lexer reports some failed allocations as bad syntax */
        if (rc == GPO_EINVAL && strstr(err, "invalid JSON"))
            assert_error(&s, rc, GPO_EINVAL, "invalid JSON", what);
        else
            assert_error(&s, rc, GPO_ENOMEM, "out of memory", what);
    }
}

static void test_out_of_memory_leaves_the_spec_empty(void **state)
{
    (void)state;
    parse_under_failing_allocations("t.yaml", full_yaml);
    parse_under_failing_allocations("t.json", full_json);
}

static void test_omitted_fields_take_their_defaults(void **state)
{
    (void)state;
    struct sim_spec s;
    assert_int_equal(parse(&s, "t.yaml",
                           "pools: [{name: p, nodes: 3, gpus_per_node: 4}]\n"
                           "teams: [{name: t, quotas: [{pool: p}]}]\n"),
                     0);
    const struct sim_spec_pool *p = &s.pools[0];
    assert_string_equal(p->gpu_type, "GPU");
    assert_int_equal(p->gpu_mem_mib, 80 * 1024);
    assert_int_equal(p->cpus, 4 * 8);
    assert_int_equal(p->mem_mib, 4 * 64 * 1024);
    assert_true(p->nvlink);
    const struct sim_spec_team *t = &s.teams[0];
    assert_int_equal(t->weight, 1);
    assert_int_equal(t->nqueues, 0);
    assert_int_equal(t->borrow_limit_milli, -1);
    assert_int_equal(t->quotas[0].guaranteed_milli, 0);
    assert_int_equal(t->quotas[0].borrow_limit_milli, -1);
    assert_int_equal(s.unmapped_team, SIM_NONE);
    sim_spec_release(&s);
    /* "drop" says the same as leaving it out; JSON has the same defaults. */
    assert_int_equal(parse(&s, "t.json",
                           "{\"pools\": [{\"name\": \"p\", \"nodes\": 1, \"gpus_per_node\": 2}],"
                           " \"teams\": [{\"name\": \"t\"}], \"unmapped_queues\": \"drop\"}"),
                     0);
    assert_int_equal(s.unmapped_team, SIM_NONE);
    assert_int_equal(s.pools[0].cpus, 16);
    assert_int_equal(s.pools[0].mem_mib, 2 * 64 * 1024);
    assert_int_equal(s.teams[0].weight, 1);
    sim_spec_release(&s);
}

static void test_queue_names_that_look_like_numbers_stay_as_written(void **state)
{
    (void)state;
    struct sim_spec s;
    static const char *const want[] = {"6214e9", "103959", "0x1F", "1.50", "true", "~",     "",
                                       "007",    "-0",     ".inf", "null", "2e",   "1_000", "0o17"};
    assert_int_equal(parse(&s, "t.yaml",
                           "pools: [{name: p, nodes: 1, gpus_per_node: 1}]\n"
                           "teams:\n"
                           "  - name: t\n"
                           "    queues: [6214e9, 103959, 0x1F, 1.50, true, ~, '', '007', -0,\n"
                           "             .inf, null, 2e, 1_000, 0o17]\n"),
                     0);
    assert_int_equal(s.teams[0].nqueues, ARRAY_LEN(want));
    for (size_t k = 0; k < ARRAY_LEN(want); k++)
        assert_string_equal(s.teams[0].queues[k], want[k]);
    sim_spec_release(&s);
    /* The text is the name: 103959 and "103959" are one queue. */
    int rc = parse(&s, "t.yaml",
                   "pools: [{name: p, nodes: 1, gpus_per_node: 1}]\n"
                   "teams:\n"
                   "  - {name: a, queues: [103959]}\n"
                   "  - {name: b, queues: ['103959']}\n");
    assert_error(&s, rc, GPO_EINVAL,
                 "t.yaml:4: teams[1].queues[0]: queue '103959' already belongs to team 'a'",
                 "same text");
    /* JSON has types: a queue is a string. */
    rc = parse(&s, "t.json",
               "{\"pools\": [{\"name\": \"p\", \"nodes\": 1, \"gpus_per_node\": 1}],"
               " \"teams\": [{\"name\": \"t\", \"queues\": [\"a\", 103959]}]}");
    assert_error(&s, rc, GPO_EINVAL,
                 "t.json: teams[0].queues[1]: expected a queue name (a string of at most 1024 "
                 "bytes), got 103959",
                 "json number");
}

/* A one-pool, one-team spec with `field: value` added to the pool (team
 * when `team`); *s parsed from it, the return code returned. */
static int parse_field(struct sim_spec *s, bool team, const char *field, const char *value)
{
    char text[384], extra[128];
    snprintf(extra, sizeof(extra), ", %s: %s", field, value);
    snprintf(text, sizeof(text),
             "pools:\n  - {name: p, nodes: 1, gpus_per_node: 1%s}\n"
             "teams:\n  - {name: t%s}\n",
             team ? "" : extra, team ? extra : "");
    return parse(s, "t.yaml", text);
}

static void test_yaml_scalars_follow_the_core_schema(void **state)
{
    (void)state;
    static const struct {
        bool team;
        const char *field, *value;
        int64_t want; /* the stored value */
    } ok[] = {
        {false, "nvlink", "true", 1},
        {false, "nvlink", "True", 1},
        {false, "nvlink", "TRUE", 1},
        {false, "nvlink", "false", 0},
        {false, "nvlink", "False", 0},
        {false, "nvlink", "FALSE", 0},
        {true, "weight", "0o17", 15},
        {true, "weight", "0x1F", 31},
        {true, "weight", "+12", 12},
        {true, "weight", "017", 17},
        {false, "gpu_mem_gib", ".5", 512},
        {false, "gpu_mem_gib", "1.", 1024},
        {false, "gpu_mem_gib", "+1.5e1", 15360},
        {false, "gpu_mem_gib", "1E1", 10240},
        {false, "gpu_mem_gib", "2", 2048},
        {true, "borrow_limit_gpus", "0.0015", 2},
    };
    for (size_t k = 0; k < ARRAY_LEN(ok); k++) {
        struct sim_spec s;
        if (parse_field(&s, ok[k].team, ok[k].field, ok[k].value) != 0)
            fail_msg("%s: %s: %s", ok[k].field, ok[k].value, err);
        const struct sim_spec_pool *p = &s.pools[0];
        const struct sim_spec_team *t = &s.teams[0];
        int64_t got = strcmp(ok[k].field, "nvlink") == 0        ? p->nvlink
                      : strcmp(ok[k].field, "weight") == 0      ? t->weight
                      : strcmp(ok[k].field, "gpu_mem_gib") == 0 ? p->gpu_mem_mib
                                                                : t->borrow_limit_milli;
        if (got != ok[k].want)
            fail_msg("%s: %s: want %lld, got %lld", ok[k].field, ok[k].value, (long long)ok[k].want,
                     (long long)got);
        sim_spec_release(&s);
    }
    /* YAML 1.1's booleans and 1.2's nulls are not booleans, and messages
     * show a value as it was written. */
    static const struct {
        const char *value, *want;
    } bad[] = {{"yes", "got a string ('yes')"},
               {"on", "got a string ('on')"},
               {"y", "got a string ('y')"},
               {"~", "got ~"},
               {"null", "got null"},
               {"Null", "got Null"},
               {"NULL", "got NULL"},
               {"", "got null"},
               {"'true'", "got a string ('true')"},
               {"1", "got 1"}};
    for (size_t k = 0; k < ARRAY_LEN(bad); k++) {
        struct sim_spec s;
        char want[128];
        snprintf(want, sizeof(want), "t.yaml:2: pools[0].nvlink: expected true or false, %s",
                 bad[k].want);
        assert_error(&s, parse_field(&s, false, "nvlink", bad[k].value), GPO_EINVAL, want,
                     bad[k].value);
    }
}

struct bad {
    const char *text;
    int rc;
    const char *want; /* in the message */
};

#define POOL  "pools:\n  - name: p\n    nodes: 2\n    gpus_per_node: 8\n" /* lines 1-4 */
#define TEAMS "teams:\n  - name: t\n    queues: [q]\n"

/* Each spec has one thing wrong; the message names file, line and path. */
static const struct bad bad_yaml[] = {
    {"pools:\n  - name: p\n    nodes: 2\n    gpus_per_node: 8\n    gpu: 4\n" TEAMS, GPO_EINVAL,
     "t.yaml:5: pools[0].gpu: unknown field (expected one of: name, nodes, gpus_per_node, "
     "gpu_type, gpu_mem_gib, cpus, mem_gib, nvlink)"},
    {POOL TEAMS "version: 2\n", GPO_EINVAL, "t.yaml:8: version: unknown field"},
    {POOL "teams:\n  - name: t\n    queue: [q]\n", GPO_EINVAL, "t.yaml:7: teams[0].queue: unknown"},
    {POOL TEAMS "    quotas: [{pool: p, guarantee: 1}]\n", GPO_EINVAL,
     "t.yaml:8: teams[0].quotas[0].guarantee: unknown field"},
    {"pools:\n  - name: p\n    nodes: two\n    gpus_per_node: 8\n" TEAMS, GPO_EINVAL,
     "t.yaml:3: pools[0].nodes: expected an integer from 1 to 1000000, got a string ('two')"},
    {"pools:\n  - name: p\n    nodes: 0\n    gpus_per_node: 8\n" TEAMS, GPO_EINVAL,
     "t.yaml:3: pools[0].nodes: expected an integer from 1 to 1000000, got 0"},
    {"pools:\n  - name: p\n    nodes: 1.5\n    gpus_per_node: 8\n" TEAMS, GPO_EINVAL,
     "t.yaml:3: pools[0].nodes: expected an integer from 1 to 1000000, got 1.5"},
    {"pools:\n  - name: p\n    nodes: 1000001\n    gpus_per_node: 8\n" TEAMS, GPO_E2BIG,
     "t.yaml:3: pools[0].nodes: expected an integer from 1 to 1000000, got 1000001"},
    {"pools:\n  - name: p\n    nodes: 2\n    gpus_per_node: 65\n" TEAMS, GPO_E2BIG,
     "t.yaml:4: pools[0].gpus_per_node: expected an integer from 1 to 64, got 65"},
    {"pools:\n  - name: p\n    nodes: 2\n    gpus_per_node: 0\n" TEAMS, GPO_EINVAL,
     "t.yaml:4: pools[0].gpus_per_node: expected an integer from 1 to 64, got 0"},
    {"pools:\n  - name: p\n    gpus_per_node: 8\n" TEAMS, GPO_EINVAL,
     "t.yaml:2: pools[0].nodes: required field missing"},
    {"pools:\n  - nodes: 1\n    gpus_per_node: 8\n" TEAMS, GPO_EINVAL,
     "t.yaml:2: pools[0].name: required field missing"},
    {POOL "    gpu_mem_gib: 0\n" TEAMS, GPO_EINVAL,
     "t.yaml:5: pools[0].gpu_mem_gib: expected a number > 0 and <= 4096, got 0"},
    {POOL "    gpu_mem_gib: 0.0001\n" TEAMS, GPO_EINVAL,
     "t.yaml:5: pools[0].gpu_mem_gib: 0.0001 is less than one MiB"},
    {POOL "    gpu_mem_gib: .inf\n" TEAMS, GPO_EINVAL,
     "t.yaml:5: pools[0].gpu_mem_gib: expected a number > 0 and <= 4096, got a string ('.inf')"},
    {POOL "    mem_gib: -4\n" TEAMS, GPO_EINVAL,
     "t.yaml:5: pools[0].mem_gib: expected a number > 0 and <= 1048576, got -4"},
    {POOL "    cpus: 0x0\n" TEAMS, GPO_EINVAL,
     "t.yaml:5: pools[0].cpus: expected an integer from 1 to 1048576, got 0x0"},
    {POOL "    nvlink: yes\n" TEAMS, GPO_EINVAL,
     "t.yaml:5: pools[0].nvlink: expected true or false, got a string ('yes')"},
    {POOL "    gpu_type: \"\"\n" TEAMS, GPO_EINVAL,
     "t.yaml:5: pools[0].gpu_type: expected a name (1 to 128 bytes, no control characters), got "
     "a string ('')"},
    {"pools:\n  - name: \"a\\tb\"\n    nodes: 2\n    gpus_per_node: 8\n" TEAMS, GPO_EINVAL,
     "t.yaml:2: pools[0].name: expected a name"},
    {"pools:\n  - name: [p]\n    nodes: 2\n    gpus_per_node: 8\n" TEAMS, GPO_EINVAL,
     "t.yaml:2: pools[0].name: expected a name (1 to 128 bytes, no control characters), got a "
     "list"},
    {POOL "  - {name: p, nodes: 1, gpus_per_node: 1}\n" TEAMS, GPO_EINVAL,
     "t.yaml:5: pools[1].name: a second pool named 'p'"},
    {POOL TEAMS "  - name: t\n", GPO_EINVAL, "t.yaml:8: teams[1].name: a second team named 't'"},
    {POOL TEAMS "    quotas:\n      - pool: x\n", GPO_EINVAL,
     "t.yaml:9: teams[0].quotas[0].pool: no pool named 'x'"},
    {POOL TEAMS "    pool: x\n", GPO_EINVAL, "t.yaml:8: teams[0].pool: no pool named 'x'"},
    {POOL TEAMS "    pool: [p]\n", GPO_EINVAL, "t.yaml:8: teams[0].pool: expected a string"},
    {POOL TEAMS "    quotas:\n      - pool: p\n      - pool: p\n", GPO_EINVAL,
     "t.yaml:10: teams[0].quotas[1].pool: a second quota for pool 'p'"},
    {POOL TEAMS "    quotas: [{pool: p, guaranteed_gpus: -1}]\n", GPO_EINVAL,
     "t.yaml:8: teams[0].quotas[0].guaranteed_gpus: expected a number from 0 to 64000000, got -1"},
    {POOL TEAMS "    quotas: [{pool: p, borrow_limit_gpus: '1'}]\n", GPO_EINVAL,
     "t.yaml:8: teams[0].quotas[0].borrow_limit_gpus: expected a number from 0 to 64000000, got "
     "a string ('1')"},
    {POOL TEAMS "    quotas: [{guaranteed_gpus: 1}]\n", GPO_EINVAL,
     "t.yaml:8: teams[0].quotas[0].pool: required field missing"},
    {POOL TEAMS "    quotas: {pool: p}\n", GPO_EINVAL,
     "t.yaml:8: teams[0].quotas: expected a list, got a mapping"},
    {POOL TEAMS "    borrow_limit_gpus: 64000001\n", GPO_EINVAL,
     "t.yaml:8: teams[0].borrow_limit_gpus: expected a number from 0 to 64000000, got 64000001"},
    {POOL TEAMS "    weight: 0\n", GPO_EINVAL,
     "t.yaml:8: teams[0].weight: expected an integer from 1 to 1000000, got 0"},
    {POOL TEAMS "    weight: null\n", GPO_EINVAL,
     "t.yaml:8: teams[0].weight: expected an integer from 1 to 1000000, got null"},
    {POOL TEAMS "  - name: u\n    queues:\n      - a\n      - q\n", GPO_EINVAL,
     "t.yaml:11: teams[1].queues[1]: queue 'q' already belongs to team 't'"},
    {POOL "teams:\n  - name: t\n    queues: [q, r, q]\n", GPO_EINVAL,
     "t.yaml:7: teams[0].queues[2]: queue 'q' listed twice"},
    {POOL "teams:\n  - name: t\n    queues: [[q]]\n", GPO_EINVAL,
     "t.yaml:7: teams[0].queues[0]: expected a queue name (a string of at most 1024 bytes), got a "
     "list"},
    {POOL "teams:\n  - name: t\n    queues: q\n", GPO_EINVAL,
     "t.yaml:7: teams[0].queues: expected a list, got a string ('q')"},
    {POOL TEAMS "unmapped_queues: nobody\n", GPO_EINVAL,
     "t.yaml:8: unmapped_queues: expected 'drop' or the name of a team, got 'nobody'"},
    {POOL TEAMS "unmapped_queues: 5\n", GPO_EINVAL,
     "t.yaml:8: unmapped_queues: expected a string (1 to 128 bytes), got 5"},
    {"pools: []\n" TEAMS, GPO_EINVAL, "t.yaml:1: pools: expected at least one entry"},
    {"pools: {}\n" TEAMS, GPO_EINVAL, "t.yaml:1: pools: expected a list, got a mapping"},
    {"pools: [3]\n" TEAMS, GPO_EINVAL,
     "t.yaml:1: pools[0]: expected a mapping (name, nodes, gpus_per_node, gpu_type, gpu_mem_gib, "
     "cpus, mem_gib, nvlink), got 3"},
    {"# comment\n" POOL, GPO_EINVAL, "t.yaml:2: teams: required field missing"},
    {POOL "teams: []\n", GPO_EINVAL, "t.yaml:5: teams: expected at least one entry"},
    {"- a\n- b\n", GPO_EINVAL,
     "t.yaml:1: expected a mapping (pools, teams, unmapped_queues), got a list"},
    {"just text\n", GPO_EINVAL,
     "t.yaml:1: expected a mapping (pools, teams, unmapped_queues), got "
     "a string ('just text')"},
};

/* The same mistakes in JSON: no line, the same path. */
static const struct bad bad_json[] = {
    {"{\"pools\": [{\"name\": \"p\", \"nodes\": 2, \"gpus_per_node\": 8, \"gpus\": 1}]}",
     GPO_EINVAL, "t.json: pools[0].gpus: unknown field"},
    {"{\"pools\": [{\"name\": \"p\", \"nodes\": \"2\", \"gpus_per_node\": 8}]}", GPO_EINVAL,
     "t.json: pools[0].nodes: expected an integer from 1 to 1000000, got a string ('2')"},
    {"{\"pools\": [{\"name\": \"p\", \"nodes\": 2.0, \"gpus_per_node\": 8}]}", GPO_EINVAL,
     "t.json: pools[0].nodes: expected an integer from 1 to 1000000, got 2"},
    {"{\"pools\": [{\"name\": \"p\", \"nodes\": 2, \"gpus_per_node\": 8}],"
     " \"teams\": [{\"name\": \"t\", \"quotas\": [{\"pool\": \"x\"}]}]}",
     GPO_EINVAL, "t.json: teams[0].quotas[0].pool: no pool named 'x'"},
    {"{\"pools\": [{\"name\": \"p\", \"nodes\": 2, \"gpus_per_node\": 8}],"
     " \"teams\": [{\"name\": \"t\", \"weight\": true}]}",
     GPO_EINVAL, "t.json: teams[0].weight: expected an integer from 1 to 1000000, got true"},
    {"{\"pools\": [{\"name\": \"p\", \"nodes\": 2, \"gpus_per_node\": 8}],"
     " \"teams\": [{\"name\": \"t\"}], \"unmapped_queues\": \"u\"}",
     GPO_EINVAL, "t.json: unmapped_queues: expected 'drop' or the name of a team, got 'u'"},
    {"{\"pools\": [{\"name\": \"p\", \"nodes\": 2, \"gpus_per_node\": 8}],"
     " \"teams\": [{\"name\": \"t\", \"queues\": [\"a\"]}, {\"name\": \"u\", \"queues\": "
     "[\"a\"]}]}",
     GPO_EINVAL, "t.json: teams[1].queues[0]: queue 'a' already belongs to team 't'"},
};

static void check_cases(const struct bad *cases, size_t n, const char *name)
{
    for (size_t k = 0; k < n; k++) {
        struct sim_spec s;
        char what[32];
        memset(&s, 0xab, sizeof(s)); /* *s need not be initialised */
        snprintf(what, sizeof(what), "%s case %zu", name, k);
        assert_error(&s, parse(&s, name, cases[k].text), cases[k].rc, cases[k].want, what);
    }
}

static void test_bad_yaml_fields_name_line_and_path(void **state)
{
    (void)state;
    check_cases(bad_yaml, ARRAY_LEN(bad_yaml), "t.yaml");
}

static void test_bad_json_fields_name_the_path(void **state)
{
    (void)state;
    check_cases(bad_json, ARRAY_LEN(bad_json), "t.json");
}

static void test_bad_yaml_and_json_syntax(void **state)
{
    (void)state;
    static const struct bad cases[] = {
        {"pools:\n  - name: p\n - nodes: 1\n", GPO_EINVAL, "t.yaml:3: invalid YAML: "},
        {"pools: [a\n", GPO_EINVAL, "t.yaml:2: invalid YAML: "},
        {"pools:\n  - name: p\n    name: q\n", GPO_EINVAL,
         "t.yaml:3: pools[0].name: duplicate key"},
        {"pools: &x [a]\nteams: *x\n", GPO_EINVAL,
         "t.yaml:1: pools: anchors and aliases are not supported"},
        {"pools: [a]\nteams: *x\n", GPO_EINVAL,
         "t.yaml:2: teams: anchors and aliases are not supported"},
        {"pools: !!int 3\n", GPO_EINVAL, "t.yaml:1: pools: tag 'tag:yaml.org,2002:int'"},
        {"? [a]\n: b\n", GPO_EINVAL, "t.yaml:1: a key must be a scalar"},
        {"pools: \"a\\0b\"\n", GPO_EINVAL, "t.yaml:1: pools: a NUL character in a scalar"},
        {"a: 1\n---\nb: 2\n", GPO_EINVAL, "t.yaml:2: more than one YAML document"},
        {"", GPO_EINVAL, "t.yaml: the document is empty"},
        {"# only a comment\n", GPO_EINVAL, "t.yaml: the document is empty"},
        {"a: [[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]\n", GPO_EINVAL,
         "t.yaml:1: a[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]: nested more than 16 levels "
         "deep"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: 1\n",
         GPO_EINVAL, "t.yaml:1: a key longer than 64 bytes"},
    };
    check_cases(cases, ARRAY_LEN(cases), "t.yaml");
    static const struct bad json[] = {
        {"{\"pools\": [],\n \"pools\": []}", GPO_EINVAL, "t.json:2: invalid JSON: duplicate"},
        {"{\"pools\": [}", GPO_EINVAL, "t.json:1: invalid JSON: "},
        {" \n{\"a\": \"\\u0000\"}", GPO_EINVAL, "t.json:2: invalid JSON: "},
    };
    check_cases(json, ARRAY_LEN(json), "t.json");
    /* A name left out is "spec"; a NULL text is empty; err NULL is fine. */
    struct sim_spec s;
    int rc = sim_spec_parse(&s, "a: [", 4, NULL, err, sizeof(err));
    assert_error(&s, rc, GPO_EINVAL, "spec:", "no name");
    rc = sim_spec_parse(&s, NULL, 5, "t.yaml", err, sizeof(err));
    assert_error(&s, rc, GPO_EINVAL, "t.yaml: the document is empty", "NULL text");
    assert_int_equal(sim_spec_parse(&s, "x", 1, "t.yaml", NULL, 0), GPO_EINVAL);
    assert_empty(&s);
    /* A short buffer still gets a terminated message. */
    char small[8];
    assert_int_equal(sim_spec_parse(&s, "x", 1, "t.yaml", small, sizeof(small)), GPO_EINVAL);
    assert_string_equal(small, "t.yaml:");
}

/* A JSON spec with `npools` pools of `nodes` nodes and `nteams` teams of
 * `nq` queues each (queue names unique unless `shared`). Caller frees. */
static char *big_json(size_t npools, unsigned nodes, size_t nteams, size_t nq, int shared)
{
    size_t cap = 64 + npools * 64 + nteams * (48 + nq * 16), n = 0;
    char *b = malloc(cap);
    assert_non_null(b);
    n += (size_t)snprintf(b + n, cap - n, "{\"pools\": [");
    for (size_t p = 0; p < npools; p++)
        n += (size_t)snprintf(b + n, cap - n,
                              "%s{\"name\": \"p%zu\", \"nodes\": %u, "
                              "\"gpus_per_node\": 8}",
                              p ? "," : "", p, nodes);
    n += (size_t)snprintf(b + n, cap - n, "], \"teams\": [");
    for (size_t t = 0; t < nteams; t++) {
        n += (size_t)snprintf(b + n, cap - n, "%s{\"name\": \"t%zu\", \"queues\": [", t ? "," : "",
                              t);
        for (size_t q = 0; q < nq; q++)
            n += (size_t)snprintf(b + n, cap - n, "%s\"q%zu\"", q ? "," : "",
                                  shared ? q : t * nq + q);
        n += (size_t)snprintf(b + n, cap - n, "]}");
    }
    snprintf(b + n, cap - n, "]}");
    assert_true(n < cap - 2);
    return b;
}

static void test_caps_are_limits(void **state)
{
    (void)state;
    struct sim_spec s;
    char *text = big_json(SIM_SPEC_MAX_POOLS, 1, 1, 1, 0);
    assert_int_equal(parse(&s, "t.json", text), 0); /* at the caps: fine */
    assert_int_equal(s.npools, SIM_SPEC_MAX_POOLS);
    sim_spec_release(&s);
    free(text);
    text = big_json(SIM_SPEC_MAX_POOLS + 1, 1, 1, 1, 0);
    assert_error(&s, parse(&s, "t.json", text), GPO_E2BIG, "t.json: pools: more than 1024 entries",
                 "pools");
    free(text);
    text = big_json(2, 500000, 1, 1, 0);
    assert_int_equal(parse(&s, "t.json", text), 0);
    sim_spec_release(&s);
    free(text);
    text = big_json(3, 500000, 1, 1, 0);
    assert_error(&s, parse(&s, "t.json", text), GPO_E2BIG,
                 "t.json: pools[2].nodes: more than 1000000 nodes in all pools", "nodes");
    free(text);
    text = big_json(1, 1, SIM_SPEC_MAX_TEAMS + 1, 0, 0);
    assert_error(&s, parse(&s, "t.json", text), GPO_E2BIG, "t.json: teams: more than 4096 entries",
                 "teams");
    free(text);
    text = big_json(1, 1, 2, SIM_SPEC_MAX_QUEUES / 2, 0);
    assert_int_equal(parse(&s, "t.json", text), 0);
    assert_int_equal(s.teams[1].nqueues, SIM_SPEC_MAX_QUEUES / 2);
    assert_string_equal(s.teams[1].queues[SIM_SPEC_MAX_QUEUES / 2 - 1], "q99999");
    sim_spec_release(&s);
    free(text);
    text = big_json(1, 1, 3, SIM_SPEC_MAX_QUEUES / 2, 0);
    assert_error(&s, parse(&s, "t.json", text), GPO_E2BIG,
                 "t.json: teams[2].queues[0]: more than 100000 queues in all teams", "queues");
    free(text);
    text = big_json(1, 1, 1, SIM_SPEC_MAX_QUEUES + 1, 0);
    assert_error(&s, parse(&s, "t.json", text), GPO_E2BIG,
                 "t.json: teams[0].queues: more than 100000 entries", "one team's queues");
    free(text);
}

static void test_load_reads_a_file_and_names_it(void **state)
{
    (void)state;
    struct sim_spec s;
    char path[] = "/tmp/test_sim_spec.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs("pools: [{name: p, nodes: 1, gpus_per_node: 1}]\nteams:\n  - name: t\n    weight: -1\n",
          f);
    assert_int_equal(fclose(f), 0);
    char want[128];
    snprintf(want, sizeof(want), "%s:4: teams[0].weight: expected an integer", path);
    assert_error(&s, sim_spec_load(&s, path, err, sizeof(err)), GPO_EINVAL, want, "weight");
    /* Over 16 MiB: a limit, whatever the content. */
    f = fopen(path, "w");
    assert_non_null(f);
    for (size_t k = 0; k < (16u << 20) / 8 + 1; k++)
        fputs("# 3456\n\n", f);
    assert_int_equal(fclose(f), 0);
    snprintf(want, sizeof(want), "%s: larger than 16 MiB", path);
    assert_error(&s, sim_spec_load(&s, path, err, sizeof(err)), GPO_E2BIG, want, "big");
    /* Exactly 16 MiB is read (and then found to be only comments). */
    assert_int_equal(truncate(path, 16u << 20), 0);
    snprintf(want, sizeof(want), "%s: the document is empty", path);
    assert_error(&s, sim_spec_load(&s, path, err, sizeof(err)), GPO_EINVAL, want, "16 MiB");
    unlink(path);
    snprintf(want, sizeof(want), "%s: No such file", path);
    assert_error(&s, sim_spec_load(&s, path, err, sizeof(err)), GPO_EINVAL, want, "missing");
    assert_error(&s, sim_spec_load(&s, "/tmp", err, sizeof(err)), GPO_EINVAL, "/tmp: ", "dir");
}

static void test_shipped_helios_spec_has_eleven_vcs(void **state)
{
    (void)state;
    static const struct {
        const char *vc;
        uint32_t nodes;
    } want[] = {{"6214e9", 64}, {"7f04ca", 32}, {"11cb48", 16}, {"b436b2", 64},
                {"ee9e8c", 64}, {"e13805", 16}, {"6c71a0", 32}, {"2869ce", 16},
                {"ed69ec", 8},  {"103959", 8},  {"0e4a51", 32}};
    const char *data = getenv("SIM_TEST_DATA");
    char path[1024], name[32];
    struct sim_spec s;
    assert_non_null(data);
    snprintf(path, sizeof(path), "%s/../../sim/helios_philly_vc.yaml", data);
    if (sim_spec_load(&s, path, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_int_equal(s.npools, ARRAY_LEN(want));
    assert_int_equal(s.nteams, ARRAY_LEN(want));
    assert_int_equal(s.unmapped_team, SIM_NONE);
    uint64_t gpus = 0;
    for (size_t k = 0; k < ARRAY_LEN(want); k++) {
        const struct sim_spec_pool *p = &s.pools[k];
        const struct sim_spec_team *t = &s.teams[k];
        snprintf(name, sizeof(name), "vc-%s", want[k].vc);
        assert_string_equal(p->name, name);
        assert_int_equal(p->nodes, want[k].nodes);
        assert_int_equal(p->gpus_per_node, 8);
        assert_string_equal(p->gpu_type, "P40-24GB");
        assert_int_equal(p->gpu_mem_mib, 24 * 1024);
        assert_true(p->cpus >= 8 && p->mem_mib >= 8 * 1024);
        gpus += (uint64_t)p->nodes * p->gpus_per_node;
        assert_string_equal(t->name, name);
        assert_int_equal(t->nqueues, 1);
        assert_string_equal(t->queues[0], want[k].vc);
        assert_int_equal(t->weight, 1);
        assert_int_equal(t->pool, k); /* its jobs run in its own VC only */
        assert_int_equal(t->nquotas, 0);
    }
    assert_int_equal(gpus, 2816);
    sim_spec_release(&s);
}

/* --load counts only the jobs some team takes: queue "b" is dropped here, so
 * queue "a" offers 3,600 + 3,600 GPU-seconds over 1,000 s of submits, 7.2
 * GPUs; at load 0.45 that is 16 GPUs, two 8-GPU nodes from four. */
static void test_set_load_counts_the_jobs_teams_take(void **state)
{
    (void)state;
    char qa[] = "a", qb[] = "b";
    char *queues[] = {qa, qb};
    struct sim_trace_job jobs[] = {
        {.id = "1", .submit_s = 0, .duration_s = 3600, .gpu_milli = 1000, .queue = 0},
        {.id = "2", .submit_s = 500, .duration_s = 99999, .gpu_milli = 8000, .queue = 1},
        {.id = "3", .submit_s = 1000, .duration_s = 1800, .gpu_milli = 2000, .queue = 0},
    };
    struct sim_trace t = {.jobs = jobs, .njobs = 3, .queues = queues, .nqueues = 2};
    struct sim_spec s;
    assert_int_equal(parse(&s, "t.yaml",
                           "pools: [{name: p, nodes: 4, gpus_per_node: 8}]\n"
                           "teams: [{name: ta, queues: [a]}]\n"),
                     0);
    assert_int_equal(sim_spec_team_of_queue(&s, "a"), 0);
    assert_int_equal(sim_spec_team_of_queue(&s, "b"), SIM_NONE);
    double factor = 0;
    assert_int_equal(sim_spec_set_load(&s, &t, 0.45, &factor), 0);
    assert_true(factor > 0.4999 && factor < 0.5001);
    assert_int_equal(s.pools[0].nodes, 2);
    assert_int_equal(sim_spec_set_load(&s, &t, 0, &factor), GPO_EINVAL);
    jobs[0].queue = jobs[2].queue = 1; /* nothing left that a team takes */
    assert_int_equal(sim_spec_set_load(&s, &t, 0.9, &factor), GPO_EINVAL);
    assert_int_equal(s.pools[0].nodes, 2); /* unchanged */
    sim_spec_release(&s);
}

static void test_from_trace_sizes_the_cluster_for_the_load(void **state)
{
    (void)state;
    char qa[] = "a", qempty[] = "", qdefault[] = "default";
    char *queues[] = {qa, qempty, qdefault};
    /* Span 1000 s, 7,200 GPU-seconds: 7.2 GPUs offered, 8 at 90 %: one node. */
    struct sim_trace_job jobs[] = {
        {.id = "1", .submit_s = 100, .duration_s = 3600, .gpu_milli = 1000, .queue = 1},
        {.id = "2", .submit_s = 600, .duration_s = 1800, .gpu_milli = 2000, .queue = 0},
        {.id = "3", .submit_s = 1100, .duration_s = 0, .gpu_milli = 500, .queue = 2},
    };
    struct sim_trace t = {.jobs = jobs, .njobs = 3, .queues = queues, .nqueues = 3};
    struct sim_spec s;
    assert_int_equal(sim_spec_from_trace(&s, &t, err, sizeof(err)), 0);
    assert_int_equal(s.npools, 1);
    const struct sim_spec_pool *p = &s.pools[0];
    assert_string_equal(p->name, "default");
    assert_int_equal(p->nodes, 1);
    assert_int_equal(p->gpus_per_node, 8);
    assert_int_equal(p->gpu_mem_mib, 80 * 1024);
    assert_int_equal(p->cpus, 64);
    assert_int_equal(p->mem_mib, 512 * 1024);
    assert_true(p->nvlink);
    assert_int_equal(s.nteams, 3);
    /* The empty queue's team is "default", unless a queue has that name. */
    static const char *const names[] = {"a", "default-2", "default"};
    for (size_t k = 0; k < 3; k++) {
        const struct sim_spec_team *tm = &s.teams[k];
        assert_string_equal(tm->name, names[k]);
        assert_int_equal(tm->nqueues, 1);
        assert_string_equal(tm->queues[0], queues[k]);
        assert_int_equal(tm->weight, 1);
        assert_int_equal(tm->nquotas, 0);
        assert_int_equal(tm->borrow_limit_milli, -1);
    }
    assert_int_equal(s.unmapped_team, SIM_NONE);
    sim_spec_release(&s);
    /* One GPU-second more: over 8 GPUs at 90 %, two nodes. */
    jobs[2].duration_s = 2;
    assert_int_equal(sim_spec_from_trace(&s, &t, err, sizeof(err)), 0);
    assert_int_equal(s.pools[0].nodes, 2);
    sim_spec_release(&s);
    /* A 20-GPU job needs three nodes, whatever the load. */
    jobs[2].gpu_milli = 20000;
    jobs[2].duration_s = 0;
    assert_int_equal(sim_spec_from_trace(&s, &t, err, sizeof(err)), 0);
    assert_int_equal(s.pools[0].nodes, 3);
    sim_spec_release(&s);
}

static void test_from_trace_without_a_span_and_without_jobs(void **state)
{
    (void)state;
    char qempty[] = "", qb[] = "b";
    char *queues[] = {qempty, qb};
    /* All submitted at once: the span is the sum of durations (the jobs back
     * to back): 1,600 GPU-s over 200 s is 8 GPUs, two nodes at 90 %. */
    struct sim_trace_job jobs[] = {
        {.id = "1", .submit_s = 10, .duration_s = 100, .gpu_milli = 8000, .queue = 0},
        {.id = "2", .submit_s = 10, .duration_s = 100, .gpu_milli = 8000, .queue = 1},
    };
    struct sim_trace t = {.jobs = jobs, .njobs = 2, .queues = queues, .nqueues = 2};
    struct sim_spec s;
    assert_int_equal(sim_spec_from_trace(&s, &t, err, sizeof(err)), 0);
    assert_int_equal(s.pools[0].nodes, 2);
    assert_string_equal(s.teams[0].name, "default");
    assert_string_equal(s.teams[0].queues[0], "");
    assert_string_equal(s.teams[1].name, "b");
    sim_spec_release(&s);
    /* No duration either: one second; no GPUs at all: still one node. */
    jobs[0].duration_s = jobs[1].duration_s = 0;
    jobs[0].gpu_milli = jobs[1].gpu_milli = 0;
    assert_int_equal(sim_spec_from_trace(&s, &t, err, sizeof(err)), 0);
    assert_int_equal(s.pools[0].nodes, 1);
    sim_spec_release(&s);
    /* An empty trace is an error, and so are more queues than teams may be. */
    t.njobs = 0;
    memset(&s, 0xab, sizeof(s)); /* *s need not be initialised */
    assert_error(&s, sim_spec_from_trace(&s, &t, err, sizeof(err)), GPO_EINVAL,
                 "the trace has no jobs", "empty");
    t.njobs = 2;
    char **many = calloc(SIM_SPEC_MAX_TEAMS + 1, sizeof(*many));
    assert_non_null(many);
    for (size_t k = 0; k <= SIM_SPEC_MAX_TEAMS; k++)
        many[k] = qb;
    t.queues = many;
    t.nqueues = SIM_SPEC_MAX_TEAMS + 1;
    memset(&s, 0xab, sizeof(s));
    assert_error(&s, sim_spec_from_trace(&s, &t, err, sizeof(err)), GPO_E2BIG,
                 "the trace has 4097 queues, more than the 4096 teams", "many queues");
    free(many);
}

static const char scale_yaml[] = "pools:\n"
                                 "  - {name: a, nodes: 10, gpus_per_node: 8}\n"
                                 "  - {name: b, nodes: 1, gpus_per_node: 4}\n"
                                 "  - {name: c, nodes: 3, gpus_per_node: 8}\n"
                                 "teams:\n"
                                 "  - name: x\n"
                                 "    borrow_limit_gpus: 10\n"
                                 "    quotas:\n"
                                 "      - {pool: a, guaranteed_gpus: 80}\n"
                                 "      - {pool: b, guaranteed_gpus: 4, borrow_limit_gpus: 0}\n"
                                 "      - {pool: c, guaranteed_gpus: 7, borrow_limit_gpus: 3}\n"
                                 "  - name: y\n";

static void test_scale_rounds_nodes_and_scales_quotas_with_them(void **state)
{
    (void)state;
    struct sim_spec s;
    assert_int_equal(parse(&s, "t.yaml", scale_yaml), 0);
    /* 10 x 0.3 = 3; 1 x 0.3 rounds to 0, kept at 1; 3 x 0.3 = 0.9 rounds to 1. */
    assert_int_equal(sim_spec_scale(&s, 0.3), 0);
    assert_int_equal(s.pools[0].nodes, 3);
    assert_int_equal(s.pools[1].nodes, 1);
    assert_int_equal(s.pools[2].nodes, 1);
    /* Quotas follow their pool's nodes: a's guarantee is still all of a. */
    const struct sim_spec_team *x = &s.teams[0];
    assert_int_equal(x->quotas[0].guaranteed_milli, 24000);
    assert_int_equal(x->quotas[0].borrow_limit_milli, -1);
    assert_int_equal(x->quotas[1].guaranteed_milli, 4000); /* b kept its node */
    assert_int_equal(x->quotas[1].borrow_limit_milli, 0);
    assert_int_equal(x->quotas[2].guaranteed_milli, 2333); /* 7 x 1/3 */
    assert_int_equal(x->quotas[2].borrow_limit_milli, 1000);
    assert_int_equal(x->borrow_limit_milli, 3000); /* elsewhere: by the factor */
    assert_int_equal(s.teams[1].borrow_limit_milli, -1);
    sim_spec_release(&s);
    /* Growing: 25, 2.5 rounds to 3, 7.5 to 8. */
    assert_int_equal(parse(&s, "t.yaml", scale_yaml), 0);
    assert_int_equal(sim_spec_scale(&s, 2.5), 0);
    assert_int_equal(s.pools[0].nodes, 25);
    assert_int_equal(s.pools[1].nodes, 3);
    assert_int_equal(s.pools[2].nodes, 8);
    assert_int_equal(s.teams[0].quotas[0].guaranteed_milli, 200000);
    assert_int_equal(s.teams[0].quotas[1].guaranteed_milli, 12000);
    assert_int_equal(s.teams[0].quotas[2].guaranteed_milli, 18667); /* 7 x 8/3 */
    assert_int_equal(s.teams[0].borrow_limit_milli, 25000);
    sim_spec_release(&s);
}

static void test_scale_refuses_bad_factors_and_changes_nothing(void **state)
{
    (void)state;
    struct sim_spec s;
    assert_int_equal(parse(&s, "t.yaml", scale_yaml), 0);
    const double bad[] = {0, -1, NAN, INFINITY, -INFINITY};
    for (size_t k = 0; k < ARRAY_LEN(bad); k++)
        assert_int_equal(sim_spec_scale(&s, bad[k]), GPO_EINVAL);
    /* 10 x 100,001 nodes is over the cap (and so is anything huge). */
    assert_int_equal(sim_spec_scale(&s, 100001), GPO_E2BIG);
    assert_int_equal(sim_spec_scale(&s, 1e300), GPO_E2BIG);
    assert_int_equal(sim_spec_scale(NULL, 1), GPO_EINVAL);
    assert_int_equal(s.pools[0].nodes, 10);
    assert_int_equal(s.pools[1].nodes, 1);
    assert_int_equal(s.pools[2].nodes, 3);
    assert_int_equal(s.teams[0].quotas[0].guaranteed_milli, 80000);
    assert_int_equal(s.teams[0].quotas[2].guaranteed_milli, 7000);
    assert_int_equal(s.teams[0].borrow_limit_milli, 10000);
    /* Over the cap in all pools together, though each pool is under it. */
    assert_int_equal(sim_spec_scale(&s, 75000), GPO_E2BIG); /* 750k + 75k + 225k */
    assert_int_equal(s.pools[0].nodes, 10);
    assert_int_equal(sim_spec_scale(&s, 1), 0); /* changes nothing */
    assert_int_equal(s.pools[2].nodes, 3);
    assert_int_equal(s.teams[0].quotas[2].guaranteed_milli, 7000);
    sim_spec_release(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_yaml_and_json_give_the_same_spec),
        cmocka_unit_test(test_out_of_memory_leaves_the_spec_empty),
        cmocka_unit_test(test_omitted_fields_take_their_defaults),
        cmocka_unit_test(test_queue_names_that_look_like_numbers_stay_as_written),
        cmocka_unit_test(test_yaml_scalars_follow_the_core_schema),
        cmocka_unit_test(test_bad_yaml_fields_name_line_and_path),
        cmocka_unit_test(test_bad_json_fields_name_the_path),
        cmocka_unit_test(test_bad_yaml_and_json_syntax),
        cmocka_unit_test(test_caps_are_limits),
        cmocka_unit_test(test_load_reads_a_file_and_names_it),
        cmocka_unit_test(test_shipped_helios_spec_has_eleven_vcs),
        cmocka_unit_test(test_from_trace_sizes_the_cluster_for_the_load),
        cmocka_unit_test(test_from_trace_without_a_span_and_without_jobs),
        cmocka_unit_test(test_scale_rounds_nodes_and_scales_quotas_with_them),
        cmocka_unit_test(test_set_load_counts_the_jobs_teams_take),
        cmocka_unit_test(test_scale_refuses_bad_factors_and_changes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_cluster_jobspec.c - job submissions: a minimal submission and its
 * defaults (and the exact JSON shown for it), every class of bad input with
 * its exact message and the destination left as it was, the size limits,
 * invalid UTF-8, fractions of a GPU, the exclusive fields, env order,
 * dependencies, the array syntax (good and bad tables), round trips through
 * jobspec_to_json as json_t and as text, copies, and release freeing
 * everything (ASan reports leaks). */
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

#include "cluster/jobspec.h"
#include "util/jsonv.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define CMD          "\"command\": [\"true\"]"
/* core/mig.h's messages, as its catalogue lists the profiles. */
#define MIG_KNOWN                                                                                  \
    "1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb, 1g.10gb+me, 1g.20gb, "        \
    "2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.18gb, 1g.18gb+me, 1g.35gb, 2g.35gb, 3g.71gb, "         \
    "4g.71gb, 7g.141gb"
#define H100_NO_1G5                                                                                \
    "no MIG profile \"1g.5gb\" on H100-80GB; its profiles: 1g.10gb, 1g.10gb+me, 1g.20gb, "         \
    "2g.20gb, 3g.40gb, 4g.40gb or 7g.80gb"

static json_t *parse(const char *text)
{
    json_error_t jerr;
    json_t *j = json_loads(text, JSON_ALLOW_NUL | JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!j)
        fail_msg("test JSON does not parse: %s: %s", text, jerr.text);
    return j;
}

static void decode_ok(const char *text, struct jobspec *ret)
{
    json_t *body = parse(text);
    char err[256] = "";
    int rc = jobspec_decode(body, ret, err, sizeof(err));
    json_decref(body);
    if (rc != 0)
        fail_msg("%s: refused with %d: %s", text, rc, err);
}

/* Decodes body; it must be refused with -EINVAL and exactly msg, and the
 * destination must be left byte for byte as it was. */
static void expect_refused(const char *what, const json_t *body, const char *msg)
{
    struct jobspec spec, fresh;
    memset(&spec, 0xA5, sizeof(spec));
    memset(&fresh, 0xA5, sizeof(fresh));
    char err[512];
    int rc = jobspec_decode(body, &spec, err, sizeof(err));
    if (rc != -EINVAL || strcmp(err, msg) != 0)
        fail_msg("%s:\n got  %d '%s'\n want %d '%s'", what, rc, err, -EINVAL, msg);
    assert_memory_equal(&spec, &fresh, sizeof(spec));
}

static void expect_refused_text(const char *text, const char *msg)
{
    json_t *body = parse(text);
    expect_refused(text, body, msg);
    json_decref(body);
}

static void assert_text_equal(const char *field, const char *a, const char *b)
{
    if ((a == NULL) != (b == NULL) || (a && strcmp(a, b) != 0))
        fail_msg("%s: '%s' != '%s'", field, a ? a : "(null)", b ? b : "(null)");
}

/* Every field, owned arrays by content. */
static void assert_spec_equal(const struct jobspec *a, const struct jobspec *b)
{
    assert_text_equal("name", a->name, b->name);
    assert_text_equal("team", a->team, b->team);
    assert_text_equal("project", a->project, b->project);
    assert_text_equal("model", a->model, b->model);
    assert_text_equal("priority", a->priority, b->priority);
    assert_text_equal("pool", a->pool, b->pool);
    assert_text_equal("gpu_type", a->gpu_type, b->gpu_type);
    assert_int_equal(a->gpus, b->gpus);
    assert_int_equal(a->gpu_milli, b->gpu_milli);
    assert_int_equal(a->gpu_mem_mib, b->gpu_mem_mib);
    assert_int_equal(a->min_gpu_mem_mib, b->min_gpu_mem_mib);
    assert_text_equal("mig_profile", a->mig_profile, b->mig_profile);
    assert_int_equal(a->cpus, b->cpus);
    assert_int_equal(a->mem_mib, b->mem_mib);
    assert_int_equal(a->time_limit_s, b->time_limit_s);
    assert_int_equal(a->multi_node, b->multi_node);
    assert_int_equal(a->checkpointable, b->checkpointable);
    assert_int_equal(a->argv == NULL, b->argv == NULL);
    assert_int_equal(a->argc, b->argc);
    for (size_t i = 0; a->argv && i <= a->argc; i++)
        assert_text_equal("argv", a->argv[i], b->argv[i]);
    assert_text_equal("script", a->script, b->script);
    assert_text_equal("workdir", a->workdir, b->workdir);
    assert_int_equal(a->nenv, b->nenv);
    for (size_t i = 0; i < a->nenv; i++) {
        assert_text_equal("env name", a->env[i].name, b->env[i].name);
        assert_text_equal("env value", a->env[i].value, b->env[i].value);
    }
    assert_int_equal(a->max_retries, b->max_retries);
    assert_int_equal(a->requeue, b->requeue);
    assert_int_equal(a->ndeps, b->ndeps);
    for (size_t i = 0; i < a->ndeps; i++) {
        assert_int_equal(a->deps[i].type, b->deps[i].type);
        assert_int_equal(a->deps[i].job, b->deps[i].job);
    }
    assert_text_equal("array", a->array_text, b->array_text);
    assert_int_equal(a->array.n, b->array.n);
    assert_int_equal(a->array.max_running, b->array.max_running);
    if (a->array.n)
        assert_memory_equal(a->array.index, b->array.index, a->array.n * sizeof(uint32_t));
    assert_text_equal("output", a->output, b->output);
    assert_text_equal("error", a->error, b->error);
}

static void test_minimal_submission_gets_every_default(void **state)
{
    (void)state;
    struct jobspec s;
    decode_ok("{" CMD "}", &s);
    assert_string_equal(s.name, "job");
    assert_null(s.team);
    assert_null(s.project);
    assert_null(s.model);
    assert_null(s.priority);
    assert_null(s.pool);
    assert_null(s.gpu_type);
    assert_int_equal(s.gpus, 0);
    assert_int_equal(s.gpu_milli, 0);
    assert_int_equal(s.gpu_mem_mib, 0);
    assert_int_equal(s.min_gpu_mem_mib, 0);
    assert_int_equal(s.cpus, 1);
    assert_int_equal(s.mem_mib, 1024);
    assert_int_equal(s.time_limit_s, 0);
    assert_false(s.multi_node);
    assert_false(s.checkpointable);
    assert_int_equal(s.argc, 1);
    assert_string_equal(s.argv[0], "true");
    assert_null(s.argv[1]);
    assert_null(s.script);
    assert_null(s.workdir);
    assert_null(s.env);
    assert_int_equal(s.nenv, 0);
    assert_int_equal(s.max_retries, 0);
    assert_true(s.requeue);
    assert_null(s.deps);
    assert_int_equal(s.ndeps, 0);
    assert_null(s.array_text);
    assert_null(s.array.index);
    assert_int_equal(s.array.n, 0);
    assert_null(s.output);
    assert_null(s.error);

    /* The API shows every field, defaults filled, keys in a fixed order. */
    json_t *j = jobspec_to_json(&s);
    char *text = json_dumps(j, JSON_COMPACT);
    assert_string_equal(
        text, "{\"name\":\"job\",\"team\":null,\"project\":null,\"model\":null,\"priority\":null,"
              "\"pool\":null,\"gpu_type\":null,\"gpus\":0,\"gpu_mem_mib\":0,\"min_gpu_mem_mib\":0,"
              "\"cpus\":1,\"mem_mib\":1024,\"time_limit_s\":0,\"multi_node\":false,"
              "\"checkpointable\":false,\"command\":[\"true\"],\"script\":null,\"workdir\":null,"
              "\"env\":{},\"max_retries\":0,\"requeue\":true,\"dependencies\":[],\"array\":null,"
              "\"output\":null,\"error\":null,\"nodes\":0,\"gpus_per_node\":0,\"ntasks\":0,"
              "\"ntasks_per_node\":0,\"cpus_per_task\":0,\"gpus_per_task\":0,"
              "\"mem_per_node_mib\":0,\"mem_per_cpu_mib\":0,\"mem_per_gpu_mib\":0,"
              "\"mem_whole_node\":false,\"exclusive\":false,\"constraint\":null,"
              "\"signal\":null,\"open_mode\":\"truncate\",\"launch\":\"every_node\","
              "\"submit_dir\":null,\"hold\":false,\"begin\":0}");
    free(text);
    json_decref(j);
    jobspec_release(&s);
}

static void test_full_submission_fills_every_field(void **state)
{
    (void)state;
    struct jobspec s;
    decode_ok("{\"name\": \"llama \\u00e9t\\u00e9 #1\", \"team\": \"ml\", \"project\": \"llm.v2\","
              " \"model\": \"llama-70b\", \"priority\": \"high\", \"pool\": \"prod_1\","
              " \"gpu_type\": \"H100-80GB\", \"gpus\": 8, \"min_gpu_mem_mib\": 81920,"
              " \"cpus\": 64, \"mem_mib\": 524288, \"time_limit_s\": 86400, \"multi_node\": true,"
              " \"checkpointable\": true, \"command\": [\"torchrun\", \"\", \"train.py\"],"
              " \"workdir\": \"/home/a\", \"env\": {\"B\": \"2\", \"A\": \"\"}, \"max_retries\": 3,"
              " \"requeue\": false, \"dependencies\": [{\"type\": \"afterany\", \"job\": 9}],"
              " \"array\": \"0-3%2\", \"output\": \"logs/%j.out\", \"error\": \"/tmp/e\"}",
              &s);
    assert_string_equal(s.name, "llama \xc3\xa9t\xc3\xa9 #1");
    assert_string_equal(s.team, "ml");
    assert_string_equal(s.project, "llm.v2");
    assert_string_equal(s.model, "llama-70b");
    assert_string_equal(s.priority, "high");
    assert_string_equal(s.pool, "prod_1");
    assert_string_equal(s.gpu_type, "H100-80GB");
    assert_int_equal(s.gpus, 8);
    assert_int_equal(s.min_gpu_mem_mib, 81920);
    assert_int_equal(s.cpus, 64);
    assert_int_equal(s.mem_mib, 524288);
    assert_int_equal(s.time_limit_s, 86400);
    assert_true(s.multi_node);
    assert_true(s.checkpointable);
    assert_int_equal(s.argc, 3);
    assert_string_equal(s.argv[1], ""); /* only the program name must be non-empty */
    assert_string_equal(s.workdir, "/home/a");
    assert_int_equal(s.nenv, 2);
    assert_int_equal(s.max_retries, 3);
    assert_false(s.requeue);
    assert_int_equal(s.ndeps, 1);
    assert_int_equal(s.deps[0].type, JOBSPEC_AFTERANY);
    assert_int_equal(s.deps[0].job, 9);
    assert_string_equal(s.array_text, "0-3%2");
    assert_int_equal(s.array.n, 4);
    assert_int_equal(s.array.max_running, 2);
    assert_string_equal(s.output, "logs/%j.out");
    assert_string_equal(s.error, "/tmp/e");
    jobspec_release(&s);
}

static void test_script_without_shebang_is_accepted(void **state)
{
    (void)state;
    struct jobspec s;
    decode_ok("{\"script\": \"echo hi\\n\", \"command\": null}", &s);
    assert_null(s.argv);
    assert_string_equal(s.script, "echo hi\n");
    jobspec_release(&s);
    decode_ok("{\"script\": \"#!/bin/bash\\nnvidia-smi\\n\"}", &s);
    assert_string_equal(s.script, "#!/bin/bash\nnvidia-smi\n");
    jobspec_release(&s);
}

static void test_bad_submissions_are_refused_with_one_exact_line(void **state)
{
    (void)state;
    static const struct {
        const char *body, *msg;
    } cases[] = {
        {"[]", "expected an object, got an array"},
        {"{" CMD ", \"gpu\": 1}", "unknown field 'gpu' (did you mean 'gpus'?)"},
        {"{" CMD ", \"tema\": \"a\"}", "unknown field 'tema' (did you mean 'team'?)"},
        {"{" CMD ", \"colour\": 1}", "unknown field 'colour'"},
        {"{" CMD ", \"gpus\": \"2\"}",
         "field 'gpus': expected an integer or a fraction below 1, got a string"},
        {"{" CMD ", \"gpus\": null}",
         "field 'gpus': expected an integer or a fraction below 1, got null"},
        {"{" CMD ", \"gpus\": 2000}", "field 'gpus': 2000 is out of range 0..1024"},
        {"{" CMD ", \"gpus\": -1}", "field 'gpus': -1 is out of range 0..1024"},
        {"{" CMD ", \"gpus\": -0.5}", "field 'gpus': -0.5 is out of range 0..1024"},
        {"{" CMD ", \"gpus\": 1025.0}", "field 'gpus': 1025 is out of range 0..1024"},
        {"{" CMD ", \"gpus\": 1.5}",
         "field 'gpus': 1.5 is neither whole GPUs nor a fraction below 1"},
        {"{" CMD ", \"gpus\": 0.3333}", "field 'gpus': a fraction has at most three decimals"},
        {"{" CMD ", \"gpus\": 0.0001}", "field 'gpus': a fraction has at most three decimals"},
        {"{" CMD ", \"gpus\": 0.9999}", "field 'gpus': a fraction has at most three decimals"},
        {"{" CMD ", \"gpu_mem_mib\": 1048577}",
         "field 'gpu_mem_mib': 1048577 is out of range 0..1048576"},
        {"{" CMD ", \"min_gpu_mem_mib\": -1}",
         "field 'min_gpu_mem_mib': -1 is out of range 0..1048576"},
        {"{" CMD ", \"cpus\": 5000}", "field 'cpus': 5000 is out of range 0..4096"},
        {"{" CMD ", \"cpus\": 1.0}", "field 'cpus': expected an integer, got a real number"},
        {"{" CMD ", \"mem_mib\": 67108865}",
         "field 'mem_mib': 67108865 is out of range 0..67108864"},
        {"{" CMD ", \"time_limit_s\": 31536001}",
         "field 'time_limit_s': 31536001 is out of range 0..31536000"},
        {"{" CMD ", \"max_retries\": 101}", "field 'max_retries': 101 is out of range 0..100"},
        {"{" CMD ", \"requeue\": \"yes\"}", "field 'requeue': expected a boolean, got a string"},
        {"{" CMD ", \"multi_node\": 1}", "field 'multi_node': expected a boolean, got an integer"},
        {"{\"team\": \"a\"}", "missing required field 'command' or 'script'"},
        {"{\"command\": null, \"script\": null}", "missing required field 'command' or 'script'"},
        {"{" CMD ", \"script\": \"x\"}", "fields 'command' and 'script' are exclusive: give one"},
        {"{\"command\": []}", "field 'command': must not be empty"},
        {"{\"command\": [\"\", \"x\"]}", "field 'command[0]': the program name must not be empty"},
        {"{\"command\": [\"a\", 1]}", "field 'command[1]': expected a string, got an integer"},
        {"{\"command\": \"ls -l\"}", "field 'command': expected an array of strings, got a string"},
        {"{\"script\": \"\"}", "field 'script': length 0 is out of range 1..1048576 bytes"},
        {"{" CMD ", \"workdir\": \"tmp\"}",
         "field 'workdir': must be an absolute path (start with '/')"},
        {"{" CMD ", \"output\": \"\"}", "field 'output': length 0 is out of range 1..4096 bytes"},
        {"{" CMD ", \"error\": \"a\\u0000b\"}",
         "field 'error': contains a NUL character (\\u0000)"},
        {"{" CMD ", \"team\": \"my team\"}",
         "field 'team': 'my team' may hold only letters, digits, '.', '_' and '-'"},
        {"{" CMD ", \"team\": \"\"}", "field 'team': length 0 is out of range 1..128 bytes"},
        {"{" CMD ", \"gpu_type\": \"H100 80GB\"}",
         "field 'gpu_type': 'H100 80GB' may hold only letters, digits, '.', '_' and '-'"},
        {"{" CMD ", \"pool\": \"p/1\"}",
         "field 'pool': 'p/1' may hold only letters, digits, '.', '_' and '-'"},
        {"{" CMD ", \"priority\": \"\\u00e9!\"}",
         "field 'priority': '\xc3\xa9!' may hold only letters, digits, '.', '_' and '-'"},
        {"{" CMD ", \"model\": 7}", "field 'model': expected a string, got an integer"},
        {"{" CMD ", \"name\": \"a\\nb\"}", "field 'name': a control character (U+000A) at byte 1 "
                                           "(one line of printable text is expected)"},
        {"{" CMD ", \"name\": \"a\\u0085b\"}", "field 'name': a control character (U+0085) at "
                                               "byte 1 (one line of printable text is expected)"},
        {"{" CMD ", \"name\": \"\\u007f\"}", "field 'name': a control character (U+007F) at byte 0 "
                                             "(one line of printable text is expected)"},
        {"{" CMD ", \"cpus\": 0}",
         "field 'cpus': 0 is out of range 1..4096 (a job runs on at least "
         "one CPU; leave it out for 1)"},
        {"{" CMD ", \"mem_mib\": 0}",
         "field 'mem_mib': 0 is out of range 1..67108864 (for Slurm's --mem=0, the "
         "whole node, set 'mem_whole_node'; or leave it out for 1024)"},
        {"{" CMD ", \"env\": []}", "field 'env': expected an object, got an array"},
        {"{" CMD ", \"env\": {\"1A\": \"x\"}}",
         "field 'env': '1A' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"},
        {"{" CMD ", \"env\": {\"A-B\": \"x\"}}",
         "field 'env': 'A-B' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"},
        {"{" CMD ", \"env\": {\"\": \"x\"}}",
         "field 'env': '' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"},
        {"{" CMD ", \"env\": {\"A\": 1}}", "field 'env.A': expected a string, got an integer"},
        {"{" CMD ", \"env\": {\"OK\": \"1\", \"A\": \"a\\u0000\"}}",
         "field 'env.A': contains a NUL character (\\u0000)"},
        {"{" CMD ", \"dependencies\": {}}",
         "field 'dependencies': expected an array of objects, got an object"},
        {"{" CMD ", \"dependencies\": [{\"type\": \"after\", \"job\": 1}]}",
         "field 'dependencies[0].type': 'after' is not one of afterok, afterany"},
        {"{" CMD ", \"dependencies\": [{\"type\": \"afterok\", \"job\": 0}]}",
         "field 'dependencies[0].job': 0 is out of range 1..9223372036854775807"},
        {"{" CMD ", \"dependencies\": [{\"job\": 3}]}",
         "missing required field 'dependencies[0].type'"},
        {"{" CMD ", \"dependencies\": [{\"type\": \"afterok\", \"job\": 3, \"when\": 1}]}",
         "unknown field 'dependencies[0].when'"},
        {"{" CMD ", \"dependencies\": [{\"type\": \"afterok\", \"job\": 3},"
         " {\"type\": \"afterany\", \"job\": 3}]}",
         "field 'dependencies[1]': job 3 is already listed"},
        {"{" CMD ", \"array\": \"5-3\"}", "field 'array': '5-3': the range goes down"},
        {"{" CMD ", \"array\": \"\"}", "field 'array': length 0 is out of range 1..131072 bytes"},
        {"{" CMD ", \"array\": \"0-15%0\"}",
         "field 'array': the running limit '%0' is out of range 1..10000"},
        {"{" CMD ", \"array\": \"1,1\"}", "field 'array': index 1 is given twice"},
        {"{" CMD ", \"gpus\": 2, \"gpu_mem_mib\": 1024}",
         "fields 'gpus' and 'gpu_mem_mib' are exclusive: ask for GPUs or for a share of one "
         "GPU's memory"},
        {"{" CMD ", \"gpus\": 0.5, \"gpu_mem_mib\": 10}",
         "fields 'gpus' and 'gpu_mem_mib' are exclusive: ask for GPUs or for a share of one "
         "GPU's memory"},
        {"{" CMD ", \"gpus\": 0.5, \"multi_node\": true}",
         "fields 'gpus' and 'multi_node': a fraction of a GPU cannot span nodes"},
        {"{" CMD ", \"gpu_mem_mib\": 1024, \"multi_node\": true}",
         "fields 'gpu_mem_mib' and 'multi_node': a share of one GPU cannot span nodes"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++)
        expect_refused_text(cases[i].body, cases[i].msg);
}

/* A valid body whose `key` (possibly "command" itself) holds n generated
 * items: an object of variables or an array. */
static json_t *body_with(const char *key, size_t n, bool object)
{
    json_t *body = parse("{" CMD "}");
    json_t *c = object ? json_object() : json_array();
    for (size_t i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "V%zu", i);
        if (object)
            json_object_set_new(c, name, json_string("x"));
        else if (strcmp(key, "dependencies") == 0)
            json_array_append_new(
                c, json_pack("{s:s, s:I}", "type", "afterok", "job", (json_int_t)(i + 1)));
        else
            json_array_append_new(c, json_string(name));
    }
    json_object_set_new(body, key, c);
    return body;
}

/* A string of n copies of ch, set as body[key]. */
static void set_long(json_t *body, const char *key, size_t n, char ch)
{
    char *s = malloc(n + 1);
    assert_non_null(s);
    memset(s, ch, n);
    s[n] = '\0';
    json_object_set_new(body, key, json_string(s));
    free(s);
}

static void test_every_size_limit_is_enforced_at_its_bound(void **state)
{
    (void)state;
    struct jobspec s;
    static const struct {
        const char *key;
        size_t max;
        bool object;
        const char *msg;
    } lists[] = {
        {"env", JOBSPEC_ENV_MAX, true, "field 'env': 257 variables, at most 256 allowed"},
        {"dependencies", JOBSPEC_DEPS_MAX, false,
         "field 'dependencies': 65 items, at most 64 allowed"},
        {"command", JOBSPEC_ARGV_MAX, false, "field 'command': 1025 items, at most 1024 allowed"},
    };
    for (size_t i = 0; i < ARRAY_LEN(lists); i++) {
        json_t *body = body_with(lists[i].key, lists[i].max, lists[i].object);
        assert_int_equal(jobspec_decode(body, &s, NULL, 0), 0);
        jobspec_release(&s);
        json_decref(body);
        body = body_with(lists[i].key, lists[i].max + 1, lists[i].object);
        expect_refused(lists[i].key, body, lists[i].msg);
        json_decref(body);
    }

    static const struct {
        const char *key;
        size_t max;
        char ch;
        const char *msg;
    } strings[] = {
        {"name", JOBSPEC_NAME_MAX, 'n', "field 'name': length 129 is out of range 1..128 bytes"},
        {"team", JOBSPEC_NAME_MAX, 't', "field 'team': length 129 is out of range 1..128 bytes"},
        {"workdir", JOBSPEC_PATH_MAX, '/',
         "field 'workdir': length 4097 is out of range 1..4096 bytes"},
        {"output", JOBSPEC_PATH_MAX, 'o',
         "field 'output': length 4097 is out of range 1..4096 bytes"},
    };
    for (size_t i = 0; i < ARRAY_LEN(strings); i++) {
        json_t *body = parse("{" CMD "}");
        set_long(body, strings[i].key, strings[i].max, strings[i].ch);
        assert_int_equal(jobspec_decode(body, &s, NULL, 0), 0);
        jobspec_release(&s);
        set_long(body, strings[i].key, strings[i].max + 1, strings[i].ch);
        expect_refused(strings[i].key, body, strings[i].msg);
        json_decref(body);
    }

    json_t *body = parse("{}");
    set_long(body, "script", JOBSPEC_SCRIPT_MAX, 's');
    assert_int_equal(jobspec_decode(body, &s, NULL, 0), 0);
    jobspec_release(&s);
    set_long(body, "script", JOBSPEC_SCRIPT_MAX + 1, 's');
    expect_refused("script", body,
                   "field 'script': length 1048577 is out of range 1..1048576 bytes");
    json_decref(body);

    body = parse("{\"command\": [\"a\"]}");
    json_t *env = json_object();
    json_object_set_new(body, "env", env);
    set_long(env, "BIG", JOBSPEC_ENV_VALUE_MAX, 'v');
    assert_int_equal(jobspec_decode(body, &s, NULL, 0), 0);
    assert_int_equal(strlen(s.env[0].value), JOBSPEC_ENV_VALUE_MAX);
    jobspec_release(&s);
    set_long(env, "BIG", JOBSPEC_ENV_VALUE_MAX + 1, 'v');
    expect_refused("env value", body,
                   "field 'env.BIG': length 32769 is out of range 0..32768 bytes");
    json_object_clear(env);
    char name[JOBSPEC_NAME_MAX + 2];
    memset(name, 'N', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    json_object_set_new(env, name, json_string(""));
    expect_refused("env name", body, "field 'env': a variable name has at most 128 bytes");
    json_decref(body);
}

static void test_invalid_utf8_is_refused_where_it_can_enter(void **state)
{
    (void)state;
    /* Only json_t built with jansson's _nocheck functions can hold it. */
    json_t *body = parse("{" CMD "}");
    json_object_set_new_nocheck(body, "team", json_stringn_nocheck("a\xff", 2));
    expect_refused("team", body, "field 'team': not valid UTF-8");
    json_decref(body);

    body = parse("{" CMD "}");
    json_t *env = json_object();
    json_object_set_new(body, "env", env);
    json_object_set_new_nocheck(env, "A", json_stringn_nocheck("\xc3", 1));
    expect_refused("env value", body, "field 'env.A': not valid UTF-8");
    json_object_clear(env);
    json_object_set_new_nocheck(env, "A\xc3\x28", json_string("x"));
    expect_refused("env name", body,
                   "field 'env': 'A?(' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)");
    json_decref(body);
}

static void test_names_take_their_allowed_characters(void **state)
{
    (void)state;
    struct jobspec s;
    decode_ok("{" CMD ", \"gpu_type\": \"H100-80GB\", \"team\": \"ML.research_1-a\","
              " \"name\": \"\\u8bad\\u7ec3 run (\\u00e9t\\u00e9) #1 \\ud83d\\ude80\"}",
              &s);
    assert_string_equal(s.gpu_type, "H100-80GB");
    assert_string_equal(s.team, "ML.research_1-a");
    assert_string_equal(s.name, "\xe8\xae\xad\xe7\xbb\x83 run (\xc3\xa9t\xc3\xa9) #1 "
                                "\xf0\x9f\x9a\x80");
    jobspec_release(&s);
    decode_ok("{" CMD ", \"name\": null, \"team\": null}", &s);
    assert_string_equal(s.name, "job");
    assert_null(s.team);
    jobspec_release(&s);
}

static void test_fractions_become_milli_gpus_and_whole_reals_whole_gpus(void **state)
{
    (void)state;
    static const struct {
        const char *gpus;
        int32_t whole, milli;
    } cases[] = {
        {"0.25", 0, 250}, {"0.5", 0, 500},   {"0.001", 0, 1},   {"0.999", 0, 999},
        {"0.1", 0, 100},  {"0.3", 0, 300},   {"0.125", 0, 125}, {"0.7", 0, 700},
        {"2.0", 2, 0},    {"1e3", 1000, 0},  {"0.0", 0, 0},     {"0", 0, 0},
        {"1", 1, 0},      {"1024", 1024, 0}, {"1.0", 1, 0},     {"2.5e-1", 0, 250},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char text[128];
        snprintf(text, sizeof(text), "{" CMD ", \"gpus\": %s}", cases[i].gpus);
        struct jobspec s;
        decode_ok(text, &s);
        if (s.gpus != cases[i].whole || s.gpu_milli != cases[i].milli)
            fail_msg("gpus %s: got %d whole, %d milli", cases[i].gpus, s.gpus, s.gpu_milli);
        /* Shown as given: an integer, or the fraction as a real. */
        json_t *j = jobspec_to_json(&s);
        json_t *g = json_object_get(j, "gpus");
        if (cases[i].milli) {
            assert_true(json_is_real(g));
            assert_true(json_real_value(g) == cases[i].milli / 1000.0);
        } else {
            assert_true(json_is_integer(g));
            assert_int_equal(json_integer_value(g), cases[i].whole);
        }
        json_decref(j);
        jobspec_release(&s);
    }
    expect_refused_text("{" CMD ", \"gpus\": 0.0005}",
                        "field 'gpus': a fraction has at most three decimals");
    expect_refused_text("{" CMD ", \"gpus\": 0.9995}",
                        "field 'gpus': a fraction has at most three decimals");
    expect_refused_text("{" CMD ", \"gpus\": 1e-12}",
                        "field 'gpus': a fraction has at most three decimals");
    expect_refused_text("{" CMD ", \"gpus\": 1023.5}",
                        "field 'gpus': 1023.5 is neither whole GPUs nor a fraction below 1");
}

static void test_gpu_requests_exclude_each_other_but_zero_gpus_is_no_request(void **state)
{
    (void)state;
    struct jobspec s;
    decode_ok("{" CMD ", \"gpus\": 0, \"gpu_mem_mib\": 4096}", &s);
    assert_int_equal(s.gpu_mem_mib, 4096);
    jobspec_release(&s);
    decode_ok("{" CMD ", \"gpu_mem_mib\": 4096, \"min_gpu_mem_mib\": 40960}", &s);
    jobspec_release(&s);
    decode_ok("{" CMD ", \"gpus\": 16, \"multi_node\": true}", &s);
    assert_int_equal(s.gpus, 16);
    assert_true(s.multi_node);
    jobspec_release(&s);
    decode_ok("{" CMD ", \"gpus\": 0.5, \"multi_node\": false}", &s);
    jobspec_release(&s);
    expect_refused_text("{" CMD ", \"gpus\": 1, \"gpu_mem_mib\": 1}",
                        "fields 'gpus' and 'gpu_mem_mib' are exclusive: ask for GPUs or for a "
                        "share of one GPU's memory");
    expect_refused_text("{" CMD ", \"gpus\": 0.001, \"multi_node\": true}",
                        "fields 'gpus' and 'multi_node': a fraction of a GPU cannot span nodes");
    expect_refused_text("{\"script\": \"x\", \"command\": []}",
                        "fields 'command' and 'script' are exclusive: give one");
}

static void test_env_is_kept_sorted_by_name(void **state)
{
    (void)state;
    struct jobspec s;
    decode_ok("{" CMD ", \"env\": {\"Z\": \"1\", \"a\": \"4\", \"_b\": \"3\", \"A\": \"2\","
              " \"B2\": \"5\", \"PATH\": \"/bin:/usr/bin\", \"E\": \"\"}}",
              &s);
    static const char *const names[] = {"A", "B2", "E", "PATH", "Z", "_b", "a"};
    static const char *const values[] = {"2", "5", "", "/bin:/usr/bin", "1", "3", "4"};
    assert_int_equal(s.nenv, ARRAY_LEN(names));
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        assert_string_equal(s.env[i].name, names[i]);
        assert_string_equal(s.env[i].value, values[i]);
    }
    json_t *j = jobspec_to_json(&s);
    char *text = json_dumps(json_object_get(j, "env"), JSON_COMPACT);
    assert_string_equal(text, "{\"A\":\"2\",\"B2\":\"5\",\"E\":\"\",\"PATH\":\"/bin:/usr/bin\","
                              "\"Z\":\"1\",\"_b\":\"3\",\"a\":\"4\"}");
    free(text);
    json_decref(j);
    jobspec_release(&s);

    decode_ok("{" CMD ", \"env\": {}}", &s);
    assert_int_equal(s.nenv, 0);
    jobspec_release(&s);
    decode_ok("{" CMD ", \"env\": null}", &s);
    assert_int_equal(s.nenv, 0);
    jobspec_release(&s);
}

static void test_dependencies_keep_their_order_and_type(void **state)
{
    (void)state;
    struct jobspec s;
    decode_ok("{" CMD ", \"dependencies\": [{\"type\": \"afterany\", \"job\": 12},"
              " {\"job\": 3, \"type\": \"afterok\"}, {\"type\": \"afterok\", \"job\": "
              "9223372036854775807}]}",
              &s);
    assert_int_equal(s.ndeps, 3);
    assert_int_equal(s.deps[0].type, JOBSPEC_AFTERANY);
    assert_int_equal(s.deps[0].job, 12);
    assert_int_equal(s.deps[1].type, JOBSPEC_AFTEROK);
    assert_int_equal(s.deps[1].job, 3);
    assert_true(s.deps[2].job == INT64_MAX);
    json_t *j = jobspec_to_json(&s);
    char *text = json_dumps(json_object_get(j, "dependencies"), JSON_COMPACT);
    assert_string_equal(text,
                        "[{\"type\":\"afterany\",\"job\":12},{\"type\":\"afterok\",\"job\":3},"
                        "{\"type\":\"afterok\",\"job\":9223372036854775807}]");
    free(text);
    json_decref(j);
    jobspec_release(&s);

    decode_ok("{" CMD ", \"dependencies\": []}", &s);
    assert_int_equal(s.ndeps, 0);
    jobspec_release(&s);
}

static void test_array_syntax_gives_sorted_indices(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        size_t n;
        uint32_t first, last, max_running;
        uint32_t some[8]; /* the first indices, up to eight */
    } cases[] = {
        {"0-15", 16, 0, 15, 0, {0, 1, 2, 3, 4, 5, 6, 7}},
        {"0,6,16-32", 19, 0, 32, 0, {0, 6, 16, 17, 18, 19, 20, 21}},
        {"0-15:4", 4, 0, 12, 0, {0, 4, 8, 12}},
        {"1-7:2%3", 4, 1, 7, 3, {1, 3, 5, 7}},
        {"3", 1, 3, 3, 0, {3}},
        {"10,2,5", 3, 2, 10, 0, {2, 5, 10}},
        {"7-7", 1, 7, 7, 0, {7}},
        {"0-10:20", 1, 0, 0, 0, {0}},
        {"20-30:5,0-4:2", 6, 0, 30, 0, {0, 2, 4, 20, 25, 30}},
        {"0-9999", 10000, 0, 9999, 0, {0, 1, 2, 3, 4, 5, 6, 7}},
        {"0-99%10000", 100, 0, 99, 10000, {0, 1, 2, 3, 4, 5, 6, 7}},
        {"4000000", 1, 4000000, 4000000, 0, {4000000}},
        {"007", 1, 7, 7, 0, {7}},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct jobspec_array a;
        char err[256] = "";
        if (jobspec_array_parse(cases[i].text, &a, err, sizeof(err)) != 0)
            fail_msg("'%s' refused: %s", cases[i].text, err);
        assert_int_equal(a.n, cases[i].n);
        assert_int_equal(a.index[0], cases[i].first);
        assert_int_equal(a.index[a.n - 1], cases[i].last);
        assert_int_equal(a.max_running, cases[i].max_running);
        for (size_t k = 0; k < a.n && k < 8; k++)
            assert_int_equal(a.index[k], cases[i].some[k]);
        for (size_t k = 1; k < a.n; k++)
            assert_true(a.index[k - 1] < a.index[k]);
        free(a.index);
    }
}

static void test_bad_array_syntax_is_refused_with_its_reason(void **state)
{
    (void)state;
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"", "no task indices given"},
        {"%4", "no task indices given"},
        {"-1", "'-1' is not an index, a range A-B or a range with a step A-B:S"},
        {"a", "'a' is not an index, a range A-B or a range with a step A-B:S"},
        {" 1", "' 1' is not an index, a range A-B or a range with a step A-B:S"},
        {"1-", "'1-' is not an index, a range A-B or a range with a step A-B:S"},
        {"3:2", "'3:2' is not an index, a range A-B or a range with a step A-B:S"},
        {"1-5:", "'1-5:' is not an index, a range A-B or a range with a step A-B:S"},
        {"1-5:2:1", "'1-5:2:1' is not an index, a range A-B or a range with a step A-B:S"},
        {"5-3", "'5-3': the range goes down"},
        {"0-10:0", "'0-10:0': the step must be at least 1"},
        {"0-15%", "the running limit after '%' is missing"},
        {"0-15%0", "the running limit '%0' is out of range 1..10000"},
        {"0-15%10001", "the running limit '%10001' is out of range 1..10000"},
        {"0-15%x", "the running limit '%x' is not a number"},
        {"0-3%2%2", "the running limit '%2%2' is not a number"},
        {"1,,2", "an item between commas is empty"},
        {"1,", "an item between commas is empty"},
        {",1", "an item between commas is empty"},
        {"4000001", "'4000001': numbers are at most 4000000"},
        {"99999999999999999999999", "'99999999999999999999999': numbers are at most 4000000"},
        {"0-10000", "10001 tasks, at most 10000 allowed"},
        {"0-3999999,0-4000000", "8000001 tasks, at most 10000 allowed"},
        {"1,1", "index 1 is given twice"},
        {"0-5,3", "index 3 is given twice"},
        {"0-10:2,9-11", "index 10 is given twice"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct jobspec_array a, fresh;
        memset(&a, 0x5A, sizeof(a));
        memset(&fresh, 0x5A, sizeof(fresh));
        char err[256] = "";
        int rc = jobspec_array_parse(cases[i].text, &a, err, sizeof(err));
        if (rc != -EINVAL || strcmp(err, cases[i].msg) != 0)
            fail_msg("'%s':\n got  %d '%s'\n want '%s'", cases[i].text, rc, err, cases[i].msg);
        assert_memory_equal(&a, &fresh, sizeof(a));
    }
    struct jobspec_array a;
    assert_int_equal(jobspec_array_parse(NULL, &a, NULL, 0), -EINVAL);
}

/* decode -> to_json -> decode gives the same spec; so does a trip through
 * text, and a copy. to_json of the second decode is the same JSON. */
static void test_round_trip_through_json_keeps_every_field(void **state)
{
    (void)state;
    static const char *const bodies[] = {
        "{" CMD "}",
        "{\"script\": \"#!/bin/sh\\necho \\\"hi\\\"\\n\"}",
        "{" CMD ", \"gpus\": 0.25}",
        "{" CMD ", \"gpus\": 0.3}",
        "{" CMD ", \"gpus\": 0.001, \"cpus\": 1, \"mem_mib\": 1}",
        "{" CMD ", \"gpus\": 0.999}",
        "{" CMD ", \"gpus\": 1024, \"multi_node\": true}",
        "{" CMD ", \"gpus\": 4.0}",
        "{" CMD ", \"gpu_mem_mib\": 10240}",
        "{" CMD ", \"gpus\": 0, \"gpu_mem_mib\": 1048576, \"min_gpu_mem_mib\": 1048576}",
        "{" CMD ", \"mig_profile\": \"MIG 3g.40gb\", \"gpu_type\": \"h100\", \"ntasks\": 2}",
        "{" CMD ", \"mig_profile\": null}",
        "{" CMD ", \"name\": null, \"team\": null, \"env\": null, \"dependencies\": null,"
        " \"array\": null, \"workdir\": null, \"output\": null, \"error\": null}",
        "{" CMD ", \"env\": {\"Z\": \"z\", \"A\": \"a\\u00e9\", \"M_1\": \"\"}}",
        "{" CMD ", \"dependencies\": [{\"type\": \"afterany\", \"job\": 5},"
        " {\"type\": \"afterok\", \"job\": 1}]}",
        "{" CMD ", \"array\": \"0,6,16-32:3%4\"}",
        "{" CMD ", \"array\": \"9,8,7\"}",
        "{\"command\": [\"python\", \"-c\", \"print('\\u00e9')\", \"\"], \"workdir\": \"/w\"}",
        "{\"name\": \"big \\ud83d\\ude80\", \"team\": \"t\", \"project\": \"p\", \"model\": \"m\","
        " \"priority\": \"urgent\", \"pool\": \"h100\", \"gpu_type\": \"H100-80GB\","
        " \"gpus\": 8, \"min_gpu_mem_mib\": 81920, \"cpus\": 4096, \"mem_mib\": 67108864,"
        " \"time_limit_s\": 31536000, \"multi_node\": true, \"checkpointable\": true,"
        " \"command\": [\"a\"], \"workdir\": \"/\", \"env\": {\"X\": \"1\"},"
        " \"max_retries\": 100, \"requeue\": false,"
        " \"dependencies\": [{\"type\": \"afterok\", \"job\": 77}], \"array\": \"1-7:2%3\","
        " \"output\": \"o\", \"error\": \"/e\"}",
    };
    for (size_t i = 0; i < ARRAY_LEN(bodies); i++) {
        struct jobspec a, b, c, d;
        decode_ok(bodies[i], &a);
        json_t *ja = jobspec_to_json(&a);
        assert_non_null(ja);
        char err[256] = "";
        if (jobspec_decode(ja, &b, err, sizeof(err)) != 0)
            fail_msg("%s: to_json output refused: %s", bodies[i], err);
        assert_spec_equal(&a, &b);

        char *text = json_dumps(ja, JSON_COMPACT);
        decode_ok(text, &c);
        assert_spec_equal(&a, &c);

        json_t *jb = jobspec_to_json(&b);
        assert_true(json_equal(ja, jb));

        assert_int_equal(jobspec_copy(&a, &d), 0);
        assert_spec_equal(&a, &d);

        free(text);
        json_decref(ja);
        json_decref(jb);
        jobspec_release(&a);
        jobspec_release(&b);
        jobspec_release(&c);
        jobspec_release(&d);
    }
}

/* A submission with 0 CPUs or 0 MiB is refused; a stored spec that holds
 * them (accepted before) still loads, reserving nothing. */
static void test_zero_cpus_or_memory_load_only_from_the_store(void **state)
{
    (void)state;
    json_t *body = parse("{" CMD ", \"cpus\": 0, \"mem_mib\": 0}");
    struct jobspec s;
    char err[256];
    assert_int_equal(jobspec_decode(body, &s, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "field 'cpus'"));
    assert_int_equal(jobspec_decode_stored(body, &s, err, sizeof(err)), 0);
    assert_int_equal(s.cpus, 0);
    assert_int_equal(s.mem_mib, 0);
    jobspec_release(&s);
    json_decref(body);
}

static void test_copy_is_deep(void **state)
{
    (void)state;
    struct jobspec a, b;
    decode_ok("{\"command\": [\"run\", \"x\"], \"team\": \"t\", \"env\": {\"K\": \"v\"},"
              " \"dependencies\": [{\"type\": \"afterok\", \"job\": 2}], \"array\": \"0-3\"}",
              &a);
    assert_int_equal(jobspec_copy(&a, &b), 0);
    assert_ptr_not_equal(a.team, b.team);
    assert_ptr_not_equal(a.argv, b.argv);
    assert_ptr_not_equal(a.argv[1], b.argv[1]);
    assert_ptr_not_equal(a.env, b.env);
    assert_ptr_not_equal(a.env[0].value, b.env[0].value);
    assert_ptr_not_equal(a.deps, b.deps);
    assert_ptr_not_equal(a.array.index, b.array.index);
    jobspec_release(&a); /* b stands alone: ASan would see a use after free */
    assert_string_equal(b.argv[1], "x");
    assert_string_equal(b.env[0].value, "v");
    assert_int_equal(b.deps[0].job, 2);
    assert_int_equal(b.array.index[3], 3);
    jobspec_release(&b);
}

static void test_release_frees_everything_and_leaves_an_empty_spec(void **state)
{
    (void)state;
    struct jobspec s, zero;
    memset(&zero, 0, sizeof(zero));
    decode_ok("{\"name\": \"n\", \"team\": \"t\", \"project\": \"p\", \"model\": \"m\","
              " \"priority\": \"c\", \"pool\": \"o\", \"gpu_type\": \"g\", \"command\": [\"a\","
              " \"b\"], \"workdir\": \"/w\", \"env\": {\"A\": \"1\", \"B\": \"2\"},"
              " \"dependencies\": [{\"type\": \"afterok\", \"job\": 1}], \"array\": \"0-9\","
              " \"output\": \"o\", \"error\": \"e\"}",
              &s);
    jobspec_release(&s);
    assert_memory_equal(&s, &zero, sizeof(s));
    jobspec_release(&s); /* again: nothing left to free */
    jobspec_release(NULL);
    decode_ok("{\"script\": \"s\"}", &s);
    jobspec_release(&s);
}

/* A profile in any of its spellings is kept as the catalogue names it; the
 * API shows it only when set. */
static void test_mig_profile_is_kept_in_its_canonical_spelling(void **state)
{
    (void)state;
    static const struct {
        const char *body, *want;
    } cases[] = {
        {"{" CMD ", \"mig_profile\": \"1g.10gb\"}", "1g.10gb"},
        {"{" CMD ", \"mig_profile\": \"MIG 1g.10gb\"}", "1g.10gb"},
        {"{" CMD ", \"mig_profile\": \"mig-1G.10GB\"}", "1g.10gb"},
        {"{" CMD ", \"mig_profile\": \"1g.10gb.me\", \"gpu_type\": \"H100-80GB\"}", "1g.10gb+me"},
        {"{" CMD ", \"mig_profile\": \"7g.141gb\", \"gpu_type\": \"h200\"}", "7g.141gb"},
        {"{" CMD ", \"mig_profile\": \"1g.5gb\", \"gpu_type\": \"a100\"}", "1g.5gb"},
        {"{" CMD ", \"mig_profile\": \"2g.20gb\", \"gpus\": 0, \"gpu_mem_mib\": 0,"
         " \"nodes\": 1, \"ntasks\": 4}",
         "2g.20gb"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct jobspec s;
        decode_ok(cases[i].body, &s);
        assert_text_equal(cases[i].body, s.mig_profile, cases[i].want);
        assert_int_equal(s.gpus, 0);
        assert_int_equal(s.gpu_milli, 0);
        assert_int_equal(s.gpu_mem_mib, 0);
        json_t *j = jobspec_to_json(&s);
        assert_string_equal(json_string_value(json_object_get(j, "mig_profile")), cases[i].want);
        json_decref(j);
        jobspec_release(&s);
    }
    struct jobspec s;
    decode_ok("{" CMD "}", &s);
    json_t *j = jobspec_to_json(&s);
    assert_null(json_object_get(j, "mig_profile"));
    json_decref(j);
    jobspec_release(&s);
}

static void test_mig_profile_refusals_name_the_fields(void **state)
{
    (void)state;
    static const struct {
        const char *body, *msg;
    } cases[] = {
        {"{" CMD ", \"mig_profile\": 1}", "field 'mig_profile': expected a string, got an integer"},
        {"{" CMD ", \"mig_profile\": \"\"}",
         "field 'mig_profile': length 0 is out of range 1..128 bytes"},
        {"{" CMD ", \"mig_profile\": \"1g/10gb\"}",
         "field 'mig_profile': '1g/10gb' may hold only letters, digits, '.', '+', '-' and ' ' "
         "(a MIG profile such as 1g.10gb)"},
        {"{" CMD ", \"mig_profile\": \"1g.11gb\"}",
         "field 'mig_profile': no GPU type has MIG profile '1g.11gb' (known: " MIG_KNOWN ")"},
        {"{" CMD ", \"mig_profile\": \"1g.10gb\", \"gpus\": 1}",
         "fields 'mig_profile' and 'gpus' are exclusive: ask for GPUs or for one MIG instance "
         "per job (CUDA shows a process one MIG device)"},
        {"{" CMD ", \"mig_profile\": \"1g.10gb\", \"gpus\": 0.5}",
         "fields 'mig_profile' and 'gpus' are exclusive: ask for GPUs or for one MIG instance "
         "per job (CUDA shows a process one MIG device)"},
        {"{" CMD ", \"mig_profile\": \"1g.10gb\", \"gpus_per_node\": 1}",
         "fields 'mig_profile' and 'gpus_per_node' are exclusive: one MIG instance per job "
         "(CUDA shows a process one MIG device)"},
        {"{" CMD ", \"mig_profile\": \"1g.10gb\", \"gpus_per_task\": 1}",
         "fields 'mig_profile' and 'gpus_per_task' are exclusive: one MIG instance per job "
         "(CUDA shows a process one MIG device)"},
        {"{" CMD ", \"mig_profile\": \"1g.10gb\", \"gpu_mem_mib\": 4096}",
         "fields 'mig_profile' and 'gpu_mem_mib' are exclusive: ask for a profile or for GPU "
         "memory (which maps to the smallest profile that holds it)"},
        {"{" CMD ", \"mig_profile\": \"1g.10gb\", \"min_gpu_mem_mib\": 4096}",
         "fields 'mig_profile' and 'min_gpu_mem_mib' are exclusive: the profile says the "
         "instance's memory"},
        {"{" CMD ", \"mig_profile\": \"1g.10gb\", \"nodes\": 2}",
         "fields 'mig_profile' and 'nodes': one MIG instance per job (CUDA shows a process one "
         "MIG device), on one node"},
        {"{" CMD ", \"mig_profile\": \"1g.10gb\", \"multi_node\": true}",
         "fields 'mig_profile' and 'multi_node': one MIG instance per job (CUDA shows a process "
         "one MIG device), on one node"},
        {"{" CMD ", \"mig_profile\": \"1g.10gb\", \"exclusive\": true}",
         "fields 'mig_profile' and 'exclusive': an exclusive job holds whole nodes, not one MIG "
         "instance"},
        {"{" CMD ", \"mig_profile\": \"1g.10gb\", \"gpu_type\": \"L40S\"}",
         "fields 'mig_profile' and 'gpu_type': GPU type \"L40S\" has no MIG; MIG GPU types: "
         "A100-40GB, A100-80GB, H100-80GB, H200-141GB"},
        {"{" CMD ", \"mig_profile\": \"1g.5gb\", \"gpu_type\": \"H100-80GB\"}",
         "fields 'mig_profile' and 'gpu_type': " H100_NO_1G5},
        {"{" CMD ", \"mig_profile\": \"7g.141gb\", \"gpu_type\": \"a100\"}",
         "fields 'mig_profile' and 'gpu_type': no GPU type that 'a100' names has MIG profile "
         "'7g.141gb'"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++)
        expect_refused_text(cases[i].body, cases[i].msg);
}

static void test_error_buffer_may_be_short_or_absent(void **state)
{
    (void)state;
    json_t *body = parse("{" CMD ", \"gpus\": 1.5}");
    struct jobspec s;
    assert_int_equal(jobspec_decode(body, &s, NULL, 0), -EINVAL);
    char err[16];
    memset(err, 'x', sizeof(err));
    assert_int_equal(jobspec_decode(body, &s, err, 8), -EINVAL);
    assert_string_equal(err, "field '");
    assert_int_equal(err[8], 'x');
    json_decref(body);
    assert_int_equal(jobspec_decode(NULL, &s, err, sizeof(err)), -EINVAL);

    /* Cut anywhere, a message that quotes user text is still valid UTF-8. */
    body = parse("{" CMD ", \"pool\": \"\\u00e9\\u20ac\\ud83d\\ude80 x\"}");
    char full[256], cut[64];
    assert_int_equal(jobspec_decode(body, &s, full, sizeof(full)), -EINVAL);
    assert_string_equal(full, "field 'pool': '\xc3\xa9\xe2\x82\xac\xf0\x9f\x9a\x80 x' may hold "
                              "only letters, digits, '.', '_' and '-'");
    for (size_t len = 1; len < 40; len++) {
        memset(cut, 'x', sizeof(cut));
        assert_int_equal(jobspec_decode(body, &s, cut, len), -EINVAL);
        assert_true(strlen(cut) < len);
        assert_int_equal(strncmp(cut, full, strlen(cut)), 0);
        assert_int_equal(jsonv_check_utf8(cut, strlen(cut)), 0);
    }
    json_decref(body);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minimal_submission_gets_every_default),
        cmocka_unit_test(test_full_submission_fills_every_field),
        cmocka_unit_test(test_script_without_shebang_is_accepted),
        cmocka_unit_test(test_bad_submissions_are_refused_with_one_exact_line),
        cmocka_unit_test(test_every_size_limit_is_enforced_at_its_bound),
        cmocka_unit_test(test_invalid_utf8_is_refused_where_it_can_enter),
        cmocka_unit_test(test_names_take_their_allowed_characters),
        cmocka_unit_test(test_fractions_become_milli_gpus_and_whole_reals_whole_gpus),
        cmocka_unit_test(test_gpu_requests_exclude_each_other_but_zero_gpus_is_no_request),
        cmocka_unit_test(test_env_is_kept_sorted_by_name),
        cmocka_unit_test(test_dependencies_keep_their_order_and_type),
        cmocka_unit_test(test_array_syntax_gives_sorted_indices),
        cmocka_unit_test(test_bad_array_syntax_is_refused_with_its_reason),
        cmocka_unit_test(test_round_trip_through_json_keeps_every_field),
        cmocka_unit_test(test_zero_cpus_or_memory_load_only_from_the_store),
        cmocka_unit_test(test_copy_is_deep),
        cmocka_unit_test(test_release_frees_everything_and_leaves_an_empty_spec),
        cmocka_unit_test(test_mig_profile_is_kept_in_its_canonical_spelling),
        cmocka_unit_test(test_mig_profile_refusals_name_the_fields),
        cmocka_unit_test(test_error_buffer_may_be_short_or_absent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

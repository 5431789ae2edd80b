/* test_cluster_jobspec_shape.c - Slurm's shape of a job in a submission:
 * what sbatch's per-node and per-task options make of the totals (each
 * against Slurm's documented meaning), the refusals with their exact
 * messages, the signal and constraint syntax, and that the totals the API
 * shows decode back to the same spec. */
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
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define CMD          "\"command\": [\"true\"]"

static int decode_text(const char *text, struct jobspec *ret, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *body = json_loads(text, 0, &jerr);
    if (!body)
        fail_msg("test JSON does not parse: %s: %s", text, jerr.text);
    int rc = jobspec_decode(body, ret, err, errlen);
    json_decref(body);
    return rc;
}

/* What a body makes: the totals the scheduler reads, and the tasks. */
static void test_per_node_and_per_task_amounts_make_the_totals(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        int gpus, cpus, tasks;
        long long mem;
        bool multi_node;
    } cases[] = {
        /* sbatch --nodes=2 --gres=gpu:8: 16 GPUs on two nodes, 1 task and
         * 1 CPU per node, 1024 MiB per node */
        {"{" CMD ", \"nodes\": 2, \"gpus_per_node\": 8}", 16, 2, 2, 2048, true},
        /* --gpus=16 --nodes=2: 16 in all */
        {"{" CMD ", \"nodes\": 2, \"gpus\": 16}", 16, 2, 2, 2048, true},
        /* --nodes=2 --ntasks-per-node=8 --gpus-per-task=1 --cpus-per-task=4 --mem=64G */
        {"{" CMD ", \"nodes\": 2, \"ntasks_per_node\": 8, \"gpus_per_task\": 1,"
         " \"cpus_per_task\": 4, \"mem_per_node_mib\": 65536}",
         16, 64, 16, 131072, true},
        /* --ntasks=16 --ntasks-per-node=8: two nodes */
        {"{" CMD ", \"ntasks\": 16, \"ntasks_per_node\": 8}", 0, 16, 16, 2048, true},
        /* --ntasks=4 --gpus-per-task=2 on one node */
        {"{" CMD ", \"ntasks\": 4, \"gpus_per_task\": 2}", 8, 4, 4, 1024, false},
        /* --cpus-per-task=8 --mem-per-cpu=2G: 16 GiB */
        {"{" CMD ", \"cpus_per_task\": 8, \"mem_per_cpu_mib\": 2048}", 0, 8, 1, 16384, false},
        /* --gpus=4 --mem-per-gpu=10G: 40 GiB */
        {"{" CMD ", \"gpus\": 4, \"mem_per_gpu_mib\": 10240}", 4, 1, 1, 40960, false},
        /* --mem=0: the whole node, nothing counted here */
        {"{" CMD ", \"gpus\": 1, \"mem_whole_node\": true}", 1, 1, 1, 0, false},
        /* -N 1: one node, like no -N */
        {"{" CMD ", \"nodes\": 1, \"gpus_per_node\": 4}", 4, 1, 1, 1024, false},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct jobspec s;
        char err[256] = "";
        if (decode_text(cases[i].body, &s, err, sizeof(err)) != 0)
            fail_msg("%s: refused: %s", cases[i].body, err);
        if (s.gpus != cases[i].gpus || s.cpus != cases[i].cpus ||
            jobspec_tasks(&s) != cases[i].tasks || s.mem_mib != cases[i].mem ||
            s.multi_node != cases[i].multi_node)
            fail_msg("%s: gpus %d cpus %d tasks %d mem %lld multi %d", cases[i].body, s.gpus,
                     s.cpus, jobspec_tasks(&s), (long long)s.mem_mib, s.multi_node);
        /* what the API shows decodes to the same totals */
        json_t *j = jobspec_to_json(&s);
        struct jobspec t;
        if (jobspec_decode(j, &t, err, sizeof(err)) != 0)
            fail_msg("%s: its JSON is refused: %s", cases[i].body, err);
        assert_int_equal(t.gpus, s.gpus);
        assert_int_equal(t.cpus, s.cpus);
        assert_int_equal(t.mem_mib, s.mem_mib);
        assert_int_equal(t.nodes, s.nodes);
        assert_int_equal(jobspec_tasks(&t), jobspec_tasks(&s));
        json_t *k = jobspec_to_json(&t);
        assert_true(json_equal(j, k));
        json_decref(j);
        json_decref(k);
        jobspec_release(&s);
        jobspec_release(&t);
    }
}

static void test_shapes_that_cannot_be_honoured_are_refused_by_field(void **state)
{
    (void)state;
    static const struct {
        const char *body, *msg;
    } cases[] = {
        {"{" CMD ", \"nodes\": 2, \"gpus\": 3}",
         "field 'gpus': 3 over 2 nodes; a gang is spread evenly, so give a multiple of 2"},
        {"{" CMD ", \"nodes\": 2, \"gpus\": 0.5}",
         "fields 'nodes' and 'gpus': a share of one GPU cannot span 2 nodes"},
        {"{" CMD ", \"nodes\": 2, \"gpus_per_node\": 8, \"gpus\": 8}",
         "fields 'gpus' and 'gpus_per_node' disagree: 8 and 16"},
        {"{" CMD ", \"nodes\": 2, \"ntasks\": 3}",
         "fields 'ntasks' and 'nodes': 3 tasks over 2 nodes; tasks are spread evenly, so "
         "give a multiple of 2"},
        {"{" CMD ", \"ntasks\": 6, \"ntasks_per_node\": 4}",
         "fields 'ntasks' and 'ntasks_per_node': 6 tasks are not 4 on each of 1 nodes"},
        {"{" CMD ", \"cpus\": 3, \"cpus_per_task\": 2}",
         "fields 'cpus' and 'cpus_per_task' disagree: 3 and 2"},
        {"{" CMD ", \"mem_per_node_mib\": 100, \"mem_per_cpu_mib\": 100}",
         "fields 'mem_per_node_mib', 'mem_per_cpu_mib', 'mem_per_gpu_mib' and "
         "'mem_whole_node' are exclusive: give one"},
        {"{" CMD ", \"mem_per_gpu_mib\": 100}",
         "field 'mem_per_gpu_mib': the job asks for no whole GPUs"},
        {"{" CMD ", \"nodes\": 1, \"multi_node\": true}",
         "fields 'nodes' and 'multi_node': 1 node keeps the job on one node"},
        {"{" CMD ", \"signal\": \"R:USR1@60\"}",
         "field 'signal': in 'R:USR1@60', only 'B:' (the batch shell alone) may come before the "
         "signal"},
        {"{" CMD ", \"signal\": \"USR9\"}",
         "field 'signal': 'USR9' is not [B:]SIG[@SECS] with SIG a signal name (USR1, TERM, ...) "
         "or a number 1..64"},
        {"{" CMD ", \"signal\": \"USR1@70000\"}",
         "field 'signal': in 'USR1@70000', the time after '@' is not 0..65535 seconds"},
        {"{" CMD ", \"constraint\": \"[a|b]\"}",
         "field 'constraint': '[' in '[a|b]' is not supported: give feature names "
         "([A-Za-z0-9._-]) joined by '&' (and) or '|' (or)"},
        {"{" CMD ", \"constraint\": \"a&&b\"}",
         "field 'constraint': 'a&&b' has an empty feature name (features are joined by '&' or "
         "'|')"},
        {"{" CMD ", \"open_mode\": \"overwrite\"}",
         "field 'open_mode': 'overwrite' is not one of truncate, append"},
        {"{" CMD ", \"launch\": \"all\"}",
         "field 'launch': 'all' is not one of every_node, first_node"},
        {"{" CMD ", \"submit_dir\": \"rel\"}",
         "field 'submit_dir': must be an absolute path (start with '/')"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct jobspec s;
        char err[512] = "";
        int rc = decode_text(cases[i].body, &s, err, sizeof(err));
        if (rc != -EINVAL || strcmp(err, cases[i].msg) != 0)
            fail_msg("%s:\n got  %d '%s'\n want '%s'", cases[i].body, rc, err, cases[i].msg);
    }
}

/* Slurm's --signal: a name with or without SIG, or a number; 60 s by
 * default; written back in one canonical form. */
static void test_signal_forms_read_and_write_canonically(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out;
        int num, before;
        bool batch;
    } cases[] = {
        {"USR1", "USR1@60", 10, 60, false},    {"B:SIGUSR2@300", "B:USR2@300", 12, 300, true},
        {"sigterm@0", "TERM@0", 15, 0, false}, {"10@90", "USR1@90", 10, 90, false},
        {"B:40", "B:40@60", 40, 60, true},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char body[128], err[256] = "";
        snprintf(body, sizeof(body), "{" CMD ", \"signal\": \"%s\"}", cases[i].in);
        struct jobspec s;
        if (decode_text(body, &s, err, sizeof(err)) != 0)
            fail_msg("%s: %s", body, err);
        assert_int_equal(s.signal, cases[i].num);
        assert_int_equal(s.signal_before_s, cases[i].before);
        assert_int_equal(s.signal_batch_only, cases[i].batch);
        json_t *j = jobspec_to_json(&s);
        assert_string_equal(json_string_value(json_object_get(j, "signal")), cases[i].out);
        json_decref(j);
        jobspec_release(&s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_per_node_and_per_task_amounts_make_the_totals),
        cmocka_unit_test(test_shapes_that_cannot_be_honoured_are_refused_by_field),
        cmocka_unit_test(test_signal_forms_read_and_write_canonically),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

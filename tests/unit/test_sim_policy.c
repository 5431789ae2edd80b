/* test_sim_policy.c - the simulator's policies: presets, and policy files
 * (YAML or JSON) that change any setting of a preset; what `gpuorch policy`
 * writes reads back as the same policy; every bad field is refused with the
 * file, line and field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "core/model.h"
#include "sim/policy.h"

static int parse(const char *text, const char *path, struct sim_policy *p, char *err, size_t errlen)
{
    return sim_policy_parse(p, text, strlen(text), path, err, errlen);
}

static void assert_same_core(const struct sched_policy *a, const struct sched_policy *b)
{
    assert_int_equal(a->order, b->order);
    assert_int_equal(a->within, b->within);
    assert_int_equal(a->packing, b->packing);
    assert_int_equal(a->backfill, b->backfill);
    assert_int_equal(a->preemption, b->preemption);
    assert_int_equal(a->migrate, b->migrate);
    assert_int_equal(a->fairshare_half_life_ms, b->fairshare_half_life_ms);
    assert_int_equal(a->nlas_thresholds, b->nlas_thresholds);
    for (uint32_t i = 0; i < a->nlas_thresholds; i++)
        assert_int_equal(a->las_thresholds_gpu_ms[i], b->las_thresholds_gpu_ms[i]);
    assert_int_equal(a->las_evict_larger, b->las_evict_larger);
    assert_int_equal(a->preempt_grace_ms, b->preempt_grace_ms);
    assert_int_equal(a->default_time_limit_ms, b->default_time_limit_ms);
}

/* Every preset but the oracles, written and read back, is the same policy
 * with the same name; the oracles are not written. */
static void presets_round_trip_through_a_file(void **state)
{
    (void)state;
    size_t written = 0;
    for (size_t k = 0; sim_policy_name(k); k++) {
        struct sim_policy p, back;
        assert_int_equal(sim_policy_find(sim_policy_name(k), &p), 0);
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        assert_non_null(f);
        int rc = sim_policy_write(f, &p);
        fclose(f);
        if (p.oracle != SIM_ORACLE_NONE) {
            assert_int_equal(rc, GPO_EINVAL);
            assert_int_equal(len, 0);
            free(text);
            continue;
        }
        assert_int_equal(rc, 0);
        char err[512];
        assert_int_equal(
            sim_policy_parse(&back, text, len, "some/where/else.yaml", err, sizeof(err)), 0);
        assert_string_equal(back.name, p.name); /* the file's name: field, not its path */
        assert_int_equal(back.oracle, SIM_ORACLE_NONE);
        assert_same_core(&back.core, &p.core);
        free(text);
        written++;
    }
    assert_int_equal(written, 7);
}

/* Fields left out keep the base preset's values; those given replace them. */
static void a_file_changes_only_what_it_says(void **state)
{
    (void)state;
    struct sim_policy p, base;
    char err[512];
    assert_int_equal(parse("base: fifo-backfill\npreemption: true\n"
                           "las_thresholds_gpu_s: [60, 600, 6000]\npreempt_grace_s: 0\n",
                           "x/fifo-preempt.yaml", &p, err, sizeof(err)),
                     0);
    assert_int_equal(sim_policy_find("fifo-backfill", &base), 0);
    assert_string_equal(p.name, "fifo-preempt");
    assert_true(p.core.preemption);
    assert_int_equal(p.core.nlas_thresholds, 3);
    assert_int_equal(p.core.las_thresholds_gpu_ms[0], 60000);
    assert_int_equal(p.core.las_thresholds_gpu_ms[2], 6000000);
    assert_int_equal(p.core.preempt_grace_ms, 0);
    base.core.preemption = true;
    base.core.nlas_thresholds = 3;
    memcpy(base.core.las_thresholds_gpu_ms, p.core.las_thresholds_gpu_ms,
           sizeof(p.core.las_thresholds_gpu_ms));
    base.core.preempt_grace_ms = 0;
    assert_same_core(&p.core, &base.core);

    /* No base: the default preset; JSON as well as YAML; no thresholds at all. */
    assert_int_equal(parse("{\"name\": \"spread-7\", \"packing\": \"spread\", "
                           "\"fairshare_half_life_s\": 3600, \"las_thresholds_gpu_s\": [], "
                           "\"las_evict_larger\": true}",
                           "p.json", &p, err, sizeof(err)),
                     0);
    assert_int_equal(sim_policy_find("default", &base), 0);
    assert_string_equal(p.name, "spread-7");
    base.core.packing = SCHED_PACK_SPREAD;
    base.core.fairshare_half_life_ms = 3600000;
    base.core.nlas_thresholds = 0;
    base.core.las_evict_larger = true;
    assert_same_core(&p.core, &base.core);
}

/* A policy's default name is its file's name less the extension; one that
 * cannot be a policy name (it goes into --jobs-out's file names) wants a
 * name: field. */
static void names_come_from_the_file_or_its_name_field(void **state)
{
    (void)state;
    struct sim_policy p;
    char err[512];
    assert_int_equal(parse("order: las\n", "/tmp/a.b/las-1h.v2.yaml", &p, err, sizeof(err)), 0);
    assert_string_equal(p.name, "las-1h.v2");
    assert_int_equal(parse("order: las\n", "noext", &p, err, sizeof(err)), 0);
    assert_string_equal(p.name, "noext");
    assert_int_equal(parse("order: las\n", "dir/my policy.yaml", &p, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "give it a 'name'"));
    assert_int_equal(parse("name: mine\n", "dir/my policy.yaml", &p, err, sizeof(err)), 0);
    assert_string_equal(p.name, "mine");
}

/* Each bad file: refused with the file, line and field, and *ret untouched. */
static void bad_files_name_the_line_and_field(void **state)
{
    (void)state;
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"order: sjf\n",
         "p.yaml:1: order: expected one of fifo, priority, fairshare, las, got 'sjf'"},
        {"backfill: true\nwithin_team: fair\n",
         "p.yaml:2: within_team: expected one of submit, las"},
        {"packing: 3\n", "p.yaml:1: packing: expected a name"},
        {"backfill: on\n", "p.yaml:1: backfill: expected true or false, got a string ('on')"},
        {"migrate: 1\n", "p.yaml:1: migrate: expected true or false, got 1"},
        {"las_evict_larger: yes\n",
         "p.yaml:1: las_evict_larger: expected true or false, got a string ('yes')"},
        {"nope: 1\n", "p.yaml:1: nope: unknown field (expected one of: name, base, order"},
        {"base: srtf\n", "p.yaml:1: base: 'srtf' is an oracle"},
        {"base: fastest\n", "p.yaml:1: base: expected a preset"},
        {"name: x/y\n", "p.yaml:1: name: expected 1 to 64 letters"},
        {"name: ..\n", "p.yaml:1: name: expected 1 to 64 letters, digits or '._+-', the first"},
        {"las_thresholds_gpu_s: [100, 100]\n", "p.yaml:1: las_thresholds_gpu_s[1]: expected more "
                                               "than the threshold before (100)"},
        {"las_thresholds_gpu_s: [1, 2, 3, 4, 5, 6, 7, 8]\n",
         "p.yaml:1: las_thresholds_gpu_s: more than 7 entries"},
        {"las_thresholds_gpu_s:\n  - 10\n  - 0.5\n",
         "p.yaml:3: las_thresholds_gpu_s[1]: expected an integer from 1 to 1000000000000, got 0.5"},
        {"las_thresholds_gpu_s: 3600\n",
         "p.yaml:1: las_thresholds_gpu_s: expected a list, got 3600"},
        {"fairshare_half_life_s: 0\n",
         "p.yaml:1: fairshare_half_life_s: expected an integer from 1"},
        {"preempt_grace_s: 86401\n",
         "p.yaml:1: preempt_grace_s: expected an integer from 0 to 86400"},
        {"default_time_limit_s: -1\n",
         "p.yaml:1: default_time_limit_s: expected an integer from 1"},
        {"- order\n", "p.yaml:1: expected a mapping"},
        {"order: [las\n", "p.yaml:"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct sim_policy p, before;
        memset(&p, 0x5a, sizeof(p));
        before = p;
        char err[512] = "";
        int rc = parse(cases[k].text, "p.yaml", &p, err, sizeof(err));
        if (rc != GPO_EINVAL || !strstr(err, cases[k].want))
            fail_msg("case %zu (%s): rc %d, message '%s', want '%s'", k, cases[k].text, rc, err,
                     cases[k].want);
        assert_memory_equal(&p, &before, sizeof(p));
        assert_null(strchr(err, '\n'));
    }
    struct sim_policy p;
    char err[512];
    assert_int_equal(parse("{\"order\": \"las\",}", "p.json", &p, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "p.json:1: invalid JSON"));
    assert_int_equal(sim_policy_load(&p, "/nonexistent/p.yaml", err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "/nonexistent/p.yaml: No such file or directory");
}

/* --policy tells files from presets by a '/' or a '.'. */
static void files_are_told_from_presets(void **state)
{
    (void)state;
    assert_true(sim_policy_is_file("mine.yaml"));
    assert_true(sim_policy_is_file("./mine"));
    assert_false(sim_policy_is_file("fifo-backfill"));
    assert_false(sim_policy_is_file("mine"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(presets_round_trip_through_a_file),
        cmocka_unit_test(a_file_changes_only_what_it_says),
        cmocka_unit_test(names_come_from_the_file_or_its_name_field),
        cmocka_unit_test(bad_files_name_the_line_and_field),
        cmocka_unit_test(files_are_told_from_presets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_cli_sbatch.c - sbatch's values as the API wants them: memory sizes
 * (MiB default, K/M/G/T, rounding, limits), GPU counts and fractions, time
 * limits in Slurm's formats, --dependency's syntax, and --export's items
 * (ALL, NONE, NAME, NAME=VALUE) with what ALL leaves out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "cli/sbatch.h"
#include "base/banned.h"

static void sizes_read_as_sbatch_reads_them(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int64_t mib;
    } good[] = {
        {"4096", 4096},      {"4G", 4096},   {"4g", 4096},
        {"4GB", 4096},       {"4GiB", 4096}, {"512M", 512},
        {"1T", 1024 * 1024}, {"1024K", 1},   {"1K", 1},
        {"1025K", 2},        {"0", 0},       {"1048576G", INT64_C(1) << 30},
    };
    for (size_t k = 0; k < sizeof(good) / sizeof(good[0]); k++) {
        int64_t v = -1;
        if (sbatch_parse_size_mib(good[k].text, &v) != 0 || v != good[k].mib)
            fail_msg("'%s': got %lld, want %lld", good[k].text, (long long)v,
                     (long long)good[k].mib);
    }
    static const char *const bad[] = {"",        "G",   "4Q",  "-4G", "4.5G",
                                      "4 G",     "4GG", "4Gx", "+4",  "99999999999999999999",
                                      "2000000T"};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        int64_t v = -1;
        if (sbatch_parse_size_mib(bad[k], &v) != GPO_EUSAGE || v != -1)
            fail_msg("'%s' was accepted (%lld)", bad[k], (long long)v);
    }
}

static void gpus_are_whole_or_a_fraction_below_one(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int32_t milli;
    } good[] = {{"0", 0},    {"1", 1000},    {"8", 8000},   {"1024", 1024000}, {"0.25", 250},
                {".5", 500}, {"0.125", 125}, {"2.0", 2000}, {"3.", 3000}};
    for (size_t k = 0; k < sizeof(good) / sizeof(good[0]); k++) {
        int32_t v = -1;
        if (sbatch_parse_gpus(good[k].text, &v) != 0 || v != good[k].milli)
            fail_msg("'%s': got %d, want %d", good[k].text, v, good[k].milli);
    }
    static const char *const bad[] = {"", ".", "1.5", "0.3333", "1025", "-1", "two", "1e3", "0,5"};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        int32_t v = -1;
        if (sbatch_parse_gpus(bad[k], &v) != GPO_EUSAGE)
            fail_msg("'%s' was accepted (%d)", bad[k], v);
    }
}

static void mig_profiles_are_told_apart_from_gpu_types_and_counts(void **state)
{
    (void)state;
    static const char *const yes[] = {"1g.10gb",     "7g.141gb",      "MIG 1g.10gb",
                                      "mig-3g.40gb", "1G.10GB",       "1g.10gb+me",
                                      "1g.10gb.me",  "MIG-1g.5gb.ME", "12g.100gb"};
    static const char *const no[] = {
        "",      "1",           "0.5",      "H100-80GB",  "h100",     "1g",      "1g.",
        "1g.10", "1g.10g",      "g.10gb",   "1g.gb",      "1g.10gbx", "MIG",     "MIG ",
        "mig-",  "mig_1g.10gb", "1g.10gb+", "1g.10gb+mx", "1g10gb",   " 1g.10gb"};
    for (size_t k = 0; k < sizeof(yes) / sizeof(yes[0]); k++)
        if (!sbatch_is_mig_profile(yes[k], strlen(yes[k])))
            fail_msg("'%s' is a MIG profile", yes[k]);
    for (size_t k = 0; k < sizeof(no) / sizeof(no[0]); k++)
        if (sbatch_is_mig_profile(no[k], strlen(no[k])))
            fail_msg("'%s' is not a MIG profile", no[k]);
    /* The length bounds it: "1g.10gb:1" up to its colon. */
    assert_true(sbatch_is_mig_profile("1g.10gb:1", 7));
    assert_false(sbatch_is_mig_profile("1g.10gb:1", 9));
    assert_false(sbatch_is_mig_profile(NULL, 0));
}

static void times_take_slurm_formats_and_unlimited_means_none(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int64_t s;
    } good[] = {{"90", 5400},     {"5:30", 330},      {"1:00:00", 3600},
                {"2-12", 216000}, {"1-00:30", 88200}, {"1-02:03:04", 93784},
                {"30m", 1800},    {"UNLIMITED", 0},   {"infinite", 0},
                {"0", 0}};
    for (size_t k = 0; k < sizeof(good) / sizeof(good[0]); k++) {
        int64_t v = -1;
        if (sbatch_parse_time(good[k].text, &v) != 0 || v != good[k].s)
            fail_msg("'%s': got %lld, want %lld", good[k].text, (long long)v, (long long)good[k].s);
    }
    static const char *const bad[] = {"", "abc", "1:60", "1-24", "-5", "1 h", "1h30m"};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        int64_t v = -1;
        if (sbatch_parse_time(bad[k], &v) != GPO_EUSAGE)
            fail_msg("'%s' was accepted (%lld)", bad[k], (long long)v);
    }
}

static void dependencies_list_every_job_with_its_type(void **state)
{
    (void)state;
    json_t *d = NULL;
    char err[256];
    assert_int_equal(sbatch_parse_dependency("afterok:12:13,afterany:7", &d, err, sizeof(err)), 0);
    json_t *want = json_loads("[{\"type\": \"afterok\", \"job\": 12}, "
                              "{\"type\": \"afterok\", \"job\": 13}, "
                              "{\"type\": \"afterany\", \"job\": 7}]",
                              0, NULL);
    assert_true(json_equal(d, want));
    json_decref(d);
    json_decref(want);
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"", "expected afterok:ID"},
        {"afterok", "'afterok' names no job (afterok:ID)"},
        {"afterok:", "'' is not a job id"},
        {"afterok:12:", "'' is not a job id"},
        {"afterok:0", "'0' is not a job id"},
        {"afterok:x1", "'x1' is not a job id"},
        {"afterok:12_3", "'12_3' is not a job id"},
        {"afternotok:3", "'afternotok' is not supported (afterok:ID or afterany:ID)"},
        {"singleton", "'singleton' is not supported"},
        {"afterok:1?afterok:2", "'?' (any one of) is not supported"},
        {"afterok:1,,afterany:2", "'' is not supported"},
        {"afterok:99999999999999999999999", "is not a job id"},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        d = NULL;
        err[0] = '\0';
        if (sbatch_parse_dependency(bad[k].text, &d, err, sizeof(err)) != GPO_EUSAGE || d ||
            !strstr(err, bad[k].why))
            fail_msg("'%s': got '%s', want '%s'", bad[k].text, err, bad[k].why);
    }
}

static void export_sends_what_it_names_and_all_but_our_own_variables(void **state)
{
    (void)state;
    char *envp[] = {"HOME=/home/a",
                    "PATH=/usr/bin",
                    "GPUORCH_TOKEN=gpo_secret",
                    "CUDA_VISIBLE_DEVICES=0",
                    "BASH_FUNC_f%%=() { :; }",
                    "EMPTY=",
                    NULL};
    json_t *env = NULL;
    char err[256];
    assert_int_equal(sbatch_parse_export("ALL", envp, &env, err, sizeof(err)), 0);
    json_t *want = json_pack("{s:s, s:s, s:s}", "HOME", "/home/a", "PATH", "/usr/bin", "EMPTY", "");
    assert_true(json_equal(env, want)); /* no token, no GPU list, no bad name */
    json_decref(env);
    json_decref(want);

    assert_int_equal(sbatch_parse_export("ALL,PATH=/opt/bin,X=a=b", envp, &env, err, sizeof(err)),
                     0);
    assert_string_equal(json_string_value(json_object_get(env, "PATH")), "/opt/bin");
    assert_string_equal(json_string_value(json_object_get(env, "X")), "a=b");
    json_decref(env);

    assert_int_equal(sbatch_parse_export("NONE", envp, &env, err, sizeof(err)), 0);
    assert_int_equal(json_object_size(env), 0);
    json_decref(env);

    /* NAME copies the caller's value; an unset one is left out, as sbatch does. */
    assert_int_equal(sbatch_parse_export("HOME,UNSET,A=1", envp, &env, err, sizeof(err)), 0);
    want = json_pack("{s:s, s:s}", "HOME", "/home/a", "A", "1");
    assert_true(json_equal(env, want));
    json_decref(env);
    json_decref(want);

    assert_int_equal(sbatch_parse_export("A=1,1B=2", envp, &env, err, sizeof(err)), GPO_EUSAGE);
    assert_string_equal(err, "'1B' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)");
    assert_int_equal(sbatch_parse_export("A=1,", envp, &env, err, sizeof(err)), GPO_EUSAGE);

    /* More variables than the API takes: refused with the count. */
    char **many = calloc(SBATCH_ENV_MAX + 2, sizeof(*many));
    for (int k = 0; k <= SBATCH_ENV_MAX; k++) {
        many[k] = malloc(32);
        snprintf(many[k], 32, "V%d=x", k);
    }
    assert_int_equal(sbatch_parse_export("ALL", many, &env, err, sizeof(err)), GPO_EUSAGE);
    assert_non_null(strstr(err, "257 variables, the API takes at most 256"));
    for (int k = 0; k <= SBATCH_ENV_MAX; k++)
        free(many[k]);
    free(many);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sizes_read_as_sbatch_reads_them),
        cmocka_unit_test(gpus_are_whole_or_a_fraction_below_one),
        cmocka_unit_test(mig_profiles_are_told_apart_from_gpu_types_and_counts),
        cmocka_unit_test(times_take_slurm_formats_and_unlimited_means_none),
        cmocka_unit_test(dependencies_list_every_job_with_its_type),
        cmocka_unit_test(export_sends_what_it_names_and_all_but_our_own_variables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

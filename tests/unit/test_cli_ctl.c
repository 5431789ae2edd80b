/* test_cli_ctl.c - scontrol's commands without a server: the fields of
 * `gpuorch update` as the PATCH body they make (every name, Slurm's time
 * forms, dependencies) and each bad word refused naming it; --hold and
 * --begin at submit, from the command line and from #SBATCH lines. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "base/err.h"
#include "cli/cli.h"
#include "cli/ctl.h"
#include "cli/submit.h"
#include "base/banned.h"

static void assert_fields(const char *const *words, size_t n, const char *want)
{
    json_t *got = NULL, *w = json_loads(want, 0, NULL);
    char err[256] = "";
    assert_non_null(w);
    int rc = ctl_update_fields(words, n, &got, err, sizeof(err));
    if (rc || !json_equal(got, w)) {
        char *text = got ? json_dumps(got, JSON_SORT_KEYS) : NULL;
        fail_msg("rc %d (%s): got %s, expected %s", rc, err, text ? text : "-", want);
    }
    json_decref(got);
    json_decref(w);
}

static void update_fields_become_the_patch_body(void **state)
{
    (void)state;
    const char *limit[] = {"TimeLimit=1:30:00"};
    assert_fields(limit, 1, "{\"time_limit_s\": 5400}");
    const char *forms[] = {"time_limit=90", "timelimit=2-00:00:00"}; /* the last one wins */
    assert_fields(forms, 2, "{\"time_limit_s\": 172800}");
    const char *unlimited[] = {"TimeLimit=UNLIMITED"};
    assert_fields(unlimited, 1, "{\"time_limit_s\": 0}");
    const char *all[] = {"Priority=high", "Dependency=afterok:12:13,afterany:14", "TIMELIMIT=30m"};
    assert_fields(all, 3,
                  "{\"priority\": \"high\", \"time_limit_s\": 1800, \"dependencies\": ["
                  "{\"type\": \"afterok\", \"job\": 12}, {\"type\": \"afterok\", \"job\": 13},"
                  " {\"type\": \"afterany\", \"job\": 14}]}");
    const char *qos[] = {"qos=low", "dependencies=afterany:3"};
    assert_fields(
        qos, 2,
        "{\"priority\": \"low\", \"dependencies\": [{\"type\": \"afterany\", \"job\": 3}]}");
}

static void bad_update_words_are_refused_naming_them(void **state)
{
    (void)state;
    static const struct {
        const char *word, *needle;
    } bad[] = {
        {"Nodes=3", "'Nodes=3': expected FIELD=VALUE"},
        {"TimeLimit", "'TimeLimit': expected FIELD=VALUE"},
        {"=5", "'=5'"},
        {"TimeLimit=soon", "TimeLimit: 'soon' is not a duration"},
        {"TimeLimit=", "TimeLimit: '' is not a duration"},
        {"Priority=", "Priority: expected a priority class"},
        {"Dependency=after:3", "Dependency: "},
        {"Dependency=afterok:x", "Dependency: "},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        json_t *got = NULL;
        char err[256] = "";
        const char *words[] = {"Priority=high", bad[k].word};
        int rc = ctl_update_fields(words, 2, &got, err, sizeof(err));
        if (rc != GPO_EUSAGE || got || !strstr(err, bad[k].needle))
            fail_msg("'%s': rc %d, '%s'", bad[k].word, rc, err);
    }
}

/* Builds a submission from argv (after "submit") and a script. */
static int plan(const char *script, char **argv, struct submit_args *args, struct submit_plan *p,
                char *err, size_t errlen)
{
    char *full[16] = {"submit"};
    int argc = 1;
    for (; argv[argc - 1]; argc++)
        full[argc] = argv[argc - 1];
    memset(args, 0, sizeof(*args));
    memset(p, 0, sizeof(*p));
    struct submit_env env = {.cwd = "/work/dir"};
    int rc = submit_args_parse(argc, full, args, err, errlen);
    return rc ? rc
              : submit_plan_build(args, script, script ? strlen(script) : 0, "job.sh", &env, p, err,
                                  errlen);
}

static void hold_and_begin_at_submit(void **state)
{
    (void)state;
    struct submit_args args;
    struct submit_plan p;
    char err[CLI_ERR_MAX] = "";
    char *flags[] = {"-H", "--begin", "now+1hour", "--", "true", NULL};
    int64_t before = (int64_t)time(NULL);
    assert_int_equal(plan(NULL, flags, &args, &p, err, sizeof(err)), 0);
    assert_true(json_is_true(json_object_get(p.body, "hold")));
    int64_t begin = json_integer_value(json_object_get(p.body, "begin"));
    assert_true(begin >= before + 3600 && begin <= (int64_t)time(NULL) + 3600);
    submit_plan_release(&p);
    submit_args_release(&args);

    char *script_argv[] = {"job.sh", NULL};
    const char *script = "#!/bin/sh\n#SBATCH --hold\n#SBATCH --begin=2030-01-02T03:04:05\ntrue\n";
    assert_int_equal(plan(script, script_argv, &args, &p, err, sizeof(err)), 0);
    assert_true(json_is_true(json_object_get(p.body, "hold")));
    begin = json_integer_value(json_object_get(p.body, "begin"));
    /* Local time: within a day of the UTC reading. */
    assert_true(begin > INT64_C(1893553445) - 86400 && begin < INT64_C(1893553445) + 86400);
    submit_plan_release(&p);
    submit_args_release(&args);

    const char *bad = "#!/bin/sh\n#SBATCH --begin=soon\ntrue\n";
    assert_int_equal(plan(bad, script_argv, &args, &p, err, sizeof(err)), GPO_EUSAGE);
    assert_non_null(strstr(err, "job.sh:2: #SBATCH --begin: expected HH:MM[:SS], now[+N"));
    assert_non_null(strstr(err, "got 'soon'"));
    submit_plan_release(&p);
    submit_args_release(&args);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(update_fields_become_the_patch_body),
        cmocka_unit_test(bad_update_words_are_refused_naming_them),
        cmocka_unit_test(hold_and_begin_at_submit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_cli_cost.c - `gpuorch cost`: its flags (bad ones exit 2 naming the
 * flag), the times it accepts, and its table and CSV from canned answers of
 * GET /v1/cost and GET /v1/budgets. No server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli/cost.h"
#include "base/banned.h"

static int parse(struct cost_args *a, int n, ...)
{
    char *argv[16] = {"cost"};
    va_list ap;
    va_start(ap, n);
    for (int k = 0; k < n; k++)
        argv[k + 1] = va_arg(ap, char *);
    va_end(ap);
    return cost_args_parse(n + 1, argv, a);
}

static void flags_are_parsed(void **state)
{
    (void)state;
    struct cost_args a;
    assert_int_equal(parse(&a, 0), 0);
    assert_null(a.by);
    assert_int_equal(a.format, COST_TABLE);
    assert_int_equal(parse(&a, 6, "--by", "project", "--since", "-7d", "--until", "now"), 0);
    assert_string_equal(a.by, "project");
    assert_string_equal(a.since, "-7d");
    assert_string_equal(a.until, "now");
    assert_int_equal(parse(&a, 2, "--by=job", "--csv"), 0);
    assert_string_equal(a.by, "job");
    assert_int_equal(a.format, COST_CSV);
    assert_int_equal(parse(&a, 1, "--json"), 0);
    assert_int_equal(a.format, COST_JSON);
}

static void bad_flags_exit_2(void **state)
{
    (void)state;
    struct cost_args a;
    assert_int_equal(parse(&a, 2, "--by", "colour"), CLI_EXIT_USAGE);
    assert_int_equal(parse(&a, 2, "--since", "yesterday"), CLI_EXIT_USAGE);
    assert_int_equal(parse(&a, 2, "--until", "2026-13-01"), CLI_EXIT_USAGE);
    assert_int_equal(parse(&a, 2, "--json", "--csv"), CLI_EXIT_USAGE);
    assert_int_equal(parse(&a, 1, "--colour"), CLI_EXIT_USAGE);
    assert_int_equal(parse(&a, 1, "extra"), CLI_EXIT_USAGE);
    assert_int_equal(parse(&a, 1, "--since"), CLI_EXIT_USAGE);
}

static void times_take_rfc3339_dates_now_and_relative(void **state)
{
    (void)state;
    assert_int_equal(cost_time_check("2026-11-01T00:00:00Z"), 0);
    assert_int_equal(cost_time_check("2026-11-01T01:00:00+01:00"), 0);
    assert_int_equal(cost_time_check("2026-11-01"), 0);
    assert_int_equal(cost_time_check("now"), 0);
    assert_int_equal(cost_time_check("-7d"), 0);
    assert_int_equal(cost_time_check("-12h"), 0);
    assert_int_equal(cost_time_check("-90s"), 0);
    assert_int_equal(cost_time_check(""), GPO_EUSAGE);
    assert_int_equal(cost_time_check("-7"), GPO_EUSAGE);
    assert_int_equal(cost_time_check("-d"), GPO_EUSAGE);
    assert_int_equal(cost_time_check("7d"), GPO_EUSAGE);
    assert_int_equal(cost_time_check("2026-02-30"), GPO_EUSAGE);
    assert_int_equal(cost_time_check("tomorrow"), GPO_EUSAGE);
}

static const char report_text[] =
    "{\"by\": \"team\", \"since\": \"2026-11-01T00:00:00.000Z\","
    " \"until\": \"2026-12-01T00:00:00.000Z\", \"rate_per_hour\": 5.0,"
    " \"rows\": [{\"key\": \"ml\", \"gpu_hours\": 100.0, \"cost\": 250.0, \"failed_cost\": 10.0,"
    " \"failed_gpu_hours\": 4.0, \"preempted_cost\": 0.0, \"utilization_pct\": 61.5,"
    " \"idle_pct\": 20.0, \"waste_cost\": 50.0},"
    " {\"key\": \"a,b\", \"gpu_hours\": 1.0, \"cost\": 2.5, \"failed_cost\": 0.0,"
    " \"failed_gpu_hours\": 0.0, \"preempted_cost\": 0.0, \"utilization_pct\": null,"
    " \"idle_pct\": null, \"waste_cost\": 0.0}],"
    " \"total\": {\"gpu_hours\": 101.0, \"cost\": 252.5, \"failed_cost\": 10.0,"
    " \"failed_gpu_hours\": 4.0, \"preempted_cost\": 0.0, \"utilization_pct\": 61.5,"
    " \"idle_pct\": 20.0, \"waste_cost\": 50.0}}";

static char *render(const char *budgets_text, enum cost_format f)
{
    json_t *report = json_loads(report_text, 0, NULL);
    json_t *budgets = budgets_text ? json_loads(budgets_text, 0, NULL) : NULL;
    assert_non_null(report);
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    assert_int_equal(cost_render(out, report, budgets, f), 0);
    fclose(out);
    json_decref(report);
    json_decref(budgets);
    return buf;
}

static void table_has_columns_a_total_and_the_budgets(void **state)
{
    (void)state;
    char *text = render("[{\"team\": \"ml\", \"month\": \"2026-11\", \"monthly\": 200.0,"
                        " \"spent\": 252.5, \"fraction\": 1.2625, \"alert\": true,"
                        " \"over\": true}]",
                        COST_TABLE);
    assert_string_equal(text, "TEAM   GPU-HOURS  COST    FAILED  UTIL%  WASTE\n"
                              "ml     100.00     250.00  10.00   62     50.00\n"
                              "a,b    1.00       2.50    0.00    -      0.00\n"
                              "TOTAL  101.00     252.50  10.00   62     50.00\n"
                              "\n"
                              "2026-11-01T00:00:00.000Z to 2026-12-01T00:00:00.000Z; running now: "
                              "5.00 per hour\n"
                              "\n"
                              "TEAM  MONTH    SPENT   BUDGET  USED%  STATUS\n"
                              "ml    2026-11  252.50  200.00  126    OVER\n");
    free(text);
}

static void csv_quotes_keys_and_leaves_nulls_empty(void **state)
{
    (void)state;
    char *text = render(NULL, COST_CSV);
    assert_string_equal(text, "team,gpu_hours,cost,failed_gpu_hours,failed_cost,preempted_cost,"
                              "utilization_pct,idle_pct,waste_cost\n"
                              "ml,100.000000,250.000000,4.000000,10.000000,0.000000,61.500000,"
                              "20.000000,50.000000\n"
                              "\"a,b\",1.000000,2.500000,0.000000,0.000000,0.000000,,,0.000000\n"
                              "TOTAL,101.000000,252.500000,4.000000,10.000000,0.000000,61.500000,"
                              "20.000000,50.000000\n");
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(flags_are_parsed),
        cmocka_unit_test(bad_flags_exit_2),
        cmocka_unit_test(times_take_rfc3339_dates_now_and_relative),
        cmocka_unit_test(table_has_columns_a_total_and_the_budgets),
        cmocka_unit_test(csv_quotes_keys_and_leaves_nulls_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * cost.c - `gpuorch cost`: GET /v1/cost as a table, CSV or JSON, and the
 * teams' budgets below the table when it is by team.
 */
#include "cli/cost.h"

#include <ctype.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cli/table.h"
#include "client/client.h"
#include "util/opts.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static const struct opts_opt cost_opts[] = {
    {.name = "by", .type = OPTS_STRING, .offset = offsetof(struct cost_args, by)},
    {.name = "since", .type = OPTS_STRING, .offset = offsetof(struct cost_args, since)},
    {.name = "until", .type = OPTS_STRING, .offset = offsetof(struct cost_args, until)},
    {.name = "csv", .type = OPTS_FLAG, .offset = offsetof(struct cost_args, csv)},
    CLI_OPT_JSON(struct cost_args, co),
    CLI_OPTS_COMMON(struct cost_args, co),
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gpuorch cost [--by team|project|model|user|job] [--since T] [--until T]\n"
            "                    [--json | --csv]\n"
            "\n"
            "What GPU time cost, from the controller's ledger: GPU-hours, cost, the part of it\n"
            "spent on failed attempts, the mean GPU utilization of what was paid for, and\n"
            "waste (the cost of GPU time under the team's idle threshold). Members see their\n"
            "team only. With --by team, each team's budget for the month follows.\n"
            "\n"
            "  --by KEY     group by team (default), project, model, user or job\n"
            "  --since T    from T (default: the start of this month in the cost time zone)\n"
            "  --until T    to T, excluded (default: the end of this month)\n"
            "  --csv        comma-separated values with a header line\n"
            "\n"
            "T is an RFC 3339 time (2026-11-01T00:00:00Z), a date (2026-11-01: midnight in\n"
            "the controller's cost time zone), 'now', or relative: -7d, -12h, -30m, -90s.\n");
    cli_help_common(out, true);
}

int cost_time_check(const char *s)
{
    if (!s || !*s)
        return GPO_EUSAGE;
    if (strcmp(s, "now") == 0)
        return 0;
    if (s[0] == '-') {
        int64_t sec;
        return isdigit((unsigned char)s[1]) && strchr("smhd", s[strlen(s) - 1]) &&
                       timefmt_parse_duration(s + 1, &sec) == 0
                   ? 0
                   : GPO_EUSAGE;
    }
    int64_t ms;
    if (strlen(s) == 10) {
        char buf[32];
        snprintf(buf, sizeof(buf), "%sT00:00:00Z", s);
        return timefmt_parse_rfc3339(buf, &ms) == 0 ? 0 : GPO_EUSAGE;
    }
    return timefmt_parse_rfc3339(s, &ms) == 0 ? 0 : GPO_EUSAGE;
}

int cost_args_parse(int argc, char **argv, struct cost_args *ret)
{
    struct cost_args a = {0};
    const char **pos = NULL;
    size_t npos = 0;
    int rc = cli_parse_args("cost", argc, argv, CLI_OPTS(cost_opts), &a, &pos, &npos);
    if (rc == 0 && npos)
        rc =
            cli_usage_error("cost", "unexpected argument '%s' (see 'gpuorch cost --help')", pos[0]);
    free(pos);
    if (rc)
        return rc;
    a.group = CLIENT_COST_BY_TEAM;
    if (a.by && client_cost_by_parse(a.by, &a.group) != 0)
        return cli_usage_error("cost", "--by '%s': expected team, project, model, user or job",
                               a.by);
    const char *names[] = {"--since", "--until"}, *vals[] = {a.since, a.until};
    for (size_t k = 0; k < 2; k++)
        if (vals[k] && cost_time_check(vals[k]))
            return cli_usage_error("cost",
                                   "%s '%s': expected an RFC 3339 time, YYYY-MM-DD, 'now' or a "
                                   "relative time like -7d",
                                   names[k], vals[k]);
    if (a.co.json && a.csv)
        return cli_usage_error("cost", "--json and --csv exclude each other");
    a.format = a.co.json ? COST_JSON : a.csv ? COST_CSV : COST_TABLE;
    *ret = a;
    return 0;
}

static double num(const json_t *o, const char *key)
{
    return json_number_value(json_object_get(o, key));
}

/* A cell: "12.50", or "-" when the value is null. */
static const char *fmt(const json_t *o, const char *key, int decimals, char *buf, size_t len)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_number(v))
        return "-";
    snprintf(buf, len, "%.*f", decimals, json_number_value(v));
    return buf;
}

static int table_row(struct table *t, const char *key, const json_t *r)
{
    char h[32], c[32], f[32], u[32], w[32];
    const char *cells[] = {key,
                           fmt(r, "gpu_hours", 2, h, sizeof(h)),
                           fmt(r, "cost", 2, c, sizeof(c)),
                           fmt(r, "failed_cost", 2, f, sizeof(f)),
                           fmt(r, "utilization_pct", 0, u, sizeof(u)),
                           fmt(r, "waste_cost", 2, w, sizeof(w))};
    return table_add(t, cells);
}

/* A CSV field: quoted when it holds a comma, a quote or a line break. */
static void csv_field(FILE *out, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, out);
        return;
    }
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', out);
        fputc(*s, out);
    }
    fputc('"', out);
}

static const char *const csv_cols[] = {"gpu_hours",   "cost",           "failed_gpu_hours",
                                       "failed_cost", "preempted_cost", "utilization_pct",
                                       "idle_pct",    "waste_cost"};

static void csv_row(FILE *out, const char *key, const json_t *r)
{
    csv_field(out, key);
    for (size_t k = 0; k < ARRAY_LEN(csv_cols); k++) {
        const json_t *v = json_object_get(r, csv_cols[k]);
        if (json_is_number(v))
            fprintf(out, ",%.6f", json_number_value(v));
        else
            fputc(',', out);
    }
    fputc('\n', out);
}

static int budgets_render(FILE *out, const json_t *budgets)
{
    static const char *const head[] = {"TEAM", "MONTH", "SPENT", "BUDGET", "USED%", "STATUS"};
    struct table *t = table_new(ARRAY_LEN(head), head);
    if (!t)
        return GPO_ENOMEM;
    size_t k;
    const json_t *b;
    int rc = 0;
    json_array_foreach(budgets, k, b)
    {
        char s[32], m[32], p[32];
        const char *cells[] = {cli_json_str(b, "team"),
                               cli_json_str(b, "month"),
                               fmt(b, "spent", 2, s, sizeof(s)),
                               fmt(b, "monthly", 2, m, sizeof(m)),
                               (snprintf(p, sizeof(p), "%.0f", 100 * num(b, "fraction")), p),
                               json_is_true(json_object_get(b, "over"))    ? "OVER"
                               : json_is_true(json_object_get(b, "alert")) ? "alert"
                                                                           : "ok"};
        if ((rc = table_add(t, cells)) != 0)
            break;
    }
    if (!rc && json_array_size(budgets)) {
        fputc('\n', out);
        table_print(t, out);
    }
    table_free(t);
    return rc;
}

int cost_render(FILE *out, const json_t *report, const json_t *budgets, enum cost_format f)
{
    const char *by = cli_json_str(report, "by");
    const json_t *rows = json_object_get(report, "rows"), *r;
    size_t k;
    if (f == COST_CSV) {
        fprintf(out, "%s", by ? by : "key");
        for (k = 0; k < ARRAY_LEN(csv_cols); k++)
            fprintf(out, ",%s", csv_cols[k]);
        fputc('\n', out);
        json_array_foreach(rows, k, r) csv_row(out, cli_json_str(r, "key"), r);
        csv_row(out, "TOTAL", json_object_get(report, "total"));
        return 0;
    }
    char keyhead[16] = "TEAM";
    for (k = 0; by && by[k] && k < sizeof(keyhead) - 1; k++)
        keyhead[k] = (char)toupper((unsigned char)by[k]);
    keyhead[by ? k : 4] = '\0';
    const char *head[] = {keyhead, "GPU-HOURS", "COST", "FAILED", "UTIL%", "WASTE"};
    struct table *t = table_new(ARRAY_LEN(head), head);
    if (!t)
        return GPO_ENOMEM;
    int rc = 0;
    json_array_foreach(rows, k, r)
    {
        if ((rc = table_row(t, cli_json_str(r, "key"), r)) != 0)
            break;
    }
    rc = rc ? rc : table_row(t, "TOTAL", json_object_get(report, "total"));
    if (!rc) {
        table_print(t, out);
        char rate[32];
        fprintf(out, "\n%s to %s; running now: %s per hour\n", cli_json_str(report, "since"),
                cli_json_str(report, "until"), fmt(report, "rate_per_hour", 2, rate, sizeof(rate)));
    }
    table_free(t);
    return rc ? rc : budgets ? budgets_render(out, budgets) : 0;
}

int cost_command(int argc, char **argv)
{
    struct cost_args a;
    int rc = cost_args_parse(argc, argv, &a);
    if (rc)
        return rc;
    if (a.co.help) {
        usage(stdout);
        return 0;
    }
    struct client_cost_query q = {.by = a.group, .since = a.since, .until = a.until};
    struct cli c;
    json_t *report = NULL, *budgets = NULL;
    char err[CLI_ERR_MAX];
    if ((rc = cli_connect(&c, "cost", &a.co)) != 0) {
        cli_disconnect(&c);
        return rc;
    }
    rc = client_cost(&c.client, &q, &report, err, sizeof(err));
    if (rc == 0 && a.group == CLIENT_COST_BY_TEAM && a.format == COST_TABLE)
        rc = client_budgets(&c.client, &budgets, err, sizeof(err));
    cli_disconnect(&c);
    if (rc == GPO_ENAMETOOLONG)
        rc = cli_usage_error("cost", "--since or --until is too long");
    else if (rc)
        rc = cli_fail_call("cost", rc, err);
    else if (a.format == COST_JSON)
        rc = cli_print_json(report) ? 0 : cli_fail("cost", "out of memory");
    else if (cost_render(stdout, report, budgets, a.format))
        rc = cli_fail("cost", "out of memory");
    json_decref(report);
    json_decref(budgets);
    return rc;
}

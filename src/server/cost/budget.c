/*
 * budget.c - teams' monthly budgets (cost.h): the sums moved to a new
 * month, what a team spent in the current one, the alert line, the 403 on
 * submissions, GET /v1/budgets' answer, and the cost families of /metrics.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "server/cost/cost.h"
#include "base/banned.h"

void cost_roll(struct cost *c, int64_t now_ms)
{
    if (now_ms >= c->month_start_ms && now_ms < c->month_end_ms)
        return;
    int64_t a, b;
    char label[8];
    if (cost_month(now_ms, &a, &b, label))
        return;
    struct store_ledger_row *rows = NULL;
    size_t n = 0;
    if (store_ledger_range(c->store, a, b, &rows, &n) != 0)
        return; /* tried again at the next call */
    c->month_start_ms = a;
    c->month_end_ms = b;
    memcpy(c->month, label, sizeof(c->month));
    for (size_t k = 0; k < c->nteams; k++)
        c->teams[k].month_micro = 0;
    for (size_t k = 0; k < n; k++) {
        struct cost_team *t = cost_team_get(c, rows[k].team, true);
        if (t)
            t->month_micro += cost_clip(rows[k].cost_micro, rows[k].start_ms, rows[k].end_ms, a, b);
    }
    store_ledger_rows_free(rows, n);
}

int64_t cost_spent(struct cost *c, const char *team, int64_t now_ms)
{
    cost_roll(c, now_ms);
    int64_t spent = cost_team_month(c, team);
    int64_t from = c->month_start_ms;
    for (size_t k = 0; k < c->jobs->n; k++) {
        const struct job *j = c->jobs->v[k];
        if (j->att.n && strcmp(j->team, team) == 0)
            spent += cost_accrued(j, from, now_ms);
    }
    return spent;
}

void cost_tick(struct cost *c, int64_t now_ms)
{
    for (size_t k = 0; k < c->cluster->nteams; k++) {
        const struct cluster_team *mt = &c->cluster->teams[k];
        if (!mt->budget.set)
            continue;
        int64_t spent = cost_spent(c, mt->name, now_ms);
        __int128 line = (__int128)mt->budget.monthly_micro * mt->budget.alert_permille / 1000;
        if (spent < line)
            continue;
        struct cost_team *t = cost_team_get(c, mt->name, true);
        if (!t || strcmp(t->alerted, c->month) == 0)
            continue;
        memcpy(t->alerted, c->month, sizeof(t->alerted));
        char a[48], b[48];
        cost_money_format(spent, a, sizeof(a));
        cost_money_format(mt->budget.monthly_micro, b, sizeof(b));
        fprintf(stderr, "gpuorch server: team %s spent %s of its %s budget of %s (alert at %u%%)\n",
                mt->name, a, c->month, b, mt->budget.alert_permille / 10);
    }
}

void cost_money_format(int64_t micro, char *buf, size_t len)
{
    bool neg = micro < 0;
    uint64_t m = neg ? (uint64_t)(-(micro + 1)) + 1 : (uint64_t)micro;
    uint64_t cents = (m + 5000) / 10000, units = cents / 100;
    char digits[32], grouped[48];
    int n = snprintf(digits, sizeof(digits), "%" PRIu64, units);
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0)
            grouped[o++] = ',';
        grouped[o++] = digits[i];
    }
    grouped[o] = '\0';
    snprintf(buf, len, "%s%s.%02u", neg ? "-" : "", grouped, (unsigned)(cents % 100));
}

bool cost_blocks(struct cost *c, const char *team, const char *cls, int64_t now_ms, char *msg,
                 size_t msglen)
{
    const struct cluster_team *mt = cluster_team_get(c->cluster, team);
    if (!mt || !mt->budget.set || !mt->budget.block_below)
        return false;
    const struct cluster_class *floor = cluster_class_get(c->cluster, mt->budget.block_below);
    const char *name = cls ? cls : cluster_class_get(c->cluster, "normal") ? "normal" : NULL;
    if (!name && c->cluster->nclasses)
        name = c->cluster->classes[0].name; /* the loop's default: the first by name */
    const struct cluster_class *cl = name ? cluster_class_get(c->cluster, name) : NULL;
    if (!floor || !cl || cl->order >= floor->order)
        return false;
    int64_t spent = cost_spent(c, team, now_ms);
    if (spent < mt->budget.monthly_micro)
        return false;
    char a[48], b[48], until[40];
    cost_money_format(spent, a, sizeof(a));
    cost_money_format(mt->budget.monthly_micro, b, sizeof(b));
    time_t t = (time_t)(c->month_end_ms / 1000);
    struct tm tm;
    if (localtime_r(&t, &tm))
        snprintf(until, sizeof(until), "%04d-%02d-%02d", (tm.tm_year + 1900) % 10000, tm.tm_mon + 1,
                 tm.tm_mday);
    else
        snprintf(until, sizeof(until), "next month");
    snprintf(msg, msglen,
             "team '%s' is over its %s budget (spent %s of %s); jobs below class '%s' are "
             "blocked until %s",
             team, c->month, a, b, mt->budget.block_below, until);
    return true;
}

bool cost_visible(const char *only_team, const char *team)
{
    return !only_team || (only_team[0] && team && strcmp(only_team, team) == 0);
}

json_t *cost_budgets_json(struct cost *c, const char *only_team, int64_t now_ms)
{
    json_t *list = json_array();
    for (size_t k = 0; list && k < c->cluster->nteams; k++) {
        const struct cluster_team *mt = &c->cluster->teams[k];
        if (!mt->budget.set || !cost_visible(only_team, mt->name))
            continue;
        int64_t spent = cost_spent(c, mt->name, now_ms);
        double frac = (double)spent / (double)mt->budget.monthly_micro;
        json_t *o =
            json_pack("{s:s, s:s, s:o, s:o, s:f, s:b, s:b, s:o, s:f}", "team", mt->name, "month",
                      c->month, "monthly", cluster_money_json(mt->budget.monthly_micro), "spent",
                      cluster_money_json(spent), "fraction", frac, "alert",
                      frac * 1000 >= mt->budget.alert_permille, "over",
                      spent >= mt->budget.monthly_micro, "block_below",
                      mt->budget.block_below ? json_string(mt->budget.block_below) : json_null(),
                      "alert_at", mt->budget.alert_permille / 1000.0);
        if (!o || json_array_append_new(list, o)) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

/* ---- metrics ---- */

void cost_metrics(struct cost *c, struct prom *p, int64_t now_ms)
{
    cost_roll(c, now_ms);
    /* Teams that exist or have cost something. */
    size_t nt = c->cluster->nteams + c->nteams;
    const char **names = calloc(nt ? nt : 1, sizeof(*names));
    size_t n = 0;
    for (size_t k = 0; names && k < c->cluster->nteams; k++)
        names[n++] = c->cluster->teams[k].name;
    for (size_t k = 0; names && k < c->nteams; k++) {
        if (!cluster_team_get(c->cluster, c->teams[k].name))
            names[n++] = c->teams[k].name;
    }
    if (!names)
        return;
    int64_t *accr = calloc(n ? n : 1, sizeof(*accr)), *rate = calloc(n ? n : 1, sizeof(*rate));
    for (size_t k = 0; accr && rate && k < c->jobs->n; k++) {
        const struct job *j = c->jobs->v[k];
        if (!j->att.n)
            continue;
        for (size_t t = 0; t < n; t++) {
            if (strcmp(names[t], j->team) == 0) {
                accr[t] += cost_accrued(j, INT64_MIN, now_ms);
                rate[t] += j->att.seg.rate_micro;
                break;
            }
        }
    }
    if (accr && rate) {
        prom_family(p, "gpuorch_cost", PROM_COUNTER,
                    "Cost of GPU time charged to the team, all time (ledger and accrual)");
        for (size_t t = 0; t < n; t++) {
            const char *lab[] = {"team", names[t], NULL};
            prom_sample(p, "gpuorch_cost_total", lab,
                        (double)(cost_team_total(c, names[t]) + accr[t]) / 1e6);
        }
        prom_family(p, "gpuorch_cost_rate_per_hour", PROM_GAUGE,
                    "Cost per hour of what the team runs now");
        for (size_t t = 0; t < n; t++) {
            const char *lab[] = {"team", names[t], NULL};
            prom_sample(p, "gpuorch_cost_rate_per_hour", lab, (double)rate[t] / 1e6);
        }
        static const char *const fam[][2] = {
            {"gpuorch_budget_spent", "What the team spent this month (cost time zone)"},
            {"gpuorch_budget_monthly", "The team's monthly budget"},
            {"gpuorch_budget_over", "1 when the team spent its monthly budget"},
        };
        for (size_t f = 0; f < 3; f++) {
            prom_family(p, fam[f][0], PROM_GAUGE, fam[f][1]);
            for (size_t t = 0; t < c->cluster->nteams; t++) {
                const struct cluster_team *mt = &c->cluster->teams[t];
                if (!mt->budget.set)
                    continue;
                int64_t spent = cost_spent(c, mt->name, now_ms);
                double v = f == 0   ? (double)spent / 1e6
                           : f == 1 ? (double)mt->budget.monthly_micro / 1e6
                                    : (spent >= mt->budget.monthly_micro ? 1.0 : 0.0);
                const char *lab[] = {"team", mt->name, NULL};
                prom_sample(p, fam[f][0], lab, v);
            }
        }
    }
    free(accr);
    free(rate);
    free(names);
}

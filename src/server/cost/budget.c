/*
 * budget.c - teams' monthly budgets: months in the cost time zone, what a
 * team spent in the current one, the alert line, the 403 on submissions
 * (cost.h).
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/err.h"
#include "server/cost/cost.h"
#include "base/banned.h"

struct cost_team *cost_team_get(struct cost *c, const char *team, bool create)
{
    for (size_t k = 0; k < c->nteams; k++)
        if (strcmp(c->teams[k].name, team) == 0)
            return &c->teams[k];
    if (!create || strlen(team) > CLUSTER_NAME_MAX)
        return NULL;
    if (c->nteams == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        struct cost_team *v = realloc(c->teams, cap * sizeof(*v));
        if (!v)
            return NULL;
        c->teams = v;
        c->cap = cap;
    }
    struct cost_team *t = &c->teams[c->nteams++];
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", team);
    return t;
}

/* An IANA zone name: letters, digits, '/', '_', '-', '+', no "..", and a
 * file of that name in the zone database. */
static bool zone_known(const char *name)
{
    size_t n = strlen(name);
    if (n < 1 || n > 64 || name[0] == '/' || strstr(name, ".."))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '/' || c == '_' || c == '-' || c == '+'))
            return false;
    }
    const char *dir = getenv("TZDIR");
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir && *dir ? dir : "/usr/share/zoneinfo", name);
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int cost_tz_set(const char *name, char *err, size_t errlen)
{
    const char *zone = name && *name ? name : "UTC";
    bool utc = strcmp(zone, "UTC") == 0;
    if (!utc && !zone_known(zone)) {
        snprintf(err, errlen,
                 "--cost-timezone: unknown time zone '%.64s' (expected an IANA name like "
                 "'Europe/Berlin', or 'UTC')",
                 zone);
        return GPO_EINVAL;
    }
    /* ":" + name reads the zone file; "UTC0" needs no database. */
    char tz[80];
    snprintf(tz, sizeof(tz), utc ? "UTC0" : ":%s", zone);
    if (setenv("TZ", tz, 1) != 0) {
        int e = errno;
        snprintf(err, errlen, "--cost-timezone: %s", strerror(e));
        return -e;
    }
    tzset();
    return 0;
}

int cost_month(int64_t t_ms, int64_t *ret_start_ms, int64_t *ret_end_ms, char label[8])
{
    time_t t = (time_t)(t_ms >= 0 ? t_ms / 1000 : (t_ms - 999) / 1000);
    struct tm tm;
    if (!localtime_r(&t, &tm) || tm.tm_year < -1800 || tm.tm_year > 8000)
        return GPO_ERANGE;
    struct tm a = {.tm_year = tm.tm_year, .tm_mon = tm.tm_mon, .tm_mday = 1, .tm_isdst = -1};
    struct tm b = {.tm_year = tm.tm_year + (tm.tm_mon == 11),
                   .tm_mon = (tm.tm_mon + 1) % 12,
                   .tm_mday = 1,
                   .tm_isdst = -1};
    time_t ta = mktime(&a), tb = mktime(&b);
    if (ta == (time_t)-1 || tb == (time_t)-1)
        return GPO_ERANGE;
    *ret_start_ms = (int64_t)ta * 1000;
    *ret_end_ms = (int64_t)tb * 1000;
    unsigned y = (unsigned)(tm.tm_year + 1900) % 10000u, mo = (unsigned)tm.tm_mon % 12u + 1u;
    label[0] = (char)('0' + y / 1000);
    label[1] = (char)('0' + y / 100 % 10);
    label[2] = (char)('0' + y / 10 % 10);
    label[3] = (char)('0' + y % 10);
    label[4] = '-';
    label[5] = (char)('0' + mo / 10);
    label[6] = (char)('0' + mo % 10);
    label[7] = '\0';
    return 0;
}

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

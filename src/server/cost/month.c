/*
 * month.c - what the cost subsystem's other files stand on (cost.h): the
 * teams' sums table, and calendar months in the cost time zone.
 */

#include <errno.h>
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

int64_t cost_team_total(const struct cost *c, const char *team)
{
    struct cost_team *t = cost_team_get((struct cost *)c, team, false);
    return t ? t->total_micro : 0;
}

int64_t cost_team_month(const struct cost *c, const char *team)
{
    struct cost_team *t = cost_team_get((struct cost *)c, team, false);
    return t ? t->month_micro : 0;
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

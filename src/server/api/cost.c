/*
 * cost.c - GET /v1/cost (what GPU time cost, grouped by team, project,
 * model, user or job, clipped exactly to [since, until): cost/cost.h) and
 * GET /v1/budgets. Members see their team's only, unless private_data
 * opens "usage".
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "server/api/api.h"
#include "server/srv.h"
#include "util/timefmt.h"
#include "base/banned.h"

/* The digits of s[from..to) as a number. */
static int digits_value(const char *s, int from, int to)
{
    int v = 0;
    for (int i = from; i < to; i++)
        v = v * 10 + (s[i] - '0');
    return v;
}

/* "YYYY-MM-DD", digits exactly there (no sign, no space). */
static bool date_parse(const char *s, int *ret_y, int *ret_m, int *ret_d)
{
    static const char shape[] = "dddd-dd-dd";
    if (strlen(s) != sizeof(shape) - 1)
        return false;
    for (size_t i = 0; shape[i]; i++) {
        bool ok = shape[i] == 'd' ? isdigit((unsigned char)s[i]) != 0 : s[i] == shape[i];
        if (!ok)
            return false;
    }
    *ret_y = digits_value(s, 0, 4);
    *ret_m = digits_value(s, 5, 7);
    *ret_d = digits_value(s, 8, 10);
    return true;
}

/*
 * A time of the query: RFC 3339, YYYY-MM-DD (midnight in the cost time
 * zone), "now", or "-N" and a unit (s, m, h, d) before now. 0 or GPO_EINVAL.
 */
static int parse_time(const char *s, int64_t now_ms, int64_t *ret)
{
    if (strcmp(s, "now") == 0) {
        *ret = now_ms;
        return 0;
    }
    if (s[0] == '-') {
        int64_t sec;
        if (timefmt_parse_duration(s + 1, &sec) || sec == TIMEFMT_UNLIMITED ||
            !isdigit((unsigned char)s[1]) || sec > INT64_C(100) * 366 * 86400)
            return GPO_EINVAL;
        *ret = now_ms - sec * 1000;
        return 0;
    }
    int y, m, d;
    if (date_parse(s, &y, &m, &d)) {
        if (m < 1 || m > 12 || d < 1 || d > 31 || y < 1970)
            return GPO_EINVAL;
        struct tm tm = {.tm_year = y - 1900, .tm_mon = m - 1, .tm_mday = d, .tm_isdst = -1};
        time_t t = mktime(&tm);
        if (t == (time_t)-1 || tm.tm_mday != d)
            return GPO_EINVAL;
        *ret = (int64_t)t * 1000;
        return 0;
    }
    return timefmt_parse_rfc3339(s, ret) ? GPO_EINVAL : 0;
}

static int cost(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    int64_t now = srv_now_ms(s);
    const char *by_s = http_request_query(req, "by"), *since_s = http_request_query(req, "since"),
               *until_s = http_request_query(req, "until"), *key = http_request_query(req, "key");
    int by = by_s ? cost_by_parse(by_s) : COST_BY_TEAM;
    if (by < 0)
        return http_request_error(req, 400, "invalid_query",
                                  "by: expected team, project, model, user or job");
    if (key && (!key[0] || strlen(key) > COST_KEY_MAX))
        return http_request_error(req, 400, "invalid_query",
                                  "key: expected the name of one group of 'by' (a team, project, "
                                  "model, user or job id), 1 to %d characters",
                                  COST_KEY_MAX);
    pthread_mutex_lock(&s->lock);
    cost_roll(&s->cost, now);
    int64_t since = s->cost.month_start_ms, until = s->cost.month_end_ms;
    const char *only = api_visible_team(s, req, CLUSTER_PRIVATE_USAGE);
    pthread_mutex_unlock(&s->lock);
    if (since_s && parse_time(since_s, now, &since))
        return http_request_error(req, 400, "invalid_query",
                                  "since: expected an RFC 3339 time, YYYY-MM-DD, 'now' or a "
                                  "relative time like -7d");
    if (until_s && parse_time(until_s, now, &until))
        return http_request_error(req, 400, "invalid_query",
                                  "until: expected an RFC 3339 time, YYYY-MM-DD, 'now' or a "
                                  "relative time like -7d");
    if (since >= until)
        return http_request_error(req, 400, "invalid_query", "since: must be before until");
    int err = 0;
    json_t *out = cost_report(&s->cost, only, (enum cost_by)by, key, since, until, now, &err);
    if (!out && err != GPO_ENOMEM)
        return http_request_error(req, 503, "store", "the ledger: %s", gpo_strerror(err));
    if (!out)
        return http_request_error(req, 500, "internal", "out of memory");
    return http_request_respond_json(req, 200, out);
}

static int budgets(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    pthread_mutex_lock(&s->lock);
    json_t *o =
        cost_budgets_json(&s->cost, api_visible_team(s, req, CLUSTER_PRIVATE_USAGE), srv_now_ms(s));
    pthread_mutex_unlock(&s->lock);
    if (!o)
        return http_request_error(req, 500, "internal", "out of memory");
    return http_request_respond_json(req, 200, o);
}

static const struct http_route routes[] = {
    {"GET", "/v1/cost", cost, 0, NULL},
    {"GET", "/v1/budgets", budgets, 0, NULL},
};
const struct api_routes api_cost_routes = {routes, sizeof(routes) / sizeof(routes[0])};

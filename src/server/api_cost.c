/*
 * api_cost.c - GET /v1/cost (what GPU time cost, grouped by team, project,
 * model, user or job, clipped exactly to [since, until)) and GET
 * /v1/budgets. Members see their team's only.
 *
 * Clipping is exact for cost because a ledger row has one price: its part
 * inside the range is its cost times the overlap over its length. A row's
 * utilization is its segment's mean, so it is weighted by its samples.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/budget.h"
#include "server/ledger.h"
#include "server/srv.h"
#include "util/timefmt.h"
#include "base/banned.h"

struct group {
    char key[JOBSPEC_NAME_MAX + 1];
    double gpu_hours, failed_gpu_hours, preempted_gpu_hours;
    int64_t cost, failed_cost, preempted_cost;
    double waste_cost;
    uint64_t util_sum, util_samples, idle_samples;
};

struct report {
    struct group *g;
    size_t n, cap;
    struct group total;
};

static const char *const bys[] = {"team", "project", "model", "user", "job", NULL};

/*
 * A time of the query: RFC 3339, YYYY-MM-DD (midnight in the cost time
 * zone), "now", or "-N" and a unit (s, m, h, d) before now. 0 or -EINVAL.
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
            return -EINVAL;
        *ret = now_ms - sec * 1000;
        return 0;
    }
    int y, m, d;
    char tail;
    if (strlen(s) == 10 && sscanf(s, "%4d-%2d-%2d%c", &y, &m, &d, &tail) == 3) {
        if (m < 1 || m > 12 || d < 1 || d > 31 || y < 1970 || y > 9999)
            return -EINVAL;
        struct tm tm = {.tm_year = y - 1900, .tm_mon = m - 1, .tm_mday = d, .tm_isdst = -1};
        time_t t = mktime(&tm);
        if (t == (time_t)-1 || tm.tm_mday != d)
            return -EINVAL;
        *ret = (int64_t)t * 1000;
        return 0;
    }
    return timefmt_parse_rfc3339(s, ret) ? -EINVAL : 0;
}

static struct group *group_get(struct report *r, const char *key)
{
    for (size_t k = 0; k < r->n; k++)
        if (strcmp(r->g[k].key, key) == 0)
            return &r->g[k];
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 16;
        struct group *v = realloc(r->g, cap * sizeof(*v));
        if (!v)
            return NULL;
        r->g = v;
        r->cap = cap;
    }
    struct group *g = &r->g[r->n++];
    memset(g, 0, sizeof(*g));
    snprintf(g->key, sizeof(g->key), "%s", key);
    return g;
}

/* One clipped piece of a segment. */
struct piece {
    const char *key;
    const char *outcome; /* NULL: running */
    double gpu_hours;
    int64_t cost;
    uint64_t util_sum, util_samples, idle_samples;
};

static void add_to(struct group *g, const struct piece *p)
{
    bool failed = p->outcome && (!strcmp(p->outcome, "FAILED") || !strcmp(p->outcome, "TIMEOUT") ||
                                 !strcmp(p->outcome, "NODE_FAIL"));
    bool preempted = p->outcome && !strcmp(p->outcome, "PREEMPTED");
    g->gpu_hours += p->gpu_hours;
    g->cost += p->cost;
    g->failed_gpu_hours += failed ? p->gpu_hours : 0;
    g->failed_cost += failed ? p->cost : 0;
    g->preempted_gpu_hours += preempted ? p->gpu_hours : 0;
    g->preempted_cost += preempted ? p->cost : 0;
    if (p->util_samples)
        g->waste_cost += (double)p->cost * (double)p->idle_samples / (double)p->util_samples;
    g->util_sum += p->util_sum;
    g->util_samples += p->util_samples;
    g->idle_samples += p->idle_samples;
}

static int add_piece(struct report *r, const struct piece *p)
{
    struct group *g = group_get(r, p->key);
    if (!g)
        return -ENOMEM;
    add_to(g, p);
    add_to(&r->total, p);
    return 0;
}

static const char *key_of(int by, const char *team, const char *project, const char *model,
                          const char *user, int64_t job, char *buf, size_t len)
{
    const char *k = by == 0 ? team : by == 1 ? project : by == 2 ? model : by == 3 ? user : NULL;
    if (by == 4) {
        snprintf(buf, len, "%" PRId64, job);
        return buf;
    }
    return k ? k : "(none)";
}

static json_t *group_json(const struct group *g, bool with_key)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int e = with_key ? json_object_set_new(o, "key", json_string(g->key)) : 0;
    e |= json_object_set_new(o, "gpu_hours", json_real(g->gpu_hours));
    e |= json_object_set_new(o, "cost", cluster_money_json(g->cost));
    e |= json_object_set_new(o, "failed_gpu_hours", json_real(g->failed_gpu_hours));
    e |= json_object_set_new(o, "failed_cost", cluster_money_json(g->failed_cost));
    e |= json_object_set_new(o, "preempted_gpu_hours", json_real(g->preempted_gpu_hours));
    e |= json_object_set_new(o, "preempted_cost", cluster_money_json(g->preempted_cost));
    e |= json_object_set_new(
        o, "utilization_pct",
        g->util_samples ? json_real((double)g->util_sum / (double)g->util_samples) : json_null());
    e |= json_object_set_new(
        o, "idle_pct",
        g->util_samples ? json_real(100.0 * (double)g->idle_samples / (double)g->util_samples)
                        : json_null());
    e |= json_object_set_new(o, "waste_cost", json_real(g->waste_cost / 1e6));
    if (e) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int by_cost(const void *a, const void *b)
{
    const struct group *x = a, *y = b;
    return x->cost != y->cost ? (x->cost < y->cost ? 1 : -1) : strcmp(x->key, y->key);
}

/* The running attempts' open segments, clipped to [since, min(until, now)). */
static int add_open(struct server *s, const struct srv_user *u, int by, int64_t since,
                    int64_t until, int64_t now, struct report *r)
{
    int64_t hi = until < now ? until : now;
    for (size_t k = 0; k < s->njobs; k++) {
        const struct srv_job *j = s->jobs[k];
        const struct srv_attempt *a = &j->att;
        if (!a->n || !a->seg_start_ms || !srv_user_may(u, j->team))
            continue;
        int64_t lo = a->seg_start_ms > since ? a->seg_start_ms : since;
        if (hi <= lo)
            continue;
        int64_t milli = 0;
        for (size_t i = 0; i < a->nshares; i++)
            milli += a->shares[i].milli;
        char buf[32];
        struct piece p = {
            .key = key_of(by, j->team, j->spec.project, j->spec.model, j->user, j->id, buf,
                          sizeof(buf)),
            .gpu_hours = (double)milli / 1000.0 * (double)(hi - lo) / 3600000.0,
            .cost = srv_ledger_accrued(j, lo, now) - srv_ledger_accrued(j, hi, now),
            .util_sum = a->util_sum,
            .util_samples = a->util_samples,
            .idle_samples = a->idle_samples,
        };
        if (add_piece(r, &p))
            return -ENOMEM;
    }
    return 0;
}

int srv_api_cost(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const struct srv_user *u = srv_request_user(req);
    int64_t now = srv_now_ms();
    const char *by_s = http_request_query(req, "by"), *since_s = http_request_query(req, "since"),
               *until_s = http_request_query(req, "until");
    int by = 0;
    if (by_s) {
        while (bys[by] && strcmp(bys[by], by_s) != 0)
            by++;
        if (!bys[by])
            return http_request_error(req, 400, "invalid_query",
                                      "by: expected team, project, model, user or job");
    }
    pthread_mutex_lock(&s->lock);
    srv_budget_roll(s, now);
    int64_t since = s->cost ? s->cost->month_start_ms : 0;
    int64_t until = s->cost ? s->cost->month_end_ms : now;
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
    struct store_ledger_row *rows = NULL;
    size_t n = 0;
    int rc = store_ledger_range(s->store, since, until, &rows, &n);
    if (rc)
        return http_request_error(req, 503, "store", "the ledger: %s", gpo_strerror(rc));
    struct report r = {0};
    for (size_t k = 0; k < n && !rc; k++) {
        const struct store_ledger_row *l = &rows[k];
        if (!srv_user_may(u, l->team))
            continue;
        int64_t lo = l->start_ms > since ? l->start_ms : since;
        int64_t hi = l->end_ms < until ? l->end_ms : until;
        char buf[32];
        struct piece p = {
            .key = key_of(by, l->team, l->project, l->model, l->user, l->job_id, buf, sizeof(buf)),
            .outcome = l->outcome,
            .gpu_hours =
                hi > lo ? (double)l->gpu_milli / 1000.0 * (double)(hi - lo) / 3600000.0 : 0,
            .cost = srv_ledger_clip(l->cost_micro, l->start_ms, l->end_ms, since, until),
            .util_sum = (uint64_t)l->util_sum,
            .util_samples = (uint64_t)l->util_samples,
            .idle_samples = (uint64_t)l->idle_samples,
        };
        rc = add_piece(&r, &p);
    }
    store_ledger_rows_free(rows, n);
    pthread_mutex_lock(&s->lock);
    rc = rc ? rc : add_open(s, u, by, since, until, now, &r);
    int64_t rate = srv_ledger_rate(s, u->admin ? NULL : u->team);
    pthread_mutex_unlock(&s->lock);
    if (r.n)
        qsort(r.g, r.n, sizeof(*r.g), by_cost);
    json_t *list = rc ? NULL : json_array();
    for (size_t k = 0; list && k < r.n; k++) {
        json_t *o = group_json(&r.g[k], true);
        if (!o || json_array_append_new(list, o)) {
            json_decref(list);
            list = NULL;
        }
    }
    free(r.g);
    char a[TIMEFMT_RFC3339_LEN + 1], b[TIMEFMT_RFC3339_LEN + 1];
    timefmt_rfc3339(since, a, sizeof(a));
    timefmt_rfc3339(until, b, sizeof(b));
    json_t *total = list ? group_json(&r.total, false) : NULL;
    json_t *out =
        total ? json_pack("{s:s, s:s, s:s, s:o, s:o, s:o}", "by", bys[by], "since", a, "until", b,
                          "rows", list, "total", total, "rate_per_hour", cluster_money_json(rate))
              : NULL;
    if (!out) {
        if (!total) /* else json_pack took both */
            json_decref(list);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    return http_request_respond_json(req, 200, out);
}

int srv_api_budgets(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const struct srv_user *u = srv_request_user(req);
    pthread_mutex_lock(&s->lock);
    json_t *o = srv_budgets_json(s, u, srv_now_ms());
    pthread_mutex_unlock(&s->lock);
    if (!o)
        return http_request_error(req, 500, "internal", "out of memory");
    return http_request_respond_json(req, 200, o);
}

/*
 * report.c - GET /v1/cost's answer (cost.h): what GPU time cost, grouped by
 * team, project, model, user or job, clipped exactly to [since, until).
 *
 * Clipping is exact for cost because a ledger row has one price: its part
 * inside the range is its cost times the overlap over its length. A row's
 * utilization is its segment's mean, so it is weighted by its samples.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "server/cost/cost.h"
#include "util/timefmt.h"
#include "base/banned.h"

static const char *const bys[] = {"team", "project", "model", "user", "job", NULL};

int cost_by_parse(const char *name)
{
    for (int k = 0; name && bys[k]; k++)
        if (strcmp(bys[k], name) == 0)
            return k;
    return -1;
}

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
    int64_t rate_micro; /* the running attempts' spend per hour (add_open) */
};

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
    int st = p->outcome ? attempt_state_parse(p->outcome) : -1;
    bool failed = st == ATTEMPT_FAILED || st == ATTEMPT_TIMEOUT || st == ATTEMPT_NODE_FAIL;
    bool preempted = st == ATTEMPT_PREEMPTED;
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
        return GPO_ENOMEM;
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

/* Whether a piece of `key` is in a report of only_key (NULL: every key). */
static bool wanted(const char *only_key, const char *key)
{
    return !only_key || strcmp(only_key, key) == 0;
}

/* The running attempts' open segments, clipped to [since, min(until, now)),
 * and their rate of spend. */
static int add_open(struct cost *c, const char *only_team, int by, const char *only_key,
                    int64_t since, int64_t until, int64_t now, struct report *r)
{
    int64_t hi = until < now ? until : now;
    for (size_t k = 0; k < c->jobs->n; k++) {
        const struct job *j = c->jobs->v[k];
        const struct attempt *a = &j->att;
        if (!a->n || !a->seg.start_ms || !cost_visible(only_team, j->team))
            continue;
        char buf[32];
        const char *key =
            key_of(by, j->team, j->spec.project, j->spec.model, j->user, j->id, buf, sizeof(buf));
        if (!wanted(only_key, key))
            continue;
        r->rate_micro += a->seg.rate_micro; /* now, whatever the window */
        int64_t lo = a->seg.start_ms > since ? a->seg.start_ms : since;
        if (hi <= lo)
            continue;
        int64_t milli = 0;
        for (size_t i = 0; i < a->nshares; i++)
            milli += a->shares[i].milli;
        struct piece p = {
            .key = key,
            .gpu_hours = (double)milli / 1000.0 * (double)(hi - lo) / 3600000.0,
            .cost = cost_accrued(j, lo, now) - cost_accrued(j, hi, now),
            .util_sum = a->util_sum,
            .util_samples = a->util_samples,
            .idle_samples = a->idle_samples,
        };
        if (add_piece(r, &p))
            return GPO_ENOMEM;
    }
    return 0;
}

/* The closed rows of [since, until), clipped. */
static int add_rows(struct cost *c, const char *only_team, int by, const char *only_key,
                    int64_t since, int64_t until, struct report *r)
{
    struct store_ledger_row *rows = NULL;
    size_t n = 0;
    int rc = store_ledger_range(c->store, since, until, &rows, &n);
    for (size_t k = 0; k < n && !rc; k++) {
        const struct store_ledger_row *l = &rows[k];
        if (!cost_visible(only_team, l->team))
            continue;
        int64_t lo = l->start_ms > since ? l->start_ms : since;
        int64_t hi = l->end_ms < until ? l->end_ms : until;
        char buf[32];
        const char *key =
            key_of(by, l->team, l->project, l->model, l->user, l->job_id, buf, sizeof(buf));
        if (!wanted(only_key, key))
            continue;
        struct piece p = {
            .key = key,
            .outcome = l->outcome,
            .gpu_hours =
                hi > lo ? (double)l->gpu_milli / 1000.0 * (double)(hi - lo) / 3600000.0 : 0,
            .cost = cost_clip(l->cost_micro, l->start_ms, l->end_ms, since, until),
            .util_sum = (uint64_t)l->util_sum,
            .util_samples = (uint64_t)l->util_samples,
            .idle_samples = (uint64_t)l->idle_samples,
        };
        rc = add_piece(r, &p);
    }
    store_ledger_rows_free(rows, n);
    return rc;
}

json_t *cost_report(struct cost *c, const char *only_team, enum cost_by by, const char *only_key,
                    int64_t since_ms, int64_t until_ms, int64_t now_ms, int *ret_err)
{
    struct report r = {0};
    int rc = add_rows(c, only_team, (int)by, only_key, since_ms, until_ms, &r);
    pthread_mutex_lock(c->lock);
    rc = rc ? rc : add_open(c, only_team, (int)by, only_key, since_ms, until_ms, now_ms, &r);
    int64_t rate = r.rate_micro;
    pthread_mutex_unlock(c->lock);
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
    timefmt_rfc3339(since_ms, a, sizeof(a));
    timefmt_rfc3339(until_ms, b, sizeof(b));
    json_t *total = list ? group_json(&r.total, false) : NULL;
    json_t *out =
        total ? json_pack("{s:s, s:s, s:s, s:o, s:o, s:o}", "by", bys[by], "since", a, "until", b,
                          "rows", list, "total", total, "rate_per_hour", cluster_money_json(rate))
              : NULL;
    if (!out) {
        if (list && !total) /* else json_pack took both */
            json_decref(list);
        *ret_err = rc ? rc : GPO_ENOMEM;
    }
    return out;
}

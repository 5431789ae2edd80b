/*
 * api_series.c - GET /v1/metrics/series: GPU metrics and the queue length
 * over time, per node, team, GPU, job or priority (docs/monitoring.md).
 *
 * Within the rings' reach (the last hour, since the controller started)
 * values come from the raw samples; before it, from the stored one-minute
 * aggregates (GPU rows for by=node|gpu, attempt rows for by=team|job). Each
 * step's value is the mean of every sample of the group in it. The queue
 * length is kept in memory only (the last hour).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/series.h"
#include "server/srv.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define DEFAULT_SPAN_MS (15 * 60 * INT64_C(1000))
#define MAX_STEPS       10000
#define MAX_GROUPS      20000
#define KEY_MAX         160

enum by { BY_NODE, BY_TEAM, BY_GPU, BY_JOB, BY_PRIORITY, BY_TOTAL };

static const char *const by_names[] = {"node", "team", "gpu", "job", "priority", "total"};
static const char *const metric_names[] = {"gpu_util", "mem_used", "power", "temperature",
                                           "queue_length"};
#define METRIC_QUEUE 4

struct group {
    char key[KEY_MAX];
    double *sum;
    uint64_t *count;
};

struct grid {
    struct server *s;
    enum by by;
    int metric; /* enum series_metric, or METRIC_QUEUE */
    const char *key;
    int64_t since_ms, step_ms;
    size_t nsteps;
    struct group *groups;
    size_t ngroups, cap;
    bool oom;
};

static struct group *group_get(struct grid *g, const char *key)
{
    if (g->key && strcmp(g->key, key) != 0)
        return NULL;
    for (size_t k = g->ngroups; k-- > 0;) /* recent groups first: scans go GPU by GPU */
        if (strcmp(g->groups[k].key, key) == 0)
            return &g->groups[k];
    if (g->ngroups >= MAX_GROUPS)
        return NULL;
    if (g->ngroups == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        struct group *v = realloc(g->groups, cap * sizeof(*v));
        if (!v) {
            g->oom = true;
            return NULL;
        }
        g->groups = v;
        g->cap = cap;
    }
    struct group *gr = &g->groups[g->ngroups];
    snprintf(gr->key, sizeof(gr->key), "%s", key);
    gr->sum = calloc(g->nsteps, sizeof(*gr->sum));
    gr->count = calloc(g->nsteps, sizeof(*gr->count));
    if (!gr->sum || !gr->count) {
        free(gr->sum);
        free(gr->count);
        g->oom = true;
        return NULL;
    }
    g->ngroups++;
    return gr;
}

static void grid_add(struct grid *g, const char *key, int64_t t_ms, double sum, uint64_t n)
{
    if (t_ms < g->since_ms || isnan(sum) || !n)
        return;
    size_t k = (size_t)((t_ms - g->since_ms) / g->step_ms);
    struct group *gr = k < g->nsteps ? group_get(g, key) : NULL;
    if (gr) {
        gr->sum[k] += sum;
        gr->count[k] += n;
    }
}

/* series_sample_fn: a raw sample into its group. */
static void ring_sample(void *ctx, const struct series_gpu_info *gi, int64_t job, int64_t t_ms,
                        const struct series_sample *v)
{
    struct grid *g = ctx;
    char key[KEY_MAX];
    const char *k = key;
    if (g->by == BY_NODE) {
        k = gi->node;
    } else if (g->by == BY_GPU) {
        k = gi->uuid;
    } else if (!job) {
        return;
    } else if (g->by == BY_JOB) {
        snprintf(key, sizeof(key), "%lld", (long long)job);
    } else {
        const struct srv_job *j = srv_job_find(g->s, job); /* s->lock is held */
        if (!j)
            return;
        k = j->team;
    }
    grid_add(g, k, t_ms, series_value(v, (enum series_metric)g->metric), 1);
}

/* store_minute_fn: a stored minute into its group. */
static int minute_row(void *ctx, const struct store_minute *m)
{
    struct grid *g = ctx;
    char key[KEY_MAX];
    const char *k = g->by == BY_NODE || g->by == BY_TEAM ? m->label : m->key;
    if (g->by == BY_JOB) { /* "JOB.ATTEMPT": by job */
        snprintf(key, sizeof(key), "%s", m->key);
        char *dot = strchr(key, '.');
        if (dot)
            *dot = '\0';
        k = key;
    }
    double sum = g->metric == SERIES_UTIL    ? (double)m->util_sum
                 : g->metric == SERIES_MEM   ? (double)m->mem_sum_mib
                 : g->metric == SERIES_POWER ? (double)m->power_sum_mw / 1000.0
                                             : (double)m->temp_max_c * (double)m->samples;
    grid_add(g, k, m->minute_ms, sum, (uint64_t)(m->samples > 0 ? m->samples : 0));
    return g->oom ? -ENOMEM : 0;
}

/* series_queue_fn */
static void queue_point(void *ctx, const char *key, int64_t t_ms, uint32_t value)
{
    struct grid *g = ctx;
    const char *prefix = g->by == BY_TEAM ? "team/" : g->by == BY_PRIORITY ? "priority/" : NULL;
    if (prefix && strncmp(key, prefix, strlen(prefix)) == 0)
        grid_add(g, key + strlen(prefix), t_ms, value, 1);
    else if (!prefix && strcmp(key, "total") == 0)
        grid_add(g, "total", t_ms, value, 1);
}

/* "now", "-15m", "-1h", "-30s" (relative to now) or RFC 3339. */
static bool parse_time(const char *v, int64_t now_ms, int64_t *ret)
{
    int64_t secs;
    if (strcmp(v, "now") == 0) {
        *ret = now_ms;
        return true;
    }
    if (v[0] == '-' && timefmt_parse_duration(v + 1, &secs) == 0 && secs != TIMEFMT_UNLIMITED &&
        secs <= 3650 * 86400) {
        *ret = now_ms - secs * 1000;
        return true;
    }
    return timefmt_parse_rfc3339(v, ret) == 0;
}

/* Seconds ("10", "10s", "1m", "1h"). */
static bool parse_step(const char *v, int64_t *ret_ms)
{
    char *end;
    long long n = strtoll(v, &end, 10);
    int64_t secs;
    if (v[0] >= '0' && v[0] <= '9' && !*end) {
        secs = n;
    } else if (!strchr(v, ':') && timefmt_parse_duration(v, &secs) == 0) {
        /* units only: Slurm's bare minutes were taken as seconds above */
    } else {
        return false;
    }
    if (secs < 1 || secs > 366 * 86400)
        return false;
    *ret_ms = secs * 1000;
    return true;
}

static int lookup(const char *v, const char *const *names, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (strcmp(v, names[k]) == 0)
            return (int)k;
    return -1;
}

static int cmp_group(const void *a, const void *b)
{
    return strcmp(((const struct group *)a)->key, ((const struct group *)b)->key);
}

static json_t *answer(const struct grid *g)
{
    json_t *t = json_array(), *series = json_array();
    for (size_t k = 0; t && k < g->nsteps; k++)
        json_array_append_new(t, json_integer((g->since_ms + (int64_t)k * g->step_ms) / 1000));
    for (size_t i = 0; series && i < g->ngroups; i++) {
        const struct group *gr = &g->groups[i];
        json_t *values = json_array();
        for (size_t k = 0; values && k < g->nsteps; k++)
            json_array_append_new(
                values, gr->count[k] ? json_real(gr->sum[k] / (double)gr->count[k]) : json_null());
        json_array_append_new(series, json_pack("{s:s, s:o*}", "key", gr->key, "values", values));
    }
    return t && series ? json_pack("{s:s, s:s, s:I, s:o, s:o}", "metric", metric_names[g->metric],
                                   "by", by_names[g->by], "step_s", (json_int_t)(g->step_ms / 1000),
                                   "t", t, "series", series)
                       : NULL;
}

static void grid_release(struct grid *g)
{
    for (size_t k = 0; k < g->ngroups; k++) {
        free(g->groups[k].sum);
        free(g->groups[k].count);
    }
    free(g->groups);
}

/* Fills g from the request; 0, or -1 once it answered 400. */
static int parse_request(struct http_request *req, struct server *s, int64_t now, struct grid *g,
                         int64_t *ret_until)
{
    const char *metric = http_request_query(req, "metric");
    const char *by = http_request_query(req, "by");
    const char *since = http_request_query(req, "since");
    const char *until = http_request_query(req, "until");
    const char *step = http_request_query(req, "step");
    *g = (struct grid){.s = s, .key = http_request_query(req, "key")};
    g->metric = metric ? lookup(metric, metric_names, 5) : -1;
    if (g->metric < 0)
        return http_request_error(req, 400, "invalid_query",
                                  "metric: expected gpu_util, mem_used, power, temperature or "
                                  "queue_length"),
               -1;
    bool queue = g->metric == METRIC_QUEUE;
    int b = by ? lookup(by, by_names, 6) : queue ? BY_TOTAL : BY_NODE;
    if (b < 0 || (queue && b != BY_TEAM && b != BY_PRIORITY && b != BY_TOTAL) ||
        (!queue && b > BY_JOB))
        return http_request_error(req, 400, "invalid_query", "by: expected %s for %s",
                                  queue ? "team, priority or total" : "node, team, gpu or job",
                                  metric_names[g->metric]),
               -1;
    g->by = (enum by)b;
    int64_t t0 = now - DEFAULT_SPAN_MS, t1 = now;
    if (since && !parse_time(since, now, &t0))
        return http_request_error(req, 400, "invalid_query",
                                  "since: expected RFC 3339, \"now\" or a relative time such as "
                                  "\"-15m\", got '%.64s'",
                                  since),
               -1;
    if (until && !parse_time(until, now, &t1))
        return http_request_error(req, 400, "invalid_query",
                                  "until: expected RFC 3339, \"now\" or a relative time such as "
                                  "\"-5m\", got '%.64s'",
                                  until),
               -1;
    if (t0 > t1)
        return http_request_error(req, 400, "invalid_query", "since: must not be after until"), -1;
    int64_t span = t1 - t0 > 0 ? t1 - t0 : 1;
    g->step_ms = span / 120 / 1000 * 1000;
    if (g->step_ms < 1000)
        g->step_ms = 1000;
    if (step && !parse_step(step, &g->step_ms))
        return http_request_error(req, 400, "invalid_query",
                                  "step: expected seconds such as \"10s\", \"1m\" or \"30\", "
                                  "from 1 s to 366 days, got '%.64s'",
                                  step),
               -1;
    /* Steps on whole multiples of the step, so that refreshes line up. */
    g->since_ms = t0 - ((t0 % g->step_ms) + g->step_ms) % g->step_ms;
    g->nsteps = (size_t)((t1 - g->since_ms) / g->step_ms) + 1;
    if (g->nsteps > MAX_STEPS)
        return http_request_error(req, 400, "invalid_query",
                                  "step: %lld s gives %zu points over that range; at most %d",
                                  (long long)(g->step_ms / 1000), g->nsteps, MAX_STEPS),
               -1;
    *ret_until = t1;
    return 0;
}

int srv_api_metrics_series(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    int64_t now = srv_now_ms(), until = now;
    struct grid g;
    if (parse_request(req, s, now, &g, &until))
        return 0;
    int64_t end = g.since_ms + (int64_t)g.nsteps * g.step_ms;
    if (end > until + 1)
        end = until + 1;
    int rc = 0;
    if (g.metric == METRIC_QUEUE) {
        series_queue_scan(s->series, g.since_ms, end, now, queue_point, &g);
    } else {
        int64_t ring_start = series_ring_start(s->series, now);
        if (g.since_ms < ring_start) { /* older than the rings: stored minutes */
            bool gpu_rows = g.by == BY_NODE || g.by == BY_GPU;
            const char *key = g.by == BY_GPU ? g.key : NULL;
            rc = store_minutes_get(s->store, gpu_rows ? STORE_MINUTE_GPU : STORE_MINUTE_JOB, key,
                                   g.since_ms, end < ring_start ? end : ring_start, minute_row, &g);
        }
        if (rc == 0 && end > ring_start) {
            pthread_mutex_lock(&s->lock); /* jobs' teams; then the series' own lock */
            series_scan(s->series, g.by == BY_GPU ? g.key : NULL,
                        g.since_ms > ring_start ? g.since_ms : ring_start, end, now, ring_sample,
                        &g);
            pthread_mutex_unlock(&s->lock);
        }
    }
    if (rc || g.oom) {
        grid_release(&g);
        return http_request_error(req, 500, "internal", "reading the series: %s",
                                  rc ? gpo_strerror(rc) : "out of memory");
    }
    if (g.ngroups)
        qsort(g.groups, g.ngroups, sizeof(*g.groups), cmp_group);
    json_t *o = answer(&g);
    grid_release(&g);
    if (!o)
        return http_request_error(req, 500, "internal", "out of memory");
    return http_request_respond_json(req, 200, o);
}

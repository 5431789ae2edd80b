/*
 * query.c - GET /v1/metrics/series's answer (monitor.h): GPU metrics and the
 * queue length over time, per node, team, GPU, job or priority.
 *
 * Within the rings' reach (the last hour, since the controller started)
 * values come from the raw samples; before it, from the stored one-minute
 * aggregates (GPU rows for by=node|gpu, attempt rows for by=team|job, the
 * queue length's rows for it). Each step's value is the mean of every sample
 * of the group in it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/monitor/monitor.h"
#include "server/monitor/series.h"
#include "base/banned.h"

#define MAX_GROUPS 20000
#define KEY_MAX    160

static const char *const by_names[] = {"node",     "team",  "gpu",    "job",
                                       "priority", "total", "service"};
static const char *const metric_names[] = {
    "gpu_util", "mem_used",         "power", "temperature", "queue_length",
    "replicas", "desired_replicas", "rps",   "latency_p50", "latency_p99"};
/* The services' metrics: the last part of their keys, and the unit they are kept in. */
static const char *const svc_parts[] = {"ready", "desired", "rps", "p50", "p99"};
static const double svc_scale[] = {1, 1, 0.001, 0.001, 0.001}; /* milli-rps, ms */

struct group {
    char key[KEY_MAX];
    double *sum;
    uint64_t *count;
};

struct grid {
    struct monitor *m;
    enum monitor_by by;
    int metric;              /* enum series_metric, or MONITOR_QUEUE_LENGTH and after */
    const char *const *keys; /* only these groups (nkeys 0: every one) */
    size_t nkeys;
    const char *node;      /* by node or gpu: only this node's GPUs, or NULL */
    const char *only_team; /* by team or job: this team's groups only, or NULL */
    int64_t since_ms, step_ms;
    size_t nsteps;
    struct group *groups;
    size_t ngroups, cap;
    bool oom;
};

static bool key_wanted(const struct grid *g, const char *key)
{
    for (size_t k = 0; k < g->nkeys; k++)
        if (strcmp(g->keys[k], key) == 0)
            return true;
    return g->nkeys == 0;
}

static struct group *group_get(struct grid *g, const char *key)
{
    if (!key_wanted(g, key))
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

/* Whether the query shows groups of `team`. */
static bool team_shown(const struct grid *g, const char *team)
{
    return !g->only_team || (g->only_team[0] && strcmp(g->only_team, team) == 0);
}

/* series_sample_fn: a raw sample into its group. */
static void ring_sample(void *ctx, const struct series_gpu_info *gi, int64_t job, int64_t t_ms,
                        const struct series_sample *v)
{
    struct grid *g = ctx;
    char key[KEY_MAX];
    const char *k = key;
    if (g->node && strcmp(g->node, gi->node) != 0)
        return;
    if (g->by == MONITOR_BY_NODE) {
        k = gi->node;
    } else if (g->by == MONITOR_BY_GPU) {
        k = gi->uuid;
    } else {
        const struct job *j = job ? jobs_find(g->m->jobs, job) : NULL; /* the state lock is held */
        if (!j || !team_shown(g, j->team))
            return;
        if (g->by == MONITOR_BY_JOB)
            snprintf(key, sizeof(key), "%lld", (long long)job);
        else
            k = j->team;
    }
    grid_add(g, k, t_ms, series_value(v, (enum series_metric)g->metric), 1);
}

/* store_minute_fn: a stored minute into its group. */
static int minute_row(void *ctx, const struct store_minute *m)
{
    struct grid *g = ctx;
    char key[KEY_MAX];
    const char *k = g->by == MONITOR_BY_NODE || g->by == MONITOR_BY_TEAM ? m->label : m->key;
    if (g->node && m->kind == STORE_MINUTE_GPU && strcmp(g->node, m->label) != 0)
        return 0; /* a GPU's minute is labelled with its node */
    /* An attempt's minute is labelled with its team. */
    if ((g->by == MONITOR_BY_TEAM || g->by == MONITOR_BY_JOB) && !team_shown(g, m->label))
        return 0;
    if (g->by == MONITOR_BY_JOB) { /* "JOB.ATTEMPT": by job */
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
    return g->oom ? GPO_ENOMEM : 0;
}

/* A service's point ("service/TEAM/NAME/PART"), when it is of the query's
 * metric and team, into the group of its name. */
static void service_add(struct grid *g, const char *key, int64_t t_ms, double sum, uint64_t n)
{
    const char *team = key + strlen("service/");
    const char *name = strchr(team, '/');
    const char *part = name ? strrchr(name + 1, '/') : NULL;
    size_t m = (size_t)(g->metric - MONITOR_SVC_READY);
    if (!part || strcmp(part + 1, svc_parts[m]) != 0 || (size_t)(part - name - 1) >= KEY_MAX)
        return;
    char tbuf[KEY_MAX], nbuf[KEY_MAX];
    snprintf(tbuf, sizeof(tbuf), "%.*s", (int)(name - team), team);
    snprintf(nbuf, sizeof(nbuf), "%.*s", (int)(part - name - 1), name + 1);
    if (team_shown(g, tbuf))
        grid_add(g, nbuf, t_ms, sum * svc_scale[m], n);
}

/* A queue length point of `key` (n points summing to sum) into its group. */
static void queue_add(struct grid *g, const char *key, int64_t t_ms, double sum, uint64_t n)
{
    if (g->metric >= MONITOR_SVC_READY) {
        if (strncmp(key, "service/", strlen("service/")) == 0)
            service_add(g, key, t_ms, sum, n);
        return;
    }
    const char *prefix = g->by == MONITOR_BY_TEAM       ? "team/"
                         : g->by == MONITOR_BY_PRIORITY ? "priority/"
                                                        : NULL;
    if (prefix && strncmp(key, prefix, strlen(prefix)) == 0 &&
        (g->by != MONITOR_BY_TEAM || team_shown(g, key + strlen(prefix))))
        grid_add(g, key + strlen(prefix), t_ms, sum, n);
    else if (!prefix && strcmp(key, "total") == 0)
        grid_add(g, "total", t_ms, sum, n);
}

/* series_queue_fn */
static void queue_point(void *ctx, const char *key, int64_t t_ms, uint32_t value)
{
    queue_add(ctx, key, t_ms, value, 1);
}

/* store_minute_fn: a stored minute of the queue length. */
static int queue_minute(void *ctx, const struct store_minute *m)
{
    struct grid *g = ctx;
    queue_add(g, m->key, m->minute_ms, (double)m->util_sum,
              (uint64_t)(m->samples > 0 ? m->samples : 0));
    return g->oom ? GPO_ENOMEM : 0;
}

const char *monitor_metric_name(enum monitor_metric m)
{
    return (unsigned)m < sizeof(metric_names) / sizeof(metric_names[0]) ? metric_names[m] : NULL;
}

static int lookup(const char *v, const char *const *names, size_t n)
{
    for (size_t k = 0; v && k < n; k++)
        if (strcmp(v, names[k]) == 0)
            return (int)k;
    return -1;
}

int monitor_metric_parse(const char *name)
{
    return lookup(name, metric_names, sizeof(metric_names) / sizeof(metric_names[0]));
}

int monitor_by_parse(const char *name)
{
    return lookup(name, by_names, sizeof(by_names) / sizeof(by_names[0]));
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

json_t *monitor_series_query(struct monitor *m, const struct monitor_query *q, int64_t now_ms,
                             int *ret_err)
{
    struct grid g = {.m = m,
                     .by = q->by,
                     .metric = (int)q->metric,
                     .keys = q->keys,
                     .nkeys = q->nkeys,
                     .node = q->node,
                     .only_team = q->only_team,
                     .since_ms = q->since_ms,
                     .step_ms = q->step_ms,
                     .nsteps = q->nsteps};
    int64_t end = g.since_ms + (int64_t)g.nsteps * g.step_ms;
    if (end > q->until_ms + 1)
        end = q->until_ms + 1;
    int rc = 0;
    int64_t ring_start = series_ring_start(m->series, now_ms);
    if (g.metric >= MONITOR_QUEUE_LENGTH) { /* the queue's and the services' points */
        if (g.since_ms < ring_start)        /* older than the rings: stored minutes */
            rc = store_minutes_get(m->store, STORE_MINUTE_GAUGE, NULL, g.since_ms,
                                   end < ring_start ? end : ring_start, queue_minute, &g);
        if (rc == 0 && end > ring_start)
            series_queue_scan(m->series, g.since_ms > ring_start ? g.since_ms : ring_start, end,
                              now_ms, queue_point, &g);
    } else {
        if (g.since_ms < ring_start) { /* older than the rings: stored minutes */
            bool gpu_rows = g.by == MONITOR_BY_NODE || g.by == MONITOR_BY_GPU;
            /* one GPU: the store reads its rows only */
            const char *key = g.by == MONITOR_BY_GPU && g.nkeys == 1 ? g.keys[0] : NULL;
            rc = store_minutes_get(m->store, gpu_rows ? STORE_MINUTE_GPU : STORE_MINUTE_JOB, key,
                                   g.since_ms, end < ring_start ? end : ring_start, minute_row, &g);
        }
        if (rc == 0 && end > ring_start) {
            pthread_mutex_lock(m->lock); /* jobs' teams; then the series' own lock */
            series_scan(m->series, g.by == MONITOR_BY_GPU && g.nkeys == 1 ? g.keys[0] : NULL,
                        g.since_ms > ring_start ? g.since_ms : ring_start, end, now_ms, ring_sample,
                        &g);
            pthread_mutex_unlock(m->lock);
        }
    }
    json_t *o = NULL;
    if (!rc && !g.oom) {
        if (g.ngroups)
            qsort(g.groups, g.ngroups, sizeof(*g.groups), cmp_group);
        o = answer(&g);
    }
    grid_release(&g);
    if (!o)
        *ret_err = rc ? rc : GPO_ENOMEM;
    return o;
}

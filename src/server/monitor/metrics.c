/*
 * metrics.c - the monitor's histograms, and its families of GET /metrics:
 * the cluster in Prometheus's text format (docs/prometheus.md lists every
 * family).
 *
 * GPU figures come from each node's latest heartbeat under DCGM exporter's
 * names and labels, so that dashboards made for dcgm-exporter work; the
 * job using a GPU adds hpc_job, team and project. A GPU shared by several
 * jobs (fractions) gets one series per job, each with the whole GPU's
 * figures: sum() over jobs double counts it, max by (UUID) does not. A node
 * whose last sample is older than the node timeout shows no GPU series
 * (the controller itself then counts it lost): Prometheus marks them stale,
 * as when an exporter goes away.
 *
 * The text is built under the state lock (a few milliseconds at 10,000
 * GPUs) and sent after it is released.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/monitor/monitor.h"
#include "util/prom.h"
#include "base/banned.h"

static const double wait_bounds[MONITOR_WAIT_BUCKETS] = {
    1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400};
static const double pass_bounds[MONITOR_PASS_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 7.5, 10};

/* ---- the histograms ---- */

static size_t bucket_of(const double *bounds, size_t n, double v)
{
    size_t k = 0;
    while (k < n && v > bounds[k])
        k++;
    return k; /* n: over the last bound, counted in +Inf only */
}

static int cmp_wait(const char *team, const char *prio, const struct monitor_wait_hist *h)
{
    int c = strcmp(team, h->team);
    return c ? c : strcmp(prio, h->priority);
}

void monitor_observe_wait(struct monitor *m, const char *team, const char *priority,
                          int64_t wait_ms)
{
    team = team ? team : "";
    priority = priority ? priority : "";
    if (strlen(team) > CLUSTER_NAME_MAX || strlen(priority) > CLUSTER_NAME_MAX)
        return;
    size_t lo = 0, hi = m->nwaits;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp_wait(team, priority, &m->waits[mid]);
        if (c == 0)
            lo = hi = mid;
        else if (c > 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == m->nwaits || cmp_wait(team, priority, &m->waits[lo]) != 0) {
        if (m->nwaits >= MONITOR_WAIT_HISTS_MAX)
            return;
        if (m->nwaits == m->waits_cap) {
            size_t cap = m->waits_cap ? 2 * m->waits_cap : 16;
            struct monitor_wait_hist *v = realloc(m->waits, cap * sizeof(*v));
            if (!v)
                return; /* an observation lost, nothing worse */
            m->waits = v;
            m->waits_cap = cap;
        }
        memmove(&m->waits[lo + 1], &m->waits[lo], (m->nwaits - lo) * sizeof(*m->waits));
        m->nwaits++;
        struct monitor_wait_hist *h = &m->waits[lo];
        memset(h, 0, sizeof(*h));
        memcpy(h->team, team, strlen(team) + 1);
        memcpy(h->priority, priority, strlen(priority) + 1);
    }
    struct monitor_wait_hist *h = &m->waits[lo];
    double v = wait_ms > 0 ? (double)wait_ms / 1000.0 : 0;
    size_t b = bucket_of(wait_bounds, MONITOR_WAIT_BUCKETS, v);
    if (b < MONITOR_WAIT_BUCKETS)
        h->counts[b]++;
    h->count++;
    h->sum_s += v;
}

void monitor_observe_pass(struct monitor *m, int64_t duration_ns)
{
    double v = duration_ns > 0 ? (double)duration_ns / 1e9 : 0;
    size_t b = bucket_of(pass_bounds, MONITOR_PASS_BUCKETS, v);
    if (b < MONITOR_PASS_BUCKETS)
        m->pass_counts[b]++;
    m->pass_count++;
    m->pass_sum_s += v;
}

/* ---- DCGM families ---- */

enum { F_UTIL, F_USED, F_FREE, F_POWER, F_TEMP, NFIELDS };

static const struct {
    const char *name, *help;
} dcgm[NFIELDS] = {
    {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."},
    {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."},
    {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."},
    {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."},
    {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."},
};

/* One sampled GPU, its figures (NAN: not reported) and its holders. */
struct gpu_row {
    const char *node, *uuid, *model;
    char gpu[12], device[20];
    double v[NFIELDS];
    size_t lo, hi; /* holders */
};

/* A figure as a number, NAN when not reported. */
static double number(int64_t v)
{
    return v == PROTO_NONE ? NAN : (double)v;
}

/* The configured GPU type of GPU `uuid` of node n ("" when unknown). */
static const char *gpu_model(const struct cluster_node *n, const char *uuid)
{
    for (size_t k = 0; n && k < n->ngpus; k++)
        if (strcmp(n->gpus[k].uuid, uuid) == 0)
            return n->gpus[k].gpu_type;
    return n && n->ngpus ? n->gpus[0].gpu_type : "";
}

/* The rows of every GPU in a fresh sample; 0 or GPO_ENOMEM. */
static int gpu_rows(struct monitor *m, int64_t now, const struct gpu_holder *hv, size_t nh,
                    struct gpu_row **ret, size_t *ret_n)
{
    size_t cap = 0, n = 0;
    struct gpu_row *rows = NULL;
    for (size_t k = 0; k < m->cluster->nnodes; k++) {
        const struct cluster_node *node = &m->cluster->nodes[k];
        const struct node_rt *rt = nodes_find(m->nodes, node->name);
        if (!rt || !rt->has_sample || now - rt->sample_ms > m->cfg.node_timeout_ms)
            continue;
        for (size_t g = 0; g < rt->sample.ngpus; g++) {
            const struct proto_gpu_sample *o = &rt->sample.gpus[g];
            const char *uuid = o->uuid;
            if (!uuid || o->error)
                continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                struct gpu_row *v = realloc(rows, cap * sizeof(*v));
                if (!v) {
                    free(rows);
                    return GPO_ENOMEM;
                }
                rows = v;
            }
            struct gpu_row *r = &rows[n++];
            r->node = node->name;
            r->uuid = uuid;
            r->model = gpu_model(node, uuid);
            snprintf(r->gpu, sizeof(r->gpu), "%" PRIu32, o->index);
            snprintf(r->device, sizeof(r->device), "nvidia%s", r->gpu);
            double used = number(o->memory_used_mib), total = number(o->memory_total_mib);
            r->v[F_UTIL] = number(o->utilization_pct);
            r->v[F_USED] = used;
            r->v[F_FREE] = total - used; /* NAN when either is */
            r->v[F_POWER] = number(o->power_mw) / 1000.0;
            r->v[F_TEMP] = number(o->temperature_c);
            jobs_gpu_holders_of(hv, nh, node->name, uuid, &r->lo, &r->hi);
        }
    }
    *ret = rows;
    *ret_n = n;
    return 0;
}

static void dcgm_families(struct prom *p, const struct gpu_row *rows, size_t n,
                          const struct gpu_holder *hv)
{
    for (int f = 0; f < NFIELDS; f++) {
        prom_family(p, dcgm[f].name, PROM_GAUGE, dcgm[f].help);
        for (size_t k = 0; k < n; k++) {
            const struct gpu_row *r = &rows[k];
            if (isnan(r->v[f]))
                continue;
            const char *l[] = {"gpu",       r->gpu,   "UUID",     r->uuid, "device",  r->device,
                               "modelName", r->model, "Hostname", r->node, "hpc_job", "",
                               "team",      "",       "project",  "",      NULL};
            size_t h = r->lo;
            do {
                char job[24] = "";
                if (h < r->hi) {
                    const struct job *j = hv[h].job;
                    snprintf(job, sizeof(job), "%" PRId64, j->id);
                    l[11] = job;
                    l[13] = j->team ? j->team : "";
                    l[15] = j->spec.project ? j->spec.project : "";
                }
                prom_sample(p, dcgm[f].name, l, r->v[f]);
            } while (++h < r->hi);
        }
    }
}

/* ---- gpuorch families ---- */

static const char *job_priority(const struct monitor *m, const struct job *j)
{
    const char *cls = j->spec.priority ? j->spec.priority : cluster_class_default(m->cluster);
    return cls ? cls : "";
}

/* Pending jobs per (team, class): every configured pair (0 included), then
 * pairs only pending jobs name (a team or class deleted since), if any. */
static int queue_family(struct prom *p, const struct monitor *m)
{
    const struct cluster *cl = m->cluster;
    size_t nt = cl->nteams, nc = cl->nclasses, extra = 0;
    uint64_t *count = calloc(nt * nc + 1, sizeof(*count));
    if (!count)
        return GPO_ENOMEM;
    prom_family(p, "gpuorch_queue_length", PROM_GAUGE,
                "Pending jobs, per team and priority class.");
    for (size_t k = 0; k < m->jobs->n; k++) {
        const struct job *j = m->jobs->v[k];
        if (j->state != JOB_PENDING)
            continue;
        const struct cluster_team *t = cluster_team_get(cl, j->team ? j->team : "");
        const struct cluster_class *c = cluster_class_get(cl, job_priority(m, j));
        if (t && c)
            count[(size_t)(t - cl->teams) * nc + (size_t)(c - cl->classes)]++;
        else
            extra++;
    }
    for (size_t t = 0; t < nt; t++) {
        for (size_t c = 0; c < nc; c++) {
            const char *l[] = {"team", cl->teams[t].name, "priority", cl->classes[c].name, NULL};
            prom_sample(p, "gpuorch_queue_length", l, (double)count[t * nc + c]);
        }
    }
    free(count);
    if (!extra)
        return 0;
    /* Rare: count each unknown pair by a quadratic scan over the pending jobs. */
    for (size_t k = 0; k < m->jobs->n; k++) {
        const struct job *j = m->jobs->v[k];
        const char *team = j->team ? j->team : "", *prio = job_priority(m, j);
        if (j->state != JOB_PENDING || (cluster_team_get(cl, team) && cluster_class_get(cl, prio)))
            continue;
        bool first = true;
        uint64_t n = 0;
        for (size_t i = 0; i < m->jobs->n && first; i++) {
            const struct job *o = m->jobs->v[i];
            if (o->state != JOB_PENDING || strcmp(o->team ? o->team : "", team) != 0 ||
                strcmp(job_priority(m, o), prio) != 0)
                continue;
            first = i == k;
            n++;
        }
        if (first) {
            const char *l[] = {"team", team, "priority", prio, NULL};
            prom_sample(p, "gpuorch_queue_length", l, (double)n);
        }
    }
    return 0;
}

static void histogram_families(struct prom *p, const struct monitor *m, uint64_t passes)
{
    prom_family(p, "gpuorch_wait_seconds", PROM_HISTOGRAM,
                "Time jobs waited in the queue before an attempt started, per team and "
                "priority class.");
    for (size_t k = 0; k < m->nwaits; k++) {
        const struct monitor_wait_hist *h = &m->waits[k];
        const char *l[] = {"team", h->team, "priority", h->priority, NULL};
        prom_histogram(p, "gpuorch_wait_seconds", l, wait_bounds, h->counts, MONITOR_WAIT_BUCKETS,
                       h->sum_s, h->count);
    }
    prom_family(p, "gpuorch_scheduling_pass_duration_seconds", PROM_HISTOGRAM,
                "Time a scheduling pass took to build its view and decide (the store commit "
                "excluded).");
    prom_histogram(p, "gpuorch_scheduling_pass_duration_seconds", NULL, pass_bounds, m->pass_counts,
                   MONITOR_PASS_BUCKETS, m->pass_sum_s, m->pass_count);
    prom_family(p, "gpuorch_scheduling_passes_total", PROM_COUNTER,
                "Scheduling passes run since the controller started.");
    prom_sample(p, "gpuorch_scheduling_passes_total", NULL, (double)passes);
}

static void jobs_family(struct prom *p, const struct monitor *m)
{
    uint64_t count[JOB_NSTATES] = {0};
    for (size_t k = 0; k < m->jobs->n; k++)
        count[m->jobs->v[k]->state]++;
    prom_family(p, "gpuorch_jobs", PROM_GAUGE, "Jobs the controller knows, per state.");
    for (int st = 0; st < JOB_NSTATES; st++) {
        const char *l[] = {"state", job_state_name((enum job_state)st), NULL};
        prom_sample(p, "gpuorch_jobs", l, (double)count[st]);
    }
}

/* The GPU types present in each pool: pairs (pool index, type). */
struct pool_type {
    size_t pool;
    const char *type;
};

static bool pool_has_type(const struct pool_type *v, size_t n, size_t pool, const char *type)
{
    for (size_t k = 0; k < n; k++)
        if (v[k].pool == pool && strcmp(v[k].type, type) == 0)
            return true;
    return false;
}

static bool team_names_type(const struct cluster_team *t, const char *pool, const char *type)
{
    for (size_t q = 0; q < t->nquotas; q++)
        if (t->quotas[q].gpu_type && !strcmp(t->quotas[q].pool, pool) &&
            !strcmp(t->quotas[q].gpu_type, type))
            return true;
    return false;
}

/* Guarantees per (team, pool) in milli-GPU, summed over the types present in
 * the pool as cluster_view_build expands them; has[] marks pairs with a
 * quota entry. 0 or GPO_ENOMEM. */
static int quota_guarantees(const struct cluster *m, int64_t *guar, bool *has)
{
    struct pool_type *pt = calloc(m->nnodes + 1, sizeof(*pt));
    if (!pt)
        return GPO_ENOMEM;
    size_t npt = 0;
    for (size_t k = 0; k < m->nnodes; k++) {
        const struct cluster_node *n = &m->nodes[k];
        const struct cluster_pool *pool = cluster_pool_get(m, n->pool);
        if (pool && n->ngpus &&
            !pool_has_type(pt, npt, (size_t)(pool - m->pools), n->gpus[0].gpu_type))
            pt[npt++] = (struct pool_type){(size_t)(pool - m->pools), n->gpus[0].gpu_type};
    }
    for (size_t t = 0; t < m->nteams; t++) {
        const struct cluster_team *team = &m->teams[t];
        for (size_t q = 0; q < team->nquotas; q++) {
            const struct cluster_quota *qu = &team->quotas[q];
            const struct cluster_pool *pool = cluster_pool_get(m, qu->pool);
            if (!pool)
                continue;
            size_t pi = (size_t)(pool - m->pools), at = t * m->npools + pi;
            has[at] = true;
            for (size_t k = 0; k < npt; k++) {
                if (pt[k].pool != pi)
                    continue;
                if (qu->gpu_type ? !strcmp(qu->gpu_type, pt[k].type)
                                 : !team_names_type(team, qu->pool, pt[k].type))
                    guar[at] += qu->guaranteed_milli;
            }
        }
    }
    free(pt);
    return 0;
}

/* gpuorch_quota_{used,guaranteed,borrowed}_gpus{team,pool}: pairs with a
 * quota entry or GPUs in use. Borrowed: GPUs of attempts the scheduler
 * started over the team's guarantee (the ones a reclaim may preempt). */
static int quota_families(struct prom *p, const struct monitor *m)
{
    const struct cluster *cl = m->cluster;
    size_t n = cl->nteams * cl->npools;
    int64_t *v = calloc(3 * n + 1, sizeof(*v));
    bool *has = calloc(n + 1, sizeof(*has));
    int64_t *used = v, *guar = v ? v + n : NULL, *borrowed = v ? v + 2 * n : NULL;
    if (!v || !has || quota_guarantees(cl, guar, has)) {
        free(v);
        free(has);
        return GPO_ENOMEM;
    }
    for (size_t k = 0; k < m->jobs->n; k++) {
        const struct job *j = m->jobs->v[k];
        const struct cluster_team *t =
            j->att.n ? cluster_team_get(cl, j->team ? j->team : "") : NULL;
        for (size_t g = 0; t && g < j->att.nshares; g++) {
            const struct cluster_node *node = cluster_node_get(cl, j->att.shares[g].node);
            const struct cluster_pool *pool = node ? cluster_pool_get(cl, node->pool) : NULL;
            if (!pool)
                continue;
            size_t at = (size_t)(t - cl->teams) * cl->npools + (size_t)(pool - cl->pools);
            used[at] += j->att.shares[g].milli;
            borrowed[at] += j->att.borrowed ? j->att.shares[g].milli : 0;
        }
    }
    static const struct {
        const char *name, *help;
        size_t off;
    } fam[] = {
        {"gpuorch_quota_used_gpus", "GPUs the team's attempts hold in the pool.", 0},
        {"gpuorch_quota_guaranteed_gpus",
         "GPUs guaranteed to the team in the pool (over the GPU types present there).", 1},
        {"gpuorch_quota_borrowed_gpus",
         "GPUs the team holds in the pool beyond its guarantee (attempts started as "
         "borrowing, preemptible by a reclaim).",
         2},
    };
    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        prom_family(p, fam[f].name, PROM_GAUGE, fam[f].help);
        for (size_t at = 0; at < n; at++) {
            if (!has[at] && !used[at])
                continue;
            const char *l[] = {"team", cl->teams[at / cl->npools].name, "pool",
                               cl->pools[at % cl->npools].name, NULL};
            prom_sample(p, fam[f].name, l, (double)v[fam[f].off * n + at] / 1000.0);
        }
    }
    free(v);
    free(has);
    return 0;
}

/* Nodes per state; GPUs per state, in GPU shares (allocated: the shares the
 * attempts hold, jobs_gpu_milli_in_use: a GPU with only a 0.25 job is 0.25
 * allocated; the rest of each GPU is dirty when an ended attempt's processes
 * still occupy it, unavailable when its node is draining or down, else
 * free: the states sum to the GPUs); each node's heartbeat age. */
static void node_families(struct prom *p, struct monitor *m, int64_t now,
                          const struct gpu_holder *hv, size_t nh)
{
    static const char *const node_states[] = {"up", "draining", "down"};
    uint64_t nodes[3] = {0};
    enum { G_FREE, G_ALLOCATED, G_DIRTY, G_UNAVAILABLE, NG };
    static const char *const gpu_states[NG] = {"free", "allocated", "dirty", "unavailable"};
    uint64_t gpus[NG] = {0}; /* milli-GPU */
    for (size_t k = 0; k < m->cluster->nnodes; k++) {
        const struct cluster_node *n = &m->cluster->nodes[k];
        const struct node_rt *rt = nodes_find(m->nodes, n->name);
        if ((unsigned)n->state < 3)
            nodes[n->state]++;
        for (size_t g = 0; g < n->ngpus; g++) {
            size_t lo, hi;
            jobs_gpu_holders_of(hv, nh, n->name, n->gpus[g].uuid, &lo, &hi);
            uint32_t used = jobs_gpu_milli_in_use(hv, lo, hi);
            gpus[G_ALLOCATED] += used;
            gpus[nodes_is_dirty(rt, n->gpus[g].uuid) ? G_DIRTY
                 : n->state != CLUSTER_NODE_UP       ? G_UNAVAILABLE
                                                     : G_FREE] += 1000 - used;
        }
    }
    prom_family(p, "gpuorch_nodes", PROM_GAUGE, "Registered nodes, per state.");
    for (int k = 0; k < 3; k++) {
        const char *l[] = {"state", node_states[k], NULL};
        prom_sample(p, "gpuorch_nodes", l, (double)nodes[k]);
    }
    prom_family(p, "gpuorch_gpus", PROM_GAUGE,
                "GPUs of registered nodes, per state, in GPU shares (a 0.25 job: 0.25 allocated).");
    for (int k = 0; k < NG; k++) {
        const char *l[] = {"state", gpu_states[k], NULL};
        prom_sample(p, "gpuorch_gpus", l, (double)gpus[k] / 1000.0);
    }
    prom_family(p, "gpuorch_heartbeat_age_seconds", PROM_GAUGE,
                "Seconds since each node's last heartbeat.");
    for (size_t k = 0; k < m->nodes->n; k++) {
        const struct node_rt *rt = &m->nodes->v[k];
        const char *l[] = {"Hostname", rt->name, NULL};
        /* On the monotonic clock, as the node timeout counts it (nodes.h). */
        int64_t age = m->cfg.mono_ns ? nodes_silence_ms(rt, now, m->cfg.mono_ns() / 1000000)
                                     : now - rt->last_heartbeat_ms;
        prom_sample(p, "gpuorch_heartbeat_age_seconds", l, age > 0 ? (double)age / 1000.0 : 0);
    }
}

/* Sample ingest lag (monitor.h): arrival at the controller minus the agent's
 * sampling time, over the last MONITOR_LAG_WINDOW heartbeats. */
static void ingest_family(struct prom *p, struct monitor *m)
{
    struct monitor_stats st;
    monitor_stats(m, &st);
    static const double q[] = {0.5, 0.99, 1};
    const int64_t ms[] = {st.lag_p50_ms, st.lag_p99_ms, st.lag_max_ms};
    double v[3];
    for (int k = 0; k < 3; k++)
        v[k] = ms[k] < 0 ? NAN : (double)ms[k] / 1000.0;
    prom_family(p, "gpuorch_ingest_lag_seconds", PROM_SUMMARY,
                "Heartbeat samples' lag from the agent's sampling to the controller's ingest "
                "(quantiles over the latest heartbeats; 1 is their maximum).");
    prom_summary(p, "gpuorch_ingest_lag_seconds", NULL, q, v, 3, st.lag_sum_s, st.lag_count);
}

int monitor_metrics(struct monitor *m, struct prom *p, int64_t now_ms, uint64_t passes)
{
    struct gpu_holder *hv = NULL;
    struct gpu_row *rows = NULL;
    size_t nh = 0, nrows = 0;
    int rc = jobs_gpu_holders(m->jobs, &hv, &nh);
    rc = rc ? rc : gpu_rows(m, now_ms, hv, nh, &rows, &nrows);
    if (!rc) {
        dcgm_families(p, rows, nrows, hv);
        rc = queue_family(p, m);
    }
    if (!rc) {
        histogram_families(p, m, passes);
        jobs_family(p, m);
        rc = quota_families(p, m);
    }
    if (!rc) {
        node_families(p, m, now_ms, hv, nh);
        ingest_family(p, m);
    }
    free(rows);
    free(hv);
    return rc;
}

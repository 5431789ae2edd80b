/*
 * ingest.c - heartbeat samples into the series and the attempts; the queue
 * length; the per-minute flush and the retention delete (monitor.h).
 *
 * Decisions the header leaves open:
 *  - A sample's time is the agent's sampled_at_ms when it sent one and it is
 *    not in the future (clocks differ: then the arrival), else its arrival.
 *  - A team whose idle threshold is 0 (no "idle" object decoded) counts
 *    samples under IDLE_DEFAULT_PCT as idle.
 *  - A flush that fails loses those minutes (they are aggregates of samples
 *    the rings still hold for the hour); the counter says so.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/monitor/monitor.h"
#include "server/monitor/series.h"
#include "base/banned.h"

#define IDLE_DEFAULT_PCT 5
#define PRUNE_EVERY_MS   (3600 * INT64_C(1000))
#define QUEUE_EVERY_MS   1000
#define FUTURE_SLACK_MS  1000

/* An attempt holding a GPU of the node: its share by index. */
struct owner {
    char uuid[80]; /* the share's GPU ("GPU-..." or "MIG-...") */
    int64_t job, attempt;
    size_t share;
    uint32_t idle_pct;
};

/* Per node: who holds its GPUs, as of assignment revision `rev`. */
struct nodecache {
    char *name; /* first: the hash key */
    uint64_t rev;
    bool built;
    struct owner *owners;
    size_t nowners, owners_cap;
};

struct monitor_ingest {
    struct nodecache **slots; /* open addressing by name */
    size_t cap, n;
    int64_t lags[MONITOR_LAG_WINDOW];
    size_t lag_head, lag_n;
    struct monitor_stats st;
    int64_t flushed_minute; /* the minute of the last flush */
    int64_t pruned_ms, queued_ms;
    int64_t gauges_flushed_ms; /* the gauges' points before this are in the store */
    _Atomic uint64_t minutes_flushed, flushes_failed; /* written by the store's thread */
};

/* ---- nodes' owner tables ------------------------------------------------- */

static uint64_t hash(const char *k)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *k; k++)
        h = (h ^ (unsigned char)*k) * 1099511628211ULL;
    return h;
}

static struct nodecache **slot_of(struct monitor_ingest *in, const char *name)
{
    size_t i = hash(name) & (in->cap - 1);
    while (in->slots[i] && strcmp(in->slots[i]->name, name) != 0)
        i = (i + 1) & (in->cap - 1);
    return &in->slots[i];
}

static struct nodecache *node_get(struct monitor_ingest *in, const char *name)
{
    if ((in->n + 1) * 2 > in->cap) {
        size_t cap = in->cap ? in->cap * 2 : 64;
        // NOLINTNEXTLINE(bugprone-sizeof-expression): *p is a pointer (an array of them)
        struct monitor_ingest grown = {.slots = calloc(cap, sizeof(*grown.slots)), .cap = cap};
        if (!grown.slots)
            return NULL;
        for (size_t k = 0; k < in->cap; k++)
            if (in->slots[k])
                *slot_of(&grown, in->slots[k]->name) = in->slots[k];
        free(in->slots);
        in->slots = grown.slots;
        in->cap = cap;
    }
    struct nodecache **slot = slot_of(in, name);
    if (!*slot) {
        struct nodecache *c = calloc(1, sizeof(*c));
        if (!c || !(c->name = strdup(name))) {
            free(c);
            return NULL;
        }
        *slot = c;
        in->n++;
    }
    return *slot;
}

static uint32_t team_idle_pct(const struct monitor *m, const char *team)
{
    const struct cluster_team *t = cluster_team_get(m->cluster, team);
    return t && t->idle.threshold_pct ? t->idle.threshold_pct : IDLE_DEFAULT_PCT;
}

/* Who holds the node's GPUs: one scan of the jobs, when its revision moved. */
static int owners_rebuild(struct monitor *m, struct nodecache *c, uint64_t rev)
{
    c->nowners = 0;
    for (size_t k = 0; k < m->jobs->n; k++) {
        const struct job *j = m->jobs->v[k];
        for (size_t i = 0; j->att.n && i < j->att.nshares; i++) {
            if (strcmp(j->att.shares[i].node, c->name) != 0)
                continue;
            if (c->nowners == c->owners_cap) {
                size_t cap = c->owners_cap ? c->owners_cap * 2 : 8;
                struct owner *v = realloc(c->owners, cap * sizeof(*v));
                if (!v)
                    return GPO_ENOMEM;
                c->owners = v;
                c->owners_cap = cap;
            }
            struct owner *o = &c->owners[c->nowners++];
            *o = (struct owner){.job = j->id,
                                .attempt = j->att.n,
                                .share = i,
                                .idle_pct = team_idle_pct(m, j->team)};
            snprintf(o->uuid, sizeof(o->uuid), "%s", j->att.shares[i].uuid);
        }
    }
    c->rev = rev;
    c->built = true;
    return 0;
}

/* ---- heartbeats ----------------------------------------------------------- */

static void lag_note(struct monitor_ingest *in, int64_t lag)
{
    in->lags[in->lag_head] = lag;
    in->lag_head = (in->lag_head + 1) % MONITOR_LAG_WINDOW;
    in->lag_n += in->lag_n < MONITOR_LAG_WINDOW;
    in->st.lag_last_ms = lag;
    in->st.lag_count++;
    in->st.lag_sum_s += (double)lag / 1000.0;
}

/* An attempt holding the GPU: its accumulators, share and minute. */
static void charge(struct monitor *m, const struct owner *o, int64_t t_ms,
                   const struct series_sample *v)
{
    struct job *j = jobs_find(m->jobs, o->job);
    if (!j || j->att.n != o->attempt || o->share >= j->att.nshares)
        return;
    struct attempt_share *sh = &j->att.shares[o->share];
    sh->sample_ms = t_ms;
    sh->util_pct = v->util_pct == SERIES_UNKNOWN ? -1 : (int32_t)v->util_pct;
    sh->mem_used_mib = v->mem_used_mib == SERIES_UNKNOWN ? -1 : v->mem_used_mib;
    if (v->util_pct != SERIES_UNKNOWN) {
        j->att.util_sum += (uint64_t)(v->util_pct < 0 ? 0 : v->util_pct);
        j->att.util_samples++;
        j->att.idle_samples += v->util_pct < (int64_t)o->idle_pct;
        m->ingest->st.owned_samples++;
    }
    char key[48];
    snprintf(key, sizeof(key), "%lld.%lld", (long long)o->job, (long long)o->attempt);
    series_job_put(m->series, key, j->team, t_ms, v, o->idle_pct);
}

static const char *gpu_type_of(const struct cluster_node *n, const char *uuid)
{
    for (size_t k = 0; n && k < n->ngpus; k++)
        if (strcmp(n->gpus[k].uuid, uuid) == 0)
            return n->gpus[k].gpu_type;
    return "";
}

void monitor_heartbeat(struct monitor *m, const char *node, const struct proto_heartbeat *hb,
                       int64_t now_ms)
{
    struct monitor_ingest *in = m->ingest;
    if (!in)
        return;
    int64_t t0 = m->cfg.mono_ns ? m->cfg.mono_ns() : 0;
    /* PROTO_NONE, a figure not reported, is SERIES_UNKNOWN. */
    int64_t t = now_ms, at = hb->sampled_at_ms;
    if (at != SERIES_UNKNOWN && at > 0) {
        lag_note(in, now_ms - at);
        if (at <= now_ms + FUTURE_SLACK_MS)
            t = at;
    }
    struct node_rt *rt = nodes_find(m->nodes, node);
    struct nodecache *c = node_get(in, node);
    if (c && rt && (!c->built || c->rev != rt->rev) && owners_rebuild(m, c, rt->rev))
        c->built = false; /* out of memory: samples go uncharged until the next try */
    const struct cluster_node *mn = cluster_node_get(m->cluster, node);
    for (size_t k = 0; k < hb->ngpus; k++) {
        const struct proto_gpu_sample *g = &hb->gpus[k];
        const char *uuid = g->uuid;
        int64_t index = g->index;
        if (!uuid)
            continue; /* a GPU the agent could not read ({"index", "error"}) */
        struct series_sample v = {g->utilization_pct, g->memory_used_mib, g->power_mw,
                                  g->temperature_c};
        const struct owner *first = NULL;
        for (size_t i = 0; c && c->built && i < c->nowners; i++) {
            if (strcmp(c->owners[i].uuid, uuid) != 0)
                continue;
            first = first ? first : &c->owners[i];
            charge(m, &c->owners[i], t, &v);
        }
        struct series_gpu_info info = {uuid, node, gpu_type_of(mn, uuid),
                                       index >= 0 && index < 1024 ? (uint32_t)index : 0};
        series_gpu_put(m->series, &info, t, &v, first ? first->job : 0,
                       first ? first->idle_pct : IDLE_DEFAULT_PCT);
        in->st.gpu_samples++;
    }
    in->st.heartbeats++;
    if (m->cfg.mono_ns)
        in->st.ingest_ns += (uint64_t)(m->cfg.mono_ns() - t0);
}

/* ---- services -------------------------------------------------------------- */

void monitor_services(struct monitor *m, const struct monitor_service_point *v, size_t n,
                      int64_t now_ms)
{
    char key[2 * CLUSTER_NAME_MAX + 32];
    for (size_t k = 0; m->series && k < n; k++) { /* no series: not made (tests) */
        const struct monitor_service_point *p = &v[k];
        const struct {
            const char *what;
            int64_t value;
        } fig[] = {{"ready", p->ready},
                   {"desired", p->desired},
                   {"rps", p->rps_milli},
                   {"p50", p->p50_ms},
                   {"p99", p->p99_ms}};
        for (size_t i = 0; i < sizeof(fig) / sizeof(fig[0]); i++) {
            if (fig[i].value < 0)
                continue; /* no answer in the last minute: no latency point */
            snprintf(key, sizeof(key), "service/%s/%s/%s", p->team ? p->team : "", p->name,
                     fig[i].what);
            series_queue_put(m->series, key,
                             fig[i].value > UINT32_MAX ? UINT32_MAX : (uint32_t)fig[i].value,
                             now_ms);
        }
    }
}

/* ---- the timer ------------------------------------------------------------ */

static void queue_point(struct monitor *m, int64_t now_ms)
{
    uint32_t total = 0;
    uint32_t *teams = calloc(m->cluster->nteams + 1, sizeof(*teams));
    uint32_t *classes = calloc(m->cluster->nclasses + 1, sizeof(*classes));
    if (!teams || !classes) {
        free(teams);
        free(classes);
        return;
    }
    const char *def = cluster_class_get(m->cluster, "normal") ? "normal"
                      : m->cluster->nclasses                  ? m->cluster->classes[0].name
                                                              : "";
    for (size_t k = 0; k < m->jobs->n; k++) {
        const struct job *j = m->jobs->v[k];
        if (j->state != JOB_PENDING)
            continue;
        total++;
        for (size_t i = 0; i < m->cluster->nteams; i++)
            if (strcmp(m->cluster->teams[i].name, j->team) == 0)
                teams[i]++;
        const char *cls = j->spec.priority ? j->spec.priority : def;
        for (size_t i = 0; i < m->cluster->nclasses; i++)
            if (strcmp(m->cluster->classes[i].name, cls) == 0)
                classes[i]++;
    }
    char key[CLUSTER_NAME_MAX + 16];
    series_queue_put(m->series, "total", total, now_ms);
    for (size_t i = 0; i < m->cluster->nteams; i++) {
        snprintf(key, sizeof(key), "team/%s", m->cluster->teams[i].name);
        series_queue_put(m->series, key, teams[i], now_ms);
    }
    for (size_t i = 0; i < m->cluster->nclasses; i++) {
        snprintf(key, sizeof(key), "priority/%s", m->cluster->classes[i].name);
        series_queue_put(m->series, key, classes[i], now_ms);
    }
    free(teams);
    free(classes);
}

struct flush {
    struct monitor_ingest *in;
    uint64_t rows;
};

/* The gauges' (queue length, services) closed minutes, one row per key and minute, as the
 * series scan gives them (key by key, in time order). */
struct gauge_minutes {
    struct store_batch *b;
    int64_t minute_ms;                   /* the length of a minute */
    char key[2 * CLUSTER_NAME_MAX + 32]; /* the row being summed */
    int64_t start_ms, samples, sum;
    uint64_t rows;
    int rc;
};

static void gauge_row_out(struct gauge_minutes *q)
{
    if (!q->samples || q->rc)
        return;
    const struct store_minute row = {.kind = STORE_MINUTE_GAUGE,
                                     .key = q->key,
                                     .label = "",
                                     .minute_ms = q->start_ms,
                                     .samples = q->samples,
                                     .util_sum = q->sum};
    q->rc = store_batch_minute_put(q->b, &row);
    q->rows++;
    q->samples = q->sum = 0;
}

/* series_queue_fn */
static void gauge_minute_add(void *ctx, const char *key, int64_t t_ms, uint32_t value)
{
    struct gauge_minutes *q = ctx;
    int64_t start = t_ms - t_ms % q->minute_ms;
    if (strcmp(q->key, key) != 0 || start != q->start_ms) {
        gauge_row_out(q);
        snprintf(q->key, sizeof(q->key), "%s", key);
        q->start_ms = start;
    }
    q->samples++;
    q->sum += value;
}

/* store_done_fn, on the store's thread: counters only. */
static void flush_done(void *ctx, const struct store_result *r)
{
    struct flush *f = ctx;
    if (r->err)
        atomic_fetch_add(&f->in->flushes_failed, 1);
    else
        atomic_fetch_add(&f->in->minutes_flushed, f->rows);
    free(f);
}

static void flush(struct monitor *m, int64_t now_ms)
{
    struct monitor_ingest *in = m->ingest;
    struct series_minute *mins = NULL;
    size_t n = 0;
    if (series_minutes_take(m->series, now_ms, &mins, &n))
        return;
    bool prune = now_ms - in->pruned_ms >= PRUNE_EVERY_MS;
    /* The gauges' minutes that closed since the last flush: what the
     * series API reads beyond the rings' hour. */
    int64_t minute = series_minute_ms(m->series);
    int64_t gauges_until = now_ms - now_ms % minute;
    bool gauges = gauges_until > in->gauges_flushed_ms;
    struct store_batch *b = n || prune || gauges ? store_batch_new() : NULL;
    struct flush *f = b ? calloc(1, sizeof(*f)) : NULL;
    int rc = b && f ? 0 : GPO_ENOMEM;
    uint64_t gauge_rows = 0;
    if (rc == 0 && gauges) {
        struct gauge_minutes qm = {.b = b, .minute_ms = minute};
        series_queue_scan(m->series, in->gauges_flushed_ms, gauges_until, now_ms, gauge_minute_add,
                          &qm);
        gauge_row_out(&qm);
        rc = qm.rc;
        gauge_rows = qm.rows;
        in->gauges_flushed_ms = gauges_until;
    }
    for (size_t k = 0; rc == 0 && k < n; k++) {
        const struct store_minute row = {
            .kind = mins[k].kind == SERIES_KIND_GPU ? STORE_MINUTE_GPU : STORE_MINUTE_JOB,
            .key = mins[k].key,
            .label = mins[k].label,
            .minute_ms = mins[k].minute_ms,
            .samples = mins[k].samples,
            .util_sum = (int64_t)mins[k].util_sum,
            .util_max = mins[k].util_max,
            .idle_samples = mins[k].idle_samples,
            .mem_sum_mib = (int64_t)mins[k].mem_sum_mib,
            .mem_max_mib = (int64_t)mins[k].mem_max_mib,
            .power_sum_mw = (int64_t)mins[k].power_sum_mw,
            .temp_max_c = mins[k].temp_max_c,
        };
        rc = store_batch_minute_put(b, &row);
    }
    if (rc == 0 && prune) {
        rc = store_batch_minutes_prune(b, now_ms - m->cfg.retention_days * 86400000);
        in->pruned_ms = now_ms;
    }
    series_minutes_free(mins, n);
    if (rc || !b) {
        if (rc)
            atomic_fetch_add(&in->flushes_failed, 1);
        store_batch_free(b);
        free(f);
        return;
    }
    *f = (struct flush){in, n + gauge_rows};
    if (store_commit(m->store, b, flush_done, f)) /* b is taken either way */
        free(f);
}

void monitor_tick(struct monitor *m, int64_t now_ms)
{
    struct monitor_ingest *in = m->ingest;
    if (!in)
        return;
    if (now_ms - in->queued_ms >= QUEUE_EVERY_MS) {
        queue_point(m, now_ms);
        in->queued_ms = now_ms;
    }
    int64_t minute = now_ms / series_minute_ms(m->series);
    if (minute != in->flushed_minute) {
        flush(m, now_ms);
        in->flushed_minute = minute;
    }
}

void monitor_flush_all(struct monitor *m, int64_t now_ms)
{
    if (m->ingest)
        flush(m, now_ms + series_minute_ms(m->series));
}

/* ---- life and stats ------------------------------------------------------- */

int monitor_init(struct monitor *m, const struct monitor_config *cfg, pthread_mutex_t *lock,
                 const struct cluster *cluster, struct jobs *jobs, struct nodes *nodes,
                 struct store *store, int64_t now_ms)
{
    *m = (struct monitor){.cfg = *cfg,
                          .lock = lock,
                          .cluster = cluster,
                          .jobs = jobs,
                          .nodes = nodes,
                          .store = store};
    int64_t minute = m->cfg.minute_ms ? m->cfg.minute_ms : SERIES_MINUTE_MS;
    if (!m->cfg.retention_days)
        m->cfg.retention_days = 30;
    m->series = series_new(now_ms, SERIES_RING_DEFAULT, SERIES_HORIZON_MS, minute);
    m->ingest = calloc(1, sizeof(*m->ingest));
    if (!m->series || !m->ingest) {
        monitor_release(m);
        return GPO_ENOMEM;
    }
    m->ingest->flushed_minute = now_ms / minute;
    /* The first prune waits a minute, not an hour: a restart after a long
     * stop deletes what expired meanwhile. */
    m->ingest->pruned_ms = now_ms - PRUNE_EVERY_MS + 60000;
    return 0;
}

void monitor_release(struct monitor *m)
{
    struct monitor_ingest *in = m->ingest;
    for (size_t k = 0; in && k < in->cap; k++) {
        if (in->slots[k]) {
            free(in->slots[k]->name);
            free(in->slots[k]->owners);
            free(in->slots[k]);
        }
    }
    if (in)
        free(in->slots);
    free(in);
    m->ingest = NULL;
    series_free(m->series);
    m->series = NULL;
    free(m->waits);
    m->waits = NULL;
    m->nwaits = m->waits_cap = 0;
    free(m->idle_counts);
    m->idle_counts = NULL;
    m->nidle_counts = 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void monitor_stats(const struct monitor *m, struct monitor_stats *ret)
{
    struct monitor_ingest *in = m->ingest;
    if (!in) {
        *ret = (struct monitor_stats){
            .lag_last_ms = -1, .lag_p50_ms = -1, .lag_p99_ms = -1, .lag_max_ms = -1};
        return;
    }
    struct monitor_stats st = in->st;
    st.lag_p50_ms = st.lag_p99_ms = st.lag_max_ms = -1;
    if (!in->lag_n)
        st.lag_last_ms = -1;
    int64_t *v = in->lag_n ? malloc(in->lag_n * sizeof(*v)) : NULL;
    if (v) {
        memcpy(v, in->lags, in->lag_n * sizeof(*v)); /* order does not matter */
        qsort(v, in->lag_n, sizeof(*v), cmp_i64);
        st.lag_p50_ms = v[(in->lag_n - 1) * 50 / 100];
        st.lag_p99_ms = v[(in->lag_n - 1) * 99 / 100];
        st.lag_max_ms = v[in->lag_n - 1];
        free(v);
    }
    st.minutes_flushed = atomic_load(&in->minutes_flushed);
    st.flushes_failed = atomic_load(&in->flushes_failed);
    st.minutes_dropped = series_minutes_dropped(m->series);
    st.gpus = series_gpu_count(m->series);
    *ret = st;
}

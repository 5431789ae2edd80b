/*
 * ingest.c - heartbeat samples into the series and the attempts; the queue
 * length; the per-minute flush and the retention delete (ingest.h).
 *
 * Decisions the header leaves open:
 *  - A sample's time is the agent's sampled_at_ms when it sent one and it is
 *    not in the future (clocks differ: then the arrival), else its arrival.
 *  - A team whose idle threshold is 0 (no "idle" object decoded) counts
 *    samples under SRV_IDLE_DEFAULT_PCT as idle.
 *  - A flush that fails loses those minutes (they are aggregates of samples
 *    the rings still hold for the hour); the counter says so.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/ingest.h"
#include "server/series.h"
#include "server/srv.h"
#include "base/banned.h"

#define SRV_IDLE_DEFAULT_PCT 5
#define PRUNE_EVERY_MS       (3600 * INT64_C(1000))
#define QUEUE_EVERY_MS       1000
#define FUTURE_SLACK_MS      1000

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

struct srv_ingest {
    struct nodecache **slots; /* open addressing by name */
    size_t cap, n;
    int64_t lags[SRV_INGEST_LAG_WINDOW];
    size_t lag_head, lag_n;
    struct srv_ingest_stats st;
    int64_t flushed_minute; /* the minute of the last flush */
    int64_t pruned_ms, queued_ms;
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

static struct nodecache **slot_of(struct srv_ingest *in, const char *name)
{
    size_t i = hash(name) & (in->cap - 1);
    while (in->slots[i] && strcmp(in->slots[i]->name, name) != 0)
        i = (i + 1) & (in->cap - 1);
    return &in->slots[i];
}

static struct nodecache *node_get(struct srv_ingest *in, const char *name)
{
    if ((in->n + 1) * 2 > in->cap) {
        size_t cap = in->cap ? in->cap * 2 : 64;
        struct srv_ingest grown = {.slots = calloc(cap, sizeof(*grown.slots)), .cap = cap};
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

static uint32_t team_idle_pct(const struct server *s, const char *team)
{
    const struct cluster_team *t = cluster_team_get(&s->cluster, team);
    return t && t->idle.threshold_pct ? t->idle.threshold_pct : SRV_IDLE_DEFAULT_PCT;
}

/* Who holds the node's GPUs: one scan of the jobs, when its revision moved. */
static int owners_rebuild(struct server *s, struct nodecache *c, uint64_t rev)
{
    c->nowners = 0;
    for (size_t k = 0; k < s->njobs; k++) {
        const struct srv_job *j = s->jobs[k];
        for (size_t i = 0; j->att.n && i < j->att.nshares; i++) {
            if (strcmp(j->att.shares[i].node, c->name) != 0)
                continue;
            if (c->nowners == c->owners_cap) {
                size_t cap = c->owners_cap ? c->owners_cap * 2 : 8;
                struct owner *v = realloc(c->owners, cap * sizeof(*v));
                if (!v)
                    return -ENOMEM;
                c->owners = v;
                c->owners_cap = cap;
            }
            struct owner *o = &c->owners[c->nowners++];
            *o = (struct owner){.job = j->id,
                                .attempt = j->att.n,
                                .share = i,
                                .idle_pct = team_idle_pct(s, j->team)};
            snprintf(o->uuid, sizeof(o->uuid), "%s", j->att.shares[i].uuid);
        }
    }
    c->rev = rev;
    c->built = true;
    return 0;
}

/* ---- heartbeats ----------------------------------------------------------- */

static int64_t figure(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : SERIES_UNKNOWN;
}

static void lag_note(struct srv_ingest *in, int64_t lag)
{
    in->lags[in->lag_head] = lag;
    in->lag_head = (in->lag_head + 1) % SRV_INGEST_LAG_WINDOW;
    in->lag_n += in->lag_n < SRV_INGEST_LAG_WINDOW;
    in->st.lag_last_ms = lag;
    in->st.lag_count++;
    in->st.lag_sum_s += (double)lag / 1000.0;
}

/* An attempt holding the GPU: its accumulators, share and minute. */
static void charge(struct server *s, const struct owner *o, int64_t t_ms,
                   const struct series_sample *v)
{
    struct srv_job *j = srv_job_find(s, o->job);
    if (!j || j->att.n != o->attempt || o->share >= j->att.nshares)
        return;
    struct srv_share *sh = &j->att.shares[o->share];
    sh->sample_ms = t_ms;
    sh->util_pct = v->util_pct == SERIES_UNKNOWN ? -1 : (int32_t)v->util_pct;
    sh->mem_used_mib = v->mem_used_mib == SERIES_UNKNOWN ? -1 : v->mem_used_mib;
    if (v->util_pct != SERIES_UNKNOWN) {
        j->att.util_sum += (uint64_t)(v->util_pct < 0 ? 0 : v->util_pct);
        j->att.util_samples++;
        j->att.idle_samples += v->util_pct < (int64_t)o->idle_pct;
        s->ingest->st.owned_samples++;
    }
    char key[48];
    snprintf(key, sizeof(key), "%lld.%lld", (long long)o->job, (long long)o->attempt);
    series_job_put(s->series, key, j->team, t_ms, v, o->idle_pct);
}

static const char *gpu_type_of(const struct cluster_node *n, const char *uuid)
{
    for (size_t k = 0; n && k < n->ngpus; k++)
        if (strcmp(n->gpus[k].uuid, uuid) == 0)
            return n->gpus[k].gpu_type;
    return "";
}

void srv_ingest_heartbeat(struct server *s, const char *node, const json_t *sample, int64_t now_ms)
{
    struct srv_ingest *in = s->ingest;
    const json_t *gpus = json_object_get(sample, "gpus");
    if (!in || !json_is_array(gpus))
        return;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int64_t t = now_ms, at = figure(sample, "sampled_at_ms");
    if (at != SERIES_UNKNOWN && at > 0) {
        lag_note(in, now_ms - at);
        if (at <= now_ms + FUTURE_SLACK_MS)
            t = at;
    }
    struct srv_node_rt *rt = srv_node_rt_find(s, node);
    struct nodecache *c = node_get(in, node);
    if (c && rt && (!c->built || c->rev != rt->rev) && owners_rebuild(s, c, rt->rev))
        c->built = false; /* out of memory: samples go uncharged until the next try */
    const struct cluster_node *mn = cluster_node_get(&s->cluster, node);
    for (size_t k = 0; k < json_array_size(gpus); k++) {
        const json_t *g = json_array_get(gpus, k);
        const char *uuid = json_string_value(json_object_get(g, "uuid"));
        int64_t index = figure(g, "index");
        if (!uuid)
            continue; /* a GPU the agent could not read ({"index", "error"}) */
        struct series_sample v = {figure(g, "utilization_pct"), figure(g, "memory_used_mib"),
                                  figure(g, "power_mw"), figure(g, "temperature_c")};
        const struct owner *first = NULL;
        for (size_t i = 0; c && c->built && i < c->nowners; i++) {
            if (strcmp(c->owners[i].uuid, uuid) != 0)
                continue;
            first = first ? first : &c->owners[i];
            charge(s, &c->owners[i], t, &v);
        }
        struct series_gpu_info info = {uuid, node, gpu_type_of(mn, uuid),
                                       index >= 0 && index < 1024 ? (uint32_t)index : 0};
        series_gpu_put(s->series, &info, t, &v, first ? first->job : 0,
                       first ? first->idle_pct : SRV_IDLE_DEFAULT_PCT);
        in->st.gpu_samples++;
    }
    in->st.heartbeats++;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    in->st.ingest_ns +=
        (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
}

/* ---- the timer ------------------------------------------------------------ */

static void queue_point(struct server *s, int64_t now_ms)
{
    uint32_t total = 0;
    uint32_t *teams = calloc(s->cluster.nteams + 1, sizeof(*teams));
    uint32_t *classes = calloc(s->cluster.nclasses + 1, sizeof(*classes));
    if (!teams || !classes) {
        free(teams);
        free(classes);
        return;
    }
    const char *def = cluster_class_get(&s->cluster, "normal") ? "normal"
                      : s->cluster.nclasses                    ? s->cluster.classes[0].name
                                                               : "";
    for (size_t k = 0; k < s->njobs; k++) {
        const struct srv_job *j = s->jobs[k];
        if (j->state != SRV_JOB_PENDING)
            continue;
        total++;
        for (size_t i = 0; i < s->cluster.nteams; i++)
            if (strcmp(s->cluster.teams[i].name, j->team) == 0)
                teams[i]++;
        const char *cls = j->spec.priority ? j->spec.priority : def;
        for (size_t i = 0; i < s->cluster.nclasses; i++)
            if (strcmp(s->cluster.classes[i].name, cls) == 0)
                classes[i]++;
    }
    char key[CLUSTER_NAME_MAX + 16];
    series_queue_put(s->series, "total", total, now_ms);
    for (size_t i = 0; i < s->cluster.nteams; i++) {
        snprintf(key, sizeof(key), "team/%s", s->cluster.teams[i].name);
        series_queue_put(s->series, key, teams[i], now_ms);
    }
    for (size_t i = 0; i < s->cluster.nclasses; i++) {
        snprintf(key, sizeof(key), "priority/%s", s->cluster.classes[i].name);
        series_queue_put(s->series, key, classes[i], now_ms);
    }
    free(teams);
    free(classes);
}

struct flush {
    struct srv_ingest *in;
    uint64_t rows;
};

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

static void flush(struct server *s, int64_t now_ms)
{
    struct srv_ingest *in = s->ingest;
    struct series_minute *m = NULL;
    size_t n = 0;
    if (series_minutes_take(s->series, now_ms, &m, &n))
        return;
    bool prune = now_ms - in->pruned_ms >= PRUNE_EVERY_MS;
    struct store_batch *b = n || prune ? store_batch_new() : NULL;
    struct flush *f = b ? calloc(1, sizeof(*f)) : NULL;
    int rc = b && f ? 0 : -ENOMEM;
    for (size_t k = 0; rc == 0 && k < n; k++) {
        const struct store_minute row = {
            .kind = m[k].kind == SERIES_KIND_GPU ? STORE_MINUTE_GPU : STORE_MINUTE_JOB,
            .key = m[k].key,
            .label = m[k].label,
            .minute_ms = m[k].minute_ms,
            .samples = m[k].samples,
            .util_sum = (int64_t)m[k].util_sum,
            .util_max = m[k].util_max,
            .idle_samples = m[k].idle_samples,
            .mem_sum_mib = (int64_t)m[k].mem_sum_mib,
            .mem_max_mib = (int64_t)m[k].mem_max_mib,
            .power_sum_mw = (int64_t)m[k].power_sum_mw,
            .temp_max_c = m[k].temp_max_c,
        };
        rc = store_batch_minute_put(b, &row);
    }
    if (rc == 0 && prune) {
        rc = store_batch_minutes_prune(b, now_ms - s->cfg.metrics_retention_days * 86400000);
        in->pruned_ms = now_ms;
    }
    series_minutes_free(m, n);
    if (rc || !b) {
        if (rc)
            atomic_fetch_add(&in->flushes_failed, 1);
        store_batch_free(b);
        free(f);
        return;
    }
    *f = (struct flush){in, n};
    if (store_commit(s->store, b, flush_done, f)) /* b is taken either way */
        free(f);
}

void srv_ingest_tick(struct server *s, int64_t now_ms)
{
    struct srv_ingest *in = s->ingest;
    if (!in)
        return;
    if (now_ms - in->queued_ms >= QUEUE_EVERY_MS) {
        queue_point(s, now_ms);
        in->queued_ms = now_ms;
    }
    int64_t minute = now_ms / series_minute_ms(s->series);
    if (minute != in->flushed_minute) {
        flush(s, now_ms);
        in->flushed_minute = minute;
    }
}

void srv_ingest_flush_all(struct server *s, int64_t now_ms)
{
    if (s->ingest)
        flush(s, now_ms + series_minute_ms(s->series));
}

/* ---- life and stats ------------------------------------------------------- */

int srv_ingest_init(struct server *s, int64_t now_ms)
{
    int64_t minute = s->cfg.metrics_minute_ms ? s->cfg.metrics_minute_ms : SERIES_MINUTE_MS;
    if (!s->cfg.metrics_retention_days)
        s->cfg.metrics_retention_days = 30;
    s->series = series_new(now_ms, SERIES_RING_DEFAULT, SERIES_HORIZON_MS, minute);
    s->ingest = calloc(1, sizeof(*s->ingest));
    if (!s->series || !s->ingest) {
        srv_ingest_free(s);
        return -ENOMEM;
    }
    s->ingest->flushed_minute = now_ms / minute;
    /* The first prune waits a minute, not an hour: a restart after a long
     * stop deletes what expired meanwhile. */
    s->ingest->pruned_ms = now_ms - PRUNE_EVERY_MS + 60000;
    return 0;
}

void srv_ingest_free(struct server *s)
{
    struct srv_ingest *in = s->ingest;
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
    s->ingest = NULL;
    series_free(s->series);
    s->series = NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void srv_ingest_stats(struct server *s, struct srv_ingest_stats *ret)
{
    struct srv_ingest *in = s->ingest;
    if (!in) {
        *ret = (struct srv_ingest_stats){
            .lag_last_ms = -1, .lag_p50_ms = -1, .lag_p99_ms = -1, .lag_max_ms = -1};
        return;
    }
    struct srv_ingest_stats st = in->st;
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
    st.minutes_dropped = series_minutes_dropped(s->series);
    st.gpus = series_gpu_count(s->series);
    *ret = st;
}

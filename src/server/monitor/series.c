/*
 * series.c - GPU sample rings, open minutes and queue length (series.h).
 *
 * Times in the rings are deciseconds since base_ms in 32 bits (13 years),
 * which keeps a point at 12 bytes. GPUs are never removed: a cluster's GPUs
 * are few and come back; an attempt's open minute is removed once closed.
 * Lookups by key go through one open-addressing hash table per kind.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/monitor/series.h"
#include "base/banned.h"

#define UNK8  UINT8_MAX
#define UNK16 UINT16_MAX
#define UNK32 UINT32_MAX

struct point {
    uint32_t t_ds;
    uint32_t mem_mib;
    uint16_t power_w;
    uint8_t util;
    uint8_t temp;
};
_Static_assert(sizeof(struct point) == SERIES_POINT_BYTES, "a ring point is 12 bytes");

struct qpoint {
    uint32_t t_ds;
    uint32_t value;
};
_Static_assert(sizeof(struct qpoint) == SERIES_QPOINT_BYTES, "a queue point is 8 bytes");

/* An open minute; minute_ms < 0: none. */
struct agg {
    int64_t minute_ms;
    uint32_t samples, util_max, idle_samples, temp_max;
    uint64_t util_sum, mem_sum, mem_max, power_sum;
};

struct owner {
    uint32_t t_ds;
    uint32_t job;
};

struct gpu {
    char *uuid, *node, *gpu_type;
    uint32_t index;
    struct point *ring;
    uint32_t head, n; /* next slot; points held */
    struct owner owners[SERIES_OWNERS];
    uint32_t ohead, on;
    struct agg cur;
};

struct jobagg {
    char *key, *label;
    struct agg cur;
};

struct qring {
    char *key;
    struct qpoint *ring;
    uint32_t head, n;
};

/* Open addressing over pointers to entries whose first member is the key. */
struct table {
    void **slots;
    size_t cap, n; /* cap a power of two; n live */
};

struct series {
    pthread_mutex_t lock;
    int64_t base_ms, horizon_ms, minute_ms;
    uint32_t ring_cap;
    struct gpu **gpus;
    size_t ngpus, gpus_cap;
    struct table gpu_ix; /* -> struct gpu */
    struct table job_ix; /* -> struct jobagg */
    struct series_minute *pending;
    size_t npending, pending_cap;
    uint64_t dropped;
    struct qring *queues;
    size_t nqueues, queues_cap;
};

/* ---- hash table ---------------------------------------------------------- */

static uint64_t hash(const char *k)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *k; k++)
        h = (h ^ (unsigned char)*k) * 1099511628211ULL;
    return h;
}

/* Entries start with their key (char *). */
static const char *entry_key(void *e)
{
    return *(char **)e;
}

static void **table_slot(const struct table *t, const char *key)
{
    if (!t->cap)
        return NULL;
    size_t i = hash(key) & (t->cap - 1);
    while (t->slots[i] && strcmp(entry_key(t->slots[i]), key) != 0)
        i = (i + 1) & (t->cap - 1);
    return &t->slots[i];
}

static void *table_get(const struct table *t, const char *key)
{
    void **slot = table_slot(t, key);
    return slot ? *slot : NULL;
}

static int table_put(struct table *t, void *e)
{
    if ((t->n + 1) * 2 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        struct table nt = {calloc(cap, sizeof(void *)), cap, 0};
        if (!nt.slots)
            return GPO_ENOMEM;
        for (size_t k = 0; k < t->cap; k++)
            if (t->slots[k])
                *table_slot(&nt, entry_key(t->slots[k])) = t->slots[k], nt.n++;
        free(t->slots);
        *t = nt;
    }
    *table_slot(t, entry_key(e)) = e;
    t->n++;
    return 0;
}

/* Removes the entry of `key` (backward-shift deletion keeps probes intact). */
static void table_del(struct table *t, const char *key)
{
    void **slot = table_slot(t, key);
    if (!slot || !*slot)
        return;
    size_t i = (size_t)(slot - t->slots), mask = t->cap - 1;
    t->slots[i] = NULL;
    t->n--;
    for (size_t j = (i + 1) & mask; t->slots[j]; j = (j + 1) & mask) {
        void *e = t->slots[j];
        t->slots[j] = NULL;
        *table_slot(t, entry_key(e)) = e;
    }
}

/* ---- life ---------------------------------------------------------------- */

struct series *series_new(int64_t base_ms, uint32_t ring_cap, int64_t horizon_ms, int64_t minute_ms)
{
    if (ring_cap < 1 || ring_cap > 1000000 || horizon_ms < 1000 || minute_ms < 100)
        return NULL;
    struct series *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    if (pthread_mutex_init(&s->lock, NULL)) {
        free(s);
        return NULL;
    }
    s->base_ms = base_ms;
    s->ring_cap = ring_cap;
    s->horizon_ms = horizon_ms;
    s->minute_ms = minute_ms;
    return s;
}

static void minute_release(struct series_minute *m)
{
    free(m->key);
    free(m->label);
}

void series_minutes_free(struct series_minute *m, size_t n)
{
    for (size_t k = 0; m && k < n; k++)
        minute_release(&m[k]);
    free(m);
}

void series_free(struct series *s)
{
    if (!s)
        return;
    for (size_t k = 0; k < s->ngpus; k++) {
        struct gpu *g = s->gpus[k];
        free(g->uuid);
        free(g->node);
        free(g->gpu_type);
        free(g->ring);
        free(g);
    }
    free(s->gpus);
    for (size_t k = 0; k < s->job_ix.cap; k++) {
        struct jobagg *j = s->job_ix.slots[k];
        if (j) {
            free(j->key);
            free(j->label);
            free(j);
        }
    }
    free(s->job_ix.slots);
    free(s->gpu_ix.slots);
    for (size_t k = 0; k < s->npending; k++)
        minute_release(&s->pending[k]);
    free(s->pending);
    for (size_t k = 0; k < s->nqueues; k++) {
        free(s->queues[k].key);
        free(s->queues[k].ring);
    }
    free(s->queues);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int64_t series_minute_ms(const struct series *s)
{
    return s->minute_ms;
}

int64_t series_ring_start(const struct series *s, int64_t now_ms)
{
    int64_t h = now_ms - s->horizon_ms;
    return h > s->base_ms ? h : s->base_ms;
}

/* ---- time and values ----------------------------------------------------- */

static uint32_t to_ds(const struct series *s, int64_t t_ms)
{
    int64_t d = (t_ms - s->base_ms) / 100;
    return d < 0 ? 0 : d > (int64_t)UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)d;
}

static int64_t from_ds(const struct series *s, uint32_t ds)
{
    return s->base_ms + (int64_t)ds * 100;
}

static int64_t minute_of(const struct series *s, int64_t t_ms)
{
    int64_t m = t_ms / s->minute_ms;
    if (t_ms < 0 && t_ms % s->minute_ms)
        m--;
    return m * s->minute_ms;
}

static uint64_t clampu(int64_t v, uint64_t max)
{
    return v < 0 ? 0 : (uint64_t)v > max ? max : (uint64_t)v;
}

static struct point to_point(const struct series *s, int64_t t_ms, const struct series_sample *v)
{
    return (struct point){
        .t_ds = to_ds(s, t_ms),
        .util = v->util_pct == SERIES_UNKNOWN ? UNK8 : (uint8_t)clampu(v->util_pct, 100),
        .mem_mib = v->mem_used_mib == SERIES_UNKNOWN ? UNK32
                                                     : (uint32_t)clampu(v->mem_used_mib, UNK32 - 1),
        .power_w =
            v->power_mw == SERIES_UNKNOWN ? UNK16 : (uint16_t)clampu(v->power_mw / 1000, UNK16 - 1),
        .temp = v->temp_c == SERIES_UNKNOWN ? UNK8 : (uint8_t)clampu(v->temp_c, UNK8 - 1),
    };
}

static struct series_sample from_point(const struct point *p)
{
    return (struct series_sample){
        .util_pct = p->util == UNK8 ? SERIES_UNKNOWN : p->util,
        .mem_used_mib = p->mem_mib == UNK32 ? SERIES_UNKNOWN : p->mem_mib,
        .power_mw = p->power_w == UNK16 ? SERIES_UNKNOWN : (int64_t)p->power_w * 1000,
        .temp_c = p->temp == UNK8 ? SERIES_UNKNOWN : p->temp,
    };
}

double series_value(const struct series_sample *v, enum series_metric m)
{
    int64_t x = m == SERIES_UTIL    ? v->util_pct
                : m == SERIES_MEM   ? v->mem_used_mib
                : m == SERIES_POWER ? v->power_mw
                                    : v->temp_c;
    if (x == SERIES_UNKNOWN)
        return NAN;
    return m == SERIES_POWER ? (double)x / 1000.0 : (double)x;
}

/* ---- minutes ------------------------------------------------------------- */

static void agg_add(struct agg *a, const struct series_sample *v, uint32_t idle_pct)
{
    if (v->util_pct == SERIES_UNKNOWN)
        return;
    uint32_t u = (uint32_t)clampu(v->util_pct, 100);
    a->samples++;
    a->util_sum += u;
    a->util_max = u > a->util_max ? u : a->util_max;
    a->idle_samples += u < idle_pct;
    uint64_t mem = v->mem_used_mib == SERIES_UNKNOWN ? 0 : clampu(v->mem_used_mib, INT64_MAX);
    a->mem_sum += mem;
    a->mem_max = mem > a->mem_max ? mem : a->mem_max;
    a->power_sum += v->power_mw == SERIES_UNKNOWN ? 0 : clampu(v->power_mw, INT64_MAX);
    uint32_t t = v->temp_c == SERIES_UNKNOWN ? 0 : (uint32_t)clampu(v->temp_c, 1000);
    a->temp_max = t > a->temp_max ? t : a->temp_max;
}

/* Moves an open minute with samples to the pending list; the entry is then
 * closed either way. 0 or GPO_ENOMEM (the minute is kept open). */
static int agg_close(struct series *s, struct agg *a, enum series_kind kind, const char *key,
                     const char *label)
{
    if (a->minute_ms == INT64_MIN || !a->samples) {
        a->minute_ms = INT64_MIN;
        return 0;
    }
    if (s->npending >= SERIES_PENDING_MAX) {
        s->dropped++;
        *a = (struct agg){.minute_ms = INT64_MIN};
        return 0;
    }
    if (s->npending == s->pending_cap) {
        size_t cap = s->pending_cap ? s->pending_cap * 2 : 256;
        struct series_minute *p = realloc(s->pending, cap * sizeof(*p));
        if (!p)
            return GPO_ENOMEM;
        s->pending = p;
        s->pending_cap = cap;
    }
    struct series_minute m = {
        .kind = kind,
        .key = strdup(key),
        .label = strdup(label ? label : ""),
        .minute_ms = a->minute_ms,
        .samples = a->samples,
        .util_max = a->util_max,
        .idle_samples = a->idle_samples,
        .temp_max_c = a->temp_max,
        .util_sum = a->util_sum,
        .mem_sum_mib = a->mem_sum,
        .mem_max_mib = a->mem_max,
        .power_sum_mw = a->power_sum,
    };
    if (!m.key || !m.label) {
        minute_release(&m);
        return GPO_ENOMEM;
    }
    s->pending[s->npending++] = m;
    *a = (struct agg){.minute_ms = INT64_MIN};
    return 0;
}

/* Rolls `a` over to the minute of t_ms when that is a later one. */
static int agg_roll(struct series *s, struct agg *a, int64_t t_ms, enum series_kind kind,
                    const char *key, const char *label)
{
    int64_t m = minute_of(s, t_ms);
    if (a->minute_ms != INT64_MIN && a->minute_ms >= m)
        return 0;
    int rc = agg_close(s, a, kind, key, label);
    if (rc == 0)
        *a = (struct agg){.minute_ms = m};
    return rc;
}

int series_minutes_take(struct series *s, int64_t now_ms, struct series_minute **ret, size_t *ret_n)
{
    pthread_mutex_lock(&s->lock);
    int rc = 0;
    int64_t open = minute_of(s, now_ms); /* minutes before it have ended */
    for (size_t k = 0; rc == 0 && k < s->ngpus; k++) {
        struct gpu *g = s->gpus[k];
        if (g->cur.minute_ms != INT64_MIN && g->cur.minute_ms < open)
            rc = agg_close(s, &g->cur, SERIES_KIND_GPU, g->uuid, g->node);
    }
    for (size_t k = 0; rc == 0 && k < s->job_ix.cap; k++) {
        struct jobagg *j = s->job_ix.slots[k];
        if (!j || j->cur.minute_ms >= open)
            continue;
        rc = agg_close(s, &j->cur, SERIES_KIND_JOB, j->key, j->label);
        if (rc == 0) {
            table_del(&s->job_ix, j->key);
            free(j->key);
            free(j->label);
            free(j);
            k--; /* the deletion may have shifted another entry into this slot */
        }
    }
    if (rc == 0) {
        *ret = s->pending;
        *ret_n = s->npending;
        s->pending = NULL;
        s->npending = s->pending_cap = 0;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

uint64_t series_minutes_dropped(struct series *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t n = s->dropped;
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* ---- GPUs ---------------------------------------------------------------- */

static int set_str(char **dst, const char *v)
{
    v = v ? v : "";
    if (*dst && strcmp(*dst, v) == 0)
        return 0;
    char *c = strdup(v);
    if (!c)
        return GPO_ENOMEM;
    free(*dst);
    *dst = c;
    return 0;
}

static struct gpu *gpu_get(struct series *s, const struct series_gpu_info *info)
{
    struct gpu *g = table_get(&s->gpu_ix, info->uuid);
    if (g) {
        g->index = info->index;
        return set_str(&g->node, info->node) || set_str(&g->gpu_type, info->gpu_type) ? NULL : g;
    }
    if (s->ngpus == s->gpus_cap) {
        size_t cap = s->gpus_cap ? s->gpus_cap * 2 : 64;
        // NOLINTNEXTLINE(bugprone-sizeof-expression): *p is a pointer (an array of them)
        struct gpu **v = realloc(s->gpus, cap * sizeof(*v));
        if (!v)
            return NULL;
        s->gpus = v;
        s->gpus_cap = cap;
    }
    g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->cur.minute_ms = INT64_MIN;
    g->index = info->index;
    g->uuid = strdup(info->uuid);
    g->ring = calloc(s->ring_cap, sizeof(*g->ring));
    if (!g->uuid || !g->ring || set_str(&g->node, info->node) ||
        set_str(&g->gpu_type, info->gpu_type) || table_put(&s->gpu_ix, g)) {
        free(g->uuid);
        free(g->ring);
        free(g->node);
        free(g->gpu_type);
        free(g);
        return NULL;
    }
    s->gpus[s->ngpus++] = g;
    return g;
}

static const struct point *ring_at(const struct gpu *g, uint32_t cap, uint32_t k)
{
    /* k-th oldest point */
    return &g->ring[(g->head + cap - g->n + k) % cap];
}

int series_gpu_put(struct series *s, const struct series_gpu_info *info, int64_t t_ms,
                   const struct series_sample *v, int64_t job, uint32_t idle_pct)
{
    if (!info || !info->uuid || !info->uuid[0] || !v)
        return GPO_EINVAL;
    pthread_mutex_lock(&s->lock);
    int rc = GPO_ENOMEM;
    struct gpu *g = gpu_get(s, info);
    struct point p = to_point(s, t_ms, v);
    if (g && g->n && ring_at(g, s->ring_cap, g->n - 1)->t_ds > p.t_ds) {
        rc = 0; /* older than what we have: a late duplicate */
    } else if (g && agg_roll(s, &g->cur, t_ms, SERIES_KIND_GPU, g->uuid, g->node) == 0) {
        g->ring[g->head] = p;
        g->head = (g->head + 1) % s->ring_cap;
        g->n += g->n < s->ring_cap;
        uint32_t j = job > 0 && job <= UINT32_MAX ? (uint32_t)job : 0;
        if (!g->on || g->owners[(g->ohead + SERIES_OWNERS - 1) % SERIES_OWNERS].job != j) {
            g->owners[g->ohead] = (struct owner){p.t_ds, j};
            g->ohead = (g->ohead + 1) % SERIES_OWNERS;
            g->on += g->on < SERIES_OWNERS;
        }
        agg_add(&g->cur, v, idle_pct);
        rc = 0;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int series_job_put(struct series *s, const char *key, const char *label, int64_t t_ms,
                   const struct series_sample *v, uint32_t idle_pct)
{
    if (!key || !key[0] || !v)
        return GPO_EINVAL;
    pthread_mutex_lock(&s->lock);
    struct jobagg *j = table_get(&s->job_ix, key);
    if (!j) {
        j = calloc(1, sizeof(*j));
        if (j) {
            j->cur.minute_ms = INT64_MIN;
            j->key = strdup(key);
            j->label = strdup(label ? label : "");
        }
        if (!j || !j->key || !j->label || table_put(&s->job_ix, j)) {
            if (j) {
                free(j->key);
                free(j->label);
            }
            free(j);
            pthread_mutex_unlock(&s->lock);
            return GPO_ENOMEM;
        }
    }
    int rc = agg_roll(s, &j->cur, t_ms, SERIES_KIND_JOB, j->key, j->label);
    if (rc == 0)
        agg_add(&j->cur, v, idle_pct);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int series_gpu_latest(struct series *s, const char *uuid, int64_t now_ms, struct series_sample *ret,
                      int64_t *ret_t_ms)
{
    pthread_mutex_lock(&s->lock);
    const struct gpu *g = uuid ? table_get(&s->gpu_ix, uuid) : NULL;
    int rc = GPO_ENOENT;
    if (g && g->n) {
        const struct point *p = ring_at(g, s->ring_cap, g->n - 1);
        int64_t t = from_ds(s, p->t_ds);
        if (t >= now_ms - s->horizon_ms) {
            *ret = from_point(p);
            if (ret_t_ms)
                *ret_t_ms = t;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

size_t series_gpu_count(struct series *s)
{
    pthread_mutex_lock(&s->lock);
    size_t n = s->ngpus;
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* The job holding g at time t_ds: the latest owner change at or before it. */
static uint32_t owner_at(const struct gpu *g, uint32_t t_ds)
{
    uint32_t job = 0;
    for (uint32_t k = 0; k < g->on; k++) {
        const struct owner *o = &g->owners[(g->ohead + SERIES_OWNERS - g->on + k) % SERIES_OWNERS];
        if (o->t_ds > t_ds)
            break;
        job = o->job;
    }
    return job;
}

static void scan_gpu(struct series *s, const struct gpu *g, int64_t since_ms, int64_t until_ms,
                     series_sample_fn fn, void *ctx)
{
    const struct series_gpu_info info = {g->uuid, g->node, g->gpu_type, g->index};
    /* Binary search for the first point at or after since_ms. */
    uint32_t lo = 0, hi = g->n, since_ds = to_ds(s, since_ms);
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ring_at(g, s->ring_cap, mid)->t_ds < since_ds)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (uint32_t k = lo; k < g->n; k++) {
        const struct point *p = ring_at(g, s->ring_cap, k);
        int64_t t = from_ds(s, p->t_ds);
        if (t >= until_ms)
            break;
        if (t < since_ms)
            continue;
        struct series_sample v = from_point(p);
        fn(ctx, &info, owner_at(g, p->t_ds), t, &v);
    }
}

void series_scan(struct series *s, const char *uuid, int64_t since_ms, int64_t until_ms,
                 int64_t now_ms, series_sample_fn fn, void *ctx)
{
    if (since_ms < now_ms - s->horizon_ms)
        since_ms = now_ms - s->horizon_ms;
    pthread_mutex_lock(&s->lock);
    if (uuid) {
        const struct gpu *g = table_get(&s->gpu_ix, uuid);
        if (g)
            scan_gpu(s, g, since_ms, until_ms, fn, ctx);
    } else {
        for (size_t k = 0; k < s->ngpus; k++)
            scan_gpu(s, s->gpus[k], since_ms, until_ms, fn, ctx);
    }
    pthread_mutex_unlock(&s->lock);
}

struct points_ctx {
    enum series_metric m;
    int64_t since_ms, step_ms;
    size_t nsteps;
    double *sum;
    uint64_t *count;
};

static void points_add(void *arg, const struct series_gpu_info *g, int64_t job, int64_t t_ms,
                       const struct series_sample *v)
{
    (void)g, (void)job;
    struct points_ctx *c = arg;
    double x = series_value(v, c->m);
    size_t k = (size_t)((t_ms - c->since_ms) / c->step_ms);
    if (!isnan(x) && k < c->nsteps) {
        c->sum[k] += x;
        c->count[k]++;
    }
}

int series_points(struct series *s, const char *const *uuids, size_t n, enum series_metric m,
                  int64_t since_ms, int64_t step_ms, size_t nsteps, int64_t now_ms,
                  double *ret_means)
{
    if (step_ms < 1 || !nsteps || nsteps > 1000000 || !ret_means || (n && !uuids))
        return GPO_EINVAL;
    uint64_t *count = calloc(nsteps, sizeof(*count));
    if (!count)
        return GPO_ENOMEM;
    for (size_t k = 0; k < nsteps; k++)
        ret_means[k] = 0;
    struct points_ctx c = {m, since_ms, step_ms, nsteps, ret_means, count};
    int64_t until = since_ms + step_ms * (int64_t)nsteps;
    if (!uuids)
        series_scan(s, NULL, since_ms, until, now_ms, points_add, &c);
    for (size_t k = 0; uuids && k < n; k++)
        series_scan(s, uuids[k], since_ms, until, now_ms, points_add, &c);
    for (size_t k = 0; k < nsteps; k++)
        ret_means[k] = count[k] ? ret_means[k] / (double)count[k] : NAN;
    free(count);
    return 0;
}

/* ---- queue length -------------------------------------------------------- */

int series_queue_put(struct series *s, const char *key, uint32_t value, int64_t t_ms)
{
    if (!key || !key[0])
        return GPO_EINVAL;
    pthread_mutex_lock(&s->lock);
    int rc = 0;
    struct qring *q = NULL;
    for (size_t k = 0; k < s->nqueues && !q; k++)
        if (strcmp(s->queues[k].key, key) == 0)
            q = &s->queues[k];
    if (!q && s->nqueues >= SERIES_QUEUE_KEYS_MAX) {
        rc = GPO_EINVAL;
    } else if (!q) {
        if (s->nqueues == s->queues_cap) {
            size_t cap = s->queues_cap ? s->queues_cap * 2 : 16;
            struct qring *v = realloc(s->queues, cap * sizeof(*v));
            if (v)
                s->queues = v, s->queues_cap = cap;
        }
        struct qring nq = {strdup(key), calloc(s->ring_cap, sizeof(struct qpoint)), 0, 0};
        if (s->nqueues == s->queues_cap || !nq.key || !nq.ring) {
            free(nq.key);
            free(nq.ring);
            rc = GPO_ENOMEM;
        } else {
            s->queues[s->nqueues] = nq;
            q = &s->queues[s->nqueues++];
        }
    }
    if (q) {
        struct qpoint p = {to_ds(s, t_ms), value};
        uint32_t last = (q->head + s->ring_cap - 1) % s->ring_cap;
        if (q->n && p.t_ds < q->ring[last].t_ds + 10) {
            q->ring[last].value = value; /* within a second of the latest */
        } else {
            q->ring[q->head] = p;
            q->head = (q->head + 1) % s->ring_cap;
            q->n += q->n < s->ring_cap;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void series_queue_scan(struct series *s, int64_t since_ms, int64_t until_ms, int64_t now_ms,
                       series_queue_fn fn, void *ctx)
{
    if (since_ms < now_ms - s->horizon_ms)
        since_ms = now_ms - s->horizon_ms;
    pthread_mutex_lock(&s->lock);
    for (size_t k = 0; k < s->nqueues; k++) {
        const struct qring *q = &s->queues[k];
        for (uint32_t i = 0; i < q->n; i++) {
            const struct qpoint *p = &q->ring[(q->head + s->ring_cap - q->n + i) % s->ring_cap];
            int64_t t = from_ds(s, p->t_ds);
            if (t >= since_ms && t < until_ms)
                fn(ctx, q->key, t, p->value);
        }
    }
    pthread_mutex_unlock(&s->lock);
}

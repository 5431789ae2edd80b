/*
 * table.c - the routing table's snapshots, lookups, API keys and the choice
 * of an endpoint (router.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "router/router.h"
#include "base/banned.h"

int64_t rt_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void rt_hist_add(struct rt_hist *h, int64_t us)
{
    double s = (double)us / 1e6;
    size_t k = 0;
    while (k < RT_HIST_BOUNDS && s > proto_latency_bounds_s[k])
        k++;
    atomic_fetch_add(&h->counts[k], 1);
    atomic_fetch_add(&h->sum_us, (unsigned long long)(us > 0 ? us : 0));
}

void rt_stats_load(struct rt_stats *s, atomic_uint *which, int delta)
{
    /* The integral: (inflight + queued) times the time since the last
     * change, added before the change. Racing workers may attribute a few
     * microseconds to the wrong level; the mean over a second stays right. */
    int64_t now = rt_now_us();
    int64_t at = atomic_exchange(&s->load_at, now);
    unsigned level = atomic_load(&s->inflight) + atomic_load(&s->queued);
    if (at && now > at)
        atomic_fetch_add(&s->load_us, (unsigned long long)(now - at) * level);
    if (delta > 0)
        atomic_fetch_add(which, (unsigned)delta);
    else
        atomic_fetch_sub(which, (unsigned)-delta);
}

void rt_endpoint_unref(struct rt_endpoint *ep)
{
    if (ep && atomic_fetch_sub(&ep->refs, 1) == 1)
        free(ep); /* every worker freed its connections before it let go */
}

void rt_stats_unref(struct rt_stats *s)
{
    if (s && atomic_fetch_sub(&s->refs, 1) == 1)
        free(s);
}

static void service_release(struct rt_service *s)
{
    free(s->name);
    free(s->model);
    for (size_t k = 0; k < s->nhosts; k++)
        free(s->hosts[k]);
    free(s->hosts);
    free(s->keys);
    for (size_t k = 0; k < s->neps; k++)
        rt_endpoint_unref(s->eps[k].ep);
    free(s->eps);
    rt_stats_unref(s->stats);
}

struct rt_table *rt_table_ref(struct rt_table *t)
{
    if (t)
        atomic_fetch_add(&t->refs, 1);
    return t;
}

void rt_table_unref(struct rt_table *t)
{
    if (!t || atomic_fetch_sub(&t->refs, 1) != 1)
        return;
    for (size_t i = 0; i < t->nservices; i++)
        service_release(&t->services[i]);
    free(t->services);
    free(t);
}

struct rt_table *router_table(struct router *r)
{
    pthread_mutex_lock(&r->lock);
    struct rt_table *t = rt_table_ref(r->table);
    pthread_mutex_unlock(&r->lock);
    return t;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int hex_key(const char *hex, uint8_t out[TOKEN_HASH_LEN])
{
    if (strlen(hex) != (size_t)2 * TOKEN_HASH_LEN)
        return GPO_EINVAL;
    for (size_t k = 0; k < TOKEN_HASH_LEN; k++) {
        int hi = hexval(hex[2 * k]), lo = hexval(hex[2 * k + 1]);
        if (hi < 0 || lo < 0)
            return GPO_EINVAL;
        out[k] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

static const struct rt_service *old_service(const struct rt_table *old, const char *name)
{
    return old ? rt_find_name(old, name, strlen(name)) : NULL;
}

static struct rt_endpoint *endpoint_get(const struct rt_service *prev,
                                        const struct proto_route_endpoint *p)
{
    for (size_t k = 0; prev && k < prev->neps; k++) {
        struct rt_endpoint *ep = prev->eps[k].ep;
        if (ep->job == p->job && ep->attempt == p->attempt && ep->port == p->port &&
            !strcmp(ep->addr, p->addr)) {
            atomic_fetch_add(&ep->refs, 1);
            return ep;
        }
    }
    struct rt_endpoint *ep = calloc(1, sizeof(*ep));
    if (!ep)
        return NULL;
    atomic_init(&ep->refs, 1);
    ep->job = p->job;
    ep->attempt = p->attempt;
    ep->replica = p->replica;
    ep->port = (uint16_t)p->port;
    snprintf(ep->addr, sizeof(ep->addr), "%s", p->addr);
    return ep;
}

static int service_build(const struct proto_route_service *p, const struct rt_service *prev,
                         struct rt_service *s)
{
    s->name = strdup(p->name);
    s->model = strdup(p->model ? p->model : p->name);
    s->hosts = calloc(p->nhosts + 1, sizeof(*s->hosts));
    s->keys = calloc(p->nkeys + 1, sizeof(*s->keys));
    s->eps = calloc(p->nendpoints + 1, sizeof(*s->eps));
    if (!s->name || !s->model || !s->hosts || !s->keys || !s->eps)
        return GPO_ENOMEM;
    s->concurrency_limit = p->concurrency_limit;
    s->queue_limit = p->queue_limit;
    s->queue_timeout_ms = p->queue_timeout_ms;
    for (; s->nhosts < p->nhosts; s->nhosts++)
        if (!(s->hosts[s->nhosts] = strdup(p->hosts[s->nhosts])))
            return GPO_ENOMEM;
    for (; s->nkeys < p->nkeys; s->nkeys++)
        if (hex_key(p->key_hashes[s->nkeys], s->keys[s->nkeys]))
            return GPO_EINVAL;
    for (; s->neps < p->nendpoints; s->neps++) {
        const struct proto_route_endpoint *pe = &p->endpoints[s->neps];
        if (!(s->eps[s->neps].ep = endpoint_get(prev, pe)))
            return GPO_ENOMEM;
        s->eps[s->neps].draining = pe->state == PROTO_ENDPOINT_DRAINING;
    }
    if (prev) {
        s->stats = prev->stats;
        atomic_fetch_add(&s->stats->refs, 1);
    } else if ((s->stats = calloc(1, sizeof(*s->stats))) != NULL) {
        atomic_init(&s->stats->refs, 1);
        snprintf(s->stats->name, sizeof(s->stats->name), "%s", p->name);
    }
    return s->stats ? 0 : GPO_ENOMEM;
}

static bool in_table(const struct rt_table *t, const struct rt_endpoint *ep)
{
    for (size_t i = 0; i < t->nservices; i++)
        for (size_t k = 0; k < t->services[i].neps; k++)
            if (t->services[i].eps[k].ep == ep)
                return true;
    return false;
}

int rt_table_build(const struct proto_routes *m, const struct rt_table *old, struct rt_table **ret)
{
    struct rt_table *t = calloc(1, sizeof(*t));
    if (!t)
        return GPO_ENOMEM;
    atomic_init(&t->refs, 1);
    t->rev = m->rev;
    t->services = calloc(m->nservices + 1, sizeof(*t->services));
    int rc = t->services ? 0 : GPO_ENOMEM;
    for (; !rc && t->nservices < m->nservices; t->nservices++) {
        const struct proto_route_service *p = &m->services[t->nservices];
        rc = service_build(p, old_service(old, p->name), &t->services[t->nservices]);
    }
    if (rc) {
        rt_table_unref(t);
        return rc;
    }
    for (size_t i = 0; old && i < old->nservices; i++)
        for (size_t k = 0; k < old->services[i].neps; k++)
            if (!in_table(t, old->services[i].eps[k].ep))
                atomic_store(&old->services[i].eps[k].ep->gone, true);
    *ret = t;
    return 0;
}

const struct rt_service *rt_find_name(const struct rt_table *t, const char *name, size_t len)
{
    for (size_t i = 0; t && i < t->nservices; i++)
        if (strlen(t->services[i].name) == len && !memcmp(t->services[i].name, name, len))
            return &t->services[i];
    return NULL;
}

const struct rt_service *rt_find_host(const struct rt_table *t, const char *host)
{
    if (!host)
        return NULL;
    size_t len = strcspn(host, ":"); /* the port is not part of the name */
    for (size_t i = 0; t && i < t->nservices; i++)
        for (size_t k = 0; k < t->services[i].nhosts; k++)
            if (strlen(t->services[i].hosts[k]) == len &&
                !strncasecmp(t->services[i].hosts[k], host, len))
                return &t->services[i];
    return NULL;
}

const struct rt_service *rt_find_model(const struct rt_table *t, const char *model)
{
    for (size_t i = 0; t && i < t->nservices; i++)
        if (!strcmp(t->services[i].model, model))
            return &t->services[i];
    for (size_t i = 0; t && i < t->nservices; i++) /* a service's name answers too */
        if (!strcmp(t->services[i].name, model))
            return &t->services[i];
    return NULL;
}

bool rt_key_ok(const struct rt_service *s, const char *key)
{
    if (!s->nkeys)
        return true;
    if (!key)
        return false;
    uint8_t h[TOKEN_HASH_LEN];
    if (token_hash(key, h))
        return false;
    bool ok = false;
    for (size_t k = 0; k < s->nkeys; k++)
        ok |= token_hash_equal(h, s->keys[k]);
    return ok;
}

static uint64_t next_random(uint64_t *seed)
{
    /* xorshift64*: fast and good enough to spread two choices. */
    uint64_t x = *seed ? *seed : 0x9e3779b97f4a7c15u;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *seed = x;
    return x * 0x2545f4914f6cdd1du;
}

static bool can_take(const struct rt_service *s, const struct rt_route_ep *e,
                     const struct rt_endpoint *avoid)
{
    if (e->draining || e->ep == avoid || atomic_load(&e->ep->gone))
        return false;
    return !s->concurrency_limit || atomic_load(&e->ep->inflight) < s->concurrency_limit;
}

struct rt_endpoint *rt_pick(const struct rt_service *s, const struct rt_endpoint *avoid,
                            uint64_t *seed)
{
    size_t ok[PROTO_ROUTE_ENDPOINTS_MAX];
    size_t n = 0;
    for (size_t k = 0; k < s->neps && n < PROTO_ROUTE_ENDPOINTS_MAX; k++)
        if (can_take(s, &s->eps[k], avoid))
            ok[n++] = k;
    if (!n)
        return NULL;
    struct rt_endpoint *a = s->eps[ok[next_random(seed) % n]].ep;
    if (n == 1)
        return a;
    struct rt_endpoint *b = a;
    while (b == a)
        b = s->eps[ok[next_random(seed) % n]].ep;
    return atomic_load(&b->inflight) < atomic_load(&a->inflight) ? b : a;
}

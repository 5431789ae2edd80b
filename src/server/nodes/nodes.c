/*
 * nodes.c - the nodes' runtimes and their long-polls (nodes.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/vec.h"
#include "server/nodes/nodes.h"
#include "base/banned.h"

/* An agent's long-poll, in its node's list until answered. */
struct node_waiter {
    struct http_request *req;
    struct node_waiter *next;
};

void nodes_init(struct nodes *ns, pthread_mutex_t *lock, nodes_answer_fn answer, void *ctx)
{
    *ns = (struct nodes){.lock = lock, .answer = answer, .answer_ctx = ctx};
}

static void dirty_clear(struct node_rt *rt)
{
    for (size_t k = 0; k < rt->ndirty; k++)
        free(rt->dirty[k]);
    rt->ndirty = 0;
}

void nodes_release(struct nodes *ns)
{
    for (size_t k = 0; k < ns->n; k++) {
        proto_heartbeat_release(&ns->v[k].sample);
        dirty_clear(&ns->v[k]);
        free(ns->v[k].dirty);
    }
    free(ns->v);
    ns->v = NULL;
    ns->n = ns->cap = 0;
}

static size_t search(const struct nodes *ns, const char *name, bool *found)
{
    size_t lo = 0, hi = ns->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ns->v[mid].name, name);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

struct node_rt *nodes_find(const struct nodes *ns, const char *name)
{
    bool found;
    size_t at = search(ns, name, &found);
    return found ? &ns->v[at] : NULL;
}

int nodes_add(struct nodes *ns, const char *name, int64_t now_ms)
{
    bool found;
    size_t at = search(ns, name, &found);
    if (found) {
        ns->v[at].last_heartbeat_ms = now_ms;
        ns->v[at].seen_mono_ms = NODES_MONO_UNSET;
        return 0;
    }
    if (strlen(name) > CLUSTER_HOST_MAX)
        return GPO_EINVAL;
    if (vec_grow((void **)&ns->v, &ns->cap, ns->n + 1, sizeof(*ns->v)))
        return GPO_ENOMEM;
    memmove(&ns->v[at + 1], &ns->v[at], (ns->n - at) * sizeof(*ns->v));
    struct node_rt *rt = &ns->v[at];
    memset(rt, 0, sizeof(*rt));
    snprintf(rt->name, sizeof(rt->name), "%s", name);
    rt->last_heartbeat_ms = now_ms;
    rt->seen_mono_ms = NODES_MONO_UNSET;
    rt->rev = 1;
    ns->n++;
    return 0;
}

void nodes_seen(struct node_rt *rt, int64_t now_ms, int64_t mono_ms)
{
    rt->last_heartbeat_ms = now_ms;
    rt->seen_mono_ms = mono_ms;
}

void nodes_date(struct node_rt *rt, int64_t now_ms, int64_t mono_ms)
{
    if (rt->seen_mono_ms != NODES_MONO_UNSET)
        return;
    int64_t age = now_ms - rt->last_heartbeat_ms;
    rt->seen_mono_ms = mono_ms - (age > 0 ? age : 0);
}

int64_t nodes_silence_ms(const struct node_rt *rt, int64_t now_ms, int64_t mono_ms)
{
    int64_t age = rt->seen_mono_ms != NODES_MONO_UNSET ? mono_ms - rt->seen_mono_ms
                                                       : now_ms - rt->last_heartbeat_ms;
    return age > 0 ? age : 0;
}

void nodes_remove(struct nodes *ns, const char *name)
{
    bool found;
    size_t at = search(ns, name, &found);
    if (!found)
        return;
    struct node_rt *rt = &ns->v[at];
    for (struct node_waiter *w = rt->waiters, *next; w; w = next) {
        next = w->next;
        http_request_complete_error(w->req, 404, "not_found", "node '%s' was deleted", name);
        free(w);
    }
    proto_heartbeat_release(&rt->sample);
    dirty_clear(rt);
    free(rt->dirty);
    memmove(rt, rt + 1, (ns->n - at - 1) * sizeof(*rt));
    ns->n--;
}

static void answer(struct nodes *ns, struct node_waiter *w, const struct node_rt *rt)
{
    json_t *o = ns->answer(ns->answer_ctx, rt);
    if (o)
        http_request_complete(w->req, 200, o);
    else
        http_request_complete_error(w->req, 500, "internal", "out of memory");
    free(w);
}

void nodes_changed(struct nodes *ns, const char *name)
{
    struct node_rt *rt = nodes_find(ns, name);
    if (!rt)
        return;
    rt->rev++;
    struct node_waiter *w = rt->waiters;
    rt->waiters = NULL;
    while (w) {
        struct node_waiter *next = w->next;
        answer(ns, w, rt);
        w = next;
    }
}

/* http_timeout_fn (ctx: the registry): the wait ran out with nothing new;
 * answer the same revision, unless a change answered first. The waiter is
 * found by its request, never through the callback's context: a change may
 * have answered and freed it while the timer was on its way here. */
// cppcheck-suppress constParameter ; an http_timeout_fn: the signature is the callback's
static void waiter_timeout(struct http_request *req, void *ctx)
{
    struct nodes *ns = ctx;
    pthread_mutex_lock(ns->lock);
    for (size_t k = 0; k < ns->n; k++) {
        for (struct node_waiter **p = &ns->v[k].waiters; *p; p = &(*p)->next) {
            if ((*p)->req == req) {
                struct node_waiter *w = *p;
                *p = w->next;
                answer(ns, w, &ns->v[k]);
                pthread_mutex_unlock(ns->lock);
                return;
            }
        }
    }
    pthread_mutex_unlock(ns->lock);
}

int nodes_wait(struct nodes *ns, struct node_rt *rt, struct http_request *req, unsigned wait_ms)
{
    struct node_waiter *w = calloc(1, sizeof(*w));
    if (!w)
        return GPO_ENOMEM;
    int rc = http_request_suspend(req, wait_ms, waiter_timeout, ns);
    if (rc) {
        free(w);
        return rc;
    }
    *w = (struct node_waiter){.req = req, .next = rt->waiters};
    rt->waiters = w;
    return 0;
}

void nodes_release_waiters(struct nodes *ns)
{
    pthread_mutex_lock(ns->lock);
    for (size_t k = 0; k < ns->n; k++) {
        struct node_waiter *w = ns->v[k].waiters;
        ns->v[k].waiters = NULL;
        while (w) {
            struct node_waiter *next = w->next;
            http_request_complete_error(w->req, 503, "unavailable", "the server is stopping");
            free(w);
            w = next;
        }
    }
    pthread_mutex_unlock(ns->lock);
}

void nodes_hold(struct nodes *ns, const char *name)
{
    struct node_rt *rt = nodes_find(ns, name);
    if (!rt)
        return;
    nodes_changed(ns, name);
    rt->hold = true;
    rt->hold_rev = rt->rev;
    rt->hold_polled = false;
    rt->hold_beats = 0;
}

void nodes_polled(struct node_rt *rt, uint64_t since)
{
    if (rt->hold && since >= rt->hold_rev)
        rt->hold_polled = true;
}

unsigned nodes_heartbeat(struct node_rt *rt, struct proto_heartbeat *hb, int64_t now_ms,
                         int64_t mono_ms)
{
    unsigned out = rt->lost ? NODES_BEAT_BACK : 0;
    rt->lost = false;
    nodes_seen(rt, now_ms, mono_ms);
    if (!hb)
        return out;
    if (rt->unheard)
        out |= NODES_BEAT_HEARD;
    rt->unheard = false;
    dirty_clear(rt);
    nodes_dirty_add(rt, hb->dirty, hb->ndirty);
    proto_heartbeat_release(&rt->sample);
    rt->sample = *hb;
    memset(hb, 0, sizeof(*hb));
    rt->has_sample = true;
    rt->sample_ms = now_ms;
    if (rt->hold && rt->hold_polled && ++rt->hold_beats >= 2) {
        rt->hold = false;
        out |= NODES_BEAT_RELEASED;
    }
    return out;
}

void nodes_dirty_add(struct node_rt *rt, char *const *uuids, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (nodes_is_dirty(rt, uuids[k]) ||
            vec_grow((void **)&rt->dirty, &rt->dirty_cap, rt->ndirty + 1, sizeof(*rt->dirty)))
            continue;
        char *u = strdup(uuids[k]);
        if (u)
            rt->dirty[rt->ndirty++] = u;
    }
}

bool nodes_is_dirty(const struct node_rt *rt, const char *uuid)
{
    for (size_t k = 0; rt && k < rt->ndirty; k++) {
        if (strcmp(rt->dirty[k], uuid) == 0)
            return true;
    }
    return false;
}

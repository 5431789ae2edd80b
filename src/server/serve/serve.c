/*
 * serve.c - the serving runtime's records (serve.h): services and their
 * replicas, the rebuild at start, the agents' endpoint reports and the
 * routers' load reports.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/vec.h"
#include "util/errbuf.h"
#include "server/sched/sched.h"
#include "server/serve/serve_int.h"
#include "server/srv.h"
#include "base/banned.h"

static const char *const state_names[] = {
#define SERVE_REPLICA_NAME(name, text) [SERVE_##name] = text,
    SERVE_REPLICA_STATES(SERVE_REPLICA_NAME)
#undef SERVE_REPLICA_NAME
};

const char *serve_replica_state_name(enum serve_replica_state st)
{
    return (unsigned)st < SERVE_NSTATES ? state_names[st] : "unknown";
}

void serve_init(struct serve *sv, pthread_mutex_t *lock)
{
    memset(sv, 0, sizeof(*sv));
    sv->lock = lock;
}

static void service_free(struct serve_service *svc)
{
    if (!svc)
        return;
    free(svc->name);
    free(svc->v);
    free(svc->as);
    free(svc->latency);
    free(svc);
}

static void router_clear(struct serve_router *r)
{
    for (size_t k = 0; k < r->nloads; k++) {
        free(r->loads[k].service);
        free(r->loads[k].replicas);
    }
    free(r->loads);
    r->loads = NULL;
    r->nloads = 0;
}

void serve_release(struct serve *sv)
{
    for (size_t k = 0; k < sv->n; k++)
        service_free(sv->v[k]);
    free(sv->v);
    for (size_t k = 0; k < sv->nrouters; k++) {
        router_clear(&sv->routers[k]);
        free(sv->routers[k].name);
    }
    free(sv->routers);
    memset(sv, 0, sizeof(*sv));
}

/* ---- records ------------------------------------------------------------------ */

struct serve_service *serve_service_get(struct serve *sv, const char *name, bool create,
                                        int64_t now_ms)
{
    size_t at = 0;
    while (at < sv->n && strcmp(sv->v[at]->name, name) < 0)
        at++;
    if (at < sv->n && strcmp(sv->v[at]->name, name) == 0)
        return sv->v[at];
    if (!create || vec_grow((void **)&sv->v, &sv->cap, sv->n + 1, sizeof(struct serve_service *)))
        return NULL;
    struct serve_service *svc = calloc(1, sizeof(*svc));
    if (svc) {
        svc->name = strdup(name);
        svc->as = malloc(sizeof(*svc->as));
    }
    if (!svc || !svc->name || !svc->as) {
        service_free(svc);
        return NULL;
    }
    autoscale_state_init(svc->as, now_ms);
    svc->next_replica = 1;
    svc->metric_milli = PROTO_NONE;
    memmove(sv->v + at + 1, sv->v + at, (sv->n - at) * sizeof(struct serve_service *));
    sv->v[at] = svc;
    sv->n++;
    return svc;
}

void serve_service_drop(struct serve *sv, size_t k)
{
    service_free(sv->v[k]);
    memmove(sv->v + k, sv->v + k + 1, (sv->n - k - 1) * sizeof(struct serve_service *));
    sv->n--;
}

struct serve_replica *serve_replica_find(const struct serve *sv, int64_t job,
                                         struct serve_service **ret_svc)
{
    for (size_t k = 0; k < sv->n; k++)
        for (size_t r = 0; r < sv->v[k]->n; r++)
            if (sv->v[k]->v[r].job == job) {
                if (ret_svc)
                    *ret_svc = sv->v[k];
                return &sv->v[k]->v[r];
            }
    return NULL;
}

int serve_replica_add(struct serve_service *svc, const struct serve_replica *r)
{
    if (vec_grow((void **)&svc->v, &svc->cap, svc->n + 1, sizeof(*svc->v)))
        return GPO_ENOMEM;
    svc->v[svc->n++] = *r;
    if (r->replica >= svc->next_replica)
        svc->next_replica = r->replica + 1;
    return 0;
}

void serve_failed(struct serve_service *svc, int64_t now_ms, const char *why)
{
    struct serve_backoff *b = &svc->backoff;
    b->failures++;
    int64_t ms = serve_backoff_ms(b->failures);
    b->until_ms = now_ms + ms;
    snprintf(b->reason, sizeof(b->reason), "crash loop: %u failures in a row, the last: %.120s",
             b->failures, why && *why ? why : "failed");
}

int serve_load(struct server *s, char *err, size_t errlen)
{
    struct serve *sv = s->serve;
    int64_t now = srv_now_ms(s);
    for (size_t k = 0; k < s->jobs.n; k++) {
        const struct job *j = s->jobs.v[k];
        if (!j->spec.serve.service || job_state_final(j->state))
            continue;
        struct serve_service *svc = serve_service_get(sv, j->spec.serve.service, true, now);
        struct serve_replica r = {.job = j->id,
                                  .replica = j->spec.serve.replica,
                                  .generation = j->spec.serve.generation,
                                  .state = SERVE_STARTING,
                                  .metric_milli = PROTO_NONE};
        if (!svc || serve_replica_add(svc, &r))
            return errbuf_set(err, errlen, GPO_ENOMEM, "serving replicas: out of memory");
    }
    return 0;
}

/* ---- reports -------------------------------------------------------------------- */

void serve_endpoint(struct server *s, const struct job *j, const char *node,
                    const struct proto_endpoint *ep, int64_t now_ms)
{
    struct serve_service *svc = NULL;
    struct serve_replica *r = serve_replica_find(s->serve, j->id, &svc);
    if (!r || !ep->port)
        return;
    bool moved = r->port != ep->port || strcmp(r->node, node) != 0 || r->attempt != j->att.n;
    r->attempt = j->att.n;
    r->port = ep->port;
    snprintf(r->node, sizeof(r->node), "%s", node);
    r->metric_milli = ep->metric_milli;
    if (ep->ready && r->state == SERVE_STARTING) {
        r->state = SERVE_READY;
        r->ready_ms = now_ms;
        int64_t ready = ep->ready_ms != PROTO_NONE ? ep->ready_ms : now_ms;
        if (j->att.start_ms > 0 && ready > j->att.start_ms)
            autoscale_startup(svc->as, ready - j->att.start_ms);
        moved = true;
    } else if (!ep->ready && r->state == SERVE_READY) {
        /* Ready once, failing its probe now: out of the table, replaced. */
        r->state = SERVE_FAILED;
        r->drain_ms = now_ms;
        serve_failed(svc, now_ms, "replica not ready after being ready (its probe fails)");
        moved = true;
        s->serve->urgent = true;
        sched_wake(s->sched, SCHED_WHY_SERVE);
    }
    if (moved && r->state != SERVE_STARTING)
        serve_routes_changed(s);
}

/* The record of router `name`: its own, else one whose router has been
 * silent for SERVE_ROUTER_FORGET_MS (reused, so that routers that come and
 * go under new names do not grow the list), else a new one. */
static struct serve_router *router_get(struct serve *sv, const char *name, int64_t now_ms)
{
    struct serve_router *stale = NULL;
    for (size_t k = 0; k < sv->nrouters; k++) {
        if (strcmp(sv->routers[k].name, name) == 0)
            return &sv->routers[k];
        if (!stale && now_ms - sv->routers[k].at_ms >= SERVE_ROUTER_FORGET_MS)
            stale = &sv->routers[k];
    }
    if (stale) {
        char *copy = strdup(name);
        if (!copy)
            return NULL;
        router_clear(stale);
        free(stale->name);
        stale->name = copy;
        return stale;
    }
    if (vec_grow((void **)&sv->routers, &sv->routers_cap, sv->nrouters + 1, sizeof(*sv->routers)))
        return NULL;
    struct serve_router *r = &sv->routers[sv->nrouters];
    memset(r, 0, sizeof(*r));
    if (!(r->name = strdup(name)))
        return NULL;
    sv->nrouters++;
    return r;
}

/* Copies one service's load out of a report into *l (zeroed). */
static int load_copy(const struct proto_load_service *in, struct serve_load *l)
{
    l->concurrency_milli = in->concurrency_milli;
    l->inflight = in->inflight;
    l->queued = in->queued;
    l->requests = in->requests;
    if (!(l->service = strdup(in->name)))
        return GPO_ENOMEM;
    if (in->nreplicas && !(l->replicas = calloc(in->nreplicas, sizeof(*l->replicas))))
        return GPO_ENOMEM;
    for (size_t k = 0; k < in->nreplicas; k++)
        l->replicas[k] = (struct serve_load_replica){in->replicas[k].job, in->replicas[k].inflight};
    l->nreplicas = in->nreplicas;
    return 0;
}

/* Whether service `name` has no replica that takes requests. */
static bool at_zero(const struct serve *sv, const char *name)
{
    const struct serve_service *svc = serve_service_get((struct serve *)sv, name, false, 0);
    for (size_t k = 0; svc && k < svc->n; k++)
        if (svc->v[k].state == SERVE_READY)
            return false;
    return true;
}

/* A report's answers by latency into its service's window (a service this
 * controller does not run: ignored). */
static int latency_add(struct serve *sv, const struct proto_load_service *in, int64_t now_ms)
{
    struct serve_service *svc = in->has_latency ? serve_service_get(sv, in->name, false, 0) : NULL;
    if (!svc)
        return 0;
    if (!svc->latency && !(svc->latency = calloc(1, sizeof(*svc->latency))))
        return GPO_ENOMEM;
    int64_t sec = now_ms / 1000 + 1; /* + 1: slot time 0 means empty */
    size_t slot = (size_t)(sec % SERVE_LATENCY_WINDOW_S);
    struct serve_latency *l = svc->latency;
    if (l->at_s[slot] != sec) {
        l->at_s[slot] = sec;
        memset(l->counts[slot], 0, sizeof(l->counts[slot]));
    }
    for (size_t b = 0; b < PROTO_LATENCY_BUCKETS; b++)
        l->counts[slot][b] += in->latency[b];
    return 0;
}

int serve_router_report(struct server *s, const struct proto_router_report *rep, int64_t now_ms)
{
    struct serve *sv = s->serve;
    struct serve_router *r = router_get(sv, rep->router, now_ms);
    if (!r)
        return GPO_ENOMEM;
    /* A queue that was empty in this router's last report and is not now. */
    bool wake = false;
    for (size_t k = 0; k < rep->nservices; k++) {
        const struct proto_load_service *in = &rep->services[k];
        if (!in->queued || !at_zero(sv, in->name))
            continue;
        bool was = false;
        for (size_t p = 0; p < r->nloads && !was; p++)
            was = strcmp(r->loads[p].service, in->name) == 0 && r->loads[p].queued > 0 &&
                  now_ms - r->at_ms < SERVE_REPORT_TTL_MS;
        wake |= !was;
    }
    router_clear(r);
    r->at_ms = now_ms;
    r->interval_ms = rep->interval_ms > 0 ? rep->interval_ms : 1000;
    int rc = 0;
    if (rep->nservices && !(r->loads = calloc(rep->nservices, sizeof(*r->loads))))
        rc = GPO_ENOMEM;
    for (size_t k = 0; !rc && k < rep->nservices; k++) {
        rc = load_copy(&rep->services[k], &r->loads[k]);
        r->nloads = k + 1;
    }
    for (size_t k = 0; !rc && k < rep->nservices; k++)
        rc = latency_add(sv, &rep->services[k], now_ms);
    if (wake) {
        sv->urgent = true;
        sched_wake(s->sched, SCHED_WHY_SERVE);
    }
    return rc;
}

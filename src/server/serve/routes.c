/*
 * routes.c - the routing table the routers long-poll (serve.h): every
 * service with its ready and draining endpoints, its revision, and the
 * suspended long-polls waiting for it to move.
 */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/sched/sched.h"
#include "server/serve/serve_int.h"
#include "server/srv.h"
#include "base/banned.h"

struct serve_waiter {
    struct http_request *req;
    struct serve_waiter *next;
};

/* Where the controller reaches node `name`'s agent: the routers reach its
 * replicas there too. */
static const char *node_addr(const struct server *s, const char *name)
{
    const struct cluster_node *n = cluster_node_get(&s->cluster, name);
    return n && n->addr ? n->addr : name;
}

/* Service c's entry, its strings borrowed: the ready and draining
 * endpoints. 0 or GPO_ENOMEM. */
static int service_fill(struct server *s, const struct cluster_service *c,
                        struct proto_route_service *o)
{
    const struct serve_service *svc = serve_service_get(s->serve, c->name, false, 0);
    *o = (struct proto_route_service){.name = c->name,
                                      .model = c->replica.model ? c->replica.model : c->name,
                                      .hosts = c->hosts,
                                      .nhosts = c->nhosts,
                                      .key_hashes = c->key_hashes,
                                      .nkeys = c->nkeys,
                                      .concurrency_limit = c->concurrency_limit,
                                      .queue_limit = c->queue_limit,
                                      .queue_timeout_ms = c->queue_timeout_ms};
    if (!svc || !svc->n)
        return 0;
    if (!(o->endpoints = calloc(svc->n, sizeof(*o->endpoints))))
        return GPO_ENOMEM;
    for (size_t k = 0; k < svc->n; k++) {
        const struct serve_replica *r = &svc->v[k];
        if ((r->state != SERVE_READY && r->state != SERVE_DRAINING) || !r->port || !r->node[0])
            continue;
        o->endpoints[o->nendpoints++] = (struct proto_route_endpoint){
            .replica = r->replica,
            .job = r->job,
            .attempt = r->attempt,
            .addr = (char *)node_addr(s, r->node),
            .port = r->port,
            .state = r->state == SERVE_READY ? PROTO_ENDPOINT_READY : PROTO_ENDPOINT_DRAINING};
    }
    return 0;
}

json_t *serve_routes_json(struct server *s)
{
    size_t n = s->cluster.nservices;
    struct proto_routes m = {.rev = s->serve->rev, .nservices = n};
    int rc = n && !(m.services = calloc(n, sizeof(*m.services))) ? GPO_ENOMEM : 0;
    for (size_t k = 0; !rc && k < n; k++)
        rc = service_fill(s, &s->cluster.services[k], &m.services[k]);
    json_t *o = NULL;
    if (!rc && proto_routes_encode(&m, &o) != 0)
        o = NULL;
    for (size_t k = 0; m.services && k < n; k++)
        free(m.services[k].endpoints);
    free(m.services);
    return o;
}

static void answer(struct server *s, struct serve_waiter *w)
{
    json_t *o = serve_routes_json(s);
    if (o)
        http_request_complete(w->req, 200, o);
    else
        http_request_complete_error(w->req, 500, "internal", "out of memory");
    free(w);
}

void serve_service_changed(struct server *s)
{
    s->serve->urgent = true;
    sched_wake(s->sched, SCHED_WHY_SERVE);
    serve_routes_changed(s);
}

void serve_routes_changed(struct server *s)
{
    struct serve *sv = s->serve;
    sv->rev++;
    struct serve_waiter *w = sv->waiters;
    sv->waiters = NULL;
    while (w) {
        struct serve_waiter *next = w->next;
        answer(s, w);
        w = next;
    }
}

/* http_timeout_fn (ctx: the server): nothing moved within the wait; the
 * same revision, unless a change answered first (the waiter is found by its
 * request: a change may have freed it while the timer was on its way). */
// cppcheck-suppress constParameter ; an http_timeout_fn: the signature is the callback's
static void waiter_timeout(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    pthread_mutex_lock(s->serve->lock);
    for (struct serve_waiter **p = &s->serve->waiters; *p; p = &(*p)->next)
        if ((*p)->req == req) {
            struct serve_waiter *w = *p;
            *p = w->next;
            answer(s, w);
            break;
        }
    pthread_mutex_unlock(s->serve->lock);
}

int serve_routes_wait(struct server *s, struct http_request *req, unsigned wait_ms)
{
    struct serve_waiter *w = calloc(1, sizeof(*w));
    if (!w)
        return GPO_ENOMEM;
    int rc = http_request_suspend(req, wait_ms, waiter_timeout, s);
    if (rc) {
        free(w);
        return rc;
    }
    *w = (struct serve_waiter){.req = req, .next = s->serve->waiters};
    s->serve->waiters = w;
    return 0;
}

void serve_release_waiters(struct server *s)
{
    pthread_mutex_lock(s->serve->lock);
    struct serve_waiter *w = s->serve->waiters;
    s->serve->waiters = NULL;
    while (w) {
        struct serve_waiter *next = w->next;
        http_request_complete_error(w->req, 503, "unavailable", "the server is stopping");
        free(w);
        w = next;
    }
    pthread_mutex_unlock(s->serve->lock);
}

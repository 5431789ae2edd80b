/*
 * routes.c - the routing table the routers long-poll (serve.h): every
 * service with its ready and draining endpoints, its revision, and the
 * suspended long-polls waiting for it to move.
 */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/serve/serve_int.h"
#include "server/srv.h"
#include "base/banned.h"

struct serve_waiter {
    struct http_request *req;
    struct serve_waiter *next;
};

static json_t *strings_json(char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t k = 0; a && k < n; k++)
        if (json_array_append_new(a, json_string(v[k]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* Where the controller reaches node `name`'s agent: the routers reach its
 * replicas there too. */
static const char *node_addr(const struct server *s, const char *name)
{
    const struct cluster_node *n = cluster_node_get(&s->cluster, name);
    return n && n->addr ? n->addr : name;
}

static json_t *endpoints_json(const struct server *s, const struct serve_service *svc)
{
    json_t *a = json_array();
    for (size_t k = 0; a && svc && k < svc->n; k++) {
        const struct serve_replica *r = &svc->v[k];
        if ((r->state != SERVE_READY && r->state != SERVE_DRAINING) || !r->port || !r->node[0])
            continue;
        json_t *o = json_pack("{s:I, s:I, s:I, s:s, s:I, s:s}", "replica", (json_int_t)r->replica,
                              "job", (json_int_t)r->job, "attempt", (json_int_t)r->attempt, "addr",
                              node_addr(s, r->node), "port", (json_int_t)r->port, "state",
                              r->state == SERVE_READY ? "ready" : "draining");
        if (!o || json_array_append_new(a, o)) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static json_t *service_json(struct server *s, const struct cluster_service *c)
{
    const struct serve_service *svc = serve_service_get(s->serve, c->name, false, 0);
    const char *model = c->replica.model ? c->replica.model : c->name;
    return json_pack("{s:s, s:s, s:o*, s:o*, s:I, s:I, s:I, s:o*}", "name", c->name, "model", model,
                     "hosts", strings_json(c->hosts, c->nhosts), "key_hashes",
                     strings_json(c->key_hashes, c->nkeys), "concurrency_limit",
                     (json_int_t)c->concurrency_limit, "queue_limit", (json_int_t)c->queue_limit,
                     "queue_timeout_ms", (json_int_t)c->queue_timeout_ms, "endpoints",
                     endpoints_json(s, svc));
}

json_t *serve_routes_json(struct server *s)
{
    json_t *services = json_array();
    for (size_t k = 0; services && k < s->cluster.nservices; k++) {
        json_t *o = service_json(s, &s->cluster.services[k]);
        if (!o || json_array_append_new(services, o)) {
            json_decref(services);
            return NULL;
        }
    }
    return services
               ? json_pack("{s:I, s:o}", "rev", (json_int_t)s->serve->rev, "services", services)
               : NULL;
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

/*
 * router.c - the controller-router messages (proto.h): the routing table a
 * router long-polls, and the load it reports every second.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/wire.h"
#include "util/errbuf.h"
#include "base/banned.h"

_Static_assert(sizeof(enum proto_endpoint_state) == sizeof(int), "jsonv stores an enum as an int");

#define QUEUE_LIMIT_MAX       100000
#define QUEUE_TIMEOUT_MAX     3600000
#define QUEUE_LIMIT_DEFAULT   1000
#define QUEUE_TIMEOUT_DEFAULT 60000
#define CONCURRENCY_MAX       1e9 /* a service's mean in flight + held */

const double proto_latency_bounds_s[PROTO_LATENCY_BUCKETS - 1] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

static const char *const endpoint_states[] = {
    [PROTO_ENDPOINT_READY] = "ready",
    [PROTO_ENDPOINT_DRAINING] = "draining",
    NULL,
};

/* ---- the routing table ---- */

static const struct jsonv_field endpoint_fields[] = {
    WIRE_REQ("replica", JSONV_UINT32, struct proto_route_endpoint, replica, 1, UINT32_MAX),
    WIRE_REQ("job", JSONV_INT64, struct proto_route_endpoint, job, 1, INT64_MAX),
    WIRE_REQ("attempt", JSONV_INT64, struct proto_route_endpoint, attempt, 1, UINT32_MAX),
    WIRE_REQ_LINE("addr", struct proto_route_endpoint, addr, 1, PROTO_HOST_MAX),
    WIRE_REQ("port", JSONV_UINT32, struct proto_route_endpoint, port, 1, 65535),
    WIRE_OPT("state", JSONV_ENUM, struct proto_route_endpoint, state, 0, 0,
             .choices = endpoint_states),
};

static const struct jsonv_field service_fields[] = {
    WIRE_REQ_LINE("name", struct proto_route_service, name, 1, PROTO_SPEC_NAME_MAX),
    WIRE_OPT("model", JSONV_STRING, struct proto_route_service, model, 1, PROTO_SPEC_NAME_MAX,
             .flags = JSONV_TEXT | JSONV_NULLABLE),
    WIRE_OPT("hosts", JSONV_STRINGS, struct proto_route_service, hosts, 1, PROTO_HOST_MAX,
             .flags = JSONV_TEXT, .max_items = PROTO_ROUTE_HOSTS_MAX,
             .count_offset = offsetof(struct proto_route_service, nhosts)),
    WIRE_OPT("key_hashes", JSONV_STRINGS, struct proto_route_service, key_hashes,
             PROTO_KEY_HASH_LEN, PROTO_KEY_HASH_LEN, .flags = JSONV_TEXT,
             .max_items = PROTO_ROUTE_KEYS_MAX,
             .count_offset = offsetof(struct proto_route_service, nkeys)),
    WIRE_OPT("concurrency_limit", JSONV_UINT32, struct proto_route_service, concurrency_limit, 0,
             UINT32_MAX),
    WIRE_OPT("queue_limit", JSONV_UINT32, struct proto_route_service, queue_limit, 0,
             QUEUE_LIMIT_MAX),
    WIRE_OPT("queue_timeout_ms", JSONV_INT64, struct proto_route_service, queue_timeout_ms, 1,
             QUEUE_TIMEOUT_MAX),
    WIRE_OPT("endpoints", JSONV_OBJECTS, struct proto_route_service, endpoints, 0, 0,
             .max_items = PROTO_ROUTE_ENDPOINTS_MAX,
             .count_offset = offsetof(struct proto_route_service, nendpoints),
             .elem_size = sizeof(struct proto_route_endpoint), .sub = endpoint_fields,
             .nsub = ARRAY_LEN(endpoint_fields)),
};

static const struct jsonv_field routes_fields[] = {
    WIRE_REQ("rev", JSONV_INT64, struct proto_routes, rev, 0, INT64_MAX),
    WIRE_REQ("services", JSONV_OBJECTS, struct proto_routes, services, 0, 0,
             .max_items = PROTO_ROUTE_SERVICES_MAX,
             .count_offset = offsetof(struct proto_routes, nservices),
             .elem_size = sizeof(struct proto_route_service), .sub = service_fields,
             .nsub = ARRAY_LEN(service_fields)),
};

static bool is_hex(const char *s)
{
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return false;
    return true;
}

/* What the table cannot say: a key hash is lowercase hex, a service's name
 * names one service. */
static int routes_check(const struct proto_routes *m, char *err, size_t errlen)
{
    for (size_t i = 0; i < m->nservices; i++) {
        const struct proto_route_service *s = &m->services[i];
        for (size_t k = 0; k < s->nkeys; k++)
            if (!is_hex(s->key_hashes[k]))
                return errbuf_set(err, errlen, GPO_EINVAL,
                                  "field 'services[%zu].key_hashes[%zu]': expected %d lowercase "
                                  "hex digits (SHA-256)",
                                  i, k, PROTO_KEY_HASH_LEN);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(m->services[j].name, s->name)) {
                char q[JSONV_QUOTE_MAX + 4];
                return errbuf_set(err, errlen, GPO_EINVAL,
                                  "field 'services[%zu].name': '%s' is also services[%zu]'s", i,
                                  jsonv_quote(s->name, strlen(s->name), q), j);
            }
    }
    return 0;
}

/* Absent lists become empty NULL-terminated ones, an absent model the
 * service's name. */
static int routes_fill(struct proto_routes *m)
{
    for (size_t i = 0; i < m->nservices; i++) {
        struct proto_route_service *s = &m->services[i];
        if (!s->model && !(s->model = strdup(s->name)))
            return GPO_ENOMEM;
        if (!s->hosts && !(s->hosts = calloc(1, sizeof(*s->hosts))))
            return GPO_ENOMEM;
        if (!s->key_hashes && !(s->key_hashes = calloc(1, sizeof(*s->key_hashes))))
            return GPO_ENOMEM;
    }
    return 0;
}

int proto_routes_decode(const json_t *obj, struct proto_routes *ret, char *err, size_t errlen)
{
    struct proto_routes m = {0};
    int rc = jsonv_decode(obj, routes_fields, ARRAY_LEN(routes_fields), &m, err, errlen);
    if (rc)
        return rc;
    /* jsonv zeroes elements; absent queue bounds take their defaults. */
    const json_t *list = json_object_get(obj, "services");
    for (size_t i = 0; i < m.nservices; i++) {
        const json_t *o = json_array_get(list, i);
        if (!json_object_get(o, "queue_limit"))
            m.services[i].queue_limit = QUEUE_LIMIT_DEFAULT;
        if (!json_object_get(o, "queue_timeout_ms"))
            m.services[i].queue_timeout_ms = QUEUE_TIMEOUT_DEFAULT;
    }
    rc = routes_check(&m, err, errlen);
    if (!rc && (rc = routes_fill(&m)))
        errbuf_set(err, errlen, rc, "out of memory");
    if (rc) {
        jsonv_release(routes_fields, ARRAY_LEN(routes_fields), &m);
        return rc;
    }
    *ret = m;
    return 0;
}

void proto_routes_release(struct proto_routes *m)
{
    if (!m)
        return;
    jsonv_release(routes_fields, ARRAY_LEN(routes_fields), m);
    memset(m, 0, sizeof(*m));
}

/* A list of n elements of `size` bytes from v, each encoded by one. */
typedef json_t *elem_json_fn(struct wire_enc *e, const void *elem);
static json_t *list_json(struct wire_enc *e, const void *v, size_t n, size_t size,
                         elem_json_fn *one)
{
    json_t *a = e->rc ? NULL : json_array();
    if (!e->rc && !a)
        wire_fail(e, GPO_ENOMEM);
    for (size_t k = 0; a && !e->rc && k < n; k++)
        wire_append(e, a, one(e, (const char *)v + k * size));
    return a;
}

static json_t *endpoint_json(struct wire_enc *e, const void *elem)
{
    const struct proto_route_endpoint *p = elem;
    json_t *o = wire_object(e);
    if ((unsigned)p->state >= ARRAY_LEN(endpoint_states) - 1)
        wire_fail(e, GPO_EINVAL);
    wire_set(e, o, "replica", wire_int(e, p->replica));
    wire_set(e, o, "job", wire_int(e, p->job));
    wire_set(e, o, "attempt", wire_int(e, p->attempt));
    wire_set(e, o, "addr", wire_str(e, p->addr));
    wire_set(e, o, "port", wire_int(e, p->port));
    if (!e->rc)
        wire_set(e, o, "state", wire_str(e, endpoint_states[p->state]));
    return o;
}

static json_t *service_json(struct wire_enc *e, const void *elem)
{
    const struct proto_route_service *s = elem;
    json_t *o = wire_object(e);
    wire_set(e, o, "name", wire_str(e, s->name));
    wire_set(e, o, "model", wire_str(e, s->model ? s->model : s->name));
    wire_set(e, o, "hosts", wire_strs(e, s->hosts, s->nhosts));
    wire_set(e, o, "key_hashes", wire_strs(e, s->key_hashes, s->nkeys));
    wire_set(e, o, "concurrency_limit", wire_int(e, s->concurrency_limit));
    wire_set(e, o, "queue_limit", wire_int(e, s->queue_limit));
    wire_set(e, o, "queue_timeout_ms", wire_int(e, s->queue_timeout_ms));
    wire_set(e, o, "endpoints",
             list_json(e, s->endpoints, s->nendpoints, sizeof(*s->endpoints), endpoint_json));
    return o;
}

int proto_routes_encode(const struct proto_routes *m, json_t **ret)
{
    struct wire_enc e = {0};
    json_t *o = wire_object(&e);
    wire_set(&e, o, "rev", wire_int(&e, m->rev));
    wire_set(&e, o, "services",
             list_json(&e, m->services, m->nservices, sizeof(*m->services), service_json));
    return wire_done(&e, o, ret);
}

/* ---- the router's report ---- */

struct load_wire {
    char *name;
    double concurrency;
    uint32_t inflight, queued, requests;
    json_t *latency; /* borrowed: checked by latency_decode */
    struct proto_load_replica *replicas;
    size_t nreplicas;
};

struct report_wire {
    char *router;
    int64_t interval_ms;
    struct load_wire *services;
    size_t nservices;
};

static const struct jsonv_field replica_fields[] = {
    WIRE_REQ("job", JSONV_INT64, struct proto_load_replica, job, 1, INT64_MAX),
    WIRE_REQ("attempt", JSONV_INT64, struct proto_load_replica, attempt, 1, UINT32_MAX),
    WIRE_REQ("inflight", JSONV_UINT32, struct proto_load_replica, inflight, 0, UINT32_MAX),
    WIRE_REQ("requests", JSONV_UINT32, struct proto_load_replica, requests, 0, UINT32_MAX),
};

static const struct jsonv_field load_fields[] = {
    WIRE_REQ_LINE("name", struct load_wire, name, 1, PROTO_SPEC_NAME_MAX),
    WIRE_REQ("concurrency", JSONV_DOUBLE, struct load_wire, concurrency, 0, 0, .dmin = 0,
             .dmax = CONCURRENCY_MAX),
    WIRE_REQ("inflight", JSONV_UINT32, struct load_wire, inflight, 0, UINT32_MAX),
    WIRE_REQ("queued", JSONV_UINT32, struct load_wire, queued, 0, UINT32_MAX),
    WIRE_REQ("requests", JSONV_UINT32, struct load_wire, requests, 0, UINT32_MAX),
    WIRE_OPT("latency_counts", JSONV_RAW, struct load_wire, latency, 0, 0),
    WIRE_OPT("replicas", JSONV_OBJECTS, struct load_wire, replicas, 0, 0,
             .max_items = PROTO_ROUTE_ENDPOINTS_MAX,
             .count_offset = offsetof(struct load_wire, nreplicas),
             .elem_size = sizeof(struct proto_load_replica), .sub = replica_fields,
             .nsub = ARRAY_LEN(replica_fields)),
};

static const struct jsonv_field report_fields[] = {
    WIRE_REQ_LINE("router", struct report_wire, router, 1, PROTO_HOST_MAX),
    WIRE_REQ("interval_ms", JSONV_INT64, struct report_wire, interval_ms, 1, 60000),
    WIRE_REQ("services", JSONV_OBJECTS, struct report_wire, services, 0, 0,
             .max_items = PROTO_ROUTE_SERVICES_MAX,
             .count_offset = offsetof(struct report_wire, nservices),
             .elem_size = sizeof(struct load_wire), .sub = load_fields,
             .nsub = ARRAY_LEN(load_fields)),
};

/* "latency_counts" into m (absent: none). 0, or GPO_EINVAL. */
static int latency_decode(const json_t *a, struct proto_load_service *m)
{
    m->has_latency = false;
    if (!a)
        return 0;
    if (!json_is_array(a) || json_array_size(a) != PROTO_LATENCY_BUCKETS)
        return GPO_EINVAL;
    for (size_t k = 0; k < PROTO_LATENCY_BUCKETS; k++) {
        const json_t *n = json_array_get(a, k);
        if (!json_is_integer(n) || json_integer_value(n) < 0 ||
            json_integer_value(n) > (json_int_t)UINT32_MAX)
            return GPO_EINVAL;
        m->latency[k] = (uint32_t)json_integer_value(n);
    }
    m->has_latency = true;
    return 0;
}

int proto_router_report_decode(const json_t *obj, struct proto_router_report *ret, char *err,
                               size_t errlen)
{
    struct report_wire w = {0};
    int rc = jsonv_decode(obj, report_fields, ARRAY_LEN(report_fields), &w, err, errlen);
    if (rc)
        return rc;
    struct proto_load_service *v = calloc(w.nservices ? w.nservices : 1, sizeof(*v));
    if (!v) {
        jsonv_release(report_fields, ARRAY_LEN(report_fields), &w);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < w.nservices; i++) {
        if (latency_decode(w.services[i].latency, &v[i]) != 0) {
            errbuf_set(err, errlen, GPO_EINVAL,
                       "field 'services[%zu].latency_counts': expected an array of %d whole "
                       "numbers 0..%u",
                       i, PROTO_LATENCY_BUCKETS, UINT32_MAX);
            free(v);
            jsonv_release(report_fields, ARRAY_LEN(report_fields), &w);
            return GPO_EINVAL;
        }
    }
    for (size_t i = 0; i < w.nservices; i++) {
        struct load_wire *l = &w.services[i];
        bool has = v[i].has_latency;
        uint32_t lat[PROTO_LATENCY_BUCKETS];
        memcpy(lat, v[i].latency, sizeof(lat));
        v[i] = (struct proto_load_service){.name = l->name,
                                           .concurrency_milli = llround(l->concurrency * 1000),
                                           .inflight = l->inflight,
                                           .queued = l->queued,
                                           .requests = l->requests,
                                           .replicas = l->replicas,
                                           .nreplicas = l->nreplicas,
                                           .has_latency = has};
        memcpy(v[i].latency, lat, sizeof(lat));
        l->name = NULL;
        l->replicas = NULL;
        l->nreplicas = 0;
    }
    *ret = (struct proto_router_report){
        .router = w.router, .interval_ms = w.interval_ms, .services = v, .nservices = w.nservices};
    w.router = NULL;
    jsonv_release(report_fields, ARRAY_LEN(report_fields), &w);
    return 0;
}

void proto_router_report_release(struct proto_router_report *m)
{
    if (!m)
        return;
    for (size_t i = 0; m->services && i < m->nservices; i++) {
        free(m->services[i].name);
        free(m->services[i].replicas);
    }
    free(m->services);
    free(m->router);
    memset(m, 0, sizeof(*m));
}

static json_t *replica_json(struct wire_enc *e, const void *elem)
{
    const struct proto_load_replica *r = elem;
    json_t *o = wire_object(e);
    wire_set(e, o, "job", wire_int(e, r->job));
    wire_set(e, o, "attempt", wire_int(e, r->attempt));
    wire_set(e, o, "inflight", wire_int(e, r->inflight));
    wire_set(e, o, "requests", wire_int(e, r->requests));
    return o;
}

static json_t *load_json(struct wire_enc *e, const void *elem)
{
    const struct proto_load_service *s = elem;
    json_t *o = wire_object(e);
    wire_set(e, o, "name", wire_str(e, s->name));
    json_t *c = e->rc ? NULL : json_real((double)s->concurrency_milli / 1000.0);
    if (!e->rc && !c)
        wire_fail(e, GPO_ENOMEM);
    wire_set(e, o, "concurrency", c);
    wire_set(e, o, "inflight", wire_int(e, s->inflight));
    wire_set(e, o, "queued", wire_int(e, s->queued));
    wire_set(e, o, "requests", wire_int(e, s->requests));
    if (s->has_latency) {
        json_t *a = e->rc ? NULL : json_array();
        if (!e->rc && !a)
            wire_fail(e, GPO_ENOMEM);
        for (size_t k = 0; a && k < PROTO_LATENCY_BUCKETS; k++)
            wire_append(e, a, wire_int(e, s->latency[k]));
        wire_set(e, o, "latency_counts", a);
    }
    wire_set(e, o, "replicas",
             list_json(e, s->replicas, s->nreplicas, sizeof(*s->replicas), replica_json));
    return o;
}

int proto_router_report_encode(const struct proto_router_report *m, json_t **ret)
{
    struct wire_enc e = {0};
    json_t *o = wire_object(&e);
    wire_set(&e, o, "router", wire_str(&e, m->router));
    wire_set(&e, o, "interval_ms", wire_int(&e, m->interval_ms));
    wire_set(&e, o, "services",
             list_json(&e, m->services, m->nservices, sizeof(*m->services), load_json));
    return wire_done(&e, o, ret);
}

/*
 * status.c - what people see of a service's runtime (serve.h): the "status"
 * of GET /v1/services[/NAME] and the service families of GET /metrics.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/cost/cost.h"
#include "server/serve/serve_int.h"
#include "server/srv.h"
#include "util/prom.h"
#include "base/banned.h"

static json_t *milli_json(int64_t v)
{
    return v == PROTO_NONE ? json_null() : json_real((double)v / 1000.0);
}

/* The q-quantile (0..1) of n answers by bucket, interpolated within its
 * bucket as Prometheus' histogram_quantile does; above the last bound it is
 * that bound. */
static double bucket_quantile(const uint64_t *counts, uint64_t n, double q)
{
    double rank = q * (double)n;
    uint64_t below = 0;
    for (size_t b = 0; b < PROTO_LATENCY_BUCKETS; b++) {
        if (b == PROTO_LATENCY_BUCKETS - 1)
            return proto_latency_bounds_s[b - 1];
        if ((double)(below + counts[b]) >= rank && counts[b]) {
            double lo = b ? proto_latency_bounds_s[b - 1] : 0;
            double hi = proto_latency_bounds_s[b];
            return lo + (hi - lo) * (rank - (double)below) / (double)counts[b];
        }
        below += counts[b];
    }
    return 0;
}

/* The answers of the last minute by bucket (counts) and their number. */
static uint64_t latency_counts(const struct serve_service *svc, int64_t now_ms,
                               uint64_t counts[PROTO_LATENCY_BUCKETS])
{
    uint64_t n = 0;
    const struct serve_latency *l = svc ? svc->latency : NULL;
    int64_t sec = now_ms / 1000 + 1; /* as serve.c's latency_add counts */
    for (size_t k = 0; l && k < SERVE_LATENCY_WINDOW_S; k++) {
        if (!l->at_s[k] || sec - l->at_s[k] >= SERVE_LATENCY_WINDOW_S)
            continue;
        for (size_t b = 0; b < PROTO_LATENCY_BUCKETS; b++) {
            counts[b] += l->counts[k][b];
            n += l->counts[k][b];
        }
    }
    return n;
}

/* "latency": the answers of the last minute, or null when there were none. */
static json_t *latency_json(const struct serve_service *svc, int64_t now_ms)
{
    uint64_t counts[PROTO_LATENCY_BUCKETS] = {0};
    uint64_t n = latency_counts(svc, now_ms, counts);
    if (!n)
        return json_null();
    return json_pack("{s:i, s:I, s:f, s:f}", "window_s", SERVE_LATENCY_WINDOW_S, "requests",
                     (json_int_t)n, "p50_s", bucket_quantile(counts, n, 0.5), "p99_s",
                     bucket_quantile(counts, n, 0.99));
}

static json_t *gpus_json(const struct job *j)
{
    json_t *a = json_array();
    for (size_t k = 0; a && j && k < j->att.nshares; k++)
        json_array_append_new(a, json_string(j->att.shares[k].uuid));
    return a;
}

/* One replica as "status.replicas" lists it. */
static json_t *replica_json(const struct server *s, const struct serve_replica *r)
{
    const struct job *j = jobs_find(&s->jobs, r->job);
    const struct cluster_node *n = r->node[0] ? cluster_node_get(&s->cluster, r->node) : NULL;
    const char *node = r->node[0] ? r->node : j && j->att.nparts ? j->att.parts[0].node : NULL;
    const char *reason = r->state == SERVE_STARTING && j && j->state == JOB_PENDING ? j->wait
                         : j                                                        ? j->reason
                                                                                    : NULL;
    json_t *o = json_pack(
        "{s:I, s:I, s:I, s:I, s:s, s:s?, s:o*, s:s?, s:o, s:I, s:o, s:o, s:s?}", "replica",
        (json_int_t)r->replica, "job", (json_int_t)r->job, "attempt",
        (json_int_t)(j ? j->att.n : 0), "generation", (json_int_t)r->generation, "state",
        serve_replica_state_name(r->state), "node", node, "gpus", gpus_json(j), "addr",
        n && n->addr ? n->addr
        : r->node[0] ? r->node
                     : NULL,
        "port", r->port ? json_integer(r->port) : json_null(), "inflight", (json_int_t)r->inflight,
        "started_ms", j && j->att.start_ms ? json_integer(j->att.start_ms) : json_null(),
        "ready_ms", r->ready_ms ? json_integer(r->ready_ms) : json_null(), "reason", reason);
    return o;
}

static json_t *decision_json(const struct serve_service *svc)
{
    if (!svc || !svc->decision_ms)
        return json_null();
    return json_pack("{s:I, s:i, s:i, s:b, s:s}", "at_ms", (json_int_t)svc->decision_ms, "from",
                     svc->decision_from, "to", svc->decision.desired, "panic", svc->decision.panic,
                     "reason", svc->decision.reason);
}

static json_t *backoff_json(const struct serve_service *svc, int64_t now_ms)
{
    if (!svc || !svc->backoff.failures)
        return json_null();
    return json_pack("{s:i, s:o, s:s}", "failures", (int)svc->backoff.failures, "until_ms",
                     svc->backoff.until_ms > now_ms ? json_integer(svc->backoff.until_ms)
                                                    : json_null(),
                     "reason", svc->backoff.reason);
}

/* Adds the piece of ledger group g (a job's) to the service object it
 * belongs to among `services` (the job's serve part names it). Under the
 * lock. */
static void cost_add(struct server *s, json_t *services, const json_t *g)
{
    const char *key = json_string_value(json_object_get(g, "key"));
    const struct job *j = key ? jobs_find(&s->jobs, strtoll(key, NULL, 10)) : NULL;
    if (!j || !j->spec.serve.service)
        return;
    size_t k;
    json_t *o;
    json_array_foreach(services, k, o)
    {
        const char *name = json_string_value(json_object_get(o, "name"));
        json_t *cost = json_object_get(json_object_get(o, "status"), "cost");
        if (!name || !cost || strcmp(name, j->spec.serve.service) != 0)
            continue;
        double hours = json_number_value(json_object_get(cost, "gpu_hours"));
        double money = json_number_value(json_object_get(cost, "cost"));
        json_object_set_new(cost, "gpu_hours",
                            json_real(hours + json_number_value(json_object_get(g, "gpu_hours"))));
        json_object_set_new(cost, "cost",
                            json_real(money + json_number_value(json_object_get(g, "cost"))));
        return;
    }
}

void serve_status_cost(struct server *s, json_t *services, int64_t now_ms)
{
    int err = 0;
    json_t *rep = cost_report(&s->cost, NULL, COST_BY_JOB, NULL, 0, now_ms + 1, now_ms, &err);
    const json_t *rows = rep ? json_object_get(rep, "rows") : NULL;
    size_t k;
    json_t *g;
    pthread_mutex_lock(&s->lock);
    json_array_foreach(rows, k, g)
    {
        cost_add(s, services, g);
    }
    pthread_mutex_unlock(&s->lock);
    json_decref(rep);
}

json_t *serve_status_json(struct server *s, const struct cluster_service *c, int64_t now_ms)
{
    const struct serve_service *svc = serve_service_get(s->serve, c->name, false, 0);
    json_t *replicas = json_array();
    int ready = 0;
    for (size_t k = 0; replicas && svc && k < svc->n; k++) {
        ready += svc->v[k].state == SERVE_READY;
        json_t *o = replica_json(s, &svc->v[k]);
        if (!o || json_array_append_new(replicas, o)) {
            json_decref(replicas);
            replicas = NULL;
        }
    }
    if (!replicas)
        return NULL;
    int32_t desired = svc && svc->decision_ms ? svc->decision.desired : c->autoscale.min;
    json_t *observed = json_pack("{s:o, s:o, s:o, s:i, s:o*}", "concurrency",
                                 milli_json(svc ? svc->concurrency_milli : 0), "rps",
                                 milli_json(svc ? svc->rps_milli : 0), "metric",
                                 milli_json(svc ? svc->metric_milli : PROTO_NONE), "queued",
                                 svc ? (int)svc->queued : 0, "latency", latency_json(svc, now_ms));
    return json_pack("{s:i, s:i, s:o, s:o, s:o*, s:o, s:o, s:o*}", "desired", desired, "ready",
                     ready, "replicas", replicas, "decision", decision_json(svc), "observed",
                     observed, "backoff", backoff_json(svc, now_ms), "blocked",
                     svc && svc->blocked[0] ? json_string(svc->blocked) : json_null(), "cost",
                     json_pack("{s:f, s:f}", "gpu_hours", 0.0, "cost", 0.0));
}

void serve_monitor_points(struct server *s, int64_t now_ms)
{
    struct serve *sv = s->serve;
    struct monitor_service_point *v = sv->n ? calloc(sv->n, sizeof(*v)) : NULL;
    size_t n = 0;
    for (size_t k = 0; v && k < sv->n; k++) {
        const struct serve_service *svc = sv->v[k];
        const struct cluster_service *c = cluster_service_get(&s->cluster, svc->name);
        if (!c)
            continue; /* deleted: draining, no longer shown */
        uint32_t ready = 0;
        for (size_t r = 0; r < svc->n; r++)
            ready += svc->v[r].state == SERVE_READY;
        uint64_t counts[PROTO_LATENCY_BUCKETS] = {0};
        uint64_t answers = latency_counts(svc, now_ms, counts);
        int32_t desired = svc->decision_ms ? svc->decision.desired : c->autoscale.min;
        v[n++] = (struct monitor_service_point){
            .name = svc->name,
            .team = c->replica.team,
            .ready = ready,
            .desired = desired > 0 ? (uint32_t)desired : 0,
            .rps_milli = svc->rps_milli > 0 ? svc->rps_milli : 0,
            .p50_ms = answers ? (int64_t)(bucket_quantile(counts, answers, 0.5) * 1000 + 0.5) : -1,
            .p99_ms = answers ? (int64_t)(bucket_quantile(counts, answers, 0.99) * 1000 + 0.5) : -1,
        };
    }
    if (n)
        monitor_services(&s->monitor, v, n, now_ms);
    free(v);
}

void serve_metrics(const struct serve *sv, struct prom *p)
{
    prom_family(p, "gpuorch_service_replicas", PROM_GAUGE,
                "Replicas of each service, by state (starting, ready, draining, failed).");
    for (size_t k = 0; k < sv->n; k++) {
        const struct serve_service *svc = sv->v[k];
        for (int st = 0; st < SERVE_NSTATES; st++) {
            int n = 0;
            for (size_t r = 0; r < svc->n; r++)
                n += svc->v[r].state == (enum serve_replica_state)st;
            const char *labels[] = {"service", svc->name, "state",
                                    serve_replica_state_name((enum serve_replica_state)st), NULL};
            prom_sample(p, "gpuorch_service_replicas", labels, n);
        }
    }
    prom_family(p, "gpuorch_service_desired_replicas", PROM_GAUGE,
                "The replicas each service's autoscaler wants.");
    for (size_t k = 0; k < sv->n; k++) {
        const char *labels[] = {"service", sv->v[k]->name, NULL};
        prom_sample(p, "gpuorch_service_desired_replicas", labels,
                    sv->v[k]->decision_ms ? sv->v[k]->decision.desired : 0);
    }
    prom_family(p, "gpuorch_service_requests_inflight", PROM_GAUGE,
                "Requests in flight at each service's replicas, as the routers report them.");
    for (size_t k = 0; k < sv->n; k++) {
        const char *labels[] = {"service", sv->v[k]->name, NULL};
        prom_sample(p, "gpuorch_service_requests_inflight", labels, sv->v[k]->inflight);
    }
}

/*
 * metrics.c - GET /metrics (the cluster in Prometheus's text format:
 * docs/prometheus.md lists every family) and GET /v1/metrics/series (GPU
 * metrics and the queue length over time: docs/monitoring.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/api/api.h"
#include "server/mig/mig.h"
#include "server/sched/sched.h"
#include "server/serve/serve.h"
#include "server/srv.h"
#include "util/prom.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define CONTENT_TYPE    "text/plain; version=0.0.4; charset=utf-8"
#define DEFAULT_SPAN_MS (INT64_C(15) * 60 * 1000)
#define MAX_STEPS       10000

/* The text is built under the state lock (a few milliseconds at 10,000
 * GPUs) and sent after it is released. */
static int metrics(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    /* The route is public to the HTTP layer so that --metrics-public can
     * open it; otherwise it takes an admin's token or a metrics user's:
     * its labels name every team's jobs. */
    if (!s->cfg.metrics_public && !api_authorize(req, API_ROUTE_METRICS, s))
        return 0;
    struct prom *p = prom_new();
    if (!p)
        return http_request_error(req, 500, "internal", "out of memory");
    pthread_mutex_lock(&s->lock);
    int64_t now = srv_now_ms(s);
    int rc = monitor_metrics(&s->monitor, p, now, s->sched->passes);
    if (!rc) {
        cost_metrics(&s->cost, p, now);
        monitor_idle_metrics(&s->monitor, p);
        sched_metrics(s->sched, p);
        serve_metrics(s->serve, p);
        migctl_metrics(s, p);
    }
    pthread_mutex_unlock(&s->lock);
    size_t len = 0;
    const char *text = rc ? NULL : prom_text(p, &len);
    if (!text) {
        prom_free(p);
        return http_request_error(req, 500, "internal", "metrics not rendered: out of memory");
    }
    rc = http_request_respond_bytes(req, 200, CONTENT_TYPE, text, len);
    prom_free(p);
    return rc;
}

/* "now", "-15m", "-1h", "-30s" (relative to now) or RFC 3339. */
static bool parse_time(const char *v, int64_t now_ms, int64_t *ret)
{
    int64_t secs;
    if (strcmp(v, "now") == 0) {
        *ret = now_ms;
        return true;
    }
    if (v[0] == '-' && timefmt_parse_duration(v + 1, &secs) == 0 && secs != TIMEFMT_UNLIMITED &&
        secs <= INT64_C(3650) * 86400) {
        *ret = now_ms - secs * 1000;
        return true;
    }
    return timefmt_parse_rfc3339(v, ret) == 0;
}

/* Seconds ("10", "10s", "1m", "1h"). */
static bool parse_step(const char *v, int64_t *ret_ms)
{
    char *end;
    long long n = strtoll(v, &end, 10);
    int64_t secs;
    if (v[0] >= '0' && v[0] <= '9' && !*end) {
        secs = n;
    } else if (!strchr(v, ':') && timefmt_parse_duration(v, &secs) == 0) {
        /* units only: Slurm's bare minutes were taken as seconds above */
    } else {
        return false;
    }
    if (secs < 1 || secs > INT64_C(366) * 86400)
        return false;
    *ret_ms = secs * 1000;
    return true;
}

/* The `key` parameter's groups, split at commas in buf (keys points into it). */
struct query_keys {
    char buf[MONITOR_QUERY_KEYS_MAX * 161];
    const char *keys[MONITOR_QUERY_KEYS_MAX];
};

/* "a,b,c" into k; false when there are none, too many, or one is empty or too long. */
static bool split_keys(const char *v, struct query_keys *k, size_t *ret_n)
{
    size_t n = 0, len = strlen(v);
    if (len >= sizeof(k->buf))
        return false;
    memcpy(k->buf, v, len + 1);
    for (char *p = k->buf;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (!*p || strlen(p) > 160 || n == MONITOR_QUERY_KEYS_MAX)
            return false;
        k->keys[n++] = p;
        if (!comma)
            break;
        p = comma + 1;
    }
    *ret_n = n;
    return true;
}

/* Fills q from the request (its keys in k); 0, or -1 once it answered 400. */
static int parse_request(struct http_request *req, int64_t now, struct monitor_query *q,
                         struct query_keys *k)
{
    const char *metric = http_request_query(req, "metric");
    const char *by = http_request_query(req, "by");
    const char *since = http_request_query(req, "since");
    const char *until = http_request_query(req, "until");
    const char *step = http_request_query(req, "step");
    const char *key = http_request_query(req, "key");
    const char *node = http_request_query(req, "node");
    *q = (struct monitor_query){.node = node};
    if (key && !split_keys(key, k, &q->nkeys))
        return http_request_error(req, 400, "invalid_query",
                                  "key: expected 1 to %d group keys, comma-separated, each 1 to "
                                  "160 bytes",
                                  MONITOR_QUERY_KEYS_MAX),
               -1;
    q->keys = key ? k->keys : NULL;
    int m = metric ? monitor_metric_parse(metric) : -1;
    if (m < 0)
        return http_request_error(req, 400, "invalid_query",
                                  "metric: expected gpu_util, mem_used, power, temperature, "
                                  "queue_length, replicas, desired_replicas, rps, latency_p50 or "
                                  "latency_p99"),
               -1;
    q->metric = (enum monitor_metric)m;
    bool queue = q->metric == MONITOR_QUEUE_LENGTH;
    bool service = q->metric >= MONITOR_SVC_READY;
    int b = by        ? monitor_by_parse(by)
            : queue   ? MONITOR_BY_TOTAL
            : service ? MONITOR_BY_SERVICE
                      : MONITOR_BY_NODE;
    if (b < 0 ||
        (queue && b != MONITOR_BY_TEAM && b != MONITOR_BY_PRIORITY && b != MONITOR_BY_TOTAL) ||
        (service && b != MONITOR_BY_SERVICE) || (!queue && !service && b > MONITOR_BY_JOB))
        return http_request_error(req, 400, "invalid_query", "by: expected %s for %s",
                                  queue     ? "team, priority or total"
                                  : service ? "service"
                                            : "node, team, gpu or job",
                                  monitor_metric_name(q->metric)),
               -1;
    q->by = (enum monitor_by)b;
    if (node && (!*node || (b != MONITOR_BY_NODE && b != MONITOR_BY_GPU)))
        return http_request_error(req, 400, "invalid_query",
                                  *node ? "node: only by node or gpu"
                                        : "node: expected a node name"),
               -1;
    int64_t t0 = now - DEFAULT_SPAN_MS, t1 = now;
    if (since && !parse_time(since, now, &t0))
        return http_request_error(req, 400, "invalid_query",
                                  "since: expected RFC 3339, \"now\" or a relative time such as "
                                  "\"-15m\", got '%.64s'",
                                  since),
               -1;
    if (until && !parse_time(until, now, &t1))
        return http_request_error(req, 400, "invalid_query",
                                  "until: expected RFC 3339, \"now\" or a relative time such as "
                                  "\"-5m\", got '%.64s'",
                                  until),
               -1;
    if (t0 > t1)
        return http_request_error(req, 400, "invalid_query", "since: must not be after until"), -1;
    int64_t span = t1 - t0 > 0 ? t1 - t0 : 1;
    q->step_ms = span / 120 / 1000 * 1000;
    if (q->step_ms < 1000)
        q->step_ms = 1000;
    if (step && !parse_step(step, &q->step_ms))
        return http_request_error(req, 400, "invalid_query",
                                  "step: expected seconds such as \"10s\", \"1m\" or \"30\", "
                                  "from 1 s to 366 days, got '%.64s'",
                                  step),
               -1;
    /* Steps on whole multiples of the step, so that refreshes line up. */
    q->since_ms = t0 - ((t0 % q->step_ms) + q->step_ms) % q->step_ms;
    q->nsteps = (size_t)((t1 - q->since_ms) / q->step_ms) + 1;
    if (q->nsteps > MAX_STEPS)
        return http_request_error(req, 400, "invalid_query",
                                  "step: %lld s gives %zu points over that range; at most %d",
                                  (long long)(q->step_ms / 1000), q->nsteps, MAX_STEPS),
               -1;
    q->until_ms = t1;
    return 0;
}

static int series(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    int64_t now = srv_now_ms(s);
    struct monitor_query q;
    struct query_keys *k = malloc(sizeof(*k));
    if (!k)
        return http_request_error(req, 500, "internal", "out of memory");
    if (parse_request(req, now, &q, k)) {
        free(k);
        return 0;
    }
    pthread_mutex_lock(&s->lock);
    /* A service's figures are seen as its replicas' jobs are (services.c). */
    q.only_team = api_visible_team(
        s, req, q.by == MONITOR_BY_SERVICE ? CLUSTER_PRIVATE_JOBS : CLUSTER_PRIVATE_USAGE);
    pthread_mutex_unlock(&s->lock);
    int err = 0;
    json_t *o = monitor_series_query(&s->monitor, &q, now, &err);
    free(k);
    if (!o)
        return http_request_error(req, 500, "internal", "reading the series: %s",
                                  err == GPO_ENOMEM ? "out of memory" : gpo_strerror(err));
    return http_request_respond_json(req, 200, o);
}

static const struct http_route routes[] = {
    /* Public to the HTTP layer: the handler asks for a token unless --metrics-public. */
    {"GET", "/metrics", metrics, HTTP_ROUTE_PUBLIC, NULL},
    {"GET", "/v1/metrics/series", series, 0, NULL},
};
const struct api_routes api_metrics_routes = {routes, sizeof(routes) / sizeof(routes[0])};

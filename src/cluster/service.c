/*
 * service.c - services (config kind "services"): decoding the spec and its
 * rules (cluster.h); service_spec.c writes it and makes replicas' specs.
 *
 * Decisions the header leaves open:
 *  - The replica template is decoded by composing a job body (name = the
 *    service's; team, project, model, priority, command, script, env,
 *    workdir; "resources"' fields at the top) and calling jobspec_decode, so
 *    a replica obeys every rule a job does; the job's field names in its
 *    messages are mapped back ("gpus" -> "resources.gpus").
 *  - "priority" defaults to "serving" (the class the controller creates at
 *    first start). "team" is required here: the API fills in the applying
 *    user's team before decoding.
 *  - "user" and "generation" are the server's: decode reads them (so that
 *    to_json's output decodes to the same service) and the server replaces
 *    them on every write.
 *  - Without "autoscaling.target", a service with a "concurrency_limit" and
 *    the metric "concurrency" targets 70 % of its limit (Knative's target
 *    utilization); else the default target.
 *  - Autoscaling times are whole seconds in JSON, ms in C.
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "cluster/cluster.h"
#include "cluster/cluster_int.h"
#include "util/errbuf.h"
#include "util/jsonv.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define PERIOD_MAX_MS  3600000
#define TIMEOUT_MAX_MS 600000
#define FAILURES_MAX   1000
#define STARTUP_MAX_S  86400
#define DRAIN_MAX_S    3600
#define LIMIT_MAX      100000
#define QUEUE_MAX_MS   3600000
#define WINDOW_MAX_S   (AUTOSCALE_WINDOW_MAX_MS / 1000)
#define PCT_MAX        100000
#define TARGET_MAX     1000000.0
#define TARGET_UTIL    70 /* % of concurrency_limit (Knative's target utilization) */

static const char *const metric_names[] = {
#define METRIC_NAME(name, text) text,
    AUTOSCALE_METRIC_MAP(METRIC_NAME)
#undef METRIC_NAME
};
_Static_assert(ARRAY_LEN(metric_names) == AUTOSCALE_NMETRICS, "one name per metric");

const char *cluster_service_metric_name(enum autoscale_metric m)
{
    return (unsigned)m < AUTOSCALE_NMETRICS ? metric_names[m] : NULL;
}

/* The job's fields a service's "resources" holds. */
static const char *const resource_keys[] = {
    "gpus", "gpu_mem_mib", "min_gpu_mem_mib", "gpu_type", "cpus", "mem_mib", "pool",
};

/* The template's fields at the service's top level. */
static const char *const job_keys[] = {
    "team", "project", "model", "priority", "command", "script", "env", "workdir",
};

void cluster_service_autoscale_default(struct autoscale_spec *a)
{
    *a = (struct autoscale_spec){
        .metric = AUTOSCALE_METRIC_CONCURRENCY,
        .target_milli = 2000,
        .min = 0,
        .max = 1,
        .stable_window_ms = 60000,
        .panic_window_ms = 6000,
        .panic_threshold_pct = 200,
        .max_up_rate_pct = 1000,
        .max_down_rate_pct = 200,
        .scale_down_delay_ms = 0,
        .zero_grace_ms = 30000,
        .headroom = true,
    };
}

/* ---- decoding ---------------------------------------------------------- */

struct readiness_wire {
    char *path;
    int64_t period_ms, timeout_ms;
    uint32_t failures;
};

struct queue_wire {
    uint32_t limit;
    int64_t timeout_ms;
};

struct scaling_wire {
    char *metric, *replica_metric;
    double target;
    enum jsonv_presence target_p;
    int64_t stable_s, panic_s, threshold_pct, up_pct, down_pct, delay_s, grace_s;
    bool headroom;
};

struct service_wire {
    uint32_t id;
    char *name, *user;
    int64_t generation;
    json_t *job[ARRAY_LEN(job_keys)]; /* borrowed */
    json_t *resources;                /* borrowed */
    struct readiness_wire readiness;
    int64_t startup_s, drain_s, min, max;
    uint32_t concurrency_limit;
    struct queue_wire queue;
    char **hosts, **keys;
    size_t nhosts, nkeys;
    struct scaling_wire scaling;
};

#define W(m) offsetof(struct service_wire, m)
#define INT(key, type, m, lo, hi)                                                                  \
    {                                                                                              \
        .name = key, .kind = JSONV_INT64, .offset = offsetof(type, m), .min = lo, .max = hi        \
    }
#define RAW(key, m)                                                                                \
    {                                                                                              \
        .name = key, .kind = JSONV_RAW, .flags = JSONV_NULLABLE, .offset = W(m)                    \
    }

static const struct jsonv_field readiness_fields[] = {
    {.name = "path",
     .kind = JSONV_STRING,
     .flags = JSONV_TEXT,
     .offset = offsetof(struct readiness_wire, path),
     .min = 1,
     .max = CLUSTER_SERVICE_PATH_MAX},
    INT("period_ms", struct readiness_wire, period_ms, 100, PERIOD_MAX_MS),
    INT("timeout_ms", struct readiness_wire, timeout_ms, 10, TIMEOUT_MAX_MS),
    {.name = "failure_threshold",
     .kind = JSONV_UINT32,
     .offset = offsetof(struct readiness_wire, failures),
     .min = 1,
     .max = FAILURES_MAX},
};

static const struct jsonv_field queue_fields[] = {
    {.name = "limit",
     .kind = JSONV_UINT32,
     .offset = offsetof(struct queue_wire, limit),
     .min = 0,
     .max = LIMIT_MAX},
    INT("timeout_ms", struct queue_wire, timeout_ms, 1, QUEUE_MAX_MS),
};

static const struct jsonv_field scaling_fields[] = {
    {.name = "metric",
     .kind = JSONV_STRING,
     .offset = offsetof(struct scaling_wire, metric),
     .min = 0,
     .max = 64},
    {.name = "replica_metric",
     .kind = JSONV_STRING,
     .flags = JSONV_NULLABLE,
     .offset = offsetof(struct scaling_wire, replica_metric),
     .min = 1,
     .max = CLUSTER_SERVICE_METRIC_MAX},
    {.name = "target",
     .kind = JSONV_DOUBLE,
     .flags = JSONV_PRESENCE,
     .offset = offsetof(struct scaling_wire, target),
     .presence_offset = offsetof(struct scaling_wire, target_p)},
    INT("stable_window_s", struct scaling_wire, stable_s, 6, WINDOW_MAX_S),
    INT("panic_window_s", struct scaling_wire, panic_s, 1, WINDOW_MAX_S),
    INT("panic_threshold_pct", struct scaling_wire, threshold_pct, 101, PCT_MAX),
    INT("max_scale_up_rate_pct", struct scaling_wire, up_pct, 100, PCT_MAX),
    INT("max_scale_down_rate_pct", struct scaling_wire, down_pct, 100, PCT_MAX),
    INT("scale_down_delay_s", struct scaling_wire, delay_s, 0, WINDOW_MAX_S),
    INT("scale_to_zero_grace_s", struct scaling_wire, grace_s, 0, WINDOW_MAX_S),
    {.name = "headroom", .kind = JSONV_BOOL, .offset = offsetof(struct scaling_wire, headroom)},
};

/* "id" first: the API form decodes without it (cluster_json.c's rule). */
static const struct jsonv_field service_fields[] = {
    {.name = "id",
     .kind = JSONV_UINT32,
     .flags = JSONV_REQUIRED,
     .offset = W(id),
     .min = 1,
     .max = UINT32_MAX},
    {.name = "name",
     .kind = JSONV_STRING,
     .flags = JSONV_REQUIRED,
     .offset = W(name),
     .min = 1,
     .max = CLUSTER_NAME_MAX},
    RAW("team", job[0]),
    RAW("project", job[1]),
    RAW("model", job[2]),
    RAW("priority", job[3]),
    RAW("command", job[4]),
    RAW("script", job[5]),
    RAW("env", job[6]),
    RAW("workdir", job[7]),
    RAW("resources", resources),
    {.name = "readiness",
     .kind = JSONV_OBJECT,
     .offset = W(readiness),
     .sub = readiness_fields,
     .nsub = ARRAY_LEN(readiness_fields)},
    INT("startup_timeout_s", struct service_wire, startup_s, 1, STARTUP_MAX_S),
    INT("drain_timeout_s", struct service_wire, drain_s, 0, DRAIN_MAX_S),
    INT("min", struct service_wire, min, 0, AUTOSCALE_REPLICAS_MAX),
    {.name = "max",
     .kind = JSONV_INT64,
     .flags = JSONV_REQUIRED,
     .offset = W(max),
     .min = 1,
     .max = AUTOSCALE_REPLICAS_MAX},
    {.name = "concurrency_limit",
     .kind = JSONV_UINT32,
     .offset = W(concurrency_limit),
     .min = 0,
     .max = LIMIT_MAX},
    {.name = "queue",
     .kind = JSONV_OBJECT,
     .offset = W(queue),
     .sub = queue_fields,
     .nsub = ARRAY_LEN(queue_fields)},
    {.name = "hosts",
     .kind = JSONV_STRINGS,
     .offset = W(hosts),
     .count_offset = W(nhosts),
     .max_items = CLUSTER_SERVICE_HOSTS_MAX,
     .min = 1,
     .max = CLUSTER_HOST_MAX},
    {.name = "api_key_sha256",
     .kind = JSONV_STRINGS,
     .offset = W(keys),
     .count_offset = W(nkeys),
     .max_items = CLUSTER_SERVICE_KEYS_MAX,
     .min = 1,
     .max = 64},
    {.name = "autoscaling",
     .kind = JSONV_OBJECT,
     .offset = W(scaling),
     .sub = scaling_fields,
     .nsub = ARRAY_LEN(scaling_fields)},
    INT("generation", struct service_wire, generation, 0, INT64_MAX),
    {.name = "user",
     .kind = JSONV_STRING,
     .flags = JSONV_NULLABLE,
     .offset = W(user),
     .min = 1,
     .max = CLUSTER_NAME_MAX},
};

/* The job's message with its resource fields named as the service's:
 * "field 'gpus': ..." -> "field 'resources.gpus': ...". */
void cluster_service_job_message(const char *msg, char *err, size_t errlen)
{
    char out[512];
    size_t o = 0;
    for (const char *p = msg; *p && o + 1 < sizeof(out);) {
        size_t skip = 0;
        for (size_t k = 0; p[0] == '\'' && k < ARRAY_LEN(resource_keys) && !skip; k++) {
            size_t n = strlen(resource_keys[k]);
            if (strncmp(p + 1, resource_keys[k], n) == 0 && p[1 + n] == '\'')
                skip = n + 2;
        }
        if (skip) {
            int w = snprintf(out + o, sizeof(out) - o, "'resources.%.*s'", (int)(skip - 2), p + 1);
            o = w < 0 ? o : o + (size_t)w < sizeof(out) ? o + (size_t)w : sizeof(out) - 1;
            p += skip;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
    errbuf_set(err, errlen, GPO_EINVAL, "%s", out);
}

static bool put(json_t *o, const char *key, json_t *v)
{
    return v && json_object_set_new(o, key, v) == 0;
}

/* The job body of the replica template: the service's name, its job fields
 * and its resources'. */
static int job_body(const struct service_wire *w, json_t **ret, char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    if (w->resources && !json_is_object(w->resources) && !json_is_null(w->resources))
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'resources': expected an object, got %s",
                          jsonv_type_name(w->resources));
    json_t *body = json_object();
    bool ok = body && put(body, "name", json_string(w->name));
    for (size_t k = 0; ok && k < ARRAY_LEN(job_keys); k++)
        if (w->job[k])
            ok = json_object_set(body, job_keys[k], w->job[k]) == 0;
    if (ok && (!w->job[3] || json_is_null(w->job[3])))
        ok = put(body, "priority", json_string("serving"));
    const char *key;
    json_t *v;
    if (ok && json_is_object(w->resources)) {
        json_object_foreach(w->resources, key, v)
        {
            bool known = false;
            for (size_t k = 0; k < ARRAY_LEN(resource_keys); k++)
                known = known || strcmp(key, resource_keys[k]) == 0;
            if (!known) {
                json_decref(body);
                return errbuf_set(err, errlen, GPO_EINVAL,
                                  "unknown field 'resources.%s' (expected gpus, gpu_mem_mib, "
                                  "min_gpu_mem_mib, gpu_type, cpus, mem_mib, pool)",
                                  jsonv_quote(key, strlen(key), q));
            }
            if (!(ok = json_object_set(body, key, v) == 0))
                break;
        }
    }
    if (!ok) {
        json_decref(body);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    *ret = body;
    return 0;
}

static int template_decode(const struct service_wire *w, bool stored, struct jobspec *ret,
                           char *err, size_t errlen)
{
    json_t *body = NULL;
    int rc = job_body(w, &body, err, errlen);
    if (rc)
        return rc;
    char msg[512] = "";
    rc = stored ? jobspec_decode_stored(body, ret, msg, sizeof(msg))
                : jobspec_decode(body, ret, msg, sizeof(msg));
    json_decref(body);
    if (rc == GPO_ENOMEM)
        return errbuf_set(err, errlen, rc, "out of memory");
    if (rc) {
        cluster_service_job_message(msg, err, errlen);
        return GPO_EINVAL;
    }
    return 0;
}

static int metric_parse(const char *s, enum autoscale_metric *ret, char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    for (size_t k = 0; k < ARRAY_LEN(metric_names); k++) {
        if (strcmp(s, metric_names[k]) == 0) {
            *ret = (enum autoscale_metric)k;
            return 0;
        }
    }
    return errbuf_set(err, errlen, GPO_EINVAL,
                      "field 'autoscaling.metric': unknown '%s' (expected concurrency, rps, "
                      "replica)",
                      cluster_quote(s, q));
}

static int target_milli(const struct scaling_wire *sw, int64_t *ret, char *err, size_t errlen)
{
    double x = sw->target;
    if (!(x > 0) || x > TARGET_MAX)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'autoscaling.target': expected a number above 0 (at most %g)",
                          TARGET_MAX);
    int64_t m = (int64_t)llround(x * 1000);
    if (m < 1)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'autoscaling.target': %g is below the smallest target 0.001", x);
    *ret = m;
    return 0;
}

/* The wire's autoscaling (defaults where it left members out) into *a. */
static int scaling_from_wire(struct service_wire *w, struct autoscale_spec *a, char *err,
                             size_t errlen)
{
    struct scaling_wire *sw = &w->scaling;
    int rc = 0;
    if (sw->metric && (rc = metric_parse(sw->metric, &a->metric, err, errlen)))
        return rc;
    if (sw->target_p == JSONV_GIVEN && (rc = target_milli(sw, &a->target_milli, err, errlen)))
        return rc;
    if (sw->target_p != JSONV_GIVEN && w->concurrency_limit > 0 &&
        a->metric == AUTOSCALE_METRIC_CONCURRENCY)
        a->target_milli = (int64_t)w->concurrency_limit * 10 * TARGET_UTIL;
    a->min = (int32_t)w->min;
    a->max = (int32_t)w->max;
    a->stable_window_ms = sw->stable_s * 1000;
    a->panic_window_ms = sw->panic_s * 1000;
    a->panic_threshold_pct = (int32_t)sw->threshold_pct;
    a->max_up_rate_pct = (int32_t)sw->up_pct;
    a->max_down_rate_pct = (int32_t)sw->down_pct;
    a->scale_down_delay_ms = sw->delay_s * 1000;
    a->zero_grace_ms = sw->grace_s * 1000;
    a->headroom = sw->headroom;
    return 0;
}

static void wire_defaults(struct service_wire *w)
{
    struct autoscale_spec a;
    cluster_service_autoscale_default(&a);
    *w = (struct service_wire){
        .readiness = {.period_ms = 1000, .timeout_ms = 1000, .failures = 3},
        .startup_s = 900,
        .drain_s = 30,
        .min = a.min,
        .queue = {.limit = 1000, .timeout_ms = 60000},
        .scaling = {.stable_s = a.stable_window_ms / 1000,
                    .panic_s = a.panic_window_ms / 1000,
                    .threshold_pct = a.panic_threshold_pct,
                    .up_pct = a.max_up_rate_pct,
                    .down_pct = a.max_down_rate_pct,
                    .delay_s = a.scale_down_delay_ms / 1000,
                    .grace_s = a.zero_grace_ms / 1000,
                    .headroom = a.headroom},
    };
}

/* Moves what the wire holds into *s (every pointer changes hands). */
static int from_wire(struct service_wire *w, bool stored, struct cluster_service *s, char *err,
                     size_t errlen)
{
    cluster_service_autoscale_default(&s->autoscale);
    int rc = template_decode(w, stored, &s->replica, err, errlen);
    rc = rc ? rc : scaling_from_wire(w, &s->autoscale, err, errlen);
    s->id = w->id;
    s->name = w->name;
    s->user = w->user;
    s->generation = (uint64_t)w->generation;
    s->probe_path = w->readiness.path;
    s->probe_period_ms = w->readiness.period_ms;
    s->probe_timeout_ms = w->readiness.timeout_ms;
    s->probe_failures = w->readiness.failures;
    s->startup_timeout_s = w->startup_s;
    s->drain_timeout_s = w->drain_s;
    s->concurrency_limit = w->concurrency_limit;
    s->queue_limit = w->queue.limit;
    s->queue_timeout_ms = w->queue.timeout_ms;
    s->hosts = w->hosts;
    s->nhosts = w->nhosts;
    s->key_hashes = w->keys;
    s->nkeys = w->nkeys;
    s->replica_metric = w->scaling.replica_metric;
    w->name = w->user = w->readiness.path = w->scaling.replica_metric = NULL;
    w->hosts = w->keys = NULL;
    if (!rc && !s->probe_path && !(s->probe_path = strdup("/health")))
        rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    return rc;
}

int cluster_service_decode(const json_t *obj, unsigned flags, struct cluster_service *ret,
                           char *err, size_t errlen)
{
    if (flags & ~(unsigned)CLUSTER_STORED)
        return errbuf_set(err, errlen, GPO_EINVAL, "cluster: unknown decode flags %#x", flags);
    bool stored = flags & CLUSTER_STORED;
    struct service_wire w;
    wire_defaults(&w);
    const struct jsonv_field *f = stored ? service_fields : service_fields + 1;
    size_t nf = stored ? ARRAY_LEN(service_fields) : ARRAY_LEN(service_fields) - 1;
    int rc = jsonv_decode(obj, f, nf, &w, err, errlen);
    if (rc)
        return rc == GPO_ENOMEM ? GPO_ENOMEM : GPO_EINVAL;
    struct cluster_service s = {0};
    rc = from_wire(&w, stored, &s, err, errlen);
    jsonv_release(f, nf, &w);
    rc = rc ? rc : cluster_service_check(&s, err, errlen);
    if (rc) {
        cluster_service_release(&s);
        return rc;
    }
    *ret = s;
    return 0;
}

/* ---- rules ------------------------------------------------------------- */

static bool metric_name_valid(const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
        if (!letter && !(i > 0 && c >= '0' && c <= '9'))
            return false;
    }
    return n > 0 && n <= CLUSTER_SERVICE_METRIC_MAX;
}

static bool key_hash_valid(const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return n == CLUSTER_SERVICE_KEY_HEX;
}

static int check_template(const struct cluster_service *s, char *err, size_t errlen)
{
    const struct jobspec *r = &s->replica;
    if (!r->team)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "missing required field 'team' (the team whose quota the replicas use)");
    if (!r->argv == !r->script)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "fields 'command' and 'script': give exactly one");
    if (!r->name || strcmp(r->name, s->name) != 0)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "the replica template's name is not the service's");
    if (r->serve.service)
        return errbuf_set(err, errlen, GPO_EINVAL, "the replica template has a 'serve' part");
    return 0;
}

static int check_probe(const struct cluster_service *s, char *err, size_t errlen)
{
    const char *p = s->probe_path;
    if (!p || p[0] != '/' || strlen(p) > CLUSTER_SERVICE_PATH_MAX)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'readiness.path': expected a path starting with '/' (at most %d "
                          "bytes)",
                          CLUSTER_SERVICE_PATH_MAX);
    int rc = cluster_check_range("readiness.period_ms", s->probe_period_ms, 100, PERIOD_MAX_MS, err,
                                 errlen);
    rc = rc ? rc
            : cluster_check_range("readiness.timeout_ms", s->probe_timeout_ms, 10, TIMEOUT_MAX_MS,
                                  err, errlen);
    rc = rc ? rc
            : cluster_check_range("readiness.failure_threshold", s->probe_failures, 1, FAILURES_MAX,
                                  err, errlen);
    rc = rc ? rc
            : cluster_check_range("startup_timeout_s", s->startup_timeout_s, 1, STARTUP_MAX_S, err,
                                  errlen);
    return rc ? rc
              : cluster_check_range("drain_timeout_s", s->drain_timeout_s, 0, DRAIN_MAX_S, err,
                                    errlen);
}

static int check_routing(const struct cluster_service *s, char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    int rc =
        cluster_check_range("concurrency_limit", s->concurrency_limit, 0, LIMIT_MAX, err, errlen);
    rc = rc ? rc : cluster_check_range("queue.limit", s->queue_limit, 0, LIMIT_MAX, err, errlen);
    rc = rc ? rc
            : cluster_check_range("queue.timeout_ms", s->queue_timeout_ms, 1, QUEUE_MAX_MS, err,
                                  errlen);
    if (rc)
        return rc;
    if (s->nhosts > CLUSTER_SERVICE_HOSTS_MAX || s->nkeys > CLUSTER_SERVICE_KEYS_MAX)
        return errbuf_set(err, errlen, GPO_EINVAL, "at most %d hosts and %d API keys",
                          CLUSTER_SERVICE_HOSTS_MAX, CLUSTER_SERVICE_KEYS_MAX);
    for (size_t i = 0; i < s->nhosts; i++)
        if (!cluster_host_valid(s->hosts[i]))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'hosts[%zu]': '%s' is not a host name", i,
                              cluster_quote(s->hosts[i], q));
    for (size_t i = 0; i < s->nkeys; i++)
        if (!key_hash_valid(s->key_hashes[i]))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'api_key_sha256[%zu]': expected %d lowercase hex digits (a "
                              "key's SHA-256)",
                              i, CLUSTER_SERVICE_KEY_HEX);
    return 0;
}

static int check_scaling(const struct cluster_service *s, char *err, size_t errlen)
{
    const struct autoscale_spec *a = &s->autoscale;
    char q[JSONV_QUOTE_MAX + 4];
    int rc = cluster_check_range("min", a->min, 0, AUTOSCALE_REPLICAS_MAX, err, errlen);
    rc = rc ? rc : cluster_check_range("max", a->max, 1, AUTOSCALE_REPLICAS_MAX, err, errlen);
    if (rc)
        return rc;
    if (a->min > a->max)
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'min': %d is more than 'max' %d", a->min,
                          a->max);
    if ((unsigned)a->metric >= AUTOSCALE_NMETRICS)
        return errbuf_set(
            err, errlen, GPO_EINVAL,
            "field 'autoscaling.metric': unknown (expected concurrency, rps, replica)");
    if (a->target_milli < 1 || a->target_milli > (int64_t)(TARGET_MAX * 1000))
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'autoscaling.target': expected a number above 0 (at most %g)",
                          TARGET_MAX);
    const char *rm = s->replica_metric;
    if (a->metric == AUTOSCALE_METRIC_REPLICA && !rm)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "missing required field 'autoscaling.replica_metric' (the metric "
                          "'replica' scales on a metric of the replica's own /metrics)");
    if (a->metric != AUTOSCALE_METRIC_REPLICA && rm)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'autoscaling.replica_metric': only with the metric 'replica'");
    if (rm && !metric_name_valid(rm))
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'autoscaling.replica_metric': '%s' is not a metric name "
                          "([a-zA-Z_:][a-zA-Z0-9_:]*, at most %d bytes)",
                          cluster_quote(rm, q), CLUSTER_SERVICE_METRIC_MAX);
    static const struct {
        const char *field;
        size_t off;
        int64_t lo, hi;
    } ms[] = {
        {"autoscaling.stable_window_s", offsetof(struct autoscale_spec, stable_window_ms), 6,
         WINDOW_MAX_S},
        {"autoscaling.panic_window_s", offsetof(struct autoscale_spec, panic_window_ms), 1,
         WINDOW_MAX_S},
        {"autoscaling.scale_down_delay_s", offsetof(struct autoscale_spec, scale_down_delay_ms), 0,
         WINDOW_MAX_S},
        {"autoscaling.scale_to_zero_grace_s", offsetof(struct autoscale_spec, zero_grace_ms), 0,
         WINDOW_MAX_S},
    };
    for (size_t k = 0; k < ARRAY_LEN(ms) && !rc; k++) {
        int64_t v;
        memcpy(&v, (const char *)a + ms[k].off, sizeof(v));
        if (v % 1000)
            return errbuf_set(err, errlen, GPO_EINVAL, "field '%s': whole seconds only",
                              ms[k].field);
        rc = cluster_check_range(ms[k].field, v / 1000, ms[k].lo, ms[k].hi, err, errlen);
    }
    if (!rc && a->panic_window_ms > a->stable_window_ms)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'autoscaling.panic_window_s': %lld is longer than "
                          "'stable_window_s' %lld",
                          (long long)(a->panic_window_ms / 1000),
                          (long long)(a->stable_window_ms / 1000));
    rc = rc ? rc
            : cluster_check_range("autoscaling.panic_threshold_pct", a->panic_threshold_pct, 101,
                                  PCT_MAX, err, errlen);
    rc = rc ? rc
            : cluster_check_range("autoscaling.max_scale_up_rate_pct", a->max_up_rate_pct, 100,
                                  PCT_MAX, err, errlen);
    return rc ? rc
              : cluster_check_range("autoscaling.max_scale_down_rate_pct", a->max_down_rate_pct,
                                    100, PCT_MAX, err, errlen);
}

int cluster_service_check(const struct cluster_service *s, char *err, size_t errlen)
{
    if (!s)
        return errbuf_set(err, errlen, GPO_EINVAL, "no service");
    int rc = cluster_check_name("name", s->name, err, errlen);
    if (!rc && s->user && !cluster_name_valid(s->user))
        rc = cluster_check_name("user", s->user, err, errlen);
    rc = rc ? rc : check_template(s, err, errlen);
    rc = rc ? rc : check_probe(s, err, errlen);
    rc = rc ? rc : check_scaling(s, err, errlen);
    return rc ? rc : check_routing(s, err, errlen);
}

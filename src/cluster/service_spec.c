/*
 * service_spec.c - a service's JSON as the API and the store see it, its
 * release, and the job spec each of its replicas runs (cluster.h).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "cluster/cluster.h"
#include "cluster/cluster_int.h"
#include "util/errbuf.h"
#include "base/banned.h"

static bool put(json_t *o, const char *key, json_t *v)
{
    return v && json_object_set_new(o, key, v) == 0;
}

static json_t *text_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

static json_t *strings_json(char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        if (json_array_append_new(a, json_string(v[i]))) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static json_t *env_json(const struct jobspec *r)
{
    json_t *o = json_object();
    for (size_t i = 0; o && i < r->nenv; i++) {
        if (json_object_set_new(o, r->env[i].name, json_string(r->env[i].value))) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

static json_t *milli_json(int64_t milli)
{
    return milli % 1000 ? json_real((double)milli / 1000) : json_integer(milli / 1000);
}

static json_t *resources_json(const struct jobspec *r)
{
    json_t *o = json_object();
    bool ok = o &&
              put(o, "gpus",
                  r->gpu_milli > 0 ? json_real(r->gpu_milli / 1000.0) : json_integer(r->gpus)) &&
              put(o, "gpu_mem_mib", json_integer(r->gpu_mem_mib)) &&
              put(o, "min_gpu_mem_mib", json_integer(r->min_gpu_mem_mib)) &&
              put(o, "gpu_type", text_or_null(r->gpu_type)) &&
              put(o, "cpus", json_integer(r->cpus)) &&
              put(o, "mem_mib", json_integer(r->mem_mib)) && put(o, "pool", text_or_null(r->pool));
    if (!ok)
        json_decref(o);
    return ok ? o : NULL;
}

static json_t *scaling_json(const struct cluster_service *s)
{
    const struct autoscale_spec *a = &s->autoscale;
    return json_pack("{s:s, s:o, s:o, s:I, s:I, s:i, s:i, s:i, s:I, s:I, s:b}", "metric",
                     cluster_service_metric_name(a->metric), "replica_metric",
                     text_or_null(s->replica_metric), "target", milli_json(a->target_milli),
                     "stable_window_s", (json_int_t)(a->stable_window_ms / 1000), "panic_window_s",
                     (json_int_t)(a->panic_window_ms / 1000), "panic_threshold_pct",
                     (int)a->panic_threshold_pct, "max_scale_up_rate_pct", (int)a->max_up_rate_pct,
                     "max_scale_down_rate_pct", (int)a->max_down_rate_pct, "scale_down_delay_s",
                     (json_int_t)(a->scale_down_delay_ms / 1000), "scale_to_zero_grace_s",
                     (json_int_t)(a->zero_grace_ms / 1000), "headroom", (int)a->headroom);
}

json_t *cluster_service_to_json(const struct cluster_service *s, unsigned flags)
{
    const struct jobspec *r = &s->replica;
    json_t *o = json_object();
    bool ok =
        o && (!(flags & CLUSTER_STORED) || put(o, "id", json_integer(s->id))) &&
        put(o, "name", json_string(s->name)) && put(o, "team", text_or_null(r->team)) &&
        put(o, "project", text_or_null(r->project)) && put(o, "model", text_or_null(r->model)) &&
        put(o, "command", r->argv ? strings_json(r->argv, r->argc) : json_null()) &&
        put(o, "script", text_or_null(r->script)) && put(o, "env", env_json(r)) &&
        put(o, "workdir", text_or_null(r->workdir)) && put(o, "resources", resources_json(r)) &&
        put(o, "priority", text_or_null(r->priority)) &&
        put(o, "readiness",
            json_pack("{s:s, s:I, s:I, s:i}", "path", s->probe_path, "period_ms",
                      (json_int_t)s->probe_period_ms, "timeout_ms", (json_int_t)s->probe_timeout_ms,
                      "failure_threshold", (int)s->probe_failures)) &&
        put(o, "startup_timeout_s", json_integer(s->startup_timeout_s)) &&
        put(o, "drain_timeout_s", json_integer(s->drain_timeout_s)) &&
        put(o, "min", json_integer(s->autoscale.min)) &&
        put(o, "max", json_integer(s->autoscale.max)) &&
        put(o, "concurrency_limit", json_integer(s->concurrency_limit)) &&
        put(o, "queue",
            json_pack("{s:i, s:I}", "limit", (int)s->queue_limit, "timeout_ms",
                      (json_int_t)s->queue_timeout_ms)) &&
        put(o, "hosts", strings_json(s->hosts, s->nhosts)) &&
        put(o, "api_key_sha256", strings_json(s->key_hashes, s->nkeys)) &&
        put(o, "autoscaling", scaling_json(s)) &&
        put(o, "generation", json_integer((json_int_t)s->generation)) &&
        put(o, "user", text_or_null(s->user));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static void strings_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

void cluster_service_release(struct cluster_service *s)
{
    if (!s)
        return;
    free(s->name);
    free(s->user);
    jobspec_release(&s->replica);
    free(s->probe_path);
    strings_free(s->hosts);
    strings_free(s->key_hashes);
    free(s->replica_metric);
    memset(s, 0, sizeof(*s));
}

/* ---- replicas ----------------------------------------------------------- */

bool cluster_service_same_shape(const struct cluster_service *a, const struct cluster_service *b)
{
    if (a->probe_period_ms != b->probe_period_ms || a->probe_timeout_ms != b->probe_timeout_ms ||
        a->probe_failures != b->probe_failures || a->startup_timeout_s != b->startup_timeout_s ||
        strcmp(a->probe_path, b->probe_path) != 0 || !a->replica_metric != !b->replica_metric ||
        (a->replica_metric && strcmp(a->replica_metric, b->replica_metric) != 0))
        return false;
    json_t *x = jobspec_to_json(&a->replica), *y = jobspec_to_json(&b->replica);
    /* Out of memory counts as a change: a needless roll, never a missed one. */
    bool same = x && y && json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return same;
}

int cluster_service_replica_spec(const struct cluster_service *svc, uint32_t replica,
                                 struct jobspec *ret, char *err, size_t errlen)
{
    if (!svc || replica < 1)
        return errbuf_set(err, errlen, GPO_EINVAL, "no service, or replica 0");
    struct jobspec c;
    if (jobspec_copy(&svc->replica, &c))
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    jobspec_serve_release(&c.serve);
    c.requeue = false;
    c.time_limit_s = 0;
    c.serve = (struct jobspec_serve){
        .service = strdup(svc->name),
        .replica = replica,
        .generation = svc->generation,
        .probe_path = strdup(svc->probe_path),
        .probe_period_ms = svc->probe_period_ms,
        .probe_timeout_ms = svc->probe_timeout_ms,
        .probe_failures = svc->probe_failures,
        .startup_timeout_s = svc->startup_timeout_s,
        .metric = svc->replica_metric ? strdup(svc->replica_metric) : NULL,
    };
    if (!c.serve.service || !c.serve.probe_path || (svc->replica_metric && !c.serve.metric)) {
        jobspec_release(&c);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    *ret = c;
    return 0;
}

/*
 * jobspec_serve.c - a serving replica's part of a job spec ("serve"): only
 * the controller sets it (POST /v1/jobs refuses it; a stored spec keeps
 * it), the API shows it, copies and releases carry it (jobspec.h).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "cluster/jobspec.h"
#include "cluster/jobspec_int.h"
#include "util/jsonv.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define SERVE_PATH_MAX   1024 /* proto.h's PROTO_SERVE_PATH_MAX */
#define SERVE_METRIC_MAX 200  /* proto.h's PROTO_SERVE_METRIC_MAX */

/* What jsonv decodes "serve" into: the generation as jsonv's int64. */
struct serve_wire {
    char *service, *probe_path, *metric;
    uint32_t replica, probe_failures;
    int64_t generation, probe_period_ms, probe_timeout_ms, startup_timeout_s;
};

#define SW(m) offsetof(struct serve_wire, m)
static const struct jsonv_field serve_fields[] = {
    {.name = "service",
     .kind = JSONV_STRING,
     .flags = JSONV_REQUIRED,
     .offset = SW(service),
     .min = 1,
     .max = JOBSPEC_NAME_MAX},
    {.name = "replica",
     .kind = JSONV_UINT32,
     .flags = JSONV_REQUIRED,
     .offset = SW(replica),
     .min = 1,
     .max = UINT32_MAX},
    {.name = "generation",
     .kind = JSONV_INT64,
     .offset = SW(generation),
     .min = 0,
     .max = INT64_MAX},
    {.name = "probe_path",
     .kind = JSONV_STRING,
     .flags = JSONV_REQUIRED | JSONV_TEXT,
     .offset = SW(probe_path),
     .min = 1,
     .max = SERVE_PATH_MAX},
    {.name = "probe_period_ms",
     .kind = JSONV_INT64,
     .offset = SW(probe_period_ms),
     .min = 100,
     .max = 3600000},
    {.name = "probe_timeout_ms",
     .kind = JSONV_INT64,
     .offset = SW(probe_timeout_ms),
     .min = 10,
     .max = 600000},
    {.name = "probe_failures",
     .kind = JSONV_UINT32,
     .offset = SW(probe_failures),
     .min = 1,
     .max = 1000},
    {.name = "startup_timeout_s",
     .kind = JSONV_INT64,
     .offset = SW(startup_timeout_s),
     .min = 1,
     .max = 86400},
    {.name = "metric",
     .kind = JSONV_STRING,
     .flags = JSONV_NULLABLE,
     .offset = SW(metric),
     .min = 1,
     .max = SERVE_METRIC_MAX},
};

int jobspec_check_serve(struct wire *w, char *err, size_t errlen)
{
    if (!w->serve || json_is_null(w->serve))
        return 0;
    if (!w->stored)
        return jobspec_fail(err, errlen,
                            "field 'serve': set by the controller on service replicas only");
    struct serve_wire sw = {.probe_period_ms = 1000,
                            .probe_timeout_ms = 1000,
                            .probe_failures = 3,
                            .startup_timeout_s = 900};
    char msg[256] = "";
    int rc = jsonv_decode(w->serve, serve_fields, ARRAY_LEN(serve_fields), &sw, msg, sizeof(msg));
    if (rc == GPO_ENOMEM)
        return jobspec_out_of_memory(err, errlen);
    if (rc)
        return jobspec_fail(err, errlen, "field 'serve': %s", msg);
    if (sw.probe_path[0] != '/') {
        jsonv_release(serve_fields, ARRAY_LEN(serve_fields), &sw);
        return jobspec_fail(err, errlen,
                            "field 'serve.probe_path': expected a path starting with '/'");
    }
    w->spec.serve = (struct jobspec_serve){
        .service = sw.service,
        .replica = sw.replica,
        .generation = (uint64_t)sw.generation,
        .probe_path = sw.probe_path,
        .probe_period_ms = sw.probe_period_ms,
        .probe_timeout_ms = sw.probe_timeout_ms,
        .probe_failures = sw.probe_failures,
        .startup_timeout_s = sw.startup_timeout_s,
        .metric = sw.metric,
    };
    return 0;
}

int jobspec_serve_json(const struct jobspec *s, json_t *o)
{
    const struct jobspec_serve *v = &s->serve;
    if (!v->service)
        return 0;
    json_t *m = json_pack(
        "{s:s, s:I, s:I, s:s, s:I, s:I, s:I, s:I, s:o}", "service", v->service, "replica",
        (json_int_t)v->replica, "generation", (json_int_t)v->generation, "probe_path",
        v->probe_path, "probe_period_ms", (json_int_t)v->probe_period_ms, "probe_timeout_ms",
        (json_int_t)v->probe_timeout_ms, "probe_failures", (json_int_t)v->probe_failures,
        "startup_timeout_s", (json_int_t)v->startup_timeout_s, "metric",
        v->metric ? json_string(v->metric) : json_null());
    return m ? json_object_set_new(o, "serve", m) : -1;
}

static bool dup_or_null(const char *s, char **ret)
{
    *ret = s ? strdup(s) : NULL;
    return !s || *ret;
}

int jobspec_serve_copy(const struct jobspec_serve *src, struct jobspec_serve *ret)
{
    struct jobspec_serve c = *src;
    bool ok = dup_or_null(src->service, &c.service);
    ok = dup_or_null(src->probe_path, &c.probe_path) && ok;
    ok = dup_or_null(src->metric, &c.metric) && ok;
    if (!ok) {
        jobspec_serve_release(&c);
        return GPO_ENOMEM;
    }
    *ret = c;
    return 0;
}

void jobspec_serve_release(struct jobspec_serve *s)
{
    if (!s)
        return;
    free(s->service);
    free(s->probe_path);
    free(s->metric);
    *s = (struct jobspec_serve){0};
}

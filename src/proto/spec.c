/*
 * spec.c - the job's spec inside a run attempt (wire.h): the keys of the
 * controller's jobspec_to_json, with its bounds.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/wire.h"
#include "util/errbuf.h"
#include "util/sigspec.h"
#include "base/banned.h"

_Static_assert(sizeof(enum proto_dep_type) == sizeof(int), "jsonv stores an enum as an int");
_Static_assert(sizeof(enum proto_open_mode) == sizeof(int), "jsonv stores an enum as an int");
_Static_assert(sizeof(enum proto_launch) == sizeof(int), "jsonv stores an enum as an int");

static const char *const open_modes[] = {
    [PROTO_OPEN_TRUNCATE] = "truncate", [PROTO_OPEN_APPEND] = "append", NULL};
static const char *const launches[] = {
    [PROTO_LAUNCH_EVERY_NODE] = "every_node", [PROTO_LAUNCH_FIRST_NODE] = "first_node", NULL};

static const char *const dep_types[] = {
    [PROTO_DEP_AFTEROK] = "afterok", [PROTO_DEP_AFTERANY] = "afterany", NULL};

static const struct jsonv_field dep_fields[] = {
    WIRE_REQ("type", JSONV_ENUM, struct proto_dep, type, 0, 0, .choices = dep_types),
    WIRE_REQ("job", JSONV_INT64, struct proto_dep, job, 1, INT64_MAX),
};

/* "serve": a replica's probe and names (proto.h's struct proto_serve). */
static const struct jsonv_field serve_fields[] = {
    WIRE_REQ_LINE("service", struct proto_serve, service, 1, PROTO_SPEC_NAME_MAX),
    WIRE_REQ("replica", JSONV_UINT32, struct proto_serve, replica, 1, UINT32_MAX),
    /* an int64_t's decode into a uint64_t member: the same size, 0..INT64_MAX */
    WIRE_REQ("generation", JSONV_INT64, struct proto_serve, generation, 0, INT64_MAX),
    WIRE_REQ_LINE("probe_path", struct proto_serve, probe_path, 1, PROTO_SERVE_PATH_MAX),
    WIRE_REQ("probe_period_ms", JSONV_INT64, struct proto_serve, probe_period_ms, 100, 3600000),
    WIRE_REQ("probe_timeout_ms", JSONV_INT64, struct proto_serve, probe_timeout_ms, 10, 600000),
    WIRE_REQ("probe_failures", JSONV_UINT32, struct proto_serve, probe_failures, 1, 1000),
    WIRE_REQ("startup_timeout_s", JSONV_INT64, struct proto_serve, startup_timeout_s, 1, 86400),
    WIRE_OPT("metric", JSONV_STRING, struct proto_serve, metric, 1, PROTO_SERVE_METRIC_MAX,
             .flags = JSONV_NULLABLE | JSONV_TEXT),
};
_Static_assert(sizeof(((struct proto_serve *)0)->generation) == sizeof(int64_t),
               "generation is decoded as an int64_t");

#define TEXT(key, m, hi)                                                                           \
    WIRE_OPT(key, JSONV_STRING, struct wire_spec, s.m, 1, hi, .flags = JSONV_NULLABLE)
/* A name: one line of text (util/text.h), as the controller's jobspec checks it. */
#define NAME(key, m)                                                                               \
    WIRE_OPT(key, JSONV_STRING, struct wire_spec, s.m, 1, PROTO_SPEC_NAME_MAX,                     \
             .flags = JSONV_NULLABLE | JSONV_TEXT)
#define INT(key, m, hi)   WIRE_OPT(key, JSONV_INT64, struct wire_spec, s.m, 0, hi)
#define BOOL(key, m)      WIRE_OPT(key, JSONV_BOOL, struct wire_spec, s.m, 0, 0)
#define COUNT(key, m, hi) WIRE_OPT(key, JSONV_UINT32, struct wire_spec, s.m, 0, hi)

/* In the order the controller writes them. */
const struct jsonv_field wire_spec_fields[WIRE_NSPEC_FIELDS] = {
    NAME("name", name),
    NAME("team", team),
    NAME("project", project),
    NAME("model", model),
    NAME("priority", priority),
    NAME("pool", pool),
    NAME("gpu_type", gpu_type),
    WIRE_OPT("gpus", JSONV_RAW, struct wire_spec, gpus, 0, 0,
             .flags = JSONV_NULLABLE | JSONV_PRESENCE,
             .presence_offset = offsetof(struct wire_spec, gpus_p)),
    INT("gpu_mem_mib", gpu_mem_mib, PROTO_SPEC_GPU_MEM_MAX),
    INT("min_gpu_mem_mib", min_gpu_mem_mib, PROTO_SPEC_GPU_MEM_MAX),
    WIRE_OPT("mig_profile", JSONV_STRING, struct wire_spec, s.mig_profile, 1, PROTO_SPEC_NAME_MAX,
             .flags = JSONV_NULLABLE | JSONV_TEXT),
    WIRE_OPT("cpus", JSONV_UINT32, struct wire_spec, s.cpus, 0, PROTO_SPEC_CPUS_MAX),
    INT("mem_mib", mem_mib, PROTO_SPEC_MEM_MAX),
    INT("time_limit_s", time_limit_s, PROTO_TIME_LIMIT_MAX),
    BOOL("multi_node", multi_node),
    BOOL("checkpointable", checkpointable),
    WIRE_OPT("command", JSONV_STRINGS, struct wire_spec, s.argv, 0, PROTO_ARG_MAX,
             .flags = JSONV_NULLABLE, .max_items = PROTO_ARGV_MAX,
             .count_offset = offsetof(struct wire_spec, s.argc)),
    TEXT("script", script, PROTO_SCRIPT_MAX),
    TEXT("workdir", workdir, PROTO_PATH_MAX),
    WIRE_OPT("env", JSONV_RAW, struct wire_spec, env, 0, 0, .flags = JSONV_NULLABLE),
    WIRE_OPT("max_retries", JSONV_UINT32, struct wire_spec, s.max_retries, 0, PROTO_RETRIES_MAX),
    BOOL("requeue", requeue),
    WIRE_OPT("dependencies", JSONV_OBJECTS, struct wire_spec, s.deps, 0, 0, .flags = JSONV_NULLABLE,
             .max_items = PROTO_DEPS_MAX, .count_offset = offsetof(struct wire_spec, s.ndeps),
             .elem_size = sizeof(struct proto_dep), .sub = dep_fields,
             .nsub = ARRAY_LEN(dep_fields)),
    TEXT("array", array, PROTO_ARRAY_TEXT_MAX),
    TEXT("output", output, PROTO_PATH_MAX),
    TEXT("error", error, PROTO_PATH_MAX),
    COUNT("nodes", nodes, PROTO_GANG_MAX),
    COUNT("gpus_per_node", gpus_per_node, PROTO_SPEC_GPUS_MAX),
    COUNT("ntasks", ntasks, PROTO_TASKS_MAX),
    COUNT("ntasks_per_node", ntasks_per_node, PROTO_TASKS_MAX),
    COUNT("cpus_per_task", cpus_per_task, PROTO_SPEC_CPUS_MAX),
    COUNT("gpus_per_task", gpus_per_task, PROTO_SPEC_GPUS_MAX),
    INT("mem_per_node_mib", mem_per_node_mib, PROTO_SPEC_MEM_MAX),
    INT("mem_per_cpu_mib", mem_per_cpu_mib, PROTO_SPEC_MEM_MAX),
    INT("mem_per_gpu_mib", mem_per_gpu_mib, PROTO_SPEC_MEM_MAX),
    BOOL("mem_whole_node", mem_whole_node),
    BOOL("exclusive", exclusive),
    WIRE_OPT("constraint", JSONV_STRING, struct wire_spec, s.constraint, 1, PROTO_CONSTRAINT_MAX,
             .flags = JSONV_NULLABLE | JSONV_TEXT),
    WIRE_OPT("signal", JSONV_STRING, struct wire_spec, signal, 1, SIGSPEC_TEXT_MAX,
             .flags = JSONV_NULLABLE | JSONV_TEXT),
    WIRE_OPT("open_mode", JSONV_ENUM, struct wire_spec, s.open_mode, 0, 0, .choices = open_modes),
    WIRE_OPT("launch", JSONV_ENUM, struct wire_spec, s.launch, 0, 0, .choices = launches),
    TEXT("submit_dir", submit_dir, PROTO_PATH_MAX),
    BOOL("hold", hold),
    INT("begin", begin, PROTO_BEGIN_MAX),
    WIRE_OPT("serve", JSONV_OBJECT, struct wire_spec, s.serve, 0, 0, .flags = JSONV_NULLABLE,
             .sub = serve_fields, .nsub = ARRAY_LEN(serve_fields)),
};

/* "gpus": whole GPUs as an integer (or a whole real), or a fraction below 1
 * with at most three decimals; in thousandths. */
static int gpus_read(const json_t *v, int64_t *ret)
{
    if (!v) {
        *ret = 0;
        return 0;
    }
    if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        if (n < 0 || n > PROTO_SPEC_GPUS_MAX)
            return GPO_ERANGE;
        *ret = (int64_t)n * 1000;
        return 0;
    }
    double x = json_is_real(v) ? json_real_value(v) : NAN;
    if (!isfinite(x))
        return GPO_EINVAL;
    if (x < 0 || x > PROTO_SPEC_GPUS_MAX)
        return GPO_ERANGE;
    double milli = round(x * 1000);
    if ((x >= 1 && x != floor(x)) || fabs(x * 1000 - milli) > 1e-9)
        return GPO_EINVAL;
    *ret = (int64_t)milli;
    return 0;
}

/* A Prometheus metric name: [a-zA-Z_:][a-zA-Z0-9_:]*. */
static bool metric_name_ok(const char *s)
{
    for (size_t k = 0; s[k]; k++) {
        char c = s[k];
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
        if (!alpha && !(k > 0 && c >= '0' && c <= '9'))
            return false;
    }
    return s[0] != '\0';
}

static int serve_check(const struct proto_serve *v, const char *path, char *err, size_t errlen)
{
    if (!v->service)
        return 0;
    if (v->probe_path[0] != '/')
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field '%s.serve.probe_path': expected a path that starts with '/'",
                          path);
    if (v->metric && !metric_name_ok(v->metric))
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field '%s.serve.metric': not a Prometheus metric name "
                          "([a-zA-Z_:][a-zA-Z0-9_:]*)",
                          path);
    return 0;
}

int wire_spec_check(const struct wire_spec *w, const char *path, char *err, size_t errlen)
{
    int64_t milli;
    char msg[160];
    struct sigspec sig;
    if (w->signal && sigspec_parse(w->signal, &sig, msg, sizeof(msg)) != 0)
        return errbuf_set(err, errlen, GPO_EINVAL, "field '%s.signal': %s", path, msg);
    int rc = gpus_read(w->gpus, &milli);
    if (rc)
        return errbuf_set(err, errlen, rc,
                          "field '%s.gpus': expected whole GPUs (0..%d) or a fraction below 1 "
                          "with at most three decimals",
                          path, PROTO_SPEC_GPUS_MAX);
    rc = serve_check(&w->s.serve, path, err, errlen);
    if (rc || !w->env)
        return rc;
    if (!json_is_object(w->env))
        return errbuf_set(err, errlen, GPO_EINVAL, "field '%s.env': expected an object, got %s",
                          path, jsonv_type_name(w->env));
    if (json_object_size(w->env) > PROTO_ENV_MAX)
        return errbuf_set(err, errlen, GPO_ERANGE, "field '%s.env': %zu variables, at most %d",
                          path, json_object_size(w->env), PROTO_ENV_MAX);
    const char *name;
    json_t *v;
    json_object_foreach(w->env, name, v)
    {
        char q[JSONV_QUOTE_MAX + 4];
        size_t len = strlen(name);
        const char *shown = jsonv_quote(name, len, q);
        if (len < 1 || len > PROTO_SPEC_NAME_MAX)
            return errbuf_set(err, errlen, GPO_ERANGE,
                              "field '%s.env': the name '%s' is not 1 to %d bytes", path, shown,
                              PROTO_SPEC_NAME_MAX);
        if (!json_is_string(v))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field '%s.env.%s': expected a string, got %s", path, shown,
                              jsonv_type_name(v));
        size_t vlen = json_string_length(v);
        if (strlen(json_string_value(v)) != vlen)
            return errbuf_set(err, errlen, GPO_EINVAL, "field '%s.env.%s': holds a NUL", path,
                              shown);
        if (vlen > PROTO_ENV_VALUE_MAX)
            return errbuf_set(err, errlen, GPO_ERANGE, "field '%s.env.%s': %zu bytes, at most %d",
                              path, shown, vlen, PROTO_ENV_VALUE_MAX);
    }
    return 0;
}

static void env_free(struct proto_env *env, size_t n)
{
    for (size_t k = 0; env && k < n; k++) {
        free(env[k].name);
        free(env[k].value);
    }
    free(env);
}

int wire_spec_take(struct wire_spec *w, struct proto_spec *ret)
{
    size_t n = w->env ? json_object_size(w->env) : 0, k = 0;
    struct proto_env *env = n ? calloc(n, sizeof(*env)) : NULL;
    if (n && !env)
        return GPO_ENOMEM;
    const char *name;
    json_t *v;
    json_object_foreach(w->env, name, v)
    {
        if (k == n)
            break;
        struct proto_env *at = &env[k++];
        at->name = strdup(name);
        at->value = strdup(json_string_value(v));
        if (!at->name || !at->value) {
            env_free(env, k);
            return GPO_ENOMEM;
        }
    }
    int64_t milli = 0;
    gpus_read(w->gpus, &milli);
    struct sigspec sig = {0};
    if (w->signal)
        sigspec_parse(w->signal, &sig, NULL, 0);
    free(w->signal);
    w->signal = NULL;
    *ret = w->s;
    ret->signal = (uint32_t)sig.num;
    ret->signal_before_s = (uint32_t)sig.before_s;
    ret->signal_batch_only = sig.batch_only;
    ret->gpus_milli = milli;
    ret->env = env;
    ret->nenv = k;
    memset(&w->s, 0, sizeof(w->s));
    w->gpus = w->env = NULL;
    return 0;
}

void wire_spec_release(struct proto_spec *s)
{
    if (!s)
        return;
    char *texts[] = {s->name,     s->script,  s->workdir,    s->output,     s->error,
                     s->team,     s->project, s->model,      s->priority,   s->pool,
                     s->gpu_type, s->array,   s->submit_dir, s->constraint, s->mig_profile};
    for (size_t k = 0; k < ARRAY_LEN(texts); k++)
        free(texts[k]);
    free(s->serve.service);
    free(s->serve.probe_path);
    free(s->serve.metric);
    wire_free_strs(s->argv, s->argc);
    env_free(s->env, s->nenv);
    free(s->deps);
    memset(s, 0, sizeof(*s));
}

static json_t *gpus_json(struct wire_enc *e, int64_t milli)
{
    if (milli % 1000 == 0)
        return wire_int(e, milli / 1000);
    json_t *v = e->rc ? NULL : json_real((double)milli / 1000.0);
    if (!v)
        wire_fail(e, GPO_ENOMEM);
    return v;
}

static json_t *env_json(struct wire_enc *e, const struct proto_spec *s)
{
    json_t *o = wire_object(e);
    for (size_t k = 0; o && !e->rc && k < s->nenv; k++) {
        json_t *v = wire_str(e, s->env[k].value);
        if (!e->rc &&
            (!s->env[k].name || jsonv_check_utf8(s->env[k].name, strlen(s->env[k].name)) != 0)) {
            json_decref(v);
            wire_fail(e, GPO_EINVAL);
        } else if (v && json_object_set_new(o, s->env[k].name, v) != 0) {
            wire_fail(e, GPO_ENOMEM);
        }
    }
    if (e->rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *deps_json(struct wire_enc *e, const struct proto_spec *s)
{
    json_t *a = e->rc ? NULL : json_array();
    if (!a)
        wire_fail(e, GPO_ENOMEM);
    for (size_t k = 0; a && !e->rc && k < s->ndeps; k++) {
        json_t *o = wire_object(e);
        if ((unsigned)s->deps[k].type > PROTO_DEP_AFTERANY)
            wire_fail(e, GPO_EINVAL);
        else
            wire_set(e, o, "type", wire_str(e, dep_types[s->deps[k].type]));
        wire_set(e, o, "job", wire_int(e, s->deps[k].job));
        wire_append(e, a, o);
    }
    if (e->rc) {
        json_decref(a);
        return NULL;
    }
    return a;
}

static json_t *serve_json(struct wire_enc *e, const struct proto_serve *v)
{
    json_t *o = wire_object(e);
    wire_set(e, o, "service", wire_str(e, v->service));
    wire_set(e, o, "replica", wire_int(e, v->replica));
    if (v->generation > INT64_MAX)
        wire_fail(e, GPO_EINVAL);
    wire_set(e, o, "generation", wire_int(e, (int64_t)v->generation));
    wire_set(e, o, "probe_path", wire_str(e, v->probe_path));
    wire_set(e, o, "probe_period_ms", wire_int(e, v->probe_period_ms));
    wire_set(e, o, "probe_timeout_ms", wire_int(e, v->probe_timeout_ms));
    wire_set(e, o, "probe_failures", wire_int(e, v->probe_failures));
    wire_set(e, o, "startup_timeout_s", wire_int(e, v->startup_timeout_s));
    wire_set(e, o, "metric", wire_str_or_null(e, v->metric));
    if (e->rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *wire_spec_json(struct wire_enc *e, const struct proto_spec *s)
{
    json_t *o = wire_object(e);
    const struct {
        const char *key;
        const char *v;
    } labels[] = {{"name", s->name},        {"team", s->team},         {"project", s->project},
                  {"model", s->model},      {"priority", s->priority}, {"pool", s->pool},
                  {"gpu_type", s->gpu_type}};
    for (size_t k = 0; k < ARRAY_LEN(labels); k++)
        wire_set(e, o, labels[k].key, wire_str_or_null(e, labels[k].v));
    wire_set(e, o, "gpus", gpus_json(e, s->gpus_milli));
    wire_set(e, o, "gpu_mem_mib", wire_int(e, s->gpu_mem_mib));
    wire_set(e, o, "min_gpu_mem_mib", wire_int(e, s->min_gpu_mem_mib));
    if (s->mig_profile)
        wire_set(e, o, "mig_profile", wire_str(e, s->mig_profile));
    wire_set(e, o, "cpus", wire_int(e, s->cpus));
    wire_set(e, o, "mem_mib", wire_int(e, s->mem_mib));
    wire_set(e, o, "time_limit_s", wire_int(e, s->time_limit_s));
    wire_set(e, o, "multi_node", json_boolean(s->multi_node));
    wire_set(e, o, "checkpointable", json_boolean(s->checkpointable));
    wire_set(e, o, "command", s->argv ? wire_strs(e, s->argv, s->argc) : json_null());
    wire_set(e, o, "script", wire_str_or_null(e, s->script));
    wire_set(e, o, "workdir", wire_str_or_null(e, s->workdir));
    wire_set(e, o, "env", env_json(e, s));
    wire_set(e, o, "max_retries", wire_int(e, s->max_retries));
    wire_set(e, o, "requeue", json_boolean(s->requeue));
    wire_set(e, o, "dependencies", deps_json(e, s));
    wire_set(e, o, "array", wire_str_or_null(e, s->array));
    wire_set(e, o, "output", wire_str_or_null(e, s->output));
    wire_set(e, o, "error", wire_str_or_null(e, s->error));
    static const char *const counts[] = {"nodes",           "gpus_per_node", "ntasks",
                                         "ntasks_per_node", "cpus_per_task", "gpus_per_task"};
    const uint32_t count_v[] = {s->nodes,           s->gpus_per_node, s->ntasks,
                                s->ntasks_per_node, s->cpus_per_task, s->gpus_per_task};
    for (size_t k = 0; k < ARRAY_LEN(counts); k++)
        wire_set(e, o, counts[k], wire_int(e, count_v[k]));
    wire_set(e, o, "mem_per_node_mib", wire_int(e, s->mem_per_node_mib));
    wire_set(e, o, "mem_per_cpu_mib", wire_int(e, s->mem_per_cpu_mib));
    wire_set(e, o, "mem_per_gpu_mib", wire_int(e, s->mem_per_gpu_mib));
    wire_set(e, o, "mem_whole_node", json_boolean(s->mem_whole_node));
    wire_set(e, o, "exclusive", json_boolean(s->exclusive));
    wire_set(e, o, "constraint", wire_str_or_null(e, s->constraint));
    char sig[SIGSPEC_TEXT_MAX];
    sigspec_format(
        &(struct sigspec){(int32_t)s->signal, (int32_t)s->signal_before_s, s->signal_batch_only},
        sig, sizeof(sig));
    if (s->signal > SIGSPEC_NUM_MAX || s->signal_before_s > SIGSPEC_BEFORE_MAX)
        wire_fail(e, GPO_EINVAL);
    wire_set(e, o, "signal", sig[0] ? wire_str(e, sig) : json_null());
    if ((unsigned)s->open_mode > PROTO_OPEN_APPEND ||
        (unsigned)s->launch > PROTO_LAUNCH_FIRST_NODE) {
        wire_fail(e, GPO_EINVAL);
    } else {
        wire_set(e, o, "open_mode", wire_str(e, open_modes[s->open_mode]));
        wire_set(e, o, "launch", wire_str(e, launches[s->launch]));
    }
    wire_set(e, o, "submit_dir", wire_str_or_null(e, s->submit_dir));
    wire_set(e, o, "hold", json_boolean(s->hold));
    wire_set(e, o, "begin", wire_int(e, s->begin));
    if (s->serve.service)
        wire_set(e, o, "serve", serve_json(e, &s->serve));
    if (e->rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/*
 * jobspec.c - job submissions: util/jsonv's field table checks each field's
 * shape, then a table of steps checks the rules between fields; the JSON the
 * API shows (Slurm's array syntax: jobspec_array.c; the serve part:
 * jobspec_serve.c).
 *
 * Decisions the header leaves open:
 *  - Optional strings and lists (team .. gpu_type, command, script, workdir,
 *    env, dependencies, array, output, error) take null as "not given", and
 *    jobspec_to_json writes null for them: its output decodes to the same
 *    spec. A null or absent "name" becomes "job".
 *  - "gpus" and "gpu_mem_mib" exclude each other by value: asking for GPUs
 *    (whole or a fraction) and for a memory share is refused, but "gpus": 0
 *    next to "gpu_mem_mib" is fine, since jobspec_to_json writes both.
 *  - "gpus" as a real that is whole (2.0, 1e3) means whole GPUs; 0 < x < 1
 *    with at most three decimals is a fraction.
 *  - "gpu_mem_mib" has the range of "min_gpu_mem_mib" (0..1 TiB; 0: none).
 *  - Both keys of a dependency are required. Env names are at most
 *    JOBSPEC_NAME_MAX bytes. The array text is at most ARRAY_TEXT_MAX bytes,
 *    its running limit 1..JOBSPEC_ARRAY_MAX, and a step needs a range.
 *  - Messages quote at most JSONV_QUOTE_MAX bytes of user text, control
 *    characters (and the bytes of invalid UTF-8) shown as '?'.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/jobspec.h"
#include "cluster/jobspec_int.h"
#include "util/jsonv.h"
#include "util/text.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define GPU_MEM_MAX_MIB  (INT64_C(1) << 20) /* 1 TiB */
#define TIME_LIMIT_MAX_S (INT64_C(365) * 86400)
#define ARRAY_TEXT_MAX   (1 << 17) /* bytes: JOBSPEC_ARRAY_MAX indices listed one by one fit */

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Parenthesised: make lint defines jobspec_fail as a macro (jobspec_int.h). */
int(jobspec_fail)(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errbuf_vset(err, errlen, GPO_EINVAL, fmt, ap);
    va_end(ap);
    return GPO_EINVAL;
}
#define fail jobspec_fail

int jobspec_out_of_memory(char *err, size_t errlen)
{
    if (err && errlen)
        snprintf(err, errlen, "out of memory");
    return GPO_ENOMEM;
}

#define out_of_memory jobspec_out_of_memory

static char *copy_text(const char *s, size_t len)
{
    char *p = malloc(len + 1);
    if (p) {
        memcpy(p, s, len);
        p[len] = '\0';
    }
    return p;
}

static char **str_member(struct jobspec *s, size_t offset)
{
    return (char **)(void *)((char *)s + offset);
}

static const char *str_get(const struct jobspec *s, size_t offset)
{
    return *(char *const *)(const void *)((const char *)s + offset);
}

/* Every plain string a spec owns: release and copy walk this. */
static const size_t owned_strings[] = {
    offsetof(struct jobspec, name),        offsetof(struct jobspec, team),
    offsetof(struct jobspec, project),     offsetof(struct jobspec, model),
    offsetof(struct jobspec, priority),    offsetof(struct jobspec, pool),
    offsetof(struct jobspec, gpu_type),    offsetof(struct jobspec, script),
    offsetof(struct jobspec, workdir),     offsetof(struct jobspec, array_text),
    offsetof(struct jobspec, output),      offsetof(struct jobspec, error),
    offsetof(struct jobspec, constraint),  offsetof(struct jobspec, submit_dir),
    offsetof(struct jobspec, mig_profile),
};

/* Names checked for shape only: [A-Za-z0-9._-]. */
static const struct {
    const char *key;
    size_t offset;
} labels[] = {
    {"team", offsetof(struct jobspec, team)},   {"project", offsetof(struct jobspec, project)},
    {"model", offsetof(struct jobspec, model)}, {"priority", offsetof(struct jobspec, priority)},
    {"pool", offsetof(struct jobspec, pool)},   {"gpu_type", offsetof(struct jobspec, gpu_type)},
};

/* ---- decoding ---------------------------------------------------------- */

static const char *const dep_types[] = {"afterok", "afterany", NULL}; /* enum order */

static const struct jsonv_field dep_fields[] = {
    {.name = "type",
     .kind = JSONV_ENUM,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct jobspec_dep, type),
     .choices = dep_types},
    {.name = "job",
     .kind = JSONV_INT64,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct jobspec_dep, job),
     .min = 1,
     .max = INT64_MAX},
};

#define SPEC(m) offsetof(struct wire, spec.m)
#define NAME_FIELD(key, m)                                                                         \
    {                                                                                              \
        .name = key, .kind = JSONV_STRING, .flags = JSONV_NULLABLE, .offset = SPEC(m), .min = 1,   \
        .max = JOBSPEC_NAME_MAX                                                                    \
    }
#define INT_FIELD(key, off, lo, hi)                                                                \
    {                                                                                              \
        .name = key, .kind = JSONV_INT64, .offset = off, .min = lo, .max = hi                      \
    }
#define BOOL_FIELD(key, m)                                                                         \
    {                                                                                              \
        .name = key, .kind = JSONV_BOOL, .offset = SPEC(m)                                         \
    }
#define COUNT_FIELD(key, m, hi)                                                                    \
    {                                                                                              \
        .name = key, .kind = JSONV_UINT32, .offset = SPEC(m), .min = 0, .max = hi                  \
    }
#define PATH_FIELD(key, m)                                                                         \
    {                                                                                              \
        .name = key, .kind = JSONV_STRING, .flags = JSONV_NULLABLE, .offset = SPEC(m), .min = 1,   \
        .max = JOBSPEC_PATH_MAX                                                                    \
    }

/* In the order jobspec_to_json writes them; jsonv reports in this order. */
static const struct jsonv_field fields[] = {
    NAME_FIELD("name", name),
    NAME_FIELD("team", team),
    NAME_FIELD("project", project),
    NAME_FIELD("model", model),
    NAME_FIELD("priority", priority),
    NAME_FIELD("pool", pool),
    NAME_FIELD("gpu_type", gpu_type),
    {.name = "gpus",
     .kind = JSONV_RAW,
     .flags = JSONV_NULLABLE | JSONV_PRESENCE,
     .offset = offsetof(struct wire, gpus),
     .presence_offset = offsetof(struct wire, gpus_p)},
    INT_FIELD("gpu_mem_mib", SPEC(gpu_mem_mib), 0, GPU_MEM_MAX_MIB),
    INT_FIELD("min_gpu_mem_mib", SPEC(min_gpu_mem_mib), 0, GPU_MEM_MAX_MIB),
    {.name = "mig_profile",
     .kind = JSONV_STRING,
     .flags = JSONV_NULLABLE,
     .offset = SPEC(mig_profile),
     .min = 1,
     .max = JOBSPEC_NAME_MAX},
    {.name = "cpus",
     .kind = JSONV_INT64,
     .flags = JSONV_PRESENCE,
     .offset = offsetof(struct wire, cpus),
     .presence_offset = offsetof(struct wire, cpus_p),
     .min = 0,
     .max = CPUS_MAX},
    {.name = "mem_mib",
     .kind = JSONV_INT64,
     .flags = JSONV_PRESENCE,
     .offset = SPEC(mem_mib),
     .presence_offset = offsetof(struct wire, mem_p),
     .min = 0,
     .max = HOST_MEM_MAX_MIB},
    INT_FIELD("time_limit_s", SPEC(time_limit_s), 0, TIME_LIMIT_MAX_S),
    BOOL_FIELD("multi_node", multi_node),
    BOOL_FIELD("checkpointable", checkpointable),
    {.name = "command",
     .kind = JSONV_STRINGS,
     .flags = JSONV_NULLABLE,
     .offset = SPEC(argv),
     .count_offset = SPEC(argc),
     .max_items = JOBSPEC_ARGV_MAX,
     .min = 0,
     .max = JOBSPEC_ARG_MAX},
    {.name = "script",
     .kind = JSONV_STRING,
     .flags = JSONV_NULLABLE,
     .offset = SPEC(script),
     .min = 1,
     .max = JOBSPEC_SCRIPT_MAX},
    PATH_FIELD("workdir", workdir),
    {.name = "env",
     .kind = JSONV_RAW,
     .flags = JSONV_NULLABLE,
     .offset = offsetof(struct wire, env)},
    {.name = "max_retries",
     .kind = JSONV_UINT32,
     .offset = SPEC(max_retries),
     .min = 0,
     .max = JOBSPEC_RETRIES_MAX},
    BOOL_FIELD("requeue", requeue),
    {.name = "dependencies",
     .kind = JSONV_OBJECTS,
     .flags = JSONV_NULLABLE,
     .offset = SPEC(deps),
     .count_offset = SPEC(ndeps),
     .max_items = JOBSPEC_DEPS_MAX,
     .elem_size = sizeof(struct jobspec_dep),
     .sub = dep_fields,
     .nsub = ARRAY_LEN(dep_fields)},
    {.name = "array",
     .kind = JSONV_STRING,
     .flags = JSONV_NULLABLE,
     .offset = SPEC(array_text),
     .min = 1,
     .max = ARRAY_TEXT_MAX},
    PATH_FIELD("output", output),
    PATH_FIELD("error", error),
    COUNT_FIELD("nodes", nodes, JOBSPEC_GPUS_MAX),
    COUNT_FIELD("gpus_per_node", gpus_per_node, JOBSPEC_GPUS_MAX),
    COUNT_FIELD("ntasks", ntasks, JOBSPEC_TASKS_MAX),
    COUNT_FIELD("ntasks_per_node", ntasks_per_node, JOBSPEC_TASKS_MAX),
    COUNT_FIELD("cpus_per_task", cpus_per_task, CPUS_MAX),
    COUNT_FIELD("gpus_per_task", gpus_per_task, JOBSPEC_GPUS_MAX),
    INT_FIELD("mem_per_node_mib", SPEC(mem_per_node_mib), 0, HOST_MEM_MAX_MIB),
    INT_FIELD("mem_per_cpu_mib", SPEC(mem_per_cpu_mib), 0, HOST_MEM_MAX_MIB),
    INT_FIELD("mem_per_gpu_mib", SPEC(mem_per_gpu_mib), 0, HOST_MEM_MAX_MIB),
    BOOL_FIELD("mem_whole_node", mem_whole_node),
    BOOL_FIELD("exclusive", exclusive),
    {.name = "constraint",
     .kind = JSONV_STRING,
     .flags = JSONV_NULLABLE | JSONV_TEXT,
     .offset = SPEC(constraint),
     .min = 1,
     .max = JOBSPEC_CONSTRAINT_MAX},
    {.name = "signal",
     .kind = JSONV_STRING,
     .flags = JSONV_NULLABLE | JSONV_TEXT,
     .offset = offsetof(struct wire, signal),
     .min = 1,
     .max = 64},
    {.name = "open_mode",
     .kind = JSONV_ENUM,
     .offset = SPEC(open_mode),
     .choices = jobspec_open_modes},
    {.name = "launch", .kind = JSONV_ENUM, .offset = SPEC(launch), .choices = jobspec_launches},
    PATH_FIELD("submit_dir", submit_dir),
    BOOL_FIELD("hold", hold),
    INT_FIELD("begin", SPEC(begin), 0, JOBSPEC_BEGIN_MAX),
    {.name = "serve",
     .kind = JSONV_RAW,
     .flags = JSONV_NULLABLE,
     .offset = offsetof(struct wire, serve)},
};

static bool is_label_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

static int check_names(struct wire *w, char *err, size_t errlen)
{
    int rc = text_check_line("name", w->spec.name, err, errlen);
    if (rc)
        return rc;
    for (size_t k = 0; k < ARRAY_LEN(labels); k++) {
        const char *s = str_get(&w->spec, labels[k].offset);
        for (size_t i = 0; s && s[i]; i++) {
            if (!is_label_char((unsigned char)s[i])) {
                char q[JSONV_QUOTE_MAX + 4];
                return fail(err, errlen,
                            "field '%s': '%s' may hold only letters, digits, '.', '_' and '-'",
                            labels[k].key, jsonv_quote(s, strlen(s), q));
            }
        }
    }
    return 0;
}

/* A JSON integer is whole GPUs; a real is whole GPUs when whole, else a
 * fraction below 1 with at most three decimals. */
static int check_gpus(struct wire *w, char *err, size_t errlen)
{
    struct jobspec *s = &w->spec;
    const json_t *v = w->gpus;
    if (w->gpus_p == JSONV_GIVEN && json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        if (n < 0 || n > JOBSPEC_GPUS_MAX)
            return fail(err, errlen, "field 'gpus': %lld is out of range 0..%d", (long long)n,
                        JOBSPEC_GPUS_MAX);
        s->gpus = (int32_t)n;
    } else if (w->gpus_p == JSONV_GIVEN && json_is_real(v)) {
        double x = json_real_value(v);
        if (!isfinite(x) || x < 0 || x > JOBSPEC_GPUS_MAX)
            return fail(err, errlen, "field 'gpus': %g is out of range 0..%d", x, JOBSPEC_GPUS_MAX);
        if (x >= 1 && x != floor(x))
            return fail(err, errlen,
                        "field 'gpus': %g is neither whole GPUs nor a fraction below 1", x);
        if (x > 0 && x < 1) {
            /* Doubles near k/1000 are within 1e-9 of it after scaling. */
            double milli = round(x * 1000);
            if (fabs(x * 1000 - milli) > 1e-9 || milli < 1 || milli > 999)
                return fail(err, errlen, "field 'gpus': a fraction has at most three decimals");
            s->gpu_milli = (int32_t)milli;
        } else {
            s->gpus = (int32_t)x;
        }
    } else if (w->gpus_p != JSONV_ABSENT) {
        return fail(err, errlen, "field 'gpus': expected an integer or a fraction below 1, got %s",
                    jsonv_type_name(v));
    }
    if ((s->gpus > 0 || s->gpu_milli > 0) && s->gpu_mem_mib > 0)
        return fail(err, errlen,
                    "fields 'gpus' and 'gpu_mem_mib' are exclusive: ask for GPUs or for a share "
                    "of one GPU's memory");
    if (s->multi_node && s->gpu_milli > 0)
        return fail(err, errlen,
                    "fields 'gpus' and 'multi_node': a fraction of a GPU cannot span nodes");
    if (s->multi_node && s->gpu_mem_mib > 0)
        return fail(err, errlen,
                    "fields 'gpu_mem_mib' and 'multi_node': a share of one GPU cannot span nodes");
    return 0;
}

static int check_program(struct wire *w, char *err, size_t errlen)
{
    const struct jobspec *s = &w->spec;
    if (s->argv && s->script)
        return fail(err, errlen, "fields 'command' and 'script' are exclusive: give one");
    if (!s->argv && !s->script)
        return fail(err, errlen, "missing required field 'command' or 'script'");
    if (s->argv && s->argc == 0)
        return fail(err, errlen, "field 'command': must not be empty");
    if (s->argv && s->argv[0][0] == '\0')
        return fail(err, errlen, "field 'command[0]': the program name must not be empty");
    if (s->workdir && s->workdir[0] != '/')
        return fail(err, errlen, "field 'workdir': must be an absolute path (start with '/')");
    return 0;
}

static bool is_env_name(const char *s, size_t len)
{
    if (len == 0 || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return false;
    }
    return true;
}

static int compare_env(const void *a, const void *b)
{
    return strcmp(((const struct jobspec_env *)a)->name, ((const struct jobspec_env *)b)->name);
}

/* Entries go into s->env as they are made, so that a failure part way is
 * freed by jobspec_release. */
static int check_env(struct wire *w, char *err, size_t errlen)
{
    struct jobspec *s = &w->spec;
    json_t *env = w->env;
    char q[JSONV_QUOTE_MAX + 4];
    if (!env)
        return 0;
    if (!json_is_object(env))
        return fail(err, errlen, "field 'env': expected an object, got %s", jsonv_type_name(env));
    size_t n = json_object_size(env);
    if (n > JOBSPEC_ENV_MAX)
        return fail(err, errlen, "field 'env': %zu variables, at most %d allowed", n,
                    JOBSPEC_ENV_MAX);
    if (n == 0)
        return 0;
    if (!(s->env = calloc(n, sizeof(*s->env))))
        return out_of_memory(err, errlen);
    for (void *it = json_object_iter(env); it; it = json_object_iter_next(env, it)) {
        const char *name = json_object_iter_key(it);
        size_t nlen = json_object_iter_key_len(it);
        json_t *v = json_object_iter_value(it);
        if (nlen > JOBSPEC_NAME_MAX)
            return fail(err, errlen, "field 'env': a variable name has at most %d bytes",
                        JOBSPEC_NAME_MAX);
        if (!is_env_name(name, nlen))
            return fail(err, errlen,
                        "field 'env': '%s' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
                        jsonv_quote(name, nlen, q));
        if (!json_is_string(v))
            return fail(err, errlen, "field 'env.%s': expected a string, got %s", name,
                        jsonv_type_name(v));
        const char *value = json_string_value(v);
        size_t vlen = json_string_length(v);
        if (vlen > JOBSPEC_ENV_VALUE_MAX)
            return fail(err, errlen, "field 'env.%s': length %zu is out of range 0..%d bytes", name,
                        vlen, JOBSPEC_ENV_VALUE_MAX);
        if (strlen(value) != vlen)
            return fail(err, errlen, "field 'env.%s': contains a NUL character (\\u0000)", name);
        if (jsonv_check_utf8(value, vlen) < 0)
            return fail(err, errlen, "field 'env.%s': not valid UTF-8", name);
        struct jobspec_env *e = &s->env[s->nenv];
        e->name = copy_text(name, nlen);
        e->value = copy_text(value, vlen);
        if (!e->name || !e->value) {
            free(e->name);
            free(e->value);
            *e = (struct jobspec_env){0};
            return out_of_memory(err, errlen);
        }
        s->nenv++;
    }
    qsort(s->env, s->nenv, sizeof(*s->env), compare_env);
    return 0;
}

static int check_deps(struct wire *w, char *err, size_t errlen)
{
    struct jobspec *s = &w->spec;
    if (s->deps && s->ndeps == 0) {
        free(s->deps); /* "[]" and absent mean the same: keep one form */
        s->deps = NULL;
    }
    for (size_t i = 1; i < s->ndeps; i++)
        for (size_t j = 0; j < i; j++)
            // NOLINTNEXTLINE(clang-analyzer-core.NullDereference): ndeps > 0 means deps is set
            if (s->deps[i].job == s->deps[j].job)
                return fail(err, errlen, "field 'dependencies[%zu]': job %lld is already listed", i,
                            (long long)s->deps[i].job);
    return 0;
}

static int check_array(struct wire *w, char *err, size_t errlen)
{
    char msg[256];
    if (!w->spec.array_text)
        return 0;
    int rc = jobspec_array_parse(w->spec.array_text, &w->spec.array, msg, sizeof(msg));
    if (rc == GPO_ENOMEM)
        return out_of_memory(err, errlen);
    return rc < 0 ? fail(err, errlen, "field 'array': %s", msg) : 0;
}

static int fill_defaults(struct wire *w, char *err, size_t errlen)
{
    if (!w->spec.name && !(w->spec.name = copy_text("job", 3)))
        return out_of_memory(err, errlen);
    return 0;
}

/* A job runs on at least one CPU, and with some memory: "mem_mib": 0 is
 * refused rather than read as "no reservation" (Slurm's --mem=0, the whole
 * node, is "mem_whole_node"). A stored spec (jobspec_decode_stored) may
 * hold 0, which reserves nothing. */
static int check_resources(struct wire *w, char *err, size_t errlen)
{
    if (w->stored)
        return 0;
    if (w->cpus_p == JSONV_GIVEN && w->cpus == 0)
        return fail(err, errlen,
                    "field 'cpus': 0 is out of range 1..%d (a job runs on at least one "
                    "CPU; leave it out for 1)",
                    CPUS_MAX);
    if (w->mem_p == JSONV_GIVEN && w->spec.mem_mib == 0 && !w->spec.mem_whole_node)
        return fail(err, errlen,
                    "field 'mem_mib': 0 is out of range 1..%lld (for Slurm's --mem=0, the "
                    "whole node, set 'mem_whole_node'; or leave it out for 1024)",
                    (long long)HOST_MEM_MAX_MIB);
    return 0;
}

/* The rules between fields, in the order their fields come in the table. */
static int (*const steps[])(struct wire *w, char *err, size_t errlen) = {
    check_names,       check_resources,     check_gpus,    jobspec_check_shape,
    jobspec_check_mig, check_program,       check_env,     check_deps,
    check_array,       jobspec_check_serve, fill_defaults,
};

static int decode(const json_t *body, bool stored, struct jobspec *ret, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!ret)
        return fail(err, errlen, "no destination");
    struct wire w = {.spec = {.mem_mib = 1024, .requeue = true}, .stored = stored, .cpus = 1};
    int rc = jsonv_decode(body, fields, ARRAY_LEN(fields), &w, err, errlen);
    if (rc < 0)
        return rc == GPO_ENOMEM ? GPO_ENOMEM : GPO_EINVAL;
    w.spec.cpus = (int32_t)w.cpus;
    for (size_t i = 0; i < ARRAY_LEN(steps) && rc == 0; i++)
        rc = steps[i](&w, err, errlen);
    free(w.signal);
    if (rc < 0) {
        jobspec_release(&w.spec);
        return rc;
    }
    *ret = w.spec;
    return 0;
}

int jobspec_decode(const json_t *body, struct jobspec *ret, char *err, size_t errlen)
{
    return decode(body, false, ret, err, errlen);
}

int jobspec_decode_stored(const json_t *body, struct jobspec *ret, char *err, size_t errlen)
{
    return decode(body, true, ret, err, errlen);
}

/* ---- encoding ---------------------------------------------------------- */

static json_t *text_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

static json_t *argv_json(const struct jobspec *s)
{
    json_t *a = s->argv ? json_array() : json_null();
    for (size_t i = 0; a && s->argv && i < s->argc; i++) {
        if (json_array_append_new(a, json_string(s->argv[i])) < 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static json_t *env_json(const struct jobspec *s)
{
    json_t *o = json_object();
    for (size_t i = 0; o && s->env && i < s->nenv; i++) {
        if (json_object_set_new(o, s->env[i].name, json_string(s->env[i].value)) < 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

static json_t *deps_json(const struct jobspec *s)
{
    json_t *a = json_array();
    for (size_t i = 0; a && s->deps && i < s->ndeps; i++) {
        const struct jobspec_dep *d = &s->deps[i];
        json_t *o =
            json_pack("{s:s, s:I}", "type", d->type == JOBSPEC_AFTERANY ? "afterany" : "afterok",
                      "job", (json_int_t)d->job);
        if (json_array_append_new(a, o) < 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

json_t *jobspec_to_json(const struct jobspec *spec)
{
    const struct jobspec *s = spec;
    json_t *o = json_object();
    if (!o)
        return NULL;
    int e = json_object_set_new(o, "name", text_or_null(s->name));
    for (size_t k = 0; k < ARRAY_LEN(labels); k++)
        e |= json_object_set_new(o, labels[k].key, text_or_null(str_get(s, labels[k].offset)));
    e |= json_object_set_new(
        o, "gpus", s->gpu_milli > 0 ? json_real(s->gpu_milli / 1000.0) : json_integer(s->gpus));
    e |= json_object_set_new(o, "gpu_mem_mib", json_integer(s->gpu_mem_mib));
    e |= json_object_set_new(o, "min_gpu_mem_mib", json_integer(s->min_gpu_mem_mib));
    /* Only when set, as "serve": a spec without one reads as it always has. */
    if (s->mig_profile)
        e |= json_object_set_new(o, "mig_profile", json_string(s->mig_profile));
    e |= json_object_set_new(o, "cpus", json_integer(s->cpus));
    e |= json_object_set_new(o, "mem_mib", json_integer(s->mem_mib));
    e |= json_object_set_new(o, "time_limit_s", json_integer(s->time_limit_s));
    e |= json_object_set_new(o, "multi_node", json_boolean(s->multi_node));
    e |= json_object_set_new(o, "checkpointable", json_boolean(s->checkpointable));
    e |= json_object_set_new(o, "command", argv_json(s));
    e |= json_object_set_new(o, "script", text_or_null(s->script));
    e |= json_object_set_new(o, "workdir", text_or_null(s->workdir));
    e |= json_object_set_new(o, "env", env_json(s));
    e |= json_object_set_new(o, "max_retries", json_integer(s->max_retries));
    e |= json_object_set_new(o, "requeue", json_boolean(s->requeue));
    e |= json_object_set_new(o, "dependencies", deps_json(s));
    e |= json_object_set_new(o, "array", text_or_null(s->array_text));
    e |= json_object_set_new(o, "output", text_or_null(s->output));
    e |= json_object_set_new(o, "error", text_or_null(s->error));
    e |= jobspec_shape_json(s, o);
    e |= jobspec_serve_json(s, o);
    if (e) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* ---- copy and release -------------------------------------------------- */

static void *copy_bytes(const void *p, size_t n)
{
    void *q = malloc(n ? n : 1);
    if (q && n)
        memcpy(q, p, n);
    return q;
}

/* c starts as a shallow copy with every owned pointer cleared, so a failure
 * part way frees only what was copied. */
int jobspec_copy(const struct jobspec *spec, struct jobspec *ret)
{
    struct jobspec c = *spec;
    c.argv = NULL;
    c.env = NULL;
    c.deps = NULL;
    c.array.index = NULL;
    bool ok = jobspec_serve_copy(&spec->serve, &c.serve) == 0;
    if (!ok)
        c.serve = (struct jobspec_serve){0};
    for (size_t k = 0; k < ARRAY_LEN(owned_strings); k++) {
        const char *src = str_get(spec, owned_strings[k]);
        char **dst = str_member(&c, owned_strings[k]);
        *dst = src ? copy_text(src, strlen(src)) : NULL;
        ok = ok && (!src || *dst);
    }
    if (ok && spec->argv && (ok = ((c.argv = calloc(spec->argc + 1, sizeof(*c.argv))) != NULL)))
        for (size_t i = 0; ok && i < spec->argc; i++)
            ok = (c.argv[i] = copy_text(spec->argv[i], strlen(spec->argv[i]))) != NULL;
    if (ok && spec->env && spec->nenv &&
        (ok = ((c.env = calloc(spec->nenv, sizeof(*c.env))) != NULL))) {
        for (size_t i = 0; ok && i < spec->nenv; i++) {
            const struct jobspec_env *e = &spec->env[i];
            c.env[i].name = copy_text(e->name, strlen(e->name));
            c.env[i].value = copy_text(e->value, strlen(e->value));
            ok = c.env[i].name && c.env[i].value;
        }
    }
    if (ok && spec->deps)
        ok = (c.deps = copy_bytes(spec->deps, spec->ndeps * sizeof(*c.deps))) != NULL;
    if (ok && spec->array.index)
        ok = (c.array.index = copy_bytes(spec->array.index, spec->array.n * sizeof(uint32_t))) !=
             NULL;
    if (!ok) {
        jobspec_release(&c);
        return GPO_ENOMEM;
    }
    *ret = c;
    return 0;
}

void jobspec_release(struct jobspec *spec)
{
    if (!spec)
        return;
    for (size_t k = 0; k < ARRAY_LEN(owned_strings); k++)
        free(*str_member(spec, owned_strings[k]));
    for (size_t i = 0; spec->argv && spec->argv[i]; i++)
        free(spec->argv[i]);
    free(spec->argv);
    for (size_t i = 0; spec->env && i < spec->nenv; i++) {
        free(spec->env[i].name);
        free(spec->env[i].value);
    }
    free(spec->env);
    free(spec->deps);
    free(spec->array.index);
    jobspec_serve_release(&spec->serve);
    *spec = (struct jobspec){0};
}

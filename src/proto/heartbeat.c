/*
 * heartbeat.c - a heartbeat: every GPU's sample, the dirty GPUs, when
 * (proto.h). A figure is an integer in its range, or null (absent) when
 * not reported.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/wire.h"
#include "util/errbuf.h"
#include "util/text.h"
#include "base/banned.h"

/* The figures of one sample, in wire order: each a member of struct
 * proto_gpu_sample (its key) and the range a real GPU's value lies in. */
#define FIGURES(X)                                                                                 \
    X(utilization_pct, 0, PROTO_PCT_MAX)                                                           \
    X(memory_utilization_pct, 0, PROTO_PCT_MAX)                                                    \
    X(memory_used_mib, 0, PROTO_GPU_MEM_MAX)                                                       \
    X(memory_total_mib, 0, PROTO_GPU_MEM_MAX)                                                      \
    X(power_mw, 0, PROTO_POWER_MW_MAX)                                                             \
    X(temperature_c, PROTO_TEMP_MIN_C, PROTO_TEMP_MAX_C)

static const struct figure {
    const char *key;
    size_t offset; /* in struct proto_gpu_sample */
    int64_t lo, hi;
} figures[] = {
#define FIGURE_ROW(m, lo, hi) {#m, offsetof(struct proto_gpu_sample, m), lo, hi},
    FIGURES(FIGURE_ROW)
#undef FIGURE_ROW
};
#define NFIGURES ARRAY_LEN(figures)

enum {
#define FIGURE_ENUM(m, lo, hi) FIG_##m,
    FIGURES(FIGURE_ENUM)
#undef FIGURE_ENUM
};

static int64_t *figure_at(struct proto_gpu_sample *s, size_t k)
{
    return (int64_t *)(void *)((char *)s + figures[k].offset);
}

static int64_t figure_get(const struct proto_gpu_sample *s, size_t k)
{
    return *(const int64_t *)(const void *)((const char *)s + figures[k].offset);
}

/* A process's members, in wire order, and their ranges. */
enum { P_PID, P_MEMORY, P_JOB, P_ATTEMPT, NPROC };

/* Integers with their presence: null and absent are "not reported". */
struct proc_wire {
    int64_t v[NPROC];
    enum jsonv_presence p[NPROC];
};

#define NUMBER(key, type, k, lo, hi)                                                               \
    WIRE_OPT(key, JSONV_INT64, type, v[k], lo, hi, .flags = JSONV_NULLABLE | JSONV_PRESENCE,       \
             .presence_offset = offsetof(type, p[k]))

static const struct jsonv_field proc_fields[] = {
    NUMBER("pid", struct proc_wire, P_PID, 1, PROTO_PID_MAX),
    NUMBER("memory_mib", struct proc_wire, P_MEMORY, 0, PROTO_GPU_MEM_MAX),
    NUMBER("job", struct proc_wire, P_JOB, 1, INT64_MAX),
    NUMBER("attempt", struct proc_wire, P_ATTEMPT, 1, UINT32_MAX),
};

/* A sample's "mig". */
struct mig_wire {
    bool enabled, pending;
    enum jsonv_presence pending_p;
    struct wire_mig *instances;
    size_t ninstances;
};

static const struct jsonv_field mig_fields[] = {
    WIRE_REQ("enabled", JSONV_BOOL, struct mig_wire, enabled, 0, 0),
    WIRE_OPT("pending", JSONV_BOOL, struct mig_wire, pending, 0, 0, .flags = JSONV_PRESENCE,
             .presence_offset = offsetof(struct mig_wire, pending_p)),
    WIRE_MIG_LIST("instances", 0, struct mig_wire, instances, ninstances),
};

struct sample_wire {
    uint32_t index;
    char *uuid, *error;
    int64_t v[NFIGURES]; /* by the order of FIGURES */
    enum jsonv_presence p[NFIGURES];
    struct proc_wire *procs;
    size_t nprocs;
    enum jsonv_presence procs_p;
    struct mig_wire mig;
    enum jsonv_presence mig_p;
};

static const struct jsonv_field sample_fields[] = {
    WIRE_REQ("index", JSONV_UINT32, struct sample_wire, index, 0, PROTO_GPUS_MAX - 1),
    WIRE_OPT_LINE("uuid", struct sample_wire, uuid, 1, PROTO_UUID_MAX),
    WIRE_OPT_LINE("error", struct sample_wire, error, 1, PROTO_ERROR_MAX),
#define FIGURE_FIELD(m, lo, hi) NUMBER(#m, struct sample_wire, FIG_##m, lo, hi),
    FIGURES(FIGURE_FIELD)
#undef FIGURE_FIELD
        WIRE_OPT("processes", JSONV_OBJECTS, struct sample_wire, procs, 0, 0,
                 .flags = JSONV_NULLABLE | JSONV_PRESENCE, .max_items = PROTO_PROCS_MAX,
                 .count_offset = offsetof(struct sample_wire, nprocs),
                 .elem_size = sizeof(struct proc_wire), .sub = proc_fields,
                 .nsub = ARRAY_LEN(proc_fields),
                 .presence_offset = offsetof(struct sample_wire, procs_p)),
    WIRE_OPT("mig", JSONV_OBJECT, struct sample_wire, mig, 0, 0, .flags = JSONV_PRESENCE,
             .presence_offset = offsetof(struct sample_wire, mig_p), .sub = mig_fields,
             .nsub = ARRAY_LEN(mig_fields)),
};

struct heartbeat_wire {
    struct sample_wire *gpus;
    size_t ngpus;
    char **dirty;
    size_t ndirty;
    int64_t at;
};

static const struct jsonv_field heartbeat_fields[] = {
    WIRE_REQ("gpus", JSONV_OBJECTS, struct heartbeat_wire, gpus, 0, 0, .max_items = PROTO_GPUS_MAX,
             .count_offset = offsetof(struct heartbeat_wire, ngpus),
             .elem_size = sizeof(struct sample_wire), .sub = sample_fields,
             .nsub = ARRAY_LEN(sample_fields)),
    WIRE_OPT("dirty", JSONV_STRINGS, struct heartbeat_wire, dirty, 1, PROTO_UUID_MAX,
             .flags = JSONV_TEXT, .max_items = PROTO_DIRTY_MAX,
             .count_offset = offsetof(struct heartbeat_wire, ndirty)),
    WIRE_OPT("sampled_at_ms", JSONV_INT64, struct heartbeat_wire, at, 0, INT64_MAX),
};

static void samples_free(struct proto_gpu_sample *v, size_t n)
{
    for (size_t k = 0; v && k < n; k++) {
        free(v[k].uuid);
        free(v[k].error);
        free(v[k].procs);
        wire_mig_free(v[k].mig, v[k].nmig);
    }
    free(v);
}

void proto_heartbeat_release(struct proto_heartbeat *m)
{
    if (!m)
        return;
    samples_free(m->gpus, m->ngpus);
    wire_free_strs(m->dirty, m->ndirty);
    memset(m, 0, sizeof(*m));
}

static bool given(enum jsonv_presence p)
{
    return p == JSONV_GIVEN;
}

/* An error entry has only its index and error; any other has a uuid, and
 * no more memory used than it has. */
static int sample_check(const struct sample_wire *s, size_t i, char *err, size_t errlen)
{
    if (!s->error && !s->uuid)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "missing required field 'gpus[%zu].uuid' (or 'error', for a GPU that "
                          "failed to sample)",
                          i);
    if (!s->error) {
        if (given(s->p[FIG_memory_used_mib]) && given(s->p[FIG_memory_total_mib]) &&
            s->v[FIG_memory_used_mib] > s->v[FIG_memory_total_mib])
            return errbuf_set(err, errlen, GPO_ERANGE,
                              "field 'gpus[%zu].memory_used_mib': %lld is more than "
                              "memory_total_mib (%lld)",
                              i, (long long)s->v[FIG_memory_used_mib],
                              (long long)s->v[FIG_memory_total_mib]);
        return 0;
    }
    const char *other = s->uuid                      ? "uuid"
                        : s->procs_p != JSONV_ABSENT ? "processes"
                        : s->mig_p != JSONV_ABSENT   ? "mig"
                                                     : NULL;
    for (size_t k = 0; !other && k < NFIGURES; k++)
        other = s->p[k] != JSONV_ABSENT ? figures[k].key : NULL;
    if (other)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'gpus[%zu].%s': not allowed next to 'error' (a GPU that failed "
                          "to sample has no figures)",
                          i, other);
    return 0;
}

/* A process of an attempt names both ids; any other process neither. */
static int proc_check(const struct proc_wire *w, size_t i, size_t k, char *err, size_t errlen)
{
    if (given(w->p[P_JOB]) == given(w->p[P_ATTEMPT]))
        return 0;
    return errbuf_set(err, errlen, GPO_EINVAL,
                      "field 'gpus[%zu].processes[%zu].%s': a process of an attempt has both "
                      "'job' and 'attempt', any other has neither",
                      i, k, given(w->p[P_JOB]) ? "attempt" : "job");
}

static int64_t value_of(const int64_t *v, const enum jsonv_presence *p, size_t k)
{
    return given(p[k]) ? v[k] : PROTO_NONE;
}

static int sample_read(struct sample_wire *s, size_t i, struct proto_gpu_sample *ret, char *err,
                       size_t errlen)
{
    int rc = sample_check(s, i, err, errlen);
    for (size_t k = 0; !rc && k < s->nprocs; k++)
        rc = proc_check(&s->procs[k], i, k, err, errlen);
    if (rc)
        return rc;
    char path[40];
    snprintf(path, sizeof(path), "gpus[%zu].mig.instances", i);
    if (s->mig.ninstances && !s->mig.enabled)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field '%s': a GPU not in MIG mode ('enabled' false) has no instances",
                          path);
    struct proto_process *procs = s->nprocs ? calloc(s->nprocs, sizeof(*procs)) : NULL;
    if (s->nprocs && !procs)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    struct proto_mig_instance *mig = NULL;
    rc = wire_mig_take(s->mig.instances, s->mig.ninstances, path, &mig, err, errlen);
    if (rc) {
        free(procs);
        return rc;
    }
    bool known = s->mig_p == JSONV_GIVEN;
    *ret = (struct proto_gpu_sample){
        .index = s->index,
        .procs_known = s->procs_p == JSONV_GIVEN,
        .procs = procs,
        .nprocs = s->nprocs,
        .mig_known = known,
        .mig_enabled = known && s->mig.enabled,
        .mig_pending = known && (s->mig.pending_p == JSONV_GIVEN ? s->mig.pending : s->mig.enabled),
        .mig = mig,
        .nmig = s->mig.ninstances};
    for (size_t k = 0; k < NFIGURES; k++)
        *figure_at(ret, k) = value_of(s->v, s->p, k);
    for (size_t k = 0; k < s->nprocs; k++) {
        const struct proc_wire *w = &s->procs[k];
        procs[k] = (struct proto_process){.pid = value_of(w->v, w->p, P_PID),
                                          .memory_mib = value_of(w->v, w->p, P_MEMORY),
                                          .job = value_of(w->v, w->p, P_JOB),
                                          .attempt = value_of(w->v, w->p, P_ATTEMPT)};
    }
    return 0;
}

/* The samples of w, checked and read; w's strings move into *ret. */
static int samples_read(struct heartbeat_wire *w, struct proto_gpu_sample **ret, char *err,
                        size_t errlen)
{
    /* No GPU sampled twice: an index or a UUID names one GPU. */
    int rc =
        wire_gpus_unique(w->gpus, w->ngpus, sizeof(*w->gpus), offsetof(struct sample_wire, index),
                         offsetof(struct sample_wire, uuid), err, errlen);
    if (rc)
        return rc;
    struct proto_gpu_sample *v = w->ngpus ? calloc(w->ngpus, sizeof(*v)) : NULL;
    if (w->ngpus && !v)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    for (size_t i = 0; i < w->ngpus; i++) {
        rc = sample_read(&w->gpus[i], i, &v[i], err, errlen);
        if (rc) {
            samples_free(v, i); /* the strings stay w's until all is read */
            return rc;
        }
    }
    for (size_t i = 0; i < w->ngpus; i++) {
        v[i].uuid = w->gpus[i].uuid;
        v[i].error = w->gpus[i].error;
        w->gpus[i].uuid = w->gpus[i].error = NULL;
    }
    *ret = v;
    return 0;
}

int proto_heartbeat_decode(const json_t *obj, struct proto_heartbeat *ret, char *err, size_t errlen)
{
    struct heartbeat_wire w = {.at = PROTO_NONE};
    int rc = jsonv_decode(obj, heartbeat_fields, ARRAY_LEN(heartbeat_fields), &w, err, errlen);
    if (rc)
        return rc;
    struct proto_gpu_sample *gpus = NULL;
    rc = samples_read(&w, &gpus, err, errlen);
    if (rc) {
        jsonv_release(heartbeat_fields, ARRAY_LEN(heartbeat_fields), &w);
        return rc;
    }
    *ret = (struct proto_heartbeat){.gpus = gpus,
                                    .ngpus = w.ngpus,
                                    .dirty = w.dirty,
                                    .ndirty = w.ndirty,
                                    .sampled_at_ms = w.at};
    w.dirty = NULL;
    w.ndirty = 0;
    jsonv_release(heartbeat_fields, ARRAY_LEN(heartbeat_fields), &w);
    return 0;
}

static int64_t fit(int64_t v, int64_t lo, int64_t hi)
{
    return v != PROTO_NONE && (v < lo || v > hi) ? PROTO_NONE : v;
}

void proto_gpu_sample_fit(struct proto_gpu_sample *s)
{
    if (!s)
        return;
    text_fit_line(s->error, PROTO_ERROR_MAX);
    for (size_t k = 0; k < NFIGURES; k++)
        *figure_at(s, k) = fit(figure_get(s, k), figures[k].lo, figures[k].hi);
    if (s->memory_used_mib != PROTO_NONE && s->memory_total_mib != PROTO_NONE &&
        s->memory_used_mib > s->memory_total_mib)
        s->memory_used_mib = PROTO_NONE;
    for (size_t k = 0; k < s->nprocs; k++) {
        struct proto_process *p = &s->procs[k];
        p->pid = fit(p->pid, 1, PROTO_PID_MAX);
        p->memory_mib = fit(p->memory_mib, 0, PROTO_GPU_MEM_MAX);
        if (p->job == PROTO_NONE || p->attempt == PROTO_NONE || p->job < 1 || p->attempt < 1 ||
            p->attempt > UINT32_MAX)
            p->job = p->attempt = PROTO_NONE;
    }
    if (!s->mig_known || !s->mig_enabled) {
        wire_mig_free(s->mig, s->nmig);
        s->mig = NULL;
        s->nmig = 0;
    }
    wire_mig_fit(s->mig, &s->nmig);
}

static json_t *figure_json(struct wire_enc *e, int64_t v)
{
    return v == PROTO_NONE ? json_null() : wire_int(e, v);
}

static json_t *procs_json(struct wire_enc *e, const struct proto_gpu_sample *s)
{
    if (!s->procs_known)
        return json_null();
    json_t *a = e->rc ? NULL : json_array();
    if (!a)
        wire_fail(e, GPO_ENOMEM);
    for (size_t k = 0; a && !e->rc && k < s->nprocs; k++) {
        const struct proto_process *p = &s->procs[k];
        bool mine = p->job != PROTO_NONE && p->attempt != PROTO_NONE;
        json_t *o = wire_object(e);
        wire_set(e, o, "pid", figure_json(e, p->pid));
        wire_set(e, o, "memory_mib", figure_json(e, p->memory_mib));
        wire_set(e, o, "job", mine ? wire_int(e, p->job) : json_null());
        wire_set(e, o, "attempt", mine ? wire_int(e, p->attempt) : json_null());
        wire_append(e, a, o);
    }
    if (e->rc) {
        json_decref(a);
        return NULL;
    }
    return a;
}

static json_t *sample_json(struct wire_enc *e, const struct proto_gpu_sample *s)
{
    json_t *o = wire_object(e);
    wire_set(e, o, "index", wire_int(e, s->index));
    if (s->error) {
        wire_set(e, o, "error", wire_str(e, s->error));
        return o;
    }
    wire_set(e, o, "uuid", wire_str(e, s->uuid));
    for (size_t k = 0; k < NFIGURES; k++)
        wire_set(e, o, figures[k].key, figure_json(e, figure_get(s, k)));
    wire_set(e, o, "processes", procs_json(e, s));
    if (s->mig_known) {
        json_t *m = wire_object(e);
        wire_set(e, m, "enabled", json_boolean(s->mig_enabled));
        if (s->mig_pending != s->mig_enabled)
            wire_set(e, m, "pending", json_boolean(s->mig_pending));
        if (s->nmig)
            wire_set(e, m, "instances", wire_mig_json(e, s->mig, s->nmig));
        wire_set(e, o, "mig", m);
    }
    return o;
}

static json_t *samples_json(struct wire_enc *e, const struct proto_gpu_sample *v, size_t n)
{
    json_t *gpus = e->rc ? NULL : json_array();
    if (!gpus)
        wire_fail(e, GPO_ENOMEM);
    for (size_t k = 0; gpus && !e->rc && k < n; k++)
        wire_append(e, gpus, sample_json(e, &v[k]));
    if (e->rc) {
        json_decref(gpus);
        return NULL;
    }
    return gpus;
}

int proto_gpu_samples_encode(const struct proto_gpu_sample *gpus, size_t n, json_t **ret)
{
    struct wire_enc e = {0};
    json_t *list = samples_json(&e, gpus, n);
    return wire_done(&e, list, ret);
}

int proto_heartbeat_encode(const struct proto_heartbeat *m, json_t **ret)
{
    struct wire_enc e = {0};
    json_t *o = wire_object(&e);
    wire_set(&e, o, "gpus", samples_json(&e, m->gpus, m->ngpus));
    wire_set(&e, o, "dirty", wire_strs(&e, m->dirty, m->ndirty));
    if (m->sampled_at_ms != PROTO_NONE)
        wire_set(&e, o, "sampled_at_ms", wire_int(&e, m->sampled_at_ms));
    return wire_done(&e, o, ret);
}

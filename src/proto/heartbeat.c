/*
 * heartbeat.c - a heartbeat: every GPU's sample, the dirty GPUs, when
 * (proto.h). Figures arrive as raw JSON values and are read by type: an
 * integer is a figure, anything else is "not reported".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/wire.h"
#include "util/errbuf.h"
#include "base/banned.h"

/* The figures of one sample, in wire order: each a member of struct
 * proto_gpu_sample and its key. */
#define FIGURES(X)                                                                                 \
    X(utilization_pct)                                                                             \
    X(memory_utilization_pct)                                                                      \
    X(memory_used_mib)                                                                             \
    X(memory_total_mib)                                                                            \
    X(power_mw)                                                                                    \
    X(temperature_c)

static const struct figure {
    const char *key;
    size_t offset; /* in struct proto_gpu_sample */
} figures[] = {
#define FIGURE_ROW(m) {#m, offsetof(struct proto_gpu_sample, m)},
    FIGURES(FIGURE_ROW)
#undef FIGURE_ROW
};
#define NFIGURES ARRAY_LEN(figures)

static int64_t *figure_at(struct proto_gpu_sample *s, size_t k)
{
    return (int64_t *)(void *)((char *)s + figures[k].offset);
}

static int64_t figure_get(const struct proto_gpu_sample *s, size_t k)
{
    return *(const int64_t *)(const void *)((const char *)s + figures[k].offset);
}

struct proc_wire {
    json_t *pid, *memory_mib, *job, *attempt;
};

static const struct jsonv_field proc_fields[] = {
    WIRE_OPT("pid", JSONV_RAW, struct proc_wire, pid, 0, 0, .flags = JSONV_NULLABLE),
    WIRE_OPT("memory_mib", JSONV_RAW, struct proc_wire, memory_mib, 0, 0, .flags = JSONV_NULLABLE),
    WIRE_OPT("job", JSONV_RAW, struct proc_wire, job, 0, 0, .flags = JSONV_NULLABLE),
    WIRE_OPT("attempt", JSONV_RAW, struct proc_wire, attempt, 0, 0, .flags = JSONV_NULLABLE),
};

enum {
#define FIGURE_ENUM(m) FIG_##m,
    FIGURES(FIGURE_ENUM)
#undef FIGURE_ENUM
};

struct sample_wire {
    uint32_t index;
    char *uuid, *error;
    json_t *fig[NFIGURES]; /* by the order of FIGURES */
    struct proc_wire *procs;
    size_t nprocs;
    enum jsonv_presence procs_p;
};

static const struct jsonv_field sample_fields[] = {
    WIRE_REQ("index", JSONV_UINT32, struct sample_wire, index, 0, PROTO_GPUS_MAX - 1),
    WIRE_OPT("uuid", JSONV_STRING, struct sample_wire, uuid, 1, PROTO_UUID_MAX),
    WIRE_OPT("error", JSONV_STRING, struct sample_wire, error, 1, PROTO_ERROR_MAX),
#define FIGURE_FIELD(m)                                                                            \
    WIRE_OPT(#m, JSONV_RAW, struct sample_wire, fig[FIG_##m], 0, 0, .flags = JSONV_NULLABLE),
    FIGURES(FIGURE_FIELD)
#undef FIGURE_FIELD
        WIRE_OPT("processes", JSONV_OBJECTS, struct sample_wire, procs, 0, 0,
                 .flags = JSONV_NULLABLE | JSONV_PRESENCE, .max_items = PROTO_PROCS_MAX,
                 .count_offset = offsetof(struct sample_wire, nprocs),
                 .elem_size = sizeof(struct proc_wire), .sub = proc_fields,
                 .nsub = ARRAY_LEN(proc_fields),
                 .presence_offset = offsetof(struct sample_wire, procs_p)),
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
             .max_items = PROTO_DIRTY_MAX, .count_offset = offsetof(struct heartbeat_wire, ndirty)),
    WIRE_OPT("sampled_at_ms", JSONV_INT64, struct heartbeat_wire, at, 0, INT64_MAX),
};

static void samples_free(struct proto_gpu_sample *v, size_t n)
{
    for (size_t k = 0; v && k < n; k++) {
        free(v[k].uuid);
        free(v[k].error);
        free(v[k].procs);
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

/* An error entry has only its index and error; any other has a uuid. */
static int sample_check(const struct sample_wire *s, size_t i, char *err, size_t errlen)
{
    if (!s->error && !s->uuid)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "missing required field 'gpus[%zu].uuid' (or 'error', for a GPU that "
                          "failed to sample)",
                          i);
    if (!s->error)
        return 0;
    const char *other = s->uuid ? "uuid" : s->procs_p != JSONV_ABSENT ? "processes" : NULL;
    for (size_t k = 0; !other && k < NFIGURES; k++)
        other = s->fig[k] ? figures[k].key : NULL;
    if (other)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'gpus[%zu].%s': not allowed next to 'error' (a GPU that failed "
                          "to sample has no figures)",
                          i, other);
    return 0;
}

/* A process's attempt: both ids in range, or neither. */
static void proc_read(const struct proc_wire *w, struct proto_process *p)
{
    int64_t job = wire_figure(w->job), att = wire_figure(w->attempt);
    bool mine = job >= 1 && att >= 1 && att <= UINT32_MAX;
    *p = (struct proto_process){.pid = wire_figure(w->pid),
                                .memory_mib = wire_figure(w->memory_mib),
                                .job = mine ? job : PROTO_NONE,
                                .attempt = mine ? att : PROTO_NONE};
}

/* The samples of w, checked and read; w's strings move into *ret. */
static int samples_read(struct heartbeat_wire *w, struct proto_gpu_sample **ret, char *err,
                        size_t errlen)
{
    struct proto_gpu_sample *v = w->ngpus ? calloc(w->ngpus, sizeof(*v)) : NULL;
    if (w->ngpus && !v)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    for (size_t i = 0; i < w->ngpus; i++) {
        const struct sample_wire *s = &w->gpus[i];
        int rc = sample_check(s, i, err, errlen);
        struct proto_process *procs = !rc && s->nprocs ? calloc(s->nprocs, sizeof(*procs)) : NULL;
        if (!rc && s->nprocs && !procs)
            rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
        if (rc) {
            samples_free(v, i); /* the strings stay w's until all is read */
            return rc;
        }
        v[i] = (struct proto_gpu_sample){.index = s->index,
                                         .procs_known = s->procs_p == JSONV_GIVEN,
                                         .procs = procs,
                                         .nprocs = s->nprocs};
        for (size_t k = 0; k < NFIGURES; k++)
            *figure_at(&v[i], k) = s->error ? PROTO_NONE : wire_figure(s->fig[k]);
        for (size_t p = 0; p < s->nprocs; p++)
            proc_read(&s->procs[p], &procs[p]);
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

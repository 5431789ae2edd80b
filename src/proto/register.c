/*
 * register.c - a node's registration and its answer (proto.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/wire.h"
#include "util/errbuf.h"
#include "base/banned.h"

_Static_assert(sizeof(enum proto_node_state) == sizeof(int), "jsonv stores an enum as an int");

/* A GPU as jsonv fills it: nvlink_domain's presence says whether -1
 * applies, mig_pending's whether it is mig_enabled; the instances are read
 * into mig, then moved into g. */
struct gpu_wire {
    struct proto_gpu g;
    enum jsonv_presence nvlink_p, pending_p;
    struct wire_mig *mig;
    size_t nmig;
};

static const struct jsonv_field gpu_fields[] = {
    WIRE_REQ("index", JSONV_UINT32, struct gpu_wire, g.index, 0, PROTO_GPUS_MAX - 1),
    WIRE_REQ_LINE("uuid", struct gpu_wire, g.uuid, 1, PROTO_UUID_MAX),
    WIRE_REQ_LINE("gpu_type", struct gpu_wire, g.gpu_type, 1, PROTO_NAME_MAX),
    WIRE_REQ("mem_mib", JSONV_UINT32, struct gpu_wire, g.mem_mib, 1, PROTO_GPU_MEM_MAX),
    WIRE_OPT("nvlink_domain", JSONV_INT64, struct gpu_wire, g.nvlink_domain, -1, PROTO_GPUS_MAX - 1,
             .flags = JSONV_PRESENCE, .presence_offset = offsetof(struct gpu_wire, nvlink_p)),
    WIRE_OPT("mig_slices", JSONV_UINT32, struct gpu_wire, g.mig_slices, 0, PROTO_MIG_SLICES_MAX),
    WIRE_OPT("mig_enabled", JSONV_BOOL, struct gpu_wire, g.mig_enabled, 0, 0),
    WIRE_OPT("mig_pending", JSONV_BOOL, struct gpu_wire, g.mig_pending, 0, 0,
             .flags = JSONV_PRESENCE, .presence_offset = offsetof(struct gpu_wire, pending_p)),
    WIRE_MIG_LIST("mig", 0, struct gpu_wire, mig, nmig),
};

/* The GPUs of a node as jsonv fills them. */
struct node_wire_gpus {
    struct gpu_wire *gpus;
    size_t ngpus;
};

/* The registration body and the answer share the node's keys. */
struct node_wire {
    struct proto_register n; /* all but its gpus */
    struct node_wire_gpus g;
    enum proto_node_state state; /* the answer's */
    char *log_token;             /* the answer's */
    struct wire_fence fence;     /* the answer's */
};

#define NODE_FIELDS(name_flags)                                                                    \
    {.name = "name",                                                                               \
     .kind = JSONV_STRING,                                                                         \
     .flags = (name_flags) | JSONV_TEXT,                                                           \
     .offset = offsetof(struct node_wire, n.name),                                                 \
     .min = 1,                                                                                     \
     .max = PROTO_HOST_MAX},                                                                       \
        WIRE_REQ_LINE("pool", struct node_wire, n.pool, 1, PROTO_NAME_MAX),                        \
        WIRE_REQ("cpus", JSONV_UINT32, struct node_wire, n.cpus, 1, PROTO_NODE_CPUS_MAX),          \
        WIRE_REQ("mem_mib", JSONV_INT64, struct node_wire, n.mem_mib, 1, PROTO_NODE_MEM_MAX),      \
        WIRE_OPT_LINE("addr", struct node_wire, n.addr, 1, PROTO_HOST_MAX),                        \
        WIRE_OPT("log_port", JSONV_UINT32, struct node_wire, n.log_port, 0, 65535),                \
        WIRE_OPT("gpus", JSONV_OBJECTS, struct node_wire, g.gpus, 0, 0,                            \
                 .max_items = PROTO_GPUS_MAX, .count_offset = offsetof(struct node_wire, g.ngpus), \
                 .elem_size = sizeof(struct gpu_wire), .sub = gpu_fields,                          \
                 .nsub = ARRAY_LEN(gpu_fields))

static const struct jsonv_field register_fields[] = {NODE_FIELDS(0)};

static const char *const state_names[] = {
    [PROTO_NODE_UP] = "up", [PROTO_NODE_DRAINING] = "draining", [PROTO_NODE_DOWN] = "down", NULL};

static const struct jsonv_field registered_fields[] = {
    NODE_FIELDS(JSONV_REQUIRED),
    WIRE_REQ("state", JSONV_ENUM, struct node_wire, state, 0, 0, .choices = state_names),
    WIRE_REQ_LINE("log_token", struct node_wire, log_token, 1, PROTO_TOKEN_MAX),
    WIRE_FENCE_FIELDS(struct node_wire, fence),
};

static void gpus_free(struct proto_gpu *gpus, size_t n)
{
    for (size_t k = 0; gpus && k < n; k++) {
        free(gpus[k].uuid);
        free(gpus[k].gpu_type);
        wire_mig_free(gpus[k].mig, gpus[k].nmig);
    }
    free(gpus);
}

/* Each GPU's instances moved from its wire list into g.mig (a GPU not in
 * MIG mode has none): 0, or the error with what was moved freed again and
 * the rest still w's. */
static int gpus_mig_take(struct node_wire_gpus *w, char *err, size_t errlen)
{
    int rc = 0;
    size_t k = 0;
    for (; !rc && k < w->ngpus; k++) {
        struct gpu_wire *g = &w->gpus[k];
        char path[32];
        snprintf(path, sizeof(path), "gpus[%zu].mig", k);
        if (g->nmig && !g->g.mig_enabled)
            rc = errbuf_set(err, errlen, GPO_EINVAL,
                            "field '%s': a GPU not in MIG mode ('mig_enabled' false) has no "
                            "instances",
                            path);
        rc = rc ? rc : wire_mig_take(g->mig, g->nmig, path, &g->g.mig, err, errlen);
        if (!rc) {
            g->g.nmig = g->nmig;
            free(g->mig);
            g->mig = NULL;
            g->nmig = 0;
        }
        if (g->pending_p != JSONV_GIVEN)
            g->g.mig_pending = g->g.mig_enabled;
    }
    for (size_t j = 0; rc && j + 1 < k; j++) {
        wire_mig_free(w->gpus[j].g.mig, w->gpus[j].g.nmig);
        w->gpus[j].g.mig = NULL;
        w->gpus[j].g.nmig = 0;
    }
    return rc;
}

/* jsonv into w, then the GPUs moved into w->n. On failure w holds nothing. */
static int node_decode(const json_t *obj, const struct jsonv_field *fields, size_t nfields,
                       struct node_wire *w, char *err, size_t errlen)
{
    int rc = jsonv_decode(obj, fields, nfields, w, err, errlen);
    if (rc)
        return rc;
    struct proto_gpu *gpus = w->g.ngpus ? calloc(w->g.ngpus, sizeof(*gpus)) : NULL;
    if (w->g.ngpus && !gpus)
        rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    rc = rc ? rc : gpus_mig_take(&w->g, err, errlen);
    if (rc) {
        free(gpus);
        jsonv_release(fields, nfields, w);
        return rc;
    }
    for (size_t k = 0; k < w->g.ngpus; k++) {
        gpus[k] = w->g.gpus[k].g;
        if (w->g.gpus[k].nvlink_p != JSONV_GIVEN)
            gpus[k].nvlink_domain = -1;
    }
    w->n.gpus = gpus;
    w->n.ngpus = w->g.ngpus;
    free(w->g.gpus); /* its strings now belong to w->n */
    w->g.gpus = NULL;
    w->g.ngpus = 0;
    rc = wire_gpus_unique(w->n.gpus, w->n.ngpus, sizeof(*w->n.gpus),
                          offsetof(struct proto_gpu, index), offsetof(struct proto_gpu, uuid), err,
                          errlen);
    if (rc) {
        proto_register_release(&w->n);
        free(w->log_token);
    }
    return rc;
}

int proto_register_decode(const json_t *obj, struct proto_register *ret, char *err, size_t errlen)
{
    struct node_wire w = {0};
    int rc = node_decode(obj, register_fields, ARRAY_LEN(register_fields), &w, err, errlen);
    if (rc)
        return rc;
    *ret = w.n;
    return 0;
}

int proto_registered_decode(const json_t *obj, struct proto_registered *ret, char *err,
                            size_t errlen)
{
    struct node_wire w = {0};
    int rc = node_decode(obj, registered_fields, ARRAY_LEN(registered_fields), &w, err, errlen);
    if (rc)
        return rc;
    if ((rc = wire_fence_check(&w.fence, err, errlen)) != 0) {
        proto_register_release(&w.n);
        free(w.log_token);
        return rc;
    }
    *ret = (struct proto_registered){.node = w.n,
                                     .state = w.state,
                                     .log_token = w.log_token,
                                     .fence_lease_ms = w.fence.lease_ms,
                                     .fence_grace_ms = w.fence.grace_ms};
    return 0;
}

static json_t *gpus_json(struct wire_enc *e, const struct proto_gpu *gpus, size_t n)
{
    json_t *list = e->rc ? NULL : json_array();
    if (!list)
        wire_fail(e, GPO_ENOMEM);
    for (size_t k = 0; !e->rc && k < n; k++) {
        const struct proto_gpu *g = &gpus[k];
        json_t *go = wire_object(e);
        wire_set(e, go, "index", wire_int(e, g->index));
        wire_set(e, go, "uuid", wire_str(e, g->uuid));
        wire_set(e, go, "gpu_type", wire_str(e, g->gpu_type));
        wire_set(e, go, "mem_mib", wire_int(e, g->mem_mib));
        wire_set(e, go, "nvlink_domain", wire_int(e, g->nvlink_domain));
        wire_set(e, go, "mig_slices", wire_int(e, g->mig_slices));
        wire_set(e, go, "mig_enabled", json_boolean(g->mig_enabled));
        if (g->mig_pending != g->mig_enabled)
            wire_set(e, go, "mig_pending", json_boolean(g->mig_pending));
        if (g->nmig)
            wire_set(e, go, "mig", wire_mig_json(e, g->mig, g->nmig));
        wire_append(e, list, go);
    }
    if (e->rc) {
        json_decref(list);
        return NULL;
    }
    return list;
}

int proto_gpus_encode(const struct proto_gpu *gpus, size_t n, json_t **ret)
{
    struct wire_enc e = {0};
    json_t *list = gpus_json(&e, gpus, n);
    return wire_done(&e, list, ret);
}

static void node_put(struct wire_enc *e, json_t *o, const struct proto_register *m,
                     bool log_port_always)
{
    wire_set(e, o, "pool", wire_str(e, m->pool));
    wire_set(e, o, "cpus", wire_int(e, m->cpus));
    wire_set(e, o, "mem_mib", wire_int(e, m->mem_mib));
    wire_set(e, o, "gpus", gpus_json(e, m->gpus, m->ngpus));
    if (log_port_always || m->log_port)
        wire_set(e, o, "log_port", wire_int(e, m->log_port));
    if (m->addr)
        wire_set(e, o, "addr", wire_str(e, m->addr));
}

int proto_register_encode(const struct proto_register *m, json_t **ret)
{
    struct wire_enc e = {0};
    json_t *o = wire_object(&e);
    if (m->name)
        wire_set(&e, o, "name", wire_str(&e, m->name));
    node_put(&e, o, m, true);
    return wire_done(&e, o, ret);
}

int proto_registered_encode(const struct proto_registered *m, json_t **ret)
{
    struct wire_enc e = {0};
    json_t *o = wire_object(&e);
    wire_set(&e, o, "name", wire_str(&e, m->node.name));
    if ((unsigned)m->state > PROTO_NODE_DOWN)
        wire_fail(&e, GPO_EINVAL);
    else
        wire_set(&e, o, "state", wire_str(&e, state_names[m->state]));
    node_put(&e, o, &m->node, false);
    wire_set(&e, o, "log_token", wire_str(&e, m->log_token));
    wire_fence_put(&e, o, m->fence_lease_ms, m->fence_grace_ms);
    return wire_done(&e, o, ret);
}

void proto_register_release(struct proto_register *m)
{
    if (!m)
        return;
    free(m->name);
    free(m->pool);
    free(m->addr);
    gpus_free(m->gpus, m->ngpus);
    memset(m, 0, sizeof(*m));
}

void proto_registered_release(struct proto_registered *m)
{
    if (!m)
        return;
    proto_register_release(&m->node);
    free(m->log_token);
    memset(m, 0, sizeof(*m));
}

/*
 * mig.c - MIG on the wire (proto.h): a GPU's instances as registration,
 * heartbeats and plan results list them, the repartition plans of the
 * assignments answer, and the result of one plan.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/wire.h"
#include "util/errbuf.h"
#include "util/text.h"
#include "base/banned.h"

const struct jsonv_field wire_mig_fields[WIRE_NMIG_FIELDS] = {
    WIRE_REQ("profile_id", JSONV_UINT32, struct wire_mig, m.profile_id, 0, PROTO_MIG_PROFILE_MAX),
    WIRE_REQ("start", JSONV_UINT32, struct wire_mig, m.start, 0, PROTO_MIG_SLOT_MAX),
    WIRE_REQ("gi_id", JSONV_UINT32, struct wire_mig, m.gi_id, 0, PROTO_MIG_ID_MAX),
    WIRE_OPT("ci_id", JSONV_INT64, struct wire_mig, m.ci_id, 0, PROTO_MIG_ID_MAX,
             .flags = JSONV_NULLABLE | JSONV_PRESENCE,
             .presence_offset = offsetof(struct wire_mig, ci_p)),
    WIRE_OPT("uuid", JSONV_STRING, struct wire_mig, m.uuid, 1, PROTO_UUID_MAX,
             .flags = JSONV_NULLABLE | JSONV_TEXT),
};

static int instances_check(const struct wire_mig *w, size_t n, const char *path, char *err,
                           size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        const struct proto_mig_instance *a = &w[i].m;
        if (a->uuid && w[i].ci_p != JSONV_GIVEN)
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field '%s[%zu].uuid': an instance without a compute instance "
                              "('ci_id') has no MIG UUID",
                              path, i);
        for (size_t j = 0; j < i; j++) {
            const struct proto_mig_instance *b = &w[j].m;
            if (a->start == b->start)
                return errbuf_set(err, errlen, GPO_EINVAL,
                                  "field '%s[%zu].start': %u is also %s[%zu]'s", path, i, a->start,
                                  path, j);
            if (a->gi_id == b->gi_id)
                return errbuf_set(err, errlen, GPO_EINVAL,
                                  "field '%s[%zu].gi_id': %u is also %s[%zu]'s", path, i, a->gi_id,
                                  path, j);
            if (a->uuid && b->uuid && strcmp(a->uuid, b->uuid) == 0) {
                char q[JSONV_QUOTE_MAX + 4];
                return errbuf_set(err, errlen, GPO_EINVAL,
                                  "field '%s[%zu].uuid': '%s' is also %s[%zu]'s", path, i,
                                  jsonv_quote(a->uuid, strlen(a->uuid), q), path, j);
            }
        }
    }
    return 0;
}

int wire_mig_take(struct wire_mig *w, size_t n, const char *path, struct proto_mig_instance **ret,
                  char *err, size_t errlen)
{
    int rc = instances_check(w, n, path, err, errlen);
    if (rc)
        return rc;
    struct proto_mig_instance *v = n ? calloc(n, sizeof(*v)) : NULL;
    if (n && !v)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    for (size_t k = 0; k < n; k++) {
        v[k] = w[k].m;
        if (w[k].ci_p != JSONV_GIVEN)
            v[k].ci_id = PROTO_NONE;
        w[k].m.uuid = NULL; /* now v's */
    }
    *ret = v;
    return 0;
}

json_t *wire_mig_json(struct wire_enc *e, const struct proto_mig_instance *v, size_t n)
{
    json_t *a = e->rc ? NULL : json_array();
    if (!a)
        wire_fail(e, GPO_ENOMEM);
    for (size_t k = 0; a && !e->rc && k < n; k++) {
        json_t *o = wire_object(e);
        wire_set(e, o, "profile_id", wire_int(e, v[k].profile_id));
        wire_set(e, o, "start", wire_int(e, v[k].start));
        wire_set(e, o, "gi_id", wire_int(e, v[k].gi_id));
        wire_set(e, o, "ci_id", v[k].ci_id == PROTO_NONE ? json_null() : wire_int(e, v[k].ci_id));
        wire_set(e, o, "uuid", wire_str_or_null(e, v[k].uuid));
        wire_append(e, a, o);
    }
    if (e->rc) {
        json_decref(a);
        return NULL;
    }
    return a;
}

void wire_mig_free(struct proto_mig_instance *v, size_t n)
{
    for (size_t k = 0; v && k < n; k++)
        free(v[k].uuid);
    free(v);
}

/* Whether instance k breaks a rule the decoder checks, alone or with one
 * kept before it. */
static bool unfit(const struct proto_mig_instance *v, size_t kept,
                  const struct proto_mig_instance *x)
{
    if (x->profile_id > PROTO_MIG_PROFILE_MAX || x->start > PROTO_MIG_SLOT_MAX ||
        x->gi_id > PROTO_MIG_ID_MAX)
        return true;
    for (size_t j = 0; j < kept; j++) {
        if (v[j].start == x->start || v[j].gi_id == x->gi_id ||
            (v[j].uuid && x->uuid && strcmp(v[j].uuid, x->uuid) == 0))
            return true;
    }
    return false;
}

void wire_mig_fit(struct proto_mig_instance *v, size_t *n)
{
    size_t kept = 0;
    for (size_t k = 0; v && k < *n; k++) {
        struct proto_mig_instance *x = &v[k];
        if (x->ci_id != PROTO_NONE && (x->ci_id < 0 || x->ci_id > PROTO_MIG_ID_MAX))
            x->ci_id = PROTO_NONE;
        size_t len = x->uuid ? strlen(x->uuid) : 0;
        bool bad_uuid = x->uuid && (x->ci_id == PROTO_NONE || len > PROTO_UUID_MAX || len == 0 ||
                                    text_control_at(x->uuid, len) != len);
        if (bad_uuid) { /* the instance stays, without its UUID */
            free(x->uuid);
            x->uuid = NULL;
        }
        if (kept >= PROTO_MIG_INSTANCES_MAX || unfit(v, kept, x)) {
            free(x->uuid);
            x->uuid = NULL;
            continue;
        }
        if (kept != k) {
            v[kept] = *x;
            x->uuid = NULL; /* now v[kept]'s */
        }
        kept++;
    }
    *n = kept;
}

/* ---- plans ------------------------------------------------------------- */

static const struct jsonv_field change_fields[] = {
    WIRE_REQ("profile_id", JSONV_UINT32, struct proto_mig_change, profile_id, 0,
             PROTO_MIG_PROFILE_MAX),
    WIRE_REQ("start", JSONV_UINT32, struct proto_mig_change, start, 0, PROTO_MIG_SLOT_MAX),
};

#define CHANGES(key, m, count)                                                                     \
    WIRE_OPT(key, JSONV_OBJECTS, struct proto_mig_plan, m, 0, 0,                                   \
             .max_items = PROTO_MIG_INSTANCES_MAX,                                                 \
             .count_offset = offsetof(struct proto_mig_plan, count),                               \
             .elem_size = sizeof(struct proto_mig_change), .sub = change_fields,                   \
             .nsub = ARRAY_LEN(change_fields))

/* "id" is read as an int64_t into the uint64_t member (1..INT64_MAX). */
_Static_assert(sizeof(((struct proto_mig_plan *)0)->id) == sizeof(int64_t), "a plan id");
const struct jsonv_field wire_mig_plan_fields[WIRE_NMIG_PLAN_FIELDS] = {
    WIRE_REQ("id", JSONV_INT64, struct proto_mig_plan, id, 1, INT64_MAX),
    WIRE_REQ_LINE("gpu_uuid", struct proto_mig_plan, gpu_uuid, 1, PROTO_UUID_MAX),
    CHANGES("destroy", destroy, ndestroy),
    CHANGES("create", create, ncreate),
};

static int changes_check(const struct proto_mig_change *v, size_t n, size_t plan, const char *list,
                         char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < i; j++) {
            if (v[i].start == v[j].start)
                return errbuf_set(err, errlen, GPO_EINVAL,
                                  "field 'mig_plans[%zu].%s[%zu].start': %u is also %s[%zu]'s",
                                  plan, list, i, v[i].start, list, j);
        }
    }
    return 0;
}

int wire_mig_plans_check(const struct proto_mig_plan *v, size_t n, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < i; j++) {
            if (v[i].id == v[j].id)
                return errbuf_set(err, errlen, GPO_EINVAL,
                                  "field 'mig_plans[%zu].id': %llu is also mig_plans[%zu]'s", i,
                                  (unsigned long long)v[i].id, j);
        }
        int rc = changes_check(v[i].destroy, v[i].ndestroy, i, "destroy", err, errlen);
        rc = rc ? rc : changes_check(v[i].create, v[i].ncreate, i, "create", err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

static json_t *changes_json(struct wire_enc *e, const struct proto_mig_change *v, size_t n)
{
    json_t *a = e->rc ? NULL : json_array();
    if (!a)
        wire_fail(e, GPO_ENOMEM);
    for (size_t k = 0; a && !e->rc && k < n; k++) {
        json_t *o = wire_object(e);
        wire_set(e, o, "profile_id", wire_int(e, v[k].profile_id));
        wire_set(e, o, "start", wire_int(e, v[k].start));
        wire_append(e, a, o);
    }
    if (e->rc) {
        json_decref(a);
        return NULL;
    }
    return a;
}

json_t *wire_mig_plans_json(struct wire_enc *e, const struct proto_mig_plan *v, size_t n)
{
    json_t *a = e->rc ? NULL : json_array();
    if (!a)
        wire_fail(e, GPO_ENOMEM);
    for (size_t k = 0; a && !e->rc && k < n; k++) {
        json_t *o = wire_object(e);
        if (v[k].id < 1 || v[k].id > INT64_MAX)
            wire_fail(e, GPO_EINVAL);
        wire_set(e, o, "id", wire_int(e, (int64_t)v[k].id));
        wire_set(e, o, "gpu_uuid", wire_str(e, v[k].gpu_uuid));
        wire_set(e, o, "destroy", changes_json(e, v[k].destroy, v[k].ndestroy));
        wire_set(e, o, "create", changes_json(e, v[k].create, v[k].ncreate));
        wire_append(e, a, o);
    }
    if (e->rc) {
        json_decref(a);
        return NULL;
    }
    return a;
}

void wire_mig_plans_free(struct proto_mig_plan *v, size_t n)
{
    for (size_t k = 0; v && k < n; k++) {
        free(v[k].gpu_uuid);
        free(v[k].destroy);
        free(v[k].create);
    }
    free(v);
}

/* ---- a plan's result: POST /v1/nodes/NAME/mig/ID ------------------------- */

struct result_wire {
    bool ok;
    char *error, *gpu_uuid;
    struct wire_mig *mig;
    size_t nmig;
};

static const struct jsonv_field result_fields[] = {
    WIRE_REQ("ok", JSONV_BOOL, struct result_wire, ok, 0, 0),
    WIRE_OPT("error", JSONV_STRING, struct result_wire, error, 1, PROTO_ERROR_MAX,
             .flags = JSONV_NULLABLE | JSONV_TEXT),
    WIRE_REQ_LINE("gpu_uuid", struct result_wire, gpu_uuid, 1, PROTO_UUID_MAX),
    WIRE_MIG_LIST("mig", JSONV_REQUIRED, struct result_wire, mig, nmig),
};

int proto_mig_result_decode(const json_t *obj, struct proto_mig_result *ret, char *err,
                            size_t errlen)
{
    struct result_wire w = {0};
    int rc = jsonv_decode(obj, result_fields, ARRAY_LEN(result_fields), &w, err, errlen);
    if (rc)
        return rc;
    if (!w.ok && !w.error)
        rc = errbuf_set(err, errlen, GPO_EINVAL,
                        "missing required field 'error' (a failed plan says why)");
    else if (w.ok && w.error)
        rc = errbuf_set(err, errlen, GPO_EINVAL, "field 'error': not allowed with \"ok\": true");
    struct proto_mig_instance *mig = NULL;
    rc = rc ? rc : wire_mig_take(w.mig, w.nmig, "mig", &mig, err, errlen);
    if (rc) {
        jsonv_release(result_fields, ARRAY_LEN(result_fields), &w);
        return rc;
    }
    *ret = (struct proto_mig_result){
        .ok = w.ok, .error = w.error, .gpu_uuid = w.gpu_uuid, .mig = mig, .nmig = w.nmig};
    free(w.mig); /* its strings are ret's */
    return 0;
}

int proto_mig_result_encode(const struct proto_mig_result *m, json_t **ret)
{
    struct wire_enc e = {0};
    json_t *o = wire_object(&e);
    if (!m->ok && !m->error)
        wire_fail(&e, GPO_EINVAL);
    wire_set(&e, o, "ok", json_boolean(m->ok));
    if (!m->ok)
        wire_set(&e, o, "error", wire_str(&e, m->error));
    wire_set(&e, o, "gpu_uuid", wire_str(&e, m->gpu_uuid));
    wire_set(&e, o, "mig", wire_mig_json(&e, m->mig, m->nmig));
    return wire_done(&e, o, ret);
}

void proto_mig_result_release(struct proto_mig_result *m)
{
    if (!m)
        return;
    free(m->error);
    free(m->gpu_uuid);
    wire_mig_free(m->mig, m->nmig);
    memset(m, 0, sizeof(*m));
}

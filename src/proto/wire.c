/*
 * wire.c - what the message files share (wire.h).
 */
#include <stdlib.h>
#include <string.h>

#include "proto/wire.h"
#include "util/errbuf.h"
#include "base/banned.h"

void wire_fail(struct wire_enc *e, int rc)
{
    if (!e->rc)
        e->rc = rc;
}

json_t *wire_object(struct wire_enc *e)
{
    json_t *o = e->rc ? NULL : json_object();
    if (!o)
        wire_fail(e, GPO_ENOMEM);
    return o;
}

void wire_set(struct wire_enc *e, json_t *o, const char *key, json_t *v)
{
    if (!v) {
        wire_fail(e, GPO_ENOMEM);
        return;
    }
    if (e->rc || !o) {
        json_decref(v);
        wire_fail(e, GPO_ENOMEM);
        return;
    }
    if (json_object_set_new(o, key, v) != 0) /* it took v */
        wire_fail(e, GPO_ENOMEM);
}

void wire_append(struct wire_enc *e, json_t *a, json_t *v)
{
    if (!v) {
        wire_fail(e, GPO_ENOMEM);
        return;
    }
    if (e->rc || !a) {
        json_decref(v);
        wire_fail(e, GPO_ENOMEM);
        return;
    }
    if (json_array_append_new(a, v) != 0)
        wire_fail(e, GPO_ENOMEM);
}

json_t *wire_str(struct wire_enc *e, const char *s)
{
    if (e->rc)
        return NULL;
    if (!s || jsonv_check_utf8(s, strlen(s)) != 0) {
        wire_fail(e, GPO_EINVAL);
        return NULL;
    }
    json_t *v = json_string(s);
    if (!v)
        wire_fail(e, GPO_ENOMEM);
    return v;
}

json_t *wire_str_or_null(struct wire_enc *e, const char *s)
{
    return s ? wire_str(e, s) : json_null();
}

json_t *wire_int(struct wire_enc *e, int64_t v)
{
    json_t *j = e->rc ? NULL : json_integer((json_int_t)v);
    if (!j)
        wire_fail(e, GPO_ENOMEM);
    return j;
}

json_t *wire_strs(struct wire_enc *e, char *const *v, size_t n)
{
    json_t *a = e->rc ? NULL : json_array();
    if (!a)
        wire_fail(e, GPO_ENOMEM);
    for (size_t k = 0; a && k < n; k++)
        wire_append(e, a, wire_str(e, v[k]));
    if (e->rc) {
        json_decref(a);
        return NULL;
    }
    return a;
}

int wire_done(struct wire_enc *e, json_t *o, json_t **ret)
{
    if (e->rc || !o) {
        json_decref(o);
        return e->rc ? e->rc : GPO_ENOMEM;
    }
    *ret = o;
    return 0;
}

static uint32_t index_at(const void *v, size_t k, size_t size, size_t offset)
{
    uint32_t x;
    memcpy(&x, (const char *)v + k * size + offset, sizeof(x));
    return x;
}

static const char *uuid_at(const void *v, size_t k, size_t size, size_t offset)
{
    const char *s;
    memcpy(&s, (const char *)v + k * size + offset, sizeof(s));
    return s;
}

int wire_gpus_unique(const void *v, size_t n, size_t size, size_t index_offset, size_t uuid_offset,
                     char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t index = index_at(v, i, size, index_offset);
        const char *uuid = uuid_at(v, i, size, uuid_offset);
        for (size_t j = 0; j < i; j++) {
            const char *other = uuid_at(v, j, size, uuid_offset);
            if (index_at(v, j, size, index_offset) == index)
                return errbuf_set(err, errlen, GPO_EINVAL,
                                  "field 'gpus[%zu].index': %u is also gpus[%zu]'s", i, index, j);
            if (uuid && other && strcmp(uuid, other) == 0) {
                char q[JSONV_QUOTE_MAX + 4];
                return errbuf_set(err, errlen, GPO_EINVAL,
                                  "field 'gpus[%zu].uuid': '%s' is also gpus[%zu]'s", i,
                                  jsonv_quote(uuid, strlen(uuid), q), j);
            }
        }
    }
    return 0;
}

int wire_fence_check(const struct wire_fence *f, char *err, size_t errlen)
{
    if (f->grace_p == JSONV_GIVEN && f->lease_ms == 0)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'fence_grace_ms': only with a fence_lease_ms above 0");
    return 0;
}

void wire_fence_put(struct wire_enc *e, json_t *o, int64_t lease_ms, int64_t grace_ms)
{
    if (!lease_ms)
        return;
    if (lease_ms < 0 || lease_ms > PROTO_FENCE_MS_MAX || grace_ms < 0 ||
        grace_ms > PROTO_FENCE_MS_MAX) {
        wire_fail(e, GPO_EINVAL);
        return;
    }
    wire_set(e, o, "fence_lease_ms", wire_int(e, lease_ms));
    wire_set(e, o, "fence_grace_ms", wire_int(e, grace_ms));
}

void wire_free_strs(char **v, size_t n)
{
    for (size_t k = 0; v && k < n; k++)
        free(v[k]);
    free(v);
}

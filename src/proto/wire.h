/*
 * wire.h - (private to src/proto) what the message files share: building
 * objects without checking every call, the field-table shorthands, and
 * freeing string lists by count.
 */
#ifndef GPUORCH_PROTO_WIRE_H
#define GPUORCH_PROTO_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "proto/proto.h"
#include "util/jsonv.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/*
 * An encode in progress: the first failure is kept in rc and every later
 * call does nothing, so an encoder reads as the list of its keys. Values
 * passed in are taken (json_decref'd on failure); NULL means a failed
 * allocation, or a string wire_str refused (rc then says which).
 */
struct wire_enc {
    int rc; /* 0, GPO_EINVAL or GPO_ENOMEM */
};

void wire_fail(struct wire_enc *e, int rc);
/* A new object, or NULL (rc set). */
json_t *wire_object(struct wire_enc *e);
/* Sets key (a literal) in o. */
void wire_set(struct wire_enc *e, json_t *o, const char *key, json_t *v);
/* Appends to the array a. */
void wire_append(struct wire_enc *e, json_t *a, json_t *v);
/* A JSON string of s: NULL or text that is not UTF-8 is GPO_EINVAL. */
json_t *wire_str(struct wire_enc *e, const char *s);
/* s, or JSON null for NULL. */
json_t *wire_str_or_null(struct wire_enc *e, const char *s);
json_t *wire_int(struct wire_enc *e, int64_t v);
/* A list of n strings. */
json_t *wire_strs(struct wire_enc *e, char *const *v, size_t n);
/* Finishes: 0 and *ret = o, or rc (o freed). */
int wire_done(struct wire_enc *e, json_t *o, json_t **ret);

/* No index and no UUID twice in a list of n GPUs (elements of `size` bytes,
 * a uint32_t index and a char * UUID, NULL for none, at the offsets): 0, or
 * GPO_EINVAL naming the later one ("field 'gpus[1].index': 0 is also
 * gpus[0]'s"). */
int wire_gpus_unique(const void *v, size_t n, size_t size, size_t index_offset, size_t uuid_offset,
                     char *err, size_t errlen);

/* Frees n strings and the array (NULL fine). */
void wire_free_strs(char **v, size_t n);

/* Field-table entries (util/jsonv.h); more designators may follow (never
 * .flags in WIRE_REQ). */
#define WIRE_REQ(key, kind_, type, m, lo, hi, ...)                                                 \
    {                                                                                              \
        .name = key, .kind = kind_, .flags = JSONV_REQUIRED, .offset = offsetof(type, m),          \
        .min = lo, .max = hi, __VA_ARGS__                                                          \
    }
#define WIRE_OPT(key, kind_, type, m, lo, hi, ...)                                                 \
    {                                                                                              \
        .name = key, .kind = kind_, .offset = offsetof(type, m), .min = lo, .max = hi, __VA_ARGS__ \
    }

/* A string that is one line of text (no control character: util/text.h),
 * required or optional; for names, UUIDs, addresses and messages. */
#define WIRE_REQ_LINE(key, type, m, lo, hi)                                                        \
    {                                                                                              \
        .name = key, .kind = JSONV_STRING, .flags = JSONV_REQUIRED | JSONV_TEXT,                   \
        .offset = offsetof(type, m), .min = lo, .max = hi                                          \
    }
#define WIRE_OPT_LINE(key, type, m, lo, hi)                                                        \
    WIRE_OPT(key, JSONV_STRING, type, m, lo, hi, .flags = JSONV_TEXT)

/* ---- fencing: the registration answer and the assignments answer ---- */

/* The fence settings as jsonv fills them. */
struct wire_fence {
    int64_t lease_ms, grace_ms;
    enum jsonv_presence grace_p;
};

/* Field-table entries for a struct wire_fence member m of type. */
#define WIRE_FENCE_FIELDS(type, m)                                                                 \
    WIRE_OPT("fence_lease_ms", JSONV_INT64, type, m.lease_ms, 0, PROTO_FENCE_MS_MAX),              \
        WIRE_OPT("fence_grace_ms", JSONV_INT64, type, m.grace_ms, 0, PROTO_FENCE_MS_MAX,           \
                 .flags = JSONV_PRESENCE, .presence_offset = offsetof(type, m.grace_p))

/* A grace comes only with a lease that is not 0: 0, or GPO_EINVAL naming
 * "fence_grace_ms". */
int wire_fence_check(const struct wire_fence *f, char *err, size_t errlen);
/* Writes both keys into o when lease_ms is not 0 (neither when it is);
 * a value outside 0..PROTO_FENCE_MS_MAX is GPO_EINVAL. */
void wire_fence_put(struct wire_enc *e, json_t *o, int64_t lease_ms, int64_t grace_ms);

/* ---- MIG instances and plans (mig.c) ---- */

/* An instance as jsonv fills it: ci_id's presence says whether it is none. */
struct wire_mig {
    struct proto_mig_instance m;
    enum jsonv_presence ci_p;
};

#define WIRE_NMIG_FIELDS 5
extern const struct jsonv_field wire_mig_fields[WIRE_NMIG_FIELDS];

/* A field-table entry for a list of instances: a struct wire_mig * member
 * and its size_t count. */
#define WIRE_MIG_LIST(key, flags_, type, m, count)                                                 \
    {                                                                                              \
        .name = key, .kind = JSONV_OBJECTS, .flags = flags_, .offset = offsetof(type, m),          \
        .max_items = PROTO_MIG_INSTANCES_MAX, .count_offset = offsetof(type, count),               \
        .elem_size = sizeof(struct wire_mig), .sub = wire_mig_fields, .nsub = WIRE_NMIG_FIELDS     \
    }

/* Checks n instances (no UUID without a compute instance; no start slot,
 * gi_id or UUID twice; `path` names the list: "gpus[1].mig") and moves them
 * into a new array *ret (NULL when n is 0): 0, or GPO_EINVAL/GPO_ENOMEM
 * with w unchanged. */
int wire_mig_take(struct wire_mig *w, size_t n, const char *path, struct proto_mig_instance **ret,
                  char *err, size_t errlen);
json_t *wire_mig_json(struct wire_enc *e, const struct proto_mig_instance *v, size_t n);
void wire_mig_free(struct proto_mig_instance *v, size_t n);
/* proto_gpu_sample_fit's part: drops instances a decoder would refuse. */
void wire_mig_fit(struct proto_mig_instance *v, size_t *n);

#define WIRE_NMIG_PLAN_FIELDS 4
extern const struct jsonv_field wire_mig_plan_fields[WIRE_NMIG_PLAN_FIELDS];
/* No plan id twice, no start twice in a destroy or create list. */
int wire_mig_plans_check(const struct proto_mig_plan *v, size_t n, char *err, size_t errlen);
json_t *wire_mig_plans_json(struct wire_enc *e, const struct proto_mig_plan *v, size_t n);
void wire_mig_plans_free(struct proto_mig_plan *v, size_t n);

/* ---- the spec of a run attempt (spec.c) ---- */

/* What jsonv fills: the spec, and the two members read by hand. */
struct wire_spec {
    struct proto_spec s; /* all but gpus_milli and env */
    json_t *gpus;        /* borrowed: an integer, or a real below 1 */
    enum jsonv_presence gpus_p;
    json_t *env;  /* borrowed: {NAME: VALUE} */
    char *signal; /* "signal", read into s.signal..; freed by take and release */
};

#define WIRE_NSPEC_FIELDS 45
extern const struct jsonv_field wire_spec_fields[WIRE_NSPEC_FIELDS];

/* Checks "gpus", "env" and "signal"; `path` names the spec in messages
 * ("attempts[2].spec"). 0, GPO_EINVAL, GPO_ERANGE. */
int wire_spec_check(const struct wire_spec *w, const char *path, char *err, size_t errlen);
/* Moves w's members into *ret (overwritten) and reads gpus and env: 0, or
 * GPO_ENOMEM with w unchanged. Call after wire_spec_check. */
int wire_spec_take(struct wire_spec *w, struct proto_spec *ret);
/* The spec as the controller's API shows a job's (every key; "serve" only
 * for a replica). */
json_t *wire_spec_json(struct wire_enc *e, const struct proto_spec *s);
void wire_spec_release(struct proto_spec *s);

#endif

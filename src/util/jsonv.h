/*
 * jsonv.h - strict, table-driven decoding of JSON objects into C structs.
 *
 * An API handler describes its body as a static table of fields and calls
 * jsonv_decode: every unknown key, wrong type, out-of-range value, over-long
 * string or array, NUL character and invalid UTF-8 is refused with one line
 * that names the field and what was expected, fit for a 400 response:
 *     unknown field 'gpu' (did you mean 'gpus'?)
 *     field 'gpus': expected an integer, got a string
 *     field 'gpus': 5000 is out of range 0..1024
 *     missing required field 'quotas[2].pool'
 *
 * Example:
 *     struct quota { char *pool; int64_t gpus; };
 *     struct team { char *name; uint32_t weight; struct quota *quotas; size_t nquotas; };
 *     static const struct jsonv_field quota_fields[] = {
 *         {.name = "pool", .kind = JSONV_STRING, .flags = JSONV_REQUIRED,
 *          .offset = offsetof(struct quota, pool), .min = 1, .max = 63},
 *         {.name = "gpus", .kind = JSONV_INT64, .offset = offsetof(struct quota, gpus),
 *          .min = 0, .max = 100000},
 *     };
 *     static const struct jsonv_field team_fields[] = {
 *         {.name = "name", .kind = JSONV_STRING, .flags = JSONV_REQUIRED,
 *          .offset = offsetof(struct team, name), .min = 1, .max = 63},
 *         {.name = "quotas", .kind = JSONV_OBJECTS, .offset = offsetof(struct team, quotas),
 *          .count_offset = offsetof(struct team, nquotas), .max_items = 64,
 *          .elem_size = sizeof(struct quota), .sub = quota_fields, .nsub = 2},
 *     };
 *     struct team t = {.weight = 1};              // defaults: absent fields keep them
 *     rc = jsonv_decode(body, team_fields, 2, &t, err, sizeof(err));
 *     ...
 *     jsonv_release(team_fields, 2, &t);
 *
 * Ownership: the strings and arrays jsonv stores are malloc'd and owned by the
 * destination struct; jsonv_release frees them, following the table. A
 * member that jsonv owns must hold NULL or a value jsonv stored, because a
 * decode that replaces it frees the old value (so decoding a PATCH body into
 * an existing struct neither leaks nor double-frees). JSONV_RAW members are
 * borrowed from the decoded json_t and live as long as it does.
 *
 * Errors: functions return 0 or one of the negative JSONV_* codes below (this
 * module's own table); on error the destination is unchanged.
 */
#ifndef GPUORCH_UTIL_JSONV_H
#define GPUORCH_UTIL_JSONV_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include "base/err.h"

/* Helpers for messages about user input, shared with the modules that check
 * what jsonv cannot (rules between fields):
 *  - jsonv_quote: user text fit to quote, in `out`: at most JSONV_QUOTE_MAX
 *    bytes of whole characters, then "..."; control characters (C0, DEL,
 *    C1) become '?', and so does every non-ASCII byte of text that is not
 *    valid UTF-8. Returns out.
 *  - jsonv_type_name: "an integer", "a string", ... ("null" for NULL).
 *  - jsonv_utf8_cut: the length of s[0, len) without a character split at
 *    its end (s was valid UTF-8 before it was cut at len). */
#define JSONV_QUOTE_MAX 40
const char *jsonv_quote(const char *s, size_t len, char out[JSONV_QUOTE_MAX + 4]);
const char *jsonv_type_name(const json_t *v);
size_t jsonv_utf8_cut(const char *s, size_t len);

/* What a field holds, and the C type of its member at `offset`. */
enum jsonv_kind {
    JSONV_BOOL,    /* bool; JSON true/false */
    JSONV_INT64,   /* int64_t; a JSON integer (2.0 is not one) in min..max */
    JSONV_UINT32,  /* uint32_t; likewise, min..max within 0..UINT32_MAX */
    JSONV_DOUBLE,  /* double; any JSON number in dmin..dmax */
    JSONV_STRING,  /* char *, malloc'd; length in bytes within min..max */
    JSONV_ENUM,    /* int: the index in `choices` of the JSON string */
    JSONV_STRINGS, /* char **, NULL-terminated, malloc'd (non-NULL even when
                      empty), and a size_t count at count_offset; at most
                      max_items strings, each with a length in min..max */
    JSONV_OBJECT,  /* an embedded struct, decoded with sub/nsub at offset */
    JSONV_OBJECTS, /* a malloc'd array of elem_size structs (non-NULL even
                      when empty), each decoded with sub/nsub, and a size_t
                      count at count_offset; at most max_items */
    JSONV_RAW,     /* json_t *, borrowed: any JSON value, for the caller to
                      check (a map of environment variables, say) */
};

enum jsonv_flag {
    JSONV_REQUIRED = 1 << 0, /* the key must be there */
    JSONV_NULLABLE = 1 << 1, /* null is accepted (see jsonv_decode) */
    JSONV_PRESENCE = 1 << 2, /* record absent/given/null at presence_offset */
    JSONV_TEXT = 1 << 3,     /* STRING/STRINGS: one line, no control character (util/text.h) */
};

/* What JSONV_PRESENCE records, in an enum jsonv_presence member: lets a PATCH
 * handler tell a key left out from a key given (or given as null). */
enum jsonv_presence {
    JSONV_ABSENT = 0,
    JSONV_GIVEN,
    JSONV_NULL,
};

/* Defaults when a field's bounds are both zero (as a designated initializer
 * leaves them): integers take their type's range, doubles any finite value,
 * strings 0..JSONV_STRING_MAX bytes, arrays JSONV_ITEMS_MAX items. A bound is
 * on every user-controlled size; give larger ones explicitly where needed. */
#define JSONV_STRING_MAX 4096
#define JSONV_ITEMS_MAX  1024

/* One entry of a field table. Offsets are offsetof() into the struct that the
 * table describes (the destination, or an element or embedded struct). */
struct jsonv_field {
    const char *name;              /* the JSON key */
    enum jsonv_kind kind;          /* with the member's C type, as listed above */
    unsigned flags;                /* enum jsonv_flag bits */
    size_t offset;                 /* the member */
    int64_t min, max;              /* INT64/UINT32: the range; STRING/STRINGS: the length
                                      range of each string, in bytes */
    double dmin, dmax;             /* DOUBLE: the range */
    const char *const *choices;    /* ENUM: the allowed strings, NULL-terminated */
    size_t max_items;              /* STRINGS/OBJECTS: the most items allowed */
    size_t count_offset;           /* STRINGS/OBJECTS: the size_t count member */
    size_t elem_size;              /* OBJECTS: sizeof one element */
    const struct jsonv_field *sub; /* OBJECT/OBJECTS: the nested table */
    size_t nsub;
    size_t presence_offset; /* JSONV_PRESENCE: the enum jsonv_presence member */
};

/*
 * Decodes the JSON object `obj` into *dst following fields[0..n). A field
 * whose key is absent keeps its member's value (set defaults before the call);
 * with JSONV_PRESENCE its presence becomes JSONV_ABSENT, as do those of its
 * nested table if it is an absent or null JSONV_OBJECT. A null for a
 * JSONV_NULLABLE field stores NULL (and a count of 0) in pointer kinds and
 * leaves scalar and OBJECT members as they are; its presence becomes
 * JSONV_NULL. Elements of a JSONV_OBJECTS array start zeroed.
 *
 * Returns 0, or on the first problem found (unknown keys first, in the
 * object's order, then the table's fields in table order):
 *  GPO_EINVAL   obj is not an object, or a value has the wrong type ("field
 *               'gpus': expected an integer, got a real number"); a key not
 *               in the table, with the nearest name when one is close
 *               ("unknown field 'gpu' (did you mean 'gpus'?)"); a
 *               JSONV_REQUIRED key is absent; an enum string is not one of
 *               the choices; a JSONV_TEXT string holds a control
 *               character; a string (or key) holds "\u0000" or is not
 *               valid UTF-8 (possible only for json_t built with jansson's
 *               _nocheck functions); a NULL argument or a bad table entry (a
 *               programmer error);
 *  GPO_ERANGE   a number, a string's length or an array's item count is out
 *               of its bounds;
 *  GPO_ENOMEM.
 * Nested fields are named by path: 'limits.memory_mib', 'quotas[2].pool'.
 * `err` (errlen bytes; may be NULL) receives the message, always terminated
 * and valid UTF-8; user text in it (keys, enum values) is shortened and its
 * control characters replaced. On error *dst is unchanged. `obj` and
 * `fields` are borrowed.
 */
int jsonv_decode(const json_t *obj, const struct jsonv_field *fields, size_t n, void *dst,
                 char *err, size_t errlen);

/*
 * Frees every string and array that jsonv owns in *dst, following the table
 * (nested ones included), and sets those members to NULL and their counts to
 * 0; RAW members become NULL. Other members are left alone. dst NULL is fine.
 */
void jsonv_release(const struct jsonv_field *fields, size_t n, void *dst);

/*
 * Whether s[0..len) is strict UTF-8 (RFC 3629): no overlong forms, no UTF-16
 * surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no truncated sequence.
 * For text that does not come through jansson: query parameters, headers. A
 * NUL byte is valid UTF-8; callers that need C strings check for it. Returns
 * 0, or GPO_EINVAL (also for a NULL s with len > 0).
 */
int jsonv_check_utf8(const char *s, size_t len);

#endif

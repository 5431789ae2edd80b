/*
 * jsonv.c - the field-table decoder.
 *
 * A decode runs in two phases so that a failure leaves the destination as it
 * was without knowing the destination's size: the first phase checks every
 * value and records each store it would make (new strings and arrays already
 * allocated) in a plan; only when everything is valid does the second phase
 * carry the plan out, which cannot fail. On error the plan's new values are
 * freed and nothing was stored. Elements of a JSONV_OBJECTS array live in
 * memory the plan allocated, so their stores are planned the same way and
 * the array's plan entry comes first: an abort frees it with everything else.
 */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errbuf.h"
#include "util/jsonv.h"
#include "util/text.h"
#include "base/banned.h"

#define PATH_MAX_LEN 160 /* bytes of a field path in a message */
#define MSG_MAX      512 /* bytes of a message before it is cut to errlen */
#define SUGGEST_MAX  64  /* keys and names longer than this get no suggestion */

/* One store the decode will make once everything is valid. */
enum wkind { W_BOOL, W_I64, W_U32, W_DBL, W_ENUM, W_STR, W_STRS, W_OBJS, W_RAW, W_PRES };

struct write {
    enum wkind kind;
    void *addr;
    void *count_addr;            /* W_STRS, W_OBJS: the size_t count */
    const struct jsonv_field *f; /* W_OBJS: frees the array it replaces */
    size_t count;
    union {
        bool b;
        int64_t i;
        uint32_t u;
        double d;
        int e;
        char *s;
        char **strs;
        void *objs;
        json_t *raw;
        enum jsonv_presence p;
    } v;
};

struct ctx {
    struct write *w;
    size_t nw, capw;
    char path[PATH_MAX_LEN]; /* of the field being decoded: "quotas[2].pool" */
    size_t plen;
    char *err;
    size_t errlen;
};

static void *member(void *base, size_t offset)
{
    return (char *)base + offset;
}

static void free_strings(char **strs)
{
    for (size_t i = 0; strs && strs[i]; i++)
        free(strs[i]);
    free(strs);
}

/* Frees a planned value that will not be stored. Elements of a planned
 * JSONV_OBJECTS array hold nothing yet: their own entries own their values. */
static void write_discard(struct write *w)
{
    if (w->kind == W_STR)
        free(w->v.s);
    else if (w->kind == W_STRS)
        free_strings(w->v.strs);
    else if (w->kind == W_OBJS)
        free(w->v.objs);
}

/* Stores a planned value, freeing what it replaces. */
// NOLINTNEXTLINE(misc-no-recursion): as deep as the field tables nest, which the code writes
static void write_commit(const struct write *w)
{
    switch (w->kind) {
    case W_BOOL:
        *(bool *)w->addr = w->v.b;
        break;
    case W_I64:
        *(int64_t *)w->addr = w->v.i;
        break;
    case W_U32:
        *(uint32_t *)w->addr = w->v.u;
        break;
    case W_DBL:
        *(double *)w->addr = w->v.d;
        break;
    case W_ENUM:
        *(int *)w->addr = w->v.e;
        break;
    case W_STR:
        free(*(char **)w->addr);
        *(char **)w->addr = w->v.s;
        break;
    case W_STRS:
        free_strings(*(char ***)w->addr);
        *(char ***)w->addr = w->v.strs;
        *(size_t *)w->count_addr = w->count;
        break;
    case W_OBJS: {
        char *old = *(void **)w->addr;
        size_t nold = *(size_t *)w->count_addr;
        for (size_t i = 0; old && i < nold; i++)
            jsonv_release(w->f->sub, w->f->nsub, old + i * w->f->elem_size);
        free(old);
        *(void **)w->addr = w->v.objs;
        *(size_t *)w->count_addr = w->count;
        break;
    }
    case W_RAW:
        *(json_t **)w->addr = w->v.raw;
        break;
    case W_PRES:
        *(enum jsonv_presence *)w->addr = w->v.p;
        break;
    }
}

/* Adds w to the plan; on failure frees w's value, so the caller never has to. */
static int plan(struct ctx *c, struct write w)
{
    if (c->nw == c->capw) {
        size_t cap = c->capw ? c->capw * 2 : 16;
        struct write *bigger = realloc(c->w, cap * sizeof(*bigger));
        if (!bigger) {
            write_discard(&w);
            return GPO_ENOMEM;
        }
        c->w = bigger;
        c->capw = cap;
    }
    c->w[c->nw++] = w;
    return 0;
}

/* ---- messages ---------------------------------------------------------- */

/* Length of the valid UTF-8 prefix left after cutting s at len bytes: an
 * incomplete last character is dropped. s[0..len) was valid UTF-8 before
 * the cut. */
size_t jsonv_utf8_cut(const char *s, size_t len)
{
    return errbuf_utf8_cut(s, len);
}

__attribute__((format(printf, 3, 4))) static int fail(struct ctx *c, int code, const char *fmt, ...)
{
    if (!c->err || c->errlen == 0)
        return code;
    char msg[MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : (size_t)n;
    if (len >= sizeof(msg))
        len = jsonv_utf8_cut(msg, sizeof(msg) - 1);
    if (len >= c->errlen)
        len = jsonv_utf8_cut(msg, c->errlen - 1);
    memcpy(c->err, msg, len);
    c->err[len] = '\0';
    return code;
}

const char *jsonv_quote(const char *s, size_t len, char out[JSONV_QUOTE_MAX + 4])
{
    bool utf8 = jsonv_check_utf8(s, len) == 0;
    size_t o = 0, i = 0;
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        size_t clen = !utf8 || c < 0xC0 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        if (o + clen > JSONV_QUOTE_MAX)
            break;
        bool c1 = utf8 && c == 0xC2 && (unsigned char)s[i + 1] < 0xA0; /* U+0080..U+009F */
        if (c < 0x20 || c == 0x7F || (c >= 0x80 && !utf8) || c1) {
            out[o++] = '?';
        } else {
            memcpy(out + o, s + i, clen);
            o += clen;
        }
        i += clen;
    }
    if (i < len) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
    return out;
}

const char *jsonv_type_name(const json_t *v)
{
    static const char *const names[] = {
        [JSON_OBJECT] = "an object",   [JSON_ARRAY] = "an array",     [JSON_STRING] = "a string",
        [JSON_INTEGER] = "an integer", [JSON_REAL] = "a real number", [JSON_TRUE] = "a boolean",
        [JSON_FALSE] = "a boolean",    [JSON_NULL] = "null",
    };
    return v ? names[json_typeof(v)] : "null";
}

/* ---- paths ------------------------------------------------------------- */

static size_t path_push_name(struct ctx *c, const char *name)
{
    size_t saved = c->plen;
    int n =
        snprintf(c->path + c->plen, sizeof(c->path) - c->plen, "%s%s", c->plen ? "." : "", name);
    c->plen += n < 0 ? 0 : (size_t)n;
    if (c->plen >= sizeof(c->path))
        c->plen = strlen(c->path);
    return saved;
}

static size_t path_push_index(struct ctx *c, size_t i)
{
    size_t saved = c->plen;
    int n = snprintf(c->path + c->plen, sizeof(c->path) - c->plen, "[%zu]", i);
    c->plen += n < 0 ? 0 : (size_t)n;
    if (c->plen >= sizeof(c->path))
        c->plen = strlen(c->path);
    return saved;
}

static void path_pop(struct ctx *c, size_t saved)
{
    c->plen = saved;
    c->path[saved] = '\0';
}

/* "field 'x': " when inside a field, "" at the top. */
static const char *field_prefix(const struct ctx *c, char *buf, size_t len)
{
    if (c->plen == 0)
        return "";
    snprintf(buf, len, "field '%s': ", c->path);
    return buf;
}

static int type_error(struct ctx *c, const char *expected, const json_t *v)
{
    char pre[PATH_MAX_LEN + 16];
    return fail(c, GPO_EINVAL, "%sexpected %s, got %s", field_prefix(c, pre, sizeof(pre)), expected,
                jsonv_type_name(v));
}

/* ---- suggestions ------------------------------------------------------- */

static char lower(char ch)
{
    return (char)(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
}

/* Optimal string alignment distance, ignoring case; both at most SUGGEST_MAX. */
static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
    size_t rows[3][SUGGEST_MAX + 1];
    size_t *prev2 = rows[0], *prev = rows[1], *cur = rows[2];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = lower(a[i - 1]) != lower(b[j - 1]);
            size_t d = prev[j - 1] + cost;
            if (prev[j] + 1 < d)
                d = prev[j] + 1;
            if (cur[j - 1] + 1 < d)
                d = cur[j - 1] + 1;
            if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
                lower(a[i - 2]) == lower(b[j - 1]) && prev2[j - 2] + 1 < d)
                d = prev2[j - 2] + 1;
            cur[j] = d;
        }
        size_t *t = prev2;
        prev2 = prev;
        prev = cur;
        cur = t;
    }
    return prev[lb];
}

/* The field name nearest to key, if near enough to be a likely typo. */
static const char *suggest(const struct jsonv_field *fields, size_t n, const char *key, size_t klen)
{
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    if (klen > SUGGEST_MAX)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        size_t lb = strlen(fields[i].name);
        if (lb > SUGGEST_MAX)
            continue;
        size_t limit = lb / 3 < 1 ? 1 : lb / 3 > 3 ? 3 : lb / 3;
        size_t d = edit_distance(key, klen, fields[i].name, lb);
        if (d <= limit && d < best_d) {
            best = fields[i].name;
            best_d = d;
        }
    }
    return best;
}

/* ---- values ------------------------------------------------------------ */

static int decode_fields(struct ctx *c, json_t *obj, const struct jsonv_field *fields, size_t n,
                         void *base);

/* NUL, UTF-8 and length checks of a string value (or array item). */
static int check_string(struct ctx *c, const struct jsonv_field *f, const char *s, size_t len)
{
    if (strlen(s) != len)
        return fail(c, GPO_EINVAL, "field '%s': contains a NUL character (\\u0000)", c->path);
    if (jsonv_check_utf8(s, len) < 0)
        return fail(c, GPO_EINVAL, "field '%s': not valid UTF-8", c->path);
    if (f->kind == JSONV_ENUM)
        return 0;
    int64_t lo = f->min, hi = f->max;
    if (lo == 0 && hi == 0)
        hi = JSONV_STRING_MAX;
    if ((int64_t)len < lo || (int64_t)len > hi)
        return fail(c, GPO_ERANGE, "field '%s': length %zu is out of range %lld..%lld bytes",
                    c->path, len, (long long)lo, (long long)hi);
    size_t at = f->flags & JSONV_TEXT ? text_control_at(s, len) : len;
    if (at < len)
        return fail(c, GPO_EINVAL, TEXT_CONTROL_FMT, c->path, text_control_code(s, at), at);
    return 0;
}

static char *copy_string(const char *s, size_t len)
{
    char *p = malloc(len + 1);
    if (p) {
        memcpy(p, s, len);
        p[len] = '\0';
    }
    return p;
}

static int decode_bool(struct ctx *c, const struct jsonv_field *f, json_t *v, void *base)
{
    if (!json_is_boolean(v))
        return type_error(c, "a boolean", v);
    return plan(
        c, (struct write){.kind = W_BOOL, .addr = member(base, f->offset), .v.b = json_is_true(v)});
}

static int decode_int(struct ctx *c, const struct jsonv_field *f, json_t *v, void *base)
{
    if (!json_is_integer(v))
        return type_error(c, "an integer", v);
    int64_t x = json_integer_value(v), lo = f->min, hi = f->max;
    if (f->kind == JSONV_UINT32) {
        if (lo == 0 && hi == 0)
            hi = UINT32_MAX;
        lo = lo < 0 ? 0 : lo;
        hi = hi > UINT32_MAX ? UINT32_MAX : hi;
    } else if (lo == 0 && hi == 0) {
        lo = INT64_MIN;
        hi = INT64_MAX;
    }
    if (x < lo || x > hi)
        return fail(c, GPO_ERANGE, "field '%s': %lld is out of range %lld..%lld", c->path,
                    (long long)x, (long long)lo, (long long)hi);
    struct write w = {.kind = W_I64, .addr = member(base, f->offset), .v.i = x};
    if (f->kind == JSONV_UINT32)
        w = (struct write){.kind = W_U32, .addr = w.addr, .v.u = (uint32_t)x};
    return plan(c, w);
}

static int decode_double(struct ctx *c, const struct jsonv_field *f, json_t *v, void *base)
{
    if (!json_is_number(v))
        return type_error(c, "a number", v);
    double x = json_number_value(v);
    bool bounded = f->dmin != 0 || f->dmax != 0;
    if (!isfinite(x) || (bounded && (x < f->dmin || x > f->dmax))) {
        if (!bounded)
            return fail(c, GPO_ERANGE, "field '%s': %g is not a finite number", c->path, x);
        return fail(c, GPO_ERANGE, "field '%s': %g is out of range %g..%g", c->path, x, f->dmin,
                    f->dmax);
    }
    return plan(c, (struct write){.kind = W_DBL, .addr = member(base, f->offset), .v.d = x});
}

static int decode_string(struct ctx *c, const struct jsonv_field *f, json_t *v, void *base)
{
    if (!json_is_string(v))
        return type_error(c, "a string", v);
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    int rc = check_string(c, f, s, len);
    if (rc < 0)
        return rc;
    char *copy = copy_string(s, len);
    if (!copy)
        return GPO_ENOMEM;
    /* plan() takes copy, and frees it if it fails; clang 14's analyzer does not see a
     * pointer escape inside a struct passed by value. */
    // NOLINTNEXTLINE(clang-analyzer-unix.Malloc): plan() takes copy
    return plan(c, (struct write){.kind = W_STR, .addr = member(base, f->offset), .v.s = copy});
}

static int decode_enum(struct ctx *c, const struct jsonv_field *f, json_t *v, void *base)
{
    if (!json_is_string(v))
        return type_error(c, "a string", v);
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    int rc = check_string(c, f, s, len);
    if (rc < 0)
        return rc;
    char list[MSG_MAX] = "";
    size_t used = 0;
    for (int i = 0; f->choices[i]; i++) {
        if (strcmp(s, f->choices[i]) == 0)
            return plan(c,
                        (struct write){.kind = W_ENUM, .addr = member(base, f->offset), .v.e = i});
        int n = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", f->choices[i]);
        used += n < 0 ? 0 : (size_t)n;
        if (used >= sizeof(list))
            used = sizeof(list) - 1;
    }
    char q[JSONV_QUOTE_MAX + 4];
    return fail(c, GPO_EINVAL, "field '%s': '%s' is not one of %s", c->path, jsonv_quote(s, len, q),
                list);
}

static size_t items_max(const struct jsonv_field *f)
{
    return f->max_items ? f->max_items : JSONV_ITEMS_MAX;
}

static int check_items(struct ctx *c, const struct jsonv_field *f, json_t *v, const char *expect)
{
    if (!json_is_array(v))
        return type_error(c, expect, v);
    if (json_array_size(v) > items_max(f))
        return fail(c, GPO_ERANGE, "field '%s': %zu items, at most %zu allowed", c->path,
                    json_array_size(v), items_max(f));
    return 0;
}

static int decode_strings(struct ctx *c, const struct jsonv_field *f, json_t *v, void *base)
{
    int rc = check_items(c, f, v, "an array of strings");
    if (rc < 0)
        return rc;
    size_t n = json_array_size(v);
    char **strs = calloc(n + 1, sizeof(*strs));
    if (!strs)
        return GPO_ENOMEM;
    for (size_t i = 0; i < n && rc == 0; i++) {
        json_t *item = json_array_get(v, i);
        size_t saved = path_push_index(c, i);
        if (!json_is_string(item))
            rc = type_error(c, "a string", item);
        else
            rc = check_string(c, f, json_string_value(item), json_string_length(item));
        if (rc == 0 && !(strs[i] = copy_string(json_string_value(item), json_string_length(item))))
            rc = GPO_ENOMEM;
        path_pop(c, saved);
    }
    if (rc < 0) {
        free_strings(strs);
        return rc;
    }
    // NOLINTNEXTLINE(clang-analyzer-unix.Malloc): plan() takes strs (see decode_string)
    return plan(c, (struct write){.kind = W_STRS,
                                  .addr = member(base, f->offset),
                                  .count_addr = member(base, f->count_offset),
                                  .count = n,
                                  .v.strs = strs});
}

static int decode_object(struct ctx *c, const struct jsonv_field *f, json_t *v, void *base)
{
    if (!json_is_object(v))
        return type_error(c, "an object", v);
    return decode_fields(c, v, f->sub, f->nsub, member(base, f->offset));
}

static int decode_objects(struct ctx *c, const struct jsonv_field *f, json_t *v, void *base)
{
    int rc = check_items(c, f, v, "an array of objects");
    if (rc < 0)
        return rc;
    size_t n = json_array_size(v);
    char *items = calloc(n ? n : 1, f->elem_size);
    if (!items)
        return GPO_ENOMEM;
    rc = plan(c, (struct write){.kind = W_OBJS,
                                .addr = member(base, f->offset),
                                .count_addr = member(base, f->count_offset),
                                .f = f,
                                .count = n,
                                .v.objs = items});
    for (size_t i = 0; i < n && rc == 0; i++) {
        json_t *item = json_array_get(v, i);
        size_t saved = path_push_index(c, i);
        if (!json_is_object(item))
            rc = type_error(c, "an object", item);
        else
            rc = decode_fields(c, item, f->sub, f->nsub, items + i * f->elem_size);
        path_pop(c, saved);
    }
    // NOLINTNEXTLINE(clang-analyzer-unix.Malloc): plan() took items (see decode_string)
    return rc;
}

static int decode_raw(struct ctx *c, const struct jsonv_field *f, json_t *v, void *base)
{
    return plan(c, (struct write){.kind = W_RAW, .addr = member(base, f->offset), .v.raw = v});
}

typedef int (*decode_fn)(struct ctx *c, const struct jsonv_field *f, json_t *v, void *base);

/* Per kind: what a message says was expected, and the decoder. */
static const struct {
    const char *expect;
    decode_fn decode;
} kinds[] = {
    [JSONV_BOOL] = {"a boolean", decode_bool},
    [JSONV_INT64] = {"an integer", decode_int},
    [JSONV_UINT32] = {"an integer", decode_int},
    [JSONV_DOUBLE] = {"a number", decode_double},
    [JSONV_STRING] = {"a string", decode_string},
    [JSONV_ENUM] = {"a string", decode_enum},
    [JSONV_STRINGS] = {"an array of strings", decode_strings},
    [JSONV_OBJECT] = {"an object", decode_object},
    [JSONV_OBJECTS] = {"an array of objects", decode_objects},
    [JSONV_RAW] = {"a value", decode_raw},
};

/* ---- fields ------------------------------------------------------------ */

static bool field_ok(const struct jsonv_field *f)
{
    if (!f->name || (unsigned)f->kind >= sizeof(kinds) / sizeof(kinds[0]))
        return false;
    if (f->kind == JSONV_ENUM && !f->choices)
        return false;
    if ((f->kind == JSONV_OBJECT || f->kind == JSONV_OBJECTS) && !f->sub && f->nsub)
        return false;
    return f->kind != JSONV_OBJECTS || f->elem_size > 0;
}

static int plan_presence(struct ctx *c, const struct jsonv_field *f, void *base,
                         enum jsonv_presence p)
{
    if (!(f->flags & JSONV_PRESENCE))
        return 0;
    return plan(c,
                (struct write){.kind = W_PRES, .addr = member(base, f->presence_offset), .v.p = p});
}

/* A field left out (or an OBJECT given as null): presences become absent,
 * down through embedded objects. */
// NOLINTNEXTLINE(misc-no-recursion): as deep as the field tables nest, which the code writes
static int plan_absent(struct ctx *c, const struct jsonv_field *f, void *base)
{
    int rc = plan_presence(c, f, base, JSONV_ABSENT);
    for (size_t i = 0; rc == 0 && f->kind == JSONV_OBJECT && i < f->nsub; i++)
        rc = plan_absent(c, &f->sub[i], member(base, f->offset));
    return rc;
}

/* A null for a nullable field. */
static int plan_null(struct ctx *c, const struct jsonv_field *f, void *base)
{
    int rc = 0;
    void *addr = member(base, f->offset);
    if (f->kind == JSONV_STRING)
        rc = plan(c, (struct write){.kind = W_STR, .addr = addr});
    else if (f->kind == JSONV_STRINGS || f->kind == JSONV_OBJECTS)
        rc = plan(c, (struct write){.kind = f->kind == JSONV_STRINGS ? W_STRS : W_OBJS,
                                    .addr = addr,
                                    .count_addr = member(base, f->count_offset),
                                    .f = f});
    else if (f->kind == JSONV_RAW)
        rc = plan(c, (struct write){.kind = W_RAW, .addr = addr});
    for (size_t i = 0; rc == 0 && f->kind == JSONV_OBJECT && i < f->nsub; i++)
        rc = plan_absent(c, &f->sub[i], addr);
    return rc == 0 ? plan_presence(c, f, base, JSONV_NULL) : rc;
}

static const struct jsonv_field *find_field(const struct jsonv_field *fields, size_t n,
                                            const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(fields[i].name, key) == 0)
            return &fields[i];
    return NULL;
}

/* Every key of obj must be in the table: reported before anything else, as a
 * misspelt key would otherwise show up as a missing required field. */
static int check_keys(struct ctx *c, json_t *obj, const struct jsonv_field *fields, size_t n)
{
    char pre[PATH_MAX_LEN + 16];
    for (void *it = json_object_iter(obj); it; it = json_object_iter_next(obj, it)) {
        const char *key = json_object_iter_key(it);
        size_t klen = json_object_iter_key_len(it);
        if (jsonv_check_utf8(key, klen) < 0)
            return fail(c, GPO_EINVAL, "%sa field name is not valid UTF-8",
                        field_prefix(c, pre, sizeof(pre)));
        if (strlen(key) != klen)
            return fail(c, GPO_EINVAL, "%sa field name contains a NUL character (\\u0000)",
                        field_prefix(c, pre, sizeof(pre)));
        if (find_field(fields, n, key))
            continue;
        char q[JSONV_QUOTE_MAX + 4];
        const char *near = suggest(fields, n, key, klen);
        return fail(c, GPO_EINVAL, "unknown field '%s%s%s'%s%s%s", c->path, c->plen ? "." : "",
                    jsonv_quote(key, klen, q), near ? " (did you mean '" : "", near ? near : "",
                    near ? "'?)" : "");
    }
    return 0;
}

static int decode_fields(struct ctx *c, json_t *obj, const struct jsonv_field *fields, size_t n,
                         void *base)
{
    if (n > 0 && !fields)
        return fail(c, GPO_EINVAL, "jsonv: no field table");
    for (size_t i = 0; i < n; i++)
        if (!field_ok(&fields[i]))
            return fail(c, GPO_EINVAL, "jsonv: bad table entry %zu ('%s')", i,
                        fields[i].name ? fields[i].name : "(null)");
    int rc = check_keys(c, obj, fields, n);
    for (size_t i = 0; i < n && rc == 0; i++) {
        const struct jsonv_field *f = &fields[i];
        json_t *v = json_object_get(obj, f->name);
        size_t saved = path_push_name(c, f->name);
        if (!v && (f->flags & JSONV_REQUIRED))
            rc = fail(c, GPO_EINVAL, "missing required field '%s'", c->path);
        else if (!v)
            rc = plan_absent(c, f, base);
        else if (json_is_null(v) && !(f->flags & JSONV_NULLABLE))
            rc = type_error(c, kinds[f->kind].expect, v);
        else if (json_is_null(v))
            rc = plan_null(c, f, base);
        else if ((rc = kinds[f->kind].decode(c, f, v, base)) == 0)
            rc = plan_presence(c, f, base, JSONV_GIVEN);
        path_pop(c, saved);
    }
    return rc;
}

int jsonv_decode(const json_t *obj, const struct jsonv_field *fields, size_t n, void *dst,
                 char *err, size_t errlen)
{
    struct ctx c = {.err = err, .errlen = errlen};
    if (err && errlen)
        err[0] = '\0';
    if (!obj || !dst)
        return fail(&c, GPO_EINVAL, "jsonv: no object or destination");
    json_t *o = (json_t *)obj; /* jansson's getters take non-const pointers */
    int rc =
        json_is_object(o) ? decode_fields(&c, o, fields, n, dst) : type_error(&c, "an object", o);
    if (rc == GPO_ENOMEM)
        fail(&c, rc, "out of memory");
    for (size_t i = 0; i < c.nw; i++) {
        if (rc == 0)
            write_commit(&c.w[i]);
        else
            write_discard(&c.w[i]);
    }
    free(c.w);
    return rc;
}

// NOLINTNEXTLINE(misc-no-recursion): as deep as the field tables nest, which the code writes
void jsonv_release(const struct jsonv_field *fields, size_t n, void *dst)
{
    if (!dst || !fields)
        return;
    for (size_t i = 0; i < n; i++) {
        const struct jsonv_field *f = &fields[i];
        void *addr = member(dst, f->offset);
        if (f->kind == JSONV_STRING) {
            free(*(char **)addr);
            *(char **)addr = NULL;
        } else if (f->kind == JSONV_STRINGS || f->kind == JSONV_OBJECTS) {
            struct write empty = {.kind = f->kind == JSONV_STRINGS ? W_STRS : W_OBJS,
                                  .addr = addr,
                                  .count_addr = member(dst, f->count_offset),
                                  .f = f};
            write_commit(&empty); /* frees the old array, stores NULL and 0 */
        } else if (f->kind == JSONV_OBJECT) {
            jsonv_release(f->sub, f->nsub, addr);
        } else if (f->kind == JSONV_RAW) {
            *(json_t **)addr = NULL;
        }
    }
}

/* ---- UTF-8 ------------------------------------------------------------- */

int jsonv_check_utf8(const char *s, size_t len)
{
    if (!s)
        return len ? GPO_EINVAL : 0;
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        unsigned char b = *p;
        if (b < 0x80) {
            p++;
            continue;
        }
        /* RFC 3629's table: the lead byte bounds the first continuation byte,
         * which is how overlongs, surrogates and > U+10FFFF are refused. */
        size_t n;
        unsigned char lo = 0x80, hi = 0xBF;
        if (b >= 0xC2 && b <= 0xDF)
            n = 2;
        else if (b >= 0xE0 && b <= 0xEF) {
            n = 3;
            lo = b == 0xE0 ? 0xA0 : 0x80;
            hi = b == 0xED ? 0x9F : 0xBF;
        } else if (b >= 0xF0 && b <= 0xF4) {
            n = 4;
            lo = b == 0xF0 ? 0x90 : 0x80;
            hi = b == 0xF4 ? 0x8F : 0xBF;
        } else {
            return GPO_EINVAL;
        }
        if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi)
            return GPO_EINVAL;
        for (size_t i = 2; i < n; i++)
            if ((p[i] & 0xC0) != 0x80)
                return GPO_EINVAL;
        p += n;
    }
    return 0;
}

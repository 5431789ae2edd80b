/*
 * doc.c - one YAML or JSON input document, checked field by field (doc.h).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "sim/doc.h"
#include "util/yamljson.h"
#include "base/banned.h"

/* The analyzer's stand-ins (doc.h): here are the functions. */
#undef sim_doc_fail
#undef sim_doc_fail_at

#define FILE_MAX (16u << 20)

void sim_doc_one_line(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

void sim_doc_init(struct sim_doc *d, const char *name, char *err, size_t errlen)
{
    memset(d, 0, sizeof(*d));
    d->name = name ? name : "input";
    d->err = err && errlen ? err : d->noerr;
    d->errlen = err && errlen ? errlen : sizeof(d->noerr);
    d->err[0] = '\0';
}

void sim_doc_release(struct sim_doc *d)
{
    json_decref(d->json);
    d->json = NULL;
    yamljson_release(&d->yaml_doc);
    d->yaml = NULL;
}

size_t sim_doc_key(struct sim_doc *d, const char *key)
{
    return yamljson_path_key(&d->path, key);
}

size_t sim_doc_index(struct sim_doc *d, size_t i)
{
    return yamljson_path_index(&d->path, i);
}

void sim_doc_pop(struct sim_doc *d, size_t mark)
{
    yamljson_path_pop(&d->path, mark);
}

static int vfail(struct sim_doc *d, int rc, long line, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
static int vfail(struct sim_doc *d, int rc, long line, const char *fmt, va_list ap)
{
    char msg[512], where[32] = "";
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (line > 0)
        snprintf(where, sizeof(where), ":%ld", line);
    if (d->path.len)
        snprintf(d->err, d->errlen, "%s%s: %s: %s", d->name, where, d->path.s, msg);
    else
        snprintf(d->err, d->errlen, "%s%s: %s", d->name, where, msg);
    sim_doc_one_line(d->err);
    return rc;
}

int sim_doc_fail(struct sim_doc *d, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rc = vfail(d, rc, yamljson_line(d->yaml, d->path.s), fmt, ap);
    va_end(ap);
    return rc;
}

int sim_doc_fail_at(struct sim_doc *d, int rc, long line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rc = vfail(d, rc, line, fmt, ap);
    va_end(ap);
    return rc;
}

const char *sim_doc_shown(const struct sim_doc *d, const json_t *v, char *buf, size_t n)
{
    const char *text = yamljson_text(d->yaml, d->path.s);
    if (text && *text) /* the empty scalar is shown as null, below */
        snprintf(buf, n, "%.64s", text);
    else if (json_is_string(v))
        snprintf(buf, n, "a string ('%.64s%s')", json_string_value(v),
                 json_string_length(v) > 64 ? "..." : "");
    else if (json_is_integer(v))
        snprintf(buf, n, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, n, "%.17g", json_real_value(v));
    else
        snprintf(buf, n, "%s",
                 json_is_object(v)  ? "a mapping"
                 : json_is_array(v) ? "a list"
                 : json_is_null(v)  ? "null"
                 : json_is_true(v)  ? "true"
                                    : "false");
    return buf;
}

int sim_doc_num(struct sim_doc *d, const json_t *v, const struct sim_doc_num *r, int64_t *ret)
{
    char got[128];
    double x = json_number_value(v);
    bool typed = r->integer ? json_is_integer(v) : json_is_number(v);
    bool low = r->min_open ? !(x > r->min) : x < r->min;
    if (!typed || low || x > r->max)
        return sim_doc_fail(d, typed && x > r->max ? r->over_rc : GPO_EINVAL,
                            "expected %s %s %.15g %s %.15g, got %s",
                            r->integer ? "an integer" : "a number", r->min_open ? ">" : "from",
                            r->min, r->min_open ? "and <=" : "to", r->max,
                            sim_doc_shown(d, v, got, sizeof(got)));
    int64_t out = r->integer ? (int64_t)json_integer_value(v) : (int64_t)llround(x * r->scale);
    if (r->min_open && out < 1)
        return sim_doc_fail(d, GPO_EINVAL, "%s is less than one MiB",
                            sim_doc_shown(d, v, got, sizeof(got)));
    *ret = out;
    return 0;
}

int sim_doc_get_num(struct sim_doc *d, const json_t *o, const char *key,
                    const struct sim_doc_num *r, int64_t def, int64_t *ret)
{
    size_t mark = sim_doc_key(d, key);
    json_t *v = json_object_get(o, key);
    int rc = 0;
    if (v)
        rc = sim_doc_num(d, v, r, ret);
    else if (def == SIM_DOC_REQUIRED)
        rc = sim_doc_fail(d, GPO_EINVAL, "required field missing");
    else
        *ret = def;
    sim_doc_pop(d, mark);
    return rc;
}

int sim_doc_get_str(struct sim_doc *d, const json_t *o, const char *key, bool required, bool name,
                    const char **ret)
{
    char got[128];
    size_t mark = sim_doc_key(d, key);
    json_t *v = json_object_get(o, key);
    const char *str = json_string_value(v);
    bool ok = str && json_string_length(v) >= 1 && json_string_length(v) <= SIM_DOC_NAME_MAX;
    for (const char *c = str; ok && name && *c; c++)
        ok = (unsigned char)*c >= 0x20 && *c != 0x7f;
    int rc = 0;
    if (!v && required)
        rc = sim_doc_fail(d, GPO_EINVAL, "required field missing");
    else if (v && !ok)
        rc = sim_doc_fail(d, GPO_EINVAL, "expected %s (1 to %d bytes%s), got %s",
                          name ? "a name" : "a string", SIM_DOC_NAME_MAX,
                          name ? ", no control characters" : "",
                          sim_doc_shown(d, v, got, sizeof(got)));
    sim_doc_pop(d, mark);
    *ret = rc == 0 ? str : NULL;
    return rc;
}

int sim_doc_get_bool(struct sim_doc *d, const json_t *o, const char *key, bool def, bool *ret)
{
    size_t mark = sim_doc_key(d, key);
    json_t *v = json_object_get(o, key);
    int rc = 0;
    if (v && !json_is_boolean(v)) {
        char got[128];
        rc = sim_doc_fail(d, GPO_EINVAL, "expected true or false, got %s",
                          sim_doc_shown(d, v, got, sizeof(got)));
    } else {
        *ret = v ? json_is_true(v) : def;
    }
    sim_doc_pop(d, mark);
    return rc;
}

int sim_doc_check_object(struct sim_doc *d, const json_t *o, const char *const *keys)
{
    char list[384] = "";
    const char *key;
    json_t *v;
    for (size_t k = 0, n = 0; keys[k] && n < sizeof(list); k++)
        n += (size_t)snprintf(list + n, n < sizeof(list) ? sizeof(list) - n : 0, "%s%s",
                              k ? ", " : "", keys[k]);
    if (!json_is_object(o)) {
        char got[128];
        return sim_doc_fail(d, GPO_EINVAL, "expected a mapping (%s), got %s", list,
                            sim_doc_shown(d, o, got, sizeof(got)));
    }
    json_object_foreach((json_t *)o, key, v)
    {
        size_t k = 0;
        while (keys[k] && strcmp(keys[k], key) != 0)
            k++;
        if (!keys[k]) {
            sim_doc_key(d, key);
            return sim_doc_fail(d, GPO_EINVAL, "unknown field (expected one of: %s)", list);
        }
    }
    return 0;
}

int sim_doc_get_list(struct sim_doc *d, const json_t *o, const char *key, bool required, size_t max,
                     int over_rc, json_t **ret)
{
    char got[128];
    size_t mark = sim_doc_key(d, key);
    json_t *v = json_object_get(o, key);
    int rc = 0;
    if (!v && required)
        rc = sim_doc_fail(d, GPO_EINVAL, "required field missing");
    else if (v && !json_is_array(v))
        rc = sim_doc_fail(d, GPO_EINVAL, "expected a list, got %s",
                          sim_doc_shown(d, v, got, sizeof(got)));
    else if (v && required && json_array_size(v) == 0)
        rc = sim_doc_fail(d, GPO_EINVAL, "expected at least one entry");
    else if (v && json_array_size(v) > max)
        rc = sim_doc_fail(d, over_rc, "more than %zu entries", max);
    sim_doc_pop(d, mark);
    *ret = rc == 0 ? v : NULL;
    return rc;
}

/* ---- parsing ---- */

static int parse_json(struct sim_doc *d, const char *text, size_t len)
{
    json_error_t jerr;
    d->json = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (d->json)
        return 0;
    /* Some of jansson's failed allocations leave the error empty. */
    if (json_error_code(&jerr) == json_error_out_of_memory || jerr.text[0] == '\0')
        return sim_doc_fail_at(d, GPO_ENOMEM, 0, "out of memory");
    return sim_doc_fail_at(d, GPO_EINVAL, jerr.line, "invalid JSON: %s (column %d)", jerr.text,
                           jerr.column);
}

static int parse_yaml(struct sim_doc *d, const char *text, size_t len)
{
    struct yamljson_error e;
    int rc = yamljson_parse(&d->yaml_doc, text, len, &e);
    if (rc != 0) {
        d->path = e.path;
        return sim_doc_fail_at(d, rc == GPO_ENOMEM ? GPO_ENOMEM : GPO_EINVAL, e.line, "%s",
                               e.problem);
    }
    d->yaml = &d->yaml_doc;
    return 0;
}

int sim_doc_parse(struct sim_doc *d, const char *text, size_t len, json_t **ret_root)
{
    size_t bom = 0, skip;
    len = text ? len : 0;
    text = text ? text : "";
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
        bom = 3; /* a UTF-8 byte order mark: jansson does not skip it */
    skip = bom;
    while (skip < len && text[skip] != '\0' && strchr(" \t\r\n", text[skip]))
        skip++;
    int rc = skip < len && text[skip] == '{' ? parse_json(d, text + bom, len - bom)
                                             : parse_yaml(d, text, len);
    *ret_root = rc ? NULL : d->json ? d->json : d->yaml_doc.root;
    return rc;
}

static int read_all(FILE *f, const char *path, char **ret, size_t *retlen, char *err, size_t errlen)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (len == cap) {
            cap = cap * 2 > FILE_MAX + 1 ? FILE_MAX + 1 : cap * 2;
            char *grown = realloc(buf, cap);
            if (!grown)
                break;
            buf = grown;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (len > FILE_MAX) {
            free(buf);
            snprintf(err, errlen, "%s: larger than %u MiB", path, FILE_MAX >> 20);
            return GPO_E2BIG;
        }
        if (n == 0 && ferror(f)) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            free(buf);
            return GPO_EINVAL;
        }
        if (n == 0) {
            *ret = buf;
            *retlen = len;
            return 0;
        }
    }
    free(buf);
    snprintf(err, errlen, "%s: out of memory", path);
    return GPO_ENOMEM;
}

int sim_doc_read_file(const char *path, char **ret, size_t *ret_len, char *err, size_t errlen)
{
    char scratch[1];
    err = err && errlen ? err : scratch;
    errlen = err == scratch ? sizeof(scratch) : errlen;
    *ret = NULL;
    *ret_len = 0;
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        snprintf(err, errlen, "%s: %s", path ? path : "(null)", path ? strerror(errno) : "no path");
        sim_doc_one_line(err);
        return GPO_EINVAL;
    }
    int rc = read_all(f, path, ret, ret_len, err, errlen);
    (void)fclose(f); /* read only: read_all checked what it read */
    if (rc != 0)
        sim_doc_one_line(err);
    return rc;
}

/*
 * yamljson.c - one YAML document as a jansson tree (see yamljson.h).
 *
 * A recursive walk over libyaml's events: each function takes the event that
 * opens its node and owns it (deletes it), so every path out frees what it
 * parsed. The depth cap bounds the recursion.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <yaml.h>

#include "util/yamljson.h"
#include "base/banned.h"

#define STR_TAG "tag:yaml.org,2002:str"

struct conv {
    yaml_parser_t parser;
    struct yamljson *y;
    struct yamljson_path path;
    struct yamljson_error *e;
};

/* ---- paths ---- */

static size_t path_grow(struct yamljson_path *p, size_t old, int n)
{
    p->len = n < 0 ? old : old + (size_t)n < sizeof(p->s) ? old + (size_t)n : sizeof(p->s) - 1;
    p->s[p->len] = '\0';
    return old;
}

size_t yamljson_path_key(struct yamljson_path *p, const char *key)
{
    size_t old = p->len;
    return path_grow(p, old, snprintf(p->s + old, sizeof(p->s) - old, old ? ".%s" : "%s", key));
}

size_t yamljson_path_index(struct yamljson_path *p, size_t i)
{
    size_t old = p->len;
    return path_grow(p, old, snprintf(p->s + old, sizeof(p->s) - old, "[%zu]", i));
}

void yamljson_path_pop(struct yamljson_path *p, size_t mark)
{
    p->len = mark < p->len ? mark : p->len;
    p->s[p->len] = '\0';
}

long yamljson_line(const struct yamljson *y, const char *path)
{
    char p[YAMLJSON_PATH_CAP];
    size_t n = strlen(path);
    if (!y || !y->lines || n >= sizeof(p))
        return 0;
    memcpy(p, path, n + 1);
    for (;;) {
        json_t *l = json_object_get(y->lines, p);
        if (l)
            return (long)json_integer_value(l);
        if (n == 0)
            return 0;
        while (n > 0 && p[n - 1] != '.' && p[n - 1] != '[')
            n--;
        n -= n > 0; /* the '.' or '[' too */
        p[n] = '\0';
    }
}

const char *yamljson_text(const struct yamljson *y, const char *path)
{
    return y && y->texts ? json_string_value(json_object_get(y->texts, path)) : NULL;
}

void yamljson_release(struct yamljson *y)
{
    if (!y)
        return;
    json_decref(y->root);
    json_decref(y->lines);
    json_decref(y->texts);
    memset(y, 0, sizeof(*y));
}

/* ---- errors ---- */

static int conv_fail(struct conv *c, int rc, long line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int conv_fail(struct conv *c, int rc, long line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->e->problem, sizeof(c->e->problem), fmt, ap);
    va_end(ap);
    c->e->line = line;
    c->e->path = c->path;
    return rc;
}
#ifdef __clang_analyzer__
/* clang's static analyzer (make lint) does not follow calls into variadic
 * functions: for the analysis only, conv_fail says that it returns rc. */
#define conv_fail(c, rc, ...)                                                                      \
    __extension__({                                                                                \
        int conv_rc_ = (rc);                                                                       \
        (void)conv_fail(c, conv_rc_, __VA_ARGS__), conv_rc_;                                       \
    })
#endif

static int next_event(struct conv *c, yaml_event_t *ev)
{
    yaml_parser_t *p = &c->parser;
    if (yaml_parser_parse(p, ev))
        return 0;
    if (p->error == YAML_MEMORY_ERROR)
        return conv_fail(c, GPO_ENOMEM, 0, "out of memory");
    yamljson_path_pop(&c->path, 0); /* the path so far says nothing about a syntax error */
    if (p->error == YAML_READER_ERROR)
        return conv_fail(c, GPO_EINVAL, 0, "invalid YAML: %s at byte %zu",
                         p->problem ? p->problem : "unreadable input", p->problem_offset);
    return conv_fail(c, GPO_EINVAL, (long)p->problem_mark.line + 1, "invalid YAML: %s%s%s%s",
                     p->problem ? p->problem : "syntax error", p->context ? " (" : "",
                     p->context ? p->context : "", p->context ? ")" : "");
}

/* Adds path -> v (taken) to a side table. */
static int record(struct conv *c, json_t *table, json_t *v)
{
    if (!v || json_object_set_new_nocheck(table, c->path.s, v) != 0)
        return conv_fail(c, GPO_ENOMEM, 0, "out of memory");
    return 0;
}

/* ---- scalars ---- */

static bool is_digits(const char *s, size_t *n, int base)
{
    size_t k = 0;
    for (;; k++) {
        char c = s[k], l = (char)(c | 0x20);
        bool ok = base == 16 ? (c >= '0' && c <= '9') || (l >= 'a' && l <= 'f')
                             : c >= '0' && c < '0' + base;
        if (!ok)
            break;
    }
    *n = k;
    return k > 0;
}

/* The core schema's float: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
static bool is_float(const char *s)
{
    size_t ni, nf = 0, ne;
    s += *s == '+' || *s == '-';
    is_digits(s, &ni, 10);
    s += ni;
    if (*s == '.') {
        is_digits(++s, &nf, 10);
        s += nf;
    }
    if (ni == 0 && nf == 0)
        return false;
    if (*s == 'e' || *s == 'E') {
        s += 1;
        s += *s == '+' || *s == '-';
        if (!is_digits(s, &ne, 10))
            return false;
        s += ne;
    }
    return *s == '\0';
}

/* A plain scalar by the core schema; NULL when it is a string, or out of
 * memory (then *nomem). */
static json_t *plain_value(const char *s, bool *nomem)
{
    /* null (the empty scalar too), then false, then true */
    static const char *const words[] = {"",      "~",     "null", "Null", "NULL", "false",
                                        "False", "FALSE", "true", "True", "TRUE"};
    const size_t nwords = sizeof(words) / sizeof(words[0]);
    json_t *v = NULL;
    size_t n, k = 0;
    while (k < nwords && strcmp(s, words[k]) != 0)
        k++;
    // cppcheck-suppress knownConditionTrueFalse ; "0o17": s[0] is '0' and s[1] is not 'x'
    int base = s[0] == '0' && s[1] == 'x' ? 16 : s[0] == '0' && s[1] == 'o' ? 8 : 10;
    const char *digits = base == 10 ? s + (s[0] == '+' || s[0] == '-') : s + 2;
    if (k < 5) {
        v = json_null();
    } else if (k < nwords) {
        v = json_boolean(k >= 8);
    } else if (is_digits(digits, &n, base) && digits[n] == '\0') {
        errno = 0;
        long long i = strtoll(base == 10 ? s : digits, NULL, base);
        if (errno == 0)
            v = json_integer(i);
        else if (base == 10) /* over 64 bits: a float, as for any YAML reader */
            v = json_real(strtod(s, NULL));
        else
            return NULL;
    } else if (is_float(s) && isfinite(strtod(s, NULL))) {
        v = json_real(strtod(s, NULL));
    } else {
        return NULL;
    }
    *nomem = v == NULL;
    return v;
}

static int scalar(struct conv *c, const yaml_event_t *ev, json_t **ret)
{
    const char *text = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    const char *tag = (const char *)ev->data.scalar.tag;
    long line = (long)ev->start_mark.line + 1;
    bool nomem = false;
    json_t *v = NULL;
    if (memchr(text, '\0', len))
        return conv_fail(c, GPO_EINVAL, line, "a NUL character in a scalar");
    if (tag && strcmp(tag, STR_TAG) != 0)
        return conv_fail(c, GPO_EINVAL, line, "tag '%.64s' is not supported (only !!str)", tag);
    if (!tag && ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        v = plain_value(text, &nomem);
        if (v && record(c, c->y->texts, json_stringn_nocheck(text, len)) != 0)
            nomem = true;
    }
    if (!v && !nomem)
        v = json_stringn_nocheck(text, len);
    if (!v || nomem) {
        json_decref(v);
        return conv_fail(c, GPO_ENOMEM, 0, "out of memory");
    }
    *ret = v;
    return 0;
}

/* ---- collections ---- */

static int node(struct conv *c, yaml_event_t *ev, unsigned depth, json_t **ret);

// NOLINTNEXTLINE(misc-no-recursion): depth capped at YAMLJSON_MAX_DEPTH (node)
static int sequence(struct conv *c, unsigned depth, json_t *arr)
{
    yaml_event_t ev;
    for (size_t i = 0;; i++) {
        json_t *v = NULL;
        int rc = next_event(c, &ev);
        if (rc != 0)
            return rc;
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return 0;
        }
        size_t mark = yamljson_path_index(&c->path, i);
        rc = record(c, c->y->lines, json_integer((json_int_t)ev.start_mark.line + 1));
        if (rc != 0)
            yaml_event_delete(&ev);
        else
            rc = node(c, &ev, depth + 1, &v);
        if (rc == 0 && json_array_append_new(arr, v) != 0)
            rc = conv_fail(c, GPO_ENOMEM, 0, "out of memory");
        yamljson_path_pop(&c->path, mark);
        if (rc != 0)
            return rc;
    }
}

/* Reads one key into buf (n bytes); 1 at the mapping's end. */
static int key(struct conv *c, char *buf, size_t n, long *line)
{
    yaml_event_t ev;
    int rc = next_event(c, &ev);
    if (rc != 0)
        return rc;
    *line = (long)ev.start_mark.line + 1;
    if (ev.type == YAML_MAPPING_END_EVENT)
        rc = 1;
    else if (ev.type != YAML_SCALAR_EVENT || ev.data.scalar.anchor)
        rc = conv_fail(c, GPO_EINVAL, *line, "a key must be a scalar (no anchors or aliases)");
    else if (ev.data.scalar.length >= n ||
             memchr(ev.data.scalar.value, '\0', ev.data.scalar.length))
        rc = conv_fail(c, GPO_EINVAL, *line, "a key longer than %zu bytes", n - 1);
    else
        memcpy(buf, ev.data.scalar.value, ev.data.scalar.length + 1);
    yaml_event_delete(&ev);
    return rc;
}

// NOLINTNEXTLINE(misc-no-recursion): depth capped at YAMLJSON_MAX_DEPTH (node)
static int mapping(struct conv *c, unsigned depth, json_t *obj)
{
    char k[YAMLJSON_MAX_KEY + 1];
    long line;
    for (;;) {
        json_t *v = NULL;
        yaml_event_t ev;
        int rc = key(c, k, sizeof(k), &line);
        if (rc != 0)
            return rc > 0 ? 0 : rc;
        size_t mark = yamljson_path_key(&c->path, k);
        if (json_object_get(obj, k))
            rc = conv_fail(c, GPO_EINVAL, line, "duplicate key");
        rc = rc ? rc : record(c, c->y->lines, json_integer(line));
        rc = rc ? rc : next_event(c, &ev);
        rc = rc ? rc : node(c, &ev, depth + 1, &v);
        if (rc == 0 && json_object_set_new_nocheck(obj, k, v) != 0)
            rc = conv_fail(c, GPO_ENOMEM, 0, "out of memory");
        yamljson_path_pop(&c->path, mark);
        if (rc != 0)
            return rc;
    }
}

/* Converts the node that *ev opens (deleted here) and its children. */
// NOLINTNEXTLINE(misc-no-recursion): depth capped at YAMLJSON_MAX_DEPTH (node)
static int node(struct conv *c, yaml_event_t *ev, unsigned depth, json_t **ret)
{
    long line = (long)ev->start_mark.line + 1;
    yaml_event_type_t type = ev->type;
    bool anchor = (type == YAML_SCALAR_EVENT && ev->data.scalar.anchor) ||
                  (type == YAML_SEQUENCE_START_EVENT && ev->data.sequence_start.anchor) ||
                  (type == YAML_MAPPING_START_EVENT && ev->data.mapping_start.anchor);
    int rc = 0;
    if (type == YAML_ALIAS_EVENT || anchor)
        rc = conv_fail(c, GPO_EINVAL, line, "anchors and aliases are not supported");
    else if (depth > YAMLJSON_MAX_DEPTH)
        rc = conv_fail(c, GPO_EINVAL, line, "nested more than %d levels deep", YAMLJSON_MAX_DEPTH);
    else if (type == YAML_SCALAR_EVENT)
        rc = scalar(c, ev, ret);
    yaml_event_delete(ev);
    if (rc != 0 || type == YAML_SCALAR_EVENT)
        return rc;
    json_t *v = type == YAML_SEQUENCE_START_EVENT ? json_array() : json_object();
    if (!v)
        return conv_fail(c, GPO_ENOMEM, 0, "out of memory");
    rc = type == YAML_SEQUENCE_START_EVENT ? sequence(c, depth, v) : mapping(c, depth, v);
    if (rc != 0)
        json_decref(v);
    else
        *ret = v;
    return rc;
}

/* The one document of the stream, after its DOCUMENT_START event. */
static int document(struct conv *c)
{
    yaml_event_t ev;
    int rc = next_event(c, &ev);
    if (rc != 0)
        return rc;
    rc = record(c, c->y->lines, json_integer((json_int_t)ev.start_mark.line + 1));
    if (rc != 0)
        yaml_event_delete(&ev);
    else
        rc = node(c, &ev, 0, &c->y->root);
    rc = rc ? rc : next_event(c, &ev); /* DOCUMENT_END */
    if (rc == 0)
        yaml_event_delete(&ev);
    rc = rc ? rc : next_event(c, &ev);
    if (rc == 0) {
        if (ev.type != YAML_STREAM_END_EVENT)
            rc = conv_fail(c, GPO_EINVAL, (long)ev.start_mark.line + 1,
                           "more than one YAML document");
        yaml_event_delete(&ev);
    }
    return rc;
}

int yamljson_parse(struct yamljson *y, const char *text, size_t len, struct yamljson_error *e)
{
    struct conv c = {.y = y, .e = e};
    yaml_event_t ev;
    int rc = 0;
    memset(y, 0, sizeof(*y));
    memset(e, 0, sizeof(*e));
    y->lines = json_object();
    y->texts = json_object();
    if (!y->lines || !y->texts || !yaml_parser_initialize(&c.parser)) {
        yamljson_release(y);
        return conv_fail(&c, GPO_ENOMEM, 0, "out of memory");
    }
    yaml_parser_set_input_string(&c.parser, (const unsigned char *)(text ? text : ""),
                                 text ? len : 0);
    rc = next_event(&c, &ev); /* STREAM_START */
    if (rc == 0)
        yaml_event_delete(&ev);
    rc = rc ? rc : next_event(&c, &ev);
    if (rc == 0) {
        bool empty = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
        rc = empty ? conv_fail(&c, GPO_EINVAL, 0, "the document is empty") : document(&c);
    }
    yaml_parser_delete(&c.parser);
    if (rc != 0)
        yamljson_release(y);
    return rc;
}

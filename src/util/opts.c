/*
 * opts.c - the option parser (opts.h): the walk over words, the typed
 * values, and the whole parse built on both.
 */
#include "util/opts.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errbuf.h"
#include "util/jsonv.h"
#include "base/banned.h"

#define NAME_SHOWN 64 /* "--" and a long name, as messages show it */

void opts_init(struct opts *p, int argc, char **argv, const void *table, size_t n, size_t stride,
               unsigned mask)
{
    *p = (struct opts){.argc = argc > 0 ? argc : 0,
                       .argv = argv,
                       .table = table,
                       .n = n,
                       .stride = stride,
                       .mask = mask};
}

static const struct opts_opt *entry_at(const struct opts *p, size_t k)
{
    return (const struct opts_opt *)(const void *)((const char *)p->table + k * p->stride);
}

static bool seen(const struct opts *p, const struct opts_opt *o)
{
    return p->mask == 0 || o->where == 0 || (o->where & p->mask) != 0;
}

static bool takes_value(const struct opts_opt *o)
{
    return o->type != OPTS_FLAG && o->type != OPTS_HELP;
}

static const struct opts_opt *find_long(const struct opts *p, const char *name, size_t len)
{
    for (size_t k = 0; k < p->n; k++) {
        const struct opts_opt *o = entry_at(p, k);
        if (seen(p, o) && o->name && strlen(o->name) == len && memcmp(o->name, name, len) == 0)
            return o;
    }
    return NULL;
}

static const struct opts_opt *find_short(const struct opts *p, char c)
{
    for (size_t k = 0; k < p->n; k++) {
        const struct opts_opt *o = entry_at(p, k);
        if (seen(p, o) && o->short_name && o->short_name == c)
            return o;
    }
    return NULL;
}

const char *opts_name(const struct opts_opt *o, char *buf, size_t len)
{
    if (o->name)
        snprintf(buf, len, "--%s", o->name);
    else
        snprintf(buf, len, "-%c", o->short_name);
    return buf;
}

/* A word that begins with "--": the entry, and the value after '=' if any. */
static int read_long(struct opts *p, const char *w, const struct opts_opt **ret_opt,
                     const char **ret_value, char *err, size_t errlen)
{
    const char *name = w + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const struct opts_opt *o = find_long(p, name, len);
    p->fault = !o                      ? OPTS_FAULT_UNKNOWN
               : eq && !takes_value(o) ? OPTS_FAULT_EXTRA_VALUE
                                       : OPTS_FAULT_NONE;
    if (!o) {
        char q[JSONV_QUOTE_MAX + 4];
        return errbuf_set(err, errlen, GPO_ENOENT, "unknown option '--%s'",
                          jsonv_quote(name, len, q));
    }
    if (eq && !takes_value(o))
        return errbuf_set(err, errlen, GPO_EUSAGE, "option '--%s' takes no value", o->name);
    *ret_opt = o;
    *ret_value = eq ? eq + 1 : NULL;
    return 0;
}

/* A word that begins with one '-': the entry, and the rest of the word as
 * its value if any. */
static int read_short(struct opts *p, const char *w, const struct opts_opt **ret_opt,
                      const char **ret_value, char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    const struct opts_opt *o = find_short(p, w[1]);
    p->fault = !o                        ? OPTS_FAULT_UNKNOWN
               : w[2] && !takes_value(o) ? OPTS_FAULT_EXTRA_VALUE
                                         : OPTS_FAULT_NONE;
    if (!o)
        return errbuf_set(err, errlen, GPO_ENOENT, "unknown option '-%s'",
                          jsonv_quote(w + 1, 1, q));
    if (w[2] && !takes_value(o))
        return errbuf_set(err, errlen, GPO_EUSAGE, "option '-%c' takes no value (in '%s')", w[1],
                          jsonv_quote(w, strlen(w), q));
    *ret_opt = o;
    *ret_value = w[2] ? w + 2 : NULL;
    return 0;
}

int opts_next(struct opts *p, const struct opts_opt **ret_opt, const char **ret_value, char *err,
              size_t errlen)
{
    if (p->i >= p->argc)
        return OPTS_END;
    const char *w = p->word = p->argv[p->i++];
    p->fault = OPTS_FAULT_NONE;
    if (p->rest || w[0] != '-' || w[1] == '\0') {
        *ret_value = w;
        return OPTS_ARG;
    }
    if (strcmp(w, "--") == 0) {
        p->rest = true;
        return OPTS_DASHDASH;
    }
    const struct opts_opt *o = NULL;
    const char *value = NULL;
    int rc = w[1] == '-' ? read_long(p, w, &o, &value, err, errlen)
                         : read_short(p, w, &o, &value, err, errlen);
    if (rc)
        return rc;
    if (takes_value(o) && !value) {
        char shown[NAME_SHOWN];
        if (w[1] == '-')
            snprintf(shown, sizeof(shown), "--%s", o->name);
        else
            snprintf(shown, sizeof(shown), "-%c", w[1]);
        if (p->i >= p->argc) {
            p->fault = OPTS_FAULT_MISSING_VALUE;
            return errbuf_set(err, errlen, GPO_EUSAGE, "option '%s' needs a value", shown);
        }
        value = p->argv[p->i++];
    }
    *ret_opt = o;
    *ret_value = value;
    return OPTS_OPTION;
}

/* ---- values ------------------------------------------------------------ */

int opts_parse_int(const char *s, int64_t min, int64_t max, int64_t *ret)
{
    if (!s || !*s || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')))
        return GPO_EUSAGE;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return GPO_EUSAGE;
    *ret = v;
    return 0;
}

int opts_parse_size(const char *s, int64_t min, int64_t max, int64_t *ret)
{
    static const char units[] = "KMGT";
    if (!s || !(s[0] >= '0' && s[0] <= '9'))
        return GPO_EUSAGE;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || v > INT64_MAX)
        return GPO_EUSAGE;
    if (*end) {
        const char *u = strchr(units, *end & ~0x20); /* K and k alike */
        if (!u || !*u || end[1])
            return GPO_EUSAGE;
        for (const char *k = units; k <= u; k++) {
            if (v > (unsigned long long)INT64_MAX / 1024)
                return GPO_EUSAGE;
            v *= 1024;
        }
    }
    if ((int64_t)v < min || (int64_t)v > max)
        return GPO_EUSAGE;
    *ret = (int64_t)v;
    return 0;
}

int opts_parse_double(const char *s, double *ret)
{
    if (!s || !*s || !(s[0] == '-' || s[0] == '.' || (s[0] >= '0' && s[0] <= '9')))
        return GPO_EUSAGE;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        return GPO_EUSAGE;
    *ret = v;
    return 0;
}

/* What a good value of o looks like ("whole seconds from 1 to 86400"). */
static const char *expected(const struct opts_opt *o, char *buf, size_t len)
{
    if (o->expect)
        return o->expect;
    switch (o->type) {
    case OPTS_INT:
        snprintf(buf, len, "a whole number from %" PRId64 " to %" PRId64, o->min, o->max);
        break;
    case OPTS_SECONDS:
        snprintf(buf, len, "whole seconds from %" PRId64 " to %" PRId64, o->min, o->max);
        break;
    case OPTS_SIZE:
        snprintf(buf, len, "a size in bytes from %" PRId64 " to %" PRId64, o->min, o->max);
        break;
    case OPTS_DOUBLE:
        if (o->flags & OPTS_OPEN_MIN)
            snprintf(buf, len, "a number above %g, at most %g", o->dmin, o->dmax);
        else
            snprintf(buf, len, "a number from %g to %g", o->dmin, o->dmax);
        break;
    default:
        snprintf(buf, len, "a value");
        break;
    }
    return buf;
}

static int refuse(const struct opts_opt *o, const char *value, char *err, size_t errlen)
{
    char name[NAME_SHOWN], what[128], q[JSONV_QUOTE_MAX + 4];
    return errbuf_set(err, errlen, GPO_EUSAGE, "%s: expected %s, got '%s'",
                      opts_name(o, name, sizeof(name)), expected(o, what, sizeof(what)),
                      jsonv_quote(value ? value : "", value ? strlen(value) : 0, q));
}

/* An integer of o's range, times its scale (which must not overflow). */
static int convert_int(const struct opts_opt *o, const char *value, int64_t *ret)
{
    int64_t v, scale = o->scale ? o->scale : 1;
    int rc = o->type == OPTS_SIZE ? opts_parse_size(value, o->min, o->max, &v)
                                  : opts_parse_int(value, o->min, o->max, &v);
    if (rc)
        return rc;
    if (o->type != OPTS_SIZE && scale != 1) {
        if (scale < 0 || (v > 0 && v > INT64_MAX / scale) || (v < 0 && v < INT64_MIN / scale))
            return GPO_EUSAGE;
        v *= scale;
    }
    *ret = v;
    return 0;
}

int opts_convert(const struct opts_opt *o, const char *value, void *dst, char *err, size_t errlen)
{
    switch (o->type) {
    case OPTS_FLAG:
    case OPTS_HELP:
        *(bool *)dst = true;
        return 0;
    case OPTS_STRING:
        if (!value || ((o->flags & OPTS_NONEMPTY) && !*value))
            return refuse(o, value, err, errlen);
        memcpy(dst, &value, sizeof(value));
        return 0;
    case OPTS_INT:
    case OPTS_SECONDS:
    case OPTS_SIZE: {
        int64_t v;
        if (convert_int(o, value, &v) != 0)
            return refuse(o, value, err, errlen);
        memcpy(dst, &v, sizeof(v));
        return 0;
    }
    case OPTS_DOUBLE: {
        double v;
        bool open = (o->flags & OPTS_OPEN_MIN) != 0;
        if (opts_parse_double(value, &v) != 0 || v > o->dmax || v < o->dmin ||
            (open && v == o->dmin))
            return refuse(o, value, err, errlen);
        memcpy(dst, &v, sizeof(v));
        return 0;
    }
    }
    return errbuf_set(err, errlen, GPO_EINVAL, "option of an unknown type %d", (int)o->type);
}

int opts_store(const struct opts_opt *o, const char *value, void *args, char *err, size_t errlen)
{
    return opts_convert(o, value, (char *)args + o->offset, err, errlen);
}

/* ---- the whole parse ------------------------------------------------------ */

/* The form of every word, and the positional words into pos; the help
 * entry met, if any, in *ret_help. p itself does not move. */
static int check_form(struct opts *p, const char **pos, size_t *ret_npos,
                      const struct opts_opt **ret_help, char *err, size_t errlen)
{
    struct opts walk = *p;
    size_t np = 0;
    *ret_help = NULL;
    for (;;) {
        const struct opts_opt *o = NULL;
        const char *v = NULL;
        int k = opts_next(&walk, &o, &v, err, errlen);
        if (k < 0) {
            p->word = walk.word;
            p->i = walk.i;
            p->fault = walk.fault;
            return k;
        }
        if (k == OPTS_END)
            break;
        if (k == OPTS_ARG)
            pos[np++] = v;
        if (k == OPTS_OPTION && o->type == OPTS_HELP && !*ret_help)
            *ret_help = o;
    }
    *ret_npos = np;
    return 0;
}

int opts_parse(struct opts *p, void *args, const char **pos, size_t *ret_npos, char *err,
               size_t errlen)
{
    const struct opts_opt *help = NULL;
    size_t np = 0;
    p->bad = NULL;
    int rc = check_form(p, pos, &np, &help, err, errlen);
    if (rc)
        return rc;
    if (help) {
        opts_store(help, NULL, args, err, errlen);
        *ret_npos = np;
        return OPTS_HELP_GIVEN;
    }
    for (;;) {
        const struct opts_opt *o = NULL;
        const char *v = NULL;
        int k = opts_next(p, &o, &v, err, errlen);
        if (k == OPTS_END)
            break;
        if (k == OPTS_OPTION && (rc = opts_store(o, v, args, err, errlen)) != 0) {
            p->bad = o;
            p->fault = OPTS_FAULT_BAD_VALUE;
            return rc;
        }
    }
    *ret_npos = np;
    return 0;
}

int opts_parse_flags(struct opts *p, void *args, const char **ret_stray, char *err, size_t errlen)
{
    *ret_stray = NULL;
    const char **pos = calloc(p->argc > 0 ? (size_t)p->argc : 1, sizeof(*pos));
    if (!pos)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    size_t npos = 0;
    int rc = opts_parse(p, args, pos, &npos, err, errlen);
    if (rc == 0 && npos)
        *ret_stray = pos[0];
    free(pos);
    return rc;
}

bool opts_help_asked(int argc, char **argv, const void *table, size_t n, size_t stride)
{
    for (size_t k = 0; k < n; k++) {
        const struct opts_opt *o =
            (const struct opts_opt *)(const void *)((const char *)table + k * stride);
        if (o->type != OPTS_HELP)
            continue;
        for (int i = 0; i < argc; i++) {
            const char *w = argv[i];
            if ((o->name && w[0] == '-' && w[1] == '-' && strcmp(w + 2, o->name) == 0) ||
                (o->short_name && w[0] == '-' && w[1] == o->short_name && w[2] == '\0'))
                return true;
        }
    }
    return false;
}

/*
 * prom.c - the Prometheus text exposition writer (see prom.h).
 *
 * Speed matters: GET /metrics writes tens of thousands of samples under the
 * server's lock, so numbers and labels are appended by hand rather than
 * through one snprintf each, and integral values (most GPU figures) skip
 * the shortest-round-trip search.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/prom.h"
#include "base/banned.h"

#define FAMILY_MAX 200 /* bytes of a family name: a cap, far above any real one */
#define LABELS_MAX 32  /* label pairs in one sample */

struct prom {
    char *buf;
    size_t len, cap;
    bool failed;
    bool open; /* a family was opened */
    enum prom_type type;
    char family[FAMILY_MAX + 8]; /* with a counter's "_total" */
    char **seen;                 /* names of the families opened so far */
    size_t nseen, seen_cap;
};

struct prom *prom_new(void)
{
    return calloc(1, sizeof(struct prom));
}

void prom_free(struct prom *p)
{
    if (!p)
        return;
    for (size_t k = 0; k < p->nseen; k++)
        free(p->seen[k]);
    free(p->seen);
    free(p->buf);
    free(p);
}

/* ---- the buffer ---- */

static bool reserve(struct prom *p, size_t more)
{
    if (p->failed)
        return false;
    more++; /* the text stays NUL-terminated */
    if (more <= p->cap - p->len)
        return true;
    size_t cap = p->cap ? p->cap : 4096;
    while (cap - p->len < more) {
        if (cap > SIZE_MAX / 2) {
            p->failed = true;
            return false;
        }
        cap *= 2;
    }
    char *b = realloc(p->buf, cap);
    if (!b) {
        p->failed = true;
        return false;
    }
    p->buf = b;
    p->cap = cap;
    return true;
}

static void put(struct prom *p, const char *s, size_t n)
{
    if (reserve(p, n)) {
        memcpy(p->buf + p->len, s, n);
        p->len += n;
        p->buf[p->len] = '\0';
    }
}

static void puts_(struct prom *p, const char *s)
{
    put(p, s, strlen(s));
}

static void putc_(struct prom *p, char c)
{
    if (reserve(p, 1)) {
        p->buf[p->len++] = c;
        p->buf[p->len] = '\0';
    }
}

/* `s` with backslash and newline escaped, and double quote too when `quote`
 * (label values; HELP text leaves quotes alone). */
static void put_escaped(struct prom *p, const char *s, bool quote)
{
    const char *run = s;
    for (; *s; s++) {
        const char *esc = *s == '\\'           ? "\\\\"
                          : *s == '\n'         ? "\\n"
                          : *s == '"' && quote ? "\\\""
                                               : NULL;
        if (esc) {
            put(p, run, (size_t)(s - run));
            put(p, esc, 2);
            run = s + 1;
        }
    }
    put(p, run, (size_t)(s - run));
}

/* ---- values ---- */

static void put_int(struct prom *p, int64_t v)
{
    char tmp[24];
    size_t n = sizeof(tmp);
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[--n] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        tmp[--n] = '-';
    put(p, tmp + n, sizeof(tmp) - n);
}

/*
 * The shortest text that reads back to v. Integral values below 2^63 print
 * as integers (exact, no exponent: 1e15 is "1000000000000000"). Otherwise
 * %.15g is the shortest form whenever one of at most 15 digits exists (the
 * rounding to 15 digits lands on it and %g drops the trailing zeros); 16
 * and then 17 digits cover the rest, 17 always reading back.
 */
static void put_value(struct prom *p, double v)
{
    if (isnan(v)) {
        put(p, "NaN", 3);
        return;
    }
    if (isinf(v)) {
        puts_(p, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    if (v == 0) {
        puts_(p, signbit(v) ? "-0" : "0");
        return;
    }
    if (fabs(v) < 9.2e18 && v == (double)(int64_t)v) {
        put_int(p, (int64_t)v);
        return;
    }
    char tmp[32];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(tmp, sizeof(tmp), "%.*g", digits, v);
        if (digits == 17 || strtod(tmp, NULL) == v)
            break;
    }
    puts_(p, tmp);
}

/* ---- names and labels ---- */

static bool name_valid(const char *s, bool colon)
{
    if (!s || !*s)
        return false;
    for (const char *c = s; *c; c++) {
        bool alpha = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_' ||
                     (colon && *c == ':');
        if (!alpha && !(c > s && *c >= '0' && *c <= '9'))
            return false;
    }
    return true;
}

static void fail(struct prom *p)
{
    p->failed = true;
}

/* Checks a label list: valid, distinct names, at most LABELS_MAX pairs, and
 * not `own` (a histogram's "le", a summary's "quantile": the writer adds
 * them itself). */
static bool labels_valid(const char *const *labels, const char *own)
{
    if (!labels)
        return true;
    size_t n = 0;
    for (; labels[2 * n]; n++) {
        if (n >= LABELS_MAX || !name_valid(labels[2 * n], false) || !labels[2 * n + 1])
            return false;
        if (labels[2 * n][0] == '_' && labels[2 * n][1] == '_')
            return false; /* reserved for Prometheus itself */
        if (own && strcmp(labels[2 * n], own) == 0)
            return false;
        for (size_t k = 0; k < n; k++)
            if (strcmp(labels[2 * k], labels[2 * n]) == 0)
                return false;
    }
    return true;
}

/* name{a="x",b="y"[,le="bound"]} and a space; "" values left out. `extra`
 * names the label of *le ("le", "quantile"). */
static void put_series(struct prom *p, const char *name, const char *suffix,
                       const char *const *labels, const char *extra, const double *le)
{
    puts_(p, name);
    puts_(p, suffix);
    bool any = false;
    for (size_t k = 0; labels && labels[2 * k]; k++) {
        if (!labels[2 * k + 1][0])
            continue;
        putc_(p, any ? ',' : '{');
        any = true;
        puts_(p, labels[2 * k]);
        put(p, "=\"", 2);
        put_escaped(p, labels[2 * k + 1], true);
        putc_(p, '"');
    }
    if (le) {
        putc_(p, any ? ',' : '{');
        puts_(p, extra);
        put(p, "=\"", 2);
        put_value(p, *le);
        putc_(p, '"');
        any = true;
    }
    if (any)
        putc_(p, '}');
    putc_(p, ' ');
}

/* ---- families and samples ---- */

static const char *type_name(enum prom_type t)
{
    return t == PROM_COUNTER     ? "counter"
           : t == PROM_HISTOGRAM ? "histogram"
           : t == PROM_SUMMARY   ? "summary"
                                 : "gauge";
}

void prom_family(struct prom *p, const char *name, enum prom_type type, const char *help)
{
    if (!p || p->failed)
        return;
    char full[FAMILY_MAX + 8];
    if (!name_valid(name, true) || strlen(name) > FAMILY_MAX || !help ||
        (type != PROM_GAUGE && type != PROM_COUNTER && type != PROM_HISTOGRAM &&
         type != PROM_SUMMARY)) {
        fail(p);
        return;
    }
    size_t n = strlen(name);
    bool total = n >= 6 && strcmp(name + n - 6, "_total") == 0;
    snprintf(full, sizeof(full), "%s%s", name, type == PROM_COUNTER && !total ? "_total" : "");
    name = full;
    for (size_t k = 0; k < p->nseen; k++) {
        if (strcmp(p->seen[k], name) == 0) {
            fail(p);
            return;
        }
    }
    if (p->nseen == p->seen_cap) {
        size_t cap = p->seen_cap ? 2 * p->seen_cap : 32;
        char **v = realloc(p->seen, cap * sizeof(*v));
        if (!v) {
            fail(p);
            return;
        }
        p->seen = v;
        p->seen_cap = cap;
    }
    if (!(p->seen[p->nseen] = strdup(name))) {
        fail(p);
        return;
    }
    p->nseen++;
    memcpy(p->family, name, strlen(name) + 1);
    p->type = type;
    p->open = true;
    put(p, "# HELP ", 7);
    puts_(p, name);
    putc_(p, ' ');
    put_escaped(p, help, false);
    put(p, "\n# TYPE ", 8);
    puts_(p, name);
    putc_(p, ' ');
    puts_(p, type_name(type));
    putc_(p, '\n');
}

/* Is `name` a sample name of the open family? (A counter's family name
 * ends in "_total", which the caller may leave out.) */
static bool sample_name_ok(const struct prom *p, const char *name)
{
    if (!p->open || !name)
        return false;
    if (strcmp(name, p->family) == 0)
        return true;
    size_t n = strlen(name);
    return p->type == PROM_COUNTER && strncmp(name, p->family, n) == 0 &&
           strcmp(p->family + n, "_total") == 0;
}

void prom_sample(struct prom *p, const char *name, const char *const *labels, double value)
{
    if (!p || p->failed)
        return;
    if (p->type == PROM_HISTOGRAM || p->type == PROM_SUMMARY || !sample_name_ok(p, name) ||
        !labels_valid(labels, NULL)) {
        fail(p);
        return;
    }
    put_series(p, p->family, "", labels, NULL, NULL);
    put_value(p, value);
    putc_(p, '\n');
}

/* name_sum and name_count of a histogram or summary. */
static void put_sum_count(struct prom *p, const char *name, const char *const *labels, double sum,
                          uint64_t count)
{
    put_series(p, name, "_sum", labels, NULL, NULL);
    put_value(p, sum);
    putc_(p, '\n');
    put_series(p, name, "_count", labels, NULL, NULL);
    put_value(p, (double)count);
    putc_(p, '\n');
}

void prom_histogram(struct prom *p, const char *name, const char *const *labels,
                    const double *bounds, const uint64_t *counts, size_t nbounds, double sum,
                    uint64_t count)
{
    if (!p || p->failed)
        return;
    bool ok = p->open && p->type == PROM_HISTOGRAM && name && strcmp(name, p->family) == 0 &&
              labels_valid(labels, "le") && (nbounds == 0 || (bounds && counts));
    uint64_t cum = 0;
    for (size_t k = 0; ok && k < nbounds; k++) {
        /* Increasing finite bounds; +Inf is the writer's own last bucket. */
        ok = isfinite(bounds[k]) && (k == 0 || bounds[k] > bounds[k - 1]) &&
             counts[k] <= UINT64_MAX - cum;
        cum += ok ? counts[k] : 0;
    }
    if (!ok || cum > count) {
        fail(p);
        return;
    }
    cum = 0;
    for (size_t k = 0; k < nbounds; k++) {
        cum += counts[k];
        put_series(p, name, "_bucket", labels, "le", &bounds[k]);
        put_value(p, (double)cum);
        putc_(p, '\n');
    }
    double inf = INFINITY;
    put_series(p, name, "_bucket", labels, "le", &inf);
    put_value(p, (double)count);
    putc_(p, '\n');
    put_sum_count(p, name, labels, sum, count);
}

void prom_summary(struct prom *p, const char *name, const char *const *labels,
                  const double *quantiles, const double *values, size_t n, double sum,
                  uint64_t count)
{
    if (!p || p->failed)
        return;
    bool ok = p->open && p->type == PROM_SUMMARY && name && strcmp(name, p->family) == 0 &&
              labels_valid(labels, "quantile") && (n == 0 || (quantiles && values));
    for (size_t k = 0; ok && k < n; k++)
        ok = quantiles[k] >= 0 && quantiles[k] <= 1 && (k == 0 || quantiles[k] > quantiles[k - 1]);
    if (!ok) {
        fail(p);
        return;
    }
    for (size_t k = 0; k < n; k++) {
        put_series(p, name, "", labels, "quantile", &quantiles[k]);
        put_value(p, values[k]);
        putc_(p, '\n');
    }
    put_sum_count(p, name, labels, sum, count);
}

const char *prom_text(const struct prom *p, size_t *ret_len)
{
    if (!p || p->failed)
        return NULL;
    if (ret_len)
        *ret_len = p->len;
    return p->buf ? p->buf : "";
}

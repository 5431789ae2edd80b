/*
 * hostlist.c - Slurm's host-list syntax: compress (sort, group by prefix,
 * coalesce consecutive numbers of one width) and expand (brackets of
 * ranges, suffixes, several brackets in one name).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/vec.h"
#include "util/errbuf.h"
#include "util/hostlist.h"
#include "base/banned.h"

/* Trailing digits beyond this stay in the prefix: the number fits in 64
 * bits with room for the range's +1. */
#define MAX_DIGITS 18

/* Messages quote at most this much of the text. */
#define QUOTED(n) ((int)((n) < 40 ? (n) : 40))

/* One name split for sorting: prefix s[0, plen), digits s[plen, plen+dlen). */
struct host {
    const char *s;
    size_t plen, dlen;
    uint64_t num;
};

static bool name_char_ok(unsigned char c)
{
    return c > 0x20 && c != 0x7f && c != ',' && c != '[' && c != ']';
}

static int host_split(const char *s, struct host *h)
{
    size_t len = s ? strlen(s) : 0;
    if (len == 0 || len > HOSTLIST_MAX_NAME)
        return GPO_EINVAL;
    for (size_t k = 0; k < len; k++)
        if (!name_char_ok((unsigned char)s[k]))
            return GPO_EINVAL;
    size_t p = len;
    while (p > 0 && s[p - 1] >= '0' && s[p - 1] <= '9')
        p--;
    if (len - p > MAX_DIGITS)
        p = len;
    h->s = s;
    h->plen = p;
    h->dlen = len - p;
    h->num = 0;
    for (size_t k = p; k < len; k++)
        h->num = h->num * 10 + (uint64_t)(s[k] - '0');
    return 0;
}

static int host_cmp(const void *a, const void *b)
{
    const struct host *x = a, *y = b;
    size_t m = x->plen < y->plen ? x->plen : y->plen;
    int c = memcmp(x->s, y->s, m);
    if (c)
        return c;
    if (x->plen != y->plen)
        return x->plen < y->plen ? -1 : 1;
    if ((x->dlen > 0) != (y->dlen > 0))
        return x->dlen > 0 ? 1 : -1;
    if (x->num != y->num)
        return x->num < y->num ? -1 : 1;
    if (x->dlen != y->dlen)
        return x->dlen < y->dlen ? -1 : 1;
    return 0;
}

static bool same_prefix(const struct host *x, const struct host *y)
{
    return x->plen == y->plen && memcmp(x->s, y->s, x->plen) == 0;
}

static size_t digits_of(uint64_t v)
{
    size_t d = 1;
    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

/* The range width a first name gives: its digit count when it has a
 * leading zero, 0 (unpadded) otherwise. */
static size_t host_width(const struct host *h)
{
    return h->dlen > 1 && h->s[h->plen] == '0' ? h->dlen : 0;
}

/* Whether h is what number h->num prints as in a range of width w. */
static bool host_fits(const struct host *h, size_t w)
{
    size_t d = digits_of(h->num);
    return h->dlen == (w > d ? w : d);
}

struct out {
    char *buf;
    size_t len, pos;
    bool full;
};

static void out_put(struct out *o, const char *s, size_t n)
{
    if (o->full || o->pos + n >= o->len) {
        o->full = true;
        return;
    }
    memcpy(o->buf + o->pos, s, n);
    o->pos += n;
    o->buf[o->pos] = '\0';
}

static void out_num(struct out *o, uint64_t v, size_t w)
{
    char t[32];
    int k = snprintf(t, sizeof(t), "%0*" PRIu64, (int)w, v);
    out_put(o, t, (size_t)k);
}

/* Writes the numbered names h[0, n) of one prefix: `p[a-b,c]`, or the
 * name itself when n is 1. */
static void out_group(struct out *o, const struct host *h, size_t n)
{
    if (n == 1) {
        out_put(o, h[0].s, h[0].plen + h[0].dlen);
        return;
    }
    out_put(o, h[0].s, h[0].plen);
    out_put(o, "[", 1);
    for (size_t i = 0; i < n;) {
        size_t w = host_width(&h[i]), j = i;
        while (j + 1 < n && h[j + 1].num == h[j].num + 1 && host_fits(&h[j + 1], w))
            j++;
        if (i > 0)
            out_put(o, ",", 1);
        out_num(o, h[i].num, w);
        if (j > i) {
            out_put(o, "-", 1);
            out_num(o, h[j].num, w);
        }
        i = j + 1;
    }
    out_put(o, "]", 1);
}

int hostlist_compress(const char *const *names, size_t n, char *buf, size_t len)
{
    if (len > 0)
        buf[0] = '\0';
    if (n == 0)
        return len > 0 ? 0 : GPO_ENOBUFS;
    struct host *h = calloc(n, sizeof(*h));
    if (!h)
        return GPO_ENOMEM;
    for (size_t k = 0; k < n; k++) {
        if (host_split(names[k], &h[k]) < 0) {
            free(h);
            return GPO_EINVAL;
        }
    }
    qsort(h, n, sizeof(*h), host_cmp);
    size_t m = 0;
    for (size_t k = 0; k < n; k++)
        if (m == 0 || host_cmp(&h[m - 1], &h[k]) != 0)
            h[m++] = h[k];
    struct out o = {.buf = buf, .len = len};
    for (size_t i = 0; i < m;) {
        if (i > 0)
            out_put(&o, ",", 1);
        size_t j = i + 1;
        if (h[i].dlen == 0) {
            out_put(&o, h[i].s, h[i].plen);
        } else {
            while (j < m && same_prefix(&h[i], &h[j]))
                j++;
            out_group(&o, &h[i], j - i);
        }
        i = j;
    }
    free(h);
    if (o.full) {
        if (len > 0)
            buf[0] = '\0';
        return GPO_ENOBUFS;
    }
    return 0;
}

/* Expansion: an element is literal text and brackets of ranges, in turn
 * (lit[0] [b0] lit[1] [b1] ... lit[nb]); its names are every combination of
 * one number from each bracket, the last bracket's varying fastest. */
#define MAX_BRACKETS 8
#define MAX_RANGES   256

struct range {
    uint64_t lo, hi;
    int width;
};

struct bracket {
    struct range r[MAX_RANGES];
    size_t n;
    size_t at;  /* the range being walked */
    uint64_t v; /* its number now */
};

struct element {
    const char *lit[MAX_BRACKETS + 1];
    size_t litn[MAX_BRACKETS + 1];
    struct bracket *b; /* nb of them */
    size_t nb;
};

/* Names are appended to a growing array. */
struct names {
    char **v;
    size_t n, cap;
};

static int names_add(struct names *nv, const char *name, size_t len)
{
    if (vec_grow((void **)&nv->v, &nv->cap, nv->n + 1, sizeof(*nv->v)) < 0)
        return GPO_ENOMEM;
    char *s = malloc(len + 1);
    if (!s)
        return GPO_ENOMEM;
    memcpy(s, name, len);
    s[len] = '\0';
    nv->v[nv->n++] = s;
    return 0;
}

/* Reads the digits at *p (at most MAX_DIGITS) into *v and their count
 * into *d. */
static int read_number(const char **p, const char *end, uint64_t *v, size_t *d)
{
    const char *q = *p;
    uint64_t x = 0;
    while (q < end && *q >= '0' && *q <= '9' && q - *p < MAX_DIGITS)
        x = x * 10 + (uint64_t)(*q++ - '0');
    if (q == *p || (q < end && *q >= '0' && *q <= '9'))
        return GPO_EINVAL;
    *d = (size_t)(q - *p);
    *v = x;
    *p = q;
    return 0;
}

static int bad_range(const char *r, size_t rn, char *err, size_t errlen)
{
    return errbuf_set(err, errlen, GPO_EINVAL,
                      "host list: '[%.*s]': a range is digits or digits-digits", QUOTED(rn), r);
}

/* The ranges r[0, rn) of one bracket into *b. */
static int bracket_parse(const char *r, size_t rn, struct bracket *b, char *err, size_t errlen)
{
    const char *p = r, *end = r + rn;
    b->n = 0;
    for (;;) {
        uint64_t lo, hi;
        size_t w, wh;
        if (read_number(&p, end, &lo, &w) < 0)
            return bad_range(r, rn, err, errlen);
        hi = lo;
        if (p < end && *p == '-') {
            p++;
            if (read_number(&p, end, &hi, &wh) < 0)
                return bad_range(r, rn, err, errlen);
            if (hi < lo)
                return errbuf_set(err, errlen, GPO_EINVAL,
                                  "host list: '[%.*s]': a range runs backwards", QUOTED(rn), r);
        }
        if (p < end && *p != ',')
            return bad_range(r, rn, err, errlen);
        if (b->n == MAX_RANGES)
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "host list: '[%.*s]': more than %d ranges in a bracket", QUOTED(rn),
                              r, MAX_RANGES);
        b->r[b->n++] = (struct range){.lo = lo, .hi = hi, .width = (int)w};
        if (p == end)
            return 0;
        p++;
    }
}

/* Splits the element s[0, n) (no top-level comma) into e. */
static int element_parse(const char *s, size_t n, struct element *e, char *err, size_t errlen)
{
    size_t at = 0;
    e->nb = 0;
    for (;;) {
        size_t open = at;
        while (open < n && s[open] != '[') {
            if (!name_char_ok((unsigned char)s[open]))
                return errbuf_set(err, errlen, GPO_EINVAL,
                                  "host list: '%.*s': a name holds no ']', white space or "
                                  "control character",
                                  QUOTED(n), s);
            open++;
        }
        e->lit[e->nb] = s + at;
        e->litn[e->nb] = open - at;
        if (open == n)
            return 0;
        size_t close = open + 1;
        while (close < n && s[close] != ']' && s[close] != '[')
            close++;
        if (close == n || s[close] != ']')
            return errbuf_set(err, errlen, GPO_EINVAL, "host list: '%.*s': an unclosed '['", (int)n,
                              s);
        if (e->nb == MAX_BRACKETS)
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "host list: '%.*s': more than %d brackets in a name", QUOTED(n), s,
                              MAX_BRACKETS);
        int rc = bracket_parse(s + open + 1, close - open - 1, &e->b[e->nb], err, errlen);
        if (rc)
            return rc;
        e->nb++;
        at = close + 1;
    }
}

/* How many names e makes, or more than `room` when it makes more. */
static uint64_t element_count(const struct element *e, uint64_t room)
{
    uint64_t total = 1;
    for (size_t k = 0; k < e->nb; k++) {
        uint64_t c = 0;
        for (size_t i = 0; i < e->b[k].n && c <= room; i++)
            c += e->b[k].r[i].hi - e->b[k].r[i].lo + 1;
        if (c > room || total * c > room)
            return room + 1;
        total *= c;
    }
    return total;
}

/* The name the brackets' numbers make now into buf; its length, or
 * HOSTLIST_MAX_NAME + 1 when it is longer than a name may be. */
static size_t element_name(const struct element *e, char *buf)
{
    size_t len = 0;
    for (size_t k = 0; k <= e->nb; k++) {
        if (len + e->litn[k] > HOSTLIST_MAX_NAME)
            return HOSTLIST_MAX_NAME + 1;
        memcpy(buf + len, e->lit[k], e->litn[k]);
        len += e->litn[k];
        if (k == e->nb)
            break;
        const struct bracket *b = &e->b[k];
        int w =
            snprintf(buf + len, HOSTLIST_MAX_NAME + 1 - len, "%0*" PRIu64, b->r[b->at].width, b->v);
        if (w < 0 || len + (size_t)w > HOSTLIST_MAX_NAME)
            return HOSTLIST_MAX_NAME + 1;
        len += (size_t)w;
    }
    return len;
}

/* Moves the brackets' numbers to the next combination; false after the last. */
static bool element_next(struct element *e)
{
    for (size_t k = e->nb; k-- > 0;) {
        struct bracket *b = &e->b[k];
        if (b->v < b->r[b->at].hi) {
            b->v++;
            return true;
        }
        if (b->at + 1 < b->n) {
            b->at++;
            b->v = b->r[b->at].lo;
            return true;
        }
        b->at = 0;
        b->v = b->r[0].lo;
    }
    return false;
}

/* Every name of the element s[0, n), appended to nv. */
static int expand_element(struct names *nv, const char *s, size_t n, struct element *e, char *err,
                          size_t errlen)
{
    int rc = element_parse(s, n, e, err, errlen);
    if (rc)
        return rc;
    if (element_count(e, HOSTLIST_MAX_NAMES - nv->n) > HOSTLIST_MAX_NAMES - nv->n)
        return errbuf_set(err, errlen, GPO_E2BIG, "host list: more than %d names",
                          HOSTLIST_MAX_NAMES);
    for (size_t k = 0; k < e->nb; k++) {
        e->b[k].at = 0;
        e->b[k].v = e->b[k].r[0].lo;
    }
    char name[HOSTLIST_MAX_NAME + 1];
    do {
        size_t len = element_name(e, name);
        if (len > HOSTLIST_MAX_NAME)
            return errbuf_set(err, errlen, GPO_EINVAL, "host list: a name over %d bytes",
                              HOSTLIST_MAX_NAME);
        if (len == 0)
            return errbuf_set(err, errlen, GPO_EINVAL, "host list: an empty name");
        if ((rc = names_add(nv, name, len)) != 0)
            return rc;
    } while (element_next(e));
    return 0;
}

void hostlist_free(char **names, size_t n)
{
    if (!names)
        return;
    for (size_t k = 0; k < n; k++)
        free(names[k]);
    free(names);
}

int hostlist_expand(const char *text, char ***ret, size_t *ret_n, char *err, size_t errlen)
{
    struct names nv = {0};
    struct element e = {.b = calloc(MAX_BRACKETS, sizeof(struct bracket))};
    const char *p = text ? text : "";
    int rc = e.b ? 0 : GPO_ENOMEM;
    while (*p && rc == 0) {
        const char *q = p;
        int depth = 0;
        while (*q && (depth > 0 || *q != ',')) {
            if (*q == '[')
                depth++;
            else if (*q == ']' && depth > 0)
                depth--;
            q++;
        }
        if (q == p || (*q == ',' && q[1] == '\0'))
            rc = errbuf_set(err, errlen, GPO_EINVAL, "host list: an empty name");
        else
            rc = expand_element(&nv, p, (size_t)(q - p), &e, err, errlen);
        p = *q ? q + 1 : q;
    }
    free(e.b);
    if (rc < 0) {
        hostlist_free(nv.v, nv.n);
        return rc;
    }
    *ret = nv.v;
    *ret_n = nv.n;
    return 0;
}

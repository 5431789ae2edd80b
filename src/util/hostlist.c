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

/* Expansion: names are appended to a growing array. */
struct names {
    char **v;
    size_t n, cap;
};

static int names_add(struct names *nv, const char *head, size_t hlen, const char *tail, size_t tlen,
                     char *err, size_t errlen)
{
    if (hlen + tlen == 0)
        return errbuf_set(err, errlen, GPO_EINVAL, "host list: an empty name");
    if (hlen + tlen > HOSTLIST_MAX_NAME)
        return errbuf_set(err, errlen, GPO_EINVAL, "host list: a name over %d bytes",
                          HOSTLIST_MAX_NAME);
    if (nv->n >= HOSTLIST_MAX_NAMES)
        return errbuf_set(err, errlen, GPO_E2BIG, "host list: more than %d names",
                          HOSTLIST_MAX_NAMES);
    if (vec_grow((void **)&nv->v, &nv->cap, nv->n + 1, sizeof(*nv->v)) < 0)
        return GPO_ENOMEM;
    char *s = malloc(hlen + tlen + 1);
    if (!s)
        return GPO_ENOMEM;
    memcpy(s, head, hlen);
    memcpy(s + hlen, tail, tlen);
    s[hlen + tlen] = '\0';
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

static int expand_from(struct names *nv, char *head, size_t hlen, const char *s, size_t n,
                       char *err, size_t errlen);

static int bad_range(const char *r, size_t rn, char *err, size_t errlen)
{
    return errbuf_set(err, errlen, GPO_EINVAL,
                      "host list: '[%.*s]': a range is digits or digits-digits", (int)rn, r);
}

/* Expands the bracket's ranges r[0, rn), each number appended to head and
 * followed by the expansion of rest[0, restn). */
static int expand_ranges(struct names *nv, char *head, size_t hlen, const char *r, size_t rn,
                         const char *rest, size_t restn, char *err, size_t errlen)
{
    const char *p = r, *end = r + rn;
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
                                  "host list: '[%.*s]': a range runs backwards", (int)rn, r);
        }
        if (p < end && *p != ',')
            return bad_range(r, rn, err, errlen);
        for (uint64_t v = lo; v <= hi; v++) {
            if (nv->n >= HOSTLIST_MAX_NAMES)
                return errbuf_set(err, errlen, GPO_E2BIG, "host list: more than %d names",
                                  HOSTLIST_MAX_NAMES);
            int k = snprintf(head + hlen, HOSTLIST_MAX_NAME + 1 - hlen, "%0*" PRIu64, (int)w, v);
            if (k < 0 || hlen + (size_t)k > HOSTLIST_MAX_NAME)
                return errbuf_set(err, errlen, GPO_EINVAL, "host list: a name over %d bytes",
                                  HOSTLIST_MAX_NAME);
            int rc = expand_from(nv, head, hlen + (size_t)k, rest, restn, err, errlen);
            if (rc < 0)
                return rc;
        }
        if (p == end)
            return 0;
        p++;
    }
}

/* Expands one element s[0, n) (no top-level comma) after head[0, hlen);
 * head has room for HOSTLIST_MAX_NAME + 1 bytes. */
static int expand_from(struct names *nv, char *head, size_t hlen, const char *s, size_t n,
                       char *err, size_t errlen)
{
    size_t open = 0;
    while (open < n && s[open] != '[') {
        if (!name_char_ok((unsigned char)s[open]))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "host list: '%.*s': a name holds no ']', white space or control "
                              "character",
                              (int)n, s);
        open++;
    }
    if (open == n)
        return names_add(nv, head, hlen, s, n, err, errlen);
    size_t close = open + 1;
    while (close < n && s[close] != ']' && s[close] != '[')
        close++;
    if (close == n || s[close] != ']')
        return errbuf_set(err, errlen, GPO_EINVAL, "host list: '%.*s': an unclosed '['", (int)n, s);
    if (hlen + open > HOSTLIST_MAX_NAME)
        return errbuf_set(err, errlen, GPO_EINVAL, "host list: a name over %d bytes",
                          HOSTLIST_MAX_NAME);
    memcpy(head + hlen, s, open);
    return expand_ranges(nv, head, hlen + open, s + open + 1, close - open - 1, s + close + 1,
                         n - close - 1, err, errlen);
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
    char head[HOSTLIST_MAX_NAME + 1];
    const char *p = text ? text : "";
    int rc = 0;
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
        if (q == p)
            rc = errbuf_set(err, errlen, GPO_EINVAL, "host list: an empty name");
        else
            rc = expand_from(&nv, head, 0, p, (size_t)(q - p), err, errlen);
        if (*q == ',' && q[1] == '\0' && rc == 0)
            rc = errbuf_set(err, errlen, GPO_EINVAL, "host list: an empty name");
        p = *q ? q + 1 : q;
    }
    if (rc < 0) {
        hostlist_free(nv.v, nv.n);
        return rc;
    }
    *ret = nv.v;
    *ret_n = nv.n;
    return 0;
}

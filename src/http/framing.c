/*
 * framing.c - the request framing rules and the scan of a connection's first
 * bytes (framing.h). Pure: no socket, no libmicrohttpd.
 */
#include "http/framing.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "http/route.h"
#include "base/banned.h"

#define SCAN_MAX_REQUESTS 64u /* pipelined heads looked at; the rest is MHD's */

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static bool name_is(const char *name, size_t nlen, const char *want)
{
    return nlen == strlen(want) && strncasecmp(name, want, nlen) == 0;
}

void http_framing_init(struct http_framing *f, bool http10)
{
    *f = (struct http_framing){.http10 = http10};
}

/* libmicrohttpd 0.9.75 skips the whitespace before a value but not after
 * it, and answers a value it cannot read itself (twice, see docs/api.md): so
 * "5 " is refused here, where it is answered once. */
static void content_length(struct http_framing *f, const char *v, size_t n)
{
    uint64_t x = 0;
    size_t i = 0;
    f->ncl++;
    while (i < n && is_ows(v[i]))
        i++;
    if (i == n)
        f->cl_bad = true;
    for (; i < n; i++) {
        if (v[i] < '0' || v[i] > '9') {
            f->cl_bad = true;
            return;
        }
        unsigned d = (unsigned)(v[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            f->cl_huge = true;
        x = x * 10 + d;
    }
    f->cl = x;
}

/* libmicrohttpd 0.9.75 decodes a chunked body only when the first
 * Transfer-Encoding field is exactly "chunked" after leading whitespace (any
 * case); for anything else it reads the body until the client closes. So
 * the codings are judged here, and a value it would not take as chunked is
 * refused even where its codings are sound ("chunked ", ", chunked"). */
static void transfer_encoding(struct http_framing *f, const char *v, size_t n)
{
    f->nte++;
    size_t lead = 0;
    while (lead < n && is_ows(v[lead]))
        lead++;
    f->te_exact = name_is(v + lead, n - lead, "chunked");
    for (size_t i = 0; i < n;) {
        size_t end = i;
        while (end < n && v[end] != ',')
            end++;
        size_t a = i, b = end;
        while (a < b && is_ows(v[a]))
            a++;
        const char *semi = memchr(v + a, ';', b - a);
        if (semi)
            b = (size_t)(semi - v);
        while (b > a && is_ows(v[b - 1]))
            b--;
        if (b > a) { /* an empty list element is allowed and means nothing */
            bool chunked = name_is(v + a, b - a, "chunked");
            f->ncodings++;
            f->nchunked += chunked;
            f->last_chunked = chunked;
        }
        i = end + 1;
    }
}

void http_framing_field(struct http_framing *f, const char *name, size_t nlen, const char *value,
                        size_t vlen)
{
    if (nlen == 0)
        f->bad_name = true;
    for (size_t i = 0; i < nlen; i++)
        if (!route_is_tchar(name[i]))
            f->bad_name = true;
    if (name_is(name, nlen, "Content-Length"))
        content_length(f, value, vlen);
    else if (name_is(name, nlen, "Transfer-Encoding"))
        transfer_encoding(f, value, vlen);
}

unsigned http_framing_verdict(const struct http_framing *f, const char **ret_msg)
{
    static const struct {
        unsigned status;
        const char *message;
    } why[] = {
        {400, "a header name is not a token (whitespace before the colon?)"},
        {400, "Content-Length is given more than once"},
        {400, "Content-Length is not a decimal number"},
        {413, "Content-Length is over 64 bits"},
        {400, "Transfer-Encoding and Content-Length are given together"},
        {400, "Transfer-Encoding is given more than once"},
        {400, "Transfer-Encoding in an HTTP/1.0 request"},
        {400, "the final transfer coding is not chunked"},
        {400, "chunked is applied more than once"},
        {501, "no transfer coding but chunked is supported"},
        {400, "Transfer-Encoding is not exactly \"chunked\""},
    };
    bool te = f->nte > 0;
    bool cond[] = {
        f->bad_name,
        f->ncl > 1,
        f->cl_bad,
        f->cl_huge,
        te && f->ncl > 0,
        f->nte > 1,
        te && f->http10,
        te && !f->last_chunked,
        te && f->nchunked > 1,
        te && f->ncodings > 1,
        te && !f->te_exact,
    };
    _Static_assert(sizeof(cond) / sizeof(cond[0]) == sizeof(why) / sizeof(why[0]), "one each");
    for (size_t i = 0; i < sizeof(cond) / sizeof(cond[0]); i++)
        if (cond[i]) {
            *ret_msg = why[i].message;
            return why[i].status;
        }
    return 0;
}

bool http_framing_chunked(const struct http_framing *f)
{
    return f->nte > 0;
}

/* ---- the scan of a connection's first bytes ---- */

/* The next line of buf[*pos, len): its start and length without CR LF; false
 * when no LF ends it yet. */
static bool next_line(const char *buf, size_t len, size_t *pos, const char **ret, size_t *ret_len)
{
    const char *lf = memchr(buf + *pos, '\n', len - *pos);
    if (!lf)
        return false;
    size_t n = (size_t)(lf - (buf + *pos));
    *ret = buf + *pos;
    *ret_len = n > 0 && (*ret)[n - 1] == '\r' ? n - 1 : n;
    *pos += n + 1;
    return true;
}

static enum http_scan refuse(struct http_scan_refusal *r, unsigned status, const char *message)
{
    r->status = status;
    r->message = message;
    return HTTP_SCAN_REFUSE;
}

/* The request line, read as leniently as libmicrohttpd 0.9.75 reads it (more
 * spaces after the method, spaces in the target: the version is the last
 * word), so that no request it goes on to read skips the field checks:
 * METHOD, then the target, then the version. False only for a line of fewer
 * than three words, which libmicrohttpd refuses before reading any field
 * (once). */
static bool request_line(const char *l, size_t n, bool *http10, struct http_scan_refusal *r)
{
    const char *sp1 = memchr(l, ' ', n);
    const char *sp2 = NULL;
    for (size_t i = n; sp1 && i > (size_t)(sp1 - l) + 1; i--)
        if (l[i - 1] == ' ') {
            sp2 = l + i - 1;
            break;
        }
    const char *target = sp1;
    while (target && target < l + n && *target == ' ')
        target++;
    if (!sp1 || !sp2 || target >= sp2 || sp2 + 1 == l + n)
        return false;
    const char *ver = sp2 + 1;
    size_t vlen = n - (size_t)(ver - l);
    *http10 = vlen == 8 && strncmp(ver, "HTTP/1.0", 8) == 0;
    snprintf(r->method, sizeof(r->method), "%.*s", (int)(sp1 - l), l);
    snprintf(r->path, sizeof(r->path), "%.*s", (int)(sp2 - target), target);
    r->path[strcspn(r->path, "?")] = '\0';
    return true;
}

/* One request's head from *pos: HTTP_SCAN_PASS with *ret_f filled and *pos
 * after the blank line; HTTP_SCAN_MORE when incomplete; or a refusal.
 * *ret_parsed is false when the request line is libmicrohttpd's to judge. */
static enum http_scan scan_head(const char *buf, size_t len, size_t *pos, struct http_framing *f,
                                bool *ret_parsed, struct http_scan_refusal *r)
{
    const char *l;
    size_t n;
    bool http10 = false;
    do { /* empty lines before a request line are skipped, as MHD does */
        if (!next_line(buf, len, pos, &l, &n))
            return HTTP_SCAN_MORE;
    } while (n == 0);
    *ret_parsed = request_line(l, n, &http10, r);
    if (!*ret_parsed)
        return HTTP_SCAN_PASS;
    http_framing_init(f, http10);
    for (;;) {
        if (!next_line(buf, len, pos, &l, &n))
            return HTTP_SCAN_MORE;
        if (n == 0)
            return HTTP_SCAN_PASS;
        if (is_ows(l[0]))
            return refuse(r, 400, "a header line is folded onto the next (obs-fold)");
        const char *colon = memchr(l, ':', n);
        if (!colon)
            return refuse(r, 400, "a header line has no colon");
        size_t nlen = (size_t)(colon - l);
        http_framing_field(f, l, nlen, colon + 1, n - nlen - 1);
    }
}

enum http_scan http_framing_scan(const char *buf, size_t len, bool eof,
                                 struct http_scan_refusal *ret)
{
    struct http_scan_refusal r = {0};
    size_t pos = 0;
    for (unsigned i = 0; i < SCAN_MAX_REQUESTS && pos < len; i++) {
        struct http_framing f;
        bool parsed = false;
        size_t start = pos;
        enum http_scan s = scan_head(buf, len, &pos, &f, &parsed, &r);
        if (s == HTTP_SCAN_REFUSE) {
            *ret = r;
            return s;
        }
        if (s == HTTP_SCAN_MORE) {
            if (eof)
                return HTTP_SCAN_PASS; /* all there is: MHD's to answer */
            if (i > 0) /* the first head is judged; a later one (or a stray CRLF) is */
                return HTTP_SCAN_PASS; /* checked again in the access callback */
            if (len - start < HTTP_HEAD_MAX)
                return HTTP_SCAN_MORE;
            bool line = memchr(buf + start, '\n', len - start) != NULL;
            *ret = r;
            return line ? refuse(ret, 431, "the request head is over the limit")
                        : refuse(ret, 414, "the request line is over the limit");
        }
        if (!parsed)
            return HTTP_SCAN_PASS;
        const char *msg = NULL;
        unsigned status = http_framing_verdict(&f, &msg);
        if (status) {
            *ret = r;
            return refuse(ret, status, msg);
        }
        if (http_framing_chunked(&f) || f.cl > len - pos)
            return HTTP_SCAN_PASS; /* the rest is a body still coming, or chunked */
        pos += (size_t)f.cl;
    }
    return HTTP_SCAN_PASS;
}

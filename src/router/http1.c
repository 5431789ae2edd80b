/*
 * http1.c - HTTP/1.1 messages over Node's http-parser (Debian's
 * libhttp-parser 2.9): the request reader of a client connection, the
 * response reader of a replica's connection (which writes what the client
 * gets as it parses), and the forwarded request. No I/O: the workers
 * (proxy.c, exchange.c) feed bytes in and write bytes out (router.h).
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "router/router.h"
#include "base/banned.h"

#define VIA "1.1 gpuorch-router"

/* ---- buffers ---- */

int rt_buf_reserve(struct rt_buf *b, size_t more)
{
    if (b->cap - b->len >= more)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < more) {
        if (cap > SIZE_MAX / 2)
            return GPO_ENOMEM;
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (!p)
        return GPO_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int rt_buf_add(struct rt_buf *b, const void *p, size_t n)
{
    if (!n)
        return 0;
    if (rt_buf_reserve(b, n))
        return GPO_ENOMEM;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

int rt_buf_str(struct rt_buf *b, const char *s)
{
    return rt_buf_add(b, s, strlen(s));
}

int rt_buf_printf(struct rt_buf *b, const char *fmt, ...)
{
    for (int round = 0; round < 2; round++) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->data ? b->data + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0)
            return GPO_EINVAL;
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return 0;
        }
        if (rt_buf_reserve(b, (size_t)n + 1))
            return GPO_ENOMEM;
    }
    return GPO_ENOMEM;
}

int rt_buf_cat_(struct rt_buf *b, ...)
{
    va_list ap;
    va_start(ap, b);
    int rc = 0;
    for (const char *s = va_arg(ap, const char *); s && !rc; s = va_arg(ap, const char *))
        rc = rt_buf_add(b, s, strlen(s));
    va_end(ap);
    return rc;
}

void rt_buf_release(struct rt_buf *b)
{
    free(b->data);
    *b = (struct rt_buf){0};
}

/* ---- a message's head ---- */

enum { AT_START, AT_FIELD, AT_VALUE, AT_ENDED }; /* AT_ENDED: the head is whole */

static void msg_reset(struct rt_msg *m)
{
    m->arena.len = 0;
    m->nhdrs = 0;
    m->line = 0;
    m->at = AT_START;
    m->head_bytes = 0;
    m->fault = NULL;
}

static void msg_release(struct rt_msg *m)
{
    rt_buf_release(&m->arena);
    free(m->hdrs);
    m->hdrs = NULL;
    m->caphdrs = 0;
}

/* Ends the string being collected, which starts at `start`: trailing
 * blanks off, its length kept (a header's), a NUL after. */
static int msg_end_string(struct rt_msg *m, size_t start)
{
    while (m->arena.len > start &&
           (m->arena.data[m->arena.len - 1] == ' ' || m->arena.data[m->arena.len - 1] == '\t'))
        m->arena.len--;
    uint32_t len = (uint32_t)(m->arena.len - start);
    if (m->at == AT_FIELD)
        m->hdrs[m->nhdrs - 1].name_len = len;
    else if (m->at == AT_VALUE)
        m->hdrs[m->nhdrs - 1].value_len = len;
    return rt_buf_add(&m->arena, "", 1);
}

/* What is wrong with the name just collected, or NULL. RFC 9110's tchar
 * only: Debian's http-parser is built lenient and takes a blank inside a
 * name ("Transfer-Encoding : chunked"), which a replica could read
 * otherwise. */
static const char *name_fault(const struct rt_msg *m)
{
    static const char other[] = "!#$%&'*+-.^_`|~";
    const char *start = m->arena.data + m->hdrs[m->nhdrs - 1].name, *p = start;
    const char *end = m->arena.data + m->arena.len;
    if (p == end)
        return "an empty header name";
    for (; p < end; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              (*p && strchr(other, *p))))
            return "a header name that is not a token";
    /* http-parser 2.9 takes any name that starts so for Transfer-Encoding:
     * refused, rather than forwarded to a replica that reads it otherwise */
    if ((size_t)(end - start) > 17 && !strncasecmp(start, "Transfer-Encoding", 17))
        return "a header name that starts with Transfer-Encoding";
    return NULL;
}

/* No control characters in a value but HTAB (a NUL would cut it short
 * here, a bare CR could end it early for a replica). */
static bool value_ok(const struct rt_msg *m)
{
    const unsigned char *p = (const unsigned char *)m->arena.data + m->hdrs[m->nhdrs - 1].value;
    const unsigned char *end = (const unsigned char *)m->arena.data + m->arena.len;
    for (; p < end; p++)
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
            return false;
    return true;
}

/* The string being collected is whole: a header's name or value is
 * checked. */
static bool string_ok(struct rt_msg *m)
{
    if (m->at == AT_FIELD && (m->fault = name_fault(m)) != NULL)
        return false;
    if (m->at == AT_VALUE && !value_ok(m)) {
        m->fault = "a control character in a header value";
        return false;
    }
    return true;
}

/* Where the string being collected starts. */
static size_t msg_open(const struct rt_msg *m)
{
    if (m->at == AT_VALUE)
        return m->hdrs[m->nhdrs - 1].value;
    return m->at == AT_FIELD ? m->hdrs[m->nhdrs - 1].name : m->line;
}

/* The pieces of the request line's URL (or the status line's reason), of a
 * header's name and of its value, as the parser hands them over: a piece
 * split over two reads comes in two calls, appended. (The parser calls the
 * value's callback for an empty value too, so a name follows a value.) */
static int msg_piece(struct rt_msg *m, int at, const char *p, size_t len, size_t max)
{
    m->head_bytes += len;
    if (m->head_bytes > max) {
        m->fault = "the head is over --max-header";
        return -1;
    }
    if (m->at == AT_ENDED)
        return 0; /* a chunked body's trailers: dropped (never forwarded as headers) */
    if (at != m->at) {
        if (!string_ok(m) || msg_end_string(m, msg_open(m)))
            return -1;
        if (at == AT_FIELD) {
            if (m->nhdrs == m->caphdrs) {
                size_t cap = m->caphdrs ? m->caphdrs * 2 : 16;
                struct rt_hdr *h = realloc(m->hdrs, cap * sizeof(*h));
                if (!h)
                    return -1;
                m->hdrs = h;
                m->caphdrs = cap;
            }
            m->hdrs[m->nhdrs++] = (struct rt_hdr){.name = (uint32_t)m->arena.len};
            m->head_bytes += 4; /* ": " and CRLF */
        } else {
            m->hdrs[m->nhdrs - 1].value = (uint32_t)m->arena.len;
        }
        m->at = at;
    }
    if (m->arena.len + len > UINT32_MAX / 2)
        return -1;
    return rt_buf_add(&m->arena, p, len) ? -1 : 0;
}

/* After the last header: every string ended. */
static int msg_finish(struct rt_msg *m)
{
    if (m->at == AT_FIELD) { /* not seen from the parser; a value for safety */
        if (!string_ok(m) || msg_end_string(m, msg_open(m)))
            return -1;
        m->hdrs[m->nhdrs - 1].value = (uint32_t)m->arena.len;
        m->at = AT_VALUE;
    }
    if (!string_ok(m) || msg_end_string(m, msg_open(m)))
        return -1;
    m->at = AT_ENDED;
    return 0;
}

const char *rt_msg_name(const struct rt_msg *m, size_t k)
{
    return m->arena.data + m->hdrs[k].name;
}

const char *rt_msg_value(const struct rt_msg *m, size_t k)
{
    return m->arena.data + m->hdrs[k].value;
}

/* Whether header k is `name` (of length len), in any case. */
static bool name_is(const struct rt_msg *m, size_t k, const char *name, size_t len)
{
    return m->hdrs[k].name_len == len && !strcasecmp(rt_msg_name(m, k), name);
}

const char *rt_msg_get(const struct rt_msg *m, const char *name)
{
    size_t len = strlen(name);
    for (size_t k = 0; k < m->nhdrs; k++)
        if (name_is(m, k, name, len))
            return rt_msg_value(m, k);
    return NULL;
}

const char *rt_msg_line(const struct rt_msg *m)
{
    return m->arena.len ? m->arena.data + m->line : "";
}

/* ---- hop-by-hop headers ---- */

static const char *const hop_by_hop[] = {"Connection", "Keep-Alive",        "TE",
                                         "Trailer",    "Transfer-Encoding", "Upgrade",
                                         "Expect",     "Content-Length",    NULL};

bool rt_hop_only(const char *key, const char *connection)
{
    /* every hop-by-hop name starts with one of these: most headers are
     * passed after one look */
    if (key[0] && strchr("cCkKtTuUeEpP", key[0])) {
        for (size_t k = 0; hop_by_hop[k]; k++)
            if (!strcasecmp(key, hop_by_hop[k]))
                return true;
        if (!strncasecmp(key, "Proxy-", 6))
            return true;
    }
    if (!connection)
        return false;
    size_t n = strlen(key);
    for (const char *p = connection; p && *p;) {
        p += strspn(p, " \t,");
        size_t len = strcspn(p, " \t,");
        if (len == n && !strncasecmp(p, key, n))
            return true;
        p += len;
    }
    return false;
}

/* The end-to-end headers of m but those named in `skip` (NULL-ended). */
static int copy_headers(const struct rt_msg *m, const char *const *skip, struct rt_buf *out)
{
    const char *connection = rt_msg_get(m, "Connection");
    for (size_t k = 0; k < m->nhdrs; k++) {
        const char *name = rt_msg_name(m, k);
        bool skipped = rt_hop_only(name, connection);
        for (size_t i = 0; skip && skip[i] && !skipped; i++)
            skipped = name_is(m, k, skip[i], strlen(skip[i]));
        if (skipped)
            continue;
        const struct rt_hdr *h = &m->hdrs[k];
        if (rt_buf_reserve(out, (size_t)h->name_len + h->value_len + 4))
            return GPO_ENOMEM;
        char *p = out->data + out->len;
        memcpy(p, name, h->name_len);
        p += h->name_len;
        *p++ = ':';
        *p++ = ' ';
        memcpy(p, rt_msg_value(m, k), h->value_len);
        p += h->value_len;
        *p++ = '\r';
        *p++ = '\n';
        out->len = (size_t)(p - out->data);
    }
    return 0;
}

/* "NAME: v1, v2, ..., last" from every NAME header of m and `last`. */
static int add_joined(const struct rt_msg *m, const char *name, const char *last,
                      struct rt_buf *out)
{
    if (rt_buf_cat(out, name, ": "))
        return GPO_ENOMEM;
    size_t len = strlen(name);
    for (size_t k = 0; k < m->nhdrs; k++)
        if (name_is(m, k, name, len) && *rt_msg_value(m, k) &&
            rt_buf_cat(out, rt_msg_value(m, k), ", "))
            return GPO_ENOMEM;
    return rt_buf_cat(out, last, "\r\n");
}

/* ---- the request reader ---- */

static struct rt_reqr *reqr_of(http_parser *p)
{
    return p->data;
}

static int rq_begin(http_parser *p)
{
    struct rt_reqr *r = reqr_of(p);
    msg_reset(&r->m);
    r->body.len = 0;
    r->expect_continue = false;
    return 0;
}

static int rq_url(http_parser *p, const char *at, size_t len)
{
    struct rt_reqr *r = reqr_of(p);
    return msg_piece(&r->m, AT_START, at, len, r->max_header);
}

static int rq_field(http_parser *p, const char *at, size_t len)
{
    struct rt_reqr *r = reqr_of(p);
    return msg_piece(&r->m, AT_FIELD, at, len, r->max_header);
}

static int rq_value(http_parser *p, const char *at, size_t len)
{
    struct rt_reqr *r = reqr_of(p);
    return msg_piece(&r->m, AT_VALUE, at, len, r->max_header);
}

static int rq_headers(http_parser *p)
{
    struct rt_reqr *r = reqr_of(p);
    if (msg_finish(&r->m))
        return -1;
    if (!(p->flags & F_CHUNKED) && p->content_length != ULLONG_MAX &&
        p->content_length > r->max_body) {
        r->m.fault = "the body is over --max-body";
        r->fault_code = 413;
        return -1;
    }
    const char *expect = rt_msg_get(&r->m, "Expect");
    r->expect_continue = expect && !strcasecmp(expect, "100-continue");
    r->method = (int)p->method;
    r->keep_alive = http_should_keep_alive(p) != 0;
    r->http11 = p->http_major == 1 && p->http_minor >= 1;
    r->stage = RT_BODY;
    return 0;
}

static int rq_body(http_parser *p, const char *at, size_t len)
{
    struct rt_reqr *r = reqr_of(p);
    if (r->body.len + len > r->max_body) {
        r->m.fault = "the body is over --max-body";
        r->fault_code = 413;
        return -1;
    }
    return rt_buf_add(&r->body, at, len) ? -1 : 0;
}

static int rq_complete(http_parser *p)
{
    struct rt_reqr *r = reqr_of(p);
    r->stage = RT_DONE;
    http_parser_pause(p, 1); /* one request at a time: the next waits in the buffer */
    return 0;
}

static const http_parser_settings rq_settings = {
    .on_message_begin = rq_begin,
    .on_url = rq_url,
    .on_header_field = rq_field,
    .on_header_value = rq_value,
    .on_headers_complete = rq_headers,
    .on_body = rq_body,
    .on_message_complete = rq_complete,
};

void rt_reqr_init(struct rt_reqr *r, size_t max_header, size_t max_body)
{
    *r = (struct rt_reqr){.max_header = max_header, .max_body = max_body};
    http_parser_init(&r->p, HTTP_REQUEST);
    r->p.data = r;
}

void rt_reqr_release(struct rt_reqr *r)
{
    msg_release(&r->m);
    rt_buf_release(&r->body);
}

void rt_reqr_next(struct rt_reqr *r)
{
    r->stage = RT_HEAD;
    http_parser_pause(&r->p, 0);
}

/* Why the parser stopped, in words a client can act on. */
static const char *parser_fault(enum http_errno e)
{
    switch (e) {
    case HPE_INVALID_CONTENT_LENGTH:
        return "malformed Content-Length";
    case HPE_UNEXPECTED_CONTENT_LENGTH:
        return "conflicting Content-Length headers, or Content-Length with Transfer-Encoding";
    case HPE_INVALID_TRANSFER_ENCODING:
        return "a Transfer-Encoding other than chunked last";
    case HPE_INVALID_CHUNK_SIZE:
        return "malformed chunk size";
    case HPE_HEADER_OVERFLOW:
        return "the head is over --max-header";
    case HPE_INVALID_METHOD:
        return "unknown method";
    case HPE_INVALID_VERSION:
        return "malformed HTTP version";
    default:
        return http_errno_description(e);
    }
}

size_t rt_reqr_feed(struct rt_reqr *r, const char *data, size_t len)
{
    if (r->stage == RT_DONE || r->stage == RT_FAULT || !len)
        return 0;
    size_t n = http_parser_execute(&r->p, &rq_settings, data, len);
    enum http_errno e = HTTP_PARSER_ERRNO(&r->p);
    if (e == HPE_OK || e == HPE_PAUSED) {
        if (r->stage == RT_DONE && r->p.upgrade) /* Upgrade is hop-by-hop: not taken */
            r->p.upgrade = 0;
        return n;
    }
    r->fault = r->m.fault ? r->m.fault : parser_fault(e);
    if (!r->fault_code)
        r->fault_code = 400;
    r->stage = RT_FAULT;
    return n;
}

/* ---- the forwarded request ---- */

static const char *const forward_skip[] = {"X-Forwarded-For", "Via", NULL};

int rt_req_forward(const struct rt_reqr *r, const char *uri, const char *peer,
                   const char *host_fallback, struct rt_buf *out)
{
    const struct rt_msg *m = &r->m;
    const char *host = rt_msg_get(m, "Host");
    if (rt_buf_cat(out, http_method_str((enum http_method)r->method), " ", uri, " HTTP/1.1\r\n") ||
        copy_headers(m, forward_skip, out))
        return GPO_ENOMEM;
    if (*peer && add_joined(m, "X-Forwarded-For", peer, out))
        return GPO_ENOMEM;
    if (host && !rt_msg_get(m, "X-Forwarded-Host") &&
        rt_buf_cat(out, "X-Forwarded-Host: ", host, "\r\n"))
        return GPO_ENOMEM;
    if (!rt_msg_get(m, "X-Forwarded-Proto") && rt_buf_str(out, "X-Forwarded-Proto: http\r\n"))
        return GPO_ENOMEM;
    if (add_joined(m, "Via", VIA, out))
        return GPO_ENOMEM;
    if (!host && rt_buf_cat(out, "Host: ", host_fallback, "\r\n"))
        return GPO_ENOMEM;
    if ((r->body.len || r->method == HTTP_POST || r->method == HTTP_PUT ||
         r->method == HTTP_PATCH) &&
        rt_buf_printf(out, "Content-Length: %zu\r\n", r->body.len))
        return GPO_ENOMEM;
    if (rt_buf_add(out, "\r\n", 2) || rt_buf_add(out, r->body.data, r->body.len))
        return GPO_ENOMEM;
    return 0;
}

/* ---- the response reader ---- */

static struct rt_resr *resr_of(http_parser *p)
{
    return p->data;
}

static int rs_begin(http_parser *p)
{
    msg_reset(&resr_of(p)->m);
    return 0;
}

static int rs_status(http_parser *p, const char *at, size_t len)
{
    struct rt_resr *r = resr_of(p);
    return msg_piece(&r->m, AT_START, at, len, r->max_header);
}

static int rs_field(http_parser *p, const char *at, size_t len)
{
    struct rt_resr *r = resr_of(p);
    return msg_piece(&r->m, AT_FIELD, at, len, r->max_header);
}

static int rs_value(http_parser *p, const char *at, size_t len)
{
    struct rt_resr *r = resr_of(p);
    return msg_piece(&r->m, AT_VALUE, at, len, r->max_header);
}

static const char *const response_skip[] = {"Via", NULL};

/* The client's head: the replica's status and end-to-end headers, the
 * framing the client gets, Via. */
static int rs_headers(http_parser *p)
{
    struct rt_resr *r = resr_of(p);
    struct rt_buf *out = r->out;
    if (msg_finish(&r->m))
        return -1;
    r->status = p->status_code;
    if (r->status < 200) {
        if (r->status == 101) {
            r->m.fault = "the replica switched protocols";
            return -1;
        }
        r->interim = true; /* 100, 103: dropped, the answer follows */
        return 1;          /* and nothing of theirs is a body */
    }
    bool chunked = (p->flags & F_CHUNKED) != 0;
    const char *cl = chunked ? NULL : rt_msg_get(&r->m, "Content-Length");
    bool no_body = r->head_req || r->status == 204 || r->status == 304;
    char code[4] = {(char)('0' + r->status / 100 % 10), (char)('0' + r->status / 10 % 10),
                    (char)('0' + r->status % 10), '\0'}; /* the parser takes 3 digits */
    if (rt_buf_cat(out, "HTTP/1.1 ", code, " ", rt_msg_line(&r->m), "\r\n") ||
        copy_headers(&r->m, response_skip, out))
        return -1;
    if (cl && rt_buf_cat(out, "Content-Length: ", cl, "\r\n"))
        return -1;
    if (!cl && (!no_body || (r->head_req && chunked))) {
        if (r->client11) {
            r->chunk_out = !no_body;
            if (rt_buf_str(out, "Transfer-Encoding: chunked\r\n"))
                return -1;
        } else if (!no_body) {
            r->close_out = true; /* an HTTP/1.0 client: the close ends the body */
        }
    }
    if (add_joined(&r->m, "Via", VIA, out))
        return -1;
    if (r->client_close || r->close_out) {
        r->close_out = true;
        if (rt_buf_str(out, "Connection: close\r\n"))
            return -1;
    } else if (!r->client11 && rt_buf_str(out, "Connection: keep-alive\r\n")) {
        return -1;
    }
    if (rt_buf_add(out, "\r\n", 2))
        return -1;
    r->stage = RT_BODY;
    /* 1: no body follows, whatever the head says (http-parser would read
     * one after a 204 with a Transfer-Encoding, say: never passed on) */
    return no_body ? 1 : 0;
}

static int rs_body(http_parser *p, const char *at, size_t len)
{
    struct rt_resr *r = resr_of(p);
    if (r->stage != RT_BODY)
        return -1; /* not reached: only an answer whose head is out has a body */
    if (r->chunk_out && rt_buf_printf(r->out, "%zx\r\n", len))
        return -1;
    if (rt_buf_add(r->out, at, len) || (r->chunk_out && rt_buf_add(r->out, "\r\n", 2)))
        return -1;
    return 0;
}

static int rs_complete(http_parser *p)
{
    struct rt_resr *r = resr_of(p);
    if (r->interim) {
        r->interim = false;
        return 0;
    }
    if (r->chunk_out && rt_buf_add(r->out, "0\r\n\r\n", 5))
        return -1;
    r->keep_alive = http_should_keep_alive(p) != 0;
    r->stage = RT_DONE;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings rs_settings = {
    .on_message_begin = rs_begin,
    .on_status = rs_status,
    .on_header_field = rs_field,
    .on_header_value = rs_value,
    .on_headers_complete = rs_headers,
    .on_body = rs_body,
    .on_message_complete = rs_complete,
};

void rt_resr_start(struct rt_resr *r, struct rt_buf *out, size_t max_header, bool head_req,
                   bool client11, bool client_close)
{
    struct rt_msg m = r->m; /* its buffers are kept from one answer to the next */
    *r = (struct rt_resr){.m = m,
                          .out = out,
                          .max_header = max_header,
                          .head_req = head_req,
                          .client11 = client11,
                          .client_close = client_close};
    msg_reset(&r->m);
    http_parser_init(&r->p, HTTP_RESPONSE);
    r->p.data = r;
}

void rt_resr_release(struct rt_resr *r)
{
    msg_release(&r->m);
}

static size_t resr_run(struct rt_resr *r, const char *data, size_t len)
{
    size_t n = http_parser_execute(&r->p, &rs_settings, data, len);
    enum http_errno e = HTTP_PARSER_ERRNO(&r->p);
    if (e != HPE_OK && e != HPE_PAUSED) {
        r->fault = r->m.fault ? r->m.fault : parser_fault(e);
        r->stage = RT_FAULT;
    }
    return n;
}

size_t rt_resr_feed(struct rt_resr *r, const char *data, size_t len)
{
    if (r->stage == RT_DONE || r->stage == RT_FAULT || !len)
        return 0;
    return resr_run(r, data, len);
}

void rt_resr_eof(struct rt_resr *r)
{
    if (r->stage == RT_DONE || r->stage == RT_FAULT)
        return;
    enum rt_stage was = r->stage;
    resr_run(r, NULL, 0); /* ends a body that the close delimits */
    if (r->stage == RT_DONE) {
        r->keep_alive = false;
        return;
    }
    if (r->stage != RT_FAULT || r->fault == parser_fault(HPE_INVALID_EOF_STATE)) {
        r->fault = was == RT_HEAD ? "the replica closed the connection before it answered"
                                  : "the replica closed the connection in the middle of its answer";
        r->stage = RT_FAULT;
    }
}

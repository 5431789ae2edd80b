/*
 * framing.h - private to src/http: the rules for a request's message framing
 * (RFC 9112 sections 5 and 6), pure and without libmicrohttpd.
 *
 * A request is refused, once and with the connection closed, when
 *   - a header name is not a token (whitespace before the colon, say):
 *     "Content-Length : 5" would otherwise be no Content-Length at all;
 *   - Content-Length is not 1*DIGIT after leading whitespace (so "abc", "-1",
 *     "+5", "5 ", "5, 5" and the empty value), or appears more than once,
 *     equal values included: 400;
 *   - Content-Length has more digits than fit 64 bits: 413;
 *   - Transfer-Encoding appears beside Content-Length, more than once, in
 *     an HTTP/1.0 request, or with a final coding other than chunked, or
 *     chunked twice, or is anything but "chunked" after leading whitespace
 *     (libmicrohttpd decodes nothing else as chunked): 400; a chunked
 *     request with another coding before it: 501 (we decode none).
 * Two users: the accept gate (gate.c), which reads a new connection's first
 * requests from the socket before libmicrohttpd does, and the first access
 * callback (http.c), which sees every request's fields as MHD parsed them.
 */
#ifndef GPUORCH_HTTP_FRAMING_H
#define GPUORCH_HTTP_FRAMING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most bytes of request line and fields the gate waits for (MHD's own
 * connection memory, 32 KiB by default, bounds it again). */
#define HTTP_HEAD_MAX 16384u

/* What one request's fields said about its framing; http_framing_init, then
 * http_framing_field for each field, then http_framing_verdict. */
struct http_framing {
    bool http10;       /* the request says HTTP/1.0 */
    bool bad_name;     /* a field name that is not a token */
    unsigned ncl;      /* Content-Length fields */
    bool cl_bad;       /* one that is not 1*DIGIT */
    bool cl_huge;      /* one over 64 bits */
    uint64_t cl;       /* the (last) value */
    unsigned nte;      /* Transfer-Encoding fields */
    unsigned ncodings; /* codings named in all of them */
    unsigned nchunked; /* of which chunked */
    bool last_chunked; /* the final coding is chunked */
    bool te_exact;     /* the (last) field is "chunked" after leading whitespace */
};

void http_framing_init(struct http_framing *f, bool http10);

/* One field: name and value with their lengths (not NUL-terminated); the
 * value may carry the whitespace around it. */
void http_framing_field(struct http_framing *f, const char *name, size_t nlen, const char *value,
                        size_t vlen);

/* 0 when the framing is sound; else the status to answer (400, 413, 501)
 * with a static one-line reason in *ret_msg. */
unsigned http_framing_verdict(const struct http_framing *f, const char **ret_msg);

/* Whether the framing says a chunked body (only meaningful with verdict 0). */
bool http_framing_chunked(const struct http_framing *f);

/* What http_framing_scan found at the start of a connection. */
enum http_scan {
    HTTP_SCAN_MORE,   /* the first request's head is not complete yet */
    HTTP_SCAN_PASS,   /* nothing to refuse: hand the connection to MHD */
    HTTP_SCAN_REFUSE, /* answer *ret_status and close */
};

/* The refusal: status, reason, and the first request's method and target
 * (cut, for the access log; "" when the request line did not parse). */
struct http_scan_refusal {
    unsigned status;
    const char *message;
    char method[16];
    char path[128];
};

/*
 * Scans the first len bytes a client sent on a new connection (peeked, still
 * unread): the first request's head must be complete within HTTP_HEAD_MAX
 * bytes (else 431; 414 when even the request line is not), and every
 * complete head in the bytes (pipelined requests, found by skipping
 * Content-Length bodies up to the first chunked one or one still coming)
 * must pass the rules above; a field line folded onto the next (obs-fold)
 * is refused too. A later head still incomplete is not waited for (the
 * access callback checks it, and a stray CRLF after a body must not hold
 * the connection). Lines end at LF with or without CR before it, as
 * libmicrohttpd reads them. eof: the client has sent all it will (its head
 * is then taken as is). On HTTP_SCAN_REFUSE *ret is set.
 */
enum http_scan http_framing_scan(const char *buf, size_t len, bool eof,
                                 struct http_scan_refusal *ret);

#endif

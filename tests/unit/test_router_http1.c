/* test_router_http1.c - the router's HTTP/1.1 messages (src/router/http1.c,
 * over Node's http-parser): requests parsed whole and one at a time
 * (pipelined ones wait), the same at every split of the bytes and byte by
 * byte; framing refused (two lengths, a length with chunked, malformed
 * lengths and chunk sizes, a head over the bound, a body over it: 413); the
 * forwarded request (hop-by-hop headers out, X-Forwarded-For and Via
 * appended, the body's own Content-Length); answers passed on as parsed
 * (a length kept, chunked re-chunked at every split, a close-delimited body
 * chunked for an HTTP/1.1 client and closed for an HTTP/1.0 one, HEAD, 204,
 * an interim 100 dropped), and a replica that breaks its answer (a bad
 * chunk, two lengths, closing in the middle or before answering). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "router/router.h"
#include "base/banned.h"

#define MAX_HEADER 4096
#define MAX_BODY   1024

/* ---- requests ---- */

/* Feeds text in pieces of at most `step` bytes (0: at once), as reads
 * would hand it over; returns the bytes taken. */
static size_t feed_req(struct rt_reqr *r, const char *text, size_t len, size_t step)
{
    size_t at = 0;
    while (at < len) {
        size_t n = step && len - at > step ? step : len - at;
        size_t took = rt_reqr_feed(r, text + at, n);
        at += took;
        if (r->stage == RT_DONE || r->stage == RT_FAULT || took < n)
            break;
    }
    return at;
}

static const char chunked_post[] = "POST /v1/completions?x=1 HTTP/1.1\r\n"
                                   "Host: chat.example.com:8081\r\n"
                                   "X-Empty:\r\n"
                                   "Content-Type: application/json  \r\n"
                                   "Transfer-Encoding: chunked\r\n"
                                   "\r\n"
                                   "5\r\n{\"mod\r\n"
                                   "c;ext=1\r\nel\": \"chat\"}\r\n"
                                   "0\r\nHost: trailer.example.com\r\n\r\n";

static void check_chunked_post(const struct rt_reqr *r)
{
    assert_int_equal(r->stage, RT_DONE);
    assert_int_equal(r->method, HTTP_POST);
    assert_string_equal(rt_msg_line(&r->m), "/v1/completions?x=1");
    assert_int_equal(r->m.nhdrs, 4); /* the trailer is not a header */
    assert_string_equal(rt_msg_get(&r->m, "host"), "chat.example.com:8081");
    assert_string_equal(rt_msg_get(&r->m, "X-Empty"), "");
    assert_string_equal(rt_msg_get(&r->m, "Content-Type"), "application/json");
    assert_null(rt_msg_get(&r->m, "Content-Length"));
    assert_int_equal(r->body.len, strlen("{\"model\": \"chat\"}"));
    assert_memory_equal(r->body.data, "{\"model\": \"chat\"}", r->body.len);
    assert_true(r->keep_alive);
    assert_true(r->http11);
}

static void test_a_request_is_the_same_at_every_split_and_byte_by_byte(void **state)
{
    (void)state;
    size_t len = strlen(chunked_post);
    for (size_t split = 0; split <= len; split++) {
        struct rt_reqr r;
        rt_reqr_init(&r, MAX_HEADER, MAX_BODY);
        size_t took = rt_reqr_feed(&r, chunked_post, split);
        took += rt_reqr_feed(&r, chunked_post + took, len - took);
        assert_int_equal(took, len);
        check_chunked_post(&r);
        rt_reqr_release(&r);
    }
    struct rt_reqr r;
    rt_reqr_init(&r, MAX_HEADER, MAX_BODY);
    assert_int_equal(feed_req(&r, chunked_post, len, 1), len);
    check_chunked_post(&r);
    rt_reqr_release(&r);
}

static void test_pipelined_requests_are_taken_one_at_a_time(void **state)
{
    (void)state;
    const char two[] = "GET /one HTTP/1.1\r\nHost: a\r\n\r\n"
                       "POST /two HTTP/1.1\r\nHost: b\r\nContent-Length: 3\r\n\r\nabc"
                       "GET /three HTTP/1.0\r\n\r\n";
    size_t first = strlen("GET /one HTTP/1.1\r\nHost: a\r\n\r\n");
    size_t second = strlen("POST /two HTTP/1.1\r\nHost: b\r\nContent-Length: 3\r\n\r\nabc");
    for (size_t step = 0; step <= 7; step++) {
        struct rt_reqr r;
        rt_reqr_init(&r, MAX_HEADER, MAX_BODY);
        size_t at = feed_req(&r, two, strlen(two), step);
        assert_int_equal(at, first);
        assert_int_equal(r.stage, RT_DONE);
        assert_string_equal(rt_msg_line(&r.m), "/one");
        assert_int_equal(rt_reqr_feed(&r, two + at, strlen(two) - at), 0); /* waits */
        rt_reqr_next(&r);
        at += feed_req(&r, two + at, strlen(two) - at, step);
        assert_int_equal(at, first + second);
        assert_string_equal(rt_msg_line(&r.m), "/two");
        assert_string_equal(rt_msg_get(&r.m, "Host"), "b");
        assert_memory_equal(r.body.data, "abc", 3);
        rt_reqr_next(&r);
        at += feed_req(&r, two + at, strlen(two) - at, step);
        assert_int_equal(at, strlen(two));
        assert_int_equal(r.stage, RT_DONE);
        assert_string_equal(rt_msg_line(&r.m), "/three");
        assert_int_equal(r.body.len, 0);
        assert_false(r.keep_alive); /* HTTP/1.0 without keep-alive */
        assert_false(r.http11);
        rt_reqr_release(&r);
    }
}

struct bad {
    const char *name, *text, *fault; /* fault: a part of the message */
    int code;
};

static const struct bad bad_requests[] = {
    {"length with chunked",
     "POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n"
     "\r\n",
     "Transfer-Encoding", 400},
    {"chunked with length",
     "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n4\r\nabcd\r\n0\r\n"
     "\r\n",
     "Content-Length", 400},
    {"two lengths", "POST / HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde",
     "conflicting", 400},
    {"two equal lengths", "POST / HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\nabcd",
     "conflicting", 400},
    {"4x", "POST / HTTP/1.1\r\nContent-Length: 4x\r\n\r\nabcd", "malformed Content-Length", 400},
    {"+4", "POST / HTTP/1.1\r\nContent-Length: +4\r\n\r\nabcd", "malformed Content-Length", 400},
    {"-1", "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "malformed Content-Length", 400},
    {"4 4", "POST / HTTP/1.1\r\nContent-Length: 4 4\r\n\r\nabcd", "malformed Content-Length", 400},
    {"huge length", "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
     "malformed Content-Length", 400},
    {"gzip last", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nabcd", "Transfer-Encoding",
     400},
    {"bad chunk size", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabcd\r\n",
     "chunk size", 400},
    {"chunk size overflow",
     "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nabcd\r\n", "",
     400},
    {"a body over the bound", "POST / HTTP/1.1\r\nContent-Length: 1025\r\n\r\n", "--max-body", 413},
    {"a chunked body over the bound",
     "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n401\r\n", "--max-body", 413},
    {"not HTTP", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "", 400},
    {"a bad version", "GET / HTTP/9x\r\n\r\n", "", 400},
    {"a space in a header name", "GET / HTTP/1.1\r\nX Y: 1\r\n\r\n", "not a token", 400},
    {"a space before the colon",
     "POST / HTTP/1.1\r\nTransfer-Encoding : chunked\r\nContent-Length: 3\r\n\r\nabc",
     "not a token", 400},
    {"a name that extends Transfer-Encoding",
     "POST / HTTP/1.1\r\nTransfer-Encodings: x\r\nContent-Length: 3\r\n\r\nabc",
     "starts with Transfer-Encoding", 400},
    {"a control character in a value", "GET / HTTP/1.1\r\nX-A: a\001b\r\n\r\n", "", 400},
    {"a NUL in a header name", "GET / HTTP/1.1\r\nX\001Y: 1\r\n\r\n", "", 400},
};

static void test_bad_framing_is_refused_with_what_is_wrong(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof(bad_requests) / sizeof(bad_requests[0]); k++) {
        const struct bad *b = &bad_requests[k];
        for (size_t step = 0; step <= 1; step++) {
            struct rt_reqr r;
            rt_reqr_init(&r, MAX_HEADER, MAX_BODY);
            if (b->code == 413 && strstr(b->text, "chunked")) { /* the chunk itself goes over */
                feed_req(&r, b->text, strlen(b->text), step);
                char big[1100];
                memset(big, 'x', sizeof(big));
                rt_reqr_feed(&r, big, sizeof(big));
            } else {
                feed_req(&r, b->text, strlen(b->text), step);
            }
            if (r.stage != RT_FAULT || r.fault_code != b->code || !strstr(r.fault, b->fault))
                fail_msg("%s (step %zu): stage %d, code %d, fault '%s'", b->name, step, r.stage,
                         r.fault_code, r.fault ? r.fault : "");
            assert_int_equal(rt_reqr_feed(&r, "GET / HTTP/1.1\r\n\r\n", 18), 0); /* for good */
            rt_reqr_release(&r);
        }
    }
}

static void test_a_head_over_the_bound_is_refused(void **state)
{
    (void)state;
    static char text[MAX_HEADER * 2];
    /* many headers, one long header, a long URL */
    for (int kind = 0; kind < 3; kind++) {
        struct rt_buf b = {0};
        assert_int_equal(rt_buf_printf(&b, "GET /%s HTTP/1.1\r\n", kind == 2 ? "" : "x"), 0);
        if (kind == 2) {
            b.len -= strlen(" HTTP/1.1\r\n");
            for (int i = 0; i < MAX_HEADER; i++)
                rt_buf_add(&b, "u", 1);
            rt_buf_str(&b, " HTTP/1.1\r\n");
        }
        for (int i = 0; kind == 0 && i < 400; i++)
            rt_buf_printf(&b, "X-H%d: v\r\n", i);
        if (kind == 1) {
            rt_buf_str(&b, "X-Big: ");
            for (int i = 0; i < MAX_HEADER; i++)
                rt_buf_add(&b, "y", 1);
            rt_buf_str(&b, "\r\n");
        }
        rt_buf_str(&b, "\r\n");
        assert_true(b.len < sizeof(text));
        for (size_t step = 0; step <= 1; step++) {
            struct rt_reqr r;
            rt_reqr_init(&r, MAX_HEADER, MAX_BODY);
            feed_req(&r, b.data, b.len, step ? 100 : 0);
            assert_int_equal(r.stage, RT_FAULT);
            assert_int_equal(r.fault_code, 400);
            assert_non_null(strstr(r.fault, "--max-header"));
            rt_reqr_release(&r);
        }
        rt_buf_release(&b);
    }
    /* just under the bound passes */
    struct rt_reqr r;
    rt_reqr_init(&r, MAX_HEADER, MAX_BODY);
    const char ok[] = "GET / HTTP/1.1\r\nX-A: 1\r\n\r\n";
    assert_int_equal(rt_reqr_feed(&r, ok, strlen(ok)), strlen(ok));
    assert_int_equal(r.stage, RT_DONE);
    rt_reqr_release(&r);
}

static void test_expect_continue_is_seen_before_the_body(void **state)
{
    (void)state;
    const char head[] =
        "PUT /x HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\nHost: h\r\n\r\n";
    struct rt_reqr r;
    rt_reqr_init(&r, MAX_HEADER, MAX_BODY);
    assert_int_equal(rt_reqr_feed(&r, head, strlen(head)), strlen(head));
    assert_int_equal(r.stage, RT_BODY);
    assert_true(r.expect_continue);
    assert_int_equal(rt_reqr_feed(&r, "abc", 3), 3);
    assert_int_equal(r.stage, RT_DONE);
    rt_reqr_release(&r);
}

/* ---- the forwarded request ---- */

static void test_the_forwarded_request_drops_hop_by_hop_and_appends_proxy_headers(void **state)
{
    (void)state;
    const char in[] = "POST /s/chat/v1/x HTTP/1.1\r\n"
                      "Host: chat.example.com\r\n"
                      "Connection: keep-alive, X-Hop\r\n"
                      "X-Hop: 1\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\n"
                      "Proxy-Authorization: secret\r\nUpgrade: h2c\r\n"
                      "X-Forwarded-For: 10.0.0.1\r\nVia: 1.0 edge\r\n"
                      "X-End: 2\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "3\r\nabc\r\n0\r\n\r\n";
    struct rt_reqr r;
    rt_reqr_init(&r, MAX_HEADER, MAX_BODY);
    assert_int_equal(rt_reqr_feed(&r, in, strlen(in)), strlen(in));
    assert_int_equal(r.stage, RT_DONE);
    struct rt_buf out = {0};
    assert_int_equal(rt_req_forward(&r, "/v1/x", "127.0.0.9", "10.1.1.1:9000", &out), 0);
    assert_int_equal(rt_buf_add(&out, "", 1), 0);
    assert_string_equal(out.data, "POST /v1/x HTTP/1.1\r\n"
                                  "Host: chat.example.com\r\n"
                                  "X-End: 2\r\n"
                                  "X-Forwarded-For: 10.0.0.1, 127.0.0.9\r\n"
                                  "X-Forwarded-Host: chat.example.com\r\n"
                                  "X-Forwarded-Proto: http\r\n"
                                  "Via: 1.0 edge, 1.1 gpuorch-router\r\n"
                                  "Content-Length: 3\r\n"
                                  "\r\n"
                                  "abc");
    rt_buf_release(&out);
    rt_reqr_release(&r);

    const char bare[] = "GET /a HTTP/1.0\r\n\r\n"; /* no Host: the endpoint's */
    rt_reqr_init(&r, MAX_HEADER, MAX_BODY);
    assert_int_equal(rt_reqr_feed(&r, bare, strlen(bare)), strlen(bare));
    assert_int_equal(rt_req_forward(&r, "/a", "", "10.1.1.1:9000", &out), 0);
    assert_int_equal(rt_buf_add(&out, "", 1), 0);
    assert_string_equal(out.data, "GET /a HTTP/1.1\r\n"
                                  "X-Forwarded-Proto: http\r\n"
                                  "Via: 1.1 gpuorch-router\r\n"
                                  "Host: 10.1.1.1:9000\r\n"
                                  "\r\n");
    rt_buf_release(&out);
    rt_reqr_release(&r);
}

/* ---- answers ---- */

struct answer {
    bool head_req, client11, client_close;
};

/* Feeds a replica's bytes in pieces of `step` (0: at once), then the close
 * when `eof`; the client's bytes in *out. */
static void run_answer(struct rt_resr *r, const struct answer *a, const char *text, size_t len,
                       size_t step, bool eof, struct rt_buf *out, size_t *ret_fed)
{
    *r = (struct rt_resr){0};
    rt_resr_start(r, out, MAX_HEADER, a->head_req, a->client11, a->client_close);
    size_t at = 0;
    while (at < len) {
        size_t n = step && len - at > step ? step : len - at;
        size_t took = rt_resr_feed(r, text + at, n);
        at += took;
        if (took < n)
            break;
    }
    if (eof)
        rt_resr_eof(r);
    *ret_fed = at;
}

/* The body of a chunked message (head cut off), to compare what re-chunking
 * at different splits gives; NULL when the chunking is broken. */
static char *dechunk(const char *p, size_t *ret_len)
{
    struct rt_buf b = {0};
    for (;;) {
        char *end = NULL;
        unsigned long n = strtoul(p, &end, 16);
        if (end == p || strncmp(end, "\r\n", 2) != 0)
            return NULL;
        p = end + 2;
        if (!n)
            break;
        rt_buf_add(&b, p, n);
        p += n;
        if (strncmp(p, "\r\n", 2) != 0)
            return NULL;
        p += 2;
    }
    if (strcmp(p, "\r\n") != 0)
        return NULL;
    rt_buf_add(&b, "", 1);
    *ret_len = b.len - 1;
    return b.data;
}

static void test_an_answer_with_a_length_passes_as_it_is(void **state)
{
    (void)state;
    const char up[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n"
                      "Keep-Alive: timeout=5\r\nX-Model: m\r\nVia: 1.1 replica\r\n\r\nhello";
    struct answer a = {.client11 = true};
    for (size_t step = 0; step <= 3; step++) {
        struct rt_buf out = {0};
        struct rt_resr r;
        size_t fed = 0;
        run_answer(&r, &a, up, strlen(up), step, false, &out, &fed);
        assert_int_equal(fed, strlen(up));
        assert_int_equal(r.stage, RT_DONE);
        assert_int_equal(r.status, 200);
        assert_true(r.keep_alive);
        assert_false(r.close_out);
        rt_buf_add(&out, "", 1);
        assert_string_equal(out.data, "HTTP/1.1 200 OK\r\nX-Model: m\r\nContent-Length: 5\r\n"
                                      "Via: 1.1 replica, 1.1 gpuorch-router\r\n\r\nhello");
        rt_buf_release(&out);
        rt_resr_release(&r);
    }
}

static void test_a_chunked_answer_is_the_same_at_every_split(void **state)
{
    (void)state;
    const char up[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n"
                      "d\r\ndata: first\n\n\r\n"
                      "e;name=value\r\ndata: second\n\n\r\n"
                      "d\r\ndata: [DONE]\n\r\n"
                      "0\r\nX-Trailer: t\r\n\r\n";
    const char want_head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             "Transfer-Encoding: chunked\r\nVia: 1.1 gpuorch-router\r\n\r\n";
    const char want_body[] = "data: first\n\ndata: second\n\ndata: [DONE]\n";
    struct answer a = {.client11 = true};
    size_t len = strlen(up);
    for (size_t split = 0; split <= len; split++) {
        struct rt_buf out = {0};
        struct rt_resr r = {0};
        rt_resr_start(&r, &out, MAX_HEADER, false, true, false);
        size_t took = rt_resr_feed(&r, up, split);
        took += rt_resr_feed(&r, up + took, len - took);
        assert_int_equal(took, len);
        assert_int_equal(r.stage, RT_DONE);
        rt_buf_add(&out, "", 1);
        assert_memory_equal(out.data, want_head, strlen(want_head));
        size_t blen = 0;
        char *body = dechunk(out.data + strlen(want_head), &blen);
        assert_non_null(body);
        assert_int_equal(blen, strlen(want_body));
        assert_memory_equal(body, want_body, blen);
        free(body);
        rt_buf_release(&out);
        rt_resr_release(&r);
    }
    (void)a;
}

static void test_a_body_the_close_ends_is_chunked_or_closed_for_the_client(void **state)
{
    (void)state;
    const char up[] = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end";
    struct answer a11 = {.client11 = true}, a10 = {.client11 = false};
    struct rt_buf out = {0};
    struct rt_resr r;
    size_t fed = 0;
    run_answer(&r, &a11, up, strlen(up), 4, true, &out, &fed);
    assert_int_equal(r.stage, RT_DONE);
    assert_false(r.keep_alive);
    rt_buf_add(&out, "", 1);
    const char *body = strstr(out.data, "\r\n\r\n");
    assert_non_null(strstr(out.data, "Transfer-Encoding: chunked\r\n"));
    size_t blen = 0;
    char *got = dechunk(body + 4, &blen);
    assert_non_null(got);
    assert_string_equal(got, "until the end");
    free(got);
    rt_buf_release(&out);
    rt_resr_release(&r);

    run_answer(&r, &a10, up, strlen(up), 0, true, &out, &fed);
    assert_int_equal(r.stage, RT_DONE);
    assert_true(r.close_out);
    rt_buf_add(&out, "", 1);
    assert_string_equal(out.data, "HTTP/1.1 200 OK\r\nVia: 1.1 gpuorch-router\r\n"
                                  "Connection: close\r\n\r\nuntil the end");
    rt_buf_release(&out);
    rt_resr_release(&r);
}

static void test_head_204_and_interim_answers(void **state)
{
    (void)state;
    struct rt_buf out = {0};
    struct rt_resr r;
    size_t fed = 0;
    /* HEAD: the length is kept, no body is waited for */
    const char head[] = "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n";
    struct answer ah = {.head_req = true, .client11 = true};
    run_answer(&r, &ah, head, strlen(head), 0, false, &out, &fed);
    assert_int_equal(r.stage, RT_DONE);
    assert_true(r.keep_alive);
    rt_buf_add(&out, "", 1);
    assert_string_equal(out.data, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n"
                                  "Via: 1.1 gpuorch-router\r\n\r\n");
    rt_buf_release(&out);
    rt_resr_release(&r);
    /* 204: no body, no framing added */
    const char none[] = "HTTP/1.1 204 No Content\r\n\r\n";
    struct answer a = {.client11 = true};
    run_answer(&r, &a, none, strlen(none), 0, false, &out, &fed);
    assert_int_equal(r.stage, RT_DONE);
    rt_buf_add(&out, "", 1);
    assert_string_equal(out.data, "HTTP/1.1 204 No Content\r\nVia: 1.1 gpuorch-router\r\n\r\n");
    rt_buf_release(&out);
    rt_resr_release(&r);
    /* a 204 that claims a body: none is passed on, the rest is left */
    const char lying[] = "HTTP/1.1 204 No Content\r\nTransfer-Encoding: gzip\r\n\r\nsmuggled";
    run_answer(&r, &a, lying, strlen(lying), 0, false, &out, &fed);
    assert_int_equal(r.stage, RT_DONE);
    assert_int_equal(fed, strlen(lying) - strlen("smuggled"));
    rt_buf_add(&out, "", 1);
    assert_string_equal(out.data, "HTTP/1.1 204 No Content\r\nVia: 1.1 gpuorch-router\r\n\r\n");
    rt_buf_release(&out);
    rt_resr_release(&r);
    /* 100 then the answer: the interim one is dropped; the client closes */
    const char two[] = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n"
                       "\r\nok";
    struct answer ac = {.client11 = true, .client_close = true};
    run_answer(&r, &ac, two, strlen(two), 1, false, &out, &fed);
    assert_int_equal(r.stage, RT_DONE);
    assert_int_equal(r.status, 201);
    assert_true(r.close_out);
    rt_buf_add(&out, "", 1);
    assert_string_equal(out.data, "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n"
                                  "Via: 1.1 gpuorch-router\r\nConnection: close\r\n\r\nok");
    rt_buf_release(&out);
    rt_resr_release(&r);
}

static void test_bytes_after_the_answer_are_left(void **state)
{
    (void)state;
    const char up[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n";
    struct answer a = {.client11 = true};
    struct rt_buf out = {0};
    struct rt_resr r;
    size_t fed = 0;
    run_answer(&r, &a, up, strlen(up), 0, false, &out, &fed);
    assert_int_equal(r.stage, RT_DONE);
    assert_int_equal(fed, strlen("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"));
    rt_buf_release(&out);
    rt_resr_release(&r);
}

static const struct bad bad_answers[] = {
    {"a bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nq\r\n",
     "chunk size", 0},
    {"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
     "conflicting", 0},
    {"a length with chunked",
     "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n"
     "\r\n",
     "Transfer-Encoding", 0},
    {"a malformed length", "HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\nab",
     "malformed Content-Length", 0},
    {"a close in the middle of a length", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
     "in the middle", 1},
    {"a close in the middle of a chunk",
     "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", "in the middle", 1},
    {"a close in the middle of the head", "HTTP/1.1 200 OK\r\nContent-Le", "before it answered", 1},
    {"a close before anything", "", "before it answered", 1},
    {"an upgrade", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n",
     "switched protocols", 0},
    {"not HTTP", "SSH-2.0-OpenSSH\r\n", "", 0},
};

static void test_a_replica_that_breaks_its_answer_is_a_fault(void **state)
{
    (void)state;
    struct answer a = {.client11 = true};
    for (size_t k = 0; k < sizeof(bad_answers) / sizeof(bad_answers[0]); k++) {
        const struct bad *b = &bad_answers[k];
        for (size_t step = 0; step <= 1; step++) {
            struct rt_buf out = {0};
            struct rt_resr r;
            size_t fed = 0;
            run_answer(&r, &a, b->text, strlen(b->text), step, b->code == 1, &out, &fed);
            if (r.stage != RT_FAULT || !strstr(r.fault, b->fault))
                fail_msg("%s (step %zu): stage %d, fault '%s'", b->name, step, r.stage,
                         r.fault ? r.fault : "");
            rt_buf_release(&out);
            rt_resr_release(&r);
        }
    }
}

static void test_buffers_grow_and_print(void **state)
{
    (void)state;
    struct rt_buf b = {0};
    for (int i = 0; i < 1000; i++)
        assert_int_equal(rt_buf_printf(&b, "%04d", i), 0);
    assert_int_equal(b.len, 4000);
    assert_memory_equal(b.data + 3996, "0999", 4);
    rt_buf_release(&b);
    assert_null(b.data);
}

int main(void)
{
    http_parser_set_max_header_size(MAX_HEADER);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_request_is_the_same_at_every_split_and_byte_by_byte),
        cmocka_unit_test(test_pipelined_requests_are_taken_one_at_a_time),
        cmocka_unit_test(test_bad_framing_is_refused_with_what_is_wrong),
        cmocka_unit_test(test_a_head_over_the_bound_is_refused),
        cmocka_unit_test(test_expect_continue_is_seen_before_the_body),
        cmocka_unit_test(test_the_forwarded_request_drops_hop_by_hop_and_appends_proxy_headers),
        cmocka_unit_test(test_an_answer_with_a_length_passes_as_it_is),
        cmocka_unit_test(test_a_chunked_answer_is_the_same_at_every_split),
        cmocka_unit_test(test_a_body_the_close_ends_is_chunked_or_closed_for_the_client),
        cmocka_unit_test(test_head_204_and_interim_answers),
        cmocka_unit_test(test_bytes_after_the_answer_are_left),
        cmocka_unit_test(test_a_replica_that_breaks_its_answer_is_a_fault),
        cmocka_unit_test(test_buffers_grow_and_print),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_http_framing.c - the request framing rules (src/http/framing.h):
 * Content-Length and Transfer-Encoding fields one by one and together, and
 * the scan of a connection's first bytes (heads, pipelined requests, bodies
 * skipped, limits, folded lines). Pure: no socket. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http/framing.h"
#include "base/banned.h"

/* The verdict over fields given as "Name", "value" pairs, NULL-ended. */
static unsigned verdict_of(bool http10, ...)
{
    struct http_framing f;
    const char *msg = NULL;
    va_list ap;
    http_framing_init(&f, http10);
    va_start(ap, http10);
    for (const char *n; (n = va_arg(ap, const char *));) {
        const char *v = va_arg(ap, const char *);
        http_framing_field(&f, n, strlen(n), v, strlen(v));
    }
    va_end(ap);
    unsigned status = http_framing_verdict(&f, &msg);
    assert_true(status == 0 ? msg == NULL : msg != NULL && msg[0] != '\0');
    return status;
}

static void content_length_of_digits_passes(void **state)
{
    (void)state;
    assert_int_equal(verdict_of(false, "Content-Length", "5", NULL), 0);
    assert_int_equal(verdict_of(false, "content-length", " \t17", NULL), 0);
    assert_int_equal(verdict_of(false, "Content-Length", "0", NULL), 0);
    assert_int_equal(verdict_of(false, "Content-Length", "18446744073709551615", NULL), 0);
    assert_int_equal(verdict_of(false, "Host", "x", "X-Any", "a b c", NULL), 0);
    assert_int_equal(verdict_of(true, "Content-Length", "3", NULL), 0);
}

static void content_length_not_digits_is_400(void **state)
{
    (void)state;
    static const char *const bad[] = {"abc", "-1", "+5", "5 ", "", " ", "5, 5", "0x10", "5a"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(verdict_of(false, "Content-Length", bad[i], NULL), 400);
}

static void content_length_over_64_bits_is_413(void **state)
{
    (void)state;
    assert_int_equal(verdict_of(false, "Content-Length", "18446744073709551616", NULL), 413);
    assert_int_equal(verdict_of(false, "Content-Length", "1180591620717411303424", NULL), 413);
}

static void content_length_twice_is_400_even_equal(void **state)
{
    (void)state;
    assert_int_equal(verdict_of(false, "Content-Length", "5", "Content-Length", "7", NULL), 400);
    assert_int_equal(verdict_of(false, "Content-Length", "5", "Content-Length", "5", NULL), 400);
}

static void header_name_with_whitespace_is_400(void **state)
{
    (void)state;
    assert_int_equal(verdict_of(false, "Content-Length ", "5", NULL), 400);
    assert_int_equal(verdict_of(false, "X-A\t", "1", NULL), 400);
    assert_int_equal(verdict_of(false, "", "1", NULL), 400);
}

static void chunked_alone_passes(void **state)
{
    (void)state;
    struct http_framing f;
    http_framing_init(&f, false);
    http_framing_field(&f, "Transfer-Encoding", 17, " Chunked", 8);
    const char *msg = NULL;
    assert_int_equal(http_framing_verdict(&f, &msg), 0);
    assert_true(http_framing_chunked(&f));
}

/* libmicrohttpd would read these bodies to the connection's end, not as chunked. */
static void transfer_encoding_not_exactly_chunked_is_400(void **state)
{
    (void)state;
    assert_int_equal(verdict_of(false, "Transfer-Encoding", "chunked ", NULL), 400);
    assert_int_equal(verdict_of(false, "Transfer-Encoding", "chunked, ", NULL), 400);
    assert_int_equal(verdict_of(false, "Transfer-Encoding", ", chunked", NULL), 400);
    assert_int_equal(verdict_of(false, "Transfer-Encoding", "chunked;x=1", NULL), 400);
    assert_int_equal(
        verdict_of(false, "Transfer-Encoding", "", "Transfer-Encoding", "chunked", NULL), 400);
    assert_int_equal(
        verdict_of(false, "Transfer-Encoding", "chunked", "Transfer-Encoding", "chunked", NULL),
        400);
}

static void transfer_encoding_beside_content_length_is_400(void **state)
{
    (void)state;
    assert_int_equal(verdict_of(false, "Content-Length", "3", "Transfer-Encoding", "chunked", NULL),
                     400);
    assert_int_equal(verdict_of(false, "Transfer-Encoding", "chunked", "Content-Length", "3", NULL),
                     400);
}

static void transfer_encoding_not_chunked_last_is_400(void **state)
{
    (void)state;
    assert_int_equal(verdict_of(false, "Transfer-Encoding", "gzip", NULL), 400);
    assert_int_equal(verdict_of(false, "Transfer-Encoding", "chunked, gzip", NULL), 400);
    assert_int_equal(
        verdict_of(false, "Transfer-Encoding", "chunked", "Transfer-Encoding", "gzip", NULL), 400);
    assert_int_equal(verdict_of(false, "Transfer-Encoding", "", NULL), 400);
    assert_int_equal(verdict_of(false, "Transfer-Encoding", "chunked, chunked", NULL), 400);
}

static void coding_before_chunked_is_501(void **state)
{
    (void)state;
    assert_int_equal(verdict_of(false, "Transfer-Encoding", "gzip, chunked", NULL), 501);
}

static void transfer_encoding_in_http10_is_400(void **state)
{
    (void)state;
    assert_int_equal(verdict_of(true, "Transfer-Encoding", "chunked", NULL), 400);
}

/* ---- the scan ---- */

static enum http_scan scan(const char *s, bool eof, unsigned *ret_status)
{
    struct http_scan_refusal r = {0};
    enum http_scan v = http_framing_scan(s, strlen(s), eof, &r);
    *ret_status = v == HTTP_SCAN_REFUSE ? r.status : 0;
    return v;
}

static void scan_waits_for_the_whole_first_head(void **state)
{
    (void)state;
    unsigned st;
    assert_int_equal(scan("", false, &st), HTTP_SCAN_PASS);
    assert_int_equal(scan("GET / HTTP/1.1\r\nHost: x\r\n", false, &st), HTTP_SCAN_MORE);
    assert_int_equal(scan("GET / HTTP/1.1\r\nHost: x\r\n\r\n", false, &st), HTTP_SCAN_PASS);
    /* the client sent all it will: MHD's to answer */
    assert_int_equal(scan("GET / HTTP/1.1\r\nHost: x\r\n", true, &st), HTTP_SCAN_PASS);
}

static void scan_refuses_a_bad_first_request(void **state)
{
    (void)state;
    unsigned st;
    assert_int_equal(scan("POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", false, &st),
                     HTTP_SCAN_REFUSE);
    assert_int_equal(st, 400);
    assert_int_equal(scan("POST / HTTP/1.1\nContent-Length: 5 \n\n", false, &st), HTTP_SCAN_REFUSE);
    assert_int_equal(st, 400);
    assert_int_equal(
        scan("\r\nPOST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", false, &st),
        HTTP_SCAN_REFUSE);
    assert_int_equal(st, 413);
}

static void scan_names_the_refused_request(void **state)
{
    (void)state;
    const char *s = "POST /v1/jobs?x=1 HTTP/1.1\r\nContent-Length: -1\r\n\r\n";
    struct http_scan_refusal r = {0};
    assert_int_equal(http_framing_scan(s, strlen(s), false, &r), HTTP_SCAN_REFUSE);
    assert_string_equal(r.method, "POST");
    assert_string_equal(r.path, "/v1/jobs");
    assert_non_null(strstr(r.message, "Content-Length"));
}

static void scan_refuses_folded_lines(void **state)
{
    (void)state;
    unsigned st;
    assert_int_equal(scan("GET / HTTP/1.1\r\nX-A: 1\r\n 2\r\n\r\n", false, &st), HTTP_SCAN_REFUSE);
    assert_int_equal(st, 400);
    assert_int_equal(scan("GET / HTTP/1.1\r\nNo colon here\r\n\r\n", false, &st), HTTP_SCAN_REFUSE);
}

static void scan_leaves_other_request_lines_to_mhd(void **state)
{
    (void)state;
    unsigned st;
    assert_int_equal(scan("GET /\r\n\r\n", false, &st), HTTP_SCAN_PASS);
    assert_int_equal(scan("GET\r\nContent-Length: abc\r\n\r\n", false, &st), HTTP_SCAN_PASS);
}

/* libmicrohttpd reads these request lines and then their fields: so do we. */
static void scan_checks_fields_of_lenient_request_lines(void **state)
{
    (void)state;
    unsigned st;
    assert_int_equal(scan("GET  /v1/jobs HTTP/1.1\r\nContent-Length: abc\r\n\r\n", false, &st),
                     HTTP_SCAN_REFUSE);
    assert_int_equal(st, 400);
    assert_int_equal(scan("GET /v1/jobs HTTP/1.2\r\nContent-Length: abc\r\n\r\n", false, &st),
                     HTTP_SCAN_REFUSE);
    assert_int_equal(scan("GET / HTTP/2.0\r\nContent-Length: abc\r\n\r\n", false, &st),
                     HTTP_SCAN_REFUSE);
    assert_int_equal(scan("GET /a b HTTP/1.1\r\nContent-Length: 5 \r\n\r\n", false, &st),
                     HTTP_SCAN_REFUSE);
    assert_int_equal(
        scan("GET  /v1/jobs HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", false, &st),
        HTTP_SCAN_REFUSE);
    assert_int_equal(scan("GET  /v1/jobs HTTP/1.1\r\nContent-Length: 0\r\n\r\n", false, &st),
                     HTTP_SCAN_PASS);
}

static void scan_checks_pipelined_heads_after_bodies(void **state)
{
    (void)state;
    unsigned st;
    /* the body holds what looks like a bad field: it is skipped, not read */
    assert_int_equal(scan("POST / HTTP/1.1\r\nContent-Length: 20\r\n\r\nContent-Length: abc\n"
                          "GET / HTTP/1.1\r\n\r\n",
                          false, &st),
                     HTTP_SCAN_PASS);
    assert_int_equal(
        scan("GET / HTTP/1.1\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: x\r\n\r\n", false, &st),
        HTTP_SCAN_REFUSE);
    assert_int_equal(st, 400);
    /* a later head begun, or a stray CRLF after a body, is not waited for (the
     * access callback checks it); the rest after a chunked body is MHD's */
    assert_int_equal(scan("GET / HTTP/1.1\r\n\r\nPOST / HTTP/1.1\r\nContent-Le", false, &st),
                     HTTP_SCAN_PASS);
    assert_int_equal(scan("POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}\r\n", false, &st),
                     HTTP_SCAN_PASS);
    assert_int_equal(scan("GET / HTTP/1.1\r\n\r\nPOST / HTTP/1.1\r\nContent-Le", true, &st),
                     HTTP_SCAN_PASS);
    assert_int_equal(scan("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                          "POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
                          false, &st),
                     HTTP_SCAN_PASS);
}

static void scan_limits_the_first_head(void **state)
{
    (void)state;
    size_t n = HTTP_HEAD_MAX + 16;
    char *buf = malloc(n + 1);
    assert_non_null(buf);
    struct http_scan_refusal r = {0};
    memset(buf, 'a', n);
    memcpy(buf, "GET /", 5);
    assert_int_equal(http_framing_scan(buf, n, false, &r), HTTP_SCAN_REFUSE);
    assert_int_equal(r.status, 414);
    memcpy(buf, "GET / HTTP/1.1\r\nX: ", 19);
    assert_int_equal(http_framing_scan(buf, n, false, &r), HTTP_SCAN_REFUSE);
    assert_int_equal(r.status, 431);
    assert_int_equal(http_framing_scan(buf, HTTP_HEAD_MAX - 1, false, &r), HTTP_SCAN_MORE);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(content_length_of_digits_passes),
        cmocka_unit_test(content_length_not_digits_is_400),
        cmocka_unit_test(content_length_over_64_bits_is_413),
        cmocka_unit_test(content_length_twice_is_400_even_equal),
        cmocka_unit_test(header_name_with_whitespace_is_400),
        cmocka_unit_test(chunked_alone_passes),
        cmocka_unit_test(transfer_encoding_not_exactly_chunked_is_400),
        cmocka_unit_test(transfer_encoding_beside_content_length_is_400),
        cmocka_unit_test(transfer_encoding_not_chunked_last_is_400),
        cmocka_unit_test(coding_before_chunked_is_501),
        cmocka_unit_test(transfer_encoding_in_http10_is_400),
        cmocka_unit_test(scan_waits_for_the_whole_first_head),
        cmocka_unit_test(scan_refuses_a_bad_first_request),
        cmocka_unit_test(scan_names_the_refused_request),
        cmocka_unit_test(scan_refuses_folded_lines),
        cmocka_unit_test(scan_leaves_other_request_lines_to_mhd),
        cmocka_unit_test(scan_checks_fields_of_lenient_request_lines),
        cmocka_unit_test(scan_checks_pipelined_heads_after_bodies),
        cmocka_unit_test(scan_limits_the_first_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

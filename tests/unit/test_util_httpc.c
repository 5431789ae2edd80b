/* test_util_httpc.c - the libcurl client against a loopback server (src/http
 * on 127.0.0.1, port 0): statuses and bodies both ways, the bearer token,
 * keep-alive across requests, a timeout, a refused connection, a streamed
 * body stopped by its callback, and percent-encoding. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "http/http.h"
#include "util/httpc.h"
#include "base/banned.h"

static int h_echo(struct http_request *req, void *ctx)
{
    (void)ctx;
    size_t len = 0;
    http_request_body(req, &len);
    const char *tok = http_request_bearer(req);
    return http_request_respond_json(req, 200,
                                     json_pack("{s:s, s:I, s:s?, s:s?}", "method",
                                               http_request_method(req), "len", (json_int_t)len,
                                               "token", tok, "key",
                                               http_request_header(req, "Idempotency-Key")));
}

static int h_missing(struct http_request *req, void *ctx)
{
    (void)ctx;
    return http_request_error(req, 404, "not_found", "no such thing");
}

static void slow_timeout(struct http_request *req, void *ctx)
{
    (void)ctx;
    http_request_complete(req, 204, NULL);
}

/* Answers after 600 ms: longer than the client's timeout in the test. */
static int h_slow(struct http_request *req, void *ctx)
{
    (void)ctx;
    return http_request_suspend(req, 600, slow_timeout, NULL);
}

static char big[256 * 1024];

static int h_big(struct http_request *req, void *ctx)
{
    (void)ctx;
    return http_request_respond_static(req, 200, "text/plain", big, sizeof(big));
}

static const struct http_route routes[] = {
    {"GET", "/echo", h_echo, 0},
    {"POST", "/echo", h_echo, HTTP_ROUTE_RAW_BODY},
    {"PUT", "/echo", h_echo, HTTP_ROUTE_RAW_BODY},
    {"GET", "/missing", h_missing, 0},
    {"GET", "/slow", h_slow, 0},
    {"GET", "/big", h_big, 0},
};

struct env {
    struct http_server *srv;
    char base[64];
};

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    struct http_config cfg = {
        .bind_addr = "127.0.0.1", .routes = routes, .nroutes = sizeof(routes) / sizeof(routes[0])};
    char err[256];
    if (!e || http_server_new(&cfg, &e->srv, err, sizeof(err)) ||
        http_server_start(e->srv, err, sizeof(err)))
        return -1;
    snprintf(e->base, sizeof(e->base), "http://127.0.0.1:%u", http_server_port(e->srv));
    for (size_t k = 0; k < sizeof(big); k++)
        big[k] = (char)('a' + k % 26);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    http_server_free(e->srv);
    free(e);
    return 0;
}

static void answers_carry_status_body_and_token(void **state)
{
    struct env *e = *state;
    struct httpc *c;
    char err[512];
    assert_int_equal(httpc_new(e->base, "tok_123", &c, err, sizeof(err)), 0);
    struct httpc_response r = {0};
    assert_int_equal(httpc_request(c, "POST", "/echo", "{\"a\":1}", 7, 5000, &r, err, sizeof(err)),
                     0);
    assert_int_equal(r.status, 200);
    json_t *o = json_loadb(r.body, r.len, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(o, "method")), "POST");
    assert_int_equal(json_integer_value(json_object_get(o, "len")), 7);
    assert_string_equal(json_string_value(json_object_get(o, "token")), "tok_123");
    json_decref(o);
    httpc_response_release(&r);
    /* A POST without a body, and a 404 that is still an answer. */
    assert_int_equal(httpc_request(c, "POST", "/echo", NULL, 0, 5000, &r, err, sizeof(err)), 0);
    assert_int_equal(r.status, 200);
    httpc_response_release(&r);
    assert_int_equal(httpc_request(c, "GET", "/missing", NULL, 0, 5000, &r, err, sizeof(err)), 0);
    assert_int_equal(r.status, 404);
    assert_non_null(strstr(r.body, "not_found"));
    httpc_response_release(&r);
    /* The token can change; NULL sends none. */
    assert_int_equal(httpc_set_token(c, NULL), 0);
    assert_int_equal(httpc_request(c, "GET", "/echo", NULL, 0, 5000, &r, err, sizeof(err)), 0);
    o = json_loadb(r.body, r.len, 0, NULL);
    assert_true(json_is_null(json_object_get(o, "token")) || !json_object_get(o, "token"));
    json_decref(o);
    httpc_response_release(&r);
    assert_int_equal(httpc_set_token(c, "bad\ntoken"), GPO_EINVAL);
    /* One extra header, on every request until cleared. */
    assert_int_equal(httpc_set_header(c, "Idempotency-Key", "k-1"), 0);
    assert_int_equal(httpc_request(c, "GET", "/echo", NULL, 0, 5000, &r, err, sizeof(err)), 0);
    o = json_loadb(r.body, r.len, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(o, "key")), "k-1");
    json_decref(o);
    httpc_response_release(&r);
    assert_int_equal(httpc_set_header(c, NULL, NULL), 0);
    assert_int_equal(httpc_request(c, "GET", "/echo", NULL, 0, 5000, &r, err, sizeof(err)), 0);
    o = json_loadb(r.body, r.len, 0, NULL);
    assert_null(json_string_value(json_object_get(o, "key")));
    json_decref(o);
    httpc_response_release(&r);
    assert_int_equal(httpc_set_header(c, "Bad Name", "v"), GPO_EINVAL);
    assert_int_equal(httpc_set_header(c, "X-Ok", "a\r\nInjected: 1"), GPO_EINVAL);
    httpc_free(c);
}

static void a_large_body_arrives_whole(void **state)
{
    struct env *e = *state;
    struct httpc *c;
    assert_int_equal(httpc_new(e->base, NULL, &c, NULL, 0), 0);
    struct httpc_response r = {0};
    assert_int_equal(httpc_request(c, "GET", "/big", NULL, 0, 5000, &r, NULL, 0), 0);
    assert_int_equal(r.len, sizeof(big));
    assert_memory_equal(r.body, big, sizeof(big));
    httpc_response_release(&r);
    httpc_free(c);
}

static void a_slow_answer_times_out(void **state)
{
    struct env *e = *state;
    struct httpc *c;
    char err[512];
    assert_int_equal(httpc_new(e->base, NULL, &c, NULL, 0), 0);
    struct httpc_response r = {0};
    assert_int_equal(httpc_request(c, "GET", "/slow", NULL, 0, 200, &r, err, sizeof(err)),
                     GPO_ETIMEDOUT);
    assert_non_null(strstr(err, "/slow"));
    /* The client is usable afterwards; waiting the whole answer out also
     * lets the server complete the first request (its suspend must end). */
    assert_int_equal(httpc_request(c, "GET", "/slow", NULL, 0, 5000, &r, err, sizeof(err)), 0);
    assert_int_equal(r.status, 204);
    httpc_response_release(&r);
    httpc_free(c);
}

static void a_refused_connection_is_econnect(void **state)
{
    (void)state;
    /* Port 1 on loopback: nothing listens there for an unprivileged test,
     * and root's tests do not run a service on it either. */
    struct httpc *c;
    char err[512];
    assert_int_equal(httpc_new("http://127.0.0.1:1", NULL, &c, NULL, 0), 0);
    struct httpc_response r = {0};
    assert_int_equal(httpc_request(c, "GET", "/", NULL, 0, 2000, &r, err, sizeof(err)),
                     GPO_ECONNREFUSED);
    assert_non_null(strstr(err, "127.0.0.1:1"));
    httpc_free(c);
}

struct count {
    size_t bytes, calls;
    size_t stop_after;
    const long *status; /* httpc_stream's: known before the first piece of the body */
    bool status_early;
};

static int on_data(const void *data, size_t len, void *ctx)
{
    (void)data;
    struct count *k = ctx;
    if (len && !k->bytes)
        k->status_early = k->status && *k->status == 200;
    k->bytes += len;
    k->calls++;
    return k->stop_after && k->bytes >= k->stop_after;
}

static void a_stream_delivers_every_byte_or_stops_when_told(void **state)
{
    struct env *e = *state;
    struct httpc *c;
    assert_int_equal(httpc_new(e->base, NULL, &c, NULL, 0), 0);
    long status = 0;
    struct count k = {.status = &status};
    assert_int_equal(httpc_stream(c, "/big", 5000, on_data, &k, &status, NULL, 0), 0);
    assert_int_equal(status, 200);
    assert_int_equal(k.bytes, sizeof(big));
    assert_true(k.status_early);
    k = (struct count){.stop_after = 1};
    assert_int_equal(httpc_stream(c, "/big", 5000, on_data, &k, &status, NULL, 0), GPO_ECANCELED);
    assert_true(k.bytes < sizeof(big));
    httpc_free(c);
}

static void bad_urls_and_escapes(void **state)
{
    (void)state;
    struct httpc *c = NULL;
    char err[256];
    assert_int_equal(httpc_new("ftp://x", NULL, &c, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "ftp://x"));
    assert_int_equal(httpc_new("http://x", "a\rb", &c, err, sizeof(err)), GPO_EINVAL);
    assert_null(c);
    char buf[32];
    assert_int_equal(httpc_escape("gpu-01.a_b~", buf, sizeof(buf)), 0);
    assert_string_equal(buf, "gpu-01.a_b~");
    assert_int_equal(httpc_escape("a b/c%", buf, sizeof(buf)), 0);
    assert_string_equal(buf, "a%20b%2Fc%25");
    assert_int_equal(httpc_escape("0123456789", buf, 8), GPO_E2BIG);
    assert_string_equal(buf, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(answers_carry_status_body_and_token),
        cmocka_unit_test(a_large_body_arrives_whole),
        cmocka_unit_test(a_slow_answer_times_out),
        cmocka_unit_test(a_refused_connection_is_econnect),
        cmocka_unit_test(a_stream_delivers_every_byte_or_stops_when_told),
        cmocka_unit_test(bad_urls_and_escapes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

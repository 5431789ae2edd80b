/* test_util_httpc.c - the libcurl client against a loopback server (src/http
 * on 127.0.0.1, port 0): statuses and bodies both ways, the bearer token,
 * keep-alive across requests, a timeout, a refused connection, a streamed
 * body stopped by its callback, and percent-encoding. Lists of addresses:
 * their parsing and the choice of each try's address (httpc_int.h, no
 * network), then stand-in controllers on loopback (a leader, a follower
 * redirecting to it, a follower refusing with 503, a slow one). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "http/http.h"
#include "util/httpc.h"
#include "util/httpc_int.h"
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

/* ---- lists of addresses, without a network ---------------------------------------- */

static void a_list_is_parsed_in_order_blanks_and_slashes_dropped(void **state)
{
    (void)state;
    static struct httpc_addrs a;
    char err[256];
    assert_int_equal(
        httpc_addrs_parse(&a, "http://a:1/, https://b:2 ,http://c:3/base//", err, sizeof(err)), 0);
    assert_int_equal(httpc_addrs_count(&a), 3);
    assert_string_equal(httpc_addrs_at(&a, 0), "http://a:1");
    assert_string_equal(httpc_addrs_at(&a, 1), "https://b:2");
    assert_string_equal(httpc_addrs_at(&a, 2), "http://c:3/base");
    assert_int_equal(httpc_addrs_parse(&a, "http://only:1", err, sizeof(err)), 0);
    assert_int_equal(httpc_addrs_count(&a), 1);
    assert_string_equal(httpc_addrs_at(&a, 0), "http://only:1");
}

static void a_bad_list_names_its_bad_entry(void **state)
{
    (void)state;
    static const struct {
        const char *list, *message;
        size_t index;
    } cases[] = {
        {"http://a:1,ftp://b:2",
         "URL 'ftp://b:2' (entry 2 of 2): expected http://HOST:PORT or "
         "https://HOST:PORT",
         2},
        {"http://a:1,,http://c:3", "URL '' (entry 2 of 3): an empty entry", 2},
        {"http://a:1,", "URL '' (entry 2 of 2): an empty entry", 2},
        {"a:1, http://b:2",
         "URL 'a:1' (entry 1 of 2): expected http://HOST:PORT or "
         "https://HOST:PORT",
         1},
        {"http://a b:1,http://c",
         "URL 'http://a b:1' (entry 1 of 2): expected http://HOST:PORT or "
         "https://HOST:PORT",
         1},
        {"http://", "URL 'http://': expected http://HOST:PORT or https://HOST:PORT", 1},
        {"localhost:8080", "URL 'localhost:8080': expected http://HOST:PORT or https://HOST:PORT",
         1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        static struct httpc_addrs a;
        char err[256];
        struct httpc_urls_fault f;
        assert_int_equal(httpc_urls_check(cases[i].list, &f), GPO_EINVAL);
        assert_int_equal(f.index, cases[i].index);
        assert_int_equal(httpc_addrs_parse(&a, cases[i].list, err, sizeof(err)), GPO_EINVAL);
        assert_string_equal(err, cases[i].message);
        struct httpc *c = NULL;
        assert_int_equal(httpc_new(cases[i].list, NULL, &c, err, sizeof(err)), GPO_EINVAL);
        assert_string_equal(err, cases[i].message);
        assert_null(c);
    }
    char many[HTTPC_URL_MAX] = "";
    for (int i = 0; i < 17; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%shttp://h%d", i ? "," : "", i);
    struct httpc_urls_fault f;
    assert_int_equal(httpc_urls_check(many, &f), GPO_EINVAL);
    assert_string_equal(f.why, "more than 16 addresses");
    char longer[HTTPC_URL_MAX + 1];
    memset(longer, 'x', sizeof(longer) - 1);
    memcpy(longer, "http://", 7);
    longer[sizeof(longer) - 1] = '\0';
    assert_int_equal(httpc_urls_check(longer, &f), GPO_EINVAL);
    assert_string_equal(f.why, "the list is over 1023 bytes");
    assert_int_equal(httpc_urls_check("http://a:1, https://b", NULL), 0);
}

static const struct httpc_try UNSENT = {.kind = HTTPC_TRY_UNSENT};
static const struct httpc_try BROKEN = {.kind = HTTPC_TRY_BROKEN};
static const struct httpc_try OK200 = {.kind = HTTPC_TRY_ANSWER, .status = 200};
static const struct httpc_try REFUSED = {.kind = HTTPC_TRY_ANSWER, .status = 503, .follower = true};

static void unreachable_addresses_are_passed_once_round_the_list(void **state)
{
    (void)state;
    static struct httpc_addrs a;
    struct httpc_round r;
    assert_int_equal(httpc_addrs_parse(&a, "http://a,http://b,http://c", NULL, 0), 0);
    httpc_round_begin(&a, &r);
    assert_int_equal(r.idx, 0);
    assert_true(httpc_round_step(&a, &r, &UNSENT, "/x"));
    assert_int_equal(r.idx, 1);
    assert_true(httpc_round_step(&a, &r, &UNSENT, "/x"));
    assert_int_equal(r.idx, 2);
    assert_false(httpc_round_step(&a, &r, &UNSENT, "/x")); /* one round only */
    assert_int_equal(a.cur, 0);                            /* nobody answered */
    /* b answers: it is current from now on. */
    httpc_round_begin(&a, &r);
    assert_true(httpc_round_step(&a, &r, &UNSENT, "/x"));
    assert_false(httpc_round_step(&a, &r, &OK200, "/x"));
    assert_int_equal(a.cur, 1);
    httpc_round_begin(&a, &r);
    assert_int_equal(r.idx, 1);
    /* A single address: no second try. */
    assert_int_equal(httpc_addrs_parse(&a, "http://a", NULL, 0), 0);
    httpc_round_begin(&a, &r);
    assert_false(httpc_round_again(&a, &r, &UNSENT, "/x"));
    assert_false(httpc_round_step(&a, &r, &UNSENT, "/x"));
    /* Out of time: no further try either. */
    assert_int_equal(httpc_addrs_parse(&a, "http://a,http://b", NULL, 0), 0);
    httpc_round_begin(&a, &r);
    r.no_more = true;
    assert_false(httpc_round_step(&a, &r, &UNSENT, "/x"));
}

static void a_request_broken_once_sent_is_not_resent_but_the_next_moves_on(void **state)
{
    (void)state;
    static struct httpc_addrs a;
    struct httpc_round r;
    assert_int_equal(httpc_addrs_parse(&a, "http://a,http://b", NULL, 0), 0);
    httpc_round_begin(&a, &r);
    assert_false(httpc_round_again(&a, &r, &BROKEN, "/v1/jobs"));
    assert_false(httpc_round_step(&a, &r, &BROKEN, "/v1/jobs"));
    assert_int_equal(a.cur, 0); /* messages still name the one that broke */
    httpc_round_begin(&a, &r);
    assert_int_equal(r.idx, 1);
    assert_false(a.advance);
}

static void followers_refusals_are_passed_until_the_last_answer(void **state)
{
    (void)state;
    static struct httpc_addrs a;
    struct httpc_round r;
    assert_int_equal(httpc_addrs_parse(&a, "http://f1,http://f2,http://l", NULL, 0), 0);
    httpc_round_begin(&a, &r);
    assert_true(httpc_round_step(&a, &r, &REFUSED, "/x"));
    assert_int_equal(r.kept_at, 0);
    assert_true(httpc_round_step(&a, &r, &REFUSED, "/x"));
    assert_int_equal(r.kept_at, 1);
    assert_false(httpc_round_step(&a, &r, &OK200, "/x"));
    assert_int_equal(a.cur, 2);
    assert_int_equal(r.kept_at, SIZE_MAX);
    /* Every one a follower: the third's 503 is the outcome. */
    a.cur = 0;
    httpc_round_begin(&a, &r);
    assert_true(httpc_round_step(&a, &r, &REFUSED, "/x"));
    assert_true(httpc_round_step(&a, &r, &REFUSED, "/x"));
    assert_false(httpc_round_step(&a, &r, &REFUSED, "/x"));
    assert_int_equal(a.cur, 2);
    /* A follower, then two down: the follower's answer (kept) is the outcome. */
    a.cur = 0;
    httpc_round_begin(&a, &r);
    assert_true(httpc_round_step(&a, &r, &REFUSED, "/x"));
    assert_true(httpc_round_step(&a, &r, &UNSENT, "/x"));
    assert_false(httpc_round_step(&a, &r, &UNSENT, "/x"));
    assert_int_equal(r.kept_at, 0);
    assert_int_equal(a.cur, 0);
    /* A 503 without the role header is an answer like any other. */
    struct httpc_try plain = {.kind = HTTPC_TRY_ANSWER, .status = 503};
    httpc_round_begin(&a, &r);
    assert_false(httpc_round_step(&a, &r, &plain, "/x"));
}

static void a_redirect_to_another_origin_is_learned_and_followed(void **state)
{
    (void)state;
    static struct httpc_addrs a;
    struct httpc_round r;
    assert_int_equal(httpc_addrs_parse(&a, "http://f:1,http://g:2", NULL, 0), 0);
    httpc_round_begin(&a, &r);
    struct httpc_try t = {
        .kind = HTTPC_TRY_ANSWER, .status = 307, .location = "http://leader:9/gpo/v1/jobs?x=1"};
    assert_true(httpc_round_again(&a, &r, &t, "/v1/jobs?x=1"));
    assert_true(httpc_round_step(&a, &r, &t, "/v1/jobs?x=1"));
    assert_int_equal(httpc_addrs_count(&a), 3);
    assert_string_equal(httpc_addrs_at(&a, r.idx), "http://leader:9/gpo"); /* its base kept */
    assert_int_equal(r.hops, 1);
    assert_false(httpc_round_step(&a, &r, &OK200, "/v1/jobs?x=1"));
    assert_int_equal(a.cur, 2);
    /* A Location not ending with the path: its origin. The same one again:
     * not learned twice. */
    a.cur = 0;
    httpc_round_begin(&a, &r);
    t.status = 308;
    t.location = "http://leader:9/gpo/elsewhere";
    assert_true(httpc_round_step(&a, &r, &t, "/v1/jobs"));
    assert_string_equal(httpc_addrs_at(&a, r.idx), "http://leader:9");
    t.location = "http://leader:9/v1/jobs";
    a.cur = 1;
    httpc_round_begin(&a, &r);
    assert_true(httpc_round_step(&a, &r, &t, "/v1/jobs"));
    assert_int_equal(httpc_addrs_count(&a), 4);
    assert_int_equal(r.idx, 3);
}

static void redirects_that_are_not_followed(void **state)
{
    (void)state;
    static struct httpc_addrs a;
    struct httpc_round r;
    assert_int_equal(httpc_addrs_parse(&a, "https://f:1,http://g:2", NULL, 0), 0);
    httpc_round_begin(&a, &r);
    static const char *const refused[] = {
        "https://F:1/v1/x", /* the same origin: a loop */
        "http://l:3/v1/x",  /* https to http */
        "ftp://l:3/v1/x",
        "https:///v1/x",
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        struct httpc_try t = {.kind = HTTPC_TRY_ANSWER, .status = 307, .location = refused[i]};
        assert_false(httpc_round_again(&a, &r, &t, "/v1/x"));
    }
    struct httpc_try t = {.kind = HTTPC_TRY_ANSWER, .status = 302, .location = "https://l:3/v1/x"};
    assert_false(httpc_round_again(&a, &r, &t, "/v1/x")); /* 302 may turn a POST into a GET */
    t.status = 307;
    t.location = NULL;
    assert_false(httpc_round_again(&a, &r, &t, "/v1/x"));
    /* At most HTTPC_HOPS_MAX hops (redirects between followers). */
    for (unsigned i = 0; i < HTTPC_HOPS_MAX; i++) {
        char loc[64];
        snprintf(loc, sizeof(loc), "https://hop%u:1/v1/x", i);
        t.location = loc;
        assert_true(httpc_round_step(&a, &r, &t, "/v1/x"));
    }
    t.location = "https://hop9:1/v1/x";
    assert_false(httpc_round_step(&a, &r, &t, "/v1/x"));
    /* Learned addresses are HTTPC_LEARNED_MAX at most: the oldest goes. */
    assert_int_equal(httpc_addrs_count(&a), 2 + HTTPC_LEARNED_MAX);
    httpc_round_begin(&a, &r);
    t.location = "https://new:1/v1/x";
    assert_true(httpc_round_step(&a, &r, &t, "/v1/x"));
    assert_int_equal(httpc_addrs_count(&a), 2 + HTTPC_LEARNED_MAX);
    assert_string_equal(httpc_addrs_at(&a, 2), "https://new:1");
    assert_string_equal(httpc_addrs_at(&a, 3), "https://hop1:1");
}

/* ---- stand-in controllers on loopback -------------------------------------------- */

enum stub_role { STUB_LEADER, STUB_REDIRECT, STUB_REFUSE, STUB_SLOW };

struct stub {
    enum stub_role role;
    struct http_server *srv;
    char base[64];
    char leader[64]; /* STUB_REDIRECT's Location */
    atomic_int requests;
};

static void stub_slow_timeout(struct http_request *req, void *ctx)
{
    (void)ctx;
    http_request_complete(req, 204, NULL);
}

static int h_stub(struct http_request *req, void *ctx)
{
    struct stub *s = ctx;
    atomic_fetch_add(&s->requests, 1);
    char loc[128];
    size_t len = 0;
    http_request_body(req, &len);
    switch (s->role) {
    case STUB_REDIRECT:
        snprintf(loc, sizeof(loc), "%s%s", s->leader, http_request_path(req));
        http_request_add_header(req, "Location", loc);
        http_request_add_header(req, "X-Gpuorch-Role", "follower");
        return http_request_respond_json(req, 307, json_pack("{s:s}", "error", "not the leader"));
    case STUB_REFUSE:
        http_request_add_header(req, "Retry-After", "1");
        http_request_add_header(req, "X-Gpuorch-Role", "follower");
        return http_request_respond_json(req, 503, json_pack("{s:s}", "error", "no leader yet"));
    case STUB_SLOW:
        return http_request_suspend(req, 600, stub_slow_timeout, NULL);
    case STUB_LEADER:
    default:
        return http_request_respond_json(req, 200,
                                         json_pack("{s:s, s:s, s:I}", "at", s->base, "method",
                                                   http_request_method(req), "len",
                                                   (json_int_t)len));
    }
}

static const struct http_route stub_routes[] = {
    {"GET", "/x", h_stub, 0},
    {"POST", "/x", h_stub, HTTP_ROUTE_RAW_BODY},
};

static struct stub *stub_start(enum stub_role role, const struct stub *leader)
{
    struct stub *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->role = role;
    if (leader)
        snprintf(s->leader, sizeof(s->leader), "%s", leader->base);
    struct http_config cfg = {.bind_addr = "127.0.0.1",
                              .routes = stub_routes,
                              .nroutes = sizeof(stub_routes) / sizeof(stub_routes[0]),
                              .ctx = s};
    char err[256];
    assert_int_equal(http_server_new(&cfg, &s->srv, err, sizeof(err)), 0);
    assert_int_equal(http_server_start(s->srv, err, sizeof(err)), 0);
    snprintf(s->base, sizeof(s->base), "http://127.0.0.1:%u", http_server_port(s->srv));
    return s;
}

static void stub_stop(struct stub *s)
{
    http_server_free(s->srv);
    free(s);
}

/* What a stream's callback was given. */
struct collect {
    char buf[1024];
    size_t len;
};

static int collect(const void *data, size_t len, void *ctx)
{
    struct collect *k = ctx;
    if (len && k->len + len < sizeof(k->buf)) {
        memcpy(k->buf + k->len, data, len);
        k->len += len;
        k->buf[k->len] = '\0';
    }
    return 0;
}

/* Port 1 on loopback refuses (see a_refused_connection_is_econnect). */
static const char *const DEAD = "http://127.0.0.1:1";

static void a_list_reaches_the_leader_past_the_dead_and_the_followers(void **state)
{
    (void)state;
    struct stub *leader = stub_start(STUB_LEADER, NULL);
    struct stub *redirect = stub_start(STUB_REDIRECT, leader);
    struct stub *refuse = stub_start(STUB_REFUSE, NULL);
    char list[512], err[512];
    snprintf(list, sizeof(list), "%s,%s,%s", DEAD, refuse->base, redirect->base);
    struct httpc *c;
    assert_int_equal(httpc_new(list, "tok", &c, err, sizeof(err)), 0);
    assert_string_equal(httpc_url(c), DEAD);
    struct httpc_response r = {0};
    assert_int_equal(httpc_request(c, "POST", "/x", "{\"a\":1}", 7, 5000, &r, err, sizeof(err)), 0);
    assert_int_equal(r.status, 200);
    assert_false(r.follower);
    json_t *o = json_loadb(r.body, r.len, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(o, "at")), leader->base);
    assert_string_equal(json_string_value(json_object_get(o, "method")), "POST");
    assert_int_equal(json_integer_value(json_object_get(o, "len")), 7); /* the body resent */
    json_decref(o);
    httpc_response_release(&r);
    assert_string_equal(httpc_url(c), leader->base);
    /* Each was asked once; the leader is current now, and the next request
     * goes straight to it. */
    assert_int_equal(atomic_load(&refuse->requests), 1);
    assert_int_equal(atomic_load(&redirect->requests), 1);
    assert_int_equal(atomic_load(&leader->requests), 1);
    assert_int_equal(httpc_request(c, "GET", "/x", NULL, 0, 5000, &r, err, sizeof(err)), 0);
    assert_int_equal(r.status, 200);
    httpc_response_release(&r);
    assert_int_equal(atomic_load(&refuse->requests), 1);
    assert_int_equal(atomic_load(&redirect->requests), 1);
    assert_int_equal(atomic_load(&leader->requests), 2);
    /* A stream follows the same way, and only the leader's body reaches
     * the callback. */
    httpc_free(c);
    assert_int_equal(httpc_new(list, NULL, &c, err, sizeof(err)), 0);
    struct collect k = {0};
    long status = 0;
    assert_int_equal(httpc_stream(c, "/x", 5000, collect, &k, &status, err, sizeof(err)), 0);
    assert_int_equal(status, 200);
    assert_non_null(strstr(k.buf, leader->base));
    assert_null(strstr(k.buf, "not the leader"));
    assert_null(strstr(k.buf, "no leader yet"));
    assert_int_equal(atomic_load(&leader->requests), 3);
    httpc_free(c);
    stub_stop(refuse);
    stub_stop(redirect);
    stub_stop(leader);
}

static void when_every_address_is_a_follower_or_down_the_last_answer_comes_back(void **state)
{
    (void)state;
    struct stub *f1 = stub_start(STUB_REFUSE, NULL);
    struct stub *f2 = stub_start(STUB_REFUSE, NULL);
    char list[512], err[512];
    snprintf(list, sizeof(list), "%s,%s,%s", f1->base, f2->base, DEAD);
    struct httpc *c;
    assert_int_equal(httpc_new(list, NULL, &c, err, sizeof(err)), 0);
    struct httpc_response r = {0};
    assert_int_equal(httpc_request(c, "POST", "/x", "{}", 2, 5000, &r, err, sizeof(err)), 0);
    assert_int_equal(r.status, 503);
    assert_true(r.follower);
    assert_non_null(strstr(r.body, "no leader yet"));
    assert_string_equal(httpc_url(c), f2->base); /* the one that answered last */
    httpc_response_release(&r);
    assert_int_equal(atomic_load(&f1->requests), 1);
    assert_int_equal(atomic_load(&f2->requests), 1);
    /* A stream: the same answer, its body passed on once. */
    struct collect k = {0};
    long status = 0;
    assert_int_equal(httpc_stream(c, "/x", 5000, collect, &k, &status, err, sizeof(err)), 0);
    assert_int_equal(status, 503);
    assert_non_null(strstr(k.buf, "no leader yet"));
    assert_null(strstr(strstr(k.buf, "no leader yet") + 1, "no leader yet"));
    httpc_free(c);
    /* Every address down: the error names the last one tried. */
    char dead2[64];
    snprintf(dead2, sizeof(dead2), "%s,http://127.0.0.1:2", DEAD);
    assert_int_equal(httpc_new(dead2, NULL, &c, err, sizeof(err)), 0);
    assert_int_equal(httpc_request(c, "GET", "/x", NULL, 0, 5000, &r, err, sizeof(err)),
                     GPO_ECONNREFUSED);
    assert_non_null(strstr(err, "http://127.0.0.1:2/x"));
    assert_non_null(strstr(err, "after 1 other address"));
    httpc_free(c);
    stub_stop(f1);
    stub_stop(f2);
}

static void a_request_that_timed_out_once_sent_is_not_sent_again(void **state)
{
    (void)state;
    struct stub *slow = stub_start(STUB_SLOW, NULL);
    struct stub *leader = stub_start(STUB_LEADER, NULL);
    char list[512], err[512];
    snprintf(list, sizeof(list), "%s,%s", slow->base, leader->base);
    struct httpc *c;
    assert_int_equal(httpc_new(list, NULL, &c, err, sizeof(err)), 0);
    struct httpc_response r = {0};
    assert_int_equal(httpc_request(c, "POST", "/x", "{}", 2, 200, &r, err, sizeof(err)),
                     GPO_ETIMEDOUT);
    assert_non_null(strstr(err, slow->base));
    assert_int_equal(atomic_load(&slow->requests), 1);
    assert_int_equal(atomic_load(&leader->requests), 0); /* not resent */
    /* The next request begins at the next address. */
    assert_int_equal(httpc_request(c, "GET", "/x", NULL, 0, 5000, &r, err, sizeof(err)), 0);
    assert_int_equal(r.status, 200);
    httpc_response_release(&r);
    assert_int_equal(atomic_load(&leader->requests), 1);
    assert_int_equal(atomic_load(&slow->requests), 1);
    httpc_free(c);
    /* Waiting an answer of the slow one out lets the first one's suspend end
     * before the server is freed. */
    assert_int_equal(httpc_new(slow->base, NULL, &c, err, sizeof(err)), 0);
    assert_int_equal(httpc_request(c, "GET", "/x", NULL, 0, 5000, &r, err, sizeof(err)), 0);
    httpc_response_release(&r);
    httpc_free(c);
    stub_stop(slow);
    stub_stop(leader);
}

static void a_leader_gone_after_answering_is_passed_over_at_the_next_request(void **state)
{
    (void)state;
    struct stub *old = stub_start(STUB_LEADER, NULL);
    struct stub *next = stub_start(STUB_LEADER, NULL);
    char list[512], err[512], at[64];
    snprintf(list, sizeof(list), "%s,%s", old->base, next->base);
    snprintf(at, sizeof(at), "%s", next->base);
    struct httpc *c;
    assert_int_equal(httpc_new(list, NULL, &c, err, sizeof(err)), 0);
    struct httpc_response r = {0};
    assert_int_equal(httpc_request(c, "GET", "/x", NULL, 0, 5000, &r, err, sizeof(err)), 0);
    httpc_response_release(&r);
    assert_int_equal(atomic_load(&old->requests), 1);
    /* Its process ends (its kept-alive connection closed, its port refusing):
     * a POST goes to the next address, once. */
    stub_stop(old);
    assert_int_equal(httpc_request(c, "POST", "/x", "{}", 2, 5000, &r, err, sizeof(err)), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, at));
    httpc_response_release(&r);
    assert_int_equal(atomic_load(&next->requests), 1);
    assert_string_equal(httpc_url(c), at);
    httpc_free(c);
    stub_stop(next);
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
        cmocka_unit_test(a_list_is_parsed_in_order_blanks_and_slashes_dropped),
        cmocka_unit_test(a_bad_list_names_its_bad_entry),
        cmocka_unit_test(unreachable_addresses_are_passed_once_round_the_list),
        cmocka_unit_test(a_request_broken_once_sent_is_not_resent_but_the_next_moves_on),
        cmocka_unit_test(followers_refusals_are_passed_until_the_last_answer),
        cmocka_unit_test(a_redirect_to_another_origin_is_learned_and_followed),
        cmocka_unit_test(redirects_that_are_not_followed),
        cmocka_unit_test(a_list_reaches_the_leader_past_the_dead_and_the_followers),
        cmocka_unit_test(when_every_address_is_a_follower_or_down_the_last_answer_comes_back),
        cmocka_unit_test(a_request_that_timed_out_once_sent_is_not_sent_again),
        cmocka_unit_test(a_leader_gone_after_answering_is_passed_over_at_the_next_request),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

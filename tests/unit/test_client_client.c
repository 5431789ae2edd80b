/* test_client_client.c - the typed REST calls against a loopback server:
 * API errors as one line, paging through GET /v1/jobs with its filters
 * escaped, what each call sends (method, path, query, header, body), the
 * log stream told apart from an error answer, and names too long for a
 * path refused before anything is sent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "client/client.h"
#include "http/http.h"
#include "base/banned.h"

/* What the server saw of the last request. */
struct seen {
    char method[16], path[512], query[512], key[128], body[512];
    int requests;
};

static struct seen seen;

static void note(struct http_request *req)
{
    seen.requests++;
    snprintf(seen.method, sizeof(seen.method), "%s", http_request_method(req));
    snprintf(seen.path, sizeof(seen.path), "%s", http_request_path(req));
    seen.query[0] = '\0';
    for (size_t i = 0; i < http_request_query_count(req); i++) {
        const char *k, *v;
        http_request_query_at(req, i, &k, &v);
        size_t at = strlen(seen.query);
        snprintf(seen.query + at, sizeof(seen.query) - at, "%s%s=%s", i ? "&" : "", k, v ? v : "");
    }
    const char *key = http_request_header(req, "Idempotency-Key");
    snprintf(seen.key, sizeof(seen.key), "%s", key ? key : "");
    size_t len = 0;
    const char *body = http_request_body(req, &len);
    snprintf(seen.body, sizeof(seen.body), "%.*s", (int)len, body ? body : "");
}

static int h_error(struct http_request *req, void *ctx)
{
    (void)ctx;
    note(req);
    return http_request_error(req, 400, "invalid_field", "field 'gpus': 5000 is out of range");
}

/* A controller that does not lead and knows no leader (the follower's 503). */
static int h_follower(struct http_request *req, void *ctx)
{
    (void)ctx;
    note(req);
    http_request_add_header(req, "Retry-After", "1");
    http_request_add_header(req, "X-Gpuorch-Role", "follower");
    return http_request_respond_json(req, 503, json_pack("{s:s}", "error", "no leader yet"));
}

static int h_text(struct http_request *req, void *ctx)
{
    (void)ctx;
    static const char text[] = "<html>\nbad gateway\n</html>";
    note(req);
    return http_request_respond_static(req, 502, "text/html", text, sizeof(text) - 1);
}

/* Three pages of jobs: ids 1..5, two per page, keyset paging on after=. */
static int h_jobs(struct http_request *req, void *ctx)
{
    (void)ctx;
    note(req);
    const char *after = http_request_query(req, "after"), *state = http_request_query(req, "state");
    long a = after ? strtol(after, NULL, 10) : 0;
    json_t *jobs = json_array();
    for (long id = a + 1; id <= 5 && id <= a + 2; id++)
        json_array_append_new(jobs, json_pack("{s:i, s:s?}", "id", (int)id, "state", state));
    json_t *next = a + 2 < 5 ? json_integer(a + 2) : json_null();
    return http_request_respond_json(req, 200,
                                     json_pack("{s:o, s:o}", "jobs", jobs, "next_after", next));
}

/* Echoes what it saw: the path parameter and the method. */
static int h_echo(struct http_request *req, void *ctx)
{
    (void)ctx;
    note(req);
    const char *name = http_request_param(req, "name"), *id = http_request_param(req, "id");
    return http_request_respond_json(
        req, 200, json_pack("{s:s?, s:s?, s:s}", "name", name, "id", id, "state", "draining"));
}

static int h_missing(struct http_request *req, void *ctx)
{
    (void)ctx;
    note(req);
    return http_request_error(req, 404, "not_found", "no team '%s'",
                              http_request_param(req, "name"));
}

static int h_cancel(struct http_request *req, void *ctx)
{
    (void)ctx;
    note(req);
    unsigned status = strcmp(http_request_param(req, "id"), "7") == 0 ? 202 : 200;
    return http_request_respond_json(req, status, json_pack("{s:b}", "ok", 1));
}

/* Log text that begins like an error object, for job 1; an error for 2. */
static int h_logs(struct http_request *req, void *ctx)
{
    (void)ctx;
    note(req);
    static const char text[] = "{\"err\": not an error, just a log line\n";
    if (strcmp(http_request_param(req, "id"), "1") == 0)
        return http_request_respond_static(req, 200, "text/plain", text, sizeof(text) - 1);
    return http_request_error(req, 409, "not_started", "job 2 has not run yet");
}

static const struct http_route routes[] = {
    {"GET", "/error", h_error, 0},
    {"GET", "/text", h_text, 0},
    {"GET", "/follower", h_follower, 0},
    {"GET", "/v1/jobs", h_jobs, 0},
    {"POST", "/v1/jobs", h_echo, HTTP_ROUTE_JSON_BODY},
    {"GET", "/v1/jobs/{id}", h_echo, 0},
    {"POST", "/v1/jobs/{id}/cancel", h_cancel, 0},
    {"GET", "/v1/jobs/{id}/logs", h_logs, 0},
    {"POST", "/v1/nodes/{name}/drain", h_echo, 0},
    {"POST", "/v1/nodes/{name}/resume", h_echo, 0},
    {"GET", "/v1/teams/{name}", h_missing, 0},
    {"PUT", "/v1/priority-classes/{name}", h_echo, HTTP_ROUTE_JSON_BODY},
    {"DELETE", "/v1/users/{name}", h_echo, 0},
    {"POST", "/v1/users/{name}/tokens", h_echo, 0},
    {"GET", "/v1/cost", h_echo, 0},
    {"GET", "/v1/metrics/series", h_echo, 0},
    {"GET", "/v1/whoami", h_echo, 0},
};

struct srv {
    struct http_server *srv;
    struct client c;
};

static int srv_setup(void **state)
{
    struct srv *s = calloc(1, sizeof(*s));
    struct http_config cfg = {
        .bind_addr = "127.0.0.1", .routes = routes, .nroutes = sizeof(routes) / sizeof(routes[0])};
    char err[256], url[64];
    if (!s || http_server_new(&cfg, &s->srv, err, sizeof(err)) ||
        http_server_start(s->srv, err, sizeof(err)))
        return -1;
    snprintf(url, sizeof(url), "http://127.0.0.1:%u", http_server_port(s->srv));
    if (client_init(&s->c, url, "tok", err, sizeof(err)))
        return -1;
    memset(&seen, 0, sizeof(seen));
    *state = s;
    return 0;
}

static int srv_teardown(void **state)
{
    struct srv *s = *state;
    client_release(&s->c);
    http_server_free(s->srv);
    free(s);
    return 0;
}

static void api_errors_become_one_line_with_status_and_code(void **state)
{
    struct srv *s = *state;
    char err[CLIENT_ERR_MAX];
    json_t *v = (json_t *)1;
    assert_int_equal(client_call(&s->c, "GET", "/error", NULL, &v, err, sizeof(err)), GPO_EAPI);
    assert_int_equal(s->c.status, 400);
    assert_string_equal(err, "400 invalid_field: field 'gpus': 5000 is out of range");
    assert_ptr_equal(v, (json_t *)1); /* untouched */
    assert_int_equal(client_call(&s->c, "GET", "/text", NULL, NULL, err, sizeof(err)), GPO_EAPI);
    assert_string_equal(err, "502: <html>"); /* the first line of what came */
    assert_int_equal(client_call(&s->c, "GET", "/nowhere", NULL, NULL, err, sizeof(err)), GPO_EAPI);
    assert_int_equal(s->c.status, 404);
    assert_null(strchr(err, '\n'));
    assert_int_equal(client_api_error(500, "", 0, err, sizeof(err)), GPO_EAPI);
    assert_string_equal(err, "500: (an empty answer)");
    /* No body at all, whatever length comes with it: nothing is read. */
    assert_int_equal(client_api_error(500, NULL, 5, err, sizeof(err)), GPO_EAPI);
    assert_string_equal(err, "500: (an empty answer)");

    /* A server that is not there: the client's line, marked as no answer. */
    struct client gone;
    assert_int_equal(client_init(&gone, "http://127.0.0.1:1", "t", NULL, 0), 0);
    assert_int_equal(client_whoami(&gone, NULL, err, sizeof(err)), GPO_ECONNREFUSED);
    assert_non_null(strstr(err, "no answer: GET http://127.0.0.1:1/v1/whoami"));
    assert_int_equal(gone.status, 0);
    client_release(&gone);
    client_release(&gone); /* twice is fine */
    assert_int_equal(client_init(&gone, "localhost:8080", NULL, err, sizeof(err)), GPO_EINVAL);
    client_release(&gone);
}

static void a_follower_answer_names_the_controller_that_gave_it(void **state)
{
    struct srv *s = *state;
    char err[CLIENT_ERR_MAX], url[64], list[160];
    assert_int_equal(client_call(&s->c, "GET", "/follower", NULL, NULL, err, sizeof(err)),
                     GPO_EAPI);
    assert_int_equal(s->c.status, 503);
    snprintf(url, sizeof(url), "%s", httpc_url(s->c.http));
    char want[512];
    snprintf(want, sizeof(want), "503 from %s, a follower: no leader yet", url);
    assert_string_equal(err, want);
    /* Of a list (a closed port first): the one that answered, and why no
     * other did. */
    struct client two;
    snprintf(list, sizeof(list), "http://127.0.0.1:1,%s", url);
    assert_int_equal(client_init(&two, list, "t", NULL, 0), 0);
    assert_int_equal(client_call(&two, "GET", "/follower", NULL, NULL, err, sizeof(err)), GPO_EAPI);
    snprintf(want, sizeof(want),
             "503 from %s, a follower: no leader yet (every controller in the list is a follower "
             "or down)",
             url);
    assert_string_equal(err, want);
    client_release(&two);
}

static void job_lists_are_read_page_after_page_with_the_filter_escaped(void **state)
{
    struct srv *s = *state;
    char err[CLIENT_ERR_MAX];
    json_t *all = json_array();
    struct client_jobs_filter f = {.states = 1u << CLIENT_JOB_RUNNING | 1u << CLIENT_JOB_PENDING,
                                   .team = "r&d team",
                                   .user = "al=ice"};
    assert_int_equal(client_jobs_list(&s->c, &f, all, err, sizeof(err)), 0);
    assert_int_equal(json_array_size(all), 5);
    for (size_t k = 0; k < 5; k++) {
        assert_int_equal(json_integer_value(json_object_get(json_array_get(all, k), "id")), k + 1);
        assert_string_equal(json_string_value(json_object_get(json_array_get(all, k), "state")),
                            "PENDING,RUNNING");
    }
    assert_int_equal(seen.requests, 3);
    assert_string_equal(seen.query, "state=PENDING,RUNNING&team=r&d team&user=al=ice&limit=1000&"
                                    "after=4");
    json_decref(all);
    /* No filter: every state, no parameters but the paging. */
    all = json_array();
    assert_int_equal(client_jobs_list(&s->c, NULL, all, err, sizeof(err)), 0);
    assert_string_equal(seen.query, "limit=1000&after=4");
    json_decref(all);
    assert_string_equal(client_job_state_name(CLIENT_JOB_NODE_FAIL), "NODE_FAIL");
    assert_string_equal(client_job_state_name(CLIENT_JOB_STATE_COUNT), "?");
}

static void each_call_sends_its_method_path_and_query(void **state)
{
    struct srv *s = *state;
    char err[CLIENT_ERR_MAX];
    json_t *v = NULL;
    assert_int_equal(client_nodes_drain(&s->c, "gpu/01 a", &v, err, sizeof(err)), 0);
    assert_string_equal(json_string_value(json_object_get(v, "name")), "gpu/01 a");
    assert_string_equal(seen.method, "POST");
    json_decref(v);
    assert_int_equal(client_nodes_resume(&s->c, "n1", NULL, err, sizeof(err)), 0);
    assert_string_equal(seen.path, "/v1/nodes/n1/resume");
    assert_int_equal(client_jobs_get(&s->c, 42, &v, err, sizeof(err)), 0);
    assert_string_equal(json_string_value(json_object_get(v, "id")), "42");
    json_decref(v);
    json_t *body = json_pack("{s:i}", "order", 5);
    assert_int_equal(client_config_put(&s->c, CLIENT_KIND_PRIORITY_CLASSES, "urgent", body, NULL,
                                       err, sizeof(err)),
                     0);
    assert_string_equal(seen.method, "PUT");
    assert_string_equal(seen.path, "/v1/priority-classes/urgent");
    assert_string_equal(seen.body, "{\"order\":5}");
    json_decref(body);
    assert_int_equal(client_config_delete(&s->c, CLIENT_KIND_USERS, "bob", err, sizeof(err)), 0);
    assert_string_equal(seen.method, "DELETE");
    assert_int_equal(client_users_token_issue(&s->c, "bob", "ci job", NULL, err, sizeof(err)), 0);
    assert_string_equal(seen.path, "/v1/users/bob/tokens");
    assert_string_equal(seen.query, "label=ci job");
    struct client_cost_query cq = {.by = CLIENT_COST_BY_PROJECT,
                                   .since = "2026-11-01T00:00:00+01:00"};
    assert_int_equal(client_cost(&s->c, &cq, NULL, err, sizeof(err)), 0);
    assert_string_equal(seen.query, "by=project&since=2026-11-01T00:00:00+01:00");
    struct client_series_query sq = {.metric = "gpu_util", .by = "team", .step = "1m"};
    assert_int_equal(client_metrics_series(&s->c, &sq, NULL, err, sizeof(err)), 0);
    assert_string_equal(seen.query, "metric=gpu_util&by=team&step=1m");
    struct client_series_query none = {0};
    assert_int_equal(client_metrics_series(&s->c, &none, NULL, err, sizeof(err)), GPO_EINVAL);
    enum client_cost_by by;
    assert_int_equal(client_cost_by_parse("model", &by), 0);
    assert_int_equal(by, CLIENT_COST_BY_MODEL);
    assert_int_equal(client_cost_by_parse("colour", &by), GPO_ENOENT);
    assert_string_equal(client_kind_path(CLIENT_KIND_PRICES), "prices");
}

static void an_absent_object_is_a_404_the_caller_can_read(void **state)
{
    struct srv *s = *state;
    char err[CLIENT_ERR_MAX];
    json_t *v = NULL;
    assert_int_equal(client_config_get(&s->c, CLIENT_KIND_TEAMS, "vision", &v, err, sizeof(err)),
                     GPO_EAPI);
    assert_int_equal(s->c.status, 404);
    assert_string_equal(err, "404 not_found: no team 'vision'");
    assert_null(v);
}

static void cancel_tells_a_stop_in_progress_from_an_end(void **state)
{
    struct srv *s = *state;
    char err[CLIENT_ERR_MAX];
    bool stopping = false;
    assert_int_equal(client_jobs_cancel(&s->c, 7, &stopping, err, sizeof(err)), 0);
    assert_true(stopping);
    assert_string_equal(seen.path, "/v1/jobs/7/cancel");
    assert_int_equal(client_jobs_cancel(&s->c, 8, &stopping, err, sizeof(err)), 0);
    assert_false(stopping);
}

static void submit_sends_the_idempotency_key_with_that_submission_only(void **state)
{
    struct srv *s = *state;
    char err[CLIENT_ERR_MAX];
    json_t *spec = json_pack("{s:s}", "name", "train"), *job = NULL;
    assert_int_equal(client_jobs_submit(&s->c, spec, "retry-1", &job, err, sizeof(err)), 0);
    assert_string_equal(seen.key, "retry-1");
    assert_string_equal(seen.body, "{\"name\":\"train\"}");
    json_decref(job);
    assert_int_equal(client_jobs_submit(&s->c, spec, NULL, NULL, err, sizeof(err)), 0);
    assert_string_equal(seen.key, "");
    int before = seen.requests;
    assert_int_equal(client_jobs_submit(&s->c, spec, "a\nb", NULL, err, sizeof(err)), GPO_EINVAL);
    assert_int_equal(seen.requests, before); /* nothing sent */
    json_decref(spec);
}

struct buffer {
    char text[256];
    size_t len;
    bool refuse;
};

static int take(const void *data, size_t len, void *ctx)
{
    struct buffer *b = ctx;
    if (b->refuse)
        return 1;
    size_t n = len < sizeof(b->text) - 1 - b->len ? len : sizeof(b->text) - 1 - b->len;
    memcpy(b->text + b->len, data, n);
    b->len += n;
    b->text[b->len] = '\0';
    return 0;
}

static void logs_pass_text_on_and_keep_an_error_answer_back(void **state)
{
    struct srv *s = *state;
    char err[CLIENT_ERR_MAX];
    struct buffer b = {0};
    struct client_logs_query q = {.attempt = 2, .rank = 0, .stderr_stream = true, .follow = true};
    assert_int_equal(client_jobs_logs(&s->c, 1, &q, take, &b, err, sizeof(err)), 0);
    assert_string_equal(b.text, "{\"err\": not an error, just a log line\n");
    assert_string_equal(seen.query, "stream=stderr&attempt=2&rank=0&follow=1");
    struct client_logs_query plain = {.rank = -1};
    b = (struct buffer){0};
    assert_int_equal(client_jobs_logs(&s->c, 2, &plain, take, &b, err, sizeof(err)), GPO_EAPI);
    assert_string_equal(err, "409 not_started: job 2 has not run yet");
    assert_int_equal(b.len, 0); /* the error object is not log text */
    assert_string_equal(seen.query, "stream=stdout");
    b = (struct buffer){.refuse = true};
    assert_int_equal(client_jobs_logs(&s->c, 1, &plain, take, &b, err, sizeof(err)), GPO_ECANCELED);
}

static void names_too_long_for_a_path_are_refused_unsent(void **state)
{
    struct srv *s = *state;
    char err[CLIENT_ERR_MAX], *name = malloc(CLIENT_PATH_MAX);
    memset(name, 'n', CLIENT_PATH_MAX - 1);
    name[CLIENT_PATH_MAX - 1] = '\0';
    int before = seen.requests;
    assert_int_equal(client_nodes_drain(&s->c, name, NULL, err, sizeof(err)), GPO_ENAMETOOLONG);
    assert_int_equal(client_config_get(&s->c, CLIENT_KIND_TEAMS, name, NULL, err, sizeof(err)),
                     GPO_ENAMETOOLONG);
    struct client_jobs_filter f = {.team = name};
    json_t *all = json_array();
    assert_int_equal(client_jobs_list(&s->c, &f, all, err, sizeof(err)), GPO_ENAMETOOLONG);
    assert_int_equal(seen.requests, before);
    json_decref(all);
    free(name);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, srv_setup, srv_teardown)
    const struct CMUnitTest tests[] = {
        T(api_errors_become_one_line_with_status_and_code),
        T(a_follower_answer_names_the_controller_that_gave_it),
        T(job_lists_are_read_page_after_page_with_the_filter_escaped),
        T(each_call_sends_its_method_path_and_query),
        T(an_absent_object_is_a_404_the_caller_can_read),
        T(cancel_tells_a_stop_in_progress_from_an_end),
        T(submit_sends_the_idempotency_key_with_that_submission_only),
        T(logs_pass_text_on_and_keep_an_error_answer_back),
        T(names_too_long_for_a_path_are_refused_unsent),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}

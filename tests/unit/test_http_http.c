/* test_http_http.c - the HTTP layer over loopback: routes and path
 * parameters, 404/405, query and headers, bearer tokens, the authorize hook,
 * JSON bodies and their errors, the body limit, answers and their headers,
 * suspended requests (64 at once, timeouts, clients that leave, stop), the
 * access log, and config and start errors. A small blocking HTTP/1.1 client
 * written here talks to a server on 127.0.0.1, port 0; every test starts its
 * own server. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "http/http.h"
#include "base/banned.h"

#define NWAIT      64
#define WAIT_LIMIT 5 /* seconds: a generous deadline for events, never a timing assertion */

struct env {
    struct http_server *srv;
    uint16_t port;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    struct http_request *waiting[NWAIT + 8];
    size_t nwaiting;
    int timeouts;       /* timeout callbacks run */
    int authorizations; /* authorize hook calls */
    bool elsewhere;     /* the admit hook sends all but /healthz elsewhere */
    int logged;         /* access log entries */
    char last_log[256]; /* "METHOD path status" */
};

/* ---- the tiny client ---- */

struct resp {
    int status;
    char head[8192]; /* status line and headers, NUL-terminated */
    char *body;
    size_t body_len;
};

/* strstr, ignoring ASCII case (strcasestr is a GNU extension). */
static const char *find_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return hay;
    return NULL;
}

static char *find_blank_line(char *buf, size_t len)
{
    for (size_t i = 0; i + 4 <= len; i++)
        if (memcmp(buf + i, "\r\n\r\n", 4) == 0)
            return buf + i;
    return NULL;
}

static int conn_open(uint16_t port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    struct timeval tv = {.tv_sec = WAIT_LIMIT};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

static void conn_send(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        assert_true(n > 0);
        data += n;
        len -= (size_t)n;
    }
}

/* Reads one response: the head, then Content-Length bytes (or to the close).
 * Returns -1 when the connection closed (or timed out) before a status line. */
static int conn_read(int fd, struct resp *r)
{
    size_t cap = 1 << 16, len = 0, want = SIZE_MAX;
    char *buf = malloc(cap), *end = NULL;
    assert_non_null(buf);
    memset(r, 0, sizeof(*r));
    for (;;) {
        if (end && len >= want)
            break;
        if (len == cap) {
            buf = realloc(buf, cap *= 2);
            assert_non_null(buf);
        }
        ssize_t n = recv(fd, buf + len, cap - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
        if (!end && (end = find_blank_line(buf, len))) {
            size_t hlen = (size_t)(end - buf) + 4;
            assert_true(hlen < sizeof(r->head));
            memcpy(r->head, buf, hlen);
            r->head[hlen] = '\0';
            const char *cl = find_nocase(r->head, "\r\nContent-Length:");
            want = cl ? hlen + strtoull(cl + 17, NULL, 10) : SIZE_MAX;
            if (strncmp(r->head + 8, " 204 ", 5) == 0) /* no body, no length */
                want = hlen;
        }
    }
    if (!end) {
        free(buf);
        return -1;
    }
    size_t hlen = strlen(r->head);
    r->status = (int)strtol(r->head + 9, NULL, 10);
    r->body_len = (len < want ? len : want) - hlen; /* HEAD: a length, no body */
    r->body = calloc(1, r->body_len + 1);
    assert_non_null(r->body);
    memcpy(r->body, buf + hlen, r->body_len);
    free(buf);
    return 0;
}

static void resp_free(struct resp *r)
{
    free(r->body);
    r->body = NULL;
}

/* The value of header `name` in buf (empty when absent). */
static const char *resp_header(const struct resp *r, const char *name, char *buf, size_t len)
{
    char key[128];
    snprintf(key, sizeof(key), "\r\n%s:", name);
    const char *p = find_nocase(r->head, key);
    buf[0] = '\0';
    if (p) {
        p += strlen(key);
        p += strspn(p, " ");
        snprintf(buf, len, "%.*s", (int)strcspn(p, "\r"), p);
    }
    return buf;
}

/* Sends one raw request on a new connection and reads the answer. */
static void http_raw(const struct env *e, const char *raw, size_t len, struct resp *r)
{
    int fd = conn_open(e->port);
    conn_send(fd, raw, len);
    assert_int_equal(conn_read(fd, r), 0);
    close(fd);
}

__attribute__((format(printf, 3, 4))) static void http_req(const struct env *e, struct resp *r,
                                                           const char *fmt, ...)
{
    char raw[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < sizeof(raw));
    http_raw(e, raw, (size_t)n, r);
}

static void get(const struct env *e, const char *path, const char *headers, struct resp *r)
{
    http_req(e, r, "GET %s HTTP/1.1\r\nHost: t\r\n%s\r\n", path, headers ? headers : "");
}

static void post(const struct env *e, const char *path, const char *body, size_t len,
                 struct resp *r)
{
    char raw[8192];
    int n = snprintf(raw, sizeof(raw),
                     "POST %s HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n",
                     path, len);
    assert_true(n > 0 && (size_t)n + len < sizeof(raw));
    memcpy(raw + n, body, len);
    http_raw(e, raw, (size_t)n + len, r);
}

/* The body as JSON (caller decrefs). */
static json_t *body_json(const struct resp *r)
{
    json_error_t err;
    json_t *j = json_loadb(r->body, r->body_len, 0, &err);
    if (!j)
        fail_msg("not JSON (%s): %s", err.text, r->body);
    return j;
}

static const char *jstr(json_t *j, const char *path1, const char *path2)
{
    json_t *v = json_object_get(j, path1);
    if (path2)
        v = json_object_get(v, path2);
    return json_string_value(v);
}

#define MSG_LEN 512 /* bytes of an error message copied out of an answer */

/* Asserts a standard error answer with this status and code and copies its
 * message into msg (MSG_LEN bytes; NULL: not wanted). */
static void assert_error(const struct resp *r, int status, const char *code, char *msg)
{
    char ctype[128];
    assert_int_equal(r->status, status);
    assert_string_equal(resp_header(r, "Content-Type", ctype, sizeof(ctype)), "application/json");
    json_t *j = body_json(r);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "error"), "status")),
                     status);
    assert_string_equal(jstr(j, "error", "code"), code);
    if (msg)
        snprintf(msg, MSG_LEN, "%s", jstr(j, "error", "message"));
    json_decref(j);
}

/* The take_* checks end with a response: they assert on it, then free it. */
static void take_error(struct resp *r, int status, const char *code, char *msg)
{
    assert_error(r, status, code, msg);
    resp_free(r);
}

static void take_status(struct resp *r, int status)
{
    assert_int_equal(r->status, status);
    resp_free(r);
}

/* Returns the body as JSON (caller decrefs). */
static json_t *take_json(struct resp *r, int status)
{
    assert_int_equal(r->status, status);
    json_t *j = body_json(r);
    resp_free(r);
    return j;
}

/* GET path (headers: extra header lines, or NULL), then the take_* check. */
static void get_error(const struct env *e, const char *path, const char *headers, int status,
                      const char *code, char *msg)
{
    struct resp r;
    get(e, path, headers, &r);
    take_error(&r, status, code, msg);
}

static void get_status(const struct env *e, const char *path, const char *headers, int status)
{
    struct resp r;
    get(e, path, headers, &r);
    take_status(&r, status);
}

static json_t *get_json(const struct env *e, const char *path, const char *headers, int status)
{
    struct resp r;
    get(e, path, headers, &r);
    return take_json(&r, status);
}

/* GET path, asserting the status and the whole body. */
static void get_body(const struct env *e, const char *path, int status, const char *body)
{
    struct resp r;
    get(e, path, NULL, &r);
    assert_int_equal(r.status, status);
    assert_string_equal(r.body, body);
    resp_free(&r);
}

/* Sends "GET path" on a new connection without reading the answer (for
 * requests the server suspends); returns the connection. */
static int send_get(const struct env *e, const char *path)
{
    char raw[256];
    int fd = conn_open(e->port);
    int n = snprintf(raw, sizeof(raw), "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
    assert_true(n > 0 && (size_t)n < sizeof(raw));
    conn_send(fd, raw, (size_t)n);
    return fd;
}

/* ---- the server under test ---- */

static int h_job_get(struct http_request *req, void *ctx)
{
    (void)ctx;
    return http_request_respond_json(req, 200,
                                     json_pack("{s:s}", "id", http_request_param(req, "id")));
}

static int h_job_delete(struct http_request *req, void *ctx)
{
    (void)ctx;
    return http_request_respond_json(req, 204, NULL);
}

static int h_assignments(struct http_request *req, void *ctx)
{
    const char *name, *value;
    (void)ctx;
    for (size_t i = 0; i < http_request_query_count(req); i++) {
        assert_int_equal(http_request_query_at(req, i, &name, &value), 0);
        if (strcmp(name, "since") != 0)
            return http_request_error(req, 400, "unknown_parameter", "unknown parameter '%s'",
                                      name);
    }
    assert_int_equal(http_request_query_at(req, http_request_query_count(req), &name, &value),
                     GPO_EINVAL);
    const char *since = http_request_query(req, "since");
    return http_request_respond_json(
        req, 200, json_pack("{s:s,s:s?}", "name", http_request_param(req, "name"), "since", since));
}

static int h_job_post(struct http_request *req, void *ctx)
{
    (void)ctx;
    assert_int_equal(http_request_add_header(req, "Location", "/v1/jobs/7"), 0);
    assert_int_equal(http_request_add_header(req, "Content-Type", "text/plain"), GPO_EINVAL);
    assert_int_equal(http_request_add_header(req, "X-Bad", "a\r\nb"), GPO_EINVAL);
    return http_request_respond_json(req, 201, json_pack("{s:O}", "got", http_request_json(req)));
}

static int h_whoami(struct http_request *req, void *ctx)
{
    (void)ctx;
    return http_request_respond_json(req, 200,
                                     json_pack("{s:s?,s:s}", "token", http_request_bearer(req),
                                               "client", http_request_client(req)));
}

static int h_secret(struct http_request *req, void *ctx)
{
    (void)ctx;
    return http_request_respond_json(req, 200, json_pack("{s:b}", "ok", 1));
}

static int h_health(struct http_request *req, void *ctx)
{
    (void)ctx;
    return http_request_respond_bytes(req, 200, "text/plain", "ok\n", 3);
}

static int h_metrics(struct http_request *req, void *ctx)
{
    static const char text[] = "# TYPE gpuorch_up gauge\ngpuorch_up 1\n";
    (void)ctx;
    assert_int_equal(http_request_add_header(req, "Retry-After", "5"), 0);
    return http_request_respond_bytes(req, 200, "text/plain; version=0.0.4", text,
                                      sizeof(text) - 1);
}

static int h_static(struct http_request *req, void *ctx)
{
    static const char page[] = "<!doctype html><title>gpuorch</title>";
    (void)ctx;
    int rc =
        http_request_respond_static(req, 200, "text/html; charset=utf-8", page, sizeof(page) - 1);
    assert_int_equal(http_request_respond_json(req, 200, NULL), GPO_ESTATE);
    return rc;
}

static int h_silent(struct http_request *req, void *ctx)
{
    (void)req, (void)ctx;
    return 0;
}

static int h_raw(struct http_request *req, void *ctx)
{
    size_t len;
    (void)ctx;
    const void *b = http_request_body(req, &len);
    assert_true(len == 0 || b != NULL);
    assert_null(http_request_json(req));
    return http_request_respond_json(req, 200, json_pack("{s:i}", "len", (int)len));
}

/* Hands a suspended request to the test thread. */
static void hand_over(struct env *e, struct http_request *req)
{
    pthread_mutex_lock(&e->mu);
    e->waiting[e->nwaiting++] = req;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->mu);
}

/* Suspends and hands the request to the test thread. */
static int h_wait(struct http_request *req, void *ctx)
{
    int rc = http_request_suspend(req, 0, NULL, NULL);
    if (rc != 0)
        return rc;
    assert_int_equal(http_request_respond_json(req, 200, NULL), GPO_ESTATE);
    hand_over(ctx, req);
    return 0;
}

static void on_poll_timeout(struct http_request *req, void *ctx)
{
    struct env *e = ctx;
    pthread_mutex_lock(&e->mu);
    e->timeouts++;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->mu);
    assert_int_equal(http_request_complete(req, 204, NULL), 0);
    /* a second completion inside the callback is refused, harmlessly */
    assert_int_equal(http_request_complete(req, 200, json_object()), GPO_ESTATE);
}

/* A long-poll: nothing ever arrives, the deadline answers. */
static int h_poll(struct http_request *req, void *ctx)
{
    assert_int_equal(http_request_suspend(req, 60, NULL, NULL), GPO_EINVAL);
    return http_request_suspend(req, 50, on_poll_timeout, ctx);
}

/* Suspends with a far deadline, hands the request over like h_wait. */
static int h_longpoll(struct http_request *req, void *ctx)
{
    int rc = http_request_suspend(req, 60000, on_poll_timeout, ctx);
    if (rc == 0)
        hand_over(ctx, req);
    return rc;
}

static void *complete_one(void *arg)
{
    http_request_complete(arg, 200, json_pack("{s:s}", "from", "thread"));
    return NULL;
}

/* Suspends and has another thread complete it at once: the completion lands
 * before, during or after MHD learns of the suspension. */
static int h_race(struct http_request *req, void *ctx)
{
    pthread_t t;
    (void)ctx;
    assert_int_equal(http_request_suspend(req, 0, NULL, NULL), 0);
    assert_int_equal(pthread_create(&t, NULL, complete_one, req), 0);
    assert_int_equal(pthread_detach(t), 0);
    return 0;
}

/* Suspends and completes at once, before returning (data was ready after all). */
static int h_instant(struct http_request *req, void *ctx)
{
    (void)ctx;
    assert_int_equal(http_request_suspend(req, 0, NULL, NULL), 0);
    assert_int_equal(http_request_suspend(req, 0, NULL, NULL), GPO_ESTATE);
    return http_request_complete(req, 200, json_pack("{s:s}", "at", "once"));
}

static bool authorize(struct http_request *req, unsigned flags, void *ctx)
{
    struct env *e = ctx;
    const char *token = http_request_bearer(req);
    pthread_mutex_lock(&e->mu);
    e->authorizations++;
    pthread_mutex_unlock(&e->mu);
    assert_true(flags & HTTP_ROUTE_USER_FLAG(0));
    if (!token) {
        http_request_error(req, 401, "unauthorized", "a bearer token is required");
        return false;
    }
    if (strcmp(token, "good") != 0)
        return false; /* the library answers 403 */
    return true;
}

/* As a controller that does not lead: all but its health redirected,
 * before routing and authorization. */
static bool admit(struct http_request *req, void *ctx)
{
    struct env *e = ctx;
    pthread_mutex_lock(&e->mu);
    bool elsewhere = e->elsewhere;
    pthread_mutex_unlock(&e->mu);
    assert_null(http_request_route(req));
    if (!elsewhere || strcmp(http_request_path(req), "/healthz") == 0)
        return true;
    char loc[512];
    const char *q = http_request_raw_query(req);
    snprintf(loc, sizeof(loc), "http://elsewhere%s%s%s", http_request_path(req), q[0] ? "?" : "",
             q);
    assert_int_equal(http_request_add_header(req, "Location", loc), 0);
    http_request_error(req, 307, "elsewhere", "not here");
    return false;
}

static void access_log(const struct http_access *a, void *ctx)
{
    struct env *e = ctx;
    pthread_mutex_lock(&e->mu);
    e->logged++;
    snprintf(e->last_log, sizeof(e->last_log), "%s %s %u %s", a->method, a->path, a->status,
             a->duration_us >= 0 ? a->client : "negative-duration");
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->mu);
}

#define PRIV HTTP_ROUTE_USER_FLAG(0)
static const struct http_route routes[] = {
    {"GET", "/v1/jobs/{id}", h_job_get, PRIV},
    {"DELETE", "/v1/jobs/{id}", h_job_delete, PRIV},
    {"POST", "/v1/jobs", h_job_post, HTTP_ROUTE_JSON_BODY | HTTP_ROUTE_PUBLIC},
    {"GET", "/v1/nodes/{name}/assignments", h_assignments, HTTP_ROUTE_PUBLIC},
    {"GET", "/v1/whoami", h_whoami, HTTP_ROUTE_PUBLIC},
    {"GET", "/v1/secret", h_secret, PRIV},
    {"GET", "/healthz", h_health, HTTP_ROUTE_PUBLIC},
    {"GET", "/metrics", h_metrics, HTTP_ROUTE_PUBLIC},
    {"GET", "/", h_static, HTTP_ROUTE_PUBLIC},
    {"GET", "/v1/silent", h_silent, HTTP_ROUTE_PUBLIC},
    {"POST", "/v1/raw", h_raw, HTTP_ROUTE_RAW_BODY | HTTP_ROUTE_PUBLIC},
    {"GET", "/v1/wait", h_wait, HTTP_ROUTE_PUBLIC},
    {"GET", "/v1/poll", h_poll, HTTP_ROUTE_PUBLIC},
    {"GET", "/v1/longpoll", h_longpoll, HTTP_ROUTE_PUBLIC},
    {"GET", "/v1/instant", h_instant, HTTP_ROUTE_PUBLIC},
    {"GET", "/v1/race", h_race, HTTP_ROUTE_PUBLIC},
};

static struct http_config test_config(struct env *e)
{
    return (struct http_config){
        .body_limit = 1024,
        .routes = routes,
        .nroutes = sizeof(routes) / sizeof(routes[0]),
        .admit = admit,
        .authorize = authorize,
        .access_log = access_log,
        .ctx = e,
    };
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    struct http_config cfg = test_config(e);
    char err[256];
    if (!e)
        return -1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cond, NULL);
    if (http_server_new(&cfg, &e->srv, err, sizeof(err)) != 0 ||
        http_server_start(e->srv, err, sizeof(err)) != 0) {
        fprintf(stderr, "# server: %s\n", err);
        return -1;
    }
    e->port = http_server_port(e->srv);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    http_server_free(e->srv);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cond);
    free(e);
    return 0;
}

/* Waits (up to WAIT_LIMIT seconds) until *counter reaches n. */
static void wait_for(struct env *e, const void *counter, size_t n, bool is_size)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += WAIT_LIMIT;
    pthread_mutex_lock(&e->mu);
    while ((is_size ? *(const size_t *)counter : (size_t) * (const int *)counter) < n)
        if (pthread_cond_timedwait(&e->cond, &e->mu, &ts) == ETIMEDOUT)
            break;
    size_t got = is_size ? *(const size_t *)counter : (size_t) * (const int *)counter;
    pthread_mutex_unlock(&e->mu);
    assert_true(got >= n);
}

/* Reads a counter the server's threads update. */
static int counted(struct env *e, const int *counter)
{
    pthread_mutex_lock(&e->mu);
    int n = *counter;
    pthread_mutex_unlock(&e->mu);
    return n;
}

#define AUTH "Authorization: Bearer good\r\n"

/* ---- routing ---- */

static void path_param_is_echoed_percent_decoded_and_bounded(void **state)
{
    struct env *e = *state;
    char msg[MSG_LEN], path[600];
    json_t *j = get_json(e, "/v1/jobs/42", AUTH, 200);
    assert_string_equal(jstr(j, "id", NULL), "42");
    json_decref(j);
    j = get_json(e, "/v1/jobs/a%2Fb%20c%C3%A9", AUTH, 200); /* %2F stays inside its segment */
    assert_string_equal(jstr(j, "id", NULL), "a/b c\xC3\xA9");
    json_decref(j);
    j = get_json(e, "/v1/nodes/gpu-7/assignments?since=12", NULL, 200);
    assert_string_equal(jstr(j, "name", NULL), "gpu-7");
    assert_string_equal(jstr(j, "since", NULL), "12");
    json_decref(j);

    get_error(e, "/v1/jobs/%zz", AUTH, 400, "invalid_path", msg);
    assert_non_null(strstr(msg, "percent-encoding"));
    get_error(e, "/v1/jobs/a%00b", AUTH, 400, "invalid_path", NULL);
    get_error(e, "/v1/jobs/%FF", AUTH, 400, "invalid_path", msg);
    assert_non_null(strstr(msg, "'id' is not valid UTF-8"));

    int n = snprintf(path, sizeof(path), "/v1/jobs/");
    memset(path + n, 'x', HTTP_PARAM_MAX + 1);
    path[n + HTTP_PARAM_MAX + 1] = '\0';
    get_error(e, path, AUTH, 400, "invalid_path", msg);
    assert_non_null(strstr(msg, "'id' is longer than 256 bytes"));
    path[n + HTTP_PARAM_MAX] = '\0'; /* exactly the limit is fine */
    get_status(e, path, AUTH, 200);
}

static void unknown_path_is_404_and_wrong_method_405_with_allow(void **state)
{
    struct env *e = *state;
    struct resp r;
    char msg[MSG_LEN], allow[128];
    get_error(e, "/v1/nope", NULL, 404, "not_found", msg);
    assert_string_equal(msg, "no such endpoint: /v1/nope");
    get_error(e, "/v1/jobs/", AUTH, 404, "not_found", NULL); /* an empty parameter does not match */
    get_error(e, "/v1/jobs/1/2", AUTH, 404, "not_found", NULL);

    http_req(e, &r, "PUT /v1/jobs/9 HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_error(&r, 405, "method_not_allowed", msg);
    assert_string_equal(resp_header(&r, "Allow", allow, sizeof(allow)), "GET, DELETE, HEAD");
    assert_string_equal(msg, "PUT is not allowed on /v1/jobs/9 (allowed: GET, DELETE, HEAD)");
    resp_free(&r);
    http_req(e, &r, "GET /v1/jobs HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_error(&r, 405, "method_not_allowed", NULL);
    assert_string_equal(resp_header(&r, "Allow", allow, sizeof(allow)), "POST");
    resp_free(&r);

    http_req(e, &r, "DELETE /v1/jobs/9 HTTP/1.1\r\nHost: t\r\n" AUTH "\r\n");
    assert_int_equal(r.status, 204);
    assert_int_equal(r.body_len, 0);
    resp_free(&r);
    http_req(e, &r, "HEAD /v1/jobs/9 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" AUTH "\r\n");
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, 0);
    resp_free(&r);
}

static void query_is_decoded_iterable_and_checked(void **state)
{
    struct env *e = *state;
    char msg[MSG_LEN];
    json_t *j = get_json(e, "/v1/nodes/n%C3%A9/assignments?since=a+b%21#frag", NULL, 200);
    assert_string_equal(jstr(j, "name", NULL), "n\xC3\xA9");
    assert_string_equal(jstr(j, "since", NULL), "a b!");
    json_decref(j);
    j = get_json(e, "/v1/nodes/a/assignments", NULL, 200);
    assert_true(json_is_null(json_object_get(j, "since")));
    json_decref(j);

    get_error(e, "/v1/nodes/a/assignments?since=1&&state", NULL, 400, "unknown_parameter", msg);
    assert_string_equal(msg, "unknown parameter 'state'");
    get_error(e, "/v1/nodes/a/assignments?since=%G1", NULL, 400, "invalid_query", NULL);
    get_error(e, "/v1/nodes/a/assignments?=1", NULL, 400, "invalid_query", NULL);
    get_error(e, "/v1/nodes/a/assignments?a=%FE", NULL, 400, "invalid_query", msg);
    assert_non_null(strstr(msg, "UTF-8"));
}

/* ---- bodies ---- */

static void json_object_body_reaches_handler(void **state)
{
    struct env *e = *state;
    struct resp r;
    char loc[64];
    const char *body = "{\"name\": \"train\", \"gpus\": [1, 2]}";
    post(e, "/v1/jobs", body, strlen(body), &r);
    assert_string_equal(resp_header(&r, "Location", loc, sizeof(loc)), "/v1/jobs/7");
    json_t *j = take_json(&r, 201);
    assert_string_equal(jstr(j, "got", "name"), "train");
    assert_int_equal(json_array_size(json_object_get(json_object_get(j, "got"), "gpus")), 2);
    json_decref(j);
}

static void json_body_errors_are_400_naming_the_problem(void **state)
{
    struct env *e = *state;
    struct resp r;
    char msg[MSG_LEN];
    static const char bad_utf8[] = "{\"a\": \"\xFF\"}";
    post(e, "/v1/jobs", "{\"a\": }", 7, &r);
    take_error(&r, 400, "invalid_json", msg);
    assert_string_equal(msg, "invalid JSON at line 1, column 7: unexpected token near '}'");
    post(e, "/v1/jobs", "{\"a\": 1}\n{", 10, &r);
    take_error(&r, 400, "invalid_json", msg);
    assert_non_null(strstr(msg, "line 2"));
    post(e, "/v1/jobs", bad_utf8, sizeof(bad_utf8) - 1, &r);
    take_error(&r, 400, "invalid_utf8", msg);
    assert_string_equal(msg, "the request body is not valid UTF-8 (line 1, column 7)");
    post(e, "/v1/jobs", "{\"a\": 1, \"a\": 2}", 16, &r);
    take_error(&r, 400, "duplicate_key", msg);
    assert_string_equal(msg,
                        "duplicate key at line 1, column 12: duplicate object key near '\"a\"'");
    post(e, "/v1/jobs", "[1, 2]", 6, &r);
    take_error(&r, 400, "not_an_object", msg);
    assert_string_equal(msg, "the request body must be a JSON object, not an array");
    post(e, "/v1/jobs", "", 0, &r);
    take_error(&r, 400, "empty_body", NULL);
    /* a body where none is taken: decided from Content-Length, or from the bytes */
    http_req(e, &r, "GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\n");
    take_error(&r, 400, "body_not_allowed", msg);
    assert_string_equal(msg, "GET /healthz takes no request body");
    http_req(e, &r,
             "GET /healthz HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
             "2\r\nhi\r\n0\r\n\r\n");
    take_error(&r, 400, "body_not_allowed", NULL);
    /* a raw-body route takes anything, or nothing */
    static const char raw[] =
        "POST /v1/raw HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\n\xFF\0x";
    http_raw(e, raw, sizeof(raw) - 1, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"len\":3"));
    resp_free(&r);
    http_req(e, &r, "POST /v1/raw HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    assert_non_null(strstr(r.body, "\"len\":0"));
    resp_free(&r);
}

static void body_over_limit_is_413_and_server_keeps_serving(void **state)
{
    struct env *e = *state;
    struct resp r;
    char msg[MSG_LEN], raw[4096];
    /* Content-Length over the limit: answered from the headers alone */
    http_req(e, &r, "POST /v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n");
    take_error(&r, 413, "body_too_large", msg);
    assert_string_equal(msg, "the request body is over the limit of 1024 bytes");
    /* chunked: discarded past the limit, answered at its end */
    int n = snprintf(raw, sizeof(raw),
                     "POST /v1/jobs HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "800\r\n");
    memset(raw + n, ' ', 0x800);
    n += 0x800;
    n += snprintf(raw + n, sizeof(raw) - (size_t)n, "\r\n0\r\n\r\n");
    http_raw(e, raw, (size_t)n, &r);
    take_error(&r, 413, "body_too_large", NULL);
    /* exactly the limit is accepted */
    memset(raw, ' ', 1024);
    raw[0] = '{';
    raw[1023] = '}';
    post(e, "/v1/jobs", raw, 1024, &r);
    take_status(&r, 201);
    get_body(e, "/healthz", 200, "ok\n");
}

/* ---- auth ---- */

static void bearer_token_comes_only_from_the_bearer_scheme(void **state)
{
    struct env *e = *state;
    static const struct {
        const char *header, *token;
    } cases[] = {
        {"Authorization: Bearer abc.DEF-1_~+/==\r\n", "abc.DEF-1_~+/=="},
        {"Authorization: bearer   xyz\r\n", "xyz"},
        {"", NULL},
        {"Authorization: Basic eDp5\r\n", NULL},
        {"Authorization: Bearer\r\n", NULL},
        {"Authorization: Bearer a b\r\n", NULL},
        {"Authorization: Bearer a,b\r\n", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *j = get_json(e, "/v1/whoami", cases[i].header, 200);
        if (cases[i].token)
            assert_string_equal(jstr(j, "token", NULL), cases[i].token);
        else
            assert_true(json_is_null(json_object_get(j, "token")));
        assert_string_equal(jstr(j, "client", NULL), "127.0.0.1");
        json_decref(j);
    }
}

static void authorize_hook_guards_protected_routes_only(void **state)
{
    struct env *e = *state;
    struct resp r;
    get_error(e, "/v1/secret", NULL, 401, "unauthorized", NULL);
    get_error(e, "/v1/secret", "Authorization: Bearer bad\r\n", 403, "forbidden", NULL);
    /* refused before the body is read */
    http_req(e, &r, "DELETE /v1/jobs/1 HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n");
    take_error(&r, 401, "unauthorized", NULL);
    get_status(e, "/v1/secret", AUTH, 200);
    int before = counted(e, &e->authorizations);
    assert_int_equal(before, 4);
    get_status(e, "/healthz", NULL, 200);
    get_status(e, "/v1/nope", NULL, 404); /* 404 comes before authorization */
    assert_int_equal(counted(e, &e->authorizations), before);
}

static void admit_hook_answers_before_routing_and_authorization(void **state)
{
    struct env *e = *state;
    struct resp r;
    char loc[512];
    get_status(e, "/v1/nope", NULL, 404); /* admitted: routed as usual */
    pthread_mutex_lock(&e->mu);
    e->elsewhere = true;
    pthread_mutex_unlock(&e->mu);
    get(e, "/v1/nope?a=1&b=%20x", NULL, &r); /* no route: the hook's answer all the same */
    assert_int_equal(r.status, 307);
    assert_string_equal(resp_header(&r, "Location", loc, sizeof(loc)),
                        "http://elsewhere/v1/nope?a=1&b=%20x");
    resp_free(&r);
    int before = counted(e, &e->authorizations);
    get_error(e, "/v1/secret", NULL, 307, "elsewhere", NULL); /* not 401: never authorized */
    post(e, "/v1/jobs", "{\"a\":1}", 7, &r);
    take_error(&r, 307, "elsewhere", NULL);
    assert_int_equal(counted(e, &e->authorizations), before);
    get_status(e, "/healthz", NULL, 200);
}

/* ---- answers ---- */

static void answers_carry_content_type_and_extra_headers(void **state)
{
    struct env *e = *state;
    struct resp r;
    char h[128], msg[MSG_LEN];
    get(e, "/metrics", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(resp_header(&r, "Content-Type", h, sizeof(h)), "text/plain; version=0.0.4");
    assert_string_equal(resp_header(&r, "Retry-After", h, sizeof(h)), "5");
    assert_string_equal(r.body, "# TYPE gpuorch_up gauge\ngpuorch_up 1\n");
    resp_free(&r);
    get(e, "/", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(resp_header(&r, "Content-Type", h, sizeof(h)), "text/html; charset=utf-8");
    assert_string_equal(r.body, "<!doctype html><title>gpuorch</title>");
    resp_free(&r);
    get_error(e, "/v1/silent", NULL, 500, "internal", msg);
    assert_string_equal(msg, "the handler of GET /v1/silent gave no answer");
    get_body(e, "/v1/instant", 200, "{\"at\":\"once\"}");
}

static void access_log_records_method_path_and_status(void **state)
{
    struct env *e = *state;
    get_status(e, "/v1/jobs/5?x=1", AUTH, 200);
    wait_for(e, &e->logged, 1, false);
    pthread_mutex_lock(&e->mu);
    assert_string_equal(e->last_log, "GET /v1/jobs/5 200 127.0.0.1");
    pthread_mutex_unlock(&e->mu);
}

static void malformed_requests_are_answered_and_logged(void **state)
{
    struct env *e = *state;
    struct resp r;
    char big[40000];
    http_req(e, &r, "GET http://t/healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    take_error(&r, 400, "invalid_path", NULL);
    /* MHD answers these itself; our request object must still be released */
    http_req(e, &r, "GET /healthz HTTP/1.1\r\nHost: t\r\nno colon here\r\n\r\n");
    assert_true(r.status >= 400 && r.status < 500);
    resp_free(&r);
    int n = snprintf(big, sizeof(big), "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: ");
    memset(big + n, 'x', sizeof(big) - (size_t)n - 5);
    memcpy(big + sizeof(big) - 5, "\r\n\r\n", 5);
    http_raw(e, big, sizeof(big) - 1, &r);
    assert_true(r.status >= 400 && r.status < 500);
    resp_free(&r);
    wait_for(e, &e->logged, 3, false);
}

/* ---- suspension ---- */

static void *complete_all(void *arg)
{
    struct env *e = arg;
    pthread_mutex_lock(&e->mu);
    size_t n = e->nwaiting;
    pthread_mutex_unlock(&e->mu);
    for (size_t i = 0; i < n; i++)
        if (http_request_complete(e->waiting[i], 200, json_pack("{s:i}", "n", (int)i)) != 0)
            return (void *)1;
    return NULL;
}

static void suspended_requests_hold_no_thread_and_all_get_answers(void **state)
{
    struct env *e = *state;
    int fds[NWAIT];
    bool seen[NWAIT] = {false};
    struct resp r;
    pthread_t t;
    void *ret;
    for (size_t i = 0; i < NWAIT; i++)
        fds[i] = send_get(e, "/v1/wait");
    wait_for(e, &e->nwaiting, NWAIT, true);
    /* all 64 are parked, yet another connection is served at once */
    get_status(e, "/healthz", NULL, 200);
    assert_int_equal(pthread_create(&t, NULL, complete_all, e), 0);
    assert_int_equal(pthread_join(t, &ret), 0);
    assert_null(ret);
    for (size_t i = 0; i < NWAIT; i++) {
        assert_int_equal(conn_read(fds[i], &r), 0);
        json_t *j = take_json(&r, 200);
        json_int_t n = json_integer_value(json_object_get(j, "n"));
        assert_true(n >= 0 && n < NWAIT && !seen[n]);
        seen[n] = true;
        json_decref(j);
        close(fds[i]);
    }
}

static void completion_racing_the_suspension_is_never_lost(void **state)
{
    struct env *e = *state;
    static const char req[] = "GET /v1/race HTTP/1.1\r\nHost: t\r\n\r\n";
    int fd = conn_open(e->port); /* one keep-alive connection for all */
    for (int i = 0; i < 300; i++) {
        struct resp r;
        conn_send(fd, req, sizeof(req) - 1);
        assert_int_equal(conn_read(fd, &r), 0);
        assert_int_equal(r.status, 200);
        assert_string_equal(r.body, "{\"from\":\"thread\"}");
        resp_free(&r);
    }
    close(fd);
}

static void suspend_timeout_answers_without_other_event(void **state)
{
    struct env *e = *state;
    get_status(e, "/v1/poll", NULL, 204); /* blocks until the timer answers */
    assert_int_equal(counted(e, &e->timeouts), 1);
}

static void completion_disarms_the_timeout(void **state)
{
    struct env *e = *state;
    struct resp r;
    int fd = send_get(e, "/v1/longpoll");
    wait_for(e, &e->nwaiting, 1, true);
    assert_int_equal(http_request_complete_error(e->waiting[0], 409, "conflict", "job %d", 3), 0);
    assert_int_equal(conn_read(fd, &r), 0);
    take_error(&r, 409, "conflict", NULL);
    close(fd);
    http_server_stop(e->srv);
    assert_int_equal(counted(e, &e->timeouts), 0);
}

static void completion_after_client_left_is_harmless(void **state)
{
    struct env *e = *state;
    int fd = send_get(e, "/v1/wait");
    wait_for(e, &e->nwaiting, 1, true);
    close(fd);
    get_status(e, "/healthz", NULL, 200); /* the server lives on meanwhile */
    assert_int_equal(http_request_complete(e->waiting[0], 200, json_pack("{s:s}", "k", "v")), 0);
    get_status(e, "/healthz", NULL, 200);
}

static void stop_answers_suspended_requests_with_503(void **state)
{
    struct env *e = *state;
    int fds[3];
    struct resp r;
    for (size_t i = 0; i < 3; i++)
        fds[i] = send_get(e, "/v1/wait");
    wait_for(e, &e->nwaiting, 3, true);
    http_server_stop(e->srv);
    for (size_t i = 0; i < 3; i++) {
        /* sent within the stop's grace, before it closed the connections */
        assert_int_equal(conn_read(fds[i], &r), 0);
        take_error(&r, 503, "unavailable", NULL);
        close(fds[i]);
    }
    http_server_stop(e->srv); /* idempotent */
    http_server_free(e->srv);
    e->srv = NULL;
    /* the completions still owed release the requests (and the server) */
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(http_request_complete(e->waiting[i], 200, json_object()), 0);
}

/* ---- config and start ---- */

static int h_none(struct http_request *req, void *ctx)
{
    (void)req, (void)ctx;
    return 0;
}

static void bad_route_patterns_are_refused_with_a_message(void **state)
{
    static const struct {
        const char *pattern, *why;
    } cases[] = {
        {"v1/jobs", "must start with '/'"},
        {"/v1//jobs", "an empty segment"},
        {"/v1/jobs/", "an empty segment"},
        {"/v1/{}", "empty or too long"},
        {"/v1/x{id}", "a brace outside"},
        {"/v1/{id}/{id}", "appears twice"},
        {"/{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}", "too many parameters"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct http_route rt[] = {{"GET", "/ok/{id}", h_none, 0},
                                  {"GET", cases[i].pattern, h_none, 0}};
        struct http_config cfg = {.routes = rt, .nroutes = 2};
        struct http_server *srv = NULL;
        char err[256];
        assert_int_equal(http_server_new(&cfg, &srv, err, sizeof(err)), GPO_EINVAL);
        assert_null(srv);
        assert_non_null(strstr(err, "route 1"));
        if (!strstr(err, cases[i].why))
            fail_msg("%s: got '%s'", cases[i].pattern, err);
    }
    struct http_route rt[] = {{"GE T", "/", h_none, 0}};
    struct http_config cfg = {.routes = rt, .nroutes = 1, .bind_addr = "localhost"};
    struct http_server *srv = NULL;
    char err[256];
    assert_int_equal(http_server_new(&cfg, &srv, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "not an HTTP token"));
    rt[0].method = "GET";
    assert_int_equal(http_server_new(&cfg, &srv, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "bind address 'localhost': not an IPv4 or IPv6 literal");
}

static void start_errors_name_the_address_or_file(void **state)
{
    struct env *e = *state;
    struct http_route rt[] = {{"GET", "/", h_none, 0}};
    struct http_config cfg = {.routes = rt, .nroutes = 1, .port = e->port};
    struct http_server *srv = NULL;
    char err[256], want[128];
    assert_int_equal(http_server_new(&cfg, &srv, err, sizeof(err)), 0);
    assert_int_equal(http_server_start(srv, err, sizeof(err)), GPO_EIO);
    snprintf(want, sizeof(want), "bind 127.0.0.1:%u: Address already in use", e->port);
    assert_string_equal(err, want);
    assert_int_equal(http_server_port(srv), 0);
    http_server_free(srv);

    cfg.port = 0;
    cfg.tls_cert_file = "/nonexistent/cert.pem";
    assert_int_equal(http_server_new(&cfg, &srv, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "TLS needs both a certificate and a key file");
    cfg.tls_key_file = "/nonexistent/key.pem";
    assert_int_equal(http_server_new(&cfg, &srv, err, sizeof(err)), GPO_EIO);
    assert_string_equal(err, "TLS certificate /nonexistent/cert.pem: No such file or directory");
}

static void ipv6_literal_binds_and_reports_the_client(void **state)
{
    struct env *e = *state;
    struct http_config cfg = test_config(e);
    struct http_server *srv = NULL;
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    struct resp r;
    char err[256];
    static const char req[] = "GET /v1/whoami HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    cfg.bind_addr = "::1";
    assert_int_equal(http_server_new(&cfg, &srv, err, sizeof(err)), 0);
    if (http_server_start(srv, err, sizeof(err)) != 0) {
        http_server_free(srv);
        assert_non_null(strstr(err, "bind [::1]:0: "));
        skip(); /* no IPv6 loopback here */
    }
    a.sin6_port = htons(http_server_port(srv));
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    conn_send(fd, req, sizeof(req) - 1);
    assert_int_equal(conn_read(fd, &r), 0);
    close(fd);
    http_server_free(srv);
    json_t *j = take_json(&r, 200);
    assert_string_equal(jstr(j, "client", NULL), "::1");
    json_decref(j);
}

/* A throwaway self-signed certificate and key, made for this test only. */
static const char TEST_CERT[] = "-----BEGIN CERTIFICATE-----\n"
                                "MIIBfzCCASWgAwIBAgIUIORsipcvW4/IMQxtL9//YwFHGa0wCgYIKoZIzj0EAwIw\n"
                                "FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTEzMDEzMzI1NloYDzIxMjYxMTA2\n"
                                "MTMzMjU2WjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO\n"
                                "PQMBBwNCAAQ55/+khZ+g0nQ03QwV/oFu6ojAL9mk8wjzUMOQ77h21wr9Pm266CWB\n"
                                "Gj/O33zG3mqhFiVHxhQ5HPm2lwqhTX7eo1MwUTAdBgNVHQ4EFgQUO/e0ZlcVpDcN\n"
                                "a+gAeIdNWzZlGaowHwYDVR0jBBgwFoAUO/e0ZlcVpDcNa+gAeIdNWzZlGaowDwYD\n"
                                "VR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBFAiEAtQiFn0wQfc3WqFn3tPro\n"
                                "sR3m3PnJbMG/gcVevMYda6ICIGSZT0oryMRgfwdSKG5I73OcpTwR9mR5S62k/3n2\n"
                                "sxrD\n"
                                "-----END CERTIFICATE-----\n";
static const char TEST_KEY[] = "-----BEGIN PRIVATE KEY-----\n"
                               "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg8PkLIfPlAaCqGn/N\n"
                               "428TEuM1xh0cMAy4OnjEimKGgs+hRANCAAQ55/+khZ+g0nQ03QwV/oFu6ojAL9mk\n"
                               "8wjzUMOQ77h21wr9Pm266CWBGj/O33zG3mqhFiVHxhQ5HPm2lwqhTX7e\n"
                               "-----END PRIVATE KEY-----\n";

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static void tls_starts_from_pem_files_and_refuses_a_bad_key(void **state)
{
    struct http_route rt[] = {{"GET", "/", h_none, 0}};
    struct http_config cfg = {.routes = rt, .nroutes = 1, .bind_addr = "[::1]"};
    struct http_server *srv = NULL;
    char dir[] = "/tmp/test_http_http.XXXXXX", cert[64], key[64], err[256];
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    write_file(cert, TEST_CERT);
    write_file(key, "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n");
    cfg.tls_cert_file = cert;
    cfg.tls_key_file = key;
    assert_int_equal(http_server_new(&cfg, &srv, err, sizeof(err)), 0);
    int rc = http_server_start(srv, err, sizeof(err));
    http_server_free(srv);
    if (rc == GPO_EIO && strstr(err, "Cannot assign requested address")) {
        skip(); /* no IPv6 loopback here */
    }
    assert_int_equal(rc, GPO_ETLS);
    assert_non_null(strstr(err, "TLS certificate or key"));
    write_file(key, TEST_KEY);
    assert_int_equal(http_server_new(&cfg, &srv, err, sizeof(err)), 0);
    assert_int_equal(http_server_start(srv, err, sizeof(err)), 0);
    assert_true(http_server_port(srv) > 0);
    assert_int_equal(http_server_start(srv, err, sizeof(err)), GPO_ESTATE);
    http_server_free(srv);
    unlink(cert);
    unlink(key);
    rmdir(dir);
}

/* Every test but two starts its own server in setup. */
#define TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(path_param_is_echoed_percent_decoded_and_bounded),
        TEST(unknown_path_is_404_and_wrong_method_405_with_allow),
        TEST(query_is_decoded_iterable_and_checked),
        TEST(json_object_body_reaches_handler),
        TEST(json_body_errors_are_400_naming_the_problem),
        TEST(body_over_limit_is_413_and_server_keeps_serving),
        TEST(bearer_token_comes_only_from_the_bearer_scheme),
        TEST(authorize_hook_guards_protected_routes_only),
        TEST(admit_hook_answers_before_routing_and_authorization),
        TEST(answers_carry_content_type_and_extra_headers),
        TEST(access_log_records_method_path_and_status),
        TEST(malformed_requests_are_answered_and_logged),
        TEST(suspended_requests_hold_no_thread_and_all_get_answers),
        TEST(completion_racing_the_suspension_is_never_lost),
        TEST(suspend_timeout_answers_without_other_event),
        TEST(completion_disarms_the_timeout),
        TEST(completion_after_client_left_is_harmless),
        TEST(stop_answers_suspended_requests_with_503),
        cmocka_unit_test(bad_route_patterns_are_refused_with_a_message),
        TEST(start_errors_name_the_address_or_file),
        TEST(ipv6_literal_binds_and_reports_the_client),
        cmocka_unit_test(tls_starts_from_pem_files_and_refuses_a_bad_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

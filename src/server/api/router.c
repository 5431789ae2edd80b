/*
 * router.c - the routers' routes (join token, as the agents'): GET
 * /v1/router/routes?since=REV&wait_ms=N, the routing table long-polled
 * (answered at once when its revision is past REV, else when it moves or
 * after wait_ms with the same revision), and POST /v1/router/report, a
 * router's load (serve/serve.h keeps it; a queue with no replica asks for
 * one at once).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/api/api.h"
#include "server/serve/serve.h"
#include "server/srv.h"
#include "base/banned.h"

static bool parse_i64(const char *v, int64_t *ret)
{
    if (!v || !*v || strlen(v) > 18 || v[0] == '-' || v[0] == '+')
        return false;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end)
        return false;
    *ret = x;
    return true;
}

static int routes_get(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    int64_t since = -1, wait = SERVE_WAIT_DEFAULT_MS;
    size_t nq = http_request_query_count(req);
    for (size_t i = 0; i < nq; i++) {
        const char *k, *v;
        http_request_query_at(req, i, &k, &v);
        bool ok = strcmp(k, "since") == 0     ? parse_i64(v, &since)
                  : strcmp(k, "wait_ms") == 0 ? parse_i64(v, &wait) && wait <= SERVE_WAIT_MAX_MS
                                              : false;
        if (!ok)
            return http_request_error(req, 400, "invalid_query",
                                      "expected since=REV (an integer) and wait_ms=N (0 to %d)",
                                      SERVE_WAIT_MAX_MS);
    }
    pthread_mutex_lock(&s->lock);
    if (since < 0 || s->serve->rev > since || since > s->serve->rev || wait == 0) {
        json_t *o = serve_routes_json(s);
        pthread_mutex_unlock(&s->lock);
        if (!o)
            return http_request_error(req, 500, "internal", "out of memory");
        return http_request_respond_json(req, 200, o);
    }
    int rc = serve_routes_wait(s, req, (unsigned)wait);
    pthread_mutex_unlock(&s->lock);
    if (rc)
        return http_request_error(req, 503, "unavailable", "the server is stopping");
    return 0;
}

/* ---- POST /v1/router/report ------------------------------------------------------ */

static int report_post(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    struct proto_router_report m = {0};
    char err[256];
    int rc = proto_router_report_decode(http_request_json(req), &m, err, sizeof(err));
    if (!rc) {
        pthread_mutex_lock(&s->lock);
        rc = serve_router_report(s, &m, srv_now_ms(s));
        pthread_mutex_unlock(&s->lock);
        proto_router_report_release(&m);
    }
    if (rc == GPO_ENOMEM)
        return http_request_error(req, 500, "internal", "out of memory");
    if (rc)
        return http_request_error(req, 400, "invalid_field", "%s", err);
    return http_request_respond_json(req, 204, NULL);
}

static const struct http_route routes[] = {
    {"GET", "/v1/router/routes", routes_get, API_ROUTE_AGENT, NULL},
    {"POST", "/v1/router/report", report_post, API_ROUTE_AGENT | HTTP_ROUTE_JSON_BODY, NULL},
};
const struct api_routes api_router_routes = {routes, sizeof(routes) / sizeof(routes[0])};

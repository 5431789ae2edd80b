#include <stdlib.h>
#include <string.h>

#include "server/srv.h"
#include "server/web.h"
#include "base/banned.h"

/* The controller's routes: data, as STYLE.md wants. */
const struct http_route srv_routes[] = {
    {"GET", "/", srv_web_index, HTTP_ROUTE_PUBLIC},
    {"GET", "/favicon.ico", srv_web_favicon, HTTP_ROUTE_PUBLIC},
    {"GET", "/v1/health", srv_api_health, HTTP_ROUTE_PUBLIC},
    /* Public to the HTTP layer: the handler asks for a token unless --metrics-public. */
    {"GET", "/metrics", srv_api_metrics, HTTP_ROUTE_PUBLIC},
    {"GET", "/v1/whoami", srv_api_whoami, 0},
    {"POST", "/v1/jobs", srv_api_job_submit, HTTP_ROUTE_JSON_BODY},
    {"GET", "/v1/jobs", srv_api_job_list, 0},
    {"GET", "/v1/jobs/{id}", srv_api_job_get, 0},
    {"POST", "/v1/jobs/{id}/cancel", srv_api_job_cancel, 0},
    {"GET", "/v1/jobs/{id}/logs", srv_api_job_logs, 0},
#define CONFIG_ROUTES(kind)                                                                        \
    {"GET", "/v1/" kind, srv_api_config_list, 0},                                                  \
        {"GET", "/v1/" kind "/{name}", srv_api_config_get, 0},                                     \
        {"PUT", "/v1/" kind "/{name}", srv_api_config_put,                                         \
         SRV_ROUTE_ADMIN | HTTP_ROUTE_JSON_BODY},                                                  \
    {                                                                                              \
        "DELETE", "/v1/" kind "/{name}", srv_api_config_delete, SRV_ROUTE_ADMIN                    \
    }
    CONFIG_ROUTES("teams"),
    CONFIG_ROUTES("pools"),
    CONFIG_ROUTES("priority-classes"),
    CONFIG_ROUTES("prices"),
#undef CONFIG_ROUTES
    {"GET", "/v1/users", srv_api_user_list, SRV_ROUTE_ADMIN},
    {"GET", "/v1/users/{name}", srv_api_user_get, 0},
    {"PUT", "/v1/users/{name}", srv_api_user_put, SRV_ROUTE_ADMIN | HTTP_ROUTE_JSON_BODY},
    {"DELETE", "/v1/users/{name}", srv_api_user_delete, SRV_ROUTE_ADMIN},
    {"POST", "/v1/users/{name}/tokens", srv_api_token_issue, SRV_ROUTE_ADMIN},
    {"GET", "/v1/nodes", srv_api_node_list, 0},
    {"PUT", "/v1/nodes/{name}", srv_api_node_put, SRV_ROUTE_AGENT | HTTP_ROUTE_JSON_BODY},
    {"POST", "/v1/nodes/{name}/heartbeat", srv_api_node_heartbeat,
     SRV_ROUTE_AGENT | HTTP_ROUTE_RAW_BODY},
    {"GET", "/v1/nodes/{name}/assignments", srv_api_node_assignments, SRV_ROUTE_AGENT},
    {"POST", "/v1/nodes/{name}/attempts/{job}/{attempt}", srv_api_node_report,
     SRV_ROUTE_AGENT | HTTP_ROUTE_JSON_BODY},
    {"POST", "/v1/nodes/{name}/drain", srv_api_node_drain, SRV_ROUTE_ADMIN},
    {"POST", "/v1/nodes/{name}/resume", srv_api_node_drain, SRV_ROUTE_ADMIN},
    {"GET", "/v1/cost", srv_api_cost, 0},
    {"GET", "/v1/budgets", srv_api_budgets, 0},
    {"GET", "/v1/metrics/series", srv_api_metrics_series, 0},
};
const size_t srv_nroutes = sizeof(srv_routes) / sizeof(srv_routes[0]);

json_t *srv_body_named(struct http_request *req, const char *name)
{
    json_t *body = json_deep_copy(http_request_json(req));
    if (!body) {
        http_request_error(req, 500, "internal", "out of memory");
        return NULL;
    }
    json_t *given = json_object_get(body, "name");
    if (given && (!json_is_string(given) || strcmp(json_string_value(given), name) != 0)) {
        json_decref(body);
        http_request_error(req, 400, "invalid_field", "field 'name': must be '%s', as in the path",
                           name);
        return NULL;
    }
    if (json_object_set_new(body, "name", json_string(name))) {
        json_decref(body);
        http_request_error(req, 500, "internal", "out of memory");
        return NULL;
    }
    return body;
}

int srv_api_health(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    json_t *o = json_object();
    if (!o)
        return http_request_error(req, 500, "internal", "out of memory");
    pthread_mutex_lock(&s->lock);
    size_t njobs = s->njobs;
    pthread_mutex_unlock(&s->lock);
    json_object_set_new(o, "status", json_string("ok"));
    json_object_set_new(o, "epoch", json_integer(s->epoch));
    json_object_set_new(o, "jobs", json_integer((json_int_t)njobs));
    return http_request_respond_json(req, 200, o);
}

int srv_api_whoami(struct http_request *req, void *ctx)
{
    (void)ctx;
    const struct srv_user *u = srv_request_user(req);
    json_t *o = json_object();
    if (!o)
        return http_request_error(req, 500, "internal", "out of memory");
    json_object_set_new(o, "name", json_string(u->name));
    json_object_set_new(o, "team", u->team[0] ? json_string(u->team) : json_null());
    json_object_set_new(o, "role", json_string(u->admin ? "admin" : "member"));
    return http_request_respond_json(req, 200, o);
}

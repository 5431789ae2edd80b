#include <stdlib.h>
#include <string.h>

#include "server/srv.h"
#include "util/banned.h"

/* The controller's routes: data, as STYLE.md wants. */
const struct http_route srv_routes[] = {
    {"GET", "/v1/health", srv_api_health, HTTP_ROUTE_PUBLIC},
    {"GET", "/v1/whoami", srv_api_whoami, 0},
    {"POST", "/v1/jobs", srv_api_job_submit, HTTP_ROUTE_JSON_BODY},
    {"GET", "/v1/jobs", srv_api_job_list, 0},
    {"GET", "/v1/jobs/{id}", srv_api_job_get, 0},
    {"POST", "/v1/jobs/{id}/cancel", srv_api_job_cancel, 0},
};
const size_t srv_nroutes = sizeof(srv_routes) / sizeof(srv_routes[0]);

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

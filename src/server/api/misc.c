/*
 * misc.c - GET /v1/health and GET /v1/whoami.
 */
#include <stdlib.h>

#include "server/api/api.h"
#include "server/lead/lead.h"
#include "server/srv.h"
#include "base/banned.h"

static int health(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    json_t *o = json_object();
    if (!o)
        return http_request_error(req, 500, "internal", "out of memory");
    pthread_mutex_lock(&s->lock);
    size_t njobs = s->jobs.n;
    pthread_mutex_unlock(&s->lock);
    json_object_set_new(o, "status", json_string("ok"));
    json_object_set_new(o, "epoch", json_integer(s->epoch));
    json_object_set_new(o, "jobs", json_integer((json_int_t)njobs));
    /* role, leader and the epoch it leads under (the same as above while it leads) */
    if (s->lead && lead_health_fields(s->lead, o) != 0) {
        json_decref(o);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    return http_request_respond_json(req, 200, o);
}

static int whoami(struct http_request *req, void *ctx)
{
    (void)ctx;
    const struct auth_user *u = api_request_user(req);
    json_t *o = json_object();
    if (!o)
        return http_request_error(req, 500, "internal", "out of memory");
    json_object_set_new(o, "name", json_string(u->name));
    json_object_set_new(o, "team", u->team[0] ? json_string(u->team) : json_null());
    json_object_set_new(o, "role", json_string(u->admin ? "admin" : "member"));
    return http_request_respond_json(req, 200, o);
}

static const struct http_route routes[] = {
    {"GET", "/v1/health", health, HTTP_ROUTE_PUBLIC, NULL},
    {"GET", "/v1/whoami", whoami, 0, NULL},
};
const struct api_routes api_misc_routes = {routes, sizeof(routes) / sizeof(routes[0])};

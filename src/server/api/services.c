/*
 * services.c - services (cluster.h: struct cluster_service) as the API
 * keeps them: list, read, create or replace (PUT, idempotent as `apply -f`
 * needs), delete. An admin writes any service, a member its own team's
 * (the body's "team", absent: the member's; and, on a replace, the stored
 * one's); the stored "user" is the writer. Reads follow the jobs' privacy:
 * a member sees another team's services while private_data leaves "jobs"
 * open (else: 404), and writes to them are 403. The rules are config.h's (kind CONFIG_SERVICES).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/api/api.h"
#include "server/serve/serve.h"
#include "server/srv.h"
#include "base/banned.h"

/* A service as GET shows it, its runtime's "status" too: a new object, or
 * NULL when out of memory. Under the state lock. */
static json_t *service_json(struct server *s, const struct cluster_service *svc)
{
    json_t *o = cluster_service_to_json(svc, 0);
    json_t *st = o ? serve_status_json(s, svc, srv_now_ms(s)) : NULL;
    if (!st || json_object_set_new(o, "status", st)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static bool sees(struct server *s, struct http_request *req, const struct cluster_service *svc)
{
    return api_user_sees(s, req, CLUSTER_PRIVATE_JOBS, svc->replica.team);
}

static int services_list(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    json_t *list = json_array();
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; list && i < s->cluster.nservices; i++) {
        const struct cluster_service *svc = &s->cluster.services[i];
        json_t *o = sees(s, req, svc) ? service_json(s, svc) : json_null();
        if (!o || (!json_is_null(o) && json_array_append(list, o))) {
            json_decref(list);
            list = NULL;
        }
        json_decref(o);
    }
    pthread_mutex_unlock(&s->lock);
    if (list)
        serve_status_cost(s, list, srv_now_ms(s));
    json_t *out = list ? json_pack("{s:o}", "services", list) : NULL;
    if (!out)
        return http_request_error(req, 500, "internal", "out of memory");
    return http_request_respond_json(req, 200, out);
}

static int service_get(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const char *name = http_request_param(req, "name");
    json_t *o = NULL;
    pthread_mutex_lock(&s->lock);
    const struct cluster_service *svc = cluster_service_get(&s->cluster, name);
    bool found = svc && sees(s, req, svc);
    if (found)
        o = service_json(s, svc);
    pthread_mutex_unlock(&s->lock);
    if (!found)
        return http_request_error(req, 404, "not_found", "no service '%s'", name);
    json_t *one = o ? json_array() : NULL;
    if (!one || json_array_append(one, o)) {
        json_decref(one);
        json_decref(o);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    serve_status_cost(s, one, srv_now_ms(s));
    json_decref(one);
    return http_request_respond_json(req, 200, o);
}

/* 0 when u may write the service `name` (an admin; a member when the
 * stored one and `team`, NULL: not said, are its own team's); else answers
 * 403 and returns -1. */
static int may_write(struct server *s, struct http_request *req, const struct auth_user *u,
                     const char *name, const char *team)
{
    const struct cluster_service *old = cluster_service_get(&s->cluster, name);
    if ((old && !auth_user_may(u, old->replica.team)) || (team && !auth_user_may(u, team))) {
        http_request_error(req, 403, "forbidden",
                           "user '%s' may write only its own team's services", u->name);
        return -1;
    }
    return 0;
}

/* The body with the server's "user", and the member's team where it names
 * none. 0, or GPO_ENOMEM. */
static int body_fill(json_t *body, const struct auth_user *u)
{
    json_t *team = json_object_get(body, "team");
    if ((!team || json_is_null(team)) && u->team[0] &&
        json_object_set_new(body, "team", json_string(u->team)))
        return GPO_ENOMEM;
    return json_object_set_new(body, "user", json_string(u->name)) ? GPO_ENOMEM : 0;
}

static int service_put(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const struct auth_user *u = api_request_user(req);
    const char *name = http_request_param(req, "name");
    json_t *body = api_body_named(req, name);
    if (!body)
        return 0;
    if (body_fill(body, u)) {
        json_decref(body);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    struct config_write *w = NULL;
    struct store_batch *b = NULL;
    char err[512];
    pthread_mutex_lock(&s->lock);
    json_t *team = json_object_get(body, "team");
    bool answered =
        may_write(s, req, u, name, json_is_string(team) ? json_string_value(team) : NULL) != 0;
    int rc = answered ? 0
                      : config_put_plan(&s->config, CONFIG_SERVICES, name, body, srv_now_ms(s), &w,
                                        &b, err, sizeof(err));
    pthread_mutex_unlock(&s->lock);
    json_decref(body);
    return answered ? 0 : api_config_write_commit(s, req, "service", rc, w, b, err);
}

static int service_delete(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const struct auth_user *u = api_request_user(req);
    const char *name = http_request_param(req, "name");
    struct config_write *w = NULL;
    struct store_batch *b = NULL;
    char err[512];
    pthread_mutex_lock(&s->lock);
    /* No such service: the plan answers 404. */
    bool answered = cluster_service_get(&s->cluster, name) && may_write(s, req, u, name, NULL);
    int rc = answered ? 0
                      : config_delete_plan(&s->config, CONFIG_SERVICES, name, srv_now_ms(s), &w, &b,
                                           err, sizeof(err));
    pthread_mutex_unlock(&s->lock);
    return answered ? 0 : api_config_write_commit(s, req, "service", rc, w, b, err);
}

static const struct http_route routes[] = {
    {"GET", "/v1/services", services_list, 0, NULL},
    {"GET", "/v1/services/{name}", service_get, 0, NULL},
    {"PUT", "/v1/services/{name}", service_put, HTTP_ROUTE_JSON_BODY, NULL},
    {"DELETE", "/v1/services/{name}", service_delete, 0, NULL},
};
const struct api_routes api_services_routes = {routes, sizeof(routes) / sizeof(routes[0])};

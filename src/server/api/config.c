/*
 * config.c - teams, pools, priority classes and prices: list, read, create
 * or replace (PUT, idempotent as `apply -f` needs), delete; and the
 * cluster-wide settings (GET and PUT /v1/settings). Reads are open to every
 * user, but for other teams' definitions while private_data keeps "teams"
 * (a member sees its own team); writes are admin routes. The rules are
 * config.h's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/api/api.h"
#include "server/sched/sched.h"
#include "server/serve/serve.h"
#include "server/srv.h"
#include "base/banned.h"

/* The kind a route serves (its arg). */
static enum config_kind kind_of(struct http_request *req)
{
    return *(const enum config_kind *)http_request_route_arg(req);
}

/* Leaves out of a team listing the teams the request's user does not see. */
static void teams_filter(struct server *s, struct http_request *req, json_t *out)
{
    json_t *list = json_object_get(out, "teams");
    for (size_t k = json_array_size(list); k-- > 0;) {
        const char *name = json_string_value(json_object_get(json_array_get(list, k), "name"));
        if (!api_user_sees(s, req, CLUSTER_PRIVATE_TEAMS, name))
            json_array_remove(list, k);
    }
}

static int config_list(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    pthread_mutex_lock(&s->lock);
    json_t *out = config_list_json(&s->config, kind_of(req));
    if (out && kind_of(req) == CONFIG_TEAMS)
        teams_filter(s, req, out);
    pthread_mutex_unlock(&s->lock);
    if (!out)
        return http_request_error(req, 500, "internal", "out of memory");
    return http_request_respond_json(req, 200, out);
}

static int config_get(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    enum config_kind k = kind_of(req);
    const char *name = http_request_param(req, "name");
    json_t *o = NULL;
    pthread_mutex_lock(&s->lock);
    /* Another team's definition is not there for a member who may not see it. */
    int rc = k == CONFIG_TEAMS && !api_user_sees(s, req, CLUSTER_PRIVATE_TEAMS, name)
                 ? GPO_ENOENT
                 : config_get_json(&s->config, k, name, &o);
    pthread_mutex_unlock(&s->lock);
    if (rc == GPO_ENOENT)
        return http_request_error(req, 404, "not_found", "no %s '%s'", config_kind_label(k), name);
    if (rc)
        return http_request_error(req, 500, "internal", "out of memory");
    return http_request_respond_json(req, 200, o);
}

/* A write between its commit and its answer. */
struct write {
    struct server *s;
    struct http_request *req;
    struct config_write *w;
    const char *label; /* "team" */
};

/* Ends a write whose commit never started. */
static void write_abort(void *ctx)
{
    struct write *wr = ctx;
    api_config_write_drop(wr->s, wr->w, NULL);
    free(wr);
}

static void write_done(void *ctx, const struct store_result *r)
{
    struct write *wr = ctx;
    struct server *s = wr->s;
    enum config_outcome out = CONFIG_CREATED;
    json_t *body = NULL;
    char err[256] = "";
    pthread_mutex_lock(&s->lock);
    bool service = config_write_is_service(wr->w);
    int rc =
        config_write_done(&s->config, wr->w, r->err, srv_now_ms(s), &out, &body, err, sizeof(err));
    if (service && !r->err && !rc)
        serve_service_changed(s);
    pthread_mutex_unlock(&s->lock);
    if (r->err)
        http_request_complete_error(wr->req, 503, "store", "the change was not stored: %s",
                                    gpo_strerror(r->err));
    else if (rc) /* on disk but not in memory: a restart loads it */
        http_request_complete_error(wr->req, 500, "internal", "%s stored, not applied: %s",
                                    wr->label, err);
    else if (out == CONFIG_REMOVED)
        http_request_complete(wr->req, 204, NULL);
    else
        http_request_complete(wr->req, out == CONFIG_REPLACED ? 200 : 201, body);
    free(wr);
}

int api_config_write_commit(struct server *s, struct http_request *req, const char *label, int rc,
                            struct config_write *w, struct store_batch *b, const char *err)
{
    if (rc)
        return api_error(req, rc, err);
    struct write *wr = calloc(1, sizeof(*wr));
    if (!wr) {
        api_config_write_drop(s, w, b);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    *wr = (struct write){.s = s, .req = req, .w = w, .label = label};
    api_commit(s, req, b, write_done, write_abort, wr);
    return 0;
}

static int config_put(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    enum config_kind k = kind_of(req);
    const char *name = http_request_param(req, "name");
    json_t *body = api_body_named(req, name);
    if (!body)
        return 0;
    struct config_write *w = NULL;
    struct store_batch *b = NULL;
    char err[512];
    pthread_mutex_lock(&s->lock);
    int rc = config_put_plan(&s->config, k, name, body, srv_now_ms(s), &w, &b, err, sizeof(err));
    pthread_mutex_unlock(&s->lock);
    json_decref(body);
    return api_config_write_commit(s, req, config_kind_label(k), rc, w, b, err);
}

static int config_delete(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    enum config_kind k = kind_of(req);
    struct config_write *w = NULL;
    struct store_batch *b = NULL;
    char err[512];
    pthread_mutex_lock(&s->lock);
    int rc = config_delete_plan(&s->config, k, http_request_param(req, "name"), srv_now_ms(s), &w,
                                &b, err, sizeof(err));
    pthread_mutex_unlock(&s->lock);
    return api_config_write_commit(s, req, config_kind_label(k), rc, w, b, err);
}

static int settings_get(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    pthread_mutex_lock(&s->lock);
    json_t *o = config_settings_json(&s->config);
    pthread_mutex_unlock(&s->lock);
    if (!o)
        return http_request_error(req, 500, "internal", "out of memory");
    return http_request_respond_json(req, 200, o);
}

static int settings_put(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    struct config_write *w = NULL;
    struct store_batch *b = NULL;
    char err[512];
    pthread_mutex_lock(&s->lock);
    int rc = config_settings_plan(&s->config, http_request_json(req), &w, &b, err, sizeof(err));
    pthread_mutex_unlock(&s->lock);
    return api_config_write_commit(s, req, "settings", rc, w, b, err);
}

static const enum config_kind teams = CONFIG_TEAMS, pools = CONFIG_POOLS, classes = CONFIG_CLASSES,
                              prices = CONFIG_PRICES;

#define KIND_ROUTES(path, arg)                                                                     \
    {"GET", "/v1/" path, config_list, 0, &arg},                                                    \
        {"GET", "/v1/" path "/{name}", config_get, 0, &arg},                                       \
        {"PUT", "/v1/" path "/{name}", config_put, API_ROUTE_ADMIN | HTTP_ROUTE_JSON_BODY, &arg},  \
    {                                                                                              \
        "DELETE", "/v1/" path "/{name}", config_delete, API_ROUTE_ADMIN, &arg                      \
    }

static const struct http_route routes[] = {
    KIND_ROUTES("teams", teams),
    KIND_ROUTES("pools", pools),
    KIND_ROUTES("priority-classes", classes),
    KIND_ROUTES("prices", prices),
    {"GET", "/v1/settings", settings_get, 0, NULL},
    {"PUT", "/v1/settings", settings_put, API_ROUTE_ADMIN | HTTP_ROUTE_JSON_BODY, NULL},
};
const struct api_routes api_config_routes = {routes, sizeof(routes) / sizeof(routes[0])};

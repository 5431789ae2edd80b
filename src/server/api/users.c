/*
 * users.c - users and their tokens. Admins create, replace and delete
 * users (name, Unix account, team, role) and issue their tokens; a user may
 * read their own record. The store is the one copy: auth reads it too.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/api/api.h"
#include "server/srv.h"
#include "util/jsonv.h"
#include "util/text.h"
#include "util/timefmt.h"
#include "util/token.h"
#include "base/banned.h"

#define LABEL_MAX 128

static json_t *user_json(const struct store_user *u)
{
    char at[TIMEFMT_RFC3339_LEN] = "";
    timefmt_rfc3339(u->created_ms, at, sizeof(at));
    return json_pack("{s:s, s:s?, s:s?, s:s, s:s}", "name", u->name, "unix_user", u->unix_user,
                     "team", u->team, "role", u->role, "created_at", at);
}

static int user_list(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    struct store_user *users = NULL;
    size_t n = 0;
    int rc = store_user_list(s->store, &users, &n);
    if (rc)
        return http_request_error(req, 503, "store", "listing users: %s", gpo_strerror(rc));
    json_t *list = json_array();
    for (size_t k = 0; list && k < n; k++) {
        json_t *o = user_json(&users[k]);
        if (!o || json_array_append_new(list, o)) {
            json_decref(list);
            list = NULL;
        }
    }
    store_users_free(users, n);
    json_t *out = list ? json_pack("{s:o}", "users", list) : NULL;
    if (!out)
        return http_request_error(req, 500, "internal", "out of memory");
    return http_request_respond_json(req, 200, out);
}

static int user_get(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const struct auth_user *me = api_request_user(req);
    const char *name = http_request_param(req, "name");
    if (!me->admin && strcmp(me->name, name) != 0)
        return http_request_error(req, 403, "forbidden", "only admins may read other users");
    struct store_user u = {0};
    int rc = store_user_get_by_name(s->store, name, &u);
    if (rc == GPO_ENOENT)
        return http_request_error(req, 404, "not_found", "no user '%s'", name);
    if (rc)
        return http_request_error(req, 503, "store", "reading user: %s", gpo_strerror(rc));
    json_t *o = user_json(&u);
    store_user_release(&u);
    if (!o)
        return http_request_error(req, 500, "internal", "out of memory");
    return http_request_respond_json(req, 200, o);
}

/* A user write between its commit and its answer. */
struct user_write {
    struct server *s;
    struct http_request *req;
    char name[CLUSTER_NAME_MAX + 1];
    unsigned status;               /* on success */
    char token[TOKEN_STR_LEN + 1]; /* a token issue: shown once, here */
};

static void user_write_done(void *ctx, const struct store_result *r)
{
    struct user_write *w = ctx;
    if (r->err == GPO_ENOENT) {
        http_request_complete_error(w->req, 404, "not_found", "no user '%s'", w->name);
    } else if (r->err) {
        http_request_complete_error(w->req, 503, "store", "the change was not stored: %s",
                                    gpo_strerror(r->err));
    } else if (w->token[0]) {
        http_request_complete(w->req, 201,
                              json_pack("{s:s, s:s}", "user", w->name, "token", w->token));
    } else if (w->status == 204) {
        http_request_complete(w->req, 204, NULL);
    } else {
        struct store_user u = {0};
        json_t *o = store_user_get_by_name(w->s->store, w->name, &u) == 0 ? user_json(&u) : NULL;
        store_user_release(&u);
        if (o)
            http_request_complete(w->req, w->status, o);
        else
            http_request_complete_error(w->req, 500, "internal", "user stored, not read back");
    }
    memset(w->token, 0, sizeof(w->token));
    free(w);
}

static void user_write_abort(void *ctx)
{
    struct user_write *w = ctx;
    memset(w->token, 0, sizeof(w->token));
    free(w);
}

static int user_commit(struct user_write *w, struct store_batch *b)
{
    api_commit(w->s, w->req, b, user_write_done, user_write_abort, w);
    return 0;
}

static struct user_write *user_write_new(struct server *s, struct http_request *req,
                                         const char *name, unsigned status)
{
    struct user_write *w = calloc(1, sizeof(*w));
    if (w) {
        w->s = s;
        w->req = req;
        w->status = status;
        snprintf(w->name, sizeof(w->name), "%s", name);
    }
    return w;
}

static int user_put(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const char *name = http_request_param(req, "name");
    json_t *body = api_body_named(req, name);
    if (!body)
        return 0;
    struct cluster_user u = {0};
    char err[512];
    int rc = cluster_user_decode(body, 0, &u, err, sizeof(err));
    json_decref(body);
    if (rc)
        return rc == GPO_ENOMEM ? http_request_error(req, 500, "internal", "out of memory")
                                : http_request_error(req, 400, "invalid_field", "%s", err);
    pthread_mutex_lock(&s->lock);
    bool team_ok = !u.team || cluster_team_get(&s->cluster, u.team);
    pthread_mutex_unlock(&s->lock);
    if (!team_ok) {
        rc = http_request_error(req, 400, "invalid_field", "field 'team': no team '%s'", u.team);
        cluster_user_release(&u);
        return rc;
    }
    struct store_user old = {0};
    bool exists = store_user_get_by_name(s->store, name, &old) == 0;
    store_user_release(&old);
    struct user_write *w = user_write_new(s, req, name, exists ? 200 : 201);
    struct store_batch *b = w ? store_batch_new() : NULL;
    rc = b ? store_batch_user_put(b, name, u.unix_user, u.team, cluster_role_name(u.role),
                                  srv_now_ms(s))
           : GPO_ENOMEM;
    cluster_user_release(&u);
    if (rc) {
        store_batch_free(b);
        free(w);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    return user_commit(w, b);
}

static int user_delete(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const char *name = http_request_param(req, "name");
    if (strcmp(api_request_user(req)->name, name) == 0)
        return http_request_error(req, 409, "conflict", "an admin cannot delete themselves");
    struct user_write *w = user_write_new(s, req, name, 204);
    struct store_batch *b = w ? store_batch_new() : NULL;
    if (!b || store_batch_user_delete(b, name)) {
        store_batch_free(b);
        free(w);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    return user_commit(w, b);
}

static int token_issue(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const char *name = http_request_param(req, "name");
    const char *label = NULL;
    size_t nq = http_request_query_count(req);
    for (size_t i = 0; i < nq; i++) {
        const char *k, *v;
        http_request_query_at(req, i, &k, &v);
        if (strcmp(k, "label") != 0 || !v || strlen(v) > LABEL_MAX)
            return http_request_error(req, 400, "invalid_query",
                                      "expected only 'label' (at most %d bytes)", LABEL_MAX);
        char err[160];
        if (jsonv_check_utf8(v, strlen(v)) != 0)
            return http_request_error(req, 400, "invalid_query", "field 'label': not valid UTF-8");
        if (text_check_line("label", v, err, sizeof(err)) != 0)
            return http_request_error(req, 400, "invalid_query", "%s", err);
        label = v;
    }
    struct user_write *w = user_write_new(s, req, name, 201);
    uint8_t hash[TOKEN_HASH_LEN];
    int rc = w ? token_generate(w->token, sizeof(w->token)) : GPO_EINVAL;
    rc = rc ? rc : token_hash(w->token, hash);
    struct store_batch *b = rc ? NULL : store_batch_new();
    if (!b || store_batch_token_put(b, name, hash, label, srv_now_ms(s))) {
        store_batch_free(b);
        free(w);
        return http_request_error(req, 500, "internal", "could not issue a token");
    }
    return user_commit(w, b);
}

static const struct http_route routes[] = {
    {"GET", "/v1/users", user_list, API_ROUTE_ADMIN, NULL},
    {"GET", "/v1/users/{name}", user_get, 0, NULL},
    {"PUT", "/v1/users/{name}", user_put, API_ROUTE_ADMIN | HTTP_ROUTE_JSON_BODY, NULL},
    {"DELETE", "/v1/users/{name}", user_delete, API_ROUTE_ADMIN, NULL},
    {"POST", "/v1/users/{name}/tokens", token_issue, API_ROUTE_ADMIN, NULL},
};
const struct api_routes api_users_routes = {routes, sizeof(routes) / sizeof(routes[0])};

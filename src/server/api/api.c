/*
 * api.c - what every handler shares (api.h): the route tables joined, the
 * authorize hook, bodies named by their path, errors by code, the commit of
 * a write, and the job as the API shows it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "core/explain.h"
#include "server/api/api.h"
#include "server/lead/lead.h"
#include "server/srv.h"
#include "util/timefmt.h"
#include "base/banned.h"

/* In the order they are matched. */
static const struct api_routes *const tables[] = {
    &api_web_routes,      &api_misc_routes,         &api_metrics_routes,  &api_jobs_routes,
    &api_jobs_ctl_routes, &api_jobs_history_routes, &api_logs_routes,     &api_config_routes,
    &api_users_routes,    &api_node_list_routes,    &api_nodes_routes,    &api_cost_routes,
    &api_steps_routes,    &api_router_routes,       &api_services_routes,
};

struct http_route *api_routes_build(size_t *ret_n)
{
    size_t n = 0;
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
        n += tables[t]->n;
    struct http_route *v = calloc(n, sizeof(*v));
    if (!v)
        return NULL;
    size_t at = 0;
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
        memcpy(&v[at], tables[t]->routes, tables[t]->n * sizeof(*v));
        at += tables[t]->n;
    }
    *ret_n = n;
    return v;
}

/* ---- who asks ------------------------------------------------------------- */

/* The request's app data. */
struct request_user {
    struct auth_user user;
    bool valid;
};

const struct auth_user *api_request_user(struct http_request *req)
{
    const struct request_user *u = http_request_app_data(req);
    return u->valid ? &u->user : NULL;
}

bool api_authorize(struct http_request *req, unsigned route_flags, void *ctx)
{
    struct server *s = ctx;
    enum auth_need need = (route_flags & API_ROUTE_AGENT)     ? AUTH_NEED_AGENT
                          : (route_flags & API_ROUTE_ADMIN)   ? AUTH_NEED_ADMIN
                          : (route_flags & API_ROUTE_METRICS) ? AUTH_NEED_METRICS
                                                              : AUTH_NEED_USER;
    struct request_user *u = http_request_app_data(req);
    switch (auth_check(&s->auth, http_request_bearer(req), need, &u->user)) {
    case AUTH_OK:
        u->valid = need != AUTH_NEED_AGENT;
        return true;
    case AUTH_NO_TOKEN:
        http_request_add_header(req, "WWW-Authenticate", "Bearer");
        http_request_error(req, 401, "unauthorized",
                           "missing bearer token (Authorization: Bearer TOKEN)");
        return false;
    case AUTH_BAD_TOKEN:
        http_request_add_header(req, "WWW-Authenticate", "Bearer error=\"invalid_token\"");
        http_request_error(req, 401, "unauthorized",
                           need == AUTH_NEED_AGENT ? "invalid join token"
                                                   : "invalid or revoked token");
        return false;
    case AUTH_NOT_AGENT:
        http_request_error(req, 403, "forbidden", "node routes take the join token");
        return false;
    case AUTH_NOT_ADMIN:
        http_request_error(req, 403, "forbidden", "only admins may do this");
        return false;
    case AUTH_NOT_METRICS:
        http_request_error(req, 403, "forbidden",
                           "GET /metrics needs an admin's token or a token of a user with role "
                           "'metrics'");
        return false;
    case AUTH_ONLY_METRICS:
        http_request_error(req, 403, "forbidden",
                           "a 'metrics' user's token reads GET /metrics only");
        return false;
    }
    return false;
}

bool api_private(const struct server *s, enum cluster_private what)
{
    return cluster_settings_private(&s->cluster.settings, what);
}

const char *api_visible_team(const struct server *s, struct http_request *req,
                             enum cluster_private what)
{
    return auth_visible_team(api_request_user(req), api_private(s, what));
}

bool api_user_sees(const struct server *s, struct http_request *req, enum cluster_private what,
                   const char *team)
{
    return auth_user_sees(api_request_user(req), api_private(s, what), team);
}

/* ---- requests and answers ------------------------------------------------------ */

json_t *api_body_named(struct http_request *req, const char *name)
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

/* The status and error code of a subsystem's code. */
static unsigned status_of(int code, const char **ret_name)
{
    switch (code) {
    case GPO_EINVAL:
    case GPO_ERANGE:
    case GPO_E2BIG:
        *ret_name = "invalid_field";
        return 400;
    case GPO_ENOENT:
        *ret_name = "not_found";
        return 404;
    case GPO_ESTATE:
    case GPO_EBUSY:
        *ret_name = "conflict";
        return 409;
    case GPO_ENOMEM:
        *ret_name = "internal";
        return 500;
    default:
        *ret_name = "store";
        return 503;
    }
}

int api_error(struct http_request *req, int code, const char *msg)
{
    const char *name;
    unsigned status = status_of(code, &name);
    if (code == GPO_EBUSY)
        http_request_add_header(req, "Retry-After", "1");
    return http_request_error(req, status, name, "%s", code == GPO_ENOMEM ? "out of memory" : msg);
}

bool api_admit(struct http_request *req, void *ctx)
{
    const struct server *s = ctx;
    return lead_admit(s->lead, req);
}

/* A write's completion, watched for a fenced commit: another controller
 * leads, and this one steps down at once. */
struct fence_watch {
    struct lead *lead;
    store_done_fn done;
    void *ctx;
};

static void watched_done(void *ctx, const struct store_result *r)
{
    struct fence_watch w = *(struct fence_watch *)ctx;
    free(ctx);
    if (r->err == GPO_EFENCED)
        lead_fenced(w.lead);
    w.done(w.ctx, r);
}

void api_commit(struct server *s, struct http_request *req, struct store_batch *b,
                store_done_fn done, void (*abort)(void *ctx), void *ctx)
{
    /* Suspend first: the completion may run before this handler returns. */
    if (http_request_suspend(req, 0, NULL, NULL) != 0) {
        store_batch_free(b);
        abort(ctx);
        http_request_error(req, 503, "unavailable", "the server is stopping");
        return;
    }
    /* Without room for the watch the lease thread finds the fence itself. */
    struct fence_watch *w = s->lead ? malloc(sizeof(*w)) : NULL;
    if (w)
        *w = (struct fence_watch){s->lead, done, ctx};
    if (store_commit(s->store, b, w ? watched_done : done, w ? (void *)w : ctx) != 0) {
        free(w);
        abort(ctx);
        http_request_complete_error(req, 503, "unavailable", "the store is closing");
    }
}

void api_config_write_drop(struct server *s, struct config_write *w, struct store_batch *b)
{
    store_batch_free(b);
    pthread_mutex_lock(&s->lock);
    config_write_drop(&s->config, w);
    pthread_mutex_unlock(&s->lock);
}

/* ---- the job as the API shows it ------------------------------------------------ */

/* Sets key to an RFC 3339 time, or null for a negative or absent one. */
static int set_time(json_t *o, const char *key, int64_t ms)
{
    char buf[TIMEFMT_RFC3339_LEN];
    if (ms < 0 || ms == STORE_NULL || timefmt_rfc3339(ms, buf, sizeof(buf)) != 0)
        return json_object_set_new(o, key, json_null());
    return json_object_set_new(o, key, json_string(buf));
}

/* "gpu_utilization_pct" (mean over its GPUs) and "gpu_memory_used_mib" (sum)
 * from the latest samples the monitor left on the attempt's shares; null
 * while any of its GPUs has not reported one. */
static int gpu_figures(json_t *o, const struct attempt *a)
{
    int64_t util = 0, mem = 0;
    bool util_ok = a->nshares > 0, mem_ok = a->nshares > 0;
    for (size_t k = 0; k < a->nshares; k++) {
        const struct attempt_share *sh = &a->shares[k];
        util_ok = util_ok && sh->sample_ms && sh->util_pct >= 0;
        mem_ok = mem_ok && sh->sample_ms && sh->mem_used_mib >= 0;
        util += sh->util_pct;
        mem += sh->mem_used_mib;
    }
    int e =
        json_object_set_new(o, "gpu_utilization_pct",
                            util_ok ? json_real((double)util / (double)a->nshares) : json_null());
    e |= json_object_set_new(o, "gpu_memory_used_mib", mem_ok ? json_integer(mem) : json_null());
    return e;
}

static json_t *current_attempt(const struct attempt *a)
{
    json_t *gpus = json_array();
    for (size_t k = 0; gpus && k < a->nshares; k++)
        json_array_append_new(gpus, json_string(a->shares[k].uuid));
    json_t *nodes = json_array();
    for (size_t k = 0; nodes && k < a->nparts; k++)
        json_array_append_new(nodes, json_string(a->parts[k].node));
    enum attempt_state st = a->kill      ? ATTEMPT_KILLING
                            : a->running ? ATTEMPT_RUNNING
                                         : ATTEMPT_ASSIGNED;
    return json_pack("{s:I, s:s, s:o*, s:o*, s:f, s:b}", "attempt", (json_int_t)a->n, "state",
                     attempt_state_name(st), "nodes", nodes, "gpus", gpus, "gpu_shares",
                     (double)attempt_gpu_milli(a) / 1000.0, "borrowed", a->borrowed);
}

json_t *api_job_json(const struct server *s, const struct job *j, int64_t now_ms)
{
    const char *cls = j->spec.priority ? j->spec.priority : cluster_class_default(&s->cluster);
    json_t *o = json_object();
    json_t *spec = jobspec_to_json(&j->spec);
    if (!o || !spec) {
        json_decref(o);
        json_decref(spec);
        return NULL;
    }
    int e = json_object_set_new(o, "id", json_integer(j->id));
    e |= json_object_set_new(o, "state", json_string(job_state_name(j->state)));
    e |= json_object_set_new(o, "user", json_string(j->user));
    e |= json_object_set_new(o, "team", json_string(j->team));
    e |= json_object_set_new(o, "priority", cls ? json_string(cls) : json_null());
    e |= set_time(o, "submitted_at", j->submit_ms);
    e |= set_time(o, "updated_at", j->updated_ms);
    if (j->array_id != STORE_NULL) {
        e |= json_object_set_new(o, "array_id", json_integer(j->array_id));
        e |= json_object_set_new(o, "array_index", json_integer(j->array_index));
    }
    e |= json_object_set_new(o, "reason", j->reason ? json_string(j->reason) : json_null());
    e |= json_object_set_new(o, "attempts_made", json_integer(j->attempts));
    e |=
        json_object_set_new(o, "hold", j->hold ? json_string(job_hold_name(j->hold)) : json_null());
    if (j->att.n)
        e |= json_object_set_new(o, "current_attempt", current_attempt(&j->att));
    if (j->state == JOB_PENDING) {
        e |= json_object_set_new(o, "wait_reason", j->wait ? json_string(j->wait) : json_null());
        e |= set_time(o, "estimated_start", j->est_start_ms);
        /* No time is promised that the running jobs' limits do not make. */
        if (j->est_start_ms == SCHED_EST_NO_LIMIT)
            e |= json_object_set_new(o, "estimated_start_note",
                                     json_string("unknown: the running jobs have no time limit"));
    }
    if (j->state == JOB_RUNNING)
        e |= gpu_figures(o, &j->att);
    e |= json_object_set_new(o, "idle", monitor_idle_job_json(j));
    /* What its attempts cost so far, the running one to now. */
    e |= json_object_set_new(o, "cost", cluster_money_json(cost_job(j, now_ms)));
    e |= json_object_set_new(o, "spec", spec);
    if (e) {
        json_decref(o);
        return NULL;
    }
    return o;
}

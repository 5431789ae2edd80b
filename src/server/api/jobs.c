/*
 * jobs.c - POST /v1/jobs (submit: a job or an array, durable before the
 * 201, once per Idempotency-Key), GET /v1/jobs[/ID], and POST
 * /v1/jobs/ID/cancel. A member sees and acts on their team's jobs only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/api/api.h"
#include "server/sched/sched.h"
#include "server/srv.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define IDEMPOTENCY_KEY_MAX 255
#define LIST_DEFAULT        100
#define LIST_MAX            1000

/* A submission between its commit and its answer. */
struct submit {
    struct server *s;
    struct http_request *req;
    struct job_submit job;
};

static void submit_free(void *ctx)
{
    struct submit *sub = ctx;
    job_submit_release(&sub->job);
    free(sub);
}

/* Parses a positive job id from a path parameter or query value. */
static bool parse_id(const char *text, int64_t *ret)
{
    if (!text || !*text || strlen(text) > 19)
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || v < 1 || text[0] == '+' || text[0] == '-')
        return false;
    *ret = v;
    return true;
}

static bool key_ok(const char *k)
{
    size_t n = strlen(k);
    if (n < 1 || n > IDEMPOTENCY_KEY_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (k[i] < 0x21 || k[i] > 0x7e)
            return false;
    }
    return true;
}

/* The store's completion of a submission (writer thread): the jobs are
 * durable; put them in memory and answer. */
static void submit_done(void *ctx, const struct store_result *r)
{
    struct submit *sub = ctx;
    struct server *s = sub->s;
    if (r->err == GPO_EEXIST && r->existing_job_id > 0) {
        /* A retry with a key seen before: answer with the job it made. */
        pthread_mutex_lock(&s->lock);
        struct job *j = jobs_find(&s->jobs, r->existing_job_id);
        json_t *o = j ? api_job_json(s, j, srv_now_ms(s)) : NULL;
        pthread_mutex_unlock(&s->lock);
        if (o)
            http_request_complete(sub->req, 200, o);
        else
            http_request_complete_error(
                sub->req, 409, "conflict",
                "Idempotency-Key was used for job %" PRId64 ", which is gone", r->existing_job_id);
        submit_free(sub);
        return;
    }
    if (r->err) {
        http_request_complete_error(sub->req, 503, "store", "the job was not stored: %s%s%s",
                                    gpo_strerror(r->err), r->msg[0] ? ": " : "", r->msg);
        submit_free(sub);
        return;
    }
    json_t *first = NULL;
    struct job *j = NULL;
    pthread_mutex_lock(&s->lock);
    int rc = job_submit_apply(&s->jobs, &sub->job, r->job_ids, r->njob_ids, &j);
    if (!rc && j)
        first = api_job_json(s, j, srv_now_ms(s));
    sched_wake(s->sched, SCHED_WHY_SUBMIT);
    pthread_mutex_unlock(&s->lock);
    if (rc || !first) {
        /* Durable but not in memory: a restart loads it. Say so. */
        json_decref(first);
        http_request_complete_error(sub->req, 500, "internal",
                                    "job %" PRId64
                                    " was stored but is not in memory (out of memory); a "
                                    "restart loads it",
                                    r->njob_ids ? r->job_ids[0] : 0);
    } else {
        if (sub->job.ntasks > 1 || sub->job.spec.array.n) {
            json_t *ids = json_array();
            for (size_t k = 0; ids && k < r->njob_ids; k++)
                json_array_append_new(ids, json_integer(r->job_ids[k]));
            json_object_set_new(first, "array_jobs", ids ? ids : json_null());
        }
        http_request_complete(sub->req, 201, first);
    }
    submit_free(sub);
}

/* The checks that need the server's state: the team, dependencies. Under
 * the lock. Answers and returns false on a problem. */
static bool submit_check(struct server *s, struct http_request *req, const struct auth_user *u,
                         struct jobspec *spec)
{
    if (!spec->team) {
        if (!u->team[0]) {
            http_request_error(req, 400, "invalid_field",
                               "field 'team': required, since user '%s' has no team", u->name);
            return false;
        }
        if (!(spec->team = strdup(u->team))) {
            http_request_error(req, 500, "internal", "out of memory");
            return false;
        }
    }
    if (!cluster_team_get(&s->cluster, spec->team)) {
        http_request_error(req, 400, "invalid_field", "field 'team': no team '%s'", spec->team);
        return false;
    }
    if (spec->priority && !cluster_class_get(&s->cluster, spec->priority)) {
        http_request_error(req, 400, "invalid_field", "field 'priority': no priority class '%s'",
                           spec->priority);
        return false;
    }
    char msg[512];
    int rc = job_submit_resolve(&s->cluster, spec, msg, sizeof(msg));
    if (rc) {
        if (rc == GPO_ENOMEM)
            http_request_error(req, 500, "internal", "out of memory");
        else
            http_request_error(req, 400, "invalid_field", "%s", msg);
        return false;
    }
    if (!auth_user_may(u, spec->team)) {
        http_request_error(req, 403, "forbidden", "user '%s' may not submit for another team",
                           u->name);
        return false;
    }
    char why[512];
    if (cost_blocks(&s->cost, spec->team, spec->priority, srv_now_ms(s), why, sizeof(why))) {
        http_request_error(req, 403, "budget_exceeded", "%s", why);
        return false;
    }
    for (size_t k = 0; k < spec->ndeps; k++) {
        const struct job *d = jobs_find(&s->jobs, spec->deps[k].job);
        if (!d || !auth_user_may(u, d->team)) {
            http_request_error(req, 400, "invalid_field",
                               "field 'dependencies[%zu].job': no job %" PRId64, k,
                               spec->deps[k].job);
            return false;
        }
    }
    return true;
}

static int job_submit(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const struct auth_user *u = api_request_user(req);
    const char *key = http_request_header(req, "Idempotency-Key");
    if (key && !key_ok(key))
        return http_request_error(req, 400, "invalid_header",
                                  "Idempotency-Key: expected 1 to %d printable ASCII characters",
                                  IDEMPOTENCY_KEY_MAX);
    struct submit *sub = calloc(1, sizeof(*sub));
    if (!sub)
        return http_request_error(req, 500, "internal", "out of memory");
    sub->s = s;
    sub->req = req;
    sub->job.user_id = u->id;
    snprintf(sub->job.user, sizeof(sub->job.user), "%s", u->name);
    snprintf(sub->job.unix_user, sizeof(sub->job.unix_user), "%s", u->unix_user);
    char msg[512];
    int rc = jobspec_decode(http_request_json(req), &sub->job.spec, msg, sizeof(msg));
    if (rc) {
        free(sub);
        return rc == GPO_ENOMEM ? http_request_error(req, 500, "internal", "out of memory")
                                : http_request_error(req, 400, "invalid_field", "%s", msg);
    }
    pthread_mutex_lock(&s->lock);
    bool ok = submit_check(s, req, u, &sub->job.spec);
    pthread_mutex_unlock(&s->lock);
    if (!ok) {
        submit_free(sub);
        return 0;
    }
    sub->job.submit_ms = srv_now_ms(s);
    /* Held at submit as scontrol would hold it: an admin's hold is an admin's. */
    sub->job.hold = !sub->job.spec.hold ? JOB_HOLD_NONE : u->admin ? JOB_HOLD_ADMIN : JOB_HOLD_USER;
    sub->job.idempotency_ttl_ms = s->cfg.idempotency_ttl_ms;
    sub->job.ntasks = sub->job.spec.array.n ? sub->job.spec.array.n : 1;
    struct store_batch *b = store_batch_new();
    rc = b ? job_submit_rows(&sub->job, key, b) : GPO_ENOMEM;
    if (rc) {
        store_batch_free(b);
        submit_free(sub);
        return http_request_error(req, 500, "internal", "building the commit: %s",
                                  gpo_strerror(rc));
    }
    api_commit(s, req, b, submit_done, submit_free, sub);
    return 0;
}

/* The job named by the path, that the user may read (`act` false: its team's,
 * or any under private_data without "jobs") or act on (`act`: its team's);
 * answers 404/403 itself. Under the lock. */
static struct job *job_of_request(struct server *s, struct http_request *req, bool act)
{
    int64_t id;
    if (!parse_id(http_request_param(req, "id"), &id)) {
        http_request_error(req, 400, "invalid_path", "job id: expected a positive integer");
        return NULL;
    }
    struct job *j = jobs_find(&s->jobs, id);
    if (!j) {
        http_request_error(req, 404, "not_found", "no job %" PRId64, id);
        return NULL;
    }
    const struct auth_user *u = api_request_user(req);
    if (act ? !auth_user_may(u, j->team) : !api_user_sees(s, req, CLUSTER_PRIVATE_JOBS, j->team)) {
        http_request_error(req, 403, "forbidden", "job %" PRId64 " belongs to another team", id);
        return NULL;
    }
    return j;
}

json_t *api_job_shown(struct server *s, struct http_request *req, const struct job *j,
                      int64_t now_ms)
{
    json_t *o = api_job_json(s, j, now_ms);
    if (o && !api_user_sees(s, req, CLUSTER_PRIVATE_USAGE, j->team)) {
        static const char *const usage[] = {"gpu_utilization_pct", "gpu_memory_used_mib", "idle",
                                            "cost"};
        for (size_t k = 0; k < sizeof(usage) / sizeof(usage[0]); k++)
            json_object_del(o, usage[k]);
    }
    return o;
}

json_t *api_job_attempts(struct server *s, int64_t id)
{
    struct store_job row = {0};
    if (store_job_get(s->store, id, &row) != 0)
        return NULL;
    json_t *list = json_array();
    for (size_t k = 0; list && k < row.nattempts; k++) {
        const struct store_attempt *a = &row.attempts[k];
        char start[TIMEFMT_RFC3339_LEN] = "", end[TIMEFMT_RFC3339_LEN] = "";
        if (a->start_ms != STORE_NULL)
            timefmt_rfc3339(a->start_ms, start, sizeof(start));
        if (a->end_ms != STORE_NULL)
            timefmt_rfc3339(a->end_ms, end, sizeof(end));
        json_t *nodes = a->nodes ? json_loads(a->nodes, 0, NULL) : NULL;
        json_t *gpus = a->gpus ? json_loads(a->gpus, 0, NULL) : NULL;
        json_t *names = json_array();
        json_t *parts = json_object_get(nodes, "parts");
        for (size_t p = 0; names && p < json_array_size(parts); p++)
            json_array_append(names, json_object_get(json_array_get(parts, p), "node"));
        json_t *o = json_pack(
            "{s:I, s:s, s:o, s:o*, s:s?, s:s?, s:o, s:o, s:s?, s:I}", "attempt",
            (json_int_t)a->attempt, "state", a->state, "nodes", names ? names : json_array(),
            "gpus", gpus, "started_at", start[0] ? start : NULL, "ended_at", end[0] ? end : NULL,
            "exit_code", a->exit_code == STORE_NULL ? json_null() : json_integer(a->exit_code),
            "signal", a->signal == STORE_NULL ? json_null() : json_integer(a->signal), "reason",
            a->reason, "epoch", (json_int_t)a->epoch);
        json_decref(nodes);
        if (!o || json_array_append_new(list, o)) {
            json_decref(list);
            list = NULL;
        }
    }
    store_job_release(&row);
    return list;
}

static int job_get(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    pthread_mutex_lock(&s->lock);
    struct job *j = job_of_request(s, req, false);
    json_t *o = j ? api_job_shown(s, req, j, srv_now_ms(s)) : NULL;
    int64_t id = j ? j->id : 0;
    pthread_mutex_unlock(&s->lock);
    if (!j)
        return 0;
    json_t *atts = o ? api_job_attempts(s, id) : NULL;
    if (!o || !atts || json_object_set_new(o, "attempts", atts)) {
        json_decref(o);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    return http_request_respond_json(req, 200, o);
}

struct list_query {
    bool states[JOB_NSTATES];
    bool any_state;
    const char *team, *user;
    int64_t after;
    int64_t limit;
};

/* Reads the list's query; answers 400 itself on a problem. */
static bool list_query_parse(struct http_request *req, struct list_query *q)
{
    *q = (struct list_query){.any_state = true, .limit = LIST_DEFAULT};
    size_t n = http_request_query_count(req);
    for (size_t i = 0; i < n; i++) {
        const char *name, *value;
        http_request_query_at(req, i, &name, &value);
        if (strcmp(name, "state") == 0) {
            q->any_state = false;
            char buf[256];
            snprintf(buf, sizeof(buf), "%s", value ? value : "");
            char *save = NULL;
            for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                int st = job_state_parse(t);
                if (st < 0) {
                    http_request_error(req, 400, "invalid_query",
                                       "state: '%.40s' is not a job state (PENDING, RUNNING, "
                                       "COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED, "
                                       "NODE_FAIL)",
                                       t);
                    return false;
                }
                q->states[st] = true;
            }
        } else if (strcmp(name, "team") == 0 && value && *value) {
            q->team = value;
        } else if (strcmp(name, "user") == 0 && value && *value) {
            q->user = value;
        } else if (strcmp(name, "after") == 0) {
            if (!(value && strcmp(value, "0") == 0) && !parse_id(value, &q->after)) {
                http_request_error(req, 400, "invalid_query",
                                   "after: expected a job id (an integer >= 0)");
                return false;
            }
        } else if (strcmp(name, "limit") == 0) {
            if (!parse_id(value, &q->limit) || q->limit > LIST_MAX) {
                http_request_error(req, 400, "invalid_query", "limit: expected 1 to %d", LIST_MAX);
                return false;
            }
        } else {
            http_request_error(req, 400, "invalid_query",
                               "unknown query parameter '%.40s' (state, team, user, after, "
                               "limit)",
                               name);
            return false;
        }
    }
    return true;
}

static int job_list(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const struct auth_user *u = api_request_user(req);
    struct list_query q;
    if (!list_query_parse(req, &q))
        return 0;
    pthread_mutex_lock(&s->lock);
    bool may = !q.team || api_user_sees(s, req, CLUSTER_PRIVATE_JOBS, q.team);
    pthread_mutex_unlock(&s->lock);
    if (!may)
        return http_request_error(req, 403, "forbidden", "user '%s' may not list another team",
                                  u->name);
    json_t *list = json_array();
    json_t *out = json_object();
    if (!list || !out) {
        json_decref(list);
        json_decref(out);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    int64_t last = 0;
    bool more = false;
    pthread_mutex_lock(&s->lock);
    /* Keyset paging: the first job after `after`, in id order. */
    int64_t now = srv_now_ms(s);
    for (size_t k = jobs_index(&s->jobs, q.after + 1); k < s->jobs.n; k++) {
        const struct job *j = s->jobs.v[k];
        if (!api_user_sees(s, req, CLUSTER_PRIVATE_JOBS, j->team) ||
            (q.team && strcmp(q.team, j->team) != 0) || (q.user && strcmp(q.user, j->user) != 0) ||
            (!q.any_state && !q.states[j->state]))
            continue;
        if ((int64_t)json_array_size(list) == q.limit) {
            more = true;
            break;
        }
        json_t *o = api_job_shown(s, req, j, now);
        if (!o || json_array_append_new(list, o)) {
            pthread_mutex_unlock(&s->lock);
            json_decref(list);
            json_decref(out);
            return http_request_error(req, 500, "internal", "out of memory");
        }
        last = j->id;
    }
    pthread_mutex_unlock(&s->lock);
    json_object_set_new(out, "jobs", list);
    json_object_set_new(out, "next_after", more ? json_integer(last) : json_null());
    return http_request_respond_json(req, 200, out);
}

/* A cancel between its commit and its answer. */
struct cancel {
    struct server *s;
    struct http_request *req;
    int64_t id, attempt; /* attempt: the one to kill, or 0 for a job that holds nothing */
    int64_t at_ms;
};

static void cancel_free(void *ctx)
{
    free(ctx);
}

static void cancel_done(void *ctx, const struct store_result *r)
{
    struct cancel *c = ctx;
    struct server *s = c->s;
    if (r->err) {
        http_request_complete_error(c->req, 503, "store", "the cancel was not stored: %s",
                                    gpo_strerror(r->err));
        free(c);
        return;
    }
    pthread_mutex_lock(&s->lock);
    struct job *j = sched_cancel_apply(s, c->id, c->attempt, c->at_ms);
    json_t *o = j ? api_job_json(s, j, srv_now_ms(s)) : NULL;
    pthread_mutex_unlock(&s->lock);
    if (o)
        http_request_complete(c->req, c->attempt ? 202 : 200, o);
    else
        http_request_complete_error(c->req, 500, "internal", "out of memory");
    free(c);
}

static int job_cancel(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    pthread_mutex_lock(&s->lock);
    struct job *j = job_of_request(s, req, true);
    if (!j) {
        pthread_mutex_unlock(&s->lock);
        return 0;
    }
    if (job_state_final(j->state) || (j->att.n && j->att.kill)) {
        int64_t id = j->id;
        const char *st = job_state_name(j->state);
        pthread_mutex_unlock(&s->lock);
        return http_request_error(req, 409, "conflict", "job %" PRId64 " has ended (%s)", id, st);
    }
    struct cancel *c = calloc(1, sizeof(*c));
    struct store_batch *b = c ? store_batch_new() : NULL;
    int rc = b ? 0 : GPO_ENOMEM;
    if (!rc) {
        *c = (struct cancel){.s = s, .req = req, .id = j->id, .at_ms = srv_now_ms(s)};
        rc = sched_cancel_plan(s, j, c->at_ms, b, &c->attempt);
    }
    pthread_mutex_unlock(&s->lock);
    if (rc) {
        store_batch_free(b);
        free(c);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    api_commit(s, req, b, cancel_done, cancel_free, c);
    return 0;
}

static const struct http_route routes[] = {
    {"POST", "/v1/jobs", job_submit, HTTP_ROUTE_JSON_BODY, NULL},
    {"GET", "/v1/jobs", job_list, 0, NULL},
    {"GET", "/v1/jobs/{id}", job_get, 0, NULL},
    {"POST", "/v1/jobs/{id}/cancel", job_cancel, 0, NULL},
};
const struct api_routes api_jobs_routes = {routes, sizeof(routes) / sizeof(routes[0])};

/*
 * nodes.c - nodes and their agents: registration, heartbeats, the
 * long-polled assignments, attempt reports; listing, drain and resume.
 *
 * Each node has a revision of its assignments, bumped whenever what the
 * controller wants of it changes (an attempt assigned, to be killed, or
 * ended). An agent's long-poll with since=REV waits, suspended and holding
 * no thread, until the revision passes REV or its wait runs out
 * (nodes/nodes.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "base/err.h"
#include "server/api/api.h"
#include "server/sched/sched.h"
#include "server/srv.h"
#include "util/jsonv.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define WAIT_DEFAULT_S 30
#define WAIT_MAX_S     300

/* The port rank 0 of a gang listens on (MASTER_PORT): a function of the job, in
 * 20000..27999, below Linux's ephemeral range, so ranks agree without talking. */
#define GANG_PORT_BASE  20000
#define GANG_PORT_RANGE 8000

static const char *node_param(struct http_request *req)
{
    return http_request_param(req, "name");
}

static bool parse_u64(const char *v, uint64_t *ret)
{
    if (!v || !*v || strlen(v) > 19)
        return false;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || v[0] == '-' || v[0] == '+')
        return false;
    *ret = x;
    return true;
}

/* ---- what the controller wants of a node ---------------------------------- */

/* Where an attempt runs, for its processes' environment: every node in rank
 * order, this node's rank, and rank 0's address. 0 or GPO_ENOMEM. */
static int add_gang(struct server *s, json_t *a, const struct job *j, const char *node)
{
    json_t *nodes = json_array();
    size_t rank = 0;
    for (size_t k = 0; nodes && k < j->att.nparts; k++) {
        if (strcmp(j->att.parts[k].node, node) == 0)
            rank = k;
        if (json_array_append_new(nodes, json_string(j->att.parts[k].node)))
            json_decref(nodes), nodes = NULL;
    }
    const struct cluster_node *n0 =
        j->att.nparts ? cluster_node_get(&s->cluster, j->att.parts[0].node) : NULL;
    const char *master = n0 && n0->addr ? n0->addr : (j->att.nparts ? j->att.parts[0].node : "");
    json_t *g = nodes ? json_pack("{s:o, s:I, s:s, s:I}", "nodes", nodes, "rank", (json_int_t)rank,
                                  "master_addr", master, "master_port",
                                  (json_int_t)(GANG_PORT_BASE + j->id % GANG_PORT_RANGE))
                      : NULL;
    return g && json_object_set_new(a, "gang", g) == 0 ? 0 : GPO_ENOMEM;
}

/* One attempt as node `node`'s agent reads it: run it, or kill it. */
static json_t *assignment(struct server *s, const struct job *j, const char *node)
{
    if (j->att.kill) {
        char reason[160];
        attempt_kill_reason(&j->att, reason, sizeof(reason));
        return json_pack("{s:I, s:I, s:s, s:I, s:s}", "job", (json_int_t)j->id, "attempt",
                         (json_int_t)j->att.n, "action", "kill", "grace_s",
                         (json_int_t)(j->att.grace_ms / 1000), "reason", reason);
    }
    json_t *gpus = json_array();
    for (size_t g = 0; gpus && g < j->att.nshares; g++) {
        if (strcmp(j->att.shares[g].node, node) == 0)
            json_array_append_new(gpus, json_pack("{s:s, s:I, s:I}", "uuid", j->att.shares[g].uuid,
                                                  "milli", (json_int_t)j->att.shares[g].milli,
                                                  "mem_mib", (json_int_t)j->att.shares[g].mem_mib));
    }
    json_t *a = json_pack("{s:I, s:I, s:s, s:o*, s:s, s:s?, s:o*}", "job", (json_int_t)j->id,
                          "attempt", (json_int_t)j->att.n, "action", "run", "gpus", gpus, "user",
                          j->user, "unix_user", j->unix_user, "spec", jobspec_to_json(&j->spec));
    if (a && add_gang(s, a, j, node))
        json_decref(a), a = NULL;
    if (a && j->array_id != STORE_NULL &&
        (json_object_set_new(a, "array_id", json_integer((json_int_t)j->array_id)) ||
         json_object_set_new(a, "array_index", json_integer((json_int_t)j->array_index))))
        json_decref(a), a = NULL;
    return a;
}

json_t *api_node_answer(void *ctx, const struct node_rt *rt)
{
    struct server *s = ctx;
    json_t *list = json_array();
    for (size_t k = 0; list && k < s->jobs.n; k++) {
        const struct job *j = s->jobs.v[k];
        if (!j->att.n || !attempt_on_node(&j->att, rt->name))
            continue;
        json_t *a = assignment(s, j, rt->name);
        if (!a || json_array_append_new(list, a)) {
            json_decref(list);
            list = NULL;
        }
    }
    return list ? json_pack("{s:I, s:s, s:o}", "rev", (json_int_t)rt->rev, "node", rt->name,
                            "attempts", list)
                : NULL;
}

/* ---- agent routes: heartbeats and long-polls -------------------------------- */

/* A heartbeat's body, when it has one: {"gpus": [per-GPU figures], "dirty":
 * [UUID, ...], "sampled_at_ms": T}. 0 with *ret (NULL without a body), or
 * -1 once it answered 400. */
static int sample_parse(struct http_request *req, json_t **ret)
{
    size_t len = 0;
    const char *body = http_request_body(req, &len);
    *ret = NULL;
    if (!len)
        return 0;
    json_error_t e;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &e);
    json_t *gpus = o ? json_object_get(o, "gpus") : NULL;
    json_t *dirty = o ? json_object_get(o, "dirty") : NULL;
    json_t *at = o ? json_object_get(o, "sampled_at_ms") : NULL; /* the monitor's lag */
    bool dirty_ok = (!dirty || json_is_array(dirty)) && (!at || json_is_integer(at));
    for (size_t k = 0; dirty_ok && k < json_array_size(dirty); k++)
        dirty_ok = json_is_string(json_array_get(dirty, k));
    if (!json_is_object(o) || !json_is_array(gpus) || !dirty_ok || json_object_size(o) > 4) {
        json_decref(o);
        http_request_error(req, 400, "invalid_field",
                           "heartbeat body: expected {\"gpus\": [...], \"dirty\": [UUID, ...],"
                           " \"sampled_at_ms\": integer}%s%s",
                           o ? "" : ": ", o ? "" : e.text);
        return -1;
    }
    *ret = o;
    return 0;
}

static int node_heartbeat(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    json_t *sample = NULL;
    if (sample_parse(req, &sample))
        return 0;
    pthread_mutex_lock(&s->lock);
    struct node_rt *rt = nodes_find(&s->nodes, node_param(req));
    if (rt) {
        nodes_heartbeat(rt, sample, srv_now_ms(s));
        if (sample)
            monitor_heartbeat(&s->monitor, rt->name, rt->sample, rt->sample_ms);
        sample = NULL; /* the node's now */
    }
    pthread_mutex_unlock(&s->lock);
    json_decref(sample);
    if (!rt)
        return http_request_error(req, 404, "not_found", "no node '%s' (register it first)",
                                  node_param(req));
    return http_request_respond_json(req, 204, NULL);
}

static int node_assignments(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    uint64_t since = 0, wait = WAIT_DEFAULT_S;
    bool has_since = false;
    size_t nq = http_request_query_count(req);
    for (size_t i = 0; i < nq; i++) {
        const char *k, *v;
        http_request_query_at(req, i, &k, &v);
        if (strcmp(k, "since") == 0 && parse_u64(v, &since)) {
            has_since = true;
        } else if (strcmp(k, "wait") == 0 && parse_u64(v, &wait) && wait <= WAIT_MAX_S) {
        } else {
            return http_request_error(req, 400, "invalid_query",
                                      "expected since=REV (an integer) and wait=S (0 to %d)",
                                      WAIT_MAX_S);
        }
    }
    pthread_mutex_lock(&s->lock);
    struct node_rt *rt = nodes_find(&s->nodes, node_param(req));
    if (!rt) {
        pthread_mutex_unlock(&s->lock);
        return http_request_error(req, 404, "not_found", "no node '%s' (register it first)",
                                  node_param(req));
    }
    rt->last_heartbeat_ms = srv_now_ms(s); /* a poll is a sign of life too */
    if (!has_since || rt->rev > since || wait == 0) {
        json_t *o = api_node_answer(s, rt);
        pthread_mutex_unlock(&s->lock);
        if (!o)
            return http_request_error(req, 500, "internal", "out of memory");
        return http_request_respond_json(req, 200, o);
    }
    int rc = nodes_wait(&s->nodes, rt, req, (unsigned)wait * 1000);
    pthread_mutex_unlock(&s->lock);
    if (rc)
        return http_request_error(req, 503, "unavailable", "the server is stopping");
    return 0;
}

/* ---- agent routes: reports --------------------------------------------------- */

/* A report between its commit and its answer. */
struct report {
    struct server *s;
    struct http_request *req;
    struct sched_end end;
    bool started; /* a RUNNING report */
};

static void report_abort(void *ctx)
{
    free(ctx);
}

static void report_done(void *ctx, const struct store_result *r)
{
    struct report *rp = ctx;
    struct server *s = rp->s;
    if (r->err) {
        http_request_complete_error(rp->req, 503, "store", "the report was not stored: %s",
                                    gpo_strerror(r->err));
        free(rp);
        return;
    }
    pthread_mutex_lock(&s->lock);
    struct job *j = jobs_find(&s->jobs, rp->end.end.job);
    if (rp->started) {
        if (j && j->att.n == rp->end.end.attempt)
            j->att.running = true;
    } else {
        sched_end_apply(s, &rp->end);
    }
    json_t *o = j ? api_job_json(j, srv_now_ms(s)) : NULL;
    pthread_mutex_unlock(&s->lock);
    if (o)
        http_request_complete(rp->req, 200, o);
    else
        http_request_complete_error(rp->req, 500, "internal", "out of memory");
    free(rp);
}

struct report_body {
    int state;
    int64_t exit_code, signal;
    char *reason;
    char **dirty; /* GPUs the attempt's processes still occupy */
    size_t ndirty;
};

/* What an agent reports an attempt as: running, or how it ended. */
static const char *const report_states[] = {"RUNNING",   "COMPLETED", "FAILED", "TIMEOUT",
                                            "CANCELLED", "PREEMPTED", NULL};

static const struct jsonv_field report_fields[] = {
    {.name = "state",
     .kind = JSONV_ENUM,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct report_body, state),
     .choices = report_states},
    {.name = "exit_code",
     .kind = JSONV_INT64,
     .offset = offsetof(struct report_body, exit_code),
     .min = 0,
     .max = 255},
    {.name = "signal",
     .kind = JSONV_INT64,
     .offset = offsetof(struct report_body, signal),
     .min = 0,
     .max = 64},
    {.name = "reason",
     .kind = JSONV_STRING,
     .offset = offsetof(struct report_body, reason),
     .min = 0,
     .max = 120},
    {.name = "dirty_gpus",
     .kind = JSONV_STRINGS,
     .offset = offsetof(struct report_body, dirty),
     .count_offset = offsetof(struct report_body, ndirty),
     .min = 1,
     .max = CLUSTER_UUID_MAX,
     .max_items = SCHED_MAX_GPUS_PER_NODE},
};
#define NREPORT_FIELDS (sizeof(report_fields) / sizeof(report_fields[0]))

/* A gang completes when every rank has: until then a rank's COMPLETED is
 * noted and answered 202, and its agent repeats it (so a controller restart
 * loses nothing). Any other end of one rank ends them all. The ranks still
 * to complete after node's. */
static size_t gang_ranks_left(struct job *j, const char *node)
{
    size_t waiting = 0;
    for (size_t k = 0; k < j->att.nparts; k++) {
        if (strcmp(j->att.parts[k].node, node) == 0)
            j->att.parts[k].completed = true;
        waiting += !j->att.parts[k].completed;
    }
    return waiting;
}

/* Plans the rows of a report on job j's attempt from `node` into b; under
 * the lock. 0 or GPO_ENOMEM. */
static int report_plan(struct server *s, struct job *j, const char *node,
                       const struct report_body *body, int64_t now_ms, struct report *rp,
                       struct store_batch *b)
{
    nodes_find(&s->nodes, node)->last_heartbeat_ms = now_ms;
    rp->end.end.job = j->id;
    rp->end.end.attempt = j->att.n;
    if (body->state == 0) {
        rp->started = true;
        return attempt_row(b, s->epoch, j->id, &j->att, ATTEMPT_RUNNING, NULL, STORE_NULL,
                           STORE_NULL, STORE_NULL);
    }
    int st = attempt_state_parse(report_states[body->state]);
    int rc = sched_end_plan(s, j, (enum attempt_state)st, body->exit_code, body->signal,
                            body->reason, now_ms, &rp->end, b);
    /* Held back from now on, not from the agent's next heartbeat. */
    nodes_dirty_add(nodes_find(&s->nodes, node), body->dirty, body->ndirty);
    return rc;
}

static int report_refused(struct http_request *req, const char *problem, const char *node,
                          uint64_t job, uint64_t attempt)
{
    if (strcmp(problem, "attempt") == 0)
        return http_request_error(req, 409, "conflict",
                                  "job %" PRIu64 " has no attempt %" PRIu64
                                  " running on node '%s' (ended, or not this node's)",
                                  job, attempt, node);
    return http_request_error(req, 404, "not_found", "no %s '%s'", problem,
                              strcmp(problem, "node") == 0 ? node : http_request_param(req, "job"));
}

static int node_report(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    uint64_t job, attempt;
    if (!parse_u64(http_request_param(req, "job"), &job) ||
        !parse_u64(http_request_param(req, "attempt"), &attempt) || !job || !attempt)
        return http_request_error(req, 400, "invalid_path",
                                  "expected /v1/nodes/NODE/attempts/JOB/ATTEMPT with positive ids");
    struct report_body body = {.exit_code = STORE_NULL, .signal = STORE_NULL};
    char err[256];
    if (jsonv_decode(http_request_json(req), report_fields, NREPORT_FIELDS, &body, err,
                     sizeof(err)))
        return http_request_error(req, 400, "invalid_field", "%s", err);
    struct report *rp = calloc(1, sizeof(*rp));
    struct store_batch *b = rp ? store_batch_new() : NULL;
    if (!b) {
        free(rp);
        jsonv_release(report_fields, NREPORT_FIELDS, &body);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    rp->s = s;
    rp->req = req;
    const char *node = node_param(req);
    int64_t now = srv_now_ms(s);
    pthread_mutex_lock(&s->lock);
    struct job *j = jobs_find(&s->jobs, (int64_t)job);
    const char *problem = !nodes_find(&s->nodes, node) ? "node"
                          : !j                         ? "job"
                          : j->att.n != (int64_t)attempt || !attempt_on_node(&j->att, node)
                              ? "attempt"
                              : NULL;
    size_t waiting =
        !problem && body.state == 1 && j->att.nparts > 1 ? gang_ranks_left(j, node) : 0;
    int rc = 0;
    if (waiting)
        nodes_find(&s->nodes, node)->last_heartbeat_ms = now;
    else if (!problem)
        rc = report_plan(s, j, node, &body, now, rp, b);
    pthread_mutex_unlock(&s->lock);
    jsonv_release(report_fields, NREPORT_FIELDS, &body);
    if (waiting || problem || rc) {
        store_batch_free(b);
        free(rp);
        if (waiting)
            return http_request_respond_json(req, 202,
                                             json_pack("{s:s, s:I}", "status",
                                                       "waiting for the gang's other ranks",
                                                       "ranks_left", (json_int_t)waiting));
        if (problem)
            return report_refused(req, problem, node, job, attempt);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    api_commit(s, req, b, report_done, report_abort, rp);
    return 0;
}

/* ---- registration, drain and resume: node writes ------------------------------- */

struct node_write {
    struct server *s;
    struct http_request *req;
    struct config_write *w;
};

static void node_write_abort(void *ctx)
{
    struct node_write *nw = ctx;
    struct server *s = nw->s;
    enum config_outcome out;
    json_t *body = NULL;
    pthread_mutex_lock(&s->lock);
    config_write_done(&s->config, nw->w, GPO_ESHUTDOWN, srv_now_ms(s), &out, &body, NULL, 0);
    pthread_mutex_unlock(&s->lock);
    free(nw);
}

static void node_write_done(void *ctx, const struct store_result *r)
{
    struct node_write *nw = ctx;
    struct server *s = nw->s;
    char err[256] = "";
    char name[CLUSTER_HOST_MAX + 1];
    snprintf(name, sizeof(name), "%s", config_write_name(nw->w));
    enum config_outcome out = CONFIG_CREATED;
    json_t *o = NULL;
    pthread_mutex_lock(&s->lock);
    int rc =
        config_write_done(&s->config, nw->w, r->err, srv_now_ms(s), &out, &o, err, sizeof(err));
    if (!rc)
        sched_wake(s->sched);
    pthread_mutex_unlock(&s->lock);
    char tok[AUTH_LOG_TOKEN_LEN + 1];
    auth_node_log_token(&s->auth, name, tok);
    if (o && json_object_set_new(o, "log_token", json_string(tok)))
        json_decref(o), o = NULL;
    sodium_memzero(tok, sizeof(tok));
    if (r->err)
        http_request_complete_error(nw->req, 503, "store", "the node was not stored: %s",
                                    gpo_strerror(r->err));
    else if (rc || !o)
        http_request_complete_error(nw->req, 500, "internal", "node stored, not applied: %s", err);
    else
        http_request_complete(nw->req, out == CONFIG_REPLACED ? 200 : 201, o), o = NULL;
    json_decref(o);
    free(nw);
}

static int node_write_commit(struct server *s, struct http_request *req, int rc,
                             struct config_write *w, struct store_batch *b, const char *err)
{
    if (rc)
        return api_error(req, rc, err);
    struct node_write *nw = calloc(1, sizeof(*nw));
    if (!nw) {
        store_batch_free(b);
        enum config_outcome out;
        json_t *body = NULL;
        pthread_mutex_lock(&s->lock);
        config_write_done(&s->config, w, GPO_ENOMEM, srv_now_ms(s), &out, &body, NULL, 0);
        pthread_mutex_unlock(&s->lock);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    *nw = (struct node_write){.s = s, .req = req, .w = w};
    api_commit(s, req, b, node_write_done, node_write_abort, nw);
    return 0;
}

static int node_put(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const char *name = node_param(req);
    json_t *body = api_body_named(req, name);
    if (!body)
        return 0;
    struct config_write *w = NULL;
    struct store_batch *b = NULL;
    char err[512];
    pthread_mutex_lock(&s->lock);
    int rc = config_node_put_plan(&s->config, name, body, http_request_client(req), srv_now_ms(s),
                                  &w, &b, err, sizeof(err));
    pthread_mutex_unlock(&s->lock);
    json_decref(body);
    return node_write_commit(s, req, rc, w, b, err);
}

/* POST /v1/nodes/NAME/drain and /resume: the state the route's arg names. */
static int node_state(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    enum cluster_node_state state = *(const enum cluster_node_state *)http_request_route_arg(req);
    struct config_write *w = NULL;
    struct store_batch *b = NULL;
    char err[512];
    pthread_mutex_lock(&s->lock);
    int rc = config_node_state_plan(&s->config, node_param(req), state, srv_now_ms(s), &w, &b, err,
                                    sizeof(err));
    pthread_mutex_unlock(&s->lock);
    return node_write_commit(s, req, rc, w, b, err);
}

static int node_list(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    json_t *list = json_array();
    pthread_mutex_lock(&s->lock);
    for (size_t k = 0; list && k < s->cluster.nnodes; k++) {
        json_t *o = cluster_node_to_json(&s->cluster.nodes[k], 0);
        const struct node_rt *rt = nodes_find(&s->nodes, s->cluster.nodes[k].name);
        char at[TIMEFMT_RFC3339_LEN] = "";
        if (rt)
            timefmt_rfc3339(rt->last_heartbeat_ms, at, sizeof(at));
        if (o)
            json_object_set_new(o, "last_heartbeat", at[0] ? json_string(at) : json_null());
        if (o && rt && rt->sample) {
            char st[TIMEFMT_RFC3339_LEN] = "";
            timefmt_rfc3339(rt->sample_ms, st, sizeof(st));
            json_object_set_new(o, "sampled_at", json_string(st));
            json_object_set(o, "gpu_samples", json_object_get(rt->sample, "gpus"));
        }
        if (o && rt)
            json_object_set_new(o, "dirty_gpus", rt->dirty ? json_copy(rt->dirty) : json_array());
        if (!o || json_array_append_new(list, o)) {
            json_decref(list);
            list = NULL;
        }
    }
    pthread_mutex_unlock(&s->lock);
    json_t *out = list ? json_pack("{s:o}", "nodes", list) : NULL;
    if (!out)
        return http_request_error(req, 500, "internal", "out of memory");
    return http_request_respond_json(req, 200, out);
}

static const enum cluster_node_state draining = CLUSTER_NODE_DRAINING, up = CLUSTER_NODE_UP;

static const struct http_route routes[] = {
    {"GET", "/v1/nodes", node_list, 0, NULL},
    {"PUT", "/v1/nodes/{name}", node_put, API_ROUTE_AGENT | HTTP_ROUTE_JSON_BODY, NULL},
    {"POST", "/v1/nodes/{name}/heartbeat", node_heartbeat, API_ROUTE_AGENT | HTTP_ROUTE_RAW_BODY,
     NULL},
    {"GET", "/v1/nodes/{name}/assignments", node_assignments, API_ROUTE_AGENT, NULL},
    {"POST", "/v1/nodes/{name}/attempts/{job}/{attempt}", node_report,
     API_ROUTE_AGENT | HTTP_ROUTE_JSON_BODY, NULL},
    {"POST", "/v1/nodes/{name}/drain", node_state, API_ROUTE_ADMIN, &draining},
    {"POST", "/v1/nodes/{name}/resume", node_state, API_ROUTE_ADMIN, &up},
};
const struct api_routes api_nodes_routes = {routes, sizeof(routes) / sizeof(routes[0])};

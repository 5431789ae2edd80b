/*
 * api_nodes.c - nodes and their agents: registration, heartbeats, the
 * long-polled assignments, attempt reports; listing, drain and resume.
 *
 * Each node has a revision of its assignments, bumped whenever what the
 * controller wants of it changes (an attempt assigned, to be killed, or
 * ended). An agent's long-poll with since=REV waits, suspended and holding no
 * thread, until the revision passes REV or its wait runs out.
 */
#include <errno.h>
#include <stdio.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "base/err.h"
#include "server/ingest.h"
#include "server/srv.h"
#include "util/jsonv.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define WAIT_DEFAULT_S 30
#define WAIT_MAX_S     300
#define META_TYPE_IDS  "gpu_type_ids"

/* An agent's long-poll, in its node's list until answered. */
struct srv_waiter {
    struct http_request *req;
    struct srv_waiter *next;
};

/* ---- runtime ---- */

static size_t rt_search(const struct server *s, const char *name, bool *found)
{
    size_t lo = 0, hi = s->nnodes_rt;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->nodes_rt[mid].name, name);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

struct srv_node_rt *srv_node_rt_find(struct server *s, const char *name)
{
    bool found;
    size_t at = rt_search(s, name, &found);
    return found ? &s->nodes_rt[at] : NULL;
}

int srv_node_rt_add(struct server *s, const char *name, int64_t now_ms)
{
    bool found;
    size_t at = rt_search(s, name, &found);
    if (found) {
        s->nodes_rt[at].last_heartbeat_ms = now_ms;
        return 0;
    }
    if (s->nnodes_rt == s->nodes_rt_cap) {
        size_t cap = s->nodes_rt_cap ? 2 * s->nodes_rt_cap : 16;
        struct srv_node_rt *v = realloc(s->nodes_rt, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        s->nodes_rt = v;
        s->nodes_rt_cap = cap;
    }
    memmove(&s->nodes_rt[at + 1], &s->nodes_rt[at], (s->nnodes_rt - at) * sizeof(*s->nodes_rt));
    struct srv_node_rt *rt = &s->nodes_rt[at];
    memset(rt, 0, sizeof(*rt));
    snprintf(rt->name, sizeof(rt->name), "%s", name);
    rt->last_heartbeat_ms = now_ms;
    rt->rev = 1;
    s->nnodes_rt++;
    return 0;
}

static bool attempt_on_node(const struct srv_attempt *a, const char *node)
{
    for (size_t k = 0; k < a->nparts; k++) {
        if (strcmp(a->parts[k].node, node) == 0)
            return true;
    }
    return false;
}

/* The port rank 0 of a gang listens on (MASTER_PORT): a function of the job, in
 * 20000..27999, below Linux's ephemeral range, so ranks agree without talking. */
#define GANG_PORT_BASE  20000
#define GANG_PORT_RANGE 8000

/* Where an attempt runs, for its processes' environment: every node in rank
 * order, this node's rank, and rank 0's address. 0 or -ENOMEM. */
static int add_gang(struct server *s, json_t *a, const struct srv_job *j, const char *node)
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
    return g && json_object_set_new(a, "gang", g) == 0 ? 0 : -ENOMEM;
}

/* What the controller wants of node `name`: a new object, or NULL. Under the lock. */
static json_t *assignments_json(struct server *s, const struct srv_node_rt *rt)
{
    json_t *list = json_array();
    for (size_t k = 0; list && k < s->njobs; k++) {
        const struct srv_job *j = s->jobs[k];
        if (!j->att.n || !attempt_on_node(&j->att, rt->name))
            continue;
        json_t *gpus = json_array();
        for (size_t g = 0; gpus && g < j->att.nshares; g++) {
            if (strcmp(j->att.shares[g].node, rt->name) == 0)
                json_array_append_new(gpus,
                                      json_pack("{s:s, s:I, s:I}", "uuid", j->att.shares[g].uuid,
                                                "milli", (json_int_t)j->att.shares[g].milli,
                                                "mem_mib", (json_int_t)j->att.shares[g].mem_mib));
        }
        json_t *a;
        if (j->att.kill)
            a = json_pack("{s:I, s:I, s:s, s:I, s:s}", "job", (json_int_t)j->id, "attempt",
                          (json_int_t)j->att.n, "action", "kill", "grace_s",
                          (json_int_t)(j->att.grace_ms / 1000), "reason",
                          j->att.kill_reason ? j->att.kill_reason : "");
        else
            a = json_pack("{s:I, s:I, s:s, s:o*, s:s, s:s?, s:o*}", "job", (json_int_t)j->id,
                          "attempt", (json_int_t)j->att.n, "action", "run", "gpus", gpus, "user",
                          j->user, "unix_user", j->unix_user, "spec", jobspec_to_json(&j->spec)),
            gpus = NULL;
        json_decref(gpus);
        if (a && !j->att.kill && add_gang(s, a, j, rt->name))
            json_decref(a), a = NULL;
        if (a && !j->att.kill && j->array_id != STORE_NULL &&
            (json_object_set_new(a, "array_id", json_integer((json_int_t)j->array_id)) ||
             json_object_set_new(a, "array_index", json_integer((json_int_t)j->array_index))))
            json_decref(a), a = NULL;
        if (!a || json_array_append_new(list, a)) {
            json_decref(list);
            list = NULL;
        }
    }
    return list ? json_pack("{s:I, s:s, s:o}", "rev", (json_int_t)rt->rev, "node", rt->name,
                            "attempts", list)
                : NULL;
}

void srv_node_changed(struct server *s, const char *name)
{
    struct srv_node_rt *rt = srv_node_rt_find(s, name);
    if (!rt)
        return;
    rt->rev++;
    struct srv_waiter *w = rt->waiters;
    rt->waiters = NULL;
    while (w) {
        struct srv_waiter *next = w->next;
        json_t *o = assignments_json(s, rt);
        if (o)
            http_request_complete(w->req, 200, o);
        else
            http_request_complete_error(w->req, 500, "internal", "out of memory");
        free(w);
        w = next;
    }
}

void srv_nodes_release_waiters(struct server *s)
{
    pthread_mutex_lock(&s->lock);
    for (size_t k = 0; k < s->nnodes_rt; k++) {
        struct srv_waiter *w = s->nodes_rt[k].waiters;
        s->nodes_rt[k].waiters = NULL;
        while (w) {
            struct srv_waiter *next = w->next;
            http_request_complete_error(w->req, 503, "unavailable", "the server is stopping");
            free(w);
            w = next;
        }
    }
    pthread_mutex_unlock(&s->lock);
}

/* http_timeout_fn (ctx: the server): the wait ran out with nothing new;
 * answer the same revision, unless a change answered first. The waiter is
 * found by its request, never through the callback's context: a change may
 * have answered and freed it while the timer was on its way here. */
static void waiter_timeout(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    pthread_mutex_lock(&s->lock);
    struct srv_waiter *w = NULL;
    json_t *o = NULL;
    for (size_t k = 0; k < s->nnodes_rt && !w; k++) {
        for (struct srv_waiter **p = &s->nodes_rt[k].waiters; *p; p = &(*p)->next) {
            if ((*p)->req == req) {
                w = *p;
                *p = w->next;
                o = assignments_json(s, &s->nodes_rt[k]);
                break;
            }
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (!w)
        return;
    if (o)
        http_request_complete(req, 200, o);
    else
        http_request_complete_error(req, 500, "internal", "out of memory");
    free(w);
}

/* ---- agent routes ---- */

static const char *node_param(struct http_request *req)
{
    return http_request_param(req, "name");
}

/* A heartbeat's body, when it has one: {"gpus": [per-GPU figures]}, kept as
 * the node's latest sample (the metrics issue gives it a schema and history).
 * 0 with *ret (NULL without a body), or -1 once it answered 400. */
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
    json_t *at = o ? json_object_get(o, "sampled_at_ms") : NULL; /* ingest.c's lag */
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

int srv_api_node_heartbeat(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    json_t *sample = NULL;
    if (sample_parse(req, &sample))
        return 0;
    pthread_mutex_lock(&s->lock);
    struct srv_node_rt *rt = srv_node_rt_find(s, node_param(req));
    if (rt) {
        rt->last_heartbeat_ms = srv_now_ms();
        if (sample) {
            /* The agent names its dirty GPUs in every heartbeat until they clear. */
            json_t *dirty = json_object_get(sample, "dirty");
            json_decref(rt->dirty);
            rt->dirty = json_is_array(dirty) ? json_incref(dirty) : NULL;
            json_decref(rt->sample);
            rt->sample = sample, sample = NULL;
            rt->sample_ms = rt->last_heartbeat_ms;
            srv_ingest_heartbeat(s, rt->name, rt->sample, rt->sample_ms);
        }
    }
    pthread_mutex_unlock(&s->lock);
    json_decref(sample);
    if (!rt)
        return http_request_error(req, 404, "not_found", "no node '%s' (register it first)",
                                  node_param(req));
    return http_request_respond_json(req, 204, NULL);
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

int srv_api_node_assignments(struct http_request *req, void *ctx)
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
    struct srv_node_rt *rt = srv_node_rt_find(s, node_param(req));
    if (!rt) {
        pthread_mutex_unlock(&s->lock);
        return http_request_error(req, 404, "not_found", "no node '%s' (register it first)",
                                  node_param(req));
    }
    rt->last_heartbeat_ms = srv_now_ms(); /* a poll is a sign of life too */
    if (!has_since || rt->rev > since || wait == 0) {
        json_t *o = assignments_json(s, rt);
        pthread_mutex_unlock(&s->lock);
        if (!o)
            return http_request_error(req, 500, "internal", "out of memory");
        return http_request_respond_json(req, 200, o);
    }
    struct srv_waiter *w = calloc(1, sizeof(*w));
    if (!w || http_request_suspend(req, (unsigned)wait * 1000, waiter_timeout, s) != 0) {
        pthread_mutex_unlock(&s->lock);
        free(w);
        return http_request_error(req, 503, "unavailable", "the server is stopping");
    }
    *w = (struct srv_waiter){.req = req, .next = rt->waiters};
    rt->waiters = w;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

/* A report between its commit and its answer. */
struct report {
    struct server *s;
    struct http_request *req;
    struct srv_end end;
    bool started; /* a RUNNING report */
};

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
    struct srv_job *j = srv_job_find(s, rp->end.job);
    if (rp->started) {
        if (j && j->att.n == rp->end.attempt)
            j->att.running = true;
    } else {
        srv_end_apply(s, &rp->end);
    }
    j = srv_job_find(s, rp->end.job);
    json_t *o = j ? srv_job_to_json(j) : NULL;
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

/* Adds UUIDs to the node's dirty set (no duplicates). Under the lock. */
static void dirty_add(struct srv_node_rt *rt, char *const *uuids, size_t n)
{
    if (!rt->dirty && !(rt->dirty = json_array()))
        return;
    for (size_t k = 0; k < n; k++) {
        bool have = false;
        for (size_t i = 0; i < json_array_size(rt->dirty) && !have; i++)
            have = strcmp(json_string_value(json_array_get(rt->dirty, i)), uuids[k]) == 0;
        if (!have)
            json_array_append_new(rt->dirty, json_string(uuids[k]));
    }
}

int srv_api_node_report(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    uint64_t job, attempt;
    if (!parse_u64(http_request_param(req, "job"), &job) ||
        !parse_u64(http_request_param(req, "attempt"), &attempt) || !job || !attempt)
        return http_request_error(req, 400, "invalid_path",
                                  "expected /v1/nodes/NODE/attempts/JOB/ATTEMPT with positive ids");
    struct report_body body = {.exit_code = STORE_NULL, .signal = STORE_NULL};
    char err[256];
    int rc =
        jsonv_decode(http_request_json(req), report_fields,
                     sizeof(report_fields) / sizeof(report_fields[0]), &body, err, sizeof(err));
    if (rc)
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
    int64_t now = srv_now_ms();
    pthread_mutex_lock(&s->lock);
    struct srv_job *j = srv_job_find(s, (int64_t)job);
    const char *problem = NULL;
    if (!srv_node_rt_find(s, node))
        problem = "node";
    else if (!j)
        problem = "job";
    else if (j->att.n != (int64_t)attempt || !attempt_on_node(&j->att, node))
        problem = "attempt";
    /* A gang completes when every rank has: until then a rank's COMPLETED is
     * noted and answered 202, and its agent repeats it (so a controller
     * restart loses nothing). Any other end of one rank ends them all. */
    size_t waiting = 0;
    if (!problem && body.state == 1 && j->att.nparts > 1) {
        for (size_t k = 0; k < j->att.nparts; k++) {
            if (strcmp(j->att.parts[k].node, node) == 0)
                j->att.parts[k].completed = true;
            waiting += !j->att.parts[k].completed;
        }
    }
    if (waiting) {
        srv_node_rt_find(s, node)->last_heartbeat_ms = now;
        pthread_mutex_unlock(&s->lock);
        jsonv_release(report_fields, NREPORT_FIELDS, &body);
        store_batch_free(b);
        free(rp);
        return http_request_respond_json(req, 202,
                                         json_pack("{s:s, s:I}", "status",
                                                   "waiting for the gang's other ranks",
                                                   "ranks_left", (json_int_t)waiting));
    }
    if (!problem) {
        srv_node_rt_find(s, node)->last_heartbeat_ms = now;
        const char *state = report_states[body.state];
        rp->end.job = j->id;
        rp->end.attempt = j->att.n;
        if (body.state == 0) {
            rp->started = true;
            rc = srv_attempt_row(b, s->epoch, j->id, &j->att, "RUNNING", NULL, STORE_NULL,
                                 STORE_NULL, STORE_NULL);
        } else {
            rc = srv_end_plan(s, j, state, body.exit_code, body.signal, body.reason, now, &rp->end,
                              b);
            /* Held back from now on, not from the agent's next heartbeat. */
            dirty_add(srv_node_rt_find(s, node), body.dirty, body.ndirty);
        }
    }
    pthread_mutex_unlock(&s->lock);
    jsonv_release(report_fields, NREPORT_FIELDS, &body);
    if (problem || rc) {
        store_batch_free(b);
        free(rp);
        if (!problem)
            return http_request_error(req, 500, "internal", "out of memory");
        if (strcmp(problem, "attempt") == 0)
            return http_request_error(req, 409, "conflict",
                                      "job %" PRIu64 " has no attempt %" PRIu64
                                      " running on node '%s' (ended, or not this node's)",
                                      job, attempt, node);
        return http_request_error(req, 404, "not_found", "no %s '%s'", problem,
                                  strcmp(problem, "node") == 0 ? node
                                                               : http_request_param(req, "job"));
    }
    if (http_request_suspend(req, 0, NULL, NULL) != 0) {
        store_batch_free(b);
        free(rp);
        return http_request_error(req, 503, "unavailable", "the server is stopping");
    }
    if (store_commit(s->store, b, report_done, rp) != 0) {
        http_request_complete_error(req, 503, "unavailable", "the store is closing");
        free(rp);
    }
    return 0;
}

/* ---- registration, drain and resume: node writes ---- */

struct node_write {
    struct server *s;
    struct http_request *req;
    struct cluster_node node;
    bool replace;
    uint32_t next_id;
    struct cluster_type_id *new_types; /* names owned */
    size_t nnew_types;
};

static void node_write_free(struct node_write *w)
{
    cluster_node_release(&w->node);
    for (size_t k = 0; k < w->nnew_types; k++)
        free(w->new_types[k].name);
    free(w->new_types);
    free(w);
}

static void node_write_done(void *ctx, const struct store_result *r)
{
    struct node_write *w = ctx;
    struct server *s = w->s;
    char err[256] = "";
    int rc = r->err;
    json_t *o = NULL;
    char name[CLUSTER_HOST_MAX + 1];
    snprintf(name, sizeof(name), "%s", w->node.name);
    pthread_mutex_lock(&s->lock);
    s->config_busy = false;
    if (!rc) {
        s->next_config_id = w->next_id;
        for (size_t k = 0; k < w->nnew_types && !rc; k++)
            rc = cluster_type_id_set(&s->cluster, w->new_types[k].name, w->new_types[k].id, err,
                                     sizeof(err));
        o = cluster_node_to_json(&w->node, 0);
        char tok[SRV_LOG_TOKEN_LEN + 1];
        srv_node_log_token(s, name, tok);
        if (o && json_object_set_new(o, "log_token", json_string(tok)))
            json_decref(o), o = NULL;
        sodium_memzero(tok, sizeof(tok));
        if (!rc)
            rc = w->replace ? cluster_node_replace(&s->cluster, &w->node, err, sizeof(err))
                            : cluster_node_add(&s->cluster, &w->node, err, sizeof(err));
        if (!rc)
            rc = srv_node_rt_add(s, name, srv_now_ms());
        if (!rc)
            srv_loop_wake(s);
    }
    pthread_mutex_unlock(&s->lock);
    if (r->err)
        http_request_complete_error(w->req, 503, "store", "the node was not stored: %s",
                                    gpo_strerror(r->err));
    else if (rc || !o)
        http_request_complete_error(w->req, 500, "internal", "node stored, not applied: %s", err);
    else
        http_request_complete(w->req, w->replace ? 200 : 201, o), o = NULL;
    json_decref(o);
    node_write_free(w);
}

/* Stores w->node (its id and new GPU types decided here) and suspends the
 * request. Called under the lock with config_busy clear; releases the lock. */
static int node_write_commit(struct server *s, struct node_write *w)
{
    const struct cluster_node *old = cluster_node_get(&s->cluster, w->node.name);
    w->replace = old != NULL;
    w->next_id = s->next_config_id;
    w->node.id = old ? old->id : w->next_id++;
    /* GPU types never seen get their ids now, so that the table goes to disk
     * in the same transaction as the node. */
    uint32_t top = 0;
    for (size_t k = 0; k < s->cluster.ntype_ids; k++)
        top = s->cluster.type_ids[k].id > top ? s->cluster.type_ids[k].id : top;
    w->new_types = calloc(w->node.ngpus ? w->node.ngpus : 1, sizeof(*w->new_types));
    int rc = w->new_types ? 0 : GPO_ENOMEM;
    for (size_t g = 0; !rc && g < w->node.ngpus; g++) {
        const char *t = w->node.gpus[g].gpu_type;
        bool known = cluster_type_id_get(&s->cluster, t) != NULL;
        for (size_t k = 0; k < w->nnew_types && !known; k++)
            known = strcmp(w->new_types[k].name, t) == 0;
        if (known)
            continue;
        w->new_types[w->nnew_types] = (struct cluster_type_id){strdup(t), ++top};
        rc = w->new_types[w->nnew_types++].name ? 0 : GPO_ENOMEM;
    }
    json_t *stored = rc ? NULL : cluster_node_to_json(&w->node, CLUSTER_STORED);
    char *text = stored ? json_dumps(stored, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(stored);
    json_t *types = json_object();
    for (size_t k = 0; types && k < s->cluster.ntype_ids; k++)
        json_object_set_new(types, s->cluster.type_ids[k].name,
                            json_integer(s->cluster.type_ids[k].id));
    for (size_t k = 0; types && k < w->nnew_types; k++)
        json_object_set_new(types, w->new_types[k].name, json_integer(w->new_types[k].id));
    char *types_text = types ? json_dumps(types, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(types);
    struct store_batch *b = text && types_text ? store_batch_new() : NULL;
    char idbuf[16];
    snprintf(idbuf, sizeof(idbuf), "%" PRIu32, w->next_id);
    rc = b ? store_batch_node_put(b, w->node.name, text, cluster_node_state_name(w->node.state),
                                  srv_now_ms())
           : GPO_ENOMEM;
    if (!rc && !w->replace)
        rc = store_batch_meta_put(b, SRV_META_NEXT_ID, idbuf);
    if (!rc && w->nnew_types)
        rc = store_batch_meta_put(b, META_TYPE_IDS, types_text);
    free(text);
    free(types_text);
    struct http_request *req = w->req;
    if (rc) {
        pthread_mutex_unlock(&s->lock);
        store_batch_free(b);
        node_write_free(w);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    s->config_busy = true;
    pthread_mutex_unlock(&s->lock);
    if (http_request_suspend(req, 0, NULL, NULL) != 0) {
        store_batch_free(b);
        pthread_mutex_lock(&s->lock);
        s->config_busy = false;
        pthread_mutex_unlock(&s->lock);
        node_write_free(w);
        return http_request_error(req, 503, "unavailable", "the server is stopping");
    }
    if (store_commit(s->store, b, node_write_done, w) != 0) {
        pthread_mutex_lock(&s->lock);
        s->config_busy = false;
        pthread_mutex_unlock(&s->lock);
        http_request_complete_error(req, 503, "unavailable", "the store is closing");
        node_write_free(w);
    }
    return 0;
}

/* Under the lock: answers 409 and returns false while a config write runs. */
static bool config_free(struct server *s, struct http_request *req)
{
    if (!s->config_busy)
        return true;
    pthread_mutex_unlock(&s->lock);
    http_request_add_header(req, "Retry-After", "1");
    http_request_error(req, 409, "conflict", "another configuration change is being stored; retry");
    return false;
}

int srv_api_node_put(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const char *name = node_param(req);
    json_t *body = srv_body_named(req, name);
    if (!body)
        return 0;
    struct node_write *w = calloc(1, sizeof(*w));
    if (!w) {
        json_decref(body);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    w->s = s;
    w->req = req;
    char err[512];
    int rc = cluster_node_decode(body, 0, &w->node, err, sizeof(err));
    json_decref(body);
    if (rc) {
        free(w);
        return rc == GPO_ENOMEM ? http_request_error(req, 500, "internal", "out of memory")
                                : http_request_error(req, 400, "invalid_field", "%s", err);
    }
    pthread_mutex_lock(&s->lock);
    if (!config_free(s, req)) {
        node_write_free(w);
        return 0;
    }
    if (!cluster_pool_get(&s->cluster, w->node.pool)) {
        pthread_mutex_unlock(&s->lock);
        rc = http_request_error(req, 400, "invalid_field", "field 'pool': no pool '%s'",
                                w->node.pool);
        node_write_free(w);
        return rc;
    }
    /* Without "addr", the controller reaches the agent where it came from. */
    if (!w->node.addr && !(w->node.addr = strdup(http_request_client(req)))) {
        pthread_mutex_unlock(&s->lock);
        node_write_free(w);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    /* A drained node stays drained; a node marked down comes back up. */
    const struct cluster_node *old = cluster_node_get(&s->cluster, name);
    w->node.state =
        old && old->state == CLUSTER_NODE_DRAINING ? CLUSTER_NODE_DRAINING : CLUSTER_NODE_UP;
    return node_write_commit(s, w);
}

int srv_api_node_drain(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const char *name = node_param(req);
    bool drain = strstr(http_request_path(req), "/drain") != NULL;
    pthread_mutex_lock(&s->lock);
    const struct cluster_node *old = cluster_node_get(&s->cluster, name);
    if (!old) {
        pthread_mutex_unlock(&s->lock);
        return http_request_error(req, 404, "not_found", "no node '%s'", name);
    }
    if (!config_free(s, req))
        return 0;
    /* A copy through JSON: the model has no copy function, and this is rare. */
    json_t *o = cluster_node_to_json(old, 0);
    struct node_write *w = calloc(1, sizeof(*w));
    char err[256];
    if (!o || !w || cluster_node_decode(o, 0, &w->node, err, sizeof(err)) != 0) {
        pthread_mutex_unlock(&s->lock);
        json_decref(o);
        free(w);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    json_decref(o);
    w->s = s;
    w->req = req;
    w->node.state = drain ? CLUSTER_NODE_DRAINING : CLUSTER_NODE_UP;
    return node_write_commit(s, w);
}

int srv_api_node_list(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    json_t *list = json_array();
    pthread_mutex_lock(&s->lock);
    for (size_t k = 0; list && k < s->cluster.nnodes; k++) {
        json_t *o = cluster_node_to_json(&s->cluster.nodes[k], 0);
        const struct srv_node_rt *rt = srv_node_rt_find(s, s->cluster.nodes[k].name);
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

int srv_nodes_load(struct server *s, char *err, size_t errlen)
{
    char *types = NULL;
    int rc = store_meta_get(s->store, META_TYPE_IDS, &types);
    if (rc == 0) {
        json_t *o = json_loads(types, 0, NULL);
        free(types);
        const char *name;
        json_t *v;
        rc = json_is_object(o) ? 0 : -EINVAL;
        json_object_foreach(o, name, v)
        {
            if (!rc && (!json_is_integer(v) || json_integer_value(v) < 1 ||
                        json_integer_value(v) > UINT32_MAX))
                rc = -EINVAL;
            if (!rc)
                rc = cluster_type_id_set(&s->cluster, name, (uint32_t)json_integer_value(v), err,
                                         errlen);
        }
        json_decref(o);
        if (rc) {
            if (rc == -EINVAL)
                snprintf(err, errlen, "store: meta '%s' is not a table of ids", META_TYPE_IDS);
            return rc;
        }
    } else if (rc != GPO_ENOENT) {
        snprintf(err, errlen, "store: meta '%s': %s", META_TYPE_IDS, gpo_strerror(rc));
        return rc;
    }
    struct store_node *rows = NULL;
    size_t n = 0;
    if ((rc = store_node_list(s->store, &rows, &n)) != 0) {
        snprintf(err, errlen, "store: listing nodes: %s", gpo_strerror(rc));
        return rc;
    }
    int64_t now = srv_now_ms();
    for (size_t k = 0; k < n && !rc; k++) {
        json_t *o = json_loads(rows[k].spec, 0, NULL);
        struct cluster_node node = {0};
        char msg[256] = "bad JSON";
        rc = o ? cluster_node_decode(o, CLUSTER_STORED, &node, msg, sizeof(msg)) : -EINVAL;
        json_decref(o);
        if (!rc) {
            int st = strcmp(rows[k].state, "draining") == 0 ? CLUSTER_NODE_DRAINING
                     : strcmp(rows[k].state, "down") == 0   ? CLUSTER_NODE_DOWN
                                                            : CLUSTER_NODE_UP;
            node.state = (enum cluster_node_state)st;
            if ((rc = cluster_node_add(&s->cluster, &node, msg, sizeof(msg))) != 0)
                cluster_node_release(&node);
        }
        /* Agents get one node timeout from now to check in again. */
        if (!rc)
            rc = srv_node_rt_add(s, rows[k].name, now);
        if (rc)
            snprintf(err, errlen, "store: node '%s': %s", rows[k].name, msg);
    }
    store_nodes_free(rows, n);
    return rc;
}

int srv_node_log_endpoint(struct server *s, const char *name, char *url, size_t urllen, char *token,
                          size_t toklen)
{
    int rc = -ENOENT;
    pthread_mutex_lock(&s->lock);
    const struct cluster_node *n = cluster_node_get(&s->cluster, name);
    if (n && n->addr && n->log_port) {
        bool v6 = strchr(n->addr, ':') != NULL;
        int k = snprintf(url, urllen, "http://%s%s%s:%u", v6 ? "[" : "", n->addr, v6 ? "]" : "",
                         n->log_port);
        rc = k < 0 || (size_t)k >= urllen || toklen < SRV_LOG_TOKEN_LEN + 1 ? -ENAMETOOLONG : 0;
    }
    pthread_mutex_unlock(&s->lock);
    if (rc == 0)
        srv_node_log_token(s, name, token);
    return rc;
}

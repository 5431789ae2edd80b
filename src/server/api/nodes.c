/*
 * nodes.c - nodes and their agents: registration, heartbeats, the
 * long-polled assignments, attempt reports; drain and resume (the listing
 * is nodes_list.c's).
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
#include "proto/proto.h"
#include "server/api/api.h"
#include "server/mig/mig.h"
#include "server/sched/sched.h"
#include "server/serve/serve.h"
#include "server/srv.h"
#include "util/errbuf.h"
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

/* The job's spec as the agent reads it (strings borrowed from spec; env and
 * dependencies into arrays *ret owns: free with spec_free). */
static int spec_of(const struct jobspec *js, struct proto_spec *ret)
{
    struct proto_spec p = {
        .name = js->name,
        .argv = js->argv,
        .argc = js->argc,
        .script = js->script,
        .workdir = js->workdir,
        .nenv = js->nenv,
        .output = js->output,
        .error = js->error,
        .time_limit_s = js->time_limit_s,
        .cpus = (uint32_t)js->cpus,
        .mem_mib = js->mem_mib,
        .team = js->team,
        .project = js->project,
        .model = js->model,
        .priority = js->priority,
        .pool = js->pool,
        .gpu_type = js->gpu_type,
        .gpus_milli = (int64_t)js->gpus * SCHED_MILLI + js->gpu_milli,
        .gpu_mem_mib = js->gpu_mem_mib,
        .min_gpu_mem_mib = js->min_gpu_mem_mib,
        .multi_node = js->multi_node,
        .checkpointable = js->checkpointable,
        .requeue = js->requeue,
        .max_retries = js->max_retries,
        .ndeps = js->ndeps,
        .array = js->array_text,
        .nodes = (uint32_t)js->nodes,
        .gpus_per_node = (uint32_t)js->gpus_per_node,
        .ntasks = (uint32_t)js->ntasks,
        .ntasks_per_node = (uint32_t)js->ntasks_per_node,
        .cpus_per_task = (uint32_t)js->cpus_per_task,
        .gpus_per_task = (uint32_t)js->gpus_per_task,
        .mem_per_node_mib = js->mem_per_node_mib,
        .mem_per_cpu_mib = js->mem_per_cpu_mib,
        .mem_per_gpu_mib = js->mem_per_gpu_mib,
        .mem_whole_node = js->mem_whole_node,
        .exclusive = js->exclusive,
        .constraint = js->constraint,
        .signal = (uint32_t)js->signal,
        .signal_before_s = (uint32_t)js->signal_before_s,
        .signal_batch_only = js->signal_batch_only,
        .open_mode = js->open_mode == JOBSPEC_APPEND ? PROTO_OPEN_APPEND : PROTO_OPEN_TRUNCATE,
        .launch =
            js->launch == JOBSPEC_FIRST_NODE ? PROTO_LAUNCH_FIRST_NODE : PROTO_LAUNCH_EVERY_NODE,
        .submit_dir = js->submit_dir,
        .hold = js->hold,
        .begin = js->begin,
        .serve = {.service = js->serve.service,
                  .replica = js->serve.replica,
                  .generation = js->serve.generation,
                  .probe_path = js->serve.probe_path,
                  .probe_period_ms = js->serve.probe_period_ms,
                  .probe_timeout_ms = js->serve.probe_timeout_ms,
                  .probe_failures = js->serve.probe_failures,
                  .startup_timeout_s = js->serve.startup_timeout_s,
                  .metric = js->serve.metric},
    };
    p.env = calloc(js->nenv ? js->nenv : 1, sizeof(*p.env));
    p.deps = calloc(js->ndeps ? js->ndeps : 1, sizeof(*p.deps));
    if (!p.env || !p.deps) {
        free(p.env);
        free(p.deps);
        return GPO_ENOMEM;
    }
    for (size_t k = 0; k < js->nenv; k++)
        p.env[k] = (struct proto_env){js->env[k].name, js->env[k].value};
    for (size_t k = 0; k < js->ndeps; k++)
        p.deps[k] = (struct proto_dep){js->deps[k].type == JOBSPEC_AFTERANY ? PROTO_DEP_AFTERANY
                                                                            : PROTO_DEP_AFTEROK,
                                       js->deps[k].job};
    *ret = p;
    return 0;
}

/* The arrays an attempt built by `assignment` holds (its strings are borrowed). */
static void assignment_free(struct proto_attempt *a)
{
    free(a->gpus);
    free(a->spec.env);
    free(a->spec.deps);
    free(a->gang.nodes);
    api_step_release(&a->step);
}

/* Where an attempt runs, for its processes' environment: every node in rank
 * order, this node's rank, and rank 0's address and port. */
static int gang_of(struct server *s, const struct job *j, const char *node, struct proto_gang *g)
{
    g->nodes = calloc(j->att.nparts + 1, sizeof(*g->nodes));
    if (!g->nodes)
        return GPO_ENOMEM;
    for (size_t k = 0; k < j->att.nparts; k++) {
        if (strcmp(j->att.parts[k].node, node) == 0)
            g->rank = (uint32_t)k;
        g->nodes[g->nnodes++] = j->att.parts[k].node;
    }
    const struct cluster_node *n0 =
        j->att.nparts ? cluster_node_get(&s->cluster, j->att.parts[0].node) : NULL;
    g->master_addr = n0 && n0->addr ? n0->addr : (j->att.nparts ? j->att.parts[0].node : "");
    g->master_port = (uint32_t)(GANG_PORT_BASE + j->id % GANG_PORT_RANGE);
    return 0;
}

/* The UUID of the MIG instance share sh holds (borrowed from the cluster),
 * or NULL for a share of a whole GPU. */
static char *mig_uuid(const struct server *s, const struct attempt_share *sh)
{
    const struct cluster_node *n = sh->mig ? cluster_node_get(&s->cluster, sh->node) : NULL;
    for (size_t g = 0; n && g < n->ngpus; g++) {
        const struct cluster_gpu *gpu = &n->gpus[g];
        for (size_t k = 0; strcmp(gpu->uuid, sh->uuid) == 0 && k < gpu->nmig; k++)
            if (gpu->mig[k].start == sh->mig_start && gpu->mig[k].uuid && gpu->mig[k].profile &&
                strcmp(gpu->mig[k].profile, sh->mig_profile) == 0)
                return gpu->mig[k].uuid;
    }
    return NULL;
}

/* Whether an attempt goes to its agent: not one yet to run whose MIG
 * instance is gone (the MIG turn ends it, migctl_pass). */
static bool sendable(const struct server *s, const struct job *j)
{
    return j->att.kill || j->att.running || !migctl_share_gone(s, &j->att);
}

/* One attempt as node `node`'s agent reads it: run it, or kill it (its
 * strings borrowed from j; release with assignment_free). */
static int assignment(struct server *s, const struct job *j, const char *node, char *reason,
                      size_t reason_len, struct proto_attempt *ret)
{
    struct proto_attempt a = {.job = (uint64_t)j->id,
                              .attempt = (uint32_t)j->att.n,
                              .array_id = PROTO_NONE,
                              .array_index = PROTO_NONE,
                              .grace_s = PROTO_NONE};
    if (j->att.kill) {
        a.action = PROTO_ACTION_KILL;
        a.grace_s = j->att.grace_ms / 1000;
        a.reason = (char *)attempt_kill_reason(&j->att, reason, reason_len);
        a.cause = kill_cause_preempts(j->att.kill) ? PROTO_KILL_PREEMPTED : PROTO_KILL_CANCELLED;
        *ret = a;
        return 0;
    }
    a.action = PROTO_ACTION_RUN;
    a.user = j->user;
    a.unix_user = j->unix_user;
    a.gpus = calloc(j->att.nshares ? j->att.nshares : 1, sizeof(*a.gpus));
    int rc = a.gpus ? spec_of(&j->spec, &a.spec) : GPO_ENOMEM;
    rc = rc ? rc : gang_of(s, j, node, &a.gang);
    rc = rc ? rc : api_step_of(s, j, &a.step);
    for (size_t g = 0; !rc && g < j->att.nshares; g++) {
        const struct attempt_share *sh = &j->att.shares[g];
        if (strcmp(sh->node, node) == 0)
            a.gpus[a.ngpus++] =
                (struct proto_share){sh->uuid, sh->milli, sh->mem_mib, mig_uuid(s, sh)};
    }
    if (j->array_id != STORE_NULL) {
        a.array_id = j->array_id;
        a.array_index = j->array_index;
    }
    /* For the job's environment: SLURM_JOB_PARTITION and SLURM_JOB_QOS. */
    const struct cluster_node *here = cluster_node_get(&s->cluster, node);
    a.pool = here ? here->pool : NULL;
    /* The pool's sharing: the agent runs its fractions as MPS clients. */
    const struct cluster_pool *pool = a.pool ? cluster_pool_get(&s->cluster, a.pool) : NULL;
    a.mps = pool && pool->sharing == CLUSTER_SHARING_MPS;
    a.priority = (char *)(j->spec.priority ? j->spec.priority : cluster_class_default(&s->cluster));
    if (rc) {
        assignment_free(&a);
        return rc;
    }
    *ret = a;
    return 0;
}

json_t *api_node_answer(void *ctx, const struct node_rt *rt)
{
    struct server *s = ctx;
    size_t n = 0;
    for (size_t k = 0; k < s->jobs.n; k++)
        n += s->jobs.v[k]->att.n && attempt_on_node(&s->jobs.v[k]->att, rt->name);
    struct proto_assignments m = {.rev = (int64_t)rt->rev,
                                  .node = (char *)rt->name,
                                  .fence_lease_ms = s->cfg.fence_lease_ms,
                                  .fence_grace_ms = s->cfg.fence_grace_ms};
    m.attempts = calloc(n ? n : 1, sizeof(*m.attempts));
    char(*reasons)[160] = calloc(n ? n : 1, sizeof(*reasons));
    int rc = m.attempts && reasons ? 0 : GPO_ENOMEM;
    rc = rc ? rc : migctl_node_plans(s->mig, rt->name, &m.mig_plans, &m.nmig_plans);
    for (size_t k = 0; !rc && k < s->jobs.n; k++) {
        const struct job *j = s->jobs.v[k];
        if (j->att.n && attempt_on_node(&j->att, rt->name) && sendable(s, j)) {
            rc = assignment(s, j, rt->name, reasons[m.nattempts], sizeof(reasons[0]),
                            &m.attempts[m.nattempts]);
            m.nattempts += rc == 0;
        }
    }
    json_t *o = NULL;
    if (!rc && proto_assignments_encode(&m, &o))
        o = NULL;
    for (size_t k = 0; k < m.nattempts; k++)
        assignment_free(&m.attempts[k]);
    free(m.attempts);
    free(m.mig_plans);
    free(reasons);
    return o;
}

/* ---- agent routes: heartbeats and long-polls -------------------------------- */

/* A heartbeat's body, when it has one (proto_heartbeat). 0 with *ret and
 * *has (false without a body), or -1 once it answered 400. */
static int sample_parse(struct http_request *req, struct proto_heartbeat *ret, bool *has)
{
    size_t len = 0;
    const char *body = http_request_body(req, &len);
    *has = false;
    if (!len)
        return 0;
    json_error_t e;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &e);
    char err[512];
    int rc = o ? proto_heartbeat_decode(o, ret, err, sizeof(err)) : GPO_EINVAL;
    json_decref(o);
    if (rc == GPO_ENOMEM) {
        http_request_error(req, 500, "internal", "out of memory");
        return -1;
    }
    if (rc) {
        http_request_error(req, 400, "invalid_field", "heartbeat body: %s", o ? err : e.text);
        return -1;
    }
    *has = true;
    return 0;
}

/* Whether node n has a GPU of this UUID (uuid) or index (uuid NULL). */
static bool node_has_gpu(const struct cluster_node *n, const char *uuid, uint32_t index)
{
    for (size_t k = 0; k < n->ngpus; k++) {
        if (uuid ? strcmp(n->gpus[k].uuid, uuid) == 0 : n->gpus[k].index == index)
            return true;
    }
    return false;
}

/* The first of `uuids` that node n does not have: 0, or GPO_EINVAL with the
 * field (`key`[i]) in err. */
static int node_check_uuids(const struct cluster_node *n, const char *key, char *const *uuids,
                            size_t count, char *err, size_t errlen)
{
    for (size_t i = 0; i < count; i++) {
        if (!node_has_gpu(n, uuids[i], 0)) {
            char q[JSONV_QUOTE_MAX + 4];
            return errbuf_set(err, errlen, GPO_EINVAL, "field '%s[%zu]': node '%s' has no GPU '%s'",
                              key, i, n->name, jsonv_quote(uuids[i], strlen(uuids[i]), q));
        }
    }
    return 0;
}

/* A heartbeat samples only the node's own GPUs, as registered. */
static int sample_check_gpus(const struct cluster_node *n, const struct proto_heartbeat *hb,
                             char *err, size_t errlen)
{
    for (size_t i = 0; i < hb->ngpus; i++) {
        const struct proto_gpu_sample *g = &hb->gpus[i];
        if (node_has_gpu(n, g->uuid, g->index))
            continue;
        if (g->uuid) {
            char q[JSONV_QUOTE_MAX + 4];
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'gpus[%zu].uuid': node '%s' has no GPU '%s'", i, n->name,
                              jsonv_quote(g->uuid, strlen(g->uuid), q));
        }
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'gpus[%zu].index': node '%s' has no GPU %u", i, n->name, g->index);
    }
    return node_check_uuids(n, "dirty", hb->dirty, hb->ndirty, err, errlen);
}

static int node_heartbeat(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    struct proto_heartbeat hb = {0};
    bool has = false;
    if (sample_parse(req, &hb, &has))
        return 0;
    char err[512] = "";
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    struct node_rt *rt = nodes_find(&s->nodes, node_param(req));
    const struct cluster_node *n = rt ? cluster_node_get(&s->cluster, rt->name) : NULL;
    if (rt && has && n)
        rc = sample_check_gpus(n, &hb, err, sizeof(err));
    if (rt && !rc) {
        /* A node marked lost that heartbeats again rejoins (the loop marks
         * it up); one whose hold ends has GPUs to offer. */
        bool mig_changed = has && migctl_heartbeat(s, rt->name, &hb);
        if (nodes_heartbeat(rt, has ? &hb : NULL, srv_now_ms(s), srv_mono_ms(s)) || mig_changed)
            sched_wake(s->sched, SCHED_WHY_NODE);
        if (has)
            monitor_heartbeat(&s->monitor, rt->name, &rt->sample, rt->sample_ms);
    }
    pthread_mutex_unlock(&s->lock);
    proto_heartbeat_release(&hb);
    if (!rt)
        return http_request_error(req, 404, "not_found", "no node '%s' (register it first)",
                                  node_param(req));
    if (rc) /* nothing of it kept: not even as a sign of life */
        return http_request_error(req, 400, "invalid_field", "heartbeat body: %s", err);
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
    nodes_seen(rt, srv_now_ms(s), srv_mono_ms(s)); /* a poll is a sign of life too */
    if (has_since)
        nodes_polled(rt, since); /* it applied the answer of `since` */
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
    json_t *o = j ? api_job_json(s, j, srv_now_ms(s)) : NULL;
    pthread_mutex_unlock(&s->lock);
    if (o)
        http_request_complete(rp->req, 200, o);
    else
        http_request_complete_error(rp->req, 500, "internal", "out of memory");
    free(rp);
}

/* The attempt states a report names, by proto_state. */
static enum attempt_state state_of(enum proto_state st)
{
    static const enum attempt_state map[] = {
        [PROTO_STATE_RUNNING] = ATTEMPT_RUNNING,     [PROTO_STATE_COMPLETED] = ATTEMPT_COMPLETED,
        [PROTO_STATE_FAILED] = ATTEMPT_FAILED,       [PROTO_STATE_TIMEOUT] = ATTEMPT_TIMEOUT,
        [PROTO_STATE_CANCELLED] = ATTEMPT_CANCELLED, [PROTO_STATE_PREEMPTED] = ATTEMPT_PREEMPTED,
    };
    return map[st];
}

/* A gang completes when every rank has: until then a rank's COMPLETED is
 * noted and answered 202, and its agent repeats it (so a controller restart
 * loses nothing). Any other end of one rank ends them all; a first_node
 * job's rank 0 ends them all whatever its end. The ranks still to complete
 * after node's. */
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
                       const struct proto_report *body, int64_t now_ms, struct report *rp,
                       struct store_batch *b)
{
    nodes_seen(nodes_find(&s->nodes, node), now_ms, srv_mono_ms(s));
    rp->end.end.job = j->id;
    rp->end.end.attempt = j->att.n;
    if (body->state == PROTO_STATE_RUNNING) {
        rp->started = true;
        if (body->endpoint.port)
            serve_endpoint(s, j, node, &body->endpoint, now_ms);
        return attempt_row(b, s->epoch, j->id, &j->att, ATTEMPT_RUNNING, NULL, STORE_NULL,
                           STORE_NULL, STORE_NULL);
    }
    /* PROTO_NONE, absent, is STORE_NULL. An attempt its agent fenced (it
     * reached no controller for its lease) ends as a lost node's does. */
    enum attempt_state st = body->fenced ? ATTEMPT_NODE_FAIL : state_of(body->state);
    int rc =
        sched_end_plan(s, j, st, body->exit_code, body->signal, body->reason, now_ms, &rp->end, b);
    /* Held back from now on, not from the agent's next heartbeat. */
    nodes_dirty_add(nodes_find(&s->nodes, node), body->dirty_gpus, body->ndirty);
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
    struct proto_report body = {0};
    char err[256];
    int rc = proto_report_decode(http_request_json(req), &body, err, sizeof(err));
    if (rc)
        return rc == GPO_ENOMEM ? http_request_error(req, 500, "internal", "out of memory")
                                : http_request_error(req, 400, "invalid_field", "%s", err);
    struct report *rp = calloc(1, sizeof(*rp));
    struct store_batch *b = rp ? store_batch_new() : NULL;
    if (!b) {
        free(rp);
        proto_report_release(&body);
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
    const struct cluster_node *cn = problem ? NULL : cluster_node_get(&s->cluster, node);
    bool refused = cn && node_check_uuids(cn, "dirty_gpus", body.dirty_gpus, body.ndirty, err,
                                          sizeof(err)) != 0;
    /* A first_node job's outcome is rank 0's program's: the other ranks
     * only hold their part of the allocation for its steps. */
    bool decides =
        !problem && j->spec.launch == JOBSPEC_FIRST_NODE && strcmp(j->att.parts[0].node, node) == 0;
    size_t waiting =
        !problem && !refused && !decides && body.state == PROTO_STATE_COMPLETED && j->att.nparts > 1
            ? gang_ranks_left(j, node)
            : 0;
    /* A replica's endpoint again, its attempt stored RUNNING already: in
     * memory only (its agent repeats it every few seconds). */
    json_t *again = !problem && !refused && body.state == PROTO_STATE_RUNNING && j->att.running
                        ? api_job_json(s, j, now)
                        : NULL;
    if (waiting || again)
        nodes_seen(nodes_find(&s->nodes, node), now, srv_mono_ms(s));
    if (again && body.endpoint.port)
        serve_endpoint(s, j, node, &body.endpoint, now);
    else if (!waiting && !again && !problem && !refused)
        rc = report_plan(s, j, node, &body, now, rp, b);
    pthread_mutex_unlock(&s->lock);
    proto_report_release(&body);
    if (waiting || again || problem || refused || rc) {
        store_batch_free(b);
        free(rp);
        if (again)
            return http_request_respond_json(req, 200, again);
        if (refused)
            return http_request_error(req, 400, "invalid_field", "%s", err);
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

/* ---- MIG plan results ----------------------------------------------------------- */

/* POST /v1/nodes/NAME/mig/ID: how plan ID went (proto_mig_result). */
static int node_mig_result(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    uint64_t id;
    if (!parse_u64(http_request_param(req, "id"), &id) || !id)
        return http_request_error(req, 400, "invalid_path",
                                  "expected /v1/nodes/NODE/mig/ID with a positive plan id");
    struct proto_mig_result r = {0};
    char err[512];
    int rc = proto_mig_result_decode(http_request_json(req), &r, err, sizeof(err));
    if (rc) {
        proto_mig_result_release(&r);
        return rc == GPO_ENOMEM ? http_request_error(req, 500, "internal", "out of memory")
                                : http_request_error(req, 400, "invalid_field", "%s", err);
    }
    const char *node = node_param(req);
    pthread_mutex_lock(&s->lock);
    struct node_rt *rt = nodes_find(&s->nodes, node);
    if (rt) {
        nodes_seen(rt, srv_now_ms(s), srv_mono_ms(s));
        rc = migctl_result(s, node, id, &r, err, sizeof(err));
    }
    pthread_mutex_unlock(&s->lock);
    proto_mig_result_release(&r);
    if (!rt)
        return http_request_error(req, 404, "not_found", "no node '%s' (register it first)", node);
    if (rc == GPO_ENOENT)
        return http_request_error(req, 404, "not_found", "%s", err);
    if (rc == GPO_EINVAL)
        return http_request_error(req, 400, "invalid_field", "%s", err);
    if (rc)
        return http_request_error(req, 500, "internal", "%s", err);
    return http_request_respond_json(req, 204, NULL);
}

/* ---- registration, drain and resume: node writes ------------------------------- */

/* A registration's node, as the configuration keeps it (name from the path). */
static int node_from_register(const struct proto_register *r, const char *name,
                              struct cluster_node *ret)
{
    struct cluster_node n = {.cpus = r->cpus, .mem_mib = r->mem_mib, .log_port = r->log_port};
    n.name = strdup(name);
    n.pool = strdup(r->pool);
    n.addr = r->addr ? strdup(r->addr) : NULL;
    n.gpus = calloc(r->ngpus ? r->ngpus : 1, sizeof(*n.gpus));
    int rc = n.name && n.pool && (n.addr || !r->addr) && n.gpus ? 0 : GPO_ENOMEM;
    for (size_t k = 0; !rc && k < r->ngpus; k++) {
        const struct proto_gpu *g = &r->gpus[k];
        n.gpus[k] = (struct cluster_gpu){.index = g->index,
                                         .uuid = strdup(g->uuid),
                                         .gpu_type = strdup(g->gpu_type),
                                         .mem_mib = g->mem_mib,
                                         .nvlink_domain = g->nvlink_domain,
                                         .mig_slices = g->mig_slices,
                                         .mig_enabled = g->mig_enabled,
                                         .mig_pending = g->mig_pending};
        n.ngpus++;
        if (!n.gpus[k].uuid || !n.gpus[k].gpu_type)
            rc = GPO_ENOMEM;
        /* The instances (an unknown profile id is logged at the next heartbeat). */
        else if (g->mig_enabled && g->nmig)
            rc = migctl_gpu_set(&n.gpus[k], g->mig, g->nmig);
    }
    if (rc) {
        cluster_node_release(&n);
        return rc;
    }
    *ret = n;
    return 0;
}

/* The answer to a registration: node n as stored, with its state, the
 * log token of its log server and the fence settings, through the
 * protocol's encoder. A new object, or NULL when out of memory. */
static json_t *registered_json(const struct server *s, const struct cluster_node *n,
                               const char *token)
{
    static const enum proto_node_state states[] = {[CLUSTER_NODE_UP] = PROTO_NODE_UP,
                                                   [CLUSTER_NODE_DRAINING] = PROTO_NODE_DRAINING,
                                                   [CLUSTER_NODE_DOWN] = PROTO_NODE_DOWN};
    struct proto_registered m = {.node = {.name = n->name,
                                          .pool = n->pool,
                                          .cpus = n->cpus,
                                          .mem_mib = n->mem_mib,
                                          .addr = n->addr,
                                          .log_port = n->log_port,
                                          .ngpus = n->ngpus},
                                 .state = states[n->state],
                                 .log_token = (char *)token,
                                 .fence_lease_ms = s->cfg.fence_lease_ms,
                                 .fence_grace_ms = s->cfg.fence_grace_ms};
    struct proto_gpu *gpus = calloc(n->ngpus ? n->ngpus : 1, sizeof(*gpus));
    if (!gpus)
        return NULL;
    for (size_t k = 0; k < n->ngpus; k++) {
        const struct cluster_gpu *g = &n->gpus[k];
        gpus[k] = (struct proto_gpu){g->index,         g->uuid,       g->gpu_type,   g->mem_mib,
                                     g->nvlink_domain, g->mig_slices, g->mig_enabled};
    }
    m.node.gpus = gpus;
    json_t *out = NULL;
    if (proto_registered_encode(&m, &out))
        out = NULL;
    free(gpus);
    return out;
}

struct node_write {
    struct server *s;
    struct http_request *req;
    struct config_write *w;
    bool api_form; /* answer with the API's node (an admin's write), not the protocol's */
};

static void node_write_abort(void *ctx)
{
    struct node_write *nw = ctx;
    api_config_write_drop(nw->s, nw->w, NULL);
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
    char tok[AUTH_LOG_TOKEN_LEN + 1];
    auth_node_log_token(&s->auth, name, tok);
    pthread_mutex_lock(&s->lock);
    int rc =
        config_write_done(&s->config, nw->w, r->err, srv_now_ms(s), &out, &o, err, sizeof(err));
    if (!nw->api_form) {
        json_decref(o); /* the API's form: the agent reads the protocol's */
        o = NULL;
    }
    const struct cluster_node *n = rc || nw->api_form ? NULL : cluster_node_get(&s->cluster, name);
    if (n)
        o = registered_json(s, n, tok);
    bool removed = !rc && out == CONFIG_REMOVED;
    if (!rc)
        sched_wake(s->sched, SCHED_WHY_NODE);
    pthread_mutex_unlock(&s->lock);
    sodium_memzero(tok, sizeof(tok));
    if (r->err)
        http_request_complete_error(nw->req, 503, "store", "the node was not stored: %s",
                                    gpo_strerror(r->err));
    else if (removed)
        http_request_complete(nw->req, 204, NULL);
    else if (rc || !o)
        http_request_complete_error(nw->req, 500, "internal", "node stored, not applied: %s", err);
    else
        http_request_complete(nw->req, out == CONFIG_REPLACED ? 200 : 201, o), o = NULL;
    json_decref(o);
    free(nw);
}

static int node_write_commit(struct server *s, struct http_request *req, int rc,
                             struct config_write *w, struct store_batch *b, const char *err,
                             bool api_form)
{
    if (rc)
        return api_error(req, rc, err);
    struct node_write *nw = calloc(1, sizeof(*nw));
    if (!nw) {
        api_config_write_drop(s, w, b);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    *nw = (struct node_write){.s = s, .req = req, .w = w, .api_form = api_form};
    api_commit(s, req, b, node_write_done, node_write_abort, nw);
    return 0;
}

static int node_put(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const char *name = node_param(req);
    struct proto_register r = {0};
    struct cluster_node node = {0};
    char err[512];
    int rc = proto_register_decode(http_request_json(req), &r, err, sizeof(err));
    if (!rc && r.name && strcmp(r.name, name) != 0)
        rc = errbuf_set(err, sizeof(err), GPO_EINVAL, "field 'name': must be '%s', as in the path",
                        name);
    if (!rc && (rc = node_from_register(&r, name, &node)) != 0)
        errbuf_set(err, sizeof(err), rc, "out of memory");
    proto_register_release(&r);
    if (rc)
        return api_error(req, rc, err);
    struct config_write *w = NULL;
    struct store_batch *b = NULL;
    pthread_mutex_lock(&s->lock);
    rc = config_node_put_plan(&s->config, &node, http_request_client(req), srv_now_ms(s), &w, &b,
                              err, sizeof(err));
    pthread_mutex_unlock(&s->lock);
    cluster_node_release(&node);
    return node_write_commit(s, req, rc, w, b, err, false);
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
    return node_write_commit(s, req, rc, w, b, err, false);
}

/* DELETE /v1/nodes/NAME: the record goes (an agent registered the machine
 * again under another name); 409 while an attempt holds its GPUs. */
static int node_delete(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    struct config_write *w = NULL;
    struct store_batch *b = NULL;
    char err[512];
    pthread_mutex_lock(&s->lock);
    int rc = config_node_delete_plan(&s->config, node_param(req), srv_now_ms(s), &w, &b, err,
                                     sizeof(err));
    pthread_mutex_unlock(&s->lock);
    return node_write_commit(s, req, rc, w, b, err, false);
}

/* PUT /v1/nodes/NAME/mig {"mig": SETTING}: the node's own MIG setting
 * (docs/mig.md; null: its pool's), answered with the node as GET shows it. */
static int node_mig(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const json_t *body = http_request_json(req);
    char err[1024];
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)body, key, v)
    {
        if (strcmp(key, "mig") != 0) {
            char q[JSONV_QUOTE_MAX + 4];
            return http_request_error(req, 400, "invalid_field",
                                      "unknown field '%s' (expected 'mig')",
                                      jsonv_quote(key, strlen(key), q));
        }
    }
    if (!json_object_get(body, "mig"))
        return http_request_error(req, 400, "invalid_field",
                                  "missing required field 'mig' (null: the pool's)");
    struct config_write *w = NULL;
    struct store_batch *b = NULL;
    pthread_mutex_lock(&s->lock);
    int rc = config_node_mig_plan(&s->config, node_param(req), json_object_get(body, "mig"),
                                  srv_now_ms(s), &w, &b, err, sizeof(err));
    pthread_mutex_unlock(&s->lock);
    return node_write_commit(s, req, rc, w, b, err, true);
}

static const enum cluster_node_state draining = CLUSTER_NODE_DRAINING, up = CLUSTER_NODE_UP;

static const struct http_route routes[] = {
    {"PUT", "/v1/nodes/{name}", node_put, API_ROUTE_AGENT | HTTP_ROUTE_JSON_BODY, NULL},
    {"DELETE", "/v1/nodes/{name}", node_delete, API_ROUTE_ADMIN, NULL},
    {"POST", "/v1/nodes/{name}/heartbeat", node_heartbeat, API_ROUTE_AGENT | HTTP_ROUTE_RAW_BODY,
     NULL},
    {"GET", "/v1/nodes/{name}/assignments", node_assignments, API_ROUTE_AGENT, NULL},
    {"POST", "/v1/nodes/{name}/attempts/{job}/{attempt}", node_report,
     API_ROUTE_AGENT | HTTP_ROUTE_JSON_BODY, NULL},
    {"POST", "/v1/nodes/{name}/mig/{id}", node_mig_result, API_ROUTE_AGENT | HTTP_ROUTE_JSON_BODY,
     NULL},
    {"POST", "/v1/nodes/{name}/drain", node_state, API_ROUTE_ADMIN, &draining},
    {"POST", "/v1/nodes/{name}/resume", node_state, API_ROUTE_ADMIN, &up},
    {"PUT", "/v1/nodes/{name}/mig", node_mig, API_ROUTE_ADMIN | HTTP_ROUTE_JSON_BODY, NULL},
};
const struct api_routes api_nodes_routes = {routes, sizeof(routes) / sizeof(routes[0])};

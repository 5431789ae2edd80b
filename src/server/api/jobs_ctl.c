/*
 * jobs_ctl.c - scontrol's habits over the API: POST /v1/jobs/ID/hold,
 * /release and /requeue, and PATCH /v1/jobs/ID (time_limit_s, priority,
 * dependencies). ID is a job, "A_I" (task I of array A), or an array's id,
 * which names every task of it. Who may: the job's team and admins, as for
 * a cancel. Each is planned under the lock, committed, then applied and
 * answered with {"jobs": [...]}, the jobs it changed.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/api/api.h"
#include "server/sched/sched.h"
#include "server/srv.h"
#include "util/errbuf.h"
#include "util/timefmt.h"
#include "base/banned.h"

enum ctl_op { CTL_HOLD, CTL_RELEASE, CTL_REQUEUE, CTL_UPDATE };

/* One job of the request: what its commit changes. */
struct ctl_target {
    int64_t id;
    int64_t attempt;     /* requeue: the attempt to kill (0: the job has ended) */
    enum job_hold hold;  /* hold, release: the job's hold afterwards */
    struct jobspec spec; /* update: the job's spec afterwards (owned) */
    bool has_spec;
};

/* A request between its plan and its answer. */
struct ctl {
    struct server *s;
    struct http_request *req;
    enum ctl_op op;
    bool admin;
    int64_t at_ms;
    struct ctl_target *t;
    size_t n;
};

static void ctl_free(void *ctx)
{
    struct ctl *c = ctx;
    for (size_t k = 0; c && k < c->n; k++)
        if (c->t[k].has_spec)
            jobspec_release(&c->t[k].spec);
    if (c)
        free(c->t);
    free(c);
}

/* "N" or "N_I" into *ret_id and *ret_index (-1: none). */
static bool parse_target(const char *text, int64_t *ret_id, int64_t *ret_index)
{
    if (!text || !*text || strlen(text) > 40 || text[0] == '+' || text[0] == '-')
        return false;
    char *end;
    errno = 0;
    long long id = strtoll(text, &end, 10);
    long long index = -1;
    if (!errno && *end == '_' && end[1] && end[1] != '+' && end[1] != '-')
        index = strtoll(end + 1, &end, 10);
    if (errno || *end || id < 1 || (index < -1))
        return false;
    *ret_id = id;
    *ret_index = index;
    return true;
}

/*
 * The jobs the path names, that the user may act on, into *ret (caller
 * frees): one job, one task, or every task of an array. Answers 400, 403
 * and 404 itself (returning false). Under the lock.
 */
static bool ctl_jobs(struct server *s, struct http_request *req, struct job ***ret, size_t *ret_n)
{
    int64_t id, index;
    const char *text = http_request_param(req, "id");
    if (!parse_target(text, &id, &index)) {
        http_request_error(req, 400, "invalid_path",
                           "job id: expected a positive integer, or ARRAY_TASK (41_7)");
        return false;
    }
    size_t first = jobs_index(&s->jobs, id), n = 0;
    const struct jobs *t = &s->jobs;
    if (index >= 0) {
        while (first < t->n && t->v[first]->array_id == id && t->v[first]->array_index != index)
            first++;
        n = first < t->n && t->v[first]->array_id == id ? 1 : 0;
    } else if (first < t->n && t->v[first]->id == id) {
        n = 1;
        while (t->v[first]->array_id == id && first + n < t->n && t->v[first + n]->array_id == id)
            n++;
    }
    if (!n) {
        http_request_error(req, 404, "not_found", "no job %.40s", text);
        return false;
    }
    if (!auth_user_may(api_request_user(req), t->v[first]->team)) {
        http_request_error(req, 403, "forbidden", "job %.40s belongs to another team", text);
        return false;
    }
    // NOLINTNEXTLINE(bugprone-sizeof-expression): *p is a pointer (an array of them)
    struct job **v = calloc(n, sizeof(*v));
    if (!v) {
        http_request_error(req, 500, "internal", "out of memory");
        return false;
    }
    // NOLINTNEXTLINE(bugprone-sizeof-expression): *v is a pointer (an array of them)
    memcpy(v, &t->v[first], n * sizeof(*v));
    *ret = v;
    *ret_n = n;
    return true;
}

static bool is_pending(const struct job *j)
{
    return j->state == JOB_PENDING && !j->att.n;
}

/* ---- planning: one job each; GPO_ESTATE, GPO_EPERM, GPO_EINVAL with the
 * message, 1 to leave an array's task out, 0 to change it ---------------- */

static int plan_hold(struct ctl *c, const struct job *j, struct ctl_target *t, char *err,
                     size_t errlen)
{
    if (!is_pending(j))
        return errbuf_set(err, errlen, GPO_ESTATE,
                          "job %" PRId64 " is %s: only a pending job is held", j->id,
                          job_state_name(j->state));
    /* A user's hold does not weaken an admin's. */
    t->hold = c->admin || j->hold == JOB_HOLD_ADMIN ? JOB_HOLD_ADMIN : JOB_HOLD_USER;
    return 0;
}

static int plan_release(struct ctl *c, const struct job *j, struct ctl_target *t, char *err,
                        size_t errlen)
{
    if (!is_pending(j))
        return errbuf_set(err, errlen, GPO_ESTATE,
                          "job %" PRId64 " is %s: only a pending job is released", j->id,
                          job_state_name(j->state));
    if (j->hold == JOB_HOLD_ADMIN && !c->admin)
        return errbuf_set(err, errlen, GPO_EPERM,
                          "job %" PRId64 " is held by an admin: only an admin releases it", j->id);
    t->hold = JOB_HOLD_NONE;
    return 0;
}

static int plan_requeue(struct ctl *c, const struct job *j, struct ctl_target *t, char *err,
                        size_t errlen)
{
    (void)c;
    if (j->att.n && j->att.kill)
        return errbuf_set(err, errlen, GPO_ESTATE, "job %" PRId64 " is being stopped already",
                          j->id);
    if (j->att.n && j->state == JOB_RUNNING) {
        t->attempt = j->att.n;
        return 0;
    }
    if (job_state_final(j->state) && !j->att.n)
        return 0;
    return errbuf_set(err, errlen, GPO_ESTATE,
                      "job %" PRId64 " is %s: only a running or ended job is requeued", j->id,
                      job_state_name(j->state));
}

/* The fields PATCH /v1/jobs/ID may change. */
static const char *const updatable[] = {"time_limit_s", "priority", "dependencies"};

/* Whether job `from` waits, directly or through other pending jobs, for
 * job `target`: a dependency on it would be a cycle neither could leave.
 * The walk is bounded; past the bound it answers no. */
static bool waits_for(const struct jobs *t, const struct job *from, int64_t target)
{
    int64_t stack[256];
    size_t n = 0, steps = 0;
    stack[n++] = from->id;
    while (n && steps++ < 4096) {
        const struct job *x = jobs_find(t, stack[--n]);
        if (!x || job_state_final(x->state))
            continue;
        for (size_t k = 0; k < x->spec.ndeps; k++) {
            if (x->spec.deps[k].job == target)
                return true;
            if (n < sizeof(stack) / sizeof(stack[0]))
                stack[n++] = x->spec.deps[k].job;
        }
    }
    return false;
}

/* The checks of an update that need the server: the new class, the new
 * dependencies, and a user's time limit only going down. */
static int update_check(struct ctl *c, const struct job *j, const struct jobspec *ns, char *err,
                        size_t errlen)
{
    struct server *s = c->s;
    const struct jobspec *os = &j->spec;
    bool raised =
        ns->time_limit_s != os->time_limit_s &&
        (ns->time_limit_s == 0 || (os->time_limit_s && ns->time_limit_s > os->time_limit_s));
    if (raised && !c->admin)
        return errbuf_set(
            err, errlen, GPO_EPERM,
            "field 'time_limit_s': only an admin raises a job's time limit (now %" PRId64 " s)",
            os->time_limit_s);
    if (ns->priority && !cluster_class_get(&s->cluster, ns->priority))
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'priority': no priority class '%s'",
                          ns->priority);
    char why[512];
    if (ns->priority && (!os->priority || strcmp(ns->priority, os->priority) != 0) &&
        cost_blocks(&s->cost, j->team, ns->priority, c->at_ms, why, sizeof(why)))
        return errbuf_set(err, errlen, GPO_EPERM, "field 'priority': %s", why);
    bool deps_changed = ns->ndeps != os->ndeps;
    for (size_t k = 0; k < ns->ndeps; k++) {
        const struct job *d = jobs_find(&s->jobs, ns->deps[k].job);
        deps_changed |= k < os->ndeps && (ns->deps[k].job != os->deps[k].job ||
                                          ns->deps[k].type != os->deps[k].type);
        if (!d || !auth_user_may(api_request_user(c->req), d->team))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'dependencies[%zu].job': no job %" PRId64, k, ns->deps[k].job);
        if (d == j || waits_for(&s->jobs, d, j->id))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'dependencies[%zu].job': job %" PRId64
                              " waits for job %" PRId64 " (a cycle)",
                              k, d->id, j->id);
    }
    if (deps_changed && !is_pending(j))
        return errbuf_set(err, errlen, GPO_ESTATE,
                          "field 'dependencies': job %" PRId64 " is %s; only a pending job waits "
                          "for dependencies",
                          j->id, job_state_name(j->state));
    return 0;
}

static int plan_update(struct ctl *c, const struct job *j, struct ctl_target *t, char *err,
                       size_t errlen)
{
    if (job_state_final(j->state))
        return errbuf_set(err, errlen, GPO_ESTATE, "job %" PRId64 " has ended (%s)", j->id,
                          job_state_name(j->state));
    /* The job's spec with the body's fields over it, decoded again: the
     * submit's checks, with the field's name in the message. */
    const json_t *body = http_request_json(c->req);
    json_t *o = jobspec_to_json(&j->spec);
    int rc = o ? 0 : GPO_ENOMEM;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)body, key, v)
    {
        size_t k = 0;
        while (k < sizeof(updatable) / sizeof(updatable[0]) && strcmp(updatable[k], key) != 0)
            k++;
        if (!rc && k == sizeof(updatable) / sizeof(updatable[0]))
            rc = errbuf_set(err, errlen, GPO_EINVAL,
                            "field '%.64s': not one an update changes (time_limit_s, priority, "
                            "dependencies)",
                            key);
        if (!rc && json_object_set(o, key, v))
            rc = GPO_ENOMEM;
    }
    if (!rc && !json_object_size(body))
        rc = errbuf_set(err, errlen, GPO_EINVAL,
                        "expected a field to change (time_limit_s, priority, dependencies)");
    if (!rc && (rc = jobspec_decode_stored(o, &t->spec, err, errlen)) == 0) {
        t->has_spec = true;
        rc = update_check(c, j, &t->spec, err, errlen);
    }
    json_decref(o);
    return rc;
}

typedef int (*plan_fn)(struct ctl *c, const struct job *j, struct ctl_target *t, char *err,
                       size_t errlen);

/* Each operation's plan. On an array, a task in a state it does not apply
 * to (GPO_ESTATE) is left out: hold and release take the pending tasks,
 * requeue the others, update those that have not ended. */
static const plan_fn ops[] = {
    [CTL_HOLD] = plan_hold,
    [CTL_RELEASE] = plan_release,
    [CTL_REQUEUE] = plan_requeue,
    [CTL_UPDATE] = plan_update,
};

/* The row of target t of job j into b. */
static int ctl_row(struct ctl *c, const struct job *j, const struct ctl_target *t,
                   struct store_batch *b)
{
    switch (c->op) {
    case CTL_HOLD:
    case CTL_RELEASE:
        return store_batch_job_hold(b, j->id, job_hold_name(t->hold)) ? GPO_ENOMEM : 0;
    case CTL_REQUEUE:
        if (t->attempt)
            return sched_kill_row(c->s, b, j, KILL_REQUEUE, NULL);
        return store_batch_job_update(b, j->id, job_state_name(JOB_PENDING), "requeued by user",
                                      c->at_ms, NULL)
                   ? GPO_ENOMEM
                   : 0;
    case CTL_UPDATE: {
        json_t *o = jobspec_to_json(&t->spec);
        char *text =
            o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(15)) : NULL;
        json_decref(o);
        /* updated_ms stays: a pending job keeps its place in the queue. */
        int rc = text ? store_batch_job_update(b, j->id, job_state_name(j->state), j->reason,
                                               j->updated_ms, text)
                      : GPO_ENOMEM;
        free(text);
        return rc ? GPO_ENOMEM : 0;
    }
    }
    return GPO_EINVAL;
}

/* Plans every job into c->t and b; answers the request itself on a
 * problem (returning false). Under the lock. */
static bool ctl_plan(struct ctl *c, struct job **v, size_t n, struct store_batch *b)
{
    char err[512] = "";
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        struct ctl_target *t = &c->t[c->n];
        memset(t, 0, sizeof(*t));
        t->id = v[k]->id;
        int r = ops[c->op](c, v[k], t, err, sizeof(err));
        if (r == GPO_ESTATE && n > 1)
            r = 1; /* an array's task this does not apply to: left out */
        if (r == 0)
            r = ctl_row(c, v[k], t, b);
        if (r == 0) {
            c->n++;
        } else if (t->has_spec) {
            jobspec_release(&t->spec);
            t->has_spec = false;
        }
        rc = r < 0 ? r : 0;
    }
    if (!rc && !c->n)
        rc = errbuf_set(err, sizeof(err), GPO_ESTATE,
                        "no task of array %" PRId64 " is in a state this applies to",
                        v[0]->array_id);
    if (rc == GPO_EPERM)
        http_request_error(c->req, 403, "forbidden", "%s", err);
    else if (rc)
        api_error(c->req, rc, err[0] ? err : gpo_strerror(rc));
    return rc == 0;
}

/* ---- applying ----------------------------------------------------------------- */

static void apply_one(struct ctl *c, struct job *j, struct ctl_target *t)
{
    struct server *s = c->s;
    switch (c->op) {
    case CTL_HOLD:
    case CTL_RELEASE:
        j->hold = t->hold;
        if (j->state == JOB_PENDING)
            job_set_wait(j, job_hold_wait(j->hold), -1);
        break;
    case CTL_REQUEUE:
        if (t->attempt && j->att.n == t->attempt) {
            sched_kill_apply(s, j, KILL_REQUEUE, NULL, s->sched->policy.preempt_grace_ms);
        } else if (!t->attempt && job_state_final(j->state) && !j->att.n) {
            j->state = JOB_PENDING;
            j->updated_ms = j->queued_ms = c->at_ms;
            free(j->reason);
            j->reason = strdup("requeued by user");
            job_set_wait(j, NULL, -1);
        }
        break;
    case CTL_UPDATE: {
        bool retime = j->att.n && t->spec.time_limit_s != j->spec.time_limit_s;
        jobspec_release(&j->spec);
        j->spec = t->spec;
        t->has_spec = false;
        /* A running attempt's agent learns its new limit from its next answer. */
        for (size_t p = 0; retime && p < j->att.nparts; p++)
            nodes_changed(&s->nodes, j->att.parts[p].node);
        break;
    }
    }
}

static void ctl_done(void *ctx, const struct store_result *r)
{
    struct ctl *c = ctx;
    struct server *s = c->s;
    if (r->err) {
        http_request_complete_error(c->req, 503, "store", "the change was not stored: %s%s%s",
                                    gpo_strerror(r->err), r->msg[0] ? ": " : "", r->msg);
        ctl_free(c);
        return;
    }
    json_t *list = json_array();
    pthread_mutex_lock(&s->lock);
    int64_t now = srv_now_ms(s);
    for (size_t k = 0; k < c->n; k++) {
        struct job *j = jobs_find(&s->jobs, c->t[k].id);
        if (!j)
            continue;
        apply_one(c, j, &c->t[k]);
        if (list && json_array_append_new(list, api_job_json(s, j, now))) {
            json_decref(list);
            list = NULL;
        }
    }
    sched_wake(s->sched, SCHED_WHY_CHANGE);
    pthread_mutex_unlock(&s->lock);
    json_t *o = list ? json_pack("{s:o}", "jobs", list) : NULL;
    if (o)
        http_request_complete(c->req, 200, o);
    else
        http_request_complete_error(c->req, 500, "internal", "out of memory");
    ctl_free(c);
}

static int job_ctl(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const enum ctl_op *op = http_request_route_arg(req);
    struct ctl *c = calloc(1, sizeof(*c));
    if (!c)
        return http_request_error(req, 500, "internal", "out of memory");
    *c = (struct ctl){.s = s, .req = req, .op = *op, .admin = api_request_user(req)->admin};
    struct store_batch *b = store_batch_new();
    struct job **v = NULL;
    size_t n = 0;
    pthread_mutex_lock(&s->lock);
    c->at_ms = srv_now_ms(s);
    bool ok = b && ctl_jobs(s, req, &v, &n);
    if (ok && !(c->t = calloc(n, sizeof(*c->t)))) {
        http_request_error(req, 500, "internal", "out of memory");
        ok = false;
    }
    ok = ok && ctl_plan(c, v, n, b);
    pthread_mutex_unlock(&s->lock);
    free(v);
    if (!b)
        http_request_error(req, 500, "internal", "out of memory");
    if (!ok) {
        store_batch_free(b);
        ctl_free(c);
        return 0;
    }
    api_commit(s, req, b, ctl_done, ctl_free, c);
    return 0;
}

static const enum ctl_op op_hold = CTL_HOLD, op_release = CTL_RELEASE, op_requeue = CTL_REQUEUE,
                         op_update = CTL_UPDATE;

static const struct http_route routes[] = {
    {"POST", "/v1/jobs/{id}/hold", job_ctl, 0, &op_hold},
    {"POST", "/v1/jobs/{id}/release", job_ctl, 0, &op_release},
    {"POST", "/v1/jobs/{id}/requeue", job_ctl, 0, &op_requeue},
    {"PATCH", "/v1/jobs/{id}", job_ctl, HTTP_ROUTE_JSON_BODY, &op_update},
};
const struct api_routes api_jobs_ctl_routes = {routes, sizeof(routes) / sizeof(routes[0])};

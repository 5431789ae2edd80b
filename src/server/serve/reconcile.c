/*
 * reconcile.c - the serving runtime's turn on the scheduling loop's thread
 * (serve.h): the jobs' states into the replicas, the routers' loads into the
 * autoscaler, and its decision acted on.
 *
 * A replica starts as a job through the submission path POST /v1/jobs takes
 * (job_submit_rows, committed, job_submit_apply in the completion) as the
 * service's user, in the service's class: quotas, ordering and preemption
 * are the core's. A replica stops through the kill path (sched_kill_row,
 * committed, sched_kill_apply in the completion), cause CANCELLED.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/sched/sched.h"
#include "server/serve/serve_int.h"
#include "server/srv.h"
#include "base/banned.h"

#define SCALED_DOWN ": scaled down"
#define NOT_READY   ": replaced (not ready)"

int64_t serve_due_ms(const struct server *s, int64_t now_ms)
{
    if (s->serve->urgent)
        return 0;
    /* No service and no replica: nothing to reconcile until one is made. */
    if (!s->cluster.nservices && !s->serve->n)
        return INT64_MAX;
    int64_t last = s->serve->last_tick_ms;
    return last > now_ms ? now_ms : last + SERVE_TICK_MS; /* later: the wall clock stepped back */
}

/* ---- submitting a replica ------------------------------------------------------ */

struct submit {
    struct server *s;
    char service[PROTO_SPEC_NAME_MAX + 1];
    uint32_t replica;
    uint64_t generation;
    struct job_submit job;
};

static void submit_free(struct submit *sub)
{
    job_submit_release(&sub->job);
    free(sub);
}

/* The store's completion (writer thread): the replica's job is durable. */
static void submit_done(void *ctx, const struct store_result *r)
{
    struct submit *sub = ctx;
    struct server *s = sub->s;
    pthread_mutex_lock(&s->lock);
    struct serve_service *svc = serve_service_get(s->serve, sub->service, false, 0);
    if (svc && svc->submitting)
        svc->submitting--;
    struct job *j = NULL;
    if (r->err)
        fprintf(stderr, "gpuorch server: service %s: replica %u not stored: %s%s%s\n", sub->service,
                sub->replica, gpo_strerror(r->err), r->msg[0] ? ": " : "", r->msg);
    else if (job_submit_apply(&s->jobs, &sub->job, r->job_ids, r->njob_ids, &j) == 0 && j && svc) {
        struct serve_replica rep = {.job = j->id,
                                    .replica = sub->replica,
                                    .generation = sub->generation,
                                    .state = SERVE_STARTING,
                                    .metric_milli = PROTO_NONE};
        if (serve_replica_add(svc, &rep))
            fprintf(stderr, "gpuorch server: service %s: job %" PRId64 " not tracked: %s\n",
                    sub->service, j->id, gpo_strerror(GPO_ENOMEM));
    }
    sched_wake(s->sched, SCHED_WHY_SUBMIT);
    pthread_mutex_unlock(&s->lock);
    submit_free(sub);
}

/* Who the replicas run as: the service's user. */
static int submit_user(struct server *s, const struct cluster_service *c, struct job_submit *js)
{
    struct store_user u = {0};
    int rc = c->user ? store_user_get_by_name(s->store, c->user, &u) : GPO_ENOENT;
    if (!rc) {
        js->user_id = u.id;
        snprintf(js->user, sizeof(js->user), "%s", u.name);
        snprintf(js->unix_user, sizeof(js->unix_user), "%s", u.unix_user ? u.unix_user : "");
    }
    store_user_release(&u);
    return rc;
}

static int submit_one(struct server *s, struct serve_service *svc, const struct cluster_service *c,
                      int64_t now_ms)
{
    /* A replica is a job: a team over its budget gets none below the
     * budget's class, as POST /v1/jobs refuses them (403). */
    char why[sizeof(svc->blocked)];
    if (cost_blocks(&s->cost, c->replica.team, c->replica.priority, now_ms, why, sizeof(why))) {
        snprintf(svc->blocked, sizeof(svc->blocked), "%s", why);
        return GPO_EPERM;
    }
    svc->blocked[0] = '\0';
    struct submit *sub = calloc(1, sizeof(*sub));
    if (!sub)
        return GPO_ENOMEM;
    sub->s = s;
    snprintf(sub->service, sizeof(sub->service), "%s", c->name);
    sub->replica = svc->next_replica;
    sub->generation = c->generation;
    char msg[512] = "";
    int rc = cluster_service_replica_spec(c, sub->replica, &sub->job.spec, msg, sizeof(msg));
    rc = rc ? rc : submit_user(s, c, &sub->job);
    rc = rc ? rc : job_submit_resolve(&s->cluster, &sub->job.spec, msg, sizeof(msg));
    sub->job.submit_ms = now_ms;
    sub->job.ntasks = 1;
    struct store_batch *b = rc ? NULL : store_batch_new();
    if (!rc && (!b || job_submit_rows(&sub->job, NULL, b)))
        rc = GPO_ENOMEM;
    if (rc) {
        store_batch_free(b);
        submit_free(sub);
        snprintf(svc->backoff.reason, sizeof(svc->backoff.reason), "replica not submitted: %.170s",
                 msg[0] ? msg : gpo_strerror(rc));
        return rc;
    }
    svc->next_replica++;
    svc->submitting++;
    if ((rc = store_commit(s->store, b, submit_done, sub)) != 0) {
        svc->submitting--;
        submit_free(sub);
    }
    return rc;
}

/* ---- stopping a replica ------------------------------------------------------------ */

struct kill {
    struct server *s;
    int64_t job, attempt; /* attempt 0: a pending job, cancelled */
    const char *detail;   /* static */
};

static void kill_done(void *ctx, const struct store_result *r)
{
    struct kill *k = ctx;
    struct server *s = k->s;
    pthread_mutex_lock(&s->lock);
    struct job *j = jobs_find(&s->jobs, k->job);
    struct serve_replica *rep = serve_replica_find(s->serve, k->job, NULL);
    if (r->err) {
        if (rep)
            rep->killing = false; /* not durable: the next turn tries again */
    } else if (j && k->attempt && j->att.n == k->attempt) {
        sched_kill_apply(s, j, KILL_CANCELLED, k->detail, s->sched->policy.preempt_grace_ms);
    } else if (j && !k->attempt && j->state == JOB_PENDING) {
        j->state = JOB_CANCELLED;
        j->updated_ms = srv_now_ms(s);
        free(j->reason);
        j->reason = strdup(k->detail + 2);
        job_set_wait(j, NULL, j->est_start_ms);
        sched_wake(s->sched, SCHED_WHY_CANCEL);
    }
    pthread_mutex_unlock(&s->lock);
    free(k);
}

/* Stops replica r's job (pending: cancelled; running: SIGTERM, then SIGKILL
 * after the grace). */
static void kill_one(struct server *s, struct serve_replica *r, const char *detail, int64_t now_ms)
{
    const struct job *j = jobs_find(&s->jobs, r->job);
    if (!j || job_state_final(j->state) || j->att.kill != KILL_NONE)
        return;
    struct kill *k = calloc(1, sizeof(*k));
    struct store_batch *b = k ? store_batch_new() : NULL;
    int rc = b ? store_batch_set_decision(b, s->epoch) : GPO_ENOMEM;
    if (!rc && k) {
        *k = (struct kill){s, j->id, j->att.n, detail};
        rc = j->att.n ? sched_kill_row(s, b, j, KILL_CANCELLED, detail)
             : store_batch_job_update(b, j->id, job_state_name(JOB_CANCELLED), detail + 2, now_ms,
                                      NULL)
                 ? GPO_ENOMEM
                 : 0;
    }
    if (rc || !k) {
        store_batch_free(b);
        free(k);
        return;
    }
    r->killing = true;
    if (store_commit(s->store, b, kill_done, k) != 0) {
        r->killing = false;
        free(k);
    }
}

/* ---- one service ------------------------------------------------------------------- */

/* The jobs' states into the replicas: ended ones are forgotten (a failure
 * counts toward the back-off), a ready one long enough forgives them. */
static void replicas_sync(struct server *s, struct serve_service *svc, int64_t now_ms)
{
    bool changed = false;
    for (size_t k = 0; k < svc->n;) {
        struct serve_replica *r = &svc->v[k];
        const struct job *j = jobs_find(&s->jobs, r->job);
        if (j && !job_state_final(j->state)) {
            if (j->state == JOB_PENDING && r->port) {
                /* Requeued by hand: it is placed and probed again. */
                changed |= r->state == SERVE_READY || r->state == SERVE_DRAINING;
                if (r->state == SERVE_READY)
                    r->state = SERVE_STARTING;
                r->port = 0;
                r->ready_ms = 0;
            }
            if (r->state == SERVE_READY && svc->backoff.failures &&
                now_ms - r->ready_ms >= SERVE_BACKOFF_RESET_MS)
                svc->backoff.failures = 0;
            k++;
            continue;
        }
        bool failed =
            j && (j->state == JOB_FAILED || j->state == JOB_TIMEOUT || j->state == JOB_NODE_FAIL);
        if (failed && r->state != SERVE_DRAINING && !r->killing && r->state != SERVE_FAILED)
            serve_failed(svc, now_ms, j->reason);
        changed |= r->state == SERVE_READY || r->state == SERVE_DRAINING;
        memmove(r, r + 1, (svc->n - k - 1) * sizeof(*r));
        svc->n--;
    }
    if (changed)
        serve_routes_changed(s);
}

/* The routers' fresh reports summed into the service's observations and
 * its replicas' in-flight counts. */
static void loads_sum(const struct serve *sv, struct serve_service *svc, int64_t now_ms)
{
    int64_t conc = 0, rps = 0;
    uint32_t queued = 0, inflight = 0;
    for (size_t k = 0; k < svc->n; k++)
        svc->v[k].inflight = 0;
    for (size_t k = 0; k < sv->nrouters; k++) {
        const struct serve_router *rt = &sv->routers[k];
        if (now_ms - rt->at_ms >= SERVE_REPORT_TTL_MS)
            continue;
        for (size_t l = 0; l < rt->nloads; l++) {
            const struct serve_load *ld = &rt->loads[l];
            if (strcmp(ld->service, svc->name) != 0)
                continue;
            conc += ld->concurrency_milli;
            rps += (int64_t)ld->requests * 1000 * 1000 / rt->interval_ms;
            queued += ld->queued;
            inflight += ld->inflight;
            for (size_t p = 0; p < ld->nreplicas; p++) {
                struct serve_replica *r = serve_replica_find(sv, ld->replicas[p].job, NULL);
                if (r)
                    r->inflight += ld->replicas[p].inflight;
            }
        }
    }
    int64_t metric = PROTO_NONE;
    for (size_t k = 0; k < svc->n; k++)
        if (svc->v[k].state == SERVE_READY && svc->v[k].metric_milli != PROTO_NONE)
            metric = (metric == PROTO_NONE ? 0 : metric) + svc->v[k].metric_milli;
    svc->concurrency_milli = conc;
    svc->rps_milli = rps;
    svc->queued = queued;
    svc->inflight = inflight;
    svc->metric_milli = metric;
}

/* The autoscaler's decision for a configured service. */
static int32_t decide(struct serve_service *svc, const struct cluster_service *c, int64_t now_ms)
{
    int64_t value = c->autoscale.metric == AUTOSCALE_METRIC_RPS       ? svc->rps_milli
                    : c->autoscale.metric == AUTOSCALE_METRIC_REPLICA ? svc->metric_milli
                                                                      : svc->concurrency_milli;
    autoscale_observe(svc->as, now_ms, value == PROTO_NONE ? 0 : value);
    autoscale_observe_load(svc->as, now_ms, svc->rps_milli, svc->queued);
    struct autoscale_input in = {
        .spec = &c->autoscale, .now_ms = now_ms, .queued = (int32_t)svc->queued};
    for (size_t k = 0; k < svc->n; k++) {
        in.ready += svc->v[k].state == SERVE_READY;
        in.starting += svc->v[k].state == SERVE_STARTING;
        in.draining += svc->v[k].state == SERVE_DRAINING;
    }
    in.starting += (int32_t)svc->submitting;
    int32_t from = svc->decision_ms ? svc->decision.desired : in.ready + in.starting;
    struct autoscale_decision d;
    autoscale_decide(svc->as, &in, &d);
    if (!svc->decision_ms || d.desired != svc->decision.desired) {
        svc->decision = d;
        svc->decision_ms = now_ms;
        svc->decision_from = from;
    } else {
        svc->decision.panic = d.panic;
    }
    return d.desired;
}

/* Draining replicas done, failed ones, go; then what the plan says. */
static void act(struct server *s, struct serve_service *svc, const struct cluster_service *c,
                int32_t desired, int64_t now_ms)
{
    for (size_t k = 0; k < svc->n; k++) {
        struct serve_replica *r = &svc->v[k];
        if (r->killing)
            continue;
        if (r->state == SERVE_FAILED)
            kill_one(s, r, NOT_READY, now_ms);
        else if (r->state == SERVE_DRAINING && serve_drain_done(r, now_ms, svc->drain_timeout_ms))
            kill_one(s, r, SCALED_DOWN, now_ms);
    }
    size_t *drain = svc->n ? calloc(svc->n, sizeof(*drain)) : NULL;
    if (svc->n && !drain)
        return;
    struct serve_plan plan = {.drain = drain};
    serve_plan_make(svc->v, svc->n, svc->submitting, desired, c ? c->generation : 0,
                    !c || now_ms < svc->backoff.until_ms, &plan);
    for (size_t k = 0; k < plan.ndrain; k++) {
        struct serve_replica *r = &svc->v[plan.drain[k]];
        bool listed = r->state == SERVE_READY;
        r->state = SERVE_DRAINING;
        r->drain_ms = now_ms;
        if (listed)
            serve_routes_changed(s);
    }
    free(drain);
    for (int32_t k = 0; c && k < plan.start; k++)
        if (submit_one(s, svc, c, now_ms))
            break;
}

/* Runtimes for the configured services; the others are deleted ones. */
static void services_sync(struct server *s, int64_t now_ms)
{
    for (size_t k = 0; k < s->cluster.nservices; k++) {
        const struct cluster_service *c = &s->cluster.services[k];
        struct serve_service *svc = serve_service_get(s->serve, c->name, true, now_ms);
        if (svc)
            svc->drain_timeout_ms = c->drain_timeout_s * 1000;
    }
    for (size_t k = 0; k < s->serve->n; k++)
        s->serve->v[k]->deleted = !cluster_service_get(&s->cluster, s->serve->v[k]->name);
}

void serve_tick(struct server *s, int64_t now_ms)
{
    struct serve *sv = s->serve;
    sv->urgent = false;
    sv->last_tick_ms = now_ms;
    services_sync(s, now_ms);
    for (size_t k = 0; k < sv->n;) {
        struct serve_service *svc = sv->v[k];
        const struct cluster_service *c = cluster_service_get(&s->cluster, svc->name);
        replicas_sync(s, svc, now_ms);
        loads_sum(sv, svc, now_ms);
        int32_t desired = c ? decide(svc, c, now_ms) : 0;
        act(s, svc, c, desired, now_ms);
        if (svc->deleted && !svc->n && !svc->submitting)
            serve_service_drop(sv, k);
        else
            k++;
    }
    serve_monitor_points(s, now_ms);
}

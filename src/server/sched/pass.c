/*
 * pass.c - one scheduling pass as four steps: input, decide, commit, apply
 * (sched.h). What an agent runs is always on disk first: decisions reach
 * memory and agents only once their commit is durable.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "core/explain.h"
#include "server/sched/sched_int.h"
#include "util/errbuf.h"
#include "base/banned.h"

static int cmp_name_index(const void *a, const void *b)
{
    return strcmp(((const struct name_index *)a)->name, ((const struct name_index *)b)->name);
}

uint32_t sched_name_find(const struct name_index *v, size_t n, const char *name)
{
    struct name_index key = {name, 0};
    const struct name_index *hit = bsearch(&key, v, n, sizeof(*v), cmp_name_index);
    return hit ? hit->index : SCHED_NONE;
}

void sched_input_release(struct sched_input *in)
{
    cluster_view_release(&in->view);
    free(in->node_index);
    free(in->reqs);
    free(in->jobs);
    free(in->dep_failed);
    free(in->dep_reason);
    memset(in, 0, sizeof(*in));
}

void sched_plan_release(struct sched_plan *p)
{
    for (size_t k = 0; k < p->natts; k++)
        attempt_release(&p->atts[k]);
    free(p->atts);
    memset(p, 0, sizeof(*p));
}

/* ---- step 1: input ---------------------------------------------------------- */

/* Are j's dependencies met? 1 yes, 0 not yet, -1 never (reason written). */
static int deps_met(const struct jobs *t, const struct job *j, char *reason, size_t len)
{
    for (size_t k = 0; k < j->spec.ndeps; k++) {
        const struct jobspec_dep *d = &j->spec.deps[k];
        const struct job *dj = jobs_find(t, d->job);
        if (!dj) {
            snprintf(reason, len, "dependency: job %" PRId64 " is gone", d->job);
            return -1;
        }
        if (!job_state_final(dj->state) || dj->att.n)
            return 0;
        if (d->type == JOBSPEC_AFTEROK && dj->state != JOB_COMPLETED) {
            snprintf(reason, len, "dependency: job %" PRId64 " ended %s, not COMPLETED", d->job,
                     job_state_name(dj->state));
            return -1;
        }
    }
    return 1;
}

uint32_t sched_gpu_find(const struct sched_input *in, uint32_t node, const char *uuid)
{
    const struct sched_cluster *c = &in->view.c;
    if (node >= c->nnodes)
        return SCHED_NONE;
    const struct sched_node *n = &c->nodes[node];
    for (uint32_t g = n->gpu_first; g < n->gpu_first + n->ngpus; g++) {
        if (strcmp(in->view.gpu_uuid[g], uuid) == 0)
            return g;
    }
    return SCHED_NONE;
}

/* The view's nodes by name, and the GPUs held back: dirty ones (an ended
 * job's processes remain, as their agents say) and every GPU of a node whose
 * agent has not yet said which of its GPUs are clean (nodes.h: a hold, or a
 * node loaded from the store not yet heard from). */
static int index_view(struct server *s, struct sched_input *in)
{
    const struct sched_cluster *c = &in->view.c;
    in->node_index = malloc((c->nnodes ? c->nnodes : 1) * sizeof(*in->node_index));
    if (!in->node_index)
        return GPO_ENOMEM;
    for (uint32_t k = 0; k < c->nnodes; k++)
        in->node_index[k] = (struct name_index){cluster_view_node_name(&in->view, k), k};
    qsort(in->node_index, c->nnodes, sizeof(*in->node_index), cmp_name_index);
    for (size_t k = 0; k < s->nodes.n; k++) {
        const struct node_rt *rt = &s->nodes.v[k];
        uint32_t n = sched_name_find(in->node_index, c->nnodes, rt->name);
        if (n == SCHED_NONE)
            continue;
        for (uint32_t g = 0; (rt->hold || rt->unheard) && g < c->nodes[n].ngpus; g++)
            in->view.gpus[c->nodes[n].gpu_first + g].held = true;
        for (size_t i = 0; i < rt->ndirty; i++) {
            uint32_t gi = sched_gpu_find(in, n, rt->dirty[i]);
            if (gi != SCHED_NONE)
                in->view.gpus[gi].held = true;
        }
    }
    return 0;
}

/* Whether j is held back from the pass (job_held_back); the earliest begin
 * time is kept in the loop's next_begin_ms (its timer). */
static bool held_back(struct server *s, struct job *j, int64_t now_ms)
{
    int64_t at = 0;
    if (!job_held_back(j, now_ms, &at))
        return false;
    struct sched *sc = s->sched;
    if (at && (!sc->next_begin_ms || at < sc->next_begin_ms))
        sc->next_begin_ms = at;
    return true;
}

/* The queue: pending jobs not held back, whose dependencies are met, within
 * their array's cap; by id, so passes are deterministic. */
static void input_queue(struct server *s, struct sched_input *in)
{
    int64_t now_ms = srv_now_ms(s);
    s->sched->next_begin_ms = 0;
    const char *default_class = cluster_class_default(&s->cluster);
    int64_t cur_array = STORE_NULL;
    size_t array_room = 0;
    for (size_t k = 0; k < s->jobs.n; k++) {
        struct job *j = s->jobs.v[k];
        if (j->state != JOB_PENDING || j->att.n || held_back(s, j, now_ms))
            continue;
        char why[200];
        int met = deps_met(&s->jobs, j, in->dep_reason[in->ndep_failed], sizeof(in->dep_reason[0]));
        if (met < 0) {
            in->dep_failed[in->ndep_failed++] = j;
            continue;
        }
        if (!met) {
            job_set_wait(j, "dependency: waiting for the jobs it depends on to end", -1);
            continue;
        }
        if (j->array_id != STORE_NULL && j->spec.array.max_running) {
            if (j->array_id != cur_array) {
                cur_array = j->array_id;
                size_t active = jobs_array_active(&s->jobs, j->array_id);
                array_room =
                    active < j->spec.array.max_running ? j->spec.array.max_running - active : 0;
            }
            if (!array_room) {
                job_set_wait(j, "array_limit: the array has its maximum of tasks running", -1);
                continue;
            }
            array_room--;
        }
        struct sched_job *r = &in->reqs[in->nqueue];
        if (cluster_job_request(&in->view, &j->spec, j->team, default_class, r, why, sizeof(why))) {
            job_set_wait(j, why, -1);
            continue;
        }
        r->id = (uint64_t)j->id;
        r->submit_ms = j->queued_ms;
        in->jobs[in->nqueue++] = j;
    }
    in->nreqs = in->nqueue;
}

/* An attempt's share of view GPU gi as the core takes it. A MIG instance
 * whose profile the GPU's type no longer has (its MIG mode changed under
 * it) is charged as a plain share: it still holds what it holds. */
static struct sched_share share_of(const struct sched_gpu *g, uint32_t gi,
                                   const struct attempt_share *sh)
{
    struct sched_share out = {gi, sh->milli, sh->mem_mib, .mig = false};
    int p = sh->mig && g->mig_type ? mig_profile_lookup(g->mig_type, sh->mig_profile, NULL, 0)
                                   : GPO_ENOENT;
    if (p >= 0) {
        out.mig = true;
        out.mig_start = sh->mig_start;
        out.mig_profile = (uint8_t)p;
    }
    return out;
}

bool sched_alloc_of(const struct sched_input *in, const struct attempt *a,
                    struct sched_node_part *parts, struct sched_share *shares,
                    struct sched_alloc *ret)
{
    const struct sched_cluster *c = &in->view.c;
    *ret = (struct sched_alloc){parts, 0, shares, 0};
    for (size_t p = 0; p < a->nparts; p++) {
        uint32_t n = sched_name_find(in->node_index, c->nnodes, a->parts[p].node);
        if (n == SCHED_NONE)
            return false;
        parts[ret->nnodes++] = (struct sched_node_part){n, a->parts[p].cpus, a->parts[p].mem_mib};
    }
    for (size_t g = 0; g < a->nshares; g++) {
        /* A GPU is its node's: the same UUID on another node record (a
         * stale twin) is another GPU of the view. */
        uint32_t n = sched_name_find(in->node_index, c->nnodes, a->shares[g].node);
        uint32_t gi = n == SCHED_NONE ? SCHED_NONE : sched_gpu_find(in, n, a->shares[g].uuid);
        if (gi == SCHED_NONE)
            return false;
        shares[ret->nshares++] = share_of(&c->gpus[gi], gi, &a->shares[g]);
    }
    return true;
}

/* The running set: every attempt that holds resources, whatever its job's
 * state (a cancelled job's attempt holds its GPUs until it has exited), in
 * job-id order into the run table. */
static int input_running(struct server *s, struct sched_input *in)
{
    struct sched *sc = s->sched;
    const struct sched_cluster *c = &in->view.c;
    const char *default_class = cluster_class_default(&s->cluster);
    size_t maxp = 1, maxs = 1;
    for (size_t k = 0; k < s->jobs.n; k++) {
        maxp = s->jobs.v[k]->att.nparts > maxp ? s->jobs.v[k]->att.nparts : maxp;
        maxs = s->jobs.v[k]->att.nshares > maxs ? s->jobs.v[k]->att.nshares : maxs;
    }
    /* One attempt's allocation at a time: the table copies it. */
    struct sched_node_part *parts = calloc(maxp, sizeof(*parts));
    struct sched_share *shares = calloc(maxs, sizeof(*shares));
    int rc = parts && shares ? 0 : GPO_ENOMEM;
    for (size_t k = 0; !rc && k < s->jobs.n; k++) {
        struct job *j = s->jobs.v[k];
        if (!j->att.n)
            continue;
        struct sched_job *r = &in->reqs[in->nreqs];
        char why[200];
        if (cluster_job_request(&in->view, &j->spec, j->team, default_class, r, why, sizeof(why))) {
            /* Its team or class is gone: it still holds what it holds. */
            memset(r, 0, sizeof(*r));
            r->team = c->nteams ? 0 : SCHED_NONE;
        }
        r->id = (uint64_t)j->id;
        r->submit_ms = j->queued_ms;
        if (r->prio >= c->nclasses)
            r->prio = 0;
        struct sched_alloc a;
        if (r->team == SCHED_NONE || !c->nclasses ||
            !sched_alloc_of(in, &j->att, parts, shares, &a))
            continue; /* its node or GPUs left the cluster: nothing to hold there */
        struct sched_running run = {.job = r,
                                    .alloc = a,
                                    .start_ms = j->att.start_ms,
                                    .borrowed = j->att.borrowed,
                                    .preempting = j->att.kill != KILL_NONE};
        rc = sched_run_table_add(&sc->running, &run);
        if (!rc)
            in->jobs[in->nreqs++] = j;
    }
    free(parts);
    free(shares);
    return rc;
}

int sched_input(struct server *s, struct sched_input *in, char *err, size_t errlen)
{
    memset(in, 0, sizeof(*in));
    int rc = cluster_view_build(&s->cluster, &in->view, err, errlen);
    if (rc)
        return rc;
    size_t n = s->jobs.n ? s->jobs.n : 1;
    in->reqs = calloc(n, sizeof(*in->reqs));
    // NOLINTNEXTLINE(bugprone-sizeof-expression): *p is a pointer (an array of them)
    in->jobs = calloc(n, sizeof(*in->jobs));
    // NOLINTNEXTLINE(bugprone-sizeof-expression): *p is a pointer (an array of them)
    in->dep_failed = calloc(n, sizeof(*in->dep_failed));
    in->dep_reason = calloc(n, sizeof(*in->dep_reason));
    if (!in->reqs || !in->jobs || !in->dep_failed || !in->dep_reason || index_view(s, in))
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    if (s->sched->pass_hooks.view)
        s->sched->pass_hooks.view(s, &in->view);
    input_queue(s, in);
    /* The attempts that ended first, in an empty table, then the live ones. */
    sched_run_table_clear(&s->sched->running);
    sched_charge_ended(s, in);
    sched_run_table_clear(&s->sched->running);
    if ((rc = input_running(s, in)) != 0)
        return errbuf_set(err, errlen, rc, "the running set: %s", gpo_strerror(rc));
    return 0;
}

/* ---- step 2: decide ------------------------------------------------------- */

int sched_decide(struct server *s, struct sched_input *in, int64_t now_ms)
{
    struct sched *sc = s->sched;
    if (now_ms < sc->state.last_pass_ms)
        now_ms = sc->state.last_pass_ms; /* the wall clock stepped back */
    struct sched_queue q = {in->reqs, in->nqueue};
    struct sched_running_set rs = sched_run_table_view(&sc->running);
    return sched_pass(&in->view.c, &q, &rs, &sc->policy, &sc->state, now_ms, &sc->result);
}

/* ---- step 3: commit ------------------------------------------------------- */

/* The pass's start `a` as an attempt, by name: parts and shares into *ret. */
static int start_names(const struct sched_input *in, const struct sched_alloc *a,
                       struct attempt *ret)
{
    ret->parts = calloc(a->nnodes ? a->nnodes : 1, sizeof(*ret->parts));
    ret->shares = calloc(a->nshares ? a->nshares : 1, sizeof(*ret->shares));
    if (!ret->parts || !ret->shares)
        return GPO_ENOMEM;
    for (uint32_t k = 0; k < a->nnodes; k++) {
        ret->parts[k] =
            (struct attempt_part){strdup(cluster_view_node_name(&in->view, a->nodes[k].node)),
                                  a->nodes[k].cpus, a->nodes[k].mem_mib};
        ret->nparts++;
        if (!ret->parts[k].node)
            return GPO_ENOMEM;
    }
    for (uint32_t k = 0; k < a->nshares; k++) {
        uint32_t g = a->shares[k].gpu;
        const struct sched_share *sh = &a->shares[k];
        ret->shares[k] =
            (struct attempt_share){strdup(cluster_view_node_name(&in->view, in->view.gpu_node[g])),
                                   strdup(in->view.gpu_uuid[g]), sh->milli, sh->mem_mib};
        const struct mig_type *t = in->view.gpus[g].mig_type;
        if (sh->mig && t && sh->mig_profile < t->nprofiles) {
            ret->shares[k].mig = true;
            ret->shares[k].mig_start = sh->mig_start;
            snprintf(ret->shares[k].mig_profile, sizeof(ret->shares[k].mig_profile), "%s",
                     t->profiles[sh->mig_profile].name);
        }
        ret->nshares++;
        if (!ret->shares[k].node || !ret->shares[k].uuid)
            return GPO_ENOMEM;
    }
    return 0;
}

/* The rows of the pass's decisions into b; the new attempts into plan. */
static int plan_rows(struct server *s, const struct sched_input *in, int64_t now_ms,
                     struct sched_plan *plan, struct store_batch *b)
{
    const struct sched_result *res = &s->sched->result;
    int rc = store_batch_set_decision(b, s->epoch);
    for (size_t k = 0; !rc && k < res->nstarts; k++) {
        struct job *j = jobs_find(&s->jobs, (int64_t)res->starts[k].job);
        struct attempt *a = &plan->atts[k];
        rc = start_names(in, &res->starts[k].alloc, a);
        a->n = j->attempts + 1;
        a->start_ms = now_ms;
        a->borrowed = res->starts[k].borrowed;
        rc = rc ? rc
                : attempt_row(b, s->epoch, j->id, a, ATTEMPT_ASSIGNED, NULL, STORE_NULL, STORE_NULL,
                              STORE_NULL);
        rc = rc ? rc
                : store_batch_job_update(b, j->id, job_state_name(JOB_RUNNING), NULL, now_ms, NULL);
    }
    for (size_t k = 0; !rc && k < res->npreempts; k++) {
        const struct job *j = jobs_find(&s->jobs, (int64_t)res->preempts[k].job);
        rc = sched_kill_row(s, b, j, KILL_PREEMPTED, NULL);
    }
    for (size_t k = 0; !rc && k < in->ndep_failed; k++)
        rc = store_batch_job_update(b, in->dep_failed[k]->id, job_state_name(JOB_FAILED),
                                    in->dep_reason[k], now_ms, NULL);
    if (!rc && plan->save_state)
        rc = sched_state_row(s, b, now_ms);
    return rc ? GPO_ENOMEM : 0;
}

int sched_commit(struct server *s, const struct sched_input *in, int64_t now_ms,
                 struct sched_plan *plan)
{
    struct sched *sc = s->sched;
    const struct sched_result *res = &sc->result;
    memset(plan, 0, sizeof(*plan));
    bool decided = res->nstarts || res->npreempts || in->ndep_failed;
    plan->save_state = now_ms - sc->state_saved_ms >= SCHED_STATE_SAVE_MS;
    if (!decided && !plan->save_state)
        return 0;
    plan->atts = calloc(res->nstarts ? res->nstarts : 1, sizeof(*plan->atts));
    plan->natts = plan->atts ? res->nstarts : 0;
    struct store_batch *b = plan->atts ? store_batch_new() : NULL;
    int rc = b ? plan_rows(s, in, now_ms, plan, b) : GPO_ENOMEM;
    if (rc) {
        store_batch_free(b);
        fprintf(stderr, "gpuorch server: pass decisions not built: out of memory\n");
        return rc;
    }
    rc = sched_commit_unlocked(s, b, "pass decisions");
    if (!rc && plan->save_state)
        sc->state_saved_ms = now_ms;
    return rc;
}

/* ---- step 4: apply -------------------------------------------------------- */

static void apply_start(struct server *s, struct job *j, struct attempt *a, int64_t now_ms)
{
    attempt_release(&j->att);
    j->att = *a;
    memset(a, 0, sizeof(*a));
    cost_open(&s->cost, j, now_ms);
    j->attempts = j->att.n;
    job_set_wait(j, NULL, -1);
    if (j->state != JOB_PENDING) {
        /* Cancelled while the pass ran: the attempt is killed at once. */
        sched_kill_apply(s, j, KILL_CANCELLED, NULL, s->sched->policy.preempt_grace_ms);
        return;
    }
    const char *cls = j->spec.priority ? j->spec.priority : cluster_class_default(&s->cluster);
    monitor_observe_wait(&s->monitor, j->team, cls, now_ms - j->queued_ms);
    j->state = JOB_RUNNING;
    j->updated_ms = now_ms;
    free(j->reason);
    j->reason = NULL;
    for (size_t p = 0; p < j->att.nparts; p++)
        nodes_changed(&s->nodes, j->att.parts[p].node);
}

/* sched_job_lookup_fn over the pass's queue (in id order). */
static const struct sched_job *queued(void *ctx, uint64_t id)
{
    const struct sched_input *in = ctx;
    size_t lo = 0, hi = in->nqueue;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (in->reqs[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < in->nqueue && in->reqs[lo].id == id ? &in->reqs[lo] : NULL;
}

/* Under private_data "jobs", j's wait reason names no job of another team
 * (everyone who reads j may read it): "job 12" becomes "another team's job". */
static void wait_unname(const struct server *s, const struct job *j, uint64_t other, char *text,
                        size_t len)
{
    const struct job *o = other ? jobs_find(&s->jobs, (int64_t)other) : NULL;
    if (!o || strcmp(o->team, j->team) == 0 ||
        !cluster_settings_private(&s->cluster.settings, CLUSTER_PRIVATE_JOBS))
        return;
    char named[32];
    snprintf(named, sizeof(named), "job %" PRIu64, other);
    char *at = strstr(text, named);
    if (!at)
        return;
    char rest[300];
    snprintf(rest, sizeof(rest), "%s", at + strlen(named));
    snprintf(at, len - (size_t)(at - text), "another team's job%s", rest);
}

void sched_apply(struct server *s, const struct sched_input *in, struct sched_plan *plan,
                 int64_t now_ms)
{
    const struct sched_result *res = &s->sched->result;
    /* The running set the decisions leave: the core's own check that they
     * fit it (a start of a job that runs, a preemption of one that does not). */
    int rc = sched_apply_result(&s->sched->running, res, queued, (void *)in, now_ms);
    if (rc)
        fprintf(stderr, "gpuorch server: the pass's decisions do not fit its running set: %s\n",
                gpo_strerror(rc));
    for (size_t k = 0; k < plan->natts; k++)
        apply_start(s, jobs_find(&s->jobs, (int64_t)res->starts[k].job), &plan->atts[k], now_ms);
    for (size_t k = 0; k < res->npreempts; k++) {
        struct job *j = jobs_find(&s->jobs, (int64_t)res->preempts[k].job);
        if (j)
            sched_kill_apply(s, j, KILL_PREEMPTED, NULL, res->preempts[k].grace_ms);
    }
    for (size_t k = 0; k < in->ndep_failed; k++) {
        struct job *j = in->dep_failed[k];
        j->state = JOB_FAILED;
        j->updated_ms = now_ms;
        free(j->reason);
        j->reason = strdup(in->dep_reason[k]);
        job_set_wait(j, NULL, -1);
    }
    for (size_t k = 0; k < res->nwaits; k++) {
        struct job *j = jobs_find(&s->jobs, (int64_t)res->waits[k].job);
        char text[300];
        int n = snprintf(text, sizeof(text), "%s: ", explain_code(res->waits[k].reason));
        explain_format(&in->view.c, &res->waits[k], text + n, sizeof(text) - (size_t)n);
        if (j)
            wait_unname(s, j, res->waits[k].other_job, text, sizeof(text));
        if (j && j->state == JOB_PENDING)
            job_set_wait(j, text,
                         res->waits[k].est_start_ms > 0 ||
                                 res->waits[k].est_start_ms == SCHED_EST_NO_LIMIT
                             ? res->waits[k].est_start_ms
                             : -1);
    }
}

/* ---- the task ------------------------------------------------------------- */

void sched_pass_task(struct server *s, int64_t now_ms)
{
    struct sched *sc = s->sched;
    struct sched_input in;
    char err[256] = "";
    int64_t t0 = srv_mono_ns(s); /* the pass's duration for GET /metrics: view and decision */
    int rc = sched_input(s, &in, err, sizeof(err));
    if (!rc) {
        /* The pass works on copies (the view, the requests, the allocations):
         * submissions, reports and cancels go on meanwhile, and what they
         * change is checked when the decisions are applied. Jobs are never
         * freed while the server runs, so in.jobs stays valid. */
        pthread_mutex_unlock(&s->lock);
        rc = sched_decide(s, &in, now_ms);
        pthread_mutex_lock(&s->lock);
        monitor_observe_pass(&s->monitor, srv_mono_ns(s) - t0);
        if (rc)
            snprintf(err, sizeof(err), "sched_pass: %s", gpo_strerror(rc));
    }
    if (rc) {
        fprintf(stderr, "gpuorch server: no pass: %s\n", err);
    } else {
        if (now_ms < sc->state.last_pass_ms)
            now_ms = sc->state.last_pass_ms;
        sc->passes++;
        struct sched_plan plan;
        if (sched_commit(s, &in, now_ms, &plan) == 0)
            sched_apply(s, &in, &plan, now_ms);
        sched_plan_release(&plan);
        if (sc->pass_hooks.done)
            sc->pass_hooks.done(s, &in.view, in.reqs, in.nqueue, &sc->result, now_ms);
    }
    /* Its entries borrow the pass's requests: emptied with them. */
    sched_run_table_clear(&sc->running);
    sched_input_release(&in);
    sc->last_pass_ms = srv_now_ms(s);
}

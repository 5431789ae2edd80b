/*
 * loop.c - the scheduling loop: one thread that wakes on events (a submit,
 * an attempt's end, a node change, a cancel) or on its timer, ends the
 * attempts of nodes whose heartbeats stopped, runs sched_pass over the
 * pending jobs and the attempts that hold resources, and commits the pass's
 * decisions (attempts started, kills for preemption, jobs failed by their
 * dependencies) with the core's carry-over state in one transaction under
 * the leader epoch. Only then are they applied to memory and shown to
 * agents: what an agent runs is always on disk first.
 *
 * Events that arrive during a pass set loop_dirty and are served by the next
 * one: one pass at a time, coalesced.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "server/budget.h"
#include "server/idle.h"
#include "server/ingest.h"
#include "server/ledger.h"
#include "server/srv.h"
#include "base/banned.h"

#define STATE_ATTEMPT_ASSIGNED "ASSIGNED"
#define STATE_ATTEMPT_KILLING  "KILLING"

/* Passes run at most this often however many events arrive (they coalesce):
 * a burst of submissions costs a few passes a second, not one each. The
 * core's carry-over state (decayed usage, attained service: soft state that
 * only orders the queue) goes to disk with the decisions at most this often,
 * since it is rewritten whole: a crash loses at most that much accounting,
 * never a decision. */
#define PASS_MIN_GAP_MS 200
#define STATE_SAVE_MS   30000

void srv_loop_wake(struct server *s)
{
    s->loop_dirty = true;
    pthread_cond_signal(&s->loop_cv);
}

/* ---- ends of attempts ---- */

int srv_end_plan(struct server *s, const struct srv_job *j, const char *att_state,
                 int64_t exit_code, int64_t signal, const char *reason, int64_t now_ms,
                 struct srv_end *ret, struct store_batch *b)
{
    struct srv_end e = {.job = j->id,
                        .attempt = j->att.n,
                        .end_ms = now_ms,
                        .exit_code = exit_code,
                        .signal = signal};
    snprintf(e.att_state, sizeof(e.att_state), "%s", att_state);
    bool cancelling =
        j->att.kill && j->att.kill_reason && strcmp(j->att.kill_reason, "cancelled") == 0;
    e.failure = !strcmp(att_state, "FAILED") || !strcmp(att_state, "TIMEOUT") ||
                !strcmp(att_state, "NODE_FAIL");
    /* Killed by its team's idle policy (idle.c): requeued whatever the
     * job's own requeue setting, or cancelled, with the idle reason. */
    const char *idle =
        j->att.kill && j->att.kill_reason ? strstr(j->att.kill_reason, "idle: ") : NULL;
    if (idle && (!strcmp(att_state, "PREEMPTED") || !strcmp(att_state, "CANCELLED"))) {
        bool requeue = !strcmp(att_state, "PREEMPTED");
        if (!reason)
            reason = idle; /* the attempt's row says why too */
        e.job_state = requeue ? SRV_JOB_PENDING : SRV_JOB_CANCELLED;
        if (requeue)
            snprintf(e.reason, sizeof(e.reason), "attempt %" PRId64 " requeued: %s", j->att.n,
                     idle);
        else
            snprintf(e.reason, sizeof(e.reason), "%s", idle);
    } else if (cancelling || !strcmp(att_state, "CANCELLED")) {
        e.job_state = SRV_JOB_CANCELLED;
        snprintf(e.reason, sizeof(e.reason), "cancelled");
    } else if (!strcmp(att_state, "COMPLETED")) {
        e.job_state = SRV_JOB_COMPLETED;
    } else if (!strcmp(att_state, "PREEMPTED")) {
        e.job_state = j->spec.requeue ? SRV_JOB_PENDING : SRV_JOB_PREEMPTED;
        snprintf(e.reason, sizeof(e.reason), "attempt %" PRId64 " preempted%s", j->att.n,
                 j->spec.requeue ? "; requeued" : "");
    } else {
        char what[64];
        if (exit_code != STORE_NULL)
            snprintf(what, sizeof(what), " (exit %" PRId64 ")", exit_code);
        else if (signal != STORE_NULL)
            snprintf(what, sizeof(what), " (signal %" PRId64 ")", signal);
        else
            what[0] = '\0';
        bool retry = j->failures < j->spec.max_retries;
        e.job_state = retry                             ? SRV_JOB_PENDING
                      : !strcmp(att_state, "TIMEOUT")   ? SRV_JOB_TIMEOUT
                      : !strcmp(att_state, "NODE_FAIL") ? SRV_JOB_NODE_FAIL
                                                        : SRV_JOB_FAILED;
        int n = snprintf(e.reason, sizeof(e.reason), "attempt %" PRId64 " %s%s%s%s", j->att.n,
                         att_state, what, reason && *reason ? ": " : "", reason ? reason : "");
        if (retry && n > 0 && (size_t)n < sizeof(e.reason))
            snprintf(e.reason + n, sizeof(e.reason) - (size_t)n, "; retry %u of %u",
                     j->failures + 1, j->spec.max_retries);
    }
    int rc = srv_attempt_row(b, s->epoch, j->id, &j->att, e.att_state, reason, now_ms, exit_code,
                             signal);
    rc = rc ? rc : srv_ledger_close(s, j, now_ms, e.att_state, b, &e.cost_micro);
    e.pending_seq = j->att.seg_pending_seq;
    rc = rc ? rc
            : store_batch_job_update(b, j->id, srv_job_state_name(e.job_state),
                                     e.reason[0] ? e.reason : NULL, now_ms, NULL);
    if (rc)
        return -ENOMEM;
    *ret = e;
    return 0;
}

void srv_end_apply(struct server *s, const struct srv_end *e)
{
    struct srv_job *j = srv_job_find(s, e->job);
    if (!j || j->att.n != e->attempt)
        return;
    int64_t start = j->att.seg_start_ms ? j->att.seg_start_ms : j->att.start_ms;
    if (e->pending_seq && j->att.seg_pending_seq == e->pending_seq) {
        /* Planned after a price change whose commit comes after ours: that
         * change will find the attempt gone, so its row is charged here. */
        srv_ledger_charged(s, j->id, j->team, j->att.seg_pending_start_ms, j->att.seg_pending_ms,
                           j->att.seg_pending_cost);
        start = j->att.seg_pending_ms;
    } else if (e->pending_seq) {
        start = j->att.seg_start_ms; /* the price change was applied: its end is our start */
    }
    srv_ledger_charged(s, j->id, j->team, start, e->end_ms, e->cost_micro);
    struct srv_attempt att = j->att;
    memset(&j->att, 0, sizeof(j->att));
    j->state = e->job_state;
    j->updated_ms = e->end_ms;
    free(j->reason);
    j->reason = e->reason[0] ? strdup(e->reason) : NULL;
    j->failures += e->failure;
    if (j->state == SRV_JOB_PENDING)
        j->queued_ms = e->end_ms;
    for (size_t k = 0; k < att.nparts; k++)
        srv_node_changed(s, att.parts[k].node);
    if (s->nended == s->ended_cap) {
        size_t cap = s->ended_cap ? 2 * s->ended_cap : 16;
        struct srv_ended *v = realloc(s->ended, cap * sizeof(*v));
        if (v) {
            s->ended = v;
            s->ended_cap = cap;
        }
    }
    if (s->nended < s->ended_cap)
        s->ended[s->nended++] = (struct srv_ended){e->job, e->end_ms, att};
    else
        srv_attempt_release(&att); /* out of memory: its last stretch goes uncharged */
    srv_loop_wake(s);
}

/* Commits b (taken) with the lock released meanwhile; returns the result. */
static int commit_unlocked(struct server *s, struct store_batch *b, const char *what)
{
    char msg[256] = "";
    pthread_mutex_unlock(&s->lock);
    int rc = store_commit_wait(s->store, b, NULL, 0, msg, sizeof(msg));
    pthread_mutex_lock(&s->lock);
    if (rc)
        fprintf(stderr, "gpuorch server: %s not committed: %s%s%s\n", what, gpo_strerror(rc),
                msg[0] ? ": " : "", msg);
    return rc;
}

/* ---- node timeouts ---- */

static void node_timeouts(struct server *s, int64_t now)
{
    struct store_batch *b = NULL;
    struct srv_end *ends = NULL;
    size_t nends = 0, cap = 0;
    char **down = NULL;
    size_t ndown = 0;
    for (size_t k = 0; k < s->cluster.nnodes; k++) {
        const struct cluster_node *node = &s->cluster.nodes[k];
        const struct srv_node_rt *rt = srv_node_rt_find(s, node->name);
        if (node->state == CLUSTER_NODE_DOWN || !rt ||
            now - rt->last_heartbeat_ms <= s->cfg.node_timeout_ms)
            continue;
        if (!b && !(b = store_batch_new()))
            return;
        json_t *o = cluster_node_to_json(node, CLUSTER_STORED);
        char *text = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        json_decref(o);
        char **v = realloc(down, (ndown + 1) * sizeof(*down));
        int rc = text && v ? store_batch_node_put(b, node->name, text, "down", now) : -ENOMEM;
        free(text);
        if (v)
            down = v;
        if (rc || !(down[ndown++] = strdup(node->name)))
            goto out;
        for (size_t i = 0; i < s->njobs; i++) {
            const struct srv_job *j = s->jobs[i];
            bool on = false;
            for (size_t p = 0; j->att.n && p < j->att.nparts && !on; p++)
                on = strcmp(j->att.parts[p].node, node->name) == 0;
            if (!on)
                continue;
            if (nends == cap) {
                cap = cap ? 2 * cap : 8;
                struct srv_end *e2 = realloc(ends, cap * sizeof(*ends));
                if (!e2)
                    goto out;
                ends = e2;
            }
            char why[CLUSTER_HOST_MAX + 64];
            snprintf(why, sizeof(why), "node %s stopped heartbeating", node->name);
            if (srv_end_plan(s, j, "NODE_FAIL", STORE_NULL, STORE_NULL, why, now, &ends[nends], b))
                goto out;
            nends++;
        }
    }
    if (!b)
        return;
    if (commit_unlocked(s, b, "node timeout") == 0) {
        b = NULL;
        for (size_t k = 0; k < ndown; k++) {
            /* Only the state changes, and the model indexes nothing by state. */
            for (size_t n = 0; n < s->cluster.nnodes; n++) {
                if (strcmp(s->cluster.nodes[n].name, down[k]) == 0)
                    s->cluster.nodes[n].state = CLUSTER_NODE_DOWN;
            }
            fprintf(stderr,
                    "gpuorch server: node %s marked down (no heartbeat for %" PRId64 " s)\n",
                    down[k], s->cfg.node_timeout_ms / 1000);
        }
        for (size_t k = 0; k < nends; k++)
            srv_end_apply(s, &ends[k]);
    } else {
        b = NULL; /* taken */
    }
out:
    store_batch_free(b);
    for (size_t k = 0; k < ndown; k++)
        free(down[k]);
    free(down);
    free(ends);
}

/* ---- one pass ---- */

struct name_index {
    const char *name;
    uint32_t index;
};

static int cmp_name_index(const void *a, const void *b)
{
    return strcmp(((const struct name_index *)a)->name, ((const struct name_index *)b)->name);
}

static uint32_t find_index(const struct name_index *v, size_t n, const char *name)
{
    struct name_index key = {name, 0};
    const struct name_index *hit = bsearch(&key, v, n, sizeof(*v), cmp_name_index);
    return hit ? hit->index : SCHED_NONE;
}

/* What a pass works on, built from memory under the lock. */
struct pass_input {
    struct cluster_view cl;
    struct name_index *nodes, *gpus; /* by name / by UUID */
    struct sched_job *reqs;          /* queue first, then running */
    struct srv_job **jobs;           /* reqs[k]'s job */
    size_t nqueue, nreqs;
    struct sched_running *running;
    size_t nrunning;
    struct sched_node_part *parts;
    struct sched_share *shares;
    struct srv_job **dep_failed; /* pending jobs whose afterok dependency failed */
    char (*dep_reason)[96];
    size_t ndep_failed;
};

static void pass_input_release(struct pass_input *in)
{
    cluster_view_release(&in->cl);
    free(in->nodes);
    free(in->gpus);
    free(in->reqs);
    free(in->jobs);
    free(in->running);
    free(in->parts);
    free(in->shares);
    free(in->dep_failed);
    free(in->dep_reason);
    memset(in, 0, sizeof(*in));
}

static void set_wait(struct srv_job *j, const char *text, int64_t est)
{
    free(j->wait);
    j->wait = text ? strdup(text) : NULL;
    j->est_start_ms = est;
}

/* The class of jobs that name none: "normal", else the first by name. */
static const char *class_default(const struct server *s)
{
    if (cluster_class_get(&s->cluster, "normal"))
        return "normal";
    return s->cluster.nclasses ? s->cluster.classes[0].name : NULL;
}

/* Are j's dependencies met? 1 yes, 0 not yet, -1 never (reason written). */
static int deps_met(struct server *s, const struct srv_job *j, char *reason, size_t len)
{
    for (size_t k = 0; k < j->spec.ndeps; k++) {
        const struct jobspec_dep *d = &j->spec.deps[k];
        const struct srv_job *dj = srv_job_find(s, d->job);
        if (!dj) {
            snprintf(reason, len, "dependency: job %" PRId64 " is gone", d->job);
            return -1;
        }
        if (!srv_job_state_final(dj->state) || dj->att.n)
            return 0;
        if (d->type == JOBSPEC_AFTEROK && dj->state != SRV_JOB_COMPLETED) {
            snprintf(reason, len, "dependency: job %" PRId64 " ended %s, not COMPLETED", d->job,
                     srv_job_state_name(dj->state));
            return -1;
        }
    }
    return 1;
}

/* Tasks of array `array_id` holding resources now. An array is inserted in
 * one batch, so its tasks have consecutive ids from array_id on: only that
 * run of the table is read, not the whole table per array. */
static size_t array_active(struct server *s, int64_t array_id)
{
    size_t n = 0;
    for (size_t k = srv_job_index(s, array_id); k < s->njobs && s->jobs[k]->array_id == array_id;
         k++)
        n += s->jobs[k]->att.n != 0;
    return n;
}

static int input_build(struct server *s, struct pass_input *in, char *err, size_t errlen)
{
    int rc = cluster_view_build(&s->cluster, &in->cl, err, errlen);
    if (rc)
        return rc;
    const struct sched_cluster *c = &in->cl.c;
    in->nodes = malloc((c->nnodes ? c->nnodes : 1) * sizeof(*in->nodes));
    in->gpus = malloc((c->ngpus ? c->ngpus : 1) * sizeof(*in->gpus));
    in->reqs = calloc(s->njobs ? s->njobs : 1, sizeof(*in->reqs));
    in->jobs = calloc(s->njobs ? s->njobs : 1, sizeof(*in->jobs));
    in->dep_failed = calloc(s->njobs ? s->njobs : 1, sizeof(*in->dep_failed));
    in->dep_reason = calloc(s->njobs ? s->njobs : 1, sizeof(*in->dep_reason));
    if (!in->nodes || !in->gpus || !in->reqs || !in->jobs || !in->dep_failed || !in->dep_reason)
        return -ENOMEM;
    for (uint32_t k = 0; k < c->nnodes; k++)
        in->nodes[k] = (struct name_index){cluster_view_node_name(&in->cl, k), k};
    for (uint32_t k = 0; k < c->ngpus; k++)
        in->gpus[k] = (struct name_index){in->cl.gpu_uuid[k], k};
    qsort(in->nodes, c->nnodes, sizeof(*in->nodes), cmp_name_index);
    qsort(in->gpus, c->ngpus, sizeof(*in->gpus), cmp_name_index);
    /* Dirty GPUs (an ended job's processes remain, as their agents say) get no work. */
    for (size_t k = 0; k < s->nnodes_rt; k++) {
        const json_t *dirty = s->nodes_rt[k].dirty;
        for (size_t i = 0; i < json_array_size(dirty); i++) {
            uint32_t gi =
                find_index(in->gpus, c->ngpus, json_string_value(json_array_get(dirty, i)));
            if (gi != SCHED_NONE)
                in->cl.gpus[gi].held = true;
        }
    }

    const char *default_class = class_default(s);
    /* The queue: pending jobs whose dependencies are met, within their
     * array's cap; by id, so passes are deterministic. */
    int64_t cur_array = STORE_NULL;
    size_t array_room = 0;
    for (size_t k = 0; k < s->njobs; k++) {
        struct srv_job *j = s->jobs[k];
        if (j->state != SRV_JOB_PENDING || j->att.n)
            continue;
        char why[200];
        int met = deps_met(s, j, in->dep_reason[in->ndep_failed], sizeof(in->dep_reason[0]));
        if (met < 0) {
            in->dep_failed[in->ndep_failed++] = j;
            continue;
        }
        if (!met) {
            set_wait(j, "dependency: waiting for the jobs it depends on to end", -1);
            continue;
        }
        if (j->array_id != STORE_NULL && j->spec.array.max_running) {
            if (j->array_id != cur_array) {
                cur_array = j->array_id;
                size_t active = array_active(s, j->array_id);
                array_room =
                    active < j->spec.array.max_running ? j->spec.array.max_running - active : 0;
            }
            if (!array_room) {
                set_wait(j, "array_limit: the array has its maximum of tasks running", -1);
                continue;
            }
            array_room--;
        }
        struct sched_job *r = &in->reqs[in->nqueue];
        if (cluster_job_request(&in->cl, &j->spec, j->team, default_class, r, why, sizeof(why))) {
            set_wait(j, why, -1);
            continue;
        }
        r->id = (uint64_t)j->id;
        r->submit_ms = j->queued_ms;
        in->jobs[in->nqueue++] = j;
    }
    in->nreqs = in->nqueue;
    /* The running set: every attempt that holds resources, whatever its job's
     * state (a cancelled job's attempt holds its GPUs until it has exited). */
    size_t nparts = 0, nshares = 0, nrun = 0;
    for (size_t k = 0; k < s->njobs; k++) {
        nparts += s->jobs[k]->att.nparts;
        nshares += s->jobs[k]->att.nshares;
        nrun += s->jobs[k]->att.n != 0;
    }
    in->running = calloc(nrun ? nrun : 1, sizeof(*in->running));
    in->parts = calloc(nparts ? nparts : 1, sizeof(*in->parts));
    in->shares = calloc(nshares ? nshares : 1, sizeof(*in->shares));
    if (!in->running || !in->parts || !in->shares)
        return -ENOMEM;
    size_t pi = 0, si = 0;
    for (size_t k = 0; k < s->njobs; k++) {
        struct srv_job *j = s->jobs[k];
        if (!j->att.n)
            continue;
        struct sched_job *r = &in->reqs[in->nreqs];
        char why[200];
        if (cluster_job_request(&in->cl, &j->spec, j->team, default_class, r, why, sizeof(why))) {
            /* Its team or class is gone: it still holds what it holds. */
            memset(r, 0, sizeof(*r));
            r->team = c->nteams ? 0 : SCHED_NONE;
        }
        r->id = (uint64_t)j->id;
        r->submit_ms = j->queued_ms;
        bool ok = r->team != SCHED_NONE && c->nclasses;
        if (r->prio >= c->nclasses)
            r->prio = 0;
        struct sched_alloc a = {&in->parts[pi], 0, &in->shares[si], 0};
        for (size_t p = 0; ok && p < j->att.nparts; p++) {
            uint32_t n = find_index(in->nodes, c->nnodes, j->att.parts[p].node);
            ok = n != SCHED_NONE;
            a.nodes[a.nnodes++] =
                (struct sched_node_part){n, j->att.parts[p].cpus, j->att.parts[p].mem_mib};
        }
        for (size_t g = 0; ok && g < j->att.nshares; g++) {
            uint32_t gi = find_index(in->gpus, c->ngpus, j->att.shares[g].uuid);
            ok = gi != SCHED_NONE;
            a.shares[a.nshares++] =
                (struct sched_share){gi, j->att.shares[g].milli, j->att.shares[g].mem_mib};
        }
        if (!ok)
            continue; /* its node or GPUs left the cluster: nothing to hold there */
        pi += a.nnodes;
        si += a.nshares;
        in->jobs[in->nreqs++] = j;
        in->running[in->nrunning++] = (struct sched_running){.job = r,
                                                             .alloc = a,
                                                             .start_ms = j->att.start_ms,
                                                             .borrowed = j->att.borrowed,
                                                             .preempting = j->att.kill};
    }
    return 0;
}

/* The pass's start for job j, by name: parts and shares into *ret. */
static int start_names(const struct pass_input *in, const struct sched_alloc *a,
                       struct srv_attempt *ret)
{
    ret->parts = calloc(a->nnodes ? a->nnodes : 1, sizeof(*ret->parts));
    ret->shares = calloc(a->nshares ? a->nshares : 1, sizeof(*ret->shares));
    if (!ret->parts || !ret->shares)
        return -ENOMEM;
    for (uint32_t k = 0; k < a->nnodes; k++) {
        ret->parts[k] = (struct srv_part){strdup(cluster_view_node_name(&in->cl, a->nodes[k].node)),
                                          a->nodes[k].cpus, a->nodes[k].mem_mib};
        ret->nparts++;
        if (!ret->parts[k].node)
            return -ENOMEM;
    }
    for (uint32_t k = 0; k < a->nshares; k++) {
        uint32_t g = a->shares[k].gpu;
        ret->shares[k] = (struct srv_share){
            strdup(cluster_view_node_name(&in->cl, in->cl.gpu_node[g])), strdup(in->cl.gpu_uuid[g]),
            a->shares[k].milli, a->shares[k].mem_mib};
        ret->nshares++;
        if (!ret->shares[k].node || !ret->shares[k].uuid)
            return -ENOMEM;
    }
    return 0;
}

/* The core's carry-over as JSON text (caller frees), or NULL. */
static char *state_encode(const struct sched_state *st)
{
    json_t *usage = json_array(), *att = json_array();
    for (size_t k = 0; usage && k < st->nusage; k++)
        json_array_append_new(usage,
                              json_pack("[I, I, f]", (json_int_t)st->usage[k].team_id,
                                        (json_int_t)st->usage[k].gpu_type_id, st->usage[k].gpu_ms));
    for (size_t k = 0; att && k < st->nattained; k++)
        json_array_append_new(att, json_pack("[I, I]", (json_int_t)st->attained[k].job,
                                             (json_int_t)st->attained[k].gpu_ms));
    json_t *o = usage && att
                    ? json_pack("{s:I, s:O, s:O}", "last_pass_ms", (json_int_t)st->last_pass_ms,
                                "usage", usage, "attained", att)
                    : NULL;
    json_decref(usage);
    json_decref(att);
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(o);
    return text;
}

static int state_decode(const void *blob, size_t len, struct sched_state *st)
{
    json_t *o = json_loadb(blob, len, 0, NULL);
    json_t *usage = json_object_get(o, "usage"), *att = json_object_get(o, "attained");
    json_int_t last = 0;
    int rc = o && json_is_array(usage) && json_is_array(att) &&
                     !json_unpack(o, "{s:I}", "last_pass_ms", &last)
                 ? 0
                 : -EINVAL;
    for (size_t k = 0; !rc && k < json_array_size(usage); k++) {
        json_int_t team, type;
        double ms;
        rc = json_unpack(json_array_get(usage, k), "[I, I, F]", &team, &type, &ms)
                 ? -EINVAL
                 : sched_state_add_usage(st, (uint32_t)team, (uint32_t)type, ms);
    }
    for (size_t k = 0; !rc && k < json_array_size(att); k++) {
        json_int_t job, ms;
        rc = json_unpack(json_array_get(att, k), "[I, I]", &job, &ms)
                 ? -EINVAL
                 : sched_state_add_attained(st, (uint64_t)job, ms);
    }
    if (!rc)
        st->last_pass_ms = last;
    json_decref(o);
    return rc;
}

/* The running job of an ended attempt, by index in the pass's cluster; false
 * when its node or GPUs have left it. */
static bool ended_running(const struct pass_input *in, const struct srv_ended *e,
                          struct sched_job *req, struct sched_node_part *parts,
                          struct sched_share *shares, struct sched_running *ret)
{
    const struct sched_cluster *c = &in->cl.c;
    *ret = (struct sched_running){
        .job = req, .alloc = {parts, 0, shares, 0}, .start_ms = e->att.start_ms};
    for (size_t p = 0; p < e->att.nparts; p++) {
        uint32_t n = find_index(in->nodes, c->nnodes, e->att.parts[p].node);
        if (n == SCHED_NONE)
            return false;
        parts[ret->alloc.nnodes++] =
            (struct sched_node_part){n, e->att.parts[p].cpus, e->att.parts[p].mem_mib};
    }
    for (size_t g = 0; g < e->att.nshares; g++) {
        uint32_t gi = find_index(in->gpus, c->ngpus, e->att.shares[g].uuid);
        if (gi == SCHED_NONE)
            return false;
        shares[ret->alloc.nshares++] =
            (struct sched_share){gi, e->att.shares[g].milli, e->att.shares[g].mem_mib};
    }
    return true;
}

/* Charges the attempts that ended since the last pass (their usage after it)
 * to fair share and LAS. Only the loop touches s->sched. */
static void charge_ended(struct server *s, const struct pass_input *in)
{
    const char *default_class = class_default(s);
    for (size_t k = 0; k < s->nended; k++) {
        struct srv_ended *e = &s->ended[k];
        const struct srv_job *j = srv_job_find(s, e->job);
        struct sched_job req = {0};
        char why[200];
        size_t np = e->att.nparts ? e->att.nparts : 1, ns = e->att.nshares ? e->att.nshares : 1;
        struct sched_node_part *parts = calloc(np, sizeof(*parts));
        struct sched_share *shares = calloc(ns, sizeof(*shares));
        struct sched_running run;
        if (j && parts && shares &&
            cluster_job_request(&in->cl, &j->spec, j->team, default_class, &req, why,
                                sizeof(why)) == 0 &&
            ended_running(in, e, &req, parts, shares, &run)) {
            req.id = (uint64_t)j->id;
            (void)sched_state_charge_end(&s->sched, &in->cl.c, &s->policy, &run, e->end_ms);
        }
        free(parts);
        free(shares);
        srv_attempt_release(&e->att);
    }
    s->nended = 0;
}

static void one_pass(struct server *s, struct sched_result *res)
{
    int64_t now = srv_now_ms();
    if (now < s->sched.last_pass_ms)
        now = s->sched.last_pass_ms; /* the wall clock stepped back */
    struct pass_input in = {0};
    char err[256] = "";
    struct timespec t0, t1; /* the pass's duration for GET /metrics: view and decision */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = input_build(s, &in, err, sizeof(err));
    if (!rc)
        charge_ended(s, &in);
    if (!rc) {
        struct sched_queue q = {in.reqs, in.nqueue};
        struct sched_running_set rs = {in.running, in.nrunning};
        /* The pass works on copies (the cluster, the requests, the
         * allocations): submissions, reports and cancels go on meanwhile, and
         * what they change is checked when the decisions are applied. Jobs
         * are never freed while the server runs, so in.jobs stays valid. */
        pthread_mutex_unlock(&s->lock);
        rc = sched_pass(&in.cl.c, &q, &rs, &s->policy, &s->sched, now, res);
        pthread_mutex_lock(&s->lock);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        srv_metrics_observe_pass(s, (t1.tv_sec - t0.tv_sec) * INT64_C(1000000000) +
                                        (t1.tv_nsec - t0.tv_nsec));
        if (rc)
            snprintf(err, sizeof(err), "sched_pass: %s", gpo_strerror(rc));
    }
    if (rc) {
        fprintf(stderr, "gpuorch server: no pass: %s\n", err);
        pass_input_release(&in);
        return;
    }
    s->passes++;
    bool decided = res->nstarts || res->npreempts || in.ndep_failed;
    bool state_due = now - s->state_saved_ms >= STATE_SAVE_MS;
    bool save = decided || state_due;
    struct store_batch *b = save ? store_batch_new() : NULL;
    struct srv_attempt *atts = calloc(res->nstarts ? res->nstarts : 1, sizeof(*atts));
    char *state = state_due ? state_encode(&s->sched) : NULL;
    rc = !save                                ? 0
         : b && atts && (state || !state_due) ? store_batch_set_decision(b, s->epoch)
                                              : -ENOMEM;
    for (size_t k = 0; !rc && k < res->nstarts; k++) {
        struct srv_job *j = srv_job_find(s, (int64_t)res->starts[k].job);
        struct srv_attempt *a = &atts[k];
        rc = start_names(&in, &res->starts[k].alloc, a);
        a->n = j->attempts + 1;
        a->start_ms = now;
        a->borrowed = res->starts[k].borrowed;
        rc = rc ? rc
                : srv_attempt_row(b, s->epoch, j->id, a, STATE_ATTEMPT_ASSIGNED, NULL, STORE_NULL,
                                  STORE_NULL, STORE_NULL);
        rc = rc ? rc
                : store_batch_job_update(b, j->id, srv_job_state_name(SRV_JOB_RUNNING), NULL, now,
                                         NULL);
    }
    for (size_t k = 0; !rc && k < res->npreempts; k++) {
        const struct srv_job *j = srv_job_find(s, (int64_t)res->preempts[k].job);
        rc = srv_attempt_row(b, s->epoch, j->id, &j->att, STATE_ATTEMPT_KILLING, "preempted",
                             STORE_NULL, STORE_NULL, STORE_NULL);
    }
    for (size_t k = 0; !rc && k < in.ndep_failed; k++)
        rc = store_batch_job_update(b, in.dep_failed[k]->id, srv_job_state_name(SRV_JOB_FAILED),
                                    in.dep_reason[k], now, NULL);
    if (state && !rc)
        rc = store_batch_sched_state_put(b, s->epoch, state, strlen(state), now);
    free(state);
    if (rc || !atts) {
        store_batch_free(b);
        fprintf(stderr, "gpuorch server: pass decisions not built: out of memory\n");
    } else if (!save || commit_unlocked(s, b, "pass decisions") == 0) {
        if (state_due)
            s->state_saved_ms = now;
        /* Applied only now that they are durable. A job cancelled while the
         * commit ran still gets its attempt, to be killed at once. */
        for (size_t k = 0; k < res->nstarts; k++) {
            struct srv_job *j = srv_job_find(s, (int64_t)res->starts[k].job);
            srv_attempt_release(&j->att);
            j->att = atts[k];
            srv_ledger_open(s, j);
            memset(&atts[k], 0, sizeof(atts[k]));
            j->attempts = j->att.n;
            if (j->state == SRV_JOB_PENDING) {
                srv_metrics_observe_wait(s, j->team,
                                         j->spec.priority ? j->spec.priority : class_default(s),
                                         now - j->queued_ms);
                j->state = SRV_JOB_RUNNING;
                j->updated_ms = now;
                free(j->reason);
                j->reason = NULL;
            } else {
                j->att.kill = true;
                j->att.kill_reason = strdup("cancelled");
                j->att.grace_ms = s->policy.preempt_grace_ms;
            }
            set_wait(j, NULL, -1);
            for (size_t p = 0; p < j->att.nparts; p++)
                srv_node_changed(s, j->att.parts[p].node);
        }
        for (size_t k = 0; k < res->npreempts; k++) {
            struct srv_job *j = srv_job_find(s, (int64_t)res->preempts[k].job);
            if (!j || !j->att.n || j->att.kill)
                continue;
            j->att.kill = true;
            j->att.kill_reason = strdup("preempted");
            j->att.kill_ms = now;
            j->att.grace_ms = res->preempts[k].grace_ms;
            for (size_t p = 0; p < j->att.nparts; p++)
                srv_node_changed(s, j->att.parts[p].node);
        }
        for (size_t k = 0; k < in.ndep_failed; k++) {
            struct srv_job *j = in.dep_failed[k];
            j->state = SRV_JOB_FAILED;
            j->updated_ms = now;
            free(j->reason);
            j->reason = strdup(in.dep_reason[k]);
            set_wait(j, NULL, -1);
        }
        for (size_t k = 0; k < res->nwaits; k++) {
            struct srv_job *j = srv_job_find(s, (int64_t)res->waits[k].job);
            char text[300];
            int n = snprintf(text, sizeof(text), "%s: ", explain_code(res->waits[k].reason));
            explain_format(&in.cl.c, &res->waits[k], text + n, sizeof(text) - (size_t)n);
            if (j && j->state == SRV_JOB_PENDING)
                set_wait(j, text, res->waits[k].est_start_ms > 0 ? res->waits[k].est_start_ms : -1);
        }
    }
    for (size_t k = 0; k < res->nstarts; k++)
        srv_attempt_release(&atts[k]);
    free(atts);
    pass_input_release(&in);
}

static void *loop_main(void *arg)
{
    struct server *s = arg;
    struct sched_result res;
    sched_result_init(&res);
    pthread_mutex_lock(&s->lock);
    int64_t last = 0;
    while (!s->stopping) {
        /* Sleep until the timer, or an event once the minimum gap has passed. */
        int64_t now = srv_now_ms();
        int64_t until = s->loop_dirty ? last + PASS_MIN_GAP_MS : last + s->cfg.pass_interval_ms;
        if (now < until) {
            struct timespec ts = {.tv_sec = until / 1000, .tv_nsec = (until % 1000) * 1000000};
            pthread_cond_timedwait(&s->loop_cv, &s->lock, &ts);
            continue; /* woken: look again at the flag and the clock */
        }
        s->loop_dirty = false;
        node_timeouts(s, now);
        srv_idle_tick(s, now);
        srv_budget_tick(s, now);
        one_pass(s, &res);
        last = srv_now_ms();
        srv_ingest_tick(s, last); /* queue length; minute aggregates to the store */
    }
    srv_ingest_flush_all(s, srv_now_ms()); /* the open minutes too: a restart keeps them */
    /* A clean stop saves the carry-over state, so a restart loses none of it. */
    char *state = state_encode(&s->sched);
    struct store_batch *b = state ? store_batch_new() : NULL;
    if (b && !store_batch_set_decision(b, s->epoch) &&
        !store_batch_sched_state_put(b, s->epoch, state, strlen(state), srv_now_ms()))
        commit_unlocked(s, b, "the scheduler's state");
    else
        store_batch_free(b);
    free(state);
    pthread_mutex_unlock(&s->lock);
    sched_result_release(&res);
    return NULL;
}

int srv_loop_start(struct server *s)
{
    int rc = pthread_create(&s->loop_thread, NULL, loop_main, s);
    s->loop_started = rc == 0;
    return -rc;
}

void srv_loop_stop(struct server *s)
{
    if (!s->loop_started)
        return;
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    pthread_cond_signal(&s->loop_cv);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->loop_thread, NULL);
    s->loop_started = false;
}

/* store_job_fn: restores the attempt that holds resources of an active job. */
static int load_attempt(void *ctx, const struct store_job *row)
{
    struct server *s = ctx;
    struct srv_job *j = srv_job_find(s, row->id);
    if (!j || !row->nattempts)
        return 0;
    const struct store_attempt *a = &row->attempts[row->nattempts - 1];
    j->attempts = a->attempt;
    bool holds = !strcmp(a->state, STATE_ATTEMPT_ASSIGNED) || !strcmp(a->state, "RUNNING") ||
                 !strcmp(a->state, STATE_ATTEMPT_KILLING);
    if (!holds)
        return 0;
    if (srv_attempt_decode(a->nodes, &j->att)) {
        srv_attempt_release(&j->att);
        return 0; /* unreadable: nothing to hold */
    }
    j->att.n = a->attempt;
    j->att.start_ms = a->start_ms;
    j->att.running = !strcmp(a->state, "RUNNING");
    if (!strcmp(a->state, STATE_ATTEMPT_KILLING)) {
        j->att.kill = true;
        j->att.kill_reason = strdup(a->reason ? a->reason : "preempted");
        j->att.grace_ms = s->policy.preempt_grace_ms;
    }
    return 0;
}

int srv_loop_load(struct server *s, char *err, size_t errlen)
{
    struct store_sched_state st = {0};
    int rc = store_sched_state_get(s->store, &st);
    if (rc == 0) {
        rc = state_decode(st.blob, st.len, &s->sched);
        store_sched_state_release(&st);
        if (rc) {
            snprintf(err, errlen, "store: the scheduler's state does not parse");
            return rc;
        }
    } else if (rc != GPO_ENOENT) {
        snprintf(err, errlen, "store: the scheduler's state: %s", gpo_strerror(rc));
        return rc;
    }
    if ((rc = store_job_scan_active(s->store, load_attempt, s)) != 0) {
        snprintf(err, errlen, "store: active jobs: %s", gpo_strerror(rc));
        return rc;
    }
    /* Retries already used, for jobs that have failed before. */
    for (size_t k = 0; k < s->njobs; k++) {
        struct srv_job *j = s->jobs[k];
        if (srv_job_state_final(j->state) || j->attempts < 2)
            continue;
        struct store_job row = {0};
        if (store_job_get(s->store, j->id, &row) == 0) {
            for (size_t a = 0; a < row.nattempts; a++) {
                const char *st2 = row.attempts[a].state;
                j->failures +=
                    !strcmp(st2, "FAILED") || !strcmp(st2, "TIMEOUT") || !strcmp(st2, "NODE_FAIL");
            }
        }
        store_job_release(&row);
    }
    return 0;
}

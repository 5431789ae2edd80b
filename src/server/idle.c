/*
 * idle.c - idle GPUs (idle.h): the tracker's decisions, the loop's tick and
 * its actions, the job's "idle" member and the metrics.
 */
#include "server/idle.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "util/errbuf.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Actions taken per team since the controller started (for metrics). */
struct srv_idle_count {
    char team[CLUSTER_NAME_MAX + 1];
    uint64_t requeued, cancelled;
};

/* ---- fresh samples ----------------------------------------------------- */

int srv_idle_samples_add(struct srv_idle_samples *t, const json_t *sample, int64_t sample_ms)
{
    const json_t *gpus = json_object_get(sample, "gpus");
    for (size_t k = 0; k < json_array_size(gpus); k++) {
        const json_t *g = json_array_get(gpus, k);
        const char *uuid = json_string_value(json_object_get(g, "uuid"));
        const json_t *u = json_object_get(g, "utilization_pct");
        if (!uuid || !json_is_number(u))
            continue;
        double pct = json_number_value(u);
        if (t->n == t->cap) {
            size_t cap = t->cap ? 2 * t->cap : 64;
            struct srv_idle_gpu *v = realloc(t->gpus, cap * sizeof(*v));
            if (!v)
                return -ENOMEM;
            t->gpus = v;
            t->cap = cap;
        }
        t->gpus[t->n++] = (struct srv_idle_gpu){uuid,
                                                pct <= 0     ? 0
                                                : pct >= 100 ? 100
                                                             : (uint32_t)(pct + 0.5),
                                                sample_ms};
    }
    return 0;
}

static int cmp_gpu(const void *a, const void *b)
{
    return strcmp(((const struct srv_idle_gpu *)a)->uuid, ((const struct srv_idle_gpu *)b)->uuid);
}

void srv_idle_samples_sort(struct srv_idle_samples *t)
{
    if (t->n > 1)
        qsort(t->gpus, t->n, sizeof(*t->gpus), cmp_gpu);
}

void srv_idle_samples_release(struct srv_idle_samples *t)
{
    free(t->gpus);
    memset(t, 0, sizeof(*t));
}

struct srv_idle_obs srv_idle_observe(const struct srv_attempt *a, const struct srv_idle_samples *t,
                                     uint32_t threshold_pct)
{
    struct srv_idle_obs o = {.all_fresh = a->nshares > 0};
    for (size_t k = 0; k < a->nshares; k++) {
        struct srv_idle_gpu key = {.uuid = a->shares[k].uuid};
        const struct srv_idle_gpu *g =
            t->n ? bsearch(&key, t->gpus, t->n, sizeof(*t->gpus), cmp_gpu) : NULL;
        if (!g) {
            o.all_fresh = false;
            continue;
        }
        /* A fraction of a shared GPU: the whole GPU's utilization counts
         * (NVML reports it per GPU). */
        if (g->util_pct >= threshold_pct) {
            o.busy = true;
            if (g->sample_ms > o.busy_ms)
                o.busy_ms = g->sample_ms;
        }
    }
    return o;
}

/* ---- one attempt's decision -------------------------------------------- */

static void warn(struct srv_idle_track *tr, const struct cluster_idle *p, int64_t now)
{
    tr->warned_ms = now;
    tr->action_ms = now + p->warning_s * 1000;
}

enum srv_idle_event srv_idle_step(struct srv_idle_track *tr, const struct cluster_idle *p,
                                  const struct srv_idle_obs *obs, int64_t now)
{
    if (!tr->active_ms) {
        tr->active_ms = now; /* nothing observed before: the clock starts here */
        return SRV_IDLE_NONE;
    }
    if (obs->busy) {
        if (obs->busy_ms > tr->active_ms)
            tr->active_ms = obs->busy_ms;
        if (!tr->since_ms)
            return SRV_IDLE_NONE;
        int64_t active = tr->active_ms;
        *tr = (struct srv_idle_track){.active_ms = active};
        return SRV_IDLE_CLEARED;
    }
    if (!obs->all_fresh)
        return SRV_IDLE_NONE; /* a GPU we did not hear from: no evidence either way */
    if (!tr->since_ms) {
        if (now - tr->active_ms < p->window_s * 1000)
            return SRV_IDLE_NONE;
        tr->since_ms = tr->active_ms;
        tr->flagged_ms = now;
        tr->threshold_pct = p->threshold_pct;
        tr->window_s = p->window_s;
        tr->action = p->action;
        if (p->action == CLUSTER_IDLE_REPORT)
            return SRV_IDLE_FLAGGED;
        warn(tr, p, now);
        return SRV_IDLE_WARNED;
    }
    /* Flagged before: the team's policy may have changed since. */
    tr->threshold_pct = p->threshold_pct;
    tr->window_s = p->window_s;
    tr->action = p->action;
    if (p->action == CLUSTER_IDLE_REPORT) {
        tr->warned_ms = tr->action_ms = 0;
        return SRV_IDLE_NONE;
    }
    if (!tr->warned_ms) {
        warn(tr, p, now);
        return SRV_IDLE_WARNED;
    }
    return now >= tr->action_ms ? SRV_IDLE_ACT : SRV_IDLE_NONE;
}

/* ---- the job's JSON ---------------------------------------------------- */

static json_t *time_or_null(int64_t ms)
{
    char buf[TIMEFMT_RFC3339_LEN];
    if (!ms || timefmt_rfc3339(ms, buf, sizeof(buf)) != 0)
        return json_null();
    return json_string(buf);
}

json_t *srv_idle_job_json(const struct srv_job *j)
{
    const struct srv_idle_track *tr = &j->att.idle;
    if (!j->att.n || !tr->since_ms)
        return json_null();
    const char *action = cluster_idle_action_name(tr->action);
    return json_pack("{s:o, s:o, s:I, s:I, s:s, s:o, s:o}", "since", time_or_null(tr->since_ms),
                     "flagged_at", time_or_null(tr->flagged_ms), "threshold_pct",
                     (json_int_t)tr->threshold_pct, "window_s", (json_int_t)tr->window_s, "action",
                     action ? action : "report", "warned_at", time_or_null(tr->warned_ms),
                     "action_at", time_or_null(tr->action_ms));
}

/* ---- the tick ---------------------------------------------------------- */

/* "30m", "2h", "45s", "1d": a window as a person writes it. */
static void window_text(int64_t s, char *buf, size_t len)
{
    if (s % 86400 == 0)
        snprintf(buf, len, "%" PRId64 "d", s / 86400);
    else if (s % 3600 == 0)
        snprintf(buf, len, "%" PRId64 "h", s / 3600);
    else if (s % 60 == 0)
        snprintf(buf, len, "%" PRId64 "m", s / 60);
    else
        snprintf(buf, len, "%" PRId64 "s", s);
}

/* An attempt to requeue or cancel. */
struct idle_act {
    int64_t job, attempt;
    enum cluster_idle_action action;
    char team[CLUSTER_NAME_MAX + 1];
    char reason[128]; /* the kill's reason, as stored and sent to the agent */
};

static struct srv_idle_count *count_of(struct server *s, const char *team)
{
    for (size_t k = 0; k < s->nidle_counts; k++)
        if (strcmp(s->idle_counts[k].team, team) == 0)
            return &s->idle_counts[k];
    struct srv_idle_count *v = realloc(s->idle_counts, (s->nidle_counts + 1) * sizeof(*v));
    if (!v)
        return NULL;
    s->idle_counts = v;
    struct srv_idle_count *c = &v[s->nidle_counts++];
    *c = (struct srv_idle_count){0};
    snprintf(c->team, sizeof(c->team), "%s", team);
    return c;
}

/* Commits the kills of `acts` (the lock released meanwhile), then marks them
 * in memory as a preemption or a cancel does; the agents stop the attempts
 * and report PREEMPTED or CANCELLED, and srv_end_plan ends them. */
static void act(struct server *s, const struct idle_act *acts, size_t n, int64_t now)
{
    struct store_batch *b = store_batch_new();
    int rc = b ? store_batch_set_decision(b, s->epoch) : -ENOMEM;
    for (size_t k = 0; !rc && k < n; k++) {
        const struct srv_job *j = srv_job_find(s, acts[k].job);
        rc = srv_attempt_row(b, s->epoch, j->id, &j->att, "KILLING", acts[k].reason, STORE_NULL,
                             STORE_NULL, STORE_NULL);
    }
    if (rc) {
        store_batch_free(b);
        fprintf(stderr, "gpuorch server: idle actions not built: out of memory\n");
        return;
    }
    char msg[256] = "";
    pthread_mutex_unlock(&s->lock);
    rc = store_commit_wait(s->store, b, NULL, 0, msg, sizeof(msg));
    pthread_mutex_lock(&s->lock);
    if (rc) {
        /* Not durable, so not done: the next tick tries again. */
        fprintf(stderr, "gpuorch server: idle actions not committed: %s%s%s\n", gpo_strerror(rc),
                msg[0] ? ": " : "", msg);
        return;
    }
    for (size_t k = 0; k < n; k++) {
        struct srv_job *j = srv_job_find(s, acts[k].job);
        if (!j || j->att.n != acts[k].attempt || j->att.kill)
            continue; /* it ended or was cancelled meanwhile */
        j->att.kill = true;
        free(j->att.kill_reason);
        j->att.kill_reason = strdup(acts[k].reason);
        j->att.kill_ms = now;
        j->att.grace_ms = s->policy.preempt_grace_ms;
        for (size_t p = 0; p < j->att.nparts; p++)
            srv_node_changed(s, j->att.parts[p].node);
        struct srv_idle_count *c = count_of(s, acts[k].team);
        if (c && acts[k].action == CLUSTER_IDLE_REQUEUE)
            c->requeued++;
        else if (c)
            c->cancelled++;
        fprintf(stderr, "gpuorch server: job %" PRId64 " (team %s): %s: %s\n", j->id, j->team,
                acts[k].action == CLUSTER_IDLE_REQUEUE ? "requeued" : "cancelled", acts[k].reason);
    }
}

static void log_event(const struct srv_job *j, enum srv_idle_event ev)
{
    const struct srv_idle_track *tr = &j->att.idle;
    char win[32], at[TIMEFMT_RFC3339_LEN] = "";
    window_text(tr->window_s, win, sizeof(win));
    if (ev == SRV_IDLE_FLAGGED)
        fprintf(stderr, "gpuorch server: job %" PRId64 " (team %s): idle: GPUs under %u%% for %s\n",
                j->id, j->team, tr->threshold_pct, win);
    else if (ev == SRV_IDLE_WARNED) {
        timefmt_rfc3339(tr->action_ms, at, sizeof(at));
        fprintf(stderr,
                "gpuorch server: job %" PRId64 " (team %s): idle: GPUs under %u%% for %s; "
                "warning: %s at %s unless it gets busy\n",
                j->id, j->team, tr->threshold_pct, win,
                tr->action == CLUSTER_IDLE_REQUEUE ? "requeued" : "cancelled", at);
    } else if (ev == SRV_IDLE_CLEARED)
        fprintf(stderr, "gpuorch server: job %" PRId64 " (team %s): busy again, no longer idle\n",
                j->id, j->team);
}

void srv_idle_tick(struct server *s, int64_t now)
{
    struct srv_idle_samples t = {0};
    for (size_t k = 0; k < s->nnodes_rt; k++) {
        const struct srv_node_rt *rt = &s->nodes_rt[k];
        if (rt->sample && rt->sample_ms > s->idle_tick_ms &&
            srv_idle_samples_add(&t, rt->sample, rt->sample_ms) != 0) {
            srv_idle_samples_release(&t);
            return; /* out of memory: this tick sees nothing */
        }
    }
    srv_idle_samples_sort(&t);
    s->idle_tick_ms = now;
    struct idle_act *acts = NULL;
    size_t nacts = 0;
    for (size_t k = 0; k < s->njobs; k++) {
        struct srv_job *j = s->jobs[k];
        if (!j->att.n || !j->att.running || j->att.kill)
            continue;
        struct cluster_idle p;
        const struct cluster_team *team = cluster_team_get(&s->cluster, j->team);
        if (team)
            p = team->idle;
        else
            cluster_idle_default(&p);
        struct srv_idle_obs obs = srv_idle_observe(&j->att, &t, p.threshold_pct);
        enum srv_idle_event ev = srv_idle_step(&j->att.idle, &p, &obs, now);
        log_event(j, ev);
        if (ev != SRV_IDLE_ACT)
            continue;
        struct idle_act *v = realloc(acts, (nacts + 1) * sizeof(*v));
        if (!v)
            break;
        acts = v;
        struct idle_act *a = &acts[nacts++];
        char win[32];
        window_text(j->att.idle.window_s, win, sizeof(win));
        *a = (struct idle_act){.job = j->id, .attempt = j->att.n, .action = p.action};
        snprintf(a->team, sizeof(a->team), "%s", j->team);
        /* The agent reports a kill whose reason says "preempted" as PREEMPTED
         * (requeued by srv_end_plan), any other as CANCELLED. */
        snprintf(a->reason, sizeof(a->reason), "%sidle: GPUs under %u%% for %s",
                 p.action == CLUSTER_IDLE_REQUEUE ? "preempted: " : "", j->att.idle.threshold_pct,
                 win);
    }
    srv_idle_samples_release(&t);
    if (nacts)
        act(s, acts, nacts, now);
    free(acts);
}

void srv_idle_release(struct server *s)
{
    free(s->idle_counts);
    s->idle_counts = NULL;
    s->nidle_counts = 0;
}

/* ---- metrics ----------------------------------------------------------- */

void srv_idle_metrics(struct server *s, struct prom *p, int64_t now_ms)
{
    (void)now_ms;
    prom_family(p, "gpuorch_job_idle", PROM_GAUGE,
                "1 for a running job whose GPUs all stayed under its team's idle threshold for "
                "the team's window");
    for (size_t k = 0; k < s->njobs; k++) {
        const struct srv_job *j = s->jobs[k];
        if (!j->att.n || !j->att.idle.since_ms)
            continue;
        char id[32];
        snprintf(id, sizeof(id), "%" PRId64, j->id);
        const char *labels[] = {"hpc_job", id,        "team",
                                j->team,   "project", j->spec.project ? j->spec.project : "",
                                NULL};
        prom_sample(p, "gpuorch_job_idle", labels, 1);
    }
    prom_family(p, "gpuorch_idle_jobs", PROM_GAUGE, "Running jobs flagged idle, per team");
    for (size_t t = 0; t < s->cluster.nteams; t++) {
        const char *name = s->cluster.teams[t].name;
        size_t n = 0;
        for (size_t k = 0; k < s->njobs; k++)
            n += s->jobs[k]->att.n && s->jobs[k]->att.idle.since_ms &&
                 strcmp(s->jobs[k]->team, name) == 0;
        const char *labels[] = {"team", name, NULL};
        prom_sample(p, "gpuorch_idle_jobs", labels, (double)n);
    }
    prom_family(p, "gpuorch_idle_actions_total", PROM_COUNTER,
                "Idle jobs requeued or cancelled by their team's policy since the controller "
                "started");
    for (size_t t = 0; t < s->cluster.nteams; t++) {
        const char *name = s->cluster.teams[t].name;
        const struct srv_idle_count *c = NULL;
        for (size_t k = 0; k < s->nidle_counts && !c; k++)
            if (strcmp(s->idle_counts[k].team, name) == 0)
                c = &s->idle_counts[k];
        const char *rq[] = {"team", name, "action", "requeue", NULL};
        const char *cn[] = {"team", name, "action", "cancel", NULL};
        prom_sample(p, "gpuorch_idle_actions_total", rq, c ? (double)c->requeued : 0);
        prom_sample(p, "gpuorch_idle_actions_total", cn, c ? (double)c->cancelled : 0);
    }
}

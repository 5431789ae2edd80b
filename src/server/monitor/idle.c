/*
 * idle.c - idle GPUs (monitor.h): the tracker's decisions, the loop's tick,
 * the job's "idle" member and the metrics.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/vec.h"
#include "server/monitor/monitor.h"
#include "util/errbuf.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Actions taken per team since the controller started (for metrics). */
struct monitor_idle_count {
    char team[CLUSTER_NAME_MAX + 1];
    uint64_t requeued, cancelled;
};

/* ---- fresh samples ----------------------------------------------------- */

int monitor_idle_samples_add(struct monitor_idle_samples *t, const char *node,
                             const struct proto_heartbeat *hb, int64_t sample_ms)
{
    for (size_t k = 0; k < hb->ngpus; k++) {
        const struct proto_gpu_sample *g = &hb->gpus[k];
        if (!g->uuid || g->utilization_pct == PROTO_NONE)
            continue;
        int64_t pct = g->utilization_pct;
        if (vec_grow((void **)&t->gpus, &t->cap, t->n + 1, sizeof(*t->gpus)))
            return GPO_ENOMEM;
        t->gpus[t->n++] = (struct monitor_idle_gpu){node, g->uuid,
                                                    pct <= 0     ? 0
                                                    : pct >= 100 ? 100
                                                                 : (uint32_t)pct,
                                                    sample_ms};
    }
    return 0;
}

/* By node, then UUID: a GPU is its node's (two records may name one UUID). */
static int cmp_gpu(const void *a, const void *b)
{
    const struct monitor_idle_gpu *x = a, *y = b;
    int c = strcmp(x->node, y->node);
    return c ? c : strcmp(x->uuid, y->uuid);
}

void monitor_idle_samples_sort(struct monitor_idle_samples *t)
{
    if (t->n > 1)
        qsort(t->gpus, t->n, sizeof(*t->gpus), cmp_gpu);
}

void monitor_idle_samples_release(struct monitor_idle_samples *t)
{
    free(t->gpus);
    memset(t, 0, sizeof(*t));
}

struct monitor_idle_obs monitor_idle_observe(const struct attempt *a,
                                             const struct monitor_idle_samples *t,
                                             uint32_t threshold_pct)
{
    struct monitor_idle_obs o = {.all_fresh = a->nshares > 0};
    for (size_t k = 0; k < a->nshares; k++) {
        struct monitor_idle_gpu key = {.node = a->shares[k].node, .uuid = a->shares[k].uuid};
        const struct monitor_idle_gpu *g =
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

static void warn(struct attempt_idle *tr, const struct cluster_idle *p, int64_t now)
{
    tr->warned_ms = now;
    tr->action_ms = now + p->warning_s * 1000;
}

enum monitor_idle_event monitor_idle_step(struct attempt_idle *tr, const struct cluster_idle *p,
                                          const struct monitor_idle_obs *obs, int64_t now)
{
    if (!tr->active_ms) {
        tr->active_ms = now; /* nothing observed before: the clock starts here */
        return MONITOR_IDLE_NONE;
    }
    if (obs->busy) {
        if (obs->busy_ms > tr->active_ms)
            tr->active_ms = obs->busy_ms;
        if (!tr->since_ms)
            return MONITOR_IDLE_NONE;
        int64_t active = tr->active_ms;
        *tr = (struct attempt_idle){.active_ms = active};
        return MONITOR_IDLE_CLEARED;
    }
    if (!obs->all_fresh)
        return MONITOR_IDLE_NONE; /* a GPU we did not hear from: no evidence either way */
    if (!tr->since_ms) {
        if (now - tr->active_ms < p->window_s * 1000)
            return MONITOR_IDLE_NONE;
        tr->since_ms = tr->active_ms;
        tr->flagged_ms = now;
        tr->threshold_pct = p->threshold_pct;
        tr->window_s = p->window_s;
        tr->action = p->action;
        if (p->action == CLUSTER_IDLE_REPORT)
            return MONITOR_IDLE_FLAGGED;
        warn(tr, p, now);
        return MONITOR_IDLE_WARNED;
    }
    /* Flagged before: the team's policy may have changed since. */
    tr->threshold_pct = p->threshold_pct;
    tr->window_s = p->window_s;
    tr->action = p->action;
    if (p->action == CLUSTER_IDLE_REPORT) {
        tr->warned_ms = tr->action_ms = 0;
        return MONITOR_IDLE_NONE;
    }
    if (!tr->warned_ms) {
        warn(tr, p, now);
        return MONITOR_IDLE_WARNED;
    }
    return now >= tr->action_ms ? MONITOR_IDLE_ACT : MONITOR_IDLE_NONE;
}

/* ---- the job's JSON ---------------------------------------------------- */

static json_t *time_or_null(int64_t ms)
{
    char buf[TIMEFMT_RFC3339_LEN];
    if (!ms || timefmt_rfc3339(ms, buf, sizeof(buf)) != 0)
        return json_null();
    return json_string(buf);
}

json_t *monitor_idle_job_json(const struct job *j)
{
    const struct attempt_idle *tr = &j->att.idle;
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

static struct monitor_idle_count *count_of(struct monitor *m, const char *team)
{
    for (size_t k = 0; k < m->nidle_counts; k++)
        if (strcmp(m->idle_counts[k].team, team) == 0)
            return &m->idle_counts[k];
    struct monitor_idle_count *v = realloc(m->idle_counts, (m->nidle_counts + 1) * sizeof(*v));
    if (!v)
        return NULL;
    m->idle_counts = v;
    struct monitor_idle_count *c = &v[m->nidle_counts++];
    *c = (struct monitor_idle_count){0};
    snprintf(c->team, sizeof(c->team), "%s", team);
    return c;
}

static void log_event(const struct job *j, enum monitor_idle_event ev)
{
    const struct attempt_idle *tr = &j->att.idle;
    char win[32], at[TIMEFMT_RFC3339_LEN] = "";
    window_text(tr->window_s, win, sizeof(win));
    if (ev == MONITOR_IDLE_FLAGGED)
        fprintf(stderr, "gpuorch server: job %" PRId64 " (team %s): idle: GPUs under %u%% for %s\n",
                j->id, j->team, tr->threshold_pct, win);
    else if (ev == MONITOR_IDLE_WARNED) {
        timefmt_rfc3339(tr->action_ms, at, sizeof(at));
        fprintf(stderr,
                "gpuorch server: job %" PRId64 " (team %s): idle: GPUs under %u%% for %s; "
                "warning: %s at %s unless it gets busy\n",
                j->id, j->team, tr->threshold_pct, win,
                tr->action == CLUSTER_IDLE_REQUEUE ? "requeued" : "cancelled", at);
    } else if (ev == MONITOR_IDLE_CLEARED)
        fprintf(stderr, "gpuorch server: job %" PRId64 " (team %s): busy again, no longer idle\n",
                j->id, j->team);
}

/* The samples of every node newer than the last tick. */
static int fresh_samples(struct monitor *m, struct monitor_idle_samples *t)
{
    for (size_t k = 0; k < m->nodes->n; k++) {
        const struct node_rt *rt = &m->nodes->v[k];
        if (rt->has_sample && rt->sample_ms > m->idle_tick_ms &&
            monitor_idle_samples_add(t, rt->name, &rt->sample, rt->sample_ms) != 0) {
            monitor_idle_samples_release(t);
            return GPO_ENOMEM;
        }
    }
    monitor_idle_samples_sort(t);
    return 0;
}

int monitor_idle_tick(struct monitor *m, int64_t now, struct monitor_idle_act **ret, size_t *ret_n)
{
    struct monitor_idle_samples t = {0};
    *ret = NULL;
    *ret_n = 0;
    if (fresh_samples(m, &t))
        return GPO_ENOMEM;
    m->idle_tick_ms = now;
    struct monitor_idle_act *acts = NULL;
    size_t nacts = 0;
    for (size_t k = 0; k < m->jobs->n; k++) {
        struct job *j = m->jobs->v[k];
        if (!j->att.n || !j->att.running || j->att.kill)
            continue;
        struct cluster_idle p;
        const struct cluster_team *team = cluster_team_get(m->cluster, j->team);
        if (team)
            p = team->idle;
        else
            cluster_idle_default(&p);
        struct monitor_idle_obs obs = monitor_idle_observe(&j->att, &t, p.threshold_pct);
        enum monitor_idle_event ev = monitor_idle_step(&j->att.idle, &p, &obs, now);
        log_event(j, ev);
        if (ev != MONITOR_IDLE_ACT)
            continue;
        struct monitor_idle_act *v = realloc(acts, (nacts + 1) * sizeof(*v));
        if (!v)
            break;
        acts = v;
        struct monitor_idle_act *a = &acts[nacts++];
        char win[32];
        window_text(j->att.idle.window_s, win, sizeof(win));
        *a = (struct monitor_idle_act){.job = j->id, .attempt = j->att.n, .action = p.action};
        snprintf(a->team, sizeof(a->team), "%s", j->team);
        snprintf(a->detail, sizeof(a->detail), "idle: GPUs under %u%% for %s",
                 j->att.idle.threshold_pct, win);
    }
    monitor_idle_samples_release(&t);
    *ret = acts;
    *ret_n = nacts;
    return 0;
}

void monitor_idle_acted(struct monitor *m, const struct monitor_idle_act *a)
{
    struct monitor_idle_count *c = count_of(m, a->team);
    if (c && a->action == CLUSTER_IDLE_REQUEUE)
        c->requeued++;
    else if (c)
        c->cancelled++;
    char reason[128];
    snprintf(reason, sizeof(reason), "%s%s", a->action == CLUSTER_IDLE_REQUEUE ? "preempted: " : "",
             a->detail);
    fprintf(stderr, "gpuorch server: job %" PRId64 " (team %s): %s: %s\n", a->job, a->team,
            a->action == CLUSTER_IDLE_REQUEUE ? "requeued" : "cancelled", reason);
}

/* ---- metrics ----------------------------------------------------------- */

void monitor_idle_metrics(struct monitor *m, struct prom *p)
{
    prom_family(p, "gpuorch_job_idle", PROM_GAUGE,
                "1 for a running job whose GPUs all stayed under its team's idle threshold for "
                "the team's window");
    for (size_t k = 0; k < m->jobs->n; k++) {
        const struct job *j = m->jobs->v[k];
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
    for (size_t t = 0; t < m->cluster->nteams; t++) {
        const char *name = m->cluster->teams[t].name;
        size_t n = 0;
        for (size_t k = 0; k < m->jobs->n; k++)
            n += m->jobs->v[k]->att.n && m->jobs->v[k]->att.idle.since_ms &&
                 strcmp(m->jobs->v[k]->team, name) == 0;
        const char *labels[] = {"team", name, NULL};
        prom_sample(p, "gpuorch_idle_jobs", labels, (double)n);
    }
    prom_family(p, "gpuorch_idle_actions_total", PROM_COUNTER,
                "Idle jobs requeued or cancelled by their team's policy since the controller "
                "started");
    for (size_t t = 0; t < m->cluster->nteams; t++) {
        const char *name = m->cluster->teams[t].name;
        const struct monitor_idle_count *c = NULL;
        for (size_t k = 0; k < m->nidle_counts && !c; k++)
            if (strcmp(m->idle_counts[k].team, name) == 0)
                c = &m->idle_counts[k];
        const char *rq[] = {"team", name, "action", "requeue", NULL};
        const char *cn[] = {"team", name, "action", "cancel", NULL};
        prom_sample(p, "gpuorch_idle_actions_total", rq, c ? (double)c->requeued : 0);
        prom_sample(p, "gpuorch_idle_actions_total", cn, c ? (double)c->cancelled : 0);
    }
}

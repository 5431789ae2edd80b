#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "core/apply.h"
#include "core/sched.h"
#include "core/state.h"
#include "base/vec.h"
#include "sim/cluster.h"
#include "sim/engine.h"
#include "sim/estimate.h"
#include "sim/queue.h"
#include "base/banned.h"

#define MS_PER_S 1000

/* SRTF's classes: remaining time in half-powers of two, the shortest highest. */
#define SRTF_CLASSES 48

/* ---- events: job ends and evictions, in a binary heap ---- */

enum { EV_END = 0, EV_KILL = 1 };

struct event {
    int64_t t_ms;
    uint32_t job;
    uint32_t gen; /* the job's generation when queued: a stale event is skipped */
    uint8_t kind;
};

struct heap {
    struct event *ev;
    size_t n, cap;
};

static bool ev_before(const struct event *a, const struct event *b)
{
    if (a->t_ms != b->t_ms)
        return a->t_ms < b->t_ms;
    if (a->kind != b->kind)
        return a->kind < b->kind;
    return a->job < b->job;
}

static int heap_push(struct heap *h, struct event e)
{
    if (vec_grow((void **)&h->ev, &h->cap, h->n + 1, sizeof(*h->ev)))
        return GPO_ENOMEM;
    size_t i = h->n++;
    while (i > 0 && ev_before(&e, &h->ev[(i - 1) / 2])) {
        h->ev[i] = h->ev[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->ev[i] = e;
    return 0;
}

static struct event heap_pop(struct heap *h)
{
    struct event top = h->ev[0], last = h->ev[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && ev_before(&h->ev[c + 1], &h->ev[c]))
            c++;
        if (!ev_before(&h->ev[c], &last))
            break;
        h->ev[i] = h->ev[c];
        i = c;
    }
    if (h->n)
        h->ev[i] = last;
    return top;
}

/* ---- the replay ---- */

enum job_status { JS_FUTURE = 0, JS_PENDING, JS_RUNNING, JS_LEAVING, JS_DONE, JS_UNSCHED };

struct job {
    struct sched_job req;
    int64_t duration_ms;
    int64_t remaining_ms; /* work left */
    int64_t attempt_ms;   /* this attempt's start */
    int64_t penalty_ms;   /* this attempt's restart penalty */
    int64_t milli;        /* GPU milli it holds while running */
    uint32_t gen;
    uint32_t attempts;
    uint8_t status;
    bool extra; /* one of opts->extra (engine.h): the oracles leave it be */
};

struct sim {
    const struct sim_trace *trace;
    const struct sim_spec *spec;
    const struct sim_policy *pol;
    struct sched_policy core_pol;
    const struct sim_opts *opts;
    struct sim_result *out;
    struct sim_cluster cl;
    struct job *jobs;           /* parallel to out->jobs: the trace's, then opts->extra */
    size_t njobs;               /* all of them; out->njobs the trace's */
    uint32_t *arrive;           /* indices into jobs, in submit order */
    struct sim_queue q;         /* pending jobs, as sched_pass reads them */
    struct sched_run_table run; /* running jobs, as sched_pass reads them */
    struct heap heap;
    struct sched_state st;
    struct sched_result res;
    struct sim_estimate est; /* time limits: p90 of earlier jobs' durations */
    int64_t busy_milli;
    int64_t las_wake_ms;   /* the last pass's las_crossing_ms: a pass is due then */
    int64_t *gpu_used;     /* per GPU: milli held */
    uint32_t npartial;     /* GPUs partly used (0 < milli held < 1000) */
    uint32_t nborrowed;    /* running jobs started over their team's guarantee */
    bool *team_guaranteed; /* per team: some quota guarantees it GPUs */
    bool unpassed;         /* jobs arrived since the last pass (it was skipped) */
    int64_t last_ms;       /* the last step's time */
    int64_t window_from_ms, window_to_ms;
};

/* A core request for `gpu_milli` of team `team` (id: index n + 1). */
static struct sched_job job_request_for(const struct sim *sm, size_t n, int64_t submit_ms,
                                        uint32_t team, int64_t gpu_milli)
{
    const struct sim_spec *s = sm->spec;
    bool whole = gpu_milli >= SCHED_MILLI;
    int64_t gpus = whole ? gpu_milli / SCHED_MILLI : 0;
    return (struct sched_job){.id = n + 1,
                              .submit_ms = submit_ms,
                              .team = team,
                              .prio = 0,
                              .pool =
                                  s->teams[team].pool == SIM_NONE ? SCHED_ANY : s->teams[team].pool,
                              .gpu_type = SCHED_ANY,
                              .gpus = (int32_t)(gpus > INT32_MAX ? INT32_MAX : gpus),
                              .gpu_milli = whole ? 0 : (int32_t)gpu_milli,
                              .multi_node = whole && gpus > sm->cl.max_gpus_per_node,
                              .checkpointable = true};
}

/* opts->extra's jobs, after the trace's n: in the serving class, not
 * checkpointable (engine.h). */
static int extra_build(struct sim *sm, size_t n, char *err, size_t errlen)
{
    const struct sim_opts *o = sm->opts;
    for (size_t k = 0; k < o->nextra; k++) {
        const struct sim_extra_job *x = &o->extra[k];
        const char *bad =
            x->team >= sm->spec->nteams                                           ? "team"
            : x->submit_ms < 0 || (k && x->submit_ms < o->extra[k - 1].submit_ms) ? "submit_ms"
            : x->duration_ms < 0                                                  ? "duration_ms"
            : x->gpu_milli < 1 || (x->gpu_milli > SCHED_MILLI && x->gpu_milli % SCHED_MILLI)
                ? "gpu_milli"
                : NULL;
        if (bad) {
            snprintf(err, errlen, "extra job %zu: bad %s", k, bad);
            return GPO_EINVAL;
        }
        struct job *j = &sm->jobs[n + k];
        j->req = job_request_for(sm, n + k, x->submit_ms, x->team, x->gpu_milli);
        j->req.prio = sm->cl.c.nclasses - 1;
        j->req.checkpointable = false;
        j->extra = true;
        j->duration_ms = j->remaining_ms = x->duration_ms;
        sm->out->jobs[n + k] = (struct sim_job_result){.trace_index = (uint32_t)k,
                                                       .team = x->team,
                                                       .submit_s = x->submit_ms / MS_PER_S,
                                                       .duration_s = x->duration_ms / MS_PER_S,
                                                       .gpu_milli = x->gpu_milli,
                                                       .first_start_s = -1,
                                                       .first_start_ms = -1,
                                                       .end_s = -1};
    }
    sm->out->extra = sm->out->jobs + n;
    sm->out->nextra = o->nextra;
    sm->njobs = n + o->nextra;
    /* Arrivals: the two lists merged by submit time, the trace's first at a tie. */
    size_t a = 0, b = n;
    for (size_t i = 0; i < sm->njobs; i++) {
        bool take_a =
            b >= sm->njobs || (a < n && sm->jobs[a].req.submit_ms <= sm->jobs[b].req.submit_ms);
        sm->arrive[i] = (uint32_t)(take_a ? a++ : b++);
    }
    return 0;
}

/* The trace's jobs that some team takes, as core requests, then opts->extra's. */
static int jobs_build(struct sim *sm, char *err, size_t errlen)
{
    const struct sim_trace *t = sm->trace;
    const struct sim_spec *s = sm->spec;
    size_t all = t->njobs + sm->opts->nextra;
    uint32_t *team_of = malloc((t->nqueues ? t->nqueues : 1) * sizeof(*team_of));
    sm->jobs = calloc(all ? all : 1, sizeof(*sm->jobs));
    sm->arrive = calloc(all ? all : 1, sizeof(*sm->arrive));
    sm->out->jobs = calloc(all ? all : 1, sizeof(*sm->out->jobs));
    if (!team_of || !sm->jobs || !sm->arrive || !sm->out->jobs) {
        free(team_of);
        return GPO_ENOMEM;
    }
    for (size_t q = 0; q < t->nqueues; q++)
        team_of[q] = sim_spec_team_of_queue(s, t->queues[q]);
    size_t n = 0;
    for (size_t i = 0; i < t->njobs; i++) {
        const struct sim_trace_job *tj = &t->jobs[i];
        uint32_t team = team_of[tj->queue];
        if (team == SIM_NONE) {
            sm->out->ndropped++;
            continue;
        }
        struct job *j = &sm->jobs[n];
        j->req = job_request_for(sm, n, tj->submit_s * MS_PER_S, team, tj->gpu_milli);
        if (tj->gpu_type != SIM_NONE) {
            int64_t ty = sched_gpu_type_find(&sm->cl.c, t->gpu_types[tj->gpu_type]);
            j->req.gpu_type = ty < 0 ? sm->cl.c.ngpu_types : (uint32_t)ty; /* unknown: reported */
        }
        j->duration_ms = j->remaining_ms = tj->duration_s * MS_PER_S;
        sm->out->jobs[n] = (struct sim_job_result){.trace_index = (uint32_t)i,
                                                   .team = team,
                                                   .submit_s = tj->submit_s,
                                                   .duration_s = tj->duration_s,
                                                   .gpu_milli = tj->gpu_milli,
                                                   .first_start_s = -1,
                                                   .first_start_ms = -1,
                                                   .end_s = -1};
        n++;
    }
    free(team_of);
    sm->out->njobs = n;
    return extra_build(sm, n, err, errlen);
}

/* Time limit for a job arriving now: never its own duration (but for the oracles). */
static int64_t estimate_limit_ms(const struct sim *sm, const struct job *j)
{
    if (sm->pol->oracle != SIM_ORACLE_NONE && !j->extra)
        return j->remaining_ms > 0 ? j->remaining_ms : 1;
    int64_t p90 = sim_estimate_s(&sm->est, j->req.team, sched_job_milli(&j->req, 0));
    return p90 < 0 ? sm->core_pol.default_time_limit_ms : p90 * MS_PER_S;
}

/* SRTF's class for a remaining time: shorter is higher. */
static uint32_t srtf_class(int64_t remaining_ms)
{
    /* Whole seconds on purpose: traces are in seconds, and the replays' golden
     * outputs rest on these class boundaries. */
    // NOLINTNEXTLINE(bugprone-integer-division): whole seconds, see above
    double b = 2.0 * log2((double)(remaining_ms / MS_PER_S) + 1.0);
    uint32_t k = b >= SRTF_CLASSES - 1 ? SRTF_CLASSES - 1 : (uint32_t)b;
    return SRTF_CLASSES - 1 - k;
}

static int64_t remaining_at(const struct job *j, int64_t now)
{
    if (j->status != JS_RUNNING && j->status != JS_LEAVING)
        return j->remaining_ms;
    int64_t done = now - j->attempt_ms - j->penalty_ms;
    done = done < 0 ? 0 : done;
    return done >= j->remaining_ms ? 0 : j->remaining_ms - done;
}

/* Queues job j (arrived or evicted). What the oracles are told goes into the
 * queued copy of its request: sjf's ordering key is the true duration, srtf's
 * the true remaining time and its class. Nothing else reads them. */
static int pending_add(struct sim *sm, uint32_t ji)
{
    struct job *j = &sm->jobs[ji];
    j->status = JS_PENDING;
    struct sched_job req = j->req;
    if (j->extra) {
        /* the oracles' keys are the trace's */
    } else if (sm->pol->oracle == SIM_ORACLE_SJF) {
        req.submit_ms = j->duration_ms;
    } else if (sm->pol->oracle == SIM_ORACLE_SRTF) {
        req.submit_ms = j->remaining_ms;
        req.prio = srtf_class(j->remaining_ms);
        req.time_limit_ms = j->remaining_ms + sm->opts->restart_penalty_s * MS_PER_S;
    }
    if (sm->pol->oracle != SIM_ORACLE_NONE && !j->extra)
        j->req = req; /* the running copy starts from it */
    return sim_queue_push(&sm->q, ji, &req);
}

/* The job of running entry r (ids are job index + 1): the table borrows its
 * request, which srtf re-keys. */
static struct job *running_job(struct sim *sm, size_t r)
{
    return &sm->jobs[sm->run.runs[r].job->id - 1];
}

/* srtf: a running job's key and class follow its remaining time. */
static void srtf_running_keys(struct sim *sm, int64_t now)
{
    for (size_t r = 0; sm->pol->oracle == SIM_ORACLE_SRTF && r < sm->run.n; r++) {
        struct job *j = running_job(sm, r);
        if (j->extra)
            continue;
        int64_t left = remaining_at(j, now);
        j->req.submit_ms = left;
        j->req.prio = srtf_class(left);
    }
}

/* "node:gpus;node:gpus" for an allocation (fractions as 0.25). */
static char *placement_of(const struct sim_cluster *cl, const struct sched_alloc *a)
{
    size_t cap = 1;
    for (uint32_t k = 0; k < a->nnodes; k++)
        cap += strlen(cl->nodes[a->nodes[k].node].name) + 24;
    char *s = malloc(cap), *at = s;
    if (!s)
        return NULL;
    *s = '\0';
    for (uint32_t k = 0; k < a->nnodes; k++) {
        uint32_t node = a->nodes[k].node;
        int64_t milli = 0;
        for (uint32_t i = 0; i < a->nshares; i++)
            milli += cl->gpu_node[a->shares[i].gpu] == node ? a->shares[i].milli : 0;
        int w = milli % SCHED_MILLI
                    ? snprintf(at, cap - (size_t)(at - s), "%s%s:%.3f", k ? ";" : "",
                               cl->nodes[node].name, (double)milli / SCHED_MILLI)
                    : snprintf(at, cap - (size_t)(at - s), "%s%s:%lld", k ? ";" : "",
                               cl->nodes[node].name, (long long)(milli / SCHED_MILLI));
        at += w;
    }
    return s;
}

/* Takes (or with a negative `milli`, gives back) part of GPU g, keeping the
 * count of GPUs that are partly used: fragmented, for fractional jobs. */
static void use_gpu(struct sim *sm, uint32_t g, int64_t milli)
{
    int64_t before = sm->gpu_used[g], after = before + milli;
    sm->npartial -= before > 0 && before < SCHED_MILLI;
    sm->npartial += after > 0 && after < SCHED_MILLI;
    sm->gpu_used[g] = after;
}

/* The simulator's side of a start the run table has applied: the job's
 * attempt, its placement, the GPUs it takes and its end. */
static int start_job(struct sim *sm, const struct sched_start *s, int64_t now)
{
    uint32_t ji = (uint32_t)(s->job - 1);
    struct job *j = &sm->jobs[ji];
    struct sim_job_result *o = &sm->out->jobs[ji];
    free(o->placement);
    if (!(o->placement = placement_of(&sm->cl, &s->alloc)))
        return GPO_ENOMEM;
    j->milli = 0;
    for (uint32_t i = 0; i < s->alloc.nshares; i++)
        j->milli += s->alloc.shares[i].milli;
    j->status = JS_RUNNING;
    j->attempt_ms = now;
    j->penalty_ms = j->attempts ? sm->opts->restart_penalty_s * MS_PER_S : 0;
    j->attempts++;
    j->gen++;
    if (o->first_start_s < 0) {
        o->first_start_s = now / MS_PER_S;
        o->first_start_ms = now;
    }
    sm->busy_milli += j->milli;
    for (uint32_t i = 0; i < s->alloc.nshares; i++)
        use_gpu(sm, s->alloc.shares[i].gpu, s->alloc.shares[i].milli);
    sm->nborrowed += s->borrowed;
    return heap_push(&sm->heap,
                     (struct event){now + j->penalty_ms + j->remaining_ms, ji, j->gen, EV_END});
}

/* The useful part of an attempt that ran until `end`: from its start plus the
 * restart penalty; counted in total and within the window, per team. */
static int64_t account_attempt(struct sim *sm, struct job *j, int64_t end)
{
    int64_t from = j->attempt_ms + j->penalty_ms;
    int64_t done = end > from ? end - from : 0;
    if (done > j->remaining_ms)
        done = j->remaining_ms;
    double gpus = (double)j->milli / SCHED_MILLI;
    sm->out->jobs[j - sm->jobs].running_s += (end - j->attempt_ms) / MS_PER_S;
    if (j->extra)
        return done; /* the figures are the trace's (engine.h) */
    sm->out->useful_gpu_s += gpus * (double)done / MS_PER_S;
    int64_t a = from > sm->window_from_ms ? from : sm->window_from_ms;
    int64_t b = from + done < sm->window_to_ms ? from + done : sm->window_to_ms;
    if (b > a) {
        double w = gpus * (double)(b - a) / MS_PER_S;
        sm->out->useful_window_gpu_s += w;
        sm->out->team_useful_window_gpu_s[j->req.team] += w;
    }
    return done;
}

/* Takes job j out of the running set at `end`, charging its last stretch.
 * The GPUs it held are given back first, while the table still has its
 * allocation (an error ends the replay). */
static int leave_running(struct sim *sm, struct job *j, int64_t end)
{
    const struct sched_running *run = sched_run_table_find(&sm->run, j->req.id);
    if (!run)
        return GPO_ENOENT;
    bool borrowed = run->borrowed;
    for (uint32_t i = 0; i < run->alloc.nshares; i++)
        use_gpu(sm, run->alloc.shares[i].gpu, -(int64_t)run->alloc.shares[i].milli);
    int err = sched_apply_end(&sm->run, &sm->st, &sm->cl.c, &sm->core_pol, j->req.id, end);
    if (err)
        return err;
    sm->nborrowed -= borrowed;
    sm->busy_milli -= j->milli;
    j->gen++;
    return 0;
}

static int on_event(struct sim *sm, const struct event *e)
{
    struct job *j = &sm->jobs[e->job];
    if (e->gen != j->gen || (j->status != JS_RUNNING && j->status != JS_LEAVING))
        return 0; /* stale: the job left, or restarted, since */
    if (e->kind == EV_KILL && j->status != JS_LEAVING)
        return 0;
    int64_t done = account_attempt(sm, j, e->t_ms);
    int err = leave_running(sm, j, e->t_ms);
    if (err)
        return err;
    if (e->kind == EV_END) {
        j->remaining_ms = 0;
        j->status = JS_DONE;
        sm->out->jobs[e->job].end_s = e->t_ms / MS_PER_S;
        if (!j->extra && e->t_ms / MS_PER_S > sm->out->last_end_s)
            sm->out->last_end_s = e->t_ms / MS_PER_S;
        int64_t d = j->duration_ms / MS_PER_S;
        sim_estimate_add(&sm->est, j->req.team, sched_job_milli(&j->req, 0), d);
        return 0;
    }
    /* Evicted: it resumes later from where it got. */
    j->remaining_ms -= done;
    sm->out->jobs[e->job].preemptions++;
    return pending_add(sm, e->job);
}

static int sample(struct sim *sm, int64_t now)
{
    struct sim_result *o = sm->out;
    if (vec_grow((void **)&o->samples, &o->samples_cap, o->nsamples + 1, sizeof(*o->samples)))
        return GPO_ENOMEM;
    struct sim_sample s = {now / MS_PER_S, sm->busy_milli, (uint32_t)sm->q.n, (uint32_t)sm->run.n,
                           sm->npartial};
    if (o->nsamples && o->samples[o->nsamples - 1].t_s == s.t_s)
        o->samples[o->nsamples - 1] = s; /* the last state at a time is the one that holds */
    else
        o->samples[o->nsamples++] = s;
    return 0;
}

static void unschedulable(struct sim *sm, uint32_t ji, enum sched_reason why)
{
    sm->jobs[ji].status = JS_UNSCHED;
    sm->out->jobs[ji].unschedulable = true;
    sm->out->jobs[ji].reason = why;
}

/* Walks the waits (in queue order; started jobs have none) beside the queue:
 * each entry keeps its reason, unless it started or can never run. */
static void settle_waits(struct sim *sm, const struct sched_result *r)
{
    struct sim_queue *q = &sm->q;
    size_t w = 0, last_gone = SIZE_MAX;
    for (size_t k = 0; k < q->n; k++) {
        size_t at = q->head + k;
        if (w < r->nwaits && r->waits[w].job == q->req[at].id) {
            enum sched_reason why = r->waits[w++].reason;
            q->reason[at] = (uint8_t)why;
            if (!explain_is_final(why))
                continue;
            unschedulable(sm, q->job[at], why);
        }
        q->reason[at] = SIM_QUEUE_GONE; /* started, or never will */
        last_gone = k;
    }
    if (last_gone != SIZE_MAX)
        sim_queue_compact(q, last_gone);
}

/* sched_job_lookup_fn for the run table: ids are job index + 1. */
static const struct sched_job *job_request(void *ctx, uint64_t id)
{
    struct sim *sm = ctx;
    return id >= 1 && id <= sm->njobs ? &sm->jobs[id - 1].req : NULL;
}

/* One scheduling pass at `now`, its decisions applied. */
static int pass(struct sim *sm, int64_t now, char *err, size_t errlen)
{
    int e = sim_queue_sort(&sm->q);
    if (e)
        return e;
    srtf_running_keys(sm, now);
    struct sched_queue q = {sm->q.req + sm->q.head, sm->q.n};
    struct sched_running_set rs = sched_run_table_view(&sm->run);
    e = sched_pass(&sm->cl.c, &q, &rs, &sm->core_pol, &sm->st, now, &sm->res);
    if (e) {
        snprintf(err, errlen, "scheduling pass at t=%llds failed: %s", (long long)(now / MS_PER_S),
                 gpo_strerror(e));
        return e;
    }
    sm->out->passes++;
    const struct sched_result *r = &sm->res;
    sm->las_wake_ms = r->las_crossing_ms;
    if ((e = sched_apply_result(&sm->run, r, job_request, sm, now)))
        return e;
    for (size_t k = 0; k < r->nstarts; k++) {
        if ((e = start_job(sm, &r->starts[k], now)))
            return e;
    }
    for (size_t k = 0; k < r->npreempts; k++) {
        uint32_t ji = (uint32_t)(r->preempts[k].job - 1);
        struct job *j = &sm->jobs[ji];
        if (j->status != JS_RUNNING)
            continue;
        j->status = JS_LEAVING;
        sm->out->preemptions++;
        e = heap_push(&sm->heap,
                      (struct event){now + r->preempts[k].grace_ms, ji, j->gen, EV_KILL});
        if (e)
            return e;
    }
    settle_waits(sm, r);
    return sample(sm, now);
}

static int sim_setup(struct sim *sm, char *err, size_t errlen)
{
    uint32_t nclasses = sm->pol->oracle == SIM_ORACLE_SRTF ? SRTF_CLASSES : 1;
    int e = sim_cluster_build(&sm->cl, sm->spec, nclasses + (sm->opts->nextra ? 1 : 0),
                              sm->pol->oracle == SIM_ORACLE_SRTF, err, errlen);
    if (e)
        return e;
    if (sm->opts->nextra) /* the extra jobs' class, above the trace's (engine.h) */
        sm->cl.classes[nclasses] = (struct sched_prio_class){
            .name = "serving", .order = (int32_t)nclasses, .may_preempt = true};
    if (sm->opts->held_gpus > sm->cl.c.ngpus) {
        snprintf(err, errlen, "%u GPUs held back from a cluster of %u", sm->opts->held_gpus,
                 sm->cl.c.ngpus);
        return GPO_EINVAL;
    }
    for (uint32_t g = sm->cl.c.ngpus - sm->opts->held_gpus; g < sm->cl.c.ngpus; g++)
        sm->cl.gpus[g].held = true;
    struct sim_result *o = sm->out;
    o->nteams = sm->spec->nteams;
    o->team_useful_window_gpu_s = calloc(o->nteams + 1, sizeof(double));
    o->team_demand_window_gpu_s = calloc(o->nteams + 1, sizeof(double));
    o->team_names = calloc(o->nteams + 1, sizeof(char *));
    if (!o->team_useful_window_gpu_s || !o->team_demand_window_gpu_s || !o->team_names ||
        sim_estimate_init(&sm->est, (uint32_t)sm->spec->nteams))
        return GPO_ENOMEM;
    for (size_t t = 0; t < o->nteams; t++)
        o->team_names[t] = sm->spec->teams[t].name;
    o->total_gpus_milli = (int64_t)(sm->cl.c.ngpus - sm->opts->held_gpus) * SCHED_MILLI;
    sm->gpu_used = calloc(sm->cl.c.ngpus ? sm->cl.c.ngpus : 1, sizeof(*sm->gpu_used));
    sm->team_guaranteed = calloc(sm->spec->nteams + 1, sizeof(*sm->team_guaranteed));
    if (!sm->gpu_used || !sm->team_guaranteed)
        return GPO_ENOMEM;
    for (size_t t = 0; t < sm->spec->nteams; t++) {
        for (size_t k = 0; k < sm->spec->teams[t].nquotas; k++)
            sm->team_guaranteed[t] |= sm->spec->teams[t].quotas[k].guaranteed_milli > 0;
    }
    if ((e = jobs_build(sm, err, errlen)))
        return e;
    if (o->njobs) {
        o->first_submit_s = o->jobs[0].submit_s;
        o->last_submit_s = o->jobs[o->njobs - 1].submit_s;
    }
    sm->window_from_ms = o->first_submit_s * MS_PER_S;
    sm->window_to_ms = o->last_submit_s * MS_PER_S;
    for (size_t i = 0; i < o->njobs; i++) {
        const struct sim_job_result *r = &o->jobs[i];
        int64_t room = o->last_submit_s - r->submit_s;
        int64_t d = r->duration_s < room ? r->duration_s : room;
        o->team_demand_window_gpu_s[r->team] += (double)d * (double)r->gpu_milli / SCHED_MILLI;
    }
    return 0;
}

static void sim_free(struct sim *sm)
{
    free(sm->jobs);
    free(sm->arrive);
    sim_queue_release(&sm->q);
    sched_run_table_release(&sm->run);
    free(sm->heap.ev);
    sim_estimate_release(&sm->est);
    free(sm->gpu_used);
    free(sm->team_guaranteed);
    sched_state_release(&sm->st);
    sched_result_release(&sm->res);
    sim_cluster_release(&sm->cl);
}

/* Jobs still pending when nothing is left to happen can never start. */
static void settle_stuck(struct sim *sm)
{
    for (size_t k = 0; k < sm->q.n; k++)
        unschedulable(sm, sm->q.job[sm->q.head + k], sm->q.reason[sm->q.head + k]);
    sim_queue_release(&sm->q);
}

/* The free GPUs, summed up for may_fit_now. */
struct free_gpus {
    int64_t node_whole; /* most whole GPUs free on one node */
    int64_t total_whole;
    int64_t gpu_milli; /* most milli free on one GPU */
};

static struct free_gpus free_gpus_now(const struct sim *sm)
{
    const struct sched_cluster *c = &sm->cl.c;
    struct free_gpus f = {0};
    for (uint32_t n = 0; n < c->nnodes; n++) {
        int64_t whole = 0;
        for (uint32_t g = c->nodes[n].gpu_first; g < c->nodes[n].gpu_first + c->nodes[n].ngpus;
             g++) {
            if (c->gpus[g].held)
                continue;
            whole += sm->gpu_used[g] == 0;
            if (SCHED_MILLI - sm->gpu_used[g] > f.gpu_milli)
                f.gpu_milli = SCHED_MILLI - sm->gpu_used[g];
        }
        f.node_whole = whole > f.node_whole ? whole : f.node_whole;
        f.total_whole += whole;
    }
    return f;
}

/* Could job j start on the free GPUs? An over-estimate: any node, any pool,
 * GPU counts only (quotas, memory and reservations are the pass's). */
static bool may_fit_now(const struct free_gpus *f, const struct sched_job *req)
{
    if (req->gpus > 0)
        return req->gpus <= (req->multi_node ? f->total_whole : f->node_whole);
    return req->gpu_milli <= f->gpu_milli;
}

/* Could job j evict anything now? Priority classes preempt only under srtf
 * and for the extra jobs' class (engine.h); LAS (across the cluster or within teams) and srtf
 * always might: a running job may have crossed a LAS threshold since the last pass, and any waiting
 * job may then evict it; a reclaim needs a guarantee and a borrower; a move (migrate.h) needs a
 * single-node job and as many GPUs free. */
static bool may_preempt_now(const struct sim *sm, const struct free_gpus *f, const struct job *j)
{
    const struct sched_policy *p = &sm->core_pol;
    if (!p->preemption)
        return false;
    bool las = p->order == SCHED_ORDER_LAS ||
               (p->order == SCHED_ORDER_FAIRSHARE && p->within == SCHED_WITHIN_LAS);
    if (las || sm->pol->oracle == SIM_ORACLE_SRTF || sm->cl.c.classes[j->req.prio].may_preempt)
        return true;
    if (p->migrate && j->req.gpus > 0 && !j->req.multi_node && j->req.gpus <= f->total_whole)
        return true;
    return sm->nborrowed > 0 && sm->team_guaranteed[j->req.team];
}

/*
 * A step where jobs only arrived skips its pass when the pass could not
 * start or evict anything: no new job fits the free GPUs or may preempt, and
 * no waiting job that fits them is held back only by a reservation (a new job
 * could take the reservation over and let it start). Nothing else changes without an end or
 * an eviction: capacity does not grow, and as time passes, backfill only gets
 * harder. The skipped jobs are ranked at the next pass.
 */
static bool pass_needed(const struct sim *sm, size_t first_new, size_t end_new, bool changed)
{
    if (changed || sm->pol->oracle == SIM_ORACLE_SRTF || sm->opts->pass_every_step)
        return true;
    struct free_gpus f = free_gpus_now(sm);
    for (size_t i = first_new; i < end_new; i++) {
        const struct job *j = &sm->jobs[sm->arrive[i]];
        if (may_fit_now(&f, &j->req) || may_preempt_now(sm, &f, j))
            return true;
    }
    for (size_t k = sm->q.head; k < sm->q.head + sm->q.n; k++) {
        if (sm->q.reason[k] == SCHED_REASON_RESERVED && may_fit_now(&f, &sm->q.req[k]))
            return true;
    }
    return false;
}

static int sim_loop(struct sim *sm, char *err, size_t errlen)
{
    size_t next = 0; /* next job to arrive */
    for (;;) {
        int64_t now = INT64_MAX;
        if (next < sm->njobs)
            now = sm->jobs[sm->arrive[next]].req.submit_ms;
        if (sm->heap.n && sm->heap.ev[0].t_ms < now)
            now = sm->heap.ev[0].t_ms;
        if (sm->las_wake_ms < now && sm->run.n)
            now = sm->las_wake_ms;
        int e;
        if (now == INT64_MAX) {
            if (!sm->unpassed) {
                settle_stuck(sm);
                return 0;
            }
            /* The last arrivals were never ranked: one more pass, then go on. */
            sm->unpassed = false;
            if ((e = pass(sm, sm->last_ms, err, errlen)))
                return e;
            continue;
        }
        /* A running job crosses a LAS threshold and a waiting job could then
         * evict it: that changes what a pass decides. */
        bool changed = sm->las_wake_ms == now;
        while (sm->heap.n && sm->heap.ev[0].t_ms == now) {
            struct event ev = heap_pop(&sm->heap);
            bool live = ev.gen == sm->jobs[ev.job].gen;
            if ((e = on_event(sm, &ev)))
                return e;
            changed |= live;
        }
        size_t first_new = next;
        for (; next < sm->njobs && sm->jobs[sm->arrive[next]].req.submit_ms == now; next++) {
            struct job *j = &sm->jobs[sm->arrive[next]];
            j->req.time_limit_ms = estimate_limit_ms(sm, j);
            if ((e = pending_add(sm, sm->arrive[next])))
                return e;
        }
        sm->last_ms = now;
        if (!pass_needed(sm, first_new, next, changed)) {
            sm->unpassed = true;
            if ((e = sample(sm, now)))
                return e;
            continue;
        }
        sm->unpassed = false;
        if ((e = pass(sm, now, err, errlen)))
            return e;
    }
}

void sim_result_init(struct sim_result *r)
{
    if (r)
        memset(r, 0, sizeof(*r));
}

void sim_result_release(struct sim_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; r->jobs && i < r->njobs + r->nextra; i++)
        free(r->jobs[i].placement);
    free(r->jobs);
    free(r->samples);
    free(r->team_useful_window_gpu_s);
    free(r->team_demand_window_gpu_s);
    free(r->team_names);
    memset(r, 0, sizeof(*r));
}

int sim_run(const struct sim_trace *trace, const struct sim_spec *spec,
            const struct sim_policy *policy, const struct sim_opts *opts, struct sim_result *out,
            char *err, size_t errlen)
{
    if (!trace || !spec || !policy || !opts || !out || opts->restart_penalty_s < 0)
        return GPO_EINVAL;
    struct sim sm = {.trace = trace,
                     .spec = spec,
                     .pol = policy,
                     .core_pol = policy->core,
                     .opts = opts,
                     .out = out,
                     .las_wake_ms = INT64_MAX};
    sched_state_init(&sm.st);
    sim_queue_init(&sm.q);
    sched_run_table_init(&sm.run);
    sched_result_init(&sm.res);
    const char *field = NULL;
    int e = sched_policy_check(&sm.core_pol, &field);
    if (e)
        snprintf(err, errlen, "policy %s: bad %s", policy->name, field ? field : "field");
    if (!e)
        e = sim_setup(&sm, err, errlen);
    if (!e)
        e = sim_loop(&sm, err, errlen);
    if (e == GPO_ENOMEM)
        snprintf(err, errlen, "out of memory");
    sim_free(&sm);
    if (e)
        sim_result_release(out);
    return e;
}

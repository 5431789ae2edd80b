/*
 * attempts.c - the transitions of an attempt that touch several subsystems
 * (sched.h): its kill, its end, the charge of its last stretch to fair share,
 * and the kills the teams' idle policies order.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/vec.h"
#include "server/sched/sched_int.h"
#include "base/banned.h"

/* ---- kills ------------------------------------------------------------------ */

int sched_kill_row(struct server *s, struct store_batch *b, const struct job *j,
                   enum kill_cause cause, const char *detail)
{
    struct attempt a = j->att;
    a.kill = cause;
    a.kill_detail = (char *)detail;
    char reason[160];
    attempt_kill_reason(&a, reason, sizeof(reason));
    return attempt_row(b, s->epoch, j->id, &j->att, ATTEMPT_KILLING, reason, STORE_NULL, STORE_NULL,
                       STORE_NULL);
}

int sched_kill_apply(struct server *s, struct job *j, enum kill_cause cause, const char *detail,
                     int64_t grace_ms)
{
    int rc = attempt_kill(&j->att, cause, detail, grace_ms);
    if (rc)
        return rc;
    for (size_t p = 0; p < j->att.nparts; p++)
        nodes_changed(&s->nodes, j->att.parts[p].node);
    return 0;
}

/* ---- cancels ----------------------------------------------------------------- */

#define CANCELLED_BY_USER "cancelled by user"

int sched_cancel_plan(struct server *s, const struct job *j, int64_t now_ms, struct store_batch *b,
                      int64_t *ret_attempt)
{
    int rc;
    if (j->att.n)
        rc = sched_kill_row(s, b, j, KILL_CANCELLED, NULL);
    else
        rc = store_batch_job_update(b, j->id, job_state_name(JOB_CANCELLED), CANCELLED_BY_USER,
                                    now_ms, NULL)
                 ? GPO_ENOMEM
                 : 0;
    if (rc)
        return rc;
    *ret_attempt = j->att.n;
    return 0;
}

struct job *sched_cancel_apply(struct server *s, int64_t id, int64_t attempt, int64_t now_ms)
{
    struct job *j = jobs_find(&s->jobs, id);
    if (j && attempt && j->att.n == attempt) {
        sched_kill_apply(s, j, KILL_CANCELLED, NULL, s->sched->policy.preempt_grace_ms);
    } else if (j) {
        j->state = JOB_CANCELLED;
        j->updated_ms = now_ms;
        free(j->reason);
        j->reason = strdup(CANCELLED_BY_USER);
        job_set_wait(j, NULL, j->est_start_ms);
        sched_wake(s->sched, SCHED_WHY_CANCEL);
    }
    return j;
}

/* ---- ends ----------------------------------------------------------------- */

int sched_end_plan(struct server *s, const struct job *j, enum attempt_state att, int64_t exit_code,
                   int64_t signal, const char *reason, int64_t now_ms, struct sched_end *ret,
                   struct store_batch *b)
{
    struct sched_end e = {0};
    job_end_decide(j, att, exit_code, signal, reason, now_ms, &e.end);
    int rc =
        attempt_row(b, s->epoch, j->id, &j->att, att, e.end.att_reason, now_ms, exit_code, signal);
    rc = rc ? rc : cost_close(&s->cost, j, now_ms, attempt_state_name(att), b, &e.cost_micro);
    e.pending_seq = j->att.seg.pending_seq;
    rc = rc ? rc : job_end_row(b, &e.end);
    if (rc)
        return GPO_ENOMEM;
    *ret = e;
    return 0;
}

void sched_end_apply(struct server *s, const struct sched_end *e)
{
    struct sched *sc = s->sched;
    struct job *j = jobs_find(&s->jobs, e->end.job);
    if (!j || j->att.n != e->end.attempt)
        return;
    cost_end_charged(&s->cost, j, &j->att, e->end.end_ms, e->cost_micro, e->pending_seq);
    struct attempt att;
    job_end_apply(j, &e->end, &att);
    for (size_t k = 0; k < att.nparts; k++)
        nodes_changed(&s->nodes, att.parts[k].node);
    if (vec_grow((void **)&sc->ended, &sc->ended_cap, sc->nended + 1, sizeof(*sc->ended)) == 0)
        sc->ended[sc->nended++] = (struct sched_ended){e->end.job, e->end.end_ms, att};
    else
        attempt_release(&att); /* out of memory: its last stretch goes uncharged */
    sched_wake(sc, SCHED_WHY_END);
}

/* ---- charging ended attempts ---------------------------------------------- */

void sched_charge_ended(struct server *s, const struct sched_input *in)
{
    struct sched *sc = s->sched;
    const char *default_class = cluster_class_default(&s->cluster);
    for (size_t k = 0; k < sc->nended; k++) {
        struct sched_ended *e = &sc->ended[k];
        const struct job *j = jobs_find(&s->jobs, e->job);
        struct sched_job req = {0};
        char why[200];
        size_t np = e->att.nparts ? e->att.nparts : 1, ns = e->att.nshares ? e->att.nshares : 1;
        struct sched_node_part *parts = calloc(np, sizeof(*parts));
        struct sched_share *shares = calloc(ns, sizeof(*shares));
        struct sched_running run = {.job = &req, .start_ms = e->att.start_ms};
        /* Through the run table, as the simulator charges its jobs' ends. */
        if (j && parts && shares &&
            cluster_job_request(&in->view, &j->spec, j->team, default_class, &req, why,
                                sizeof(why)) == 0 &&
            sched_alloc_of(in, &e->att, parts, shares, &run.alloc)) {
            req.id = (uint64_t)j->id;
            if (sched_run_table_add(&sc->running, &run) == 0)
                (void)sched_apply_end(&sc->running, &sc->state, &in->view.c, &sc->policy, req.id,
                                      e->end_ms);
        }
        free(parts);
        free(shares);
        attempt_release(&e->att);
    }
    sc->nended = 0;
}

/* ---- idle policies ---------------------------------------------------------- */

/* Commits the kills of `acts` (the lock released meanwhile), then marks
 * them as a preemption or a cancel does; the agents stop the attempts and
 * report PREEMPTED or CANCELLED, and their ends requeue or cancel the jobs. */
static void idle_kill(struct server *s, const struct monitor_idle_act *acts, size_t n)
{
    struct store_batch *b = store_batch_new();
    int rc = b ? store_batch_set_decision(b, s->epoch) : GPO_ENOMEM;
    for (size_t k = 0; !rc && k < n; k++) {
        const struct job *j = jobs_find(&s->jobs, acts[k].job);
        enum kill_cause cause =
            acts[k].action == CLUSTER_IDLE_REQUEUE ? KILL_IDLE_REQUEUE : KILL_IDLE_CANCEL;
        rc = sched_kill_row(s, b, j, cause, acts[k].detail);
    }
    if (rc) {
        store_batch_free(b);
        fprintf(stderr, "gpuorch server: idle actions not built: out of memory\n");
        return;
    }
    if (sched_commit_unlocked(s, b, "idle actions"))
        return; /* not durable, so not done: the next tick tries again */
    for (size_t k = 0; k < n; k++) {
        struct job *j = jobs_find(&s->jobs, acts[k].job);
        if (!j || j->att.n != acts[k].attempt)
            continue; /* it ended meanwhile */
        enum kill_cause cause =
            acts[k].action == CLUSTER_IDLE_REQUEUE ? KILL_IDLE_REQUEUE : KILL_IDLE_CANCEL;
        if (sched_kill_apply(s, j, cause, acts[k].detail, s->sched->policy.preempt_grace_ms) == 0)
            monitor_idle_acted(&s->monitor, &acts[k]);
    }
}

void sched_idle_task(struct server *s, int64_t now_ms)
{
    struct monitor_idle_act *acts = NULL;
    size_t n = 0;
    if (monitor_idle_tick(&s->monitor, now_ms, &acts, &n) == 0 && n)
        idle_kill(s, acts, n);
    free(acts);
}

/*
 * loop.c - the scheduling loop's thread, its turn through the periodic tasks
 * (a table, as Redis' serverCron), and its wake-ups (sched.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "server/lead/lead.h"
#include "server/sched/sched_int.h"
#include "util/prom.h"
#include "base/banned.h"

int sched_init(struct sched *sc, int64_t pass_interval_ms, int64_t node_timeout_ms)
{
    memset(sc, 0, sizeof(*sc));
    sc->pass_interval_ms = pass_interval_ms;
    sc->node_timeout_ms = node_timeout_ms;
    sched_state_init(&sc->state);
    sched_policy_default(&sc->policy);
    sched_result_init(&sc->result);
    sched_run_table_init(&sc->running);
    /* The loop's sleeps run on the monotonic clock: a step of the wall
     * clock neither stretches nor cuts them. */
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (rc)
        return -rc;
    rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    rc = rc ? rc : pthread_cond_init(&sc->cv, &attr);
    pthread_condattr_destroy(&attr);
    return rc ? -rc : 0;
}

void sched_release(struct sched *sc)
{
    sched_state_release(&sc->state);
    sched_result_release(&sc->result);
    sched_run_table_release(&sc->running);
    for (size_t k = 0; k < sc->nended; k++)
        attempt_release(&sc->ended[k].att);
    free(sc->ended);
    sc->ended = NULL;
    sc->nended = sc->ended_cap = 0;
    pthread_cond_destroy(&sc->cv);
}

static const char *const why_names[] = {
#define SCHED_WHY_NAME(e, name) [e] = name,
    SCHED_WHY_TABLE(SCHED_WHY_NAME)
#undef SCHED_WHY_NAME
};

const char *sched_why_name(enum sched_why why)
{
    return why < SCHED_NWHY ? why_names[why] : "?";
}

void sched_wake(struct sched *sc, enum sched_why why)
{
    sc->dirty = true;
    sc->chores_dirty = true;
    sc->wants |= 1u << why;
    pthread_cond_signal(&sc->cv);
}

/* ---- the periodic tasks --------------------------------------------------- */

static void timeouts_task(struct server *s, int64_t now_ms)
{
    sched_node_timeouts(s, now_ms, srv_mono_ms(s));
}

static void budget_task(struct server *s, int64_t now_ms)
{
    cost_tick(&s->cost, now_ms);
}

static void monitor_task(struct server *s, int64_t now_ms)
{
    (void)now_ms;
    /* After the pass, at the time it ended: the queue length it left. */
    monitor_tick(&s->monitor, srv_now_ms(s));
}

static void hook_task(struct server *s, int64_t now_ms)
{
    if (s->sched->hook.run)
        s->sched->hook.run(s, now_ms);
}

/* Counts the pass by why it runs, clears the events, runs it, and keeps its
 * cost for the next gap. */
static void pass_task(struct server *s, int64_t now_ms)
{
    struct sched *sc = s->sched;
    enum sched_why why = SCHED_WHY_TIMER;
    for (int k = 0; k < SCHED_WHY_TIMER; k++)
        if (sc->wants & (1u << k)) {
            why = (enum sched_why)k;
            break;
        }
    sc->passes_by[why]++;
    sc->dirty = false;
    sc->wants = 0;
    /* Its cost is what it holds the lock or a core for: the store's
     * commit, with the lock released, does not count. */
    int64_t t0 = srv_mono_ns(s), waited = sc->commit_ns;
    sched_pass_task(s, now_ms);
    sc->pass_cost_ns = srv_mono_ns(s) - t0 - (sc->commit_ns - waited);
    sc->backlog = sc->result.nwaits > 0;
}

/* In order. Each runs under the lock; those that commit release it while
 * the store works. The chores run on their own timer, the pass when due. */
enum task_when { TASK_CHORE, TASK_HOOK, TASK_PASS };
static const struct {
    void (*run)(struct server *s, int64_t now_ms);
    enum task_when when;
} tasks[] = {
    {timeouts_task, TASK_CHORE},   /* lost nodes' attempts end before the pass */
    {sched_idle_task, TASK_CHORE}, /* requeues and cancels by teams' idle policies */
    {budget_task, TASK_CHORE},     /* alert lines */
    {hook_task, TASK_HOOK},        /* the serving runtime's reconcile: submits before the pass */
    {pass_task, TASK_PASS},        /* the scheduling pass */
    {monitor_task, TASK_CHORE},    /* queue length; minute aggregates to the store */
};
#define NTASKS (sizeof(tasks) / sizeof(tasks[0]))

void sched_turn(struct server *s, int64_t now_ms)
{
    s->sched->chores_ms = now_ms;
    s->sched->chores_dirty = false;
    for (size_t k = 0; k < NTASKS; k++)
        tasks[k].run(s, now_ms);
}

/* When a task whose last run was at at_ms is due, interval_ms later; at
 * once when at_ms is later than now: the wall clock stepped back since, and
 * waiting for it to catch up would stop the loop's timers for as long (the
 * run then takes now as its mark). */
static int64_t due_after(int64_t at_ms, int64_t interval_ms, int64_t now_ms)
{
    return at_ms > now_ms ? now_ms : at_ms + interval_ms;
}

int64_t sched_pass_due_ms(const struct sched *sc, int64_t now_ms)
{
    /* A deferred job becomes eligible at its begin time. */
    int64_t begin = sc->next_begin_ms ? sc->next_begin_ms : INT64_MAX;
    if (!sc->dirty) {
        int64_t due = due_after(sc->last_pass_ms, sc->pass_interval_ms, now_ms);
        return begin < due ? begin : due;
    }
    int64_t gap = SCHED_PASS_GAP_MAX_MS;
    if (sc->wants != 1u << SCHED_WHY_SUBMIT || !sc->backlog) {
        int64_t cost_ms = (sc->pass_cost_ns + 999999) / 1000000;
        gap = SCHED_PASS_GAP_FACTOR * cost_ms;
        gap = gap < SCHED_PASS_GAP_FLOOR_MS ? SCHED_PASS_GAP_FLOOR_MS
              : gap > SCHED_PASS_GAP_MAX_MS ? SCHED_PASS_GAP_MAX_MS
                                            : gap;
    }
    int64_t due = due_after(sc->last_pass_ms, gap, now_ms);
    return begin < due ? begin : due;
}

static int64_t chores_due_ms(const struct sched *sc, int64_t now_ms)
{
    return due_after(sc->chores_ms, sc->chores_dirty ? SCHED_PASS_GAP_MAX_MS : sc->pass_interval_ms,
                     now_ms);
}

static int64_t hook_due_ms(const struct server *s, int64_t now_ms)
{
    return s->sched->hook.due_ms ? s->sched->hook.due_ms(s, now_ms) : INT64_MAX;
}

static int64_t next_due_ms(const struct server *s, int64_t now_ms)
{
    const struct sched *sc = s->sched;
    int64_t pass = sched_pass_due_ms(sc, now_ms), chores = chores_due_ms(sc, now_ms),
            hook = hook_due_ms(s, now_ms);
    int64_t due = pass < chores ? pass : chores;
    return hook < due ? hook : due;
}

int64_t sched_tick(struct server *s, int64_t now_ms)
{
    struct sched *sc = s->sched;
    bool chores = now_ms >= chores_due_ms(sc, now_ms);
    if (chores) {
        sc->chores_ms = now_ms;
        sc->chores_dirty = false;
    }
    for (size_t k = 0; k < NTASKS; k++) {
        /* Asked again each time: a chore may have woken the loop. */
        bool due = tasks[k].when == TASK_PASS   ? now_ms >= sched_pass_due_ms(sc, now_ms)
                   : tasks[k].when == TASK_HOOK ? now_ms >= hook_due_ms(s, now_ms)
                                                : chores;
        if (due)
            tasks[k].run(s, now_ms);
    }
    return next_due_ms(s, now_ms);
}

void sched_metrics(const struct sched *sc, struct prom *p)
{
    prom_family(p, "gpuorch_sched_passes_total", PROM_COUNTER,
                "Scheduling passes run since the controller started, by what asked for each.");
    for (int k = 0; k < SCHED_NWHY; k++) {
        const char *labels[] = {"trigger", why_names[k], NULL};
        prom_sample(p, "gpuorch_sched_passes_total", labels, (double)sc->passes_by[k]);
    }
}

/* ---- the thread --------------------------------------------------------- */

static void *loop_main(void *arg)
{
    struct server *s = arg;
    struct sched *sc = s->sched;
    pthread_mutex_lock(&s->lock);
    while (!sc->stopping) {
        /* Sleep until the next due task, or an event that may bring it
         * closer (the gap, once an event is pending). */
        int64_t now = srv_now_ms(s);
        /* A controller that lost its lease hands out nothing more (the
         * main thread stops this loop soon): it only sleeps. */
        int64_t until = lead_leading(s->lead) ? next_due_ms(s, now) : now + SCHED_PASS_GAP_MAX_MS;
        if (now < until) {
            /* The condition variable waits on the monotonic clock (sched_init);
             * the server's clock may be a test's, so the wait is relative. */
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            int64_t ns = (int64_t)ts.tv_nsec + (until - now) * 1000000;
            ts.tv_sec += (time_t)(ns / 1000000000);
            ts.tv_nsec = (long)(ns % 1000000000);
            pthread_cond_timedwait(&sc->cv, &s->lock, &ts);
            continue; /* woken: look again at the events and the clock */
        }
        sched_tick(s, now);
    }
    monitor_flush_all(&s->monitor, srv_now_ms(s)); /* the open minutes too: a restart keeps them */
    /* A clean stop saves the carry-over state, so a restart loses none of it. */
    struct store_batch *b = lead_leading(s->lead) ? store_batch_new() : NULL;
    if (b && !store_batch_set_decision(b, s->epoch) && !sched_state_row(s, b, srv_now_ms(s)))
        sched_commit_unlocked(s, b, "the scheduler's state");
    else
        store_batch_free(b);
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

int sched_start(struct server *s)
{
    int rc = pthread_create(&s->sched->thread, NULL, loop_main, s);
    s->sched->started = rc == 0;
    return -rc;
}

void sched_stop(struct server *s)
{
    struct sched *sc = s->sched;
    if (!sc || !sc->started)
        return;
    pthread_mutex_lock(&s->lock);
    sc->stopping = true;
    pthread_cond_signal(&sc->cv);
    pthread_mutex_unlock(&s->lock);
    pthread_join(sc->thread, NULL);
    sc->started = false;
}

int sched_commit_unlocked(struct server *s, struct store_batch *b, const char *what)
{
    char msg[256] = "";
    if (!lead_leading(s->lead)) {
        store_batch_free(b);
        return GPO_EFENCED;
    }
    int64_t t0 = srv_mono_ns(s);
    pthread_mutex_unlock(&s->lock);
    int rc = store_commit_wait(s->store, b, NULL, 0, msg, sizeof(msg));
    pthread_mutex_lock(&s->lock);
    s->sched->commit_ns += srv_mono_ns(s) - t0;
    if (rc == GPO_EFENCED)
        lead_fenced(s->lead);
    if (rc)
        fprintf(stderr, "gpuorch server: %s not committed: %s%s%s\n", what, gpo_strerror(rc),
                msg[0] ? ": " : "", msg);
    return rc;
}

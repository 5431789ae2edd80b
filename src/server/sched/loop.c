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
#include "server/sched/sched_int.h"
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
    int rc = pthread_cond_init(&sc->cv, NULL);
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

void sched_wake(struct sched *sc)
{
    sc->dirty = true;
    pthread_cond_signal(&sc->cv);
}

/* ---- the periodic tasks --------------------------------------------------- */

static void timeouts_task(struct server *s, int64_t now_ms)
{
    sched_node_timeouts(s, now_ms);
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

/* In order, every turn. Each runs under the lock; those that commit
 * release it while the store works. */
static void (*const tasks[])(struct server *s, int64_t now_ms) = {
    timeouts_task,   /* lost nodes' attempts end before the pass */
    sched_idle_task, /* requeues and cancels by teams' idle policies */
    budget_task,     /* alert lines */
    sched_pass_task, /* the scheduling pass */
    monitor_task,    /* queue length; minute aggregates to the store */
};

void sched_turn(struct server *s, int64_t now_ms)
{
    s->sched->dirty = false;
    for (size_t k = 0; k < sizeof(tasks) / sizeof(tasks[0]); k++)
        tasks[k](s, now_ms);
}

/* ---- the thread --------------------------------------------------------- */

static void *loop_main(void *arg)
{
    struct server *s = arg;
    struct sched *sc = s->sched;
    pthread_mutex_lock(&s->lock);
    while (!sc->stopping) {
        /* Sleep until the timer, or an event once the minimum gap has passed. */
        int64_t now = srv_now_ms(s);
        int64_t until = sc->dirty ? sc->last_pass_ms + SCHED_PASS_MIN_GAP_MS
                                  : sc->last_pass_ms + sc->pass_interval_ms;
        if (sc->next_begin_ms && sc->next_begin_ms < until)
            until = sc->next_begin_ms; /* a deferred job becomes eligible */
        if (now < until) {
            /* The condition variable waits on the real clock: the server's
             * clock may be a test's, so the wait is relative. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            int64_t ns = (int64_t)ts.tv_nsec + (until - now) * 1000000;
            ts.tv_sec += (time_t)(ns / 1000000000);
            ts.tv_nsec = (long)(ns % 1000000000);
            pthread_cond_timedwait(&sc->cv, &s->lock, &ts);
            continue; /* woken: look again at the flag and the clock */
        }
        sched_turn(s, now);
    }
    monitor_flush_all(&s->monitor, srv_now_ms(s)); /* the open minutes too: a restart keeps them */
    /* A clean stop saves the carry-over state, so a restart loses none of it. */
    struct store_batch *b = store_batch_new();
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
    pthread_mutex_unlock(&s->lock);
    int rc = store_commit_wait(s->store, b, NULL, 0, msg, sizeof(msg));
    pthread_mutex_lock(&s->lock);
    if (rc)
        fprintf(stderr, "gpuorch server: %s not committed: %s%s%s\n", what, gpo_strerror(rc),
                msg[0] ? ": " : "", msg);
    return rc;
}

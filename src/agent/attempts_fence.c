/*
 * attempts_fence.c - the attempt table under a fence (attempts.h, fence.h):
 * every running attempt stopped and journaled, no launch until the fence
 * ends, and what an earlier agent fenced taken up as fenced.
 */
#include <inttypes.h>
#include <stdio.h>

#include "agent/attempts_int.h"
#include "agent/exits.h"
#include "agent/fence.h"
#include "base/banned.h"

size_t attempts_fence(struct attempts *t, const char *reason, int64_t unreached_ms,
                      int64_t grace_ms, int64_t now_ms)
{
    int64_t grace = grace_ms < t->cfg.kill_grace_ms ? grace_ms : t->cfg.kill_grace_ms;
    size_t n = 0;
    pthread_mutex_lock(&t->lock);
    t->fenced = true;
    for (size_t k = 0; k < t->n; k++) {
        struct att *a = t->v[k];
        if (a->phase != PH_RUNNING)
            continue;
        if (!a->killing) {
            /* The kill first: the journal's fsync may be slow. */
            a->fenced = true;
            snprintf(a->kill_why, sizeof(a->kill_why), "%s", reason);
            attempts_kill_start(t, a, PROTO_STATE_FAILED, grace, reason, now_ms);
            char err[256] = "";
            if (journal_fenced(t->cfg.journal, a->job, a->attempt, unreached_ms, err,
                               sizeof(err)) != 0)
                t->cfg.log("job %" PRIu64 ".%" PRIu32 ": journal: %s", a->job, a->attempt, err);
            n++;
        } else if (a->sigkill_ms && a->sigkill_ms > now_ms + grace) {
            a->sigkill_ms = now_ms + grace; /* being killed already: by the fence's time too */
        }
        /* The monitor may be blocked in a report to the controller. */
        attempts_sigkill_due(t, a, now_ms);
    }
    pthread_mutex_unlock(&t->lock);
    if (n)
        exits_wake(t->exits);
    return n;
}

size_t attempts_unfence(struct attempts *t)
{
    size_t owed = 0;
    pthread_mutex_lock(&t->lock);
    t->fenced = false;
    for (size_t k = 0; k < t->n; k++)
        owed += t->v[k]->fenced && t->v[k]->phase != PH_HELD && !t->v[k]->gone;
    pthread_mutex_unlock(&t->lock);
    exits_wake(t->exits); /* the reports, now */
    return owed;
}

void attempts_fenced_again(struct attempts *t, struct att *a, int64_t unreached_ms)
{
    (void)t;
    a->fenced = true;
    a->killing = true;
    a->kill_as = PROTO_STATE_FAILED;
    snprintf(a->kill_why, sizeof(a->kill_why), FENCE_REASON_FMT, unreached_ms / 1000);
    a->sigkill_ms = 1; /* its grace was given before the restart */
}

/*
 * end.c - what the end of an attempt does to its job (jobs.h): a decision
 * made without changing anything, then applied once its rows are committed.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/jobs/jobs.h"
#include "base/banned.h"

static bool is_failure(enum attempt_state st)
{
    return st == ATTEMPT_FAILED || st == ATTEMPT_TIMEOUT || st == ATTEMPT_NODE_FAIL;
}

/* The job's state after a failure with no retry left. */
static enum job_state final_of(enum attempt_state st)
{
    return st == ATTEMPT_TIMEOUT     ? JOB_TIMEOUT
           : st == ATTEMPT_NODE_FAIL ? JOB_NODE_FAIL
                                     : JOB_FAILED;
}

/* FAILED, TIMEOUT, NODE_FAIL (and anything unexpected): retried while the job has retries. */
static void decide_failure(const struct job *j, struct job_end *e, const char *reason)
{
    char what[64] = "";
    if (e->exit_code != STORE_NULL)
        snprintf(what, sizeof(what), " (exit %" PRId64 ")", e->exit_code);
    else if (e->signal != STORE_NULL)
        snprintf(what, sizeof(what), " (signal %" PRId64 ")", e->signal);
    bool retry = j->failures < j->spec.max_retries;
    e->job_state = retry ? JOB_PENDING : final_of(e->att_state);
    int n = snprintf(e->reason, sizeof(e->reason), "attempt %" PRId64 " %s%s%s%s", j->att.n,
                     attempt_state_name(e->att_state), what, reason && *reason ? ": " : "",
                     reason ? reason : "");
    if (retry && n > 0 && (size_t)n < sizeof(e->reason))
        snprintf(e->reason + n, sizeof(e->reason) - (size_t)n, "; retry %u of %u", j->failures + 1,
                 j->spec.max_retries);
}

void job_end_decide(const struct job *j, enum attempt_state att, int64_t exit_code, int64_t signal,
                    const char *reason, int64_t now_ms, struct job_end *ret)
{
    struct job_end e = {.job = j->id,
                        .attempt = j->att.n,
                        .att_state = att,
                        .end_ms = now_ms,
                        .exit_code = exit_code,
                        .signal = signal,
                        .failure = is_failure(att)};
    bool idle =
        (j->att.kill == KILL_IDLE_REQUEUE || j->att.kill == KILL_IDLE_CANCEL) && j->att.kill_detail;
    if (idle && (att == ATTEMPT_PREEMPTED || att == ATTEMPT_CANCELLED)) {
        /* Killed by its team's idle policy: requeued whatever the job's own
         * requeue setting, or cancelled, with the idle words. */
        const char *words = j->att.kill_detail;
        if (!reason)
            reason = words; /* the attempt's row says why too */
        if (att == ATTEMPT_PREEMPTED) {
            e.job_state = JOB_PENDING;
            snprintf(e.reason, sizeof(e.reason), "attempt %" PRId64 " requeued: %s", j->att.n,
                     words);
        } else {
            e.job_state = JOB_CANCELLED;
            snprintf(e.reason, sizeof(e.reason), "%s", words);
        }
    } else if (j->att.kill == KILL_REQUEUE) {
        /* Requeued by a user: back to the queue however the attempt ended,
         * and not one of its failures. */
        e.job_state = JOB_PENDING;
        e.failure = false;
        snprintf(e.reason, sizeof(e.reason), "attempt %" PRId64 " requeued", j->att.n);
    } else if (j->att.kill == KILL_CANCELLED || att == ATTEMPT_CANCELLED) {
        /* The controller's own cancels (a serving replica scaled down) say why. */
        e.job_state = JOB_CANCELLED;
        snprintf(e.reason, sizeof(e.reason), "cancelled%s",
                 j->att.kill == KILL_CANCELLED && j->att.kill_detail ? j->att.kill_detail : "");
    } else if (att == ATTEMPT_COMPLETED) {
        e.job_state = JOB_COMPLETED;
    } else if (att == ATTEMPT_PREEMPTED) {
        e.job_state = j->spec.requeue ? JOB_PENDING : JOB_PREEMPTED;
        snprintf(e.reason, sizeof(e.reason), "attempt %" PRId64 " preempted%s", j->att.n,
                 j->spec.requeue ? "; requeued" : "");
    } else {
        decide_failure(j, &e, reason);
    }
    snprintf(e.att_reason, sizeof(e.att_reason), "%s", reason ? reason : "");
    *ret = e;
}

void job_end_apply(struct job *j, const struct job_end *e, struct attempt *ret_att)
{
    *ret_att = j->att;
    memset(&j->att, 0, sizeof(j->att));
    j->state = e->job_state;
    j->updated_ms = e->end_ms;
    free(j->reason);
    j->reason = e->reason[0] ? strdup(e->reason) : NULL;
    j->failures += e->failure;
    if (j->state == JOB_PENDING)
        j->queued_ms = e->end_ms;
}

int job_end_row(struct store_batch *b, const struct job_end *e)
{
    return store_batch_job_update(b, e->job, job_state_name(e->job_state),
                                  e->reason[0] ? e->reason : NULL, e->end_ms, NULL)
               ? GPO_ENOMEM
               : 0;
}

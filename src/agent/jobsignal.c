/*
 * jobsignal.c - the job's warning signal before its time limit
 * (jobsignal.h).
 */
#include "agent/jobsignal.h"

#include <inttypes.h>

#include "base/banned.h"

void jobsignal_arm(struct jobsignal *js, const struct proto_spec *s, int64_t limit_ms)
{
    if (!s->signal || s->time_limit_s <= 0 || js->sent)
        return;
    js->sig = (int)s->signal;
    js->leader = s->signal_batch_only;
    js->due_ms = limit_ms - (int64_t)s->signal_before_s * 1000;
    if (js->due_ms <= 0)
        js->due_ms = 1;
}

bool jobsignal_due(const struct jobsignal *js, int64_t now)
{
    return js->due_ms && now >= js->due_ms;
}

int64_t jobsignal_next(const struct jobsignal *js, int64_t now, int64_t next)
{
    if (!js->due_ms)
        return next;
    int64_t left = js->due_ms > now ? js->due_ms - now : 0;
    return left < next ? left : next;
}

void jobsignal_send(struct jobsignal *js, struct priv *p, struct journal *j, uint64_t job,
                    uint32_t attempt, void (*log)(const char *fmt, ...))
{
    char err[256] = "";
    js->due_ms = 0;
    js->sent = true;
    int rc = priv_signal_job(p, job, attempt, js->sig, js->leader, err, sizeof(err));
    log("job %" PRIu64 ".%" PRIu32 ": signal %d to %s%s%s", job, attempt, js->sig,
        js->leader ? "the batch script" : "every process", rc ? ": " : "", rc ? err : "");
    if (journal_signalled(j, job, attempt, err, sizeof(err)))
        log("job %" PRIu64 ".%" PRIu32 ": journal: %s", job, attempt, err);
}

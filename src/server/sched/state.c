/*
 * state.c - the core's carry-over state on disk, and at start the attempts
 * that hold resources (sched.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "server/sched/sched_int.h"
#include "util/errbuf.h"
#include "base/banned.h"

char *sched_state_encode(const struct sched_state *st)
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
                 : GPO_ECORRUPT;
    for (size_t k = 0; !rc && k < json_array_size(usage); k++) {
        json_int_t team, type;
        double ms;
        rc = json_unpack(json_array_get(usage, k), "[I, I, F]", &team, &type, &ms)
                 ? GPO_ECORRUPT
                 : sched_state_add_usage(st, (uint32_t)team, (uint32_t)type, ms);
    }
    for (size_t k = 0; !rc && k < json_array_size(att); k++) {
        json_int_t job, ms;
        rc = json_unpack(json_array_get(att, k), "[I, I]", &job, &ms)
                 ? GPO_ECORRUPT
                 : sched_state_add_attained(st, (uint64_t)job, ms);
    }
    if (!rc)
        st->last_pass_ms = last;
    json_decref(o);
    return rc;
}

int sched_state_row(struct server *s, struct store_batch *b, int64_t now_ms)
{
    char *state = sched_state_encode(&s->sched->state);
    int rc =
        state ? store_batch_sched_state_put(b, s->epoch, state, strlen(state), now_ms) : GPO_ENOMEM;
    free(state);
    return rc ? GPO_ENOMEM : 0;
}

/* store_job_fn: restores the attempt that holds resources of an active job. */
static int load_attempt(void *ctx, const struct store_job *row)
{
    struct server *s = ctx;
    struct job *j = jobs_find(&s->jobs, row->id);
    if (!j || !row->nattempts)
        return 0;
    const struct store_attempt *a = &row->attempts[row->nattempts - 1];
    j->attempts = a->attempt;
    int st = attempt_state_parse(a->state);
    if (st < 0 || !attempt_state_holds((enum attempt_state)st))
        return 0;
    if (attempt_decode(a->nodes, &j->att)) {
        attempt_release(&j->att);
        return 0; /* unreadable: nothing to hold */
    }
    j->att.n = a->attempt;
    j->att.start_ms = a->start_ms;
    j->att.running = st == ATTEMPT_RUNNING;
    if (st == ATTEMPT_KILLING) {
        const char *detail = NULL;
        enum kill_cause cause = attempt_kill_parse(a->reason, &detail);
        if (attempt_kill(&j->att, cause, detail, s->sched->policy.preempt_grace_ms) == GPO_ENOMEM)
            return GPO_ENOMEM;
    }
    return 0;
}

/* Retries already used, for jobs that have failed before. */
static void load_failures(struct server *s)
{
    for (size_t k = 0; k < s->jobs.n; k++) {
        struct job *j = s->jobs.v[k];
        if (job_state_final(j->state) || j->attempts < 2)
            continue;
        struct store_job row = {0};
        if (store_job_get(s->store, j->id, &row) == 0) {
            for (size_t a = 0; a < row.nattempts; a++) {
                int st = attempt_state_parse(row.attempts[a].state);
                j->failures +=
                    st == ATTEMPT_FAILED || st == ATTEMPT_TIMEOUT || st == ATTEMPT_NODE_FAIL;
            }
        }
        store_job_release(&row);
    }
}

int sched_load(struct server *s, char *err, size_t errlen)
{
    struct store_sched_state st = {0};
    int rc = store_sched_state_get(s->store, &st);
    if (rc == 0) {
        rc = state_decode(st.blob, st.len, &s->sched->state);
        store_sched_state_release(&st);
        if (rc)
            return errbuf_set(err, errlen, rc, "store: the scheduler's state does not parse");
    } else if (rc != GPO_ENOENT) {
        return errbuf_set(err, errlen, rc, "store: the scheduler's state: %s", gpo_strerror(rc));
    }
    if ((rc = store_job_scan_active(s->store, load_attempt, s)) != 0)
        return errbuf_set(err, errlen, rc, "store: active jobs: %s", gpo_strerror(rc));
    load_failures(s);
    return 0;
}

/*
 * submit.c - a submission's rows and its jobs in memory (jobs.h).
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "server/jobs/jobs.h"
#include "base/banned.h"

void job_submit_release(struct job_submit *sub)
{
    jobspec_release(&sub->spec);
}

int job_submit_rows(const struct job_submit *sub, const char *key, struct store_batch *b)
{
    json_t *spec = jobspec_to_json(&sub->spec);
    char *text =
        spec ? json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(spec);
    int rc = text ? 0 : GPO_ENOMEM;
    for (size_t k = 0; k < sub->ntasks && !rc; k++) {
        struct store_job_insert ins = STORE_JOB_INSERT_INIT;
        ins.user_id = sub->user_id;
        ins.team = sub->spec.team;
        ins.state = job_state_name(JOB_PENDING);
        ins.submit_ms = sub->submit_ms;
        ins.spec = text;
        if (sub->spec.array.n) {
            ins.array_id = STORE_ARRAY_FIRST;
            ins.array_index = sub->spec.array.index[k];
        }
        ins.idempotency_key = k == 0 ? key : NULL;
        ins.idempotency_ttl_ms = sub->idempotency_ttl_ms;
        ins.hold = job_hold_name(sub->hold);
        rc = store_batch_job_insert(b, &ins) ? GPO_ENOMEM : 0;
    }
    /* Expired keys go as keys come: one indexed delete, usually of nothing. */
    int64_t ttl = sub->idempotency_ttl_ms ? sub->idempotency_ttl_ms : STORE_IDEMPOTENCY_TTL_MS;
    if (!rc && key && store_batch_idempotency_prune(b, sub->submit_ms - ttl))
        rc = GPO_ENOMEM;
    free(text);
    return rc;
}

/* A new job for task k of a committed submission. */
static int job_new(const struct job_submit *sub, int64_t id, int64_t array_id, size_t k,
                   struct job **ret)
{
    struct job *j = calloc(1, sizeof(*j));
    if (!j || jobspec_copy(&sub->spec, &j->spec)) {
        free(j);
        return GPO_ENOMEM;
    }
    j->id = id;
    j->user_id = sub->user_id;
    j->user = strdup(sub->user);
    j->unix_user = sub->unix_user[0] ? strdup(sub->unix_user) : NULL;
    j->team = strdup(sub->spec.team);
    j->state = JOB_PENDING;
    j->hold = sub->hold;
    j->submit_ms = j->updated_ms = sub->submit_ms;
    j->array_id = sub->ntasks > 1 || sub->spec.array.n ? array_id : STORE_NULL;
    j->array_index = sub->spec.array.n ? sub->spec.array.index[k] : STORE_NULL;
    j->est_start_ms = -1;
    j->queued_ms = sub->submit_ms;
    if (!j->user || !j->team || (sub->unix_user[0] && !j->unix_user)) {
        job_free(j);
        return GPO_ENOMEM;
    }
    int64_t begin_ms;
    job_held_back(j, sub->submit_ms, &begin_ms); /* its reason needs no pass */
    *ret = j;
    return 0;
}

int job_submit_apply(struct jobs *t, const struct job_submit *sub, const int64_t *ids, size_t n,
                     struct job **ret_first)
{
    int rc = 0;
    struct job *first = NULL;
    for (size_t k = 0; k < n && !rc; k++) {
        struct job *j;
        rc = job_new(sub, ids[k], ids[0], k, &j);
        if (!rc && (rc = jobs_add(t, j)))
            job_free(j);
        if (!rc && k == 0)
            first = j;
    }
    if (rc)
        return rc;
    *ret_first = first;
    return 0;
}

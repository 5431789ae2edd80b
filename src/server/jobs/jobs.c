/*
 * jobs.c - the job table and the jobs in it (jobs.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "base/vec.h"
#include "server/jobs/jobs.h"
#include "util/errbuf.h"
#include "util/timefmt.h"
#include "base/banned.h"

static const struct {
    const char *name;
    bool final;
} job_states[] = {
#define JOB_STATE_ROW(name, text, final) {text, final},
    JOB_STATES(JOB_STATE_ROW)
#undef JOB_STATE_ROW
};

const char *job_state_name(enum job_state s)
{
    return (unsigned)s < JOB_NSTATES ? job_states[s].name : "UNKNOWN";
}

int job_state_parse(const char *name)
{
    for (int k = 0; name && k < JOB_NSTATES; k++) {
        if (strcmp(job_states[k].name, name) == 0)
            return k;
    }
    return -1;
}

bool job_state_final(enum job_state s)
{
    return (unsigned)s < JOB_NSTATES && job_states[s].final;
}

static const struct {
    const char *stored, *wait;
} job_holds[] = {{NULL, NULL}, /* JOB_HOLD_NONE */
#define JOB_HOLD_ROW(name, stored, wait) {stored, wait},
                 JOB_HOLDS(JOB_HOLD_ROW)
#undef JOB_HOLD_ROW
};
#define NJOB_HOLDS (sizeof(job_holds) / sizeof(job_holds[0]))

const char *job_hold_name(enum job_hold h)
{
    return (unsigned)h < NJOB_HOLDS ? job_holds[h].stored : NULL;
}

int job_hold_parse(const char *stored)
{
    if (!stored)
        return JOB_HOLD_NONE;
    for (size_t k = 1; k < NJOB_HOLDS; k++) {
        if (strcmp(job_holds[k].stored, stored) == 0)
            return (int)k;
    }
    return -1;
}

const char *job_hold_wait(enum job_hold h)
{
    return (unsigned)h < NJOB_HOLDS ? job_holds[h].wait : NULL;
}

void job_free(struct job *j)
{
    if (!j)
        return;
    free(j->user);
    free(j->unix_user);
    free(j->team);
    free(j->reason);
    free(j->wait);
    jobspec_release(&j->spec);
    attempt_release(&j->att);
    free(j);
}

void job_set_wait(struct job *j, const char *text, int64_t est_start_ms)
{
    free(j->wait);
    j->wait = text ? strdup(text) : NULL;
    j->est_start_ms = est_start_ms;
}

bool job_held_back(struct job *j, int64_t now_ms, int64_t *ret_begin_ms)
{
    if (j->hold) {
        job_set_wait(j, job_hold_wait(j->hold), -1);
        *ret_begin_ms = 0;
        return true;
    }
    if (j->spec.begin <= 0 || j->spec.begin > INT64_MAX / 1000 || j->spec.begin * 1000 <= now_ms)
        return false;
    int64_t at = j->spec.begin * 1000;
    char when[TIMEFMT_RFC3339_LEN] = "", why[96];
    timefmt_rfc3339(at, when, sizeof(when));
    snprintf(why, sizeof(why), "deferred: begin time not reached (starts at %s)", when);
    job_set_wait(j, why, at);
    *ret_begin_ms = at;
    return true;
}

int job_from_row(const struct store_job *row, const char *user, struct job **ret, char *err,
                 size_t errlen)
{
    int st = job_state_parse(row->state);
    if (st < 0)
        return errbuf_set(err, errlen, GPO_EINVAL, "job %lld: unknown state '%s'",
                          (long long)row->id, row->state);
    int hold = job_hold_parse(row->hold);
    if (hold < 0)
        return errbuf_set(err, errlen, GPO_EINVAL, "job %lld: unknown hold '%s'",
                          (long long)row->id, row->hold);
    json_error_t jerr;
    json_t *spec = json_loads(row->spec, JSON_REJECT_DUPLICATES, &jerr);
    if (!spec)
        return errbuf_set(err, errlen, GPO_EINVAL, "job %lld: stored spec: %s", (long long)row->id,
                          jerr.text);
    struct job *j = calloc(1, sizeof(*j));
    if (!j) {
        json_decref(spec);
        return GPO_ENOMEM;
    }
    char msg[256];
    int rc = jobspec_decode_stored(spec, &j->spec, msg, sizeof(msg));
    json_decref(spec);
    if (rc) {
        free(j);
        return errbuf_set(err, errlen, rc, "job %lld: stored spec: %s", (long long)row->id, msg);
    }
    j->id = row->id;
    j->user_id = row->user_id;
    j->user = strdup(user ? user : "");
    j->team = strdup(row->team);
    j->reason = row->reason ? strdup(row->reason) : NULL;
    j->state = (enum job_state)st;
    j->hold = (enum job_hold)hold;
    j->submit_ms = row->submit_ms;
    j->updated_ms = row->updated_ms;
    j->array_id = row->array_id;
    j->array_index = row->array_index;
    j->est_start_ms = -1;
    j->queued_ms = row->updated_ms;
    if (!j->user || !j->team || (row->reason && !j->reason)) {
        job_free(j);
        return GPO_ENOMEM;
    }
    if (j->hold && j->state == JOB_PENDING)
        job_set_wait(j, job_hold_wait(j->hold), -1); /* before the first pass says so */
    *ret = j;
    return 0;
}

/* ---- the table ------------------------------------------------------------ */

void jobs_init(struct jobs *t)
{
    memset(t, 0, sizeof(*t));
}

void jobs_release(struct jobs *t)
{
    for (size_t k = 0; k < t->n; k++)
        job_free(t->v[k]);
    free(t->v);
    memset(t, 0, sizeof(*t));
}

size_t jobs_index(const struct jobs *t, int64_t id)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->v[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

struct job *jobs_find(const struct jobs *t, int64_t id)
{
    size_t k = jobs_index(t, id);
    return k < t->n && t->v[k]->id == id ? t->v[k] : NULL;
}

int jobs_add(struct jobs *t, struct job *j)
{
    if (t->n && t->v[t->n - 1]->id >= j->id)
        return GPO_EINVAL;
    // NOLINTNEXTLINE(bugprone-sizeof-expression): *p is a pointer (an array of them)
    if (vec_grow((void **)&t->v, &t->cap, t->n + 1, sizeof(*t->v)))
        return GPO_ENOMEM;
    t->v[t->n++] = j;
    return 0;
}

const struct job *jobs_find_live(const struct jobs *t, const char *team, const char *cls)
{
    for (size_t k = 0; k < t->n; k++) {
        const struct job *j = t->v[k];
        if (job_state_final(j->state))
            continue;
        if (team && strcmp(j->team, team) == 0)
            return j;
        if (cls && j->spec.priority && strcmp(j->spec.priority, cls) == 0)
            return j;
    }
    return NULL;
}

/* An array is inserted in one batch, so its tasks have consecutive ids from
 * array_id on: only that run of the table is read. */
size_t jobs_array_active(const struct jobs *t, int64_t array_id)
{
    size_t n = 0;
    for (size_t k = jobs_index(t, array_id); k < t->n && t->v[k]->array_id == array_id; k++)
        n += t->v[k]->att.n != 0;
    return n;
}

/* ---- GPUs in use ------------------------------------------------------------ */

static int cmp_holder(const void *a, const void *b)
{
    const struct gpu_holder *x = a, *y = b;
    int c = strcmp(x->node, y->node);
    c = c ? c : strcmp(x->uuid, y->uuid);
    return c ? c : (x->job->id > y->job->id) - (x->job->id < y->job->id);
}

int jobs_gpu_holders(const struct jobs *t, struct gpu_holder **ret, size_t *ret_n)
{
    size_t n = 0;
    for (size_t k = 0; k < t->n; k++)
        n += t->v[k]->att.n ? t->v[k]->att.nshares : 0;
    struct gpu_holder *v = calloc(n ? n : 1, sizeof(*v));
    if (!v)
        return GPO_ENOMEM;
    size_t i = 0;
    for (size_t k = 0; k < t->n; k++) {
        const struct job *j = t->v[k];
        for (size_t g = 0; j->att.n && g < j->att.nshares; g++) {
            const struct attempt_share *sh = &j->att.shares[g];
            v[i++] = (struct gpu_holder){sh->node, sh->uuid, j, sh->milli};
        }
    }
    if (n)
        qsort(v, n, sizeof(*v), cmp_holder);
    *ret = v;
    *ret_n = n;
    return 0;
}

void jobs_gpu_holders_of(const struct gpu_holder *v, size_t n, const char *node, const char *uuid,
                         size_t *lo, size_t *hi)
{
    size_t a = 0, b = n;
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        int c = strcmp(v[mid].node, node);
        c = c ? c : strcmp(v[mid].uuid, uuid);
        if (c < 0)
            a = mid + 1;
        else
            b = mid;
    }
    *lo = a;
    while (a < n && strcmp(v[a].node, node) == 0 && strcmp(v[a].uuid, uuid) == 0)
        a++;
    *hi = a;
}

uint32_t jobs_gpu_milli_in_use(const struct gpu_holder *v, size_t lo, size_t hi)
{
    uint64_t milli = 0;
    for (size_t k = lo; k < hi; k++)
        milli += v[k].milli;
    return milli > 1000 ? 1000 : (uint32_t)milli;
}

int64_t attempt_gpu_milli(const struct attempt *a)
{
    int64_t milli = 0;
    for (size_t k = 0; a->n && k < a->nshares; k++)
        milli += a->shares[k].milli;
    return milli;
}

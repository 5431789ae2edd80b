#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/srv.h"
#include "util/timefmt.h"
#include "util/banned.h"

static const struct {
    const char *name;
    bool final;
} job_states[] = {
#define SRV_JOB_STATE_ROW(name, text, final) {text, final},
    SRV_JOB_STATES(SRV_JOB_STATE_ROW)
#undef SRV_JOB_STATE_ROW
};

const char *srv_job_state_name(enum srv_job_state s)
{
    return (unsigned)s < SRV_JOB_NSTATES ? job_states[s].name : "UNKNOWN";
}

int srv_job_state_parse(const char *name)
{
    for (int k = 0; name && k < SRV_JOB_NSTATES; k++) {
        if (strcmp(job_states[k].name, name) == 0)
            return k;
    }
    return -1;
}

bool srv_job_state_final(enum srv_job_state s)
{
    return (unsigned)s < SRV_JOB_NSTATES && job_states[s].final;
}

int64_t srv_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct srv_job *srv_job_find(struct server *s, int64_t id)
{
    size_t lo = 0, hi = s->njobs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->jobs[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->njobs && s->jobs[lo]->id == id ? s->jobs[lo] : NULL;
}

int srv_job_add(struct server *s, struct srv_job *j)
{
    if (s->njobs && s->jobs[s->njobs - 1]->id >= j->id)
        return -EINVAL;
    if (s->njobs == s->jobs_cap) {
        size_t cap = s->jobs_cap ? 2 * s->jobs_cap : 1024;
        struct srv_job **v = realloc(s->jobs, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        s->jobs = v;
        s->jobs_cap = cap;
    }
    s->jobs[s->njobs++] = j;
    return 0;
}

void srv_job_free(struct srv_job *j)
{
    if (!j)
        return;
    free(j->user);
    free(j->team);
    free(j->reason);
    free(j->wait);
    jobspec_release(&j->spec);
    free(j);
}

/* Sets key to an RFC 3339 time, or null for a negative or absent one. */
static int set_time(json_t *o, const char *key, int64_t ms)
{
    char buf[TIMEFMT_RFC3339_LEN];
    if (ms < 0 || ms == STORE_NULL || timefmt_rfc3339(ms, buf, sizeof(buf)) != 0)
        return json_object_set_new(o, key, json_null());
    return json_object_set_new(o, key, json_string(buf));
}

json_t *srv_job_to_json(const struct srv_job *j)
{
    json_t *o = json_object();
    json_t *spec = jobspec_to_json(&j->spec);
    if (!o || !spec) {
        json_decref(o);
        json_decref(spec);
        return NULL;
    }
    int e = json_object_set_new(o, "id", json_integer(j->id));
    e |= json_object_set_new(o, "state", json_string(srv_job_state_name(j->state)));
    e |= json_object_set_new(o, "user", json_string(j->user));
    e |= json_object_set_new(o, "team", json_string(j->team));
    e |= set_time(o, "submitted_at", j->submit_ms);
    e |= set_time(o, "updated_at", j->updated_ms);
    if (j->array_id != STORE_NULL) {
        e |= json_object_set_new(o, "array_id", json_integer(j->array_id));
        e |= json_object_set_new(o, "array_index", json_integer(j->array_index));
    }
    e |= json_object_set_new(o, "reason", j->reason ? json_string(j->reason) : json_null());
    if (j->state == SRV_JOB_PENDING) {
        e |= json_object_set_new(o, "wait_reason", j->wait ? json_string(j->wait) : json_null());
        e |= set_time(o, "estimated_start", j->est_start_ms);
    }
    e |= json_object_set_new(o, "spec", spec);
    if (e) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int srv_job_from_row(const struct store_job *row, const char *user, struct srv_job **ret, char *err,
                     size_t errlen)
{
    int st = srv_job_state_parse(row->state);
    if (st < 0) {
        snprintf(err, errlen, "job %lld: unknown state '%s'", (long long)row->id, row->state);
        return -EINVAL;
    }
    json_error_t jerr;
    json_t *spec = json_loads(row->spec, JSON_REJECT_DUPLICATES, &jerr);
    if (!spec) {
        snprintf(err, errlen, "job %lld: stored spec: %s", (long long)row->id, jerr.text);
        return -EINVAL;
    }
    struct srv_job *j = calloc(1, sizeof(*j));
    if (!j) {
        json_decref(spec);
        return -ENOMEM;
    }
    char msg[256];
    int rc = jobspec_decode(spec, &j->spec, msg, sizeof(msg));
    json_decref(spec);
    if (rc) {
        free(j);
        snprintf(err, errlen, "job %lld: stored spec: %s", (long long)row->id, msg);
        return rc;
    }
    j->id = row->id;
    j->user_id = row->user_id;
    j->user = strdup(user ? user : "");
    j->team = strdup(row->team);
    j->reason = row->reason ? strdup(row->reason) : NULL;
    j->state = (enum srv_job_state)st;
    j->submit_ms = row->submit_ms;
    j->updated_ms = row->updated_ms;
    j->array_id = row->array_id;
    j->array_index = row->array_index;
    j->est_start_ms = -1;
    if (!j->user || !j->team || (row->reason && !j->reason)) {
        srv_job_free(j);
        return -ENOMEM;
    }
    *ret = j;
    return 0;
}

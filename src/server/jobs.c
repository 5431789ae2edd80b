#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/idle.h"
#include "server/ledger.h"
#include "server/srv.h"
#include "util/timefmt.h"
#include "base/banned.h"

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

size_t srv_job_index(const struct server *s, int64_t id)
{
    size_t lo = 0, hi = s->njobs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->jobs[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

struct srv_job *srv_job_find(struct server *s, int64_t id)
{
    size_t k = srv_job_index(s, id);
    return k < s->njobs && s->jobs[k]->id == id ? s->jobs[k] : NULL;
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
    free(j->unix_user);
    free(j->team);
    free(j->reason);
    free(j->wait);
    jobspec_release(&j->spec);
    srv_attempt_release(&j->att);
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

/* "gpu_utilization_pct" (mean over its GPUs) and "gpu_memory_used_mib" (sum)
 * from the latest samples ingest.c left on the attempt's shares; null while
 * any of its GPUs has not reported one. */
static int gpu_figures(json_t *o, const struct srv_attempt *a)
{
    int64_t util = 0, mem = 0;
    bool util_ok = a->nshares > 0, mem_ok = a->nshares > 0;
    for (size_t k = 0; k < a->nshares; k++) {
        const struct srv_share *sh = &a->shares[k];
        util_ok = util_ok && sh->sample_ms && sh->util_pct >= 0;
        mem_ok = mem_ok && sh->sample_ms && sh->mem_used_mib >= 0;
        util += sh->util_pct;
        mem += sh->mem_used_mib;
    }
    int e =
        json_object_set_new(o, "gpu_utilization_pct",
                            util_ok ? json_real((double)util / (double)a->nshares) : json_null());
    e |= json_object_set_new(o, "gpu_memory_used_mib", mem_ok ? json_integer(mem) : json_null());
    return e;
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
    e |= json_object_set_new(o, "attempts_made", json_integer(j->attempts));
    if (j->att.n) {
        json_t *gpus = json_array();
        for (size_t k = 0; gpus && k < j->att.nshares; k++)
            json_array_append_new(gpus, json_string(j->att.shares[k].uuid));
        json_t *nodes = json_array();
        for (size_t k = 0; nodes && k < j->att.nparts; k++)
            json_array_append_new(nodes, json_string(j->att.parts[k].node));
        e |= json_object_set_new(
            o, "current_attempt",
            json_pack("{s:I, s:s, s:o*, s:o*, s:b}", "attempt", (json_int_t)j->att.n, "state",
                      j->att.kill      ? "KILLING"
                      : j->att.running ? "RUNNING"
                                       : "ASSIGNED",
                      "nodes", nodes, "gpus", gpus, "borrowed", j->att.borrowed));
    }
    if (j->state == SRV_JOB_PENDING) {
        e |= json_object_set_new(o, "wait_reason", j->wait ? json_string(j->wait) : json_null());
        e |= set_time(o, "estimated_start", j->est_start_ms);
    }
    if (j->state == SRV_JOB_RUNNING)
        e |= gpu_figures(o, &j->att);
    e |= json_object_set_new(o, "idle", srv_idle_job_json(j));
    /* What its attempts cost so far, the running one to now (ledger.h). */
    e |= json_object_set_new(o, "cost", cluster_money_json(srv_ledger_job_cost(j, srv_now_ms())));
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
    j->queued_ms = row->updated_ms;
    if (!j->user || !j->team || (row->reason && !j->reason)) {
        srv_job_free(j);
        return -ENOMEM;
    }
    *ret = j;
    return 0;
}

void srv_attempt_release(struct srv_attempt *a)
{
    for (size_t k = 0; k < a->nparts; k++)
        free(a->parts[k].node);
    for (size_t k = 0; k < a->nshares; k++) {
        free(a->shares[k].node);
        free(a->shares[k].uuid);
    }
    free(a->parts);
    free(a->shares);
    free(a->kill_reason);
    memset(a, 0, sizeof(*a));
}

int srv_attempt_encode(const struct srv_attempt *a, char **ret_nodes, char **ret_gpus)
{
    json_t *parts = json_array(), *shares = json_array(), *gpus = json_array();
    bool bad = !parts || !shares || !gpus;
    for (size_t k = 0; !bad && k < a->nparts; k++)
        bad = json_array_append_new(parts, json_pack("{s:s, s:I, s:I}", "node", a->parts[k].node,
                                                     "cpus", (json_int_t)a->parts[k].cpus,
                                                     "mem_mib", (json_int_t)a->parts[k].mem_mib));
    for (size_t k = 0; !bad && k < a->nshares; k++) {
        const struct srv_share *sh = &a->shares[k];
        bad = json_array_append_new(shares,
                                    json_pack("{s:s, s:s, s:I, s:I}", "node", sh->node, "uuid",
                                              sh->uuid, "milli", (json_int_t)sh->milli, "mem_mib",
                                              (json_int_t)sh->mem_mib)) ||
              json_array_append_new(gpus, json_string(sh->uuid));
    }
    json_t *nodes = bad ? NULL : json_pack("{s:O, s:O}", "parts", parts, "shares", shares);
    char *n = nodes ? json_dumps(nodes, JSON_COMPACT) : NULL;
    char *g = n ? json_dumps(gpus, JSON_COMPACT) : NULL;
    json_decref(parts);
    json_decref(shares);
    json_decref(gpus);
    json_decref(nodes);
    if (!g) {
        free(n);
        return -ENOMEM;
    }
    *ret_nodes = n;
    *ret_gpus = g;
    return 0;
}

int srv_attempt_decode(const char *text, struct srv_attempt *a)
{
    json_t *o = text ? json_loads(text, 0, NULL) : NULL;
    json_t *parts = json_object_get(o, "parts"), *shares = json_object_get(o, "shares");
    int rc = json_is_array(parts) && json_is_array(shares) ? 0 : -EINVAL;
    size_t np = rc ? 0 : json_array_size(parts), ns = rc ? 0 : json_array_size(shares);
    a->parts = calloc(np ? np : 1, sizeof(*a->parts));
    a->shares = calloc(ns ? ns : 1, sizeof(*a->shares));
    if (!rc && (!a->parts || !a->shares))
        rc = -ENOMEM;
    for (size_t k = 0; !rc && k < np; k++) {
        const char *node = NULL;
        json_int_t cpus = 0, mem = 0;
        if (json_unpack(json_array_get(parts, k), "{s:s, s:I, s:I}", "node", &node, "cpus", &cpus,
                        "mem_mib", &mem) ||
            cpus < 0 || mem < 0 || cpus > UINT32_MAX)
            rc = -EINVAL;
        else if (!(a->parts[a->nparts].node = strdup(node)))
            rc = -ENOMEM;
        else {
            a->parts[a->nparts].cpus = (uint32_t)cpus;
            a->parts[a->nparts].mem_mib = (uint64_t)mem;
            a->nparts++;
        }
    }
    for (size_t k = 0; !rc && k < ns; k++) {
        const char *node = NULL, *uuid = NULL;
        json_int_t milli = 0, mem = 0;
        struct srv_share *sh = &a->shares[a->nshares];
        if (json_unpack(json_array_get(shares, k), "{s:s, s:s, s:I, s:I}", "node", &node, "uuid",
                        &uuid, "milli", &milli, "mem_mib", &mem) ||
            milli < 1 || milli > 1000 || mem < 0 || mem > UINT32_MAX)
            rc = -EINVAL;
        else if (!(sh->node = strdup(node)) || !(sh->uuid = strdup(uuid)))
            rc = -ENOMEM;
        else {
            sh->milli = (uint32_t)milli;
            sh->mem_mib = (uint32_t)mem;
        }
        a->nshares += rc == 0 || sh->node || sh->uuid;
    }
    json_decref(o);
    return rc;
}

int srv_attempt_row(struct store_batch *b, int64_t epoch, int64_t job, const struct srv_attempt *a,
                    const char *state, const char *reason, int64_t end_ms, int64_t exit_code,
                    int64_t signal)
{
    char *nodes = NULL, *gpus = NULL;
    if (srv_attempt_encode(a, &nodes, &gpus))
        return -ENOMEM;
    struct store_attempt_upsert up = STORE_ATTEMPT_UPSERT_INIT;
    up.job_id = job;
    up.attempt = a->n;
    up.state = state;
    up.nodes = nodes;
    up.gpus = gpus;
    up.start_ms = a->start_ms;
    up.end_ms = end_ms;
    up.exit_code = exit_code;
    up.signal = signal;
    up.reason = reason && *reason ? reason : NULL;
    up.epoch = epoch;
    int rc = store_batch_attempt_upsert(b, &up);
    free(nodes);
    free(gpus);
    return rc ? -ENOMEM : 0;
}

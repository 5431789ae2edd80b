/*
 * attempt.c - attempts: their states, the kill path, their stored form
 * (jobs.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "server/jobs/jobs.h"
#include "base/banned.h"

static const struct {
    const char *name;
    bool holds;
} attempt_states[] = {
#define ATTEMPT_STATE_ROW(name, text, holds) {text, holds},
    ATTEMPT_STATES(ATTEMPT_STATE_ROW)
#undef ATTEMPT_STATE_ROW
};

const char *attempt_state_name(enum attempt_state s)
{
    return (unsigned)s < ATTEMPT_NSTATES ? attempt_states[s].name : "UNKNOWN";
}

int attempt_state_parse(const char *name)
{
    for (int k = 0; name && k < ATTEMPT_NSTATES; k++) {
        if (strcmp(attempt_states[k].name, name) == 0)
            return k;
    }
    return -1;
}

bool attempt_state_holds(enum attempt_state s)
{
    return (unsigned)s < ATTEMPT_NSTATES && attempt_states[s].holds;
}

/* ---- kills ---------------------------------------------------------------- */

static const struct {
    const char *stored;
    bool preempted;
} kill_causes[] = {{"", false}, /* KILL_NONE */
#define KILL_CAUSE_ROW(name, stored, preempted) {stored, preempted},
                   KILL_CAUSES(KILL_CAUSE_ROW)
#undef KILL_CAUSE_ROW
};
#define NKILL_CAUSES (sizeof(kill_causes) / sizeof(kill_causes[0]))

bool kill_cause_preempts(enum kill_cause cause)
{
    return (unsigned)cause < NKILL_CAUSES && kill_causes[cause].preempted;
}

int attempt_kill(struct attempt *a, enum kill_cause cause, const char *detail, int64_t grace_ms)
{
    if (!a->n || cause == KILL_NONE || (unsigned)cause >= NKILL_CAUSES || a->kill == cause ||
        (a->kill != KILL_NONE && cause != KILL_CANCELLED))
        return GPO_ESTATE;
    char *copy = detail ? strdup(detail) : NULL;
    if (detail && !copy)
        return GPO_ENOMEM;
    a->kill = cause;
    free(a->kill_detail);
    a->kill_detail = copy;
    a->grace_ms = grace_ms;
    return 0;
}

const char *attempt_kill_reason(const struct attempt *a, char *buf, size_t len)
{
    const char *words = (unsigned)a->kill < NKILL_CAUSES ? kill_causes[a->kill].stored : "";
    snprintf(buf, len, "%s%s", words, a->kill_detail ? a->kill_detail : "");
    return buf;
}

#define IDLE_WORDS "idle: "

enum kill_cause attempt_kill_parse(const char *reason, const char **ret_detail)
{
    *ret_detail = NULL;
    if (!reason)
        return KILL_PREEMPTED;
    const char *idle = strstr(reason, IDLE_WORDS);
    if (idle) {
        *ret_detail = idle;
        return strncmp(reason, "preempted", 9) == 0 ? KILL_IDLE_REQUEUE : KILL_IDLE_CANCEL;
    }
    if (strcmp(reason, kill_causes[KILL_REQUEUE].stored) == 0)
        return KILL_REQUEUE;
    const char *cancelled = kill_causes[KILL_CANCELLED].stored;
    size_t n = strlen(cancelled);
    if (strncmp(reason, cancelled, n) != 0 || (reason[n] && reason[n] != ':'))
        return KILL_PREEMPTED;
    *ret_detail = reason[n] ? reason + n : NULL; /* ": scaled down" */
    return KILL_CANCELLED;
}

/* ---- life and stored form ----------------------------------------------------- */

void attempt_release(struct attempt *a)
{
    for (size_t k = 0; k < a->nparts; k++)
        free(a->parts[k].node);
    for (size_t k = 0; k < a->nshares; k++) {
        free(a->shares[k].node);
        free(a->shares[k].uuid);
    }
    free(a->parts);
    free(a->shares);
    free(a->kill_detail);
    memset(a, 0, sizeof(*a));
}

bool attempt_on_node(const struct attempt *a, const char *node)
{
    for (size_t k = 0; k < a->nparts; k++) {
        if (strcmp(a->parts[k].node, node) == 0)
            return true;
    }
    return false;
}

int attempt_encode(const struct attempt *a, char **ret_nodes, char **ret_gpus)
{
    json_t *parts = json_array(), *shares = json_array(), *gpus = json_array();
    bool bad = !parts || !shares || !gpus;
    for (size_t k = 0; !bad && k < a->nparts; k++)
        bad = json_array_append_new(parts, json_pack("{s:s, s:I, s:I}", "node", a->parts[k].node,
                                                     "cpus", (json_int_t)a->parts[k].cpus,
                                                     "mem_mib", (json_int_t)a->parts[k].mem_mib));
    for (size_t k = 0; !bad && k < a->nshares; k++) {
        const struct attempt_share *sh = &a->shares[k];
        json_t *e = json_pack("{s:s, s:s, s:I, s:I}", "node", sh->node, "uuid", sh->uuid, "milli",
                              (json_int_t)sh->milli, "mem_mib", (json_int_t)sh->mem_mib);
        if (e && sh->mig &&
            json_object_set_new(e, "mig",
                                json_pack("{s:s, s:I}", "profile", sh->mig_profile, "start",
                                          (json_int_t)sh->mig_start)))
            json_decref(e), e = NULL;
        bad =
            json_array_append_new(shares, e) || json_array_append_new(gpus, json_string(sh->uuid));
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
        return GPO_ENOMEM;
    }
    *ret_nodes = n;
    *ret_gpus = g;
    return 0;
}

static int decode_part(const json_t *o, struct attempt_part *ret)
{
    const char *node = NULL;
    json_int_t cpus = 0, mem = 0;
    if (json_unpack((json_t *)o, "{s:s, s:I, s:I}", "node", &node, "cpus", &cpus, "mem_mib",
                    &mem) ||
        cpus < 0 || mem < 0 || cpus > UINT32_MAX)
        return GPO_EINVAL;
    if (!(ret->node = strdup(node)))
        return GPO_ENOMEM;
    ret->cpus = (uint32_t)cpus;
    ret->mem_mib = (uint64_t)mem;
    return 0;
}

static int decode_share(const json_t *o, struct attempt_share *ret)
{
    const char *node = NULL, *uuid = NULL;
    json_int_t milli = 0, mem = 0;
    if (json_unpack((json_t *)o, "{s:s, s:s, s:I, s:I}", "node", &node, "uuid", &uuid, "milli",
                    &milli, "mem_mib", &mem) ||
        milli < 1 || milli > 1000 || mem < 0 || mem > UINT32_MAX)
        return GPO_EINVAL;
    ret->node = strdup(node);
    ret->uuid = strdup(uuid);
    if (!ret->node || !ret->uuid)
        return GPO_ENOMEM;
    ret->milli = (uint32_t)milli;
    ret->mem_mib = (uint32_t)mem;
    const json_t *mig = json_object_get(o, "mig");
    if (!mig)
        return 0;
    const char *profile = NULL;
    json_int_t start = -1;
    if (json_unpack((json_t *)mig, "{s:s, s:I}", "profile", &profile, "start", &start) ||
        start < 0 || start > 7 || strlen(profile) >= sizeof(ret->mig_profile))
        return GPO_EINVAL;
    ret->mig = true;
    ret->mig_start = (uint8_t)start;
    snprintf(ret->mig_profile, sizeof(ret->mig_profile), "%s", profile);
    return 0;
}

int attempt_decode(const char *text, struct attempt *a)
{
    json_t *o = text ? json_loads(text, 0, NULL) : NULL;
    json_t *parts = json_object_get(o, "parts"), *shares = json_object_get(o, "shares");
    int rc = json_is_array(parts) && json_is_array(shares) ? 0 : GPO_EINVAL;
    size_t np = rc ? 0 : json_array_size(parts), ns = rc ? 0 : json_array_size(shares);
    a->parts = calloc(np ? np : 1, sizeof(*a->parts));
    a->shares = calloc(ns ? ns : 1, sizeof(*a->shares));
    if (!rc && (!a->parts || !a->shares))
        rc = GPO_ENOMEM;
    for (size_t k = 0; !rc && k < np; k++) {
        rc = decode_part(json_array_get(parts, k), &a->parts[a->nparts]);
        a->nparts += rc == 0 || a->parts[a->nparts].node;
    }
    for (size_t k = 0; !rc && k < ns; k++) {
        struct attempt_share *sh = &a->shares[a->nshares];
        rc = decode_share(json_array_get(shares, k), sh);
        a->nshares += rc == 0 || sh->node || sh->uuid;
    }
    json_decref(o);
    return rc;
}

int attempt_row(struct store_batch *b, int64_t epoch, int64_t job, const struct attempt *a,
                enum attempt_state state, const char *reason, int64_t end_ms, int64_t exit_code,
                int64_t signal)
{
    char *nodes = NULL, *gpus = NULL;
    if (attempt_encode(a, &nodes, &gpus))
        return GPO_ENOMEM;
    struct store_attempt_upsert up = STORE_ATTEMPT_UPSERT_INIT;
    up.job_id = job;
    up.attempt = a->n;
    up.state = attempt_state_name(state);
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
    return rc ? GPO_ENOMEM : 0;
}

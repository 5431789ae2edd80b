/*
 * attempt.c - the assignments answer and its attempts (proto.h): a "run"
 * with its GPUs, user, spec, gang and array task, or a "kill" with its
 * grace, reason and cause.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/wire.h"
#include "util/errbuf.h"
#include "base/banned.h"

_Static_assert(sizeof(enum proto_action) == sizeof(int), "jsonv stores an enum as an int");
_Static_assert(sizeof(enum proto_kill_cause) == sizeof(int), "jsonv stores an enum as an int");

static const char *const actions[] = {
    [PROTO_ACTION_RUN] = "run", [PROTO_ACTION_KILL] = "kill", NULL};

static const char *const causes[] = {
#define CAUSE_NAME(name, text) [PROTO_KILL_##name] = text,
    PROTO_KILL_MAP(CAUSE_NAME)
#undef CAUSE_NAME
        NULL};

const char *proto_kill_cause_name(enum proto_kill_cause cause)
{
    return (unsigned)cause < ARRAY_LEN(causes) - 1 ? causes[cause] : "unknown";
}

static const struct jsonv_field share_fields[] = {
    WIRE_REQ_LINE("uuid", struct proto_share, uuid, 1, PROTO_UUID_MAX),
    WIRE_REQ("milli", JSONV_UINT32, struct proto_share, milli, 1, 1000),
    WIRE_REQ("mem_mib", JSONV_INT64, struct proto_share, mem_mib, 0, PROTO_GPU_MEM_MAX),
    WIRE_OPT_LINE("mig_uuid", struct proto_share, mig_uuid, 1, PROTO_UUID_MAX),
};

static const struct jsonv_field gang_fields[] = {
    {.name = "nodes",
     .kind = JSONV_STRINGS,
     .flags = JSONV_REQUIRED | JSONV_TEXT,
     .offset = offsetof(struct proto_gang, nodes),
     .min = 1,
     .max = PROTO_HOST_MAX,
     .max_items = PROTO_GANG_MAX,
     .count_offset = offsetof(struct proto_gang, nnodes)},
    WIRE_REQ("rank", JSONV_UINT32, struct proto_gang, rank, 0, PROTO_GANG_MAX - 1),
    WIRE_REQ_LINE("master_addr", struct proto_gang, master_addr, 1, PROTO_HOST_MAX),
    WIRE_REQ("master_port", JSONV_UINT32, struct proto_gang, master_port, 1, 65535),
};

static const struct jsonv_field step_fields[] = {
    WIRE_REQ_LINE("key", struct proto_step, key, PROTO_STEP_KEY_LEN, PROTO_STEP_KEY_LEN),
    {.name = "addrs",
     .kind = JSONV_STRINGS,
     .flags = JSONV_REQUIRED | JSONV_TEXT,
     .offset = offsetof(struct proto_step, addrs),
     .min = 1,
     .max = PROTO_STEP_ADDR_MAX,
     .max_items = PROTO_GANG_MAX,
     .count_offset = offsetof(struct proto_step, naddrs)},
};

/* An attempt as jsonv fills it: every key of either action, with presence. */
struct attempt_wire {
    int64_t job;
    uint32_t attempt;
    enum proto_action action;
    struct proto_share *gpus;
    size_t ngpus;
    char *user, *unix_user, *reason, *pool, *priority;
    struct wire_spec spec;
    struct proto_gang gang;
    int64_t array_id, array_index, grace_s;
    enum proto_kill_cause cause;
    struct proto_step step;
    bool mps;
    enum jsonv_presence p[14]; /* by enum key below */
};

/* The keys that belong to one action, for the checks between fields. */
enum key {
    K_GPUS,
    K_USER,
    K_UNIX_USER,
    K_SPEC,
    K_GANG,
    K_ARRAY_ID,
    K_ARRAY_INDEX,
    K_GRACE,
    K_REASON,
    K_AS,
    K_POOL,
    K_PRIORITY,
    K_STEP,
    K_MPS,
};
static const char *const key_names[] = {"gpus",     "user",        "unix_user", "spec",   "gang",
                                        "array_id", "array_index", "grace_s",   "reason", "as",
                                        "pool",     "priority",    "step",      "mps"};
_Static_assert(ARRAY_LEN(key_names) == K_MPS + 1, "a name per key");
_Static_assert(ARRAY_LEN(key_names) <= ARRAY_LEN(((struct attempt_wire *)0)->p),
               "a presence per key");

#define PRES(k) .presence_offset = offsetof(struct attempt_wire, p[k])

static const struct jsonv_field attempt_fields[] = {
    WIRE_REQ("job", JSONV_INT64, struct attempt_wire, job, 1, INT64_MAX),
    WIRE_REQ("attempt", JSONV_UINT32, struct attempt_wire, attempt, 1, UINT32_MAX),
    WIRE_REQ("action", JSONV_ENUM, struct attempt_wire, action, 0, 0, .choices = actions),
    WIRE_OPT("gpus", JSONV_OBJECTS, struct attempt_wire, gpus, 0, 0, .flags = JSONV_PRESENCE,
             PRES(K_GPUS), .max_items = PROTO_GPUS_MAX,
             .count_offset = offsetof(struct attempt_wire, ngpus),
             .elem_size = sizeof(struct proto_share), .sub = share_fields,
             .nsub = ARRAY_LEN(share_fields)),
    WIRE_OPT("user", JSONV_STRING, struct attempt_wire, user, 1, PROTO_NAME_MAX,
             .flags = JSONV_PRESENCE | JSONV_TEXT, PRES(K_USER)),
    WIRE_OPT("unix_user", JSONV_STRING, struct attempt_wire, unix_user, 1, PROTO_UNIX_USER_MAX,
             .flags = JSONV_NULLABLE | JSONV_PRESENCE | JSONV_TEXT, PRES(K_UNIX_USER)),
    WIRE_OPT("spec", JSONV_OBJECT, struct attempt_wire, spec, 0, 0, .flags = JSONV_PRESENCE,
             PRES(K_SPEC), .sub = wire_spec_fields, .nsub = WIRE_NSPEC_FIELDS),
    WIRE_OPT("gang", JSONV_OBJECT, struct attempt_wire, gang, 0, 0, .flags = JSONV_PRESENCE,
             PRES(K_GANG), .sub = gang_fields, .nsub = ARRAY_LEN(gang_fields)),
    WIRE_OPT("array_id", JSONV_INT64, struct attempt_wire, array_id, 1, INT64_MAX,
             .flags = JSONV_PRESENCE, PRES(K_ARRAY_ID)),
    WIRE_OPT("array_index", JSONV_INT64, struct attempt_wire, array_index, 0, PROTO_ARRAY_INDEX_MAX,
             .flags = JSONV_PRESENCE, PRES(K_ARRAY_INDEX)),
    WIRE_OPT("grace_s", JSONV_INT64, struct attempt_wire, grace_s, 0, INT32_MAX,
             .flags = JSONV_PRESENCE, PRES(K_GRACE)),
    WIRE_OPT("reason", JSONV_STRING, struct attempt_wire, reason, 0, PROTO_KILL_REASON_MAX,
             .flags = JSONV_PRESENCE, PRES(K_REASON)),
    WIRE_OPT("as", JSONV_ENUM, struct attempt_wire, cause, 0, 0, .flags = JSONV_PRESENCE,
             PRES(K_AS), .choices = causes),
    WIRE_OPT("pool", JSONV_STRING, struct attempt_wire, pool, 1, PROTO_NAME_MAX,
             .flags = JSONV_PRESENCE | JSONV_TEXT, PRES(K_POOL)),
    WIRE_OPT("priority", JSONV_STRING, struct attempt_wire, priority, 1, PROTO_SPEC_NAME_MAX,
             .flags = JSONV_PRESENCE | JSONV_TEXT, PRES(K_PRIORITY)),
    WIRE_OPT("step", JSONV_OBJECT, struct attempt_wire, step, 0, 0, .flags = JSONV_PRESENCE,
             PRES(K_STEP), .sub = step_fields, .nsub = ARRAY_LEN(step_fields)),
    WIRE_OPT("mps", JSONV_BOOL, struct attempt_wire, mps, 0, 0, .flags = JSONV_PRESENCE,
             PRES(K_MPS)),
};

struct assignments_wire {
    int64_t rev;
    char *node;
    struct attempt_wire *attempts;
    size_t nattempts;
    struct proto_mig_plan *plans;
    size_t nplans;
    struct wire_fence fence;
};

static const struct jsonv_field assignments_fields[] = {
    WIRE_REQ("rev", JSONV_INT64, struct assignments_wire, rev, 0, INT64_MAX),
    WIRE_REQ_LINE("node", struct assignments_wire, node, 1, PROTO_HOST_MAX),
    WIRE_REQ("attempts", JSONV_OBJECTS, struct assignments_wire, attempts, 0, 0,
             .max_items = PROTO_ATTEMPTS_MAX,
             .count_offset = offsetof(struct assignments_wire, nattempts),
             .elem_size = sizeof(struct attempt_wire), .sub = attempt_fields,
             .nsub = ARRAY_LEN(attempt_fields)),
    WIRE_OPT("mig_plans", JSONV_OBJECTS, struct assignments_wire, plans, 0, 0,
             .max_items = PROTO_GPUS_MAX, .count_offset = offsetof(struct assignments_wire, nplans),
             .elem_size = sizeof(struct proto_mig_plan), .sub = wire_mig_plan_fields,
             .nsub = WIRE_NMIG_PLAN_FIELDS),
    WIRE_FENCE_FIELDS(struct assignments_wire, fence),
};

/* Which keys each action requires and allows (bits of enum key). */
static const struct {
    unsigned required, allowed;
} action_keys[] = {
    [PROTO_ACTION_RUN] = {1u << K_GPUS | 1u << K_USER | 1u << K_SPEC | 1u << K_GANG,
                          1u << K_GPUS | 1u << K_USER | 1u << K_UNIX_USER | 1u << K_SPEC |
                              1u << K_GANG | 1u << K_ARRAY_ID | 1u << K_ARRAY_INDEX | 1u << K_POOL |
                              1u << K_PRIORITY | 1u << K_STEP | 1u << K_MPS},
    [PROTO_ACTION_KILL] = {1u << K_AS, 1u << K_GRACE | 1u << K_REASON | 1u << K_AS},
};

/* The rules between fields; `at` is "attempts[3]." or "". */
static int attempt_check(const struct attempt_wire *w, const char *at, char *err, size_t errlen)
{
    unsigned req = action_keys[w->action].required, allowed = action_keys[w->action].allowed;
    for (unsigned k = 0; k < ARRAY_LEN(key_names); k++) {
        bool given = w->p[k] != JSONV_ABSENT;
        if (!given && (req & 1u << k))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "missing required field '%s%s' (action '%s' needs it)", at,
                              key_names[k], actions[w->action]);
        if (given && !(allowed & 1u << k))
            return errbuf_set(err, errlen, GPO_EINVAL, "field '%s%s': not allowed with action '%s'",
                              at, key_names[k], actions[w->action]);
    }
    if ((w->p[K_ARRAY_ID] == JSONV_ABSENT) != (w->p[K_ARRAY_INDEX] == JSONV_ABSENT))
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field '%s%s': an array task has both array_id and array_index", at,
                          key_names[w->p[K_ARRAY_ID] == JSONV_ABSENT ? K_ARRAY_INDEX : K_ARRAY_ID]);
    if (w->action != PROTO_ACTION_RUN)
        return 0;
    if (w->gang.rank >= w->gang.nnodes)
        return errbuf_set(err, errlen, GPO_ERANGE,
                          "field '%sgang.rank': %u, but the gang has %zu node(s)", at, w->gang.rank,
                          w->gang.nnodes);
    if (w->p[K_STEP] != JSONV_ABSENT && w->step.naddrs != w->gang.nnodes)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field '%sstep.addrs': %zu address(es), but the gang has %zu node(s)", at,
                          w->step.naddrs, w->gang.nnodes);
    for (size_t k = 0; w->p[K_STEP] != JSONV_ABSENT && k < PROTO_STEP_KEY_LEN; k++) {
        char c = w->step.key[k];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field '%sstep.key': expected %d lowercase hex digits", at,
                              PROTO_STEP_KEY_LEN);
    }
    char path[64];
    snprintf(path, sizeof(path), "%sspec", at);
    return wire_spec_check(&w->spec, path, err, errlen);
}

/* Moves w into *ret (overwritten). 0, or GPO_ENOMEM with w unchanged. */
static int attempt_take(struct attempt_wire *w, struct proto_attempt *ret)
{
    struct proto_attempt a = {.job = (uint64_t)w->job,
                              .attempt = w->attempt,
                              .action = w->action,
                              .gpus = w->gpus,
                              .ngpus = w->ngpus,
                              .user = w->user,
                              .unix_user = w->unix_user,
                              .gang = w->gang,
                              .array_id = w->p[K_ARRAY_ID] ? w->array_id : PROTO_NONE,
                              .array_index = w->p[K_ARRAY_INDEX] ? w->array_index : PROTO_NONE,
                              .grace_s = w->p[K_GRACE] ? w->grace_s : PROTO_NONE,
                              .reason = w->reason,
                              .pool = w->pool,
                              .priority = w->priority,
                              .cause = w->cause,
                              .step = w->step,
                              .mps = w->mps};
    if (wire_spec_take(&w->spec, &a.spec) != 0)
        return GPO_ENOMEM;
    *ret = a;
    memset(w, 0, sizeof(*w));
    return 0;
}

static void shares_free(struct proto_share *v, size_t n)
{
    for (size_t k = 0; v && k < n; k++) {
        free(v[k].uuid);
        free(v[k].mig_uuid);
    }
    free(v);
}

void proto_attempt_release(struct proto_attempt *m)
{
    if (!m)
        return;
    shares_free(m->gpus, m->ngpus);
    free(m->user);
    free(m->unix_user);
    wire_spec_release(&m->spec);
    wire_free_strs(m->gang.nodes, m->gang.nnodes);
    free(m->gang.master_addr);
    free(m->step.key);
    wire_free_strs(m->step.addrs, m->step.naddrs);
    free(m->reason);
    free(m->pool);
    free(m->priority);
    memset(m, 0, sizeof(*m));
}

int proto_attempt_decode(const json_t *obj, struct proto_attempt *ret, char *err, size_t errlen)
{
    struct attempt_wire w = {0};
    int rc = jsonv_decode(obj, attempt_fields, ARRAY_LEN(attempt_fields), &w, err, errlen);
    rc = rc ? rc : attempt_check(&w, "", err, errlen);
    if (!rc && (rc = attempt_take(&w, ret)) != 0)
        errbuf_set(err, errlen, rc, "out of memory");
    if (rc)
        jsonv_release(attempt_fields, ARRAY_LEN(attempt_fields), &w);
    return rc;
}

void proto_assignments_release(struct proto_assignments *m)
{
    if (!m)
        return;
    for (size_t k = 0; m->attempts && k < m->nattempts; k++)
        proto_attempt_release(&m->attempts[k]);
    free(m->attempts);
    free(m->node);
    wire_mig_plans_free(m->mig_plans, m->nmig_plans);
    memset(m, 0, sizeof(*m));
}

int proto_assignments_decode(const json_t *obj, struct proto_assignments *ret, char *err,
                             size_t errlen)
{
    struct assignments_wire w = {0};
    int rc = jsonv_decode(obj, assignments_fields, ARRAY_LEN(assignments_fields), &w, err, errlen);
    if (rc)
        return rc;
    for (size_t k = 0; k < w.nattempts && !rc; k++) {
        char at[32];
        snprintf(at, sizeof(at), "attempts[%zu].", k);
        rc = attempt_check(&w.attempts[k], at, err, errlen);
    }
    rc = rc ? rc : wire_mig_plans_check(w.plans, w.nplans, err, errlen);
    rc = rc ? rc : wire_fence_check(&w.fence, err, errlen);
    struct proto_assignments m = {.rev = w.rev,
                                  .node = w.node,
                                  .nattempts = 0,
                                  .fence_lease_ms = w.fence.lease_ms,
                                  .fence_grace_ms = w.fence.grace_ms};
    if (!rc && w.nattempts && !(m.attempts = calloc(w.nattempts, sizeof(*m.attempts))))
        rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    for (size_t k = 0; k < w.nattempts && !rc; k++) {
        if ((rc = attempt_take(&w.attempts[k], &m.attempts[k])) != 0)
            errbuf_set(err, errlen, rc, "out of memory");
        else
            m.nattempts++;
    }
    if (rc) {
        m.node = NULL; /* still w's */
        proto_assignments_release(&m);
        jsonv_release(assignments_fields, ARRAY_LEN(assignments_fields), &w);
        return rc;
    }
    free(w.attempts); /* each one's members now belong to m */
    m.mig_plans = w.plans;
    m.nmig_plans = w.nplans;
    *ret = m;
    return 0;
}

static json_t *shares_json(struct wire_enc *e, const struct proto_attempt *m)
{
    json_t *a = e->rc ? NULL : json_array();
    if (!a)
        wire_fail(e, GPO_ENOMEM);
    for (size_t k = 0; a && !e->rc && k < m->ngpus; k++) {
        json_t *o = wire_object(e);
        wire_set(e, o, "uuid", wire_str(e, m->gpus[k].uuid));
        wire_set(e, o, "milli", wire_int(e, m->gpus[k].milli));
        wire_set(e, o, "mem_mib", wire_int(e, m->gpus[k].mem_mib));
        if (m->gpus[k].mig_uuid)
            wire_set(e, o, "mig_uuid", wire_str(e, m->gpus[k].mig_uuid));
        wire_append(e, a, o);
    }
    if (e->rc) {
        json_decref(a);
        return NULL;
    }
    return a;
}

static json_t *gang_json(struct wire_enc *e, const struct proto_gang *g)
{
    json_t *o = wire_object(e);
    wire_set(e, o, "nodes", wire_strs(e, g->nodes, g->nnodes));
    wire_set(e, o, "rank", wire_int(e, g->rank));
    wire_set(e, o, "master_addr", wire_str(e, g->master_addr));
    wire_set(e, o, "master_port", wire_int(e, g->master_port));
    if (e->rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *step_json(struct wire_enc *e, const struct proto_step *st)
{
    json_t *o = wire_object(e);
    wire_set(e, o, "key", wire_str(e, st->key));
    wire_set(e, o, "addrs", wire_strs(e, st->addrs, st->naddrs));
    if (e->rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *attempt_json(struct wire_enc *e, const struct proto_attempt *m)
{
    json_t *o = wire_object(e);
    wire_set(e, o, "job", wire_int(e, (int64_t)m->job));
    wire_set(e, o, "attempt", wire_int(e, m->attempt));
    if ((unsigned)m->action > PROTO_ACTION_KILL || (unsigned)m->cause >= ARRAY_LEN(causes) - 1)
        wire_fail(e, GPO_EINVAL);
    if (e->rc) {
        json_decref(o);
        return NULL;
    }
    wire_set(e, o, "action", wire_str(e, actions[m->action]));
    if (m->action == PROTO_ACTION_KILL) {
        if (m->grace_s != PROTO_NONE)
            wire_set(e, o, "grace_s", wire_int(e, m->grace_s));
        if (m->reason)
            wire_set(e, o, "reason", wire_str(e, m->reason));
        wire_set(e, o, "as", wire_str(e, causes[m->cause]));
    } else {
        wire_set(e, o, "gpus", shares_json(e, m));
        wire_set(e, o, "user", wire_str(e, m->user));
        wire_set(e, o, "unix_user", wire_str_or_null(e, m->unix_user));
        wire_set(e, o, "spec", wire_spec_json(e, &m->spec));
        wire_set(e, o, "gang", gang_json(e, &m->gang));
        if (m->array_id != PROTO_NONE) {
            wire_set(e, o, "array_id", wire_int(e, m->array_id));
            wire_set(e, o, "array_index", wire_int(e, m->array_index));
        }
        if (m->step.key)
            wire_set(e, o, "step", step_json(e, &m->step));
        if (m->pool)
            wire_set(e, o, "pool", wire_str(e, m->pool));
        if (m->priority)
            wire_set(e, o, "priority", wire_str(e, m->priority));
        if (m->mps) /* absent means false */
            wire_set(e, o, "mps", json_true());
    }
    if (e->rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int proto_attempt_encode(const struct proto_attempt *m, json_t **ret)
{
    struct wire_enc e = {0};
    json_t *o = attempt_json(&e, m);
    return wire_done(&e, o, ret);
}

int proto_assignments_encode(const struct proto_assignments *m, json_t **ret)
{
    struct wire_enc e = {0};
    json_t *o = wire_object(&e), *list = e.rc ? NULL : json_array();
    if (!list)
        wire_fail(&e, GPO_ENOMEM);
    for (size_t k = 0; list && !e.rc && k < m->nattempts; k++)
        wire_append(&e, list, attempt_json(&e, &m->attempts[k]));
    wire_set(&e, o, "rev", wire_int(&e, m->rev));
    wire_set(&e, o, "node", wire_str(&e, m->node));
    wire_set(&e, o, "attempts", list);
    if (m->nmig_plans)
        wire_set(&e, o, "mig_plans", wire_mig_plans_json(&e, m->mig_plans, m->nmig_plans));
    wire_fence_put(&e, o, m->fence_lease_ms, m->fence_grace_ms);
    return wire_done(&e, o, ret);
}

/*
 * cluster_json.c - the configured objects' JSON: strict decoding through
 * util/jsonv tables, the rules jsonv cannot express (name shapes, GPU
 * amounts, unique quotas and GPUs, a member's team), and encoding.
 *
 * The "id" entry comes first in every table: the API form decodes with the
 * table less that entry, which makes jsonv refuse "id" as an unknown field.
 * Teams and nodes decode into private wire structs first: GPU amounts arrive
 * as JSON numbers (doubles) and become milli-GPU, and defaults that are not
 * zero (a quota's or a GPU's -1) are applied from jsonv's presence records,
 * since jsonv starts array elements zeroed.
 */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "cluster/cluster.h"
#include "cluster/cluster_int.h"
#include "util/jsonv.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- decode and encode helpers ----------------------------------------- */

/* jsonv into dst with the whole table (stored form) or without its leading
 * "id" entry (API form). */
static int decode_table(const json_t *obj, unsigned flags, const struct jsonv_field *fields,
                        size_t n, void *dst, char *err, size_t errlen)
{
    if (flags & ~(unsigned)CLUSTER_STORED)
        return errbuf_set(err, errlen, GPO_EINVAL, "cluster: unknown decode flags %#x", flags);
    bool stored = flags & CLUSTER_STORED;
    int rc = jsonv_decode(obj, stored ? fields : fields + 1, stored ? n : n - 1, dst, err, errlen);
    return rc == 0 ? 0 : rc == GPO_ENOMEM ? GPO_ENOMEM : GPO_EINVAL;
}

/* Sets key to v (taken; NULL means a failed allocation): false on failure. */
static bool put(json_t *o, const char *key, json_t *v)
{
    return v && json_object_set_new(o, key, v) == 0;
}

static bool put_id(json_t *o, uint32_t id, unsigned flags)
{
    return !(flags & CLUSTER_STORED) || put(o, "id", json_integer(id));
}

static bool put_gpus(json_t *o, const char *key, int64_t milli)
{
    if (milli == -1 || milli % SCHED_MILLI == 0)
        return put(o, key, json_integer(milli == -1 ? -1 : milli / SCHED_MILLI));
    return put(o, key, json_real((double)milli / SCHED_MILLI));
}

static json_t *finish(json_t *o, bool ok)
{
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

#define FIELD(key, kind_, type, member, lo, hi, ...)                                               \
    {                                                                                              \
        .name = key, .kind = kind_, .offset = offsetof(type, member), .min = lo, .max = hi,        \
        __VA_ARGS__                                                                                \
    }
#define REQUIRED(key, kind_, type, member, lo, hi, ...)                                            \
    FIELD(key, kind_, type, member, lo, hi, .flags = JSONV_REQUIRED, __VA_ARGS__)
#define ID_FIELD(type) REQUIRED("id", JSONV_UINT32, type, id, 1, UINT32_MAX)

/* ---- pools ------------------------------------------------------------- */

static const struct jsonv_field node_features_fields[] = {
    REQUIRED("node", JSONV_STRING, struct cluster_node_features, node, 1, CLUSTER_HOST_MAX),
    REQUIRED("features", JSONV_STRINGS, struct cluster_node_features, features, 1,
             CLUSTER_FEATURE_MAX, .max_items = SCHED_MAX_FEATURES,
             .count_offset = offsetof(struct cluster_node_features, nfeatures)),
};

/* By enum cluster_sharing. */
static const char *const sharing_names[] = {"none", "mps", NULL};
_Static_assert(sizeof(enum cluster_sharing) == sizeof(int), "jsonv stores an enum as an int");

/* A pool as decoded: its "mig" arrives as JSON (cluster_mig_decode). */
struct pool_wire {
    struct cluster_pool p;
    json_t *mig; /* borrowed from the body */
};

static const struct jsonv_field pool_fields[] = {
    REQUIRED("id", JSONV_UINT32, struct pool_wire, p.id, 1, UINT32_MAX),
    REQUIRED("name", JSONV_STRING, struct pool_wire, p.name, 1, CLUSTER_NAME_MAX),
    FIELD("description", JSONV_STRING, struct pool_wire, p.description, 0, CLUSTER_DESC_MAX),
    FIELD("sharing", JSONV_ENUM, struct pool_wire, p.sharing, 0, 0, .choices = sharing_names),
    FIELD("aliases", JSONV_STRINGS, struct pool_wire, p.aliases, 1, CLUSTER_NAME_MAX,
          .max_items = CLUSTER_ALIASES_MAX, .count_offset = offsetof(struct pool_wire, p.naliases)),
    FIELD("node_features", JSONV_OBJECTS, struct pool_wire, p.node_features, 0, 0,
          .max_items = CLUSTER_NODE_FEATURES_MAX,
          .count_offset = offsetof(struct pool_wire, p.nnode_features),
          .elem_size = sizeof(struct cluster_node_features), .sub = node_features_fields,
          .nsub = ARRAY_LEN(node_features_fields)),
    FIELD("mig", JSONV_RAW, struct pool_wire, mig, 0, 0, .flags = JSONV_NULLABLE),
};

int cluster_pool_check(const struct cluster_pool *p, char *err, size_t errlen)
{
    if (!p)
        return errbuf_set(err, errlen, GPO_EINVAL, "no pool");
    int rc = cluster_check_name("name", p->name, err, errlen);
    rc = rc ? rc : cluster_check_desc(p->description, err, errlen);
    if (!rc && (unsigned)p->sharing > CLUSTER_SHARING_MPS)
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'sharing': expected none or mps");
    return rc ? rc : cluster_pool_check_extra(p, err, errlen);
}

int cluster_pool_decode(const json_t *obj, unsigned flags, struct cluster_pool *ret, char *err,
                        size_t errlen)
{
    struct pool_wire w = {0};
    int rc = decode_table(obj, flags, pool_fields, ARRAY_LEN(pool_fields), &w, err, errlen);
    rc = rc ? rc : cluster_pool_check(&w.p, err, errlen);
    rc = rc ? rc : cluster_mig_decode(w.mig, "mig", &w.p.mig, err, errlen);
    if (rc) {
        cluster_pool_release(&w.p);
        return rc;
    }
    *ret = w.p;
    return 0;
}

json_t *cluster_pool_to_json(const struct cluster_pool *p, unsigned flags)
{
    json_t *o = json_object();
    bool ok = o && put_id(o, p->id, flags) && put(o, "name", json_string(p->name)) &&
              (!p->description || put(o, "description", json_string(p->description))) &&
              /* Always, so that a file saying "none" applies as unchanged. */
              (unsigned)p->sharing <= CLUSTER_SHARING_MPS &&
              put(o, "sharing", json_string(sharing_names[p->sharing])) &&
              cluster_pool_extra_json(p, o) == 0 &&
              (p->mig.mode == CLUSTER_MIG_OFF || put(o, "mig", cluster_mig_to_json(&p->mig)));
    return finish(o, ok);
}

void cluster_pool_release(struct cluster_pool *p)
{
    if (!p)
        return;
    cluster_pool_extra_release(p);
    cluster_mig_release(&p->mig);
    free(p->name);
    free(p->description);
    memset(p, 0, sizeof(*p));
}

/* ---- priority classes -------------------------------------------------- */

static const struct jsonv_field class_fields[] = {
    ID_FIELD(struct cluster_class),
    REQUIRED("name", JSONV_STRING, struct cluster_class, name, 1, CLUSTER_NAME_MAX),
    REQUIRED("order", JSONV_INT64, struct cluster_class, order, -CLUSTER_ORDER_MAX,
             CLUSTER_ORDER_MAX),
    FIELD("may_preempt", JSONV_BOOL, struct cluster_class, may_preempt, 0, 0),
    FIELD("description", JSONV_STRING, struct cluster_class, description, 0, CLUSTER_DESC_MAX),
};

int cluster_class_check(const struct cluster_class *c, char *err, size_t errlen)
{
    if (!c)
        return errbuf_set(err, errlen, GPO_EINVAL, "no priority class");
    int rc = cluster_check_name("name", c->name, err, errlen);
    rc = rc ? rc
            : cluster_check_range("order", c->order, -CLUSTER_ORDER_MAX, CLUSTER_ORDER_MAX, err,
                                  errlen);
    return rc ? rc : cluster_check_desc(c->description, err, errlen);
}

int cluster_class_decode(const json_t *obj, unsigned flags, struct cluster_class *ret, char *err,
                         size_t errlen)
{
    struct cluster_class c = {0};
    int rc = decode_table(obj, flags, class_fields, ARRAY_LEN(class_fields), &c, err, errlen);
    rc = rc ? rc : cluster_class_check(&c, err, errlen);
    if (rc) {
        cluster_class_release(&c);
        return rc;
    }
    *ret = c;
    return 0;
}

json_t *cluster_class_to_json(const struct cluster_class *c, unsigned flags)
{
    json_t *o = json_object();
    bool ok = o && put_id(o, c->id, flags) && put(o, "name", json_string(c->name)) &&
              put(o, "order", json_integer(c->order)) &&
              put(o, "may_preempt", json_boolean(c->may_preempt)) &&
              (!c->description || put(o, "description", json_string(c->description)));
    return finish(o, ok);
}

void cluster_class_release(struct cluster_class *c)
{
    if (!c)
        return;
    free(c->name);
    free(c->description);
    memset(c, 0, sizeof(*c));
}

/* ---- teams ------------------------------------------------------------- */

struct quota_wire {
    char *pool, *gpu_type;
    double guaranteed, borrow_limit;
    enum jsonv_presence borrow_limit_p;
};

struct team_wire {
    uint32_t id;
    char *name;
    uint32_t weight;
    double borrow_limit;
    struct quota_wire *quotas;
    size_t nquotas;
    json_t *budget; /* borrowed: cluster_budget_decode's */
    json_t *idle;   /* borrowed: cluster_idle_decode's */
};

static const struct jsonv_field quota_fields[] = {
    REQUIRED("pool", JSONV_STRING, struct quota_wire, pool, 1, CLUSTER_NAME_MAX),
    FIELD("gpu_type", JSONV_STRING, struct quota_wire, gpu_type, 1, CLUSTER_NAME_MAX),
    REQUIRED("guaranteed", JSONV_DOUBLE, struct quota_wire, guaranteed, 0, 0, .dmin = 0,
             .dmax = CLUSTER_GPUS_MAX),
    FIELD("borrow_limit", JSONV_DOUBLE, struct quota_wire, borrow_limit, 0, 0, .dmin = -1,
          .dmax = CLUSTER_GPUS_MAX, .flags = JSONV_PRESENCE,
          .presence_offset = offsetof(struct quota_wire, borrow_limit_p)),
};

static const struct jsonv_field team_fields[] = {
    ID_FIELD(struct team_wire),
    REQUIRED("name", JSONV_STRING, struct team_wire, name, 1, CLUSTER_NAME_MAX),
    FIELD("weight", JSONV_UINT32, struct team_wire, weight, 1, CLUSTER_WEIGHT_MAX),
    FIELD("borrow_limit", JSONV_DOUBLE, struct team_wire, borrow_limit, 0, 0, .dmin = -1,
          .dmax = CLUSTER_GPUS_MAX),
    FIELD("quotas", JSONV_OBJECTS, struct team_wire, quotas, 0, 0, .max_items = CLUSTER_QUOTAS_MAX,
          .count_offset = offsetof(struct team_wire, nquotas),
          .elem_size = sizeof(struct quota_wire), .sub = quota_fields,
          .nsub = ARRAY_LEN(quota_fields)),
    FIELD("budget", JSONV_RAW, struct team_wire, budget, 0, 0),
    FIELD("idle", JSONV_RAW, struct team_wire, idle, 0, 0),
};

static const char *type_or_any(const char *type, char buf[JSONV_QUOTE_MAX + 16])
{
    char q[JSONV_QUOTE_MAX + 4];
    if (!type)
        return "any GPU type";
    snprintf(buf, JSONV_QUOTE_MAX + 16, "GPU type '%s'", cluster_quote(type, q));
    return buf;
}

static int check_quota(const struct cluster_team *t, size_t i, char *err, size_t errlen)
{
    const struct cluster_quota *q = &t->quotas[i];
    char f[64], a[JSONV_QUOTE_MAX + 4], b[JSONV_QUOTE_MAX + 16];
    int rc;
    snprintf(f, sizeof(f), "quotas[%zu].pool", i);
    if ((rc = cluster_check_name(f, q->pool, err, errlen)))
        return rc;
    snprintf(f, sizeof(f), "quotas[%zu].gpu_type", i);
    if (q->gpu_type && (rc = cluster_check_type(f, q->gpu_type, err, errlen)))
        return rc;
    snprintf(f, sizeof(f), "quotas[%zu].guaranteed", i);
    if ((rc = cluster_check_milli(f, q->guaranteed_milli, false, err, errlen)))
        return rc;
    snprintf(f, sizeof(f), "quotas[%zu].borrow_limit", i);
    if ((rc = cluster_check_milli(f, q->borrow_limit_milli, true, err, errlen)))
        return rc;
    for (size_t j = 0; j < i; j++) {
        const struct cluster_quota *p = &t->quotas[j];
        bool same_type = p->gpu_type && q->gpu_type ? strcmp(p->gpu_type, q->gpu_type) == 0
                                                    : !p->gpu_type && !q->gpu_type;
        if (strcmp(p->pool, q->pool) == 0 && same_type)
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'quotas[%zu]': a second quota for pool '%s' and %s (the first "
                              "is quotas[%zu])",
                              i, cluster_quote(q->pool, a), type_or_any(q->gpu_type, b), j);
    }
    return 0;
}

int cluster_team_check(const struct cluster_team *t, char *err, size_t errlen)
{
    if (!t)
        return errbuf_set(err, errlen, GPO_EINVAL, "no team");
    int rc = cluster_check_name("name", t->name, err, errlen);
    rc = rc ? rc : cluster_check_range("weight", t->weight, 1, CLUSTER_WEIGHT_MAX, err, errlen);
    rc = rc ? rc : cluster_check_milli("borrow_limit", t->borrow_limit_milli, true, err, errlen);
    if (rc)
        return rc;
    if (t->nquotas > CLUSTER_QUOTAS_MAX || (t->nquotas && !t->quotas))
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'quotas': %zu items, at most %d allowed",
                          t->nquotas, CLUSTER_QUOTAS_MAX);
    for (size_t i = 0; i < t->nquotas && rc == 0; i++)
        rc = check_quota(t, i, err, errlen);
    rc = rc ? rc : cluster_idle_check(&t->idle, err, errlen);
    return rc ? rc : cluster_budget_check(&t->budget, err, errlen);
}

/* Moves the wire's strings into *t, converting GPU amounts. */
static int team_from_wire(struct team_wire *w, struct cluster_team *t, char *err, size_t errlen)
{
    *t = (struct cluster_team){.id = w->id, .weight = w->weight};
    int rc = cluster_gpus_to_milli("borrow_limit", w->borrow_limit, true, &t->borrow_limit_milli,
                                   err, errlen);
    if (rc)
        return rc;
    if (w->nquotas && !(t->quotas = calloc(w->nquotas, sizeof(*t->quotas))))
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    for (size_t i = 0; i < w->nquotas; i++) {
        struct quota_wire *qw = &w->quotas[i];
        struct cluster_quota *q = &t->quotas[i];
        char f[64];
        snprintf(f, sizeof(f), "quotas[%zu].guaranteed", i);
        rc = cluster_gpus_to_milli(f, qw->guaranteed, false, &q->guaranteed_milli, err, errlen);
        snprintf(f, sizeof(f), "quotas[%zu].borrow_limit", i);
        q->borrow_limit_milli = -1;
        if (rc == 0 && qw->borrow_limit_p == JSONV_GIVEN)
            rc = cluster_gpus_to_milli(f, qw->borrow_limit, true, &q->borrow_limit_milli, err,
                                       errlen);
        if (rc)
            return rc;
    }
    /* Nothing fails from here: the strings change hands. */
    t->name = w->name;
    w->name = NULL;
    for (size_t i = 0; i < w->nquotas; i++) {
        t->quotas[i].pool = w->quotas[i].pool;
        t->quotas[i].gpu_type = w->quotas[i].gpu_type;
        w->quotas[i].pool = w->quotas[i].gpu_type = NULL;
    }
    t->nquotas = w->nquotas;
    return 0;
}

int cluster_team_decode(const json_t *obj, unsigned flags, struct cluster_team *ret, char *err,
                        size_t errlen)
{
    struct team_wire w = {.weight = 1, .borrow_limit = -1};
    struct cluster_team t = {0};
    int rc = decode_table(obj, flags, team_fields, ARRAY_LEN(team_fields), &w, err, errlen);
    rc = rc ? rc : team_from_wire(&w, &t, err, errlen);
    rc = rc ? rc : cluster_budget_decode(w.budget, &t.budget, err, errlen);
    rc = rc ? rc : cluster_idle_decode(w.idle, &t.idle, err, errlen);
    rc = rc ? rc : cluster_team_check(&t, err, errlen);
    jsonv_release(team_fields, ARRAY_LEN(team_fields), &w);
    if (rc) {
        cluster_team_release(&t);
        return rc;
    }
    *ret = t;
    return 0;
}

json_t *cluster_team_to_json(const struct cluster_team *t, unsigned flags)
{
    json_t *o = json_object(), *quotas = json_array();
    bool ok = o && quotas && put_id(o, t->id, flags) && put(o, "name", json_string(t->name)) &&
              put(o, "weight", json_integer(t->weight)) &&
              put_gpus(o, "borrow_limit", t->borrow_limit_milli);
    for (size_t i = 0; ok && i < t->nquotas; i++) {
        const struct cluster_quota *q = &t->quotas[i];
        json_t *e = json_object();
        ok = e && json_array_append_new(quotas, e) == 0 && put(e, "pool", json_string(q->pool)) &&
             (!q->gpu_type || put(e, "gpu_type", json_string(q->gpu_type))) &&
             put_gpus(e, "guaranteed", q->guaranteed_milli) &&
             put_gpus(e, "borrow_limit", q->borrow_limit_milli);
    }
    if (ok)
        ok = put(o, "quotas", quotas); /* takes quotas, also on failure */
    else
        json_decref(quotas);
    ok = ok && (!t->budget.set || put(o, "budget", cluster_budget_to_json(&t->budget)));
    ok = ok && put(o, "idle", cluster_idle_to_json(&t->idle));
    return finish(o, ok);
}

void cluster_team_release(struct cluster_team *t)
{
    if (!t)
        return;
    cluster_budget_release(&t->budget);
    for (size_t i = 0; t->quotas && i < t->nquotas; i++) {
        free(t->quotas[i].pool);
        free(t->quotas[i].gpu_type);
    }
    free(t->quotas);
    free(t->name);
    memset(t, 0, sizeof(*t));
}

/* ---- users ------------------------------------------------------------- */

static const char *const role_names[] = {[CLUSTER_ROLE_ADMIN] = "admin",
                                         [CLUSTER_ROLE_MEMBER] = "member",
                                         [CLUSTER_ROLE_METRICS] = "metrics",
                                         NULL};

static const struct jsonv_field user_fields[] = {
    ID_FIELD(struct cluster_user),
    REQUIRED("name", JSONV_STRING, struct cluster_user, name, 1, CLUSTER_NAME_MAX),
    REQUIRED("unix_user", JSONV_STRING, struct cluster_user, unix_user, 1, CLUSTER_UNIX_USER_MAX),
    FIELD("team", JSONV_STRING, struct cluster_user, team, 1, CLUSTER_NAME_MAX),
    FIELD("role", JSONV_ENUM, struct cluster_user, role, 0, 0, .choices = role_names),
};

_Static_assert(sizeof(enum cluster_role) == sizeof(int), "jsonv stores an enum as an int");
_Static_assert(sizeof(enum cluster_node_state) == sizeof(int), "jsonv stores an enum as an int");

const char *cluster_role_name(enum cluster_role role)
{
    return (unsigned)role <= CLUSTER_ROLE_METRICS ? role_names[role] : "unknown";
}

int cluster_user_check(const struct cluster_user *u, char *err, size_t errlen)
{
    if (!u)
        return errbuf_set(err, errlen, GPO_EINVAL, "no user");
    int rc = cluster_check_name("name", u->name, err, errlen);
    rc = rc ? rc
            : cluster_check_shape(cluster_unix_user_valid, LOGIN_RULE, "Unix login name",
                                  "unix_user", u->unix_user, err, errlen);
    rc = rc || !u->team ? rc : cluster_check_name("team", u->team, err, errlen);
    if (rc)
        return rc;
    if ((unsigned)u->role > CLUSTER_ROLE_METRICS)
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'role': %d is not a role", (int)u->role);
    if (u->role == CLUSTER_ROLE_MEMBER && !u->team)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "missing required field 'team' (role 'member' needs a team)");
    return 0;
}

int cluster_user_decode(const json_t *obj, unsigned flags, struct cluster_user *ret, char *err,
                        size_t errlen)
{
    struct cluster_user u = {.role = CLUSTER_ROLE_MEMBER};
    int rc = decode_table(obj, flags, user_fields, ARRAY_LEN(user_fields), &u, err, errlen);
    rc = rc ? rc : cluster_user_check(&u, err, errlen);
    if (rc) {
        cluster_user_release(&u);
        return rc;
    }
    *ret = u;
    return 0;
}

json_t *cluster_user_to_json(const struct cluster_user *u, unsigned flags)
{
    json_t *o = json_object();
    bool ok = o && put_id(o, u->id, flags) && put(o, "name", json_string(u->name)) &&
              put(o, "unix_user", json_string(u->unix_user)) &&
              (!u->team || put(o, "team", json_string(u->team))) &&
              put(o, "role", json_string(cluster_role_name(u->role)));
    return finish(o, ok);
}

void cluster_user_release(struct cluster_user *u)
{
    if (!u)
        return;
    free(u->name);
    free(u->unix_user);
    free(u->team);
    memset(u, 0, sizeof(*u));
}

/* ---- nodes ------------------------------------------------------------- */

struct gpu_wire {
    struct cluster_gpu g;
    enum jsonv_presence nvlink_p;
};

struct node_wire {
    struct cluster_node n; /* all but its gpus */
    struct gpu_wire *gpus;
    size_t ngpus;
    json_t *mig; /* borrowed from the body: cluster_node_mig_decode */
};

static const char *const state_names[] = {[CLUSTER_NODE_UP] = "up",
                                          [CLUSTER_NODE_DRAINING] = "draining",
                                          [CLUSTER_NODE_DOWN] = "down",
                                          NULL};

static const struct jsonv_field mig_instance_fields[] = {
    REQUIRED("profile_id", JSONV_UINT32, struct cluster_mig_instance, profile_id, 0, 63),
    FIELD("profile", JSONV_STRING, struct cluster_mig_instance, profile, 1, CLUSTER_NAME_MAX),
    REQUIRED("start", JSONV_UINT32, struct cluster_mig_instance, start, 0, 7),
    REQUIRED("gi_id", JSONV_UINT32, struct cluster_mig_instance, gi_id, 0, UINT32_MAX),
    REQUIRED("ci_id", JSONV_INT64, struct cluster_mig_instance, ci_id, -1, UINT32_MAX),
    FIELD("uuid", JSONV_STRING, struct cluster_mig_instance, uuid, 1, CLUSTER_UUID_MAX),
};

static const struct jsonv_field gpu_fields[] = {
    REQUIRED("index", JSONV_UINT32, struct gpu_wire, g.index, 0, SCHED_MAX_GPUS_PER_NODE - 1),
    REQUIRED("uuid", JSONV_STRING, struct gpu_wire, g.uuid, 1, CLUSTER_UUID_MAX),
    REQUIRED("gpu_type", JSONV_STRING, struct gpu_wire, g.gpu_type, 1, CLUSTER_NAME_MAX),
    REQUIRED("mem_mib", JSONV_UINT32, struct gpu_wire, g.mem_mib, 1, CLUSTER_GPU_MEM_MAX),
    FIELD("nvlink_domain", JSONV_INT64, struct gpu_wire, g.nvlink_domain, -1, INT32_MAX,
          .flags = JSONV_PRESENCE, .presence_offset = offsetof(struct gpu_wire, nvlink_p)),
    FIELD("mig_slices", JSONV_UINT32, struct gpu_wire, g.mig_slices, 0, CLUSTER_MIG_SLICES_MAX),
    FIELD("mig_enabled", JSONV_BOOL, struct gpu_wire, g.mig_enabled, 0, 0),
    FIELD("mig_pending", JSONV_BOOL, struct gpu_wire, g.mig_pending, 0, 0),
    FIELD("mig", JSONV_OBJECTS, struct gpu_wire, g.mig, 0, 0, .max_items = CLUSTER_MIG_SLICES_MAX,
          .count_offset = offsetof(struct gpu_wire, g.nmig),
          .elem_size = sizeof(struct cluster_mig_instance), .sub = mig_instance_fields,
          .nsub = ARRAY_LEN(mig_instance_fields)),
};

static const struct jsonv_field node_fields[] = {
    REQUIRED("id", JSONV_UINT32, struct node_wire, n.id, 1, UINT32_MAX),
    REQUIRED("name", JSONV_STRING, struct node_wire, n.name, 1, CLUSTER_HOST_MAX),
    REQUIRED("pool", JSONV_STRING, struct node_wire, n.pool, 1, CLUSTER_NAME_MAX),
    REQUIRED("cpus", JSONV_UINT32, struct node_wire, n.cpus, 1, CLUSTER_NODE_CPUS_MAX),
    REQUIRED("mem_mib", JSONV_INT64, struct node_wire, n.mem_mib, 1, CLUSTER_NODE_MEM_MAX),
    FIELD("state", JSONV_ENUM, struct node_wire, n.state, 0, 0, .choices = state_names),
    FIELD("addr", JSONV_STRING, struct node_wire, n.addr, 1, CLUSTER_HOST_MAX),
    FIELD("log_port", JSONV_UINT32, struct node_wire, n.log_port, 0, 65535),
    FIELD("gpus", JSONV_OBJECTS, struct node_wire, gpus, 0, 0, .max_items = SCHED_MAX_GPUS_PER_NODE,
          .count_offset = offsetof(struct node_wire, ngpus), .elem_size = sizeof(struct gpu_wire),
          .sub = gpu_fields, .nsub = ARRAY_LEN(gpu_fields)),
    FIELD("mig", JSONV_RAW, struct node_wire, mig, 0, 0, .flags = JSONV_NULLABLE),
};

const char *cluster_node_state_name(enum cluster_node_state state)
{
    return (unsigned)state <= CLUSTER_NODE_DOWN ? state_names[state] : "unknown";
}

static int check_gpu(const struct cluster_node *n, size_t i, char *err, size_t errlen)
{
    const struct cluster_gpu *g = &n->gpus[i];
    char f[64], q[JSONV_QUOTE_MAX + 4];
    int rc;
    snprintf(f, sizeof(f), "gpus[%zu].index", i);
    if ((rc = cluster_check_range(f, g->index, 0, SCHED_MAX_GPUS_PER_NODE - 1, err, errlen)))
        return rc;
    snprintf(f, sizeof(f), "gpus[%zu].uuid", i);
    if ((rc = cluster_check_shape(cluster_uuid_valid, UUID_RULE, "GPU UUID", f, g->uuid, err,
                                  errlen)))
        return rc;
    snprintf(f, sizeof(f), "gpus[%zu].gpu_type", i);
    if ((rc = cluster_check_type(f, g->gpu_type, err, errlen)))
        return rc;
    if (i > 0 && strcmp(g->gpu_type, n->gpus[0].gpu_type) != 0) {
        char q2[JSONV_QUOTE_MAX + 4];
        return errbuf_set(
            err, errlen, GPO_EINVAL,
            "field '%s': '%s' differs from gpus[0]'s '%s' (a node's GPUs are of one type)", f,
            cluster_quote(g->gpu_type, q), cluster_quote(n->gpus[0].gpu_type, q2));
    }
    snprintf(f, sizeof(f), "gpus[%zu].mem_mib", i);
    if ((rc = cluster_check_range(f, g->mem_mib, 1, CLUSTER_GPU_MEM_MAX, err, errlen)))
        return rc;
    snprintf(f, sizeof(f), "gpus[%zu].nvlink_domain", i);
    if ((rc = cluster_check_range(f, g->nvlink_domain, -1, INT32_MAX, err, errlen)))
        return rc;
    snprintf(f, sizeof(f), "gpus[%zu].mig_slices", i);
    if ((rc = cluster_check_range(f, g->mig_slices, 0, CLUSTER_MIG_SLICES_MAX, err, errlen)))
        return rc;
    if (g->mig_enabled && g->mig_slices == 0)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'gpus[%zu].mig_enabled': MIG is on but mig_slices is 0", i);
    if (g->nmig > CLUSTER_MIG_SLICES_MAX)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'gpus[%zu].mig': %zu instances, at most %d allowed", i, g->nmig,
                          CLUSTER_MIG_SLICES_MAX);
    for (size_t k = 0; k < g->nmig; k++) {
        if (g->mig[k].start > 7)
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'gpus[%zu].mig[%zu].start': %u is not a slot (0 to 7)", i, k,
                              g->mig[k].start);
        for (size_t j = 0; j < k; j++)
            if (g->mig[j].start == g->mig[k].start)
                return errbuf_set(err, errlen, GPO_EINVAL,
                                  "field 'gpus[%zu].mig[%zu].start': slot %u is also mig[%zu]'s", i,
                                  k, g->mig[k].start, j);
    }
    for (size_t j = 0; j < i; j++) {
        if (n->gpus[j].index == g->index)
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'gpus[%zu].index': %u is also gpus[%zu]'s", i, g->index, j);
        if (strcmp(n->gpus[j].uuid, g->uuid) == 0)
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'gpus[%zu].uuid': '%s' is also gpus[%zu]'s", i,
                              cluster_quote(g->uuid, q), j);
    }
    return 0;
}

int cluster_node_check(const struct cluster_node *n, char *err, size_t errlen)
{
    if (!n)
        return errbuf_set(err, errlen, GPO_EINVAL, "no node");
    int rc = cluster_check_shape(cluster_host_valid, HOST_RULE, "host name", "name", n->name, err,
                                 errlen);
    rc = rc ? rc : cluster_check_name("pool", n->pool, err, errlen);
    rc = rc ? rc : cluster_check_range("cpus", n->cpus, 1, CLUSTER_NODE_CPUS_MAX, err, errlen);
    rc = rc ? rc : cluster_check_range("mem_mib", n->mem_mib, 1, CLUSTER_NODE_MEM_MAX, err, errlen);
    rc = rc ? rc
            : cluster_check_range("state", (int64_t)n->state, 0, CLUSTER_NODE_DOWN, err, errlen);
    if (!rc && n->addr)
        rc = cluster_check_shape(cluster_addr_valid, ADDR_RULE, "address", "addr", n->addr, err,
                                 errlen);
    rc = rc ? rc : cluster_check_range("log_port", n->log_port, 0, 65535, err, errlen);
    if (rc)
        return rc;
    if (n->ngpus > SCHED_MAX_GPUS_PER_NODE || (n->ngpus && !n->gpus))
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'gpus': %zu items, at most %d allowed",
                          n->ngpus, SCHED_MAX_GPUS_PER_NODE);
    for (size_t i = 0; i < n->ngpus && rc == 0; i++)
        rc = check_gpu(n, i, err, errlen);
    return rc;
}

int cluster_node_decode(const json_t *obj, unsigned flags, struct cluster_node *ret, char *err,
                        size_t errlen)
{
    struct node_wire w = {.n.state = CLUSTER_NODE_UP};
    int rc = decode_table(obj, flags, node_fields, ARRAY_LEN(node_fields), &w, err, errlen);
    if (rc)
        return rc;
    struct cluster_node n = w.n;
    n.gpus = NULL;
    n.ngpus = 0;
    if (w.ngpus && !(n.gpus = calloc(w.ngpus, sizeof(*n.gpus)))) {
        jsonv_release(node_fields, ARRAY_LEN(node_fields), &w);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < w.ngpus; i++) {
        n.gpus[i] = w.gpus[i].g;
        if (w.gpus[i].nvlink_p != JSONV_GIVEN)
            n.gpus[i].nvlink_domain = -1;
    }
    n.ngpus = w.ngpus;
    free(w.gpus); /* its strings now belong to n */
    rc = cluster_node_check(&n, err, errlen);
    rc = rc ? rc : cluster_node_mig_decode(w.mig, &n.mig, err, errlen);
    if (rc) {
        cluster_node_release(&n);
        return rc;
    }
    *ret = n;
    return 0;
}

/* A GPU's MIG instances as stored (a new array, or NULL). */
static json_t *mig_to_json(const struct cluster_gpu *g)
{
    json_t *a = json_array();
    bool ok = a != NULL;
    for (size_t k = 0; ok && k < g->nmig; k++) {
        const struct cluster_mig_instance *m = &g->mig[k];
        json_t *e = json_object();
        ok = e && json_array_append_new(a, e) == 0 &&
             put(e, "profile_id", json_integer(m->profile_id)) &&
             (!m->profile || put(e, "profile", json_string(m->profile))) &&
             put(e, "start", json_integer(m->start)) && put(e, "gi_id", json_integer(m->gi_id)) &&
             put(e, "ci_id", json_integer(m->ci_id)) &&
             (!m->uuid || put(e, "uuid", json_string(m->uuid)));
    }
    if (!ok) {
        json_decref(a);
        return NULL;
    }
    return a;
}

void cluster_gpu_mig_clear(struct cluster_gpu *g)
{
    for (size_t k = 0; g->mig && k < g->nmig; k++) {
        free(g->mig[k].profile);
        free(g->mig[k].uuid);
    }
    free(g->mig);
    g->mig = NULL;
    g->nmig = 0;
}

json_t *cluster_node_to_json(const struct cluster_node *n, unsigned flags)
{
    json_t *o = json_object(), *gpus = json_array();
    bool ok = o && gpus && put_id(o, n->id, flags) && put(o, "name", json_string(n->name)) &&
              put(o, "pool", json_string(n->pool)) && put(o, "cpus", json_integer(n->cpus)) &&
              put(o, "mem_mib", json_integer(n->mem_mib)) &&
              put(o, "state", json_string(cluster_node_state_name(n->state))) &&
              (!n->addr || put(o, "addr", json_string(n->addr))) &&
              (!n->log_port || put(o, "log_port", json_integer(n->log_port))) &&
              (!n->mig || put(o, "mig", cluster_mig_to_json(n->mig)));
    for (size_t i = 0; ok && i < n->ngpus; i++) {
        const struct cluster_gpu *g = &n->gpus[i];
        json_t *e = json_object();
        ok = e && json_array_append_new(gpus, e) == 0 && put(e, "index", json_integer(g->index)) &&
             put(e, "uuid", json_string(g->uuid)) && put(e, "gpu_type", json_string(g->gpu_type)) &&
             put(e, "mem_mib", json_integer(g->mem_mib)) &&
             put(e, "nvlink_domain", json_integer(g->nvlink_domain)) &&
             put(e, "mig_slices", json_integer(g->mig_slices)) &&
             put(e, "mig_enabled", json_boolean(g->mig_enabled)) &&
             (!g->mig_pending || put(e, "mig_pending", json_true())) &&
             (!g->nmig || put(e, "mig", mig_to_json(g)));
    }
    if (ok)
        ok = put(o, "gpus", gpus); /* takes gpus, also on failure */
    else
        json_decref(gpus);
    return finish(o, ok);
}

void cluster_node_release(struct cluster_node *n)
{
    if (!n)
        return;
    for (size_t i = 0; n->gpus && i < n->ngpus; i++) {
        free(n->gpus[i].uuid);
        free(n->gpus[i].gpu_type);
        cluster_gpu_mig_clear(&n->gpus[i]);
    }
    free(n->gpus);
    free(n->name);
    free(n->pool);
    free(n->addr);
    cluster_mig_release(n->mig);
    free(n->mig);
    memset(n, 0, sizeof(*n));
}

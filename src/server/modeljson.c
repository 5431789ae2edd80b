/*
 * modeljson.c - the configured objects' JSON: strict decoding through
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
#include <arpa/inet.h>
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
#include "server/model.h"
#include "util/jsonv.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define MILLI_MAX    ((int64_t)MODEL_GPUS_MAX * SCHED_MILLI)

#define NAME_RULE "1 to 63 bytes of a-z, 0-9, '-', '_' and '.', starting with a letter or digit"
#define TYPE_RULE                                                                                  \
    "1 to 63 bytes of letters, digits, '-', '_' and '.', starting with a letter or digit"
#define HOST_RULE                                                                                  \
    "labels of 1 to 63 letters, digits and '-' (not at either end) joined by '.', at most 253 "    \
    "bytes"
#define LOGIN_RULE "[a-z_][a-z0-9_-]*, at most 32 bytes"
#define UUID_RULE  "'GPU-' and 8-4-4-4-12 hex digits, or 'MIG-' and its instance id"

/* ---- name shapes ------------------------------------------------------- */

static bool is_lower_or_digit(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool is_alnum(char c)
{
    return is_lower_or_digit(c) || (c >= 'A' && c <= 'Z');
}

static bool is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool model_name_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > MODEL_NAME_MAX || !is_lower_or_digit(s[0]))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!is_lower_or_digit(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    return true;
}

bool model_gpu_type_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > MODEL_NAME_MAX || !is_alnum(s[0]))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    return true;
}

bool model_host_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > MODEL_HOST_MAX)
        return false;
    size_t label = 0; /* length of the current label */
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == '.') {
            if (label < 1 || label > 63 || s[i - 1] == '-')
                return false;
            label = 0;
        } else if (is_alnum(s[i]) || (s[i] == '-' && label > 0)) {
            label++;
        } else {
            return false;
        }
    }
    return true;
}

bool model_unix_user_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > MODEL_UNIX_USER_MAX || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!is_lower_or_digit(s[i]) && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

static bool uuid_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n > 4 && n <= MODEL_UUID_MAX && strncmp(s, "MIG-", 4) == 0) {
        for (size_t i = 4; i < n; i++)
            if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '/')
                return false;
        return true;
    }
    if (n != 40 || strncmp(s, "GPU-", 4) != 0)
        return false;
    for (size_t i = 4; i < n; i++) {
        bool dash = i == 12 || i == 17 || i == 22 || i == 27; /* 8-4-4-4-12 after "GPU-" */
        if (dash ? s[i] != '-' : !is_hex(s[i]))
            return false;
    }
    return true;
}

#define ADDR_RULE "a host name, or an IPv4 or IPv6 address literal"

/* Where the controller reaches a node's agent. */
static bool addr_valid(const char *s)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return model_host_valid(s) || inet_pton(AF_INET, s, buf) == 1 ||
           inet_pton(AF_INET6, s, buf) == 1;
}

/* Shape checks with the message decode gives. `field` is the path. */
static int check_shape(bool (*valid)(const char *), const char *rule, const char *what,
                       const char *field, const char *s, char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    if (!s)
        return errbuf_set(err, errlen, GPO_EINVAL, "missing required field '%s'", field);
    if (!valid(s))
        return errbuf_set(err, errlen, GPO_EINVAL, "field '%s': '%s' is not a valid %s (%s)", field,
                          model_quote(s, q), what, rule);
    return 0;
}

static int check_name(const char *field, const char *s, char *err, size_t errlen)
{
    return check_shape(model_name_valid, NAME_RULE, "name", field, s, err, errlen);
}

static int check_type(const char *field, const char *s, char *err, size_t errlen)
{
    return check_shape(model_gpu_type_valid, TYPE_RULE, "GPU type", field, s, err, errlen);
}

static int check_desc(const char *s, char *err, size_t errlen)
{
    if (s && strlen(s) > MODEL_DESC_MAX)
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'description': longer than %d bytes",
                          MODEL_DESC_MAX);
    return 0;
}

static int check_range(const char *field, int64_t v, int64_t lo, int64_t hi, char *err,
                       size_t errlen)
{
    if (v < lo || v > hi)
        return errbuf_set(err, errlen, GPO_EINVAL, "field '%s': %lld is out of range %lld..%lld",
                          field, (long long)v, (long long)lo, (long long)hi);
    return 0;
}

/* A milli-GPU amount built by hand: 0..MILLI_MAX, or -1 where none_ok. */
static int check_milli(const char *field, int64_t v, bool none_ok, char *err, size_t errlen)
{
    if ((v == -1 && none_ok) || (v >= 0 && v <= MILLI_MAX))
        return 0;
    return errbuf_set(err, errlen, GPO_EINVAL,
                      "field '%s': %lld milli-GPU is out of range (%s0..%d GPUs)", field,
                      (long long)v, none_ok ? "-1 or " : "", MODEL_GPUS_MAX);
}

/* A JSON number of GPUs (at most 3 decimals) as milli-GPU; -1 where none_ok. */
static int gpus_to_milli(const char *field, double x, bool none_ok, int64_t *ret, char *err,
                         size_t errlen)
{
    if (x == -1 && none_ok) {
        *ret = -1;
        return 0;
    }
    if (x < 0)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field '%s': %.10g is neither -1 (no limit) nor >= 0", field, x);
    double scaled = x * SCHED_MILLI;
    long long m = llround(scaled);
    if (fabs(scaled - (double)m) > 1e-6)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field '%s': %.10g has more than 3 decimals (GPUs count in thousandths)",
                          field, x);
    *ret = m;
    return 0;
}

/* ---- decode and encode helpers ----------------------------------------- */

/* jsonv into dst with the whole table (stored form) or without its leading
 * "id" entry (API form). */
static int decode_table(const json_t *obj, unsigned flags, const struct jsonv_field *fields,
                        size_t n, void *dst, char *err, size_t errlen)
{
    if (flags & ~(unsigned)MODEL_STORED)
        return errbuf_set(err, errlen, GPO_EINVAL, "model: unknown decode flags %#x", flags);
    bool stored = flags & MODEL_STORED;
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
    return !(flags & MODEL_STORED) || put(o, "id", json_integer(id));
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

static const struct jsonv_field pool_fields[] = {
    ID_FIELD(struct model_pool),
    REQUIRED("name", JSONV_STRING, struct model_pool, name, 1, MODEL_NAME_MAX),
    FIELD("description", JSONV_STRING, struct model_pool, description, 0, MODEL_DESC_MAX),
};

int model_pool_check(const struct model_pool *p, char *err, size_t errlen)
{
    if (!p)
        return errbuf_set(err, errlen, GPO_EINVAL, "no pool");
    int rc = check_name("name", p->name, err, errlen);
    return rc ? rc : check_desc(p->description, err, errlen);
}

int model_pool_decode(const json_t *obj, unsigned flags, struct model_pool *ret, char *err,
                      size_t errlen)
{
    struct model_pool p = {0};
    int rc = decode_table(obj, flags, pool_fields, ARRAY_LEN(pool_fields), &p, err, errlen);
    rc = rc ? rc : model_pool_check(&p, err, errlen);
    if (rc) {
        model_pool_release(&p);
        return rc;
    }
    *ret = p;
    return 0;
}

json_t *model_pool_to_json(const struct model_pool *p, unsigned flags)
{
    json_t *o = json_object();
    bool ok = o && put_id(o, p->id, flags) && put(o, "name", json_string(p->name)) &&
              (!p->description || put(o, "description", json_string(p->description)));
    return finish(o, ok);
}

void model_pool_release(struct model_pool *p)
{
    if (!p)
        return;
    free(p->name);
    free(p->description);
    memset(p, 0, sizeof(*p));
}

/* ---- priority classes -------------------------------------------------- */

static const struct jsonv_field class_fields[] = {
    ID_FIELD(struct model_class),
    REQUIRED("name", JSONV_STRING, struct model_class, name, 1, MODEL_NAME_MAX),
    REQUIRED("order", JSONV_INT64, struct model_class, order, -MODEL_ORDER_MAX, MODEL_ORDER_MAX),
    FIELD("may_preempt", JSONV_BOOL, struct model_class, may_preempt, 0, 0),
    FIELD("description", JSONV_STRING, struct model_class, description, 0, MODEL_DESC_MAX),
};

int model_class_check(const struct model_class *c, char *err, size_t errlen)
{
    if (!c)
        return errbuf_set(err, errlen, GPO_EINVAL, "no priority class");
    int rc = check_name("name", c->name, err, errlen);
    rc = rc ? rc : check_range("order", c->order, -MODEL_ORDER_MAX, MODEL_ORDER_MAX, err, errlen);
    return rc ? rc : check_desc(c->description, err, errlen);
}

int model_class_decode(const json_t *obj, unsigned flags, struct model_class *ret, char *err,
                       size_t errlen)
{
    struct model_class c = {0};
    int rc = decode_table(obj, flags, class_fields, ARRAY_LEN(class_fields), &c, err, errlen);
    rc = rc ? rc : model_class_check(&c, err, errlen);
    if (rc) {
        model_class_release(&c);
        return rc;
    }
    *ret = c;
    return 0;
}

json_t *model_class_to_json(const struct model_class *c, unsigned flags)
{
    json_t *o = json_object();
    bool ok = o && put_id(o, c->id, flags) && put(o, "name", json_string(c->name)) &&
              put(o, "order", json_integer(c->order)) &&
              put(o, "may_preempt", json_boolean(c->may_preempt)) &&
              (!c->description || put(o, "description", json_string(c->description)));
    return finish(o, ok);
}

void model_class_release(struct model_class *c)
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
    json_t *budget; /* borrowed: model_budget_decode's */
    json_t *idle;   /* borrowed: model_idle_decode's */
};

static const struct jsonv_field quota_fields[] = {
    REQUIRED("pool", JSONV_STRING, struct quota_wire, pool, 1, MODEL_NAME_MAX),
    FIELD("gpu_type", JSONV_STRING, struct quota_wire, gpu_type, 1, MODEL_NAME_MAX),
    REQUIRED("guaranteed", JSONV_DOUBLE, struct quota_wire, guaranteed, 0, 0, .dmin = 0,
             .dmax = MODEL_GPUS_MAX),
    FIELD("borrow_limit", JSONV_DOUBLE, struct quota_wire, borrow_limit, 0, 0, .dmin = -1,
          .dmax = MODEL_GPUS_MAX, .flags = JSONV_PRESENCE,
          .presence_offset = offsetof(struct quota_wire, borrow_limit_p)),
};

static const struct jsonv_field team_fields[] = {
    ID_FIELD(struct team_wire),
    REQUIRED("name", JSONV_STRING, struct team_wire, name, 1, MODEL_NAME_MAX),
    FIELD("weight", JSONV_UINT32, struct team_wire, weight, 1, MODEL_WEIGHT_MAX),
    FIELD("borrow_limit", JSONV_DOUBLE, struct team_wire, borrow_limit, 0, 0, .dmin = -1,
          .dmax = MODEL_GPUS_MAX),
    FIELD("quotas", JSONV_OBJECTS, struct team_wire, quotas, 0, 0, .max_items = MODEL_QUOTAS_MAX,
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
    snprintf(buf, JSONV_QUOTE_MAX + 16, "GPU type '%s'", model_quote(type, q));
    return buf;
}

static int check_quota(const struct model_team *t, size_t i, char *err, size_t errlen)
{
    const struct model_quota *q = &t->quotas[i];
    char f[64], a[JSONV_QUOTE_MAX + 4], b[JSONV_QUOTE_MAX + 16];
    int rc;
    snprintf(f, sizeof(f), "quotas[%zu].pool", i);
    if ((rc = check_name(f, q->pool, err, errlen)))
        return rc;
    snprintf(f, sizeof(f), "quotas[%zu].gpu_type", i);
    if (q->gpu_type && (rc = check_type(f, q->gpu_type, err, errlen)))
        return rc;
    snprintf(f, sizeof(f), "quotas[%zu].guaranteed", i);
    if ((rc = check_milli(f, q->guaranteed_milli, false, err, errlen)))
        return rc;
    snprintf(f, sizeof(f), "quotas[%zu].borrow_limit", i);
    if ((rc = check_milli(f, q->borrow_limit_milli, true, err, errlen)))
        return rc;
    for (size_t j = 0; j < i; j++) {
        const struct model_quota *p = &t->quotas[j];
        bool same_type = p->gpu_type && q->gpu_type ? strcmp(p->gpu_type, q->gpu_type) == 0
                                                    : !p->gpu_type && !q->gpu_type;
        if (strcmp(p->pool, q->pool) == 0 && same_type)
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'quotas[%zu]': a second quota for pool '%s' and %s (the first "
                              "is quotas[%zu])",
                              i, model_quote(q->pool, a), type_or_any(q->gpu_type, b), j);
    }
    return 0;
}

int model_team_check(const struct model_team *t, char *err, size_t errlen)
{
    if (!t)
        return errbuf_set(err, errlen, GPO_EINVAL, "no team");
    int rc = check_name("name", t->name, err, errlen);
    rc = rc ? rc : check_range("weight", t->weight, 1, MODEL_WEIGHT_MAX, err, errlen);
    rc = rc ? rc : check_milli("borrow_limit", t->borrow_limit_milli, true, err, errlen);
    if (rc)
        return rc;
    if (t->nquotas > MODEL_QUOTAS_MAX || (t->nquotas && !t->quotas))
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'quotas': %zu items, at most %d allowed",
                          t->nquotas, MODEL_QUOTAS_MAX);
    for (size_t i = 0; i < t->nquotas && rc == 0; i++)
        rc = check_quota(t, i, err, errlen);
    rc = rc ? rc : model_idle_check(&t->idle, err, errlen);
    return rc ? rc : model_budget_check(&t->budget, err, errlen);
}

/* Moves the wire's strings into *t, converting GPU amounts. */
static int team_from_wire(struct team_wire *w, struct model_team *t, char *err, size_t errlen)
{
    *t = (struct model_team){.id = w->id, .weight = w->weight};
    int rc =
        gpus_to_milli("borrow_limit", w->borrow_limit, true, &t->borrow_limit_milli, err, errlen);
    if (rc)
        return rc;
    if (w->nquotas && !(t->quotas = calloc(w->nquotas, sizeof(*t->quotas))))
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    for (size_t i = 0; i < w->nquotas; i++) {
        struct quota_wire *qw = &w->quotas[i];
        struct model_quota *q = &t->quotas[i];
        char f[64];
        snprintf(f, sizeof(f), "quotas[%zu].guaranteed", i);
        rc = gpus_to_milli(f, qw->guaranteed, false, &q->guaranteed_milli, err, errlen);
        snprintf(f, sizeof(f), "quotas[%zu].borrow_limit", i);
        q->borrow_limit_milli = -1;
        if (rc == 0 && qw->borrow_limit_p == JSONV_GIVEN)
            rc = gpus_to_milli(f, qw->borrow_limit, true, &q->borrow_limit_milli, err, errlen);
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

int model_team_decode(const json_t *obj, unsigned flags, struct model_team *ret, char *err,
                      size_t errlen)
{
    struct team_wire w = {.weight = 1, .borrow_limit = -1};
    struct model_team t = {0};
    int rc = decode_table(obj, flags, team_fields, ARRAY_LEN(team_fields), &w, err, errlen);
    rc = rc ? rc : team_from_wire(&w, &t, err, errlen);
    rc = rc ? rc : model_budget_decode(w.budget, &t.budget, err, errlen);
    rc = rc ? rc : model_idle_decode(w.idle, &t.idle, err, errlen);
    rc = rc ? rc : model_team_check(&t, err, errlen);
    jsonv_release(team_fields, ARRAY_LEN(team_fields), &w);
    if (rc) {
        model_team_release(&t);
        return rc;
    }
    *ret = t;
    return 0;
}

json_t *model_team_to_json(const struct model_team *t, unsigned flags)
{
    json_t *o = json_object(), *quotas = json_array();
    bool ok = o && quotas && put_id(o, t->id, flags) && put(o, "name", json_string(t->name)) &&
              put(o, "weight", json_integer(t->weight)) &&
              put_gpus(o, "borrow_limit", t->borrow_limit_milli);
    for (size_t i = 0; ok && i < t->nquotas; i++) {
        const struct model_quota *q = &t->quotas[i];
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
    ok = ok && (!t->budget.set || put(o, "budget", model_budget_to_json(&t->budget)));
    ok = ok && put(o, "idle", model_idle_to_json(&t->idle));
    return finish(o, ok);
}

void model_team_release(struct model_team *t)
{
    if (!t)
        return;
    model_budget_release(&t->budget);
    for (size_t i = 0; t->quotas && i < t->nquotas; i++) {
        free(t->quotas[i].pool);
        free(t->quotas[i].gpu_type);
    }
    free(t->quotas);
    free(t->name);
    memset(t, 0, sizeof(*t));
}

/* ---- users ------------------------------------------------------------- */

static const char *const role_names[] = {
    [MODEL_ROLE_ADMIN] = "admin", [MODEL_ROLE_MEMBER] = "member", NULL};

static const struct jsonv_field user_fields[] = {
    ID_FIELD(struct model_user),
    REQUIRED("name", JSONV_STRING, struct model_user, name, 1, MODEL_NAME_MAX),
    REQUIRED("unix_user", JSONV_STRING, struct model_user, unix_user, 1, MODEL_UNIX_USER_MAX),
    FIELD("team", JSONV_STRING, struct model_user, team, 1, MODEL_NAME_MAX),
    FIELD("role", JSONV_ENUM, struct model_user, role, 0, 0, .choices = role_names),
};

_Static_assert(sizeof(enum model_role) == sizeof(int), "jsonv stores an enum as an int");
_Static_assert(sizeof(enum model_node_state) == sizeof(int), "jsonv stores an enum as an int");

const char *model_role_name(enum model_role role)
{
    return (unsigned)role <= MODEL_ROLE_MEMBER ? role_names[role] : "unknown";
}

int model_user_check(const struct model_user *u, char *err, size_t errlen)
{
    if (!u)
        return errbuf_set(err, errlen, GPO_EINVAL, "no user");
    int rc = check_name("name", u->name, err, errlen);
    rc = rc ? rc
            : check_shape(model_unix_user_valid, LOGIN_RULE, "Unix login name", "unix_user",
                          u->unix_user, err, errlen);
    rc = rc || !u->team ? rc : check_name("team", u->team, err, errlen);
    if (rc)
        return rc;
    if ((unsigned)u->role > MODEL_ROLE_MEMBER)
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'role': %d is not a role", (int)u->role);
    if (u->role == MODEL_ROLE_MEMBER && !u->team)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "missing required field 'team' (role 'member' needs a team)");
    return 0;
}

int model_user_decode(const json_t *obj, unsigned flags, struct model_user *ret, char *err,
                      size_t errlen)
{
    struct model_user u = {.role = MODEL_ROLE_MEMBER};
    int rc = decode_table(obj, flags, user_fields, ARRAY_LEN(user_fields), &u, err, errlen);
    rc = rc ? rc : model_user_check(&u, err, errlen);
    if (rc) {
        model_user_release(&u);
        return rc;
    }
    *ret = u;
    return 0;
}

json_t *model_user_to_json(const struct model_user *u, unsigned flags)
{
    json_t *o = json_object();
    bool ok = o && put_id(o, u->id, flags) && put(o, "name", json_string(u->name)) &&
              put(o, "unix_user", json_string(u->unix_user)) &&
              (!u->team || put(o, "team", json_string(u->team))) &&
              put(o, "role", json_string(model_role_name(u->role)));
    return finish(o, ok);
}

void model_user_release(struct model_user *u)
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
    struct model_gpu g;
    enum jsonv_presence nvlink_p;
};

struct node_wire {
    struct model_node n; /* all but its gpus */
    struct gpu_wire *gpus;
    size_t ngpus;
};

static const char *const state_names[] = {
    [MODEL_NODE_UP] = "up", [MODEL_NODE_DRAINING] = "draining", [MODEL_NODE_DOWN] = "down", NULL};

static const struct jsonv_field gpu_fields[] = {
    REQUIRED("index", JSONV_UINT32, struct gpu_wire, g.index, 0, SCHED_MAX_GPUS_PER_NODE - 1),
    REQUIRED("uuid", JSONV_STRING, struct gpu_wire, g.uuid, 1, MODEL_UUID_MAX),
    REQUIRED("gpu_type", JSONV_STRING, struct gpu_wire, g.gpu_type, 1, MODEL_NAME_MAX),
    REQUIRED("mem_mib", JSONV_UINT32, struct gpu_wire, g.mem_mib, 1, MODEL_GPU_MEM_MAX),
    FIELD("nvlink_domain", JSONV_INT64, struct gpu_wire, g.nvlink_domain, -1, INT32_MAX,
          .flags = JSONV_PRESENCE, .presence_offset = offsetof(struct gpu_wire, nvlink_p)),
    FIELD("mig_slices", JSONV_UINT32, struct gpu_wire, g.mig_slices, 0, MODEL_MIG_SLICES_MAX),
    FIELD("mig_enabled", JSONV_BOOL, struct gpu_wire, g.mig_enabled, 0, 0),
};

static const struct jsonv_field node_fields[] = {
    REQUIRED("id", JSONV_UINT32, struct node_wire, n.id, 1, UINT32_MAX),
    REQUIRED("name", JSONV_STRING, struct node_wire, n.name, 1, MODEL_HOST_MAX),
    REQUIRED("pool", JSONV_STRING, struct node_wire, n.pool, 1, MODEL_NAME_MAX),
    REQUIRED("cpus", JSONV_UINT32, struct node_wire, n.cpus, 1, MODEL_NODE_CPUS_MAX),
    REQUIRED("mem_mib", JSONV_INT64, struct node_wire, n.mem_mib, 1, MODEL_NODE_MEM_MAX),
    FIELD("state", JSONV_ENUM, struct node_wire, n.state, 0, 0, .choices = state_names),
    FIELD("addr", JSONV_STRING, struct node_wire, n.addr, 1, MODEL_HOST_MAX),
    FIELD("log_port", JSONV_UINT32, struct node_wire, n.log_port, 0, 65535),
    FIELD("gpus", JSONV_OBJECTS, struct node_wire, gpus, 0, 0, .max_items = SCHED_MAX_GPUS_PER_NODE,
          .count_offset = offsetof(struct node_wire, ngpus), .elem_size = sizeof(struct gpu_wire),
          .sub = gpu_fields, .nsub = ARRAY_LEN(gpu_fields)),
};

const char *model_node_state_name(enum model_node_state state)
{
    return (unsigned)state <= MODEL_NODE_DOWN ? state_names[state] : "unknown";
}

static int check_gpu(const struct model_node *n, size_t i, char *err, size_t errlen)
{
    const struct model_gpu *g = &n->gpus[i];
    char f[64], q[JSONV_QUOTE_MAX + 4], q2[JSONV_QUOTE_MAX + 4];
    int rc;
    snprintf(f, sizeof(f), "gpus[%zu].index", i);
    if ((rc = check_range(f, g->index, 0, SCHED_MAX_GPUS_PER_NODE - 1, err, errlen)))
        return rc;
    snprintf(f, sizeof(f), "gpus[%zu].uuid", i);
    if ((rc = check_shape(uuid_valid, UUID_RULE, "GPU UUID", f, g->uuid, err, errlen)))
        return rc;
    snprintf(f, sizeof(f), "gpus[%zu].gpu_type", i);
    if ((rc = check_type(f, g->gpu_type, err, errlen)))
        return rc;
    if (i > 0 && strcmp(g->gpu_type, n->gpus[0].gpu_type) != 0)
        return errbuf_set(
            err, errlen, GPO_EINVAL,
            "field '%s': '%s' differs from gpus[0]'s '%s' (a node's GPUs are of one type)", f,
            model_quote(g->gpu_type, q), model_quote(n->gpus[0].gpu_type, q2));
    snprintf(f, sizeof(f), "gpus[%zu].mem_mib", i);
    if ((rc = check_range(f, g->mem_mib, 1, MODEL_GPU_MEM_MAX, err, errlen)))
        return rc;
    snprintf(f, sizeof(f), "gpus[%zu].nvlink_domain", i);
    if ((rc = check_range(f, g->nvlink_domain, -1, INT32_MAX, err, errlen)))
        return rc;
    snprintf(f, sizeof(f), "gpus[%zu].mig_slices", i);
    if ((rc = check_range(f, g->mig_slices, 0, MODEL_MIG_SLICES_MAX, err, errlen)))
        return rc;
    if (g->mig_enabled && g->mig_slices == 0)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'gpus[%zu].mig_enabled': MIG is on but mig_slices is 0", i);
    for (size_t j = 0; j < i; j++) {
        if (n->gpus[j].index == g->index)
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'gpus[%zu].index': %u is also gpus[%zu]'s", i, g->index, j);
        if (strcmp(n->gpus[j].uuid, g->uuid) == 0)
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'gpus[%zu].uuid': '%s' is also gpus[%zu]'s", i,
                              model_quote(g->uuid, q), j);
    }
    return 0;
}

int model_node_check(const struct model_node *n, char *err, size_t errlen)
{
    if (!n)
        return errbuf_set(err, errlen, GPO_EINVAL, "no node");
    int rc = check_shape(model_host_valid, HOST_RULE, "host name", "name", n->name, err, errlen);
    rc = rc ? rc : check_name("pool", n->pool, err, errlen);
    rc = rc ? rc : check_range("cpus", n->cpus, 1, MODEL_NODE_CPUS_MAX, err, errlen);
    rc = rc ? rc : check_range("mem_mib", n->mem_mib, 1, MODEL_NODE_MEM_MAX, err, errlen);
    rc = rc ? rc : check_range("state", (int64_t)n->state, 0, MODEL_NODE_DOWN, err, errlen);
    if (!rc && n->addr)
        rc = check_shape(addr_valid, ADDR_RULE, "address", "addr", n->addr, err, errlen);
    rc = rc ? rc : check_range("log_port", n->log_port, 0, 65535, err, errlen);
    if (rc)
        return rc;
    if (n->ngpus > SCHED_MAX_GPUS_PER_NODE || (n->ngpus && !n->gpus))
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'gpus': %zu items, at most %d allowed",
                          n->ngpus, SCHED_MAX_GPUS_PER_NODE);
    for (size_t i = 0; i < n->ngpus && rc == 0; i++)
        rc = check_gpu(n, i, err, errlen);
    return rc;
}

int model_node_decode(const json_t *obj, unsigned flags, struct model_node *ret, char *err,
                      size_t errlen)
{
    struct node_wire w = {.n.state = MODEL_NODE_UP};
    int rc = decode_table(obj, flags, node_fields, ARRAY_LEN(node_fields), &w, err, errlen);
    if (rc)
        return rc;
    struct model_node n = w.n;
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
    rc = model_node_check(&n, err, errlen);
    if (rc) {
        model_node_release(&n);
        return rc;
    }
    *ret = n;
    return 0;
}

json_t *model_node_to_json(const struct model_node *n, unsigned flags)
{
    json_t *o = json_object(), *gpus = json_array();
    bool ok = o && gpus && put_id(o, n->id, flags) && put(o, "name", json_string(n->name)) &&
              put(o, "pool", json_string(n->pool)) && put(o, "cpus", json_integer(n->cpus)) &&
              put(o, "mem_mib", json_integer(n->mem_mib)) &&
              put(o, "state", json_string(model_node_state_name(n->state))) &&
              (!n->addr || put(o, "addr", json_string(n->addr))) &&
              (!n->log_port || put(o, "log_port", json_integer(n->log_port)));
    for (size_t i = 0; ok && i < n->ngpus; i++) {
        const struct model_gpu *g = &n->gpus[i];
        json_t *e = json_object();
        ok = e && json_array_append_new(gpus, e) == 0 && put(e, "index", json_integer(g->index)) &&
             put(e, "uuid", json_string(g->uuid)) && put(e, "gpu_type", json_string(g->gpu_type)) &&
             put(e, "mem_mib", json_integer(g->mem_mib)) &&
             put(e, "nvlink_domain", json_integer(g->nvlink_domain)) &&
             put(e, "mig_slices", json_integer(g->mig_slices)) &&
             put(e, "mig_enabled", json_boolean(g->mig_enabled));
    }
    if (ok)
        ok = put(o, "gpus", gpus); /* takes gpus, also on failure */
    else
        json_decref(gpus);
    return finish(o, ok);
}

void model_node_release(struct model_node *n)
{
    if (!n)
        return;
    for (size_t i = 0; n->gpus && i < n->ngpus; i++) {
        free(n->gpus[i].uuid);
        free(n->gpus[i].gpu_type);
    }
    free(n->gpus);
    free(n->name);
    free(n->pool);
    free(n->addr);
    memset(n, 0, sizeof(*n));
}

/* test_cluster_config.c - the configured cluster: each kind decoded with its
 * defaults, every class of bad field with its exact message (table-driven),
 * the id flag, round trips through JSON text, hand-built objects checked, the
 * model's sets and references, the core cluster built from a two-pool,
 * three-node model field by field (quotas expanded, type ids stable), job
 * requests resolved, and allocations turned into GPU UUIDs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "base/err.h"
#include "core/model.h"
#include "cluster/cluster.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

enum kind { POOL, CLASS, TEAM, USER, NODE };

union object {
    struct cluster_pool pool;
    struct cluster_class cls;
    struct cluster_team team;
    struct cluster_user user;
    struct cluster_node node;
};

static char err[512];

/* Per kind, the functions under test on a union object. */
#define OPS(T, member)                                                                             \
    static int T##_dec(const json_t *j, unsigned f, union object *o)                               \
    {                                                                                              \
        return cluster_##T##_decode(j, f, &o->member, err, sizeof(err));                           \
    }                                                                                              \
    static json_t *T##_enc(const union object *o, unsigned f)                                      \
    {                                                                                              \
        return cluster_##T##_to_json(&o->member, f);                                               \
    }                                                                                              \
    static void T##_rel(union object *o)                                                           \
    {                                                                                              \
        cluster_##T##_release(&o->member);                                                         \
    }                                                                                              \
    static int T##_add(struct cluster *m, union object *o)                                         \
    {                                                                                              \
        return cluster_##T##_add(m, &o->member, err, sizeof(err));                                 \
    }
OPS(pool, pool)
OPS(class, cls)
OPS(team, team)
OPS(user, user)
OPS(node, node)

static const struct {
    int (*decode)(const json_t *j, unsigned flags, union object *o);
    json_t *(*to_json)(const union object *o, unsigned flags);
    void (*release)(union object *o);
    int (*add)(struct cluster *m, union object *o);
} ops[] = {
    [POOL] = {pool_dec, pool_enc, pool_rel, pool_add},
    [CLASS] = {class_dec, class_enc, class_rel, class_add},
    [TEAM] = {team_dec, team_enc, team_rel, team_add},
    [USER] = {user_dec, user_enc, user_rel, user_add},
    [NODE] = {node_dec, node_enc, node_rel, node_add},
};

/* JSON text with ' for " (no test value holds an apostrophe). */
static json_t *parse(const char *text)
{
    char buf[8192];
    size_t n = strlen(text);
    assert_true(n < sizeof(buf));
    for (size_t i = 0; i <= n; i++)
        buf[i] = text[i] == '\'' ? '"' : text[i];
    json_error_t je;
    json_t *j = json_loads(buf, 0, &je);
    if (!j)
        fail_msg("bad test JSON (%s): %s", je.text, text);
    return j;
}

static int decode(enum kind k, const json_t *j, unsigned flags, union object *o)
{
    memset(err, 'x', sizeof(err) - 1); /* a message must overwrite this */
    err[sizeof(err) - 1] = '\0';
    return ops[k].decode(j, flags, o);
}

static int decode_text(enum kind k, const char *text, unsigned flags, union object *o)
{
    json_t *j = parse(text);
    int rc = decode(k, j, flags, o);
    json_decref(j);
    return rc;
}

static void release(enum kind k, union object *o)
{
    ops[k].release(o);
}

static void set_id(enum kind k, union object *o, uint32_t id)
{
    uint32_t *ids[] = {[POOL] = &o->pool.id,
                       [CLASS] = &o->cls.id,
                       [TEAM] = &o->team.id,
                       [USER] = &o->user.id,
                       [NODE] = &o->node.id};
    *ids[k] = id;
}

static bool str_eq(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

static bool equal(enum kind k, const union object *a, const union object *b)
{
    switch (k) {
    case POOL:
        return a->pool.id == b->pool.id && str_eq(a->pool.name, b->pool.name) &&
               str_eq(a->pool.description, b->pool.description);
    case CLASS:
        return a->cls.id == b->cls.id && str_eq(a->cls.name, b->cls.name) &&
               a->cls.order == b->cls.order && a->cls.may_preempt == b->cls.may_preempt &&
               str_eq(a->cls.description, b->cls.description);
    case TEAM: {
        const struct cluster_team *x = &a->team, *y = &b->team;
        bool eq = x->id == y->id && str_eq(x->name, y->name) && x->weight == y->weight &&
                  x->borrow_limit_milli == y->borrow_limit_milli && x->nquotas == y->nquotas;
        for (size_t i = 0; eq && i < x->nquotas; i++)
            eq = str_eq(x->quotas[i].pool, y->quotas[i].pool) &&
                 str_eq(x->quotas[i].gpu_type, y->quotas[i].gpu_type) &&
                 x->quotas[i].guaranteed_milli == y->quotas[i].guaranteed_milli &&
                 x->quotas[i].borrow_limit_milli == y->quotas[i].borrow_limit_milli;
        return eq;
    }
    case USER:
        return a->user.id == b->user.id && str_eq(a->user.name, b->user.name) &&
               str_eq(a->user.unix_user, b->user.unix_user) && str_eq(a->user.team, b->user.team) &&
               a->user.role == b->user.role;
    case NODE: {
        const struct cluster_node *x = &a->node, *y = &b->node;
        bool eq = x->id == y->id && str_eq(x->name, y->name) && str_eq(x->pool, y->pool) &&
                  x->cpus == y->cpus && x->mem_mib == y->mem_mib && x->state == y->state &&
                  x->ngpus == y->ngpus;
        for (size_t i = 0; eq && i < x->ngpus; i++) {
            const struct cluster_gpu *g = &x->gpus[i], *h = &y->gpus[i];
            eq = g->index == h->index && str_eq(g->uuid, h->uuid) &&
                 str_eq(g->gpu_type, h->gpu_type) && g->mem_mib == h->mem_mib &&
                 g->nvlink_domain == h->nvlink_domain && g->mig_slices == h->mig_slices &&
                 g->mig_enabled == h->mig_enabled;
        }
        return eq;
    }
    }
    return false;
}

/* Decodes text (API form), checks it gives `want` field by field, releases it. */
static void expect_decoded(enum kind k, const char *text, const union object *want)
{
    union object o = {0};
    if (decode_text(k, text, 0, &o) != 0)
        fail_msg("%s: %s", text, err);
    if (!equal(k, &o, want)) {
        json_t *j = ops[k].to_json(&o, CLUSTER_STORED);
        char *got = json_dumps(j, JSON_COMPACT);
        fail_msg("%s decoded to %s", text, got);
    }
    release(k, &o);
}

#define UUID(n) "GPU-00000000-0000-0000-0000-0000000000" #n
#define GPU(idx, uuid, type, mem)                                                                  \
    "{'index': " #idx ", 'uuid': '" uuid "', 'gpu_type': '" type "', 'mem_mib': " #mem "}"
#define GPU0(extra)                                                                                \
    "{'index': 0, 'uuid': '" UUID(01) "', 'gpu_type': 'H100', 'mem_mib': 1" extra "}"
#define NODE_JSON(name, pool, gpus)                                                                \
    "{'name': '" name "', 'pool': '" pool "', 'cpus': 64, 'mem_mib': 524288, 'gpus': [" gpus "]}"

/* ---- decoding valid objects ---------------------------------------------- */

static void test_every_kind_decodes_with_its_defaults(void **state)
{
    (void)state;
    expect_decoded(POOL, "{'name': 'gpu-a'}", &(union object){.pool = {.name = "gpu-a"}});
    expect_decoded(POOL, "{'name': 'a.b_c-1', 'description': ''}",
                   &(union object){.pool = {.name = "a.b_c-1", .description = ""}});
    expect_decoded(CLASS, "{'name': 'urgent', 'order': -10000}",
                   &(union object){.cls = {.name = "urgent", .order = -10000}});
    expect_decoded(USER, "{'name': 'ann', 'unix_user': 'ann_1', 'team': 'ml'}",
                   &(union object){.user = {.name = "ann",
                                            .unix_user = "ann_1",
                                            .team = "ml",
                                            .role = CLUSTER_ROLE_MEMBER}});
    expect_decoded(USER, "{'name': 'root', 'unix_user': '_adm', 'role': 'admin'}",
                   &(union object){.user = {.name = "root", .unix_user = "_adm"}});
    expect_decoded(NODE, NODE_JSON("cpu1", "a", ""),
                   &(union object){.node = {.name = "cpu1",
                                            .pool = "a",
                                            .cpus = 64,
                                            .mem_mib = 524288,
                                            .state = CLUSTER_NODE_UP}});
    /* A GPU without nvlink_domain has none (-1); MIG instances have their own UUIDs. */
    struct cluster_gpu gpus[] = {{0, UUID(01), "H100-80GB", 81920, -1, 0, false},
                                 {3, "MIG-GPU-abc/1/0", "H100-80GB", 81920, 2, 7, true}};
    expect_decoded(
        NODE,
        "{'name': 'gpu-01.dc1.example.com', 'pool': 'a', 'cpus': 8, 'mem_mib': 65536, "
        "'state': 'draining', 'gpus': [" GPU(
            0, UUID(01), "H100-80GB",
            81920) ", "
                   "{'index': 3, 'uuid': 'MIG-GPU-abc/1/0', 'gpu_type': 'H100-80GB', 'mem_mib': "
                   "81920, 'nvlink_domain': 2, 'mig_slices': 7, 'mig_enabled': true}]}",
        &(union object){.node = {.name = "gpu-01.dc1.example.com",
                                 .pool = "a",
                                 .cpus = 8,
                                 .mem_mib = 65536,
                                 .state = CLUSTER_NODE_DRAINING,
                                 .gpus = gpus,
                                 .ngpus = 2}});
}

static void test_team_decodes_gpus_as_milli_with_defaults(void **state)
{
    (void)state;
    /* GPUs with three decimals become milli-GPU; borrow limits default to -1. */
    struct cluster_quota q[] = {
        {"a", NULL, 250, -1}, {"a", "H100-80GB", 8000, 1500}, {"b", NULL, 1, -1}};
    expect_decoded(
        TEAM,
        "{'name': 'ml', 'quotas': [{'pool': 'a', 'guaranteed': 0.25}, {'pool': 'a', "
        "'gpu_type': 'H100-80GB', 'guaranteed': 8, 'borrow_limit': 1.5}, {'pool': 'b', "
        "'guaranteed': 0.001, 'borrow_limit': -1}]}",
        &(union object){
            .team = {
                .name = "ml", .weight = 1, .borrow_limit_milli = -1, .quotas = q, .nquotas = 3}});
    expect_decoded(TEAM, "{'name': 'cv', 'weight': 1000, 'borrow_limit': 0}",
                   &(union object){.team = {.name = "cv", .weight = 1000}});
    expect_decoded(
        TEAM, "{'name': 'cv', 'borrow_limit': 2.5, 'quotas': []}",
        &(union object){.team = {.name = "cv", .weight = 1, .borrow_limit_milli = 2500}});
}

/* ---- every error, with its message --------------------------------------- */

#define NAME_RULE "(1 to 63 bytes of a-z, 0-9, '-', '_' and '.', starting with a letter or digit)"
#define HOST_RULE                                                                                  \
    "(labels of 1 to 63 letters, digits and '-' (not at either end) joined by '.', at most 253 "   \
    "bytes)"
#define LOGIN_RULE "([a-z_][a-z0-9_-]*, at most 32 bytes)"

struct bad_case {
    enum kind kind;
    unsigned flags;
    const char *json;
    const char *msg;
};

static const struct bad_case bad_cases[] = {
    {POOL, 0, "[]", "expected an object, got an array"},
    {POOL, 0, "{}", "missing required field 'name'"},
    {POOL, 0, "{'name': 'Gpu-A'}", "field 'name': 'Gpu-A' is not a valid name " NAME_RULE},
    {POOL, 0, "{'name': '-a'}", "field 'name': '-a' is not a valid name " NAME_RULE},
    {POOL, 0, "{'name': 5}", "field 'name': expected a string, got an integer"},
    {POOL, 0, "{'name': 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'}",
     "field 'name': length 64 is out of range 1..63 bytes"},
    {POOL, 0, "{'name': 'a', 'descriptio': 'x'}",
     "unknown field 'descriptio' (did you mean 'description'?)"},
    /* "mig" (docs/mig.md): off, a static layout or the dynamic planner */
    {POOL, 0, "{'name': 'a', 'mig': 'on'}",
     "field 'mig': 'on' is not 'off' (a layout is {layout: NAME}, the planner {dynamic: true})"},
    {POOL, 0, "{'name': 'a', 'mig': 7}",
     "field 'mig': expected 'off' or an object ({layout: ...} or {dynamic: true, ...}), got an "
     "integer"},
    {POOL, 0, "{'name': 'a', 'mig': {}}",
     "field 'mig': expected 'layout' (static) or 'dynamic: true' (the planner's settings beside "
     "it)"},
    {POOL, 0, "{'name': 'a', 'mig': {'layuot': 'all-1g.10gb'}}",
     "unknown field 'mig.layuot' (expected layout for a static layout; dynamic, settle, hold, "
     "min_interval, keep_free, max_repartitions for a dynamic one)"},
    {POOL, 0, "{'name': 'a', 'mig': {'layout': 'all-1g.10gb', 'hold': '5m'}}",
     "fields 'mig.layout' and 'mig.hold': a static layout and the dynamic planner's settings "
     "exclude each other: give one"},
    {POOL, 0, "{'name': 'a', 'mig': {'dynamic': true, 'layout': {'1g.10gb': 7}}}",
     "fields 'mig.layout' and 'mig.dynamic': a static layout and the dynamic planner's settings "
     "exclude each other: give one"},
    {POOL, 0, "{'name': 'a', 'mig': {'settle': '30s'}}",
     "field 'mig': expected 'layout' (static) or 'dynamic: true' (the planner's settings beside "
     "it)"},
    {POOL, 0, "{'name': 'a', 'mig': {'dynamic': false}}",
     "field 'mig.dynamic': false: give 'mig: off' for no layout, or 'mig.layout' for a static "
     "one"},
    {POOL, 0, "{'name': 'a', 'mig': {'dynamic': 'yes'}}",
     "field 'mig.dynamic': expected a boolean, got a string"},
    {POOL, 0, "{'name': 'a', 'mig': {'dynamic': true, 'settle': 'soon'}}",
     "field 'mig.settle': 'soon' is not a duration (seconds, or e.g. \"30s\", \"5m\", \"2h\", "
     "\"00:05:00\")"},
    {POOL, 0, "{'name': 'a', 'mig': {'dynamic': true, 'hold': -1}}",
     "field 'mig.hold': -1 s is out of range 0 s..30 days"},
    {POOL, 0, "{'name': 'a', 'mig': {'dynamic': true, 'min_interval': '31d'}}",
     "field 'mig.min_interval': 2678400 s is out of range 0 s..30 days"},
    {POOL, 0, "{'name': 'a', 'mig': {'dynamic': true, 'hold': 'UNLIMITED'}}",
     "field 'mig.hold': 'UNLIMITED' is not a duration (seconds, or e.g. \"30s\", \"5m\", "
     "\"2h\", \"00:05:00\")"},
    {POOL, 0, "{'name': 'a', 'mig': {'dynamic': true, 'settle': [1]}}",
     "field 'mig.settle': expected a duration (seconds, or e.g. \"30s\", \"5m\", \"2h\", "
     "\"00:05:00\"), got an array"},
    {POOL, 0, "{'name': 'a', 'mig': {'dynamic': true, 'keep_free': 1001}}",
     "field 'mig.keep_free': 1001 is out of range 0..1000"},
    {POOL, 0, "{'name': 'a', 'mig': {'dynamic': true, 'max_repartitions': 1.5}}",
     "field 'mig.max_repartitions': expected an integer, got a real number"},
    {POOL, 0, "{'name': 'a', 'mig': {'layout': 3}}",
     "field 'mig.layout': expected a named layout (all-1g.10gb, all-balanced, ...) or a count "
     "per profile ({\"1g.10gb\": 2}), got an integer"},
    {POOL, 0, "{'name': 'a', 'mig': {'layout': {}}}",
     "field 'mig.layout': 0 profiles, expected 1..16 (a count per profile, as {\"1g.10gb\": 2, "
     "\"3g.40gb\": 1})"},
    {POOL, 0, "{'name': 'a', 'mig': {'layout': {'1g.11gb': 1}}}",
     "field 'mig.layout': no GPU type has MIG profile '1g.11gb' (known: 1g.5gb, 1g.5gb+me, "
     "1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, "
     "4g.40gb, 7g.80gb, 1g.18gb, 1g.18gb+me, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb)"},
    {POOL, 0, "{'name': 'a', 'mig': {'layout': {'1g.10gb': 1, 'MIG 1g.10gb': 2}}}",
     "field 'mig.layout': profile 1g.10gb is listed twice ('MIG 1g.10gb')"},
    {POOL, 0, "{'name': 'a', 'mig': {'layout': {'1g.10gb': 8}}}",
     "field 'mig.layout.1g.10gb': 8 is out of range 0..7"},
    {POOL, 0, "{'name': 'a', 'mig': {'layout': {'4g.40gb': 2}}}",
     "field 'mig.layout': valid on no MIG GPU type of the catalogue (a layout must be valid on "
     "at least one): A100-40GB has no 4g.40gb; 4g.40gb x 2: a A100-80GB holds at most 1 "
     "4g.40gb instance; 4g.40gb x 2: a H100-80GB holds at most 1 4g.40gb instance; H200-141GB "
     "has no 4g.40gb"},
    {POOL, 0, "{'name': 'a', 'mig': {'layout': {'3g.40gb': 1, '4g.40gb': 1, '1g.10gb': 1}}}",
     "field 'mig.layout': valid on no MIG GPU type of the catalogue (a layout must be valid on "
     "at least one): A100-40GB has no 3g.40gb; no room on a A100-80GB for the 1st 1g.10gb beside "
     "4g.40gb at slots 0-3, 3g.40gb at slots 4-7; no room on a H100-80GB for the 1st 1g.10gb "
     "beside 4g.40gb at slots 0-3, 3g.40gb at slots 4-7; H200-141GB has no 3g.40gb"},
    {POOL, 0, "{'name': 'a', 'mig': {'layout': 'all-7g.81gb'}}",
     "field 'mig.layout': no MIG layout 'all-7g.81gb' on any MIG GPU type of the catalogue "
     "(named layouts: all-disabled, all-enabled, all-balanced, and all- with a profile of the "
     "type, as all-1g.10gb)"},
    {POOL, 0, "{'id': 3, 'name': 'a'}", "unknown field 'id'"},
    {POOL, CLUSTER_STORED, "{'name': 'a'}", "missing required field 'id'"},
    {POOL, CLUSTER_STORED, "{'id': 0, 'name': 'a'}", "field 'id': 0 is out of range 1..4294967295"},
    {CLASS, 0, "{'name': 'hi'}", "missing required field 'order'"},
    {CLASS, 0, "{'name': 'hi', 'order': 10001}",
     "field 'order': 10001 is out of range -10000..10000"},
    {CLASS, 0, "{'name': 'hi', 'order': 1, 'may_preempt': 'yes'}",
     "field 'may_preempt': expected a boolean, got a string"},
    {TEAM, 0, "{'name': 't', 'weight': 0}", "field 'weight': 0 is out of range 1..1000"},
    {TEAM, 0, "{'name': 't', 'weight': 1001}", "field 'weight': 1001 is out of range 1..1000"},
    {TEAM, 0, "{'name': 't', 'borrow_limit': -0.5}",
     "field 'borrow_limit': -0.5 is neither -1 (no limit) nor >= 0"},
    {TEAM, 0, "{'name': 't', 'borrow_limit': -2}",
     "field 'borrow_limit': -2 is out of range -1..1e+06"},
    {TEAM, 0, "{'name': 't', 'borrow_limit': '4'}",
     "field 'borrow_limit': expected a number, got a string"},
    {TEAM, 0, "{'name': 't', 'quotas': {}}",
     "field 'quotas': expected an array of objects, got an object"},
    {TEAM, 0, "{'name': 't', 'quotas': [{'pool': 'a', 'guaranteed': 0.0005}]}",
     "field 'quotas[0].guaranteed': 0.0005 has more than 3 decimals (GPUs count in thousandths)"},
    {TEAM, 0, "{'name': 't', 'quotas': [{'pool': 'a'}]}",
     "missing required field 'quotas[0].guaranteed'"},
    {TEAM, 0, "{'name': 't', 'quotas': [{'guaranteed': 1}]}",
     "missing required field 'quotas[0].pool'"},
    {TEAM, 0,
     "{'name': 't', 'quotas': [{'pool': 'a', 'guaranteed': 1}, {'pool': 'GPU A', 'guaranteed': "
     "1}]}",
     "field 'quotas[1].pool': 'GPU A' is not a valid name " NAME_RULE},
    {TEAM, 0, "{'name': 't', 'quotas': [{'pool': 'a', 'gpu_type': 'H100 80GB', 'guaranteed': 1}]}",
     "field 'quotas[0].gpu_type': 'H100 80GB' is not a valid GPU type (1 to 63 bytes of letters, "
     "digits, '-', '_' and '.', starting with a letter or digit)"},
    {TEAM, 0,
     "{'name': 't', 'quotas': [{'pool': 'a', 'guaranteed': 1}, {'pool': 'a', 'guaranteed': 2}]}",
     "field 'quotas[1]': a second quota for pool 'a' and any GPU type (the first is quotas[0])"},
    {TEAM, 0,
     "{'name': 't', 'quotas': [{'pool': 'a', 'gpu_type': 'H100', 'guaranteed': 1}, {'pool': 'a', "
     "'guaranteed': 1}, {'pool': 'a', 'gpu_type': 'H100', 'guaranteed': 2}]}",
     "field 'quotas[2]': a second quota for pool 'a' and GPU type 'H100' (the first is quotas[0])"},
    {TEAM, 0, "{'name': 't', 'quotas': [{'pool': 'a', 'guaranteed': 1, 'borrow_limit': -0.5}]}",
     "field 'quotas[0].borrow_limit': -0.5 is neither -1 (no limit) nor >= 0"},
    {TEAM, 0, "{'name': 't', 'quotas': [{'pool': 'a', 'guaranteed': -1}]}",
     "field 'quotas[0].guaranteed': -1 is out of range 0..1e+06"},
    {USER, 0, "{'name': 'bob', 'unix_user': 'Bob', 'team': 'ml'}",
     "field 'unix_user': 'Bob' is not a valid Unix login name " LOGIN_RULE},
    {USER, 0, "{'name': 'bob', 'unix_user': '1bob', 'team': 'ml'}",
     "field 'unix_user': '1bob' is not a valid Unix login name " LOGIN_RULE},
    {USER, 0, "{'name': 'bob', 'unix_user': 'bob'}",
     "missing required field 'team' (role 'member' needs a team)"},
    {USER, 0, "{'name': 'bob', 'unix_user': 'bob', 'role': 'root'}",
     "field 'role': 'root' is not one of admin, member, metrics"},
    {USER, 0, "{'name': 'bob', 'team': 'ml'}", "missing required field 'unix_user'"},
    {USER, 0, "{'name': 'bob', 'unix_user': 'bob', 'team': 'M L'}",
     "field 'team': 'M L' is not a valid name " NAME_RULE},
    {NODE, 0, NODE_JSON("-bad", "a", ""),
     "field 'name': '-bad' is not a valid host name " HOST_RULE},
    {NODE, 0, NODE_JSON("a..b", "a", ""),
     "field 'name': 'a..b' is not a valid host name " HOST_RULE},
    {NODE, 0, "{'name': 'n', 'pool': 'a', 'cpus': 0, 'mem_mib': 1}",
     "field 'cpus': 0 is out of range 1..1048576"},
    {NODE, 0, "{'name': 'n', 'pool': 'a', 'cpus': 1, 'mem_mib': 1, 'state': 'up?'}",
     "field 'state': 'up?' is not one of up, draining, down"},
    {NODE, 0, "{'name': 'n', 'pool': 'a', 'cpus': 1}", "missing required field 'mem_mib'"},
    {NODE, 0, NODE_JSON("n", "a", GPU(0, "GPU-1234", "H100", 1)),
     "field 'gpus[0].uuid': 'GPU-1234' is not a valid GPU UUID ('GPU-' and 8-4-4-4-12 hex digits, "
     "or 'MIG-' and its instance id)"},
    {NODE, 0, NODE_JSON("n", "a", GPU(0, UUID(01), "H100", 1) "," GPU(1, UUID(02), "A100", 1)),
     "field 'gpus[1].gpu_type': 'A100' differs from gpus[0]'s 'H100' (a node's GPUs are of one "
     "type)"},
    {NODE, 0, NODE_JSON("n", "a", GPU(0, UUID(01), "H100", 1) "," GPU(0, UUID(02), "H100", 1)),
     "field 'gpus[1].index': 0 is also gpus[0]'s"},
    {NODE, 0, NODE_JSON("n", "a", GPU(0, UUID(01), "H100", 1) "," GPU(1, UUID(01), "H100", 1)),
     "field 'gpus[1].uuid': '" UUID(01) "' is also gpus[0]'s"},
    {NODE, 0, NODE_JSON("n", "a", GPU(64, UUID(01), "H100", 1)),
     "field 'gpus[0].index': 64 is out of range 0..63"},
    {NODE, 0, NODE_JSON("n", "a", GPU0(", 'mig_enabled': true")),
     "field 'gpus[0].mig_enabled': MIG is on but mig_slices is 0"},
    {NODE, 0, NODE_JSON("n", "a", GPU0(", 'mig_slices': 8")),
     "field 'gpus[0].mig_slices': 8 is out of range 0..7"},
    {NODE, 0, NODE_JSON("n", "a", GPU0(", 'nvlink_domain': -2")),
     "field 'gpus[0].nvlink_domain': -2 is out of range -1..2147483647"},
    {NODE, 0, NODE_JSON("n", "a", "{'index': 0, 'uuid': '" UUID(01) "', 'gpu_type': 'H'}"),
     "missing required field 'gpus[0].mem_mib'"},
};

static void test_decode_errors_name_the_field(void **state)
{
    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(bad_cases); i++) {
        const struct bad_case *c = &bad_cases[i];
        union object o;
        memset(&o, 0xA5, sizeof(o)); /* must stay untouched */
        union object before = o;
        int rc = decode_text(c->kind, c->json, c->flags, &o);
        if (rc != GPO_EINVAL || strcmp(err, c->msg) != 0)
            fail_msg("case %zu (%s): rc %d, message\n  got  '%s'\n  want '%s'", i, c->json, rc, err,
                     c->msg);
        assert_memory_equal(&o, &before, sizeof(o));
    }
}

static void test_too_many_quotas_and_gpus_are_refused(void **state)
{
    (void)state;
    json_t *team = json_pack("{s:s, s:[]}", "name", "t", "quotas");
    json_t *node = parse(NODE_JSON("n", "a", ""));
    for (int i = 0; i < 257; i++) {
        char pool[16], uuid[64];
        snprintf(pool, sizeof(pool), "p%d", i);
        json_array_append_new(json_object_get(team, "quotas"),
                              json_pack("{s:s, s:i}", "pool", pool, "guaranteed", 1));
        snprintf(uuid, sizeof(uuid), "GPU-00000000-0000-0000-0000-%012d", i);
        if (i <= 64)
            json_array_append_new(json_object_get(node, "gpus"),
                                  json_pack("{s:i, s:s, s:s, s:i}", "index", i % 64, "uuid", uuid,
                                            "gpu_type", "H100", "mem_mib", 1));
    }
    union object o = {0};
    assert_int_equal(decode(TEAM, team, 0, &o), GPO_EINVAL);
    assert_string_equal(err, "field 'quotas': 257 items, at most 256 allowed");
    assert_int_equal(decode(NODE, node, 0, &o), GPO_EINVAL);
    assert_string_equal(err, "field 'gpus': 65 items, at most 64 allowed");
    json_array_remove(json_object_get(team, "quotas"), 256);
    assert_int_equal(decode(TEAM, team, 0, &o), 0);
    assert_int_equal(o.team.nquotas, 256);
    release(TEAM, &o);
    assert_int_equal(decode(TEAM, team, 1u << 5, &o), GPO_EINVAL); /* unknown flag */
    json_decref(team);
    json_decref(node);
}

/* ---- round trips ----------------------------------------------------------- */

static const struct {
    enum kind kind;
    const char *json;
} samples[] = {
    {POOL, "{'name': 'a', 'description': 'H100 nodes, \\u00e9t\\u00e9'}"},
    {POOL, "{'name': 'b'}"},
    {CLASS, "{'name': 'urgent', 'order': 100, 'may_preempt': true, 'description': 'x'}"},
    {TEAM, "{'name': 'ml', 'weight': 3, 'borrow_limit': 0.125, 'quotas': [{'pool': 'a', "
           "'guaranteed': 0.1}, {'pool': 'a', 'gpu_type': 'H100-80GB', 'guaranteed': 1000000, "
           "'borrow_limit': 2.999}]}"},
    {USER, "{'name': 'ann', 'unix_user': 'ann', 'team': 'ml'}"},
    {USER, "{'name': 'root', 'unix_user': 'root', 'role': 'admin'}"},
    {NODE,
     NODE_JSON("n1", "a",
               GPU(0, UUID(01), "H100-80GB", 81920) "," GPU(1, UUID(02), "H100-80GB", 81920))},
};

static void test_to_json_round_trips_every_kind_in_both_forms(void **state)
{
    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(samples); i++) {
        enum kind k = samples[i].kind;
        union object x = {0}, y = {0};
        assert_int_equal(decode_text(k, samples[i].json, 0, &x), 0);
        /* The id flag: refused from users, required in the stored form. */
        json_t *with_id = parse(samples[i].json);
        assert_int_equal(decode(k, with_id, CLUSTER_STORED, &y), GPO_EINVAL);
        assert_string_equal(err, "missing required field 'id'");
        json_object_set_new(with_id, "id", json_integer(5));
        assert_int_equal(decode(k, with_id, 0, &y), GPO_EINVAL);
        assert_string_equal(err, "unknown field 'id'");
        json_decref(with_id);
        for (unsigned flags = 0; flags <= CLUSTER_STORED; flags += CLUSTER_STORED) {
            set_id(k, &x, flags ? 77u + (uint32_t)i : 0);
            json_t *j = ops[k].to_json(&x, flags);
            assert_non_null(j);
            assert_true(json_object_get(j, "id") ? flags : !flags);
            char *text = json_dumps(j, 0); /* through text, as the store keeps it */
            json_decref(j);
            assert_int_equal(decode_text(k, text, flags, &y), 0);
            if (!equal(k, &x, &y))
                fail_msg("sample %zu flags %u does not round-trip: %s", i, flags, text);
            free(text);
            release(k, &y);
        }
        release(k, &x);
    }
}

static void test_check_refuses_hand_built_objects(void **state)
{
    (void)state;
    struct cluster_quota q = {.pool = "a", .guaranteed_milli = -5, .borrow_limit_milli = -1};
    struct cluster_team t = {
        .name = "t", .weight = 1, .borrow_limit_milli = -1, .quotas = &q, .nquotas = 1};
    assert_int_equal(cluster_team_check(&t, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(
        err, "field 'quotas[0].guaranteed': -5 milli-GPU is out of range (0..1000000 GPUs)");
    t.weight = 0;
    assert_int_equal(cluster_team_check(&t, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "field 'weight': 0 is out of range 1..1000");
    struct cluster_node n = {.pool = "a", .cpus = 1, .mem_mib = 1};
    assert_int_equal(cluster_node_check(&n, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "missing required field 'name'");
    struct cluster_user u = {.name = "u", .unix_user = "u", .role = (enum cluster_role)7};
    assert_int_equal(cluster_user_check(&u, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "field 'role': 7 is not a role");
    struct cluster_pool p = {.name = "ok\x01"};
    assert_int_equal(cluster_pool_check(&p, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "field 'name': 'ok?' is not a valid name " NAME_RULE);
    assert_true(cluster_host_valid("a-1.b"));
    assert_false(cluster_host_valid("a-.b"));
    assert_false(cluster_unix_user_valid("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")); /* 33 bytes */
}

/* ---- the model ------------------------------------------------------------- */

/* Decodes text (API form), gives it `id` and adds it to m. */
static int add(struct cluster *m, enum kind k, uint32_t id, const char *text)
{
    union object o = {0};
    int rc = decode_text(k, text, 0, &o);
    if (rc)
        fail_msg("bad fixture %s: %s", text, err);
    set_id(k, &o, id);
    rc = ops[k].add(m, &o);
    release(k, &o); /* zeroed when taken */
    return rc;
}

#define H100 "H100-80GB"
#define A100 "A100-40GB"

/* Two pools; three nodes: n1 (2 H100, down) and n2 (1 A100, draining) in
 * pool a, n3 (4 H100) in b; two teams, two classes, a user. Added out of
 * name order, each with its id. */
static const struct {
    enum kind kind;
    uint32_t id;
    const char *json;
} fixture_objects[] = {
    {POOL, 1, "{'name': 'b'}"},
    {POOL, 2, "{'name': 'a'}"},
    {NODE, 10,
     NODE_JSON("n3", "b",
               GPU(0, UUID(30), H100, 81920) "," GPU(1, UUID(31), H100, 81920) "," GPU(
                   2, UUID(32), H100, 81920) "," GPU(3, UUID(33), H100, 81920))},
    {NODE, 11,
     "{'name': 'n2', 'pool': 'a', 'cpus': 32, 'mem_mib': 262144, 'state': 'draining', "
     "'gpus': [" GPU(5, UUID(20), A100, 40960) "]}"},
    {NODE, 12,
     "{'name': 'n1', 'pool': 'a', 'cpus': 64, 'mem_mib': 524288, 'state': 'down', "
     "'gpus': [{'index': 0, 'uuid': '" UUID(
         10) "', 'gpu_type': '" H100 "', 'mem_mib': "
             "81920, 'nvlink_domain': 0, 'mig_slices': 7, 'mig_enabled': true}, {'index': 1, "
             "'uuid': '" UUID(11) "', 'gpu_type': '" H100 "', 'mem_mib': 81920, "
                                  "'nvlink_domain': 0}]}"},
    {TEAM, 21,
     "{'name': 'vision', 'quotas': [{'pool': 'a', 'guaranteed': 1}, {'pool': 'a', "
     "'gpu_type': '" H100 "', 'guaranteed': 3}, {'pool': 'b', 'gpu_type': 'V100', "
     "'guaranteed': 5}]}"},
    {TEAM, 20,
     "{'name': 'ml', 'weight': 2, 'borrow_limit': 4, 'quotas': [{'pool': 'a', "
     "'guaranteed': 1.5}, {'pool': 'b', 'gpu_type': '" H100 "', 'guaranteed': 2, "
     "'borrow_limit': 1}]}"},
    {CLASS, 31, "{'name': 'normal', 'order': 0}"},
    {CLASS, 30, "{'name': 'high', 'order': 100, 'may_preempt': true}"},
    {USER, 40, "{'name': 'ann', 'unix_user': 'ann', 'team': 'ml'}"},
};

static void fixture(struct cluster *m)
{
    cluster_init(m);
    for (size_t i = 0; i < ARRAY_LEN(fixture_objects); i++)
        if (add(m, fixture_objects[i].kind, fixture_objects[i].id, fixture_objects[i].json))
            fail_msg("fixture %zu: %s", i, err);
}

static void test_model_keeps_names_sorted_unique_and_ids_fixed(void **state)
{
    (void)state;
    struct cluster m;
    fixture(&m);
    assert_int_equal(m.npools, 2);
    assert_string_equal(m.pools[0].name, "a");
    assert_string_equal(m.nodes[0].name, "n1");
    assert_string_equal(m.nodes[2].name, "n3");
    assert_int_equal(cluster_pool_get(&m, "b")->id, 1);
    assert_null(cluster_pool_get(&m, "c"));
    assert_int_equal(add(&m, POOL, 3, "{'name': 'a'}"), GPO_EEXIST);
    assert_string_equal(err, "pool 'a' already exists");
    assert_int_equal(add(&m, POOL, 0, "{'name': 'c'}"), GPO_EINVAL);
    assert_string_equal(err, "pool 'c' has no id");
    struct cluster_pool bad = {.id = 9, .name = "C"};
    assert_int_equal(cluster_pool_add(&m, &bad, err, sizeof(err)), GPO_EINVAL);
    assert_int_equal(m.npools, 2);

    union object o = {0};
    assert_int_equal(decode_text(POOL, "{'name': 'a', 'description': 'new'}", 0, &o), 0);
    assert_int_equal(cluster_pool_replace(&m, &o.pool, err, sizeof(err)), 0);
    assert_null(o.pool.name); /* taken */
    assert_string_equal(cluster_pool_get(&m, "a")->description, "new");
    assert_int_equal(cluster_pool_get(&m, "a")->id, 2); /* ids never change */
    assert_int_equal(decode_text(POOL, "{'name': 'a'}", 0, &o), 0);
    o.pool.id = 5;
    assert_int_equal(cluster_pool_replace(&m, &o.pool, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "pool 'a': id 5 is not its id 2 (ids never change)");
    cluster_pool_release(&o.pool);
    assert_int_equal(decode_text(POOL, "{'name': 'zz'}", 0, &o), 0);
    assert_int_equal(cluster_pool_replace(&m, &o.pool, err, sizeof(err)), GPO_ENOENT);
    assert_string_equal(err, "no pool 'zz'");
    cluster_pool_release(&o.pool);

    /* Jobs that name no class get "normal" while it exists, else the first
     * class by name, else none. */
    assert_string_equal(cluster_class_default(&m), "normal");
    assert_int_equal(cluster_class_remove(&m, "normal"), 0);
    assert_string_equal(cluster_class_default(&m), "high");
    assert_int_equal(cluster_class_remove(&m, "high"), 0);
    assert_null(cluster_class_default(&m));

    assert_int_equal(cluster_user_remove(&m, "ann"), 0);
    assert_int_equal(cluster_user_remove(&m, "ann"), GPO_ENOENT);
    assert_int_equal(m.nusers, 0);
    cluster_release(&m);
    cluster_release(&m); /* twice is fine */
    cluster_release(NULL);
}

static void test_check_refs_reports_the_first_dangling_reference(void **state)
{
    (void)state;
    struct cluster m;
    fixture(&m);
    assert_int_equal(cluster_check_refs(&m, err, sizeof(err)), 0);
    assert_int_equal(add(&m, USER, 41, "{'name': 'bob', 'unix_user': 'bob', 'team': 'nlp'}"), 0);
    assert_int_equal(cluster_check_refs(&m, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "user 'bob': unknown team 'nlp'");
    assert_int_equal(cluster_pool_remove(&m, "b"), 0);
    assert_int_equal(cluster_check_refs(&m, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "team 'ml': quotas[1]: unknown pool 'b'");
    struct cluster_view cl = {0};
    assert_int_equal(cluster_view_build(&m, &cl, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "team 'ml': quotas[1]: unknown pool 'b'");
    assert_null(cl.nodes);
    assert_int_equal(cluster_team_remove(&m, "ml"), 0);
    assert_int_equal(cluster_team_remove(&m, "vision"), 0);
    assert_int_equal(cluster_user_remove(&m, "bob"), 0);
    assert_int_equal(cluster_user_remove(&m, "ann"), 0);
    assert_int_equal(cluster_check_refs(&m, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "node 'n3': unknown pool 'b'");
    cluster_release(&m);
}

static void test_build_cluster_translates_the_model_field_by_field(void **state)
{
    (void)state;
    struct cluster m;
    fixture(&m);
    struct cluster_view cl;
    assert_int_equal(cluster_view_build(&m, &cl, err, sizeof(err)), 0);
    const struct sched_cluster *c = &cl.c;
    const char *what = NULL;
    assert_int_equal(sched_cluster_check(c, &what), 0);
    assert_int_equal(c->npools, 2);
    assert_string_equal(c->pools[0].name, "a");
    assert_string_equal(c->pools[1].name, "b");
    /* Types by name; ids in order of first sight: H100 (n3) got 1, A100 2. */
    assert_int_equal(c->ngpu_types, 2);
    assert_string_equal(c->gpu_types[0].name, A100);
    assert_int_equal(c->gpu_types[0].id, 2);
    assert_string_equal(c->gpu_types[1].name, H100);
    assert_int_equal(c->gpu_types[1].id, 1);
    assert_int_equal(c->nnodes, 3);
    static const struct {
        const char *name;
        uint32_t pool;
        enum sched_node_state state;
        uint32_t cpus, gpu_first, ngpus;
    } nodes[] = {{"n1", 0, SCHED_NODE_DOWN, 64, 0, 2},
                 {"n2", 0, SCHED_NODE_DRAINING, 32, 2, 1},
                 {"n3", 1, SCHED_NODE_UP, 64, 3, 4}};
    for (uint32_t n = 0; n < 3; n++) {
        assert_string_equal(c->nodes[n].name, nodes[n].name);
        assert_string_equal(cluster_view_node_name(&cl, n), nodes[n].name);
        assert_int_equal(c->nodes[n].pool, nodes[n].pool);
        assert_int_equal(c->nodes[n].state, nodes[n].state);
        assert_int_equal(c->nodes[n].cpus, nodes[n].cpus);
        assert_int_equal(c->nodes[n].gpu_first, nodes[n].gpu_first);
        assert_int_equal(c->nodes[n].ngpus, nodes[n].ngpus);
    }
    assert_null(cluster_view_node_name(&cl, 3));
    assert_int_equal(c->nodes[1].mem_mib, 262144);
    assert_int_equal(c->ngpus, 7);
    assert_int_equal(c->gpus[0].type, 1);
    assert_int_equal(c->gpus[0].mem_mib, 81920);
    assert_int_equal(c->gpus[0].nvlink_domain, 0);
    assert_int_equal(c->gpus[0].mig_slices, 7);
    assert_true(c->gpus[0].mig_enabled);
    assert_false(c->gpus[1].mig_enabled);
    assert_int_equal(c->gpus[2].type, 0);
    assert_int_equal(c->gpus[2].mem_mib, 40960);
    assert_int_equal(c->gpus[2].nvlink_domain, -1);
    assert_int_equal(cl.gpu_node[2], 1);
    assert_int_equal(cl.gpu_index[2], 5);
    assert_string_equal(cl.gpu_uuid[2], UUID(20));
    assert_int_equal(cl.gpu_node[6], 2);
    assert_string_equal(cl.gpu_uuid[6], UUID(33));
    /* Teams by name: ml's pool-wide 1.5 in pool a becomes one entry per type
     * there (A100, H100); its H100 entry in b stays. */
    assert_int_equal(c->nteams, 2);
    const struct sched_team *ml = &c->teams[0], *vision = &c->teams[1];
    assert_string_equal(ml->name, "ml");
    assert_int_equal(ml->id, 20);
    assert_int_equal(ml->weight, 2);
    assert_int_equal(ml->borrow_limit_milli, 4000);
    assert_int_equal(ml->nquotas, 3);
    const struct sched_quota want_ml[] = {{0, 0, 1500, -1}, {0, 1, 1500, -1}, {1, 1, 2000, 1000}};
    assert_memory_equal(ml->quotas, want_ml, sizeof(want_ml));
    /* vision: the pool-wide entry yields to its own H100 entry, and V100
     * (no node has it) is left out. */
    assert_int_equal(vision->id, 21);
    assert_int_equal(vision->nquotas, 2);
    const struct sched_quota want_vision[] = {{0, 0, 1000, -1}, {0, 1, 3000, -1}};
    assert_memory_equal(vision->quotas, want_vision, sizeof(want_vision));
    assert_ptr_equal(sched_team_quota(vision, 0, 1), &vision->quotas[1]);
    assert_int_equal(c->nclasses, 2);
    assert_string_equal(c->classes[0].name, "high");
    assert_int_equal(c->classes[0].order, 100);
    assert_true(c->classes[0].may_preempt);
    assert_false(c->classes[1].may_preempt);
    /* The cluster owns its strings: the model may go. */
    cluster_release(&m);
    assert_string_equal(c->teams[1].name, "vision");
    cluster_view_release(&cl);
    cluster_view_release(&cl);
    cluster_view_release(NULL);
}

static void test_type_ids_stay_when_a_type_goes_and_comes_back(void **state)
{
    (void)state;
    struct cluster m;
    fixture(&m);
    struct cluster_view cl;
    assert_int_equal(cluster_node_remove(&m, "n2"), 0); /* the only A100 node */
    assert_int_equal(cluster_view_build(&m, &cl, err, sizeof(err)), 0);
    assert_int_equal(cl.c.ngpu_types, 1);
    assert_string_equal(cl.c.gpu_types[0].name, H100);
    assert_int_equal(cl.c.gpu_types[0].id, 1);
    assert_int_equal(cl.c.gpus[2].type, 0);
    cluster_view_release(&cl);
    assert_int_equal(cluster_type_id_get(&m, A100)->id, 2); /* remembered */
    assert_int_equal(add(&m, NODE, 13, NODE_JSON("n4", "b", GPU(0, UUID(40), "B200", 184320))), 0);
    assert_int_equal(cluster_type_id_get(&m, "B200")->id, 3); /* never 2 again */
    assert_int_equal(add(&m, NODE, 14, NODE_JSON("n2", "a", GPU(0, UUID(20), A100, 40960))), 0);
    assert_int_equal(cluster_view_build(&m, &cl, err, sizeof(err)), 0);
    assert_int_equal(cl.c.ngpu_types, 3);
    const char *names[] = {A100, "B200", H100};
    const uint32_t ids[] = {2, 3, 1};
    for (uint32_t t = 0; t < 3; t++) {
        assert_string_equal(cl.c.gpu_types[t].name, names[t]);
        assert_int_equal(cl.c.gpu_types[t].id, ids[t]);
    }
    cluster_view_release(&cl);
    /* A replace that changes a node's type gives the new type its id. */
    union object o = {0};
    assert_int_equal(decode_text(NODE, NODE_JSON("n4", "b", GPU(0, UUID(40), "L4", 23034)), 0, &o),
                     0);
    assert_int_equal(cluster_node_replace(&m, &o.node, err, sizeof(err)), 0);
    assert_int_equal(cluster_type_id_get(&m, "L4")->id, 4);
    assert_int_equal(cluster_node_get(&m, "n4")->id, 13);
    assert_int_equal(m.ntype_ids, 4);
    cluster_release(&m);
}

static void test_type_id_set_restores_the_table_and_refuses_clashes(void **state)
{
    (void)state;
    struct cluster m;
    cluster_init(&m);
    assert_int_equal(cluster_type_id_set(&m, H100, 7, err, sizeof(err)), 0);
    assert_int_equal(cluster_type_id_set(&m, A100, 3, err, sizeof(err)), 0);
    assert_int_equal(cluster_type_id_set(&m, H100, 7, err, sizeof(err)), 0); /* again: fine */
    assert_int_equal(cluster_type_id_set(&m, H100, 8, err, sizeof(err)), GPO_EEXIST);
    assert_string_equal(err, "GPU type 'H100-80GB' has id 7, not 8");
    assert_int_equal(cluster_type_id_set(&m, "L4", 3, err, sizeof(err)), GPO_EEXIST);
    assert_string_equal(err, "GPU type id 3 is 'A100-40GB''s, not 'L4''s");
    assert_int_equal(cluster_type_id_set(&m, "L 4", 9, err, sizeof(err)), GPO_EINVAL);
    assert_int_equal(cluster_type_id_set(&m, "L4", 0, err, sizeof(err)), GPO_EINVAL);
    assert_int_equal(m.ntype_ids, 2);
    assert_string_equal(m.type_ids[0].name, A100);
    assert_int_equal(add(&m, POOL, 1, "{'name': 'a'}"), 0);
    assert_int_equal(add(&m, NODE, 2, NODE_JSON("n", "a", GPU(0, UUID(01), "L4", 23034))), 0);
    assert_int_equal(cluster_type_id_get(&m, "L4")->id, 8); /* after the highest restored */
    assert_int_equal(add(&m, NODE, 3, NODE_JSON("h", "a", GPU(0, UUID(02), H100, 81920))), 0);
    assert_int_equal(cluster_type_id_get(&m, H100)->id, 7);
    assert_int_equal(m.ntype_ids, 3);
    cluster_release(&m);
}

static void test_build_cluster_takes_an_empty_model_and_refuses_too_many_types(void **state)
{
    (void)state;
    struct cluster m;
    cluster_init(&m);
    struct cluster_view cl;
    assert_int_equal(cluster_view_build(&m, &cl, err, sizeof(err)), 0);
    assert_int_equal(cl.c.nnodes + cl.c.ngpus + cl.c.npools + cl.c.nteams + cl.c.ngpu_types, 0);
    assert_int_equal(sched_cluster_check(&cl.c, NULL), 0);
    cluster_view_release(&cl);
    assert_int_equal(add(&m, POOL, 1, "{'name': 'a'}"), 0);
    for (int i = 0; i <= SCHED_MAX_GPU_TYPES; i++) {
        char text[512];
        snprintf(text, sizeof(text),
                 NODE_JSON("n%d", "a",
                           "{'index': 0, 'uuid': '" UUID(01) "', 'gpu_type': 'T%d', "
                                                             "'mem_mib': 1}"),
                 i, i);
        assert_int_equal(add(&m, NODE, 10 + (uint32_t)i, text), 0);
    }
    assert_int_equal(cluster_view_build(&m, &cl, err, sizeof(err)), GPO_E2BIG);
    assert_string_equal(err, "257 GPU types, the scheduler takes at most 256");
    assert_int_equal(cluster_node_remove(&m, "n0"), 0);
    assert_int_equal(cluster_view_build(&m, &cl, err, sizeof(err)), 0);
    assert_int_equal(cl.c.ngpu_types, 256);
    cluster_view_release(&cl);
    cluster_release(&m);
}

/* ---- jobs and allocations -------------------------------------------------- */

static void test_job_request_resolves_names_to_core_indices(void **state)
{
    (void)state;
    struct cluster m;
    fixture(&m);
    struct cluster_view cl;
    assert_int_equal(cluster_view_build(&m, &cl, err, sizeof(err)), 0);
    struct jobspec spec = {.pool = "a",
                           .gpu_type = H100,
                           .gpus = 2,
                           .cpus = 8,
                           .mem_mib = 1000,
                           .min_gpu_mem_mib = 40000,
                           .time_limit_s = 3600,
                           .multi_node = true,
                           .checkpointable = true};
    struct sched_job j;
    assert_int_equal(cluster_job_request(&cl, &spec, "ml", "normal", &j, err, sizeof(err)), 0);
    assert_int_equal(j.team, 0);
    assert_int_equal(j.prio, 1);
    assert_int_equal(j.pool, 0);
    assert_int_equal(j.gpu_type, 1);
    assert_int_equal(j.gpus, 2);
    assert_int_equal(j.cpus, 8);
    assert_int_equal(j.mem_mib, 1000);
    assert_int_equal(j.min_gpu_mem_mib, 40000);
    assert_int_equal(j.time_limit_ms, 3600000);
    assert_true(j.multi_node && j.checkpointable);
    assert_int_equal(j.id, 0);
    assert_int_equal(j.submit_ms, 0);
    /* The job's own team and class win; no pool or type means any. */
    struct jobspec own = {.team = "vision", .priority = "high", .gpu_milli = 250, .cpus = 1};
    assert_int_equal(cluster_job_request(&cl, &own, "ml", "normal", &j, err, sizeof(err)), 0);
    assert_int_equal(j.team, 1);
    assert_int_equal(j.prio, 0);
    assert_int_equal(j.pool, SCHED_ANY);
    assert_int_equal(j.gpu_type, SCHED_ANY);
    assert_int_equal(j.gpu_milli, 250);
    cluster_view_release(&cl);
    cluster_release(&m);
}

static void test_job_request_names_what_it_cannot_resolve(void **state)
{
    (void)state;
    struct cluster m;
    fixture(&m);
    struct cluster_view cl;
    assert_int_equal(cluster_view_build(&m, &cl, err, sizeof(err)), 0);
    static const struct {
        struct jobspec spec;
        const char *user_team, *default_class, *msg;
    } cases[] = {
        {{.pool = "gpu-a"}, "ml", "normal", "unknown pool 'gpu-a'"},
        {{.gpu_type = "B200"},
         "ml",
         "normal",
         "unknown GPU type 'B200' (known: A100-40GB, H100-80GB)"},
        {{.team = "nlp"}, "ml", "normal", "unknown team 'nlp'"},
        {{0}, "nlp", "normal", "unknown team 'nlp'"},
        {{.priority = "low"}, "ml", "normal", "unknown priority class 'low' (known: high, normal)"},
        {{0}, NULL, "normal", "no team: the job names none and its user has none"},
        {{0}, "ml", NULL, "no priority class: the job names none and there is no default"},
        {{.time_limit_s = -1}, "ml", "normal", "field 'time_limit_s': -1 is out of range"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct sched_job j = {.id = 99};
        int rc = cluster_job_request(&cl, &cases[i].spec, cases[i].user_team,
                                     cases[i].default_class, &j, err, sizeof(err));
        if (rc != GPO_EINVAL || strcmp(err, cases[i].msg) != 0)
            fail_msg("case %zu: rc %d '%s', want '%s'", i, rc, err, cases[i].msg);
        assert_int_equal(j.id, 99); /* untouched */
    }
    cluster_view_release(&cl);
    cluster_release(&m);
}

/* The core's MIG request: the catalogue types with the profile (narrowed by
 * the job's GPU type), or those whose smallest profile holds the memory; a
 * profile no GPU type of the cluster has is the job's wait reason. */
static void test_job_request_resolves_mig_profiles_per_catalogue_type(void **state)
{
    (void)state;
    struct cluster m;
    fixture(&m); /* A100-40GB and H100-80GB nodes */
    struct cluster_view cl;
    assert_int_equal(cluster_view_build(&m, &cl, err, sizeof(err)), 0);
    const struct mig_type *a40 = mig_type_find("A100-40GB"), *a80 = mig_type_find("A100-80GB");
    const struct mig_type *h100 = mig_type_find("H100-80GB");
    struct sched_job j;

    struct jobspec any = {.mig_profile = "1g.10gb", .cpus = 1};
    assert_int_equal(cluster_job_request(&cl, &any, "ml", "normal", &j, err, sizeof(err)), 0);
    assert_int_equal(j.mig_types, (1u << a40->id) | (1u << a80->id) | (1u << h100->id));
    assert_int_equal(j.mig_profile[a40->id], mig_profile_lookup(a40, "1g.10gb", NULL, 0));
    assert_int_equal(j.mig_profile[h100->id], mig_profile_lookup(h100, "1g.10gb", NULL, 0));
    assert_string_equal(h100->profiles[j.mig_profile[h100->id]].name, "1g.10gb");
    assert_true(sched_job_mig_only(&j) && sched_job_wants_gpu(&j));
    assert_int_equal(j.gpus + j.gpu_milli + (int64_t)j.gpu_mem_mib, 0);

    struct jobspec typed = {.mig_profile = "1g.10gb", .gpu_type = "h100", .cpus = 1};
    assert_int_equal(cluster_job_request(&cl, &typed, "ml", "normal", &j, err, sizeof(err)), 0);
    assert_int_equal(j.mig_types, 1u << h100->id);

    /* Memory: every type with a profile that holds it, and still a share. */
    struct jobspec mem = {.gpu_mem_mib = 9000, .cpus = 1};
    assert_int_equal(cluster_job_request(&cl, &mem, "ml", "normal", &j, err, sizeof(err)), 0);
    assert_int_equal(j.gpu_mem_mib, 9000);
    assert_false(sched_job_mig_only(&j));
    for (unsigned t = 0; t < MIG_NTYPES; t++) {
        const struct mig_type *mt = mig_type_at(t);
        int k = mig_profile_for_mem(mt, 9000, NULL, 0);
        assert_true(k >= 0);
        assert_true(j.mig_types & (1u << t));
        assert_int_equal(j.mig_profile[t], k);
        assert_true(mt->profiles[k].mem_mib >= 9000);
    }
    struct jobspec huge = {.gpu_mem_mib = 200000, .cpus = 1};
    assert_int_equal(cluster_job_request(&cl, &huge, "ml", "normal", &j, err, sizeof(err)), 0);
    assert_int_equal(j.mig_types, 0);
    struct jobspec none = {.gpus = 1, .cpus = 1};
    assert_int_equal(cluster_job_request(&cl, &none, "ml", "normal", &j, err, sizeof(err)), 0);
    assert_int_equal(j.mig_types, 0);

    /* A profile only an absent type has, or not on the job's type: it waits. */
    struct jobspec h200_only = {.mig_profile = "1g.18gb", .cpus = 1};
    j.id = 99;
    assert_int_equal(cluster_job_request(&cl, &h200_only, "ml", "normal", &j, err, sizeof(err)),
                     GPO_EINVAL);
    assert_string_equal(err, "MIG profile '1g.18gb': no GPU type of the cluster has it (its MIG "
                             "GPU types: A100-40GB, H100-80GB; the profile's: H200-141GB)");
    assert_int_equal(j.id, 99);
    struct jobspec wrong_type = {.mig_profile = "2g.20gb", .gpu_type = "A100-40GB", .cpus = 1};
    assert_int_equal(cluster_job_request(&cl, &wrong_type, "ml", "normal", &j, err, sizeof(err)),
                     GPO_EINVAL);
    assert_string_equal(err, "MIG profile '2g.20gb': no GPU type of the cluster has it (its MIG "
                             "GPU types: A100-40GB, H100-80GB; the profile's: none)");
    cluster_view_release(&cl);
    cluster_release(&m);
}

/* "mig" of a pool: off in its three spellings, a named or counted static
 * layout (profiles in the catalogue's spelling), the planner with its
 * defaults or its settings as seconds or duration strings; to_json gives it
 * back in a form that decodes to the same. */
static void test_pool_mig_takes_off_static_and_dynamic(void **state)
{
    (void)state;
    static const char *const off[] = {"{'name': 'a'}", "{'name': 'a', 'mig': 'off'}",
                                      "{'name': 'a', 'mig': false}", "{'name': 'a', 'mig': null}"};
    for (size_t i = 0; i < ARRAY_LEN(off); i++) {
        union object o;
        assert_int_equal(decode_text(POOL, off[i], 0, &o), 0);
        assert_int_equal(o.pool.mig.mode, CLUSTER_MIG_OFF);
        json_t *j = cluster_pool_to_json(&o.pool, 0);
        assert_null(json_object_get(j, "mig")); /* a pool without MIG reads as it always has */
        json_decref(j);
        release(POOL, &o);
    }
    static const struct {
        const char *json, *shown;
    } on[] = {
        {"{'name': 'a', 'mig': {'layout': 'all-1g.10gb'}}", "{'layout': 'all-1g.10gb'}"},
        {"{'name': 'a', 'mig': {'layout': {'MIG 1g.10gb': 2, '2g.20gb': 1, 'mig-3g.40gb': 1}}}",
         "{'layout': {'1g.10gb': 2, '2g.20gb': 1, '3g.40gb': 1}}"},
        {"{'name': 'a', 'mig': {'dynamic': true}}",
         "{'dynamic': true, 'settle': '30s', 'hold': '5m', 'min_interval': '5m', 'keep_free': 0,"
         " 'max_repartitions': 0}"},
        {"{'name': 'a', 'mig': {'dynamic': true, 'settle': 90, 'hold': '00:10:00',"
         " 'min_interval': '2h', 'keep_free': 1, 'max_repartitions': 4}}",
         "{'dynamic': true, 'settle': '90s', 'hold': '10m', 'min_interval': '2h', 'keep_free': 1,"
         " 'max_repartitions': 4}"},
        {"{'name': 'a', 'mig': {'dynamic': true, 'settle': 0, 'hold': '1d'}}",
         "{'dynamic': true, 'settle': '0s', 'hold': '1d', 'min_interval': '5m', 'keep_free': 0,"
         " 'max_repartitions': 0}"},
    };
    for (size_t i = 0; i < ARRAY_LEN(on); i++) {
        union object o, again;
        if (decode_text(POOL, on[i].json, 0, &o) != 0)
            fail_msg("%s: %s", on[i].json, err);
        json_t *j = cluster_pool_to_json(&o.pool, 0), *want = parse(on[i].shown);
        if (!json_equal(json_object_get(j, "mig"), want)) {
            char *got = json_dumps(json_object_get(j, "mig"), JSON_SORT_KEYS);
            fail_msg("%s: shown as %s", on[i].json, got);
        }
        assert_int_equal(decode(POOL, j, 0, &again), 0);
        json_t *j2 = cluster_pool_to_json(&again.pool, 0);
        assert_true(json_equal(j, j2));
        json_decref(j);
        json_decref(j2);
        json_decref(want);
        release(POOL, &again);
        release(POOL, &o);
    }
    union object o;
    assert_int_equal(decode_text(POOL, on[1].json, 0, &o), 0);
    assert_int_equal(o.pool.mig.mode, CLUSTER_MIG_STATIC);
    assert_null(o.pool.mig.layout);
    assert_int_equal(o.pool.mig.ncounts, 3);
    assert_string_equal(o.pool.mig.counts[0].profile, "1g.10gb");
    assert_int_equal(o.pool.mig.counts[0].count, 2);
    /* The layout it means on a type: the core's placement of those counts. */
    struct mig_instance inst[MIG_MAX_INSTANCES];
    size_t n;
    bool enabled;
    const struct mig_type *h100 = mig_type_find(H100), *a40 = mig_type_find(A100);
    assert_int_equal(cluster_mig_layout(&o.pool.mig, h100, inst, &n, &enabled, err, sizeof(err)),
                     0);
    assert_int_equal(n, 4);
    assert_true(enabled);
    assert_int_equal(mig_layout_check(h100, inst, n, err, sizeof(err)), 0);
    assert_int_equal(cluster_mig_layout(&o.pool.mig, a40, inst, &n, &enabled, err, sizeof(err)),
                     GPO_ENOENT); /* an A100-40GB has no 2g.20gb */
    struct cluster_mig copy;
    assert_int_equal(cluster_mig_copy(&o.pool.mig, &copy), 0);
    assert_ptr_not_equal(copy.counts, o.pool.mig.counts);
    release(POOL, &o);
    assert_string_equal(copy.counts[2].profile, "3g.40gb"); /* stands alone: ASan would tell */
    cluster_mig_release(&copy);
    cluster_mig_release(&copy);
    cluster_mig_release(NULL);

    assert_int_equal(
        decode_text(POOL, "{'name': 'a', 'mig': {'dynamic': true, 'hold': 600}}", 0, &o), 0);
    assert_int_equal(o.pool.mig.mode, CLUSTER_MIG_DYNAMIC);
    assert_int_equal(o.pool.mig.hold_ms, 600000);
    assert_int_equal(o.pool.mig.settle_ms, 30000);
    assert_int_equal(o.pool.mig.min_interval_ms, 300000);
    release(POOL, &o);
}

/* Against the pool's nodes: a static layout must be valid on at least one
 * MIG type they have; a refused replacement leaves the pool as it was. */
static void test_pool_mig_layout_is_checked_against_its_nodes_types(void **state)
{
    (void)state;
    struct cluster m;
    fixture(&m); /* pool a: H100 and A100-40GB nodes; pool b: H100 */
    union object o;
    /* 1g.5gb is an A100-40GB profile: fine in a, not in b (H100 only). */
    assert_int_equal(decode_text(POOL, "{'name': 'a', 'mig': {'layout': {'1g.5gb': 7}}}", 0, &o),
                     0);
    assert_int_equal(cluster_pool_mig_check(&m, &o.pool, err, sizeof(err)), 0);
    release(POOL, &o);
    assert_int_equal(decode_text(POOL, "{'name': 'b', 'mig': {'layout': {'1g.5gb': 7}}}", 0, &o),
                     0);
    assert_int_equal(cluster_pool_mig_check(&m, &o.pool, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "field 'mig.layout': H100-80GB has no 1g.5gb");
    set_id(POOL, &o, 1);
    assert_int_equal(cluster_pool_replace(&m, &o.pool, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "field 'mig.layout': H100-80GB has no 1g.5gb");
    release(POOL, &o);
    const struct cluster_pool *b = cluster_pool_get(&m, "b");
    assert_int_equal(b->mig.mode, CLUSTER_MIG_OFF); /* unchanged */
    /* Valid on the H100s of b: stored. */
    assert_int_equal(decode_text(POOL, "{'name': 'b', 'mig': {'layout': 'all-3g.40gb'}}", 0, &o),
                     0);
    set_id(POOL, &o, 1);
    assert_int_equal(cluster_pool_replace(&m, &o.pool, err, sizeof(err)), 0);
    release(POOL, &o);
    b = cluster_pool_get(&m, "b");
    assert_int_equal(b->mig.mode, CLUSTER_MIG_STATIC);
    assert_string_equal(b->mig.layout, "all-3g.40gb");
    /* Dynamic and off need no type. */
    assert_int_equal(decode_text(POOL, "{'name': 'b', 'mig': {'dynamic': true}}", 0, &o), 0);
    assert_int_equal(cluster_pool_mig_check(&m, &o.pool, err, sizeof(err)), 0);
    release(POOL, &o);
    cluster_release(&m);
}

/* A node's own "mig": absent or null is its pool's, "off" an override; the
 * record round-trips with it; an admin's setting is held to the node's GPU
 * type, a stored one only to the catalogue (so that it always loads). */
#define GPU_H100 GPU(0, UUID(50), H100, 81920)

static void test_node_mig_overrides_its_pool_and_is_held_to_its_type(void **state)
{
    (void)state;
    union object o;
    assert_int_equal(decode_text(NODE, NODE_JSON("n", "a", GPU_H100), 0, &o), 0);
    assert_null(o.node.mig);
    assert_int_equal(cluster_node_mig_check(&o.node, NULL, err, sizeof(err)), 0);
    release(NODE, &o);
    static const char *const forms[] = {"'off'", "{'layout': 'all-1g.10gb'}",
                                        "{'dynamic': true, 'hold': '10m'}"};
    for (size_t i = 0; i < ARRAY_LEN(forms); i++) {
        char text[512];
        snprintf(text, sizeof(text),
                 "{'name': 'n', 'pool': 'a', 'cpus': 64, 'mem_mib': 524288, 'mig': %s,"
                 " 'gpus': [" GPU_H100 "]}",
                 forms[i]);
        assert_int_equal(decode_text(NODE, text, 0, &o), 0);
        assert_non_null(o.node.mig);
        assert_int_equal(o.node.mig->mode, (enum cluster_mig_mode)i);
        assert_int_equal(cluster_node_mig_check(&o.node, o.node.mig, err, sizeof(err)), 0);
        set_id(NODE, &o, 5);
        json_t *j = cluster_node_to_json(&o.node, CLUSTER_STORED);
        union object again;
        assert_int_equal(decode(NODE, j, CLUSTER_STORED, &again), 0);
        json_t *j2 = cluster_node_to_json(&again.node, CLUSTER_STORED);
        assert_true(json_equal(j, j2));
        assert_true(json_equal(json_object_get(j, "mig"), json_object_get(j2, "mig")));
        json_decref(j);
        json_decref(j2);
        release(NODE, &again);
        release(NODE, &o);
    }
    /* A layout an H100 cannot hold, and a layout on a GPU without MIG. */
    assert_int_equal(decode_text(NODE,
                                 "{'name': 'n', 'pool': 'a', 'cpus': 64, 'mem_mib': 524288,"
                                 " 'mig': {'layout': {'1g.5gb': 2}}, 'gpus': [" GPU_H100 "]}",
                                 0, &o),
                     0); /* the catalogue has 1g.5gb: a stored record loads */
    assert_int_equal(cluster_node_mig_check(&o.node, o.node.mig, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "field 'mig.layout': H100-80GB has no 1g.5gb");
    release(NODE, &o);
    assert_int_equal(decode_text(NODE,
                                 "{'name': 'l', 'pool': 'a', 'cpus': 8, 'mem_mib': 65536,"
                                 " 'gpus': [" GPU(0, UUID(90), "L40S", 46068) "]}",
                                 0, &o),
                     0);
    struct cluster_mig *m = NULL;
    json_t *v = parse("{'layout': 'all-balanced'}");
    assert_int_equal(cluster_node_mig_decode(v, &m, err, sizeof(err)), 0);
    json_decref(v);
    assert_int_equal(cluster_node_mig_check(&o.node, m, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "field 'mig': node 'l' has no MIG GPU (its GPUs: L40S; MIG GPU "
                             "types: A100-40GB, A100-80GB, H100-80GB, H200-141GB)");
    cluster_mig_release(m);
    free(m);
    release(NODE, &o);
    /* A bad setting is refused with the field named. */
    assert_int_equal(decode_text(NODE,
                                 "{'name': 'n', 'pool': 'a', 'cpus': 64, 'mem_mib': 524288,"
                                 " 'mig': {'layout': 'all-9g.1gb'}, 'gpus': []}",
                                 0, &o),
                     GPO_EINVAL);
    assert_string_equal(err, "field 'mig.layout': no MIG layout 'all-9g.1gb' on any MIG GPU type "
                             "of the catalogue (named layouts: all-disabled, all-enabled, "
                             "all-balanced, and all- with a profile of the type, as all-1g.10gb)");
}

static void test_alloc_gpus_gives_node_uuid_index_and_share(void **state)
{
    (void)state;
    struct cluster m;
    fixture(&m);
    struct cluster_view cl;
    assert_int_equal(cluster_view_build(&m, &cl, err, sizeof(err)), 0);
    struct sched_share shares[] = {{.gpu = 6, .milli = 1000, .mem_mib = 81920},
                                   {.gpu = 2, .milli = 250, .mem_mib = 10240}};
    struct sched_alloc alloc = {.shares = shares, .nshares = 2};
    struct cluster_alloc_gpu *gpus = NULL;
    size_t n = 0;
    assert_int_equal(cluster_view_alloc_gpus(&cl, &alloc, &gpus, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(gpus[0].node, "n3");
    assert_string_equal(gpus[0].uuid, UUID(33));
    assert_int_equal(gpus[0].index, 3);
    assert_int_equal(gpus[0].milli, 1000);
    assert_string_equal(gpus[1].node, "n2");
    assert_string_equal(gpus[1].uuid, UUID(20));
    assert_int_equal(gpus[1].index, 5);
    assert_int_equal(gpus[1].milli, 250);
    assert_int_equal(gpus[1].mem_mib, 10240);
    free(gpus);
    shares[1].gpu = 7;
    gpus = NULL;
    assert_int_equal(cluster_view_alloc_gpus(&cl, &alloc, &gpus, &n), GPO_EINVAL);
    assert_null(gpus);
    alloc.nshares = 0;
    assert_int_equal(cluster_view_alloc_gpus(&cl, &alloc, &gpus, &n), 0);
    assert_non_null(gpus);
    assert_int_equal(n, 0);
    free(gpus);
    cluster_view_release(&cl);
    cluster_release(&m);
}

/* settings: {"private_data": ...} decoded, as the server keeps it. */
static int settings_of(const char *text, struct cluster_settings *ret, char *msg, size_t errlen)
{
    json_t *o = json_loads(text, 0, NULL);
    assert_non_null(o);
    int rc = cluster_settings_decode(o, ret, msg, errlen);
    json_decref(o);
    return rc;
}

/* The settings' JSON, compact. */
static void assert_settings_json(const struct cluster_settings *set, const char *want)
{
    json_t *o = cluster_settings_to_json(set);
    char *text = json_dumps(o, JSON_COMPACT);
    assert_string_equal(text, want);
    free(text);
    json_decref(o);
}

static void test_settings_keep_everything_private_unless_opened(void **state)
{
    (void)state;
    struct cluster_settings zero = {0}, set;
    char msg[256];
    for (unsigned bit = 1; bit <= CLUSTER_PRIVATE_TEAMS; bit <<= 1) {
        assert_true(cluster_settings_private(&zero, (enum cluster_private)bit));
        assert_non_null(cluster_private_name((enum cluster_private)bit));
    }
    assert_null(cluster_private_name((enum cluster_private)(1u << 9)));
    assert_settings_json(&zero, "{\"private_data\":true}");
    assert_int_equal(settings_of("{}", &set, msg, sizeof(msg)), 0);
    assert_int_equal(set.open, 0);
    assert_int_equal(settings_of("{\"private_data\": false}", &set, msg, sizeof(msg)), 0);
    assert_int_equal(set.open, CLUSTER_PRIVATE_ALL);
    assert_settings_json(&set, "{\"private_data\":false}");
    assert_int_equal(settings_of("{\"private_data\": []}", &set, msg, sizeof(msg)), 0);
    assert_int_equal(set.open, CLUSTER_PRIVATE_ALL);
    /* A list keeps those private and opens the rest, listed in table order. */
    assert_int_equal(
        settings_of("{\"private_data\": [\"teams\", \"jobs\"]}", &set, msg, sizeof(msg)), 0);
    assert_true(cluster_settings_private(&set, CLUSTER_PRIVATE_JOBS));
    assert_true(cluster_settings_private(&set, CLUSTER_PRIVATE_TEAMS));
    assert_false(cluster_settings_private(&set, CLUSTER_PRIVATE_USAGE));
    assert_false(cluster_settings_private(&set, CLUSTER_PRIVATE_NODES));
    assert_settings_json(&set, "{\"private_data\":[\"jobs\",\"teams\"]}");
    struct cluster_settings back;
    json_t *o = cluster_settings_to_json(&set);
    assert_int_equal(cluster_settings_decode(o, &back, msg, sizeof(msg)), 0);
    json_decref(o);
    assert_int_equal(back.open, set.open);
}

static void test_settings_refuse_what_they_do_not_know(void **state)
{
    (void)state;
    struct cluster_settings set = {.open = 5};
    char msg[256];
    static const struct {
        const char *text, *message;
    } bad[] = {
        {"{\"private_data\": \"jobs\"}", "field 'private_data': expected true, false, or a list"},
        {"{\"private_data\": [\"jobs\", \"gpus\"]}", "field 'private_data[1]': expected jobs"},
        {"{\"private_data\": [\"jobs\", \"jobs\"]}", "field 'private_data[1]': 'jobs' twice"},
        {"{\"private_data\": [3]}", "field 'private_data[0]'"},
        {"{\"privatedata\": true}", "unknown field 'privatedata'"},
        {"[]", "expected an object"},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        msg[0] = '\0';
        assert_int_equal(settings_of(bad[k].text, &set, msg, sizeof(msg)), GPO_EINVAL);
        if (!strstr(msg, bad[k].message))
            fail_msg("%s: got '%s'", bad[k].text, msg);
        assert_int_equal(set.open, 5); /* untouched */
    }
}

static void test_metrics_is_a_role_that_needs_no_team(void **state)
{
    (void)state;
    json_t *o = json_loads(
        "{\"name\": \"prometheus\", \"unix_user\": \"nobody\", \"role\": \"metrics\"}", 0, NULL);
    struct cluster_user u = {0};
    char msg[256] = "";
    assert_int_equal(cluster_user_decode(o, 0, &u, msg, sizeof(msg)), 0);
    json_decref(o);
    assert_int_equal(u.role, CLUSTER_ROLE_METRICS);
    assert_null(u.team);
    assert_string_equal(cluster_role_name(u.role), "metrics");
    cluster_user_release(&u);
}

/* A pool's aliases and its nodes' features: decoded strictly, written back
 * as read, every rule with the field at fault. */
static void test_pool_aliases_and_node_features_decode_strictly_and_round_trip(void **state)
{
    (void)state;
    union object o = {0}, back = {0};
    assert_int_equal(decode_text(POOL,
                                 "{'name': 'h100', 'aliases': ['gpu', 'batch'], 'node_features': "
                                 "[{'node': 'n1', 'features': ['ib', 'nvme']}, {'node': 'n2', "
                                 "'features': ['ib']}]}",
                                 0, &o),
                     0);
    assert_int_equal(o.pool.naliases, 2);
    assert_string_equal(o.pool.aliases[1], "batch");
    assert_int_equal(o.pool.nnode_features, 2);
    assert_string_equal(o.pool.node_features[0].features[1], "nvme");
    json_t *j = cluster_pool_to_json(&o.pool, 0);
    assert_int_equal(decode(POOL, j, 0, &back), 0);
    json_t *j2 = cluster_pool_to_json(&back.pool, 0);
    assert_true(json_equal(j, j2));
    json_decref(j);
    json_decref(j2);
    cluster_pool_release(&o.pool);
    cluster_pool_release(&back.pool);
    /* A pool without them reads as it always has. */
    assert_int_equal(decode_text(POOL, "{'name': 'a'}", 0, &o), 0);
    j = cluster_pool_to_json(&o.pool, 0);
    assert_null(json_object_get(j, "aliases"));
    assert_null(json_object_get(j, "node_features"));
    json_decref(j);
    cluster_pool_release(&o.pool);
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"{'name': 'a', 'aliases': ['a']}", "field 'aliases[0]': 'a' is the pool's own name"},
        {"{'name': 'a', 'aliases': ['b', 'b']}", "field 'aliases[1]': 'b' is listed twice"},
        {"{'name': 'a', 'aliases': ['B']}", "field 'aliases[0]': 'B' is not a valid name"},
        {"{'name': 'a', 'node_features': [{'node': 'n1', 'features': ['a b']}]}",
         "field 'node_features[0].features[0]': 'a b' is not a valid feature name"},
        {"{'name': 'a', 'node_features': [{'node': 'n1', 'features': ['x', 'x']}]}",
         "field 'node_features[0].features[1]': 'x' is listed twice"},
        {"{'name': 'a', 'node_features': [{'node': 'n1', 'features': ['x']}, {'node': 'n1', "
         "'features': ['y']}]}",
         "field 'node_features[1].node': 'n1' is also in entry 0"},
        {"{'name': 'a', 'node_features': [{'nodes': 'n1', 'features': ['x']}]}",
         "unknown field 'node_features[0].nodes' (did you mean 'node'?)"},
        {"{'name': 'a', 'node_features': [{'node': 'n1'}]}", "missing required field"},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        int rc = decode_text(POOL, bad[i].json, 0, &o);
        if (rc != GPO_EINVAL || strncmp(err, bad[i].msg, strlen(bad[i].msg)) != 0)
            fail_msg("case %zu: rc %d '%s', want '%s'", i, rc, err, bad[i].msg);
    }
}

/* "sharing": none (the default, written out as such, so that a file that
 * says it applies as unchanged) or mps; any other value is refused naming
 * the field and the values it takes. */
static void test_pool_sharing_is_none_or_mps(void **state)
{
    (void)state;
    union object o = {0}, back = {0};
    assert_int_equal(decode_text(POOL, "{'name': 'a'}", 0, &o), 0);
    assert_int_equal(o.pool.sharing, CLUSTER_SHARING_NONE);
    json_t *j = cluster_pool_to_json(&o.pool, 0);
    assert_string_equal(json_string_value(json_object_get(j, "sharing")), "none");
    json_decref(j);
    cluster_pool_release(&o.pool);
    assert_int_equal(decode_text(POOL, "{'name': 'a', 'sharing': 'none'}", 0, &o), 0);
    assert_int_equal(o.pool.sharing, CLUSTER_SHARING_NONE);
    cluster_pool_release(&o.pool);
    assert_int_equal(decode_text(POOL, "{'name': 'a', 'sharing': 'mps'}", 0, &o), 0);
    assert_int_equal(o.pool.sharing, CLUSTER_SHARING_MPS);
    j = cluster_pool_to_json(&o.pool, 0);
    assert_string_equal(json_string_value(json_object_get(j, "sharing")), "mps");
    assert_int_equal(decode(POOL, j, 0, &back), 0);
    assert_int_equal(back.pool.sharing, CLUSTER_SHARING_MPS);
    json_decref(j);
    cluster_pool_release(&o.pool);
    cluster_pool_release(&back.pool);
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"{'name': 'a', 'sharing': 'mig'}", "field 'sharing': 'mig' is not one of none, mps"},
        {"{'name': 'a', 'sharing': 'MPS'}", "field 'sharing': 'MPS' is not one of none, mps"},
        {"{'name': 'a', 'sharing': true}", "field 'sharing'"},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        int rc = decode_text(POOL, bad[i].json, 0, &o);
        if (rc != GPO_EINVAL || strncmp(err, bad[i].msg, strlen(bad[i].msg)) != 0)
            fail_msg("case %zu: rc %d '%s', want '%s'", i, rc, err, bad[i].msg);
    }
    struct cluster_pool p = {.name = "a", .sharing = (enum cluster_sharing)7};
    assert_int_equal(cluster_pool_check(&p, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "field 'sharing': expected none or mps");
}

/* An alias is no other pool's name or alias; a job's pool resolves by
 * either. */
static void test_aliases_are_unique_across_pools_and_resolve(void **state)
{
    (void)state;
    struct cluster m;
    fixture(&m);
    union object o = {0};
    assert_int_equal(decode_text(POOL, "{'name': 'a', 'aliases': ['gpu']}", 0, &o), 0);
    assert_int_equal(cluster_pool_replace(&m, &o.pool, err, sizeof(err)), 0);
    assert_ptr_equal(cluster_pool_resolve(&m, "gpu"), cluster_pool_get(&m, "a"));
    assert_ptr_equal(cluster_pool_resolve(&m, "b"), cluster_pool_get(&m, "b"));
    assert_null(cluster_pool_resolve(&m, "c"));
    assert_int_equal(decode_text(POOL, "{'name': 'b', 'aliases': ['gpu']}", 0, &o), 0);
    assert_int_equal(cluster_pool_replace(&m, &o.pool, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "'gpu' is already an alias of pool 'a'");
    cluster_pool_release(&o.pool);
    assert_int_equal(decode_text(POOL, "{'name': 'c', 'aliases': ['b']}", 0, &o), 0);
    o.pool.id = 7;
    assert_int_equal(cluster_pool_add(&m, &o.pool, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "field 'aliases': 'b' is the name of another pool");
    cluster_pool_release(&o.pool);
    assert_int_equal(m.npools, 2);
    cluster_release(&m);
}

/* The view numbers the cluster's features by name; a node has the bits its
 * pool gives it; a constraint becomes OR of AND-masks. */
static void test_view_maps_features_to_bits_and_constraints_to_masks(void **state)
{
    (void)state;
    struct cluster m;
    fixture(&m);
    union object o = {0};
    assert_int_equal(decode_text(POOL,
                                 "{'name': 'a', 'node_features': [{'node': 'n2', 'features': "
                                 "['ib', 'bigmem']}, {'node': 'n3', 'features': ['nvme']}]}",
                                 0, &o),
                     0);
    assert_int_equal(cluster_pool_replace(&m, &o.pool, err, sizeof(err)), 0);
    assert_int_equal(decode_text(POOL,
                                 "{'name': 'b', 'node_features': [{'node': 'n3', 'features': "
                                 "['ib']}]}",
                                 0, &o),
                     0);
    assert_int_equal(cluster_pool_replace(&m, &o.pool, err, sizeof(err)), 0);
    struct cluster_view cl;
    assert_int_equal(cluster_view_build(&m, &cl, err, sizeof(err)), 0);
    assert_int_equal(cl.nfeatures, 3);
    assert_string_equal(cl.features[0], "bigmem");
    assert_string_equal(cl.features[1], "ib");
    assert_string_equal(cl.features[2], "nvme");
    assert_int_equal(cl.c.nodes[0].features, 0);       /* n1: none given */
    assert_int_equal(cl.c.nodes[1].features, 1u | 2u); /* n2 in a: bigmem, ib */
    assert_int_equal(cl.c.nodes[2].features, 2u);      /* n3 is in b: ib; a's nvme is not its */
    struct jobspec spec = {.constraint = "ib&bigmem|nvme", .exclusive = true, .nodes = 2};
    struct sched_job j;
    assert_int_equal(cluster_job_request(&cl, &spec, "ml", "normal", &j, err, sizeof(err)), 0);
    assert_int_equal(j.nconstraint, 2);
    assert_int_equal(j.constraint[0], 3u);
    assert_int_equal(j.constraint[1], 4u);
    assert_true(j.exclusive);
    assert_int_equal(j.nodes, 2);
    spec.constraint = "ib&gpu";
    assert_int_equal(cluster_job_request(&cl, &spec, "ml", "normal", &j, err, sizeof(err)),
                     GPO_EINVAL);
    assert_string_equal(err, "field 'constraint': unknown feature 'gpu' (known: bigmem, ib, nvme)");
    spec.constraint = "a|b|c|d|e";
    assert_int_equal(cluster_job_request(&cl, &spec, "ml", "normal", &j, err, sizeof(err)),
                     GPO_EINVAL);
    cluster_view_release(&cl);
    cluster_release(&m);
}

/* Users write h100 for H100-80GB: case does not matter, and the part before
 * the first '-' names a type when it names one only. */
static void test_gpu_type_match_takes_case_and_short_names(void **state)
{
    (void)state;
    const char *types[] = {"A100-40GB", "H100-80GB", "H100-94GB", "L4"};
    size_t at = 99;
    assert_int_equal(cluster_gpu_type_match(types, 4, "H100-94GB", &at, err, sizeof(err)), 0);
    assert_int_equal(at, 2);
    assert_int_equal(cluster_gpu_type_match(types, 4, "h100-80gb", &at, err, sizeof(err)), 0);
    assert_int_equal(at, 1);
    assert_int_equal(cluster_gpu_type_match(types, 4, "a100", &at, err, sizeof(err)), 0);
    assert_int_equal(at, 0);
    assert_int_equal(cluster_gpu_type_match(types, 4, "l4", &at, err, sizeof(err)), 0);
    assert_int_equal(at, 3);
    at = 99;
    assert_int_equal(cluster_gpu_type_match(types, 4, "h100", &at, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "GPU type 'h100' matches several: H100-80GB, H100-94GB; give one");
    assert_int_equal(cluster_gpu_type_match(types, 4, "b200", &at, err, sizeof(err)), GPO_ENOENT);
    assert_string_equal(err,
                        "unknown GPU type 'b200' (known: A100-40GB, H100-80GB, H100-94GB, L4)");
    assert_int_equal(cluster_gpu_type_match(types, 4, "A100-40", &at, err, sizeof(err)),
                     GPO_ENOENT);
    assert_int_equal(at, 99);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_kind_decodes_with_its_defaults),
        cmocka_unit_test(test_team_decodes_gpus_as_milli_with_defaults),
        cmocka_unit_test(test_decode_errors_name_the_field),
        cmocka_unit_test(test_too_many_quotas_and_gpus_are_refused),
        cmocka_unit_test(test_to_json_round_trips_every_kind_in_both_forms),
        cmocka_unit_test(test_check_refuses_hand_built_objects),
        cmocka_unit_test(test_model_keeps_names_sorted_unique_and_ids_fixed),
        cmocka_unit_test(test_check_refs_reports_the_first_dangling_reference),
        cmocka_unit_test(test_build_cluster_translates_the_model_field_by_field),
        cmocka_unit_test(test_type_ids_stay_when_a_type_goes_and_comes_back),
        cmocka_unit_test(test_type_id_set_restores_the_table_and_refuses_clashes),
        cmocka_unit_test(test_build_cluster_takes_an_empty_model_and_refuses_too_many_types),
        cmocka_unit_test(test_job_request_resolves_names_to_core_indices),
        cmocka_unit_test(test_job_request_names_what_it_cannot_resolve),
        cmocka_unit_test(test_job_request_resolves_mig_profiles_per_catalogue_type),
        cmocka_unit_test(test_pool_mig_takes_off_static_and_dynamic),
        cmocka_unit_test(test_pool_mig_layout_is_checked_against_its_nodes_types),
        cmocka_unit_test(test_node_mig_overrides_its_pool_and_is_held_to_its_type),
        cmocka_unit_test(test_alloc_gpus_gives_node_uuid_index_and_share),
        cmocka_unit_test(test_settings_keep_everything_private_unless_opened),
        cmocka_unit_test(test_settings_refuse_what_they_do_not_know),
        cmocka_unit_test(test_metrics_is_a_role_that_needs_no_team),
        cmocka_unit_test(test_pool_aliases_and_node_features_decode_strictly_and_round_trip),
        cmocka_unit_test(test_pool_sharing_is_none_or_mps),
        cmocka_unit_test(test_aliases_are_unique_across_pools_and_resolve),
        cmocka_unit_test(test_view_maps_features_to_bits_and_constraints_to_masks),
        cmocka_unit_test(test_gpu_type_match_takes_case_and_short_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

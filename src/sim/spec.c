/*
 * spec.c - reading a cluster spec (YAML or JSON). spec_derive.c derives one
 * from a trace and scales it.
 *
 * Both formats end up as one jansson tree that one decoder checks: JSON
 * through jansson, YAML through yamljson.h, whose side tables give the line
 * of each node and the text of plain scalars, both keyed by the node's path.
 * The decoder builds the same paths for its messages ("teams[2].quotas[0].pool"),
 * so it finds the line of whatever it complains about, and queue names can take
 * the text (`queues: [6214e9]` is the queue "6214e9", not a float).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/err.h"
#include "sim/spec.h"
#include "util/yamljson.h"
#include "util/banned.h"

#define NAME_MAX_LEN  128
#define QUEUE_MAX_LEN 1024
#define FILE_MAX      (16u << 20)
#define MAX_GPUS      ((double)SIM_SPEC_MAX_NODES * SIM_SPEC_MAX_GPUS_PER_NODE)
#define REQUIRED      INT64_MIN /* get_num's default: the field must be there */

/* One parse: where messages go, the path of the node at hand, and the spec and
 * name indexes being built. */
struct dec {
    const char *name;
    char *err;
    size_t errlen;
    const struct yamljson *yaml; /* lines and texts; NULL for JSON */
    struct yamljson_path path;
    struct sim_spec *s;
    json_t *pool_index; /* pool name -> index */
    json_t *team_index; /* team name -> index */
    json_t *queue_team; /* queue name -> team index */
    size_t nqueues;     /* over all teams */
    uint64_t nodes;     /* over all pools */
};

/* ---- messages ---- */

/* Keeps a message on one line whatever the input held. */
static void one_line(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

static size_t path_key(struct dec *d, const char *key)
{
    return yamljson_path_key(&d->path, key);
}

static size_t path_index(struct dec *d, size_t i)
{
    return yamljson_path_index(&d->path, i);
}

static void path_pop(struct dec *d, size_t mark)
{
    yamljson_path_pop(&d->path, mark);
}

static int vfail(struct dec *d, int rc, long line, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
static int vfail(struct dec *d, int rc, long line, const char *fmt, va_list ap)
{
    char msg[512], where[32] = "";
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (line > 0)
        snprintf(where, sizeof(where), ":%ld", line);
    if (d->path.len)
        snprintf(d->err, d->errlen, "%s%s: %s: %s", d->name, where, d->path.s, msg);
    else
        snprintf(d->err, d->errlen, "%s%s: %s", d->name, where, msg);
    one_line(d->err);
    return rc;
}

/* "NAME[:LINE]: PATH: problem" for the current path; returns rc. */
static int fail(struct dec *d, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct dec *d, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rc = vfail(d, rc, yamljson_line(d->yaml, d->path.s), fmt, ap);
    va_end(ap);
    return rc;
}

static int fail_at(struct dec *d, int rc, long line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_at(struct dec *d, int rc, long line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rc = vfail(d, rc, line, fmt, ap);
    va_end(ap);
    return rc;
}

/* A value as a message shows it: its YAML text where there is one. */
static const char *shown(const struct dec *d, const json_t *v, char *buf, size_t n)
{
    const char *text = yamljson_text(d->yaml, d->path.s);
    if (text && *text) /* the empty scalar is shown as null, below */
        snprintf(buf, n, "%.64s", text);
    else if (json_is_string(v))
        snprintf(buf, n, "a string ('%.64s%s')", json_string_value(v),
                 json_string_length(v) > 64 ? "..." : "");
    else if (json_is_integer(v))
        snprintf(buf, n, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, n, "%.17g", json_real_value(v));
    else
        snprintf(buf, n, "%s",
                 json_is_object(v)  ? "a mapping"
                 : json_is_array(v) ? "a list"
                 : json_is_null(v)  ? "null"
                 : json_is_true(v)  ? "true"
                                    : "false");
    return buf;
}

/* ---- checking fields ---- */

/* Rules for a number in the file: its range there, and the factor to the
 * stored unit (the result rounded). */
struct num_rule {
    bool integer; /* whole numbers only; else fractions allowed */
    double min;   /* lowest value, or (min_open) the bound above which it must be */
    bool min_open;
    double max;
    double scale; /* GiB -> MiB: 1024; GPUs -> milli: 1000 */
    int over_rc;  /* over max: GPO_ELIMIT for a SIM_SPEC_MAX_* cap */
};

static const struct num_rule R_NODES = {true, 1, false, SIM_SPEC_MAX_NODES, 1, GPO_ELIMIT};
static const struct num_rule R_GPN = {true, 1, false, SIM_SPEC_MAX_GPUS_PER_NODE, 1, GPO_ELIMIT};
static const struct num_rule R_CPUS = {true, 1, false, 1 << 20, 1, GPO_EINVAL};
static const struct num_rule R_GPU_GIB = {false, 0, true, 4096, 1024, GPO_EINVAL};
static const struct num_rule R_MEM_GIB = {false, 0, true, 1 << 20, 1024, GPO_EINVAL};
static const struct num_rule R_WEIGHT = {true, 1, false, 1000000, 1, GPO_EINVAL};
static const struct num_rule R_GPUS = {false, 0, false, MAX_GPUS, 1000, GPO_EINVAL};

static int num_value(struct dec *d, const json_t *v, const struct num_rule *r, int64_t *ret)
{
    char got[128];
    double x = json_number_value(v);
    bool typed = r->integer ? json_is_integer(v) : json_is_number(v);
    bool low = r->min_open ? !(x > r->min) : x < r->min;
    if (!typed || low || x > r->max)
        return fail(d, typed && x > r->max ? r->over_rc : GPO_EINVAL,
                    "expected %s %s %.15g %s %.15g, got %s", r->integer ? "an integer" : "a number",
                    r->min_open ? ">" : "from", r->min, r->min_open ? "and <=" : "to", r->max,
                    shown(d, v, got, sizeof(got)));
    int64_t out = r->integer ? (int64_t)json_integer_value(v) : (int64_t)llround(x * r->scale);
    if (r->min_open && out < 1)
        return fail(d, GPO_EINVAL, "%s is less than one MiB", shown(d, v, got, sizeof(got)));
    *ret = out;
    return 0;
}

/* Field `key` of o by rule r; def when absent (REQUIRED: an error). */
static int get_num(struct dec *d, json_t *o, const char *key, const struct num_rule *r, int64_t def,
                   int64_t *ret)
{
    size_t mark = path_key(d, key);
    json_t *v = json_object_get(o, key);
    int rc = 0;
    if (v)
        rc = num_value(d, v, r, ret);
    else if (def == REQUIRED)
        rc = fail(d, GPO_EINVAL, "required field missing");
    else
        *ret = def;
    path_pop(d, mark);
    return rc;
}

/* Field `key` of o as a string (NULL when absent and optional), borrowed
 * from the tree: a name when `name` (1 to 128 bytes, no control characters). */
static int get_str(struct dec *d, json_t *o, const char *key, bool required, bool name,
                   const char **ret)
{
    char got[128];
    size_t mark = path_key(d, key);
    json_t *v = json_object_get(o, key);
    const char *str = json_string_value(v);
    bool ok = str && json_string_length(v) >= 1 && json_string_length(v) <= NAME_MAX_LEN;
    for (const char *c = str; ok && name && *c; c++)
        ok = (unsigned char)*c >= 0x20 && *c != 0x7f;
    int rc = 0;
    if (!v && required)
        rc = fail(d, GPO_EINVAL, "required field missing");
    else if (v && !ok)
        rc = fail(d, GPO_EINVAL, "expected %s (1 to %d bytes%s), got %s",
                  name ? "a name" : "a string", NAME_MAX_LEN, name ? ", no control characters" : "",
                  shown(d, v, got, sizeof(got)));
    path_pop(d, mark);
    *ret = rc == 0 ? str : NULL;
    return rc;
}

/* An object with only the fields in keys (NULL-terminated). */
static int check_object(struct dec *d, json_t *o, const char *const *keys)
{
    char list[256] = "", got[128];
    const char *key;
    json_t *v;
    for (size_t k = 0, n = 0; keys[k] && n < sizeof(list); k++)
        n += (size_t)snprintf(list + n, n < sizeof(list) ? sizeof(list) - n : 0, "%s%s",
                              k ? ", " : "", keys[k]);
    if (!json_is_object(o))
        return fail(d, GPO_EINVAL, "expected a mapping (%s), got %s", list,
                    shown(d, o, got, sizeof(got)));
    json_object_foreach(o, key, v)
    {
        size_t k = 0;
        while (keys[k] && strcmp(keys[k], key) != 0)
            k++;
        if (!keys[k]) {
            path_key(d, key);
            return fail(d, GPO_EINVAL, "unknown field (expected one of: %s)", list);
        }
    }
    return 0;
}

/* Field `key` of o as a list of at most max entries (over_rc above), or NULL
 * when absent and optional. */
static int get_list(struct dec *d, json_t *o, const char *key, bool required, size_t max,
                    int over_rc, json_t **ret)
{
    char got[128];
    size_t mark = path_key(d, key);
    json_t *v = json_object_get(o, key);
    int rc = 0;
    if (!v && required)
        rc = fail(d, GPO_EINVAL, "required field missing");
    else if (v && !json_is_array(v))
        rc = fail(d, GPO_EINVAL, "expected a list, got %s", shown(d, v, got, sizeof(got)));
    else if (v && required && json_array_size(v) == 0)
        rc = fail(d, GPO_EINVAL, "expected at least one entry");
    else if (v && json_array_size(v) > max)
        rc = fail(d, over_rc, "more than %zu entries", max);
    path_pop(d, mark);
    *ret = rc == 0 ? v : NULL;
    return rc;
}

/* Adds name -> index to an index object; GPO_EEXIST when it is there. */
static int index_add(struct dec *d, json_t *index, const char *name, size_t i)
{
    if (json_object_get(index, name))
        return GPO_EEXIST;
    json_t *v = json_integer((json_int_t)i);
    if (!v || json_object_set_new_nocheck(index, name, v) != 0)
        return fail(d, GPO_ENOMEM, "out of memory");
    return 0;
}

static int dup_str(struct dec *d, const char *src, char **ret)
{
    *ret = strdup(src);
    return *ret ? 0 : fail(d, GPO_ENOMEM, "out of memory");
}

/* ---- the spec ---- */

static const char *const root_keys[] = {"pools", "teams", "unmapped_queues", NULL};
static const char *const pool_keys[] = {
    "name", "nodes", "gpus_per_node", "gpu_type", "gpu_mem_gib", "cpus", "mem_gib", "nvlink", NULL};
static const char *const team_keys[] = {"name",   "queues", "weight", "borrow_limit_gpus",
                                        "quotas", "pool",   NULL};
static const char *const quota_keys[] = {"pool", "guaranteed_gpus", "borrow_limit_gpus", NULL};

static int decode_pool_hw(struct dec *d, json_t *o, struct sim_spec_pool *p)
{
    int64_t gpn, mem_mib, cpus, gpu_mib;
    const char *type;
    int rc = get_num(d, o, "gpus_per_node", &R_GPN, REQUIRED, &gpn);
    rc = rc ? rc : get_str(d, o, "gpu_type", false, true, &type);
    rc = rc ? rc : dup_str(d, type ? type : "GPU", &p->gpu_type);
    rc = rc ? rc : get_num(d, o, "gpu_mem_gib", &R_GPU_GIB, 80 * 1024, &gpu_mib);
    rc = rc ? rc : get_num(d, o, "cpus", &R_CPUS, 8 * gpn, &cpus);
    rc = rc ? rc : get_num(d, o, "mem_gib", &R_MEM_GIB, 64 * 1024 * gpn, &mem_mib);
    if (rc != 0)
        return rc;
    p->gpus_per_node = (uint32_t)gpn;
    p->gpu_mem_mib = (uint32_t)gpu_mib;
    p->cpus = (uint32_t)cpus;
    p->mem_mib = (uint64_t)mem_mib;
    size_t mark = path_key(d, "nvlink");
    json_t *v = json_object_get(o, "nvlink");
    char got[128];
    if (v && !json_is_boolean(v))
        rc = fail(d, GPO_EINVAL, "expected true or false, got %s", shown(d, v, got, sizeof(got)));
    p->nvlink = !v || json_is_true(v);
    path_pop(d, mark);
    return rc;
}

static int decode_pool(struct dec *d, json_t *o, struct sim_spec_pool *p, size_t i)
{
    const char *name;
    int64_t nodes;
    int rc = check_object(d, o, pool_keys);
    rc = rc ? rc : get_str(d, o, "name", true, true, &name);
    rc = rc ? rc : dup_str(d, name, &p->name);
    rc = rc ? rc : index_add(d, d->pool_index, name, i);
    if (rc == GPO_EEXIST) {
        path_key(d, "name");
        return fail(d, GPO_EINVAL, "a second pool named '%s'", name);
    }
    rc = rc ? rc : get_num(d, o, "nodes", &R_NODES, REQUIRED, &nodes);
    if (rc != 0)
        return rc;
    p->nodes = (uint32_t)nodes;
    d->nodes += (uint64_t)nodes;
    if (d->nodes > SIM_SPEC_MAX_NODES) {
        path_key(d, "nodes");
        return fail(d, GPO_ELIMIT, "more than %u nodes in all pools", SIM_SPEC_MAX_NODES);
    }
    return decode_pool_hw(d, o, p);
}

static int decode_pools(struct dec *d, json_t *root)
{
    json_t *list;
    int rc = get_list(d, root, "pools", true, SIM_SPEC_MAX_POOLS, GPO_ELIMIT, &list);
    if (rc != 0)
        return rc;
    d->s->pools = calloc(json_array_size(list), sizeof(*d->s->pools));
    if (!d->s->pools)
        return fail(d, GPO_ENOMEM, "out of memory");
    for (size_t i = 0; i < json_array_size(list); i++) {
        size_t mark = path_key(d, "pools");
        path_index(d, i);
        d->s->npools++; /* so that a half-built pool is freed */
        rc = decode_pool(d, json_array_get(list, i), &d->s->pools[i], i);
        if (rc != 0)
            return rc;
        path_pop(d, mark);
    }
    return 0;
}

/* A queue name: a string, or for YAML the text of any plain scalar. */
static int decode_queue(struct dec *d, json_t *v, size_t team, char **ret)
{
    char got[128];
    const char *q = json_is_string(v) ? json_string_value(v) : yamljson_text(d->yaml, d->path.s);
    if (!q || strlen(q) > QUEUE_MAX_LEN)
        return fail(d, GPO_EINVAL, "expected a queue name (a string of at most %d bytes), got %s",
                    QUEUE_MAX_LEN, shown(d, v, got, sizeof(got)));
    if (++d->nqueues > SIM_SPEC_MAX_QUEUES)
        return fail(d, GPO_ELIMIT, "more than %u queues in all teams", SIM_SPEC_MAX_QUEUES);
    json_t *owner = json_object_get(d->queue_team, q);
    if (owner && (size_t)json_integer_value(owner) == team)
        return fail(d, GPO_EINVAL, "queue '%.64s' listed twice", q);
    if (owner)
        return fail(d, GPO_EINVAL, "queue '%.64s' already belongs to team '%s'", q,
                    d->s->teams[json_integer_value(owner)].name);
    int rc = index_add(d, d->queue_team, q, team);
    return rc ? rc : dup_str(d, q, ret);
}

static int decode_queues(struct dec *d, json_t *o, struct sim_spec_team *t, size_t team)
{
    json_t *list;
    int rc = get_list(d, o, "queues", false, SIM_SPEC_MAX_QUEUES, GPO_ELIMIT, &list);
    if (rc != 0 || !list || json_array_size(list) == 0)
        return rc;
    t->queues = calloc(json_array_size(list), sizeof(*t->queues));
    if (!t->queues)
        return fail(d, GPO_ENOMEM, "out of memory");
    for (size_t i = 0; i < json_array_size(list); i++) {
        size_t mark = path_key(d, "queues");
        path_index(d, i);
        rc = decode_queue(d, json_array_get(list, i), team, &t->queues[i]);
        if (rc != 0)
            return rc;
        t->nqueues++;
        path_pop(d, mark);
    }
    return 0;
}

static int decode_quota(struct dec *d, json_t *o, const struct sim_spec_team *t,
                        struct sim_spec_quota *q)
{
    const char *pool;
    int rc = check_object(d, o, quota_keys);
    rc = rc ? rc : get_str(d, o, "pool", true, false, &pool);
    if (rc != 0)
        return rc;
    json_t *index = json_object_get(d->pool_index, pool);
    size_t mark = path_key(d, "pool");
    if (!index)
        return fail(d, GPO_EINVAL, "no pool named '%.64s'", pool);
    q->pool = (uint32_t)json_integer_value(index);
    for (size_t k = 0; k < t->nquotas; k++)
        if (t->quotas[k].pool == q->pool)
            return fail(d, GPO_EINVAL, "a second quota for pool '%.64s'", pool);
    path_pop(d, mark);
    rc = get_num(d, o, "guaranteed_gpus", &R_GPUS, 0, &q->guaranteed_milli);
    return rc ? rc : get_num(d, o, "borrow_limit_gpus", &R_GPUS, -1, &q->borrow_limit_milli);
}

static int decode_quotas(struct dec *d, json_t *o, struct sim_spec_team *t)
{
    json_t *list;
    int rc = get_list(d, o, "quotas", false, SIM_SPEC_MAX_POOLS, GPO_ELIMIT, &list);
    if (rc != 0 || !list || json_array_size(list) == 0)
        return rc;
    t->quotas = calloc(json_array_size(list), sizeof(*t->quotas));
    if (!t->quotas)
        return fail(d, GPO_ENOMEM, "out of memory");
    for (size_t i = 0; i < json_array_size(list); i++) {
        size_t mark = path_key(d, "quotas");
        path_index(d, i);
        rc = decode_quota(d, json_array_get(list, i), t, &t->quotas[i]);
        if (rc != 0)
            return rc;
        t->nquotas++;
        path_pop(d, mark);
    }
    return 0;
}

/* "pool": the one pool the team's jobs may run in (absent: any). */
static int decode_team_pool(struct dec *d, json_t *o, struct sim_spec_team *t)
{
    const char *pool = NULL;
    t->pool = SIM_NONE;
    int rc = get_str(d, o, "pool", false, false, &pool);
    if (rc != 0 || !pool)
        return rc;
    json_t *index = json_object_get(d->pool_index, pool);
    size_t mark = path_key(d, "pool");
    if (!index)
        return fail(d, GPO_EINVAL, "no pool named '%.64s'", pool);
    t->pool = (uint32_t)json_integer_value(index);
    path_pop(d, mark);
    return 0;
}

static int decode_team(struct dec *d, json_t *o, struct sim_spec_team *t, size_t i)
{
    const char *name = NULL;
    int64_t weight = 1;
    int rc = check_object(d, o, team_keys);
    rc = rc ? rc : get_str(d, o, "name", true, true, &name);
    rc = rc ? rc : dup_str(d, name, &t->name);
    rc = rc ? rc : index_add(d, d->team_index, name, i);
    if (rc == GPO_EEXIST) {
        path_key(d, "name");
        return fail(d, GPO_EINVAL, "a second team named '%s'", name);
    }
    rc = rc ? rc : get_num(d, o, "weight", &R_WEIGHT, 1, &weight);
    rc = rc ? rc : get_num(d, o, "borrow_limit_gpus", &R_GPUS, -1, &t->borrow_limit_milli);
    rc = rc ? rc : decode_queues(d, o, t, i);
    rc = rc ? rc : decode_quotas(d, o, t);
    rc = rc ? rc : decode_team_pool(d, o, t);
    t->weight = (uint32_t)weight;
    return rc;
}

static int decode_teams(struct dec *d, json_t *root)
{
    json_t *list;
    int rc = get_list(d, root, "teams", true, SIM_SPEC_MAX_TEAMS, GPO_ELIMIT, &list);
    if (rc != 0)
        return rc;
    d->s->teams = calloc(json_array_size(list), sizeof(*d->s->teams));
    if (!d->s->teams)
        return fail(d, GPO_ENOMEM, "out of memory");
    for (size_t i = 0; i < json_array_size(list); i++) {
        size_t mark = path_key(d, "teams");
        path_index(d, i);
        d->s->nteams++;
        rc = decode_team(d, json_array_get(list, i), &d->s->teams[i], i);
        if (rc != 0)
            return rc;
        path_pop(d, mark);
    }
    return 0;
}

static int decode_root(struct dec *d, json_t *root)
{
    const char *unmapped;
    int rc = check_object(d, root, root_keys);
    rc = rc ? rc : decode_pools(d, root);
    rc = rc ? rc : decode_teams(d, root);
    rc = rc ? rc : get_str(d, root, "unmapped_queues", false, false, &unmapped);
    if (rc != 0 || !unmapped || strcmp(unmapped, "drop") == 0)
        return rc;
    json_t *team = json_object_get(d->team_index, unmapped);
    if (team) {
        d->s->unmapped_team = (uint32_t)json_integer_value(team);
        return 0;
    }
    path_key(d, "unmapped_queues");
    return fail(d, GPO_EINVAL, "expected 'drop' or the name of a team, got '%.64s'", unmapped);
}

static int parse_json(struct dec *d, const char *text, size_t len, json_t **ret)
{
    json_error_t jerr;
    *ret = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (*ret)
        return 0;
    /* Some of jansson's failed allocations leave the error empty. */
    if (json_error_code(&jerr) == json_error_out_of_memory || jerr.text[0] == '\0')
        return fail_at(d, GPO_ENOMEM, 0, "out of memory");
    return fail_at(d, GPO_EINVAL, jerr.line, "invalid JSON: %s (column %d)", jerr.text,
                   jerr.column);
}

static int parse_yaml(struct dec *d, struct yamljson *yaml, const char *text, size_t len)
{
    struct yamljson_error e;
    int rc = yamljson_parse(yaml, text, len, &e);
    if (rc != 0) {
        d->path = e.path;
        return fail_at(d, rc == YAMLJSON_ENOMEM ? GPO_ENOMEM : GPO_EINVAL, e.line, "%s", e.problem);
    }
    d->yaml = yaml;
    return 0;
}

/* ---- the public functions ---- */

void sim_spec_init(struct sim_spec *s)
{
    if (!s)
        return;
    memset(s, 0, sizeof(*s));
    s->unmapped_team = SIM_NONE;
}

void sim_spec_release(struct sim_spec *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->npools; i++) {
        free(s->pools[i].name);
        free(s->pools[i].gpu_type);
    }
    for (size_t i = 0; i < s->nteams; i++) {
        for (size_t k = 0; k < s->teams[i].nqueues; k++)
            free(s->teams[i].queues[k]);
        free(s->teams[i].queues);
        free(s->teams[i].quotas);
        free(s->teams[i].name);
    }
    free(s->pools);
    free(s->teams);
    sim_spec_init(s);
}

int sim_spec_parse(struct sim_spec *s, const char *text, size_t len, const char *name, char *err,
                   size_t errlen)
{
    char scratch[1];
    struct sim_spec out;
    struct yamljson yaml = {0};
    struct dec d = {.name = name ? name : "spec",
                    .err = err && errlen ? err : scratch,
                    .errlen = err && errlen ? errlen : sizeof(scratch),
                    .s = &out};
    json_t *json = NULL;
    size_t bom = 0, skip;
    int rc = 0;
    sim_spec_init(&out);
    d.err[0] = '\0';
    len = text ? len : 0;
    text = text ? text : "";
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
        bom = 3; /* a UTF-8 byte order mark: jansson does not skip it */
    skip = bom;
    while (skip < len && text[skip] != '\0' && strchr(" \t\r\n", text[skip]))
        skip++;
    d.pool_index = json_object();
    d.team_index = json_object();
    d.queue_team = json_object();
    if (!d.pool_index || !d.team_index || !d.queue_team)
        rc = fail_at(&d, GPO_ENOMEM, 0, "out of memory");
    else if (skip < len && text[skip] == '{')
        rc = parse_json(&d, text + bom, len - bom, &json);
    else
        rc = parse_yaml(&d, &yaml, text, len);
    rc = rc ? rc : decode_root(&d, json ? json : yaml.root);
    json_decref(json);
    yamljson_release(&yaml);
    json_decref(d.pool_index);
    json_decref(d.team_index);
    json_decref(d.queue_team);
    if (rc != 0)
        sim_spec_release(&out);
    *s = out;
    return rc;
}

static int read_all(FILE *f, const char *path, char **ret, size_t *retlen, char *err, size_t errlen)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (len == cap) {
            cap = cap * 2 > FILE_MAX + 1 ? FILE_MAX + 1 : cap * 2;
            char *grown = realloc(buf, cap);
            if (!grown)
                break;
            buf = grown;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (len > FILE_MAX) {
            free(buf);
            snprintf(err, errlen, "%s: larger than %u MiB", path, FILE_MAX >> 20);
            return GPO_ELIMIT;
        }
        if (n == 0 && ferror(f)) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            free(buf);
            return GPO_EINVAL;
        }
        if (n == 0) {
            *ret = buf;
            *retlen = len;
            return 0;
        }
    }
    free(buf);
    snprintf(err, errlen, "%s: out of memory", path);
    return GPO_ENOMEM;
}

int sim_spec_load(struct sim_spec *s, const char *path, char *err, size_t errlen)
{
    char scratch[1], *text = NULL;
    size_t len = 0;
    err = err && errlen ? err : scratch;
    errlen = err == scratch ? sizeof(scratch) : errlen;
    sim_spec_init(s);
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        snprintf(err, errlen, "%s: %s", path ? path : "(null)", path ? strerror(errno) : "no path");
        one_line(err);
        return GPO_EINVAL;
    }
    int rc = read_all(f, path, &text, &len, err, errlen);
    fclose(f);
    if (rc != 0) {
        one_line(err);
        return rc;
    }
    rc = sim_spec_parse(s, text, len, path, err, errlen);
    free(text);
    return rc;
}

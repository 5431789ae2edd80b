/*
 * spec.c - reading a cluster spec (YAML or JSON, through doc.h).
 * spec_derive.c derives one from a trace and scales it.
 *
 * The decoder builds each node's path as it goes ("teams[2].quotas[0].pool"),
 * so every message finds its line, and queue names can take the text of a
 * plain scalar (`queues: [6214e9]` is the queue "6214e9", not a float).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "sim/doc.h"
#include "sim/spec.h"
#include "util/yamljson.h"
#include "base/banned.h"

#define QUEUE_MAX_LEN 1024
#define MAX_GPUS      ((double)SIM_SPEC_MAX_NODES * SIM_SPEC_MAX_GPUS_PER_NODE)

/* One parse: the document, and the spec and name indexes being built. */
struct dec {
    struct sim_doc doc;
    struct sim_spec *s;
    json_t *pool_index; /* pool name -> index */
    json_t *team_index; /* team name -> index */
    json_t *queue_team; /* queue name -> team index */
    size_t nqueues;     /* over all teams */
    uint64_t nodes;     /* over all pools */
};

/* Numbers in a spec (doc.h's rules). */
static const struct sim_doc_num R_NODES = {true, 1, false, SIM_SPEC_MAX_NODES, 1, GPO_E2BIG};
static const struct sim_doc_num R_GPN = {true, 1, false, SIM_SPEC_MAX_GPUS_PER_NODE, 1, GPO_E2BIG};
static const struct sim_doc_num R_CPUS = {true, 1, false, 1 << 20, 1, GPO_EINVAL};
static const struct sim_doc_num R_GPU_GIB = {false, 0, true, 4096, 1024, GPO_EINVAL};
static const struct sim_doc_num R_MEM_GIB = {false, 0, true, 1 << 20, 1024, GPO_EINVAL};
static const struct sim_doc_num R_WEIGHT = {true, 1, false, 1000000, 1, GPO_EINVAL};
static const struct sim_doc_num R_GPUS = {false, 0, false, MAX_GPUS, 1000, GPO_EINVAL};

/* Adds name -> index to an index object; GPO_EEXIST when it is there. */
static int index_add(struct dec *d, json_t *index, const char *name, size_t i)
{
    if (json_object_get(index, name))
        return GPO_EEXIST;
    json_t *v = json_integer((json_int_t)i);
    if (!v || json_object_set_new_nocheck(index, name, v) != 0)
        return sim_doc_fail(&d->doc, GPO_ENOMEM, "out of memory");
    return 0;
}

static int dup_str(struct dec *d, const char *src, char **ret)
{
    *ret = strdup(src);
    return *ret ? 0 : sim_doc_fail(&d->doc, GPO_ENOMEM, "out of memory");
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
    int rc = sim_doc_get_num(&d->doc, o, "gpus_per_node", &R_GPN, SIM_DOC_REQUIRED, &gpn);
    rc = rc ? rc : sim_doc_get_str(&d->doc, o, "gpu_type", false, true, &type);
    rc = rc ? rc : dup_str(d, type ? type : "GPU", &p->gpu_type);
    rc = rc ? rc
            : sim_doc_get_num(&d->doc, o, "gpu_mem_gib", &R_GPU_GIB, INT64_C(80) * 1024, &gpu_mib);
    rc = rc ? rc : sim_doc_get_num(&d->doc, o, "cpus", &R_CPUS, 8 * gpn, &cpus);
    rc =
        rc ? rc
           : sim_doc_get_num(&d->doc, o, "mem_gib", &R_MEM_GIB, INT64_C(64) * 1024 * gpn, &mem_mib);
    if (rc != 0)
        return rc;
    p->gpus_per_node = (uint32_t)gpn;
    p->gpu_mem_mib = (uint32_t)gpu_mib;
    p->cpus = (uint32_t)cpus;
    p->mem_mib = (uint64_t)mem_mib;
    return sim_doc_get_bool(&d->doc, o, "nvlink", true, &p->nvlink);
}

static int decode_pool(struct dec *d, json_t *o, struct sim_spec_pool *p, size_t i)
{
    const char *name = NULL;
    int64_t nodes;
    int rc = sim_doc_check_object(&d->doc, o, pool_keys);
    rc = rc ? rc : sim_doc_get_str(&d->doc, o, "name", true, true, &name);
    rc = rc ? rc : dup_str(d, name, &p->name);
    rc = rc ? rc : index_add(d, d->pool_index, name, i);
    if (rc == GPO_EEXIST) {
        sim_doc_key(&d->doc, "name");
        return sim_doc_fail(&d->doc, GPO_EINVAL, "a second pool named '%s'", name);
    }
    rc = rc ? rc : sim_doc_get_num(&d->doc, o, "nodes", &R_NODES, SIM_DOC_REQUIRED, &nodes);
    if (rc != 0)
        return rc;
    p->nodes = (uint32_t)nodes;
    d->nodes += (uint64_t)nodes;
    if (d->nodes > SIM_SPEC_MAX_NODES) {
        sim_doc_key(&d->doc, "nodes");
        return sim_doc_fail(&d->doc, GPO_E2BIG, "more than %u nodes in all pools",
                            SIM_SPEC_MAX_NODES);
    }
    return decode_pool_hw(d, o, p);
}

static int decode_pools(struct dec *d, json_t *root)
{
    json_t *list;
    int rc = sim_doc_get_list(&d->doc, root, "pools", true, SIM_SPEC_MAX_POOLS, GPO_E2BIG, &list);
    if (rc != 0)
        return rc;
    d->s->pools = calloc(json_array_size(list), sizeof(*d->s->pools));
    if (!d->s->pools)
        return sim_doc_fail(&d->doc, GPO_ENOMEM, "out of memory");
    for (size_t i = 0; i < json_array_size(list); i++) {
        size_t mark = sim_doc_key(&d->doc, "pools");
        sim_doc_index(&d->doc, i);
        d->s->npools++; /* so that a half-built pool is freed */
        rc = decode_pool(d, json_array_get(list, i), &d->s->pools[i], i);
        if (rc != 0)
            return rc;
        sim_doc_pop(&d->doc, mark);
    }
    return 0;
}

/* A queue name: a string, or for YAML the text of any plain scalar. */
static int decode_queue(struct dec *d, json_t *v, size_t team, char **ret)
{
    const char *q =
        json_is_string(v) ? json_string_value(v) : yamljson_text(d->doc.yaml, d->doc.path.s);
    if (!q || strlen(q) > QUEUE_MAX_LEN) {
        char got[128];
        return sim_doc_fail(&d->doc, GPO_EINVAL,
                            "expected a queue name (a string of at most %d bytes), got %s",
                            QUEUE_MAX_LEN, sim_doc_shown(&d->doc, v, got, sizeof(got)));
    }
    if (++d->nqueues > SIM_SPEC_MAX_QUEUES)
        return sim_doc_fail(&d->doc, GPO_E2BIG, "more than %u queues in all teams",
                            SIM_SPEC_MAX_QUEUES);
    json_t *owner = json_object_get(d->queue_team, q);
    if (owner && (size_t)json_integer_value(owner) == team)
        return sim_doc_fail(&d->doc, GPO_EINVAL, "queue '%.64s' listed twice", q);
    if (owner)
        return sim_doc_fail(&d->doc, GPO_EINVAL, "queue '%.64s' already belongs to team '%s'", q,
                            d->s->teams[json_integer_value(owner)].name);
    int rc = index_add(d, d->queue_team, q, team);
    return rc ? rc : dup_str(d, q, ret);
}

static int decode_queues(struct dec *d, json_t *o, struct sim_spec_team *t, size_t team)
{
    json_t *list;
    int rc = sim_doc_get_list(&d->doc, o, "queues", false, SIM_SPEC_MAX_QUEUES, GPO_E2BIG, &list);
    if (rc != 0 || !list || json_array_size(list) == 0)
        return rc;
    t->queues = calloc(json_array_size(list), sizeof(*t->queues));
    if (!t->queues)
        return sim_doc_fail(&d->doc, GPO_ENOMEM, "out of memory");
    for (size_t i = 0; i < json_array_size(list); i++) {
        size_t mark = sim_doc_key(&d->doc, "queues");
        sim_doc_index(&d->doc, i);
        rc = decode_queue(d, json_array_get(list, i), team, &t->queues[i]);
        if (rc != 0)
            return rc;
        t->nqueues++;
        sim_doc_pop(&d->doc, mark);
    }
    return 0;
}

static int decode_quota(struct dec *d, json_t *o, const struct sim_spec_team *t,
                        struct sim_spec_quota *q)
{
    const char *pool;
    int rc = sim_doc_check_object(&d->doc, o, quota_keys);
    rc = rc ? rc : sim_doc_get_str(&d->doc, o, "pool", true, false, &pool);
    if (rc != 0)
        return rc;
    json_t *index = json_object_get(d->pool_index, pool);
    size_t mark = sim_doc_key(&d->doc, "pool");
    if (!index)
        return sim_doc_fail(&d->doc, GPO_EINVAL, "no pool named '%.64s'", pool);
    q->pool = (uint32_t)json_integer_value(index);
    for (size_t k = 0; k < t->nquotas; k++)
        if (t->quotas[k].pool == q->pool)
            return sim_doc_fail(&d->doc, GPO_EINVAL, "a second quota for pool '%.64s'", pool);
    sim_doc_pop(&d->doc, mark);
    rc = sim_doc_get_num(&d->doc, o, "guaranteed_gpus", &R_GPUS, 0, &q->guaranteed_milli);
    return rc ? rc
              : sim_doc_get_num(&d->doc, o, "borrow_limit_gpus", &R_GPUS, -1,
                                &q->borrow_limit_milli);
}

static int decode_quotas(struct dec *d, json_t *o, struct sim_spec_team *t)
{
    json_t *list;
    int rc = sim_doc_get_list(&d->doc, o, "quotas", false, SIM_SPEC_MAX_POOLS, GPO_E2BIG, &list);
    if (rc != 0 || !list || json_array_size(list) == 0)
        return rc;
    t->quotas = calloc(json_array_size(list), sizeof(*t->quotas));
    if (!t->quotas)
        return sim_doc_fail(&d->doc, GPO_ENOMEM, "out of memory");
    for (size_t i = 0; i < json_array_size(list); i++) {
        size_t mark = sim_doc_key(&d->doc, "quotas");
        sim_doc_index(&d->doc, i);
        rc = decode_quota(d, json_array_get(list, i), t, &t->quotas[i]);
        if (rc != 0)
            return rc;
        t->nquotas++;
        sim_doc_pop(&d->doc, mark);
    }
    return 0;
}

/* "pool": the one pool the team's jobs may run in (absent: any). */
static int decode_team_pool(struct dec *d, json_t *o, struct sim_spec_team *t)
{
    const char *pool = NULL;
    t->pool = SIM_NONE;
    int rc = sim_doc_get_str(&d->doc, o, "pool", false, false, &pool);
    if (rc != 0 || !pool)
        return rc;
    json_t *index = json_object_get(d->pool_index, pool);
    size_t mark = sim_doc_key(&d->doc, "pool");
    if (!index)
        return sim_doc_fail(&d->doc, GPO_EINVAL, "no pool named '%.64s'", pool);
    t->pool = (uint32_t)json_integer_value(index);
    sim_doc_pop(&d->doc, mark);
    return 0;
}

static int decode_team(struct dec *d, json_t *o, struct sim_spec_team *t, size_t i)
{
    const char *name = NULL;
    int64_t weight = 1;
    int rc = sim_doc_check_object(&d->doc, o, team_keys);
    rc = rc ? rc : sim_doc_get_str(&d->doc, o, "name", true, true, &name);
    rc = rc ? rc : dup_str(d, name, &t->name);
    rc = rc ? rc : index_add(d, d->team_index, name, i);
    if (rc == GPO_EEXIST) {
        sim_doc_key(&d->doc, "name");
        return sim_doc_fail(&d->doc, GPO_EINVAL, "a second team named '%s'", name);
    }
    rc = rc ? rc : sim_doc_get_num(&d->doc, o, "weight", &R_WEIGHT, 1, &weight);
    rc = rc ? rc
            : sim_doc_get_num(&d->doc, o, "borrow_limit_gpus", &R_GPUS, -1, &t->borrow_limit_milli);
    rc = rc ? rc : decode_queues(d, o, t, i);
    rc = rc ? rc : decode_quotas(d, o, t);
    rc = rc ? rc : decode_team_pool(d, o, t);
    t->weight = (uint32_t)weight;
    return rc;
}

static int decode_teams(struct dec *d, json_t *root)
{
    json_t *list;
    int rc = sim_doc_get_list(&d->doc, root, "teams", true, SIM_SPEC_MAX_TEAMS, GPO_E2BIG, &list);
    if (rc != 0)
        return rc;
    d->s->teams = calloc(json_array_size(list), sizeof(*d->s->teams));
    if (!d->s->teams)
        return sim_doc_fail(&d->doc, GPO_ENOMEM, "out of memory");
    for (size_t i = 0; i < json_array_size(list); i++) {
        size_t mark = sim_doc_key(&d->doc, "teams");
        sim_doc_index(&d->doc, i);
        d->s->nteams++;
        rc = decode_team(d, json_array_get(list, i), &d->s->teams[i], i);
        if (rc != 0)
            return rc;
        sim_doc_pop(&d->doc, mark);
    }
    return 0;
}

static int decode_root(struct dec *d, json_t *root)
{
    const char *unmapped;
    int rc = sim_doc_check_object(&d->doc, root, root_keys);
    rc = rc ? rc : decode_pools(d, root);
    rc = rc ? rc : decode_teams(d, root);
    rc = rc ? rc : sim_doc_get_str(&d->doc, root, "unmapped_queues", false, false, &unmapped);
    if (rc != 0 || !unmapped || strcmp(unmapped, "drop") == 0)
        return rc;
    json_t *team = json_object_get(d->team_index, unmapped);
    if (team) {
        d->s->unmapped_team = (uint32_t)json_integer_value(team);
        return 0;
    }
    sim_doc_key(&d->doc, "unmapped_queues");
    return sim_doc_fail(&d->doc, GPO_EINVAL, "expected 'drop' or the name of a team, got '%.64s'",
                        unmapped);
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
    struct sim_spec out;
    struct dec d = {.s = &out};
    json_t *root = NULL;
    int rc = 0;
    sim_spec_init(&out);
    sim_doc_init(&d.doc, name ? name : "spec", err, errlen);
    d.pool_index = json_object();
    d.team_index = json_object();
    d.queue_team = json_object();
    if (!d.pool_index || !d.team_index || !d.queue_team)
        rc = sim_doc_fail_at(&d.doc, GPO_ENOMEM, 0, "out of memory");
    rc = rc ? rc : sim_doc_parse(&d.doc, text, len, &root);
    rc = rc ? rc : decode_root(&d, root);
    sim_doc_release(&d.doc);
    json_decref(d.pool_index);
    json_decref(d.team_index);
    json_decref(d.queue_team);
    if (rc != 0)
        sim_spec_release(&out);
    *s = out;
    return rc;
}

int sim_spec_load(struct sim_spec *s, const char *path, char *err, size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    sim_spec_init(s);
    int rc = sim_doc_read_file(path, &text, &len, err, errlen);
    if (rc == 0)
        rc = sim_spec_parse(s, text, len, path, err, errlen);
    free(text);
    return rc;
}

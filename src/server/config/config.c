/*
 * config.c - the configuration kinds an admin writes (teams, pools, priority
 * classes, prices, services): their table, loading, references, and writes
 * (config.h; services' own rules: config_services.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/config/config_int.h"
#include "util/errbuf.h"
#include "base/banned.h"

/* One configuration kind, as a row of a table: the cluster's functions
 * behind void pointers, and what refers to it. */
struct kind {
    const char *path;  /* "teams" */
    const char *label; /* "team" */
    enum store_config_kind store;
    int (*decode)(const json_t *obj, unsigned flags, void *ret, char *err, size_t errlen);
    json_t *(*to_json)(const void *item, unsigned flags);
    void (*release)(void *item);
    const void *(*get)(const struct cluster *m, const char *name);
    int (*put)(struct cluster *m, void *item, bool replace, char *err, size_t errlen);
    int (*remove)(struct cluster *m, const char *name);
    /* 0 when the item can go in (or, item NULL, `name` can go out); else
     * GPO_EINVAL / GPO_ESTATE with the message. NULL: nothing refers to
     * the kind, and what it names settle checks. */
    int (*refs)(const struct config *c, const void *item, const char *name, char *err,
                size_t errlen);
    const void *(*at)(const struct cluster *m, size_t k);
    size_t (*count)(const struct cluster *m);
    uint32_t (*id_of)(const void *item);
    void (*set_id)(void *item, uint32_t id);
    /* Before an item goes in: canonical names, server-set fields (old: the
     * item it replaces, or NULL). NULL: nothing to do. */
    int (*settle)(const struct config *c, void *item, const void *old, char *err, size_t errlen);
};

#define ADAPT(kind, field)                                                                         \
    static int kind##_decode(const json_t *o, unsigned f, void *r, char *e, size_t n)              \
    {                                                                                              \
        return cluster_##kind##_decode(o, f, r, e, n);                                             \
    }                                                                                              \
    static json_t *kind##_to_json(const void *x, unsigned f)                                       \
    {                                                                                              \
        return cluster_##kind##_to_json(x, f);                                                     \
    }                                                                                              \
    static void kind##_release(void *x)                                                            \
    {                                                                                              \
        cluster_##kind##_release(x);                                                               \
    }                                                                                              \
    static const void *kind##_get(const struct cluster *m, const char *name)                       \
    {                                                                                              \
        return cluster_##kind##_get(m, name);                                                      \
    }                                                                                              \
    static int kind##_put(struct cluster *m, void *x, bool replace, char *e, size_t n)             \
    {                                                                                              \
        return replace ? cluster_##kind##_replace(m, x, e, n) : cluster_##kind##_add(m, x, e, n);  \
    }                                                                                              \
    static int kind##_remove(struct cluster *m, const char *name)                                  \
    {                                                                                              \
        return cluster_##kind##_remove(m, name);                                                   \
    }                                                                                              \
    static const void *kind##_at(const struct cluster *m, size_t k)                                \
    {                                                                                              \
        return &m->field[k];                                                                       \
    }                                                                                              \
    static size_t kind##_count(const struct cluster *m)                                            \
    {                                                                                              \
        return m->n##field;                                                                        \
    }                                                                                              \
    static uint32_t kind##_id_of(const void *x)                                                    \
    {                                                                                              \
        return ((const struct cluster_##kind *)x)->id;                                             \
    }                                                                                              \
    static void kind##_set_id(void *x, uint32_t id)                                                \
    {                                                                                              \
        ((struct cluster_##kind *)x)->id = id;                                                     \
    }

ADAPT(team, teams)
ADAPT(pool, pools)
ADAPT(class, classes)
ADAPT(price, prices)
ADAPT(service, services)

/* ---- references --------------------------------------------------------- */

static int team_refs(const struct config *c, const void *item, const char *name, char *err,
                     size_t errlen)
{
    const struct cluster_team *t = item;
    if (t) {
        for (size_t q = 0; q < t->nquotas; q++) {
            if (!cluster_pool_get(c->cluster, t->quotas[q].pool))
                return errbuf_set(err, errlen, GPO_EINVAL, "field 'quotas[%zu].pool': no pool '%s'",
                                  q, t->quotas[q].pool);
        }
        if (t->budget.block_below && !cluster_class_get(c->cluster, t->budget.block_below))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'budget.block_below': no priority class '%s'",
                              t->budget.block_below);
        return 0;
    }
    const struct job *j = jobs_find_live(c->jobs, name, NULL);
    if (j)
        return errbuf_set(err, errlen, GPO_ESTATE, "team '%s' has job %" PRId64 " (%s)", name,
                          j->id, job_state_name(j->state));
    return config_service_naming(c, CONFIG_TEAMS, name, err, errlen);
}

static int pool_refs(const struct config *c, const void *item, const char *name, char *err,
                     size_t errlen)
{
    if (item) /* before the commit, so a refused layout stores nothing */
        return cluster_pool_mig_check(c->cluster, item, err, errlen);
    const struct cluster *m = c->cluster;
    for (size_t k = 0; k < m->nteams; k++) {
        const struct cluster_team *t = &m->teams[k];
        for (size_t q = 0; q < t->nquotas; q++) {
            if (strcmp(t->quotas[q].pool, name) == 0)
                return errbuf_set(err, errlen, GPO_ESTATE, "team '%s' has a quota in pool '%s'",
                                  t->name, name);
        }
    }
    for (size_t k = 0; k < m->nnodes; k++) {
        if (strcmp(m->nodes[k].pool, name) == 0)
            return errbuf_set(err, errlen, GPO_ESTATE, "node '%s' is in pool '%s'",
                              m->nodes[k].name, name);
    }
    return config_service_naming(c, CONFIG_POOLS, name, err, errlen);
}

static int class_refs(const struct config *c, const void *item, const char *name, char *err,
                      size_t errlen)
{
    if (item)
        return 0;
    const struct job *j = jobs_find_live(c->jobs, NULL, name);
    if (j)
        return errbuf_set(err, errlen, GPO_ESTATE, "job %" PRId64 " (%s) has priority class '%s'",
                          j->id, job_state_name(j->state), name);
    return config_service_naming(c, CONFIG_CLASSES, name, err, errlen);
}

/* A price names a GPU type the cluster knows (one a node ever had). */
static int price_refs(const struct config *c, const void *item, const char *name, char *err,
                      size_t errlen)
{
    const struct cluster *m = c->cluster;
    if (!item || cluster_type_id_get(m, name))
        return 0;
    char known[512] = "";
    size_t o = 0;
    for (size_t k = 0; k < m->ntype_ids && o < sizeof(known) - 70; k++) {
        int n = snprintf(known + o, sizeof(known) - o, "%s%s", k ? ", " : "", m->type_ids[k].name);
        o += n > 0 ? (size_t)n : 0;
    }
    return errbuf_set(err, errlen, GPO_EINVAL, "field 'name': unknown GPU type '%s' (known: %s)",
                      name, known[0] ? known : "none yet: no node has registered");
}

#define KIND(path_, label_, store_, kind, refs_, settle_)                                          \
    {                                                                                              \
        path_, label_, store_, kind##_decode, kind##_to_json, kind##_release, kind##_get,          \
            kind##_put, kind##_remove, refs_, kind##_at, kind##_count, kind##_id_of,               \
            kind##_set_id, settle_                                                                 \
    }

static const struct kind kinds[CONFIG_NKINDS] = {
    [CONFIG_TEAMS] = KIND("teams", "team", STORE_CONFIG_TEAMS, team, team_refs, NULL),
    [CONFIG_POOLS] = KIND("pools", "pool", STORE_CONFIG_POOLS, pool, pool_refs, NULL),
    [CONFIG_CLASSES] = KIND("priority-classes", "priority class", STORE_CONFIG_PRIORITY_CLASSES,
                            class, class_refs, NULL),
    [CONFIG_PRICES] = KIND("prices", "price", STORE_CONFIG_PRICES, price, price_refs, NULL),
    [CONFIG_SERVICES] =
        KIND("services", "service", STORE_CONFIG_SERVICES, service, NULL, config_service_settle),
};

const char *config_kind_label(enum config_kind k)
{
    return (unsigned)k < CONFIG_NKINDS ? kinds[k].label : NULL;
}

void config_init(struct config *c, struct cluster *cluster, struct jobs *jobs, struct cost *cost,
                 struct nodes *nodes, struct store *store)
{
    *c = (struct config){.cluster = cluster,
                         .jobs = jobs,
                         .cost = cost,
                         .nodes = nodes,
                         .store = store,
                         .next_id = 1};
}

/* ---- reads -------------------------------------------------------------- */

json_t *config_list_json(const struct config *c, enum config_kind kind)
{
    const struct kind *k = &kinds[kind];
    json_t *list = json_array();
    for (size_t i = 0; list && i < k->count(c->cluster); i++) {
        json_t *o = k->to_json(k->at(c->cluster, i), 0);
        if (!o || json_array_append_new(list, o)) {
            json_decref(list);
            list = NULL;
        }
    }
    return list ? json_pack("{s:o}", k->path, list) : NULL;
}

int config_get_json(const struct config *c, enum config_kind kind, const char *name, json_t **ret)
{
    const struct kind *k = &kinds[kind];
    const void *item = k->get(c->cluster, name);
    if (!item)
        return GPO_ENOENT;
    json_t *o = k->to_json(item, 0);
    if (!o)
        return GPO_ENOMEM;
    *ret = o;
    return 0;
}

/* ---- writes ------------------------------------------------------------- */

static int busy(const struct config *c, char *err, size_t errlen)
{
    return c->busy ? errbuf_set(err, errlen, GPO_EBUSY,
                                "another configuration change is being stored; retry")
                   : 0;
}

void config_write_free(struct config_write *w)
{
    if (!w)
        return;
    if (w->kind == CONFIG_WRITE_NODE)
        cluster_node_release(&w->item.node);
    else if (!w->remove && w->kind >= 0)
        kinds[w->kind].release(&w->item);
    for (size_t k = 0; k < w->nnew_types; k++)
        free(w->new_types[k].name);
    free(w->new_types);
    free(w);
}

const char *config_write_name(const struct config_write *w)
{
    return w->name;
}

bool config_write_is_service(const struct config_write *w)
{
    return w->kind == CONFIG_SERVICES;
}

int config_put_plan(struct config *c, enum config_kind kind, const char *name, const json_t *body,
                    int64_t now_ms, struct config_write **ret_w, struct store_batch **ret_batch,
                    char *err, size_t errlen)
{
    const struct kind *k = &kinds[kind];
    struct config_write *w = calloc(1, sizeof(*w));
    if (!w)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    w->kind = (int)kind;
    snprintf(w->name, sizeof(w->name), "%s", name);
    int rc = k->decode(body, 0, &w->item, err, errlen);
    if (rc) {
        free(w);
        return rc;
    }
    const void *old = k->get(c->cluster, name);
    rc = busy(c, err, errlen);
    rc = rc || !k->refs ? rc : k->refs(c, &w->item, name, err, errlen);
    rc = rc || !k->settle ? rc : k->settle(c, &w->item, old, err, errlen);
    if (rc) {
        config_write_free(w);
        return rc;
    }
    w->replace = old != NULL;
    w->next_id = c->next_id;
    k->set_id(&w->item, old ? k->id_of(old) : w->next_id++);
    json_t *stored = k->to_json(&w->item, CLUSTER_STORED);
    char *text = stored ? json_dumps(stored, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(stored);
    struct store_batch *b = text ? store_batch_new() : NULL;
    rc = b ? store_batch_config_put(b, k->store, name, text, now_ms) : GPO_ENOMEM;
    if (!rc && !w->replace)
        rc = config_next_id_row(b, w->next_id);
    /* A new price closes the open segments of its type; the same one (apply
     * again) or a description changes nothing that costs. */
    if (!rc && kind == CONFIG_PRICES &&
        (!old || ((const struct cluster_price *)old)->per_gpu_hour_micro !=
                     w->item.price.per_gpu_hour_micro))
        rc = cost_price_plan(c->cost, name, now_ms, b, &w->closing);
    free(text);
    if (rc) {
        cost_price_apply(c->cost, w->closing, false);
        store_batch_free(b);
        config_write_free(w);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    c->busy = true;
    *ret_w = w;
    *ret_batch = b;
    return 0;
}

int config_delete_plan(struct config *c, enum config_kind kind, const char *name, int64_t now_ms,
                       struct config_write **ret_w, struct store_batch **ret_batch, char *err,
                       size_t errlen)
{
    const struct kind *k = &kinds[kind];
    if (!k->get(c->cluster, name))
        return errbuf_set(err, errlen, GPO_ENOENT, "no %s '%s'", k->label, name);
    int rc = busy(c, err, errlen);
    rc = rc || !k->refs ? rc : k->refs(c, NULL, name, err, errlen);
    if (rc)
        return rc;
    struct config_write *w = calloc(1, sizeof(*w));
    struct store_batch *b = w ? store_batch_new() : NULL;
    struct cost_pending *closing = NULL;
    if (!b || store_batch_config_delete(b, k->store, name) ||
        (kind == CONFIG_PRICES && cost_price_plan(c->cost, name, now_ms, b, &closing))) {
        store_batch_free(b);
        free(w);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    w->kind = (int)kind;
    w->remove = true;
    w->closing = closing;
    snprintf(w->name, sizeof(w->name), "%s", name);
    c->busy = true;
    *ret_w = w;
    *ret_batch = b;
    return 0;
}

static int kind_done(struct config *c, struct config_write *w, enum config_outcome *ret_outcome,
                     json_t **ret_body, char *err, size_t errlen)
{
    const struct kind *k = &kinds[w->kind];
    int rc = 0;
    json_t *o = NULL;
    if (w->remove) {
        k->remove(c->cluster, w->name);
    } else {
        c->next_id = w->next_id;
        o = k->to_json(&w->item, 0);
        rc = k->put(c->cluster, &w->item, w->replace, err, errlen);
    }
    /* After the price is in the configuration: the segments reopen at it. */
    cost_price_apply(c->cost, w->closing, true);
    w->closing = NULL;
    if (!rc && !w->remove && !o)
        rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    if (rc) {
        json_decref(o);
        return rc;
    }
    *ret_outcome = w->remove ? CONFIG_REMOVED : w->replace ? CONFIG_REPLACED : CONFIG_CREATED;
    *ret_body = o;
    return 0;
}

void config_write_drop(struct config *c, struct config_write *w)
{
    c->busy = false;
    cost_price_apply(c->cost, w->closing, false);
    w->closing = NULL;
    config_write_free(w);
}

int config_write_done(struct config *c, struct config_write *w, int store_err, int64_t now_ms,
                      enum config_outcome *ret_outcome, json_t **ret_body, char *err, size_t errlen)
{
    if (store_err) {
        config_write_drop(c, w);
        return store_err;
    }
    c->busy = false;
    int rc = w->kind == CONFIG_WRITE_NODE
                 ? config_node_done(c, w, now_ms, ret_outcome, ret_body, err, errlen)
             : w->kind == CONFIG_WRITE_SETTINGS
                 ? config_settings_done(c, w, ret_outcome, ret_body, err, errlen)
                 : kind_done(c, w, ret_outcome, ret_body, err, errlen);
    w->closing = NULL;
    config_write_free(w);
    return rc;
}

/* ---- loading ------------------------------------------------------------- */

int config_next_id_row(struct store_batch *b, uint32_t next_id)
{
    char idbuf[16];
    snprintf(idbuf, sizeof(idbuf), "%" PRIu32, next_id);
    return store_batch_meta_put(b, CONFIG_META_NEXT_ID, idbuf) ? GPO_ENOMEM : 0;
}

/* A priority class the controller makes once (meta key `seeded` marks it
 * done): an admin may change or delete it later; it is not made again. */
struct seed {
    const char *name, *description, *seeded;
    int64_t order;
    bool may_preempt;
};

static int seed_class(struct config *c, const struct seed *sd, int64_t now_ms, char *err,
                      size_t errlen)
{
    char *done = NULL;
    int rc = store_meta_get(c->store, sd->seeded, &done);
    free(done);
    if (rc != GPO_ENOENT)
        return rc == 0 ? 0 : errbuf_set(err, errlen, rc, "store: %s", gpo_strerror(rc));
    struct cluster_class cls = {
        .id = c->next_id, .order = sd->order, .may_preempt = sd->may_preempt};
    cls.name = strdup(sd->name);
    cls.description = strdup(sd->description);
    json_t *o = cls.name && cls.description ? cluster_class_to_json(&cls, CLUSTER_STORED) : NULL;
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    struct store_batch *b = text ? store_batch_new() : NULL;
    bool have = cluster_class_get(c->cluster, sd->name) != NULL;
    rc = b ? 0 : GPO_ENOMEM;
    if (!rc && !have)
        rc = store_batch_config_put(b, STORE_CONFIG_PRIORITY_CLASSES, sd->name, text, now_ms);
    if (!rc && !have)
        rc = config_next_id_row(b, cls.id + 1);
    if (!rc)
        rc = store_batch_meta_put(b, sd->seeded, "1");
    free(text);
    char msg[256] = "";
    rc = rc ? (store_batch_free(b), rc) : store_commit_wait(c->store, b, NULL, 0, msg, sizeof(msg));
    if (!rc && !have) {
        c->next_id = cls.id + 1;
        rc = cluster_class_add(c->cluster, &cls, msg, sizeof(msg));
    }
    cluster_class_release(&cls);
    if (rc)
        errbuf_set(err, errlen, rc, "seeding the class '%s': %s %s", sd->name, gpo_strerror(rc),
                   msg);
    return rc;
}

/* At first start, the class jobs get when they name none, "normal" (order
 * 10, does not preempt), so that a new cluster runs jobs at once; and, at
 * first start or on a store from before services, "serving" (services'
 * replicas' default: above "normal", may preempt). */
static int seed_classes(struct config *c, int64_t now_ms, char *err, size_t errlen)
{
    struct seed normal = {"normal", "the default class", CONFIG_META_SEEDED, 10, false};
    int rc = seed_class(c, &normal, now_ms, err, errlen);
    const struct cluster_class *n = cluster_class_get(c->cluster, "normal");
    int64_t order = (n ? n->order : normal.order) + 10;
    struct seed serving = {"serving", "services' replicas: above normal, may preempt",
                           CONFIG_META_SEEDED_SERVING,
                           order > CLUSTER_ORDER_MAX ? CLUSTER_ORDER_MAX : order, true};
    return rc ? rc : seed_class(c, &serving, now_ms, err, errlen);
}

static int load_next_id(struct config *c, char *err, size_t errlen)
{
    char *next = NULL;
    int rc = store_meta_get(c->store, CONFIG_META_NEXT_ID, &next);
    c->next_id = 1;
    if (rc == GPO_ENOENT)
        return 0;
    if (rc)
        return errbuf_set(err, errlen, rc, "store: reading meta '%s': %s", CONFIG_META_NEXT_ID,
                          gpo_strerror(rc));
    char *end;
    unsigned long v = strtoul(next, &end, 10);
    c->next_id = *end || v == 0 || v > UINT32_MAX ? 0 : (uint32_t)v;
    free(next);
    if (!c->next_id)
        return errbuf_set(err, errlen, GPO_ECORRUPT, "store: meta '%s' is not an id",
                          CONFIG_META_NEXT_ID);
    return 0;
}

static int load_kind(struct config *c, const struct kind *k, char *err, size_t errlen)
{
    struct store_config *rows = NULL;
    size_t n = 0;
    int rc = store_config_list(c->store, k->store, &rows, &n);
    if (rc)
        return errbuf_set(err, errlen, rc, "store: listing %s: %s", k->path, gpo_strerror(rc));
    for (size_t i = 0; i < n && !rc; i++) {
        json_error_t jerr;
        json_t *o = json_loads(rows[i].spec, JSON_REJECT_DUPLICATES, &jerr);
        char msg[256] = "";
        union config_item item;
        memset(&item, 0, sizeof(item));
        rc = o ? k->decode(o, CLUSTER_STORED, &item, msg, sizeof(msg)) : GPO_ECORRUPT;
        json_decref(o);
        if (!rc && (rc = k->put(c->cluster, &item, false, msg, sizeof(msg))) != 0)
            k->release(&item);
        if (rc)
            errbuf_set(err, errlen, rc, "store: %s '%s': %s", k->label, rows[i].name,
                       o ? msg : jerr.text);
    }
    store_configs_free(rows, n);
    return rc;
}

int config_load(struct config *c, int64_t now_ms, char *err, size_t errlen)
{
    int rc = load_next_id(c, err, errlen);
    /* Pools first: teams refer to them. */
    static const enum config_kind order[] = {CONFIG_POOLS, CONFIG_CLASSES, CONFIG_TEAMS,
                                             CONFIG_PRICES, CONFIG_SERVICES};
    for (size_t o = 0; !rc && o < sizeof(order) / sizeof(order[0]); o++)
        rc = load_kind(c, &kinds[order[o]], err, errlen);
    rc = rc ? rc : seed_classes(c, now_ms, err, errlen);
    rc = rc ? rc : config_settings_load(c, err, errlen);
    return rc ? rc : config_nodes_load(c, now_ms, err, errlen);
}

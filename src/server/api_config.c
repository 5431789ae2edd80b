/*
 * api_config.c - teams, pools and priority classes: list, read, create or
 * replace (PUT, idempotent as `apply -f` needs), delete. Reads are open to
 * every user; writes are admin routes.
 *
 * A write is checked against the configuration (references must resolve, a
 * delete must leave nothing dangling), committed, and applied to memory in
 * the store's completion. One configuration write is in flight at a time: a
 * second gets 409 and may retry, so ids and references are decided on the
 * state that will be on disk.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/ledger.h"
#include "server/srv.h"
#include "base/banned.h"

/* One kind of configuration object, as a row of a table: the model's
 * functions behind void pointers, and what refers to it. */
struct cfg_kind {
    const char *path;  /* "teams" */
    const char *label; /* "team" */
    enum store_config_kind store;
    size_t size;
    int (*decode)(const json_t *obj, unsigned flags, void *ret, char *err, size_t errlen);
    json_t *(*to_json)(const void *item, unsigned flags);
    void (*release)(void *item);
    const void *(*get)(const struct cluster *m, const char *name);
    int (*put)(struct cluster *m, void *item, bool replace, char *err, size_t errlen);
    int (*remove)(struct cluster *m, const char *name);
    /* Answers 400/409 itself and returns false when the item cannot go in
     * (or, item NULL, `name` cannot go out). Under the lock. */
    bool (*refs_ok)(struct server *s, struct http_request *req, const void *item, const char *name);
    const void *(*at)(const struct cluster *m, size_t k);
    size_t (*count)(const struct cluster *m);
    uint32_t (*id_of)(const void *item);
    void (*set_id)(void *item, uint32_t id);
    const char *(*name_of)(const void *item);
};

/* ---- per-kind adapters ---- */

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
    }                                                                                              \
    static const char *kind##_name_of(const void *x)                                               \
    {                                                                                              \
        return ((const struct cluster_##kind *)x)->name;                                           \
    }

ADAPT(team, teams)
ADAPT(pool, pools)
ADAPT(class, classes)
ADAPT(price, prices)

/* Is some job that has not ended of `team` (or, team NULL, of class `cls`)? */
static const struct srv_job *live_job(const struct server *s, const char *team, const char *cls)
{
    for (size_t k = 0; k < s->njobs; k++) {
        const struct srv_job *j = s->jobs[k];
        if (srv_job_state_final(j->state))
            continue;
        if (team && strcmp(j->team, team) == 0)
            return j;
        if (cls && j->spec.priority && strcmp(j->spec.priority, cls) == 0)
            return j;
    }
    return NULL;
}

static bool team_refs_ok(struct server *s, struct http_request *req, const void *item,
                         const char *name)
{
    const struct cluster_team *t = item;
    if (t) {
        for (size_t q = 0; q < t->nquotas; q++) {
            if (!cluster_pool_get(&s->cluster, t->quotas[q].pool)) {
                http_request_error(req, 400, "invalid_field",
                                   "field 'quotas[%zu].pool': no pool '%s'", q, t->quotas[q].pool);
                return false;
            }
        }
        if (t->budget.block_below && !cluster_class_get(&s->cluster, t->budget.block_below)) {
            http_request_error(req, 400, "invalid_field",
                               "field 'budget.block_below': no priority class '%s'",
                               t->budget.block_below);
            return false;
        }
        return true;
    }
    const struct srv_job *j = live_job(s, name, NULL);
    if (j) {
        http_request_error(req, 409, "conflict", "team '%s' has job %" PRId64 " (%s)", name, j->id,
                           srv_job_state_name(j->state));
        return false;
    }
    return true;
}

static bool pool_refs_ok(struct server *s, struct http_request *req, const void *item,
                         const char *name)
{
    if (item)
        return true;
    for (size_t k = 0; k < s->cluster.nteams; k++) {
        const struct cluster_team *t = &s->cluster.teams[k];
        for (size_t q = 0; q < t->nquotas; q++) {
            if (strcmp(t->quotas[q].pool, name) == 0) {
                http_request_error(req, 409, "conflict", "team '%s' has a quota in pool '%s'",
                                   t->name, name);
                return false;
            }
        }
    }
    for (size_t k = 0; k < s->cluster.nnodes; k++) {
        if (strcmp(s->cluster.nodes[k].pool, name) == 0) {
            http_request_error(req, 409, "conflict", "node '%s' is in pool '%s'",
                               s->cluster.nodes[k].name, name);
            return false;
        }
    }
    return true;
}

static bool class_refs_ok(struct server *s, struct http_request *req, const void *item,
                          const char *name)
{
    if (item)
        return true;
    const struct srv_job *j = live_job(s, NULL, name);
    if (j) {
        http_request_error(req, 409, "conflict", "job %" PRId64 " (%s) has priority class '%s'",
                           j->id, srv_job_state_name(j->state), name);
        return false;
    }
    return true;
}

/* A price names a GPU type the cluster knows (one a node ever had). */
static bool price_refs_ok(struct server *s, struct http_request *req, const void *item,
                          const char *name)
{
    if (!item || cluster_type_id_get(&s->cluster, name))
        return true;
    char known[512] = "";
    size_t o = 0;
    for (size_t k = 0; k < s->cluster.ntype_ids && o < sizeof(known) - 70; k++) {
        int n = snprintf(known + o, sizeof(known) - o, "%s%s", k ? ", " : "",
                         s->cluster.type_ids[k].name);
        o += n > 0 ? (size_t)n : 0;
    }
    http_request_error(req, 400, "invalid_field", "field 'name': unknown GPU type '%s' (known: %s)",
                       name, known[0] ? known : "none yet: no node has registered");
    return false;
}

#define KIND(path_, label_, store_, kind, refs)                                                    \
    {                                                                                              \
        path_, label_, store_, sizeof(struct cluster_##kind), kind##_decode, kind##_to_json,       \
            kind##_release, kind##_get, kind##_put, kind##_remove, refs, kind##_at, kind##_count,  \
            kind##_id_of, kind##_set_id, kind##_name_of                                            \
    }

static const struct cfg_kind kinds[] = {
    KIND("teams", "team", STORE_CONFIG_TEAMS, team, team_refs_ok),
    KIND("pools", "pool", STORE_CONFIG_POOLS, pool, pool_refs_ok),
    KIND("priority-classes", "priority class", STORE_CONFIG_PRIORITY_CLASSES, class, class_refs_ok),
    KIND("prices", "price", STORE_CONFIG_PRICES, price, price_refs_ok),
};

/* The kind a request's path names: /v1/KIND[/...]. */
static const struct cfg_kind *kind_of(struct http_request *req)
{
    const char *p = http_request_path(req) + strlen("/v1/");
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        size_t n = strlen(kinds[k].path);
        if (strncmp(p, kinds[k].path, n) == 0 && (p[n] == '\0' || p[n] == '/'))
            return &kinds[k];
    }
    return NULL;
}

/* ---- reads ---- */

int srv_api_config_list(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const struct cfg_kind *k = kind_of(req);
    json_t *list = json_array();
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; list && i < k->count(&s->cluster); i++) {
        json_t *o = k->to_json(k->at(&s->cluster, i), 0);
        if (!o || json_array_append_new(list, o)) {
            json_decref(list);
            list = NULL;
        }
    }
    pthread_mutex_unlock(&s->lock);
    json_t *out = list ? json_pack("{s:o}", k->path, list) : NULL;
    if (!out)
        return http_request_error(req, 500, "internal", "out of memory");
    return http_request_respond_json(req, 200, out);
}

int srv_api_config_get(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const struct cfg_kind *k = kind_of(req);
    const char *name = http_request_param(req, "name");
    pthread_mutex_lock(&s->lock);
    const void *item = k->get(&s->cluster, name);
    json_t *o = item ? k->to_json(item, 0) : NULL;
    pthread_mutex_unlock(&s->lock);
    if (!item)
        return http_request_error(req, 404, "not_found", "no %s '%s'", k->label, name);
    if (!o)
        return http_request_error(req, 500, "internal", "out of memory");
    return http_request_respond_json(req, 200, o);
}

/* ---- writes ---- */

struct cfg_write {
    struct server *s;
    struct http_request *req;
    const struct cfg_kind *kind;
    char name[CLUSTER_NAME_MAX + 1];
    bool remove, replace;
    uint32_t next_id;                   /* s->next_config_id after this write */
    struct srv_ledger_pending *closing; /* a price change: the segments it closes */
    union {
        struct cluster_team team;
        struct cluster_pool pool;
        struct cluster_class cls;
        struct cluster_price price;
    } item;
};

static void cfg_write_done(void *ctx, const struct store_result *r)
{
    struct cfg_write *w = ctx;
    struct server *s = w->s;
    const struct cfg_kind *k = w->kind;
    json_t *o = NULL;
    char err[256] = "";
    int rc = r->err;
    pthread_mutex_lock(&s->lock);
    s->config_busy = false;
    if (!rc && w->remove) {
        k->remove(&s->cluster, w->name);
    } else if (!rc) {
        s->next_config_id = w->next_id;
        o = k->to_json(&w->item, 0);
        rc = k->put(&s->cluster, &w->item, w->replace, err, sizeof(err));
    }
    /* After the price is in the model: the segments reopen at it. */
    srv_ledger_price_apply(s, w->closing, r->err == 0);
    pthread_mutex_unlock(&s->lock);
    if (r->err)
        http_request_complete_error(w->req, 503, "store", "the change was not stored: %s",
                                    gpo_strerror(r->err));
    else if (rc)
        /* On disk but not in memory: a restart loads it. */
        http_request_complete_error(w->req, 500, "internal", "%s stored, not applied: %s", k->label,
                                    err);
    else if (w->remove)
        http_request_complete(w->req, 204, NULL);
    else
        http_request_complete(w->req, w->replace ? 200 : 201, o), o = NULL;
    json_decref(o);
    if (!w->remove)
        k->release(&w->item);
    free(w);
}

/* Commits w (built under the lock, which the caller still holds and this
 * releases) and suspends the request. */
static int cfg_write_commit(struct cfg_write *w, struct store_batch *b)
{
    struct server *s = w->s;
    s->config_busy = true;
    pthread_mutex_unlock(&s->lock);
    if (http_request_suspend(w->req, 0, NULL, NULL) != 0) {
        store_batch_free(b);
        pthread_mutex_lock(&s->lock);
        s->config_busy = false;
        srv_ledger_price_apply(s, w->closing, false);
        pthread_mutex_unlock(&s->lock);
        if (!w->remove)
            w->kind->release(&w->item);
        int rc = http_request_error(w->req, 503, "unavailable", "the server is stopping");
        free(w);
        return rc;
    }
    if (store_commit(s->store, b, cfg_write_done, w) != 0) {
        pthread_mutex_lock(&s->lock);
        s->config_busy = false;
        srv_ledger_price_apply(s, w->closing, false);
        pthread_mutex_unlock(&s->lock);
        http_request_complete_error(w->req, 503, "unavailable", "the store is closing");
        if (!w->remove)
            w->kind->release(&w->item);
        free(w);
    }
    return 0;
}

int srv_api_config_put(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const struct cfg_kind *k = kind_of(req);
    const char *name = http_request_param(req, "name");
    json_t *body = srv_body_named(req, name);
    if (!body)
        return 0;
    struct cfg_write *w = calloc(1, sizeof(*w));
    if (!w) {
        json_decref(body);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    char err[512];
    int rc = k->decode(body, 0, &w->item, err, sizeof(err));
    json_decref(body);
    if (rc) {
        free(w);
        return rc == GPO_ENOMEM ? http_request_error(req, 500, "internal", "out of memory")
                                : http_request_error(req, 400, "invalid_field", "%s", err);
    }
    w->s = s;
    w->req = req;
    w->kind = k;
    snprintf(w->name, sizeof(w->name), "%s", name);
    pthread_mutex_lock(&s->lock);
    if (s->config_busy) {
        pthread_mutex_unlock(&s->lock);
        k->release(&w->item);
        free(w);
        http_request_add_header(req, "Retry-After", "1");
        return http_request_error(req, 409, "conflict",
                                  "another configuration change is being stored; retry");
    }
    if (!k->refs_ok(s, req, &w->item, name)) {
        pthread_mutex_unlock(&s->lock);
        k->release(&w->item);
        free(w);
        return 0;
    }
    const void *old = k->get(&s->cluster, name);
    w->replace = old != NULL;
    w->next_id = s->next_config_id;
    k->set_id(&w->item, old ? k->id_of(old) : w->next_id++);
    json_t *stored = k->to_json(&w->item, CLUSTER_STORED);
    char *text = stored ? json_dumps(stored, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(stored);
    struct store_batch *b = text ? store_batch_new() : NULL;
    char idbuf[16];
    snprintf(idbuf, sizeof(idbuf), "%" PRIu32, w->next_id);
    int64_t now = srv_now_ms();
    rc = b ? store_batch_config_put(b, k->store, name, text, now) : GPO_ENOMEM;
    if (!rc && !w->replace)
        rc = store_batch_meta_put(b, SRV_META_NEXT_ID, idbuf);
    /* A new price closes the open segments of its type; the same one (apply
     * again) or a description changes nothing that costs. */
    if (!rc && k->store == STORE_CONFIG_PRICES &&
        (!old || ((const struct cluster_price *)old)->per_gpu_hour_micro !=
                     w->item.price.per_gpu_hour_micro))
        rc = srv_ledger_price_plan(s, name, now, b, &w->closing);
    free(text);
    if (rc) {
        pthread_mutex_unlock(&s->lock);
        srv_ledger_price_apply(s, w->closing, false);
        store_batch_free(b);
        k->release(&w->item);
        free(w);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    return cfg_write_commit(w, b);
}

int srv_api_config_delete(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const struct cfg_kind *k = kind_of(req);
    const char *name = http_request_param(req, "name");
    pthread_mutex_lock(&s->lock);
    if (!k->get(&s->cluster, name)) {
        pthread_mutex_unlock(&s->lock);
        return http_request_error(req, 404, "not_found", "no %s '%s'", k->label, name);
    }
    if (s->config_busy) {
        pthread_mutex_unlock(&s->lock);
        http_request_add_header(req, "Retry-After", "1");
        return http_request_error(req, 409, "conflict",
                                  "another configuration change is being stored; retry");
    }
    if (!k->refs_ok(s, req, NULL, name)) {
        pthread_mutex_unlock(&s->lock);
        return 0;
    }
    struct cfg_write *w = calloc(1, sizeof(*w));
    struct store_batch *b = w ? store_batch_new() : NULL;
    struct srv_ledger_pending *closing = NULL;
    if (!b || store_batch_config_delete(b, k->store, name) ||
        (k->store == STORE_CONFIG_PRICES &&
         srv_ledger_price_plan(s, name, srv_now_ms(), b, &closing))) {
        pthread_mutex_unlock(&s->lock);
        store_batch_free(b);
        free(w);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    *w = (struct cfg_write){.s = s, .req = req, .kind = k, .remove = true, .closing = closing};
    snprintf(w->name, sizeof(w->name), "%s", name);
    return cfg_write_commit(w, b);
}

/* At first start, the priority class jobs get when they name none: "normal"
 * (order 10, does not preempt), so that a new cluster runs jobs at once. An
 * admin may change or delete it later; it is not made again. */
static int seed_class(struct server *s, char *err, size_t errlen)
{
    char *done = NULL;
    int rc = store_meta_get(s->store, SRV_META_SEEDED, &done);
    free(done);
    if (rc != GPO_ENOENT)
        return rc == 0 ? 0 : (snprintf(err, errlen, "store: %s", gpo_strerror(rc)), rc);
    struct cluster_class c = {.id = s->next_config_id, .order = 10};
    c.name = strdup("normal");
    c.description = strdup("the default class");
    json_t *o = c.name && c.description ? cluster_class_to_json(&c, CLUSTER_STORED) : NULL;
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    char idbuf[16];
    snprintf(idbuf, sizeof(idbuf), "%" PRIu32, c.id + 1);
    struct store_batch *b = text ? store_batch_new() : NULL;
    bool have = cluster_class_get(&s->cluster, "normal") != NULL;
    rc = b ? 0 : GPO_ENOMEM;
    if (!rc && !have)
        rc = store_batch_config_put(b, STORE_CONFIG_PRIORITY_CLASSES, "normal", text, srv_now_ms());
    if (!rc && !have)
        rc = store_batch_meta_put(b, SRV_META_NEXT_ID, idbuf);
    if (!rc)
        rc = store_batch_meta_put(b, SRV_META_SEEDED, "1");
    free(text);
    char msg[256] = "";
    rc = rc ? (store_batch_free(b), rc) : store_commit_wait(s->store, b, NULL, 0, msg, sizeof(msg));
    if (!rc && !have) {
        s->next_config_id = c.id + 1;
        rc = cluster_class_add(&s->cluster, &c, msg, sizeof(msg));
    }
    cluster_class_release(&c);
    if (rc)
        snprintf(err, errlen, "seeding the class 'normal': %s %s", gpo_strerror(rc), msg);
    return rc;
}

int srv_config_load(struct server *s, char *err, size_t errlen)
{
    char *next = NULL;
    int rc = store_meta_get(s->store, SRV_META_NEXT_ID, &next);
    s->next_config_id = 1;
    if (rc == 0) {
        char *end;
        unsigned long v = strtoul(next, &end, 10);
        s->next_config_id = *end || v == 0 || v > UINT32_MAX ? 0 : (uint32_t)v;
        free(next);
        if (!s->next_config_id) {
            snprintf(err, errlen, "store: meta '%s' is not an id", SRV_META_NEXT_ID);
            return -EINVAL;
        }
    } else if (rc != GPO_ENOENT) {
        snprintf(err, errlen, "store: reading meta '%s': %s", SRV_META_NEXT_ID, gpo_strerror(rc));
        return rc;
    }
    /* Pools first: teams refer to them. */
    static const size_t order[] = {1, 2, 0, 3};
    for (size_t o = 0; o < sizeof(order) / sizeof(order[0]); o++) {
        const struct cfg_kind *k = &kinds[order[o]];
        struct store_config *rows = NULL;
        size_t n = 0;
        if ((rc = store_config_list(s->store, k->store, &rows, &n)) != 0) {
            snprintf(err, errlen, "store: listing %s: %s", k->path, gpo_strerror(rc));
            return rc;
        }
        for (size_t i = 0; i < n && !rc; i++) {
            json_error_t jerr;
            json_t *o2 = json_loads(rows[i].spec, JSON_REJECT_DUPLICATES, &jerr);
            char msg[256] = "";
            union {
                struct cluster_team team;
                struct cluster_pool pool;
                struct cluster_class cls;
                struct cluster_price price;
            } item;
            memset(&item, 0, sizeof(item));
            rc = o2 ? k->decode(o2, CLUSTER_STORED, &item, msg, sizeof(msg)) : -EINVAL;
            json_decref(o2);
            if (!rc && (rc = k->put(&s->cluster, &item, false, msg, sizeof(msg))) != 0)
                k->release(&item);
            if (rc)
                snprintf(err, errlen, "store: %s '%s': %s", k->label, rows[i].name,
                         o2 ? msg : jerr.text);
        }
        store_configs_free(rows, n);
        if (rc)
            return rc;
    }
    return seed_class(s, err, errlen);
}

/*
 * config_nodes.c - the nodes' records and the GPU type id table: loading,
 * registration, drain, resume and delete, and the marks of a node that
 * stopped heartbeating or heartbeats again (config.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/config/config_int.h"
#include "util/errbuf.h"
#include "base/banned.h"

static enum cluster_node_state state_of(const char *stored)
{
    return strcmp(stored, "draining") == 0 ? CLUSTER_NODE_DRAINING
           : strcmp(stored, "down") == 0   ? CLUSTER_NODE_DOWN
                                           : CLUSTER_NODE_UP;
}

static int load_type_ids(struct config *c, char *err, size_t errlen)
{
    char *types = NULL;
    int rc = store_meta_get(c->store, CONFIG_META_TYPE_IDS, &types);
    if (rc == GPO_ENOENT)
        return 0;
    if (rc)
        return errbuf_set(err, errlen, rc, "store: meta '%s': %s", CONFIG_META_TYPE_IDS,
                          gpo_strerror(rc));
    json_t *o = json_loads(types, 0, NULL);
    free(types);
    const char *name;
    json_t *v;
    rc = json_is_object(o) ? 0 : GPO_ECORRUPT;
    json_object_foreach(o, name, v)
    {
        if (!rc && (!json_is_integer(v) || json_integer_value(v) < 1 ||
                    json_integer_value(v) > UINT32_MAX))
            rc = GPO_ECORRUPT;
        if (!rc)
            rc =
                cluster_type_id_set(c->cluster, name, (uint32_t)json_integer_value(v), err, errlen);
    }
    json_decref(o);
    if (rc == GPO_ECORRUPT)
        errbuf_set(err, errlen, rc, "store: meta '%s' is not a table of ids", CONFIG_META_TYPE_IDS);
    return rc;
}

/* A node stored down was lost, and one stored drained may have been: what
 * the controller ended there may still run, so its GPUs are held until its
 * agent says which are clean; a node stored down rejoins by heartbeat. */
static void load_hold(struct config *c, const char *name)
{
    const struct cluster_node *n = cluster_node_get(c->cluster, name);
    struct node_rt *rt = nodes_find(c->nodes, name);
    if (!n || !rt || n->state == CLUSTER_NODE_UP)
        return;
    rt->lost = n->state == CLUSTER_NODE_DOWN;
    nodes_hold(c->nodes, name);
}

int config_nodes_load(struct config *c, int64_t now_ms, char *err, size_t errlen)
{
    int rc = load_type_ids(c, err, errlen);
    if (rc)
        return rc;
    struct store_node *rows = NULL;
    size_t n = 0;
    if ((rc = store_node_list(c->store, &rows, &n)) != 0)
        return errbuf_set(err, errlen, rc, "store: listing nodes: %s", gpo_strerror(rc));
    for (size_t k = 0; k < n && !rc; k++) {
        json_t *o = json_loads(rows[k].spec, 0, NULL);
        struct cluster_node node = {0};
        char msg[256] = "bad JSON";
        rc = o ? cluster_node_decode(o, CLUSTER_STORED, &node, msg, sizeof(msg)) : GPO_ECORRUPT;
        json_decref(o);
        if (!rc) {
            node.state = state_of(rows[k].state);
            if ((rc = cluster_node_add(c->cluster, &node, msg, sizeof(msg))) != 0)
                cluster_node_release(&node);
        }
        /* Agents get one node timeout from now to check in again, and
         * their nodes get no work before they have (nodes.h: unheard). */
        if (!rc && (rc = nodes_add(c->nodes, rows[k].name, now_ms)) == 0)
            nodes_find(c->nodes, rows[k].name)->unheard = true;
        if (!rc)
            load_hold(c, rows[k].name);
        if (rc)
            errbuf_set(err, errlen, rc, "store: node '%s': %s", rows[k].name, msg);
    }
    store_nodes_free(rows, n);
    return rc;
}

/* The node's record as stored (JSON text, caller frees), or NULL. */
static char *stored_text(const struct cluster_node *n)
{
    json_t *o = cluster_node_to_json(n, CLUSTER_STORED);
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    return text;
}

/* GPU types never seen get their ids in the plan, so that the table goes to
 * disk in the same transaction as the node. */
static int new_types(const struct config *c, struct config_write *w)
{
    const struct cluster *m = c->cluster;
    uint32_t top = 0;
    for (size_t k = 0; k < m->ntype_ids; k++)
        top = m->type_ids[k].id > top ? m->type_ids[k].id : top;
    w->new_types = calloc(w->item.node.ngpus ? w->item.node.ngpus : 1, sizeof(*w->new_types));
    if (!w->new_types)
        return GPO_ENOMEM;
    for (size_t g = 0; g < w->item.node.ngpus; g++) {
        const char *t = w->item.node.gpus[g].gpu_type;
        bool known = cluster_type_id_get(m, t) != NULL;
        for (size_t k = 0; k < w->nnew_types && !known; k++)
            known = strcmp(w->new_types[k].name, t) == 0;
        if (known)
            continue;
        w->new_types[w->nnew_types] = (struct cluster_type_id){strdup(t), ++top};
        if (!w->new_types[w->nnew_types++].name)
            return GPO_ENOMEM;
    }
    return 0;
}

/* The whole type table with the new types, as stored (caller frees), or NULL. */
static char *types_text(const struct config *c, const struct config_write *w)
{
    const struct cluster *m = c->cluster;
    json_t *types = json_object();
    for (size_t k = 0; types && k < m->ntype_ids; k++)
        json_object_set_new(types, m->type_ids[k].name, json_integer(m->type_ids[k].id));
    for (size_t k = 0; types && k < w->nnew_types; k++)
        json_object_set_new(types, w->new_types[k].name, json_integer(w->new_types[k].id));
    char *text = types ? json_dumps(types, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(types);
    return text;
}

/* Stores w's node (its id and new GPU types decided here) into a new batch. */
static int node_plan(struct config *c, struct config_write *w, int64_t now_ms,
                     struct store_batch **ret_batch)
{
    struct cluster_node *node = &w->item.node;
    const struct cluster_node *old = cluster_node_get(c->cluster, node->name);
    w->replace = old != NULL;
    w->next_id = c->next_id;
    node->id = old ? old->id : w->next_id++;
    int rc = new_types(c, w);
    char *text = rc ? NULL : stored_text(node);
    char *types = text ? types_text(c, w) : NULL;
    struct store_batch *b = types ? store_batch_new() : NULL;
    rc = b ? store_batch_node_put(b, node->name, text, cluster_node_state_name(node->state), now_ms)
           : GPO_ENOMEM;
    if (!rc && !w->replace)
        rc = config_next_id_row(b, w->next_id);
    if (!rc && w->nnew_types)
        rc = store_batch_meta_put(b, CONFIG_META_TYPE_IDS, types);
    free(text);
    free(types);
    if (rc) {
        store_batch_free(b);
        return GPO_ENOMEM;
    }
    c->busy = true;
    *ret_batch = b;
    return 0;
}

/* A GPU is one node's: a registration naming a UUID another node record
 * has (up, drained or down) is refused, so that no GPU is offered twice. */
static int uuids_free(const struct config *c, const struct cluster_node *node, char *err,
                      size_t errlen)
{
    const struct cluster *m = c->cluster;
    for (size_t n = 0; n < m->nnodes; n++) {
        const struct cluster_node *o = &m->nodes[n];
        if (strcmp(o->name, node->name) == 0)
            continue;
        for (size_t g = 0; g < node->ngpus; g++) {
            for (size_t k = 0; k < o->ngpus; k++) {
                if (strcmp(node->gpus[g].uuid, o->gpus[k].uuid) == 0)
                    return errbuf_set(err, errlen, GPO_ESTATE,
                                      "field 'gpus[%zu].uuid': GPU %s is node '%s''s (%s); a "
                                      "machine registered under a new name: delete the old "
                                      "record first (gpuorch nodes delete %s)",
                                      g, node->gpus[g].uuid, o->name,
                                      cluster_node_state_name(o->state), o->name);
            }
        }
    }
    return 0;
}

static int mig_copy(const struct cluster_mig *m, struct cluster_mig **ret)
{
    struct cluster_mig *c = calloc(1, sizeof(*c));
    if (!c || cluster_mig_copy(m, c)) {
        free(c);
        return GPO_ENOMEM;
    }
    *ret = c;
    return 0;
}

int config_node_put_plan(struct config *c, struct cluster_node *item, const char *client_addr,
                         int64_t now_ms, struct config_write **ret_w,
                         struct store_batch **ret_batch, char *err, size_t errlen)
{
    int rc = cluster_node_check(item, err, errlen);
    if (rc)
        return rc;
    struct config_write *w = calloc(1, sizeof(*w));
    if (!w)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    w->kind = CONFIG_WRITE_NODE;
    snprintf(w->name, sizeof(w->name), "%s", item->name);
    const char *name = w->name;
    struct cluster_node *node = &w->item.node;
    *node = *item;
    memset(item, 0, sizeof(*item));
    rc = c->busy ? errbuf_set(err, errlen, GPO_EBUSY,
                              "another configuration change is being stored; retry")
                 : 0;
    if (!rc && !cluster_pool_get(c->cluster, node->pool))
        rc = errbuf_set(err, errlen, GPO_EINVAL, "field 'pool': no pool '%s'", node->pool);
    rc = rc ? rc : uuids_free(c, node, err, errlen);
    w->registration = true;
    /* Without "addr", the controller reaches the agent where it came from. */
    if (!rc && !node->addr && !(node->addr = strdup(client_addr)))
        rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    /* A drained node stays drained; a node marked down comes back up. */
    const struct cluster_node *old = cluster_node_get(c->cluster, name);
    node->state =
        old && old->state == CLUSTER_NODE_DRAINING ? CLUSTER_NODE_DRAINING : CLUSTER_NODE_UP;
    /* Its own MIG setting is the admin's, not the agent's: it stays. */
    if (!rc && old && old->mig && !node->mig && mig_copy(old->mig, &node->mig))
        rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    if (!rc && node_plan(c, w, now_ms, ret_batch))
        rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    if (rc) {
        config_write_free(w);
        return rc;
    }
    *ret_w = w;
    return 0;
}

/* The write of node `name`'s record as it is (a copy through JSON: the
 * cluster has no copy function, and this is rare), for the caller to
 * change before node_plan. */
static int node_rewrite(struct config *c, const char *name, struct config_write **ret, char *err,
                        size_t errlen)
{
    const struct cluster_node *old = cluster_node_get(c->cluster, name);
    if (!old)
        return errbuf_set(err, errlen, GPO_ENOENT, "no node '%s'", name);
    if (c->busy)
        return errbuf_set(err, errlen, GPO_EBUSY,
                          "another configuration change is being stored; retry");
    json_t *o = cluster_node_to_json(old, 0);
    struct config_write *w = calloc(1, sizeof(*w));
    char msg[256];
    if (!o || !w || cluster_node_decode(o, 0, &w->item.node, msg, sizeof(msg)) != 0) {
        json_decref(o);
        free(w);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    json_decref(o);
    w->kind = CONFIG_WRITE_NODE;
    snprintf(w->name, sizeof(w->name), "%s", name);
    *ret = w;
    return 0;
}

int config_node_mig_plan(struct config *c, const char *name, const json_t *mig, int64_t now_ms,
                         struct config_write **ret_w, struct store_batch **ret_batch, char *err,
                         size_t errlen)
{
    struct cluster_mig *m = NULL;
    struct config_write *w = NULL;
    int rc = cluster_node_mig_decode(mig, &m, err, errlen);
    rc = rc ? rc : node_rewrite(c, name, &w, err, errlen);
    rc = rc ? rc : cluster_node_mig_check(&w->item.node, m, err, errlen);
    if (rc) {
        cluster_mig_release(m);
        free(m);
        config_write_free(w);
        return rc;
    }
    cluster_mig_release(w->item.node.mig);
    free(w->item.node.mig);
    w->item.node.mig = m;
    if (node_plan(c, w, now_ms, ret_batch)) {
        config_write_free(w);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    *ret_w = w;
    return 0;
}

int config_node_state_plan(struct config *c, const char *name, enum cluster_node_state state,
                           int64_t now_ms, struct config_write **ret_w,
                           struct store_batch **ret_batch, char *err, size_t errlen)
{
    struct config_write *w = NULL;
    int rc = node_rewrite(c, name, &w, err, errlen);
    if (rc)
        return rc;
    w->item.node.state = state;
    if (node_plan(c, w, now_ms, ret_batch)) {
        config_write_free(w);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    *ret_w = w;
    return 0;
}

/* A node record goes: its runtime with it (its agent's long-polls get 404). */
static int node_removed(struct config *c, const struct config_write *w,
                        enum config_outcome *ret_outcome, json_t **ret_body, char *err,
                        size_t errlen)
{
    int rc = cluster_node_remove(c->cluster, w->name);
    if (rc)
        return errbuf_set(err, errlen, rc, "node '%s': %s", w->name, gpo_strerror(rc));
    nodes_remove(c->nodes, w->name);
    *ret_outcome = CONFIG_REMOVED;
    *ret_body = NULL;
    return 0;
}

int config_node_done(struct config *c, struct config_write *w, int64_t now_ms,
                     enum config_outcome *ret_outcome, json_t **ret_body, char *err, size_t errlen)
{
    if (w->remove)
        return node_removed(c, w, ret_outcome, ret_body, err, errlen);
    c->next_id = w->next_id;
    const struct cluster_node *old = cluster_node_get(c->cluster, w->name);
    const struct node_rt *was = nodes_find(c->nodes, w->name);
    /* An agent registering a node marked down, or one whose GPUs are held,
     * is a new process: the hold starts over, for its answers. */
    bool hold = w->registration && old && (old->state == CLUSTER_NODE_DOWN || (was && was->hold));
    int rc = 0;
    for (size_t k = 0; k < w->nnew_types && !rc; k++)
        rc = cluster_type_id_set(c->cluster, w->new_types[k].name, w->new_types[k].id, err, errlen);
    json_t *o = cluster_node_to_json(&w->item.node, 0);
    if (!rc)
        rc = w->replace ? cluster_node_replace(c->cluster, &w->item.node, err, errlen)
                        : cluster_node_add(c->cluster, &w->item.node, err, errlen);
    if (!rc && (rc = nodes_add(c->nodes, w->name, now_ms)) != 0)
        errbuf_set(err, errlen, rc, "out of memory");
    if (!rc && hold) {
        nodes_find(c->nodes, w->name)->lost = false;
        nodes_hold(c->nodes, w->name);
    }
    if (!rc && !o)
        rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    if (rc) {
        json_decref(o);
        return rc;
    }
    *ret_outcome = w->replace ? CONFIG_REPLACED : CONFIG_CREATED;
    *ret_body = o;
    return 0;
}

int config_node_delete_plan(struct config *c, const char *name, int64_t now_ms,
                            struct config_write **ret_w, struct store_batch **ret_batch, char *err,
                            size_t errlen)
{
    (void)now_ms;
    if (!cluster_node_get(c->cluster, name))
        return errbuf_set(err, errlen, GPO_ENOENT, "no node '%s'", name);
    if (c->busy)
        return errbuf_set(err, errlen, GPO_EBUSY,
                          "another configuration change is being stored; retry");
    for (size_t k = 0; k < c->jobs->n; k++) {
        const struct job *j = c->jobs->v[k];
        if (j->att.n && attempt_on_node(&j->att, name))
            return errbuf_set(err, errlen, GPO_ESTATE,
                              "node '%s' holds attempt %" PRId64 " of job %" PRId64
                              " (%s); it can go once that has ended",
                              name, j->att.n, j->id, job_state_name(j->state));
    }
    struct config_write *w = calloc(1, sizeof(*w));
    struct store_batch *b = w ? store_batch_new() : NULL;
    if (!b || store_batch_node_delete(b, name)) {
        store_batch_free(b);
        free(w);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    w->kind = CONFIG_WRITE_NODE;
    w->remove = true;
    snprintf(w->name, sizeof(w->name), "%s", name);
    c->busy = true;
    *ret_w = w;
    *ret_batch = b;
    return 0;
}

int config_node_mark_row(const struct config *c, const char *name, enum cluster_node_state state,
                         int64_t now_ms, struct store_batch *b)
{
    const struct cluster_node *n = cluster_node_get(c->cluster, name);
    char *text = n ? stored_text(n) : NULL;
    int rc = text ? store_batch_node_put(b, name, text, cluster_node_state_name(state), now_ms) : 1;
    free(text);
    return rc ? GPO_ENOMEM : 0;
}

void config_node_mark_apply(struct config *c, const char *name, enum cluster_node_state state)
{
    /* Only the state changes, and the cluster indexes nothing by state. */
    for (size_t n = 0; n < c->cluster->nnodes; n++) {
        if (strcmp(c->cluster->nodes[n].name, name) == 0)
            c->cluster->nodes[n].state = state;
    }
}

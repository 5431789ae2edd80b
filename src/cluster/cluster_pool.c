/*
 * cluster_pool.c - a pool's aliases and its nodes' features (cluster.h):
 * their rules, their JSON, the rules between pools (no alias twice, at most
 * SCHED_MAX_FEATURES feature names), and looking them up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "cluster/cluster.h"
#include "cluster/cluster_int.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define FEATURE_RULE                                                                               \
    "1 to 63 bytes of letters, digits, '.', '_', '-', ':' and '=', starting with a letter or "     \
    "digit"

static bool alnum(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool cluster_feature_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > CLUSTER_FEATURE_MAX || !alnum((unsigned char)s[0]))
        return false;
    for (size_t i = 1; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!alnum(c) && c != '.' && c != '_' && c != '-' && c != ':' && c != '=')
            return false;
    }
    return true;
}

static int check_node_features(const struct cluster_pool *p, size_t i, char *err, size_t errlen)
{
    const struct cluster_node_features *nf = &p->node_features[i];
    char f[96], q[JSONV_QUOTE_MAX + 4];
    snprintf(f, sizeof(f), "node_features[%zu].node", i);
    int rc =
        cluster_check_shape(cluster_host_valid, HOST_RULE, "host name", f, nf->node, err, errlen);
    for (size_t k = 0; !rc && k < i; k++)
        if (strcmp(p->node_features[k].node, nf->node) == 0)
            return errbuf_set(err, errlen, GPO_EINVAL, "field '%s': '%s' is also in entry %zu", f,
                              cluster_quote(nf->node, q), k);
    for (size_t k = 0; !rc && k < nf->nfeatures; k++) {
        snprintf(f, sizeof(f), "node_features[%zu].features[%zu]", i, k);
        rc = cluster_check_shape(cluster_feature_valid, FEATURE_RULE, "feature name", f,
                                 nf->features[k], err, errlen);
        for (size_t j = 0; !rc && j < k; j++)
            if (strcmp(nf->features[j], nf->features[k]) == 0)
                return errbuf_set(err, errlen, GPO_EINVAL, "field '%s': '%s' is listed twice", f,
                                  cluster_quote(nf->features[k], q));
    }
    return rc;
}

int cluster_pool_check_extra(const struct cluster_pool *p, char *err, size_t errlen)
{
    char f[64], q[JSONV_QUOTE_MAX + 4];
    int rc = 0;
    if (p->naliases > CLUSTER_ALIASES_MAX || (p->naliases && !p->aliases))
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'aliases': %zu items, at most %d",
                          p->naliases, CLUSTER_ALIASES_MAX);
    for (size_t i = 0; !rc && i < p->naliases; i++) {
        snprintf(f, sizeof(f), "aliases[%zu]", i);
        rc = cluster_check_name(f, p->aliases[i], err, errlen);
        if (!rc && strcmp(p->aliases[i], p->name) == 0)
            return errbuf_set(err, errlen, GPO_EINVAL, "field '%s': '%s' is the pool's own name", f,
                              cluster_quote(p->name, q));
        for (size_t k = 0; !rc && k < i; k++)
            if (strcmp(p->aliases[k], p->aliases[i]) == 0)
                return errbuf_set(err, errlen, GPO_EINVAL, "field '%s': '%s' is listed twice", f,
                                  cluster_quote(p->aliases[i], q));
    }
    if (!rc &&
        (p->nnode_features > CLUSTER_NODE_FEATURES_MAX || (p->nnode_features && !p->node_features)))
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'node_features': %zu items, at most %d",
                          p->nnode_features, CLUSTER_NODE_FEATURES_MAX);
    for (size_t i = 0; !rc && i < p->nnode_features; i++)
        rc = check_node_features(p, i, err, errlen);
    return rc;
}

json_t *cluster_strings_json(char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        if (json_array_append_new(a, json_string(v[i]))) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

int cluster_pool_extra_json(const struct cluster_pool *p, json_t *o)
{
    /* Absent when empty, so a pool without them reads as it always has. */
    if (p->naliases &&
        json_object_set_new(o, "aliases", cluster_strings_json(p->aliases, p->naliases)) != 0)
        return GPO_ENOMEM;
    if (!p->nnode_features)
        return 0;
    json_t *nfs = json_array();
    int e = nfs ? 0 : -1;
    for (size_t i = 0; !e && i < p->nnode_features; i++) {
        const struct cluster_node_features *nf = &p->node_features[i];
        json_t *one = json_object(), *fs = cluster_strings_json(nf->features, nf->nfeatures);
        if (!one || !fs) {
            json_decref(one);
            json_decref(fs);
            e = -1;
            break;
        }
        e = json_object_set_new(one, "node", json_string(nf->node)) ||
            json_object_set_new(one, "features", fs) || json_array_append_new(nfs, one);
    }
    if (e) {
        json_decref(nfs);
        return GPO_ENOMEM;
    }
    return json_object_set_new(o, "node_features", nfs) ? GPO_ENOMEM : 0;
}

void cluster_pool_extra_release(struct cluster_pool *p)
{
    for (size_t i = 0; p->aliases && i < p->naliases; i++)
        free(p->aliases[i]);
    free(p->aliases);
    for (size_t i = 0; p->node_features && i < p->nnode_features; i++) {
        struct cluster_node_features *nf = &p->node_features[i];
        for (size_t k = 0; nf->features && k < nf->nfeatures; k++)
            free(nf->features[k]);
        free(nf->features);
        free(nf->node);
    }
    free(p->node_features);
}

/* ---- between pools ------------------------------------------------------ */

static bool pool_answers(const struct cluster_pool *p, const char *name)
{
    if (strcmp(p->name, name) == 0)
        return true;
    for (size_t i = 0; i < p->naliases; i++)
        if (strcmp(p->aliases[i], name) == 0)
            return true;
    return false;
}

const struct cluster_pool *cluster_pool_resolve(const struct cluster *m, const char *name)
{
    if (!m || !name)
        return NULL;
    const struct cluster_pool *p = cluster_pool_get(m, name);
    for (size_t i = 0; !p && i < m->npools; i++)
        if (pool_answers(&m->pools[i], name))
            p = &m->pools[i];
    return p;
}

const struct cluster_node_features *cluster_pool_node_features(const struct cluster_pool *pool,
                                                               const char *node)
{
    for (size_t i = 0; pool && node && i < pool->nnode_features; i++)
        if (strcmp(pool->node_features[i].node, node) == 0)
            return &pool->node_features[i];
    return NULL;
}

/* Adds the names of p's features not in names[0..*n) (at most max). */
static bool collect(const struct cluster_pool *p, const char **names, size_t *n, size_t max)
{
    for (size_t i = 0; i < p->nnode_features; i++) {
        const struct cluster_node_features *nf = &p->node_features[i];
        for (size_t k = 0; k < nf->nfeatures; k++) {
            bool seen = false;
            for (size_t j = 0; j < *n && !seen; j++)
                seen = strcmp(names[j], nf->features[k]) == 0;
            if (seen)
                continue;
            if (*n == max)
                return false;
            names[(*n)++] = nf->features[k];
        }
    }
    return true;
}

int cluster_pool_prepare(const struct cluster *m, const struct cluster_pool *p, char *err,
                         size_t errlen)
{
    char a[JSONV_QUOTE_MAX + 4], b[JSONV_QUOTE_MAX + 4];
    const char *names[SCHED_MAX_FEATURES];
    size_t n = 0;
    bool room = collect(p, names, &n, SCHED_MAX_FEATURES);
    for (size_t i = 0; i < m->npools; i++) {
        const struct cluster_pool *o = &m->pools[i];
        if (strcmp(o->name, p->name) == 0)
            continue; /* the pool being replaced */
        if (pool_answers(p, o->name))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'aliases': '%s' is the name of another pool",
                              cluster_quote(o->name, a));
        for (size_t k = 0; k < o->naliases; k++)
            if (pool_answers(p, o->aliases[k]))
                return errbuf_set(err, errlen, GPO_EINVAL, "'%s' is already an alias of pool '%s'",
                                  cluster_quote(o->aliases[k], a), cluster_quote(o->name, b));
        room = room && collect(o, names, &n, SCHED_MAX_FEATURES);
    }
    if (!room)
        return errbuf_set(err, errlen, GPO_E2BIG,
                          "field 'node_features': the cluster would have more than %d feature "
                          "names",
                          SCHED_MAX_FEATURES);
    return cluster_pool_mig_check(m, p, err, errlen);
}

/* ---- the view's feature table --------------------------------------------- */

static int by_name(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

size_t cluster_feature_names(const struct cluster *m, const char *ret[SCHED_MAX_FEATURES])
{
    size_t n = 0;
    for (size_t i = 0; i < m->npools; i++)
        (void)collect(&m->pools[i], ret, &n, SCHED_MAX_FEATURES);
    qsort(ret, n, sizeof(*ret), by_name);
    return n;
}

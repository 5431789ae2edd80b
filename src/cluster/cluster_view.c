/*
 * cluster_view.c - the configured cluster as the scheduler core sees it:
 * indices instead of names, quotas expanded per GPU type, one string table
 * (cluster.h: struct cluster_view), and jobs' requests resolved against it.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "cluster/cluster.h"
#include "cluster/cluster_int.h"
#include "util/jsonv.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define KNOWN_MAX 200 /* bytes of the "(known: ...)" list in a message */

/* ---- the core's view --------------------------------------------------- */

void cluster_view_release(struct cluster_view *cl)
{
    if (!cl)
        return;
    free(cl->nodes);
    free(cl->gpus);
    free(cl->pools);
    free(cl->gpu_types);
    free(cl->teams);
    free(cl->quotas);
    free(cl->classes);
    free(cl->gpu_node);
    free(cl->gpu_index);
    free(cl->gpu_uuid);
    free(cl->features);
    free(cl->strings);
    memset(cl, 0, sizeof(*cl));
}

/* Scratch of one build. */
struct build {
    const struct cluster *m;
    struct cluster_view cl;
    uint32_t *core_type; /* [type table entry]: core type index, or SCHED_NONE */
    uint8_t *pool_type;  /* [pool * ntypes + type]: some node of the pool has the type */
    size_t ntypes, ngpus, nquotas;
    const char *feature[SCHED_MAX_FEATURES]; /* the cluster's, sorted (borrowed from m) */
    size_t nfeatures;
    char *at; /* next free byte of cl.strings */
};

static const char *keep(struct build *b, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = memcpy(b->at, s, n);
    b->at += n;
    return p;
}

static void *alloc(size_t n, size_t size)
{
    return calloc(n ? n : 1, size);
}

/* Counts, string space, and the GPU types present with their core indices. */
static int build_size(struct build *b, char *err, size_t errlen)
{
    const struct cluster *m = b->m;
    char q[JSONV_QUOTE_MAX + 4], q2[JSONV_QUOTE_MAX + 4];
    size_t bytes = 1;
    for (size_t i = 0; i < m->npools; i++)
        bytes += strlen(m->pools[i].name) + 1;
    for (size_t i = 0; i < m->nclasses; i++)
        bytes += strlen(m->classes[i].name) + 1;
    for (size_t i = 0; i < m->nteams; i++)
        bytes += strlen(m->teams[i].name) + 1;
    for (size_t i = 0; i < m->ntype_ids; i++)
        bytes += strlen(m->type_ids[i].name) + 1;
    b->nfeatures = cluster_feature_names(m, b->feature);
    for (size_t i = 0; i < b->nfeatures; i++)
        bytes += strlen(b->feature[i]) + 1;
    b->core_type = alloc(m->ntype_ids, sizeof(*b->core_type));
    if (!b->core_type)
        return GPO_ENOMEM;
    for (size_t i = 0; i < m->ntype_ids; i++)
        b->core_type[i] = SCHED_NONE;
    for (size_t n = 0; n < m->nnodes; n++) {
        const struct cluster_node *node = &m->nodes[n];
        bytes += strlen(node->name) + 1;
        for (size_t g = 0; g < node->ngpus; g++)
            bytes += strlen(node->gpus[g].uuid) + 1;
        b->ngpus += node->ngpus;
        if (node->ngpus == 0)
            continue;
        const struct cluster_type_id *t = cluster_type_id_get(m, node->gpus[0].gpu_type);
        size_t e = t ? (size_t)(t - m->type_ids) : 0;
        if (!t)
            return errbuf_set(err, errlen, GPO_EINVAL, "node '%s': GPU type '%s' has no id",
                              cluster_quote(node->name, q),
                              cluster_quote(node->gpus[0].gpu_type, q2));
        b->core_type[e] = 0; /* present; numbered below */
    }
    for (size_t i = 0; i < m->ntype_ids; i++)
        if (b->core_type[i] != SCHED_NONE)
            b->core_type[i] = (uint32_t)b->ntypes++;
    if (b->ntypes > SCHED_MAX_GPU_TYPES)
        return errbuf_set(err, errlen, GPO_E2BIG, "%zu GPU types, the scheduler takes at most %d",
                          b->ntypes, SCHED_MAX_GPU_TYPES);
    b->cl.strings = malloc(bytes);
    b->at = b->cl.strings;
    return b->cl.strings ? 0 : GPO_ENOMEM;
}

static uint32_t node_type(const struct build *b, const struct cluster_node *node)
{
    /* build_size checked that every node's type has an entry. */
    return b->core_type[cluster_type_id_get(b->m, node->gpus[0].gpu_type) - b->m->type_ids];
}

static uint32_t pool_index(const struct cluster *m, const char *name)
{
    return (uint32_t)(cluster_pool_get(m, name) - m->pools); /* refs were checked */
}

/* The feature bits of a node: those its pool's admin gave it. */
static uint64_t node_features(const struct build *b, const struct cluster_node *node)
{
    const struct cluster_node_features *nf =
        cluster_pool_node_features(cluster_pool_get(b->m, node->pool), node->name);
    uint64_t bits = 0;
    for (size_t k = 0; nf && k < nf->nfeatures; k++)
        for (size_t f = 0; f < b->nfeatures; f++)
            if (strcmp(b->feature[f], nf->features[k]) == 0)
                bits |= UINT64_C(1) << f;
    return bits;
}

static int build_features(struct build *b)
{
    struct cluster_view *cl = &b->cl;
    cl->features = alloc(b->nfeatures, sizeof(*cl->features));
    if (!cl->features)
        return GPO_ENOMEM;
    for (size_t f = 0; f < b->nfeatures; f++)
        cl->features[f] = keep(b, b->feature[f]);
    cl->nfeatures = (uint32_t)b->nfeatures;
    return 0;
}

/* Whether an instance of `profile` at `start` fits beside g's instances by
 * the placement table (a node's report is not trusted to: a bad one would
 * make the whole view invalid). */
static bool fits(const struct sched_gpu *g, uint8_t profile, uint8_t start)
{
    struct mig_instance v[MIG_MAX_INSTANCES];
    for (uint8_t k = 0; k < g->mig_n; k++)
        v[k] = (struct mig_instance){.profile = g->mig[k].profile, .start = g->mig[k].start};
    v[g->mig_n] = (struct mig_instance){.profile = profile, .start = start};
    return mig_layout_check(g->mig_type, v, (size_t)g->mig_n + 1, NULL, 0) == 0;
}

/* A GPU's MIG instances as the core sees them: with MIG on, those that
 * can take a job (a compute instance, so a UUID, and a profile the
 * catalogue knows) and fit the placement table beside the ones before,
 * sorted by start slot. */
static void view_mig(const struct cluster_gpu *mg, struct sched_gpu *g)
{
    g->mig_type = mg->mig_enabled ? mig_type_find(mg->gpu_type) : NULL;
    for (size_t k = 0; g->mig_type && k < mg->nmig && g->mig_n < MIG_MAX_INSTANCES; k++) {
        const struct cluster_mig_instance *mi = &mg->mig[k];
        int p = mi->profile && mi->uuid && mi->ci_id >= 0
                    ? mig_profile_lookup(g->mig_type, mi->profile, NULL, 0)
                    : GPO_ENOENT;
        if (p < 0 || mi->start >= MIG_SLOTS || !fits(g, (uint8_t)p, (uint8_t)mi->start))
            continue;
        uint8_t at = g->mig_n++;
        while (at > 0 && g->mig[at - 1].start > mi->start) {
            g->mig[at] = g->mig[at - 1];
            at--;
        }
        g->mig[at] = (struct sched_mig_instance){(uint8_t)p, (uint8_t)mi->start};
    }
}

static int build_nodes(struct build *b)
{
    const struct cluster *m = b->m;
    struct cluster_view *cl = &b->cl;
    cl->nodes = alloc(m->nnodes, sizeof(*cl->nodes));
    cl->gpus = alloc(b->ngpus, sizeof(*cl->gpus));
    cl->gpu_node = alloc(b->ngpus, sizeof(*cl->gpu_node));
    cl->gpu_index = alloc(b->ngpus, sizeof(*cl->gpu_index));
    cl->gpu_uuid = alloc(b->ngpus, sizeof(*cl->gpu_uuid));
    b->pool_type = alloc(m->npools * b->ntypes, 1);
    if (!cl->nodes || !cl->gpus || !cl->gpu_node || !cl->gpu_index || !cl->gpu_uuid ||
        !b->pool_type)
        return GPO_ENOMEM;
    static const enum sched_node_state states[] = {
        [CLUSTER_NODE_UP] = SCHED_NODE_UP,
        [CLUSTER_NODE_DRAINING] = SCHED_NODE_DRAINING,
        [CLUSTER_NODE_DOWN] = SCHED_NODE_DOWN,
    };
    uint32_t g = 0;
    for (size_t n = 0; n < m->nnodes; n++) {
        const struct cluster_node *node = &m->nodes[n];
        uint32_t pool = pool_index(m, node->pool);
        uint32_t type = node->ngpus ? node_type(b, node) : SCHED_NONE;
        cl->nodes[n] = (struct sched_node){.name = keep(b, node->name),
                                           .pool = pool,
                                           .state = states[node->state],
                                           .cpus = node->cpus,
                                           .mem_mib = (uint64_t)node->mem_mib,
                                           .gpu_first = g,
                                           .ngpus = (uint32_t)node->ngpus,
                                           .features = node_features(b, node)};
        if (node->ngpus)
            b->pool_type[pool * b->ntypes + type] = 1;
        for (size_t i = 0; i < node->ngpus; i++, g++) {
            const struct cluster_gpu *mg = &node->gpus[i];
            cl->gpus[g] = (struct sched_gpu){.type = type,
                                             .mem_mib = mg->mem_mib,
                                             .nvlink_domain = (int32_t)mg->nvlink_domain,
                                             .mig_slices = (uint8_t)mg->mig_slices,
                                             .mig_enabled = mg->mig_enabled};
            view_mig(mg, &cl->gpus[g]);
            cl->gpu_node[g] = (uint32_t)n;
            cl->gpu_index[g] = mg->index;
            cl->gpu_uuid[g] = keep(b, mg->uuid);
        }
    }
    return 0;
}

/* Does the team name this pool and core type in an entry of its own? */
static bool names_type(const struct build *b, const struct cluster_team *t, const char *pool,
                       uint32_t type)
{
    for (size_t q = 0; q < t->nquotas; q++) {
        const struct cluster_quota *mq = &t->quotas[q];
        if (mq->gpu_type && strcmp(mq->pool, pool) == 0) {
            const struct cluster_type_id *e = cluster_type_id_get(b->m, mq->gpu_type);
            if (e && b->core_type[e - b->m->type_ids] == type)
                return true;
        }
    }
    return false;
}

/* The team's quotas, expanded, appended to cl.quotas. */
static void build_quotas(struct build *b, const struct cluster_team *t, struct sched_team *st)
{
    struct sched_quota *out = b->cl.quotas + b->nquotas;
    uint32_t n = 0;
    for (size_t q = 0; q < t->nquotas; q++) {
        const struct cluster_quota *mq = &t->quotas[q];
        struct sched_quota sq = {.pool = pool_index(b->m, mq->pool),
                                 .guaranteed_milli = mq->guaranteed_milli,
                                 .borrow_limit_milli = mq->borrow_limit_milli};
        if (mq->gpu_type) {
            const struct cluster_type_id *e = cluster_type_id_get(b->m, mq->gpu_type);
            sq.gpu_type = e ? b->core_type[e - b->m->type_ids] : SCHED_NONE;
            if (sq.gpu_type != SCHED_NONE)
                out[n++] = sq;
            continue;
        }
        for (uint32_t type = 0; type < b->ntypes; type++) {
            if (!b->pool_type[sq.pool * b->ntypes + type] || names_type(b, t, mq->pool, type))
                continue;
            sq.gpu_type = type;
            out[n++] = sq;
        }
    }
    st->quotas = out;
    st->nquotas = n;
    b->nquotas += n;
}

static int build_teams(struct build *b)
{
    const struct cluster *m = b->m;
    struct cluster_view *cl = &b->cl;
    size_t most = 0;
    for (size_t t = 0; t < m->nteams; t++)
        for (size_t q = 0; q < m->teams[t].nquotas; q++)
            most += m->teams[t].quotas[q].gpu_type ? 1 : b->ntypes;
    cl->teams = alloc(m->nteams, sizeof(*cl->teams));
    cl->quotas = alloc(most, sizeof(*cl->quotas));
    cl->pools = alloc(m->npools, sizeof(*cl->pools));
    cl->classes = alloc(m->nclasses, sizeof(*cl->classes));
    cl->gpu_types = alloc(b->ntypes, sizeof(*cl->gpu_types));
    if (!cl->teams || !cl->quotas || !cl->pools || !cl->classes || !cl->gpu_types)
        return GPO_ENOMEM;
    for (size_t t = 0; t < m->nteams; t++) {
        const struct cluster_team *mt = &m->teams[t];
        cl->teams[t] = (struct sched_team){.id = mt->id,
                                           .name = keep(b, mt->name),
                                           .weight = mt->weight,
                                           .borrow_limit_milli = mt->borrow_limit_milli};
        build_quotas(b, mt, &cl->teams[t]);
    }
    for (size_t p = 0; p < m->npools; p++)
        cl->pools[p].name = keep(b, m->pools[p].name);
    for (size_t c = 0; c < m->nclasses; c++)
        cl->classes[c] = (struct sched_prio_class){.name = keep(b, m->classes[c].name),
                                                   .order = (int32_t)m->classes[c].order,
                                                   .may_preempt = m->classes[c].may_preempt};
    for (size_t e = 0; e < m->ntype_ids; e++)
        if (b->core_type[e] != SCHED_NONE)
            cl->gpu_types[b->core_type[e]] = (struct sched_gpu_type){
                .id = m->type_ids[e].id, .name = keep(b, m->type_ids[e].name)};
    return 0;
}

int cluster_view_build(const struct cluster *m, struct cluster_view *ret, char *err, size_t errlen)
{
    if (!m || !ret)
        return errbuf_set(err, errlen, GPO_EINVAL, "no cluster or view");
    int rc = cluster_check_refs(m, err, errlen);
    if (rc)
        return rc;
    struct build b = {.m = m};
    rc = build_size(&b, err, errlen);
    rc = rc ? rc : build_features(&b);
    rc = rc ? rc : build_nodes(&b);
    rc = rc ? rc : build_teams(&b);
    if (rc == 0) {
        struct cluster_view *cl = &b.cl;
        cl->c = (struct sched_cluster){.nodes = cl->nodes,
                                       .nnodes = (uint32_t)m->nnodes,
                                       .gpus = cl->gpus,
                                       .ngpus = (uint32_t)b.ngpus,
                                       .pools = cl->pools,
                                       .npools = (uint32_t)m->npools,
                                       .gpu_types = cl->gpu_types,
                                       .ngpu_types = (uint32_t)b.ntypes,
                                       .teams = cl->teams,
                                       .nteams = (uint32_t)m->nteams,
                                       .classes = cl->classes,
                                       .nclasses = (uint32_t)m->nclasses};
        const char *what = NULL;
        rc = sched_cluster_check(&cl->c, &what);
        if (rc)
            errbuf_set(err, errlen, rc, "the configuration does not make a valid cluster: %s",
                       what ? what : "?");
    } else if (rc == GPO_ENOMEM) {
        errbuf_set(err, errlen, rc, "out of memory");
    }
    free(b.core_type);
    free(b.pool_type);
    if (rc) {
        cluster_view_release(&b.cl);
        return rc;
    }
    *ret = b.cl;
    return 0;
}

const char *cluster_view_node_name(const struct cluster_view *cl, uint32_t node)
{
    return cl && node < cl->c.nnodes ? cl->nodes[node].name : NULL;
}

/* ---- jobs and allocations ---------------------------------------------- */

/* Which names an "unknown ..." message lists. */
enum listing { LIST_NONE, LIST_CLASSES, LIST_TYPES };

/* "a, b, c": the cluster's class or GPU type names, cut with "..." to fit. */
static const char *known(const struct sched_cluster *c, enum listing what, char buf[KNOWN_MAX])
{
    const char
        *names[SCHED_MAX_GPU_TYPES > SCHED_MAX_CLASSES ? SCHED_MAX_GPU_TYPES : SCHED_MAX_CLASSES];
    uint32_t n = what == LIST_TYPES ? c->ngpu_types : c->nclasses;
    for (uint32_t i = 0; i < n; i++)
        names[i] = what == LIST_TYPES ? c->gpu_types[i].name : c->classes[i].name;
    return cluster_names_list(names, n, buf, KNOWN_MAX);
}

static int resolve(const struct sched_cluster *c, const char *what, const char *name,
                   int64_t (*find)(const struct sched_cluster *, const char *), enum listing list,
                   uint32_t *ret, char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4], names[KNOWN_MAX];
    int64_t i = find(c, name);
    if (i >= 0) {
        *ret = (uint32_t)i;
        return 0;
    }
    if (list == LIST_NONE)
        return errbuf_set(err, errlen, GPO_EINVAL, "unknown %s '%s'", what, cluster_quote(name, q));
    return errbuf_set(err, errlen, GPO_EINVAL, "unknown %s '%s' (known: %s)", what,
                      cluster_quote(name, q), known(c, list, names));
}

const char *cluster_names_list(const char *const *names, size_t n, char *buf, size_t size)
{
    size_t used = 0;
    for (size_t i = 0; i < n && size; i++) {
        if (used + strlen(names[i]) + 2 + 4 >= size) {
            snprintf(buf + used, size - used, "%s...", i ? ", " : "");
            return buf;
        }
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", names[i]);
    }
    return n && size ? buf : "none";
}

static bool same_nocase(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
        if ((x >= 'A' && x <= 'Z' ? x + 32 : x) != (y >= 'A' && y <= 'Z' ? y + 32 : y))
            return false;
        if (!x)
            return true;
    }
    return true;
}

int cluster_gpu_type_match(const char *const *types, size_t n, const char *want, size_t *ret,
                           char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4], names[KNOWN_MAX];
    size_t wl = strlen(want), hit = n, hits = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(types[i], want) == 0) {
            *ret = i;
            return 0;
        }
    for (size_t i = 0; i < n && !hits; i++)
        if (strlen(types[i]) == wl && same_nocase(types[i], want, wl))
            hit = i, hits = 1;
    const char *matched[SCHED_MAX_GPU_TYPES];
    for (size_t i = 0; i < n && hit == n; i++) {
        const char *dash = strchr(types[i], '-');
        size_t sl = dash ? (size_t)(dash - types[i]) : strlen(types[i]);
        if (sl == wl && same_nocase(types[i], want, wl) && hits < SCHED_MAX_GPU_TYPES)
            matched[hits++] = types[i];
    }
    if (hits == 1 && hit == n) {
        for (hit = 0; types[hit] != matched[0]; hit++)
            ;
    }
    if (hits == 1) {
        *ret = hit;
        return 0;
    }
    if (hits > 1)
        return errbuf_set(err, errlen, GPO_EINVAL, "GPU type '%s' matches several: %s; give one",
                          cluster_quote(want, q),
                          cluster_names_list(matched, hits, names, sizeof(names)));
    return errbuf_set(err, errlen, GPO_ENOENT, "unknown GPU type '%s' (known: %s)",
                      cluster_quote(want, q), cluster_names_list(types, n, names, sizeof(names)));
}

int cluster_constraint_masks(const char *const *features, size_t n, const char *constraint,
                             uint64_t masks[SCHED_CONSTRAINT_TERMS], uint32_t *ret_nterms,
                             char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4], names[KNOWN_MAX], word[CLUSTER_FEATURE_MAX + 1];
    uint64_t out[SCHED_CONSTRAINT_TERMS] = {0};
    uint32_t nterms = 1;
    for (const char *p = constraint; p && *p;) {
        size_t len = strcspn(p, "&|");
        if (len == 0 || len > CLUSTER_FEATURE_MAX)
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'constraint': '%s' is not features joined by '&' or '|'",
                              cluster_quote(constraint, q));
        memcpy(word, p, len);
        word[len] = '\0';
        size_t f = 0;
        while (f < n && strcmp(features[f], word) != 0)
            f++;
        if (f == n)
            return errbuf_set(
                err, errlen, GPO_EINVAL, "field 'constraint': unknown feature '%s' (known: %s)",
                cluster_quote(word, q), cluster_names_list(features, n, names, sizeof(names)));
        out[nterms - 1] |= UINT64_C(1) << f;
        p += len;
        if (*p == '|' && ++nterms > SCHED_CONSTRAINT_TERMS)
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'constraint': more than %d alternatives joined by '|'",
                              SCHED_CONSTRAINT_TERMS);
        if (*p)
            p++;
    }
    if (!constraint || !*constraint)
        nterms = 0;
    memcpy(masks, out, sizeof(out));
    *ret_nterms = nterms;
    return 0;
}

/* The job's GPU type among the view's, by cluster_gpu_type_match. */
static int resolve_type(const struct sched_cluster *c, const char *want, uint32_t *ret, char *err,
                        size_t errlen)
{
    const char *types[SCHED_MAX_GPU_TYPES];
    for (uint32_t i = 0; i < c->ngpu_types; i++)
        types[i] = c->gpu_types[i].name;
    size_t at;
    int rc = cluster_gpu_type_match(types, c->ngpu_types, want, &at, err, errlen);
    if (rc == 0)
        *ret = (uint32_t)at;
    return rc ? GPO_EINVAL : 0;
}

/* Slurm's shape, as the core takes it. */
static int request_shape(const struct cluster_view *cl, const struct jobspec *spec,
                         struct sched_job *j, char *err, size_t errlen)
{
    j->nodes = spec->nodes;
    j->exclusive = spec->exclusive;
    j->mem_whole_node = spec->mem_whole_node;
    uint32_t nterms = 0;
    int rc = spec->constraint
                 ? cluster_constraint_masks(cl->features, cl->nfeatures, spec->constraint,
                                            j->constraint, &nterms, err, errlen)
                 : 0;
    j->nconstraint = (uint8_t)nterms;
    return rc;
}

int cluster_job_request(const struct cluster_view *cl, const struct jobspec *spec,
                        const char *user_team, const char *default_class, struct sched_job *ret,
                        char *err, size_t errlen)
{
    if (!cl || !spec || !ret)
        return errbuf_set(err, errlen, GPO_EINVAL, "no cluster, job or result");
    const struct sched_cluster *c = &cl->c;
    const char *team = spec->team ? spec->team : user_team;
    const char *cls = spec->priority ? spec->priority : default_class;
    if (!team)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "no team: the job names none and its user has none");
    if (!cls)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "no priority class: the job names none and there is no default");
    if (spec->time_limit_s < 0 || spec->time_limit_s > INT64_MAX / 1000)
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'time_limit_s': %lld is out of range",
                          (long long)spec->time_limit_s);
    struct sched_job j = {.pool = SCHED_ANY, .gpu_type = SCHED_ANY};
    int rc = resolve(c, "team", team, sched_team_find, LIST_NONE, &j.team, err, errlen);
    rc = rc ? rc
            : resolve(c, "priority class", cls, sched_class_find, LIST_CLASSES, &j.prio, err,
                      errlen);
    if (rc == 0 && spec->pool)
        rc = resolve(c, "pool", spec->pool, sched_pool_find, LIST_NONE, &j.pool, err, errlen);
    if (rc == 0 && spec->gpu_type)
        rc = resolve_type(c, spec->gpu_type, &j.gpu_type, err, errlen);
    rc = rc ? rc : request_shape(cl, spec, &j, err, errlen);
    rc = rc ? rc : cluster_job_mig(c, spec, &j, err, errlen);
    if (rc)
        return rc;
    j.gpus = spec->gpus;
    j.gpu_milli = spec->gpu_milli;
    j.gpu_mem_mib = spec->gpu_mem_mib;
    j.min_gpu_mem_mib = spec->min_gpu_mem_mib;
    j.cpus = spec->cpus;
    j.mem_mib = spec->mem_mib;
    j.time_limit_ms = spec->time_limit_s * 1000;
    j.multi_node = spec->multi_node;
    j.checkpointable = spec->checkpointable;
    *ret = j;
    return 0;
}

int cluster_view_alloc_gpus(const struct cluster_view *cl, const struct sched_alloc *alloc,
                            struct cluster_alloc_gpu **ret_gpus, size_t *ret_n)
{
    if (!cl || !alloc || !ret_gpus || !ret_n || (alloc->nshares && !alloc->shares))
        return GPO_EINVAL;
    struct cluster_alloc_gpu *out = calloc(alloc->nshares ? alloc->nshares : 1, sizeof(*out));
    if (!out)
        return GPO_ENOMEM;
    for (uint32_t i = 0; i < alloc->nshares; i++) {
        const struct sched_share *s = &alloc->shares[i];
        if (s->gpu >= cl->c.ngpus) {
            free(out);
            return GPO_EINVAL;
        }
        out[i] = (struct cluster_alloc_gpu){.node = cl->nodes[cl->gpu_node[s->gpu]].name,
                                            .uuid = cl->gpu_uuid[s->gpu],
                                            .index = cl->gpu_index[s->gpu],
                                            .milli = s->milli,
                                            .mem_mib = s->mem_mib};
    }
    *ret_gpus = out;
    *ret_n = alloc->nshares;
    return 0;
}

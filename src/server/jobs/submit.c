/*
 * submit.c - a submission's rows and its jobs in memory (jobs.h), and its
 * names and shape resolved against the configuration.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "server/jobs/jobs.h"
#include "util/errbuf.h"
#include "base/banned.h"

void job_submit_release(struct job_submit *sub)
{
    jobspec_release(&sub->spec);
}

int job_submit_rows(const struct job_submit *sub, const char *key, struct store_batch *b)
{
    json_t *spec = jobspec_to_json(&sub->spec);
    char *text =
        spec ? json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(spec);
    int rc = text ? 0 : GPO_ENOMEM;
    for (size_t k = 0; k < sub->ntasks && !rc; k++) {
        struct store_job_insert ins = STORE_JOB_INSERT_INIT;
        ins.user_id = sub->user_id;
        ins.team = sub->spec.team;
        ins.state = job_state_name(JOB_PENDING);
        ins.submit_ms = sub->submit_ms;
        ins.spec = text;
        if (sub->spec.array.n) {
            ins.array_id = STORE_ARRAY_FIRST;
            ins.array_index = sub->spec.array.index[k];
        }
        ins.idempotency_key = k == 0 ? key : NULL;
        ins.idempotency_ttl_ms = sub->idempotency_ttl_ms;
        ins.hold = job_hold_name(sub->hold);
        rc = store_batch_job_insert(b, &ins) ? GPO_ENOMEM : 0;
    }
    /* Expired keys go as keys come: one indexed delete, usually of nothing. */
    int64_t ttl = sub->idempotency_ttl_ms ? sub->idempotency_ttl_ms : STORE_IDEMPOTENCY_TTL_MS;
    if (!rc && key && store_batch_idempotency_prune(b, sub->submit_ms - ttl))
        rc = GPO_ENOMEM;
    free(text);
    return rc;
}

/* A new job for task k of a committed submission. */
static int job_new(const struct job_submit *sub, int64_t id, int64_t array_id, size_t k,
                   struct job **ret)
{
    struct job *j = calloc(1, sizeof(*j));
    if (!j || jobspec_copy(&sub->spec, &j->spec)) {
        free(j);
        return GPO_ENOMEM;
    }
    j->id = id;
    j->user_id = sub->user_id;
    j->user = strdup(sub->user);
    j->unix_user = sub->unix_user[0] ? strdup(sub->unix_user) : NULL;
    j->team = strdup(sub->spec.team);
    j->state = JOB_PENDING;
    j->hold = sub->hold;
    j->submit_ms = j->updated_ms = sub->submit_ms;
    j->array_id = sub->ntasks > 1 || sub->spec.array.n ? array_id : STORE_NULL;
    j->array_index = sub->spec.array.n ? sub->spec.array.index[k] : STORE_NULL;
    j->est_start_ms = -1;
    j->queued_ms = sub->submit_ms;
    if (!j->user || !j->team || (sub->unix_user[0] && !j->unix_user)) {
        job_free(j);
        return GPO_ENOMEM;
    }
    int64_t begin_ms;
    job_held_back(j, sub->submit_ms, &begin_ms); /* its reason needs no pass */
    *ret = j;
    return 0;
}

int job_submit_apply(struct jobs *t, const struct job_submit *sub, const int64_t *ids, size_t n,
                     struct job **ret_first)
{
    int rc = 0;
    struct job *first = NULL;
    for (size_t k = 0; k < n && !rc; k++) {
        struct job *j;
        rc = job_new(sub, ids[k], ids[0], k, &j);
        if (!rc && (rc = jobs_add(t, j)))
            job_free(j);
        if (!rc && k == 0)
            first = j;
    }
    if (rc)
        return rc;
    *ret_first = first;
    return 0;
}

/* ---- resolving names and shape against the configuration ------------------ */

#define NAMES_MAX 200 /* bytes of a list of names in a message */

static int replace(char **field, const char *canonical)
{
    if (strcmp(*field, canonical) == 0)
        return 0;
    char *c = strdup(canonical);
    if (!c)
        return GPO_ENOMEM;
    free(*field);
    *field = c;
    return 0;
}

/* "no pool 'x' (pools: a, b)": the names of the first pools, for the message. */
static int no_pool(const struct cluster *m, const char *name, char *err, size_t errlen)
{
    char names[NAMES_MAX];
    const char *list[64];
    size_t n = 0;
    while (n < m->npools && n < 64) {
        list[n] = m->pools[n].name;
        n++;
    }
    return errbuf_set(err, errlen, GPO_EINVAL, "field 'pool': no pool '%s' (pools: %s)", name,
                      cluster_names_list(list, n, names, sizeof(names)));
}

static int resolve_pool(const struct cluster *m, struct jobspec *spec, char *err, size_t errlen)
{
    const struct cluster_pool *p = cluster_pool_resolve(m, spec->pool);
    return p ? replace(&spec->pool, p->name) : no_pool(m, spec->pool, err, errlen);
}

/* The GPU types the cluster knows: its type table (every type a node ever
 * had) and those its teams' quotas name. */
static size_t known_types(const struct cluster *m, const char **ret, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < m->ntype_ids && n < max; i++)
        ret[n++] = m->type_ids[i].name;
    for (size_t t = 0; t < m->nteams; t++) {
        for (size_t q = 0; q < m->teams[t].nquotas; q++) {
            const char *name = m->teams[t].quotas[q].gpu_type;
            bool seen = !name;
            for (size_t i = 0; i < n && !seen; i++)
                seen = strcmp(ret[i], name) == 0;
            if (!seen && n < max)
                ret[n++] = name;
        }
    }
    return n;
}

static int resolve_type(const struct cluster *m, struct jobspec *spec, char *err, size_t errlen)
{
    const char *types[SCHED_MAX_GPU_TYPES];
    size_t n = known_types(m, types, SCHED_MAX_GPU_TYPES), at;
    if (!n)
        return 0; /* nothing registered yet: the scheduler says so if it stays unknown */
    char why[300];
    if (cluster_gpu_type_match(types, n, spec->gpu_type, &at, why, sizeof(why)))
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'gpu_type': %s", why);
    return replace(&spec->gpu_type, types[at]);
}

/* What one node must have for the job (one member of an exact-N gang). */
struct need {
    int64_t gpus, cpus, mem_mib, gpu_mem_mib;
    uint32_t nterms;
    uint64_t masks[SCHED_CONSTRAINT_TERMS];
};

static bool node_features_ok(const struct need *nd, const char *const *features, size_t nf,
                             const struct cluster *m, const struct cluster_node *node)
{
    if (!nd->nterms)
        return true;
    const struct cluster_node_features *f =
        cluster_pool_node_features(cluster_pool_get(m, node->pool), node->name);
    uint64_t bits = 0;
    for (size_t k = 0; f && k < f->nfeatures; k++)
        for (size_t i = 0; i < nf; i++)
            bits |= strcmp(features[i], f->features[k]) == 0 ? UINT64_C(1) << i : 0;
    struct sched_job j = {.nconstraint = (uint8_t)nd->nterms};
    memcpy(j.constraint, nd->masks, sizeof(j.constraint));
    return sched_job_features_ok(&j, bits);
}

/* Does the node, empty, hold what nd asks (GPUs of the type and memory)? */
static bool node_holds(const struct need *nd, const struct jobspec *spec,
                       const struct cluster_node *node)
{
    if (node->cpus < nd->cpus || node->mem_mib < nd->mem_mib)
        return false;
    if (nd->gpus <= 0)
        return !(spec->gpu_milli || spec->gpu_mem_mib || spec->mig_profile) || node->ngpus > 0;
    int64_t fit = 0;
    for (size_t g = 0; g < node->ngpus; g++)
        fit += node->gpus[g].mem_mib >= nd->gpu_mem_mib;
    return fit >= nd->gpus;
}

/* Is the spec in Slurm's shape (nodes, per-node or per-task amounts,
 * exclusive, whole memory, constraint)? Only those are checked against the
 * nodes: a plain request keeps waiting for nodes that may still register. */
static bool shaped(const struct jobspec *s)
{
    return s->nodes > 0 || s->gpus_per_node || s->gpus_per_task || s->ntasks ||
           s->ntasks_per_node || s->cpus_per_task || s->mem_per_node_mib || s->mem_per_cpu_mib ||
           s->mem_per_gpu_mib || s->mem_whole_node || s->exclusive || s->constraint;
}

static int check_nodes(const struct cluster *m, const struct jobspec *spec, const struct need *nd,
                       const char *const *features, size_t nf, char *err, size_t errlen)
{
    int64_t N = spec->nodes > 1 ? spec->nodes : 1;
    size_t candidates = 0, holding = 0;
    for (size_t i = 0; i < m->nnodes; i++) {
        const struct cluster_node *node = &m->nodes[i];
        bool wants_gpu =
            spec->gpus > 0 || spec->gpu_milli > 0 || spec->gpu_mem_mib > 0 || spec->mig_profile;
        if ((spec->pool && strcmp(node->pool, spec->pool) != 0) ||
            (wants_gpu && spec->gpu_type &&
             (!node->ngpus || strcmp(node->gpus[0].gpu_type, spec->gpu_type) != 0)) ||
            !node_features_ok(nd, features, nf, m, node))
            continue;
        candidates++;
        holding += node_holds(nd, spec, node);
    }
    if (!m->nnodes || (!spec->multi_node || spec->nodes > 1 ? (int64_t)holding >= N : candidates))
        return 0;
    const char *where = spec->pool ? spec->pool : "any pool";
    if (!candidates)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "Requested node configuration is not available: no node in %s has %s%s%s",
                          where, spec->gpu_type ? "GPUs of type " : "the features asked for",
                          spec->gpu_type ? spec->gpu_type : "",
                          spec->gpu_type && nd->nterms ? " and the features asked for" : "");
    return errbuf_set(err, errlen, GPO_EINVAL,
                      "Requested node configuration is not available: %lld node(s) with %lld "
                      "GPUs, %lld CPUs and %lld MiB each asked for; %zu of the %zu node(s) in %s "
                      "that match have that much",
                      (long long)N, (long long)nd->gpus, (long long)nd->cpus,
                      (long long)nd->mem_mib, holding, candidates, where);
}

static int check_shape(const struct cluster *m, const struct jobspec *spec, char *err,
                       size_t errlen)
{
    if (spec->exclusive && (spec->gpu_milli > 0 || spec->gpu_mem_mib > 0))
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "fields 'exclusive' and 'gpus': an exclusive job holds whole nodes, "
                          "not a share of one GPU");
    const char *features[SCHED_MAX_FEATURES];
    size_t nf = cluster_feature_names(m, features);
    int64_t N = spec->nodes > 1 ? spec->nodes : 1;
    struct need nd = {.gpus = spec->multi_node && spec->nodes <= 1 ? 0 : spec->gpus / N,
                      .cpus = spec->multi_node && spec->nodes <= 1 ? 1 : spec->cpus / N,
                      .mem_mib = spec->mem_whole_node || (spec->multi_node && spec->nodes <= 1)
                                     ? 0
                                     : spec->mem_mib / N,
                      .gpu_mem_mib = spec->min_gpu_mem_mib};
    if (spec->constraint) {
        char why[300];
        if (cluster_constraint_masks(features, nf, spec->constraint, nd.masks, &nd.nterms, why,
                                     sizeof(why)))
            return errbuf_set(err, errlen, GPO_EINVAL, "%s", why);
    }
    return shaped(spec) ? check_nodes(m, spec, &nd, features, nf, err, errlen) : 0;
}

int job_submit_resolve(const struct cluster *m, struct jobspec *spec, char *err, size_t errlen)
{
    int rc = spec->pool ? resolve_pool(m, spec, err, errlen) : 0;
    rc = rc || !spec->gpu_type ? rc : resolve_type(m, spec, err, errlen);
    rc = rc ? rc : check_shape(m, spec, err, errlen);
    if (rc == GPO_ENOMEM)
        return errbuf_set(err, errlen, rc, "out of memory");
    return rc;
}

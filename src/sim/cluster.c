#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "sim/cluster.h"
#include "base/banned.h"

void sim_cluster_release(struct sim_cluster *cl)
{
    free(cl->nodes);
    free(cl->gpus);
    free(cl->pools);
    free(cl->types);
    free(cl->teams);
    free(cl->quotas);
    free(cl->classes);
    free(cl->node_names);
    free(cl->gpu_node);
    memset(cl, 0, sizeof(*cl));
}

static uint32_t type_index(const struct sim_spec *s, size_t upto, const char *name)
{
    /* The first pool (up to `upto`) whose type has this name: types are the
     * distinct names in pool order. */
    uint32_t t = 0;
    for (size_t k = 0; k < upto; k++) {
        bool seen = false;
        for (size_t m = 0; m < k && !seen; m++)
            seen = strcmp(s->pools[m].gpu_type, s->pools[k].gpu_type) == 0;
        if (seen)
            continue;
        if (strcmp(s->pools[k].gpu_type, name) == 0)
            return t;
        t++;
    }
    return t;
}

static int build_nodes(struct sim_cluster *cl, const struct sim_spec *s)
{
    size_t nnodes = 0, ngpus = 0, names = 0;
    for (size_t p = 0; p < s->npools; p++) {
        nnodes += s->pools[p].nodes;
        ngpus += (size_t)s->pools[p].nodes * s->pools[p].gpus_per_node;
        names += (size_t)s->pools[p].nodes * (strlen(s->pools[p].name) + 12);
    }
    cl->nodes = calloc(nnodes ? nnodes : 1, sizeof(*cl->nodes));
    cl->gpus = calloc(ngpus ? ngpus : 1, sizeof(*cl->gpus));
    cl->gpu_node = calloc(ngpus ? ngpus : 1, sizeof(*cl->gpu_node));
    cl->node_names = malloc(names ? names : 1);
    if (!cl->nodes || !cl->gpus || !cl->gpu_node || !cl->node_names)
        return GPO_ENOMEM;
    size_t n = 0, g = 0, at = 0;
    for (size_t p = 0; p < s->npools; p++) {
        const struct sim_spec_pool *sp = &s->pools[p];
        uint32_t type = type_index(s, s->npools, sp->gpu_type);
        if (sp->gpus_per_node > cl->max_gpus_per_node)
            cl->max_gpus_per_node = sp->gpus_per_node;
        for (uint32_t k = 0; k < sp->nodes; k++, n++) {
            int w = snprintf(cl->node_names + at, names - at, "%s-%u", sp->name, k);
            cl->nodes[n] = (struct sched_node){.name = cl->node_names + at,
                                               .pool = (uint32_t)p,
                                               .state = SCHED_NODE_UP,
                                               .cpus = sp->cpus,
                                               .mem_mib = sp->mem_mib,
                                               .gpu_first = (uint32_t)g,
                                               .ngpus = sp->gpus_per_node};
            at += (size_t)w + 1;
            for (uint32_t i = 0; i < sp->gpus_per_node; i++, g++) {
                cl->gpus[g] = (struct sched_gpu){.type = type,
                                                 .mem_mib = sp->gpu_mem_mib,
                                                 .nvlink_domain = sp->nvlink ? (int32_t)n : -1};
                cl->gpu_node[g] = (uint32_t)n;
            }
        }
    }
    cl->c.nodes = cl->nodes;
    cl->c.nnodes = (uint32_t)nnodes;
    cl->c.gpus = cl->gpus;
    cl->c.ngpus = (uint32_t)ngpus;
    return 0;
}

int sim_cluster_build(struct sim_cluster *cl, const struct sim_spec *s, uint32_t nclasses,
                      bool preemptive, char *err, size_t errlen)
{
    memset(cl, 0, sizeof(*cl));
    size_t nquotas = 0;
    for (size_t t = 0; t < s->nteams; t++)
        nquotas += s->teams[t].nquotas;
    cl->pools = calloc(s->npools ? s->npools : 1, sizeof(*cl->pools));
    cl->types = calloc(s->npools ? s->npools : 1, sizeof(*cl->types));
    cl->teams = calloc(s->nteams ? s->nteams : 1, sizeof(*cl->teams));
    cl->quotas = calloc(nquotas ? nquotas : 1, sizeof(*cl->quotas));
    cl->classes = calloc(nclasses ? nclasses : 1, sizeof(*cl->classes));
    if (!cl->pools || !cl->types || !cl->teams || !cl->quotas || !cl->classes)
        return GPO_ENOMEM;
    uint32_t ntypes = type_index(s, s->npools, "");
    for (size_t p = 0; p < s->npools; p++) {
        cl->pools[p].name = s->pools[p].name;
        cl->types[type_index(s, s->npools, s->pools[p].gpu_type)] = (struct sched_gpu_type){
            .id = type_index(s, s->npools, s->pools[p].gpu_type) + 1, .name = s->pools[p].gpu_type};
    }
    size_t q = 0;
    for (size_t t = 0; t < s->nteams; t++) {
        const struct sim_spec_team *st = &s->teams[t];
        cl->teams[t] = (struct sched_team){.id = (uint32_t)t + 1,
                                           .name = st->name,
                                           .weight = st->weight,
                                           .borrow_limit_milli = st->borrow_limit_milli,
                                           .quotas = cl->quotas + q,
                                           .nquotas = (uint32_t)st->nquotas};
        for (size_t k = 0; k < st->nquotas; k++, q++) {
            const struct sim_spec_quota *sq = &st->quotas[k];
            cl->quotas[q] = (struct sched_quota){
                .pool = sq->pool,
                .gpu_type = type_index(s, s->npools, s->pools[sq->pool].gpu_type),
                .guaranteed_milli = sq->guaranteed_milli,
                .borrow_limit_milli = sq->borrow_limit_milli};
        }
    }
    for (uint32_t k = 0; k < nclasses; k++) {
        cl->classes[k] = (struct sched_prio_class){
            .name = "normal", .order = (int32_t)k, .may_preempt = preemptive};
    }
    int e = build_nodes(cl, s);
    if (e)
        return e;
    cl->c.pools = cl->pools;
    cl->c.npools = (uint32_t)s->npools;
    cl->c.gpu_types = cl->types;
    cl->c.ngpu_types = ntypes;
    cl->c.teams = cl->teams;
    cl->c.nteams = (uint32_t)s->nteams;
    cl->c.classes = cl->classes;
    cl->c.nclasses = nclasses;
    const char *what = NULL;
    if (sched_cluster_check(&cl->c, &what)) {
        snprintf(err, errlen, "the cluster spec does not make a valid cluster: %s",
                 what ? what : "?");
        return GPO_EINVAL;
    }
    return 0;
}

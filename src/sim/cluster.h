/*
 * cluster.h - the scheduler core's cluster, built from a simulation spec.
 *
 * Each pool's nodes are named "<pool>-<k>"; GPU types are the pools' distinct
 * gpu_type names (in pool order); team i of the spec is core team i (id i + 1)
 * with its quotas; the priority classes are `nclasses` classes of increasing
 * order, all "normal" (the sim's trace jobs carry no priority; srtf uses the
 * classes for remaining-time buckets).
 */
#ifndef GPUORCH_SIM_CLUSTER_H
#define GPUORCH_SIM_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model.h"
#include "sim/spec.h"

struct sim_cluster {
    struct sched_cluster c; /* points into the arrays below */
    struct sched_node *nodes;
    struct sched_gpu *gpus;
    struct sched_pool *pools;
    struct sched_gpu_type *types;
    struct sched_team *teams;
    struct sched_quota *quotas;
    struct sched_prio_class *classes;
    char *node_names;   /* "pool-k", NUL-separated */
    uint32_t *gpu_node; /* per GPU: its node */
    uint32_t max_gpus_per_node;
};

/* Builds the core cluster for `spec` (borrowing its names: keep it alive).
 * 0; GPO_EINVAL with one line in err if the core rejects it; GPO_ENOMEM. */
int sim_cluster_build(struct sim_cluster *cl, const struct sim_spec *spec, uint32_t nclasses,
                      bool preemptive, char *err, size_t errlen);
/* Frees what sim_cluster_build made (also after a failed build). */
void sim_cluster_release(struct sim_cluster *cl);

#endif

/*
 * mig_int.h - the MIG subsystem's private parts, shared by its files.
 */
#ifndef GPUORCH_SERVER_MIG_MIG_INT_H
#define GPUORCH_SERVER_MIG_MIG_INT_H

#include "server/mig/mig.h"

/* What the planner keeps of one MIG GPU across passes. */
struct migctl_gpu {
    char node[CLUSTER_HOST_MAX + 1];
    char uuid[CLUSTER_UUID_MAX + 1];
    int64_t changed_ms; /* a plan last destroyed instances here; INT64_MIN: never */
    int64_t retry_ms;   /* a failed plan: no new one before this; 0: none */
    uint64_t logged;    /* bit id: an unknown NVML profile id already logged */
    bool layout_logged; /* a static layout that does not fit it, logged */
    /* A plan's result came: the next heartbeat's instances are not taken
     * (one heartbeat is in flight at a time, and that one may have been
     * sampled before the plan was applied). */
    bool skip_beat;
    uint8_t n; /* instances last seen, and since when each is idle */
    struct {
        uint8_t start, profile;
        int64_t idle_since_ms;
    } inst[MIG_MAX_INSTANCES];
};

/* A plan sent, until its node reports it; struct migctl's plans are sorted
 * by node, then GPU UUID (one per GPU). */
struct migctl_plan {
    uint64_t id;
    char node[CLUSTER_HOST_MAX + 1];
    char uuid[CLUSTER_UUID_MAX + 1];
    int64_t sent_ms;
    const struct mig_type *type;
    struct mig_gpu_plan core; /* by profile index */
    struct proto_mig_change destroy[MIG_MAX_INSTANCES], create[MIG_MAX_INSTANCES];
};

/* One planning group's carry-over: "pool NAME" or "node NAME". */
struct migctl_group {
    char key[CLUSTER_HOST_MAX + 8];
    struct mig_plan_state st;
};

struct migctl {
    struct migctl_gpu *gpus;
    size_t ngpus, gpus_cap;
    struct migctl_plan *plans;
    size_t nplans, plans_cap;
    struct migctl_group *groups;
    size_t ngroups, groups_cap;
    uint64_t last_id;                     /* the last plan id given */
    uint64_t sent, ok, failed, timed_out; /* plans, for GET /metrics */
};

/* The planner's state of GPU (node, uuid), or NULL. */
struct migctl_gpu *migctl_gpu_find(const struct migctl *m, const char *node, const char *uuid);
/* Found or added (NULL: out of memory); adding moves the others (a pointer
 * from an earlier call may not survive it). */
struct migctl_gpu *migctl_gpu_get(struct migctl *m, const char *node, const char *uuid);
struct migctl_plan *migctl_plan_find(const struct migctl *m, const char *node, const char *uuid);
void migctl_plan_drop(struct migctl *m, struct migctl_plan *p);

/* Node `name` of the cluster, to change in place (NULL: none). */
struct cluster_node *migctl_node_mut(struct server *s, const char *name);
struct cluster_gpu *migctl_node_gpu(struct cluster_node *n, const char *uuid);

/* Sends `plan` for GPU g of node `node` (why: "dynamic", "static ..."):
 * an id, a log line, the node's long-polls answered. 0, GPO_EEXIST (a plan
 * is in flight on the GPU already) or GPO_ENOMEM. */
int migctl_plan_add(struct server *s, const char *node, const struct cluster_gpu *g,
                    const struct mig_type *t, const struct mig_gpu_plan *plan, const char *why,
                    int64_t now_ms);

/* The plan from GPU mg's layout towards target[0 .. nt) (a static layout):
 * an idle instance the target lacks goes where a target instance that can
 * be made now needs its slots, or where the target leaves its slots empty;
 * a target instance is made where no busy instance and no instance the
 * target keeps is in its way. Busy instances are never named, so a GPU
 * whose layout differs only where busy instances are gets an empty plan. */
void migctl_static_plan(const struct mig_gpu *mg, const struct mig_instance *target, size_t nt,
                        struct mig_gpu_plan *ret);

#endif

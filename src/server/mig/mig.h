/*
 * mig.h - the controller's side of MIG (docs/mig.md): the instances nodes
 * report, kept in the cluster model; the repartition plans it sends them,
 * from the core's planner (dynamic pools) or towards a configured layout
 * (static ones); the agents' reports of how each plan went.
 *
 * Owns: struct migctl: per MIG GPU seen, when its layout last changed by a
 * plan and since when each of its instances is idle (the planner's damping
 * state, core/mig.h); per planning group (a pool, or a node with its own
 * "mig" setting) the core's struct mig_plan_state; the plans in flight, at
 * most one per GPU; counters for GET /metrics. The instances themselves
 * are the cluster's (struct cluster_gpu's mig[]): a registration stores
 * them with the node's record, a heartbeat or a plan's result replaces
 * them in memory (the agent reports them in every heartbeat, so a
 * restarted controller has them again within one).
 *
 * Plans are re-derived, not stored: a controller restart forgets the plans
 * in flight, and the planner, given the layout the agents report, plans
 * again what is still wanted. Plan ids come from the wall clock (ms * 1000
 * and a counter, never below the last one), so a restarted controller
 * never reuses an id an agent has seen.
 *
 * When it runs. migctl_view (the pass's input) and migctl_pass (after the
 * pass's decisions are applied) are the scheduling loop's pass hooks
 * (sched.h): one planning turn per pass, over the pass's own view and
 * queue. Everything here is called with the state lock held.
 */
#ifndef GPUORCH_SERVER_MIG_MIG_H
#define GPUORCH_SERVER_MIG_MIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "core/mig.h"
#include "core/sched.h"
#include "proto/proto.h"
#include "server/jobs/jobs.h"

struct server;
struct prom;
struct migctl;

#define MIGCTL_PLAN_TIMEOUT_MS (INT64_C(600) * 1000) /* a plan unreported this long is dropped */
#define MIGCTL_RETRY_MS        (INT64_C(60) * 1000)  /* a GPU whose plan failed waits this long */

struct migctl *migctl_new(void);
void migctl_free(struct migctl *m);

/*
 * The instances a node reports for GPU g (of its registration, a heartbeat
 * or a plan's result) into g->mig, replacing what it had: each profile
 * resolved from its NVML profile id for the GPU's type
 * (mig_profile_by_nvml_id); an id the catalogue does not know keeps the
 * instance with profile NULL (migctl_heartbeat logs it, once per GPU and
 * id). 0 or GPO_ENOMEM (g unchanged).
 */
int migctl_gpu_set(struct cluster_gpu *g, const struct proto_mig_instance *mig, size_t nmig);

/* A heartbeat's MIG state (the GPUs whose sample has mig_known) into node
 * `node`'s GPUs. Whether it changed what the cluster held (MIG mode or
 * instances): the caller wakes the loop then. */
bool migctl_heartbeat(struct server *s, const char *node, const struct proto_heartbeat *hb);

/* The pass's view, before it decides: the instances a plan in flight
 * destroys are taken out of their GPU (nothing new is placed on them). */
void migctl_view(struct server *s, struct cluster_view *view);

/*
 * After the pass applied its decisions: one planning turn. For each
 * planning group in dynamic mode, mig_plan over its MIG GPUs (busy: held
 * by an attempt; frozen: a plan in flight, a node not up or held, a dirty
 * GPU, an instance without compute instance or of an unknown profile, a
 * failed plan less than MIGCTL_RETRY_MS ago) and the pending demand of the
 * queue the pass left (queue[0 .. nqueue), in its order, less the jobs it
 * started); for each GPU in static mode, a plan towards the configured
 * layout that destroys only idle instances the layout lacks and creates
 * only what then fits. Each non-empty plan goes to its node's assignments
 * (its long-polls are answered). Also ends, NODE_FAIL, every attempt not
 * yet running whose MIG instance the node no longer reports.
 */
void migctl_pass(struct server *s, const struct cluster_view *view, const struct sched_job *queue,
                 size_t nqueue, const struct sched_result *res, int64_t now_ms);

/* The first MIG share of attempt a whose instance its node no longer
 * reports (with a UUID, of the same profile at the same slot; a node with
 * no heartbeat since this controller started is taken at its word), or
 * NULL: such an attempt is not sent to its agent (migctl_pass ends it). */
const struct attempt_share *migctl_share_gone(const struct server *s, const struct attempt *a);

/* The plans in flight on node `node`, for its assignments: *ret a new
 * array (free() it; NULL with 0) whose strings are borrowed from m. 0 or
 * GPO_ENOMEM. */
int migctl_node_plans(const struct migctl *m, const char *node, struct proto_mig_plan **ret,
                      size_t *ret_n);

/*
 * POST /v1/nodes/NODE/mig/ID: plan `id`'s outcome. GPO_ENOENT: no such plan
 * in flight for the node; GPO_EINVAL: the result does not fit (another GPU
 * than the plan's, instances that overlap or break the placement table),
 * with `err` naming the field; nothing changes then. Otherwise the plan is
 * done, the reported instances are the GPU's (also on failure: what the
 * GPU holds stays schedulable), the outcome is logged and the loop woken.
 */
int migctl_result(struct server *s, const char *node, uint64_t id, const struct proto_mig_result *r,
                  char *err, size_t errlen);

/* Whether a plan is in flight on GPU `uuid` of node `node` (for views). */
bool migctl_planning(const struct migctl *m, const char *node, const char *uuid);

/* The MIG instances attempts hold (assigned, running or being killed), by
 * instance: built once per use (a pass, a listing, a scrape), looked up by
 * binary search. */
struct migctl_held {
    const char *node, *uuid; /* borrowed from the jobs */
    uint32_t start;
    int64_t job;
};
struct migctl_holders {
    struct migctl_held *v;
    size_t n;
};
/* 0 or GPO_ENOMEM (*ret empty). Borrowed strings: valid while the lock is
 * held and the jobs' attempts do not change. */
int migctl_holders_build(const struct server *s, struct migctl_holders *ret);
/* The job that holds the instance at slot `start` of GPU `uuid` on node
 * `node`, or 0 for none. */
int64_t migctl_holders_find(const struct migctl_holders *h, const char *node, const char *uuid,
                            uint32_t start);
void migctl_holders_release(struct migctl_holders *h);

/* The MIG setting a node follows: its own, or its pool's (NULL: none, off). */
const struct cluster_mig *migctl_setting(const struct cluster *c, const struct cluster_node *node);
/* "off", "static", "dynamic". */
const char *migctl_mode_name(enum cluster_mig_mode mode);

/* GET /metrics: per instance gpuorch_mig_instance_info (1, the holder in
 * hpc_job) and gpuorch_mig_instance_memory_used_mib (its job's processes,
 * where the heartbeat lists them), with dcgm-exporter's GPU labels and its
 * GPU_I_PROFILE / GPU_I_ID; gpuorch_mig_plans_total by outcome. */
void migctl_metrics(const struct server *s, struct prom *p);

#endif

/*
 * config.h - the configuration as the controller keeps it: teams, pools,
 * priority classes, prices and services (the kinds an admin writes; a
 * member writes its own team's services), the nodes'
 * records (written by registration, drain and resume), the GPU type id
 * table, and the ids it hands out; loaded at start and written through to
 * the store.
 *
 * A write is planned under the lock (decoded, checked against the
 * configuration: references must resolve, a delete must leave nothing
 * dangling; given its id; built as a store batch), committed by the caller,
 * and applied to memory when the commit completes, so that memory never
 * holds what the disk does not. One write is in flight at a time (a second
 * gets GPO_EBUSY: the API answers 409 with Retry-After), so ids and
 * references are decided on the state that will be on disk.
 *
 * Owns: the id counter and the write in flight. The configuration itself
 * (struct cluster) is the server's, borrowed here with the jobs (for
 * references), the cost ledger (a price change closes segments), the nodes'
 * runtimes (a registered node gets one) and the store.
 *
 * Lock: the controller's state lock, held by every caller.
 *
 * Errors name the field or object in `err`: GPO_EINVAL (a bad body, a
 * reference to nothing), GPO_ENOENT (no such object), GPO_ESTATE (still
 * referred to: a team with jobs, a pool with nodes), GPO_EBUSY (another
 * write is in flight), GPO_ENOMEM.
 */
#ifndef GPUORCH_SERVER_CONFIG_CONFIG_H
#define GPUORCH_SERVER_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cluster/cluster.h"
#include "server/cost/cost.h"
#include "server/jobs/jobs.h"
#include "server/nodes/nodes.h"
#include "store/store.h"

/* The kinds an admin writes through /v1/KIND/NAME. */
enum config_kind {
    CONFIG_TEAMS,
    CONFIG_POOLS,
    CONFIG_CLASSES,
    CONFIG_PRICES,
    CONFIG_SERVICES, /* written by an admin or a member of the service's team */
    CONFIG_NKINDS,
};
/* "team", ...: for messages. */
const char *config_kind_label(enum config_kind k);

struct config {
    struct cluster *cluster; /* borrowed: the server's configuration */
    struct jobs *jobs;       /* borrowed */
    struct cost *cost;       /* borrowed */
    struct nodes *nodes;     /* borrowed */
    struct store *store;     /* borrowed */
    uint32_t next_id;        /* the next id of a team, pool, class, price or node */
    bool busy;               /* a write is being committed */
};

void config_init(struct config *c, struct cluster *cluster, struct jobs *jobs, struct cost *cost,
                 struct nodes *nodes, struct store *store);

/*
 * At start (before the jobs are loaded): the id counter, every kind, the GPU
 * type ids and the nodes (each node's runtime gets one node timeout from
 * now_ms to check in again), and at first start the priority class
 * "normal"; "serving" at first start and on a store that never had it. 0, or an error with a
 * message naming the stored object.
 */
int config_load(struct config *c, int64_t now_ms, char *err, size_t errlen);

/* ---- reads -------------------------------------------------------------- */

/* {"KIND": [every object]}: a new object, or NULL when out of memory. */
json_t *config_list_json(const struct config *c, enum config_kind k);
/* The object `name` of kind k as the API shows it: 0 and *ret (a new
 * object), GPO_ENOENT, GPO_ENOMEM. */
int config_get_json(const struct config *c, enum config_kind k, const char *name, json_t **ret);

/* ---- writes ------------------------------------------------------------- */

struct config_write;

/*
 * A create-or-replace of object `name` of kind k from `body` (borrowed; its
 * "name" agrees with `name`), or a delete: into *ret_w and *ret_batch (a new
 * batch to commit; on success the caller must end the write with
 * config_write_done, whatever the commit does). Marks the configuration
 * busy. Codes as the header says.
 */
int config_put_plan(struct config *c, enum config_kind k, const char *name, const json_t *body,
                    int64_t now_ms, struct config_write **ret_w, struct store_batch **ret_batch,
                    char *err, size_t errlen);
int config_delete_plan(struct config *c, enum config_kind k, const char *name, int64_t now_ms,
                       struct config_write **ret_w, struct store_batch **ret_batch, char *err,
                       size_t errlen);

/*
 * A node's record from its agent's registration (`item` taken, and zeroed,
 * once it passes cluster_node_check, so the caller releases it either way;
 * its state and id are decided here; `client_addr` is where the agent
 * connected from, used when the node names no addr). A drained node stays
 * drained, a node marked down comes back up (its GPUs held, nodes.h). A GPU
 * UUID another node record has is refused (GPO_ESTATE, naming that node):
 * one GPU is one node's. Like config_put_plan.
 */
int config_node_put_plan(struct config *c, struct cluster_node *item, const char *client_addr,
                         int64_t now_ms, struct config_write **ret_w,
                         struct store_batch **ret_batch, char *err, size_t errlen);
/* Drain (CLUSTER_NODE_DRAINING) or resume (CLUSTER_NODE_UP) node `name`. */
int config_node_state_plan(struct config *c, const char *name, enum cluster_node_state state,
                           int64_t now_ms, struct config_write **ret_w,
                           struct store_batch **ret_batch, char *err, size_t errlen);

/*
 * Node `name`'s own MIG setting (cluster.h: cluster_node_mig_decode; `mig`
 * borrowed, NULL or null: back to its pool's), checked against the node's
 * GPU type (cluster_node_mig_check) before anything is stored; it stays
 * across the agent's registrations. Like config_node_state_plan.
 */
int config_node_mig_plan(struct config *c, const char *name, const json_t *mig, int64_t now_ms,
                         struct config_write **ret_w, struct store_batch **ret_batch, char *err,
                         size_t errlen);

/*
 * The cluster-wide settings (cluster.h: struct cluster_settings) from
 * `body` (borrowed; every setting it leaves out takes its default), kept in
 * the store's meta row "settings". Like config_put_plan; it ends with
 * CONFIG_REPLACED and the settings as the API shows them.
 */
int config_settings_plan(struct config *c, const json_t *body, struct config_write **ret_w,
                         struct store_batch **ret_batch, char *err, size_t errlen);
/* The settings as the API shows them: a new object, or NULL when out of memory. */
json_t *config_settings_json(const struct config *c);

/* What a completed write did. */
enum config_outcome {
    CONFIG_CREATED,
    CONFIG_REPLACED,
    CONFIG_REMOVED,
};

/*
 * Ends write w (freed here) once its commit completed with store_err (0:
 * committed): on success the change is applied to memory, and *ret_outcome
 * and *ret_body (the object as the API shows it; NULL for a removal) are
 * set. Returns 0; store_err when the commit failed (nothing changed); or
 * GPO_ENOMEM / GPO_EINVAL with a message when the change is on disk but
 * could not be applied (a restart loads it).
 */
int config_write_done(struct config *c, struct config_write *w, int store_err, int64_t now_ms,
                      enum config_outcome *ret_outcome, json_t **ret_body, char *err,
                      size_t errlen);

/* Ends write w (freed here) that will not be committed (the request could
 * not be suspended, or out of memory): nothing changes, and the next write
 * may start. */
void config_write_drop(struct config *c, struct config_write *w);

/* The name of the object write w changes (borrowed from w). */
const char *config_write_name(const struct config_write *w);
/* Whether write w changes a service (CONFIG_SERVICES). */
bool config_write_is_service(const struct config_write *w);

/* Delete node `name`'s record (admin): refused with GPO_ESTATE while an
 * attempt runs on it or holds its GPUs (whatever its state). Like
 * config_delete_plan; its runtime goes when the write is done. */
int config_node_delete_plan(struct config *c, const char *name, int64_t now_ms,
                            struct config_write **ret_w, struct store_batch **ret_batch, char *err,
                            size_t errlen);

/*
 * The loop's marks of a node (the node timeout: down; a heartbeat again: up):
 * adds to b the record of node `name` in `state` (0 or GPO_ENOMEM), and once
 * committed applies it. Not a configuration write (no busy, no id).
 */
int config_node_mark_row(const struct config *c, const char *name, enum cluster_node_state state,
                         int64_t now_ms, struct store_batch *b);
void config_node_mark_apply(struct config *c, const char *name, enum cluster_node_state state);

#endif

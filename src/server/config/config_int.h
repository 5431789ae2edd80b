/*
 * config_int.h - what config.c and config_nodes.c share: the write in
 * flight and the store keys of the configuration's own state.
 */
#ifndef GPUORCH_SERVER_CONFIG_CONFIG_INT_H
#define GPUORCH_SERVER_CONFIG_CONFIG_INT_H

#include "server/config/config.h"

/* The meta keys of the next configuration id, of the first start's seed, and
 * of the GPU type id table. */
#define CONFIG_META_NEXT_ID        "config_next_id"
#define CONFIG_META_SEEDED         "classes_seeded"
#define CONFIG_META_SEEDED_SERVING "serving_seeded"
#define CONFIG_META_TYPE_IDS       "gpu_type_ids"
#define CONFIG_META_SETTINGS       "settings"

/* struct config_write.kind of a node's record. */
#define CONFIG_WRITE_NODE     (-1)
#define CONFIG_WRITE_SETTINGS (-2)

union config_item {
    struct cluster_team team;
    struct cluster_pool pool;
    struct cluster_class cls;
    struct cluster_price price;
    struct cluster_node node;
    struct cluster_service service;
    struct cluster_settings settings;
};

struct config_write {
    int kind; /* enum config_kind, or CONFIG_WRITE_NODE */
    char name[CLUSTER_HOST_MAX + 1];
    bool remove, replace;
    bool registration;            /* a node's record from its agent (not drain or resume) */
    uint32_t next_id;             /* struct config.next_id after this write */
    struct cost_pending *closing; /* a price change: the segments it closes */
    union config_item item;
    struct cluster_type_id *new_types; /* a node's GPU types never seen (names owned) */
    size_t nnew_types;
};

/* Frees w and what it holds; NULL is fine. */
void config_write_free(struct config_write *w);

/* Adds the next id's meta row to b: 0 or GPO_ENOMEM. */
int config_next_id_row(struct store_batch *b, uint32_t next_id);

/* config_nodes.c: the nodes' records and the GPU type id table at start,
 * and the end of a node write. */
int config_nodes_load(struct config *c, int64_t now_ms, char *err, size_t errlen);
int config_node_done(struct config *c, struct config_write *w, int64_t now_ms,
                     enum config_outcome *ret_outcome, json_t **ret_body, char *err, size_t errlen);

/* config_services.c: a service's references (item NULL: whether `name`
 * may go: nothing refers to a service) and, before it goes in, its canonical
 * names and its generation (1 when new, one more than old's when the
 * replicas' shape changed). config_service_naming: GPO_ESTATE when a
 * service names `name` of kind k (team, pool or class), else 0. */
int config_service_refs(const struct config *c, const void *item, const char *name, char *err,
                        size_t errlen);
int config_service_settle(const struct config *c, void *item, const void *old, char *err,
                          size_t errlen);
int config_service_naming(const struct config *c, enum config_kind k, const char *name, char *err,
                          size_t errlen);

/* config_settings.c: the settings at start, and the end of their write. */
int config_settings_load(struct config *c, char *err, size_t errlen);
int config_settings_done(struct config *c, struct config_write *w, enum config_outcome *ret_outcome,
                         json_t **ret_body, char *err, size_t errlen);

#endif

/*
 * cluster.h - the cluster as configured (pools, priority classes, teams, users,
 * nodes, prices, budgets, idle policies), its JSON form, and its translation
 * into the scheduler core's types (the view).
 *
 * Pure: no I/O, no clock, no threads. The controller keeps one struct cluster
 * in memory and in the store (as each object's JSON), changes it through the
 * REST API and node registration, and before each pass builds the core's
 * view with cluster_view_build.
 *
 * Names: pools, classes, teams and users have a name of 1 to 63 bytes of
 * a-z, 0-9, '-', '_' and '.', starting with a letter or digit (they appear in
 * URLs and metric labels as they are). Nodes have a host name (labels of
 * letters, digits and '-' joined by '.', at most 253 bytes). GPU types
 * ("H100-80GB") are 1 to 63 bytes of letters, digits, '-', '_' and '.',
 * starting with a letter or digit. Names are unique per kind.
 *
 * Ids: every object carries an `id` the server assigns (uint32, >= 1, stable
 * forever, never reused): it keys the scheduler's fair-share state, so a
 * renamed-and-recreated team does not inherit an old team's usage. Users never
 * send it: in the API form (flags 0) "id" is refused as an unknown field and
 * a decoded object has id 0; in the stored form (CLUSTER_STORED) it is required.
 * GPU types have no object: their ids come from a name -> id table the cluster
 * keeps (see cluster_type_id_get).
 *
 * GPU amounts: JSON numbers of GPUs with at most three decimals (0.25), held
 * as milli-GPU (250); -1 where the field says so means "no limit".
 *
 * Errors: functions return 0 or a negative GPO_* code (base/err.h):
 * GPO_EINVAL for input that breaks a rule, GPO_EEXIST / GPO_ENOENT for a
 * name that is / is not there, GPO_E2BIG over a size cap, GPO_ENOMEM. Where a
 * function takes `err` (errlen bytes, may be NULL) it receives one line fit
 * for a 400 response, naming the field:
 *     field 'quotas[1].pool': 'GPU A' is not a valid name (...)
 *     missing required field 'team' (role 'member' needs a team)
 * Out-parameters are set only on success; on failure the inputs (the cluster
 * included) are unchanged.
 *
 * Ownership: every pointer inside a cluster_* object is malloc'd and owned by
 * it; cluster_*_release frees them. Objects added to a struct cluster are taken
 * by it.
 */
#ifndef GPUORCH_CLUSTER_CLUSTER_H
#define GPUORCH_CLUSTER_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/autoscale.h"
#include "core/model.h"
#include "cluster/jobspec.h"
#include "util/jsonv.h"

#define CLUSTER_NAME_MAX       63   /* bytes of a pool, class, team, user or GPU type name */
#define CLUSTER_HOST_MAX       253  /* bytes of a node name */
#define CLUSTER_DESC_MAX       1024 /* bytes of a description */
#define CLUSTER_UNIX_USER_MAX  32
#define CLUSTER_UUID_MAX       96 /* NVML's UUID buffer */
#define CLUSTER_QUOTAS_MAX     256
#define CLUSTER_USERS_MAX      (1u << 20)
#define CLUSTER_TYPE_IDS_MAX   4096    /* GPU types ever seen; the core takes 256 at a time */
#define CLUSTER_GPUS_MAX       1000000 /* GPUs in one quota or limit */
#define CLUSTER_WEIGHT_MAX     1000
#define CLUSTER_ORDER_MAX      10000 /* a class's order is within -MAX..MAX */
#define CLUSTER_MIG_SLICES_MAX 7
#define CLUSTER_NODE_CPUS_MAX  (1u << 20)
#define CLUSTER_NODE_MEM_MAX   (INT64_C(1) << 40) /* MiB */
#define CLUSTER_GPU_MEM_MAX    (1u << 22)         /* MiB */

enum cluster_flag {
    CLUSTER_STORED = 1 << 0, /* the store's form: "id" required on decode, written by to_json */
};

#define CLUSTER_ALIASES_MAX       16   /* names one pool also answers to */
#define CLUSTER_FEATURE_MAX       63   /* bytes of a node feature's name */
#define CLUSTER_NODE_FEATURES_MAX 4096 /* nodes one pool lists features for */

/* A node's features as the admin defines them (slurm.conf's Features=). */
struct cluster_node_features {
    char *node;      /* the node's host name */
    char **features; /* NULL-terminated names: 1 to 63 bytes of letters, digits,
                        '.', '_', '-', ':' and '=', starting with a letter or digit */
    size_t nfeatures;
};

/*
 * MIG layouts of a pool's (or one node's) MIG-capable GPUs ("mig" of a pool
 * or node; docs/mig.md). Off (absent): gpuorch schedules onto whatever
 * instances the nodes report and never changes them. Static: every MIG GPU
 * should hold `layout` (a named layout, core/mig.h's mig_layout_named:
 * "all-1g.10gb", "all-balanced", ...) or the counts per profile (as
 * mig-parted's mig-devices: {"1g.10gb": 2, "3g.40gb": 1}); the controller
 * plans towards it on idle parts only. Dynamic: the core's planner
 * (mig_plan) reshapes idle parts by pending demand, with `plan`'s damping.
 * A node's own "mig" overrides its pool's.
 */
enum cluster_mig_mode {
    CLUSTER_MIG_OFF = 0,
    CLUSTER_MIG_STATIC,
    CLUSTER_MIG_DYNAMIC,
};
struct cluster_mig_count {
    char *profile; /* "1g.10gb": valid for the GPU type the layout lands on */
    uint32_t count;
};
struct cluster_mig {
    enum cluster_mig_mode mode;
    char *layout; /* static: a named layout, or NULL with counts */
    struct cluster_mig_count *counts;
    size_t ncounts;
    /* dynamic: core/mig.h's struct mig_plan_spec (defaults mig_plan_spec_default) */
    int64_t settle_ms, hold_ms, min_interval_ms;
    uint32_t keep_free, max_repartitions;
};

/* How a pool's nodes share a GPU among fractional jobs ("sharing"):
 * time-slicing, as the GPU does by itself (the default), or CUDA MPS, each
 * fractional job a client held to its share (docs/mps.md). */
enum cluster_sharing {
    CLUSTER_SHARING_NONE, /* "none" */
    CLUSTER_SHARING_MPS,  /* "mps" */
};

#define CLUSTER_MIG_DURATION_MAX_S   (INT64_C(30) * 86400) /* settle, hold, min_interval */
#define CLUSTER_MIG_COUNTS_MAX       16                    /* profiles of a count layout */
#define CLUSTER_MIG_KEEP_FREE_MAX    1000
#define CLUSTER_MIG_REPARTITIONS_MAX 100000

/*
 * "mig" as JSON (docs/mig.md), `field` its path in messages ("mig"):
 *   absent, null, false or "off": CLUSTER_MIG_OFF;
 *   {"layout": "all-1g.10gb"} (core/mig.h's mig_layout_named) or
 *   {"layout": {"1g.10gb": 2, "3g.40gb": 1}} (counts 0..7 per profile, the
 *   profiles in the catalogue's spelling): CLUSTER_MIG_STATIC;
 *   {"dynamic": true, "settle": D, "hold": D, "min_interval": D,
 *   "keep_free": N, "max_repartitions": N} (each optional but "dynamic";
 *   the defaults mig_plan_spec_default's; D whole seconds or a duration
 *   string, "30s", "5m", at most 30 days): CLUSTER_MIG_DYNAMIC.
 * Unknown keys, static and dynamic keys together, unknown profiles, and a
 * layout valid on no GPU type of the catalogue are refused. A layout is
 * valid on a type when mig_layout_named or mig_layout_from_counts accepts
 * it there; it must be valid on at least one type (a pool's known types,
 * cluster_pool_mig_check; else the catalogue's), and a GPU of a type where
 * it is not keeps its instances. 0 and *ret (cluster_mig_release); on
 * failure *ret is untouched.
 */
int cluster_mig_decode(const json_t *v, const char *field, struct cluster_mig *ret, char *err,
                       size_t errlen);
/* The JSON form: "off", or an object as decoded (durations as "5m"); a new
 * value, or NULL when out of memory. */
json_t *cluster_mig_to_json(const struct cluster_mig *m);
int cluster_mig_copy(const struct cluster_mig *m, struct cluster_mig *ret); /* 0 or GPO_ENOMEM */
void cluster_mig_release(struct cluster_mig *m);
/* The instances static setting m means on a GPU of type t (ret: room for
 * MIG_MAX_INSTANCES; *ret_enabled false for "all-disabled"): 0, or the
 * core's error (GPO_ENOENT, GPO_EINVAL) where it is not valid on t. */
int cluster_mig_layout(const struct cluster_mig *m, const struct mig_type *t,
                       struct mig_instance *ret, size_t *ret_n, bool *ret_enabled, char *err,
                       size_t errlen);
/* m valid on at least one of types[0..n) (NULL or 0: the catalogue's), as
 * "field 'FIELD.layout': ..." naming `whose` types; 0 unless static. */
int cluster_mig_check_types(const struct cluster_mig *m, const char *field,
                            const struct mig_type *const *types, size_t ntypes, const char *whose,
                            char *err, size_t errlen);

/* A node's own "mig" (cluster_node.mig): absent or null, NULL (its pool's);
 * else a new setting as cluster_mig_decode reads it ("off" included: the
 * node keeps its instances whatever its pool says). Syntax and the
 * catalogue only, so a stored record always loads; cluster_node_mig_check
 * holds it to the node's GPU type where an admin sets it. 0 and *ret;
 * *ret untouched on failure. */
int cluster_node_mig_decode(const json_t *v, struct cluster_mig **ret, char *err, size_t errlen);

/*
 * A pool (a Slurm partition). "aliases": other names a job's "pool" may use
 * (--partition=gpu for a pool named h100-main); an alias is no other pool's
 * name or alias. "node_features": [{"node": NAME, "features": [...]}], the
 * features of nodes of this pool, as slurm.conf's NodeName=... Features=;
 * a node listed here that registers in another pool has none of them. The
 * cluster holds at most SCHED_MAX_FEATURES distinct feature names.
 */
struct cluster_pool {
    uint32_t id;
    char *name;
    char *description;            /* or NULL */
    enum cluster_sharing sharing; /* "sharing": "none" (default) or "mps" */
    char **aliases;               /* NULL-terminated; NULL when none */
    size_t naliases;
    struct cluster_node_features *node_features;
    size_t nnode_features;
    struct cluster_mig mig; /* mode CLUSTER_MIG_OFF when absent */
};

/*
 * A service (config kind "services"): a model served by replicas that scale
 * with traffic (docs/serving.md). The replica template
 * is a job spec (name = the service's, team, project, model, priority,
 * resources, command or script, env, workdir) that every replica copies.
 */
#define CLUSTER_SERVICE_HOSTS_MAX  16
#define CLUSTER_SERVICE_KEYS_MAX   64
#define CLUSTER_SERVICES_MAX       1000 /* services one cluster holds */
#define CLUSTER_SERVICE_PATH_MAX   1024 /* bytes of the readiness path */
#define CLUSTER_SERVICE_METRIC_MAX 200  /* bytes of a replica metric's name */
#define CLUSTER_SERVICE_KEY_HEX    64   /* hex digits of an API key's SHA-256 */
struct cluster_service {
    uint32_t id;
    char *name;
    char *user;                 /* who applied it: replicas run as this user */
    struct jobspec replica;     /* the template (its serve part unset) */
    char *probe_path;           /* default "/health" */
    int64_t probe_period_ms;    /* default 1000 */
    int64_t probe_timeout_ms;   /* default 1000 */
    uint32_t probe_failures;    /* default 3 */
    int64_t startup_timeout_s;  /* default 900 */
    int64_t drain_timeout_s;    /* default 30 */
    uint32_t concurrency_limit; /* per replica; 0: none */
    uint32_t queue_limit;       /* default 1000 */
    int64_t queue_timeout_ms;   /* default 60000 */
    char **hosts;               /* NULL-terminated, or NULL */
    size_t nhosts;
    char **key_hashes; /* "api_key_sha256": lowercase hex, NULL-terminated, or NULL */
    size_t nkeys;
    struct autoscale_spec autoscale; /* min, max, metric, target, windows, rates */
    char *replica_metric;            /* with AUTOSCALE_METRIC_REPLICA, else NULL */
    uint64_t generation;             /* grows when the replica's shape changes */
};

struct cluster_class {
    uint32_t id;
    char *name;
    int64_t order;     /* -CLUSTER_ORDER_MAX..CLUSTER_ORDER_MAX; higher runs first */
    bool may_preempt;  /* default false */
    char *description; /* or NULL */
};

/* A team's share of one pool: of one GPU type, or (gpu_type NULL) of each
 * type present in the pool, every type getting these same numbers; an entry
 * naming the type wins over the pool-wide one for that type. */
struct cluster_quota {
    char *pool;
    char *gpu_type; /* or NULL: each type in the pool */
    int64_t guaranteed_milli;
    int64_t borrow_limit_milli; /* -1: no limit (the default) */
};

/* What a team does with GPUs its jobs leave idle (JSON "idle"): a running
 * job whose GPUs all stay under threshold_pct for window_s is flagged idle;
 * with action requeue or cancel it is warned, and acted on warning_s later
 * unless it got busy again. The same threshold splits "waste" off the
 * team's cost. */
enum cluster_idle_action {
    CLUSTER_IDLE_REPORT = 0, /* the default: flag it, nothing more */
    CLUSTER_IDLE_REQUEUE,
    CLUSTER_IDLE_CANCEL,
};
#define CLUSTER_IDLE_THRESHOLD_DEFAULT 5
#define CLUSTER_IDLE_WINDOW_DEFAULT_S  1800
#define CLUSTER_IDLE_WARNING_DEFAULT_S 600
#define CLUSTER_IDLE_WINDOW_MAX_S      ((int64_t)30 * 86400)
#define CLUSTER_IDLE_WARNING_MAX_S     86400
struct cluster_idle {
    uint32_t threshold_pct; /* 0..100, default 5 */
    int64_t window_s;       /* 1..30 days, default 1800 */
    enum cluster_idle_action action;
    int64_t warning_s; /* 0..1 day, default 600 */
};

/* A team's monthly budget (JSON "budget", absent: none). Months are calendar
 * months in the controller's cost time zone. */
struct cluster_budget {
    bool set;                /* false: no budget */
    int64_t monthly_micro;   /* > 0: millionths of the price unit */
    uint32_t alert_permille; /* 1..1000: logged and in metrics from there; default 800 */
    char *block_below;       /* or NULL: a class; over budget, submissions of classes
                                ordered below it get 403 */
};

/* The price of an hour of one GPU of a type (config kind "prices", named by
 * the GPU type; JSON {"per_gpu_hour": 2.5, "description": "..."}). A MIG
 * slice's price will be derived from it (slices / the GPU's slices). */
#define CLUSTER_PRICE_MAX_MICRO (INT64_C(1000000) * 1000000) /* 1e6 per GPU-hour */
struct cluster_price {
    uint32_t id;
    char *name;                 /* the GPU type */
    int64_t per_gpu_hour_micro; /* 0..CLUSTER_PRICE_MAX_MICRO, millionths */
    char *description;          /* or NULL */
};

struct cluster_team {
    uint32_t id;
    char *name;
    uint32_t weight;              /* 1..CLUSTER_WEIGHT_MAX, default 1 */
    int64_t borrow_limit_milli;   /* where the team has no quota; -1: no limit (default) */
    struct cluster_quota *quotas; /* at most CLUSTER_QUOTAS_MAX, (pool, gpu_type) unique */
    size_t nquotas;
    struct cluster_idle idle;
    struct cluster_budget budget;
};

/*
 * What members may not see of other teams (the cluster's "private_data",
 * after Slurm's PrivateData). Admins see everything; a member always sees
 * its own team's. Each bit names one kind of other teams' data:
 *   jobs   their jobs (list, detail, attempts), and their job ids in wait
 *          reasons;
 *   usage  their utilization, costs, budgets and idle flags: series by team
 *          or job, the queue by team, cost reports, budgets;
 *   nodes  which of a node's GPUs their jobs hold, and those GPUs' samples
 *          and processes (a node still shows how many GPUs are in use);
 *   teams  their definitions (quotas, weights, budgets, idle policies).
 */
enum cluster_private {
    CLUSTER_PRIVATE_JOBS = 1 << 0,
    CLUSTER_PRIVATE_USAGE = 1 << 1,
    CLUSTER_PRIVATE_NODES = 1 << 2,
    CLUSTER_PRIVATE_TEAMS = 1 << 3,
};
#define CLUSTER_PRIVATE_ALL                                                                        \
    (CLUSTER_PRIVATE_JOBS | CLUSTER_PRIVATE_USAGE | CLUSTER_PRIVATE_NODES | CLUSTER_PRIVATE_TEAMS)

/* Cluster-wide settings (GET/PUT /v1/settings, `apply -f`'s "settings").
 * Zeroed is the default: everything private. */
struct cluster_settings {
    unsigned open; /* enum cluster_private bits members DO see of other teams */
};

/* "jobs", ... for one bit (static), or NULL for anything else. */
const char *cluster_private_name(enum cluster_private bit);
/* Whether members are kept from data `what` (one bit) of other teams. */
bool cluster_settings_private(const struct cluster_settings *s, enum cluster_private what);
/*
 * {"private_data": true | false | ["jobs", "usage", "nodes", "teams"]}
 * (borrowed): true keeps everything private, false opens everything, a list
 * keeps those kinds private and opens the rest; an absent member keeps its
 * default (everything private). Unknown fields, unknown or repeated names
 * are refused with the field ("field 'private_data[1]': ..."). 0 and *ret,
 * or GPO_EINVAL.
 */
int cluster_settings_decode(const json_t *obj, struct cluster_settings *ret, char *err,
                            size_t errlen);
/* The settings as decode reads them: "private_data" true when all is
 * private, false when nothing is, else the list in the order above. A new
 * object, or NULL when out of memory. */
json_t *cluster_settings_to_json(const struct cluster_settings *s);

enum cluster_role {
    CLUSTER_ROLE_ADMIN = 0,
    CLUSTER_ROLE_MEMBER,  /* the default */
    CLUSTER_ROLE_METRICS, /* a scraper's account: GET /metrics only, every team's figures */
};

struct cluster_user {
    uint32_t id;
    char *name;
    char *unix_user; /* [a-z_][a-z0-9_-]*, at most 32 bytes: jobs run as this login */
    char *team;      /* required for a member; optional for an admin (NULL) */
    enum cluster_role role;
};

enum cluster_node_state {
    CLUSTER_NODE_UP = 0, /* the default */
    CLUSTER_NODE_DRAINING,
    CLUSTER_NODE_DOWN,
};

/* A MIG GPU instance a node reports (proto's struct proto_mig_instance,
 * its profile resolved into a name of the GPU type's catalogue entry).
 * An NVML profile id the catalogue does not know leaves profile NULL: the
 * instance is shown and its slots are taken, but it takes no job and the
 * planner leaves its GPU alone. Stored with the node's record ("mig" of a
 * GPU: profile_id, profile, start, gi_id, ci_id, uuid). */
struct cluster_mig_instance {
    char *profile;       /* "1g.10gb"; NULL: profile_id unknown to the catalogue */
    uint32_t profile_id; /* NVML's profile id, as reported (0..63) */
    uint32_t start;      /* first memory slot, 0..7 */
    uint32_t gi_id;
    int64_t ci_id; /* -1: no compute instance yet (takes no job) */
    char *uuid;    /* "MIG-..."; NULL without a compute instance */
};

struct cluster_gpu {
    uint32_t index;                   /* NVML's index on the node, 0..63, unique on the node */
    char *uuid;                       /* "GPU-" + 8-4-4-4-12 hex digits, or "MIG-..." */
    char *gpu_type;                   /* the same for every GPU of a node (the core's rule) */
    uint32_t mem_mib;                 /* 1..CLUSTER_GPU_MEM_MAX */
    int64_t nvlink_domain;            /* -1 (none, the default)..INT32_MAX */
    uint32_t mig_slices;              /* 0..7; 0: no MIG */
    bool mig_enabled;                 /* needs mig_slices > 0 */
    bool mig_pending;                 /* MIG mode after the next reset */
    struct cluster_mig_instance *mig; /* with mig_enabled: the reported instances */
    size_t nmig;                      /* 0..7 */
};

struct cluster_node {
    uint32_t id;
    char *name;
    char *pool;
    uint32_t cpus;   /* 1..CLUSTER_NODE_CPUS_MAX */
    int64_t mem_mib; /* 1..CLUSTER_NODE_MEM_MAX */
    enum cluster_node_state state;
    char *addr;               /* where the controller reaches its agent: host name or IP literal;
                                 NULL: not given (the API fills in the registering client's address) */
    uint32_t log_port;        /* the agent's log server; 0: none */
    struct cluster_gpu *gpus; /* at most SCHED_MAX_GPUS_PER_NODE */
    size_t ngpus;
    struct cluster_mig *mig; /* the node's own MIG layout setting; NULL: its pool's */
};

/* A node's own setting `mig` (NULL: none) against node n's GPU type: a
 * static layout needs a MIG type and must be valid on it. 0 or GPO_EINVAL
 * ("field 'mig': node 'a' has no MIG GPU ..."). */
int cluster_node_mig_check(const struct cluster_node *n, const struct cluster_mig *mig, char *err,
                           size_t errlen);

/* Whether s is a valid name of its kind, as described at the top. NULL: false. */
bool cluster_name_valid(const char *s);
bool cluster_gpu_type_valid(const char *s);
bool cluster_host_valid(const char *s);
bool cluster_unix_user_valid(const char *s);

/*
 * Per kind (pool, class, team, user, node):
 *
 * cluster_X_decode: fills *ret from `obj` (borrowed) in the API form (flags 0)
 * or the stored form (CLUSTER_STORED), defaults set for absent fields, then
 * checks it with cluster_X_check. On success *ret is overwritten (not freed:
 * release what it held first) and the caller releases it with
 * cluster_X_release. 0, GPO_EINVAL with the message, or GPO_ENOMEM.
 *
 * cluster_X_check: every rule on an object built by hand (ranges, name shapes,
 * unique quotas and GPUs, a member's team), with the message decode gives.
 * Ids are not checked (0 is fine here). 0 or GPO_EINVAL.
 *
 * cluster_X_to_json: a new object (caller json_decref's) with every field,
 * defaults included, and "id" when flags has CLUSTER_STORED; NULL when out of
 * memory. cluster_X_decode(cluster_X_to_json(x, f), f) gives x back.
 *
 * cluster_X_release: frees what the object owns and zeroes it; NULL is fine,
 * and so is a zeroed or half-built object.
 */
int cluster_pool_decode(const json_t *obj, unsigned flags, struct cluster_pool *ret, char *err,
                        size_t errlen);
int cluster_pool_check(const struct cluster_pool *pool, char *err, size_t errlen);
json_t *cluster_pool_to_json(const struct cluster_pool *pool, unsigned flags);
void cluster_pool_release(struct cluster_pool *pool);

int cluster_class_decode(const json_t *obj, unsigned flags, struct cluster_class *ret, char *err,
                         size_t errlen);
int cluster_class_check(const struct cluster_class *cls, char *err, size_t errlen);
json_t *cluster_class_to_json(const struct cluster_class *cls, unsigned flags);
void cluster_class_release(struct cluster_class *cls);

int cluster_team_decode(const json_t *obj, unsigned flags, struct cluster_team *ret, char *err,
                        size_t errlen);
int cluster_team_check(const struct cluster_team *team, char *err, size_t errlen);
json_t *cluster_team_to_json(const struct cluster_team *team, unsigned flags);
void cluster_team_release(struct cluster_team *team);

/*
 * A team's "idle" object (cluster_idle.c; docs/idle.md). cluster_idle_default:
 * threshold 5 %, window 1800 s, report, warning 600 s. cluster_idle_decode:
 * obj borrowed, NULL or JSON null for the defaults, a member absent or null
 * keeps its default; "threshold_pct" an integer 0..100, "window_s" 1 s..30
 * days and "warning_s" 0..1 day as integer seconds or a duration string
 * ("30m", "00:30:00"), "action" "report" | "requeue" | "cancel". Messages
 * name "idle.window_s" etc. 0 or GPO_EINVAL. to_json: a new object with
 * durations in seconds, NULL when out of memory.
 */
void cluster_idle_default(struct cluster_idle *ret);
/* "report", "requeue", "cancel" (static), or NULL when out of range. */
const char *cluster_idle_action_name(enum cluster_idle_action a);
int cluster_idle_decode(const json_t *v, struct cluster_idle *ret, char *err, size_t errlen);
int cluster_idle_check(const struct cluster_idle *p, char *err, size_t errlen);
json_t *cluster_idle_to_json(const struct cluster_idle *p);

int cluster_user_decode(const json_t *obj, unsigned flags, struct cluster_user *ret, char *err,
                        size_t errlen);
int cluster_user_check(const struct cluster_user *user, char *err, size_t errlen);
json_t *cluster_user_to_json(const struct cluster_user *user, unsigned flags);
void cluster_user_release(struct cluster_user *user);

int cluster_node_decode(const json_t *obj, unsigned flags, struct cluster_node *ret, char *err,
                        size_t errlen);
int cluster_node_check(const struct cluster_node *node, char *err, size_t errlen);
json_t *cluster_node_to_json(const struct cluster_node *node, unsigned flags);
void cluster_node_release(struct cluster_node *node);
/* Frees a GPU's MIG instances and leaves it without any. */
void cluster_gpu_mig_clear(struct cluster_gpu *gpu);

/* Prices (the same contract as the kinds above; the name is a GPU type's
 * shape, whether the cluster knows the type is the API's check). */
int cluster_price_decode(const json_t *obj, unsigned flags, struct cluster_price *ret, char *err,
                         size_t errlen);
int cluster_price_check(const struct cluster_price *price, char *err, size_t errlen);
json_t *cluster_price_to_json(const struct cluster_price *price, unsigned flags);
void cluster_price_release(struct cluster_price *price);

/*
 * A team's "budget" object (borrowed; NULL or JSON null: no budget) into
 * *ret (overwritten; release with cluster_budget_release): "monthly" > 0 and
 * "alert_at" in (0, 1] (default 0.8), both with at most 6 decimals;
 * "block_below" a class name or absent. Field names in messages are
 * "budget.monthly" etc. 0, GPO_EINVAL, GPO_ENOMEM.
 */
int cluster_budget_decode(const json_t *obj, struct cluster_budget *ret, char *err, size_t errlen);
int cluster_budget_check(const struct cluster_budget *b, char *err, size_t errlen);
/* A new object, or json_null() when no budget is set; NULL out of memory. */
json_t *cluster_budget_to_json(const struct cluster_budget *b);
void cluster_budget_release(struct cluster_budget *b);

/*
 * A JSON number of money into millionths: finite, 0 <= x <= max_micro / 1e6,
 * at most 6 decimals. 0 or GPO_EINVAL ("field 'per_gpu_hour': ...").
 */
int cluster_money_micro(double x, const char *field, int64_t max_micro, int64_t *ret, char *err,
                        size_t errlen);
/* micro as a JSON real (2.5 for 2500000). */
json_t *cluster_money_json(int64_t micro);

/*
 * Services (the contract of the kinds above). The JSON (docs/api.md,
 * "Services"): "name", "team", "project", "model", "command" | "script",
 * "env", "workdir", "resources" {gpus, gpu_mem_mib, min_gpu_mem_mib,
 * gpu_type, cpus, mem_mib, pool}, "priority" (default "serving"),
 * "readiness" {path, period_ms, timeout_ms, failure_threshold},
 * "startup_timeout_s", "drain_timeout_s", "min", "max" (required),
 * "concurrency_limit", "queue" {limit, timeout_ms}, "hosts",
 * "api_key_sha256", "autoscaling" {metric, replica_metric, target,
 * stable_window_s, panic_window_s, panic_threshold_pct,
 * max_scale_up_rate_pct, max_scale_down_rate_pct, scale_down_delay_s,
 * scale_to_zero_grace_s, headroom}, and the server's "generation" and
 * "user". The replica template is decoded as a job (jobspec_decode, or
 * jobspec_decode_stored for CLUSTER_STORED), so a replica obeys the job
 * rules; their messages name the service's fields ("resources.gpus").
 * "team" is required (the API fills in the applying user's); whether team,
 * pool, class and GPU type exist is the server's check. Without
 * "autoscaling.target", a service with a concurrency_limit and the metric
 * "concurrency" targets 70 % of its limit (Knative's target utilization);
 * what else "autoscaling" leaves out is autoscale_spec_default's.
 */
int cluster_service_decode(const json_t *obj, unsigned flags, struct cluster_service *ret,
                           char *err, size_t errlen);
int cluster_service_check(const struct cluster_service *svc, char *err, size_t errlen);
json_t *cluster_service_to_json(const struct cluster_service *svc, unsigned flags);
void cluster_service_release(struct cluster_service *svc);

/* A job's message about the template (jobspec_decode's, the server's
 * resolution of pool and GPU type) into err with the job's resource fields
 * named as the service's: "field 'gpus': ..." -> "field 'resources.gpus': ...". */
void cluster_service_job_message(const char *msg, char *err, size_t errlen);

/* Whether a and b (borrowed) run the same replicas: the template, the probe,
 * the startup timeout and the replica metric agree. A change of anything
 * else (min, max, autoscaling, concurrency, queue, hosts, keys) applies to
 * running replicas; a change of these rolls them (the generation grows). */
bool cluster_service_same_shape(const struct cluster_service *a, const struct cluster_service *b);

/*
 * The job spec of replica `replica` (>= 1) of svc (borrowed): a deep copy of
 * the template with requeue false, no time limit, and the "serve" part from
 * the service (its name, the replica, its generation, the probe, the startup
 * timeout, the replica metric). 0 and *ret (release with jobspec_release),
 * GPO_EINVAL, GPO_ENOMEM.
 */
int cluster_service_replica_spec(const struct cluster_service *svc, uint32_t replica,
                                 struct jobspec *ret, char *err, size_t errlen);

/* "up", "draining", "down"; "admin", "member", "metrics" ("unknown" out of
 * range). */
const char *cluster_node_state_name(enum cluster_node_state state);
const char *cluster_role_name(enum cluster_role role);

/* One entry of the GPU type id table. */
struct cluster_type_id {
    char *name;
    uint32_t id;
};

/*
 * The configuration. Read the arrays freely (each sorted by name, so listings
 * come out in name order); change them only through the functions below. A
 * zeroed struct is an empty cluster. Pointers into an array stay valid until the
 * next change of that kind.
 *
 * GPU type ids: a type gets the next id (the highest ever given + 1, from 1)
 * the first time a node with it is added or replaced, and keeps it when every
 * node of that type goes away, so its fair-share state survives a node's
 * absence. The table only grows: a server that persists it writes the entries
 * it has not written yet (after a node add or replace, compare ntype_ids), and
 * restores it with cluster_type_id_set before adding any node.
 */
struct cluster {
    struct cluster_pool *pools;
    size_t npools, pools_cap;
    struct cluster_class *classes;
    size_t nclasses, classes_cap;
    struct cluster_team *teams;
    size_t nteams, teams_cap;
    struct cluster_user *users;
    size_t nusers, users_cap;
    struct cluster_node *nodes;
    size_t nnodes, nodes_cap;
    struct cluster_type_id *type_ids; /* sorted by name */
    size_t ntype_ids, type_ids_cap;
    struct cluster_price *prices; /* by GPU type name */
    size_t nprices, prices_cap;
    struct cluster_service *services; /* by name */
    size_t nservices, services_cap;
    struct cluster_settings settings;
};

void cluster_init(struct cluster *m);
/* Frees every object and the table; the cluster is empty afterwards. NULL is fine. */
void cluster_release(struct cluster *m);

/*
 * Per kind (pool, class, team, user, node, price, service):
 *
 * cluster_X_add: takes *item (its contents move into the cluster and *item is
 * zeroed) if it passes cluster_X_check, has an id (not 0) and its name is new.
 * 0; GPO_EINVAL (the message), GPO_EEXIST ("pool 'a' already exists"),
 * GPO_E2BIG (more than the core takes: SCHED_MAX_POOLS, SCHED_MAX_CLASSES,
 * SCHED_MAX_TEAMS, CLUSTER_USERS_MAX, SCHED_MAX_NODES; or a new GPU type with
 * the type table full) or GPO_ENOMEM, *item untouched. A node's GPU type gets
 * its id here when new.
 *
 * cluster_X_replace: the same, for the object of that name, which must exist
 * (GPO_ENOENT). The id stays the stored one: item->id must be 0 or equal
 * to it (GPO_EINVAL). The old object is released.
 *
 * cluster_X_remove: releases and removes the object of that name; 0 or
 * GPO_ENOENT. What refers to it is the caller's business (see
 * cluster_check_refs).
 *
 * cluster_X_get: the object of that name (borrowed), or NULL if there is none.
 */
int cluster_pool_add(struct cluster *m, struct cluster_pool *item, char *err, size_t errlen);
int cluster_pool_replace(struct cluster *m, struct cluster_pool *item, char *err, size_t errlen);
int cluster_pool_remove(struct cluster *m, const char *name);
const struct cluster_pool *cluster_pool_get(const struct cluster *m, const char *name);

int cluster_class_add(struct cluster *m, struct cluster_class *item, char *err, size_t errlen);
int cluster_class_replace(struct cluster *m, struct cluster_class *item, char *err, size_t errlen);
int cluster_class_remove(struct cluster *m, const char *name);
const struct cluster_class *cluster_class_get(const struct cluster *m, const char *name);
/* The class of jobs that name none: "normal", else the first by name (NULL
 * when there is no class). */
const char *cluster_class_default(const struct cluster *m);

int cluster_team_add(struct cluster *m, struct cluster_team *item, char *err, size_t errlen);
int cluster_team_replace(struct cluster *m, struct cluster_team *item, char *err, size_t errlen);
int cluster_team_remove(struct cluster *m, const char *name);
const struct cluster_team *cluster_team_get(const struct cluster *m, const char *name);

int cluster_user_add(struct cluster *m, struct cluster_user *item, char *err, size_t errlen);
int cluster_user_replace(struct cluster *m, struct cluster_user *item, char *err, size_t errlen);
int cluster_user_remove(struct cluster *m, const char *name);
const struct cluster_user *cluster_user_get(const struct cluster *m, const char *name);

int cluster_price_add(struct cluster *m, struct cluster_price *item, char *err, size_t errlen);
int cluster_price_replace(struct cluster *m, struct cluster_price *item, char *err, size_t errlen);
int cluster_price_remove(struct cluster *m, const char *name);
/* A price's name is the GPU type it prices. */
const struct cluster_price *cluster_price_get(const struct cluster *m, const char *name);

int cluster_service_add(struct cluster *m, struct cluster_service *item, char *err, size_t errlen);
int cluster_service_replace(struct cluster *m, struct cluster_service *item, char *err,
                            size_t errlen);
int cluster_service_remove(struct cluster *m, const char *name);
const struct cluster_service *cluster_service_get(const struct cluster *m, const char *name);

int cluster_node_add(struct cluster *m, struct cluster_node *item, char *err, size_t errlen);
int cluster_node_replace(struct cluster *m, struct cluster_node *item, char *err, size_t errlen);
int cluster_node_remove(struct cluster *m, const char *name);
const struct cluster_node *cluster_node_get(const struct cluster *m, const char *name);

/* The table entry of a GPU type (borrowed), or NULL if no node ever had it. */
const struct cluster_type_id *cluster_type_id_get(const struct cluster *m, const char *gpu_type);

/*
 * Restores one entry of the table. 0 (also when the same entry is there);
 * GPO_EINVAL for a bad type name or id 0; GPO_EEXIST when the type has
 * another id or the id another type; GPO_E2BIG (table full); GPO_ENOMEM.
 */
int cluster_type_id_set(struct cluster *m, const char *gpu_type, uint32_t id, char *err,
                        size_t errlen);

/*
 * The first reference that names nothing, in name order: a team's quota of
 * an unknown pool, a user of an unknown team, a node in an unknown pool.
 * 0, or GPO_EINVAL with e.g. "team 'vision': quotas[1]: unknown pool 'gpu-a'".
 */
int cluster_check_refs(const struct cluster *m, char *err, size_t errlen);

/*
 * The core's view of a cluster. `c` points into the arrays below, which (and
 * every string they point to) the struct owns: it stays valid whatever
 * happens to the cluster afterwards. Core indices:
 *  - pools, teams, classes, nodes: the cluster's order (by name);
 *  - gpu_types: the types the nodes' GPUs have now, by name, with their ids
 *    from the table;
 *  - gpus: node by node, each node's in its stored order.
 * Quotas are expanded: a pool-wide entry becomes one per type present in the
 * pool (skipping types the team names there), and an entry for a type that
 * no node has now is left out (nothing can run there). Node states map to
 * the core's (draining: nothing new starts; down: nothing runs).
 */
struct cluster_view {
    struct sched_cluster c;
    struct sched_node *nodes;
    struct sched_gpu *gpus;
    struct sched_pool *pools;
    struct sched_gpu_type *gpu_types;
    struct sched_team *teams;
    struct sched_quota *quotas;
    struct sched_prio_class *classes;
    uint32_t *gpu_node;    /* [core GPU]: its core node */
    uint32_t *gpu_index;   /* [core GPU]: its index on the node */
    const char **gpu_uuid; /* [core GPU]: its UUID */
    const char **features; /* [bit]: the feature's name, sorted by name */
    uint32_t nfeatures;
    char *strings; /* every name and UUID above */
};

/*
 * Builds the core's view of `m` (borrowed). 0; GPO_EINVAL when a reference
 * names nothing (cluster_check_refs's message) or the core refuses the result
 * (sched_cluster_check's reason); GPO_E2BIG (more than SCHED_MAX_GPU_TYPES
 * types); GPO_ENOMEM. The caller frees *ret with cluster_view_release.
 */
int cluster_view_build(const struct cluster *m, struct cluster_view *ret, char *err, size_t errlen);

/* Frees what the cluster owns and zeroes it; NULL and zeroed are fine. */
void cluster_view_release(struct cluster_view *cl);

/* The pool a job's "pool" names: by its name, else by an alias; NULL when
 * none (borrowed). */
const struct cluster_pool *cluster_pool_resolve(const struct cluster *m, const char *name);

/* The cluster's distinct node feature names, sorted, into ret (borrowed
 * from m); how many. A feature's bit in the view is its index here. */
size_t cluster_feature_names(const struct cluster *m, const char *ret[SCHED_MAX_FEATURES]);
/* Whether s is a valid feature name (cluster_node_features). */
bool cluster_feature_valid(const char *s);

/* Pool p's "mig" against the MIG types of m's nodes in p (by their GPUs'
 * gpu_type; p may replace the pool of its name): a static layout must be
 * valid on at least one of them ("field 'mig.layout': valid on no MIG GPU
 * type of pool 'a' ..."). 0 when no node of p has a MIG type yet
 * (cluster_mig_decode checked it against the catalogue). */
int cluster_pool_mig_check(const struct cluster *m, const struct cluster_pool *p, char *err,
                           size_t errlen);

/* The features the admin gave node `node` of pool `pool` (borrowed), or
 * NULL when none. */
const struct cluster_node_features *cluster_pool_node_features(const struct cluster_pool *pool,
                                                               const char *node);

/* The name of core node `node`, or NULL when out of range (borrowed). */
const char *cluster_view_node_name(const struct cluster_view *cl, uint32_t node);

/*
 * A job's request for the core: team (spec->team, else `user_team`), class
 * (spec->priority, else `default_class`), pool and GPU type (absent: SCHED_ANY)
 * resolved to indices of `cl` (the type by cluster_gpu_type_match), the sizes
 * copied (time limit in ms), and Slurm's shape: nodes, exclusive, whole-node
 * memory, the constraint as masks over cl->features. id,
 * submit_ms, project and model are left 0 for the server to set. All
 * arguments are borrowed; user_team and default_class may be NULL. 0, or
 * GPO_EINVAL with "unknown pool 'gpu-a'", "unknown GPU type 'A100' (known:
 * H100-80GB)", "unknown team 'x'", "unknown priority class 'x' (known: ...)",
 * or "no team: ..." / "no priority class: ..." when neither source names one.
 */
int cluster_job_request(const struct cluster_view *cl, const struct jobspec *spec,
                        const char *user_team, const char *default_class, struct sched_job *ret,
                        char *err, size_t errlen);

/* "a, b, c" of names[0..n) into buf (size bytes), cut with "..." to fit;
 * returns buf, or "none" (static) when n is 0. For messages. */
const char *cluster_names_list(const char *const *names, size_t n, char *buf, size_t size);

/*
 * The GPU type of types[0..n) a user's name means: the exact name, else the
 * one equal but for case, else the one whose part before the first '-' is
 * the name but for case ("h100" is "H100-80GB"). 0 and *ret its index;
 * GPO_EINVAL naming the types a short name matches when it matches several;
 * GPO_ENOENT naming the known types when none.
 */
int cluster_gpu_type_match(const char *const *types, size_t n, const char *want, size_t *ret,
                           char *err, size_t errlen);

/*
 * A constraint ("a&b|c": '&' binds tighter than '|') as OR of AND-masks over
 * features[0..n) (bit i: features[i]): 0 with masks[0..*ret_nterms) set (0
 * terms for NULL or ""); GPO_EINVAL naming the known features for a name
 * none has, or for more than SCHED_CONSTRAINT_TERMS alternatives.
 */
int cluster_constraint_masks(const char *const *features, size_t n, const char *constraint,
                             uint64_t masks[SCHED_CONSTRAINT_TERMS], uint32_t *ret_nterms,
                             char *err, size_t errlen);

/* One GPU of an allocation, as the agent needs it. Strings borrowed from the
 * cluster. */
struct cluster_alloc_gpu {
    const char *node;
    const char *uuid;
    uint32_t index; /* on the node */
    uint32_t milli;
    uint32_t mem_mib;
};

/*
 * The GPUs of `alloc` (its shares, in order): *ret_gpus is a new array
 * (caller frees with free(); non-NULL even when empty) of *ret_n entries.
 * 0; GPO_EINVAL for a share whose GPU index is out of range; GPO_ENOMEM.
 */
int cluster_view_alloc_gpus(const struct cluster_view *cl, const struct sched_alloc *alloc,
                            struct cluster_alloc_gpu **ret_gpus, size_t *ret_n);

#endif

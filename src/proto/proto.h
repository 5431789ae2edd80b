/*
 * proto.h - the messages the controller and the node agent exchange, typed
 * once: one encoder and one decoder per message, and both sides use them.
 *
 *   PUT  /v1/nodes/NAME                        body: proto_register
 *        its 200/201 answer                    proto_registered (the node and its log token)
 *   POST /v1/nodes/NAME/heartbeat              body: proto_heartbeat
 *   GET  /v1/nodes/NAME/assignments            answer: proto_assignments (of proto_attempt)
 *   POST /v1/nodes/NAME/attempts/JOB/ATTEMPT   body: proto_report
 *
 * Every message X has the same three functions:
 *
 *   int proto_X_encode(const struct proto_X *m, json_t **ret);
 *     *ret: a new object (caller json_decref's). Encoders only read `m`, so a
 *     struct filled by hand for an encode may borrow its strings (and is then
 *     not released). They do not check the limits below: the decoder on the
 *     other side does, and what a decoder filled encodes to an object that
 *     decodes to the same struct. 0, GPO_EINVAL (a required string NULL,
 *     text that is not UTF-8, an enum out of range), GPO_ENOMEM.
 *
 *   int proto_X_decode(const json_t *obj, struct proto_X *ret, char *err, size_t errlen);
 *     Strict: an unknown key, a wrong type, a value out of range, a string,
 *     list or count over its limit, a control character in a name, UUID,
 *     address or message (util/text.h; a job's command, script, paths and
 *     environment, and a kill's reason, may hold any text) is refused with
 *     one line that names the field by its path, in util/jsonv's words:
 *         field 'attempts[3].gpus[0].milli': 5000 is out of range 1..1000
 *         field 'gpus[1].utilization_pct': expected an integer, got a string
 *         missing required field 'attempts[0].spec' (action 'run' needs it)
 *     A heartbeat's figure not reported is null (or absent), never a value
 *     of another type; the side that samples makes its figures fit with
 *     proto_gpu_sample_fit. On success *ret is
 *     overwritten (not freed) and owns all its memory; release it with
 *     proto_X_release. On failure *ret is untouched. 0, GPO_EINVAL,
 *     GPO_ERANGE (a number, length or count out of its bounds), GPO_ENOMEM.
 *     `obj` is borrowed. Parse the text with JSON_REJECT_DUPLICATES: a
 *     json_t cannot tell a repeated key.
 *
 *   void proto_X_release(struct proto_X *m);
 *     Frees every string and array m holds (counts say how many) and zeroes
 *     it; NULL is fine.
 *
 * What the decoders check is the shape of a message; rules of the model (a
 * pool that exists, a UUID's form, a host name's form) stay with the side
 * that knows them. A decoded message holds no GPU index and no GPU UUID
 * twice where it lists a node's GPUs (registration).
 *
 * Dependencies: util (jsonv, errbuf, text) and base only.
 */
#ifndef GPUORCH_PROTO_PROTO_H
#define GPUORCH_PROTO_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/err.h"

/* An integer member that is absent, null, or (a heartbeat's figures) not
 * reported. The store's STORE_NULL has the same value. */
#define PROTO_NONE INT64_MIN

/* Limits. Where the controller accepts a thing from users (cluster/jobspec.h,
 * cluster/cluster.h), the limit here is the same, so that whatever the
 * controller stored reaches the agent; tests/unit/test_proto.c checks it. */
#define PROTO_HOST_MAX        253        /* node names, addresses */
#define PROTO_NAME_MAX        63         /* pools, GPU types, users */
#define PROTO_UNIX_USER_MAX   32         /* a Unix login name */
#define PROTO_UUID_MAX        96         /* NVML's UUID buffer */
#define PROTO_GPUS_MAX        64         /* GPUs of one node (the core's SCHED_MAX_GPUS_PER_NODE) */
#define PROTO_GPU_MEM_MAX     (1u << 22) /* MiB of one GPU */
#define PROTO_NODE_CPUS_MAX   (1u << 20)
#define PROTO_NODE_MEM_MAX    (INT64_C(1) << 40) /* MiB */
#define PROTO_MIG_SLICES_MAX  7
#define PROTO_TOKEN_MAX       256  /* the log token */
#define PROTO_ERROR_MAX       512  /* a GPU's sampling error */
#define PROTO_PROCS_MAX       4096 /* processes on one GPU (gpu.h's GPU_MAX_PROCS) */
#define PROTO_DIRTY_MAX       PROTO_GPUS_MAX
#define PROTO_ATTEMPTS_MAX    65536 /* attempts in one answer: 64 GPUs in thousandths, and more */
#define PROTO_GANG_MAX        1024  /* nodes of one gang */
#define PROTO_KILL_REASON_MAX 1024
#define PROTO_REASON_MAX      120 /* a report's reason */
#define PROTO_SIGNAL_MAX      64
/* What a GPU's sample may report: the bounds of a real board's figures. */
#define PROTO_PCT_MAX      100
#define PROTO_POWER_MW_MAX 5000000 /* 5 kW: above any one board's draw */
#define PROTO_TEMP_MIN_C   (-40)
#define PROTO_TEMP_MAX_C   150
#define PROTO_PID_MAX      4194304 /* Linux's PID_MAX_LIMIT */
/* A job's spec, as cluster/jobspec.h bounds it. */
#define PROTO_SPEC_NAME_MAX    128 /* name, team, project, model, priority, pool, gpu_type */
#define PROTO_ARGV_MAX         1024
#define PROTO_ARG_MAX          4096
#define PROTO_SCRIPT_MAX       (1u << 20)
#define PROTO_PATH_MAX         4096
#define PROTO_ENV_MAX          256
#define PROTO_ENV_VALUE_MAX    32768
#define PROTO_DEPS_MAX         64
#define PROTO_ARRAY_TEXT_MAX   (1 << 17)
#define PROTO_ARRAY_INDEX_MAX  4000000u
#define PROTO_SPEC_GPUS_MAX    1024
#define PROTO_SPEC_CPUS_MAX    4096
#define PROTO_TASKS_MAX        65536
#define PROTO_CONSTRAINT_MAX   1024
#define PROTO_BEGIN_MAX        INT64_C(253402300799)
#define PROTO_SPEC_MEM_MAX     (INT64_C(64) << 20) /* MiB */
#define PROTO_SPEC_GPU_MEM_MAX (INT64_C(1) << 20)  /* MiB */
#define PROTO_TIME_LIMIT_MAX   (INT64_C(365) * 86400)
#define PROTO_RETRIES_MAX      100

/* ---- registration: PUT /v1/nodes/NAME --------------------------------- */

/*
 * A MIG GPU instance as the agent reads it from NVML (gpu/nvml_mig.c): its
 * profile by NVML profile id (nvidia-smi's ID column: 1g.10gb is 19 on an
 * H100), its placement's start slot, the GPU and compute instance ids, and
 * the MIG device's UUID ("MIG-...", what CUDA_VISIBLE_DEVICES takes); a GPU
 * instance without a compute instance yet has no UUID (NULL, null on the
 * wire) and takes no job.
 */
#define PROTO_MIG_INSTANCES_MAX 7  /* GPU instances of one GPU (core/mig.h) */
#define PROTO_MIG_SLOT_MAX      7  /* start slots 0..7 */
#define PROTO_MIG_PROFILE_MAX   63 /* NVML profile ids */
#define PROTO_MIG_ID_MAX        63 /* GPU and compute instance ids (NVML's are below 15) */
/*
 * On the wire, one instance is {"profile_id": 19, "start": 0, "gi_id": 7,
 * "ci_id": 0, "uuid": "MIG-..."} ("ci_id" and "uuid" null or absent for
 * none; a "uuid" needs a "ci_id"). A list of one GPU's instances holds no
 * start slot, no gi_id and no UUID twice; placements and profiles are the
 * controller's to check against its catalogue.
 */
struct proto_mig_instance {
    uint32_t profile_id; /* 0..PROTO_MIG_PROFILE_MAX */
    uint32_t start;      /* 0..PROTO_MIG_SLOT_MAX */
    uint32_t gi_id;      /* the GPU instance id, 0..PROTO_MIG_ID_MAX */
    int64_t ci_id;       /* the compute instance id, 0..PROTO_MIG_ID_MAX; PROTO_NONE: none yet */
    char *uuid;          /* 1..PROTO_UUID_MAX bytes, or NULL */
};

/* One GPU of the node's inventory. */
struct proto_gpu {
    uint32_t index;        /* 0..PROTO_GPUS_MAX-1, unique on the node */
    char *uuid;            /* 1..PROTO_UUID_MAX bytes, unique on the node */
    char *gpu_type;        /* "H100-80GB": 1..PROTO_NAME_MAX bytes */
    uint32_t mem_mib;      /* 1..PROTO_GPU_MEM_MAX */
    int64_t nvlink_domain; /* the lowest index its NVLinks reach; -1: none (also when absent) */
    uint32_t mig_slices;   /* 0..PROTO_MIG_SLICES_MAX */
    bool mig_enabled;
    bool mig_pending; /* MIG mode after the next GPU reset ("mig_pending", optional:
                         absent means mig_enabled, and it is written only when it differs) */
    /* With mig_enabled: the GPU's instances ("mig", optional, at most
     * PROTO_MIG_INSTANCES_MAX, no start slot twice; written when not empty;
     * refused on a GPU not in MIG mode). */
    struct proto_mig_instance *mig;
    size_t nmig;
};

struct proto_register {
    char *name;        /* NULL: absent (the path names the node; the agent sends none) */
    char *pool;        /* 1..PROTO_NAME_MAX bytes */
    uint32_t cpus;     /* 1..PROTO_NODE_CPUS_MAX */
    int64_t mem_mib;   /* 1..PROTO_NODE_MEM_MAX */
    char *addr;        /* where the controller reaches the agent; NULL: absent */
    uint32_t log_port; /* the agent's log server, 0..65535 (0: none) */
    struct proto_gpu *gpus;
    size_t ngpus; /* 0..PROTO_GPUS_MAX */
};

int proto_register_encode(const struct proto_register *m, json_t **ret);
int proto_register_decode(const json_t *obj, struct proto_register *ret, char *err, size_t errlen);
void proto_register_release(struct proto_register *m);
/* Its "gpus" list alone (`gpuorch agent --probe` shows it). */
int proto_gpus_encode(const struct proto_gpu *gpus, size_t n, json_t **ret);

/* The node as the controller stored it, and the token the agent's log
 * server asks of the controller. "name" is required here; "log_port" is
 * written only when not 0. */
enum proto_node_state {
    PROTO_NODE_UP = 0,
    PROTO_NODE_DRAINING,
    PROTO_NODE_DOWN,
};

/*
 * Fencing (docs/agent.md, "Fencing"): "fence_lease_ms" and "fence_grace_ms"
 * in the registration answer and in every assignments answer tell the agent
 * that, once it has had no 200 from a leading controller for fence_lease_ms
 * (counted from the SEND time of its last answered heartbeat), it stops
 * every attempt: SIGTERM, then SIGKILL after the smaller of the attempt's
 * grace and fence_grace_ms; it journals what it fenced and reports each such
 * attempt ("fenced": true in its report) once a controller answers again.
 * Both are written only when fence_lease_ms is not 0; absent (an older
 * controller, or --fence-lease 0): the agent never fences.
 */
#define PROTO_FENCE_MS_MAX 86400000LL

struct proto_registered {
    struct proto_register node;
    enum proto_node_state state; /* "up", "draining", "down" */
    char *log_token;             /* 1..PROTO_TOKEN_MAX bytes */
    int64_t fence_lease_ms;      /* 0..PROTO_FENCE_MS_MAX; 0: absent, no fencing */
    int64_t fence_grace_ms;      /* 0..PROTO_FENCE_MS_MAX */
};

int proto_registered_encode(const struct proto_registered *m, json_t **ret);
int proto_registered_decode(const json_t *obj, struct proto_registered *ret, char *err,
                            size_t errlen);
void proto_registered_release(struct proto_registered *m);

/* ---- heartbeat: POST /v1/nodes/NAME/heartbeat -------------------------- */

/* A process NVML lists on a GPU. job and attempt are PROTO_NONE (JSON null)
 * together for a process that is no attempt's; one without the other is
 * refused. */
struct proto_process {
    int64_t pid;        /* 1..PROTO_PID_MAX, or PROTO_NONE: not reported */
    int64_t memory_mib; /* 0..PROTO_GPU_MEM_MAX, or PROTO_NONE */
    int64_t job;        /* >= 1, or PROTO_NONE */
    int64_t attempt;    /* 1..UINT32_MAX, or PROTO_NONE */
};

/* One GPU's sample. A GPU that failed to sample has `error` (and on the wire
 * only "index" and "error"); every other has `uuid` and figures. A
 * heartbeat samples each GPU once: no index and no UUID twice. */
struct proto_gpu_sample {
    uint32_t index; /* 0..PROTO_GPUS_MAX-1 */
    char *uuid;     /* NULL exactly when error is set */
    char *error;    /* 1..PROTO_ERROR_MAX bytes, or NULL */
    /* Figures, PROTO_NONE when not reported (null on the wire); else
     * utilization_pct and memory_utilization_pct 0..PROTO_PCT_MAX, memory_*
     * 0..PROTO_GPU_MEM_MAX (used <= total when both are reported), power_mw
     * 0..PROTO_POWER_MW_MAX, temperature_c PROTO_TEMP_MIN_C..PROTO_TEMP_MAX_C. */
    int64_t utilization_pct, memory_utilization_pct, memory_used_mib, memory_total_mib, power_mw,
        temperature_c;
    bool procs_known; /* false: "processes": null (NVML could not list them) */
    struct proto_process *procs;
    size_t nprocs; /* 0..PROTO_PROCS_MAX */
    /* MIG now ("mig", optional): mig_known false when absent. The layout
     * changes with plans (struct proto_mig_plan), so every heartbeat
     * carries it for GPUs in MIG mode; the controller's view of a node's
     * instances is the last one reported. On the wire
     * "mig": {"enabled": B, "pending": B, "instances": [...]} ("pending"
     * absent: as "enabled"; "instances" absent: none, refused when not
     * enabled); not allowed next to "error". The agent sends it for every
     * MIG-capable GPU. */
    bool mig_known;
    bool mig_enabled, mig_pending;
    struct proto_mig_instance *mig;
    size_t nmig;
};

struct proto_heartbeat {
    struct proto_gpu_sample *gpus;
    size_t ngpus;          /* 0..PROTO_GPUS_MAX */
    char **dirty;          /* UUIDs of GPUs ended attempts' processes still occupy */
    size_t ndirty;         /* 0..PROTO_DIRTY_MAX */
    int64_t sampled_at_ms; /* when the agent sampled (Unix ms, >= 0); PROTO_NONE: absent */
};

int proto_heartbeat_encode(const struct proto_heartbeat *m, json_t **ret);
int proto_heartbeat_decode(const json_t *obj, struct proto_heartbeat *ret, char *err,
                           size_t errlen);
void proto_heartbeat_release(struct proto_heartbeat *m);
/* Makes a sample fit to send, in place: a figure out of its range (or a
 * memory used above the total) becomes PROTO_NONE, so does a pid out of
 * range; a process with one id but not the other has neither; the error
 * text loses its control characters and is cut to PROTO_ERROR_MAX
 * (util/text.h's text_fit_line). What a GPU reports wrongly is then not
 * reported, rather than the whole heartbeat refused. NULL is fine. */
void proto_gpu_sample_fit(struct proto_gpu_sample *s);
/* Its "gpus" list alone (`gpuorch agent --probe` shows it). */
int proto_gpu_samples_encode(const struct proto_gpu_sample *gpus, size_t n, json_t **ret);

/* ---- assignments: GET /v1/nodes/NAME/assignments ---------------------- */

enum proto_action {
    PROTO_ACTION_RUN = 0, /* "run": launch it (once) */
    PROTO_ACTION_KILL,    /* "kill": stop it */
};

/* Why a kill: the final state the agent reports for it ("as" on the wire). */
#define PROTO_KILL_MAP(X)                                                                          \
    X(CANCELLED, "CANCELLED")                                                                      \
    X(PREEMPTED, "PREEMPTED")
enum proto_kill_cause {
#define PROTO_KILL_ENUM(name, text) PROTO_KILL_##name,
    PROTO_KILL_MAP(PROTO_KILL_ENUM)
#undef PROTO_KILL_ENUM
};
/* "CANCELLED", ...; "unknown" out of range. */
const char *proto_kill_cause_name(enum proto_kill_cause cause);

/* A GPU an attempt runs on: the whole GPU (milli 1000), a share of it, or
 * one of its MIG instances (mig_uuid set: the job sees only that MIG
 * device, CUDA_VISIBLE_DEVICES=MIG-...; milli is the instance's charge). */
struct proto_share {
    char *uuid;      /* 1..PROTO_UUID_MAX bytes */
    uint32_t milli;  /* 1..1000 */
    int64_t mem_mib; /* 0..PROTO_GPU_MEM_MAX: its share of the GPU's memory */
    char *mig_uuid;  /* "mig_uuid", optional (written when set): 1..PROTO_UUID_MAX bytes,
                        or NULL */
};

/*
 * A MIG repartition of one GPU, from the controller's planner
 * (core/mig.h's struct mig_gpu_plan, by NVML profile ids): destroy the
 * named instances (each by profile id and start slot, as reported), then
 * create the new ones with nvmlDeviceCreateGpuInstanceWithPlacement and
 * one compute instance spanning each. The agent applies plans one GPU at a
 * time, in id order, refuses to destroy an instance a process uses, and
 * reports the outcome (struct proto_mig_result) once per plan id.
 */
/* On the wire {"id": 3, "gpu_uuid": "GPU-...", "destroy": [{"profile_id":
 * 0, "start": 0}], "create": [{"profile_id": 19, "start": 0}, ...]}
 * ("destroy" and "create" optional, empty when absent); no plan id twice in
 * one answer, no start slot twice within one plan's destroy or create. */
struct proto_mig_change {
    uint32_t profile_id; /* 0..PROTO_MIG_PROFILE_MAX */
    uint32_t start;      /* 0..PROTO_MIG_SLOT_MAX */
};
struct proto_mig_plan {
    uint64_t id;    /* >= 1, unique per controller; a plan seen again is not reapplied */
    char *gpu_uuid; /* the GPU, 1..PROTO_UUID_MAX bytes */
    struct proto_mig_change *destroy, *create;
    size_t ndestroy, ncreate; /* each 0..PROTO_MIG_INSTANCES_MAX */
};

/* POST /v1/nodes/NAME/mig/ID: the outcome of plan ID. On failure the
 * instances are what the GPU holds afterwards (a plan may fail halfway),
 * and the controller schedules on them. On the wire {"ok": B, "error":
 * TEXT (required when !ok, refused when ok), "gpu_uuid": UUID, "mig":
 * [instances] (required, may be empty)}. */
struct proto_mig_result {
    bool ok;
    char *error;                    /* 1..PROTO_ERROR_MAX bytes when !ok; NULL otherwise */
    char *gpu_uuid;                 /* 1..PROTO_UUID_MAX bytes */
    struct proto_mig_instance *mig; /* the GPU's instances after the plan (as proto_gpu.mig) */
    size_t nmig;
};
int proto_mig_result_encode(const struct proto_mig_result *m, json_t **ret);
int proto_mig_result_decode(const json_t *obj, struct proto_mig_result *ret, char *err,
                            size_t errlen);
void proto_mig_result_release(struct proto_mig_result *m);

struct proto_env {
    char *name;  /* 1..PROTO_SPEC_NAME_MAX bytes */
    char *value; /* 0..PROTO_ENV_VALUE_MAX bytes */
};

enum proto_dep_type {
    PROTO_DEP_AFTEROK = 0,
    PROTO_DEP_AFTERANY,
};

struct proto_dep {
    enum proto_dep_type type; /* "afterok", "afterany" */
    int64_t job;              /* >= 1 */
};

/*
 * The job's spec, every key the controller's API shows (cluster/jobspec.h).
 * The agent uses what to launch and its limits; the scheduling fields below
 * them travel so that the spec reads the same everywhere. Strings are NULL
 * for JSON null (or absent); absent numbers are 0, absent booleans false.
 */
enum proto_open_mode {
    PROTO_OPEN_TRUNCATE = 0,
    PROTO_OPEN_APPEND,
};

enum proto_launch {
    PROTO_LAUNCH_EVERY_NODE = 0, /* the program on every node of a gang */
    PROTO_LAUNCH_FIRST_NODE,     /* on rank 0 only; the other nodes hold for steps */
};

/*
 * A serving replica's part of a spec ("serve": an object, or absent/null for
 * every other job). The controller's serve subsystem makes these jobs; the
 * agent gives the replica a free port (PORT), GPUORCH_SERVICE and
 * GPUORCH_REPLICA, probes probe_path on 127.0.0.1:PORT (aggressively until
 * the first success, then every probe_period_ms), fails the attempt when it
 * is not ready within startup_timeout_s, and reports its endpoint
 * (struct proto_endpoint) whenever readiness or the metric changes.
 */
#define PROTO_SERVE_PATH_MAX   1024 /* probe path: starts with '/' */
#define PROTO_SERVE_METRIC_MAX 200  /* a Prometheus metric name (with ':') */
struct proto_serve {
    char *service;             /* 1..PROTO_SPEC_NAME_MAX bytes; NULL: not a replica */
    uint32_t replica;          /* the replica's number within its service, >= 1 */
    uint64_t generation;       /* the service spec's generation it runs */
    char *probe_path;          /* "/health": 1..PROTO_SERVE_PATH_MAX bytes, starts with '/' */
    int64_t probe_period_ms;   /* 100..3600000 */
    int64_t probe_timeout_ms;  /* 10..600000 */
    uint32_t probe_failures;   /* failure threshold, 1..1000 */
    int64_t startup_timeout_s; /* 1..86400 */
    char *metric;              /* a metric of the replica's own /metrics to report, or NULL */
};

struct proto_spec {
    /* what runs, and how */
    char *name;            /* 1..PROTO_SPEC_NAME_MAX bytes, or NULL */
    char **argv;           /* "command": NULL-terminated; NULL when null (a script job) */
    size_t argc;           /* 0..PROTO_ARGV_MAX, each 0..PROTO_ARG_MAX bytes */
    char *script;          /* 1..PROTO_SCRIPT_MAX bytes, or NULL */
    char *workdir;         /* 1..PROTO_PATH_MAX bytes, or NULL: the user's home */
    struct proto_env *env; /* "env": {NAME: VALUE}, in the object's order */
    size_t nenv;           /* 0..PROTO_ENV_MAX */
    char *output, *error;  /* log paths (sbatch's %j patterns), or NULL */
    int64_t time_limit_s;  /* 0..PROTO_TIME_LIMIT_MAX; 0: none */
    uint32_t cpus;         /* 0..PROTO_SPEC_CPUS_MAX */
    int64_t mem_mib;       /* 0..PROTO_SPEC_MEM_MAX */
    /* what the scheduler read */
    char *team, *project, *model, *priority, *pool, *gpu_type; /* as name */
    int64_t gpus_milli; /* "gpus": whole GPUs (an integer) or a fraction below 1, in
                           thousandths: 0..PROTO_SPEC_GPUS_MAX * 1000 */
    int64_t gpu_mem_mib, min_gpu_mem_mib; /* 0..PROTO_SPEC_GPU_MEM_MAX */
    char *mig_profile; /* "mig_profile": one MIG instance of this profile ("1g.10gb"),
                          1..PROTO_SPEC_NAME_MAX bytes, as the controller's jobspec
                          bounds it; NULL: none (gpus_milli then 0). Null
                          or absent is NULL, and NULL is not written */
    bool multi_node, checkpointable, requeue;
    uint32_t max_retries;   /* 0..PROTO_RETRIES_MAX */
    struct proto_dep *deps; /* "dependencies" */
    size_t ndeps;           /* 0..PROTO_DEPS_MAX */
    char *array;            /* Slurm's array text, 1..PROTO_ARRAY_TEXT_MAX bytes, or NULL */
    /* Slurm's shape, under jobspec_to_json's keys (0: not given) */
    uint32_t nodes, gpus_per_node;         /* 0..PROTO_GANG_MAX, 0..PROTO_SPEC_GPUS_MAX */
    uint32_t ntasks, ntasks_per_node;      /* 0..PROTO_TASKS_MAX */
    uint32_t cpus_per_task, gpus_per_task; /* 0..PROTO_SPEC_CPUS_MAX, 0..PROTO_SPEC_GPUS_MAX */
    int64_t mem_per_node_mib, mem_per_cpu_mib, mem_per_gpu_mib; /* 0..PROTO_SPEC_MEM_MAX */
    bool mem_whole_node, exclusive;
    char *constraint; /* 1..PROTO_CONSTRAINT_MAX bytes, or NULL */
    /* "signal": "[B:]SIG[@SECS]" (util/sigspec.h) or null, read into: */
    uint32_t signal;          /* 1..SIGSPEC_NUM_MAX, 0: none */
    uint32_t signal_before_s; /* 0..SIGSPEC_BEFORE_MAX */
    bool signal_batch_only;
    enum proto_open_mode open_mode; /* "truncate" or "append" */
    enum proto_launch launch;       /* "every_node" or "first_node" */
    char *submit_dir;               /* 1..PROTO_PATH_MAX bytes, or NULL */
    bool hold;
    int64_t begin;            /* Unix seconds, 0..PROTO_BEGIN_MAX */
    struct proto_serve serve; /* "serve"; serve.service NULL when absent */
};

/* Where a gang's ranks meet: every node in rank order, this node's rank,
 * rank 0's address and port. */
struct proto_gang {
    char **nodes;         /* NULL-terminated */
    size_t nnodes;        /* 1..PROTO_GANG_MAX, each 1..PROTO_HOST_MAX bytes */
    uint32_t rank;        /* < nnodes */
    char *master_addr;    /* 1..PROTO_HOST_MAX bytes */
    uint32_t master_port; /* 1..65535 */
};

/* What a gang's job steps need (`gpuorch run`): the attempt's step
 * credential, which every rank's agent checks a step's requests against,
 * and where each rank's agent serves steps, in rank order. */
#define PROTO_STEP_KEY_LEN  64                   /* hex digits of HMAC-SHA-256 */
#define PROTO_STEP_ADDR_MAX (PROTO_HOST_MAX + 8) /* "host:port", "[v6]:port" */
struct proto_step {
    char *key;    /* PROTO_STEP_KEY_LEN lowercase hex digits */
    char **addrs; /* NULL-terminated; as many as the gang's nodes, each 1..PROTO_STEP_ADDR_MAX */
    size_t naddrs;
};

struct proto_attempt {
    uint64_t job;     /* 1..INT64_MAX */
    uint32_t attempt; /* >= 1 */
    enum proto_action action;
    /* action run (all but the array pair, pool and priority required; absent in a kill) */
    struct proto_share *gpus;
    size_t ngpus;    /* 0..PROTO_GPUS_MAX */
    char *user;      /* who submitted it: 1..PROTO_NAME_MAX bytes */
    char *unix_user; /* 1..PROTO_UNIX_USER_MAX bytes; NULL: JSON null (none) */
    struct proto_spec spec;
    struct proto_gang gang;
    int64_t array_id;    /* an array task's array (>= 1); PROTO_NONE: not one */
    int64_t array_index; /* 0..PROTO_ARRAY_INDEX_MAX; PROTO_NONE with array_id */
    char *pool;          /* the pool the node runs it in, 1..PROTO_NAME_MAX bytes; NULL: absent */
    char *priority;      /* the priority class it runs under (the spec's, or the default),
                            1..PROTO_SPEC_NAME_MAX bytes; NULL: absent */
    struct proto_step step; /* "step", optional: key NULL when absent */
    /* "mps", optional: the pool shares GPUs with CUDA MPS (pool setting
     * `sharing: mps`): a fractional share runs as a client of that GPU's MPS
     * server, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE from its milli and
     * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT from its mem_mib. Absent is false,
     * and false is not written; refused in a kill. */
    bool mps;
    /* action kill */
    int64_t grace_s; /* SIGTERM to SIGKILL, 0..INT32_MAX; PROTO_NONE: absent (the agent's
                        --kill-grace) */
    char *reason;    /* 0..PROTO_KILL_REASON_MAX bytes, for people; NULL: absent */
    enum proto_kill_cause cause; /* "as" */
};

struct proto_assignments {
    int64_t rev; /* the node's revision, >= 0: the next poll's since= */
    char *node;  /* 1..PROTO_HOST_MAX bytes */
    struct proto_attempt *attempts;
    size_t nattempts; /* 0..PROTO_ATTEMPTS_MAX */
    /* "mig_plans", optional (written when not empty): repartitions not yet
     * reported done */
    struct proto_mig_plan *mig_plans;
    size_t nmig_plans;      /* 0..PROTO_GPUS_MAX */
    int64_t fence_lease_ms; /* as in struct proto_registered */
    int64_t fence_grace_ms;
};

int proto_assignments_encode(const struct proto_assignments *m, json_t **ret);
int proto_assignments_decode(const json_t *obj, struct proto_assignments *ret, char *err,
                             size_t errlen);
void proto_assignments_release(struct proto_assignments *m);

/* One attempt alone (an element of "attempts"), for a controller that
 * builds its answer attempt by attempt; errors name fields without the
 * "attempts[i]." prefix. */
int proto_attempt_encode(const struct proto_attempt *m, json_t **ret);
int proto_attempt_decode(const json_t *obj, struct proto_attempt *ret, char *err, size_t errlen);
void proto_attempt_release(struct proto_attempt *m);

/* ---- reports: POST /v1/nodes/NAME/attempts/JOB/ATTEMPT ----------------- */

#define PROTO_STATE_MAP(X)                                                                         \
    X(RUNNING, "RUNNING")                                                                          \
    X(COMPLETED, "COMPLETED")                                                                      \
    X(FAILED, "FAILED")                                                                            \
    X(TIMEOUT, "TIMEOUT")                                                                          \
    X(CANCELLED, "CANCELLED")                                                                      \
    X(PREEMPTED, "PREEMPTED")
enum proto_state {
#define PROTO_STATE_ENUM(name, text) PROTO_STATE_##name,
    PROTO_STATE_MAP(PROTO_STATE_ENUM)
#undef PROTO_STATE_ENUM
};
/* "RUNNING", ...; "unknown" out of range. */
const char *proto_state_name(enum proto_state state);

/* A serving replica's endpoint as its agent sees it ("endpoint" in a
 * RUNNING report; absent for every other job). */
struct proto_endpoint {
    uint32_t port;        /* 1..65535; 0: absent */
    bool ready;           /* the probe's verdict now */
    int64_t metric_milli; /* the spec's metric, thousandths; PROTO_NONE: none or unread */
    int64_t ready_ms;     /* Unix ms it first became ready; PROTO_NONE: not yet */
};

struct proto_report {
    enum proto_state state;
    int64_t exit_code;              /* 0..255; PROTO_NONE: absent */
    int64_t signal;                 /* 0..PROTO_SIGNAL_MAX; PROTO_NONE: absent */
    char *reason;                   /* 0..PROTO_REASON_MAX bytes; NULL: absent */
    char **dirty_gpus;              /* UUIDs still running its processes ("dirty_gpus", written only
                                       when not empty) */
    size_t ndirty;                  /* 0..PROTO_DIRTY_MAX */
    struct proto_endpoint endpoint; /* "endpoint": port 0 when absent */
    bool fenced; /* "fenced": the agent stopped it reaching no controller (written when
                    true; only with state FAILED) */
};

int proto_report_encode(const struct proto_report *m, json_t **ret);
int proto_report_decode(const json_t *obj, struct proto_report *ret, char *err, size_t errlen);
void proto_report_release(struct proto_report *m);

/* ---- routers: GET /v1/router/routes, POST /v1/router/report ------------
 *
 * A router (`gpuorch router`, join token) long-polls the routing table:
 * GET /v1/router/routes?since=REV&wait_ms=N answers at once when the table's
 * revision is past REV, else when it changes or after wait_ms (the same
 * revision, unchanged table). It reports every second, and at once when a
 * service's hold queue goes from empty to not (so that a service at zero
 * starts a replica without waiting for a tick).
 */
#define PROTO_ROUTE_SERVICES_MAX  1000
#define PROTO_ROUTE_ENDPOINTS_MAX 1000
#define PROTO_ROUTE_HOSTS_MAX     16
#define PROTO_ROUTE_KEYS_MAX      64
#define PROTO_KEY_HASH_LEN        64 /* hex digits of SHA-256 */

enum proto_endpoint_state {
    PROTO_ENDPOINT_READY = 0, /* "ready": takes new requests */
    PROTO_ENDPOINT_DRAINING,  /* "draining": finishes what it has, takes nothing new */
};

struct proto_route_endpoint {
    uint32_t replica; /* >= 1 */
    int64_t job;      /* >= 1 */
    int64_t attempt;  /* >= 1 */
    char *addr;       /* the node's address, 1..PROTO_HOST_MAX bytes */
    uint32_t port;    /* 1..65535 */
    enum proto_endpoint_state state;
};

struct proto_route_service {
    char *name;        /* 1..PROTO_SPEC_NAME_MAX bytes */
    char *model;       /* the OpenAI "model" it answers to: the service's model, else its name */
    char **hosts;      /* Host headers it answers to; NULL-terminated */
    size_t nhosts;     /* 0..PROTO_ROUTE_HOSTS_MAX */
    char **key_hashes; /* SHA-256 hex of its API keys; none: open; NULL-terminated */
    size_t nkeys;      /* 0..PROTO_ROUTE_KEYS_MAX */
    uint32_t concurrency_limit; /* per replica; 0: none */
    uint32_t queue_limit;       /* requests held when no replica can take one, 0..100000 */
    int64_t queue_timeout_ms;   /* how long one is held, 1..3600000 */
    struct proto_route_endpoint *endpoints;
    size_t nendpoints; /* 0..PROTO_ROUTE_ENDPOINTS_MAX */
};

struct proto_routes {
    int64_t rev; /* >= 0: the next poll's since= */
    struct proto_route_service *services;
    size_t nservices; /* 0..PROTO_ROUTE_SERVICES_MAX */
};

int proto_routes_encode(const struct proto_routes *m, json_t **ret);
int proto_routes_decode(const json_t *obj, struct proto_routes *ret, char *err, size_t errlen);
void proto_routes_release(struct proto_routes *m);

struct proto_load_replica {
    int64_t job, attempt; /* >= 1 */
    uint32_t inflight;    /* now */
    uint32_t requests;    /* arrived during the interval */
};

/* Answers by total latency (arrival at the router to the answer's end), in
 * buckets: [0] up to proto_latency_bounds_s[0], [k] up to bound k, the last
 * above every bound. The router's /metrics histogram has the same bounds. */
#define PROTO_LATENCY_BUCKETS 15
extern const double proto_latency_bounds_s[PROTO_LATENCY_BUCKETS - 1];

struct proto_load_service {
    char *name;                /* 1..PROTO_SPEC_NAME_MAX bytes */
    int64_t concurrency_milli; /* mean of in flight + held over the interval, thousandths */
    uint32_t inflight, queued; /* now */
    uint32_t requests;         /* arrived during the interval */
    /* "latency_counts" (optional: older routers send none): the answers that
     * ended during the interval, by bucket */
    bool has_latency;
    uint32_t latency[PROTO_LATENCY_BUCKETS];
    struct proto_load_replica *replicas;
    size_t nreplicas; /* 0..PROTO_ROUTE_ENDPOINTS_MAX */
};

struct proto_router_report {
    char *router;        /* the router's name, 1..PROTO_HOST_MAX bytes */
    int64_t interval_ms; /* what the counts cover, 1..60000 */
    struct proto_load_service *services;
    size_t nservices; /* 0..PROTO_ROUTE_SERVICES_MAX */
};

int proto_router_report_encode(const struct proto_router_report *m, json_t **ret);
int proto_router_report_decode(const json_t *obj, struct proto_router_report *ret, char *err,
                               size_t errlen);
void proto_router_report_release(struct proto_router_report *m);

#endif

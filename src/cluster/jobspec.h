/*
 * jobspec.h - a job submission as the API takes it: validation, defaults and
 * JSON both ways.
 *
 * POST /v1/jobs carries one JSON object. jobspec_decode checks every field
 * (unknown fields, types, ranges, lengths, UTF-8: see util/jsonv.h) and the
 * rules between fields, and fills a struct jobspec; jobspec_to_json gives the
 * object back as the API shows it (every field, defaults included). Names
 * (team, priority class, pool, GPU type) are only checked for shape here:
 * whether they exist is the server's business, with its configuration. A
 * MIG profile is checked against core/mig.h's catalogue (jobspec_mig.c).
 *
 * The request fields follow the scheduler core's struct sched_job:
 *   "gpus": N           N whole GPUs (0..1024), or a fraction in (0, 1) with at
 *                       most three decimals (0.25 = 250 milli-GPU on one GPU);
 *   "gpu_mem_mib": M    or a share of one GPU by memory (MiB), instead of gpus;
 *   "mig_profile": P    or one MIG instance of profile P ("1g.10gb"; docs/mig.md):
 *                       a profile some GPU type of the catalogue has (the one
 *                       gpu_type names, when given), kept in its canonical
 *                       spelling ("MIG 1g.10gb", "mig-1g.10gb": "1g.10gb");
 *                       one instance per job: not beside gpus, gpu_mem_mib,
 *                       min_gpu_mem_mib, GPUs per node or task, nodes > 1,
 *                       multi_node or exclusive; jobspec_to_json writes it
 *                       only when set;
 *   "min_gpu_mem_mib"   each GPU used has at least this much memory;
 *   "gpu_type", "pool"  names, or absent for any;
 *   "cpus", "mem_mib"   per job (default 1 CPU, 1024 MiB);
 *   "time_limit_s"      0: none (the policy's default limit is assumed);
 *   "multi_node"        a gang over several nodes is allowed;
 *   "checkpointable"    the job can resume after preemption.
 * On top: what runs ("command" as argv, or "script" text: exactly one),
 * "workdir" (absolute), "env" (name -> value), "max_retries", "requeue" (on
 * preemption), "dependencies" ([{"type": "afterok"|"afterany", "job": ID}]),
 * "array" ("0-99%8", Slurm's syntax), "name", "team", "project", "model",
 * "priority" (a class name), "output"/"error" (log paths on the node).
 *
 * Slurm's job shape (jobspec_shape.c), per node or per task as sbatch's
 * options are; the totals above follow from them, and a total given as well
 * must agree (so jobspec_to_json's output decodes to the same spec):
 *   "nodes": N            exactly N nodes (a gang when N > 1: GPUs, CPUs and
 *                         memory are spread evenly, so totals divide by N);
 *   "gpus_per_node"       GPUs on each node (--gres=gpu:N, --gpus-per-node);
 *   "ntasks", "ntasks_per_node", "cpus_per_task", "gpus_per_task": tasks
 *                         (default one per node), CPUs = cpus_per_task x
 *                         tasks, GPUs = gpus_per_task x tasks;
 *   "mem_per_node_mib", "mem_per_cpu_mib", "mem_per_gpu_mib": memory as
 *                         --mem, --mem-per-cpu, --mem-per-gpu (one of them);
 *   "mem_whole_node"      --mem=0: every node's whole memory;
 *   "exclusive"           whole nodes: every GPU, CPU and MiB of each;
 *   "constraint"          node features: "a", "a&b", "a|b" (no brackets);
 *   "signal"              "[B:]SIG[@SECS]": SIG (a name or number) SECS
 *                         (default 60) before the time limit, to the batch
 *                         shell only with "B:";
 *   "open_mode"           "truncate" (default) or "append" for output/error;
 *   "launch"              "every_node" (default: the program on every node
 *                         of a gang) or "first_node" (sbatch: the script on
 *                         the first node, which launches steps);
 *   "submit_dir"          where it was submitted (SLURM_SUBMIT_DIR);
 *   "hold"                submitted held; "begin": not before this Unix time.
 * A service's replica has "serve" (struct jobspec_serve): jobspec_to_json
 * writes it when set, jobspec_decode_stored reads it, and jobspec_decode
 * (POST /v1/jobs) refuses it: only the controller makes replicas.
 *
 * Ownership: every pointer in a struct jobspec is owned by it;
 * jobspec_release frees them. Errors: 0 or GPO_EINVAL / GPO_ENOMEM (negative errno
 * values), with one line naming the field in the caller's buffer.
 */
#ifndef GPUORCH_CLUSTER_JOBSPEC_H
#define GPUORCH_CLUSTER_JOBSPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define JOBSPEC_NAME_MAX      128  /* name, team, project, model, priority, pool, gpu_type */
#define JOBSPEC_ARGV_MAX      1024 /* command arguments */
#define JOBSPEC_ARG_MAX       4096 /* bytes of one argument */
#define JOBSPEC_SCRIPT_MAX    (1u << 20)
#define JOBSPEC_PATH_MAX      4096
#define JOBSPEC_ENV_MAX       256 /* variables */
#define JOBSPEC_ENV_VALUE_MAX 32768
#define JOBSPEC_DEPS_MAX      64
#define JOBSPEC_ARRAY_MAX     10000 /* tasks in one array */
#define JOBSPEC_GPUS_MAX      1024
#define JOBSPEC_RETRIES_MAX   100

enum jobspec_dep_type {
    JOBSPEC_AFTEROK = 0, /* start once the job COMPLETED; never if it failed */
    JOBSPEC_AFTERANY,    /* start once the job ended, however */
};

struct jobspec_dep {
    enum jobspec_dep_type type;
    int64_t job;
};

struct jobspec_env {
    char *name;
    char *value;
};

/* An array: the task indices (sorted, distinct) and the cap on running tasks
 * (0: none). */
struct jobspec_array {
    uint32_t *index;
    size_t n;
    uint32_t max_running;
};

enum jobspec_open_mode {
    JOBSPEC_TRUNCATE = 0,
    JOBSPEC_APPEND,
};

enum jobspec_launch {
    JOBSPEC_EVERY_NODE = 0, /* the program on every node of a gang */
    JOBSPEC_FIRST_NODE,     /* on the first node; the others wait for steps */
};

#define JOBSPEC_TASKS_MAX      65536
#define JOBSPEC_CONSTRAINT_MAX 1024
#define JOBSPEC_BEGIN_MAX      INT64_C(253402300799) /* 9999-12-31T23:59:59Z */

/* A serving replica's part ("serve"; cluster/service.c's replicas only: POST
 * /v1/jobs refuses it). proto.h's struct proto_serve says what each means. */
struct jobspec_serve {
    char *service; /* NULL: not a replica */
    uint32_t replica;
    uint64_t generation;
    char *probe_path;
    int64_t probe_period_ms, probe_timeout_ms;
    uint32_t probe_failures;
    int64_t startup_timeout_s;
    char *metric; /* or NULL */
};

struct jobspec {
    char *name; /* default "job" */
    char *team; /* NULL: the submitting user's team */
    char *project, *model;
    char *priority;        /* a class name; NULL: the server's default class */
    char *pool, *gpu_type; /* NULL: any */
    int32_t gpus;          /* whole GPUs */
    int32_t gpu_milli;     /* or a fraction of one (1..999) */
    int32_t cpus;          /* default 1 */
    uint32_t max_retries;  /* default 0 */
    int64_t gpu_mem_mib;   /* or a share of one GPU's memory */
    int64_t min_gpu_mem_mib;
    char *mig_profile;    /* or one MIG instance of this profile ("1g.10gb"); NULL: none */
    int64_t mem_mib;      /* default 1024 */
    int64_t time_limit_s; /* 0: none */
    bool multi_node;
    bool checkpointable;
    char **argv; /* NULL-terminated, or NULL when script is set */
    size_t argc;
    char *script;  /* or NULL */
    char *workdir; /* absolute; NULL: the user's home on the node */
    struct jobspec_env *env;
    size_t nenv;
    bool requeue; /* on preemption (default true) */
    struct jobspec_dep *deps;
    size_t ndeps;
    char *array_text; /* as given ("0-99%8"), or NULL */
    struct jobspec_array array;
    char *output, *error; /* log paths, or NULL for the defaults */
    /* Slurm's shape (0: not given); gpus, cpus and mem_mib are the totals */
    int64_t mem_per_node_mib, mem_per_cpu_mib, mem_per_gpu_mib;
    int64_t begin;                   /* Unix seconds, 0: none */
    char *constraint;                /* node features, or NULL */
    char *submit_dir;                /* absolute, or NULL */
    int32_t nodes;                   /* exactly this many nodes */
    int32_t gpus_per_node;           /* GPUs on each */
    int32_t ntasks, ntasks_per_node; /* tasks of the job, and on each node */
    int32_t cpus_per_task, gpus_per_task;
    int32_t signal;          /* 1..64, 0: none */
    int32_t signal_before_s; /* 0..SIGSPEC_BEFORE_MAX (util/sigspec.h) */
    enum jobspec_open_mode open_mode;
    enum jobspec_launch launch;
    bool mem_whole_node; /* mem_mib is then 0 */
    bool exclusive;
    bool signal_batch_only;
    bool hold;
    struct jobspec_serve serve;
};

/* The tasks a spec asks for: ntasks, or ntasks_per_node on each node, or
 * one per node. */
int32_t jobspec_tasks(const struct jobspec *spec);

/* Fills *ret from a submission object (borrowed). On error *ret is untouched
 * and err names the field. "cpus" and "mem_mib" are at least 1 (Slurm's
 * --mem=0 is "mem_whole_node"). */
int jobspec_decode(const json_t *body, struct jobspec *ret, char *err, size_t errlen);
/* The same for a spec the store holds (jobspec_to_json's), which an earlier
 * version may have accepted with "cpus" or "mem_mib" 0: those load, and
 * reserve nothing. */
int jobspec_decode_stored(const json_t *body, struct jobspec *ret, char *err, size_t errlen);

/* Parses Slurm's array syntax: "0-15", "0,6,16-32", "0-15:4" (step), each
 * optionally followed by "%N" (at most N tasks running). Indices are 0..
 * 4,000,000, at most JOBSPEC_ARRAY_MAX of them, given in any order but
 * distinct. */
int jobspec_array_parse(const char *text, struct jobspec_array *ret, char *err, size_t errlen);

/* The submission as the API shows it: a new object (caller json_decref's), or
 * NULL when out of memory. */
json_t *jobspec_to_json(const struct jobspec *spec);

/* Frees what a serve part owns and zeroes it; NULL is fine. */
void jobspec_serve_release(struct jobspec_serve *serve);

/* A deep copy; 0 or GPO_ENOMEM (*ret untouched). */
int jobspec_copy(const struct jobspec *spec, struct jobspec *ret);

void jobspec_release(struct jobspec *spec);

#endif

/*
 * jobspec.h - a job submission as the API takes it: validation, defaults and
 * JSON both ways.
 *
 * POST /v1/jobs carries one JSON object. jobspec_decode checks every field
 * (unknown fields, types, ranges, lengths, UTF-8: see util/jsonv.h) and the
 * rules between fields, and fills a struct jobspec; jobspec_to_json gives the
 * object back as the API shows it (every field, defaults included). Names
 * (team, priority class, pool, GPU type) are only checked for shape here:
 * whether they exist is the server's business, with its configuration.
 *
 * The request fields follow the scheduler core's struct sched_job:
 *   "gpus": N           N whole GPUs (0..1024), or a fraction in (0, 1) with at
 *                       most three decimals (0.25 = 250 milli-GPU on one GPU);
 *   "gpu_mem_mib": M    or a share of one GPU by memory (MiB), instead of gpus;
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

struct jobspec {
    char *name; /* default "job" */
    char *team; /* NULL: the submitting user's team */
    char *project, *model;
    char *priority;        /* a class name; NULL: the server's default class */
    char *pool, *gpu_type; /* NULL: any */
    int32_t gpus;          /* whole GPUs */
    int32_t gpu_milli;     /* or a fraction of one (1..999) */
    int64_t gpu_mem_mib;   /* or a share of one GPU's memory */
    int64_t min_gpu_mem_mib;
    int32_t cpus;         /* default 1 */
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
    uint32_t max_retries; /* default 0 */
    bool requeue;         /* on preemption (default true) */
    struct jobspec_dep *deps;
    size_t ndeps;
    char *array_text; /* as given ("0-99%8"), or NULL */
    struct jobspec_array array;
    char *output, *error; /* log paths, or NULL for the defaults */
    bool hold;            /* submitted held */
    int64_t begin;        /* Unix seconds before which it is not eligible; 0: none */
};

/* Fills *ret from a submission object (borrowed). On error *ret is untouched
 * and err names the field. "cpus" and "mem_mib" are at least 1 (0 is
 * refused: it is not Slurm's "the whole node" here). */
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

/* A deep copy; 0 or GPO_ENOMEM (*ret untouched). */
int jobspec_copy(const struct jobspec *spec, struct jobspec *ret);

void jobspec_release(struct jobspec *spec);

#endif

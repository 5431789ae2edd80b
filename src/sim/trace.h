/*
 * trace.h - reading a normalized GPU-cluster job trace.
 *
 * The format is ../shared/traces/README.md's:
 *
 *     job_id,submit_time_s,duration_s,num_gpus,user,queue,gpu_type,status
 *
 * one header line, then one job per line, sorted by submit_time_s. A file may
 * be plain text or gzip (zlib reads both through one call). Every field is
 * checked: a bad row is an error naming the file, the line and the field, or,
 * with `skip_bad`, is skipped and counted.
 */
#ifndef GPUORCH_SIM_TRACE_H
#define GPUORCH_SIM_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_NONE UINT32_MAX

/* Caps on what one trace may hold: a bigger input is an error, not a crash. */
#define SIM_TRACE_MAX_JOBS  50000000u
#define SIM_TRACE_MAX_LINE  4096u   /* bytes in one line, newline included */
#define SIM_TRACE_MAX_NAMES 100000u /* distinct queues, and distinct GPU types */
#define SIM_TRACE_MAX_GPUS  100000  /* num_gpus of one job */

struct sim_trace_job {
    const char *id;     /* the row's job_id; owned by the trace */
    int64_t submit_s;   /* submit_time_s, >= 0 */
    int64_t duration_s; /* duration_s, >= 0 */
    /* num_gpus in milli-GPU: a whole count times 1000, or a fraction of one
     * GPU (0 < num_gpus < 1) rounded to the nearest milli, at least 1. A row
     * with a fraction above 1 GPU (1.5) is bad. 0: a CPU-only job. */
    int64_t gpu_milli;
    uint32_t queue;    /* index into trace->queues; an empty field is the name "" */
    uint32_t gpu_type; /* index into trace->gpu_types; SIM_NONE when empty */
    uint32_t line;     /* its line in the file (the header is line 1) */
};

struct sim_trace {
    struct sim_trace_job *jobs; /* in file order, which is submit order */
    size_t njobs;
    char **queues; /* distinct queue names, in order of first appearance */
    size_t nqueues;
    char **gpu_types; /* distinct non-empty gpu_type names, likewise */
    size_t ngpu_types;
    size_t nskipped;      /* bad rows skipped (skip_bad) */
    size_t nfiltered;     /* rows left out by the window */
    char first_skip[256]; /* the message of the first skipped row ("" if none) */
    /* private: the storage the strings above point into */
    struct sim_trace_chunk *chunks;
};

struct sim_trace_opts {
    bool skip_bad; /* skip and count bad rows instead of failing */
    /* Keep only rows with from_s <= submit_time_s < until_s; until_s < 0: no
     * upper bound. Rows left out are counted in nfiltered. */
    int64_t from_s, until_s;
};

/* Zeroes *t (an empty trace). */
void sim_trace_init(struct sim_trace *t);
/* Frees what *t holds; NULL is fine. */
void sim_trace_release(struct sim_trace *t);

/*
 * Loads the trace at `path` into *t (initialised, empty). Returns 0; or
 * GPO_EINVAL for a bad file (no such file, not a trace, a bad row without
 * skip_bad, rows out of submit order), GPO_E2BIG over a cap, GPO_ENOMEM.
 * On error, `err` (errlen bytes, always terminated) holds one line such as
 *     "t.csv:12: num_gpus: expected a number >= 0, got 'x'"
 * and *t is left empty. opts NULL means: no skipping, no window.
 */
int sim_trace_load(struct sim_trace *t, const char *path, const struct sim_trace_opts *opts,
                   char *err, size_t errlen);

#endif

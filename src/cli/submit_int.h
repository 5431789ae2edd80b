/*
 * submit_int.h - private to `gpuorch submit` (submit.c, submit_slurm.c):
 * the plan being built, a flag's table entry, and the setters of Slurm's
 * resource directives that live in submit_slurm.c.
 */
#ifndef GPUORCH_CLI_SUBMIT_INT_H
#define GPUORCH_CLI_SUBMIT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cli/submit.h"
#include "util/opts.h"

/* A plan being built. */
struct build {
    json_t *body;
    const struct submit_env *env;
    int64_t gpu_mem_mib; /* -1: not given */
    const char *wrap;
    struct submit_plan *plan;
};

typedef int (*setter_fn)(struct build *b, const struct submit_flag *f, const char *v, char *err,
                         size_t errlen);

struct submit_flag {
    struct opts_opt opt; /* first: opts_next walks the table; min, max and expect are
                            set_int's range and what a value should look like */
    setter_fn set;       /* NULL: a connection flag, stored in struct submit_args */
    const char *key;     /* the body's key */
    bool on;             /* set_bool: the value it sets */
};

/* Sets key to v (taken; NULL means out of memory). */
int submit_put(struct build *b, const char *key, json_t *v, char *err, size_t errlen);
/* A JSON string of user text (refused unless UTF-8). */
int submit_put_text(struct build *b, const char *key, const char *v, char *err, size_t errlen);
/* "expected EXPECT, got 'V'". */
int submit_bad_value(const struct submit_flag *f, const char *v, char *err, size_t errlen);

/* Slurm's resource directives (submit_slurm.c): sbatch's meaning, as the
 * jobspec's shape fields (cluster/jobspec.h). */
int submit_set_nodes(struct build *b, const struct submit_flag *f, const char *v, char *err,
                     size_t errlen);
int submit_set_gres(struct build *b, const struct submit_flag *f, const char *v, char *err,
                    size_t errlen);
int submit_set_gpus(struct build *b, const struct submit_flag *f, const char *v, char *err,
                    size_t errlen);
int submit_set_gpus_per_task(struct build *b, const struct submit_flag *f, const char *v, char *err,
                             size_t errlen);
int submit_set_gpus_per_node(struct build *b, const struct submit_flag *f, const char *v, char *err,
                             size_t errlen);
int submit_set_mem(struct build *b, const struct submit_flag *f, const char *v, char *err,
                   size_t errlen);
int submit_set_partition(struct build *b, const struct submit_flag *f, const char *v, char *err,
                         size_t errlen);

/* A flag an #SBATCH line may give that changes nothing gpuorch controls
 * (--mail-type, ...): the word's option, or NULL. */
const char *submit_sbatch_ignored(const char *word);
/* The word is --exclusive=VALUE: 0 when not; else GPO_EUSAGE naming the value. */
int submit_exclusive_value(const char *word, char *err, size_t errlen);

#endif

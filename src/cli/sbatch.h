/*
 * sbatch.h - the values of sbatch's flags, read as sbatch reads them and
 * turned into what the API's job submission wants (POST /v1/jobs, see
 * docs/api.md). Pure functions: no I/O; the environment is a parameter.
 *
 * Errors: 0 or GPO_EUSAGE / GPO_ENOMEM (cli.h); the functions that take a
 * caller buffer write one line there that says what was expected.
 */
#ifndef GPUORCH_CLI_SBATCH_H
#define GPUORCH_CLI_SBATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cli/cli.h"

#define SBATCH_SIZE_MAX_MIB  (INT64_C(1) << 40) /* what --mem and --gpu-mem may say */
#define SBATCH_GPUS_MAX      1024
#define SBATCH_ENV_MAX       256   /* variables the API takes */
#define SBATCH_ENV_VALUE_MAX 32768 /* bytes of one value the API takes */

/* Memory as sbatch writes it: a whole number of MiB, or one with a K, M, G or
 * T suffix (any case, optionally followed by "B" or "iB"); K rounds up to
 * whole MiB. 0 and *ret_mib; GPO_EUSAGE (also above SBATCH_SIZE_MAX_MIB). */
int sbatch_parse_size_mib(const char *s, int64_t *ret_mib);

/* GPUs: whole ("2", at most SBATCH_GPUS_MAX) or a fraction below 1 with at
 * most three decimals ("0.25", ".5"), in milli-GPUs. 0 and *ret_milli;
 * GPO_EUSAGE. */
int sbatch_parse_gpus(const char *s, int32_t *ret_milli);

/* Whether s[0..len) is written as a MIG profile: "1g.10gb", with an
 * optional "MIG " or "mig-" prefix and "+me" or ".me" suffix, any case
 * (Slurm's MIG gres type, nvidia-smi's and Kubernetes' spellings). Only
 * the shape: the server checks the name against its catalogue. */
bool sbatch_is_mig_profile(const char *s, size_t len);

/* A time limit in Slurm's formats (util/timefmt.h: "MM", "MM:SS",
 * "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS", "90m", "UNLIMITED"), in
 * seconds; UNLIMITED is 0, the API's "none". 0 and *ret_s; GPO_EUSAGE. */
int sbatch_parse_time(const char *s, int64_t *ret_s);

/* sbatch's --begin (util/timefmt.h's timefmt_parse_begin: "16:00",
 * "now+1hour", "2026-12-24T08:00", "tomorrow", ...) in this machine's local
 * time now, as Unix seconds. 0 and *ret_s; GPO_EUSAGE. */
int sbatch_parse_begin(const char *s, int64_t *ret_s);

/* sbatch's --dependency: "afterok:ID[:ID...][,afterany:ID...]" as the API's
 * "dependencies" array (a new reference in *ret). Other types, '?' (any
 * of) and array tasks (ID_N) are refused with the reason. 0; GPO_EUSAGE;
 * GPO_ENOMEM. */
int sbatch_parse_dependency(const char *s, json_t **ret, char *err, size_t errlen);

/* sbatch's --export: comma-separated ALL (every variable of envp whose name
 * and value the API takes, but GPUORCH_* and CUDA_VISIBLE_DEVICES /
 * NVIDIA_VISIBLE_DEVICES), NONE (nothing given before it), NAME (its value
 * in envp, if set) and NAME=VALUE, as the API's "env" object (a new
 * reference in *ret). 0; GPO_EUSAGE (a bad name, an empty item, more than
 * SBATCH_ENV_MAX variables); GPO_ENOMEM. */
int sbatch_parse_export(const char *s, char *const *envp, json_t **ret, char *err, size_t errlen);

#endif

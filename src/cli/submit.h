/*
 * submit.h - `gpuorch submit`: a job from flags, in Slurm's habits, or from a
 * batch script whose #SBATCH and #GPUORCH directives give the same flags.
 *
 * Three steps, so that tests can run each without a server:
 *  1. submit_args_parse reads the command line: job flags are kept in order,
 *     not applied yet; the script's path or the command after "--" is noted.
 *  2. The caller reads the script (if any).
 *  3. submit_plan_build applies the script's directives, then the command
 *     line's flags (so the command line wins), and gives the POST /v1/jobs
 *     body and the warnings to print: one line per ignored directive, with
 *     its line number; one per directive after the script's first command.
 *
 * #SBATCH directives read, with sbatch(1)'s meaning (submit_slurm.c):
 * --job-name/-J, --output/-o, --error/-e, --time/-t, --nodes/-N (exactly N;
 * a range N-M only when M is N), --gres=gpu[:TYPE][:N] and --gpus-per-node
 * (GPUs on each node), --gpus/-G (in all), --gpus-per-task, --ntasks/-n,
 * (a TYPE that is a MIG profile, gpu:1g.10gb:1, or --gpus 1g.10gb: one MIG
 * instance, "mig_profile"; a count other than 1 is refused),
 * --ntasks-per-node, --cpus-per-task/-c, --mem (per node; 0: the whole
 * node), --mem-per-cpu, --mem-per-gpu, --exclusive (not =user, =mcs,
 * =topo), --constraint/-C, --array/-a, --dependency/-d, --partition/-p (one
 * pool or alias; not a list), --qos (priority class), --account/-A (team),
 * --chdir/-D, --export, --requeue, --no-requeue, --parsable. --mail-type,
 * --mail-user, --comment, --wckey, --profile, --acctg-freq, -v/--verbose and
 * -Q/--quiet change nothing gpuorch controls: a warning names them as
 * ignored. Any other directive is an error with its file and line, as sbatch
 * refuses an unknown option. #GPUORCH lines take every flag of the command
 * line but the connection flags, --idempotency-key and --wrap.
 *
 * Ownership: struct submit_args borrows argv; struct submit_plan owns its
 * body, key and warnings (submit_plan_release). Errors: 0 or GPO_EUSAGE /
 * GPO_ENOMEM (cli.h) with one line in the caller's buffer.
 */
#ifndef GPUORCH_CLI_SUBMIT_H
#define GPUORCH_CLI_SUBMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cli/cli.h"

#define SUBMIT_SIZE_MAX_MIB  (INT64_C(1) << 40) /* what --mem and --gpu-mem may say */
#define SUBMIT_GPUS_MAX      1024
#define SUBMIT_ENV_MAX       256   /* variables the API takes */
#define SUBMIT_ENV_VALUE_MAX 32768 /* bytes of one value the API takes */
#define SUBMIT_SCRIPT_MAX    (1u << 20)

/* Where a flag may be given (struct opts_opt's `where` bits). */
enum submit_where {
    SUBMIT_WHERE_CLI = 1 << 0,     /* the command line */
    SUBMIT_WHERE_GPUORCH = 1 << 1, /* a #GPUORCH line */
    SUBMIT_WHERE_SBATCH = 1 << 2,  /* an #SBATCH line */
};

/* ---- the command ---- */

struct submit_flag; /* an entry of submit.c's flag table */

struct submit_pair {
    const struct submit_flag *flag;
    const char *value; /* NULL for a flag without one */
};

/* The command line, read; everything borrowed from argv. */
struct submit_args {
    struct cli_common co;
    struct submit_pair *pairs; /* job flags in command-line order (owned array) */
    size_t npairs;
    const char *script; /* the script's path ("-": stdin), or NULL */
    char **command;     /* the words after "--", or NULL */
    size_t ncommand;
    char **script_args; /* words after the script's path (refused), or NULL */
    size_t nscript_args;
};

/* Reads argv (argv[0] is "submit"). 0 and *ret (release with
 * submit_args_release); GPO_EUSAGE (an unknown flag, a value missing);
 * GPO_ENOMEM. */
int submit_args_parse(int argc, char **argv, struct submit_args *ret, char *err, size_t errlen);
void submit_args_release(struct submit_args *a);

/* What a plan may read of the caller's world. */
struct submit_env {
    const char *cwd;   /* the default workdir, and the base of a relative one */
    char *const *envp; /* for --export */
};

struct submit_plan {
    json_t *body;          /* POST /v1/jobs */
    char *idempotency_key; /* or NULL */
    bool parsable;         /* print only the id */
    char **warnings;       /* one line each ("job.sh:4: ..."), for stderr */
    size_t nwarnings;
};

/*
 * Builds the submission from `a` and the script text (len bytes, named
 * script_name in messages; NULL when a->script is NULL). 0 and *ret (release
 * with submit_plan_release); GPO_EUSAGE with the flag (and the script's
 * file and line) named; GPO_ENOMEM.
 */
int submit_plan_build(const struct submit_args *a, const char *script, size_t len,
                      const char *script_name, const struct submit_env *env,
                      struct submit_plan *ret, char *err, size_t errlen);
void submit_plan_release(struct submit_plan *p);

/* `gpuorch submit`: exit codes as cli.h. */
int submit_command(int argc, char **argv);

#endif

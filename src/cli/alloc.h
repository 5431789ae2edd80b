/*
 * alloc.h - `gpuorch alloc` (Slurm's salloc), and the allocation that it
 * and `gpuorch run` outside a job make.
 *
 * An allocation is a job of the caller's that holds GPUs on its nodes and
 * runs nothing of its own: its first node runs `sleep infinity` (launch
 * first_node), the others hold (agent/steps.h). alloc_acquire submits it,
 * prints "gpuorch CMD: job N queued and waiting for resources" (and the
 * reason, each time it changes) while it is pending, as srun and salloc
 * do, and returns once it runs, with what a step needs (GET
 * /v1/jobs/ID/step); alloc_export puts that into this process's
 * environment, as the agent does for a batch script, so that `gpuorch
 * run` finds it; alloc_release cancels the job.
 *
 * `gpuorch alloc [flags] [CMD [ARGS...]]` then runs CMD, or $SHELL (else
 * /bin/sh), here (salloc's default: the shell on the host it runs on;
 * `gpuorch run` in it reaches the nodes), waits for it, releases the
 * allocation, and exits with its status. SIGINT, SIGTERM or SIGHUP while
 * it waits for resources cancel the request.
 */
#ifndef GPUORCH_CLI_ALLOC_H
#define GPUORCH_CLI_ALLOC_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "cli/cli.h"

/* What an allocation asks for (0 / NULL: not given). */
struct alloc_flags {
    int64_t nodes, gpus_per_node, gpus, ntasks, ntasks_per_node, gpus_per_task, time_s;
    const char *pool, *name;
    const char *gpus_text;   /* -G/--gpus as given: alloc_gpus_parse reads it */
    const char *mig_profile; /* or one MIG instance of this profile ("1g.10gb") */
};

/* -G/--gpus GPUS of `gpuorch alloc` and `gpuorch run`: whole GPUs in all
 * (1..1024) into f->gpus, or a MIG profile ("1g.10gb", cli/sbatch.h's
 * shape) into f->mig_profile: one instance (docs/mig.md). NULL: not given.
 * 0, or GPO_EUSAGE with what was expected. */
int alloc_gpus_parse(const char *text, struct alloc_flags *f, char *err, size_t errlen);

struct alloc {
    struct cli c;
    int64_t job;  /* 0: none submitted */
    json_t *step; /* GET /v1/jobs/ID/step's answer, once it runs */
};

/*
 * Submits the allocation as `cmd` ("run", "alloc": for messages) and waits
 * until its step servers answer, or *stop (a signal's number) is set: the
 * job is then cancelled. Returns 0 with *ret (release with alloc_release,
 * also after a failure), or the exit status after printing why.
 */
int alloc_acquire(const char *cmd, const struct alloc_flags *f, const struct cli_common *co,
                  const volatile sig_atomic_t *stop, struct alloc *ret);

/* GPUORCH_JOB_ID, GPUORCH_ATTEMPT, GPUORCH_NODELIST, GPUORCH_STEP_KEY,
 * GPUORCH_STEP_ADDRS, GPUORCH_NTASKS, GPUORCH_NTASKS_PER_NODE,
 * GPUORCH_GPUS_PER_TASK and SLURM_JOB_ID from a's step: 0 or GPO_ENOMEM. */
int alloc_export(const struct alloc *a);

/* Cancels the job (if any) and disconnects; prints a failure. */
void alloc_release(const char *cmd, struct alloc *a);

int alloc_command(int argc, char **argv);

#endif

/*
 * jobs.h - the user commands about jobs, as squeue, scontrol show job,
 * scancel and a log reader would have them:
 *
 *   gpuorch queue [-t S,...] [-A T] [-u U | --me] [-j JOB,...] [-p POOL,...]
 *                 [--all] [-r] [-h] [-o FORMAT] [--json]        (queue.c)
 *       JOBID NAME USER TEAM STATE TIME GPUS NODES REASON, one row a line,
 *       as squeue shows them: the pending tasks of an array in one row
 *       (41_[5-20%4]) unless -r; -o takes squeue's %-fields (slurm.h).
 *       REASON is why a pending job waits, the nodes of a running one, and
 *       why an ended one ended. Pending and running jobs unless --state or
 *       --all; every page of GET /v1/jobs is read; --json is the API's jobs,
 *       one per task.
 *   gpuorch show JOB [--json]
 *       every field a user cares about: resources, why it waits and when it
 *       should start, the current attempt and every attempt so far.
 *   gpuorch cancel [JOB...] [-u U | --me] [-n NAME] [-t S] [-A T] [-p P] [-Q]
 *       (cancel.c) as scancel: each job named (an array's id: its live tasks
 *       too; 41_7: one task), or every live job the filters select, each
 *       once; one line per job; 1 if any could not be cancelled.
 *   gpuorch logs JOB [-f] [--stderr] [--attempt N] [--rank R]
 *       the attempt's stdout (or stderr) as the node wrote it; -f follows it
 *       until the attempt ends.
 *   gpuorch whoami [--json]
 *       the token's user, role and team, and the server.
 *
 * Each returns an exit code as cli.h says; argv[0] is the command's name.
 */
#ifndef GPUORCH_CLI_JOBS_H
#define GPUORCH_CLI_JOBS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

int jobs_queue_command(int argc, char **argv);
int jobs_show_command(int argc, char **argv);
int jobs_cancel_command(int argc, char **argv);
int jobs_logs_command(int argc, char **argv);
int jobs_whoami_command(int argc, char **argv);

/* Shared by queue and show. What a job's spec (borrowed) asks of GPUs:
 * "2", "H100-80GB:2", "0.25", "mem:10G", "1g.10gb" (a MIG instance); into
 * buf, returned. */
const char *jobs_gpus_text(const json_t *spec, char *buf, size_t len);
/* "35m", "2h", "40s", "3d": a stretch of ms milliseconds, for a column. */
void jobs_span_text(int64_t ms, char *buf, size_t len);

#endif

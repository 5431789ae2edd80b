/*
 * jobs.h - the user commands about jobs, as squeue, scontrol show job,
 * scancel and a log reader would have them:
 *
 *   gpuorch queue [--state S,...] [--team T] [--user U | --me] [--all] [--json]
 *       JOBID NAME USER TEAM STATE TIME GPUS NODES REASON, one job a line;
 *       REASON is why a pending job waits, the nodes of a running one, and
 *       why an ended one ended. Pending and running jobs unless --state or
 *       --all; every page of GET /v1/jobs is read.
 *   gpuorch show JOB [--json]
 *       every field a user cares about: resources, why it waits and when it
 *       should start, the current attempt and every attempt so far.
 *   gpuorch cancel JOB...
 *       each job in turn; one line per job; 1 if any could not be cancelled.
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

int jobs_queue_command(int argc, char **argv);
int jobs_show_command(int argc, char **argv);
int jobs_cancel_command(int argc, char **argv);
int jobs_logs_command(int argc, char **argv);
int jobs_whoami_command(int argc, char **argv);

#endif

/*
 * run.h - `gpuorch run` (Slurm's srun): a job step inside an allocation.
 *
 * Run from a job's program (a batch script on its first node), it reads
 * the allocation from the environment the agent gave that program
 * (GPUORCH_JOB_ID, GPUORCH_ATTEMPT, GPUORCH_NODELIST, GPUORCH_STEP_KEY,
 * GPUORCH_STEP_ADDRS, GPUORCH_NTASKS, GPUORCH_NTASKS_PER_NODE,
 * GPUORCH_GPUS_PER_TASK), lays the step's tasks out over the nodes (block
 * distribution: node i gets tasks F..F+L-1), asks each node's agent to
 * start its tasks (agent/steps.h: POST /v1/steps/JOB/ATTEMPT, one thread
 * per node), prints their output as it comes (with -l, each line after its
 * task's rank and ": "), and exits 0 only when every task exited 0. A task
 * that did not: "gpuorch run: task 1 (node n2): exited with status 3" on
 * stderr, and the exit status is the highest of the tasks' (128+N for a
 * task killed by signal N, 1 for a task that never started or was lost).
 * SIGINT, SIGTERM or SIGHUP end the step: the connections close, and each
 * agent ends the tasks it started.
 *
 * With --pty: one task (on the first node, or -w NODE's) on a
 * pseudo-terminal there, interactive (runpty.h).
 */
#ifndef GPUORCH_CLI_RUN_H
#define GPUORCH_CLI_RUN_H

#include <signal.h>
#include <stddef.h>

int run_command(int argc, char **argv);

/*
 * In an allocation (its variables in this process's environment, as
 * alloc_export sets them): argv[0..argc) as one interactive task on the
 * allocation's first node (`gpuorch run --pty`, runpty.h), for `gpuorch
 * alloc`'s shell. cmd names the command in messages; *stop is the
 * caller's signal flag. The task's exit status, or as runpty_run.
 */
int run_shell(const char *cmd, char **argv, size_t argc, const volatile sig_atomic_t *stop);

#endif

/*
 * slurmenv.h - the Slurm environment of a task, as sbatch(1) ("OUTPUT
 * ENVIRONMENT VARIABLES") and srun(1) set it, so that scripts written for
 * Slurm read what they expect: SLURM_JOB_ID, SLURM_JOB_NODELIST in Slurm's
 * compressed form (`node[01-02]`), SLURM_NNODES, SLURM_NTASKS,
 * SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_TASKS_PER_NODE
 * (`8(x2)`), the CPUs, GPUs and memory of the allocation, the array's ids,
 * and the step's variables for a task of a step.
 *
 * Where gpuorch's job has the thing Slurm names: the job's own id (an array
 * task's too; SLURM_ARRAY_JOB_ID is its array's first task), its name, the
 * pool it runs in (SLURM_JOB_PARTITION), its team (SLURM_JOB_ACCOUNT), its
 * priority class (SLURM_JOB_QOS), its Unix user, the cluster's name
 * ("gpuorch"). A variable whose thing gpuorch does not have, or the job did
 * not ask for (SLURM_CPUS_PER_TASK without --cpus-per-task, as in Slurm),
 * is not set.
 *
 * The list, its order and its values are pinned by
 * tests/unit/test_agent_slurmenv.c; docs/user-guide.md lists every
 * variable ("The Slurm environment").
 *
 * Nothing here logs; errors are 0 or a GPO_* code.
 */
#ifndef GPUORCH_AGENT_SLURMENV_H
#define GPUORCH_AGENT_SLURMENV_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/launch.h"
#include "proto/proto.h"

/* The cluster's name in SLURM_CLUSTER_NAME. */
#define SLURMENV_CLUSTER "gpuorch"

/* One task of an attempt on this node. */
struct slurmenv_task {
    uint32_t procid;  /* SLURM_PROCID: the task's rank in the job (or step) */
    uint32_t localid; /* SLURM_LOCALID: its rank on this node */
    uint32_t ntasks;  /* SLURM_NTASKS (and SLURM_STEP_NUM_TASKS in a step) */
    int64_t step;     /* SLURM_STEP_ID; -1: the batch step (no step variables) */
};

/*
 * Appends the Slurm variables for task t of attempt a on this node to env,
 * each "NAME=VALUE". cfg, a and t are borrowed. The nodes are a's gang (in
 * rank order; this node is gang.rank), or this node alone when a has no
 * gang. A step's tasks are spread over every node of the gang in blocks,
 * as srun's default distribution does (the first ntasks % nnodes nodes take
 * one more). Returns 0, GPO_EINVAL (t->ntasks 0, t->procid not below it,
 * a node name the host-list syntax cannot hold), GPO_ENOMEM; on failure
 * env may hold some of the variables (the caller releases it anyway).
 */
int slurmenv_add(const struct launch_config *cfg, const struct proto_attempt *a,
                 const struct slurmenv_task *t, struct launch_strv *env);

/* The task the agent's own launch of attempt a is on this node: the batch
 * step's, one process per node standing for the node's first task. */
struct slurmenv_task slurmenv_batch_task(const struct proto_attempt *a);

/* Whether the job's own env may not set `name`: SLURM_* and SLURMD_*
 * names, which slurmenv_add sets. */
bool slurmenv_reserved(const char *name);

#endif

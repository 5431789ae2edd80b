/*
 * launch.h - what one attempt runs with: its command (argv, or a script
 * written to a file), its environment, its GPUs' visibility, its output
 * paths and limits, as the request priv_launch takes.
 *
 * The environment is the job's own "env" and then what gpuorch sets, which
 * wins: GPUORCH_JOB_ID, GPUORCH_ATTEMPT and GPUORCH_NODE first (so that a
 * process's /proc/PID/environ names its attempt early, for sampler.h), the
 * GPUs (CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, GPUORCH_GPUS by UUID,
 * GPUORCH_GPU_MILLI for a share of one GPU), an array task's ids, the
 * gang's (GPUORCH_NODELIST, WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT,
 * ...), Slurm's (slurmenv.h; the batch step's task,
 * slurmenv_batch_task), and a serving replica's (replica_env: PORT, which
 * its own env cannot set either). The job cannot set GPUORCH_*, the two
 * *_VISIBLE_DEVICES, or a Slurm variable that slurmenv sets; its other
 * SLURM_* names pass, as they do through sbatch's exported environment. GPU visibility is one
 * function here (launch.c's gpu_env): it is where MIG instances and MPS limits go.
 *
 * Output paths get sbatch's patterns filled in: %j and %J the job id, %A
 * the array's id (else the job's), %a the array index (else 0), %x the
 * job's name, %u its user, %N this node, %% a '%'; other % sequences stay
 * as written, and a path that would not fit is kept unexpanded. As sbatch
 * does, an output path without an error path takes both streams, and the
 * files are truncated when each attempt starts (a requeued one's too)
 * unless the spec's open_mode is append.
 *
 * Nothing here logs; errors are 0 or a GPO_* code with one line in err.
 */
#ifndef GPUORCH_AGENT_LAUNCH_H
#define GPUORCH_AGENT_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/journal.h"
#include "agent/priv.h"
#include "gpu/gpu.h"
#include "proto/proto.h"

struct launch_config {
    const char *node;      /* this node's name (borrowed) */
    const char *state_dir; /* the agent's state directory (borrowed) */
    bool as_root;          /* the agent runs as root: jobs run as their unix_user */
    /* The node's GPUs by NVML index: gpu_uuids[i] is GPU i's UUID (borrowed;
     * NULL: not known, and SLURM_JOB_GPUS is not set). */
    const char *const *gpu_uuids;
    size_t ngpu_uuids;
    uint32_t port; /* a serving replica's (replica.h): PORT and its names; 0: none */
};

/* The node's GPU UUIDs by NVML index, for launch_config's gpu_uuids. */
struct launch_gpus {
    char **uuids; /* NULL until read */
    size_t n;
};

/* Reads the table from b (borrowed) once: later calls keep the first
 * table. A GPU that cannot describe itself has "" (no share matches it);
 * out of memory leaves the table unread (SLURM_JOB_GPUS is then not set). */
void launch_gpus_read(struct launch_gpus *g, const struct gpu_backend *b);
void launch_gpus_release(struct launch_gpus *g);

/* A growing list of strings, NULL-terminated (v is NULL while n is 0). */
struct launch_strv {
    char **v;
    size_t n, cap;
};

/* Appends one formatted string: 0 or GPO_ENOMEM (the list unchanged). */
int launch_strv_add(struct launch_strv *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Frees the strings and the array, and zeroes s. */
void launch_strv_release(struct launch_strv *s);

/* A launch request and the memory it points into. */
struct launch {
    struct priv_launch req; /* pointers into the members below and into the attempt */
    struct launch_strv argv, env;
    char script_path[JOURNAL_PATH_MAX];
    char out_path[JOURNAL_PATH_MAX], err_path[JOURNAL_PATH_MAX];
};

/*
 * Fills *ret for run attempt `a` (borrowed: ret->req points into it, so it
 * must outlive ret). A script job's script is written first to
 * STATE/scripts/JOB.ATTEMPT (mode 0700, the agent's own; the launch gives
 * it to the job's user: priv_launch's `script`), so that its #! line picks
 * the interpreter. Returns 0
 * (release *ret with launch_release), GPO_EINVAL (no command and no
 * script), GPO_ENOMEM, or the failed call's -errno (the script's file).
 */
int launch_prepare(const struct launch_config *cfg, const struct proto_attempt *a,
                   struct launch *ret, char *err, size_t errlen);
void launch_release(struct launch *l);

#endif

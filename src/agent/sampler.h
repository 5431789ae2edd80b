/*
 * sampler.h - what the agent tells the controller about its GPUs: the
 * inventory it registers, the figures of each heartbeat, and which GPUs an
 * ended attempt still occupies (dirty GPUs).
 *
 * Processes are tied to attempts by their environment: the agent starts
 * every command with GPUORCH_JOB_ID and GPUORCH_ATTEMPT set, and a process
 * NVML lists on a GPU carries them in /proc/PID/environ. Only root reads
 * other users' environments, so with a privileged half (priv, may be NULL)
 * the reading is its attribute request (priv_attribute), which also names
 * only attempts this node launched; without one (--probe) /proc is read
 * directly. A process whose environment cannot be read counts as no
 * attempt's.
 *
 * The inventory and the samples are the protocol's own messages (proto.h),
 * filled here and encoded by the caller. Errors are 0 or a GPO_* code with
 * a message in err; nothing here logs or exits.
 */
#ifndef GPUORCH_AGENT_SAMPLER_H
#define GPUORCH_AGENT_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent/priv.h"
#include "gpu/gpu.h"
#include "proto/proto.h"

/* Slices of a MIG-capable GPU (A100, H100, H200: seven compute slices). */
#define SAMPLER_MIG_SLICES 7

/*
 * The node's GPUs as PUT /v1/nodes/{name} takes them, into reg->gpus and
 * reg->ngpus (whatever they held is not freed; reg owns the new ones, and
 * proto_register_release frees them): index, UUID, GPU type, memory, MIG
 * slices, mode (now and after the next reset) and, in MIG mode, instances
 * (sampler_mig_instances; left empty when they cannot be read: the
 * heartbeats carry them too), and nvlink_domain, the lowest index of the GPUs its
 * NVLinks reach (directly or through others), -1 for a GPU without NVLink.
 * 0, the GPU layer's code, or GPO_ENOMEM, with err.
 */
int sampler_inventory(const struct gpu_backend *b, struct proto_register *reg, char *err,
                      size_t errlen);

/*
 * A GPU's MIG instances as the protocol lists them (proto.h), from what
 * gpu_mig_read found (borrowed): each GPU instance's profile id, start slot
 * and id, and its first compute instance's id and MIG UUID (gpuorch makes
 * one spanning each; none yet: ci_id PROTO_NONE, uuid NULL). *ret (NULL
 * when there is none; free with proto's rules: each uuid, then the array)
 * and *ret_n. 0 or GPO_ENOMEM.
 */
int sampler_mig_instances(const struct gpu_mig *m, struct proto_mig_instance **ret, size_t *ret_n);
/* Frees what sampler_mig_instances made; NULL is fine. */
void sampler_mig_instances_free(struct proto_mig_instance *v, size_t n);

/*
 * One sample of every GPU, as the heartbeat carries it, into hb->gpus and
 * hb->ngpus (owned by hb as above): the figures, PROTO_NONE where the GPU
 * reports none, and each process with its memory and, when it is an
 * attempt's, the job and attempt (a process on a MIG device is listed by
 * its parent GPU, and attributed the same way), and for a MIG-capable GPU
 * its MIG mode and instances (mig_known; a GPU whose MIG state cannot be
 * read has mig_known false). A GPU that fails to sample gets its error
 * instead of figures. 0 or GPO_ENOMEM.
 */
int sampler_sample(const struct gpu_backend *b, struct priv *p, struct proto_heartbeat *hb);

/* The attempt a process belongs to, from its environment: true with *job and
 * *attempt, false when it is no attempt's or cannot be read. */
bool sampler_proc_attempt(pid_t pid, uint64_t *job, uint32_t *attempt);

/*
 * Which of the GPUs `uuids` (n of them, borrowed) still run a process of
 * attempt (job, attempt): sets dirty[i] for each. Returns the number of dirty
 * GPUs, or a negative GPU_* code when a GPU could not be sampled (dirty[] is
 * then unchanged for it and the GPU counts as dirty: a GPU we cannot see is
 * not known to be clean; so is one whose processes could not be attributed).
 * A UUID this node does not have is skipped.
 */
int sampler_attempt_dirty(const struct gpu_backend *b, struct priv *p, const char *const *uuids,
                          size_t n, uint64_t job, uint32_t attempt, bool *dirty);

#endif

/*
 * mps.h - fractional jobs held to their share with CUDA MPS (a pool with
 * `sharing: mps`: the attempt's "mps"; docs/mps.md).
 *
 * An attempt with mps and a share below one GPU (milli < 1000, not a MIG
 * instance) runs as a client of that GPU's MPS control daemon: one daemon
 * per GPU, started by the privileged half (priv_mps) before the first such
 * attempt of the GPU launches and told to quit once the last one has ended
 * (its GPU checked: attempts.h's PH_ENDING), whichever user each belongs
 * to; after an agent restart, the first answer counts the clients again
 * and mps_sweep quits the daemons left with none. NVIDIA's daemon runs one
 * user's MPS server per GPU at a time: a
 * client of another user waits, inside its own CUDA initialization, until
 * the current server's clients are done; the agent never waits for it.
 * A whole-GPU attempt of such a pool, and any attempt of another pool, is
 * not touched.
 *
 * Each client gets CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY (the
 * daemon's, STATE_DIR/mps/UUID/pipe and .../log), CUDA_MPS_ACTIVE_THREAD_
 * PERCENTAGE = ceil(milli / 10) and, when its share has memory,
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=<mem_mib>M" (device 0: the client
 * sees only its GPU, CUDA_VISIBLE_DEVICES=UUID); the job's own env may not
 * set these.
 *
 * struct mps counts references per GPU; it has no lock of its own: the
 * attempt table's lock guards it (every call is made under it).
 */
#ifndef GPUORCH_AGENT_MPS_H
#define GPUORCH_AGENT_MPS_H

#include <stdbool.h>
#include <stddef.h>

#include "agent/launch.h"
#include "agent/priv.h"
#include "proto/proto.h"

/* The GPU (its UUID, borrowed from a) whose MPS daemon attempt a is a
 * client of, or NULL when it is none's. */
const char *mps_gpu(const struct proto_attempt *a);

/* Whether the job's own env may not set `name` for attempt a (gpuorch sets
 * it: CUDA_MPS_* of an MPS client). */
bool mps_reserved(const struct proto_attempt *a, const char *name);

/* Adds the client's variables (above) for attempt a to env, nothing when
 * mps_gpu(a) is NULL; state_dir is the agent's. 0 or GPO_ENOMEM. */
int mps_env(const char *state_dir, const struct proto_attempt *a, struct launch_strv *env);

struct mps;

/* 0 and *ret (mps_free), or GPO_ENOMEM; priv is borrowed, state_dir
 * (the agent's) copied. */
int mps_new(struct priv *priv, const char *state_dir, struct mps **ret);
/* Frees the counts; daemons keep running (as jobs do when the agent
 * stops). NULL is fine. */
void mps_free(struct mps *m);

/* One more client of GPU uuid (copied): the first starts its daemon. 0, or
 * priv_mps's error with the reason in err, and no reference taken. */
int mps_acquire(struct mps *m, const char *uuid, char *err, size_t errlen);

/* One client of uuid fewer; the last one quits its daemon (0, or
 * priv_mps's error with err; the count is dropped either way). */
int mps_release(struct mps *m, const char *uuid, char *err, size_t errlen);

/* The clients counted on uuid. */
size_t mps_clients(const struct mps *m, const char *uuid);

/*
 * After an agent restart, once the first answer has counted the clients
 * that still run: quits the daemon of each of uuids[0..n) that has none
 * and has a STATE/mps/UUID/pipe (a daemon whose jobs ended while the agent
 * was away), and logs each GPU whose daemon is kept. Failures are logged.
 */
void mps_sweep(struct mps *m, const char *const *uuids, size_t n,
               void (*log)(const char *fmt, ...) __attribute__((format(printf, 1, 2))));

#endif

/*
 * state.h - what the scheduler carries from one pass to the next.
 *
 * sched_pass reads and advances it; the caller persists it (every field is
 * public) and restores it after a restart, so fair share, LAS and preemption
 * claims resume where they were.
 */
#ifndef GPUORCH_CORE_STATE_H
#define GPUORCH_CORE_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "core/model.h"

/* Decayed GPU usage of one team on one GPU type (GPU-ms, decayed to last_pass_ms). */
struct sched_usage {
    uint32_t team_id;
    uint32_t gpu_type_id;
    double gpu_ms;
};

/* Attained GPU-service of one job (GPU-ms), for LAS. */
struct sched_attained {
    uint64_t job;
    int64_t gpu_ms;
};

/* A pending job that caused preemptions, and the jobs evicted for it. Until they
 * have all exited, the job preempts nothing more; when they have, it is
 * offered the freed resources before any other job. */
#define SCHED_CLAIM_VICTIMS 16
#define SCHED_CLAIM_NODES   32

struct sched_claim {
    uint64_t job;
    uint64_t victims[SCHED_CLAIM_VICTIMS];
    uint32_t nvictims; /* at most 16 recorded; more are still evicted */
    /* The nodes the job was planned onto: held for it until its victims have
     * left, so that nobody else takes the free part of its room meanwhile. */
    uint32_t nodes[SCHED_CLAIM_NODES];
    uint32_t nnodes;
    int64_t since_ms;
};

/*
 * The carry-over. Initialise with sched_state_init, release with
 * sched_state_release; the caller may read and persist every field, and
 * rebuild a state by filling the arrays (in any order) before the next pass.
 * All arrays are owned by the state.
 */
struct sched_state {
    int64_t last_pass_ms; /* 0 before the first pass */
    struct sched_usage *usage;
    size_t nusage;
    struct sched_attained *attained; /* sorted by job id after a pass */
    size_t nattained;
    struct sched_claim *claims;
    size_t nclaims;
    /* private: capacities of the arrays above */
    size_t usage_cap, attained_cap, claims_cap;
};

void sched_state_init(struct sched_state *state);
void sched_state_release(struct sched_state *state);

/* Adds one usage/attained record (for a caller restoring persisted state).
 * 0 or GPO_ENOMEM (state unchanged). */
int sched_state_add_usage(struct sched_state *state, uint32_t team_id, uint32_t gpu_type_id,
                          double gpu_ms);
int sched_state_add_attained(struct sched_state *state, uint64_t job, int64_t gpu_ms);

/*
 * Charges the part of a running job's usage that no pass saw: from the later
 * of its start and the last pass, to `end_ms` when it ended or was evicted.
 * The caller calls it as it removes the job from the running set, so fair
 * share and LAS count every GPU-ms. `run` is the job as it ran (its team, and
 * the GPU type of its first share, are looked up in `cluster`).
 * 0, GPO_EINVAL, or GPO_ENOMEM (state unchanged).
 */
int sched_state_charge_end(struct sched_state *state, const struct sched_cluster *cluster,
                           const struct sched_policy *policy, const struct sched_running *run,
                           int64_t end_ms);

/* Attained GPU-ms of a job recorded in the state, 0 if none. */
int64_t sched_state_attained(const struct sched_state *state, uint64_t job);

/* Internal to the core: the attained entry of a job in a table sorted by job
 * (NULL if none). */
const struct sched_attained *state_find_attained(const struct sched_attained *a, size_t n,
                                                 uint64_t job);

#endif

/*
 * explain.h - why a job is not running, as data and as a sentence.
 *
 * Every job a pass leaves waiting gets one reason: the first blocker found in
 * the order the pass checks them (validity, quota, reservation, capacity,
 * rank). Reasons that are final make the job unschedulable: no change in load
 * will ever start it, so the caller reports it rather than keep it waiting.
 */
#ifndef GPUORCH_CORE_EXPLAIN_H
#define GPUORCH_CORE_EXPLAIN_H

#include <stddef.h>
#include <stdint.h>

#include "core/model.h"

/* X(name, final, short code, sentence). The sentence is formatted by
 * explain_format with the wait's fields; see there for the placeholders.
 * Callers show "code: sentence", so no sentence repeats its code. */
#define SCHED_REASON_MAP(X)                                                                        \
    X(NONE, 0, "none", "not waiting")                                                              \
    X(QUOTA, 0, "quota", "team %T has no guaranteed or borrowable GPUs left in pool %P")           \
    X(NO_GPU, 0, "resources", "not enough free GPUs%g%p%n")                                        \
    X(GANG, 0, "gang", "not enough free GPUs%g%p on few enough nodes%n")                           \
    X(HOST, 0, "host", "no node%p has the CPUs or host memory free")                               \
    X(RESERVED, 0, "reservation", "behind the reservation for job %J")                             \
    X(PRIORITY, 0, "priority", "higher-ranked jobs took the free GPUs")                            \
    X(BLOCKED, 0, "blocked", "waiting behind job %J (backfill is off)")                            \
    X(PREEMPTING, 0, "preempting", "waiting for preempted jobs to exit")                           \
    X(BAD_SIZE, 1, "invalid", "%F")                                                                \
    X(UNKNOWN_POOL, 1, "invalid", "no such pool")                                                  \
    X(UNKNOWN_TYPE, 1, "invalid", "no such GPU type")                                              \
    X(UNKNOWN_TEAM, 1, "invalid", "no such team")                                                  \
    X(UNKNOWN_CLASS, 1, "invalid", "no such priority class")                                       \
    X(TOO_LARGE, 1, "unschedulable", "larger than any node%g%p can hold")                          \
    X(GANG_TOO_LARGE, 1, "unschedulable", "a gang larger than all GPUs%g%p together")              \
    X(NO_MATCH, 1, "unschedulable", "no node in pool %P has GPUs of type %G")                      \
    X(QUOTA_NEVER, 1, "unschedulable",                                                             \
      "larger than team %T's guarantee plus borrowing limit in pool %P")                           \
    X(NODES, 0, "nodes", "not enough nodes with %k free GPUs%g%p (need %N, %H %h them)")           \
    X(NODES_HOST, 0, "nodes",                                                                      \
      "not enough nodes with the CPUs and memory free%p (need %N, %H %h them)")                    \
    X(EXCLUSIVE, 0, "exclusive", "not enough wholly free nodes%g%p (need %N, %H free)")            \
    X(WHOLE_MEM, 0, "host", "no node%p has all its memory free (the job asks for it all)")         \
    X(FEATURES, 0, "features", "the nodes%g%p with the features asked for have no room")           \
    X(FEATURES_NEVER, 1, "unschedulable", "no node%g%p has the features the job asks for")         \
    X(NODES_NEVER, 1, "unschedulable",                                                             \
      "needs %N nodes%g%p that can each hold %k GPUs and its share of CPUs and memory; %H can")    \
    X(NO_MIG, 0, "resources", "no free MIG %M instance%p%y, %i")                                   \
    X(MIG_ABSENT, 0, "mig", "the MIG layout%p%y has no %M instance")                               \
    X(MIG_NEVER, 1, "unschedulable", "no GPU%g%p is in MIG mode with a %M profile")

enum sched_reason {
#define SCHED_REASON_ENUM(name, final, code, text) SCHED_REASON_##name,
    SCHED_REASON_MAP(SCHED_REASON_ENUM)
#undef SCHED_REASON_ENUM
        SCHED_REASON_COUNT
};

/* est_start_ms of a job whose reservation waits for jobs without a time
 * limit: their end, and so its start, is not known. */
#define SCHED_EST_NO_LIMIT INT64_C(-2)

/* For the MIG reasons (explain_names_mig): the profile (`profile` of
 * catalogue type `type`, mig_type_at) and, for "no free instance", how many
 * instances of it the job's groups have free and in all (one group: the
 * first the job may use that has any). */
struct sched_wait_mig {
    uint8_t type;
    uint8_t profile;
    uint16_t free;
    uint32_t total;
};

/* Why a job waits. `pool`, `gpu_type` and `other_job` (or, for the reasons
 * that count nodes, `nodes`; for the MIG reasons, `mig`) fill the
 * sentence's placeholders where the reason has them (SCHED_NONE / 0
 * otherwise).
 * `est_start_ms` is the estimated start time where a reservation gives one,
 * -1 where none can be promised, SCHED_EST_NO_LIMIT where the jobs it waits
 * for have no time limit. `field` names the bad field of an invalid request
 * (a static string). For "resources" and "gang": `need_milli` the GPUs it
 * asks for and `free_milli` those free for it in the pass's view (a gang:
 * in its pool and type; else on the one node or GPU with the most), both in
 * milli-GPU; need_milli 0 when it asks by memory or the reason has none. */
struct sched_wait {
    uint64_t job;
    enum sched_reason reason;
    uint32_t team;
    uint32_t pool;
    uint32_t gpu_type;
    union {
        uint64_t other_job;
        struct {                /* the node-count reasons (explain_counts_nodes) */
            uint32_t need : 24; /* nodes the job needs */
            uint32_t gpus : 8;  /* whole GPUs on each (at most SCHED_MAX_GPUS_PER_NODE) */
            uint32_t have;      /* nodes that could take its share */
        } nodes;
        struct sched_wait_mig mig; /* the MIG reasons */
    };
    int64_t est_start_ms;
    const char *field;
    int64_t need_milli, free_milli;
};

/* Whether the reason's sentence counts nodes (the wait's `nodes`, where
 * other reasons have `other_job`). */
static inline int explain_counts_nodes(enum sched_reason reason)
{
    return reason == SCHED_REASON_NODES || reason == SCHED_REASON_NODES_HOST ||
           reason == SCHED_REASON_EXCLUSIVE || reason == SCHED_REASON_NODES_NEVER;
}

/* Whether the reason's sentence names a MIG profile (the wait's `mig`). */
static inline int explain_names_mig(enum sched_reason reason)
{
    return reason == SCHED_REASON_NO_MIG || reason == SCHED_REASON_MIG_ABSENT ||
           reason == SCHED_REASON_MIG_NEVER;
}

/* A MIG reason's `mig` as the wait's other_job word (they share it), for
 * callers that carry a reason's detail as one word. */
static inline uint64_t explain_mig_other(unsigned type, unsigned profile, uint32_t free,
                                         uint32_t total)
{
    union {
        uint64_t other;
        struct sched_wait_mig mig;
    } u = {0};
    u.mig = (struct sched_wait_mig){(uint8_t)type, (uint8_t)profile,
                                    (uint16_t)(free < UINT16_MAX ? free : UINT16_MAX), total};
    return u.other;
}

/* explain_mig_other for the job's first MIG type (its lowest bit). */
static inline uint64_t explain_mig_other_of(const struct sched_job *j, uint32_t free,
                                            uint32_t total)
{
    for (unsigned t = 0; t < MIG_NTYPES; t++) {
        if (j->mig_types & (1u << t))
            return explain_mig_other(t, j->mig_profile[t], free, total);
    }
    return 0;
}

/* True when no change in load will ever start a job waiting for this reason. */
int explain_is_final(enum sched_reason reason);

/* Short stable code ("quota", "resources", ...) for APIs and metrics labels. */
const char *explain_code(enum sched_reason reason);

/*
 * Writes the sentence for `wait` into buf (always NUL-terminated when size >
 * 0), naming pools, GPU types and teams from `cluster`. Placeholders: %T the
 * team, %P the pool and %G the GPU type ("any" for SCHED_ANY), %g and %p the
 * same as " of type X" and " in pool X", or nothing for SCHED_ANY (so a job
 * that takes any GPU reads "not enough free GPUs"), %J the other job, %F the
 * field, %n " (need 8, 2 free)" from need_milli and free_milli (0.25 for a
 * fraction), or nothing when need_milli is 0, %N and %H the nodes needed and
 * had, %h "has" or "have" as %H is 1 or not, %k the GPUs on each node, %M
 * the MIG profile ("1g.10gb"), %y " (H100-80GB)" its GPU type, %i "0 of 7
 * free" its instances.
 * Returns the length the full sentence needs, as snprintf does, or GPO_EINVAL.
 */
int explain_format(const struct sched_cluster *cluster, const struct sched_wait *wait, char *buf,
                   size_t size);

#endif

/*
 * quota.h - what each team uses, is guaranteed and may borrow, per group
 * (pool x GPU type), during one pass.
 *
 * A team first uses its guaranteed share of a group, then borrows idle
 * capacity up to its borrowing limit. Work started over the guarantee is
 * "borrowed": a team reclaiming its guarantee may evict it.
 */
#ifndef GPUORCH_CORE_QUOTA_H
#define GPUORCH_CORE_QUOTA_H

#include <stdbool.h>
#include <stdint.h>

#include "core/model.h"
#include "core/view.h"

struct quota {
    uint32_t nteams;
    uint32_t ngroups;
    int64_t *used;  /* [team * ngroups + group], milli-GPU */
    int64_t *guar;  /* guaranteed milli-GPU */
    int64_t *limit; /* guaranteed + borrowing limit; INT64_MAX: no limit */
};

/* Fills guarantees and limits from the teams' quotas for the view's groups,
 * with no usage: the pass adds the running set's (quota_alloc_usage, then
 * quota_add), in the one walk that also gives each running job its group.
 * 0 or GPO_ENOMEM. */
int quota_init(struct quota *q, const struct sched_cluster *cluster, const struct view *view);
void quota_release(struct quota *q);

/* Group and milli-GPU an allocation holds (group of its first GPU's node, or
 * of its first node for a CPU-only job; SCHED_NONE if it holds nothing). */
void quota_alloc_usage(const struct view *view, const struct sched_alloc *alloc,
                       uint32_t *ret_group, int64_t *ret_milli);

/* May `team` start `milli` more in group g? */
bool quota_allows(const struct quota *q, uint32_t team, uint32_t g, int64_t milli);

/* Would `milli` more stay within the team's guarantee in g? */
bool quota_within_guarantee(const struct quota *q, uint32_t team, uint32_t g, int64_t milli);

/* Adds (or, negative, removes) usage. */
void quota_add(struct quota *q, uint32_t team, uint32_t g, int64_t milli);

/* The most the team may ever hold in g (guarantee plus borrowing limit). */
int64_t quota_limit(const struct quota *q, uint32_t team, uint32_t g);

#endif

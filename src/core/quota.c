#include <stdint.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "base/err.h"
#include "core/quota.h"
#include "base/banned.h"

int quota_init(struct quota *q, const struct sched_cluster *c, const struct view *view)
{
    size_t n = (size_t)c->nteams * view->ngroups;
    q->nteams = c->nteams;
    q->ngroups = view->ngroups;
    q->used = gpo_calloc(n ? n : 1, sizeof(*q->used));
    q->guar = gpo_calloc(n ? n : 1, sizeof(*q->guar));
    q->limit = gpo_calloc(n ? n : 1, sizeof(*q->limit));
    if (!q->used || !q->guar || !q->limit) {
        quota_release(q);
        return GPO_ENOMEM;
    }
    for (uint32_t t = 0; t < c->nteams; t++) {
        const struct sched_team *team = &c->teams[t];
        for (uint32_t g = 0; g < view->ngroups; g++) {
            const struct view_group *grp = &view->groups[g];
            const struct sched_quota *quota =
                grp->gpu_type == SCHED_NONE ? NULL
                                            : sched_team_quota(team, grp->pool, grp->gpu_type);
            int64_t guar = quota ? quota->guaranteed_milli : 0;
            int64_t borrow = quota ? quota->borrow_limit_milli : team->borrow_limit_milli;
            size_t i = (size_t)t * view->ngroups + g;
            q->guar[i] = guar;
            q->limit[i] = borrow < 0 || grp->gpu_type == SCHED_NONE ? INT64_MAX : guar + borrow;
        }
    }
    return 0;
}

void quota_release(struct quota *q)
{
    if (!q)
        return;
    free(q->used);
    free(q->guar);
    free(q->limit);
    q->used = q->guar = q->limit = NULL;
}

void quota_alloc_usage(const struct view *view, const struct sched_alloc *alloc,
                       uint32_t *ret_group, int64_t *ret_milli)
{
    int64_t milli = 0;
    for (uint32_t i = 0; i < alloc->nshares; i++)
        milli += alloc->shares[i].milli;
    if (alloc->nshares)
        *ret_group = view->nodes[view->gpu_node[alloc->shares[0].gpu]].group;
    else if (alloc->nnodes)
        *ret_group = view->nodes[alloc->nodes[0].node].group;
    else
        *ret_group = SCHED_NONE;
    *ret_milli = milli;
}

bool quota_allows(const struct quota *q, uint32_t team, uint32_t g, int64_t milli)
{
    size_t i = (size_t)team * q->ngroups + g;
    return q->limit[i] == INT64_MAX || q->used[i] + milli <= q->limit[i];
}

bool quota_within_guarantee(const struct quota *q, uint32_t team, uint32_t g, int64_t milli)
{
    size_t i = (size_t)team * q->ngroups + g;
    return q->used[i] + milli <= q->guar[i];
}

void quota_add(struct quota *q, uint32_t team, uint32_t g, int64_t milli)
{
    q->used[(size_t)team * q->ngroups + g] += milli;
}

int64_t quota_limit(const struct quota *q, uint32_t team, uint32_t g)
{
    return q->limit[(size_t)team * q->ngroups + g];
}

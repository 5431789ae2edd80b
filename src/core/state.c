#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "core/state.h"
#include "base/vec.h"
#include "base/banned.h"

void sched_state_init(struct sched_state *state)
{
    if (state)
        memset(state, 0, sizeof(*state));
}

void sched_state_release(struct sched_state *state)
{
    if (!state)
        return;
    free(state->usage);
    free(state->attained);
    free(state->claims);
    memset(state, 0, sizeof(*state));
}

int sched_state_add_usage(struct sched_state *state, uint32_t team_id, uint32_t gpu_type_id,
                          double gpu_ms)
{
    if (!state || !(gpu_ms >= 0.0))
        return GPO_EINVAL;
    if (vec_grow((void **)&state->usage, &state->usage_cap, state->nusage + 1,
                 sizeof(*state->usage)))
        return GPO_ENOMEM;
    state->usage[state->nusage++] = (struct sched_usage){team_id, gpu_type_id, gpu_ms};
    return 0;
}

int sched_state_add_attained(struct sched_state *state, uint64_t job, int64_t gpu_ms)
{
    if (!state || gpu_ms < 0)
        return GPO_EINVAL;
    if (vec_grow((void **)&state->attained, &state->attained_cap, state->nattained + 1,
                 sizeof(*state->attained)))
        return GPO_ENOMEM;
    /* Kept sorted by job: insert after the entries with lower or equal ids (a
     * caller restoring a table in order appends). */
    size_t lo = 0, hi = state->nattained;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (state->attained[mid].job <= job)
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(state->attained + lo + 1, state->attained + lo,
            (state->nattained - lo) * sizeof(*state->attained));
    state->attained[lo] = (struct sched_attained){job, gpu_ms};
    state->nattained++;
    return 0;
}

const struct sched_attained *state_find_attained(const struct sched_attained *a, size_t n,
                                                 uint64_t job)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid].job < job)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && a[lo].job == job ? &a[lo] : NULL;
}

int sched_state_charge_end(struct sched_state *state, const struct sched_cluster *cluster,
                           const struct sched_policy *policy, const struct sched_running *run,
                           int64_t end_ms)
{
    if (!state || !cluster || !policy || !run || !run->job || run->job->team >= cluster->nteams ||
        policy->fairshare_half_life_ms <= 0)
        return GPO_EINVAL;
    const struct sched_alloc *a = &run->alloc;
    int64_t milli = 0;
    for (uint32_t i = 0; i < a->nshares; i++) {
        if (a->shares[i].gpu >= cluster->ngpus)
            return GPO_EINVAL;
        milli += a->shares[i].milli;
    }
    int64_t last = state->last_pass_ms;
    int64_t since = run->start_ms > last ? run->start_ms : last;
    if (!milli || end_ms <= since)
        return 0;
    uint32_t team_id = cluster->teams[run->job->team].id;
    uint32_t type_id = cluster->gpu_types[cluster->gpus[a->shares[0].gpu].type].id;

    /* Usage is kept as of last_pass_ms; the next pass decays it to its own
     * `now`. So the piece [since, end] is valued at `last`: it grows by
     * 2^((t - last) / H) for each moment t after it. */
    double half = (double)policy->fairshare_half_life_ms;
    double gpus = (double)milli / SCHED_MILLI, add;
    if (last > 0)
        add = gpus * half / M_LN2 *
              (exp2((double)(end_ms - last) / half) - exp2((double)(since - last) / half));
    else
        add = gpus * (double)(end_ms - since);
    int64_t span = end_ms - since;
    int64_t gpu_ms = span / SCHED_MILLI * milli + span % SCHED_MILLI * milli / SCHED_MILLI;

    size_t u = 0;
    while (u < state->nusage &&
           !(state->usage[u].team_id == team_id && state->usage[u].gpu_type_id == type_id))
        u++;
    if (u == state->nusage && vec_grow((void **)&state->usage, &state->usage_cap, state->nusage + 1,
                                       sizeof(*state->usage)))
        return GPO_ENOMEM;
    struct sched_attained *at = (struct sched_attained *)state_find_attained(
        state->attained, state->nattained, run->job->id);
    if (!at && vec_grow((void **)&state->attained, &state->attained_cap, state->nattained + 1,
                        sizeof(*state->attained)))
        return GPO_ENOMEM;
    if (u == state->nusage)
        state->usage[state->nusage++] = (struct sched_usage){team_id, type_id, 0.0};
    state->usage[u].gpu_ms += add;
    if (at) {
        at->gpu_ms += gpu_ms;
    } else {
        /* Insert in job order. */
        size_t k = state->nattained;
        while (k > 0 && state->attained[k - 1].job > run->job->id) {
            state->attained[k] = state->attained[k - 1];
            k--;
        }
        state->attained[k] = (struct sched_attained){run->job->id, gpu_ms};
        state->nattained++;
    }
    return 0;
}

int64_t sched_state_attained(const struct sched_state *state, uint64_t job)
{
    if (!state)
        return 0;
    const struct sched_attained *a = state_find_attained(state->attained, state->nattained, job);
    return a ? a->gpu_ms : 0;
}

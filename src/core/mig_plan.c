/*
 * mig_plan.c - the dynamic MIG planner (core/mig.h, "the dynamic planner"):
 * idle capacity turned into the profiles pending demand asks for, damped.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/err.h"
#include "core/mig.h"
#include "core/mig_int.h"
#include "base/banned.h"

void mig_plan_spec_default(struct mig_plan_spec *spec)
{
    *spec = (struct mig_plan_spec){
        .settle_ms = INT64_C(30000),
        .hold_ms = INT64_C(300000),
        .min_interval_ms = INT64_C(300000),
        .keep_free = 0,
    };
}

void mig_plan_state_init(struct mig_plan_state *st)
{
    for (unsigned t = 0; t < MIG_NTYPES; t++)
        for (unsigned p = 0; p < MIG_MAX_PROFILES; p++)
            st->since_ms[t][p] = INT64_MIN;
}

/* Has `span` passed since `since` (INT64_MIN: long ago)? */
static bool elapsed(int64_t now, int64_t since, int64_t span)
{
    if (since == INT64_MIN)
        return true;
    int64_t d;
    if (__builtin_sub_overflow(now, since, &d))
        return now > since;
    return d >= span;
}

struct ctx {
    const struct mig_plan_spec *spec;
    int64_t now;
    const struct mig_gpu *gpus;
    struct mig_gpu_plan *plans;
    bool settled[MIG_NTYPES][MIG_MAX_PROFILES];
    int64_t idle_left[MIG_NTYPES][MIG_MAX_PROFILES]; /* idle instances not yet serving */
    int64_t surplus[MIG_NTYPES][MIG_MAX_PROFILES];   /* idle ones that may be destroyed */
    uint32_t capacity[MIG_NTYPES][256];              /* mig_capacity memo; UINT32_MAX: not yet */
    bool no_free_room;                               /* this entry found no free room */
    uint32_t repartitioned;                          /* GPUs with destroys in the plan */
};

/* mig_capacity, remembered: a scan asks for the same few masks again and again. */
static uint32_t capacity(struct ctx *c, const struct mig_type *t, uint8_t free_mask)
{
    uint32_t *v = &c->capacity[t->id][free_mask];
    if (*v == UINT32_MAX)
        *v = mig_capacity(t, free_mask);
    return *v;
}

/* A place for one new instance. */
struct cand {
    bool have;
    unsigned cost;  /* memory slots of the instances destroyed for it */
    unsigned free;  /* free slots of the GPU before the create (after the destroys) */
    uint32_t score; /* capacity left after it */
    size_t gpu;
    uint8_t start;
    uint8_t kill; /* bit k: destroy inst[k] */
};

static bool destroyed(const struct mig_gpu_plan *pl, unsigned k)
{
    for (unsigned d = 0; d < pl->ndestroy; d++)
        if (pl->destroy[d].instance == k)
            return true;
    return false;
}

static unsigned popcount8(uint8_t m)
{
    unsigned c = 0;
    for (; m; m &= (uint8_t)(m - 1))
        c++;
    return c;
}

/* The slots the GPU's instances take after its plan so far. */
static uint8_t occupancy(const struct mig_gpu *g, const struct mig_gpu_plan *pl)
{
    const struct mig_type *t = g->type;
    uint8_t occ = 0;
    for (unsigned k = 0; k < g->n; k++)
        if (!destroyed(pl, k))
            occ |= mig_span(g->inst[k].start, t->profiles[g->inst[k].profile].size);
    for (unsigned c = 0; c < pl->ncreate; c++)
        occ |= mig_span(pl->create[c].start, t->profiles[pl->create[c].profile].size);
    return occ;
}

/* Instances of `profile` (or all, profile < 0) after the plan so far. */
static unsigned count_after(const struct mig_gpu *g, const struct mig_gpu_plan *pl, int profile)
{
    unsigned n = 0;
    for (unsigned k = 0; k < g->n; k++)
        n += !destroyed(pl, k) && (profile < 0 || g->inst[k].profile == profile);
    for (unsigned c = 0; c < pl->ncreate; c++)
        n += profile < 0 || pl->create[c].profile == profile;
    return n;
}

/* The instances of GPU i a new instance at `m` would have to destroy, as a
 * bit mask of inst[] indices in *kill and their slots in *cost; false
 * where one of them may not go (busy, held, not surplus, created by this
 * plan) or the GPU may not lose instances now. */
static bool clear_for(const struct ctx *c, size_t i, uint8_t m, uint8_t *kill, unsigned *cost)
{
    const struct mig_gpu *g = &c->gpus[i];
    const struct mig_gpu_plan *pl = &c->plans[i];
    const struct mig_type *t = g->type;
    for (unsigned n = 0; n < pl->ncreate; n++)
        if (mig_span(pl->create[n].start, t->profiles[pl->create[n].profile].size) & m)
            return false;
    if (pl->ndestroy == 0 && !elapsed(c->now, g->changed_ms, c->spec->min_interval_ms))
        return false;
    int64_t use[MIG_MAX_PROFILES] = {0};
    *kill = 0;
    *cost = 0;
    for (unsigned k = 0; k < g->n; k++) {
        const struct mig_instance *in = &g->inst[k];
        unsigned size = t->profiles[in->profile].size;
        if (destroyed(pl, k) || !(mig_span(in->start, size) & m))
            continue;
        if (in->busy || !elapsed(c->now, in->idle_since_ms, c->spec->hold_ms) ||
            ++use[in->profile] > c->surplus[t->id][in->profile])
            return false;
        *kill |= (uint8_t)(1u << k);
        *cost += size;
    }
    return true;
}

/* Can GPU i take one more `p` instance at all (counts only)? */
static bool room_for(const struct ctx *c, size_t i, unsigned p, unsigned *ninst)
{
    const struct mig_gpu *g = &c->gpus[i];
    const struct mig_gpu_plan *pl = &c->plans[i];
    *ninst = count_after(g, pl, -1);
    return count_after(g, pl, (int)p) < g->type->profiles[p].max_count;
}

/* A new `p` instance on GPU i in slots free now (cost 0), into *best if
 * better: fewer free slots (the best fit), then more capacity left. The
 * cheap tests come first: a scan visits every GPU. */
static void consider_free(struct ctx *c, size_t i, unsigned p, struct cand *best)
{
    uint8_t occ = occupancy(&c->gpus[i], &c->plans[i]);
    unsigned free = MIG_SLOTS - popcount8(occ);
    if (free < c->gpus[i].type->profiles[p].size || (best->have && free > best->free))
        return;
    unsigned ninst;
    if (!room_for(c, i, p, &ninst) || ninst >= MIG_MAX_INSTANCES)
        return;
    const struct mig_profile *prof = &c->gpus[i].type->profiles[p];
    int s = -1;
    uint32_t score = 0;
    for (unsigned k = 0; k < prof->nstarts; k++) {
        uint8_t m = mig_span(prof->starts[k], prof->size);
        if (occ & m)
            continue;
        uint32_t v = capacity(c, c->gpus[i].type, (uint8_t) ~(occ | m));
        if (s < 0 || v > score) {
            s = prof->starts[k];
            score = v;
        }
    }
    if (s < 0 || (best->have && free == best->free && score <= best->score))
        return;
    *best =
        (struct cand){.have = true, .free = free, .score = score, .gpu = i, .start = (uint8_t)s};
}

/* The slots of GPU i's instances that could be destroyed now, ignoring how
 * many of a profile may go (clear_for counts that). */
static uint8_t destroyable_slots(const struct ctx *c, size_t i)
{
    const struct mig_gpu *g = &c->gpus[i];
    const struct mig_gpu_plan *pl = &c->plans[i];
    if (pl->ndestroy == 0 &&
        (!elapsed(c->now, g->changed_ms, c->spec->min_interval_ms) ||
         (c->spec->max_repartitions && c->repartitioned >= c->spec->max_repartitions)))
        return 0;
    uint8_t d = 0;
    for (unsigned k = 0; k < g->n; k++) {
        const struct mig_instance *in = &g->inst[k];
        if (!in->busy && c->surplus[g->type->id][in->profile] > 0 &&
            elapsed(c->now, in->idle_since_ms, c->spec->hold_ms) && !destroyed(pl, k))
            d |= mig_span(in->start, g->type->profiles[in->profile].size);
    }
    return d;
}

/* A new `p` instance on GPU i where destroying idle instances makes room:
 * the fewest slots destroyed, then as consider_free. */
static void consider_destroy(struct ctx *c, size_t i, unsigned p, struct cand *best)
{
    const struct mig_gpu *g = &c->gpus[i];
    const struct mig_type *t = g->type;
    const struct mig_profile *prof = &t->profiles[p];
    uint8_t dmask = destroyable_slots(c, i);
    if (!dmask)
        return;
    uint8_t occ = occupancy(g, &c->plans[i]);
    unsigned ninst;
    bool counted = false;
    for (unsigned s = 0; s < prof->nstarts; s++) {
        uint8_t m = mig_span(prof->starts[s], prof->size);
        uint8_t kill = 0, freed = 0;
        unsigned cost = 0;
        if (!(occ & m) || (occ & m & (uint8_t)~dmask))
            continue;
        if (!counted) {
            if (!room_for(c, i, p, &ninst))
                return;
            counted = true;
        }
        if (!clear_for(c, i, m, &kill, &cost) || ninst - popcount8(kill) + 1 > MIG_MAX_INSTANCES ||
            (best->have && cost > best->cost))
            continue;
        for (unsigned k = 0; k < g->n; k++)
            if (kill & (1u << k))
                freed |= mig_span(g->inst[k].start, t->profiles[g->inst[k].profile].size);
        uint8_t before = (uint8_t)(occ & ~freed);
        unsigned free = MIG_SLOTS - popcount8(before);
        if (best->have && cost == best->cost && free > best->free)
            continue;
        uint32_t score = capacity(c, t, (uint8_t) ~(before | m));
        if (best->have && cost == best->cost && free == best->free && score <= best->score)
            continue;
        *best = (struct cand){.have = true,
                              .cost = cost,
                              .free = free,
                              .score = score,
                              .gpu = i,
                              .start = prof->starts[s],
                              .kill = kill};
    }
}

static void take(struct ctx *c, const struct cand *best, unsigned p)
{
    const struct mig_gpu *g = &c->gpus[best->gpu];
    struct mig_gpu_plan *pl = &c->plans[best->gpu];
    if (best->kill && pl->ndestroy == 0)
        c->repartitioned++;
    for (unsigned k = 0; k < g->n; k++) {
        if (!(best->kill & (1u << k)))
            continue;
        const struct mig_instance *in = &g->inst[k];
        pl->destroy[pl->ndestroy++] = (__typeof__(pl->destroy[0])){
            .instance = (uint8_t)k, .profile = in->profile, .start = in->start};
        c->surplus[g->type->id][in->profile]--;
        c->idle_left[g->type->id][in->profile]--;
    }
    pl->create[pl->ncreate++] =
        (__typeof__(pl->create[0])){.profile = (uint8_t)p, .start = best->start};
}

static bool spec_ok(const struct mig_plan_spec *spec)
{
    return spec && spec->settle_ms >= 0 && spec->hold_ms >= 0 && spec->min_interval_ms >= 0;
}

/* The profile of entry e on each type (-1: none, or not its type). */
static void resolve_entry(const struct mig_demand *e, int res[MIG_NTYPES])
{
    for (unsigned t = 0; t < MIG_NTYPES; t++) {
        const struct mig_type *ty = mig_type_at(t);
        int p = !e->type || e->type == ty ? mig_request_resolve(ty, &e->req) : -1;
        res[t] = p >= 0 ? p : -1;
    }
}

/* Serves one request of entry `res`; false when no room is left for it.
 * *last: the GPU the entry's previous request got a new instance on
 * (SIZE_MAX: none). That GPU, if it still has free room, is what the full
 * scan would find again: it had the fewest free slots of the GPUs with
 * room and now has fewer (or, after destroys, was the only one with room),
 * so it is tried alone first. */
static bool serve_one(struct ctx *c, size_t ngpus, const int res[MIG_NTYPES], size_t *last)
{
    for (unsigned t = 0; t < MIG_NTYPES; t++)
        if (res[t] >= 0 && c->idle_left[t][res[t]] > 0) {
            c->idle_left[t][res[t]]--;
            return true;
        }
    struct cand best = {0};
    if (*last != SIZE_MAX)
        consider_free(c, *last, (unsigned)res[c->gpus[*last].type->id], &best);
    /* Free room appears only where this plan destroyed, which the hint
     * covers: once an entry found none, its later requests skip phase 0. */
    for (int phase = c->no_free_room ? 1 : 0; phase < 2 && !best.have; phase++) {
        for (size_t i = 0; i < ngpus; i++) {
            const struct mig_gpu *g = &c->gpus[i];
            int p = res[g->type->id];
            if (g->frozen || p < 0 || !c->settled[g->type->id][p])
                continue;
            if (phase == 0)
                consider_free(c, i, (unsigned)p, &best);
            else
                consider_destroy(c, i, (unsigned)p, &best);
        }
        if (phase == 0 && !best.have)
            c->no_free_room = true;
    }
    if (!best.have)
        return false;
    take(c, &best, (unsigned)res[c->gpus[best.gpu].type->id]);
    *last = best.gpu;
    return true;
}

int mig_plan(struct mig_plan_state *st, const struct mig_plan_spec *spec, int64_t now_ms,
             const struct mig_gpu *gpus, size_t ngpus, const struct mig_demand *demand,
             size_t ndemand, struct mig_gpu_plan *plans, size_t *ret_changed)
{
    if (!st || !spec_ok(spec) || (ngpus && (!gpus || !plans)) || (ndemand && !demand))
        return GPO_EINVAL;
    for (size_t i = 0; i < ngpus; i++) {
        const struct mig_type *t = gpus[i].type;
        if (!t || mig_type_at(t->id) != t || gpus[i].n > MIG_MAX_INSTANCES)
            return GPO_EINVAL;
        for (unsigned k = 0; k < gpus[i].n; k++)
            if (gpus[i].inst[k].profile >= t->nprofiles || gpus[i].inst[k].start >= MIG_SLOTS)
                return GPO_EINVAL;
    }
    memset(plans, 0, ngpus * sizeof(plans[0]));

    struct ctx c = {.spec = spec, .now = now_ms, .gpus = gpus, .plans = plans};
    memset(c.capacity, 0xff, sizeof(c.capacity));
    uint64_t want[MIG_NTYPES][MIG_MAX_PROFILES] = {{0}};
    for (size_t e = 0; e < ndemand; e++) {
        int res[MIG_NTYPES];
        resolve_entry(&demand[e], res);
        for (unsigned t = 0; t < MIG_NTYPES; t++)
            if (res[t] >= 0)
                want[t][res[t]] += demand[e].count;
    }
    for (unsigned t = 0; t < MIG_NTYPES; t++)
        for (unsigned p = 0; p < MIG_MAX_PROFILES; p++) {
            if (!want[t][p])
                st->since_ms[t][p] = INT64_MIN;
            else if (st->since_ms[t][p] == INT64_MIN)
                st->since_ms[t][p] = now_ms;
            c.settled[t][p] = want[t][p] && elapsed(now_ms, st->since_ms[t][p], spec->settle_ms);
        }
    for (size_t i = 0; i < ngpus; i++)
        for (unsigned k = 0; k < gpus[i].n; k++)
            if (!gpus[i].inst[k].busy)
                c.idle_left[gpus[i].type->id][gpus[i].inst[k].profile]++;
    for (unsigned t = 0; t < MIG_NTYPES; t++)
        for (unsigned p = 0; p < MIG_MAX_PROFILES; p++) {
            uint64_t keep = want[t][p] + spec->keep_free;
            int64_t idle = c.idle_left[t][p];
            c.surplus[t][p] = keep >= (uint64_t)idle ? 0 : idle - (int64_t)keep;
        }

    for (size_t e = 0; e < ndemand; e++) {
        int res[MIG_NTYPES];
        resolve_entry(&demand[e], res);
        size_t last = SIZE_MAX;
        c.no_free_room = false;
        for (uint32_t u = 0; u < demand[e].count; u++)
            if (!serve_one(&c, ngpus, res, &last))
                break;
    }

    size_t changed = 0;
    for (size_t i = 0; i < ngpus; i++)
        changed += plans[i].ndestroy || plans[i].ncreate;
    if (ret_changed)
        *ret_changed = changed;
    return 0;
}

int mig_gpu_plan_apply(struct mig_gpu *gpu, const struct mig_gpu_plan *plan, int64_t now_ms)
{
    if (!gpu || !plan || !gpu->type || gpu->n > MIG_MAX_INSTANCES ||
        plan->ndestroy > MIG_MAX_INSTANCES || plan->ncreate > MIG_MAX_INSTANCES)
        return GPO_EINVAL;
    const struct mig_type *t = gpu->type;
    bool gone[MIG_MAX_INSTANCES] = {false};
    for (unsigned d = 0; d < plan->ndestroy; d++) {
        unsigned k = plan->destroy[d].instance;
        if (k >= gpu->n || gone[k] || gpu->inst[k].busy ||
            gpu->inst[k].profile != plan->destroy[d].profile ||
            gpu->inst[k].start != plan->destroy[d].start)
            return GPO_EINVAL;
        gone[k] = true;
    }
    struct mig_instance next[2 * MIG_MAX_INSTANCES];
    size_t n = 0;
    for (unsigned k = 0; k < gpu->n; k++)
        if (!gone[k])
            next[n++] = gpu->inst[k];
    for (unsigned c = 0; c < plan->ncreate; c++)
        next[n++] = (struct mig_instance){.profile = plan->create[c].profile,
                                          .start = plan->create[c].start,
                                          .idle_since_ms = now_ms};
    if (mig_layout_check(t, next, n, NULL, 0) != 0)
        return GPO_EINVAL;
    memcpy(gpu->inst, next, n * sizeof(next[0]));
    gpu->n = (uint8_t)n;
    if (plan->ndestroy)
        gpu->changed_ms = now_ms;
    return 0;
}

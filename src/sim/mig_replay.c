/*
 * mig_replay.c - the MIG replay (sim/mig_replay.h): one event loop for the
 * four modes, core/mig.h's placement and planner driven directly.
 */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "core/mig.h"
#include "sim/mig_replay.h"
#include "sim/trace.h"
#include "base/banned.h"

#define NOJOB (-1)

struct pod {
    int64_t submit_ms, dur_ms;
    int64_t milli;   /* the trace's share: 1..999, or whole GPUs * 1000 */
    uint32_t k;      /* whole GPUs (>= 1 when milli >= 1000); 0: a fraction */
    uint8_t profile; /* MIG modes: the profile it takes (per GPU) */
    bool unsched;
    int64_t start_ms, end_ms; /* -1: not yet */
    double charge;            /* GPUs charged while it runs */
    uint32_t ngpu;
    uint32_t gpu[SIM_MIG_MAX_GPUS_PER_NODE];
    uint8_t slot[SIM_MIG_MAX_GPUS_PER_NODE]; /* MIG: the instance's start slot */
};

struct heap_ent {
    int64_t t;
    uint32_t pod;
};

struct replay {
    const struct sim_mig_opts *o;
    const struct mig_type *t;
    struct pod *pods;
    size_t npods;
    uint32_t ngpus, G;
    /* MIG modes */
    struct mig_gpu *gpus;
    int32_t (*owner)[MIG_SLOTS]; /* the pod on the instance starting at a slot */
    struct mig_gpu_plan *plans, *inflight;
    int64_t *done_ms; /* INT64_MAX: no plan in flight */
    struct mig_plan_state st, gang_st;
    /* no MIG */
    int64_t *used_milli;
    /* the queue */
    uint32_t *pending;
    size_t npending;
    struct heap_ent *heap;
    size_t nheap;
    struct sim_mig_result *r;
    char *err;
    size_t errlen;
};

static int fail(struct replay *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct replay *x, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->err, x->errlen, fmt, ap);
    va_end(ap);
    return GPO_EINVAL;
}

/* ---- profiles --------------------------------------------------------- */

int sim_mig_profile_for_share(const struct mig_type *t, int64_t gpu_milli)
{
    unsigned slots = gpu_milli >= 1000 ? MIG_SLOTS : (unsigned)((gpu_milli * 8 + 999) / 1000);
    int best = -1;
    for (unsigned p = 0; p < t->nprofiles; p++) {
        const struct mig_profile *q = &t->profiles[p];
        if (q->media || q->size < slots)
            continue;
        if (best < 0 || q->size < t->profiles[best].size ||
            (q->size == t->profiles[best].size && q->slices < t->profiles[best].slices))
            best = (int)p;
    }
    return best;
}

/* Can an instance of profile q hold a pod of profile p? Its own, or (unless
 * own_profile) a larger one: at least p's slots and compute slices. */
static bool fits_in(const struct mig_type *t, unsigned q, unsigned p)
{
    const struct mig_profile *a = &t->profiles[q], *b = &t->profiles[p];
    return !a->media && a->size >= b->size && a->slices >= b->slices;
}

static bool covers(const struct replay *x, unsigned q, unsigned p)
{
    return q == p || (!x->o->own_profile && fits_in(x->t, q, p));
}

static uint8_t span(unsigned start, unsigned size)
{
    return (uint8_t)(((1u << size) - 1u) << start);
}

int sim_mig_layout_parse(const struct mig_type *t, const char *spec, struct sim_mig_layout *ret,
                         char *err, size_t errlen)
{
    struct sim_mig_layout l = {.enabled = true};
    size_t n = 0;
    int e;
    if (!strchr(spec, '=')) {
        e = mig_layout_named(t, spec, l.inst, &n, &l.enabled, err, errlen);
    } else {
        uint32_t counts[MIG_MAX_PROFILES] = {0};
        char buf[256];
        if (strlen(spec) >= sizeof(buf)) {
            snprintf(err, errlen, "layout '%.40s...': too long", spec);
            return GPO_EINVAL;
        }
        memcpy(buf, spec, strlen(spec) + 1);
        char *save = NULL;
        for (char *w = strtok_r(buf, "+", &save); w; w = strtok_r(NULL, "+", &save)) {
            char *eq = strchr(w, '=');
            if (!eq) {
                snprintf(err, errlen, "layout '%s': '%s': expected PROFILE=COUNT", spec, w);
                return GPO_EINVAL;
            }
            *eq = '\0';
            char perr[256];
            int p = mig_profile_lookup(t, w, perr, sizeof(perr));
            if (p < 0) {
                snprintf(err, errlen, "layout '%s': %s", spec, perr);
                return p;
            }
            char *end = NULL;
            long c = strtol(eq + 1, &end, 10);
            if (end == eq + 1 || *end || c < 0 || c > MIG_MAX_INSTANCES) {
                snprintf(err, errlen, "layout '%s': %s=%s: expected a count from 0 to %d", spec, w,
                         eq + 1, MIG_MAX_INSTANCES);
                return GPO_EINVAL;
            }
            counts[p] += (uint32_t)c;
        }
        char lerr[256];
        e = mig_layout_from_counts(t, counts, t->nprofiles, l.inst, &n, lerr, sizeof(lerr));
        if (e)
            snprintf(err, errlen, "layout '%s': %s", spec, lerr);
    }
    if (e)
        return e;
    l.n = (uint8_t)n;
    for (unsigned k = 0; k < l.n; k++)
        l.inst[k].idle_since_ms = INT64_MIN;
    *ret = l;
    return 0;
}

/* ---- the heap of ends ------------------------------------------------- */

static void heap_push(struct replay *x, int64_t t, uint32_t pod)
{
    size_t i = x->nheap++;
    x->heap[i] = (struct heap_ent){t, pod};
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (x->heap[up].t < x->heap[i].t ||
            (x->heap[up].t == x->heap[i].t && x->heap[up].pod < x->heap[i].pod))
            break;
        struct heap_ent tmp = x->heap[up];
        x->heap[up] = x->heap[i];
        x->heap[i] = tmp;
        i = up;
    }
}

static struct heap_ent heap_pop(struct replay *x)
{
    struct heap_ent top = x->heap[0];
    x->heap[0] = x->heap[--x->nheap];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < x->nheap && (x->heap[l].t < x->heap[m].t ||
                             (x->heap[l].t == x->heap[m].t && x->heap[l].pod < x->heap[m].pod)))
            m = l;
        if (r < x->nheap && (x->heap[r].t < x->heap[m].t ||
                             (x->heap[r].t == x->heap[m].t && x->heap[r].pod < x->heap[m].pod)))
            m = r;
        if (m == i)
            break;
        struct heap_ent tmp = x->heap[m];
        x->heap[m] = x->heap[i];
        x->heap[i] = tmp;
        i = m;
    }
    return top;
}

/* ---- placement: no MIG ------------------------------------------------ */

/* k whole free GPUs on the node with the fewest free that has k (best fit). */
static bool place_whole(struct replay *x, struct pod *p, uint32_t k)
{
    uint32_t best = UINT32_MAX, best_free = UINT32_MAX;
    for (uint32_t n = 0; n < x->o->nodes; n++) {
        uint32_t free = 0;
        for (uint32_t g = 0; g < x->G; g++)
            free += x->used_milli[n * x->G + g] == 0;
        if (free >= k && free < best_free) {
            best = n;
            best_free = free;
        }
    }
    if (best == UINT32_MAX)
        return false;
    p->ngpu = 0;
    for (uint32_t g = 0; g < x->G && p->ngpu < k; g++) {
        uint32_t i = best * x->G + g;
        if (x->used_milli[i] == 0) {
            x->used_milli[i] = 1000;
            p->gpu[p->ngpu++] = i;
        }
    }
    p->charge = k;
    return true;
}

/* A fraction onto the fullest GPU it fits (best fit), ties to the lower. */
static bool place_fraction(struct replay *x, struct pod *p)
{
    uint32_t best = UINT32_MAX;
    for (uint32_t i = 0; i < x->ngpus; i++)
        if (x->used_milli[i] + p->milli <= 1000 &&
            (best == UINT32_MAX || x->used_milli[i] > x->used_milli[best]))
            best = i;
    if (best == UINT32_MAX)
        return false;
    x->used_milli[best] += p->milli;
    p->ngpu = 1;
    p->gpu[0] = best;
    p->charge = (double)p->milli / 1000.0;
    return true;
}

/* ---- placement: MIG --------------------------------------------------- */

static void take_instance(struct replay *x, struct pod *p, uint32_t gi, unsigned k, uint32_t pod)
{
    struct mig_gpu *g = &x->gpus[gi];
    g->inst[k].busy = true;
    x->owner[gi][g->inst[k].start] = (int32_t)pod;
    p->gpu[p->ngpu] = gi;
    p->slot[p->ngpu] = g->inst[k].start;
    p->ngpu++;
    p->charge += (double)x->t->profiles[g->inst[k].profile].size / MIG_SLOTS;
}

/* One instance of p's profile, else of the smallest larger profile. */
static bool place_mig_one(struct replay *x, struct pod *p, uint32_t pod)
{
    for (unsigned q = p->profile; q < x->t->nprofiles; q++) {
        if (!covers(x, q, p->profile))
            continue;
        struct mig_request req = {.profile = x->t->profiles[q].name};
        struct mig_pick pick;
        if (mig_place(x->gpus, x->ngpus, &req, &pick) == 0) {
            p->ngpu = 0;
            p->charge = 0;
            take_instance(x, p, pick.gpu, (unsigned)pick.instance, pod);
            return true;
        }
    }
    return false;
}

static bool free_full(const struct replay *x, uint32_t gi, unsigned k)
{
    const struct mig_instance *in = &x->gpus[gi].inst[k];
    return !in->busy && x->t->profiles[in->profile].size == MIG_SLOTS;
}

/* k full-GPU instances on one node: the node with the fewest that has k. */
static bool place_mig_gang(struct replay *x, struct pod *p, uint32_t pod)
{
    uint32_t best = UINT32_MAX, best_free = UINT32_MAX;
    for (uint32_t n = 0; n < x->o->nodes; n++) {
        uint32_t free = 0;
        for (uint32_t g = n * x->G; g < (n + 1) * x->G; g++)
            for (unsigned k = 0; k < x->gpus[g].n; k++)
                free += free_full(x, g, k);
        if (free >= p->k && free < best_free) {
            best = n;
            best_free = free;
        }
    }
    if (best == UINT32_MAX)
        return false;
    p->ngpu = 0;
    p->charge = 0;
    for (uint32_t g = best * x->G; g < (best + 1) * x->G && p->ngpu < p->k; g++)
        for (unsigned k = 0; k < x->gpus[g].n && p->ngpu < p->k; k++)
            if (free_full(x, g, k))
                take_instance(x, p, g, k, pod);
    return true;
}

/* ---- the pass --------------------------------------------------------- */

struct fails {
    uint32_t min_k;      /* whole pods of >= this many GPUs do not fit */
    int64_t min_milli;   /* shared: fractions of >= this do not fit */
    uint32_t prof_fails; /* MIG: bit p: profile p does not fit */
};

static bool known_to_fail(const struct replay *x, const struct pod *p, const struct fails *f)
{
    if (x->o->mode == SIM_MIG_STATIC || x->o->mode == SIM_MIG_DYNAMIC) {
        if (p->k >= 2)
            return p->k >= f->min_k;
        return f->prof_fails >> p->profile & 1u;
    }
    if (x->o->mode == SIM_MIG_SHARED && p->k == 0)
        return p->milli >= f->min_milli;
    return (p->k ? p->k : 1) >= f->min_k;
}

static void note_fail(const struct replay *x, const struct pod *p, struct fails *f)
{
    if (x->o->mode == SIM_MIG_STATIC || x->o->mode == SIM_MIG_DYNAMIC) {
        if (p->k >= 2) {
            f->min_k = p->k < f->min_k ? p->k : f->min_k;
            return;
        }
        /* no free instance covers p's profile: nor any profile at least as large */
        for (unsigned q = 0; q < x->t->nprofiles; q++)
            if (covers(x, q, p->profile))
                f->prof_fails |= 1u << q;
        return;
    }
    if (x->o->mode == SIM_MIG_SHARED && p->k == 0) {
        f->min_milli = p->milli < f->min_milli ? p->milli : f->min_milli;
        return;
    }
    uint32_t k = p->k ? p->k : 1;
    f->min_k = k < f->min_k ? k : f->min_k;
}

static bool try_place(struct replay *x, uint32_t id)
{
    struct pod *p = &x->pods[id];
    switch (x->o->mode) {
    case SIM_MIG_EXCLUSIVE:
        return place_whole(x, p, p->k ? p->k : 1);
    case SIM_MIG_SHARED:
        return p->k ? place_whole(x, p, p->k) : place_fraction(x, p);
    default:
        return p->k >= 2 ? place_mig_gang(x, p, id) : place_mig_one(x, p, id);
    }
}

static void pass(struct replay *x, int64_t now)
{
    struct fails f = {.min_k = UINT32_MAX, .min_milli = INT64_MAX};
    size_t keep = 0;
    for (size_t i = 0; i < x->npending; i++) {
        uint32_t id = x->pending[i];
        struct pod *p = &x->pods[id];
        if (known_to_fail(x, p, &f) || !try_place(x, id)) {
            note_fail(x, p, &f);
            x->pending[keep++] = id;
            continue;
        }
        p->start_ms = now;
        heap_push(x, now + p->dur_ms, id);
    }
    x->npending = keep;
}

static void release(struct replay *x, uint32_t id, int64_t now)
{
    struct pod *p = &x->pods[id];
    p->end_ms = now;
    x->r->busy_gpu_hours += p->charge * (double)p->dur_ms / 3.6e6;
    for (uint32_t j = 0; j < p->ngpu; j++) {
        uint32_t gi = p->gpu[j];
        if (!x->gpus) {
            x->used_milli[gi] -= p->k ? 1000 : p->milli;
            if (x->o->mode == SIM_MIG_EXCLUSIVE)
                x->used_milli[gi] = 0;
            continue;
        }
        struct mig_gpu *g = &x->gpus[gi];
        for (unsigned k = 0; k < g->n; k++)
            if (g->inst[k].start == p->slot[j]) {
                g->inst[k].busy = false;
                g->inst[k].idle_since_ms = now;
            }
        x->owner[gi][p->slot[j]] = NOJOB;
    }
}

/* ---- the planner ------------------------------------------------------ */

static int start_plan(struct replay *x, uint32_t gi, const struct mig_gpu_plan *pl, int64_t now)
{
    struct mig_gpu *g = &x->gpus[gi];
    for (unsigned d = 0; d < pl->ndestroy; d++) {
        unsigned k = pl->destroy[d].instance;
        if (k >= g->n || g->inst[k].busy || x->owner[gi][g->inst[k].start] != NOJOB)
            return fail(x, "GPU %u: the planner destroyed a busy instance (%s at slot %u)", gi,
                        x->t->profiles[pl->destroy[d].profile].name, pl->destroy[d].start);
    }
    for (unsigned d = 0; d < pl->ndestroy; d++)
        g->inst[pl->destroy[d].instance].busy = true; /* going: nobody takes it */
    g->frozen = true;
    x->inflight[gi] = *pl;
    x->done_ms[gi] = now + x->o->repartition_delay_ms;
    return 0;
}

static int finish_plan(struct replay *x, uint32_t gi, int64_t now)
{
    struct mig_gpu *g = &x->gpus[gi];
    const struct mig_gpu_plan *pl = &x->inflight[gi];
    for (unsigned d = 0; d < pl->ndestroy; d++) {
        unsigned k = pl->destroy[d].instance;
        if (x->owner[gi][g->inst[k].start] != NOJOB)
            return fail(x, "GPU %u: a pod took an instance being destroyed", gi);
        g->inst[k].busy = false;
    }
    g->frozen = false;
    x->done_ms[gi] = INT64_MAX;
    if (mig_gpu_plan_apply(g, pl, now) != 0)
        return fail(x, "GPU %u: a plan of the planner does not apply", gi);
    x->r->repartitions++;
    x->r->destroyed += pl->ndestroy;
    x->r->created += pl->ncreate;
    return 0;
}

static int start_plans(struct replay *x, uint32_t base, uint32_t n, int64_t now)
{
    for (uint32_t i = 0; i < n; i++) {
        const struct mig_gpu_plan *pl = &x->plans[i];
        if (!pl->ndestroy && !pl->ncreate)
            continue;
        int e = start_plan(x, base + i, pl, now);
        if (e)
            return e;
    }
    return 0;
}

/* The first waiting pod of several GPUs gets a plan on one node: the one
 * with the most GPUs that hold no busy instance and no plan in flight. */
static int plan_gang(struct replay *x, int64_t now)
{
    const struct pod *gang = NULL;
    for (size_t i = 0; i < x->npending && !gang; i++)
        if (x->pods[x->pending[i]].k >= 2)
            gang = &x->pods[x->pending[i]];
    if (!gang) {
        mig_plan_state_init(&x->gang_st);
        return 0;
    }
    uint32_t best = UINT32_MAX, best_n = 0;
    for (uint32_t n = 0; n < x->o->nodes; n++) {
        uint32_t c = 0;
        for (uint32_t g = n * x->G; g < (n + 1) * x->G; g++) {
            bool busy = x->gpus[g].frozen;
            for (unsigned k = 0; k < x->gpus[g].n; k++)
                busy |= x->gpus[g].inst[k].busy;
            c += !busy;
        }
        if (c > best_n) {
            best = n;
            best_n = c;
        }
    }
    if (best == UINT32_MAX || best_n < gang->k)
        return 0;
    struct mig_demand d = {
        .type = x->t, .req = {.profile = x->t->profiles[gang->profile].name}, .count = gang->k};
    int e = mig_plan(&x->gang_st, &x->o->plan, now, &x->gpus[(size_t)best * x->G], x->G, &d, 1,
                     x->plans, NULL);
    if (e)
        return fail(x, "the planner refused its input (%s)", gpo_strerror(e));
    return start_plans(x, best * x->G, x->G, now);
}

static int plan(struct replay *x, int64_t now)
{
    int e = plan_gang(x, now);
    if (e)
        return e;
    struct mig_demand d[MIG_MAX_PROFILES];
    size_t nd = 0;
    for (size_t i = 0; i < x->npending; i++) {
        const struct pod *p = &x->pods[x->pending[i]];
        if (p->k >= 2)
            continue;
        size_t j = 0;
        while (j < nd && d[j].req.profile != x->t->profiles[p->profile].name)
            j++;
        if (j == nd)
            d[nd++] = (struct mig_demand){.type = x->t,
                                          .req = {.profile = x->t->profiles[p->profile].name}};
        d[j].count++;
    }
    e = mig_plan(&x->st, &x->o->plan, now, x->gpus, x->ngpus, d, nd, x->plans, NULL);
    if (e)
        return fail(x, "the planner refused its input (%s)", gpo_strerror(e));
    return start_plans(x, 0, x->ngpus, now);
}

static int64_t after(int64_t since, int64_t span, int64_t now, int64_t best)
{
    if (since == INT64_MIN || since > INT64_MAX - span)
        return best;
    int64_t t = since + span;
    return t > now && t < best ? t : best;
}

/* When a damping rule of the planner next lets it do something new, with
 * the same pods waiting: a demand settling, an instance's hold or a GPU's
 * interval running out. INT64_MAX: never. */
static int64_t planner_wake(const struct replay *x, int64_t now)
{
    if (!x->npending)
        return INT64_MAX;
    const struct mig_plan_spec *s = &x->o->plan;
    int64_t w = INT64_MAX;
    for (unsigned p = 0; p < x->t->nprofiles; p++) {
        w = after(x->st.since_ms[x->t->id][p], s->settle_ms, now, w);
        w = after(x->gang_st.since_ms[x->t->id][p], s->settle_ms, now, w);
    }
    for (uint32_t gi = 0; gi < x->ngpus; gi++) {
        const struct mig_gpu *g = &x->gpus[gi];
        if (g->frozen)
            continue;
        w = after(g->changed_ms, s->min_interval_ms, now, w);
        for (unsigned k = 0; k < g->n; k++)
            if (!g->inst[k].busy)
                w = after(g->inst[k].idle_since_ms, s->hold_ms, now, w);
    }
    return w;
}

/* ---- stranded capacity ------------------------------------------------ */

/* Whether free slots `free` of a GPU could hold a new instance some waiting
 * pod of one GPU takes (bit p of want: profile p). */
static bool creatable(const struct replay *x, uint32_t want, uint8_t free)
{
    for (unsigned p = 0; p < x->t->nprofiles; p++) {
        const struct mig_profile *q = &x->t->profiles[p];
        for (unsigned s = 0; (want >> p & 1u) && s < q->nstarts; s++)
            if ((span(q->starts[s], q->size) & free) == span(q->starts[s], q->size))
                return true;
    }
    return false;
}

/* The stranded slots of node n's GPUs (sim_mig_run), pods of one GPU
 * wanting the profiles of `want`, the smallest waiting gang min_gang GPUs. */
static unsigned stranded_node(const struct replay *x, uint32_t n, uint32_t want, uint32_t min_gang)
{
    uint32_t full = 0; /* free full-GPU instances, and under dynamic empty GPUs */
    for (uint32_t gi = n * x->G; gi < (n + 1) * x->G; gi++) {
        const struct mig_gpu *g = &x->gpus[gi];
        for (unsigned k = 0; k < g->n; k++)
            full += free_full(x, gi, k);
        full += x->o->mode == SIM_MIG_DYNAMIC && g->n == 0;
    }
    bool gang_fits = full >= min_gang;
    unsigned slots = 0;
    for (uint32_t gi = n * x->G; gi < (n + 1) * x->G; gi++) {
        const struct mig_gpu *g = &x->gpus[gi];
        for (unsigned k = 0; k < g->n; k++) {
            if (g->inst[k].busy)
                continue;
            bool usable = gang_fits && free_full(x, gi, k);
            for (unsigned p = 0; p < x->t->nprofiles; p++)
                usable |= (want >> p & 1u) && covers(x, g->inst[k].profile, p);
            slots += usable ? 0 : x->t->profiles[g->inst[k].profile].size;
        }
        uint8_t free = (uint8_t)~mig_layout_slots(x->t, g->inst, g->n);
        bool usable =
            x->o->mode == SIM_MIG_DYNAMIC && ((gang_fits && g->n == 0) || creatable(x, want, free));
        slots += usable ? 0 : (unsigned)__builtin_popcount(free);
    }
    return slots;
}

static double stranded_mig(const struct replay *x)
{
    uint32_t want = 0, min_gang = UINT32_MAX;
    for (size_t i = 0; i < x->npending; i++) {
        const struct pod *p = &x->pods[x->pending[i]];
        if (p->k >= 2)
            min_gang = p->k < min_gang ? p->k : min_gang;
        else
            want |= 1u << p->profile;
    }
    unsigned slots = 0;
    for (uint32_t n = 0; n < x->o->nodes; n++)
        slots += stranded_node(x, n, want, min_gang);
    return (double)slots / MIG_SLOTS;
}

static double stranded_plain(const struct replay *x)
{
    int64_t min_milli = INT64_MAX;
    uint32_t min_k = UINT32_MAX;
    for (size_t i = 0; i < x->npending; i++) {
        const struct pod *p = &x->pods[x->pending[i]];
        uint32_t k = p->k ? p->k : 1;
        if (x->o->mode == SIM_MIG_SHARED && !p->k)
            min_milli = p->milli < min_milli ? p->milli : min_milli;
        else
            min_k = k < min_k ? k : min_k;
    }
    int64_t milli = 0;
    for (uint32_t n = 0; n < x->o->nodes; n++) {
        uint32_t whole = 0;
        for (uint32_t g = n * x->G; g < (n + 1) * x->G; g++)
            whole += x->used_milli[g] == 0;
        for (uint32_t g = n * x->G; g < (n + 1) * x->G; g++) {
            int64_t free = 1000 - x->used_milli[g];
            bool usable = free >= min_milli || (free == 1000 && whole >= min_k);
            milli += usable ? 0 : free;
        }
    }
    return (double)milli / 1000.0;
}

static double stranded(const struct replay *x)
{
    if (!x->npending)
        return 0;
    return x->gpus ? stranded_mig(x) : stranded_plain(x);
}

/* ---- setup and the loop ----------------------------------------------- */

static bool static_fits(const struct replay *x, const struct pod *p)
{
    for (uint32_t n = 0; n < x->o->nodes; n++) {
        uint32_t full = 0;
        for (uint32_t g = n * x->G; g < (n + 1) * x->G; g++)
            for (unsigned k = 0; k < x->gpus[g].n; k++) {
                unsigned q = x->gpus[g].inst[k].profile;
                if (p->k < 2 && covers(x, q, p->profile))
                    return true;
                full += x->t->profiles[q].size == MIG_SLOTS;
            }
        if (p->k >= 2 && full >= p->k)
            return true;
    }
    return false;
}

static int load_pods(struct replay *x, const struct sim_trace *trace)
{
    x->pods = calloc(trace->njobs ? trace->njobs : 1, sizeof(*x->pods));
    if (!x->pods)
        return GPO_ENOMEM;
    int64_t first = -1;
    for (size_t i = 0; i < trace->njobs; i++) {
        const struct sim_trace_job *j = &trace->jobs[i];
        if (j->gpu_milli <= 0)
            continue;
        if (first < 0)
            first = j->submit_s;
        struct pod *p = &x->pods[x->npods++];
        double sub = (double)(j->submit_s - first) / x->o->compress;
        p->submit_ms = (int64_t)llround(sub * 1000.0);
        int64_t d = j->duration_s;
        if (x->o->max_duration_s > 0 && d > x->o->max_duration_s)
            d = x->o->max_duration_s;
        p->dur_ms = d * 1000;
        p->milli = j->gpu_milli;
        p->k = j->gpu_milli >= 1000 ? (uint32_t)((j->gpu_milli + 999) / 1000) : 0;
        p->start_ms = p->end_ms = -1;
        p->unsched = p->k > x->G;
        if (x->t) {
            int q = sim_mig_profile_for_share(x->t, j->gpu_milli);
            p->profile = (uint8_t)(q < 0 ? 0 : q);
        }
    }
    return 0;
}

static int setup(struct replay *x, const struct sim_mig_opts *o)
{
    x->G = o->gpus_per_node;
    x->ngpus = o->nodes * o->gpus_per_node;
    x->heap = calloc(x->npods + 1, sizeof(*x->heap));
    x->pending = calloc(x->npods + 1, sizeof(*x->pending));
    if (!x->heap || !x->pending)
        return GPO_ENOMEM;
    if (o->mode == SIM_MIG_EXCLUSIVE || o->mode == SIM_MIG_SHARED) {
        x->used_milli = calloc(x->ngpus, sizeof(*x->used_milli));
        return x->used_milli ? 0 : GPO_ENOMEM;
    }
    x->gpus = calloc(x->ngpus, sizeof(*x->gpus));
    x->owner = calloc(x->ngpus, sizeof(*x->owner));
    x->plans = calloc(x->ngpus, sizeof(*x->plans));
    x->inflight = calloc(x->ngpus, sizeof(*x->inflight));
    x->done_ms = calloc(x->ngpus, sizeof(*x->done_ms));
    if (!x->gpus || !x->owner || !x->plans || !x->inflight || !x->done_ms)
        return GPO_ENOMEM;
    size_t seg = 0;
    uint32_t in_seg = 0;
    for (uint32_t gi = 0; gi < x->ngpus; gi++) {
        if (o->mode == SIM_MIG_STATIC && in_seg == o->segs[seg].gpus && seg + 1 < o->nsegs) {
            seg++;
            in_seg = 0;
        }
        in_seg++;
        const struct sim_mig_layout *l = &o->segs[seg].layout;
        struct mig_gpu *g = &x->gpus[gi];
        *g = (struct mig_gpu){.type = o->type, .changed_ms = INT64_MIN};
        if (l->enabled) {
            g->n = l->n;
            memcpy(g->inst, l->inst, sizeof(g->inst));
        } else { /* MIG off: the whole GPU, as one full instance */
            g->n = 1;
            g->inst[0] =
                (struct mig_instance){.profile = (uint8_t)sim_mig_profile_for_share(o->type, 1000),
                                      .idle_since_ms = INT64_MIN};
        }
        g->frozen = o->mode == SIM_MIG_STATIC || !l->enabled;
        for (unsigned s = 0; s < MIG_SLOTS; s++)
            x->owner[gi][s] = NOJOB;
        x->done_ms[gi] = INT64_MAX;
    }
    mig_plan_state_init(&x->st);
    mig_plan_state_init(&x->gang_st);
    return 0;
}

static int64_t next_done(const struct replay *x, uint32_t *ret_gpu)
{
    int64_t best = INT64_MAX;
    for (uint32_t gi = 0; x->done_ms && gi < x->ngpus; gi++)
        if (x->done_ms[gi] < best) {
            best = x->done_ms[gi];
            *ret_gpu = gi;
        }
    return best;
}

static int step(struct replay *x, int64_t now, size_t *arrived)
{
    while (x->nheap && x->heap[0].t <= now)
        release(x, heap_pop(x).pod, now);
    uint32_t gi = 0;
    while (next_done(x, &gi) <= now) {
        int e = finish_plan(x, gi, now);
        if (e)
            return e;
    }
    for (; *arrived < x->npods && x->pods[*arrived].submit_ms <= now; (*arrived)++) {
        struct pod *p = &x->pods[*arrived];
        if (!p->unsched && x->o->mode == SIM_MIG_STATIC)
            p->unsched = !static_fits(x, p);
        if (p->unsched)
            x->r->unschedulable++;
        else
            x->pending[x->npending++] = (uint32_t)*arrived;
    }
    pass(x, now);
    return x->o->mode == SIM_MIG_DYNAMIC ? plan(x, now) : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int summarise(struct replay *x, int64_t first_ms, int64_t last_ms, double stranded_ms)
{
    struct sim_mig_result *r = x->r;
    double *waits = calloc(x->npods + 1, sizeof(*waits));
    if (!waits)
        return GPO_ENOMEM;
    size_t n = 0;
    double jct = 0, wait = 0;
    for (size_t i = 0; i < x->npods; i++) {
        const struct pod *p = &x->pods[i];
        if (p->end_ms < 0)
            continue;
        jct += (double)(p->end_ms - p->submit_ms) / 1000.0;
        waits[n] = (double)(p->start_ms - p->submit_ms) / 1000.0;
        wait += waits[n++];
    }
    r->stuck = x->npending;
    if (n) {
        qsort(waits, n, sizeof(*waits), cmp_double);
        r->jct_avg_s = jct / (double)n;
        r->wait_avg_s = wait / (double)n;
        r->wait_p99_s = waits[(size_t)ceil(0.99 * (double)n) - 1];
    }
    free(waits);
    double span_ms = (double)(last_ms - first_ms);
    r->makespan_s = span_ms / 1000.0;
    r->stranded_gpus = span_ms > 0 ? stranded_ms / span_ms : 0;
    r->capacity_gpu_hours = (double)x->ngpus * span_ms / 3.6e6;
    return 0;
}

static int run(struct replay *x)
{
    size_t arrived = 0;
    int64_t first = x->npods ? x->pods[0].submit_ms : 0, last = first, now = first;
    double cur = 0, acc = 0;
    for (;;) {
        int64_t t = arrived < x->npods ? x->pods[arrived].submit_ms : INT64_MAX;
        uint32_t gi;
        int64_t d = next_done(x, &gi);
        t = d < t ? d : t;
        if (x->nheap && x->heap[0].t < t)
            t = x->heap[0].t;
        if (x->o->mode == SIM_MIG_DYNAMIC) {
            int64_t w = planner_wake(x, now);
            t = w < t ? w : t;
        }
        if (t == INT64_MAX)
            break;
        acc += cur * (double)(t - now);
        now = t;
        int e = step(x, now, &arrived);
        if (e)
            return e;
        x->r->events++;
        last = now;
        cur = stranded(x);
    }
    return summarise(x, first, last, acc);
}

static void release_all(struct replay *x)
{
    free(x->pods);
    free(x->heap);
    free(x->pending);
    free(x->used_milli);
    free(x->gpus);
    free(x->owner);
    free(x->plans);
    free(x->inflight);
    free(x->done_ms);
}

int sim_mig_run(const struct sim_trace *trace, const struct sim_mig_opts *o,
                struct sim_mig_result *out, char *err, size_t errlen)
{
    struct sim_mig_result r = {0};
    struct replay x = {.o = o, .t = o->type, .r = &r, .err = err, .errlen = errlen};
    if (!o->type || !o->nodes || o->nodes > SIM_MIG_MAX_NODES || !o->gpus_per_node ||
        o->gpus_per_node > SIM_MIG_MAX_GPUS_PER_NODE || !(o->compress > 0) ||
        o->repartition_delay_ms < 0 || o->max_duration_s < 0) {
        snprintf(err, errlen, "bad MIG replay options");
        return GPO_EINVAL;
    }
    x.G = o->gpus_per_node;
    int e = load_pods(&x, trace);
    if (!e)
        e = setup(&x, o);
    r.jobs = x.npods;
    if (!e)
        e = run(&x);
    if (e == GPO_ENOMEM)
        snprintf(err, errlen, "out of memory");
    release_all(&x);
    if (!e)
        *out = r;
    return e;
}

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "core/order.h"
#include "base/sort.h"
#include "base/banned.h"

/* A candidate's place within its team and class. */
struct order_key {
    int64_t submit_ms;
    uint64_t id;
    uint32_t lasq; /* LAS queue (0 unless las) */
    uint32_t idx;  /* index into the jobs */
};

/* The candidates of one team in one class: a binary min-heap of keys in
 * keys[begin, end), so that only the jobs actually handed out pay for their
 * order (a pass that settles the rest of a full queue in one sweep never
 * sorts it). Teams compete through a second heap of segments. */
struct order_seg {
    size_t begin, end;
    uint32_t cls;
    uint32_t team;
    bool within;  /* its head fits within the team's guarantee (when pushed) */
    double share; /* fairshare: the team's share (when pushed) */
    bool sorted;  /* keys[begin, end) is in order: the head is taken by begin++ */
};

struct id_index {
    uint32_t id;
    uint32_t index;
};

static int cmp_id_index(const void *a, const void *b)
{
    const struct id_index *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

static uint32_t lookup_id(const struct id_index *map, size_t n, uint32_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (map[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && map[lo].id == id ? map[lo].index : SCHED_NONE;
}

static double mean_life_ms(const struct sched_policy *p)
{
    return (double)p->fairshare_half_life_ms / M_LN2;
}

int order_init(struct order *o, const struct sched_cluster *c, const struct view *view,
               const struct sched_running_set *running, const struct sched_policy *policy,
               const struct sched_state *state, int64_t now_ms)
{
    memset(o, 0, sizeof(*o));
    o->cluster = c;
    o->policy = policy;
    o->pending_seg = -1;
    size_t ntypes = c->ngpu_types, n = (size_t)c->nteams * ntypes;
    o->usage = gpo_calloc(n ? n : 1, sizeof(*o->usage));
    o->alloc = gpo_calloc(n ? n : 1, sizeof(*o->alloc));
    o->cap = gpo_calloc(ntypes ? ntypes : 1, sizeof(*o->cap));
    struct id_index *teams = gpo_malloc((c->nteams ? c->nteams : 1) * sizeof(*teams));
    struct id_index *types = gpo_malloc((ntypes ? ntypes : 1) * sizeof(*types));
    if (!o->usage || !o->alloc || !o->cap || !teams || !types) {
        free(teams);
        free(types);
        order_release(o);
        return GPO_ENOMEM;
    }
    for (uint32_t g = 0; g < view->ngroups; g++) {
        if (view->groups[g].gpu_type != SCHED_NONE)
            o->cap[view->groups[g].gpu_type] += view->groups[g].cap_milli;
    }

    double half = (double)policy->fairshare_half_life_ms;
    int64_t last = state->last_pass_ms;
    double decay = last > 0 && now_ms > last ? exp2(-(double)(now_ms - last) / half) : 1.0;
    for (uint32_t t = 0; t < c->nteams; t++)
        teams[t] = (struct id_index){c->teams[t].id, t};
    for (uint32_t y = 0; y < ntypes; y++)
        types[y] = (struct id_index){c->gpu_types[y].id, y};
    qsort(teams, c->nteams, sizeof(*teams), cmp_id_index);
    qsort(types, ntypes, sizeof(*types), cmp_id_index);
    for (size_t i = 0; i < state->nusage; i++) {
        const struct sched_usage *u = &state->usage[i];
        uint32_t t = lookup_id(teams, c->nteams, u->team_id);
        uint32_t y = lookup_id(types, ntypes, u->gpu_type_id);
        if (t != SCHED_NONE && y != SCHED_NONE)
            o->usage[(size_t)t * ntypes + y] += u->gpu_ms * decay;
    }
    free(teams);
    free(types);

    double life = mean_life_ms(policy);
    /* Most running jobs ran all the time since the last pass: one exp2 for them. */
    double since_last = now_ms > last ? 1.0 - exp2(-(double)(now_ms - last) / half) : 0.0;
    for (size_t r = 0; running && r < running->njobs; r++) {
        const struct sched_running *run = &running->jobs[r];
        const struct sched_alloc *a = &run->alloc;
        if (!run->job || run->job->team >= c->nteams || !a->nshares)
            continue;
        int64_t milli = 0;
        for (uint32_t i = 0; i < a->nshares; i++)
            milli += a->shares[i].milli;
        size_t k = (size_t)run->job->team * ntypes + c->gpus[a->shares[0].gpu].type;
        o->alloc[k] += milli;
        int64_t since = run->start_ms > last ? run->start_ms : last;
        if (now_ms > since) {
            double span = (double)(now_ms - since);
            double got = since == last ? since_last : 1.0 - exp2(-span / half);
            o->usage[k] += (double)milli / SCHED_MILLI * life * got;
        }
    }
    return 0;
}

void order_release(struct order *o)
{
    if (!o)
        return;
    free(o->usage);
    free(o->alloc);
    free(o->cap);
    free(o->keys);
    free(o->segs);
    free(o->heap);
    memset(o, 0, sizeof(*o));
}

int order_commit(const struct order *o, struct sched_state *state)
{
    const struct sched_cluster *c = o->cluster;
    size_t ntypes = c->ngpu_types, n = 0;
    for (size_t i = 0; i < (size_t)c->nteams * ntypes; i++)
        n += o->usage[i] > 0.0;
    if (n > state->usage_cap) {
        struct sched_usage *u = gpo_realloc(state->usage, n * sizeof(*u));
        if (!u)
            return GPO_ENOMEM;
        state->usage = u;
        state->usage_cap = n;
    }
    size_t k = 0;
    for (uint32_t t = 0; t < c->nteams; t++) {
        for (uint32_t y = 0; y < ntypes; y++) {
            double v = o->usage[(size_t)t * ntypes + y];
            if (v > 0.0)
                state->usage[k++] = (struct sched_usage){c->teams[t].id, c->gpu_types[y].id, v};
        }
    }
    state->nusage = k;
    return 0;
}

bool order_uses_las(const struct sched_policy *p)
{
    return p->order == SCHED_ORDER_LAS || order_las_team_only(p);
}

bool order_las_team_only(const struct sched_policy *p)
{
    return p->order == SCHED_ORDER_FAIRSHARE && p->within == SCHED_WITHIN_LAS;
}

uint32_t order_las_queue(const struct sched_policy *p, int64_t attained_gpu_ms)
{
    uint32_t q = 0;
    while (q < p->nlas_thresholds && attained_gpu_ms >= p->las_thresholds_gpu_ms[q])
        q++;
    return q;
}

double order_team_share(const struct order *o, uint32_t team)
{
    const struct sched_cluster *c = o->cluster;
    size_t ntypes = c->ngpu_types;
    double life = mean_life_ms(o->policy), best = 0.0;
    for (size_t y = 0; y < ntypes; y++) {
        if (o->cap[y] <= 0)
            continue;
        size_t k = (size_t)team * ntypes + y;
        double s = (o->usage[k] + (double)o->alloc[k] / SCHED_MILLI * life) /
                   ((double)o->cap[y] / SCHED_MILLI);
        if (s > best)
            best = s;
    }
    return best / (double)c->teams[team].weight;
}

static bool key_before(const struct order_key *x, const struct order_key *y)
{
    if (x->lasq != y->lasq)
        return x->lasq < y->lasq;
    if (x->submit_ms != y->submit_ms)
        return x->submit_ms < y->submit_ms;
    return x->id < y->id;
}

SIFT_DOWN_DEFINE(key_sift_down, struct order_key, key_before)

/* Makes h[0, n) a min-heap and returns false; or returns true if it is in
 * order already (the caller's queue is usually kept by submit time), which
 * costs n compares, and then stays a sorted run: no heap to maintain. */
static bool key_heapify(struct order_key *h, size_t n)
{
    size_t k = 1;
    while (k < n && !key_before(&h[k], &h[k - 1]))
        k++;
    if (k >= n)
        return true;
    for (size_t i = n / 2; i-- > 0;)
        key_sift_down(h, n, i);
    return false;
}

/* Under LAS, puts a segment's keys in LAS-queue order, stably (a counting
 * sort over the few queues): a caller's queue kept by submit time then comes
 * out fully in order, and is handed out by advancing, not through a heap.
 * 0 or GPO_ENOMEM (keys unchanged). */
static int las_bucket_sort(struct order_key *k, size_t n)
{
    size_t count[SCHED_LAS_MAX_QUEUES + 1] = {0};
    bool mixed = false;
    for (size_t i = 0; i < n; i++) {
        count[k[i].lasq + 1]++;
        mixed |= k[i].lasq != k[0].lasq;
    }
    if (!mixed)
        return 0;
    struct order_key *tmp = gpo_malloc(n * sizeof(*tmp));
    if (!tmp)
        return GPO_ENOMEM;
    for (size_t q = 1; q <= SCHED_LAS_MAX_QUEUES; q++)
        count[q] += count[q - 1];
    for (size_t i = 0; i < n; i++)
        tmp[count[k[i].lasq]++] = k[i];
    memcpy(k, tmp, n * sizeof(*k));
    free(tmp);
    return 0;
}

int order_begin(struct order *o, const struct order_job *jobs, const uint32_t *cands, size_t n,
                const uint8_t *lasq, order_within_fn within, void *ctx)
{
    const struct sched_cluster *c = o->cluster;
    free(o->keys);
    free(o->segs);
    free(o->heap);
    o->keys = gpo_malloc((n ? n : 1) * sizeof(*o->keys));
    o->segs = NULL;
    o->heap = NULL;
    o->nsegs = o->seg_pos = o->nheap = 0;
    o->pending_seg = -1;
    o->within = within;
    o->within_ctx = ctx;
    if (!o->keys)
        return GPO_ENOMEM;
    enum sched_order ord = o->policy->order;
    /* Bucket candidates by (class rank, team) with a counting sort, highest
     * class first; each bucket keeps the caller's order and becomes a heap. */
    uint32_t ncls = ord == SCHED_ORDER_FIFO ? 1 : c->nclasses;
    size_t nb = (size_t)ncls * c->nteams;
    uint32_t *rank = gpo_malloc((c->nclasses ? c->nclasses : 1) * sizeof(*rank));
    size_t *start = gpo_calloc(nb + 1, sizeof(*start));
    if (!rank || !start) {
        free(rank);
        free(start);
        return GPO_ENOMEM;
    }
    for (uint32_t k = 0; k < c->nclasses; k++) {
        rank[k] = 0;
        for (uint32_t m = 0; ord != SCHED_ORDER_FIFO && m < c->nclasses; m++) {
            bool higher = c->classes[m].order > c->classes[k].order;
            for (uint32_t e = 0; higher && e < m; e++)
                higher = c->classes[e].order != c->classes[m].order; /* count each order once */
            rank[k] += higher;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const struct order_job *j = &jobs[cands[i]];
        start[(size_t)rank[j->prio] * c->nteams + j->team + 1]++;
    }
    size_t nsegs = 0;
    for (size_t b = 1; b <= nb; b++) {
        nsegs += start[b] > 0;
        start[b] += start[b - 1];
    }
    for (size_t i = 0; i < n; i++) {
        const struct order_job *j = &jobs[cands[i]];
        size_t b = (size_t)rank[j->prio] * c->nteams + j->team;
        uint32_t q = lasq && order_uses_las(o->policy) ? lasq[cands[i]] : 0;
        o->keys[start[b]++] = (struct order_key){j->submit_ms, j->id, q, cands[i]};
    }
    free(rank);
    o->segs = gpo_malloc((nsegs ? nsegs : 1) * sizeof(*o->segs));
    o->heap = gpo_malloc((nsegs ? nsegs : 1) * sizeof(*o->heap));
    if (!o->segs || !o->heap) {
        free(start);
        return GPO_ENOMEM;
    }
    /* start[b] is now the end of bucket b. */
    for (size_t b = 0, begin = 0; b < nb; begin = start[b], b++) {
        if (start[b] == begin)
            continue;
        if (lasq && order_uses_las(o->policy) &&
            las_bucket_sort(o->keys + begin, start[b] - begin)) {
            free(start);
            return GPO_ENOMEM;
        }
        bool sorted = key_heapify(o->keys + begin, start[b] - begin);
        o->segs[o->nsegs++] = (struct order_seg){.begin = begin,
                                                 .end = start[b],
                                                 .sorted = sorted,
                                                 .cls = (uint32_t)(b / c->nteams),
                                                 .team = (uint32_t)(b % c->nteams)};
    }
    free(start);
    return 0;
}

/* Between the heads of two teams' segments in one class: work within its
 * team's guarantee first (a team uses its guarantee before anyone borrows),
 * then the policy (fair share: lower share; LAS: less-served queue), then the
 * earlier submit, then the lower id; never the team index. */
static bool seg_before(const struct order *o, uint32_t a, uint32_t b)
{
    const struct order_seg *x = &o->segs[a], *y = &o->segs[b];
    if (x->within != y->within)
        return x->within;
    if (x->share != y->share)
        return x->share < y->share;
    return key_before(&o->keys[x->begin], &o->keys[y->begin]);
}

static void heap_push(struct order *o, uint32_t s)
{
    struct order_seg *seg = &o->segs[s];
    seg->share = o->policy->order == SCHED_ORDER_FAIRSHARE ? order_team_share(o, seg->team) : 0.0;
    seg->within = o->within ? o->within(o->within_ctx, o->keys[seg->begin].idx) : false;
    size_t i = o->nheap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!seg_before(o, s, o->heap[parent]))
            break;
        o->heap[i] = o->heap[parent];
        i = parent;
    }
    o->heap[i] = s;
}

static uint32_t heap_pop(struct order *o)
{
    uint32_t top = o->heap[0];
    uint32_t last = o->heap[--o->nheap];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        uint32_t mv = last;
        if (l < o->nheap && seg_before(o, o->heap[l], mv)) {
            m = l;
            mv = o->heap[l];
        }
        if (r < o->nheap && seg_before(o, o->heap[r], mv))
            m = r;
        if (m == i)
            break;
        o->heap[i] = o->heap[m];
        i = m;
    }
    if (o->nheap)
        o->heap[i] = last;
    return top;
}

uint32_t order_next(struct order *o)
{
    if (o->pending_seg >= 0) {
        /* The team whose job was handed out last: its share and guarantee may
         * have changed, so it re-enters the heap with fresh keys. */
        uint32_t s = (uint32_t)o->pending_seg;
        o->pending_seg = -1;
        if (o->segs[s].begin < o->segs[s].end) {
            if (o->nheap)
                heap_push(o, s);
            else
                o->heap[o->nheap++] = s; /* alone in its class: nothing to compare */
        }
    }
    if (!o->nheap && o->seg_pos < o->nsegs) {
        /* Next priority class: all its teams compete. */
        uint32_t cls = o->segs[o->seg_pos].cls;
        while (o->seg_pos < o->nsegs && o->segs[o->seg_pos].cls == cls)
            heap_push(o, (uint32_t)o->seg_pos++);
    }
    if (!o->nheap)
        return SCHED_NONE;
    uint32_t s = heap_pop(o);
    o->pending_seg = s;
    /* Take the segment's head off its own heap (or its sorted run). */
    struct order_seg *seg = &o->segs[s];
    struct order_key *h = o->keys + seg->begin;
    uint32_t idx = h[0].idx;
    if (seg->sorted) {
        seg->begin++;
        return idx;
    }
    size_t left = --seg->end - seg->begin;
    if (left) {
        h[0] = h[left];
        key_sift_down(h, left, 0);
    }
    return idx;
}

void order_note_start(struct order *o, uint32_t team, uint32_t gpu_type, int64_t milli)
{
    if (gpu_type == SCHED_NONE || team >= o->cluster->nteams)
        return;
    o->alloc[(size_t)team * o->cluster->ngpu_types + gpu_type] += milli;
}

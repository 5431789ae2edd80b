/*
 * plan.c - the pure part of the reconcile (serve.h): the back-off, which
 * replicas to start and drain, when a drain is done.
 */
#include "server/serve/serve.h"
#include "base/banned.h"

int64_t serve_backoff_ms(uint32_t failures)
{
    if (failures == 0)
        return 0;
    int64_t ms = SERVE_BACKOFF_MIN_MS;
    for (uint32_t k = 1; k < failures && ms < SERVE_BACKOFF_MAX_MS; k++)
        ms *= 2;
    return ms < SERVE_BACKOFF_MAX_MS ? ms : SERVE_BACKOFF_MAX_MS;
}

static bool live(const struct serve_replica *r)
{
    return r->state == SERVE_STARTING || r->state == SERVE_READY;
}

/* Whether a should drain before b: starting before ready, the old
 * generation before the current, fewer in flight, then the newer. */
static bool drains_before(const struct serve_replica *a, const struct serve_replica *b,
                          uint64_t generation)
{
    bool a_ready = a->state == SERVE_READY, b_ready = b->state == SERVE_READY;
    if (a_ready != b_ready)
        return !a_ready;
    bool a_cur = a->generation == generation, b_cur = b->generation == generation;
    if (a_cur != b_cur)
        return !a_cur;
    if (a->inflight != b->inflight)
        return a->inflight < b->inflight;
    return a->replica > b->replica;
}

void serve_plan_make(const struct serve_replica *v, size_t n, uint32_t submitting, int32_t desired,
                     uint64_t generation, bool hold_starts, struct serve_plan *out)
{
    int64_t nlive = submitting, old = 0, cur_starting = submitting;
    for (size_t k = 0; k < n; k++) {
        if (!live(&v[k]))
            continue;
        nlive++;
        if (v[k].generation != generation)
            old++;
        else if (v[k].state == SERVE_STARTING)
            cur_starting++;
    }
    /* A roll's surge: one new replica beside the old ones until it is ready. */
    int64_t allowed = desired + (old > 0 && cur_starting > 0 && desired > 0);
    int64_t start = 0;
    if (nlive < desired)
        start = desired - nlive;
    else if (old > 0 && cur_starting == 0 && nlive == desired && desired > 0)
        start = 1;
    out->start = hold_starts ? 0 : (int32_t)start;
    out->ndrain = 0;
    int64_t excess = nlive - allowed;
    /* Picks the next to drain, excess times (n is small: at most
     * AUTOSCALE_REPLICAS_MAX). */
    for (; excess > 0; excess--) {
        size_t best = n;
        for (size_t k = 0; k < n; k++) {
            bool taken = false;
            for (size_t d = 0; d < out->ndrain && !taken; d++)
                taken = out->drain[d] == k;
            if (!live(&v[k]) || taken)
                continue;
            if (best == n || drains_before(&v[k], &v[best], generation))
                best = k;
        }
        if (best == n)
            break; /* the excess is jobs still on their way */
        out->drain[out->ndrain++] = best;
    }
}

bool serve_drain_done(const struct serve_replica *r, int64_t now_ms, int64_t drain_timeout_ms)
{
    /* One tick at least: a router may send it a request until it has read
     * the table without it. */
    if (now_ms - r->drain_ms >= drain_timeout_ms)
        return true;
    return r->inflight == 0 && now_ms - r->drain_ms >= SERVE_TICK_MS;
}

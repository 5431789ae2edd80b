/*
 * serve_replica.c - the serving replay's replicas (serve_int.h): the event
 * heap, continuous batching, placement under the cap and the start delays,
 * readiness, drains.
 *
 * Continuous batching: the b requests decoding on a replica all advance at
 * the same rate, min(decode_tps / b, decode_tps_request) tokens per second,
 * so one clock per replica counts the tokens each has received; a request
 * finishes when that clock reaches its own start plus its tokens. A
 * min-heap per replica holds those finish points, and one pending event per
 * replica (a generation number makes the older ones stale) is the earliest,
 * rescheduled whenever b changes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/sort.h"
#include "base/vec.h"
#include "sim/serve_int.h"
#include "base/banned.h"

#define EPS_TOK 1e-6 /* tokens: a finish point this close is reached */

static void end_replica(struct sim_serve_eng *e, uint32_t k);

/* ---- events ------------------------------------------------------------------------ */

static bool ev_before(const struct sim_serve_event *a, const struct sim_serve_event *b)
{
    if (a->t_ms != b->t_ms)
        return a->t_ms < b->t_ms;
    if (a->kind != b->kind)
        return a->kind < b->kind;
    return a->seq < b->seq;
}
SIFT_DOWN_DEFINE(ev_sift_down, struct sim_serve_event, ev_before)

void sim_serve_eng_push_event(struct sim_serve_eng *e, int64_t t_ms, uint8_t kind, uint32_t rep,
                              uint32_t arg)
{
    if (vec_grow((void **)&e->ev, &e->capev, e->nev + 1, sizeof(*e->ev))) {
        sim_serve_eng_oom(e);
        return;
    }
    struct sim_serve_event x = {
        .t_ms = t_ms, .seq = e->seq++, .rep = rep, .arg = arg, .kind = kind};
    size_t i = e->nev++;
    while (i > 0 && ev_before(&x, &e->ev[(i - 1) / 2])) {
        e->ev[i] = e->ev[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->ev[i] = x;
}

struct sim_serve_event sim_serve_eng_pop_event(struct sim_serve_eng *e)
{
    struct sim_serve_event top = e->ev[0];
    e->ev[0] = e->ev[--e->nev];
    ev_sift_down(e->ev, e->nev, 0);
    return top;
}

static bool dec_before(const struct sim_serve_dec *a, const struct sim_serve_dec *b)
{
    return a->fin != b->fin ? a->fin < b->fin : a->req < b->req;
}
SIFT_DOWN_DEFINE(dec_sift_down, struct sim_serve_dec, dec_before)

/* ---- requests ---------------------------------------------------------------------- */

void sim_serve_eng_finish(struct sim_serve_eng *e, uint32_t req, enum sim_req_outcome outcome)
{
    struct sim_request_result *r = &e->out->requests[req];
    r->outcome = (uint8_t)outcome;
    e->nfinished++;
    if (e->now > e->last_end)
        e->last_end = e->now;
    if (outcome != SIM_REQ_DONE)
        return;
    r->end_ms = e->now;
    const struct sim_slo *slo = &e->svc->slo;
    bool met = slo->ttft_ms <= 0 || r->first_token_ms - r->arrival_ms <= slo->ttft_ms;
    met = met && (slo->e2e_ms <= 0 || r->end_ms - r->arrival_ms <= slo->e2e_ms);
    if (slo->tpot_ms > 0 && r->output_tokens > 1)
        met = met && (double)(r->end_ms - r->first_token_ms) / (r->output_tokens - 1) <=
                         (double)slo->tpot_ms;
    r->slo_met = met;
}

static void start_prefill(struct sim_serve_eng *e, uint32_t k)
{
    struct sim_serve_rep *r = &e->reps[k];
    uint32_t req = r->pre.head;
    double ms = 1000.0 * e->t->v[req].input_tokens / e->m->prefill_tps;
    r->prefilling = true;
    sim_serve_eng_push_event(e, e->now + (int64_t)ceil(ms - 1e-9), EV_PREFILL, k, req);
}

static void run(struct sim_serve_eng *e, uint32_t k, uint32_t req)
{
    struct sim_serve_rep *r = &e->reps[k];
    r->running++;
    sim_serve_eng_list_push(e, &r->pre, req);
    if (!r->prefilling)
        start_prefill(e, k);
}

void sim_serve_eng_send(struct sim_serve_eng *e, uint32_t req, uint32_t k)
{
    struct sim_serve_rep *r = &e->reps[k];
    r->inflight++;
    e->inflight++;
    if (r->running < e->m->max_batch)
        run(e, k, req);
    else
        sim_serve_eng_list_push(e, &r->wait, req);
}

/* The replica's token clock brought to now. */
static void clock_sync(struct sim_serve_eng *e, struct sim_serve_rep *r)
{
    r->clock += r->rate * (double)(e->now - r->clock_ms) / 1000.0;
    r->clock_ms = e->now;
}

/* The rate for the decoding count now, and the event of the next finish. */
static void reschedule(struct sim_serve_eng *e, uint32_t k)
{
    struct sim_serve_rep *r = &e->reps[k];
    r->gen++;
    if (!r->ndec) {
        r->rate = 0;
        return;
    }
    double share = e->m->decode_tps / (double)r->ndec;
    r->rate = share < e->m->decode_tps_request ? share : e->m->decode_tps_request;
    double left = r->dec[0].fin - r->clock;
    int64_t dt = 0;
    if (left > EPS_TOK) {
        double ms = ceil(left / r->rate * 1000.0 - 1e-9);
        dt = ms < 1 ? 1 : (int64_t)ms;
    }
    sim_serve_eng_push_event(e, e->now + dt, EV_DECODE, k, r->gen);
}

static void complete(struct sim_serve_eng *e, uint32_t k, uint32_t req)
{
    struct sim_serve_rep *r = &e->reps[k];
    r->inflight--;
    r->running--;
    e->inflight--;
    sim_serve_eng_finish(e, req, SIM_REQ_DONE);
    if (r->wait.n && r->running < e->m->max_batch)
        run(e, k, sim_serve_eng_list_pop(e, &r->wait));
    if (r->state == REP_DRAINING && r->inflight == 0)
        end_replica(e, k);
    else if (r->state == REP_READY)
        sim_serve_eng_route_queued(e);
}

void sim_serve_eng_on_prefill(struct sim_serve_eng *e, uint32_t k, uint32_t req)
{
    struct sim_serve_rep *r = &e->reps[k];
    if (r->state == REP_ENDED || !r->pre.n || r->pre.head != req)
        return; /* its replica's drain timed out */
    sim_serve_eng_list_pop(e, &r->pre);
    r->prefilling = false;
    e->out->requests[req].first_token_ms = e->now;
    if (r->pre.n)
        start_prefill(e, k);
    int32_t tokens = e->t->v[req].output_tokens;
    if (tokens <= 1) {
        complete(e, k, req);
        return;
    }
    if (vec_grow((void **)&r->dec, &r->capdec, r->ndec + 1, sizeof(*r->dec))) {
        sim_serve_eng_oom(e);
        return;
    }
    clock_sync(e, r);
    struct sim_serve_dec x = {r->clock + (double)(tokens - 1), req};
    size_t i = r->ndec++;
    while (i > 0 && dec_before(&x, &r->dec[(i - 1) / 2])) {
        r->dec[i] = r->dec[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    r->dec[i] = x;
    reschedule(e, k);
}

void sim_serve_eng_on_decode(struct sim_serve_eng *e, uint32_t k, uint32_t gen)
{
    struct sim_serve_rep *r = &e->reps[k];
    if (r->state == REP_ENDED || gen != r->gen)
        return;
    clock_sync(e, r);
    /* The finished ones leave the heap first, so that the new rate is
     * the one for those that remain; they complete in finish order. */
    uint32_t done[64];
    size_t ndone = 0;
    while (r->ndec && r->dec[0].fin <= r->clock + EPS_TOK && ndone < 64) {
        done[ndone++] = r->dec[0].req;
        r->dec[0] = r->dec[--r->ndec];
        dec_sift_down(r->dec, r->ndec, 0);
    }
    reschedule(e, k);
    for (size_t i = 0; i < ndone; i++)
        complete(e, k, done[i]);
}

/* ---- replicas ---------------------------------------------------------------------- */

static int32_t *count_of(struct sim_serve_eng *e, uint8_t state)
{
    switch (state) {
    case REP_WAITING:
        return &e->nwaiting;
    case REP_STARTING:
        return &e->nstarting;
    case REP_READY:
        return &e->nready;
    case REP_DRAINING:
        return &e->ndraining;
    default:
        return NULL;
    }
}

static void set_state(struct sim_serve_eng *e, uint32_t k, uint8_t state)
{
    int32_t *from = count_of(e, e->reps[k].state), *to = count_of(e, state);
    if (from)
        (*from)--;
    if (to)
        (*to)++;
    e->reps[k].state = state;
}

void sim_serve_eng_on_ready(struct sim_serve_eng *e, uint32_t k)
{
    struct sim_replica_span *s = &e->out->replicas[k];
    if (e->reps[k].state != REP_STARTING)
        return; /* cancelled */
    set_state(e, k, REP_READY);
    s->ready_ms = e->now;
    if (e->as && !e->reps[k].instant)
        autoscale_startup(e->as, s->ready_ms - s->start_ms);
    sim_serve_eng_route_queued(e);
}

static bool fits(const struct sim_serve_eng *e)
{
    return e->opts.gpu_cap_milli <= 0 || e->gpu_used + e->svc->gpu_milli <= e->opts.gpu_cap_milli;
}

static void place_now(struct sim_serve_eng *e, uint32_t k)
{
    set_state(e, k, REP_STARTING);
    e->out->replicas[k].start_ms = e->now;
    e->gpu_used += e->svc->gpu_milli;
    if (e->reps[k].instant)
        sim_serve_eng_on_ready(e, k);
    else
        sim_serve_eng_push_event(e, e->now + e->m->startup_ms, EV_READY, k, 0);
}

/* A replica past its start delay: placed, or in line for the GPUs. */
void sim_serve_eng_on_place(struct sim_serve_eng *e, uint32_t k)
{
    if (e->reps[k].state != REP_WAITING)
        return;
    if (e->npending == e->pending_head && fits(e)) {
        place_now(e, k);
        return;
    }
    if (vec_grow((void **)&e->pending, &e->cappending, e->npending + 1, sizeof(*e->pending))) {
        sim_serve_eng_oom(e);
        return;
    }
    e->pending[e->npending++] = k;
}

static void place_pending(struct sim_serve_eng *e)
{
    while (e->pending_head < e->npending) {
        uint32_t k = e->pending[e->pending_head];
        if (e->reps[k].state == REP_WAITING && !fits(e))
            break;
        e->pending_head++;
        if (e->reps[k].state == REP_WAITING)
            place_now(e, k);
    }
}

static void end_replica(struct sim_serve_eng *e, uint32_t k)
{
    struct sim_replica_span *s = &e->out->replicas[k];
    uint8_t was = e->reps[k].state;
    set_state(e, k, REP_ENDED);
    s->end_ms = e->now;
    if (was == REP_WAITING)
        s->start_ms = e->now; /* never placed: no GPU time */
    else
        e->gpu_used -= e->svc->gpu_milli;
    for (size_t i = 0; i < e->nlive; i++)
        if (e->live[i] == k) {
            memmove(e->live + i, e->live + i + 1, (e->nlive - i - 1) * sizeof(*e->live));
            e->nlive--;
            break;
        }
    free(e->reps[k].dec);
    e->reps[k].dec = NULL;
    e->reps[k].ndec = e->reps[k].capdec = 0;
    if (was != REP_WAITING)
        place_pending(e);
}

/* A replica asked for now. */
void sim_serve_eng_ask(struct sim_serve_eng *e, bool instant, bool cold)
{
    struct sim_serve_result *o = e->out;
    size_t k = o->nreplicas;
    if (vec_grow((void **)&o->replicas, &o->caps[1], k + 1, sizeof(*o->replicas)) ||
        vec_grow((void **)&e->reps, &e->capreps, k + 1, sizeof(*e->reps)) ||
        vec_grow((void **)&e->live, &e->caplive, e->nlive + 1, sizeof(*e->live)) || !e->reps ||
        !o->replicas || !e->live) {
        sim_serve_eng_oom(e);
        return;
    }
    struct sim_replica_span *span = &o->replicas[k];
    memset(span, 0, sizeof(*span)); /* padding included: equal bit for bit (serve.h) */
    span->asked_ms = e->now;
    span->start_ms = span->ready_ms = span->end_ms = -1;
    span->cold = cold;
    e->reps[k] = (struct sim_serve_rep){.state = REP_ENDED, .instant = instant, .clock_ms = e->now};
    o->nreplicas++;
    set_state(e, (uint32_t)k, REP_WAITING);
    e->live[e->nlive++] = (uint32_t)k;
    int64_t delay =
        k < e->opts.nstart_delay && e->opts.start_delay_ms ? e->opts.start_delay_ms[k] : 0;
    if (delay > 0)
        sim_serve_eng_push_event(e, e->now + delay, EV_PLACE, (uint32_t)k, 0);
    else
        sim_serve_eng_on_place(e, (uint32_t)k);
}

/* Whether a should go before b when scaling down (plan.c's order):
 * not ready before ready, fewer in flight, then the newer. */
static bool goes_before(const struct sim_serve_eng *e, uint32_t a, uint32_t b)
{
    const struct sim_serve_rep *x = &e->reps[a], *y = &e->reps[b];
    bool xr = x->state == REP_READY, yr = y->state == REP_READY;
    if (xr != yr)
        return !xr;
    if (x->inflight != y->inflight)
        return x->inflight < y->inflight;
    return a > b;
}

static void stop_one(struct sim_serve_eng *e)
{
    uint32_t best = NONE;
    for (size_t i = 0; i < e->nlive; i++) {
        uint32_t k = e->live[i];
        if (e->reps[k].state == REP_DRAINING)
            continue;
        if (best == NONE || goes_before(e, k, best))
            best = k;
    }
    if (best == NONE)
        return;
    struct sim_serve_rep *r = &e->reps[best];
    if (r->state != REP_READY || r->inflight == 0) {
        end_replica(e, best); /* cancelled, or drained already */
        return;
    }
    set_state(e, best, REP_DRAINING);
    r->drain_ms = e->now;
    sim_serve_eng_push_event(e, e->now + e->svc->drain_timeout_ms, EV_DRAIN, best, 0);
}

static void fail_list(struct sim_serve_eng *e, struct sim_serve_list *l)
{
    while (l->n)
        sim_serve_eng_finish(e, sim_serve_eng_list_pop(e, l), SIM_REQ_FAILED);
}

void sim_serve_eng_on_drain_timeout(struct sim_serve_eng *e, uint32_t k)
{
    struct sim_serve_rep *r = &e->reps[k];
    if (r->state != REP_DRAINING)
        return;
    fail_list(e, &r->wait);
    fail_list(e, &r->pre);
    for (size_t i = 0; i < r->ndec; i++)
        sim_serve_eng_finish(e, r->dec[i].req, SIM_REQ_FAILED);
    e->inflight -= r->inflight;
    r->inflight = r->running = 0;
    r->ndec = 0;
    end_replica(e, k);
}

/* Starts or stops replicas until ready + starting is `desired`. */
void sim_serve_eng_apply(struct sim_serve_eng *e, int32_t desired)
{
    e->desired = desired;
    int32_t live = e->nwaiting + e->nstarting + e->nready;
    for (int32_t n = live; n < desired && !e->rc; n++)
        sim_serve_eng_ask(e, false, n == 0);
    for (int32_t n = live; n > desired; n--)
        stop_one(e);
}

/*
 * serve.c - the discrete-event replay of a request trace (serve.h).
 *
 * One clock in ms; the next event is the earliest of the heap's (prefill
 * ends, decode completions, placements, readiness, drain timeouts), the
 * router queue's head timing out, the next tick and the next arrival; at
 * equal times in that order, so that a replica freed or made ready at t
 * takes what waits before it times out, and a tick at t reports [t - 1 s, t)
 * without the arrivals at t.
 *
 * Decisions the header leaves open:
 *  - The prefill yields the first token; the decode then produces the other
 *    output_tokens - 1 (none for 0 or 1). TPOT is (last - first) over those.
 *  - Event times are whole ms: a prefill or a decode ends at the first ms at
 *    or after its exact time.
 *  - Autoscaled policies start from the spec's min replicas, ready at 0, as
 *    a service that ran before the trace did (static fleets likewise); the
 *    delays and the cap apply to them as to any replica.
 *  - The immediate decision for a request queued with no replica ready or
 *    starting decides without a new observation (the tick observes).
 *  - A drained replica with nothing in flight ends at once; a cancelled
 *    starting one too (the controller's one-tick wait is the routers').
 *  - Ticks of a long idle stretch (nothing in flight, no change, for longer
 *    than the policy's windows and delays) are skipped but for the last
 *    stretch of that length before the next arrival, which is replayed:
 *    the decisions are the same, there is no sample for the skipped ones.
 *  - queue_timeout_ms <= 0: no timeout. Requests left waiting for a replica
 *    that can never be placed (gpu_cap_milli below one replica) time out
 *    when nothing else can happen.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/vec.h"
#include "sim/serve_int.h"
#include "base/banned.h"

/* Past the windows and delays: the rate limits' steps down (halving per
 * decision from at most 1000 replicas) and a few ticks to spare. */
#define QUIET_MARGIN_MS 20000

/* ---- the router and the decisions -------------------------------------------------- */

/* The replica the router sends the next request to, or NONE. */
static uint32_t pick(const struct sim_serve_eng *e)
{
    uint32_t best = NONE;
    uint32_t limit = e->svc->concurrency_limit;
    for (size_t i = 0; i < e->nlive; i++) {
        uint32_t k = e->live[i];
        const struct sim_serve_rep *r = &e->reps[k];
        if (r->state != REP_READY || (limit && (uint32_t)r->inflight >= limit))
            continue;
        if (best == NONE || r->inflight < e->reps[best].inflight)
            best = k;
    }
    return best;
}

void sim_serve_eng_route_queued(struct sim_serve_eng *e)
{
    while (e->router.n) {
        uint32_t k = pick(e);
        if (k == NONE)
            return;
        sim_serve_eng_send(e, sim_serve_eng_list_pop(e, &e->router), k);
    }
}

/* The policy's count now; `tick` when it is the second's report (else the
 * router's wake-up for a request with no replica). */
static void decide(struct sim_serve_eng *e, bool tick)
{
    int32_t queued = (int32_t)e->router.n;
    if (e->kind == SIM_SERVE_RAYSERVE) {
        if (tick && e->now - e->ray.last_metrics_ms >= SIM_RAYSERVE_METRICS_MS) {
            double span = (double)(e->now - e->ray_from_ms);
            sim_rayserve_observe(&e->ray, e->now,
                                 (int64_t)llround(span > 0 ? e->area_ray * 1000.0 / span : 0));
            e->area_ray = 0;
            e->ray_from_ms = e->now;
        }
        sim_serve_eng_apply(e, sim_rayserve_decide(&e->ray, e->svc, e->now, e->nready,
                                                   e->nwaiting + e->nstarting + e->nready, queued));
        return;
    }
    if (tick) {
        int64_t value;
        if (e->spec.metric == AUTOSCALE_METRIC_RPS) {
            value = (int64_t)e->arrivals_tick * 1000;
        } else if (e->spec.metric == AUTOSCALE_METRIC_REPLICA) {
            value = 0;
            for (size_t i = 0; i < e->nlive; i++)
                if (e->reps[e->live[i]].state == REP_READY)
                    value += (int64_t)e->reps[e->live[i]].inflight * 1000;
        } else {
            value = (int64_t)llround(e->area_tick * 1000.0 / TICK_MS);
        }
        autoscale_observe(e->as, e->now, value);
        autoscale_observe_load(e->as, e->now, (int64_t)e->arrivals_tick * 1000, queued);
    }
    struct autoscale_input in = {.spec = &e->spec,
                                 .now_ms = e->now,
                                 .ready = e->nready,
                                 .starting = e->nstarting + e->nwaiting,
                                 .draining = e->ndraining,
                                 .queued = queued};
    struct autoscale_decision d;
    autoscale_decide(e->as, &in, &d);
    sim_serve_eng_apply(e, d.desired);
}

static bool autoscaled(const struct sim_serve_eng *e)
{
    return e->kind == SIM_SERVE_DEFAULT || e->kind == SIM_SERVE_KNATIVE ||
           e->kind == SIM_SERVE_RAYSERVE;
}

static void on_tick(struct sim_serve_eng *e)
{
    if (autoscaled(e))
        decide(e, true);
    struct sim_serve_result *o = e->out;
    if (vec_grow((void **)&o->samples, &o->caps[2], o->nsamples + 1, sizeof(*o->samples))) {
        sim_serve_eng_oom(e);
        return;
    }
    /* Field by field over zeroed bytes: the padding too is the same on every
     * run (the results are equal bit for bit, serve.h). */
    struct sim_serve_sample *x = &o->samples[o->nsamples++];
    memset(x, 0, sizeof(*x));
    x->t_ms = e->now;
    x->desired = e->desired;
    x->ready = e->nready;
    x->starting = e->nstarting + e->nwaiting;
    x->draining = e->ndraining;
    x->inflight = (int32_t)e->inflight;
    x->queued = (int32_t)e->router.n;
    x->arrivals = e->arrivals_tick;
    bool idle = !e->busy && !e->inflight && !e->router.n && !e->nwaiting && !e->nstarting &&
                !e->ndraining && e->desired == e->nready;
    e->idle_ticks = idle ? e->idle_ticks + 1 : 0;
    e->busy = false;
    e->area_tick = 0;
    e->arrivals_tick = 0;
    e->next_tick += TICK_MS;
}

static void on_arrival(struct sim_serve_eng *e)
{
    uint32_t req = (uint32_t)e->next_arrival++;
    e->arrivals_tick++;
    uint32_t k = e->router.n ? NONE : pick(e);
    if (k != NONE) {
        sim_serve_eng_send(e, req, k);
        return;
    }
    if (e->router.n >= e->svc->queue_limit) {
        sim_serve_eng_finish(e, req, SIM_REQ_DROPPED);
        return;
    }
    sim_serve_eng_list_push(e, &e->router, req);
    if (autoscaled(e) && e->nwaiting + e->nstarting + e->nready == 0)
        decide(e, false);
}

/* ---- the loop ---------------------------------------------------------------------- */

enum next { N_HEAP, N_TIMEOUT, N_TICK, N_ARRIVAL, N_STUCK };

static enum next next_event(const struct sim_serve_eng *e, int64_t *at)
{
    bool arrivals = e->next_arrival < e->t->n;
    bool timeouts = e->router.n && e->svc->queue_timeout_ms > 0;
    /* Nothing in the heap, no arrival, no timeout, and every replica in line
     * for GPUs that only an ending replica frees: nothing can happen. */
    if (!e->nev && !arrivals && !timeouts && e->router.n && e->nlive > 0 &&
        e->nwaiting == (int32_t)e->nlive)
        return N_STUCK;
    int64_t best = e->next_tick;
    enum next what = N_TICK;
    if (e->nev && e->ev[0].t_ms <= best) {
        best = e->ev[0].t_ms;
        what = N_HEAP;
    }
    if (timeouts) {
        int64_t t = e->out->requests[e->router.head].arrival_ms + e->svc->queue_timeout_ms;
        if (t < best || (t == best && what == N_TICK)) {
            best = t;
            what = N_TIMEOUT;
        }
    }
    if (arrivals && e->t->v[e->next_arrival].arrival_ms < best) {
        best = e->t->v[e->next_arrival].arrival_ms;
        what = N_ARRIVAL;
    }
    *at = best;
    return what;
}

static void advance(struct sim_serve_eng *e, int64_t t)
{
    double load = (double)(e->inflight + e->router.n) * (double)(t - e->now);
    e->area_tick += load;
    e->area_ray += load;
    e->now = t;
}

/* Idle long enough that the policy's state is settled: the ticks up to
 * quiet_ms before the next arrival are skipped (no sample), those after it
 * replayed, so that the decisions are those of every tick. */
static void skip_idle(struct sim_serve_eng *e)
{
    if (e->nev || e->next_arrival >= e->t->n || e->idle_ticks * TICK_MS < e->quiet_ms)
        return;
    int64_t to = (e->t->v[e->next_arrival].arrival_ms - e->quiet_ms) / TICK_MS * TICK_MS;
    if (to > e->next_tick) {
        e->now = to - TICK_MS; /* nothing in flight: no load to add up */
        e->next_tick = to;
    }
    e->idle_ticks = 0;
}

static void loop(struct sim_serve_eng *e)
{
    while (e->nfinished < e->t->n && !e->rc) {
        int64_t at = 0;
        skip_idle(e);
        enum next what = next_event(e, &at);
        if (what == N_STUCK) {
            while (e->router.n) /* no replica will ever take them */
                sim_serve_eng_finish(e, sim_serve_eng_list_pop(e, &e->router), SIM_REQ_TIMEOUT);
            return;
        }
        advance(e, at);
        e->busy = e->busy || what != N_TICK;
        if (what == N_TIMEOUT) {
            sim_serve_eng_finish(e, sim_serve_eng_list_pop(e, &e->router), SIM_REQ_TIMEOUT);
        } else if (what == N_TICK) {
            on_tick(e);
        } else if (what == N_ARRIVAL) {
            on_arrival(e);
        } else {
            struct sim_serve_event ev = sim_serve_eng_pop_event(e);
            if (ev.kind == EV_PREFILL)
                sim_serve_eng_on_prefill(e, ev.rep, ev.arg);
            else if (ev.kind == EV_DECODE)
                sim_serve_eng_on_decode(e, ev.rep, ev.arg);
            else if (ev.kind == EV_READY)
                sim_serve_eng_on_ready(e, ev.rep);
            else if (ev.kind == EV_PLACE)
                sim_serve_eng_on_place(e, ev.rep);
            else
                sim_serve_eng_on_drain_timeout(e, ev.rep);
        }
    }
}

/* ---- setup ------------------------------------------------------------------------- */

static int check_service(const struct sim_serve_service *svc, char *err, size_t errlen)
{
    const struct sim_replica_model *m = &svc->model;
    const char *field = NULL, *want = NULL;
    if (!(m->prefill_tps > 0))
        field = "simulate.prefill_tps", want = "> 0";
    else if (!(m->decode_tps > 0))
        field = "simulate.decode_tps", want = "> 0";
    else if (!(m->decode_tps_request > 0) || m->decode_tps_request > m->decode_tps)
        field = "simulate.decode_tps_request", want = "> 0 and <= decode_tps";
    else if (m->max_batch < 1 || m->max_batch > 4096)
        field = "simulate.max_batch", want = "1 .. 4096";
    else if (m->startup_ms < 0)
        field = "simulate.startup_s", want = ">= 0";
    else if (svc->gpu_milli <= 0)
        field = "gpus", want = "> 0";
    else if (svc->autoscale.max < 1 || svc->autoscale.max > AUTOSCALE_REPLICAS_MAX ||
             svc->autoscale.min < 0 || svc->autoscale.min > svc->autoscale.max)
        field = "autoscaling", want = "0 <= min <= max, 1 <= max <= 1000";
    else if (svc->autoscale.target_milli <= 0)
        field = "autoscaling.target", want = "> 0";
    else if (svc->drain_timeout_ms < 0)
        field = "drain_timeout_s", want = ">= 0";
    if (!field)
        return 0;
    snprintf(err, errlen, "service %s: %s: expected %s", svc->name, field, want);
    return GPO_EINVAL;
}

/* How long an idle KPA service takes to settle: its windows, delay and
 * grace, and with the startup's rules (autoscale.h) a delay of at least the
 * startup and one step down per startup, from max to 0 at the down rate. */
static int64_t kpa_quiet_ms(const struct autoscale_spec *s, int64_t startup_ms)
{
    int64_t delay = s->scale_down_delay_ms, steps = 0;
    if (s->headroom) {
        delay = delay > startup_ms ? delay : startup_ms;
        int64_t rate = s->max_down_rate_pct > 100 ? s->max_down_rate_pct : 100;
        for (int64_t n = s->max; n > 0; steps++) {
            int64_t down = n * 100 / rate;
            n = down < n ? down : n - 1;
        }
    }
    return s->stable_window_ms + s->panic_window_ms + delay + s->zero_grace_ms +
           steps * startup_ms + QUIET_MARGIN_MS;
}

static int setup(struct sim_serve_eng *e, char *err, size_t errlen)
{
    struct sim_serve_result *o = e->out;
    size_t n = e->t->n;
    if (n > UINT32_MAX - 1) {
        snprintf(err, errlen, "service %s: expected at most %u requests", e->svc->name,
                 UINT32_MAX - 1);
        return GPO_E2BIG;
    }
    o->requests = gpo_calloc(n ? n : 1, sizeof(*o->requests));
    e->next = gpo_calloc(n ? n : 1, sizeof(*e->next));
    if (!o->requests || !e->next)
        return GPO_ENOMEM;
    o->caps[0] = n;
    o->nrequests = n;
    for (size_t k = 0; k < n; k++) { /* over calloc's zeroes, padding included */
        o->requests[k].arrival_ms = e->t->v[k].arrival_ms;
        o->requests[k].first_token_ms = -1;
        o->requests[k].end_ms = -1;
        o->requests[k].output_tokens = e->t->v[k].output_tokens;
    }
    int32_t initial = e->svc->autoscale.min;
    if (e->kind == SIM_SERVE_DEFAULT || e->kind == SIM_SERVE_KNATIVE) {
        struct sim_serve_policy pol = {.kind = e->kind};
        sim_serve_policy_kpa_spec(&pol, e->svc, &e->spec);
        e->as = gpo_malloc(sizeof(*e->as));
        if (!e->as)
            return GPO_ENOMEM;
        autoscale_state_init(e->as, 0);
        initial = e->spec.min;
        e->quiet_ms = kpa_quiet_ms(&e->spec, e->m->startup_ms);
    } else if (e->kind == SIM_SERVE_RAYSERVE) {
        sim_rayserve_init(&e->ray);
        e->quiet_ms = SIM_RAYSERVE_QUIET_MS + QUIET_MARGIN_MS;
    } else if (e->kind == SIM_SERVE_STATIC_PEAK || e->kind == SIM_SERVE_STATIC_MEAN ||
               e->kind == SIM_SERVE_STATIC_FIXED) {
        initial = e->kind == SIM_SERVE_STATIC_FIXED ? e->fixed
                                                    : sim_serve_static_size(e->t, e->svc, e->kind);
        e->quiet_ms = QUIET_MARGIN_MS;
        if (initial < 1 && n) {
            snprintf(err, errlen, "service %s: a static fleet of 0 replicas for %zu requests",
                     e->svc->name, n);
            return GPO_EINVAL;
        }
    } else {
        snprintf(err, errlen, "service %s: unknown policy kind %d", e->svc->name, (int)e->kind);
        return GPO_EINVAL;
    }
    for (int32_t k = 0; k < initial && !e->rc; k++)
        sim_serve_eng_ask(e, true, false);
    e->desired = initial;
    e->next_tick = TICK_MS;
    return e->rc;
}

static void teardown(struct sim_serve_eng *e)
{
    for (size_t k = 0; e->reps && k < e->out->nreplicas; k++)
        free(e->reps[k].dec);
    free(e->reps);
    free(e->live);
    free(e->pending);
    free(e->ev);
    free(e->next);
    free(e->as);
}

int sim_serve_run(const struct sim_reqtrace *t, const struct sim_serve_service *svc,
                  const struct sim_serve_policy *pol, const struct sim_serve_opts *opts,
                  struct sim_serve_result *out, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    int rc = check_service(svc, err, errlen);
    if (rc)
        return rc;
    struct sim_serve_eng e = {.t = t,
                              .svc = svc,
                              .m = &svc->model,
                              .kind = pol->kind,
                              .fixed = pol->replicas,
                              .out = out};
    if (opts)
        e.opts = *opts;
    rc = setup(&e, err, errlen);
    if (!rc)
        loop(&e);
    rc = rc ? rc : e.rc;
    out->end_ms = e.last_end;
    /* What still holds GPUs holds them to the end of the last request. */
    e.now = e.last_end;
    for (size_t k = 0; !rc && e.reps && k < out->nreplicas; k++) {
        struct sim_replica_span *s = &out->replicas[k];
        if (e.reps[k].state == REP_WAITING)
            s->start_ms = e.now;
        if (e.reps[k].state != REP_ENDED)
            s->end_ms = e.now;
    }
    teardown(&e);
    if (rc) {
        if (rc == GPO_ENOMEM)
            snprintf(err, errlen, "service %s: %s", svc->name, gpo_strerror(rc));
        sim_serve_result_release(out);
    }
    return rc;
}

/*
 * serve_int.h - the serving replay's engine state, shared by its two halves
 * (private to src/sim): serve.c (the router, the decisions, the loop) and
 * serve_replica.c (the replicas: batching, placement, drains, and the event
 * heap).
 */
#ifndef GPUORCH_SIM_SERVE_INT_H
#define GPUORCH_SIM_SERVE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "core/autoscale.h"
#include "sim/serve.h"
#include "sim/serve_policy.h"

#define NONE    UINT32_MAX
#define TICK_MS 1000

/* In their order at equal times: completions free slots before anything
 * else looks at them. */
enum { EV_PREFILL, EV_DECODE, EV_READY, EV_PLACE, EV_DRAIN };

struct sim_serve_event {
    int64_t t_ms;
    uint64_t seq;      /* push order: ties broken deterministically */
    uint32_t rep, arg; /* arg: the request (prefill), the generation (decode) */
    uint8_t kind;
};

/* A decoding request: where the replica's token clock finishes it. */
struct sim_serve_dec {
    double fin;
    uint32_t req;
};

enum rep_state { REP_WAITING, REP_STARTING, REP_READY, REP_DRAINING, REP_ENDED };

/* A FIFO of requests linked through eng.next. */
struct sim_serve_list {
    uint32_t head, tail, n;
};

struct sim_serve_rep {
    uint8_t state;
    bool instant;               /* ready once placed (a fleet there before the trace) */
    bool prefilling;            /* the head of `pre` is in its prefill */
    int32_t inflight;           /* sent to it, not finished */
    int32_t running;            /* in `pre` or decoding: at most max_batch */
    struct sim_serve_list wait; /* beyond max_batch, in arrival order */
    struct sim_serve_list pre;  /* running, before their first token, in order */
    struct sim_serve_dec *dec;  /* decoding: a min-heap on fin */
    size_t ndec, capdec;
    double clock;     /* tokens each decoding request has received since the clock began */
    int64_t clock_ms; /* when clock was last brought up to date */
    double rate;      /* tokens per second of each decoding request now */
    uint32_t gen;     /* of the decode event in the heap */
    int64_t drain_ms;
};

struct sim_serve_eng {
    const struct sim_reqtrace *t;
    const struct sim_serve_service *svc;
    const struct sim_replica_model *m;
    enum sim_serve_kind kind;
    int32_t fixed; /* static:N: N */
    struct sim_serve_opts opts;
    struct sim_serve_result *out;
    int rc; /* GPO_ENOMEM once an allocation failed: the run stops */

    struct autoscale_spec spec; /* default, knative */
    struct autoscale_state *as;
    struct sim_rayserve_state ray;

    struct sim_serve_event *ev;
    size_t nev, capev;
    uint64_t seq;

    struct sim_serve_rep *reps; /* parallel to out->replicas */
    size_t capreps;
    uint32_t *live; /* replicas not ended, in start order */
    size_t nlive, caplive;
    uint32_t *pending; /* waiting to be placed (cap), in order; ended ones skipped */
    size_t npending, pending_head, cappending;
    int32_t nwaiting, nstarting, nready, ndraining;
    int64_t gpu_used;

    uint32_t *next;               /* per request: its successor in a list */
    struct sim_serve_list router; /* queued at the router */
    size_t next_arrival, nfinished;
    int64_t now, last_end;
    int64_t inflight;           /* at replicas */
    double area_tick, area_ray; /* (in flight + queued) * ms since the tick, the report */
    int64_t ray_from_ms;
    int32_t arrivals_tick;
    int32_t desired;
    int64_t next_tick;
    bool busy;          /* something happened since the last tick */
    int64_t idle_ticks; /* ticks in a row with nothing in flight and nothing changed */
    int64_t quiet_ms;   /* idle this long: the policy's state no longer changes */
};

static inline void sim_serve_eng_oom(struct sim_serve_eng *e)
{
    e->rc = GPO_ENOMEM;
}

static inline void sim_serve_eng_list_push(struct sim_serve_eng *e, struct sim_serve_list *l,
                                           uint32_t req)
{
    e->next[req] = NONE;
    if (l->n++)
        e->next[l->tail] = req;
    else
        l->head = req;
    l->tail = req;
}

static inline uint32_t sim_serve_eng_list_pop(struct sim_serve_eng *e, struct sim_serve_list *l)
{
    uint32_t req = l->head;
    l->head = e->next[req];
    l->n--;
    return req;
}

/* serve_replica.c: the heap, the requests' ends, the replicas. */
void sim_serve_eng_push_event(struct sim_serve_eng *e, int64_t t_ms, uint8_t kind, uint32_t rep,
                              uint32_t arg);
struct sim_serve_event sim_serve_eng_pop_event(struct sim_serve_eng *e);
/* A request's outcome, at e->now (its SLO checked when DONE). */
void sim_serve_eng_finish(struct sim_serve_eng *e, uint32_t req, enum sim_req_outcome outcome);
/* Request req to replica k (ready, below its limit). */
void sim_serve_eng_send(struct sim_serve_eng *e, uint32_t req, uint32_t k);
void sim_serve_eng_on_prefill(struct sim_serve_eng *e, uint32_t k, uint32_t req);
void sim_serve_eng_on_decode(struct sim_serve_eng *e, uint32_t k, uint32_t gen);
void sim_serve_eng_on_ready(struct sim_serve_eng *e, uint32_t k);
void sim_serve_eng_on_place(struct sim_serve_eng *e, uint32_t k);
void sim_serve_eng_on_drain_timeout(struct sim_serve_eng *e, uint32_t k);
/* A new replica asked for now (instant: ready once placed; cold: a cold
 * start). */
void sim_serve_eng_ask(struct sim_serve_eng *e, bool instant, bool cold);
/* Starts or stops replicas until ready + starting is `desired`. */
void sim_serve_eng_apply(struct sim_serve_eng *e, int32_t desired);

/* serve.c: the router hands what it holds to the ready replicas. */
void sim_serve_eng_route_queued(struct sim_serve_eng *e);

#endif

/*
 * serve.h - the discrete-event replay of a request trace through a service's
 * autoscaler (`gpuorch sim --serve`, docs/simulator.md "Serving").
 *
 * The engine plays the router, the controller's serving loop and the
 * replicas, with time jumping from one event to the next:
 * - requests arrive at their trace times; the router sends each to the ready
 *   replica with the fewest in flight that is below the service's
 *   concurrency_limit (none: any ready replica), else holds it in the
 *   service's queue (queue_limit: beyond it the request is dropped;
 *   queue_timeout_ms: past it, timed out), in arrival order;
 * - a replica runs up to max_batch requests at once; more wait inside it,
 *   in arrival order. A running request's prefill (input_tokens at
 *   prefill_tps; prefills of one replica run one at a time, in order) ends
 *   with its first token; its decode then shares the batch's decode rate:
 *   each of b decoding requests gets min(decode_tps / b, decode_tps_request)
 *   tokens per second, recomputed whenever b changes (continuous batching);
 * - every tick (1 s) the router's report is what the controller's is: the
 *   service's concurrency (in flight plus queued, averaged over the tick),
 *   its requests per second, and its queued count; the policy then decides
 *   the count, exactly as the controller calls src/core/autoscale (the
 *   metric with autoscale_observe, the requests per second and the queue
 *   with autoscale_observe_load; policies of its own for rayserve and the
 *   static fleets, serve_policy.h);
 * - a replica asked for starts when it is placed (at once, unless
 *   opts.gpu_cap_milli or opts.start_delay_ms say otherwise) and is ready
 *   startup_ms later; autoscale_startup learns that time, as the controller
 *   does from its replicas. Scaling down drains the replicas with the fewest
 *   in flight: no new request, the running ones finish (up to
 *   drain_timeout_ms: then they fail), then the replica's GPUs are free;
 * - a start while the service had no replica ready or starting is a cold
 *   start.
 * GPU-hours: each replica's gpu_milli from its start to its end (the end of
 * its drain), within [0, the end of the last request]. Static fleets are ready
 * at 0 and count over the same span.
 *
 * Deterministic: the same input gives the same result, bit for bit.
 */
#ifndef GPUORCH_SIM_SERVE_H
#define GPUORCH_SIM_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/autoscale.h"
#include "sim/reqtrace.h"

#define SIM_SERVE_NAME_MAX 128

/* How fast one replica serves: the spec's `simulate:` section. */
struct sim_replica_model {
    double prefill_tps;        /* > 0: prompt tokens per second (one prefill at a time) */
    double decode_tps;         /* > 0: a batch's total decode rate, tokens per second */
    double decode_tps_request; /* > 0 and <= decode_tps: the most one request decodes at */
    int32_t max_batch;         /* 1 .. 4096: requests running at once */
    int64_t startup_ms;        /* >= 0: from placement to ready (the model load) */
};

/* A request meets the SLO when it completed and met every part that is set
 * (> 0); a dropped, timed-out or failed request misses it. */
struct sim_slo {
    int64_t ttft_ms; /* arrival to first token */
    int64_t tpot_ms; /* mean time per output token after the first */
    int64_t e2e_ms;  /* arrival to last token */
};

/* What the engine needs of a service (serve_spec.h fills it from the YAML
 * of `gpuorch service apply -f` plus its `simulate:` section). */
struct sim_serve_service {
    char name[SIM_SERVE_NAME_MAX + 1];
    struct autoscale_spec autoscale; /* the spec's: min, max, metric, target, windows, rates */
    uint32_t concurrency_limit;      /* per replica at the router; 0: none */
    uint32_t queue_limit;            /* requests the router holds; default 1000 */
    int64_t queue_timeout_ms;        /* default 60000 */
    int64_t drain_timeout_ms;        /* default 30000 */
    int64_t gpu_milli;               /* GPUs per replica, milli (1000: one GPU) */
    struct sim_replica_model model;
    struct sim_slo slo;
};

struct sim_serve_policy; /* serve_policy.h */

struct sim_serve_opts {
    /* At most this many GPU milli hold replicas at once (a split: the GPUs
     * reserved for serving); a replica beyond it waits, as one the scheduler
     * cannot place. 0: no cap. */
    int64_t gpu_cap_milli;
    /* The k-th replica started waits start_delay_ms[k] more before its
     * startup begins (the shared cluster's placement delays, from the job
     * replay); past nstart_delay, none. May be NULL. */
    const int64_t *start_delay_ms;
    size_t nstart_delay;
};

enum sim_req_outcome {
    SIM_REQ_DONE = 0,
    SIM_REQ_DROPPED, /* the router's queue was full */
    SIM_REQ_TIMEOUT, /* waited past queue_timeout_ms at the router */
    SIM_REQ_FAILED,  /* its replica's drain timed out under it */
};

struct sim_request_result {
    int64_t arrival_ms;
    int64_t first_token_ms; /* -1: never */
    int64_t end_ms;         /* -1: never */
    int32_t output_tokens;
    uint8_t outcome; /* enum sim_req_outcome */
    bool slo_met;
};

struct sim_replica_span {
    int64_t asked_ms; /* the policy asked for it */
    int64_t start_ms; /* placed: its GPUs held from here */
    int64_t ready_ms; /* -1: never became ready */
    int64_t end_ms;   /* its GPUs free again */
    bool cold;        /* a cold start (no replica ready or starting before it) */
};

/* The service after each tick. */
struct sim_serve_sample {
    int64_t t_ms;
    int32_t desired, ready, starting, draining;
    int32_t inflight, queued;
    int32_t arrivals; /* requests that arrived during the tick */
};

struct sim_serve_result {
    struct sim_request_result *requests; /* one per trace request, in trace order */
    size_t nrequests;
    struct sim_replica_span *replicas; /* in start order */
    size_t nreplicas;
    struct sim_serve_sample *samples; /* one per tick, in time order */
    size_t nsamples;
    int64_t end_ms; /* the end of the last request (the span GPU-hours count over) */
    size_t caps[3]; /* private: capacities of the arrays above */
};

void sim_serve_result_init(struct sim_serve_result *r);
void sim_serve_result_release(struct sim_serve_result *r);

/* Replays `t` through `svc` under `pol`. opts may be NULL (no cap, no
 * delays). 0; GPO_EINVAL with one line in `err` (a service the engine
 * cannot run, say a static fleet of 0 for a trace with requests);
 * GPO_ENOMEM. *out must be initialised and empty. */
int sim_serve_run(const struct sim_reqtrace *t, const struct sim_serve_service *svc,
                  const struct sim_serve_policy *pol, const struct sim_serve_opts *opts,
                  struct sim_serve_result *out, char *err, size_t errlen);

/* The figures of one replay: `--json`'s fields. */
struct sim_serve_summary {
    const char *policy, *service; /* borrowed */
    size_t requests, completed, dropped, timed_out, failed;
    double slo_attainment; /* 0..1: requests that met the SLO over all requests */
    double ttft_p50_s, ttft_p99_s, e2e_p50_s, e2e_p99_s, tpot_p50_s; /* completed requests */
    size_t cold_starts;
    double gpu_hours;
    double replicas_mean; /* time-weighted over [0, end_ms]: replicas holding GPUs */
    int32_t replicas_max;
};

/* 0 or GPO_ENOMEM. Borrows `policy` and svc->name. */
int sim_serve_summarize(const struct sim_serve_result *r, const struct sim_serve_service *svc,
                        const char *policy, struct sim_serve_summary *ret);

#endif

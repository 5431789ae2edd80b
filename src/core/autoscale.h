/*
 * autoscale.h - how many replicas a service should have: the pure
 * autoscaler the controller and the simulator both drive.
 *
 * In: a service's observations (one value per second or so, summed over the
 * routers: concurrency, requests per second, or a metric its replicas
 * export), its replicas (ready, starting, draining), its spec and `now`.
 * Out: the desired count and the reason, for people. Deterministic, no I/O,
 * no clock, no allocation: the state is a fixed-size struct the caller owns
 * (and may copy, to replay).
 *
 * Values are integers in thousandths (milli): a concurrency of 2.5 requests
 * in flight is 2500, 10 requests per second is 10000, a metric of 0.75 is
 * 750. Times are ms.
 *
 * The default algorithm keeps Knative's KPA (a stable window and a panic
 * window; panic when the panic window's want reaches panic_threshold times
 * the ready count; no scale-down in panic; rate limits; scale-down delay;
 * scale to zero only after the grace with no request) and goes past it where
 * GPUs differ from pods: it knows a replica's measured startup time and adds
 * the replicas the traffic's recent growth will want by the time a new one is
 * ready (docs/serving.md, "The autoscaler").
 */
#ifndef GPUORCH_CORE_AUTOSCALE_H
#define GPUORCH_CORE_AUTOSCALE_H

#include <stdbool.h>
#include <stdint.h>

#define AUTOSCALE_METRIC_MAP(X)                                                                    \
    X(CONCURRENCY, "concurrency")                                                                  \
    X(RPS, "rps")                                                                                  \
    X(REPLICA, "replica")
enum autoscale_metric {
#define AUTOSCALE_METRIC_ENUM(name, text) AUTOSCALE_METRIC_##name,
    AUTOSCALE_METRIC_MAP(AUTOSCALE_METRIC_ENUM)
#undef AUTOSCALE_METRIC_ENUM
        AUTOSCALE_NMETRICS
};
/* "concurrency", "rps", "replica"; NULL out of range. */
const char *autoscale_metric_name(enum autoscale_metric m);
/* The metric named `name`, or GPO_EINVAL. */
int autoscale_metric_parse(const char *name);

/* The longest stable window the state holds (one bucket per second). */
#define AUTOSCALE_WINDOW_MAX_MS (3600 * 1000LL)
#define AUTOSCALE_BUCKETS       3600
/* Replicas a service may have. */
#define AUTOSCALE_REPLICAS_MAX 1000

struct autoscale_spec {
    enum autoscale_metric metric;
    int64_t target_milli;        /* per replica, > 0 */
    int32_t min, max;            /* 0 <= min <= max <= AUTOSCALE_REPLICAS_MAX, max >= 1 */
    int64_t stable_window_ms;    /* 6 s .. AUTOSCALE_WINDOW_MAX_MS */
    int64_t panic_window_ms;     /* 1 s .. stable_window_ms */
    int32_t panic_threshold_pct; /* > 100: panic when want >= this % of ready */
    int32_t max_up_rate_pct;     /* >= 100: at most ready * this / 100 per decision */
    int32_t max_down_rate_pct;   /* >= 100: at least ready * 100 / this per decision */
    int64_t scale_down_delay_ms; /* the highest want over this long holds */
    int64_t zero_grace_ms;       /* no request for this long before 0 */
    bool headroom;               /* add what grows during a startup (the GPU part) */
};

/* Fills *spec with gpuorch's defaults (docs/serving.md lists them beside
 * Knative's and Ray Serve's). */
void autoscale_spec_default(struct autoscale_spec *spec);

/* The carry-over state of one service. Fixed size; zero it with
 * autoscale_state_init. Members are the implementation's. */
struct autoscale_bucket {
    int64_t at_s;                /* the second it covers; INT64_MIN: empty */
    int64_t sum;                 /* sum of the values observed in it, milli */
    int32_t count;               /* how many */
    int32_t loads;               /* how many autoscale_observe_load reports */
    int64_t rps_sum, queued_sum; /* their sums: requests per second (milli), requests queued */
};
struct autoscale_state {
    struct autoscale_bucket buckets[AUTOSCALE_BUCKETS];
    int64_t panic_since_ms;   /* INT64_MIN: not in panic */
    int32_t panic_peak;       /* the highest want while in panic */
    int64_t last_request_ms;  /* the last time a value > 0 (or a queued request) was seen */
    int64_t startup_ms;       /* measured startup (moving mean); 0: none measured yet */
    int32_t startups;         /* how many were measured */
    int32_t last_desired;     /* the previous decision's count */
    int64_t last_decision_ms; /* INT64_MIN: none yet */
    int64_t last_down_ms;     /* the last decision that lowered the count; INT64_MIN: none */
    double service_s;         /* requests' time at the replicas (Little's law); 0: not known */
    struct {
        int64_t at_ms;
        int32_t want;
    } recent[64]; /* wants within the scale-down delay (a ring) */
    uint32_t nrecent, recent_head;
};

void autoscale_state_init(struct autoscale_state *st, int64_t now_ms);

/* One observation: the service's whole value at at_ms (the sum over its
 * routers or replicas), milli, >= 0. Older than the window: ignored. */
void autoscale_observe(struct autoscale_state *st, int64_t at_ms, int64_t value_milli);

/* The service's load at at_ms besides its metric, from the same reports:
 * requests arriving per second (milli, >= 0) and requests queued at the
 * routers for want of a replica. Optional: with the metric concurrency and
 * the startup's rules (below), it lets a backlog count as the work it is
 * rather than as concurrency to staff (docs/serving.md, "Backlog"). Older
 * than the window: ignored. */
void autoscale_observe_load(struct autoscale_state *st, int64_t at_ms, int64_t rps_milli,
                            int64_t queued);

/* A replica became ready startup_ms after it was started: feeds the
 * measured startup time the headroom uses. */
void autoscale_startup(struct autoscale_state *st, int64_t startup_ms);

struct autoscale_input {
    const struct autoscale_spec *spec; /* borrowed */
    int64_t now_ms;
    int32_t ready, starting, draining; /* the service's replicas now */
    int32_t queued;                    /* requests held at the routers for want of a replica */
};

struct autoscale_decision {
    int32_t desired;  /* min..max */
    bool panic;       /* in panic after this decision */
    char reason[200]; /* "3 -> 5: concurrency 9.6 over target 2 for 6 s (panic)" */
};

/* The desired count now. Updates the state (panic, the recent wants, the
 * last decision). A queued request with no replica scales 0 -> 1 at once,
 * whatever the windows say. */
void autoscale_decide(struct autoscale_state *st, const struct autoscale_input *in,
                      struct autoscale_decision *out);

#endif

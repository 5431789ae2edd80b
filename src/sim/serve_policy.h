/*
 * serve_policy.h - the autoscaling policies `gpuorch sim --serve` compares
 * (docs/simulator.md "Serving policies", each anchor's rule cited from its
 * documentation):
 *
 *   default      gpuorch's autoscaler (src/core/autoscale) with the service
 *                spec's settings: the controller's exact decisions;
 *   knative      Knative's KPA through the same core with the startup
 *                headroom off and Knative's documented defaults in place of
 *                the spec's: stable window 60 s, panic window 6 s (10 %),
 *                panic threshold 200 %, target 70 % of the per-replica
 *                concurrency (container-concurrency-target-percentage), max
 *                scale up rate 1000, max scale down rate 2, scale-to-zero
 *                grace 30 s, no scale-down delay; min and max the spec's;
 *   rayserve     Ray Serve's autoscaling rule and defaults
 *                (target_ongoing_requests 2, upscale_delay_s 30,
 *                downscale_delay_s 600, look_back_period_s 30,
 *                metrics_interval_s 10, smoothing factors 1); min and max
 *                the spec's;
 *   static-peak  a fixed fleet sized for the trace's peak;
 *   static-mean  a fixed fleet sized for the trace's mean
 *                (the sizing rule: sim_serve_static_size);
 *   static:N     a fixed fleet of N replicas (1 .. AUTOSCALE_REPLICAS_MAX),
 *                whatever the spec's min and max: the points a fixed fleet
 *                can reach, to set the others against.
 */
#ifndef GPUORCH_SIM_SERVE_POLICY_H
#define GPUORCH_SIM_SERVE_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "core/autoscale.h"
#include "sim/serve.h"

enum sim_serve_kind {
    SIM_SERVE_DEFAULT = 0,
    SIM_SERVE_KNATIVE,
    SIM_SERVE_RAYSERVE,
    SIM_SERVE_STATIC_PEAK,
    SIM_SERVE_STATIC_MEAN,
    SIM_SERVE_STATIC_FIXED,
};

struct sim_serve_policy {
    char name[32]; /* "default", "knative", ..., "static:4" */
    enum sim_serve_kind kind;
    int32_t replicas; /* static:N: N */
};

/* The policy named `name`: GPO_ENOENT for none, GPO_ERANGE for "static:"
 * followed by anything but a whole number 1 .. AUTOSCALE_REPLICAS_MAX. */
int sim_serve_policy_find(const char *name, struct sim_serve_policy *ret);
/* "default, knative, rayserve, static-peak, static-mean, static:N" into buf. */
void sim_serve_policy_names(char *buf, size_t len);

/* The autoscale spec a KPA-based policy (default, knative) runs with. */
void sim_serve_policy_kpa_spec(const struct sim_serve_policy *pol,
                               const struct sim_serve_service *svc, struct autoscale_spec *ret);

/* Ray Serve's metrics_interval_s: the engine reports to sim_rayserve_observe
 * this often. */
#define SIM_RAYSERVE_METRICS_MS 10000
/* After this long with no request and no change of count, Ray Serve's rule
 * is where any longer quiet leaves it (two downscale delays: to one, then to
 * zero; the look-back; two reports): the engine may skip idle seconds. */
#define SIM_RAYSERVE_QUIET_MS (2 * 600000 + 30000 + 2 * SIM_RAYSERVE_METRICS_MS)

/* Ray Serve's rule, pure: one call per decision, the state carried. */
struct sim_rayserve_state {
    int64_t up_since_ms;          /* INT64_MIN: no pending scale-up */
    int64_t down_since_ms;        /* INT64_MIN: no pending scale-down */
    int64_t window_sum_milli[64]; /* look-back samples (one per metrics interval), a ring */
    int64_t window_at_ms[64];
    uint32_t nwindow, head;
    int64_t last_metrics_ms;
};
void sim_rayserve_init(struct sim_rayserve_state *st);
/* A metrics report at now_ms: the service's ongoing requests (running plus
 * queued at the replicas and the router), milli. */
void sim_rayserve_observe(struct sim_rayserve_state *st, int64_t now_ms, int64_t ongoing_milli);
/* The desired count now, from `current` replicas (ready plus starting: the
 * target the last decision set), `ready` of them running, within the
 * service's min and max. With none running, Ray Serve's cold-start path:
 * requests waiting (`queued` at the router, or ongoing) with no replica at
 * all make 0 -> 1 at once (its handle scales a zero-replica deployment up as
 * soon as a request waits), and while replicas start the count holds. */
int32_t sim_rayserve_decide(struct sim_rayserve_state *st, const struct sim_serve_service *svc,
                            int64_t now_ms, int32_t ready, int32_t current, int32_t queued);

/* A static fleet's size for `t` under `svc` (>= 1 when t has requests):
 * static-peak from the busiest minute, static-mean from the whole trace, of
 * the offered concurrency (each request's service time alone on a replica,
 * summed over the requests of the stretch, over its length) divided by the
 * per-replica target (the spec's autoscaling target when its metric is
 * concurrency, else max_batch), and at least the stretch's prefill time over
 * its length (a replica prefills one request at a time); the peak is the
 * busiest minute's count (minutes from the first arrival), the mean the
 * whole trace's over its whole minutes. docs/simulator.md states the rule. */
int32_t sim_serve_static_size(const struct sim_reqtrace *t, const struct sim_serve_service *svc,
                              enum sim_serve_kind kind);

#endif

/*
 * serve_policy.c - the policies a serving replay compares (serve_policy.h).
 *
 * Where each anchor's rule and defaults come from:
 *
 * knative: Knative Serving's KPA, config-autoscaler defaults, as documented
 *   https://knative.dev/docs/serving/autoscaling/kpa-specific/ (stable window
 *     60 s; panic window 10 % of it; panic threshold 200 %; no scale-down in
 *     panic),
 *   https://knative.dev/docs/serving/autoscaling/concurrency/
 *     (container-concurrency-target-percentage 70, container-concurrency-
 *     target-default 100 when the revision sets no containerConcurrency),
 *   https://knative.dev/docs/serving/autoscaling/scale-bounds/ and
 *   https://knative.dev/docs/serving/autoscaling/scale-to-zero/
 *     (scale-to-zero-grace-period 30 s, scale-down-delay 0 s,
 *     max-scale-up-rate 1000, max-scale-down-rate 2),
 *   and knative/serving config/core/configmaps/autoscaler.yaml, whose
 *   ResolveMetricTarget (pkg/autoscaler/resources) makes the target
 *   (containerConcurrency or 100) times the target fraction 0.7.
 *   The rates map to autoscale.h's percentages: at most ready * 1000 per
 *   decision is 100000 %, at least ready / 2 is 200 %.
 *
 * rayserve: Ray Serve's default policy, ray-project/ray
 *   python/ray/serve/autoscaling_policy.py (read at commit 00590c45):
 *   replica_queue_length_autoscaling_policy / _core_replica_queue_length_policy
 *     desired = current * (total_ongoing / (target_ongoing * current)),
 *   _apply_scaling_factors
 *     ceil(current + factor * (desired - current)), factor 1 by default,
 *   _apply_bounds (min, max), then _apply_delay_logic: a scale-up acts only
 *   once it has been wanted for more than upscale_delay_s /
 *   CONTROL_LOOP_INTERVAL_S consecutive decisions (a scale-down likewise with
 *   downscale_delay_s, and never below 1 but from 1 to 0); a decision that
 *   wants neither resets the count, and so does one in the other direction;
 *   _get_cold_start_scale_up_replicas: with no replica and requests waiting,
 *   max(ceil(1 * upscaling_factor), target) at once, past the delays.
 *   The defaults are the documented ones,
 *   https://docs.ray.io/en/latest/serve/autoscaling-guide.html and
 *   https://docs.ray.io/en/latest/serve/advanced-guides/advanced-autoscaling.html
 *   (target_ongoing_requests 2, upscale_delay_s 30, downscale_delay_s 600,
 *   look_back_period_s 30, metrics_interval_s 10, smoothing factors 1);
 *   total_ongoing is the mean over the look-back period of the replicas'
 *   ongoing requests plus those queued at the handles.
 *   Where this differs: Ray decides every 0.1 s and counts the delays in
 *   decisions; here the engine decides every second and the delays are
 *   times (the same point: N decisions after the first that wanted it, N =
 *   delay / interval). As in Ray, the rule's own count is the running
 *   replicas' (`ready`), and the delays compare against the current target
 *   (`current`: ready plus starting).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "sim/serve_policy.h"
#include "base/banned.h"

/* Knative's documented defaults. */
#define KN_STABLE_MS        60000
#define KN_PANIC_PCT        10   /* panic-window-percentage */
#define KN_PANIC_THRESHOLD  200  /* panic-threshold-percentage */
#define KN_TARGET_PCT       70   /* container-concurrency-target-percentage */
#define KN_TARGET_DEFAULT   100  /* container-concurrency-target-default */
#define KN_MAX_UP_RATE      1000 /* max-scale-up-rate */
#define KN_MAX_DOWN_RATE    2    /* max-scale-down-rate */
#define KN_ZERO_GRACE_MS    30000
#define KN_SCALE_DOWN_DELAY 0

/* Ray Serve's documented defaults. */
#define RAY_TARGET_MILLI    2000   /* target_ongoing_requests */
#define RAY_UPSCALE_DELAY   30000  /* upscale_delay_s */
#define RAY_DOWNSCALE_DELAY 600000 /* downscale_delay_s (downscale_to_zero_delay_s unset) */
#define RAY_LOOK_BACK_MS    30000  /* look_back_period_s */
#define RAY_WINDOW_CAP                                                                             \
    (sizeof(((struct sim_rayserve_state *)0)->window_at_ms) /                                      \
     sizeof(((struct sim_rayserve_state *)0)->window_at_ms[0]))

/* The static fleets' stretch for the peak. */
#define STATIC_MINUTE_MS 60000

static const struct sim_serve_policy policies[] = {
    {"default", SIM_SERVE_DEFAULT},         {"knative", SIM_SERVE_KNATIVE},
    {"rayserve", SIM_SERVE_RAYSERVE},       {"static-peak", SIM_SERVE_STATIC_PEAK},
    {"static-mean", SIM_SERVE_STATIC_MEAN},
};
#define NPOLICIES (sizeof(policies) / sizeof(policies[0]))

#define STATIC_FIXED_PREFIX "static:"

/* N of "static:N": digits only, no sign, no leading zero, 1 .. max. */
static int static_count(const char *s, int32_t *ret)
{
    int64_t n = 0;
    if (!*s || *s == '0')
        return GPO_ERANGE;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return GPO_ERANGE;
        n = n * 10 + (*s - '0');
        if (n > AUTOSCALE_REPLICAS_MAX)
            return GPO_ERANGE;
    }
    *ret = (int32_t)n;
    return 0;
}

int sim_serve_policy_find(const char *name, struct sim_serve_policy *ret)
{
    size_t plen = strlen(STATIC_FIXED_PREFIX);
    if (name && strncmp(name, STATIC_FIXED_PREFIX, plen) == 0) {
        int32_t n = 0;
        if (static_count(name + plen, &n))
            return GPO_ERANGE;
        *ret = (struct sim_serve_policy){.kind = SIM_SERVE_STATIC_FIXED, .replicas = n};
        snprintf(ret->name, sizeof(ret->name), "%s%d", STATIC_FIXED_PREFIX, (int)n);
        return 0;
    }
    for (size_t k = 0; name && k < NPOLICIES; k++)
        if (strcmp(name, policies[k].name) == 0) {
            *ret = policies[k];
            return 0;
        }
    return GPO_ENOENT;
}

void sim_serve_policy_names(char *buf, size_t len)
{
    size_t used = 0;
    if (!len)
        return;
    buf[0] = '\0';
    for (size_t k = 0; k < NPOLICIES && used < len; k++) {
        int n = snprintf(buf + used, len - used, "%s%s", k ? ", " : "", policies[k].name);
        if (n < 0)
            return;
        used += (size_t)n;
    }
    if (used < len)
        snprintf(buf + used, len - used, ", %sN", STATIC_FIXED_PREFIX);
}

void sim_serve_policy_kpa_spec(const struct sim_serve_policy *pol,
                               const struct sim_serve_service *svc, struct autoscale_spec *ret)
{
    if (pol->kind != SIM_SERVE_KNATIVE) {
        *ret = svc->autoscale;
        return;
    }
    int64_t total = svc->concurrency_limit ? (int64_t)svc->concurrency_limit : KN_TARGET_DEFAULT;
    int64_t target = total * 1000 * KN_TARGET_PCT / 100;
    *ret = (struct autoscale_spec){
        .metric = AUTOSCALE_METRIC_CONCURRENCY,
        .target_milli = target > 0 ? target : 1,
        .min = svc->autoscale.min,
        .max = svc->autoscale.max,
        .stable_window_ms = KN_STABLE_MS,
        .panic_window_ms = KN_STABLE_MS * KN_PANIC_PCT / 100,
        .panic_threshold_pct = KN_PANIC_THRESHOLD,
        .max_up_rate_pct = KN_MAX_UP_RATE * 100,
        .max_down_rate_pct = KN_MAX_DOWN_RATE * 100,
        .scale_down_delay_ms = KN_SCALE_DOWN_DELAY,
        .zero_grace_ms = KN_ZERO_GRACE_MS,
        .headroom = false,
    };
}

/* ---- Ray Serve --------------------------------------------------------------------- */

void sim_rayserve_init(struct sim_rayserve_state *st)
{
    memset(st, 0, sizeof(*st));
    st->up_since_ms = INT64_MIN;
    st->down_since_ms = INT64_MIN;
}

void sim_rayserve_observe(struct sim_rayserve_state *st, int64_t now_ms, int64_t ongoing_milli)
{
    uint32_t slot = (st->head + st->nwindow) % RAY_WINDOW_CAP;
    if (st->nwindow == RAY_WINDOW_CAP) {
        slot = st->head;
        st->head = (st->head + 1) % RAY_WINDOW_CAP;
    } else {
        st->nwindow++;
    }
    st->window_sum_milli[slot] = ongoing_milli > 0 ? ongoing_milli : 0;
    st->window_at_ms[slot] = now_ms;
    st->last_metrics_ms = now_ms;
}

/* The mean of the reports within the look-back period, milli (0: none). */
static double rayserve_total(const struct sim_rayserve_state *st, int64_t now_ms)
{
    double sum = 0;
    int n = 0;
    for (uint32_t k = 0; k < st->nwindow; k++) {
        uint32_t slot = (st->head + k) % RAY_WINDOW_CAP;
        if (st->window_at_ms[slot] > now_ms - RAY_LOOK_BACK_MS &&
            st->window_at_ms[slot] <= now_ms) {
            sum += (double)st->window_sum_milli[slot];
            n++;
        }
    }
    return n ? sum / n : 0;
}

static int32_t bounded(int64_t v, const struct sim_serve_service *svc)
{
    int64_t lo = svc->autoscale.min, hi = svc->autoscale.max;
    return (int32_t)(v < lo ? lo : v > hi ? hi : v);
}

int32_t sim_rayserve_decide(struct sim_rayserve_state *st, const struct sim_serve_service *svc,
                            int64_t now_ms, int32_t ready, int32_t current, int32_t queued)
{
    double total = rayserve_total(st, now_ms);
    if (ready <= 0) /* the cold-start path: no delay, and no change while starting */
        return bounded(current > 0 ? current : queued > 0 || total > 0 ? 1 : 0, svc);
    /* running * (total / (target * running)), then ceil(running + 1 * (desired - running));
     * a millionth forgiven so that exactly 2 targets is 2 replicas. */
    double running = (double)ready;
    double desired = running * (total / ((double)RAY_TARGET_MILLI * running));
    double scaled = ceil(running + 1.0 * (desired - running) - 1e-6);
    int32_t want = bounded(scaled > AUTOSCALE_REPLICAS_MAX ? AUTOSCALE_REPLICAS_MAX
                           : scaled < 0                    ? 0
                                                           : (int64_t)scaled,
                           svc);
    if (want > current) {
        st->down_since_ms = INT64_MIN;
        if (st->up_since_ms == INT64_MIN)
            st->up_since_ms = now_ms;
        if (now_ms - st->up_since_ms < RAY_UPSCALE_DELAY)
            return current;
        st->up_since_ms = INT64_MIN;
        return want;
    }
    if (want < current) {
        st->up_since_ms = INT64_MIN;
        if (st->down_since_ms == INT64_MIN)
            st->down_since_ms = now_ms;
        if (current != 1 && want < 1) /* to zero only from one */
            want = 1;
        if (now_ms - st->down_since_ms < RAY_DOWNSCALE_DELAY)
            return current;
        st->down_since_ms = INT64_MIN;
        return want;
    }
    st->up_since_ms = INT64_MIN;
    st->down_since_ms = INT64_MIN;
    return current;
}

/* ---- static fleets ----------------------------------------------------------------- */

/* A request's service time alone on a replica, ms, and its prefill's part. */
static double alone_ms(const struct sim_request *q, const struct sim_replica_model *m,
                       double *prefill_ms)
{
    double decode = q->output_tokens > 1 ? (double)(q->output_tokens - 1) : 0;
    *prefill_ms = 1000.0 * (double)q->input_tokens / m->prefill_tps;
    return *prefill_ms + 1000.0 * decode / m->decode_tps_request;
}

/* Replicas for a stretch of `len_ms` with these sums: the offered
 * concurrency over the per-replica target, and at least what its prefills
 * need (one at a time on a replica). */
static double fleet_for(double alone, double prefill, double len_ms, double per)
{
    double by_conc = ceil(alone / len_ms / per - 1e-6);
    double by_prefill = ceil(prefill / len_ms - 1e-6);
    return by_conc > by_prefill ? by_conc : by_prefill;
}

int32_t sim_serve_static_size(const struct sim_reqtrace *t, const struct sim_serve_service *svc,
                              enum sim_serve_kind kind)
{
    if (!t->n)
        return 0;
    const struct sim_replica_model *m = &svc->model;
    double per = svc->autoscale.metric == AUTOSCALE_METRIC_CONCURRENCY
                     ? (double)svc->autoscale.target_milli / 1000.0
                     : (double)m->max_batch;
    if (per <= 0)
        per = 1;
    int64_t first = t->v[0].arrival_ms;
    double total = 0, total_pre = 0, minute = 0, minute_pre = 0, peak = 0;
    int64_t cur = 0; /* the minute (from the first arrival) being summed */
    for (size_t k = 0; k < t->n; k++) {
        int64_t mk = (t->v[k].arrival_ms - first) / STATIC_MINUTE_MS;
        if (mk != cur) {
            double n = fleet_for(minute, minute_pre, STATIC_MINUTE_MS, per);
            peak = n > peak ? n : peak;
            minute = minute_pre = 0;
            cur = mk;
        }
        double pre, s = alone_ms(&t->v[k], m, &pre);
        minute += s;
        minute_pre += pre;
        total += s;
        total_pre += pre;
    }
    double last = fleet_for(minute, minute_pre, STATIC_MINUTE_MS, per);
    peak = last > peak ? last : peak;
    double n = kind == SIM_SERVE_STATIC_PEAK
                   ? peak
                   : fleet_for(total, total_pre, (double)(cur + 1) * STATIC_MINUTE_MS, per);
    return n < 1 ? 1 : n > AUTOSCALE_REPLICAS_MAX ? AUTOSCALE_REPLICAS_MAX : (int32_t)n;
}

/* test_sim_serve.c - the serving replay (serve.h) and its policies
 * (serve_policy.h): the queueing model against Erlang C on Poisson traces,
 * and golden cases worked out by hand for each policy, the router, the
 * replicas' batching, the cap, the start delays and the summary. Traces are
 * built in memory. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "base/err.h"
#include "sim/serve.h"
#include "sim/serve_policy.h"
#include "base/banned.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* A service whose numbers are easy to work with: a token of prompt is 1 ms
 * of prefill, a token of output 10 ms of decode (up to 100 requests
 * decoding at full speed), startup 10 s, one GPU; target concurrency 1,
 * windows as gpuorch's defaults, no headroom (it would need a slope). */
static struct sim_serve_service base_service(void)
{
    struct sim_serve_service s;
    memset(&s, 0, sizeof(s));
    snprintf(s.name, sizeof(s.name), "svc");
    autoscale_spec_default(&s.autoscale);
    s.autoscale.headroom = false;
    s.autoscale.min = 0;
    s.autoscale.max = 3;
    s.autoscale.target_milli = 1000;
    s.queue_limit = 1000;
    s.queue_timeout_ms = 60000;
    s.drain_timeout_ms = 30000;
    s.gpu_milli = 1000;
    s.model = (struct sim_replica_model){.prefill_tps = 1000,
                                         .decode_tps = 10000,
                                         .decode_tps_request = 100,
                                         .max_batch = 32,
                                         .startup_ms = 10000};
    return s;
}

static struct sim_reqtrace trace_of(struct sim_request *v, size_t n)
{
    struct sim_reqtrace t;
    sim_reqtrace_init(&t);
    t.v = v;
    t.n = n;
    return t;
}

static void run_policy(const struct sim_reqtrace *t, const struct sim_serve_service *svc,
                       const char *policy, const struct sim_serve_opts *opts,
                       struct sim_serve_result *r)
{
    struct sim_serve_policy pol;
    assert_int_equal(sim_serve_policy_find(policy, &pol), 0);
    char err[256] = "";
    sim_serve_result_init(r);
    int rc = sim_serve_run(t, svc, &pol, opts, r, err, sizeof(err));
    if (rc)
        fprintf(stderr, "sim_serve_run: %s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(r->nrequests, t->n);
}

/* The sample of the tick at t_ms. */
static const struct sim_serve_sample *sample_at(const struct sim_serve_result *r, int64_t t_ms)
{
    for (size_t k = 0; k < r->nsamples; k++)
        if (r->samples[k].t_ms == t_ms)
            return &r->samples[k];
    fail_msg("no sample at %lld ms", (long long)t_ms);
    return NULL;
}

/* ---- M/M/c against Erlang C ---- */

/* A fixed-seed xorshift64*: uniform in (0, 1). */
static double uniform(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return ((double)((*s * UINT64_C(2685821657736338717)) >> 11) + 0.5) / 9007199254740992.0;
}

/* Erlang C's mean wait in queue for c servers at load rho, mean service s. */
static double erlang_c_wait(int c, double rho, double s)
{
    double a = c * rho, term = 1, sum = 0;
    for (int k = 0; k < c; k++) {
        sum += term;
        term *= a / (k + 1);
    }
    double top = term / (1 - rho); /* a^c / c! / (1 - rho) */
    double p_wait = top / (sum + top);
    return p_wait * s / (c * (1 - rho));
}

/* Poisson arrivals, exponential service on c replicas that each take one
 * request at a time (max_batch 1, concurrency_limit 1: the others wait at
 * the router, first come first served), no prompt: the time to the first
 * token is the wait in queue. Output tokens are 1 + floor(Exp(1000)), so
 * the decode of the other ones, at 1000 tokens per second, is a geometric
 * number of 1 ms steps: exponential within 0.05 % of its mean and its
 * variance; the load is computed from that mean. */
static void check_mmc(double rho, int c, size_t n, uint64_t seed)
{
    const double mean_tokens = 1000;
    double p = 1 - exp(-1 / mean_tokens);
    double mean_s = (1 - p) / p / 1000.0; /* E[floor(Exp)] tokens at 1000 per second */
    double lambda = rho * c / mean_s;     /* per second */
    struct sim_request *v = calloc(n, sizeof(*v));
    assert_non_null(v);
    double at = 0;
    for (size_t k = 0; k < n; k++) {
        at += -log(uniform(&seed)) / lambda * 1000;
        v[k].arrival_ms = (int64_t)at;
        v[k].input_tokens = 0;
        v[k].output_tokens = 1 + (int32_t)floor(-log(uniform(&seed)) * mean_tokens);
        v[k].line = (uint32_t)k + 2;
    }
    struct sim_reqtrace t = trace_of(v, n);
    struct sim_serve_service svc = base_service();
    svc.model.decode_tps = svc.model.decode_tps_request = 1000;
    svc.model.max_batch = 1;
    svc.concurrency_limit = 1;
    svc.queue_limit = UINT32_MAX;
    svc.queue_timeout_ms = 0; /* none */
    /* static-mean: the offered concurrency (rho * c) over a target that
     * makes it c replicas with room either side */
    svc.autoscale.target_milli = (int64_t)(rho * c / (c - 0.5) * 1000);
    assert_int_equal(sim_serve_static_size(&t, &svc, SIM_SERVE_STATIC_MEAN), c);
    struct sim_serve_result r;
    run_policy(&t, &svc, "static-mean", NULL, &r);
    assert_int_equal(r.nreplicas, (size_t)c);
    double wait = 0;
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(r.requests[k].outcome, SIM_REQ_DONE);
        wait += (double)(r.requests[k].first_token_ms - r.requests[k].arrival_ms) / 1000.0;
    }
    wait /= (double)n;
    double want = erlang_c_wait(c, rho, mean_s);
    printf("# M/M/%d rho %.2f: mean wait %.3f s, Erlang C %.3f s (%+.2f %%)\n", c, rho, wait, want,
           100 * (wait - want) / want);
    assert_true(fabs(wait - want) <= 0.05 * want);
    sim_serve_result_release(&r);
    free(v);
}

/* The estimate's own error: at rho 0.9 over 10^6 requests, eight seeds gave
 * -4.1 .. +3.5 % (a standard deviation near 2 %); at 0.7 over 2 x 10^5, it
 * is smaller. */
static void test_mmc_mean_wait_matches_erlang_c(void **state)
{
    (void)state;
    check_mmc(0.7, 4, 200000, 1);
    check_mmc(0.9, 4, 1000000, 1);
}

/* ---- the router and the replicas ---- */

/* Continuous batching (max_batch 2, decode_tps 100 shared, at most 100 per
 * request), prefills one at a time, and a third request waiting inside the
 * replica for a batch slot, on a static fleet of one:
 *   A: 1000 prompt tokens, 1001 output; B: 500, 501; C: 0, 101; all at 0.
 *   A prefills [0, 1000): first token 1000; B prefills [1000, 1500).
 *   [1000, 1500) A decodes alone at 100/s: 50 tokens, 950 left.
 *   From 1500 two decode at 50/s: B's 500 take 10 s, B ends at 11500; A
 *   has 450 left. C (waiting for a slot) runs at 11500: no prompt, first
 *   token 11500; two decode at 50/s: C's 100 take 2 s, C ends at 13500, A
 *   has 350 left, alone at 100/s: 3.5 s, A ends at 17000. */
static void test_continuous_batching_shares_decode(void **state)
{
    (void)state;
    struct sim_request v[] = {{0, 1000, 1001, 2}, {0, 500, 501, 3}, {0, 0, 101, 4}};
    struct sim_reqtrace t = trace_of(v, COUNT(v));
    struct sim_serve_service svc = base_service();
    svc.model.decode_tps = svc.model.decode_tps_request = 100;
    svc.model.max_batch = 2;
    svc.autoscale.target_milli = 100000; /* a static fleet of one */
    svc.slo = (struct sim_slo){.ttft_ms = 1500, .tpot_ms = 0, .e2e_ms = 0};
    struct sim_serve_result r;
    run_policy(&t, &svc, "static-peak", NULL, &r);
    static const int64_t first[] = {1000, 1500, 11500}, end[] = {17000, 11500, 13500};
    static const bool met[] = {true, true, false};
    for (size_t k = 0; k < COUNT(v); k++) {
        assert_int_equal(r.requests[k].outcome, SIM_REQ_DONE);
        assert_int_equal(r.requests[k].first_token_ms, first[k]);
        assert_int_equal(r.requests[k].end_ms, end[k]);
        assert_int_equal(r.requests[k].slo_met, met[k]);
    }
    assert_int_equal(r.end_ms, 17000);
    assert_int_equal(r.nreplicas, 1);
    assert_int_equal(r.replicas[0].start_ms, 0);
    assert_int_equal(r.replicas[0].ready_ms, 0);
    assert_int_equal(r.replicas[0].end_ms, 17000);
    assert_false(r.replicas[0].cold);

    /* The summary: nearest-rank percentiles of 1.0, 1.5, 11.5 s (TTFT) and
     * 11.5, 13.5, 17 s (end to end); one GPU for 17 s. */
    struct sim_serve_summary s;
    assert_int_equal(sim_serve_summarize(&r, &svc, "static-peak", &s), 0);
    assert_string_equal(s.policy, "static-peak");
    assert_string_equal(s.service, "svc");
    assert_int_equal(s.requests, 3);
    assert_int_equal(s.completed, 3);
    assert_true(fabs(s.slo_attainment - 2.0 / 3) < 1e-12);
    assert_true(fabs(s.ttft_p50_s - 1.5) < 1e-12);
    assert_true(fabs(s.ttft_p99_s - 11.5) < 1e-12);
    assert_true(fabs(s.e2e_p50_s - 13.5) < 1e-12);
    assert_true(fabs(s.e2e_p99_s - 17.0) < 1e-12);
    /* TPOT: A 16 s / 1000, B 10 s / 500, C 2 s / 100: p50 0.02 s */
    assert_true(fabs(s.tpot_p50_s - 0.02) < 1e-12);
    assert_true(fabs(s.gpu_hours - 17.0 / 3600) < 1e-12);
    assert_true(fabs(s.replicas_mean - 1.0) < 1e-12);
    assert_int_equal(s.replicas_max, 1);
    assert_int_equal(s.cold_starts, 0);
    sim_serve_result_release(&r);
}

/* A static fleet of one with concurrency_limit 1: the first of five
 * requests at 0 runs, the router holds queue_limit 2, the last two are
 * dropped; with a 5 s queue timeout instead, the held ones time out at
 * 5000 while the first runs its 10 s. */
static void test_queue_limit_drops_and_timeout_times_out(void **state)
{
    (void)state;
    struct sim_request v[5];
    for (size_t k = 0; k < COUNT(v); k++)
        v[k] = (struct sim_request){0, 0, 1001, (uint32_t)k + 2}; /* 10 s each */
    struct sim_reqtrace t = trace_of(v, COUNT(v));
    struct sim_serve_service svc = base_service();
    svc.autoscale.target_milli = 1000000;
    svc.concurrency_limit = 1;
    svc.queue_limit = 2;
    svc.slo.e2e_ms = 30000;
    struct sim_serve_result r;
    run_policy(&t, &svc, "static-mean", NULL, &r);
    assert_int_equal(r.nreplicas, 1);
    static const uint8_t outcome[] = {SIM_REQ_DONE, SIM_REQ_DONE, SIM_REQ_DONE, SIM_REQ_DROPPED,
                                      SIM_REQ_DROPPED};
    static const int64_t end[] = {10000, 20000, 30000, -1, -1};
    for (size_t k = 0; k < COUNT(v); k++) {
        assert_int_equal(r.requests[k].outcome, outcome[k]);
        assert_int_equal(r.requests[k].end_ms, end[k]);
    }
    struct sim_serve_summary s;
    assert_int_equal(sim_serve_summarize(&r, &svc, "static-mean", &s), 0);
    assert_int_equal(s.dropped, 2);
    assert_true(fabs(s.slo_attainment - 0.6) < 1e-12);
    sim_serve_result_release(&r);

    svc.queue_limit = 10;
    svc.queue_timeout_ms = 5000;
    run_policy(&t, &svc, "static-mean", NULL, &r);
    assert_int_equal(r.requests[0].outcome, SIM_REQ_DONE);
    assert_int_equal(r.requests[0].end_ms, 10000);
    for (size_t k = 1; k < COUNT(v); k++) {
        assert_int_equal(r.requests[k].outcome, SIM_REQ_TIMEOUT);
        assert_int_equal(r.requests[k].first_token_ms, -1);
        assert_false(r.requests[k].slo_met);
    }
    assert_int_equal(r.end_ms, 10000);
    assert_int_equal(sim_serve_summarize(&r, &svc, "static-mean", &s), 0);
    assert_int_equal(s.timed_out, 4);
    assert_int_equal(s.completed, 1);
    assert_true(fabs(s.slo_attainment - 0.2) < 1e-12);
    sim_serve_result_release(&r);
}

/* ---- default and knative: from zero and back ---- */

/* One request at 0.5 s (no prompt, 101 tokens: 1 s of decode), another at
 * 200 s. At 500 no replica: the router wakes the controller, which decides
 * at once (no observation yet: 0, and a queued request makes it 1): a cold
 * start, placed at 500, ready at 10500; the request runs [10500, 11500).
 * Observed concurrency (in flight plus queued, per second): 0.5 at 1 s, 1
 * from 2 to 11 s, 0.5 at 12 s, then 0. The 60 s stable window wants 1
 * until it no longer holds second 12: from 72 s it wants 0.
 *   default: the scale-down delay (30 s) holds the last want of 1 (at 71 s)
 *     until 101 s; the grace (30 s after the last request, 12 s) is long
 *     over: the replica ends at 101000.
 *   knative: no scale-down delay: it ends at 72000.
 * The second request cold-starts again: placed at 200000, ready 210000,
 * done 211000. */
static void check_from_zero(const char *policy, int64_t down_ms)
{
    struct sim_request v[] = {{500, 0, 101, 2}, {200000, 0, 101, 3}};
    struct sim_reqtrace t = trace_of(v, COUNT(v));
    struct sim_serve_service svc = base_service();
    struct sim_serve_result r;
    run_policy(&t, &svc, policy, NULL, &r);
    assert_int_equal(r.nreplicas, 2);
    assert_int_equal(r.replicas[0].asked_ms, 500);
    assert_int_equal(r.replicas[0].start_ms, 500);
    assert_int_equal(r.replicas[0].ready_ms, 10500);
    assert_int_equal(r.replicas[0].end_ms, down_ms);
    assert_true(r.replicas[0].cold);
    assert_int_equal(r.replicas[1].asked_ms, 200000);
    assert_int_equal(r.replicas[1].ready_ms, 210000);
    assert_int_equal(r.replicas[1].end_ms, 211000);
    assert_true(r.replicas[1].cold);
    assert_int_equal(r.requests[0].first_token_ms, 10500);
    assert_int_equal(r.requests[0].end_ms, 11500);
    assert_int_equal(r.requests[1].end_ms, 211000);
    assert_int_equal(r.end_ms, 211000);
    assert_int_equal(sample_at(&r, down_ms - 1000)->ready, 1);
    assert_int_equal(sample_at(&r, down_ms)->ready, 0);
    assert_int_equal(sample_at(&r, down_ms)->desired, 0);
    assert_int_equal(sample_at(&r, 1000)->queued, 1);
    assert_int_equal(sample_at(&r, 1000)->starting, 1);
    struct sim_serve_summary s;
    assert_int_equal(sim_serve_summarize(&r, &svc, policy, &s), 0);
    assert_int_equal(s.cold_starts, 2);
    double held = (double)(down_ms - 500) + 11000;
    assert_true(fabs(s.gpu_hours - held / 3600000) < 1e-12);
    assert_true(fabs(s.replicas_mean - held / 211000) < 1e-12);
    assert_int_equal(s.replicas_max, 1);
    sim_serve_result_release(&r);
}

static void test_default_and_knative_scale_from_zero_and_back(void **state)
{
    (void)state;
    check_from_zero("default", 101000);
    check_from_zero("knative", 72000);
}

/* A long idle stretch is skipped (no samples for most of it) and changes
 * nothing: with the second request 10 days after the first, everything
 * after it happens at the same offsets as with a gap the engine replays
 * tick by tick: long enough for the policy to have settled at zero (the
 * first replica ends at 101 s for default, 72 s for knative, 650 s for
 * rayserve: 600 s after its reports first want 0, at 50 s), short of the
 * skip (idle for the policy's windows and delays: 146 s more for default
 * and knative, 1270 s for rayserve). */
static void test_idle_stretch_skipped_changes_nothing(void **state)
{
    (void)state;
    static const char *const policies[] = {"default", "knative", "rayserve"};
    static const int64_t gap[] = {200000, 200000, 1000000}, zero[] = {101000, 72000, 650000};
    const int64_t later = 10LL * 86400 * 1000;
    for (size_t p = 0; p < COUNT(policies); p++) {
        struct sim_request a[] = {
            {500, 0, 101, 2}, {gap[p], 0, 101, 3}, {gap[p] + 1000, 0, 301, 4}};
        struct sim_request b[] = {{500, 0, 101, 2}, {later, 0, 101, 3}, {later + 1000, 0, 301, 4}};
        struct sim_reqtrace ta = trace_of(a, COUNT(a)), tb = trace_of(b, COUNT(b));
        struct sim_serve_service svc = base_service();
        struct sim_serve_result ra, rb;
        run_policy(&ta, &svc, policies[p], NULL, &ra);
        run_policy(&tb, &svc, policies[p], NULL, &rb);
        assert_int_equal(ra.nsamples, (size_t)((ra.end_ms - 1) / 1000)); /* every tick before */
        assert_true(rb.nsamples < 10000);
        assert_int_equal(ra.replicas[0].end_ms, zero[p]);
        assert_int_equal(rb.replicas[0].end_ms, zero[p]);
        assert_int_equal(ra.nreplicas, rb.nreplicas);
        int64_t shift = later - gap[p];
        assert_int_equal(rb.end_ms - shift, ra.end_ms);
        for (size_t k = 0; k < COUNT(a); k++) {
            int64_t d = k ? shift : 0;
            assert_int_equal(rb.requests[k].first_token_ms - d, ra.requests[k].first_token_ms);
            assert_int_equal(rb.requests[k].end_ms - d, ra.requests[k].end_ms);
        }
        for (size_t k = 1; k < ra.nreplicas; k++) {
            assert_int_equal(rb.replicas[k].asked_ms - shift, ra.replicas[k].asked_ms);
            assert_int_equal(rb.replicas[k].ready_ms < 0 ? -1 : rb.replicas[k].ready_ms - shift,
                             ra.replicas[k].ready_ms);
            assert_int_equal(rb.replicas[k].end_ms - shift, ra.replicas[k].end_ms);
        }
        /* the last samples, at the same offsets, alike but for their time */
        for (size_t k = 1; k <= 20; k++) {
            const struct sim_serve_sample *x = &ra.samples[ra.nsamples - k],
                                          *y = &rb.samples[rb.nsamples - k];
            assert_int_equal(y->t_ms - shift, x->t_ms);
            assert_int_equal(y->desired, x->desired);
            assert_int_equal(y->ready, x->ready);
            assert_int_equal(y->starting, x->starting);
            assert_int_equal(y->draining, x->draining);
            assert_int_equal(y->inflight, x->inflight);
            assert_int_equal(y->queued, x->queued);
            assert_int_equal(y->arrivals, x->arrivals);
        }
        sim_serve_result_release(&ra);
        sim_serve_result_release(&rb);
    }
}

static void test_knative_spec_is_knatives_defaults(void **state)
{
    (void)state;
    struct sim_serve_service svc = base_service();
    svc.autoscale.min = 1;
    svc.autoscale.max = 7;
    svc.concurrency_limit = 10;
    struct sim_serve_policy pol;
    assert_int_equal(sim_serve_policy_find("knative", &pol), 0);
    assert_int_equal(pol.kind, SIM_SERVE_KNATIVE);
    struct autoscale_spec k;
    sim_serve_policy_kpa_spec(&pol, &svc, &k);
    assert_int_equal(k.metric, AUTOSCALE_METRIC_CONCURRENCY);
    assert_int_equal(k.target_milli, 7000); /* 70 % of 10 */
    assert_int_equal(k.min, 1);
    assert_int_equal(k.max, 7);
    assert_int_equal(k.stable_window_ms, 60000);
    assert_int_equal(k.panic_window_ms, 6000);
    assert_int_equal(k.panic_threshold_pct, 200);
    assert_int_equal(k.max_up_rate_pct, 100000); /* rate 1000 */
    assert_int_equal(k.max_down_rate_pct, 200);  /* rate 2 */
    assert_int_equal(k.scale_down_delay_ms, 0);
    assert_int_equal(k.zero_grace_ms, 30000);
    assert_false(k.headroom);
    svc.concurrency_limit = 0;
    sim_serve_policy_kpa_spec(&pol, &svc, &k);
    assert_int_equal(k.target_milli, 70000); /* 70 % of the default 100 */
    /* default: the spec's own */
    assert_int_equal(sim_serve_policy_find("default", &pol), 0);
    sim_serve_policy_kpa_spec(&pol, &svc, &k);
    assert_memory_equal(&k, &svc.autoscale, sizeof(k));
    assert_int_equal(sim_serve_policy_find("kpa", &pol), GPO_ENOENT);
    /* static:N: a fixed fleet of N, 1 .. AUTOSCALE_REPLICAS_MAX, digits only */
    assert_int_equal(sim_serve_policy_find("static:7", &pol), 0);
    assert_int_equal(pol.kind, SIM_SERVE_STATIC_FIXED);
    assert_int_equal(pol.replicas, 7);
    assert_string_equal(pol.name, "static:7");
    assert_int_equal(sim_serve_policy_find("static:1000", &pol), 0);
    assert_int_equal(pol.replicas, 1000);
    const char *bad[] = {"static:",   "static:0",  "static:1001", "static:-3",         "static:+3",
                         "static:03", "static:3 ", "static:3.0",  "static:99999999999"};
    for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++)
        assert_int_equal(sim_serve_policy_find(bad[b], &pol), GPO_ERANGE);
    assert_int_equal(sim_serve_policy_find("static", &pol), GPO_ENOENT);
    char names[128];
    sim_serve_policy_names(names, sizeof(names));
    assert_string_equal(names, "default, knative, rayserve, static-peak, static-mean, static:N");
}

/* n requests gap_ms apart, no prompt, `tokens` of output each. Caller
 * frees. */
static struct sim_request *steady(size_t n, int64_t gap_ms, int32_t tokens)
{
    struct sim_request *v = calloc(n, sizeof(*v));
    assert_non_null(v);
    for (size_t k = 0; k < n; k++)
        v[k] = (struct sim_request){(int64_t)k * gap_ms, 0, tokens, (uint32_t)k + 2};
    return v;
}

/* n requests in v, all at at_ms, no prompt, `tokens` of output each. */
static struct sim_reqtrace burst(struct sim_request *v, size_t n, int64_t at_ms, int32_t tokens)
{
    for (size_t k = 0; k < n; k++)
        v[k] = (struct sim_request){at_ms, 0, tokens, (uint32_t)k + 2};
    return trace_of(v, n);
}

/* A steady 15 in flight (a request every 200 ms, each 3 s of decode), one
 * replica ready at 0: knative settles at ceil(15 / (0.7 * limit)) replicas
 * for the per-replica concurrency limit: 3 for 10, 2 for 20, 1 for none
 * (target 70). The last ticks hold that count. */
static void test_knative_target_is_70_percent_of_the_limit(void **state)
{
    (void)state;
    struct sim_request *v = steady(3000, 200, 301); /* 600 s */
    struct sim_reqtrace t = trace_of(v, 3000);
    struct sim_serve_service svc = base_service();
    svc.autoscale.min = 1;
    svc.autoscale.max = 10;
    static const uint32_t limit[] = {10, 20, 0};
    static const int32_t want[] = {3, 2, 1};
    for (size_t c = 0; c < COUNT(limit); c++) {
        svc.concurrency_limit = limit[c];
        struct sim_serve_result r;
        run_policy(&t, &svc, "knative", NULL, &r);
        const struct sim_serve_sample *last = sample_at(&r, 600000);
        assert_int_equal(last->desired, want[c]);
        assert_int_equal(last->ready, want[c]);
        assert_int_equal(sample_at(&r, 500000)->desired, want[c]);
        sim_serve_result_release(&r);
    }
    free(v);
}

/* What the default policy observes, by the spec's metric (target 1, one
 * replica from 0): a request every 250 ms, each 1 s. Concurrency: 4 on
 * average over every second; rps: 4; replica (the replicas' running and
 * waiting requests at the tick, after the completions at that ms and
 * before the arrivals): the three of the last second still running: 3. */
static void test_default_observes_the_specs_metric(void **state)
{
    (void)state;
    struct sim_request *v = steady(480, 250, 101); /* 120 s */
    struct sim_reqtrace t = trace_of(v, 480);
    struct sim_serve_service svc = base_service();
    svc.autoscale.min = 1;
    svc.autoscale.max = 10;
    static const enum autoscale_metric metric[] = {AUTOSCALE_METRIC_CONCURRENCY,
                                                   AUTOSCALE_METRIC_RPS, AUTOSCALE_METRIC_REPLICA};
    static const int32_t want[] = {4, 4, 3};
    for (size_t m = 0; m < COUNT(metric); m++) {
        svc.autoscale.metric = metric[m];
        struct sim_serve_result r;
        run_policy(&t, &svc, "default", NULL, &r);
        assert_int_equal(sample_at(&r, 119000)->desired, want[m]);
        assert_int_equal(sample_at(&r, 119000)->arrivals, 4);
        sim_serve_result_release(&r);
    }
    free(v);
}

/* Panic on a burst (default policy, target 1, one replica ready from 0):
 * 8 requests at 100 s, each 10 s of decode. Each second observes 8 from
 * 101 s on, 0 before. The 6 s panic window's mean at 101..106 s is 8/6,
 * 16/6, 24/6, 32/6, 40/6, 8: wants 2, 3, 4, 6, 7, 8; the first is already
 * twice the ready count: panic, and the count follows the panic window
 * (only up), while the stable window (60 s) would want 1 until 108 s. */
static void test_default_panics_on_a_burst(void **state)
{
    (void)state;
    struct sim_request v[8];
    struct sim_reqtrace t = burst(v, COUNT(v), 100000, 1001);
    struct sim_serve_service svc = base_service();
    svc.autoscale.min = 1;
    svc.autoscale.max = 10;
    struct sim_serve_result r;
    run_policy(&t, &svc, "default", NULL, &r);
    static const int32_t want[] = {2, 3, 4, 6, 7, 8};
    assert_int_equal(sample_at(&r, 100000)->desired, 1);
    for (size_t k = 0; k < COUNT(want); k++)
        assert_int_equal(sample_at(&r, 101000 + 1000 * (int64_t)k)->desired, want[k]);
    for (size_t k = 0; k < COUNT(v); k++)
        assert_int_equal(r.requests[k].end_ms, 110000); /* all on the first replica */
    assert_int_equal(r.nreplicas, 8);
    sim_serve_result_release(&r);

    /* gpu_cap_milli 3000: three replicas hold GPUs at most; the others wait
     * unplaced and hold none (their span starts where it ends). */
    struct sim_serve_opts opts = {.gpu_cap_milli = 3000};
    run_policy(&t, &svc, "default", &opts, &r);
    assert_int_equal(r.nreplicas, 8);
    assert_int_equal(r.replicas[1].start_ms, 101000);
    assert_int_equal(r.replicas[2].start_ms, 102000);
    for (size_t k = 3; k < r.nreplicas; k++) {
        assert_int_equal(r.replicas[k].ready_ms, -1);
        assert_int_equal(r.replicas[k].start_ms, r.replicas[k].end_ms);
    }
    assert_int_equal(sample_at(&r, 106000)->starting, 7); /* 2 placed, 5 waiting */
    struct sim_serve_summary s;
    assert_int_equal(sim_serve_summarize(&r, &svc, "default", &s), 0);
    assert_int_equal(s.replicas_max, 3);
    sim_serve_result_release(&r);
}

/* The drain cases' service: target 2, limit 2, startup 0, 6 s windows, no
 * scale-down delay or grace. */
static struct sim_serve_service drain_service(void)
{
    struct sim_serve_service svc = base_service();
    svc.autoscale.target_milli = 2000;
    svc.autoscale.stable_window_ms = 6000;
    svc.autoscale.panic_window_ms = 6000;
    svc.autoscale.scale_down_delay_ms = 0;
    svc.autoscale.zero_grace_ms = 0;
    svc.concurrency_limit = 2;
    svc.model.startup_ms = 0;
    return svc;
}

/* Drains pick the fewest in flight (default policy, target 2, limit 2,
 * startup 0, 6 s windows, no scale-down delay or grace):
 *   At 0, six requests. A finds no replica: decided at once, 1, ready at
 *   0; A and B go to it (limit 2), C..F wait. Tick 1 s: 6 in flight and
 *   queued, want 3, panic (3 >= 2 x 1): r1 and r2 start and are ready at
 *   1 s: C, D go to r1, E, F to r2. C, D, E last 2 s (end at 3 s); A, B, F
 *   30 s. From 3 s: r0 has 2, r1 0, r2 1. Panic ends 6 s after its
 *   trigger, at 7 s, where the 6 s window (6, 6, 3, 3, 3, 3) wants 2: one
 *   replica goes, r1, the one with the fewest in flight (not r2, the
 *   newest), and it ends at once. */
static void test_drain_picks_the_fewest_in_flight(void **state)
{
    (void)state;
    struct sim_request v[] = {{0, 0, 3001, 2}, {0, 0, 3001, 3}, {0, 0, 201, 4},
                              {0, 0, 201, 5},  {0, 0, 201, 6},  {0, 0, 3001, 7}};
    struct sim_reqtrace t = trace_of(v, COUNT(v));
    struct sim_serve_service svc = drain_service();
    struct sim_serve_result r;
    run_policy(&t, &svc, "default", NULL, &r);
    assert_true(r.nreplicas >= 3);
    assert_int_equal(r.replicas[0].ready_ms, 0);
    assert_int_equal(r.replicas[1].ready_ms, 1000);
    assert_int_equal(r.replicas[2].ready_ms, 1000);
    static const int64_t first[] = {0, 0, 1000, 1000, 1000, 1000};
    static const int64_t end[] = {30000, 30000, 3000, 3000, 3000, 31000};
    for (size_t k = 0; k < COUNT(v); k++) {
        assert_int_equal(r.requests[k].first_token_ms, first[k]);
        assert_int_equal(r.requests[k].end_ms, end[k]);
    }
    assert_int_equal(sample_at(&r, 6000)->desired, 3);
    assert_int_equal(sample_at(&r, 7000)->desired, 2);
    assert_int_equal(r.replicas[1].end_ms, 7000);
    assert_true(r.replicas[2].end_ms >= 31000);
    sim_serve_result_release(&r);
}

/* A drain that outlasts drain_timeout_ms fails what still runs (target 2,
 * limit 2, startup 0, 6 s windows, drain timeout 5 s):
 *   At 0: A1, A2 go to r0 (decided at once, ready at 0), B1, B2 wait. Tick
 *   1 s: 4 in flight and queued, want 2, panic: r1 ready at 1 s takes B1,
 *   B2. A2 and B2 last 2 s (end at 2 s and 3 s), A1 and B1 100 s. Load per
 *   second: 4, 4, 3, then 2. Panic ends at 7 s; the 6 s window wants 2 at
 *   7 and 8 s, 1 at 9 s (all 2): one of r0 and r1, each with one in
 *   flight, drains: the newer, r1. B1 still runs at 14 s: it fails there
 *   and r1's GPUs are free. */
static void test_drain_timeout_fails_what_still_runs(void **state)
{
    (void)state;
    struct sim_request v[] = {{0, 0, 10001, 2}, {0, 0, 201, 3}, {0, 0, 10001, 4}, {0, 0, 201, 5}};
    struct sim_reqtrace t = trace_of(v, COUNT(v));
    struct sim_serve_service svc = drain_service();
    svc.drain_timeout_ms = 5000;
    struct sim_serve_result r;
    run_policy(&t, &svc, "default", NULL, &r);
    assert_int_equal(sample_at(&r, 8000)->desired, 2);
    assert_int_equal(sample_at(&r, 9000)->desired, 1);
    assert_int_equal(sample_at(&r, 9000)->draining, 1);
    assert_int_equal(r.replicas[1].ready_ms, 1000);
    assert_int_equal(r.replicas[1].end_ms, 14000);
    assert_int_equal(r.requests[0].end_ms, 100000);
    assert_int_equal(r.requests[1].end_ms, 2000);
    assert_int_equal(r.requests[3].end_ms, 3000);
    assert_int_equal(r.requests[2].outcome, SIM_REQ_FAILED);
    assert_int_equal(r.requests[2].first_token_ms, 1000);
    assert_int_equal(r.requests[2].end_ms, -1);
    struct sim_serve_summary s;
    assert_int_equal(sim_serve_summarize(&r, &svc, "default", &s), 0);
    assert_int_equal(s.failed, 1);
    assert_int_equal(s.completed, 3);
    sim_serve_result_release(&r);
}

/* ---- rayserve ---- */

/* Ray Serve's rule, pure (target 2, upscale 30 s, downscale 600 s, look
 * back 30 s, min 0, max 10). */
static void test_rayserve_rule_waits_its_delays(void **state)
{
    (void)state;
    struct sim_serve_service svc = base_service();
    svc.autoscale.min = 0;
    svc.autoscale.max = 10;
    struct sim_rayserve_state st;
    sim_rayserve_init(&st);
    /* from zero with a request waiting: 1 at once, whatever the delays;
     * while that one starts (none running), the count holds, however many
     * wait */
    assert_int_equal(sim_rayserve_decide(&st, &svc, 0, 0, 0, 1), 1);
    assert_int_equal(sim_rayserve_decide(&st, &svc, 0, 0, 0, 0), 0);
    sim_rayserve_observe(&st, 10000, 50000);
    assert_int_equal(sim_rayserve_decide(&st, &svc, 10000, 0, 1, 50), 1);
    assert_int_equal(sim_rayserve_decide(&st, &svc, 50000, 0, 1, 50), 1);
    assert_int_equal(sim_rayserve_decide(&st, &svc, 20000, 0, 0, 0), 1); /* ongoing, none */
    sim_rayserve_init(&st);
    /* 8 ongoing from 10 s (want 4, from 1): the count moves at 40 s, 30 s
     * after the first decision that wanted it */
    for (int64_t t = 10000; t <= 40000; t += 1000) {
        if (t % 10000 == 0)
            sim_rayserve_observe(&st, t, 8000);
        assert_int_equal(sim_rayserve_decide(&st, &svc, t, 1, 1, 0), t < 40000 ? 1 : 4);
    }
    /* a decision that wants the count as it is resets the wait */
    sim_rayserve_init(&st);
    sim_rayserve_observe(&st, 10000, 8000);
    assert_int_equal(sim_rayserve_decide(&st, &svc, 10000, 1, 1, 0), 1); /* up from 10 s */
    sim_rayserve_observe(&st, 20000, 0);
    assert_int_equal(sim_rayserve_decide(&st, &svc, 20000, 2, 2, 0), 2); /* 4 ongoing: 2, as is */
    sim_rayserve_observe(&st, 30000, 8000);
    sim_rayserve_observe(&st, 40000, 8000);
    sim_rayserve_observe(&st, 50000, 8000);
    assert_int_equal(sim_rayserve_decide(&st, &svc, 50000, 1, 1, 0), 1); /* up again from 50 s */
    sim_rayserve_observe(&st, 60000, 8000);
    sim_rayserve_observe(&st, 70000, 8000);
    assert_int_equal(sim_rayserve_decide(&st, &svc, 79000, 1, 1, 0), 1);
    sim_rayserve_observe(&st, 80000, 8000);
    assert_int_equal(sim_rayserve_decide(&st, &svc, 80000, 1, 1, 0), 4);
    /* down: from 4 with nothing ongoing, to 1 after 600 s (never 0 from
     * above 1), then 1 -> 0 after another 600 s */
    sim_rayserve_init(&st);
    int64_t t = 0;
    for (; t <= 1300000; t += 10000) {
        sim_rayserve_observe(&st, t, 0);
        int32_t cur = t <= 600000 ? 4 : 1;
        int32_t want = t < 600000 ? 4 : t == 600000 ? 1 : t < 1210000 ? 1 : 0;
        assert_int_equal(sim_rayserve_decide(&st, &svc, t, cur, cur, 0), want);
        if (want == 0)
            break;
    }
    assert_int_equal(t, 1210000);
    /* min and max bound it */
    svc.autoscale.min = 2;
    svc.autoscale.max = 3;
    sim_rayserve_init(&st);
    sim_rayserve_observe(&st, 0, 100000);
    assert_int_equal(sim_rayserve_decide(&st, &svc, 0, 2, 2, 0), 2);
    sim_rayserve_observe(&st, 20000, 100000);
    assert_int_equal(sim_rayserve_decide(&st, &svc, 30000, 2, 2, 0), 3); /* 50 wanted */
    /* a report older than the look-back counts no more: nothing ongoing */
    sim_rayserve_init(&st);
    sim_rayserve_observe(&st, 0, 100000);
    assert_int_equal(sim_rayserve_decide(&st, &svc, 30000, 3, 3, 0), 3); /* down from 30 s */
    assert_int_equal(sim_rayserve_decide(&st, &svc, 630000, 3, 3, 0), 2);
}

/* The same through the engine: one replica ready from 0 (min 1), 8
 * requests of 100 s at 0. The first report (10 s) says 8 ongoing: want 4;
 * the count moves at 40 s, when three replicas start (ready at 50 s). */
static void test_rayserve_engine_waits_upscale_delay(void **state)
{
    (void)state;
    struct sim_request v[8];
    struct sim_reqtrace t = burst(v, COUNT(v), 0, 10001);
    struct sim_serve_service svc = base_service();
    svc.autoscale.min = 1;
    svc.autoscale.max = 5;
    struct sim_serve_result r;
    run_policy(&t, &svc, "rayserve", NULL, &r);
    assert_int_equal(sample_at(&r, 39000)->desired, 1);
    assert_int_equal(sample_at(&r, 40000)->desired, 4);
    assert_int_equal(sample_at(&r, 40000)->starting, 3);
    assert_int_equal(sample_at(&r, 50000)->ready, 4);
    assert_int_equal(r.nreplicas, 4);
    assert_int_equal(r.replicas[1].asked_ms, 40000);
    assert_int_equal(r.replicas[3].ready_ms, 50000);
    for (size_t k = 0; k < COUNT(v); k++)
        assert_int_equal(r.requests[k].end_ms, 100000);
    sim_serve_result_release(&r);
}

/* ---- static fleets ---- */

/* Requests of 10 s alone (no prompt, 1001 tokens), target 2: minute 0 has
 * 12 (120 s over 60: concurrency 2, one replica), minute 1 has 60 (10: five
 * replicas), minute 2 none, minute 3 six. Peak 5; mean 780 s over 240 s,
 * 3.25: two. A minute of 120 one-second prefills (1000 prompt tokens, one
 * output token) needs 2 replicas for its prefills (2 s of prefill a
 * second), whatever the target. */
static void test_static_sizes_peak_and_mean(void **state)
{
    (void)state;
    struct sim_request v[78];
    size_t n = 0;
    for (int k = 0; k < 12; k++)
        v[n++] = (struct sim_request){k * 5000, 0, 1001, 0};
    for (int k = 0; k < 60; k++)
        v[n++] = (struct sim_request){60000 + k * 1000, 0, 1001, 0};
    for (int k = 0; k < 6; k++)
        v[n++] = (struct sim_request){180000 + k * 10000, 0, 1001, 0};
    struct sim_reqtrace t = trace_of(v, n);
    struct sim_serve_service svc = base_service();
    svc.autoscale.target_milli = 2000;
    assert_int_equal(sim_serve_static_size(&t, &svc, SIM_SERVE_STATIC_PEAK), 5);
    assert_int_equal(sim_serve_static_size(&t, &svc, SIM_SERVE_STATIC_MEAN), 2);
    /* another metric: per replica max_batch (32) */
    svc.autoscale.metric = AUTOSCALE_METRIC_RPS;
    assert_int_equal(sim_serve_static_size(&t, &svc, SIM_SERVE_STATIC_PEAK), 1);
    svc.autoscale.metric = AUTOSCALE_METRIC_CONCURRENCY;

    struct sim_request p[120];
    for (int k = 0; k < 120; k++)
        p[k] = (struct sim_request){k * 500, 1000, 1, 0};
    struct sim_reqtrace tp = trace_of(p, 120);
    svc.autoscale.target_milli = 100000;
    assert_int_equal(sim_serve_static_size(&tp, &svc, SIM_SERVE_STATIC_PEAK), 2);
    struct sim_reqtrace none = trace_of(NULL, 0);
    assert_int_equal(sim_serve_static_size(&none, &svc, SIM_SERVE_STATIC_PEAK), 0);

    /* The engine: five replicas ready at 0, no cold start, held to the end */
    svc.autoscale.target_milli = 2000;
    struct sim_serve_result r;
    run_policy(&t, &svc, "static-peak", NULL, &r);
    assert_int_equal(r.nreplicas, 5);
    for (size_t k = 0; k < r.nreplicas; k++) {
        assert_int_equal(r.replicas[k].start_ms, 0);
        assert_int_equal(r.replicas[k].ready_ms, 0);
        assert_int_equal(r.replicas[k].end_ms, r.end_ms);
        assert_false(r.replicas[k].cold);
    }
    assert_int_equal(r.end_ms, 230000 + 10000);
    struct sim_serve_summary s;
    assert_int_equal(sim_serve_summarize(&r, &svc, "static-peak", &s), 0);
    assert_true(fabs(s.gpu_hours - 5 * 240.0 / 3600) < 1e-12);
    assert_int_equal(s.cold_starts, 0);
    assert_int_equal(s.replicas_max, 5);
    sim_serve_result_release(&r);
}

/* ---- options ---- */

/* start_delay_ms: the k-th replica started waits that much more before its
 * startup. The scale-from-zero case with 3 s for the first: placed at 3500,
 * ready 13500; a static fleet of two with {0, 5000}: the second placed (and
 * ready: a fleet there before the trace) at 5 s. */
static void test_start_delay_delays_the_kth_start(void **state)
{
    (void)state;
    struct sim_request v[] = {{500, 0, 101, 2}};
    struct sim_reqtrace t = trace_of(v, COUNT(v));
    struct sim_serve_service svc = base_service();
    int64_t delay[] = {3000};
    struct sim_serve_opts opts = {.start_delay_ms = delay, .nstart_delay = 1};
    struct sim_serve_result r;
    run_policy(&t, &svc, "default", &opts, &r);
    assert_int_equal(r.replicas[0].asked_ms, 500);
    assert_int_equal(r.replicas[0].start_ms, 3500);
    assert_int_equal(r.replicas[0].ready_ms, 13500);
    assert_int_equal(r.requests[0].first_token_ms, 13500);
    sim_serve_result_release(&r);

    struct sim_request w[] = {{0, 0, 1001, 2}, {0, 0, 1001, 3}, {6000, 0, 101, 4}};
    struct sim_reqtrace tw = trace_of(w, COUNT(w));
    svc.concurrency_limit = 1;
    int64_t d2[] = {0, 5000};
    opts = (struct sim_serve_opts){.start_delay_ms = d2, .nstart_delay = 2};
    svc.autoscale.target_milli = 100; /* 21 s of service in a minute: 0.35 / 0.1: four */
    assert_int_equal(sim_serve_static_size(&tw, &svc, SIM_SERVE_STATIC_PEAK), 4);
    run_policy(&tw, &svc, "static-peak", &opts, &r);
    assert_int_equal(r.replicas[0].start_ms, 0);
    assert_int_equal(r.replicas[1].start_ms, 5000);
    assert_int_equal(r.replicas[1].ready_ms, 5000);
    assert_int_equal(r.replicas[2].start_ms, 0);
    /* the second request found r0 busy (limit 1) and r2 ready: no wait; the
     * third, at 6 s, goes to r1, ready since 5 s */
    assert_int_equal(r.requests[1].first_token_ms, 0);
    assert_int_equal(r.requests[2].first_token_ms, 6000);
    sim_serve_result_release(&r);
}

/* ---- determinism and errors ---- */

static void test_same_input_same_bytes(void **state)
{
    (void)state;
    size_t n = 5000;
    struct sim_request *v = calloc(n, sizeof(*v));
    assert_non_null(v);
    uint64_t seed = 99;
    double at = 0;
    for (size_t k = 0; k < n; k++) {
        at += -log(uniform(&seed)) * 300;
        v[k] = (struct sim_request){(int64_t)at, (int32_t)(uniform(&seed) * 3000),
                                    1 + (int32_t)(uniform(&seed) * 400), (uint32_t)k + 2};
    }
    struct sim_reqtrace t = trace_of(v, n);
    struct sim_serve_service svc = base_service();
    svc.autoscale.max = 10;
    svc.concurrency_limit = 8;
    svc.model.max_batch = 8;
    svc.model.decode_tps = 800;
    svc.model.prefill_tps = 10000;
    static const char *const policies[] = {"default", "knative", "rayserve", "static-peak",
                                           "static-mean"};
    for (size_t p = 0; p < COUNT(policies); p++) {
        struct sim_serve_result a, b;
        run_policy(&t, &svc, policies[p], NULL, &a);
        run_policy(&t, &svc, policies[p], NULL, &b);
        assert_int_equal(a.nreplicas, b.nreplicas);
        assert_int_equal(a.nsamples, b.nsamples);
        assert_int_equal(a.end_ms, b.end_ms);
        assert_memory_equal(a.requests, b.requests, n * sizeof(*a.requests));
        assert_memory_equal(a.replicas, b.replicas, a.nreplicas * sizeof(*a.replicas));
        assert_memory_equal(a.samples, b.samples, a.nsamples * sizeof(*a.samples));
        size_t done = 0;
        for (size_t k = 0; k < n; k++)
            done += a.requests[k].outcome == SIM_REQ_DONE;
        assert_true(done > n / 2);
        sim_serve_result_release(&a);
        sim_serve_result_release(&b);
    }
    free(v);
}

static void test_bad_service_is_named(void **state)
{
    (void)state;
    struct sim_request v[] = {{0, 0, 1, 2}};
    struct sim_reqtrace t = trace_of(v, 1);
    struct sim_serve_service svc = base_service();
    svc.model.decode_tps_request = 20000;
    struct sim_serve_policy pol;
    assert_int_equal(sim_serve_policy_find("default", &pol), 0);
    struct sim_serve_result r;
    sim_serve_result_init(&r);
    char err[256];
    assert_int_equal(sim_serve_run(&t, &svc, &pol, NULL, &r, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err,
                        "service svc: simulate.decode_tps_request: expected > 0 and <= decode_tps");
    assert_null(r.requests);
    svc = base_service();
    svc.model.max_batch = 0;
    assert_int_equal(sim_serve_run(&t, &svc, &pol, NULL, &r, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "service svc: simulate.max_batch: expected 1 .. 4096");
}

/* Requests no replica can ever take (a cap below one replica) time out
 * when nothing else can happen, rather than wait for ever. */
static void test_unplaceable_replicas_end_the_replay(void **state)
{
    (void)state;
    struct sim_request v[] = {{0, 0, 1, 2}, {10, 0, 1, 3}};
    struct sim_reqtrace t = trace_of(v, COUNT(v));
    struct sim_serve_service svc = base_service();
    svc.queue_timeout_ms = 0;
    struct sim_serve_opts opts = {.gpu_cap_milli = 500};
    struct sim_serve_result r;
    run_policy(&t, &svc, "static-peak", &opts, &r);
    assert_int_equal(r.requests[0].outcome, SIM_REQ_TIMEOUT);
    assert_int_equal(r.requests[1].outcome, SIM_REQ_TIMEOUT);
    assert_int_equal(r.replicas[0].ready_ms, -1);
    sim_serve_result_release(&r);
}

/* Every allocation of a replay and of its summary failed in turn: each
 * failure is GPO_ENOMEM with a message and the result left empty (and
 * nothing leaks: the sanitizers' build checks that). */
static void test_every_allocation_failure_is_reported(void **state)
{
    (void)state;
    struct sim_request v[] = {{0, 0, 3001, 2}, {0, 0, 3001, 3}, {0, 0, 201, 4},
                              {0, 0, 201, 5},  {0, 0, 201, 6},  {0, 0, 3001, 7}};
    struct sim_reqtrace t = trace_of(v, COUNT(v));
    struct sim_serve_service svc = drain_service();
    static const char *const policies[] = {"default", "rayserve", "static-peak"};
    for (size_t p = 0; p < COUNT(policies); p++) {
        struct sim_serve_policy pol;
        assert_int_equal(sim_serve_policy_find(policies[p], &pol), 0);
        struct sim_serve_result r;
        sim_serve_result_init(&r);
        char err[256];
        uint64_t before = gpo_alloc_count();
        assert_int_equal(sim_serve_run(&t, &svc, &pol, NULL, &r, err, sizeof(err)), 0);
        uint64_t calls = gpo_alloc_count() - before;
        assert_true(calls > 3);
        sim_serve_result_release(&r);
        for (uint64_t at = 1; at <= calls; at++) {
            gpo_alloc_fail_at(at);
            int rc = sim_serve_run(&t, &svc, &pol, NULL, &r, err, sizeof(err));
            gpo_alloc_fail_at(0);
            assert_int_equal(rc, GPO_ENOMEM);
            assert_string_equal(err, "service svc: out of memory");
            assert_null(r.requests);
            assert_null(r.replicas);
            assert_null(r.samples);
        }
        assert_int_equal(sim_serve_run(&t, &svc, &pol, NULL, &r, err, sizeof(err)), 0);
        struct sim_serve_summary s;
        for (uint64_t at = 1; at <= 4; at++) {
            gpo_alloc_fail_at(at);
            int rc = sim_serve_summarize(&r, &svc, pol.name, &s);
            gpo_alloc_fail_at(0);
            assert_int_equal(rc, GPO_ENOMEM);
        }
        sim_serve_result_release(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mmc_mean_wait_matches_erlang_c),
        cmocka_unit_test(test_continuous_batching_shares_decode),
        cmocka_unit_test(test_queue_limit_drops_and_timeout_times_out),
        cmocka_unit_test(test_default_and_knative_scale_from_zero_and_back),
        cmocka_unit_test(test_idle_stretch_skipped_changes_nothing),
        cmocka_unit_test(test_knative_spec_is_knatives_defaults),
        cmocka_unit_test(test_knative_target_is_70_percent_of_the_limit),
        cmocka_unit_test(test_default_observes_the_specs_metric),
        cmocka_unit_test(test_default_panics_on_a_burst),
        cmocka_unit_test(test_drain_picks_the_fewest_in_flight),
        cmocka_unit_test(test_drain_timeout_fails_what_still_runs),
        cmocka_unit_test(test_rayserve_rule_waits_its_delays),
        cmocka_unit_test(test_rayserve_engine_waits_upscale_delay),
        cmocka_unit_test(test_static_sizes_peak_and_mean),
        cmocka_unit_test(test_start_delay_delays_the_kth_start),
        cmocka_unit_test(test_same_input_same_bytes),
        cmocka_unit_test(test_bad_service_is_named),
        cmocka_unit_test(test_unplaceable_replicas_end_the_replay),
        cmocka_unit_test(test_every_allocation_failure_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

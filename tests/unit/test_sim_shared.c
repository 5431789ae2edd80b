/* test_sim_shared.c - serving and training on one cluster (serve_shared.h)
 * and the job replay's hooks it rests on (engine.h: extra jobs in the
 * "serving" class, GPUs held back for a split), on small cases worked out by
 * hand. Traces and specs are built in memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "sim/engine.h"
#include "sim/serve.h"
#include "sim/serve_policy.h"
#include "sim/serve_shared.h"
#include "sim/stats.h"

/* ---- building inputs ---- */

#define MAX_JOBS 64

struct world {
    struct sim_trace trace;
    struct sim_trace_job jobs[MAX_JOBS];
    char *queues[2];
    struct sim_spec spec; /* parsed: heap-owned, as serve_shared expects */
};

/* A spec from YAML text; the trace's queue "qa" is team "a"'s. */
static void world_init(struct world *w, const char *yaml)
{
    memset(w, 0, sizeof(*w));
    w->queues[0] = "qa";
    w->trace.jobs = w->jobs;
    w->trace.queues = w->queues;
    w->trace.nqueues = 1;
    char err[256] = "";
    int e = sim_spec_parse(&w->spec, yaml, strlen(yaml), "test.yaml", err, sizeof(err));
    if (e)
        fail_msg("spec: %s", err);
}

static void world_release(struct world *w)
{
    sim_spec_release(&w->spec);
}

static void add_job(struct world *w, const char *id, int64_t submit, int64_t duration,
                    int64_t gpu_milli)
{
    assert_true(w->trace.njobs < MAX_JOBS);
    w->jobs[w->trace.njobs] = (struct sim_trace_job){.id = id,
                                                     .submit_s = submit,
                                                     .duration_s = duration,
                                                     .gpu_milli = gpu_milli,
                                                     .queue = 0,
                                                     .gpu_type = SIM_NONE,
                                                     .line = (uint32_t)w->trace.njobs + 2};
    w->trace.njobs++;
}

/* One pool p of `nodes` x `gpus`; team a (queue qa) guaranteed
 * `a_guaranteed` GPUs, and team serving guaranteed the whole pool, as
 * serve_shared adds it (unless `a_guaranteed` < 0: then no guarantee for a
 * and no team serving). */
static const char *spec_text(char *buf, size_t len, int nodes, int gpus, int a_guaranteed)
{
    int n = snprintf(buf, len,
                     "pools:\n"
                     "  - {name: p, nodes: %d, gpus_per_node: %d}\n"
                     "teams:\n"
                     "  - name: a\n"
                     "    queues: [qa]\n",
                     nodes, gpus);
    if (a_guaranteed >= 0)
        snprintf(buf + n, len - (size_t)n,
                 "    quotas: [{pool: p, guaranteed_gpus: %d}]\n"
                 "  - name: serving\n"
                 "    quotas: [{pool: p, guaranteed_gpus: %d}]\n",
                 a_guaranteed, nodes * gpus);
    return buf;
}

static int run_with(const struct world *w, const char *policy, const struct sim_opts *opts,
                    struct sim_result *r, char *err, size_t errlen)
{
    struct sim_policy pol;
    assert_int_equal(sim_policy_find(policy, &pol), 0);
    sim_result_init(r);
    return sim_run(&w->trace, &w->spec, &pol, opts, r, err, errlen);
}

static void run_ok(const struct world *w, const char *policy, const struct sim_opts *opts,
                   struct sim_result *r)
{
    char err[256] = "";
    int e = run_with(w, policy, opts, r, err, sizeof(err));
    if (e)
        fail_msg("sim_run(%s): %d: %s", policy, e, err);
}

/* ---- the job replay's hooks ---- */

/* One GPU. Training job a: t=0, 100 s. A replica asked at t=10 for 20 s.
 * default (preemption on): the replica's class evicts a, which has its 30 s
 * of grace (runs to t=40, 40 s done); the replica runs 40-60 (placement
 * delay 30 s); a restarts at 60, pays the 5 s penalty and its last 60 s:
 * ends at 125, JCT 125. fifo (no preemption): the replica waits for a's end
 * at 100 (delay 90 s). */
static void test_replica_preempts_training(void **state)
{
    (void)state;
    char buf[512];
    struct world w;
    world_init(&w, spec_text(buf, sizeof(buf), 1, 1, 0));
    add_job(&w, "a", 0, 100, 1000);
    const struct sim_extra_job rep = {
        .submit_ms = 10000, .duration_ms = 20000, .gpu_milli = 1000, .team = 1};
    struct sim_opts opts = {.restart_penalty_s = 5, .extra = &rep, .nextra = 1};
    struct sim_result r;
    run_ok(&w, "default", &opts, &r);
    assert_int_equal(r.njobs, 1);
    assert_int_equal(r.nextra, 1);
    const struct sim_job_result *a = &r.jobs[0], *x = &r.extra[0];
    assert_int_equal(a->preemptions, 1);
    assert_int_equal(a->end_s, 125);
    assert_int_equal(a->running_s, 105);
    assert_int_equal(x->first_start_ms, 40000);
    assert_int_equal(x->end_s, 60);
    assert_int_equal(x->preemptions, 0);
    assert_int_equal(r.preemptions, 1);
    /* The figures are the trace's: a's 100 GPU-s of work, not the replica's. */
    assert_true(r.useful_gpu_s > 99.99 && r.useful_gpu_s < 100.01);
    struct sim_summary s;
    assert_int_equal(sim_summary_compute(&r, "default", &s), 0);
    assert_int_equal(s.jobs, 1);
    assert_true(s.jct_avg_s > 124.99 && s.jct_avg_s < 125.01);
    sim_summary_release(&s);
    sim_result_release(&r);

    run_ok(&w, "fifo", &opts, &r);
    assert_int_equal(r.jobs[0].preemptions, 0);
    assert_int_equal(r.jobs[0].end_s, 100);
    assert_int_equal(r.extra[0].first_start_ms, 100000);
    sim_result_release(&r);
    world_release(&w);
}

/* One GPU. A replica holds it from t=0 for 50 s; training job b asks at
 * t=1. No rule lets training evict a replica: not the priority class (below
 * it), not LAS or migration (a replica is not checkpointable), not srtf's
 * classes (below serving's), not a reclaim (team a is guaranteed the GPU, but
 * the replica runs within serving's guarantee): b starts at 50 under each. */
static void test_training_never_preempts_a_replica(void **state)
{
    (void)state;
    char buf[512];
    struct world w;
    world_init(&w, spec_text(buf, sizeof(buf), 1, 1, 1));
    add_job(&w, "b", 1, 10, 1000);
    const struct sim_extra_job rep = {
        .submit_ms = 0, .duration_ms = 50000, .gpu_milli = 1000, .team = 1};
    struct sim_opts opts = {.extra = &rep, .nextra = 1};
    const char *pols[] = {"default", "las", "fairshare", "srtf", "sjf", "priority"};
    for (size_t k = 0; k < sizeof(pols) / sizeof(*pols); k++) {
        struct sim_result r;
        run_ok(&w, pols[k], &opts, &r);
        assert_int_equal(r.extra[0].first_start_ms, 0);
        assert_int_equal(r.extra[0].preemptions, 0);
        assert_int_equal(r.extra[0].end_s, 50);
        assert_int_equal(r.jobs[0].first_start_s, 50);
        assert_int_equal(r.jobs[0].end_s, 60);
        sim_result_release(&r);
    }
    world_release(&w);
}

/* Two nodes of 2 GPUs, the last 2 held back (node p-1): x, y, z of 1 GPU at
 * t=0 for 10 s: x and y on p-0 at once, z at 10 on p-0; a 3-GPU job never
 * runs. The cluster's GPUs count 2. */
static void test_held_gpus_take_no_job(void **state)
{
    (void)state;
    char buf[512];
    struct world w;
    world_init(&w, spec_text(buf, sizeof(buf), 2, 2, 0));
    add_job(&w, "x", 0, 10, 1000);
    add_job(&w, "y", 0, 10, 1000);
    add_job(&w, "z", 0, 10, 1000);
    add_job(&w, "big", 0, 10, 3000);
    const char *pols[] = {"default", "fifo", "srtf"};
    for (size_t k = 0; k < sizeof(pols) / sizeof(*pols); k++) {
        struct sim_opts opts = {.held_gpus = 2};
        struct sim_result r;
        run_ok(&w, pols[k], &opts, &r);
        assert_int_equal(r.total_gpus_milli, 2000);
        for (size_t j = 0; j < 3; j++) {
            assert_non_null(r.jobs[j].placement);
            assert_string_equal(r.jobs[j].placement, "p-0:1");
        }
        assert_int_equal(r.jobs[0].first_start_s, 0);
        assert_int_equal(r.jobs[1].first_start_s, 0);
        assert_int_equal(r.jobs[2].first_start_s, 10);
        assert_true(r.jobs[3].unschedulable);
        for (size_t i = 0; i < r.nsamples; i++)
            assert_true(r.samples[i].busy_milli <= 2000);
        sim_result_release(&r);
    }
    /* Held back: nothing else changes. Not held: z starts at once on p-1. */
    struct sim_opts none = {0};
    struct sim_result r;
    run_ok(&w, "default", &none, &r);
    assert_int_equal(r.total_gpus_milli, 4000);
    assert_int_equal(r.jobs[2].first_start_s, 0);
    assert_false(r.jobs[3].unschedulable);
    sim_result_release(&r);
    /* More held than there are. */
    struct sim_opts over = {.held_gpus = 5};
    char err[256] = "";
    assert_int_equal(run_with(&w, "default", &over, &r, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "5 GPUs held back from a cluster of 4"));
    world_release(&w);
}

/* Every bad extra job is an error naming the field. */
static void test_bad_extra_jobs(void **state)
{
    (void)state;
    char buf[512];
    struct world w;
    world_init(&w, spec_text(buf, sizeof(buf), 1, 2, 0));
    add_job(&w, "a", 0, 10, 1000);
    const struct {
        struct sim_extra_job x[2];
        const char *msg;
    } cases[] = {
        {{{0, 10, 1000, 1}, {0, 10, 1000, 2}}, "extra job 1: bad team"},
        {{{5, 10, 1000, 1}, {4, 10, 1000, 1}}, "extra job 1: bad submit_ms"},
        {{{-1, 10, 1000, 1}, {4, 10, 1000, 1}}, "extra job 0: bad submit_ms"},
        {{{0, -1, 1000, 1}, {4, 10, 1000, 1}}, "extra job 0: bad duration_ms"},
        {{{0, 10, 1500, 1}, {4, 10, 1000, 1}}, "extra job 0: bad gpu_milli"},
        {{{0, 10, 0, 1}, {4, 10, 1000, 1}}, "extra job 0: bad gpu_milli"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(*cases); k++) {
        struct sim_opts opts = {.extra = cases[k].x, .nextra = 2};
        struct sim_result r;
        char err[256] = "";
        assert_int_equal(run_with(&w, "default", &opts, &r, err, sizeof(err)), GPO_EINVAL);
        assert_string_equal(err, cases[k].msg);
    }
    world_release(&w);
}

/* A mixed workload: training jobs of 1-4 GPUs and replicas of 1 GPU on 2
 * nodes of 4. The same inputs give the same results; a pass at every step
 * gives the same as the skipped passes (engine.c's pass_needed with the
 * serving class). Every policy. */
static void test_same_inputs_same_results(void **state)
{
    (void)state;
    char buf[512];
    struct world w;
    world_init(&w, spec_text(buf, sizeof(buf), 2, 4, 0));
    uint32_t seed = 12345;
    static char ids[MAX_JOBS][8];
    int64_t t = 0;
    for (int k = 0; k < 40; k++) {
        seed = seed * 1103515245u + 12345u;
        t += (seed >> 8) % 20;
        snprintf(ids[k], sizeof(ids[k]), "j%d", k);
        add_job(&w, ids[k], t, 5 + (int64_t)((seed >> 12) % 200), 1000 * (1 + (seed >> 20) % 4));
    }
    struct sim_extra_job reps[12];
    for (int k = 0; k < 12; k++) {
        seed = seed * 1103515245u + 12345u;
        reps[k] = (struct sim_extra_job){.submit_ms = 30000LL * k + (seed >> 16) % 1000,
                                         .duration_ms = 10000 + (seed >> 8) % 90000,
                                         .gpu_milli = 1000,
                                         .team = 1};
    }
    for (size_t p = 0; sim_policy_name(p); p++) {
        struct sim_opts a = {.restart_penalty_s = 3, .extra = reps, .nextra = 12};
        struct sim_opts b = a, every = a;
        every.pass_every_step = true;
        struct sim_result ra, rb, re;
        run_ok(&w, sim_policy_name(p), &a, &ra);
        run_ok(&w, sim_policy_name(p), &b, &rb);
        run_ok(&w, sim_policy_name(p), &every, &re);
        for (size_t i = 0; i < ra.njobs + ra.nextra; i++) {
            const struct sim_job_result *x = &ra.jobs[i], *y = &rb.jobs[i], *z = &re.jobs[i];
            assert_int_equal(x->first_start_ms, y->first_start_ms);
            assert_int_equal(x->end_s, y->end_s);
            assert_int_equal(x->preemptions, y->preemptions);
            assert_int_equal(x->first_start_ms, z->first_start_ms);
            assert_int_equal(x->end_s, z->end_s);
            assert_int_equal(x->preemptions, z->preemptions);
            assert_true(x->end_s >= 0);
        }
        for (size_t i = 0; i < ra.nextra; i++)
            assert_int_equal(ra.extra[i].preemptions, 0);
        sim_result_release(&ra);
        sim_result_release(&rb);
        sim_result_release(&re);
    }
    world_release(&w);
}

/* ---- serving and training together (serve_shared.h) ---- */

/* A service of 1-GPU replicas that each serve one request at a time: a
 * request of 1000 prompt tokens (1 s of prefill) and 101 output tokens (the
 * first with the prefill, then 100 at 10/s: 10 s); startup 10 s; the
 * autoscaler aims at one request per replica, 0 .. 4 replicas; TTFT SLO 15 s;
 * the router holds requests up to 10 minutes. */
static void service_init(struct sim_serve_service *svc)
{
    memset(svc, 0, sizeof(*svc));
    snprintf(svc->name, sizeof(svc->name), "chat");
    autoscale_spec_default(&svc->autoscale);
    svc->autoscale.metric = AUTOSCALE_METRIC_CONCURRENCY;
    svc->autoscale.target_milli = 1000;
    svc->autoscale.min = 0;
    svc->autoscale.max = 4;
    svc->concurrency_limit = 1;
    svc->queue_limit = 1000;
    svc->queue_timeout_ms = 600000;
    svc->drain_timeout_ms = 30000;
    svc->gpu_milli = 1000;
    svc->model = (struct sim_replica_model){.prefill_tps = 1000,
                                            .decode_tps = 10,
                                            .decode_tps_request = 10,
                                            .max_batch = 1,
                                            .startup_ms = 10000};
    svc->slo.ttft_ms = 15000;
}

struct serving {
    struct sim_reqtrace trace;
    struct sim_request req[8];
    struct sim_serve_service svc;
    struct sim_serve_policy pol;
    struct sim_serve_result serve;
    struct sim_result jobs;
    struct sim_serve_shared_stat stat;
};

/* `n` requests at time 0, as above, under the default policy. */
static void serving_init(struct serving *sv, size_t n)
{
    memset(sv, 0, sizeof(*sv));
    assert_true(n <= 8);
    for (size_t k = 0; k < n; k++)
        sv->req[k] = (struct sim_request){
            .arrival_ms = 0, .input_tokens = 1000, .output_tokens = 101, .line = (uint32_t)k + 2};
    sv->trace.v = sv->req;
    sv->trace.n = n;
    service_init(&sv->svc);
    assert_int_equal(sim_serve_policy_find("default", &sv->pol), 0);
    sim_serve_result_init(&sv->serve);
    sim_result_init(&sv->jobs);
}

static int64_t offset_ms; /* serve_offset_ms of the next shared_run */

static int shared_run(struct world *w, struct serving *sv, const char *job_policy,
                      int64_t penalty_s, int64_t split_milli, char *err, size_t errlen)
{
    struct sim_policy jp;
    assert_int_equal(sim_policy_find(job_policy, &jp), 0);
    struct sim_opts jo = {.restart_penalty_s = penalty_s};
    struct sim_serve_shared_in in = {.traces = &sv->trace,
                                     .services = &sv->svc,
                                     .nservices = 1,
                                     .policies = &sv->pol,
                                     .npolicies = 1,
                                     .jobs = &w->trace,
                                     .spec = &w->spec,
                                     .job_policy = &jp,
                                     .job_opts = &jo,
                                     .split_gpu_milli = split_milli,
                                     .serve_offset_ms = offset_ms};
    sim_serve_result_release(&sv->serve);
    sim_result_release(&sv->jobs);
    struct sim_serve_shared_out out = {.serve = &sv->serve, .jobs = &sv->jobs, .stats = &sv->stat};
    return sim_serve_shared_run(&in, &out, err, errlen);
}

static void shared_ok(struct world *w, struct serving *sv, const char *job_policy,
                      int64_t penalty_s, int64_t split_milli)
{
    char err[512] = "";
    int e = shared_run(w, sv, job_policy, penalty_s, split_milli, err, sizeof(err));
    if (e)
        fail_msg("sim_serve_shared_run: %d: %s", e, err);
}

static void serving_release(struct serving *sv)
{
    sim_serve_result_release(&sv->serve);
    sim_result_release(&sv->jobs);
}

/* One GPU, one request at t=1 s; alone, the service asks for a replica at
 * once, ready at 11 s: first token at 12 s. With a training job holding the
 * GPU from t=0 for 100 s:
 * - fifo (no preemption): the replica waits for the GPU until 100 s (a
 *   delay of 99 s); the serving replay gets that delay: the first token at
 *   100 + 10 + 1 = 111 s, past the SLO. The second job replay sees the same
 *   delay: converged in 2 rounds. The training job is untouched (JCT 100).
 * - default: the replica evicts the job (30 s of grace): placed at 31 s,
 *   first token at 31 + 10 + 1 = 42 s; the job did 31 s, restarts when the
 *   replica ends (after its life L), pays 5 s and its 69 s left: ends at
 *   105 + L.
 * (At a tie, serving's replica would go first even under fifo: it is within
 * its team's guarantee, which the core ranks before borrowed work.) */
static void test_shared_delays_feed_back(void **state)
{
    (void)state;
    char buf[512];
    struct world w;
    world_init(&w, spec_text(buf, sizeof(buf), 1, 1, -1)); /* serve_shared adds "serving" */
    add_job(&w, "a", 0, 100, 1000);
    struct serving sv;
    serving_init(&sv, 1);
    sv.req[0].arrival_ms = 1000;

    /* Alone, on the serving engine: the reference. */
    char err[256] = "";
    assert_int_equal(sim_serve_run(&sv.trace, &sv.svc, &sv.pol, NULL, &sv.serve, err, sizeof(err)),
                     0);
    assert_int_equal(sv.serve.requests[0].first_token_ms, 12000);
    assert_true(sv.serve.requests[0].slo_met);
    sim_serve_result_release(&sv.serve);

    shared_ok(&w, &sv, "fifo", 5, 0);
    assert_int_equal(w.spec.nteams, 2);
    assert_string_equal(w.spec.teams[1].name, "serving");
    assert_int_equal(sv.stat.rounds, 2);
    assert_true(sv.stat.converged);
    assert_int_equal(sv.stat.replicas, 1);
    assert_int_equal(sv.stat.delayed, 1);
    assert_true(sv.stat.delay_max_s > 98.999 && sv.stat.delay_max_s < 99.001);
    assert_int_equal(sv.serve.requests[0].first_token_ms, 111000);
    assert_false(sv.serve.requests[0].slo_met);
    assert_int_equal(sv.serve.replicas[0].asked_ms, 1000);
    assert_int_equal(sv.serve.replicas[0].start_ms, 100000);
    assert_int_equal(sv.jobs.njobs, 1);
    assert_int_equal(sv.jobs.nteams, 1); /* the added team is not training's */
    assert_int_equal(sv.jobs.jobs[0].end_s, 100);
    assert_int_equal(sv.jobs.extra[0].first_start_ms, 100000);

    /* The spec now has its serving team: a second run uses it. */
    shared_ok(&w, &sv, "default", 5, 0);
    assert_int_equal(w.spec.nteams, 2);
    assert_int_equal(sv.stat.rounds, 2);
    assert_true(sv.stat.converged);
    assert_int_equal(sv.serve.replicas[0].start_ms, 31000);
    assert_int_equal(sv.serve.requests[0].first_token_ms, 42000);
    int64_t life = sv.serve.replicas[0].end_ms - sv.serve.replicas[0].start_ms;
    assert_true(life > 0);
    assert_int_equal(sv.jobs.jobs[0].preemptions, 1);
    assert_int_equal(sv.jobs.jobs[0].end_s, (105000 + life) / 1000);
    assert_int_equal(sv.stat.replica_preemptions, 0);
    serving_release(&sv);
    world_release(&w);

    /* The same a day later in the job trace, serving's clock aligned there:
     * the same delay, serving's times on its own clock. */
    world_init(&w, spec_text(buf, sizeof(buf), 1, 1, -1));
    add_job(&w, "a", 86400, 100, 1000);
    serving_init(&sv, 1);
    sv.req[0].arrival_ms = 1000;
    offset_ms = 86400 * 1000;
    shared_ok(&w, &sv, "fifo", 5, 0);
    offset_ms = 0;
    assert_int_equal(sv.stat.rounds, 2);
    assert_true(sv.stat.delay_max_s > 98.999 && sv.stat.delay_max_s < 99.001);
    assert_int_equal(sv.serve.requests[0].first_token_ms, 111000);
    assert_int_equal(sv.jobs.extra[0].first_start_ms, (86400 + 100) * 1000);
    serving_release(&sv);
    world_release(&w);
}

/* Two nodes of one GPU, split 1: the last (p-1) is serving's. Four requests
 * at t=0 want four replicas; the cap lets one hold a GPU at a time, so the
 * requests are served one after the other. Training's three jobs of 1 GPU
 * for 10 s run one at a time on p-0: 0-10, 10-20, 20-30. */
static void test_split(void **state)
{
    (void)state;
    char buf[512];
    struct world w;
    world_init(&w, spec_text(buf, sizeof(buf), 2, 1, 0));
    add_job(&w, "x", 0, 10, 1000);
    add_job(&w, "y", 0, 10, 1000);
    add_job(&w, "z", 0, 10, 1000);
    struct serving sv;
    serving_init(&sv, 4);
    shared_ok(&w, &sv, "default", 0, 1000);
    assert_int_equal(sv.stat.rounds, 1);
    assert_true(sv.stat.converged);
    assert_int_equal(sv.stat.cap_gpu_milli, 1000);
    assert_int_equal(sv.jobs.total_gpus_milli, 1000);
    assert_int_equal(sv.jobs.nextra, 0);
    for (size_t j = 0; j < 3; j++) {
        assert_string_equal(sv.jobs.jobs[j].placement, "p-0:1");
        assert_int_equal(sv.jobs.jobs[j].end_s, 10 * (int64_t)(j + 1));
    }
    /* Never two replicas holding a GPU at once. */
    const struct sim_serve_result *r = &sv.serve;
    for (size_t i = 0; i < r->nreplicas; i++) {
        size_t held = 0;
        for (size_t k = 0; k < r->nreplicas; k++)
            held += r->replicas[k].start_ms <= r->replicas[i].start_ms &&
                    r->replicas[k].end_ms > r->replicas[i].start_ms;
        assert_true(held <= 1);
    }
    /* Served one after the other: four distinct first tokens, the first at 11 s. */
    int64_t first = INT64_MAX, last = 0;
    for (size_t k = 0; k < 4; k++) {
        int64_t t = r->requests[k].first_token_ms;
        assert_true(t > 0);
        first = t < first ? t : first;
        last = t > last ? t : last;
    }
    assert_int_equal(first, 11000);
    assert_true(last >= first + 3 * 11000);
    /* Shared instead, on the same cluster: the four replicas take both GPUs
     * (evicting training), and the last first token comes sooner. */
    shared_ok(&w, &sv, "default", 0, 0);
    int64_t last_shared = 0;
    for (size_t k = 0; k < 4; k++)
        last_shared = sv.serve.requests[k].first_token_ms > last_shared
                          ? sv.serve.requests[k].first_token_ms
                          : last_shared;
    assert_true(last_shared < last);
    serving_release(&sv);
    world_release(&w);
}

/* Two services, one request each at t=1 s, on 3 GPUs beside a training job
 * holding two from t=0 for 100 s (fifo): the first service's replica takes
 * the free GPU (first in the submit order, then by service), the second's
 * waits for it to end (its request done, the service scales to 0), before
 * the job's end: each service gets its own replica's delay back. Split 2
 * instead: each service's cap is half, in proportion to their equal peaks
 * (one replica each), and the job (2 GPUs) never fits the 1 left. */
static void test_two_services(void **state)
{
    (void)state;
    char buf[512];
    struct world w;
    world_init(&w, spec_text(buf, sizeof(buf), 1, 3, -1));
    add_job(&w, "a", 0, 100, 2000); /* 2 of the 3 GPUs */
    struct serving sv[2];
    serving_init(&sv[0], 1);
    serving_init(&sv[1], 1);
    sv[0].req[0].arrival_ms = sv[1].req[0].arrival_ms = 1000;
    snprintf(sv[1].svc.name, sizeof(sv[1].svc.name), "code");
    struct sim_reqtrace traces[2] = {sv[0].trace, sv[1].trace};
    struct sim_serve_service svcs[2] = {sv[0].svc, sv[1].svc};
    struct sim_serve_result results[2];
    struct sim_result jobs;
    struct sim_serve_shared_stat stat;
    struct sim_policy jp;
    assert_int_equal(sim_policy_find("fifo", &jp), 0);
    for (int split = 0; split <= 2; split += 2) {
        sim_serve_result_init(&results[0]);
        sim_serve_result_init(&results[1]);
        sim_result_init(&jobs);
        struct sim_serve_shared_in in = {.traces = traces,
                                         .services = svcs,
                                         .nservices = 2,
                                         .policies = &sv[0].pol,
                                         .npolicies = 1,
                                         .jobs = &w.trace,
                                         .spec = &w.spec,
                                         .job_policy = &jp,
                                         .split_gpu_milli = split * 1000};
        struct sim_serve_shared_out out = {.serve = results, .jobs = &jobs, .stats = &stat};
        char err[512] = "";
        int e = sim_serve_shared_run(&in, &out, err, sizeof(err));
        if (e)
            fail_msg("sim_serve_shared_run: %d: %s", e, err);
        if (split) {
            assert_int_equal(stat.cap_gpu_milli, 2000);
            assert_int_equal(jobs.total_gpus_milli, 1000);
            assert_true(jobs.jobs[0].unschedulable); /* 2 GPUs, 1 left to training */
            assert_int_equal(results[0].requests[0].first_token_ms, 12000);
            assert_int_equal(results[1].requests[0].first_token_ms, 12000);
        } else {
            assert_int_equal(stat.rounds, 2);
            assert_true(stat.converged);
            assert_int_equal(stat.replicas, 2);
            assert_int_equal(stat.delayed, 1);
            assert_int_equal(results[0].requests[0].first_token_ms, 12000);
            int64_t a_end = results[0].replicas[0].end_ms;
            assert_true(a_end > 12000 && a_end < 100000);
            assert_int_equal(results[1].replicas[0].start_ms, a_end);
            assert_int_equal(results[1].requests[0].first_token_ms, a_end + 11000);
            assert_int_equal(jobs.nextra, 2);
            assert_int_equal(jobs.extra[1].first_start_ms, a_end);
            assert_int_equal(jobs.jobs[0].end_s, 100);
        }
        sim_serve_result_release(&results[0]);
        sim_serve_result_release(&results[1]);
        sim_result_release(&jobs);
    }
    world_release(&w);
}

/* The same inputs give the same results, bit for bit. */
static void test_shared_deterministic(void **state)
{
    (void)state;
    char buf[512];
    struct world w;
    world_init(&w, spec_text(buf, sizeof(buf), 1, 2, 0));
    static char ids[24][8];
    for (int k = 0; k < 24; k++) {
        snprintf(ids[k], sizeof(ids[k]), "j%d", k);
        add_job(&w, ids[k], 7 * k, 20 + (k * 37) % 90, 1000 * (1 + k % 2));
    }
    struct serving a, b;
    serving_init(&a, 8);
    serving_init(&b, 8);
    for (size_t k = 0; k < 8; k++)
        a.req[k].arrival_ms = b.req[k].arrival_ms = 9000 * (int64_t)k;
    shared_ok(&w, &a, "default", 5, 0);
    shared_ok(&w, &b, "default", 5, 0);
    assert_int_equal(a.serve.nrequests, b.serve.nrequests);
    for (size_t k = 0; k < a.serve.nrequests; k++) {
        assert_int_equal(a.serve.requests[k].first_token_ms, b.serve.requests[k].first_token_ms);
        assert_int_equal(a.serve.requests[k].end_ms, b.serve.requests[k].end_ms);
    }
    assert_int_equal(a.jobs.njobs, b.jobs.njobs);
    for (size_t k = 0; k < a.jobs.njobs + a.jobs.nextra; k++) {
        assert_int_equal(a.jobs.jobs[k].first_start_ms, b.jobs.jobs[k].first_start_ms);
        assert_int_equal(a.jobs.jobs[k].end_s, b.jobs.jobs[k].end_s);
    }
    assert_int_equal(a.stat.rounds, b.stat.rounds);
    assert_true(a.stat.rounds >= 1 && a.stat.rounds <= SIM_SERVE_SHARED_ROUNDS);
    serving_release(&a);
    serving_release(&b);
    world_release(&w);
}

/* Bad inputs: each a message that says what is wrong. */
static void test_shared_errors(void **state)
{
    (void)state;
    char buf[512];
    struct world w;
    world_init(&w, spec_text(buf, sizeof(buf), 1, 1, 0));
    add_job(&w, "a", 0, 100, 1000);
    struct serving sv;
    serving_init(&sv, 1);
    char err[512] = "";
    assert_int_equal(shared_run(&w, &sv, "default", 0, 1000, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "--split 1: the cluster has 1 GPUs, and training needs some");
    assert_int_equal(shared_run(&w, &sv, "default", 0, 500, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "--split: expected a whole number of GPUs >= 0, got 0.500");
    sv.svc.gpu_milli = 2000; /* one node of one GPU: never */
    assert_int_equal(shared_run(&w, &sv, "default", 0, 0, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "service chat: a replica of 2 GPUs can never be placed"));
    sv.svc.gpu_milli = 1500;
    assert_int_equal(shared_run(&w, &sv, "default", 0, 0, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "service chat: a replica's GPUs"));
    sv.svc.gpu_milli = 1000;
    offset_ms = -1;
    assert_int_equal(shared_run(&w, &sv, "default", 0, 0, err, sizeof(err)), GPO_EINVAL);
    offset_ms = 0;
    assert_string_equal(err, "serving's time 0 in the job trace: expected >= 0 ms, got -1");
    serving_release(&sv);
    world_release(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replica_preempts_training),
        cmocka_unit_test(test_training_never_preempts_a_replica),
        cmocka_unit_test(test_held_gpus_take_no_job),
        cmocka_unit_test(test_bad_extra_jobs),
        cmocka_unit_test(test_same_inputs_same_results),
        cmocka_unit_test(test_shared_delays_feed_back),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_two_services),
        cmocka_unit_test(test_shared_deterministic),
        cmocka_unit_test(test_shared_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * bench_serve.c - how fast does the serving replay run, and what does each
 * policy give on a request trace? A standalone program, not a test: it loads
 * one request trace, builds one service from its flags (the defaults are the
 * model of docs/simulator.md's Azure runs: one H100 replica of an 8B model)
 * and replays it under each policy, printing the summary and the time the
 * replay took (CLOCK_MONOTONIC, sim_serve_run and sim_serve_summarize only;
 * the best of --runs).
 *
 *   bench_serve TRACE.csv[.gz] [--runs N] [--policy P[,P...]] [--min N] [--max N]
 *               [--target X] [--metric concurrency|rps|replica] [--limit N]
 *               [--startup-s S] [--samples S] [--headroom 0|1]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "sim/reqtrace.h"
#include "sim/serve.h"
#include "sim/serve_policy.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void service_default(struct sim_serve_service *svc)
{
    memset(svc, 0, sizeof(*svc));
    snprintf(svc->name, sizeof(svc->name), "bench");
    autoscale_spec_default(&svc->autoscale);
    svc->autoscale.metric = AUTOSCALE_METRIC_CONCURRENCY;
    svc->autoscale.target_milli = 8000;
    svc->autoscale.min = 0;
    svc->autoscale.max = 20;
    svc->concurrency_limit = 32;
    svc->queue_limit = 1000;
    svc->queue_timeout_ms = 60000;
    svc->drain_timeout_ms = 30000;
    svc->gpu_milli = 1000;
    svc->model = (struct sim_replica_model){.prefill_tps = 10000,
                                            .decode_tps = 2400,
                                            .decode_tps_request = 80,
                                            .max_batch = 32,
                                            .startup_ms = 60000};
    svc->slo = (struct sim_slo){.ttft_ms = 2000, .tpot_ms = 100};
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_serve TRACE [--runs N] [--policy P,...] [--min N] [--max N] "
                    "[--target X] [--metric M] [--limit N] [--startup-s S]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    struct sim_serve_service svc;
    service_default(&svc);
    int runs = 3;
    int64_t every_s = 0; /* --samples S: print a sample every S seconds */
    char policies[256] = "default,knative,rayserve,static-peak,static-mean";
    for (int k = 2; k + 1 < argc + 1; k += 2) {
        if (k + 1 >= argc)
            return usage();
        const char *o = argv[k], *v = argv[k + 1];
        if (strcmp(o, "--runs") == 0)
            runs = atoi(v) > 0 ? atoi(v) : 1; // NOLINT(cert-err34-c): a bench's flag
        else if (strcmp(o, "--samples") == 0)
            every_s = strtol(v, NULL, 10);
        else if (strcmp(o, "--headroom") == 0)
            svc.autoscale.headroom = strcmp(v, "0") != 0;
        else if (strcmp(o, "--policy") == 0)
            snprintf(policies, sizeof(policies), "%s", v);
        else if (strcmp(o, "--min") == 0)
            svc.autoscale.min = (int32_t)strtol(v, NULL, 10);
        else if (strcmp(o, "--max") == 0)
            svc.autoscale.max = (int32_t)strtol(v, NULL, 10);
        else if (strcmp(o, "--target") == 0)
            svc.autoscale.target_milli = (int64_t)(strtod(v, NULL) * 1000);
        else if (strcmp(o, "--metric") == 0)
            svc.autoscale.metric = (enum autoscale_metric)autoscale_metric_parse(v);
        else if (strcmp(o, "--limit") == 0)
            svc.concurrency_limit = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(o, "--startup-s") == 0)
            svc.model.startup_ms = (int64_t)(strtod(v, NULL) * 1000);
        else
            return usage();
    }
    char err[512];
    struct sim_reqtrace t;
    sim_reqtrace_init(&t);
    double t0 = now_s();
    if (sim_reqtrace_load(&t, argv[1], NULL, err, sizeof(err))) {
        fprintf(stderr, "bench_serve: %s\n", err);
        return 1;
    }
    printf("trace %s: %zu requests, loaded in %.3f s\n", argv[1], t.n, now_s() - t0);
    printf("%-12s %8s %7s %8s %8s %8s %8s %6s %5s %6s %9s %7s %5s %8s\n", "policy", "requests",
           "slo%", "ttft50", "ttft99", "e2e50", "e2e99", "drop", "tout", "cold", "gpu_h", "rep_avg",
           "max", "replay_s");
    int rc = 0;
    for (char *save = NULL, *name = strtok_r(policies, ",", &save); name && !rc;
         name = strtok_r(NULL, ",", &save)) {
        struct sim_serve_policy pol;
        if (sim_serve_policy_find(name, &pol)) {
            fprintf(stderr, "bench_serve: no policy %s\n", name);
            return 1;
        }
        double best = 1e9;
        struct sim_serve_summary s = {0};
        for (int r = 0; r < runs && !rc; r++) {
            struct sim_serve_result res;
            sim_serve_result_init(&res);
            double a = now_s();
            rc = sim_serve_run(&t, &svc, &pol, NULL, &res, err, sizeof(err));
            if (!rc)
                rc = sim_serve_summarize(&res, &svc, pol.name, &s);
            double d = now_s() - a;
            best = d < best ? d : best;
            for (size_t k = 0; !rc && r == 0 && every_s > 0 && k < res.nsamples; k++)
                if (res.samples[k].t_ms % (every_s * 1000) == 0)
                    printf("  %s t=%" PRId64 " desired=%d ready=%d starting=%d draining=%d "
                           "inflight=%d queued=%d arrivals=%d\n",
                           name, res.samples[k].t_ms / 1000, res.samples[k].desired,
                           res.samples[k].ready, res.samples[k].starting, res.samples[k].draining,
                           res.samples[k].inflight, res.samples[k].queued, res.samples[k].arrivals);
            sim_serve_result_release(&res);
        }
        if (rc) {
            fprintf(stderr, "bench_serve: %s: %s\n", name, err[0] ? err : gpo_strerror(rc));
            break;
        }
        printf("%-12s %8zu %7.2f %8.3f %8.3f %8.3f %8.3f %6zu %5zu %6zu %9.3f %7.2f %5d %8.4f\n",
               s.policy, s.requests, 100 * s.slo_attainment, s.ttft_p50_s, s.ttft_p99_s,
               s.e2e_p50_s, s.e2e_p99_s, s.dropped, s.timed_out, s.cold_starts, s.gpu_hours,
               s.replicas_mean, s.replicas_max, best);
    }
    sim_reqtrace_release(&t);
    return rc ? 1 : 0;
}

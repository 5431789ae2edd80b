/* fuzz_sim_reqtrace.c - libFuzzer target: the first byte picks options, the
 * rest is a request trace CSV. A trace that fails names file, line and
 * field in one non-empty line; a small one that loads (under 300 requests
 * within a day) is replayed under one of the five serving policies, with or
 * without a GPU cap, start delays and a tight router, and every request
 * must end one way or another with the replay's figures in range.
 * tests/fuzz/run.sh builds and runs it. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/reqtrace.h"
#include "sim/serve.h"
#include "sim/serve_policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DAY_MS (INT64_C(86400) * 1000)

static void replay(const struct sim_reqtrace *t, uint8_t pick)
{
    static const char *const policies[] = {"default", "knative", "rayserve", "static-peak",
                                           "static-mean"};
    struct sim_serve_service svc;
    memset(&svc, 0, sizeof(svc));
    snprintf(svc.name, sizeof(svc.name), "fuzz");
    autoscale_spec_default(&svc.autoscale);
    svc.autoscale.max = 4;
    svc.autoscale.target_milli = 2000;
    svc.concurrency_limit = (pick & 0x80) ? 2 : 0;
    svc.queue_limit = (pick & 0x80) ? 4 : 1000;
    svc.queue_timeout_ms = 60000;
    svc.drain_timeout_ms = 5000;
    svc.gpu_milli = 1000;
    svc.model = (struct sim_replica_model){.prefill_tps = 100000,
                                           .decode_tps = 100000,
                                           .decode_tps_request = 10000,
                                           .max_batch = 4,
                                           .startup_ms = 5000};
    svc.slo.ttft_ms = 1000;
    int64_t delays[] = {0, 3000, 100, 70000};
    struct sim_serve_opts opts = {.gpu_cap_milli = (pick & 0x20) ? 2000 : 0};
    if (pick & 0x40) {
        opts.start_delay_ms = delays;
        opts.nstart_delay = 4;
    }
    struct sim_serve_policy pol;
    if (sim_serve_policy_find(policies[(pick >> 2) % 5], &pol))
        abort();
    struct sim_serve_result r;
    sim_serve_result_init(&r);
    char err[256] = "";
    if (sim_serve_run(t, &svc, &pol, &opts, &r, err, sizeof(err)) == 0) {
        struct sim_serve_summary s;
        if (r.nrequests != t->n || sim_serve_summarize(&r, &svc, pol.name, &s))
            abort();
        if (s.completed + s.dropped + s.timed_out + s.failed != t->n || s.slo_attainment < 0 ||
            s.slo_attainment > 1 || s.gpu_hours < 0 || s.replicas_mean < 0)
            abort();
        for (size_t k = 0; k < r.nrequests; k++)
            if (r.requests[k].outcome == SIM_REQ_DONE &&
                (r.requests[k].end_ms < r.requests[k].first_token_ms ||
                 r.requests[k].first_token_ms < r.requests[k].arrival_ms))
                abort();
    } else if (!err[0]) {
        abort();
    }
    sim_serve_result_release(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char path[64];
    snprintf(path, sizeof(path), "/dev/shm/gpuorch-fuzz-rq-%d.csv", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data + 1, 1, size - 1, f) != size - 1 || fclose(f))
        abort();
    struct sim_reqtrace t;
    sim_reqtrace_init(&t);
    struct sim_reqtrace_opts opts = {.skip_bad = data[0] & 1, .from_ms = 0, .until_ms = -1};
    char err[512] = "";
    if (sim_reqtrace_load(&t, path, &opts, err, sizeof(err))) {
        if (!err[0] || strchr(err, '\n'))
            abort(); /* every failure says why, on one line */
    } else if ((data[0] & 2) && t.n > 0 && t.n < 300 && t.v[t.n - 1].arrival_ms <= DAY_MS) {
        replay(&t, data[0]);
    }
    sim_reqtrace_release(&t);
    unlink(path);
    return 0;
}

/* fuzz_sim_trace.c - libFuzzer target: the first byte picks options, the
 * rest is a trace CSV. A trace that fails names file, line and field in one
 * non-empty line; a small one that loads is replayed under one of six
 * policies on the cluster derived from it, at load 0.9, when its jobs span
 * at most 30 simulated days (the engine passes on a period, so a trace of
 * years is seconds of work per input: slow, not wrong). tests/fuzz/run.sh
 * builds and runs it. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/engine.h"
#include "sim/spec.h"
#include "sim/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void replay(const struct sim_trace *t, uint8_t pick)
{
    static const char *const policies[] = {"default", "fifo", "las", "srtf", "sjf", "spread"};
    struct sim_spec s;
    char err[512];
    if (sim_spec_from_trace(&s, t, err, sizeof(err)))
        return;
    struct sim_policy p;
    if (sim_spec_set_load(&s, t, 0.9, NULL) == 0 &&
        sim_policy_find(policies[(pick >> 2) % 6], &p) == 0) {
        struct sim_opts o = {.restart_penalty_s = (pick >> 5) & 3};
        struct sim_result r;
        sim_result_init(&r);
        (void)sim_run(t, &s, &p, &o, &r, err, sizeof(err));
        sim_result_release(&r);
    }
    sim_spec_release(&s);
}

#define SPAN_MAX_S (INT64_C(30) * 86400)

/* Whether the trace's jobs are all submitted and done within SPAN_MAX_S. */
static int short_enough(const struct sim_trace *t)
{
    for (size_t k = 0; k < t->njobs; k++) {
        if (t->jobs[k].submit_s > SPAN_MAX_S || t->jobs[k].duration_s > SPAN_MAX_S)
            return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char path[64];
    snprintf(path, sizeof(path), "/dev/shm/gpuorch-fuzz-%d.csv", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data + 1, 1, size - 1, f) != size - 1 || fclose(f))
        abort();
    struct sim_trace t;
    sim_trace_init(&t);
    struct sim_trace_opts opts = {.skip_bad = data[0] & 1, .from_s = 0, .until_s = -1};
    char err[512] = "";
    if (sim_trace_load(&t, path, &opts, err, sizeof(err))) {
        if (!err[0] || strchr(err, '\n'))
            abort(); /* every failure says why, on one line */
    } else if ((data[0] & 2) && t.njobs > 0 && t.njobs < 200 && short_enough(&t)) {
        replay(&t, data[0]);
    }
    sim_trace_release(&t);
    unlink(path);
    return 0;
}

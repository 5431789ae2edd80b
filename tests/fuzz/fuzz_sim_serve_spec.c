/* fuzz_sim_serve_spec.c - libFuzzer target: any bytes as a serving replay's
 * service spec (YAML or JSON: `gpuorch service apply -f` plus `simulate:`).
 * A spec that fails names what is wrong in one non-empty line; one that
 * parses holds values in the ranges serve_spec.h and serve.h promise.
 * Sanitizers turn any memory or undefined-behaviour error into a crash.
 * tests/fuzz/run.sh builds and runs it. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/serve_spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sim_serve_service s;
    char err[512] = "";
    if (sim_serve_spec_parse((const char *)data, size, "fuzz.yaml", &s, err, sizeof(err))) {
        if (!err[0] || strchr(err, '\n'))
            abort(); /* every failure says why, on one line */
        return 0;
    }
    const struct sim_replica_model *m = &s.model;
    if (!s.name[0] || s.gpu_milli <= 0 || !(m->prefill_tps > 0) || !(m->decode_tps > 0) ||
        !(m->decode_tps_request > 0) || m->decode_tps_request > m->decode_tps || m->max_batch < 1 ||
        m->max_batch > 4096 || m->startup_ms < 0 ||
        (!s.slo.ttft_ms && !s.slo.tpot_ms && !s.slo.e2e_ms) || s.autoscale.min > s.autoscale.max ||
        s.autoscale.target_milli <= 0 || s.autoscale.metric == AUTOSCALE_METRIC_REPLICA)
        abort();
    return 0;
}

/* fuzz_proto.c - libFuzzer target: any bytes as one of the controller-agent
 * messages (the first byte picks which: registration, its answer,
 * heartbeat, assignments, one attempt, report, a MIG plan's result), as
 * either side may receive
 * it from the other. A refusal is one non-empty line; a message that
 * decodes must encode, and what is encoded must decode and encode again to
 * the same object, as proto.h promises; a registration's and a heartbeat's
 * "gpus" list encodes alone as it does in the message (agent --probe), and
 * a decoded heartbeat's samples are ones proto_gpu_sample_fit leaves alone.
 * tests/fuzz/run.sh builds and runs it. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* decode, encode, decode what was encoded, encode again: both equal. */
#define ROUND_TRIP(kind)                                                                           \
    static void round_trip_##kind(const json_t *obj)                                               \
    {                                                                                              \
        struct proto_##kind x, y;                                                                  \
        char err[512] = "";                                                                        \
        if (proto_##kind##_decode(obj, &x, err, sizeof(err))) {                                    \
            if (!err[0] || strchr(err, '\n'))                                                      \
                abort();                                                                           \
            return;                                                                                \
        }                                                                                          \
        json_t *once = NULL, *twice = NULL;                                                        \
        if (proto_##kind##_encode(&x, &once) || proto_##kind##_decode(once, &y, err, sizeof(err))) \
            abort();                                                                               \
        if (proto_##kind##_encode(&y, &twice) || !json_equal(once, twice))                         \
            abort();                                                                               \
        json_decref(once);                                                                         \
        json_decref(twice);                                                                        \
        proto_##kind##_release(&x);                                                                \
        proto_##kind##_release(&y);                                                                \
    }

ROUND_TRIP(register)
ROUND_TRIP(registered)
ROUND_TRIP(heartbeat)
ROUND_TRIP(assignments)
ROUND_TRIP(attempt)
ROUND_TRIP(report)
ROUND_TRIP(mig_result)

/* The "gpus" list encoded alone equals the message's. */
static void lists_agree(const json_t *obj, bool heartbeat)
{
    struct proto_register r;
    struct proto_heartbeat h;
    json_t *whole = NULL, *list = NULL;
    if (heartbeat) {
        if (proto_heartbeat_decode(obj, &h, NULL, 0))
            return;
        for (size_t k = 0; k < h.ngpus; k++) {
            struct proto_gpu_sample fitted = h.gpus[k];
            fitted.procs = NULL;
            fitted.nprocs = 0;
            fitted.error = NULL; /* fitted in place, and already one line */
            proto_gpu_sample_fit(&fitted);
            const struct proto_gpu_sample *g = &h.gpus[k];
            if (fitted.utilization_pct != g->utilization_pct ||
                fitted.memory_utilization_pct != g->memory_utilization_pct ||
                fitted.memory_used_mib != g->memory_used_mib ||
                fitted.memory_total_mib != g->memory_total_mib || fitted.power_mw != g->power_mw ||
                fitted.temperature_c != g->temperature_c)
                abort();
        }
        if (proto_heartbeat_encode(&h, &whole) || proto_gpu_samples_encode(h.gpus, h.ngpus, &list))
            abort();
        proto_heartbeat_release(&h);
    } else {
        if (proto_register_decode(obj, &r, NULL, 0))
            return;
        if (proto_register_encode(&r, &whole) || proto_gpus_encode(r.gpus, r.ngpus, &list))
            abort();
        proto_register_release(&r);
    }
    if (!json_equal(json_object_get(whole, "gpus"), list))
        abort();
    json_decref(whole);
    json_decref(list);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    json_t *obj = json_loadb((const char *)data + 1, size - 1,
                             JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
    if (!obj)
        return 0;
    static void (*const round_trip[])(const json_t *) = {
        round_trip_register, round_trip_registered, round_trip_heartbeat, round_trip_assignments,
        round_trip_attempt,  round_trip_report,     round_trip_mig_result};
    size_t n = sizeof(round_trip) / sizeof(round_trip[0]);
    round_trip[data[0] % n](obj);
    if (data[0] % n == 0 || data[0] % n == 2)
        lists_agree(obj, data[0] % n == 2);
    json_decref(obj);
    return 0;
}

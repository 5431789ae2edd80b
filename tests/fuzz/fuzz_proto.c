/* fuzz_proto.c - libFuzzer target: any bytes as one of the controller-agent
 * messages (the first byte picks which: registration, its answer,
 * heartbeat, assignments, one attempt, report), as either side may receive
 * it from the other. A refusal is one non-empty line; a message that
 * decodes must encode, and what is encoded must decode and encode again to
 * the same object, as proto.h promises. tests/fuzz/run.sh builds and runs
 * it. */
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    json_t *obj = json_loadb((const char *)data + 1, size - 1,
                             JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
    if (!obj)
        return 0;
    static void (*const round_trip[])(const json_t *) = {
        round_trip_register,    round_trip_registered, round_trip_heartbeat,
        round_trip_assignments, round_trip_attempt,    round_trip_report};
    round_trip[data[0] % 6](obj);
    json_decref(obj);
    return 0;
}

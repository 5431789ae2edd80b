/* fuzz_cluster.c - libFuzzer target: any bytes as a pool, priority class,
 * team, user, node, price or service object (the first byte picks the kind and the
 * API or the stored form), as `gpuorch apply` and the admin API send them
 * and the store keeps them. A refusal is one non-empty line; an object that
 * decodes must survive model_X_decode(model_X_to_json(x)) unchanged, as
 * model.h promises. tests/fuzz/run.sh builds and runs it. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cluster/cluster.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* decode, show, decode what was shown, show again: both shows equal. */
#define ROUND_TRIP(kind)                                                                           \
    static void round_trip_##kind(const json_t *obj, unsigned flags)                               \
    {                                                                                              \
        struct cluster_##kind x, y;                                                                \
        char err[512] = "";                                                                        \
        if (cluster_##kind##_decode(obj, flags, &x, err, sizeof(err))) {                           \
            if (!err[0] || strchr(err, '\n'))                                                      \
                abort();                                                                           \
            return;                                                                                \
        }                                                                                          \
        json_t *shown = cluster_##kind##_to_json(&x, flags);                                       \
        if (!shown || cluster_##kind##_decode(shown, flags, &y, err, sizeof(err)))                 \
            abort();                                                                               \
        json_t *again = cluster_##kind##_to_json(&y, flags);                                       \
        if (!again || !json_equal(shown, again))                                                   \
            abort();                                                                               \
        json_decref(shown);                                                                        \
        json_decref(again);                                                                        \
        cluster_##kind##_release(&x);                                                              \
        cluster_##kind##_release(&y);                                                              \
    }

ROUND_TRIP(pool)
ROUND_TRIP(class)
ROUND_TRIP(team)
ROUND_TRIP(user)
ROUND_TRIP(node)
ROUND_TRIP(price)
ROUND_TRIP(service)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    json_t *obj = json_loadb((const char *)data + 1, size - 1, JSON_DECODE_ANY, NULL);
    if (!obj)
        return 0;
    static void (*const round_trip[])(const json_t *, unsigned) = {
        round_trip_pool, round_trip_class, round_trip_team,   round_trip_user,
        round_trip_node, round_trip_price, round_trip_service};
    round_trip[(data[0] & 0x7f) % 7](obj, (data[0] & 0x80) ? CLUSTER_STORED : 0);
    json_decref(obj);
    return 0;
}

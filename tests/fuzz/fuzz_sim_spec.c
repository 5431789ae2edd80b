/* fuzz_sim_spec.c - libFuzzer target: any bytes as a cluster spec (YAML or
 * JSON). A spec that fails names what is wrong in one non-empty line; one
 * that parses builds a core cluster and scales down and up. Sanitizers turn
 * any memory or undefined-behaviour error into a crash. tests/fuzz/run.sh
 * builds and runs it. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cluster.h"
#include "sim/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sim_spec s;
    char err[512] = "";
    if (sim_spec_parse(&s, (const char *)data, size, "fuzz.yaml", err, sizeof(err))) {
        if (!err[0] || strchr(err, '\n'))
            abort(); /* every failure says why, on one line */
        return 0;
    }
    struct sim_cluster cl;
    memset(&cl, 0, sizeof(cl));
    (void)sim_cluster_build(&cl, &s, 3, true, err, sizeof(err));
    sim_cluster_release(&cl);
    (void)sim_spec_scale(&s, 0.37);
    (void)sim_spec_scale(&s, 3.1);
    sim_spec_release(&s);
    return 0;
}

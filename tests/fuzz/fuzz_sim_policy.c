/* fuzz_sim_policy.c - libFuzzer target: any bytes as a policy file (YAML or
 * JSON). A file that fails names what is wrong in one non-empty line; one
 * that parses is a valid core policy, and what `gpuorch policy` writes of it
 * reads back as the same policy. tests/fuzz/run.sh builds and runs it. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model.h"
#include "sim/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same(const struct sim_policy *a, const struct sim_policy *b)
{
    const struct sched_policy *x = &a->core, *y = &b->core;
    int eq = strcmp(a->name, b->name) == 0 && a->oracle == b->oracle && x->order == y->order &&
             x->within == y->within && x->packing == y->packing && x->backfill == y->backfill &&
             x->preemption == y->preemption && x->migrate == y->migrate &&
             x->fairshare_half_life_ms == y->fairshare_half_life_ms &&
             x->nlas_thresholds == y->nlas_thresholds &&
             x->las_evict_larger == y->las_evict_larger &&
             x->preempt_grace_ms == y->preempt_grace_ms &&
             x->default_time_limit_ms == y->default_time_limit_ms;
    for (uint32_t i = 0; eq && i < x->nlas_thresholds; i++)
        eq = x->las_thresholds_gpu_ms[i] == y->las_thresholds_gpu_ms[i];
    return eq;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sim_policy p, back;
    char err[768] = "";
    if (sim_policy_parse(&p, (const char *)data, size, "fuzz.yaml", err, sizeof(err))) {
        if (!err[0] || strchr(err, '\n'))
            abort(); /* every failure says why, on one line */
        return 0;
    }
    if (sched_policy_check(&p.core, NULL) != 0 || p.oracle != SIM_ORACLE_NONE)
        abort();
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f || sim_policy_write(f, &p) != 0)
        abort();
    fclose(f);
    if (sim_policy_parse(&back, text, len, "written.yaml", err, sizeof(err)) != 0 ||
        !same(&p, &back))
        abort(); /* what is written reads back as the same policy */
    free(text);
    return 0;
}

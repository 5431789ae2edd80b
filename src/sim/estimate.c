#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "core/model.h"
#include "sim/estimate.h"
#include "base/banned.h"

static uint32_t bucket_of(int64_t s)
{
    double b = s < 1 ? 0 : 4.0 * log2((double)s);
    return b >= SIM_ESTIMATE_BUCKETS - 1 ? SIM_ESTIMATE_BUCKETS - 1 : (uint32_t)b;
}

static int64_t bucket_top_s(uint32_t b)
{
    return (int64_t)ceil(exp2((b + 1) / 4.0));
}

static uint32_t size_class(int64_t gpu_milli)
{
    int64_t g = gpu_milli / SCHED_MILLI;
    if (gpu_milli < SCHED_MILLI)
        return 0;
    return g <= 1 ? 1 : g == 2 ? 2 : g <= 4 ? 3 : g <= 8 ? 4 : g <= 16 ? 5 : 6;
}

static void hist_add(struct sim_estimate_hist *h, int64_t s)
{
    h->count[bucket_of(s)]++;
    h->n++;
}

/* The 90th percentile (the top of its bucket), or -1 with too few samples. */
static int64_t hist_p90_s(const struct sim_estimate_hist *h)
{
    if (h->n < SIM_ESTIMATE_MIN_COUNT)
        return -1;
    uint64_t want = ((uint64_t)h->n * 9 + 9) / 10, seen = 0;
    for (uint32_t b = 0; b < SIM_ESTIMATE_BUCKETS; b++) {
        seen += h->count[b];
        if (seen >= want)
            return bucket_top_s(b);
    }
    return bucket_top_s(SIM_ESTIMATE_BUCKETS - 1);
}

int sim_estimate_init(struct sim_estimate *e, uint32_t nteams)
{
    e->nteams = nteams;
    e->hist = calloc((size_t)nteams * SIM_ESTIMATE_CLASSES + 1, sizeof(*e->hist));
    return e->hist ? 0 : GPO_ENOMEM;
}

void sim_estimate_release(struct sim_estimate *e)
{
    if (!e)
        return;
    free(e->hist);
    memset(e, 0, sizeof(*e));
}

void sim_estimate_add(struct sim_estimate *e, uint32_t team, int64_t gpu_milli, int64_t duration_s)
{
    if (team < e->nteams)
        hist_add(&e->hist[(size_t)team * SIM_ESTIMATE_CLASSES + size_class(gpu_milli)], duration_s);
    hist_add(&e->hist[(size_t)e->nteams * SIM_ESTIMATE_CLASSES], duration_s);
}

int64_t sim_estimate_s(const struct sim_estimate *e, uint32_t team, int64_t gpu_milli)
{
    int64_t p90 =
        team < e->nteams
            ? hist_p90_s(&e->hist[(size_t)team * SIM_ESTIMATE_CLASSES + size_class(gpu_milli)])
            : -1;
    return p90 >= 0 ? p90 : hist_p90_s(&e->hist[(size_t)e->nteams * SIM_ESTIMATE_CLASSES]);
}

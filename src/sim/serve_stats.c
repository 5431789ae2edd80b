/*
 * serve_stats.c - a serving replay's result and its figures (serve.h).
 */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "sim/serve.h"
#include "sim/stats.h"
#include "base/banned.h"

#define MS_PER_HOUR 3600000.0

void sim_serve_result_init(struct sim_serve_result *r)
{
    memset(r, 0, sizeof(*r));
}

void sim_serve_result_release(struct sim_serve_result *r)
{
    if (!r)
        return;
    free(r->requests);
    free(r->replicas);
    free(r->samples);
    sim_serve_result_init(r);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A replica's change in the count holding GPUs: +1 at its start, -1 at its end. */
struct step {
    int64_t t_ms;
    int32_t delta;
};

static int cmp_step(const void *a, const void *b)
{
    const struct step *x = a, *y = b;
    if (x->t_ms != y->t_ms)
        return x->t_ms < y->t_ms ? -1 : 1;
    return x->delta - y->delta; /* ends first: a replaced replica is not counted twice */
}

/* The replicas' figures over [0, end_ms]. */
static int replica_figures(const struct sim_serve_result *r, const struct sim_serve_service *svc,
                           struct sim_serve_summary *s)
{
    struct step *steps = gpo_calloc(r->nreplicas * 2 + 1, sizeof(*steps));
    if (!steps)
        return GPO_ENOMEM;
    size_t n = 0;
    double held_ms = 0;
    for (size_t k = 0; k < r->nreplicas; k++) {
        const struct sim_replica_span *p = &r->replicas[k];
        s->cold_starts += p->cold;
        int64_t from = p->start_ms < 0 ? 0 : p->start_ms;
        int64_t to = p->end_ms < 0 || p->end_ms > r->end_ms ? r->end_ms : p->end_ms;
        if (p->start_ms < 0 || to <= from)
            continue;
        held_ms += (double)(to - from);
        steps[n++] = (struct step){from, 1};
        steps[n++] = (struct step){to, -1};
    }
    qsort(steps, n, sizeof(*steps), cmp_step);
    int32_t cur = 0;
    for (size_t k = 0; k < n; k++) {
        cur += steps[k].delta;
        if (cur > s->replicas_max)
            s->replicas_max = cur;
    }
    free(steps);
    s->gpu_hours = held_ms * (double)svc->gpu_milli / 1000.0 / MS_PER_HOUR;
    s->replicas_mean = r->end_ms > 0 ? held_ms / (double)r->end_ms : 0;
    return 0;
}

int sim_serve_summarize(const struct sim_serve_result *r, const struct sim_serve_service *svc,
                        const char *policy, struct sim_serve_summary *ret)
{
    struct sim_serve_summary s = {.policy = policy, .service = svc->name, .requests = r->nrequests};
    size_t n = r->nrequests ? r->nrequests : 1;
    double *ttft = gpo_malloc(n * sizeof(*ttft)), *e2e = gpo_malloc(n * sizeof(*e2e)),
           *tpot = gpo_malloc(n * sizeof(*tpot));
    int rc = ttft && e2e && tpot ? 0 : GPO_ENOMEM;
    size_t met = 0, ntpot = 0;
    for (size_t k = 0; !rc && k < r->nrequests; k++) {
        const struct sim_request_result *q = &r->requests[k];
        met += q->slo_met;
        if (q->outcome == SIM_REQ_DROPPED)
            s.dropped++;
        else if (q->outcome == SIM_REQ_TIMEOUT)
            s.timed_out++;
        else if (q->outcome == SIM_REQ_FAILED)
            s.failed++;
        if (q->outcome != SIM_REQ_DONE)
            continue;
        ttft[s.completed] = (double)(q->first_token_ms - q->arrival_ms) / 1000.0;
        e2e[s.completed] = (double)(q->end_ms - q->arrival_ms) / 1000.0;
        s.completed++;
        if (q->output_tokens > 1)
            tpot[ntpot++] =
                (double)(q->end_ms - q->first_token_ms) / 1000.0 / (double)(q->output_tokens - 1);
    }
    if (!rc) {
        qsort(ttft, s.completed, sizeof(*ttft), cmp_double);
        qsort(e2e, s.completed, sizeof(*e2e), cmp_double);
        qsort(tpot, ntpot, sizeof(*tpot), cmp_double);
        s.ttft_p50_s = sim_quantile(ttft, s.completed, 0.50);
        s.ttft_p99_s = sim_quantile(ttft, s.completed, 0.99);
        s.e2e_p50_s = sim_quantile(e2e, s.completed, 0.50);
        s.e2e_p99_s = sim_quantile(e2e, s.completed, 0.99);
        s.tpot_p50_s = sim_quantile(tpot, ntpot, 0.50);
        s.slo_attainment = r->nrequests ? (double)met / (double)r->nrequests : 0;
        rc = replica_figures(r, svc, &s);
    }
    free(ttft);
    free(e2e);
    free(tpot);
    if (!rc)
        *ret = s;
    return rc;
}

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/sort.h"
#include "sim/stats.h"
#include "base/banned.h"

static bool double_before(const double *x, const double *y)
{
    return *x < *y;
}

SORT_DEFINE(sort_doubles, double, double_before)

double sim_quantile(const double *sorted, size_t n, double q)
{
    if (!n)
        return 0;
    double rank = ceil(q * (double)n);
    size_t k = rank < 1 ? 0 : (size_t)rank - 1;
    return sorted[k < n ? k : n - 1];
}

static double jain(const struct sim_result *r)
{
    double sum = 0, sq = 0;
    size_t n = 0;
    for (size_t t = 0; t < r->nteams; t++) {
        if (r->team_demand_window_gpu_s[t] <= 0)
            continue;
        double x = r->team_useful_window_gpu_s[t] / r->team_demand_window_gpu_s[t];
        sum += x;
        sq += x * x;
        n++;
    }
    return n && sq > 0 ? sum * sum / ((double)n * sq) : 1.0;
}

/* The time-weighted average of partly used GPUs between the first and the
 * last submit (each sample holds until the next). */
static double fragmented(const struct sim_result *r)
{
    double sum = 0, from = (double)r->first_submit_s, to = (double)r->last_submit_s;
    for (size_t k = 0; k < r->nsamples; k++) {
        double a = (double)r->samples[k].t_s;
        double b = k + 1 < r->nsamples ? (double)r->samples[k + 1].t_s : to;
        a = a < from ? from : a;
        b = b > to ? to : b;
        if (b > a)
            sum += (double)r->samples[k].partial_gpus * (b - a);
    }
    return to > from ? sum / (to - from) : 0;
}

static int times(const struct sim_result *r, struct sim_summary *s)
{
    double *jct = malloc((r->njobs ? r->njobs : 1) * sizeof(*jct));
    double *wait = malloc((r->njobs ? r->njobs : 1) * sizeof(*wait));
    if (!jct || !wait) {
        free(jct);
        free(wait);
        return GPO_ENOMEM;
    }
    size_t n = 0;
    double jsum = 0, wsum = 0;
    for (size_t i = 0; i < r->njobs; i++) {
        const struct sim_job_result *j = &r->jobs[i];
        if (j->unschedulable) {
            s->unschedulable++;
            s->reasons[j->reason < SCHED_REASON_COUNT ? j->reason : 0]++;
            continue;
        }
        if (j->end_s < 0)
            continue;
        jct[n] = (double)(j->end_s - j->submit_s);
        wait[n] = jct[n] - (double)j->running_s;
        wait[n] = wait[n] < 0 ? 0 : wait[n];
        jsum += jct[n];
        wsum += wait[n];
        n++;
    }
    s->ended = n;
    int e = sort_doubles(jct, n);
    if (!e)
        e = sort_doubles(wait, n);
    if (!e && n) {
        s->jct_avg_s = jsum / (double)n;
        s->jct_p50_s = sim_quantile(jct, n, 0.50);
        s->jct_p95_s = sim_quantile(jct, n, 0.95);
        s->jct_p99_s = sim_quantile(jct, n, 0.99);
        s->wait_avg_s = wsum / (double)n;
        s->wait_p99_s = sim_quantile(wait, n, 0.99);
    }
    free(jct);
    free(wait);
    return e;
}

int sim_summary_compute(const struct sim_result *r, const char *policy, struct sim_summary *ret)
{
    struct sim_summary s = {.policy = policy,
                            .jobs = r->njobs,
                            .dropped = r->ndropped,
                            .preemptions = r->preemptions,
                            .passes = r->passes,
                            .total_gpus = (double)r->total_gpus_milli / 1000.0,
                            .nteams = r->nteams,
                            .team_names = r->team_names};
    s.team_share = calloc(r->nteams ? r->nteams : 1, sizeof(*s.team_share));
    if (!s.team_share)
        return GPO_ENOMEM;
    int e = times(r, &s);
    if (e) {
        free(s.team_share);
        return e;
    }
    if (r->njobs && r->last_end_s >= r->first_submit_s)
        s.makespan_s = (double)(r->last_end_s - r->first_submit_s);
    double span = (double)(r->last_submit_s - r->first_submit_s);
    if (span > 0 && s.total_gpus > 0)
        s.gpu_utilization = r->useful_window_gpu_s / (s.total_gpus * span);
    for (size_t t = 0; t < r->nteams; t++) {
        s.team_share[t] = r->useful_window_gpu_s > 0
                              ? r->team_useful_window_gpu_s[t] / r->useful_window_gpu_s
                              : 0;
    }
    s.jain_fairness = jain(r);
    s.fragmented_gpus = fragmented(r);
    *ret = s;
    return 0;
}

void sim_summary_release(struct sim_summary *s)
{
    if (!s)
        return;
    free(s->team_share);
    memset(s, 0, sizeof(*s));
}

/*
 * serve_output.c - the serving replay's table and --json (serve_output.h).
 */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "sim/output.h"
#include "sim/serve_output.h"
#include "base/banned.h"

void sim_serve_output_table(FILE *out, const struct sim_serve_summary *s, size_t n)
{
    size_t wsvc = strlen("service"), wpol = strlen("policy"), failed = 0;
    for (size_t i = 0; i < n; i++) {
        size_t a = strlen(s[i].service), b = strlen(s[i].policy);
        wsvc = a > wsvc ? a : wsvc;
        wpol = b > wpol ? b : wpol;
        failed += s[i].failed;
    }
    fprintf(out, "%-*s  %-*s %9s %7s %9s %9s %9s %9s %9s %6s %10s %8s %8s\n", (int)wsvc, "service",
            (int)wpol, "policy", "requests", "SLO %", "TTFT p50", "TTFT p99", "e2e p50", "e2e p99",
            "dropped", "cold", "GPU-hours", "replicas", "replicas");
    fprintf(out, "%-*s  %-*s %9s %7s %9s %9s %9s %9s %9s %6s %10s %8s %8s\n", (int)wsvc, "",
            (int)wpol, "", "", "", "s", "s", "s", "s", "+timeout", "starts", "", "mean", "peak");
    for (size_t i = 0; i < n; i++) {
        const struct sim_serve_summary *x = &s[i];
        fprintf(out, "%-*s  %-*s %9zu %7.2f %9.3f %9.3f %9.3f %9.3f %9zu %6zu %10.2f %8.2f %8d\n",
                (int)wsvc, x->service, (int)wpol, x->policy, x->requests, 100 * x->slo_attainment,
                x->ttft_p50_s, x->ttft_p99_s, x->e2e_p50_s, x->e2e_p99_s, x->dropped + x->timed_out,
                x->cold_starts, x->gpu_hours, x->replicas_mean, (int)x->replicas_max);
    }
    fprintf(out, "(latencies over the completed requests; SLO %%: requests that completed within "
                 "the SLO over all requests)\n");
    if (failed)
        fprintf(out, "%zu request(s) failed: their replica's drain timed out under them\n", failed);
}

static json_t *count(size_t v)
{
    return json_integer((json_int_t)v);
}

static json_t *serve_json(const struct sim_serve_summary *s)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = 0;
    bad |= json_object_set_new(o, "policy", json_string(s->policy));
    bad |= json_object_set_new(o, "service", json_string(s->service));
    bad |= json_object_set_new(o, "requests", count(s->requests));
    bad |= json_object_set_new(o, "completed", count(s->completed));
    bad |= json_object_set_new(o, "slo_attainment", sim_output_rounded(s->slo_attainment, 6));
    bad |= json_object_set_new(o, "ttft_p50_s", sim_output_rounded(s->ttft_p50_s, 4));
    bad |= json_object_set_new(o, "ttft_p99_s", sim_output_rounded(s->ttft_p99_s, 4));
    bad |= json_object_set_new(o, "e2e_p50_s", sim_output_rounded(s->e2e_p50_s, 4));
    bad |= json_object_set_new(o, "e2e_p99_s", sim_output_rounded(s->e2e_p99_s, 4));
    bad |= json_object_set_new(o, "tpot_p50_s", sim_output_rounded(s->tpot_p50_s, 5));
    bad |= json_object_set_new(o, "dropped", count(s->dropped));
    bad |= json_object_set_new(o, "timed_out", count(s->timed_out));
    bad |= json_object_set_new(o, "failed", count(s->failed));
    bad |= json_object_set_new(o, "cold_starts", count(s->cold_starts));
    bad |= json_object_set_new(o, "gpu_hours", sim_output_rounded(s->gpu_hours, 4));
    bad |= json_object_set_new(o, "replicas_mean", sim_output_rounded(s->replicas_mean, 4));
    bad |= json_object_set_new(o, "replicas_max", json_integer(s->replicas_max));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *list(const struct sim_serve_summary *s, size_t n, const struct sim_summary *jobs,
                    size_t njobs)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n + njobs; i++) {
        json_t *o = i < n ? serve_json(&s[i]) : sim_output_summary_json(&jobs[i - n]);
        if (json_array_append_new(a, o)) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

int sim_serve_output_json(FILE *out, const struct sim_serve_summary *s, size_t n,
                          const struct sim_summary *jobs, size_t njobs)
{
    json_t *root = NULL;
    if (njobs) {
        json_t *serving = list(s, n, NULL, 0), *training = list(NULL, 0, jobs, njobs);
        root = serving && training
                   ? json_pack("{s:O, s:O}", "serving", serving, "training", training)
                   : NULL;
        json_decref(serving);
        json_decref(training);
    } else {
        root = n == 1 ? serve_json(&s[0]) : list(s, n, NULL, 0);
    }
    return sim_output_json_print(out, root);
}

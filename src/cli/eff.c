/*
 * eff.c - gpuorch eff, as seff (eff.h).
 */
#include "cli/eff.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/slurm.h"
#include "client/client.h"
#include "util/opts.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define MAX_POINTS 5000 /* steps asked of the series: under its cap of 10,000 */
#define MINUTE_MS  60000

struct eff_args {
    struct cli_common co;
};

static const struct opts_opt eff_opts[] = {
    CLI_OPT_JSON(struct eff_args, co),
    CLI_OPTS_COMMON(struct eff_args, co),
};

static void eff_usage(FILE *out)
{
    fprintf(out, "usage: gpuorch eff JOB [--json]\n"
                 "\n"
                 "Shows how well a job used what it held, as seff does: its state and exit\n"
                 "code, nodes, cores, elapsed time (every attempt's), GPUs and GPU-hours, mean\n"
                 "GPU utilization and peak GPU memory (from the controller's GPU samples of\n"
                 "the job; a job with none says \"no GPU samples\"). JOB is an id, or 41_7 for\n"
                 "a task of an array. gpuorch samples GPUs, not CPUs or host memory: their\n"
                 "efficiency is not measured.\n");
    cli_help_common(out, true);
}

/* What eff reports. */
struct eff {
    int64_t elapsed_s, first_ms, last_ms; /* over every attempt; first_ms -1: none ran */
    double gpu_hours;
    size_t gpus, nodes;
    bool util_known, mem_known;
    double util_pct, mem_peak_mib;
};

static int64_t time_of(const json_t *o, const char *key)
{
    int64_t ms;
    return timefmt_parse_rfc3339(cli_json_str(o, key), &ms) == 0 ? ms : -1;
}

/* Elapsed time, GPU-hours and the span of the job's attempts. */
static void eff_attempts(const json_t *job, int64_t now, struct eff *e)
{
    const json_t *atts = json_object_get(job, "attempts");
    e->first_ms = -1;
    for (size_t k = 0; k < json_array_size(atts); k++) {
        const json_t *a = json_array_get(atts, k);
        int64_t start = time_of(a, "started_at"), end = time_of(a, "ended_at");
        if (start < 0)
            continue;
        if (end < 0)
            end = now;
        int64_t s = end > start ? (end - start) / 1000 : 0;
        size_t gpus = json_array_size(json_object_get(a, "gpus"));
        e->elapsed_s += s;
        e->gpu_hours += (double)gpus * (double)s / 3600.0;
        e->gpus = gpus;
        e->nodes = json_array_size(json_object_get(a, "nodes"));
        if (e->first_ms < 0)
            e->first_ms = start;
        e->last_ms = end;
    }
}

/* The mean (or, `peak`, the largest) of a series' non-null values. */
static bool series_figure(const json_t *answer, bool peak, double *ret)
{
    const json_t *series = json_object_get(answer, "series");
    double sum = 0, max = 0;
    size_t n = 0;
    for (size_t k = 0; k < json_array_size(series); k++) {
        const json_t *values = json_object_get(json_array_get(series, k), "values");
        for (size_t i = 0; i < json_array_size(values); i++) {
            const json_t *v = json_array_get(values, i);
            if (!json_is_number(v))
                continue;
            double x = json_number_value(v);
            sum += x;
            max = n == 0 || x > max ? x : max;
            n++;
        }
    }
    if (n == 0)
        return false;
    *ret = peak ? max : sum / (double)n;
    return true;
}

/* The job's GPU figures from the series over its attempts' span. */
static int eff_series(struct cli *c, const json_t *job, struct eff *e)
{
    if (e->first_ms < 0)
        return 0;
    char key[32], since[TIMEFMT_RFC3339_LEN], until[TIMEFMT_RFC3339_LEN], step[32];
    char err[CLI_ERR_MAX];
    snprintf(key, sizeof(key), "%" JSON_INTEGER_FORMAT,
             json_integer_value(json_object_get(job, "id")));
    /* Stored minutes count from their first millisecond: the span takes in
     * the whole minutes around the attempts (other jobs' samples are not
     * the job's key, so they do not come in). */
    int64_t from = e->first_ms - e->first_ms % MINUTE_MS, to = e->last_ms + MINUTE_MS;
    int64_t now = cli_now_ms();
    if (to > now)
        to = now;
    int64_t span_s = (to - from) / 1000 + 1;
    snprintf(step, sizeof(step), "%" PRId64, span_s / MAX_POINTS + 1);
    if (timefmt_rfc3339(from, since, sizeof(since)) != 0 ||
        timefmt_rfc3339(to, until, sizeof(until)) != 0)
        return 0;
    static const char *const metrics[] = {"gpu_util", "mem_used"};
    for (int m = 0; m < 2; m++) {
        struct client_series_query q = {.metric = metrics[m],
                                        .by = "job",
                                        .key = key,
                                        .since = since,
                                        .until = until,
                                        .step = step};
        json_t *answer = NULL;
        int rc = client_metrics_series(&c->client, &q, &answer, err, sizeof(err));
        if (rc)
            return cli_fail_call("eff", rc, err);
        if (m == 0)
            e->util_known = series_figure(answer, false, &e->util_pct);
        else
            e->mem_known = series_figure(answer, true, &e->mem_peak_mib);
        json_decref(answer);
    }
    return 0;
}

static void eff_print(const json_t *job, const struct eff *e)
{
    const json_t *spec = json_object_get(job, "spec");
    const json_t *atts = json_object_get(job, "attempts");
    const json_t *last = json_array_get(atts, json_array_size(atts) - 1);
    char id[64], elapsed[TIMEFMT_DURATION_LEN];
    sacct_field_text(SACCT_JOBID, job, 0, id, sizeof(id));
    timefmt_duration(e->elapsed_s, elapsed, sizeof(elapsed));
    printf("Job ID: %s\n", id);
    printf("User/Group: %s/%s\n", cli_json_str(job, "user"), cli_json_str(job, "team"));
    printf("State: %s (exit code %" JSON_INTEGER_FORMAT ")\n",
           slurm_state_name(slurm_job_state(job)),
           json_integer_value(json_object_get(last, "exit_code")));
    printf("Nodes: %" PRId64 "\n", e->nodes ? (int64_t)e->nodes : slurm_spec_nodes(spec));
    int64_t nodes = e->nodes ? (int64_t)e->nodes : slurm_spec_nodes(spec);
    printf("Cores per node: %" PRId64 "\n",
           (int64_t)json_integer_value(json_object_get(spec, "cpus")) / nodes);
    printf("CPU Efficiency: not measured (gpuorch samples GPUs, not CPUs)\n");
    printf("Job Wall-clock time: %s\n", elapsed);
    printf("Memory Efficiency: not measured (gpuorch samples GPUs, not host memory)\n");
    printf("GPUs: %zu\n", e->gpus);
    printf("GPU-hours: %.4f\n", e->gpu_hours);
    if (e->util_known)
        printf("GPU Utilization: %.1f%% (mean over the job's GPU samples)\n", e->util_pct);
    else
        printf("GPU Utilization: no GPU samples\n");
    if (e->mem_known)
        printf("GPU Memory Peak: %.0f MiB (per GPU)\n", e->mem_peak_mib);
    else
        printf("GPU Memory Peak: no GPU samples\n");
}

static int eff_json(const json_t *job, const struct eff *e)
{
    char id[64];
    sacct_field_text(SACCT_JOBID, job, 0, id, sizeof(id));
    json_t *out = json_pack(
        "{s:s, s:I, s:s, s:I, s:O*, s:I, s:I, s:f, s:o, s:o}", "job_id", id, "id",
        json_integer_value(json_object_get(job, "id")), "state",
        slurm_state_name(slurm_job_state(job)), "nodes", (json_int_t)(e->nodes ? e->nodes : 1),
        "cpus", json_object_get(json_object_get(job, "spec"), "cpus"), "elapsed_s",
        (json_int_t)e->elapsed_s, "gpus", (json_int_t)e->gpus, "gpu_hours", e->gpu_hours,
        "gpu_utilization_pct", e->util_known ? json_real(e->util_pct) : json_null(),
        "gpu_memory_peak_mib", e->mem_known ? json_real(round(e->mem_peak_mib)) : json_null());
    int rc = out && cli_print_json(out) ? 0 : cli_fail("eff", "out of memory");
    json_decref(out);
    return rc;
}

/* The one job `sel` names, with its attempts, into *ret. */
static int eff_fetch(struct cli *c, const char *sel, json_t **ret)
{
    char err[CLI_ERR_MAX];
    struct client_history_query q = {.jobs = sel};
    json_t *all = json_array();
    if (!all)
        return cli_fail("eff", "out of memory");
    int rc = client_jobs_history(&c->client, &q, all, err, sizeof(err));
    if (rc) {
        json_decref(all);
        return cli_fail_call("eff", rc, err);
    }
    if (json_array_size(all) != 1) {
        rc = json_array_size(all) == 0
                 ? cli_fail("eff", "no job %s", sel)
                 : cli_usage_error("eff", "job %s is an array of %zu tasks: name one (%s_N)", sel,
                                   json_array_size(all), sel);
        json_decref(all);
        return rc;
    }
    *ret = json_incref(json_array_get(all, 0));
    json_decref(all);
    return 0;
}

int eff_command(int argc, char **argv)
{
    struct eff_args a = {0};
    const char **pos = NULL;
    size_t npos = 0;
    struct slurm_job_sel sel[SLURM_JOB_SELS_MAX];
    size_t nsel = 0;
    char err[CLI_ERR_MAX];
    int rc = cli_parse_args("eff", argc, argv, CLI_OPTS(eff_opts), &a, &pos, &npos);
    if (rc == 0 && a.co.help)
        eff_usage(stdout);
    else if (rc == 0 && npos != 1)
        rc = cli_usage_error("eff", "expected one JOB (see 'gpuorch eff --help')");
    else if (rc == 0 && (slurm_jobs_parse(pos[0], sel, &nsel, err, sizeof(err)) != 0 || nsel != 1))
        rc = cli_usage_error("eff", "'%s' is not a job id (JOB or ARRAY_INDEX)", pos[0]);
    const char *job_word = rc == 0 && !a.co.help ? pos[0] : NULL;
    free(pos);
    if (rc || a.co.help)
        return rc;
    struct cli c;
    json_t *job = NULL;
    struct eff e = {0};
    if ((rc = cli_connect(&c, "eff", &a.co)) == 0 && (rc = eff_fetch(&c, job_word, &job)) == 0) {
        eff_attempts(job, cli_now_ms(), &e);
        rc = eff_series(&c, job, &e);
    }
    cli_disconnect(&c);
    if (rc == 0)
        rc = a.co.json ? eff_json(job, &e) : (eff_print(job, &e), 0);
    json_decref(job);
    return rc;
}

/*
 * serve_report.c - the serving replay's HTML report (serve_report.h), on
 * report_page.h's machinery.
 *
 * The data: {"title", "services": [{"name", "rate_t", "rate", "runs":
 * [{"policy", "t", "replicas", "ready", "queued", "ttft", "ttft_cdf", "e2e",
 * "e2e_cdf"}]}]}. Times over time are hours from 0 in the charts, seconds in
 * the data; a thinned point keeps the highest replica counts of its stretch
 * and the mean request rate (a rate's peak second would overstate it).
 */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/sort.h"
#include "sim/report_page.h"
#include "sim/serve_report.h"
#include "base/banned.h"

#define MAX_TIME_POINTS 2000
#define MAX_CDF_POINTS  1000

static const char page_js[] =
    "var step = uPlot.paths.stepped({align: 1});\n"
    "function run(i, label, extra) {\n"
    "  var s = {label: label, stroke: color(i), dash: dash(i), width: 1.5, spanGaps: true,\n"
    "           points: {show: false}};\n"
    "  for (var k in extra) s[k] = extra[k];\n"
    "  return s;\n"
    "}\n"
    "function overTime(id, rows, key, label, fmt) {\n"
    "  if (!rows.some(function (r) { return r.t.length > 0; })) { empty(id, 'No samples.');\n"
    "    return; }\n"
    "  var data = uPlot.join(rows.map(function (r) { return [hours(r.t), r[key]]; }));\n"
    "  var series = [{label: 'time', value: function (u, v) {\n"
    "    return v == null ? '-' : v.toFixed(3) + ' h'; }}];\n"
    "  rows.forEach(function (r, i) {\n"
    "    series.push(run(i, r.policy, {paths: step, value: function (u, v) { return fmt(v); }}));\n"
    "  });\n"
    "  chart(id, 240, {scales: {x: {time: false}, y: {range: function (u, min, max) {\n"
    "      return [0, Math.max(1, max || 0)]; }}},\n"
    "    axes: [{label: 'hours from the start of the trace'}, {label: label, size: 60}],\n"
    "    series: series}, data);\n"
    "}\n"
    "function lat(v) {\n"
    "  if (v == null) return '-';\n"
    "  return v < 1 ? +(v * 1000).toPrecision(3) + ' ms' : dur(v);\n"
    "}\n"
    "function pow10(v) { var l = Math.log10(v); return Math.abs(l - Math.round(l)) < 1e-9; }\n"
    "function cdf(id, rows, key, label) {\n"
    "  if (!rows.some(function (r) { return r[key].length > 0; })) {\n"
    "    empty(id, 'No request completed.'); return; }\n"
    "  var data = uPlot.join(rows.map(function (r) {\n"
    "    return [r[key].map(function (x) { return Math.max(x, 0.001); }), r[key + '_cdf']]; }));\n"
    "  var series = [{label: label, value: function (u, v) { return lat(v); }}];\n"
    "  rows.forEach(function (r, i) {\n"
    "    series.push(run(i, r.policy, {paths: step, value: function (u, v) { return pct(v); }}));\n"
    "  });\n"
    "  chart(id, 280, {scales: {x: {time: false, distr: 3, log: 10},\n"
    "      y: {range: function () { return [0, 1]; }}},\n"
    "    axes: [{label: label + ' (log scale)', values: function (u, splits) {\n"
    "        return splits.map(function (v) { return pow10(v) ? lat(v) : ''; }); }},\n"
    "      {label: 'fraction of completed requests', size: 60, values: function (u, splits) {\n"
    "        return splits.map(pct); }}],\n"
    "    series: series}, data);\n"
    "}\n"
    "D.services.forEach(function (s, k) {\n"
    "  var p = 'svc-' + k + '-';\n"
    "  overTime(p + 'replicas', s.runs, 'replicas', 'replicas holding GPUs', count);\n"
    "  overTime(p + 'rate', [{policy: 'requests/s', t: s.rate_t, rate: s.rate}], 'rate',\n"
    "           'requests per second', function (v) { return v == null ? '-' : v.toFixed(2); });\n"
    "  cdf(p + 'ttft', s.runs, 'ttft', 'time to first token');\n"
    "  cdf(p + 'e2e', s.runs, 'e2e', 'end-to-end latency');\n"
    "});\n";

struct page {
    const char *title;
    const struct sim_serve_report_run *runs;
    size_t nruns;
    const struct sim_report_run *jobs;
    size_t njobs;
};

/* The runs of one service: [first, end). */
static size_t group_end(const struct page *pg, size_t first)
{
    size_t e = first + 1;
    while (e < pg->nruns && pg->runs[e].service == pg->runs[first].service)
        e++;
    return e;
}

static uint64_t bucket_ms(const struct sim_serve_result *r)
{
    if (r->nsamples <= MAX_TIME_POINTS)
        return 0;
    int64_t span = r->samples[r->nsamples - 1].t_ms - r->samples[0].t_ms;
    return (uint64_t)(span > 0 ? span : 0) / MAX_TIME_POINTS + 1;
}

enum field { F_T, F_REPLICAS, F_READY, F_QUEUED, F_RATE };

static double sample_value(const struct sim_serve_sample *s, enum field fld)
{
    return fld == F_REPLICAS ? s->ready + s->starting + s->draining
           : fld == F_READY  ? s->ready
           : fld == F_QUEUED ? s->queued
           : fld == F_RATE   ? s->arrivals
                             : (double)s->t_ms / 1000;
}

/* A thinned series: per stretch, the first time, the highest count, the mean rate. */
static void put_series(FILE *f, const struct sim_serve_result *r, enum field fld)
{
    uint64_t w = bucket_ms(r);
    fputc('[', f);
    for (size_t i = 0; i < r->nsamples;) {
        const struct sim_serve_sample *s = r->samples;
        uint64_t id = w ? (uint64_t)(s[i].t_ms - s[0].t_ms) / w : 0;
        double v = sample_value(&s[i], fld), sum = v;
        size_t j = i + 1;
        for (; w && j < r->nsamples && (uint64_t)(s[j].t_ms - s[0].t_ms) / w == id; j++) {
            double x = sample_value(&s[j], fld);
            sum += x;
            if (fld != F_T && x > v)
                v = x;
        }
        if (i)
            fputc(',', f);
        if (fld == F_RATE) /* per tick of 1 s: arrivals per second */
            fprintf(f, "%.4g", sum / (double)(j - i));
        else if (fld == F_T)
            fprintf(f, "%.3f", (double)s[i].t_ms / 1000);
        else
            fprintf(f, "%.0f", v);
        i = j;
    }
    fputc(']', f);
}

static bool dbl_before(const double *a, const double *b)
{
    return *a < *b;
}

SORT_DEFINE(sort_dbl, double, dbl_before)

/* "KEY":[x...],"KEY_cdf":[y...]: the completed requests' TTFT or e2e, in s. */
static int put_cdf(FILE *f, const struct sim_serve_result *r, const char *key, bool ttft)
{
    double *v = malloc((r->nrequests ? r->nrequests : 1) * sizeof(*v));
    if (!v)
        return GPO_ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < r->nrequests; i++) {
        const struct sim_request_result *q = &r->requests[i];
        int64_t at = ttft ? q->first_token_ms : q->end_ms;
        if (q->outcome == SIM_REQ_DONE && at >= 0)
            v[n++] = (double)(at - q->arrival_ms) / 1000;
    }
    if (sort_dbl(v, n)) {
        free(v);
        return GPO_ENOMEM;
    }
    size_t m = n < MAX_CDF_POINTS ? n : MAX_CDF_POINTS;
    for (int pass = 0; pass < 2; pass++) {
        fprintf(f, pass ? ",\"%s_cdf\":[" : "\"%s\":[", key);
        // cppcheck-suppress knownConditionTrueFalse ; m is min(n, MAX_CDF_POINTS), n is not always
        // 0
        for (size_t k = 0; k < m; k++) {
            size_t i = m == n ? k : (size_t)((double)k * (double)(n - 1) / (double)(m - 1) + 0.5);
            if (k)
                fputc(',', f);
            fprintf(f, "%.6g", pass ? (double)(i + 1) / (double)n : v[i]);
        }
        fputc(']', f);
    }
    free(v);
    return 0;
}

static int put_data(FILE *f, const void *ctx)
{
    const struct page *pg = ctx;
    fputs("{\"title\":", f);
    sim_page_json_str(f, pg->title);
    fputs(",\"services\":[", f);
    for (size_t g = 0; g < pg->nruns; g = group_end(pg, g)) {
        fputs(g ? ",\n{\"name\":" : "\n{\"name\":", f);
        sim_page_json_str(f, pg->runs[g].service->name);
        fputs(",\"rate_t\":", f);
        put_series(f, pg->runs[g].result, F_T);
        fputs(",\"rate\":", f);
        put_series(f, pg->runs[g].result, F_RATE);
        fputs(",\"runs\":[", f);
        for (size_t r = g; r < group_end(pg, g); r++) {
            const struct sim_serve_result *res = pg->runs[r].result;
            fputs(r > g ? ",\n{\"policy\":" : "\n{\"policy\":", f);
            sim_page_json_str(f, pg->runs[r].summary->policy);
            fputs(",\"t\":", f);
            put_series(f, res, F_T);
            fputs(",\"replicas\":", f);
            put_series(f, res, F_REPLICAS);
            fputs(",\"ready\":", f);
            put_series(f, res, F_READY);
            fputs(",\"queued\":", f);
            put_series(f, res, F_QUEUED);
            fputc(',', f);
            int e = put_cdf(f, res, "ttft", true);
            if (!e) {
                fputc(',', f);
                e = put_cdf(f, res, "e2e", false);
            }
            if (e)
                return e;
            fputc('}', f);
        }
        fputs("]}", f);
    }
    fputs("]}", f);
    return 0;
}

/* The service's parameters: replica model, SLO, autoscaling. */
static void put_service_params(FILE *f, const struct sim_serve_service *svc,
                               const struct sim_serve_result *r)
{
    const struct sim_replica_model *m = &svc->model;
    const struct autoscale_spec *a = &svc->autoscale;
    fprintf(f,
            "<table>\n<tr><td class=\"name\">requests</td><td class=\"name\">%zu over %.0f s"
            "</td></tr>\n"
            "<tr><td class=\"name\">replica</td><td class=\"name\">GPUs %.3g; prefill %.6g "
            "tokens/s (one at a time), decode %.6g tokens/s per batch and at most %.6g per "
            "request, batch of %d, startup %.1f s</td></tr>\n",
            r->nrequests, (double)r->end_ms / 1000, (double)svc->gpu_milli / 1000, m->prefill_tps,
            m->decode_tps, m->decode_tps_request, (int)m->max_batch, (double)m->startup_ms / 1000);
    fputs("<tr><td class=\"name\">SLO</td><td class=\"name\">", f);
    const char *sep = "";
    if (svc->slo.ttft_ms) {
        fprintf(f, "time to first token &le; %.3g s", (double)svc->slo.ttft_ms / 1000);
        sep = ", ";
    }
    if (svc->slo.tpot_ms) {
        fprintf(f, "%stime per output token &le; %lld ms", sep, (long long)svc->slo.tpot_ms);
        sep = ", ";
    }
    if (svc->slo.e2e_ms)
        fprintf(f, "%send-to-end &le; %.3g s", sep, (double)svc->slo.e2e_ms / 1000);
    fprintf(f,
            " (a dropped, timed-out or failed request misses it)</td></tr>\n"
            "<tr><td class=\"name\">autoscaling (default)</td><td class=\"name\">%s target "
            "%.3g per replica, %d to %d replicas, stable window %lld s, panic window %lld s at "
            "%d%%, scale-down delay %lld s, scale to zero after %lld s, headroom %s</td></tr>\n"
            "<tr><td class=\"name\">router</td><td class=\"name\">concurrency limit %u per "
            "replica%s, queue of %u for at most %.3g s, drain %.3g s</td></tr>\n</table>\n",
            autoscale_metric_name(a->metric), (double)a->target_milli / 1000, (int)a->min,
            (int)a->max, (long long)(a->stable_window_ms / 1000),
            (long long)(a->panic_window_ms / 1000), (int)a->panic_threshold_pct,
            (long long)(a->scale_down_delay_ms / 1000), (long long)(a->zero_grace_ms / 1000),
            a->headroom ? "on" : "off", svc->concurrency_limit,
            svc->concurrency_limit ? "" : " (0: none)", svc->queue_limit,
            (double)svc->queue_timeout_ms / 1000, (double)svc->drain_timeout_ms / 1000);
}

static void put_serve_table(FILE *f, const struct sim_serve_report_run *runs, size_t first,
                            size_t end)
{
    fputs("<table>\n<tr><th class=\"name\">policy</th><th>requests</th><th>SLO attainment</th>"
          "<th>TTFT p50 (s)</th><th>TTFT p99 (s)</th><th>e2e p50 (s)</th><th>e2e p99 (s)</th>"
          "<th>dropped</th><th>timed out</th><th>failed</th><th>cold starts</th>"
          "<th>GPU-hours</th><th>replicas mean</th><th>replicas peak</th></tr>\n",
          f);
    for (size_t r = first; r < end; r++) {
        const struct sim_serve_summary *s = runs[r].summary;
        fputs("<tr><td class=\"name\">", f);
        sim_page_html(f, s->policy);
        fprintf(f,
                "</td><td>%zu</td><td>%.2f%%</td><td>%.3f</td><td>%.3f</td><td>%.3f</td>"
                "<td>%.3f</td><td>%zu</td><td>%zu</td><td>%zu</td><td>%zu</td><td>%.2f</td>"
                "<td>%.2f</td><td>%d</td></tr>\n",
                s->requests, s->slo_attainment * 100, s->ttft_p50_s, s->ttft_p99_s, s->e2e_p50_s,
                s->e2e_p99_s, s->dropped, s->timed_out, s->failed, s->cold_starts, s->gpu_hours,
                s->replicas_mean, (int)s->replicas_max);
    }
    fputs("</table>\n", f);
}

/* "default used 0.62x the GPU-hours of knative (12.3 against 19.8) at SLO
 * attainment 99.2% against 98.9%". */
static void put_conclusions(FILE *f, const struct sim_serve_report_run *runs, size_t first,
                            size_t end)
{
    if (end - first < 2)
        return;
    const struct sim_serve_summary *a = runs[first].summary;
    fputs("<ul>\n", f);
    for (size_t r = first + 1; r < end; r++) {
        const struct sim_serve_summary *b = runs[r].summary;
        char line[512];
        double da = a->slo_attainment * 100, db = b->slo_attainment * 100;
        const char *att =
            fabs(da - db) < 1 ? "at equal SLO attainment within one point" : "at SLO attainment";
        if (b->gpu_hours > 0)
            snprintf(line, sizeof(line),
                     "%s used %.2fx the GPU-hours of %s (%.2f against %.2f) %s (%.2f%% against "
                     "%.2f%%)",
                     a->policy, a->gpu_hours / b->gpu_hours, b->policy, a->gpu_hours, b->gpu_hours,
                     att, da, db);
        else
            snprintf(line, sizeof(line),
                     "%s: %.2f GPU-hours, %s: none; SLO attainment %.2f%% "
                     "against %.2f%%",
                     a->policy, a->gpu_hours, b->policy, da, db);
        fputs("<li>", f);
        sim_page_html(f, line);
        fputs("</li>\n", f);
    }
    fputs("</ul>\n", f);
}

/* The job replays of a shared cluster: one row per serving policy. */
static void put_jobs(FILE *f, const struct sim_report_run *jobs, size_t n)
{
    double max[3] = {0, 0, 0};
    for (size_t j = 0; j < n; j++) {
        const struct sim_summary *s = jobs[j].summary;
        double v[3] = {s->jct_avg_s, s->jct_p99_s, s->wait_avg_s};
        for (int c = 0; c < 3; c++)
            max[c] = isfinite(v[c]) && v[c] > max[c] ? v[c] : max[c];
    }
    struct sim_page_unit u[3] = {sim_page_unit_for(max[0]), sim_page_unit_for(max[1]),
                                 sim_page_unit_for(max[2])};
    fprintf(f,
            "<h2>Training on the same cluster</h2>\n<table>\n<tr><th class=\"name\">job "
            "policy + serving policy</th><th>cluster GPUs</th><th>jobs</th><th>ended</th>"
            "<th>JCT avg (%s)</th><th>JCT p99 (%s)</th><th>wait avg (%s)</th>"
            "<th>GPU utilization</th><th>preemptions</th></tr>\n",
            u[0].name, u[1].name, u[2].name);
    for (size_t j = 0; j < n; j++) {
        const struct sim_summary *s = jobs[j].summary;
        fputs("<tr><td class=\"name\">", f);
        sim_page_html(f, s->policy);
        fprintf(f, "</td><td>%.0f</td><td>%zu</td><td>%zu</td>", s->total_gpus, s->jobs, s->ended);
        sim_page_duration_cell(f, s->jct_avg_s, s->ended > 0, u[0]);
        sim_page_duration_cell(f, s->jct_p99_s, s->ended > 0, u[1]);
        sim_page_duration_cell(f, s->wait_avg_s, s->ended > 0, u[2]);
        fprintf(f, "<td>%.1f%%</td><td>%" PRIu64 "</td></tr>\n", s->gpu_utilization * 100,
                s->preemptions);
    }
    fputs("</table>\n", f);
}

static int put_page(FILE *f, const void *ctx)
{
    const struct page *pg = ctx;
    sim_page_head(f, pg->title);
    fputs("<p class=\"note\">Serving policies replayed on the same request traces: ", f);
    for (size_t r = 0; r < pg->nruns && pg->runs[r].service == pg->runs[0].service; r++) {
        fputs(r ? ", " : "", f);
        sim_page_html(f, pg->runs[r].summary->policy);
    }
    fputs(". Latencies over the completed requests; SLO attainment over all requests.</p>\n", f);
    size_t k = 0;
    for (size_t g = 0; g < pg->nruns; g = group_end(pg, g), k++) {
        size_t end = group_end(pg, g);
        fputs("<h2>Service ", f);
        sim_page_html(f, pg->runs[g].service->name);
        fputs("</h2>\n<h3>Parameters</h3>\n", f);
        put_service_params(f, pg->runs[g].service, pg->runs[g].result);
        fputs("<h3>Summary</h3>\n", f);
        put_serve_table(f, pg->runs, g, end);
        put_conclusions(f, pg->runs, g, end);
        fprintf(f,
                "<div class=\"side\"><div><h3>Replicas over time</h3><div class=\"chart\" "
                "id=\"svc-%zu-replicas\"></div></div>\n<div><h3>Request rate over time</h3>"
                "<div class=\"chart\" id=\"svc-%zu-rate\"></div></div></div>\n"
                "<div class=\"side\"><div><h3>Time to first token CDF</h3><div class=\"chart\" "
                "id=\"svc-%zu-ttft\"></div></div>\n<div><h3>End-to-end latency CDF</h3>"
                "<div class=\"chart\" id=\"svc-%zu-e2e\"></div></div></div>\n",
                k, k, k, k);
    }
    fputs("<p class=\"note\">Long replays are thinned to at most 2000 points per policy: each "
          "point shows the highest replica count of its stretch of time and its mean request "
          "rate; a CDF shows at most 1000 points.</p>\n",
          f);
    if (pg->njobs)
        put_jobs(f, pg->jobs, pg->njobs);
    return sim_page_foot(f, put_data, pg, page_js);
}

int sim_serve_report_write(const char *path, const char *title,
                           const struct sim_serve_report_run *runs, size_t nruns,
                           const struct sim_report_run *jobs, size_t njobs, char *err,
                           size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    bool bad = !path || !*path || (nruns && !runs) || (njobs && !jobs);
    for (size_t r = 0; !bad && r < nruns; r++)
        bad = !runs[r].summary || !runs[r].result || !runs[r].service;
    for (size_t j = 0; !bad && j < njobs; j++)
        bad = !jobs[j].summary || !jobs[j].result;
    if (bad) {
        if (err && errlen)
            snprintf(err, errlen, "cannot write %s: a run without its parts",
                     path && *path ? path : "(no path)");
        return GPO_EINVAL;
    }
    struct page pg = {title ? title : "", runs, nruns, jobs, njobs};
    return sim_page_write(path, put_page, &pg, err, errlen);
}

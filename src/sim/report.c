#include <errno.h>
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
#include "sim/report.h"
#include "base/banned.h"

/* Points drawn per policy: enough for a full-width chart, small for the page. */
#define MAX_TIME_POINTS 2000
#define MAX_CDF_POINTS  1000

/* The charts' script, after sim_page_js_prelude (report_page.h). */
static const char page_js[] =
    "function policy(i, extra) {\n"
    "  var s = {label: D.runs[i].policy, stroke: color(i), dash: dash(i), width: 1.5,\n"
    "           spanGaps: true, points: {show: false}};\n"
    "  for (var k in extra) s[k] = extra[k];\n"
    "  return s;\n"
    "}\n"
    "function overTime(id, key, label, fmt, ymax, incrs) {\n"
    "  var any = D.runs.some(function (r) { return r.t.length > 0; });\n"
    "  if (!any) { empty(id, 'No samples.'); return; }\n"
    "  var data = uPlot.join(D.runs.map(function (r) { return [hours(r.t), r[key]]; }));\n"
    "  var step = uPlot.paths.stepped({align: 1});\n"
    "  var series = [{label: 'time', value: function (u, v) {\n"
    "    return v == null ? '-' : v.toFixed(2) + ' h'; }}];\n"
    "  D.runs.forEach(function (r, i) {\n"
    "    series.push(policy(i, {paths: step, value: function (u, v) { return fmt(v); }}));\n"
    "  });\n"
    "  chart(id, 260, {\n"
    "    scales: {x: {time: false}, y: {range: function (u, min, max) {\n"
    "      return [0, Math.max(ymax, max || 0)]; }}},\n"
    "    axes: [{label: 'hours since the first submit'},\n"
    "           {label: label, size: 60, incrs: incrs, values: function (u, splits) {\n"
    "             return splits.map(fmt); }}],\n"
    "    series: series}, data);\n"
    "}\n"
    "overTime('chart-util', 'util', 'GPU utilization', pct, 1);\n"
    "var whole = [];\n"
    "for (var m = 1; m < 1e9; m *= 10) whole.push(m, 2 * m, 5 * m);\n"
    "overTime('chart-queue', 'pending', 'pending jobs', count, 1, whole);\n"
    "(function () {\n"
    "  var any = D.runs.some(function (r) { return r.jct.length > 0; });\n"
    "  if (!any) { empty('chart-jct', 'No job ended.'); return; }\n"
    "  var data = uPlot.join(D.runs.map(function (r) {\n"
    "    return [r.jct.map(function (x) { return Math.max(x, 1); }), r.cdf]; }));\n"
    "  var series = [{label: 'JCT', value: function (u, v) { return dur(v); }}];\n"
    "  var step = uPlot.paths.stepped({align: 1});\n"
    "  D.runs.forEach(function (r, i) {\n"
    "    series.push(policy(i, {paths: step, value: function (u, v) { return pct(v); }}));\n"
    "  });\n"
    "  function pow10(v) {\n"
    "    var l = Math.log10(v);\n"
    "    return Math.abs(l - Math.round(l)) < 1e-9;\n"
    "  }\n"
    "  chart('chart-jct', 320, {\n"
    "    scales: {x: {time: false, distr: 3, log: 10},\n"
    "             y: {range: function () { return [0, 1]; }}},\n"
    "    axes: [{label: 'job completion time (log scale)', values: function (u, splits) {\n"
    "             return splits.map(function (v) { return pow10(v) ? dur(v) : ''; }); }},\n"
    "           {label: 'fraction of ended jobs', size: 60, values: function (u, splits) {\n"
    "             return splits.map(pct); }}],\n"
    "    series: series}, data);\n"
    "})();\n"
    "(function () {\n"
    "  var T = D.teams.length, P = D.runs.length;\n"
    "  if (!T || !P) { empty('chart-wait', 'No teams.'); return; }\n"
    "  var max = 0;\n"
    "  D.runs.forEach(function (r) {\n"
    "    r.wait.forEach(function (v) { if (v != null && v > max) max = v; }); });\n"
    "  var unit = max < 120 ? ['s', 1] : max < 7200 ? ['min', 60] :\n"
    "             max < 172800 ? ['h', 3600] : ['d', 86400];\n"
    "  var xs = D.teams.map(function (n, i) { return i; });\n"
    "  var group = 0.8, w = group / P;\n"
    "  var data = [xs];\n"
    "  var series = [{label: 'team', value: function (u, v) {\n"
    "    return v == null ? '-' : D.teams[v]; }}];\n"
    "  D.runs.forEach(function (r, p) {\n"
    "    data.push(r.wait.map(function (v) { return v == null ? null : v / unit[1]; }));\n"
    "    var x0 = xs.map(function (x) { return x - group / 2 + p * w; });\n"
    "    series.push(policy(p, {fill: color(p) + 'cc', width: 1, dash: undefined,\n"
    "      value: function (u, v) { return v == null ? '-' : v.toFixed(2) + ' ' + unit[0]; },\n"
    "      paths: uPlot.paths.bars({disp: {\n"
    "        x0: {unit: 1, values: function () { return x0; }},\n"
    "        size: {unit: 1, values: function () { return [w * 0.9]; }}}})}));\n"
    "  });\n"
    "  chart('chart-wait', 300, {\n"
    "    cursor: {points: {show: false}},\n"
    "    scales: {x: {time: false, range: function () { return [-0.5, T - 0.5]; }},\n"
    "             y: {range: function (u, min, max) {\n"
    "               return [0, max > 0 ? max * 1.1 : 1]; }}},\n"
    "    axes: [{label: 'team', grid: {show: false}, rotate: T > 8 ? -45 : 0,\n"
    "            size: T > 8 ? 90 : 50,\n"
    "            splits: function () { return xs; },\n"
    "            values: function (u, splits) {\n"
    "              return splits.map(function (v) { return D.teams[v] || ''; }); }},\n"
    "           {label: 'average queueing delay (' + unit[0] + ')', size: 60}],\n"
    "    series: series}, data);\n"
    "})();\n";

/* The union of the runs' team names, in order of first appearance. */
struct teams {
    const char **names; /* borrowed from the results and summaries */
    size_t n;
};

static size_t team_find(const struct teams *t, const char *name, size_t hint)
{
    if (hint < t->n && strcmp(t->names[hint], name) == 0)
        return hint;
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->names[i], name) == 0)
            return i;
    return SIZE_MAX;
}

static void teams_add(struct teams *t, char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *name = names && names[i] ? names[i] : "";
        if (team_find(t, name, i) == SIZE_MAX)
            t->names[t->n++] = name;
    }
}

static int teams_collect(struct teams *t, const struct sim_report_run *runs, size_t nruns)
{
    size_t cap = 0;
    for (size_t r = 0; r < nruns; r++)
        cap += runs[r].result->nteams + runs[r].summary->nteams;
    t->n = 0;
    t->names = malloc((cap ? cap : 1) * sizeof(*t->names));
    if (!t->names)
        return GPO_ENOMEM;
    for (size_t r = 0; r < nruns; r++) {
        teams_add(t, runs[r].result->team_names, runs[r].result->nteams);
        teams_add(t, runs[r].summary->team_names, runs[r].summary->nteams);
    }
    return 0;
}

/* Maps each of `n` names to its index in t (caller frees); NULL: no memory. */
static size_t *teams_map(const struct teams *t, char *const *names, size_t n)
{
    size_t *map = malloc((n ? n : 1) * sizeof(*map));
    if (!map)
        return NULL;
    for (size_t i = 0; i < n; i++)
        map[i] = team_find(t, names && names[i] ? names[i] : "", i);
    return map;
}

/* A job that ended: it counts in the JCT and wait figures (as in stats.c). */
static bool job_ended(const struct sim_job_result *j)
{
    return !j->unschedulable && j->end_s >= 0;
}

/*
 * One point of a thinned time series: the samples whose times fall in one
 * bucket of `width` seconds (width 0: each sample alone) become one point at
 * the first one's time, with the largest utilization and queue among them.
 */
struct bucket {
    int64_t t_s, busy_milli;
    uint32_t pending;
};

static uint64_t bucket_width(const struct sim_result *r)
{
    if (r->nsamples <= MAX_TIME_POINTS)
        return 0;
    int64_t first = r->samples[0].t_s, last = r->samples[r->nsamples - 1].t_s;
    uint64_t span = last > first ? (uint64_t)last - (uint64_t)first : 0;
    return span / MAX_TIME_POINTS + 1; /* span / width < MAX_TIME_POINTS */
}

/* Fills *b from the samples from index i on; returns the index after them. */
static size_t bucket_next(const struct sim_result *r, uint64_t width, size_t i, struct bucket *b)
{
    const struct sim_sample *s = r->samples;
    int64_t first = s[0].t_s;
    uint64_t id = width ? ((uint64_t)s[i].t_s - (uint64_t)first) / width : 0;
    *b = (struct bucket){s[i].t_s, s[i].busy_milli, s[i].pending};
    for (i++; width && i < r->nsamples && ((uint64_t)s[i].t_s - (uint64_t)first) / width == id;
         i++) {
        if (s[i].busy_milli > b->busy_milli)
            b->busy_milli = s[i].busy_milli;
        if (s[i].pending > b->pending)
            b->pending = s[i].pending;
    }
    return i;
}

enum series_field { FIELD_T, FIELD_UTIL, FIELD_PENDING };

static void put_time_series(FILE *f, const struct sim_result *r, int64_t t0, enum series_field fld)
{
    uint64_t width = bucket_width(r);
    double total = (double)r->total_gpus_milli;
    struct bucket b;
    fputc('[', f);
    for (size_t i = 0; i < r->nsamples;) {
        if (i)
            fputc(',', f);
        i = bucket_next(r, width, i, &b);
        if (fld == FIELD_T)
            fprintf(f, "%" PRId64, b.t_s - t0);
        else if (fld == FIELD_UTIL)
            fprintf(f, "%.4g", total > 0 ? (double)b.busy_milli / total : 0.0);
        else
            fprintf(f, "%" PRIu32, b.pending);
    }
    fputc(']', f);
}

/* A point of the JCT CDF: the fraction `upto`/n of the jobs ended within x_s. */
struct cdf_point {
    int64_t x_s;
    size_t upto;
};

static bool cdf_before(const struct cdf_point *a, const struct cdf_point *b)
{
    return a->x_s < b->x_s;
}

SORT_DEFINE(sort_cdf, struct cdf_point, cdf_before)

/* Writes "jct":[...],"cdf":[...]: one point per distinct JCT, thinned evenly. */
static int put_cdf(FILE *f, const struct sim_result *r)
{
    struct cdf_point *p = malloc((r->njobs ? r->njobs : 1) * sizeof(*p));
    if (!p)
        return GPO_ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < r->njobs; i++)
        if (job_ended(&r->jobs[i]))
            p[n++] = (struct cdf_point){r->jobs[i].end_s - r->jobs[i].submit_s, 0};
    if (sort_cdf(p, n)) {
        free(p);
        return GPO_ENOMEM;
    }
    size_t d = 0; /* distinct JCTs, each with the count of jobs up to it */
    for (size_t i = 0; i < n; i++)
        if (i + 1 == n || p[i + 1].x_s != p[i].x_s)
            p[d++] = (struct cdf_point){p[i].x_s, i + 1};
    size_t m = d < MAX_CDF_POINTS ? d : MAX_CDF_POINTS;
    for (int pass = 0; pass < 2; pass++) {
        fputs(pass ? ",\"cdf\":[" : "\"jct\":[", f);
        // cppcheck-suppress knownConditionTrueFalse ; m is min(d, MAX_CDF_POINTS), d is not always
        // 0
        for (size_t k = 0; k < m; k++) {
            /* first and last always; evenly between */
            size_t i = m == d ? k : (size_t)((double)k * (double)(d - 1) / (double)(m - 1) + 0.5);
            if (k)
                fputc(',', f);
            if (pass)
                fprintf(f, "%.6g", (double)p[i].upto / (double)n);
            else
                fprintf(f, "%" PRId64, p[i].x_s);
        }
        fputc(']', f);
    }
    free(p);
    return 0;
}

/* Writes "wait":[...]: the run's average queueing delay per team of t. */
static int put_team_waits(FILE *f, const struct sim_result *r, const struct teams *t)
{
    size_t *map = teams_map(t, r->team_names, r->nteams);
    double *sum = calloc(t->n ? t->n : 1, sizeof(*sum));
    size_t *cnt = calloc(t->n ? t->n : 1, sizeof(*cnt));
    if (!map || !sum || !cnt) {
        free(map);
        free(sum);
        free(cnt);
        return GPO_ENOMEM;
    }
    for (size_t i = 0; i < r->njobs; i++) {
        const struct sim_job_result *j = &r->jobs[i];
        if (!job_ended(j) || j->team >= r->nteams || map[j->team] == SIZE_MAX)
            continue;
        double wait = (double)(j->end_s - j->submit_s) - (double)j->running_s;
        sum[map[j->team]] += wait < 0 ? 0 : wait;
        cnt[map[j->team]]++;
    }
    fputs("\"wait\":[", f);
    for (size_t k = 0; k < t->n; k++) {
        if (k)
            fputc(',', f);
        if (cnt[k])
            sim_page_json_num(f, sum[k] / (double)cnt[k]);
        else
            fputs("null", f);
    }
    fputc(']', f);
    free(map);
    free(sum);
    free(cnt);
    return 0;
}

/* The earliest time in any run: the charts' time axis starts there. */
static int64_t time_origin(const struct sim_report_run *runs, size_t nruns)
{
    bool any = false;
    int64_t t0 = 0;
    for (size_t r = 0; r < nruns; r++) {
        const struct sim_result *res = runs[r].result;
        if (res->nsamples && (!any || res->samples[0].t_s < t0)) {
            t0 = res->samples[0].t_s;
            any = true;
        }
        if (res->njobs && (!any || res->first_submit_s < t0)) {
            t0 = res->first_submit_s;
            any = true;
        }
    }
    return t0;
}

static int put_data(FILE *f, const char *title, const struct sim_report_run *runs, size_t nruns,
                    const struct teams *t)
{
    int64_t t0 = time_origin(runs, nruns);
    fputs("{\"title\":", f);
    sim_page_json_str(f, title);
    fputs(",\"teams\":[", f);
    for (size_t k = 0; k < t->n; k++) {
        if (k)
            fputc(',', f);
        sim_page_json_str(f, t->names[k]);
    }
    fputs("],\"runs\":[", f);
    for (size_t r = 0; r < nruns; r++) {
        const struct sim_result *res = runs[r].result;
        fputs(r ? ",\n{\"policy\":" : "\n{\"policy\":", f);
        sim_page_json_str(f, runs[r].summary->policy);
        fputs(",\"t\":", f);
        put_time_series(f, res, t0, FIELD_T);
        fputs(",\"util\":", f);
        put_time_series(f, res, t0, FIELD_UTIL);
        fputs(",\"pending\":", f);
        put_time_series(f, res, t0, FIELD_PENDING);
        fputc(',', f);
        int e = put_cdf(f, res);
        if (!e) {
            fputc(',', f);
            e = put_team_waits(f, res, t);
        }
        if (e)
            return e;
        fputc('}', f);
    }
    fputs("]}", f);
    return 0;
}

/* One unit per column: the one that suits the column's largest value. */
static struct sim_page_unit column_unit(const struct sim_report_run *runs, size_t nruns,
                                        size_t offset)
{
    double max = 0;
    for (size_t r = 0; r < nruns; r++) {
        double v;
        memcpy(&v, (const char *)runs[r].summary + offset, sizeof(v));
        if (isfinite(v) && v > max)
            max = v;
    }
    return sim_page_unit_for(max);
}

static void put_summary_table(FILE *f, const struct sim_report_run *runs, size_t nruns)
{
    static const struct {
        const char *label;
        size_t offset;
    } dcols[] = {
        {"makespan", offsetof(struct sim_summary, makespan_s)},
        {"JCT avg", offsetof(struct sim_summary, jct_avg_s)},
        {"JCT p50", offsetof(struct sim_summary, jct_p50_s)},
        {"JCT p95", offsetof(struct sim_summary, jct_p95_s)},
        {"JCT p99", offsetof(struct sim_summary, jct_p99_s)},
        {"wait avg", offsetof(struct sim_summary, wait_avg_s)},
        {"wait p99", offsetof(struct sim_summary, wait_p99_s)},
    };
    struct sim_page_unit u[sizeof(dcols) / sizeof(dcols[0])];
    fputs("<table>\n<tr><th class=\"name\">policy</th><th>jobs</th><th>ended</th>"
          "<th>unschedulable</th>",
          f);
    for (size_t c = 0; c < sizeof(dcols) / sizeof(dcols[0]); c++) {
        u[c] = column_unit(runs, nruns, dcols[c].offset);
        fprintf(f, "<th>%s (%s)</th>", dcols[c].label, u[c].name);
    }
    fputs("<th>GPU utilization</th><th>Jain fairness</th><th>preemptions</th></tr>\n", f);
    for (size_t r = 0; r < nruns; r++) {
        const struct sim_summary *s = runs[r].summary;
        fputs("<tr><td class=\"name\">", f);
        sim_page_html(f, s->policy);
        fprintf(f, "</td><td>%zu</td><td>%zu</td><td>%zu</td>", s->jobs, s->ended,
                s->unschedulable);
        for (size_t c = 0; c < sizeof(dcols) / sizeof(dcols[0]); c++) {
            double v;
            memcpy(&v, (const char *)s + dcols[c].offset, sizeof(v));
            sim_page_duration_cell(f, v, c == 0 || s->ended > 0, u[c]);
        }
        fprintf(f, "<td>%.1f%%</td><td>%.3f</td><td>%" PRIu64 "</td></tr>\n",
                s->gpu_utilization * 100, s->jain_fairness, s->preemptions);
    }
    fputs("</table>\n", f);
}

void sim_report_conclusion(char *buf, size_t len, const struct sim_summary *a,
                           const struct sim_summary *b)
{
    double ua = a->gpu_utilization * 100, ub = b->gpu_utilization * 100;
    char at[96];
    if (fabs(ua - ub) < 1)
        snprintf(at, sizeof(at), "at equal utilization (%.1f%% and %.1f%%)", ua, ub);
    else
        snprintf(at, sizeof(at), "at utilization %.1f%% against %.1f%%", ua, ub);
    if (!a->ended || !b->ended || !(a->jct_avg_s > 0) || !(b->jct_avg_s > 0)) {
        snprintf(buf, len, "%s against %s: no average JCT to compare (%zu and %zu jobs ended)",
                 a->policy, b->policy, a->ended, b->ended);
        return;
    }
    double x = b->jct_avg_s / a->jct_avg_s;
    if (x >= 1.005)
        snprintf(buf, len, "%s cut average JCT %.*fx against %s %s", a->policy, x < 10 ? 2 : 1, x,
                 b->policy, at);
    else if (x <= 1 / 1.005)
        snprintf(buf, len, "%s raised average JCT %.*fx against %s %s", a->policy,
                 1 / x < 10 ? 2 : 1, 1 / x, b->policy, at);
    else
        snprintf(buf, len, "%s and %s gave the same average JCT (within 0.5%%) %s", a->policy,
                 b->policy, at);
}

/* The parameters of the replay, and a conclusion per comparison. */
static void put_params(FILE *f, const struct sim_report_params *pa,
                       const struct sim_report_run *runs, size_t nruns)
{
    fputs("<h2>Parameters</h2>\n<table>\n<tr><td class=\"name\">cluster</td><td class=\"name\">",
          f);
    if (nruns)
        fprintf(f, "%.0f GPUs", runs[0].summary->total_gpus);
    fputs(pa && pa->cluster ? ", from " : ", derived from the trace", f);
    if (pa && pa->cluster)
        sim_page_html(f, pa->cluster);
    fputs("</td></tr>\n<tr><td class=\"name\">load</td><td class=\"name\">", f);
    if (pa && pa->load > 0)
        fprintf(f, "%g (the cluster scaled so the trace offers this share of its GPUs)", pa->load);
    else
        fputs("as the cluster is (no --load)", f);
    fputs("</td></tr>\n<tr><td class=\"name\">window</td><td class=\"name\">", f);
    if (pa && (pa->from_s > 0 || pa->until_s >= 0)) {
        fprintf(f, "jobs submitted from %lld s", (long long)pa->from_s);
        if (pa->until_s >= 0)
            fprintf(f, " until %lld s", (long long)pa->until_s);
    } else {
        fputs("the whole trace", f);
    }
    fprintf(f,
            "</td></tr>\n<tr><td class=\"name\">restart penalty</td><td class=\"name\">%lld s"
            "</td></tr>\n<tr><td class=\"name\">policies</td><td class=\"name\">",
            pa ? (long long)pa->restart_penalty_s : 0LL);
    for (size_t r = 0; r < nruns; r++) {
        fputs(r ? ", " : "", f);
        sim_page_html(f, runs[r].summary->policy);
    }
    fputs("</td></tr>\n</table>\n", f);
    if (nruns < 2)
        return;
    fputs("<h2>Conclusions</h2>\n<ul>\n", f);
    for (size_t r = 1; r < nruns; r++) {
        char line[512];
        sim_report_conclusion(line, sizeof(line), runs[0].summary, runs[r].summary);
        fputs("<li>", f);
        sim_page_html(f, line);
        fputs("</li>\n", f);
    }
    fputs("</ul>\n", f);
}

/* Teams down, policies across: each team's share of the useful GPU-time. */
static int put_share_table(FILE *f, const struct sim_report_run *runs, size_t nruns,
                           const struct teams *t)
{
    size_t ncells = t->n * nruns;
    double *share = malloc((ncells ? ncells : 1) * sizeof(*share));
    if (!share)
        return GPO_ENOMEM;
    for (size_t k = 0; k < ncells; k++)
        share[k] = NAN;
    for (size_t r = 0; r < nruns; r++) {
        const struct sim_summary *s = runs[r].summary;
        size_t *map = teams_map(t, s->team_names, s->nteams);
        if (!map) {
            free(share);
            return GPO_ENOMEM;
        }
        for (size_t i = 0; i < s->nteams; i++)
            if (map[i] != SIZE_MAX && s->team_share)
                share[map[i] * nruns + r] = s->team_share[i];
        free(map);
    }
    fputs("<table>\n<tr><th class=\"name\">team</th>", f);
    for (size_t r = 0; r < nruns; r++) {
        fputs("<th>", f);
        sim_page_html(f, runs[r].summary->policy);
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
    for (size_t k = 0; k < t->n; k++) {
        fputs("<tr><td class=\"name\">", f);
        sim_page_html(f, t->names[k]);
        fputs("</td>", f);
        for (size_t r = 0; r < nruns; r++) {
            double x = share[k * nruns + r];
            if (isfinite(x))
                fprintf(f, "<td>%.1f%%</td>", x * 100);
            else
                fputs("<td>-</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
    free(share);
    return 0;
}

struct page {
    const char *title;
    const struct sim_report_params *params;
    const struct sim_report_run *runs;
    size_t nruns;
    const struct teams *t;
};

static int page_data(FILE *f, const void *ctx)
{
    const struct page *pg = ctx;
    return put_data(f, pg->title, pg->runs, pg->nruns, pg->t);
}

static int put_page(FILE *f, const void *ctx)
{
    const struct page *pg = ctx;
    const struct sim_report_run *runs = pg->runs;
    size_t nruns = pg->nruns;
    sim_page_head(f, pg->title);
    fputs("<p class=\"note\">", f);
    if (!nruns)
        fputs("No policy was replayed.", f);
    for (size_t r = 0; r < nruns; r++) {
        fputs(r ? ", " : "Policies replayed on the same trace and cluster: ", f);
        sim_page_html(f, runs[r].summary->policy);
    }
    if (nruns && runs[0].summary->dropped)
        fprintf(f, ". %zu trace jobs were left out (their queues belong to no team)",
                runs[0].summary->dropped);
    fputs(".</p>\n", f);
    put_params(f, pg->params, runs, nruns);
    fputs("<h2>Summary</h2>\n", f);
    put_summary_table(f, runs, nruns);
    fputs("<p class=\"note\">JCT: end - submit of the jobs that ended; wait: the part of it "
          "spent without GPUs; utilization: useful GPU-time between the first and the last "
          "submit. Hover a duration for its seconds.</p>\n"
          "<h2>Share of the useful GPU-time per team</h2>\n",
          f);
    int e = put_share_table(f, runs, nruns, pg->t);
    if (e)
        return e;
    fputs("<h2>GPU utilization over time</h2>\n<div class=\"chart\" id=\"chart-util\"></div>\n"
          "<h2>Queue length over time</h2>\n<div class=\"chart\" id=\"chart-queue\"></div>\n"
          "<p class=\"note\">Long replays are thinned to at most 2000 points per policy: "
          "each point shows the highest value of its stretch of time.</p>\n"
          "<h2>Job completion time CDF</h2>\n<div class=\"chart\" id=\"chart-jct\"></div>\n"
          "<p class=\"note\">Times under 1 s are drawn at 1 s (log scale).</p>\n"
          "<h2>Average queueing delay per team</h2>\n"
          "<div class=\"chart\" id=\"chart-wait\"></div>\n",
          f);
    return sim_page_foot(f, page_data, pg, page_js);
}

int sim_report_write_params(const char *path, const char *title,
                            const struct sim_report_params *params,
                            const struct sim_report_run *runs, size_t nruns, char *err,
                            size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    bool bad = !path || !*path || (nruns && !runs);
    for (size_t r = 0; !bad && r < nruns; r++)
        bad = !runs[r].summary || !runs[r].result;
    if (bad) {
        if (err && errlen)
            snprintf(err, errlen, "cannot write %s: %s", path && *path ? path : "(no path)",
                     strerror(EINVAL));
        return GPO_EINVAL;
    }
    struct teams t = {0};
    if (teams_collect(&t, runs, nruns)) {
        if (err && errlen)
            snprintf(err, errlen, "cannot write %s: %s", path, gpo_strerror(GPO_ENOMEM));
        return GPO_ENOMEM;
    }
    struct page pg = {title ? title : "", params, runs, nruns, &t};
    int rc = sim_page_write(path, put_page, &pg, err, errlen);
    free(t.names);
    return rc;
}

int sim_report_write(const char *path, const char *title, const struct sim_report_run *runs,
                     size_t nruns, char *err, size_t errlen)
{
    return sim_report_write_params(path, title, NULL, runs, nruns, err, errlen);
}

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "core/explain.h"
#include "sim/output.h"
#include "base/banned.h"

/* Seconds printed as 1d 02:03:04 (or 02:03:04 under a day) after the figure. */
static void print_duration(FILE *out, double s)
{
    long long t = (long long)llround(s);
    long long d = t / 86400, h = t % 86400 / 3600, m = t % 3600 / 60, sec = t % 60;
    char buf[64];
    if (d)
        snprintf(buf, sizeof(buf), "%lldd%02lld:%02lld:%02lld", d, h, m, sec);
    else
        snprintf(buf, sizeof(buf), "%02lld:%02lld:%02lld", h, m, sec);
    fprintf(out, " %16s", buf);
}

enum col_kind { COL_COUNT, COL_SECONDS, COL_RATIO, COL_WHOLE };

struct col {
    const char *label;
    size_t offset; /* of a double, or of a size_t / uint64_t for COL_COUNT */
    enum col_kind kind;
    bool u64;
};

#define COL_D(label_, kind_, field)                                                                \
    {                                                                                              \
        .label = label_, .offset = offsetof(struct sim_summary, field), .kind = kind_              \
    }
#define COL_Z(label_, field)                                                                       \
    {                                                                                              \
        .label = label_, .offset = offsetof(struct sim_summary, field), .kind = COL_COUNT          \
    }
#define COL_U(label_, field)                                                                       \
    {                                                                                              \
        .label = label_, .offset = offsetof(struct sim_summary, field), .kind = COL_COUNT,         \
        .u64 = true                                                                                \
    }

static const struct col cols[] = {
    COL_D("cluster GPUs", COL_WHOLE, total_gpus),
    COL_Z("jobs", jobs),
    COL_Z("unschedulable", unschedulable),
    COL_D("makespan", COL_SECONDS, makespan_s),
    COL_D("JCT average", COL_SECONDS, jct_avg_s),
    COL_D("JCT p50", COL_SECONDS, jct_p50_s),
    COL_D("JCT p95", COL_SECONDS, jct_p95_s),
    COL_D("JCT p99", COL_SECONDS, jct_p99_s),
    COL_D("wait average", COL_SECONDS, wait_avg_s),
    COL_D("wait p99", COL_SECONDS, wait_p99_s),
    COL_D("GPU utilization", COL_RATIO, gpu_utilization),
    COL_D("fragmented GPUs", COL_RATIO, fragmented_gpus),
    COL_D("Jain fairness", COL_RATIO, jain_fairness),
    COL_U("preemptions", preemptions),
};

/* A column's member of s, read through memcpy: the table knows its offset only. */
static double col_double(const struct sim_summary *s, const struct col *c)
{
    double v;
    memcpy(&v, (const char *)s + c->offset, sizeof(v));
    return v;
}

static unsigned long long col_count(const struct sim_summary *s, const struct col *c)
{
    if (c->u64) {
        uint64_t v;
        memcpy(&v, (const char *)s + c->offset, sizeof(v));
        return v;
    }
    size_t v;
    memcpy(&v, (const char *)s + c->offset, sizeof(v));
    return v;
}

void sim_output_table(FILE *out, const struct sim_summary *s, size_t n)
{
    fprintf(out, "%-18s", "");
    for (size_t p = 0; p < n; p++)
        fprintf(out, " %16s", s[p].policy);
    fputc('\n', out);
    for (size_t c = 0; c < sizeof(cols) / sizeof(cols[0]); c++) {
        fprintf(out, "%-18s", cols[c].label);
        for (size_t p = 0; p < n; p++) {
            if (cols[c].kind == COL_COUNT)
                fprintf(out, " %16llu", col_count(&s[p], &cols[c]));
            else if (cols[c].kind == COL_WHOLE)
                fprintf(out, " %16.0f", col_double(&s[p], &cols[c]));
            else if (cols[c].kind == COL_RATIO)
                fprintf(out, " %16.3f", col_double(&s[p], &cols[c]));
            else
                print_duration(out, col_double(&s[p], &cols[c]));
        }
        fputc('\n', out);
    }
    fprintf(out, "(times as [Nd]HH:MM:SS; JCT and waits over the %zu job(s) that ended",
            s[0].ended);
    fprintf(out, n > 1 ? " under %s)\n" : ")\n", s[0].policy);
    for (size_t p = 0; p < n; p++) {
        if (s[p].dropped && p == 0)
            fprintf(out, "\n%zu trace job(s) dropped: their queue maps to no team\n", s[p].dropped);
        if (!s[p].unschedulable)
            continue;
        fprintf(out, "\n%s: %zu unschedulable job(s):\n", s[p].policy, s[p].unschedulable);
        for (int k = 0; k < SCHED_REASON_COUNT; k++) {
            if (s[p].reasons[k])
                fprintf(out, "  %8zu  %s\n", s[p].reasons[k], explain_code(k));
        }
    }
    fprintf(out, "\nteam share of useful GPU-time (first to last submit)\n");
    for (size_t t = 0; t < s[0].nteams; t++) {
        fprintf(out, "%-18s", s[0].team_names[t]);
        for (size_t p = 0; p < n; p++)
            fprintf(out, " %15.1f%%", 100.0 * s[p].team_share[t]);
        fputc('\n', out);
    }
}

json_t *sim_output_rounded(double v, int digits)
{
    double f = pow(10, digits);
    return json_real(isfinite(v) ? round(v * f) / f : 0);
}

json_t *sim_output_summary_json(const struct sim_summary *s)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = 0;
    bad |= json_object_set_new(o, "policy", json_string(s->policy));
    bad |= json_object_set_new(o, "jobs", json_integer((json_int_t)s->jobs));
    bad |= json_object_set_new(o, "unschedulable", json_integer((json_int_t)s->unschedulable));
    bad |= json_object_set_new(o, "makespan_s", sim_output_rounded(s->makespan_s, 1));
    bad |= json_object_set_new(o, "jct_avg_s", sim_output_rounded(s->jct_avg_s, 1));
    bad |= json_object_set_new(o, "jct_p50_s", sim_output_rounded(s->jct_p50_s, 1));
    bad |= json_object_set_new(o, "jct_p95_s", sim_output_rounded(s->jct_p95_s, 1));
    bad |= json_object_set_new(o, "jct_p99_s", sim_output_rounded(s->jct_p99_s, 1));
    bad |= json_object_set_new(o, "wait_avg_s", sim_output_rounded(s->wait_avg_s, 1));
    bad |= json_object_set_new(o, "wait_p99_s", sim_output_rounded(s->wait_p99_s, 1));
    bad |= json_object_set_new(o, "gpu_utilization", sim_output_rounded(s->gpu_utilization, 4));
    bad |= json_object_set_new(o, "jain_fairness", sim_output_rounded(s->jain_fairness, 4));
    bad |= json_object_set_new(o, "preemptions", json_integer((json_int_t)s->preemptions));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int sim_output_json(FILE *out, const struct sim_summary *s, size_t n)
{
    json_t *root = n == 1 ? sim_output_summary_json(&s[0]) : json_array();
    for (size_t p = 0; root && n > 1 && p < n; p++) {
        if (json_array_append_new(root, sim_output_summary_json(&s[p]))) {
            json_decref(root);
            root = NULL;
        }
    }
    return sim_output_json_print(out, root);
}

int sim_output_json_print(FILE *out, json_t *root)
{
    if (!root)
        return GPO_ENOMEM;
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    json_decref(root);
    if (!text)
        return GPO_ENOMEM;
    fprintf(out, "%s\n", text);
    free(text);
    return 0;
}

/* A CSV field, quoted when it holds a comma, a quote or a line break. */
static void csv_field(FILE *out, const char *v)
{
    if (!strpbrk(v, ",\"\r\n")) {
        fputs(v, out);
        return;
    }
    fputc('"', out);
    for (; *v; v++) {
        if (*v == '"')
            fputc('"', out);
        fputc(*v, out);
    }
    fputc('"', out);
}

int sim_output_jobs(FILE *out, const char *path, const struct sim_trace *t,
                    const struct sim_result *r, char *err, size_t errlen)
{
    fprintf(out, "job_id,team,submit_s,start_s,end_s,wait_s,gpus,placement,preemptions,status\n");
    for (size_t i = 0; i < r->njobs; i++) {
        const struct sim_job_result *j = &r->jobs[i];
        const char *status = j->unschedulable ? explain_code(j->reason)
                             : j->end_s >= 0  ? "completed"
                                              : "never-ended";
        long long wait = j->end_s >= 0 ? j->end_s - j->submit_s - j->running_s : -1;
        csv_field(out, t->jobs[j->trace_index].id);
        fputc(',', out);
        csv_field(out, r->team_names[j->team]);
        fprintf(out, ",%lld,%lld,%lld,%lld,", (long long)j->submit_s, (long long)j->first_start_s,
                (long long)j->end_s, wait < 0 && j->end_s >= 0 ? 0LL : wait);
        if (j->gpu_milli % 1000)
            fprintf(out, "%.3f", (double)j->gpu_milli / 1000.0);
        else
            fprintf(out, "%lld", (long long)(j->gpu_milli / 1000));
        fputc(',', out);
        csv_field(out, j->placement ? j->placement : "");
        fprintf(out, ",%u,%s\n", j->preemptions, status);
    }
    if (fflush(out) || ferror(out)) {
        snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
        return GPO_EINVAL;
    }
    return 0;
}

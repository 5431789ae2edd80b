#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "sim/command.h"
#include "sim/engine.h"
#include "sim/mig_cmd.h"
#include "sim/output.h"
#include "sim/report.h"
#include "sim/serve_cmd.h"
#include "sim/spec.h"
#include "sim/stats.h"
#include "sim/trace.h"
#include "util/opts.h"
#include "base/banned.h"

#define MAX_POLICIES 16

struct args {
    const char *trace, *cluster, *jobs_out, *report, *policy;
    struct sim_policy policies[MAX_POLICIES]; /* presets and policy files, in order */
    size_t npolicies;
    double load; /* 0: as the spec says */
    bool json, skip_bad, no_migrate, help;
    int64_t restart_penalty_s, from_s, until_s;
};

#define SECONDS_FROM_0(name_, member)                                                              \
    {                                                                                              \
        .name = name_, .type = OPTS_INT, .min = 0, .max = INT64_MAX,                               \
        .expect = "a whole number of seconds >= 0", .offset = offsetof(struct args, member)        \
    }

static const struct opts_opt flags[] = {
    {.name = "trace", .type = OPTS_STRING, .offset = offsetof(struct args, trace)},
    {.name = "cluster", .type = OPTS_STRING, .offset = offsetof(struct args, cluster)},
    {.name = "policy", .type = OPTS_STRING, .offset = offsetof(struct args, policy)},
    {.name = "load",
     .type = OPTS_DOUBLE,
     .flags = OPTS_OPEN_MIN,
     .dmin = 0,
     .dmax = 100,
     .expect = "a number in (0, 100]",
     .offset = offsetof(struct args, load)},
    {.name = "json", .type = OPTS_FLAG, .offset = offsetof(struct args, json)},
    {.name = "jobs-out", .type = OPTS_STRING, .offset = offsetof(struct args, jobs_out)},
    {.name = "report", .type = OPTS_STRING, .offset = offsetof(struct args, report)},
    SECONDS_FROM_0("restart-penalty", restart_penalty_s),
    SECONDS_FROM_0("from", from_s),
    SECONDS_FROM_0("until", until_s),
    {.name = "skip-bad", .type = OPTS_FLAG, .offset = offsetof(struct args, skip_bad)},
    {.name = "no-migrate", .type = OPTS_FLAG, .offset = offsetof(struct args, no_migrate)},
    {.name = "help", .short_name = 'h', .type = OPTS_HELP, .offset = offsetof(struct args, help)},
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gpuorch sim --trace FILE [--cluster SPEC] [--policy P[,P...]] [--load X]\n"
            "                   [--json] [--jobs-out FILE] [--report FILE.html]\n"
            "                   [--restart-penalty S] [--from S] [--until S] [--skip-bad]\n"
            "                   [--no-migrate]\n"
            "\n"
            "Replays a GPU-cluster job trace through gpuorch's scheduler core, the same code\n"
            "the controller runs, and reports job completion times, queueing delays, GPU\n"
            "utilization and fairness for each policy.\n"
            "\n"
            "  --trace FILE          normalized trace CSV, plain or gzip\n"
            "                        (job_id,submit_time_s,duration_s,num_gpus,user,queue,...)\n"
            "  --cluster SPEC        YAML or JSON node pools and teams (docs/simulator.md);\n"
            "                        default: derived from the trace\n"
            "  --policy P[,P...]     policies to compare, in this order (default: default):\n"
            "                        ");
    char names[256];
    sim_policy_names(names, sizeof(names));
    fprintf(out, "%s\n", names);
    fprintf(out,
            "                        sjf and srtf are oracles that know true durations;\n"
            "                        a P with a '/' or '.' is a policy file (YAML or JSON)\n"
            "                        that changes any setting: 'gpuorch policy las > p.yaml'\n"
            "                        writes one to edit (docs/simulator.md)\n"
            "  --load X              scale the cluster so the trace's offered load is X of\n"
            "                        its GPUs (0 < X <= 100)\n"
            "  --json                print one JSON object per policy (an array for several)\n"
            "  --jobs-out FILE       per-job CSV; with several policies, FILE gets the policy\n"
            "                        name before its extension (jobs.fifo.csv)\n"
            "  --report FILE.html    a self-contained HTML page with charts\n"
            "  --restart-penalty S   seconds a preempted job loses at each restart (default 0)\n"
            "  --from S, --until S   replay only jobs submitted in [S, until) (trace seconds)\n"
            "  --skip-bad            skip and count malformed trace rows instead of failing\n"
            "  --no-migrate          never move running jobs to gather free GPUs onto one\n"
            "                        node (policies with preemption do by default)\n"
            "\n");
    sim_serve_usage(out);
    fprintf(out, "\n");
    sim_mig_usage(out);
    fprintf(out, "\nExit codes: 0 done, 1 failed, 2 usage.\n");
}

static int bad_value(const char *flag, const char *value, const char *expected)
{
    fprintf(stderr, "gpuorch sim: %s: expected %s, got '%s'\n", flag, expected, value);
    return 2;
}

static int parse_policies(struct args *a, const char *v)
{
    char buf[4096];
    if (strlen(v) >= sizeof(buf))
        return bad_value("--policy", v, "a shorter list");
    memcpy(buf, v, strlen(v) + 1);
    char *save = NULL;
    a->npolicies = 0;
    for (char *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        if (a->npolicies == MAX_POLICIES)
            return bad_value("--policy", v, "at most 16 policies");
        struct sim_policy *pol = &a->policies[a->npolicies];
        char err[768]; /* a preset's name, or a policy file's path */
        if (sim_policy_resolve(p, pol, err, sizeof(err)) != 0) {
            fprintf(stderr, "gpuorch sim: --policy: %s\n", err);
            return 2;
        }
        for (size_t k = 0; k < a->npolicies; k++) {
            if (strcmp(a->policies[k].name, pol->name) == 0) {
                fprintf(stderr,
                        "gpuorch sim: --policy: '%s' is given twice (a policy file's 'name' "
                        "tells it apart)\n",
                        pol->name);
                return 2;
            }
        }
        a->npolicies++;
    }
    if (!a->npolicies)
        return bad_value("--policy", v, "a comma-separated list of policies");
    return 0;
}

/* The flags in order: each value checked as it comes (--policy's files
 * read), the first problem printed. */
int sim_command_next_flag(struct opts *p, void *args, const struct opts_opt **o, const char **v)
{
    char err[256];
    *o = NULL;
    *v = NULL;
    int k = opts_next(p, o, v, err, sizeof(err));
    if (k == OPTS_END)
        return 0;
    if (k != OPTS_OPTION) {
        fprintf(stderr, "gpuorch sim: unknown argument '%s' (or a flag without its value)\n",
                p->word);
        return 2;
    }
    if (opts_store(*o, *v, args, err, sizeof(err)) != 0) {
        fprintf(stderr, "gpuorch sim: %s\n", err);
        return 2;
    }
    return 1;
}

static int parse_args(int argc, char **argv, struct args *a)
{
    struct opts p;
    *a = (struct args){.until_s = -1};
    opts_init(&p, argc - 1, argv + 1, OPTS_TABLE(flags), 0);
    for (;;) {
        const struct opts_opt *o;
        const char *v;
        int k = sim_command_next_flag(&p, a, &o, &v);
        if (k != 1) {
            if (k)
                return k;
            break;
        }
        int e = o->offset == offsetof(struct args, policy) ? parse_policies(a, v) : 0;
        if (e)
            return e;
    }
    if (!a->trace) {
        fprintf(stderr, "gpuorch sim: --trace FILE is required (or --serve REQUESTS.csv for a "
                        "serving replay)\n");
        return 2;
    }
    if (!a->npolicies)
        a->npolicies = sim_policy_find("default", &a->policies[0]) == 0;
    return sim_command_check_window(a->from_s, a->until_s);
}

int sim_command_check_window(int64_t from_s, int64_t until_s)
{
    if (until_s >= 0 && from_s >= until_s) {
        fprintf(stderr, "gpuorch sim: --until: expected a time after --from (%lld), got %lld\n",
                (long long)from_s, (long long)until_s);
        return 2;
    }
    return 0;
}

bool sim_command_has_flag(int argc, char **argv, const char *name)
{
    size_t len = strlen(name);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return false;
        if (strncmp(argv[i], "--", 2) == 0 && strncmp(argv[i] + 2, name, len) == 0 &&
            (argv[i][2 + len] == '\0' || argv[i][2 + len] == '='))
            return true;
    }
    return false;
}

/* --load: see sim_spec_set_load. */
static int apply_load(struct sim_spec *spec, const struct sim_trace *t, double load)
{
    double factor = 0;
    int e = sim_spec_set_load(spec, t, load, &factor);
    if (e == GPO_EINVAL) {
        fprintf(stderr, "gpuorch sim: --load: the trace offers no load to scale to\n");
        return 2;
    }
    if (e) {
        fprintf(stderr, "gpuorch sim: --load %g: cannot scale the cluster: %s\n", load,
                gpo_strerror(e));
        return 2;
    }
    return 0;
}

/* FILE.csv -> FILE.POLICY.csv, when several policies share --jobs-out. */
static void jobs_path(char *buf, size_t len, const char *path, const char *policy, bool several)
{
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!several)
        snprintf(buf, len, "%s", path);
    else if (dot && (!slash || dot > slash))
        snprintf(buf, len, "%.*s.%s%s", (int)(dot - path), path, policy, dot);
    else
        snprintf(buf, len, "%s.%s", path, policy);
}

static int write_jobs(const struct args *a, const char *policy, const struct sim_trace *t,
                      const struct sim_result *r)
{
    char path[4096], err[4608];
    jobs_path(path, sizeof(path), a->jobs_out, policy, a->npolicies > 1);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "gpuorch sim: --jobs-out: %s: %s\n", path, strerror(errno));
        return 1;
    }
    int e = sim_output_jobs(f, path, t, r, err, sizeof(err));
    if (fclose(f) && !e) {
        snprintf(err, sizeof(err), "%s: %s", path, strerror(errno));
        e = GPO_EINVAL;
    }
    if (e)
        fprintf(stderr, "gpuorch sim: --jobs-out: %s\n", err);
    return e ? 1 : 0;
}

struct runs {
    struct sim_result results[MAX_POLICIES];
    struct sim_summary summaries[MAX_POLICIES];
    size_t n;
};

static int replay_all(const struct args *a, const struct sim_trace *t, const struct sim_spec *s,
                      struct runs *runs)
{
    struct sim_opts opts = {.restart_penalty_s = a->restart_penalty_s};
    for (size_t p = 0; p < a->npolicies; p++) {
        struct sim_policy pol = a->policies[p];
        char err[512] = "";
        if (a->no_migrate)
            pol.core.migrate = false;
        struct sim_result *r = &runs->results[p];
        sim_result_init(r);
        int e = sim_run(t, s, &pol, &opts, r, err, sizeof(err));
        if (!e)
            e = sim_summary_compute(r, a->policies[p].name, &runs->summaries[p]); /* lives on */
        if (e) {
            fprintf(stderr, "gpuorch sim: %s: %s\n", pol.name, *err ? err : gpo_strerror(e));
            sim_result_release(r);
            return 1;
        }
        runs->n++;
        if (a->jobs_out && write_jobs(a, pol.name, t, r))
            return 1;
    }
    return 0;
}

static int report(const struct args *a, struct runs *runs)
{
    struct sim_report_run rr[MAX_POLICIES];
    for (size_t p = 0; p < runs->n; p++)
        rr[p] = (struct sim_report_run){&runs->summaries[p], &runs->results[p]};
    char err[512] = "";
    struct sim_report_params params = {.cluster = a->cluster,
                                       .load = a->load,
                                       .from_s = a->from_s,
                                       .until_s = a->until_s,
                                       .restart_penalty_s = a->restart_penalty_s};
    int e = sim_report_write_params(a->report, a->trace, &params, rr, runs->n, err, sizeof(err));
    if (e)
        fprintf(stderr, "gpuorch sim: --report: %s\n", *err ? err : gpo_strerror(e));
    return e ? 1 : 0;
}

static int load_inputs(const struct args *a, struct sim_trace *t, struct sim_spec *s)
{
    char err[512] = "";
    struct sim_trace_opts to = {
        .skip_bad = a->skip_bad, .from_s = a->from_s, .until_s = a->until_s};
    if (sim_trace_load(t, a->trace, &to, err, sizeof(err))) {
        fprintf(stderr, "gpuorch sim: %s\n", err);
        return 1;
    }
    if (t->nskipped)
        fprintf(stderr, "gpuorch sim: skipped %zu bad row(s); the first: %s\n", t->nskipped,
                t->first_skip);
    int e = a->cluster ? sim_spec_load(s, a->cluster, err, sizeof(err))
                       : sim_spec_from_trace(s, t, err, sizeof(err));
    if (e) {
        fprintf(stderr, "gpuorch sim: %s%s\n", a->cluster ? "--cluster: " : "", err);
        return 2;
    }
    return a->load > 0 ? apply_load(s, t, a->load) : 0;
}

int sim_command(int argc, char **argv)
{
    if (opts_help_asked(argc - 1, argv + 1, OPTS_TABLE(flags))) { /* wherever it is */
        usage(stdout);
        return 0;
    }
    if (sim_serve_wanted(argc, argv))
        return sim_serve_command(argc, argv);
    if (sim_mig_wanted(argc, argv))
        return sim_mig_command(argc, argv);
    struct args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    struct sim_trace t;
    struct sim_spec s;
    struct runs *runs = calloc(1, sizeof(*runs));
    sim_trace_init(&t);
    sim_spec_init(&s);
    if (!runs) {
        fprintf(stderr, "gpuorch sim: out of memory\n");
        return 1;
    }
    rc = load_inputs(&a, &t, &s);
    if (!rc)
        rc = replay_all(&a, &t, &s, runs);
    if (!rc && a.json && sim_output_json(stdout, runs->summaries, runs->n)) {
        fprintf(stderr, "gpuorch sim: out of memory\n");
        rc = 1;
    }
    if (!rc && !a.json)
        sim_output_table(stdout, runs->summaries, runs->n);
    if (!rc && a.report)
        rc = report(&a, runs);
    if (!rc && (fflush(stdout) || ferror(stdout))) {
        fprintf(stderr, "gpuorch sim: writing the output failed\n");
        rc = 1;
    }
    for (size_t p = 0; p < runs->n; p++) {
        sim_summary_release(&runs->summaries[p]);
        sim_result_release(&runs->results[p]);
    }
    free(runs);
    sim_spec_release(&s);
    sim_trace_release(&t);
    return rc;
}

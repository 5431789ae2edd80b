/*
 * serve_cmd.c - `gpuorch sim --serve` (serve_cmd.h).
 *
 * Each --serve file pairs with the --service spec at the same place in its
 * list (one service per request trace). Every serving policy replays every
 * service; runs are kept [policy * nservices + service], so the outputs list
 * them by policy, then service. With --trace, serve_shared.c runs serving and
 * training on one cluster (or split with --split N).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "sim/command.h"
#include "sim/engine.h"
#include "sim/output.h"
#include "sim/policy.h"
#include "sim/report.h"
#include "sim/reqtrace.h"
#include "sim/serve.h"
#include "sim/serve_cmd.h"
#include "sim/serve_output.h"
#include "sim/serve_policy.h"
#include "sim/serve_report.h"
#include "sim/serve_shared.h"
#include "sim/serve_spec.h"
#include "sim/spec.h"
#include "sim/stats.h"
#include "sim/trace.h"
#include "util/opts.h"
#include "base/banned.h"

#define MAX_SERVICES 16
#define MAX_POLICIES 16
#define LIST_MAX     8192

struct args {
    const char *serve, *service, *trace, *cluster, *job_policy, *report;
    // cppcheck-suppress unusedStructMember ; util/opts writes it through its offset
    const char *policy;
    const char *serve_files[MAX_SERVICES], *spec_files[MAX_SERVICES];
    size_t nserve, nspec;
    struct sim_serve_policy policies[MAX_POLICIES];
    size_t npolicies;
    double split_gpus;
    bool json, skip_bad;
    // cppcheck-suppress unusedStructMember ; util/opts writes it through its offset
    bool help;
    int64_t restart_penalty_s;
    int64_t from_s, until_s;
    char lists[2][LIST_MAX]; /* the --serve and --service lists, split in place */
};

static const struct opts_opt flags[] = {
    {.name = "serve", .type = OPTS_STRING, .offset = offsetof(struct args, serve)},
    {.name = "service", .type = OPTS_STRING, .offset = offsetof(struct args, service)},
    {.name = "policy", .type = OPTS_STRING, .offset = offsetof(struct args, policy)},
    {.name = "trace", .type = OPTS_STRING, .offset = offsetof(struct args, trace)},
    {.name = "cluster", .type = OPTS_STRING, .offset = offsetof(struct args, cluster)},
    {.name = "job-policy", .type = OPTS_STRING, .offset = offsetof(struct args, job_policy)},
    {.name = "split",
     .type = OPTS_DOUBLE,
     .flags = OPTS_OPEN_MIN,
     .dmin = 0,
     .dmax = 1e6,
     .expect = "a number of GPUs > 0",
     .offset = offsetof(struct args, split_gpus)},
    {.name = "json", .type = OPTS_FLAG, .offset = offsetof(struct args, json)},
    {.name = "report", .type = OPTS_STRING, .offset = offsetof(struct args, report)},
    {.name = "restart-penalty",
     .type = OPTS_INT,
     .min = 0,
     .max = INT64_MAX,
     .expect = "a whole number of seconds >= 0",
     .offset = offsetof(struct args, restart_penalty_s)},
    {.name = "from",
     .type = OPTS_INT,
     .min = 0,
     .max = SIM_REQTRACE_MAX_MS / 1000,
     .expect = "a whole number of seconds >= 0",
     .offset = offsetof(struct args, from_s)},
    {.name = "until",
     .type = OPTS_INT,
     .min = 0,
     .max = SIM_REQTRACE_MAX_MS / 1000,
     .expect = "a whole number of seconds >= 0",
     .offset = offsetof(struct args, until_s)},
    {.name = "skip-bad", .type = OPTS_FLAG, .offset = offsetof(struct args, skip_bad)},
    {.name = "help", .short_name = 'h', .type = OPTS_HELP, .offset = offsetof(struct args, help)},
};

void sim_serve_usage(FILE *out)
{
    char names[256];
    sim_serve_policy_names(names, sizeof(names));
    fprintf(out,
            "usage: gpuorch sim --serve REQUESTS.csv[,...] --service SPEC[,...]\n"
            "                   [--policy P[,P...]] [--json] [--report FILE.html]\n"
            "                   [--trace JOBS.csv [--cluster SPEC] [--job-policy P] [--split N]\n"
            "                    [--restart-penalty S]]\n"
            "                   [--from S] [--until S] [--skip-bad]\n"
            "\n"
            "Serving: replays request traces through each service's autoscaler (the\n"
            "controller's, src/core/autoscale) and a model of its replicas, and reports SLO\n"
            "attainment, latencies, cold starts and GPU-hours for each serving policy.\n"
            "\n"
            "  --serve FILES         request traces, plain or gzip, one per service\n"
            "                        (request_id,arrival_ms,input_tokens,output_tokens)\n"
            "  --service SPECS       the services, one YAML per --serve file, in the same\n"
            "                        order: 'gpuorch service apply -f' files plus a 'simulate:'\n"
            "                        section (the replica model and the SLO, docs/simulator.md)\n"
            "  --policy P[,P...]     serving policies to compare (default: default):\n"
            "                        %s\n"
            "                        (static:N: a fixed fleet of N replicas, 1 to 1000)\n"
            "  --json                one JSON object per service and policy (an array for\n"
            "                        several)\n"
            "  --report FILE.html    a self-contained HTML page: replicas and request rate\n"
            "                        over time, latency CDFs, per policy side by side\n"
            "  --trace JOBS.csv      a job trace on the same cluster as serving: one quota,\n"
            "                        the same preemption rules; its job table is printed too\n"
            "  --cluster SPEC        with --trace: the cluster (default: derived from it)\n"
            "  --job-policy P        with --trace: training's policy (default: default)\n"
            "  --split N             with --trace: reserve N GPUs for serving instead\n"
            "  --restart-penalty S   with --trace: seconds a preempted job loses per restart\n"
            "  --from S, --until S   replay only what arrives in [S, until) (trace seconds);\n"
            "                        with --trace, the jobs' window, the requests from S on\n"
            "  --skip-bad            skip and count malformed rows instead of failing\n",
            names);
}

bool sim_serve_wanted(int argc, char **argv)
{
    return sim_command_has_flag(argc, argv, "serve");
}

static int bad_value(const char *flag, const char *value, const char *expected)
{
    fprintf(stderr, "gpuorch sim: %s: expected %s, got '%s'\n", flag, expected, value);
    return 2;
}

/* Splits a comma-separated list of files into v (in place, in buf). */
static int split_files(const char *flag, const char *v, char *buf, const char **out, size_t *n)
{
    if (strlen(v) >= LIST_MAX)
        return bad_value(flag, v, "a shorter list");
    memcpy(buf, v, strlen(v) + 1);
    *n = 0;
    char *save = NULL;
    for (char *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_SERVICES)
            return bad_value(flag, v, "at most 16 files");
        out[(*n)++] = p;
    }
    return *n ? 0 : bad_value(flag, v, "a comma-separated list of files");
}

static int parse_policies(struct args *a, const char *v)
{
    char buf[1024], names[256];
    if (strlen(v) >= sizeof(buf))
        return bad_value("--policy", v, "a shorter list");
    memcpy(buf, v, strlen(v) + 1);
    sim_serve_policy_names(names, sizeof(names));
    char *save = NULL;
    a->npolicies = 0;
    for (char *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        struct sim_serve_policy pol;
        int found = sim_serve_policy_find(p, &pol);
        if (found == GPO_ERANGE) {
            fprintf(stderr,
                    "gpuorch sim: --policy: %s: expected static:N with N a whole number from 1 "
                    "to %d\n",
                    p, AUTOSCALE_REPLICAS_MAX);
            return 2;
        }
        if (found != 0) {
            fprintf(stderr, "gpuorch sim: --policy: expected a serving policy (%s), got '%s'\n",
                    names, p);
            return 2;
        }
        for (size_t k = 0; k < a->npolicies; k++) {
            if (strcmp(a->policies[k].name, pol.name) == 0) {
                fprintf(stderr, "gpuorch sim: --policy: '%s' is given twice\n", pol.name);
                return 2;
            }
        }
        if (a->npolicies == MAX_POLICIES)
            return bad_value("--policy", v, "at most 16 policies");
        a->policies[a->npolicies++] = pol;
    }
    return a->npolicies ? 0 : bad_value("--policy", v, "a comma-separated list of policies");
}

/* What the flags do not say alone: pairs, and flags that need --trace. */
static int check_args(struct args *a)
{
    if (!a->service) {
        fprintf(stderr, "gpuorch sim: --serve needs --service SPEC[,...] (one spec per request "
                        "trace)\n");
        return 2;
    }
    if (a->nserve != a->nspec) {
        fprintf(stderr,
                "gpuorch sim: --service: expected one spec per --serve file (%zu), got %zu\n",
                a->nserve, a->nspec);
        return 2;
    }
    const char *needs_trace = a->cluster             ? "--cluster"
                              : a->job_policy        ? "--job-policy"
                              : a->split_gpus        ? "--split"
                              : a->restart_penalty_s ? "--restart-penalty"
                                                     : NULL;
    if (!a->trace && needs_trace) {
        fprintf(stderr,
                "gpuorch sim: %s: only with --trace JOBS.csv (a job trace to share the "
                "cluster with)\n",
                needs_trace);
        return 2;
    }
    if (a->until_s > 0 && a->from_s >= a->until_s) {
        fprintf(stderr, "gpuorch sim: --until: expected a time after --from (%lld), got %lld\n",
                (long long)a->from_s, (long long)a->until_s);
        return 2;
    }
    if (!a->npolicies)
        a->npolicies = sim_serve_policy_find("default", &a->policies[0]) == 0;
    return 0;
}

static int parse_args(int argc, char **argv, struct args *a)
{
    struct opts p;
    memset(a, 0, sizeof(*a));
    a->until_s = -1;
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
        int e = 0;
        if (o->offset == offsetof(struct args, serve))
            e = split_files("--serve", v, a->lists[0], a->serve_files, &a->nserve);
        else if (o->offset == offsetof(struct args, service))
            e = split_files("--service", v, a->lists[1], a->spec_files, &a->nspec);
        else if (o->offset == offsetof(struct args, policy))
            e = parse_policies(a, v);
        if (e)
            return e;
    }
    return check_args(a);
}

/* Everything one command holds. */
struct state {
    struct sim_reqtrace traces[MAX_SERVICES];
    struct sim_serve_service services[MAX_SERVICES];
    size_t nservices;
    struct sim_serve_result *results; /* npolicies * nservices */
    struct sim_serve_summary *summaries;
    size_t nruns; /* results initialised */
    /* with --trace */
    struct sim_trace jobs;
    struct sim_spec spec;
    struct sim_policy job_policy;
    struct sim_result *job_results; /* npolicies */
    struct sim_summary *job_summaries;
    size_t njob_runs, njob_summaries;
    char job_labels[MAX_POLICIES][SIM_POLICY_NAME_MAX + 40];
#ifdef GPUORCH_SIM_SERVE_SHARED
    struct sim_serve_shared_stat shared[MAX_POLICIES];
#endif
};

static int load_services(const struct args *a, struct state *st)
{
    char err[1024] = "";
    /* With a job trace the window is the jobs' (the requests' time 0 falls at
     * --from, serve_shared.h); alone, the requests'. */
    bool window = !a->trace;
    struct sim_reqtrace_opts ro = {.skip_bad = a->skip_bad,
                                   .from_ms = window ? a->from_s * 1000 : 0,
                                   .until_ms = window && a->until_s >= 0 ? a->until_s * 1000 : -1};
    for (size_t s = 0; s < a->nserve; s++) {
        struct sim_serve_service *svc = &st->services[s];
        int e = sim_serve_spec_load(a->spec_files[s], svc, err, sizeof(err));
        if (e) {
            fprintf(stderr, "gpuorch sim: --service: %s\n", err);
            return e == GPO_ENOMEM ? 1 : 2;
        }
        for (size_t k = 0; k < s; k++) {
            if (strcmp(st->services[k].name, svc->name) == 0) {
                fprintf(stderr, "gpuorch sim: --service: %s: a second service named '%s' (%s)\n",
                        a->spec_files[s], svc->name, a->spec_files[k]);
                return 2;
            }
        }
        st->nservices = s + 1;
        if (sim_reqtrace_load(&st->traces[s], a->serve_files[s], &ro, err, sizeof(err))) {
            fprintf(stderr, "gpuorch sim: --serve: %s\n", err);
            return 1;
        }
        if (!st->traces[s].n)
            fprintf(stderr, "gpuorch sim: %s: no request to replay (%zu outside --from/--until)\n",
                    a->serve_files[s], st->traces[s].nfiltered);
        if (st->traces[s].nskipped)
            fprintf(stderr, "gpuorch sim: %s: skipped %zu bad row(s); the first: %s\n",
                    a->serve_files[s], st->traces[s].nskipped, st->traces[s].first_skip);
    }
    return 0;
}

static int load_jobs(const struct args *a, struct state *st)
{
    char err[1024] = "";
    struct sim_trace_opts to = {
        .skip_bad = a->skip_bad, .from_s = a->from_s, .until_s = a->until_s};
    const char *jp = a->job_policy ? a->job_policy : "default";
    if (sim_policy_resolve(jp, &st->job_policy, err, sizeof(err)) != 0) {
        fprintf(stderr, "gpuorch sim: --job-policy: %s\n", err);
        return 2;
    }
    if (sim_trace_load(&st->jobs, a->trace, &to, err, sizeof(err))) {
        fprintf(stderr, "gpuorch sim: %s\n", err);
        return 1;
    }
    if (st->jobs.nskipped)
        fprintf(stderr, "gpuorch sim: skipped %zu bad row(s); the first: %s\n", st->jobs.nskipped,
                st->jobs.first_skip);
    int e = a->cluster ? sim_spec_load(&st->spec, a->cluster, err, sizeof(err))
                       : sim_spec_from_trace(&st->spec, &st->jobs, err, sizeof(err));
    if (e) {
        fprintf(stderr, "gpuorch sim: %s%s\n", a->cluster ? "--cluster: " : "", err);
        return 2;
    }
    return 0;
}

static int alloc_runs(const struct args *a, struct state *st)
{
    size_t n = a->npolicies * st->nservices;
    st->results = calloc(n, sizeof(*st->results));
    st->summaries = calloc(n, sizeof(*st->summaries));
    if (a->trace) {
        st->job_results = calloc(a->npolicies, sizeof(*st->job_results));
        st->job_summaries = calloc(a->npolicies, sizeof(*st->job_summaries));
    }
    if (!st->results || !st->summaries || (a->trace && (!st->job_results || !st->job_summaries))) {
        fprintf(stderr, "gpuorch sim: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        sim_serve_result_init(&st->results[i]);
    st->nruns = n;
    for (size_t p = 0; a->trace && p < a->npolicies; p++)
        sim_result_init(&st->job_results[p]);
    st->njob_runs = a->trace ? a->npolicies : 0;
    return 0;
}

/* Serving alone: each policy, each service. */
static int replay_serving(const struct args *a, struct state *st)
{
    for (size_t p = 0; p < a->npolicies; p++) {
        for (size_t s = 0; s < st->nservices; s++) {
            char err[512] = "";
            struct sim_serve_result *r = &st->results[p * st->nservices + s];
            int e = sim_serve_run(&st->traces[s], &st->services[s], &a->policies[p], NULL, r, err,
                                  sizeof(err));
            if (e) {
                fprintf(stderr, "gpuorch sim: %s under %s: %s\n", st->services[s].name,
                        a->policies[p].name, *err ? err : gpo_strerror(e));
                return 1;
            }
        }
    }
    return 0;
}

#ifdef GPUORCH_SIM_SERVE_SHARED
#define SHARED_BUILT true
/* Serving and training on one cluster (serve_shared.h). */
static int replay_shared(const struct args *a, struct state *st)
{
    char err[1024] = "";
    struct sim_opts jo = {.restart_penalty_s = a->restart_penalty_s};
    struct sim_serve_shared_in in = {
        .traces = st->traces,
        .services = st->services,
        .nservices = st->nservices,
        .policies = a->policies,
        .npolicies = a->npolicies,
        .jobs = &st->jobs,
        .spec = &st->spec,
        .job_policy = &st->job_policy,
        .job_opts = &jo,
        .split_gpu_milli = (int64_t)(a->split_gpus * 1000 + 0.5),
        .serve_offset_ms = a->from_s * 1000, /* a window of the jobs starts with the requests */
    };
    struct sim_serve_shared_out out = {
        .serve = st->results, .jobs = st->job_results, .stats = st->shared};
    int e = sim_serve_shared_run(&in, &out, err, sizeof(err));
    if (e) {
        fprintf(stderr, "gpuorch sim: %s\n", *err ? err : gpo_strerror(e));
        return e == GPO_EINVAL ? 2 : 1;
    }
    return 0;
}

/* How each shared or split replay went, below training's table. */
static void print_shared(const struct args *a, const struct state *st)
{
    for (size_t p = 0; p < st->njob_summaries; p++) {
        const struct sim_serve_shared_stat *x = &st->shared[p];
        if (a->split_gpus > 0) {
            printf("%s: serving split off %.3g GPUs (its replicas never held more)\n",
                   a->policies[p].name, (double)x->cap_gpu_milli / 1000);
            continue;
        }
        char how[128] = "converged";
        if (!x->converged)
            snprintf(how, sizeof(how),
                     "not converged (the last round's figures; %zu delay(s) moved by more than "
                     "1 s in it)",
                     x->moved);
        printf("%s: %u job replay(s), %s; %zu replica job(s), %zu placed late (mean %.1f s, "
               "max %.1f s), %llu evicted by a reclaim\n",
               a->policies[p].name, x->rounds, how, x->replicas, x->delayed, x->delay_mean_s,
               x->delay_max_s, (unsigned long long)x->replica_preemptions);
    }
}
#else
#define SHARED_BUILT false
static int replay_shared(const struct args *a, struct state *st)
{
    (void)a;
    (void)st;
    fprintf(stderr, "gpuorch sim: --trace with --serve: serving and training on one cluster is "
                    "not built in this version (replay them apart: --serve without --trace, and "
                    "--trace alone)\n");
    return 2;
}

static void print_shared(const struct args *a, const struct state *st)
{
    (void)a;
    (void)st;
}
#endif

static int summarize(const struct args *a, struct state *st)
{
    for (size_t p = 0; p < a->npolicies; p++) {
        for (size_t s = 0; s < st->nservices; s++) {
            size_t i = p * st->nservices + s;
            if (sim_serve_summarize(&st->results[i], &st->services[s], a->policies[p].name,
                                    &st->summaries[i])) {
                fprintf(stderr, "gpuorch sim: out of memory\n");
                return 1;
            }
        }
    }
    for (size_t p = 0; p < st->njob_runs; p++) {
        char *label = st->job_labels[p];
        snprintf(label, sizeof(st->job_labels[p]), "%s+%s", st->job_policy.name,
                 a->policies[p].name);
        if (sim_summary_compute(&st->job_results[p], label, &st->job_summaries[p])) {
            fprintf(stderr, "gpuorch sim: out of memory\n");
            return 1;
        }
        st->njob_summaries = p + 1;
    }
    return 0;
}

static int write_report(const struct args *a, struct state *st)
{
    struct sim_serve_report_run *rr = calloc(st->nruns, sizeof(*rr));
    struct sim_report_run jr[MAX_POLICIES];
    if (!rr) {
        fprintf(stderr, "gpuorch sim: out of memory\n");
        return 1;
    }
    /* Grouped by service, the policies side by side. */
    size_t k = 0;
    for (size_t s = 0; s < st->nservices; s++)
        for (size_t p = 0; p < a->npolicies; p++) {
            size_t i = p * st->nservices + s;
            rr[k++] =
                (struct sim_serve_report_run){&st->summaries[i], &st->results[i], &st->services[s]};
        }
    for (size_t p = 0; p < st->njob_summaries; p++)
        jr[p] = (struct sim_report_run){&st->job_summaries[p], &st->job_results[p]};
    char title[512], err[512] = "";
    snprintf(title, sizeof(title), "%s", a->serve);
    int e =
        sim_serve_report_write(a->report, title, rr, k, jr, st->njob_summaries, err, sizeof(err));
    free(rr);
    if (e)
        fprintf(stderr, "gpuorch sim: --report: %s\n", *err ? err : gpo_strerror(e));
    return e ? 1 : 0;
}

static int print_outputs(const struct args *a, struct state *st)
{
    if (a->json) {
        if (sim_serve_output_json(stdout, st->summaries, st->nruns, st->job_summaries,
                                  st->njob_summaries)) {
            fprintf(stderr, "gpuorch sim: out of memory\n");
            return 1;
        }
    } else {
        sim_serve_output_table(stdout, st->summaries, st->nruns);
        if (st->njob_summaries) {
            printf("\ntraining (%s), under each serving policy%s\n", a->trace,
                   a->split_gpus > 0 ? " with serving's GPUs split off" : " on the shared cluster");
            sim_output_table(stdout, st->job_summaries, st->njob_summaries);
            printf("\n");
            print_shared(a, st);
        }
    }
    int rc = a->report ? write_report(a, st) : 0;
    if (!rc && (fflush(stdout) || ferror(stdout))) {
        fprintf(stderr, "gpuorch sim: writing the output failed\n");
        rc = 1;
    }
    return rc;
}

static void release(struct state *st)
{
    for (size_t i = 0; i < st->nruns; i++)
        sim_serve_result_release(&st->results[i]);
    for (size_t p = 0; p < st->njob_summaries; p++)
        sim_summary_release(&st->job_summaries[p]);
    for (size_t p = 0; p < st->njob_runs; p++)
        sim_result_release(&st->job_results[p]);
    free(st->results);
    free(st->summaries);
    free(st->job_results);
    free(st->job_summaries);
    for (size_t s = 0; s < MAX_SERVICES; s++)
        sim_reqtrace_release(&st->traces[s]);
    sim_spec_release(&st->spec);
    sim_trace_release(&st->jobs);
}

int sim_serve_command(int argc, char **argv)
{
    struct args *a = calloc(1, sizeof(*a));
    struct state *st = calloc(1, sizeof(*st));
    if (!a || !st) {
        free(a);
        free(st);
        fprintf(stderr, "gpuorch sim: out of memory\n");
        return 1;
    }
    for (size_t s = 0; s < MAX_SERVICES; s++)
        sim_reqtrace_init(&st->traces[s]);
    sim_trace_init(&st->jobs);
    sim_spec_init(&st->spec);
    int rc = parse_args(argc, argv, a);
    if (!rc && a->trace && !SHARED_BUILT)
        rc = replay_shared(a, st); /* says it is not built: before any file is read */
    if (!rc)
        rc = load_services(a, st);
    if (!rc && a->trace)
        rc = load_jobs(a, st);
    if (!rc)
        rc = alloc_runs(a, st);
    if (!rc)
        rc = a->trace ? replay_shared(a, st) : replay_serving(a, st);
    if (!rc)
        rc = summarize(a, st);
    if (!rc)
        rc = print_outputs(a, st);
    release(st);
    free(st);
    free(a);
    return rc;
}

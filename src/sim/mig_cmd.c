/*
 * mig_cmd.c - `gpuorch sim --mig MODE` (mig_cmd.h): flags, modes, output.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "core/mig.h"
#include "sim/command.h"
#include "sim/mig_cmd.h"
#include "sim/mig_replay.h"
#include "sim/trace.h"
#include "util/opts.h"
#include "base/banned.h"

#define MAX_MODES 128

struct args {
    const char *trace, *gpu_type, *initial, *fit;
    // cppcheck-suppress unusedStructMember ; util/opts writes it through its offset
    const char *mig;
    const char *modes[MAX_MODES];
    size_t nmodes;
    int64_t nodes, gpus_per_node, from_s, until_s, max_duration_s;
    int64_t delay_ms, settle_ms, hold_ms, interval_ms, keep_free, max_repartitions;
    double compress;
    bool json, skip_bad;
    // cppcheck-suppress unusedStructMember ; util/opts writes it through its offset
    bool help;
};

#define SECONDS(name_, member, lo, hi)                                                             \
    {                                                                                              \
        .name = name_, .type = OPTS_INT, .min = lo, .max = hi,                                     \
        .offset = offsetof(struct args, member)                                                    \
    }
#define MILLIS(name_, member)                                                                      \
    {                                                                                              \
        .name = name_, .type = OPTS_SECONDS, .min = 0, .max = INT64_C(86400) * 365, .scale = 1000, \
        .offset = offsetof(struct args, member)                                                    \
    }

static const struct opts_opt flags[] = {
    {.name = "trace", .type = OPTS_STRING, .offset = offsetof(struct args, trace)},
    {.name = "mig", .type = OPTS_STRING, .offset = offsetof(struct args, mig)},
    {.name = "gpu-type", .type = OPTS_STRING, .offset = offsetof(struct args, gpu_type)},
    {.name = "initial", .type = OPTS_STRING, .offset = offsetof(struct args, initial)},
    {.name = "fit", .type = OPTS_STRING, .offset = offsetof(struct args, fit)},
    SECONDS("nodes", nodes, 1, SIM_MIG_MAX_NODES),
    SECONDS("gpus-per-node", gpus_per_node, 1, SIM_MIG_MAX_GPUS_PER_NODE),
    {.name = "compress",
     .type = OPTS_DOUBLE,
     .flags = OPTS_OPEN_MIN,
     .dmin = 0,
     .dmax = 1e6,
     .expect = "a number in (0, 1000000]",
     .offset = offsetof(struct args, compress)},
    SECONDS("max-duration", max_duration_s, 1, INT64_MAX / 1000),
    SECONDS("from", from_s, 0, INT64_MAX),
    SECONDS("until", until_s, 0, INT64_MAX),
    MILLIS("repartition-delay", delay_ms),
    MILLIS("settle", settle_ms),
    MILLIS("hold", hold_ms),
    MILLIS("min-interval", interval_ms),
    SECONDS("keep-free", keep_free, 0, 1000000),
    SECONDS("max-repartitions", max_repartitions, 0, 1000000),
    {.name = "json", .type = OPTS_FLAG, .offset = offsetof(struct args, json)},
    {.name = "skip-bad", .type = OPTS_FLAG, .offset = offsetof(struct args, skip_bad)},
    {.name = "help", .short_name = 'h', .type = OPTS_HELP, .offset = offsetof(struct args, help)},
};

bool sim_mig_wanted(int argc, char **argv)
{
    return sim_command_has_flag(argc, argv, "mig");
}

void sim_mig_usage(FILE *out)
{
    fprintf(out, "usage: gpuorch sim --mig MODE [--mig MODE...] --trace FILE [--gpu-type T]\n"
                 "                   [--nodes N] [--gpus-per-node G] [--compress X]\n"
                 "                   [--max-duration S] [--from S] [--until S] [--json]\n"
                 "                   [--repartition-delay S] [--settle S] [--hold S]\n"
                 "                   [--min-interval S] [--keep-free N] [--max-repartitions N]\n"
                 "                   [--initial LAYOUT] [--fit own|larger] [--skip-bad]\n"
                 "\n"
                 "MIG: replays a job trace's pods (fractions of a GPU, or whole GPUs) on N nodes\n"
                 "of G MIG-capable GPUs, FIFO with backfill by fit, and reports JCT, waiting,\n"
                 "unschedulable pods, stranded capacity, busy GPU-hours and repartitions.\n"
                 "\n"
                 "  --mig MODE            none: no MIG, two rows: whole GPUs per pod (exclusive)\n"
                 "                        and fractions packed without isolation (shared);\n"
                 "                        static:LAYOUT[@N][,LAYOUT[@N]...]: every GPU keeps a\n"
                 "                        layout, N GPUs of the cluster each in node order (the\n"
                 "                        last without @N: the rest); LAYOUT a name\n"
                 "                        (all-balanced, all-1g.10gb, all-3g.40gb, all-disabled,\n"
                 "                        ...) or counts (3g.40gb=1+1g.10gb=4);\n"
                 "                        dynamic: the core's planner (mig_plan) reshapes idle\n"
                 "                        capacity for the queue; repeat --mig to compare\n"
                 "  --gpu-type T          A100-40GB, A100-80GB, H100-80GB (default), H200-141GB\n"
                 "  --nodes N             nodes (default 4); --gpus-per-node G (default 8)\n"
                 "  --compress X          submit times divided by X (default 1)\n"
                 "  --max-duration S      durations longer than S seconds cut to S\n"
                 "  --from S, --until S   only pods submitted in [S, until) (trace seconds)\n"
                 "  --repartition-delay S seconds one GPU's repartition takes (default 5)\n"
                 "  --settle S, --hold S, --min-interval S, --keep-free N, --max-repartitions N\n"
                 "                        the planner's damping (core/mig.h; defaults 30, 300,\n"
                 "                        300, 0, 0: no limit)\n"
                 "  --initial LAYOUT      dynamic: every GPU's layout at the start (default\n"
                 "                        all-enabled: MIG on, no instance)\n"
                 "  --fit own|larger      whether a pod may take a larger free instance than its\n"
                 "                        profile (default: larger under static, own under\n"
                 "                        dynamic, where the planner makes its profile)\n"
                 "  --json                one JSON object: the setup and one entry per row\n"
                 "  --skip-bad            skip and count malformed trace rows\n");
}

static int bad(const char *flag, const char *value, const char *expected)
{
    fprintf(stderr, "gpuorch sim: %s: expected %s, got '%s'\n", flag, expected, value);
    return 2;
}

static int parse_args(int argc, char **argv, struct args *a)
{
    struct opts p;
    *a = (struct args){.until_s = -1,
                       .nodes = 4,
                       .gpus_per_node = 8,
                       .compress = 1,
                       .gpu_type = "H100-80GB",
                       .initial = "all-enabled",
                       .delay_ms = 5000};
    struct mig_plan_spec d;
    mig_plan_spec_default(&d);
    a->settle_ms = d.settle_ms;
    a->hold_ms = d.hold_ms;
    a->interval_ms = d.min_interval_ms;
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
        if (o->offset == offsetof(struct args, mig)) {
            if (a->nmodes == MAX_MODES)
                return bad("--mig", v, "at most 128 modes");
            a->modes[a->nmodes++] = v;
        }
    }
    if (!a->trace) {
        fprintf(stderr, "gpuorch sim: --trace FILE is required with --mig\n");
        return 2;
    }
    return sim_command_check_window(a->from_s, a->until_s);
}

/* "static:L[@N][,L@N...]" into o->segs: N GPUs of the cluster, in node
 * order, per layout; one without @N takes the GPUs left. */
static int parse_static(const char *v, struct sim_mig_opts *o)
{
    char buf[1024], err[512];
    const char *list = v + strlen("static:");
    uint32_t total = o->nodes * o->gpus_per_node, filled = 0;
    if (!*list)
        return bad("--mig", v, "static:LAYOUT (a named layout or counts)");
    if (strlen(list) >= sizeof(buf))
        return bad("--mig", v, "a shorter list of layouts");
    memcpy(buf, list, strlen(list) + 1);
    o->nsegs = 0;
    char *save = NULL;
    for (char *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
        if (o->nsegs == SIM_MIG_MAX_SEGMENTS)
            return bad("--mig", v, "at most 16 layouts");
        char *at = strrchr(w, '@');
        long n = -1;
        if (at) {
            char *end = NULL;
            *at = '\0';
            n = strtol(at + 1, &end, 10);
            if (end == at + 1 || *end || n < 1 || n > (long)total)
                return bad("--mig", v, "LAYOUT@N with N GPUs of the cluster (1 to nodes x GPUs)");
        }
        if (sim_mig_layout_parse(o->type, w, &o->segs[o->nsegs].layout, err, sizeof(err))) {
            fprintf(stderr, "gpuorch sim: --mig %s: %s\n", v, err);
            return 2;
        }
        uint32_t count = n < 0 ? total - filled : (uint32_t)n;
        if (filled + count > total || !count) {
            fprintf(stderr,
                    "gpuorch sim: --mig %s: the layouts ask for more than the cluster's %u GPUs\n",
                    v, total);
            return 2;
        }
        o->segs[o->nsegs++].gpus = count;
        filled += count;
    }
    if (filled != total) {
        fprintf(stderr,
                "gpuorch sim: --mig %s: the layouts cover %u of the cluster's %u GPUs (give the "
                "last one no @N to take the rest)\n",
                v, filled, total);
        return 2;
    }
    o->mode = SIM_MIG_STATIC;
    return 0;
}

struct row {
    char name[1100];
    struct sim_mig_opts o;
    struct sim_mig_result r;
};

static int add_row(struct row *rows, size_t *n, const struct sim_mig_opts *base, const char *name,
                   enum sim_mig_mode mode)
{
    rows[*n].o = *base;
    rows[*n].o.mode = mode;
    snprintf(rows[*n].name, sizeof(rows[*n].name), "%s", name);
    (*n)++;
    return 0;
}

static int build_rows(const struct args *a, struct row *rows, size_t *n)
{
    struct sim_mig_opts base = {.nodes = (uint32_t)a->nodes,
                                .gpus_per_node = (uint32_t)a->gpus_per_node,
                                .repartition_delay_ms = a->delay_ms,
                                .compress = a->compress,
                                .max_duration_s = a->max_duration_s};
    char err[512];
    if (mig_type_lookup(a->gpu_type, &base.type, err, sizeof(err))) {
        fprintf(stderr, "gpuorch sim: --gpu-type: %s\n", err);
        return 2;
    }
    base.plan = (struct mig_plan_spec){.settle_ms = a->settle_ms,
                                       .hold_ms = a->hold_ms,
                                       .min_interval_ms = a->interval_ms,
                                       .keep_free = (uint32_t)a->keep_free,
                                       .max_repartitions = (uint32_t)a->max_repartitions};
    bool fit_given = a->fit != NULL, own = false;
    if (fit_given && strcmp(a->fit, "own") != 0 && strcmp(a->fit, "larger") != 0)
        return bad("--fit", a->fit, "own or larger");
    own = fit_given && strcmp(a->fit, "own") == 0;
    *n = 0;
    if (!a->nmodes) {
        fprintf(stderr, "gpuorch sim: --mig: expected none, static:LAYOUT or dynamic\n");
        return 2;
    }
    for (size_t m = 0; m < a->nmodes; m++) {
        const char *v = a->modes[m];
        if (strcmp(v, "none") == 0) {
            add_row(rows, n, &base, "none/exclusive", SIM_MIG_EXCLUSIVE);
            add_row(rows, n, &base, "none/shared", SIM_MIG_SHARED);
        } else if (strcmp(v, "dynamic") == 0) {
            struct sim_mig_opts o = base;
            o.own_profile = fit_given ? own : true;
            o.nsegs = 1;
            o.segs[0].gpus = o.nodes * o.gpus_per_node;
            if (sim_mig_layout_parse(o.type, a->initial, &o.segs[0].layout, err, sizeof(err))) {
                fprintf(stderr, "gpuorch sim: --initial: %s\n", err);
                return 2;
            }
            add_row(rows, n, &o, "dynamic", SIM_MIG_DYNAMIC);
        } else if (strncmp(v, "static:", 7) == 0) {
            struct sim_mig_opts o = base;
            o.own_profile = own;
            int e = parse_static(v, &o);
            if (e)
                return e;
            add_row(rows, n, &o, v, SIM_MIG_STATIC);
        } else {
            return bad("--mig", v, "none, static:LAYOUT or dynamic");
        }
    }
    return 0;
}

static void print_table(const struct args *a, const struct row *rows, size_t n)
{
    printf("MIG replay: %s, %lld node(s) x %lld %s, compress %g", a->trace, (long long)a->nodes,
           (long long)a->gpus_per_node, rows[0].o.type->name, a->compress);
    if (a->max_duration_s)
        printf(", durations cut to %lld s", (long long)a->max_duration_s);
    int w = 14; /* the mode column: as wide as the longest name */
    for (size_t i = 0; i < n; i++)
        w = (int)strlen(rows[i].name) > w ? (int)strlen(rows[i].name) : w;
    printf("\n%-*s %6s %6s %11s %11s %11s %9s %10s %6s %7s\n", w, "mode", "pods", "unsch",
           "JCT avg s", "wait avg s", "wait p99 s", "stranded", "busy GPU-h", "util", "repart");
    for (size_t i = 0; i < n; i++) {
        const struct sim_mig_result *r = &rows[i].r;
        double util = r->capacity_gpu_hours > 0 ? r->busy_gpu_hours / r->capacity_gpu_hours : 0;
        printf("%-*s %6zu %6zu %11.0f %11.0f %11.0f %9.2f %10.1f %6.3f %7llu\n", w, rows[i].name,
               r->jobs, r->unschedulable, r->jct_avg_s, r->wait_avg_s, r->wait_p99_s,
               r->stranded_gpus, r->busy_gpu_hours, util, (unsigned long long)r->repartitions);
    }
}

static json_t *row_json(const struct row *w)
{
    const struct sim_mig_result *r = &w->r;
    double util = r->capacity_gpu_hours > 0 ? r->busy_gpu_hours / r->capacity_gpu_hours : 0;
    return json_pack("{s:s, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:I, s:I}",
                     "mode", w->name, "pods", (json_int_t)r->jobs, "unschedulable",
                     (json_int_t)r->unschedulable, "stuck", (json_int_t)r->stuck, "jct_avg_s",
                     r->jct_avg_s, "wait_avg_s", r->wait_avg_s, "wait_p99_s", r->wait_p99_s,
                     "stranded_gpus", r->stranded_gpus, "busy_gpu_hours", r->busy_gpu_hours,
                     "utilization", util, "makespan_s", r->makespan_s, "repartitions",
                     (json_int_t)r->repartitions, "instances_destroyed", (json_int_t)r->destroyed,
                     "instances_created", (json_int_t)r->created, "events", (json_int_t)r->events);
}

static int print_json(const struct args *a, const struct row *rows, size_t n)
{
    const struct sim_mig_opts *o = &rows[0].o;
    json_t *arr = json_array();
    json_t *root = json_pack(
        "{s:s, s:s, s:I, s:I, s:f, s:I, s:I, s:I, s:{s:I, s:I, s:I, s:I, s:I}, s:s, s:o}", "trace",
        a->trace, "gpu_type", o->type->name, "nodes", (json_int_t)a->nodes, "gpus_per_node",
        (json_int_t)a->gpus_per_node, "compress", a->compress, "max_duration_s",
        (json_int_t)a->max_duration_s, "from_s", (json_int_t)a->from_s, "until_s",
        (json_int_t)a->until_s, "planner", "settle_ms", (json_int_t)o->plan.settle_ms, "hold_ms",
        (json_int_t)o->plan.hold_ms, "min_interval_ms", (json_int_t)o->plan.min_interval_ms,
        "keep_free", (json_int_t)o->plan.keep_free, "repartition_delay_ms",
        (json_int_t)o->repartition_delay_ms, "initial", a->initial, "rows", arr);
    if (!root)
        return 1;
    for (size_t i = 0; i < n; i++) {
        json_t *j = row_json(&rows[i]);
        if (!j || json_array_append_new(arr, j)) {
            json_decref(root);
            return 1;
        }
    }
    int e = json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return e || fputc('\n', stdout) == EOF;
}

int sim_mig_command(int argc, char **argv)
{
    struct args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    struct row *rows = calloc((size_t)MAX_MODES * 2, sizeof(*rows));
    if (!rows) {
        fprintf(stderr, "gpuorch sim: out of memory\n");
        return 1;
    }
    size_t n = 0;
    struct sim_trace t;
    sim_trace_init(&t);
    rc = build_rows(&a, rows, &n);
    char err[512] = "";
    struct sim_trace_opts to = {.skip_bad = a.skip_bad, .from_s = a.from_s, .until_s = a.until_s};
    if (!rc && sim_trace_load(&t, a.trace, &to, err, sizeof(err))) {
        fprintf(stderr, "gpuorch sim: %s\n", err);
        rc = 1;
    }
    if (!rc && t.nskipped)
        fprintf(stderr, "gpuorch sim: skipped %zu bad row(s); the first: %s\n", t.nskipped,
                t.first_skip);
    for (size_t i = 0; !rc && i < n; i++) {
        if (sim_mig_run(&t, &rows[i].o, &rows[i].r, err, sizeof(err))) {
            fprintf(stderr, "gpuorch sim: --mig %s: %s\n", rows[i].name, err);
            rc = 1;
        } else if (rows[i].r.stuck) { /* the replay ended with pods it could still run */
            fprintf(stderr, "gpuorch sim: --mig %s: %zu pod(s) never started (a replay bug)\n",
                    rows[i].name, rows[i].r.stuck);
            rc = 1;
        }
    }
    if (!rc && a.json && print_json(&a, rows, n)) {
        fprintf(stderr, "gpuorch sim: out of memory\n");
        rc = 1;
    }
    if (!rc && !a.json)
        print_table(&a, rows, n);
    if (!rc && (fflush(stdout) || ferror(stdout))) {
        fprintf(stderr, "gpuorch sim: writing the output failed\n");
        rc = 1;
    }
    free(rows);
    sim_trace_release(&t);
    return rc;
}

/*
 * queue.c - gpuorch queue, as squeue (jobs.h): arrays collapsed, squeue's
 * filters and its -o fields (slurm.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/cli.h"
#include "cli/jobs.h"
#include "cli/slurm.h"
#include "cli/table.h"
#include "client/client.h"
#include "util/hostlist.h"
#include "util/opts.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define TEXT_LEN     256

struct queue_args {
    struct cli_common co;
    const char *state, *team, *user, *jobs, *pools, *format;
    bool all, me, expand, noheader;
    char me_name[256]; /* --me: the token's user, which `user` then points at */
};

static const struct opts_opt queue_opts[] = {
    {.name = "state",
     .short_name = 't',
     .type = OPTS_STRING,
     .offset = offsetof(struct queue_args, state)},
    {.name = "states", .type = OPTS_STRING, .offset = offsetof(struct queue_args, state)},
    {.name = "team",
     .short_name = 'A',
     .type = OPTS_STRING,
     .offset = offsetof(struct queue_args, team)},
    {.name = "account", .type = OPTS_STRING, .offset = offsetof(struct queue_args, team)},
    {.name = "user",
     .short_name = 'u',
     .type = OPTS_STRING,
     .offset = offsetof(struct queue_args, user)},
    {.name = "jobs",
     .short_name = 'j',
     .type = OPTS_STRING,
     .offset = offsetof(struct queue_args, jobs)},
    {.name = "partition",
     .short_name = 'p',
     .type = OPTS_STRING,
     .offset = offsetof(struct queue_args, pools)},
    {.name = "format",
     .short_name = 'o',
     .type = OPTS_STRING,
     .offset = offsetof(struct queue_args, format)},
    {.name = "all",
     .short_name = 'a',
     .type = OPTS_FLAG,
     .offset = offsetof(struct queue_args, all)},
    {.name = "array",
     .short_name = 'r',
     .type = OPTS_FLAG,
     .offset = offsetof(struct queue_args, expand)},
    {.name = "noheader",
     .short_name = 'h',
     .type = OPTS_FLAG,
     .offset = offsetof(struct queue_args, noheader)},
    {.name = "me", .type = OPTS_FLAG, .offset = offsetof(struct queue_args, me)},
    CLI_OPT_JSON(struct queue_args, co),
    CLI_OPTS_COMMON_LONG_HELP(struct queue_args, co),
};

static void queue_usage(FILE *out)
{
    fprintf(out, "usage: gpuorch queue [-t S[,S...]] [-A T] [-u U | --me] [-j JOB[,JOB...]]\n"
                 "                     [-p POOL[,POOL...]] [--all] [-r] [-h] [-o FORMAT] [--json]\n"
                 "\n"
                 "Lists jobs as squeue does: JOBID NAME USER TEAM STATE TIME GPUS NODES REASON.\n"
                 "REASON is why a pending job waits (from the last scheduling pass), the nodes\n"
                 "of a running one, or why an ended one ended. TIME is how long it has run.\n"
                 "A running job whose GPUs its team's idle policy flags shows IDLE(<5%% 35m)\n"
                 "before its nodes: under 5 %% utilization for 35 minutes (docs/idle.md).\n"
                 "The pending tasks of an array share one row, 41_[5-20%%4] (tasks 5 to 20, at\n"
                 "most 4 running); each running task has its own, 41_3.\n"
                 "\n"
                 "  -t, --state(s) S[,S] PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT,\n"
                 "                      PREEMPTED, OUT_OF_MEMORY, NODE_FAIL (or PD, R, CD, F, CA,\n"
                 "                      TO, PR, OOM, NF; default: PENDING,RUNNING)\n"
                 "  -a, --all           every state, ended jobs included\n"
                 "  -A, --team T        one team's jobs (--account too)\n"
                 "  -u, --user U[,U]    these users' jobs; --me: yours\n"
                 "  -j, --jobs J[,J]    these jobs (an array's id: all its tasks; 41_7: one)\n"
                 "  -p, --partition P   jobs that asked for these pools\n"
                 "  -r, --array         one row per array task\n"
                 "  -h, --noheader      no header line\n"
                 "  -o, --format F      squeue's fields: %%i id, %%j name, %%u user, %%a team,\n"
                 "                      %%t state code, %%T state, %%M time used, %%l time limit,\n"
                 "                      %%D nodes, %%C CPUs, %%N node list, %%r reason,\n"
                 "                      %%R reason or node list, %%P pool, %%b GPUs per node,\n"
                 "                      %%V submit time; %%.N right-justifies in N characters,\n"
                 "                      %%N pads to N (default: $SQUEUE_FORMAT when set)\n"
                 "  --json              the API's jobs, one per array task\n"
                 "  --help              this text\n");
    cli_help_common(out, false);
}

/* "PD,R" -> the API's states (REQUEUED is PENDING there, OUT_OF_MEMORY
 * FAILED) and the Slurm states kept, as bits. CLI_EXIT_USAGE, printed. */
static int states_param(const char *given, unsigned *ret_api, unsigned *ret_slurm)
{
    char err[CLI_ERR_MAX];
    unsigned bits;
    if (strcasecmp(given, "all") == 0) {
        *ret_api = 0;
        *ret_slurm = ~0u;
        return 0;
    }
    if (slurm_states_parse(given, &bits, err, sizeof(err)) != 0)
        return cli_usage_error("queue", "--state: %s", err);
    unsigned api = slurm_api_states(bits);
    /* squeue shows a requeued job as pending: the one asks for the other. */
    if (bits & (1u << SLURM_PENDING))
        bits |= 1u << SLURM_REQUEUED;
    /* FAILED asks for every failed job, OUT_OF_MEMORY for those only. */
    if (bits & (1u << SLURM_FAILED))
        bits |= 1u << SLURM_OUT_OF_MEMORY;
    *ret_api = api;
    *ret_slurm = bits;
    return 0;
}

/* A running job's REASON: its nodes, after "IDLE(<5% 35m)" when its GPUs are
 * flagged idle, or "IDLE(<5% 35m; requeue in 4m)" once warned. */
static const char *running_reason(const json_t *job, const char *nodes, int64_t now, char *buf,
                                  size_t len)
{
    const json_t *idle = json_object_get(job, "idle");
    int64_t since, at;
    if (!json_is_object(idle) || timefmt_parse_rfc3339(cli_json_str(idle, "since"), &since))
        return nodes;
    char span[32], what[64] = "";
    jobs_span_text(now - since, span, sizeof(span));
    const char *action = cli_json_str(idle, "action");
    if (action && strcmp(action, "report") != 0 &&
        timefmt_parse_rfc3339(cli_json_str(idle, "action_at"), &at) == 0) {
        char left[32];
        jobs_span_text(at - now, left, sizeof(left));
        snprintf(what, sizeof(what), "; %s in %s", action, left);
    }
    snprintf(buf, len, "IDLE(<%" JSON_INTEGER_FORMAT "%% %s%s) %s",
             json_integer_value(json_object_get(idle, "threshold_pct")), span, what, nodes);
    return buf;
}

static int queue_row(struct table *t, const struct queue_row *r, int64_t now)
{
    const json_t *job = r->job, *spec = json_object_get(job, "spec");
    const char *state = cli_json_str(job, "state");
    char gpus[TEXT_LEN], nodes[TEXT_LEN * 4], count[24] = "-", time[TIMEFMT_DURATION_LEN];
    char idle[TEXT_LEN * 5];
    const json_t *names = json_object_get(json_object_get(job, "current_attempt"), "nodes");
    size_t nn = json_array_size(names);
    squeue_field_text('N', r, now, nodes, sizeof(nodes));
    if (nn)
        snprintf(count, sizeof(count), "%zu", nn);
    snprintf(time, sizeof(time), "-");
    int64_t since;
    bool running = state && strcmp(state, "RUNNING") == 0;
    if (running && timefmt_parse_rfc3339(cli_json_str(job, "updated_at"), &since) == 0)
        timefmt_duration(now > since ? (now - since) / 1000 : 0, time, sizeof(time));
    const char *reason = state && strcmp(state, "PENDING") == 0 ? cli_json_str(job, "wait_reason")
                         : running ? running_reason(job, nodes, now, idle, sizeof(idle))
                                   : cli_json_str(job, "reason");
    const char *cells[] = {r->id,
                           cli_json_str(spec, "name"),
                           cli_json_str(job, "user"),
                           cli_json_str(job, "team"),
                           state,
                           time,
                           jobs_gpus_text(spec, gpus, sizeof(gpus)),
                           count,
                           reason && reason[0] ? reason : "-"};
    return table_add(t, cells);
}

static int print_table(const struct queue_row *rows, size_t n, bool header)
{
    static const char *const head[] = {"JOBID", "NAME", "USER",  "TEAM",  "STATE",
                                       "TIME",  "GPUS", "NODES", "REASON"};
    struct table *t = table_new(ARRAY_LEN(head), head);
    int64_t now = cli_now_ms();
    int rc = t ? 0 : GPO_ENOMEM;
    for (size_t k = 0; rc == 0 && k < n; k++)
        rc = queue_row(t, &rows[k], now);
    if (rc == 0)
        table_print_rows(t, stdout, header);
    table_free(t);
    return rc ? cli_fail("queue", "out of memory") : 0;
}

/* One line of an -o format: each item's text (the header's with r NULL). */
static void print_line(const struct squeue_item *items, size_t n, const struct queue_row *r,
                       int64_t now)
{
    for (size_t k = 0; k < n; k++) {
        const struct squeue_item *it = &items[k];
        if (!it->code) {
            (void)fwrite(it->text, 1, it->len, stdout); /* stdout's errors show at exit */
            continue;
        }
        char buf[TEXT_LEN * 4];
        const char *v = r ? squeue_field_text(it->code, r, now, buf, sizeof(buf))
                          : squeue_field_header(it->code);
        for (char *p = buf; r && *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                *p = '?';
        int w = it->width;
        if (w > 0)
            printf(it->right ? "%*.*s" : "%-*.*s", w, w, v);
        else
            fputs(v, stdout);
    }
    putchar('\n');
}

static int print_format(const struct queue_row *rows, size_t n, const char *format, bool header)
{
    struct squeue_item items[SQUEUE_ITEMS_MAX];
    size_t ni = 0;
    char err[CLI_ERR_MAX];
    if (squeue_format_parse(format, items, &ni, err, sizeof(err)) != 0)
        return cli_usage_error("queue", "%s", err);
    int64_t now = cli_now_ms();
    if (header)
        print_line(items, ni, NULL, now);
    for (size_t k = 0; k < n; k++)
        print_line(items, ni, &rows[k], now);
    return 0;
}

/* The token's user name into buf, for --me. */
static int whoami_name(struct cli *c, char *buf, size_t len)
{
    json_t *me = NULL;
    char err[CLI_ERR_MAX];
    int rc = client_whoami(&c->client, &me, err, sizeof(err));
    if (rc)
        return cli_fail_call(c->cmd, rc, err);
    const char *name = cli_json_str(me, "name");
    snprintf(buf, len, "%s", name ? name : "");
    json_decref(me);
    return 0;
}

/* The jobs the flags select, every page, into a new array *ret. */
static int queue_fetch(struct queue_args *a, unsigned states, json_t **ret)
{
    struct cli c;
    char err[CLI_ERR_MAX];
    int rc = cli_connect(&c, "queue", &a->co);
    if (rc == 0 && a->me && (rc = whoami_name(&c, a->me_name, sizeof(a->me_name))) == 0)
        a->user = a->me_name;
    /* One user the API selects; several, the command does. */
    bool one_user = a->user && !strchr(a->user, ',');
    struct client_jobs_filter f = {
        .states = states, .team = a->team, .user = one_user ? a->user : NULL};
    json_t *all = rc ? NULL : json_array();
    if (rc == 0 && !all)
        rc = cli_fail("queue", "out of memory");
    int r = rc ? 0 : client_jobs_list(&c.client, &f, all, err, sizeof(err));
    if (r == GPO_ENAMETOOLONG)
        rc = cli_usage_error("queue", "--team or --user is too long");
    else if (r)
        rc = cli_fail_call("queue", r, err);
    cli_disconnect(&c);
    if (rc) {
        json_decref(all);
        return rc;
    }
    if (one_user)
        a->user = NULL; /* the API selected them */
    *ret = all;
    return 0;
}

/* Drops from all the jobs the command's own filters refuse. */
static void queue_filter(json_t *all, const struct queue_args *a, unsigned slurm_states,
                         const struct slurm_job_sel *sel, size_t nsel)
{
    for (size_t k = json_array_size(all); k-- > 0;) {
        const json_t *j = json_array_get(all, k);
        if (!slurm_job_selected(sel, nsel, j) || !(slurm_states & (1u << slurm_job_state(j))) ||
            !slurm_in_list(a->user, cli_json_str(j, "user"), false) ||
            !slurm_in_list(a->pools, cli_json_str(json_object_get(j, "spec"), "pool"), false))
            json_array_remove(all, k);
    }
}

static int queue_output(const struct queue_args *a, const json_t *all)
{
    if (a->co.json) {
        json_t *out = json_pack("{s:O}", "jobs", all);
        int rc = out && cli_print_json(out) ? 0 : cli_fail("queue", "out of memory");
        json_decref(out);
        return rc;
    }
    struct queue_row *rows = NULL;
    size_t n = 0;
    if (slurm_queue_rows(all, a->expand, &rows, &n) != 0)
        return cli_fail("queue", "out of memory");
    const char *format = a->format ? a->format : getenv("SQUEUE_FORMAT");
    int rc = format && format[0] ? print_format(rows, n, format, !a->noheader)
                                 : print_table(rows, n, !a->noheader);
    free(rows);
    return rc;
}

static int queue_check(int argc, char **argv, struct queue_args *a)
{
    const char **pos = NULL;
    size_t npos = 0;
    int rc = cli_parse_args("queue", argc, argv, CLI_OPTS(queue_opts), a, &pos, &npos);
    if (rc == 0 && a->co.help)
        queue_usage(stdout);
    else if (rc == 0 && npos)
        rc = cli_usage_error("queue", "unexpected argument '%s' (see 'gpuorch queue --help')",
                             pos[0]);
    else if (rc == 0 && a->me && a->user)
        rc = cli_usage_error("queue", "--me and --user exclude each other");
    free(pos);
    return rc;
}

int jobs_queue_command(int argc, char **argv)
{
    struct queue_args a = {0};
    struct slurm_job_sel sel[SLURM_JOB_SELS_MAX];
    size_t nsel = 0;
    unsigned states = 0, slurm_states = ~0u;
    char err[CLI_ERR_MAX];
    int rc = queue_check(argc, argv, &a);
    if (rc || a.co.help)
        return rc;
    if (a.jobs && slurm_jobs_parse(a.jobs, sel, &nsel, err, sizeof(err)) != 0)
        return cli_usage_error("queue", "--jobs: %s", err);
    if (!a.state && !a.all)
        a.state = "PENDING,RUNNING";
    json_t *all = NULL;
    if ((a.state && (rc = states_param(a.state, &states, &slurm_states)) != 0) ||
        (rc = queue_fetch(&a, states, &all)) != 0)
        return rc;
    queue_filter(all, &a, slurm_states, sel, nsel);
    rc = queue_output(&a, all);
    json_decref(all);
    return rc;
}

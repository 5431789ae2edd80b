/*
 * history.c - gpuorch history, as sacct (history.h).
 */
#include "cli/history.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/slurm.h"
#include "client/client.h"
#include "util/opts.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define CELL_LEN 1024

struct history_args {
    struct cli_common co;
    const char *jobs, *user, *team, *state, *start, *end, *format;
    bool all_users, parsable, parsable2, noheader;
    bool allocations; // cppcheck-suppress unusedStructMember ; -X is accepted: no steps are listed
};

#define ARG(m) offsetof(struct history_args, m)
static const struct opts_opt history_opts[] = {
    {.name = "jobs", .short_name = 'j', .type = OPTS_STRING, .offset = ARG(jobs)},
    {.name = "user", .short_name = 'u', .type = OPTS_STRING, .offset = ARG(user)},
    {.name = "uid", .type = OPTS_STRING, .offset = ARG(user)},
    {.name = "account", .short_name = 'A', .type = OPTS_STRING, .offset = ARG(team)},
    {.name = "team", .type = OPTS_STRING, .offset = ARG(team)},
    {.name = "state", .short_name = 's', .type = OPTS_STRING, .offset = ARG(state)},
    {.name = "starttime", .short_name = 'S', .type = OPTS_STRING, .offset = ARG(start)},
    {.name = "endtime", .short_name = 'E', .type = OPTS_STRING, .offset = ARG(end)},
    {.name = "format", .short_name = 'o', .type = OPTS_STRING, .offset = ARG(format)},
    {.name = "allusers", .short_name = 'a', .type = OPTS_FLAG, .offset = ARG(all_users)},
    {.name = "allocations", .short_name = 'X', .type = OPTS_FLAG, .offset = ARG(allocations)},
    {.name = "parsable", .short_name = 'p', .type = OPTS_FLAG, .offset = ARG(parsable)},
    {.name = "parsable2", .short_name = 'P', .type = OPTS_FLAG, .offset = ARG(parsable2)},
    {.name = "noheader", .short_name = 'n', .type = OPTS_FLAG, .offset = ARG(noheader)},
    CLI_OPT_JSON(struct history_args, co),
    CLI_OPTS_COMMON(struct history_args, co),
};
#undef ARG

static void history_usage(FILE *out)
{
    fprintf(out,
            "usage: gpuorch history [-j JOB[,JOB]] [-u USER[,USER] | -a] [-A TEAM[,TEAM]]\n"
            "                       [-s STATE[,STATE]] [-S TIME] [-E TIME] [-X]\n"
            "                       [--format FIELDS] [-P | -p] [-n] [--json]\n"
            "\n"
            "Lists jobs as sacct does, ended ones included (from the controller's store, so\n"
            "a restart keeps them), with Slurm's state names: PENDING, RUNNING, COMPLETED,\n"
            "FAILED, CANCELLED, TIMEOUT, PREEMPTED, REQUEUED (pending after a run),\n"
            "OUT_OF_MEMORY, NODE_FAIL. Start, End and Elapsed are the last attempt's.\n"
            "Without -j, -u, -A or -a, your own jobs; without -S, -j or -s, jobs in the\n"
            "system since midnight.\n"
            "\n"
            "  -j, --jobs J[,J]    these jobs (an array's id: all its tasks; 41_7: one)\n"
            "  -u, --user U[,U]    these users' jobs; -a, --allusers: everyone's\n"
            "  -A, --account T     these teams' jobs\n"
            "  -s, --state S[,S]   these states (names or PD, R, CD, F, CA, TO, PR, RQ, OOM, NF)\n"
            "  -S, --starttime T   jobs in the system at or after T; -E, --endtime T: up to T.\n"
            "                      T: HH:MM[:SS], MMDD[YY], MM/DD[/YY], MM.DD[.YY] (with\n"
            "                      -HH:MM[:SS]), YYYY-MM-DD[THH:MM[:SS]], today, midnight,\n"
            "                      noon, now[-+]N[seconds|minutes|hours|days|weeks]; local time\n"
            "  -X, --allocations   accepted (gpuorch lists no job steps)\n"
            "  -o, --format F      fields, in any case, each with %%N for its width (%%-N\n"
            "                      left-justified): " SACCT_DEFAULT_FORMAT "\n"
            "                      by default ($SACCT_FORMAT when set); also JobIDRaw, User,\n"
            "                      Elapsed, ElapsedRaw, Start, End, Submit, NNodes, NodeList,\n"
            "                      AllocTRES, NCPUS, ReqMem, Timelimit, QOS, Reason, WorkDir,\n"
            "                      ArrayJobID, ArrayTaskID\n"
            "  -P, --parsable2     fields separated by '|', no padding; -p: a '|' after each\n"
            "  -n, --noheader      no header lines\n"
            "  --json              the API's jobs with their attempts, and each job's\n"
            "                      slurm_state and job_id\n");
    cli_help_common(out, false);
}

/* A time flag into RFC 3339 (UTC) for the API. CLI_EXIT_USAGE, printed. */
static int time_param(const char *flag, const char *given, int64_t now, char *buf, size_t len)
{
    int64_t ms;
    if (slurm_time_parse(given, now, &ms) != 0 || timefmt_rfc3339(ms, buf, len) != 0)
        return cli_usage_error("history",
                               "%s: '%.64s' is not a time (HH:MM[:SS], MMDD[YY], MM/DD[/YY], "
                               "YYYY-MM-DD[THH:MM[:SS]], today, midnight, noon, now-1hours, ...)",
                               flag, given);
    return 0;
}

struct history_plan {
    struct client_history_query q;
    unsigned slurm_states;
    char since[TIMEFMT_RFC3339_LEN], until[TIMEFMT_RFC3339_LEN];
    struct sacct_col cols[SACCT_COLS_MAX];
    size_t ncols;
    bool mine; /* only the token's user's jobs */
};

static int history_plan(struct history_args *a, struct history_plan *p)
{
    char err[CLI_ERR_MAX];
    int64_t now = cli_now_ms(), ms;
    struct slurm_job_sel sel[SLURM_JOB_SELS_MAX];
    size_t nsel;
    p->slurm_states = ~0u;
    if (a->jobs && slurm_jobs_parse(a->jobs, sel, &nsel, err, sizeof(err)) != 0)
        return cli_usage_error("history", "--jobs: %s", err);
    if (a->state && slurm_states_parse(a->state, &p->slurm_states, err, sizeof(err)) != 0)
        return cli_usage_error("history", "--state: %s", err);
    const char *fmt = a->format ? a->format : getenv("SACCT_FORMAT");
    if (sacct_format_parse(fmt && fmt[0] ? fmt : SACCT_DEFAULT_FORMAT, p->cols, &p->ncols, err,
                           sizeof(err)) != 0)
        return cli_usage_error("history", "%s", err);
    if (a->start) {
        if (time_param("--starttime", a->start, now, p->since, sizeof(p->since)) != 0)
            return CLI_EXIT_USAGE;
    } else if (!a->jobs && !a->state && slurm_time_parse("midnight", now, &ms) == 0) {
        timefmt_rfc3339(ms, p->since, sizeof(p->since));
    }
    if (a->end && time_param("--endtime", a->end, now, p->until, sizeof(p->until)) != 0)
        return CLI_EXIT_USAGE;
    p->q = (struct client_history_query){
        .states = a->state ? slurm_api_states(p->slurm_states) : 0,
        .jobs = a->jobs,
        .team = a->team && !strchr(a->team, ',') ? a->team : NULL,
        .user = a->user && !strchr(a->user, ',') ? a->user : NULL,
        .since = p->since[0] ? p->since : NULL,
        .until = p->until[0] ? p->until : NULL,
    };
    if (p->slurm_states & (1u << SLURM_FAILED))
        p->slurm_states |= 1u << SLURM_OUT_OF_MEMORY;
    p->mine = !a->jobs && !a->user && !a->team && !a->all_users;
    return 0;
}

static int history_fetch(struct history_args *a, struct history_plan *p, json_t **ret)
{
    struct cli c;
    char err[CLI_ERR_MAX], me[256] = "";
    json_t *all = NULL, *who = NULL;
    int rc = cli_connect(&c, "history", &a->co);
    if (rc == 0 && p->mine && (rc = client_whoami(&c.client, &who, err, sizeof(err))) != 0)
        rc = cli_fail_call("history", rc, err);
    if (rc == 0 && p->mine) {
        snprintf(me, sizeof(me), "%s", cli_json_str(who, "name") ? cli_json_str(who, "name") : "");
        p->q.user = me;
    }
    if (rc == 0 && !(all = json_array()))
        rc = cli_fail("history", "out of memory");
    int r = rc ? 0 : client_jobs_history(&c.client, &p->q, all, err, sizeof(err));
    if (r == GPO_ENAMETOOLONG)
        rc = cli_usage_error("history", "--jobs, --user or --account is too long");
    else if (r)
        rc = cli_fail_call("history", r, err);
    p->q.user = NULL;
    json_decref(who);
    cli_disconnect(&c);
    if (rc) {
        json_decref(all);
        return rc;
    }
    for (size_t k = json_array_size(all); k-- > 0;) {
        const json_t *j = json_array_get(all, k);
        if (!(p->slurm_states & (1u << slurm_job_state(j))) ||
            !slurm_in_list(a->user, cli_json_str(j, "user"), false) ||
            !slurm_in_list(a->team, cli_json_str(j, "team"), false))
            json_array_remove(all, k);
    }
    *ret = all;
    return 0;
}

/* Writes text with control characters shown as '?'. */
static void put_text(const char *s)
{
    for (const char *c = s; *c; c++)
        putchar((unsigned char)*c < 0x20 || *c == 0x7f ? '?' : *c);
}

static void print_rows(const struct history_args *a, const struct history_plan *p,
                       const json_t *all)
{
    bool parsable = a->parsable || a->parsable2;
    int64_t now = cli_now_ms();
    char text[CELL_LEN], cell[CELL_LEN];
    for (long r = a->noheader ? 0 : parsable ? -1 : -2; r < (long)json_array_size(all); r++) {
        for (size_t k = 0; k < p->ncols; k++) {
            const struct sacct_col *col = &p->cols[k];
            const char *v = text;
            /* -2: the header; -1: the dashes (the header when parsable). */
            bool dashes = r == -1 && !parsable;
            if (r < 0 && !dashes) {
                v = sacct_field_header(col->field);
            } else if (dashes) {
                int w = col->width < (int)sizeof(text) - 1 ? col->width : (int)sizeof(text) - 1;
                memset(text, '-', (size_t)w);
                text[w] = '\0';
            } else {
                sacct_field_text(col->field, json_array_get(all, (size_t)r), now, text,
                                 sizeof(text));
            }
            if (parsable) {
                put_text(v);
                if (k + 1 < p->ncols || a->parsable)
                    putchar('|');
            } else {
                put_text(slurm_cell(v, col->width, col->left, cell, sizeof(cell)));
                putchar(' ');
            }
        }
        putchar('\n');
    }
}

static int print_json(const json_t *all)
{
    char id[64];
    for (size_t k = 0; k < json_array_size(all); k++) {
        json_t *j = json_array_get(all, k);
        sacct_field_text(SACCT_JOBID, j, 0, id, sizeof(id));
        if (json_object_set_new(j, "job_id", json_string(id)) ||
            json_object_set_new(j, "slurm_state",
                                json_string(slurm_state_name(slurm_job_state(j)))))
            return cli_fail("history", "out of memory");
    }
    json_t *out = json_pack("{s:O}", "jobs", all);
    int rc = out && cli_print_json(out) ? 0 : cli_fail("history", "out of memory");
    json_decref(out);
    return rc;
}

int history_command(int argc, char **argv)
{
    struct history_args a = {0};
    const char **pos = NULL;
    size_t npos = 0;
    int rc = cli_parse_args("history", argc, argv, CLI_OPTS(history_opts), &a, &pos, &npos);
    if (rc == 0 && a.co.help)
        history_usage(stdout);
    else if (rc == 0 && npos)
        rc = cli_usage_error("history", "unexpected argument '%s' (see 'gpuorch history --help')",
                             pos[0]);
    else if (rc == 0 && a.parsable && a.parsable2)
        rc = cli_usage_error("history", "-p and -P exclude each other");
    free(pos);
    if (rc || a.co.help)
        return rc;
    struct history_plan p = {0};
    json_t *all = NULL;
    if ((rc = history_plan(&a, &p)) != 0 || (rc = history_fetch(&a, &p, &all)) != 0)
        return rc;
    if (a.co.json)
        rc = print_json(all);
    else
        print_rows(&a, &p, all);
    json_decref(all);
    return rc;
}

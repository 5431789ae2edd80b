/*
 * cancel.c - gpuorch cancel, as scancel (jobs.h): the jobs named, an
 * array's tasks, or the live jobs that scancel's filters select.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/jobs.h"
#include "cli/slurm.h"
#include "client/client.h"
#include "util/opts.h"
#include "base/banned.h"

struct cancel_args {
    struct cli_common co;
    const char *user, *name, *state, *team, *pools;
    bool me, quiet;
    char me_name[256]; /* --me: the token's user */
};

#define ARG(m) offsetof(struct cancel_args, m)
static const struct opts_opt cancel_opts[] = {
    {.name = "user", .short_name = 'u', .type = OPTS_STRING, .offset = ARG(user)},
    {.name = "me", .type = OPTS_FLAG, .offset = ARG(me)},
    {.name = "name", .short_name = 'n', .type = OPTS_STRING, .offset = ARG(name)},
    {.name = "jobname", .type = OPTS_STRING, .offset = ARG(name)},
    {.name = "state", .short_name = 't', .type = OPTS_STRING, .offset = ARG(state)},
    {.name = "account", .short_name = 'A', .type = OPTS_STRING, .offset = ARG(team)},
    {.name = "partition", .short_name = 'p', .type = OPTS_STRING, .offset = ARG(pools)},
    {.name = "quiet", .short_name = 'Q', .type = OPTS_FLAG, .offset = ARG(quiet)},
    CLI_OPTS_COMMON(struct cancel_args, co),
};
#undef ARG

static void cancel_usage(FILE *out)
{
    fprintf(out, "usage: gpuorch cancel [JOB...] [-u USER | --me] [-n NAME] [-t STATE] [-A TEAM]\n"
                 "                      [-p POOL] [-Q]\n"
                 "\n"
                 "Cancels jobs as scancel does: a pending one at once; a running one is stopped\n"
                 "by its agent (SIGTERM, then SIGKILL after the grace period) and ends\n"
                 "CANCELLED. JOB is an id (an array's id: its pending and running tasks too),\n"
                 "or ARRAY_INDEX (41_7) for one task. With filters and no JOB, every pending\n"
                 "or running job they select; with both, the named jobs the filters select.\n"
                 "One line per job; the exit code is 1 if any could not be cancelled.\n"
                 "\n"
                 "  -u, --user U[,U]    jobs of these users; --me: yours\n"
                 "  -n, --name N[,N]    jobs of these names (--jobname too)\n"
                 "  -t, --state S[,S]   jobs in these states (PENDING, RUNNING; PD, R)\n"
                 "  -A, --account T     jobs of these teams\n"
                 "  -p, --partition P   jobs that asked for these pools\n"
                 "  -Q, --quiet         no line for a job cancelled\n");
    cli_help_common(out, false);
}

/* Whether the command's filters select job j. */
static bool filters_take(const struct cancel_args *a, unsigned states, const json_t *j)
{
    const json_t *spec = json_object_get(j, "spec");
    return (states & (1u << slurm_job_state(j))) &&
           slurm_in_list(a->user, cli_json_str(j, "user"), false) &&
           slurm_in_list(a->name, cli_json_str(spec, "name"), false) &&
           slurm_in_list(a->team, cli_json_str(j, "team"), false) &&
           slurm_in_list(a->pools, cli_json_str(spec, "pool"), false);
}

static bool has(const int64_t *ids, size_t n, int64_t id)
{
    for (size_t k = 0; k < n; k++)
        if (ids[k] == id)
            return true;
    return false;
}

/* The jobs to cancel, each once, into ids (room for `cap`): each word's
 * (the job itself, unless filtered, then its array's live tasks), or with no
 * word every live job the filters select. CLI_EXIT_USAGE, printed, for a
 * task that is not live or too many jobs. */
static int targets(const struct cancel_args *a, bool filtered, unsigned states, const json_t *live,
                   const struct slurm_job_sel *sel, size_t nsel, int64_t *ids, size_t cap,
                   size_t *ret_n)
{
    size_t n = 0;
    for (size_t k = 0; k < nsel; k++) {
        bool found = false;
        if (sel[k].index < 0 && !filtered && n < cap && !has(ids, n, sel[k].id))
            ids[n++] = sel[k].id; /* the API says what it makes of it (404, 409) */
        for (size_t i = 0; i < json_array_size(live); i++) {
            const json_t *j = json_array_get(live, i);
            int64_t id = json_integer_value(json_object_get(j, "id"));
            if (!slurm_job_selected(&sel[k], 1, j) || !filters_take(a, states, j))
                continue;
            found = true;
            if (n == cap)
                return cli_usage_error("cancel", "more than %zu jobs at once", cap);
            if (!has(ids, n, id))
                ids[n++] = id;
        }
        if (!found && sel[k].index >= 0)
            return cli_fail("cancel", "no pending or running task %" PRId64 "_%" PRId64, sel[k].id,
                            sel[k].index);
    }
    for (size_t i = 0; nsel == 0 && i < json_array_size(live); i++) {
        const json_t *j = json_array_get(live, i);
        if (!filters_take(a, states, j))
            continue;
        if (n == cap)
            return cli_usage_error("cancel", "more than %zu jobs at once", cap);
        ids[n++] = json_integer_value(json_object_get(j, "id"));
    }
    *ret_n = n;
    return 0;
}

/* The pending and running jobs the user sees (their team's, or every one). */
static int live_jobs(struct cli *c, struct cancel_args *a, json_t **ret)
{
    char err[CLI_ERR_MAX];
    json_t *me = NULL, *all = json_array();
    int rc = all ? 0 : cli_fail("cancel", "out of memory");
    if (rc == 0 && a->me) {
        if ((rc = client_whoami(&c->client, &me, err, sizeof(err))) != 0)
            rc = cli_fail_call("cancel", rc, err);
        snprintf(a->me_name, sizeof(a->me_name), "%s", me ? cli_json_str(me, "name") : "");
        a->user = a->me_name;
        json_decref(me);
    }
    struct client_jobs_filter f = {.states =
                                       (1u << CLIENT_JOB_PENDING) | (1u << CLIENT_JOB_RUNNING),
                                   .user = a->user && !strchr(a->user, ',') ? a->user : NULL};
    if (rc == 0 && (rc = client_jobs_list(&c->client, &f, all, err, sizeof(err))) != 0)
        rc = cli_fail_call("cancel", rc, err);
    if (rc) {
        json_decref(all);
        return rc;
    }
    *ret = all;
    return 0;
}

static int cancel_each(struct cli *c, const int64_t *ids, size_t n, bool quiet)
{
    int rc = 0;
    for (size_t k = 0; k < n; k++) {
        char err[CLI_ERR_MAX];
        bool stopping = false;
        int r = client_jobs_cancel(&c->client, ids[k], &stopping, err, sizeof(err));
        if (r)
            rc = cli_fail_call("cancel", r, err);
        else if (quiet)
            continue;
        else if (stopping)
            printf("Cancelling job %" PRId64 ": its agent is stopping it\n", ids[k]);
        else
            printf("Cancelled job %" PRId64 "\n", ids[k]);
    }
    return rc;
}

/* The words as selectors: CLI_EXIT_USAGE, printed, for one that is none. */
static int words_parse(const char **pos, size_t npos, struct slurm_job_sel *sel, size_t *ret_n)
{
    size_t n = 0;
    for (size_t k = 0; k < npos; k++) {
        char err[CLI_ERR_MAX];
        size_t one = 0;
        if (strchr(pos[k], ',') || n == SLURM_JOB_SELS_MAX ||
            slurm_jobs_parse(pos[k], &sel[n], &one, err, sizeof(err)) != 0)
            return cli_usage_error("cancel", "'%s' is not a job id (JOB or ARRAY_INDEX)", pos[k]);
        n += one;
    }
    *ret_n = n;
    return 0;
}

int jobs_cancel_command(int argc, char **argv)
{
    struct cancel_args a = {0};
    const char **pos = NULL;
    size_t npos = 0, nsel = 0;
    struct slurm_job_sel sel[SLURM_JOB_SELS_MAX];
    unsigned states = (1u << SLURM_PENDING) | (1u << SLURM_REQUEUED) | (1u << SLURM_RUNNING);
    char err[CLI_ERR_MAX];
    int rc = cli_parse_args("cancel", argc, argv, CLI_OPTS(cancel_opts), &a, &pos, &npos);
    bool filtered = a.user || a.me || a.name || a.state || a.team || a.pools;
    if (rc == 0 && a.co.help)
        cancel_usage(stdout);
    else if (rc == 0 && npos == 0 && !filtered)
        rc = cli_usage_error("cancel", "expected JOB... or a filter (see 'gpuorch cancel --help')");
    else if (rc == 0 && a.me && a.user)
        rc = cli_usage_error("cancel", "--me and --user exclude each other");
    else if (rc == 0 && a.state && slurm_states_parse(a.state, &states, err, sizeof(err)) != 0)
        rc = cli_usage_error("cancel", "--state: %s", err);
    else if (rc == 0)
        rc = words_parse(pos, npos, sel, &nsel);
    free(pos);
    if (rc || a.co.help)
        return rc;
    if (states & (1u << SLURM_PENDING))
        states |= 1u << SLURM_REQUEUED;
    struct cli c;
    json_t *live = NULL;
    int64_t ids[SLURM_JOB_SELS_MAX * 16];
    size_t n = 0;
    if ((rc = cli_connect(&c, "cancel", &a.co)) == 0 && (rc = live_jobs(&c, &a, &live)) == 0 &&
        (rc = targets(&a, filtered, states, live, sel, nsel, ids, sizeof(ids) / sizeof(ids[0]),
                      &n)) == 0)
        rc = cancel_each(&c, ids, n, a.quiet);
    json_decref(live);
    cli_disconnect(&c);
    return rc;
}

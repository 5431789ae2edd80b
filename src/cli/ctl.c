/*
 * ctl.c - hold, release, requeue and update (ctl.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"
#include "cli/cli.h"
#include "cli/ctl.h"
#include "cli/sbatch.h"
#include "client/client.h"
#include "util/errbuf.h"
#include "util/timefmt.h"
#include "base/banned.h"

struct ctl_args {
    struct cli_common co;
};

static const struct opts_opt ctl_opts[] = {
    CLI_OPTS_COMMON(struct ctl_args, co),
    CLI_OPT_JSON(struct ctl_args, co),
};

/* Each command: its name, the action (update has none), its help and the
 * verb of its lines. */
static const struct {
    const char *name;
    enum client_job_action action;
    const char *usage, *help, *done;
} cmds[] = {
    {"hold", CLIENT_JOB_HOLD, "JOB...",
     "Keeps pending jobs from starting: they wait with the reason \"held by user\"\n"
     "(an admin's hold: \"held by an admin\", which only an admin releases).\n"
     "A running or ended job cannot be held.\n",
     "Held"},
    {"release", CLIENT_JOB_RELEASE, "JOB...", "Lets held jobs be scheduled again.\n", "Released"},
    {"requeue", CLIENT_JOB_REQUEUE, "JOB...",
     "Puts jobs back in the queue: a running job's attempt is stopped (SIGTERM,\n"
     "then SIGKILL after the grace period) and a new one starts later; an ended\n"
     "job (COMPLETED, FAILED, CANCELLED, TIMEOUT) waits again. The id stays.\n",
     "Requeued"},
    {"update", CLIENT_JOB_HOLD, "JOB FIELD=VALUE...",
     "Changes a job's fields, as scontrol update does:\n"
     "  TimeLimit=DURATION     Slurm's forms (90, 1:30:00, 2-00:00:00) or 30m, 4h;\n"
     "                         a user may only lower it; a running job's attempt\n"
     "                         gets the new limit\n"
     "  Priority=CLASS         a priority class\n"
     "  Dependency=afterok:ID[:ID...][,afterany:ID...]   (a pending job's)\n",
     "Updated"},
};
enum { CMD_HOLD, CMD_RELEASE, CMD_REQUEUE, CMD_UPDATE };

static void usage(FILE *out, size_t k)
{
    fprintf(out,
            "usage: gpuorch %s %s\n\n%s\n"
            "JOB is a job id, ARRAY_TASK (41_7) for one task of an array, or an array's\n"
            "id for every task of it. One line per job changed; the exit code is 1 if\n"
            "any JOB could not be changed.\n",
            cmds[k].name, cmds[k].usage, cmds[k].help);
    cli_help_common(out, true);
}

/* One field of update: its names, and how its value becomes JSON. */
static int time_limit_value(const char *v, json_t **ret, char *err, size_t errlen)
{
    int64_t s = 0;
    int rc = timefmt_parse_duration(v, &s);
    if (rc)
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "TimeLimit: '%s' is not a duration (MM, HH:MM:SS, D-HH:MM:SS, 30m, 4h, "
                          "UNLIMITED)",
                          v);
    *ret = json_integer(s == TIMEFMT_UNLIMITED ? 0 : s);
    return *ret ? 0 : GPO_ENOMEM;
}

static int priority_value(const char *v, json_t **ret, char *err, size_t errlen)
{
    if (!*v)
        return errbuf_set(err, errlen, GPO_EUSAGE, "Priority: expected a priority class's name");
    *ret = json_string(v);
    return *ret ? 0 : GPO_ENOMEM;
}

static int dependency_value(const char *v, json_t **ret, char *err, size_t errlen)
{
    char why[256];
    if (sbatch_parse_dependency(v, ret, why, sizeof(why)) != 0)
        return errbuf_set(err, errlen, GPO_EUSAGE, "Dependency: %s", why);
    return 0;
}

static const struct {
    const char *names[2];
    const char *key;
    int (*value)(const char *v, json_t **ret, char *err, size_t errlen);
} fields[] = {
    {{"timelimit", "time_limit"}, "time_limit_s", time_limit_value},
    {{"priority", "qos"}, "priority", priority_value},
    {{"dependency", "dependencies"}, "dependencies", dependency_value},
};

int ctl_update_fields(const char *const *words, size_t n, json_t **ret, char *err, size_t errlen)
{
    json_t *o = json_object();
    int rc = o ? 0 : GPO_ENOMEM;
    for (size_t k = 0; !rc && k < n; k++) {
        const char *eq = strchr(words[k], '=');
        size_t len = eq ? (size_t)(eq - words[k]) : 0, f = 0;
        while (f < sizeof(fields) / sizeof(fields[0]) &&
               !(eq && ((strlen(fields[f].names[0]) == len &&
                         strncasecmp(fields[f].names[0], words[k], len) == 0) ||
                        (strlen(fields[f].names[1]) == len &&
                         strncasecmp(fields[f].names[1], words[k], len) == 0))))
            f++;
        if (f == sizeof(fields) / sizeof(fields[0])) {
            rc = errbuf_set(err, errlen, GPO_EUSAGE,
                            "'%s': expected FIELD=VALUE with FIELD one of TimeLimit, Priority, "
                            "Dependency",
                            words[k]);
            break;
        }
        json_t *v = NULL;
        rc = fields[f].value(eq + 1, &v, err, errlen);
        if (!rc && json_object_set_new(o, fields[f].key, v))
            rc = GPO_ENOMEM;
    }
    if (rc) {
        json_decref(o);
        return rc;
    }
    *ret = o;
    return 0;
}

/* Prints the jobs an answer says were changed. */
static void print_changed(size_t k, const json_t *answer)
{
    const json_t *jobs = json_object_get(answer, "jobs");
    for (size_t i = 0; i < json_array_size(jobs); i++) {
        const json_t *j = json_array_get(jobs, i);
        json_int_t id = json_integer_value(json_object_get(j, "id"));
        const json_t *hold = json_object_get(j, "hold");
        printf("%s job %" JSON_INTEGER_FORMAT, cmds[k].done, id);
        if (json_object_get(j, "array_id"))
            printf(" (task %" JSON_INTEGER_FORMAT "_%" JSON_INTEGER_FORMAT ")",
                   json_integer_value(json_object_get(j, "array_id")),
                   json_integer_value(json_object_get(j, "array_index")));
        if (k == CMD_HOLD && json_is_string(hold))
            printf(": held by %s",
                   strcmp(json_string_value(hold), "admin") == 0 ? "an admin" : "user");
        printf("\n");
    }
}

static int run(size_t k, int argc, char **argv)
{
    const char *cmd = cmds[k].name;
    struct ctl_args a = {0};
    const char **pos = NULL;
    size_t npos = 0;
    int rc = cli_parse_args(cmd, argc, argv, CLI_OPTS(ctl_opts), &a, &pos, &npos);
    json_t *fields_body = NULL;
    char err[CLI_ERR_MAX];
    if (rc == 0 && a.co.help)
        usage(stdout, k);
    else if (rc == 0 && (npos == 0 || (k == CMD_UPDATE && npos < 2)))
        rc = cli_usage_error(cmd, "expected %s (see 'gpuorch %s --help')", cmds[k].usage, cmd);
    else if (rc == 0 && k == CMD_UPDATE &&
             (rc = ctl_update_fields(pos + 1, npos - 1, &fields_body, err, sizeof(err))) != 0)
        rc = rc == GPO_ENOMEM ? cli_fail(cmd, "out of memory") : cli_usage_error(cmd, "%s", err);
    struct cli c = {0};
    if (rc || a.co.help || (rc = cli_connect(&c, cmd, &a.co)) != 0) {
        free(pos);
        json_decref(fields_body);
        cli_disconnect(&c);
        return rc;
    }
    size_t njobs = k == CMD_UPDATE ? 1 : npos;
    for (size_t i = 0; i < njobs; i++) {
        json_t *answer = NULL;
        int r =
            k == CMD_UPDATE
                ? client_jobs_update(&c.client, pos[i], fields_body, &answer, err, sizeof(err))
                : client_jobs_action(&c.client, pos[i], cmds[k].action, &answer, err, sizeof(err));
        if (r)
            rc = cli_fail_call(cmd, r, err);
        else if (a.co.json)
            cli_print_json(answer);
        else
            print_changed(k, answer);
        json_decref(answer);
    }
    cli_disconnect(&c);
    free(pos);
    json_decref(fields_body);
    return rc;
}

int ctl_hold_command(int argc, char **argv)
{
    return run(CMD_HOLD, argc, argv);
}

int ctl_release_command(int argc, char **argv)
{
    return run(CMD_RELEASE, argc, argv);
}

int ctl_requeue_command(int argc, char **argv)
{
    return run(CMD_REQUEUE, argc, argv);
}

int ctl_update_command(int argc, char **argv)
{
    return run(CMD_UPDATE, argc, argv);
}

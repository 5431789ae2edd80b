/*
 * jobs.c - show, logs and whoami (jobs.h); queue is queue.c, cancel cancel.c.
 */
#include "cli/jobs.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/table.h"
#include "client/client.h"
#include "util/opts.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define TEXT_LEN     256

static int job_id(const char *cmd, const char *s, int64_t *ret)
{
    if (opts_parse_int(s, 1, INT64_MAX, ret) != 0)
        return cli_usage_error(cmd, "'%s' is not a job id (a positive whole number)", s);
    return 0;
}

const char *jobs_gpus_text(const json_t *spec, char *buf, size_t len)
{
    const json_t *g = json_object_get(spec, "gpus");
    const char *type = cli_json_str(spec, "gpu_type");
    json_int_t mem = json_integer_value(json_object_get(spec, "gpu_mem_mib"));
    const char *mig = cli_json_str(spec, "mig_profile");
    char n[64], size[32];
    if (mig)
        snprintf(n, sizeof(n), "%s", mig); /* one MIG instance: "1g.10gb" */
    else if (json_is_real(g))
        snprintf(n, sizeof(n), "%g", json_real_value(g));
    else if (json_integer_value(g) == 0 && mem > 0)
        snprintf(n, sizeof(n), "mem:%s", cli_size_text(mem, size, sizeof(size)));
    else
        snprintf(n, sizeof(n), "%" JSON_INTEGER_FORMAT, json_integer_value(g));
    snprintf(buf, len, "%s%s%s", type ? type : "", type ? ":" : "", n);
    return buf;
}

/* The nodes of a job's current attempt, comma-separated; "" for none. */
static const char *nodes_text(const json_t *job, char *buf, size_t len, size_t *ret_n)
{
    const json_t *nodes = json_object_get(json_object_get(job, "current_attempt"), "nodes");
    size_t at = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < json_array_size(nodes) && at < len; k++) {
        const char *n = json_string_value(json_array_get(nodes, k));
        at += (size_t)snprintf(buf + at, len - at, "%s%s", k ? "," : "", n ? n : "?");
    }
    *ret_n = json_array_size(nodes);
    return buf;
}

void jobs_span_text(int64_t ms, char *buf, size_t len)
{
    int64_t s = ms > 0 ? ms / 1000 : 0;
    if (s >= 2 * INT64_C(86400))
        snprintf(buf, len, "%" PRId64 "d", s / 86400);
    else if (s >= 2 * INT64_C(3600))
        snprintf(buf, len, "%" PRId64 "h", s / 3600);
    else if (s >= 120)
        snprintf(buf, len, "%" PRId64 "m", s / 60);
    else
        snprintf(buf, len, "%" PRId64 "s", s);
}

/* ---- show ------------------------------------------------------------------ */

struct one_job_args {
    struct cli_common co;
};

static const struct opts_opt show_opts[] = {
    CLI_OPT_JSON(struct one_job_args, co),
    CLI_OPTS_COMMON(struct one_job_args, co),
};

static void show_usage(FILE *out)
{
    fprintf(out, "usage: gpuorch show JOB [--json]\n"
                 "\n"
                 "Shows one job: what it asks for, its state, why it waits and when it should\n"
                 "start (from the last scheduling pass), its current attempt and every attempt\n"
                 "so far (nodes, start, end, exit code or signal, reason).\n");
    cli_help_common(out, true);
}

/* "label:          value", the value's control characters shown as '?' (a
 * command or a reason may hold any text). */
static void line(const char *label, const char *value)
{
    printf("%-17s", label);
    if (!value || !value[0])
        value = "-";
    for (const char *p = value; *p; p++)
        putchar((unsigned char)*p < 0x20 || *p == 0x7f ? '?' : *p);
    putchar('\n');
}

static void show_spec(const json_t *spec)
{
    char buf[TEXT_LEN * 4], size[32];
    line("priority:",
         cli_json_str(spec, "priority") ? cli_json_str(spec, "priority") : "(the default class)");
    line("pool:", cli_json_str(spec, "pool") ? cli_json_str(spec, "pool") : "(any)");
    line("project:", cli_json_str(spec, "project"));
    line("model:", cli_json_str(spec, "model"));
    line("gpus:", jobs_gpus_text(spec, buf, sizeof(buf)));
    json_int_t min_mem = json_integer_value(json_object_get(spec, "min_gpu_mem_mib"));
    if (min_mem > 0)
        line("gpu memory:", cli_size_text(min_mem, size, sizeof(size)));
    snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT,
             json_integer_value(json_object_get(spec, "cpus")));
    line("cpus:", buf);
    line("memory:",
         cli_size_text(json_integer_value(json_object_get(spec, "mem_mib")), size, sizeof(size)));
    json_int_t limit = json_integer_value(json_object_get(spec, "time_limit_s"));
    if (limit <= 0 || timefmt_duration(limit, buf, sizeof(buf)) != 0)
        snprintf(buf, sizeof(buf), "none");
    line("time limit:", buf);
    const json_t *cmd = json_object_get(spec, "command");
    size_t at = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < json_array_size(cmd) && at < sizeof(buf); k++)
        at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%s%s", k ? " " : "",
                               json_string_value(json_array_get(cmd, k)));
    const char *script = cli_json_str(spec, "script");
    if (script) {
        const char *nl = strchr(script, '\n');
        snprintf(buf, sizeof(buf), "a script of %zu bytes: %.*s", strlen(script),
                 (int)(nl ? (size_t)(nl - script) : strlen(script)), script);
    }
    line("command:", buf);
    line("workdir:", cli_json_str(spec, "workdir"));
    line("output:", cli_json_str(spec, "output"));
    line("error:", cli_json_str(spec, "error"));
    const json_t *env = json_object_get(spec, "env");
    snprintf(buf, sizeof(buf), "%zu variable%s", json_object_size(env),
             json_object_size(env) == 1 ? "" : "s");
    line("environment:", buf);
}

static void show_relations(const json_t *job, const json_t *spec)
{
    char buf[TEXT_LEN * 4];
    const json_t *deps = json_object_get(spec, "dependencies");
    size_t at = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < json_array_size(deps) && at < sizeof(buf); k++) {
        const json_t *d = json_array_get(deps, k);
        at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%s%s:%" JSON_INTEGER_FORMAT,
                               k ? "," : "", cli_json_str(d, "type"),
                               json_integer_value(json_object_get(d, "job")));
    }
    line("dependencies:", buf);
    if (json_object_get(job, "array_id")) {
        snprintf(buf, sizeof(buf),
                 "task %" JSON_INTEGER_FORMAT " of array %" JSON_INTEGER_FORMAT " (%s)",
                 json_integer_value(json_object_get(job, "array_index")),
                 json_integer_value(json_object_get(job, "array_id")),
                 cli_json_str(spec, "array") ? cli_json_str(spec, "array") : "-");
        line("array:", buf);
    }
    snprintf(buf, sizeof(buf), "%s%s%s",
             json_is_true(json_object_get(spec, "requeue")) ? "requeued when preempted"
                                                            : "not requeued when preempted",
             json_is_true(json_object_get(spec, "checkpointable")) ? ", checkpointable" : "",
             json_is_true(json_object_get(spec, "multi_node")) ? ", may span nodes" : "");
    line("options:", buf);
    snprintf(buf, sizeof(buf),
             "%" JSON_INTEGER_FORMAT " made, %" JSON_INTEGER_FORMAT " retries allowed",
             json_integer_value(json_object_get(job, "attempts_made")),
             json_integer_value(json_object_get(spec, "max_retries")));
    line("attempts:", buf);
    /* What its attempts cost so far (docs/cost.md). */
    if (json_is_number(json_object_get(job, "cost"))) {
        snprintf(buf, sizeof(buf), "%.2f", json_number_value(json_object_get(job, "cost")));
        line("cost:", buf);
    }
}

static void show_attempts(const json_t *job)
{
    const json_t *cur = json_object_get(job, "current_attempt");
    char nodes[TEXT_LEN * 4];
    size_t nn;
    if (cur) {
        char buf[TEXT_LEN * 4];
        snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT " %s on %s (%zu GPU%s%s)",
                 json_integer_value(json_object_get(cur, "attempt")), cli_json_str(cur, "state"),
                 nodes_text(job, nodes, sizeof(nodes), &nn),
                 json_array_size(json_object_get(cur, "gpus")),
                 json_array_size(json_object_get(cur, "gpus")) == 1 ? "" : "s",
                 json_is_true(json_object_get(cur, "borrowed")) ? ", borrowed" : "");
        line("current attempt:", buf);
    }
    const json_t *atts = json_object_get(job, "attempts");
    if (!json_array_size(atts))
        return;
    static const char *const head[] = {"ATTEMPT", "STATE", "NODES", "STARTED",
                                       "ENDED",   "EXIT",  "REASON"};
    struct table *t = table_new(ARRAY_LEN(head), head);
    for (size_t k = 0; t && k < json_array_size(atts); k++) {
        const json_t *a = json_array_get(atts, k), *names = json_object_get(a, "nodes");
        char n[16], exit[32] = "-";
        size_t at = 0;
        nodes[0] = '\0';
        for (size_t i = 0; i < json_array_size(names) && at < sizeof(nodes); i++)
            at += (size_t)snprintf(nodes + at, sizeof(nodes) - at, "%s%s", i ? "," : "",
                                   json_string_value(json_array_get(names, i)));
        snprintf(n, sizeof(n), "%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(a, "attempt")));
        if (json_is_integer(json_object_get(a, "exit_code")))
            snprintf(exit, sizeof(exit), "%" JSON_INTEGER_FORMAT,
                     json_integer_value(json_object_get(a, "exit_code")));
        else if (json_is_integer(json_object_get(a, "signal")))
            snprintf(exit, sizeof(exit), "signal %" JSON_INTEGER_FORMAT,
                     json_integer_value(json_object_get(a, "signal")));
        const char *cells[] = {n,
                               cli_json_str(a, "state"),
                               nodes,
                               cli_json_str(a, "started_at"),
                               cli_json_str(a, "ended_at"),
                               exit,
                               cli_json_str(a, "reason")};
        if (table_add(t, cells) != 0)
            break;
    }
    if (t) {
        printf("\n");
        table_print(t, stdout);
    }
    table_free(t);
}

/* "idle: since T (GPUs under 5% for 35m, window 30m); requeue at T". */
static void show_idle(const json_t *job, int64_t now)
{
    const json_t *idle = json_object_get(job, "idle");
    int64_t since;
    if (!json_is_object(idle) || timefmt_parse_rfc3339(cli_json_str(idle, "since"), &since))
        return;
    char buf[TEXT_LEN * 2], span[32], win[32];
    jobs_span_text(now - since, span, sizeof(span));
    jobs_span_text(json_integer_value(json_object_get(idle, "window_s")) * 1000, win, sizeof(win));
    const char *action = cli_json_str(idle, "action");
    const char *at = cli_json_str(idle, "action_at");
    int n = snprintf(buf, sizeof(buf),
                     "since %s (GPUs under %" JSON_INTEGER_FORMAT "%% for %s; window %s)",
                     cli_json_str(idle, "since"),
                     json_integer_value(json_object_get(idle, "threshold_pct")), span, win);
    if (n > 0 && (size_t)n < sizeof(buf))
        snprintf(buf + n, sizeof(buf) - (size_t)n, "; %s%s%s", action ? action : "report",
                 at ? " at " : " only", at ? at : "");
    line("idle:", buf);
}

static void show_job(const json_t *job)
{
    const json_t *spec = json_object_get(job, "spec");
    char buf[TEXT_LEN], age[32];
    int64_t now = cli_now_ms();
    snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT,
             json_integer_value(json_object_get(job, "id")));
    line("job:", buf);
    line("name:", cli_json_str(spec, "name"));
    line("state:", cli_json_str(job, "state"));
    line("user:", cli_json_str(job, "user"));
    line("team:", cli_json_str(job, "team"));
    snprintf(buf, sizeof(buf), "%s (%s)", cli_json_str(job, "submitted_at"),
             cli_age(cli_json_str(job, "submitted_at"), now, age, sizeof(age)));
    line("submitted:", buf);
    line("updated:", cli_json_str(job, "updated_at"));
    if (strcmp(cli_json_str(job, "state") ? cli_json_str(job, "state") : "", "PENDING") == 0) {
        line("waits because:", cli_json_str(job, "wait_reason") ? cli_json_str(job, "wait_reason")
                                                                : "(no scheduling pass yet)");
        line("estimated start:",
             cli_json_str(job, "estimated_start")        ? cli_json_str(job, "estimated_start")
             : cli_json_str(job, "estimated_start_note") ? cli_json_str(job, "estimated_start_note")
                                                         : "(unknown)");
    }
    if (cli_json_str(job, "reason"))
        line("reason:", cli_json_str(job, "reason"));
    show_idle(job, now);
    show_spec(spec);
    show_relations(job, spec);
    show_attempts(job);
}

int jobs_show_command(int argc, char **argv)
{
    struct one_job_args a = {0};
    const char **pos = NULL;
    size_t npos = 0;
    int64_t id = 0;
    int rc = cli_parse_args("show", argc, argv, CLI_OPTS(show_opts), &a, &pos, &npos);
    if (rc == 0 && a.co.help)
        show_usage(stdout);
    else if (rc == 0 && npos != 1)
        rc = cli_usage_error("show", "expected one JOB (see 'gpuorch show --help')");
    else if (rc == 0)
        rc = job_id("show", pos[0], &id);
    free(pos);
    if (rc || a.co.help)
        return rc;
    struct cli c;
    json_t *job = NULL;
    char err[CLI_ERR_MAX];
    if ((rc = cli_connect(&c, "show", &a.co)) == 0 &&
        (rc = client_jobs_get(&c.client, id, &job, err, sizeof(err))) != 0)
        rc = cli_fail_call("show", rc, err);
    cli_disconnect(&c);
    if (rc == 0 && a.co.json)
        rc = cli_print_json(job) ? 0 : cli_fail("show", "out of memory");
    else if (rc == 0)
        show_job(job);
    json_decref(job);
    return rc;
}

/* Reads the flags and the JOB... words of a command into a new array *ret
 * (caller frees). CLI_EXIT_USAGE, printed. */
static int job_ids(const char *cmd, int argc, char **argv, const struct opts_opt *opts, size_t n,
                   void *args, int64_t **ret, size_t *ret_n)
{
    const char **pos = NULL;
    size_t npos = 0;
    int rc = cli_parse_args(cmd, argc, argv, opts, n, args, &pos, &npos);
    int64_t *ids = rc ? NULL : calloc(npos + 1, sizeof(*ids));
    if (rc == 0 && !ids)
        rc = cli_fail(cmd, "out of memory");
    for (size_t k = 0; rc == 0 && k < npos; k++)
        rc = job_id(cmd, pos[k], &ids[k]);
    free(pos);
    if (rc) {
        free(ids);
        return rc;
    }
    *ret = ids;
    *ret_n = npos;
    return 0;
}

/* ---- logs --------------------------------------------------------------------- */

struct logs_args {
    struct cli_common co;
    int64_t attempt, rank;
    bool follow, stderr_stream;
};

static const struct opts_opt logs_opts[] = {
    {.name = "follow",
     .short_name = 'f',
     .type = OPTS_FLAG,
     .offset = offsetof(struct logs_args, follow)},
    {.name = "stderr", .type = OPTS_FLAG, .offset = offsetof(struct logs_args, stderr_stream)},
    {.name = "attempt",
     .type = OPTS_INT,
     .min = 1,
     .max = INT32_MAX,
     .expect = "a number from 1",
     .offset = offsetof(struct logs_args, attempt)},
    {.name = "rank",
     .type = OPTS_INT,
     .min = 0,
     .max = 65535,
     .expect = "a number from 0 to 65535",
     .offset = offsetof(struct logs_args, rank)},
    CLI_OPTS_COMMON(struct logs_args, co),
};

static void logs_usage(FILE *out)
{
    fprintf(out, "usage: gpuorch logs JOB [-f] [--stderr] [--attempt N] [--rank R]\n"
                 "\n"
                 "Prints what a job's attempt wrote to stdout, read from its node through the\n"
                 "controller. With -f, follows it as it grows until the attempt ends; a job\n"
                 "that has not started yet is waited for.\n"
                 "\n"
                 "  -f, --follow     keep printing as the job writes\n"
                 "  --stderr         its stderr instead\n"
                 "  --attempt N      an earlier attempt (default: the current or the last)\n"
                 "  --rank R         the node of rank R of a multi-node attempt (default 0)\n");
    cli_help_common(out, false);
}

/* Log text to stdout as it comes; non-zero once stdout is gone (a closed
 * pipe), which ends the stream. */
static int write_stdout(const void *data, size_t len, void *ctx)
{
    (void)ctx;
    if (fwrite(data, 1, len, stdout) != len || fflush(stdout) != 0)
        return 1;
    return 0;
}

static int logs_stream(struct cli *c, int64_t id, const struct client_logs_query *q)
{
    char err[CLI_ERR_MAX];
    int rc = client_jobs_logs(&c->client, id, q, write_stdout, NULL, err, sizeof(err));
    if (rc == GPO_ECANCELED) /* stdout went away: nobody is left to tell */
        rc = 0;
    (void)fflush(stdout); /* write_stdout flushed each piece; nobody is left to tell either */
    return rc ? cli_fail_call("logs", rc, err) : 0;
}

/* logs -f of a job that has not run yet waits for it to start, as tail -F
 * waits for a file: one line on stderr, then a look each second. */
static int wait_started(struct cli *c, int64_t id)
{
    char err[CLI_ERR_MAX];
    for (bool said = false;; said = true) {
        json_t *j = NULL;
        if (client_jobs_get(&c->client, id, &j, err, sizeof(err)) != 0)
            return cli_fail("logs", "%s", err);
        const char *state = cli_json_str(j, "state");
        bool waiting = state && strcmp(state, "PENDING") == 0 &&
                       json_array_size(json_object_get(j, "attempts")) == 0;
        json_decref(j);
        if (!waiting)
            return 0;
        if (!said)
            fprintf(stderr, "gpuorch logs: job %" PRId64 " has not started; waiting for it\n", id);
        nanosleep(&(struct timespec){1, 0}, NULL);
    }
}

int jobs_logs_command(int argc, char **argv)
{
    struct logs_args a = {.rank = -1};
    int64_t *ids = NULL;
    size_t n = 0;
    int rc = job_ids("logs", argc, argv, CLI_OPTS(logs_opts), &a, &ids, &n);
    int64_t id = n ? ids[0] : 0;
    free(ids);
    if (rc == 0 && a.co.help) {
        logs_usage(stdout);
        return 0;
    }
    if (rc == 0 && n != 1)
        rc = cli_usage_error("logs", "expected one JOB (see 'gpuorch logs --help')");
    if (rc)
        return rc;
    struct client_logs_query q = {
        .attempt = a.attempt, .rank = a.rank, .stderr_stream = a.stderr_stream, .follow = a.follow};
    struct cli c;
    if ((rc = cli_connect(&c, "logs", &a.co)) == 0 && a.follow && !a.attempt)
        rc = wait_started(&c, id);
    if (rc == 0)
        rc = logs_stream(&c, id, &q);
    cli_disconnect(&c);
    return rc;
}

/* ---- whoami ----------------------------------------------------------------- */

static const struct opts_opt whoami_opts[] = {
    CLI_OPT_JSON(struct one_job_args, co),
    CLI_OPTS_COMMON(struct one_job_args, co),
};

int jobs_whoami_command(int argc, char **argv)
{
    struct one_job_args a = {0};
    const char **pos = NULL;
    size_t n = 0;
    int rc = cli_parse_args("whoami", argc, argv, CLI_OPTS(whoami_opts), &a, &pos, &n);
    free(pos);
    if (rc == 0 && a.co.help) {
        printf("usage: gpuorch whoami [--json]\n\n"
               "Shows whom the token belongs to (user, role, team) and the server it goes to\n"
               "(of a list of several, the one that answered).\n");
        cli_help_common(stdout, true);
        return 0;
    }
    if (rc == 0 && n)
        rc = cli_usage_error("whoami", "takes no arguments");
    struct cli c;
    json_t *me = NULL;
    char err[CLI_ERR_MAX];
    if (rc || (rc = cli_connect(&c, "whoami", &a.co)) != 0)
        return rc;
    if ((rc = client_whoami(&c.client, &me, err, sizeof(err))) != 0)
        rc = cli_fail_call("whoami", rc, err);
    if (rc == 0 && a.co.json) {
        rc = cli_print_json(me) ? 0 : cli_fail("whoami", "out of memory");
    } else if (rc == 0) {
        line("user:", cli_json_str(me, "name"));
        line("role:", cli_json_str(me, "role"));
        line("team:", cli_json_str(me, "team"));
        line("server:", httpc_url(c.client.http)); /* the one that answered, of a list */
    }
    cli_disconnect(&c);
    json_decref(me);
    return rc;
}

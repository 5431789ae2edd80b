/*
 * jobs.c - queue, show, cancel, logs and whoami (jobs.h).
 */
#include "cli/jobs.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/table.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define TEXT_LEN     256

/* Job states, with squeue's short codes. */
static const struct {
    const char *name, *code;
} states[] = {
    {"PENDING", "PD"},   {"RUNNING", "R"},  {"COMPLETED", "CD"}, {"FAILED", "F"},
    {"CANCELLED", "CA"}, {"TIMEOUT", "TO"}, {"PREEMPTED", "PR"}, {"NODE_FAIL", "NF"},
};

static int job_id(const char *cmd, const char *s, int64_t *ret)
{
    if (cli_parse_int(s, 1, INT64_MAX, ret) != 0)
        return cli_usage_error(cmd, "'%s' is not a job id (a positive whole number)", s);
    return 0;
}

/* Parses a command's flags into args, its positional words into a new array
 * *ret_pos (caller frees; borrowed from argv). CLI_EXIT_USAGE, printed. */
static int parse(const char *cmd, int argc, char **argv, const struct cli_opt *opts, size_t n,
                 void *args, const char ***ret_pos, size_t *ret_n)
{
    const char **pos = calloc((size_t)argc + 1, sizeof(*pos));
    if (!pos)
        return cli_fail(cmd, "out of memory");
    int rc = cli_parse_args(cmd, argc, argv, opts, n, args, pos, ret_n);
    if (rc) {
        free(pos);
        return rc;
    }
    *ret_pos = pos;
    return 0;
}

/* What a job asks of GPUs: "2", "H100-80GB:2", "0.25", "mem:10G". */
static const char *gpus_text(const json_t *spec, char *buf, size_t len)
{
    const json_t *g = json_object_get(spec, "gpus");
    const char *type = cli_json_str(spec, "gpu_type");
    json_int_t mem = json_integer_value(json_object_get(spec, "gpu_mem_mib"));
    char n[64], size[32];
    if (json_is_real(g))
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

/* ---- queue ---------------------------------------------------------------- */

struct queue_args {
    struct cli_common co;
    const char *state, *team, *user;
    bool all, me;
};

static const struct cli_opt queue_opts[] = {
    {"state", 't', true, 1, offsetof(struct queue_args, state)},
    {"team", 'A', true, 1, offsetof(struct queue_args, team)},
    {"user", 'u', true, 1, offsetof(struct queue_args, user)},
    {"all", 'a', false, 1, offsetof(struct queue_args, all)},
    {"me", 0, false, 1, offsetof(struct queue_args, me)},
    CLI_OPT_JSON(struct queue_args, co),
    CLI_OPTS_COMMON(struct queue_args, co),
};

static void queue_usage(FILE *out)
{
    fprintf(out, "usage: gpuorch queue [--state S[,S...]] [--team T] [--user U | --me] [--all]\n"
                 "                     [--json]\n"
                 "\n"
                 "Lists jobs as squeue does: JOBID NAME USER TEAM STATE TIME GPUS NODES REASON.\n"
                 "REASON is why a pending job waits (from the last scheduling pass), the nodes\n"
                 "of a running one, or why an ended one ended. TIME is how long it has run.\n"
                 "A running job whose GPUs its team's idle policy flags shows IDLE(<5%% 35m)\n"
                 "before its nodes: under 5 %% utilization for 35 minutes (docs/idle.md).\n"
                 "\n"
                 "  -t, --state S[,S]   PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT,\n"
                 "                      PREEMPTED, NODE_FAIL (or PD, R, CD, F, CA, TO, PR, NF;\n"
                 "                      default: PENDING,RUNNING)\n"
                 "  -a, --all           every state, ended jobs included\n"
                 "  -A, --team T        one team's jobs\n"
                 "  -u, --user U        one user's jobs; --me: yours\n");
    cli_help_common(out, true);
}

/* "pd,running" -> "PENDING,RUNNING" into buf; CLI_EXIT_USAGE, printed, for
 * a word that is no state. */
static int states_param(const char *given, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (const char *p = given;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char word[32] = "";
        for (size_t i = 0; i < n && i + 1 < sizeof(word); i++)
            word[i] = (char)toupper((unsigned char)p[i]);
        const char *name = NULL;
        for (size_t k = 0; k < ARRAY_LEN(states) && !name && n < sizeof(word); k++)
            if (strcmp(word, states[k].name) == 0 || strcmp(word, states[k].code) == 0)
                name = states[k].name;
        if (!name)
            return cli_usage_error("queue",
                                   "--state: '%.*s' is not a job state (PENDING, RUNNING, "
                                   "COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED, NODE_FAIL)",
                                   (int)(n < 40 ? n : 40), p);
        at += (size_t)snprintf(buf + at, at < len ? len - at : 0, "%s%s", at ? "," : "", name);
        if (!end)
            break;
        p = end + 1;
    }
    return at < len ? 0 : cli_usage_error("queue", "--state: too many states");
}

/* Appends "&key=escaped value" to the query q (len bytes). */
static bool query_add(char *q, size_t len, const char *key, const char *value)
{
    char esc[1024];
    size_t at = strlen(q);
    if (httpc_escape(value, esc, sizeof(esc)) != 0)
        return false;
    int n = snprintf(q + at, len - at, "%s%s=%s", at ? "&" : "", key, esc);
    return n > 0 && (size_t)n < len - at;
}

/* "35m", "2h", "40s", "3d": an idle stretch, for a column. */
static void span_text(int64_t ms, char *buf, size_t len)
{
    int64_t s = ms > 0 ? ms / 1000 : 0;
    if (s >= 2 * 86400)
        snprintf(buf, len, "%" PRId64 "d", s / 86400);
    else if (s >= 2 * 3600)
        snprintf(buf, len, "%" PRId64 "h", s / 3600);
    else if (s >= 120)
        snprintf(buf, len, "%" PRId64 "m", s / 60);
    else
        snprintf(buf, len, "%" PRId64 "s", s);
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
    char span[32], left[32] = "", what[64] = "";
    span_text(now - since, span, sizeof(span));
    const char *action = cli_json_str(idle, "action");
    if (action && strcmp(action, "report") != 0 &&
        timefmt_parse_rfc3339(cli_json_str(idle, "action_at"), &at) == 0) {
        span_text(at - now, left, sizeof(left));
        snprintf(what, sizeof(what), "; %s in %s", action, left);
    }
    snprintf(buf, len, "IDLE(<%" JSON_INTEGER_FORMAT "%% %s%s) %s",
             json_integer_value(json_object_get(idle, "threshold_pct")), span, what, nodes);
    return buf;
}

static int queue_row(struct table *t, const json_t *job, int64_t now)
{
    const json_t *spec = json_object_get(job, "spec");
    const char *state = cli_json_str(job, "state");
    char id[32], gpus[TEXT_LEN], nodes[TEXT_LEN * 4], count[24] = "-", time[TIMEFMT_DURATION_LEN];
    char idle[TEXT_LEN * 5];
    size_t nn = 0;
    snprintf(id, sizeof(id), "%" JSON_INTEGER_FORMAT,
             json_integer_value(json_object_get(job, "id")));
    nodes_text(job, nodes, sizeof(nodes), &nn);
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
    const char *cells[] = {id,
                           cli_json_str(spec, "name"),
                           cli_json_str(job, "user"),
                           cli_json_str(job, "team"),
                           state,
                           time,
                           gpus_text(spec, gpus, sizeof(gpus)),
                           count,
                           reason && reason[0] ? reason : "-"};
    return table_add(t, cells);
}

static int queue_print(const json_t *all)
{
    static const char *const head[] = {"JOBID", "NAME", "USER",  "TEAM",  "STATE",
                                       "TIME",  "GPUS", "NODES", "REASON"};
    struct table *t = table_new(ARRAY_LEN(head), head);
    int64_t now = cli_now_ms();
    int rc = t ? 0 : GPO_ENOMEM;
    for (size_t k = 0; rc == 0 && k < json_array_size(all); k++)
        rc = queue_row(t, json_array_get(all, k), now);
    if (rc == 0)
        table_print(t, stdout);
    table_free(t);
    return rc ? cli_fail("queue", "out of memory") : 0;
}

/* The token's user name into buf, for --me. */
static int whoami_name(struct cli *c, char *buf, size_t len)
{
    json_t *me = NULL;
    char err[CLI_ERR_MAX];
    int rc = cli_call(c, "GET", "/v1/whoami", NULL, NULL, &me, err, sizeof(err));
    if (rc)
        return cli_fail(c->cmd, "%s", rc == GPO_ENOMEM ? "out of memory" : err);
    const char *name = cli_json_str(me, "name");
    snprintf(buf, len, "%s", name ? name : "");
    json_decref(me);
    return 0;
}

int jobs_queue_command(int argc, char **argv)
{
    struct queue_args a = {0};
    const char **pos = NULL;
    size_t npos = 0;
    int rc = parse("queue", argc, argv, queue_opts, ARRAY_LEN(queue_opts), &a, &pos, &npos);
    if (rc == 0 && a.co.help)
        queue_usage(stdout);
    else if (rc == 0 && npos)
        rc = cli_usage_error("queue", "unexpected argument '%s' (see 'gpuorch queue --help')",
                             pos[0]);
    else if (rc == 0 && a.me && a.user)
        rc = cli_usage_error("queue", "--me and --user exclude each other");
    free(pos);
    if (rc || a.co.help)
        return rc;
    char query[2048] = "", states_buf[256], me[256];
    if (!a.state && !a.all)
        a.state = "PENDING,RUNNING";
    if (a.state && (rc = states_param(a.state, states_buf, sizeof(states_buf))) != 0)
        return rc;
    struct cli c;
    if ((rc = cli_connect(&c, "queue", &a.co)) == 0 && a.me &&
        (rc = whoami_name(&c, me, sizeof(me))) == 0)
        a.user = me;
    bool ok = rc || ((!a.state || query_add(query, sizeof(query), "state", states_buf)) &&
                     (!a.team || query_add(query, sizeof(query), "team", a.team)) &&
                     (!a.user || query_add(query, sizeof(query), "user", a.user)));
    json_t *all = json_array();
    if (rc == 0 && !ok)
        rc = cli_usage_error("queue", "--team or --user is too long");
    else if (rc == 0 && !all)
        rc = cli_fail("queue", "out of memory");
    char err[CLI_ERR_MAX];
    if (rc == 0 && (rc = cli_jobs_list(&c, query, all, err, sizeof(err))) != 0)
        rc = cli_fail("queue", "%s", rc == GPO_ENOMEM ? "out of memory" : err);
    cli_disconnect(&c);
    if (rc == 0 && a.co.json) {
        json_t *out = json_pack("{s:O}", "jobs", all);
        rc = out && cli_print_json(out) ? 0 : cli_fail("queue", "out of memory");
        json_decref(out);
    } else if (rc == 0) {
        rc = queue_print(all);
    }
    json_decref(all);
    return rc;
}

/* ---- show ------------------------------------------------------------------ */

struct one_job_args {
    struct cli_common co;
};

static const struct cli_opt show_opts[] = {
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
    line("gpus:", gpus_text(spec, buf, sizeof(buf)));
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
    char buf[TEXT_LEN * 4], nodes[TEXT_LEN * 4];
    size_t nn;
    if (cur) {
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
    span_text(now - since, span, sizeof(span));
    span_text(json_integer_value(json_object_get(idle, "window_s")) * 1000, win, sizeof(win));
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
        line("estimated start:", cli_json_str(job, "estimated_start")
                                     ? cli_json_str(job, "estimated_start")
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
    int rc = parse("show", argc, argv, show_opts, ARRAY_LEN(show_opts), &a, &pos, &npos);
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
    char path[64], err[CLI_ERR_MAX];
    snprintf(path, sizeof(path), "/v1/jobs/%" PRId64, id);
    if ((rc = cli_connect(&c, "show", &a.co)) == 0 &&
        (rc = cli_call(&c, "GET", path, NULL, NULL, &job, err, sizeof(err))) != 0)
        rc = cli_fail("show", "%s", rc == GPO_ENOMEM ? "out of memory" : err);
    cli_disconnect(&c);
    if (rc == 0 && a.co.json)
        rc = cli_print_json(job) ? 0 : cli_fail("show", "out of memory");
    else if (rc == 0)
        show_job(job);
    json_decref(job);
    return rc;
}

/* ---- cancel ------------------------------------------------------------------ */

static const struct cli_opt cancel_opts[] = {
    CLI_OPTS_COMMON(struct one_job_args, co),
};

static void cancel_usage(FILE *out)
{
    fprintf(out, "usage: gpuorch cancel JOB...\n"
                 "\n"
                 "Cancels each job: a pending one at once; a running one is stopped by its\n"
                 "agent (SIGTERM, then SIGKILL after the grace period) and ends CANCELLED.\n"
                 "One line per job; the exit code is 1 if any could not be cancelled.\n");
    cli_help_common(out, false);
}

/* Reads the flags and the JOB... words of a command into a new array *ret
 * (caller frees). CLI_EXIT_USAGE, printed. */
static int job_ids(const char *cmd, int argc, char **argv, const struct cli_opt *opts, size_t n,
                   void *args, int64_t **ret, size_t *ret_n)
{
    const char **pos = NULL;
    size_t npos = 0;
    int rc = parse(cmd, argc, argv, opts, n, args, &pos, &npos);
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

int jobs_cancel_command(int argc, char **argv)
{
    struct one_job_args a = {0};
    int64_t *ids = NULL;
    size_t n = 0;
    int rc = job_ids("cancel", argc, argv, cancel_opts, ARRAY_LEN(cancel_opts), &a, &ids, &n);
    if (rc == 0 && a.co.help)
        cancel_usage(stdout);
    else if (rc == 0 && n == 0)
        rc = cli_usage_error("cancel", "expected JOB... (see 'gpuorch cancel --help')");
    struct cli c = {0};
    if (rc || a.co.help || (rc = cli_connect(&c, "cancel", &a.co)) != 0) {
        free(ids);
        cli_disconnect(&c);
        return rc;
    }
    for (size_t k = 0; k < n; k++) {
        char path[64], err[CLI_ERR_MAX];
        long status = 0;
        snprintf(path, sizeof(path), "/v1/jobs/%" PRId64 "/cancel", ids[k]);
        int r = cli_call(&c, "POST", path, NULL, &status, NULL, err, sizeof(err));
        if (r)
            rc = cli_fail("cancel", "%s", r == GPO_ENOMEM ? "out of memory" : err);
        else if (status == 202)
            printf("Cancelling job %" PRId64 ": its agent is stopping it\n", ids[k]);
        else
            printf("Cancelled job %" PRId64 "\n", ids[k]);
    }
    cli_disconnect(&c);
    free(ids);
    return rc;
}

/* ---- logs --------------------------------------------------------------------- */

struct logs_args {
    struct cli_common co;
    const char *attempt, *rank;
    bool follow, stderr_stream;
};

static const struct cli_opt logs_opts[] = {
    {"follow", 'f', false, 1, offsetof(struct logs_args, follow)},
    {"stderr", 0, false, 1, offsetof(struct logs_args, stderr_stream)},
    {"attempt", 0, true, 1, offsetof(struct logs_args, attempt)},
    {"rank", 0, true, 1, offsetof(struct logs_args, rank)},
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

/* The answer's body as it streams: passed to stdout, but for a body that
 * begins as the API's error object, which is kept to be read at the end
 * (httpc_stream tells the status only then). */
#define ERROR_PREFIX     "{\"error\":"
#define ERROR_PREFIX_LEN (sizeof(ERROR_PREFIX) - 1)
#define ERROR_BODY_MAX   (64u * 1024)

struct sink {
    char *kept; /* the start of the body, while it may be an error object */
    size_t nkept;
    bool passing;   /* it is not one: everything goes to stdout */
    bool write_err; /* stdout failed (a closed pipe): stop */
};

static bool sink_write(struct sink *s, const void *data, size_t len)
{
    if (len && fwrite(data, 1, len, stdout) != len)
        s->write_err = true;
    return !s->write_err;
}

static int sink_data(const void *data, size_t len, void *ctx)
{
    struct sink *s = ctx;
    const char *p = data;
    if (len == 0)
        return s->write_err;
    if (!s->passing) {
        size_t n = s->nkept + len > ERROR_BODY_MAX ? ERROR_BODY_MAX - s->nkept : len;
        memcpy(s->kept + s->nkept, p, n);
        s->nkept += n;
        p += n;
        len -= n;
        size_t cmp = s->nkept < ERROR_PREFIX_LEN ? s->nkept : ERROR_PREFIX_LEN;
        if (memcmp(s->kept, ERROR_PREFIX, cmp) != 0 || s->nkept == ERROR_BODY_MAX) {
            s->passing = true;
            sink_write(s, s->kept, s->nkept);
            s->nkept = 0;
        }
    }
    if (s->passing && sink_write(s, p, len))
        fflush(stdout);
    return s->write_err;
}

static int logs_stream(struct cli *c, const char *path)
{
    struct sink s = {.kept = malloc(ERROR_BODY_MAX)};
    char err[CLI_ERR_MAX];
    long status = 0;
    if (!s.kept)
        return cli_fail("logs", "out of memory");
    int rc = httpc_stream(c->http, path, 0, sink_data, &s, &status, err, sizeof(err));
    if (rc == 0 && status != 200) {
        cli_api_error(status, s.kept, s.nkept, err, sizeof(err));
        rc = cli_fail("logs", "%s", err);
    } else if (rc == 0 || s.write_err) {
        sink_write(&s, s.kept, s.nkept); /* a short body, or log text after all */
        fflush(stdout);
        rc = 0;
    } else {
        rc = cli_fail("logs", "%s", rc == GPO_ENOMEM ? "out of memory" : err);
    }
    free(s.kept);
    return rc;
}

/* logs -f of a job that has not run yet waits for it to start, as tail -F
 * waits for a file: one line on stderr, then a look each second. */
static int wait_started(struct cli *c, int64_t id)
{
    char path[64], err[CLI_ERR_MAX];
    snprintf(path, sizeof(path), "/v1/jobs/%" PRId64, id);
    for (bool said = false;; said = true) {
        json_t *j = NULL;
        if (cli_call(c, "GET", path, NULL, NULL, &j, err, sizeof(err)) != 0)
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
    struct logs_args a = {0};
    int64_t *ids = NULL, attempt = 0, rank = 0;
    size_t n = 0;
    int rc = job_ids("logs", argc, argv, logs_opts, ARRAY_LEN(logs_opts), &a, &ids, &n);
    int64_t id = n ? ids[0] : 0;
    free(ids);
    if (rc == 0 && a.co.help) {
        logs_usage(stdout);
        return 0;
    }
    if (rc == 0 && n != 1)
        rc = cli_usage_error("logs", "expected one JOB (see 'gpuorch logs --help')");
    if (rc == 0 && a.attempt && cli_parse_int(a.attempt, 1, INT32_MAX, &attempt) != 0)
        rc = cli_usage_error("logs", "--attempt: expected a number from 1, got '%s'", a.attempt);
    if (rc == 0 && a.rank && cli_parse_int(a.rank, 0, 65535, &rank) != 0)
        rc = cli_usage_error("logs", "--rank: expected a number from 0 to 65535, got '%s'", a.rank);
    if (rc)
        return rc;
    char path[256];
    int k = snprintf(path, sizeof(path), "/v1/jobs/%" PRId64 "/logs?stream=%s", id,
                     a.stderr_stream ? "stderr" : "stdout");
    if (attempt)
        k += snprintf(path + k, sizeof(path) - (size_t)k, "&attempt=%" PRId64, attempt);
    if (a.rank)
        k += snprintf(path + k, sizeof(path) - (size_t)k, "&rank=%" PRId64, rank);
    if (a.follow)
        snprintf(path + k, sizeof(path) - (size_t)k, "&follow=1");
    struct cli c;
    if ((rc = cli_connect(&c, "logs", &a.co)) == 0 && a.follow && !attempt)
        rc = wait_started(&c, id);
    if (rc == 0)
        rc = logs_stream(&c, path);
    cli_disconnect(&c);
    return rc;
}

/* ---- whoami ----------------------------------------------------------------- */

static const struct cli_opt whoami_opts[] = {
    CLI_OPT_JSON(struct one_job_args, co),
    CLI_OPTS_COMMON(struct one_job_args, co),
};

int jobs_whoami_command(int argc, char **argv)
{
    struct one_job_args a = {0};
    const char **pos = NULL;
    size_t n = 0;
    int rc = parse("whoami", argc, argv, whoami_opts, ARRAY_LEN(whoami_opts), &a, &pos, &n);
    free(pos);
    if (rc == 0 && a.co.help) {
        printf("usage: gpuorch whoami [--json]\n\n"
               "Shows whom the token belongs to (user, role, team) and the server it goes to.\n");
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
    if ((rc = cli_call(&c, "GET", "/v1/whoami", NULL, NULL, &me, err, sizeof(err))) != 0)
        rc = cli_fail("whoami", "%s", rc == GPO_ENOMEM ? "out of memory" : err);
    if (rc == 0 && a.co.json) {
        rc = cli_print_json(me) ? 0 : cli_fail("whoami", "out of memory");
    } else if (rc == 0) {
        line("user:", cli_json_str(me, "name"));
        line("role:", cli_json_str(me, "role"));
        line("team:", cli_json_str(me, "team"));
        line("server:", c.conn.server);
    }
    cli_disconnect(&c);
    json_decref(me);
    return rc;
}

/*
 * service.c - `gpuorch service apply | list | show | delete | logs`
 * (service.h): the subcommands, their flags and their calls.
 */
#include "cli/service.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/jobs.h"
#include "client/client.h"
#include "util/opts.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define CMD          "service"
#define LOGS_ARGV    16

struct service_args {
    struct cli_common co;
    const char *file;
    int64_t replica;
    bool follow, stderr_stream;
};

static const struct opts_opt apply_opts[] = {
    {.name = "file",
     .short_name = 'f',
     .type = OPTS_STRING,
     .flags = OPTS_NONEMPTY,
     .offset = offsetof(struct service_args, file)},
    CLI_OPT_JSON(struct service_args, co),
    CLI_OPTS_COMMON(struct service_args, co),
};
static const struct opts_opt read_opts[] = {
    CLI_OPT_JSON(struct service_args, co),
    CLI_OPTS_COMMON(struct service_args, co),
};
static const struct opts_opt logs_opts[] = {
    {.name = "replica",
     .type = OPTS_INT,
     .min = 1,
     .max = INT32_MAX,
     .expect = "a replica number from 1",
     .offset = offsetof(struct service_args, replica)},
    {.name = "follow",
     .short_name = 'f',
     .type = OPTS_FLAG,
     .offset = offsetof(struct service_args, follow)},
    {.name = "stderr", .type = OPTS_FLAG, .offset = offsetof(struct service_args, stderr_stream)},
    CLI_OPTS_COMMON(struct service_args, co),
};

static int apply_run(struct service_args *a, const char **pos, size_t npos);
static int list_run(struct service_args *a, const char **pos, size_t npos);
static int show_run(struct service_args *a, const char **pos, size_t npos);
static int delete_run(struct service_args *a, const char **pos, size_t npos);
static int logs_run(struct service_args *a, const char **pos, size_t npos);

/* A subcommand: its flags, its positional words, its help. */
static const struct sub {
    const char *name;
    const struct opts_opt *opts;
    size_t nopts;
    size_t npos; /* positional words it takes: 0, or 1 (NAME) */
    int (*run)(struct service_args *a, const char **pos, size_t npos);
    const char *usage, *help;
} subs[] = {
    {"apply", CLI_OPTS(apply_opts), 0, apply_run, "apply -f FILE [--json]",
     "Creates or replaces each service of FILE (YAML or JSON; '-' reads stdin): one\n"
     "service object, a list of them, or an object with a list 'services'. Each is\n"
     "sent whole (PUT /v1/services/NAME): a field the file leaves out takes its\n"
     "default. A change to what shapes a replica (command, env, resources, ...)\n"
     "rolls the replicas, a new one ready before an old one drains; min, max and\n"
     "autoscaling change at once. Prints 'service/NAME created', 'configured', or\n"
     "'unchanged' where the stored service reads the same as before.\n"
     "\n"
     "  -f, --file FILE  the services\n"},
    {"list", CLI_OPTS(read_opts), 0, list_run, "list [--json]",
     "Lists the services you may see: NAME TEAM MODEL READY/DESIRED MIN-MAX METRIC\n"
     "TARGET (the autoscaling metric and its target per replica).\n"},
    {"show", CLI_OPTS(read_opts), 1, show_run, "show NAME [--json]",
     "Shows a service: its spec in short, each replica (REPLICA JOB NODE GPUS STATE\n"
     "INFLIGHT REASON; a replica that waits says why), the autoscaler's last\n"
     "decision and its reason, a crash loop's back-off, and what it cost.\n"
     "--json prints the API's object; its status.replicas[].state is starting,\n"
     "ready, draining or failed.\n"},
    {"delete", CLI_OPTS(read_opts), 1, delete_run, "delete NAME [--json]",
     "Deletes a service: its replicas stop taking requests, finish what they have\n"
     "(up to its drain timeout) and stop; then the service is gone.\n"},
    {"logs", CLI_OPTS(logs_opts), 1, logs_run, "logs NAME [--replica N] [-f] [--stderr]",
     "Prints a replica's output: its job's log, as 'gpuorch logs JOB' does. The\n"
     "replica is --replica N, else the first ready one, else the first one.\n"
     "\n"
     "  --replica N    replica N (see 'gpuorch service show NAME')\n"
     "  -f, --follow   keep printing as the replica writes\n"
     "  --stderr       its stderr instead\n"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: gpuorch service SUBCOMMAND [FLAGS]\n"
                 "\n"
                 "Model serving: services whose replicas are jobs, scaled with traffic.\n"
                 "\n"
                 "subcommands:\n");
    for (size_t k = 0; k < ARRAY_LEN(subs); k++)
        fprintf(out, "  gpuorch service %s\n", subs[k].usage);
    fprintf(out, "\nRun 'gpuorch service SUBCOMMAND --help' for one's flags.\n");
}

static void sub_usage(FILE *out, const struct sub *s)
{
    fprintf(out, "usage: gpuorch service %s\n\n%s", s->usage, s->help);
    cli_help_common(out, s->opts != logs_opts);
}

/* ---- apply --------------------------------------------------------------------- */

/* The stored service without its "status" (what the controller observes,
 * which changes by itself), or NULL: what a PUT may change. */
static json_t *stored_spec(const json_t *svc)
{
    json_t *copy = json_is_object(svc) ? json_deep_copy(svc) : NULL;
    if (copy)
        json_object_del(copy, "status");
    return copy;
}

/* PUTs one service; prints its line: "created" (201), "unchanged" where
 * the stored service reads the same before and after (as `gpuorch apply`
 * and kubectl say), else "configured". 0, or CLI_EXIT_FAIL after the line. */
static int apply_one(struct cli *c, const char *file, const json_t *spec, long line, bool json,
                     json_t *stored)
{
    char err[CLI_ERR_MAX];
    const char *name = cli_json_str(spec, "name");
    json_t *ret = NULL, *cur = NULL;
    /* A failed look (404 for a new service, or anything else) only means
     * the line cannot say "unchanged"; the PUT reports real errors. */
    if (client_services_get(&c->client, name, &cur, err, sizeof(err)) != 0)
        cur = NULL;
    json_t *before = stored_spec(cur);
    json_decref(cur);
    int rc = client_services_put(&c->client, name, spec, &ret, err, sizeof(err));
    if (rc) {
        char at[64] = "";
        if (line)
            snprintf(at, sizeof(at), ":%ld", line);
        json_decref(before);
        return rc == GPO_ENOMEM ? cli_fail(CMD, "out of memory")
                                : cli_fail(CMD, "%s%s: service/%s: %s", file, at, name, err);
    }
    if (json) {
        json_array_append_new(stored, ret ? json_incref(ret) : json_deep_copy(spec));
    } else {
        json_t *after = stored_spec(ret);
        const char *done = c->client.status == 201                        ? "created"
                           : before && after && json_equal(before, after) ? "unchanged"
                                                                          : "configured";
        printf("service/%s %s\n", name, done);
        json_decref(after);
    }
    json_decref(before);
    json_decref(ret);
    return 0;
}

static int apply_run(struct service_args *a, const char **pos, size_t npos)
{
    (void)pos;
    (void)npos;
    if (!a->file)
        return cli_usage_error(CMD, "apply needs -f FILE (see 'gpuorch service apply --help')");
    char err[CLI_ERR_MAX], *text = NULL;
    size_t len = 0;
    json_t *list = NULL, *lines = NULL;
    int rc = cli_read_file(a->file, SERVICE_FILE_MAX, &text, &len, err, sizeof(err));
    if (rc)
        return cli_fail(CMD, "%s: %s", a->file, err);
    rc = service_file_parse(text, len, a->file, &list, &lines, err, sizeof(err));
    free(text);
    if (rc)
        return cli_fail(CMD, "%s", err);
    struct cli c;
    json_t *stored = json_array();
    if (!stored)
        rc = cli_fail(CMD, "out of memory");
    else if ((rc = cli_connect(&c, CMD, &a->co)) == 0) {
        for (size_t k = 0; k < json_array_size(list); k++)
            if (apply_one(&c, a->file, json_array_get(list, k),
                          (long)json_integer_value(json_array_get(lines, k)), a->co.json, stored))
                rc = CLI_EXIT_FAIL;
    }
    if (stored)
        cli_disconnect(&c);
    if (a->co.json && stored && !cli_print_json(stored))
        rc = cli_fail(CMD, "out of memory");
    json_decref(stored);
    json_decref(list);
    json_decref(lines);
    return rc;
}

/* ---- list, show, delete -------------------------------------------------------- */

/* GET /v1/services (name NULL) or /v1/services/NAME into *ret (caller
 * decrefs); a failure printed, its exit code returned. */
static int fetch(struct service_args *a, const char *name, json_t **ret)
{
    struct cli c;
    char err[CLI_ERR_MAX];
    int rc = cli_connect(&c, CMD, &a->co);
    if (rc == 0 && (rc = name ? client_services_get(&c.client, name, ret, err, sizeof(err))
                              : client_services_list(&c.client, ret, err, sizeof(err))) != 0)
        rc = cli_fail_call(CMD, rc, err);
    cli_disconnect(&c);
    return rc;
}

/* The answer (taken) as JSON, or as show (name given) or list prints it. */
static int print_answer(struct service_args *a, const char *name, json_t *answer)
{
    int rc = a->co.json ? !cli_print_json(answer)
             : name     ? service_show_render(stdout, answer, cli_now_ms())
                        : service_list_render(stdout, answer);
    json_decref(answer);
    return rc ? cli_fail(CMD, "out of memory") : 0;
}

static int list_run(struct service_args *a, const char **pos, size_t npos)
{
    (void)pos;
    (void)npos;
    json_t *answer = NULL;
    int rc = fetch(a, NULL, &answer);
    return rc ? rc : print_answer(a, NULL, answer);
}

static int show_run(struct service_args *a, const char **pos, size_t npos)
{
    (void)npos;
    json_t *answer = NULL;
    int rc = fetch(a, pos[0], &answer);
    return rc ? rc : print_answer(a, pos[0], answer);
}

static int delete_run(struct service_args *a, const char **pos, size_t npos)
{
    (void)npos;
    struct cli c;
    char err[CLI_ERR_MAX];
    int rc = cli_connect(&c, CMD, &a->co);
    if (rc == 0 && (rc = client_services_delete(&c.client, pos[0], err, sizeof(err))) != 0)
        rc = cli_fail_call(CMD, rc, err);
    cli_disconnect(&c);
    if (rc)
        return rc;
    if (!a->co.json) {
        printf("service/%s deleted\n", pos[0]);
        return 0;
    }
    json_t *o = json_pack("{s:s, s:b}", "name", pos[0], "deleted", 1);
    rc = o && cli_print_json(o) ? 0 : cli_fail(CMD, "out of memory");
    json_decref(o);
    return rc;
}

/* ---- logs ----------------------------------------------------------------------- */

/* The replica's job, then `gpuorch logs JOB` with the same flags. */
static int logs_run(struct service_args *a, const char **pos, size_t npos)
{
    (void)npos;
    char err[CLI_ERR_MAX];
    json_t *svc = NULL;
    int64_t job = 0;
    int rc = fetch(a, pos[0], &svc);
    if (rc == 0 && service_replica_job(svc, a->replica, &job, err, sizeof(err)) != 0)
        rc = cli_fail(CMD, "%s", err);
    json_decref(svc);
    if (rc)
        return rc;
    char id[32];
    snprintf(id, sizeof(id), "%" PRId64, job);
    char *argv[LOGS_ARGV] = {"logs", id};
    int n = 2;
    if (a->follow)
        argv[n++] = "--follow";
    if (a->stderr_stream)
        argv[n++] = "--stderr";
    const char *flags[] = {"--server",  a->co.server,   "--token",
                           a->co.token, "--token-file", a->co.token_file};
    for (size_t k = 0; k < ARRAY_LEN(flags); k += 2)
        if (flags[k + 1]) {
            argv[n++] = (char *)flags[k];
            argv[n++] = (char *)flags[k + 1];
        }
    return jobs_logs_command(n, argv);
}

/* ---- the command ----------------------------------------------------------------- */

int service_command(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : NULL;
    if (!name || strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 ||
        strcmp(name, "help") == 0) {
        usage(name ? stdout : stderr);
        return name ? 0 : CLI_EXIT_USAGE;
    }
    const struct sub *s = NULL;
    for (size_t k = 0; k < ARRAY_LEN(subs) && !s; k++)
        if (strcmp(subs[k].name, name) == 0)
            s = &subs[k];
    if (!s)
        return cli_usage_error(CMD,
                               "unknown subcommand '%s' (expected apply, list, show, delete or "
                               "logs)",
                               name);
    char cmd[32];
    snprintf(cmd, sizeof(cmd), CMD " %s", s->name);
    struct service_args a = {0};
    const char **pos = NULL;
    size_t npos = 0;
    int rc = cli_parse_args(cmd, argc - 1, argv + 1, s->opts, s->nopts, &a, &pos, &npos);
    if (rc)
        return rc;
    if (a.co.help)
        sub_usage(stdout, s);
    else if (npos != s->npos)
        rc = s->npos ? cli_usage_error(cmd, "expected one NAME (see 'gpuorch %s --help')", cmd)
                     : cli_usage_error(cmd, "unexpected argument '%s' (see 'gpuorch %s --help')",
                                       pos[0], cmd);
    else
        rc = s->run(&a, pos, npos);
    free(pos);
    return rc;
}

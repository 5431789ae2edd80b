/*
 * nodes.c - nodes, drain, resume and nodes delete (nodes.h).
 */
#include "cli/nodes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/table.h"
#include "client/client.h"
#include "util/opts.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

struct nodes_args {
    struct cli_common co;
};

static const struct opts_opt list_opts[] = {
    CLI_OPT_JSON(struct nodes_args, co),
    CLI_OPTS_COMMON(struct nodes_args, co),
};

static const struct opts_opt change_opts[] = {
    CLI_OPTS_COMMON(struct nodes_args, co),
};

static void list_usage(FILE *out)
{
    fprintf(out, "usage: gpuorch nodes [--json]\n"
                 "       gpuorch nodes delete NODE...  (see 'gpuorch nodes delete --help')\n"
                 "\n"
                 "Lists the nodes: NAME POOL STATE GPUS TYPE FREE CPUS MEM HEARTBEAT. STATE is\n"
                 "up, draining (keeps its work, gets nothing new) or down (its heartbeats\n"
                 "stopped). FREE counts the GPUs that no running job holds and no ended job's\n"
                 "process still occupies; it needs an admin's token (others see '?').\n"
                 "\n"
                 "Under the table, one line per GPU in MIG mode (or with a MIG mode change\n"
                 "waiting for a GPU reset): the node's MIG layout setting (off: gpuorch\n"
                 "schedules on the instances as they are; static or dynamic: it repartitions\n"
                 "idle ones, docs/mig.md), a plan in flight, and each instance as\n"
                 "PROFILE@SLOT with the job that holds it or 'free' ('in use' where the job\n"
                 "is another team's and nodes are private; 'no device' without a compute\n"
                 "instance yet).\n");
    cli_help_common(out, true);
}

/* The GPU UUIDs running jobs hold, as an object used as a set; NULL (not
 * known) for a user who is not an admin, or on failure (err says). */
static json_t *held_gpus(struct cli *c, int *ret_rc, char *err, size_t errlen)
{
    json_t *me = NULL, *jobs = json_array(), *held = json_object();
    *ret_rc = jobs && held ? client_whoami(&c->client, &me, err, errlen) : GPO_ENOMEM;
    const char *role = cli_json_str(me, "role");
    bool admin = *ret_rc == 0 && role && strcmp(role, "admin") == 0;
    struct client_jobs_filter running = {.states = 1u << CLIENT_JOB_RUNNING};
    if (admin)
        *ret_rc = client_jobs_list(&c->client, &running, jobs, err, errlen);
    for (size_t k = 0; admin && *ret_rc == 0 && k < json_array_size(jobs); k++) {
        json_t *cur = json_object_get(json_array_get(jobs, k), "current_attempt");
        json_t *gpus = json_object_get(cur, "gpus");
        for (size_t g = 0; g < json_array_size(gpus); g++) {
            const char *uuid = json_string_value(json_array_get(gpus, g));
            if (uuid && json_object_set_new(held, uuid, json_true()) != 0)
                *ret_rc = GPO_ENOMEM;
        }
    }
    json_decref(me);
    json_decref(jobs);
    if (*ret_rc || !admin) {
        json_decref(held);
        return NULL;
    }
    return held;
}

static bool in_list(const json_t *list, const char *s)
{
    for (size_t k = 0; s && k < json_array_size(list); k++) {
        const char *v = json_string_value(json_array_get(list, k));
        if (v && strcmp(v, s) == 0)
            return true;
    }
    return false;
}

static int list_row(struct table *t, const json_t *n, const json_t *held, int64_t now)
{
    const json_t *gpus = json_object_get(n, "gpus"), *dirty = json_object_get(n, "dirty_gpus");
    char count[24], freebuf[24] = "?", cpus[24], mem[32], age[32];
    size_t nfree = 0;
    for (size_t g = 0; held && g < json_array_size(gpus); g++) {
        const char *uuid = cli_json_str(json_array_get(gpus, g), "uuid");
        nfree += uuid && !json_object_get(held, uuid) && !in_list(dirty, uuid);
    }
    if (held)
        snprintf(freebuf, sizeof(freebuf), "%zu", nfree);
    snprintf(count, sizeof(count), "%zu", json_array_size(gpus));
    snprintf(cpus, sizeof(cpus), "%" JSON_INTEGER_FORMAT,
             json_integer_value(json_object_get(n, "cpus")));
    cli_size_text(json_integer_value(json_object_get(n, "mem_mib")), mem, sizeof(mem));
    const char *cells[] = {cli_json_str(n, "name"),
                           cli_json_str(n, "pool"),
                           cli_json_str(n, "state"),
                           count,
                           cli_json_str(json_array_get(gpus, 0), "gpu_type"),
                           freebuf,
                           cpus,
                           mem,
                           cli_age(cli_json_str(n, "last_heartbeat"), now, age, sizeof(age))};
    return table_add(t, cells);
}

/* One instance: "1g.10gb@6 job 12", "3g.40gb@0 free". */
static void mig_instance_text(const json_t *m, char *buf, size_t size)
{
    const char *profile = cli_json_str(m, "profile");
    char unknown[32];
    if (!profile) {
        snprintf(unknown, sizeof(unknown), "profile-id-%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(m, "profile_id")));
        profile = unknown;
    }
    json_int_t start = json_integer_value(json_object_get(m, "start"));
    const json_t *job = json_object_get(m, "job");
    if (json_is_integer(job))
        snprintf(buf, size, "%s@%" JSON_INTEGER_FORMAT " job %" JSON_INTEGER_FORMAT, profile, start,
                 json_integer_value(job));
    else
        snprintf(buf, size, "%s@%" JSON_INTEGER_FORMAT " %s", profile, start,
                 json_is_true(json_object_get(m, "in_use")) ? "in use"
                 : !cli_json_str(m, "uuid")                 ? "no device"
                                                            : "free");
}

/* The MIG lines under the table (nodes.c's --help says what they show). */
static void mig_print(const json_t *nodes)
{
    for (size_t k = 0; k < json_array_size(nodes); k++) {
        const json_t *n = json_array_get(nodes, k), *gpus = json_object_get(n, "gpus");
        for (size_t g = 0; g < json_array_size(gpus); g++) {
            const json_t *gpu = json_array_get(gpus, g);
            bool on = json_is_true(json_object_get(gpu, "mig_enabled"));
            bool pending = json_is_true(json_object_get(gpu, "mig_pending"));
            if (!on && !pending)
                continue;
            printf("%s gpu %" JSON_INTEGER_FORMAT " MIG %s%s%s:", cli_json_str(n, "name"),
                   json_integer_value(json_object_get(gpu, "index")),
                   cli_json_str(n, "mig_mode") ? cli_json_str(n, "mig_mode") : "off",
                   on != pending
                       ? (on ? ", MIG off after a GPU reset" : ", MIG on after a GPU reset")
                       : "",
                   json_is_true(json_object_get(gpu, "mig_planning")) ? ", plan in flight" : "");
            const json_t *mig = json_object_get(gpu, "mig");
            for (size_t i = 0; i < json_array_size(mig); i++) {
                char text[96];
                mig_instance_text(json_array_get(mig, i), text, sizeof(text));
                printf("%s %s", i ? "," : "", text);
            }
            printf("%s\n", on && !json_array_size(mig) ? " no instances" : "");
        }
    }
}

static int list_print(const json_t *nodes, const json_t *held)
{
    static const char *const head[] = {"NAME", "POOL", "STATE", "GPUS",     "TYPE",
                                       "FREE", "CPUS", "MEM",   "HEARTBEAT"};
    struct table *t = table_new(ARRAY_LEN(head), head);
    int64_t now = cli_now_ms();
    int rc = t ? 0 : GPO_ENOMEM;
    for (size_t k = 0; rc == 0 && k < json_array_size(nodes); k++)
        rc = list_row(t, json_array_get(nodes, k), held, now);
    if (rc == 0) {
        table_print(t, stdout);
        mig_print(nodes);
    }
    table_free(t);
    return rc ? cli_fail("nodes", "out of memory") : 0;
}

static int nodes_delete_command(int argc, char **argv);

int nodes_list_command(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "delete") == 0)
        return nodes_delete_command(argc - 1, argv + 1);
    struct nodes_args a = {0};
    const char **pos = NULL;
    size_t npos = 0;
    int rc = cli_parse_args("nodes", argc, argv, CLI_OPTS(list_opts), &a, &pos, &npos);
    if (rc == 0 && a.co.help)
        list_usage(stdout);
    else if (rc == 0 && npos)
        rc = cli_usage_error("nodes", "unexpected argument '%s' (see 'gpuorch nodes --help')",
                             pos[0]);
    free(pos);
    if (rc || a.co.help)
        return rc;
    struct cli c;
    json_t *body = NULL, *held = NULL;
    char err[CLI_ERR_MAX];
    if ((rc = cli_connect(&c, "nodes", &a.co)) == 0)
        rc = client_nodes_list(&c.client, &body, err, sizeof(err));
    if (rc == 0 && !a.co.json)
        held = held_gpus(&c, &rc, err, sizeof(err));
    if (rc < 0)
        rc = cli_fail_call("nodes", rc, err);
    cli_disconnect(&c);
    if (rc == 0 && a.co.json)
        rc = cli_print_json(body) ? 0 : cli_fail("nodes", "out of memory");
    else if (rc == 0)
        rc = list_print(json_object_get(body, "nodes"), held);
    json_decref(body);
    json_decref(held);
    return rc;
}

enum change_action { CHANGE_DRAIN, CHANGE_RESUME, CHANGE_DELETE };

/* One node's change: 0 and its line printed, or the call's code (err says). */
static int change_one(struct cli *c, enum change_action act, const char *name, char *err,
                      size_t errlen)
{
    json_t *node = NULL;
    int r = act == CHANGE_DELETE  ? client_nodes_delete(&c->client, name, err, errlen)
            : act == CHANGE_DRAIN ? client_nodes_drain(&c->client, name, &node, err, errlen)
                                  : client_nodes_resume(&c->client, name, &node, err, errlen);
    if (r == 0 && act == CHANGE_DELETE)
        printf("node/%s deleted\n", name);
    else if (r == 0)
        printf("node/%s %s\n", name,
               cli_json_str(node, "state") ? cli_json_str(node, "state") : "?");
    json_decref(node);
    return r;
}

/* drain, resume or delete each NODE (POST /v1/nodes/NODE/drain, /resume;
 * DELETE /v1/nodes/NODE); one line each, and 1 when any failed. */
static int change(const char *cmd, enum change_action act, int argc, char **argv,
                  void (*usage)(FILE *out))
{
    struct nodes_args a = {0};
    const char **pos = NULL;
    size_t npos = 0;
    int rc = cli_parse_args(cmd, argc, argv, CLI_OPTS(change_opts), &a, &pos, &npos);
    if (rc == 0 && a.co.help)
        usage(stdout);
    else if (rc == 0 && npos == 0)
        rc = cli_usage_error(cmd, "expected NODE... (see 'gpuorch %s --help')", cmd);
    struct cli c = {0};
    if (rc == 0 && !a.co.help)
        rc = cli_connect(&c, cmd, &a.co);
    bool failed = false;
    for (size_t k = 0; rc == 0 && !a.co.help && k < npos; k++) {
        char err[CLI_ERR_MAX];
        int r = change_one(&c, act, pos[k], err, sizeof(err));
        if (r == GPO_ENAMETOOLONG)
            failed = cli_usage_error(cmd, "node name '%.40s...' is too long", pos[k]);
        else if (r) /* say so and go on with the others */
            failed = cli_fail_call(cmd, r, err);
    }
    free(pos);
    cli_disconnect(&c);
    return rc ? rc : failed ? CLI_EXIT_FAIL : 0;
}

static void drain_usage(FILE *out)
{
    fprintf(out, "usage: gpuorch drain NODE...\n"
                 "\n"
                 "Drains each node: it keeps its running work and gets nothing new. Needs an\n"
                 "admin's token. Prints 'node/NAME draining' per node; 1 if any failed.\n");
    cli_help_common(out, false);
}

static void resume_usage(FILE *out)
{
    fprintf(out, "usage: gpuorch resume NODE...\n"
                 "\n"
                 "Resumes each drained node: it takes work again. Needs an admin's token.\n"
                 "Prints 'node/NAME up' per node; 1 if any failed.\n");
    cli_help_common(out, false);
}

static void delete_usage(FILE *out)
{
    fprintf(out, "usage: gpuorch nodes delete NODE...\n"
                 "\n"
                 "Deletes each node's record: the machine registered again under another\n"
                 "name (an agent's --name changed), and the old record, down, still names\n"
                 "its GPUs, so the new name's registration is refused until it goes.\n"
                 "Refused while an attempt runs on the node or holds its GPUs. A live agent\n"
                 "of that name registers it again. Needs an admin's token. Prints\n"
                 "'node/NAME deleted' per node; 1 if any failed.\n");
    cli_help_common(out, false);
}

int nodes_drain_command(int argc, char **argv)
{
    return change("drain", CHANGE_DRAIN, argc, argv, drain_usage);
}

int nodes_resume_command(int argc, char **argv)
{
    return change("resume", CHANGE_RESUME, argc, argv, resume_usage);
}

static int nodes_delete_command(int argc, char **argv)
{
    return change("nodes delete", CHANGE_DELETE, argc, argv, delete_usage);
}

/*
 * gpuorch - one binary: controller, node agent, CLI and trace simulator.
 *
 * Commands are a table (name, handler, summary); each command reads its
 * own flags with util/opts.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/model.h"
#include "core/sched.h"
#include "agent/agent.h"
#include "cli/alloc.h"
#include "cli/apply.h"
#include "cli/cost.h"
#include "cli/ctl.h"
#include "cli/eff.h"
#include "cli/history.h"
#include "cli/info.h"
#include "cli/jobs.h"
#include "cli/nodes.h"
#include "cli/run.h"
#include "cli/service.h"
#include "cli/submit.h"
#include "cli/token.h"
#include "cli/top.h"
#include "cli/wrappers.h"
#include "router/router.h"
#include "server/server.h"
#include "sim/command.h"
#include "sim/policy.h"
#include "util/opts.h"
#include "version.h"
#include "base/banned.h"

struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
};

static int cmd_version(int argc, char **argv);
static int cmd_policy(int argc, char **argv);

static const struct command commands[] = {
    {"submit", submit_command, "submit a job: flags, or a batch script with #SBATCH lines"},
    {"queue", jobs_queue_command, "list pending and running jobs, and why each waits"},
    {"show", jobs_show_command, "show one job: resources, why it waits, its attempts"},
    {"cancel", jobs_cancel_command, "cancel jobs"},
    {"hold", ctl_hold_command, "keep pending jobs from starting (scontrol hold)"},
    {"release", ctl_release_command, "let held jobs start again (scontrol release)"},
    {"requeue", ctl_requeue_command, "put running or ended jobs back in the queue"},
    {"update", ctl_update_command, "change a job's time limit, priority class or dependencies"},
    {"logs", jobs_logs_command, "print a job's output (-f follows it)"},
    {"history", history_command, "list jobs, ended ones too, as sacct does"},
    {"eff", eff_command, "how well a job used its GPUs, as seff shows it"},
    {"info", info_command, "pools and their nodes by state, as sinfo shows them"},
    {"slurm-wrappers", wrappers_command, "write sbatch, squeue, sacct, ... that run gpuorch"},
    {"hostlist", hostlist_command, "expand or compress Slurm's host lists (node[01-04])"},
    {"run", run_command, "run a job step's tasks over a job's nodes (srun); outside one, allocate"},
    {"alloc", alloc_command, "allocate nodes and run a shell or command with them (salloc)"},
    {"nodes", nodes_list_command, "list nodes: pool, state, GPUs, free GPUs, heartbeat"},
    {"drain", nodes_drain_command, "drain nodes: they keep their work and get nothing new"},
    {"resume", nodes_resume_command, "resume drained nodes"},
    {"top", top_command, "a live view of GPUs, jobs, utilization and cost per hour"},
    {"cost", cost_command, "what GPU time cost per team, project, model, user or job"},
    {"service", service_command, "model serving: apply, list, show, delete, logs of services"},
    {"apply", apply_command, "create or update pools, classes, teams, users from a file"},
    {"whoami", jobs_whoami_command, "show whom the token belongs to"},
    {"token", token_command, "issue an API token for a user (admins)"},
    {"version", cmd_version, "print the version"},
    {"policy", cmd_policy, "print a scheduling policy as a policy file"},
    {"server", server_command, "run the controller: REST API, durable job store"},
    {"sim", sim_command, "replay a GPU-cluster trace through the scheduler"},
    {"agent", agent_command, "run the node agent: launch assigned jobs on this node's GPUs"},
    {"router", router_command, "run a router: the HTTP proxy in front of services' replicas"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: gpuorch [--help] [--version] COMMAND [ARGS]\n\n"
                 "gpuorch schedules GPU workloads: queues, quotas, fair share, backfill,\n"
                 "preemption and GPU sharing, in one binary.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  %-14s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nThe user commands find the server and the token in --server and --token\n"
                 "(or --token-file), else GPUORCH_SERVER and GPUORCH_TOKEN (or\n"
                 "GPUORCH_TOKEN_FILE), else ~/.config/gpuorch/config ($GPUORCH_CONFIG).\n"
                 "Exit codes: 0 ok, 1 failed, 2 usage.\n"
                 "Run 'gpuorch COMMAND --help' for a command's options.\n");
}

/* version and policy take no flags but --help, which wins wherever it is;
 * any other word is an argument (a policy file may begin with '-'). */
static const struct opts_opt help_only[] = {
    {.name = "help", .short_name = 'h', .type = OPTS_HELP},
};

static bool want_help(int argc, char **argv)
{
    return opts_help_asked(argc - 1, argv + 1, OPTS_TABLE(help_only));
}

static int cmd_version(int argc, char **argv)
{
    if (want_help(argc, argv)) {
        printf("usage: gpuorch version\n\nPrints the version of this binary.\n");
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "gpuorch version: unexpected argument '%s'\n", argv[1]);
        return 2;
    }
    printf("gpuorch %s\n", gpuorch_version);
    return 0;
}

static int cmd_policy(int argc, char **argv)
{
    if (want_help(argc, argv)) {
        printf("usage: gpuorch policy [NAME | FILE]\n\n"
               "Prints a scheduling policy as a policy file, one setting per line: the\n"
               "default one (the controller's), the simulator's preset NAME, or the policy\n"
               "FILE says once checked. 'gpuorch sim --policy' replays such a file; see\n"
               "docs/scheduling.md for what each setting does and docs/simulator.md for\n"
               "the format.\n\n"
               "Presets: ");
        char names[256];
        sim_policy_names(names, sizeof(names));
        printf("%s\n", names);
        printf("(sjf and srtf are oracles, not policies: they know durations)\n");
        return 0;
    }
    if (argc > 2) {
        fprintf(stderr, "gpuorch policy: unexpected argument '%s'\n", argv[2]);
        return 2;
    }
    struct sim_policy p;
    char err[768];
    const char *what = argc > 1 ? argv[1] : "default";
    if (sim_policy_resolve(what, &p, err, sizeof(err)) != 0) {
        fprintf(stderr, "gpuorch policy: %s\n", err);
        return 2;
    }
    if (p.oracle != SIM_ORACLE_NONE) {
        fprintf(stderr, "gpuorch policy: '%s' is an oracle that knows durations, not a policy\n",
                what);
        return 2;
    }
    if (sim_policy_write(stdout, &p) != 0 || fflush(stdout) != 0) {
        fprintf(stderr, "gpuorch policy: writing the output failed\n");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0)
        return cmd_version(1, argv + 1);
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "gpuorch: unknown command '%s' (see 'gpuorch --help')\n", argv[1]);
    return 2;
}

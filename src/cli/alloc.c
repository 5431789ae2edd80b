/*
 * alloc.c - `gpuorch alloc` and the allocation it shares with `gpuorch run`
 * (alloc.h).
 */
#define _GNU_SOURCE
#include "cli/alloc.h"

#include <errno.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/run.h"
#include "cli/sbatch.h"
#include "client/client.h"
#include "util/errbuf.h"
#include "util/opts.h"
#include "base/banned.h"

#define POLL_MS 250

static void nap(void)
{
    struct timespec ts = {0, POLL_MS * 1000000L};
    nanosleep(&ts, NULL);
}

/* The submission: the first node holds with `sleep infinity`, the others
 * hold for steps. NULL when out of memory. */
static json_t *alloc_spec(const char *cmd, const struct alloc_flags *f)
{
    int64_t nodes = f->nodes ? f->nodes : 1;
    json_t *o = json_pack("{s:s, s:[s,s], s:s}", "name", f->name ? f->name : cmd, "command",
                          "sleep", "infinity", "launch", "first_node");
    bool ok = o != NULL;
    const struct {
        const char *key;
        int64_t v;
    } nums[] = {
        {"nodes", f->nodes},
        {"gpus_per_node", f->gpus_per_node},
        {"gpus", f->gpus ? f->gpus : f->gpus_per_node * nodes},
        {"ntasks", f->ntasks},
        {"ntasks_per_node", f->ntasks_per_node},
        {"gpus_per_task", f->gpus_per_task},
        {"time_limit_s", f->time_s},
    };
    for (size_t k = 0; ok && k < sizeof(nums) / sizeof(nums[0]); k++) {
        if (nums[k].v)
            ok = json_object_set_new(o, nums[k].key, json_integer(nums[k].v)) == 0;
    }
    if (ok && nodes > 1)
        ok = json_object_set_new(o, "multi_node", json_true()) == 0;
    if (ok && f->pool)
        ok = json_object_set_new(o, "pool", json_string(f->pool)) == 0;
    if (ok && f->mig_profile)
        ok = json_object_set_new(o, "mig_profile", json_string(f->mig_profile)) == 0;
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int alloc_gpus_parse(const char *text, struct alloc_flags *f, char *err, size_t errlen)
{
    if (!text)
        return 0;
    if (sbatch_is_mig_profile(text, strlen(text))) {
        f->mig_profile = text;
        return 0;
    }
    if (opts_parse_int(text, 1, 1024, &f->gpus) != 0)
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "--gpus: expected GPUs in all (1-1024) or a MIG profile (1g.10gb), got "
                          "'%s'",
                          text);
    return 0;
}

/* Waits until job a->job runs and its step answer comes; prints the
 * pending reason when it changes. 0, or an exit status after printing. */
static int wait_running(const char *cmd, struct alloc *a, const volatile sig_atomic_t *stop)
{
    char err[CLI_ERR_MAX], last_reason[256] = "";
    bool said = false;
    while (!*stop) {
        json_t *j = NULL;
        int rc = client_jobs_get(&a->c.client, a->job, &j, err, sizeof(err));
        if (rc)
            return cli_fail_call(cmd, rc, err);
        const char *state = cli_json_str(j, "state"), *reason = cli_json_str(j, "reason");
        bool pending = state && strcmp(state, "PENDING") == 0;
        bool running = state && strcmp(state, "RUNNING") == 0;
        if (pending && !said) {
            fprintf(stderr, "gpuorch %s: job %" PRId64 " queued and waiting for resources\n", cmd,
                    a->job);
            said = true;
        }
        if (pending && reason && strcmp(reason, last_reason) != 0) {
            fprintf(stderr, "gpuorch %s: job %" PRId64 ": %s\n", cmd, a->job, reason);
            snprintf(last_reason, sizeof(last_reason), "%s", reason);
        }
        if (!pending && !running) {
            rc = cli_fail(cmd, "job %" PRId64 " ended before it ran: %s%s%s", a->job,
                          state ? state : "?", reason ? ": " : "", reason ? reason : "");
            json_decref(j);
            return rc;
        }
        json_decref(j);
        if (running && client_jobs_step(&a->c.client, a->job, &a->step, err, sizeof(err)) == 0) {
            if (said)
                fprintf(stderr, "gpuorch %s: job %" PRId64 " has been allocated resources\n", cmd,
                        a->job);
            return 0;
        }
        nap();
    }
    return 128 + (int)*stop;
}

int alloc_acquire(const char *cmd, const struct alloc_flags *f, const struct cli_common *co,
                  const volatile sig_atomic_t *stop, struct alloc *ret)
{
    *ret = (struct alloc){0};
    int rc = cli_connect(&ret->c, cmd, co);
    if (rc)
        return rc;
    json_t *spec = alloc_spec(cmd, f), *job = NULL;
    char err[CLI_ERR_MAX];
    if (!spec)
        return cli_fail(cmd, "out of memory");
    rc = client_jobs_submit(&ret->c.client, spec, NULL, &job, err, sizeof(err));
    json_decref(spec);
    if (rc)
        return cli_fail_call(cmd, rc, err);
    json_t *id = json_object_get(job, "id");
    ret->job = json_is_integer(id) ? json_integer_value(id) : 0;
    json_decref(job);
    if (!ret->job)
        return cli_fail(cmd, "the server's answer has no job id");
    return wait_running(cmd, ret, stop);
}

/* "a,b,c" from a JSON array of strings into buf; false when it does not fit. */
static bool joined(const json_t *v, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < json_array_size(v); k++) {
        const char *s = json_string_value(json_array_get(v, k));
        int n = snprintf(buf + at, len - at, "%s%s", k ? "," : "", s ? s : "");
        if (n < 0 || (size_t)n >= len - at)
            return false;
        at += (size_t)n;
    }
    return true;
}

int alloc_export(const struct alloc *a)
{
    static char nodes[65536], addrs[65536];
    const json_t *st = a->step;
    if (!joined(json_object_get(st, "nodes"), nodes, sizeof(nodes)) ||
        !joined(json_object_get(st, "addrs"), addrs, sizeof(addrs)))
        return GPO_E2BIG;
    char num[32];
    const struct {
        const char *name, *key;
    } ints[] = {
        {"GPUORCH_JOB_ID", "job"},
        {"SLURM_JOB_ID", "job"},
        {"GPUORCH_ATTEMPT", "attempt"},
        {"GPUORCH_NTASKS", "ntasks"},
        {"GPUORCH_NTASKS_PER_NODE", "ntasks_per_node"},
        {"GPUORCH_GPUS_PER_TASK", "gpus_per_task"},
    };
    int rc = 0;
    for (size_t k = 0; !rc && k < sizeof(ints) / sizeof(ints[0]); k++) {
        json_int_t v = json_integer_value(json_object_get(st, ints[k].key));
        snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, v);
        if (v || k < 3)
            rc = setenv(ints[k].name, num, 1);
        else
            rc = unsetenv(ints[k].name);
    }
    const char *key = cli_json_str(st, "key");
    rc = rc ? rc : setenv("GPUORCH_STEP_KEY", key ? key : "", 1);
    rc = rc ? rc : setenv("GPUORCH_STEP_ADDRS", addrs, 1);
    rc = rc ? rc : setenv("GPUORCH_NODELIST", nodes, 1);
    return rc ? GPO_ENOMEM : 0;
}

void alloc_release(const char *cmd, struct alloc *a)
{
    char err[CLI_ERR_MAX];
    if (a->job && client_jobs_cancel(&a->c.client, a->job, NULL, err, sizeof(err)) != 0)
        fprintf(stderr, "gpuorch %s: releasing job %" PRId64 ": %s\n", cmd, a->job, err);
    json_decref(a->step);
    a->step = NULL;
    a->job = 0;
    cli_disconnect(&a->c);
}

/* ---- gpuorch alloc ------------------------------------------------------ */

struct alloc_args {
    struct cli_common co;
    struct alloc_flags f;
};

static const struct opts_opt opts[] = {
    {.name = "nodes",
     .short_name = 'N',
     .type = OPTS_INT,
     .min = 1,
     .max = 1024,
     .offset = offsetof(struct alloc_args, f.nodes)},
    {.name = "gpus-per-node",
     .type = OPTS_INT,
     .min = 1,
     .max = 1024,
     .offset = offsetof(struct alloc_args, f.gpus_per_node)},
    {.name = "gpus",
     .short_name = 'G',
     .type = OPTS_STRING,
     .flags = OPTS_NONEMPTY,
     .offset = offsetof(struct alloc_args, f.gpus_text)},
    {.name = "ntasks",
     .short_name = 'n',
     .type = OPTS_INT,
     .min = 1,
     .max = 65536,
     .offset = offsetof(struct alloc_args, f.ntasks)},
    {.name = "ntasks-per-node",
     .type = OPTS_INT,
     .min = 1,
     .max = 256,
     .offset = offsetof(struct alloc_args, f.ntasks_per_node)},
    {.name = "gpus-per-task",
     .type = OPTS_INT,
     .min = 1,
     .max = 64,
     .offset = offsetof(struct alloc_args, f.gpus_per_task)},
    {.name = "time",
     .short_name = 't',
     .type = OPTS_SECONDS,
     .min = 1,
     .max = INT64_C(365) * 86400,
     .offset = offsetof(struct alloc_args, f.time_s)},
    {.name = "partition",
     .short_name = 'p',
     .type = OPTS_STRING,
     .flags = OPTS_NONEMPTY,
     .offset = offsetof(struct alloc_args, f.pool)},
    {.name = "job-name",
     .short_name = 'J',
     .type = OPTS_STRING,
     .flags = OPTS_NONEMPTY,
     .offset = offsetof(struct alloc_args, f.name)},
    CLI_OPTS_COMMON(struct alloc_args, co),
};

static void usage(FILE *out)
{
    fprintf(out, "usage: gpuorch alloc [-N NODES] [--gpus-per-node G | -G GPUS] [-n N]\n"
                 "                     [--ntasks-per-node K] [--gpus-per-task G] [-t SECONDS]\n"
                 "                     [-p POOL] [-J NAME] [--] [CMD [ARGS...]]\n"
                 "\n"
                 "Allocates GPUs as Slurm's salloc does: submits a job that holds them, waits\n"
                 "until it runs (\"job N queued and waiting for resources\" while it waits),\n"
                 "then, without CMD, opens your shell ($SHELL, else your login shell) on the\n"
                 "allocation's first node, on a pseudo-terminal there (as salloc with\n"
                 "use_interactive_step, 'gpuorch run --pty $SHELL'); with CMD, runs CMD here,\n"
                 "as salloc does. Either has the allocation in its environment (GPUORCH_JOB_ID,\n"
                 "SLURM_JOB_ID, GPUORCH_NODELIST, GPUORCH_STEP_KEY, ...), so that 'gpuorch\n"
                 "run' in it starts job steps on the allocation's nodes. When the shell or CMD\n"
                 "ends, the allocation is released (the job is cancelled), and 'gpuorch alloc'\n"
                 "exits with its status.\n"
                 "\n"
                 "  -N, --nodes NODES        nodes (more than 1: a gang)\n"
                 "      --gpus-per-node G    GPUs on each node\n"
                 "  -G, --gpus GPUS          GPUs in all, or a MIG profile (1g.10gb): one\n"
                 "                           instance of it (docs/mig.md)\n"
                 "  -n, --ntasks N, --ntasks-per-node K, --gpus-per-task G\n"
                 "                           the job's task shape, the default of its steps\n"
                 "  -t, --time SECONDS       a time limit\n"
                 "  -p, --partition POOL     the pool\n"
                 "  -J, --job-name NAME      the job's name (default: alloc)\n"
                 "\n"
                 "Not supported yet: salloc's other options.\n");
    cli_help_common(out, false);
}

static volatile sig_atomic_t alloc_stop;

static void on_signal(int sig)
{
    alloc_stop = sig;
}

/* Runs CMD here and waits; its exit status. */
static int run_here(char **argv)
{
    pid_t pid = fork();
    if (pid == 0) {
        (void)signal(SIGINT, SIG_DFL);
        (void)signal(SIGTERM, SIG_DFL);
        (void)signal(SIGHUP, SIG_DFL);
        execvp(argv[0], argv);
        fprintf(stderr, "gpuorch alloc: %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (pid < 0)
        return cli_fail("alloc", "fork: %s", strerror(errno));
    /* The shell's Ctrl-C is its own: this process waits through it. */
    (void)signal(SIGINT, SIG_IGN);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* No command: the shell ($SHELL, else the password file's, else /bin/sh)
 * as an interactive step on the allocation's first node, as salloc with
 * LaunchParameters=use_interactive_step runs `srun --pty $SHELL`. */
static int shell_on_first_node(void)
{
    const char *shell = getenv("SHELL");
    struct passwd pw, *res = NULL;
    char buf[16384];
    if ((!shell || shell[0] != '/') && getpwuid_r(getuid(), &pw, buf, sizeof(buf), &res) == 0 &&
        res && res->pw_shell && res->pw_shell[0] == '/')
        shell = res->pw_shell;
    char *argv[] = {(char *)(shell && shell[0] == '/' ? shell : "/bin/sh"), NULL};
    return run_shell("alloc", argv, 1, &alloc_stop);
}

int alloc_command(int argc, char **argv)
{
    struct alloc_args a = {0};
    struct opts p;
    opts_init(&p, argc - 1, argv + 1, OPTS_TABLE(opts), 0);
    char err[256];
    char **cmd = NULL;
    size_t ncmd = 0;
    for (;;) {
        const struct opts_opt *o = NULL;
        const char *v = NULL;
        int k = opts_next(&p, &o, &v, err, sizeof(err));
        if (k < 0)
            return cli_usage_error("alloc", "%s (see 'gpuorch alloc --help')", err);
        if (k == OPTS_OPTION && opts_store(o, v, &a, err, sizeof(err)) != 0)
            return cli_usage_error("alloc", "%s", err);
        if (k == OPTS_OPTION)
            continue;
        int from = k == OPTS_ARG ? p.i - 1 : p.i;
        cmd = argv + 1 + from;
        ncmd = (size_t)(argc - 1 - from);
        break;
    }
    if (a.co.help) {
        usage(stdout);
        return 0;
    }
    if (alloc_gpus_parse(a.f.gpus_text, &a.f, err, sizeof(err)) != 0)
        return cli_usage_error("alloc", "%s", err);
    if (a.f.gpus_text && a.f.gpus_per_node)
        return cli_usage_error("alloc", "--gpus and --gpus-per-node: one of them");
    if (a.f.mig_profile && (a.f.nodes > 1 || a.f.gpus_per_task))
        return cli_usage_error("alloc",
                               "--gpus %s: one MIG instance, on one node, for the job "
                               "(not -N above 1, not --gpus-per-task)",
                               a.f.mig_profile);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    struct alloc al;
    int rc = alloc_acquire("alloc", &a.f, &a.co, &alloc_stop, &al);
    if (!rc && alloc_export(&al) != 0)
        rc = cli_fail("alloc", "the allocation's node list is too long for the environment");
    if (!rc) {
        fprintf(stderr, "gpuorch alloc: granted job allocation %" PRId64 "\n", al.job);
        rc = ncmd ? run_here(cmd) : shell_on_first_node();
    }
    if (al.job)
        fprintf(stderr, "gpuorch alloc: relinquishing job allocation %" PRId64 "\n", al.job);
    alloc_release("alloc", &al);
    return rc;
}

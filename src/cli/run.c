/*
 * run.c - `gpuorch run` (run.h): a job step's flags, its layout over the
 * allocation's nodes, one thread per node that streams its tasks' frames,
 * and the step's outcome.
 */
#define _GNU_SOURCE
#include "cli/run.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/alloc.h"
#include "cli/cli.h"
#include "cli/runpty.h"
#include "util/httpc.h"
#include "util/opts.h"
#include "util/stepframe.h"
#include "base/banned.h"

#define RUN_NODES_MAX 1024
#define RUN_TASKS_MAX 65536
#define RUN_ENV_MAX   ((size_t)48 * 1024) /* bytes of our environment the tasks get */
#define RUN_404_TRIES 150                 /* 30 s of "not running here yet" */

struct run_args {
    int64_t ntasks, ntasks_per_node, gpus_per_task, nodes;
    const char *chdir;
    bool label, help, pty;
    const char *nodelist; /* --pty: the node of the task */
    /* outside an allocation only: what to allocate */
    int64_t gpus_per_node, time_s;
    const char *gpus, *partition, *name; /* gpus: alloc_gpus_parse's */
};

static const struct opts_opt opts[] = {
    {.name = "ntasks",
     .short_name = 'n',
     .type = OPTS_INT,
     .min = 1,
     .max = RUN_TASKS_MAX,
     .offset = offsetof(struct run_args, ntasks)},
    {.name = "ntasks-per-node",
     .type = OPTS_INT,
     .min = 1,
     .max = 256,
     .offset = offsetof(struct run_args, ntasks_per_node)},
    {.name = "gpus-per-task",
     .type = OPTS_INT,
     .min = 1,
     .max = 64,
     .offset = offsetof(struct run_args, gpus_per_task)},
    {.name = "nodes",
     .short_name = 'N',
     .type = OPTS_INT,
     .min = 1,
     .max = RUN_NODES_MAX,
     .offset = offsetof(struct run_args, nodes)},
    {.name = "chdir",
     .short_name = 'D',
     .type = OPTS_STRING,
     .flags = OPTS_NONEMPTY,
     .offset = offsetof(struct run_args, chdir)},
    {.name = "label",
     .short_name = 'l',
     .type = OPTS_FLAG,
     .offset = offsetof(struct run_args, label)},
    {.name = "help",
     .short_name = 'h',
     .type = OPTS_HELP,
     .offset = offsetof(struct run_args, help)},
    {.name = "pty", .type = OPTS_FLAG, .offset = offsetof(struct run_args, pty)},
    {.name = "nodelist",
     .short_name = 'w',
     .type = OPTS_STRING,
     .flags = OPTS_NONEMPTY,
     .offset = offsetof(struct run_args, nodelist)},
    {.name = "gpus-per-node",
     .type = OPTS_INT,
     .min = 1,
     .max = 1024,
     .offset = offsetof(struct run_args, gpus_per_node)},
    {.name = "gpus",
     .short_name = 'G',
     .type = OPTS_STRING,
     .flags = OPTS_NONEMPTY,
     .offset = offsetof(struct run_args, gpus)},
    {.name = "time",
     .short_name = 't',
     .type = OPTS_SECONDS,
     .min = 1,
     .max = INT64_C(365) * 86400,
     .offset = offsetof(struct run_args, time_s)},
    {.name = "partition",
     .short_name = 'p',
     .type = OPTS_STRING,
     .flags = OPTS_NONEMPTY,
     .offset = offsetof(struct run_args, partition)},
    {.name = "job-name",
     .short_name = 'J',
     .type = OPTS_STRING,
     .flags = OPTS_NONEMPTY,
     .offset = offsetof(struct run_args, name)},
};

/* srun's options that `gpuorch run` does not honour: refused by name, never
 * ignored. */
static const char *const refused[] = {
    "mpi",
    "cpu-bind",
    "distribution",
    "m",
    "exclusive",
    "overlap",
    "het-group",
    "multi-prog",
    "exclude",
    "x",
    "cpus-per-task",
    "c",
    "mem",
    "mem-per-cpu",
    "mem-per-gpu",
    "gres",
    "input",
    "i",
    "output",
    "o",
    "error",
    "e",
    "export",
    "kill-on-bad-exit",
    "K",
    "wait",
    "W",
    "unbuffered",
    "u",
};

static void usage(FILE *out)
{
    fprintf(out, "usage: gpuorch run [-n N] [--ntasks-per-node K] [--gpus-per-task G] [-N NODES]\n"
                 "                   [-l] [-D DIR] [--gpus-per-node G | -G GPUS] [-t SECONDS]\n"
                 "                   [-p POOL] [-J NAME] [--] CMD [ARGS...]\n"
                 "       gpuorch run --pty [-w NODE] [-D DIR] [--] CMD [ARGS...]\n"
                 "\n"
                 "Runs a job step, as Slurm's srun does: N tasks of CMD over an allocation's\n"
                 "nodes, each with its rank (SLURM_PROCID, RANK), its rank on the node\n"
                 "(SLURM_LOCALID, LOCAL_RANK), WORLD_SIZE, MASTER_ADDR (the first node) and\n"
                 "MASTER_PORT, and the environment of 'gpuorch run'. Their output comes here;\n"
                 "it waits for every task and exits 0 only when every task exited 0, else it\n"
                 "names each task that did not and exits with the highest status.\n"
                 "\n"
                 "Inside a job (a batch script, or 'gpuorch alloc') the allocation is the\n"
                 "job's. Outside one, 'gpuorch run' first allocates -N NODES with\n"
                 "--gpus-per-node G (or -G GPUS in all), waits for them (\"job N queued and\n"
                 "waiting for resources\"), runs the step, and releases them when the step\n"
                 "ends or is interrupted.\n"
                 "\n"
                 "  -n, --ntasks N          tasks in all (default: the job's --ntasks, else\n"
                 "                          --ntasks-per-node on every node, else one per node)\n"
                 "      --ntasks-per-node K K tasks on each node\n"
                 "      --gpus-per-task G   each task sees its own G of its node's GPUs\n"
                 "                          (CUDA_VISIBLE_DEVICES); default: all of them\n"
                 "  -N, --nodes NODES       the first NODES nodes of the allocation (outside a\n"
                 "                          job: the nodes to allocate)\n"
                 "  -l, --label             each line after its task's rank: '0: ...'\n"
                 "  -D, --chdir DIR         the tasks' directory (default: this one)\n"
                 "      --pty               one task on a pseudo-terminal, interactive: this\n"
                 "                          terminal in raw mode, what you type goes to the task,\n"
                 "                          window size changes too; exits with its status\n"
                 "  -w, --nodelist NODE     --pty: the task's node (default: the first)\n"
                 "  --gpus-per-node G, -G/--gpus GPUS (or a MIG profile, 1g.10gb: one instance),\n"
                 "  -t/--time SECONDS, -p/--partition POOL,\n"
                 "  -J/--job-name NAME      what to allocate, outside a job only\n"
                 "  -h, --help              this help\n"
                 "\n"
                 "Not supported yet (refused): srun's --mpi, --cpu-bind, -m/--distribution,\n"
                 "--exclusive, --overlap, --het-group, --multi-prog, -w without --pty,\n"
                 "-x/--exclude, -c/--cpus-per-task, --mem*, --gres, -i/-o/-e, --export, -K,\n"
                 "-W, -u. Without --pty the tasks' stdin is /dev/null.\n"
                 "\n"
                 "The server and token (outside a job) come from $GPUORCH_SERVER,\n"
                 "$GPUORCH_TOKEN or $GPUORCH_TOKEN_FILE, or the config file.\n"
                 "Exit codes: 0 every task exited 0; the highest task status (128+N for a\n"
                 "signal N; 1 for a task not started or lost, or no allocation); 2 usage.\n");
}

/* ---- the allocation and the layout ------------------------------------- */

struct node {
    char *name, *addr; /* borrowed from the split environment */
    uint32_t first, ntasks;
};

struct task_end {
    bool known;
    int32_t status, signal; /* EXIT */
    char *error;            /* ERROR, owned */
};

struct step {
    struct run_args a;
    char **cmd;
    size_t ncmd;
    uint64_t job;
    uint32_t attempt;
    const char *key;
    struct node nodes[RUN_NODES_MAX];
    size_t nnodes;
    uint32_t ntasks;
    char *master_addr;
    uint32_t master_port;
    pthread_mutex_t out_mu;
    struct task_end *ends;
    bool *line_start; /* per task and stream: the next byte starts a line */
    char *names_buf, *addrs_buf;
};

/* Splits s (owned by buf, modified) at commas into v (at most max). */
static size_t split(char *s, char **v, size_t max)
{
    size_t n = 0;
    for (char *p = s; p && *p && n < max;) {
        v[n++] = p;
        p = strchr(p, ',');
        if (p)
            *p++ = '\0';
    }
    return n;
}

static int env_u32(const char *name, uint32_t def, uint32_t max, uint32_t *ret)
{
    const char *v = getenv(name);
    int64_t x = def;
    if (v && *v && opts_parse_int(v, 0, max, &x) != 0)
        return cli_usage_error("run", "$%s: expected a number from 0 to %u, got '%.40s'", name, max,
                               v);
    *ret = (uint32_t)x;
    return 0;
}

/* The allocation this program runs in, from the agent's variables. */
static int read_alloc(struct step *st)
{
    const char *job = getenv("GPUORCH_JOB_ID"), *att = getenv("GPUORCH_ATTEMPT");
    const char *names = getenv("GPUORCH_NODELIST"), *addrs = getenv("GPUORCH_STEP_ADDRS");
    st->key = getenv("GPUORCH_STEP_KEY");
    if (!job || !att || !st->key || !addrs || !names)
        return cli_usage_error("run", "the job's environment is incomplete (GPUORCH_JOB_ID, "
                                      "GPUORCH_ATTEMPT, GPUORCH_NODELIST, GPUORCH_STEP_ADDRS)");
    int64_t j, a;
    if (opts_parse_int(job, 1, INT64_MAX, &j) || opts_parse_int(att, 1, UINT32_MAX, &a))
        return cli_usage_error("run", "$GPUORCH_JOB_ID, $GPUORCH_ATTEMPT: not job ids");
    st->job = (uint64_t)j;
    st->attempt = (uint32_t)a;
    st->names_buf = strdup(names);
    st->addrs_buf = strdup(addrs);
    char *nv[RUN_NODES_MAX], *av[RUN_NODES_MAX];
    if (!st->names_buf || !st->addrs_buf)
        return cli_fail("run", "out of memory");
    size_t nn = split(st->names_buf, nv, RUN_NODES_MAX);
    size_t na = split(st->addrs_buf, av, RUN_NODES_MAX);
    if (!na || nn != na)
        return cli_usage_error("run", "$GPUORCH_NODELIST has %zu node(s), $GPUORCH_STEP_ADDRS %zu",
                               nn, na);
    for (size_t k = 0; k < na; k++)
        st->nodes[k] = (struct node){.name = nv[k], .addr = av[k]};
    st->nnodes = na;
    return 0;
}

/* Block distribution of the step's tasks (run.h), from the flags, else the
 * job's shape. */
static int lay_out(struct step *st)
{
    const struct run_args *a = &st->a;
    uint32_t job_ntasks, job_per_node, job_gpt;
    int rc = env_u32("GPUORCH_NTASKS", 0, RUN_TASKS_MAX, &job_ntasks);
    rc = rc ? rc : env_u32("GPUORCH_NTASKS_PER_NODE", 0, 256, &job_per_node);
    rc = rc ? rc : env_u32("GPUORCH_GPUS_PER_TASK", 0, 64, &job_gpt);
    if (rc)
        return rc;
    if (a->nodes > (int64_t)st->nnodes)
        return cli_usage_error("run", "-N %" PRId64 ": the allocation has %zu node(s)", a->nodes,
                               st->nnodes);
    size_t nn = a->nodes ? (size_t)a->nodes : st->nnodes;
    uint32_t per = (uint32_t)a->ntasks_per_node;
    uint64_t total = a->ntasks                  ? (uint64_t)a->ntasks
                     : per                      ? (uint64_t)per * nn
                     : a->nodes && job_per_node ? (uint64_t)job_per_node * nn
                     : a->nodes                 ? nn
                     : job_ntasks               ? job_ntasks
                     : job_per_node             ? (uint64_t)job_per_node * nn
                                                : nn;
    if (per && total > (uint64_t)per * nn)
        return cli_usage_error("run",
                               "-n %" PRIu64 " tasks do not fit %zu node(s) x "
                               "--ntasks-per-node %u",
                               total, nn, per);
    if (total < nn)
        nn = (size_t)total; /* as srun: no node without a task */
    st->nnodes = nn;
    st->ntasks = (uint32_t)total;
    if (!st->a.gpus_per_task)
        st->a.gpus_per_task = job_gpt;
    uint32_t at = 0;
    for (size_t k = 0; k < nn; k++) {
        uint32_t n = per ? (total - at < per ? (uint32_t)(total - at) : per)
                         : (uint32_t)(total / nn + (k < total % nn));
        st->nodes[k].first = at;
        st->nodes[k].ntasks = n;
        at += n;
    }
    return 0;
}

/* --pty: one task, on the first node or the one -w names. */
static int lay_out_pty(struct step *st)
{
    if (st->a.ntasks > 1 || st->a.ntasks_per_node > 1 || st->a.nodes > 1)
        return cli_usage_error("run", "--pty runs one task: not with -n, --ntasks-per-node or -N "
                                      "over 1");
    size_t at = 0;
    while (st->a.nodelist && at < st->nnodes && strcmp(st->nodes[at].name, st->a.nodelist) != 0)
        at++;
    if (at == st->nnodes)
        return cli_usage_error("run", "-w %.64s: not a node of the allocation", st->a.nodelist);
    st->nodes[0] = (struct node){.name = st->nodes[at].name, .addr = st->nodes[at].addr};
    st->nnodes = 1;
    st->ntasks = 1;
    st->nodes[0].ntasks = 1;
    if (!st->a.gpus_per_task) {
        uint32_t job_gpt = 0;
        int rc = env_u32("GPUORCH_GPUS_PER_TASK", 0, 64, &job_gpt);
        if (rc)
            return rc;
        st->a.gpus_per_task = job_gpt;
    }
    return 0;
}

/* MASTER_ADDR is the first node's host; MASTER_PORT a port free there now
 * (this program runs on the first node), else the job's MASTER_PORT + 1. */
static int pick_master(struct step *st)
{
    const char *addr = st->nodes[0].addr;
    const char *colon = strrchr(addr, ':');
    size_t hl = colon ? (size_t)(colon - addr) : strlen(addr);
    if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']')
        addr++, hl -= 2;
    if (!(st->master_addr = strndup(addr, hl)))
        return cli_fail("run", "out of memory");
    struct sockaddr_in sa = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t sl = sizeof(sa);
    if (fd >= 0 && inet_pton(AF_INET, st->master_addr, &sa.sin_addr) == 1 &&
        bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        st->master_port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    uint32_t job_port = 0;
    if (!st->master_port && env_u32("MASTER_PORT", 29499, 65534, &job_port) == 0)
        st->master_port = job_port + 1;
    return 0;
}

/* What every node's request shares: the command, our environment, the
 * directory and the step's shape. */
static int make_body(struct step *st, json_t **ret)
{
    json_t *o = json_object(), *argv = json_array(), *env = json_array();
    bool ok = o && argv && env;
    for (size_t k = 0; ok && k < st->ncmd; k++)
        ok = json_array_append_new(argv, json_string(st->cmd[k])) == 0;
    size_t used = 0;
    for (char **e = environ; ok && *e; e++) {
        size_t n = strlen(*e);
        json_t *v = strchr(*e, '=') && used + n + 1 <= RUN_ENV_MAX ? json_string(*e) : NULL;
        if (!v)
            continue; /* what does not fit or is not UTF-8 stays here */
        ok = json_array_append_new(env, v) == 0;
        used += n + 1;
    }
    char cwd[4096];
    const char *dir = st->a.chdir ? st->a.chdir : getcwd(cwd, sizeof(cwd));
    ok = ok && json_object_set_new(o, "step", json_integer(getpid())) == 0 &&
         json_object_set(o, "argv", argv) == 0 && json_object_set(o, "env", env) == 0 &&
         json_object_set_new(o, "workdir", dir && dir[0] == '/' ? json_string(dir) : json_null()) ==
             0 &&
         json_object_set_new(o, "nodes", json_integer((json_int_t)st->nnodes)) == 0 &&
         json_object_set_new(o, "ntasks", json_integer(st->ntasks)) == 0 &&
         json_object_set_new(o, "gpus_per_task", json_integer(st->a.gpus_per_task)) == 0 &&
         json_object_set_new(o, "master_addr", json_string(st->master_addr)) == 0 &&
         json_object_set_new(o, "master_port", json_integer(st->master_port)) == 0;
    json_decref(argv);
    json_decref(env);
    if (!ok) {
        json_decref(o);
        return cli_fail("run", "out of memory");
    }
    *ret = o;
    return 0;
}

/* ---- one node's stream --------------------------------------------------- */

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

struct conn {
    struct step *st;
    size_t index;
    char *body;
    long status;
    struct stepframe_reader frames;
    char answer[512]; /* a non-200 answer's start */
    size_t alen;
    char err[CLI_ERR_MAX];
    bool bad; /* a frame that did not parse: the stream is cut */
};

/* Writes task output, with -l each line after "RANK: ". Under out_mu. */
static void print_output(struct step *st, const struct stepframe *f, const uint8_t *data)
{
    FILE *out = f->type == STEPFRAME_STDOUT ? stdout : stderr;
    bool *start = &st->line_start[2 * (size_t)f->task + (f->type == STEPFRAME_STDERR)];
    size_t at = 0;
    while (at < f->len) {
        const uint8_t *nl = memchr(data + at, '\n', f->len - at);
        size_t n = nl ? (size_t)(nl - (data + at)) + 1 : f->len - at;
        if (st->a.label && *start)
            (void)fprintf(out, "%" PRIu32 ": ", f->task);
        (void)fwrite(data + at, 1, n, out);
        *start = nl != NULL;
        at += n;
    }
    (void)fflush(out);
}

static int take_frame(void *ctx, const struct stepframe *f, const uint8_t *data)
{
    struct conn *c = ctx;
    struct step *st = c->st;
    const struct node *nd = &st->nodes[c->index];
    if (f->task < nd->first || f->task >= nd->first + nd->ntasks || stepframe_is_input(f->type))
        return GPO_EINVAL;
    pthread_mutex_lock(&st->out_mu);
    struct task_end *e = &st->ends[f->task];
    if (f->type == STEPFRAME_STDOUT || f->type == STEPFRAME_STDERR) {
        print_output(st, f, data);
    } else if (f->type == STEPFRAME_EXIT && !e->known) {
        e->known = true;
        stepframe_exit_read(data, &e->status, &e->signal);
    } else if (f->type == STEPFRAME_ERROR && !e->known) {
        e->known = true;
        e->error = strndup((const char *)data, f->len);
    }
    pthread_mutex_unlock(&st->out_mu);
    return 0;
}

static int on_data(const void *data, size_t len, void *ctx)
{
    struct conn *c = ctx;
    if (stop_signal)
        return 1;
    if (!len)
        return 0;
    if (c->status != 200) {
        size_t n = len < sizeof(c->answer) - 1 - c->alen ? len : sizeof(c->answer) - 1 - c->alen;
        memcpy(c->answer + c->alen, data, n);
        c->alen += n;
        c->answer[c->alen] = '\0';
        return 0;
    }
    c->bad = c->bad || stepframe_reader_feed(&c->frames, data, len, take_frame, c) != 0;
    return c->bad;
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    struct step *st = c->st;
    char url[HTTPC_URL_MAX], path[128];
    snprintf(url, sizeof(url), "http://%s", st->nodes[c->index].addr);
    snprintf(path, sizeof(path), "/v1/steps/%" PRIu64 "/%" PRIu32, st->job, st->attempt);
    struct httpc *h = NULL;
    int rc = httpc_new(url, st->key, &h, c->err, sizeof(c->err));
    /* A node's agent may not have started its part of a job that just
     * began: 404 is asked again, for a while. */
    for (int tries = 0; !rc; tries++) {
        c->status = 0;
        c->alen = 0;
        c->answer[0] = '\0';
        rc = httpc_stream_body(h, "POST", path, c->body, strlen(c->body), 0, on_data, c, &c->status,
                               c->err, sizeof(c->err));
        if (rc || c->status != 404 || stop_signal || tries >= RUN_404_TRIES)
            break;
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (!rc && c->status != 200) {
        json_t *o = json_loads(c->answer, 0, NULL);
        const char *m = cli_json_str(json_object_get(o, "error"), "message");
        snprintf(c->err, sizeof(c->err), "its agent answered %ld: %s", c->status,
                 m ? m : c->answer);
        json_decref(o);
    } else if (!rc && c->bad) {
        snprintf(c->err, sizeof(c->err), "its agent sent a frame that does not parse");
    } else if (!rc) {
        c->err[0] = '\0';
    }
    httpc_free(h);
    return NULL;
}

/* ---- the step ------------------------------------------------------------ */

/* Each task that did not exit 0, named on stderr; the step's exit status. */
static int outcome(struct step *st, struct conn *conns)
{
    int worst = 0;
    for (size_t k = 0; k < st->nnodes; k++) {
        const struct node *nd = &st->nodes[k];
        for (uint32_t t = nd->first; t < nd->first + nd->ntasks; t++) {
            const struct task_end *e = &st->ends[t];
            int code = !e->known ? 1 : e->error ? 1 : e->signal ? 128 + e->signal : e->status;
            if (!e->known)
                fprintf(stderr, "gpuorch run: task %" PRIu32 " (node %s): no status: %s\n", t,
                        nd->name, conns[k].err[0] ? conns[k].err : "its agent's stream ended");
            else if (e->error)
                fprintf(stderr, "gpuorch run: %s\n", e->error);
            else if (e->signal)
                fprintf(stderr, "gpuorch run: task %" PRIu32 " (node %s): killed by signal %d\n", t,
                        nd->name, e->signal);
            else if (e->status)
                fprintf(stderr, "gpuorch run: task %" PRIu32 " (node %s): exited with status %d\n",
                        t, nd->name, e->status);
            if (code > worst)
                worst = code;
        }
    }
    return worst > 255 ? 255 : worst;
}

/* --pty: the one task, interactive (runpty.h). */
static int run_pty(struct step *st, const char *cmd, const volatile sig_atomic_t *stop)
{
    json_t *body = NULL;
    int rc = make_body(st, &body);
    bool ok = !rc && json_object_set_new(body, "node_index", json_integer(0)) == 0 &&
              json_object_set_new(body, "first_task", json_integer(0)) == 0 &&
              json_object_set_new(body, "local_tasks", json_integer(1)) == 0;
    if (!rc && !ok)
        rc = cli_fail(cmd, "out of memory");
    if (!rc) {
        struct runpty p = {.cmd = cmd,
                           .addr = st->nodes[0].addr,
                           .node = st->nodes[0].name,
                           .job = st->job,
                           .attempt = st->attempt,
                           .key = st->key,
                           .stop = stop};
        rc = runpty_run(&p, body);
    }
    json_decref(body);
    return rc;
}

static int run_step(struct step *st)
{
    json_t *base = NULL;
    int rc = make_body(st, &base);
    struct conn *conns = rc ? NULL : calloc(st->nnodes, sizeof(*conns));
    pthread_t *th = conns ? calloc(st->nnodes, sizeof(*th)) : NULL;
    st->ends = th ? calloc(st->ntasks, sizeof(*st->ends)) : NULL;
    st->line_start = st->ends ? calloc(2 * (size_t)st->ntasks, sizeof(bool)) : NULL;
    if (!rc && !st->line_start)
        rc = cli_fail("run", "out of memory");
    for (size_t k = 0; !rc && k < 2 * (size_t)st->ntasks; k++)
        st->line_start[k] = true;
    size_t started = 0;
    for (size_t k = 0; !rc && k < st->nnodes; k++) {
        conns[k] = (struct conn){.st = st, .index = k};
        json_object_set_new(base, "node_index", json_integer((json_int_t)k));
        json_object_set_new(base, "first_task", json_integer(st->nodes[k].first));
        json_object_set_new(base, "local_tasks", json_integer(st->nodes[k].ntasks));
        if (!(conns[k].body = json_dumps(base, JSON_COMPACT)))
            rc = cli_fail("run", "out of memory");
        else if (pthread_create(&th[k], NULL, conn_main, &conns[k]) != 0)
            rc = cli_fail("run", "pthread_create failed");
        else
            started++;
    }
    if (rc)
        stop_signal = SIGTERM; /* what started ends */
    for (size_t k = 0; k < started; k++)
        pthread_join(th[k], NULL);
    if (stop_signal && !rc) {
        fprintf(stderr, "gpuorch run: %s: the step's tasks were ended\n", strsignal(stop_signal));
        rc = 128 + stop_signal;
    } else if (!rc) {
        rc = outcome(st, conns);
    }
    for (size_t k = 0; conns && k < st->nnodes; k++)
        free(conns[k].body);
    for (uint32_t t = 0; st->ends && t < st->ntasks; t++)
        free(st->ends[t].error);
    free(st->ends);
    free(st->line_start);
    free(conns);
    free(th);
    json_decref(base);
    return rc;
}

/* Outside a job: an allocation for the step (alloc.h), in this process's
 * environment. */
static int allocate(struct step *st, struct alloc *al)
{
    const struct run_args *a = &st->a;
    struct alloc_flags f = {.nodes = a->nodes,
                            .gpus_per_node = a->gpus_per_node,
                            .time_s = a->time_s,
                            .pool = a->partition,
                            .name = a->name ? a->name : "run"};
    struct cli_common co = {0};
    (void)alloc_gpus_parse(a->gpus, &f, NULL, 0); /* checked by run_command */
    int rc = alloc_acquire("run", &f, &co, &stop_signal, al);
    if (!rc && alloc_export(al) != 0)
        rc = cli_fail("run", "the allocation's node list is too long for the environment");
    st->a.nodes = 0; /* the step spans the whole allocation */
    return rc;
}

/* Options up to the command (srun's: the first word that is not one). */
static int parse(int argc, char **argv, struct step *st)
{
    struct opts p;
    opts_init(&p, argc - 1, argv + 1, OPTS_TABLE(opts), 0);
    char err[256];
    for (;;) {
        const struct opts_opt *o = NULL;
        const char *v = NULL;
        int k = opts_next(&p, &o, &v, err, sizeof(err));
        if (k == GPO_ENOENT) {
            const char *w = p.word + (p.word[1] == '-' ? 2 : 1);
            size_t wl = strcspn(w, "=");
            for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
                if (strlen(refused[i]) == wl && strncmp(refused[i], w, wl) == 0)
                    return cli_usage_error("run", "%.*s: srun's option is not supported yet",
                                           (int)(wl + (w - p.word)), p.word);
            }
        }
        if (k < 0)
            return cli_usage_error("run", "%s (see 'gpuorch run --help')", err);
        if (k == OPTS_OPTION && opts_store(o, v, &st->a, err, sizeof(err)) != 0)
            return cli_usage_error("run", "%s", err);
        if (k == OPTS_OPTION && st->a.help)
            return 0;
        if (k == OPTS_ARG || k == OPTS_DASHDASH || k == OPTS_END) {
            int from = k == OPTS_ARG ? p.i - 1 : p.i;
            st->cmd = argv + 1 + from;
            st->ncmd = (size_t)(argc - 1 - from);
            return 0;
        }
    }
}

static void step_free(struct step *st)
{
    free(st->master_addr);
    free(st->names_buf);
    free(st->addrs_buf);
    pthread_mutex_destroy(&st->out_mu);
    free(st);
}

int run_command(int argc, char **argv)
{
    struct step *st = calloc(1, sizeof(*st));
    if (!st)
        return cli_fail("run", "out of memory");
    pthread_mutex_init(&st->out_mu, NULL);
    int rc = parse(argc, argv, st);
    if (!rc && st->a.help)
        usage(stdout);
    else if (!rc && !st->ncmd)
        rc = cli_usage_error("run", "expected a command (see 'gpuorch run --help')");
    bool inside = getenv("GPUORCH_STEP_KEY") != NULL, go = !rc && !st->a.help;
    const struct run_args *ra = &st->a;
    if (go && inside && (ra->gpus_per_node || ra->gpus || ra->time_s || ra->partition || ra->name))
        rc = cli_usage_error("run", "--gpus-per-node, --gpus, --time, --partition and "
                                    "--job-name allocate: not inside a job");
    if (go && !rc && ra->gpus && ra->gpus_per_node)
        rc = cli_usage_error("run", "--gpus and --gpus-per-node: one of them");
    struct alloc_flags checked = {0};
    char gerr[256];
    if (go && !rc && alloc_gpus_parse(ra->gpus, &checked, gerr, sizeof(gerr)) != 0)
        rc = cli_usage_error("run", "%s", gerr);
    if (go && !rc && checked.mig_profile && ra->nodes > 1)
        rc = cli_usage_error("run", "--gpus %s: one MIG instance, on one node (not -N above 1)",
                             checked.mig_profile);
    if (go && !rc && ra->nodelist && !ra->pty)
        rc = cli_usage_error("run", "-w/--nodelist: srun's option is supported with --pty only");
    if (go && !rc && ra->pty && ra->label)
        rc = cli_usage_error("run", "--pty and -l: one task's terminal has no labels");
    if (go && !rc) {
        struct sigaction sa = {.sa_handler = on_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        (void)signal(SIGPIPE, SIG_IGN);
    }
    struct alloc al = {0};
    bool allocated = go && !rc && !inside;
    rc = allocated ? allocate(st, &al) : rc;
    rc = go && !rc ? read_alloc(st) : rc;
    rc = go && !rc ? (ra->pty ? lay_out_pty(st) : lay_out(st)) : rc;
    rc = go && !rc ? pick_master(st) : rc;
    rc = go && !rc ? (ra->pty ? run_pty(st, "run", &stop_signal) : run_step(st)) : rc;
    if (allocated)
        alloc_release("run", &al);
    step_free(st);
    return rc;
}

int run_shell(const char *cmd, char **argv, size_t argc, const volatile sig_atomic_t *stop)
{
    struct step *st = calloc(1, sizeof(*st));
    if (!st)
        return cli_fail(cmd, "out of memory");
    pthread_mutex_init(&st->out_mu, NULL);
    st->a.pty = true;
    st->cmd = argv;
    st->ncmd = argc;
    int rc = read_alloc(st);
    rc = rc ? rc : lay_out_pty(st);
    rc = rc ? rc : pick_master(st);
    rc = rc ? rc : run_pty(st, cmd, stop);
    step_free(st);
    return rc;
}

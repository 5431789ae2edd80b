/*
 * agent.c - `gpuorch agent` (agent.h): flags, registration, the heartbeat
 * and monitor threads, and the long-poll loop on the main thread.
 */
#include "agent/agent.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/attempts.h"
#include "agent/cgroup.h"
#include "agent/fence.h"
#include "agent/journal.h"
#include "agent/logsrv.h"
#include "agent/migplan.h"
#include "agent/steps.h"
#include "agent/priv.h"
#include "agent/probe.h"
#include "agent/runas.h"
#include "agent/sampler.h"
#include "gpu/gpu.h"
#include "proto/proto.h"
#include "util/httpc.h"
#include "util/log.h"
#include "util/opts.h"
#include "util/timefmt.h"
#include "util/token.h"
#include "util/errbuf.h"
#include "util/monotime.h"
#include "base/banned.h"

#define HELP_SHOWN 3

struct agent_args {
    const char *server, *join_file, *name, *pool, *state_dir, *nvml, *addr, *log_listen;
    const char *cgroup_root, *run_as, *shim, *mps_control;
    bool allow_root, probe, help, exit_poll;
    int64_t kill_grace_ms, sample_ms, poll_wait_s, dirty_wait_ms;
    int64_t cpus, mem_mib;
};

struct agent {
    struct agent_args a;
    char name[256];
    char token[HTTPC_TOKEN_MAX];
    struct gpu_backend *gpus;
    struct journal *journal;
    struct priv *priv;
    struct logsrv *logs;
    struct steps *steps;
    struct http_route step_routes[2]; /* the log server serves steps too */
    struct attempts *att;
    struct migplan *mig;       /* MIG repartition plans and their results */
    struct fence *fence;       /* the fence lease (fence.h) */
    struct runas_account acct; /* the network half's account, when started as root */
    bool drop;                 /* started as root: become acct once the privileged half runs */
    atomic_bool stop;
    atomic_bool reregister;
    pthread_mutex_t reg_lock; /* one registration at a time */
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gpuorch agent --server URL[,URL...] --join-token FILE [--name NAME]\n"
            "                     [--pool POOL]\n"
            "                     [--state-dir DIR] [--nvml PATH] [--addr ADDR]\n"
            "                     [--log-listen ADDR:PORT] [--cgroup-root PATH|auto|none]\n"
            "                     [--run-as USER] [--allow-root] [--kill-grace S]\n"
            "                     [--sample-interval MS] [--shim PATH] [--exit-poll]\n"
            "                     [--poll-wait S] [--dirty-wait S] [--cpus N] [--mem-mib N]\n"
            "                     [--mps-control PATH]\n"
            "       gpuorch agent --probe [--nvml PATH]\n"
            "\n"
            "Runs the node agent: registers this node's GPUs (found with NVML) with the\n"
            "controller, sends a heartbeat with a sample of every GPU, and runs the attempts\n"
            "the controller assigns: each at most once (journaled and fsync'd before the\n"
            "fork), under `gpuorch-shim`, as the job's Unix user, with CUDA_VISIBLE_DEVICES\n"
            "set to its GPUs' UUIDs (a MIG device's, on a MIG instance). On MIG GPUs it\n"
            "reports the instances and applies the controller's repartition plans, once\n"
            "each; it never changes MIG mode or resets a GPU. Jobs keep running if the\n"
            "agent stops or crashes; a restarted agent takes them up again. An agent\n"
            "that reaches no controller for the controller's --fence-lease stops its\n"
            "jobs (SIGKILL after --fence-grace) before they may run elsewhere, and\n"
            "reports them when it is back. See docs/agent.md.\n"
            "\n"
            "  --server URL[,URL...] the controller, e.g. http://10.0.0.1:8080 (required);\n"
            "                        several controllers' URLs, with commas: the leader is\n"
            "                        found among them and followed when it changes\n"
            "  --join-token FILE     the controller's DATA/join.token (required)\n"
            "  --name NAME           the node's name (default: the host name)\n"
            "  --pool POOL           the pool it joins (default main)\n"
            "  --state-dir DIR       journal, attempt directories and logs (default\n"
            "                        /var/lib/gpuorch/agent as root, else ./gpuorch-agent)\n"
            "  --nvml PATH           the NVML library (default libnvidia-ml.so.1)\n"
            "  --addr ADDR           where the controller reaches this node (default: the\n"
            "                        address the controller sees it connect from)\n"
            "  --log-listen A:PORT   the log server's address (default 0.0.0.0:0, any port)\n"
            "  --cgroup-root PATH    cgroup directory for attempts' cgroups (cgroup2, or a\n"
            "                        v1 hierarchy; limits the cgroup2 mount lacks go to\n"
            "                        the cpu and memory v1 hierarchies); auto (the\n"
            "                        default) uses CGROUP2_MOUNT/gpuorch/NAME, none turns\n"
            "                        them off (kills then go to process groups)\n"
            "  --run-as USER         the account the network half runs as once its privileged\n"
            "                        half is forked (default gpuorch; started as root only)\n"
            "  --allow-root          let jobs run as root (refused by default)\n"
            "  --kill-grace S        SIGTERM to SIGKILL on time limit (default 30)\n"
            "  --sample-interval MS  GPU sampling and heartbeat period (default 1000)\n"
            "  --poll-wait S         long-poll wait for assignments (default 30)\n"
            "  --dirty-wait S        how long an ended job's GPU processes may take to go\n"
            "                        before the GPU is reported dirty (default 10)\n"
            "  --cpus N, --mem-mib N what the node offers (default: the machine's)\n"
            "  --shim PATH           the gpuorch-shim executable (default: the one beside\n"
            "                        this gpuorch); root's, writable by no one else\n"
            "  --mps-control PATH    nvidia-cuda-mps-control, for pools with sharing: mps\n"
            "                        (default: the one on PATH); root's, writable by no one\n"
            "                        else. Without one, a fractional job of such a pool\n"
            "                        fails rather than run unenforced\n"
            "  --exit-poll           see jobs' exits by reading their status files each\n"
            "                        second, not by pidfd_open(2) (which needs Linux 5.3)\n"
            "  --probe               print the GPUs, one sample and where cgroups and\n"
            "                        their limits would go as JSON, and exit\n"
            "\n"
            "Exit status: 0 stopped by SIGTERM or SIGINT, 1 could not start, 2 usage error.\n");
}

static int usage_error(const char *flag, const char *value, const char *expected)
{
    fprintf(stderr, "gpuorch agent: %s: expected %s%s%s%s\n", flag, expected,
            value ? ", got '" : "", value ? value : "", value ? "'" : "");
    return 2;
}

/* A bad --server list, naming the bad entry. */
static int server_error(const struct httpc_urls_fault *f)
{
    char text[HTTPC_URL_FAULT_MAX];
    fprintf(stderr, "gpuorch agent: --server %s\n", httpc_urls_describe(f, text, sizeof(text)));
    return 2;
}

static void agent_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void agent_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vline("agent", fmt, ap);
    va_end(ap);
}

#define ARG(member) offsetof(struct agent_args, member)
/* A string flag: "" is refused ("--name: expected a value"). */
#define STRING(name_, member)                                                                      \
    {                                                                                              \
        .name = name_, .type = OPTS_STRING, .flags = OPTS_NONEMPTY, .offset = ARG(member)          \
    }
/* A whole number in lo..hi, stored times scale (1000: seconds as ms). */
#define NUMBER(name_, lo, hi, scale_, member)                                                      \
    {                                                                                              \
        .name = name_, .type = OPTS_INT, .min = lo, .max = hi, .scale = scale_,                    \
        .offset = ARG(member)                                                                      \
    }

static const struct opts_opt agent_opts[] = {
    STRING("server", server),
    STRING("join-token", join_file),
    STRING("name", name),
    STRING("pool", pool),
    STRING("state-dir", state_dir),
    STRING("nvml", nvml),
    STRING("addr", addr),
    STRING("log-listen", log_listen),
    STRING("cgroup-root", cgroup_root),
    STRING("run-as", run_as),
    STRING("shim", shim),
    STRING("mps-control", mps_control),
    NUMBER("kill-grace", 0, 3600, 1000, kill_grace_ms),
    NUMBER("sample-interval", 100, 60000, 1, sample_ms),
    NUMBER("poll-wait", 1, 300, 1, poll_wait_s),
    NUMBER("dirty-wait", 0, 3600, 1000, dirty_wait_ms),
    NUMBER("cpus", 1, 1 << 20, 1, cpus),
    NUMBER("mem-mib", 1, INT64_C(1) << 40, 1, mem_mib),
    {.name = "allow-root", .type = OPTS_FLAG, .offset = ARG(allow_root)},
    {.name = "exit-poll", .type = OPTS_FLAG, .offset = ARG(exit_poll)},
    {.name = "probe", .type = OPTS_FLAG, .offset = ARG(probe)},
    {.name = "help", .short_name = 'h', .type = OPTS_HELP, .offset = ARG(help)},
};

/* The words of argv by the table: 0, HELP_SHOWN, 1 (out of memory) or 2,
 * with the message printed. */
static int read_flags(int argc, char **argv, struct agent_args *a)
{
    struct opts p;
    char err[512];
    const char *stray = NULL;
    opts_init(&p, argc - 1, argv + 1, OPTS_TABLE(agent_opts), 0);
    int rc = opts_parse_flags(&p, a, &stray, err, sizeof(err));
    if (rc == GPO_ENOMEM) {
        fprintf(stderr, "gpuorch agent: out of memory\n");
        return 1;
    }
    if (rc == OPTS_HELP_GIVEN) {
        usage(stdout);
        return HELP_SHOWN;
    }
    if (rc < 0 && p.fault == OPTS_FAULT_MISSING_VALUE)
        return usage_error(p.word, NULL, "a value");
    if (rc < 0 && p.fault == OPTS_FAULT_BAD_VALUE && p.bad->type == OPTS_STRING) {
        char name[64];
        return usage_error(opts_name(p.bad, name, sizeof(name)), NULL, "a value");
    }
    if (rc < 0 && p.fault == OPTS_FAULT_BAD_VALUE) {
        fprintf(stderr, "gpuorch agent: %s\n", err);
        return 2;
    }
    /* Unknown, a value given to a flag, or a word that is no option. */
    if (rc < 0 || stray) {
        fprintf(stderr, "gpuorch agent: unknown flag '%s' (see gpuorch agent --help)\n",
                rc < 0 ? p.word : stray);
        return 2;
    }
    return 0;
}

static int parse_args(int argc, char **argv, struct agent_args *a)
{
    *a = (struct agent_args){.pool = "main",
                             .cgroup_root = "auto",
                             .log_listen = "0.0.0.0:0",
                             .kill_grace_ms = 30000,
                             .sample_ms = 1000,
                             .poll_wait_s = 30,
                             .dirty_wait_ms = 10000};
    int rc = read_flags(argc, argv, a);
    if (rc)
        return rc;
    if (a->probe)
        return 0;
    if (!a->server)
        return usage_error("--server", NULL, "the controller's URL (http://HOST:PORT)");
    if (!a->join_file)
        return usage_error("--join-token", NULL, "the file holding the join token");
    struct httpc_urls_fault f;
    if (httpc_urls_check(a->server, &f) != 0)
        return server_error(&f);
    return 0;
}

/* The node's path prefix, its name escaped. */
static void node_path(const struct agent *ag, const char *suffix, char *buf, size_t len)
{
    char esc[768];
    httpc_escape(ag->name, esc, sizeof(esc));
    snprintf(buf, len, "/v1/nodes/%s%s", esc, suffix);
}

/* The registration's body, as JSON text (caller frees), or NULL with err. */
static char *register_body(struct agent *ag, char *err, size_t errlen)
{
    struct sysinfo si;
    int64_t mem = ag->a.mem_mib;
    if (!mem)
        mem = sysinfo(&si) == 0 ? (int64_t)((uint64_t)si.totalram * si.mem_unit >> 20) : 1024;
    int64_t cpus = ag->a.cpus ? ag->a.cpus : sysconf(_SC_NPROCESSORS_ONLN);
    /* Encoders only read: the strings are borrowed, the GPUs are ours. */
    struct proto_register reg = {.pool = (char *)ag->a.pool,
                                 .cpus = (uint32_t)(cpus > 0 ? cpus : 1),
                                 .mem_mib = mem,
                                 .addr = (char *)ag->a.addr,
                                 .log_port = logsrv_port(ag->logs)};
    json_t *body = NULL;
    int rc = sampler_inventory(ag->gpus, &reg, err, errlen);
    if (!rc && (rc = proto_register_encode(&reg, &body)) != 0)
        errbuf_set(err, errlen, rc, "registration: %s", gpo_strerror(rc));
    reg.pool = reg.addr = NULL;
    proto_register_release(&reg);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!rc && !text)
        errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    return text;
}

/* PUT /v1/nodes/NAME with the GPUs; keeps the log token the answer carries.
 * 0, or a GPO_* code with a message in err (GPO_EAPI: the controller
 * refused it). */
static int register_node(struct agent *ag, struct httpc *c, char *err, size_t errlen)
{
    char *text = register_body(ag, err, errlen);
    if (!text)
        return GPO_ENOMEM;
    char path[1024];
    node_path(ag, "", path, sizeof(path));
    struct httpc_response r = {0};
    pthread_mutex_lock(&ag->reg_lock);
    int rc = httpc_request(c, "PUT", path, text, strlen(text), 15000, &r, err, errlen);
    free(text);
    json_t *ans = rc ? NULL : json_loadb(r.body, r.len, JSON_REJECT_DUPLICATES, NULL);
    struct proto_registered reg;
    char why[512] = "not JSON";
    if (!rc && (r.status == 200 || r.status == 201) && ans &&
        proto_registered_decode(ans, &reg, why, sizeof(why)) == 0) {
        logsrv_set_token(ag->logs, reg.log_token);
        fence_set(ag->fence, reg.fence_lease_ms, reg.fence_grace_ms);
        if (reg.fence_lease_ms && reg.fence_lease_ms < 3 * ag->a.sample_ms)
            agent_log("fence: the lease (%" PRId64 " ms) is under three heartbeats "
                      "(--sample-interval %" PRId64 " ms): one slow answer may fence this node",
                      reg.fence_lease_ms, ag->a.sample_ms);
        proto_registered_release(&reg);
        agent_log("registered node '%s' (%u GPU(s), pool %s, log port %u)", ag->name,
                  gpu_count(ag->gpus), ag->a.pool, logsrv_port(ag->logs));
    } else if (!rc && (r.status == 200 || r.status == 201)) {
        rc = errbuf_set(err, errlen, GPO_EAPI, "PUT %s%s: %ld, an answer we cannot read: %s",
                        httpc_url(c), path, r.status, why);
    } else if (!rc) {
        rc = errbuf_set(err, errlen, GPO_EAPI, "PUT %s%s: %ld %.300s", httpc_url(c), path, r.status,
                        r.body);
    }
    pthread_mutex_unlock(&ag->reg_lock);
    json_decref(ans);
    httpc_response_release(&r);
    return rc;
}

/* Registers, retrying (with a growing pause) until it works or we stop. */
static void register_until(struct agent *ag, struct httpc *c)
{
    int64_t pause = 500;
    char err[1024];
    while (!atomic_load(&ag->stop) && register_node(ag, c, err, sizeof(err)) != 0) {
        agent_log("registering: %s (retrying in %" PRId64 " ms)", err, pause);
        struct timespec ts = {pause / 1000, (pause % 1000) * 1000000};
        nanosleep(&ts, NULL);
        pause = pause * 2 > 10000 ? 10000 : pause * 2;
    }
}

/* A heartbeat's body as JSON text (caller frees), or NULL out of memory. */
static char *heartbeat_body(struct agent *ag)
{
    struct timespec at;
    clock_gettime(CLOCK_REALTIME, &at); /* the controller's ingest lag is measured from it */
    struct proto_heartbeat hb = {.sampled_at_ms = (int64_t)at.tv_sec * 1000 + at.tv_nsec / 1000000};
    json_t *body = NULL;
    int rc = sampler_sample(ag->gpus, ag->priv, &hb);
    rc = rc ? rc : attempts_dirty(ag->att, &hb.dirty, &hb.ndirty);
    rc = rc ? rc : proto_heartbeat_encode(&hb, &body);
    proto_heartbeat_release(&hb);
    char *text = rc ? NULL : json_dumps(body, JSON_COMPACT);
    json_decref(body);
    return text;
}

/* Heartbeats, each with a sample of every GPU and the dirty GPUs. */
static void *heartbeat_main(void *arg)
{
    struct agent *ag = arg;
    struct httpc *c = NULL;
    char err[1024];
    if (httpc_new(ag->a.server, ag->token, &c, err, sizeof(err))) {
        agent_log("heartbeat: %s", err);
        return NULL;
    }
    char path[1024];
    node_path(ag, "/heartbeat", path, sizeof(path));
    int64_t next = monotime_ms();
    bool failing = false;
    while (!atomic_load(&ag->stop)) {
        char *text = heartbeat_body(ag);
        struct httpc_response r = {0};
        /* The fence lease counts from the send time of an answered one. */
        int64_t sent = monotime_ms();
        int rc = text ? httpc_request(c, "POST", path, text, strlen(text),
                                      fence_heartbeat_timeout(ag->fence), &r, err, sizeof(err))
                      : errbuf_set(err, sizeof(err), GPO_ENOMEM, "out of memory");
        free(text);
        if (!rc && (r.status == 204 || r.status == 200))
            fence_answered(ag->fence, sent);
        if (!rc && r.status == 404) {
            agent_log("heartbeat: the controller does not know this node; registering again");
            register_until(ag, c);
        } else if (rc || r.status != 204) {
            if (!failing)
                agent_log("heartbeat: %s", rc ? err : r.body);
            failing = true;
        } else if (failing) {
            agent_log("heartbeat: the controller answers again");
            failing = false;
        }
        httpc_response_release(&r);
        next += ag->a.sample_ms;
        int64_t now = monotime_ms();
        if (next < now)
            next = now; /* late (a slow controller): do not burst */
        struct timespec ts = {(next - now) / 1000, ((next - now) % 1000) * 1000000};
        nanosleep(&ts, NULL);
    }
    httpc_free(c);
    return NULL;
}

/* The monitor: ended shims, deadlines, reports. */
static void *monitor_main(void *arg)
{
    struct agent *ag = arg;
    struct httpc *c = NULL;
    char err[1024];
    if (httpc_new(ag->a.server, ag->token, &c, err, sizeof(err))) {
        agent_log("monitor: %s", err);
        return NULL;
    }
    while (!atomic_load(&ag->stop)) {
        int64_t wait = attempts_tick(ag->att, c, monotime_ms());
        /* Until the next deadline, or an exit (its pidfd), a launch or a kill. */
        attempts_wait(ag->att, wait);
    }
    httpc_free(c);
    return NULL;
}

/* The long-poll loop, on the calling thread, until a signal stops the agent. */
static void poll_loop(struct agent *ag, struct httpc *c)
{
    char path[1100], base[1024], mig[1024], err[1024];
    node_path(ag, "/assignments", base, sizeof(base));
    node_path(ag, "/mig", mig, sizeof(mig));
    int64_t since = -1;
    bool failing = false;
    while (!atomic_load(&ag->stop)) {
        if (since >= 0)
            snprintf(path, sizeof(path), "%s?wait=%" PRId64 "&since=%" PRId64, base,
                     ag->a.poll_wait_s, since);
        else
            snprintf(path, sizeof(path), "%s?wait=%" PRId64, base, ag->a.poll_wait_s);
        struct httpc_response r = {0};
        /* The wait and 2 s for the answer: a controller that accepts and never
         * answers (frozen) holds the poll no longer, and the next one goes to
         * the next controller of the list. */
        int rc = httpc_request(c, "GET", path, NULL, 0, (ag->a.poll_wait_s + 2) * 1000, &r, err,
                               sizeof(err));
        struct proto_assignments ans;
        char why[512] = "not JSON";
        json_t *o =
            !rc && r.status == 200 ? json_loadb(r.body, r.len, JSON_REJECT_DUPLICATES, NULL) : NULL;
        bool good = o && proto_assignments_decode(o, &ans, why, sizeof(why)) == 0;
        json_decref(o);
        if (good) {
            if (failing)
                agent_log("assignments: the controller answers again");
            failing = false;
            since = ans.rev;
            fence_set(ag->fence, ans.fence_lease_ms, ans.fence_grace_ms);
            attempts_apply(ag->att, &ans, monotime_ms());
            /* After the attempts: one taken up from the journal has learned
             * its MIG devices, which no plan may destroy. */
            migplan_apply(ag->mig, &ans);
            proto_assignments_release(&ans);
            if (fence_active(ag->fence)) {
                /* Its runs wait: ask again soon, not for what changes. */
                since = -1;
                struct timespec ts = {0, 200L * 1000000};
                nanosleep(&ts, NULL);
            }
        } else {
            if (!failing)
                agent_log("assignments: %s", rc                ? err
                                             : r.status != 200 ? (r.body ? r.body : "no body")
                                                               : why);
            failing = true;
            since = -1;
            if (!rc && r.status == 404)
                register_until(ag, c);
            struct timespec ts = {0, 500L * 1000000};
            nanosleep(&ts, NULL);
        }
        httpc_response_release(&r);
        migplan_report(ag->mig, c, mig); /* results owed, also from before a restart */
    }
}

/* Signals: stop at once. Shims outlive us by design; a launch in flight is
 * finished first (attempts_apply holds the table), so none is left half-begun. */
static void *signal_main(void *arg)
{
    struct agent *ag = arg;
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    int sig = 0;
    sigwait(&sigs, &sig);
    atomic_store(&ag->stop, true);
    agent_log("%s: stopping (running jobs go on; a restarted agent takes them up)",
              sig == SIGINT ? "SIGINT" : "SIGTERM");
    attempts_active(ag->att); /* waits for the table: no launch half done */
    /* The privileged half sees its socket close, removes the node's cgroup
     * directory if it is empty, and exits. */
    (void)fflush(stderr); /* the process ends here: a failed flush has nowhere to go */
    _exit(0);
}

/* The node's name: --name, else the host name's first label in lower case. */
static int node_name(struct agent *ag, char *err, size_t errlen)
{
    if (ag->a.name) {
        snprintf(ag->name, sizeof(ag->name), "%s", ag->a.name);
    } else if (gethostname(ag->name, sizeof(ag->name) - 1) != 0) {
        return errbuf_set(err, errlen, -errno, "gethostname: %s (use --name)", strerror(errno));
    } else {
        ag->name[strcspn(ag->name, ".")] = '\0';
        for (char *c = ag->name; *c; c++) /* host names are case-blind; ours are lower */
            *c = (char)tolower((unsigned char)*c);
    }
    bool name_ok = ag->name[0] != '\0' && strlen(ag->name) <= 253;
    for (const char *c = ag->name; *c && name_ok; c++)
        name_ok = (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '.';
    if (!name_ok)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "node name '%.100s': expected lower-case letters, digits, '-' and '.' "
                          "(a host name; set one with --name)",
                          ag->name);
    return 0;
}

/* The network half's own directory in the state directory: the journal and
 * its lock. */
#define NET_DIR "net"

/* A journal found in STATE itself (STATE/journal) is moved into STATE/net
 * (same file system, one rename), so that its attempts are taken up. */
static int move_old_journal(const char *abs, char *err, size_t errlen)
{
    char old[PATH_MAX + 16], now[PATH_MAX + 32];
    struct stat st;
    snprintf(old, sizeof(old), "%s/journal", abs);
    snprintf(now, sizeof(now), "%s/%s/journal", abs, NET_DIR);
    if (lstat(old, &st) != 0 || !S_ISREG(st.st_mode) || lstat(now, &st) == 0)
        return 0;
    if (rename(old, now) != 0)
        return errbuf_set(err, errlen, -errno, "moving %s to %s: %s", old, now, strerror(errno));
    snprintf(old, sizeof(old), "%s/journal.lock", abs);
    unlink(old);
    return 0;
}

/* The state directory, made and resolved into abs (PATH_MAX bytes), with
 * STATE/net and STATE/scripts. STATE stays its owner's (root's, for an
 * agent started as root), so that the account cannot swap what the
 * privileged half works in (attempts/, scripts/) for a link; STATE/net
 * and STATE/scripts are given to the account (runas_give), with the
 * journal and fence files an earlier run may have left. */
static int state_dir(struct agent *ag, char *abs, char *err, size_t errlen)
{
    const struct agent_args *a = &ag->a;
    const char *state = a->state_dir     ? a->state_dir
                        : geteuid() == 0 ? "/var/lib/gpuorch/agent"
                                         : "gpuorch-agent";
    if (mkdir(state, 0755) != 0 && errno != EEXIST)
        return errbuf_set(err, errlen, -errno, "--state-dir %s: %s", state, strerror(errno));
    if (!realpath(state, abs))
        return errbuf_set(err, errlen, -errno, "--state-dir %s: %s", state, strerror(errno));
    const char *const dirs[] = {NET_DIR, "scripts"};
    char sub[PATH_MAX + 32];
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        snprintf(sub, sizeof(sub), "%s/%s", abs, dirs[i]);
        if (mkdir(sub, i == 0 ? 0700 : 0755) != 0 && errno != EEXIST)
            return errbuf_set(err, errlen, -errno, "%s: %s", sub, strerror(errno));
    }
    int rc = move_old_journal(abs, err, errlen);
    if (rc || !ag->drop)
        return rc;
    rc = runas_can_reach(&ag->acct, abs, err, errlen);
    const char *const owned[] = {NET_DIR, "scripts", NET_DIR "/journal", NET_DIR "/journal.lock",
                                 NET_DIR "/fence"};
    for (size_t i = 0; !rc && i < sizeof(owned) / sizeof(owned[0]); i++) {
        snprintf(sub, sizeof(sub), "%s/%s", abs, owned[i]);
        rc = runas_give(&ag->acct, sub, i >= 2, err, errlen);
    }
    return rc;
}

/* nvidia-cuda-mps-control: --mps-control (made absolute), else the first
 * on PATH, into buf (PATH_MAX bytes); false when there is none. */
static bool mps_control_path(const struct agent_args *a, char *buf)
{
    if (a->mps_control)
        return realpath(a->mps_control, buf) != NULL ||
               snprintf(buf, PATH_MAX, "%s", a->mps_control) > 0;
    const char *path = getenv("PATH");
    for (const char *p = path ? path : ""; *p;) {
        size_t n = strcspn(p, ":");
        if (n && p[0] == '/' && n + sizeof("/nvidia-cuda-mps-control") < PATH_MAX) {
            snprintf(buf, PATH_MAX, "%.*s/nvidia-cuda-mps-control", (int)n, p);
            if (access(buf, X_OK) == 0)
                return true;
        }
        p += n + (p[n] == ':');
    }
    return false;
}

/* Forks the privileged half (priv.h) with the cgroup root: auto is
 * CGROUP2_MOUNT/gpuorch/NODE, so that agents posing as several nodes on one
 * machine (tests, dev clusters) never name the same cgroup. */
static int start_priv(struct agent *ag, const char *abs_state, char *err, size_t errlen)
{
    const struct agent_args *a = &ag->a;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return errbuf_set(err, errlen, n < 0 ? -errno : GPO_EIO, "readlink /proc/self/exe: %s",
                          n < 0 ? strerror(errno) : "empty");
    self[n] = '\0';
    /* The shim lives beside this binary (meson builds and installs it there). */
    char shim[PATH_MAX + 16];
    char *slash = strrchr(self, '/');
    snprintf(shim, sizeof(shim), "%.*s/gpuorch-shim", slash ? (int)(slash - self) : 0, self);
    char cg[PATH_MAX] = "";
    const char *cg_root = strcmp(a->cgroup_root, "none") == 0 ? NULL : a->cgroup_root;
    struct cgroup_root *auto_root = NULL;
    if (cg_root && strcmp(cg_root, "auto") == 0 &&
        cgroup_root_open("auto", &auto_root, NULL, 0) == 0) {
        snprintf(cg, sizeof(cg), "%s/%s", cgroup_root_path(auto_root), ag->name);
        cgroup_root_close(auto_root);
        if (mkdir(cg, 0755) == 0 || errno == EEXIST)
            cg_root = cg;
    }
    /* The fence's file (fence.h), which every shim watches (shim.h). */
    char fence_file[PATH_MAX + 32];
    snprintf(fence_file, sizeof(fence_file), "%s/%s/%s", abs_state, NET_DIR, FENCE_FILE);
    struct priv_config pc = {
        .state_dir = abs_state,
        .fence_file = fence_file,
        .shim_exe = a->shim ? a->shim : shim,
        .cgroup_root = cg_root,
        .cgroup_root_ours = cg_root == cg,
        .allow_root = a->allow_root,
        .agent_gid = ag->drop ? ag->acct.gid : getgid(),
        .agent_uid = ag->drop ? ag->acct.uid : geteuid(),
        .nvml = a->nvml,
    };
    char mps[PATH_MAX];
    pc.mps_control = mps_control_path(a, mps) ? mps : NULL;
    int rc = priv_start(&pc, &ag->priv, err, errlen);
    if (rc == GPO_EPERM && pc.mps_control && !a->mps_control) {
        /* One on PATH that is not safe to run as root: no MPS, said once. */
        agent_log("%s; CUDA MPS is off (fractional jobs of a sharing: mps pool fail)", err);
        pc.mps_control = NULL;
        rc = priv_start(&pc, &ag->priv, err, errlen);
    }
    if (!rc)
        agent_log("CUDA MPS: %s", pc.mps_control ? pc.mps_control
                                                 : "no nvidia-cuda-mps-control (fractional jobs "
                                                   "of a sharing: mps pool fail)");
    if (!rc && !priv_has_cgroups(ag->priv))
        agent_log("no cgroups: %s; kills go to process groups, and CPU and memory limits are "
                  "not enforced",
                  priv_cgroup_note(ag->priv));
    else if (!rc)
        agent_log("%s", priv_cgroup_note(ag->priv));
    return rc;
}

/* The log server's opener: the privileged half opens the file (it may be
 * any user's, anywhere) and passes the descriptor back. */
static int open_log(void *ctx, int64_t job, int64_t attempt, const char *stream, const char *path,
                    uid_t uid, int *ret_fd, int64_t *ret_size)
{
    struct agent *ag = ctx;
    (void)path; /* the privileged half reads attempt.json itself */
    (void)uid;
    if (job < 1 || attempt < 1 || attempt > UINT32_MAX)
        return GPO_ENOENT;
    return priv_log_open(ag->priv, (uint64_t)job, (uint32_t)attempt,
                         strcmp(stream, "stderr") == 0 ? PRIV_STREAM_STDERR : PRIV_STREAM_STDOUT, 0,
                         ret_fd, ret_size, NULL, 0);
}

static int start_logs(struct agent *ag, const char *abs_state, char *err, size_t errlen)
{
    const char *listen = ag->a.log_listen;
    char laddr[256] = "";
    const char *colon = strrchr(listen, ':');
    int64_t lport = 0;
    if (!colon || (size_t)(colon - listen) >= sizeof(laddr) ||
        opts_parse_int(colon + 1, 0, 65535, &lport) != 0)
        return errbuf_set(err, errlen, GPO_EUSAGE, "--log-listen %s: expected ADDR:PORT", listen);
    memcpy(laddr, listen, (size_t)(colon - listen));
    struct logsrv_config lc = {.bind_addr = laddr,
                               .port = (uint16_t)lport,
                               .state_dir = abs_state,
                               .token = NULL,
                               .open = open_log,
                               .open_ctx = ag};
    struct steps_config sc = {
        .node = ag->name, .priv = ag->priv, .as_root = priv_is_root(ag->priv), .log = agent_log};
    if (steps_new(&sc, &ag->steps) != 0)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    ag->step_routes[0] = steps_route(ag->steps);
    ag->step_routes[1] = steps_input_route(ag->steps);
    lc.extra_routes = ag->step_routes;
    lc.nextra = 2;
    return logsrv_new(&lc, &ag->logs, err, errlen);
}

/* Who the network half runs as: started as root, --run-as (default
 * RUNAS_DEFAULT_USER), looked up now and taken once the privileged half
 * runs; else the user it was started as (--run-as must then name it). */
static int choose_account(struct agent *ag, char *err, size_t errlen)
{
    const char *name = ag->a.run_as ? ag->a.run_as : RUNAS_DEFAULT_USER;
    if (geteuid() == 0) {
        ag->drop = true;
        return runas_lookup(name, &ag->acct, err, errlen);
    }
    struct runas_account self;
    if (ag->a.run_as && (runas_lookup(name, &self, err, errlen) != 0 || self.uid != geteuid()))
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "--run-as %s: only an agent started as root changes its account", name);
    return 0;
}

/* The fence's hooks (fence.h). */
static void on_fence(void *arg, const char *reason, int64_t unreached_ms, int64_t grace_ms,
                     int64_t now_ms)
{
    struct agent *ag = arg;
    attempts_fence(ag->att, reason, unreached_ms, grace_ms, now_ms);
}

static void on_unfence(void *arg)
{
    struct agent *ag = arg;
    size_t owed = attempts_unfence(ag->att);
    if (owed)
        agent_log("fence: %zu fenced attempt(s) to report", owed);
}

static int start(struct agent *ag, char *err, size_t errlen)
{
    const struct agent_args *a = &ag->a;
    char abs_state[PATH_MAX];
    /* As root: the token (root's file), the state directory (given to the
     * account), the privileged half (a plain fork of this process, so
     * before anything starts a thread: NVML may, libcurl and the log
     * server do) and NVML (as root it may create /dev/nvidia*). */
    int rc = token_read_join(a->join_file, ag->token, sizeof(ag->token), err, errlen);
    rc = rc ? rc : node_name(ag, err, errlen);
    rc = rc ? rc : choose_account(ag, err, errlen);
    rc = rc ? rc : state_dir(ag, abs_state, err, errlen);
    rc = rc ? rc : start_priv(ag, abs_state, err, errlen);
    rc = rc ? rc : gpu_backend_open(a->nvml, &ag->gpus, err, errlen);
    /* Then the account, for good; the journal is opened as it, so that no
     * file in the state directory is opened as root. Its lock stops a
     * second agent on this state here. */
    rc = rc || !ag->drop ? rc : runas_drop(&ag->acct, err, errlen);
    char net[PATH_MAX + 16];
    snprintf(net, sizeof(net), "%s/%s", abs_state, NET_DIR);
    rc = rc ? rc : journal_open(net, &ag->journal, err, errlen);
    struct fence_config fc = {
        .dir = net, .fence = on_fence, .unfence = on_unfence, .arg = ag, .log = agent_log};
    rc = rc ? rc : fence_new(&fc, monotime_ms(), &ag->fence, err, errlen);
    rc = rc ? rc : start_logs(ag, abs_state, err, errlen);
    if (rc)
        return rc;
    struct attempts_config ac = {.node = ag->name,
                                 .state_dir = abs_state,
                                 .journal = ag->journal,
                                 .priv = ag->priv,
                                 .gpus = ag->gpus,
                                 .kill_grace_ms = a->kill_grace_ms,
                                 .dirty_wait_ms = a->dirty_wait_ms,
                                 .steps = ag->steps,
                                 .exit_poll = a->exit_poll,
                                 .log = agent_log};
    if ((rc = attempts_new(&ac, &ag->att)) != 0)
        return errbuf_set(err, errlen, rc, "out of memory");
    snprintf(net, sizeof(net), "%s/%s/mig", abs_state, NET_DIR);
    struct migplan_config mc = {
        .dir = net, .gpus = ag->gpus, .att = ag->att, .priv = ag->priv, .log = agent_log};
    if ((rc = migplan_new(&mc, &ag->mig, err, errlen)) != 0)
        return rc;
    size_t taken = attempts_recover(ag->att, monotime_ms());
    agent_log("node '%s': %u GPU(s) via %s, state in %s, %zu attempt(s) taken up from the "
              "journal; network half runs as uid %ld, privileged half pid %ld",
              ag->name, gpu_count(ag->gpus), gpu_backend_name(ag->gpus), abs_state, taken,
              (long)geteuid(), (long)priv_pid(ag->priv));
    return 0;
}

int agent_command(int argc, char **argv)
{
    struct agent ag = {0};
    int rc = parse_args(argc, argv, &ag.a);
    if (rc)
        return rc == HELP_SHOWN ? 0 : rc;
    if (ag.a.probe)
        return agent_probe(ag.a.nvml);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    /* A peer that goes away makes its write fail with EPIPE instead of
     * ending the agent. */
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) {
        fprintf(stderr, "gpuorch agent: signal(SIGPIPE): %s\n", strerror(errno));
        return 1;
    }
    pthread_mutex_init(&ag.reg_lock, NULL);
    char err[1024] = "";
    struct httpc *c = NULL;
    if (start(&ag, err, sizeof(err)) || httpc_new(ag.a.server, ag.token, &c, err, sizeof(err))) {
        fprintf(stderr, "gpuorch agent: %s\n", err);
        return 1;
    }
    /* The fence runs from the start: an agent restarted while cut off
     * still fences at its deadline, registered or not. */
    if (fence_start(ag.fence)) {
        fprintf(stderr, "gpuorch agent: pthread_create failed\n");
        return 1;
    }
    register_until(&ag, c);
    pthread_t sig_t, beat_t, mon_t;
    if (pthread_create(&sig_t, NULL, signal_main, &ag) ||
        pthread_create(&beat_t, NULL, heartbeat_main, &ag) ||
        pthread_create(&mon_t, NULL, monitor_main, &ag)) {
        fprintf(stderr, "gpuorch agent: pthread_create failed\n");
        return 1;
    }
    poll_loop(&ag, c);
    pthread_join(sig_t, NULL); /* signal_main exits the process */
    return 0;
}

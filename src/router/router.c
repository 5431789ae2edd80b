/*
 * router.c - `gpuorch router`: flags, listeners, threads, and the router's
 * own pages (/metrics, GET /v1/models) (router.h, docs/router.md).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "router/router.h"
#include "util/httpc.h"
#include "util/log.h"
#include "util/opts.h"
#include "util/prom.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define HELP_SHOWN 3

void router_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vline("router", fmt, ap);
    va_end(ap);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gpuorch router --server URL[,URL...] --join-token FILE\n"
            "                      [--listen ADDR:PORT]\n"
            "                      [--name NAME] [--threads N] [--max-connections N]\n"
            "                      [--max-body BYTES] [--max-header BYTES] [--idle-timeout S]\n"
            "\n"
            "Runs a router: an HTTP/1.1 reverse proxy in front of the replicas of the\n"
            "cluster's services. It learns services and their ready replicas from the\n"
            "controller (a long poll) and keeps routing on the last table it got while the\n"
            "controller is away. Routes /s/SERVICE/PATH (forwards /PATH), a service's\n"
            "hosts (the Host header), and the JSON body's \"model\" on POST\n"
            "/v1/chat/completions, /v1/completions and /v1/embeddings; GET /v1/models\n"
            "lists the models, GET /metrics and /healthz are its own. See docs/router.md.\n"
            "\n"
            "  --server URL[,URL...] the controller, e.g. http://10.0.0.1:8080 (required);\n"
            "                        several controllers' URLs, with commas: the leader is\n"
            "                        found among them and followed when it changes\n"
            "  --join-token FILE     the controller's DATA/join.token (required)\n"
            "  --listen ADDR:PORT    where clients connect (default 127.0.0.1:8081)\n"
            "  --name NAME           the name it reports under (default: the host name)\n"
            "  --threads N           event loops, each listening on the port (SO_REUSEPORT)\n"
            "                        (default 1)\n"
            "  --max-connections N   client connections at once (default 10000)\n"
            "  --max-body BYTES      a request's body, K/M/G suffixes (default 16M)\n"
            "  --max-header BYTES    a request's headers (default 64K)\n"
            "  --idle-timeout S      an idle client connection closes (default 60)\n"
            "\n"
            "Exit status: 0 stopped by SIGTERM or SIGINT, 1 could not start, 2 usage error.\n");
}

#define ARG(member) offsetof(struct router_args, member)
#define STRING(name_, member)                                                                      \
    {                                                                                              \
        .name = name_, .type = OPTS_STRING, .flags = OPTS_NONEMPTY, .offset = ARG(member)          \
    }
#define NUMBER(name_, type_, lo, hi, member)                                                       \
    {                                                                                              \
        .name = name_, .type = type_, .min = lo, .max = hi, .offset = ARG(member)                  \
    }

static const struct opts_opt router_opts[] = {
    STRING("server", server),
    STRING("join-token", join_file),
    STRING("listen", listen),
    STRING("name", name),
    NUMBER("threads", OPTS_INT, 1, RT_THREADS_MAX, threads),
    NUMBER("max-connections", OPTS_INT, 1, 1000000, max_connections),
    NUMBER("max-body", OPTS_SIZE, 0, INT64_C(1) << 32, max_body),
    NUMBER("max-header", OPTS_SIZE, 1024, INT64_C(1) << 24, max_header),
    NUMBER("idle-timeout", OPTS_SECONDS, 1, 86400, idle_timeout_s),
    {.name = "help", .short_name = 'h', .type = OPTS_HELP, .offset = ARG(help)},
};

static int usage_error(const char *flag, const char *value, const char *expected)
{
    fprintf(stderr, "gpuorch router: %s: expected %s%s%s%s\n", flag, expected,
            value ? ", got '" : "", value ? value : "", value ? "'" : "");
    return 2;
}

static int parse_args(int argc, char **argv, struct router_args *a)
{
    *a = (struct router_args){.listen = "127.0.0.1:8081",
                              .threads = 1,
                              .max_connections = 10000,
                              .max_body = 16 << 20,
                              .max_header = 64 << 10,
                              .idle_timeout_s = 60};
    struct opts p;
    char err[512];
    const char *stray = NULL;
    opts_init(&p, argc - 1, argv + 1, OPTS_TABLE(router_opts), 0);
    int rc = opts_parse_flags(&p, a, &stray, err, sizeof(err));
    if (rc == OPTS_HELP_GIVEN) {
        usage(stdout);
        return HELP_SHOWN;
    }
    if (rc < 0 && p.fault == OPTS_FAULT_MISSING_VALUE)
        return usage_error(p.word, NULL, "a value");
    if (rc < 0 && p.fault == OPTS_FAULT_BAD_VALUE) {
        fprintf(stderr, "gpuorch router: %s\n", err);
        return 2;
    }
    if (rc < 0 || stray) {
        fprintf(stderr, "gpuorch router: unknown flag '%s' (see gpuorch router --help)\n",
                rc < 0 ? p.word : stray);
        return 2;
    }
    if (!a->server)
        return usage_error("--server", NULL, "the controller's URL (http://HOST:PORT)");
    if (!a->join_file)
        return usage_error("--join-token", NULL, "the file holding the join token");
    struct httpc_urls_fault f;
    if (httpc_urls_check(a->server, &f) != 0) {
        char text[HTTPC_URL_FAULT_MAX];
        fprintf(stderr, "gpuorch router: --server %s\n",
                httpc_urls_describe(&f, text, sizeof(text)));
        return 2;
    }
    return 0;
}

/* A listening socket on addr (IPv4 ADDR:PORT), SO_REUSEPORT so that every
 * worker has its own; *port: 0 takes any, and is then the one taken. */
static int listen_on(const char *where, uint16_t *port)
{
    char host[64];
    const char *colon = strrchr(where, ':');
    if (!colon || (size_t)(colon - where) >= sizeof(host))
        return -usage_error("--listen", where, "ADDR:PORT");
    memcpy(host, where, (size_t)(colon - where));
    host[colon - where] = '\0';
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(*port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -usage_error("--listen", where, "an IPv4 ADDR:PORT");
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 4096) != 0) {
        fprintf(stderr, "gpuorch router: --listen %s: %s\n", where, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    socklen_t sl = sizeof(sa);
    if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        *port = ntohs(sa.sin_port);
    return fd;
}

static int listen_port(const char *where, uint16_t *port)
{
    const char *colon = strrchr(where, ':');
    char *end = NULL;
    long v = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || !colon[1] || *end || v < 0 || v > 65535)
        return usage_error("--listen", where, "ADDR:PORT with a port from 0 to 65535");
    *port = (uint16_t)v;
    return 0;
}

static int start(struct router *r)
{
    uint16_t port = 0;
    if (listen_port(r->a.listen, &port))
        return 2;
    for (int64_t k = 0; k < r->a.threads; k++) {
        int fd = listen_on(r->a.listen, &port);
        if (fd < 0)
            return fd == -1 ? 1 : 2;
        struct rt_worker *w = NULL;
        if (rt_worker_new(r, (size_t)k, fd, &w)) {
            fprintf(stderr, "gpuorch router: out of memory\n");
            return 1;
        }
        r->workers[r->nworkers++] = w;
    }
    char err[512];
    pthread_t control[2];
    if (rt_control_start(r, control, err, sizeof(err))) {
        fprintf(stderr, "gpuorch router: %s\n", err);
        return 1;
    }
    for (size_t k = 0; k < r->nworkers; k++)
        if (pthread_create(&r->workers[k]->thread, NULL, rt_worker_run, r->workers[k])) {
            fprintf(stderr, "gpuorch router: starting a worker failed\n");
            return 1;
        }
    char host[64];
    snprintf(host, sizeof(host), "%.*s", (int)(strrchr(r->a.listen, ':') - r->a.listen),
             r->a.listen);
    router_log("listening on http://%s:%u (%zu thread%s), controller %s", host, port, r->nworkers,
               r->nworkers == 1 ? "" : "s", r->a.server);
    return 0;
}

int router_command(int argc, char **argv)
{
    static struct router r; /* lives as long as the process */
    int rc = parse_args(argc, argv, &r.a);
    if (rc)
        return rc == HELP_SHOWN ? 0 : rc;
    char err[512] = "";
    if (token_read_join(r.a.join_file, r.token, sizeof(r.token), err, sizeof(err)) ||
        token_lib_init() != 0) {
        fprintf(stderr, "gpuorch router: %s\n", *err ? err : "libsodium did not start");
        return 1;
    }
    if (r.a.name)
        snprintf(r.name, sizeof(r.name), "%s", r.a.name);
    else if (gethostname(r.name, sizeof(r.name) - 1) != 0 || !*r.name)
        snprintf(r.name, sizeof(r.name), "router");
    pthread_mutex_init(&r.lock, NULL);
    pthread_mutex_init(&r.wake_lock, NULL);
    r.started_us = rt_now_us();
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL); /* threads inherit it; sigwait below */
    (void)signal(SIGPIPE, SIG_IGN);          /* a closed client is seen as a write error */
    rc = start(&r);
    if (rc)
        return rc;
    int sig = 0;
    sigwait(&sigs, &sig);
    atomic_store(&r.stop, true);
    router_log("%s: stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
    (void)fflush(stderr); /* the process ends here */
    _exit(0);
}

/* ---- the router's own pages ---- */

void rt_models_list(const struct rt_table *t, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; t && i < t->nservices && at < len; i++) {
        int n = snprintf(buf + at, len - at, "%s%s", i ? ", " : "", t->services[i].model);
        if (n < 0)
            break;
        at += (size_t)n;
    }
}

char *rt_models_json(const struct rt_table *t)
{
    json_t *data = json_array();
    for (size_t i = 0; data && t && i < t->nservices; i++)
        json_array_append_new(data,
                              json_pack("{s:s,s:s,s:I,s:s}", "id", t->services[i].model, "object",
                                        "model", "created", (json_int_t)0, "owned_by", "gpuorch"));
    json_t *o = data ? json_pack("{s:s,s:o}", "object", "list", "data", data) : NULL;
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

static void hist_sample(struct prom *p, const char *name, const char *service,
                        const struct rt_hist *h)
{
    uint64_t counts[RT_HIST_BOUNDS], total = 0;
    for (size_t k = 0; k <= RT_HIST_BOUNDS; k++) {
        uint64_t c = atomic_load(&h->counts[k]);
        if (k < RT_HIST_BOUNDS)
            counts[k] = c;
        total += c;
    }
    const char *labels[] = {"service", service, NULL};
    prom_histogram(p, name, labels, proto_latency_bounds_s, counts, RT_HIST_BOUNDS,
                   (double)atomic_load(&h->sum_us) / 1e6, total);
}

char *rt_metrics_text(struct router *r, const struct rt_table *t, size_t *ret_len)
{
    struct prom *p = prom_new();
    if (!p)
        return NULL;
    size_t n = t ? t->nservices : 0;
    prom_family(p, "gpuorch_router_requests_total", PROM_COUNTER,
                "Requests answered, by service and status code");
    for (size_t i = 0; i < n; i++)
        for (size_t c = 0; c < RT_CODES; c++) {
            unsigned long long v = atomic_load(&t->services[i].stats->codes[c]);
            if (!v)
                continue;
            char code[8];
            snprintf(code, sizeof(code), "%zu", c + 100);
            const char *labels[] = {"service", t->services[i].name, "code", code, NULL};
            prom_sample(p, "gpuorch_router_requests_total", labels, (double)v);
        }
    prom_family(p, "gpuorch_router_ttfb_seconds", PROM_HISTOGRAM,
                "Time from a request's arrival to its answer's first byte from the replica");
    for (size_t i = 0; i < n; i++)
        hist_sample(p, "gpuorch_router_ttfb_seconds", t->services[i].name,
                    &t->services[i].stats->ttfb);
    prom_family(p, "gpuorch_router_request_seconds", PROM_HISTOGRAM,
                "Time from a request's arrival to the end of its answer");
    for (size_t i = 0; i < n; i++)
        hist_sample(p, "gpuorch_router_request_seconds", t->services[i].name,
                    &t->services[i].stats->total);
    prom_family(p, "gpuorch_router_queue_length", PROM_GAUGE,
                "Requests held while no replica can take them");
    for (size_t i = 0; i < n; i++) {
        const char *labels[] = {"service", t->services[i].name, NULL};
        prom_sample(p, "gpuorch_router_queue_length", labels,
                    atomic_load(&t->services[i].stats->queued));
    }
    prom_family(p, "gpuorch_router_inflight", PROM_GAUGE,
                "Requests sent to a replica whose answer has not ended");
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < t->services[i].neps; k++) {
            char replica[16];
            snprintf(replica, sizeof(replica), "%u", t->services[i].eps[k].ep->replica);
            const char *labels[] = {"service", t->services[i].name, "replica", replica, NULL};
            prom_sample(p, "gpuorch_router_inflight", labels,
                        atomic_load(&t->services[i].eps[k].ep->inflight));
        }
    prom_family(p, "gpuorch_router_connections", PROM_GAUGE, "Client connections open");
    prom_sample(p, "gpuorch_router_connections", NULL, atomic_load(&r->connections));
    prom_family(p, "gpuorch_router_table_revision", PROM_GAUGE,
                "The routing table's revision (-1: none yet)");
    prom_sample(p, "gpuorch_router_table_revision", NULL, t ? (double)t->rev : -1);
    size_t len = 0;
    const char *text = prom_text(p, &len);
    char *copy = text ? strdup(text) : NULL;
    prom_free(p);
    if (copy)
        *ret_len = len;
    return copy;
}

/*
 * server.c - `gpuorch server`: its flags, the server object wired up, and the
 * controller started and stopped through a table of subsystems (server.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <pwd.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "server/api/api.h"
#include "server/lead/lead.h"
#include "server/mig/mig.h"
#include "server/sched/sched.h"
#include "server/serve/serve.h"
#include "server/server.h"
#include "server/srv.h"
#include "util/errbuf.h"
#include "util/opts.h"
#include "util/token.h"
#include "base/banned.h"

#define DEFAULT_DATA   "gpuorch-data"
#define DEFAULT_LISTEN "127.0.0.1:8080"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gpuorch server [--data DIR] [--listen ADDR:PORT] [--tls-cert FILE --tls-key "
            "FILE]\n"
            "                      [--body-limit BYTES] [--port-file FILE] [--access-log]\n"
            "                      [--pass-interval S] [--node-timeout S]\n"
            "                      [--metrics-public] [--cost-timezone TZ]\n"
            "                      [--metrics-retention-days N] [--idempotency-ttl S]\n"
            "                      [--recover] [--store URL] [--advertise URL] [--lease S]\n"
            "                      [--fence-lease S] [--fence-grace S]\n"
            "\n"
            "Runs the controller: the REST API under /v1 (docs/api.md) over a durable job\n"
            "store (SQLite, WAL, synchronous=FULL) in DIR. A job is acknowledged (201) only\n"
            "once it is on disk. At first start it creates the user 'admin' and writes its\n"
            "token to DIR/admin.token (mode 0600). SIGINT or SIGTERM stops it cleanly.\n"
            "With --store, several controllers share one PostgreSQL: one leads, the others\n"
            "answer their health and redirect every other request to it (307), and take\n"
            "over when its lease lapses (docs/admin-guide.md, \"Several controllers\").\n"
            "\n"
            "  --data DIR          data directory (default: ./" DEFAULT_DATA ", created 0700)\n"
            "  --listen ADDR:PORT  address to serve (default " DEFAULT_LISTEN
            "; [::1]:8080 for IPv6;\n"
            "                      port 0 picks a free one)\n"
            "  --tls-cert FILE     PEM certificate: serve HTTPS (with --tls-key)\n"
            "  --tls-key FILE      PEM private key\n"
            "  --body-limit BYTES  largest request body (default 1048576)\n"
            "  --port-file FILE    write the port it listens on to FILE once it serves\n"
            "  --pass-interval S   run a scheduling pass at least every S seconds (default 5)\n"
            "  --node-timeout S    mark a node down after S seconds without a heartbeat, and\n"
            "                      requeue its jobs (default 60)\n"
            "  --access-log        one line per request on stderr\n"
            "  --metrics-public    serve GET /metrics (Prometheus) without a token\n"
            "  --cost-timezone TZ  budgets' calendar months in zone TZ, e.g. Europe/Berlin\n"
            "                      (default UTC)\n"
            "  --metrics-retention-days N  keep one-minute GPU and job metrics N days\n"
            "                      (1..3650, default 30; the raw samples: the last hour)\n"
            "  --idempotency-ttl S an Idempotency-Key names its job for S seconds (default\n"
            "                      86400); a key reused later makes a new job\n"
            "  --recover           start on a damaged store: move its files aside (kept),\n"
            "                      copy what can be read, name the jobs lost; without it a\n"
            "                      damaged store stops the start\n"
            "  --store URL         postgres://USER@HOST:PORT/DB: share one PostgreSQL between\n"
            "                      any number of controllers, one leading by a lease\n"
            "                      (default: SQLite in DIR, one controller)\n"
            "  --advertise URL     the URL other controllers redirect clients to while this\n"
            "                      one leads (default: http://ADDR:PORT of --listen; needed\n"
            "                      with --store and a wildcard --listen, 0.0.0.0 or ::)\n"
            "  --lease S           the leader's lease in the store, renewed every S/5\n"
            "                      (1..60, default 5); a follower leads within S plus\n"
            "                      one renewal of the leader's loss (at once after its\n"
            "                      SIGTERM)\n"
            "  --fence-lease S     an agent that reaches no leader for S seconds stops its\n"
            "                      jobs (0: never); S + --fence-grace + 2 must not pass\n"
            "                      --node-timeout (default: half of --node-timeout less 2 s,\n"
            "                      29 s for 60 s)\n"
            "  --fence-grace S     a fenced job's SIGTERM to SIGKILL (default: 10, or what\n"
            "                      --node-timeout leaves)\n"
            "\n"
            "Exit status: 0 stopped cleanly, 1 could not start, 2 usage error.\n");
}

static int usage_error(const char *flag, const char *value, const char *expected)
{
    fprintf(stderr, "gpuorch server: %s: expected %s%s%s%s\n", flag, expected,
            value ? ", got '" : "", value ? value : "", value ? "'" : "");
    return 2;
}

/* ADDR:PORT or [ADDR]:PORT. */
static bool parse_listen(const char *v, struct server_config *cfg)
{
    const char *colon = strrchr(v, ':');
    if (!colon || colon == v)
        return false;
    size_t alen = (size_t)(colon - v);
    const char *a = v;
    if (v[0] == '[') {
        if (alen < 3 || v[alen - 1] != ']')
            return false;
        a = v + 1;
        alen -= 2;
    }
    int64_t port;
    if (opts_parse_int(colon + 1, 0, 65535, &port) != 0)
        return false;
    free(cfg->bind);
    cfg->bind = strndup(a, alen);
    cfg->port = (uint16_t)port;
    return cfg->bind != NULL;
}

/* The flags as the table reads them; parse_args copies them into the
 * configuration. The strings point into argv. */
struct server_args {
    const char *data, *listen, *tls_cert, *tls_key, *cost_tz, *port_file, *store, *advertise;
    int64_t body_limit, pass_interval_ms, node_timeout_ms, retention_days, minute_ms, idem_ttl_ms;
    int64_t lease_ms, fence_lease_ms, fence_grace_ms;
    // cppcheck-suppress unusedStructMember ; util/opts writes it through its offset
    bool access_log, metrics_public, recover, help;
};

#define ARG(member) offsetof(struct server_args, member)
#define SECONDS_1_TO_86400(name_, member)                                                          \
    {                                                                                              \
        .name = name_, .type = OPTS_SECONDS, .min = 1, .max = 86400, .scale = 1000,                \
        .offset = ARG(member)                                                                      \
    }

static const struct opts_opt server_opts[] = {
    {.name = "data",
     .type = OPTS_STRING,
     .flags = OPTS_NONEMPTY,
     .expect = "a directory",
     .offset = ARG(data)},
    {.name = "listen", .type = OPTS_STRING, .offset = ARG(listen)},
    {.name = "tls-cert", .type = OPTS_STRING, .offset = ARG(tls_cert)},
    {.name = "tls-key", .type = OPTS_STRING, .offset = ARG(tls_key)},
    {.name = "cost-timezone", .type = OPTS_STRING, .offset = ARG(cost_tz)},
    {.name = "port-file", .type = OPTS_STRING, .offset = ARG(port_file)},
    /* Plain bytes: a suffix (64M) is refused, as the help says BYTES. */
    {.name = "body-limit",
     .type = OPTS_INT,
     .min = 1024,
     .max = 64 << 20,
     .expect = "a size in bytes from 1024 to 67108864",
     .offset = ARG(body_limit)},
    SECONDS_1_TO_86400("pass-interval", pass_interval_ms),
    SECONDS_1_TO_86400("node-timeout", node_timeout_ms),
    {.name = "metrics-retention-days",
     .type = OPTS_INT,
     .min = 1,
     .max = 3650,
     .expect = "whole days from 1 to 3650",
     .offset = ARG(retention_days)},
    /* Not in --help, for tests: the length of a metrics "minute". */
    {.name = "metrics-minute-ms",
     .type = OPTS_INT,
     .min = 100,
     .max = 3600000,
     .expect = "milliseconds from 100 to 3600000",
     .offset = ARG(minute_ms)},
    {.name = "idempotency-ttl",
     .type = OPTS_SECONDS,
     .min = 1,
     .max = 2592000, /* 30 days */
     .scale = 1000,
     .offset = ARG(idem_ttl_ms)},
    {.name = "store",
     .type = OPTS_STRING,
     .flags = OPTS_NONEMPTY,
     .expect = "postgres://USER@HOST:PORT/DB",
     .offset = ARG(store)},
    {.name = "advertise",
     .type = OPTS_STRING,
     .flags = OPTS_NONEMPTY,
     .expect = "http://HOST:PORT or https://HOST:PORT",
     .offset = ARG(advertise)},
    {.name = "lease",
     .type = OPTS_SECONDS,
     .min = 1,
     .max = 60,
     .scale = 1000,
     .offset = ARG(lease_ms)},
    {.name = "fence-lease",
     .type = OPTS_SECONDS,
     .min = 0,
     .max = 86400,
     .scale = 1000,
     .offset = ARG(fence_lease_ms)},
    {.name = "fence-grace",
     .type = OPTS_SECONDS,
     .min = 0,
     .max = 3600,
     .scale = 1000,
     .offset = ARG(fence_grace_ms)},
    {.name = "recover", .type = OPTS_FLAG, .offset = ARG(recover)},
    {.name = "access-log", .type = OPTS_FLAG, .offset = ARG(access_log)},
    {.name = "metrics-public", .type = OPTS_FLAG, .offset = ARG(metrics_public)},
    {.name = "help", .short_name = 'h', .type = OPTS_HELP, .offset = ARG(help)},
};

#define HELP_SHOWN 3 /* parse_args: --help printed */

/* The words of argv by the table: 0, HELP_SHOWN, 1 (out of memory) or 2,
 * with the message printed. */
static int read_flags(int argc, char **argv, struct server_args *a)
{
    struct opts p;
    char err[512];
    const char *stray = NULL;
    opts_init(&p, argc - 1, argv + 1, OPTS_TABLE(server_opts), 0);
    int rc = opts_parse_flags(&p, a, &stray, err, sizeof(err));
    if (rc == GPO_ENOMEM) {
        fprintf(stderr, "gpuorch server: out of memory\n");
        return 1;
    }
    if (rc == OPTS_HELP_GIVEN) {
        usage(stdout);
        return HELP_SHOWN;
    }
    if (rc < 0 && p.fault == OPTS_FAULT_MISSING_VALUE)
        return usage_error(p.word, NULL, "a value");
    if (rc < 0 && p.fault == OPTS_FAULT_BAD_VALUE) {
        fprintf(stderr, "gpuorch server: %s\n", err);
        return 2;
    }
    /* Unknown, a value given to a flag, or a word that is no option. */
    if (rc < 0 || stray) {
        fprintf(stderr, "gpuorch server: unknown flag '%s' (see gpuorch server --help)\n",
                rc < 0 ? p.word : stray);
        return 2;
    }
    return 0;
}

/* *dst = a copy of src (NULL stays NULL); false when out of memory. */
static bool copy_string(char **dst, const char *src)
{
    *dst = src ? strdup(src) : NULL;
    return !src || *dst;
}

static int parse_args(int argc, char **argv, struct server_config *cfg)
{
    struct server_args a = {.data = DEFAULT_DATA,
                            .listen = DEFAULT_LISTEN,
                            .body_limit = HTTP_DEFAULT_BODY_LIMIT,
                            .pass_interval_ms = 5000,
                            .node_timeout_ms = 60000,
                            .idem_ttl_ms = STORE_IDEMPOTENCY_TTL_MS,
                            .lease_ms = 5000,
                            .fence_lease_ms = -1, /* from the node timeout */
                            .fence_grace_ms = -1};
    *cfg = (struct server_config){0};
    int rc = read_flags(argc, argv, &a);
    if (rc)
        return rc;
    if (!parse_listen(a.listen, cfg))
        return usage_error("--listen", a.listen, "ADDR:PORT, e.g. 127.0.0.1:8080 or [::1]:8080");
    if (!a.tls_cert != !a.tls_key)
        return usage_error(a.tls_cert ? "--tls-key" : "--tls-cert", NULL,
                           "both --tls-cert and --tls-key, or neither");
    char tzerr[256];
    /* Here, before any thread: it sets the process's TZ. */
    if (cost_tz_set(a.cost_tz, tzerr, sizeof(tzerr)) != 0) {
        fprintf(stderr, "gpuorch server: %s\n", tzerr);
        return 2;
    }
    cfg->body_limit = (size_t)a.body_limit;
    cfg->pass_interval_ms = a.pass_interval_ms;
    cfg->node_timeout_ms = a.node_timeout_ms;
    cfg->metrics_retention_days = a.retention_days;
    cfg->metrics_minute_ms = a.minute_ms;
    cfg->access_log = a.access_log;
    cfg->metrics_public = a.metrics_public;
    cfg->recover = a.recover;
    cfg->idempotency_ttl_ms = a.idem_ttl_ms;
    /* Unset: half of what the node timeout leaves after the margin, and the
     * lesser of 10 s and the rest for the grace (60 s: 29 s and 10 s). */
    int64_t room =
        a.node_timeout_ms > SRV_FENCE_MARGIN_MS ? a.node_timeout_ms - SRV_FENCE_MARGIN_MS : 0;
    if (a.fence_lease_ms < 0)
        a.fence_lease_ms = room / 2;
    if (a.fence_grace_ms < 0)
        a.fence_grace_ms = room - a.fence_lease_ms < 10000
                               ? (room > a.fence_lease_ms ? room - a.fence_lease_ms : 0)
                               : 10000;
    cfg->lease_ms = a.lease_ms;
    cfg->fence_lease_ms = a.fence_lease_ms;
    cfg->fence_grace_ms = a.fence_grace_ms;
    if (a.fence_lease_ms &&
        a.fence_lease_ms + a.fence_grace_ms + SRV_FENCE_MARGIN_MS > a.node_timeout_ms) {
        fprintf(stderr,
                "gpuorch server: --fence-lease: expected a lease that, with --fence-grace (%" PRId64
                " s) and a %d s margin, ends within --node-timeout (%" PRId64 " s), got %" PRId64
                " s\n",
                a.fence_grace_ms / 1000, SRV_FENCE_MARGIN_MS / 1000, a.node_timeout_ms / 1000,
                a.fence_lease_ms / 1000);
        return 2;
    }
    if (a.store && !store_url_is_postgres(a.store))
        return usage_error("--store", a.store, "postgres://USER@HOST:PORT/DB");
    if (a.store && a.recover) {
        fprintf(stderr, "gpuorch server: --recover: only for the SQLite store in --data, not "
                        "with --store\n");
        return 2;
    }
    /* Other controllers redirect clients to this one's address: a wildcard
     * one names no host they could reach. */
    if (a.store && !a.advertise &&
        (strcmp(cfg->bind, "0.0.0.0") == 0 || strcmp(cfg->bind, "::") == 0))
        return usage_error("--advertise", NULL,
                           "a URL with --store and a wildcard --listen (0.0.0.0 or ::): the "
                           "address other controllers send clients to");
    if (a.advertise && strncmp(a.advertise, "http://", 7) != 0 &&
        strncmp(a.advertise, "https://", 8) != 0)
        return usage_error("--advertise", a.advertise, "http://HOST:PORT or https://HOST:PORT");
    if (!copy_string(&cfg->data_dir, a.data) || !copy_string(&cfg->tls_cert, a.tls_cert) ||
        !copy_string(&cfg->tls_key, a.tls_key) || !copy_string(&cfg->cost_tz, a.cost_tz) ||
        !copy_string(&cfg->port_file, a.port_file) || !copy_string(&cfg->store_url, a.store) ||
        !copy_string(&cfg->advertise, a.advertise)) {
        fprintf(stderr, "gpuorch server: out of memory\n");
        return 1;
    }
    return 0;
}

static void config_release(struct server_config *cfg)
{
    free(cfg->data_dir);
    free(cfg->bind);
    free(cfg->tls_cert);
    free(cfg->tls_key);
    free(cfg->cost_tz);
    free(cfg->port_file);
    free(cfg->store_url);
    free(cfg->advertise);
}

static void access_log(const struct http_access *e, void *ctx)
{
    (void)ctx;
    fprintf(stderr, "%s %s %s %u %.3fms\n", e->client, e->method, e->path, e->status,
            (double)e->duration_us / 1000.0);
}

/* ---- the subsystems' starts and stops ------------------------------------------ */

static int data_start(struct server *s, char *err, size_t errlen)
{
    if (mkdir(s->cfg.data_dir, 0700) != 0 && errno != EEXIST) {
        int e = errno;
        return errbuf_set(err, errlen, -e, "--data %s: %s", s->cfg.data_dir, strerror(e));
    }
    int rc = token_lib_init();
    return rc ? errbuf_set(err, errlen, rc, "libsodium: %s", gpo_strerror(rc)) : 0;
}

/* The lost job ids of a recovery, as "3, 7-9" (cut to fit). */
static void lost_list(const struct store_recovery *rec, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < rec->nlost && used + 32 < len; k++) {
        const struct store_id_range *r = &rec->lost[k];
        int n = r->first == r->last
                    ? snprintf(buf + used, len - used, "%s%" PRId64, k ? ", " : "", r->first)
                    : snprintf(buf + used, len - used, "%s%" PRId64 "-%" PRId64, k ? ", " : "",
                               r->first, r->last);
        used += n > 0 ? (size_t)n : 0;
    }
    if (used + 32 >= len)
        snprintf(buf + used, len - used, ", ...");
}

/*
 * After a recovery: an admin user lost with the database is made again with
 * the token the operator holds (DATA/admin.token), never a new one. Other
 * users and their tokens are what was recovered.
 */
static int admin_restore(struct server *s, char *err, size_t errlen)
{
    struct store_user u = {0};
    int rc = store_user_get_by_name(s->store, "admin", &u); /* auth.c's first admin */
    store_user_release(&u);
    if (rc != GPO_ENOENT)
        return 0;
    char path[4200], tok[TOKEN_STR_LEN + 1];
    snprintf(path, sizeof(path), "%s/admin.token", s->cfg.data_dir);
    uint8_t hash[TOKEN_HASH_LEN];
    if (token_read_file(path, tok, sizeof(tok)) != 0 || token_hash(tok, hash) != 0)
        return 0; /* no token to keep: auth makes the first admin */
    memset(tok, 0, sizeof(tok));
    char pwbuf[16384];
    struct passwd pwd, *pw = NULL;
    if (getpwuid_r(geteuid(), &pwd, pwbuf, sizeof(pwbuf), &pw) != 0)
        pw = NULL;
    int64_t now = srv_now_ms(s);
    struct store_batch *b = store_batch_new();
    rc = b ? store_batch_user_put(b, "admin", pw ? pw->pw_name : NULL, NULL, "admin", now)
           : GPO_ENOMEM;
    if (!rc)
        rc = store_batch_token_put(b, "admin", hash, "bootstrap", now);
    char msg[256] = "";
    rc = rc ? (store_batch_free(b), rc) : store_commit_wait(s->store, b, NULL, 0, msg, sizeof(msg));
    if (rc)
        return errbuf_set(err, errlen, rc, "--recover: restoring the admin user: %s",
                          msg[0] ? msg : gpo_strerror(rc));
    fprintf(stderr,
            "gpuorch server: --recover: the admin user was lost; restored with the token "
            "in %s\n",
            path);
    return 0;
}

/* What a recovery did, for the operator. */
static void recovery_report(const struct store_recovery *rec)
{
    static char lost[8192];
    lost_list(rec, lost, sizeof(lost));
    fprintf(stderr, "gpuorch server: --recover: the store was damaged: %s\n", rec->damage);
    fprintf(stderr, "gpuorch server: --recover: the damaged files are kept in %s\n", rec->moved_to);
    if (rec->nlost)
        fprintf(stderr, "gpuorch server: --recover: lost jobs (their rows are gone): %s\n", lost);
    else
        fprintf(stderr, "gpuorch server: --recover: no job was lost\n");
    if (rec->notes[0])
        fprintf(stderr, "gpuorch server: --recover: also unreadable: %s\n", rec->notes);
    fprintf(stderr, "gpuorch server: --recover: new jobs get ids above %" PRId64 "\n",
            rec->job_id_floor);
}

/* Expired idempotency keys go at every start (and with every keyed submission). */
static int keys_prune(struct server *s, char *err, size_t errlen)
{
    struct store_batch *b = store_batch_new();
    int rc = b ? store_batch_idempotency_prune(b, srv_now_ms(s) - s->cfg.idempotency_ttl_ms)
               : GPO_ENOMEM;
    char msg[256] = "";
    rc = rc ? (store_batch_free(b), rc) : store_commit_wait(s->store, b, NULL, 0, msg, sizeof(msg));
    return rc ? errbuf_set(err, errlen, rc, "pruning expired idempotency keys: %s",
                           msg[0] ? msg : gpo_strerror(rc))
              : 0;
}

/* A first start has neither a database nor the admin token of an earlier
 * one (the store's mark, which it checks itself, aside). */
static int first_start_check(struct server *s, const char *path, char *err, size_t errlen)
{
    char token[4200], mark[4300];
    snprintf(token, sizeof(token), "%s/admin.token", s->cfg.data_dir);
    snprintf(mark, sizeof(mark), "%s.mark", path);
    struct stat st;
    if (stat(path, &st) == 0 || stat(mark, &st) == 0 || stat(token, &st) != 0)
        return 0;
    if (s->cfg.recover) {
        fprintf(stderr,
                "gpuorch server: --recover: %s is missing: starting an empty store that keeps "
                "the admin token; the earlier store's jobs, users and settings are gone, and "
                "without its mark their ids are not known\n",
                path);
        return 0;
    }
    return errbuf_set(err, errlen, GPO_ECORRUPT,
                      "the store is damaged, nothing was changed: %.1000s is missing, but %.1000s "
                      "is there from an earlier start; `gpuorch server --recover` starts an empty "
                      "store that keeps the admin token (docs/admin-guide.md)",
                      path, token);
}

static int store_start(struct server *s, char *err, size_t errlen)
{
    if (s->cfg.store_url) {
        char msg[1536];
        int rc = store_open_postgres(s->cfg.store_url, &s->store, msg, sizeof(msg));
        return rc ? errbuf_set(err, errlen, rc, "--store: %.1500s", msg) : 0;
    }
    char path[4200];
    snprintf(path, sizeof(path), "%s/gpuorch.db", s->cfg.data_dir);
    int rc = first_start_check(s, path, err, errlen);
    if (rc)
        return rc;
    char msg[1536];
    struct store_recovery rec = {0};
    rc = store_open_sqlite_opts(path, s->cfg.recover ? STORE_OPEN_RECOVER : 0, &rec, &s->store, msg,
                                sizeof(msg));
    if (rc == GPO_ECORRUPT)
        return errbuf_set(err, errlen, rc,
                          "the store is damaged, nothing was changed: %.1400s; `gpuorch server "
                          "--recover` moves the damaged files aside and starts on what can be "
                          "read (docs/admin-guide.md)",
                          msg);
    if (rc)
        return errbuf_set(err, errlen, rc, "%.400s: %.1000s", path, msg);
    if (rec.recovered)
        recovery_report(&rec);
    store_recovery_release(&rec);
    return 0;
}

static void store_stop(struct server *s)
{
    store_close(s->store); /* every queued commit completes */
}

/* The lease is taken (lead_phase): its renewals, and the epoch every
 * decision carries. */
static int lease_start(struct server *s, char *err, size_t errlen)
{
    s->epoch = lead_epoch(s->lead);
    int rc = lead_start(s->lead);
    return rc ? errbuf_set(err, errlen, rc, "starting the lease thread: %s", gpo_strerror(rc)) : 0;
}

/* A clean stop gives the lease up, so that a follower leads at once. */
static void lease_stop(struct server *s)
{
    lead_stop(s->lead, true);
}

/* The first commits, under the lease. */
static int store_ready(struct server *s, char *err, size_t errlen)
{
    int rc;
    if (s->cfg.recover && (rc = admin_restore(s, err, errlen)) != 0)
        return rc;
    return keys_prune(s, err, errlen);
}

int srv_init(struct server *s)
{
    if (!s->clock.now_ms)
        s->clock.now_ms = srv_clock_realtime_ms;
    if (!s->clock.mono_ns)
        s->clock.mono_ns = srv_clock_monotonic_ns;
    pthread_mutex_init(&s->lock, NULL);
    cluster_init(&s->cluster);
    jobs_init(&s->jobs);
    nodes_init(&s->nodes, &s->lock, api_node_answer, s);
    cost_init(&s->cost, &s->lock, &s->jobs, &s->cluster, s->store);
    config_init(&s->config, &s->cluster, &s->jobs, &s->cost, &s->nodes, s->store);
    s->sched = calloc(1, sizeof(*s->sched));
    if (!s->sched || sched_init(s->sched, s->cfg.pass_interval_ms, s->cfg.node_timeout_ms) != 0) {
        free(s->sched);
        s->sched = NULL;
        return GPO_ENOMEM;
    }
    if (!(s->serve = calloc(1, sizeof(*s->serve))))
        return GPO_ENOMEM;
    serve_init(s->serve, &s->lock);
    s->sched->hook = (struct sched_hook){serve_due_ms, serve_tick};
    if (!(s->mig = migctl_new()))
        return GPO_ENOMEM;
    s->sched->pass_hooks = (struct sched_pass_hooks){migctl_view, migctl_pass};
    return 0;
}

void srv_release(struct server *s)
{
    migctl_free(s->mig);
    s->mig = NULL;
    if (s->serve) {
        serve_release(s->serve);
        free(s->serve);
        s->serve = NULL;
    }
    if (s->sched) {
        sched_release(s->sched);
        free(s->sched);
        s->sched = NULL;
    }
    monitor_release(&s->monitor);
    cost_release(&s->cost);
    jobs_release(&s->jobs);
    nodes_release(&s->nodes);
    cluster_release(&s->cluster);
    pthread_mutex_destroy(&s->lock);
}

static int wire_start(struct server *s, char *err, size_t errlen)
{
    int rc = srv_init(s);
    return rc ? errbuf_set(err, errlen, rc, "out of memory") : 0;
}

static int auth_start_(struct server *s, char *err, size_t errlen)
{
    return auth_start(&s->auth, s->store, s->cfg.data_dir, srv_now_ms(s), err, errlen);
}

static int config_start(struct server *s, char *err, size_t errlen)
{
    return config_load(&s->config, srv_now_ms(s), err, errlen);
}

/* The user names of user ids, for loading jobs: a small cache over the store. */
struct name_cache {
    int64_t id;
    char name[64];
    char unix_user[33];
};

static const char *user_name(struct server *s, int64_t id, struct name_cache *c)
{
    if (id == STORE_NULL) {
        c->id = id;
        c->name[0] = c->unix_user[0] = '\0';
        return c->name;
    }
    if (c->id == id)
        return c->name;
    struct store_user u = {0};
    c->id = id;
    c->name[0] = c->unix_user[0] = '\0';
    if (store_user_get_by_id(s->store, id, &u) == 0) {
        snprintf(c->name, sizeof(c->name), "%s", u.name);
        snprintf(c->unix_user, sizeof(c->unix_user), "%s", u.unix_user ? u.unix_user : "");
    }
    store_user_release(&u);
    return c->name;
}

/* Every job from the store, page by page. */
static int jobs_start(struct server *s, char *err, size_t errlen)
{
    struct store_job_filter f = STORE_JOB_FILTER_INIT;
    struct name_cache cache = {.id = STORE_NULL};
    for (;;) {
        struct store_job *rows = NULL;
        size_t n = 0;
        int rc = store_job_list(s->store, &f, &rows, &n);
        if (rc)
            return errbuf_set(err, errlen, rc, "loading jobs: %s", gpo_strerror(rc));
        for (size_t k = 0; k < n && !rc; k++) {
            struct job *j;
            rc = job_from_row(&rows[k], user_name(s, rows[k].user_id, &cache), &j, err, errlen);
            if (!rc && cache.unix_user[0] && !(j->unix_user = strdup(cache.unix_user))) {
                job_free(j);
                rc = GPO_ENOMEM;
                continue;
            }
            if (!rc && (rc = jobs_add(&s->jobs, j)))
                job_free(j);
            f.after_id = rows[k].id;
        }
        store_jobs_free(rows, n);
        if (rc)
            return rc;
        if (n < f.limit)
            return 0;
    }
}

static int sched_load_(struct server *s, char *err, size_t errlen)
{
    return sched_load(s, err, errlen);
}

static int serve_load_(struct server *s, char *err, size_t errlen)
{
    return serve_load(s, err, errlen);
}

static int cost_start(struct server *s, char *err, size_t errlen)
{
    return cost_load(&s->cost, srv_now_ms(s), err, errlen);
}

static int monitor_start(struct server *s, char *err, size_t errlen)
{
    struct monitor_config mc = {.node_timeout_ms = s->cfg.node_timeout_ms,
                                .retention_days = s->cfg.metrics_retention_days,
                                .minute_ms = s->cfg.metrics_minute_ms,
                                .mono_ns = s->clock.mono_ns};
    int rc = monitor_init(&s->monitor, &mc, &s->lock, &s->cluster, &s->jobs, &s->nodes, s->store,
                          srv_now_ms(s));
    return rc ? errbuf_set(err, errlen, rc, "metrics series: out of memory") : 0;
}

static int loop_start(struct server *s, char *err, size_t errlen)
{
    int rc = sched_start(s);
    return rc ? errbuf_set(err, errlen, rc, "starting the scheduling loop: %s", gpo_strerror(rc))
              : 0;
}

static void loop_stop(struct server *s)
{
    sched_stop(s);
}

static int port_file_write(const struct server *s, char *err, size_t errlen)
{
    if (!s->cfg.port_file)
        return 0;
    FILE *pf = fopen(s->cfg.port_file, "w");
    if (!pf || fprintf(pf, "%u\n", s->cfg.port) < 0 || fclose(pf) != 0)
        return errbuf_set(err, errlen, GPO_EIO, "--port-file %s: %s", s->cfg.port_file,
                          strerror(errno));
    return 0;
}

static int http_start(struct server *s, char *err, size_t errlen)
{
    size_t nroutes = 0;
    if (!(s->routes = api_routes_build(&nroutes)))
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    struct http_config hc = {.bind_addr = s->cfg.bind,
                             .port = s->cfg.port,
                             .body_limit = s->cfg.body_limit,
                             .tls_cert_file = s->cfg.tls_cert,
                             .tls_key_file = s->cfg.tls_key,
                             .routes = s->routes,
                             .nroutes = nroutes,
                             .admit = api_admit,
                             .authorize = api_authorize,
                             .access_log = s->cfg.access_log ? access_log : NULL,
                             .ctx = s};
    int rc = http_server_new(&hc, &s->http, err, errlen);
    if (rc || (rc = http_server_start(s->http, err, errlen)) != 0)
        return rc;
    s->cfg.port = http_server_port(s->http);
    return port_file_write(s, err, errlen);
}

static void http_stop(struct server *s)
{
    http_server_stop(s->http);        /* no handler runs after this; suspended requests get 503 */
    nodes_release_waiters(&s->nodes); /* our completions of the long-polls it answered */
    serve_release_waiters(s);
    /* Log proxy workers see their streams closed within about a second (an
     * agent that does not answer: its timeout); none may outlive s. */
    atomic_store(&s->logs_stop, true);
    for (int k = 0; k < 3000 && atomic_load(&s->logs_workers); k++)
        nanosleep(&(struct timespec){0, 10L * 1000 * 1000}, NULL);
}

/*
 * Started in order; a failed start stops those started before it, in
 * reverse. A stop only quiesces (threads, the HTTP server, the store's
 * queue); memory is freed after every stop, so that the store's last
 * completions still find what they apply to.
 */
static const struct subsystem {
    int (*start)(struct server *s, char *err, size_t errlen);
    void (*stop)(struct server *s);
} subsystems[] = {
    {data_start, NULL},        /* the data directory */
    {store_start, store_stop}, /* the store, opened once; lead_phase then takes the lease */
    {lease_start, lease_stop}, /* the lease's renewals: each turn starts here (LEAD_AT) */
    {store_ready, NULL},       /* the first commits: --recover's admin, expired keys */
    {wire_start, NULL},        /* the server object's subsystems wired up */
    {auth_start_, NULL},       /* tokens, the first admin */
    {config_start, NULL},      /* the configuration and the nodes' records */
    {jobs_start, NULL},        /* the jobs */
    {sched_load_, NULL},       /* the attempts and the core's carry-over state */
    {serve_load_, NULL},       /* the services' replicas, from their jobs */
    {cost_start, NULL},        /* the ledger's sums, the open segments */
    {monitor_start, NULL},     /* the series */
    {loop_start, loop_stop},   /* the scheduling loop's thread */
    {http_start, http_stop},   /* the API */
};
#define NSUBSYSTEMS (sizeof(subsystems) / sizeof(subsystems[0]))
#define LEAD_AT     2 /* lead_phase runs before this one */

/* Stops the subsystems of a turn [LEAD_AT, n), the last first, and frees
 * the server (neither its configuration nor the store). */
static void stop(struct server *s, size_t n)
{
    while (n-- > LEAD_AT)
        if (subsystems[n].stop)
            subsystems[n].stop(s);
    /* Every commit queued before is completed after this one (in queue
     * order): none then finds its memory gone. */
    struct store_batch *b = s->store ? store_batch_new() : NULL;
    if (b)
        (void)store_commit_wait(s->store, b, NULL, 0, NULL, 0);
    http_server_free(s->http);
    free(s->routes);
    srv_release(s);
}

/* ---- the phases: following, leading ------------------------------------------ */

/* How one phase ended. */
enum phase_end {
    PHASE_LEADS,   /* lead_phase: it leads now */
    PHASE_SIGNAL,  /* SIGINT or SIGTERM: stop (exit 0) */
    PHASE_FAILED,  /* could not start (exit 1) */
    PHASE_STEPPED, /* no longer leads: follow again */
};

/* Waits up to ms for SIGINT or SIGTERM; the signal, or 0. */
static int signal_wait(const sigset_t *sigs, int64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};
    int sig = sigtimedwait(sigs, NULL, &ts);
    return sig > 0 ? sig : 0;
}

/* The default --advertise: the address of --listen, with the bound port. */
static void advertise_default(const struct server_config *cfg, char *buf, size_t len)
{
    bool v6 = strchr(cfg->bind, ':') != NULL;
    snprintf(buf, len, "%s://%s%s%s:%u", cfg->tls_cert ? "https" : "http", v6 ? "[" : "", cfg->bind,
             v6 ? "]" : "", cfg->port);
}

static void say_following(const char *url, int64_t epoch)
{
    if (url[0])
        printf("gpuorch server: following (leader %s, epoch %" PRId64 ")\n", url, epoch);
    else
        printf("gpuorch server: following (no leader yet)\n");
    (void)fflush(stdout);
}

/* The follower's HTTP server on the --listen address: its health, and
 * redirects to the leader (lead.h). */
static int follower_serve(struct server *s, struct http_server **ret, char *err, size_t errlen)
{
    struct http_config hc = {.bind_addr = s->cfg.bind,
                             .port = s->cfg.port,
                             .body_limit = s->cfg.body_limit,
                             .tls_cert_file = s->cfg.tls_cert,
                             .tls_key_file = s->cfg.tls_key,
                             .routes = lead_follower_routes,
                             .nroutes = lead_nfollower_routes,
                             .admit = lead_follower_admit,
                             .access_log = s->cfg.access_log ? access_log : NULL,
                             .ctx = s->lead};
    int rc = http_server_new(&hc, ret, err, errlen);
    if (rc || (rc = http_server_start(*ret, err, errlen)) != 0) {
        http_server_free(*ret);
        *ret = NULL;
        return rc;
    }
    s->cfg.port = http_server_port(*ret);
    return port_file_write(s, err, errlen);
}

/*
 * Takes the lease. On a store that is not shared it is free: one try. On a
 * shared one the controller follows until it leads: a minimal HTTP server
 * answers on --listen (its port kept for the leader's), and it tries every
 * lease/5.
 */
static enum phase_end lead_phase(struct server *s, const sigset_t *sigs, char *err, size_t errlen)
{
    struct lead *l = s->lead;
    if (!store_shared(s->store))
        return lead_try(l, s->store, err, errlen) ? PHASE_FAILED : PHASE_LEADS;
    struct http_server *h = NULL;
    if (follower_serve(s, &h, err, errlen) != 0)
        return PHASE_FAILED;
    if (!s->cfg.advertise) {
        char url[STORE_LEASE_ADDRESS_MAX + 1];
        advertise_default(&s->cfg, url, sizeof(url));
        lead_set_address(l, url);
    }
    char seen[STORE_LEASE_ADDRESS_MAX + 1] = "?", url[sizeof(seen)];
    int64_t seen_epoch = -1, epoch;
    enum phase_end end = PHASE_FAILED;
    bool said_io = false;
    for (;;) {
        int rc = lead_try(l, s->store, err, errlen);
        if (rc == 0) {
            end = PHASE_LEADS;
            break;
        }
        if (rc != GPO_EBUSY && rc != GPO_EIO)
            break;
        if (rc == GPO_EIO && !said_io)
            fprintf(stderr, "gpuorch server: %s (trying again every %" PRId64 " ms)\n", err,
                    l->lease_ms / 5);
        said_io = rc == GPO_EIO;
        lead_leader(l, url, sizeof(url), &epoch);
        if (strcmp(url, seen) != 0 || epoch != seen_epoch) {
            say_following(url, epoch);
            snprintf(seen, sizeof(seen), "%s", url);
            seen_epoch = epoch;
        }
        int sig = signal_wait(sigs, l->lease_ms / 5);
        if (sig) {
            printf("gpuorch server: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
            end = PHASE_SIGNAL;
            break;
        }
    }
    http_server_free(h); /* stops it: the leader's binds the same port */
    return end;
}

/* One turn on the open store: the lease taken (following until then), the
 * controller started and run until a signal or until it no longer leads;
 * then everything stopped again. */
static enum phase_end run_once(struct server *s, const sigset_t *sigs)
{
    char err[2048] = "";
    size_t started = LEAD_AT;
    enum phase_end end = PHASE_LEADS;
    for (; started < NSUBSYSTEMS; started++) {
        if (started == LEAD_AT && (end = lead_phase(s, sigs, err, sizeof(err))) != PHASE_LEADS)
            break;
        int rc = subsystems[started].start(s, err, sizeof(err));
        /* A shared store lost while starting to lead: follow again (the
         * lease is given up), as after a lapse. */
        if (rc) {
            end = (rc == GPO_EIO || rc == GPO_EFENCED) && store_shared(s->store) ? PHASE_STEPPED
                                                                                 : PHASE_FAILED;
            break;
        }
    }
    if (end == PHASE_FAILED || end == PHASE_STEPPED)
        fprintf(stderr, "gpuorch server: %s%s\n", err,
                end == PHASE_STEPPED ? " (the store is unreachable: following again)" : "");
    if (end != PHASE_LEADS) {
        stop(s, started);
        return end;
    }
    if (!s->cfg.advertise) {
        char url[STORE_LEASE_ADDRESS_MAX + 1];
        advertise_default(&s->cfg, url, sizeof(url));
        lead_set_address(s->lead, url);
    }
    printf("gpuorch server: listening on %s://%s%s%s:%u (epoch %" PRId64 ", %zu jobs)\n",
           s->cfg.tls_cert ? "https" : "http", strchr(s->cfg.bind, ':') ? "[" : "", s->cfg.bind,
           strchr(s->cfg.bind, ':') ? "]" : "", s->cfg.port, s->epoch, s->jobs.n);
    struct stat st;
    if (stat(s->auth.admin_token_path, &st) == 0)
        printf("gpuorch server: admin token in %s\n", s->auth.admin_token_path);
    else /* another controller of a shared store made the first admin */
        printf("gpuorch server: no admin token here: the controller that first led this store "
               "wrote it into its own --data\n");
    printf("gpuorch server: leading (epoch %" PRId64 ")\n", s->epoch);
    (void)fflush(stdout); /* lines for the operator: a closed stdout must not stop the controller */
    int sig = 0;
    /* Woken at least every 100 ms: a fenced commit ends the lead between
     * two renewals. */
    for (int64_t ms; !sig && (ms = lead_wait_ms(s->lead)) > 0;)
        sig = signal_wait(sigs, ms < 100 ? ms : 100);
    if (sig)
        printf("gpuorch server: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    else
        printf("gpuorch server: no longer leading (epoch %" PRId64 "): stopping, then following\n",
               s->epoch);
    (void)fflush(stdout);
    stop(s, NSUBSYSTEMS);
    return sig ? PHASE_SIGNAL : PHASE_STEPPED;
}

int server_command(int argc, char **argv)
{
    struct server_config cfg;
    int rc = parse_args(argc, argv, &cfg);
    if (rc) {
        config_release(&cfg);
        return rc == HELP_SHOWN ? 0 : rc;
    }
    /* Signals go to sigwait below, not to whichever thread runs. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    sigaction(SIGPIPE, &(struct sigaction){.sa_handler = SIG_IGN}, NULL);
    struct lead lead;
    char url[STORE_LEASE_ADDRESS_MAX + 1];
    advertise_default(&cfg, url, sizeof(url));
    rc =
        lead_init(&lead, cfg.advertise ? cfg.advertise : url, cfg.lease_ms, srv_clock_monotonic_ns);
    if (rc) {
        fprintf(stderr, "gpuorch server: --advertise: %s\n", gpo_strerror(rc));
        config_release(&cfg);
        return rc == GPO_EINVAL ? 2 : 1;
    }
    /* The data directory and the store, once; then turns of following and
     * leading, on the same store, until a signal. */
    struct server base = {
        .cfg = cfg, .clock = {srv_clock_realtime_ms, srv_clock_monotonic_ns, NULL}, .lead = &lead};
    char err[2048] = "";
    enum phase_end end = PHASE_FAILED;
    size_t opened = 0;
    for (; opened < LEAD_AT; opened++)
        if (subsystems[opened].start(&base, err, sizeof(err)) != 0) {
            fprintf(stderr, "gpuorch server: %s\n", err);
            break;
        }
    while (opened == LEAD_AT) {
        struct server s = base;
        end = run_once(&s, &sigs);
        base.cfg.port = s.cfg.port; /* a port picked at the first bind stays this controller's */
        if (end != PHASE_STEPPED)
            break;
    }
    if (opened == LEAD_AT)
        store_stop(&base); /* every queued commit completes */
    lead_release(&lead);
    config_release(&base.cfg);
    return end == PHASE_FAILED ? 1 : 0;
}

/*
 * replica.h - the agent's serving replicas (attempts whose spec has
 * "serve": proto.h's struct proto_serve): their port, their environment,
 * their readiness probe and startup timeout, the metric they export, and
 * the endpoint their RUNNING reports carry.
 *
 * A replica gets a free TCP port chosen here (replica_port_pick: bound on
 * port 0, read back, closed; the journal keeps it, so that a restarted
 * agent probes the same port) and, besides the usual variables, PORT,
 * GPUORCH_SERVICE and GPUORCH_REPLICA (replica_env).
 *
 * One prober thread (started with the first replica) probes every replica
 * on the node: HTTP/1.0 GET http://127.0.0.1:PORT/PROBE_PATH over a
 * non-blocking socket, every poll(2) of them in one loop, so that no probe
 * waits on another and nothing of the agent's other work (reports,
 * launches, the long poll) waits on a probe. A 2xx answer within
 * probe_timeout_ms is a success; anything else (refused, reset, timed out,
 * another status) a failure. Until the first success it probes every
 * REPLICA_FAST_MS, so that a cold start adds little more than the
 * replica's own start; after it, every probe_period_ms. probe_failures
 * failures in a row make a ready replica not ready (a success makes it
 * ready again). Not ready within startup_timeout_s of its launch, it is
 * expired: the monitor kills it (the usual kill path) and reports it
 * FAILED "not ready within the startup timeout (N s)". With serve.metric,
 * a ready replica's GET /metrics (Prometheus text) is read about once a
 * second and that metric's samples summed over their label sets.
 *
 * Reports: the RUNNING report at launch has the endpoint (ready false);
 * then one at every change of readiness, and at most one a second when
 * only the metric changed (replica_report says when one is owed; the
 * monitor sends it on attempts.c's report path and acknowledges it with
 * replica_sent). A change wakes the monitor through the config's wake.
 *
 * Threads: every function but the pure ones below may be called from any
 * thread and takes the table's lock; the prober thread sleeps in poll(2)
 * without it and makes its socket calls (all non-blocking) under it. The
 * attempt table calls in with its own lock held, never the other way
 * round: cfg.wake must take no lock of the caller's. Nothing here logs but
 * through cfg.log.
 */
#ifndef GPUORCH_AGENT_REPLICA_H
#define GPUORCH_AGENT_REPLICA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/launch.h"
#include "proto/proto.h"

#define REPLICA_FAST_MS   10   /* the probe's period until the first success */
#define REPLICA_METRIC_MS 1000 /* how often the metric is read, and reported at most */
#define REPLICA_REFRESH_MS                                                                         \
    5000                            /* the endpoint is reported again at least this often:         \
                                       a restarted controller learns it from there */
#define REPLICA_BODY_MAX (4u << 20) /* the most of /metrics read */

/* ---- the pure parts -------------------------------------------------- */

/* A replica's readiness: what the probes said, and when the next is due. */
struct replica_probe {
    int64_t next_ms;        /* the next probe is due (monotonic ms) */
    int64_t deadline_ms;    /* not ready by then: expired */
    int64_t period_ms;      /* once ready */
    uint32_t threshold;     /* failures in a row that make it not ready */
    uint32_t failures;      /* in a row, since the last success */
    bool ready, ever_ready; /* now; at least once */
    bool expired;           /* never ready before its deadline */
};

enum replica_event {
    REPLICA_SAME = 0, /* readiness unchanged */
    REPLICA_READY,    /* it became ready */
    REPLICA_UNREADY,  /* a ready one failed `threshold` probes in a row */
    REPLICA_EXPIRED,  /* not ready within the startup timeout */
};

/* Starts a replica launched at launched_ms (monotonic), its first probe due
 * at now_ms. */
void replica_probe_init(struct replica_probe *p, const struct proto_serve *s, int64_t launched_ms,
                        int64_t now_ms);
/* One probe's result at now_ms: what changed; sets the next probe's time.
 * An expired replica stays expired (REPLICA_SAME). */
enum replica_event replica_probe_result(struct replica_probe *p, bool ok, int64_t now_ms);
/* REPLICA_EXPIRED once, at the first call at or after the deadline of a
 * replica never ready; else REPLICA_SAME. */
enum replica_event replica_probe_check(struct replica_probe *p, int64_t now_ms);

/* The sum of the samples of metric `name` in Prometheus text text[0, len)
 * (every label set; a line whose value cannot be read is skipped): 0 and
 * *ret, GPO_ENOENT (no sample of it), GPO_ERANGE (the sum is not finite or
 * its thousandths do not fit an int64_t). */
int replica_metric_sum(const char *text, size_t len, const char *name, double *ret);

/* The status of an HTTP response's first bytes ("HTTP/1.1 200 OK\r\n"):
 * 100..999, 0 while its status line is not whole, or GPO_EINVAL (not an
 * HTTP status line). */
int replica_http_status(const char *buf, size_t len);

/* ---- launching ---------------------------------------------------------- */

/* A free TCP port: 0 and *ret (1..65535), or -errno of the socket call. */
int replica_port_pick(uint32_t *ret);

/* PORT, GPUORCH_SERVICE and GPUORCH_REPLICA of replica spec `s` on `port`
 * into env: 0 or GPO_ENOMEM. */
int replica_env(const struct proto_serve *s, uint32_t port, struct launch_strv *env);

/* ---- the table ------------------------------------------------------------ */

struct replica_config {
    void (*wake)(void *arg); /* a report is owed or an expiry: wake the monitor */
    void *arg;
    void (*log)(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
};

struct replica;

/* 0 and *ret (caller frees with replica_free), or GPO_ENOMEM. No thread
 * yet: the first replica_add starts it. */
int replica_new(const struct replica_config *cfg, struct replica **ret);
/* Stops the prober thread and frees everything; NULL is fine. */
void replica_free(struct replica *r);

/* Starts probing attempt (job, attempt), replica `s` (borrowed; copied) on
 * `port`, launched at launched_ms (monotonic): 0, GPO_EEXIST (probed
 * already), GPO_ENOMEM, or pthread_create's -errno. */
int replica_add(struct replica *r, uint64_t job, uint32_t attempt, const struct proto_serve *s,
                uint32_t port, int64_t launched_ms);
/* Stops probing it (it ended); unknown ones are fine. */
void replica_remove(struct replica *r, uint64_t job, uint32_t attempt);

/* What the monitor learns of one replica at now_ms. */
struct replica_state {
    struct proto_endpoint ep; /* the endpoint now, for a RUNNING report */
    bool owed;    /* a report of it is owed: none acknowledged yet, or readiness or the metric
                     changed */
    bool expired; /* not ready within its startup timeout: kill it */
    char reason[PROTO_REASON_MAX + 1]; /* why a replica once ready is not: "" otherwise */
    int64_t startup_timeout_s;
};

/* 0 and *ret, or GPO_ENOENT (not a replica this table probes). */
int replica_report(struct replica *r, uint64_t job, uint32_t attempt, int64_t now_ms,
                   struct replica_state *ret);
/* The controller has endpoint `ep` of it (acknowledged at now_ms). */
void replica_sent(struct replica *r, uint64_t job, uint32_t attempt,
                  const struct proto_endpoint *ep, int64_t now_ms);

#endif

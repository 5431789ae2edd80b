/*
 * replica_int.h - the replica table's own state (replica.h), shared by
 * replica.c (readiness, the metric, the table) and replica_probe.c (the
 * prober thread and its sockets). Not for other modules.
 */
#ifndef GPUORCH_AGENT_REPLICA_INT_H
#define GPUORCH_AGENT_REPLICA_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/replica.h"

/* One HTTP GET in flight (HTTP/1.0: the answer ends when the replica closes). */
enum replica_conn_phase {
    REPLICA_CONN_IDLE = 0,
    REPLICA_CONN_CONNECTING,
    REPLICA_CONN_WRITING,
    REPLICA_CONN_READING,
};

struct replica_conn {
    int fd; /* -1 while idle */
    enum replica_conn_phase phase;
    int64_t deadline_ms;                      /* its timeout (monotonic) */
    char req[3 * PROTO_SERVE_PATH_MAX + 128]; /* the path's odd bytes %-encoded */
    size_t reqlen, sent;
    char *buf; /* the answer so far, NUL-terminated */
    size_t len, cap, max;
};

struct replica_rep {
    uint64_t job;
    uint32_t attempt, port, replica;
    char *service, *probe_path, *metric; /* metric NULL: none */
    int64_t probe_timeout_ms, startup_timeout_s;
    struct replica_probe probe;
    struct replica_conn pc, mc; /* the probe's, the metric's */
    int64_t metric_next_ms;     /* the next read of /metrics */
    struct proto_endpoint ep;   /* now */
    struct proto_endpoint sent; /* the controller's, once sent_any */
    bool sent_any;
    int64_t sent_ms;
    bool gone;             /* ended: the prober thread frees it */
    char last_failure[48]; /* why its latest probe failed */
};

struct replica {
    struct replica_config cfg;
    pthread_mutex_t lock; /* the table, and every rep in it */
    pthread_t thread;
    bool started, stop;
    int wake_fd; /* an eventfd the prober sleeps on besides its sockets */
    struct replica_rep **v;
    size_t n, cap;
};

void replica_rep_free(struct replica_rep *a);
void replica_conn_close(struct replica_conn *c);
/* Starts the prober thread unless it runs (under the lock): 0 or -errno. */
int replica_thread_start(struct replica *r);
/* Stops and joins it (not under the lock). */
void replica_thread_stop(struct replica *r);
void replica_thread_wake(struct replica *r);

#endif

/*
 * fence.h - the node agent's fence (docs/agent.md, "Fencing"): an agent that
 * has reached no controller for its fence lease stops its jobs, so that by
 * the time the controller starts them elsewhere (at its node timeout, which
 * the controller keeps at least lease + grace + 2 s) the old copies are gone.
 *
 * The lease counts from the CLOCK_MONOTONIC send time of the last heartbeat
 * a controller answered with success (fence_answered). The settings come
 * with every registration and assignments answer (fence_set); a lease of 0
 * (an older controller, or --fence-lease 0) never fences. Once the lease
 * has run out, fence_check calls the fence hook (which stops every attempt
 * and takes no new work) on each round until a heartbeat is answered again,
 * then the unfence hook once. It runs on a thread of its own (fence_start),
 * every 100 ms at most, so that no blocked HTTP call of the agent's other
 * threads can delay it.
 *
 * The settings and the last answered send time are kept in DIR/fence
 * (JSON, rewritten by rename, the time at most every FENCE_SAVE_EVERY_MS, so
 * that what is on disk is never later than the truth): an agent restarted while cut
 * off fences at the same deadline, and one restarted after a reboot (no
 * job survives one) counts from its start.
 *
 * Threads: fence_set, fence_answered and fence_check may be called from
 * any thread; the state is atomics, and the file is written by the caller
 * of fence_set or fence_answered, never by the fence thread.
 */
#ifndef GPUORCH_AGENT_FENCE_H
#define GPUORCH_AGENT_FENCE_H

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* The file's name in fence_config.dir (the shims' watchdog reads it too:
 * shim.h, --fence). */
#define FENCE_FILE "fence"
/* The answered time is rewritten no more often: what is on disk is never
 * later than the truth, and less than this much older. */
#define FENCE_SAVE_EVERY_MS 250

/* The reason a fenced attempt is reported with; the seconds unreached. */
#define FENCE_REASON_FMT "fenced: no controller reached for %" PRId64 " s"

struct fence_config {
    const char *dir; /* where DIR/fence is kept (the network half's: STATE/net); copied */
    /* Called on every round while fenced, from the fence thread: stop every
     * attempt (reason borrowed, "fenced: no controller reached for N s";
     * SIGKILL after grace_ms at most), take no new work. */
    void (*fence)(void *arg, const char *reason, int64_t unreached_ms, int64_t grace_ms,
                  int64_t now_ms);
    /* Called once when a heartbeat is answered again after a fence. */
    void (*unfence)(void *arg);
    void *arg;
    void (*log)(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
    const char *boot_id; /* NULL: /proc/sys/kernel/random/boot_id (tests give their own) */
};

struct fence;

/*
 * Reads DIR/fence (none: no lease until an answer brings one). now_ms is
 * CLOCK_MONOTONIC's: the last answer counts from it when the file is from
 * another boot, or says a later time. 0 and *ret (caller frees with
 * fence_free), GPO_ENOMEM, or GPO_ECORRUPT with the file named in err (a
 * file that is not ours: the agent does not start rather than forget a
 * lease).
 */
int fence_new(const struct fence_config *cfg, int64_t now_ms, struct fence **ret, char *err,
              size_t errlen);
/* Stops the thread, if started, and frees f; NULL is fine. */
void fence_free(struct fence *f);

/* The settings of the latest answer (0..PROTO_FENCE_MS_MAX; lease 0: no
 * fencing), written to DIR/fence when they change; a failed write is
 * logged and tried again with the next call. */
void fence_set(struct fence *f, int64_t lease_ms, int64_t grace_ms);
/* A heartbeat sent at sent_ms (CLOCK_MONOTONIC) was answered with success. */
void fence_answered(struct fence *f, int64_t sent_ms);
/* A timeout for a heartbeat: a quarter of the lease (1..10 s), so that a
 * controller that accepts and never answers holds the agent that long at
 * most before the next heartbeat tries the next controller of the list;
 * 10 s without a lease. */
int64_t fence_heartbeat_timeout(const struct fence *f);

/* One round at now_ms: fences (the hook) once the lease has run out, and
 * ends the fence (the other hook, a log line) once an answer has come.
 * Returns the milliseconds until the next round is due (1..100). */
int64_t fence_check(struct fence *f, int64_t now_ms);
/* Whether the agent is fenced now (as of the last round). */
bool fence_active(const struct fence *f);

/* Runs fence_check on a thread of its own until fence_free. 0, or
 * GPO_ENOMEM (no thread). */
int fence_start(struct fence *f);

#endif

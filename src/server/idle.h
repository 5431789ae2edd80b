/*
 * idle.h - idle GPUs: running jobs whose GPUs all stay under their team's
 * utilization threshold for the team's window (struct cluster_idle, the team's
 * "idle" object) are flagged; by the team's policy they are only reported, or
 * warned and then requeued or cancelled (docs/idle.md).
 *
 * The tracker runs on the loop thread (srv_idle_tick, at least once per
 * pass interval) and reads each node's latest heartbeat sample. Its state
 * lives in each attempt (struct srv_idle_track in srv.h), so it starts over
 * with every attempt and, after a controller restart, from the restart:
 * nothing is acted on before a whole window has been observed.
 *
 * The decision for one attempt at one tick is a pure function
 * (srv_idle_step) of what the tick observed (srv_idle_observe), the team's
 * policy and the time, so that unit tests drive it with synthetic samples.
 */
#ifndef GPUORCH_SERVER_IDLE_H
#define GPUORCH_SERVER_IDLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cluster/cluster.h"
#include "server/prom.h"
#include "server/srv.h"

/* ---- one attempt's decision ---- */

/* What one tick saw of an attempt's GPUs. */
struct srv_idle_obs {
    bool busy;       /* a GPU of it had a fresh sample at or above the threshold */
    bool all_fresh;  /* every GPU of it had a fresh sample (with a utilization) */
    int64_t busy_ms; /* busy: the newest such sample's time */
};

/* Fresh samples of one tick: GPU UUID -> utilization, sorted by UUID. */
struct srv_idle_gpu {
    const char *uuid; /* borrowed from the node's sample */
    uint32_t util_pct;
    int64_t sample_ms;
};
struct srv_idle_samples {
    struct srv_idle_gpu *gpus;
    size_t n, cap;
};

/* Adds the GPUs of one node's heartbeat sample ({"gpus": [{"uuid",
 * "utilization_pct", ...}]}, borrowed: it must outlive *t) taken at
 * sample_ms; GPUs without a numeric utilization (an "error" entry, a null)
 * are left out. Call srv_idle_samples_sort once all are in. 0 or -ENOMEM. */
int srv_idle_samples_add(struct srv_idle_samples *t, const json_t *sample, int64_t sample_ms);
void srv_idle_samples_sort(struct srv_idle_samples *t);
/* Frees the table (not the samples); zeroes it. */
void srv_idle_samples_release(struct srv_idle_samples *t);

/* What `t` says of attempt a's GPUs (its shares) under threshold_pct. */
struct srv_idle_obs srv_idle_observe(const struct srv_attempt *a, const struct srv_idle_samples *t,
                                     uint32_t threshold_pct);

enum srv_idle_event {
    SRV_IDLE_NONE = 0,
    SRV_IDLE_FLAGGED, /* just flagged (report: that is all) */
    SRV_IDLE_WARNED,  /* just flagged, and the action is due at action_ms */
    SRV_IDLE_CLEARED, /* busy again: flag and warning dropped */
    SRV_IDLE_ACT,     /* the warning ran out while still idle: requeue or cancel now */
};

/*
 * Advances the tracker `tr` of one attempt by a tick at `now` that observed
 * `obs`, under policy `p` (borrowed). The first tick only starts the clock
 * (the attempt counts as active then). A busy observation clears; an idle one
 * with every GPU fresh flags once now - last active >= window, and with
 * requeue or cancel sets the action due warning_s later, returned as
 * SRV_IDLE_ACT at the first idle, all-fresh tick at or after it. A tick
 * with a GPU not fresh (and none busy) changes nothing. ACT is returned once:
 * the caller kills the attempt, after which the tracker is not stepped again.
 */
enum srv_idle_event srv_idle_step(struct srv_idle_track *tr, const struct cluster_idle *p,
                                  const struct srv_idle_obs *obs, int64_t now);

/* ---- the server's tracker (under s->lock, loop thread) ---- */

/*
 * One tick at `now`: reads the nodes' samples newer than the last tick,
 * steps every running attempt that is not being killed, logs flags, warnings
 * and actions (stderr), and requeues or cancels what is due: the kill is
 * committed to the store (the lock released meanwhile) before memory
 * changes, as a preemption or a cancel would be. Called with the lock held.
 */
void srv_idle_tick(struct server *s, int64_t now);

/* Frees what the tracker keeps in s (its counters). */
void srv_idle_release(struct server *s);

/* The job's "idle" member: null, or {"since", "flagged_at", "threshold_pct",
 * "window_s", "action", "warned_at", "action_at"} (times RFC 3339, the last
 * two null under report). A new reference, or NULL when out of memory. */
json_t *srv_idle_job_json(const struct srv_job *j);

/*
 * Writes, under s->lock, gpuorch_job_idle{hpc_job,team,project} 1 for each
 * flagged job, gpuorch_idle_jobs{team} (flagged jobs per team, every team
 * listed) and gpuorch_idle_actions_total{team,action} (requeues and cancels
 * since the controller started).
 */
void srv_idle_metrics(struct server *s, struct prom *p, int64_t now_ms);

#endif

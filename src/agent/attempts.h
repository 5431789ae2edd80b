/*
 * attempts.h - the node agent's attempts: what the controller asked this node
 * to run or stop, turned into launches, kills and reports.
 *
 * Each attempt goes through
 *
 *   (assignment "run") -> journal_begin (fsync) -> priv_launch -> journal_started
 *     -> report RUNNING -> the shim ends (its pidfd wakes the monitor, which
 *        reads its status file), or a kill/time limit
 *     -> the rest of its processes killed, its GPUs checked with NVML
 *     -> final report (200 or 409 from the controller) -> journal_ended
 *
 * so that an attempt is launched at most once (journal_begin refuses a second
 * begin of the same (job, attempt), in this process or a later one) and its
 * outcome is reported at least once, until the controller has it. A kill (an
 * assignment "kill", the controller dropping the attempt, or the job's time
 * limit) sends SIGTERM, then SIGKILL after the grace period. The final state:
 * COMPLETED (exit 0), FAILED (another exit, a signal, or a launch that failed),
 * TIMEOUT, CANCELLED or PREEMPTED (the kill's cause: "as" in the assignment).
 *
 * Before the final report the attempt's GPUs are checked: a GPU on which NVML
 * still lists a process of the attempt is dirty. The agent waits up to
 * dirty_wait_ms for it to clear, then reports anyway with "dirty_gpus", and
 * keeps naming the GPU in its heartbeats (attempts_dirty) until it is clean.
 * An attempt the controller stopped listing (it ended it without this agent:
 * a lost node) has every GPU of it dirty until its end is checked, every GPU
 * of the node if it was taken up from the journal and its GPUs are not
 * known: the controller offers a rejoining node's GPUs by these heartbeats.
 *
 * Threads: attempts_apply (the long-poll thread) and attempts_tick (the
 * monitor thread) may run at once; the table has its own lock, and nothing
 * slow (HTTP) happens under it.
 */
#ifndef GPUORCH_AGENT_ATTEMPTS_H
#define GPUORCH_AGENT_ATTEMPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/journal.h"
#include "agent/priv.h"
#include "agent/steps.h"
#include "gpu/gpu.h"
#include "proto/proto.h"
#include "util/httpc.h"

struct attempts_config {
    const char *node;               /* this node's name (copied) */
    const char *state_dir;          /* the agent's state directory (copied) */
    struct journal *journal;        /* borrowed */
    struct priv *priv;              /* borrowed */
    const struct gpu_backend *gpus; /* borrowed */
    int64_t kill_grace_ms;          /* SIGTERM -> SIGKILL, when the assignment names none */
    int64_t dirty_wait_ms;          /* how long an ended attempt's GPUs may take to clear */
    struct steps *steps;            /* borrowed; NULL: no job steps (steps.h) */
    bool exit_poll;                 /* read status files each round, never a pidfd (exits.h) */
    void (*log)(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
};

struct attempts;

/* 0 and *ret (caller frees with attempts_free), or GPO_ENOMEM. */
int attempts_new(const struct attempts_config *cfg, struct attempts **ret);
void attempts_free(struct attempts *t);

/*
 * Takes up the attempts the journal lists as begun and not ended (an earlier
 * agent's): a live shim is watched again; a dead one's status file gives the
 * outcome; one begun but never started (the agent died between the journal
 * and the fork, or the fork failed) is reported FAILED, never launched again.
 * Returns the number taken up.
 */
size_t attempts_recover(struct attempts *t, int64_t now_ms);

/*
 * Applies one assignments answer (borrowed): launches each "run" attempt not
 * seen before, starts each "kill", and kills attempts the answer no longer
 * lists (the controller ended them: a lost node, say).
 */
void attempts_apply(struct attempts *t, const struct proto_assignments *answer, int64_t now_ms);

/*
 * One round of the monitor: ended shims, deadlines (time limit, SIGKILL after
 * grace, dirty wait), and the reports owed, sent with `c` (blocking HTTP, not
 * under the table's lock; failed ones are retried next round). Returns the
 * milliseconds until the next deadline it knows of (at most 1000).
 */
int64_t attempts_tick(struct attempts *t, struct httpc *c, int64_t now_ms);

/* The UUIDs of GPUs held back as dirty (above), each once: *ret
 * (NULL-terminated; caller frees the strings and the array) and *ret_n.
 * 0 or GPO_ENOMEM. */
int attempts_dirty(struct attempts *t, char ***ret, size_t *ret_n);

/* Whether an attempt in the table (running, ending, or holding its GPUs
 * dirty) was given the MIG device mig_uuid (borrowed): its instance is not
 * to be destroyed. */
bool attempts_mig_in_use(struct attempts *t, const char *mig_uuid);

/*
 * The fence (fence.h): no controller reached for unreached_ms. Every
 * running attempt is stopped as a failure with `reason` (borrowed; its
 * final report says "fenced": true): SIGTERM now, SIGKILL after the
 * smaller of the kill grace and grace_ms, and journaled (journal_fenced);
 * one being killed already gets its SIGKILL by then too. From now until
 * attempts_unfence nothing is launched (an assignment to run waits for the
 * next answer). Called on every round of the fence thread, it also sends
 * the SIGKILLs due, which the monitor, blocked in a report, may not.
 * Returns the number of attempts it stopped this time.
 */
size_t attempts_fence(struct attempts *t, const char *reason, int64_t unreached_ms,
                      int64_t grace_ms, int64_t now_ms);
/* The fence is over: launches again, and the reports owed go at once.
 * Returns the number of fenced attempts not yet reported. */
size_t attempts_unfence(struct attempts *t);

/* Attempts not yet reported final (for the log and tests). */
size_t attempts_active(struct attempts *t);

/* Sleeps up to ms, or until a running attempt's shim ends (its pidfd:
 * exits.h) or attempts_wake; the monitor thread's only. */
void attempts_wait(struct attempts *t, int64_t ms);
/* Wakes a thread sleeping in attempts_wait (a new launch wants a report now). */
void attempts_wake(struct attempts *t);

#endif

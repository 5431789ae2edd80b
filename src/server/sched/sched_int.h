/*
 * sched_int.h - what the files of src/server/sched share and nobody else
 * uses.
 */
#ifndef GPUORCH_SERVER_SCHED_SCHED_INT_H
#define GPUORCH_SERVER_SCHED_SCHED_INT_H

#include "server/sched/sched.h"
#include "server/srv.h"

/* The gap between passes: events coalesce into the next pass, which runs
 * once SCHED_PASS_GAP_FACTOR times the last pass's cost (its time less the
 * store's commit, which it waits for with the lock released) has passed
 * since it ended (the loop then spends at most a fifth of its time in passes, and
 * the API keeps the lock the rest), at least SCHED_PASS_GAP_FLOOR_MS, at
 * most SCHED_PASS_GAP_MAX_MS. The other periodic tasks run at most every
 * SCHED_PASS_GAP_MAX_MS after an event (else at the timer). The core's
 * carry-over state (decayed usage, attained service: soft state that only
 * orders the queue) goes to disk with the decisions at most every
 * SCHED_STATE_SAVE_MS, since it is rewritten whole: a crash loses at most
 * that much accounting, never a decision. */
#define SCHED_PASS_GAP_FACTOR   4
#define SCHED_PASS_GAP_FLOOR_MS 2
#define SCHED_PASS_GAP_MAX_MS   200
#define SCHED_STATE_SAVE_MS     30000

/* A name and its index in the pass's view, sorted by name for bsearch. */
struct name_index {
    const char *name;
    uint32_t index;
};

/* The index of `name` in v[0..n) (sorted), or SCHED_NONE. */
uint32_t sched_name_find(const struct name_index *v, size_t n, const char *name);

/* The view's GPU `uuid` of core node `node`, or SCHED_NONE. A GPU is named
 * by its node and UUID together: two node records may carry one UUID (an
 * agent registered again under another name leaves its old record behind). */
uint32_t sched_gpu_find(const struct sched_input *in, uint32_t node, const char *uuid);

/* Attempt a as an allocation of the pass's view, into parts and shares (room
 * for a's): false when its node or a GPU left the cluster. */
bool sched_alloc_of(const struct sched_input *in, const struct attempt *a,
                    struct sched_node_part *parts, struct sched_share *shares,
                    struct sched_alloc *ret);

/* state.c: the core's carry-over as JSON text (caller frees), or NULL; and
 * its commit with the decisions (or alone at a clean stop). */
char *sched_state_encode(const struct sched_state *st);
int sched_state_row(struct server *s, struct store_batch *b, int64_t now_ms);

/* attempts.c: charges the attempts that ended since the last pass (their
 * usage after it) to fair share and LAS, against the pass's view. */
void sched_charge_ended(struct server *s, const struct sched_input *in);

/* timeouts.c: ends the attempts of nodes whose heartbeats stopped, and marks
 * the nodes down. */
void sched_node_timeouts(struct server *s, int64_t now_ms, int64_t mono_ms);

/* The periodic work of one turn (loop.c's table calls these). */
void sched_idle_task(struct server *s, int64_t now_ms);
void sched_pass_task(struct server *s, int64_t now_ms);

#endif

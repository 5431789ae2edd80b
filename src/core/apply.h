/*
 * apply.h - a pass's decisions turned into the running set: the one table of
 * running jobs that the simulator and the controller's loop both keep.
 *
 * A caller keeps a struct sched_run_table across passes. It holds one
 * struct sched_running per job that holds resources, in job-id order (the
 * order sched_pass reads them in: a table kept sorted costs the pass one
 * compare per job instead of a sort), with its own copies of the
 * allocations. The job requests are borrowed: each entry points at the
 * caller's struct sched_job, which must stay valid (and keep its id) while
 * the entry is in the table; the caller may change its other fields between
 * passes (the simulator's srtf oracle re-keys running jobs).
 *
 * The cycle of one pass:
 *     struct sched_running_set rs = sched_run_table_view(&table);
 *     sched_pass(cluster, queue, &rs, policy, state, now, &result);
 *     sched_apply_result(&table, &result, lookup, ctx, now);   (starts, preempts)
 * and, whenever a job exits (ends, or leaves after its preemption):
 *     sched_apply_end(&table, state, cluster, policy, job, end_ms);
 * which charges fair share and LAS for its last stretch (what no pass saw)
 * and takes it out. A preempted job stays in the table, marked `preempting`,
 * until its sched_apply_end; the caller then requeues it.
 *
 * Every function returns 0 or a negative GPO_* code, and leaves the table
 * unchanged when it fails.
 */
#ifndef GPUORCH_CORE_APPLY_H
#define GPUORCH_CORE_APPLY_H

#include <stddef.h>
#include <stdint.h>

#include "core/model.h"
#include "core/sched.h"
#include "core/state.h"

struct sched_run_table {
    struct sched_running *runs; /* [n], by job id; allocations owned by the table */
    size_t n;
    size_t cap; /* private */
};

void sched_run_table_init(struct sched_run_table *table);
/* Frees the entries' allocations and the array; NULL is fine. */
void sched_run_table_release(struct sched_run_table *table);
/* Empties the table, keeping its array (a caller rebuilding it). */
void sched_run_table_clear(struct sched_run_table *table);

/* The table as sched_pass reads it: valid until the table next changes. */
static inline struct sched_running_set sched_run_table_view(const struct sched_run_table *table)
{
    return (struct sched_running_set){table->runs, table->n};
}

/* The entry of `job`, or NULL: valid until the table next changes. */
const struct sched_running *sched_run_table_find(const struct sched_run_table *table, uint64_t job);

/*
 * Adds a running job as `run` describes it (a caller restoring or rebuilding
 * its running set): its fields are copied, the allocation's arrays too, and
 * run->job is borrowed. Adding in id order appends. 0; GPO_EINVAL for a NULL
 * argument or job, or arrays missing for nonzero counts; GPO_EEXIST when the
 * job is in the table already; GPO_ENOMEM.
 */
int sched_run_table_add(struct sched_run_table *table, const struct sched_running *run);

/* Takes `job` out without charging anything (its node left the cluster, or
 * a caller drops it for good). 0 or GPO_ENOENT. */
int sched_run_table_remove(struct sched_run_table *table, uint64_t job);

/*
 * Starts `req` as the pass decided in `start` at `now_ms`: an entry started
 * and checkpointed at now_ms, with the start's allocation (copied) and its
 * `borrowed` mark. 0; GPO_EINVAL (NULL argument, or start->job is not
 * req->id); GPO_EEXIST; GPO_ENOMEM.
 */
int sched_apply_start(struct sched_run_table *table, const struct sched_job *req,
                      const struct sched_start *start, int64_t now_ms);

/* Marks `job` as being preempted: it keeps its resources until its
 * sched_apply_end. Marking a job marked already is no change. 0 or
 * GPO_ENOENT. */
int sched_apply_preempt(struct sched_run_table *table, uint64_t job);

/*
 * `job` exited at `end_ms`: charges its usage since the later of its start
 * and the last pass to `state` (sched_state_charge_end), then takes it out
 * of the table. 0; GPO_ENOENT when it is not in the table; what
 * sched_state_charge_end returns (GPO_EINVAL, GPO_ENOMEM), the table and the
 * state then unchanged.
 */
int sched_apply_end(struct sched_run_table *table, struct sched_state *state,
                    const struct sched_cluster *cluster, const struct sched_policy *policy,
                    uint64_t job, int64_t end_ms);

/* The caller's request of job `id` (that the pass was given in its queue),
 * or NULL if it has none. */
typedef const struct sched_job *(*sched_job_lookup_fn)(void *ctx, uint64_t id);

/*
 * Applies a pass's decisions at `now_ms`: every start (its request found by
 * `lookup`), then every preemption mark. All or nothing: 0, or an error
 * with the table as it was: GPO_EINVAL (NULL argument, a start whose request
 * lookup does not find or that names another id), GPO_EEXIST (a start of a
 * job in the table), GPO_ENOENT (a preemption of a job not in it),
 * GPO_ENOMEM.
 */
int sched_apply_result(struct sched_run_table *table, const struct sched_result *result,
                       sched_job_lookup_fn lookup, void *ctx, int64_t now_ms);

#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/sort.h"
#include "base/vec.h"
#include "core/apply.h"
#include "base/banned.h"

void sched_run_table_init(struct sched_run_table *table)
{
    if (table)
        memset(table, 0, sizeof(*table));
}

/* An entry's allocation is one block: its node parts, then its shares
 * (alloc.nodes points at the block even when it has no parts). */
static void entry_release(struct sched_running *run)
{
    free(run->alloc.nodes);
    run->alloc = (struct sched_alloc){0};
}

void sched_run_table_clear(struct sched_run_table *table)
{
    if (!table)
        return;
    for (size_t k = 0; k < table->n; k++)
        entry_release(&table->runs[k]);
    table->n = 0;
}

void sched_run_table_release(struct sched_run_table *table)
{
    if (!table)
        return;
    sched_run_table_clear(table);
    free(table->runs);
    memset(table, 0, sizeof(*table));
}

/* The first entry whose job id is not below `job` (table->n if none). Jobs
 * mostly start with ids above every running one: that is checked first. */
static size_t lower_bound(const struct sched_run_table *t, uint64_t job)
{
    if (!t->n || t->runs[t->n - 1].job->id < job)
        return t->n;
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->runs[mid].job->id < job)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The index of job's entry, or SIZE_MAX. */
static size_t index_of(const struct sched_run_table *t, uint64_t job)
{
    size_t at = lower_bound(t, job);
    return at < t->n && t->runs[at].job->id == job ? at : SIZE_MAX;
}

const struct sched_running *sched_run_table_find(const struct sched_run_table *table, uint64_t job)
{
    if (!table)
        return NULL;
    size_t at = index_of(table, job);
    return at == SIZE_MAX ? NULL : &table->runs[at];
}

static bool alloc_ok(const struct sched_alloc *a)
{
    return (!a->nnodes || a->nodes) && (!a->nshares || a->shares);
}

/* A copy of src in one block (see entry_release). 0 or GPO_ENOMEM. */
static int alloc_copy(struct sched_alloc *dst, const struct sched_alloc *src)
{
    size_t parts = (size_t)src->nnodes * sizeof(*src->nodes);
    size_t shares = (size_t)src->nshares * sizeof(*src->shares);
    unsigned char *block = gpo_malloc(parts + shares > 0 ? parts + shares : 1);
    if (!block)
        return GPO_ENOMEM;
    /* block has malloc's alignment; the shares start after whole node parts,
     * so at a multiple of the parts' alignment, which suits them. */
    _Static_assert(_Alignof(struct sched_node_part) % _Alignof(struct sched_share) == 0,
                   "the shares follow the node parts in one block");
    struct sched_alloc a = {(struct sched_node_part *)(void *)block, src->nnodes,
                            (struct sched_share *)(void *)(block + parts), src->nshares};
    if (parts)
        memcpy(a.nodes, src->nodes, parts);
    if (shares)
        memcpy(a.shares, src->shares, shares);
    *dst = a;
    return 0;
}

static void remove_at(struct sched_run_table *t, size_t at)
{
    entry_release(&t->runs[at]);
    memmove(&t->runs[at], &t->runs[at + 1], (t->n - at - 1) * sizeof(*t->runs));
    t->n--;
}

int sched_run_table_add(struct sched_run_table *table, const struct sched_running *run)
{
    if (!table || !run || !run->job || !alloc_ok(&run->alloc))
        return GPO_EINVAL;
    size_t at = lower_bound(table, run->job->id);
    if (at < table->n && table->runs[at].job->id == run->job->id)
        return GPO_EEXIST;
    if (vec_grow((void **)&table->runs, &table->cap, table->n + 1, sizeof(*table->runs)))
        return GPO_ENOMEM;
    struct sched_alloc a;
    if (alloc_copy(&a, &run->alloc))
        return GPO_ENOMEM;
    memmove(&table->runs[at + 1], &table->runs[at], (table->n - at) * sizeof(*table->runs));
    table->runs[at] = *run;
    table->runs[at].alloc = a;
    table->n++;
    return 0;
}

int sched_run_table_remove(struct sched_run_table *table, uint64_t job)
{
    if (!table)
        return GPO_EINVAL;
    size_t at = index_of(table, job);
    if (at == SIZE_MAX)
        return GPO_ENOENT;
    remove_at(table, at);
    return 0;
}

/* The entry a start makes (its allocation still the result's). */
static struct sched_running start_entry(const struct sched_job *req,
                                        const struct sched_start *start, int64_t now_ms)
{
    return (struct sched_running){.job = req,
                                  .alloc = start->alloc,
                                  .start_ms = now_ms,
                                  .checkpoint_ms = now_ms,
                                  .borrowed = start->borrowed};
}

int sched_apply_start(struct sched_run_table *table, const struct sched_job *req,
                      const struct sched_start *start, int64_t now_ms)
{
    if (!table || !req || !start || start->job != req->id)
        return GPO_EINVAL;
    struct sched_running run = start_entry(req, start, now_ms);
    return sched_run_table_add(table, &run);
}

int sched_apply_preempt(struct sched_run_table *table, uint64_t job)
{
    if (!table)
        return GPO_EINVAL;
    size_t at = index_of(table, job);
    if (at == SIZE_MAX)
        return GPO_ENOENT;
    table->runs[at].preempting = true;
    return 0;
}

int sched_apply_end(struct sched_run_table *table, struct sched_state *state,
                    const struct sched_cluster *cluster, const struct sched_policy *policy,
                    uint64_t job, int64_t end_ms)
{
    if (!table)
        return GPO_EINVAL;
    size_t at = index_of(table, job);
    if (at == SIZE_MAX)
        return GPO_ENOENT;
    int err = sched_state_charge_end(state, cluster, policy, &table->runs[at], end_ms);
    if (err)
        return err;
    remove_at(table, at);
    return 0;
}

static bool run_before(const struct sched_running *x, const struct sched_running *y)
{
    return x->job->id < y->job->id;
}

SORT_DEFINE(sort_runs, struct sched_running, run_before)

/* The result's starts as entries with their own allocations, by job id, in
 * *ret (caller frees the array, and the allocations on failure); checked
 * against the table and the lookup. */
static int starts_build(const struct sched_run_table *t, const struct sched_result *r,
                        sched_job_lookup_fn lookup, void *ctx, int64_t now_ms,
                        struct sched_running *add, size_t *ret_n)
{
    int err = 0;
    size_t n = 0;
    for (; n < r->nstarts; n++) {
        const struct sched_start *s = &r->starts[n];
        const struct sched_job *req = lookup(ctx, s->job);
        if (!req || req->id != s->job || !alloc_ok(&s->alloc))
            err = GPO_EINVAL;
        else if (index_of(t, s->job) != SIZE_MAX)
            err = GPO_EEXIST;
        if (err)
            break;
        add[n] = start_entry(req, s, now_ms);
        if ((err = alloc_copy(&add[n].alloc, &s->alloc)))
            break;
    }
    *ret_n = n;
    if (err || (err = sort_runs(add, n)))
        return err;
    for (size_t k = 1; k < n; k++) {
        if (add[k].job->id == add[k - 1].job->id)
            return GPO_EINVAL; /* one job started twice */
    }
    return 0;
}

int sched_apply_result(struct sched_run_table *table, const struct sched_result *result,
                       sched_job_lookup_fn lookup, void *ctx, int64_t now_ms)
{
    if (!table || !result || (result->nstarts && !lookup))
        return GPO_EINVAL;
    for (size_t k = 0; k < result->npreempts; k++) {
        if (index_of(table, result->preempts[k].job) == SIZE_MAX)
            return GPO_ENOENT;
    }
    size_t ns = result->nstarts, built = 0;
    if (ns) {
        if (vec_grow((void **)&table->runs, &table->cap, table->n + ns, sizeof(*table->runs)))
            return GPO_ENOMEM;
        struct sched_running *add = gpo_malloc(ns * sizeof(*add));
        if (!add)
            return GPO_ENOMEM;
        int err = starts_build(table, result, lookup, ctx, now_ms, add, &built);
        if (err) {
            for (size_t k = 0; k < built; k++)
                entry_release(&add[k]);
            free(add);
            return err;
        }
        /* Merge from the back: both runs are in id order, and no id is in both. */
        struct sched_running *runs = table->runs;
        for (size_t a = table->n, b = ns, w = table->n + ns; b > 0;) {
            if (a > 0 && runs[a - 1].job->id > add[b - 1].job->id)
                runs[--w] = runs[--a];
            else
                runs[--w] = add[--b];
        }
        table->n += ns;
        free(add);
    }
    for (size_t k = 0; k < result->npreempts; k++)
        table->runs[index_of(table, result->preempts[k].job)].preempting = true;
    return 0;
}

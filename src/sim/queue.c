#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "sim/queue.h"
#include "util/banned.h"

void sim_queue_init(struct sim_queue *q)
{
    memset(q, 0, sizeof(*q));
}

void sim_queue_release(struct sim_queue *q)
{
    if (!q)
        return;
    free(q->job);
    free(q->req);
    free(q->reason);
    memset(q, 0, sizeof(*q));
}

/* Room for one more at the end: move the entries to the front, or grow. */
static int make_room(struct sim_queue *q)
{
    if (q->head + q->n < q->cap)
        return 0;
    if (q->head > 0 && q->head >= q->cap / 2) {
        memmove(q->job, q->job + q->head, q->n * sizeof(*q->job));
        memmove(q->req, q->req + q->head, q->n * sizeof(*q->req));
        memmove(q->reason, q->reason + q->head, q->n * sizeof(*q->reason));
        q->head = 0;
        return 0;
    }
    size_t cap = q->cap ? 2 * q->cap : 64;
    uint32_t *job = realloc(q->job, cap * sizeof(*job));
    if (job)
        q->job = job;
    struct sched_job *req = job ? realloc(q->req, cap * sizeof(*req)) : NULL;
    if (req)
        q->req = req;
    uint8_t *reason = req ? realloc(q->reason, cap * sizeof(*reason)) : NULL;
    if (!reason)
        return GPO_ENOMEM; /* the arrays that grew hold what they held */
    q->reason = reason;
    q->cap = cap;
    return 0;
}

int sim_queue_push(struct sim_queue *q, uint32_t job, const struct sched_job *req)
{
    if (make_room(q))
        return GPO_ENOMEM;
    size_t at = q->head + q->n;
    if (q->n && q->job[at - 1] > job)
        q->unsorted = true;
    q->job[at] = job;
    q->req[at] = *req;
    q->reason[at] = 0;
    q->n++;
    return 0;
}

struct order_entry {
    uint32_t job;
    uint32_t pos;
};

static int cmp_entry(const void *a, const void *b)
{
    uint32_t x = ((const struct order_entry *)a)->job, y = ((const struct order_entry *)b)->job;
    return (x > y) - (x < y);
}

int sim_queue_sort(struct sim_queue *q)
{
    if (!q->unsorted)
        return 0;
    size_t n = q->n;
    struct order_entry *e = malloc((n ? n : 1) * sizeof(*e));
    struct sched_job *req = malloc((n ? n : 1) * sizeof(*req));
    uint8_t *reason = malloc(n ? n : 1);
    if (!e || !req || !reason) {
        free(e);
        free(req);
        free(reason);
        return GPO_ENOMEM;
    }
    for (size_t k = 0; k < n; k++)
        e[k] = (struct order_entry){q->job[q->head + k], (uint32_t)k};
    qsort(e, n, sizeof(*e), cmp_entry);
    for (size_t k = 0; k < n; k++) {
        req[k] = q->req[q->head + e[k].pos];
        reason[k] = q->reason[q->head + e[k].pos];
        q->job[q->head + k] = e[k].job;
    }
    memcpy(q->req + q->head, req, n * sizeof(*req));
    memcpy(q->reason + q->head, reason, n);
    free(e);
    free(req);
    free(reason);
    q->unsorted = false;
    return 0;
}

void sim_queue_compact(struct sim_queue *q, size_t last_gone)
{
    if (last_gone >= q->n)
        return;
    /* Entries after last_gone stay; the ones before it move up over the gaps. */
    size_t dst = q->head + last_gone + 1, removed = 0;
    for (size_t k = q->head + last_gone + 1; k-- > q->head;) {
        if (q->reason[k] == SIM_QUEUE_GONE) {
            removed++;
            continue;
        }
        dst--;
        if (dst != k) {
            q->job[dst] = q->job[k];
            q->req[dst] = q->req[k];
            q->reason[dst] = q->reason[k];
        }
    }
    q->head += removed;
    q->n -= removed;
}

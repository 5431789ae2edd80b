#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "sim/queue.h"
#include "base/banned.h"

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
    if (q->nsorted == q->n && (q->n == 0 || q->job[at - 1] < job))
        q->nsorted++;
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
    size_t n = q->n, ns = q->nsorted, nt = n - ns;
    if (nt == 0)
        return 0;
    /* The tail (the pushes out of order, and whatever came after them) is
     * sorted aside, then merged in from the back: entries below the
     * tail's lowest job never move. */
    struct order_entry *e = malloc(nt * sizeof(*e));
    struct sched_job *req = malloc(nt * sizeof(*req));
    uint8_t *reason = malloc(nt);
    if (!e || !req || !reason) {
        free(e);
        free(req);
        free(reason);
        return GPO_ENOMEM;
    }
    size_t base = q->head + ns;
    for (size_t k = 0; k < nt; k++)
        e[k] = (struct order_entry){q->job[base + k], (uint32_t)k};
    qsort(e, nt, sizeof(*e), cmp_entry);
    for (size_t k = 0; k < nt; k++) {
        req[k] = q->req[base + e[k].pos];
        reason[k] = q->reason[base + e[k].pos];
    }
    size_t w = q->head + n, a = ns, t = nt;
    while (t > 0) {
        w--;
        if (a > 0 && q->job[q->head + a - 1] > e[t - 1].job) {
            a--;
            q->job[w] = q->job[q->head + a];
            q->req[w] = q->req[q->head + a];
            q->reason[w] = q->reason[q->head + a];
        } else {
            t--;
            q->job[w] = e[t].job;
            q->req[w] = req[t];
            q->reason[w] = reason[t];
        }
    }
    free(e);
    free(req);
    free(reason);
    q->nsorted = n;
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
            q->nsorted -= k - q->head < q->nsorted; /* the rest stays in order */
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

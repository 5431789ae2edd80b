/*
 * ledger.c - segments of attempts at one price, their ledger rows, and the
 * accrual of the open ones.
 *
 * Since every price change closes the open segments of its GPU type, the
 * price at a segment's start is always the current one: an open segment
 * needs only its start and its hourly rate, which a job's JSON can read
 * without the ledger.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/cost/cost.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define HOUR_MS INT64_C(3600000)

int64_t cost_of(int64_t price_micro, int64_t milli, int64_t ms)
{
    if (price_micro <= 0 || milli <= 0 || ms <= 0)
        return 0;
    __int128 num = (__int128)price_micro * milli * ms, den = (__int128)1000 * HOUR_MS;
    return (int64_t)((num + den / 2) / den);
}

int64_t cost_clip(int64_t cost_micro, int64_t start_ms, int64_t end_ms, int64_t a_ms, int64_t b_ms)
{
    int64_t lo = start_ms > a_ms ? start_ms : a_ms, hi = end_ms < b_ms ? end_ms : b_ms;
    if (end_ms <= start_ms)
        return start_ms >= a_ms && start_ms < b_ms ? cost_micro : 0;
    if (hi <= lo)
        return 0;
    if (lo == start_ms && hi == end_ms)
        return cost_micro;
    __int128 num = (__int128)cost_micro * (hi - lo), den = end_ms - start_ms;
    return (int64_t)((num + den / 2) / den);
}

/* The GPU type of a share, or NULL when its node is gone. A MIG instance
 * ("MIG-..." UUID) is charged as its parent's type for now; its price will
 * be its slices' part of the GPU's price (milli already says its share). */
static const char *share_type(const struct cost *c, const struct attempt_share *sh)
{
    const struct cluster_node *n = cluster_node_get(c->cluster, sh->node);
    for (size_t g = 0; n && g < n->ngpus; g++)
        if (strcmp(n->gpus[g].uuid, sh->uuid) == 0)
            return n->gpus[g].gpu_type;
    return n && n->ngpus ? n->gpus[0].gpu_type : NULL;
}

/* The attempt's shares summed per GPU type: at most TYPES_MAX types (an
 * attempt holds one or two in practice; more fold into the last). */
#define TYPES_MAX 8
struct type_milli {
    const char *type; /* borrowed from the model; "unknown" when the node is gone */
    int64_t milli;
};

static size_t types_of(const struct cost *c, const struct attempt *a, struct type_milli *out)
{
    size_t n = 0;
    for (size_t k = 0; k < a->nshares; k++) {
        const char *t = share_type(c, &a->shares[k]);
        t = t ? t : "unknown";
        size_t i = 0;
        while (i < n && strcmp(out[i].type, t) != 0)
            i++;
        if (i == n && n == TYPES_MAX)
            i = n - 1;
        else if (i == n)
            out[n++] = (struct type_milli){t, 0};
        out[i].milli += a->shares[k].milli;
    }
    return n;
}

static int64_t price_of(const struct cost *c, const char *type)
{
    const struct cluster_price *p = cluster_price_get(c->cluster, type);
    return p ? p->per_gpu_hour_micro : 0;
}

static int64_t rate_of(const struct cost *c, const struct attempt *a)
{
    struct type_milli tm[TYPES_MAX];
    size_t n = types_of(c, a, tm);
    __int128 r = 0;
    for (size_t i = 0; i < n; i++)
        r += (__int128)price_of(c, tm[i].type) * tm[i].milli;
    return (int64_t)((r + 500) / 1000);
}

void cost_open(struct cost *c, struct job *j, int64_t now_ms)
{
    if (!j->att.n || j->att.seg.start_ms)
        return;
    j->att.seg.start_ms = j->att.start_ms > 0 ? j->att.start_ms : now_ms;
    j->att.seg.rate_micro = rate_of(c, &j->att);
}

int64_t cost_accrued(const struct job *j, int64_t from_ms, int64_t now_ms)
{
    const struct attempt *a = &j->att;
    if (!a->n || !a->seg.start_ms)
        return 0;
    int64_t start = a->seg.start_ms > from_ms ? a->seg.start_ms : from_ms;
    if (now_ms <= start || a->seg.rate_micro <= 0)
        return 0;
    __int128 num = (__int128)a->seg.rate_micro * (now_ms - start);
    return (int64_t)((num + HOUR_MS / 2) / HOUR_MS);
}

int64_t cost_job(const struct job *j, int64_t now_ms)
{
    return j->cost_micro + cost_accrued(j, INT64_MIN, now_ms);
}

int cost_close(struct cost *c, const struct job *j, int64_t now_ms, const char *outcome,
               struct store_batch *b, int64_t *ret_cost_micro)
{
    const struct attempt *a = &j->att;
    int64_t start = a->seg.start_ms ? a->seg.start_ms : a->start_ms;
    int64_t seq = a->seg.seq;
    uint64_t usum = a->util_sum, usamples = a->util_samples, uidle = a->idle_samples;
    /* A price change's row, being committed, ends at seg.pending_ms: ours
     * starts there (at the price in the model now: the change is applied
     * after its commit, so the milliseconds between are charged at the old
     * price). */
    if (a->seg.pending_seq) {
        start = a->seg.pending_ms > start ? a->seg.pending_ms : start;
        seq = a->seg.pending_seq;
        usum -= usum < a->seg.pending_util[0] ? usum : a->seg.pending_util[0];
        usamples -= usamples < a->seg.pending_util[1] ? usamples : a->seg.pending_util[1];
        uidle -= uidle < a->seg.pending_util[2] ? uidle : a->seg.pending_util[2];
    }
    int64_t end = now_ms > start ? now_ms : start;
    struct type_milli tm[TYPES_MAX];
    size_t n = types_of(c, a, tm);
    int64_t total_milli = 0, cost = 0;
    for (size_t i = 0; i < n; i++)
        total_milli += tm[i].milli;
    for (size_t i = 0; i < n; i++) {
        int64_t price = price_of(c, tm[i].type);
        /* The samples are the attempt's: split them by each type's share. */
        uint64_t num = (uint64_t)tm[i].milli, den = total_milli > 0 ? (uint64_t)total_milli : 1;
        struct store_ledger_row r = {
            .job_id = j->id,
            .attempt = a->n,
            .seq = seq + (int64_t)i,
            .start_ms = start,
            .end_ms = end,
            .team = j->team,
            .project = j->spec.project,
            .model = j->spec.model,
            .user = j->user,
            .gpu_type = (char *)tm[i].type,
            .gpu_milli = tm[i].milli,
            .price_micro = price,
            .cost_micro = cost_of(price, tm[i].milli, end - start),
            .outcome = (char *)outcome,
            .util_sum = (int64_t)(usum * num / den),
            .util_samples = (int64_t)(usamples * num / den),
            .idle_samples = (int64_t)(uidle * num / den),
        };
        if (store_batch_ledger_add(b, &r))
            return GPO_ENOMEM;
        cost += r.cost_micro;
    }
    *ret_cost_micro = cost;
    return 0;
}

void cost_charged(struct cost *c, int64_t job, const char *team, int64_t start_ms, int64_t end_ms,
                  int64_t cost_micro)
{
    struct job *j = jobs_find(c->jobs, job);
    if (j)
        j->cost_micro += cost_micro;
    struct cost_team *t = cost_team_get(c, team, true);
    if (!t)
        return;
    t->total_micro += cost_micro;
    t->month_micro += cost_clip(cost_micro, start_ms, end_ms, c->month_start_ms, c->month_end_ms);
}

/* ---- price changes ---- */

struct pending_seg {
    int64_t job, attempt, start_ms, cost_micro, nrows;
    uint64_t util_sum, util_samples, idle_samples;
};

struct cost_pending {
    int64_t at_ms;
    struct pending_seg *segs;
    size_t n;
};

static bool holds_type(const struct cost *c, const struct attempt *a, const char *type)
{
    for (size_t k = 0; k < a->nshares; k++) {
        const char *t = share_type(c, &a->shares[k]);
        if (t && strcmp(t, type) == 0)
            return true;
    }
    return false;
}

int cost_price_plan(struct cost *c, const char *gpu_type, int64_t now_ms, struct store_batch *b,
                    struct cost_pending **ret)
{
    struct cost_pending *p = calloc(1, sizeof(*p));
    if (!p)
        return GPO_ENOMEM;
    p->at_ms = now_ms;
    for (size_t k = 0; k < c->jobs->n; k++) {
        struct job *j = c->jobs->v[k];
        if (!j->att.n || !holds_type(c, &j->att, gpu_type))
            continue;
        if (j->att.seg.pending_seq)
            continue; /* another price change is closing it (config writes are one at a time) */
        struct pending_seg *v = realloc(p->segs, (p->n + 1) * sizeof(*v));
        if (!v)
            goto fail;
        p->segs = v;
        struct pending_seg *g = &p->segs[p->n];
        *g = (struct pending_seg){.job = j->id,
                                  .attempt = j->att.n,
                                  .start_ms =
                                      j->att.seg.start_ms ? j->att.seg.start_ms : j->att.start_ms,
                                  .util_sum = j->att.util_sum,
                                  .util_samples = j->att.util_samples,
                                  .idle_samples = j->att.idle_samples};
        struct type_milli tm[TYPES_MAX];
        g->nrows = (int64_t)types_of(c, &j->att, tm);
        if (cost_close(c, j, now_ms, NULL, b, &g->cost_micro))
            goto fail;
        p->n++;
    }
    /* Marked only once the plan is whole: a failed plan leaves no attempt marked. */
    for (size_t k = 0; k < p->n; k++) {
        const struct pending_seg *g = &p->segs[k];
        struct attempt *a = &jobs_find(c->jobs, g->job)->att;
        a->seg.pending_ms = now_ms > g->start_ms ? now_ms : g->start_ms;
        a->seg.pending_seq = a->seg.seq + g->nrows;
        a->seg.pending_util[0] = g->util_sum;
        a->seg.pending_util[1] = g->util_samples;
        a->seg.pending_util[2] = g->idle_samples;
        a->seg.pending_start_ms = g->start_ms;
        a->seg.pending_cost = g->cost_micro;
    }
    *ret = p;
    return 0;
fail:
    free(p->segs);
    free(p);
    return GPO_ENOMEM;
}

static uint64_t sub_sat(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

void cost_price_apply(struct cost *c, struct cost_pending *p, bool committed)
{
    if (!p)
        return;
    for (size_t k = 0; k < p->n; k++) {
        const struct pending_seg *g = &p->segs[k];
        struct job *j = jobs_find(c->jobs, g->job);
        if (!j || j->att.n != g->attempt)
            continue; /* ended meanwhile: its end closed the rest */
        j->att.seg.pending_ms = j->att.seg.pending_seq = 0;
        j->att.seg.pending_start_ms = j->att.seg.pending_cost = 0;
        memset(j->att.seg.pending_util, 0, sizeof(j->att.seg.pending_util));
        if (!committed)
            continue;
        cost_charged(c, j->id, j->team, g->start_ms, p->at_ms, g->cost_micro);
        struct attempt *a = &j->att;
        a->seg.seq += g->nrows;
        a->seg.start_ms = p->at_ms > g->start_ms ? p->at_ms : g->start_ms;
        a->seg.rate_micro = rate_of(c, a);
        /* Samples that arrived during the commit stay for the next segment. */
        a->util_sum = sub_sat(a->util_sum, g->util_sum);
        a->util_samples = sub_sat(a->util_samples, g->util_samples);
        a->idle_samples = sub_sat(a->idle_samples, g->idle_samples);
    }
    free(p->segs);
    free(p);
}

void cost_init(struct cost *c, pthread_mutex_t *lock, struct jobs *jobs,
               const struct cluster *cluster, struct store *store)
{
    *c = (struct cost){.lock = lock, .jobs = jobs, .cluster = cluster, .store = store};
}

void cost_release(struct cost *c)
{
    free(c->teams);
    c->teams = NULL;
    c->nteams = c->cap = 0;
}

int cost_load(struct cost *c, int64_t now_ms, char *err, size_t errlen)
{
    if (cost_month(now_ms, &c->month_start_ms, &c->month_end_ms, c->month))
        return errbuf_set(err, errlen, GPO_ERANGE, "the clock is out of range");
    struct store_ledger_row *rows = NULL;
    size_t n = 0;
    int rc = store_ledger_range(c->store, INT64_MIN, INT64_MAX, &rows, &n);
    if (rc)
        return errbuf_set(err, errlen, rc, "store: the ledger: %s", gpo_strerror(rc));
    for (size_t k = 0; k < n; k++) {
        const struct store_ledger_row *r = &rows[k];
        cost_charged(c, r->job_id, r->team, r->start_ms, r->end_ms, r->cost_micro);
        struct job *j = jobs_find(c->jobs, r->job_id);
        if (!j || j->att.n != r->attempt)
            continue;
        /* The open segment goes on from the attempt's last row. */
        if (r->seq + 1 > j->att.seg.seq)
            j->att.seg.seq = r->seq + 1;
        if (r->end_ms > j->att.seg.start_ms)
            j->att.seg.start_ms = r->end_ms;
    }
    store_ledger_rows_free(rows, n);
    for (size_t k = 0; k < c->jobs->n; k++) {
        struct job *j = c->jobs->v[k];
        if (!j->att.n)
            continue;
        cost_open(c, j, now_ms);
        j->att.seg.rate_micro = rate_of(c, &j->att);
    }
    return 0;
}

void cost_end_charged(struct cost *c, const struct job *j, const struct attempt *a, int64_t end_ms,
                      int64_t cost_micro, int64_t pending_seq)
{
    int64_t start = a->seg.start_ms ? a->seg.start_ms : a->start_ms;
    if (pending_seq && a->seg.pending_seq == pending_seq) {
        /* Planned after a price change whose commit comes after ours: that
         * change will find the attempt gone, so its row is charged here. */
        cost_charged(c, j->id, j->team, a->seg.pending_start_ms, a->seg.pending_ms,
                     a->seg.pending_cost);
        start = a->seg.pending_ms;
    } else if (pending_seq) {
        start = a->seg.start_ms; /* the price change was applied: its end is our start */
    }
    cost_charged(c, j->id, j->team, start, end_ms, cost_micro);
}

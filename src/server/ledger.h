/*
 * ledger.h - what GPU time costs: the ledger of attempts' segments, the
 * accrual of running ones, and the cost metrics.
 *
 * Every attempt is charged price(gpu_type) x (milli / 1000) x hours for each
 * GPU share it holds (a fraction by its share; a MIG slice will be charged
 * its slices' part of the GPU's price, see share_type in ledger.c). A
 * segment is a stretch of an attempt at one price: it opens when the
 * attempt starts (att.start_ms) and closes when the attempt ends or a price
 * of one of its GPU types changes. A closed segment is one ledger row per
 * GPU type it held, written in the same store batch as what closed it,
 * never updated. A type without a price costs 0 (its GPU-hours still count).
 *
 * Money is int64 millionths of the price unit ("micro"). Everything here
 * runs under s->lock unless said otherwise.
 */
#ifndef GPUORCH_SERVER_LEDGER_H
#define GPUORCH_SERVER_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct server;
struct prom;
struct srv_job;
struct store_batch;

/*
 * Writes the cost families into `p` (under s->lock): gpuorch_cost_total{team}
 * (counter: ledger + accrual, all time), gpuorch_cost_rate_per_hour{team},
 * gpuorch_budget_spent{team}, gpuorch_budget_monthly{team},
 * gpuorch_budget_over{team} (0/1).
 */
void srv_cost_metrics(struct server *s, struct prom *p, int64_t now_ms);

/* At start, after srv_loop_load (not under the lock): the teams' totals and
 * this month's sums from the ledger, each job's cost, and the open segments
 * of the attempts that hold resources (from their start or their last row).
 * 0, or an error with a message. */
int srv_ledger_load(struct server *s, char *err, size_t errlen);
/* Frees s->cost; NULL is fine. */
void srv_ledger_free(struct server *s);

/* Opens job j's segment at its attempt's start with the prices of now; does
 * nothing when it is open. Called when an attempt is applied. */
void srv_ledger_open(struct server *s, struct srv_job *j);

/*
 * Adds to b the ledger rows closing j's open segment at now_ms, with
 * `outcome` (the attempt's final state; NULL when a price change closes it)
 * and the attempt's util accumulators. *ret_cost_micro: what the rows cost.
 * j is unchanged (see srv_ledger_closed). 0 or -ENOMEM.
 */
int srv_ledger_close(struct server *s, const struct srv_job *j, int64_t now_ms, const char *outcome,
                     struct store_batch *b, int64_t *ret_cost_micro);
/* After the commit of rows that cost cost_micro for job `job` of `team`
 * (ended at end_ms): adds to the job's and team's totals and this month's. */
void srv_ledger_charged(struct server *s, int64_t job, const char *team, int64_t start_ms,
                        int64_t end_ms, int64_t cost_micro);

/* A price change being committed: the segments it closes. */
struct srv_ledger_pending;
/* Adds to b the rows closing every open segment holding a GPU of `gpu_type`.
 * *ret: pass to srv_ledger_price_apply (NULL when none). 0 or -ENOMEM. */
int srv_ledger_price_plan(struct server *s, const char *gpu_type, int64_t now_ms,
                          struct store_batch *b, struct srv_ledger_pending **ret);
/* After the commit (committed) or its failure: reopens the closed segments
 * at the new prices (the price in s->cluster must be applied first); frees p. */
void srv_ledger_price_apply(struct server *s, struct srv_ledger_pending *p, bool committed);

/* Cost of j's open segment from `from_ms` (clipped to its start) to now_ms. */
int64_t srv_ledger_accrued(const struct srv_job *j, int64_t from_ms, int64_t now_ms);
/* What job j cost so far: its rows and its open segment to now. Needs no server. */
int64_t srv_ledger_job_cost(const struct srv_job *j, int64_t now_ms);
/* Sum of the hourly rates of the open segments (of `team`, NULL: all). */
int64_t srv_ledger_rate(const struct server *s, const char *team);

/* price x milli/1000 x ms/3600000, rounded; exact in 128 bits. */
int64_t srv_ledger_cost(int64_t price_micro, int64_t milli, int64_t ms);
/* cost_micro x [a, b) / [start, end): the part of a row inside [a, b). */
int64_t srv_ledger_clip(int64_t cost_micro, int64_t start_ms, int64_t end_ms, int64_t a_ms,
                        int64_t b_ms);

/* The teams' all-time totals (ledger rows only) and this month's, by name. */
int64_t srv_ledger_team_total(const struct server *s, const char *team);
/* This month's (budget.c's month) closed rows clipped to it, of `team`. */
int64_t srv_ledger_team_month(const struct server *s, const char *team);

#endif

/*
 * cost.h - what GPU time costs: the ledger of attempts' segments, the accrual
 * of running ones, teams' totals and monthly budgets, the cost report and
 * the cost metrics.
 *
 * Every attempt is charged price(gpu_type) x (milli / 1000) x hours for each
 * GPU share it holds (a fraction by its share; a MIG slice will be charged
 * its slices' part of the GPU's price). A segment is a stretch of an attempt
 * at one price (struct attempt_segment, kept in the attempt): it opens when
 * the attempt starts and closes when the attempt ends or a price of one of
 * its GPU types changes. A closed segment is one ledger row per GPU type it
 * held, written in the same store batch as what closed it, never updated. A
 * type without a price costs 0 (its GPU-hours still count).
 *
 * Budgets: calendar months in the controller's cost time zone (cost_tz_set,
 * UTC by default), what each team spent in the current one, the alert line,
 * and the 403 for submissions below a team's block_below class once over.
 *
 * Money is int64 millionths of the price unit ("micro").
 *
 * Owns: struct cost (teams' totals, the month). Reads the jobs' attempts, the
 * configuration's prices and nodes, and the store's ledger (borrowed at
 * cost_init). Lock: the controller's state lock (borrowed too), held by
 * every caller except cost_report's, which takes it itself.
 */
#ifndef GPUORCH_SERVER_COST_COST_H
#define GPUORCH_SERVER_COST_COST_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cluster/cluster.h"
#include "server/jobs/jobs.h"
#include "store/store.h"
#include "util/prom.h"

/* One team's money as the ledger has it (closed rows only). */
struct cost_team {
    char name[CLUSTER_NAME_MAX + 1];
    int64_t total_micro; /* all time */
    int64_t month_micro; /* rows clipped to the current month */
    char alerted[8];     /* "YYYY-MM" of the month its alert was logged, or "" */
};

struct cost {
    pthread_mutex_t *lock;         /* borrowed: the state lock */
    struct jobs *jobs;             /* borrowed */
    const struct cluster *cluster; /* borrowed */
    struct store *store;           /* borrowed */
    struct cost_team *teams;       /* unsorted; few */
    size_t nteams, cap;
    int64_t month_start_ms, month_end_ms; /* the month the sums are of */
    char month[8];                        /* its "YYYY-MM" */
};

/* Empty sums over the borrowed lock, jobs, configuration and store. */
void cost_init(struct cost *c, pthread_mutex_t *lock, struct jobs *jobs,
               const struct cluster *cluster, struct store *store);
void cost_release(struct cost *c);

/* At start, after the jobs and their attempts are loaded: the teams'
 * totals and this month's sums from the ledger, each job's cost, and the
 * open segments of the attempts that hold resources (from their start or
 * their last row). 0, or an error with a message. */
int cost_load(struct cost *c, int64_t now_ms, char *err, size_t errlen);

/* The team's entry, made when `create` (NULL: out of memory or absent). */
struct cost_team *cost_team_get(struct cost *c, const char *team, bool create);

/* ---- segments --------------------------------------------------------------- */

/* Opens job j's segment at its attempt's start (now_ms when it has none)
 * with the prices of now; nothing when it is open. */
void cost_open(struct cost *c, struct job *j, int64_t now_ms);

/*
 * Adds to b the ledger rows closing j's open segment at now_ms, with
 * `outcome` (the attempt's final state; NULL when a price change closes it)
 * and the attempt's utilization accumulators. *ret_cost_micro: what the rows
 * cost. j is unchanged. 0 or GPO_ENOMEM.
 */
int cost_close(struct cost *c, const struct job *j, int64_t now_ms, const char *outcome,
               struct store_batch *b, int64_t *ret_cost_micro);

/* After the commit of rows that cost cost_micro for job `job` of `team`
 * over [start_ms, end_ms): adds to the job's and team's totals and this
 * month's. */
void cost_charged(struct cost *c, int64_t job, const char *team, int64_t start_ms, int64_t end_ms,
                  int64_t cost_micro);

/*
 * An attempt's end was committed: charges its rows (cost_micro, planned by
 * cost_close when the end was planned; pending_seq the segment's
 * pending_seq then), taking into account a price change whose rows may have
 * committed before or after the end's.
 */
void cost_end_charged(struct cost *c, const struct job *j, const struct attempt *a, int64_t end_ms,
                      int64_t cost_micro, int64_t pending_seq);

/* A price change being committed: the segments it closes. */
struct cost_pending;
/* Adds to b the rows closing every open segment holding a GPU of `gpu_type`;
 * *ret: pass to cost_price_apply (NULL when none). 0 or GPO_ENOMEM. */
int cost_price_plan(struct cost *c, const char *gpu_type, int64_t now_ms, struct store_batch *b,
                    struct cost_pending **ret);
/* After the commit (committed) or its failure: reopens the closed segments
 * at the new prices (the new price must be in the configuration); frees p
 * (NULL is fine). */
void cost_price_apply(struct cost *c, struct cost_pending *p, bool committed);

/* Cost of j's open segment from `from_ms` (clipped to its start) to now_ms. */
int64_t cost_accrued(const struct job *j, int64_t from_ms, int64_t now_ms);
/* What job j cost so far: its rows and its open segment to now. */
int64_t cost_job(const struct job *j, int64_t now_ms);

/* price x milli/1000 x ms/3600000, rounded; exact in 128 bits. */
int64_t cost_of(int64_t price_micro, int64_t milli, int64_t ms);
/* cost_micro x [a, b) / [start, end): the part of a row inside [a, b). */
int64_t cost_clip(int64_t cost_micro, int64_t start_ms, int64_t end_ms, int64_t a_ms, int64_t b_ms);

/* The team's all-time total (ledger rows only), and this month's. */
int64_t cost_team_total(const struct cost *c, const char *team);
int64_t cost_team_month(const struct cost *c, const char *team);

/* ---- budgets ---------------------------------------------------------------- */

/*
 * Sets the process's time zone to `name` (an IANA name like
 * "Europe/Berlin", or "UTC"; NULL: UTC) for the months. Call once, before
 * threads start. 0, or GPO_EINVAL with a message when the zone is not known.
 */
int cost_tz_set(const char *name, char *err, size_t errlen);

/* The calendar month (local time) holding t_ms: [*ret_start, *ret_end) and
 * its label "YYYY-MM" (8 bytes). 0 or GPO_ERANGE. */
int cost_month(int64_t t_ms, int64_t *ret_start_ms, int64_t *ret_end_ms, char label[8]);

/* Moves the sums to the month holding now_ms when it changed (reads the
 * store's rows of the new month). */
void cost_roll(struct cost *c, int64_t now_ms);

/* What `team` spent this month: its rows clipped to the month and the
 * accrual of its running attempts since the month began. */
int64_t cost_spent(struct cost *c, const char *team, int64_t now_ms);

/* Logs one line per team and month when spending crosses its alert_at. */
void cost_tick(struct cost *c, int64_t now_ms);

/*
 * Whether a submission of `team` in class `cls` (NULL: the default class)
 * is blocked: the team is over its budget and the class is ordered below
 * its block_below class. True with the message in msg.
 */
bool cost_blocks(struct cost *c, const char *team, const char *cls, int64_t now_ms, char *msg,
                 size_t msglen);

/* "10,012.50": micro with thousands separators and 2 decimals. */
void cost_money_format(int64_t micro, char *buf, size_t len);

/* ---- reports ----------------------------------------------------------------- */

/* Which teams a reader sees: NULL all (an admin), else that one (a member;
 * "" for a member without a team, who sees none). */
bool cost_visible(const char *only_team, const char *team);

/* GET /v1/budgets' array of the teams `only_team` lets through; NULL out of memory. */
json_t *cost_budgets_json(struct cost *c, const char *only_team, int64_t now_ms);

/* The longest key of a group (GET /v1/cost?key=). */
#define COST_KEY_MAX JOBSPEC_NAME_MAX

/* What GET /v1/cost groups by. */
enum cost_by { COST_BY_TEAM, COST_BY_PROJECT, COST_BY_MODEL, COST_BY_USER, COST_BY_JOB };
/* The grouping named `name`, or -1. */
int cost_by_parse(const char *name);

/*
 * GET /v1/cost's answer: the cost of [since_ms, until_ms) grouped `by`, of
 * the teams `only_team` lets through: the closed rows clipped exactly, plus
 * the running attempts' open segments up to now; with only_key (not NULL),
 * the group of that key alone (none when it cost nothing), its figures the
 * total's and the rate its running attempts'. Takes the ledger's rows from
 * the store while the caller holds the lock. A new object, or NULL with
 * *ret_err (GPO_ENOMEM, or a store code).
 */
json_t *cost_report(struct cost *c, const char *only_team, enum cost_by by, const char *only_key,
                    int64_t since_ms, int64_t until_ms, int64_t now_ms, int *ret_err);

/*
 * Writes the cost families into p: gpuorch_cost_total{team} (counter:
 * ledger + accrual, all time), gpuorch_cost_rate_per_hour{team},
 * gpuorch_budget_spent{team}, gpuorch_budget_monthly{team},
 * gpuorch_budget_over{team} (0/1).
 */
void cost_metrics(struct cost *c, struct prom *p, int64_t now_ms);

#endif

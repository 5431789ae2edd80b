/*
 * budget.h - teams' monthly budgets: calendar months in the controller's
 * cost time zone (--cost-timezone, UTC by default), what each team spent in
 * the current one, the alert line, and the 403 for submissions below a
 * team's block_below class once it is over.
 *
 * The month functions use the process's local time zone, which
 * srv_budget_tz_set sets once at start (before any thread). Everything
 * taking a server runs under s->lock.
 */
#ifndef GPUORCH_SERVER_BUDGET_H
#define GPUORCH_SERVER_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cluster/cluster.h"

struct server;
struct srv_user;

/* One team's money as the ledger has it (closed rows only). */
struct srv_cost_team {
    char name[CLUSTER_NAME_MAX + 1];
    int64_t total_micro; /* all time */
    int64_t month_micro; /* rows clipped to the current month */
    char alerted[8];     /* "YYYY-MM" of the month its alert was logged, or "" */
};

/* s->cost: ledger.c's and budget.c's state. */
struct srv_cost {
    struct srv_cost_team *teams; /* unsorted; few */
    size_t nteams, cap;
    int64_t month_start_ms, month_end_ms; /* the month the sums are of */
    char month[8];                        /* its "YYYY-MM" */
};

/* The team's entry, made when `create` (NULL: out of memory or absent). */
struct srv_cost_team *srv_cost_team_get(struct srv_cost *c, const char *team, bool create);

/*
 * Sets the process's time zone to `name` (an IANA name like
 * "Europe/Berlin", or "UTC"; NULL: UTC) for the months. Call once, before
 * threads start. 0, or -EINVAL with a message when the zone is not known.
 */
int srv_budget_tz_set(const char *name, char *err, size_t errlen);

/* The calendar month (local time) holding t_ms: [*ret_start, *ret_end) and
 * its label "YYYY-MM" (8 bytes). 0 or -ERANGE. */
int srv_budget_month(int64_t t_ms, int64_t *ret_start_ms, int64_t *ret_end_ms, char label[8]);

/* Moves the sums to the month holding now_ms when it changed (reads the
 * store's rows of the new month). */
void srv_budget_roll(struct server *s, int64_t now_ms);

/* What `team` spent this month: its rows clipped to the month and the
 * accrual of its running attempts since the month began. */
int64_t srv_budget_spent(struct server *s, const char *team, int64_t now_ms);

/* Logs one line per team and month when spending crosses its alert_at. */
void srv_budget_tick(struct server *s, int64_t now_ms);

/*
 * Whether a submission of `team` in class `cls` (NULL: the default class)
 * is blocked: the team is over its budget and the class is ordered below
 * its block_below class. True with the message in msg.
 */
bool srv_budget_blocks(struct server *s, const char *team, const char *cls, int64_t now_ms,
                       char *msg, size_t msglen);

/* GET /v1/budgets' array (teams `u` may see); NULL out of memory. */
json_t *srv_budgets_json(struct server *s, const struct srv_user *u, int64_t now_ms);

/* "10,012.50": micro with thousands separators and 2 decimals. */
void srv_money_format(int64_t micro, char *buf, size_t len);

#endif

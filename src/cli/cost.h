/*
 * cost.h - `gpuorch cost`: what GPU time cost, from GET /v1/cost.
 *
 *   gpuorch cost [--by team|project|model|user|job] [--since T] [--until T]
 *                [--json | --csv]
 *       GPU-HOURS COST FAILED UTIL% WASTE per key and a total line; with
 *       --by team the teams' budgets (GET /v1/budgets) below. T: RFC 3339,
 *       YYYY-MM-DD (midnight in the controller's cost time zone), "now", or
 *       relative like -7d, -12h. Default: this month.
 *
 * The parsing and rendering functions are public for the unit tests.
 */
#ifndef GPUORCH_CLI_COST_H
#define GPUORCH_CLI_COST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "cli/cli.h"

enum cost_format { COST_TABLE = 0, COST_JSON, COST_CSV };

struct cost_args {
    struct cli_common co;
    const char *by;            /* NULL: team */
    enum client_cost_by group; /* --by, read */
    const char *since;         /* NULL: the server's default (this month) */
    const char *until;
    bool csv;
    enum cost_format format; /* from --json / --csv */
};

/*
 * Checks a time as the server will read it: RFC 3339, YYYY-MM-DD, "now",
 * or "-" and a number with s, m, h or d. 0, or GPO_EUSAGE.
 */
int cost_time_check(const char *s);

/*
 * Parses argv (argv[0] "cost") into *ret. 0; CLI_EXIT_USAGE after printing
 * one line naming the flag (an unknown flag, a bad --by or time, --json
 * with --csv, an argument).
 */
int cost_args_parse(int argc, char **argv, struct cost_args *ret);

/*
 * Writes the report (GET /v1/cost's object, borrowed) as a table or CSV;
 * budgets (GET /v1/budgets' array, borrowed; NULL: none) below a table.
 * 0, or GPO_ENOMEM.
 */
int cost_render(FILE *out, const json_t *report, const json_t *budgets, enum cost_format fmt);

int cost_command(int argc, char **argv);

#endif

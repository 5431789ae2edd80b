/*
 * history.h - gpuorch history, as sacct: jobs in any state, ended ones
 * included, from GET /v1/accounting/jobs, in sacct's columns (--format),
 * with Slurm's state names (cli/slurm.h) and sacct's filters and time forms.
 * docs/slurm.md lists what it takes.
 *
 *   gpuorch history [-j JOB[,JOB]] [-u USER[,USER] | -a] [-A TEAM[,TEAM]]
 *                   [-s STATE[,STATE]] [-S TIME] [-E TIME] [-X]
 *                   [--format FIELDS] [-P | -p] [-n] [--json]
 *
 * Returns an exit code as cli.h says; argv[0] is the command's name.
 */
#ifndef GPUORCH_CLI_HISTORY_H
#define GPUORCH_CLI_HISTORY_H

int history_command(int argc, char **argv);

#endif

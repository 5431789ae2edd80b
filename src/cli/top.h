/*
 * top.h - `gpuorch top`: a live terminal view of the cluster's GPUs, jobs,
 * utilization and cost rate, as nvtop and htop show a machine:
 *
 *   gpuorch top [--interval SECONDS] [--sort KEY] [--once] [--json]
 *
 * On a terminal it takes the alternate screen, hides the cursor and redraws
 * in place every interval, fitted to the terminal's size (redrawn when it
 * changes); keys: q quits, s cycles the jobs' sort. The terminal is given
 * back as it was on q, on SIGINT, SIGTERM and SIGHUP (the signal is then
 * raised again), and on error. When stdout is not a terminal, or with
 * --once, it prints one plain snapshot (no escape codes) and exits 0;
 * --json prints the view of topview.h. A server that cannot be reached at
 * the start is exit 1; a refresh that fails later keeps the last screen and
 * says why on it, and top goes on trying.
 */
#ifndef GPUORCH_CLI_TOP_H
#define GPUORCH_CLI_TOP_H

/* The command; argv[0] is "top". Exit codes as cli.h says. */
int top_command(int argc, char **argv);

#endif

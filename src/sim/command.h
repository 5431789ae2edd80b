/*
 * command.h - `gpuorch sim`: replay a trace through the scheduler core under
 * one or more policies, and print what happened.
 */
#ifndef GPUORCH_SIM_COMMAND_H
#define GPUORCH_SIM_COMMAND_H

#include <stdbool.h>
#include <stdint.h>

/* The command's entry point (argv[0] is "sim"). Exit codes: 0 done, 1 failed
 * (a trace or spec that cannot be read, a write error), 2 usage (a bad flag
 * or value). */
int sim_command(int argc, char **argv);

struct opts;
struct opts_opt;
/* The next flag of a `gpuorch sim` command line (util/opts), stored into
 * `args` through its table: 1 with *o and *v (its value) set, 0 at the end,
 * or 2 (usage) with the message printed. */
int sim_command_next_flag(struct opts *p, void *args, const struct opts_opt **o, const char **v);

/* Whether argv (argv[0] "sim") has the flag --NAME, alone or as --NAME=V,
 * before any "--": how `gpuorch sim` picks its serving and MIG replays. */
bool sim_command_has_flag(int argc, char **argv, const char *name);

/* 0 if [from_s, until_s) is a window (until_s < 0: no end); else 2 (usage),
 * with the message printed. */
int sim_command_check_window(int64_t from_s, int64_t until_s);

#endif

/*
 * command.h - `gpuorch sim`: replay a trace through the scheduler core under
 * one or more policies, and print what happened.
 */
#ifndef GPUORCH_SIM_COMMAND_H
#define GPUORCH_SIM_COMMAND_H

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

#endif

/*
 * mig_cmd.h - `gpuorch sim --mig MODE`: a job trace replayed on MIG-capable
 * nodes with no MIG, a static layout or the dynamic planner
 * (sim/mig_replay.h, docs/simulator.md "MIG: static and dynamic layouts").
 */
#ifndef GPUORCH_SIM_MIG_CMD_H
#define GPUORCH_SIM_MIG_CMD_H

#include <stdbool.h>
#include <stdio.h>

/* Whether argv (argv[0] "sim") asks for the MIG replay: a --mig flag. */
bool sim_mig_wanted(int argc, char **argv);

/* The MIG replay's part of `gpuorch sim --help`. */
void sim_mig_usage(FILE *out);

/* The command (argv[0] "sim"). Exit codes as sim_command's. */
int sim_mig_command(int argc, char **argv);

#endif

/*
 * serve_cmd.h - `gpuorch sim --serve`: replay request traces through the
 * services' autoscalers under one or more serving policies, and print what
 * happened (docs/simulator.md, "Serving"). sim_command dispatches here when
 * --serve is among its arguments.
 */
#ifndef GPUORCH_SIM_SERVE_CMD_H
#define GPUORCH_SIM_SERVE_CMD_H

#include <stdbool.h>
#include <stdio.h>

/* Whether argv (argv[0] is "sim") asks for a serving replay: a --serve flag. */
bool sim_serve_wanted(int argc, char **argv);

/* The serving replay's entry point; the exit codes are sim_command's: 0
 * done, 1 failed (an input that cannot be read, a write error), 2 usage. */
int sim_serve_command(int argc, char **argv);

/* The serving part of `gpuorch sim --help`. */
void sim_serve_usage(FILE *out);

#endif

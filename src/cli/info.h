/*
 * info.h - gpuorch info, as sinfo: pools and their nodes by state from GET
 * /v1/nodes (and GET /v1/pools for a pool's limit and default mark), node
 * lists in Slurm's host-list form (util/hostlist.h). docs/slurm.md lists
 * what it takes.
 *
 *   gpuorch info [-N] [-p POOL[,POOL]] [-t STATE[,STATE]] [-h] [--json]
 *
 * Returns an exit code as cli.h says; argv[0] is the command's name.
 */
#ifndef GPUORCH_CLI_INFO_H
#define GPUORCH_CLI_INFO_H

int info_command(int argc, char **argv);

#endif

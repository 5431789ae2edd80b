/*
 * nodes.h - the user commands about nodes, as sinfo and scontrol would have
 * them:
 *
 *   gpuorch nodes [--json]
 *       NAME POOL STATE GPUS TYPE FREE CPUS MEM HEARTBEAT, one node a line.
 *       FREE counts the GPUs no running job holds and no ended job's process
 *       still occupies; only admins see every job, so for others it is "?".
 *   gpuorch drain NODE...    the node keeps its running work, gets nothing new
 *   gpuorch resume NODE...   it takes work again
 *   gpuorch nodes delete NODE...   the node's record goes (refused while an
 *       attempt holds its GPUs): a machine registered again under another name
 *
 * Each returns an exit code as cli.h says; argv[0] is the command's name.
 */
#ifndef GPUORCH_CLI_NODES_H
#define GPUORCH_CLI_NODES_H

int nodes_list_command(int argc, char **argv);
int nodes_drain_command(int argc, char **argv);
int nodes_resume_command(int argc, char **argv);

#endif

/*
 * server.h - `gpuorch server`, the controller: durable job store, REST API,
 * auth and (next) the scheduling loop. See docs/api.md.
 */
#ifndef GPUORCH_SERVER_SERVER_H
#define GPUORCH_SERVER_SERVER_H

/* Runs the controller until SIGINT or SIGTERM. argv[0] is "server". Returns
 * the exit status: 0 after a clean stop, 1 when it could not start, 2 for a
 * usage error (a message names the flag). */
int server_command(int argc, char **argv);

#endif

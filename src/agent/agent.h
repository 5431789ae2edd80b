/*
 * agent.h - `gpuorch agent`: the node agent.
 *
 * It registers the node's GPUs with the controller (join token), sends a
 * heartbeat with a sample of every GPU each --sample-interval, long-polls the
 * node's assignments and turns them into attempts (attempts.h): launched at
 * most once under `gpuorch shim` by the privileged half (priv.h), as the
 * job's user, in a cgroup where cgroup v2 is writable; stopped with SIGTERM
 * then SIGKILL; every outcome reported. Cut off from the controllers for the
 * fence lease, it stops them all (fence.h). Its log server (logsrv.h) gives
 * the controller the attempts' stdout and stderr. `gpuorch agent --probe` prints
 * what NVML reports and exits. See docs/agent.md.
 */
#ifndef GPUORCH_AGENT_AGENT_H
#define GPUORCH_AGENT_AGENT_H

/* The `gpuorch agent` command: 0 stopped by SIGTERM/SIGINT, 1 could not
 * start, 2 usage error. */
int agent_command(int argc, char **argv);

#endif

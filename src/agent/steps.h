/*
 * steps.h - the node agent's step server: the tasks of a job step
 * (`gpuorch run` inside an allocation, Slurm's srun), started on this node
 * for a client that presents the attempt's step credential, their output
 * streamed back to it.
 *
 *   POST /v1/steps/{job}/{attempt}     (on the log server's port)
 *   Authorization: Bearer STEP_KEY     the attempt's credential (proto_step)
 *   {"step": S, "argv": [...], "env": ["NAME=VALUE", ...], "workdir": P|null,
 *    "node_index": K, "nodes": N, "ntasks": T, "first_task": F,
 *    "local_tasks": L, "gpus_per_task": G, "master_addr": A, "master_port": P}
 *
 * starts tasks F..F+L-1 of the step's T on this node (the K-th of the
 * step's N), each through the privileged half (priv_step_spawn: as the
 * attempt's user, in its cgroup) with the client's environment and then
 * ours: GPUORCH_NODE, GPUORCH_STEP_ID, RANK, LOCAL_RANK, WORLD_SIZE,
 * LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, SLURM_PROCID, SLURM_LOCALID,
 * SLURM_NODEID, SLURM_NTASKS, SLURM_STEP_ID, and the GPUs: the attempt's
 * GPUs on this node, or with G > 0 task l's own G of them (l*G..l*G+G-1).
 * The answer is 200 application/octet-stream, streamed: util/stepframe.h
 * frames of every task (its rank in the head), each task's EXIT or ERROR
 * last, then the end of the body. A client that leaves ends the tasks
 * (SIGTERM, then SIGKILL: priv.h's PRIV_STEP_GRACE_MS); so does the
 * attempt's end here (steps_attempt_remove).
 *
 * Errors before the stream: 401 (no or a wrong credential, compared in
 * constant time), 404 (no such attempt running here), 400 (a field, named;
 * tasks that need more GPUs than the node holds), 503 (too many steps).
 *
 * An interactive step ("pty": true, "session": S, "rows": R, "cols": C;
 * one task: ntasks and local_tasks 1) runs its task on a pseudo-terminal
 * (priv_step_spawn's pty): the stream carries what the terminal shows
 * (STDOUT frames) and the EXIT. Its input comes by requests of its own,
 * each a few frames, in order, on one connection:
 *
 *   POST /v1/steps/{job}/{attempt}/input/{S}   the same credential
 *   body: util/stepframe.h frames, STDIN, WINSIZE or HANGUP only
 *
 * answered 204 once queued for the task (401 as above; 404 no such
 * interactive step running; 400 a frame that is not whole or not input;
 * 503 more than STEPS_IN_MAX bytes wait for the task: send it again
 * later). S, 16 to 64 letters and digits the client chose, names the step
 * among the attempt's (409 for one in use).
 *
 * Threads: the handler runs on the log server's polling thread and never
 * blocks; each step has a thread of its own that starts the tasks and
 * relays their frames. The registry has its own lock.
 */
#ifndef GPUORCH_AGENT_STEPS_H
#define GPUORCH_AGENT_STEPS_H

#include <stddef.h>
#include <stdint.h>

#include "agent/launch.h"
#include "agent/priv.h"
#include "http/http.h"
#include "proto/proto.h"

#define STEPS_MAX       256                   /* steps at once on one node */
#define STEPS_TASKS_MAX 256                   /* tasks of one step on one node */
#define STEPS_BUF_MAX   ((size_t)1024 * 1024) /* output held for a slow client, per step */
#define STEPS_IN_MAX    ((size_t)256 * 1024)  /* input held for a slow task, per step */

struct steps_config {
    const char *node;  /* this node's name (copied) */
    struct priv *priv; /* borrowed */
    bool as_root;      /* the agent runs as root (launch.h's launch_config) */
    void (*log)(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
};

struct steps;

/* 0 and *ret (caller frees with steps_free), or GPO_ENOMEM. */
int steps_new(const struct steps_config *cfg, struct steps **ret);

/* Ends every step's tasks, waits for the steps' threads, and frees s; NULL
 * is fine. Call it after the log server that serves its route is gone. */
void steps_free(struct steps *s);

/* The log server's rows for the step route and the input route (their arg
 * is s). */
struct http_route steps_route(struct steps *s);
struct http_route steps_input_route(struct steps *s);

/* An attempt that runs here (a borrowed run assignment): its credential,
 * GPUs and gang, copied; a later call for the same attempt replaces them.
 * Nothing happens for an assignment without a step credential. 0 or
 * GPO_ENOMEM. */
int steps_attempt_add(struct steps *s, const struct proto_attempt *a);

/* The attempt ended here: its steps' tasks end, and no new step starts.
 * s NULL: nothing (as for steps_attempt_add). */
void steps_attempt_remove(struct steps *s, uint64_t job, uint32_t attempt);

/*
 * For an attempt's launch (l: launch_prepare's, for run assignment a):
 * registers the attempt with s (steps_attempt_add), adds the step
 * variables (steps_launch_env) and, on a first_node job's rank other than
 * 0, makes the launch a hold (steps_launch_hold). s NULL: nothing. 0, or
 * GPO_ENOMEM with l released and err set.
 */
int steps_launch(struct steps *s, const struct proto_attempt *a, struct launch *l, char *err,
                 size_t errlen);

/*
 * For launch: what rank 0's program needs to run steps, added to l's
 * environment (and l->req): GPUORCH_STEP_KEY, GPUORCH_STEP_ADDRS (each
 * rank's step server, "host:port" in rank order), and the job's task shape
 * GPUORCH_NTASKS, GPUORCH_NTASKS_PER_NODE, GPUORCH_GPUS_PER_TASK where the
 * job gives them. Nothing for an assignment without a step credential.
 * 0 or GPO_ENOMEM.
 */
int steps_launch_env(const struct proto_attempt *a, struct launch *l);

/*
 * For launch: a first_node job's rank other than 0 runs no program; it
 * holds its part of the allocation (its GPUs, its cgroup, for the steps it
 * serves) with a process that waits until it is killed, its output in the
 * attempt's directory. Replaces l's command. 0 or GPO_ENOMEM.
 */
int steps_launch_hold(struct launch *l);

#endif

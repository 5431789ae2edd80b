/*
 * runpty.h - the client's half of an interactive job step (`gpuorch run
 * --pty`, and the shell of `gpuorch alloc`): the task runs on a
 * pseudo-terminal on its node (agent/steps.h, "An interactive step"); this
 * terminal is put in raw mode, what the task's terminal shows is written
 * here, and what is typed here (and each window size change, SIGWINCH) goes
 * to the task. A stdin that is no terminal is typed in as it comes, and its
 * end is the terminal's end-of-file character; a terminal's end (a hangup
 * here) hangs the task's terminal up.
 *
 * The output comes on the step's stream (POST /v1/steps/JOB/ATTEMPT, one
 * thread); the input goes by POST /v1/steps/JOB/ATTEMPT/input/SESSION, a
 * few frames at a time, in order, from the calling thread: a second
 * request rather than an upgraded connection, so that both directions stay
 * plain HTTP over util/httpc (libcurl has no generic Upgrade), and an input
 * request waits for no output.
 */
#ifndef GPUORCH_CLI_RUNPTY_H
#define GPUORCH_CLI_RUNPTY_H

#include <signal.h>
#include <stdint.h>

#include <jansson.h>

struct runpty {
    const char *cmd;  /* "run" or "alloc", for messages */
    const char *addr; /* the node's step server, "host:port" */
    const char *node; /* its name, for messages */
    uint64_t job;
    uint32_t attempt;
    const char *key;                   /* the step credential */
    const volatile sig_atomic_t *stop; /* set by the caller's signal handlers */
};

/*
 * Runs the step whose request is body (borrowed; this adds "pty",
 * "session", "rows" and "cols") and waits for its task's end. The terminal
 * (when stdin is one) is in raw mode meanwhile, and restored on every
 * return. SIGWINCH is caught for the call. Returns the exit status for the
 * program: the task's (128+N for a signal N), 1 after printing why the task
 * did not start or was lost, or 128+N when *stop became N.
 */
int runpty_run(const struct runpty *p, json_t *body);

#endif

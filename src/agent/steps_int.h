/*
 * steps_int.h - (private to steps*.c) one step on this node, between the
 * handler (steps.c) that accepts it and the thread (steps_run.c) that runs
 * its tasks and relays their frames.
 */
#ifndef GPUORCH_AGENT_STEPS_INT_H
#define GPUORCH_AGENT_STEPS_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/steps.h"

/* An attempt that runs here, as steps see it. */
struct steps_attempt {
    uint64_t job;
    uint32_t attempt;
    char key[PROTO_STEP_KEY_LEN + 1];
    char **uuids; /* its GPUs on this node, in the assignment's order */
    size_t nuuids;
    uint32_t milli;         /* the share of one GPU, 1000 for whole GPUs */
    struct proto_attempt a; /* a copy of its assignment (the Slurm variables) */
};

/* What a step's request asks of this node (steps.h). */
struct steps_request {
    uint32_t step;
    char **argv;
    size_t argc;
    char **env;
    size_t nenv;
    char *workdir; /* NULL: the user's home */
    uint32_t node_index, nodes, ntasks, first_task, local_tasks, gpus_per_task;
    char *master_addr;
    uint32_t master_port;
    bool pty;      /* one task on a pseudo-terminal */
    char *session; /* a pty step's input name (steps.h); NULL otherwise */
    uint32_t rows, cols;
};

struct step {
    struct steps *owner;
    uint64_t job;
    uint32_t attempt;
    struct steps_request req;
    char **uuids; /* a copy of the attempt's */
    size_t nuuids;
    uint32_t milli;
    struct proto_attempt att; /* a copy of the attempt's assignment */
    char node[256];
    struct priv *priv;
    bool as_root;

    pthread_mutex_t mu;
    pthread_cond_t cond; /* room in out, or cancelled */
    unsigned refs;       /* the stream and the thread */
    bool cancelled;      /* the client left, or the attempt ended */
    bool done;           /* every task's last frame is in out */
    int wake_fd;         /* an eventfd: cancelled */
    uint8_t *out;        /* frames not yet read by the stream */
    size_t out_len, out_cap;
    uint8_t *in; /* a pty step's input frames not yet written to its keeper */
    size_t in_len, in_cap;
    struct http_stream *stream; /* the thread's handle for wakes */
};

/* The step's thread (steps_run.c): starts the tasks, relays, ends. */
void *steps_run(void *arg);

/* Appends a frame to st->out (under st->mu, which the caller holds):
 * false when out of memory. */
bool steps_out_frame(struct step *st, int type, uint32_t task, const void *data, size_t n);

/* Appends input frames (whole, checked) to st->in, under st->mu which the
 * caller holds: false when out of memory or over STEPS_IN_MAX. */
bool steps_in_frames(struct step *st, const void *data, size_t n);

/* Drops one reference; the last frees the step and unlists it. */
void steps_unref(struct step *st);

void steps_request_release(struct steps_request *r);

#endif

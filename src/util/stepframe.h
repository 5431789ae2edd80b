/*
 * stepframe.h - the frames of a job step's output, as the agent's step
 * server sends them to `gpuorch run` (the body of POST /v1/steps/JOB/ATTEMPT,
 * docs/agent.md) and as a task's keeper sends them to the agent.
 *
 * The same frames go the other way for an interactive step (--pty): the
 * client's input, sent to the agent (POST /v1/steps/JOB/ATTEMPT/input/S),
 * and from the agent to the task's keeper.
 *
 * A frame is a 9-byte head and its data:
 *   byte 0     type (enum stepframe_type)
 *   bytes 1-4  the task (its global rank, SLURM_PROCID), big-endian; a
 *              keeper, which serves one task, writes 0 and the agent puts
 *              the task's rank in
 *   bytes 5-8  the data's length, big-endian, at most STEPFRAME_DATA_MAX
 * STDOUT and STDERR carry the task's bytes as it wrote them; EXIT carries
 * two big-endian int32: the exit status (0..255, or -1 when it was
 * killed by a signal) and the signal (0 when none); ERROR carries one line
 * of text: the task could not be started, or was lost (it then has no EXIT).
 * Towards the task: STDIN carries bytes for its terminal (or its stdin);
 * WINSIZE two big-endian uint16, the terminal's rows and columns; HANGUP
 * (no data) says the client's input ended: a terminal's task gets SIGHUP
 * as from a closed terminal, a pipe's its end of file.
 * Pure: no I/O.
 */
#ifndef GPUORCH_UTIL_STEPFRAME_H
#define GPUORCH_UTIL_STEPFRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STEPFRAME_HEAD     9
#define STEPFRAME_DATA_MAX 65536u

enum stepframe_type {
    STEPFRAME_STDOUT = 1,
    STEPFRAME_STDERR = 2,
    STEPFRAME_EXIT = 3,
    STEPFRAME_ERROR = 4,
    STEPFRAME_STDIN = 5,
    STEPFRAME_WINSIZE = 6,
    STEPFRAME_HANGUP = 7,
};

/* The frames a client may send towards a task (STDIN, WINSIZE, HANGUP). */
bool stepframe_is_input(enum stepframe_type type);

struct stepframe {
    enum stepframe_type type;
    uint32_t task;
    uint32_t len; /* bytes of data that follow the head */
};

/* Writes f's head into out. */
void stepframe_head(const struct stepframe *f, uint8_t out[STEPFRAME_HEAD]);

/* Reads a head: 0 and *ret, or GPO_EINVAL (an unknown type, a length over
 * STEPFRAME_DATA_MAX, an EXIT whose length is not 8, a WINSIZE whose length
 * is not 4, a HANGUP with data). */
int stepframe_parse(const uint8_t in[STEPFRAME_HEAD], struct stepframe *ret);

/* An EXIT frame's data from status/signal, and back. */
void stepframe_exit_data(int32_t status, int32_t signal, uint8_t out[8]);
void stepframe_exit_read(const uint8_t in[8], int32_t *ret_status, int32_t *ret_signal);

/* A WINSIZE frame's data from rows/cols, and back. */
void stepframe_winsize_data(uint16_t rows, uint16_t cols, uint8_t out[4]);
void stepframe_winsize_read(const uint8_t in[4], uint16_t *ret_rows, uint16_t *ret_cols);

/* A byte stream cut into frames: what a reader was fed and has not yet
 * made a whole frame of. Embedded in the caller's struct, zeroed to start. */
struct stepframe_reader {
    uint8_t buf[STEPFRAME_HEAD + STEPFRAME_DATA_MAX];
    size_t len;
};

/* A whole frame, its data borrowed for the call: 0 to go on, else the code
 * stepframe_reader_feed returns. */
typedef int (*stepframe_frame_fn)(void *ctx, const struct stepframe *f, const uint8_t *data);

/*
 * Feeds len bytes of the stream to r: on_frame(ctx, f, data) for each frame
 * they complete, in order; a partial frame is kept for the next call.
 * Returns 0; GPO_EINVAL for a head that does not parse (the stream is then
 * broken: feed it no more); or what on_frame returned, when not 0 (the
 * rest of data is dropped).
 */
int stepframe_reader_feed(struct stepframe_reader *r, const void *data, size_t len,
                          stepframe_frame_fn on_frame, void *ctx);

#endif

/*
 * stepframe.h - the frames of a job step's output, as the agent's step
 * server sends them to `gpuorch run` (the body of POST /v1/steps/JOB/ATTEMPT,
 * docs/agent.md) and as a task's keeper sends them to the agent.
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
};

struct stepframe {
    enum stepframe_type type;
    uint32_t task;
    uint32_t len; /* bytes of data that follow the head */
};

/* Writes f's head into out. */
void stepframe_head(const struct stepframe *f, uint8_t out[STEPFRAME_HEAD]);

/* Reads a head: 0 and *ret, or GPO_EINVAL (an unknown type, a length over
 * STEPFRAME_DATA_MAX, an EXIT whose length is not 8). */
int stepframe_parse(const uint8_t in[STEPFRAME_HEAD], struct stepframe *ret);

/* An EXIT frame's data from status/signal, and back. */
void stepframe_exit_data(int32_t status, int32_t signal, uint8_t out[8]);
void stepframe_exit_read(const uint8_t in[8], int32_t *ret_status, int32_t *ret_signal);

#endif

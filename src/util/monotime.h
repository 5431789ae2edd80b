/*
 * monotime.h - the monotonic clock in milliseconds (CLOCK_MONOTONIC), for
 * deadlines and durations in the daemons: leases, fences, probes, timeouts.
 * Wall time is the caller's own business (the controller's srv_clock).
 */
#ifndef GPUORCH_UTIL_MONOTIME_H
#define GPUORCH_UTIL_MONOTIME_H

#include <stdint.h>

/* Milliseconds of CLOCK_MONOTONIC: only differences mean anything. */
int64_t monotime_ms(void);

#endif

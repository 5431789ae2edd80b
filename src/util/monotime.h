/*
 * monotime.h - the monotonic clock in milliseconds (CLOCK_MONOTONIC), for
 * deadlines and durations in the daemons: leases, fences, probes, timeouts,
 * and the boot it counts from (a time kept in a file means nothing in
 * another boot). Wall time is the caller's own business (the controller's
 * srv_clock). libc only: the shim links it too.
 */
#ifndef GPUORCH_UTIL_MONOTIME_H
#define GPUORCH_UTIL_MONOTIME_H

#include <stdint.h>

/* Milliseconds of CLOCK_MONOTONIC: only differences mean anything. */
int64_t monotime_ms(void);

/* The longest boot id kept (the kernel's is 36 characters). */
#define MONOTIME_BOOT_ID_MAX 64
/* This boot's id (/proc/sys/kernel/random/boot_id) into buf, at most
 * MONOTIME_BOOT_ID_MAX characters and its NUL; "" when it cannot be read. */
void monotime_boot_id(char buf[MONOTIME_BOOT_ID_MAX + 1]);

#endif

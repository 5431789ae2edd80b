/*
 * log.h - one line of a daemon's log on stderr: "TIME gpuorch WHO: TEXT",
 * TIME in RFC 3339 (UTC, milliseconds), TEXT cut at 2 KiB. The agent and
 * the router write their logs through it.
 *
 * Thread-safe: each line is formatted whole and written with one fprintf.
 */
#ifndef GPUORCH_UTIL_LOG_H
#define GPUORCH_UTIL_LOG_H

#include <stdarg.h>

/* who: "agent", "router", ... (borrowed). */
void log_vline(const char *who, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

#endif

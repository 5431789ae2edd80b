/*
 * log.c - a daemon's log lines (log.h).
 */
#include "util/log.h"

#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "util/timefmt.h"
#include "base/banned.h"

void log_vline(const char *who, const char *fmt, va_list ap)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char at[TIMEFMT_RFC3339_LEN];
    timefmt_rfc3339((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, at, sizeof(at));
    char line[2048];
    vsnprintf(line, sizeof(line), fmt, ap);
    fprintf(stderr, "%s gpuorch %s: %s\n", at, who, line);
}

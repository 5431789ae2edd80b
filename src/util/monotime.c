/*
 * monotime.c - the monotonic clock in milliseconds (monotime.h).
 */
#include <time.h>

#include "util/monotime.h"
#include "base/banned.h"

int64_t monotime_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

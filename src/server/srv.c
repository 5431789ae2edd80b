/*
 * srv.c - the server object's clock (srv.h).
 */
#include <time.h>

#include "server/srv.h"
#include "base/banned.h"

int64_t srv_clock_realtime_ms(void *ctx)
{
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t srv_clock_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t srv_now_ms(const struct server *s)
{
    return s->clock.now_ms(s->clock.ctx);
}

int64_t srv_mono_ns(const struct server *s)
{
    return s->clock.mono_ns();
}

int64_t srv_mono_ms(const struct server *s)
{
    return s->clock.mono_ns() / 1000000;
}

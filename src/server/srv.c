/*
 * srv.c - the server object's clock, and its subsystems wired up (srv.h).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "server/api/api.h"
#include "server/sched/sched.h"
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

int srv_init(struct server *s)
{
    if (!s->clock.now_ms)
        s->clock.now_ms = srv_clock_realtime_ms;
    if (!s->clock.mono_ns)
        s->clock.mono_ns = srv_clock_monotonic_ns;
    pthread_mutex_init(&s->lock, NULL);
    cluster_init(&s->cluster);
    jobs_init(&s->jobs);
    nodes_init(&s->nodes, &s->lock, api_node_answer, s);
    cost_init(&s->cost, &s->lock, &s->jobs, &s->cluster, s->store);
    config_init(&s->config, &s->cluster, &s->jobs, &s->cost, &s->nodes, s->store);
    s->sched = calloc(1, sizeof(*s->sched));
    if (!s->sched || sched_init(s->sched, s->cfg.pass_interval_ms, s->cfg.node_timeout_ms) != 0) {
        free(s->sched);
        s->sched = NULL;
        return GPO_ENOMEM;
    }
    return 0;
}

void srv_release(struct server *s)
{
    if (s->sched) {
        sched_release(s->sched);
        free(s->sched);
        s->sched = NULL;
    }
    monitor_release(&s->monitor);
    cost_release(&s->cost);
    jobs_release(&s->jobs);
    nodes_release(&s->nodes);
    cluster_release(&s->cluster);
    pthread_mutex_destroy(&s->lock);
}

/*
 * control.c - the router's control thread: the long-poll of the routing
 * table and the report every second (router.h). Two libcurl clients, one
 * per direction, each used by its own thread: the poll may wait 30 s, and
 * the reports must not wait behind it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "router/router.h"
#include "util/httpc.h"
#include "base/banned.h"

#define POLL_WAIT_MS   30000
#define BACKOFF_MIN_MS 250
#define BACKOFF_MAX_MS 10000

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Publishes a table built from the controller's answer and wakes the
 * workers. */
static int table_take(struct router *r, const char *body, size_t len, int64_t *rev)
{
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) {
        router_log("routes: not JSON: %s", je.text);
        return GPO_EINVAL;
    }
    struct proto_routes m;
    char err[512];
    int rc = proto_routes_decode(o, &m, err, sizeof(err));
    json_decref(o);
    if (rc) {
        router_log("routes: %s", err);
        return rc;
    }
    struct rt_table *old = router_table(r);
    struct rt_table *t = NULL;
    rc = rt_table_build(&m, old, &t);
    proto_routes_release(&m);
    rt_table_unref(old);
    if (rc) {
        router_log("routes: %s", gpo_strerror(rc));
        return rc;
    }
    pthread_mutex_lock(&r->lock);
    old = r->table;
    r->table = t;
    r->have_table = true;
    pthread_mutex_unlock(&r->lock);
    rt_table_unref(old);
    *rev = t->rev;
    for (size_t k = 0; k < r->nworkers; k++)
        rt_worker_wake(r->workers[k]);
    return 0;
}

static void *poll_main(void *arg)
{
    struct router *r = arg;
    struct httpc *c = r->poll_client;
    char err[1024];
    int64_t rev = -1, backoff = BACKOFF_MIN_MS;
    bool away = false;
    while (!atomic_load(&r->stop)) {
        char path[128];
        if (rev < 0)
            snprintf(path, sizeof(path), "/v1/router/routes");
        else
            snprintf(path, sizeof(path), "/v1/router/routes?since=%" PRId64 "&wait_ms=%d", rev,
                     POLL_WAIT_MS);
        struct httpc_response ans = {0};
        int rc =
            httpc_request(c, "GET", path, NULL, 0, POLL_WAIT_MS + 15000, &ans, err, sizeof(err));
        if (!rc && ans.status != 200) {
            snprintf(err, sizeof(err), "GET %s%s: status %ld", httpc_url(c), path, ans.status);
            rc = GPO_EAPI;
        }
        if (!rc)
            rc = table_take(r, ans.body, ans.len, &rev);
        httpc_response_release(&ans);
        if (!rc) {
            if (away)
                router_log("controller back: routing with table %" PRId64, rev);
            away = false;
            backoff = BACKOFF_MIN_MS;
            continue;
        }
        if (!away)
            router_log("%s (routing on the last table; retrying)", err);
        away = true;
        rev = -1; /* a restarted controller may count again from 1: ask for its table at once */
        sleep_ms(backoff);
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    return NULL;
}

/* ---- the report ---- */

struct report_build {
    struct proto_load_service *services;
    struct proto_load_replica *replicas;
};

/* The counts of the interval, taken (the interval's counters start again). */
static int report_fill(struct router *r, const struct rt_table *t, int64_t interval_us,
                       struct proto_router_report *m, struct report_build *b)
{
    size_t neps = 0;
    for (size_t i = 0; i < t->nservices; i++)
        neps += t->services[i].neps;
    b->services = calloc(t->nservices + 1, sizeof(*b->services));
    b->replicas = calloc(neps + 1, sizeof(*b->replicas));
    if (!b->services || !b->replicas)
        return GPO_ENOMEM;
    size_t at = 0;
    for (size_t i = 0; i < t->nservices; i++) {
        const struct rt_service *s = &t->services[i];
        struct rt_stats *st = s->stats;
        rt_stats_load(st, &st->inflight, 0); /* closes the integral at now */
        unsigned long long load = atomic_exchange(&st->load_us, 0);
        struct proto_load_service *l = &b->services[i];
        *l = (struct proto_load_service){
            .name = s->name,
            .concurrency_milli =
                interval_us > 0 ? (int64_t)(load * 1000 / (unsigned long long)interval_us) : 0,
            .inflight = atomic_load(&st->inflight),
            .queued = atomic_load(&st->queued),
            .requests = atomic_exchange(&st->requests, 0),
            .replicas = &b->replicas[at],
            .has_latency = true,
        };
        for (size_t k = 0; k <= RT_HIST_BOUNDS; k++) {
            unsigned long long now = atomic_load(&st->total.counts[k]);
            l->latency[k] = (uint32_t)(now - st->total_reported[k]);
            st->total_reported[k] = now;
        }
        for (size_t k = 0; k < s->neps; k++, at++, l->nreplicas++) {
            struct rt_endpoint *ep = s->eps[k].ep;
            b->replicas[at] = (struct proto_load_replica){
                .job = ep->job,
                .attempt = ep->attempt,
                .inflight = atomic_load(&ep->inflight),
                .requests = atomic_exchange(&ep->requests, 0),
            };
        }
    }
    *m =
        (struct proto_router_report){.router = r->name,
                                     .interval_ms = interval_us / 1000 > 0 ? interval_us / 1000 : 1,
                                     .services = b->services,
                                     .nservices = t->nservices};
    if (m->interval_ms > 60000)
        m->interval_ms = 60000;
    return 0;
}

static void report_send(struct router *r, struct httpc *c, int64_t interval_us, bool *failing)
{
    struct rt_table *t = router_table(r);
    if (!t)
        return;
    struct proto_router_report m;
    struct report_build b = {0};
    json_t *o = NULL;
    if (!report_fill(r, t, interval_us, &m, &b) && proto_router_report_encode(&m, &o) != 0)
        o = NULL;
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    free(b.services);
    free(b.replicas);
    rt_table_unref(t);
    if (!text)
        return;
    struct httpc_response ans = {0};
    char err[1024];
    int rc = httpc_request(c, "POST", "/v1/router/report", text, strlen(text), 5000, &ans, err,
                           sizeof(err));
    free(text);
    if (!rc && ans.status >= 300) {
        snprintf(err, sizeof(err), "POST %s/v1/router/report: status %ld", httpc_url(c),
                 ans.status);
        rc = GPO_EAPI;
    }
    httpc_response_release(&ans);
    if (rc && !*failing)
        router_log("%s", err);
    *failing = rc != 0;
}

static void *report_main(void *arg)
{
    struct router *r = arg;
    struct httpc *c = r->report_client;
    bool failing = false;
    int64_t last = rt_now_us();
    while (!atomic_load(&r->stop)) {
        pthread_mutex_lock(&r->wake_lock);
        int64_t due = last + 1000000;
        while (!atomic_load(&r->report_now) && !atomic_load(&r->stop) && rt_now_us() < due) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            int64_t left = due - rt_now_us();
            ts.tv_sec += left / 1000000;
            ts.tv_nsec += (left % 1000000) * 1000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&r->wake, &r->wake_lock, &ts);
        }
        atomic_store(&r->report_now, false);
        pthread_mutex_unlock(&r->wake_lock);
        int64_t now = rt_now_us();
        report_send(r, c, now - last, &failing);
        last = now;
    }
    return NULL;
}

void rt_report_soon(struct router *r)
{
    pthread_mutex_lock(&r->wake_lock);
    atomic_store(&r->report_now, true);
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->wake_lock);
}

int rt_control_start(struct router *r, pthread_t ret[2], char *err, size_t errlen)
{
    if (httpc_new(r->a.server, r->token, &r->poll_client, err, errlen) ||
        httpc_new(r->a.server, r->token, &r->report_client, err, errlen))
        return GPO_EINVAL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->wake, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&ret[0], NULL, poll_main, r);
    if (!rc && (rc = pthread_create(&ret[1], NULL, report_main, r)) != 0) {
        atomic_store(&r->stop, true);
        pthread_join(ret[0], NULL);
    }
    if (rc) {
        snprintf(err, errlen, "starting the control threads: %s", strerror(rc));
        return -rc;
    }
    return 0;
}

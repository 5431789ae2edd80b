/*
 * lead.c - the holder id, lead_try, the lease thread and the step-down
 * (lead.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "server/lead/lead.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define NS_PER_MS INT64_C(1000000)

int lead_init(struct lead *l, const char *address, int64_t lease_ms, int64_t (*mono_ns)(void))
{
    memset(l, 0, sizeof(*l));
    if (strlen(address) > STORE_LEASE_ADDRESS_MAX || lease_ms < 1 || lease_ms > 3600000)
        return GPO_EINVAL;
    uint32_t rnd;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        return GPO_EIO;
    char host[64] = "";
    if (gethostname(host, sizeof(host) - 1) != 0 || !host[0])
        snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    snprintf(l->holder, sizeof(l->holder), "%s:%ld:%08" PRIx32, host, (long)getpid(), rnd);
    snprintf(l->address, sizeof(l->address), "%s", address);
    l->lease_ms = lease_ms;
    l->mono_ns = mono_ns;
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    return 0;
}

void lead_set_address(struct lead *l, const char *address)
{
    pthread_mutex_lock(&l->mu);
    snprintf(l->address, sizeof(l->address), "%s", address);
    pthread_mutex_unlock(&l->mu);
}

void lead_release(struct lead *l)
{
    if (!l || !l->mono_ns)
        return;
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
}

/* Leads until send_ns + the lease - the margin (no lapse on a store that is
 * not shared). */
static void lead_until(struct lead *l, int64_t send_ns)
{
    int64_t until = INT64_MAX;
    if (store_shared(l->store))
        until = send_ns + (l->lease_ms - LEAD_MARGIN_MS(l->lease_ms)) * NS_PER_MS;
    atomic_store(&l->until_ns, until);
}

int lead_try(struct lead *l, struct store *s, char *err, size_t errlen)
{
    struct store_lease got;
    char address[sizeof(l->address)];
    pthread_mutex_lock(&l->mu);
    snprintf(address, sizeof(address), "%s", l->address);
    pthread_mutex_unlock(&l->mu);
    int64_t sent = l->mono_ns();
    l->store = s;
    int rc = store_lease_acquire(s, l->holder, address, l->lease_ms, &got);
    pthread_mutex_lock(&l->mu);
    if (rc == 0) {
        atomic_store(&l->epoch, got.epoch);
        lead_until(l, sent);
        atomic_store(&l->leading, true);
        snprintf(l->leader, sizeof(l->leader), "%s", l->address);
        l->leader_epoch = got.epoch;
        l->leader_until_ns = INT64_MAX;
    } else if (rc == GPO_EBUSY) {
        snprintf(l->leader, sizeof(l->leader), "%s", got.address);
        l->leader_epoch = got.epoch;
        int64_t left = got.remaining_ms > 0 ? got.remaining_ms : 0;
        l->leader_until_ns = left > INT64_MAX / NS_PER_MS / 2 ? INT64_MAX : sent + left * NS_PER_MS;
    }
    pthread_mutex_unlock(&l->mu);
    if (rc == GPO_EIO) {
        char why[512];
        store_last_error(s, why, sizeof(why));
        errbuf_set(err, errlen, rc, "taking the lease: %s", why[0] ? why : gpo_strerror(rc));
    } else if (rc && rc != GPO_EBUSY) {
        errbuf_set(err, errlen, rc, "taking the lease: %s", gpo_strerror(rc));
    }
    return rc;
}

bool lead_leading(struct lead *l)
{
    if (!l)
        return true;
    if (!atomic_load(&l->leading))
        return false;
    if (l->mono_ns() < atomic_load(&l->until_ns))
        return true;
    atomic_store(&l->leading, false); /* lapsed: a later renewal does not undo it */
    return false;
}

void lead_fenced(struct lead *l)
{
    if (l)
        atomic_store(&l->leading, false);
}

int64_t lead_wait_ms(struct lead *l)
{
    if (!lead_leading(l))
        return 0;
    int64_t until = atomic_load(&l->until_ns);
    if (until == INT64_MAX)
        return INT64_MAX;
    int64_t left = (until - l->mono_ns()) / NS_PER_MS;
    return left > 0 ? left : 0;
}

int64_t lead_epoch(struct lead *l)
{
    return l ? atomic_load(&l->epoch) : 0;
}

bool lead_leader(struct lead *l, char *url, size_t len, int64_t *ret_epoch)
{
    pthread_mutex_lock(&l->mu);
    bool live = l->leader[0] && l->mono_ns() < l->leader_until_ns;
    snprintf(url, len, "%s", live ? l->leader : "");
    *ret_epoch = live ? l->leader_epoch : 0;
    pthread_mutex_unlock(&l->mu);
    return live;
}

/* ---- the lease thread ------------------------------------------------- */

/* Sleeps until `at_ns` (monotonic) or quit; under mu. */
static void sleep_until(struct lead *l, int64_t at_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(at_ns / 1000000000), .tv_nsec = at_ns % 1000000000};
    while (!l->quit && l->mono_ns() < at_ns)
        if (pthread_cond_timedwait(&l->cv, &l->mu, &ts) == ETIMEDOUT)
            break;
}

static void *lease_main(void *arg)
{
    struct lead *l = arg;
    int64_t period = l->lease_ms / 5 * NS_PER_MS, last = l->mono_ns();
    bool said_io = false;
    pthread_mutex_lock(&l->mu);
    while (!l->quit && atomic_load(&l->leading)) {
        sleep_until(l, last + period);
        if (l->quit)
            break;
        pthread_mutex_unlock(&l->mu);
        int64_t sent = l->mono_ns();
        int rc = store_lease_renew(l->store, l->lease_ms);
        if (rc == 0 && sent < atomic_load(&l->until_ns)) {
            lead_until(l, sent);
            said_io = false;
        } else if (rc == 0) {
            lead_fenced(l); /* it lapsed before this renewal was sent */
        } else if (rc == GPO_EFENCED) {
            fprintf(stderr, "gpuorch server: the lease was taken by another controller\n");
            lead_fenced(l);
        } else if (!said_io) {
            char why[512];
            store_last_error(l->store, why, sizeof(why));
            fprintf(stderr, "gpuorch server: renewing the lease: %s\n",
                    why[0] ? why : gpo_strerror(rc));
            said_io = true; /* once per outage; the lapse says the rest */
        }
        last = sent;
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

int lead_start(struct lead *l)
{
    if (!store_shared(l->store))
        return 0;
    pthread_mutex_lock(&l->mu);
    l->quit = false;
    int rc = pthread_create(&l->thread, NULL, lease_main, l);
    l->started = rc == 0;
    pthread_mutex_unlock(&l->mu);
    return -rc;
}

void lead_stop(struct lead *l, bool release)
{
    pthread_mutex_lock(&l->mu);
    bool started = l->started;
    l->quit = true;
    l->started = false;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    if (started)
        pthread_join(l->thread, NULL);
    bool was = lead_leading(l);
    atomic_store(&l->leading, false);
    if (release && was && l->store && store_shared(l->store)) {
        int rc = store_lease_release(l->store);
        if (rc)
            fprintf(stderr, "gpuorch server: giving up the lease: %s\n", gpo_strerror(rc));
    }
    pthread_mutex_lock(&l->mu);
    l->leader[0] = '\0';
    l->leader_epoch = 0;
    l->leader_until_ns = 0;
    pthread_mutex_unlock(&l->mu);
    l->store = NULL;
}

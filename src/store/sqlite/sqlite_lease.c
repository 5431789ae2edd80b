/*
 * sqlite_lease.c - the lease on SQLite, a store of one controller: always
 * free to take and never expiring. Acquire bumps the epoch as
 * store_epoch_acquire does; renew checks that the epoch is still the one
 * this object took; release gives nothing up (nobody waits for it); get
 * reads the store's epoch, remaining_ms INT64_MAX.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/backend.h"
#include "store/sqlite/sqlite.h"
#include "store/store.h"
#include "base/banned.h"

/* The store's epoch (0 before the first acquire). */
static int epoch_read(struct store *base, int64_t *ret)
{
    char *v = NULL;
    int rc = sq_meta_get(base, STORE_META_EPOCH, &v);
    if (rc == GPO_ENOENT) {
        *ret = 0;
        return 0;
    }
    if (rc == 0)
        *ret = strtoll(v, NULL, 10);
    free(v);
    return rc;
}

int sq_lease_acquire(struct store *base, const char *holder, const char *address, int64_t ttl_ms,
                     struct store_lease *ret)
{
    (void)ttl_ms;
    struct sq *s = to_sq(base);
    int64_t epoch = 0;
    int rc = store_epoch_acquire(base, &epoch);
    if (rc)
        return rc;
    pthread_mutex_lock(&s->rlock);
    s->lease_epoch = epoch;
    snprintf(s->lease_holder, sizeof(s->lease_holder), "%s", holder);
    snprintf(s->lease_address, sizeof(s->lease_address), "%s", address);
    pthread_mutex_unlock(&s->rlock);
    if (ret) {
        *ret = (struct store_lease){.epoch = epoch, .remaining_ms = INT64_MAX};
        snprintf(ret->holder, sizeof(ret->holder), "%s", holder);
        snprintf(ret->address, sizeof(ret->address), "%s", address);
    }
    return 0;
}

static int64_t mine(struct sq *s)
{
    pthread_mutex_lock(&s->rlock);
    int64_t e = s->lease_epoch;
    pthread_mutex_unlock(&s->rlock);
    return e;
}

int sq_lease_renew(struct store *base, int64_t ttl_ms)
{
    (void)ttl_ms;
    int64_t ours = mine(to_sq(base)), cur = 0;
    if (ours == 0)
        return GPO_EFENCED;
    int rc = epoch_read(base, &cur);
    return rc ? rc : cur == ours ? 0 : GPO_EFENCED;
}

int sq_lease_release(struct store *base)
{
    return mine(to_sq(base)) ? 0 : GPO_EFENCED;
}

int sq_lease_get(struct store *base, struct store_lease *ret)
{
    struct sq *s = to_sq(base);
    int64_t epoch = 0;
    int rc = epoch_read(base, &epoch);
    if (rc)
        return rc;
    *ret = (struct store_lease){.epoch = epoch, .remaining_ms = INT64_MAX};
    pthread_mutex_lock(&s->rlock);
    snprintf(ret->holder, sizeof(ret->holder), "%s", s->lease_holder);
    snprintf(ret->address, sizeof(ret->address), "%s", s->lease_address);
    pthread_mutex_unlock(&s->rlock);
    return 0;
}

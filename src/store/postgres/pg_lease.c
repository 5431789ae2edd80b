/*
 * pg_lease.c - the leader's lease on PostgreSQL (store.h's leadership
 * section): one row (epoch, holder, address, expires_at) read and written
 * by the server's clock only, on a connection of its own under lease_lock,
 * synchronously, each call bounded by that connection's timeouts.
 *
 * Decisions the header leaves open:
 *  - Acquire locks the row (FOR UPDATE), so it waits for any group
 *    transaction holding the row's share lock: a change of leader and a
 *    commit are ordered. The epoch is bumped whenever the lease is taken
 *    anew, also by the holder that let it expire: commits it made after its
 *    expiry would otherwise pass as its successor's.
 *  - Renew and release match the row by epoch AND holder: a lease taken
 *    since by anyone, or by this holder after an expiry, is not ours.
 *  - A released lease keeps its epoch and holder; only its expiry moves
 *    to now. This object's commits still pass until another takes it.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "store/backend.h"
#include "store/postgres/pg.h"
#include "store/store.h"
#include "util/errbuf.h"
#include "util/monotime.h"
#include "base/banned.h"

#define LEASE_COLS                                                                                 \
    "epoch, holder, address, (extract(epoch FROM (expires_at - now())) * 1000)::bigint"

/* Records a lease call's failure for store_last_error; returns code. */
static int lease_fail(struct pgs *s, int code, const char *what, const char *msg)
{
    pthread_mutex_lock(&s->pool_lock);
    snprintf(s->rerr, sizeof(s->rerr), "lease %.32s: %.200s", what, msg);
    pthread_mutex_unlock(&s->pool_lock);
    return code;
}

/* The lease connection, ready (connecting is bounded by connect_timeout),
 * and *ret_deadline: when the call's statements must have answered.
 * lease_lock held. */
static int lease_conn(struct pgs *s, const char *what, int64_t *ret_deadline)
{
    char msg[256];
    int rc = pg_conn_ready(s, &s->lease, PG_ROLE_LEASE, msg, sizeof(msg));
    *ret_deadline = monotime_ms() + PG_CALL_TIMEOUT_MS;
    return rc ? lease_fail(s, GPO_EIO, what, msg) : 0;
}

/* The answer to what was sent on c, waited for until deadline_ms
 * (monotime_ms): its last result, or its first error; NULL when none came in
 * time (*ret_late) or the connection broke. The server's statement timeout
 * does not help against a server that stopped answering (frozen, or its
 * host gone with the kernel still acknowledging), this does. */
static PGresult *await_result(PGconn *c, int64_t deadline_ms, bool *ret_late)
{
    PGresult *last = NULL;
    for (;;) {
        while (!PQisBusy(c)) {
            PGresult *r = PQgetResult(c);
            if (!r)
                return last;
            if (last && PQresultStatus(last) == PGRES_FATAL_ERROR) {
                PQclear(r);
            } else {
                PQclear(last);
                last = r;
            }
        }
        int64_t left = deadline_ms - monotime_ms();
        if (left <= 0) {
            *ret_late = true;
            break;
        }
        struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
        int n = poll(&pfd, 1, (int)left);
        if ((n < 0 && errno != EINTR) || (n > 0 && !PQconsumeInput(c)))
            break;
    }
    PQclear(last);
    return NULL;
}

/* Runs sql with text parameters on the lease connection by deadline_ms;
 * *ret_res (may be NULL) gets its result. A connection that failed or
 * timed out is closed (remade at the next call): nothing of a half-run
 * transaction stays on it. */
static int lease_exec(struct pgs *s, const char *what, int64_t deadline_ms, const char *sql, int n,
                      const char *const *vals, PGresult **ret_res)
{
    PGconn *c = s->lease.c;
    /* Without parameters, through the simple protocol: sql may be several
     * statements (BEGIN and a SELECT in one round trip). */
    int sent = n ? PQsendQueryParams(c, sql, n, NULL, vals, NULL, NULL, 0) : PQsendQuery(c, sql);
    bool late = false;
    PGresult *r = sent ? await_result(c, deadline_ms, &late) : NULL;
    ExecStatusType st = PQresultStatus(r);
    if (!r || (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)) {
        char msg[256];
        if (late)
            snprintf(msg, sizeof(msg), "no answer from the server within %d ms",
                     PG_CALL_TIMEOUT_MS);
        else
            (void)pg_result_err(c, r, msg, sizeof(msg));
        PQclear(r);
        if (!r || PQtransactionStatus(c) != PQTRANS_IDLE) {
            PQfinish(c);
            s->lease = (struct pg_conn){0};
        }
        return lease_fail(s, GPO_EIO, what, msg);
    }
    if (ret_res)
        *ret_res = r;
    else
        PQclear(r);
    return 0;
}

/* The lease row's columns (LEASE_COLS) of res's first row into *ret. */
static void lease_decode(const PGresult *res, struct store_lease *ret)
{
    *ret = (struct store_lease){0};
    if (PQntuples(res) < 1)
        return;
    ret->epoch = pg_cell_int(res, 0, 0);
    snprintf(ret->holder, sizeof(ret->holder), "%s", PQgetvalue(res, 0, 1));
    snprintf(ret->address, sizeof(ret->address), "%s", PQgetvalue(res, 0, 2));
    ret->remaining_ms = pg_cell_int(res, 0, 3);
}

static int acquire_locked(struct pgs *s, const char *holder, const char *address, int64_t ttl_ms,
                          struct store_lease *ret)
{
    int64_t deadline = 0;
    int rc = lease_conn(s, "acquire", &deadline);
    PGresult *res = NULL;
    if (rc == 0)
        rc = lease_exec(s, "acquire", deadline,
                        "BEGIN; SELECT " LEASE_COLS " FROM lease WHERE id = 1 FOR UPDATE", 0, NULL,
                        &res);
    if (rc)
        return rc;
    struct store_lease cur;
    lease_decode(res, &cur);
    bool found = PQntuples(res) == 1;
    PQclear(res);
    if (!found) {
        (void)lease_exec(s, "acquire", deadline, "ROLLBACK", 0, NULL, NULL);
        return lease_fail(s, GPO_EIO, "acquire", "the lease row is missing");
    }
    bool live = cur.remaining_ms > 0;
    if (live && strcmp(cur.holder, holder) != 0) {
        (void)lease_exec(s, "acquire", deadline, "ROLLBACK", 0, NULL, NULL);
        *ret = cur;
        return GPO_EBUSY;
    }
    int64_t epoch = live ? cur.epoch : cur.epoch + 1;
    char ebuf[24], tbuf[24];
    const char *vals[] = {pg_int_text(epoch, ebuf, sizeof(ebuf)), holder, address,
                          pg_int_text(ttl_ms, tbuf, sizeof(tbuf))};
    rc = lease_exec(s, "acquire", deadline,
                    "WITH u AS (UPDATE lease SET epoch = $1, holder = $2, address = $3,"
                    " expires_at = now() + $4::bigint * interval '1 millisecond' WHERE id = 1"
                    " RETURNING epoch) INSERT INTO meta(key, value)"
                    " SELECT '" STORE_META_EPOCH "', epoch::text FROM u"
                    " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    4, vals, NULL);
    PGresult *c = NULL;
    if (rc == 0 && (rc = lease_exec(s, "acquire: commit", deadline, "COMMIT", 0, NULL, &c)) == 0) {
        /* A transaction the server had aborted answers COMMIT with ROLLBACK. */
        if (strcmp(PQcmdStatus(c), "COMMIT") != 0)
            rc = lease_fail(s, GPO_EIO, "acquire: commit", "rolled back");
        PQclear(c);
    }
    if (rc)
        return rc;
    snprintf(s->holder, sizeof(s->holder), "%s", holder);
    atomic_store(&s->epoch, epoch);
    *ret = (struct store_lease){.epoch = epoch, .remaining_ms = ttl_ms};
    snprintf(ret->holder, sizeof(ret->holder), "%s", holder);
    snprintf(ret->address, sizeof(ret->address), "%s", address);
    return 0;
}

int pg_lease_acquire(struct store *base, const char *holder, const char *address, int64_t ttl_ms,
                     struct store_lease *ret)
{
    struct pgs *s = to_pgs(base);
    struct store_lease out;
    pthread_mutex_lock(&s->lease_lock);
    int rc = acquire_locked(s, holder, address, ttl_ms, &out);
    pthread_mutex_unlock(&s->lease_lock);
    if ((rc == 0 || rc == GPO_EBUSY) && ret)
        *ret = out;
    return rc;
}

/* Moves our lease's expiry to now + ttl_ms (ttl_ms 0: releases it). */
static int extend(struct pgs *s, const char *what, int64_t ttl_ms)
{
    int64_t mine = atomic_load(&s->epoch);
    if (mine == 0)
        return lease_fail(s, GPO_EFENCED, what, "this store object never took the lease");
    pthread_mutex_lock(&s->lease_lock);
    int64_t deadline = 0;
    int rc = lease_conn(s, what, &deadline);
    PGresult *res = NULL;
    if (rc == 0) {
        char ebuf[24], tbuf[24];
        const char *vals[] = {pg_int_text(mine, ebuf, sizeof(ebuf)), s->holder,
                              pg_int_text(ttl_ms, tbuf, sizeof(tbuf))};
        rc = lease_exec(s, what, deadline,
                        "UPDATE lease SET expires_at = now() + $3::bigint * interval"
                        " '1 millisecond' WHERE id = 1 AND epoch = $1 AND holder = $2",
                        3, vals, &res);
    }
    if (rc == 0) {
        if (strtoll(PQcmdTuples(res), NULL, 10) == 0)
            rc = lease_fail(s, GPO_EFENCED, what, "another controller took the lease since");
        PQclear(res);
    }
    pthread_mutex_unlock(&s->lease_lock);
    return rc;
}

int pg_lease_renew(struct store *base, int64_t ttl_ms)
{
    return extend(to_pgs(base), "renew", ttl_ms);
}

int pg_lease_release(struct store *base)
{
    return extend(to_pgs(base), "release", 0);
}

int pg_lease_get(struct store *base, struct store_lease *ret)
{
    struct pgs *s = to_pgs(base);
    pthread_mutex_lock(&s->lease_lock);
    int64_t deadline = 0;
    int rc = lease_conn(s, "get", &deadline);
    PGresult *res = NULL;
    if (rc == 0)
        rc = lease_exec(s, "get", deadline, "SELECT " LEASE_COLS " FROM lease WHERE id = 1", 0,
                        NULL, &res);
    pthread_mutex_unlock(&s->lease_lock);
    if (rc)
        return rc;
    bool found = PQntuples(res) == 1;
    if (found)
        lease_decode(res, ret);
    PQclear(res);
    return found ? 0 : lease_fail(s, GPO_EIO, "get", "the lease row is missing");
}

/*
 * storetest.c - the store under test and the helpers of its cases
 * (storetest.h).
 */
#include "storetest.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <libpq-fe.h>

#include "store/store.h"
#include "tmptree.h"
#include "base/banned.h"

#define LEASE_TTL_MS 600000 /* a test's lease never expires on its own */

const char *storetest_pg_url(void)
{
    const char *u = getenv("GPUORCH_TEST_PG_URL");
    return u && *u ? u : NULL;
}

/* Drops every table of the test database: each test starts on an empty one. */
static int pg_reset(const char *url)
{
    PGconn *c = PQconnectdb(url);
    int rc = -1;
    if (PQstatus(c) == CONNECTION_OK) {
        PGresult *r = PQexec(c, "SET client_min_messages = warning;"
                                "DROP SCHEMA public CASCADE; CREATE SCHEMA public");
        rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : -1;
        if (rc)
            fprintf(stderr, "storetest: resetting the database: %s", PQresultErrorMessage(r));
        PQclear(r);
    } else {
        fprintf(stderr, "storetest: %s: %s", url, PQerrorMessage(c));
    }
    PQfinish(c);
    return rc;
}

int storetest_setup(void **state, const char *prefix)
{
    if (tmpdb_setup(state, prefix))
        return -1;
    const char *url = storetest_pg_url();
    return url ? pg_reset(url) : 0;
}

struct store *storetest_open(const struct tmpdb *e)
{
    struct store *s = NULL;
    char err[512] = "";
    const char *url = storetest_pg_url();
    int rc = url ? store_open_postgres(url, &s, err, sizeof(err))
                 : store_open_sqlite(e->path, &s, err, sizeof(err));
    if (rc)
        print_error("opening the store: %s (%s)\n", gpo_strerror(rc), err);
    assert_int_equal(rc, 0);
    char holder[64];
    snprintf(holder, sizeof(holder), "storetest-%ld", (long)getpid());
    struct store_lease l;
    rc = store_lease_acquire(s, holder, "http://127.0.0.1:1", LEASE_TTL_MS, &l);
    if (rc) {
        store_last_error(s, err, sizeof(err));
        print_error("store_lease_acquire: %s (%s)\n", gpo_strerror(rc), err);
    }
    assert_int_equal(rc, 0);
    assert_true(l.epoch > 0);
    return s;
}

void storetest_close(struct store *s)
{
    assert_int_equal(store_lease_release(s), 0);
    store_close(s);
}

int64_t storetest_new_epoch(struct store *s)
{
    assert_int_equal(store_lease_release(s), 0);
    char holder[64];
    snprintf(holder, sizeof(holder), "storetest-%ld", (long)getpid());
    struct store_lease l;
    assert_int_equal(store_lease_acquire(s, holder, "http://127.0.0.1:1", LEASE_TTL_MS, &l), 0);
    return l.epoch;
}

struct store_batch *storetest_job_batch(const char *team, const char *state, int64_t user,
                                        const char *key)
{
    char spec[128];
    snprintf(spec, sizeof(spec), "{\"team\":\"%s\",\"state\":\"%s\"}", team, state);
    struct store_job_insert j = STORE_JOB_INSERT_INIT;
    j.user_id = user;
    j.team = team;
    j.state = state;
    j.submit_ms = 1000;
    j.spec = spec;
    j.idempotency_key = key;
    struct store_batch *b = store_batch_new();
    assert_non_null(b);
    assert_int_equal(store_batch_job_insert(b, &j), 0);
    return b;
}

void storetest_commit_expect(struct store *s, struct store_batch *b, int want, int64_t *ret_ids,
                             size_t nids)
{
    char msg[256] = "";
    int rc = store_commit_wait(s, b, ret_ids, nids, msg, sizeof(msg));
    if (rc != want)
        print_error("commit: %s (%s), expected %s\n", gpo_strerror(rc), msg, gpo_strerror(want));
    assert_int_equal(rc, want);
}

void storetest_commit_ok(struct store *s, struct store_batch *b)
{
    storetest_commit_expect(s, b, 0, NULL, 0);
}

int64_t storetest_add_job(struct store *s, const char *team, const char *state, int64_t user)
{
    int64_t id = 0;
    storetest_commit_expect(s, storetest_job_batch(team, state, user, NULL), 0, &id, 1);
    assert_true(id > 0);
    return id;
}

size_t storetest_list_jobs(struct store *s, struct store_job **ret_jobs)
{
    struct store_job_filter f = STORE_JOB_FILTER_INIT;
    size_t n = 0;
    assert_int_equal(store_job_list(s, &f, ret_jobs, &n), 0);
    return n;
}

size_t storetest_count_jobs(struct store *s)
{
    struct store_job *jobs = NULL;
    size_t n = storetest_list_jobs(s, &jobs);
    store_jobs_free(jobs, n);
    return n;
}

void tally_init(struct tally *t)
{
    t->done = 0;
    assert_int_equal(pthread_mutex_init(&t->lock, NULL), 0);
    assert_int_equal(pthread_cond_init(&t->cond, NULL), 0);
}

void tally_destroy(struct tally *t)
{
    pthread_cond_destroy(&t->cond);
    pthread_mutex_destroy(&t->lock);
}

void tally_add(struct tally *t)
{
    pthread_mutex_lock(&t->lock);
    t->done++;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
}

void tally_wait(struct tally *t, int n)
{
    pthread_mutex_lock(&t->lock);
    while (t->done < n)
        pthread_cond_wait(&t->cond, &t->lock);
    pthread_mutex_unlock(&t->lock);
}

/*
 * storetest.h - what the store's tests share: the store under test, from
 * the backend the environment names (GPUORCH_TEST_PG_URL set: PostgreSQL,
 * the database emptied before each test; unset: SQLite in the test's
 * directory), and the helpers its cases use on either.
 *
 * tests/meson.build registers a backend-neutral test twice: as is (SQLite)
 * and under tests/tools/with_pg.py, which starts a PostgreSQL of its own
 * (tests/tools/pgserver.py), sets the URL and stops it by PID afterwards.
 */
#ifndef GPUORCH_TESTS_STORETEST_H
#define GPUORCH_TESTS_STORETEST_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "tmptree.h"

/* The PostgreSQL URL under test, or NULL: SQLite. */
const char *storetest_pg_url(void);

/* cmocka setup: tmpdb_setup, and on PostgreSQL every table dropped. */
int storetest_setup(void **state, const char *prefix);

/* Opens the store of the test (e->path on SQLite) and takes its lease as a
 * holder of its own, so that commits pass on a shared store. */
struct store *storetest_open(const struct tmpdb *e);
/* Gives the lease up (a reopen takes it anew at once) and closes s. */
void storetest_close(struct store *s);
/* A new leader epoch for s: its lease given up and taken again. */
int64_t storetest_new_epoch(struct store *s);

/* A job insert with the given fields; the spec names the team and state. */
struct store_batch *storetest_job_batch(const char *team, const char *state, int64_t user,
                                        const char *key);
/* Commits b (taken) and asserts its result is `want`; ret_ids[0, nids) get
 * what store_commit_wait gives them. */
void storetest_commit_expect(struct store *s, struct store_batch *b, int want, int64_t *ret_ids,
                             size_t nids);
void storetest_commit_ok(struct store *s, struct store_batch *b);
/* One job, committed; its id. */
int64_t storetest_add_job(struct store *s, const char *team, const char *state, int64_t user);
/* The first page of every job, by id; caller frees with store_jobs_free. */
size_t storetest_list_jobs(struct store *s, struct store_job **ret_jobs);
size_t storetest_count_jobs(struct store *s);

/* Waits for n completions of asynchronous commits. */
struct tally {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
};
void tally_init(struct tally *t);
void tally_destroy(struct tally *t);
void tally_add(struct tally *t);
void tally_wait(struct tally *t, int n);

#endif

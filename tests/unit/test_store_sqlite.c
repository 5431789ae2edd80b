/* test_store_sqlite.c - what is SQLite's own in the store: the file it
 * makes (WAL, full sync), migrations from v1 and v6 and refusal of newer
 * schemas, durability across kill -9, and the lease of a one-controller
 * store (always free, never expiring). What every backend does is in
 * test_store_common.c. Every test works in its own directory under /tmp. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "store/sqlite/schema.h"
#include "store/store.h"
#include "storetest.h"
#include "tmptree.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static int setup(void **state)
{
    return tmpdb_setup(state, "test_store_sqlite");
}

static struct store *open_store(const struct tmpdb *e)
{
    struct store *s = NULL;
    char err[256] = "";
    int rc = store_open_sqlite(e->path, &s, err, sizeof(err));
    if (rc)
        print_error("store_open_sqlite: %s (%s)\n", gpo_strerror(rc), err);
    assert_int_equal(rc, 0);
    return s;
}

static void expect_pragma(struct store *s, const char *name, const char *want)
{
    char got[64] = "";
    assert_int_equal(store_sqlite_pragma(s, name, got, sizeof(got)), 0);
    assert_string_equal(got, want);
}

/* Runs sql on a connection of its own to the file at path: its first row's
 * first column must read as `want`. */
static void expect_sql(const char *path, const char *sql, const char *want)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(q, 0), want);
    sqlite3_finalize(q);
    sqlite3_close(db);
}

/* Reads a whole small file into buf; returns its length. */
static size_t slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

/* ---- the file ------------------------------------------------------------- */

static void open_creates_wal_database_with_full_sync(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = open_store(e);
    struct stat st;
    assert_int_equal(stat(e->path, &st), 0);
    expect_pragma(s, "journal_mode", "wal");
    expect_pragma(s, "synchronous", "2"); /* FULL */
    expect_pragma(s, "foreign_keys", "1");
    expect_pragma(s, "busy_timeout", "5000");
    expect_pragma(s, "user_version", "7");
    storetest_add_job(s, "ml", "PENDING", 1);
    store_close(s);

    /* WAL is a property of the file: another connection sees it too. */
    expect_sql(e->path, "PRAGMA journal_mode", "wal");
}

static void v1_database_migrates_to_current(void **state)
{
    struct tmpdb *e = *state;
    sqlite3 *db = NULL;
    char err[256] = "";
    assert_int_equal(sqlite3_open(e->path, &db), SQLITE_OK);
    assert_int_equal(schema_migrate(db, 1, err, sizeof(err)), 0);
    assert_int_equal(sqlite3_exec(db,
                                  "INSERT INTO jobs(team, state, submit_ms, updated_ms, spec)"
                                  " VALUES ('ml', 'PENDING', 5, 5, '{}')",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    int64_t v = 0;
    assert_int_equal(schema_version_get(db, &v, err, sizeof(err)), 0);
    assert_int_equal(v, 1);
    sqlite3_close(db);

    struct store *s = open_store(e);
    expect_pragma(s, "user_version", "7");
    struct store_job j;
    assert_int_equal(store_job_get(s, 1, &j), 0);
    assert_string_equal(j.team, "ml");
    assert_int_equal(j.submit_ms, 5);
    store_job_release(&j);
    store_close(s);

    /* Migration 2's indexes are there. */
    expect_sql(e->path,
               "SELECT count(*) FROM sqlite_master WHERE type = 'index'"
               " AND name IN ('jobs_user', 'jobs_array', 'tokens_user', 'idempotency_job')",
               "4");
}

static void v6_database_migrates_and_keeps_services(void **state)
{
    struct tmpdb *e = *state;
    sqlite3 *db = NULL;
    char err[256] = "";
    assert_int_equal(sqlite3_open(e->path, &db), SQLITE_OK);
    assert_int_equal(schema_migrate(db, 6, err, sizeof(err)), 0);
    assert_int_equal(sqlite3_exec(db,
                                  "INSERT INTO teams(name, spec, updated_ms)"
                                  " VALUES ('ml', '{}', 5)",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    expect_sql(e->path, "SELECT count(*) FROM sqlite_master WHERE name = 'services'", "0");

    struct store *s = open_store(e);
    expect_pragma(s, "user_version", "7");
    struct store_batch *b = store_batch_new();
    assert_non_null(b);
    assert_int_equal(store_batch_config_put(b, STORE_CONFIG_SERVICES, "chat", "{\"max\":2}", 9), 0);
    storetest_commit_ok(s, b);
    struct store_config c;
    assert_int_equal(store_config_get(s, STORE_CONFIG_SERVICES, "chat", &c), 0);
    assert_string_equal(c.spec, "{\"max\":2}");
    assert_int_equal(c.updated_ms, 9);
    store_config_release(&c);
    assert_int_equal(store_config_get(s, STORE_CONFIG_TEAMS, "ml", &c), 0);
    store_config_release(&c);
    b = store_batch_new();
    assert_int_equal(store_batch_config_delete(b, STORE_CONFIG_SERVICES, "chat"), 0);
    storetest_commit_ok(s, b);
    assert_int_equal(store_config_get(s, STORE_CONFIG_SERVICES, "chat", &c), GPO_ENOENT);
    store_close(s);
}

static void newer_schema_is_refused_and_left_unchanged(void **state)
{
    struct tmpdb *e = *state;
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(e->path, &db), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db, "CREATE TABLE future(x); PRAGMA user_version = 99", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    static char before[1 << 16], after[1 << 16];
    size_t n1 = slurp(e->path, before, sizeof(before));

    struct store *s = NULL;
    char err[256] = "";
    assert_int_equal(store_open_sqlite(e->path, &s, err, sizeof(err)), GPO_ETOONEW);
    assert_null(s);
    assert_non_null(strstr(err, "99"));
    assert_non_null(strstr(err, "7"));
    size_t n2 = slurp(e->path, after, sizeof(after));
    assert_int_equal(n1, n2);
    assert_memory_equal(before, after, n1);
}

static void committed_job_survives_kill_9(void **state)
{
    struct tmpdb *e = *state;
    int ready[2], hold[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(hold), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        close(hold[1]);
        struct store *s = NULL;
        int64_t id = 0;
        if (store_open_sqlite(e->path, &s, NULL, 0) ||
            store_commit_wait(s, storetest_job_batch("ml", "PENDING", 1, "crash"), &id, 1, NULL, 0))
            _exit(1);
        char line[32];
        int n = snprintf(line, sizeof(line), "ok %lld\n", (long long)id);
        if (write(ready[1], line, (size_t)n) != n)
            _exit(1);
        char c;
        while (read(hold[0], &c, 1) != 0) /* until killed: the parent never writes */
            ;
        _exit(1);
    }
    close(ready[1]);
    close(hold[0]);
    char line[32] = "";
    ssize_t n = read(ready[0], line, sizeof(line) - 1);
    assert_true(n > 3);
    assert_int_equal(strncmp(line, "ok ", 3), 0);
    int64_t id = strtoll(line + 3, NULL, 10);
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    close(ready[0]);
    close(hold[1]);

    struct store *s = open_store(e);
    struct store_job j;
    assert_int_equal(store_job_get(s, id, &j), 0);
    assert_string_equal(j.state, "PENDING");
    store_job_release(&j);
    int64_t again = 0;
    assert_int_equal(store_idempotency_get(s, 1, "crash", &again), 0);
    assert_int_equal(again, id);
    store_close(s);
}

/* ---- the lease of a one-controller store --------------------------------------- */

static void sqlite_lease_is_always_free_and_bumps_the_epoch(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = open_store(e);
    assert_false(store_shared(s));
    struct store_lease l;
    assert_int_equal(store_lease_get(s, &l), 0);
    assert_int_equal(l.epoch, 0);
    assert_string_equal(l.holder, "");
    assert_int_equal(store_lease_renew(s, 1000), GPO_EFENCED); /* never taken */
    assert_int_equal(store_lease_release(s), GPO_EFENCED);
    assert_int_equal(store_lease_acquire(s, "ctl-a", "http://a", 1000, &l), 0);
    assert_int_equal(l.epoch, 1);
    assert_true(l.remaining_ms == INT64_MAX);
    assert_int_equal(store_lease_acquire(s, "ctl-b", "http://b", 1000, &l), 0); /* always free */
    assert_int_equal(l.epoch, 2);
    assert_int_equal(store_lease_get(s, &l), 0);
    assert_int_equal(l.epoch, 2);
    assert_string_equal(l.holder, "ctl-b");
    assert_string_equal(l.address, "http://b");
    assert_true(l.remaining_ms == INT64_MAX);
    assert_int_equal(store_lease_renew(s, 1000), 0);
    assert_int_equal(store_lease_release(s), 0);
    int64_t epoch = 0;
    assert_int_equal(store_epoch_acquire(s, &epoch), 0); /* the epoch moves past the lease's */
    assert_int_equal(epoch, 3);
    assert_int_equal(store_lease_renew(s, 1000), GPO_EFENCED);
    assert_int_equal(store_lease_acquire(s, "", "", 1000, &l), GPO_EINVAL);
    assert_int_equal(store_lease_acquire(s, "ctl-a", "", 0, &l), GPO_EINVAL);
    store_close(s);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, tmpdb_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(open_creates_wal_database_with_full_sync),
        T(v1_database_migrates_to_current),
        T(v6_database_migrates_and_keeps_services),
        T(newer_schema_is_refused_and_left_unchanged),
        T(committed_job_survives_kill_9),
        T(sqlite_lease_is_always_free_and_bumps_the_epoch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

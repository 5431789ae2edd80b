/* test_store_pg.c - what is PostgreSQL's own in the store: migrations on an
 * empty database (two openers at once migrate once) and refusal of a newer
 * schema; no commit before the lease; the lease between two store objects on
 * one database (exclusive, taken over after expiry with a higher epoch, the
 * old holder fenced: its commits change nothing, its renewals fail; released
 * and taken at once); and a stopped or frozen server failing calls with
 * GPO_EIO in seconds, the connections remade once it is back. Run by
 * tests/tools/with_pg.py, which starts the server (GPUORCH_TEST_PG_*). */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <libpq-fe.h>

#include "store/store.h"
#include "storetest.h"
#include "tmptree.h"
#include "base/banned.h"

#define LONG_TTL_MS 600000
#define POLL_S      30 /* how long a polled condition may take */

static int setup(void **state)
{
    if (!storetest_pg_url()) {
        print_error("GPUORCH_TEST_PG_URL is not set: run this under tests/tools/with_pg.py\n");
        return -1;
    }
    return storetest_setup(state, "test_store_pg");
}

static struct store *open_pg(void)
{
    struct store *s = NULL;
    char err[512] = "";
    int rc = store_open_postgres(storetest_pg_url(), &s, err, sizeof(err));
    if (rc)
        print_error("store_open_postgres: %s (%s)\n", gpo_strerror(rc), err);
    assert_int_equal(rc, 0);
    return s;
}

/* The first column of sql's first row, run on a connection of the test's own. */
static void sql_value(const char *sql, char *buf, size_t len)
{
    PGconn *c = PQconnectdb(storetest_pg_url());
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK)
        print_error("%s: %s", sql, PQresultErrorMessage(r));
    assert_true(PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_COMMAND_OK);
    snprintf(buf, len, "%s", PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "");
    PQclear(r);
    PQfinish(c);
}

static void expect_sql(const char *sql, const char *want)
{
    char got[256];
    sql_value(sql, got, sizeof(got));
    assert_string_equal(got, want);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- migrations ---------------------------------------------------------------- */

static void empty_database_gets_the_schema_once(void **state)
{
    (void)state;
    expect_sql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", "0");
    struct store *s = open_pg();
    store_close(s);
    expect_sql("SELECT version FROM schema_version", "1");
    expect_sql("SELECT count(*) FROM schema_version", "1");
    expect_sql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename IN"
               " ('meta', 'users', 'tokens', 'teams', 'pools', 'priority_classes', 'prices',"
               " 'services', 'nodes', 'jobs', 'attempts', 'idempotency', 'sched_state', 'ledger',"
               " 'metric_minutes', 'lease')",
               "16");
    expect_sql("SELECT epoch || ' ' || holder FROM lease", "0 ");
    s = open_pg(); /* a second open finds it current */
    store_close(s);
    expect_sql("SELECT count(*) FROM schema_version", "1");
}

struct opener {
    struct store *s;
    int rc;
    char err[256];
};

static void *open_thread(void *p)
{
    struct opener *o = p;
    o->rc = store_open_postgres(storetest_pg_url(), &o->s, o->err, sizeof(o->err));
    return NULL;
}

static void openers_at_once_migrate_once(void **state)
{
    (void)state;
    struct opener o[4] = {0};
    pthread_t t[4];
    for (int k = 0; k < 4; k++)
        assert_int_equal(pthread_create(&t[k], NULL, open_thread, &o[k]), 0);
    for (int k = 0; k < 4; k++) {
        pthread_join(t[k], NULL);
        if (o[k].rc)
            print_error("opener %d: %s (%s)\n", k, gpo_strerror(o[k].rc), o[k].err);
        assert_int_equal(o[k].rc, 0);
        store_close(o[k].s);
    }
    expect_sql("SELECT count(*) || ' ' || max(version) FROM schema_version", "1 1");
}

static void newer_schema_is_refused_and_left_unchanged(void **state)
{
    (void)state;
    store_close(open_pg());
    char buf[8];
    sql_value("UPDATE schema_version SET version = 99", buf, sizeof(buf));
    struct store *s = NULL;
    char err[256] = "";
    assert_int_equal(store_open_postgres(storetest_pg_url(), &s, err, sizeof(err)), GPO_ETOONEW);
    assert_null(s);
    assert_non_null(strstr(err, "99"));
    assert_non_null(strstr(err, "1"));
    expect_sql("SELECT version FROM schema_version", "99");
}

static void bad_urls_are_refused(void **state)
{
    (void)state;
    struct store *s = NULL;
    char err[256] = "";
    assert_int_equal(store_open_postgres("sqlite:///x", &s, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "postgres://"));
    assert_int_equal(store_open_postgres("postgres://h/db?nosuchparam=1", &s, err, sizeof(err)),
                     GPO_EINVAL);
    assert_non_null(strstr(err, "nosuchparam"));
    /* Nothing listens there: refused at once, libpq's reason in err. */
    assert_int_equal(
        store_open_postgres("postgres://postgres@127.0.0.1:1/gpuorch", &s, err, sizeof(err)),
        GPO_EIO);
    assert_non_null(strstr(err, "127.0.0.1"));
    assert_null(s);
}

/* ---- the lease ----------------------------------------------------------------- */

static void commits_before_the_lease_are_fenced(void **state)
{
    (void)state;
    struct store *s = open_pg();
    assert_true(store_shared(s));
    int64_t epoch = 0;
    assert_int_equal(store_epoch_acquire(s, &epoch), GPO_ENOTSUP);
    char msg[256] = "";
    assert_int_equal(store_commit_wait(s, storetest_job_batch("ml", "PENDING", 1, NULL), NULL, 0,
                                       msg, sizeof(msg)),
                     GPO_EFENCED);
    assert_non_null(strstr(msg, "lease"));
    assert_int_equal(storetest_count_jobs(s), 0);
    struct store_lease l;
    assert_int_equal(store_lease_renew(s, 1000), GPO_EFENCED);
    assert_int_equal(store_lease_release(s), GPO_EFENCED);
    assert_int_equal(store_lease_get(s, &l), 0);
    assert_int_equal(l.epoch, 0);
    assert_string_equal(l.holder, "");
    assert_true(l.remaining_ms <= 0);
    store_close(s);
}

static void lease_arguments_are_checked(void **state)
{
    (void)state;
    struct store *s = open_pg();
    struct store_lease l;
    char big[STORE_LEASE_ADDRESS_MAX + 2];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(store_lease_acquire(s, "", "", 1000, &l), GPO_EINVAL);
    assert_int_equal(store_lease_acquire(s, "a", big, 1000, &l), GPO_EINVAL);
    assert_int_equal(store_lease_acquire(s, big + STORE_LEASE_ADDRESS_MAX - STORE_LEASE_HOLDER_MAX,
                                         "", 1000, &l),
                     GPO_EINVAL); /* holder one byte too long */
    assert_int_equal(store_lease_acquire(s, "a", "", 0, &l), GPO_EINVAL);
    assert_int_equal(store_lease_acquire(s, "a", "", 3600001, &l), GPO_EINVAL);
    assert_int_equal(store_lease_renew(s, 0), GPO_EINVAL);
    assert_int_equal(store_lease_get(s, NULL), GPO_EINVAL);
    assert_int_equal(store_lease_acquire(NULL, "a", "", 1000, &l), GPO_EINVAL);
    store_close(s);
}

/* Acquires for holder until it is ours (the other's lease expiring). */
static struct store_lease acquire_when_free(struct store *s, const char *holder, const char *addr)
{
    struct store_lease l;
    double end = now_s() + POLL_S;
    int rc;
    while ((rc = store_lease_acquire(s, holder, addr, LONG_TTL_MS, &l)) == GPO_EBUSY &&
           now_s() < end)
        tmptree_pause();
    assert_int_equal(rc, 0);
    return l;
}

static void lease_is_exclusive_and_fences_the_old_holder(void **state)
{
    (void)state;
    struct store *a = open_pg(), *b = open_pg();
    struct store_lease la, lb;
    assert_int_equal(store_lease_acquire(a, "ctl-a", "http://10.0.0.1:8080", LONG_TTL_MS, &la), 0);
    assert_true(la.epoch > 0);
    assert_string_equal(la.holder, "ctl-a");
    int64_t job = storetest_add_job(a, "ml", "PENDING", 1);

    /* B is refused and told who leads. */
    assert_int_equal(store_lease_acquire(b, "ctl-b", "http://10.0.0.2:8080", LONG_TTL_MS, &lb),
                     GPO_EBUSY);
    assert_int_equal(lb.epoch, la.epoch);
    assert_string_equal(lb.holder, "ctl-a");
    assert_string_equal(lb.address, "http://10.0.0.1:8080");
    assert_true(lb.remaining_ms > 0 && lb.remaining_ms <= LONG_TTL_MS);
    /* Nor may B commit: it holds no lease. */
    storetest_commit_expect(b, storetest_job_batch("ml", "PENDING", 1, NULL), GPO_EFENCED, NULL, 0);
    /* A re-acquiring its live lease keeps its epoch. */
    assert_int_equal(store_lease_acquire(a, "ctl-a", "http://10.0.0.1:8080", LONG_TTL_MS, &la), 0);
    assert_int_equal(la.epoch, lb.epoch);

    /* A's lease runs out (renewed for 1 ms); B takes it with a higher epoch. */
    assert_int_equal(store_lease_renew(a, 1), 0);
    lb = acquire_when_free(b, "ctl-b", "http://10.0.0.2:8080");
    assert_true(lb.epoch > la.epoch);
    struct store_lease g;
    assert_int_equal(store_lease_get(a, &g), 0);
    assert_int_equal(g.epoch, lb.epoch);
    assert_string_equal(g.holder, "ctl-b");
    assert_string_equal(g.address, "http://10.0.0.2:8080");
    assert_true(g.remaining_ms > 0);

    /* A is fenced: its commits fail and change nothing, plain and decision alike. */
    char msg[256] = "";
    struct store_batch *bt = storetest_job_batch("ml", "PENDING", 1, NULL);
    assert_int_equal(store_batch_meta_put(bt, "a-was-here", "1"), 0);
    assert_int_equal(store_commit_wait(a, bt, NULL, 0, msg, sizeof(msg)), GPO_EFENCED);
    assert_non_null(strstr(msg, "epoch"));
    bt = store_batch_new();
    assert_int_equal(store_batch_set_decision(bt, la.epoch), 0);
    assert_int_equal(store_batch_job_update(bt, job, "RUNNING", NULL, 5, NULL), 0);
    storetest_commit_expect(a, bt, GPO_EFENCED, NULL, 0);
    char *v = NULL;
    assert_int_equal(store_meta_get(b, "a-was-here", &v), GPO_ENOENT);
    assert_int_equal(storetest_count_jobs(b), 1);
    struct store_job j;
    assert_int_equal(store_job_get(b, job, &j), 0);
    assert_string_equal(j.state, "PENDING");
    store_job_release(&j);
    assert_int_equal(store_lease_renew(a, LONG_TTL_MS), GPO_EFENCED);
    assert_int_equal(store_lease_release(a), GPO_EFENCED);
    char err[256];
    store_last_error(a, err, sizeof(err));
    assert_non_null(strstr(err, "another"));
    /* A trying again is refused: B's lease is live. */
    assert_int_equal(store_lease_acquire(a, "ctl-a", "http://10.0.0.1:8080", LONG_TTL_MS, &la),
                     GPO_EBUSY);
    assert_string_equal(la.holder, "ctl-b");

    /* B leads: its decisions under its epoch pass, under A's old one not. */
    bt = store_batch_new();
    assert_int_equal(store_batch_set_decision(bt, lb.epoch - 1), 0);
    assert_int_equal(store_batch_job_update(bt, job, "RUNNING", NULL, 5, NULL), 0);
    storetest_commit_expect(b, bt, GPO_EFENCED, NULL, 0);
    bt = store_batch_new();
    assert_int_equal(store_batch_set_decision(bt, lb.epoch), 0);
    assert_int_equal(store_batch_job_update(bt, job, "RUNNING", NULL, 5, NULL), 0);
    storetest_commit_ok(b, bt);
    assert_int_equal(store_meta_get(b, STORE_META_EPOCH, &v), 0);
    assert_int_equal(strtoll(v, NULL, 10), lb.epoch);
    free(v);
    store_close(a);
    store_close(b);
}

static void released_lease_is_taken_at_once_with_a_new_epoch(void **state)
{
    (void)state;
    struct store *a = open_pg(), *b = open_pg();
    struct store_lease la, lb;
    assert_int_equal(store_lease_acquire(a, "ctl-a", "http://a", LONG_TTL_MS, &la), 0);
    assert_int_equal(store_lease_release(a), 0);
    assert_int_equal(store_lease_acquire(b, "ctl-b", "http://b", LONG_TTL_MS, &lb), 0);
    assert_int_equal(lb.epoch, la.epoch + 1);
    storetest_commit_expect(a, storetest_job_batch("ml", "PENDING", 1, NULL), GPO_EFENCED, NULL, 0);
    storetest_add_job(b, "ml", "PENDING", 1);
    /* The same holder taking its own lease again after an expiry bumps too. */
    assert_int_equal(store_lease_renew(b, 1), 0);
    struct store_lease g;
    double end = now_s() + POLL_S;
    do {
        assert_int_equal(store_lease_get(b, &g), 0);
        if (g.remaining_ms > 0)
            tmptree_pause();
    } while (g.remaining_ms > 0 && now_s() < end);
    assert_true(g.remaining_ms <= 0);
    assert_int_equal(store_lease_acquire(b, "ctl-b", "http://b", LONG_TTL_MS, &g), 0);
    assert_int_equal(g.epoch, lb.epoch + 1);
    store_close(a);
    store_close(b);
}

/* ---- a stopped server ------------------------------------------------------------ */

/* Runs pgserver.py CMD on the test's server (with_pg.py's). */
static void pgserver(const char *cmd)
{
    const char *tool = getenv("GPUORCH_TEST_PGSERVER"), *dir = getenv("GPUORCH_TEST_PG_DIR"),
               *port = getenv("GPUORCH_TEST_PG_PORT");
    assert_non_null(tool);
    assert_non_null(dir);
    assert_non_null(port);
    char line[1024];
    snprintf(line, sizeof(line), "python3 '%s' %s --dir '%s' --port %s >/dev/null", tool, cmd, dir,
             port);
    assert_int_equal(system(line), 0);
}

static void stopped_server_fails_calls_with_eio_then_recovers(void **state)
{
    (void)state;
    struct store *s = open_pg();
    struct store_lease l;
    assert_int_equal(store_lease_acquire(s, "ctl-a", "http://a", LONG_TTL_MS, &l), 0);
    int64_t job = storetest_add_job(s, "ml", "PENDING", 1);
    pgserver("stop");

    double t0 = now_s();
    assert_int_equal(store_lease_renew(s, LONG_TTL_MS), GPO_EIO);
    char err[256];
    store_last_error(s, err, sizeof(err));
    assert_true(err[0] != '\0');
    assert_int_equal(store_lease_get(s, &l), GPO_EIO);
    struct store_job j;
    assert_int_equal(store_job_get(s, job, &j), GPO_EIO);
    storetest_commit_expect(s, storetest_job_batch("ml", "PENDING", 1, NULL), GPO_EIO, NULL, 0);
    /* Each bounded by the connect timeout (3 s) at most. */
    assert_true(now_s() - t0 < 15.0);

    pgserver("start");
    assert_int_equal(store_lease_renew(s, LONG_TTL_MS), 0); /* its connection remade */
    assert_int_equal(store_job_get(s, job, &j), 0);
    store_job_release(&j);
    storetest_add_job(s, "ml", "PENDING", 1);
    assert_int_equal(storetest_count_jobs(s), 2);

    /* Restarted between two reads: the first read after it finds its
     * connection dropped, and runs again on a new one. */
    pgserver("stop");
    pgserver("start");
    assert_int_equal(store_job_get(s, job, &j), 0);
    store_job_release(&j);
    store_close(s);
}

/* Sends sig to the test's postmaster and every child of it (by PID). */
static void signal_server(int sig)
{
    const char *dir = getenv("GPUORCH_TEST_PG_DIR");
    assert_non_null(dir);
    char path[512];
    snprintf(path, sizeof(path), "%s/data/postmaster.pid", dir);
    long pm = tmptree_read_number(path);
    assert_true(pm > 1);
    DIR *d = opendir("/proc");
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        char *end = NULL;
        long pid = strtol(de->d_name, &end, 10);
        if (pid <= 0 || *end)
            continue;
        char stat[64], line[512] = "";
        snprintf(stat, sizeof(stat), "/proc/%ld/stat", pid);
        FILE *f = fopen(stat, "r");
        if (!f)
            continue;
        size_t n = fread(line, 1, sizeof(line) - 1, f);
        fclose(f);
        line[n] = '\0';
        const char *p = strrchr(line, ')'); /* "pid (comm) state ppid ..." */
        long ppid = 0;
        if (p && sscanf(p + 1, " %*c %ld", &ppid) == 1 && ppid == pm)
            kill((pid_t)pid, sig);
    }
    closedir(d);
    kill((pid_t)pm, sig);
}

/* A server that stops answering (frozen: the kernel still acknowledges
 * packets, so no keepalive or TCP timeout fires) fails a lease call with
 * GPO_EIO once the call's own deadline passes; thawed, the next call works
 * on a new connection. */
static void frozen_server_fails_lease_calls_in_seconds(void **state)
{
    (void)state;
    struct store *s = open_pg();
    struct store_lease l;
    assert_int_equal(store_lease_acquire(s, "ctl-a", "http://a", LONG_TTL_MS, &l), 0);
    signal_server(SIGSTOP);
    double t0 = now_s();
    int renew = store_lease_renew(s, LONG_TTL_MS);
    double took = now_s() - t0;
    signal_server(SIGCONT); /* before any assertion: the server must not stay frozen */
    assert_int_equal(renew, GPO_EIO);
    assert_true(took < 10.0);
    char err[256];
    store_last_error(s, err, sizeof(err));
    assert_non_null(strstr(err, "no answer"));
    assert_int_equal(store_lease_renew(s, LONG_TTL_MS), 0);
    assert_int_equal(store_lease_get(s, &l), 0);
    assert_string_equal(l.holder, "ctl-a");
    store_close(s);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, tmpdb_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(empty_database_gets_the_schema_once),
        T(openers_at_once_migrate_once),
        T(newer_schema_is_refused_and_left_unchanged),
        T(bad_urls_are_refused),
        T(commits_before_the_lease_are_fenced),
        T(lease_arguments_are_checked),
        T(lease_is_exclusive_and_fences_the_old_holder),
        T(released_lease_is_taken_at_once_with_a_new_epoch),
        T(stopped_server_fails_calls_with_eio_then_recovers),
        T(frozen_server_fails_lease_calls_in_seconds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

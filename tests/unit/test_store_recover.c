/* test_store_recover.c - a damaged store is refused, never served, and
 * recovered on request: a WAL damaged after a crash (its end overwritten,
 * cut short), a torn unacknowledged tail (accepted), a damaged page of the
 * database file, a database missing beside its mark or older than it; the
 * recovery's lost job ids, ids and epochs that never go back; and the
 * expiry of idempotency keys, across a reopen. A "crash" is a child process
 * that commits and exits without closing the store. Every test works in its
 * own directory under /tmp; nothing waits on a clock. */
#include <fcntl.h>
#include <setjmp.h>
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

#include "base/err.h"
#include "store/sqlite/wal.h"
#include "store/store.h"
#include "tmptree.h"
#include "base/banned.h"

static int setup(void **state)
{
    return tmpdb_setup(state, "test_store_recover");
}

static struct store *open_store(const struct tmpdb *e)
{
    struct store *s = NULL;
    char err[1024] = "";
    int rc = store_open_sqlite(e->path, &s, err, sizeof(err));
    if (rc)
        print_error("store_open_sqlite: %s (%s)\n", gpo_strerror(rc), err);
    assert_int_equal(rc, 0);
    return s;
}

/* Opening refuses with GPO_ECORRUPT, naming `file` and `what`. */
static void expect_refused(const struct tmpdb *e, const char *file, const char *what)
{
    struct store *s = NULL;
    char err[1024] = "";
    int rc = store_open_sqlite(e->path, &s, err, sizeof(err));
    if (rc != GPO_ECORRUPT || !strstr(err, file) || !strstr(err, what))
        print_error("rc %s, err '%s'; expected '%s' and '%s'\n", gpo_strerror(rc), err, file, what);
    assert_int_equal(rc, GPO_ECORRUPT);
    assert_null(s);
    assert_non_null(strstr(err, file));
    assert_non_null(strstr(err, what));
}

static struct store *open_recover(const struct tmpdb *e, struct store_recovery *rec)
{
    struct store *s = NULL;
    char err[1024] = "";
    int rc = store_open_sqlite_opts(e->path, STORE_OPEN_RECOVER, rec, &s, err, sizeof(err));
    if (rc)
        print_error("recover: %s (%s)\n", gpo_strerror(rc), err);
    assert_int_equal(rc, 0);
    return s;
}

static int64_t add_job_at(struct store *s, const char *name, const char *key, int64_t now_ms,
                          int want_rc)
{
    char spec[512];
    snprintf(spec, sizeof(spec), "{\"name\":\"%s\",\"pad\":\"%0300d\"}", name, 0);
    struct store_job_insert j = STORE_JOB_INSERT_INIT;
    j.user_id = 1;
    j.team = "ml";
    j.state = "PENDING";
    j.submit_ms = now_ms;
    j.spec = spec;
    j.idempotency_key = key;
    struct store_batch *b = store_batch_new();
    assert_non_null(b);
    assert_int_equal(store_batch_job_insert(b, &j), 0);
    int64_t id = 0;
    char msg[256] = "";
    int rc = store_commit_wait(s, b, &id, 1, msg, sizeof(msg));
    if (rc != want_rc)
        print_error("commit: %s (%s)\n", gpo_strerror(rc), msg);
    assert_int_equal(rc, want_rc);
    return id;
}

static int64_t add_job(struct store *s, const char *name)
{
    return add_job_at(s, name, NULL, 1000, 0);
}

static bool has_job(struct store *s, int64_t id)
{
    struct store_job j = {0};
    int rc = store_job_get(s, id, &j);
    store_job_release(&j);
    return rc == 0;
}

/* A child opens the store, takes an epoch, commits n jobs one by one and
 * exits without closing it: the WAL stays, as after kill -9. */
static void crash_after_jobs(const struct tmpdb *e, int n)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct store *s = NULL;
        int64_t epoch;
        if (store_open_sqlite(e->path, &s, NULL, 0) || store_epoch_acquire(s, &epoch))
            _exit(1);
        for (int k = 0; k < n; k++) {
            char name[32];
            snprintf(name, sizeof(name), "job-%d", k + 1);
            int64_t id = add_job(s, name);
            if (id != k + 1)
                _exit(2);
        }
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void overwrite(const char *path, long off, int byte, size_t len)
{
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    char buf[8192];
    assert_true(len <= sizeof(buf));
    memset(buf, byte, len);
    assert_int_equal(pwrite(fd, buf, len, off), (ssize_t)len);
    close(fd);
}

static void expect_lost(const struct store_recovery *rec, int64_t first, int64_t last)
{
    assert_true(rec->recovered);
    assert_int_equal(rec->nlost, 1);
    assert_int_equal(rec->lost[0].first, first);
    assert_int_equal(rec->lost[0].last, last);
}

static void damaged_wal_end_is_refused_then_recovered_without_reusing_ids(void **state)
{
    struct tmpdb *e = *state;
    crash_after_jobs(e, 5);
    long len = file_size(e->wal);
    assert_true(len > 64);
    overwrite(e->wal, len - 64, 0x5a, 64);
    expect_refused(e, e->wal, "the last acknowledged commit is frame");
    expect_refused(e, e->wal, "checksum does not match");
    assert_int_equal(file_size(e->wal), len); /* a refusal changes nothing */

    struct store_recovery rec;
    struct store *s = open_recover(e, &rec);
    expect_lost(&rec, 5, 5);
    assert_true(has_job(s, 4));
    assert_false(has_job(s, 5));
    char moved[4400];
    snprintf(moved, sizeof(moved), "%s/gpuorch.db-wal", rec.moved_to);
    assert_int_equal(file_size(moved), len); /* kept as it was */
    int64_t id = add_job(s, "after");
    assert_true(id > 5);
    assert_true(id > rec.job_id_floor - 1);
    int64_t epoch = 0;
    assert_int_equal(store_epoch_acquire(s, &epoch), 0);
    assert_int_equal(epoch, 2); /* the crashed run's was 1 */
    store_close(s);
    store_recovery_release(&rec);
    s = open_store(e); /* the recovered store opens as any other */
    assert_true(has_job(s, id));
    store_close(s);
}

static void wal_cut_short_is_refused_then_recovered(void **state)
{
    struct tmpdb *e = *state;
    crash_after_jobs(e, 6);
    long len = file_size(e->wal);
    assert_int_equal(truncate(e->wal, len - 1500), 0);
    expect_refused(e, e->wal, "the last acknowledged commit is frame");
    struct store_recovery rec;
    struct store *s = open_recover(e, &rec);
    assert_true(rec.nlost >= 1);
    assert_int_equal(rec.lost[rec.nlost - 1].last, 6);
    assert_false(has_job(s, 6));
    assert_true(add_job(s, "after") > 6);
    store_close(s);
    store_recovery_release(&rec);
}

static void torn_unacknowledged_tail_is_accepted(void **state)
{
    struct tmpdb *e = *state;
    crash_after_jobs(e, 3);
    long len = file_size(e->wal);
    /* A frame header of the current generation and part of its page: what a
     * crash inside the next commit's write leaves. */
    int fd = open(e->wal, O_RDWR);
    assert_true(fd >= 0);
    unsigned char frame[24 + 1000] = {0};
    unsigned char hdr[32];
    assert_int_equal(pread(fd, hdr, sizeof(hdr), 0), (ssize_t)sizeof(hdr));
    frame[3] = 9;                   /* page 9 */
    memcpy(frame + 8, hdr + 16, 8); /* the salts */
    memset(frame + 16, 0xee, 8);    /* a checksum that does not match */
    assert_int_equal(pwrite(fd, frame, sizeof(frame), len), (ssize_t)sizeof(frame));
    close(fd);
    struct store *s = open_store(e);
    for (int64_t id = 1; id <= 3; id++)
        assert_true(has_job(s, id));
    assert_int_equal(add_job(s, "next"), 4);
    store_close(s);
}

static void wal_restarted_by_a_checkpoint_opens_after_a_crash(void **state)
{
    struct tmpdb *e = *state;
    /* Enough commits for the writer's checkpoint (at 1000 frames) and a
     * restart of the WAL: the log then holds the new generation's frames
     * and, behind them, the earlier one's. */
    crash_after_jobs(e, 250);
    struct sq_wal_info info;
    char err[512] = "";
    assert_int_equal(sq_wal_check(e->wal, NULL, &info, err, sizeof(err)), 0);
    assert_true(info.valid < info.frames);
    assert_int_equal(info.last_commit, info.valid);
    struct store *s = open_store(e);
    assert_true(has_job(s, 1));
    assert_true(has_job(s, 250));
    assert_int_equal(add_job(s, "next"), 251);
    store_close(s);
}

/* The offset of the page (size psz) of path holding needle. */
static long page_holding(const char *path, const char *needle, long psz)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    size_t len = strlen(needle);
    for (size_t k = 0; k + len <= n; k++)
        if (memcmp(buf + k, needle, len) == 0)
            return (long)k / psz * psz;
    fail_msg("%s not found in %s", needle, path);
    return -1;
}

static void damaged_database_page_is_refused_then_recovered(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = open_store(e);
    int64_t epoch;
    assert_int_equal(store_epoch_acquire(s, &epoch), 0);
    for (int k = 1; k <= 40; k++) {
        char name[32];
        snprintf(name, sizeof(name), "job-%02d-victim", k);
        assert_int_equal(add_job(s, name), k);
    }
    store_close(s); /* checkpointed: everything is in the database file */
    assert_int_equal(file_size(e->wal), -1);
    long off = page_holding(e->path, "job-20-victim", 4096);
    overwrite(e->path, off, 0x55, 4096);
    expect_refused(e, e->path, "quick_check");

    struct store_recovery rec;
    s = open_recover(e, &rec);
    assert_true(rec.recovered);
    assert_true(rec.nlost >= 1);
    bool named = false;
    for (size_t k = 0; k < rec.nlost; k++) {
        assert_true(rec.lost[k].first >= 1 && rec.lost[k].last <= 40);
        named |= rec.lost[k].first <= 20 && 20 <= rec.lost[k].last;
        for (int64_t id = rec.lost[k].first; id <= rec.lost[k].last; id++)
            assert_false(has_job(s, id));
    }
    assert_true(named);
    assert_true(has_job(s, 1));
    assert_true(has_job(s, 40));
    assert_true(add_job(s, "after") > 40);
    assert_int_equal(store_epoch_acquire(s, &epoch), 0);
    assert_int_equal(epoch, 2);
    store_close(s);
    store_recovery_release(&rec);
}

static void missing_database_beside_its_mark_is_refused(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = open_store(e);
    add_job(s, "one");
    store_close(s);
    assert_int_equal(unlink(e->path), 0);
    expect_refused(e, e->path, "missing");
    assert_int_equal(file_size(e->path), -1); /* not made anew */
}

static void database_older_or_emptier_than_its_mark_is_refused(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = open_store(e);
    int64_t epoch;
    assert_int_equal(store_epoch_acquire(s, &epoch), 0);
    add_job(s, "one");
    store_close(s);
    char old[200];
    snprintf(old, sizeof(old), "%s/old.db", e->dir);
    copy_file(e->path, old);
    s = open_store(e);
    assert_int_equal(store_epoch_acquire(s, &epoch), 0);
    add_job(s, "two");
    store_close(s);
    assert_int_equal(rename(old, e->path), 0);
    expect_refused(e, e->path, "leader epoch reads 1");
    assert_int_equal(truncate(e->path, 0), 0); /* empty: SQLite would call it new */
    expect_refused(e, e->path, "leader epoch reads 0");
}

static void idempotency_key_expires_after_its_time(void **state)
{
    struct tmpdb *e = *state;
    const int64_t day = STORE_IDEMPOTENCY_TTL_MS;
    struct store *s = open_store(e);
    int64_t first = add_job_at(s, "a", "k", 1000, 0);
    /* Inside the window: the first job; GPO_EEXIST names it. */
    assert_int_equal(add_job_at(s, "a", "k", 1000 + day - 1, GPO_EEXIST), first);
    store_close(s);
    s = open_store(e); /* the key's time survives a restart */
    assert_int_equal(add_job_at(s, "a", "k", 1000 + day - 1, GPO_EEXIST), first);
    /* Past it: a new job, which the key names from then on. */
    int64_t second = add_job_at(s, "a", "k", 1000 + day, 0);
    assert_true(second > first);
    assert_int_equal(add_job_at(s, "a", "k", 1000 + day + 5, GPO_EEXIST), second);
    int64_t got = 0;
    assert_int_equal(store_idempotency_get(s, 1, "k", &got), 0);
    assert_int_equal(got, second);
    /* Pruning removes keys by their time. */
    struct store_batch *b = store_batch_new();
    assert_int_equal(store_batch_idempotency_prune(b, 1000 + day + 1), 0);
    assert_int_equal(store_commit_wait(s, b, NULL, 0, NULL, 0), 0);
    assert_int_equal(store_idempotency_get(s, 1, "k", &got), GPO_ENOENT);
    /* A shorter time to live, as a server flag sets it. */
    struct store_job_insert j = STORE_JOB_INSERT_INIT;
    j.user_id = 1;
    j.team = "ml";
    j.state = "PENDING";
    j.spec = "{}";
    j.idempotency_key = "short";
    j.idempotency_ttl_ms = 10;
    int64_t ids[2];
    for (int k = 0; k < 2; k++) {
        j.submit_ms = 5000 + k * 10;
        b = store_batch_new();
        assert_int_equal(store_batch_job_insert(b, &j), 0);
        assert_int_equal(store_commit_wait(s, b, &ids[k], 1, NULL, 0), 0);
    }
    assert_true(ids[1] > ids[0]);
    store_close(s);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, tmpdb_teardown)
    const struct CMUnitTest tests[] = {
        T(damaged_wal_end_is_refused_then_recovered_without_reusing_ids),
        T(wal_cut_short_is_refused_then_recovered),
        T(torn_unacknowledged_tail_is_accepted),
        T(wal_restarted_by_a_checkpoint_opens_after_a_crash),
        T(damaged_database_page_is_refused_then_recovered),
        T(missing_database_beside_its_mark_is_refused),
        T(database_older_or_emptier_than_its_mark_is_refused),
        T(idempotency_key_expires_after_its_time),
    };
    return cmocka_run_group_tests_name("store_recover", tests, NULL, NULL);
}

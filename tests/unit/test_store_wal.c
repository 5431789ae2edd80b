/* test_store_wal.c - the WAL check (src/store/sqlite/wal.h) on crafted files:
 * valid logs in both byte orders, each kind of damage (header, length,
 * checksum, frames after the last commit), an earlier generation's frames
 * (accepted), the last acknowledged commit (a torn tail after it accepted,
 * damage before it refused), and real WALs that SQLite wrote, before and
 * after a checkpoint restarted the log. Every test works in its own
 * directory under /tmp. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "base/err.h"
#include "store/sqlite/wal.h"
#include "tmptree.h"
#include "base/banned.h"

#define PAGE  512
#define FRAME (SQ_WAL_FRAME_HEADER + PAGE)
#define SALT1 0x11223344u
#define SALT2 0x55667788u

static int setup(void **state)
{
    return tmpdb_setup(state, "test_store_wal");
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* A WAL being crafted: header, then frames appended with a running checksum. */
struct wal {
    uint8_t buf[32 + 16 * FRAME];
    size_t len;
    bool big;
    uint32_t s[2];
};

static void wal_begin(struct wal *w, bool big, uint32_t salt1, uint32_t salt2)
{
    memset(w, 0, sizeof(*w));
    w->big = big;
    put_be32(w->buf, big ? SQ_WAL_MAGIC_BE : SQ_WAL_MAGIC_LE);
    put_be32(w->buf + 4, SQ_WAL_FORMAT);
    put_be32(w->buf + 8, PAGE);
    put_be32(w->buf + 12, 7);
    put_be32(w->buf + 16, salt1);
    put_be32(w->buf + 20, salt2);
    sq_wal_checksum(big, w->buf, 24, w->s);
    put_be32(w->buf + 24, w->s[0]);
    put_be32(w->buf + 28, w->s[1]);
    w->len = 32;
}

/* A frame of page pgno; commit: the database size after it (0: none). */
static void wal_frame(struct wal *w, uint32_t pgno, uint32_t commit, uint32_t salt1, uint32_t salt2)
{
    uint8_t *f = w->buf + w->len;
    put_be32(f, pgno);
    put_be32(f + 4, commit);
    put_be32(f + 8, salt1);
    put_be32(f + 12, salt2);
    for (size_t k = 0; k < PAGE; k++)
        f[SQ_WAL_FRAME_HEADER + k] = (uint8_t)(k * 7 + pgno);
    sq_wal_checksum(w->big, f, 8, w->s);
    sq_wal_checksum(w->big, f + SQ_WAL_FRAME_HEADER, PAGE, w->s);
    put_be32(f + 16, w->s[0]);
    put_be32(f + 20, w->s[1]);
    w->len += FRAME;
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void wal_write(const struct tmpdb *e, const struct wal *w)
{
    write_file(e->wal, w->buf, w->len);
}

/* Three frames, the second and the third commits. */
static void three_frames(struct wal *w, bool big)
{
    wal_begin(w, big, SALT1, SALT2);
    wal_frame(w, 1, 0, SALT1, SALT2);
    wal_frame(w, 2, 2, SALT1, SALT2);
    wal_frame(w, 3, 3, SALT1, SALT2);
}

static int check(const struct tmpdb *e, const struct sq_wal_pos *acked, struct sq_wal_info *info,
                 char *err, size_t errlen)
{
    err[0] = '\0';
    return sq_wal_check(e->wal, acked, info, err, errlen);
}

static void expect_damage(const struct tmpdb *e, const struct sq_wal_pos *acked, const char *what)
{
    struct sq_wal_info info;
    char err[512];
    int rc = check(e, acked, &info, err, sizeof(err));
    if (rc != GPO_ECORRUPT || !strstr(err, e->wal) || !strstr(err, what))
        print_error("rc %d, err '%s', expected '%s'\n", rc, err, what);
    assert_int_equal(rc, GPO_ECORRUPT);
    assert_non_null(strstr(err, e->wal));
    assert_non_null(strstr(err, what));
}

static void absent_or_empty_wal_is_fine(void **state)
{
    struct tmpdb *e = *state;
    struct sq_wal_info info;
    char err[256];
    assert_int_equal(check(e, NULL, &info, err, sizeof(err)), 0);
    assert_false(info.present);
    write_file(e->wal, "", 0);
    assert_int_equal(check(e, NULL, &info, err, sizeof(err)), 0);
    assert_false(info.present);
}

static void valid_wal_checks_in_both_byte_orders(void **state)
{
    struct tmpdb *e = *state;
    for (int big = 0; big < 2; big++) {
        struct wal w;
        three_frames(&w, big);
        wal_write(e, &w);
        struct sq_wal_info info;
        char err[256];
        assert_int_equal(check(e, NULL, &info, err, sizeof(err)), 0);
        assert_true(info.present);
        assert_int_equal(info.page_size, PAGE);
        assert_int_equal(info.salt1, SALT1);
        assert_int_equal(info.frames, 3);
        assert_int_equal(info.valid, 3);
        assert_int_equal(info.last_commit, 3);
    }
}

static void damaged_header_is_refused(void **state)
{
    struct tmpdb *e = *state;
    struct wal w;
    three_frames(&w, false);
    w.buf[0] ^= 0xff;
    wal_write(e, &w);
    expect_damage(e, NULL, "magic");
    three_frames(&w, false);
    w.buf[7] ^= 1; /* format */
    wal_write(e, &w);
    expect_damage(e, NULL, "format");
    three_frames(&w, false);
    put_be32(w.buf + 8, 1000); /* not a power of two */
    wal_write(e, &w);
    expect_damage(e, NULL, "page size");
    three_frames(&w, false);
    w.buf[17] ^= 4; /* a salt: the header's checksum no longer matches */
    wal_write(e, &w);
    expect_damage(e, NULL, "header's checksum");
    write_file(e->wal, w.buf, 20);
    expect_damage(e, NULL, "shorter than the 32-byte header");
}

static void header_overwritten_is_refused_even_with_an_acknowledged_commit(void **state)
{
    struct tmpdb *e = *state;
    struct wal w;
    three_frames(&w, false);
    memset(w.buf, 0x5a, 32);
    wal_write(e, &w);
    struct sq_wal_pos acked = {SALT1, SALT2, 3};
    expect_damage(e, &acked, "magic");
}

static void torn_wal_is_refused_naming_offset_and_frame(void **state)
{
    struct tmpdb *e = *state;
    struct wal w;
    three_frames(&w, false);
    w.len -= 100; /* cut inside frame 3 */
    wal_write(e, &w);
    char want[64];
    snprintf(want, sizeof(want), "offset %d (frame 3)", 32 + 2 * FRAME);
    expect_damage(e, NULL, want);
    expect_damage(e, NULL, "ends inside");
}

static void flipped_bit_near_the_end_is_refused(void **state)
{
    struct tmpdb *e = *state;
    struct wal w;
    three_frames(&w, true);
    w.buf[w.len - 10] ^= 0x08;
    wal_write(e, &w);
    char want[64];
    snprintf(want, sizeof(want), "offset %d (frame 3)", 32 + 2 * FRAME);
    expect_damage(e, NULL, want);
    expect_damage(e, NULL, "checksum does not match");
    three_frames(&w, true);
    memset(w.buf + w.len - 64, 0, 64); /* the last 64 bytes overwritten */
    wal_write(e, &w);
    expect_damage(e, NULL, "checksum");
}

static void frames_after_the_last_commit_are_refused(void **state)
{
    struct tmpdb *e = *state;
    struct wal w;
    wal_begin(&w, false, SALT1, SALT2);
    wal_frame(&w, 1, 1, SALT1, SALT2);
    wal_frame(&w, 2, 0, SALT1, SALT2);
    wal_frame(&w, 3, 0, SALT1, SALT2);
    wal_write(e, &w);
    expect_damage(e, NULL, "frames 2-3");
    expect_damage(e, NULL, "do not end in one");
    /* A mark that records no acknowledged commit in the WAL (a clean close,
     * or a crash in the first transaction after the start): all of it is
     * unacknowledged, what SQLite drops, torn or with a bad header too. */
    struct sq_wal_pos none = {0, 0, 0};
    struct sq_wal_info info;
    char err[256];
    assert_int_equal(check(e, &none, &info, err, sizeof(err)), 0);
    w.buf[w.len - 1] ^= 1;
    w.len -= 100;
    wal_write(e, &w);
    assert_int_equal(check(e, &none, &info, err, sizeof(err)), 0);
    memset(w.buf, 0, 8);
    wal_write(e, &w);
    assert_int_equal(check(e, &none, &info, err, sizeof(err)), 0);
    expect_damage(e, NULL, "magic");
}

static void earlier_generation_frames_are_accepted(void **state)
{
    struct tmpdb *e = *state;
    struct wal w;
    wal_begin(&w, false, SALT1 + 1, SALT2);
    wal_frame(&w, 1, 0, SALT1 + 1, SALT2);
    wal_frame(&w, 2, 2, SALT1 + 1, SALT2);
    /* What the log held before the restart: other salts, and no longer
     * chained, as SQLite leaves them. */
    wal_frame(&w, 3, 0, SALT1, SALT2);
    wal_frame(&w, 4, 4, SALT1, SALT2);
    wal_write(e, &w);
    struct sq_wal_info info;
    char err[256];
    assert_int_equal(check(e, NULL, &info, err, sizeof(err)), 0);
    assert_int_equal(info.frames, 4);
    assert_int_equal(info.valid, 2);
    assert_int_equal(info.last_commit, 2);
}

static void torn_tail_after_the_acknowledged_commit_is_accepted(void **state)
{
    struct tmpdb *e = *state;
    struct wal w;
    three_frames(&w, false);
    wal_frame(&w, 4, 0, SALT1, SALT2); /* a transaction cut by a crash */
    w.buf[w.len - 1] ^= 1;
    wal_frame(&w, 5, 0, SALT1, SALT2);
    w.len -= 200;
    wal_write(e, &w);
    struct sq_wal_pos acked = {SALT1, SALT2, 3};
    struct sq_wal_info info;
    char err[256];
    assert_int_equal(check(e, &acked, &info, err, sizeof(err)), 0);
    assert_int_equal(info.last_commit, 3);
    assert_true(info.torn);
    /* The same tail without the acknowledgement is damage. */
    expect_damage(e, NULL, "frame 4");
}

static void damage_before_the_acknowledged_commit_is_refused(void **state)
{
    struct tmpdb *e = *state;
    struct wal w;
    three_frames(&w, false);
    wal_frame(&w, 4, 0, SALT1, SALT2);
    wal_frame(&w, 5, 5, SALT1, SALT2);
    w.buf[32 + 3 * FRAME + 100] ^= 0x40; /* inside frame 4 */
    wal_write(e, &w);
    struct sq_wal_pos acked = {SALT1, SALT2, 5};
    expect_damage(e, &acked, "the last acknowledged commit is frame 5");
    expect_damage(e, &acked, "frame 4");
    /* Cut short before the acknowledged commit: damage too. */
    three_frames(&w, false);
    wal_frame(&w, 4, 0, SALT1, SALT2);
    wal_frame(&w, 5, 5, SALT1, SALT2);
    w.len = 32 + 3 * FRAME;
    wal_write(e, &w);
    expect_damage(e, &acked, "the last acknowledged commit is frame 5");
    /* A restarted log (other salts) was written after the acknowledgement. */
    struct sq_wal_pos older = {SALT1 - 1, SALT2, 9};
    struct sq_wal_info info;
    char err[256];
    assert_int_equal(check(e, &older, &info, err, sizeof(err)), 0);
}

static void missing_wal_with_an_acknowledged_commit_is_refused(void **state)
{
    struct tmpdb *e = *state;
    struct sq_wal_pos acked = {SALT1, SALT2, 3};
    expect_damage(e, &acked, "missing");
    write_file(e->wal, "", 0);
    expect_damage(e, &acked, "empty");
}

/* ---- WALs that SQLite wrote ------------------------------------------------- */

static sqlite3 *open_wal_db(const struct tmpdb *e)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(e->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;"
                                  " CREATE TABLE t(x)",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    return db;
}

static void insert_rows(sqlite3 *db, int n)
{
    for (int k = 0; k < n; k++)
        assert_int_equal(
            sqlite3_exec(db, "INSERT INTO t VALUES (randomblob(3000))", NULL, NULL, NULL),
            SQLITE_OK);
}

static void sqlite_wal_checks_before_and_after_a_restart(void **state)
{
    struct tmpdb *e = *state;
    sqlite3 *db = open_wal_db(e);
    insert_rows(db, 20);
    struct sq_wal_info info;
    char err[512];
    assert_int_equal(check(e, NULL, &info, err, sizeof(err)), 0);
    assert_true(info.present);
    assert_true(info.valid >= 20);
    assert_int_equal(info.last_commit, info.valid);
    assert_int_equal(info.valid, info.frames);
    uint32_t before = info.frames, salt1 = info.salt1;
    /* A checkpoint of everything, then one small transaction: SQLite writes
     * the log again from its start under new salts, and the frames of the
     * earlier generation stay behind the new ones. */
    assert_int_equal(sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_FULL, NULL, NULL),
                     SQLITE_OK);
    insert_rows(db, 1);
    assert_int_equal(check(e, NULL, &info, err, sizeof(err)), 0);
    assert_int_not_equal(info.salt1, salt1);
    assert_int_equal(info.frames, before);
    assert_true(info.valid < before);
    assert_int_equal(info.last_commit, info.valid);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(absent_or_empty_wal_is_fine, setup, tmpdb_teardown),
        cmocka_unit_test_setup_teardown(valid_wal_checks_in_both_byte_orders, setup,
                                        tmpdb_teardown),
        cmocka_unit_test_setup_teardown(damaged_header_is_refused, setup, tmpdb_teardown),
        cmocka_unit_test_setup_teardown(
            header_overwritten_is_refused_even_with_an_acknowledged_commit, setup, tmpdb_teardown),
        cmocka_unit_test_setup_teardown(torn_wal_is_refused_naming_offset_and_frame, setup,
                                        tmpdb_teardown),
        cmocka_unit_test_setup_teardown(flipped_bit_near_the_end_is_refused, setup, tmpdb_teardown),
        cmocka_unit_test_setup_teardown(frames_after_the_last_commit_are_refused, setup,
                                        tmpdb_teardown),
        cmocka_unit_test_setup_teardown(earlier_generation_frames_are_accepted, setup,
                                        tmpdb_teardown),
        cmocka_unit_test_setup_teardown(torn_tail_after_the_acknowledged_commit_is_accepted, setup,
                                        tmpdb_teardown),
        cmocka_unit_test_setup_teardown(damage_before_the_acknowledged_commit_is_refused, setup,
                                        tmpdb_teardown),
        cmocka_unit_test_setup_teardown(missing_wal_with_an_acknowledged_commit_is_refused, setup,
                                        tmpdb_teardown),
        cmocka_unit_test_setup_teardown(sqlite_wal_checks_before_and_after_a_restart, setup,
                                        tmpdb_teardown),
    };
    return cmocka_run_group_tests_name("store_wal", tests, NULL, NULL);
}

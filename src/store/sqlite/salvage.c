/*
 * salvage.c - the store's checks at open and its recovery from damage
 * (sqlite.h): PRAGMA quick_check and the comparison with the mark; moving
 * the damaged files aside and copying what SQLite can still read into a
 * new database.
 *
 * Decisions the header leaves open:
 *  - The damaged files are moved (renamed) into DIR/damaged-TIME/ and never
 *    written again: SQLite reads a copy of them (salvage.db there, removed
 *    afterwards), since opening a WAL database writes to it.
 *  - A table is copied whole when it reads whole; else row by row in rowid
 *    order, and a stretch of rowids that cannot be read is stepped over by
 *    probing (doubling, then halving) for the first rowid past it. A table
 *    without rowids that does not read whole is left empty, and said so.
 *  - The lost job ids are the ids up to the highest one recorded (the mark,
 *    the old database's sequence) that the new database lacks: job rows are
 *    never deleted by the controller, so a gap is a loss.
 *  - New ids continue above the mark's reservation (mark.h): ids given out
 *    after its last fsync are never handed out again, at the cost of a
 *    skipped block.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "base/err.h"
#include "store/sqlite/mark.h"
#include "store/sqlite/schema.h"
#include "store/sqlite/sqlite.h"
#include "store/store.h"
#include "util/errbuf.h"
#include "util/fsutil.h"
#include "base/banned.h"

#define PATH_MAX_ 4200

/* ---- the checks --------------------------------------------------------- */

int64_t sq_query_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    int64_t v = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static bool corrupt_code(int rc)
{
    return (rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB;
}

/* PRAGMA quick_check: its first messages into err. */
static int quick_check(sqlite3 *db, const char *path, char *err, size_t errlen)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "PRAGMA quick_check(4)", -1, &st, NULL);
    char msgs[600] = "";
    size_t used = 0;
    bool ok = false;
    int rows = 0;
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        const char *m = (const char *)sqlite3_column_text(st, 0);
        if (rows++ == 0 && m && strcmp(m, "ok") == 0)
            ok = true;
        int n = snprintf(msgs + used, sizeof(msgs) - used, "%s%s", used ? "; " : "", m ? m : "");
        if (n > 0 && used + (size_t)n < sizeof(msgs))
            used += (size_t)n;
    }
    if (rc == SQLITE_DONE)
        rc = SQLITE_OK;
    int code = rc == SQLITE_OK ? 0 : sqlite3_extended_errcode(db);
    const char *emsg = sqlite3_errmsg(db);
    if (rc != SQLITE_OK && corrupt_code(code))
        rc = errbuf_set(err, errlen, GPO_ECORRUPT, "%s: PRAGMA quick_check: %s", path, emsg);
    else if (rc != SQLITE_OK)
        rc = errbuf_set(err, errlen, GPO_EIO, "%s: PRAGMA quick_check: %s", path, emsg);
    else if (!ok)
        rc = errbuf_set(err, errlen, GPO_ECORRUPT, "%s: PRAGMA quick_check: %s", path, msgs);
    sqlite3_finalize(st);
    return rc;
}

int sq_check_db(sqlite3 *db, const char *path, const struct sq_mark *mark, char *err, size_t errlen)
{
    int rc = quick_check(db, path, err, errlen);
    if (rc || !mark)
        return rc;
    int64_t epoch = sq_query_int(db, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'epoch'");
    int64_t seq = sq_query_int(db, "SELECT seq FROM sqlite_sequence WHERE name = 'jobs'");
    if (epoch < mark->epoch)
        return errbuf_set(err, errlen, GPO_ECORRUPT,
                          "%s: its leader epoch reads %" PRId64 ", but %s.mark records %" PRId64
                          ": committed data is missing",
                          path, epoch, path, mark->epoch);
    if (seq < mark->job_id)
        return errbuf_set(err, errlen, GPO_ECORRUPT,
                          "%s: its highest job id reads %" PRId64 ", but %s.mark records %" PRId64
                          ": committed jobs are missing",
                          path, seq, path, mark->job_id);
    return 0;
}

/* ---- moving the damaged files aside ---------------------------------------- */

static const char *const suffixes[] = {"", "-wal", "-shm", ".mark"};

/* DIR/damaged-TIME (a new folder, mode 0700) beside path. */
static int make_folder(const char *path, char *out, size_t outlen, char *err, size_t errlen)
{
    char dir[PATH_MAX_];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof(dir), ".");
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    if (strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm) == 0)
        snprintf(stamp, sizeof(stamp), "%lld", (long long)now);
    for (int k = 1; k < 100; k++) {
        int n = k == 1 ? snprintf(out, outlen, "%s/damaged-%s", dir, stamp)
                       : snprintf(out, outlen, "%s/damaged-%s-%d", dir, stamp, k);
        if (n < 0 || (size_t)n >= outlen)
            return errbuf_set(err, errlen, GPO_ENAMETOOLONG, "%s: path too long", dir);
        if (mkdir(out, 0700) == 0)
            return 0;
        if (errno != EEXIST)
            return errbuf_set(err, errlen, -errno, "mkdir %s: %s", out, strerror(errno));
    }
    return errbuf_set(err, errlen, GPO_EEXIST, "%s/damaged-%s: every name taken", dir, stamp);
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int copy_file(const char *from, const char *to, char *err, size_t errlen);

/* Renames path and its companions into folder, but copies the mark: an
 * interrupted recovery must leave its record (the id floor, the epoch) in
 * place for the next one. */
static int move_aside(const char *path, const char *folder, char *err, size_t errlen)
{
    for (size_t k = 0; k < sizeof(suffixes) / sizeof(suffixes[0]); k++) {
        char from[PATH_MAX_], to[PATH_MAX_ * 2];
        snprintf(from, sizeof(from), "%s%s", path, suffixes[k]);
        snprintf(to, sizeof(to), "%s/%s%s", folder, base_name(path), suffixes[k]);
        if (strcmp(suffixes[k], ".mark") == 0) {
            int rc = copy_file(from, to, err, errlen);
            if (rc)
                return rc;
            continue;
        }
        if (rename(from, to) != 0 && errno != ENOENT)
            return errbuf_set(err, errlen, -errno, "rename %s to %s: %s", from, to,
                              strerror(errno));
    }
    int rc = fsutil_fsync_dir(path);
    return rc ? errbuf_set(err, errlen, rc, "fsync of %s's folder: %s", path, strerror(-rc)) : 0;
}

static int copy_file(const char *from, const char *to, char *err, size_t errlen)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return errno == ENOENT ? 0
                               : errbuf_set(err, errlen, -errno, "%s: %s", from, strerror(errno));
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int rc = out < 0 ? errbuf_set(err, errlen, -errno, "%s: %s", to, strerror(errno)) : 0;
    char buf[65536];
    ssize_t n;
    while (rc == 0 && (n = read(in, buf, sizeof(buf))) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            rc = errbuf_set(err, errlen, -errno, "%s: %s", from, strerror(errno));
        else if ((rc = fsutil_write_all(out, buf, (size_t)n)) != 0)
            errbuf_set(err, errlen, rc, "%s: %s", to, strerror(-rc));
    }
    close(in);
    if (out >= 0)
        close(out);
    return rc;
}

/* ---- copying what can be read ------------------------------------------------ */

struct salvage {
    sqlite3 *db;  /* the new database */
    sqlite3 *old; /* the copy of the damaged one: its errors never touch db's transaction */
    char notes[1024];
    size_t used;
};

__attribute__((format(printf, 2, 3))) static void note(struct salvage *sv, const char *fmt, ...)
{
    if (sv->used + 3 >= sizeof(sv->notes))
        return;
    if (sv->used)
        sv->used += (size_t)snprintf(sv->notes + sv->used, sizeof(sv->notes) - sv->used, "; ");
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(sv->notes + sv->used, sizeof(sv->notes) - sv->used, fmt, ap);
    va_end(ap);
    if (n > 0)
        sv->used =
            sv->used + (size_t)n < sizeof(sv->notes) ? sv->used + (size_t)n : sizeof(sv->notes) - 1;
}

/* The columns of the damaged table, quoted and comma-separated, and their
 * number; 0 when the table is not there or cannot be read. */
static int old_columns(sqlite3 *old, const char *table, char *cols, size_t len)
{
    char sql[256];
    snprintf(sql, sizeof(sql), "PRAGMA table_info(\"%s\")", table);
    sqlite3_stmt *st = NULL;
    int n = 0;
    cols[0] = '\0';
    if (sqlite3_prepare_v2(old, sql, -1, &st, NULL) == SQLITE_OK)
        for (size_t used = 0; sqlite3_step(st) == SQLITE_ROW;) {
            const char *c = (const char *)sqlite3_column_text(st, 1);
            int w = snprintf(cols + used, len - used, "%s\"%s\"", used ? ", " : "", c ? c : "");
            if (w < 0 || used + (size_t)w >= len) {
                n = 0;
                break;
            }
            used += (size_t)w;
            n++;
        }
    sqlite3_finalize(st);
    return n;
}

enum next { NEXT_ROW, NEXT_DONE, NEXT_ERROR };

/* The first rowid above p (probe: SELECT rowid ... WHERE rowid > ?1 LIMIT 1). */
static enum next next_rowid(sqlite3_stmt *probe, int64_t p)
{
    sqlite3_reset(probe);
    sqlite3_bind_int64(probe, 1, p);
    int rc = sqlite3_step(probe);
    return rc == SQLITE_ROW ? NEXT_ROW : rc == SQLITE_DONE ? NEXT_DONE : NEXT_ERROR;
}

/* The smallest q > p from which the rowids read again; false when none. */
static bool step_over(sqlite3_stmt *probe, int64_t p, int64_t *ret_q)
{
    int64_t bad = p, good = 0, d = 1;
    for (;;) {
        if (p > INT64_MAX - d)
            return false;
        if (next_rowid(probe, p + d) != NEXT_ERROR) {
            good = p + d;
            break;
        }
        bad = p + d;
        if (d > INT64_MAX / 2)
            return false;
        d *= 2;
    }
    while (good - bad > 1) {
        int64_t mid = bad + (good - bad) / 2;
        if (next_rowid(probe, mid) != NEXT_ERROR)
            good = mid;
        else
            bad = mid;
    }
    *ret_q = good;
    return true;
}

/* The statements of one table's copy. */
struct table_copy {
    sqlite3_stmt *sel;   /* rowid (or 0), then the columns, from rowid > ?1 */
    sqlite3_stmt *probe; /* NULL for a table without rowids */
    sqlite3_stmt *ins;
    int ncols;
};

/* Copies the rows from rowid > p until the end (0) or a row that cannot be
 * read (1, *p the last rowid copied). */
static int copy_from(struct table_copy *c, int64_t *p, int64_t *unwritten)
{
    sqlite3_reset(c->sel);
    sqlite3_bind_int64(c->sel, 1, *p);
    int rc;
    while ((rc = sqlite3_step(c->sel)) == SQLITE_ROW) {
        sqlite3_reset(c->ins);
        for (int k = 0; k < c->ncols; k++)
            sqlite3_bind_value(c->ins, k + 1, sqlite3_column_value(c->sel, k + 1));
        *unwritten += sqlite3_step(c->ins) != SQLITE_DONE;
        *p = sqlite3_column_int64(c->sel, 0);
    }
    return rc == SQLITE_DONE ? 0 : 1;
}

static int prepare_copy(struct salvage *sv, const char *table, struct table_copy *c)
{
    char cols[1536], sql[4096], marks[512] = "";
    if ((c->ncols = old_columns(sv->old, table, cols, sizeof(cols))) == 0)
        return GPO_ENOENT;
    for (int k = 0; k < c->ncols && (size_t)k * 5 + 6 < sizeof(marks); k++)
        snprintf(marks + strlen(marks), sizeof(marks) - strlen(marks), "%s?%d", k ? "," : "",
                 k + 1);
    snprintf(sql, sizeof(sql), "SELECT rowid FROM \"%s\" WHERE rowid > ?1 ORDER BY rowid LIMIT 1",
             table);
    if (sqlite3_prepare_v2(sv->old, sql, -1, &c->probe, NULL) == SQLITE_OK)
        snprintf(sql, sizeof(sql), "SELECT rowid, %s FROM \"%s\" WHERE rowid > ?1 ORDER BY rowid",
                 cols, table);
    else
        snprintf(sql, sizeof(sql), "SELECT ?1, %s FROM \"%s\"", cols, table);
    if (sqlite3_prepare_v2(sv->old, sql, -1, &c->sel, NULL) != SQLITE_OK)
        return GPO_EIO;
    snprintf(sql, sizeof(sql), "INSERT OR IGNORE INTO \"%s\"(%s) VALUES (%s)", table, cols, marks);
    return sqlite3_prepare_v2(sv->db, sql, -1, &c->ins, NULL) == SQLITE_OK ? 0 : GPO_EIO;
}

/* Copies every readable row of the damaged table into the new one, in
 * rowid order, stepping over what cannot be read. */
static void copy_table(struct salvage *sv, const char *table)
{
    struct table_copy c = {0};
    int rc = prepare_copy(sv, table, &c);
    if (rc == GPO_ENOENT)
        note(sv, "%s: not found in the damaged database", table);
    else if (rc)
        note(sv, "%s: unreadable", table);
    int64_t p = 0, unwritten = 0, q;
    while (rc == 0 && copy_from(&c, &p, &unwritten)) {
        if (!c.probe) {
            note(sv, "%s: rows unreadable after the first ones", table);
            break;
        }
        if (!step_over(c.probe, p, &q)) {
            note(sv, "%s: rowids from %" PRId64 " unreadable", table, p + 1);
            break;
        }
        note(sv, "%s: rowids %" PRId64 "-%" PRId64 " unreadable", table, p + 1, q);
        p = q;
    }
    if (unwritten)
        note(sv, "%s: %" PRId64 " rows could not be written", table, unwritten);
    sqlite3_finalize(c.sel);
    sqlite3_finalize(c.probe);
    sqlite3_finalize(c.ins);
}

/* ---- the recovery ---------------------------------------------------------- */

static int add_range(struct store_recovery *rec, size_t *cap, int64_t first, int64_t last)
{
    if (rec->nlost == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        struct store_id_range *p = realloc(rec->lost, ncap * sizeof(*p));
        if (!p)
            return GPO_ENOMEM;
        rec->lost = p;
        *cap = ncap;
    }
    rec->lost[rec->nlost++] = (struct store_id_range){first, last};
    return 0;
}

/* The job ids 1..top that main.jobs lacks, as ranges into rec. */
static int lost_ranges(sqlite3 *db, int64_t top, struct store_recovery *rec)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT id FROM main.jobs ORDER BY id", -1, &st, NULL) != SQLITE_OK)
        return GPO_EIO;
    size_t cap = 0;
    int64_t expect = 1;
    int rc = 0, step;
    while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0);
        if (id > expect && expect <= top)
            rc = add_range(rec, &cap, expect, id - 1 < top ? id - 1 : top);
        expect = id + 1;
    }
    if (rc == 0 && step != SQLITE_DONE)
        rc = GPO_EIO;
    if (rc == 0 && expect <= top)
        rc = add_range(rec, &cap, expect, top);
    sqlite3_finalize(st);
    return rc;
}

static int exec_int(sqlite3 *db, const char *sql, int64_t v)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_bind_int64(st, 1, v)) == SQLITE_OK)
        rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    sqlite3_finalize(st);
    return rc;
}

/* The epoch and the job id sequence raised to at least epoch and seq. */
static int set_floors(sqlite3 *db, int64_t epoch, int64_t seq)
{
    int rc = exec_int(db,
                      "INSERT INTO meta(key, value) VALUES ('epoch', CAST(?1 AS TEXT))"
                      " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                      epoch);
    if (rc == SQLITE_OK &&
        (rc = exec_int(db, "UPDATE sqlite_sequence SET seq = ?1 WHERE name = 'jobs'", seq)) ==
            SQLITE_OK &&
        sqlite3_changes(db) == 0)
        rc = exec_int(db, "INSERT INTO sqlite_sequence(name, seq) VALUES ('jobs', ?1)", seq);
    return rc == SQLITE_OK ? 0 : GPO_EIO;
}

/* The tables of the new database, to copy. *ret: caller frees each and it. */
static int table_names(sqlite3 *db, char ***ret, size_t *ret_n)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db,
                           "SELECT name FROM main.sqlite_master WHERE type = 'table'"
                           " AND name NOT LIKE 'sqlite_%' ORDER BY name",
                           -1, &st, NULL) != SQLITE_OK)
        return GPO_EIO;
    char **names = NULL;
    size_t n = 0;
    int rc = 0;
    while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
        char **p = realloc(names, (n + 1) * sizeof(*p));
        if (!p || !(p[n] = strdup((const char *)sqlite3_column_text(st, 0))))
            rc = GPO_ENOMEM;
        if (p)
            names = p;
        if (rc == 0)
            n++;
    }
    sqlite3_finalize(st);
    *ret = names;
    *ret_n = n;
    return rc;
}

/* The new database at path: the current schema, every readable row of the
 * copy at scratch, the floors; the lost job ids into rec. */
static int rebuild(const char *path, const char *scratch, const struct sq_mark *mark,
                   struct store_recovery *rec, struct sq_mark *ret_mark, char *err, size_t errlen)
{
    struct salvage sv = {0};
    int rc = sqlite3_open_v2(path, &sv.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(sv.db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        rc = errbuf_set(err, errlen, GPO_EIO, "%s: %s", path,
                        sv.db ? sqlite3_errmsg(sv.db) : "cannot open");
        sqlite3_close(sv.db);
        return rc;
    }
    rc = schema_migrate(sv.db, STORE_SCHEMA_VERSION, err, errlen);
    if (sqlite3_open_v2(scratch, &sv.old, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK)
        note(&sv, "the damaged database cannot be opened: %s",
             sv.old ? sqlite3_errmsg(sv.old) : "out of memory");
    int64_t old_epoch = sq_query_int(sv.old, schema_epoch_sql);
    int64_t old_seq = sq_query_int(sv.old, "SELECT seq FROM sqlite_sequence WHERE name = 'jobs'");
    char **names = NULL;
    size_t n = 0;
    if (rc == 0 && sqlite3_exec(sv.db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        rc = errbuf_set(err, errlen, GPO_EIO, "%s: begin: %s", path, sqlite3_errmsg(sv.db));
    if (rc == 0 && (rc = table_names(sv.db, &names, &n)) != 0)
        errbuf_set(err, errlen, rc, "%s: listing its tables", path);
    for (size_t k = 0; rc == 0 && k < n; k++)
        copy_table(&sv, names[k]);
    for (size_t k = 0; k < n; k++)
        free(names[k]);
    free(names);
    int64_t epoch =
        sq_query_int(sv.db, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'epoch'");
    int64_t seq = sq_query_int(sv.db, "SELECT seq FROM sqlite_sequence WHERE name = 'jobs'");
    int64_t top = mark && mark->job_id > old_seq ? mark->job_id : old_seq;
    top = seq > top ? seq : top;
    int64_t floor = mark && mark->reserved > top ? mark->reserved : top;
    epoch = old_epoch > epoch ? old_epoch : epoch;
    epoch = mark && mark->epoch > epoch ? mark->epoch : epoch;
    if (rc == 0 && (rc = set_floors(sv.db, epoch, floor)) != 0)
        errbuf_set(err, errlen, rc, "%s: raising the epoch and job ids: %s", path,
                   sqlite3_errmsg(sv.db));
    /* The attempts and keys of lost jobs would name rows that are gone. */
    if (rc == 0 && sqlite3_exec(sv.db,
                                "DELETE FROM attempts WHERE job_id NOT IN (SELECT id FROM jobs);"
                                "DELETE FROM idempotency WHERE job_id NOT IN (SELECT id FROM jobs)",
                                NULL, NULL, NULL) != SQLITE_OK)
        rc = errbuf_set(err, errlen, GPO_EIO, "%s: %s", path, sqlite3_errmsg(sv.db));
    if (rc == 0 && (rc = lost_ranges(sv.db, top, rec)) != 0)
        errbuf_set(err, errlen, rc, "%s: listing the lost jobs", path);
    if (rc == 0 && sqlite3_exec(sv.db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        rc = errbuf_set(err, errlen, GPO_EIO, "%s: commit: %s", path, sqlite3_errmsg(sv.db));
    sqlite3_close(sv.old);
    if (sqlite3_close(sv.db) != SQLITE_OK && rc == 0)
        rc = errbuf_set(err, errlen, GPO_EIO, "%s: closing", path);
    snprintf(rec->notes, sizeof(rec->notes), "%s", sv.notes);
    rec->job_id_floor = floor;
    *ret_mark = (struct sq_mark){.epoch = epoch, .job_id = floor, .reserved = floor};
    return rc;
}

int sq_salvage(const char *path, const struct sq_mark *mark, const char *damage,
               struct store_recovery *rec, struct sq_mark *ret_mark, char *err, size_t errlen)
{
    *rec = (struct store_recovery){0};
    snprintf(rec->damage, sizeof(rec->damage), "%s", damage);
    int rc = make_folder(path, rec->moved_to, sizeof(rec->moved_to), err, errlen);
    bool moved = rc == 0 && (rc = move_aside(path, rec->moved_to, err, errlen)) == 0;
    char scratch[PATH_MAX_ * 2], from[PATH_MAX_ * 2], to[PATH_MAX_ * 3];
    snprintf(scratch, sizeof(scratch), "%s/salvage.db", rec->moved_to);
    for (size_t k = 0; rc == 0 && k < 2; k++) {
        snprintf(from, sizeof(from), "%s/%s%s", rec->moved_to, base_name(path), suffixes[k]);
        snprintf(to, sizeof(to), "%s%s", scratch, suffixes[k]);
        rc = copy_file(from, to, err, errlen);
    }
    /* Built beside the damaged files and renamed into place whole (its close
     * checkpoints it into one file), so that a crash in the middle never
     * leaves half a store under the database's name; the floors are in the
     * database itself before the mark is made. */
    char rebuilt[PATH_MAX_ * 2];
    snprintf(rebuilt, sizeof(rebuilt), "%s/rebuilt.db", rec->moved_to);
    struct sq_mark m = {0};
    if (rc == 0)
        rc = rebuild(rebuilt, scratch, mark, rec, &m, err, errlen);
    if (rc == 0 && rename(rebuilt, path) != 0)
        rc = errbuf_set(err, errlen, -errno, "rename %s to %s: %s", rebuilt, path, strerror(errno));
    if (rc == 0 && (rc = fsutil_fsync_dir(path)) != 0)
        errbuf_set(err, errlen, rc, "fsync of %s's folder: %s", path, strerror(-rc));
    for (size_t k = 0; k < 3; k++) {
        snprintf(to, sizeof(to), "%s%s", scratch, suffixes[k]);
        (void)unlink(to);
        snprintf(to, sizeof(to), "%s%s", rebuilt, suffixes[k]);
        (void)unlink(to);
    }
    char mark_path[PATH_MAX_ + 8];
    snprintf(mark_path, sizeof(mark_path), "%s.mark", path);
    int fd = -1;
    if (rc == 0 && (rc = sq_mark_create(mark_path, &m, &fd, err, errlen)) == 0)
        close(fd);
    if (rc) {
        size_t n = err ? strlen(err) : 0;
        if (moved && n + 1 < errlen)
            snprintf(err + n, errlen - n, " (the damaged files are in %s)", rec->moved_to);
        store_recovery_release(rec);
        return rc;
    }
    rec->recovered = true;
    *ret_mark = m;
    return 0;
}

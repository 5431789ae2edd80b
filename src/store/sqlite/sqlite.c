/*
 * sqlite.c - the SQLite backend: two connections to one WAL database (one
 * the writer thread's, one for reads under a mutex), the group transaction
 * the writer (backend.h) runs with the statements of schema.c; the reads are
 * in sqlite_read.c, what the two share in sqlite.h.
 *
 * Decisions the header leaves open:
 *  - A group (everything the writer took at once) runs as BEGIN IMMEDIATE,
 *    one SAVEPOINT per batch (ROLLBACK TO on the batch's first error), COMMIT.
 *    When BEGIN or COMMIT fails, or SQLite abandons the whole transaction
 *    after an I/O error, every batch of the group fails with GPO_EIO, even
 *    one that had failed on its own: nothing of the group was written, and
 *    a verdict such as "key already used by job N" may name a job that was
 *    in the lost transaction.
 *  - The schema version is read before anything else touches the file, so a
 *    database from a newer program is refused unchanged (not even switched
 *    to WAL).
 *  - The read connection is a second read-write connection with
 *    query_only set: a read-only one could not rebuild the WAL index after
 *    a crash.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "store/backend.h"
#include "store/sqlite/mark.h"
#include "store/sqlite/schema.h"
#include "store/sqlite/sqlite.h"
#include "store/sqlite/wal.h"
#include "store/store.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define BUSY_TIMEOUT_MS   5000
#define CHECKPOINT_FRAMES 1000 /* SQLite's automatic checkpoint, which the WAL hook replaces */

/* ---- the write operations ---------------------------------------------- */

/* One batch being run by the writer. */
struct run {
    struct sq *s;
    struct store_batch *b;
    size_t opno;  /* of the operation running, for messages */
    size_t njobs; /* job inserts done so far */
};

static int bind_int(sqlite3_stmt *st, int idx, int64_t i)
{
    return i == STORE_NULL ? sqlite3_bind_null(st, idx) : sqlite3_bind_int64(st, idx, i);
}

/* Binds v[k] to ?k+1 for every parameter st has. The values outlive the
 * statement's use (they are the batch's), hence SQLITE_STATIC. */
static int bind_vals(sqlite3_stmt *st, const struct store_val *v)
{
    int n = sqlite3_bind_parameter_count(st), rc = SQLITE_OK;
    for (int k = 0; rc == SQLITE_OK && k < n && k < STORE_OP_MAXVALS; k++) {
        if (v[k].s && v[k].blob)
            rc = sqlite3_bind_blob64(st, k + 1, v[k].s, v[k].n, SQLITE_STATIC);
        else if (v[k].s)
            rc = sqlite3_bind_text64(st, k + 1, v[k].s, v[k].n, SQLITE_STATIC, SQLITE_UTF8);
        else
            rc = bind_int(st, k + 1, v[k].i);
    }
    return rc;
}

static int op_fail(struct run *r, int rc)
{
    return store_batch_fail(r->b, store_sqlite_err(rc), "operation %zu (%s): %s", r->opno,
                            schema_ops[r->b->ops[r->opno].kind].name, sqlite3_errmsg(r->s->wdb));
}

/* Steps st to its end; with ret_row, the first row's first column goes there
 * (*ret_found says whether there was one). Leaves st reset either way. */
static int step(struct run *r, sqlite3_stmt *st, bool *ret_found, int64_t *ret_row)
{
    bool found = false;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (ret_row && !found) {
            *ret_row = sqlite3_column_int64(st, 0);
            found = true;
        }
    int err = rc == SQLITE_DONE ? 0 : op_fail(r, rc);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (err == 0 && ret_found)
        *ret_found = found;
    return err;
}

static int run_job_insert(struct run *r, const struct store_op *op, sqlite3_stmt *const *st)
{
    const struct store_val *v = op->v;
    struct store_batch *b = r->b;
    const struct store_val *key = &v[STORE_JOB_V_IDEM_KEY];
    int rc;
    if (key->s) {
        bool found = false;
        int64_t existing = 0;
        if ((rc = bind_vals(st[0], v)) != SQLITE_OK)
            return op_fail(r, rc);
        if ((rc = step(r, st[0], &found, &existing)) != 0)
            return rc;
        if (found) {
            b->existing_job_id = existing;
            return store_batch_fail(b, GPO_EEXIST,
                                    "operation %zu (job_insert): idempotency key already used "
                                    "by job %lld",
                                    r->opno, (long long)existing);
        }
    }
    int64_t array_id = v[STORE_JOB_V_ARRAY_ID].i;
    bool self = array_id == STORE_ARRAY_FIRST && r->njobs == 0;
    if (array_id == STORE_ARRAY_FIRST)
        array_id = self ? STORE_NULL : b->job_ids[0];
    if ((rc = bind_vals(st[1], v)) != SQLITE_OK ||
        (rc = bind_int(st[1], 1 + STORE_JOB_V_ARRAY_ID, array_id)) != SQLITE_OK)
        return op_fail(r, rc);
    if ((rc = step(r, st[1], NULL, NULL)) != 0)
        return rc;
    int64_t id = sqlite3_last_insert_rowid(r->s->wdb);
    if (self) {
        if ((rc = sqlite3_bind_int64(st[2], 1, id)) != SQLITE_OK)
            return op_fail(r, rc);
        if ((rc = step(r, st[2], NULL, NULL)) != 0)
            return rc;
    }
    if (key->s) {
        if ((rc = bind_int(st[3], 1, v[STORE_JOB_V_USER].i)) != SQLITE_OK ||
            (rc = sqlite3_bind_text64(st[3], 2, key->s, key->n, SQLITE_STATIC, SQLITE_UTF8)) !=
                SQLITE_OK ||
            (rc = sqlite3_bind_int64(st[3], 3, id)) != SQLITE_OK ||
            (rc = bind_int(st[3], 4, v[STORE_JOB_V_SUBMIT].i)) != SQLITE_OK)
            return op_fail(r, rc);
        if ((rc = step(r, st[3], NULL, NULL)) != 0)
            return rc;
    }
    b->job_ids[r->njobs++] = id;
    return 0;
}

static int run_epoch_bump(struct run *r, const struct store_op *op, sqlite3_stmt *const *st)
{
    (void)op;
    bool found = false;
    int64_t epoch = 0;
    int rc = step(r, st[0], &found, &epoch);
    if (rc == 0 && !found)
        return store_batch_fail(r->b, GPO_EIO, "the epoch was not returned");
    if (rc == 0)
        r->b->new_epoch = epoch;
    return rc;
}

typedef int (*op_run_fn)(struct run *r, const struct store_op *op, sqlite3_stmt *const *st);

/* The operations whose statements are not simply run in turn. */
static const op_run_fn op_runs[STORE_OP_COUNT] = {
    [STORE_OP_JOB_INSERT] = run_job_insert,
    [STORE_OP_EPOCH_BUMP] = run_epoch_bump,
};

static int run_op(struct run *r, size_t opno)
{
    const struct store_op *op = &r->b->ops[opno];
    const struct schema_op *d = &schema_ops[op->kind];
    sqlite3_stmt *const *st = r->s->wst[op->kind];
    r->opno = opno;
    if (op_runs[op->kind])
        return op_runs[op->kind](r, op, st);
    for (size_t k = 0; k < SCHEMA_OP_MAXSQL && d->sql[k]; k++) {
        int rc = bind_vals(st[k], op->v);
        if (rc != SQLITE_OK)
            return op_fail(r, rc);
        if ((rc = step(r, st[k], NULL, NULL)) != 0)
            return rc;
    }
    if ((d->flags & SCHEMA_OP_CHANGES) && sqlite3_changes(r->s->wdb) == 0)
        return store_batch_fail(r->b, GPO_ENOENT, "operation %zu (%s): not found", opno, d->name);
    return 0;
}

static int check_epoch(struct run *r)
{
    bool found = false;
    int64_t cur = 0;
    int rc = step(r, r->s->epoch_st, &found, &cur);
    if (rc)
        return rc;
    if (!found)
        cur = 0;
    if (r->b->epoch < cur)
        return store_batch_fail(r->b, GPO_EFENCED, "epoch %lld is older than the store's %lld",
                                (long long)r->b->epoch, (long long)cur);
    if (r->b->epoch > cur)
        return store_batch_fail(r->b, GPO_EINVAL, "epoch %lld was never acquired (latest %lld)",
                                (long long)r->b->epoch, (long long)cur);
    return 0;
}

/* Runs one batch inside its own savepoint; on failure only the batch is
 * undone. The outcome is left in b. */
static void run_batch(struct sq *s, struct store_batch *b)
{
    struct run r = {.s = s, .b = b};
    b->err = 0;
    b->msg[0] = '\0';
    int rc = sqlite3_exec(s->wdb, "SAVEPOINT batch", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        store_batch_fail(b, GPO_EIO, "savepoint: %s", sqlite3_errmsg(s->wdb));
        return;
    }
    int err = b->epoch ? check_epoch(&r) : 0;
    for (size_t k = 0; err == 0 && k < b->nops; k++)
        err = run_op(&r, k);
    if (err == 0 && sqlite3_exec(s->wdb, "RELEASE batch", NULL, NULL, NULL) != SQLITE_OK)
        err = store_batch_fail(b, GPO_EIO, "release: %s", sqlite3_errmsg(s->wdb));
    if (err && !sqlite3_get_autocommit(s->wdb)) {
        sqlite3_exec(s->wdb, "ROLLBACK TO batch", NULL, NULL, NULL);
        sqlite3_exec(s->wdb, "RELEASE batch", NULL, NULL, NULL);
    }
}

/* The WAL's salts, read from its header (the file SQLite appends to). */
static bool wal_salts(struct sq *s, struct sq_wal_pos *pos)
{
    if (s->wal_fd < 0)
        s->wal_fd = open(s->wal_path, O_RDONLY | O_CLOEXEC);
    uint8_t h[SQ_WAL_HEADER];
    if (s->wal_fd < 0 || pread(s->wal_fd, h, sizeof(h), 0) != (ssize_t)sizeof(h))
        return false;
    pos->salt1 = (uint32_t)h[16] << 24 | (uint32_t)h[17] << 16 | (uint32_t)h[18] << 8 | h[19];
    pos->salt2 = (uint32_t)h[20] << 24 | (uint32_t)h[21] << 16 | (uint32_t)h[22] << 8 | h[23];
    return true;
}

/*
 * After a group's commit, before any of its completions: the mark learns
 * the highest job id, the epoch and the commit's WAL frame. A new epoch and
 * ids past the reservation are fsynced; the rest is a pwrite. A write that
 * fails leaves the mark older, which only weakens the next start's checks;
 * the next commit writes it again.
 */
static void mark_commit(struct sq *s, const struct store_batch *group)
{
    if (s->mark_fd < 0)
        return;
    struct sq_mark m = s->mark;
    bool sync = false;
    for (const struct store_batch *b = group; b; b = b->next) {
        for (size_t k = 0; b->err == 0 && k < b->njobs; k++)
            m.job_id = b->job_ids[k] > m.job_id ? b->job_ids[k] : m.job_id;
        if (b->err == 0 && b->new_epoch > m.epoch) {
            m.epoch = b->new_epoch;
            sync = true;
        }
    }
    if (m.job_id > m.reserved) {
        m.reserved = (m.job_id / SQ_MARK_RESERVE + 1) * SQ_MARK_RESERVE;
        sync = true;
    }
    /* An unreadable WAL header keeps the position last recorded: frame 0
     * means "nothing acknowledged in the WAL", which this commit is not. */
    if (wal_salts(s, &m.wal))
        m.wal.frame = s->wal_frame;
    if (sq_mark_write(s->mark_fd, &m, sync || s->mark_dirty) == 0) {
        s->mark = m;
        s->mark_dirty = false;
    } else {
        s->mark_dirty = true;
    }
}

/* sqlite3_wal_hook: after each commit on the write connection, with the
 * WAL's frame count (the commit's frame); checkpoints as SQLite would. */
static int wal_hook(void *ctx, sqlite3 *db, const char *name, int frames)
{
    struct sq *s = ctx;
    s->wal_frame = frames > 0 ? (uint32_t)frames : 0;
    if (frames >= CHECKPOINT_FRAMES)
        (void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    return SQLITE_OK;
}

/* store_group_fn: one transaction for the whole group. */
static void run_group(void *backend, struct store_batch *group)
{
    struct sq *s = backend;
    char txmsg[sizeof(group->msg)] = "";
    int rc = sqlite3_exec(s->wdb, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        snprintf(txmsg, sizeof(txmsg), "begin: %s", sqlite3_errmsg(s->wdb));
    for (struct store_batch *b = group; rc == SQLITE_OK && b; b = b->next) {
        run_batch(s, b);
        if (sqlite3_get_autocommit(s->wdb)) { /* SQLite gave the transaction up */
            snprintf(txmsg, sizeof(txmsg), "transaction rolled back: %.200s", b->msg);
            rc = SQLITE_ABORT;
        }
    }
    if (rc == SQLITE_OK && (rc = sqlite3_exec(s->wdb, "COMMIT", NULL, NULL, NULL)) != SQLITE_OK) {
        snprintf(txmsg, sizeof(txmsg), "commit: %s", sqlite3_errmsg(s->wdb));
        if (!sqlite3_get_autocommit(s->wdb))
            sqlite3_exec(s->wdb, "ROLLBACK", NULL, NULL, NULL);
    }
    for (struct store_batch *b = group; rc != SQLITE_OK && b; b = b->next) {
        b->existing_job_id = 0;
        store_batch_fail(b, GPO_EIO, "%s", txmsg);
    }
    if (rc == SQLITE_OK)
        mark_commit(s, group);
}

static int sq_commit(struct store *base, struct store_batch *b, store_done_fn done, void *ctx)
{
    return store_writer_commit(&to_sq(base)->writer, b, done, ctx);
}

static void sq_get_stats(struct store *base, struct store_stats *ret)
{
    store_writer_stats(&to_sq(base)->writer, ret);
}

static void sq_pause_writer(struct store *base)
{
    store_writer_pause(&to_sq(base)->writer);
}

static void sq_resume_writer(struct store *base)
{
    store_writer_resume(&to_sq(base)->writer);
}

/* ---- opening and closing ---------------------------------------------------- */

/* Also a half-opened store: the writer (its thread, if started, commits what
 * is queued and is joined) goes before the connections it writes on. */
static void sq_free(struct sq *s)
{
    store_writer_release(&s->writer);
    if (s->mark_fd >= 0) {
        /* Clean: the close checkpoints and removes the WAL, so no commit in
         * it is to be expected; synced first, or a power loss could leave a
         * mark that asks for a WAL that is gone. */
        struct sq_mark m = s->mark;
        m.wal = (struct sq_wal_pos){0};
        (void)sq_mark_write(s->mark_fd, &m, true);
        close(s->mark_fd);
    }
    if (s->wal_fd >= 0)
        close(s->wal_fd);
    for (size_t k = 0; k < STORE_OP_COUNT; k++)
        for (size_t i = 0; i < SCHEMA_OP_MAXSQL; i++)
            sqlite3_finalize(s->wst[k][i]);
    sqlite3_finalize(s->epoch_st);
    for (size_t k = 0; s->rst && k < RQ_COUNT; k++)
        sqlite3_finalize(s->rst[k]);
    free(s->rst);
    sqlite3_close(s->rdb); /* the last to close checkpoints and removes the WAL */
    sqlite3_close(s->wdb);
    if (s->rlock_ready)
        pthread_mutex_destroy(&s->rlock);
    free(s);
}

static void sq_close(struct store *base)
{
    sq_free(to_sq(base));
}

static const struct store_ops sqlite_ops = {
    .commit = sq_commit,
    .get_stats = sq_get_stats,
    .pause_writer = sq_pause_writer,
    .resume_writer = sq_resume_writer,
    .last_error = sq_last_error,
    .meta_get = sq_meta_get,
    .user_get_by_name = sq_user_get_by_name,
    .user_get_by_id = sq_user_get_by_id,
    .user_get_by_token = sq_user_get_by_token,
    .user_list = sq_user_list,
    .config_get = sq_config_get,
    .config_list = sq_config_list,
    .node_list = sq_node_list,
    .job_get = sq_job_get,
    .job_list = sq_job_list,
    .job_scan_active = sq_job_scan_active,
    .sched_state_get = sq_sched_state_get,
    .idempotency_get = sq_idempotency_get,
    .close = sq_close,
    .ledger_range = sq_ledger_range,
    .minutes_get = sq_minutes_get,
    .shared = false,
    .lease_acquire = sq_lease_acquire,
    .lease_renew = sq_lease_renew,
    .lease_release = sq_lease_release,
    .lease_get = sq_lease_get,
};

static int prepare(sqlite3 *db, const char *sql, sqlite3_stmt **ret, char *err, size_t errlen)
{
    int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, ret, NULL);
    if (rc != SQLITE_OK)
        return errbuf_set(err, errlen, store_sqlite_err(rc), "preparing \"%.60s\": %s", sql,
                          sqlite3_errmsg(db));
    return 0;
}

static int open_db(sqlite3 **db, const char *path, int flags, char *err, size_t errlen)
{
    int rc = sqlite3_open_v2(path, db, flags | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK)
        return errbuf_set(err, errlen, GPO_EIO, "opening %s: %s", path,
                          *db ? sqlite3_errmsg(*db) : sqlite3_errstr(rc));
    sqlite3_extended_result_codes(*db, 1);
    sqlite3_busy_timeout(*db, BUSY_TIMEOUT_MS);
    return 0;
}

/* On the write connection sq_alloc opened. */
static int open_writer(struct sq *s, const char *path, char *err, size_t errlen)
{
    int64_t version = 0;
    int rc = schema_version_get(s->wdb, &version, err, errlen);
    if (rc == 0 && version > STORE_SCHEMA_VERSION)
        return errbuf_set(err, errlen, GPO_ETOONEW,
                          "%s: database schema version %lld is newer than this program's %d", path,
                          (long long)version, STORE_SCHEMA_VERSION);
    if (rc)
        return rc;
    sqlite3_stmt *st = NULL;
    rc = sqlite3_prepare_v2(s->wdb, "PRAGMA journal_mode = WAL", -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    const char *mode = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
    bool wal = mode && strcmp(mode, "wal") == 0;
    sqlite3_finalize(st);
    if (!wal)
        return errbuf_set(err, errlen, GPO_EIO, "%s: cannot use WAL mode: %s", path,
                          rc == SQLITE_ROW ? "refused" : sqlite3_errmsg(s->wdb));
    rc = sqlite3_exec(s->wdb, "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON", NULL, NULL,
                      NULL);
    if (rc != SQLITE_OK)
        return errbuf_set(err, errlen, GPO_EIO, "%s: %s", path, sqlite3_errmsg(s->wdb));
    rc = schema_migrate(s->wdb, STORE_SCHEMA_VERSION, err, errlen);
    for (size_t k = 0; rc == 0 && k < STORE_OP_COUNT; k++)
        for (size_t i = 0; rc == 0 && i < SCHEMA_OP_MAXSQL && schema_ops[k].sql[i]; i++)
            rc = prepare(s->wdb, schema_ops[k].sql[i], &s->wst[k][i], err, errlen);
    if (rc == 0)
        rc = prepare(s->wdb, schema_epoch_sql, &s->epoch_st, err, errlen);
    return rc;
}

static int open_reader(struct sq *s, const char *path, char *err, size_t errlen)
{
    int rc = open_db(&s->rdb, path, SQLITE_OPEN_READWRITE, err, errlen);
    if (rc == 0 && sqlite3_exec(s->rdb, "PRAGMA query_only = ON", NULL, NULL, NULL) != SQLITE_OK)
        rc = errbuf_set(err, errlen, GPO_EIO, "%s: %s", path, sqlite3_errmsg(s->rdb));
    // NOLINTNEXTLINE(bugprone-sizeof-expression): *p is a pointer (an array of them)
    if (rc == 0 && !(s->rst = calloc(RQ_COUNT, sizeof(*s->rst))))
        rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    for (size_t k = 0; rc == 0 && k < RQ_COUNT; k++)
        rc = prepare(s->rdb, sq_rq_sql[k], &s->rst[k], err, errlen);
    return rc;
}

static int init_sync(struct sq *s)
{
    int rc = store_writer_init(&s->writer, run_group, s);
    if (rc)
        return rc;
    if (pthread_mutex_init(&s->rlock, NULL))
        return GPO_ENOMEM;
    s->rlock_ready = true;
    return 0;
}

/* A store object with the write connection open, checkpoint on close off:
 * a store refused for damage leaves its files as they were. */
static int sq_alloc(const char *path, struct sq **ret, char *err, size_t errlen)
{
    struct sq *s = calloc(1, sizeof(*s));
    if (!s)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    s->base.ops = &sqlite_ops;
    s->mark_fd = s->wal_fd = -1;
    snprintf(s->wal_path, sizeof(s->wal_path), "%s-wal", path);
    int rc = init_sync(s);
    if (rc)
        errbuf_set(err, errlen, rc, "cannot create the store's locks");
    if (rc == 0)
        rc = open_db(&s->wdb, path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, err, errlen);
    if (rc == 0)
        sqlite3_db_config(s->wdb, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
    if (rc) {
        sq_free(s);
        return rc;
    }
    *ret = s;
    return 0;
}

/*
 * Before SQLite opens the database: the mark, and the WAL against the
 * mark's last acknowledged commit. Damage goes into `damage` (rc 0); an
 * error reading them is returned.
 */
static int check_files(const char *path, const char *mark_path, struct sq_mark *mark,
                       bool *have_mark, char *damage, size_t dlen, char *err, size_t errlen)
{
    int rc = sq_mark_read(mark_path, mark, damage, dlen);
    *have_mark = rc == 0;
    if (rc != 0 && rc != GPO_ENOENT && rc != GPO_ECORRUPT)
        return errbuf_set(err, errlen, rc, "%s", damage);
    if (rc == GPO_ENOENT)
        damage[0] = '\0';
    struct stat st;
    bool db_exists = stat(path, &st) == 0;
    if (!damage[0] && !db_exists && *have_mark)
        (void)errbuf_set(damage, dlen, GPO_ECORRUPT,
                         "%s: missing, but %s records a store (epoch %lld, jobs up to %lld)", path,
                         mark_path, (long long)mark->epoch, (long long)mark->job_id);
    if (damage[0] || !db_exists)
        return 0;
    char wal_path[4200];
    snprintf(wal_path, sizeof(wal_path), "%s-wal", path);
    struct sq_wal_info info;
    rc = sq_wal_check(wal_path, *have_mark ? &mark->wal : NULL, &info, damage, dlen);
    if (rc != 0 && rc != GPO_ECORRUPT)
        return errbuf_set(err, errlen, rc, "%s", damage);
    return 0;
}

/* The rest of the open, past the checks: schema, connections, mark, writer. */
static int finish_open(struct sq *s, const char *path, const char *mark_path, bool have_mark,
                       const struct sq_mark *mark, char *err, size_t errlen)
{
    int rc = open_writer(s, path, err, errlen);
    if (rc == 0)
        rc = open_reader(s, path, err, errlen);
    struct sq_mark m = have_mark ? *mark : (struct sq_mark){0};
    int fd = -1;
    if (rc == 0 && !have_mark) {
        /* A new store, or one older than its mark: the mark starts from it. */
        m.epoch = sq_query_int(s->wdb, schema_epoch_sql);
        m.job_id = m.reserved =
            sq_query_int(s->wdb, "SELECT seq FROM sqlite_sequence WHERE name = 'jobs'");
        rc = sq_mark_create(mark_path, &m, &fd, err, errlen);
    } else if (rc == 0 && (rc = sq_mark_open(mark_path, &fd)) != 0) {
        errbuf_set(err, errlen, rc, "%s: %s", mark_path, strerror(-rc));
    }
    if (rc == 0) {
        s->mark = m;
        sqlite3_wal_hook(s->wdb, wal_hook, s);
        sqlite3_db_config(s->wdb, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, NULL);
    }
    if (rc == 0 && store_writer_start(&s->writer) != 0)
        rc = errbuf_set(err, errlen, GPO_ENOMEM, "cannot start the writer thread");
    if (rc && fd >= 0)
        close(fd);
    if (rc == 0)
        s->mark_fd = fd; /* only a store that opened writes its mark on close */
    return rc;
}

int store_open_sqlite_opts(const char *path, unsigned flags, struct store_recovery *rec,
                           struct store **ret_store, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (rec)
        *rec = (struct store_recovery){0};
    if (!path || !*path || !ret_store || strlen(path) > 4000)
        return errbuf_set(err, errlen, GPO_EINVAL, "no database path, or one too long");
    char mark_path[4200], damage[1024] = "";
    snprintf(mark_path, sizeof(mark_path), "%s.mark", path);
    struct sq_mark mark = {0};
    bool have_mark = false;
    struct sq *s = NULL;
    int rc = check_files(path, mark_path, &mark, &have_mark, damage, sizeof(damage), err, errlen);
    if (rc == 0 && !damage[0] && (rc = sq_alloc(path, &s, err, errlen)) == 0) {
        rc = sq_check_db(s->wdb, path, have_mark ? &mark : NULL, damage, sizeof(damage));
        if (rc == GPO_ECORRUPT)
            rc = 0;
        else if (rc)
            errbuf_set(err, errlen, rc, "%s", damage);
    }
    if (rc == 0 && damage[0]) {
        if (s)
            sq_free(s);
        s = NULL;
        if (!(flags & STORE_OPEN_RECOVER))
            return errbuf_set(err, errlen, GPO_ECORRUPT, "%s", damage);
        struct store_recovery r;
        rc = sq_salvage(path, have_mark ? &mark : NULL, damage, &r, &mark, err, errlen);
        if (rc)
            return rc;
        have_mark = true;
        if (rec)
            *rec = r;
        else
            store_recovery_release(&r);
        rc = sq_alloc(path, &s, err, errlen);
    }
    if (rc == 0)
        rc = finish_open(s, path, mark_path, have_mark, &mark, err, errlen);
    if (rc) {
        if (s)
            sq_free(s);
        if (rec)
            store_recovery_release(rec);
        return rc;
    }
    *ret_store = &s->base;
    return 0;
}

int store_open_sqlite(const char *path, struct store **ret_store, char *err, size_t errlen)
{
    return store_open_sqlite_opts(path, 0, NULL, ret_store, err, errlen);
}

int store_sqlite_pragma(struct store *base, const char *name, char *buf, size_t len)
{
    if (!base || base->ops != &sqlite_ops || !name || !*name || !buf || !len)
        return GPO_EINVAL;
    if (strspn(name, "abcdefghijklmnopqrstuvwxyz_") != strlen(name) || strlen(name) > 40)
        return GPO_EINVAL;
    struct sq *s = to_sq(base);
    char sql[64];
    snprintf(sql, sizeof(sql), "PRAGMA %s", name);
    sq_pause_writer(base); /* the write connection is the writer's otherwise */
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->wdb, sql, -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    const unsigned char *text = rc == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
    snprintf(buf, len, "%s", text ? (const char *)text : "");
    sqlite3_finalize(st);
    sq_resume_writer(base);
    return rc == SQLITE_ROW ? 0 : GPO_EIO;
}

/*
 * sqlite.c - the SQLite backend: two connections to one WAL database (one
 * the writer thread's, one for reads under a mutex), the writer's group
 * commit running the statements of schema.c, and the reads.
 *
 * Decisions the header leaves open:
 *  - The writer takes everything queued at once: BEGIN IMMEDIATE, one
 *    SAVEPOINT per batch (ROLLBACK TO on the batch's first error), COMMIT.
 *    When BEGIN or COMMIT fails, or SQLite abandons the whole transaction
 *    after an I/O error, every batch of the group fails with STORE_EIO, even
 *    one that had failed on its own: nothing of the group was written, and
 *    a verdict such as "key already used by job N" may name a job that was
 *    in the lost transaction.
 *  - Completions run after COMMIT, in queue order, without any lock held.
 *  - Close commits what is queued (a normal group) rather than failing it:
 *    that is what its callers asked for, and it costs one transaction.
 *  - The schema version is read before anything else touches the file, so a
 *    database from a newer program is refused unchanged (not even switched
 *    to WAL).
 *  - The read connection is a second read-write connection with
 *    query_only set: a read-only one could not rebuild the WAL index after
 *    a crash.
 *  - A job row and its attempts are read in one read transaction, so they
 *    come from the same commit.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "store/schema.h"
#include "store/store.h"
#include "util/errbuf.h"
#include "util/banned.h"

#define BUSY_TIMEOUT_MS 5000

struct sq {
    struct store base;
    sqlite3 *wdb; /* the writer thread's (and the opener's, before it starts) */
    sqlite3 *rdb; /* reads, under rlock */
    sqlite3_stmt *wst[STORE_OP_COUNT][SCHEMA_OP_MAXSQL];
    sqlite3_stmt *epoch_st;
    sqlite3_stmt **rst; /* [RQ_COUNT] */
    /* lock guards the queue, the flags and the stats */
    pthread_mutex_t lock;
    pthread_cond_t wake; /* the writer waits for work or close */
    pthread_cond_t idle; /* pausers wait for the writer's group to end */
    pthread_mutex_t rlock;
    bool sync_ready, writer_started;
    pthread_t writer;
    struct store_batch *head, **tail;
    bool closing, busy;
    unsigned pauses;
    struct store_stats stats;
    char rerr[256]; /* the latest read error, under rlock */
};

static struct sq *to_sq(struct store *s)
{
    return (struct sq *)s; /* base is the first member */
}

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
            return store_batch_fail(b, STORE_EEXIST,
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
        return store_batch_fail(r->b, STORE_EIO, "the epoch was not returned");
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
        return store_batch_fail(r->b, STORE_ENOTFOUND, "operation %zu (%s): not found", opno,
                                d->name);
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
        return store_batch_fail(r->b, STORE_EFENCED, "epoch %lld is older than the store's %lld",
                                (long long)r->b->epoch, (long long)cur);
    if (r->b->epoch > cur)
        return store_batch_fail(r->b, STORE_EINVAL, "epoch %lld was never acquired (latest %lld)",
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
        store_batch_fail(b, STORE_EIO, "savepoint: %s", sqlite3_errmsg(s->wdb));
        return;
    }
    int err = b->epoch ? check_epoch(&r) : 0;
    for (size_t k = 0; err == 0 && k < b->nops; k++)
        err = run_op(&r, k);
    if (err == 0 && (rc = sqlite3_exec(s->wdb, "RELEASE batch", NULL, NULL, NULL)) != SQLITE_OK)
        err = store_batch_fail(b, STORE_EIO, "release: %s", sqlite3_errmsg(s->wdb));
    if (err && !sqlite3_get_autocommit(s->wdb)) {
        sqlite3_exec(s->wdb, "ROLLBACK TO batch", NULL, NULL, NULL);
        sqlite3_exec(s->wdb, "RELEASE batch", NULL, NULL, NULL);
    }
}

/* One transaction for the whole group, then every completion. */
static void run_group(struct sq *s, struct store_batch *group)
{
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
    uint64_t n = 0, nfailed = 0;
    for (struct store_batch *b = group; b; b = b->next, n++) {
        if (rc != SQLITE_OK) {
            b->existing_job_id = 0;
            store_batch_fail(b, STORE_EIO, "%s", txmsg);
        }
        nfailed += b->err != 0;
    }
    pthread_mutex_lock(&s->lock);
    s->stats.transactions++;
    s->stats.batches += n;
    s->stats.batches_failed += nfailed;
    pthread_mutex_unlock(&s->lock);
    for (struct store_batch *b = group, *next; b; b = next) {
        next = b->next;
        store_batch_complete(b);
    }
}

static void *writer_main(void *arg)
{
    struct sq *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->closing && (s->pauses > 0 || !s->head))
            pthread_cond_wait(&s->wake, &s->lock);
        if (!s->head)
            break; /* closing, and nothing left */
        struct store_batch *group = s->head;
        s->head = NULL;
        s->tail = &s->head;
        s->stats.queued = 0;
        s->busy = true;
        pthread_mutex_unlock(&s->lock);
        run_group(s, group);
        pthread_mutex_lock(&s->lock);
        s->busy = false;
        pthread_cond_broadcast(&s->idle);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static int sq_commit(struct store *base, struct store_batch *b, store_done_fn done, void *ctx)
{
    struct sq *s = to_sq(base);
    pthread_mutex_lock(&s->lock);
    if (s->closing) {
        pthread_mutex_unlock(&s->lock);
        return STORE_ECLOSED;
    }
    b->next = NULL;
    b->done = done;
    b->ctx = ctx;
    *s->tail = b;
    s->tail = &b->next;
    s->stats.queued++;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

static void sq_get_stats(struct store *base, struct store_stats *ret)
{
    struct sq *s = to_sq(base);
    pthread_mutex_lock(&s->lock);
    *ret = s->stats;
    pthread_mutex_unlock(&s->lock);
}

static void sq_pause_writer(struct store *base)
{
    struct sq *s = to_sq(base);
    pthread_mutex_lock(&s->lock);
    s->pauses++;
    while (s->busy)
        pthread_cond_wait(&s->idle, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

static void sq_resume_writer(struct store *base)
{
    struct sq *s = to_sq(base);
    pthread_mutex_lock(&s->lock);
    if (s->pauses > 0)
        s->pauses--;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
}

/* ---- reads ---------------------------------------------------------------- */

#define USER_COLS "id, name, unix_user, team, role, created_ms"
#define JOB_COLS                                                                                   \
    "id, user_id, team, state, submit_ms, updated_ms, array_id, array_index, reason, spec"
#define ATTEMPT_COLS                                                                               \
    "job_id, attempt, state, nodes, gpus, start_ms, end_ms, exit_code, signal, reason, epoch"
#define JOB_NCOLS 10
#define MINUTE_COLS                                                                                \
    "key, label, minute_ms, samples, util_sum, util_max, idle_samples, mem_used_sum_mib,"          \
    " mem_used_max_mib, power_sum_mw, temp_max_c"
#define ACTIVE_IN "('" STORE_JOB_PENDING "', '" STORE_JOB_RUNNING "', '" STORE_JOB_PREEMPTED "')"

enum rq {
    RQ_META,
    RQ_USER_BY_NAME,
    RQ_USER_BY_ID,
    RQ_USER_BY_TOKEN,
    RQ_USER_LIST,
    RQ_CONFIG_GET, /* + enum store_config_kind */
    RQ_CONFIG_LIST = RQ_CONFIG_GET + STORE_CONFIG_COUNT,
    RQ_NODE_LIST = RQ_CONFIG_LIST + STORE_CONFIG_COUNT,
    RQ_JOB,
    RQ_ATTEMPTS,
    RQ_ACTIVE,
    RQ_SCHED_STATE,
    RQ_IDEMPOTENCY,
    RQ_LEDGER_RANGE,
    RQ_MINUTES,     /* metric minutes of a kind in a range */
    RQ_MINUTES_KEY, /* ... of one key */
    RQ_BEGIN,
    RQ_COMMIT,
    RQ_COUNT
};

#define CONFIG_GET(t)  "SELECT name, spec, updated_ms FROM " t " WHERE name = ?1"
#define CONFIG_LIST(t) "SELECT name, spec, updated_ms FROM " t " ORDER BY name"

static const char *const rq_sql[RQ_COUNT] = {
    [RQ_META] = "SELECT value FROM meta WHERE key = ?1",
    [RQ_USER_BY_NAME] = "SELECT " USER_COLS " FROM users WHERE name = ?1",
    [RQ_USER_BY_ID] = "SELECT " USER_COLS " FROM users WHERE id = ?1",
    [RQ_USER_BY_TOKEN] = "SELECT u.id, u.name, u.unix_user, u.team, u.role, u.created_ms"
                         " FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = ?1",
    [RQ_USER_LIST] = "SELECT " USER_COLS " FROM users ORDER BY id",
    [RQ_CONFIG_GET + STORE_CONFIG_TEAMS] = CONFIG_GET("teams"),
    [RQ_CONFIG_GET + STORE_CONFIG_POOLS] = CONFIG_GET("pools"),
    [RQ_CONFIG_GET + STORE_CONFIG_PRIORITY_CLASSES] = CONFIG_GET("priority_classes"),
    [RQ_CONFIG_GET + STORE_CONFIG_PRICES] = CONFIG_GET("prices"),
    [RQ_CONFIG_LIST + STORE_CONFIG_TEAMS] = CONFIG_LIST("teams"),
    [RQ_CONFIG_LIST + STORE_CONFIG_POOLS] = CONFIG_LIST("pools"),
    [RQ_CONFIG_LIST + STORE_CONFIG_PRIORITY_CLASSES] = CONFIG_LIST("priority_classes"),
    [RQ_CONFIG_LIST + STORE_CONFIG_PRICES] = CONFIG_LIST("prices"),
    [RQ_NODE_LIST] = "SELECT name, spec, state, updated_ms FROM nodes ORDER BY name",
    [RQ_JOB] = "SELECT " JOB_COLS " FROM jobs WHERE id = ?1",
    [RQ_ATTEMPTS] = "SELECT " ATTEMPT_COLS " FROM attempts WHERE job_id = ?1 ORDER BY attempt",
    [RQ_ACTIVE] = "SELECT j.id, j.user_id, j.team, j.state, j.submit_ms, j.updated_ms,"
                  " j.array_id, j.array_index, j.reason, j.spec,"
                  " a.job_id, a.attempt, a.state, a.nodes, a.gpus, a.start_ms, a.end_ms,"
                  " a.exit_code, a.signal, a.reason, a.epoch"
                  " FROM jobs j LEFT JOIN attempts a ON a.job_id = j.id AND a.attempt ="
                  " (SELECT MAX(attempt) FROM attempts WHERE job_id = j.id)"
                  " WHERE j.state IN " ACTIVE_IN " ORDER BY j.id",
    [RQ_SCHED_STATE] = "SELECT epoch, blob, updated_ms FROM sched_state WHERE id = 1",
    [RQ_IDEMPOTENCY] = "SELECT job_id FROM idempotency WHERE user_id = ?1 AND key = ?2",
    [RQ_LEDGER_RANGE] =
        "SELECT l.job_id, l.attempt, l.seq, l.start_ms, l.end_ms, l.team, l.project, l.model,"
        " l.user, l.gpu_type, l.gpu_milli, l.price_micro, l.cost_micro,"
        " COALESCE(l.outcome, a.state), l.util_sum, l.util_samples, l.idle_samples"
        " FROM ledger l LEFT JOIN attempts a ON a.job_id = l.job_id AND a.attempt = l.attempt"
        " WHERE l.end_ms >= ?1 AND l.start_ms < ?2 AND (l.end_ms > ?1 OR l.start_ms = ?1)"
        " ORDER BY l.end_ms, l.job_id, l.attempt, l.seq",
    [RQ_MINUTES] = "SELECT " MINUTE_COLS " FROM metric_minutes WHERE kind = ?1"
                   " AND minute_ms >= ?2 AND minute_ms < ?3 ORDER BY minute_ms, key",
    [RQ_MINUTES_KEY] = "SELECT " MINUTE_COLS " FROM metric_minutes WHERE kind = ?1"
                       " AND minute_ms >= ?2 AND minute_ms < ?3 AND key = ?4 ORDER BY minute_ms",
    [RQ_BEGIN] = "BEGIN",
    [RQ_COMMIT] = "COMMIT",
};

/* Records the read connection's message; returns the store code. */
static int read_fail(struct sq *s, int rc)
{
    snprintf(s->rerr, sizeof(s->rerr), "%s", sqlite3_errmsg(s->rdb));
    return store_sqlite_err(rc);
}

static void stmt_done(sqlite3_stmt *st)
{
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

static int col_text(sqlite3_stmt *st, int col, char **ret)
{
    if (sqlite3_column_type(st, col) == SQLITE_NULL) {
        *ret = NULL;
        return 0;
    }
    const unsigned char *t = sqlite3_column_text(st, col);
    size_t n = (size_t)sqlite3_column_bytes(st, col);
    char *p = t ? malloc(n + 1) : NULL;
    if (!p)
        return STORE_ENOMEM;
    memcpy(p, t, n);
    p[n] = '\0';
    *ret = p;
    return 0;
}

static int64_t col_int(sqlite3_stmt *st, int col)
{
    return sqlite3_column_type(st, col) == SQLITE_NULL ? STORE_NULL : sqlite3_column_int64(st, col);
}

/* Row decoders: columns from `col` on into *row (zeroed by the caller; on
 * failure what was decoded is left for the caller to release). */
static int decode_user(sqlite3_stmt *st, int col, void *row)
{
    struct store_user *u = row;
    u->id = col_int(st, col);
    u->created_ms = col_int(st, col + 5);
    return col_text(st, col + 1, &u->name) || col_text(st, col + 2, &u->unix_user) ||
                   col_text(st, col + 3, &u->team) || col_text(st, col + 4, &u->role)
               ? STORE_ENOMEM
               : 0;
}

static int decode_config(sqlite3_stmt *st, int col, void *row)
{
    struct store_config *c = row;
    c->updated_ms = col_int(st, col + 2);
    return col_text(st, col, &c->name) || col_text(st, col + 1, &c->spec) ? STORE_ENOMEM : 0;
}

static int decode_node(sqlite3_stmt *st, int col, void *row)
{
    struct store_node *n = row;
    n->updated_ms = col_int(st, col + 3);
    return col_text(st, col, &n->name) || col_text(st, col + 1, &n->spec) ||
                   col_text(st, col + 2, &n->state)
               ? STORE_ENOMEM
               : 0;
}

static int decode_job(sqlite3_stmt *st, int col, void *row)
{
    struct store_job *j = row;
    j->id = col_int(st, col);
    j->user_id = col_int(st, col + 1);
    j->submit_ms = col_int(st, col + 4);
    j->updated_ms = col_int(st, col + 5);
    j->array_id = col_int(st, col + 6);
    j->array_index = col_int(st, col + 7);
    return col_text(st, col + 2, &j->team) || col_text(st, col + 3, &j->state) ||
                   col_text(st, col + 8, &j->reason) || col_text(st, col + 9, &j->spec)
               ? STORE_ENOMEM
               : 0;
}

static int decode_attempt(sqlite3_stmt *st, int col, void *row)
{
    struct store_attempt *a = row;
    a->job_id = col_int(st, col);
    a->attempt = col_int(st, col + 1);
    a->start_ms = col_int(st, col + 5);
    a->end_ms = col_int(st, col + 6);
    a->exit_code = col_int(st, col + 7);
    a->signal = col_int(st, col + 8);
    a->epoch = col_int(st, col + 10);
    return col_text(st, col + 2, &a->state) || col_text(st, col + 3, &a->nodes) ||
                   col_text(st, col + 4, &a->gpus) || col_text(st, col + 9, &a->reason)
               ? STORE_ENOMEM
               : 0;
}

static void release_user(void *row)
{
    store_user_release(row);
}

static void release_config(void *row)
{
    store_config_release(row);
}

static void release_node(void *row)
{
    store_node_release(row);
}

static void release_job(void *row)
{
    store_job_release(row);
}

static void release_attempt(void *row)
{
    store_attempt_release(row);
}

struct row_type {
    size_t size;
    int (*decode)(sqlite3_stmt *st, int col, void *row);
    void (*release)(void *row);
};

static const struct row_type user_rows = {sizeof(struct store_user), decode_user, release_user};
static const struct row_type config_rows = {sizeof(struct store_config), decode_config,
                                            release_config};
static const struct row_type node_rows = {sizeof(struct store_node), decode_node, release_node};
static const struct row_type job_rows = {sizeof(struct store_job), decode_job, release_job};

/* Every row of st (bound) into a new array; st is reset. */
static int read_rows(struct sq *s, sqlite3_stmt *st, const struct row_type *t, void **ret_rows,
                     size_t *ret_n)
{
    char *rows = NULL;
    size_t n = 0, cap = 0;
    int rc = SQLITE_OK, err = 0;
    while (err == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            char *p = realloc(rows, ncap * t->size);
            if (!p) {
                err = STORE_ENOMEM;
                break;
            }
            rows = p;
            cap = ncap;
        }
        void *row = rows + n * t->size;
        memset(row, 0, t->size);
        n++;
        err = t->decode(st, 0, row);
    }
    if (err == 0 && rc != SQLITE_DONE)
        err = read_fail(s, rc);
    stmt_done(st);
    if (err) {
        for (size_t k = 0; k < n; k++)
            t->release(rows + k * t->size);
        free(rows);
        return err;
    }
    *ret_rows = rows;
    *ret_n = n;
    return 0;
}

/* The first row of st (bound) into *row (zeroed); ENOTFOUND if none. */
static int read_one(struct sq *s, sqlite3_stmt *st, const struct row_type *t, void *row)
{
    int rc = sqlite3_step(st), err;
    if (rc == SQLITE_ROW) {
        err = t->decode(st, 0, row);
        if (err)
            t->release(row);
    } else {
        err = rc == SQLITE_DONE ? STORE_ENOTFOUND : read_fail(s, rc);
    }
    stmt_done(st);
    return err;
}

static int sq_meta_get(struct store *base, const char *key, char **ret_value)
{
    struct sq *s = to_sq(base);
    sqlite3_stmt *st = s->rst[RQ_META];
    char *value = NULL;
    pthread_mutex_lock(&s->rlock);
    int rc = sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC), err;
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        err = col_text(st, 0, &value);
    else
        err = rc == SQLITE_DONE ? STORE_ENOTFOUND : read_fail(s, rc);
    stmt_done(st);
    pthread_mutex_unlock(&s->rlock);
    if (err == 0)
        *ret_value = value;
    return err;
}

/* A read of one user by whatever st's ?1 was bound to (rc: the bind's result). */
static int user_get(struct sq *s, sqlite3_stmt *st, int rc, struct store_user *ret)
{
    struct store_user u = {0};
    int err = rc == SQLITE_OK ? read_one(s, st, &user_rows, &u) : read_fail(s, rc);
    stmt_done(st);
    pthread_mutex_unlock(&s->rlock);
    if (err == 0)
        *ret = u;
    return err;
}

static int sq_user_get_by_name(struct store *base, const char *name, struct store_user *ret)
{
    struct sq *s = to_sq(base);
    pthread_mutex_lock(&s->rlock);
    sqlite3_stmt *st = s->rst[RQ_USER_BY_NAME];
    return user_get(s, st, sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC), ret);
}

static int sq_user_get_by_id(struct store *base, int64_t id, struct store_user *ret)
{
    struct sq *s = to_sq(base);
    pthread_mutex_lock(&s->rlock);
    sqlite3_stmt *st = s->rst[RQ_USER_BY_ID];
    return user_get(s, st, sqlite3_bind_int64(st, 1, id), ret);
}

static int sq_user_get_by_token(struct store *base, const uint8_t *hash, struct store_user *ret)
{
    struct sq *s = to_sq(base);
    pthread_mutex_lock(&s->rlock);
    sqlite3_stmt *st = s->rst[RQ_USER_BY_TOKEN];
    return user_get(s, st, sqlite3_bind_blob(st, 1, hash, STORE_TOKEN_HASH_LEN, SQLITE_STATIC),
                    ret);
}

/* A list read of a statement without parameters. */
static int list(struct sq *s, enum rq q, const struct row_type *t, void **ret_rows, size_t *ret_n)
{
    pthread_mutex_lock(&s->rlock);
    int err = read_rows(s, s->rst[q], t, ret_rows, ret_n);
    pthread_mutex_unlock(&s->rlock);
    return err;
}

static int sq_user_list(struct store *base, struct store_user **ret_users, size_t *ret_n)
{
    return list(to_sq(base), RQ_USER_LIST, &user_rows, (void **)ret_users, ret_n);
}

static int sq_config_list(struct store *base, enum store_config_kind kind,
                          struct store_config **ret_configs, size_t *ret_n)
{
    return list(to_sq(base), RQ_CONFIG_LIST + kind, &config_rows, (void **)ret_configs, ret_n);
}

static int sq_node_list(struct store *base, struct store_node **ret_nodes, size_t *ret_n)
{
    return list(to_sq(base), RQ_NODE_LIST, &node_rows, (void **)ret_nodes, ret_n);
}

static int sq_config_get(struct store *base, enum store_config_kind kind, const char *name,
                         struct store_config *ret)
{
    struct sq *s = to_sq(base);
    sqlite3_stmt *st = s->rst[RQ_CONFIG_GET + kind];
    struct store_config c = {0};
    pthread_mutex_lock(&s->rlock);
    int rc = sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int err = rc == SQLITE_OK ? read_one(s, st, &config_rows, &c) : read_fail(s, rc);
    stmt_done(st);
    pthread_mutex_unlock(&s->rlock);
    if (err == 0)
        *ret = c;
    return err;
}

/* Steps a statement that returns no rows (BEGIN, COMMIT). */
static int run_plain(struct sq *s, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    int err = rc == SQLITE_DONE ? 0 : read_fail(s, rc);
    sqlite3_reset(st);
    return err;
}

static int sq_job_get(struct store *base, int64_t id, struct store_job *ret)
{
    struct sq *s = to_sq(base);
    struct store_job j = {0};
    const struct row_type attempt_rows = {sizeof(struct store_attempt), decode_attempt,
                                          release_attempt};
    pthread_mutex_lock(&s->rlock);
    int err = run_plain(s, s->rst[RQ_BEGIN]);
    if (err == 0) {
        sqlite3_bind_int64(s->rst[RQ_JOB], 1, id);
        err = read_one(s, s->rst[RQ_JOB], &job_rows, &j);
        sqlite3_bind_int64(s->rst[RQ_ATTEMPTS], 1, id);
        if (err == 0)
            err = read_rows(s, s->rst[RQ_ATTEMPTS], &attempt_rows, (void **)&j.attempts,
                            &j.nattempts);
        stmt_done(s->rst[RQ_ATTEMPTS]);
        int cerr = run_plain(s, s->rst[RQ_COMMIT]);
        err = err ? err : cerr;
    }
    pthread_mutex_unlock(&s->rlock);
    if (err)
        store_job_release(&j);
    else
        *ret = j;
    return err;
}

static int sq_job_list(struct store *base, const struct store_job_filter *f,
                       struct store_job **ret_jobs, size_t *ret_n)
{
    struct sq *s = to_sq(base);
    /* Only placeholders go into the text: ?1 after, ?2 limit, ?3 team, ?4
     * user, ?5 array, ?6... states. The buffer holds the longest text
     * (about 230 bytes plus 7 a state) with room to spare. */
    _Static_assert(STORE_MAX_STATES <= 64, "job_list's SQL buffer fits 64 states");
    char sql[1024];
    size_t len = (size_t)snprintf(
        sql, sizeof(sql), "SELECT " JOB_COLS " FROM jobs WHERE id > ?1%s%s%s",
        f->team ? " AND team = ?3" : "", f->user_id != STORE_NULL ? " AND user_id = ?4" : "",
        f->array_id != STORE_NULL ? " AND array_id = ?5" : "");
    for (size_t k = 0; k < f->nstates; k++)
        len += (size_t)snprintf(sql + len, sizeof(sql) - len, "%s?%zu",
                                k ? ", " : " AND state IN (", 6 + k);
    snprintf(sql + len, sizeof(sql) - len, "%s ORDER BY id LIMIT ?2", f->nstates ? ")" : "");
    pthread_mutex_lock(&s->rlock);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->rdb, sql, -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 1, f->after_id);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 2, (int64_t)f->limit);
    if (rc == SQLITE_OK && f->team)
        rc = sqlite3_bind_text(st, 3, f->team, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK && f->user_id != STORE_NULL)
        rc = sqlite3_bind_int64(st, 4, f->user_id);
    if (rc == SQLITE_OK && f->array_id != STORE_NULL)
        rc = sqlite3_bind_int64(st, 5, f->array_id);
    for (size_t k = 0; rc == SQLITE_OK && k < f->nstates; k++)
        rc = sqlite3_bind_text(st, (int)(6 + k), f->states[k], -1, SQLITE_STATIC);
    int err =
        rc == SQLITE_OK ? read_rows(s, st, &job_rows, (void **)ret_jobs, ret_n) : read_fail(s, rc);
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->rlock);
    return err;
}

static int sq_job_scan_active(struct store *base, store_job_fn fn, void *ctx)
{
    struct sq *s = to_sq(base);
    sqlite3_stmt *st = s->rst[RQ_ACTIVE];
    int rc = SQLITE_OK, err = 0;
    pthread_mutex_lock(&s->rlock);
    while (err == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct store_job j = {0};
        struct store_attempt a = {0};
        err = decode_job(st, 0, &j);
        if (err == 0 && sqlite3_column_type(st, JOB_NCOLS) != SQLITE_NULL) {
            j.attempts = &a;
            j.nattempts = 1;
            err = decode_attempt(st, JOB_NCOLS, &a);
        }
        if (err == 0)
            err = fn(ctx, &j);
        release_attempt(&a);
        j.attempts = NULL;
        store_job_release(&j);
    }
    if (err == 0 && rc != SQLITE_DONE)
        err = read_fail(s, rc);
    stmt_done(st);
    pthread_mutex_unlock(&s->rlock);
    return err;
}

static int sq_sched_state_get(struct store *base, struct store_sched_state *ret)
{
    struct sq *s = to_sq(base);
    sqlite3_stmt *st = s->rst[RQ_SCHED_STATE];
    struct store_sched_state out = {0};
    pthread_mutex_lock(&s->rlock);
    int rc = sqlite3_step(st), err = 0;
    if (rc == SQLITE_ROW) {
        out.epoch = col_int(st, 0);
        out.updated_ms = col_int(st, 2);
        const void *p = sqlite3_column_blob(st, 1);
        out.len = (size_t)sqlite3_column_bytes(st, 1);
        if (out.len && (!p || !(out.blob = malloc(out.len))))
            err = STORE_ENOMEM;
        else if (out.len)
            memcpy(out.blob, p, out.len);
    } else {
        err = rc == SQLITE_DONE ? STORE_ENOTFOUND : read_fail(s, rc);
    }
    stmt_done(st);
    pthread_mutex_unlock(&s->rlock);
    if (err == 0)
        *ret = out;
    return err;
}

static int sq_idempotency_get(struct store *base, int64_t user_id, const char *key,
                              int64_t *ret_job_id)
{
    struct sq *s = to_sq(base);
    sqlite3_stmt *st = s->rst[RQ_IDEMPOTENCY];
    pthread_mutex_lock(&s->rlock);
    int rc = sqlite3_bind_int64(st, 1, user_id), err;
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *ret_job_id = sqlite3_column_int64(st, 0);
    err = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? STORE_ENOTFOUND : read_fail(s, rc);
    stmt_done(st);
    pthread_mutex_unlock(&s->rlock);
    return err;
}

static int decode_ledger(sqlite3_stmt *st, int col, void *row)
{
    struct store_ledger_row *l = row;
    int64_t *ints[] = {&l->job_id,   &l->attempt,      &l->seq,         &l->start_ms,
                       &l->end_ms,   &l->gpu_milli,    &l->price_micro, &l->cost_micro,
                       &l->util_sum, &l->util_samples, &l->idle_samples};
    static const int cols[] = {0, 1, 2, 3, 4, 10, 11, 12, 14, 15, 16};
    for (size_t k = 0; k < sizeof(cols) / sizeof(cols[0]); k++)
        *ints[k] = col_int(st, col + cols[k]);
    return col_text(st, col + 5, &l->team) || col_text(st, col + 6, &l->project) ||
                   col_text(st, col + 7, &l->model) || col_text(st, col + 8, &l->user) ||
                   col_text(st, col + 9, &l->gpu_type) || col_text(st, col + 13, &l->outcome)
               ? STORE_ENOMEM
               : 0;
}

static void release_ledger(void *row)
{
    struct store_ledger_row *l = row;
    free(l->team);
    free(l->project);
    free(l->model);
    free(l->user);
    free(l->gpu_type);
    free(l->outcome);
    memset(l, 0, sizeof(*l));
}

static const struct row_type ledger_rows = {sizeof(struct store_ledger_row), decode_ledger,
                                            release_ledger};

static int sq_ledger_range(struct store *base, int64_t since_ms, int64_t until_ms,
                           struct store_ledger_row **ret_rows, size_t *ret_n)
{
    struct sq *s = to_sq(base);
    sqlite3_stmt *st = s->rst[RQ_LEDGER_RANGE];
    pthread_mutex_lock(&s->rlock);
    int rc = sqlite3_bind_int64(st, 1, since_ms), err;
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 2, until_ms);
    err = rc == SQLITE_OK ? read_rows(s, st, &ledger_rows, (void **)ret_rows, ret_n)
                          : read_fail(s, rc);
    stmt_done(st);
    pthread_mutex_unlock(&s->rlock);
    return err;
}

static int sq_minutes_get(struct store *base, enum store_minute_kind kind, const char *key,
                          int64_t since_ms, int64_t until_ms, store_minute_fn fn, void *ctx)
{
    struct sq *s = to_sq(base);
    sqlite3_stmt *st = s->rst[key ? RQ_MINUTES_KEY : RQ_MINUTES];
    pthread_mutex_lock(&s->rlock);
    int rc = sqlite3_bind_text(st, 1, kind == STORE_MINUTE_GPU ? "gpu" : "job", -1, SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 2, since_ms);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 3, until_ms);
    if (rc == SQLITE_OK && key)
        rc = sqlite3_bind_text(st, 4, key, -1, SQLITE_STATIC);
    int err = rc == SQLITE_OK ? 0 : read_fail(s, rc);
    while (err == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *k = (const char *)sqlite3_column_text(st, 0);
        const char *label = (const char *)sqlite3_column_text(st, 1);
        struct store_minute m = {
            .kind = kind,
            .key = k ? k : "",
            .label = label ? label : "",
            .minute_ms = col_int(st, 2),
            .samples = col_int(st, 3),
            .util_sum = col_int(st, 4),
            .util_max = col_int(st, 5),
            .idle_samples = col_int(st, 6),
            .mem_sum_mib = col_int(st, 7),
            .mem_max_mib = col_int(st, 8),
            .power_sum_mw = col_int(st, 9),
            .temp_max_c = col_int(st, 10),
        };
        err = fn(ctx, &m);
    }
    if (err == 0 && rc != SQLITE_DONE && rc != SQLITE_ROW)
        err = read_fail(s, rc);
    stmt_done(st);
    pthread_mutex_unlock(&s->rlock);
    return err;
}

static void sq_last_error(struct store *base, char *buf, size_t len)
{
    struct sq *s = to_sq(base);
    pthread_mutex_lock(&s->rlock);
    snprintf(buf, len, "%s", s->rerr);
    pthread_mutex_unlock(&s->rlock);
}

/* ---- opening and closing ---------------------------------------------------- */

static void sq_free(struct sq *s)
{
    for (size_t k = 0; k < STORE_OP_COUNT; k++)
        for (size_t i = 0; i < SCHEMA_OP_MAXSQL; i++)
            sqlite3_finalize(s->wst[k][i]);
    sqlite3_finalize(s->epoch_st);
    for (size_t k = 0; s->rst && k < RQ_COUNT; k++)
        sqlite3_finalize(s->rst[k]);
    free(s->rst);
    sqlite3_close(s->rdb); /* the last to close checkpoints and removes the WAL */
    sqlite3_close(s->wdb);
    if (s->sync_ready) {
        pthread_cond_destroy(&s->idle);
        pthread_cond_destroy(&s->wake);
        pthread_mutex_destroy(&s->rlock);
        pthread_mutex_destroy(&s->lock);
    }
    free(s);
}

static void sq_close(struct store *base)
{
    struct sq *s = to_sq(base);
    if (s->writer_started) {
        pthread_mutex_lock(&s->lock);
        s->closing = true;
        pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->writer, NULL);
    }
    sq_free(s);
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
        return errbuf_set(err, errlen, STORE_EIO, "opening %s: %s", path,
                          *db ? sqlite3_errmsg(*db) : sqlite3_errstr(rc));
    sqlite3_extended_result_codes(*db, 1);
    sqlite3_busy_timeout(*db, BUSY_TIMEOUT_MS);
    return 0;
}

static int open_writer(struct sq *s, const char *path, char *err, size_t errlen)
{
    int64_t version = 0;
    int rc = open_db(&s->wdb, path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, err, errlen);
    if (rc == 0)
        rc = schema_version_get(s->wdb, &version, err, errlen);
    if (rc == 0 && version > STORE_SCHEMA_VERSION)
        return errbuf_set(err, errlen, STORE_ETOONEW,
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
        return errbuf_set(err, errlen, STORE_EIO, "%s: cannot use WAL mode: %s", path,
                          rc == SQLITE_ROW ? "refused" : sqlite3_errmsg(s->wdb));
    rc = sqlite3_exec(s->wdb, "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON", NULL, NULL,
                      NULL);
    if (rc != SQLITE_OK)
        return errbuf_set(err, errlen, STORE_EIO, "%s: %s", path, sqlite3_errmsg(s->wdb));
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
        rc = errbuf_set(err, errlen, STORE_EIO, "%s: %s", path, sqlite3_errmsg(s->rdb));
    if (rc == 0 && !(s->rst = calloc(RQ_COUNT, sizeof(*s->rst))))
        rc = errbuf_set(err, errlen, STORE_ENOMEM, "out of memory");
    for (size_t k = 0; rc == 0 && k < RQ_COUNT; k++)
        rc = prepare(s->rdb, rq_sql[k], &s->rst[k], err, errlen);
    return rc;
}

static int init_sync(struct sq *s)
{
    if (pthread_mutex_init(&s->lock, NULL))
        return STORE_ENOMEM;
    if (pthread_mutex_init(&s->rlock, NULL)) {
        pthread_mutex_destroy(&s->lock);
        return STORE_ENOMEM;
    }
    if (pthread_cond_init(&s->wake, NULL)) {
        pthread_mutex_destroy(&s->rlock);
        pthread_mutex_destroy(&s->lock);
        return STORE_ENOMEM;
    }
    if (pthread_cond_init(&s->idle, NULL)) {
        pthread_cond_destroy(&s->wake);
        pthread_mutex_destroy(&s->rlock);
        pthread_mutex_destroy(&s->lock);
        return STORE_ENOMEM;
    }
    s->sync_ready = true;
    return 0;
}

int store_open_sqlite(const char *path, struct store **ret_store, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!path || !*path || !ret_store)
        return errbuf_set(err, errlen, STORE_EINVAL, "no database path");
    struct sq *s = calloc(1, sizeof(*s));
    if (!s)
        return errbuf_set(err, errlen, STORE_ENOMEM, "out of memory");
    s->base.ops = &sqlite_ops;
    s->tail = &s->head;
    int rc = init_sync(s);
    if (rc)
        errbuf_set(err, errlen, rc, "cannot create the store's locks");
    if (rc == 0)
        rc = open_writer(s, path, err, errlen);
    if (rc == 0)
        rc = open_reader(s, path, err, errlen);
    if (rc == 0 && pthread_create(&s->writer, NULL, writer_main, s) != 0)
        rc = errbuf_set(err, errlen, STORE_ENOMEM, "cannot start the writer thread");
    if (rc) {
        sq_free(s);
        return rc;
    }
    s->writer_started = true;
    *ret_store = &s->base;
    return 0;
}

int store_sqlite_pragma(struct store *base, const char *name, char *buf, size_t len)
{
    if (!base || base->ops != &sqlite_ops || !name || !*name || !buf || !len)
        return STORE_EINVAL;
    if (strspn(name, "abcdefghijklmnopqrstuvwxyz_") != strlen(name) || strlen(name) > 40)
        return STORE_EINVAL;
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
    return rc == SQLITE_ROW ? 0 : STORE_EIO;
}

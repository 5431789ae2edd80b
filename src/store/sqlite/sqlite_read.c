/*
 * sqlite_read.c - the SQLite backend's reads: synchronous, on the read
 * connection under its mutex (struct sq in sqlite.h), through statements
 * prepared once when the store opens (sqlite.c).
 *
 * Decisions the header leaves open:
 *  - A job row and its attempts are read in one read transaction, so they
 *    come from the same commit.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "store/backend.h"
#include "store/sqlite/schema.h"
#include "store/sqlite/sqlite.h"
#include "store/store.h"
#include "base/banned.h"

#define USER_COLS "id, name, unix_user, team, role, created_ms"
#define JOB_COLS                                                                                   \
    "id, user_id, team, state, submit_ms, updated_ms, array_id, array_index, reason, spec, hold"
#define ATTEMPT_COLS                                                                               \
    "job_id, attempt, state, nodes, gpus, start_ms, end_ms, exit_code, signal, reason, epoch"
#define JOB_NCOLS 11
#define MINUTE_COLS                                                                                \
    "key, label, minute_ms, samples, util_sum, util_max, idle_samples, mem_used_sum_mib,"          \
    " mem_used_max_mib, power_sum_mw, temp_max_c"
#define ACTIVE_IN "('" STORE_JOB_PENDING "', '" STORE_JOB_RUNNING "', '" STORE_JOB_PREEMPTED "')"

#define CONFIG_GET(t)  "SELECT name, spec, updated_ms FROM " t " WHERE name = ?1"
#define CONFIG_LIST(t) "SELECT name, spec, updated_ms FROM " t " ORDER BY name"

const char *const sq_rq_sql[RQ_COUNT] = {
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
    [RQ_CONFIG_GET + STORE_CONFIG_SERVICES] = CONFIG_GET("services"),
    [RQ_CONFIG_LIST + STORE_CONFIG_TEAMS] = CONFIG_LIST("teams"),
    [RQ_CONFIG_LIST + STORE_CONFIG_POOLS] = CONFIG_LIST("pools"),
    [RQ_CONFIG_LIST + STORE_CONFIG_PRIORITY_CLASSES] = CONFIG_LIST("priority_classes"),
    [RQ_CONFIG_LIST + STORE_CONFIG_PRICES] = CONFIG_LIST("prices"),
    [RQ_CONFIG_LIST + STORE_CONFIG_SERVICES] = CONFIG_LIST("services"),
    [RQ_NODE_LIST] = "SELECT name, spec, state, updated_ms FROM nodes ORDER BY name",
    [RQ_JOB] = "SELECT " JOB_COLS " FROM jobs WHERE id = ?1",
    [RQ_ATTEMPTS] = "SELECT " ATTEMPT_COLS " FROM attempts WHERE job_id = ?1 ORDER BY attempt",
    [RQ_ACTIVE] = "SELECT j.id, j.user_id, j.team, j.state, j.submit_ms, j.updated_ms,"
                  " j.array_id, j.array_index, j.reason, j.spec, j.hold,"
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
        return GPO_ENOMEM;
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
               ? GPO_ENOMEM
               : 0;
}

static int decode_config(sqlite3_stmt *st, int col, void *row)
{
    struct store_config *c = row;
    c->updated_ms = col_int(st, col + 2);
    return col_text(st, col, &c->name) || col_text(st, col + 1, &c->spec) ? GPO_ENOMEM : 0;
}

static int decode_node(sqlite3_stmt *st, int col, void *row)
{
    struct store_node *n = row;
    n->updated_ms = col_int(st, col + 3);
    return col_text(st, col, &n->name) || col_text(st, col + 1, &n->spec) ||
                   col_text(st, col + 2, &n->state)
               ? GPO_ENOMEM
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
                   col_text(st, col + 8, &j->reason) || col_text(st, col + 9, &j->spec) ||
                   col_text(st, col + 10, &j->hold)
               ? GPO_ENOMEM
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
               ? GPO_ENOMEM
               : 0;
}

struct row_type {
    size_t size;
    int (*decode)(sqlite3_stmt *st, int col, void *row);
    void (*release)(void *row);
};

static const struct row_type user_rows = {sizeof(struct store_user), decode_user,
                                          store_row_release_user};
static const struct row_type config_rows = {sizeof(struct store_config), decode_config,
                                            store_row_release_config};
static const struct row_type node_rows = {sizeof(struct store_node), decode_node,
                                          store_row_release_node};
static const struct row_type job_rows = {sizeof(struct store_job), decode_job,
                                         store_row_release_job};

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
                err = GPO_ENOMEM;
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
        err = rc == SQLITE_DONE ? GPO_ENOENT : read_fail(s, rc);
    }
    stmt_done(st);
    return err;
}

int sq_meta_get(struct store *base, const char *key, char **ret_value)
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
        err = rc == SQLITE_DONE ? GPO_ENOENT : read_fail(s, rc);
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

int sq_user_get_by_name(struct store *base, const char *name, struct store_user *ret)
{
    struct sq *s = to_sq(base);
    pthread_mutex_lock(&s->rlock);
    sqlite3_stmt *st = s->rst[RQ_USER_BY_NAME];
    return user_get(s, st, sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC), ret);
}

int sq_user_get_by_id(struct store *base, int64_t id, struct store_user *ret)
{
    struct sq *s = to_sq(base);
    pthread_mutex_lock(&s->rlock);
    sqlite3_stmt *st = s->rst[RQ_USER_BY_ID];
    return user_get(s, st, sqlite3_bind_int64(st, 1, id), ret);
}

int sq_user_get_by_token(struct store *base, const uint8_t *hash, struct store_user *ret)
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

int sq_user_list(struct store *base, struct store_user **ret_users, size_t *ret_n)
{
    return list(to_sq(base), RQ_USER_LIST, &user_rows, (void **)ret_users, ret_n);
}

int sq_config_list(struct store *base, enum store_config_kind kind,
                   struct store_config **ret_configs, size_t *ret_n)
{
    return list(to_sq(base), RQ_CONFIG_LIST + kind, &config_rows, (void **)ret_configs, ret_n);
}

int sq_node_list(struct store *base, struct store_node **ret_nodes, size_t *ret_n)
{
    return list(to_sq(base), RQ_NODE_LIST, &node_rows, (void **)ret_nodes, ret_n);
}

int sq_config_get(struct store *base, enum store_config_kind kind, const char *name,
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

int sq_job_get(struct store *base, int64_t id, struct store_job *ret)
{
    struct sq *s = to_sq(base);
    struct store_job j = {0};
    const struct row_type attempt_rows = {sizeof(struct store_attempt), decode_attempt,
                                          store_row_release_attempt};
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

int sq_job_list(struct store *base, const struct store_job_filter *f, struct store_job **ret_jobs,
                size_t *ret_n)
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

int sq_job_scan_active(struct store *base, store_job_fn fn, void *ctx)
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
        store_row_release_attempt(&a);
        j.attempts = NULL;
        store_job_release(&j);
    }
    if (err == 0 && rc != SQLITE_DONE)
        err = read_fail(s, rc);
    stmt_done(st);
    pthread_mutex_unlock(&s->rlock);
    return err;
}

int sq_sched_state_get(struct store *base, struct store_sched_state *ret)
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
            err = GPO_ENOMEM;
        else if (out.len)
            memcpy(out.blob, p, out.len);
    } else {
        err = rc == SQLITE_DONE ? GPO_ENOENT : read_fail(s, rc);
    }
    stmt_done(st);
    pthread_mutex_unlock(&s->rlock);
    if (err == 0)
        *ret = out;
    return err;
}

int sq_idempotency_get(struct store *base, int64_t user_id, const char *key, int64_t *ret_job_id)
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
    err = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? GPO_ENOENT : read_fail(s, rc);
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
               ? GPO_ENOMEM
               : 0;
}

static const struct row_type ledger_rows = {sizeof(struct store_ledger_row), decode_ledger,
                                            store_row_release_ledger};

int sq_ledger_range(struct store *base, int64_t since_ms, int64_t until_ms,
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

int sq_minutes_get(struct store *base, enum store_minute_kind kind, const char *key,
                   int64_t since_ms, int64_t until_ms, store_minute_fn fn, void *ctx)
{
    struct sq *s = to_sq(base);
    sqlite3_stmt *st = s->rst[key ? RQ_MINUTES_KEY : RQ_MINUTES];
    pthread_mutex_lock(&s->rlock);
    int rc = sqlite3_bind_text(st, 1, store_minute_kind_name(kind), -1, SQLITE_STATIC);
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

void sq_last_error(struct store *base, char *buf, size_t len)
{
    struct sq *s = to_sq(base);
    pthread_mutex_lock(&s->rlock);
    snprintf(buf, len, "%s", s->rerr);
    pthread_mutex_unlock(&s->rlock);
}

/*
 * pg_read.c - the PostgreSQL backend's reads: synchronous, each on a
 * connection lent from a small pool (struct pgs in pg.h) for the call,
 * through statements prepared once per connection.
 *
 * Decisions the header leaves open:
 *  - A job and its attempts come from one statement (a join), hence one
 *    snapshot, as SQLite's read transaction gives.
 *  - The active jobs and the metric minutes are streamed row by row
 *    (libpq's single-row mode): a restarted controller's scan does not hold
 *    every active job's spec in memory twice.
 *  - A read that fails records libpq's message for store_last_error; its
 *    connection is checked (and remade if broken) at its next use.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "store/backend.h"
#include "store/postgres/pg.h"
#include "store/store.h"
#include "util/errbuf.h"
#include "util/monotime.h"
#include "base/banned.h"

#define USER_COLS "id, name, unix_user, team, role, created_ms"
#define JOB_COLS                                                                                   \
    "id, user_id, team, state, submit_ms, updated_ms, array_id, array_index, reason, spec, hold"
#define JOB_NCOLS 11
#define MINUTE_COLS                                                                                \
    "key, label, minute_ms, samples, util_sum, util_max, idle_samples, mem_used_sum_mib,"          \
    " mem_used_max_mib, power_sum_mw, temp_max_c"
#define ACTIVE_IN "('" STORE_JOB_PENDING "', '" STORE_JOB_RUNNING "', '" STORE_JOB_PREEMPTED "')"

#define CONFIG_GET(t)  "SELECT name, spec, updated_ms FROM " t " WHERE name = $1"
#define CONFIG_LIST(t) "SELECT name, spec, updated_ms FROM " t " ORDER BY name"

/* The read statements, prepared on each read connection as "rK". */
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
    RQ_ACTIVE,
    RQ_SCHED_STATE,
    RQ_IDEMPOTENCY,
    RQ_LEDGER_RANGE,
    RQ_MINUTES,
    RQ_MINUTES_KEY,
    RQ_COUNT
};

static const struct pg_stmt rq_sql[RQ_COUNT] = {
    [RQ_META] = {"SELECT value FROM meta WHERE key = $1", "t"},
    [RQ_USER_BY_NAME] = {"SELECT " USER_COLS " FROM users WHERE name = $1", "t"},
    [RQ_USER_BY_ID] = {"SELECT " USER_COLS " FROM users WHERE id = $1", "i"},
    [RQ_USER_BY_TOKEN] = {"SELECT u.id, u.name, u.unix_user, u.team, u.role, u.created_ms"
                          " FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = $1",
                          "b"},
    [RQ_USER_LIST] = {"SELECT " USER_COLS " FROM users ORDER BY id", ""},
    [RQ_CONFIG_GET + STORE_CONFIG_TEAMS] = {CONFIG_GET("teams"), "t"},
    [RQ_CONFIG_GET + STORE_CONFIG_POOLS] = {CONFIG_GET("pools"), "t"},
    [RQ_CONFIG_GET + STORE_CONFIG_PRIORITY_CLASSES] = {CONFIG_GET("priority_classes"), "t"},
    [RQ_CONFIG_GET + STORE_CONFIG_PRICES] = {CONFIG_GET("prices"), "t"},
    [RQ_CONFIG_GET + STORE_CONFIG_SERVICES] = {CONFIG_GET("services"), "t"},
    [RQ_CONFIG_LIST + STORE_CONFIG_TEAMS] = {CONFIG_LIST("teams"), ""},
    [RQ_CONFIG_LIST + STORE_CONFIG_POOLS] = {CONFIG_LIST("pools"), ""},
    [RQ_CONFIG_LIST + STORE_CONFIG_PRIORITY_CLASSES] = {CONFIG_LIST("priority_classes"), ""},
    [RQ_CONFIG_LIST + STORE_CONFIG_PRICES] = {CONFIG_LIST("prices"), ""},
    [RQ_CONFIG_LIST + STORE_CONFIG_SERVICES] = {CONFIG_LIST("services"), ""},
    [RQ_NODE_LIST] = {"SELECT name, spec, state, updated_ms FROM nodes ORDER BY name", ""},
    [RQ_JOB] = {"SELECT j.id, j.user_id, j.team, j.state, j.submit_ms, j.updated_ms,"
                " j.array_id, j.array_index, j.reason, j.spec, j.hold,"
                " a.job_id, a.attempt, a.state, a.nodes, a.gpus, a.start_ms, a.end_ms,"
                " a.exit_code, a.signal, a.reason, a.epoch"
                " FROM jobs j LEFT JOIN attempts a ON a.job_id = j.id WHERE j.id = $1"
                " ORDER BY a.attempt",
                "i"},
    [RQ_ACTIVE] = {"SELECT j.id, j.user_id, j.team, j.state, j.submit_ms, j.updated_ms,"
                   " j.array_id, j.array_index, j.reason, j.spec, j.hold,"
                   " a.job_id, a.attempt, a.state, a.nodes, a.gpus, a.start_ms, a.end_ms,"
                   " a.exit_code, a.signal, a.reason, a.epoch"
                   " FROM jobs j LEFT JOIN attempts a ON a.job_id = j.id AND a.attempt ="
                   " (SELECT MAX(attempt) FROM attempts WHERE job_id = j.id)"
                   " WHERE j.state IN " ACTIVE_IN " ORDER BY j.id",
                   ""},
    [RQ_SCHED_STATE] = {"SELECT epoch, blob, updated_ms FROM sched_state WHERE id = 1", ""},
    [RQ_IDEMPOTENCY] = {"SELECT job_id FROM idempotency WHERE user_id = $1 AND key = $2", "it"},
    [RQ_LEDGER_RANGE] =
        {"SELECT l.job_id, l.attempt, l.seq, l.start_ms, l.end_ms, l.team, l.project, l.model,"
         " l.\"user\", l.gpu_type, l.gpu_milli, l.price_micro, l.cost_micro,"
         " COALESCE(l.outcome, a.state), l.util_sum, l.util_samples, l.idle_samples"
         " FROM ledger l LEFT JOIN attempts a ON a.job_id = l.job_id AND a.attempt = l.attempt"
         " WHERE l.end_ms >= $1 AND l.start_ms < $2 AND (l.end_ms > $1 OR l.start_ms = $1)"
         " ORDER BY l.end_ms, l.job_id, l.attempt, l.seq",
         "ii"},
    [RQ_MINUTES] = {"SELECT " MINUTE_COLS " FROM metric_minutes WHERE kind = $1"
                    " AND minute_ms >= $2 AND minute_ms < $3 ORDER BY minute_ms, key",
                    "tii"},
    [RQ_MINUTES_KEY] = {"SELECT " MINUTE_COLS " FROM metric_minutes WHERE kind = $1"
                        " AND minute_ms >= $2 AND minute_ms < $3 AND key = $4 ORDER BY minute_ms",
                        "tiit"},
};

static Oid type_oid(char t)
{
    return t == 'i' ? 20 /* int8 */ : t == 'b' ? 17 /* bytea */ : 25 /* text */;
}

int pg_prepare_reads(PGconn *c, char *err, size_t errlen)
{
    for (size_t k = 0; k < RQ_COUNT; k++) {
        Oid types[8];
        size_t n = strlen(rq_sql[k].types);
        for (size_t t = 0; t < n && t < 8; t++)
            types[t] = type_oid(rq_sql[k].types[t]);
        char name[16];
        snprintf(name, sizeof(name), "r%zu", k);
        PGresult *r = PQprepare(c, name, rq_sql[k].sql, (int)n, types);
        int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : pg_result_err(c, r, err, errlen);
        PQclear(r);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- the pool ----------------------------------------------------------------------- */

static void record_err(struct pgs *s, const char *msg)
{
    pthread_mutex_lock(&s->pool_lock);
    snprintf(s->rerr, sizeof(s->rerr), "%s", msg);
    pthread_mutex_unlock(&s->pool_lock);
}

/* Lends a ready read connection (waiting for one to be free). */
static int conn_take(struct pgs *s, struct pg_conn **ret)
{
    pthread_mutex_lock(&s->pool_lock);
    size_t k;
    for (;;) {
        for (k = 0; k < PG_POOL && s->pool_busy[k]; k++)
            ;
        if (k < PG_POOL)
            break;
        pthread_cond_wait(&s->pool_free, &s->pool_lock);
    }
    s->pool_busy[k] = true;
    pthread_mutex_unlock(&s->pool_lock);
    char msg[256];
    int rc = pg_conn_ready(s, &s->pool[k], PG_ROLE_READ, msg, sizeof(msg));
    if (rc) {
        record_err(s, msg);
        pthread_mutex_lock(&s->pool_lock);
        s->pool_busy[k] = false;
        pthread_cond_signal(&s->pool_free);
        pthread_mutex_unlock(&s->pool_lock);
        return rc;
    }
    *ret = &s->pool[k];
    return 0;
}

static void conn_give(struct pgs *s, const struct pg_conn *pc)
{
    pthread_mutex_lock(&s->pool_lock);
    s->pool_busy[pc - s->pool] = false;
    pthread_cond_signal(&s->pool_free);
    pthread_mutex_unlock(&s->pool_lock);
}

/* A read's parameters: text, integers as text, a bytea in binary. */
struct args {
    const char *vals[4];
    int lens[4], fmts[4];
    char ints[4][24];
    int n;
};

static void arg_text(struct args *a, const char *t)
{
    a->vals[a->n] = t;
    a->lens[a->n] = 0;
    a->fmts[a->n++] = 0;
}

/* A read's integer is never NULL: STORE_NULL (INT64_MIN) is a bound too. */
static const char *int_text(int64_t v, char *buf, size_t len)
{
    snprintf(buf, len, "%lld", (long long)v);
    return buf;
}

static void arg_int(struct args *a, int64_t v)
{
    a->lens[a->n] = 0;
    a->fmts[a->n] = 0;
    a->vals[a->n] = int_text(v, a->ints[a->n], sizeof(a->ints[a->n]));
    a->n++;
}

static void arg_blob(struct args *a, const void *p, size_t n)
{
    a->vals[a->n] = p;
    a->lens[a->n] = (int)n;
    a->fmts[a->n++] = 1;
}

/* Runs read statement q with a's parameters on a lent connection; *ret_res:
 * its rows (the caller clears it). */
/* A query that fails on a dropped connection fails within this (ms). */
#define PG_DROPPED_MS 500

static int query(struct pgs *s, enum rq q, const struct args *a, PGresult **ret_res)
{
    char name[16];
    snprintf(name, sizeof(name), "r%d", (int)q);
    /* A connection the server dropped (it restarted) is seen broken only by
     * the query that finds it so, at once: that read runs once more, on a
     * new one. One that broke by a timeout (a partition) is not tried again,
     * so that a read never waits more than one timeout. */
    for (int tries = 0;; tries++) {
        struct pg_conn *pc = NULL;
        int rc = conn_take(s, &pc);
        if (rc)
            return rc;
        int64_t t0 = monotime_ms();
        PGresult *r = PQexecPrepared(pc->c, name, a ? a->n : 0, a ? a->vals : NULL,
                                     a ? a->lens : NULL, a ? a->fmts : NULL, 0);
        if (PQresultStatus(r) == PGRES_TUPLES_OK) {
            *ret_res = r;
            conn_give(s, pc);
            return 0;
        }
        char msg[256];
        rc = pg_result_err(pc->c, r, msg, sizeof(msg));
        record_err(s, msg);
        PQclear(r);
        bool broken = PQstatus(pc->c) == CONNECTION_BAD && monotime_ms() - t0 < PG_DROPPED_MS;
        conn_give(s, pc);
        if (!broken || tries > 0)
            return rc;
    }
}

/* ---- cells and rows ------------------------------------------------------------------ */

static int cell_text(const PGresult *r, int row, int col, char **ret)
{
    if (PQgetisnull(r, row, col)) {
        *ret = NULL;
        return 0;
    }
    *ret = strdup(PQgetvalue(r, row, col));
    return *ret ? 0 : GPO_ENOMEM;
}

#define cell_int pg_cell_int

/* Row decoders: columns from `col` on of row `row` into *out (zeroed by the
 * caller; on failure what was decoded is left for the caller to release). */
static int decode_user(const PGresult *r, int row, int col, void *out)
{
    struct store_user *u = out;
    u->id = cell_int(r, row, col);
    u->created_ms = cell_int(r, row, col + 5);
    return cell_text(r, row, col + 1, &u->name) || cell_text(r, row, col + 2, &u->unix_user) ||
                   cell_text(r, row, col + 3, &u->team) || cell_text(r, row, col + 4, &u->role)
               ? GPO_ENOMEM
               : 0;
}

static int decode_config(const PGresult *r, int row, int col, void *out)
{
    struct store_config *c = out;
    c->updated_ms = cell_int(r, row, col + 2);
    return cell_text(r, row, col, &c->name) || cell_text(r, row, col + 1, &c->spec) ? GPO_ENOMEM
                                                                                    : 0;
}

static int decode_node(const PGresult *r, int row, int col, void *out)
{
    struct store_node *n = out;
    n->updated_ms = cell_int(r, row, col + 3);
    return cell_text(r, row, col, &n->name) || cell_text(r, row, col + 1, &n->spec) ||
                   cell_text(r, row, col + 2, &n->state)
               ? GPO_ENOMEM
               : 0;
}

static int decode_job(const PGresult *r, int row, int col, void *out)
{
    struct store_job *j = out;
    j->id = cell_int(r, row, col);
    j->user_id = cell_int(r, row, col + 1);
    j->submit_ms = cell_int(r, row, col + 4);
    j->updated_ms = cell_int(r, row, col + 5);
    j->array_id = cell_int(r, row, col + 6);
    j->array_index = cell_int(r, row, col + 7);
    return cell_text(r, row, col + 2, &j->team) || cell_text(r, row, col + 3, &j->state) ||
                   cell_text(r, row, col + 8, &j->reason) || cell_text(r, row, col + 9, &j->spec) ||
                   cell_text(r, row, col + 10, &j->hold)
               ? GPO_ENOMEM
               : 0;
}

static int decode_attempt(const PGresult *r, int row, int col, struct store_attempt *a)
{
    a->job_id = cell_int(r, row, col);
    a->attempt = cell_int(r, row, col + 1);
    a->start_ms = cell_int(r, row, col + 5);
    a->end_ms = cell_int(r, row, col + 6);
    a->exit_code = cell_int(r, row, col + 7);
    a->signal = cell_int(r, row, col + 8);
    a->epoch = cell_int(r, row, col + 10);
    return cell_text(r, row, col + 2, &a->state) || cell_text(r, row, col + 3, &a->nodes) ||
                   cell_text(r, row, col + 4, &a->gpus) || cell_text(r, row, col + 9, &a->reason)
               ? GPO_ENOMEM
               : 0;
}

static int decode_ledger(const PGresult *r, int row, int col, void *out)
{
    struct store_ledger_row *l = out;
    int64_t *ints[] = {&l->job_id,   &l->attempt,      &l->seq,         &l->start_ms,
                       &l->end_ms,   &l->gpu_milli,    &l->price_micro, &l->cost_micro,
                       &l->util_sum, &l->util_samples, &l->idle_samples};
    static const int cols[] = {0, 1, 2, 3, 4, 10, 11, 12, 14, 15, 16};
    for (size_t k = 0; k < sizeof(cols) / sizeof(cols[0]); k++)
        *ints[k] = cell_int(r, row, col + cols[k]);
    return cell_text(r, row, col + 5, &l->team) || cell_text(r, row, col + 6, &l->project) ||
                   cell_text(r, row, col + 7, &l->model) || cell_text(r, row, col + 8, &l->user) ||
                   cell_text(r, row, col + 9, &l->gpu_type) ||
                   cell_text(r, row, col + 13, &l->outcome)
               ? GPO_ENOMEM
               : 0;
}

struct row_type {
    size_t size;
    int (*decode)(const PGresult *r, int row, int col, void *out);
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
static const struct row_type ledger_rows = {sizeof(struct store_ledger_row), decode_ledger,
                                            store_row_release_ledger};

/* Every row of res into a new array (res is cleared). */
static int read_rows(PGresult *res, const struct row_type *t, void **ret_rows, size_t *ret_n)
{
    size_t n = (size_t)PQntuples(res);
    char *rows = calloc(n ? n : 1, t->size);
    int err = rows ? 0 : GPO_ENOMEM;
    size_t done = 0;
    for (; err == 0 && done < n; done++)
        err = t->decode(res, (int)done, 0, rows + done * t->size);
    PQclear(res);
    if (err) {
        for (size_t k = 0; rows && k < done; k++)
            t->release(rows + k * t->size);
        free(rows);
        return err;
    }
    *ret_rows = rows;
    *ret_n = n;
    return 0;
}

/* Statement q's first row into *out (zeroed); ENOTFOUND if none. */
static int read_one(struct pgs *s, enum rq q, const struct args *a, const struct row_type *t,
                    void *out)
{
    PGresult *res = NULL;
    int err = query(s, q, a, &res);
    if (err)
        return err;
    if (PQntuples(res) == 0) {
        err = GPO_ENOENT;
    } else {
        memset(out, 0, t->size);
        err = t->decode(res, 0, 0, out);
        if (err)
            t->release(out);
    }
    PQclear(res);
    return err;
}

/* Every row of statement q into a new array. */
static int read_list(struct pgs *s, enum rq q, const struct args *a, const struct row_type *t,
                     void **ret_rows, size_t *ret_n)
{
    PGresult *res = NULL;
    int err = query(s, q, a, &res);
    return err ? err : read_rows(res, t, ret_rows, ret_n);
}

/* ---- the reads ------------------------------------------------------------------------ */

int pg_meta_get(struct store *base, const char *key, char **ret_value)
{
    struct args a = {.n = 0};
    arg_text(&a, key);
    PGresult *res = NULL;
    int err = query(to_pgs(base), RQ_META, &a, &res);
    if (err)
        return err;
    char *v = NULL;
    err = PQntuples(res) == 0 ? GPO_ENOENT : cell_text(res, 0, 0, &v);
    PQclear(res);
    if (err == 0)
        *ret_value = v;
    return err;
}

static int user_get(struct pgs *s, enum rq q, const struct args *a, struct store_user *ret)
{
    struct store_user u = {0};
    int err = read_one(s, q, a, &user_rows, &u);
    if (err == 0)
        *ret = u;
    return err;
}

int pg_user_get_by_name(struct store *base, const char *name, struct store_user *ret)
{
    struct args a = {.n = 0};
    arg_text(&a, name);
    return user_get(to_pgs(base), RQ_USER_BY_NAME, &a, ret);
}

int pg_user_get_by_id(struct store *base, int64_t id, struct store_user *ret)
{
    struct args a = {.n = 0};
    arg_int(&a, id);
    return user_get(to_pgs(base), RQ_USER_BY_ID, &a, ret);
}

int pg_user_get_by_token(struct store *base, const uint8_t *hash, struct store_user *ret)
{
    struct args a = {.n = 0};
    arg_blob(&a, hash, STORE_TOKEN_HASH_LEN);
    return user_get(to_pgs(base), RQ_USER_BY_TOKEN, &a, ret);
}

int pg_user_list(struct store *base, struct store_user **ret_users, size_t *ret_n)
{
    return read_list(to_pgs(base), RQ_USER_LIST, NULL, &user_rows, (void **)ret_users, ret_n);
}

int pg_config_get(struct store *base, enum store_config_kind kind, const char *name,
                  struct store_config *ret)
{
    struct args a = {.n = 0};
    arg_text(&a, name);
    struct store_config c = {0};
    int err = read_one(to_pgs(base), RQ_CONFIG_GET + kind, &a, &config_rows, &c);
    if (err == 0)
        *ret = c;
    return err;
}

int pg_config_list(struct store *base, enum store_config_kind kind,
                   struct store_config **ret_configs, size_t *ret_n)
{
    return read_list(to_pgs(base), RQ_CONFIG_LIST + kind, NULL, &config_rows, (void **)ret_configs,
                     ret_n);
}

int pg_node_list(struct store *base, struct store_node **ret_nodes, size_t *ret_n)
{
    return read_list(to_pgs(base), RQ_NODE_LIST, NULL, &node_rows, (void **)ret_nodes, ret_n);
}

int pg_job_get(struct store *base, int64_t id, struct store_job *ret)
{
    struct args a = {.n = 0};
    arg_int(&a, id);
    PGresult *res = NULL;
    int err = query(to_pgs(base), RQ_JOB, &a, &res);
    if (err)
        return err;
    int n = PQntuples(res);
    struct store_job j = {0};
    if (n == 0)
        err = GPO_ENOENT;
    if (err == 0)
        err = decode_job(res, 0, 0, &j);
    if (err == 0 && !PQgetisnull(res, 0, JOB_NCOLS)) {
        j.attempts = calloc((size_t)n, sizeof(*j.attempts));
        err = j.attempts ? 0 : GPO_ENOMEM;
        for (int k = 0; err == 0 && k < n; k++, j.nattempts++)
            err = decode_attempt(res, k, JOB_NCOLS, &j.attempts[k]);
    }
    PQclear(res);
    if (err)
        store_job_release(&j);
    else
        *ret = j;
    return err;
}

int pg_job_list(struct store *base, const struct store_job_filter *f, struct store_job **ret_jobs,
                size_t *ret_n)
{
    struct pgs *s = to_pgs(base);
    /* Only placeholders go into the text, numbered as they are used: $1
     * after, $2 limit, then team, user, array and the states. */
    _Static_assert(STORE_MAX_STATES <= 64, "job_list's SQL buffer fits 64 states");
    const char *vals[5 + STORE_MAX_STATES];
    char ints[4][24];
    int n = 0;
    char sql[1024];
    vals[n++] = int_text(f->after_id, ints[0], sizeof(ints[0]));
    vals[n++] = int_text((int64_t)f->limit, ints[1], sizeof(ints[1]));
    size_t len = (size_t)snprintf(sql, sizeof(sql), "SELECT " JOB_COLS " FROM jobs WHERE id > $1");
    if (f->team) {
        vals[n++] = f->team;
        len += (size_t)snprintf(sql + len, sizeof(sql) - len, " AND team = $%d", n);
    }
    if (f->user_id != STORE_NULL) {
        vals[n++] = int_text(f->user_id, ints[2], sizeof(ints[2]));
        len += (size_t)snprintf(sql + len, sizeof(sql) - len, " AND user_id = $%d::bigint", n);
    }
    if (f->array_id != STORE_NULL) {
        vals[n++] = int_text(f->array_id, ints[3], sizeof(ints[3]));
        len += (size_t)snprintf(sql + len, sizeof(sql) - len, " AND array_id = $%d::bigint", n);
    }
    for (size_t k = 0; k < f->nstates; k++) {
        vals[n++] = f->states[k];
        len += (size_t)snprintf(sql + len, sizeof(sql) - len, "%s$%d", k ? ", " : " AND state IN (",
                                n);
    }
    snprintf(sql + len, sizeof(sql) - len, "%s ORDER BY id LIMIT $2::bigint",
             f->nstates ? ")" : "");
    struct pg_conn *pc = NULL;
    int err = conn_take(s, &pc);
    if (err)
        return err;
    PGresult *res = PQexecParams(pc->c, sql, n, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        char msg[256];
        err = pg_result_err(pc->c, res, msg, sizeof(msg));
        record_err(s, msg);
        PQclear(res);
    }
    conn_give(s, pc);
    return err ? err : read_rows(res, &job_rows, (void **)ret_jobs, ret_n);
}

/* Calls fn for each row of statement q, streamed; fn's nonzero stops it. */
typedef int (*row_fn)(void *ctx, const PGresult *r, int row);

static int stream(struct pgs *s, enum rq q, const struct args *a, row_fn fn, void *ctx)
{
    struct pg_conn *pc = NULL;
    int err = conn_take(s, &pc);
    if (err)
        return err;
    char name[16], msg[256] = "";
    snprintf(name, sizeof(name), "r%d", (int)q);
    int ioerr = 0;
    if (!PQsendQueryPrepared(pc->c, name, a ? a->n : 0, a ? a->vals : NULL, a ? a->lens : NULL,
                             a ? a->fmts : NULL, 0))
        ioerr = pg_result_err(pc->c, NULL, msg, sizeof(msg));
    else
        (void)PQsetSingleRowMode(pc->c); /* refused: the rows come in one result */
    /* Every result is taken, even after fn stopped: only then is the
     * connection free for the next query. */
    for (PGresult *r; !ioerr && (r = PQgetResult(pc->c)) != NULL; PQclear(r)) {
        ExecStatusType st = PQresultStatus(r);
        if (st == PGRES_SINGLE_TUPLE || st == PGRES_TUPLES_OK)
            for (int k = 0; err == 0 && k < PQntuples(r); k++)
                err = fn(ctx, r, k);
        else if (!ioerr)
            ioerr = pg_result_err(pc->c, r, msg, sizeof(msg));
    }
    if (msg[0])
        record_err(s, msg);
    conn_give(s, pc);
    return err ? err : ioerr;
}

struct scan {
    store_job_fn fn;
    void *ctx;
};

static int scan_row(void *ctx, const PGresult *r, int row)
{
    struct scan *sc = ctx;
    struct store_job j = {0};
    struct store_attempt a = {0};
    int err = decode_job(r, row, 0, &j);
    if (err == 0 && !PQgetisnull(r, row, JOB_NCOLS)) {
        j.attempts = &a;
        j.nattempts = 1;
        err = decode_attempt(r, row, JOB_NCOLS, &a);
    }
    if (err == 0)
        err = sc->fn(sc->ctx, &j);
    store_attempt_release(&a);
    j.attempts = NULL;
    j.nattempts = 0;
    store_job_release(&j);
    return err;
}

int pg_job_scan_active(struct store *base, store_job_fn fn, void *ctx)
{
    struct scan sc = {fn, ctx};
    return stream(to_pgs(base), RQ_ACTIVE, NULL, scan_row, &sc);
}

int pg_sched_state_get(struct store *base, struct store_sched_state *ret)
{
    PGresult *res = NULL;
    int err = query(to_pgs(base), RQ_SCHED_STATE, NULL, &res);
    if (err)
        return err;
    struct store_sched_state out = {0};
    if (PQntuples(res) == 0) {
        err = GPO_ENOENT;
    } else {
        out.epoch = cell_int(res, 0, 0);
        out.updated_ms = cell_int(res, 0, 2);
        size_t n = 0;
        unsigned char *p = PQunescapeBytea((const unsigned char *)PQgetvalue(res, 0, 1), &n);
        if (!p || (n && !(out.blob = malloc(n))))
            err = GPO_ENOMEM;
        else if (n)
            memcpy(out.blob, p, n);
        out.len = err ? 0 : n;
        PQfreemem(p);
    }
    PQclear(res);
    if (err == 0)
        *ret = out;
    return err;
}

int pg_idempotency_get(struct store *base, int64_t user_id, const char *key, int64_t *ret_job_id)
{
    struct args a = {.n = 0};
    arg_int(&a, user_id);
    arg_text(&a, key);
    PGresult *res = NULL;
    int err = query(to_pgs(base), RQ_IDEMPOTENCY, &a, &res);
    if (err)
        return err;
    if (PQntuples(res) == 0)
        err = GPO_ENOENT;
    else
        *ret_job_id = cell_int(res, 0, 0);
    PQclear(res);
    return err;
}

int pg_ledger_range(struct store *base, int64_t since_ms, int64_t until_ms,
                    struct store_ledger_row **ret_rows, size_t *ret_n)
{
    struct args a = {.n = 0};
    arg_int(&a, since_ms);
    arg_int(&a, until_ms);
    return read_list(to_pgs(base), RQ_LEDGER_RANGE, &a, &ledger_rows, (void **)ret_rows, ret_n);
}

struct minutes {
    enum store_minute_kind kind;
    store_minute_fn fn;
    void *ctx;
};

static int minute_row(void *ctx, const PGresult *r, int row)
{
    struct minutes *mc = ctx;
    struct store_minute m = {
        .kind = mc->kind,
        .key = PQgetvalue(r, row, 0),
        .label = PQgetvalue(r, row, 1),
        .minute_ms = cell_int(r, row, 2),
        .samples = cell_int(r, row, 3),
        .util_sum = cell_int(r, row, 4),
        .util_max = cell_int(r, row, 5),
        .idle_samples = cell_int(r, row, 6),
        .mem_sum_mib = cell_int(r, row, 7),
        .mem_max_mib = cell_int(r, row, 8),
        .power_sum_mw = cell_int(r, row, 9),
        .temp_max_c = cell_int(r, row, 10),
    };
    return mc->fn(mc->ctx, &m);
}

int pg_minutes_get(struct store *base, enum store_minute_kind kind, const char *key,
                   int64_t since_ms, int64_t until_ms, store_minute_fn fn, void *ctx)
{
    struct args a = {.n = 0};
    arg_text(&a, store_minute_kind_name(kind));
    arg_int(&a, since_ms);
    arg_int(&a, until_ms);
    if (key)
        arg_text(&a, key);
    struct minutes mc = {kind, fn, ctx};
    return stream(to_pgs(base), key ? RQ_MINUTES_KEY : RQ_MINUTES, &a, minute_row, &mc);
}

void pg_last_error(struct store *base, char *buf, size_t len)
{
    struct pgs *s = to_pgs(base);
    pthread_mutex_lock(&s->pool_lock);
    snprintf(buf, len, "%s", s->rerr);
    pthread_mutex_unlock(&s->pool_lock);
}

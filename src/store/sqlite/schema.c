/*
 * schema.c - the SQLite schema: the migrations that build the tables, the
 * statements each write operation runs on them, and how SQLite's result
 * codes map to the store's. The reads' statements stay in sqlite.c, next to
 * the decoders that depend on their column order.
 *
 * Decisions the header leaves open:
 *  - Migrations never use IF NOT EXISTS: a file that already has tables of
 *    another program fails to migrate instead of being half adopted.
 */
#include <stdio.h>

#include <sqlite3.h>

#include "store/backend.h"
#include "store/sqlite/schema.h"
#include "store/store.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- result codes --------------------------------------------------------- */

static const struct {
    int sqlite; /* an extended code, or a primary one matching all its extensions */
    int err;
} sqlite_errs[] = {
    {SQLITE_CONSTRAINT_UNIQUE, GPO_EEXIST},
    {SQLITE_CONSTRAINT_PRIMARYKEY, GPO_EEXIST},
    {SQLITE_CONSTRAINT_FOREIGNKEY, GPO_ENOENT},
    {SQLITE_CONSTRAINT, GPO_EINVAL},
    {SQLITE_TOOBIG, GPO_EINVAL},
    {SQLITE_MISMATCH, GPO_EINVAL},
    {SQLITE_RANGE, GPO_EINVAL},
    {SQLITE_NOMEM, GPO_ENOMEM},
};

int store_sqlite_err(int rc)
{
    for (size_t k = 0; k < ARRAY_LEN(sqlite_errs); k++)
        if (rc == sqlite_errs[k].sqlite)
            return sqlite_errs[k].err;
    for (size_t k = 0; k < ARRAY_LEN(sqlite_errs); k++)
        if ((rc & 0xff) == sqlite_errs[k].sqlite)
            return sqlite_errs[k].err;
    return GPO_EIO;
}

/* ---- the tables ------------------------------------------------------------ */

/* migrations[k] takes a database from version k to k + 1. Never edit a
 * released step: add one. */
static const char *const migrations[] = {
    /* 1: the base schema. */
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, unix_user TEXT,"
    " team TEXT, role TEXT NOT NULL, created_ms INTEGER NOT NULL);"
    "CREATE TABLE tokens(id INTEGER PRIMARY KEY,"
    " user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,"
    " hash BLOB NOT NULL UNIQUE, label TEXT, created_ms INTEGER NOT NULL);"
    "CREATE TABLE teams(name TEXT PRIMARY KEY, spec TEXT NOT NULL, updated_ms INTEGER NOT NULL);"
    "CREATE TABLE pools(name TEXT PRIMARY KEY, spec TEXT NOT NULL, updated_ms INTEGER NOT NULL);"
    "CREATE TABLE priority_classes(name TEXT PRIMARY KEY, spec TEXT NOT NULL,"
    " updated_ms INTEGER NOT NULL);"
    "CREATE TABLE nodes(name TEXT PRIMARY KEY, spec TEXT NOT NULL, state TEXT NOT NULL,"
    " updated_ms INTEGER);"
    /* AUTOINCREMENT: an id is never given out twice, even after its job is deleted. */
    "CREATE TABLE jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, user_id INTEGER,"
    " team TEXT NOT NULL, state TEXT NOT NULL, submit_ms INTEGER NOT NULL,"
    " updated_ms INTEGER NOT NULL, array_id INTEGER, array_index INTEGER, reason TEXT,"
    " spec TEXT NOT NULL);"
    "CREATE INDEX jobs_state ON jobs(state);"
    "CREATE INDEX jobs_team ON jobs(team, id);"
    "CREATE TABLE attempts(job_id INTEGER NOT NULL REFERENCES jobs(id),"
    " attempt INTEGER NOT NULL, state TEXT NOT NULL, nodes TEXT, gpus TEXT, start_ms INTEGER,"
    " end_ms INTEGER, exit_code INTEGER, signal INTEGER, reason TEXT, epoch INTEGER NOT NULL,"
    " PRIMARY KEY(job_id, attempt));"
    "CREATE TABLE idempotency(user_id INTEGER NOT NULL, key TEXT NOT NULL,"
    " job_id INTEGER NOT NULL, created_ms INTEGER NOT NULL, PRIMARY KEY(user_id, key));"
    "CREATE TABLE sched_state(id INTEGER PRIMARY KEY CHECK (id = 1), epoch INTEGER NOT NULL,"
    " blob BLOB NOT NULL, updated_ms INTEGER NOT NULL);",
    /* 2: indexes for the job list's user and array filters, and for the
     * deletes that cascade (a user's tokens, a job's idempotency keys). */
    "CREATE INDEX jobs_user ON jobs(user_id, id);"
    "CREATE INDEX jobs_array ON jobs(array_id, array_index) WHERE array_id IS NOT NULL;"
    "CREATE INDEX tokens_user ON tokens(user_id);"
    "CREATE INDEX idempotency_job ON idempotency(job_id);",
    /* 3: cost. Prices are config objects like teams (one row per GPU type,
     * the current price); the ledger holds what each attempt cost, one row
     * per stretch of it at one price, written once and never updated. */
    "CREATE TABLE prices(name TEXT PRIMARY KEY, spec TEXT NOT NULL, updated_ms INTEGER NOT NULL);"
    "CREATE TABLE ledger(id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, attempt INTEGER NOT NULL,"
    " seq INTEGER NOT NULL, start_ms INTEGER NOT NULL, end_ms INTEGER NOT NULL,"
    " team TEXT NOT NULL, project TEXT, model TEXT, user TEXT, gpu_type TEXT NOT NULL,"
    " gpu_milli INTEGER NOT NULL, price_micro INTEGER NOT NULL, cost_micro INTEGER NOT NULL,"
    " outcome TEXT, util_sum INTEGER NOT NULL, util_samples INTEGER NOT NULL,"
    " idle_samples INTEGER NOT NULL, UNIQUE(job_id, attempt, seq));"
    "CREATE INDEX ledger_time ON ledger(end_ms);",
    /* 4: one-minute aggregates of the GPUs' samples (kind 'gpu', key its UUID)
     * (and, since the dashboard's time ranges, of the controller's gauges, the
     * queue length and the services' figures: kind 'gauge')
     * and of each job's GPUs (kind 'job', key "JOB.ATTEMPT"), written in
     * batches once a minute and kept 30 days. label: the GPU's node, the
     * job's team (what the series API groups by beyond the raw hour). */
    "CREATE TABLE metric_minutes(kind TEXT NOT NULL, key TEXT NOT NULL,"
    " minute_ms INTEGER NOT NULL, label TEXT NOT NULL, samples INTEGER NOT NULL,"
    " util_sum INTEGER NOT NULL, util_max INTEGER NOT NULL, idle_samples INTEGER NOT NULL,"
    " mem_used_sum_mib INTEGER NOT NULL, mem_used_max_mib INTEGER NOT NULL,"
    " power_sum_mw INTEGER NOT NULL, temp_max_c INTEGER NOT NULL,"
    " PRIMARY KEY(kind, key, minute_ms)) WITHOUT ROWID;"
    "CREATE INDEX metric_minutes_time ON metric_minutes(minute_ms);",
    /* 5: idempotency keys expire (a job insert ignores a key older than its
     * time to live; the expired rows are pruned by their time). */
    "CREATE INDEX idempotency_created ON idempotency(created_ms);",
    /* 6: a job's hold (scontrol's hold and release): NULL, or who holds it,
     * 'user' or 'admin' (a user may not release an admin's hold). */
    "ALTER TABLE jobs ADD COLUMN hold TEXT CHECK (hold IN ('user', 'admin'));",
    /* 7: services (models served by replicas that scale with traffic),
     * config objects like teams. */
    ("CREATE TABLE services(name TEXT PRIMARY KEY, spec TEXT NOT NULL,"
     " updated_ms INTEGER NOT NULL);"),
};

_Static_assert(ARRAY_LEN(migrations) == STORE_SCHEMA_VERSION,
               "STORE_SCHEMA_VERSION is the number of migrations");

int schema_version_get(sqlite3 *db, int64_t *ret_version, char *err, size_t errlen)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        rc = errbuf_set(err, errlen, store_sqlite_err(rc), "reading the schema version: %s",
                        sqlite3_errmsg(db));
        sqlite3_finalize(st);
        return rc;
    }
    *ret_version = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return 0;
}

static int exec(sqlite3 *db, const char *sql, const char *what, char *err, size_t errlen)
{
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        return 0;
    return errbuf_set(err, errlen, store_sqlite_err(rc), "%s: %s", what, sqlite3_errmsg(db));
}

int schema_migrate(sqlite3 *db, int64_t target, char *err, size_t errlen)
{
    if (!db || target < 1 || target > STORE_SCHEMA_VERSION)
        return GPO_EINVAL;
    int rc = exec(db, "BEGIN IMMEDIATE", "starting the migration", err, errlen);
    if (rc)
        return rc;
    int64_t version = 0;
    rc = schema_version_get(db, &version, err, errlen);
    if (rc == 0 && version > STORE_SCHEMA_VERSION)
        rc = errbuf_set(err, errlen, GPO_ETOONEW,
                        "database schema version %lld is newer than this program's %d",
                        (long long)version, STORE_SCHEMA_VERSION);
    else if (rc == 0 && version < 0)
        rc = errbuf_set(err, errlen, GPO_EINVAL,
                        "database schema version %lld is not one of gpuorch's", (long long)version);
    for (int64_t v = version; rc == 0 && v < target; v++) {
        char what[64];
        snprintf(what, sizeof(what), "schema migration %lld", (long long)v + 1);
        rc = exec(db, migrations[v], what, err, errlen);
    }
    if (rc == 0 && version < target) {
        char sql[64];
        snprintf(sql, sizeof(sql), "PRAGMA user_version = %lld", (long long)target);
        rc = exec(db, sql, "setting the schema version", err, errlen);
    }
    if (rc == 0)
        rc = exec(db, "COMMIT", "committing the migration", err, errlen);
    if (rc && !sqlite3_get_autocommit(db))
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

/* ---- the write operations ---------------------------------------------------- */

#define CONFIG_PUT(table, what)                                                                    \
    {                                                                                              \
        what "_put",                                                                               \
            {"INSERT INTO " table "(name, spec, updated_ms) VALUES (?1, ?2, ?3)"                   \
             " ON CONFLICT(name) DO UPDATE SET spec = excluded.spec,"                              \
             " updated_ms = excluded.updated_ms"},                                                 \
            0                                                                                      \
    }
#define CONFIG_DELETE(table, what)                                                                 \
    {                                                                                              \
        what "_delete", {"DELETE FROM " table " WHERE name = ?1"}, SCHEMA_OP_CHANGES               \
    }

const struct schema_op schema_ops[STORE_OP_COUNT] = {
    /* Run by sqlite.c's run_job_insert, in turn: the key's lookup (with a
     * key), the insert, naming an array after its first job (?1: the new id),
     * the key's row (?1 user, ?2 key, ?3 the new id, ?4 submit_ms). */
    [STORE_OP_JOB_INSERT] = {"job_insert",
                             {"SELECT job_id FROM idempotency WHERE user_id = ?1 AND key = ?9"
                              " AND created_ms > ?4 - ?10",
                              "INSERT INTO jobs(user_id, team, state, submit_ms, updated_ms,"
                              " array_id, array_index, reason, spec, hold)"
                              " VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6, ?7, ?8, ?11)",
                              "UPDATE jobs SET array_id = ?1 WHERE id = ?1",
                              "INSERT INTO idempotency(user_id, key, job_id, created_ms)"
                              " VALUES (?1, ?2, ?3, ?4) ON CONFLICT(user_id, key) DO UPDATE"
                              " SET job_id = excluded.job_id, created_ms = excluded.created_ms"},
                             0},
    [STORE_OP_JOB_UPDATE] = {"job_update",
                             {"UPDATE jobs SET state = ?2, reason = ?3, updated_ms = ?4,"
                              " spec = COALESCE(?5, spec) WHERE id = ?1"},
                             SCHEMA_OP_CHANGES},
    [STORE_OP_JOB_HOLD] = {"job_hold",
                           {"UPDATE jobs SET hold = ?2 WHERE id = ?1"},
                           SCHEMA_OP_CHANGES},
    [STORE_OP_JOB_DELETE] = {"job_delete",
                             {"DELETE FROM attempts WHERE job_id = ?1",
                              "DELETE FROM idempotency WHERE job_id = ?1",
                              "DELETE FROM jobs WHERE id = ?1"},
                             SCHEMA_OP_CHANGES},
    [STORE_OP_ATTEMPT_UPSERT] = {"attempt_upsert",
                                 {"INSERT INTO attempts(job_id, attempt, state, nodes, gpus,"
                                  " start_ms, end_ms, exit_code, signal, reason, epoch)"
                                  " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
                                  " ON CONFLICT(job_id, attempt) DO UPDATE SET"
                                  " state = excluded.state, nodes = excluded.nodes,"
                                  " gpus = excluded.gpus, start_ms = excluded.start_ms,"
                                  " end_ms = excluded.end_ms, exit_code = excluded.exit_code,"
                                  " signal = excluded.signal, reason = excluded.reason,"
                                  " epoch = excluded.epoch"},
                                 0},
    [STORE_OP_CONFIG_PUT + STORE_CONFIG_TEAMS] = CONFIG_PUT("teams", "team"),
    [STORE_OP_CONFIG_PUT + STORE_CONFIG_POOLS] = CONFIG_PUT("pools", "pool"),
    [STORE_OP_CONFIG_PUT + STORE_CONFIG_PRIORITY_CLASSES] =
        CONFIG_PUT("priority_classes", "priority_class"),
    [STORE_OP_CONFIG_PUT + STORE_CONFIG_PRICES] = CONFIG_PUT("prices", "price"),
    [STORE_OP_CONFIG_PUT + STORE_CONFIG_SERVICES] = CONFIG_PUT("services", "service"),
    [STORE_OP_CONFIG_DELETE + STORE_CONFIG_TEAMS] = CONFIG_DELETE("teams", "team"),
    [STORE_OP_CONFIG_DELETE + STORE_CONFIG_POOLS] = CONFIG_DELETE("pools", "pool"),
    [STORE_OP_CONFIG_DELETE + STORE_CONFIG_PRIORITY_CLASSES] =
        CONFIG_DELETE("priority_classes", "priority_class"),
    [STORE_OP_CONFIG_DELETE + STORE_CONFIG_PRICES] = CONFIG_DELETE("prices", "price"),
    [STORE_OP_CONFIG_DELETE + STORE_CONFIG_SERVICES] = CONFIG_DELETE("services", "service"),
    [STORE_OP_NODE_PUT] = {"node_put",
                           {"INSERT INTO nodes(name, spec, state, updated_ms)"
                            " VALUES (?1, ?2, ?3, ?4) ON CONFLICT(name) DO UPDATE SET"
                            " spec = excluded.spec, state = excluded.state,"
                            " updated_ms = excluded.updated_ms"},
                           0},
    [STORE_OP_NODE_DELETE] = {"node_delete",
                              {"DELETE FROM nodes WHERE name = ?1"},
                              SCHEMA_OP_CHANGES},
    [STORE_OP_USER_PUT] = {"user_put",
                           {"INSERT INTO users(name, unix_user, team, role, created_ms)"
                            " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(name) DO UPDATE SET"
                            " unix_user = excluded.unix_user, team = excluded.team,"
                            " role = excluded.role"},
                           0},
    [STORE_OP_USER_DELETE] = {"user_delete",
                              {"DELETE FROM users WHERE name = ?1"},
                              SCHEMA_OP_CHANGES},
    [STORE_OP_TOKEN_PUT] = {"token_put",
                            {"INSERT INTO tokens(user_id, hash, label, created_ms)"
                             " SELECT id, ?2, ?3, ?4 FROM users WHERE name = ?1"},
                            SCHEMA_OP_CHANGES},
    [STORE_OP_TOKEN_DELETE] = {"token_delete",
                               {"DELETE FROM tokens WHERE hash = ?1"},
                               SCHEMA_OP_CHANGES},
    [STORE_OP_META_PUT] = {"meta_put",
                           {"INSERT INTO meta(key, value) VALUES (?1, ?2)"
                            " ON CONFLICT(key) DO UPDATE SET value = excluded.value"},
                           0},
    [STORE_OP_SCHED_STATE_PUT] = {"sched_state_put",
                                  {"INSERT INTO sched_state(id, epoch, blob, updated_ms)"
                                   " VALUES (1, ?1, ?2, ?3) ON CONFLICT(id) DO UPDATE SET"
                                   " epoch = excluded.epoch, blob = excluded.blob,"
                                   " updated_ms = excluded.updated_ms"},
                                  0},
    /* Run by sqlite.c's run_epoch_bump: the row returned is the new epoch. */
    [STORE_OP_EPOCH_BUMP] = {"epoch_acquire",
                             {"INSERT INTO meta(key, value) VALUES ('" STORE_META_EPOCH "', '1')"
                              " ON CONFLICT(key) DO UPDATE"
                              " SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)"
                              " RETURNING CAST(value AS INTEGER)"},
                             0},
    /* OR IGNORE: a row is written once and never replaced; the same segment
     * planned twice (two reasons to end one attempt in one batch) keeps the
     * first. */
    [STORE_OP_LEDGER_ADD] = {"ledger_add",
                             {"INSERT OR IGNORE INTO ledger(job_id, attempt, seq, start_ms, end_ms,"
                              " team, project, model, user, gpu_type, gpu_milli, price_micro,"
                              " cost_micro, outcome, util_sum, util_samples, idle_samples)"
                              " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13,"
                              " ?14, ?15, ?16, ?17)"},
                             0},
    /* A minute written twice (a restart within it) adds up. */
    [STORE_OP_MINUTE_PUT] = {"minute_put",
                             {"INSERT INTO metric_minutes(kind, key, minute_ms, label, samples,"
                              " util_sum, util_max, idle_samples, mem_used_sum_mib,"
                              " mem_used_max_mib, power_sum_mw, temp_max_c)"
                              " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
                              " ON CONFLICT(kind, key, minute_ms) DO UPDATE SET"
                              " label = excluded.label, samples = samples + excluded.samples,"
                              " util_sum = util_sum + excluded.util_sum,"
                              " util_max = MAX(util_max, excluded.util_max),"
                              " idle_samples = idle_samples + excluded.idle_samples,"
                              " mem_used_sum_mib = mem_used_sum_mib + excluded.mem_used_sum_mib,"
                              " mem_used_max_mib ="
                              " MAX(mem_used_max_mib, excluded.mem_used_max_mib),"
                              " power_sum_mw = power_sum_mw + excluded.power_sum_mw,"
                              " temp_max_c = MAX(temp_max_c, excluded.temp_max_c)"},
                             0},
    [STORE_OP_MINUTES_PRUNE] = {"minutes_prune",
                                {"DELETE FROM metric_minutes WHERE minute_ms < ?1"},
                                0},
    [STORE_OP_IDEMPOTENCY_PRUNE] = {"idempotency_prune",
                                    {"DELETE FROM idempotency WHERE created_ms < ?1"},
                                    0},
};

const char schema_epoch_sql[] =
    "SELECT CAST(value AS INTEGER) FROM meta WHERE key = '" STORE_META_EPOCH "'";

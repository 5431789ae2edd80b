/*
 * schema.h - the store's private half: what a batch holds and the helpers
 * every backend shares (store.c); the SQLite schema, its migrations and the
 * statements of each write operation (schema.c); and test hooks (sqlite.c).
 *
 * A batch is a list of operations, each a kind and up to STORE_OP_MAXVALS
 * values. The values are in the order of the SQL parameters the SQLite
 * backend binds them to (?1 is v[0]), so that a new operation is one row of
 * schema_ops in schema.c and one add function in store.c.
 */
#ifndef GPUORCH_STORE_SCHEMA_H
#define GPUORCH_STORE_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "store/store.h"

/* The schema version this program writes: the number of migrations. */
#define STORE_SCHEMA_VERSION 4

enum store_op_kind {
    STORE_OP_JOB_INSERT,
    STORE_OP_JOB_UPDATE,
    STORE_OP_JOB_DELETE,
    STORE_OP_ATTEMPT_UPSERT,
    STORE_OP_CONFIG_PUT, /* + enum store_config_kind */
    STORE_OP_CONFIG_PUT_LAST = STORE_OP_CONFIG_PUT + STORE_CONFIG_COUNT - 1,
    STORE_OP_CONFIG_DELETE, /* + enum store_config_kind */
    STORE_OP_CONFIG_DELETE_LAST = STORE_OP_CONFIG_DELETE + STORE_CONFIG_COUNT - 1,
    STORE_OP_NODE_PUT,
    STORE_OP_NODE_DELETE,
    STORE_OP_USER_PUT,
    STORE_OP_USER_DELETE,
    STORE_OP_TOKEN_PUT,
    STORE_OP_TOKEN_DELETE,
    STORE_OP_META_PUT,
    STORE_OP_SCHED_STATE_PUT,
    STORE_OP_EPOCH_BUMP, /* store_epoch_acquire's; no values */
    STORE_OP_LEDGER_ADD,
    STORE_OP_MINUTE_PUT, /* metric_minutes (issue 7, metrics) */
    STORE_OP_MINUTES_PRUNE,
    STORE_OP_COUNT
};

#define STORE_OP_MAXVALS 17 /* a ledger row's columns */

/* One value: a string or blob when s is set (owned by the batch; a blob of
 * length 0 still has an s), else an integer, STORE_NULL meaning SQL NULL. */
struct store_val {
    char *s;
    size_t n;
    int64_t i;
    bool blob;
};

struct store_op {
    enum store_op_kind kind;
    struct store_val v[STORE_OP_MAXVALS];
};

/* Values of STORE_OP_JOB_INSERT, by index. */
enum {
    STORE_JOB_V_USER,
    STORE_JOB_V_TEAM,
    STORE_JOB_V_STATE,
    STORE_JOB_V_SUBMIT,
    STORE_JOB_V_ARRAY_ID,
    STORE_JOB_V_ARRAY_INDEX,
    STORE_JOB_V_REASON,
    STORE_JOB_V_SPEC,
    STORE_JOB_V_IDEM_KEY,
};

struct store_batch {
    struct store_op *ops;
    size_t nops, cap;
    int64_t *job_ids; /* [njobs]: filled by the backend, one per job insert */
    size_t njobs, cap_jobs;
    int64_t epoch; /* of a decision commit; 0: not one */
    /* The outcome, set by the backend before store_batch_complete. */
    int err;
    char msg[256];
    int64_t existing_job_id;
    int64_t new_epoch; /* after a STORE_OP_EPOCH_BUMP */
    /* Queueing, the backend's while the batch is queued. */
    struct store_batch *next;
    store_done_fn done;
    void *ctx;
    bool keep; /* completing does not free it: a waiter reads the outcome */
};

/* ---- shared by every backend: store.c ------------------------------------ */

/* Runs b's completion with its outcome, then frees b unless a waiter keeps
 * it. b must not be touched afterwards. Backends call it once per batch they
 * accepted. */
void store_batch_complete(struct store_batch *b);

/* Frees an attempt's strings and zeroes it (a job owns its attempts' array). */
void store_attempt_release(struct store_attempt *a);

/* Writes a message into b->msg (cut to fit) and returns err. */
__attribute__((format(printf, 3, 4))) int store_batch_fail(struct store_batch *b, int err,
                                                           const char *fmt, ...);

/* ---- SQLite: schema.c ---------------------------------------------------- */

/* PRAGMA user_version of db into *ret_version. 0 or GPO_EIO (message in err). */
int schema_version_get(sqlite3 *db, int64_t *ret_version, char *err, size_t errlen);

/*
 * Brings db to schema version `target` (1..STORE_SCHEMA_VERSION) by applying
 * the missing migrations in order, inside one transaction that also sets
 * user_version; a db at or above target is left as it is. Returns 0;
 * GPO_ETOONEW when db is newer than STORE_SCHEMA_VERSION (nothing changed;
 * err names both versions); GPO_EINVAL; GPO_EIO (err says why).
 */
int schema_migrate(sqlite3 *db, int64_t target, char *err, size_t errlen);

/* The store code of a SQLite result code (extended codes understood). */
int store_sqlite_err(int rc);

#define SCHEMA_OP_MAXSQL 4

enum { SCHEMA_OP_CHANGES = 1 << 0 }; /* the last statement must change a row, else ENOTFOUND */

/* The statements of one write operation. */
struct schema_op {
    const char *name;                  /* for messages */
    const char *sql[SCHEMA_OP_MAXSQL]; /* ?k binds the op's value k - 1 */
    unsigned flags;
};

/* By enum store_op_kind. The backend binds each statement in turn to the
 * operation's values and runs it, but for a job insert and an epoch bump,
 * which it runs itself (their rows in schema.c say how). */
extern const struct schema_op schema_ops[STORE_OP_COUNT];

/* The store's leader epoch, in one row (none before the first acquire). */
extern const char schema_epoch_sql[];

/* ---- SQLite: sqlite.c ---------------------------------------------------- */

/* Test hook: the value of `PRAGMA name` (lowercase letters and '_') on the
 * store's WRITE connection, into buf (len bytes, terminated). Pauses the
 * writer around the query. 0, GPO_EINVAL, GPO_EIO. */
int store_sqlite_pragma(struct store *s, const char *name, char *buf, size_t len);

#endif

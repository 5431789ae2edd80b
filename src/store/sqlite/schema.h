/*
 * schema.h - the SQLite backend's schema: its version and migrations, the
 * statements of each write operation (schema.c), how SQLite's result codes
 * map to the store's, and a test hook (sqlite.c). Private to src/store/sqlite
 * and its tests.
 */
#ifndef GPUORCH_STORE_SQLITE_SCHEMA_H
#define GPUORCH_STORE_SQLITE_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "store/backend.h"
#include "store/store.h"

/* The schema version this program writes: the number of migrations. */
#define STORE_SCHEMA_VERSION 7

/* ---- schema.c ------------------------------------------------------------ */

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

/* ---- sqlite.c ------------------------------------------------------------ */

/* Test hook: the value of `PRAGMA name` (lowercase letters and '_') on the
 * store's WRITE connection, into buf (len bytes, terminated). Pauses the
 * writer around the query. 0, GPO_EINVAL, GPO_EIO. */
int store_sqlite_pragma(struct store *base, const char *name, char *buf, size_t len);

#endif

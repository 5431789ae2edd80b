/*
 * sqlite.h - private to the SQLite backend (sqlite.c, sqlite_read.c): the
 * backend's store object and its read statements. store.h stays the public
 * interface; backend.h is what every backend shares; nothing outside
 * src/store/sqlite includes this.
 *
 * sqlite.c holds the write connection, the group transaction the writer
 * (backend.h) runs on it, and the opening and closing of the store;
 * sqlite_read.c the synchronous reads on the read connection.
 */
#ifndef GPUORCH_STORE_SQLITE_SQLITE_H
#define GPUORCH_STORE_SQLITE_SQLITE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "store/backend.h"
#include "store/sqlite/mark.h"
#include "store/sqlite/schema.h"
#include "store/store.h"

/* The SQLite store: what store_open_sqlite returns behind its struct store. */
struct sq {
    struct store base;
    sqlite3 *wdb; /* the writer thread's (and the opener's, before it starts) */
    sqlite3 *rdb; /* reads, under rlock */
    sqlite3_stmt *wst[STORE_OP_COUNT][SCHEMA_OP_MAXSQL];
    sqlite3_stmt *epoch_st;
    sqlite3_stmt **rst;         /* [RQ_COUNT] */
    struct store_writer writer; /* its own lock guards its queue, flags and stats */
    pthread_mutex_t rlock;
    bool rlock_ready;
    char rerr[256]; /* the latest read error, under rlock */
    /* The mark (mark.h) and the WAL's position, the writer thread's once it
     * runs: the hook records each commit's frame, run_group the mark. */
    struct sq_mark mark;
    int mark_fd; /* -1: none */
    int wal_fd;  /* the WAL, read for its salts; -1 until the first commit */
    char wal_path[4200];
    uint32_t wal_frame; /* the frame of the latest commit, from the WAL hook */
    bool mark_dirty;    /* a mark write failed: the next commit retries it */
    /* The lease (sqlite_lease.c), under rlock: the epoch this object took
     * (0: none), and who it said it was. */
    int64_t lease_epoch;
    char lease_holder[STORE_LEASE_HOLDER_MAX + 1];
    char lease_address[STORE_LEASE_ADDRESS_MAX + 1];
};

/* The struct sq behind a store of this backend. */
static inline struct sq *to_sq(struct store *s)
{
    return (struct sq *)s; /* base is the first member */
}

/* The read statements, prepared once on the read connection (s->rst[rq]). */
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

/* The SQL text of each read statement (sqlite_read.c); sqlite.c prepares them
 * when it opens the read connection. */
extern const char *const sq_rq_sql[RQ_COUNT];

/* ---- the checks at open and the recovery: salvage.c --------------------- */

/* The first column of sql's first row as an integer; 0 when there is no row
 * or the statement fails (a table missing from an empty store). */
int64_t sq_query_int(sqlite3 *db, const char *sql);

/*
 * The database as opened on db (before anything writes to it): PRAGMA
 * quick_check, then its leader epoch and highest job id against the mark's
 * (NULL: no mark). 0, or GPO_ECORRUPT with err naming `path` and what was
 * found (SQLite's first messages), or GPO_EIO.
 */
int sq_check_db(sqlite3 *db, const char *path, const struct sq_mark *mark, char *err,
                size_t errlen);

/*
 * Recovers a damaged store at `path` (damage: what the checks found): moves
 * the database, its WAL and shared-memory file into a new folder beside it
 * (rec->moved_to), copies every row SQLite can still read into a new
 * database at `path` with the current schema, raises its epoch and its job
 * id sequence to the mark's (NULL: none) and lists in rec the job ids whose
 * rows are gone. *ret_mark: the new database's mark. 0, or the error (err
 * says why; the files stay where the message says).
 */
int sq_salvage(const char *path, const struct sq_mark *mark, const char *damage,
               struct store_recovery *rec, struct sq_mark *ret_mark, char *err, size_t errlen);

/* ---- the reads: sqlite_read.c, called through the store's ops ----------- */

/* The backend's store_ops entries for the reads: each takes the read lock
 * and behaves as its store_* counterpart in store.h says; the arguments are
 * already checked. */

/* store_last_error: the latest read error's message into buf. */
void sq_last_error(struct store *base, char *buf, size_t len);
/* store_meta_get: *ret_value freed by the caller. */
int sq_meta_get(struct store *base, const char *key, char **ret_value);
/* store_user_get_by_name. */
int sq_user_get_by_name(struct store *base, const char *name, struct store_user *ret);
/* store_user_get_by_id. */
int sq_user_get_by_id(struct store *base, int64_t id, struct store_user *ret);
/* store_user_get_by_token: hash is STORE_TOKEN_HASH_LEN bytes. */
int sq_user_get_by_token(struct store *base, const uint8_t *hash, struct store_user *ret);
/* store_user_list. */
int sq_user_list(struct store *base, struct store_user **ret_users, size_t *ret_n);
/* store_config_get. */
int sq_config_get(struct store *base, enum store_config_kind kind, const char *name,
                  struct store_config *ret);
/* store_config_list. */
int sq_config_list(struct store *base, enum store_config_kind kind,
                   struct store_config **ret_configs, size_t *ret_n);
/* store_node_list. */
int sq_node_list(struct store *base, struct store_node **ret_nodes, size_t *ret_n);
/* store_job_get: the job and its attempts in one read transaction. */
int sq_job_get(struct store *base, int64_t id, struct store_job *ret);
/* store_job_list. */
int sq_job_list(struct store *base, const struct store_job_filter *f, struct store_job **ret_jobs,
                size_t *ret_n);
/* store_job_scan_active. */
int sq_job_scan_active(struct store *base, store_job_fn fn, void *ctx);
/* store_sched_state_get. */
int sq_sched_state_get(struct store *base, struct store_sched_state *ret);
/* store_idempotency_get. */
int sq_idempotency_get(struct store *base, int64_t user_id, const char *key, int64_t *ret_job_id);
/* store_ledger_range. */
int sq_ledger_range(struct store *base, int64_t since_ms, int64_t until_ms,
                    struct store_ledger_row **ret_rows, size_t *ret_n);
/* store_minutes_get. */
int sq_minutes_get(struct store *base, enum store_minute_kind kind, const char *key,
                   int64_t since_ms, int64_t until_ms, store_minute_fn fn, void *ctx);

/* ---- the lease: sqlite_lease.c (one controller's: always free, never expiring) ---- */

int sq_lease_acquire(struct store *base, const char *holder, const char *address, int64_t ttl_ms,
                     struct store_lease *ret);
int sq_lease_renew(struct store *base, int64_t ttl_ms);
int sq_lease_release(struct store *base);
int sq_lease_get(struct store *base, struct store_lease *ret);

#endif

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

#endif

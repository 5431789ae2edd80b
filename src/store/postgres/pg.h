/*
 * pg.h - private to the PostgreSQL backend (src/store/postgres): the
 * backend's store object, its connections, and what its files share.
 * store.h stays the public interface; backend.h is what every backend
 * shares; nothing outside src/store/postgres includes this.
 *
 * pg.c holds the connections (how they are made and remade), the group
 * transaction the writer (backend.h) runs, and the opening and closing of
 * the store; pg_schema.c the migrations and the statements of each write
 * operation; pg_read.c the reads on a pool of connections; pg_lease.c the
 * lease on a connection of its own.
 *
 * Threads: the write connection is the writer thread's (the opener's before
 * it starts); each pooled read connection is lent to one reader at a time
 * under pool_lock; the lease connection is used under lease_lock. `epoch`
 * (the lease's epoch this object holds, 0: none) is written by the lease
 * calls and read by the writer, hence atomic.
 */
#ifndef GPUORCH_STORE_POSTGRES_PG_H
#define GPUORCH_STORE_POSTGRES_PG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "store/backend.h"
#include "store/store.h"

/* The schema version this program writes: the number of migrations. */
#define PG_SCHEMA_VERSION 1

#define PG_POOL 4 /* read connections */

/* Statement timeouts (ms): a read's or a lease call's, and the writer's
 * group transaction's; a partition fails calls in seconds rather than hangs
 * them (with the connect timeout and keepalives of pg.c). */
#define PG_CALL_TIMEOUT_MS   5000
#define PG_WRITER_TIMEOUT_MS 30000
/* A session idle inside a transaction this long is ended by the server:
 * a controller cut off mid-transaction does not keep the lease row's lock
 * (and with it a new leader) waiting. Ours never idle there: the writer
 * sends a group's statements back to back. */
#define PG_IDLE_IN_TX_MS 5000

enum pg_role { PG_ROLE_WRITER, PG_ROLE_READ, PG_ROLE_LEASE };

/* One connection and whether its statements are prepared on it. */
struct pg_conn {
    PGconn *c;
    bool prepared;
};

struct pgs {
    struct store base;
    /* libpq keywords and values: the URL's, then ours where it set none. */
    char **keys, **vals;
    size_t nkeys;
    char user_options[1024]; /* the URL's `options`, after ours */
    struct pg_conn w;        /* the writer thread's */
    struct store_writer writer;
    pthread_mutex_t pool_lock;
    pthread_cond_t pool_free;
    struct pg_conn pool[PG_POOL];
    bool pool_busy[PG_POOL];
    bool pool_ready;
    char rerr[256]; /* the latest read (or lease) error, under pool_lock */
    pthread_mutex_t lease_lock;
    bool lease_ready;
    struct pg_conn lease;
    char holder[STORE_LEASE_HOLDER_MAX + 1]; /* under lease_lock: who this object is */
    _Atomic int64_t epoch;                   /* the lease's epoch this object holds; 0: none */
};

static inline struct pgs *to_pgs(struct store *s)
{
    return (struct pgs *)s; /* base is the first member */
}

/* ---- connections: pg.c ----------------------------------------------------- */

/* Makes sure *pc is connected (connecting or resetting as need be) with the
 * role's timeouts, and its role's statements prepared. 0, or GPO_EIO with
 * libpq's message in err. */
int pg_conn_ready(struct pgs *s, struct pg_conn *pc, enum pg_role role, char *err, size_t errlen);

/* The store code of a failed result (its SQLSTATE; GPO_EIO when none), and
 * libpq's message (the result's, else the connection's) into err. */
int pg_result_err(PGconn *c, const PGresult *r, char *err, size_t errlen);

/* Runs a statement without parameters and results; 0 or the error (err). */
int pg_exec(PGconn *c, const char *sql, char *err, size_t errlen);

/* A decimal value of v (an integer; STORE_NULL gives NULL) into buf. */
const char *pg_int_text(int64_t v, char *buf, size_t len);

/* The integer of a result cell; STORE_NULL when it is NULL. */
int64_t pg_cell_int(const PGresult *r, int row, int col);

/* ---- schema: pg_schema.c --------------------------------------------------- */

/* Brings the database to PG_SCHEMA_VERSION under an advisory lock (two
 * openers at once run the migrations once). 0; GPO_ETOONEW (newer than
 * this program, nothing changed); GPO_EIO (err says why). */
int pg_schema_migrate(PGconn *c, char *err, size_t errlen);

#define PG_OP_MAXSQL 4

enum { PG_OP_CHANGES = 1 << 0 }; /* the last statement must change a row, else ENOTFOUND */

/* One statement: its text, and the type of each parameter ($k: types[k - 1],
 * 'i' bigint, 't' text, 'b' bytea), declared so that a parameter the text
 * does not use still has one. */
struct pg_stmt {
    const char *sql;
    const char *types;
};

/* The statements of one write operation; $k is the op's value k - 1, but
 * for a job insert, whose statements pg.c binds itself (pg_schema.c says
 * how). */
struct pg_op {
    const char *name;
    struct pg_stmt st[PG_OP_MAXSQL];
    unsigned flags;
};
extern const struct pg_op pg_ops[STORE_OP_COUNT];

/* The writer's prepared statement of op kind k, statement i: "wK_I". */
void pg_op_stmt_name(size_t kind, size_t i, char *buf, size_t len);

/* Prepares every write statement on c. 0 or the error (err). */
int pg_prepare_writes(PGconn *c, char *err, size_t errlen);

/* ---- reads: pg_read.c ------------------------------------------------------- */

/* Prepares every read statement on c. 0 or the error (err). */
int pg_prepare_reads(PGconn *c, char *err, size_t errlen);

void pg_last_error(struct store *base, char *buf, size_t len);
int pg_meta_get(struct store *base, const char *key, char **ret_value);
int pg_user_get_by_name(struct store *base, const char *name, struct store_user *ret);
int pg_user_get_by_id(struct store *base, int64_t id, struct store_user *ret);
int pg_user_get_by_token(struct store *base, const uint8_t *hash, struct store_user *ret);
int pg_user_list(struct store *base, struct store_user **ret_users, size_t *ret_n);
int pg_config_get(struct store *base, enum store_config_kind kind, const char *name,
                  struct store_config *ret);
int pg_config_list(struct store *base, enum store_config_kind kind,
                   struct store_config **ret_configs, size_t *ret_n);
int pg_node_list(struct store *base, struct store_node **ret_nodes, size_t *ret_n);
int pg_job_get(struct store *base, int64_t id, struct store_job *ret);
int pg_job_list(struct store *base, const struct store_job_filter *f, struct store_job **ret_jobs,
                size_t *ret_n);
int pg_job_scan_active(struct store *base, store_job_fn fn, void *ctx);
int pg_sched_state_get(struct store *base, struct store_sched_state *ret);
int pg_idempotency_get(struct store *base, int64_t user_id, const char *key, int64_t *ret_job_id);
int pg_ledger_range(struct store *base, int64_t since_ms, int64_t until_ms,
                    struct store_ledger_row **ret_rows, size_t *ret_n);
int pg_minutes_get(struct store *base, enum store_minute_kind kind, const char *key,
                   int64_t since_ms, int64_t until_ms, store_minute_fn fn, void *ctx);

/* ---- the lease: pg_lease.c -------------------------------------------------- */

int pg_lease_acquire(struct store *base, const char *holder, const char *address, int64_t ttl_ms,
                     struct store_lease *ret);
int pg_lease_renew(struct store *base, int64_t ttl_ms);
int pg_lease_release(struct store *base);
int pg_lease_get(struct store *base, struct store_lease *ret);

#endif

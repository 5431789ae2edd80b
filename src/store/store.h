/*
 * store.h - the controller's durable store.
 *
 * The controller keeps its scheduling state in memory and writes every change
 * through this store before it acknowledges it: a job is accepted only once
 * its row is committed, so it survives kill -9 of the controller, and a
 * restart reloads everything from here.
 *
 * Writes go in batches. A caller builds a batch of operations (each operation
 * copies what it is given), then hands it to store_commit. One writer thread
 * per store takes everything queued, runs it in ONE transaction (group
 * commit), each batch inside its own savepoint: a batch that fails is rolled
 * back alone and reported to its caller while the others commit. Each
 * caller's completion runs after the transaction is durable.
 *
 * Reads are synchronous and may be called from any thread; they see every
 * batch whose completion has run.
 *
 * A batch may be a DECISION commit carrying the leader epoch of the
 * controller that made it. The store keeps the highest epoch it issued; a
 * decision with a lower one is refused (GPO_EFENCED) and changes nothing,
 * so a stale controller cannot overwrite its successor's decisions.
 *
 * Backends: SQLite (store_open_sqlite, in src/store/sqlite/: one controller's,
 * the embedded default) and PostgreSQL (store_open_postgres, in
 * src/store/postgres/: shared by any number of controllers, one of which
 * leads by the lease below). Every backend fills a `struct store_ops` (src/store/backend.h, the
 * private half); the functions below check their arguments and dispatch
 * through it, so the checks and limits are the same everywhere.
 *
 * Conventions: functions return 0 or a negative GPO_* code; out-parameters
 * (ret_*) are set only on success. Nullable integer columns read and write
 * STORE_NULL. Strings are NUL-terminated; JSON texts (specs) are stored as
 * given, never parsed. Out of memory: GPO_ENOMEM, inputs unchanged.
 */
#ifndef GPUORCH_STORE_STORE_H
#define GPUORCH_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/err.h"

/* An absent value of a nullable integer column. */
#define STORE_NULL INT64_MIN

/* Caps on what callers may hand the store (bytes, without the NUL). */
#define STORE_MAX_NAME       256          /* names, keys, states, teams, roles, labels */
#define STORE_MAX_TEXT       (4u << 20)   /* a spec, a reason, nodes or gpus JSON */
#define STORE_MAX_BLOB       (256u << 20) /* the scheduler's state */
#define STORE_MAX_OPS        100000       /* operations in one batch */
#define STORE_LIST_MAX       1000         /* rows in one page of store_job_list */
#define STORE_MAX_STATES     16           /* states in one job filter */
#define STORE_TOKEN_HASH_LEN 32           /* SHA-256 */

/* How long an idempotency key names its job by default: 24 hours. */
#define STORE_IDEMPOTENCY_TTL_MS 86400000LL

/* The meta key holding the leader epoch: written only by store_epoch_acquire. */
#define STORE_META_EPOCH "epoch"

/* Job states that are not final: store_job_scan_active returns these jobs. */
#define STORE_JOB_PENDING   "PENDING"
#define STORE_JOB_RUNNING   "RUNNING"
#define STORE_JOB_PREEMPTED "PREEMPTED"

/* The config objects `apply -f` manages: one table each. */
enum store_config_kind {
    STORE_CONFIG_TEAMS,
    STORE_CONFIG_POOLS,
    STORE_CONFIG_PRIORITY_CLASSES,
    STORE_CONFIG_PRICES,   /* per GPU type (cost) */
    STORE_CONFIG_SERVICES, /* served models (cluster_service) */
    STORE_CONFIG_COUNT
};

struct store;

/* ---- rows: every string is owned by its row ---------------------------- */

struct store_user {
    int64_t id;
    char *name;
    char *unix_user; /* NULL: none */
    char *team;      /* NULL: none */
    char *role;
    int64_t created_ms;
};
/* Frees what *u holds and zeroes it; NULL is fine. */
void store_user_release(struct store_user *u);
/* Releases users[0, n) and frees the array; NULL is fine. */
void store_users_free(struct store_user *users, size_t n);

struct store_config {
    char *name;
    char *spec; /* JSON text */
    int64_t updated_ms;
};
void store_config_release(struct store_config *c);
void store_configs_free(struct store_config *configs, size_t n);

struct store_node {
    char *name;
    char *spec; /* JSON text */
    char *state;
    int64_t updated_ms; /* STORE_NULL: never set */
};
void store_node_release(struct store_node *n);
void store_nodes_free(struct store_node *nodes, size_t n);

struct store_attempt {
    int64_t job_id, attempt;
    char *state;
    char *nodes;                                 /* JSON text or NULL */
    char *gpus;                                  /* JSON array of GPU UUIDs, or NULL */
    int64_t start_ms, end_ms, exit_code, signal; /* STORE_NULL: not known */
    char *reason;                                /* NULL: none */
    int64_t epoch;                               /* of the controller that wrote it */
};

struct store_job {
    int64_t id;
    int64_t user_id; /* STORE_NULL: none */
    char *team;
    char *state;
    int64_t submit_ms, updated_ms;
    int64_t array_id, array_index; /* STORE_NULL: not part of an array */
    char *reason;                  /* NULL: none */
    char *spec;                    /* the submission, JSON text as given */
    char *hold;                    /* NULL: not held; "user" or "admin": who holds it */
    /* store_job_get: every attempt, by attempt number; store_job_scan_active:
     * the latest one, if any; store_job_list: none. Owned by the job. */
    struct store_attempt *attempts;
    size_t nattempts;
};
/* Frees what *j holds (its attempts too) and zeroes it; NULL is fine. */
void store_job_release(struct store_job *j);
void store_jobs_free(struct store_job *jobs, size_t n);

struct store_sched_state {
    int64_t epoch;
    void *blob; /* owned; NULL when len is 0 */
    size_t len;
    int64_t updated_ms;
};
void store_sched_state_release(struct store_sched_state *st);

/* ---- batches ------------------------------------------------------------ */

struct store_batch;

/* A new, empty batch; NULL when out of memory. */
struct store_batch *store_batch_new(void);
/* Frees a batch that was not committed; NULL is fine. */
void store_batch_free(struct store_batch *b);

/*
 * Marks the batch as a decision commit made under leader `epoch` (> 0). When
 * it runs, an epoch lower than the store's is refused with GPO_EFENCED; one
 * higher than any the store issued, with GPO_EINVAL. Either way the batch
 * changes nothing.
 */
int store_batch_set_decision(struct store_batch *b, int64_t epoch);

/* Adding an operation copies every string and buffer it is given, so the
 * caller may free them at once. Each returns 0; GPO_EINVAL for a missing
 * or over-long field or a full batch; GPO_ENOMEM. On error the batch is
 * unchanged. */

/* The array_id of a job that is the batch's first inserted job or in the same
 * array as it: an array submitted as one batch is named after its first job. */
#define STORE_ARRAY_FIRST INT64_C(-1)

struct store_job_insert {
    int64_t user_id;   /* STORE_NULL: none */
    const char *team;  /* required */
    const char *state; /* required */
    int64_t submit_ms; /* also the first updated_ms */
    int64_t array_id;  /* STORE_NULL, a job id, or STORE_ARRAY_FIRST */
    int64_t array_index;
    const char *reason; /* NULL: none */
    const char *spec;   /* required, JSON text */
    /* NULL: none. With one, the insert needs a user_id, and when (user_id,
     * key) was used within idempotency_ttl_ms before submit_ms the batch
     * fails with GPO_EEXIST and names the job that key created
     * (store_result.existing_job_id); a key older than that makes a new job
     * and from then on names it. */
    const char *idempotency_key;
    int64_t idempotency_ttl_ms; /* 0: STORE_IDEMPOTENCY_TTL_MS */
    const char *hold;           /* NULL: not held; "user" or "admin" */
};
#define STORE_JOB_INSERT_INIT                                                                      \
    {                                                                                              \
        .user_id = STORE_NULL, .array_id = STORE_NULL, .array_index = STORE_NULL                   \
    }
/* The store assigns the id (increasing, never reused): the k-th job_insert of
 * a batch gets store_result.job_ids[k]. */
int store_batch_job_insert(struct store_batch *b, const struct store_job_insert *j);

/* Sets a job's state, reason (NULL clears it) and updated_ms, and its spec
 * unless `spec` is NULL. The batch fails with GPO_ENOENT when no job has
 * that id. */
int store_batch_job_update(struct store_batch *b, int64_t id, const char *state, const char *reason,
                           int64_t updated_ms, const char *spec);

/* Sets a job's hold: NULL releases it, "user" or "admin" says who holds it
 * (anything else fails the batch with GPO_EINVAL). updated_ms stays: a
 * job's place in the queue does not change by a hold. GPO_ENOENT as above. */
int store_batch_job_hold(struct store_batch *b, int64_t id, const char *hold);

/* Deletes every idempotency key used before before_ms (expired keys: a
 * job insert already ignores them; this frees their rows). */
int store_batch_idempotency_prune(struct store_batch *b, int64_t before_ms);

/* Deletes a job, its attempts and its idempotency keys (ENOTFOUND if none).
 * Its id is never given out again. */
int store_batch_job_delete(struct store_batch *b, int64_t id);

struct store_attempt_upsert {
    int64_t job_id, attempt;                     /* the key; the job must exist (ENOTFOUND) */
    const char *state;                           /* required */
    const char *nodes, *gpus;                    /* JSON text or NULL */
    int64_t start_ms, end_ms, exit_code, signal; /* STORE_NULL: not known */
    const char *reason;                          /* NULL: none */
    int64_t epoch;
};
#define STORE_ATTEMPT_UPSERT_INIT                                                                  \
    {                                                                                              \
        .start_ms = STORE_NULL, .end_ms = STORE_NULL, .exit_code = STORE_NULL,                     \
        .signal = STORE_NULL                                                                       \
    }
/* Inserts or replaces the attempt (job_id, attempt): every column is set. */
int store_batch_attempt_upsert(struct store_batch *b, const struct store_attempt_upsert *a);

/* Inserts or replaces a config object; delete fails the batch with
 * GPO_ENOENT when there is no such object. */
int store_batch_config_put(struct store_batch *b, enum store_config_kind kind, const char *name,
                           const char *spec, int64_t updated_ms);
int store_batch_config_delete(struct store_batch *b, enum store_config_kind kind, const char *name);

int store_batch_node_put(struct store_batch *b, const char *name, const char *spec,
                         const char *state, int64_t updated_ms);
int store_batch_node_delete(struct store_batch *b, const char *name);

/* Inserts a user, or updates the user of that name (created_ms then stays).
 * unix_user and team may be NULL. Read the id back with
 * store_user_get_by_name. */
int store_batch_user_put(struct store_batch *b, const char *name, const char *unix_user,
                         const char *team, const char *role, int64_t created_ms);
/* Deletes a user and, with it, its tokens (ENOTFOUND if none). */
int store_batch_user_delete(struct store_batch *b, const char *name);

/* Adds a token of user `user_name` (ENOTFOUND if none; a user put earlier in
 * the same batch counts) by the SHA-256 of the token, never the token; the
 * same hash twice fails with GPO_EEXIST. label may be NULL. */
int store_batch_token_put(struct store_batch *b, const char *user_name,
                          const uint8_t hash[STORE_TOKEN_HASH_LEN], const char *label,
                          int64_t created_ms);
int store_batch_token_delete(struct store_batch *b, const uint8_t hash[STORE_TOKEN_HASH_LEN]);

/* Sets a small meta value. STORE_META_EPOCH is refused (GPO_EINVAL). */
int store_batch_meta_put(struct store_batch *b, const char *key, const char *value);

/* Replaces the scheduler's carry-over state: `len` opaque bytes (len may be
 * 0, blob then may be NULL). */
int store_batch_sched_state_put(struct store_batch *b, int64_t epoch, const void *blob, size_t len,
                                int64_t updated_ms);

/* ---- committing --------------------------------------------------------- */

/* What a committed (or failed) batch reports. Everything it points to is
 * valid only during the completion call. */
struct store_result {
    int err;                 /* 0 or a negative GPO_* code */
    const char *msg;         /* never NULL: details of err ("" if none) */
    const int64_t *job_ids;  /* on success: the id of each job_insert, in order */
    size_t njob_ids;         /* 0 on failure */
    int64_t existing_job_id; /* on GPO_EEXIST from an idempotency key: that job; else 0 */
};

/* Runs on the writer thread after the batch's transaction is durable (or has
 * failed). It must not block on the store's writer: no store_commit_wait,
 * store_epoch_acquire, store_pause_writer or store_close from it (reads and
 * store_commit are fine). */
typedef void (*store_done_fn)(void *ctx, const struct store_result *r);

/*
 * Queues batch `b` (taken in every case) for the writer. Returns 0, and
 * `done` (may be NULL) will run exactly once; or GPO_EINVAL, or
 * GPO_ESHUTDOWN once store_close has begun: `done` will not run and the batch
 * is freed.
 */
int store_commit(struct store *s, struct store_batch *b, store_done_fn done, void *ctx);

/*
 * store_commit, then waits for the outcome; returns the batch's result (b is
 * taken in every case). On success ret_job_ids[k] (k < ids_cap; ret_job_ids
 * may be NULL with ids_cap 0) gets the id of the k-th job_insert. On
 * GPO_EEXIST from an idempotency key ret_job_ids[0] gets the existing job's
 * id: that is the answer a retried submission needs. On any error `msg`
 * (msglen bytes, always terminated; may be NULL) gets the details. Not from a
 * completion callback.
 */
int store_commit_wait(struct store *s, struct store_batch *b, int64_t *ret_job_ids, size_t ids_cap,
                      char *msg, size_t msglen);

/* Bumps the store's leader epoch and returns the new one, durably: a
 * controller calls it once as it starts, and makes every decision under it. */
int store_epoch_acquire(struct store *s, int64_t *ret_epoch);

/* ---- leadership: several controllers on one shared store ----------------
 *
 * On a shared backend (PostgreSQL) one controller leads by a LEASE kept in
 * the store: a row with the leader's epoch, its holder id, its advertised
 * address and an expiry by the store's own clock (no two controllers' clocks
 * are compared). Taking the lease anew bumps the epoch; from then on EVERY
 * commit of this store object (decisions and plain writes alike) runs in a
 * transaction that first reads the lease row's epoch under a share lock and
 * fails with GPO_EFENCED, changing nothing, when it is no longer this
 * object's: a stale leader can neither decide nor accept a submission its
 * successor would not see. The bump takes the same row's update lock, so a
 * commit and a change of leader are ordered.
 *
 * The lease functions run synchronously on a connection of their own (never
 * queued behind the writer), each bounded by the backend's statement and
 * connect timeouts (a few seconds), so an unreachable store fails them
 * rather than hangs them. They may be called from any one thread.
 *
 * On SQLite (one controller's) the lease is always free to take and never
 * expires: acquire bumps the epoch as store_epoch_acquire does, renew checks
 * the epoch is still the store's.
 */
#define STORE_LEASE_HOLDER_MAX  128  /* bytes, without the NUL */
#define STORE_LEASE_ADDRESS_MAX 1023 /* bytes, without the NUL */

struct store_lease {
    int64_t epoch;                             /* the lease's epoch; 0: never taken */
    char holder[STORE_LEASE_HOLDER_MAX + 1];   /* the holder's id; "" when never taken */
    char address[STORE_LEASE_ADDRESS_MAX + 1]; /* its advertised URL; "" when never taken */
    int64_t remaining_ms; /* how long it still holds, by the store's clock; <= 0: expired
                             (or released), INT64_MAX on SQLite */
};

/* Whether several controllers may share this store (PostgreSQL: true). */
bool store_shared(struct store *s);

/*
 * Takes the lease for `holder` (1..STORE_LEASE_HOLDER_MAX bytes, unique per
 * controller process) advertising `address` (0..STORE_LEASE_ADDRESS_MAX
 * bytes) for ttl_ms (1..3600000) from now by the store's clock, when nobody
 * holds it, it expired, or `holder` holds it already (then it is renewed,
 * same epoch). Taking it anew bumps the epoch durably, and this store's
 * commits carry the new epoch from then on. Returns 0 and *ret (the lease
 * now ours); GPO_EBUSY when another holds it, *ret saying who and for how
 * long; GPO_EIO (unreachable, timed out; store_last_error says why),
 * GPO_EINVAL, GPO_ENOMEM.
 */
int store_lease_acquire(struct store *s, const char *holder, const char *address, int64_t ttl_ms,
                        struct store_lease *ret);

/*
 * Extends the lease this store object took to ttl_ms from now (store
 * clock). 0; GPO_EFENCED when another took it since (or it was never
 * ours): this object's commits fail from now on; GPO_EIO as above (the
 * caller counts its own time: it leads only until the send time of its last
 * successful renewal plus ttl_ms).
 */
int store_lease_renew(struct store *s, int64_t ttl_ms);

/* Gives the lease up at a clean stop: it expires now, so a follower may
 * take it at its next try. 0, GPO_EFENCED (not ours), GPO_EIO. */
int store_lease_release(struct store *s);

/* The lease as it stands. 0 and *ret; GPO_EIO. */
int store_lease_get(struct store *s, struct store_lease *ret);

/* Counters since the store was opened. */
struct store_stats {
    uint64_t transactions;   /* group transactions run (committed or not) */
    uint64_t batches;        /* batches completed by the writer */
    uint64_t batches_failed; /* of which failed */
    uint64_t queued;         /* batches waiting for the writer now */
};
void store_get_stats(struct store *s, struct store_stats *ret);

/* Hold the writer: it finishes the transaction it is running, then takes
 * nothing more until as many resumes as pauses were made; batches queue
 * meanwhile and then commit together. For tests and maintenance. Closing
 * overrides a pause. */
void store_pause_writer(struct store *s);
void store_resume_writer(struct store *s);

/* ---- reads: synchronous, safe from any thread --------------------------- */

/* After a read failed with GPO_EIO: the backend's message (of the latest
 * failed read of this store, whichever thread made it), into buf (len bytes,
 * always terminated). */
void store_last_error(struct store *s, char *buf, size_t len);

/* *ret_value: caller frees with free(). ENOTFOUND if unset. */
int store_meta_get(struct store *s, const char *key, char **ret_value);

/* *ret: caller releases with store_user_release. ENOTFOUND if none. */
int store_user_get_by_name(struct store *s, const char *name, struct store_user *ret);
int store_user_get_by_id(struct store *s, int64_t id, struct store_user *ret);
int store_user_get_by_token(struct store *s, const uint8_t hash[STORE_TOKEN_HASH_LEN],
                            struct store_user *ret);
/* Every user by id; caller frees with store_users_free(*ret_users, *ret_n). */
int store_user_list(struct store *s, struct store_user **ret_users, size_t *ret_n);

int store_config_get(struct store *s, enum store_config_kind kind, const char *name,
                     struct store_config *ret);
/* By name; caller frees with store_configs_free. */
int store_config_list(struct store *s, enum store_config_kind kind,
                      struct store_config **ret_configs, size_t *ret_n);

/* By name; caller frees with store_nodes_free. */
int store_node_list(struct store *s, struct store_node **ret_nodes, size_t *ret_n);

/* The job with all its attempts; caller releases with store_job_release. */
int store_job_get(struct store *s, int64_t id, struct store_job *ret);

/* Filters of store_job_list: every field narrows the list; zeroed and
 * STORE_NULL fields do not. Start with STORE_JOB_FILTER_INIT. */
struct store_job_filter {
    const char *const *states; /* any of states[0, nstates); nstates 0: any state */
    size_t nstates;            /* <= STORE_MAX_STATES */
    const char *team;          /* NULL: any */
    int64_t user_id;           /* STORE_NULL: any */
    int64_t array_id;          /* STORE_NULL: any */
    int64_t after_id;          /* keyset paging: only ids > after_id (0: from the start) */
    size_t limit;              /* 1..STORE_LIST_MAX */
};
#define STORE_JOB_FILTER_INIT                                                                      \
    {                                                                                              \
        .user_id = STORE_NULL, .array_id = STORE_NULL, .limit = STORE_LIST_MAX                     \
    }
/* One page of matching jobs by increasing id, without attempts: at most
 * limit; the next page starts after the last id returned, and fewer than
 * limit rows means the end. Caller frees with store_jobs_free. */
int store_job_list(struct store *s, const struct store_job_filter *f, struct store_job **ret_jobs,
                   size_t *ret_n);

/* Calls fn once per job not in a final state (PENDING, RUNNING, PREEMPTED),
 * by increasing id, with its latest attempt if it has any: what a restarted
 * controller reloads. The job is borrowed for the call. fn returns 0 to go
 * on, anything else to stop (store_job_scan_active then returns it). fn must
 * not call the store's reads (they wait for this one). */
typedef int (*store_job_fn)(void *ctx, const struct store_job *j);
int store_job_scan_active(struct store *s, store_job_fn fn, void *ctx);

/* Caller releases with store_sched_state_release. ENOTFOUND if never put. */
int store_sched_state_get(struct store *s, struct store_sched_state *ret);

/* The job that (user_id, key) last created, however long ago (expiry is
 * the job insert's: store_job_insert); ENOTFOUND if none. */
int store_idempotency_get(struct store *s, int64_t user_id, const char *key, int64_t *ret_job_id);

/* ---- the cost ledger ----------------------------------------------------- */

/* One stretch of an attempt at one price on one GPU type: written once, when
 * the stretch closes, never updated. Costs and prices are in millionths of
 * the price unit. */
struct store_ledger_row {
    int64_t job_id, attempt, seq; /* the key */
    int64_t start_ms, end_ms;     /* start < end... or equal for an empty stretch */
    char *team;                   /* required */
    char *project, *model, *user; /* NULL: none */
    char *gpu_type;               /* required */
    int64_t gpu_milli;            /* the GPU shares held of that type, in milli-GPU */
    int64_t price_micro;          /* per GPU-hour */
    int64_t cost_micro;
    /* The attempt's final state; NULL for a stretch closed by a price change
     * (written NULL: a read fills in the attempt's state from its row). */
    char *outcome;
    int64_t util_sum, util_samples, idle_samples;
};
/* Frees the strings of rows[0, n) and the array; NULL is fine. */
void store_ledger_rows_free(struct store_ledger_row *rows, size_t n);

/* Adds a ledger row (strings borrowed, copied). A row whose key exists is
 * left as it was (rows are never rewritten). 0, GPO_EINVAL, GPO_ENOMEM. */
int store_batch_ledger_add(struct store_batch *b, const struct store_ledger_row *row);

/*
 * Every ledger row overlapping [since_ms, until_ms) (start < until and end >
 * since; an empty row at since counts), by end_ms then key, with outcome
 * filled from the attempt's row where it was written NULL. Rows are whole,
 * not clipped. Caller frees with store_ledger_rows_free. GPO_EINVAL when
 * since > until.
 */
int store_ledger_range(struct store *s, int64_t since_ms, int64_t until_ms,
                       struct store_ledger_row **ret_rows, size_t *ret_n);

/* ---- metric minutes (one-minute aggregates of GPU samples) ---- */

enum store_minute_kind {
    STORE_MINUTE_GPU, /* key: the GPU's UUID, label: its node */
    STORE_MINUTE_JOB, /* key: "JOB.ATTEMPT", label: the job's team */
    /* the controller's gauges, label "": the queue length (key "total",
     * "team/NAME" or "priority/NAME") and the services' figures (key
     * "service/TEAM/NAME/ready", ".../desired", "rps", "p50", "p99"); the
     * points of the minute (samples, util_sum: their count and sum) */
    STORE_MINUTE_GAUGE,
    STORE_MINUTE_KINDS
};

/* The kind's name in the store ("gpu", "job", "gauge"); NULL out of range. */
const char *store_minute_kind_name(enum store_minute_kind kind);

/* One minute of one GPU or attempt: sums over its samples (samples with a
 * utilization), maxima, and how many were under the idle threshold. */
struct store_minute {
    enum store_minute_kind kind;
    const char *key;   /* required */
    const char *label; /* required ("" is fine) */
    int64_t minute_ms; /* the minute's start */
    int64_t samples, util_sum, util_max, idle_samples;
    int64_t mem_sum_mib, mem_max_mib, power_sum_mw, temp_max_c;
};

/* Adds a minute (strings copied). A minute already stored under the same
 * (kind, key, minute_ms) is merged: sums added, maxima kept. 0, GPO_EINVAL,
 * GPO_ENOMEM. */
int store_batch_minute_put(struct store_batch *b, const struct store_minute *m);
/* Deletes every minute that began before before_ms (retention). */
int store_batch_minutes_prune(struct store_batch *b, int64_t before_ms);

/*
 * Calls fn for each stored minute of `kind` (of `key` only, unless NULL)
 * that began in [since_ms, until_ms), by minute then key. The row and its
 * strings are borrowed for the call; fn returns 0 to go on (anything else
 * stops the scan and is returned) and must not call the store. 0,
 * GPO_EINVAL (since > until, bad kind), GPO_EIO.
 */
typedef int (*store_minute_fn)(void *ctx, const struct store_minute *m);
int store_minutes_get(struct store *s, enum store_minute_kind kind, const char *key,
                      int64_t since_ms, int64_t until_ms, store_minute_fn fn, void *ctx);

/* ---- opening and closing ------------------------------------------------ */

/*
 * Opens (creating it if need be) the SQLite database at `path` in WAL mode
 * with synchronous=FULL and foreign keys on, migrates an older schema to the
 * current one, and starts the writer. *ret_store: close with store_close.
 * Returns 0; GPO_ETOONEW when the database's schema is newer than this
 * program knows (the file is left as it was); GPO_EIO; GPO_EINVAL;
 * GPO_ENOMEM. On error `err` (errlen bytes, always terminated; may be
 * NULL) says why, naming both versions for GPO_ETOONEW. The checks of
 * store_open_sqlite_opts run first: GPO_ECORRUPT on damage.
 */
int store_open_sqlite(const char *path, struct store **ret_store, char *err, size_t errlen);

/* Options of store_open_sqlite_opts. */
enum store_open_flag {
    /* Damage found at open is recovered rather than refused. */
    STORE_OPEN_RECOVER = 1 << 0,
};

/* A range of job ids, both ends included. */
struct store_id_range {
    int64_t first, last;
};

/* What an open with STORE_OPEN_RECOVER did; zeroed when nothing was damaged. */
struct store_recovery {
    bool recovered;      /* damage was found, and the store rebuilt from what was readable */
    char damage[1024];   /* what the checks found */
    char moved_to[4200]; /* the folder the damaged files were moved into (kept) */
    char notes[1024];    /* rows of other tables that could not be read, "" if none */
    struct store_id_range *lost; /* job ids whose rows are gone, increasing; owned */
    size_t nlost;
    int64_t job_id_floor; /* new jobs get ids above this */
};
/* Frees what *r holds and zeroes it; NULL is fine. */
void store_recovery_release(struct store_recovery *r);

/*
 * store_open_sqlite, checking the store first. Before SQLite opens the
 * database (which runs its WAL recovery), the WAL is checked against
 * SQLite's file format and the last acknowledged commit (recorded in the
 * mark file PATH.mark); then PRAGMA quick_check, and the database's epoch
 * and highest job id against the mark's. A store is new only when neither
 * PATH nor PATH.mark exists: a database missing beside a mark, or one that
 * reads older than its mark, is damage. On damage: GPO_ECORRUPT, err
 * naming the file and what was found (offset, frame, SQLite's messages),
 * nothing changed; with STORE_OPEN_RECOVER, the damaged files are moved
 * aside, what can be read is copied into a new database, and *rec (may be
 * NULL; release it with store_recovery_release) says what was lost. Epochs
 * and job ids never go back: a recovered store continues above the mark's.
 */
int store_open_sqlite_opts(const char *path, unsigned flags, struct store_recovery *rec,
                           struct store **ret_store, char *err, size_t errlen);

/*
 * Opens the PostgreSQL database named by `url` (a libpq connection URI,
 * "postgres://USER@HOST:PORT/DB?..." or "postgresql://..."), migrating its
 * schema (versioned, the same tables and meaning as SQLite's) and starting
 * the writer (group commit: one transaction, a savepoint per batch, on one
 * connection; reads on a small pool of their own). Connections set a
 * connect timeout, TCP keepalives and a statement timeout, so a partition
 * fails calls within seconds. Nothing is led until store_lease_acquire:
 * commits before it fail with GPO_EFENCED. Returns as store_open_sqlite;
 * GPO_EIO when the server cannot be reached (err says libpq's reason).
 */
int store_open_postgres(const char *url, struct store **ret_store, char *err, size_t errlen);

/* Whether `url` names a PostgreSQL store (postgres:// or postgresql://). */
bool store_url_is_postgres(const char *url);

/*
 * Refuses new batches (GPO_ESHUTDOWN), lets the writer commit every batch
 * already queued (each completion runs, with its result), joins it and
 * closes the store. NULL is fine. Not from a completion callback.
 */
void store_close(struct store *s);

#endif

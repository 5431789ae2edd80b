/*
 * backend.h - the store's private, backend-neutral half: what every backend
 * implements (struct store_ops), what a batch holds (the operations and their
 * values), the helpers store.c shares with the backends, and the writer
 * thread with its group commit (writer.c), which every backend runs its
 * transactions on. store.h stays the public interface; only src/store
 * includes this. Each backend lives in a folder of its own (sqlite/) and
 * includes this header, never another backend's.
 *
 * A batch is a list of operations, each a kind and up to STORE_OP_MAXVALS
 * values, in the order of the parameters of the operation's statements (the
 * SQLite backend binds v[0] to ?1): a new operation is one enum value, one
 * add function in store.c and one row in each backend's table of statements.
 */
#ifndef GPUORCH_STORE_BACKEND_H
#define GPUORCH_STORE_BACKEND_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

/* ---- what every backend implements --------------------------------------- */

/* The public functions of store.h check their arguments (non-NULL, limits)
 * before they call these. */
struct store_ops {
    int (*commit)(struct store *s, struct store_batch *b, store_done_fn done, void *ctx);
    void (*get_stats)(struct store *s, struct store_stats *ret);
    void (*pause_writer)(struct store *s);
    void (*resume_writer)(struct store *s);
    void (*last_error)(struct store *s, char *buf, size_t len);
    int (*meta_get)(struct store *s, const char *key, char **ret_value);
    int (*user_get_by_name)(struct store *s, const char *name, struct store_user *ret);
    int (*user_get_by_id)(struct store *s, int64_t id, struct store_user *ret);
    int (*user_get_by_token)(struct store *s, const uint8_t *hash, struct store_user *ret);
    int (*user_list)(struct store *s, struct store_user **ret_users, size_t *ret_n);
    int (*config_get)(struct store *s, enum store_config_kind kind, const char *name,
                      struct store_config *ret);
    int (*config_list)(struct store *s, enum store_config_kind kind,
                       struct store_config **ret_configs, size_t *ret_n);
    int (*node_list)(struct store *s, struct store_node **ret_nodes, size_t *ret_n);
    int (*job_get)(struct store *s, int64_t id, struct store_job *ret);
    int (*job_list)(struct store *s, const struct store_job_filter *f, struct store_job **ret_jobs,
                    size_t *ret_n);
    int (*job_scan_active)(struct store *s, store_job_fn fn, void *ctx);
    int (*sched_state_get)(struct store *s, struct store_sched_state *ret);
    int (*idempotency_get)(struct store *s, int64_t user_id, const char *key, int64_t *ret_job_id);
    void (*close)(struct store *s);
    int (*ledger_range)(struct store *s, int64_t since_ms, int64_t until_ms,
                        struct store_ledger_row **ret_rows, size_t *ret_n);
    int (*minutes_get)(struct store *s, enum store_minute_kind kind, const char *key,
                       int64_t since_ms, int64_t until_ms, store_minute_fn fn, void *ctx);
    /* Leadership (store.h); shared is false for a one-controller backend. */
    bool shared;
    int (*lease_acquire)(struct store *s, const char *holder, const char *address, int64_t ttl_ms,
                         struct store_lease *ret);
    int (*lease_renew)(struct store *s, int64_t ttl_ms);
    int (*lease_release)(struct store *s);
    int (*lease_get)(struct store *s, struct store_lease *ret);
};

/* A backend's store object starts with this. */
struct store {
    const struct store_ops *ops;
};

/* ---- batches ------------------------------------------------------------- */

enum store_op_kind {
    STORE_OP_JOB_INSERT,
    STORE_OP_JOB_UPDATE,
    STORE_OP_JOB_HOLD,
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
    STORE_OP_MINUTE_PUT, /* metric_minutes */
    STORE_OP_MINUTES_PRUNE,
    STORE_OP_IDEMPOTENCY_PRUNE,
    STORE_OP_COUNT
};

#define STORE_OP_MAXVALS 17 /* a ledger row's columns */

/* One value: a string or blob when s is set (owned by the batch; a blob of
 * length 0 still has an s), else an integer, STORE_NULL meaning NULL. */
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
    STORE_JOB_V_IDEM_TTL,
    STORE_JOB_V_HOLD,
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
    /* Queueing, the writer's while the batch is queued. */
    struct store_batch *next;
    store_done_fn done;
    void *ctx;
    bool keep; /* completing does not free it: a waiter reads the outcome */
};

/* ---- shared by every backend: store.c ------------------------------------ */

/* Runs b's completion with its outcome, then frees b unless a waiter keeps
 * it. b must not be touched afterwards. The writer calls it once per batch
 * it accepted. */
void store_batch_complete(struct store_batch *b);

/* Frees an attempt's strings and zeroes it (a job owns its attempts' array). */
void store_attempt_release(struct store_attempt *a);

/* store.h's row releases through void *, for the backends' tables of row
 * types (each frees what its row holds and zeroes it). */
void store_row_release_user(void *row);
void store_row_release_config(void *row);
void store_row_release_node(void *row);
void store_row_release_job(void *row);
void store_row_release_attempt(void *row);
void store_row_release_ledger(void *row); /* a struct store_ledger_row */

/* Writes a message into b->msg (cut to fit) and returns err. */
__attribute__((format(printf, 3, 4))) int store_batch_fail(struct store_batch *b, int err,
                                                           const char *fmt, ...);
#ifdef __clang_analyzer__
/* clang's static analyzer (make lint) does not follow calls into variadic
 * functions: for the analysis only, the call says that it returns err. */
#define store_batch_fail(b, err, ...)                                                              \
    __extension__({                                                                                \
        int store_err_ = (err);                                                                    \
        (void)store_batch_fail(b, store_err_, __VA_ARGS__), store_err_;                            \
    })
#endif

/* ---- the writer and its group commit: writer.c ---------------------------- */

/*
 * Runs a group of batches (linked by next, in queue order) in ONE
 * transaction, each batch in a savepoint of its own or the backend's
 * equivalent, and leaves each batch's outcome in it (err, msg, job ids):
 * a batch that fails is undone alone, a transaction that fails fails them
 * all. Called on the writer thread only, without the writer's lock.
 */
typedef void (*store_group_fn)(void *backend, struct store_batch *group);

/*
 * One writer thread per store: store_writer_commit queues a batch; the
 * thread takes everything queued at once, hands it to the backend's group
 * function, counts it, then runs the completions in queue order without any
 * lock held. `lock` guards the queue, the flags and the stats.
 */
struct store_writer {
    store_group_fn run;
    void *backend;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* the thread waits for work or close */
    pthread_cond_t idle; /* pausers wait for the running group to end */
    bool locks_ready, started;
    pthread_t thread;
    struct store_batch *head, **tail;
    bool closing, busy;
    unsigned pauses;
    struct store_stats stats;
};

/* Makes the writer's locks; the thread starts with store_writer_start.
 * 0 or GPO_ENOMEM. */
int store_writer_init(struct store_writer *w, store_group_fn run, void *backend);
/* Starts the thread. 0 or GPO_ENOMEM. */
int store_writer_start(struct store_writer *w);
/* Queues b (taken: the writer completes it) with its completion. 0, or
 * GPO_ESHUTDOWN once the writer is stopping (b is then still the caller's). */
int store_writer_commit(struct store_writer *w, struct store_batch *b, store_done_fn done,
                        void *ctx);
/* store_get_stats, store_pause_writer and store_resume_writer (store.h). */
void store_writer_stats(struct store_writer *w, struct store_stats *ret);
void store_writer_pause(struct store_writer *w);
void store_writer_resume(struct store_writer *w);
/* Refuses new batches, lets the thread commit what is queued (each
 * completion runs) and joins it; then destroys the locks. Also for a writer
 * that was only initialised, or never (zeroed). */
void store_writer_release(struct store_writer *w);

#endif

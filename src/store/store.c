/*
 * store.c - what every backend shares: error texts, rows, batches, the
 * argument checks in front of the backend's table, and the blocking wrappers
 * built on the asynchronous commit.
 *
 * Decisions the header leaves open:
 *  - Names (users, teams, states, keys, labels) must be non-empty; texts
 *    (specs, reasons) may be empty: the store does not judge JSON.
 *  - A batch may be empty: as a decision commit it then only checks the
 *    epoch.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/backend.h"
#include "store/store.h"
#include "util/errbuf.h"
#include "base/banned.h"

#undef store_batch_fail /* the analyzer's stand-in (backend.h): this is the function */

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

int store_batch_fail(struct store_batch *b, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errbuf_vset(b->msg, sizeof(b->msg), err, fmt, ap);
    va_end(ap);
    b->err = err;
    return err;
}

/* ---- rows ---------------------------------------------------------------- */

void store_user_release(struct store_user *u)
{
    if (!u)
        return;
    free(u->name);
    free(u->unix_user);
    free(u->team);
    free(u->role);
    *u = (struct store_user){0};
}

void store_users_free(struct store_user *users, size_t n)
{
    for (size_t k = 0; users && k < n; k++)
        store_user_release(&users[k]);
    free(users);
}

void store_config_release(struct store_config *c)
{
    if (!c)
        return;
    free(c->name);
    free(c->spec);
    *c = (struct store_config){0};
}

void store_configs_free(struct store_config *configs, size_t n)
{
    for (size_t k = 0; configs && k < n; k++)
        store_config_release(&configs[k]);
    free(configs);
}

void store_node_release(struct store_node *n)
{
    if (!n)
        return;
    free(n->name);
    free(n->spec);
    free(n->state);
    *n = (struct store_node){0};
}

void store_nodes_free(struct store_node *nodes, size_t n)
{
    for (size_t k = 0; nodes && k < n; k++)
        store_node_release(&nodes[k]);
    free(nodes);
}

void store_attempt_release(struct store_attempt *a)
{
    if (!a)
        return;
    free(a->state);
    free(a->nodes);
    free(a->gpus);
    free(a->reason);
    *a = (struct store_attempt){0};
}

void store_job_release(struct store_job *j)
{
    if (!j)
        return;
    free(j->team);
    free(j->state);
    free(j->reason);
    free(j->spec);
    free(j->hold);
    for (size_t k = 0; j->attempts && k < j->nattempts; k++)
        store_attempt_release(&j->attempts[k]);
    free(j->attempts);
    *j = (struct store_job){0};
}

void store_jobs_free(struct store_job *jobs, size_t n)
{
    for (size_t k = 0; jobs && k < n; k++)
        store_job_release(&jobs[k]);
    free(jobs);
}

void store_sched_state_release(struct store_sched_state *st)
{
    if (!st)
        return;
    free(st->blob);
    *st = (struct store_sched_state){0};
}

void store_row_release_user(void *row)
{
    store_user_release(row);
}

void store_row_release_config(void *row)
{
    store_config_release(row);
}

void store_row_release_node(void *row)
{
    store_node_release(row);
}

void store_row_release_job(void *row)
{
    store_job_release(row);
}

void store_row_release_attempt(void *row)
{
    store_attempt_release(row);
}

/* ---- batches ------------------------------------------------------------- */

/* What an add function hands batch_add: one per SQL parameter, in order. */
enum arg_kind { ARG_INT, ARG_NAME, ARG_NAME_OPT, ARG_TEXT, ARG_TEXT_OPT, ARG_BLOB };

struct arg {
    enum arg_kind kind;
    const void *p;
    size_t n; /* ARG_BLOB only */
    int64_t i;
};

#define A_INT(x)                                                                                   \
    {                                                                                              \
        ARG_INT, NULL, 0, (x)                                                                      \
    }
#define A_NAME(x)                                                                                  \
    {                                                                                              \
        ARG_NAME, (x), 0, 0                                                                        \
    }
#define A_NAME_OPT(x)                                                                              \
    {                                                                                              \
        ARG_NAME_OPT, (x), 0, 0                                                                    \
    }
#define A_TEXT(x)                                                                                  \
    {                                                                                              \
        ARG_TEXT, (x), 0, 0                                                                        \
    }
#define A_TEXT_OPT(x)                                                                              \
    {                                                                                              \
        ARG_TEXT_OPT, (x), 0, 0                                                                    \
    }
#define A_BLOB(x, n)                                                                               \
    {                                                                                              \
        ARG_BLOB, (x), (n), 0                                                                      \
    }

struct store_batch *store_batch_new(void)
{
    return calloc(1, sizeof(struct store_batch));
}

static void op_release(struct store_op *op)
{
    for (size_t k = 0; k < STORE_OP_MAXVALS; k++)
        free(op->v[k].s);
}

void store_batch_free(struct store_batch *b)
{
    if (!b)
        return;
    for (size_t k = 0; k < b->nops; k++)
        op_release(&b->ops[k]);
    free(b->ops);
    free(b->job_ids);
    free(b);
}

/* Makes room for one more element in *p (of *cap, each elem bytes). */
static int grow(void **p, size_t *cap, size_t used, size_t elem)
{
    if (used < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *q = realloc(*p, ncap * elem);
    if (!q)
        return GPO_ENOMEM;
    *p = q;
    *cap = ncap;
    return 0;
}

/* The length of a checked argument, or -1 when it is missing or too long. */
static long long arg_len(const struct arg *a)
{
    size_t max = a->kind == ARG_NAME || a->kind == ARG_NAME_OPT ? STORE_MAX_NAME : STORE_MAX_TEXT;
    if (a->kind == ARG_BLOB)
        return (a->p || a->n == 0) && a->n <= STORE_MAX_BLOB ? (long long)a->n : -1;
    if (!a->p)
        return a->kind == ARG_NAME_OPT || a->kind == ARG_TEXT_OPT ? 0 : -1;
    /* A loop, not strnlen: callers pass short buffers, and strnlen's bound past
     * their size reads as an overread to the compiler once inlined (LTO). */
    const char *text = a->p;
    size_t n = 0;
    while (n <= max && text[n])
        n++;
    if (n > max || (n == 0 && a->kind == ARG_NAME))
        return -1;
    return (long long)n;
}

static int batch_add(struct store_batch *b, enum store_op_kind kind, const struct arg *args,
                     size_t nargs)
{
    if (!b || nargs > STORE_OP_MAXVALS || b->nops >= STORE_MAX_OPS)
        return GPO_EINVAL;
    for (size_t k = 0; k < nargs; k++)
        if (args[k].kind != ARG_INT && arg_len(&args[k]) < 0)
            return GPO_EINVAL;
    if (grow((void **)&b->ops, &b->cap, b->nops, sizeof(*b->ops)))
        return GPO_ENOMEM;
    if (kind == STORE_OP_JOB_INSERT &&
        grow((void **)&b->job_ids, &b->cap_jobs, b->njobs, sizeof(*b->job_ids)))
        return GPO_ENOMEM;
    struct store_op op = {.kind = kind};
    for (size_t k = 0; k < nargs; k++) {
        const struct arg *a = &args[k];
        struct store_val *v = &op.v[k];
        v->i = a->kind == ARG_INT ? a->i : STORE_NULL;
        if (a->kind == ARG_INT || (!a->p && a->kind != ARG_BLOB))
            continue;
        v->n = (size_t)arg_len(a);
        v->blob = a->kind == ARG_BLOB;
        v->s = malloc(v->n + 1); /* a zero-length blob still gets a buffer: NOT NULL */
        if (!v->s) {
            op_release(&op);
            return GPO_ENOMEM;
        }
        if (v->n)
            memcpy(v->s, a->p, v->n);
        v->s[v->n] = '\0';
    }
    b->ops[b->nops++] = op;
    if (kind == STORE_OP_JOB_INSERT)
        b->njobs++;
    return 0;
}

int store_batch_set_decision(struct store_batch *b, int64_t epoch)
{
    if (!b || epoch <= 0)
        return GPO_EINVAL;
    b->epoch = epoch;
    return 0;
}

int store_batch_job_insert(struct store_batch *b, const struct store_job_insert *j)
{
    if (!j || (j->idempotency_key && (j->user_id == STORE_NULL || !j->idempotency_key[0])))
        return GPO_EINVAL;
    if (j->array_id != STORE_NULL && j->array_id != STORE_ARRAY_FIRST && j->array_id <= 0)
        return GPO_EINVAL;
    if (j->idempotency_ttl_ms < 0)
        return GPO_EINVAL;
    int64_t ttl = j->idempotency_ttl_ms ? j->idempotency_ttl_ms : STORE_IDEMPOTENCY_TTL_MS;
    /* In the order of enum STORE_JOB_V_*. */
    const struct arg args[] = {
        A_INT(j->user_id),
        A_NAME(j->team),
        A_NAME(j->state),
        A_INT(j->submit_ms),
        A_INT(j->array_id),
        A_INT(j->array_index),
        A_TEXT_OPT(j->reason),
        A_TEXT(j->spec),
        A_NAME_OPT(j->idempotency_key),
        A_INT(ttl),
        A_NAME_OPT(j->hold),
    };
    return batch_add(b, STORE_OP_JOB_INSERT, args, ARRAY_LEN(args));
}

int store_batch_job_update(struct store_batch *b, int64_t id, const char *state, const char *reason,
                           int64_t updated_ms, const char *spec)
{
    const struct arg args[] = {A_INT(id), A_NAME(state), A_TEXT_OPT(reason), A_INT(updated_ms),
                               A_TEXT_OPT(spec)};
    return batch_add(b, STORE_OP_JOB_UPDATE, args, ARRAY_LEN(args));
}

int store_batch_job_hold(struct store_batch *b, int64_t id, const char *hold)
{
    const struct arg args[] = {A_INT(id), A_NAME_OPT(hold)};
    return batch_add(b, STORE_OP_JOB_HOLD, args, ARRAY_LEN(args));
}

int store_batch_idempotency_prune(struct store_batch *b, int64_t before_ms)
{
    const struct arg args[] = {A_INT(before_ms)};
    return batch_add(b, STORE_OP_IDEMPOTENCY_PRUNE, args, ARRAY_LEN(args));
}

int store_batch_job_delete(struct store_batch *b, int64_t id)
{
    const struct arg args[] = {A_INT(id)};
    return batch_add(b, STORE_OP_JOB_DELETE, args, ARRAY_LEN(args));
}

int store_batch_attempt_upsert(struct store_batch *b, const struct store_attempt_upsert *a)
{
    if (!a)
        return GPO_EINVAL;
    const struct arg args[] = {
        A_INT(a->job_id),    A_INT(a->attempt),     A_NAME(a->state), A_TEXT_OPT(a->nodes),
        A_TEXT_OPT(a->gpus), A_INT(a->start_ms),    A_INT(a->end_ms), A_INT(a->exit_code),
        A_INT(a->signal),    A_TEXT_OPT(a->reason), A_INT(a->epoch),
    };
    return batch_add(b, STORE_OP_ATTEMPT_UPSERT, args, ARRAY_LEN(args));
}

int store_batch_config_put(struct store_batch *b, enum store_config_kind kind, const char *name,
                           const char *spec, int64_t updated_ms)
{
    if ((unsigned)kind >= STORE_CONFIG_COUNT)
        return GPO_EINVAL;
    const struct arg args[] = {A_NAME(name), A_TEXT(spec), A_INT(updated_ms)};
    return batch_add(b, STORE_OP_CONFIG_PUT + kind, args, ARRAY_LEN(args));
}

int store_batch_config_delete(struct store_batch *b, enum store_config_kind kind, const char *name)
{
    if ((unsigned)kind >= STORE_CONFIG_COUNT)
        return GPO_EINVAL;
    const struct arg args[] = {A_NAME(name)};
    return batch_add(b, STORE_OP_CONFIG_DELETE + kind, args, ARRAY_LEN(args));
}

int store_batch_node_put(struct store_batch *b, const char *name, const char *spec,
                         const char *state, int64_t updated_ms)
{
    const struct arg args[] = {A_NAME(name), A_TEXT(spec), A_NAME(state), A_INT(updated_ms)};
    return batch_add(b, STORE_OP_NODE_PUT, args, ARRAY_LEN(args));
}

int store_batch_node_delete(struct store_batch *b, const char *name)
{
    const struct arg args[] = {A_NAME(name)};
    return batch_add(b, STORE_OP_NODE_DELETE, args, ARRAY_LEN(args));
}

int store_batch_user_put(struct store_batch *b, const char *name, const char *unix_user,
                         const char *team, const char *role, int64_t created_ms)
{
    const struct arg args[] = {A_NAME(name), A_NAME_OPT(unix_user), A_NAME_OPT(team), A_NAME(role),
                               A_INT(created_ms)};
    return batch_add(b, STORE_OP_USER_PUT, args, ARRAY_LEN(args));
}

int store_batch_user_delete(struct store_batch *b, const char *name)
{
    const struct arg args[] = {A_NAME(name)};
    return batch_add(b, STORE_OP_USER_DELETE, args, ARRAY_LEN(args));
}

int store_batch_token_put(struct store_batch *b, const char *user_name,
                          const uint8_t hash[STORE_TOKEN_HASH_LEN], const char *label,
                          int64_t created_ms)
{
    if (!hash)
        return GPO_EINVAL;
    const struct arg args[] = {A_NAME(user_name), A_BLOB(hash, STORE_TOKEN_HASH_LEN),
                               A_NAME_OPT(label), A_INT(created_ms)};
    return batch_add(b, STORE_OP_TOKEN_PUT, args, ARRAY_LEN(args));
}

int store_batch_token_delete(struct store_batch *b, const uint8_t hash[STORE_TOKEN_HASH_LEN])
{
    if (!hash)
        return GPO_EINVAL;
    const struct arg args[] = {A_BLOB(hash, STORE_TOKEN_HASH_LEN)};
    return batch_add(b, STORE_OP_TOKEN_DELETE, args, ARRAY_LEN(args));
}

int store_batch_meta_put(struct store_batch *b, const char *key, const char *value)
{
    /* The epoch moves only through store_epoch_acquire, or fencing means nothing. */
    if (key && strcmp(key, STORE_META_EPOCH) == 0)
        return GPO_EINVAL;
    const struct arg args[] = {A_NAME(key), A_TEXT(value)};
    return batch_add(b, STORE_OP_META_PUT, args, ARRAY_LEN(args));
}

int store_batch_sched_state_put(struct store_batch *b, int64_t epoch, const void *blob, size_t len,
                                int64_t updated_ms)
{
    const struct arg args[] = {A_INT(epoch), A_BLOB(blob, len), A_INT(updated_ms)};
    return batch_add(b, STORE_OP_SCHED_STATE_PUT, args, ARRAY_LEN(args));
}

void store_recovery_release(struct store_recovery *r)
{
    if (!r)
        return;
    free(r->lost);
    *r = (struct store_recovery){0};
}

void store_batch_complete(struct store_batch *b)
{
    struct store_result r = {
        .err = b->err,
        .msg = b->msg,
        .job_ids = b->err ? NULL : b->job_ids,
        .njob_ids = b->err ? 0 : b->njobs,
        .existing_job_id = b->err == GPO_EEXIST ? b->existing_job_id : 0,
    };
    if (b->err && !b->msg[0])
        errbuf_set(b->msg, sizeof(b->msg), b->err, "%s", gpo_strerror(b->err));
    /* Read before the call: a waiter may free a kept batch as soon as it wakes. */
    bool keep = b->keep;
    store_done_fn done = b->done;
    void *ctx = b->ctx;
    if (done)
        done(ctx, &r);
    if (!keep)
        store_batch_free(b);
}

/* ---- committing ------------------------------------------------------------ */

int store_commit(struct store *s, struct store_batch *b, store_done_fn done, void *ctx)
{
    if (!s || !b) {
        store_batch_free(b);
        return GPO_EINVAL;
    }
    b->keep = false;
    int rc = s->ops->commit(s, b, done, ctx);
    if (rc)
        store_batch_free(b);
    return rc;
}

struct waiter {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
};

static void waiter_wake(void *ctx, const struct store_result *r)
{
    (void)r;
    struct waiter *w = ctx;
    pthread_mutex_lock(&w->lock);
    w->done = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* Commits b and waits for its outcome, which stays in b: b remains the
 * caller's in every case. */
static int commit_and_wait(struct store *s, struct store_batch *b)
{
    struct waiter w = {.done = false};
    if (pthread_mutex_init(&w.lock, NULL))
        return store_batch_fail(b, GPO_ENOMEM, "cannot create a mutex");
    if (pthread_cond_init(&w.cond, NULL)) {
        pthread_mutex_destroy(&w.lock);
        return store_batch_fail(b, GPO_ENOMEM, "cannot create a condition variable");
    }
    b->keep = true;
    int rc = s->ops->commit(s, b, waiter_wake, &w);
    if (rc) {
        store_batch_fail(b, rc, "%s", gpo_strerror(rc));
    } else {
        pthread_mutex_lock(&w.lock);
        while (!w.done)
            pthread_cond_wait(&w.cond, &w.lock);
        pthread_mutex_unlock(&w.lock);
        rc = b->err;
    }
    pthread_cond_destroy(&w.cond);
    pthread_mutex_destroy(&w.lock);
    return rc;
}

int store_commit_wait(struct store *s, struct store_batch *b, int64_t *ret_job_ids, size_t ids_cap,
                      char *msg, size_t msglen)
{
    if (!s || !b || (!ret_job_ids && ids_cap)) {
        store_batch_free(b);
        return GPO_EINVAL;
    }
    int rc = commit_and_wait(s, b);
    if (rc == 0) {
        size_t n = b->njobs < ids_cap ? b->njobs : ids_cap;
        if (n)
            memcpy(ret_job_ids, b->job_ids, n * sizeof(*ret_job_ids));
    } else {
        if (rc == GPO_EEXIST && b->existing_job_id > 0 && ids_cap > 0)
            ret_job_ids[0] = b->existing_job_id;
        errbuf_set(msg, msglen, rc, "%s", b->msg[0] ? b->msg : gpo_strerror(rc));
    }
    store_batch_free(b);
    return rc;
}

int store_epoch_acquire(struct store *s, int64_t *ret_epoch)
{
    if (!s || !ret_epoch)
        return GPO_EINVAL;
    if (s->ops->shared)
        return GPO_ENOTSUP; /* the epoch of a shared store moves with its lease */
    struct store_batch *b = store_batch_new();
    if (!b)
        return GPO_ENOMEM;
    int rc = batch_add(b, STORE_OP_EPOCH_BUMP, NULL, 0);
    if (rc == 0)
        rc = commit_and_wait(s, b);
    if (rc == 0)
        *ret_epoch = b->new_epoch;
    store_batch_free(b);
    return rc;
}

void store_get_stats(struct store *s, struct store_stats *ret)
{
    if (s && ret)
        s->ops->get_stats(s, ret);
}

void store_pause_writer(struct store *s)
{
    if (s)
        s->ops->pause_writer(s);
}

void store_resume_writer(struct store *s)
{
    if (s)
        s->ops->resume_writer(s);
}

void store_close(struct store *s)
{
    if (s)
        s->ops->close(s);
}

/* ---- reads: checks, then the backend ---------------------------------------- */

void store_last_error(struct store *s, char *buf, size_t len)
{
    if (!buf || len == 0)
        return;
    buf[0] = '\0';
    if (s)
        s->ops->last_error(s, buf, len);
}

int store_meta_get(struct store *s, const char *key, char **ret_value)
{
    if (!s || !key || !ret_value)
        return GPO_EINVAL;
    return s->ops->meta_get(s, key, ret_value);
}

int store_user_get_by_name(struct store *s, const char *name, struct store_user *ret)
{
    if (!s || !name || !ret)
        return GPO_EINVAL;
    return s->ops->user_get_by_name(s, name, ret);
}

int store_user_get_by_id(struct store *s, int64_t id, struct store_user *ret)
{
    if (!s || !ret)
        return GPO_EINVAL;
    return s->ops->user_get_by_id(s, id, ret);
}

int store_user_get_by_token(struct store *s, const uint8_t hash[STORE_TOKEN_HASH_LEN],
                            struct store_user *ret)
{
    if (!s || !hash || !ret)
        return GPO_EINVAL;
    return s->ops->user_get_by_token(s, hash, ret);
}

int store_user_list(struct store *s, struct store_user **ret_users, size_t *ret_n)
{
    if (!s || !ret_users || !ret_n)
        return GPO_EINVAL;
    return s->ops->user_list(s, ret_users, ret_n);
}

int store_config_get(struct store *s, enum store_config_kind kind, const char *name,
                     struct store_config *ret)
{
    if (!s || (unsigned)kind >= STORE_CONFIG_COUNT || !name || !ret)
        return GPO_EINVAL;
    return s->ops->config_get(s, kind, name, ret);
}

int store_config_list(struct store *s, enum store_config_kind kind,
                      struct store_config **ret_configs, size_t *ret_n)
{
    if (!s || (unsigned)kind >= STORE_CONFIG_COUNT || !ret_configs || !ret_n)
        return GPO_EINVAL;
    return s->ops->config_list(s, kind, ret_configs, ret_n);
}

int store_node_list(struct store *s, struct store_node **ret_nodes, size_t *ret_n)
{
    if (!s || !ret_nodes || !ret_n)
        return GPO_EINVAL;
    return s->ops->node_list(s, ret_nodes, ret_n);
}

int store_job_get(struct store *s, int64_t id, struct store_job *ret)
{
    if (!s || !ret)
        return GPO_EINVAL;
    return s->ops->job_get(s, id, ret);
}

int store_job_list(struct store *s, const struct store_job_filter *f, struct store_job **ret_jobs,
                   size_t *ret_n)
{
    if (!s || !f || !ret_jobs || !ret_n || f->limit < 1 || f->limit > STORE_LIST_MAX ||
        f->nstates > STORE_MAX_STATES || (f->nstates && !f->states))
        return GPO_EINVAL;
    for (size_t k = 0; k < f->nstates; k++)
        if (!f->states[k])
            return GPO_EINVAL;
    return s->ops->job_list(s, f, ret_jobs, ret_n);
}

int store_job_scan_active(struct store *s, store_job_fn fn, void *ctx)
{
    if (!s || !fn)
        return GPO_EINVAL;
    return s->ops->job_scan_active(s, fn, ctx);
}

int store_sched_state_get(struct store *s, struct store_sched_state *ret)
{
    if (!s || !ret)
        return GPO_EINVAL;
    return s->ops->sched_state_get(s, ret);
}

int store_idempotency_get(struct store *s, int64_t user_id, const char *key, int64_t *ret_job_id)
{
    if (!s || !key || !ret_job_id)
        return GPO_EINVAL;
    return s->ops->idempotency_get(s, user_id, key, ret_job_id);
}

/* ---- the cost ledger ----------------------------------------------------- */

void store_row_release_ledger(void *row)
{
    struct store_ledger_row *l = row;
    free(l->team);
    free(l->project);
    free(l->model);
    free(l->user);
    free(l->gpu_type);
    free(l->outcome);
    memset(l, 0, sizeof(*l));
}

void store_ledger_rows_free(struct store_ledger_row *rows, size_t n)
{
    for (size_t k = 0; rows && k < n; k++)
        store_row_release_ledger(&rows[k]);
    free(rows);
}

int store_batch_ledger_add(struct store_batch *b, const struct store_ledger_row *r)
{
    if (!r || r->start_ms > r->end_ms || r->gpu_milli < 0 || r->price_micro < 0 ||
        r->cost_micro < 0)
        return GPO_EINVAL;
    const struct arg args[] = {
        A_INT(r->job_id),       A_INT(r->attempt),      A_INT(r->seq),
        A_INT(r->start_ms),     A_INT(r->end_ms),       A_NAME(r->team),
        A_NAME_OPT(r->project), A_NAME_OPT(r->model),   A_NAME_OPT(r->user),
        A_NAME(r->gpu_type),    A_INT(r->gpu_milli),    A_INT(r->price_micro),
        A_INT(r->cost_micro),   A_NAME_OPT(r->outcome), A_INT(r->util_sum),
        A_INT(r->util_samples), A_INT(r->idle_samples),
    };
    return batch_add(b, STORE_OP_LEDGER_ADD, args, ARRAY_LEN(args));
}

int store_ledger_range(struct store *s, int64_t since_ms, int64_t until_ms,
                       struct store_ledger_row **ret_rows, size_t *ret_n)
{
    if (!s || !ret_rows || !ret_n || since_ms > until_ms || !s->ops->ledger_range)
        return GPO_EINVAL;
    return s->ops->ledger_range(s, since_ms, until_ms, ret_rows, ret_n);
}

/* ---- metric minutes ---------------------------------------------------------- */

static const char *const minute_kinds[STORE_MINUTE_KINDS] = {"gpu", "job", "gauge"};

const char *store_minute_kind_name(enum store_minute_kind kind)
{
    return (unsigned)kind < STORE_MINUTE_KINDS ? minute_kinds[kind] : NULL;
}

int store_batch_minute_put(struct store_batch *b, const struct store_minute *m)
{
    if (!m || (unsigned)m->kind >= STORE_MINUTE_KINDS || !m->label || m->samples < 0)
        return GPO_EINVAL;
    /* In the order of schema.c's minute_put parameters. */
    const struct arg args[] = {
        A_NAME(minute_kinds[m->kind]),
        A_NAME(m->key),
        A_INT(m->minute_ms),
        A_TEXT(m->label),
        A_INT(m->samples),
        A_INT(m->util_sum),
        A_INT(m->util_max),
        A_INT(m->idle_samples),
        A_INT(m->mem_sum_mib),
        A_INT(m->mem_max_mib),
        A_INT(m->power_sum_mw),
        A_INT(m->temp_max_c),
    };
    return batch_add(b, STORE_OP_MINUTE_PUT, args, ARRAY_LEN(args));
}

int store_batch_minutes_prune(struct store_batch *b, int64_t before_ms)
{
    const struct arg args[] = {A_INT(before_ms)};
    return batch_add(b, STORE_OP_MINUTES_PRUNE, args, ARRAY_LEN(args));
}

int store_minutes_get(struct store *s, enum store_minute_kind kind, const char *key,
                      int64_t since_ms, int64_t until_ms, store_minute_fn fn, void *ctx)
{
    if (!s || !fn || (unsigned)kind >= STORE_MINUTE_KINDS || since_ms > until_ms ||
        !s->ops->minutes_get || (key && strlen(key) > STORE_MAX_NAME))
        return GPO_EINVAL;
    return s->ops->minutes_get(s, kind, key, since_ms, until_ms, fn, ctx);
}

/* ---- leadership ---------------------------------------------------------------- */

#define LEASE_TTL_MAX_MS 3600000

bool store_shared(struct store *s)
{
    return s && s->ops->shared;
}

/* The length of text when it is at most max bytes; -1 otherwise. */
static long long bounded_len(const char *text, size_t max)
{
    size_t n = 0;
    while (n <= max && text[n])
        n++;
    return n > max ? -1 : (long long)n;
}

int store_lease_acquire(struct store *s, const char *holder, const char *address, int64_t ttl_ms,
                        struct store_lease *ret)
{
    if (!s || !holder || !address || ttl_ms < 1 || ttl_ms > LEASE_TTL_MAX_MS ||
        bounded_len(holder, STORE_LEASE_HOLDER_MAX) < 1 ||
        bounded_len(address, STORE_LEASE_ADDRESS_MAX) < 0)
        return GPO_EINVAL;
    return s->ops->lease_acquire(s, holder, address, ttl_ms, ret);
}

int store_lease_renew(struct store *s, int64_t ttl_ms)
{
    if (!s || ttl_ms < 1 || ttl_ms > LEASE_TTL_MAX_MS)
        return GPO_EINVAL;
    return s->ops->lease_renew(s, ttl_ms);
}

int store_lease_release(struct store *s)
{
    if (!s)
        return GPO_EINVAL;
    return s->ops->lease_release(s);
}

int store_lease_get(struct store *s, struct store_lease *ret)
{
    if (!s || !ret)
        return GPO_EINVAL;
    return s->ops->lease_get(s, ret);
}

bool store_url_is_postgres(const char *url)
{
    return url && (strncmp(url, "postgres://", 11) == 0 || strncmp(url, "postgresql://", 13) == 0);
}

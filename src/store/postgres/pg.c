/*
 * pg.c - the PostgreSQL backend: its connections (the URL's parameters, our
 * timeouts, remade after a failure), the group transaction the writer
 * (backend.h) runs on the write connection with the statements of
 * pg_schema.c, and the opening and closing of the store. The reads are in
 * pg_read.c, the lease in pg_lease.c, what they share in pg.h.
 *
 * Decisions the header leaves open:
 *  - A group runs as BEGIN plus the lease check in one round trip
 *    (`SELECT epoch FROM lease WHERE id = 1 FOR SHARE`), then every batch's
 *    statements sent at once without waiting for answers (libpq's pipeline
 *    mode, at most PIPELINE_MAX statements a round trip) and without
 *    savepoints, then COMMIT: three round trips (one more per PIPELINE_MAX
 *    statements).
 *    When a batch fails there, the transaction is rolled back and begun
 *    again, and each batch runs in a SAVEPOINT of its own (ROLLBACK TO it
 *    on the batch's first error; a batch that succeeds keeps its savepoint
 *    until COMMIT), so that only that batch fails. A batch with an array
 *    named after its first job (a statement that needs an earlier one's
 *    answer) runs statement by statement, and its group batch by batch from
 *    the start. When the lease's epoch is not this
 *    object's, the group is rolled back and every batch fails GPO_EFENCED;
 *    when BEGIN, a savepoint or COMMIT fails, or the connection breaks,
 *    every batch fails GPO_EIO, as on SQLite.
 *  - Our connection parameters apply where the URL sets none; the
 *    timeouts go into `options` before the URL's own, so a URL may
 *    override them, but the writer's synchronous_commit=on goes after: a
 *    completion means durable.
 *  - idle_in_transaction_session_timeout on every connection: a
 *    controller cut off inside a transaction loses its session (and the
 *    lease row's share lock) on the server within seconds, so a new leader
 *    is not kept waiting for the lock.
 */
#include <pthread.h>
#include <stdatomic.h>
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

#define URL_MAX 4096
/* Statements sent before their answers are read: a bound on what waits in
 * the socket's buffers (both sides blocked writing would deadlock). A job
 * delete, the longest operation, is 3 statements. */
#define PIPELINE_MAX  256
#define PG_MAX_PARAMS 64 /* libpq knows about 40 */

/* Ours, where the URL sets none: a partition fails a call in seconds. */
static const char *const conn_defaults[][2] = {
    {"connect_timeout", "3"},        {"keepalives", "1"},       {"keepalives_idle", "2"},
    {"keepalives_interval", "1"},    {"keepalives_count", "2"}, {"tcp_user_timeout", "3000"},
    {"application_name", "gpuorch"},
};
#define NDEFAULTS (sizeof(conn_defaults) / sizeof(conn_defaults[0]))

/* ---- small helpers ----------------------------------------------------------- */

const char *pg_int_text(int64_t v, char *buf, size_t len)
{
    if (v == STORE_NULL)
        return NULL;
    snprintf(buf, len, "%lld", (long long)v);
    return buf;
}

int64_t pg_cell_int(const PGresult *r, int row, int col)
{
    if (PQgetisnull(r, row, col))
        return STORE_NULL;
    return strtoll(PQgetvalue(r, row, col), NULL, 10);
}

/* The store code of a SQLSTATE (NULL: the connection failed). */
static int sqlstate_err(const char *st)
{
    if (!st || strlen(st) != 5)
        return GPO_EIO;
    if (strcmp(st, "23505") == 0)
        return GPO_EEXIST; /* unique_violation */
    if (strcmp(st, "23503") == 0)
        return GPO_ENOENT; /* foreign_key_violation */
    if (strncmp(st, "23", 2) == 0 || strncmp(st, "22", 2) == 0 || strcmp(st, "54000") == 0)
        return GPO_EINVAL; /* constraints, data exceptions, program limits */
    if (strcmp(st, "53200") == 0)
        return GPO_ENOMEM;
    return GPO_EIO;
}

int pg_result_err(PGconn *c, const PGresult *r, char *err, size_t errlen)
{
    const char *msg = r ? PQresultErrorMessage(r) : "";
    if (!msg || !*msg)
        msg = c ? PQerrorMessage(c) : "no connection";
    if (!msg || !*msg)
        msg = r ? PQresStatus(PQresultStatus(r)) : "no result";
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
        n--;
    int code = sqlstate_err(r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL);
    return errbuf_set(err, errlen, code, "%.*s", (int)n, msg);
}

int pg_exec(PGconn *c, const char *sql, char *err, size_t errlen)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    int rc = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? 0 : pg_result_err(c, r, err, errlen);
    PQclear(r);
    return rc;
}

/* ---- connections ----------------------------------------------------------------- */

static void params_free(struct pgs *s)
{
    for (size_t k = 0; k < s->nkeys; k++) {
        free(s->keys[k]);
        free(s->vals[k]);
    }
    free(s->keys);
    free(s->vals);
    s->keys = s->vals = NULL;
    s->nkeys = 0;
}

static int param_add(struct pgs *s, const char *key, const char *val)
{
    char *k = strdup(key), *v = strdup(val);
    if (!k || !v) {
        free(k);
        free(v);
        return GPO_ENOMEM;
    }
    s->keys[s->nkeys] = k;
    s->vals[s->nkeys++] = v;
    return 0;
}

static const char *param_get(const struct pgs *s, const char *key)
{
    for (size_t k = 0; k < s->nkeys; k++)
        if (s->keys[k] && strcmp(s->keys[k], key) == 0)
            return s->vals[k];
    return NULL;
}

/* The URL's parameters (every one it sets), then ours it does not set. */
static int params_parse(struct pgs *s, const char *url, char *err, size_t errlen)
{
    char *perr = NULL;
    PQconninfoOption *opts = PQconninfoParse(url, &perr);
    if (!opts) {
        int rc = errbuf_set(err, errlen, perr ? GPO_EINVAL : GPO_ENOMEM, "the store URL: %s",
                            perr ? perr : "out of memory");
        PQfreemem(perr);
        return rc;
    }
    size_t n = 0;
    for (PQconninfoOption *o = opts; o->keyword; o++)
        n += o->val != NULL;
    int rc = 0;
    if (n + NDEFAULTS > PG_MAX_PARAMS) {
        PQconninfoFree(opts);
        return errbuf_set(err, errlen, GPO_EINVAL, "the store URL sets too many parameters");
    }
    s->keys = calloc(n + NDEFAULTS, sizeof(*s->keys));
    s->vals = calloc(n + NDEFAULTS, sizeof(*s->vals));
    if (!s->keys || !s->vals)
        rc = GPO_ENOMEM;
    for (PQconninfoOption *o = opts; rc == 0 && o->keyword; o++)
        if (o->val && strcmp(o->keyword, "options") != 0)
            rc = param_add(s, o->keyword, o->val);
    for (PQconninfoOption *o = opts; rc == 0 && o->keyword; o++)
        if (o->val && strcmp(o->keyword, "options") == 0 &&
            snprintf(s->user_options, sizeof(s->user_options), "%s", o->val) >=
                (int)sizeof(s->user_options)) {
            PQconninfoFree(opts);
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "the store URL: options: longer than %zu bytes",
                              sizeof(s->user_options) - 1);
        }
    for (size_t k = 0; rc == 0 && k < NDEFAULTS; k++)
        if (!param_get(s, conn_defaults[k][0]))
            rc = param_add(s, conn_defaults[k][0], conn_defaults[k][1]);
    PQconninfoFree(opts);
    if (rc)
        return errbuf_set(err, errlen, rc, "out of memory");
    return 0;
}

static const char *role_name(enum pg_role role)
{
    return role == PG_ROLE_WRITER ? "writer" : role == PG_ROLE_READ ? "reads" : "lease";
}

/* A new connection of `role` (nothing prepared on it). */
static int conn_open(struct pgs *s, struct pg_conn *pc, enum pg_role role, char *err, size_t errlen)
{
    int timeout = role == PG_ROLE_WRITER ? PG_WRITER_TIMEOUT_MS : PG_CALL_TIMEOUT_MS;
    char options[sizeof(s->user_options) + 256];
    snprintf(options, sizeof(options),
             "-c statement_timeout=%d -c idle_in_transaction_session_timeout=%d %s%s", timeout,
             PG_IDLE_IN_TX_MS, s->user_options,
             role == PG_ROLE_WRITER ? " -c synchronous_commit=on" : "");
    const char *keys[PG_MAX_PARAMS + 2], *vals[PG_MAX_PARAMS + 2];
    for (size_t k = 0; k < s->nkeys; k++) {
        keys[k] = s->keys[k];
        vals[k] = s->vals[k];
    }
    keys[s->nkeys] = "options";
    vals[s->nkeys] = options;
    keys[s->nkeys + 1] = vals[s->nkeys + 1] = NULL;
    pc->c = PQconnectdbParams(keys, vals, 0);
    pc->prepared = false;
    if (!pc->c)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    if (PQstatus(pc->c) != CONNECTION_OK) {
        char msg[256];
        int rc = pg_result_err(pc->c, NULL, msg, sizeof(msg));
        errbuf_set(err, errlen, rc, "connecting (%s): %s", role_name(role), msg);
        PQfinish(pc->c);
        pc->c = NULL;
        return rc;
    }
    return 0;
}

int pg_conn_ready(struct pgs *s, struct pg_conn *pc, enum pg_role role, char *err, size_t errlen)
{
    if (pc->c && (PQstatus(pc->c) != CONNECTION_OK || (PQtransactionStatus(pc->c) != PQTRANS_IDLE &&
                                                       pg_exec(pc->c, "ROLLBACK", NULL, 0) != 0))) {
        PQfinish(pc->c); /* broken: made anew */
        pc->c = NULL;
    }
    int rc = pc->c ? 0 : conn_open(s, pc, role, err, errlen);
    if (rc == 0 && !pc->prepared) {
        rc = role == PG_ROLE_WRITER ? pg_prepare_writes(pc->c, err, errlen)
             : role == PG_ROLE_READ ? pg_prepare_reads(pc->c, err, errlen)
                                    : 0;
        pc->prepared = rc == 0;
    }
    return rc;
}

static void conn_close(struct pg_conn *pc)
{
    PQfinish(pc->c);
    pc->c = NULL;
    pc->prepared = false;
}

/* ---- the write operations ------------------------------------------------------- */

/* One batch being run by the writer. */
struct run {
    struct pgs *s;
    struct store_batch *b;
    size_t opno;  /* of the operation running, for messages */
    size_t njobs; /* job inserts done so far */
};

/* A statement's parameters, from values in the order of its types. */
struct params {
    const char *vals[STORE_OP_MAXVALS];
    int lens[STORE_OP_MAXVALS];
    int fmts[STORE_OP_MAXVALS];
    char ints[STORE_OP_MAXVALS][24];
    int n;
};

static void params_fill(struct params *p, const struct store_val *v, const char *types)
{
    size_t n = strlen(types);
    p->n = (int)(n < STORE_OP_MAXVALS ? n : STORE_OP_MAXVALS);
    for (int k = 0; k < p->n; k++) {
        p->lens[k] = 0;
        p->fmts[k] = 0;
        if (v[k].s && types[k] == 'b') {
            p->vals[k] = v[k].s;
            p->lens[k] = (int)v[k].n;
            p->fmts[k] = 1;
        } else if (v[k].s) {
            p->vals[k] = v[k].s;
        } else {
            p->vals[k] = pg_int_text(v[k].i, p->ints[k], sizeof(p->ints[k]));
        }
    }
}

static int op_fail(struct run *r, const PGresult *res)
{
    char msg[200];
    int rc = pg_result_err(r->s->w.c, res, msg, sizeof(msg));
    return store_batch_fail(r->b, rc, "operation %zu (%s): %s", r->opno,
                            pg_ops[r->b->ops[r->opno].kind].name, msg);
}

/* Sends statement i of op kind `kind` with values v (pipeline mode) or
 * runs it (*ret_res gets its result, cleared by the caller). */
static int send_stmt(struct run *r, size_t kind, size_t i, const struct store_val *v,
                     PGresult **ret_res)
{
    struct params p;
    params_fill(&p, v, pg_ops[kind].st[i].types);
    char name[32];
    pg_op_stmt_name(kind, i, name, sizeof(name));
    if (!ret_res)
        return PQsendQueryPrepared(r->s->w.c, name, p.n, p.vals, p.lens, p.fmts, 0)
                   ? 0
                   : op_fail(r, NULL);
    PGresult *res = PQexecPrepared(r->s->w.c, name, p.n, p.vals, p.lens, p.fmts, 0);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        int rc = op_fail(r, res);
        PQclear(res);
        return rc;
    }
    *ret_res = res;
    return 0;
}

/* The statement a job insert runs, and its values with the array id
 * resolved; *ret_self: it names a new array after itself. */
static size_t job_insert_stmt(struct run *r, const struct store_op *op, struct store_val *v,
                              bool *ret_self)
{
    memcpy(v, op->v, sizeof(op->v));
    int64_t array_id = v[STORE_JOB_V_ARRAY_ID].i;
    *ret_self = array_id == STORE_ARRAY_FIRST && r->njobs == 0;
    if (array_id == STORE_ARRAY_FIRST)
        v[STORE_JOB_V_ARRAY_ID].i = *ret_self ? STORE_NULL : r->b->job_ids[0];
    return v[STORE_JOB_V_IDEM_KEY].s ? 1 : 0;
}

/* A job insert's answer: its new id, or the job its key already names. */
static int job_insert_result(struct run *r, const PGresult *res, int64_t *ret_id)
{
    int64_t id = PQntuples(res) == 1 ? pg_cell_int(res, 0, 0) : 0;
    if (id <= 0)
        return store_batch_fail(r->b, GPO_EIO, "operation %zu (job_insert): no id returned",
                                r->opno);
    if (PQnfields(res) > 1 && pg_cell_int(res, 0, 1) == 1) {
        r->b->existing_job_id = id;
        return store_batch_fail(r->b, GPO_EEXIST,
                                "operation %zu (job_insert): idempotency key already used by "
                                "job %lld",
                                r->opno, (long long)id);
    }
    r->b->job_ids[r->njobs++] = id;
    *ret_id = id;
    return 0;
}

/* What statement i of op opno answered: a job's id, or a row it had to
 * change. */
static int op_result(struct run *r, size_t opno, size_t i, PGresult *res)
{
    const struct store_op *op = &r->b->ops[opno];
    const struct pg_op *d = &pg_ops[op->kind];
    r->opno = opno;
    int64_t id = 0;
    if (op->kind == STORE_OP_JOB_INSERT)
        return i == 2 ? 0 : job_insert_result(r, res, &id);
    bool last = i + 1 == PG_OP_MAXSQL || !d->st[i + 1].sql;
    if (last && (d->flags & PG_OP_CHANGES) && strtoll(PQcmdTuples(res), NULL, 10) == 0)
        return store_batch_fail(r->b, GPO_ENOENT, "operation %zu (%s): not found", opno, d->name);
    return 0;
}

/* Runs op opno statement by statement, each answer read before the next. */
static int run_op(struct run *r, size_t opno)
{
    const struct store_op *op = &r->b->ops[opno];
    const struct pg_op *d = &pg_ops[op->kind];
    r->opno = opno;
    if (!d->st[0].sql)
        return store_batch_fail(r->b, GPO_ENOTSUP,
                                "operation %zu (%s): the leader epoch of a shared store moves "
                                "with its lease (store_lease_acquire)",
                                opno, d->name);
    PGresult *res = NULL;
    int rc = 0;
    if (op->kind == STORE_OP_JOB_INSERT) {
        struct store_val v[STORE_OP_MAXVALS];
        bool self = false;
        size_t i = job_insert_stmt(r, op, v, &self);
        int64_t id = 0;
        if ((rc = send_stmt(r, op->kind, i, v, &res)) == 0)
            rc = job_insert_result(r, res, &id);
        PQclear(res);
        struct store_val idv[1] = {{.i = id}};
        if (rc == 0 && self && (rc = send_stmt(r, op->kind, 2, idv, &res)) == 0)
            PQclear(res);
        return rc;
    }
    for (size_t k = 0; rc == 0 && k < PG_OP_MAXSQL && d->st[k].sql; k++) {
        if ((rc = send_stmt(r, op->kind, k, op->v, &res)) == 0)
            rc = op_result(r, opno, k, res);
        PQclear(res);
    }
    return rc;
}

/* How many statements op sends in a pipeline. */
static size_t op_stmts(const struct store_op *op)
{
    size_t n = 0;
    while (n < PG_OP_MAXSQL && pg_ops[op->kind].st[n].sql)
        n++;
    return op->kind == STORE_OP_JOB_INSERT ? 1 : n;
}

/* Whether every statement of b may be sent before any answer comes: none
 * takes another's result (an array named after its first job does). */
static bool batch_pipelines(const struct store_batch *b)
{
    for (size_t k = 0; k < b->nops; k++) {
        const struct store_op *op = &b->ops[k];
        if (!pg_ops[op->kind].st[0].sql ||
            (op->kind == STORE_OP_JOB_INSERT && op->v[STORE_JOB_V_ARRAY_ID].i == STORE_ARRAY_FIRST))
            return false;
    }
    return true;
}

/* The next query's result in pipeline mode (and the NULL that ends it). */
static PGresult *next_result(PGconn *c)
{
    PGresult *res = PQgetResult(c);
    if (res && PQresultStatus(res) != PGRES_PIPELINE_SYNC) {
        PGresult *end;
        while ((end = PQgetResult(c)) != NULL) /* nothing but the end is expected */
            PQclear(end);
    }
    return res;
}

/* A position in the statements a pipeline runs: statement `stmt` of
 * operation `op` of batch `b`, over the batches from the first to `stop`
 * (exclusive), skipping those refused before anything was sent. */
struct cursor {
    struct store_batch *b, *stop;
    size_t op, stmt;
};

/* Moves c to its first statement at or after where it is; false at the end. */
static bool cursor_settle(struct cursor *c)
{
    while (c->b != c->stop) {
        if (!c->b->err && c->op < c->b->nops) {
            if (c->stmt < op_stmts(&c->b->ops[c->op]))
                return true;
            c->op++;
            c->stmt = 0;
            continue;
        }
        c->b = c->b->next;
        c->op = c->stmt = 0;
    }
    return false;
}

static void cursor_next(struct cursor *c)
{
    c->stmt++;
    (void)cursor_settle(c);
}

/* The statement index of pg_ops a cursor's statement runs. */
static size_t cursor_stmt(const struct cursor *c)
{
    const struct store_op *op = &c->b->ops[c->op];
    if (op->kind == STORE_OP_JOB_INSERT)
        return op->v[STORE_JOB_V_IDEM_KEY].s ? 1 : 0;
    return c->stmt;
}

/* Sends the statement at c (pipeline mode); 0 or GPO_EIO. No statement
 * of a pipelined batch depends on an earlier one's answer (batch_pipelines),
 * so none needs the job ids of the batch so far. */
static int cursor_send(struct pgs *s, const struct cursor *c)
{
    const struct store_op *op = &c->b->ops[c->op];
    struct run r = {.s = s, .b = c->b, .opno = c->op};
    if (op->kind == STORE_OP_JOB_INSERT) {
        struct store_val v[STORE_OP_MAXVALS];
        bool self = false;
        size_t i = job_insert_stmt(&r, op, v, &self);
        return send_stmt(&r, op->kind, i, v, NULL) ? GPO_EIO : 0;
    }
    return send_stmt(&r, op->kind, c->stmt, op->v, NULL) ? GPO_EIO : 0;
}

/* Runs statements in pipeline mode, at most PIPELINE_MAX a round trip,
 * from batch `first` on: with `one`, that batch alone inside its own
 * savepoint; else every batch to the end of the group without savepoints
 * (the fast path: none is expected to fail). A batch's first failure goes
 * into it, and nothing after it is sent. Returns <0 when the transaction
 * itself is lost (txmsg says why), 1 when a batch failed (with `one` it is
 * to be rolled back to its savepoint, else the whole transaction), else 0. */
static int run_pipelined(struct pgs *s, struct store_batch *first, bool one, char *txmsg,
                         size_t len)
{
    PGconn *c = s->w.c;
    char msg[200];
    struct cursor send = {.b = first, .stop = one ? first->next : NULL};
    (void)cursor_settle(&send);
    struct cursor at[PIPELINE_MAX]; /* what each statement of a round trip is */
    bool savepoint = one, failed = false, more = send.b != send.stop;
    size_t njobs_read = 0; /* the job inserts read so far of the batch being read */
    int lost = 0;
    while (!lost && !failed && (more || savepoint)) {
        if (!PQenterPipelineMode(c))
            return errbuf_set(txmsg, len, GPO_EIO, "pipeline: %s", PQerrorMessage(c));
        if (savepoint && !PQsendQueryParams(c, "SAVEPOINT b", 0, NULL, NULL, NULL, NULL, 0))
            lost = GPO_EIO;
        size_t n = 0;
        for (; !lost && more && n < PIPELINE_MAX; n++) {
            at[n] = send;
            lost = cursor_send(s, &send);
            cursor_next(&send);
            more = send.b != send.stop;
        }
        if (!lost && !PQpipelineSync(c))
            lost = GPO_EIO;
        if (lost) {
            snprintf(msg, sizeof(msg), "%s", PQerrorMessage(c));
            (void)PQexitPipelineMode(c);
            return errbuf_set(txmsg, len, GPO_EIO, "sending: %.180s", msg);
        }
        PGresult *res;
        if (savepoint) {
            res = next_result(c);
            if (PQresultStatus(res) != PGRES_COMMAND_OK) {
                (void)pg_result_err(c, res, msg, sizeof(msg));
                lost = errbuf_set(txmsg, len, GPO_EIO, "savepoint: %s", msg);
            }
            PQclear(res);
            savepoint = false;
        }
        for (size_t k = 0; k < n; k++) {
            const struct cursor *read = &at[k];
            res = next_result(c);
            ExecStatusType st = PQresultStatus(res);
            struct run r = {.s = s, .b = read->b, .opno = read->op};
            if (read->op == 0 && read->stmt == 0)
                njobs_read = 0;
            r.njobs = njobs_read;
            if (!res && !lost)
                lost = errbuf_set(txmsg, len, GPO_EIO, "%s", PQerrorMessage(c));
            else if (!lost && !failed && st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
                (void)op_fail(&r, res);
            else if (!lost && !failed)
                (void)op_result(&r, read->op, cursor_stmt(read), res);
            njobs_read = r.njobs;
            failed |= read->b->err != 0;
            PQclear(res);
        }
        /* Up to the sync point: everything of this round trip is read. */
        while ((res = PQgetResult(c)) != NULL) {
            bool sync = PQresultStatus(res) == PGRES_PIPELINE_SYNC;
            PQclear(res);
            if (sync)
                break;
        }
        if (!PQexitPipelineMode(c) && !lost)
            lost = errbuf_set(txmsg, len, GPO_EIO, "pipeline: %s", PQerrorMessage(c));
    }
    return lost ? lost : failed ? 1 : 0;
}

/* A decision batch under another epoch than the store's `cur` fails
 * before anything of it is sent. b's outcome is reset first. */
static void check_batch(struct store_batch *b, int64_t cur)
{
    b->err = 0;
    b->msg[0] = '\0';
    b->existing_job_id = 0;
    if (b->epoch && b->epoch < cur)
        store_batch_fail(b, GPO_EFENCED, "epoch %lld is older than the store's %lld",
                         (long long)b->epoch, (long long)cur);
    else if (b->epoch > cur)
        store_batch_fail(b, GPO_EINVAL, "epoch %lld was never acquired (latest %lld)",
                         (long long)b->epoch, (long long)cur);
}

/* Runs one (checked) batch inside its own savepoint; on failure only the
 * batch is undone. The outcome is left in b; returns nonzero when the
 * transaction itself is lost (txmsg says why). */
static int run_batch(struct pgs *s, struct store_batch *b, char *txmsg, size_t len)
{
    struct run r = {.s = s, .b = b};
    char msg[200];
    if (b->err)
        return 0; /* nothing of it was sent */
    int err = 0;
    if (batch_pipelines(b)) {
        int rc = run_pipelined(s, b, true, txmsg, len);
        if (rc < 0)
            return rc;
        err = b->err;
    } else {
        if (pg_exec(s->w.c, "SAVEPOINT b", msg, sizeof(msg)) != 0)
            return errbuf_set(txmsg, len, GPO_EIO, "savepoint: %s", msg);
        for (size_t k = 0; err == 0 && k < b->nops; k++)
            err = run_op(&r, k);
    }
    if (err &&
        pg_exec(s->w.c, "ROLLBACK TO SAVEPOINT b; RELEASE SAVEPOINT b", msg, sizeof(msg)) != 0)
        return errbuf_set(txmsg, len, GPO_EIO, "transaction rolled back: %.100s (%.80s)", msg,
                          b->msg);
    return 0;
}

static int begin_group(struct pgs *s, int64_t *ret_epoch, char *txmsg, size_t len);

/* The fast path: every batch of the group in one round trip, without
 * savepoints. 0: done; 1: one failed, the transaction rolled back and begun
 * again (the batches to be run one by one); <0: lost. */
static int run_fast(struct pgs *s, struct store_batch *group, int64_t *cur, char *txmsg, size_t len)
{
    for (const struct store_batch *b = group; b; b = b->next)
        if (!batch_pipelines(b))
            return 1;
    int rc = run_pipelined(s, group, false, txmsg, len);
    if (rc != 1)
        return rc;
    char msg[200];
    if (pg_exec(s->w.c, "ROLLBACK", msg, sizeof(msg)) != 0)
        return errbuf_set(txmsg, len, GPO_EIO, "rollback: %s", msg);
    rc = begin_group(s, cur, txmsg, len);
    for (struct store_batch *b = group; rc == 0 && b; b = b->next)
        check_batch(b, *cur);
    return rc ? rc : 1;
}

/* BEGIN and the lease row's epoch under a share lock, in one round trip. */
static int begin_group(struct pgs *s, int64_t *ret_epoch, char *txmsg, size_t len)
{
    PGresult *r = PQexec(s->w.c, "BEGIN; SELECT epoch FROM lease WHERE id = 1 FOR SHARE");
    int rc = 0;
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        char msg[200];
        (void)pg_result_err(s->w.c, r, msg, sizeof(msg));
        rc = errbuf_set(txmsg, len, GPO_EIO, "begin: %s", msg);
    } else {
        *ret_epoch = pg_cell_int(r, 0, 0);
    }
    PQclear(r);
    return rc;
}

static int commit_group(struct pgs *s, char *txmsg, size_t len)
{
    PGresult *r = PQexec(s->w.c, "COMMIT");
    int rc = 0;
    /* A transaction the server had aborted answers COMMIT with ROLLBACK. */
    if (PQresultStatus(r) != PGRES_COMMAND_OK || strcmp(PQcmdStatus(r), "COMMIT") != 0) {
        char msg[200];
        (void)pg_result_err(s->w.c, r, msg, sizeof(msg));
        rc = errbuf_set(txmsg, len, GPO_EIO, "commit: %s", msg[0] ? msg : PQcmdStatus(r));
    }
    PQclear(r);
    return rc;
}

/* store_group_fn: one transaction for the whole group. */
static void run_group(void *backend, struct store_batch *group)
{
    struct pgs *s = backend;
    char txmsg[sizeof(group->msg)] = "", msg[200];
    int64_t cur = 0, mine = atomic_load(&s->epoch);
    int rc = 0;
    if (mine == 0)
        rc = errbuf_set(txmsg, sizeof(txmsg), GPO_EFENCED,
                        "this controller does not hold the store's lease");
    if (rc == 0 && (rc = pg_conn_ready(s, &s->w, PG_ROLE_WRITER, msg, sizeof(msg))) != 0)
        rc = errbuf_set(txmsg, sizeof(txmsg), GPO_EIO, "%s", msg);
    if (rc == 0)
        rc = begin_group(s, &cur, txmsg, sizeof(txmsg));
    if (rc == 0 && cur != mine)
        rc = errbuf_set(txmsg, sizeof(txmsg), GPO_EFENCED,
                        "the store's lease moved to epoch %lld; this controller's is %lld",
                        (long long)cur, (long long)mine);
    for (struct store_batch *b = group; rc == 0 && b; b = b->next)
        check_batch(b, cur);
    if (rc == 0 && (rc = run_fast(s, group, &cur, txmsg, sizeof(txmsg))) == 1) {
        rc = cur == mine ? 0
                         : errbuf_set(txmsg, sizeof(txmsg), GPO_EFENCED,
                                      "the store's lease moved to epoch %lld; this controller's "
                                      "is %lld",
                                      (long long)cur, (long long)mine);
        for (struct store_batch *b = group; rc == 0 && b; b = b->next)
            rc = run_batch(s, b, txmsg, sizeof(txmsg));
    }
    if (rc == 0)
        rc = commit_group(s, txmsg, sizeof(txmsg));
    if (rc && s->w.c && PQtransactionStatus(s->w.c) != PQTRANS_IDLE)
        (void)pg_exec(s->w.c, "ROLLBACK", NULL, 0);
    for (struct store_batch *b = group; rc && b; b = b->next) {
        b->existing_job_id = 0;
        store_batch_fail(b, rc == GPO_EFENCED ? GPO_EFENCED : GPO_EIO, "%s", txmsg);
    }
}

static int pg_commit(struct store *base, struct store_batch *b, store_done_fn done, void *ctx)
{
    return store_writer_commit(&to_pgs(base)->writer, b, done, ctx);
}

static void pg_get_stats(struct store *base, struct store_stats *ret)
{
    store_writer_stats(&to_pgs(base)->writer, ret);
}

static void pg_pause_writer(struct store *base)
{
    store_writer_pause(&to_pgs(base)->writer);
}

static void pg_resume_writer(struct store *base)
{
    store_writer_resume(&to_pgs(base)->writer);
}

/* ---- opening and closing ---------------------------------------------------------- */

/* Also a half-opened store: the writer (its thread, if started, commits what
 * is queued and is joined) goes before the connection it writes on. */
static void pgs_free(struct pgs *s)
{
    store_writer_release(&s->writer);
    conn_close(&s->w);
    for (size_t k = 0; k < PG_POOL; k++)
        conn_close(&s->pool[k]);
    conn_close(&s->lease);
    if (s->pool_ready) {
        pthread_cond_destroy(&s->pool_free);
        pthread_mutex_destroy(&s->pool_lock);
    }
    if (s->lease_ready)
        pthread_mutex_destroy(&s->lease_lock);
    params_free(s);
    free(s);
}

static void pg_close(struct store *base)
{
    pgs_free(to_pgs(base));
}

static const struct store_ops postgres_ops = {
    .commit = pg_commit,
    .get_stats = pg_get_stats,
    .pause_writer = pg_pause_writer,
    .resume_writer = pg_resume_writer,
    .last_error = pg_last_error,
    .meta_get = pg_meta_get,
    .user_get_by_name = pg_user_get_by_name,
    .user_get_by_id = pg_user_get_by_id,
    .user_get_by_token = pg_user_get_by_token,
    .user_list = pg_user_list,
    .config_get = pg_config_get,
    .config_list = pg_config_list,
    .node_list = pg_node_list,
    .job_get = pg_job_get,
    .job_list = pg_job_list,
    .job_scan_active = pg_job_scan_active,
    .sched_state_get = pg_sched_state_get,
    .idempotency_get = pg_idempotency_get,
    .close = pg_close,
    .ledger_range = pg_ledger_range,
    .minutes_get = pg_minutes_get,
    .shared = true,
    .lease_acquire = pg_lease_acquire,
    .lease_renew = pg_lease_renew,
    .lease_release = pg_lease_release,
    .lease_get = pg_lease_get,
};

static int init_sync(struct pgs *s)
{
    int rc = store_writer_init(&s->writer, run_group, s);
    if (rc)
        return rc;
    if (pthread_mutex_init(&s->pool_lock, NULL))
        return GPO_ENOMEM;
    if (pthread_cond_init(&s->pool_free, NULL)) {
        pthread_mutex_destroy(&s->pool_lock);
        return GPO_ENOMEM;
    }
    s->pool_ready = true;
    if (pthread_mutex_init(&s->lease_lock, NULL))
        return GPO_ENOMEM;
    s->lease_ready = true;
    return 0;
}

int store_open_postgres(const char *url, struct store **ret_store, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!ret_store || !store_url_is_postgres(url) || strlen(url) > URL_MAX)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "the store URL must start with postgres:// or postgresql:// and be at "
                          "most %d bytes",
                          URL_MAX);
    struct pgs *s = calloc(1, sizeof(*s));
    if (!s)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    s->base.ops = &postgres_ops;
    atomic_init(&s->epoch, 0);
    int rc = init_sync(s);
    if (rc)
        errbuf_set(err, errlen, rc, "cannot create the store's locks");
    if (rc == 0)
        rc = params_parse(s, url, err, errlen);
    if (rc == 0)
        rc = conn_open(s, &s->w, PG_ROLE_WRITER, err, errlen);
    if (rc == 0)
        rc = pg_schema_migrate(s->w.c, err, errlen);
    if (rc == 0)
        rc = pg_conn_ready(s, &s->w, PG_ROLE_WRITER, err, errlen);
    if (rc == 0 && store_writer_start(&s->writer) != 0)
        rc = errbuf_set(err, errlen, GPO_ENOMEM, "cannot start the writer thread");
    if (rc) {
        pgs_free(s);
        return rc;
    }
    *ret_store = &s->base;
    return 0;
}

/*
 * steps.c - the step server's registry, route and stream (steps.h); the
 * tasks themselves are steps_run.c's.
 */
#define _GNU_SOURCE
#include "agent/steps.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <sodium.h>

#include "agent/steps_int.h"
#include "util/jsonv.h"
#include "util/stepframe.h"
#include "base/banned.h"

struct steps {
    struct steps_config cfg;
    char *node;
    pthread_mutex_t mu;
    pthread_cond_t idle; /* a step ended */
    struct steps_attempt **att;
    size_t natt, capatt;
    struct step **live;
    size_t nlive;
};

static void nolog(const char *fmt, ...)
{
    (void)fmt;
}

int steps_new(const struct steps_config *cfg, struct steps **ret)
{
    struct steps *s = calloc(1, sizeof(*s));
    // NOLINTNEXTLINE(bugprone-sizeof-expression): *live is a pointer (an array of them)
    struct step **live = calloc(STEPS_MAX, sizeof(*live));
    char *node = strdup(cfg->node);
    if (!s || !live || !node) {
        free(s);
        free(live);
        free(node);
        return GPO_ENOMEM;
    }
    s->cfg = *cfg;
    s->cfg.log = cfg->log ? cfg->log : nolog;
    s->node = node;
    s->live = live;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->idle, NULL);
    *ret = s;
    return 0;
}

static void strs_free(char **v, size_t n)
{
    for (size_t k = 0; v && k < n; k++)
        free(v[k]);
    free(v);
}

static void attempt_free(struct steps_attempt *a)
{
    if (a) {
        strs_free(a->uuids, a->nuuids);
        proto_attempt_release(&a->a);
    }
    free(a);
}

/* A deep copy of a run assignment, through its codec: 0, GPO_ENOMEM. */
static int attempt_copy(const struct proto_attempt *a, struct proto_attempt *ret)
{
    json_t *o = NULL;
    int rc = proto_attempt_encode(a, &o);
    rc = rc ? rc : proto_attempt_decode(o, ret, NULL, 0);
    json_decref(o);
    return rc ? GPO_ENOMEM : 0;
}

/* Ends a step's tasks (the thread sees it); under its lock or not. */
static void cancel(struct step *st)
{
    pthread_mutex_lock(&st->mu);
    st->cancelled = true;
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->mu);
    uint64_t one = 1;
    if (write(st->wake_fd, &one, sizeof(one)) < 0) { /* full: it is awake already */
    }
}

void steps_free(struct steps *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    for (size_t k = 0; k < s->nlive; k++)
        cancel(s->live[k]);
    while (s->nlive)
        pthread_cond_wait(&s->idle, &s->mu);
    pthread_mutex_unlock(&s->mu);
    for (size_t k = 0; k < s->natt; k++)
        attempt_free(s->att[k]);
    free(s->att);
    free(s->live);
    free(s->node);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->idle);
    free(s);
}

/* Under s->mu. */
static size_t find_attempt(const struct steps *s, uint64_t job, uint32_t attempt)
{
    for (size_t k = 0; k < s->natt; k++) {
        if (s->att[k]->job == job && s->att[k]->attempt == attempt)
            return k;
    }
    return s->natt;
}

int steps_attempt_add(struct steps *s, const struct proto_attempt *a)
{
    if (!s || !a->step.key)
        return 0;
    struct steps_attempt *n = calloc(1, sizeof(*n));
    if (!n || !(n->uuids = calloc(a->ngpus + 1, sizeof(*n->uuids)))) {
        free(n);
        return GPO_ENOMEM;
    }
    n->job = a->job;
    n->attempt = a->attempt;
    snprintf(n->key, sizeof(n->key), "%s", a->step.key);
    n->milli = a->ngpus ? a->gpus[0].milli : 1000;
    if (attempt_copy(a, &n->a) != 0) {
        attempt_free(n);
        return GPO_ENOMEM;
    }
    for (size_t k = 0; k < a->ngpus; k++) { /* what a step's tasks see: a MIG device alone */
        const char *uuid = a->gpus[k].mig_uuid ? a->gpus[k].mig_uuid : a->gpus[k].uuid;
        if (!(n->uuids[k] = strdup(uuid))) {
            attempt_free(n);
            return GPO_ENOMEM;
        }
        n->nuuids++;
    }
    pthread_mutex_lock(&s->mu);
    size_t at = find_attempt(s, a->job, a->attempt);
    int rc = 0;
    if (at < s->natt) {
        attempt_free(s->att[at]);
        s->att[at] = n;
    } else if (s->natt == s->capatt) {
        size_t cap = s->capatt ? 2 * s->capatt : 8;
        // NOLINTNEXTLINE(bugprone-sizeof-expression): *v is a pointer (an array of them)
        struct steps_attempt **v = realloc(s->att, cap * sizeof(*v));
        if (v) {
            s->att = v;
            s->capatt = cap;
            s->att[s->natt++] = n;
        } else {
            rc = GPO_ENOMEM;
        }
    } else {
        s->att[s->natt++] = n;
    }
    pthread_mutex_unlock(&s->mu);
    if (rc)
        attempt_free(n);
    return rc;
}

void steps_attempt_remove(struct steps *s, uint64_t job, uint32_t attempt)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    size_t at = find_attempt(s, job, attempt);
    if (at < s->natt) {
        attempt_free(s->att[at]);
        s->att[at] = s->att[--s->natt];
    }
    for (size_t k = 0; k < s->nlive; k++) {
        if (s->live[k]->job == job && s->live[k]->attempt == attempt)
            cancel(s->live[k]);
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---- a step's frames, its stream and its lifetime ---------------------- */

bool steps_out_frame(struct step *st, int type, uint32_t task, const void *data, size_t n)
{
    if (st->out_len + STEPFRAME_HEAD + n > st->out_cap) {
        size_t cap = st->out_cap ? st->out_cap : 65536;
        while (cap < st->out_len + STEPFRAME_HEAD + n)
            cap *= 2;
        uint8_t *v = realloc(st->out, cap);
        if (!v)
            return false;
        st->out = v;
        st->out_cap = cap;
    }
    stepframe_head(
        &(struct stepframe){.type = (enum stepframe_type)type, .task = task, .len = (uint32_t)n},
        st->out + st->out_len);
    if (n)
        memcpy(st->out + st->out_len + STEPFRAME_HEAD, data, n);
    st->out_len += STEPFRAME_HEAD + n;
    return true;
}

bool steps_in_frames(struct step *st, const void *data, size_t n)
{
    if (st->in_len + n > STEPS_IN_MAX)
        return false;
    if (st->in_len + n > st->in_cap) {
        size_t cap = st->in_cap ? st->in_cap : 4096;
        while (cap < st->in_len + n)
            cap *= 2;
        uint8_t *v = realloc(st->in, cap);
        if (!v)
            return false;
        st->in = v;
        st->in_cap = cap;
    }
    memcpy(st->in + st->in_len, data, n);
    st->in_len += n;
    return true;
}

void steps_request_release(struct steps_request *r)
{
    strs_free(r->argv, r->argc);
    strs_free(r->env, r->nenv);
    free(r->workdir);
    free(r->master_addr);
    free(r->session);
    memset(r, 0, sizeof(*r));
}

void steps_unref(struct step *st)
{
    struct steps *s = st->owner;
    pthread_mutex_lock(&s->mu);
    pthread_mutex_lock(&st->mu);
    bool last = --st->refs == 0;
    pthread_mutex_unlock(&st->mu);
    if (last) {
        for (size_t k = 0; k < s->nlive; k++) {
            if (s->live[k] == st) {
                s->live[k] = s->live[--s->nlive];
                break;
            }
        }
        pthread_cond_broadcast(&s->idle);
    }
    pthread_mutex_unlock(&s->mu);
    if (!last)
        return;
    http_stream_release(st->stream);
    steps_request_release(&st->req);
    strs_free(st->uuids, st->nuuids);
    proto_attempt_release(&st->att);
    free(st->out);
    free(st->in);
    close(st->wake_fd);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cond);
    free(st);
}

/* The stream's read, on the polling thread. */
static ssize_t stream_read(void *ctx, char *buf, size_t max)
{
    struct step *st = ctx;
    pthread_mutex_lock(&st->mu);
    size_t n = st->out_len < max ? st->out_len : max;
    if (n) {
        memcpy(buf, st->out, n);
        memmove(st->out, st->out + n, st->out_len - n);
        st->out_len -= n;
    }
    bool end = !n && st->done;
    if (n)
        pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->mu);
    return end ? HTTP_STREAM_END : (ssize_t)n;
}

/* libmicrohttpd is done with the answer: the client has it all, or left. */
static void stream_free(void *ctx)
{
    struct step *st = ctx;
    cancel(st);
    steps_unref(st);
}

/* ---- the route ---------------------------------------------------------- */

static const struct jsonv_field request_fields[] = {
    {.name = "step",
     .kind = JSONV_UINT32,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct steps_request, step),
     .max = UINT32_MAX},
    {.name = "argv",
     .kind = JSONV_STRINGS,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct steps_request, argv),
     .min = 0,
     .max = PRIV_STRINGS_MAX,
     .max_items = PRIV_STRINGS_N / 2,
     .count_offset = offsetof(struct steps_request, argc)},
    {.name = "env",
     .kind = JSONV_STRINGS,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct steps_request, env),
     .min = 2,
     .max = PRIV_STRINGS_MAX,
     .max_items = PRIV_STRINGS_N / 2,
     .count_offset = offsetof(struct steps_request, nenv)},
    {.name = "workdir",
     .kind = JSONV_STRING,
     .flags = JSONV_NULLABLE,
     .offset = offsetof(struct steps_request, workdir),
     .min = 1,
     .max = PRIV_PATH_MAX - 1},
    {.name = "node_index",
     .kind = JSONV_UINT32,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct steps_request, node_index),
     .max = PROTO_GANG_MAX - 1},
    {.name = "nodes",
     .kind = JSONV_UINT32,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct steps_request, nodes),
     .min = 1,
     .max = PROTO_GANG_MAX},
    {.name = "ntasks",
     .kind = JSONV_UINT32,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct steps_request, ntasks),
     .min = 1,
     .max = PROTO_TASKS_MAX},
    {.name = "first_task",
     .kind = JSONV_UINT32,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct steps_request, first_task),
     .max = PROTO_TASKS_MAX - 1},
    {.name = "local_tasks",
     .kind = JSONV_UINT32,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct steps_request, local_tasks),
     .min = 1,
     .max = STEPS_TASKS_MAX},
    {.name = "gpus_per_task",
     .kind = JSONV_UINT32,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct steps_request, gpus_per_task),
     .max = PROTO_GPUS_MAX},
    {.name = "master_addr",
     .kind = JSONV_STRING,
     .flags = JSONV_REQUIRED | JSONV_TEXT,
     .offset = offsetof(struct steps_request, master_addr),
     .min = 1,
     .max = PROTO_HOST_MAX},
    {.name = "master_port",
     .kind = JSONV_UINT32,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct steps_request, master_port),
     .min = 1,
     .max = 65535},
    {.name = "pty", .kind = JSONV_BOOL, .offset = offsetof(struct steps_request, pty)},
    {.name = "session",
     .kind = JSONV_STRING,
     .flags = JSONV_TEXT,
     .offset = offsetof(struct steps_request, session),
     .min = 16,
     .max = 64},
    {.name = "rows",
     .kind = JSONV_UINT32,
     .offset = offsetof(struct steps_request, rows),
     .max = 65535},
    {.name = "cols",
     .kind = JSONV_UINT32,
     .offset = offsetof(struct steps_request, cols),
     .max = 65535},
};
#define NFIELDS (sizeof(request_fields) / sizeof(request_fields[0]))

/* The rules between the request's fields and this node's GPUs. */
static int request_check(const struct steps_request *r, size_t ngpus, char *err, size_t errlen)
{
    if (!r->argc || !r->argv[0][0])
        return snprintf(err, errlen, "field 'argv': the step needs a program"), GPO_EINVAL;
    if (r->node_index >= r->nodes)
        return snprintf(err, errlen, "field 'node_index': %u of %u node(s)", r->node_index,
                        r->nodes),
               GPO_EINVAL;
    if ((uint64_t)r->first_task + r->local_tasks > r->ntasks)
        return snprintf(err, errlen, "fields 'first_task', 'local_tasks': tasks %u..%u of %u",
                        r->first_task, r->first_task + r->local_tasks - 1, r->ntasks),
               GPO_EINVAL;
    if (r->pty && (r->ntasks != 1 || r->local_tasks != 1 || !r->session))
        return snprintf(err, errlen,
                        "field 'pty': one task (ntasks and local_tasks 1), with "
                        "a 'session'"),
               GPO_EINVAL;
    if (!r->pty && (r->session || r->rows || r->cols))
        return snprintf(err, errlen, "fields 'session', 'rows', 'cols': only with 'pty'"),
               GPO_EINVAL;
    for (const char *p = r->session; p && *p; p++) {
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            return snprintf(err, errlen, "field 'session': letters and digits only"), GPO_EINVAL;
    }
    if ((uint64_t)r->gpus_per_task * r->local_tasks > ngpus)
        return snprintf(err, errlen,
                        "field 'gpus_per_task': %u task(s) x %u GPU(s), but the job has %zu "
                        "GPU(s) on this node",
                        r->local_tasks, r->gpus_per_task, ngpus),
               GPO_EINVAL;
    return 0;
}

static bool parse_id(const char *v, uint64_t max, uint64_t *ret)
{
    char *end;
    if (!v || !*v || *v == '-' || *v == '+' || strlen(v) > 19)
        return false;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || x < 1 || x > max)
        return false;
    *ret = x;
    return true;
}

/* The attempt the request names, if it runs here and the request has its
 * credential; else NULL and *status 404 or 401. Under s->mu. */
static const struct steps_attempt *authorized(struct steps *s, struct http_request *req,
                                              uint64_t job, uint32_t attempt, int *status)
{
    const char *bearer = http_request_bearer(req);
    size_t at = find_attempt(s, job, attempt);
    if (at == s->natt) {
        *status = 404;
        return NULL;
    }
    const struct steps_attempt *a = s->att[at];
    if (!bearer || strlen(bearer) != PROTO_STEP_KEY_LEN ||
        sodium_memcmp(bearer, a->key, PROTO_STEP_KEY_LEN) != 0) {
        *status = 401;
        return NULL;
    }
    return a;
}

/* The attempt the request names, if its credential matches: a new step
 * that copies its GPUs, under s->mu. 401/404 answered otherwise. */
static struct step *step_for(struct steps *s, struct http_request *req, uint64_t job,
                             uint32_t attempt, int *status)
{
    const struct steps_attempt *a = authorized(s, req, job, attempt, status);
    if (!a)
        return NULL;
    struct step *st = calloc(1, sizeof(*st));
    if (st && (st->uuids = calloc(a->nuuids + 1, sizeof(*st->uuids)))) {
        for (size_t k = 0; k < a->nuuids && (st->uuids[k] = strdup(a->uuids[k])); k++)
            st->nuuids++;
    }
    if (!st || !st->uuids || st->nuuids != a->nuuids || attempt_copy(&a->a, &st->att) != 0) {
        if (st) {
            strs_free(st->uuids, st->nuuids);
            proto_attempt_release(&st->att);
        }
        free(st);
        *status = 500;
        return NULL;
    }
    st->milli = a->milli;
    return st;
}

/* The live pty step of (job, attempt) named session, under s->mu; NULL for
 * none (and for a NULL session). */
static struct step *find_session(struct steps *s, uint64_t job, uint32_t attempt,
                                 const char *session)
{
    for (size_t k = 0; session && k < s->nlive; k++) {
        const struct step *st = s->live[k];
        if (st->job == job && st->attempt == attempt && st->req.session &&
            strcmp(st->req.session, session) == 0)
            return s->live[k];
    }
    return NULL;
}

/* Starts the step's thread and answers with its stream. */
static int start(struct steps *s, struct http_request *req, struct step *st)
{
    st->owner = s;
    st->priv = s->cfg.priv;
    st->as_root = s->cfg.as_root;
    snprintf(st->node, sizeof(st->node), "%s", s->node);
    st->refs = 2;
    st->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cond, NULL);
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (st->wake_fd < 0) {
        int e = errno;
        st->refs = 1;
        steps_unref(st);
        return http_request_error(req, 500, "internal", "eventfd: %s", strerror(e));
    }
    pthread_mutex_lock(&s->mu);
    bool room = s->nlive < STEPS_MAX,
         taken = find_session(s, st->job, st->attempt, st->req.session) != NULL;
    if (room && !taken)
        s->live[s->nlive++] = st;
    pthread_mutex_unlock(&s->mu);
    if (taken) {
        st->refs = 1;
        steps_unref(st);
        return http_request_error(req, 409, "session_in_use",
                                  "the attempt has an interactive step of that session already");
    }
    /* The stream holds one reference from here on: its free_ctx drops it. */
    int rc = room ? http_request_respond_stream(req, 200, "application/octet-stream", stream_read,
                                                stream_free, st, &st->stream)
                  : GPO_EBUSY;
    if (rc == 0 && pthread_create(&th, &attr, steps_run, st) == 0) {
        pthread_attr_destroy(&attr);
        return 0;
    }
    pthread_attr_destroy(&attr);
    if (rc == 0) { /* answered, but nothing runs it: the stream ends at once */
        pthread_mutex_lock(&st->mu);
        st->done = true;
        pthread_mutex_unlock(&st->mu);
        http_stream_wake(st->stream);
        steps_unref(st);
        return 0;
    }
    if (!room) {
        st->refs = 1;
        steps_unref(st); /* never listed: frees */
        return http_request_error(req, 503, "too_many_steps", "%d steps run here already",
                                  STEPS_MAX);
    }
    /* respond_stream failed: its free_ctx ran already (one reference). */
    steps_unref(st);
    return http_request_error(req, 500, "internal", "%s", gpo_strerror(rc));
}

static int h_step(struct http_request *req, void *ctx)
{
    (void)ctx;
    struct steps *s = (struct steps *)http_request_route_arg(req);
    uint64_t job, attempt;
    if (!parse_id(http_request_param(req, "job"), INT64_MAX, &job) ||
        !parse_id(http_request_param(req, "attempt"), UINT32_MAX, &attempt))
        return http_request_error(req, 400, "invalid_path",
                                  "expected /v1/steps/JOB/ATTEMPT with positive ids");
    int status = 0;
    pthread_mutex_lock(&s->mu);
    struct step *st = step_for(s, req, job, (uint32_t)attempt, &status);
    pthread_mutex_unlock(&s->mu);
    if (!st && status == 401)
        return http_request_error(req, 401, "unauthorized",
                                  "the attempt's step credential is "
                                  "required (GPUORCH_STEP_KEY)");
    if (!st && status == 404)
        return http_request_error(req, 404, "not_found",
                                  "job %" PRIu64 " has no attempt %" PRIu64 " running here", job,
                                  attempt);
    if (!st)
        return http_request_error(req, 500, "internal", "out of memory");
    st->job = job;
    st->attempt = (uint32_t)attempt;
    char err[512] = "";
    int rc =
        jsonv_decode(http_request_json(req), request_fields, NFIELDS, &st->req, err, sizeof(err));
    rc = rc ? rc : request_check(&st->req, st->nuuids, err, sizeof(err));
    if (rc) {
        steps_request_release(&st->req);
        strs_free(st->uuids, st->nuuids);
        proto_attempt_release(&st->att);
        free(st);
        return rc == GPO_ENOMEM ? http_request_error(req, 500, "internal", "out of memory")
                                : http_request_error(req, 400, "invalid_field", "%s", err);
    }
    return start(s, req, st);
}

/* Whether body is whole input frames only. */
static bool input_ok(const uint8_t *body, size_t len)
{
    size_t at = 0;
    struct stepframe f;
    while (len - at >= STEPFRAME_HEAD && stepframe_parse(body + at, &f) == 0 &&
           stepframe_is_input(f.type) && len - at - STEPFRAME_HEAD >= f.len)
        at += STEPFRAME_HEAD + f.len;
    return at == len;
}

static int h_input(struct http_request *req, void *ctx)
{
    (void)ctx;
    struct steps *s = (struct steps *)http_request_route_arg(req);
    uint64_t job, attempt;
    size_t len = 0;
    const uint8_t *body = http_request_body(req, &len);
    if (!parse_id(http_request_param(req, "job"), INT64_MAX, &job) ||
        !parse_id(http_request_param(req, "attempt"), UINT32_MAX, &attempt))
        return http_request_error(req, 400, "invalid_path",
                                  "expected /v1/steps/JOB/ATTEMPT/input/SESSION with positive ids");
    int status = 0;
    pthread_mutex_lock(&s->mu);
    struct step *st =
        authorized(s, req, job, (uint32_t)attempt, &status)
            ? find_session(s, job, (uint32_t)attempt, http_request_param(req, "session"))
            : NULL;
    bool queued = false, valid = st && (!len || input_ok(body, len));
    if (valid) {
        pthread_mutex_lock(&st->mu);
        queued = !st->done && !st->cancelled && (!len || steps_in_frames(st, body, len));
        pthread_mutex_unlock(&st->mu);
        uint64_t one = 1;
        if (queued && write(st->wake_fd, &one, sizeof(one)) < 0) { /* full: awake already */
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (status == 401)
        return http_request_error(req, 401, "unauthorized",
                                  "the attempt's step credential is required (GPUORCH_STEP_KEY)");
    if (!st)
        return http_request_error(req, 404, "not_found", "no such interactive step running here");
    if (!valid)
        return http_request_error(req, 400, "invalid_body",
                                  "expected whole input frames (STDIN, WINSIZE, HANGUP)");
    if (!queued)
        return http_request_error(req, 503, "busy", "the task has %zu bytes of input waiting",
                                  STEPS_IN_MAX);
    return http_request_respond_json(req, 204, NULL);
}

struct http_route steps_route(struct steps *s)
{
    return (struct http_route){"POST", "/v1/steps/{job}/{attempt}", h_step,
                               HTTP_ROUTE_PUBLIC | HTTP_ROUTE_JSON_BODY, s};
}

struct http_route steps_input_route(struct steps *s)
{
    return (struct http_route){"POST", "/v1/steps/{job}/{attempt}/input/{session}", h_input,
                               HTTP_ROUTE_PUBLIC | HTTP_ROUTE_RAW_BODY, s};
}

/*
 * jobs.c - the job calls (client.h): submit, list (every page), get,
 * cancel, and the log stream.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "client/internal.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define ARRAY_LEN(a)   (sizeof(a) / sizeof((a)[0]))
#define LIST_PAGE      1000   /* jobs per GET /v1/jobs */
#define LIST_PAGES_MAX 100000 /* a guard against a server that pages forever */
#define STATES_LEN     128    /* every state's name, comma-separated */

static const char *const state_names[] = {
#define CLIENT_JOB_STATE_NAME(name, text) text,
    CLIENT_JOB_STATE_MAP(CLIENT_JOB_STATE_NAME)
#undef CLIENT_JOB_STATE_NAME
};

const char *client_job_state_name(enum client_job_state s)
{
    return (unsigned)s < ARRAY_LEN(state_names) ? state_names[s] : "?";
}

int client_jobs_submit(struct client *c, const json_t *spec, const char *idempotency_key,
                       json_t **ret, char *err, size_t errlen)
{
    if (idempotency_key && httpc_set_header(c->http, "Idempotency-Key", idempotency_key) != 0)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "the idempotency key cannot be sent in a header");
    int rc = client_call(c, "POST", "/v1/jobs", spec, ret, err, errlen);
    if (idempotency_key)
        httpc_set_header(c->http, NULL, NULL); /* it belongs to this submission only */
    return rc;
}

void client_states_text(unsigned states, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < ARRAY_LEN(state_names) && at < len; k++)
        if (states & (1u << k))
            at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? "," : "", state_names[k]);
}

/* One page: the jobs after `after`, appended to all; *ret_next the next
 * page's start, or 0 when this was the last. */
static int jobs_page(struct client *c, const char *query, int page, json_int_t after, json_t *all,
                     json_int_t *ret_next, char *err, size_t errlen)
{
    char limit[24], from[32];
    struct client_path p;
    int rc = 0;
    snprintf(limit, sizeof(limit), "%d", page);
    snprintf(from, sizeof(from), "%" JSON_INTEGER_FORMAT, after);
    client_path_init(&p, query);
    client_path_param(&p, "limit", limit);
    client_path_param(&p, "after", from);
    const char *path = client_path_done(&p, &rc, err, errlen);
    json_t *body = NULL;
    if (!path || (rc = client_call(c, "GET", path, NULL, &body, err, errlen)) != 0)
        return rc;
    json_t *jobs = json_object_get(body, "jobs"), *next = json_object_get(body, "next_after");
    if (json_array_extend(all, jobs) != 0) {
        json_decref(body);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    /* Keyset paging moves forward, or it is over. */
    *ret_next =
        json_is_integer(next) && json_integer_value(next) > after ? json_integer_value(next) : 0;
    json_decref(body);
    return 0;
}

int client_jobs_pages(struct client *c, const char *query, int page, json_t *all, char *err,
                      size_t errlen)
{
    json_int_t after = 0;
    for (int k = 0; k < LIST_PAGES_MAX; k++) {
        json_int_t next = 0;
        int rc = jobs_page(c, query, page, after, all, &next, err, errlen);
        if (rc || next == 0)
            return rc;
        after = next;
    }
    return errbuf_set(err, errlen, GPO_EAPI, "more than %d pages of jobs", LIST_PAGES_MAX);
}

int client_jobs_list(struct client *c, const struct client_jobs_filter *f, json_t *all, char *err,
                     size_t errlen)
{
    char states[STATES_LEN];
    struct client_path p;
    int rc = 0;
    client_states_text(f ? f->states : 0, states, sizeof(states));
    client_path_init(&p, "/v1/jobs");
    client_path_param(&p, "state", states[0] ? states : NULL);
    client_path_param(&p, "team", f ? f->team : NULL);
    client_path_param(&p, "user", f ? f->user : NULL);
    const char *query = client_path_done(&p, &rc, err, errlen);
    return query ? client_jobs_pages(c, query, LIST_PAGE, all, err, errlen) : rc;
}

int client_jobs_get(struct client *c, int64_t id, json_t **ret, char *err, size_t errlen)
{
    char path[64];
    snprintf(path, sizeof(path), "/v1/jobs/%" PRId64, id);
    return client_call(c, "GET", path, NULL, ret, err, errlen);
}

int client_jobs_cancel(struct client *c, int64_t id, bool *ret_stopping, char *err, size_t errlen)
{
    char path[64];
    snprintf(path, sizeof(path), "/v1/jobs/%" PRId64 "/cancel", id);
    int rc = client_call(c, "POST", path, NULL, NULL, err, errlen);
    if (rc == 0 && ret_stopping)
        *ret_stopping = c->status == 202;
    return rc;
}

/* A target as the path takes it: digits, and at most one '_' between digits. */
static bool target_ok(const char *t)
{
    size_t n = t ? strlen(t) : 0, unders = 0;
    if (n == 0 || n > 40 || t[0] == '_' || t[n - 1] == '_')
        return false;
    for (size_t k = 0; k < n; k++) {
        if (t[k] == '_')
            unders++;
        else if (t[k] < '0' || t[k] > '9')
            return false;
    }
    return unders <= 1;
}

static const char *const action_paths[] = {
    [CLIENT_JOB_HOLD] = "hold",
    [CLIENT_JOB_RELEASE] = "release",
    [CLIENT_JOB_REQUEUE] = "requeue",
};

int client_jobs_action(struct client *c, const char *target, enum client_job_action action,
                       json_t **ret, char *err, size_t errlen)
{
    if (!target_ok(target) || (unsigned)action > CLIENT_JOB_REQUEUE)
        return errbuf_set(err, errlen, GPO_EINVAL, "'%s' is not a job id (N or ARRAY_TASK)",
                          target ? target : "");
    char path[96];
    snprintf(path, sizeof(path), "/v1/jobs/%s/%s", target, action_paths[action]);
    return client_call(c, "POST", path, NULL, ret, err, errlen);
}

int client_jobs_update(struct client *c, const char *target, const json_t *fields, json_t **ret,
                       char *err, size_t errlen)
{
    if (!target_ok(target))
        return errbuf_set(err, errlen, GPO_EINVAL, "'%s' is not a job id (N or ARRAY_TASK)",
                          target ? target : "");
    char path[64];
    snprintf(path, sizeof(path), "/v1/jobs/%s", target);
    return client_call(c, "PATCH", path, fields, ret, err, errlen);
}

/* ---- the log stream ---------------------------------------------------------- */

/* The body as it streams: passed on, but for a body that begins as the
 * API's error object, which is kept to be read at the end (httpc_stream
 * tells the status only then). */
#define ERROR_PREFIX     "{\"error\":"
#define ERROR_PREFIX_LEN (sizeof(ERROR_PREFIX) - 1)
#define ERROR_BODY_MAX   ((size_t)64 * 1024)

struct sink {
    client_write_fn write;
    void *ctx;
    char *kept; /* the start of the body, while it may be an error object */
    size_t nkept;
    bool passing; /* it is not one: everything goes on */
    bool stopped; /* write asked to stop */
};

static bool sink_pass(struct sink *s, const void *data, size_t len)
{
    if (len && !s->stopped && s->write(data, len, s->ctx) != 0)
        s->stopped = true;
    return !s->stopped;
}

static int sink_data(const void *data, size_t len, void *ctx)
{
    struct sink *s = ctx;
    const char *p = data;
    if (len == 0)
        return s->stopped;
    if (!s->passing) {
        size_t n = s->nkept + len > ERROR_BODY_MAX ? ERROR_BODY_MAX - s->nkept : len;
        memcpy(s->kept + s->nkept, p, n);
        s->nkept += n;
        p += n;
        len -= n;
        size_t cmp = s->nkept < ERROR_PREFIX_LEN ? s->nkept : ERROR_PREFIX_LEN;
        if (memcmp(s->kept, ERROR_PREFIX, cmp) != 0 || s->nkept == ERROR_BODY_MAX) {
            s->passing = true;
            sink_pass(s, s->kept, s->nkept);
            s->nkept = 0;
        }
    }
    if (s->passing)
        sink_pass(s, p, len);
    return s->stopped;
}

int client_jobs_logs(struct client *c, int64_t id, const struct client_logs_query *q,
                     client_write_fn write, void *ctx, char *err, size_t errlen)
{
    char path[256];
    int k = snprintf(path, sizeof(path), "/v1/jobs/%" PRId64 "/logs?stream=%s", id,
                     q->stderr_stream ? "stderr" : "stdout");
    if (q->attempt)
        k += snprintf(path + k, sizeof(path) - (size_t)k, "&attempt=%" PRId64, q->attempt);
    if (q->rank >= 0)
        k += snprintf(path + k, sizeof(path) - (size_t)k, "&rank=%" PRId64, q->rank);
    if (q->follow)
        snprintf(path + k, sizeof(path) - (size_t)k, "&follow=1");
    struct sink s = {.write = write, .ctx = ctx, .kept = malloc(ERROR_BODY_MAX)};
    if (!s.kept)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    c->status = 0;
    int rc = httpc_stream(c->http, path, 0, sink_data, &s, &c->status, err, errlen);
    if (s.stopped)
        rc = GPO_ECANCELED; // NOLINT(bugprone-branch-clone): two causes, one code, in this order
    else if (rc == 0 && c->status != 200)
        rc = client_api_error(c->status, s.kept, s.nkept, err, errlen);
    else if (rc == 0 && !sink_pass(&s, s.kept, s.nkept)) /* a short body: log text after all */
        rc = GPO_ECANCELED;
    else if (rc == GPO_ENOMEM)
        errbuf_set(err, errlen, rc, "out of memory");
    free(s.kept);
    return rc;
}

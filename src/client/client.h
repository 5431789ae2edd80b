/*
 * client.h - the controller's REST API (/v1, docs/api.md) as typed calls,
 * over util/httpc: one function per endpoint, with the ids, names, filters
 * and query options as parameters (escaped and put together here), and the
 * API's error answers turned into one line.
 *
 * A struct client holds a resolved base URL and token (where they come from
 * is the caller's business) and one HTTP connection; it is used by one
 * thread at a time.
 *
 * Ownership: bodies are jansson values. A `json_t **ret` receives a new
 * reference the caller json_decref's (set only on success); a `const json_t
 * *` body is borrowed. Strings are borrowed for the length of the call.
 *
 * Errors: 0, or a negative GPO_* code with one line in the caller's buffer
 * (err, errlen; may be NULL/0):
 *   GPO_EAPI          the server answered an error: "STATUS CODE: MESSAGE"
 *                     from the API's error object ("404 not_found: no job
 *                     7"), else the status and the first line of the body;
 *                     or a 2xx answer that is not JSON; a follower's 503
 *                     (no controller of the URL's list leads) names the
 *                     address: "503 from http://b:8080, a follower: no
 *                     leader yet (every controller in the list ...)"
 *   GPO_ECONNREFUSED  no answer (refused, timed out, TLS): "no answer: " and
 *                     the HTTP client's line
 *   GPO_ENAMETOOLONG  a name or value too long for a request's path; nothing
 *                     was sent
 *   GPO_EINVAL        a bad argument (a URL, a token, an idempotency key)
 *   GPO_ENOMEM
 * c->status is the status of the last answer (0: none came), also after
 * GPO_EAPI, for callers that act on one (404: absent; 409: busy). Nothing
 * here prints or sleeps.
 */
#ifndef GPUORCH_CLIENT_CLIENT_H
#define GPUORCH_CLIENT_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "util/httpc.h"
#include "base/err.h"

#define CLIENT_ERR_MAX         1024   /* a buffer that holds any one-line message here */
#define CLIENT_CALL_TIMEOUT_MS 30000L /* a whole call; log streams have none */
#define CLIENT_PATH_MAX        4096   /* a request's path and query */

struct client {
    char url[HTTPC_URL_MAX]; /* the server's base URL (or list of them), as given */
    struct httpc *http;
    long status; /* the status of the last answer; 0: none came */
};

/* Binds c to `url` ("http://host:port", or several controllers' with
 * commas: util/httpc.h) and `token` (NULL: none); both
 * copied. 0; GPO_EINVAL (a URL that is not http:// or https://, too long,
 * a token with a CR or LF); GPO_ENOMEM. Release with client_release, also
 * after a failure. */
int client_init(struct client *c, const char *url, const char *token, char *err, size_t errlen);
void client_release(struct client *c);

/*
 * METHOD path (query included, already escaped) with `body` as JSON (NULL:
 * none). A 2xx answer: 0 and *ret (NULL for an empty body; ret may be
 * NULL). The generic call under every function below, for routes they do
 * not cover.
 */
int client_call(struct client *c, const char *method, const char *path, const json_t *body,
                json_t **ret, char *err, size_t errlen);

/* "STATUS CODE: MESSAGE" for an error answer's body (len bytes; borrowed),
 * as client_call writes it, and GPO_EAPI. */
int client_api_error(long status, const char *body, size_t len, char *err, size_t errlen);

/* ---- jobs ------------------------------------------------------------------ */

#define CLIENT_JOB_STATE_MAP(X)                                                                    \
    X(PENDING, "PENDING")                                                                          \
    X(RUNNING, "RUNNING")                                                                          \
    X(COMPLETED, "COMPLETED")                                                                      \
    X(FAILED, "FAILED")                                                                            \
    X(CANCELLED, "CANCELLED")                                                                      \
    X(TIMEOUT, "TIMEOUT")                                                                          \
    X(PREEMPTED, "PREEMPTED")                                                                      \
    X(NODE_FAIL, "NODE_FAIL")

enum client_job_state {
#define CLIENT_JOB_STATE_ENUM(name, text) CLIENT_JOB_##name,
    CLIENT_JOB_STATE_MAP(CLIENT_JOB_STATE_ENUM)
#undef CLIENT_JOB_STATE_ENUM
        CLIENT_JOB_STATE_COUNT
};

/* The state's name in the API ("PENDING"); "?" out of range. */
const char *client_job_state_name(enum client_job_state s);

/* Which jobs GET /v1/jobs selects. */
struct client_jobs_filter {
    unsigned states;  /* 1 << enum client_job_state bits; 0: every state */
    const char *team; /* NULL: any */
    const char *user; /* NULL: any */
};

/* POST /v1/jobs: `spec` is the submission; `idempotency_key` (NULL: none)
 * goes in the Idempotency-Key header (GPO_EINVAL for one the header cannot
 * carry). *ret: the job the API answered. */
int client_jobs_submit(struct client *c, const json_t *spec, const char *idempotency_key,
                       json_t **ret, char *err, size_t errlen);

/* Every job the filter selects, page after page of GET /v1/jobs, appended
 * to the array `all` (borrowed; it keeps what came before an error). */
int client_jobs_list(struct client *c, const struct client_jobs_filter *f, json_t *all, char *err,
                     size_t errlen);

/* GET /v1/jobs/ID. */
int client_jobs_get(struct client *c, int64_t id, json_t **ret, char *err, size_t errlen);

/* GET /v1/jobs/ID/step (steps.c): what a job step needs to run in the
 * caller's own running job: {"job", "attempt", "key", "nodes", "addrs",
 * "ntasks", "ntasks_per_node", "gpus_per_task"}. */
int client_jobs_step(struct client *c, int64_t id, json_t **ret, char *err, size_t errlen);

/* POST /v1/jobs/ID/cancel. *ret_stopping: true when the job was running and
 * its agent is stopping it (202), false when it ended at once. */
int client_jobs_cancel(struct client *c, int64_t id, bool *ret_stopping, char *err, size_t errlen);

/* scontrol's job actions: POST /v1/jobs/TARGET/hold, /release, /requeue. */
enum client_job_action { CLIENT_JOB_HOLD, CLIENT_JOB_RELEASE, CLIENT_JOB_REQUEUE };

/* Does `action` to TARGET: a job id, "ARRAY_TASK" (41_7), or an array's id
 * for every task of it (borrowed; GPO_EINVAL for one that is not of these
 * shapes). *ret: the API's {"jobs": [...]}, the jobs changed (caller
 * json_decref's). */
int client_jobs_action(struct client *c, const char *target, enum client_job_action action,
                       json_t **ret, char *err, size_t errlen);

/* PATCH /v1/jobs/TARGET with `fields` (borrowed: time_limit_s, priority,
 * dependencies); TARGET and *ret as for client_jobs_action. */
int client_jobs_update(struct client *c, const char *target, const json_t *fields, json_t **ret,
                       char *err, size_t errlen);

/* What GET /v1/jobs/ID/logs reads. */
struct client_logs_query {
    int64_t attempt;    /* 0: the current or the last */
    int64_t rank;       /* -1: the default (0) */
    bool stderr_stream; /* stderr rather than stdout */
    bool follow;        /* until the attempt ends */
};

/* Receives log text as it arrives; returns 0 to go on, non-zero to stop. */
typedef int (*client_write_fn)(const void *data, size_t len, void *ctx);

/*
 * Streams a job's log to `write` (no overall timeout: a follow stream lasts
 * as long as the attempt). An error answer is told apart from log text that
 * merely begins like one by its status, read at the end: 0 when the log
 * ended; GPO_EAPI for an error answer (its text was not passed on);
 * GPO_ECANCELED when `write` asked to stop; else the HTTP client's code and
 * line.
 */
int client_jobs_logs(struct client *c, int64_t id, const struct client_logs_query *q,
                     client_write_fn write, void *ctx, char *err, size_t errlen);

/* ---- accounting: jobs that ended too ----------------------------------------- */

/* Which jobs GET /v1/accounting/jobs selects; NULL members and 0 states
 * select everything. */
struct client_history_query {
    unsigned states;  /* 1 << enum client_job_state bits */
    const char *jobs; /* "41,42_7": jobs, arrays' tasks, one task */
    const char *team, *user;
    const char *since, *until; /* RFC 3339: jobs in the system during [since, until] */
};

/* Every job the query selects, each with its "attempts", page after page,
 * appended to the array `all` (borrowed; it keeps what came before an
 * error). */
int client_jobs_history(struct client *c, const struct client_history_query *q, json_t *all,
                        char *err, size_t errlen);

/* ---- nodes ------------------------------------------------------------------- */

/* GET /v1/nodes: the answer ({"nodes": [...]}). */
int client_nodes_list(struct client *c, json_t **ret, char *err, size_t errlen);
/* POST /v1/nodes/NAME/drain and /resume: *ret is the node. */
int client_nodes_drain(struct client *c, const char *name, json_t **ret, char *err, size_t errlen);
int client_nodes_resume(struct client *c, const char *name, json_t **ret, char *err, size_t errlen);
/* DELETE /v1/nodes/NAME (admin): the node's record goes; 409 (GPO_EAPI with
 * the message) while an attempt holds its GPUs. */
int client_nodes_delete(struct client *c, const char *name, char *err, size_t errlen);
/* PUT /v1/nodes/NAME/mig (admin) with {"mig": mig} (borrowed; NULL: null,
 * back to the node's pool's setting; docs/mig.md): *ret (may be NULL) the
 * node as the listing shows it. */
int client_nodes_mig(struct client *c, const char *name, const json_t *mig, json_t **ret, char *err,
                     size_t errlen);

/* ---- configuration: /v1/KIND and /v1/KIND/NAME ---------------------------------- */

#define CLIENT_KIND_MAP(X)                                                                         \
    X(POOLS, "pools")                                                                              \
    X(PRIORITY_CLASSES, "priority-classes")                                                        \
    X(TEAMS, "teams")                                                                              \
    X(PRICES, "prices")                                                                            \
    X(USERS, "users")                                                                              \
    X(SERVICES, "services")                                                                        \
    X(SETTINGS, "settings")

/* What configuration an object is; users have the same four routes; the
 * cluster's settings are one object (GET and PUT /v1/settings: name NULL). */
enum client_kind {
#define CLIENT_KIND_ENUM(name, path) CLIENT_KIND_##name,
    CLIENT_KIND_MAP(CLIENT_KIND_ENUM)
#undef CLIENT_KIND_ENUM
        CLIENT_KIND_COUNT
};

/* The kind's path segment ("priority-classes"); "?" out of range. */
const char *client_kind_path(enum client_kind k);

/* GET /v1/KIND/NAME (NAME NULL: /v1/KIND): the object (GPO_EAPI with
 * c->status 404 when absent). */
int client_config_get(struct client *c, enum client_kind k, const char *name, json_t **ret,
                      char *err, size_t errlen);
/* PUT /v1/KIND/NAME with `obj`; *ret (may be NULL) the stored object. */
int client_config_put(struct client *c, enum client_kind k, const char *name, const json_t *obj,
                      json_t **ret, char *err, size_t errlen);
/* DELETE /v1/KIND/NAME. */
int client_config_delete(struct client *c, enum client_kind k, const char *name, char *err,
                         size_t errlen);

/* POST /v1/users/NAME/tokens?label=LABEL (NULL: no label): *ret holds the
 * new token, shown once. */
int client_users_token_issue(struct client *c, const char *user, const char *label, json_t **ret,
                             char *err, size_t errlen);

/* GET /v1/whoami: the token's user. */
int client_whoami(struct client *c, json_t **ret, char *err, size_t errlen);

/* ---- services: /v1/services and /v1/services/NAME ------------------------------- */

/* PUT /v1/services/NAME with `spec` (borrowed): creates or replaces the
 * service; c->status is 201 for a new one, 200 for a replaced one; *ret (may
 * be NULL) the stored service. A spec the API refuses: GPO_EAPI, its message
 * naming the field. */
int client_services_put(struct client *c, const char *name, const json_t *spec, json_t **ret,
                        char *err, size_t errlen);
/* GET /v1/services: {"services": [...]}, each a spec with its status. */
int client_services_list(struct client *c, json_t **ret, char *err, size_t errlen);
/* GET /v1/services/NAME: the spec, generation, user and status (GPO_EAPI
 * with c->status 404 when absent). */
int client_services_get(struct client *c, const char *name, json_t **ret, char *err, size_t errlen);
/* DELETE /v1/services/NAME: its replicas drain and stop, then it is gone. */
int client_services_delete(struct client *c, const char *name, char *err, size_t errlen);

/* ---- cost and metrics ------------------------------------------------------------- */

#define CLIENT_COST_BY_MAP(X)                                                                      \
    X(TEAM, "team")                                                                                \
    X(PROJECT, "project")                                                                          \
    X(MODEL, "model")                                                                              \
    X(USER, "user")                                                                                \
    X(JOB, "job")

enum client_cost_by {
#define CLIENT_COST_BY_ENUM(name, text) CLIENT_COST_BY_##name,
    CLIENT_COST_BY_MAP(CLIENT_COST_BY_ENUM)
#undef CLIENT_COST_BY_ENUM
        CLIENT_COST_BY_COUNT
};

/* The grouping's name ("project"); "?" out of range. */
const char *client_cost_by_name(enum client_cost_by by);
/* The grouping named `name`: 0 and *ret, or GPO_ENOENT. */
int client_cost_by_parse(const char *name, enum client_cost_by *ret);

/* What GET /v1/cost reports. Times as the API reads them (RFC 3339, a
 * date, "now", -7d); NULL: the server's default (this month). */
struct client_cost_query {
    enum client_cost_by by;
    const char *since, *until;
};

/* GET /v1/cost: the report. */
int client_cost(struct client *c, const struct client_cost_query *q, json_t **ret, char *err,
                size_t errlen);
/* GET /v1/budgets: every team's budget for the month (a member: theirs). */
int client_budgets(struct client *c, json_t **ret, char *err, size_t errlen);

/* What GET /v1/metrics/series returns; NULL members are left out (the
 * server's defaults). */
struct client_series_query {
    const char *metric; /* required: gpu_util, mem_used, power, temperature, queue_length */
    const char *by;     /* node, team, gpu, job (queue_length: team, priority, total) */
    const char *key;    /* one group of `by` */
    const char *since, *until, *step;
};

/* GET /v1/metrics/series: the series (GPO_EINVAL without a metric). */
int client_metrics_series(struct client *c, const struct client_series_query *q, json_t **ret,
                          char *err, size_t errlen);

#endif

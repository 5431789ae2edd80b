/*
 * api.h - the controller's HTTP handlers: each decodes its request, calls
 * the subsystem that owns what it touches, and renders the answer. Each
 * file of src/server/api exports its own route table (a row's `arg` tells a
 * shared handler what it serves); api_routes_build joins them for the HTTP
 * server. Handlers get the server object as their context.
 *
 * A write is planned by its subsystem under the state lock, committed with
 * the request suspended, and applied and answered in the store's completion
 * (srv.h: write-through).
 *
 * Owns nothing but the log proxy's workers (struct server's logs_*,
 * atomics; each proxy's buffer has its own mutex). Lock: a handler takes
 * the state lock for what it reads or plans and releases it before it
 * answers or commits; handlers run on the HTTP polling thread.
 */
#ifndef GPUORCH_SERVER_API_API_H
#define GPUORCH_SERVER_API_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "http/http.h"
#include "proto/proto.h"
#include "server/auth/auth.h"
#include "server/jobs/jobs.h"
#include "server/nodes/nodes.h"

struct server;
struct config_write;

/* Route flags: admins only; node agents (the join token) only; admins and
 * users of role "metrics" only (every other route refuses a metrics user). */
#define API_ROUTE_ADMIN   HTTP_ROUTE_USER_FLAG(0)
#define API_ROUTE_AGENT   HTTP_ROUTE_USER_FLAG(1)
#define API_ROUTE_METRICS HTTP_ROUTE_USER_FLAG(2)

/* One file's routes. */
struct api_routes {
    const struct http_route *routes;
    size_t n;
};

extern const struct api_routes api_web_routes, api_misc_routes, api_jobs_routes,
    api_jobs_ctl_routes, api_jobs_history_routes, api_logs_routes, api_config_routes,
    api_users_routes, api_nodes_routes, api_node_list_routes, api_cost_routes, api_metrics_routes,
    api_steps_routes, api_router_routes, api_services_routes;

/* steps.c: job j's step credential and its ranks' step servers (proto.h's
 * proto_step) into *ret, under the lock: 0 (ret->key NULL when some rank's
 * agent serves no steps: no log port), or GPO_ENOMEM. Release with
 * api_step_release. */
int api_step_of(struct server *s, const struct job *j, struct proto_step *ret);
void api_step_release(struct proto_step *st);

/* Every route, in the order they are matched: a new array (caller frees) of
 * *ret_n rows, or NULL when out of memory. */
struct http_route *api_routes_build(size_t *ret_n);

/* http_authorize_fn (ctx: the server): a bearer token of a known user, and
 * an admin for API_ROUTE_ADMIN routes, or the join token for
 * API_ROUTE_AGENT; answers 401/403 itself otherwise. */
bool api_authorize(struct http_request *req, unsigned route_flags, void *ctx);
/* http_admit_fn (ctx: the server): every request while the controller
 * leads; once it does not, all but its health get 503 (lead_admit). */
bool api_admit(struct http_request *req, void *ctx);
/* The user the request was authorized as (valid in the handler; NULL on an
 * agent route). */
const struct auth_user *api_request_user(struct http_request *req);

/*
 * Private data (cluster.h: private_data). Under the state lock (the
 * settings are the configuration's); for a request that was authorized as a
 * user. api_private: whether the cluster keeps `what` (one enum
 * cluster_private bit) of other teams from members. api_visible_team: the
 * one team whose `what` the request's user sees, NULL for every team (an
 * admin, or `what` open). api_user_sees: whether it sees `what` of `team`
 * (NULL: of no team).
 */
bool api_private(const struct server *s, enum cluster_private what);
const char *api_visible_team(const struct server *s, struct http_request *req,
                             enum cluster_private what);
bool api_user_sees(const struct server *s, struct http_request *req, enum cluster_private what,
                   const char *team);

/* nodes_answer_fn (ctx: the server): what the controller wants of node rt
 * now, as its agent's long-poll reads it. */
json_t *api_node_answer(void *ctx, const struct node_rt *rt);

/* ---- shared by the handlers ------------------------------------------------- */

/* The request's JSON body (a copy: caller json_decref's) with "name" set to
 * the path's `name`; a body may repeat the name, not contradict it. NULL
 * when it answered (400, 500) itself. */
json_t *api_body_named(struct http_request *req, const char *name);

/* Answers a subsystem's error code with its HTTP status: GPO_EINVAL,
 * GPO_ERANGE and GPO_E2BIG 400 invalid_field, GPO_ENOENT 404 not_found, GPO_ESTATE 409 conflict,
 * GPO_EBUSY 409 conflict with Retry-After: 1, GPO_ENOMEM 500 internal, a store code 503; `msg` is
 * the message. Returns 0 (a handler's return). */
int api_error(struct http_request *req, int code, const char *msg);

/* Suspends req and commits b (taken) with `done` as its completion. When
 * the request cannot be suspended (the server is stopping) or the store is
 * closing, it answers 503 itself and calls abort(ctx) instead, on this
 * thread and without the lock, so that exactly one of the two ends ctx. */
void api_commit(struct server *s, struct http_request *req, struct store_batch *b,
                store_done_fn done, void (*abort)(void *ctx), void *ctx);

/* A planned configuration write that will not be committed: dropped under
 * the state lock (taken here), b (may be NULL) freed. */
void api_config_write_drop(struct server *s, struct config_write *w, struct store_batch *b);

/* Commits a planned configuration write (rc 0: w and b from a
 * config_*_plan; `label` names the kind in messages) and answers 201, 200
 * or 204 when it completes; or answers rc's error with `err`. Returns 0. */
int api_config_write_commit(struct server *s, struct http_request *req, const char *label, int rc,
                            struct config_write *w, struct store_batch *b, const char *err);

/* The job as the API shows it at now_ms: a new object, or NULL when out of
 * memory. "priority" is the class it runs under (its spec's, else the
 * cluster's default class, as the scheduler resolves it); its current
 * attempt's "gpu_shares" the GPUs it holds in GPU shares (attempt_gpu_milli).
 * Under the state lock. */
json_t *api_job_json(const struct server *s, const struct job *j, int64_t now_ms);

/* The job as the request's user sees it: another team's job (readable under
 * private_data without "jobs") without its utilization, idle flag and cost
 * while "usage" stays private. A new object, or NULL; under the lock. */
json_t *api_job_shown(struct server *s, struct http_request *req, const struct job *j,
                      int64_t now_ms);

/* Every attempt of job `id` from the store's attempt rows, as GET
 * /v1/jobs/ID shows them: a new array, or NULL (out of memory, or the store
 * could not read the job). Not under the lock. */
json_t *api_job_attempts(struct server *s, int64_t id);

#endif

/*
 * steps.c - job steps, the controller's side: an attempt's step credential
 * and its ranks' step servers, for the agents' assignments (nodes.c) and
 * for the job's own user (`gpuorch run` and `gpuorch alloc` from outside
 * the job):
 *
 *   GET /v1/jobs/{id}/step   200 {"job", "attempt", "key", "nodes": [names in
 *                            rank order], "addrs": ["host:port", ...],
 *                            "ntasks", "ntasks_per_node", "gpus_per_task"}
 *
 * Only the user who submitted the job gets it, admins included in the
 * refusal (403): the credential starts processes as the job's Unix user. 409
 * while the job has no running attempt, or one being killed.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api.h"
#include "server/srv.h"
#include "base/banned.h"

void api_step_release(struct proto_step *st)
{
    free(st->key);
    for (size_t k = 0; k < st->naddrs; k++)
        free(st->addrs[k]);
    free(st->addrs);
    memset(st, 0, sizeof(*st));
}

int api_step_of(struct server *s, const struct job *j, struct proto_step *ret)
{
    for (size_t k = 0; k < j->att.nparts; k++) {
        const struct cluster_node *n = cluster_node_get(&s->cluster, j->att.parts[k].node);
        if (!n || !n->log_port)
            return 0;
    }
    struct proto_step st = {.key = malloc(AUTH_STEP_KEY_LEN + 1),
                            .addrs = calloc(j->att.nparts + 1, sizeof(*st.addrs))};
    int rc = st.key && st.addrs ? 0 : GPO_ENOMEM;
    if (!rc)
        auth_step_key(&s->auth, j->id, j->att.n, st.key);
    for (size_t k = 0; !rc && k < j->att.nparts; k++) {
        const struct cluster_node *n = cluster_node_get(&s->cluster, j->att.parts[k].node);
        const char *host = n->addr ? n->addr : n->name;
        size_t len = strlen(host) + 16;
        if (!(st.addrs[k] = malloc(len))) {
            rc = GPO_ENOMEM;
            break;
        }
        snprintf(st.addrs[k], len, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host,
                 (unsigned)n->log_port);
        st.naddrs++;
    }
    if (rc) {
        api_step_release(&st);
        return rc;
    }
    *ret = st;
    return 0;
}

static bool parse_id(const char *v, int64_t *ret)
{
    char *end;
    if (!v || !*v || *v == '-' || *v == '+' || strlen(v) > 19)
        return false;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || x < 1)
        return false;
    *ret = x;
    return true;
}

/* The answer for job j's running attempt; under the lock. NULL: out of
 * memory. */
static json_t *step_json(struct server *s, const struct job *j, const struct proto_step *st)
{
    json_t *nodes = json_array(), *addrs = json_array();
    for (size_t k = 0; nodes && addrs && k < j->att.nparts; k++) {
        if (json_array_append_new(nodes, json_string(j->att.parts[k].node)) ||
            json_array_append_new(addrs, json_string(st->addrs[k]))) {
            json_decref(nodes);
            nodes = NULL;
        }
    }
    (void)s;
    json_t *o =
        nodes && addrs
            ? json_pack("{s:I, s:I, s:s, s:O, s:O, s:i, s:i, s:i}", "job", (json_int_t)j->id,
                        "attempt", (json_int_t)j->att.n, "key", st->key, "nodes", nodes, "addrs",
                        addrs, "ntasks", j->spec.ntasks, "ntasks_per_node", j->spec.ntasks_per_node,
                        "gpus_per_task", j->spec.gpus_per_task)
            : NULL;
    json_decref(nodes);
    json_decref(addrs);
    return o;
}

static int job_step(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    int64_t id;
    if (!parse_id(http_request_param(req, "id"), &id))
        return http_request_error(req, 400, "invalid_path", "job id: expected a positive integer");
    const struct auth_user *u = api_request_user(req);
    pthread_mutex_lock(&s->lock);
    struct job *j = jobs_find(&s->jobs, id);
    int status = !j                              ? 404
                 : strcmp(j->user, u->name) != 0 ? 403
                 : !j->att.n || j->att.kill      ? 409
                                                 : 200;
    struct proto_step st = {0};
    int rc = status == 200 ? api_step_of(s, j, &st) : 0;
    json_t *o = status == 200 && !rc && st.key ? step_json(s, j, &st) : NULL;
    pthread_mutex_unlock(&s->lock);
    bool none = status == 200 && !rc && !st.key;
    api_step_release(&st);
    if (status == 404)
        return http_request_error(req, 404, "not_found", "no job %" PRId64, id);
    if (status == 403)
        return http_request_error(req, 403, "forbidden",
                                  "job %" PRId64 " is another user's: its steps are its own", id);
    if (status == 409)
        return http_request_error(req, 409, "conflict", "job %" PRId64 " is not running", id);
    if (none)
        return http_request_error(req, 409, "conflict",
                                  "job %" PRId64 "'s nodes serve no steps (an agent without a "
                                  "log port)",
                                  id);
    if (!o)
        return http_request_error(req, 500, "internal", "out of memory");
    return http_request_respond_json(req, 200, o);
}

static const struct http_route routes[] = {
    {"GET", "/v1/jobs/{id}/step", job_step, 0, NULL},
};
const struct api_routes api_steps_routes = {routes, sizeof(routes) / sizeof(routes[0])};

/*
 * jobs_history.c - GET /v1/accounting/jobs: jobs in any state, ended ones
 * included, with every attempt (its start, end, exit code, nodes) from the
 * store, selected as sacct selects them: by id (an array's id selects its
 * tasks, "A_I" one task), user, team, state and a time window the job was
 * in the system during. What `gpuorch history` reads; after a restart the
 * controller has loaded every job from the store, so the history stays.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"
#include "server/api/api.h"
#include "server/srv.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define LIST_DEFAULT 100
#define LIST_MAX     1000
#define IDS_MAX      100 /* job ids in one `job` parameter */
#define TEXT_MAX     128 /* bytes of `q` */

/* One `job` selector: a job or an array's tasks (index -1), or one task. */
struct job_sel {
    int64_t id, index;
};

struct history_query {
    bool states[JOB_NSTATES];
    bool any_state;
    const char *team, *user;
    const char *text; /* q: an id, a user or part of a name; NULL: none */
    struct job_sel sel[IDS_MAX];
    size_t nsel;
    int64_t since_ms, until_ms; /* INT64_MIN, INT64_MAX: open */
    int64_t after, limit;       /* after: -1, none */
    bool desc;                  /* order=desc: newest first, `after` the ids below it */
};

static bool parse_count(const char *text, int64_t min, int64_t max, int64_t *ret)
{
    if (!text || text[0] < '0' || text[0] > '9' || strlen(text) > 19)
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || v < min || v > max)
        return false;
    *ret = v;
    return true;
}

/* "41,42_7": job 41 (or array 41's tasks) and task 7 of array 42. */
static bool parse_jobs(const char *value, struct history_query *q)
{
    char buf[2048];
    if (!value || strlen(value) >= sizeof(buf))
        return false;
    snprintf(buf, sizeof(buf), "%s", value);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (q->nsel == IDS_MAX)
            return false;
        struct job_sel *s = &q->sel[q->nsel++];
        char *us = strchr(t, '_');
        s->index = -1;
        if (us) {
            *us = '\0';
            if (!parse_count(us + 1, 0, UINT32_MAX, &s->index))
                return false;
        }
        if (!parse_count(t, 1, INT64_MAX, &s->id))
            return false;
    }
    return q->nsel > 0;
}

static bool parse_states(const char *value, struct history_query *q)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", value ? value : "");
    char *save = NULL;
    q->any_state = false;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int st = job_state_parse(t);
        if (st < 0)
            return false;
        q->states[st] = true;
    }
    return true;
}

/* "now", RFC 3339 or a date (midnight UTC). */
static bool parse_when(const char *v, int64_t now_ms, int64_t *ret)
{
    if (v && strcmp(v, "now") == 0) {
        *ret = now_ms;
        return true;
    }
    return timefmt_parse_rfc3339(v, ret) == 0;
}

/* One parameter into q; false once it answered 400. */
static bool query_param(struct http_request *req, const char *name, const char *value,
                        int64_t now_ms, struct history_query *q)
{
    const char *bad = NULL;
    if (strcmp(name, "state") == 0) {
        if (!parse_states(value, q))
            bad = "state: expected job states (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, "
                  "TIMEOUT, PREEMPTED, NODE_FAIL), comma-separated";
    } else if (strcmp(name, "job") == 0) {
        if (!parse_jobs(value, q))
            bad = "job: expected 1 to 100 job ids (ID or ARRAY_INDEX), comma-separated";
    } else if (strcmp(name, "team") == 0 || strcmp(name, "user") == 0) {
        if (value && *value)
            *(name[0] == 't' ? &q->team : &q->user) = value;
    } else if (strcmp(name, "since") == 0 || strcmp(name, "until") == 0) {
        if (!parse_when(value, now_ms, name[0] == 's' ? &q->since_ms : &q->until_ms))
            bad = name[0] == 's' ? "since: expected RFC 3339, a date (YYYY-MM-DD) or \"now\""
                                 : "until: expected RFC 3339, a date (YYYY-MM-DD) or \"now\"";
    } else if (strcmp(name, "q") == 0) {
        if (!value || !*value || strlen(value) > TEXT_MAX)
            bad = "q: expected 1 to 128 bytes: a job id, a user or part of a job's name";
        q->text = value;
    } else if (strcmp(name, "order") == 0) {
        if (!value || (strcmp(value, "asc") != 0 && strcmp(value, "desc") != 0))
            bad = "order: expected asc (oldest first, the default) or desc (newest first)";
        q->desc = value && strcmp(value, "desc") == 0;
    } else if (strcmp(name, "after") == 0) {
        if (!parse_count(value, 0, INT64_MAX, &q->after))
            bad = "after: expected a job id (an integer >= 0)";
    } else if (strcmp(name, "limit") == 0) {
        if (!parse_count(value, 1, LIST_MAX, &q->limit))
            bad = "limit: expected 1 to 1000";
    } else {
        http_request_error(req, 400, "invalid_query",
                           "unknown query parameter '%.40s' (job, state, team, user, q, "
                           "since, until, order, after, limit)",
                           name);
        return false;
    }
    if (bad)
        http_request_error(req, 400, "invalid_query", "%s", bad);
    return !bad;
}

static bool query_parse(struct http_request *req, int64_t now_ms, struct history_query *q)
{
    *q = (struct history_query){.any_state = true,
                                .since_ms = INT64_MIN,
                                .until_ms = INT64_MAX,
                                .after = -1,
                                .limit = LIST_DEFAULT};
    size_t n = http_request_query_count(req);
    for (size_t i = 0; i < n; i++) {
        const char *name, *value;
        http_request_query_at(req, i, &name, &value);
        if (!query_param(req, name, value, now_ms, q))
            return false;
    }
    if (q->since_ms != INT64_MIN && q->until_ms != INT64_MAX && q->since_ms > q->until_ms) {
        http_request_error(req, 400, "invalid_query", "since: must not be after until");
        return false;
    }
    return true;
}

/* Whether `hay` contains `needle`, ASCII letter case ignored. */
static bool contains_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return true;
    return n == 0;
}

/* q: the job's id ("42", or "41_7" for an array's task), its user, or part of its name. */
static bool text_matches(const char *text, const struct job *j)
{
    char id[48];
    snprintf(id, sizeof(id), "%" PRId64, j->id);
    if (strcmp(text, id) == 0 || strcasecmp(text, j->user) == 0)
        return true;
    if (j->array_id != STORE_NULL) {
        snprintf(id, sizeof(id), "%" PRId64 "_%" PRId64, j->array_id, j->array_index);
        if (strcmp(text, id) == 0)
            return true;
    }
    return j->spec.name && contains_nocase(j->spec.name, text);
}

static bool selected(const struct history_query *q, const struct job *j)
{
    if (q->text && !text_matches(q->text, j))
        return false;
    if (q->nsel) {
        bool hit = false;
        for (size_t k = 0; k < q->nsel && !hit; k++) {
            const struct job_sel *s = &q->sel[k];
            hit = s->index < 0 ? j->id == s->id || j->array_id == s->id
                               : j->array_id == s->id && j->array_index == s->index;
        }
        if (!hit)
            return false;
    }
    if ((q->team && strcmp(q->team, j->team) != 0) || (q->user && strcmp(q->user, j->user) != 0) ||
        (!q->any_state && !q->states[j->state]))
        return false;
    /* In the system during the window: submitted before its end, and not
     * ended (its last update) before its start. */
    if (j->submit_ms > q->until_ms)
        return false;
    return !job_state_final(j->state) || j->updated_ms >= q->since_ms;
}

/* Adds each job's attempts from the store (outside the lock). */
static int with_attempts(struct server *s, json_t *list)
{
    for (size_t k = 0; k < json_array_size(list); k++) {
        json_t *o = json_array_get(list, k);
        json_t *atts = api_job_attempts(s, json_integer_value(json_object_get(o, "id")));
        if (!atts || json_object_set_new(o, "attempts", atts))
            return GPO_EIO;
    }
    return 0;
}

static int history(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    const struct auth_user *u = api_request_user(req);
    struct history_query q;
    if (!query_parse(req, srv_now_ms(s), &q))
        return 0;
    json_t *list = json_array(), *out = json_object();
    int rc = list && out ? 0 : GPO_ENOMEM;
    int64_t last = 0;
    bool more = false, may = true;
    pthread_mutex_lock(&s->lock);
    may = !q.team || api_user_sees(s, req, CLUSTER_PRIVATE_JOBS, q.team);
    int64_t now = srv_now_ms(s);
    /* Keyset pages in id order: after the `after` id (below it, newest first). */
    size_t first = q.desc ? (q.after >= 0 ? jobs_index(&s->jobs, q.after) : s->jobs.n)
                          : jobs_index(&s->jobs, (q.after >= 0 ? q.after : 0) + 1);
    for (size_t i = 0; may && !rc && i < (q.desc ? first : s->jobs.n - first); i++) {
        const struct job *j = s->jobs.v[q.desc ? first - 1 - i : first + i];
        if (!api_user_sees(s, req, CLUSTER_PRIVATE_JOBS, j->team) || !selected(&q, j))
            continue;
        if ((int64_t)json_array_size(list) == q.limit) {
            more = true;
            break;
        }
        json_t *o = api_job_shown(s, req, j, now);
        rc = o && json_array_append_new(list, o) == 0 ? 0 : GPO_ENOMEM;
        last = j->id;
    }
    pthread_mutex_unlock(&s->lock);
    if (!rc && may)
        rc = with_attempts(s, list);
    if (rc || !may) {
        json_decref(list);
        json_decref(out);
        if (!may)
            return http_request_error(req, 403, "forbidden", "user '%s' may not list another team",
                                      u->name);
        return rc == GPO_ENOMEM
                   ? http_request_error(req, 500, "internal", "out of memory")
                   : http_request_error(req, 503, "store", "the jobs' attempts could not be read");
    }
    json_object_set_new(out, "jobs", list);
    json_object_set_new(out, "next_after", more ? json_integer(last) : json_null());
    return http_request_respond_json(req, 200, out);
}

static const struct http_route routes[] = {
    {"GET", "/v1/accounting/jobs", history, 0, NULL},
};
const struct api_routes api_jobs_history_routes = {routes, sizeof(routes) / sizeof(routes[0])};

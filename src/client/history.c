/*
 * history.c - GET /v1/accounting/jobs, every page (client.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "client/client.h"
#include "client/internal.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define PAGE      200    /* jobs per request: each reads its attempts from the store */
#define PAGES_MAX 100000 /* a guard against a server that pages forever */

/* "PENDING,RUNNING" for the state bits into buf; "" for none. */
static void states_text(unsigned states, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int k = 0; k < CLIENT_JOB_STATE_COUNT && at < len; k++)
        if (states & (1u << k))
            at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? "," : "",
                                   client_job_state_name((enum client_job_state)k));
}

static int history_page(struct client *c, const struct client_history_query *q, json_int_t after,
                        json_t *all, json_int_t *ret_next, char *err, size_t errlen)
{
    char states[160], limit[24], from[32];
    struct client_path p;
    int rc = 0;
    states_text(q->states, states, sizeof(states));
    snprintf(limit, sizeof(limit), "%d", PAGE);
    snprintf(from, sizeof(from), "%" JSON_INTEGER_FORMAT, after);
    client_path_init(&p, "/v1/accounting/jobs");
    client_path_param(&p, "job", q->jobs);
    client_path_param(&p, "state", states[0] ? states : NULL);
    client_path_param(&p, "team", q->team);
    client_path_param(&p, "user", q->user);
    client_path_param(&p, "since", q->since);
    client_path_param(&p, "until", q->until);
    client_path_param(&p, "limit", limit);
    client_path_param(&p, "after", from);
    const char *path = client_path_done(&p, &rc, err, errlen);
    json_t *body = NULL;
    if (!path || (rc = client_call(c, "GET", path, NULL, &body, err, errlen)) != 0)
        return rc;
    json_t *next = json_object_get(body, "next_after");
    if (json_array_extend(all, json_object_get(body, "jobs")) != 0) {
        json_decref(body);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    *ret_next =
        json_is_integer(next) && json_integer_value(next) > after ? json_integer_value(next) : 0;
    json_decref(body);
    return 0;
}

int client_jobs_history(struct client *c, const struct client_history_query *q, json_t *all,
                        char *err, size_t errlen)
{
    json_int_t after = 0;
    for (int page = 0; page < PAGES_MAX; page++) {
        json_int_t next = 0;
        int rc = history_page(c, q, after, all, &next, err, errlen);
        if (rc || next == 0)
            return rc;
        after = next;
    }
    return errbuf_set(err, errlen, GPO_EAPI, "more than %d pages of jobs", PAGES_MAX);
}

/*
 * history.c - GET /v1/accounting/jobs, every page (client.h).
 */

#include "client/client.h"
#include "client/internal.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define PAGE 200 /* jobs per request: each reads its attempts from the store */

int client_jobs_history(struct client *c, const struct client_history_query *q, json_t *all,
                        char *err, size_t errlen)
{
    char states[160];
    struct client_path p;
    int rc = 0;
    client_states_text(q->states, states, sizeof(states));
    client_path_init(&p, "/v1/accounting/jobs");
    client_path_param(&p, "job", q->jobs);
    client_path_param(&p, "state", states[0] ? states : NULL);
    client_path_param(&p, "team", q->team);
    client_path_param(&p, "user", q->user);
    client_path_param(&p, "since", q->since);
    client_path_param(&p, "until", q->until);
    const char *query = client_path_done(&p, &rc, err, errlen);
    return query ? client_jobs_pages(c, query, PAGE, all, err, errlen) : rc;
}

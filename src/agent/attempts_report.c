/*
 * attempts_report.c - the node agent's reports of its attempts to the
 * controller: RUNNING (a replica's with its endpoint) and the final one,
 * encoded under the table's lock and sent without it (attempts_int.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "agent/attempts_int.h"
#include "base/banned.h"

struct attempts_owed attempts_owe(const struct att *a, const struct proto_report *r, bool final)
{
    json_t *o = NULL;
    char *text = proto_report_encode(r, &o) == 0 ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return (struct attempts_owed){a->job, a->attempt, r->state, text, final, r->endpoint};
}

bool attempts_post(struct attempts *t, struct httpc *c, const struct attempts_owed *o)
{
    char path[256];
    char node[HTTPC_URL_MAX];
    httpc_escape(t->node, node, sizeof(node));
    snprintf(path, sizeof(path), "/v1/nodes/%.180s/attempts/%" PRIu64 "/%" PRIu32, node, o->job,
             o->attempt);
    struct httpc_response r = {0};
    char err[512] = "";
    int rc = httpc_request(c, "POST", path, o->body, strlen(o->body), 10000, &r, err, sizeof(err));
    bool done = false;
    if (rc)
        t->cfg.log("report job %" PRIu64 ".%" PRIu32 ": %s (will retry)", o->job, o->attempt, err);
    else if (r.status == 200)
        done = true;
    else if (r.status == 202) /* a gang rank's COMPLETED, noted until the others end */
        done = false;
    else if (r.status == 409 || r.status == 404)
        done = true, t->cfg.log("report job %" PRIu64 ".%" PRIu32 " %s: controller answered %ld "
                                "(it ended the attempt already): %.200s",
                                o->job, o->attempt, proto_state_name(o->state), r.status, r.body);
    else
        t->cfg.log("report job %" PRIu64 ".%" PRIu32 ": controller answered %ld (will retry): "
                   "%.200s",
                   o->job, o->attempt, r.status, r.body);
    httpc_response_release(&r);
    return done;
}

void attempts_reported(struct attempts *t, const struct attempts_owed *o, bool done, int64_t now,
                       int64_t *next)
{
    struct att *a = attempts_find(t, o->job, o->attempt);
    if (!a)
        return;
    if (!done) {
        a->report_after = now + 1000;
        return;
    }
    if (!o->final) {
        a->running_owed = false;
        if (o->ep.port)
            replica_sent(t->rep, a->job, a->attempt, &o->ep, now);
        if (a->phase == PH_FINAL)
            *next = 0; /* its final report right after */
        return;
    }
    char err[256];
    if (journal_ended(t->cfg.journal, a->job, a->attempt, err, sizeof(err)))
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": journal: %s", a->job, a->attempt, err);
    t->cfg.log("job %" PRIu64 ".%" PRIu32 ": reported %s", a->job, a->attempt,
               proto_state_name(a->final.state));
    bool held = false;
    for (size_t g = 0; g < a->nuuids; g++)
        held |= a->dirty[g];
    a->phase = PH_HELD;
    a->gone = !held;
}

/*
 * report.c - an attempt's report: RUNNING, or how it ended (proto.h).
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/wire.h"
#include "util/errbuf.h"
#include "base/banned.h"

_Static_assert(sizeof(enum proto_state) == sizeof(int), "jsonv stores an enum as an int");

static const char *const states[] = {
#define STATE_NAME(name, text) [PROTO_STATE_##name] = text,
    PROTO_STATE_MAP(STATE_NAME)
#undef STATE_NAME
        NULL};

const char *proto_state_name(enum proto_state state)
{
    return (unsigned)state < ARRAY_LEN(states) - 1 ? states[state] : "unknown";
}

/* The most a metric may be: its thousandths fit an int64_t. */
#define METRIC_MAX 9e15

/* "endpoint" as jsonv fills it: the metric a JSON number, read into
 * thousandths after. */
struct endpoint_wire {
    uint32_t port;
    bool ready;
    double metric;
    enum jsonv_presence metric_p;
    int64_t ready_ms;
};

struct report_wire {
    struct proto_report r;
    struct endpoint_wire ep;
    enum jsonv_presence ep_p;
};

static const struct jsonv_field endpoint_fields[] = {
    WIRE_REQ("port", JSONV_UINT32, struct endpoint_wire, port, 1, 65535),
    WIRE_REQ("ready", JSONV_BOOL, struct endpoint_wire, ready, 0, 0),
    WIRE_OPT("metric", JSONV_DOUBLE, struct endpoint_wire, metric, 0, 0,
             .flags = JSONV_NULLABLE | JSONV_PRESENCE, .dmin = -METRIC_MAX, .dmax = METRIC_MAX,
             .presence_offset = offsetof(struct endpoint_wire, metric_p)),
    WIRE_OPT("ready_ms", JSONV_INT64, struct endpoint_wire, ready_ms, 0, INT64_MAX,
             .flags = JSONV_NULLABLE),
};

static const struct jsonv_field report_fields[] = {
    WIRE_REQ("state", JSONV_ENUM, struct report_wire, r.state, 0, 0, .choices = states),
    WIRE_OPT("exit_code", JSONV_INT64, struct report_wire, r.exit_code, 0, 255),
    WIRE_OPT("signal", JSONV_INT64, struct report_wire, r.signal, 0, PROTO_SIGNAL_MAX),
    WIRE_OPT_LINE("reason", struct report_wire, r.reason, 0, PROTO_REASON_MAX),
    WIRE_OPT("dirty_gpus", JSONV_STRINGS, struct report_wire, r.dirty_gpus, 1, PROTO_UUID_MAX,
             .flags = JSONV_TEXT, .max_items = PROTO_DIRTY_MAX,
             .count_offset = offsetof(struct report_wire, r.ndirty)),
    WIRE_OPT("endpoint", JSONV_OBJECT, struct report_wire, ep, 0, 0, .flags = JSONV_PRESENCE,
             .presence_offset = offsetof(struct report_wire, ep_p), .sub = endpoint_fields,
             .nsub = ARRAY_LEN(endpoint_fields)),
    WIRE_OPT("fenced", JSONV_BOOL, struct report_wire, r.fenced, 0, 0),
};

int proto_report_decode(const json_t *obj, struct proto_report *ret, char *err, size_t errlen)
{
    struct report_wire w = {.r = {.exit_code = PROTO_NONE, .signal = PROTO_NONE},
                            .ep = {.ready_ms = PROTO_NONE}};
    int rc = jsonv_decode(obj, report_fields, ARRAY_LEN(report_fields), &w, err, errlen);
    if (rc)
        return rc;
    if (w.ep_p == JSONV_GIVEN && w.r.state != PROTO_STATE_RUNNING) {
        jsonv_release(report_fields, ARRAY_LEN(report_fields), &w);
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'endpoint': only a RUNNING report has one, not %s",
                          states[w.r.state]);
    }
    if (w.r.fenced && w.r.state != PROTO_STATE_FAILED) {
        jsonv_release(report_fields, ARRAY_LEN(report_fields), &w);
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'fenced': only a FAILED report is fenced, not %s",
                          states[w.r.state]);
    }
    if (w.ep_p == JSONV_GIVEN)
        w.r.endpoint = (struct proto_endpoint){
            .port = w.ep.port,
            .ready = w.ep.ready,
            .metric_milli =
                w.ep.metric_p == JSONV_GIVEN ? (int64_t)llround(w.ep.metric * 1000) : PROTO_NONE,
            .ready_ms = w.ep.ready_ms};
    *ret = w.r;
    return 0;
}

static json_t *endpoint_json(struct wire_enc *e, const struct proto_endpoint *ep)
{
    json_t *o = wire_object(e);
    if (ep->port > 65535 || (ep->ready_ms != PROTO_NONE && ep->ready_ms < 0))
        wire_fail(e, GPO_EINVAL);
    wire_set(e, o, "port", wire_int(e, ep->port));
    wire_set(e, o, "ready", json_boolean(ep->ready));
    json_t *metric =
        ep->metric_milli == PROTO_NONE ? json_null() : json_real((double)ep->metric_milli / 1000.0);
    if (!metric)
        wire_fail(e, GPO_ENOMEM);
    wire_set(e, o, "metric", metric);
    wire_set(e, o, "ready_ms",
             ep->ready_ms == PROTO_NONE ? json_null() : wire_int(e, ep->ready_ms));
    if (e->rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int proto_report_encode(const struct proto_report *m, json_t **ret)
{
    struct wire_enc e = {0};
    json_t *o = wire_object(&e);
    if ((unsigned)m->state >= ARRAY_LEN(states) - 1)
        wire_fail(&e, GPO_EINVAL);
    else
        wire_set(&e, o, "state", wire_str(&e, states[m->state]));
    if (m->exit_code != PROTO_NONE)
        wire_set(&e, o, "exit_code", wire_int(&e, m->exit_code));
    if (m->signal != PROTO_NONE)
        wire_set(&e, o, "signal", wire_int(&e, m->signal));
    if (m->reason)
        wire_set(&e, o, "reason", wire_str(&e, m->reason));
    if (m->ndirty)
        wire_set(&e, o, "dirty_gpus", wire_strs(&e, m->dirty_gpus, m->ndirty));
    if (m->endpoint.port)
        wire_set(&e, o, "endpoint", endpoint_json(&e, &m->endpoint));
    if (m->fenced) /* absent means false */
        wire_set(&e, o, "fenced", json_true());
    return wire_done(&e, o, ret);
}

void proto_report_release(struct proto_report *m)
{
    if (!m)
        return;
    free(m->reason);
    wire_free_strs(m->dirty_gpus, m->ndirty);
    memset(m, 0, sizeof(*m));
}

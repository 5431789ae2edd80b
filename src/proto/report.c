/*
 * report.c - an attempt's report: RUNNING, or how it ended (proto.h).
 */
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

static const struct jsonv_field report_fields[] = {
    WIRE_REQ("state", JSONV_ENUM, struct proto_report, state, 0, 0, .choices = states),
    WIRE_OPT("exit_code", JSONV_INT64, struct proto_report, exit_code, 0, 255),
    WIRE_OPT("signal", JSONV_INT64, struct proto_report, signal, 0, PROTO_SIGNAL_MAX),
    WIRE_OPT_LINE("reason", struct proto_report, reason, 0, PROTO_REASON_MAX),
    WIRE_OPT("dirty_gpus", JSONV_STRINGS, struct proto_report, dirty_gpus, 1, PROTO_UUID_MAX,
             .flags = JSONV_TEXT, .max_items = PROTO_DIRTY_MAX,
             .count_offset = offsetof(struct proto_report, ndirty)),
};

int proto_report_decode(const json_t *obj, struct proto_report *ret, char *err, size_t errlen)
{
    struct proto_report m = {.exit_code = PROTO_NONE, .signal = PROTO_NONE};
    int rc = jsonv_decode(obj, report_fields, ARRAY_LEN(report_fields), &m, err, errlen);
    if (rc)
        return rc;
    *ret = m;
    return 0;
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

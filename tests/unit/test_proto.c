/* test_proto.c - the controller-agent messages: every message round trips
 * through its encoder and decoder; what today's controller and agent put on
 * the wire decodes (a run assignment with the controller's own jobspec, a
 * node the controller's model reads back); every bad field is refused with
 * a message naming it; a kill without "as" is read from its reason; a
 * heartbeat's figures of the wrong type are refused, null ones not
 * reported; the fence settings and "fenced" are absent when off; encoders
 * refuse what cannot be written; the limits are the controller's. test_proto_checks.c has the
 * checks on values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "core/model.h"
#include "proto/proto.h"
#include "cluster/jobspec.h"
#include "cluster/cluster.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* What the controller accepts reaches the agent. */
_Static_assert(PROTO_GPUS_MAX == SCHED_MAX_GPUS_PER_NODE, "GPUs per node");
_Static_assert(PROTO_UUID_MAX == CLUSTER_UUID_MAX, "UUIDs");
_Static_assert(PROTO_HOST_MAX == CLUSTER_HOST_MAX, "host names");
_Static_assert(PROTO_NAME_MAX == CLUSTER_NAME_MAX, "names");
_Static_assert(PROTO_UNIX_USER_MAX == CLUSTER_UNIX_USER_MAX, "Unix users");
_Static_assert(PROTO_GPU_MEM_MAX == CLUSTER_GPU_MEM_MAX, "GPU memory");
_Static_assert(PROTO_NODE_CPUS_MAX == CLUSTER_NODE_CPUS_MAX, "node CPUs");
_Static_assert(PROTO_NODE_MEM_MAX == CLUSTER_NODE_MEM_MAX, "node memory");
_Static_assert(PROTO_MIG_SLICES_MAX == CLUSTER_MIG_SLICES_MAX, "MIG slices");
_Static_assert(PROTO_SPEC_NAME_MAX == JOBSPEC_NAME_MAX, "spec names");
_Static_assert(PROTO_ARGV_MAX == JOBSPEC_ARGV_MAX, "argv");
_Static_assert(PROTO_ARG_MAX == JOBSPEC_ARG_MAX, "one argument");
_Static_assert(PROTO_SCRIPT_MAX == JOBSPEC_SCRIPT_MAX, "scripts");
_Static_assert(PROTO_PATH_MAX == JOBSPEC_PATH_MAX, "paths");
_Static_assert(PROTO_ENV_MAX == JOBSPEC_ENV_MAX, "env");
_Static_assert(PROTO_ENV_VALUE_MAX == JOBSPEC_ENV_VALUE_MAX, "env values");
_Static_assert(PROTO_DEPS_MAX == JOBSPEC_DEPS_MAX, "dependencies");
_Static_assert(PROTO_SPEC_GPUS_MAX == JOBSPEC_GPUS_MAX, "spec GPUs");
_Static_assert(PROTO_RETRIES_MAX == JOBSPEC_RETRIES_MAX, "retries");

#define A10   "aaaaaaaaaa"
#define A121  A10 A10 A10 A10 A10 A10 A10 A10 A10 A10 A10 A10 "a"
#define UUID0 "GPU-00000000-0000-4000-8000-000000000000"
#define UUID1 "GPU-00000000-0001-4001-8000-000000000001"

static const char register_text[] =
    "{\"pool\": \"main\", \"cpus\": 64, \"mem_mib\": 515000, \"gpus\": ["
    "{\"index\": 0, \"uuid\": \"" UUID0 "\", \"gpu_type\": \"H100-80GB\", \"mem_mib\": 81559,"
    " \"nvlink_domain\": 0, \"mig_slices\": 7, \"mig_enabled\": false},"
    "{\"index\": 1, \"uuid\": \"" UUID1 "\", \"gpu_type\": \"H100-80GB\", \"mem_mib\": 81559,"
    " \"nvlink_domain\": 0, \"mig_slices\": 7, \"mig_enabled\": true}],"
    " \"log_port\": 4000, \"addr\": \"10.0.0.5\"}";

static const char heartbeat_text[] =
    "{\"gpus\": [{\"index\": 0, \"uuid\": \"" UUID0 "\", \"utilization_pct\": 50,"
    " \"memory_utilization_pct\": 20, \"memory_used_mib\": 1000, \"memory_total_mib\": 81559,"
    " \"power_mw\": 300000, \"temperature_c\": 60, \"processes\": ["
    "{\"pid\": 10, \"memory_mib\": 900, \"job\": 3, \"attempt\": 1},"
    "{\"pid\": 11, \"memory_mib\": null, \"job\": null, \"attempt\": null}]},"
    " {\"index\": 1, \"error\": \"NVML: GPU is lost\"}],"
    " \"dirty\": [\"" UUID0 "\"], \"sampled_at_ms\": 1700000000000}";

/* As today's controller writes them (api_nodes.c): a run with the whole
 * spec, and a kill without "as". */
#define STEP_KEY "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static const char assignments_text[] =
    "{\"rev\": 5, \"node\": \"n1\", \"attempts\": [{\"job\": 7, \"attempt\": 1, \"action\": "
    "\"run\", \"gpus\": [{\"uuid\": \"" UUID0 "\", \"milli\": 250, \"mem_mib\": 20000}],"
    " \"user\": \"alice\", \"unix_user\": \"alice\", \"spec\": {\"name\": \"train\","
    " \"team\": \"research\", \"project\": null, \"model\": null, \"priority\": null,"
    " \"pool\": null, \"gpu_type\": null, \"gpus\": 0.25, \"gpu_mem_mib\": 0,"
    " \"min_gpu_mem_mib\": 0, \"cpus\": 2, \"mem_mib\": 4096, \"time_limit_s\": 600,"
    " \"multi_node\": false, \"checkpointable\": false, \"command\": [\"/bin/sleep\", \"5\"],"
    " \"script\": null, \"workdir\": \"/tmp\", \"env\": {\"SEED\": \"7\", \"A\": \"\"},"
    " \"max_retries\": 0, \"requeue\": true, \"dependencies\": [{\"type\": \"afterok\","
    " \"job\": 6}], \"array\": \"0-3\", \"output\": \"/tmp/%j.out\", \"error\": null,"
    " \"nodes\": 2, \"gpus_per_node\": 0, \"ntasks\": 4, \"ntasks_per_node\": 2,"
    " \"cpus_per_task\": 1, \"gpus_per_task\": 0, \"mem_per_node_mib\": 2048,"
    " \"mem_per_cpu_mib\": 0, \"mem_per_gpu_mib\": 0, \"mem_whole_node\": false,"
    " \"exclusive\": true, \"constraint\": \"ib&a100\", \"signal\": \"B:USR1@90\","
    " \"open_mode\": \"append\", \"launch\": \"first_node\", \"submit_dir\": \"/home/a\","
    " \"hold\": false, \"begin\": 0},"
    " \"gang\": {\"nodes\": [\"n1\"], \"rank\": 0, \"master_addr\": \"10.0.0.5\","
    " \"master_port\": 20007}, \"array_id\": 4, \"array_index\": 3, \"pool\": \"h100\","
    " \"priority\": \"normal\","
    " \"step\": {\"key\": \"" STEP_KEY "\", \"addrs\": [\"10.0.0.5:4001\"]}},"
    " {\"job\": 8, \"attempt\": 2, \"action\": \"kill\", \"grace_s\": 30,"
    " \"reason\": \"preempted\", \"as\": \"PREEMPTED\"}]}";

static const char report_text[] = "{\"state\": \"FAILED\", \"exit_code\": 3, \"reason\": \"x\","
                                  " \"dirty_gpus\": [\"" UUID0 "\"]}";

static json_t *parse(const char *text)
{
    json_error_t e;
    json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, &e);
    if (!o)
        fail_msg("bad test JSON: %s: %s", e.text, text);
    return o;
}

/* ---- one table for the five messages ---------------------------------- */

enum kind { REGISTER, REGISTERED, HEARTBEAT, ASSIGNMENTS, REPORT, ATTEMPT };

union any {
    struct proto_register reg;
    struct proto_registered regd;
    struct proto_heartbeat hb;
    struct proto_assignments asg;
    struct proto_attempt att;
    struct proto_report rep;
};

static int decode(enum kind k, const json_t *o, union any *m, char *err, size_t len)
{
    switch (k) {
    case REGISTER:
        return proto_register_decode(o, &m->reg, err, len);
    case REGISTERED:
        return proto_registered_decode(o, &m->regd, err, len);
    case HEARTBEAT:
        return proto_heartbeat_decode(o, &m->hb, err, len);
    case ASSIGNMENTS:
        return proto_assignments_decode(o, &m->asg, err, len);
    case ATTEMPT:
        return proto_attempt_decode(o, &m->att, err, len);
    case REPORT:
        return proto_report_decode(o, &m->rep, err, len);
    }
    return -1;
}

static int encode(enum kind k, const union any *m, json_t **ret)
{
    switch (k) {
    case REGISTER:
        return proto_register_encode(&m->reg, ret);
    case REGISTERED:
        return proto_registered_encode(&m->regd, ret);
    case HEARTBEAT:
        return proto_heartbeat_encode(&m->hb, ret);
    case ASSIGNMENTS:
        return proto_assignments_encode(&m->asg, ret);
    case ATTEMPT:
        return proto_attempt_encode(&m->att, ret);
    case REPORT:
        return proto_report_encode(&m->rep, ret);
    }
    return -1;
}

static void release(enum kind k, union any *m)
{
    switch (k) {
    case REGISTER:
        proto_register_release(&m->reg);
        break;
    case REGISTERED:
        proto_registered_release(&m->regd);
        break;
    case HEARTBEAT:
        proto_heartbeat_release(&m->hb);
        break;
    case ASSIGNMENTS:
        proto_assignments_release(&m->asg);
        break;
    case ATTEMPT:
        proto_attempt_release(&m->att);
        break;
    case REPORT:
        proto_report_release(&m->rep);
        break;
    }
}

static char *registered_text(void)
{
    json_t *o = parse(register_text);
    json_object_set_new(o, "name", json_string("n1"));
    json_object_set_new(o, "state", json_string("draining"));
    json_object_set_new(o, "log_token", json_string("ab12"));
    char *text = json_dumps(o, 0);
    json_decref(o);
    return text;
}

static json_t *base(enum kind k)
{
    switch (k) {
    case REGISTER:
        return parse(register_text);
    case REGISTERED: {
        char *t = registered_text();
        json_t *o = parse(t);
        free(t);
        return o;
    }
    case HEARTBEAT:
        return parse(heartbeat_text);
    case ASSIGNMENTS:
        return parse(assignments_text);
    case ATTEMPT: {
        json_t *a = parse(assignments_text);
        json_t *o = json_incref(json_array_get(json_object_get(a, "attempts"), 0));
        json_decref(a);
        return o;
    }
    case REPORT:
        return parse(report_text);
    }
    return NULL;
}

/* Sets (value JSON text) or deletes (NULL) the member at a dotted path
 * ("attempts.0.gpus.0.milli") in o. */
static void patch(json_t *o, const char *path, const char *value)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    json_t *at = o;
    char *key = buf;
    for (char *dot; (dot = strchr(key, '.')); key = dot + 1) {
        *dot = '\0';
        at = json_is_array(at) ? json_array_get(at, strtoul(key, NULL, 10))
                               : json_object_get(at, key);
        assert_non_null(at);
    }
    json_t *v = value ? json_loads(value, JSON_DECODE_ANY, NULL) : NULL;
    if (value && !v)
        fail_msg("bad test value %s", value);
    if (json_is_array(at))
        assert_int_equal(v ? json_array_set_new(at, strtoul(key, NULL, 10), v)
                           : json_array_remove(at, strtoul(key, NULL, 10)),
                         0);
    else if (v)
        assert_int_equal(json_object_set_new(at, key, v), 0);
    else
        assert_int_equal(json_object_del(at, key), 0);
}

/* ---- round trips -------------------------------------------------------- */

/* decode(text) -> encode -> decode -> encode: the two encodings are equal,
 * and the first decodes with no error. */
static void round_trip(enum kind k)
{
    json_t *o = base(k), *once = NULL, *twice = NULL;
    union any m, again;
    char err[256] = "";
    assert_int_equal(decode(k, o, &m, err, sizeof(err)), 0);
    assert_int_equal(encode(k, &m, &once), 0);
    assert_int_equal(decode(k, once, &again, err, sizeof(err)), 0);
    assert_int_equal(encode(k, &again, &twice), 0);
    assert_true(json_equal(once, twice));
    release(k, &m);
    release(k, &again);
    json_decref(o);
    json_decref(once);
    json_decref(twice);
}

static void test_every_message_round_trips(void **state)
{
    (void)state;
    for (enum kind k = REGISTER; k <= ATTEMPT; k++)
        round_trip(k);
}

/* What today's agent and controller write is what the encoders write, key
 * for key (the kill gains "as"). */
static void test_encoders_write_todays_keys(void **state)
{
    (void)state;
    for (enum kind k = REGISTER; k <= ATTEMPT; k++) {
        json_t *o = base(k), *out = NULL;
        union any m;
        char err[256];
        assert_int_equal(decode(k, o, &m, err, sizeof(err)), 0);
        assert_int_equal(encode(k, &m, &out), 0);
        if (k == ASSIGNMENTS)
            patch(o, "attempts.1.as", "\"PREEMPTED\"");
        if (!json_equal(o, out)) {
            char *a = json_dumps(o, JSON_SORT_KEYS), *b = json_dumps(out, JSON_SORT_KEYS);
            fail_msg("kind %d:\n in  %s\n out %s", k, a, b);
        }
        release(k, &m);
        json_decref(o);
        json_decref(out);
    }
}

static void test_decoded_fields_hold_the_wire_values(void **state)
{
    (void)state;
    json_t *o = base(ASSIGNMENTS);
    struct proto_assignments m;
    char err[256];
    assert_int_equal(proto_assignments_decode(o, &m, err, sizeof(err)), 0);
    assert_int_equal(m.rev, 5);
    assert_string_equal(m.node, "n1");
    assert_int_equal(m.nattempts, 2);
    const struct proto_attempt *r = &m.attempts[0], *k = &m.attempts[1];
    assert_int_equal(r->action, PROTO_ACTION_RUN);
    assert_int_equal(r->job, 7);
    assert_int_equal(r->ngpus, 1);
    assert_string_equal(r->gpus[0].uuid, UUID0);
    assert_int_equal(r->gpus[0].milli, 250);
    assert_int_equal(r->gpus[0].mem_mib, 20000);
    assert_string_equal(r->unix_user, "alice");
    assert_int_equal(r->spec.gpus_milli, 250);
    assert_int_equal(r->spec.argc, 2);
    assert_string_equal(r->spec.argv[1], "5");
    assert_null(r->spec.argv[2]);
    assert_int_equal(r->spec.nenv, 2);
    assert_string_equal(r->spec.env[0].name, "SEED");
    assert_string_equal(r->spec.env[1].value, "");
    assert_int_equal(r->spec.time_limit_s, 600);
    assert_int_equal(r->spec.cpus, 2);
    assert_int_equal(r->spec.ndeps, 1);
    assert_int_equal(r->spec.deps[0].job, 6);
    assert_string_equal(r->spec.output, "/tmp/%j.out");
    assert_null(r->spec.error);
    assert_null(r->spec.script);
    assert_int_equal(r->gang.nnodes, 1);
    assert_int_equal(r->gang.master_port, 20007);
    assert_int_equal(r->array_id, 4);
    assert_int_equal(r->array_index, 3);
    assert_string_equal(r->step.key, STEP_KEY);
    assert_int_equal(r->step.naddrs, 1);
    assert_string_equal(r->step.addrs[0], "10.0.0.5:4001");
    assert_null(k->step.key);
    assert_string_equal(r->pool, "h100");
    assert_string_equal(r->priority, "normal");
    assert_int_equal(k->action, PROTO_ACTION_KILL);
    assert_int_equal(k->grace_s, 30);
    assert_string_equal(k->reason, "preempted");
    assert_int_equal(k->cause, PROTO_KILL_PREEMPTED);
    proto_assignments_release(&m);
    json_decref(o);
}

/* "mps" (pool setting sharing: mps): absent is false and stays absent on
 * the way out; true comes back true. */
static void test_mps_is_false_when_absent_and_written_only_when_true(void **state)
{
    (void)state;
    json_t *o = base(ASSIGNMENTS);
    struct proto_assignments m;
    char err[256];
    assert_int_equal(proto_assignments_decode(o, &m, err, sizeof(err)), 0);
    assert_false(m.attempts[0].mps);
    json_t *out = NULL;
    assert_int_equal(proto_assignments_encode(&m, &out), 0);
    assert_null(json_object_get(json_array_get(json_object_get(out, "attempts"), 0), "mps"));
    json_decref(out);
    proto_assignments_release(&m);
    patch(o, "attempts.0.mps", "true");
    assert_int_equal(proto_assignments_decode(o, &m, err, sizeof(err)), 0);
    assert_true(m.attempts[0].mps);
    assert_false(m.attempts[1].mps);
    assert_int_equal(proto_assignments_encode(&m, &out), 0);
    assert_true(
        json_is_true(json_object_get(json_array_get(json_object_get(out, "attempts"), 0), "mps")));
    json_decref(out);
    proto_assignments_release(&m);
    json_decref(o);
}

/* The fence settings (docs/agent.md, "Fencing") of an answer: absent is
 * 0 (no fencing, as from an older controller) and stays absent; a lease of
 * 0 writes neither key; set ones come back as they were. */
static void fence_of(enum kind k, const union any *m, int64_t *lease, int64_t *grace)
{
    *lease = k == REGISTERED ? m->regd.fence_lease_ms : m->asg.fence_lease_ms;
    *grace = k == REGISTERED ? m->regd.fence_grace_ms : m->asg.fence_grace_ms;
}

static void test_fence_settings_are_absent_when_off_and_round_trip_when_on(void **state)
{
    (void)state;
    static const enum kind kinds[] = {REGISTERED, ASSIGNMENTS};
    for (size_t i = 0; i < ARRAY_LEN(kinds); i++) {
        enum kind k = kinds[i];
        json_t *o = base(k), *out = NULL;
        union any m;
        int64_t lease, grace;
        char err[256] = "";
        assert_int_equal(decode(k, o, &m, err, sizeof(err)), 0);
        fence_of(k, &m, &lease, &grace);
        assert_int_equal(lease, 0);
        assert_int_equal(grace, 0);
        /* A grace alone is not written: the lease says whether to fence. */
        *(k == REGISTERED ? &m.regd.fence_grace_ms : &m.asg.fence_grace_ms) = 5000;
        assert_int_equal(encode(k, &m, &out), 0);
        assert_null(json_object_get(out, "fence_lease_ms"));
        assert_null(json_object_get(out, "fence_grace_ms"));
        json_decref(out);
        release(k, &m);
        patch(o, "fence_lease_ms", "29000");
        patch(o, "fence_grace_ms", "0");
        assert_int_equal(decode(k, o, &m, err, sizeof(err)), 0);
        fence_of(k, &m, &lease, &grace);
        assert_int_equal(lease, 29000);
        assert_int_equal(grace, 0);
        assert_int_equal(encode(k, &m, &out), 0);
        assert_true(json_equal(out, o));
        json_decref(out);
        release(k, &m);
        patch(o, "fence_lease_ms", "86400000"); /* the most */
        patch(o, "fence_grace_ms", NULL);       /* a lease alone: grace 0 */
        assert_int_equal(decode(k, o, &m, err, sizeof(err)), 0);
        fence_of(k, &m, &lease, &grace);
        assert_int_equal(lease, PROTO_FENCE_MS_MAX);
        assert_int_equal(grace, 0);
        release(k, &m);
        json_decref(o);
    }
}

/* Encoders refuse fence settings out of range rather than write them. */
static void test_fence_settings_out_of_range_are_not_written(void **state)
{
    (void)state;
    static const int64_t leases[] = {-1, PROTO_FENCE_MS_MAX + 1, 3000, 3000};
    static const int64_t graces[] = {0, 0, -1, PROTO_FENCE_MS_MAX + 1};
    for (size_t i = 0; i < ARRAY_LEN(leases); i++) {
        json_t *out = NULL;
        struct proto_assignments a = {
            .node = "n1", .fence_lease_ms = leases[i], .fence_grace_ms = graces[i]};
        assert_int_equal(proto_assignments_encode(&a, &out), GPO_EINVAL);
        assert_null(out);
    }
}

/* "fenced": absent is false and stays absent; true comes back true, and
 * only a FAILED report is fenced. */
static void test_fenced_is_false_when_absent_and_only_a_failure_is_fenced(void **state)
{
    (void)state;
    json_t *o = base(REPORT), *out = NULL;
    struct proto_report r;
    char err[256] = "";
    assert_int_equal(proto_report_decode(o, &r, err, sizeof(err)), 0);
    assert_false(r.fenced);
    assert_int_equal(proto_report_encode(&r, &out), 0);
    assert_null(json_object_get(out, "fenced"));
    json_decref(out);
    proto_report_release(&r);
    patch(o, "fenced", "true");
    patch(o, "reason", "\"fenced: no controller reached for 29 s\"");
    assert_int_equal(proto_report_decode(o, &r, err, sizeof(err)), 0);
    assert_true(r.fenced);
    assert_int_equal(r.state, PROTO_STATE_FAILED);
    assert_int_equal(proto_report_encode(&r, &out), 0);
    assert_true(json_equal(out, o));
    json_decref(out);
    proto_report_release(&r);
    patch(o, "fenced", "false"); /* false may be written; it reads as absent */
    assert_int_equal(proto_report_decode(o, &r, err, sizeof(err)), 0);
    assert_false(r.fenced);
    proto_report_release(&r);
    static const char *const others[] = {"\"RUNNING\"", "\"COMPLETED\"", "\"CANCELLED\""};
    patch(o, "fenced", "true");
    for (size_t i = 0; i < ARRAY_LEN(others); i++) {
        patch(o, "state", others[i]);
        memset(&r, 0x5a, sizeof(r));
        assert_int_equal(proto_report_decode(o, &r, err, sizeof(err)), GPO_EINVAL);
        assert_non_null(strstr(err, "field 'fenced': only a FAILED report is fenced"));
    }
    json_decref(o);
}

static void test_absent_members_decode_as_none(void **state)
{
    (void)state;
    json_t *o = parse("{\"state\": \"RUNNING\"}");
    struct proto_report r;
    assert_int_equal(proto_report_decode(o, &r, NULL, 0), 0);
    assert_int_equal(r.state, PROTO_STATE_RUNNING);
    assert_int_equal(r.exit_code, PROTO_NONE);
    assert_int_equal(r.signal, PROTO_NONE);
    assert_null(r.reason);
    assert_int_equal(r.ndirty, 0);
    proto_report_release(&r);
    json_decref(o);
    o = parse("{\"job\": 1, \"attempt\": 1, \"action\": \"kill\", \"as\": \"PREEMPTED\"}");
    struct proto_attempt a;
    assert_int_equal(proto_attempt_decode(o, &a, NULL, 0), 0);
    assert_int_equal(a.grace_s, PROTO_NONE);
    assert_null(a.reason);
    assert_int_equal(a.cause, PROTO_KILL_PREEMPTED);
    proto_attempt_release(&a);
    json_decref(o);
    o = parse("{\"pool\": \"main\", \"cpus\": 1, \"mem_mib\": 1, \"gpus\": [{\"index\": 0, "
              "\"uuid\": \"" UUID0 "\", \"gpu_type\": \"T4\", \"mem_mib\": 15000}]}");
    struct proto_register g;
    assert_int_equal(proto_register_decode(o, &g, NULL, 0), 0);
    assert_int_equal(g.gpus[0].nvlink_domain, -1);
    assert_null(g.addr);
    assert_null(g.name);
    proto_register_release(&g);
    json_decref(o);
}

/* ---- today's controller ------------------------------------------------ */

/* A run built as api_nodes.c builds it, the spec by the controller's own
 * jobspec_to_json, decodes; so does a script job's. */
static void test_a_run_with_the_controllers_spec_decodes(void **state)
{
    (void)state;
    static const char *const subs[] = {
        "{\"name\": \"a\", \"command\": [\"/bin/true\"], \"gpus\": 2, \"env\": {\"X\": \"1\"}}",
        "{\"script\": \"#!/bin/sh\\necho hi\\n\", \"gpus\": 0.5, \"array\": \"0-9%2\", "
        "\"dependencies\": [{\"type\": \"afterany\", \"job\": 3}], \"time_limit_s\": 60}",
        "{\"command\": [\"x\"], \"gpu_mem_mib\": 1000, \"checkpointable\": true, \"requeue\": "
        "false}",
        "{\"command\": [\"x\"], \"mig_profile\": \"MIG 1g.10gb\"}",
    };
    for (size_t i = 0; i < ARRAY_LEN(subs); i++) {
        json_t *sub = parse(subs[i]);
        struct jobspec js;
        char err[256];
        if (jobspec_decode(sub, &js, err, sizeof(err)) != 0)
            fail_msg("%s: %s", subs[i], err);
        json_t *spec = jobspec_to_json(&js);
        json_t *a =
            json_pack("{s:I, s:I, s:s, s:[{s:s, s:I, s:I}], s:s, s:s?, s:o, s:{s:[s], "
                      "s:I, s:s, s:I}}",
                      "job", (json_int_t)9, "attempt", (json_int_t)1, "action", "run", "gpus",
                      "uuid", UUID0, "milli", (json_int_t)500, "mem_mib", (json_int_t)0, "user",
                      "bob", "unix_user", NULL, "spec", spec, "gang", "nodes", "n1", "rank",
                      (json_int_t)0, "master_addr", "n1", "master_port", (json_int_t)20009);
        assert_non_null(a);
        struct proto_attempt m;
        if (proto_attempt_decode(a, &m, err, sizeof(err)) != 0)
            fail_msg("%s", err);
        assert_null(m.unix_user);
        json_t *out = NULL;
        assert_int_equal(proto_attempt_encode(&m, &out), 0);
        assert_true(json_equal(json_object_get(out, "spec"), json_object_get(a, "spec")));
        json_decref(out);
        proto_attempt_release(&m);
        jobspec_release(&js);
        json_decref(a);
        json_decref(sub);
    }
}

/* The registration the agent encodes is a node the controller's model
 * decodes; the node the model shows, with its token, is an answer the agent
 * decodes. */
static void test_registration_meets_the_controllers_model(void **state)
{
    (void)state;
    json_t *o = parse(register_text), *enc = NULL;
    struct proto_register r;
    char err[256];
    assert_int_equal(proto_register_decode(o, &r, err, sizeof(err)), 0);
    assert_int_equal(proto_register_encode(&r, &enc), 0);
    json_object_set_new(enc, "name", json_string("n1"));
    struct cluster_node n;
    if (cluster_node_decode(enc, 0, &n, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_int_equal(n.ngpus, 2);
    json_t *shown = cluster_node_to_json(&n, 0);
    json_object_set_new(shown, "log_token", json_string("0123abcd"));
    struct proto_registered a;
    if (proto_registered_decode(shown, &a, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_string_equal(a.log_token, "0123abcd");
    assert_string_equal(a.node.name, "n1");
    assert_int_equal(a.state, PROTO_NODE_UP);
    json_t *again = NULL;
    assert_int_equal(proto_registered_encode(&a, &again), 0);
    assert_true(json_equal(again, shown));
    json_decref(again);
    proto_registered_release(&a);
    json_decref(shown);
    cluster_node_release(&n);
    proto_register_release(&r);
    json_decref(enc);
    json_decref(o);
}

/* ---- the kill's cause --------------------------------------------------- */

static void test_a_kill_says_its_cause_not_its_reason(void **state)
{
    (void)state;
    static const struct {
        const char *kill;
        enum proto_kill_cause cause;
    } cases[] = {
        {"\"reason\": \"preempted\", \"as\": \"CANCELLED\"", PROTO_KILL_CANCELLED},
        {"\"reason\": \"cancelled\", \"as\": \"PREEMPTED\"", PROTO_KILL_PREEMPTED},
        {"\"reason\": \"preempted: idle: GPUs under 5% for 30m\", \"as\": \"PREEMPTED\"",
         PROTO_KILL_PREEMPTED},
        {"\"grace_s\": 0, \"as\": \"CANCELLED\"", PROTO_KILL_CANCELLED},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char text[256];
        snprintf(text, sizeof(text), "{\"job\": 1, \"attempt\": 1, \"action\": \"kill\", %s}",
                 cases[i].kill);
        json_t *o = parse(text);
        struct proto_attempt a;
        assert_int_equal(proto_attempt_decode(o, &a, NULL, 0), 0);
        if (a.cause != cases[i].cause)
            fail_msg("%s: cause %d", text, a.cause);
        proto_attempt_release(&a);
        json_decref(o);
    }
    /* Without "as" a kill is refused: its reason's words are for people. */
    json_t *o = parse("{\"job\": 1, \"attempt\": 1, \"action\": \"kill\", \"reason\": "
                      "\"preempted\"}");
    struct proto_attempt a;
    char err[256];
    assert_int_equal(proto_attempt_decode(o, &a, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "missing required field 'as' (action 'kill' needs it)");
    json_decref(o);
    assert_string_equal(proto_kill_cause_name(PROTO_KILL_PREEMPTED), "PREEMPTED");
    assert_string_equal(proto_kill_cause_name((enum proto_kill_cause)7), "unknown");
    assert_string_equal(proto_state_name(PROTO_STATE_TIMEOUT), "TIMEOUT");
    assert_string_equal(proto_state_name((enum proto_state) - 1), "unknown");
}

/* ---- heartbeat figures -------------------------------------------------- */

static void test_heartbeat_figures_of_the_wrong_type_are_refused_by_name(void **state)
{
    (void)state;
    static const char *const values[] = {"\"50\"", "50.5", "true", "{}", "[1]"};
    static const char *const paths[] = {
        "gpus.0.utilization_pct", "gpus.0.memory_utilization_pct",
        "gpus.0.memory_used_mib", "gpus.0.memory_total_mib",
        "gpus.0.power_mw",        "gpus.0.temperature_c",
        "gpus.0.processes.0.pid", "gpus.0.processes.0.memory_mib",
    };
    static const char *const names[] = {
        "'gpus[0].utilization_pct'",  "'gpus[0].memory_utilization_pct'",
        "'gpus[0].memory_used_mib'",  "'gpus[0].memory_total_mib'",
        "'gpus[0].power_mw'",         "'gpus[0].temperature_c'",
        "'gpus[0].processes[0].pid'", "'gpus[0].processes[0].memory_mib'",
    };
    for (size_t p = 0; p < ARRAY_LEN(paths); p++) {
        for (size_t v = 0; v < ARRAY_LEN(values); v++) {
            json_t *o = base(HEARTBEAT);
            patch(o, paths[p], values[v]);
            struct proto_heartbeat h;
            char err[256] = "";
            int rc = proto_heartbeat_decode(o, &h, err, sizeof(err));
            if (rc != GPO_EINVAL || !strstr(err, names[p]) || !strstr(err, "expected an integer"))
                fail_msg("%s = %s: rc %d, '%s'", paths[p], values[v], rc, err);
            json_decref(o);
        }
        json_t *o = base(HEARTBEAT); /* null: not reported */
        patch(o, paths[p], "null");
        struct proto_heartbeat h;
        assert_int_equal(proto_heartbeat_decode(o, &h, NULL, 0), 0);
        const struct proto_gpu_sample *g = &h.gpus[0];
        const int64_t got[] = {g->utilization_pct, g->memory_utilization_pct,
                               g->memory_used_mib, g->memory_total_mib,
                               g->power_mw,        g->temperature_c,
                               g->procs[0].pid,    g->procs[0].memory_mib};
        assert_int_equal(got[p], PROTO_NONE);
        proto_heartbeat_release(&h);
        json_decref(o);
    }
}

static void test_a_process_of_no_attempt_has_neither_id(void **state)
{
    (void)state;
    static const char *const jobs[] = {"\"3\"", "0", "-1", "null"};
    static const int want[] = {GPO_EINVAL, GPO_ERANGE, GPO_ERANGE, GPO_EINVAL};
    for (size_t k = 0; k < ARRAY_LEN(jobs); k++) { /* one id without the other is refused */
        json_t *o = base(HEARTBEAT);
        patch(o, "gpus.0.processes.0.job", jobs[k]);
        struct proto_heartbeat h;
        char err[256] = "";
        assert_int_equal(proto_heartbeat_decode(o, &h, err, sizeof(err)), want[k]);
        assert_non_null(strstr(err, "'gpus[0].processes[0]."));
        json_decref(o);
    }
    json_t *o = base(HEARTBEAT);
    patch(o, "gpus.0.processes", "null");
    struct proto_heartbeat h;
    assert_int_equal(proto_heartbeat_decode(o, &h, NULL, 0), 0);
    assert_false(h.gpus[0].procs_known);
    assert_true(h.gpus[1].error != NULL);
    assert_null(h.gpus[1].uuid);
    assert_int_equal(h.sampled_at_ms, INT64_C(1700000000000));
    proto_heartbeat_release(&h);
    json_decref(o);
    o = base(HEARTBEAT);
    assert_int_equal(proto_heartbeat_decode(o, &h, NULL, 0), 0);
    assert_int_equal(h.gpus[0].procs[1].job, PROTO_NONE);
    assert_int_equal(h.gpus[0].procs[1].attempt, PROTO_NONE);
    proto_heartbeat_release(&h);
    json_decref(o);
}

/* ---- every bad field ---------------------------------------------------- */

static const struct bad {
    enum kind kind;
    const char *path, *value; /* value NULL: the key deleted */
    int rc;
    const char *msg; /* a part of the message */
} bad[] = {
    {REGISTER, "pool", NULL, GPO_EINVAL, "missing required field 'pool'"},
    {REGISTER, "colour", "\"red\"", GPO_EINVAL, "unknown field 'colour'"},
    {REGISTER, "cpus", "0", GPO_ERANGE, "field 'cpus'"},
    {REGISTER, "mem_mib", "\"lots\"", GPO_EINVAL, "field 'mem_mib'"},
    {REGISTER, "log_port", "70000", GPO_ERANGE, "field 'log_port'"},
    {REGISTER, "addr", "\"\"", GPO_ERANGE, "field 'addr'"},
    {REGISTER, "gpus", "{}", GPO_EINVAL, "field 'gpus'"},
    {REGISTER, "gpus.0.index", "64", GPO_ERANGE, "field 'gpus[0].index'"},
    {REGISTER, "gpus.1.index", "0", GPO_EINVAL, "field 'gpus[1].index': 0 is also gpus[0]'s"},
    {REGISTER, "gpus.1.uuid", "\"" UUID0 "\"", GPO_EINVAL, "field 'gpus[1].uuid'"},
    {REGISTER, "gpus.0.uuid", NULL, GPO_EINVAL, "missing required field 'gpus[0].uuid'"},
    {REGISTER, "gpus.0.gpu_type", "\"\"", GPO_ERANGE, "field 'gpus[0].gpu_type'"},
    {REGISTER, "gpus.0.mem_mib", "0", GPO_ERANGE, "field 'gpus[0].mem_mib'"},
    {REGISTER, "gpus.0.nvlink_domain", "-2", GPO_ERANGE, "field 'gpus[0].nvlink_domain'"},
    {REGISTER, "gpus.0.mig_slices", "8", GPO_ERANGE, "field 'gpus[0].mig_slices'"},
    {REGISTER, "gpus.0.mig_enabled", "1", GPO_EINVAL, "field 'gpus[0].mig_enabled'"},
    {REGISTER, "gpus.0.colour", "1", GPO_EINVAL, "unknown field 'gpus[0].colour'"},
    {REGISTERED, "log_token", NULL, GPO_EINVAL, "missing required field 'log_token'"},
    {REGISTERED, "name", NULL, GPO_EINVAL, "missing required field 'name'"},
    {REGISTERED, "state", "\"sideways\"", GPO_EINVAL, "field 'state'"},
    {REGISTERED, "log_token", "\"\"", GPO_ERANGE, "field 'log_token'"},
    {REGISTERED, "fence_lease_ms", "-1", GPO_ERANGE, "field 'fence_lease_ms'"},
    {REGISTERED, "fence_lease_ms", "86400001", GPO_ERANGE, "field 'fence_lease_ms'"},
    {REGISTERED, "fence_lease_ms", "\"3s\"", GPO_EINVAL, "field 'fence_lease_ms'"},
    {REGISTERED, "fence_grace_ms", "1000", GPO_EINVAL,
     "field 'fence_grace_ms': only with a fence_lease_ms above 0"},
    {HEARTBEAT, "gpus", NULL, GPO_EINVAL, "missing required field 'gpus'"},
    {HEARTBEAT, "extra", "1", GPO_EINVAL, "unknown field 'extra'"},
    {HEARTBEAT, "gpus.0.index", "\"0\"", GPO_EINVAL, "field 'gpus[0].index'"},
    {HEARTBEAT, "gpus.0.index", "64", GPO_ERANGE, "field 'gpus[0].index'"},
    {HEARTBEAT, "gpus.0.uuid", NULL, GPO_EINVAL, "missing required field 'gpus[0].uuid'"},
    {HEARTBEAT, "gpus.0.uuid", "7", GPO_EINVAL, "field 'gpus[0].uuid'"},
    {HEARTBEAT, "gpus.1.uuid", "\"" UUID1 "\"", GPO_EINVAL,
     "field 'gpus[1].uuid': not allowed next to 'error'"},
    {HEARTBEAT, "gpus.1.power_mw", "5", GPO_EINVAL, "field 'gpus[1].power_mw': not allowed"},
    {HEARTBEAT, "gpus.1.error", "\"\"", GPO_ERANGE, "field 'gpus[1].error'"},
    {HEARTBEAT, "gpus.0.colour", "1", GPO_EINVAL, "unknown field 'gpus[0].colour'"},
    {HEARTBEAT, "gpus.0.processes", "{}", GPO_EINVAL, "field 'gpus[0].processes'"},
    {HEARTBEAT, "gpus.0.processes.0.colour", "1", GPO_EINVAL,
     "unknown field 'gpus[0].processes[0].colour'"},
    {HEARTBEAT, "dirty", "\"" UUID0 "\"", GPO_EINVAL, "field 'dirty'"},
    {HEARTBEAT, "dirty.0", "5", GPO_EINVAL, "field 'dirty"},
    {HEARTBEAT, "sampled_at_ms", "\"now\"", GPO_EINVAL, "field 'sampled_at_ms'"},
    {HEARTBEAT, "sampled_at_ms", "-1", GPO_ERANGE, "field 'sampled_at_ms'"},
    {ASSIGNMENTS, "rev", "-1", GPO_ERANGE, "field 'rev'"},
    {ASSIGNMENTS, "fence_lease_ms", "1.5", GPO_EINVAL, "field 'fence_lease_ms'"},
    {ASSIGNMENTS, "fence_lease_ms", "86400001", GPO_ERANGE, "field 'fence_lease_ms'"},
    {ASSIGNMENTS, "fence_grace_ms", "-1", GPO_ERANGE, "field 'fence_grace_ms'"},
    {ASSIGNMENTS, "fence_grace_ms", "0", GPO_EINVAL,
     "field 'fence_grace_ms': only with a fence_lease_ms above 0"},
    {ASSIGNMENTS, "node", NULL, GPO_EINVAL, "missing required field 'node'"},
    {ASSIGNMENTS, "attempts", "{}", GPO_EINVAL, "field 'attempts'"},
    {ASSIGNMENTS, "attempts.0.job", "0", GPO_ERANGE, "field 'attempts[0].job'"},
    {ASSIGNMENTS, "attempts.0.attempt", "0", GPO_ERANGE, "field 'attempts[0].attempt'"},
    {ASSIGNMENTS, "attempts.0.action", "\"dance\"", GPO_EINVAL, "field 'attempts[0].action'"},
    {ASSIGNMENTS, "attempts.0.action", NULL, GPO_EINVAL, "'attempts[0].action'"},
    {ASSIGNMENTS, "attempts.0.gpus.0.milli", "5000", GPO_ERANGE,
     "field 'attempts[0].gpus[0].milli'"},
    {ASSIGNMENTS, "attempts.0.gpus.0.uuid", NULL, GPO_EINVAL, "'attempts[0].gpus[0].uuid'"},
    {ASSIGNMENTS, "attempts.0.gpus.0.mem_mib", "-1", GPO_ERANGE,
     "field 'attempts[0].gpus[0].mem_mib'"},
    {ASSIGNMENTS, "attempts.0.spec", NULL, GPO_EINVAL,
     "missing required field 'attempts[0].spec' (action 'run' needs it)"},
    {ASSIGNMENTS, "attempts.0.gpus", NULL, GPO_EINVAL, "'attempts[0].gpus' (action 'run'"},
    {ASSIGNMENTS, "attempts.0.gang", NULL, GPO_EINVAL, "'attempts[0].gang' (action 'run'"},
    {ASSIGNMENTS, "attempts.0.user", NULL, GPO_EINVAL, "'attempts[0].user' (action 'run'"},
    {ASSIGNMENTS, "attempts.0.grace_s", "30", GPO_EINVAL,
     "field 'attempts[0].grace_s': not allowed with action 'run'"},
    {ASSIGNMENTS, "attempts.0.as", "\"CANCELLED\"", GPO_EINVAL,
     "field 'attempts[0].as': not allowed with action 'run'"},
    {ASSIGNMENTS, "attempts.1.gpus", "[]", GPO_EINVAL,
     "field 'attempts[1].gpus': not allowed with action 'kill'"},
    {ASSIGNMENTS, "attempts.1.unix_user", "null", GPO_EINVAL,
     "field 'attempts[1].unix_user': not allowed with action 'kill'"},
    {ASSIGNMENTS, "attempts.1.as", "\"EXPLODED\"", GPO_EINVAL, "field 'attempts[1].as'"},
    {ASSIGNMENTS, "attempts.1.pool", "\"main\"", GPO_EINVAL,
     "field 'attempts[1].pool': not allowed with action 'kill'"},
    {ASSIGNMENTS, "attempts.0.pool", "\"\"", GPO_ERANGE, "field 'attempts[0].pool'"},
    {ASSIGNMENTS, "attempts.0.priority", "\"a\\nb\"", GPO_EINVAL, "field 'attempts[0].priority'"},
    {ASSIGNMENTS, "attempts.1.grace_s", "-1", GPO_ERANGE, "field 'attempts[1].grace_s'"},
    {ASSIGNMENTS, "attempts.0.array_index", NULL, GPO_EINVAL,
     "field 'attempts[0].array_id': an array task has both"},
    {ASSIGNMENTS, "attempts.0.array_id", "0", GPO_ERANGE, "field 'attempts[0].array_id'"},
    {ASSIGNMENTS, "attempts.0.unix_user", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"", GPO_ERANGE,
     "field 'attempts[0].unix_user'"},
    {ASSIGNMENTS, "attempts.0.gang.rank", "1", GPO_ERANGE, "field 'attempts[0].gang.rank'"},
    {ASSIGNMENTS, "attempts.0.gang.nodes", "[]", GPO_ERANGE, "attempts[0].gang"},
    {ASSIGNMENTS, "attempts.0.gang.master_port", "0", GPO_ERANGE,
     "field 'attempts[0].gang.master_port'"},
    {ASSIGNMENTS, "attempts.0.step.key", "\"abc\"", GPO_ERANGE, "field 'attempts[0].step.key'"},
    {ASSIGNMENTS, "attempts.0.step.key",
     "\""
     "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"
     "\"",
     GPO_EINVAL, "field 'attempts[0].step.key': expected 64 lowercase hex digits"},
    {ASSIGNMENTS, "attempts.0.step.key", NULL, GPO_EINVAL, "'attempts[0].step.key'"},
    {ASSIGNMENTS, "attempts.0.step.addrs", "[\"a:1\", \"b:2\"]", GPO_EINVAL,
     "field 'attempts[0].step.addrs': 2 address(es), but the gang has 1 node(s)"},
    {ASSIGNMENTS, "attempts.1.step", "{\"key\": \"" STEP_KEY "\", \"addrs\": []}", GPO_EINVAL,
     "field 'attempts[1].step': not allowed with action 'kill'"},
    {ASSIGNMENTS, "attempts.0.mps", "1", GPO_EINVAL, "field 'attempts[0].mps'"},
    {ASSIGNMENTS, "attempts.1.mps", "true", GPO_EINVAL,
     "field 'attempts[1].mps': not allowed with action 'kill'"},
    {ASSIGNMENTS, "attempts.0.spec.colour", "1", GPO_EINVAL,
     "unknown field 'attempts[0].spec.colour'"},
    {ASSIGNMENTS, "attempts.0.spec.gpus", "0.0005", GPO_EINVAL, "field 'attempts[0].spec.gpus'"},
    {ASSIGNMENTS, "attempts.0.spec.gpus", "1.5", GPO_EINVAL, "field 'attempts[0].spec.gpus'"},
    {ASSIGNMENTS, "attempts.0.spec.gpus", "1025", GPO_ERANGE, "field 'attempts[0].spec.gpus'"},
    {ASSIGNMENTS, "attempts.0.spec.gpus", "\"two\"", GPO_EINVAL, "field 'attempts[0].spec.gpus'"},
    {ASSIGNMENTS, "attempts.0.spec.env", "[]", GPO_EINVAL,
     "field 'attempts[0].spec.env': expected an object"},
    {ASSIGNMENTS, "attempts.0.spec.env.X", "5", GPO_EINVAL,
     "field 'attempts[0].spec.env.X': expected a string"},
    {ASSIGNMENTS, "attempts.0.spec.command", "\"ls\"", GPO_EINVAL,
     "field 'attempts[0].spec.command'"},
    {ASSIGNMENTS, "attempts.0.spec.command.0", "7", GPO_EINVAL, "attempts[0].spec.command"},
    {ASSIGNMENTS, "attempts.0.spec.time_limit_s", "31536001", GPO_ERANGE,
     "field 'attempts[0].spec.time_limit_s'"},
    {ASSIGNMENTS, "attempts.0.spec.cpus", "4097", GPO_ERANGE, "field 'attempts[0].spec.cpus'"},
    {ASSIGNMENTS, "attempts.0.spec.workdir", "\"\"", GPO_ERANGE,
     "field 'attempts[0].spec.workdir'"},
    {ASSIGNMENTS, "attempts.0.spec.dependencies.0.type", "\"before\"", GPO_EINVAL,
     "field 'attempts[0].spec.dependencies[0].type'"},
    {ASSIGNMENTS, "attempts.0.spec.max_retries", "101", GPO_ERANGE,
     "field 'attempts[0].spec.max_retries'"},
    {ATTEMPT, "gpus.0.milli", "0", GPO_ERANGE, "field 'gpus[0].milli'"},
    {ATTEMPT, "spec", NULL, GPO_EINVAL, "missing required field 'spec' (action 'run' needs it)"},
    {REPORT, "state", "\"DONE\"", GPO_EINVAL, "field 'state'"},
    {REPORT, "state", NULL, GPO_EINVAL, "missing required field 'state'"},
    {REPORT, "exit_code", "256", GPO_ERANGE, "field 'exit_code'"},
    {REPORT, "signal", "65", GPO_ERANGE, "field 'signal'"},
    {REPORT, "reason", "\"" A121 "\"", GPO_ERANGE, "field 'reason'"},
    {REPORT, "dirty_gpus.0", "\"\"", GPO_ERANGE, "field 'dirty_gpus"},
    {REPORT, "colour", "1", GPO_EINVAL, "unknown field 'colour'"},
    {REPORT, "fenced", "1", GPO_EINVAL, "field 'fenced'"},
    {REPORT, "fenced", "null", GPO_EINVAL, "field 'fenced'"},
};

static void test_every_bad_field_is_refused_by_name(void **state)
{
    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        const struct bad *b = &bad[i];
        json_t *o = base(b->kind);
        patch(o, b->path, b->value);
        union any m;
        memset(&m, 0x5a, sizeof(m));
        union any before = m;
        char err[512] = "";
        int rc = decode(b->kind, o, &m, err, sizeof(err));
        if (rc != b->rc || !strstr(err, b->msg))
            fail_msg("%s = %s: rc %d, '%s'; expected %d, '%s'", b->path,
                     b->value ? b->value : "(deleted)", rc, err, b->rc, b->msg);
        assert_memory_equal(&m, &before, sizeof(m)); /* untouched on failure */
        json_decref(o);
    }
}

static json_t *many(const char *item, size_t n)
{
    json_t *a = json_array();
    for (size_t k = 0; k < n; k++)
        json_array_append_new(a, json_loads(item, JSON_DECODE_ANY, NULL));
    return a;
}

static void test_counts_over_their_limits_are_refused(void **state)
{
    (void)state;
    char err[256];
    json_t *o = base(REPORT);
    json_object_set_new(o, "dirty_gpus", many("\"" UUID0 "\"", PROTO_DIRTY_MAX + 1));
    struct proto_report r;
    assert_int_equal(proto_report_decode(o, &r, err, sizeof(err)), GPO_ERANGE);
    assert_non_null(strstr(err, "'dirty_gpus'"));
    json_decref(o);
    o = base(HEARTBEAT);
    json_object_set_new(o, "gpus", many("{\"index\": 0, \"error\": \"x\"}", PROTO_GPUS_MAX + 1));
    struct proto_heartbeat h;
    assert_int_equal(proto_heartbeat_decode(o, &h, err, sizeof(err)), GPO_ERANGE);
    assert_non_null(strstr(err, "'gpus'"));
    json_decref(o);
    o = base(ASSIGNMENTS);
    json_t *env = json_object();
    for (int k = 0; k <= PROTO_ENV_MAX; k++) {
        char name[16];
        snprintf(name, sizeof(name), "V%d", k);
        json_object_set_new(env, name, json_string(""));
    }
    json_object_set_new(json_object_get(json_array_get(json_object_get(o, "attempts"), 0), "spec"),
                        "env", env);
    struct proto_assignments a;
    assert_int_equal(proto_assignments_decode(o, &a, err, sizeof(err)), GPO_ERANGE);
    assert_non_null(strstr(err, "field 'attempts[0].spec.env'"));
    json_decref(o);
}

/* ---- encoders ------------------------------------------------------------ */

static void test_encoders_refuse_what_cannot_be_written(void **state)
{
    (void)state;
    json_t *o = NULL;
    struct proto_report r = {
        .state = (enum proto_state)6, .exit_code = PROTO_NONE, .signal = PROTO_NONE};
    assert_int_equal(proto_report_encode(&r, &o), GPO_EINVAL);
    r.state = PROTO_STATE_FAILED;
    r.reason = "caf\xc3"; /* cut inside a character */
    assert_int_equal(proto_report_encode(&r, &o), GPO_EINVAL);
    struct proto_register g = {.pool = NULL, .cpus = 1, .mem_mib = 1};
    assert_int_equal(proto_register_encode(&g, &o), GPO_EINVAL);
    struct proto_attempt a = {.job = 1, .attempt = 1, .action = (enum proto_action)2};
    assert_int_equal(proto_attempt_encode(&a, &o), GPO_EINVAL);
    assert_null(o);
    /* and what they can, they write */
    r.reason = "caf\xc3\xa9";
    assert_int_equal(proto_report_encode(&r, &o), 0);
    assert_string_equal(json_string_value(json_object_get(o, "reason")), "caf\xc3\xa9");
    json_decref(o);
}

static void test_release_of_null_and_of_a_zeroed_message_is_fine(void **state)
{
    (void)state;
    proto_register_release(NULL);
    proto_registered_release(NULL);
    proto_heartbeat_release(NULL);
    proto_assignments_release(NULL);
    proto_attempt_release(NULL);
    proto_report_release(NULL);
    union any m;
    for (enum kind k = REGISTER; k <= ATTEMPT; k++) {
        memset(&m, 0, sizeof(m));
        release(k, &m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_message_round_trips),
        cmocka_unit_test(test_encoders_write_todays_keys),
        cmocka_unit_test(test_decoded_fields_hold_the_wire_values),
        cmocka_unit_test(test_absent_members_decode_as_none),
        cmocka_unit_test(test_mps_is_false_when_absent_and_written_only_when_true),
        cmocka_unit_test(test_fence_settings_are_absent_when_off_and_round_trip_when_on),
        cmocka_unit_test(test_fence_settings_out_of_range_are_not_written),
        cmocka_unit_test(test_fenced_is_false_when_absent_and_only_a_failure_is_fenced),
        cmocka_unit_test(test_a_run_with_the_controllers_spec_decodes),
        cmocka_unit_test(test_registration_meets_the_controllers_model),
        cmocka_unit_test(test_a_kill_says_its_cause_not_its_reason),
        cmocka_unit_test(test_heartbeat_figures_of_the_wrong_type_are_refused_by_name),
        cmocka_unit_test(test_a_process_of_no_attempt_has_neither_id),
        cmocka_unit_test(test_every_bad_field_is_refused_by_name),
        cmocka_unit_test(test_counts_over_their_limits_are_refused),
        cmocka_unit_test(test_encoders_refuse_what_cannot_be_written),
        cmocka_unit_test(test_release_of_null_and_of_a_zeroed_message_is_fine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

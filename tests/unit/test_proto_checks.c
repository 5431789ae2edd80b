/* test_proto_checks.c - the values the controller-agent decoders check,
 * beyond type and shape (test_proto.c): each figure of a heartbeat in its
 * plausible range, memory used within the total, no GPU sampled twice, a
 * process's ids together; no control character in a name, UUID, address,
 * token or message of any message, while a job's command, script and a
 * kill's reason keep any text; zero CPUs or memory in a registration; the
 * adversarial run's garbage heartbeat and long dirty name; and what the
 * agent sends out of range is made to fit rather than refused whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "proto/proto.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define UUID0        "GPU-00000000-0000-4000-8000-000000000000"
#define UUID1        "GPU-00000000-0001-4001-8000-000000000001"

/* A heartbeat of samples; one sample of GPU 0 with figures `figs`. */
#define SAMPLE(figs) "{\"index\": 0, \"uuid\": \"" UUID0 "\", " figs "}"
#define HB(samples)  "{\"gpus\": [" samples "]}"
#define REG(node, gpu)                                                                             \
    "{\"pool\": \"main\", \"cpus\": 8, \"mem_mib\": 1024, " node " \"gpus\": [{\"index\": 0, "     \
    "\"uuid\": \"" UUID0 "\", \"gpu_type\": \"H100\", \"mem_mib\": 81559" gpu "}]}"
#define REPORT(more) "{\"state\": \"FAILED\"" more "}"
#define SPEC         "\"spec\": {\"command\": [\"/bin/true\"]}"
#define GANG                                                                                       \
    "\"gang\": {\"nodes\": [\"n1\"], \"rank\": 0, \"master_addr\": \"n1\", \"master_port\": "      \
    "20000}"
#define RUN(user, spec, gang, uuid)                                                                \
    "{\"job\": 1, \"attempt\": 1, \"action\": \"run\", \"gpus\": [{\"uuid\": \"" uuid              \
    "\", \"milli\": 1000, \"mem_mib\": 0}], \"user\": \"" user "\", \"unix_user\": null, " spec    \
    ", " gang "}"
#define ASG(node, attempt) "{\"rev\": 1, \"node\": \"" node "\", \"attempts\": [" attempt "]}"

enum kind { HEARTBEAT, REGISTER, REGISTERED, REPORT, ASSIGNMENTS };

static int decode_text(enum kind k, const char *text, char *err, size_t errlen)
{
    json_error_t je;
    json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        fail_msg("bad test JSON: %s: %s", je.text, text);
    union {
        struct proto_heartbeat hb;
        struct proto_register reg;
        struct proto_registered regd;
        struct proto_report rep;
        struct proto_assignments asg;
    } m;
    memset(&m, 0x5a, sizeof(m));
    unsigned char before[sizeof(m)];
    memcpy(before, &m, sizeof(m));
    int rc = GPO_EINVAL;
    switch (k) {
    case HEARTBEAT:
        if (!(rc = proto_heartbeat_decode(o, &m.hb, err, errlen)))
            proto_heartbeat_release(&m.hb);
        break;
    case REGISTER:
        if (!(rc = proto_register_decode(o, &m.reg, err, errlen)))
            proto_register_release(&m.reg);
        break;
    case REGISTERED:
        if (!(rc = proto_registered_decode(o, &m.regd, err, errlen)))
            proto_registered_release(&m.regd);
        break;
    case REPORT:
        if (!(rc = proto_report_decode(o, &m.rep, err, errlen)))
            proto_report_release(&m.rep);
        break;
    case ASSIGNMENTS:
        if (!(rc = proto_assignments_decode(o, &m.asg, err, errlen)))
            proto_assignments_release(&m.asg);
        break;
    }
    if (rc)
        assert_memory_equal(&m, before, sizeof(m)); /* nothing of a refused message kept */
    json_decref(o);
    return rc;
}

static const struct refused {
    enum kind kind;
    const char *text;
    int rc;
    const char *msg; /* a part of the message: the field's path, and why */
} refused[] = {
    /* figures out of their ranges */
    {HEARTBEAT, HB(SAMPLE("\"utilization_pct\": 101")), GPO_ERANGE,
     "field 'gpus[0].utilization_pct': 101 is out of range 0..100"},
    {HEARTBEAT, HB(SAMPLE("\"utilization_pct\": -1")), GPO_ERANGE, "'gpus[0].utilization_pct'"},
    {HEARTBEAT, HB(SAMPLE("\"memory_utilization_pct\": 250")), GPO_ERANGE,
     "'gpus[0].memory_utilization_pct': 250 is out of range 0..100"},
    {HEARTBEAT, HB(SAMPLE("\"memory_total_mib\": 4194305")), GPO_ERANGE,
     "'gpus[0].memory_total_mib'"},
    {HEARTBEAT, HB(SAMPLE("\"memory_used_mib\": -5")), GPO_ERANGE, "'gpus[0].memory_used_mib'"},
    {HEARTBEAT, HB(SAMPLE("\"memory_used_mib\": 90000, \"memory_total_mib\": 81559")), GPO_ERANGE,
     "field 'gpus[0].memory_used_mib': 90000 is more than memory_total_mib (81559)"},
    {HEARTBEAT, HB(SAMPLE("\"power_mw\": 5000001")), GPO_ERANGE, "'gpus[0].power_mw'"},
    {HEARTBEAT, HB(SAMPLE("\"temperature_c\": 151")), GPO_ERANGE,
     "'gpus[0].temperature_c': 151 is out of range -40..150"},
    {HEARTBEAT, HB(SAMPLE("\"temperature_c\": -41")), GPO_ERANGE, "'gpus[0].temperature_c'"},
    {HEARTBEAT, HB(SAMPLE("\"processes\": [{\"pid\": 0}]")), GPO_ERANGE,
     "'gpus[0].processes[0].pid'"},
    {HEARTBEAT, HB(SAMPLE("\"processes\": [{\"pid\": 4194305}]")), GPO_ERANGE,
     "'gpus[0].processes[0].pid'"},
    {HEARTBEAT, HB(SAMPLE("\"processes\": [{\"pid\": 9, \"memory_mib\": 4194305}]")), GPO_ERANGE,
     "'gpus[0].processes[0].memory_mib'"},
    {HEARTBEAT, HB(SAMPLE("\"processes\": [{\"pid\": 9, \"job\": 4}]")), GPO_EINVAL,
     "'gpus[0].processes[0].attempt': a process of an attempt has both"},
    {HEARTBEAT, HB(SAMPLE("\"processes\": [{\"pid\": 9, \"attempt\": 4}]")), GPO_EINVAL,
     "'gpus[0].processes[0].job'"},
    {HEARTBEAT, HB(SAMPLE("\"processes\": [{\"pid\": 9, \"job\": 1, \"attempt\": 4294967296}]")),
     GPO_ERANGE, "'gpus[0].processes[0].attempt'"},
    /* one GPU, one sample */
    {HEARTBEAT, HB(SAMPLE("\"power_mw\": 1") ", " SAMPLE("\"power_mw\": 2")), GPO_EINVAL,
     "field 'gpus[1].index': 0 is also gpus[0]'s"},
    {HEARTBEAT, HB(SAMPLE("\"power_mw\": 1") ", {\"index\": 1, \"uuid\": \"" UUID0 "\"}"),
     GPO_EINVAL, "field 'gpus[1].uuid': '" UUID0 "' is also gpus[0]'s"},
    {HEARTBEAT, HB("{\"index\": 0, \"error\": \"x\"}, {\"index\": 0, \"error\": \"y\"}"),
     GPO_EINVAL, "'gpus[1].index': 0 is also"},
    /* the adversarial run's garbage */
    {HEARTBEAT, HB("{\"uuid\": 5, \"utilization\": \"high\"}"), GPO_EINVAL,
     "unknown field 'gpus[0].utilization'"},
    {HEARTBEAT, HB("{\"index\": 0, \"uuid\": 5}"), GPO_EINVAL,
     "field 'gpus[0].uuid': expected a string, got an integer"},
    {HEARTBEAT, HB(SAMPLE("\"utilization_pct\": \"high\"")), GPO_EINVAL,
     "field 'gpus[0].utilization_pct': expected an integer, got a string"},
    /* control characters */
    {HEARTBEAT, HB("{\"index\": 0, \"uuid\": \"GPU-\\n0\"}"), GPO_EINVAL,
     "field 'gpus[0].uuid': a control character (U+000A) at byte 4"},
    {HEARTBEAT, HB("{\"index\": 0, \"error\": \"lost\\u001b[2J\"}"), GPO_EINVAL,
     "field 'gpus[0].error': a control character (U+001B) at byte 4"},
    {HEARTBEAT, "{\"gpus\": [], \"dirty\": [\"" UUID0 "\", \"GPU-\\r\"]}", GPO_EINVAL,
     "field 'dirty[1]': a control character (U+000D)"},
    {REGISTER, REG("\"name\": \"n\\n1\",", ""), GPO_EINVAL, "field 'name': a control character"},
    {REGISTER, REG("\"addr\": \"10.0.0.1\\u0001\",", ""), GPO_EINVAL, "field 'addr'"},
    {REGISTER, REG("\"addr\": \"h\\u0085\",", ""), GPO_EINVAL,
     "field 'addr': a control character (U+0085)"},
    {REGISTER, "{\"pool\": \"ma\\tin\", \"cpus\": 8, \"mem_mib\": 1024}", GPO_EINVAL,
     "field 'pool': a control character (U+0009)"},
    {REGISTER,
     "{\"pool\": \"main\", \"cpus\": 8, \"mem_mib\": 1024, \"gpus\": [{\"index\": 0, "
     "\"uuid\": \"" UUID0 "\", \"gpu_type\": \"H\\u007f\", \"mem_mib\": 1}]}",
     GPO_EINVAL, "field 'gpus[0].gpu_type': a control character (U+007F)"},
    {REGISTERED,
     "{\"name\": \"n1\", \"state\": \"up\", \"pool\": \"main\", \"cpus\": 8, \"mem_mib\": 1024, "
     "\"log_token\": \"ab\\ncd\"}",
     GPO_EINVAL, "field 'log_token': a control character"},
    {REPORT, REPORT(", \"reason\": \"killed\\nFAKE LOG LINE\""), GPO_EINVAL,
     "field 'reason': a control character (U+000A) at byte 6"},
    {REPORT, REPORT(", \"dirty_gpus\": [\"GPU-\\u0007\"]"), GPO_EINVAL, "field 'dirty_gpus[0]'"},
    {ASSIGNMENTS, ASG("n\\n1", ""), GPO_EINVAL, "field 'node': a control character"},
    {ASSIGNMENTS, ASG("n1", RUN("al\\nice", SPEC, GANG, UUID0)), GPO_EINVAL,
     "field 'attempts[0].user': a control character"},
    {ASSIGNMENTS, ASG("n1", RUN("alice", SPEC, GANG, "GPU-\\u001b")), GPO_EINVAL,
     "field 'attempts[0].gpus[0].uuid': a control character"},
    {ASSIGNMENTS, ASG("n1", RUN("alice", "\"spec\": {\"name\": \"tr\\u009bain\"}", GANG, UUID0)),
     GPO_EINVAL, "field 'attempts[0].spec.name': a control character (U+009B)"},
    {ASSIGNMENTS,
     ASG("n1", RUN("alice", SPEC,
                   "\"gang\": {\"nodes\": [\"n\\n1\"], \"rank\": 0, \"master_addr\": \"n1\", "
                   "\"master_port\": 20000}",
                   UUID0)),
     GPO_EINVAL, "field 'attempts[0].gang.nodes[0]': a control character"},
    /* zero CPUs or memory: a node has some */
    {REGISTER, "{\"pool\": \"main\", \"cpus\": 0, \"mem_mib\": 1024}", GPO_ERANGE,
     "field 'cpus': 0 is out of range 1..1048576"},
    {REGISTER, "{\"pool\": \"main\", \"cpus\": 8, \"mem_mib\": 0}", GPO_ERANGE,
     "field 'mem_mib': 0 is out of range 1..1099511627776"},
};

static void test_every_bad_value_is_refused_by_its_path(void **state)
{
    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(refused); i++) {
        const struct refused *r = &refused[i];
        char err[512] = "";
        int rc = decode_text(r->kind, r->text, err, sizeof(err));
        if (rc != r->rc || !strstr(err, r->msg))
            fail_msg("%s:\n got  %d '%s'\n want %d '%s'", r->text, rc, err, r->rc, r->msg);
    }
}

/* The adversarial run's 3,000-character dirty name, and one at the limit. */
static void test_a_long_uuid_is_refused_and_one_at_the_limit_is_not(void **state)
{
    (void)state;
    char uuid[3001];
    memset(uuid, 'A', sizeof(uuid) - 1);
    uuid[sizeof(uuid) - 1] = '\0';
    uuid[1500] = '\n';
    for (size_t k = 0; k < 2; k++) { /* a dirty UUID, a sample's UUID */
        json_t *o = json_pack("{s:[]}", "gpus");
        if (k == 0)
            json_object_set_new(o, "dirty", json_pack("[s]", uuid));
        else
            json_object_set_new(o, "gpus", json_pack("[{s:i, s:s}]", "index", 0, "uuid", uuid));
        struct proto_heartbeat h;
        char err[256] = "";
        assert_int_equal(proto_heartbeat_decode(o, &h, err, sizeof(err)), GPO_ERANGE);
        assert_non_null(strstr(err, k == 0 ? "field 'dirty[0]': length 3000 is out of range 1..96"
                                           : "field 'gpus[0].uuid': length 3000"));
        json_decref(o);
    }
    uuid[PROTO_UUID_MAX] = '\0';
    uuid[1] = 'A';
    json_t *o = json_pack("{s:[], s:[s]}", "gpus", "dirty", uuid);
    struct proto_heartbeat h;
    assert_int_equal(proto_heartbeat_decode(o, &h, NULL, 0), 0);
    assert_int_equal(strlen(h.dirty[0]), PROTO_UUID_MAX);
    proto_heartbeat_release(&h);
    json_decref(o);
}

/* Free text stays free where it is a program's or a person's: a command, a
 * script, an environment value, a kill's reason. */
static void test_a_jobs_own_text_may_hold_any_character(void **state)
{
    (void)state;
    static const char *const ok[] = {
        ASG("n1", RUN("alice", "\"spec\": {\"command\": [\"/bin/echo\", \"a\\nb\\u001b\"]}", GANG,
                      UUID0)),
        ASG("n1", RUN("alice", "\"spec\": {\"script\": \"#!/bin/sh\\necho\\tx\\n\"}", GANG, UUID0)),
        ASG("n1",
            RUN("alice", "\"spec\": {\"command\": [\"x\"], \"env\": {\"PS1\": \"\\u001b[1m$ \"}}",
                GANG, UUID0)),
        ASG("n1", "{\"job\": 1, \"attempt\": 1, \"action\": \"kill\", \"reason\": \"line 1\\nline "
                  "2\", \"as\": \"CANCELLED\"}"),
    };
    for (size_t k = 0; k < ARRAY_LEN(ok); k++) {
        char err[256] = "";
        if (decode_text(ASSIGNMENTS, ok[k], err, sizeof(err)) != 0)
            fail_msg("%s: %s", ok[k], err);
    }
    char err[256] = "";
    assert_int_equal(decode_text(HEARTBEAT,
                                 HB(SAMPLE("\"utilization_pct\": 100, \"memory_used_mib\": "
                                           "81559, \"memory_total_mib\": 81559, "
                                           "\"temperature_c\": -40, \"power_mw\": 0")),
                                 err, sizeof(err)),
                     0);
}

/* What an agent samples out of range is sent as not reported, and what it
 * sends then decodes. */
static void test_a_sample_out_of_range_is_made_to_fit(void **state)
{
    (void)state;
    struct proto_process procs[] = {{.pid = 0, .memory_mib = -1, .job = 3, .attempt = PROTO_NONE},
                                    {.pid = 42, .memory_mib = 10, .job = 3, .attempt = 1}};
    char error[] = "NVML:\nlost";
    struct proto_gpu_sample s[] = {
        {.index = 0,
         .uuid = UUID0,
         .utilization_pct = 101,
         .memory_utilization_pct = 50,
         .memory_used_mib = 90000,
         .memory_total_mib = 81559,
         .power_mw = INT64_C(9000000),
         .temperature_c = 2147483647,
         .procs_known = true,
         .procs = procs,
         .nprocs = ARRAY_LEN(procs)},
        {.index = 1, .error = error},
    };
    for (size_t k = 0; k < ARRAY_LEN(s); k++)
        proto_gpu_sample_fit(&s[k]);
    proto_gpu_sample_fit(NULL);
    assert_int_equal(s[0].utilization_pct, PROTO_NONE);
    assert_int_equal(s[0].memory_utilization_pct, 50);
    assert_int_equal(s[0].memory_used_mib, PROTO_NONE);
    assert_int_equal(s[0].memory_total_mib, 81559);
    assert_int_equal(s[0].power_mw, PROTO_NONE);
    assert_int_equal(s[0].temperature_c, PROTO_NONE);
    assert_int_equal(procs[0].pid, PROTO_NONE);
    assert_int_equal(procs[0].memory_mib, PROTO_NONE);
    assert_int_equal(procs[0].job, PROTO_NONE);
    assert_int_equal(procs[1].job, 3);
    assert_string_equal(error, "NVML:?lost");
    struct proto_heartbeat hb = {.gpus = s, .ngpus = ARRAY_LEN(s), .sampled_at_ms = PROTO_NONE};
    json_t *o = NULL;
    assert_int_equal(proto_heartbeat_encode(&hb, &o), 0);
    struct proto_heartbeat back;
    char err[256] = "";
    if (proto_heartbeat_decode(o, &back, err, sizeof(err)) != 0)
        fail_msg("the fitted sample does not decode: %s", err);
    proto_heartbeat_release(&back);
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_bad_value_is_refused_by_its_path),
        cmocka_unit_test(test_a_long_uuid_is_refused_and_one_at_the_limit_is_not),
        cmocka_unit_test(test_a_jobs_own_text_may_hold_any_character),
        cmocka_unit_test(test_a_sample_out_of_range_is_made_to_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

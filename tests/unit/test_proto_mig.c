/* test_proto_mig.c - MIG on the controller-agent wire: a GPU's instances in
 * the registration and in every heartbeat, shares on an instance (mig_uuid),
 * a spec's mig_profile, an attempt's mps, the assignments' repartition plans
 * and a plan's result. Each round trips; what a decoder fills holds the
 * wire's values, absent keys their defaults (so older agents and
 * controllers interoperate: the defaults are not written either); every bad
 * field is refused with a message naming it; proto_gpu_sample_fit drops the
 * instances a decoder would refuse. */
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

#include "proto/proto.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define UUID0 "GPU-00000000-0000-4000-8000-000000000000"
#define UUID1 "GPU-00000000-0001-4001-8000-000000000001"
#define MIG0  "MIG-11111111-0000-4000-8000-000000000000"
#define MIG1  "MIG-11111111-0001-4000-8000-000000000001"

/* Two 1g instances with compute instances and one 3g without. */
#define INSTANCES                                                                                  \
    "[{\"profile_id\": 19, \"start\": 0, \"gi_id\": 7, \"ci_id\": 0, \"uuid\": \"" MIG0 "\"},"     \
    " {\"profile_id\": 19, \"start\": 1, \"gi_id\": 8, \"ci_id\": 0, \"uuid\": \"" MIG1 "\"},"     \
    " {\"profile_id\": 9, \"start\": 4, \"gi_id\": 2, \"ci_id\": null, \"uuid\": null}]"

static const char register_text[] =
    "{\"pool\": \"main\", \"cpus\": 8, \"mem_mib\": 64000, \"gpus\": ["
    "{\"index\": 0, \"uuid\": \"" UUID0 "\", \"gpu_type\": \"H100-80GB\", \"mem_mib\": 81559,"
    " \"nvlink_domain\": -1, \"mig_slices\": 7, \"mig_enabled\": true, \"mig\": " INSTANCES "},"
    "{\"index\": 1, \"uuid\": \"" UUID1 "\", \"gpu_type\": \"H100-80GB\", \"mem_mib\": 81559,"
    " \"nvlink_domain\": -1, \"mig_slices\": 7, \"mig_enabled\": false, \"mig_pending\": true}],"
    " \"log_port\": 4000}";

static const char heartbeat_text[] =
    "{\"gpus\": [{\"index\": 0, \"uuid\": \"" UUID0 "\", \"utilization_pct\": null,"
    " \"memory_utilization_pct\": null, \"memory_used_mib\": 1024, \"memory_total_mib\": 81559,"
    " \"power_mw\": 70000, \"temperature_c\": 30, \"processes\": [{\"pid\": 10, \"memory_mib\":"
    " 1024, \"job\": 3, \"attempt\": 1}], \"mig\": {\"enabled\": true, \"instances\": " INSTANCES
    "}},"
    " {\"index\": 1, \"uuid\": \"" UUID1 "\", \"utilization_pct\": 0,"
    " \"memory_utilization_pct\": 0, \"memory_used_mib\": 0, \"memory_total_mib\": 81559,"
    " \"power_mw\": 70000, \"temperature_c\": 30, \"processes\": [],"
    " \"mig\": {\"enabled\": true, \"pending\": false}}],"
    " \"dirty\": [], \"sampled_at_ms\": 1700000000000}";

static const char assignments_text[] =
    "{\"rev\": 5, \"node\": \"n1\", \"attempts\": [{\"job\": 7, \"attempt\": 1, \"action\": "
    "\"run\", \"gpus\": [{\"uuid\": \"" UUID0 "\", \"milli\": 142, \"mem_mib\": 10240,"
    " \"mig_uuid\": \"" MIG0 "\"}], \"user\": \"alice\", \"unix_user\": null, \"spec\":"
    " {\"command\": [\"/bin/true\"], \"mig_profile\": \"1g.10gb\"},"
    " \"gang\": {\"nodes\": [\"n1\"], \"rank\": 0, \"master_addr\": \"n1\", \"master_port\": 2},"
    " \"mps\": true}],"
    " \"mig_plans\": [{\"id\": 3, \"gpu_uuid\": \"" UUID1 "\", \"destroy\": [{\"profile_id\": 0,"
    " \"start\": 0}], \"create\": [{\"profile_id\": 19, \"start\": 0}, {\"profile_id\": 19,"
    " \"start\": 1}]}, {\"id\": 4, \"gpu_uuid\": \"" UUID0 "\", \"create\": [{\"profile_id\":"
    " 14, \"start\": 2}]}]}";

static const char result_text[] =
    "{\"ok\": false, \"error\": \"destroying 3g.40gb at 4: in use\", \"gpu_uuid\": \"" UUID0 "\","
    " \"mig\": " INSTANCES "}";

static json_t *parse(const char *text)
{
    json_error_t e;
    json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, &e);
    if (!o)
        fail_msg("bad test JSON: %s: %s", e.text, text);
    return o;
}

enum kind { REGISTER, HEARTBEAT, ASSIGNMENTS, RESULT };

union any {
    struct proto_register reg;
    struct proto_heartbeat hb;
    struct proto_assignments asg;
    struct proto_mig_result res;
};

static const char *const texts[] = {register_text, heartbeat_text, assignments_text, result_text};

static int decode(enum kind k, const json_t *o, union any *m, char *err, size_t len)
{
    switch (k) {
    case REGISTER:
        return proto_register_decode(o, &m->reg, err, len);
    case HEARTBEAT:
        return proto_heartbeat_decode(o, &m->hb, err, len);
    case ASSIGNMENTS:
        return proto_assignments_decode(o, &m->asg, err, len);
    case RESULT:
        return proto_mig_result_decode(o, &m->res, err, len);
    }
    return -1;
}

static int encode(enum kind k, const union any *m, json_t **ret)
{
    switch (k) {
    case REGISTER:
        return proto_register_encode(&m->reg, ret);
    case HEARTBEAT:
        return proto_heartbeat_encode(&m->hb, ret);
    case ASSIGNMENTS:
        return proto_assignments_encode(&m->asg, ret);
    case RESULT:
        return proto_mig_result_encode(&m->res, ret);
    }
    return -1;
}

static void release(enum kind k, union any *m)
{
    switch (k) {
    case REGISTER:
        proto_register_release(&m->reg);
        break;
    case HEARTBEAT:
        proto_heartbeat_release(&m->hb);
        break;
    case ASSIGNMENTS:
        proto_assignments_release(&m->asg);
        break;
    case RESULT:
        proto_mig_result_release(&m->res);
        break;
    }
}

/* Sets (value JSON text) or deletes (NULL) the member at a dotted path. */
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

/* decode -> encode -> decode -> encode: equal; for every message but the
 * assignments (whose spec gains the keys the encoder always writes), the
 * first encoding is the text itself. */
static void test_mig_messages_round_trip(void **state)
{
    (void)state;
    for (enum kind k = REGISTER; k <= RESULT; k++) {
        json_t *o = parse(texts[k]), *once = NULL, *twice = NULL;
        union any m, again;
        char err[256] = "";
        if (decode(k, o, &m, err, sizeof(err)) != 0)
            fail_msg("kind %d: %s", k, err);
        assert_int_equal(encode(k, &m, &once), 0);
        assert_int_equal(decode(k, once, &again, err, sizeof(err)), 0);
        assert_int_equal(encode(k, &again, &twice), 0);
        assert_true(json_equal(once, twice));
        if (k != ASSIGNMENTS && !json_equal(o, once)) {
            char *a = json_dumps(o, JSON_SORT_KEYS), *b = json_dumps(once, JSON_SORT_KEYS);
            fail_msg("kind %d:\n in  %s\n out %s", k, a, b);
        }
        release(k, &m);
        release(k, &again);
        json_decref(o);
        json_decref(once);
        json_decref(twice);
    }
}

static void test_decoded_instances_hold_the_wire_values(void **state)
{
    (void)state;
    json_t *o = parse(register_text);
    struct proto_register r;
    assert_int_equal(proto_register_decode(o, &r, NULL, 0), 0);
    assert_int_equal(r.gpus[0].nmig, 3);
    assert_true(r.gpus[0].mig_enabled);
    assert_true(r.gpus[0].mig_pending); /* absent: as enabled */
    assert_false(r.gpus[1].mig_enabled);
    assert_true(r.gpus[1].mig_pending);
    const struct proto_mig_instance *i = r.gpus[0].mig;
    assert_int_equal(i[0].profile_id, 19);
    assert_int_equal(i[1].start, 1);
    assert_int_equal(i[1].gi_id, 8);
    assert_int_equal(i[1].ci_id, 0);
    assert_string_equal(i[1].uuid, MIG1);
    assert_int_equal(i[2].ci_id, PROTO_NONE);
    assert_null(i[2].uuid);
    proto_register_release(&r);
    json_decref(o);

    o = parse(heartbeat_text);
    struct proto_heartbeat h;
    assert_int_equal(proto_heartbeat_decode(o, &h, NULL, 0), 0);
    assert_true(h.gpus[0].mig_known && h.gpus[0].mig_enabled && h.gpus[0].mig_pending);
    assert_int_equal(h.gpus[0].nmig, 3);
    assert_string_equal(h.gpus[0].mig[0].uuid, MIG0);
    assert_true(h.gpus[1].mig_enabled);
    assert_false(h.gpus[1].mig_pending); /* MIG off at the next reset */
    assert_int_equal(h.gpus[1].nmig, 0);
    proto_heartbeat_release(&h);
    json_decref(o);

    o = parse(assignments_text);
    struct proto_assignments a;
    assert_int_equal(proto_assignments_decode(o, &a, NULL, 0), 0);
    assert_string_equal(a.attempts[0].gpus[0].mig_uuid, MIG0);
    assert_string_equal(a.attempts[0].spec.mig_profile, "1g.10gb");
    assert_true(a.attempts[0].mps);
    assert_int_equal(a.nmig_plans, 2);
    assert_int_equal(a.mig_plans[0].id, 3);
    assert_string_equal(a.mig_plans[0].gpu_uuid, UUID1);
    assert_int_equal(a.mig_plans[0].ndestroy, 1);
    assert_int_equal(a.mig_plans[0].destroy[0].profile_id, 0);
    assert_int_equal(a.mig_plans[0].ncreate, 2);
    assert_int_equal(a.mig_plans[0].create[1].start, 1);
    assert_int_equal(a.mig_plans[1].ndestroy, 0);
    assert_null(a.mig_plans[1].destroy);
    proto_assignments_release(&a);
    json_decref(o);

    o = parse(result_text);
    struct proto_mig_result res;
    assert_int_equal(proto_mig_result_decode(o, &res, NULL, 0), 0);
    assert_false(res.ok);
    assert_string_equal(res.error, "destroying 3g.40gb at 4: in use");
    assert_string_equal(res.gpu_uuid, UUID0);
    assert_int_equal(res.nmig, 3);
    proto_mig_result_release(&res);
    json_decref(o);
}

/* What an older peer sends (no MIG keys) decodes to the defaults, and the
 * defaults are not written, so an older strict decoder reads what we send. */
static void test_defaults_are_neither_required_nor_written(void **state)
{
    (void)state;
    json_t *o = parse(assignments_text), *out = NULL;
    patch(o, "mig_plans", NULL);
    patch(o, "attempts.0.mps", NULL);
    patch(o, "attempts.0.gpus.0.mig_uuid", NULL);
    patch(o, "attempts.0.spec.mig_profile", NULL);
    struct proto_assignments a;
    assert_int_equal(proto_assignments_decode(o, &a, NULL, 0), 0);
    assert_int_equal(a.nmig_plans, 0);
    assert_false(a.attempts[0].mps);
    assert_null(a.attempts[0].gpus[0].mig_uuid);
    assert_null(a.attempts[0].spec.mig_profile);
    assert_int_equal(proto_assignments_encode(&a, &out), 0);
    assert_null(json_object_get(out, "mig_plans"));
    json_t *att = json_array_get(json_object_get(out, "attempts"), 0);
    assert_null(json_object_get(att, "mps"));
    assert_null(json_object_get(json_array_get(json_object_get(att, "gpus"), 0), "mig_uuid"));
    assert_null(json_object_get(json_object_get(att, "spec"), "mig_profile"));
    json_decref(out);
    proto_assignments_release(&a);
    json_decref(o);

    o = parse(heartbeat_text);
    patch(o, "gpus.0.mig", NULL);
    struct proto_heartbeat h;
    assert_int_equal(proto_heartbeat_decode(o, &h, NULL, 0), 0);
    assert_false(h.gpus[0].mig_known);
    assert_false(h.gpus[0].mig_enabled);
    assert_int_equal(proto_heartbeat_encode(&h, &out), 0);
    assert_null(json_object_get(json_array_get(json_object_get(out, "gpus"), 0), "mig"));
    json_decref(out);
    proto_heartbeat_release(&h);
    json_decref(o);

    o = parse(register_text);
    patch(o, "gpus.0.mig", NULL);
    patch(o, "gpus.1.mig_pending", NULL);
    struct proto_register r;
    assert_int_equal(proto_register_decode(o, &r, NULL, 0), 0);
    assert_int_equal(r.gpus[0].nmig, 0);
    assert_false(r.gpus[1].mig_pending);
    assert_int_equal(proto_register_encode(&r, &out), 0);
    assert_true(json_equal(o, out));
    json_decref(out);
    proto_register_release(&r);
    json_decref(o);
}

static const struct bad {
    enum kind kind;
    const char *path, *value; /* value NULL: the key deleted */
    int rc;
    const char *msg;
} bad[] = {
    {REGISTER, "gpus.0.mig.0.profile_id", "64", GPO_ERANGE, "field 'gpus[0].mig[0].profile_id'"},
    {REGISTER, "gpus.0.mig.0.start", "8", GPO_ERANGE, "field 'gpus[0].mig[0].start'"},
    {REGISTER, "gpus.0.mig.0.start", NULL, GPO_EINVAL,
     "missing required field 'gpus[0].mig[0].start'"},
    {REGISTER, "gpus.0.mig.0.gi_id", "64", GPO_ERANGE, "field 'gpus[0].mig[0].gi_id'"},
    {REGISTER, "gpus.0.mig.0.ci_id", "-1", GPO_ERANGE, "field 'gpus[0].mig[0].ci_id'"},
    {REGISTER, "gpus.0.mig.0.uuid", "\"\"", GPO_ERANGE, "field 'gpus[0].mig[0].uuid'"},
    {REGISTER, "gpus.0.mig.0.uuid", "\"MIG-\\n\"", GPO_EINVAL, "field 'gpus[0].mig[0].uuid'"},
    {REGISTER, "gpus.0.mig.0.colour", "1", GPO_EINVAL, "unknown field 'gpus[0].mig[0].colour'"},
    {REGISTER, "gpus.0.mig.1.start", "0", GPO_EINVAL,
     "field 'gpus[0].mig[1].start': 0 is also gpus[0].mig[0]'s"},
    {REGISTER, "gpus.0.mig.1.gi_id", "7", GPO_EINVAL,
     "field 'gpus[0].mig[1].gi_id': 7 is also gpus[0].mig[0]'s"},
    {REGISTER, "gpus.0.mig.1.uuid", "\"" MIG0 "\"", GPO_EINVAL,
     "field 'gpus[0].mig[1].uuid': '" MIG0 "' is also gpus[0].mig[0]'s"},
    {REGISTER, "gpus.0.mig.0.ci_id", "null", GPO_EINVAL,
     "field 'gpus[0].mig[0].uuid': an instance without a compute instance"},
    {REGISTER, "gpus.0.mig_enabled", "false", GPO_EINVAL,
     "field 'gpus[0].mig': a GPU not in MIG mode"},
    {REGISTER, "gpus.0.mig_pending", "1", GPO_EINVAL, "field 'gpus[0].mig_pending'"},
    {REGISTER, "gpus.0.mig", "{}", GPO_EINVAL, "field 'gpus[0].mig'"},
    {HEARTBEAT, "gpus.0.mig.enabled", NULL, GPO_EINVAL,
     "missing required field 'gpus[0].mig.enabled'"},
    {HEARTBEAT, "gpus.0.mig.enabled", "false", GPO_EINVAL,
     "field 'gpus[0].mig.instances': a GPU not in MIG mode"},
    {HEARTBEAT, "gpus.0.mig.pending", "\"yes\"", GPO_EINVAL, "field 'gpus[0].mig.pending'"},
    {HEARTBEAT, "gpus.0.mig.instances.2.start", "1", GPO_EINVAL,
     "field 'gpus[0].mig.instances[2].start': 1 is also gpus[0].mig.instances[1]'s"},
    {HEARTBEAT, "gpus.0.mig.instances.0.profile_id", "\"1g\"", GPO_EINVAL,
     "field 'gpus[0].mig.instances[0].profile_id'"},
    {HEARTBEAT, "gpus.0.mig.colour", "1", GPO_EINVAL, "unknown field 'gpus[0].mig.colour'"},
    {HEARTBEAT, "gpus.0.mig", "[]", GPO_EINVAL, "field 'gpus[0].mig'"},
    {HEARTBEAT, "gpus.1", "{\"index\": 1, \"error\": \"lost\", \"mig\": {\"enabled\": true}}",
     GPO_EINVAL, "field 'gpus[1].mig': not allowed next to 'error'"},
    {ASSIGNMENTS, "attempts.0.gpus.0.mig_uuid", "\"\"", GPO_ERANGE,
     "field 'attempts[0].gpus[0].mig_uuid'"},
    {ASSIGNMENTS, "attempts.0.gpus.0.mig_uuid", "\"MIG\\t1\"", GPO_EINVAL,
     "field 'attempts[0].gpus[0].mig_uuid'"},
    {ASSIGNMENTS, "attempts.0.spec.mig_profile", "\"\"", GPO_ERANGE,
     "field 'attempts[0].spec.mig_profile'"},
    {ASSIGNMENTS, "attempts.0.spec.mig_profile", "19", GPO_EINVAL,
     "field 'attempts[0].spec.mig_profile'"},
    {ASSIGNMENTS, "attempts.0.mps", "1", GPO_EINVAL, "field 'attempts[0].mps'"},
    {ASSIGNMENTS, "attempts.0",
     "{\"job\": 1, \"attempt\": 1, \"action\": \"kill\", \"as\": \"CANCELLED\", \"mps\": true}",
     GPO_EINVAL, "field 'attempts[0].mps': not allowed with action 'kill'"},
    {ASSIGNMENTS, "mig_plans", "{}", GPO_EINVAL, "field 'mig_plans'"},
    {ASSIGNMENTS, "mig_plans.0.id", "0", GPO_ERANGE, "field 'mig_plans[0].id'"},
    {ASSIGNMENTS, "mig_plans.0.id", NULL, GPO_EINVAL, "missing required field 'mig_plans[0].id'"},
    {ASSIGNMENTS, "mig_plans.1.id", "3", GPO_EINVAL,
     "field 'mig_plans[1].id': 3 is also mig_plans[0]'s"},
    {ASSIGNMENTS, "mig_plans.0.gpu_uuid", NULL, GPO_EINVAL,
     "missing required field 'mig_plans[0].gpu_uuid'"},
    {ASSIGNMENTS, "mig_plans.0.gpu_uuid", "\"\"", GPO_ERANGE, "field 'mig_plans[0].gpu_uuid'"},
    {ASSIGNMENTS, "mig_plans.0.create.1.start", "0", GPO_EINVAL,
     "field 'mig_plans[0].create[1].start': 0 is also create[0]'s"},
    {ASSIGNMENTS, "mig_plans.0.create.0.start", "8", GPO_ERANGE,
     "field 'mig_plans[0].create[0].start'"},
    {ASSIGNMENTS, "mig_plans.0.destroy.0.profile_id", "64", GPO_ERANGE,
     "field 'mig_plans[0].destroy[0].profile_id'"},
    {ASSIGNMENTS, "mig_plans.0.destroy.0.gi_id", "1", GPO_EINVAL,
     "unknown field 'mig_plans[0].destroy[0].gi_id'"},
    {RESULT, "error", NULL, GPO_EINVAL, "missing required field 'error' (a failed plan says why)"},
    {RESULT, "ok", "true", GPO_EINVAL, "field 'error': not allowed with \"ok\": true"},
    {RESULT, "ok", NULL, GPO_EINVAL, "missing required field 'ok'"},
    {RESULT, "gpu_uuid", NULL, GPO_EINVAL, "missing required field 'gpu_uuid'"},
    {RESULT, "mig", NULL, GPO_EINVAL, "missing required field 'mig'"},
    {RESULT, "mig.0.start", "1", GPO_EINVAL, "field 'mig[1].start': 1 is also mig[0]'s"},
    {RESULT, "error", "\"\"", GPO_ERANGE, "field 'error'"},
    {RESULT, "colour", "1", GPO_EINVAL, "unknown field 'colour'"},
};

static void test_every_bad_mig_field_is_refused_by_name(void **state)
{
    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        const struct bad *b = &bad[i];
        json_t *o = parse(texts[b->kind]);
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

static void test_too_many_instances_or_plans_are_refused(void **state)
{
    (void)state;
    json_t *o = parse(result_text), *list = json_array();
    for (int k = 0; k <= PROTO_MIG_INSTANCES_MAX; k++)
        json_array_append_new(
            list, json_pack("{s:i, s:i, s:i}", "profile_id", 19, "start", k, "gi_id", k));
    json_object_set_new(o, "mig", list);
    struct proto_mig_result r;
    char err[256] = "";
    assert_int_equal(proto_mig_result_decode(o, &r, err, sizeof(err)), GPO_ERANGE);
    assert_non_null(strstr(err, "'mig'"));
    json_decref(o);
    o = parse(assignments_text);
    list = json_array();
    for (int k = 1; k <= PROTO_GPUS_MAX + 1; k++)
        json_array_append_new(list, json_pack("{s:i, s:s}", "id", k, "gpu_uuid", UUID0));
    json_object_set_new(o, "mig_plans", list);
    struct proto_assignments a;
    assert_int_equal(proto_assignments_decode(o, &a, err, sizeof(err)), GPO_ERANGE);
    assert_non_null(strstr(err, "'mig_plans'"));
    json_decref(o);
}

/* What NVML reports that a decoder would refuse is left out, not sent. */
static void test_fit_drops_instances_a_decoder_would_refuse(void **state)
{
    (void)state;
    struct proto_mig_instance *v = calloc(5, sizeof(*v));
    assert_non_null(v);
    v[0] = (struct proto_mig_instance){19, 0, 7, 0, strdup(MIG0)};
    v[1] = (struct proto_mig_instance){19, 0, 9, 0, strdup(MIG1)};    /* start 0 again */
    v[2] = (struct proto_mig_instance){99, 2, 9, 0, strdup("MIG-x")}; /* no such profile id */
    v[3] = (struct proto_mig_instance){19, 3, 10, PROTO_NONE, strdup("MIG-y")}; /* no CI */
    v[4] = (struct proto_mig_instance){14, 4, 11, 200, NULL}; /* CI id out of range */
    struct proto_gpu_sample s = {.uuid = strdup(UUID0),
                                 .utilization_pct = PROTO_NONE,
                                 .memory_utilization_pct = PROTO_NONE,
                                 .memory_used_mib = PROTO_NONE,
                                 .memory_total_mib = PROTO_NONE,
                                 .power_mw = PROTO_NONE,
                                 .temperature_c = PROTO_NONE,
                                 .procs_known = true,
                                 .mig_known = true,
                                 .mig_enabled = true,
                                 .mig_pending = true,
                                 .mig = v,
                                 .nmig = 5};
    proto_gpu_sample_fit(&s);
    assert_int_equal(s.nmig, 3);
    assert_int_equal(s.mig[0].start, 0);
    assert_int_equal(s.mig[1].start, 3);
    assert_null(s.mig[1].uuid);
    assert_int_equal(s.mig[2].ci_id, PROTO_NONE);
    struct proto_heartbeat h = {.gpus = &s, .ngpus = 1, .sampled_at_ms = PROTO_NONE};
    json_t *o = NULL;
    assert_int_equal(proto_heartbeat_encode(&h, &o), 0);
    struct proto_heartbeat back;
    char err[256] = "";
    if (proto_heartbeat_decode(o, &back, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_int_equal(back.gpus[0].nmig, 3);
    proto_heartbeat_release(&back);
    json_decref(o);
    /* a GPU not in MIG mode sends no instances at all */
    s.mig_enabled = false;
    proto_gpu_sample_fit(&s);
    assert_int_equal(s.nmig, 0);
    assert_null(s.mig);
    free(s.uuid);
}

static void test_a_failed_result_needs_its_error_to_encode(void **state)
{
    (void)state;
    struct proto_mig_result r = {.ok = false, .gpu_uuid = UUID0};
    json_t *o = NULL;
    assert_int_equal(proto_mig_result_encode(&r, &o), GPO_EINVAL);
    assert_null(o);
    r.ok = true;
    assert_int_equal(proto_mig_result_encode(&r, &o), 0);
    assert_true(json_is_array(json_object_get(o, "mig")));
    assert_null(json_object_get(o, "error"));
    json_decref(o);
    proto_mig_result_release(NULL);
    struct proto_mig_result z = {0};
    proto_mig_result_release(&z);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mig_messages_round_trip),
        cmocka_unit_test(test_decoded_instances_hold_the_wire_values),
        cmocka_unit_test(test_defaults_are_neither_required_nor_written),
        cmocka_unit_test(test_every_bad_mig_field_is_refused_by_name),
        cmocka_unit_test(test_too_many_instances_or_plans_are_refused),
        cmocka_unit_test(test_fit_drops_instances_a_decoder_would_refuse),
        cmocka_unit_test(test_a_failed_result_needs_its_error_to_encode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

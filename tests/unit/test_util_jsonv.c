/* test_util_jsonv.c - the field-table decoder: every kind decoded, every
 * class of error with its exact message (unknown with a suggestion, missing,
 * wrong type, out of range, bad enum, NUL, invalid UTF-8, too many items),
 * nested paths, a destination left as it was on error, PATCH presence,
 * release freeing everything (ASan reports leaks), and the UTF-8 checker's
 * vectors. */
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

#include "util/jsonv.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static const char *const policies[] = {"fifo", "priority", "fairshare", NULL};

struct limits {
    int64_t memory_mib;
    double share;
    enum jsonv_presence share_p;
};

struct quota {
    char *pool;
    uint32_t gpus;
};

struct job {
    char *name;
    int64_t gpus;
    enum jsonv_presence gpus_p;
    uint32_t priority;
    double fraction;
    bool exclusive;
    int policy;
    char **tags;
    size_t ntags;
    struct limits limits;
    enum jsonv_presence limits_p;
    struct quota *quotas;
    size_t nquotas;
    json_t *env;
    char *comment;
    enum jsonv_presence comment_p;
};

static const struct jsonv_field limits_fields[] = {
    {.name = "memory_mib",
     .kind = JSONV_INT64,
     .offset = offsetof(struct limits, memory_mib),
     .min = 1,
     .max = 1 << 20},
    {.name = "share",
     .kind = JSONV_DOUBLE,
     .flags = JSONV_NULLABLE | JSONV_PRESENCE,
     .offset = offsetof(struct limits, share),
     .dmin = 0,
     .dmax = 1,
     .presence_offset = offsetof(struct limits, share_p)},
};

static const struct jsonv_field quota_fields[] = {
    {.name = "pool",
     .kind = JSONV_STRING,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct quota, pool),
     .min = 1,
     .max = 32},
    {.name = "gpus", .kind = JSONV_UINT32, .offset = offsetof(struct quota, gpus), .max = 64},
};

static const struct jsonv_field job_fields[] = {
    {.name = "name",
     .kind = JSONV_STRING,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct job, name),
     .min = 1,
     .max = 16},
    {.name = "gpus",
     .kind = JSONV_INT64,
     .flags = JSONV_PRESENCE,
     .offset = offsetof(struct job, gpus),
     .min = 0,
     .max = 1024,
     .presence_offset = offsetof(struct job, gpus_p)},
    {.name = "priority", .kind = JSONV_UINT32, .offset = offsetof(struct job, priority)},
    {.name = "fraction",
     .kind = JSONV_DOUBLE,
     .offset = offsetof(struct job, fraction),
     .dmin = 0,
     .dmax = 1},
    {.name = "exclusive", .kind = JSONV_BOOL, .offset = offsetof(struct job, exclusive)},
    {.name = "policy",
     .kind = JSONV_ENUM,
     .offset = offsetof(struct job, policy),
     .choices = policies},
    {.name = "tags",
     .kind = JSONV_STRINGS,
     .offset = offsetof(struct job, tags),
     .count_offset = offsetof(struct job, ntags),
     .max_items = 4,
     .min = 1,
     .max = 8},
    {.name = "limits",
     .kind = JSONV_OBJECT,
     .flags = JSONV_NULLABLE | JSONV_PRESENCE,
     .offset = offsetof(struct job, limits),
     .sub = limits_fields,
     .nsub = ARRAY_LEN(limits_fields),
     .presence_offset = offsetof(struct job, limits_p)},
    {.name = "quotas",
     .kind = JSONV_OBJECTS,
     .flags = JSONV_NULLABLE,
     .offset = offsetof(struct job, quotas),
     .count_offset = offsetof(struct job, nquotas),
     .max_items = 3,
     .elem_size = sizeof(struct quota),
     .sub = quota_fields,
     .nsub = ARRAY_LEN(quota_fields)},
    {.name = "env", .kind = JSONV_RAW, .offset = offsetof(struct job, env)},
    {.name = "comment",
     .kind = JSONV_STRING,
     .flags = JSONV_NULLABLE | JSONV_PRESENCE,
     .offset = offsetof(struct job, comment),
     .presence_offset = offsetof(struct job, comment_p)},
};
#define NJOB ARRAY_LEN(job_fields)

/* Defaults a handler would set before decoding. */
static void job_defaults(struct job *j)
{
    memset(j, 0, sizeof(*j));
    j->gpus = 1;
    j->gpus_p = 99; /* not an enum value: shows when a presence was written */
    j->fraction = 0.5;
    j->policy = 1;
    j->limits.memory_mib = 1024;
    j->limits.share = 0.25;
}

static json_t *parse(const char *text)
{
    json_error_t jerr;
    json_t *j = json_loads(text, JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
    if (!j)
        fail_msg("test JSON does not parse: %s: %s", text, jerr.text);
    return j;
}

static int decode_text(const char *text, struct job *job, char *err, size_t errlen)
{
    json_t *j = parse(text);
    int rc = jsonv_decode(j, job_fields, NJOB, job, err, errlen);
    json_decref(j);
    return rc;
}

/* The body is refused with exactly this code and message, and a destination
 * holding defaults is left byte for byte as it was. */
static void expect_error(const char *text, int code, const char *msg)
{
    struct job job, fresh;
    job_defaults(&job);
    job_defaults(&fresh);
    char err[256];
    int rc = decode_text(text, &job, err, sizeof(err));
    if (rc != code || strcmp(err, msg) != 0)
        fail_msg("%s:\n got  %d '%s'\n want %d '%s'", text, rc, err, code, msg);
    assert_memory_equal(&job, &fresh, sizeof(job));
}

static void test_decode_fills_every_kind(void **state)
{
    (void)state;
    json_t *body = parse("{\"name\": \"train-llm\", \"gpus\": 8, \"priority\": 4294967295,"
                         " \"fraction\": 1, \"exclusive\": true, \"policy\": \"fairshare\","
                         " \"tags\": [\"a\", \"bb\", \"h\\u00e9\"],"
                         " \"limits\": {\"memory_mib\": 81920, \"share\": 0.75},"
                         " \"quotas\": [{\"pool\": \"h100\", \"gpus\": 64}, {\"pool\": \"a100\"}],"
                         " \"env\": {\"A\": \"1\"}, \"comment\": \"first\"}");
    struct job job;
    job_defaults(&job);
    char err[256] = "untouched";
    assert_int_equal(jsonv_decode(body, job_fields, NJOB, &job, err, sizeof(err)), 0);
    assert_string_equal(err, "");
    assert_string_equal(job.name, "train-llm");
    assert_int_equal(job.gpus, 8);
    assert_int_equal(job.gpus_p, JSONV_GIVEN);
    assert_int_equal(job.priority, UINT32_MAX);
    assert_true(job.fraction == 1.0); /* an integer is a fine number */
    assert_true(job.exclusive);
    assert_int_equal(job.policy, 2);
    assert_int_equal(job.ntags, 3);
    assert_string_equal(job.tags[0], "a");
    assert_string_equal(job.tags[1], "bb");
    assert_string_equal(job.tags[2], "h\xc3\xa9");
    assert_null(job.tags[3]);
    assert_int_equal(job.limits.memory_mib, 81920);
    assert_true(job.limits.share == 0.75);
    assert_int_equal(job.limits.share_p, JSONV_GIVEN);
    assert_int_equal(job.limits_p, JSONV_GIVEN);
    assert_int_equal(job.nquotas, 2);
    assert_string_equal(job.quotas[0].pool, "h100");
    assert_int_equal(job.quotas[0].gpus, 64);
    assert_string_equal(job.quotas[1].pool, "a100");
    assert_int_equal(job.quotas[1].gpus, 0);                 /* elements start zeroed */
    assert_ptr_equal(job.env, json_object_get(body, "env")); /* borrowed */
    assert_string_equal(job.comment, "first");
    assert_int_equal(job.comment_p, JSONV_GIVEN);
    jsonv_release(job_fields, NJOB, &job);
    json_decref(body);
}

static void test_absent_fields_keep_their_defaults(void **state)
{
    (void)state;
    struct job job;
    job_defaults(&job);
    assert_int_equal(decode_text("{\"name\": \"x\"}", &job, NULL, 0), 0);
    assert_string_equal(job.name, "x");
    assert_int_equal(job.gpus, 1);
    assert_int_equal(job.gpus_p, JSONV_ABSENT);
    assert_true(job.fraction == 0.5);
    assert_int_equal(job.policy, 1);
    assert_null(job.tags);
    assert_int_equal(job.limits.memory_mib, 1024);
    assert_int_equal(job.limits_p, JSONV_ABSENT);
    assert_int_equal(job.limits.share_p, JSONV_ABSENT);
    assert_null(job.quotas);
    assert_null(job.comment);
    assert_int_equal(job.comment_p, JSONV_ABSENT);
    jsonv_release(job_fields, NJOB, &job);
}

static void test_empty_arrays_are_non_null_with_count_zero(void **state)
{
    (void)state;
    struct job job;
    job_defaults(&job);
    assert_int_equal(decode_text("{\"name\": \"x\", \"tags\": [], \"quotas\": []}", &job, NULL, 0),
                     0);
    assert_non_null(job.tags);
    assert_null(job.tags[0]);
    assert_int_equal(job.ntags, 0);
    assert_non_null(job.quotas);
    assert_int_equal(job.nquotas, 0);
    jsonv_release(job_fields, NJOB, &job);
}

static void test_non_object_input_is_refused(void **state)
{
    (void)state;
    expect_error("[1, 2]", GPO_EINVAL, "expected an object, got an array");
    expect_error("\"name\"", GPO_EINVAL, "expected an object, got a string");
    expect_error("null", GPO_EINVAL, "expected an object, got null");
    struct job job;
    job_defaults(&job);
    char err[64];
    assert_int_equal(jsonv_decode(NULL, job_fields, NJOB, &job, err, sizeof(err)), GPO_EINVAL);
    json_t *o = json_object();
    assert_int_equal(jsonv_decode(o, job_fields, NJOB, NULL, err, sizeof(err)), GPO_EINVAL);
    json_decref(o);
}

static void test_unknown_fields_are_named_with_a_suggestion(void **state)
{
    (void)state;
    expect_error("{\"name\": \"x\", \"gpu\": 1}", GPO_EINVAL,
                 "unknown field 'gpu' (did you mean 'gpus'?)");
    expect_error("{\"name\": \"x\", \"GPUS\": 1}", GPO_EINVAL,
                 "unknown field 'GPUS' (did you mean 'gpus'?)");
    expect_error("{\"nmae\": \"x\"}", GPO_EINVAL, "unknown field 'nmae' (did you mean 'name'?)");
    expect_error("{\"name\": \"x\", \"polcy\": \"fifo\"}", GPO_EINVAL,
                 "unknown field 'polcy' (did you mean 'policy'?)");
    expect_error("{\"name\": \"x\", \"colour\": 1}", GPO_EINVAL, "unknown field 'colour'");
    expect_error("{\"name\": \"x\", \"limits\": {\"memory\": 1}}", GPO_EINVAL,
                 "unknown field 'limits.memory'");
    expect_error("{\"name\": \"x\", \"limits\": {\"shares\": 1}}", GPO_EINVAL,
                 "unknown field 'limits.shares' (did you mean 'share'?)");
    expect_error(
        "{\"name\": \"x\", \"quotas\": [{\"pool\": \"a\"}, {\"pool\": \"b\", \"gpu\": 1}]}",
        GPO_EINVAL, "unknown field 'quotas[1].gpu' (did you mean 'gpus'?)");
    /* Unknown keys come before missing ones: the typo is the real problem. */
    expect_error("{\"nam\": \"x\"}", GPO_EINVAL, "unknown field 'nam' (did you mean 'name'?)");
}

static void test_user_text_in_messages_is_shortened_and_made_printable(void **state)
{
    (void)state;
    expect_error("{\"name\": \"x\", \"a\\nb\\u007f\": 1}", GPO_EINVAL, "unknown field 'a?b?'");
    char text[512], want[256];
    snprintf(text, sizeof(text), "{\"name\": \"x\", \"%s\": 1}",
             "0123456789012345678901234567890123456789TAIL");
    expect_error(text, GPO_EINVAL, "unknown field '0123456789012345678901234567890123456789...'");
    /* Two-byte characters are never split: 20 of them fill the 40 bytes. */
    char key[128] = "";
    for (int i = 0; i < 25; i++)
        snprintf(key + strlen(key), sizeof(key) - strlen(key), "\xc3\xa9");
    snprintf(text, sizeof(text), "{\"name\": \"x\", \"%s\": 1}", key);
    key[40] = '\0';
    snprintf(want, sizeof(want), "unknown field '%s...'", key);
    expect_error(text, GPO_EINVAL, want);

    /* A short err buffer gets a terminated, valid UTF-8 prefix. */
    struct job job;
    job_defaults(&job);
    for (size_t len = 1; len < 40; len++) {
        char err[64];
        memset(err, 'x', sizeof(err));
        assert_int_equal(decode_text(text, &job, err, len), GPO_EINVAL);
        assert_true(strlen(err) < len);
        assert_int_equal(jsonv_check_utf8(err, strlen(err)), 0);
        assert_int_equal(err[len], 'x');
    }
    assert_int_equal(decode_text(text, &job, NULL, 0), GPO_EINVAL);
}

static void test_missing_required_fields_are_named_by_path(void **state)
{
    (void)state;
    expect_error("{}", GPO_EINVAL, "missing required field 'name'");
    expect_error("{\"gpus\": 2}", GPO_EINVAL, "missing required field 'name'");
    expect_error(
        "{\"name\": \"x\", \"quotas\": [{\"pool\": \"a\"}, {\"pool\": \"b\"}, {\"gpus\": 1}]}",
        GPO_EINVAL, "missing required field 'quotas[2].pool'");
}

static void test_wrong_types_name_expected_and_given(void **state)
{
    (void)state;
    expect_error("{\"name\": \"x\", \"gpus\": \"8\"}", GPO_EINVAL,
                 "field 'gpus': expected an integer, got a string");
    expect_error("{\"name\": \"x\", \"gpus\": 2.0}", GPO_EINVAL,
                 "field 'gpus': expected an integer, got a real number");
    expect_error("{\"name\": \"x\", \"gpus\": 1e3}", GPO_EINVAL,
                 "field 'gpus': expected an integer, got a real number");
    expect_error("{\"name\": \"x\", \"gpus\": true}", GPO_EINVAL,
                 "field 'gpus': expected an integer, got a boolean");
    expect_error("{\"name\": \"x\", \"gpus\": null}", GPO_EINVAL,
                 "field 'gpus': expected an integer, got null");
    expect_error("{\"name\": 5}", GPO_EINVAL, "field 'name': expected a string, got an integer");
    expect_error("{\"name\": null}", GPO_EINVAL, "field 'name': expected a string, got null");
    expect_error("{\"name\": \"x\", \"exclusive\": 1}", GPO_EINVAL,
                 "field 'exclusive': expected a boolean, got an integer");
    expect_error("{\"name\": \"x\", \"fraction\": \"0.5\"}", GPO_EINVAL,
                 "field 'fraction': expected a number, got a string");
    expect_error("{\"name\": \"x\", \"policy\": 1}", GPO_EINVAL,
                 "field 'policy': expected a string, got an integer");
    expect_error("{\"name\": \"x\", \"tags\": \"a\"}", GPO_EINVAL,
                 "field 'tags': expected an array of strings, got a string");
    expect_error("{\"name\": \"x\", \"tags\": [\"a\", 1]}", GPO_EINVAL,
                 "field 'tags[1]': expected a string, got an integer");
    expect_error("{\"name\": \"x\", \"limits\": []}", GPO_EINVAL,
                 "field 'limits': expected an object, got an array");
    expect_error("{\"name\": \"x\", \"limits\": {\"memory_mib\": {}}}", GPO_EINVAL,
                 "field 'limits.memory_mib': expected an integer, got an object");
    expect_error("{\"name\": \"x\", \"quotas\": {}}", GPO_EINVAL,
                 "field 'quotas': expected an array of objects, got an object");
    expect_error("{\"name\": \"x\", \"quotas\": [{\"pool\": \"a\"}, 7]}", GPO_EINVAL,
                 "field 'quotas[1]': expected an object, got an integer");
    expect_error("{\"name\": \"x\", \"env\": null}", GPO_EINVAL,
                 "field 'env': expected a value, got null");
}

static void test_out_of_range_values_name_the_range(void **state)
{
    (void)state;
    expect_error("{\"name\": \"x\", \"gpus\": 5000}", GPO_ERANGE,
                 "field 'gpus': 5000 is out of range 0..1024");
    expect_error("{\"name\": \"x\", \"gpus\": -1}", GPO_ERANGE,
                 "field 'gpus': -1 is out of range 0..1024");
    expect_error("{\"name\": \"x\", \"priority\": -1}", GPO_ERANGE,
                 "field 'priority': -1 is out of range 0..4294967295");
    expect_error("{\"name\": \"x\", \"priority\": 4294967296}", GPO_ERANGE,
                 "field 'priority': 4294967296 is out of range 0..4294967295");
    expect_error("{\"name\": \"x\", \"fraction\": 1.5}", GPO_ERANGE,
                 "field 'fraction': 1.5 is out of range 0..1");
    expect_error("{\"name\": \"x\", \"fraction\": -0.25}", GPO_ERANGE,
                 "field 'fraction': -0.25 is out of range 0..1");
    expect_error("{\"name\": \"\"}", GPO_ERANGE,
                 "field 'name': length 0 is out of range 1..16 bytes");
    expect_error("{\"name\": \"abcdefghijklmnopq\"}", GPO_ERANGE,
                 "field 'name': length 17 is out of range 1..16 bytes");
    /* Length counts bytes: eight two-byte characters are 16 bytes, nine are 18. */
    expect_error("{\"name\": \"\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\"}",
                 GPO_ERANGE, "field 'name': length 18 is out of range 1..16 bytes");
    expect_error("{\"name\": \"x\", \"tags\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", GPO_ERANGE,
                 "field 'tags': 5 items, at most 4 allowed");
    expect_error("{\"name\": \"x\", \"tags\": [\"a\", \"abcdefghi\"]}", GPO_ERANGE,
                 "field 'tags[1]': length 9 is out of range 1..8 bytes");
    expect_error("{\"name\": \"x\", \"limits\": {\"memory_mib\": 0}}", GPO_ERANGE,
                 "field 'limits.memory_mib': 0 is out of range 1..1048576");
    expect_error("{\"name\": \"x\", \"quotas\": [{\"pool\": \"a\", \"gpus\": 65}]}", GPO_ERANGE,
                 "field 'quotas[0].gpus': 65 is out of range 0..64");
    expect_error("{\"name\": \"x\", \"quotas\": [{\"pool\": \"a\"}, {\"pool\": \"b\"},"
                 " {\"pool\": \"c\"}, {\"pool\": \"d\"}]}",
                 GPO_ERANGE, "field 'quotas': 4 items, at most 3 allowed");

    /* Without bounds, a string gets the default cap. */
    char text[JSONV_STRING_MAX + 64];
    int n = snprintf(text, sizeof(text), "{\"name\": \"x\", \"comment\": \"");
    memset(text + n, 'c', JSONV_STRING_MAX + 1);
    snprintf(text + n + JSONV_STRING_MAX + 1, sizeof(text) - (size_t)n - JSONV_STRING_MAX - 1,
             "\"}");
    expect_error(text, GPO_ERANGE, "field 'comment': length 4097 is out of range 0..4096 bytes");
    text[n + JSONV_STRING_MAX] = '"';
    text[n + JSONV_STRING_MAX + 1] = '}';
    text[n + JSONV_STRING_MAX + 2] = '\0';
    struct job job;
    job_defaults(&job);
    assert_int_equal(decode_text(text, &job, NULL, 0), 0);
    assert_int_equal(strlen(job.comment), JSONV_STRING_MAX);
    jsonv_release(job_fields, NJOB, &job);
}

static void test_int64_without_bounds_takes_the_whole_range(void **state)
{
    (void)state;
    struct big {
        int64_t v;
    } b = {0};
    static const struct jsonv_field f[] = {
        {.name = "v", .kind = JSONV_INT64, .offset = offsetof(struct big, v)},
    };
    json_t *j = parse("{\"v\": 9223372036854775807}");
    assert_int_equal(jsonv_decode(j, f, 1, &b, NULL, 0), 0);
    assert_true(b.v == INT64_MAX);
    json_decref(j);
    j = parse("{\"v\": -9223372036854775808}");
    assert_int_equal(jsonv_decode(j, f, 1, &b, NULL, 0), 0);
    assert_true(b.v == INT64_MIN);
    json_decref(j);
}

static void test_enum_maps_strings_to_indices(void **state)
{
    (void)state;
    struct job job;
    job_defaults(&job);
    assert_int_equal(decode_text("{\"name\": \"x\", \"policy\": \"fifo\"}", &job, NULL, 0), 0);
    assert_int_equal(job.policy, 0);
    assert_int_equal(decode_text("{\"name\": \"x\", \"policy\": \"fairshare\"}", &job, NULL, 0), 0);
    assert_int_equal(job.policy, 2);
    jsonv_release(job_fields, NJOB, &job);
    expect_error("{\"name\": \"x\", \"policy\": \"lottery\"}", GPO_EINVAL,
                 "field 'policy': 'lottery' is not one of fifo, priority, fairshare");
    expect_error("{\"name\": \"x\", \"policy\": \"FIFO\"}", GPO_EINVAL,
                 "field 'policy': 'FIFO' is not one of fifo, priority, fairshare");
    expect_error("{\"name\": \"x\", \"policy\": \"\"}", GPO_EINVAL,
                 "field 'policy': '' is not one of fifo, priority, fairshare");
}

static void test_nul_characters_are_refused(void **state)
{
    (void)state;
    expect_error("{\"name\": \"a\\u0000b\"}", GPO_EINVAL,
                 "field 'name': contains a NUL character (\\u0000)");
    expect_error("{\"name\": \"x\", \"tags\": [\"ok\", \"\\u0000\"]}", GPO_EINVAL,
                 "field 'tags[1]': contains a NUL character (\\u0000)");
    expect_error("{\"name\": \"x\", \"policy\": \"fifo\\u0000\"}", GPO_EINVAL,
                 "field 'policy': contains a NUL character (\\u0000)");
    /* A key with a NUL (jansson keeps its length). */
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string("x"));
    json_object_setn_new(o, "gpus\0x", 6, json_integer(1));
    struct job job, fresh;
    job_defaults(&job);
    job_defaults(&fresh);
    char err[128];
    assert_int_equal(jsonv_decode(o, job_fields, NJOB, &job, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "a field name contains a NUL character (\\u0000)");
    assert_memory_equal(&job, &fresh, sizeof(job));
    json_decref(o);
}

static void test_invalid_utf8_from_nocheck_values_is_refused(void **state)
{
    (void)state;
    json_t *o = json_object();
    json_object_set_new(o, "name", json_stringn_nocheck("\xed\xa0\x80", 3));
    struct job job, fresh;
    job_defaults(&job);
    job_defaults(&fresh);
    char err[128];
    assert_int_equal(jsonv_decode(o, job_fields, NJOB, &job, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "field 'name': not valid UTF-8");
    json_object_clear(o);
    json_object_set_new_nocheck(o, "\xc0\xaf", json_integer(1));
    assert_int_equal(jsonv_decode(o, job_fields, NJOB, &job, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "a field name is not valid UTF-8");
    assert_memory_equal(&job, &fresh, sizeof(job));
    json_decref(o);
}

static void test_error_leaves_a_decoded_destination_unchanged(void **state)
{
    (void)state;
    struct job job;
    job_defaults(&job);
    assert_int_equal(
        decode_text("{\"name\": \"keep\", \"tags\": [\"t\"], \"quotas\": [{\"pool\": \"p\"}],"
                    " \"comment\": \"c\", \"gpus\": 3}",
                    &job, NULL, 0),
        0);
    struct job before;
    memcpy(&before, &job, sizeof(job));
    /* Valid strings, arrays and elements come before the bad last element:
     * all were allocated, all must be freed, none stored. */
    char err[128];
    assert_int_equal(decode_text("{\"name\": \"new\", \"gpus\": 4, \"tags\": [\"u\", \"v\"],"
                                 " \"comment\": \"d\", \"quotas\": [{\"pool\": \"q\"},"
                                 " {\"pool\": \"r\", \"gpus\": 99}]}",
                                 &job, err, sizeof(err)),
                     GPO_ERANGE);
    assert_string_equal(err, "field 'quotas[1].gpus': 99 is out of range 0..64");
    assert_memory_equal(&job, &before, sizeof(job));
    assert_string_equal(job.name, "keep");
    assert_string_equal(job.tags[0], "t");
    assert_string_equal(job.quotas[0].pool, "p");
    jsonv_release(job_fields, NJOB, &job);
}

static void test_patch_tells_absent_from_given_and_null(void **state)
{
    (void)state;
    struct job job;
    job_defaults(&job);
    assert_int_equal(decode_text("{\"name\": \"a\", \"gpus\": 2, \"comment\": \"hello\","
                                 " \"tags\": [\"t\"], \"quotas\": [{\"pool\": \"p\"}],"
                                 " \"limits\": {\"share\": 0.5}}",
                                 &job, NULL, 0),
                     0);
    /* The PATCH replaces name (the old string is freed), clears comment and
     * quotas, and leaves gpus and tags alone. */
    assert_int_equal(
        decode_text("{\"name\": \"b\", \"comment\": null, \"quotas\": null}", &job, NULL, 0), 0);
    assert_string_equal(job.name, "b");
    assert_int_equal(job.gpus, 2);
    assert_int_equal(job.gpus_p, JSONV_ABSENT);
    assert_null(job.comment);
    assert_int_equal(job.comment_p, JSONV_NULL);
    assert_null(job.quotas);
    assert_int_equal(job.nquotas, 0);
    assert_string_equal(job.tags[0], "t");
    assert_int_equal(job.limits_p, JSONV_ABSENT);
    assert_int_equal(job.limits.share_p, JSONV_ABSENT);
    assert_true(job.limits.share == 0.5);

    /* Nested: a null inside an object, and a null object. */
    assert_int_equal(decode_text("{\"name\": \"b\", \"limits\": {\"share\": null}}", &job, NULL, 0),
                     0);
    assert_int_equal(job.limits_p, JSONV_GIVEN);
    assert_int_equal(job.limits.share_p, JSONV_NULL);
    assert_true(job.limits.share == 0.5); /* scalars keep their value under null */
    assert_int_equal(decode_text("{\"name\": \"b\", \"limits\": null}", &job, NULL, 0), 0);
    assert_int_equal(job.limits_p, JSONV_NULL);
    assert_int_equal(job.limits.share_p, JSONV_ABSENT);
    assert_int_equal(job.limits.memory_mib, 1024);
    jsonv_release(job_fields, NJOB, &job);
}

static void test_release_frees_everything_and_is_repeatable(void **state)
{
    (void)state;
    struct job job;
    job_defaults(&job);
    json_t *body = parse("{\"name\": \"a\", \"tags\": [\"x\", \"y\"], \"comment\": \"c\","
                         " \"quotas\": [{\"pool\": \"p\"}, {\"pool\": \"q\"}], \"env\": [1]}");
    assert_int_equal(jsonv_decode(body, job_fields, NJOB, &job, NULL, 0), 0);
    /* Decoding again over owned values replaces them without leaking. */
    assert_int_equal(jsonv_decode(body, job_fields, NJOB, &job, NULL, 0), 0);
    jsonv_release(job_fields, NJOB, &job);
    assert_null(job.name);
    assert_null(job.tags);
    assert_int_equal(job.ntags, 0);
    assert_null(job.quotas);
    assert_int_equal(job.nquotas, 0);
    assert_null(job.comment);
    assert_null(job.env);
    assert_int_equal(job.gpus, 1); /* scalars are left alone */
    jsonv_release(job_fields, NJOB, &job);
    jsonv_release(job_fields, NJOB, NULL);
    json_decref(body);
}

static void test_bad_tables_are_refused(void **state)
{
    (void)state;
    struct job job;
    job_defaults(&job);
    char err[128];
    json_t *o = parse("{\"policy\": \"fifo\"}");
    static const struct jsonv_field no_choices[] = {
        {.name = "policy", .kind = JSONV_ENUM, .offset = offsetof(struct job, policy)},
    };
    assert_int_equal(jsonv_decode(o, no_choices, 1, &job, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "jsonv: bad table entry 0 ('policy')");
    static const struct jsonv_field bad_kind[] = {
        {.name = "policy", .kind = (enum jsonv_kind)99},
    };
    assert_int_equal(jsonv_decode(o, bad_kind, 1, &job, err, sizeof(err)), GPO_EINVAL);
    static const struct jsonv_field no_size[] = {
        {.name = "policy", .kind = JSONV_OBJECTS, .sub = quota_fields, .nsub = 2},
    };
    assert_int_equal(jsonv_decode(o, no_size, 1, &job, err, sizeof(err)), GPO_EINVAL);
    json_decref(o);
}

struct utf8_case {
    const char *bytes;
    size_t len;
    const char *what;
};

#define U8(s, what)                                                                                \
    {                                                                                              \
        s, sizeof(s) - 1, what                                                                     \
    }

static void test_utf8_checker_vectors(void **state)
{
    (void)state;
    static const struct utf8_case good[] = {
        U8("", "empty"),
        U8("plain ascii", "ASCII"),
        U8("a\0b", "NUL is valid UTF-8"),
        U8("\xc2\x80", "U+0080, smallest two-byte"),
        U8("\xc3\xa9", "e acute"),
        U8("\xdf\xbf", "U+07FF"),
        U8("\xe0\xa0\x80", "U+0800, smallest three-byte"),
        U8("\xe2\x82\xac", "euro sign"),
        U8("\xed\x9f\xbf", "U+D7FF, just below the surrogates"),
        U8("\xee\x80\x80", "U+E000, just above the surrogates"),
        U8("\xef\xbf\xbf", "U+FFFF"),
        U8("\xf0\x90\x80\x80", "U+10000, smallest four-byte"),
        U8("\xf0\x9d\x84\x9e", "musical G clef"),
        U8("\xf4\x8f\xbf\xbf", "U+10FFFF, the last code point"),
    };
    static const struct utf8_case bad[] = {
        U8("\xc0\xaf", "overlong '/' in two bytes"),
        U8("\xc1\xbf", "overlong in two bytes"),
        U8("\xe0\x80\xaf", "overlong '/' in three bytes"),
        U8("\xe0\x9f\xbf", "overlong U+07FF in three bytes"),
        U8("\xf0\x80\x80\xaf", "overlong '/' in four bytes"),
        U8("\xf0\x8f\xbf\xbf", "overlong U+FFFF in four bytes"),
        U8("\xed\xa0\x80", "surrogate U+D800"),
        U8("\xed\xbf\xbf", "surrogate U+DFFF"),
        U8("\xf4\x90\x80\x80", "U+110000, past the last code point"),
        U8("\xf5\x80\x80\x80", "lead byte F5"),
        U8("\xf8\x88\x80\x80\x80", "five-byte form"),
        U8("\xff", "byte FF"),
        U8("\x80", "lone continuation byte"),
        U8("a\xbf", "continuation after ASCII"),
        U8("\xc3", "truncated two-byte"),
        U8("\xe2\x82", "truncated three-byte"),
        U8("\xf0\x9d\x84", "truncated four-byte"),
        U8("\xc3\x28", "bad continuation in two bytes"),
        U8("\xe2\x28\xac", "bad second byte in three bytes"),
        U8("\xe2\x82\x28", "bad third byte in three bytes"),
        U8("\xf0\x9d\x28\x9e", "bad third byte in four bytes"),
        U8("\xf0\x9d\x84\x28", "bad fourth byte in four bytes"),
        U8("ok\xc3\xa9\xe2\x82", "truncated after valid text"),
    };
    for (size_t i = 0; i < ARRAY_LEN(good); i++)
        if (jsonv_check_utf8(good[i].bytes, good[i].len) != 0)
            fail_msg("refused valid: %s", good[i].what);
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        if (jsonv_check_utf8(bad[i].bytes, bad[i].len) != GPO_EINVAL)
            fail_msg("accepted invalid: %s", bad[i].what);
    /* The length bounds the check: a valid prefix of an invalid buffer is valid. */
    assert_int_equal(jsonv_check_utf8("ab\xff", 2), 0);
    assert_int_equal(jsonv_check_utf8(NULL, 0), 0);
    assert_int_equal(jsonv_check_utf8(NULL, 1), GPO_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_fills_every_kind),
        cmocka_unit_test(test_absent_fields_keep_their_defaults),
        cmocka_unit_test(test_empty_arrays_are_non_null_with_count_zero),
        cmocka_unit_test(test_non_object_input_is_refused),
        cmocka_unit_test(test_unknown_fields_are_named_with_a_suggestion),
        cmocka_unit_test(test_user_text_in_messages_is_shortened_and_made_printable),
        cmocka_unit_test(test_missing_required_fields_are_named_by_path),
        cmocka_unit_test(test_wrong_types_name_expected_and_given),
        cmocka_unit_test(test_out_of_range_values_name_the_range),
        cmocka_unit_test(test_int64_without_bounds_takes_the_whole_range),
        cmocka_unit_test(test_enum_maps_strings_to_indices),
        cmocka_unit_test(test_nul_characters_are_refused),
        cmocka_unit_test(test_invalid_utf8_from_nocheck_values_is_refused),
        cmocka_unit_test(test_error_leaves_a_decoded_destination_unchanged),
        cmocka_unit_test(test_patch_tells_absent_from_given_and_null),
        cmocka_unit_test(test_release_frees_everything_and_is_repeatable),
        cmocka_unit_test(test_bad_tables_are_refused),
        cmocka_unit_test(test_utf8_checker_vectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

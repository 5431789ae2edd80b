/* test_util_text.c - one line of printable text: C0, DEL and C1 are found
 * where they are, and named with their offset; printable UTF-8 (accents,
 * CJK, emoji) passes; fitting text replaces every control character and
 * cuts between characters; jsonv's JSONV_TEXT fields refuse the same. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "base/err.h"
#include "util/jsonv.h"
#include "util/text.h"
#include "base/banned.h"

static void test_control_characters_are_found_where_they_are(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        size_t at;
        unsigned code;
    } cases[] = {
        {"a\nb", 1, 0x0A},       {"\x1b[31m", 0, 0x1B},         {"ab\x7f", 2, 0x7F},
        {"x\xc2\x85y", 1, 0x85}, {"\xc3\xa9\xc2\x9f", 2, 0x9F}, {"tab\there", 3, 0x09},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        size_t at = text_control_at(cases[k].s, strlen(cases[k].s));
        assert_int_equal(at, cases[k].at);
        assert_int_equal(text_control_code(cases[k].s, at), cases[k].code);
    }
}

static void test_printable_utf8_is_one_line(void **state)
{
    (void)state;
    static const char *const ok[] = {"",
                                     "gpu-0",
                                     "caf\xc3\xa9",
                                     "\xe6\x97\xa5\xe6\x9c\xac",
                                     "\xf0\x9f\x9a\x80",
                                     "\xc2\xa0nbsp",
                                     "a b"};
    for (size_t k = 0; k < sizeof(ok) / sizeof(ok[0]); k++) {
        assert_int_equal(text_control_at(ok[k], strlen(ok[k])), strlen(ok[k]));
        assert_int_equal(text_check_line("label", ok[k], NULL, 0), 0);
    }
    assert_int_equal(text_check_line("label", NULL, NULL, 0), 0);
    assert_int_equal(text_control_at(NULL, 0), 0);
}

static void test_a_refusal_names_the_field_the_character_and_the_byte(void **state)
{
    (void)state;
    char err[160];
    assert_int_equal(text_check_line("gpus[1].uuid", "GPU-1\n", err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, "field 'gpus[1].uuid': a control character (U+000A) at byte 5 (one "
                             "line of printable text is expected)");
}

static void test_fitting_replaces_controls_and_cuts_between_characters(void **state)
{
    (void)state;
    char a[] = "a\nb\xc2\x85"
               "c\x7f";
    assert_string_equal(text_fit_line(a, 64), "a?b??c?");
    char b[] = "\xc3\xa9\xc3\xa9\xc3\xa9"; /* three 2-byte characters: cut to 2 of them */
    assert_string_equal(text_fit_line(b, 5), "\xc3\xa9\xc3\xa9");
    char c[] = "bad \xff byte";
    assert_string_equal(text_fit_line(c, 64), "bad ? byte");
    assert_null(text_fit_line(NULL, 4));
}

struct one {
    char *s;
    char **v;
    size_t n;
};

static void test_jsonv_text_fields_refuse_control_characters(void **state)
{
    (void)state;
    static const struct jsonv_field fields[] = {
        {.name = "s", .kind = JSONV_STRING, .flags = JSONV_TEXT, .offset = offsetof(struct one, s)},
        {.name = "v",
         .kind = JSONV_STRINGS,
         .flags = JSONV_TEXT,
         .offset = offsetof(struct one, v),
         .count_offset = offsetof(struct one, n)},
    };
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"{\"s\": \"a\\u0007\"}", "field 's': a control character (U+0007) at byte 1"},
        {"{\"v\": [\"ok\", \"\\u009b2J\"]}",
         "field 'v[1]': a control character (U+009B) at byte 0"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        json_t *o = json_loads(cases[k].text, 0, NULL);
        struct one d = {0};
        char err[200];
        assert_int_equal(jsonv_decode(o, fields, 2, &d, err, sizeof(err)), GPO_EINVAL);
        if (!strstr(err, cases[k].msg))
            fail_msg("%s: '%s'", cases[k].text, err);
        json_decref(o);
    }
    json_t *o = json_loads("{\"s\": \"caf\\u00e9\", \"v\": [\"\\u00a0\"]}", 0, NULL);
    struct one d = {0};
    assert_int_equal(jsonv_decode(o, fields, 2, &d, NULL, 0), 0);
    jsonv_release(fields, 2, &d);
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_control_characters_are_found_where_they_are),
        cmocka_unit_test(test_printable_utf8_is_one_line),
        cmocka_unit_test(test_a_refusal_names_the_field_the_character_and_the_byte),
        cmocka_unit_test(test_fitting_replaces_controls_and_cuts_between_characters),
        cmocka_unit_test(test_jsonv_text_fields_refuse_control_characters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

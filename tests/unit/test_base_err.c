#define _GNU_SOURCE /* strerrordesc_np */
/*
 * test_base_err.c - the one error space (base/err.h): errno rows equal the
 * negative errno, project codes sit below -GPO_EPROJECT, every code is
 * distinct and has a message and a name, and other values still read.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "base/banned.h"

struct row {
    const char *name;
    int value;
    const char *text;
};

static const struct row rows[] = {
#define ROW(name, value, text) {#name, value, text},
    GPO_ERRNO_MAP(ROW)
#undef ROW
};
#define NROWS (sizeof(rows) / sizeof(rows[0]))

static void codes_are_distinct_and_negative(void **state)
{
    (void)state;
    for (size_t i = 0; i < NROWS; i++) {
        assert_true(rows[i].value < 0);
        for (size_t k = i + 1; k < NROWS; k++) {
            if (rows[i].value == rows[k].value)
                fail_msg("%s and %s share the value %d", rows[i].name, rows[k].name, rows[i].value);
        }
    }
}

static void errno_rows_are_the_negative_errno(void **state)
{
    (void)state;
    assert_int_equal(GPO_EINVAL, -EINVAL);
    assert_int_equal(GPO_ENOMEM, -ENOMEM);
    assert_int_equal(GPO_ENOENT, -ENOENT);
    assert_int_equal(GPO_EEXIST, -EEXIST);
    assert_int_equal(GPO_ETIMEDOUT, -ETIMEDOUT);
    for (size_t i = 0; i < NROWS; i++) {
        /* A row either is an errno value or lies in the project's range. */
        if (rows[i].value > -GPO_EPROJECT)
            assert_true(strncmp(rows[i].name, "E", 1) == 0);
        else
            assert_true(rows[i].value < -GPO_EPROJECT);
    }
    assert_true(GPO_EFENCED < -GPO_EPROJECT);
    assert_true(GPO_EUSAGE < -GPO_EPROJECT);
}

static void every_code_has_its_message_and_name(void **state)
{
    (void)state;
    for (size_t i = 0; i < NROWS; i++) {
        assert_string_equal(gpo_strerror(rows[i].value), rows[i].text);
        assert_true(strlen(rows[i].text) > 3);
        assert_non_null(gpo_errname(rows[i].value));
        assert_string_equal(gpo_errname(rows[i].value), rows[i].name);
    }
    assert_string_equal(gpo_strerror(0), "success");
    assert_string_equal(gpo_strerror(GPO_ENOMEM), "out of memory");
    assert_string_equal(gpo_strerror(GPO_EFENCED), "fenced: a newer leader epoch exists");
}

static void other_values_still_read(void **state)
{
    (void)state;
    /* An errno the table does not list: the C library's words. */
    assert_null(gpo_errname(-EXDEV));
    assert_string_equal(gpo_strerror(-EXDEV), strerrordesc_np(EXDEV));
    /* Nothing names these. */
    assert_string_equal(gpo_strerror(1), "unknown error");
    assert_string_equal(gpo_strerror(-GPO_EPROJECT - 1000), "unknown error");
    assert_string_equal(gpo_strerror(INT32_MIN), "unknown error");
    assert_null(gpo_errname(7));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(codes_are_distinct_and_negative),
        cmocka_unit_test(errno_rows_are_the_negative_errno),
        cmocka_unit_test(every_code_has_its_message_and_name),
        cmocka_unit_test(other_values_still_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

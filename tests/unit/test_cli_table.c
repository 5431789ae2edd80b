/* test_cli_table.c - aligned tables: widths in characters, not bytes; the
 * last column unpadded; control characters shown as '?'. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli/table.h"
#include "base/banned.h"

static void tables_align_columns_by_characters_and_hide_control_characters(void **state)
{
    (void)state;
    static const char *const head[] = {"ID", "NAME", "REASON"};
    struct table *t = table_new(3, head);
    assert_non_null(t);
    const char *r1[] = {"1", "train", "resources: no free GPU"};
    const char *r2[] = {"12", "d\xc3\xa9j\xc3\xa0", NULL}; /* 4 characters, 6 bytes */
    const char *r3[] = {"123", "bad\x1b[2Jname", "x"};
    assert_int_equal(table_add(t, r1), 0);
    assert_int_equal(table_add(t, r2), 0);
    assert_int_equal(table_add(t, r3), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    table_print(t, out);
    fclose(out);
    assert_string_equal(buf, "ID   NAME         REASON\n"
                             "1    train        resources: no free GPU\n"
                             "12   d\xc3\xa9j\xc3\xa0         -\n"
                             "123  bad?[2Jname  x\n");
    free(buf);
    table_free(t);
    table_free(NULL);
}

static void an_empty_table_prints_its_header(void **state)
{
    (void)state;
    static const char *const head[] = {"NAME", "STATE"};
    struct table *t = table_new(2, head);
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    table_print(t, out);
    fclose(out);
    assert_string_equal(buf, "NAME  STATE\n");
    free(buf);
    table_free(t);
    assert_null(table_new(0, head));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tables_align_columns_by_characters_and_hide_control_characters),
        cmocka_unit_test(an_empty_table_prints_its_header),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

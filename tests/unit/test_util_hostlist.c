/* test_util_hostlist.c - Slurm's host-list syntax: compressed names sorted
 * and grouped by prefix, zero-padding kept, names without numbers alone;
 * expansion of ranges, suffixes and several brackets; every syntax error
 * named; round trips; the size limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "util/hostlist.h"
#include "base/banned.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void check_compress(const char *const *names, size_t n, const char *want)
{
    char buf[256];
    int rc = hostlist_compress(names, n, buf, sizeof(buf));
    if (rc != 0)
        fail_msg("compress to '%s': %s", want, gpo_strerror(rc));
    assert_string_equal(buf, want);
}

static void test_consecutive_numbers_become_ranges_in_one_bracket(void **state)
{
    (void)state;
    const char *a[] = {"node01", "node02", "node03", "node04", "node07"};
    check_compress(a, N(a), "node[01-04,07]");
    const char *b[] = {"n3", "n1", "n2", "n5", "n6", "n9"};
    check_compress(b, N(b), "n[1-3,5-6,9]");
}

static void test_a_single_name_has_no_brackets(void **state)
{
    (void)state;
    const char *a[] = {"node07"};
    check_compress(a, N(a), "node07");
    const char *b[] = {"node07", "node07"};
    check_compress(b, N(b), "node07");
    check_compress(NULL, 0, "");
}

static void test_zero_padding_is_part_of_the_name(void **state)
{
    (void)state;
    const char *a[] = {"node08", "node09", "node10", "node11"};
    check_compress(a, N(a), "node[08-11]");
    const char *b[] = {"node9", "node10", "node11"};
    check_compress(b, N(b), "node[9-11]");
    const char *c[] = {"node1", "node01", "node2", "node02"};
    check_compress(c, N(c), "node[1,01,2,02]");
    const char *d[] = {"gpu098", "gpu099", "gpu100", "gpu101"};
    check_compress(d, N(d), "gpu[098-101]");
    /* 09 then 10 stays one range of width 2; 9 then 010 does not. */
    const char *e[] = {"x9", "x010"};
    check_compress(e, N(e), "x[9,010]");
}

static void test_several_prefixes_are_sorted_each_in_its_bracket(void **state)
{
    (void)state;
    const char *a[] = {"gpu2", "cpu1", "gpu1", "cpu2", "cpu3", "a100-node4"};
    check_compress(a, N(a), "a100-node4,cpu[1-3],gpu[1-2]");
    const char *b[] = {"rack1-n1", "rack1-n2", "rack2-n1"};
    check_compress(b, N(b), "rack1-n[1-2],rack2-n1");
}

static void test_names_without_numbers_stay_as_written(void **state)
{
    (void)state;
    const char *a[] = {"login", "head", "node", "node1", "node2"};
    check_compress(a, N(a), "head,login,node,node[1-2]");
    const char *b[] = {"localhost"};
    check_compress(b, N(b), "localhost");
}

static void test_compress_refuses_bad_names_and_small_buffers(void **state)
{
    (void)state;
    char buf[16] = "junk";
    const char *bad[][1] = {{"a,b"}, {"a[1]"}, {""}, {"a b"}, {"a\n"}, {NULL}};
    for (size_t k = 0; k < N(bad); k++) {
        assert_int_equal(hostlist_compress(bad[k], 1, buf, sizeof(buf)), GPO_EINVAL);
        assert_string_equal(buf, "");
    }
    const char *a[] = {"node01", "node02", "node05", "node07", "node09"};
    assert_int_equal(hostlist_compress(a, N(a), buf, 10), GPO_ENOBUFS);
    assert_string_equal(buf, "");
    /* Exactly fitting: the text and its NUL. */
    assert_int_equal(hostlist_compress(a, 2, buf, sizeof("node[01-02]")), 0);
    assert_string_equal(buf, "node[01-02]");
    assert_int_equal(hostlist_compress(a, 2, buf, sizeof("node[01-02]") - 1), GPO_ENOBUFS);
}

static void check_expand(const char *text, const char *want)
{
    char **v = NULL;
    size_t n = 0;
    char err[160] = "";
    int rc = hostlist_expand(text, &v, &n, err, sizeof(err));
    if (rc != 0)
        fail_msg("expand '%s': %s (%s)", text, gpo_strerror(rc), err);
    char got[1024] = "";
    size_t pos = 0;
    for (size_t k = 0; k < n; k++)
        pos += (size_t)snprintf(got + pos, sizeof(got) - pos, "%s%s", k ? " " : "", v[k]);
    assert_string_equal(got, want);
    hostlist_free(v, n);
}

static void test_expand_writes_every_name_in_order(void **state)
{
    (void)state;
    check_expand("node[01-04,07]", "node01 node02 node03 node04 node07");
    check_expand("node[9-11]", "node9 node10 node11");
    check_expand("gpu[098-101]", "gpu098 gpu099 gpu100 gpu101");
    check_expand("login,cpu[1-2],gpu3", "login cpu1 cpu2 gpu3");
    check_expand("node[1-2]-ib", "node1-ib node2-ib");
    check_expand("r[1-2]n[1-2]", "r1n1 r1n2 r2n1 r2n2");
    check_expand("[1-2]", "1 2");
    check_expand("solo", "solo");
}

static void test_expanding_nothing_gives_no_names(void **state)
{
    (void)state;
    char **v = (char **)1;
    size_t n = 7;
    assert_int_equal(hostlist_expand("", &v, &n, NULL, 0), 0);
    assert_null(v);
    assert_int_equal(n, 0);
    hostlist_free(NULL, 0);
}

static void test_expand_names_each_syntax_error(void **state)
{
    (void)state;
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"node[1-3", "unclosed '['"},
        {"node[1-[2]", "unclosed '['"},
        {"node[]", "a range is digits or digits-digits"},
        {"node[a-3]", "a range is digits or digits-digits"},
        {"node[1-]", "a range is digits or digits-digits"},
        {"node[1-2,]", "a range is digits or digits-digits"},
        {"node[1-2x]", "a range is digits or digits-digits"},
        {"node[5-3]", "a range runs backwards"},
        {"a,,b", "an empty name"},
        {",a", "an empty name"},
        {"a,", "an empty name"},
        {"node]", "holds no ']'"},
        {"a b", "holds no ']'"},
        {"node[1-2]]", "holds no ']'"},
        {"n[1234567890123456789]", "a range is digits or digits-digits"},
    };
    for (size_t k = 0; k < N(cases); k++) {
        char **v = (char **)1;
        size_t n = 7;
        char err[160] = "";
        assert_int_equal(hostlist_expand(cases[k].text, &v, &n, err, sizeof(err)), GPO_EINVAL);
        if (!strstr(err, cases[k].msg))
            fail_msg("'%s': '%s' lacks '%s'", cases[k].text, err, cases[k].msg);
        assert_ptr_equal(v, (char **)1);
        assert_int_equal(n, 7);
    }
}

static void test_expand_refuses_too_many_or_too_long_names(void **state)
{
    (void)state;
    char **v = NULL;
    size_t n = 0;
    char err[160] = "";
    assert_int_equal(hostlist_expand("n[0-999999999999]", &v, &n, err, sizeof(err)), GPO_E2BIG);
    assert_non_null(strstr(err, "more than 65536 names"));
    assert_int_equal(hostlist_expand("r[1-300]n[1-300]", &v, &n, err, sizeof(err)), GPO_E2BIG);
    char longname[300];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(hostlist_expand(longname, &v, &n, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "a name over 255 bytes"));
    assert_null(v);
}

static void test_compress_and_expand_round_trip(void **state)
{
    (void)state;
    const char *a[] = {"head", "node01", "node02", "node03", "node10", "node9",
                       "x1",   "x2",     "x010",   "cpu07",  "cpu08",  "cpu10"};
    char buf[256];
    assert_int_equal(hostlist_compress(a, N(a), buf, sizeof(buf)), 0);
    assert_string_equal(buf, "cpu[07-08,10],head,node[01-03,9-10],x[1-2,010]");
    char **v = NULL;
    size_t n = 0;
    assert_int_equal(hostlist_expand(buf, &v, &n, NULL, 0), 0);
    assert_int_equal(n, N(a));
    for (size_t k = 0; k < N(a); k++) {
        size_t j = 0;
        while (j < n && strcmp(v[j], a[k]) != 0)
            j++;
        if (j == n)
            fail_msg("'%s' lost in '%s'", a[k], buf);
    }
    char again[256];
    assert_int_equal(hostlist_compress((const char *const *)v, n, again, sizeof(again)), 0);
    assert_string_equal(again, buf);
    hostlist_free(v, n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_consecutive_numbers_become_ranges_in_one_bracket),
        cmocka_unit_test(test_a_single_name_has_no_brackets),
        cmocka_unit_test(test_zero_padding_is_part_of_the_name),
        cmocka_unit_test(test_several_prefixes_are_sorted_each_in_its_bracket),
        cmocka_unit_test(test_names_without_numbers_stay_as_written),
        cmocka_unit_test(test_compress_refuses_bad_names_and_small_buffers),
        cmocka_unit_test(test_expand_writes_every_name_in_order),
        cmocka_unit_test(test_expanding_nothing_gives_no_names),
        cmocka_unit_test(test_expand_names_each_syntax_error),
        cmocka_unit_test(test_expand_refuses_too_many_or_too_long_names),
        cmocka_unit_test(test_compress_and_expand_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

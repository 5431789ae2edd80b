/* test_sim_reqtrace.c - the request trace reader: every field of a small
 * trace, plain, gzip and CRLF alike; every bad field named by file, line
 * and field, failing the load or, with skip_bad, skipped and counted; rows
 * out of order; the window; and a trace left empty by any error. Fixtures
 * are in $SIM_TEST_DATA; the one-row cases are written at test time into a
 * directory under /tmp. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/err.h"
#include "sim/reqtrace.h"
#include "sim_testdir.h"
#include "base/banned.h"

#define HEADER   "request_id,arrival_ms,input_tokens,output_tokens\n"
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static int group_setup(void **state)
{
    return sim_testdir_setup(state, "test_sim_reqtrace");
}

static int group_teardown(void **state)
{
    return sim_testdir_teardown(state);
}

static void write_text(const struct sim_testdir *e, const char *name, const char *text, char *path,
                       size_t size)
{
    snprintf(path, size, "%s/%s", e->dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    size_t len = strlen(text);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void assert_empty(const struct sim_reqtrace *t)
{
    assert_null(t->path);
    assert_null(t->v);
    assert_int_equal(t->n, 0);
    assert_int_equal(t->nskipped, 0);
    assert_int_equal(t->nfiltered, 0);
    assert_string_equal(t->first_skip, "");
}

/* ---- the small trace ---- */

static const struct sim_request small[] = {
    {0, 374, 44, 2},
    {0, 0, 1, 3},          /* the same time as the row before */
    {4315, 1000000, 0, 4}, /* the token caps, both ends */
    {4316, 12, 1000000, 5},
    {400LL * 24 * 3600 * 1000, 1, 2, 6}, /* the last ms allowed; a UTF-8 id */
};

static void load_small(const char *path)
{
    struct sim_reqtrace t;
    sim_reqtrace_init(&t);
    char err[256] = "untouched";
    assert_int_equal(sim_reqtrace_load(&t, path, NULL, err, sizeof(err)), 0);
    assert_string_equal(err, "");
    assert_string_equal(t.path, path);
    assert_int_equal(t.n, COUNT(small));
    for (size_t k = 0; k < COUNT(small); k++) {
        assert_int_equal(t.v[k].arrival_ms, small[k].arrival_ms);
        assert_int_equal(t.v[k].input_tokens, small[k].input_tokens);
        assert_int_equal(t.v[k].output_tokens, small[k].output_tokens);
        assert_int_equal(t.v[k].line, small[k].line);
    }
    assert_int_equal(t.nskipped, 0);
    assert_int_equal(t.nfiltered, 0);
    sim_reqtrace_release(&t);
    assert_empty(&t);
}

static void test_small_trace_plain_and_gzip(void **state)
{
    const struct sim_testdir *e = *state;
    char path[600];
    snprintf(path, sizeof(path), "%s/requests_small.csv", e->data);
    load_small(path);
    snprintf(path, sizeof(path), "%s/requests_small.csv.gz", e->data);
    load_small(path);
}

static void test_crlf_and_no_final_newline(void **state)
{
    char path[600];
    write_text(*state, "crlf.csv",
               "request_id,arrival_ms,input_tokens,output_tokens\r\n"
               "a,0,374,44\r\nb,0,0,1\r\nc,4315,1000000,0\r\nd,4316,12,1000000\r\n"
               "e,34560000000,1,2",
               path, sizeof(path));
    load_small(path);
}

/* ---- bad rows ---- */

struct bad_case {
    const char *row; /* after the header, at line 2 */
    const char *msg; /* after "PATH:2: " */
};

static const struct bad_case bad_rows[] = {
    {",0,1,1", "request_id: expected an id of 1 to 128 bytes, got ''"},
    {"x,,1,1", "arrival_ms: expected whole milliseconds 0 .. 34560000000, got ''"},
    {"x,-1,1,1", "arrival_ms: expected whole milliseconds 0 .. 34560000000, got '-1'"},
    {"x,1.5,1,1", "arrival_ms: expected whole milliseconds 0 .. 34560000000, got '1.5'"},
    {"x,34560000001,1,1",
     "arrival_ms: expected whole milliseconds 0 .. 34560000000, got '34560000001'"},
    {"x,0,a,1", "input_tokens: expected a whole number 0 .. 1000000, got 'a'"},
    {"x,0,1000001,1", "input_tokens: expected a whole number 0 .. 1000000, got '1000001'"},
    {"x,0,1, 1", "output_tokens: expected a whole number 0 .. 1000000, got ' 1'"},
    {"x,0,1,99999999999999999999",
     "output_tokens: expected a whole number 0 .. 1000000, got '99999999999999999999'"},
    {"x,0,1", "row: expected 4 comma-separated fields, got 3"},
    {"x,0,1,1,", "row: expected 4 comma-separated fields, got 5"},
    {"x\t,0,1,1", "row: expected text without control bytes, got 0x09 at byte 2"},
};

static void test_every_bad_field_named_with_its_line(void **state)
{
    for (size_t k = 0; k < COUNT(bad_rows); k++) {
        char text[512], path[600], want[800], err[512];
        snprintf(text, sizeof(text), HEADER "%s\nok,5,1,1\n", bad_rows[k].row);
        write_text(*state, "bad.csv", text, path, sizeof(path));
        struct sim_reqtrace t;
        sim_reqtrace_init(&t);
        assert_int_equal(sim_reqtrace_load(&t, path, NULL, err, sizeof(err)), GPO_EINVAL);
        snprintf(want, sizeof(want), "%s:2: %s", path, bad_rows[k].msg);
        assert_string_equal(err, want);
        assert_empty(&t);

        /* skip_bad: skipped, counted, the first message kept, the good row read */
        struct sim_reqtrace_opts o = {.skip_bad = true, .until_ms = -1};
        assert_int_equal(sim_reqtrace_load(&t, path, &o, err, sizeof(err)), 0);
        assert_int_equal(t.n, 1);
        assert_int_equal(t.v[0].line, 3);
        assert_int_equal(t.nskipped, 1);
        assert_string_equal(t.first_skip, want);
        sim_reqtrace_release(&t);
    }
}

static void test_long_id_and_long_line(void **state)
{
    char id[130], text[6000], path[600], err[512], want[700];
    memset(id, 'i', 129);
    id[129] = '\0';
    snprintf(text, sizeof(text), HEADER "%.128s,0,1,1\n%s,1,1,1\n", id, id);
    write_text(*state, "id.csv", text, path, sizeof(path));
    struct sim_reqtrace t;
    sim_reqtrace_init(&t);
    assert_int_equal(sim_reqtrace_load(&t, path, NULL, err, sizeof(err)), GPO_EINVAL);
    snprintf(want, sizeof(want),
             "%s:3: request_id: expected an id of 1 to 128 bytes, got "
             "'iiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiii...'",
             path);
    assert_string_equal(err, want);

    char line[5000];
    memset(line, 'x', 4200);
    line[4200] = '\0';
    snprintf(text, sizeof(text), HEADER "%s\nok,0,1,1\n", line);
    write_text(*state, "long.csv", text, path, sizeof(path));
    assert_int_equal(sim_reqtrace_load(&t, path, NULL, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, ":2: row: expected a line of at most 4096 bytes"));
    struct sim_reqtrace_opts o = {.skip_bad = true, .until_ms = -1};
    assert_int_equal(sim_reqtrace_load(&t, path, &o, err, sizeof(err)), 0);
    assert_int_equal(t.n, 1);
    assert_int_equal(t.v[0].line, 3);
    sim_reqtrace_release(&t);
}

static void test_out_of_order_names_the_earlier_line(void **state)
{
    char path[600], err[512], want[700];
    write_text(*state, "order.csv", HEADER "a,10,1,1\nb,20,1,1\nc,19,1,1\nd,20,1,1\n", path,
               sizeof(path));
    struct sim_reqtrace t;
    sim_reqtrace_init(&t);
    assert_int_equal(sim_reqtrace_load(&t, path, NULL, err, sizeof(err)), GPO_EINVAL);
    snprintf(want, sizeof(want),
             "%s:4: arrival_ms: expected >= 20 as on line 3 (rows in arrival order), got '19'",
             path);
    assert_string_equal(err, want);
    assert_empty(&t);
    /* skipped, the order is checked against the last good row */
    struct sim_reqtrace_opts o = {.skip_bad = true, .until_ms = -1};
    assert_int_equal(sim_reqtrace_load(&t, path, &o, err, sizeof(err)), 0);
    assert_int_equal(t.n, 3);
    assert_int_equal(t.v[2].arrival_ms, 20);
    assert_int_equal(t.nskipped, 1);
    sim_reqtrace_release(&t);
}

static void test_header_and_file_errors(void **state)
{
    char path[600], err[512], want[900];
    struct sim_reqtrace t;
    sim_reqtrace_init(&t);
    write_text(*state, "hdr.csv", "request_id,arrival_s,input_tokens,output_tokens\n", path,
               sizeof(path));
    struct sim_reqtrace_opts o = {.skip_bad = true, .until_ms = -1};
    assert_int_equal(sim_reqtrace_load(&t, path, &o, err, sizeof(err)), GPO_EINVAL);
    snprintf(want, sizeof(want),
             "%s:1: header: expected 'request_id,arrival_ms,input_tokens,output_tokens', got "
             "'request_id,arrival_s,input_tokens,output...'",
             path);
    assert_string_equal(err, want);
    write_text(*state, "empty.csv", "", path, sizeof(path));
    assert_int_equal(sim_reqtrace_load(&t, path, NULL, err, sizeof(err)), GPO_EINVAL);
    snprintf(want, sizeof(want), "%s: expected the header line, got an empty file", path);
    assert_string_equal(err, want);
    assert_int_equal(sim_reqtrace_load(&t, "/nonexistent/r.csv", NULL, err, sizeof(err)),
                     GPO_EINVAL);
    assert_string_equal(err, "/nonexistent/r.csv: cannot open: No such file or directory");
    /* a header only: an empty trace, no error */
    write_text(*state, "hdronly.csv", HEADER, path, sizeof(path));
    assert_int_equal(sim_reqtrace_load(&t, path, NULL, err, sizeof(err)), 0);
    assert_int_equal(t.n, 0);
    sim_reqtrace_release(&t);
    assert_empty(&t);
}

static void test_window_keeps_times_and_counts_filtered(void **state)
{
    char path[600], err[512];
    write_text(*state, "win.csv", HEADER "a,0,1,1\nb,999,1,1\nc,1000,2,2\nd,1999,3,3\ne,2000,1,1\n",
               path, sizeof(path));
    struct sim_reqtrace t;
    sim_reqtrace_init(&t);
    struct sim_reqtrace_opts o = {.from_ms = 1000, .until_ms = 2000};
    assert_int_equal(sim_reqtrace_load(&t, path, &o, err, sizeof(err)), 0);
    assert_int_equal(t.n, 2);
    assert_int_equal(t.v[0].arrival_ms, 1000);
    assert_int_equal(t.v[1].arrival_ms, 1999);
    assert_int_equal(t.v[1].line, 5);
    assert_int_equal(t.nfiltered, 3);
    o = (struct sim_reqtrace_opts){.from_ms = 1000, .until_ms = -1};
    assert_int_equal(sim_reqtrace_load(&t, path, &o, err, sizeof(err)), 0);
    assert_int_equal(t.n, 3);
    assert_int_equal(t.nfiltered, 2);
    /* an empty window is refused */
    o = (struct sim_reqtrace_opts){0};
    assert_int_equal(sim_reqtrace_load(&t, path, &o, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, ": window: expected from_ms < until_ms, got 0 >= 0"));
    assert_empty(&t);
    /* a row out of order outside the window is still an error */
    write_text(*state, "win2.csv", HEADER "a,5000,1,1\nb,10,1,1\n", path, sizeof(path));
    o = (struct sim_reqtrace_opts){.from_ms = 0, .until_ms = 100};
    assert_int_equal(sim_reqtrace_load(&t, path, &o, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, ":3: arrival_ms: expected >= 5000 as on line 2"));
}

static void test_truncated_gzip_is_an_error(void **state)
{
    const struct sim_testdir *e = *state;
    char src[600], path[600], err[512];
    snprintf(src, sizeof(src), "%s/requests_small.csv.gz", e->data);
    FILE *f = fopen(src, "rb");
    assert_non_null(f);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    assert_true(n > 20);
    snprintf(path, sizeof(path), "%s/cut.csv.gz", e->dir);
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n - 12, f), n - 12);
    fclose(f);
    struct sim_reqtrace t;
    sim_reqtrace_init(&t);
    assert_int_equal(sim_reqtrace_load(&t, path, NULL, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "truncated gzip file"));
    assert_empty(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_trace_plain_and_gzip),
        cmocka_unit_test(test_crlf_and_no_final_newline),
        cmocka_unit_test(test_every_bad_field_named_with_its_line),
        cmocka_unit_test(test_long_id_and_long_line),
        cmocka_unit_test(test_out_of_order_names_the_earlier_line),
        cmocka_unit_test(test_header_and_file_errors),
        cmocka_unit_test(test_window_keeps_times_and_counts_filtered),
        cmocka_unit_test(test_truncated_gzip_is_an_error),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

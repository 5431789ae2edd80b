/* test_sim_trace.c - the trace reader: every field of a small trace, plain,
 * gzip, CRLF and without a final newline alike; every kind of bad row named
 * by file, line and field, failing the load or, with skip_bad, skipped and
 * counted; the window; the caps; and a trace left empty by any error.
 * Fixtures are in $SIM_TEST_DATA; the many one-row cases are written at test
 * time into a directory under /tmp. */
#include <dirent.h>
#include <inttypes.h>
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
#include "sim/trace.h"
#include "sim_testdir.h"
#include "base/banned.h"

#define HEADER "job_id,submit_time_s,duration_s,num_gpus,user,queue,gpu_type,status\n"

static int group_setup(void **state)
{
    return sim_testdir_setup(state, "test_sim_trace");
}

static int group_teardown(void **state)
{
    return sim_testdir_teardown(state);
}

static void fixture(const struct sim_testdir *e, const char *name, char *path, size_t size)
{
    snprintf(path, size, "%s/%s", e->data, name);
}

/* Writes data[0, len) to the scratch file `name`; its path into path. */
static void write_file(const struct sim_testdir *e, const char *name, const void *data, size_t len,
                       char *path, size_t size)
{
    snprintf(path, size, "%s/%s", e->dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* The whole of a file, NUL-terminated; *len its size. Caller frees. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = malloc(1 << 16);
    assert_non_null(buf);
    *len = fread(buf, 1, (1 << 16) - 1, f);
    buf[*len] = '\0';
    fclose(f);
    return buf;
}

static void assert_empty(const struct sim_trace *t)
{
    assert_null(t->jobs);
    assert_int_equal(t->njobs, 0);
    assert_null(t->queues);
    assert_int_equal(t->nqueues, 0);
    assert_null(t->gpu_types);
    assert_int_equal(t->ngpu_types, 0);
    assert_int_equal(t->nskipped, 0);
    assert_int_equal(t->nfiltered, 0);
    assert_string_equal(t->first_skip, "");
    assert_null(t->chunks);
}

/* ---- the small trace, in every encoding ---- */

struct want_job {
    const char *id;
    int64_t submit_s, duration_s, gpu_milli;
    uint32_t queue, gpu_type, line;
};

static const struct want_job small_jobs[] = {
    {"a-0", 0, 100, 1000, 0, SIM_NONE, 2},    /* LS, no gpu_type */
    {"a-1", 0, 50, 460, 1, 0, 3},             /* 0.46 GPU, BE, V100 */
    {"a-2", 10, 0, 1, 2, SIM_NONE, 4},        /* 0.0004 GPU: at least 1 milli; queue "" */
    {"a-3", 10, 3600, 8000, 0, 1, 5},         /* A100 */
    {"a-4", 25, 7, 0, 1, SIM_NONE, 6},        /* CPU-only */
    {"a-5", 30, 12, 1000, 2, 0, 7},           /* 0.9996 rounds to a whole GPU */
    {"a-6", 31, 5, 2000, 3, 2, 8},            /* "2.0" */
    {"a-7", 1000000, 86400, 128000, 0, 1, 9}, /* same submit as the next */
    {"a-8", 1000000, 1, 500, 4, 3, 10},       /* a UTF-8 queue name */
};
static const char *const small_queues[] = {"LS", "BE", "", "Burstable", "\xc3\xa9quipe"};
static const char *const small_types[] = {"V100", "A100", "T4", "H100"};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static void check_small(const struct sim_trace *t)
{
    assert_int_equal(t->njobs, COUNT(small_jobs));
    for (size_t k = 0; k < COUNT(small_jobs); k++) {
        const struct want_job *w = &small_jobs[k];
        const struct sim_trace_job *j = &t->jobs[k];
        assert_string_equal(j->id, w->id);
        assert_int_equal(j->submit_s, w->submit_s);
        assert_int_equal(j->duration_s, w->duration_s);
        assert_int_equal(j->gpu_milli, w->gpu_milli);
        assert_int_equal(j->queue, w->queue);
        assert_int_equal(j->gpu_type, w->gpu_type);
        assert_int_equal(j->line, w->line);
    }
    assert_int_equal(t->nqueues, COUNT(small_queues));
    for (size_t k = 0; k < COUNT(small_queues); k++)
        assert_string_equal(t->queues[k], small_queues[k]);
    assert_int_equal(t->ngpu_types, COUNT(small_types));
    for (size_t k = 0; k < COUNT(small_types); k++)
        assert_string_equal(t->gpu_types[k], small_types[k]);
    assert_int_equal(t->nskipped, 0);
    assert_int_equal(t->nfiltered, 0);
    assert_string_equal(t->first_skip, "");
}

static void load_and_check_small(const char *path)
{
    struct sim_trace t;
    sim_trace_init(&t);
    char err[256] = "untouched";
    assert_int_equal(sim_trace_load(&t, path, NULL, err, sizeof(err)), 0);
    assert_string_equal(err, "");
    check_small(&t);
    sim_trace_release(&t);
    assert_empty(&t);
}

static void test_small_trace_every_field(void **state)
{
    char path[600];
    fixture(*state, "trace_small.csv", path, sizeof(path));
    load_and_check_small(path);
}

static void test_gzip_gives_the_same_trace(void **state)
{
    char path[600];
    fixture(*state, "trace_small.csv.gz", path, sizeof(path));
    load_and_check_small(path);
}

/* The small trace rewritten with CRLF line ends and/or without its last
 * newline reads the same. */
static void test_crlf_and_no_final_newline(void **state)
{
    char path[600];
    size_t len;
    fixture(*state, "trace_small.csv", path, sizeof(path));
    char *plain = read_file(path, &len);
    char *crlf = malloc(2 * len + 1);
    assert_non_null(crlf);
    size_t n = 0;
    for (size_t k = 0; k < len; k++) {
        if (plain[k] == '\n')
            crlf[n++] = '\r';
        crlf[n++] = plain[k];
    }
    write_file(*state, "crlf.csv", crlf, n, path, sizeof(path));
    load_and_check_small(path);
    write_file(*state, "crlf_nonl.csv", crlf, n - 1, path, sizeof(path)); /* ends in CR */
    load_and_check_small(path);
    write_file(*state, "crlf_nocrlf.csv", crlf, n - 2, path, sizeof(path));
    load_and_check_small(path);
    write_file(*state, "nonl.csv", plain, len - 1, path, sizeof(path));
    load_and_check_small(path);
    /* A byte order mark before the header is what some editors write. */
    char *bom = malloc(len + 3);
    assert_non_null(bom);
    memcpy(bom, "\xef\xbb\xbf", 3);
    memcpy(bom + 3, plain, len);
    write_file(*state, "bom.csv", bom, len + 3, path, sizeof(path));
    load_and_check_small(path);
    free(bom);
    free(crlf);
    free(plain);
}

static void test_header_only_is_an_empty_trace(void **state)
{
    char path[600], err[256];
    struct sim_trace t;
    sim_trace_init(&t);
    write_file(*state, "header.csv", HEADER, strlen(HEADER) - 1, path, sizeof(path));
    assert_int_equal(sim_trace_load(&t, path, NULL, err, sizeof(err)), 0);
    assert_empty(&t);
    write_file(*state, "header.csv", HEADER, strlen(HEADER), path, sizeof(path));
    assert_int_equal(sim_trace_load(&t, path, NULL, err, sizeof(err)), 0);
    assert_empty(&t);
}

/* ---- files that are not a trace ---- */

/* Loads path with and without skip_bad: both fail with rc and message
 * "PATH" + suffix, leaving the trace empty. */
static void expect_file_error(const char *path, int rc, const char *suffix)
{
    char want[1024], err[1024];
    snprintf(want, sizeof(want), "%s%s", path, suffix);
    for (int skip = 0; skip < 2; skip++) {
        struct sim_trace t;
        sim_trace_init(&t);
        struct sim_trace_opts opts = {.skip_bad = skip, .until_s = -1};
        assert_int_equal(sim_trace_load(&t, path, &opts, err, sizeof(err)), rc);
        assert_string_equal(err, want);
        assert_empty(&t);
    }
}

static void test_missing_and_empty_files(void **state)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/no-such.csv", ((struct sim_testdir *)*state)->dir);
    expect_file_error(path, GPO_EINVAL, ": cannot open: No such file or directory");
    write_file(*state, "empty.csv", "", 0, path, sizeof(path));
    expect_file_error(path, GPO_EINVAL, ": expected the header line, got an empty file");
    expect_file_error(((struct sim_testdir *)*state)->dir, GPO_EINVAL,
                      ": read error: Is a directory");
}

static void test_wrong_header(void **state)
{
    static const struct {
        const char *text, *got;
    } cases[] = {
        {"id,submit,duration\n1,2,3\n", "id,submit,duration"},
        {"job_id,submit_time_s,duration_s,num_gpus,user,queue,gpu_type\n",
         "job_id,submit_time_s,duration_s,num_gpus..."},
        {"a-0,0,100,1,,LS,,Running\n", "a-0,0,100,1,,LS,,Running"},
        {"\n" HEADER, ""},
        {"JOB_ID,submit_time_s\n", "JOB_ID,submit_time_s"},
        {"job_id\tsubmit\r\n", "job_id?submit"},
    };
    for (size_t k = 0; k < COUNT(cases); k++) {
        char path[600], suffix[300];
        write_file(*state, "header.csv", cases[k].text, strlen(cases[k].text), path, sizeof(path));
        snprintf(suffix, sizeof(suffix),
                 ":1: header: expected "
                 "'job_id,submit_time_s,duration_s,num_gpus,user,queue,gpu_type,status', got '%s'",
                 cases[k].got);
        expect_file_error(path, GPO_EINVAL, suffix);
    }
}

static void test_broken_gzip_is_a_read_error(void **state)
{
    char path[600];
    size_t len;
    fixture(*state, "trace_small.csv.gz", path, sizeof(path));
    char *gz = read_file(path, &len);
    write_file(*state, "cut.csv.gz", gz, len / 2, path, sizeof(path));
    expect_file_error(path, GPO_EINVAL, ": read error: truncated gzip file");
    gz[len - 6] ^= 0x55; /* the CRC-32 in the trailer */
    write_file(*state, "crc.csv.gz", gz, len, path, sizeof(path));
    expect_file_error(path, GPO_EINVAL, ": read error: incorrect data check");
    free(gz);
}

/* ---- bad rows ---- */

struct bad_row {
    const char *row; /* between a good row on line 2 and another on line 4 */
    size_t len;      /* of row; 0: strlen */
    const char *msg; /* after "PATH:3: " */
};

static const struct bad_row bad_rows[] = {
    {"b,5,1,1,,q,,,", 0, "row: expected 8 comma-separated fields, got 9"},
    {"b,5,1,1,,q,", 0, "row: expected 8 comma-separated fields, got 7"},
    {"", 0, "row: expected 8 comma-separated fields, got 1"},
    {"\r", 0, "row: expected 8 comma-separated fields, got 1"},
    {",5,1,1,,q,,", 0, "job_id: expected a non-empty id, got ''"},
    {"b,,1,1,,q,,", 0, "submit_time_s: expected whole seconds >= 0, got ''"},
    {"b,abc,1,1,,q,,", 0, "submit_time_s: expected whole seconds >= 0, got 'abc'"},
    {"b,-5,1,1,,q,,", 0, "submit_time_s: expected whole seconds >= 0, got '-5'"},
    {"b,+5,1,1,,q,,", 0, "submit_time_s: expected whole seconds >= 0, got '+5'"},
    {"b, 5,1,1,,q,,", 0, "submit_time_s: expected whole seconds >= 0, got ' 5'"},
    {"b,5.0,1,1,,q,,", 0, "submit_time_s: expected whole seconds >= 0, got '5.0'"},
    {"b,99999999999999999999,1,1,,q,,", 0,
     "submit_time_s: expected at most 1000000000000000 seconds, got '99999999999999999999'"},
    {"b,1000000000000001,1,1,,q,,", 0,
     "submit_time_s: expected at most 1000000000000000 seconds, got '1000000000000001'"},
    {"b,5,,1,,q,,", 0, "duration_s: expected whole seconds >= 0, got ''"},
    {"b,5,1.5,1,,q,,", 0, "duration_s: expected whole seconds >= 0, got '1.5'"},
    {"b,5,-1,1,,q,,", 0, "duration_s: expected whole seconds >= 0, got '-1'"},
    {"b,5,1e3,1,,q,,", 0, "duration_s: expected whole seconds >= 0, got '1e3'"},
    {"b,5,9223372036854775808,1,,q,,", 0,
     "duration_s: expected at most 1000000000000000 seconds, got '9223372036854775808'"},
    {"b,5,1,,,q,,", 0, "num_gpus: expected a number >= 0, got ''"},
    {"b,5,1,x,,q,,", 0, "num_gpus: expected a number >= 0, got 'x'"},
    {"b,5,1,-1,,q,,", 0, "num_gpus: expected a number >= 0, got '-1'"},
    {"b,5,1,-0.5,,q,,", 0, "num_gpus: expected a number >= 0, got '-0.5'"},
    {"b,5,1,.5,,q,,", 0, "num_gpus: expected a number >= 0, got '.5'"},
    {"b,5,1,5.,,q,,", 0, "num_gpus: expected a number >= 0, got '5.'"},
    {"b,5,1,1e3,,q,,", 0, "num_gpus: expected a number >= 0, got '1e3'"},
    {"b,5,1,0.5.1,,q,,", 0, "num_gpus: expected a number >= 0, got '0.5.1'"},
    {"b,5,1,1.5,,q,,", 0, "num_gpus: expected a whole number or a fraction below 1, got '1.5'"},
    {"b,5,1,2.0001,,q,,", 0,
     "num_gpus: expected a whole number or a fraction below 1, got '2.0001'"},
    {"b,5,1,100001,,q,,", 0, "num_gpus: expected at most 100000 GPUs, got '100001'"},
    {"b,5,1,99999999999999999999999,,q,,", 0,
     "num_gpus: expected at most 100000 GPUs, got '99999999999999999999999'"},
    {"b,4,1,1,,q,,", 0,
     "submit_time_s: expected >= 5 as on line 2 (rows in submit order), got '4'"},
    {"a,5,1,1,,q,,", 0, "job_id: expected a unique id (line 2 has it too), got 'a'"},
    {"b,5\0,1,1,,q,,", 13, "row: expected text without control bytes, got 0x00 at byte 4"},
    {"b,5,1,1,\tx,q,,", 0, "row: expected text without control bytes, got 0x09 at byte 9"},
    {"b,5\r,1,1,,q,,", 0, "row: expected text without control bytes, got 0x0d at byte 4"},
    {"b,5,1,1,,q\x7f,,", 0, "row: expected text without control bytes, got 0x7f at byte 11"},
    {"b,5,1,0.5,,q,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,", 0,
     "row: expected 8 comma-separated fields, got 53"},
};

/* A file with a good row, `row` on line 3, and another good row. */
static void write_bad_row(const struct sim_testdir *e, const char *row, size_t len, char *path,
                          size_t size)
{
    static const char head[] = HEADER "a,5,10,1,,q,,\n", tail[] = "\nz,7,1,0,,q,,\n";
    size_t n = strlen(head) + len + strlen(tail);
    char *text = malloc(n);
    assert_non_null(text);
    memcpy(text, head, strlen(head));
    memcpy(text + strlen(head), row, len);
    memcpy(text + strlen(head) + len, tail, strlen(tail));
    write_file(e, "bad.csv", text, n, path, size);
    free(text);
}

/* Without skip_bad the load fails with "PATH:3: " + msg and an empty trace;
 * with it the row is skipped, counted and its message kept. */
static void expect_bad_row(const struct sim_testdir *e, const char *row, size_t len,
                           const char *msg)
{
    char path[600], want[900], err[900];
    write_bad_row(e, row, len, path, sizeof(path));
    snprintf(want, sizeof(want), "%s:3: %s", path, msg);
    struct sim_trace t;
    sim_trace_init(&t);
    assert_int_equal(sim_trace_load(&t, path, NULL, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, want);
    assert_empty(&t);
    struct sim_trace_opts opts = {.skip_bad = true, .until_s = -1};
    assert_int_equal(sim_trace_load(&t, path, &opts, err, sizeof(err)), 0);
    assert_string_equal(err, "");
    assert_int_equal(t.njobs, 2);
    assert_string_equal(t.jobs[0].id, "a");
    assert_string_equal(t.jobs[1].id, "z");
    assert_int_equal(t.jobs[1].line, 4);
    assert_int_equal(t.nskipped, 1);
    assert_string_equal(t.first_skip, want);
    assert_int_equal(t.nqueues, 1);
    sim_trace_release(&t);
}

static void test_bad_rows_name_file_line_and_field(void **state)
{
    for (size_t k = 0; k < COUNT(bad_rows); k++) {
        const struct bad_row *b = &bad_rows[k];
        expect_bad_row(*state, b->row, b->len ? b->len : strlen(b->row), b->msg);
    }
}

/* A long value is cut in the message, not inside a UTF-8 sequence. */
static void test_long_values_are_cut_in_messages(void **state)
{
    char row[200];
    snprintf(row, sizeof(row), "b,5,1,%s,,q,,",
             "012345678901234567890123456789012345678\xc3\xa9xyz");
    expect_bad_row(
        *state, row, strlen(row),
        "num_gpus: expected a number >= 0, got '012345678901234567890123456789012345678...'");
    snprintf(row, sizeof(row), "b,5,1,%s,,q,,", "01234567890123456789012345678901234567\x01z");
    expect_bad_row(*state, row, strlen(row),
                   "row: expected text without control bytes, got 0x01 at byte 45");
}

/* A line is at most SIM_TRACE_MAX_LINE bytes with its newline; the rest of a
 * longer one is dropped, however long, and the next line read as usual. */
static void test_line_length_cap(void **state)
{
    size_t sizes[] = {SIM_TRACE_MAX_LINE - 1, SIM_TRACE_MAX_LINE, 300000, 1000000};
    for (size_t k = 0; k < COUNT(sizes); k++) {
        char *row = malloc(sizes[k]);
        assert_non_null(row);
        memcpy(row, "b,5,1,1,", 8);
        memset(row + 8, 'u', sizes[k] - 8);
        memcpy(row + sizes[k] - 4, ",q,,", 4);
        if (sizes[k] < SIM_TRACE_MAX_LINE) {
            char path[600], err[256];
            struct sim_trace t;
            sim_trace_init(&t);
            write_bad_row(*state, row, sizes[k], path, sizeof(path));
            assert_int_equal(sim_trace_load(&t, path, NULL, err, sizeof(err)), 0);
            assert_int_equal(t.njobs, 3);
            sim_trace_release(&t);
        } else {
            expect_bad_row(*state, row, sizes[k],
                           "row: expected a line of at most 4096 bytes with its newline, got "
                           "'b,5,1,1,uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu...'");
        }
        free(row);
    }
}

/* The same, for the last line without a newline. */
static void test_line_length_cap_at_the_end(void **state)
{
    char path[600], err[300];
    size_t sizes[] = {SIM_TRACE_MAX_LINE - 1, SIM_TRACE_MAX_LINE, 300000};
    for (size_t k = 0; k < COUNT(sizes); k++) {
        size_t n = strlen(HEADER) + sizes[k];
        char *text = malloc(n);
        assert_non_null(text);
        memcpy(text, HEADER, strlen(HEADER));
        memset(text + strlen(HEADER), '1', sizes[k]);
        memcpy(text + strlen(HEADER), "b,5,1,1,,q,,", 12);
        write_file(*state, "long.csv", text, n, path, sizeof(path));
        struct sim_trace t;
        sim_trace_init(&t);
        int rc = sim_trace_load(&t, path, NULL, err, sizeof(err));
        assert_int_equal(rc, sizes[k] < SIM_TRACE_MAX_LINE ? 0 : GPO_EINVAL);
        assert_int_equal(t.njobs, sizes[k] < SIM_TRACE_MAX_LINE ? 1 : 0);
        if (rc)
            assert_non_null(strstr(err, ":2: row: expected a line of at most 4096 bytes"));
        sim_trace_release(&t);
        free(text);
    }
}

static void test_num_gpus_in_milli(void **state)
{
    static const struct {
        const char *text;
        int64_t milli;
    } cases[] = {
        {"0", 0},
        {"0.0", 0},
        {"000", 0},
        {"1", 1000},
        {"2.0", 2000},
        {"007", 7000},
        {"0.46", 460},
        {"0.5", 500},
        {"0.0004", 1},
        {"0.0005", 1},
        {"0.0015", 2},
        {"0.00000001", 1},
        {"0.4649", 465},
        {"0.46449", 464},
        {"0.999", 999},
        {"0.9996", 1000},
        {"100000", 100000000},
        {"100000.000", 100000000},
    };
    for (size_t k = 0; k < COUNT(cases); k++) {
        char row[100], path[600], err[256];
        snprintf(row, sizeof(row), "b,5,1,%s,,q,,", cases[k].text);
        write_bad_row(*state, row, strlen(row), path, sizeof(path));
        struct sim_trace t;
        sim_trace_init(&t);
        assert_int_equal(sim_trace_load(&t, path, NULL, err, sizeof(err)), 0);
        assert_int_equal(t.njobs, 3);
        char got[100], want[100]; /* a failure names the case */
        snprintf(got, sizeof(got), "%s: %" PRId64, cases[k].text, t.jobs[1].gpu_milli);
        snprintf(want, sizeof(want), "%s: %" PRId64, cases[k].text, cases[k].milli);
        assert_string_equal(got, want);
        sim_trace_release(&t);
    }
}

static void test_largest_seconds_are_accepted(void **state)
{
    char path[600], err[256];
    const char text[] = HEADER "a,1000000000000000,1000000000000000,1,,,,\n";
    write_file(*state, "max.csv", text, strlen(text), path, sizeof(path));
    struct sim_trace t;
    sim_trace_init(&t);
    assert_int_equal(sim_trace_load(&t, path, NULL, err, sizeof(err)), 0);
    assert_int_equal(t.njobs, 1);
    assert_int_equal(t.jobs[0].submit_s, 1000000000000000);
    assert_int_equal(t.jobs[0].duration_s, 1000000000000000);
    sim_trace_release(&t);
}

/* The shipped trace_skip.csv: five bad rows of different kinds among three good. */
static void test_skip_bad_counts_and_keeps_the_first_message(void **state)
{
    char path[600], want[700], err[256];
    fixture(*state, "trace_skip.csv", path, sizeof(path));
    struct sim_trace t;
    sim_trace_init(&t);
    struct sim_trace_opts opts = {.skip_bad = true, .until_s = -1};
    assert_int_equal(sim_trace_load(&t, path, &opts, err, sizeof(err)), 0);
    assert_int_equal(t.njobs, 3);
    assert_string_equal(t.jobs[0].id, "s-0");
    assert_string_equal(t.jobs[1].id, "s-3");
    assert_int_equal(t.jobs[1].line, 5);
    assert_string_equal(t.jobs[2].id, "s-6");
    assert_int_equal(t.jobs[2].line, 9);
    assert_int_equal(t.jobs[2].gpu_milli, 500);
    assert_int_equal(t.nskipped, 5);
    assert_int_equal(t.nfiltered, 0);
    snprintf(want, sizeof(want), "%s:3: submit_time_s: expected whole seconds >= 0, got 'x'", path);
    assert_string_equal(t.first_skip, want);
    assert_int_equal(t.nqueues, 2);
    assert_string_equal(t.queues[1], "r");
    assert_int_equal(t.ngpu_types, 1);
    sim_trace_release(&t);
    /* Without skip_bad the first bad row fails the load. */
    assert_int_equal(sim_trace_load(&t, path, NULL, err, sizeof(err)), GPO_EINVAL);
    assert_string_equal(err, want);
    assert_empty(&t);
}

/* ---- the window ---- */

static const char window_text[] = HEADER "w0,0,1,1,,a,,\n"
                                         "w1,10,1,1,,b,,\n"
                                         "w2,20,1,1,,c,,\n"
                                         "w3,20,1,1,,d,,\n"
                                         "w4,30,1,1,,e,,\n";

static void expect_window(const struct sim_testdir *e, int64_t from, int64_t until, const char *ids,
                          size_t nfiltered)
{
    char path[600], err[256], got[64] = "";
    write_file(e, "window.csv", window_text, strlen(window_text), path, sizeof(path));
    struct sim_trace t;
    sim_trace_init(&t);
    struct sim_trace_opts opts = {.from_s = from, .until_s = until};
    assert_int_equal(sim_trace_load(&t, path, &opts, err, sizeof(err)), 0);
    for (size_t k = 0; k < t.njobs; k++) {
        size_t n = strlen(got);
        snprintf(got + n, sizeof(got) - n, "%s%s", k ? " " : "", t.jobs[k].id);
        /* Only the kept rows' queues are in the table: w0 in a, w1 in b, ... */
        char queue[2] = {(char)('a' + (t.jobs[k].id[1] - '0')), '\0'};
        assert_string_equal(t.queues[t.jobs[k].queue], queue);
    }
    assert_string_equal(got, ids);
    assert_int_equal(t.nfiltered, nfiltered);
    assert_int_equal(t.nqueues, t.njobs);
    sim_trace_release(&t);
}

static void test_window_keeps_from_inclusive_until_exclusive(void **state)
{
    expect_window(*state, 0, -1, "w0 w1 w2 w3 w4", 0);
    expect_window(*state, 10, -1, "w1 w2 w3 w4", 1);
    expect_window(*state, 10, 30, "w1 w2 w3", 2);
    expect_window(*state, 11, 20, "", 5);
    expect_window(*state, 20, 21, "w2 w3", 3);
    expect_window(*state, -100, 1, "w0", 4);
    expect_window(*state, 31, -1, "", 5);
}

/* An empty window is an error, not an empty trace: a zeroed opts asks for
 * [0, 0) by mistake. */
static void test_empty_window_is_an_error(void **state)
{
    char path[600], err[256], want[700];
    write_file(*state, "window.csv", window_text, strlen(window_text), path, sizeof(path));
    static const int64_t windows[][2] = {{21, 20}, {20, 20}, {0, 0}};
    for (size_t k = 0; k < COUNT(windows); k++) {
        struct sim_trace t;
        sim_trace_init(&t);
        struct sim_trace_opts opts = {.from_s = windows[k][0], .until_s = windows[k][1]};
        assert_int_equal(sim_trace_load(&t, path, &opts, err, sizeof(err)), GPO_EINVAL);
        snprintf(want, sizeof(want),
                 "%s: window: expected from_s < until_s, got %" PRId64 " >= %" PRId64, path,
                 windows[k][0], windows[k][1]);
        assert_string_equal(err, want);
        assert_empty(&t);
    }
    struct sim_trace t;
    sim_trace_init(&t);
    struct sim_trace_opts zeroed = {.skip_bad = true};
    assert_int_equal(sim_trace_load(&t, path, &zeroed, err, sizeof(err)), GPO_EINVAL);
}

/* Rows outside the window are still checked: a bad one is skipped (not
 * filtered) or fails the load, and order is checked across filtered rows.
 * Ids need to be unique among the kept rows only. */
static void test_window_still_checks_every_row(void **state)
{
    char path[600], err[256], want[700];
    const char text[] = HEADER "f0,0,1,1,,q,,\n"
                               "f1,x,1,1,,q,,\n"
                               "f2,50,1,1,,q,,\n"
                               "k0,100,1,1,,q,,\n"
                               "f2,100,1,1,,q,,\n"
                               "f3,60,1,1,,q,,\n"
                               "k1,150,1,1,,q,,\n";
    write_file(*state, "window.csv", text, strlen(text), path, sizeof(path));
    struct sim_trace t;
    sim_trace_init(&t);
    struct sim_trace_opts opts = {.from_s = 100, .until_s = -1};
    assert_int_equal(sim_trace_load(&t, path, &opts, err, sizeof(err)), GPO_EINVAL);
    snprintf(want, sizeof(want), "%s:3: submit_time_s: expected whole seconds >= 0, got 'x'", path);
    assert_string_equal(err, want);
    assert_empty(&t);
    opts.skip_bad = true;
    assert_int_equal(sim_trace_load(&t, path, &opts, err, sizeof(err)), 0);
    assert_int_equal(t.njobs, 3);
    assert_string_equal(t.jobs[0].id, "k0");
    assert_string_equal(t.jobs[1].id, "f2"); /* f2 on line 4 was filtered: not a duplicate */
    assert_string_equal(t.jobs[2].id, "k1");
    assert_int_equal(t.nfiltered, 2);
    assert_int_equal(t.nskipped, 2);
    assert_string_equal(t.first_skip, want);
    sim_trace_release(&t);
    /* Out of order before the window. */
    const char early[] = HEADER "f0,50,1,1,,q,,\nf1,40,1,1,,q,,\nk0,100,1,1,,q,,\n";
    write_file(*state, "window.csv", early, strlen(early), path, sizeof(path));
    opts.skip_bad = false;
    assert_int_equal(sim_trace_load(&t, path, &opts, err, sizeof(err)), GPO_EINVAL);
    snprintf(want, sizeof(want),
             "%s:3: submit_time_s: expected >= 50 as on line 2 (rows in submit order), got '40'",
             path);
    assert_string_equal(err, want);
}

/* ---- caps, errors and the lifecycle ---- */

/* One more distinct name than SIM_TRACE_MAX_NAMES in `column` (5: queue,
 * 6: gpu_type) is over the cap, with or without skip_bad. */
static void expect_names_cap(const struct sim_testdir *e, int column, const char *field)
{
    size_t cap = 64 + (size_t)(SIM_TRACE_MAX_NAMES + 1) * 32;
    char *text = malloc(cap), path[600], err[256], want[700];
    assert_non_null(text);
    size_t n = (size_t)snprintf(text, cap, "%s", HEADER);
    for (unsigned k = 0; k <= SIM_TRACE_MAX_NAMES; k++)
        n += (size_t)snprintf(text + n, cap - n,
                              column == 5 ? "j%u,0,1,1,,n%u,,\n" : "j%u,0,1,1,,,n%u,\n", k, k);
    write_file(e, "names.csv", text, n, path, sizeof(path));
    free(text);
    snprintf(want, sizeof(want), "%s:%u: %s: expected at most %u distinct names, got 'n%u'", path,
             SIM_TRACE_MAX_NAMES + 2, field, SIM_TRACE_MAX_NAMES, SIM_TRACE_MAX_NAMES);
    for (int skip = 0; skip < 2; skip++) {
        struct sim_trace t;
        sim_trace_init(&t);
        struct sim_trace_opts opts = {.skip_bad = skip, .until_s = -1};
        assert_int_equal(sim_trace_load(&t, path, &opts, err, sizeof(err)), GPO_E2BIG);
        assert_string_equal(err, want);
        assert_empty(&t);
    }
}

static void test_too_many_names(void **state)
{
    expect_names_cap(*state, 5, "queue");
    expect_names_cap(*state, 6, "gpu_type");
}

/* Enough rows to grow the id and name maps many times: every index stays
 * right, and a duplicate of the first id is still found at the end. */
static void test_many_rows_grow_the_maps(void **state)
{
    enum { N = 50000, NAMES = 300 };
    size_t cap = 64 + (size_t)(N + 1) * 48, n;
    char *text = malloc(cap), path[600], err[256], want[700];
    assert_non_null(text);
    n = (size_t)snprintf(text, cap, "%s", HEADER);
    for (unsigned k = 0; k < N; k++)
        n += (size_t)snprintf(text + n, cap - n, "job-%u,%u,1,1,,q%u,t%u,\n", k, k / 7, k % NAMES,
                              k % (NAMES / 3));
    write_file(*state, "many.csv", text, n, path, sizeof(path));
    struct sim_trace t;
    sim_trace_init(&t);
    assert_int_equal(sim_trace_load(&t, path, NULL, err, sizeof(err)), 0);
    assert_int_equal(t.njobs, N);
    assert_int_equal(t.nqueues, NAMES);
    assert_int_equal(t.ngpu_types, NAMES / 3);
    for (unsigned k = 0; k < N; k++) {
        char id[32];
        snprintf(id, sizeof(id), "job-%u", k);
        assert_string_equal(t.jobs[k].id, id);
        assert_int_equal(t.jobs[k].queue, k % NAMES);
        assert_int_equal(t.jobs[k].gpu_type, k % (NAMES / 3));
        assert_int_equal(t.jobs[k].line, k + 2);
    }
    n += (size_t)snprintf(text + n, cap - n, "job-0,%u,1,1,,,,\n", N);
    write_file(*state, "many.csv", text, n, path, sizeof(path));
    free(text);
    assert_int_equal(sim_trace_load(&t, path, NULL, err, sizeof(err)), GPO_EINVAL);
    snprintf(want, sizeof(want),
             "%s:%u: job_id: expected a unique id (line 2 has it too), got 'job-0'", path, N + 2);
    assert_string_equal(err, want);
    assert_empty(&t);
}

/* A failed load empties a trace that held jobs; err is always terminated,
 * however small, and may be left out. */
static void test_error_leaves_trace_empty_and_err_terminated(void **state)
{
    char path[600], bad[600], err[8];
    fixture(*state, "trace_small.csv", path, sizeof(path));
    write_bad_row(*state, "b,x,1,1,,q,,", 12, bad, sizeof(bad));
    struct sim_trace t;
    sim_trace_init(&t);
    assert_int_equal(sim_trace_load(&t, path, NULL, NULL, 0), 0);
    check_small(&t);
    memset(err, 'x', sizeof(err));
    assert_int_equal(sim_trace_load(&t, bad, NULL, err, sizeof(err)), GPO_EINVAL);
    assert_empty(&t);
    assert_int_equal(strlen(err), sizeof(err) - 1);
    assert_memory_equal(err, bad, sizeof(err) - 1);
    err[0] = 'x';
    assert_int_equal(sim_trace_load(&t, bad, NULL, err, 1), GPO_EINVAL);
    assert_int_equal(err[0], '\0');
    assert_int_equal(sim_trace_load(&t, bad, NULL, NULL, 0), GPO_EINVAL);
    /* A second load replaces the first. */
    assert_int_equal(sim_trace_load(&t, path, NULL, err, sizeof(err)), 0);
    assert_int_equal(sim_trace_load(&t, path, NULL, err, sizeof(err)), 0);
    check_small(&t);
    sim_trace_release(&t);
    sim_trace_release(&t);
    sim_trace_release(NULL);
    assert_empty(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_trace_every_field),
        cmocka_unit_test(test_gzip_gives_the_same_trace),
        cmocka_unit_test(test_crlf_and_no_final_newline),
        cmocka_unit_test(test_header_only_is_an_empty_trace),
        cmocka_unit_test(test_missing_and_empty_files),
        cmocka_unit_test(test_wrong_header),
        cmocka_unit_test(test_broken_gzip_is_a_read_error),
        cmocka_unit_test(test_bad_rows_name_file_line_and_field),
        cmocka_unit_test(test_long_values_are_cut_in_messages),
        cmocka_unit_test(test_line_length_cap),
        cmocka_unit_test(test_line_length_cap_at_the_end),
        cmocka_unit_test(test_num_gpus_in_milli),
        cmocka_unit_test(test_largest_seconds_are_accepted),
        cmocka_unit_test(test_skip_bad_counts_and_keeps_the_first_message),
        cmocka_unit_test(test_window_keeps_from_inclusive_until_exclusive),
        cmocka_unit_test(test_empty_window_is_an_error),
        cmocka_unit_test(test_window_still_checks_every_row),
        cmocka_unit_test(test_too_many_names),
        cmocka_unit_test(test_many_rows_grow_the_maps),
        cmocka_unit_test(test_error_leaves_trace_empty_and_err_terminated),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

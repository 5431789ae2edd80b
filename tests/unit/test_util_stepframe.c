/*
 * test_util_stepframe.c - a job step's output frames (util/stepframe.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "util/stepframe.h"
#include "base/banned.h"

static void stepframe_head_reads_back_as_written_big_endian(void **state)
{
    (void)state;
    uint8_t h[STEPFRAME_HEAD];
    stepframe_head(&(struct stepframe){.type = STEPFRAME_STDERR, .task = 0x01020304, .len = 300},
                   h);
    const uint8_t want[STEPFRAME_HEAD] = {2, 1, 2, 3, 4, 0, 0, 1, 44};
    assert_memory_equal(h, want, sizeof(want));
    struct stepframe f;
    assert_int_equal(stepframe_parse(h, &f), 0);
    assert_int_equal(f.type, STEPFRAME_STDERR);
    assert_int_equal(f.task, 0x01020304);
    assert_int_equal(f.len, 300);
}

static void stepframe_parse_refuses_unknown_types_long_data_and_odd_exits(void **state)
{
    (void)state;
    struct stepframe f = {.type = STEPFRAME_STDOUT, .task = 9, .len = 9};
    uint8_t h[STEPFRAME_HEAD];
    const struct stepframe bad[] = {
        {.type = 0, .len = 1},
        {.type = 8, .len = 1},
        {.type = STEPFRAME_WINSIZE, .len = 3},
        {.type = STEPFRAME_HANGUP, .len = 1},
        {.type = STEPFRAME_STDOUT, .len = STEPFRAME_DATA_MAX + 1},
        {.type = STEPFRAME_EXIT, .len = 4},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        stepframe_head(&bad[k], h);
        assert_int_equal(stepframe_parse(h, &f), GPO_EINVAL);
        assert_int_equal(f.task, 9); /* untouched */
    }
    stepframe_head(&(struct stepframe){.type = STEPFRAME_ERROR, .len = 0}, h);
    assert_int_equal(stepframe_parse(h, &f), 0);
}

static void stepframe_exit_data_keeps_status_and_signal(void **state)
{
    (void)state;
    uint8_t d[8];
    int32_t status = 0, sig = 0;
    stepframe_exit_data(-1, 9, d);
    stepframe_exit_read(d, &status, &sig);
    assert_int_equal(status, -1);
    assert_int_equal(sig, 9);
    stepframe_exit_data(255, 0, d);
    stepframe_exit_read(d, &status, &sig);
    assert_int_equal(status, 255);
    assert_int_equal(sig, 0);
}

static void stepframe_winsize_keeps_rows_and_cols_and_input_types_are_named(void **state)
{
    (void)state;
    uint8_t d[4];
    uint16_t rows = 0, cols = 0;
    stepframe_winsize_data(300, 80, d);
    const uint8_t want[4] = {1, 44, 0, 80};
    assert_memory_equal(d, want, sizeof(want));
    stepframe_winsize_read(d, &rows, &cols);
    assert_int_equal(rows, 300);
    assert_int_equal(cols, 80);
    assert_true(stepframe_is_input(STEPFRAME_STDIN));
    assert_true(stepframe_is_input(STEPFRAME_WINSIZE));
    assert_true(stepframe_is_input(STEPFRAME_HANGUP));
    assert_false(stepframe_is_input(STEPFRAME_STDOUT));
    assert_false(stepframe_is_input(STEPFRAME_EXIT));
    uint8_t h[STEPFRAME_HEAD];
    struct stepframe f;
    stepframe_head(&(struct stepframe){.type = STEPFRAME_WINSIZE, .len = 4}, h);
    assert_int_equal(stepframe_parse(h, &f), 0);
    stepframe_head(&(struct stepframe){.type = STEPFRAME_HANGUP, .len = 0}, h);
    assert_int_equal(stepframe_parse(h, &f), 0);
}

struct seen {
    int n;
    enum stepframe_type types[4];
    char text[64];
    int stop_at; /* the frame whose callback returns GPO_ECANCELED; 0: none */
};

static int on_frame(void *ctx, const struct stepframe *f, const uint8_t *data)
{
    struct seen *s = ctx;
    if (s->n < 4)
        s->types[s->n] = f->type;
    size_t at = strlen(s->text), n = f->len < 16 ? f->len : 16;
    memcpy(s->text + at, data, n);
    s->text[at + n] = '\0';
    return ++s->n == s->stop_at ? GPO_ECANCELED : 0;
}

/* Two frames fed a byte at a time, then at once: each comes whole, in
 * order; a callback's code stops the feed; a bad head breaks the stream. */
static void stepframe_reader_gives_whole_frames_however_the_bytes_come(void **state)
{
    (void)state;
    uint8_t in[2 * STEPFRAME_HEAD + 5];
    stepframe_head(&(struct stepframe){.type = STEPFRAME_STDOUT, .len = 3}, in);
    memcpy(in + STEPFRAME_HEAD, "abc", 3);
    stepframe_head(&(struct stepframe){.type = STEPFRAME_STDERR, .len = 2},
                   in + STEPFRAME_HEAD + 3);
    memcpy(in + 2 * STEPFRAME_HEAD + 3, "de", 2);
    static struct stepframe_reader r;
    struct seen s = {0};
    for (size_t k = 0; k < sizeof(in); k++)
        assert_int_equal(stepframe_reader_feed(&r, in + k, 1, on_frame, &s), 0);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.types[0], STEPFRAME_STDOUT);
    assert_int_equal(s.types[1], STEPFRAME_STDERR);
    assert_string_equal(s.text, "abcde");
    assert_int_equal(r.len, 0);
    s = (struct seen){.stop_at = 1};
    assert_int_equal(stepframe_reader_feed(&r, in, sizeof(in), on_frame, &s), GPO_ECANCELED);
    assert_int_equal(s.n, 1);
    r.len = 0;
    uint8_t bad[STEPFRAME_HEAD] = {99};
    s = (struct seen){0};
    assert_int_equal(stepframe_reader_feed(&r, bad, sizeof(bad), on_frame, &s), GPO_EINVAL);
    assert_int_equal(s.n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stepframe_head_reads_back_as_written_big_endian),
        cmocka_unit_test(stepframe_parse_refuses_unknown_types_long_data_and_odd_exits),
        cmocka_unit_test(stepframe_exit_data_keeps_status_and_signal),
        cmocka_unit_test(stepframe_winsize_keeps_rows_and_cols_and_input_types_are_named),
        cmocka_unit_test(stepframe_reader_gives_whole_frames_however_the_bytes_come),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_server_prom.c - the Prometheus text writer: whole expositions compared
 * byte for byte (HELP/TYPE lines, label escaping, "" labels left out), the
 * value text (integers without exponent, shortest round trip, NaN and
 * infinities), histograms' cumulative buckets, and every kind of misuse
 * making the error sticky. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/prom.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The text of p, which must have no error. */
static const char *text_of(const struct prom *p)
{
    size_t len = 0;
    const char *t = prom_text(p, &len);
    assert_non_null(t);
    assert_int_equal(strlen(t), len);
    return t;
}

/* The text one gauge sample of `v` gets after "g ". */
static void assert_value_text(double v, const char *want)
{
    struct prom *p = prom_new();
    assert_non_null(p);
    prom_family(p, "g", PROM_GAUGE, "h");
    prom_sample(p, "g", NULL, v);
    char expect[128];
    snprintf(expect, sizeof(expect), "# HELP g h\n# TYPE g gauge\ng %s\n", want);
    assert_string_equal(text_of(p), expect);
    prom_free(p);
}

static void test_empty_exposition_is_empty_text(void **state)
{
    (void)state;
    struct prom *p = prom_new();
    assert_non_null(p);
    size_t len = 99;
    const char *t = prom_text(p, &len);
    assert_non_null(t);
    assert_string_equal(t, "");
    assert_int_equal(len, 0);
    prom_free(p);
    prom_free(NULL);
}

static void test_families_and_samples_are_written_in_order(void **state)
{
    (void)state;
    struct prom *p = prom_new();
    prom_family(p, "gpuorch_queue_length", PROM_GAUGE, "Pending jobs.");
    const char *a[] = {"team", "ml", "priority", "high", NULL};
    const char *b[] = {"team", "vision", "priority", "normal", NULL};
    prom_sample(p, "gpuorch_queue_length", a, 3);
    prom_sample(p, "gpuorch_queue_length", b, 0);
    prom_family(p, "gpuorch_passes_total", PROM_COUNTER, "Passes run.");
    prom_sample(p, "gpuorch_passes_total", NULL, 12);
    prom_family(p, "gpuorch_bytes", PROM_COUNTER, "Bytes: _total is added.");
    prom_sample(p, "gpuorch_bytes_total", NULL, 7);
    prom_sample(p, "gpuorch_bytes", NULL, 8);
    assert_string_equal(text_of(p), "# HELP gpuorch_queue_length Pending jobs.\n"
                                    "# TYPE gpuorch_queue_length gauge\n"
                                    "gpuorch_queue_length{team=\"ml\",priority=\"high\"} 3\n"
                                    "gpuorch_queue_length{team=\"vision\",priority=\"normal\"} 0\n"
                                    "# HELP gpuorch_passes_total Passes run.\n"
                                    "# TYPE gpuorch_passes_total counter\n"
                                    "gpuorch_passes_total 12\n"
                                    "# HELP gpuorch_bytes_total Bytes: _total is added.\n"
                                    "# TYPE gpuorch_bytes_total counter\n"
                                    "gpuorch_bytes_total 7\n"
                                    "gpuorch_bytes_total 8\n");
    prom_free(p);
}

static void test_label_values_escape_backslash_quote_and_newline(void **state)
{
    (void)state;
    struct prom *p = prom_new();
    prom_family(p, "m", PROM_GAUGE, "help with \\ and\nnewline and \"quotes\"");
    const char *l[] = {"a", "x\\y\"z\nw", "b", "plain", NULL};
    prom_sample(p, "m", l, 1);
    assert_string_equal(text_of(p), "# HELP m help with \\\\ and\\nnewline and \"quotes\"\n"
                                    "# TYPE m gauge\n"
                                    "m{a=\"x\\\\y\\\"z\\nw\",b=\"plain\"} 1\n");
    prom_free(p);
}

static void test_empty_label_values_are_left_out(void **state)
{
    (void)state;
    struct prom *p = prom_new();
    prom_family(p, "m", PROM_GAUGE, "h");
    const char *some[] = {"gpu", "0", "hpc_job", "", "team", "ml", NULL};
    const char *none[] = {"hpc_job", "", "team", "", NULL};
    prom_sample(p, "m", some, 1);
    prom_sample(p, "m", none, 2);
    assert_string_equal(text_of(p),
                        "# HELP m h\n# TYPE m gauge\nm{gpu=\"0\",team=\"ml\"} 1\nm 2\n");
    prom_free(p);
}

static void test_integers_print_without_exponent_where_exact(void **state)
{
    (void)state;
    assert_value_text(0, "0");
    assert_value_text(42, "42");
    assert_value_text(-7, "-7");
    assert_value_text(1e15, "1000000000000000");
    assert_value_text(9007199254740993.0, "9007199254740992"); /* 2^53 + 1 rounds to 2^53 */
    assert_value_text(1e18, "1000000000000000000");
    assert_value_text(-1e18, "-1000000000000000000");
    assert_value_text(1e300, "1e+300");
}

static void test_fractions_print_their_shortest_round_trip(void **state)
{
    (void)state;
    assert_value_text(0.1, "0.1");
    assert_value_text(123.456, "123.456");
    assert_value_text(0.005, "0.005");
    assert_value_text(1.0 / 3.0, "0.3333333333333333");
    assert_value_text(0.1 + 0.2, "0.30000000000000004");
    assert_value_text(2.5e-7, "2.5e-07");
    /* Whatever the path, the text reads back to the same double. */
    const double vals[] = {M_PI, 1e-300, 5e-324, 1.7976931348623157e308, 299.792458, 0.0001};
    for (size_t k = 0; k < ARRAY_LEN(vals); k++) {
        struct prom *p = prom_new();
        prom_family(p, "g", PROM_GAUGE, "h");
        prom_sample(p, "g", NULL, vals[k]);
        const char *t = strstr(text_of(p), "\ng ");
        assert_non_null(t);
        assert_true(strtod(t + 3, NULL) == vals[k]);
        prom_free(p);
    }
}

static void test_nan_and_infinities_use_the_format_spelling(void **state)
{
    (void)state;
    assert_value_text(NAN, "NaN");
    assert_value_text(INFINITY, "+Inf");
    assert_value_text(-INFINITY, "-Inf");
}

static void test_histogram_buckets_are_cumulative_and_end_at_inf(void **state)
{
    (void)state;
    struct prom *p = prom_new();
    prom_family(p, "wait_seconds", PROM_HISTOGRAM, "Waits.");
    const double bounds[] = {0.5, 1, 10};
    const uint64_t counts[] = {2, 0, 3};
    const char *l[] = {"team", "ml", NULL};
    prom_histogram(p, "wait_seconds", l, bounds, counts, ARRAY_LEN(bounds), 41.25, 6);
    prom_histogram(p, "wait_seconds", NULL, bounds, counts, 0, 0, 0);
    assert_string_equal(text_of(p), "# HELP wait_seconds Waits.\n"
                                    "# TYPE wait_seconds histogram\n"
                                    "wait_seconds_bucket{team=\"ml\",le=\"0.5\"} 2\n"
                                    "wait_seconds_bucket{team=\"ml\",le=\"1\"} 2\n"
                                    "wait_seconds_bucket{team=\"ml\",le=\"10\"} 5\n"
                                    "wait_seconds_bucket{team=\"ml\",le=\"+Inf\"} 6\n"
                                    "wait_seconds_sum{team=\"ml\"} 41.25\n"
                                    "wait_seconds_count{team=\"ml\"} 6\n"
                                    "wait_seconds_bucket{le=\"+Inf\"} 0\n"
                                    "wait_seconds_sum 0\n"
                                    "wait_seconds_count 0\n");
    prom_free(p);
}

static void test_summary_lists_quantiles_then_sum_and_count(void **state)
{
    (void)state;
    struct prom *p = prom_new();
    prom_family(p, "lag_seconds", PROM_SUMMARY, "Lags.");
    const double q[] = {0.5, 0.99, 1};
    const double v[] = {0.012, 0.5, NAN};
    const char *l[] = {"node", "a", NULL};
    prom_summary(p, "lag_seconds", l, q, v, 3, 7.5, 40);
    assert_string_equal(text_of(p), "# HELP lag_seconds Lags.\n"
                                    "# TYPE lag_seconds summary\n"
                                    "lag_seconds{node=\"a\",quantile=\"0.5\"} 0.012\n"
                                    "lag_seconds{node=\"a\",quantile=\"0.99\"} 0.5\n"
                                    "lag_seconds{node=\"a\",quantile=\"1\"} NaN\n"
                                    "lag_seconds_sum{node=\"a\"} 7.5\n"
                                    "lag_seconds_count{node=\"a\"} 40\n");
    prom_free(p);
}

/* One way of misusing the writer, after a valid first family. */
struct misuse {
    const char *what;
    void (*apply)(struct prom *p);
};

static const char *const LE[] = {"le", "1", NULL};
static const char *const BADNAME[] = {"1abc", "x", NULL};
static const char *const COLONLABEL[] = {"a:b", "x", NULL};
static const char *const RESERVED[] = {"__name__", "x", NULL};
static const char *const DUP[] = {"a", "x", "a", "y", NULL};
static const char *const NOVALUE[] = {"a", NULL};

static void family_twice(struct prom *p)
{
    prom_family(p, "ok", PROM_GAUGE, "again");
}
static void counter_twice_with_total(struct prom *p)
{
    prom_family(p, "c", PROM_COUNTER, "h");
    prom_family(p, "c_total", PROM_COUNTER, "h");
}
static void family_bad_name(struct prom *p)
{
    prom_family(p, "9lives", PROM_GAUGE, "h");
}
static void family_empty_name(struct prom *p)
{
    prom_family(p, "", PROM_GAUGE, "h");
}
static void family_no_help(struct prom *p)
{
    prom_family(p, "other", PROM_GAUGE, NULL);
}
static void sample_other_family(struct prom *p)
{
    prom_sample(p, "never_opened", NULL, 1);
}
static void gauge_total_suffix(struct prom *p)
{
    prom_sample(p, "ok_total", NULL, 1);
}
static void label_bad_name(struct prom *p)
{
    prom_sample(p, "ok", BADNAME, 1);
}
static void label_with_colon(struct prom *p)
{
    prom_sample(p, "ok", COLONLABEL, 1);
}
static void label_reserved(struct prom *p)
{
    prom_sample(p, "ok", RESERVED, 1);
}
static void label_twice(struct prom *p)
{
    prom_sample(p, "ok", DUP, 1);
}
static void label_without_value(struct prom *p)
{
    prom_sample(p, "ok", NOVALUE, 1);
}
static void histogram_on_gauge(struct prom *p)
{
    const double b[] = {1};
    const uint64_t c[] = {1};
    prom_histogram(p, "ok", NULL, b, c, 1, 1, 1);
}
static void sample_on_histogram(struct prom *p)
{
    prom_family(p, "h", PROM_HISTOGRAM, "h");
    prom_sample(p, "h", NULL, 1);
}
static void histogram_le_label(struct prom *p)
{
    const double b[] = {1};
    const uint64_t c[] = {1};
    prom_family(p, "h", PROM_HISTOGRAM, "h");
    prom_histogram(p, "h", LE, b, c, 1, 1, 1);
}
static void histogram_bounds_not_increasing(struct prom *p)
{
    const double b[] = {1, 1};
    const uint64_t c[] = {1, 1};
    prom_family(p, "h", PROM_HISTOGRAM, "h");
    prom_histogram(p, "h", NULL, b, c, 2, 1, 2);
}
static void histogram_inf_bound(struct prom *p)
{
    const double b[] = {1, INFINITY};
    const uint64_t c[] = {1, 1};
    prom_family(p, "h", PROM_HISTOGRAM, "h");
    prom_histogram(p, "h", NULL, b, c, 2, 1, 2);
}
static void histogram_count_below_buckets(struct prom *p)
{
    const double b[] = {1, 2};
    const uint64_t c[] = {1, 1};
    prom_family(p, "h", PROM_HISTOGRAM, "h");
    prom_histogram(p, "h", NULL, b, c, 2, 1, 1);
}
static void histogram_wrong_name(struct prom *p)
{
    const double b[] = {1};
    const uint64_t c[] = {0};
    prom_family(p, "h", PROM_HISTOGRAM, "h");
    prom_histogram(p, "h_seconds", NULL, b, c, 1, 0, 0);
}

static const char *const QUANTILE[] = {"quantile", "0.5", NULL};
static void summary_quantile_label(struct prom *p)
{
    const double q[] = {0.5};
    const double v[] = {1};
    prom_family(p, "s", PROM_SUMMARY, "h");
    prom_summary(p, "s", QUANTILE, q, v, 1, 1, 1);
}
static void summary_quantile_out_of_range(struct prom *p)
{
    const double q[] = {0.5, 1.5};
    const double v[] = {1, 2};
    prom_family(p, "s", PROM_SUMMARY, "h");
    prom_summary(p, "s", NULL, q, v, 2, 1, 1);
}
static void summary_on_gauge(struct prom *p)
{
    prom_summary(p, "ok", NULL, NULL, NULL, 0, 0, 0);
}
static void sample_on_summary(struct prom *p)
{
    prom_family(p, "s", PROM_SUMMARY, "h");
    prom_sample(p, "s", NULL, 1);
}

static void test_every_misuse_makes_the_error_sticky(void **state)
{
    (void)state;
    const struct misuse cases[] = {
        {"a family opened twice", family_twice},
        {"a counter opened as c and as c_total", counter_twice_with_total},
        {"a family name starting with a digit", family_bad_name},
        {"an empty family name", family_empty_name},
        {"a family without help", family_no_help},
        {"a sample of a family never opened", sample_other_family},
        {"_total on a gauge", gauge_total_suffix},
        {"a label name starting with a digit", label_bad_name},
        {"a colon in a label name", label_with_colon},
        {"a reserved __ label", label_reserved},
        {"a label given twice", label_twice},
        {"a label name without a value", label_without_value},
        {"a histogram of a gauge family", histogram_on_gauge},
        {"a plain sample of a histogram family", sample_on_histogram},
        {"an le label on a histogram", histogram_le_label},
        {"bounds not increasing", histogram_bounds_not_increasing},
        {"+Inf among the bounds", histogram_inf_bound},
        {"count below the buckets' sum", histogram_count_below_buckets},
        {"a histogram under another name", histogram_wrong_name},
        {"a quantile label on a summary", summary_quantile_label},
        {"a quantile above 1", summary_quantile_out_of_range},
        {"a summary of a gauge family", summary_on_gauge},
        {"a plain sample of a summary family", sample_on_summary},
    };
    for (size_t k = 0; k < ARRAY_LEN(cases); k++) {
        struct prom *p = prom_new();
        prom_family(p, "ok", PROM_GAUGE, "h");
        prom_sample(p, "ok", NULL, 1);
        assert_non_null(prom_text(p, NULL));
        cases[k].apply(p);
        if (prom_text(p, NULL)) {
            print_error("not refused: %s\n", cases[k].what);
            fail();
        }
        /* Later valid calls change nothing: the error stays. */
        prom_family(p, "fresh", PROM_GAUGE, "h");
        prom_sample(p, "fresh", NULL, 1);
        size_t len = 12345;
        assert_null(prom_text(p, &len));
        assert_int_equal(len, 12345);
        prom_free(p);
    }
}

static void test_null_writer_is_ignored(void **state)
{
    (void)state;
    prom_family(NULL, "x", PROM_GAUGE, "h");
    prom_sample(NULL, "x", NULL, 1);
    prom_histogram(NULL, "x", NULL, NULL, NULL, 0, 0, 0);
    prom_summary(NULL, "x", NULL, NULL, NULL, 0, 0, 0);
    assert_null(prom_text(NULL, NULL));
}

static void test_large_expositions_grow_the_buffer(void **state)
{
    (void)state;
    struct prom *p = prom_new();
    prom_family(p, "DCGM_FI_DEV_GPU_UTIL", PROM_GAUGE, "GPU utilization (in %).");
    char gpu[16];
    for (int k = 0; k < 20000; k++) {
        snprintf(gpu, sizeof(gpu), "%d", k);
        const char *l[] = {"gpu", gpu, "Hostname", "node-a", NULL};
        prom_sample(p, "DCGM_FI_DEV_GPU_UTIL", l, k % 101);
    }
    const char *t = text_of(p);
    assert_non_null(strstr(t, "DCGM_FI_DEV_GPU_UTIL{gpu=\"19999\",Hostname=\"node-a\"} 1\n"));
    size_t lines = 0;
    for (const char *c = t; *c; c++)
        lines += *c == '\n';
    assert_int_equal(lines, 20002);
    prom_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_exposition_is_empty_text),
        cmocka_unit_test(test_families_and_samples_are_written_in_order),
        cmocka_unit_test(test_label_values_escape_backslash_quote_and_newline),
        cmocka_unit_test(test_empty_label_values_are_left_out),
        cmocka_unit_test(test_integers_print_without_exponent_where_exact),
        cmocka_unit_test(test_fractions_print_their_shortest_round_trip),
        cmocka_unit_test(test_nan_and_infinities_use_the_format_spelling),
        cmocka_unit_test(test_histogram_buckets_are_cumulative_and_end_at_inf),
        cmocka_unit_test(test_summary_lists_quantiles_then_sum_and_count),
        cmocka_unit_test(test_every_misuse_makes_the_error_sticky),
        cmocka_unit_test(test_null_writer_is_ignored),
        cmocka_unit_test(test_large_expositions_grow_the_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_server_series.c - the in-memory series: rings wrap and keep the
 * latest points, samples older than the horizon are not read, one-minute
 * rollups are exact (sums, maxima, idle counts) and close on a later sample
 * or on take, attempt minutes go away once taken, step means over a set of
 * GPUs, owners recorded per sample, and the queue length. No clock: every
 * time is given. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/monitor/series.h"
#include "base/banned.h"

#define BASE INT64_C(1700000000000) /* a minute boundary: 1700000000000 % 60000 == 20000 */

static const struct series_gpu_info gpu_a = {"GPU-a", "n1", "H100", 0};
static const struct series_gpu_info gpu_b = {"GPU-b", "n1", "H100", 1};

static struct series_sample util(int64_t u)
{
    return (struct series_sample){u, 1000 + u, 100000 + 1000 * u, 40 + u / 10};
}

struct collected {
    int64_t t[8192];
    int64_t util[8192];
    int64_t job[8192];
    size_t n;
};

static void collect(void *ctx, const struct series_gpu_info *g, int64_t job, int64_t t_ms,
                    const struct series_sample *v)
{
    (void)g;
    struct collected *c = ctx;
    if (c->n < 8192) {
        c->t[c->n] = t_ms;
        c->util[c->n] = v->util_pct;
        c->job[c->n] = job;
        c->n++;
    }
}

static void ring_wraps_and_keeps_the_latest_points(void **state)
{
    (void)state;
    struct series *s = series_new(BASE, 10, 3600000, 60000);
    assert_non_null(s);
    for (int64_t k = 0; k < 25; k++) {
        struct series_sample v = util(k);
        assert_int_equal(series_gpu_put(s, &gpu_a, BASE + k * 1000, &v, 0, 5), 0);
    }
    struct collected *c = calloc(1, sizeof(*c));
    series_scan(s, "GPU-a", BASE, BASE + 100000, BASE + 25000, collect, c);
    assert_int_equal(c->n, 10);
    for (size_t k = 0; k < 10; k++) {
        assert_int_equal(c->util[k], 15 + (int64_t)k);
        assert_int_equal(c->t[k], BASE + (15 + (int64_t)k) * 1000);
    }
    struct series_sample last;
    int64_t t;
    assert_int_equal(series_gpu_latest(s, "GPU-a", BASE + 25000, &last, &t), 0);
    assert_int_equal(last.util_pct, 24);
    assert_int_equal(last.mem_used_mib, 1024);
    assert_int_equal(last.power_mw, 124000);
    assert_int_equal(last.temp_c, 42);
    assert_int_equal(t, BASE + 24000);
    assert_int_equal(series_gpu_latest(s, "GPU-zz", BASE + 25000, &last, &t), -ENOENT);
    free(c);
    series_free(s);
}

static void points_older_than_the_horizon_are_not_read(void **state)
{
    (void)state;
    struct series *s = series_new(BASE, 100, 10000, 60000);
    for (int64_t k = 0; k < 30; k++) {
        struct series_sample v = util(k);
        series_gpu_put(s, &gpu_a, BASE + k * 1000, &v, 0, 5);
    }
    struct collected *c = calloc(1, sizeof(*c));
    series_scan(s, NULL, BASE, BASE + 60000, BASE + 30000, collect, c);
    assert_int_equal(c->n, 10); /* 20 s .. 29 s */
    assert_int_equal(c->util[0], 20);
    struct series_sample last;
    assert_int_equal(series_gpu_latest(s, "GPU-a", BASE + 40000, &last, NULL), -ENOENT);
    assert_int_equal(series_ring_start(s, BASE + 30000), BASE + 20000);
    assert_int_equal(series_ring_start(s, BASE + 5000), BASE);
    free(c);
    series_free(s);
}

static void minute_rollup_is_exact_and_closes_on_a_later_sample(void **state)
{
    (void)state;
    int64_t m0 = BASE - BASE % 60000 + 60000; /* a minute boundary after BASE */
    struct series *s = series_new(BASE, 3600, 3600000, 60000);
    /* 60 samples in minute m0: utilization 0..59; threshold 10 => 10 idle. */
    for (int64_t k = 0; k < 60; k++) {
        struct series_sample v = util(k);
        assert_int_equal(series_gpu_put(s, &gpu_a, m0 + k * 1000, &v, 7, 10), 0);
        assert_int_equal(series_job_put(s, "7.1", "ml", m0 + k * 1000, &v, 10), 0);
    }
    struct series_minute *m = NULL;
    size_t n = 99;
    /* Nothing has closed before the minute ends. */
    assert_int_equal(series_minutes_take(s, m0 + 59999, &m, &n), 0);
    assert_int_equal(n, 0);
    series_minutes_free(m, n);
    /* A sample of the next minute closes the GPU's minute at once. */
    struct series_sample v = util(100);
    series_gpu_put(s, &gpu_a, m0 + 60000, &v, 7, 10);
    assert_int_equal(series_minutes_take(s, m0 + 60001, &m, &n), 0);
    assert_int_equal(n, 2);
    const struct series_minute *g = m[0].kind == SERIES_KIND_GPU ? &m[0] : &m[1];
    const struct series_minute *j = m[0].kind == SERIES_KIND_JOB ? &m[0] : &m[1];
    assert_string_equal(g->key, "GPU-a");
    assert_string_equal(g->label, "n1");
    assert_int_equal(g->minute_ms, m0);
    assert_int_equal(g->samples, 60);
    assert_int_equal(g->util_sum, 59 * 60 / 2);
    assert_int_equal(g->util_max, 59);
    assert_int_equal(g->idle_samples, 10);
    assert_int_equal(g->mem_sum_mib, 60 * 1000 + 59 * 60 / 2);
    assert_int_equal(g->mem_max_mib, 1059);
    assert_int_equal(g->power_sum_mw, 60 * 100000 + 1000 * 59 * 60 / 2);
    assert_int_equal(g->temp_max_c, 45);
    assert_string_equal(j->key, "7.1");
    assert_string_equal(j->label, "ml");
    assert_int_equal(j->samples, 60);
    assert_int_equal(j->util_sum, g->util_sum);
    series_minutes_free(m, n);
    /* The attempt's entry went away with its minute; the GPU's next minute is
     * handed out once it ends. */
    assert_int_equal(series_minutes_take(s, m0 + 120000, &m, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(m[0].key, "GPU-a");
    assert_int_equal(m[0].minute_ms, m0 + 60000);
    assert_int_equal(m[0].samples, 1);
    assert_int_equal(m[0].util_sum, 100);
    series_minutes_free(m, n);
    assert_int_equal(series_minutes_take(s, m0 + 240000, &m, &n), 0);
    assert_int_equal(n, 0);
    series_minutes_free(m, n);
    series_free(s);
}

static void short_test_minutes_roll_up_the_same_way(void **state)
{
    (void)state;
    struct series *s = series_new(0, 3600, 3600000, 2000);
    assert_int_equal(series_minute_ms(s), 2000);
    for (int64_t k = 0; k < 10; k++) { /* 5 minutes of 2 samples each */
        struct series_sample v = util(k);
        series_gpu_put(s, &gpu_b, k * 1000, &v, 0, 5);
    }
    struct series_minute *m = NULL;
    size_t n = 0;
    assert_int_equal(series_minutes_take(s, 10000, &m, &n), 0);
    assert_int_equal(n, 5);
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(m[k].minute_ms, (int64_t)k * 2000);
        assert_int_equal(m[k].samples, 2);
        assert_int_equal(m[k].util_sum, 4 * (int64_t)k + 1);
        assert_int_equal(m[k].idle_samples, k < 2 ? 2 : k == 2 ? 1 : 0);
    }
    series_minutes_free(m, n);
    series_free(s);
}

static void step_means_average_every_sample_of_the_set_in_each_bucket(void **state)
{
    (void)state;
    struct series *s = series_new(BASE, 3600, 3600000, 60000);
    for (int64_t k = 0; k < 20; k++) {
        struct series_sample va = util(k), vb = util(50);
        series_gpu_put(s, &gpu_a, BASE + k * 1000, &va, 0, 5);
        if (k < 10)
            series_gpu_put(s, &gpu_b, BASE + k * 1000, &vb, 0, 5);
    }
    double means[3];
    const char *a[] = {"GPU-a"};
    assert_int_equal(series_points(s, a, 1, SERIES_UTIL, BASE, 10000, 3, BASE + 20000, means), 0);
    assert_true(fabs(means[0] - 4.5) < 1e-9);  /* 0..9 */
    assert_true(fabs(means[1] - 14.5) < 1e-9); /* 10..19 */
    assert_true(isnan(means[2]));
    const char *ab[] = {"GPU-a", "GPU-b"};
    assert_int_equal(series_points(s, ab, 2, SERIES_UTIL, BASE, 10000, 2, BASE + 20000, means), 0);
    assert_true(fabs(means[0] - (4.5 * 10 + 50 * 10) / 20) < 1e-9);
    assert_true(fabs(means[1] - 14.5) < 1e-9);
    assert_int_equal(series_points(s, NULL, 0, SERIES_POWER, BASE, 20000, 1, BASE + 20000, means),
                     0);
    /* power: 100 W + u W; GPU-a 0..19 (mean 9.5), GPU-b 50 for 10 */
    assert_true(fabs(means[0] - (100 + (9.5 * 20 + 50 * 10) / 30)) < 1e-9);
    assert_int_equal(series_points(s, NULL, 0, SERIES_UTIL, BASE, 0, 1, BASE, means), -EINVAL);
    series_free(s);
}

static void each_sample_keeps_the_job_that_held_the_gpu(void **state)
{
    (void)state;
    struct series *s = series_new(BASE, 3600, 3600000, 60000);
    for (int64_t k = 0; k < 9; k++) {
        struct series_sample v = util(k);
        series_gpu_put(s, &gpu_a, BASE + k * 1000, &v, k < 3 ? 0 : k < 6 ? 11 : 12, 5);
    }
    struct collected *c = calloc(1, sizeof(*c));
    series_scan(s, "GPU-a", BASE, BASE + 9000, BASE + 9000, collect, c);
    assert_int_equal(c->n, 9);
    for (size_t k = 0; k < 9; k++)
        assert_int_equal(c->job[k], k < 3 ? 0 : k < 6 ? 11 : 12);
    /* A sample older than the latest is dropped. */
    struct series_sample v = util(99);
    assert_int_equal(series_gpu_put(s, &gpu_a, BASE + 1000, &v, 0, 5), 0);
    c->n = 0;
    series_scan(s, "GPU-a", BASE, BASE + 9000, BASE + 9000, collect, c);
    assert_int_equal(c->n, 9);
    assert_int_equal(series_gpu_count(s), 1);
    free(c);
    series_free(s);
}

struct qseen {
    char key[8][32];
    int64_t t[8];
    uint32_t v[8];
    size_t n;
};

static void qcollect(void *ctx, const char *key, int64_t t_ms, uint32_t value)
{
    struct qseen *q = ctx;
    if (q->n < 8) {
        snprintf(q->key[q->n], sizeof(q->key[0]), "%s", key);
        q->t[q->n] = t_ms;
        q->v[q->n++] = value;
    }
}

static void queue_length_keeps_one_point_a_second_per_key(void **state)
{
    (void)state;
    struct series *s = series_new(BASE, 3600, 3600000, 60000);
    assert_int_equal(series_queue_put(s, "total", 3, BASE), 0);
    assert_int_equal(series_queue_put(s, "total", 4, BASE + 500), 0); /* replaces */
    assert_int_equal(series_queue_put(s, "total", 5, BASE + 1000), 0);
    assert_int_equal(series_queue_put(s, "team/ml", 2, BASE + 1000), 0);
    assert_int_equal(series_queue_put(s, "", 2, BASE + 1000), -EINVAL);
    struct qseen q = {0};
    series_queue_scan(s, BASE, BASE + 2000, BASE + 2000, qcollect, &q);
    assert_int_equal(q.n, 3);
    assert_string_equal(q.key[0], "total");
    assert_int_equal(q.v[0], 4);
    assert_int_equal(q.t[0], BASE);
    assert_int_equal(q.v[1], 5);
    assert_string_equal(q.key[2], "team/ml");
    assert_int_equal(q.v[2], 2);
    series_free(s);
}

static void bad_arguments_are_refused(void **state)
{
    (void)state;
    assert_null(series_new(0, 0, 3600000, 60000));
    assert_null(series_new(0, 10, 10, 60000));
    assert_null(series_new(0, 10, 3600000, 1));
    struct series *s = series_new(0, 10, 3600000, 60000);
    struct series_sample v = util(1);
    struct series_gpu_info none = {NULL, "n1", "", 0};
    assert_int_equal(series_gpu_put(s, &none, 0, &v, 0, 5), -EINVAL);
    assert_int_equal(series_job_put(s, "", "ml", 0, &v, 5), -EINVAL);
    series_free(s);
    series_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ring_wraps_and_keeps_the_latest_points),
        cmocka_unit_test(points_older_than_the_horizon_are_not_read),
        cmocka_unit_test(minute_rollup_is_exact_and_closes_on_a_later_sample),
        cmocka_unit_test(short_test_minutes_roll_up_the_same_way),
        cmocka_unit_test(step_means_average_every_sample_of_the_set_in_each_bucket),
        cmocka_unit_test(each_sample_keeps_the_job_that_held_the_gpu),
        cmocka_unit_test(queue_length_keeps_one_point_a_second_per_key),
        cmocka_unit_test(bad_arguments_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

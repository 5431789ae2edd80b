/* test_store_minutes.c - one-minute metric aggregates in the store (SQLite, and PostgreSQL under
 * tests/tools/with_pg.py): a batch of GPU and job minutes read back by kind, key and time range; a
 * minute written twice is merged; retention deletes only older minutes; bad
 * arguments are refused. Each test works in its own directory under /tmp. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "store/store.h"
#include "storetest.h"
#include "tmptree.h"
#include "base/banned.h"

struct env {
    void *db; /* struct tmpdb */
    struct store *s;
};

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    if (!e)
        return -1;
    if (storetest_setup(&e->db, "test_store_minutes")) {
        free(e);
        return -1;
    }
    e->s = storetest_open(e->db);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    storetest_close(e->s);
    tmpdb_teardown(&e->db);
    free(e);
    return 0;
}

static struct store_minute minute(enum store_minute_kind kind, const char *key, const char *label,
                                  int64_t minute_ms, int64_t samples, int64_t util_sum)
{
    return (struct store_minute){.kind = kind,
                                 .key = key,
                                 .label = label,
                                 .minute_ms = minute_ms,
                                 .samples = samples,
                                 .util_sum = util_sum,
                                 .util_max = util_sum / (samples ? samples : 1) + 5,
                                 .idle_samples = 1,
                                 .mem_sum_mib = samples * 1000,
                                 .mem_max_mib = 1000,
                                 .power_sum_mw = samples * 250000,
                                 .temp_max_c = 60};
}

/* What a read saw, flattened. */
struct seen {
    char keys[16][64];
    char labels[16][64];
    int64_t minute_ms[16], samples[16], util_sum[16], util_max[16], mem_sum[16];
    size_t n;
};

static int collect(void *ctx, const struct store_minute *m)
{
    struct seen *s = ctx;
    if (s->n >= 16)
        return -1;
    snprintf(s->keys[s->n], sizeof(s->keys[0]), "%s", m->key);
    snprintf(s->labels[s->n], sizeof(s->labels[0]), "%s", m->label);
    s->minute_ms[s->n] = m->minute_ms;
    s->samples[s->n] = m->samples;
    s->util_sum[s->n] = m->util_sum;
    s->util_max[s->n] = m->util_max;
    s->mem_sum[s->n] = m->mem_sum_mib;
    s->n++;
    return 0;
}

static void commit(struct store *s, struct store_batch *b)
{
    char msg[256] = "";
    int rc = store_commit_wait(s, b, NULL, 0, msg, sizeof(msg));
    if (rc)
        print_error("commit: %s\n", msg);
    assert_int_equal(rc, 0);
}

static void one_batch_of_minutes_reads_back_by_kind_key_and_range(void **state)
{
    struct env *e = *state;
    struct store_batch *b = store_batch_new();
    assert_non_null(b);
    for (int64_t m = 0; m < 4; m++) {
        struct store_minute g0 =
            minute(STORE_MINUTE_GPU, "GPU-a", "n1", m * 60000, 60, 60 * 10 * m);
        struct store_minute g1 = minute(STORE_MINUTE_GPU, "GPU-b", "n2", m * 60000, 30, 30 * 50);
        assert_int_equal(store_batch_minute_put(b, &g0), 0);
        assert_int_equal(store_batch_minute_put(b, &g1), 0);
    }
    struct store_minute j = minute(STORE_MINUTE_JOB, "7.1", "ml", 60000, 120, 120 * 40);
    assert_int_equal(store_batch_minute_put(b, &j), 0);
    commit(e->s, b);

    struct seen s = {0};
    /* [60 s, 180 s): minutes 1 and 2 of both GPUs, by minute then key. */
    assert_int_equal(store_minutes_get(e->s, STORE_MINUTE_GPU, NULL, 60000, 180000, collect, &s),
                     0);
    assert_int_equal(s.n, 4);
    assert_string_equal(s.keys[0], "GPU-a");
    assert_string_equal(s.labels[0], "n1");
    assert_int_equal(s.minute_ms[0], 60000);
    assert_int_equal(s.util_sum[0], 600);
    assert_string_equal(s.keys[1], "GPU-b");
    assert_string_equal(s.labels[1], "n2");
    assert_int_equal(s.minute_ms[3], 120000);
    assert_int_equal(s.samples[3], 30);

    memset(&s, 0, sizeof(s));
    assert_int_equal(store_minutes_get(e->s, STORE_MINUTE_GPU, "GPU-a", 0, 1000000, collect, &s),
                     0);
    assert_int_equal(s.n, 4);
    assert_int_equal(s.util_sum[3], 1800);
    assert_int_equal(s.mem_sum[3], 60000);

    memset(&s, 0, sizeof(s));
    assert_int_equal(store_minutes_get(e->s, STORE_MINUTE_JOB, NULL, 0, 1000000, collect, &s), 0);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.keys[0], "7.1");
    assert_string_equal(s.labels[0], "ml");
    assert_int_equal(s.samples[0], 120);
}

static void minute_written_twice_is_merged(void **state)
{
    struct env *e = *state;
    struct store_batch *b = store_batch_new();
    struct store_minute m = minute(STORE_MINUTE_GPU, "GPU-a", "n1", 0, 10, 100);
    assert_int_equal(store_batch_minute_put(b, &m), 0);
    commit(e->s, b);
    b = store_batch_new();
    m = minute(STORE_MINUTE_GPU, "GPU-a", "n1", 0, 20, 1800);
    m.util_max = 99;
    assert_int_equal(store_batch_minute_put(b, &m), 0);
    commit(e->s, b);
    struct seen s = {0};
    assert_int_equal(store_minutes_get(e->s, STORE_MINUTE_GPU, NULL, 0, 60000, collect, &s), 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.samples[0], 30);
    assert_int_equal(s.util_sum[0], 1900);
    assert_int_equal(s.util_max[0], 99);
    assert_int_equal(s.mem_sum[0], 30000);
}

static void prune_deletes_only_minutes_before_the_cutoff(void **state)
{
    struct env *e = *state;
    struct store_batch *b = store_batch_new();
    for (int64_t m = 0; m < 5; m++) {
        struct store_minute g = minute(STORE_MINUTE_GPU, "GPU-a", "n1", m * 60000, 1, 1);
        struct store_minute j = minute(STORE_MINUTE_JOB, "1.1", "ml", m * 60000, 1, 1);
        assert_int_equal(store_batch_minute_put(b, &g), 0);
        assert_int_equal(store_batch_minute_put(b, &j), 0);
    }
    commit(e->s, b);
    b = store_batch_new();
    assert_int_equal(store_batch_minutes_prune(b, 180000), 0);
    commit(e->s, b);
    struct seen s = {0};
    assert_int_equal(store_minutes_get(e->s, STORE_MINUTE_GPU, NULL, 0, INT64_MAX, collect, &s), 0);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.minute_ms[0], 180000);
    memset(&s, 0, sizeof(s));
    assert_int_equal(store_minutes_get(e->s, STORE_MINUTE_JOB, NULL, 0, INT64_MAX, collect, &s), 0);
    assert_int_equal(s.n, 2);
}

static int stop_at_first(void *ctx, const struct store_minute *m)
{
    (void)m;
    (*(int *)ctx)++;
    return 42;
}

static void callback_stops_the_scan_and_bad_arguments_are_refused(void **state)
{
    struct env *e = *state;
    struct store_batch *b = store_batch_new();
    for (int64_t m = 0; m < 3; m++) {
        struct store_minute g = minute(STORE_MINUTE_GPU, "GPU-a", "n1", m * 60000, 1, 1);
        assert_int_equal(store_batch_minute_put(b, &g), 0);
    }
    struct store_minute bad = minute(STORE_MINUTE_KINDS, "GPU-a", "n1", 0, 1, 1);
    assert_int_equal(store_batch_minute_put(b, &bad), GPO_EINVAL);
    bad = minute(STORE_MINUTE_GPU, NULL, "n1", 0, 1, 1);
    assert_int_equal(store_batch_minute_put(b, &bad), GPO_EINVAL);
    bad = minute(STORE_MINUTE_GPU, "GPU-a", NULL, 0, 1, 1);
    assert_int_equal(store_batch_minute_put(b, &bad), GPO_EINVAL);
    commit(e->s, b);
    int calls = 0;
    assert_int_equal(
        store_minutes_get(e->s, STORE_MINUTE_GPU, NULL, 0, INT64_MAX, stop_at_first, &calls), 42);
    assert_int_equal(calls, 1);
    assert_int_equal(store_minutes_get(e->s, STORE_MINUTE_GPU, NULL, 10, 5, stop_at_first, &calls),
                     GPO_EINVAL);
    assert_int_equal(store_minutes_get(e->s, STORE_MINUTE_KINDS, NULL, 0, 5, stop_at_first, &calls),
                     GPO_EINVAL);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(one_batch_of_minutes_reads_back_by_kind_key_and_range),
        T(minute_written_twice_is_merged),
        T(prune_deletes_only_minutes_before_the_cutoff),
        T(callback_stops_the_scan_and_bad_arguments_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_store_ledger.c - the cost ledger in the store (SQLite, and PostgreSQL under
 * tests/tools/with_pg.py): rows written in a batch and read back whole, the range read's overlap
 * rule, a row never rewritten, the outcome of a price-change row taken from its attempt, bad rows
 * refused, and prices as a config kind. Each test has its own directory under /tmp. */
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
    int64_t job;
};

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    if (!e)
        return -1;
    if (storetest_setup(&e->db, "test_store_ledger")) {
        free(e);
        return -1;
    }
    e->s = storetest_open(e->db);
    struct store_job_insert j = STORE_JOB_INSERT_INIT;
    j.team = "ml";
    j.state = "RUNNING";
    j.submit_ms = 1;
    j.spec = "{}";
    struct store_batch *b = store_batch_new();
    struct store_attempt_upsert a = STORE_ATTEMPT_UPSERT_INIT;
    if (!b || store_batch_job_insert(b, &j) || store_commit_wait(e->s, b, &e->job, 1, NULL, 0))
        return -1;
    a.job_id = e->job;
    a.attempt = 1;
    a.state = "PREEMPTED";
    a.epoch = 1;
    b = store_batch_new();
    if (!b || store_batch_attempt_upsert(b, &a) || store_commit_wait(e->s, b, NULL, 0, NULL, 0))
        return -1;
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

static struct store_ledger_row row(int64_t job, int64_t seq, int64_t start, int64_t end,
                                   int64_t cost, const char *outcome)
{
    return (struct store_ledger_row){.job_id = job,
                                     .attempt = 1,
                                     .seq = seq,
                                     .start_ms = start,
                                     .end_ms = end,
                                     .team = "ml",
                                     .project = "p",
                                     .user = "alice",
                                     .gpu_type = "H100-80GB",
                                     .gpu_milli = 2000,
                                     .price_micro = 2500000,
                                     .cost_micro = cost,
                                     .outcome = (char *)outcome,
                                     .util_sum = 300,
                                     .util_samples = 10,
                                     .idle_samples = 2};
}

static void add(struct env *e, const struct store_ledger_row *rows, size_t n)
{
    struct store_batch *b = store_batch_new();
    assert_non_null(b);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(store_batch_ledger_add(b, &rows[k]), 0);
    assert_int_equal(store_commit_wait(e->s, b, NULL, 0, NULL, 0), 0);
}

static void rows_written_in_a_batch_read_back_whole(void **state)
{
    struct env *e = *state;
    struct store_ledger_row in[] = {row(e->job, 0, 1000, 5000, 777, NULL),
                                    row(e->job, 1, 5000, 9000, 888, "COMPLETED")};
    add(e, in, 2);
    struct store_ledger_row *out = NULL;
    size_t n = 0;
    assert_int_equal(store_ledger_range(e->s, 0, 10000, &out, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(out[0].seq, 0);
    assert_int_equal(out[0].start_ms, 1000);
    assert_int_equal(out[0].end_ms, 5000);
    assert_int_equal(out[0].cost_micro, 777);
    assert_int_equal(out[0].gpu_milli, 2000);
    assert_int_equal(out[0].price_micro, 2500000);
    assert_int_equal(out[0].util_sum, 300);
    assert_int_equal(out[0].util_samples, 10);
    assert_int_equal(out[0].idle_samples, 2);
    assert_string_equal(out[0].team, "ml");
    assert_string_equal(out[0].project, "p");
    assert_null(out[0].model);
    assert_string_equal(out[0].user, "alice");
    assert_string_equal(out[0].gpu_type, "H100-80GB");
    assert_string_equal(out[1].outcome, "COMPLETED");
    store_ledger_rows_free(out, n);
}

static void price_change_row_takes_its_attempts_state(void **state)
{
    struct env *e = *state;
    struct store_ledger_row in = row(e->job, 0, 1000, 5000, 1, NULL);
    add(e, &in, 1);
    struct store_ledger_row *out = NULL;
    size_t n = 0;
    assert_int_equal(store_ledger_range(e->s, 0, 10000, &out, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(out[0].outcome, "PREEMPTED");
    store_ledger_rows_free(out, n);
}

static void range_returns_rows_overlapping_it_only(void **state)
{
    struct env *e = *state;
    struct store_ledger_row in[] = {
        row(e->job, 0, 0, 1000, 1, "X"), row(e->job, 1, 1000, 2000, 2, "X"),
        row(e->job, 2, 2000, 3000, 3, "X"), row(e->job, 3, 3000, 3000, 4, "X")};
    add(e, in, 4);
    struct store_ledger_row *out = NULL;
    size_t n = 0;
    /* [1000, 2000): the row touching only its end (0..1000) and the one
     * starting at its end are out. */
    assert_int_equal(store_ledger_range(e->s, 1000, 2000, &out, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(out[0].seq, 1);
    store_ledger_rows_free(out, n);
    /* An empty row counts where it starts. */
    assert_int_equal(store_ledger_range(e->s, 3000, 4000, &out, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(out[0].seq, 3);
    store_ledger_rows_free(out, n);
    assert_int_equal(store_ledger_range(e->s, 1500, 2500, &out, &n), 0);
    assert_int_equal(n, 2);
    store_ledger_rows_free(out, n);
    assert_int_equal(store_ledger_range(e->s, 2, 1, &out, &n), GPO_EINVAL);
}

static void a_row_is_never_rewritten(void **state)
{
    struct env *e = *state;
    struct store_ledger_row a = row(e->job, 0, 0, 1000, 5, "COMPLETED");
    struct store_ledger_row b = row(e->job, 0, 0, 9000, 99, "FAILED");
    add(e, &a, 1);
    add(e, &b, 1); /* same key: kept as first written */
    struct store_ledger_row *out = NULL;
    size_t n = 0;
    assert_int_equal(store_ledger_range(e->s, INT64_MIN, INT64_MAX, &out, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(out[0].cost_micro, 5);
    assert_int_equal(out[0].end_ms, 1000);
    assert_string_equal(out[0].outcome, "COMPLETED");
    store_ledger_rows_free(out, n);
}

static void bad_rows_are_refused(void **state)
{
    (void)state;
    struct store_batch *b = store_batch_new();
    struct store_ledger_row r = row(1, 0, 5000, 1000, 1, NULL); /* ends before it starts */
    assert_int_equal(store_batch_ledger_add(b, &r), GPO_EINVAL);
    r = row(1, 0, 0, 1000, -1, NULL);
    assert_int_equal(store_batch_ledger_add(b, &r), GPO_EINVAL);
    r = row(1, 0, 0, 1000, 1, NULL);
    r.team = NULL;
    assert_int_equal(store_batch_ledger_add(b, &r), GPO_EINVAL);
    r = row(1, 0, 0, 1000, 1, NULL);
    r.gpu_type = "";
    assert_int_equal(store_batch_ledger_add(b, &r), GPO_EINVAL);
    assert_int_equal(store_batch_ledger_add(b, NULL), GPO_EINVAL);
    store_batch_free(b);
}

static void prices_are_a_config_kind(void **state)
{
    struct env *e = *state;
    struct store_batch *b = store_batch_new();
    assert_int_equal(
        store_batch_config_put(b, STORE_CONFIG_PRICES, "H100-80GB", "{\"per_gpu_hour\":2.5}", 7),
        0);
    assert_int_equal(store_commit_wait(e->s, b, NULL, 0, NULL, 0), 0);
    struct store_config c = {0};
    assert_int_equal(store_config_get(e->s, STORE_CONFIG_PRICES, "H100-80GB", &c), 0);
    assert_string_equal(c.spec, "{\"per_gpu_hour\":2.5}");
    store_config_release(&c);
    b = store_batch_new();
    assert_int_equal(store_batch_config_delete(b, STORE_CONFIG_PRICES, "H100-80GB"), 0);
    assert_int_equal(store_commit_wait(e->s, b, NULL, 0, NULL, 0), 0);
    assert_int_equal(store_config_get(e->s, STORE_CONFIG_PRICES, "H100-80GB", &c), GPO_ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(rows_written_in_a_batch_read_back_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(price_change_row_takes_its_attempts_state, setup, teardown),
        cmocka_unit_test_setup_teardown(range_returns_rows_overlapping_it_only, setup, teardown),
        cmocka_unit_test_setup_teardown(a_row_is_never_rewritten, setup, teardown),
        cmocka_unit_test(bad_rows_are_refused),
        cmocka_unit_test_setup_teardown(prices_are_a_config_kind, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

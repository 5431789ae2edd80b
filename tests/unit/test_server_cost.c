/* test_server_cost.c - the controller's cost ledger: the cost and clip
 * arithmetic, calendar months in a non-UTC zone (DST included), segments of
 * an attempt closed by a price change and by its end (rows in a real store,
 * accrual in between, util samples taken into the row), budget blocks and
 * money formatting. A server object is built by hand around a store in its
 * own directory under /tmp; no clock is read by the checks. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/cost/cost.h"
#include "server/sched/sched.h"
#include "server/srv.h"
#include "util/timefmt.h"
#include "tmptree.h"
#include "base/banned.h"

#define UUID0 "GPU-00000000-0000-4000-8000-000000000000"
#define UUID1 "GPU-00000000-0000-4000-8000-000000000001"

static int64_t at(const char *rfc3339)
{
    int64_t ms = 0;
    assert_int_equal(timefmt_parse_rfc3339(rfc3339, &ms), 0);
    return ms;
}

static void cost_is_price_times_share_times_hours(void **state)
{
    (void)state;
    assert_int_equal(cost_of(2500000, 2000, 3600000), 5000000); /* 2 GPUs, 1 h */
    assert_int_equal(cost_of(2500000, 500, 1800000), 625000);   /* half a GPU, 30 min */
    assert_int_equal(cost_of(0, 1000, 3600000), 0);             /* no price */
    assert_int_equal(cost_of(1000000, 1000, -5), 0);
    /* No overflow on the way: 1e6 per hour x 100 GPUs x a year. */
    assert_int_equal(cost_of(INT64_C(1000000000000), 100000, INT64_C(31536000000)),
                     INT64_C(1000000000000) * 100 * 8760);
}

static void clip_takes_the_part_inside_the_range(void **state)
{
    (void)state;
    assert_int_equal(cost_clip(1000, 0, 1000, 250, 750), 500);
    assert_int_equal(cost_clip(1000, 0, 1000, -10, 2000), 1000);
    assert_int_equal(cost_clip(1000, 0, 1000, 1000, 2000), 0);
    assert_int_equal(cost_clip(1000, 0, 1000, -500, 0), 0);
    assert_int_equal(cost_clip(900, 0, 3, 0, 1), 300);
    assert_int_equal(cost_clip(7, 50, 50, 0, 100), 7); /* empty row: where it starts */
    /* The parts of a split range add up to the whole (to rounding). */
    int64_t a = cost_clip(1000001, 0, 30, 0, 10), b = cost_clip(1000001, 0, 30, 10, 30);
    assert_true(a + b >= 1000000 && a + b <= 1000002);
}

static void months_follow_the_cost_time_zone(void **state)
{
    (void)state;
    char err[256];
    int64_t a, b;
    char label[8];
    assert_int_equal(cost_tz_set("Europe/Berlin", err, sizeof(err)), 0);
    /* 23:30 UTC on 31 Oct is already November in Berlin (CET, UTC+1). */
    assert_int_equal(cost_month(at("2026-10-31T23:30:00Z"), &a, &b, label), 0);
    assert_string_equal(label, "2026-11");
    assert_int_equal(a, at("2026-10-31T23:00:00Z"));
    assert_int_equal(b, at("2026-11-30T23:00:00Z"));
    /* March starts in CET and ends in CEST (UTC+2). */
    assert_int_equal(cost_month(at("2026-03-15T12:00:00Z"), &a, &b, label), 0);
    assert_string_equal(label, "2026-03");
    assert_int_equal(a, at("2026-02-28T23:00:00Z"));
    assert_int_equal(b, at("2026-03-31T22:00:00Z"));
    /* December rolls into January of the next year. */
    assert_int_equal(cost_month(at("2026-12-31T22:59:59Z"), &a, &b, label), 0);
    assert_string_equal(label, "2026-12");
    assert_int_equal(b, at("2026-12-31T23:00:00Z"));
    assert_int_equal(cost_tz_set(NULL, err, sizeof(err)), 0); /* back to UTC */
    assert_int_equal(cost_month(at("2026-10-31T23:30:00Z"), &a, &b, label), 0);
    assert_string_equal(label, "2026-10");
    assert_int_equal(a, at("2026-10-01T00:00:00Z"));
}

static void unknown_time_zones_are_refused(void **state)
{
    (void)state;
    char err[256] = "";
    assert_int_equal(cost_tz_set("Mars/Olympus", err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "--cost-timezone"));
    assert_non_null(strstr(err, "Mars/Olympus"));
    assert_int_equal(cost_tz_set("../../etc/passwd", err, sizeof(err)), -EINVAL);
    assert_int_equal(cost_tz_set("UTC", err, sizeof(err)), 0);
}

static void money_prints_with_separators_and_cents(void **state)
{
    (void)state;
    char buf[48];
    cost_money_format(INT64_C(10012500000), buf, sizeof(buf));
    assert_string_equal(buf, "10,012.50");
    cost_money_format(0, buf, sizeof(buf));
    assert_string_equal(buf, "0.00");
    cost_money_format(INT64_C(999995000), buf, sizeof(buf));
    assert_string_equal(buf, "1,000.00");
    cost_money_format(INT64_C(1234567890123456), buf, sizeof(buf));
    assert_string_equal(buf, "1,234,567,890.12");
}

/* ---- a server around a real store ---- */

struct env {
    char dir[64];
    struct server s;
};

static void put_price(struct cluster *m, const char *type, int64_t micro)
{
    struct cluster_price p = {.id = 9, .per_gpu_hour_micro = micro};
    p.name = strdup(type);
    char err[256] = "";
    int rc = cluster_price_get(m, type) ? cluster_price_replace(m, &p, err, sizeof(err))
                                        : cluster_price_add(m, &p, err, sizeof(err));
    if (rc)
        print_error("price: %s\n", err);
    assert_int_equal(rc, 0);
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_server_ledger.XXXXXX");
    if (!mkdtemp(e->dir))
        return -1;
    char path[128], err[256];
    snprintf(path, sizeof(path), "%s/gpuorch.db", e->dir);
    if (store_open_sqlite(path, &e->s.store, err, sizeof(err)) || srv_init(&e->s))
        return -1;
    json_t *node = json_loads(
        "{\"name\": \"n1\", \"pool\": \"main\", \"cpus\": 8, \"mem_mib\": 65536, \"gpus\": ["
        "{\"index\": 0, \"uuid\": \"" UUID0 "\", \"gpu_type\": \"H100-80GB\", \"mem_mib\": 81920},"
        "{\"index\": 1, \"uuid\": \"" UUID1
        "\", \"gpu_type\": \"H100-80GB\", \"mem_mib\": 81920}]}",
        0, NULL);
    struct cluster_node n = {0};
    if (!node || cluster_node_decode(node, 0, &n, err, sizeof(err)))
        return -1;
    json_decref(node);
    n.id = 1;
    if (cluster_node_add(&e->s.cluster, &n, err, sizeof(err)))
        return -1;
    *state = e;
    return cost_load(&e->s.cost, srv_now_ms(&e->s), err, sizeof(err)) ? -1 : 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    store_close(e->s.store);
    srv_release(&e->s);
    tmptree_remove(e->dir);
    free(e);
    return 0;
}

/* Job 1 of team ml holding 1 GPU and half of another since start_ms. */
static struct job *running_job(struct env *e, int64_t start_ms)
{
    struct job *j = calloc(1, sizeof(*j));
    j->id = 1;
    j->user = strdup("alice");
    j->team = strdup("ml");
    j->state = JOB_RUNNING;
    j->spec.project = strdup("p1");
    j->att.n = 1;
    j->att.start_ms = start_ms;
    j->att.nshares = 2;
    j->att.shares = calloc(2, sizeof(*j->att.shares));
    j->att.shares[0] = (struct attempt_share){strdup("n1"), strdup(UUID0), 1000, 0};
    j->att.shares[1] = (struct attempt_share){strdup("n1"), strdup(UUID1), 500, 0};
    assert_int_equal(jobs_add(&e->s.jobs, j), 0);
    cost_open(&e->s.cost, j, start_ms);
    return j;
}

static void commit(struct env *e, struct store_batch *b)
{
    char msg[256] = "";
    int rc = store_commit_wait(e->s.store, b, NULL, 0, msg, sizeof(msg));
    if (rc)
        print_error("commit: %s\n", msg);
    assert_int_equal(rc, 0);
}

static void price_change_mid_attempt_charges_each_part_at_its_price(void **state)
{
    struct env *e = *state;
    const int64_t t0 = at("2026-11-10T10:00:00Z");
    put_price(&e->s.cluster, "H100-80GB", 3600000); /* 3.6 an hour: 1 micro per GPU-ms */
    struct job *j = running_job(e, t0);
    assert_int_equal(j->att.seg.rate_micro, 5400000); /* 1.5 GPUs */
    assert_int_equal(cost_accrued(j, INT64_MIN, t0 + 10000), 15000);
    j->att.util_sum = 400;
    j->att.util_samples = 12;
    j->att.idle_samples = 3;

    /* The price doubles 10 s in: the open segment closes at the old price. */
    struct store_batch *b = store_batch_new();
    struct cost_pending *p = NULL;
    assert_int_equal(cost_price_plan(&e->s.cost, "H100-80GB", t0 + 10000, b, &p), 0);
    commit(e, b);
    put_price(&e->s.cluster, "H100-80GB", 7200000);
    cost_price_apply(&e->s.cost, p, true);
    assert_int_equal(j->cost_micro, 15000);
    assert_int_equal(j->att.seg.seq, 1);
    assert_int_equal(j->att.seg.start_ms, t0 + 10000);
    assert_int_equal(j->att.seg.rate_micro, 10800000);
    assert_int_equal(j->att.util_samples, 0); /* taken into the row */
    assert_int_equal(cost_job(j, t0 + 15000), 15000 + 15000);

    /* It ends 5 s later: the second segment at the new price. */
    b = store_batch_new();
    int64_t cost = 0;
    assert_int_equal(cost_close(&e->s.cost, j, t0 + 15000, "COMPLETED", b, &cost), 0);
    assert_int_equal(cost, 15000);
    commit(e, b);
    cost_charged(&e->s.cost, j->id, j->team, j->att.seg.start_ms, t0 + 15000, cost);
    assert_int_equal(j->cost_micro, 30000);
    assert_int_equal(cost_team_total(&e->s.cost, "ml"), 30000);

    struct store_ledger_row *rows = NULL;
    size_t n = 0;
    assert_int_equal(store_ledger_range(e->s.store, t0, t0 + 60000, &rows, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(rows[0].seq, 0);
    assert_int_equal(rows[0].start_ms, t0);
    assert_int_equal(rows[0].end_ms, t0 + 10000);
    assert_int_equal(rows[0].price_micro, 3600000);
    assert_int_equal(rows[0].gpu_milli, 1500);
    assert_int_equal(rows[0].cost_micro, 15000);
    assert_int_equal(rows[0].util_samples, 12);
    assert_int_equal(rows[0].idle_samples, 3);
    assert_string_equal(rows[0].project, "p1");
    assert_int_equal(rows[1].seq, 1);
    assert_int_equal(rows[1].price_micro, 7200000);
    assert_int_equal(rows[1].cost_micro, 15000);
    assert_string_equal(rows[1].outcome, "COMPLETED");
    store_ledger_rows_free(rows, n);
}

/* An end planned while a price change is being committed: whichever batch
 * commits first, the ledger's rows meet without overlapping and the totals in
 * memory are the rows' sum. */
static void end_during_price_change(struct env *e, bool end_commits_first)
{
    const int64_t t0 = at("2026-11-10T10:00:00Z");
    put_price(&e->s.cluster, "H100-80GB", 3600000);
    struct job *j = running_job(e, t0);
    /* The end updates the job's and the attempt's rows: the job is stored. */
    struct store_batch *jb = store_batch_new();
    struct store_job_insert ji = STORE_JOB_INSERT_INIT;
    ji.team = "ml", ji.state = "RUNNING", ji.submit_ms = t0, ji.spec = "{}";
    assert_int_equal(store_batch_job_insert(jb, &ji), 0);
    commit(e, jb);

    struct store_batch *pb = store_batch_new();
    struct cost_pending *p = NULL;
    assert_int_equal(cost_price_plan(&e->s.cost, "H100-80GB", t0 + 10000, pb, &p), 0);
    struct store_batch *eb = store_batch_new();
    struct sched_end end;
    assert_int_equal(
        sched_end_plan(&e->s, j, ATTEMPT_COMPLETED, 0, STORE_NULL, NULL, t0 + 15000, &end, eb), 0);
    if (end_commits_first) {
        commit(e, eb);
        sched_end_apply(&e->s, &end);
        commit(e, pb);
        put_price(&e->s.cluster, "H100-80GB", 7200000);
        cost_price_apply(&e->s.cost, p, true);
    } else {
        commit(e, pb);
        put_price(&e->s.cluster, "H100-80GB", 7200000);
        cost_price_apply(&e->s.cost, p, true);
        commit(e, eb);
        sched_end_apply(&e->s, &end);
    }

    struct store_ledger_row *rows = NULL;
    size_t n = 0;
    assert_int_equal(store_ledger_range(e->s.store, t0, t0 + 60000, &rows, &n), 0);
    assert_int_equal(n, 2);
    int64_t sum = 0;
    for (size_t k = 0; k < n; k++)
        sum += rows[k].cost_micro;
    /* rows come by time: the price change's, then the end's from its time on */
    assert_int_equal(rows[0].start_ms, t0);
    assert_int_equal(rows[0].end_ms, t0 + 10000);
    assert_int_equal(rows[1].start_ms, t0 + 10000);
    assert_int_equal(rows[1].end_ms, t0 + 15000);
    assert_string_equal(rows[1].outcome, "COMPLETED");
    assert_int_equal(cost_team_total(&e->s.cost, "ml"), sum);
    assert_int_equal(j->cost_micro, sum);
    store_ledger_rows_free(rows, n);
}

static void end_committed_before_a_pending_price_change_meets_its_row(void **state)
{
    end_during_price_change(*state, true);
}

static void end_committed_after_a_pending_price_change_meets_its_row(void **state)
{
    end_during_price_change(*state, false);
}

static void a_type_without_price_costs_nothing_but_counts_hours(void **state)
{
    struct env *e = *state;
    const int64_t t0 = at("2026-11-10T10:00:00Z");
    struct job *j = running_job(e, t0);
    assert_int_equal(j->att.seg.rate_micro, 0);
    struct store_batch *b = store_batch_new();
    int64_t cost = -1;
    assert_int_equal(cost_close(&e->s.cost, j, t0 + 3600000, "FAILED", b, &cost), 0);
    assert_int_equal(cost, 0);
    commit(e, b);
    struct store_ledger_row *rows = NULL;
    size_t n = 0;
    assert_int_equal(store_ledger_range(e->s.store, t0, t0 + 3600000, &rows, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(rows[0].gpu_milli, 1500);
    assert_int_equal(rows[0].end_ms - rows[0].start_ms, 3600000);
    assert_int_equal(rows[0].cost_micro, 0);
    store_ledger_rows_free(rows, n);
}

static void over_budget_blocks_classes_below_the_floor_only(void **state)
{
    struct env *e = *state;
    char err[256];
    struct cluster_class low = {.id = 2, .order = 0}, normal = {.id = 3, .order = 10};
    low.name = strdup("low");
    normal.name = strdup("normal");
    assert_int_equal(cluster_class_add(&e->s.cluster, &low, err, sizeof(err)), 0);
    assert_int_equal(cluster_class_add(&e->s.cluster, &normal, err, sizeof(err)), 0);
    struct cluster_team t = {.id = 4, .weight = 1, .borrow_limit_milli = -1};
    t.name = strdup("ml");
    cluster_idle_default(&t.idle);
    t.budget = (struct cluster_budget){.set = true, .monthly_micro = 1000, .alert_permille = 800};
    t.budget.block_below = strdup("normal");
    int rc = cluster_team_add(&e->s.cluster, &t, err, sizeof(err));
    if (rc)
        print_error("team: %s\n", err);
    assert_int_equal(rc, 0);
    put_price(&e->s.cluster, "H100-80GB", 3600000);
    int64_t now = srv_now_ms(&e->s);
    char msg[512] = "";
    assert_false(cost_blocks(&e->s.cost, "ml", "low", now, msg, sizeof(msg)));
    struct job *j = running_job(e, now - 2000); /* 1.5 GPU-s x 2 s: 3000 micro */
    assert_true(cost_blocks(&e->s.cost, "ml", "low", now, msg, sizeof(msg)));
    assert_non_null(strstr(msg, "team 'ml' is over its"));
    assert_non_null(strstr(msg, "jobs below class 'normal' are blocked until"));
    assert_false(cost_blocks(&e->s.cost, "ml", "normal", now, msg, sizeof(msg)));
    assert_false(cost_blocks(&e->s.cost, "ml", NULL, now, msg, sizeof(msg))); /* default class */
    assert_false(cost_blocks(&e->s.cost, "other", "low", now, msg, sizeof(msg)));
    assert_true(cost_spent(&e->s.cost, "ml", now) >= 3000);
    (void)j;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cost_is_price_times_share_times_hours),
        cmocka_unit_test(clip_takes_the_part_inside_the_range),
        cmocka_unit_test(months_follow_the_cost_time_zone),
        cmocka_unit_test(unknown_time_zones_are_refused),
        cmocka_unit_test(money_prints_with_separators_and_cents),
        cmocka_unit_test_setup_teardown(price_change_mid_attempt_charges_each_part_at_its_price,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(end_committed_before_a_pending_price_change_meets_its_row,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(end_committed_after_a_pending_price_change_meets_its_row,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(a_type_without_price_costs_nothing_but_counts_hours, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(over_budget_blocks_classes_below_the_floor_only, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

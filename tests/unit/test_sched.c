/* test_sched.c - sched_pass end to end on small clusters: placement, quotas,
 * preemption, backfill and explanations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "base/err.h"
#include "core/sched.h"
#include "fixture.h"

#define MIN_MS  (60 * 1000)
#define HOUR_MS (60 * MIN_MS)

/* One pool "main" of `nodes` nodes with 8 H100s each, teams a and b, classes
 * normal (0), high (1, may preempt) and low (2). */
static struct fx *cluster(uint32_t nodes)
{
    struct fx *fx = fx_new();
    uint32_t pool = fx_pool(fx, "main");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, nodes, pool, h100, 8, 81920, 64, 512 * 1024);
    fx_team(fx, "a", 1, -1);
    fx_team(fx, "b", 1, -1);
    fx_class(fx, "normal", 10, false);
    fx_class(fx, "high", 20, true);
    fx_class(fx, "low", 0, false);
    return fx;
}

static void starts_when_free(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    fx_job(fx, 1)->gpus = 4;
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_int_equal(fx->res.nstarts, 1);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    assert_int_equal(s->alloc.nshares, 4);
    assert_int_equal(s->alloc.nnodes, 1);
    assert_int_equal(fx->res.nwaits, 0);
    fx_free(fx);
}

static void one_node_job_is_never_split(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(2);
    /* 6 GPUs busy on each node: 4 free in total, but no node has 4. */
    fx_job(fx, 1)->gpus = 6;
    fx_job(fx, 2)->gpus = 6;
    assert_int_equal(fx_pass(fx, 1000), 0);
    fx_apply(fx);
    assert_int_equal(fx->res.nstarts, 2);
    fx_job(fx, 3)->gpus = 4;
    assert_int_equal(fx_pass(fx, 2000), 0);
    assert_null(fx_start(fx, 3));
    const struct sched_wait *w = fx_wait(fx, 3);
    assert_non_null(w);
    assert_int_equal(w->reason, SCHED_REASON_NO_GPU);
    fx_free(fx);
}

static void gang_takes_fewest_nodes(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(4);
    struct sched_job *j = fx_job(fx, 1);
    j->gpus = 16;
    j->multi_node = true;
    assert_int_equal(fx_pass(fx, 1000), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    assert_int_equal(s->alloc.nnodes, 2);
    assert_int_equal(s->alloc.nshares, 16);
    fx_free(fx);
}

static void binpack_fills_a_node_before_opening_another(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(2);
    fx_job(fx, 1)->gpus = 3;
    assert_int_equal(fx_pass(fx, 1000), 0);
    fx_apply(fx);
    fx_job(fx, 2)->gpus = 2;
    assert_int_equal(fx_pass(fx, 2000), 0);
    assert_int_equal(fx_start_node(fx, 2), fx_get(fx, 1)->alloc.nodes[0].node);
    fx_free(fx);
}

static void fractions_share_a_gpu_before_opening_one(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    struct sched_job *a = fx_job(fx, 1);
    a->gpus = 0;
    a->gpu_milli = 250;
    assert_int_equal(fx_pass(fx, 1000), 0);
    fx_apply(fx);
    struct sched_job *b = fx_job(fx, 2);
    b->gpus = 0;
    b->gpu_milli = 500;
    assert_int_equal(fx_pass(fx, 2000), 0);
    const struct sched_start *s = fx_start(fx, 2);
    assert_non_null(s);
    assert_int_equal(s->alloc.shares[0].gpu, fx_get(fx, 1)->alloc.shares[0].gpu);
    assert_int_equal(s->alloc.shares[0].milli, 500);
    assert_int_equal(s->alloc.shares[0].mem_mib, 40960);
    fx_free(fx);
}

static void held_gpus_get_no_new_work(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    /* A fraction runs on one GPU; then that GPU and another are held (dirty). */
    struct sched_job *a = fx_job(fx, 1);
    a->gpus = 0;
    a->gpu_milli = 250;
    assert_int_equal(fx_pass(fx, 1000), 0);
    fx_apply(fx);
    uint32_t shared = fx_get(fx, 1)->alloc.shares[0].gpu;
    uint32_t other = shared == 0 ? 1 : 0;
    fx->gpus[shared].held = true;
    fx->gpus[other].held = true;
    /* Seven whole GPUs do not fit in the six offered; six do, none held. */
    fx_job(fx, 2)->gpus = 7;
    fx_job(fx, 3)->gpus = 6;
    struct sched_job *c = fx_job(fx, 4);
    c->gpus = 0;
    c->gpu_milli = 500;
    assert_int_equal(fx_pass(fx, 2000), 0);
    assert_null(fx_start(fx, 2));
    const struct sched_start *s = fx_start(fx, 3);
    assert_non_null(s);
    for (uint32_t k = 0; k < s->alloc.nshares; k++) {
        assert_int_not_equal(s->alloc.shares[k].gpu, shared);
        assert_int_not_equal(s->alloc.shares[k].gpu, other);
    }
    /* The fraction does not join the held GPU's running fraction. */
    assert_null(fx_start(fx, 4));
    /* The job already there keeps running and is not reported overcommitted. */
    assert_int_equal(fx->res.novercommitted, 0);
    assert_true(fx_running(fx, 1));
    fx_free(fx);
}

static void team_borrows_then_owner_reclaims(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    fx_quota(fx, 0, 0, 0, 4000, -1); /* a: 4 guaranteed */
    fx_quota(fx, 1, 0, 0, 4000, -1); /* b: 4 guaranteed */
    for (uint64_t id = 1; id <= 8; id++)
        fx_job(fx, id)->team = 0;
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx->res.nstarts, 8); /* a borrows b's idle half */
    int borrowed = 0;
    for (uint64_t id = 1; id <= 8; id++)
        borrowed += fx_get(fx, id)->borrowed;
    assert_int_equal(borrowed, 4);

    struct sched_job *bj = fx_job(fx, 100);
    bj->team = 1;
    bj->gpus = 2;
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_int_equal(fx->res.npreempts, 2);
    for (size_t i = 0; i < fx->res.npreempts; i++) {
        assert_int_equal(fx->res.preempts[i].why, SCHED_PREEMPT_RECLAIM);
        assert_true(fx_get(fx, fx->res.preempts[i].job)->borrowed);
    }
    assert_int_equal(fx_wait(fx, 100)->reason, SCHED_REASON_PREEMPTING);
    /* After the grace period the victims are gone and b's job starts. */
    assert_int_equal(fx_step(fx, 2000 + fx->pol.preempt_grace_ms), 0);
    assert_non_null(fx_start(fx, 100));
    fx_free(fx);
}

static void over_quota_job_waits_with_quota_reason(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    fx->teams[0].borrow_limit_milli = 0;
    fx_quota(fx, 0, 0, 0, 2000, 0);
    fx_job(fx, 1)->gpus = 2;
    fx_job(fx, 2)->gpus = 1;
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_non_null(fx_start(fx, 1));
    const struct sched_wait *w = fx_wait(fx, 2);
    assert_non_null(w);
    assert_int_equal(w->reason, SCHED_REASON_QUOTA);
    fx_free(fx);
}

static void high_priority_preempts_low(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    for (uint64_t id = 1; id <= 8; id++)
        fx_job(fx, id)->prio = 2; /* low */
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx->res.nstarts, 8);
    struct sched_job *h = fx_job(fx, 50);
    h->prio = 1;
    h->gpus = 1;
    assert_int_equal(fx_step(fx, 5000), 0);
    assert_int_equal(fx->res.npreempts, 1);
    assert_int_equal(fx->res.preempts[0].why, SCHED_PREEMPT_PRIORITY);
    assert_int_equal(fx->res.preempts[0].for_job, 50);
    fx_free(fx);
}

static void backfill_starts_short_job_not_long_one(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    struct sched_job *r = fx_job(fx, 1);
    r->gpus = 4;
    r->time_limit_ms = 2 * HOUR_MS;
    assert_int_equal(fx_step(fx, 0), 0);
    /* The head job needs all 8: blocked until job 1 ends at 2 h. */
    struct sched_job *head = fx_job(fx, 2);
    head->gpus = 8;
    head->submit_ms = 10;
    struct sched_job *shortj = fx_job(fx, 3);
    shortj->gpus = 2;
    shortj->time_limit_ms = HOUR_MS;
    shortj->submit_ms = 20;
    struct sched_job *longj = fx_job(fx, 4);
    longj->gpus = 2;
    longj->time_limit_ms = 3 * HOUR_MS;
    longj->submit_ms = 20;
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_null(fx_start(fx, 2));
    assert_non_null(fx_start(fx, 3));
    assert_null(fx_start(fx, 4));
    const struct sched_wait *w = fx_wait(fx, 4);
    assert_int_equal(w->reason, SCHED_REASON_RESERVED);
    assert_int_equal(w->other_job, 2);
    const struct sched_wait *hw = fx_wait(fx, 2);
    assert_int_equal(hw->est_start_ms, 2 * HOUR_MS);
    fx_free(fx);
}

static void invalid_jobs_are_unschedulable_not_errors(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    fx_job(fx, 1)->gpus = -1;
    fx_job(fx, 2)->gpus = 9;
    fx_job(fx, 3)->pool = 7;
    fx_job(fx, 4)->gpu_type = 9;
    struct sched_job *g = fx_job(fx, 5);
    g->gpus = 16;
    g->multi_node = true;
    fx_job(fx, 6)->gpus = 1;
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_int_equal(fx_wait(fx, 1)->reason, SCHED_REASON_BAD_SIZE);
    assert_int_equal(fx_wait(fx, 2)->reason, SCHED_REASON_TOO_LARGE);
    assert_int_equal(fx_wait(fx, 3)->reason, SCHED_REASON_UNKNOWN_POOL);
    assert_int_equal(fx_wait(fx, 4)->reason, SCHED_REASON_UNKNOWN_TYPE);
    assert_int_equal(fx_wait(fx, 5)->reason, SCHED_REASON_GANG_TOO_LARGE);
    for (uint64_t id = 1; id <= 5; id++)
        assert_true(explain_is_final(fx_wait(fx, id)->reason));
    assert_non_null(fx_start(fx, 6));
    fx_free(fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(starts_when_free),
        cmocka_unit_test(one_node_job_is_never_split),
        cmocka_unit_test(gang_takes_fewest_nodes),
        cmocka_unit_test(binpack_fills_a_node_before_opening_another),
        cmocka_unit_test(fractions_share_a_gpu_before_opening_one),
        cmocka_unit_test(held_gpus_get_no_new_work),
        cmocka_unit_test(team_borrows_then_owner_reclaims),
        cmocka_unit_test(over_quota_job_waits_with_quota_reason),
        cmocka_unit_test(high_priority_preempts_low),
        cmocka_unit_test(backfill_starts_short_job_not_long_one),
        cmocka_unit_test(invalid_jobs_are_unschedulable_not_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

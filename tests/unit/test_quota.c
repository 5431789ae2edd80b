/* test_quota.c - guarantees, borrowing and reclaim: a team first uses its
 * guaranteed share, then borrows idle capacity up to its borrowing limit;
 * work over the guarantee is marked borrowed, and an owner reclaiming its
 * guarantee evicts borrowed work of other teams, and only that. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "core/quota.h"
#include "core/sched.h"
#include "core/view.h"
#include "fixture.h"

#define MIN_MS   (60 * 1000)
#define HOUR_MS  (60 * MIN_MS)
#define H100_MEM 81920

enum { TEAM_A = 0, TEAM_B = 1, TEAM_C = 2 };

/* One pool "main" of `nodes` nodes with 8 H100s each; teams a, b and c with
 * no quota entries (guarantee 0) and unlimited borrowing by default; one class. */
static struct fx *cluster(uint32_t nodes)
{
    struct fx *fx = fx_new();
    uint32_t pool = fx_pool(fx, "main");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, nodes, pool, h100, 8, H100_MEM, 64, 512 * 1024);
    fx_team(fx, "a", 1, -1);
    fx_team(fx, "b", 1, -1);
    fx_team(fx, "c", 1, -1);
    fx_class(fx, "normal", 10, false);
    return fx;
}

/* Adds `n` one-GPU jobs of `team` with ids from `first`, each running `run_ms`. */
static void submit(struct fx *fx, uint64_t first, int n, uint32_t team, int64_t run_ms)
{
    for (int k = 0; k < n; k++) {
        struct sched_job *j = fx_job(fx, first + (uint64_t)k);
        j->team = team;
        j->time_limit_ms = run_ms > 0 ? run_ms : HOUR_MS;
        fx_get(fx, first + (uint64_t)k)->run_ms = run_ms;
    }
}

static int64_t alloc_milli(const struct sched_alloc *a)
{
    int64_t m = 0;
    for (uint32_t i = 0; i < a->nshares; i++)
        m += a->shares[i].milli;
    return m;
}

/* Milli-GPU the team's running jobs hold now (in the fixture's records). */
static int64_t team_running_milli(const struct fx *fx, uint32_t team)
{
    int64_t m = 0;
    for (uint32_t i = 0; i < fx->njobs; i++) {
        const struct fx_job *j = &fx->jobs[i];
        if (!j->done && j->started_ms >= 0 && j->req.team == team)
            m += alloc_milli(&j->alloc);
    }
    return m;
}

static int count_started(const struct fx *fx)
{
    return (int)fx->res.nstarts;
}

static int count_borrowed_starts(const struct fx *fx)
{
    int n = 0;
    for (size_t s = 0; s < fx->res.nstarts; s++)
        n += fx->res.starts[s].borrowed;
    return n;
}

static bool all_done(const struct fx *fx)
{
    for (uint32_t i = 0; i < fx->njobs; i++) {
        if (!fx->jobs[i].done)
            return false;
    }
    return true;
}

/* ---- borrowing ---- */

static void team_uses_guarantee_then_borrows_idle_capacity(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    fx_quota(fx, TEAM_A, 0, 0, 2000, -1);
    fx_quota(fx, TEAM_B, 0, 0, 6000, -1);
    submit(fx, 1, 8, TEAM_A, 0);
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(count_started(fx), 8); /* b's idle guarantee is lent to a */
    for (uint64_t id = 1; id <= 8; id++) {
        const struct sched_start *s = fx_start(fx, id);
        assert_non_null(s);
        assert_int_equal(s->borrowed, id > 2); /* the first two are a's own */
    }
    fx_free(fx);
}

static void borrow_limit_zero_caps_team_at_its_guarantee(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    fx_quota(fx, TEAM_A, 0, 0, 2000, 0);
    submit(fx, 1, 2, TEAM_A, 10 * MIN_MS);
    submit(fx, 3, 4, TEAM_A, 0);
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(count_started(fx), 2);
    assert_int_equal(count_borrowed_starts(fx), 0);
    for (uint64_t id = 3; id <= 6; id++) {
        assert_null(fx_start(fx, id));
        assert_int_equal(fx_wait(fx, id)->reason, SCHED_REASON_QUOTA);
        assert_false(explain_is_final(fx_wait(fx, id)->reason));
    }
    /* Six GPUs stay idle rather than be borrowed. */
    assert_int_equal(team_running_milli(fx, TEAM_A), 2000);
    /* When a's own work ends, the next jobs start within the guarantee. */
    assert_int_equal(fx_step(fx, 1000 + 10 * MIN_MS), 0);
    assert_int_equal(count_started(fx), 2);
    assert_int_equal(count_borrowed_starts(fx), 0);
    assert_non_null(fx_start(fx, 3));
    assert_non_null(fx_start(fx, 4));
    fx_free(fx);
}

static void borrow_limit_caps_borrowing(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    fx_quota(fx, TEAM_A, 0, 0, 2000, 3000);
    submit(fx, 1, 8, TEAM_A, 0);
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(count_started(fx), 5);
    assert_int_equal(count_borrowed_starts(fx), 3);
    assert_int_equal(team_running_milli(fx, TEAM_A), 5000);
    for (uint64_t id = 6; id <= 8; id++)
        assert_int_equal(fx_wait(fx, id)->reason, SCHED_REASON_QUOTA);
    /* Another team is not held to a's limit. */
    submit(fx, 20, 3, TEAM_B, 0);
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_int_equal(count_started(fx), 3);
    for (uint64_t id = 20; id <= 22; id++)
        assert_non_null(fx_start(fx, id));
    fx_free(fx);
}

static void unlimited_borrowing_with_minus_one(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(2);
    fx_quota(fx, TEAM_A, 0, 0, 2000, -1); /* entry: unlimited */
    submit(fx, 1, 10, TEAM_A, 0);
    submit(fx, 20, 6, TEAM_C, 0); /* no entry: team default, -1 */
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(count_started(fx), 16);
    for (uint64_t id = 20; id <= 25; id++)
        assert_true(fx_start(fx, id)->borrowed); /* c's guarantee is 0 */
    assert_int_equal(team_running_milli(fx, TEAM_A), 10000);
    /* A whole-cluster request is never refused by quota. */
    fx_free(fx);
    fx = cluster(2);
    struct sched_job *g = fx_job(fx, 1);
    g->gpus = 16;
    g->multi_node = true;
    g->team = TEAM_C;
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_non_null(fx_start(fx, 1));
    assert_true(fx_start(fx, 1)->borrowed);
    fx_free(fx);
}

static void team_default_limit_applies_where_team_has_no_entry(void **unused)
{
    (void)unused;
    struct fx *fx = fx_new();
    uint32_t p0 = fx_pool(fx, "p0");
    uint32_t p1 = fx_pool(fx, "p1");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, 1, p0, h100, 8, H100_MEM, 64, 512 * 1024);
    fx_nodes(fx, 1, p1, h100, 8, H100_MEM, 64, 512 * 1024);
    fx_team(fx, "a", 1, 0);    /* default: no borrowing */
    fx_team(fx, "b", 1, 2000); /* default: borrow up to 2 GPUs */
    fx_class(fx, "normal", 10, false);
    fx_quota(fx, TEAM_A, p1, h100, 0, 3000); /* entry in p1 overrides the default */

    struct sched_job *never = fx_job(fx, 1);
    never->pool = p0;
    for (uint64_t id = 10; id < 15; id++)
        fx_job(fx, id)->pool = p1;
    for (uint64_t id = 20; id < 23; id++)
        fx_job(fx, id)->gpu_type = SCHED_ANY; /* a, any pool: only p1 allows it */
    for (uint64_t id = 30; id < 34; id++) {
        struct sched_job *j = fx_job(fx, id);
        j->team = TEAM_B;
        j->pool = p0;
    }
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_null(fx_start(fx, 1));
    assert_int_equal(fx_wait(fx, 1)->reason, SCHED_REASON_QUOTA_NEVER);
    /* a: 3 GPUs in p1 in all, whichever jobs got them. */
    int a_started = 0;
    for (size_t s = 0; s < fx->res.nstarts; s++) {
        const struct sched_start *st = &fx->res.starts[s];
        if (fx_get(fx, st->job)->req.team != TEAM_A)
            continue;
        a_started++;
        assert_int_equal(fx->nodes[st->alloc.nodes[0].node].pool, p1);
        assert_true(st->borrowed);
    }
    assert_int_equal(a_started, 3);
    /* b: its default 2 GPUs in p0. */
    int b_started = 0;
    for (uint64_t id = 30; id < 34; id++)
        b_started += fx_start(fx, id) != NULL;
    assert_int_equal(b_started, 2);
    assert_int_equal(fx_wait(fx, 33)->reason, SCHED_REASON_QUOTA);
    fx_free(fx);
}

static void quotas_are_per_pool_and_gpu_type(void **unused)
{
    (void)unused;
    struct fx *fx = fx_new();
    uint32_t pool = fx_pool(fx, "main");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    uint32_t a100 = fx_type(fx, "A100-80GB");
    fx_nodes(fx, 1, pool, h100, 8, H100_MEM, 64, 512 * 1024);
    fx_nodes(fx, 1, pool, a100, 8, 81920, 64, 512 * 1024);
    fx_team(fx, "a", 1, 0);
    fx_class(fx, "normal", 10, false);
    fx_quota(fx, TEAM_A, pool, h100, 2000, 0);
    fx_quota(fx, TEAM_A, pool, a100, 1000, 1000);
    for (uint64_t id = 1; id <= 3; id++)
        fx_job(fx, id)->gpu_type = h100;
    for (uint64_t id = 10; id <= 13; id++)
        fx_job(fx, id)->gpu_type = a100;
    assert_int_equal(fx_step(fx, 1000), 0);
    int h = 0, a = 0, borrowed_a = 0;
    for (size_t s = 0; s < fx->res.nstarts; s++) {
        const struct sched_start *st = &fx->res.starts[s];
        uint32_t type = fx->gpus[st->alloc.shares[0].gpu].type;
        if (type == h100) {
            h++;
            assert_false(st->borrowed);
        } else {
            a++;
            borrowed_a += st->borrowed;
        }
    }
    assert_int_equal(h, 2);
    assert_int_equal(a, 2);
    assert_int_equal(borrowed_a, 1);
    /* Untyped work may go to either type while either has room: none is left. */
    fx_job(fx, 20);
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_null(fx_start(fx, 20));
    assert_int_equal(fx_wait(fx, 20)->reason, SCHED_REASON_QUOTA);
    fx_free(fx);
}

static void borrowed_flag_marks_exactly_work_over_guarantee(void **unused)
{
    (void)unused;
    /* Whole GPUs: a job that crosses the guarantee is borrowed as a whole. */
    struct fx *fx = cluster(1);
    fx_quota(fx, TEAM_A, 0, 0, 3000, -1);
    for (uint64_t id = 1; id <= 3; id++)
        fx_job(fx, id)->gpus = 2;
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_false(fx_start(fx, 1)->borrowed); /* 2000 <= 3000 */
    assert_true(fx_start(fx, 2)->borrowed);  /* 4000 > 3000 */
    assert_true(fx_start(fx, 3)->borrowed);
    fx_free(fx);

    /* Fractions: 300 + 200 fill a 500 guarantee exactly; the next is over. */
    fx = cluster(1);
    fx_quota(fx, TEAM_A, 0, 0, 500, -1);
    int32_t milli[3] = {300, 200, 1};
    for (uint64_t id = 1; id <= 3; id++) {
        struct sched_job *j = fx_job(fx, id);
        j->gpus = 0;
        j->gpu_milli = milli[id - 1];
        fx_get(fx, id)->run_ms = id == 1 ? 10 * MIN_MS : 0;
    }
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_false(fx_start(fx, 1)->borrowed);
    assert_false(fx_start(fx, 2)->borrowed);
    assert_true(fx_start(fx, 3)->borrowed);
    /* Once job 1 ends, a holds 201: 299 more fill the guarantee exactly. */
    struct sched_job *j = fx_job(fx, 4);
    j->gpus = 0;
    j->gpu_milli = 299;
    assert_int_equal(fx_step(fx, 1000 + 10 * MIN_MS), 0);
    assert_false(fx_start(fx, 4)->borrowed);
    fx_free(fx);
}

static void borrowed_flag_matches_guarantee_over_random_workloads(void **unused)
{
    (void)unused;
    const int64_t guar[3] = {3000, 2000, 0};
    const int64_t limit[3] = {2000, -1, -1};
    for (uint64_t seed = 1; seed <= 15; seed++) {
        uint64_t rng = seed * 7919;
        struct fx *fx = cluster(2);
        fx_quota(fx, TEAM_A, 0, 0, guar[0], limit[0]);
        fx_quota(fx, TEAM_B, 0, 0, guar[1], limit[1]);
        uint64_t id = 1;
        int64_t now = 0;
        int borrowed = 0, own = 0;
        for (int step = 0; step < 60; step++) {
            int arrivals = (int)fx_rng_range(&rng, 0, 4);
            for (int k = 0; k < arrivals; k++) {
                struct sched_job *j = fx_job(fx, id);
                j->team = (uint32_t)fx_rng_range(&rng, 0, 2);
                if (fx_rng_range(&rng, 0, 2) == 0) {
                    j->gpus = 0;
                    j->gpu_milli = (int32_t)fx_rng_range(&rng, 1, 999);
                } else {
                    j->gpus = (int32_t)fx_rng_range(&rng, 1, 3);
                }
                j->time_limit_ms = fx_rng_range(&rng, 1, 60) * MIN_MS;
                fx_get(fx, id)->run_ms = j->time_limit_ms;
                id++;
            }
            assert_int_equal(fx_step(fx, now), 0);
            /* Usage at the start of the pass: every running job, leaving ones too. */
            int64_t used[3] = {0, 0, 0};
            for (size_t r = 0; r < fx->nrunning; r++)
                used[fx->running[r].job->team] += alloc_milli(&fx->running[r].alloc);
            /* Starts are recorded in the order the pass made them. */
            for (size_t s = 0; s < fx->res.nstarts; s++) {
                const struct sched_start *st = &fx->res.starts[s];
                uint32_t t = fx_get(fx, st->job)->req.team;
                int64_t m = alloc_milli(&st->alloc);
                assert_int_equal(st->borrowed, used[t] + m > guar[t]);
                used[t] += m;
                if (limit[t] >= 0)
                    assert_true(used[t] <= guar[t] + limit[t]);
                borrowed += st->borrowed;
                own += !st->borrowed;
            }
            int64_t t = fx_next_event(fx);
            now = t > now ? t : now + MIN_MS;
        }
        assert_true(borrowed > 0);
        assert_true(own > 0);
        fx_free(fx);
    }
}

/* ---- reclaim ---- */

static void owner_reclaims_its_guarantee_from_borrowers(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    fx_quota(fx, TEAM_A, 0, 0, 4000, -1);
    fx_quota(fx, TEAM_B, 0, 0, 4000, -1);
    submit(fx, 1, 8, TEAM_A, 5 * HOUR_MS);
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(count_started(fx), 8);
    assert_int_equal(count_borrowed_starts(fx), 4);

    struct sched_job *bj = fx_job(fx, 100);
    bj->team = TEAM_B;
    bj->gpus = 3;
    bj->time_limit_ms = HOUR_MS;
    fx_get(fx, 100)->run_ms = HOUR_MS;
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_null(fx_start(fx, 100));
    assert_int_equal(fx->res.npreempts, 3);
    uint64_t victims[3];
    for (size_t i = 0; i < 3; i++) {
        const struct sched_preempt *p = &fx->res.preempts[i];
        victims[i] = p->job;
        assert_int_equal(p->why, SCHED_PREEMPT_RECLAIM);
        assert_int_equal(p->for_job, 100);
        assert_int_equal(p->grace_ms, fx->pol.preempt_grace_ms);
        assert_int_equal(fx_get(fx, p->job)->req.team, TEAM_A);
        assert_true(fx_get(fx, p->job)->borrowed);
    }
    assert_int_equal(fx_wait(fx, 100)->reason, SCHED_REASON_PREEMPTING);

    /* Within the grace period the victims still run and nothing more is evicted. */
    assert_int_equal(fx_step(fx, 2000 + fx->pol.preempt_grace_ms / 2), 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_null(fx_start(fx, 100));
    for (int i = 0; i < 3; i++)
        assert_true(fx_running(fx, victims[i]));

    /* After it, they are requeued and b's job starts, within b's guarantee. */
    int64_t t = 2000 + fx->pol.preempt_grace_ms;
    assert_int_equal(fx_step(fx, t), 0);
    const struct sched_start *s = fx_start(fx, 100);
    assert_non_null(s);
    assert_false(s->borrowed);
    for (int i = 0; i < 3; i++) {
        const struct fx_job *v = fx_get(fx, victims[i]);
        assert_int_equal(v->preemptions, 1);
        assert_false(fx_running(fx, victims[i]));
        assert_non_null(fx_wait(fx, victims[i]));
    }
    assert_int_equal(team_running_milli(fx, TEAM_A), 5000);

    /* Run to the end: no more evictions, the victims restart once b's job is
     * done and every job finishes. */
    for (int guard = 0; guard < 100 && !all_done(fx); guard++) {
        int64_t next = fx_next_event(fx);
        assert_true(next >= t);
        t = next;
        assert_int_equal(fx_step(fx, t), 0);
        assert_int_equal(fx->res.npreempts, 0);
    }
    assert_true(all_done(fx));
    for (int i = 0; i < 3; i++) {
        const struct fx_job *v = fx_get(fx, victims[i]);
        assert_int_equal(v->starts, 2);
        assert_true(v->started_ms >= 2000 + fx->pol.preempt_grace_ms + HOUR_MS);
    }
    fx_free(fx);
}

static void reclaim_evicts_only_borrowed_work_of_other_teams(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    fx_quota(fx, TEAM_A, 0, 0, 4000, -1);
    fx_quota(fx, TEAM_B, 0, 0, 4000, -1);
    submit(fx, 1, 6, TEAM_A, 0);  /* 4 own + 2 borrowed */
    submit(fx, 10, 2, TEAM_B, 0); /* 2 own */
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(count_started(fx), 8);
    assert_int_equal(count_borrowed_starts(fx), 2);

    /* b asks for 3 more: 5 > its guarantee, so it is not a reclaim. */
    struct sched_job *over = fx_job(fx, 20);
    over->team = TEAM_B;
    over->gpus = 3;
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_null(fx_start(fx, 20));
    fx_finish(fx, 20);

    /* b asks for 2: within its guarantee; exactly a's two borrowed jobs go. */
    struct sched_job *within = fx_job(fx, 21);
    within->team = TEAM_B;
    within->gpus = 2;
    assert_int_equal(fx_step(fx, 3000), 0);
    assert_int_equal(fx->res.npreempts, 2);
    for (size_t i = 0; i < 2; i++) {
        const struct sched_preempt *p = &fx->res.preempts[i];
        assert_int_equal(p->why, SCHED_PREEMPT_RECLAIM);
        assert_true(fx_get(fx, p->job)->borrowed);
        assert_int_equal(fx_get(fx, p->job)->req.team, TEAM_A);
    }
    assert_int_equal(fx_step(fx, 3000 + fx->pol.preempt_grace_ms), 0);
    assert_non_null(fx_start(fx, 21));
    assert_int_equal(team_running_milli(fx, TEAM_A), 4000);
    for (uint64_t id = 10; id <= 11; id++)
        assert_true(fx_running(fx, id));
    fx_free(fx);
}

static void own_team_is_never_reclaimed_from(void **unused)
{
    (void)unused;
    /* a holds 4 of its own and 4 borrowed; its next job is over its guarantee
     * and cannot reclaim anything, from itself least of all. */
    struct fx *fx = cluster(1);
    fx_quota(fx, TEAM_A, 0, 0, 4000, -1);
    submit(fx, 1, 8, TEAM_A, 0);
    assert_int_equal(fx_step(fx, 1000), 0);
    fx_job(fx, 9)->team = TEAM_A;
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_null(fx_start(fx, 9));
    fx_free(fx);
}

static void team_back_within_guarantee_is_not_reclaimed_from(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    fx_quota(fx, TEAM_A, 0, 0, 4000, -1);
    fx_quota(fx, TEAM_B, 0, 0, 4000, -1);
    /* a: jobs 1-4 its own, 5 and 6 borrowed; 1-3 end soon. */
    submit(fx, 1, 3, TEAM_A, 500);
    submit(fx, 4, 3, TEAM_A, 0);
    assert_int_equal(fx_step(fx, 0), 0);
    assert_true(fx_get(fx, 5)->borrowed);
    assert_true(fx_get(fx, 6)->borrowed);
    /* a is down to 3 GPUs, within its guarantee, though 5 and 6 started borrowed.
     * c borrows the other 5. */
    struct sched_job *cj = fx_job(fx, 20);
    cj->team = TEAM_C;
    cj->gpus = 5;
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_non_null(fx_start(fx, 20));
    assert_int_equal(team_running_milli(fx, TEAM_A), 3000);

    /* b reclaims 2. a's jobs 5 and 6 lose less work than c's 5-GPU job, but a
     * is within its guarantee: only c's borrowed work may go. */
    struct sched_job *bj = fx_job(fx, 30);
    bj->team = TEAM_B;
    bj->gpus = 2;
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_int_equal(fx->res.npreempts, 1);
    assert_int_equal(fx->res.preempts[0].job, 20);
    assert_int_equal(fx->res.preempts[0].why, SCHED_PREEMPT_RECLAIM);
    assert_int_equal(fx_step(fx, 2000 + fx->pol.preempt_grace_ms), 0);
    assert_non_null(fx_start(fx, 30));
    for (uint64_t id = 4; id <= 6; id++)
        assert_true(fx_running(fx, id));
    fx_free(fx);
}

static void reclaim_never_takes_a_team_below_its_guarantee(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    fx_quota(fx, TEAM_A, 0, 0, 4000, -1);
    fx_quota(fx, TEAM_B, 0, 0, 4000, -1);
    /* a: 1-4 its own (1 ends soon), 5 and 6 borrowed; c borrows the last two. */
    submit(fx, 1, 1, TEAM_A, 500);
    submit(fx, 2, 5, TEAM_A, 0);
    submit(fx, 11, 2, TEAM_C, 0);
    assert_int_equal(fx_step(fx, 0), 0);
    assert_int_equal(count_started(fx), 8);
    assert_true(fx_get(fx, 5)->borrowed && fx_get(fx, 6)->borrowed);
    assert_int_equal(fx_step(fx, 1000), 0); /* job 1 ends: a holds 5, one over */
    assert_int_equal(team_running_milli(fx, TEAM_A), 5000);

    /* b reclaims 3 of its guarantee; 1 GPU is free. a has only 1 GPU over its
     * guarantee, so at most one of a's jobs may go; c's borrowed work the rest. */
    struct sched_job *bj = fx_job(fx, 30);
    bj->team = TEAM_B;
    bj->gpus = 3;
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_true(fx->res.npreempts >= 1);
    for (size_t i = 0; i < fx->res.npreempts; i++) {
        assert_int_equal(fx->res.preempts[i].why, SCHED_PREEMPT_RECLAIM);
        assert_true(fx_get(fx, fx->res.preempts[i].job)->borrowed);
    }
    assert_int_equal(fx_step(fx, 2000 + fx->pol.preempt_grace_ms), 0);
    assert_non_null(fx_start(fx, 30));
    assert_true(team_running_milli(fx, TEAM_A) >= 4000);
    fx_free(fx);
}

static void no_reclaim_when_free_capacity_suffices(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    fx_quota(fx, TEAM_A, 0, 0, 4000, -1);
    fx_quota(fx, TEAM_B, 0, 0, 4000, -1);
    submit(fx, 1, 6, TEAM_A, 0); /* 2 borrowed, 2 GPUs idle */
    assert_int_equal(fx_step(fx, 1000), 0);
    struct sched_job *bj = fx_job(fx, 30);
    bj->team = TEAM_B;
    bj->gpus = 2;
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_non_null(fx_start(fx, 30));
    fx_free(fx);
}

static void quota_never_for_request_over_guarantee_plus_limit(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(2);
    fx_quota(fx, TEAM_A, 0, 0, 2000, 1000);
    fx->teams[TEAM_B].borrow_limit_milli = 0; /* b: no entry, no borrowing */
    fx_job(fx, 1)->gpus = 4;
    struct sched_job *gang = fx_job(fx, 2);
    gang->gpus = 12;
    gang->multi_node = true;
    fx_job(fx, 3)->gpus = 3;
    struct sched_job *bj = fx_job(fx, 4);
    bj->team = TEAM_B;
    struct sched_job *bf = fx_job(fx, 5);
    bf->team = TEAM_B;
    bf->gpus = 0;
    bf->gpu_milli = 1;
    struct sched_job *cj = fx_job(fx, 6); /* c: unlimited */
    cj->team = TEAM_C;
    cj->gpus = 8;
    assert_int_equal(fx_step(fx, 1000), 0);
    for (uint64_t id = 1; id <= 5; id += (id == 2 ? 2 : 1)) {
        const struct sched_wait *w = fx_wait(fx, id);
        assert_non_null(w);
        assert_int_equal(w->reason, SCHED_REASON_QUOTA_NEVER);
        assert_true(explain_is_final(w->reason));
        assert_int_equal(w->team, fx_get(fx, id)->req.team);
    }
    assert_non_null(fx_start(fx, 3)); /* exactly guarantee + limit */
    assert_true(fx_start(fx, 3)->borrowed);
    assert_non_null(fx_start(fx, 6));
    /* At the limit, a smaller job waits for quota, which is not final. */
    fx_job(fx, 7)->gpus = 1;
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_int_equal(fx_wait(fx, 7)->reason, SCHED_REASON_QUOTA);
    fx_free(fx);
}

/* ---- the quota API ---- */

static void quota_api_follows_entries_defaults_and_usage(void **unused)
{
    (void)unused;
    struct fx *fx = fx_new();
    uint32_t p0 = fx_pool(fx, "p0");
    uint32_t p1 = fx_pool(fx, "p1");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, 1, p0, h100, 8, H100_MEM, 64, 512 * 1024);
    fx_nodes(fx, 1, p1, h100, 8, H100_MEM, 64, 512 * 1024);
    fx_nodes(fx, 1, p1, SCHED_NONE, 0, 0, 64, 512 * 1024); /* CPU-only node */
    fx_team(fx, "a", 1, -1);
    fx_team(fx, "b", 1, 500);
    fx_class(fx, "normal", 10, false);
    fx_quota(fx, TEAM_A, p0, h100, 2000, 1000);

    /* a runs 1.5 GPUs in p0, b a quarter in p1. */
    struct sched_job ja = {.id = 1, .team = TEAM_A, .gpus = 1};
    struct sched_job jb = {.id = 2, .team = TEAM_B, .gpu_milli = 250};
    struct sched_node_part pa = {.node = 0, .cpus = 1, .mem_mib = 1}, pb = {.node = 1};
    struct sched_share sa[2] = {{.gpu = 0, .milli = 1000, .mem_mib = H100_MEM},
                                {.gpu = 1, .milli = 500, .mem_mib = H100_MEM / 2}};
    struct sched_share sb = {.gpu = 8, .milli = 250, .mem_mib = H100_MEM / 4};
    struct sched_running run[2] = {
        {.job = &ja, .alloc = {&pa, 1, sa, 2}},
        {.job = &jb, .alloc = {&pb, 1, &sb, 1}},
    };
    struct sched_running_set rs = {run, 2};
    struct view v;
    assert_int_equal(view_init(&v, &fx->c, &rs, SCHED_PACK_BINPACK, NULL), 0);
    struct quota q;
    assert_int_equal(quota_init(&q, &fx->c, &v), 0);
    for (size_t r = 0; r < rs.njobs; r++) { /* as pass_alloc adds the running set */
        uint32_t rg;
        int64_t rm;
        quota_alloc_usage(&v, &rs.jobs[r].alloc, &rg, &rm);
        quota_add(&q, rs.jobs[r].job->team, rg, rm);
    }
    uint32_t g0 = view_group_of(&v, p0, h100), g1 = view_group_of(&v, p1, h100);
    uint32_t gc = view_group_of(&v, p1, SCHED_NONE);
    assert_true(g0 != SCHED_NONE && g1 != SCHED_NONE && gc != SCHED_NONE);

    uint32_t g;
    int64_t m;
    quota_alloc_usage(&v, &run[0].alloc, &g, &m);
    assert_int_equal(g, g0);
    assert_int_equal(m, 1500);
    quota_alloc_usage(&v, &run[1].alloc, &g, &m);
    assert_int_equal(g, g1);
    assert_int_equal(m, 250);
    struct sched_alloc none = {0};
    quota_alloc_usage(&v, &none, &g, &m);
    assert_int_equal(g, SCHED_NONE);
    assert_int_equal(m, 0);

    assert_int_equal(q.used[TEAM_A * q.ngroups + g0], 1500);
    assert_int_equal(q.used[TEAM_B * q.ngroups + g1], 250);
    assert_int_equal(q.guar[TEAM_A * q.ngroups + g0], 2000);
    assert_int_equal(quota_limit(&q, TEAM_A, g0), 3000);
    assert_int_equal(quota_limit(&q, TEAM_A, g1), INT64_MAX); /* default -1 */
    assert_int_equal(q.guar[TEAM_A * q.ngroups + g1], 0);
    assert_int_equal(quota_limit(&q, TEAM_B, g0), 500);
    assert_int_equal(quota_limit(&q, TEAM_B, gc), INT64_MAX); /* no GPUs: no quota */

    assert_true(quota_allows(&q, TEAM_A, g0, 1500));
    assert_false(quota_allows(&q, TEAM_A, g0, 1501));
    assert_true(quota_within_guarantee(&q, TEAM_A, g0, 500));
    assert_false(quota_within_guarantee(&q, TEAM_A, g0, 501));
    assert_true(quota_allows(&q, TEAM_B, g1, 250));
    assert_false(quota_allows(&q, TEAM_B, g1, 251));
    assert_false(quota_within_guarantee(&q, TEAM_B, g1, 1));
    assert_true(quota_allows(&q, TEAM_A, g1, 1000000));

    quota_add(&q, TEAM_A, g0, -1500);
    assert_true(quota_within_guarantee(&q, TEAM_A, g0, 2000));
    assert_true(quota_allows(&q, TEAM_A, g0, 3000));
    quota_add(&q, TEAM_A, g0, 3000);
    assert_false(quota_allows(&q, TEAM_A, g0, 1));
    quota_release(&q);
    view_release(&v);
    fx_free(fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(team_uses_guarantee_then_borrows_idle_capacity),
        cmocka_unit_test(borrow_limit_zero_caps_team_at_its_guarantee),
        cmocka_unit_test(borrow_limit_caps_borrowing),
        cmocka_unit_test(unlimited_borrowing_with_minus_one),
        cmocka_unit_test(team_default_limit_applies_where_team_has_no_entry),
        cmocka_unit_test(quotas_are_per_pool_and_gpu_type),
        cmocka_unit_test(borrowed_flag_marks_exactly_work_over_guarantee),
        cmocka_unit_test(borrowed_flag_matches_guarantee_over_random_workloads),
        cmocka_unit_test(owner_reclaims_its_guarantee_from_borrowers),
        cmocka_unit_test(reclaim_evicts_only_borrowed_work_of_other_teams),
        cmocka_unit_test(own_team_is_never_reclaimed_from),
        cmocka_unit_test(team_back_within_guarantee_is_not_reclaimed_from),
        cmocka_unit_test(reclaim_never_takes_a_team_below_its_guarantee),
        cmocka_unit_test(no_reclaim_when_free_capacity_suffices),
        cmocka_unit_test(quota_never_for_request_over_guarantee_plus_limit),
        cmocka_unit_test(quota_api_follows_entries_defaults_and_usage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

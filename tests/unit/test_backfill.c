/* test_backfill.c - EASY backfill: the highest-ranked blocked job of each pool
 * holds a reservation, and no job started around it may delay it. Jobs that
 * end before the reservation start now; longer ones wait behind it, or run on
 * nodes it does not hold. With backfill off, jobs behind a blocked job wait. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/backfill.h"
#include "base/err.h"
#include "core/sched.h"
#include "fixture.h"

#define MIN_MS   (60 * 1000)
#define HOUR_MS  (60 * MIN_MS)
#define H100_MEM 81920

/* One pool "main" of `nodes` nodes with 8 H100s each, one team, one class. */
static struct fx *cluster(uint32_t nodes)
{
    struct fx *fx = fx_new();
    uint32_t pool = fx_pool(fx, "main");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, nodes, pool, h100, 8, H100_MEM, 64, 512 * 1024);
    fx_team(fx, "a", 1, -1);
    fx_class(fx, "normal", 10, false);
    return fx;
}

/* Adds a job of `gpus` whole GPUs (or `milli` of one) with a time limit and a
 * run time (0: runs until finished by hand). */
static struct sched_job *add(struct fx *fx, uint64_t id, int32_t gpus, int32_t milli,
                             int64_t limit_ms, int64_t run_ms)
{
    struct sched_job *j = fx_job(fx, id);
    j->gpus = milli ? 0 : gpus;
    j->gpu_milli = milli;
    j->time_limit_ms = limit_ms;
    fx_get(fx, id)->run_ms = run_ms;
    return j;
}

static const struct sched_reserve *find_reserve(const struct fx *fx, uint64_t job)
{
    for (size_t i = 0; i < fx->res.nreserves; i++) {
        if (fx->res.reserves[i].job == job)
            return &fx->res.reserves[i];
    }
    return NULL;
}

static bool reserve_holds(const struct sched_reserve *r, uint32_t node)
{
    for (uint32_t i = 0; i < r->nnodes; i++) {
        if (r->nodes[i] == node)
            return true;
    }
    return false;
}

/* Steps event by event from `now` until job `id` has started; returns when. */
static int64_t run_until_started(struct fx *fx, uint64_t id, int64_t now)
{
    for (int guard = 0; guard < 1000; guard++) {
        if (fx_get(fx, id)->started_ms >= 0)
            return fx_get(fx, id)->started_ms;
        int64_t t = fx_next_event(fx);
        assert_true(t > now);
        now = t;
        assert_int_equal(fx_step(fx, now), 0);
    }
    fail_msg("job %lu never started", (unsigned long)id);
    return -1;
}

/* ---- one head, short and long jobs around it ---- */

/* The head job; other pending jobs have higher ids, so with equal submit
 * times they rank after it. HEAD_B: a second pool's head. */
enum { HEAD = 100, HEAD_B = 99 };

/*
 * One node: job 1 holds 2 GPUs until 2 h. The head (8 GPUs) is blocked until
 * then. Behind it: 101 (2 GPUs, 1 h), 102 (2 GPUs, ending exactly at 2 h),
 * 103 (2 GPUs, 3 h) and 104 (a tenth of a GPU, 3 h).
 */
static struct fx *one_node_scenario(bool backfill)
{
    struct fx *fx = cluster(1);
    add(fx, 1, 2, 0, 2 * HOUR_MS, 2 * HOUR_MS);
    assert_int_equal(fx_step(fx, 0), 0);
    assert_true(fx_running(fx, 1));
    fx->pol.backfill = backfill;
    fx->now = 1000;
    add(fx, HEAD, 8, 0, HOUR_MS, HOUR_MS);
    add(fx, 101, 2, 0, HOUR_MS, HOUR_MS);
    add(fx, 102, 2, 0, 2 * HOUR_MS - 1000, 2 * HOUR_MS - 1000);
    add(fx, 103, 2, 0, 3 * HOUR_MS, 3 * HOUR_MS);
    add(fx, 104, 0, 100, 3 * HOUR_MS, 3 * HOUR_MS);
    assert_int_equal(fx_step(fx, 1000), 0);
    return fx;
}

static void short_jobs_that_end_before_the_reservation_start_now(void **unused)
{
    (void)unused;
    struct fx *fx = one_node_scenario(true);
    assert_null(fx_start(fx, HEAD));
    assert_non_null(fx_start(fx, 101));
    assert_non_null(fx_start(fx, 102)); /* ends exactly when the reservation starts */
    for (uint64_t id = 103; id <= 104; id++) {
        assert_null(fx_start(fx, id));
        const struct sched_wait *w = fx_wait(fx, id);
        assert_non_null(w);
        assert_int_equal(w->reason, SCHED_REASON_RESERVED);
        assert_int_equal(w->other_job, HEAD);
    }
    const struct sched_wait *hw = fx_wait(fx, HEAD);
    assert_int_equal(hw->reason, SCHED_REASON_NO_GPU);
    assert_int_equal(hw->est_start_ms, 2 * HOUR_MS);

    /* The short job ends; the long ones still wait for the head. */
    assert_int_equal(fx_step(fx, 1000 + HOUR_MS), 0);
    assert_int_equal(fx->res.nstarts, 0);
    assert_int_equal(fx_wait(fx, 103)->reason, SCHED_REASON_RESERVED);
    assert_int_equal(fx_wait(fx, HEAD)->est_start_ms, 2 * HOUR_MS);
    /* The head starts at its reservation, exactly. */
    assert_int_equal(run_until_started(fx, HEAD, 1000 + HOUR_MS), 2 * HOUR_MS);
    /* The long ones run after it. */
    int64_t t = run_until_started(fx, 103, 2 * HOUR_MS);
    assert_true(t >= 3 * HOUR_MS);
    fx_free(fx);
}

static void backfill_off_marks_jobs_behind_a_blocked_job_blocked(void **unused)
{
    (void)unused;
    struct fx *fx = one_node_scenario(false);
    assert_int_equal(fx->res.nstarts, 0); /* 6 GPUs idle, in order */
    assert_int_equal(fx->res.nreserves, 0);
    assert_int_equal(fx_wait(fx, HEAD)->reason, SCHED_REASON_NO_GPU);
    for (uint64_t id = 101; id <= 104; id++) {
        const struct sched_wait *w = fx_wait(fx, id);
        assert_non_null(w);
        assert_int_equal(w->reason, SCHED_REASON_BLOCKED);
        assert_int_equal(w->other_job, HEAD);
        assert_false(explain_is_final(w->reason));
    }
    assert_int_equal(run_until_started(fx, HEAD, 1000), 2 * HOUR_MS);
    /* Once the head runs, the others go in order as it ends. */
    assert_true(run_until_started(fx, 101, 2 * HOUR_MS) >= 2 * HOUR_MS + HOUR_MS);
    fx_free(fx);
}

static void head_starts_no_later_with_backfill_than_without(void **unused)
{
    (void)unused;
    struct fx *on = one_node_scenario(true), *off = one_node_scenario(false);
    int64_t est = fx_wait(on, HEAD)->est_start_ms;
    int64_t t_on = run_until_started(on, HEAD, 1000);
    int64_t t_off = run_until_started(off, HEAD, 1000);
    assert_true(t_on <= est);
    assert_true(t_on <= t_off);
    /* And backfill did its job: the short jobs ran before the head. */
    assert_true(fx_get(on, 101)->started_ms < t_on);
    assert_true(fx_get(off, 101)->started_ms < 0);
    fx_free(on);
    fx_free(off);
}

static void jobs_without_time_limit_use_the_default_limit(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    add(fx, 1, 2, 0, 2 * HOUR_MS, 0);
    assert_int_equal(fx_step(fx, 0), 0);
    add(fx, HEAD, 8, 0, HOUR_MS, 0);
    add(fx, 101, 2, 0, 0, 0); /* no limit: 24 h by default */
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_null(fx_start(fx, 101));
    assert_int_equal(fx_wait(fx, 101)->reason, SCHED_REASON_RESERVED);
    fx->pol.default_time_limit_ms = 30 * MIN_MS;
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_non_null(fx_start(fx, 101));
    fx_free(fx);
}

/*
 * Three nodes: node0 6 GPUs busy until 2 h, node1 6 until 3 h, node2 3 until
 * 4 h (free now: 2, 2, 5).
 */
static struct fx *three_node_scenario(void)
{
    struct fx *fx = cluster(3);
    add(fx, 1, 6, 0, 2 * HOUR_MS, 2 * HOUR_MS);
    add(fx, 2, 6, 0, 3 * HOUR_MS, 3 * HOUR_MS);
    add(fx, 3, 3, 0, 4 * HOUR_MS, 4 * HOUR_MS);
    assert_int_equal(fx_step(fx, 0), 0);
    assert_int_equal(fx_get(fx, 1)->alloc.nodes[0].node, 0);
    assert_int_equal(fx_get(fx, 2)->alloc.nodes[0].node, 1);
    assert_int_equal(fx_get(fx, 3)->alloc.nodes[0].node, 2);
    fx->now = 1000;
    return fx;
}

static void reservation_names_head_job_nodes_and_start(void **unused)
{
    (void)unused;
    struct fx *fx = three_node_scenario();
    add(fx, HEAD, 8, 0, HOUR_MS, HOUR_MS);
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx->res.nreserves, 1);
    const struct sched_reserve *r = &fx->res.reserves[0];
    assert_int_equal(r->job, HEAD);
    assert_int_equal(r->start_ms, 2 * HOUR_MS);
    assert_int_equal(r->nnodes, 1);
    assert_int_equal(r->nodes[0], 0);
    assert_int_equal(fx_wait(fx, HEAD)->est_start_ms, 2 * HOUR_MS);
    fx_free(fx);

    /* A gang of 12: at 2 h node0 has 8 and node2 5. */
    fx = three_node_scenario();
    struct sched_job *g = add(fx, HEAD, 12, 0, HOUR_MS, HOUR_MS);
    g->multi_node = true;
    assert_int_equal(fx_step(fx, 1000), 0);
    r = find_reserve(fx, HEAD);
    assert_non_null(r);
    assert_int_equal(r->start_ms, 2 * HOUR_MS);
    assert_int_equal(r->nnodes, 2);
    assert_true(reserve_holds(r, 0));
    assert_true(reserve_holds(r, 2));
    assert_int_equal(run_until_started(fx, HEAD, 1000), 2 * HOUR_MS);
    fx_free(fx);
}

static void long_jobs_backfill_on_nodes_the_reservation_does_not_hold(void **unused)
{
    (void)unused;
    struct fx *fx = three_node_scenario();
    add(fx, HEAD, 8, 0, HOUR_MS, HOUR_MS); /* reserves node0 from 2 h */
    add(fx, 101, 2, 0, 10 * HOUR_MS, 10 * HOUR_MS);
    add(fx, 102, 5, 0, 10 * HOUR_MS, 10 * HOUR_MS);
    add(fx, 103, 2, 0, 10 * HOUR_MS, 10 * HOUR_MS);
    add(fx, 104, 2, 0, HOUR_MS, HOUR_MS);
    assert_int_equal(fx_step(fx, 1000), 0);
    /* Binpack would put 101 on node0 (the lower of two tight nodes): it is held. */
    assert_int_equal(fx_start_node(fx, 101), 1);
    assert_int_equal(fx_start_node(fx, 102), 2);
    assert_null(fx_start(fx, 103)); /* only node0 is left: held */
    assert_int_equal(fx_wait(fx, 103)->reason, SCHED_REASON_RESERVED);
    assert_int_equal(fx_wait(fx, 103)->other_job, HEAD);
    assert_int_equal(fx_start_node(fx, 104), 0); /* ends in time */
    assert_int_equal(run_until_started(fx, HEAD, 1000), 2 * HOUR_MS);
    fx_free(fx);
}

static void lower_blocked_job_gets_no_second_reservation(void **unused)
{
    (void)unused;
    struct fx *fx = three_node_scenario();
    add(fx, HEAD, 8, 0, HOUR_MS, HOUR_MS);
    add(fx, 101, 7, 0, HOUR_MS, HOUR_MS); /* blocked too, ranked lower */
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx->res.nreserves, 1);
    assert_int_equal(fx->res.reserves[0].job, HEAD);
    assert_null(find_reserve(fx, 101));
    assert_int_equal(fx_wait(fx, 101)->est_start_ms, -1);
    assert_int_equal(fx_wait(fx, HEAD)->est_start_ms, 2 * HOUR_MS);
    fx_free(fx);
}

static void reservation_counts_jobs_started_earlier_in_the_same_pass(void **unused)
{
    (void)unused;
    /* Twelve one-GPU jobs start in one pass (more than the result's first
     * allocation of starts), then the head's reservation is computed from
     * their ends: node0, freed by jobs 1-8 at 1 h. */
    struct fx *fx = cluster(2);
    for (uint64_t id = 1; id <= 12; id++)
        add(fx, id, 1, 0, HOUR_MS, HOUR_MS);
    add(fx, HEAD, 8, 0, HOUR_MS, HOUR_MS);
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx->res.nstarts, 12);
    const struct sched_reserve *r = find_reserve(fx, HEAD);
    assert_non_null(r);
    assert_int_equal(r->start_ms, 1000 + HOUR_MS);
    assert_int_equal(r->nnodes, 1);
    assert_int_equal(r->nodes[0], 0);
    assert_int_equal(run_until_started(fx, HEAD, 1000), 1000 + HOUR_MS);
    fx_free(fx);
}

/* ---- pools ---- */

/* Pool A (node0): 6 GPUs busy until 2 h; pool B (node1): 4 busy until 5 h. */
static struct fx *two_pool_scenario(bool backfill)
{
    struct fx *fx = fx_new();
    uint32_t pa = fx_pool(fx, "a");
    uint32_t pb = fx_pool(fx, "b");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, 1, pa, h100, 8, H100_MEM, 64, 512 * 1024);
    fx_nodes(fx, 1, pb, h100, 8, H100_MEM, 64, 512 * 1024);
    fx_team(fx, "a", 1, -1);
    fx_class(fx, "normal", 10, false);
    add(fx, 1, 6, 0, 2 * HOUR_MS, 2 * HOUR_MS)->pool = pa;
    add(fx, 2, 4, 0, 5 * HOUR_MS, 5 * HOUR_MS)->pool = pb;
    assert_int_equal(fx_step(fx, 0), 0);
    fx->pol.backfill = backfill;
    fx->now = 1000;
    return fx;
}

static void one_reservation_per_pool(void **unused)
{
    (void)unused;
    struct fx *fx = two_pool_scenario(true);
    add(fx, HEAD, 8, 0, HOUR_MS, HOUR_MS)->pool = 0;   /* blocked in a until 2 h */
    add(fx, HEAD_B, 8, 0, HOUR_MS, HOUR_MS)->pool = 1; /* blocked in b until 5 h */
    add(fx, 101, 4, 0, HOUR_MS, HOUR_MS)->pool = 0;    /* blocked in a, lower */
    add(fx, 102, 2, 0, 4 * HOUR_MS, 4 * HOUR_MS)->pool = 1;
    add(fx, 103, 2, 0, 6 * HOUR_MS, 6 * HOUR_MS)->pool = 1;
    add(fx, 104, 2, 0, HOUR_MS, HOUR_MS)->pool = 0;
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx->res.nreserves, 2);
    const struct sched_reserve *ra = find_reserve(fx, HEAD), *rb = find_reserve(fx, HEAD_B);
    assert_non_null(ra);
    assert_non_null(rb);
    assert_int_equal(ra->start_ms, 2 * HOUR_MS);
    assert_int_equal(ra->nnodes, 1);
    assert_int_equal(ra->nodes[0], 0);
    assert_int_equal(rb->start_ms, 5 * HOUR_MS);
    assert_int_equal(rb->nnodes, 1);
    assert_int_equal(rb->nodes[0], 1);
    assert_int_equal(fx_wait(fx, 101)->est_start_ms, -1);
    /* b's head is not held up by a's, and b backfills around its own. */
    assert_non_null(fx_start(fx, 102));
    assert_int_equal(fx_wait(fx, 103)->reason, SCHED_REASON_RESERVED);
    assert_int_equal(fx_wait(fx, 103)->other_job, HEAD_B);
    assert_non_null(fx_start(fx, 104));
    assert_int_equal(run_until_started(fx, HEAD, 1000), 2 * HOUR_MS);
    assert_int_equal(run_until_started(fx, HEAD_B, 2 * HOUR_MS), 5 * HOUR_MS);
    fx_free(fx);
}

static void blocked_job_in_another_pool_does_not_block_this_one(void **unused)
{
    (void)unused;
    struct fx *fx = two_pool_scenario(false);
    add(fx, HEAD, 8, 0, HOUR_MS, HOUR_MS)->pool = 0;
    add(fx, 101, 2, 0, HOUR_MS, HOUR_MS)->pool = 0;
    add(fx, 102, 2, 0, HOUR_MS, HOUR_MS)->pool = 1;
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx_wait(fx, 101)->reason, SCHED_REASON_BLOCKED);
    assert_int_equal(fx_wait(fx, 101)->other_job, HEAD);
    assert_non_null(fx_start(fx, 102));
    fx_free(fx);
}

static void backfill_off_any_pool_job_leaves_a_blocked_pool_alone(void **unused)
{
    (void)unused;
    /* With backfill off, a job that may run in either pool must not take the
     * GPUs of the pool whose head is blocked: that is backfilling. */
    struct fx *fx = two_pool_scenario(false);
    add(fx, HEAD, 8, 0, HOUR_MS, HOUR_MS)->pool = 0;
    add(fx, 101, 2, 0, 10 * HOUR_MS, 10 * HOUR_MS); /* any pool; binpack likes node0 */
    assert_int_equal(fx_step(fx, 1000), 0);
    const struct sched_start *s = fx_start(fx, 101);
    if (s)
        assert_int_equal(s->alloc.nodes[0].node, 1);
    assert_int_equal(run_until_started(fx, HEAD, 1000), 2 * HOUR_MS);
    fx_free(fx);
}

/* ---- "never delays", over scenarios ---- */

#define MAX_INIT  16
#define MAX_SMALL 24

struct sjob {
    int32_t gpus, milli;
    bool gang;
    int64_t limit_ms, run_ms;
};

struct scen {
    uint32_t nodes;
    int ninit, nsmall;
    struct sjob init[MAX_INIT];
    struct sjob head; /* gpus 0: sized from the free capacity after init by head_pick */
    uint64_t head_pick;
    struct sjob small[MAX_SMALL];
    bool exact; /* init jobs run exactly to their limits */
};

struct outcome {
    int64_t est0; /* head's reservation start in the first pass (backfill on) */
    int64_t head_start;
    int backfilled; /* jobs started while the head waited */
};

static void add_sjob(struct fx *fx, uint64_t id, const struct sjob *s, int64_t submit)
{
    struct sched_job *j = add(fx, id, s->gpus, s->milli, s->limit_ms, s->run_ms);
    j->multi_node = s->gang;
    j->submit_ms = submit;
}

/* Sizes the head so that it cannot start now: more GPUs than any node has
 * free, or a gang larger than all free GPUs. */
static struct sjob size_head(const struct fx *fx, const struct scen *s)
{
    struct sjob h = s->head;
    if (h.gpus > 0)
        return h;
    uint32_t total = fx->c.ngpus, free_sum = 0, free_max = 0;
    for (uint32_t n = 0; n < fx->c.nnodes; n++) {
        uint32_t f = 0;
        for (uint32_t g = 0; g < fx->nodes[n].ngpus; g++) {
            uint32_t gi = fx->nodes[n].gpu_first + g;
            bool used = false;
            for (uint32_t i = 0; i < fx->njobs && !used; i++) {
                const struct fx_job *j = &fx->jobs[i];
                if (j->done || j->started_ms < 0)
                    continue;
                for (uint32_t k = 0; k < j->alloc.nshares; k++)
                    used = used || j->alloc.shares[k].gpu == gi;
            }
            f += !used;
        }
        free_sum += f;
        free_max = f > free_max ? f : free_max;
    }
    assert_true(free_sum < total);
    if (free_max < 8 && !(fx->c.nnodes > 1 && (s->head_pick & 1))) {
        h.gpus = (int32_t)(free_max + 1 + (s->head_pick >> 1) % (8 - free_max));
        h.gang = false;
    } else {
        h.gpus = (int32_t)(free_sum + 1 + (s->head_pick >> 1) % (total - free_sum));
        h.gang = true;
    }
    return h;
}

/* Checks one pass with backfill on while the head waits. */
static void check_on_pass(struct fx *fx, int64_t now, int64_t *prev_est, struct outcome *o)
{
    const struct sched_wait *w = fx_wait(fx, HEAD);
    assert_non_null(w);
    assert_true(w->est_start_ms > now);
    assert_true(w->est_start_ms <= *prev_est); /* the promise only gets better */
    *prev_est = w->est_start_ms;
    if (o->est0 < 0)
        o->est0 = w->est_start_ms;
    const struct sched_reserve *r = find_reserve(fx, HEAD);
    assert_non_null(r);
    assert_int_equal(r->start_ms, w->est_start_ms);
    assert_true(r->nnodes > 0);
    for (size_t i = 0; i < fx->res.nstarts; i++) {
        const struct sched_start *st = &fx->res.starts[i];
        const struct sched_job *j = &fx_get(fx, st->job)->req;
        int64_t limit = j->time_limit_ms > 0 ? j->time_limit_ms : fx->pol.default_time_limit_ms;
        o->backfilled++;
        if (now + limit <= r->start_ms)
            continue; /* gone before the head needs the room */
        for (uint32_t p = 0; p < st->alloc.nnodes; p++)
            assert_false(reserve_holds(r, st->alloc.nodes[p].node));
    }
    for (size_t i = 0; i < fx->res.nwaits; i++) {
        if (fx->res.waits[i].reason == SCHED_REASON_RESERVED)
            assert_int_equal(fx->res.waits[i].other_job, HEAD);
    }
}

static void check_off_pass(const struct fx *fx)
{
    assert_int_equal(fx->res.nstarts, 0);
    assert_int_equal(fx->res.nreserves, 0);
    for (size_t i = 0; i < fx->res.nwaits; i++) {
        const struct sched_wait *w = &fx->res.waits[i];
        if (w->job == HEAD)
            continue;
        assert_int_equal(w->reason, SCHED_REASON_BLOCKED);
        assert_int_equal(w->other_job, HEAD);
    }
}

static void run_scen(const struct scen *s, bool backfill, struct outcome *o)
{
    struct fx *fx = cluster(s->nodes);
    for (int k = 0; k < s->ninit; k++)
        add_sjob(fx, 1 + (uint64_t)k, &s->init[k], 0);
    assert_int_equal(fx_step(fx, 0), 0);
    for (int k = 0; k < s->ninit; k++) {
        if (!fx_running(fx, 1 + (uint64_t)k))
            fx_finish(fx, 1 + (uint64_t)k); /* keep only what fitted */
    }
    fx->pol.backfill = backfill;
    struct sjob head = size_head(fx, s);
    add_sjob(fx, HEAD, &head, 1000);
    for (int k = 0; k < s->nsmall; k++)
        add_sjob(fx, HEAD + 1 + (uint64_t)k, &s->small[k], 1001 + k);

    *o = (struct outcome){.est0 = -1, .head_start = -1};
    int64_t now = 1000, prev_est = INT64_MAX;
    for (int guard = 0; guard < 1000; guard++) {
        assert_int_equal(fx_step(fx, now), 0);
        if (fx_get(fx, HEAD)->started_ms >= 0) {
            o->head_start = fx_get(fx, HEAD)->started_ms;
            break;
        }
        if (backfill)
            check_on_pass(fx, now, &prev_est, o);
        else
            check_off_pass(fx);
        int64_t t = fx_next_event(fx);
        assert_true(t > now);
        now = t;
    }
    assert_true(o->head_start > 1000);
    fx_free(fx);
}

/* Runs a scenario with backfill on and off and checks the head is never later. */
static void check_never_delays(const struct scen *s, int *ret_backfilled)
{
    struct outcome on, off;
    run_scen(s, true, &on);
    run_scen(s, false, &off);
    assert_true(on.est0 > 1000);
    assert_true(on.head_start <= on.est0);
    assert_true(off.head_start <= on.est0);
    if (s->exact) {
        /* Running jobs end at their limits: the reservation was exact, and
         * without backfill the head starts right then. */
        assert_int_equal(off.head_start, on.est0);
        assert_true(on.head_start <= off.head_start);
    }
    if (ret_backfilled)
        *ret_backfilled = on.backfilled;
}

static void backfill_never_delays_reserved_job(void **unused)
{
    (void)unused;
    /* Two nodes; 6 + 2 busy on one, 4 on the other; a 7-GPU head; a mix of
     * jobs behind it, some ending early. */
    struct scen s = {
        .nodes = 2,
        .exact = true,
        .ninit = 3,
        .init = {{6, 0, false, 2 * HOUR_MS, 2 * HOUR_MS},
                 {4, 0, false, 3 * HOUR_MS, 3 * HOUR_MS},
                 {2, 0, false, HOUR_MS, HOUR_MS}},
        .head = {7, 0, false, HOUR_MS, HOUR_MS},
        .nsmall = 7,
        .small = {{4, 0, false, 5 * HOUR_MS, 4 * HOUR_MS},
                  {2, 0, false, 30 * MIN_MS, 10 * MIN_MS},
                  {2, 0, false, 2 * HOUR_MS, 2 * HOUR_MS},
                  {1, 0, false, 50 * MIN_MS, 50 * MIN_MS},
                  {0, 300, false, 90 * MIN_MS, 20 * MIN_MS},
                  {0, 700, false, 10 * HOUR_MS, HOUR_MS},
                  {1, 0, false, 20 * MIN_MS, 20 * MIN_MS}},
    };
    int backfilled = 0;
    check_never_delays(&s, &backfilled);
    assert_true(backfilled >= 2);

    /* The same with a gang head over both nodes. */
    s.head = (struct sjob){12, 0, true, HOUR_MS, HOUR_MS};
    check_never_delays(&s, NULL);
}

static void backfill_never_delays_reserved_job_over_random_seeds(void **unused)
{
    (void)unused;
    int total_backfilled = 0;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        uint64_t rng = seed * 0x51ed27ull;
        struct scen s = {.nodes = (uint32_t)fx_rng_range(&rng, 1, 3), .exact = seed % 2 == 0};
        s.ninit = (int)fx_rng_range(&rng, (int64_t)s.nodes, (int64_t)s.nodes * 4);
        for (int k = 0; k < s.ninit; k++) {
            struct sjob *j = &s.init[k];
            if (fx_rng_range(&rng, 0, 5) == 0)
                j->milli = (int32_t)fx_rng_range(&rng, 1, 999);
            else
                j->gpus = (int32_t)fx_rng_range(&rng, 1, 5);
            j->limit_ms = fx_rng_range(&rng, 10, 240) * MIN_MS + fx_rng_range(&rng, 0, 999);
            j->run_ms = s.exact ? j->limit_ms : fx_rng_range(&rng, 1, j->limit_ms);
        }
        s.head.limit_ms = fx_rng_range(&rng, 10, 240) * MIN_MS;
        s.head.run_ms = fx_rng_range(&rng, 1, s.head.limit_ms);
        s.head_pick = fx_rng_next(&rng);
        s.nsmall = (int)fx_rng_range(&rng, 4, MAX_SMALL);
        for (int k = 0; k < s.nsmall; k++) {
            struct sjob *j = &s.small[k];
            int kind = (int)fx_rng_range(&rng, 0, 7);
            if (kind == 0)
                j->milli = (int32_t)fx_rng_range(&rng, 1, 999);
            else if (kind == 1 && s.nodes > 1) {
                j->gpus = (int32_t)fx_rng_range(&rng, 2, 10);
                j->gang = true;
            } else
                j->gpus = (int32_t)fx_rng_range(&rng, 1, 4);
            j->limit_ms = fx_rng_range(&rng, 5, 300) * MIN_MS;
            if (fx_rng_range(&rng, 0, 9) == 0)
                j->limit_ms = 0; /* the policy's default */
            int64_t lim = j->limit_ms ? j->limit_ms : 24 * HOUR_MS;
            j->run_ms = fx_rng_range(&rng, 0, 2) == 0 ? lim : fx_rng_range(&rng, 1, lim);
        }
        int backfilled = 0;
        check_never_delays(&s, &backfilled);
        total_backfilled += backfilled;
    }
    assert_true(total_backfilled > 300); /* the scenarios did exercise backfill */
}

static int release_cmp(const void *a, const void *b)
{
    const struct backfill_release *x = a, *y = b;
    if (x->end_ms != y->end_ms)
        return x->end_ms < y->end_ms ? -1 : 1;
    return x->job < y->job ? -1 : x->job > y->job;
}

/* The look-ahead reads releases in end order, ties by job id, however they
 * were added: before the first read, or between reads (a job started in the
 * pass), ending before or after the ones already read. Against qsort. */
static void releases_come_in_end_order_however_added(void **unused)
{
    (void)unused;
    uint64_t rng = 7;
    for (int round = 0; round < 200; round++) {
        struct backfill_releases rs;
        backfill_releases_init(&rs);
        struct backfill_release all[300];
        size_t n = 0, nfirst = (size_t)fx_rng_range(&rng, 0, 200);
        size_t nlater = (size_t)fx_rng_range(&rng, 0, 100);
        for (; n < nfirst + nlater; n++) /* few distinct ends: many ties */
            all[n] = (struct backfill_release){fx_rng_range(&rng, 0, 40), n + 1, NULL};
        /* Shuffle the ids, so that ties are not in the order added. */
        for (size_t k = n; k > 1; k--) {
            size_t x = (size_t)fx_rng_range(&rng, 0, (int64_t)k - 1);
            uint64_t t = all[k - 1].job;
            all[k - 1].job = all[x].job;
            all[x].job = t;
        }
        if (fx_rng_range(&rng, 0, 1))
            assert_int_equal(backfill_releases_reserve(&rs, nfirst), 0);
        for (size_t k = 0; k < nfirst; k++)
            assert_int_equal(backfill_releases_add(&rs, &all[k]), 0);
        int err = 0;
        size_t read = (size_t)fx_rng_range(&rng, 0, (int64_t)nfirst);
        for (size_t k = 0; k < read; k++)
            assert_non_null(backfill_releases_at(&rs, k, &err));
        for (size_t k = nfirst; k < n; k++) {
            assert_int_equal(backfill_releases_add(&rs, &all[k]), 0);
            if (fx_rng_range(&rng, 0, 3) == 0) /* a look-ahead between starts */
                assert_non_null(backfill_releases_at(&rs, 0, &err));
        }
        qsort(all, n, sizeof(all[0]), release_cmp);
        for (size_t k = 0; k < n; k++) {
            const struct backfill_release *r = backfill_releases_at(&rs, k, &err);
            assert_non_null(r);
            assert_int_equal(r->end_ms, all[k].end_ms);
            assert_int_equal(r->job, all[k].job);
        }
        assert_null(backfill_releases_at(&rs, n, &err));
        assert_int_equal(err, 0);
        backfill_releases_release(&rs);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(short_jobs_that_end_before_the_reservation_start_now),
        cmocka_unit_test(backfill_off_marks_jobs_behind_a_blocked_job_blocked),
        cmocka_unit_test(head_starts_no_later_with_backfill_than_without),
        cmocka_unit_test(jobs_without_time_limit_use_the_default_limit),
        cmocka_unit_test(reservation_names_head_job_nodes_and_start),
        cmocka_unit_test(long_jobs_backfill_on_nodes_the_reservation_does_not_hold),
        cmocka_unit_test(lower_blocked_job_gets_no_second_reservation),
        cmocka_unit_test(one_reservation_per_pool),
        cmocka_unit_test(blocked_job_in_another_pool_does_not_block_this_one),
        cmocka_unit_test(backfill_off_any_pool_job_leaves_a_blocked_pool_alone),
        cmocka_unit_test(backfill_never_delays_reserved_job),
        cmocka_unit_test(reservation_counts_jobs_started_earlier_in_the_same_pass),
        cmocka_unit_test(backfill_never_delays_reserved_job_over_random_seeds),
        cmocka_unit_test(releases_come_in_end_order_however_added),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

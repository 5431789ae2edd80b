/* test_preempt.c - which running jobs a blocked job may evict, in what order
 * (least work lost first), with what grace, and how a preemptor's claim on the
 * victims' resources carries over between passes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "core/preempt.h"
#include "core/sched.h"
#include "fixture.h"

#define MIN_MS  (60 * 1000)
#define HOUR_MS (60 * MIN_MS)

enum { NORMAL = 0, HIGH = 1, LOW = 2, URGENT = 3, CRITICAL = 4 };
enum { A = 0, B = 1 };

/* One pool of `nodes` nodes with `gpus` H100s each; teams a and b (no
 * limits); classes normal (10), high (20, may preempt), low (0), urgent (30,
 * may not preempt), critical (40, may not preempt). */
static struct fx *cluster(uint32_t nodes, uint32_t gpus)
{
    struct fx *fx = fx_new();
    uint32_t pool = fx_pool(fx, "main");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, nodes, pool, h100, gpus, 81920, 64, 512 * 1024);
    fx_team(fx, "a", 1, -1);
    fx_team(fx, "b", 1, -1);
    fx_class(fx, "normal", 10, false);
    fx_class(fx, "high", 20, true);
    fx_class(fx, "low", 0, false);
    fx_class(fx, "urgent", 30, false);
    fx_class(fx, "critical", 40, false);
    return fx;
}

/* A job already running on GPU `gpu` (one whole GPU) since `start_ms`. */
static struct fx_job *running(struct fx *fx, uint64_t id, uint32_t team, uint32_t prio,
                              uint32_t gpu, int64_t start_ms, bool borrowed)
{
    struct sched_job *req = fx_job(fx, id);
    req->team = team;
    req->prio = prio;
    req->submit_ms = start_ms;
    struct fx_job *j = fx_get(fx, id);
    uint32_t node = SCHED_NONE;
    for (uint32_t n = 0; n < fx->c.nnodes; n++) {
        if (gpu >= fx->nodes[n].gpu_first && gpu < fx->nodes[n].gpu_first + fx->nodes[n].ngpus)
            node = n;
    }
    assert_int_not_equal(node, SCHED_NONE);
    j->parts[0] = (struct sched_node_part){node, (uint32_t)req->cpus, (uint64_t)req->mem_mib};
    j->shares[0] = (struct sched_share){gpu, SCHED_MILLI, fx->gpus[gpu].mem_mib};
    j->alloc = (struct sched_alloc){j->parts, 1, j->shares, 1};
    j->started_ms = start_ms;
    j->ends_ms = INT64_MAX;
    j->borrowed = borrowed;
    j->starts = 1;
    return j;
}

static struct sched_job *pending(struct fx *fx, uint64_t id, uint32_t team, uint32_t prio,
                                 int32_t gpus)
{
    struct sched_job *j = fx_job(fx, id);
    j->team = team;
    j->prio = prio;
    j->gpus = gpus;
    return j;
}

struct ckpt {
    uint64_t job;
    int64_t checkpoint_ms;
};

/* fx_pass, with checkpoint times for some running jobs (fx_pass has none). */
static int pass_with_checkpoints(struct fx *fx, int64_t now, const struct ckpt *ck, size_t nck)
{
    struct sched_queue q;
    struct sched_running_set rs;
    fx->now = now;
    fx_collect(fx, &q, &rs);
    for (size_t r = 0; r < fx->nrunning; r++) {
        for (size_t k = 0; k < nck; k++) {
            if (ck[k].job == fx->running[r].job->id)
                fx->running[r].checkpoint_ms = ck[k].checkpoint_ms;
        }
    }
    return sched_pass(&fx->c, &q, &rs, &fx->pol, &fx->st, now, &fx->res);
}

static void expect_victims(const struct fx *fx, const uint64_t *want, size_t n, uint64_t for_job)
{
    if (fx->res.npreempts != n) {
        fail_msg("%zu preemptions (first: job %llu), want %zu (first: job %llu)", fx->res.npreempts,
                 fx->res.npreempts ? (unsigned long long)fx->res.preempts[0].job : 0ULL, n,
                 n ? (unsigned long long)want[0] : 0ULL);
    }
    for (size_t k = 0; k < n; k++) {
        const struct sched_preempt *p = fx_preempt(fx, want[k]);
        if (!p)
            fail_msg("job %llu is not preempted (first victim: %llu)", (unsigned long long)want[k],
                     (unsigned long long)fx->res.preempts[0].job);
        assert_int_equal(p->for_job, for_job);
    }
}

/* ---- preempt_lost_gpu_ms and preempt_sort ---- */

static struct sched_running run_of(const struct sched_job *j, struct sched_share *shares,
                                   uint32_t nshares, int64_t start_ms, int64_t checkpoint_ms)
{
    return (struct sched_running){.job = j,
                                  .alloc = {NULL, 0, shares, nshares},
                                  .start_ms = start_ms,
                                  .checkpoint_ms = checkpoint_ms};
}

static void lost_work_is_gpu_ms_since_start(void **state)
{
    (void)state;
    struct sched_job j = {.id = 1, .gpus = 2};
    struct sched_share two[2] = {{0, SCHED_MILLI, 81920}, {1, SCHED_MILLI, 81920}};
    struct sched_running r = run_of(&j, two, 1, 1000, 0);
    assert_int_equal(preempt_lost_gpu_ms(&r, 11000), 10000);
    r.alloc.nshares = 2;
    assert_int_equal(preempt_lost_gpu_ms(&r, 11000), 20000);
    /* No rounding loss on spans that are not whole seconds. */
    assert_int_equal(preempt_lost_gpu_ms(&r, 1000 + 1234567), 2469134);
    /* Nothing lost at or before the start. */
    assert_int_equal(preempt_lost_gpu_ms(&r, 1000), 0);
    assert_int_equal(preempt_lost_gpu_ms(&r, 500), 0);
}

static void lost_work_of_fraction_and_cpu_only_jobs(void **state)
{
    (void)state;
    struct sched_job j = {.id = 1, .gpu_milli = 250};
    struct sched_share quarter = {0, 250, 20480};
    struct sched_running r = run_of(&j, &quarter, 1, 0, 0);
    assert_int_equal(preempt_lost_gpu_ms(&r, 10000), 2500);
    /* A CPU-only job still loses its work: it counts as one milli-GPU. */
    struct sched_job cpu = {.id = 2};
    struct sched_running c = run_of(&cpu, NULL, 0, 0, 0);
    assert_int_equal(preempt_lost_gpu_ms(&c, 10000), 10);
}

static void lost_work_counts_from_checkpoint_of_checkpointable_job(void **state)
{
    (void)state;
    struct sched_job j = {.id = 1, .gpus = 1, .checkpointable = true};
    struct sched_share one = {0, SCHED_MILLI, 81920};
    struct sched_running r = run_of(&j, &one, 1, 1000, 6000);
    assert_int_equal(preempt_lost_gpu_ms(&r, 11000), 5000);
    /* A checkpoint older than the (re)start does not count. */
    r.checkpoint_ms = 500;
    assert_int_equal(preempt_lost_gpu_ms(&r, 11000), 10000);
    /* A job that cannot resume loses everything since its start. */
    j.checkpointable = false;
    r.checkpoint_ms = 6000;
    assert_int_equal(preempt_lost_gpu_ms(&r, 11000), 10000);
}

static void sort_puts_least_lost_first_then_lower_id(void **state)
{
    (void)state;
    struct preempt_cand c[] = {
        {0, 5, 100}, {1, 2, 50}, {2, 9, 50}, {3, 1, 100}, {4, 7, 0},
    };
    assert_int_equal(preempt_sort(c, 5), 0);
    const uint64_t want[] = {7, 2, 9, 1, 5};
    for (size_t k = 0; k < 5; k++)
        assert_int_equal(c[k].job, want[k]);
    assert_int_equal(c[0].run, 4);
}

/* ---- who is evicted ---- */

static void younger_of_two_low_jobs_is_evicted(void **state)
{
    struct fx *fx = *state = cluster(1, 2);
    running(fx, 1, A, LOW, 0, 0, false);
    running(fx, 2, A, LOW, 1, 1000, false);
    pending(fx, 3, A, HIGH, 1);
    assert_int_equal(fx_pass(fx, 10000), 0);
    expect_victims(fx, (const uint64_t[]){2}, 1, 3);
    const struct sched_preempt *p = fx_preempt(fx, 2);
    assert_int_equal(p->lost_gpu_ms, 9000);
    assert_int_equal(p->why, SCHED_PREEMPT_PRIORITY);
}

static void recently_checkpointed_job_is_evicted_before_younger_one(void **state)
{
    struct fx *fx = *state = cluster(1, 2);
    running(fx, 1, A, LOW, 0, 0, false)->req.checkpointable = true;
    running(fx, 2, A, LOW, 1, 1000, false);
    pending(fx, 3, A, HIGH, 1);
    const struct ckpt ck[] = {{1, 9000}};
    assert_int_equal(pass_with_checkpoints(fx, 10000, ck, 1), 0);
    /* Job 1 loses 1 s of work since its checkpoint, job 2 loses 9 s. */
    expect_victims(fx, (const uint64_t[]){1}, 1, 3);
    assert_int_equal(fx_preempt(fx, 1)->lost_gpu_ms, 1000);
}

static void checkpoint_of_non_checkpointable_job_is_ignored(void **state)
{
    struct fx *fx = *state = cluster(1, 2);
    running(fx, 1, A, LOW, 0, 0, false); /* not checkpointable */
    running(fx, 2, A, LOW, 1, 1000, false);
    pending(fx, 3, A, HIGH, 1);
    const struct ckpt ck[] = {{1, 9000}};
    assert_int_equal(pass_with_checkpoints(fx, 10000, ck, 1), 0);
    expect_victims(fx, (const uint64_t[]){2}, 1, 3);
}

static void equal_loss_evicts_lower_job_id(void **state)
{
    struct fx *fx = *state = cluster(1, 2);
    running(fx, 7, A, LOW, 0, 0, false);
    running(fx, 3, A, LOW, 1, 0, false);
    pending(fx, 10, A, HIGH, 1);
    assert_int_equal(fx_pass(fx, 10000), 0);
    expect_victims(fx, (const uint64_t[]){3}, 1, 10);
}

static void only_lower_classes_are_evicted(void **state)
{
    struct fx *fx = *state = cluster(1, 2);
    running(fx, 1, A, HIGH, 0, 9000, false); /* same class, least work lost */
    running(fx, 2, A, LOW, 1, 0, false);
    pending(fx, 3, A, HIGH, 1);
    assert_int_equal(fx_pass(fx, 10000), 0);
    expect_victims(fx, (const uint64_t[]){2}, 1, 3);
}

static void equal_or_higher_classes_are_never_evicted(void **state)
{
    struct fx *fx = *state = cluster(1, 2);
    running(fx, 1, A, HIGH, 0, 9000, false);
    running(fx, 2, B, URGENT, 1, 9000, false);
    pending(fx, 3, A, HIGH, 1);
    assert_int_equal(fx_pass(fx, 10000), 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_int_not_equal(fx_wait(fx, 3)->reason, SCHED_REASON_PREEMPTING);
    assert_int_equal(fx->st.nclaims, 0);
}

static void class_without_may_preempt_never_evicts(void **state)
{
    struct fx *fx = *state = cluster(1, 2);
    running(fx, 1, A, LOW, 0, 0, false);
    running(fx, 2, A, NORMAL, 1, 0, false);
    pending(fx, 3, A, URGENT, 1); /* outranks both, but may not preempt */
    pending(fx, 4, B, NORMAL, 1); /* outranks job 1, but may not preempt */
    assert_int_equal(fx_pass(fx, 10000), 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_int_equal(fx->st.nclaims, 0);
    /* Still none when the job may preempt for another reason (a guarantee to
     * reclaim, but nothing borrowed): rank alone never evicts. */
    fx_quota(fx, A, 0, 0, 4000, -1);
    assert_int_equal(fx_pass(fx, 11000), 0);
    assert_int_equal(fx->res.npreempts, 0);
}

static void preemptor_evicts_only_as_many_as_it_needs(void **state)
{
    struct fx *fx = *state = cluster(1, 8);
    for (uint32_t k = 0; k < 8; k++)
        running(fx, 1 + k, A, LOW, k, 1000 * (int64_t)k, false);
    pending(fx, 20, B, HIGH, 3);
    assert_int_equal(fx_pass(fx, 10000), 0);
    /* The three youngest: 8, 7, 6. */
    expect_victims(fx, (const uint64_t[]){8, 7, 6}, 3, 20);
    assert_int_equal(fx_wait(fx, 20)->reason, SCHED_REASON_PREEMPTING);
}

static void jobs_on_nodes_the_preemptor_will_not_use_are_spared(void **state)
{
    struct fx *fx = *state = cluster(2, 2);
    running(fx, 1, A, LOW, 0, 0, false);    /* node 0 */
    running(fx, 2, A, LOW, 1, 0, false);    /* node 0 */
    running(fx, 3, A, LOW, 2, 9000, false); /* node 1: least work lost */
    running(fx, 4, A, URGENT, 3, 0, false); /* node 1: outranks the preemptor */
    pending(fx, 10, B, HIGH, 2);
    assert_int_equal(fx_pass(fx, 10000), 0);
    /* Evicting job 3 alone frees one GPU on node 1, next to job 4: no room.
     * The room is node 0, and job 3 must not be evicted for nothing. */
    expect_victims(fx, (const uint64_t[]){1, 2}, 2, 10);
    assert_null(fx_preempt(fx, 3));
}

/* ---- reclaim ---- */

static void reclaim_evicts_only_borrowed_work_of_other_teams(void **state)
{
    struct fx *fx = *state = cluster(1, 8);
    fx_quota(fx, A, 0, 0, 6000, -1);
    fx_quota(fx, B, 0, 0, 2000, -1);
    /* a holds 4 (under its guarantee of 6), two of them flagged borrowed from
     * an earlier time it was over; b holds 4 (over its guarantee of 2). The
     * jobs that lose least are a's own borrowed ones, then b's unborrowed. */
    running(fx, 1, A, NORMAL, 0, 0, false);
    running(fx, 2, A, NORMAL, 1, 0, false);
    running(fx, 3, A, NORMAL, 2, 8000, true);
    running(fx, 4, A, NORMAL, 3, 8000, true);
    running(fx, 5, B, NORMAL, 4, 7000, false);
    running(fx, 6, B, NORMAL, 5, 7000, false);
    running(fx, 7, B, NORMAL, 6, 2000, true);
    running(fx, 8, B, NORMAL, 7, 1000, true);
    pending(fx, 20, A, NORMAL, 1);
    assert_int_equal(fx_pass(fx, 10000), 0);
    expect_victims(fx, (const uint64_t[]){7}, 1, 20);
    assert_int_equal(fx_preempt(fx, 7)->why, SCHED_PREEMPT_RECLAIM);
}

static void reclaim_needs_room_under_own_guarantee(void **state)
{
    struct fx *fx = *state = cluster(1, 4);
    fx_quota(fx, A, 0, 0, 2000, -1);
    running(fx, 1, A, NORMAL, 0, 0, false);
    running(fx, 2, A, NORMAL, 1, 0, false);
    running(fx, 3, B, NORMAL, 2, 5000, true);
    running(fx, 4, B, NORMAL, 3, 5000, true);
    /* a already holds its guarantee: a third GPU would be borrowed too. */
    pending(fx, 20, A, NORMAL, 1);
    assert_int_equal(fx_pass(fx, 10000), 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_int_not_equal(fx_wait(fx, 20)->reason, SCHED_REASON_PREEMPTING);
}

/* ---- LAS ---- */

static void las_preempts_only_checkpointable_jobs(void **state)
{
    struct fx *fx = *state = cluster(1, 2);
    fx->pol.order = SCHED_ORDER_LAS;
    running(fx, 1, A, NORMAL, 0, 0, false)->req.checkpointable = true;
    running(fx, 2, A, NORMAL, 1, 5000, false); /* younger, but cannot resume */
    assert_int_equal(sched_state_add_attained(&fx->st, 1, 5 * HOUR_MS), 0); /* queue 1 */
    assert_int_equal(sched_state_add_attained(&fx->st, 2, 5 * HOUR_MS), 0); /* queue 1 */
    pending(fx, 3, B, NORMAL, 1);                                           /* queue 0 */
    assert_int_equal(fx_pass(fx, 10000), 0);
    expect_victims(fx, (const uint64_t[]){1}, 1, 3);
    assert_int_equal(fx_preempt(fx, 1)->why, SCHED_PREEMPT_LAS);
}

static void las_without_checkpointable_jobs_preempts_nothing(void **state)
{
    struct fx *fx = *state = cluster(1, 2);
    fx->pol.order = SCHED_ORDER_LAS;
    running(fx, 1, A, NORMAL, 0, 0, false);
    running(fx, 2, A, NORMAL, 1, 5000, false);
    assert_int_equal(sched_state_add_attained(&fx->st, 1, 20 * HOUR_MS), 0);
    assert_int_equal(sched_state_add_attained(&fx->st, 2, 20 * HOUR_MS), 0);
    pending(fx, 3, B, NORMAL, 1);
    assert_int_equal(fx_pass(fx, 10000), 0);
    assert_int_equal(fx->res.npreempts, 0);
}

static void las_does_not_preempt_job_in_same_queue(void **state)
{
    struct fx *fx = *state = cluster(1, 2);
    fx->pol.order = SCHED_ORDER_LAS;
    running(fx, 1, A, NORMAL, 0, 0, false)->req.checkpointable = true;
    running(fx, 2, A, NORMAL, 1, 0, false)->req.checkpointable = true;
    /* 10 s on one GPU each: still in queue 0 with the pending job. */
    pending(fx, 3, B, NORMAL, 1);
    assert_int_equal(fx_pass(fx, 10000), 0);
    assert_int_equal(fx->res.npreempts, 0);
}

/* A pass says when a running job crosses its next threshold while a waiting
 * job could then evict it (sched_result.las_crossing_ms), to the ms: a pass
 * just before finds it still in queue 0, a pass then evicts it. */
static void las_crossing_is_when_the_next_pass_evicts(void **state)
{
    struct fx *fx = *state = cluster(1, 2);
    fx->pol.order = SCHED_ORDER_LAS;
    running(fx, 1, A, NORMAL, 0, 0, false)->req.checkpointable = true;
    running(fx, 2, A, NORMAL, 1, 0, false); /* not checkpointable: never a victim */
    assert_int_equal(fx_pass(fx, 10000), 0);
    assert_true(fx->res.las_crossing_ms == INT64_MAX); /* nobody waits */

    pending(fx, 3, B, NORMAL, 1);
    assert_int_equal(fx_pass(fx, 20000), 0);
    /* One GPU from 0: 4 GPU-hours of service at 4 hours. */
    assert_true(fx->res.las_crossing_ms == 4 * HOUR_MS);
    assert_int_equal(fx_pass(fx, 4 * HOUR_MS - 1), 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_true(fx->res.las_crossing_ms == 4 * HOUR_MS);
    assert_int_equal(fx_pass(fx, 4 * HOUR_MS), 0);
    expect_victims(fx, (const uint64_t[]){1}, 1, 3);

    /* Without LAS there is nothing to wake for. */
    fx->pol.order = SCHED_ORDER_FIFO;
    assert_int_equal(fx_pass(fx, 4 * HOUR_MS + 1), 0);
    assert_true(fx->res.las_crossing_ms == INT64_MAX);
}

/* A waiting job smaller than the running one could not evict it (LAS never
 * evicts a larger job): its crossing is no reason for a pass. */
static void las_crossing_needs_a_large_enough_waiter(void **state)
{
    struct fx *fx = *state = cluster(1, 2);
    fx->pol.order = SCHED_ORDER_LAS;
    running(fx, 1, A, NORMAL, 0, 0, false)->req.checkpointable = true;
    running(fx, 2, A, NORMAL, 1, 0, false);
    pending(fx, 3, B, NORMAL, 0)->gpu_milli = 500;
    assert_int_equal(fx_pass(fx, 10000), 0);
    assert_true(fx->res.las_crossing_ms == INT64_MAX);
}

/* With las_evict_larger, the smaller waiter's crossing wakes the loop: at the
 * time job 1 reaches 4 GPU-hours on its one GPU. */
static void las_crossing_with_evict_larger_any_waiter_will_do(void **state)
{
    struct fx *fx = *state = cluster(1, 2);
    fx->pol.order = SCHED_ORDER_LAS;
    fx->pol.las_evict_larger = true;
    running(fx, 1, A, NORMAL, 0, 0, false)->req.checkpointable = true;
    running(fx, 2, A, NORMAL, 1, 0, false);
    pending(fx, 3, B, NORMAL, 0)->gpu_milli = 500;
    assert_int_equal(fx_pass(fx, 10000), 0);
    assert_int_equal(fx->res.las_crossing_ms, 4 * HOUR_MS);
}

/* ---- LAS within each team (the default policy) ---- */

/* Teams a and b each run a checkpointable job in LAS queue 1 on a full
 * node; b's lost less work, so cluster-wide LAS would take it. Team a's new
 * job waits. Returns the victim of one pass under `order`. */
static uint64_t las_victim_for_team_a(struct fx *fx, enum sched_order order)
{
    fx->pol.order = order;
    running(fx, 1, A, NORMAL, 0, 0, false)->req.checkpointable = true;
    running(fx, 2, B, NORMAL, 1, 5000, false)->req.checkpointable = true;
    assert_int_equal(sched_state_add_attained(&fx->st, 1, 5 * HOUR_MS), 0);
    assert_int_equal(sched_state_add_attained(&fx->st, 2, 5 * HOUR_MS), 0);
    pending(fx, 3, A, NORMAL, 1);
    assert_int_equal(fx_pass(fx, 10000), 0);
    assert_int_equal(fx->res.npreempts, 1);
    assert_int_equal(fx->res.preempts[0].why, SCHED_PREEMPT_LAS);
    assert_int_equal(fx->res.preempts[0].for_job, 3);
    return fx->res.preempts[0].job;
}

static void within_team_las_evicts_own_teams_more_served_job(void **state)
{
    struct fx *fx = *state = cluster(1, 2);
    assert_int_equal(fx->pol.within, SCHED_WITHIN_LAS);
    assert_int_equal(las_victim_for_team_a(fx, SCHED_ORDER_FAIRSHARE), 1);
    fx_free(fx);
    *state = fx = cluster(1, 2);
    assert_int_equal(las_victim_for_team_a(fx, SCHED_ORDER_LAS), 2);
}

static void within_team_las_never_evicts_another_teams_job(void **state)
{
    struct fx *fx = *state = cluster(1, 1);
    running(fx, 2, B, NORMAL, 0, 0, false)->req.checkpointable = true;
    assert_int_equal(sched_state_add_attained(&fx->st, 2, 50 * HOUR_MS), 0); /* queue 2 */
    pending(fx, 3, A, NORMAL, 1);
    assert_int_equal(fx_pass(fx, 10000), 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_int_equal(fx_wait(fx, 3)->reason, SCHED_REASON_NO_GPU);
    /* Nor one of its own that cannot resume. */
    fx_finish(fx, 2);
    running(fx, 4, A, NORMAL, 0, 0, false);
    assert_int_equal(sched_state_add_attained(&fx->st, 4, 50 * HOUR_MS), 0);
    assert_int_equal(fx_pass(fx, 20000), 0);
    assert_int_equal(fx->res.npreempts, 0);
}

static void las_never_evicts_a_job_larger_than_the_one_it_admits(void **state)
{
    struct fx *fx = *state = cluster(1, 2);
    struct sched_job *big = pending(fx, 1, A, NORMAL, 2);
    big->checkpointable = true;
    assert_int_equal(fx_step(fx, 0), 0);
    assert_non_null(fx_start(fx, 1));
    assert_int_equal(sched_state_add_attained(&fx->st, 1, 5 * HOUR_MS), 0); /* queue 1 */
    /* A one-GPU job would strand the other GPU: it waits. */
    pending(fx, 2, A, NORMAL, 1);
    assert_int_equal(fx_pass(fx, 10000), 0);
    assert_int_equal(fx->res.npreempts, 0);
    /* A job as large may take its place. */
    fx_get(fx, 2)->req.gpus = 2;
    assert_int_equal(fx_pass(fx, 20000), 0);
    expect_victims(fx, (const uint64_t[]){1}, 1, 2);
    assert_int_equal(fx_preempt(fx, 1)->why, SCHED_PREEMPT_LAS);
}

/* las_evict_larger lifts that rule: the one-GPU job evicts the two-GPU one
 * once that one is in queue 1, not while both are in queue 0. */
static void las_evict_larger_lets_a_small_job_evict_a_larger_one(void **state)
{
    struct fx *fx = *state = cluster(1, 2);
    fx->pol.las_evict_larger = true;
    struct sched_job *big = pending(fx, 1, A, NORMAL, 2);
    big->checkpointable = true;
    assert_int_equal(fx_step(fx, 0), 0);
    assert_non_null(fx_start(fx, 1));
    pending(fx, 2, A, NORMAL, 1);
    assert_int_equal(fx_pass(fx, 10000), 0); /* job 1 in queue 0: no LAS victim */
    assert_int_equal(fx->res.npreempts, 0);
    assert_int_equal(sched_state_add_attained(&fx->st, 1, 5 * HOUR_MS), 0); /* queue 1 */
    assert_int_equal(fx_pass(fx, 20000), 0);
    expect_victims(fx, (const uint64_t[]){1}, 1, 2);
    assert_int_equal(fx_preempt(fx, 1)->why, SCHED_PREEMPT_LAS);
}

/* ---- grace and claims ---- */

static void grace_is_the_policys_preempt_grace(void **state)
{
    struct fx *fx = *state = cluster(1, 1);
    fx->pol.preempt_grace_ms = 12345;
    running(fx, 1, A, LOW, 0, 0, false);
    pending(fx, 2, A, HIGH, 1);
    assert_int_equal(fx_step(fx, 10000), 0);
    expect_victims(fx, (const uint64_t[]){1}, 1, 2);
    assert_int_equal(fx_preempt(fx, 1)->grace_ms, 12345);
    assert_int_equal(fx_wait(fx, 2)->est_start_ms, 10000 + 12345);
    /* The victim keeps its GPU until the grace is over, then the preemptor starts. */
    assert_int_equal(fx_step(fx, 10000 + 12344), 0);
    assert_true(fx_running(fx, 1));
    assert_false(fx_running(fx, 2));
    assert_int_equal(fx_step(fx, 10000 + 12345), 0);
    assert_false(fx_running(fx, 1));
    assert_non_null(fx_start(fx, 2));
    assert_int_equal(fx_get(fx, 1)->preemptions, 1);
}

static void preemptor_waits_for_its_victims_then_gets_their_gpus_first(void **state)
{
    struct fx *fx = *state = cluster(1, 4);
    int64_t grace = fx->pol.preempt_grace_ms;
    for (uint32_t k = 0; k < 4; k++)
        running(fx, 1 + k, A, LOW, k, 1000 * (int64_t)k, false);
    pending(fx, 10, B, HIGH, 1);
    assert_int_equal(fx_step(fx, 10000), 0);
    expect_victims(fx, (const uint64_t[]){4}, 1, 10);
    assert_int_equal(fx->st.nclaims, 1);
    assert_int_equal(fx->st.claims[0].job, 10);
    assert_int_equal(fx->st.claims[0].nvictims, 1);
    assert_int_equal(fx->st.claims[0].victims[0], 4);
    assert_int_equal(fx->st.claims[0].since_ms, 10000);

    /* Within the grace: the victim is still leaving (preempting = true). The
     * preemptor evicts nothing more and keeps waiting; the claim carries on.
     * A job of a higher class arrives meanwhile. */
    fx->now = 11000;
    pending(fx, 20, A, CRITICAL, 1);
    assert_int_equal(fx_step(fx, 11000), 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_int_equal(fx->res.nstarts, 0);
    assert_int_equal(fx_wait(fx, 10)->reason, SCHED_REASON_PREEMPTING);
    assert_int_equal(fx->st.nclaims, 1);
    assert_int_equal(fx->st.claims[0].job, 10);
    assert_int_equal(fx->st.claims[0].since_ms, 10000);
    assert_int_equal(fx_get(fx, 4)->preemptions, 0);
    assert_true(fx_running(fx, 4));

    /* The victim has gone: its GPU goes to the preemptor, not to the
     * higher-ranked newcomer, and the claim is settled. */
    assert_int_equal(fx_step(fx, 10000 + grace), 0);
    assert_int_equal(fx_get(fx, 4)->preemptions, 1);
    assert_non_null(fx_start(fx, 10));
    assert_null(fx_start(fx, 20));
    assert_int_equal(fx->res.npreempts, 0);
    assert_int_equal(fx->st.nclaims, 0);
}

static void preemption_off_evicts_nothing(void **state)
{
    struct fx *fx = *state = cluster(1, 4);
    fx->pol.preemption = false;
    fx_quota(fx, B, 0, 0, 2000, -1);
    running(fx, 1, A, LOW, 0, 0, true);
    running(fx, 2, A, LOW, 1, 0, true);
    running(fx, 3, A, LOW, 2, 0, true);
    running(fx, 4, A, LOW, 3, 0, true);
    pending(fx, 10, A, HIGH, 1);   /* would preempt by priority */
    pending(fx, 11, B, NORMAL, 1); /* would reclaim its guarantee */
    fx->pol.order = SCHED_ORDER_PRIORITY;
    assert_int_equal(fx_pass(fx, 10000), 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_int_equal(fx->st.nclaims, 0);
    assert_int_not_equal(fx_wait(fx, 10)->reason, SCHED_REASON_PREEMPTING);
    assert_int_not_equal(fx_wait(fx, 11)->reason, SCHED_REASON_PREEMPTING);
    /* The same under LAS with checkpointable, well-served jobs. */
    fx->pol.order = SCHED_ORDER_LAS;
    for (uint64_t id = 1; id <= 4; id++) {
        fx_get(fx, id)->req.checkpointable = true;
        assert_int_equal(sched_state_add_attained(&fx->st, id, 20 * HOUR_MS), 0);
    }
    assert_int_equal(fx_pass(fx, 11000), 0);
    assert_int_equal(fx->res.npreempts, 0);
    /* And on again: the same inputs do preempt. */
    fx->pol.preemption = true;
    fx->pol.order = SCHED_ORDER_PRIORITY;
    assert_int_equal(fx_pass(fx, 12000), 0);
    assert_true(fx->res.npreempts > 0);
}

/* A gang planned onto free GPUs of one node plus a victim's GPUs on another:
 * while the victims leave, the free GPUs are held for it too, so that a job
 * arriving meanwhile cannot take them and leave the gang short (it would then
 * preempt again, and again). */
static void preemptor_keeps_the_free_part_of_its_room_while_victims_leave(void **state)
{
    struct fx *fx = *state = cluster(2, 8);
    for (uint32_t g = 0; g < 4; g++)
        running(fx, 1 + g, 0, URGENT, g, 0, false); /* node0: 4 busy (not evictable), 4 free */
    for (uint32_t g = 8; g < 16; g++)
        running(fx, 3 + g, 0, LOW, g, 0, false); /* node1: 8 low jobs */
    struct sched_job *gang = pending(fx, 100, 1, HIGH, 12);
    gang->multi_node = true;
    assert_int_equal(fx_step(fx, 10000), 0);
    assert_int_equal(fx->res.npreempts, 8);
    assert_int_equal(fx_wait(fx, 100)->reason, SCHED_REASON_PREEMPTING);

    /* During the grace period a 4-GPU job arrives: node0's free GPUs are held. */
    pending(fx, 200, 0, NORMAL, 4);
    assert_int_equal(fx_step(fx, 20000), 0);
    assert_null(fx_start(fx, 200));
    assert_int_equal(fx->res.npreempts, 0);

    /* The victims are gone: the gang starts on both nodes, and nothing more is evicted. */
    assert_int_equal(fx_step(fx, 10000 + fx->pol.preempt_grace_ms), 0);
    const struct sched_start *s = fx_start(fx, 100);
    assert_non_null(s);
    assert_int_equal(s->alloc.nshares, 12);
    assert_int_equal(s->alloc.nnodes, 2);
    assert_int_equal(fx->res.npreempts, 0);
}

#define T(name) cmocka_unit_test_teardown(name, fx_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(preemptor_keeps_the_free_part_of_its_room_while_victims_leave),
        cmocka_unit_test(lost_work_is_gpu_ms_since_start),
        cmocka_unit_test(lost_work_of_fraction_and_cpu_only_jobs),
        cmocka_unit_test(lost_work_counts_from_checkpoint_of_checkpointable_job),
        cmocka_unit_test(sort_puts_least_lost_first_then_lower_id),
        T(younger_of_two_low_jobs_is_evicted),
        T(recently_checkpointed_job_is_evicted_before_younger_one),
        T(checkpoint_of_non_checkpointable_job_is_ignored),
        T(equal_loss_evicts_lower_job_id),
        T(only_lower_classes_are_evicted),
        T(equal_or_higher_classes_are_never_evicted),
        T(class_without_may_preempt_never_evicts),
        T(preemptor_evicts_only_as_many_as_it_needs),
        T(jobs_on_nodes_the_preemptor_will_not_use_are_spared),
        T(reclaim_evicts_only_borrowed_work_of_other_teams),
        T(reclaim_needs_room_under_own_guarantee),
        T(las_preempts_only_checkpointable_jobs),
        T(las_without_checkpointable_jobs_preempts_nothing),
        T(las_does_not_preempt_job_in_same_queue),
        T(las_crossing_is_when_the_next_pass_evicts),
        T(las_crossing_needs_a_large_enough_waiter),
        T(within_team_las_evicts_own_teams_more_served_job),
        T(within_team_las_never_evicts_another_teams_job),
        T(las_never_evicts_a_job_larger_than_the_one_it_admits),
        T(las_evict_larger_lets_a_small_job_evict_a_larger_one),
        T(las_crossing_with_evict_larger_any_waiter_will_do),
        T(grace_is_the_policys_preempt_grace),
        T(preemptor_waits_for_its_victims_then_gets_their_gpus_first),
        T(preemption_off_evicts_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

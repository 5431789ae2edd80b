/* test_migrate.c - moving running jobs to gather fragmented free GPUs onto one
 * node (migrate.h): when a job may move, where it goes, how the moved job and
 * the job it moved for hold their places until they start, and when nothing
 * moves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/sched.h"
#include "fixture.h"

enum { NORMAL = 0, HIGH = 1 };
enum { A = 0, B = 1 };

/* One pool of `nodes` nodes of `gpus` GPUs each; teams a and b; classes
 * normal (10) and high (20, may not preempt). Priority order, so that only
 * moves can evict anything. */
static struct fx *cluster(uint32_t nodes, uint32_t gpus)
{
    struct fx *fx = fx_new();
    uint32_t pool = fx_pool(fx, "main");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, nodes, pool, h100, gpus, 81920, 64, 512 * 1024);
    fx_team(fx, "a", 1, -1);
    fx_team(fx, "b", 1, -1);
    fx_class(fx, "normal", 10, false);
    fx_class(fx, "high", 20, false);
    fx->pol.order = SCHED_ORDER_PRIORITY;
    return fx;
}

/* A checkpointable (or not) job running on `ngpus` GPUs of node `node`, from
 * its GPU `first` on. */
static struct fx_job *running(struct fx *fx, uint64_t id, uint32_t prio, uint32_t node,
                              uint32_t first, int32_t ngpus, bool ckpt)
{
    struct sched_job *req = fx_job(fx, id);
    req->team = A;
    req->prio = prio;
    req->gpus = ngpus;
    req->checkpointable = ckpt;
    struct fx_job *j = fx_get(fx, id);
    j->parts[0] = (struct sched_node_part){node, (uint32_t)req->cpus, (uint64_t)req->mem_mib};
    for (int32_t k = 0; k < ngpus; k++) {
        uint32_t gpu = fx->nodes[node].gpu_first + first + (uint32_t)k;
        j->shares[k] = (struct sched_share){gpu, SCHED_MILLI, fx->gpus[gpu].mem_mib};
    }
    j->alloc = (struct sched_alloc){j->parts, 1, j->shares, (uint32_t)ngpus};
    j->started_ms = 0;
    j->ends_ms = INT64_MAX;
    j->starts = 1;
    return j;
}

static struct sched_job *pending(struct fx *fx, uint64_t id, uint32_t prio, int32_t gpus)
{
    struct sched_job *j = fx_job(fx, id);
    j->team = B;
    j->prio = prio;
    j->gpus = gpus;
    return j;
}

/* Two nodes of 4 GPUs: job 1 (class prio) on `g0` GPUs of node 0, job 2 on
 * `g1` of node 1, and job 10 waiting for 4 GPUs, the case most tests vary. */
static struct fx *fragmented(uint32_t prio, int32_t g0, int32_t g1, bool ckpt)
{
    struct fx *fx = cluster(2, 4);
    running(fx, 1, prio, 0, 0, g0, ckpt);
    running(fx, 2, prio, 1, 0, g1, ckpt);
    pending(fx, 10, NORMAL, 4);
    return fx;
}

static const struct sched_claim *claim_of(const struct fx *fx, uint64_t job)
{
    for (size_t k = 0; k < fx->st.nclaims; k++) {
        if (fx->st.claims[k].job == job)
            return &fx->st.claims[k];
    }
    return NULL;
}

/* Two nodes of 4 GPUs, a one-GPU job on each: 6 GPUs free, but no node has 4.
 * The 4-GPU job moves the job on node 0 (the lower index of two equal
 * choices) to node 1, claims node 0, and both start once it has left. */
static void a_job_moves_so_that_one_node_has_room(void **state)
{
    struct fx *fx = *state = fragmented(NORMAL, 1, 1, true);
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx->res.nstarts, 0);
    assert_int_equal(fx->res.npreempts, 1);
    const struct sched_preempt *pr = fx_preempt(fx, 1);
    assert_non_null(pr);
    assert_int_equal(pr->for_job, 10);
    assert_int_equal(pr->why, SCHED_PREEMPT_MIGRATE);
    assert_int_equal(pr->grace_ms, fx->pol.preempt_grace_ms);
    assert_int_equal(fx_wait(fx, 10)->reason, SCHED_REASON_PREEMPTING);
    const struct sched_claim *cj = claim_of(fx, 10), *cm = claim_of(fx, 1);
    assert_non_null(cj);
    assert_int_equal(cj->nvictims, 1);
    assert_int_equal(cj->victims[0], 1);
    assert_int_equal(cj->nnodes, 1);
    assert_int_equal(cj->nodes[0], 0);
    assert_non_null(cm); /* the moved job's new place */
    assert_int_equal(cm->nvictims, 0);
    assert_int_equal(cm->nnodes, 1);
    assert_int_equal(cm->nodes[0], 1);
    /* Not a reservation of a waiting job: the moved one still runs. */
    for (size_t k = 0; k < fx->res.nreserves; k++)
        assert_int_not_equal(fx->res.reserves[k].job, 1);

    /* While it leaves, a 3-GPU job arrives that would fit node 1's three free
     * GPUs: they are held for the moved job, so it waits. */
    pending(fx, 11, NORMAL, 3);
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_int_equal(fx->res.nstarts, 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_int_equal(fx_wait(fx, 10)->reason, SCHED_REASON_PREEMPTING);
    assert_int_equal(fx_wait(fx, 11)->reason, SCHED_REASON_RESERVED);
    assert_true(fx_running(fx, 1));

    /* It has left: it restarts on node 1, and the 4-GPU job takes node 0. */
    assert_int_equal(fx_step(fx, 1000 + fx->pol.preempt_grace_ms), 0);
    assert_int_equal(fx_get(fx, 1)->preemptions, 1);
    assert_non_null(fx_start(fx, 1));
    assert_non_null(fx_start(fx, 10));
    assert_int_equal(fx_start_node(fx, 1), 1);
    assert_int_equal(fx_start_node(fx, 10), 0);
    assert_null(fx_start(fx, 11));
    assert_int_equal(fx->st.nclaims, 0);
}

/* A job that cannot resume where it stopped is never moved. */
static void a_job_that_is_not_checkpointable_stays(void **state)
{
    struct fx *fx = *state = fragmented(NORMAL, 1, 1, false);
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_int_not_equal(fx_wait(fx, 10)->reason, SCHED_REASON_PREEMPTING);
}

/* The moved jobs must all fit elsewhere at once: a 2-GPU job cannot go to a
 * node with one GPU free. */
static void nothing_moves_unless_it_fits_elsewhere(void **state)
{
    struct fx *fx = *state = fragmented(NORMAL, 2, 3, true);
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_int_equal(fx->st.nclaims, 0);
}

/* A job of a higher class is not moved for a lower one; one of the same or a
 * lower class is. */
static void a_higher_class_is_not_moved(void **state)
{
    struct fx *fx = *state = fragmented(HIGH, 1, 1, true);
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_int_equal(fx->res.npreempts, 0);

    fx_get(fx, 2)->req.prio = NORMAL;
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_int_equal(fx->res.npreempts, 1);
    assert_non_null(fx_preempt(fx, 2)); /* node 1's job moves to node 0 */
    assert_int_equal(claim_of(fx, 10)->nodes[0], 1);
    assert_int_equal(claim_of(fx, 2)->nodes[0], 0);
}

/* With the policy's migrate off, or preemption off, nothing moves. */
static void migrate_off_moves_nothing(void **state)
{
    struct fx *fx = *state = fragmented(NORMAL, 1, 1, true);
    fx->pol.migrate = false;
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_int_equal(fx->res.npreempts, 0);
    fx->pol.migrate = true;
    fx->pol.preemption = false;
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_int_equal(fx->res.npreempts, 0);
}

/* Waiting jobs that fit the free GPUs take them first; only what is left free
 * after every job's turn is gathered. Here a 1-GPU job (ranked after the
 * 4-GPU one) starts, and the four GPUs still free across the two nodes are
 * gathered for the 4-GPU job. */
static void free_gpus_go_to_jobs_that_fit_before_anything_moves(void **state)
{
    struct fx *fx = *state = fragmented(NORMAL, 1, 2, true);
    fx->now = 500;
    pending(fx, 11, NORMAL, 1);
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_non_null(fx_start(fx, 11));
    /* Binpack put the 1-GPU job on node 1 (two free): node 0 has three free
     * and job 1 moves to node 1's last free GPU. */
    assert_int_equal(fx_start_node(fx, 11), 1);
    assert_int_equal(fx->res.npreempts, 1);
    assert_non_null(fx_preempt(fx, 1));
    assert_int_equal(claim_of(fx, 10)->nodes[0], 0);
    assert_int_equal(claim_of(fx, 1)->nodes[0], 1);
}

/* A job that fits some node as it is never moves anything, nor does one whose
 * size the free GPUs cannot cover, nor a gang. */
static void only_fragmentation_moves_jobs(void **state)
{
    struct fx *fx = *state = cluster(2, 4);
    running(fx, 1, NORMAL, 0, 0, 1, true);
    running(fx, 2, NORMAL, 1, 0, 2, true);
    /* 5 GPUs free, at most 3 on a node: 6 GPUs is more than is free. */
    pending(fx, 10, NORMAL, 6);
    fx_get(fx, 10)->req.multi_node = true;
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_null(fx_start(fx, 10));
    assert_int_equal(fx->res.npreempts, 0);
    fx_get(fx, 10)->req.gpus = 4; /* a gang of 4 fits on two nodes: it starts */
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_non_null(fx_start(fx, 10));
    assert_int_equal(fx->res.npreempts, 0);
}

/* Under fair share, a team above the mean share moves nothing; one at or
 * below it does. Team a holds two GPUs, team b one (mean 1.5). */
static void under_fair_share_only_a_team_not_ahead_moves_jobs(void **state)
{
    struct fx *fx = *state = cluster(2, 4);
    fx->pol.order = SCHED_ORDER_FAIRSHARE;
    fx->pol.within = SCHED_WITHIN_SUBMIT;
    running(fx, 1, NORMAL, 0, 0, 1, true);
    running(fx, 2, NORMAL, 1, 0, 1, true);
    running(fx, 3, NORMAL, 1, 1, 1, true)->req.team = B;
    pending(fx, 10, NORMAL, 4)->team = A;
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_int_not_equal(fx_wait(fx, 10)->reason, SCHED_REASON_PREEMPTING);

    fx->now = 500;
    pending(fx, 11, NORMAL, 4); /* team b */
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_int_equal(fx->res.npreempts, 1);
    assert_int_equal(fx_preempt(fx, 1)->for_job, 11); /* node 0's job, to node 1 */
    assert_int_equal(fx_wait(fx, 11)->reason, SCHED_REASON_PREEMPTING);
    assert_int_not_equal(fx_wait(fx, 10)->reason, SCHED_REASON_PREEMPTING);
}

/* The gate compares a team with the teams it competes with: in a pool of its
 * own, a team far ahead of a team in another pool still moves its jobs. */
static void under_fair_share_a_team_alone_in_its_pool_moves_jobs(void **state)
{
    struct fx *fx = *state = fx_new();
    uint32_t own = fx_pool(fx, "own"), other = fx_pool(fx, "other");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, 2, own, h100, 4, 81920, 64, 512 * 1024);
    fx_nodes(fx, 1, other, h100, 4, 81920, 64, 512 * 1024);
    fx_team(fx, "a", 1, -1);
    fx_team(fx, "b", 1, -1);
    fx_class(fx, "normal", 10, false);
    fx->pol.order = SCHED_ORDER_FAIRSHARE;
    fx->pol.within = SCHED_WITHIN_SUBMIT;
    running(fx, 1, NORMAL, 0, 0, 2, true)->req.pool = own; /* team a: 4 GPUs of 12 */
    running(fx, 2, NORMAL, 1, 0, 2, true)->req.pool = own;
    struct fx_job *b = running(fx, 3, NORMAL, 2, 0, 1, true); /* team b: 1 */
    b->req.team = B;
    b->req.pool = other;
    struct sched_job *j = pending(fx, 10, NORMAL, 4);
    j->team = A;
    j->pool = own;
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_int_equal(fx->res.npreempts, 1);
    assert_int_equal(fx_wait(fx, 10)->reason, SCHED_REASON_PREEMPTING);

    /* The same jobs in one shared pool: team a is ahead of b, and waits. */
    fx_teardown(state);
    fx = *state = cluster(3, 4);
    fx->pol.order = SCHED_ORDER_FAIRSHARE;
    fx->pol.within = SCHED_WITHIN_SUBMIT;
    running(fx, 1, NORMAL, 0, 0, 2, true);
    running(fx, 2, NORMAL, 1, 0, 2, true);
    running(fx, 3, NORMAL, 2, 0, 1, true)->req.team = B;
    running(fx, 4, NORMAL, 2, 1, 3, false); /* node 2 full: the move must be on 0 or 1 */
    pending(fx, 10, NORMAL, 4)->team = A;
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_int_not_equal(fx_wait(fx, 10)->reason, SCHED_REASON_PREEMPTING);
}

#define T(name) cmocka_unit_test_teardown(name, fx_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(a_job_moves_so_that_one_node_has_room),
        T(a_job_that_is_not_checkpointable_stays),
        T(nothing_moves_unless_it_fits_elsewhere),
        T(a_higher_class_is_not_moved),
        T(migrate_off_moves_nothing),
        T(free_gpus_go_to_jobs_that_fit_before_anything_moves),
        T(only_fragmentation_moves_jobs),
        T(under_fair_share_only_a_team_not_ahead_moves_jobs),
        T(under_fair_share_a_team_alone_in_its_pool_moves_jobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

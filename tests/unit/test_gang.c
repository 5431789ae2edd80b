/* test_gang.c - Slurm's job shape in the core: exact-N gangs (--nodes),
 * exclusive nodes (--exclusive), a node's whole memory (--mem=0) and node
 * features (--constraint), through placement, backfill, preemption,
 * migration and the reasons a job waits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "core/explain.h"
#include "core/sched.h"
#include "fixture.h"

#define MIN_MS   (60 * 1000)
#define HOUR_MS  (60 * MIN_MS)
#define NODE_MEM (512 * 1024)

enum { NORMAL = 0, HIGH = 1, LOW = 2 };
enum { FEAT_IB = 1u << 0, FEAT_NVME = 1u << 1, FEAT_BIGMEM = 1u << 2 };

/* One pool of `nodes` nodes with `gpus` H100s each (64 CPUs, 512 GiB); one
 * team with unlimited borrowing; classes normal (10), high (20, may
 * preempt), low (0). */
static struct fx *cluster(uint32_t nodes, uint32_t gpus)
{
    struct fx *fx = fx_new();
    uint32_t pool = fx_pool(fx, "main");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, nodes, pool, h100, gpus, 81920, 64, NODE_MEM);
    fx_team(fx, "a", 1, -1);
    fx_class(fx, "normal", 10, false);
    fx_class(fx, "high", 20, true);
    fx_class(fx, "low", 0, false);
    return fx;
}

/* Job `id` running on the first `ngpus` GPUs of `node` since `start_ms`. */
static struct fx_job *running(struct fx *fx, uint64_t id, uint32_t prio, uint32_t node,
                              int32_t ngpus, int64_t start_ms)
{
    struct sched_job *req = fx_job(fx, id);
    req->prio = prio;
    req->gpus = ngpus;
    struct fx_job *j = fx_get(fx, id);
    j->parts[0] = (struct sched_node_part){node, (uint32_t)req->cpus, (uint64_t)req->mem_mib};
    for (int32_t k = 0; k < ngpus; k++) {
        uint32_t gpu = fx->nodes[node].gpu_first + (uint32_t)k;
        j->shares[k] = (struct sched_share){gpu, SCHED_MILLI, fx->gpus[gpu].mem_mib};
    }
    j->alloc = (struct sched_alloc){j->parts, 1, j->shares, (uint32_t)ngpus};
    j->started_ms = start_ms;
    j->ends_ms = INT64_MAX;
    j->starts = 1;
    return j;
}

/* An exact-N gang: `nodes` nodes, `gpus` GPUs in all. */
static struct sched_job *gang(struct fx *fx, uint64_t id, int32_t nodes, int32_t gpus)
{
    struct sched_job *j = fx_job(fx, id);
    j->nodes = nodes;
    j->multi_node = true;
    j->gpus = gpus;
    j->cpus = 2 * nodes;
    j->mem_mib = 2048 * nodes;
    return j;
}

static uint32_t shares_on(const struct fx *fx, const struct sched_alloc *a, uint32_t node)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < a->nshares; i++) {
        uint32_t g = a->shares[i].gpu;
        n +=
            g >= fx->nodes[node].gpu_first && g < fx->nodes[node].gpu_first + fx->nodes[node].ngpus;
    }
    return n;
}

static const char *sentence(const struct fx *fx, uint64_t id, char *buf, size_t size)
{
    const struct sched_wait *w = fx_wait(fx, id);
    assert_non_null(w);
    assert_true(explain_format(&fx->c, w, buf, size) > 0);
    return buf;
}

/* ---- exact-N gangs ---- */

/* sbatch --nodes=2 --gres=gpu:8 on three empty 8-GPU nodes: two distinct
 * nodes, 8 GPUs, half the CPUs and half the memory on each. */
static void exact_gang_takes_n_distinct_nodes_with_an_even_share(void **state)
{
    struct fx *fx = *state = cluster(3, 8);
    gang(fx, 1, 2, 16);
    assert_int_equal(fx_pass(fx, 0), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    assert_int_equal(s->alloc.nnodes, 2);
    assert_int_equal(s->alloc.nshares, 16);
    assert_int_not_equal(s->alloc.nodes[0].node, s->alloc.nodes[1].node);
    for (uint32_t p = 0; p < 2; p++) {
        assert_int_equal(shares_on(fx, &s->alloc, s->alloc.nodes[p].node), 8);
        assert_int_equal(s->alloc.nodes[p].cpus, 2);
        assert_int_equal(s->alloc.nodes[p].mem_mib, 2048);
    }
}

/* --nodes=2 --gpus-per-node=2 where one node could hold all four: Slurm
 * gives two nodes, so does the core. */
static void exact_gang_spreads_even_when_one_node_would_hold_it(void **state)
{
    struct fx *fx = *state = cluster(2, 8);
    gang(fx, 1, 2, 4);
    assert_int_equal(fx_pass(fx, 0), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    assert_int_equal(s->alloc.nnodes, 2);
    assert_int_equal(shares_on(fx, &s->alloc, 0), 2);
    assert_int_equal(shares_on(fx, &s->alloc, 1), 2);
}

/* Binpack takes the tightest nodes that hold a member, keeping the whole
 * node free for a large job. */
static void exact_gang_binpacks_onto_the_tightest_nodes(void **state)
{
    struct fx *fx = *state = cluster(3, 8);
    running(fx, 100, NORMAL, 1, 4, 0);
    running(fx, 101, NORMAL, 2, 4, 0);
    gang(fx, 1, 2, 8);
    assert_int_equal(fx_pass(fx, 0), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    assert_int_equal(shares_on(fx, &s->alloc, 0), 0);
    assert_int_equal(shares_on(fx, &s->alloc, 1), 4);
    assert_int_equal(shares_on(fx, &s->alloc, 2), 4);
}

/* A CPU-only gang over two nodes gets two nodes, no GPU. */
static void exact_gang_without_gpus_takes_n_nodes(void **state)
{
    struct fx *fx = *state = cluster(2, 8);
    gang(fx, 1, 2, 0);
    assert_int_equal(fx_pass(fx, 0), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    assert_int_equal(s->alloc.nnodes, 2);
    assert_int_equal(s->alloc.nshares, 0);
}

/* Two nodes, one with 4 GPUs busy: 12 GPUs are free but only one node has
 * 8; the gang waits and says so. */
static void exact_gang_waits_for_n_nodes_and_says_how_many_have_room(void **state)
{
    struct fx *fx = *state = cluster(2, 8);
    running(fx, 100, NORMAL, 1, 4, 0);
    gang(fx, 1, 2, 16);
    assert_int_equal(fx_pass(fx, 0), 0);
    assert_null(fx_start(fx, 1));
    const struct sched_wait *w = fx_wait(fx, 1);
    assert_int_equal(w->reason, SCHED_REASON_NODES);
    assert_false(explain_is_final(w->reason));
    char buf[200];
    assert_string_equal(sentence(fx, 1, buf, sizeof(buf)),
                        "not enough nodes with 8 free GPUs (need 2, 1 has them)");
}

/* Three nodes asked of a two-node cluster: it never runs. */
static void exact_gang_larger_than_the_cluster_is_final(void **state)
{
    struct fx *fx = *state = cluster(2, 8);
    gang(fx, 1, 3, 3);
    assert_int_equal(fx_pass(fx, 0), 0);
    const struct sched_wait *w = fx_wait(fx, 1);
    assert_int_equal(w->reason, SCHED_REASON_NODES_NEVER);
    assert_true(explain_is_final(w->reason));
    char buf[200];
    assert_string_equal(sentence(fx, 1, buf, sizeof(buf)),
                        "needs 3 nodes that can each hold 1 GPUs and its share of CPUs and "
                        "memory; 2 can");
}

/* 9 GPUs per node on 8-GPU nodes: final, with the count of nodes that can. */
static void exact_gang_with_more_gpus_per_node_than_any_node_is_final(void **state)
{
    struct fx *fx = *state = cluster(4, 8);
    gang(fx, 1, 2, 18);
    assert_int_equal(fx_pass(fx, 0), 0);
    const struct sched_wait *w = fx_wait(fx, 1);
    assert_int_equal(w->reason, SCHED_REASON_NODES_NEVER);
    assert_int_equal(w->nodes.have, 0);
}

/* Totals that do not divide by the node count, and shares of one GPU over
 * nodes, are invalid requests. */
static void exact_gang_that_cannot_be_spread_evenly_is_invalid(void **state)
{
    struct fx *fx = *state = cluster(2, 8);
    gang(fx, 1, 2, 3);
    struct sched_job *j = gang(fx, 2, 2, 0);
    j->gpu_milli = 500;
    j = gang(fx, 3, 2, 2);
    j->cpus = 3;
    assert_int_equal(fx_pass(fx, 0), 0);
    assert_int_equal(fx_wait(fx, 1)->reason, SCHED_REASON_BAD_SIZE);
    assert_string_equal(fx_wait(fx, 1)->field, "gpus must divide evenly over nodes");
    assert_int_equal(fx_wait(fx, 2)->reason, SCHED_REASON_BAD_SIZE);
    assert_int_equal(fx_wait(fx, 3)->reason, SCHED_REASON_BAD_SIZE);
    assert_string_equal(fx_wait(fx, 3)->field, "cpus must divide evenly over nodes");
}

/* Node 0 busy for an hour: the two-node gang reserves both nodes from then
 * on; a 30-minute job backfills onto node 1, a 2-hour one does not. */
static void backfill_reserves_for_an_exact_gang_and_fills_around_it(void **state)
{
    struct fx *fx = *state = cluster(2, 8);
    running(fx, 100, NORMAL, 0, 8, 0)->req.time_limit_ms = HOUR_MS;
    gang(fx, 1, 2, 16)->submit_ms = -10;
    struct sched_job *s = fx_job(fx, 2);
    s->time_limit_ms = 30 * MIN_MS;
    struct sched_job *l = fx_job(fx, 3);
    l->time_limit_ms = 2 * HOUR_MS;
    assert_int_equal(fx_pass(fx, 0), 0);
    assert_null(fx_start(fx, 1));
    assert_int_equal(fx_wait(fx, 1)->est_start_ms, HOUR_MS);
    assert_non_null(fx_start(fx, 2));
    assert_null(fx_start(fx, 3));
    assert_int_equal(fx_wait(fx, 3)->reason, SCHED_REASON_RESERVED);
}

/* A high-priority two-node gang evicts what frees two whole nodes, least
 * work lost first, and nothing on a third node it does not use. */
static void preemption_for_an_exact_gang_frees_n_nodes_only(void **state)
{
    struct fx *fx = *state = cluster(3, 8);
    running(fx, 100, LOW, 0, 8, 0);           /* oldest: most work lost */
    running(fx, 101, LOW, 1, 8, 50 * MIN_MS); /* recent */
    running(fx, 102, LOW, 2, 4, 55 * MIN_MS); /* recent, half a node */
    gang(fx, 1, 2, 16)->prio = HIGH;
    assert_int_equal(fx_pass(fx, HOUR_MS), 0);
    assert_null(fx_preempt(fx, 100));
    assert_non_null(fx_preempt(fx, 101));
    assert_non_null(fx_preempt(fx, 102));
    assert_int_equal(fx->res.npreempts, 2);
    assert_int_equal(fx_wait(fx, 1)->reason, SCHED_REASON_PREEMPTING);
}

/* ---- exclusive ---- */

/* --exclusive with one GPU: the wholly free node, all of it. The next
 * one-GPU job goes to the other node. */
static void exclusive_job_takes_a_wholly_free_node_and_holds_all_of_it(void **state)
{
    struct fx *fx = *state = cluster(2, 8);
    running(fx, 100, NORMAL, 0, 1, 0);
    struct sched_job *j = fx_job(fx, 1);
    j->exclusive = true;
    fx_job(fx, 2)->submit_ms = 1;
    assert_int_equal(fx_pass(fx, 0), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    assert_int_equal(s->alloc.nnodes, 1);
    assert_int_equal(s->alloc.nodes[0].node, 1);
    assert_int_equal(s->alloc.nshares, 8);
    assert_int_equal(s->alloc.nodes[0].cpus, 64);
    assert_int_equal(s->alloc.nodes[0].mem_mib, NODE_MEM);
    assert_int_equal(fx_start_node(fx, 2), 0);
}

/* No wholly free node: the exclusive job waits for one, and says so; a
 * CPU-only job is refused a partly used node as well. */
static void exclusive_job_waits_for_a_wholly_free_node(void **state)
{
    struct fx *fx = *state = cluster(2, 8);
    running(fx, 100, NORMAL, 0, 1, 0);
    running(fx, 101, NORMAL, 1, 1, 0);
    fx_job(fx, 1)->exclusive = true;
    struct sched_job *c = fx_job(fx, 2);
    c->gpus = 0;
    c->exclusive = true;
    assert_int_equal(fx_pass(fx, 0), 0);
    assert_null(fx_start(fx, 1));
    assert_null(fx_start(fx, 2));
    assert_int_equal(fx_wait(fx, 1)->reason, SCHED_REASON_EXCLUSIVE);
    char buf[200];
    assert_string_equal(sentence(fx, 1, buf, sizeof(buf)),
                        "not enough wholly free nodes (need 1, 0 free)");
    assert_int_equal(fx_wait(fx, 2)->reason, SCHED_REASON_EXCLUSIVE);
}

/* Quota charges what an exclusive job holds: a one-GPU exclusive job on an
 * 8-GPU node uses the team's 8-GPU limit, and the team's next job waits. */
static void exclusive_job_is_charged_every_gpu_it_holds(void **state)
{
    struct fx *fx = fx_new();
    *state = fx;
    uint32_t pool = fx_pool(fx, "main");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, 2, pool, h100, 8, 81920, 64, NODE_MEM);
    fx_team(fx, "a", 1, 0);
    fx_quota(fx, 0, pool, h100, 8 * SCHED_MILLI, 0);
    fx_class(fx, "normal", 10, false);
    fx_job(fx, 1)->exclusive = true;
    fx_job(fx, 2)->submit_ms = 1;
    assert_int_equal(fx_pass(fx, 0), 0);
    assert_non_null(fx_start(fx, 1));
    assert_int_equal(fx_start(fx, 1)->alloc.nshares, 8);
    assert_null(fx_start(fx, 2));
    assert_int_equal(fx_wait(fx, 2)->reason, SCHED_REASON_QUOTA);
}

/* An exact-N exclusive gang takes N wholly free nodes and every GPU there. */
static void exclusive_exact_gang_holds_every_gpu_of_its_nodes(void **state)
{
    struct fx *fx = *state = cluster(3, 4);
    running(fx, 100, NORMAL, 1, 1, 0);
    struct sched_job *j = gang(fx, 1, 2, 2);
    j->exclusive = true;
    assert_int_equal(fx_pass(fx, 0), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    assert_int_equal(s->alloc.nshares, 8);
    assert_int_equal(shares_on(fx, &s->alloc, 0), 4);
    assert_int_equal(shares_on(fx, &s->alloc, 2), 4);
}

/* A share of one GPU cannot be exclusive. */
static void exclusive_fraction_is_invalid(void **state)
{
    struct fx *fx = *state = cluster(1, 8);
    struct sched_job *j = fx_job(fx, 1);
    j->gpus = 0;
    j->gpu_milli = 250;
    j->exclusive = true;
    assert_int_equal(fx_pass(fx, 0), 0);
    assert_int_equal(fx_wait(fx, 1)->reason, SCHED_REASON_BAD_SIZE);
}

/* ---- whole-node memory ---- */

/* --mem=0: the node's whole memory; a later job with memory finds none
 * there, one without memory still fits. */
static void whole_memory_job_takes_all_memory_and_leaves_none(void **state)
{
    struct fx *fx = *state = cluster(1, 8);
    struct sched_job *j = fx_job(fx, 1);
    j->mem_whole_node = true;
    j->mem_mib = 0;
    fx_job(fx, 2)->submit_ms = 1;
    struct sched_job *z = fx_job(fx, 3);
    z->submit_ms = 2;
    z->mem_mib = 0;
    assert_int_equal(fx_pass(fx, 0), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    assert_int_equal(s->alloc.nodes[0].mem_mib, NODE_MEM);
    assert_null(fx_start(fx, 2));
    assert_int_equal(fx_wait(fx, 2)->reason, SCHED_REASON_HOST);
    assert_non_null(fx_start(fx, 3));
}

/* A node where a job holds memory is no node for --mem=0. */
static void whole_memory_job_waits_for_a_node_without_memory_jobs(void **state)
{
    struct fx *fx = *state = cluster(1, 8);
    running(fx, 100, NORMAL, 0, 1, 0);
    struct sched_job *j = fx_job(fx, 1);
    j->mem_whole_node = true;
    j->mem_mib = 0;
    assert_int_equal(fx_pass(fx, 0), 0);
    assert_null(fx_start(fx, 1));
    assert_int_equal(fx_wait(fx, 1)->reason, SCHED_REASON_WHOLE_MEM);
}

/* ---- features ---- */

/* Features as bits; constraints as OR of AND-terms: "ib" goes to node 1,
 * "nvme|ib" too, "ib&bigmem" to node 2, "nvme&bigmem" nowhere, ever. */
static void constraint_steers_jobs_to_nodes_with_the_features(void **state)
{
    struct fx *fx = *state = cluster(3, 8);
    fx->nodes[1].features = FEAT_IB;
    fx->nodes[2].features = FEAT_IB | FEAT_BIGMEM;
    struct sched_job *j = fx_job(fx, 1);
    j->gpus = 8;
    j->nconstraint = 1;
    j->constraint[0] = FEAT_IB;
    j = fx_job(fx, 2);
    j->gpus = 4;
    j->nconstraint = 1;
    j->constraint[0] = FEAT_IB | FEAT_BIGMEM;
    j = fx_job(fx, 3);
    j->nconstraint = 2;
    j->constraint[0] = FEAT_NVME;
    j->constraint[1] = FEAT_IB;
    j = fx_job(fx, 4);
    j->nconstraint = 1;
    j->constraint[0] = FEAT_NVME | FEAT_BIGMEM;
    assert_int_equal(fx_pass(fx, 0), 0);
    assert_int_equal(fx_start_node(fx, 1), 1); /* binpack would take node 0 otherwise */
    assert_int_equal(fx_start_node(fx, 2), 2);
    assert_int_equal(fx_start_node(fx, 3), 2); /* node 1 is full */
    assert_null(fx_start(fx, 4));
    assert_int_equal(fx_wait(fx, 4)->reason, SCHED_REASON_FEATURES_NEVER);
    assert_true(explain_is_final(SCHED_REASON_FEATURES_NEVER));
}

/* The only node with the feature is full: the job waits for it and says
 * why, although other nodes are free. */
static void constraint_job_waits_for_a_featured_node(void **state)
{
    struct fx *fx = *state = cluster(2, 8);
    fx->nodes[1].features = FEAT_IB;
    running(fx, 100, NORMAL, 1, 8, 0);
    struct sched_job *j = fx_job(fx, 1);
    j->nconstraint = 1;
    j->constraint[0] = FEAT_IB;
    assert_int_equal(fx_pass(fx, 0), 0);
    assert_null(fx_start(fx, 1));
    assert_int_equal(fx_wait(fx, 1)->reason, SCHED_REASON_FEATURES);
    assert_false(explain_is_final(SCHED_REASON_FEATURES));
}

/* An exact-N gang with a constraint counts only the featured nodes. */
static void exact_gang_with_a_constraint_counts_only_featured_nodes(void **state)
{
    struct fx *fx = *state = cluster(3, 8);
    fx->nodes[0].features = FEAT_IB;
    fx->nodes[2].features = FEAT_IB;
    struct sched_job *j = gang(fx, 1, 2, 16);
    j->nconstraint = 1;
    j->constraint[0] = FEAT_IB;
    assert_int_equal(fx_pass(fx, 0), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    assert_int_equal(shares_on(fx, &s->alloc, 0), 8);
    assert_int_equal(shares_on(fx, &s->alloc, 2), 8);
}

/* ---- migration ---- */

/* Two 4-GPU nodes, a checkpointable one-GPU job on each and a 4-GPU job
 * waiting: migration moves one of them. Not when the waiting job is shaped
 * (a constraint), nor an exclusive running job. */
static struct fx *fragmented(bool exclusive_runner, bool shaped_waiter)
{
    struct fx *fx = cluster(2, 4);
    fx->pol.order = SCHED_ORDER_PRIORITY;
    fx->pol.migrate = true;
    running(fx, 100, NORMAL, 0, 1, 0)->req.checkpointable = true;
    running(fx, 101, NORMAL, 1, 1, 0)->req.checkpointable = true;
    fx_get(fx, 100)->req.exclusive = exclusive_runner;
    fx_get(fx, 101)->req.exclusive = exclusive_runner;
    struct sched_job *j = fx_job(fx, 1);
    j->gpus = 4;
    if (shaped_waiter) {
        fx->nodes[0].features = fx->nodes[1].features = FEAT_IB;
        j->nconstraint = 1;
        j->constraint[0] = FEAT_IB;
    }
    return fx;
}

static void migration_leaves_shaped_jobs_alone(void **state)
{
    struct fx *fx = *state = fragmented(false, false);
    assert_int_equal(fx_pass(fx, HOUR_MS), 0);
    assert_int_equal(fx->res.npreempts, 1); /* the baseline: a move */
    fx_free(fx);
    *state = fx = fragmented(true, false);
    assert_int_equal(fx_pass(fx, HOUR_MS), 0);
    assert_int_equal(fx->res.npreempts, 0);
    fx_free(fx);
    *state = fx = fragmented(false, true);
    assert_int_equal(fx_pass(fx, HOUR_MS), 0);
    assert_int_equal(fx->res.npreempts, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_teardown(f, fx_teardown)
        T(exact_gang_takes_n_distinct_nodes_with_an_even_share),
        T(exact_gang_spreads_even_when_one_node_would_hold_it),
        T(exact_gang_binpacks_onto_the_tightest_nodes),
        T(exact_gang_without_gpus_takes_n_nodes),
        T(exact_gang_waits_for_n_nodes_and_says_how_many_have_room),
        T(exact_gang_larger_than_the_cluster_is_final),
        T(exact_gang_with_more_gpus_per_node_than_any_node_is_final),
        T(exact_gang_that_cannot_be_spread_evenly_is_invalid),
        T(backfill_reserves_for_an_exact_gang_and_fills_around_it),
        T(preemption_for_an_exact_gang_frees_n_nodes_only),
        T(exclusive_job_takes_a_wholly_free_node_and_holds_all_of_it),
        T(exclusive_job_waits_for_a_wholly_free_node),
        T(exclusive_job_is_charged_every_gpu_it_holds),
        T(exclusive_exact_gang_holds_every_gpu_of_its_nodes),
        T(exclusive_fraction_is_invalid),
        T(whole_memory_job_takes_all_memory_and_leaves_none),
        T(whole_memory_job_waits_for_a_node_without_memory_jobs),
        T(constraint_steers_jobs_to_nodes_with_the_features),
        T(constraint_job_waits_for_a_featured_node),
        T(exact_gang_with_a_constraint_counts_only_featured_nodes),
        T(migration_leaves_shaped_jobs_alone),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_view.c - placement, through the view API (view_init, view_place,
 * view_apply, view_group_may_fit, view_node_fits) and through sched_pass:
 * binpack and spread, one-node jobs never split, gangs on the fewest nodes,
 * NVLink domains, fractional sharing, constraints, node states, MIG and host
 * limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "core/sched.h"
#include "core/view.h"
#include "fixture.h"

#define MIN_MS         (60 * 1000)
#define HOUR_MS        (60 * MIN_MS)
#define H100_MEM       81920
#define MAX_TEST_NODES 64

/* ---- helpers ---- */

/* One pool "main" of `nodes` nodes with `gpus` H100s each (64 CPUs, 512 GiB),
 * one team with unlimited borrowing, one class. */
static struct fx *cluster(uint32_t nodes, uint32_t gpus)
{
    struct fx *fx = fx_new();
    uint32_t pool = fx_pool(fx, "main");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, nodes, pool, h100, gpus, H100_MEM, 64, 512 * 1024);
    fx_team(fx, "a", 1, -1);
    fx_class(fx, "normal", 10, false);
    return fx;
}

/*
 * Adds job `id` as already running on `node`: whole GPUs (milli 1000) on the
 * node's local GPUs in `mask`, or one fraction `milli` with `mem_mib` of GPU
 * memory on the single GPU in `mask`. CPUs and host memory as the job's defaults.
 */
static struct fx_job *hold(struct fx *fx, uint64_t id, uint32_t node, uint32_t mask, uint32_t milli,
                           uint32_t mem_mib)
{
    struct sched_job *req = fx_job(fx, id);
    struct fx_job *j = fx_get(fx, id);
    const struct sched_node *n = &fx->nodes[node];
    uint32_t k = 0;
    for (uint32_t i = 0; i < n->ngpus; i++) {
        if (!(mask & (1u << i)))
            continue;
        uint32_t gi = n->gpu_first + i;
        j->shares[k++] =
            (struct sched_share){.gpu = gi,
                                 .milli = milli,
                                 .mem_mib = milli == SCHED_MILLI ? fx->gpus[gi].mem_mib : mem_mib};
    }
    req->gpus = milli == SCHED_MILLI ? (int32_t)k : 0;
    req->gpu_milli = milli == SCHED_MILLI ? 0 : (int32_t)milli;
    j->parts[0] = (struct sched_node_part){
        .node = node, .cpus = (uint32_t)req->cpus, .mem_mib = (uint64_t)req->mem_mib};
    j->alloc = (struct sched_alloc){j->parts, 1, j->shares, k};
    j->started_ms = fx->now;
    j->ends_ms = INT64_MAX;
    return j;
}

/* Builds a view of the fixture's cluster minus every running fx job. */
static void build_view(struct fx *fx, struct view *v, enum sched_packing packing)
{
    size_t n = 0;
    for (uint32_t i = 0; i < fx->njobs; i++) {
        struct fx_job *j = &fx->jobs[i];
        if (j->done || j->started_ms < 0)
            continue;
        fx->running[n++] = (struct sched_running){
            .job = &j->req, .alloc = j->alloc, .start_ms = j->started_ms, .borrowed = j->borrowed};
    }
    struct sched_running_set rs = {fx->running, n};
    uint64_t bad = 0;
    assert_int_equal(view_init(v, &fx->c, &rs, packing, &bad), 0);
}

/* Placement output with room for any job of these tests. */
struct pbuf {
    struct sched_node_part nodes[MAX_TEST_NODES];
    struct sched_share shares[MAX_TEST_NODES];
    struct view_place out;
};

static struct view_place *pbuf_init(struct pbuf *b)
{
    memset(b, 0, sizeof(*b));
    b->out.nodes = b->nodes;
    b->out.shares = b->shares;
    return &b->out;
}

static struct sched_job whole_job(uint64_t id, int32_t gpus)
{
    return (struct sched_job){.id = id,
                              .pool = SCHED_ANY,
                              .gpu_type = SCHED_ANY,
                              .gpus = gpus,
                              .cpus = 1,
                              .mem_mib = 1024,
                              .time_limit_ms = HOUR_MS};
}

static struct sched_job frac_job(uint64_t id, int32_t milli, int64_t mem_mib)
{
    struct sched_job j = whole_job(id, 0);
    j.gpu_milli = milli;
    j.gpu_mem_mib = mem_mib;
    return j;
}

static uint32_t node_of_gpu(const struct fx *fx, uint32_t gpu)
{
    for (uint32_t n = 0; n < fx->c.nnodes; n++) {
        if (gpu >= fx->nodes[n].gpu_first && gpu < fx->nodes[n].gpu_first + fx->nodes[n].ngpus)
            return n;
    }
    return SCHED_NONE;
}

/* Every share of the placement lies on its single node, on distinct GPUs. */
static void assert_one_node(const struct fx *fx, const struct sched_alloc *a)
{
    assert_int_equal(a->nnodes, 1);
    for (uint32_t i = 0; i < a->nshares; i++) {
        assert_int_equal(node_of_gpu(fx, a->shares[i].gpu), a->nodes[0].node);
        for (uint32_t k = 0; k < i; k++)
            assert_int_not_equal(a->shares[k].gpu, a->shares[i].gpu);
    }
}

static struct sched_alloc place_alloc(const struct view_place *p)
{
    return (struct sched_alloc){p->nodes, p->nnodes, p->shares, p->nshares};
}

/* GPUs of a placement that lie on node n. */
static uint32_t shares_on(const struct fx *fx, const struct sched_alloc *a, uint32_t n)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < a->nshares; i++)
        k += node_of_gpu(fx, a->shares[i].gpu) == n;
    return k;
}

/*
 * Sums every running job's shares per GPU and checks no GPU is over its
 * compute or memory, that MIG GPUs hold nothing and that no CPU or host
 * memory of a node is overcommitted.
 */
static void assert_no_oversubscription(const struct fx *fx)
{
    uint32_t *milli = calloc(FX_MAX_GPUS, sizeof(*milli));
    uint32_t *mem = calloc(FX_MAX_GPUS, sizeof(*mem));
    uint64_t *cpus = calloc(FX_MAX_NODES, sizeof(*cpus));
    uint64_t *host = calloc(FX_MAX_NODES, sizeof(*host));
    assert_true(milli && mem && cpus && host);
    for (uint32_t i = 0; i < fx->njobs; i++) {
        const struct fx_job *j = &fx->jobs[i];
        if (j->done || j->started_ms < 0)
            continue;
        for (uint32_t s = 0; s < j->alloc.nshares; s++) {
            milli[j->alloc.shares[s].gpu] += j->alloc.shares[s].milli;
            mem[j->alloc.shares[s].gpu] += j->alloc.shares[s].mem_mib;
        }
        for (uint32_t p = 0; p < j->alloc.nnodes; p++) {
            cpus[j->alloc.nodes[p].node] += j->alloc.nodes[p].cpus;
            host[j->alloc.nodes[p].node] += j->alloc.nodes[p].mem_mib;
        }
    }
    for (uint32_t g = 0; g < fx->c.ngpus; g++) {
        assert_in_range(milli[g], 0, SCHED_MILLI);
        assert_in_range(mem[g], 0, fx->gpus[g].mem_mib);
        if (fx->gpus[g].mig_enabled)
            assert_int_equal(milli[g], 0);
    }
    for (uint32_t n = 0; n < fx->c.nnodes; n++) {
        assert_in_range(cpus[n], 0, fx->nodes[n].cpus);
        assert_in_range(host[n], 0, fx->nodes[n].mem_mib);
    }
    free(milli);
    free(mem);
    free(cpus);
    free(host);
}

/* Cluster with GPUs busy: node0 6 of 8, node1 3 of 8, node2 none (free 2, 5, 8). */
static struct fx *fragmented(void)
{
    struct fx *fx = cluster(3, 8);
    hold(fx, 100, 0, 0x3f, SCHED_MILLI, 0);
    hold(fx, 101, 1, 0x07, SCHED_MILLI, 0);
    return fx;
}

/* ---- packing ---- */

static void binpack_takes_tightest_node(void **unused)
{
    (void)unused;
    struct fx *fx = fragmented();
    struct view v;
    struct pbuf b;
    build_view(fx, &v, SCHED_PACK_BINPACK);
    unsigned miss = 0;
    struct sched_job j2 = whole_job(1, 2), j3 = whole_job(2, 3), j6 = whole_job(3, 6);
    assert_true(view_place(&v, &j2, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nodes[0].node, 0); /* 2 free: none left after */
    assert_int_equal(b.out.nshares, 2);
    assert_true(view_place(&v, &j3, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nodes[0].node, 1); /* 5 free beats 8 */
    assert_true(view_place(&v, &j6, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nodes[0].node, 2); /* only node with 6 */
    view_release(&v);
    fx_free(fx);
}

static void spread_takes_loosest_node(void **unused)
{
    (void)unused;
    struct fx *fx = fragmented();
    struct view v;
    struct pbuf b;
    build_view(fx, &v, SCHED_PACK_SPREAD);
    unsigned miss = 0;
    struct sched_job j2 = whole_job(1, 2);
    assert_true(view_place(&v, &j2, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nodes[0].node, 2);
    /* Once node2 is down to 5 free (like node1), the tie goes to node1. */
    struct sched_job j3 = whole_job(2, 3), j1 = whole_job(3, 1);
    assert_true(view_place(&v, &j3, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nodes[0].node, 2);
    struct sched_alloc a = place_alloc(&b.out);
    view_apply(&v, &a, false);
    assert_int_equal(v.nodes[2].free_whole, 5);
    assert_true(view_place(&v, &j1, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nodes[0].node, 1);
    view_release(&v);
    fx_free(fx);
}

static void packing_ties_go_to_lower_node_index(void **unused)
{
    (void)unused;
    for (int p = 0; p < 2; p++) {
        enum sched_packing packing = p ? SCHED_PACK_SPREAD : SCHED_PACK_BINPACK;
        struct fx *fx = cluster(4, 8);
        /* free: 4, 8, 4, 8 */
        hold(fx, 100, 0, 0x0f, SCHED_MILLI, 0);
        hold(fx, 101, 2, 0xf0, SCHED_MILLI, 0);
        struct view v;
        struct pbuf b;
        build_view(fx, &v, packing);
        struct sched_job j = whole_job(1, 3);
        unsigned miss = 0;
        assert_true(view_place(&v, &j, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
        assert_int_equal(b.out.nodes[0].node, packing == SCHED_PACK_BINPACK ? 0 : 1);
        view_release(&v);

        /* Same through sched_pass. */
        fx->pol.packing = packing;
        fx_job(fx, 1)->gpus = 3;
        assert_int_equal(fx_pass(fx, 1000), 0);
        assert_int_equal(fx_start_node(fx, 1), packing == SCHED_PACK_BINPACK ? 0 : 1);
        fx_free(fx);
    }
}

static void binpack_and_spread_through_sched_pass(void **unused)
{
    (void)unused;
    for (int p = 0; p < 2; p++) {
        struct fx *fx = fragmented();
        fx->pol.packing = p ? SCHED_PACK_SPREAD : SCHED_PACK_BINPACK;
        fx_job(fx, 1)->gpus = 2;
        assert_int_equal(fx_pass(fx, 1000), 0);
        const struct sched_start *s = fx_start(fx, 1);
        assert_non_null(s);
        assert_one_node(fx, &s->alloc);
        assert_int_equal(s->alloc.nodes[0].node, p ? 2 : 0);
        fx_free(fx);
    }
    /* Binpack over a pass keeps a whole node free for a big job that follows. */
    struct fx *fx = cluster(2, 8);
    for (uint64_t id = 1; id <= 4; id++)
        fx_job(fx, id)->gpus = 2;
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx->res.nstarts, 4);
    for (uint64_t id = 1; id <= 4; id++)
        assert_int_equal(fx_start_node(fx, id), 0);
    fx_job(fx, 5)->gpus = 8;
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_int_equal(fx_start_node(fx, 5), 1);
    fx_free(fx);
}

/* ---- one node, gangs ---- */

static void job_that_fits_no_single_node_is_not_split(void **unused)
{
    (void)unused;
    struct fx *fx = fragmented();           /* free 2, 5, 8 */
    hold(fx, 102, 2, 0x0f, SCHED_MILLI, 0); /* now 2, 5, 4: 11 free in all */
    struct view v;
    struct pbuf b;
    build_view(fx, &v, SCHED_PACK_BINPACK);
    struct sched_job j = whole_job(1, 6);
    unsigned miss = 0;
    assert_false(view_place(&v, &j, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_true(miss & VIEW_MISS_GPU);
    view_release(&v);

    fx_job(fx, 1)->gpus = 6;
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_null(fx_start(fx, 1));
    assert_int_equal(fx_wait(fx, 1)->reason, SCHED_REASON_NO_GPU);
    fx_free(fx);
}

static void one_node_job_is_never_split_on_fragmented_clusters(void **unused)
{
    (void)unused;
    for (uint64_t seed = 1; seed <= 12; seed++) {
        uint64_t rng = seed;
        struct fx *fx = cluster(5, 8);
        fx->pol.packing = seed % 2 ? SCHED_PACK_BINPACK : SCHED_PACK_SPREAD;
        uint64_t id = 1;
        int64_t now = 0;
        uint32_t singles = 0;
        for (int step = 0; step < 60; step++) {
            int arrivals = (int)fx_rng_range(&rng, 0, 4);
            for (int a = 0; a < arrivals; a++) {
                struct sched_job *j = fx_job(fx, id);
                bool gang = fx_rng_range(&rng, 0, 9) == 0;
                j->gpus =
                    gang ? (int32_t)fx_rng_range(&rng, 9, 20) : (int32_t)fx_rng_range(&rng, 1, 8);
                j->multi_node = gang;
                j->time_limit_ms = fx_rng_range(&rng, 1, 120) * MIN_MS;
                fx_get(fx, id)->run_ms = fx_rng_range(&rng, 1, j->time_limit_ms / MIN_MS) * MIN_MS;
                id++;
            }
            assert_int_equal(fx_step(fx, now), 0);
            for (size_t s = 0; s < fx->res.nstarts; s++) {
                const struct sched_start *st = &fx->res.starts[s];
                const struct sched_job *req = &fx_get(fx, st->job)->req;
                assert_int_equal(st->alloc.nshares, req->gpus);
                if (req->multi_node) {
                    /* All or nothing, on as few nodes as 8-GPU nodes allow or more. */
                    assert_true(st->alloc.nnodes >= (uint32_t)(req->gpus + 7) / 8);
                    uint32_t sum = 0;
                    for (uint32_t p = 0; p < st->alloc.nnodes; p++)
                        sum += shares_on(fx, &st->alloc, st->alloc.nodes[p].node);
                    assert_int_equal(sum, req->gpus);
                    continue;
                }
                assert_one_node(fx, &st->alloc);
                singles++;
            }
            assert_no_oversubscription(fx);
            int64_t t = fx_next_event(fx);
            now = t > now ? t : now + MIN_MS;
            if (fx_rng_range(&rng, 0, 2) == 0)
                now += fx_rng_range(&rng, 1, 10) * MIN_MS; /* arrivals between events too */
        }
        assert_true(singles > 20);
        fx_free(fx);
    }
}

static void gang_takes_fewest_nodes(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(4, 8);
    /* free: 8, 3, 5, 8 */
    hold(fx, 100, 1, 0x1f, SCHED_MILLI, 0);
    hold(fx, 101, 2, 0x07, SCHED_MILLI, 0);
    struct view v;
    struct pbuf b;
    build_view(fx, &v, SCHED_PACK_BINPACK);
    struct sched_job g = whole_job(1, 13);
    g.multi_node = true;
    unsigned miss = 0;
    assert_true(view_place(&v, &g, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    struct sched_alloc a = place_alloc(&b.out);
    assert_int_equal(a.nnodes, 2); /* 8 + 5 (or 8 + 8); never 3 nodes */
    assert_int_equal(a.nshares, 13);
    assert_int_equal(shares_on(fx, &a, 1), 0);
    uint32_t sum = 0;
    for (uint32_t p = 0; p < a.nnodes; p++)
        sum += shares_on(fx, &a, a.nodes[p].node);
    assert_int_equal(sum, 13);
    for (uint32_t i = 0; i < a.nshares; i++) {
        for (uint32_t k = 0; k < i; k++)
            assert_int_not_equal(a.shares[k].gpu, a.shares[i].gpu);
    }
    /* Binpack puts the last piece on the tightest node that holds it: 5 on node2. */
    assert_int_equal(shares_on(fx, &a, 2), 5);
    view_release(&v);

    /* Through sched_pass: 16 GPUs over 8, 3, 5, 8 free takes the two whole nodes. */
    struct sched_job *j = fx_job(fx, 1);
    j->gpus = 16;
    j->multi_node = true;
    assert_int_equal(fx_pass(fx, 1000), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    assert_int_equal(s->alloc.nnodes, 2);
    assert_int_equal(shares_on(fx, &s->alloc, 0), 8);
    assert_int_equal(shares_on(fx, &s->alloc, 3), 8);
    fx_free(fx);
}

static void gang_that_fits_one_node_stays_on_it(void **unused)
{
    (void)unused;
    struct fx *fx = fragmented(); /* free 2, 5, 8 */
    struct sched_job *j = fx_job(fx, 1);
    j->gpus = 5;
    j->multi_node = true;
    assert_int_equal(fx_pass(fx, 1000), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    assert_one_node(fx, &s->alloc);
    assert_int_equal(s->alloc.nodes[0].node, 1);
    fx_free(fx);
}

static void gang_is_all_or_nothing(void **unused)
{
    (void)unused;
    struct fx *fx = fragmented(); /* free 2, 5, 8: 15 in all */
    struct view v;
    struct pbuf b;
    build_view(fx, &v, SCHED_PACK_BINPACK);
    struct sched_job g = whole_job(1, 16);
    g.multi_node = true;
    unsigned miss = 0;
    uint16_t before[3];
    for (uint32_t n = 0; n < 3; n++)
        before[n] = v.nodes[n].free_whole;
    assert_false(view_place(&v, &g, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_true(miss & VIEW_MISS_GANG);
    for (uint32_t n = 0; n < 3; n++)
        assert_int_equal(v.nodes[n].free_whole, before[n]);
    g.gpus = 15;
    assert_true(view_place(&v, &g, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nnodes, 3);
    assert_int_equal(b.out.nshares, 15);
    view_release(&v);

    struct sched_job *j = fx_job(fx, 1);
    j->gpus = 16;
    j->multi_node = true;
    fx_job(fx, 2)->time_limit_ms = 10 * MIN_MS; /* short: may use reserved nodes too */
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_null(fx_start(fx, 1));
    assert_int_equal(fx_wait(fx, 1)->reason, SCHED_REASON_GANG);
    /* Nothing of the gang was taken: the one-GPU job still finds node0's pair. */
    assert_int_equal(fx_start_node(fx, 2), 0);
    fx_free(fx);
}

static void gang_splits_cpus_and_memory_per_node(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(3, 8);
    hold(fx, 100, 1, 0x0f, SCHED_MILLI, 0); /* free 8, 4, 8 */
    struct sched_job *j = fx_job(fx, 1);
    j->gpus = 12;
    j->multi_node = true;
    j->cpus = 48;
    j->mem_mib = 96 * 1024;
    assert_int_equal(fx_pass(fx, 1000), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    assert_int_equal(s->alloc.nnodes, 2);
    uint64_t cpus = 0, mem = 0;
    for (uint32_t p = 0; p < s->alloc.nnodes; p++) {
        const struct sched_node_part *part = &s->alloc.nodes[p];
        uint32_t k = shares_on(fx, &s->alloc, part->node);
        /* In proportion to the GPUs the node holds: 4 CPUs and 8 GiB per GPU. */
        assert_int_equal(part->cpus, 4 * k);
        assert_int_equal(part->mem_mib, (uint64_t)k * 8 * 1024);
        cpus += part->cpus;
        mem += part->mem_mib;
    }
    assert_int_equal(cpus, 48);
    assert_int_equal(mem, 96 * 1024);
    fx_free(fx);
}

static void gang_skips_nodes_without_cpus_for_their_part(void **unused)
{
    (void)unused;
    struct fx *fx = fx_new();
    uint32_t pool = fx_pool(fx, "main");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, 1, pool, h100, 8, H100_MEM, 4, 512 * 1024);  /* node0: 4 CPUs */
    fx_nodes(fx, 2, pool, h100, 8, H100_MEM, 64, 512 * 1024); /* node1, node2 */
    fx_team(fx, "a", 1, -1);
    fx_class(fx, "normal", 10, false);
    /* 16 GPUs, 2 CPUs each: node0 cannot hold 8 of them (16 CPUs). */
    struct sched_job *j = fx_job(fx, 1);
    j->gpus = 16;
    j->multi_node = true;
    j->cpus = 32;
    assert_int_equal(fx_pass(fx, 1000), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    assert_int_equal(shares_on(fx, &s->alloc, 0), 0);
    assert_int_equal(shares_on(fx, &s->alloc, 1), 8);
    assert_int_equal(shares_on(fx, &s->alloc, 2), 8);
    fx_free(fx);
}

static void gang_uses_part_of_a_node_whose_cpus_limit_it(void **unused)
{
    (void)unused;
    struct fx *fx = fx_new();
    uint32_t pool = fx_pool(fx, "main");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, 1, pool, h100, 8, H100_MEM, 8, 512 * 1024);  /* node0: 8 CPUs */
    fx_nodes(fx, 1, pool, h100, 8, H100_MEM, 64, 512 * 1024); /* node1 */
    fx_team(fx, "a", 1, -1);
    fx_class(fx, "normal", 10, false);
    /* 12 GPUs, 2 CPUs each: node1 holds 8 (16 CPUs), node0 the other 4 (8 CPUs).
     * The model splits a gang's CPUs by the GPUs each node holds, so this fits. */
    struct sched_job *j = fx_job(fx, 1);
    j->gpus = 12;
    j->multi_node = true;
    j->cpus = 24;
    assert_int_equal(fx_pass(fx, 1000), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    assert_int_equal(shares_on(fx, &s->alloc, 1), 8);
    assert_int_equal(shares_on(fx, &s->alloc, 0), 4);
    fx_free(fx);
}

/* ---- NVLink ---- */

static uint32_t domain_of(const struct fx *fx, uint32_t gpu)
{
    return (uint32_t)fx->gpus[gpu].nvlink_domain;
}

static void multi_gpu_job_stays_in_one_nvlink_domain(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1, 8);          /* domains: GPUs 0-3 and 4-7 */
    hold(fx, 100, 0, 0x13, SCHED_MILLI, 0); /* GPUs 0, 1, 4: free 2 + 3 */
    struct view v;
    struct pbuf b;
    build_view(fx, &v, SCHED_PACK_BINPACK);
    unsigned miss = 0;
    /* 3 GPUs: only domain 1 has room; lowest free indices would be 2, 3, 5. */
    struct sched_job j3 = whole_job(1, 3);
    assert_true(view_place(&v, &j3, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nshares, 3);
    for (uint32_t i = 0; i < 3; i++)
        assert_int_equal(domain_of(fx, b.out.shares[i].gpu), 1);
    /* 2 GPUs: both domains have room; the fuller one (domain 0) is used so
     * domain 1 stays whole for a bigger job. */
    struct sched_job j2 = whole_job(2, 2);
    assert_true(view_place(&v, &j2, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    for (uint32_t i = 0; i < 2; i++)
        assert_int_equal(domain_of(fx, b.out.shares[i].gpu), 0);
    view_release(&v);

    /* The same through a pass, then 3 more GPUs still find domain 1. */
    fx_job(fx, 2)->gpus = 2;
    assert_int_equal(fx_step(fx, 1000), 0);
    const struct sched_start *s = fx_start(fx, 2);
    assert_non_null(s);
    for (uint32_t i = 0; i < s->alloc.nshares; i++)
        assert_int_equal(domain_of(fx, s->alloc.shares[i].gpu), 0);
    fx_job(fx, 1)->gpus = 3;
    assert_int_equal(fx_step(fx, 2000), 0);
    s = fx_start(fx, 1);
    assert_non_null(s);
    for (uint32_t i = 0; i < s->alloc.nshares; i++)
        assert_int_equal(domain_of(fx, s->alloc.shares[i].gpu), 1);
    fx_free(fx);
}

static void multi_gpu_job_crosses_domains_only_when_none_has_room(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1, 8);
    hold(fx, 100, 0, 0x13, SCHED_MILLI, 0); /* free 2 + 3 */
    fx_job(fx, 1)->gpus = 5;
    assert_int_equal(fx_pass(fx, 1000), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s); /* a preference, not a requirement */
    assert_int_equal(s->alloc.nshares, 5);
    assert_one_node(fx, &s->alloc);
    fx_free(fx);
}

/* ---- fractions ---- */

static void fraction_goes_to_shared_gpu_before_fresh_one(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(2, 4);
    /* node0 wholly free; node1 GPU 1 a quarter used. Under either packing
     * (spread would like node0 best) the shared GPU comes first. */
    hold(fx, 100, 1, 0x02, 250, H100_MEM / 4);
    uint32_t shared = fx->nodes[1].gpu_first + 1;
    for (int p = 0; p < 2; p++) {
        struct view v;
        struct pbuf b;
        build_view(fx, &v, p ? SCHED_PACK_SPREAD : SCHED_PACK_BINPACK);
        unsigned miss = 0;
        struct sched_job f = frac_job(1, 500, 0);
        assert_true(view_place(&v, &f, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
        assert_int_equal(b.out.nshares, 1);
        assert_int_equal(b.out.shares[0].gpu, shared);
        assert_int_equal(b.out.nodes[0].node, 1);
        struct sched_job m = frac_job(2, 0, 20000);
        assert_true(view_place(&v, &m, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
        assert_int_equal(b.out.shares[0].gpu, shared);
        view_release(&v);
    }
    /* Through passes: a stream of quarters fills GPUs one at a time. */
    for (uint64_t id = 1; id <= 3; id++) {
        struct sched_job *j = fx_job(fx, id);
        j->gpus = 0;
        j->gpu_milli = 250;
    }
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx->res.nstarts, 3);
    for (uint64_t id = 1; id <= 3; id++)
        assert_int_equal(fx_get(fx, id)->alloc.shares[0].gpu, shared);
    struct sched_job *j = fx_job(fx, 4);
    j->gpus = 0;
    j->gpu_milli = 250;
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_int_not_equal(fx_get(fx, 4)->alloc.shares[0].gpu, shared); /* full: a fresh one */
    fx_free(fx);
}

static void fraction_opens_fresh_gpu_when_shared_ones_lack_room(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1, 4);
    hold(fx, 100, 0, 0x01, 900, 10000); /* GPU 0: 100 milli left */
    hold(fx, 101, 0, 0x02, 200, 75000); /* GPU 1: 800 milli but 6920 MiB left */
    struct view v;
    struct pbuf b;
    build_view(fx, &v, SCHED_PACK_BINPACK);
    unsigned miss = 0;
    /* 300 milli takes 24576 MiB: neither shared GPU has both. */
    struct sched_job f = frac_job(1, 300, 0);
    assert_true(view_place(&v, &f, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.shares[0].gpu, 2);
    /* 100 milli (8192 MiB) fits GPU 0 exactly in compute, and its memory. */
    struct sched_job g = frac_job(2, 100, 0);
    assert_true(view_place(&v, &g, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.shares[0].gpu, 0);
    /* 6000 MiB (74 milli) fits GPU 1 by memory; GPU 0 is tighter in compute but
     * both are shared: the tightest shared GPU that holds it. */
    struct sched_job m = frac_job(3, 0, 6000);
    assert_true(view_place(&v, &m, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.shares[0].gpu, 0);
    view_release(&v);
    fx_free(fx);
}

static void fraction_claims_matching_compute_and_memory(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1, 2);
    struct sched_job *a = fx_job(fx, 1);
    a->gpus = 0;
    a->gpu_milli = 300;
    struct sched_job *m = fx_job(fx, 2);
    m->gpus = 0;
    m->gpu_mem_mib = 20000;
    assert_int_equal(fx_pass(fx, 1000), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    assert_int_equal(s->alloc.shares[0].milli, 300);
    assert_int_equal(s->alloc.shares[0].mem_mib, H100_MEM * 300 / 1000);
    s = fx_start(fx, 2);
    assert_non_null(s);
    assert_int_equal(s->alloc.shares[0].mem_mib, 20000);
    assert_int_equal(s->alloc.shares[0].milli, 245); /* 20000 / 81920 = 0.2441, rounded up */
    assert_int_equal(s->alloc.nnodes, 1);
    fx_free(fx);
}

static void fractional_shares_never_oversubscribe_a_gpu(void **unused)
{
    (void)unused;
    for (uint64_t seed = 100; seed < 110; seed++) {
        uint64_t rng = seed;
        struct fx *fx = fx_new();
        uint32_t pool = fx_pool(fx, "main");
        uint32_t h100 = fx_type(fx, "H100-80GB");
        uint32_t a100 = fx_type(fx, "A100-40GB");
        fx_nodes(fx, 2, pool, h100, 4, H100_MEM, 32, 256 * 1024);
        uint32_t an = fx_nodes(fx, 1, pool, a100, 4, 40960, 32, 256 * 1024);
        /* One A100 in MIG mode: never offered to any of these jobs. */
        fx->gpus[fx->nodes[an].gpu_first + 3].mig_enabled = true;
        fx->gpus[fx->nodes[an].gpu_first + 3].mig_slices = 7;
        fx_team(fx, "a", 1, -1);
        fx_class(fx, "normal", 10, false);
        fx->pol.packing = seed % 2 ? SCHED_PACK_BINPACK : SCHED_PACK_SPREAD;
        uint64_t id = 1;
        int64_t now = 0;
        uint32_t fractions = 0;
        for (int step = 0; step < 80; step++) {
            int arrivals = (int)fx_rng_range(&rng, 0, 5);
            for (int k = 0; k < arrivals; k++) {
                struct sched_job *j = fx_job(fx, id);
                int kind = (int)fx_rng_range(&rng, 0, 9);
                j->gpus = 0;
                if (kind < 6)
                    j->gpu_milli = (int32_t)fx_rng_range(&rng, 1, 999);
                else if (kind < 9)
                    j->gpu_mem_mib = fx_rng_range(&rng, 1, 40960);
                else
                    j->gpus = (int32_t)fx_rng_range(&rng, 1, 2);
                if (fx_rng_range(&rng, 0, 4) == 0)
                    j->min_gpu_mem_mib = 60000;
                j->time_limit_ms = fx_rng_range(&rng, 1, 90) * MIN_MS;
                fx_get(fx, id)->run_ms = fx_rng_range(&rng, 1, j->time_limit_ms / MIN_MS) * MIN_MS;
                id++;
            }
            assert_int_equal(fx_step(fx, now), 0);
            for (size_t s = 0; s < fx->res.nstarts; s++) {
                const struct sched_start *st = &fx->res.starts[s];
                const struct sched_job *req = &fx_get(fx, st->job)->req;
                assert_one_node(fx, &st->alloc);
                for (uint32_t i = 0; i < st->alloc.nshares; i++) {
                    const struct sched_gpu *gpu = &fx->gpus[st->alloc.shares[i].gpu];
                    assert_false(gpu->mig_enabled);
                    assert_true(req->min_gpu_mem_mib <= (int64_t)gpu->mem_mib);
                }
                if (req->gpus > 0)
                    continue;
                fractions++;
                assert_int_equal(st->alloc.nshares, 1);
                const struct sched_share *sh = &st->alloc.shares[0];
                uint32_t gmem = fx->gpus[sh->gpu].mem_mib;
                if (req->gpu_milli > 0) {
                    assert_int_equal(sh->milli, req->gpu_milli);
                    assert_int_equal(sh->mem_mib, (uint64_t)gmem * (uint64_t)req->gpu_milli / 1000);
                } else {
                    assert_int_equal(sh->mem_mib, req->gpu_mem_mib);
                    assert_int_equal(sh->milli,
                                     ((uint64_t)req->gpu_mem_mib * 1000 + gmem - 1) / gmem);
                }
            }
            assert_no_oversubscription(fx);
            int64_t t = fx_next_event(fx);
            now = t > now ? t : now + MIN_MS;
        }
        assert_true(fractions > 50);
        fx_free(fx);
    }
}

/* ---- constraints ---- */

static void memory_request_never_lands_on_a_smaller_gpu(void **unused)
{
    (void)unused;
    /* One GPU type in two memory sizes (as when a site names both A100
     * variants alike): node0 40 GiB GPUs, node1 80 GiB GPUs. */
    struct fx *fx = fx_new();
    uint32_t pool = fx_pool(fx, "main");
    uint32_t a100 = fx_type(fx, "A100");
    fx_nodes(fx, 1, pool, a100, 4, 40960, 64, 512 * 1024);
    fx_nodes(fx, 1, pool, a100, 4, 81920, 64, 512 * 1024);
    fx_team(fx, "a", 1, -1);
    fx_class(fx, "normal", 10, false);
    struct sched_job *m = fx_job(fx, 1);
    m->gpus = 0;
    m->gpu_mem_mib = 60000;
    assert_int_equal(fx_pass(fx, 1000), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    /* The job asked for 60000 MiB of one GPU: it must get them. */
    assert_int_equal(s->alloc.shares[0].mem_mib, 60000);
    assert_true(fx->gpus[s->alloc.shares[0].gpu].mem_mib >= 60000);
    assert_int_equal(s->alloc.nodes[0].node, 1);
    fx_free(fx);
}

static void min_gpu_mem_is_honoured(void **unused)
{
    (void)unused;
    struct fx *fx = fx_new();
    uint32_t pool = fx_pool(fx, "main");
    uint32_t h100 = fx_type(fx, "H100");
    fx_nodes(fx, 2, pool, h100, 8, 40960, 64, 512 * 1024);
    fx_team(fx, "a", 1, -1);
    fx_class(fx, "normal", 10, false);
    /* node1's GPUs 4-7 have 80 GiB; node0 is tighter (6 busy). */
    for (uint32_t i = 4; i < 8; i++)
        fx->gpus[fx->nodes[1].gpu_first + i].mem_mib = 81920;
    hold(fx, 100, 0, 0x3f, SCHED_MILLI, 0);
    struct sched_job *w = fx_job(fx, 1);
    w->gpus = 2;
    w->min_gpu_mem_mib = 60000;
    struct sched_job *f = fx_job(fx, 2);
    f->gpus = 0;
    f->gpu_milli = 100;
    f->min_gpu_mem_mib = 60000;
    struct sched_job *plain = fx_job(fx, 3);
    plain->gpus = 2;
    struct sched_job *big = fx_job(fx, 4);
    big->gpus = 5;
    big->min_gpu_mem_mib = 60000;
    assert_int_equal(fx_pass(fx, 1000), 0);
    const struct sched_start *s = fx_start(fx, 1);
    assert_non_null(s);
    for (uint32_t i = 0; i < s->alloc.nshares; i++)
        assert_int_equal(fx->gpus[s->alloc.shares[i].gpu].mem_mib, 81920);
    s = fx_start(fx, 2);
    assert_non_null(s);
    assert_int_equal(fx->gpus[s->alloc.shares[0].gpu].mem_mib, 81920);
    assert_int_equal(fx_start_node(fx, 3), 0); /* unconstrained: the tight node */
    assert_null(fx_start(fx, 4));              /* only 4 such GPUs exist */
    /* No group has a GPU that large: never. */
    struct sched_job *huge = fx_job(fx, 5);
    huge->min_gpu_mem_mib = 100000;
    assert_int_equal(fx_pass(fx, 2000), 0);
    assert_null(fx_start(fx, 5));
    assert_true(explain_is_final(fx_wait(fx, 5)->reason));
    fx_free(fx);
}

static void gpu_type_and_pool_constraints_are_honoured(void **unused)
{
    (void)unused;
    struct fx *fx = fx_new();
    uint32_t p0 = fx_pool(fx, "train");
    uint32_t p1 = fx_pool(fx, "serve");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    uint32_t a100 = fx_type(fx, "A100-80GB");
    fx_nodes(fx, 1, p0, h100, 8, H100_MEM, 64, 512 * 1024); /* node0 */
    fx_nodes(fx, 1, p0, a100, 8, 81920, 64, 512 * 1024);    /* node1 */
    fx_nodes(fx, 1, p1, h100, 8, H100_MEM, 64, 512 * 1024); /* node2 */
    fx_team(fx, "a", 1, -1);
    fx_class(fx, "normal", 10, false);
    hold(fx, 100, 0, 0x7f, SCHED_MILLI, 0); /* node0 tightest: 1 free */
    hold(fx, 101, 2, 0x3f, SCHED_MILLI, 0); /* node2: 2 free */
    struct sched_job *ta = fx_job(fx, 1);
    ta->gpu_type = a100;
    struct sched_job *pp = fx_job(fx, 2);
    pp->pool = p1;
    struct sched_job *both = fx_job(fx, 3);
    both->pool = p1;
    both->gpu_type = a100; /* no A100 in serve */
    struct sched_job *fr = fx_job(fx, 4);
    fr->gpus = 0;
    fr->gpu_milli = 100;
    fr->gpu_type = a100;
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_int_equal(fx_start_node(fx, 1), 1);
    assert_int_equal(fx_start_node(fx, 2), 2);
    assert_null(fx_start(fx, 3));
    assert_int_equal(fx_wait(fx, 3)->reason, SCHED_REASON_NO_MATCH);
    assert_int_equal(fx_start_node(fx, 4), 1);

    struct view v;
    struct pbuf b;
    build_view(fx, &v, SCHED_PACK_BINPACK);
    struct sched_job j = whole_job(9, 1);
    j.pool = p0;
    unsigned miss = 0;
    assert_true(view_place(&v, &j, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nodes[0].node, 0);
    assert_int_equal(v.groups[b.out.group].pool, p0);
    assert_int_equal(v.groups[b.out.group].gpu_type, h100);
    j.pool = SCHED_ANY;
    j.gpu_type = a100;
    assert_true(view_place(&v, &j, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nodes[0].node, 1);
    /* The allowed-groups mask restricts placement too. */
    bool allowed[8] = {false};
    j.gpu_type = SCHED_ANY;
    allowed[view_group_of(&v, p1, h100)] = true;
    assert_true(view_place(&v, &j, allowed, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nodes[0].node, 2);
    view_release(&v);
    fx_free(fx);
}

static void draining_and_down_nodes_get_nothing_new(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(3, 8);
    hold(fx, 100, 0, 0x3f, SCHED_MILLI, 0); /* node0: 2 free, tightest */
    hold(fx, 101, 1, 0x01, SCHED_MILLI, 0); /* node1: 7 free */
    fx->nodes[0].state = SCHED_NODE_DRAINING;
    fx->nodes[1].state = SCHED_NODE_DOWN;
    struct view v;
    struct pbuf b;
    build_view(fx, &v, SCHED_PACK_BINPACK);
    struct sched_job j = whole_job(1, 2), f = frac_job(2, 100, 0), cpu = whole_job(3, 0);
    assert_false(view_node_fits(&v, &j, 0));
    assert_false(view_node_fits(&v, &j, 1));
    assert_true(view_node_fits(&v, &j, 2));
    assert_false(view_node_fits(&v, &f, 0));
    assert_false(view_node_fits(&v, &cpu, 1));
    unsigned miss = 0;
    assert_true(view_place(&v, &j, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nodes[0].node, 2);
    view_release(&v);

    for (uint64_t id = 1; id <= 3; id++)
        fx_job(fx, id)->gpus = 4;
    struct sched_job *fr = fx_job(fx, 4);
    fr->gpus = 0;
    fr->gpu_milli = 100;
    struct sched_job *c = fx_job(fx, 5);
    c->gpus = 0;
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_true(fx_running(fx, 100)); /* running work on a draining node stays */
    for (size_t s = 0; s < fx->res.nstarts; s++)
        assert_int_equal(fx->res.starts[s].alloc.nodes[0].node, 2);
    assert_int_equal(fx->res.nstarts, 3); /* two 4-GPU jobs and... */
    assert_non_null(fx_start(fx, 5));     /* ...the CPU-only job; the third 4 waits */
    assert_null(fx_start(fx, 3));
    assert_null(fx_start(fx, 4));
    fx_free(fx);
}

static void mig_gpus_are_not_offered_to_whole_or_fractional_requests(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1, 8);
    for (uint32_t i = 0; i < 4; i++) {
        fx->gpus[i].mig_slices = 7;
        fx->gpus[i].mig_enabled = true;
    }
    struct view v;
    struct pbuf b;
    build_view(fx, &v, SCHED_PACK_BINPACK);
    assert_int_equal(v.nodes[0].free_whole, 4);
    unsigned miss = 0;
    struct sched_job j5 = whole_job(1, 5), j4 = whole_job(2, 4), f = frac_job(3, 100, 0);
    assert_false(view_node_fits(&v, &j5, 0));
    assert_false(view_place(&v, &j5, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_true(view_place(&v, &j4, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    for (uint32_t i = 0; i < 4; i++)
        assert_false(fx->gpus[b.out.shares[i].gpu].mig_enabled);
    struct sched_alloc a = place_alloc(&b.out);
    view_apply(&v, &a, false);
    /* All non-MIG GPUs taken: a fraction finds nothing, though MIG GPUs are idle. */
    assert_false(view_group_may_fit(&v, &f, 0, false));
    assert_false(view_node_fits(&v, &f, 0));
    assert_false(view_place(&v, &f, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    view_release(&v);

    fx_job(fx, 1)->gpus = 5;
    for (uint64_t id = 2; id <= 5; id++) {
        struct sched_job *fr = fx_job(fx, id);
        fr->gpus = 0;
        fr->gpu_milli = 600;
    }
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_null(fx_start(fx, 1));
    assert_int_equal(fx->res.nstarts, 4);
    for (size_t s = 0; s < fx->res.nstarts; s++)
        assert_false(fx->gpus[fx->res.starts[s].alloc.shares[0].gpu].mig_enabled);
    assert_no_oversubscription(fx);
    fx_free(fx);
}

static void node_cpu_and_memory_limits_are_honoured(void **unused)
{
    (void)unused;
    struct fx *fx = fx_new();
    uint32_t pool = fx_pool(fx, "main");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, 1, pool, h100, 8, H100_MEM, 4, 16 * 1024);   /* node0: small host */
    fx_nodes(fx, 1, pool, h100, 8, H100_MEM, 64, 512 * 1024); /* node1 */
    fx_team(fx, "a", 1, -1);
    fx_class(fx, "normal", 10, false);
    hold(fx, 100, 0, 0x0f, SCHED_MILLI, 0); /* node0: 4 GPUs, 3 CPUs, 15 GiB free */
    struct view v;
    struct pbuf b;
    build_view(fx, &v, SCHED_PACK_BINPACK);
    unsigned miss = 0;
    struct sched_job cpus = whole_job(1, 2), mem = whole_job(2, 2), ok = whole_job(3, 2);
    cpus.cpus = 8;
    mem.mem_mib = 32 * 1024;
    assert_false(view_node_fits(&v, &cpus, 0));
    assert_true(view_node_fits(&v, &cpus, 1));
    assert_false(view_node_fits(&v, &mem, 0));
    assert_true(view_place(&v, &cpus, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nodes[0].node, 1);
    assert_int_equal(b.out.nodes[0].cpus, 8);
    assert_true(view_place(&v, &mem, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nodes[0].node, 1);
    assert_int_equal(b.out.nodes[0].mem_mib, 32 * 1024);
    assert_true(view_place(&v, &ok, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nodes[0].node, 0);
    view_release(&v);

    /* Through passes: 3 one-CPU jobs exhaust node0's CPUs though its GPUs stay free. */
    fx->nodes[1].state = SCHED_NODE_DOWN;
    for (uint64_t id = 1; id <= 4; id++)
        fx_job(fx, id)->gpus = 1;
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx->res.nstarts, 3);
    assert_null(fx_start(fx, 4));
    struct sched_job *fr = fx_job(fx, 5);
    fr->gpus = 0;
    fr->gpu_milli = 100;
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_null(fx_start(fx, 4));
    assert_null(fx_start(fx, 5));
    assert_no_oversubscription(fx);
    fx_free(fx);
}

static void host_limited_job_waits_with_host_reason(void **unused)
{
    (void)unused;
    struct fx *fx = fx_new();
    uint32_t pool = fx_pool(fx, "main");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, 1, pool, h100, 8, H100_MEM, 4, 16 * 1024);
    fx_team(fx, "a", 1, -1);
    fx_class(fx, "normal", 10, false);
    struct sched_job *busy = fx_job(fx, 1);
    busy->cpus = 4; /* all CPUs, one GPU */
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_non_null(fx_start(fx, 1));
    /* Alone in the queue, 7 GPUs free, no CPU: nothing outranked it. */
    fx_job(fx, 2)->gpus = 1;
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_null(fx_start(fx, 2));
    assert_int_equal(fx_wait(fx, 2)->reason, SCHED_REASON_HOST);
    fx_free(fx);
}

/* ---- the view API ---- */

static void group_may_fit_tracks_free_capacity(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(2, 8);
    hold(fx, 100, 0, 0x3f, SCHED_MILLI, 0); /* free 2 */
    hold(fx, 101, 1, 0x07, SCHED_MILLI, 0); /* free 5 */
    struct view v;
    struct pbuf b;
    build_view(fx, &v, SCHED_PACK_BINPACK);
    assert_int_equal(v.ngroups, 1);
    struct sched_job j5 = whole_job(1, 5), j6 = whole_job(2, 6), g7 = whole_job(3, 7),
                     g8 = whole_job(4, 8), f = frac_job(5, 999, 0);
    g7.multi_node = g8.multi_node = true;
    assert_true(view_group_may_fit(&v, &j5, 0, false));
    assert_false(view_group_may_fit(&v, &j6, 0, false));
    assert_true(view_group_may_fit(&v, &g7, 0, false));
    assert_false(view_group_may_fit(&v, &g8, 0, false));
    assert_true(view_group_may_fit(&v, &f, 0, false));

    unsigned miss = 0;
    assert_true(view_place(&v, &j5, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    struct sched_alloc a = place_alloc(&b.out);
    view_apply(&v, &a, false);
    assert_false(view_group_may_fit(&v, &j5, 0, false));
    assert_false(view_group_may_fit(&v, &g7, 0, false));
    view_apply(&v, &a, true);
    assert_true(view_group_may_fit(&v, &j5, 0, false));
    assert_true(view_group_may_fit(&v, &g7, 0, false));

    /* A reservation on node1 closes it to "open" checks only. */
    int r = view_resv_add(&v, 77, 5000);
    assert_true(r >= 0);
    view_resv_hold(&v, (uint32_t)r, 1);
    assert_true(view_group_may_fit(&v, &j5, 0, false));
    assert_false(view_group_may_fit(&v, &j5, 0, true));
    struct sched_job j2 = whole_job(6, 2);
    assert_true(view_group_may_fit(&v, &j2, 0, true));
    view_release(&v);
    fx_free(fx);
}

static void fractions_in_group_may_fit_need_one_gpu_with_room(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1, 2);
    hold(fx, 100, 0, 0x01, 700, 20000);
    hold(fx, 101, 0, 0x02, 600, 20000);
    struct view v;
    build_view(fx, &v, SCHED_PACK_BINPACK);
    struct sched_job f4 = frac_job(1, 400, 0), f3 = frac_job(2, 300, 0);
    /* 700 milli free in all, but at most 400 on one GPU. */
    assert_true(view_group_may_fit(&v, &f4, 0, false));
    assert_true(view_group_may_fit(&v, &f3, 0, false));
    struct sched_job f5 = frac_job(3, 500, 0);
    assert_false(view_group_may_fit(&v, &f5, 0, false));
    assert_false(view_node_fits(&v, &f5, 0));
    assert_true(view_node_fits(&v, &f4, 0));
    view_release(&v);
    fx_free(fx);
}

static void node_fits_checks_gpus_host_and_eligibility(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(2, 8);
    fx->nodes[1].cpus = 2;
    hold(fx, 100, 0, 0x0f, SCHED_MILLI, 0);
    struct view v;
    build_view(fx, &v, SCHED_PACK_BINPACK);
    struct sched_job j4 = whole_job(1, 4), j5 = whole_job(2, 5);
    assert_true(view_node_fits(&v, &j4, 0));
    assert_false(view_node_fits(&v, &j5, 0));
    assert_true(view_node_fits(&v, &j5, 1));
    j5.cpus = 3;
    assert_false(view_node_fits(&v, &j5, 1)); /* 2 CPUs */
    j4.gpu_type = 7;                          /* no such type: not eligible */
    assert_false(view_node_fits(&v, &j4, 0));
    /* A gang fits a node when its whole request does. */
    struct sched_job g = whole_job(3, 8);
    g.multi_node = true;
    assert_false(view_node_fits(&v, &g, 0));
    assert_true(view_node_fits(&v, &g, 1));
    view_release(&v);
    fx_free(fx);
}

static void apply_then_give_back_restores_free_capacity(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(3, 4);
    hold(fx, 100, 0, 0x01, 300, 10000);
    struct view v, before;
    build_view(fx, &v, SCHED_PACK_BINPACK);
    assert_int_equal(view_clone(&before, &v), 0);
    struct pbuf b;
    unsigned miss = 0;
    struct sched_job jobs[3] = {whole_job(1, 3), frac_job(2, 250, 0), whole_job(3, 4)};
    jobs[2].multi_node = true;
    jobs[2].gpus = 5;
    struct sched_node_part parts[3][MAX_TEST_NODES];
    struct sched_share shares[3][MAX_TEST_NODES];
    struct sched_alloc allocs[3];
    for (int k = 0; k < 3; k++) {
        assert_true(view_place(&v, &jobs[k], NULL, HOUR_MS, false, pbuf_init(&b), &miss));
        memcpy(parts[k], b.nodes, sizeof(b.nodes));
        memcpy(shares[k], b.shares, sizeof(b.shares));
        allocs[k] = (struct sched_alloc){parts[k], b.out.nnodes, shares[k], b.out.nshares};
        view_apply(&v, &allocs[k], false);
    }
    /* 3 on node0, a quarter beside job 100, a gang of 4 + 1 over node1 and node2. */
    assert_int_equal(allocs[2].nnodes, 2);
    assert_int_equal(v.nodes[0].free_whole + v.nodes[1].free_whole + v.nodes[2].free_whole, 3);
    for (int k = 2; k >= 0; k--)
        view_apply(&v, &allocs[k], true);
    for (uint32_t g = 0; g < fx->c.ngpus; g++) {
        assert_int_equal(v.gpus[g].free_milli, before.gpus[g].free_milli);
        assert_int_equal(v.gpus[g].free_mem_mib, before.gpus[g].free_mem_mib);
    }
    for (uint32_t n = 0; n < fx->c.nnodes; n++) {
        assert_int_equal(v.nodes[n].free_whole, before.nodes[n].free_whole);
        assert_int_equal(v.nodes[n].nshared, before.nodes[n].nshared);
        assert_int_equal(v.nodes[n].free_cpus, before.nodes[n].free_cpus);
        assert_int_equal(v.nodes[n].free_mem_mib, before.nodes[n].free_mem_mib);
    }
    view_release(&before);
    view_release(&v);
    fx_free(fx);
}

static void place_does_not_change_the_view(void **unused)
{
    (void)unused;
    struct fx *fx = fragmented();
    struct view v;
    build_view(fx, &v, SCHED_PACK_BINPACK);
    struct pbuf b;
    unsigned miss = 0;
    struct sched_job j = whole_job(1, 2);
    assert_true(view_place(&v, &j, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    uint32_t first = b.out.nodes[0].node;
    assert_true(view_place(&v, &j, NULL, HOUR_MS, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nodes[0].node, first);
    assert_int_equal(v.nodes[first].free_whole, 2);
    view_release(&v);
    fx_free(fx);
}

static void reserved_nodes_only_take_jobs_ending_before_the_reservation(void **unused)
{
    (void)unused;
    struct fx *fx = fragmented(); /* free 2, 5, 8 */
    struct view v;
    build_view(fx, &v, SCHED_PACK_BINPACK);
    int r = view_resv_add(&v, 99, 5000);
    assert_true(r >= 0);
    view_resv_hold(&v, (uint32_t)r, 2);
    struct pbuf b;
    unsigned miss = 0;
    struct sched_job j = whole_job(1, 6);
    assert_true(view_place(&v, &j, NULL, 5000, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nodes[0].node, 2);
    miss = 0;
    assert_false(view_place(&v, &j, NULL, 5001, false, pbuf_init(&b), &miss));
    assert_true(miss & VIEW_MISS_RESV);
    assert_int_equal(b.out.blocking_resv, r);
    assert_true(view_place(&v, &j, NULL, 5001, true, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nodes[0].node, 2);
    /* A job that fits elsewhere goes there instead of waiting. */
    struct sched_job j4 = whole_job(2, 4);
    assert_true(view_place(&v, &j4, NULL, 9000, false, pbuf_init(&b), &miss));
    assert_int_equal(b.out.nodes[0].node, 1);
    view_release(&v);
    fx_free(fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(binpack_takes_tightest_node),
        cmocka_unit_test(spread_takes_loosest_node),
        cmocka_unit_test(packing_ties_go_to_lower_node_index),
        cmocka_unit_test(binpack_and_spread_through_sched_pass),
        cmocka_unit_test(job_that_fits_no_single_node_is_not_split),
        cmocka_unit_test(one_node_job_is_never_split_on_fragmented_clusters),
        cmocka_unit_test(gang_takes_fewest_nodes),
        cmocka_unit_test(gang_that_fits_one_node_stays_on_it),
        cmocka_unit_test(gang_is_all_or_nothing),
        cmocka_unit_test(gang_splits_cpus_and_memory_per_node),
        cmocka_unit_test(gang_skips_nodes_without_cpus_for_their_part),
        cmocka_unit_test(gang_uses_part_of_a_node_whose_cpus_limit_it),
        cmocka_unit_test(multi_gpu_job_stays_in_one_nvlink_domain),
        cmocka_unit_test(multi_gpu_job_crosses_domains_only_when_none_has_room),
        cmocka_unit_test(fraction_goes_to_shared_gpu_before_fresh_one),
        cmocka_unit_test(fraction_opens_fresh_gpu_when_shared_ones_lack_room),
        cmocka_unit_test(fraction_claims_matching_compute_and_memory),
        cmocka_unit_test(fractional_shares_never_oversubscribe_a_gpu),
        cmocka_unit_test(memory_request_never_lands_on_a_smaller_gpu),
        cmocka_unit_test(min_gpu_mem_is_honoured),
        cmocka_unit_test(gpu_type_and_pool_constraints_are_honoured),
        cmocka_unit_test(draining_and_down_nodes_get_nothing_new),
        cmocka_unit_test(mig_gpus_are_not_offered_to_whole_or_fractional_requests),
        cmocka_unit_test(node_cpu_and_memory_limits_are_honoured),
        cmocka_unit_test(host_limited_job_waits_with_host_reason),
        cmocka_unit_test(group_may_fit_tracks_free_capacity),
        cmocka_unit_test(fractions_in_group_may_fit_need_one_gpu_with_room),
        cmocka_unit_test(node_fits_checks_gpus_host_and_eligibility),
        cmocka_unit_test(apply_then_give_back_restores_free_capacity),
        cmocka_unit_test(place_does_not_change_the_view),
        cmocka_unit_test(reserved_nodes_only_take_jobs_ending_before_the_reservation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

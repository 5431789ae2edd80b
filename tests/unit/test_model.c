/* test_model.c - validation of clusters and policies, policy names, name
 * lookups, GPU claims, and sched_pass's argument errors (which leave the
 * carry-over state untouched). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "core/model.h"
#include "core/sched.h"
#include "fixture.h"

/* Pools main (0) and spare (1); types H100-80GB (0) and A100-40GB (1); nodes:
 * two in main with 8 H100s (GPUs 0..15), one CPU-only node in main, one in
 * spare with 4 A100s (GPUs 16..19). Teams a (weight 1) and b (weight 3, a
 * quota on main/H100); classes normal, high, low. Valid as built. */
static struct fx *cluster(void)
{
    struct fx *fx = fx_new();
    uint32_t main_pool = fx_pool(fx, "main");
    uint32_t spare = fx_pool(fx, "spare");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    uint32_t a100 = fx_type(fx, "A100-40GB");
    fx_nodes(fx, 2, main_pool, h100, 8, 81920, 64, 512 * 1024);
    fx_nodes(fx, 1, main_pool, h100, 0, 81920, 32, 64 * 1024);
    fx_nodes(fx, 1, spare, a100, 4, 40960, 32, 256 * 1024);
    fx_team(fx, "a", 1, -1);
    uint32_t b = fx_team(fx, "b", 3, 0);
    fx_quota(fx, b, main_pool, h100, 4000, 2000);
    fx_quota(fx, b, spare, a100, 1000, -1);
    fx_class(fx, "normal", 10, false);
    fx_class(fx, "high", 20, true);
    fx_class(fx, "low", 0, false);
    return fx;
}

static void expect_cluster_bad(const struct sched_cluster *c, int err, const char *needle)
{
    const char *what = NULL;
    assert_int_equal(sched_cluster_check(c, &what), err);
    assert_non_null(what);
    if (!strstr(what, needle))
        fail_msg("problem \"%s\" does not name \"%s\"", what, needle);
    /* The name is optional. */
    assert_int_equal(sched_cluster_check(c, NULL), err);
}

static void expect_policy_bad(const struct sched_policy *p, const char *field)
{
    const char *what = NULL;
    assert_int_equal(sched_policy_check(p, &what), GPO_EINVAL);
    assert_non_null(what);
    assert_string_equal(what, field);
    assert_int_equal(sched_policy_check(p, NULL), GPO_EINVAL);
}

/* ---- sched_cluster_check ---- */

static void cluster_check_accepts_valid_cluster(void **state)
{
    struct fx *fx = *state = cluster();
    assert_int_equal(sched_cluster_check(&fx->c, NULL), 0);
    /* Limits at their edges are still valid: weight 1, borrowing limit -1,
     * guarantee 0, a CPU-only node whose gpu_first points anywhere. */
    fx->teams[0].weight = 1;
    fx->teams[0].borrow_limit_milli = -1;
    fx->quotas[1][0].guaranteed_milli = 0;
    fx->quotas[1][0].borrow_limit_milli = -1;
    fx->nodes[2].gpu_first = 999;
    const char *what = NULL;
    assert_int_equal(sched_cluster_check(&fx->c, &what), 0);
}

static void cluster_check_accepts_empty_cluster(void **unused)
{
    (void)unused;
    struct sched_cluster c = {0};
    assert_int_equal(sched_cluster_check(&c, NULL), 0);
}

static void cluster_check_rejects_null_cluster(void **unused)
{
    (void)unused;
    const char *what = NULL;
    assert_int_equal(sched_cluster_check(NULL, &what), GPO_EINVAL);
    assert_non_null(what);
}

static void cluster_check_rejects_node_pool_out_of_range(void **state)
{
    struct fx *fx = *state = cluster();
    fx->nodes[1].pool = 2;
    expect_cluster_bad(&fx->c, GPO_EINVAL, "pool");
    fx->nodes[1].pool = SCHED_ANY;
    expect_cluster_bad(&fx->c, GPO_EINVAL, "pool");
}

static void cluster_check_rejects_bad_node_state(void **state)
{
    struct fx *fx = *state = cluster();
    fx->nodes[0].state = (enum sched_node_state)7;
    expect_cluster_bad(&fx->c, GPO_EINVAL, "state");
}

static void cluster_check_rejects_overlapping_gpu_ranges(void **state)
{
    struct fx *fx = *state = cluster();
    fx->nodes[1].gpu_first = 4; /* node 0 holds GPUs 0..7 */
    expect_cluster_bad(&fx->c, GPO_EINVAL, "gpu range");
    fx->nodes[1].gpu_first = 0; /* the very same GPUs */
    expect_cluster_bad(&fx->c, GPO_EINVAL, "gpu range");
}

static void cluster_check_rejects_gpu_range_past_array(void **state)
{
    struct fx *fx = *state = cluster();
    fx->nodes[3].ngpus = 5; /* GPUs 16..20 of 20 */
    expect_cluster_bad(&fx->c, GPO_EINVAL, "gpu range");
    fx->nodes[3].ngpus = 4;
    fx->nodes[3].gpu_first = UINT32_MAX - 1; /* wraps if added naively */
    expect_cluster_bad(&fx->c, GPO_EINVAL, "gpu range");
}

static void cluster_check_rejects_too_many_gpus_on_a_node(void **state)
{
    struct fx *fx = *state = cluster();
    fx->nodes[0].ngpus = SCHED_MAX_GPUS_PER_NODE + 1;
    expect_cluster_bad(&fx->c, GPO_E2BIG, "GPUs");
}

static void cluster_check_rejects_counts_over_limits(void **state)
{
    struct fx *fx = *state = cluster();
    uint32_t saved = fx->c.nteams;
    fx->c.nteams = SCHED_MAX_TEAMS + 1;
    expect_cluster_bad(&fx->c, GPO_E2BIG, "limit");
    fx->c.nteams = saved;
    saved = fx->c.npools;
    fx->c.npools = SCHED_MAX_POOLS + 1;
    expect_cluster_bad(&fx->c, GPO_E2BIG, "limit");
    fx->c.npools = saved;
    saved = fx->c.nclasses;
    fx->c.nclasses = SCHED_MAX_CLASSES + 1;
    expect_cluster_bad(&fx->c, GPO_E2BIG, "limit");
    fx->c.nclasses = saved;
    fx->c.ngpu_types = SCHED_MAX_GPU_TYPES + 1;
    expect_cluster_bad(&fx->c, GPO_E2BIG, "limit");
}

static void cluster_check_rejects_null_array_with_count(void **state)
{
    struct fx *fx = *state = cluster();
    fx->c.gpus = NULL;
    expect_cluster_bad(&fx->c, GPO_EINVAL, "NULL");
    fx->c.gpus = fx->gpus;
    fx->c.teams = NULL;
    expect_cluster_bad(&fx->c, GPO_EINVAL, "NULL");
}

static void cluster_check_rejects_gpu_type_out_of_range(void **state)
{
    struct fx *fx = *state = cluster();
    fx->gpus[0].type = 2;
    expect_cluster_bad(&fx->c, GPO_EINVAL, "type");
}

static void cluster_check_rejects_mixed_gpu_types_on_a_node(void **state)
{
    struct fx *fx = *state = cluster();
    fx->gpus[11].type = 1; /* an A100 among node 1's H100s */
    expect_cluster_bad(&fx->c, GPO_EINVAL, "different types");
}

static void cluster_check_rejects_gpu_without_memory(void **state)
{
    struct fx *fx = *state = cluster();
    fx->gpus[17].mem_mib = 0;
    expect_cluster_bad(&fx->c, GPO_EINVAL, "memory");
}

static void cluster_check_rejects_team_weight_zero(void **state)
{
    struct fx *fx = *state = cluster();
    fx->teams[1].weight = 0;
    expect_cluster_bad(&fx->c, GPO_EINVAL, "weight");
}

static void cluster_check_rejects_team_borrow_limit_below_minus_one(void **state)
{
    struct fx *fx = *state = cluster();
    fx->teams[0].borrow_limit_milli = -2;
    expect_cluster_bad(&fx->c, GPO_EINVAL, "borrow_limit");
}

static void cluster_check_rejects_team_quotas_null(void **state)
{
    struct fx *fx = *state = cluster();
    fx->teams[1].quotas = NULL;
    expect_cluster_bad(&fx->c, GPO_EINVAL, "quotas");
}

static void cluster_check_rejects_quota_index_out_of_range(void **state)
{
    struct fx *fx = *state = cluster();
    fx->quotas[1][1].pool = 2;
    expect_cluster_bad(&fx->c, GPO_EINVAL, "quota: pool");
    fx->quotas[1][1].pool = 1;
    fx->quotas[1][1].gpu_type = SCHED_ANY;
    expect_cluster_bad(&fx->c, GPO_EINVAL, "gpu_type");
}

static void cluster_check_rejects_negative_guarantee(void **state)
{
    struct fx *fx = *state = cluster();
    fx->quotas[1][0].guaranteed_milli = -1000;
    expect_cluster_bad(&fx->c, GPO_EINVAL, "negative guarantee");
    fx->quotas[1][0].guaranteed_milli = 4000;
    fx->quotas[1][0].borrow_limit_milli = -2;
    expect_cluster_bad(&fx->c, GPO_EINVAL, "negative");
}

static void cluster_check_rejects_duplicate_quota_entries(void **state)
{
    struct fx *fx = *state = cluster();
    fx_quota(fx, 1, 0, 0, 1000, 0); /* main/H100 again */
    expect_cluster_bad(&fx->c, GPO_EINVAL, "two entries");
}

/* ---- sched_policy_check ---- */

static void policy_check_accepts_default(void **unused)
{
    (void)unused;
    struct sched_policy p;
    sched_policy_default(&p);
    assert_int_equal(sched_policy_check(&p, NULL), 0);
    assert_int_equal(p.order, SCHED_ORDER_FAIRSHARE);
    assert_int_equal(p.packing, SCHED_PACK_BINPACK);
    assert_true(p.backfill);
    assert_true(p.preemption);
    assert_int_equal(p.nlas_thresholds, 3);
    assert_int_equal(p.las_thresholds_gpu_ms[2], 400 * 3600 * 1000LL);
    assert_int_equal(p.preempt_grace_ms, 30000);
}

static void policy_check_accepts_edge_values(void **unused)
{
    (void)unused;
    struct sched_policy p;
    sched_policy_default(&p);
    p.preempt_grace_ms = 0;          /* kill at once */
    p.nlas_thresholds = 0;           /* one LAS queue */
    p.las_thresholds_gpu_ms[0] = -5; /* unused entries are not checked */
    assert_int_equal(sched_policy_check(&p, NULL), 0);
    p.nlas_thresholds = SCHED_LAS_MAX_QUEUES - 1;
    for (uint32_t i = 0; i < p.nlas_thresholds; i++)
        p.las_thresholds_gpu_ms[i] = 1000 * (int64_t)(i + 1);
    assert_int_equal(sched_policy_check(&p, NULL), 0);
}

static void policy_check_rejects_null(void **unused)
{
    (void)unused;
    const char *what = NULL;
    assert_int_equal(sched_policy_check(NULL, &what), GPO_EINVAL);
    assert_string_equal(what, "policy");
}

static void policy_check_rejects_unknown_order_and_packing(void **unused)
{
    (void)unused;
    struct sched_policy p;
    sched_policy_default(&p);
    p.order = (enum sched_order)4;
    expect_policy_bad(&p, "order");
    sched_policy_default(&p);
    p.packing = (enum sched_packing)2;
    expect_policy_bad(&p, "packing");
    sched_policy_default(&p);
    p.within = (enum sched_within)2;
    expect_policy_bad(&p, "within");
}

static void policy_check_rejects_non_positive_half_life(void **unused)
{
    (void)unused;
    struct sched_policy p;
    sched_policy_default(&p);
    p.fairshare_half_life_ms = 0;
    expect_policy_bad(&p, "fairshare_half_life_ms");
    p.fairshare_half_life_ms = -1;
    expect_policy_bad(&p, "fairshare_half_life_ms");
}

static void policy_check_rejects_bad_las_thresholds(void **unused)
{
    (void)unused;
    struct sched_policy p;
    sched_policy_default(&p);
    p.nlas_thresholds = SCHED_LAS_MAX_QUEUES;
    expect_policy_bad(&p, "nlas_thresholds");

    sched_policy_default(&p);
    p.las_thresholds_gpu_ms[0] = 0; /* must be > 0 */
    expect_policy_bad(&p, "las_thresholds_gpu_ms");

    sched_policy_default(&p);
    p.las_thresholds_gpu_ms[1] = p.las_thresholds_gpu_ms[0]; /* must increase strictly */
    expect_policy_bad(&p, "las_thresholds_gpu_ms");

    sched_policy_default(&p);
    p.las_thresholds_gpu_ms[1] = p.las_thresholds_gpu_ms[0] - 1;
    expect_policy_bad(&p, "las_thresholds_gpu_ms");
}

static void policy_check_rejects_negative_grace_and_zero_default_limit(void **unused)
{
    (void)unused;
    struct sched_policy p;
    sched_policy_default(&p);
    p.preempt_grace_ms = -1;
    expect_policy_bad(&p, "preempt_grace_ms");
    sched_policy_default(&p);
    p.default_time_limit_ms = 0;
    expect_policy_bad(&p, "default_time_limit_ms");
}

/* ---- names ---- */

static void order_names_parse_back(void **unused)
{
    (void)unused;
    static const enum sched_order all[] = {SCHED_ORDER_FIFO, SCHED_ORDER_PRIORITY,
                                           SCHED_ORDER_FAIRSHARE, SCHED_ORDER_LAS};
    static const char *const names[] = {"fifo", "priority", "fairshare", "las"};
    for (size_t i = 0; i < 4; i++) {
        assert_string_equal(sched_order_name(all[i]), names[i]);
        enum sched_order o = (enum sched_order)99;
        assert_int_equal(sched_order_parse(names[i], &o), 0);
        assert_int_equal(o, all[i]);
    }
    assert_string_equal(sched_order_name((enum sched_order)99), "unknown");
}

static void order_parse_rejects_unknown_and_leaves_output(void **unused)
{
    (void)unused;
    enum sched_order o = SCHED_ORDER_LAS;
    assert_int_equal(sched_order_parse("lottery", &o), GPO_EINVAL);
    assert_int_equal(sched_order_parse("", &o), GPO_EINVAL);
    assert_int_equal(sched_order_parse("fifo ", &o), GPO_EINVAL);
    assert_int_equal(sched_order_parse(NULL, &o), GPO_EINVAL);
    assert_int_equal(o, SCHED_ORDER_LAS);
}

static void packing_names_parse_back(void **unused)
{
    (void)unused;
    enum sched_packing p = SCHED_PACK_SPREAD;
    assert_int_equal(sched_packing_parse("binpack", &p), 0);
    assert_int_equal(p, SCHED_PACK_BINPACK);
    assert_int_equal(sched_packing_parse("spread", &p), 0);
    assert_int_equal(p, SCHED_PACK_SPREAD);
    assert_string_equal(sched_packing_name(SCHED_PACK_BINPACK), "binpack");
    assert_string_equal(sched_packing_name(SCHED_PACK_SPREAD), "spread");
    assert_string_equal(sched_packing_name((enum sched_packing)7), "unknown");
}

static void packing_parse_rejects_unknown_and_leaves_output(void **unused)
{
    (void)unused;
    enum sched_packing p = SCHED_PACK_SPREAD;
    assert_int_equal(sched_packing_parse("pack", &p), GPO_EINVAL);
    assert_int_equal(sched_packing_parse("fifo", &p), GPO_EINVAL);
    assert_int_equal(sched_packing_parse(NULL, &p), GPO_EINVAL);
    assert_int_equal(p, SCHED_PACK_SPREAD);
}

static void within_names_parse_back_and_reject_unknown(void **unused)
{
    (void)unused;
    enum sched_within w = SCHED_WITHIN_LAS;
    assert_int_equal(sched_within_parse("submit", &w), 0);
    assert_int_equal(w, SCHED_WITHIN_SUBMIT);
    assert_int_equal(sched_within_parse("las", &w), 0);
    assert_int_equal(w, SCHED_WITHIN_LAS);
    assert_string_equal(sched_within_name(SCHED_WITHIN_SUBMIT), "submit");
    assert_string_equal(sched_within_name(SCHED_WITHIN_LAS), "las");
    assert_string_equal(sched_within_name((enum sched_within)9), "unknown");
    assert_int_equal(sched_within_parse("fifo", &w), GPO_EINVAL);
    assert_int_equal(sched_within_parse(NULL, &w), GPO_EINVAL);
    assert_int_equal(w, SCHED_WITHIN_LAS);
}

/* ---- lookups ---- */

static void find_returns_index_by_name(void **state)
{
    struct fx *fx = *state = cluster();
    assert_int_equal(sched_pool_find(&fx->c, "main"), 0);
    assert_int_equal(sched_pool_find(&fx->c, "spare"), 1);
    assert_int_equal(sched_gpu_type_find(&fx->c, "A100-40GB"), 1);
    assert_int_equal(sched_team_find(&fx->c, "b"), 1);
    assert_int_equal(sched_class_find(&fx->c, "low"), 2);
}

static void find_returns_enotfound_for_unknown_names(void **state)
{
    struct fx *fx = *state = cluster();
    assert_int_equal(sched_pool_find(&fx->c, "Main"), GPO_ENOENT);
    assert_int_equal(sched_gpu_type_find(&fx->c, "H100"), GPO_ENOENT);
    assert_int_equal(sched_team_find(&fx->c, ""), GPO_ENOENT);
    assert_int_equal(sched_class_find(&fx->c, NULL), GPO_ENOENT);
    assert_int_equal(sched_team_find(NULL, "a"), GPO_ENOENT);
    /* A nameless entry is skipped, not matched or dereferenced. */
    fx->teams[0].name = NULL;
    assert_int_equal(sched_team_find(&fx->c, "b"), 1);
}

static void team_quota_finds_entry_for_pool_and_type(void **state)
{
    struct fx *fx = *state = cluster();
    const struct sched_quota *q = sched_team_quota(&fx->teams[1], 1, 1);
    assert_non_null(q);
    assert_int_equal(q->guaranteed_milli, 1000);
    q = sched_team_quota(&fx->teams[1], 0, 0);
    assert_non_null(q);
    assert_int_equal(q->guaranteed_milli, 4000);
    assert_null(sched_team_quota(&fx->teams[1], 0, 1)); /* no entry: guarantee 0 */
    assert_null(sched_team_quota(&fx->teams[0], 0, 0));
}

/* ---- claims ---- */

static struct sched_job gpu_job(int32_t gpus, int32_t milli, int64_t mem)
{
    return (struct sched_job){.id = 1, .gpus = gpus, .gpu_milli = milli, .gpu_mem_mib = mem};
}

static void claim_of_whole_gpu_takes_all_compute_and_memory(void **unused)
{
    (void)unused;
    struct sched_gpu gpu = {.mem_mib = 81920};
    struct sched_job j = gpu_job(4, 0, 0);
    uint32_t milli = 1, mem = 1;
    sched_job_gpu_claim(&j, &gpu, &milli, &mem);
    assert_int_equal(milli, SCHED_MILLI);
    assert_int_equal(mem, 81920);
    assert_int_equal(sched_job_milli(&j, 81920), 4000);
}

static void claim_of_fraction_takes_that_share_of_memory(void **unused)
{
    (void)unused;
    struct sched_gpu gpu = {.mem_mib = 81920};
    struct sched_job j = gpu_job(0, 250, 0);
    uint32_t milli, mem;
    sched_job_gpu_claim(&j, &gpu, &milli, &mem);
    assert_int_equal(milli, 250);
    assert_int_equal(mem, 20480);
    /* Memory share rounds down: 333/1000 of 40000 MiB is 13320. */
    gpu.mem_mib = 40000;
    j.gpu_milli = 333;
    sched_job_gpu_claim(&j, &gpu, &milli, &mem);
    assert_int_equal(milli, 333);
    assert_int_equal(mem, 13320);
    assert_int_equal(sched_job_milli(&j, 40000), 333);
}

static void claim_of_memory_takes_its_share_of_compute_rounded_up(void **unused)
{
    (void)unused;
    struct sched_gpu gpu = {.mem_mib = 81920};
    struct sched_job j = gpu_job(0, 0, 20000);
    uint32_t milli, mem;
    sched_job_gpu_claim(&j, &gpu, &milli, &mem);
    assert_int_equal(milli, 245); /* 20000/81920 = 0.2441 -> 245 */
    assert_int_equal(mem, 20000);
    /* Exactly a quarter: no rounding. */
    j.gpu_mem_mib = 20480;
    sched_job_gpu_claim(&j, &gpu, &milli, &mem);
    assert_int_equal(milli, 250);
    assert_int_equal(mem, 20480);
    /* The same request is a larger share of a smaller GPU. */
    assert_int_equal(sched_job_milli(&j, 40960), 500);
}

static void claim_of_more_memory_than_gpu_is_capped_at_whole_gpu(void **unused)
{
    (void)unused;
    struct sched_gpu gpu = {.mem_mib = 40960};
    struct sched_job j = gpu_job(0, 0, 100000);
    uint32_t milli, mem;
    sched_job_gpu_claim(&j, &gpu, &milli, &mem);
    assert_int_equal(milli, SCHED_MILLI);
    assert_int_equal(mem, 40960);
}

static void claim_of_cpu_only_job_is_zero(void **unused)
{
    (void)unused;
    struct sched_gpu gpu = {.mem_mib = 81920};
    struct sched_job j = gpu_job(0, 0, 0);
    uint32_t milli = 7, mem = 7;
    sched_job_gpu_claim(&j, &gpu, &milli, &mem);
    assert_int_equal(milli, 0);
    assert_int_equal(mem, 0);
    assert_int_equal(sched_job_milli(&j, 81920), 0);
}

/* ---- sched_pass argument errors ---- */

/* A copy of everything the state holds, to prove an error left it alone. */
struct snap {
    int64_t last_pass_ms;
    const void *usage, *attained, *claims;
    size_t nusage, nattained, nclaims;
    struct sched_usage u[16];
    struct sched_attained a[16];
    struct sched_claim cl[4];
};

static void snap_take(struct snap *s, const struct sched_state *st)
{
    memset(s, 0, sizeof(*s));
    assert_true(st->nusage <= 16 && st->nattained <= 16 && st->nclaims <= 4);
    s->last_pass_ms = st->last_pass_ms;
    s->usage = st->usage;
    s->attained = st->attained;
    s->claims = st->claims;
    s->nusage = st->nusage;
    s->nattained = st->nattained;
    s->nclaims = st->nclaims;
    if (st->nusage)
        memcpy(s->u, st->usage, st->nusage * sizeof(*st->usage));
    if (st->nattained)
        memcpy(s->a, st->attained, st->nattained * sizeof(*st->attained));
    if (st->nclaims)
        memcpy(s->cl, st->claims, st->nclaims * sizeof(*st->claims));
}

static void snap_same(const struct snap *s, const struct sched_state *st)
{
    struct snap now;
    snap_take(&now, st);
    assert_int_equal(now.last_pass_ms, s->last_pass_ms);
    assert_ptr_equal(now.usage, s->usage);
    assert_ptr_equal(now.attained, s->attained);
    assert_ptr_equal(now.claims, s->claims);
    assert_int_equal(now.nusage, s->nusage);
    assert_int_equal(now.nattained, s->nattained);
    assert_int_equal(now.nclaims, s->nclaims);
    assert_memory_equal(now.u, s->u, sizeof(s->u));
    assert_memory_equal(now.a, s->a, sizeof(s->a));
    assert_memory_equal(now.cl, s->cl, sizeof(s->cl));
}

/* One 2-GPU node; two low jobs run since 1000 and a high job has preempted
 * one of them at 5000, so the state holds usage, attained service and a claim;
 * job 4 waits. The last result holds a preemption and waits. */
static struct fx *busy(void)
{
    struct fx *fx = fx_new();
    uint32_t pool = fx_pool(fx, "main");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, 1, pool, h100, 2, 81920, 16, 64 * 1024);
    fx_team(fx, "a", 1, -1);
    fx_class(fx, "normal", 10, false);
    fx_class(fx, "high", 20, true);
    fx_class(fx, "low", 0, false);
    fx_job(fx, 1)->prio = 2;
    fx_job(fx, 2)->prio = 2;
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx->res.nstarts, 2);
    fx_job(fx, 3)->prio = 1;
    fx_job(fx, 4)->prio = 0;
    assert_int_equal(fx_step(fx, 5000), 0);
    assert_int_equal(fx->res.npreempts, 1);
    assert_int_equal(fx->st.nclaims, 1);
    assert_int_equal(fx->st.nattained, 2);
    assert_true(fx->st.nusage >= 1);
    assert_int_equal(fx->st.last_pass_ms, 5000);
    return fx;
}

static void expect_pass_error(struct fx *fx, const struct sched_cluster *c,
                              const struct sched_queue *q, const struct sched_running_set *r,
                              const struct sched_policy *pol, int64_t now, int err)
{
    struct snap before;
    snap_take(&before, &fx->st);
    assert_true(fx->res.nwaits > 0 || fx->res.nstarts > 0 || fx->res.npreempts > 0);
    assert_int_equal(sched_pass(c, q, r, pol, &fx->st, now, &fx->res), err);
    snap_same(&before, &fx->st);
    /* The result is emptied. */
    assert_int_equal(fx->res.nstarts, 0);
    assert_int_equal(fx->res.npreempts, 0);
    assert_int_equal(fx->res.nreserves, 0);
    assert_int_equal(fx->res.nwaits, 0);
}

/* Refills the result with a real pass so the next error has something to empty. */
static void refill(struct fx *fx)
{
    struct sched_queue q;
    struct sched_running_set r;
    fx_collect(fx, &q, &r);
    struct sched_state copy;
    sched_state_init(&copy);
    /* A pass on a scratch state: the fixture's state must stay as busy() left it. */
    for (size_t k = 0; k < fx->st.nusage; k++)
        assert_int_equal(sched_state_add_usage(&copy, fx->st.usage[k].team_id,
                                               fx->st.usage[k].gpu_type_id, fx->st.usage[k].gpu_ms),
                         0);
    assert_int_equal(sched_pass(&fx->c, &q, &r, &fx->pol, &copy, 6000, &fx->res), 0);
    assert_true(fx->res.nwaits > 0);
    sched_state_release(&copy);
}

static void pass_rejects_null_arguments(void **state)
{
    struct fx *fx = *state = busy();
    struct sched_queue q;
    struct sched_running_set r;
    fx_collect(fx, &q, &r);
    expect_pass_error(fx, NULL, &q, &r, &fx->pol, 6000, GPO_EINVAL);
    refill(fx);
    expect_pass_error(fx, &fx->c, NULL, &r, &fx->pol, 6000, GPO_EINVAL);
    refill(fx);
    expect_pass_error(fx, &fx->c, &q, NULL, &fx->pol, 6000, GPO_EINVAL);
    refill(fx);
    expect_pass_error(fx, &fx->c, &q, &r, NULL, 6000, GPO_EINVAL);
    /* NULL state and NULL result. */
    assert_int_equal(sched_pass(&fx->c, &q, &r, &fx->pol, NULL, 6000, &fx->res), GPO_EINVAL);
    assert_int_equal(sched_pass(&fx->c, &q, &r, &fx->pol, &fx->st, 6000, NULL), GPO_EINVAL);
    /* A count with a NULL array. */
    refill(fx);
    struct sched_queue nq = {NULL, 1};
    expect_pass_error(fx, &fx->c, &nq, &r, &fx->pol, 6000, GPO_EINVAL);
    refill(fx);
    struct sched_running_set nr = {NULL, 1};
    expect_pass_error(fx, &fx->c, &q, &nr, &fx->pol, 6000, GPO_EINVAL);
}

static void pass_rejects_job_id_both_queued_and_running(void **state)
{
    struct fx *fx = *state = busy();
    struct sched_queue q;
    struct sched_running_set r;
    fx_collect(fx, &q, &r);
    fx->queue[fx->nqueue] = fx->queue[0];
    fx->queue[fx->nqueue].id = 1; /* job 1 is running */
    q.njobs = fx->nqueue + 1;
    expect_pass_error(fx, &fx->c, &q, &r, &fx->pol, 6000, GPO_EINVAL);
}

static void pass_rejects_job_id_queued_twice(void **state)
{
    struct fx *fx = *state = busy();
    struct sched_queue q;
    struct sched_running_set r;
    fx_collect(fx, &q, &r);
    fx->queue[fx->nqueue] = fx->queue[0];
    q.njobs = fx->nqueue + 1;
    expect_pass_error(fx, &fx->c, &q, &r, &fx->pol, 6000, GPO_EINVAL);
}

static void pass_rejects_job_id_running_twice(void **state)
{
    struct fx *fx = *state = busy();
    struct sched_queue q;
    struct sched_running_set r;
    fx_collect(fx, &q, &r);
    struct sched_job twin = *fx->running[1].job;
    twin.id = fx->running[0].job->id;
    fx->running[1].job = &twin;
    expect_pass_error(fx, &fx->c, &q, &r, &fx->pol, 6000, GPO_EINVAL);
}

static void pass_rejects_running_alloc_with_gpu_out_of_range(void **state)
{
    struct fx *fx = *state = busy();
    struct sched_queue q;
    struct sched_running_set r;
    fx_collect(fx, &q, &r);
    struct sched_share bad = fx->running[0].alloc.shares[0];
    bad.gpu = fx->c.ngpus; /* one past the last GPU */
    fx->running[0].alloc.shares = &bad;
    expect_pass_error(fx, &fx->c, &q, &r, &fx->pol, 6000, GPO_EINVAL);
}

static void pass_rejects_running_alloc_with_node_out_of_range(void **state)
{
    struct fx *fx = *state = busy();
    struct sched_queue q;
    struct sched_running_set r;
    fx_collect(fx, &q, &r);
    struct sched_node_part bad = fx->running[1].alloc.nodes[0];
    bad.node = 5;
    fx->running[1].alloc.nodes = &bad;
    expect_pass_error(fx, &fx->c, &q, &r, &fx->pol, 6000, GPO_EINVAL);
}

/* sched.h: GPO_EINVAL for "a running job whose allocation is out of range or
 * over a node's capacity". Two running jobs both holding all of GPU 0 are. */
/* A running allocation over what a GPU or node has (a double booking, a node
 * that shrank) must not stop the cluster's scheduling: the pass succeeds,
 * reports the job, and starts nothing more there. */
static void pass_reports_running_allocs_over_gpu_capacity(void **state)
{
    struct fx *fx = *state = busy();
    struct sched_queue q;
    struct sched_running_set r;
    fx_collect(fx, &q, &r);
    assert_int_not_equal(fx->running[0].alloc.shares[0].gpu, fx->running[1].alloc.shares[0].gpu);
    fx->running[1].alloc.shares = fx->running[0].alloc.shares;
    assert_int_equal(sched_pass(&fx->c, &q, &r, &fx->pol, &fx->st, 6000, &fx->res), 0);
    assert_int_equal(fx->res.novercommitted, 1);
    assert_int_equal(fx->res.overcommitted[0], fx->running[1].job->id);
    /* The other GPU of the node is free in truth, but the double-booked one is
     * full: whatever starts, nothing lands on the double-booked GPU. */
    for (size_t k = 0; k < fx->res.nstarts; k++) {
        for (uint32_t g = 0; g < fx->res.starts[k].alloc.nshares; g++)
            assert_int_not_equal(fx->res.starts[k].alloc.shares[g].gpu,
                                 fx->running[0].alloc.shares[0].gpu);
    }
}

static void pass_reports_running_alloc_over_node_cpus(void **state)
{
    struct fx *fx = *state = busy();
    struct sched_queue q;
    struct sched_running_set r;
    fx_collect(fx, &q, &r);
    struct sched_node_part big = fx->running[0].alloc.nodes[0];
    big.cpus = fx->nodes[0].cpus + 1;
    fx->running[0].alloc.nodes = &big;
    assert_int_equal(sched_pass(&fx->c, &q, &r, &fx->pol, &fx->st, 6000, &fx->res), 0);
    /* The node is over: the job that took too much is reported (and, since the
     * node is then full, any job counted after it on that node). */
    assert_true(fx->res.novercommitted >= 1);
    assert_int_equal(fx->res.overcommitted[0], fx->running[0].job->id);
    /* The node has no CPU left: nothing starts on it. */
    assert_int_equal(fx->res.nstarts, 0);
}

static void pass_rejects_running_job_null_or_unknown_team(void **state)
{
    struct fx *fx = *state = busy();
    struct sched_queue q;
    struct sched_running_set r;
    fx_collect(fx, &q, &r);
    const struct sched_job *saved = fx->running[0].job;
    fx->running[0].job = NULL;
    expect_pass_error(fx, &fx->c, &q, &r, &fx->pol, 6000, GPO_EINVAL);
    refill(fx);
    struct sched_job stray = *saved;
    stray.team = 3;
    fx->running[0].job = &stray;
    expect_pass_error(fx, &fx->c, &q, &r, &fx->pol, 6000, GPO_EINVAL);
}

static void pass_rejects_now_before_last_pass(void **state)
{
    struct fx *fx = *state = busy();
    struct sched_queue q;
    struct sched_running_set r;
    fx_collect(fx, &q, &r);
    expect_pass_error(fx, &fx->c, &q, &r, &fx->pol, 4999, GPO_EINVAL);
    refill(fx);
    expect_pass_error(fx, &fx->c, &q, &r, &fx->pol, -1, GPO_EINVAL);
    /* `now` equal to the last pass is allowed. */
    assert_int_equal(sched_pass(&fx->c, &q, &r, &fx->pol, &fx->st, 5000, &fx->res), 0);
    assert_int_equal(fx->st.last_pass_ms, 5000);
}

static void pass_rejects_invalid_cluster_or_policy(void **state)
{
    struct fx *fx = *state = busy();
    struct sched_queue q;
    struct sched_running_set r;
    fx_collect(fx, &q, &r);
    struct sched_policy pol = fx->pol;
    pol.fairshare_half_life_ms = 0;
    expect_pass_error(fx, &fx->c, &q, &r, &pol, 6000, GPO_EINVAL);
    refill(fx);
    fx->teams[0].weight = 0;
    expect_pass_error(fx, &fx->c, &q, &r, &fx->pol, 6000, GPO_EINVAL);
}

/* Public entry points answer NULL with an error or a neutral value, never a crash. */
static void entry_points_reject_null_arguments(void **unused)
{
    (void)unused;
    struct sched_gpu gpu = {.mem_mib = 1000};
    struct sched_job job = {.gpu_milli = 500};
    uint32_t milli = 7, mem = 7;
    assert_null(sched_team_quota(NULL, 0, 0));
    assert_int_equal(sched_job_milli(NULL, 1000), GPO_EINVAL);
    sched_job_gpu_claim(NULL, &gpu, &milli, &mem);
    sched_job_gpu_claim(&job, NULL, &milli, &mem);
    sched_job_gpu_claim(&job, &gpu, NULL, &mem);
    assert_int_equal(milli, 7);
    assert_int_equal(mem, 7);
    assert_int_equal(sched_state_attained(NULL, 1), 0);
    assert_int_equal(sched_state_add_usage(NULL, 1, 1, 1.0), GPO_EINVAL);
    assert_int_equal(sched_state_add_attained(NULL, 1, 1), GPO_EINVAL);
    sched_state_init(NULL);
    sched_state_release(NULL);
    sched_result_init(NULL);
    sched_result_release(NULL);
    assert_int_equal(sched_cluster_check(NULL, NULL), GPO_EINVAL);
    assert_int_equal(sched_policy_check(NULL, NULL), GPO_EINVAL);
    assert_true(sched_pool_find(NULL, "main") < 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(entry_points_reject_null_arguments),
        cmocka_unit_test_teardown(cluster_check_accepts_valid_cluster, fx_teardown),
        cmocka_unit_test(cluster_check_accepts_empty_cluster),
        cmocka_unit_test(cluster_check_rejects_null_cluster),
        cmocka_unit_test_teardown(cluster_check_rejects_node_pool_out_of_range, fx_teardown),
        cmocka_unit_test_teardown(cluster_check_rejects_bad_node_state, fx_teardown),
        cmocka_unit_test_teardown(cluster_check_rejects_overlapping_gpu_ranges, fx_teardown),
        cmocka_unit_test_teardown(cluster_check_rejects_gpu_range_past_array, fx_teardown),
        cmocka_unit_test_teardown(cluster_check_rejects_too_many_gpus_on_a_node, fx_teardown),
        cmocka_unit_test_teardown(cluster_check_rejects_counts_over_limits, fx_teardown),
        cmocka_unit_test_teardown(cluster_check_rejects_null_array_with_count, fx_teardown),
        cmocka_unit_test_teardown(cluster_check_rejects_gpu_type_out_of_range, fx_teardown),
        cmocka_unit_test_teardown(cluster_check_rejects_mixed_gpu_types_on_a_node, fx_teardown),
        cmocka_unit_test_teardown(cluster_check_rejects_gpu_without_memory, fx_teardown),
        cmocka_unit_test_teardown(cluster_check_rejects_team_weight_zero, fx_teardown),
        cmocka_unit_test_teardown(cluster_check_rejects_team_borrow_limit_below_minus_one,
                                  fx_teardown),
        cmocka_unit_test_teardown(cluster_check_rejects_team_quotas_null, fx_teardown),
        cmocka_unit_test_teardown(cluster_check_rejects_quota_index_out_of_range, fx_teardown),
        cmocka_unit_test_teardown(cluster_check_rejects_negative_guarantee, fx_teardown),
        cmocka_unit_test_teardown(cluster_check_rejects_duplicate_quota_entries, fx_teardown),
        cmocka_unit_test(policy_check_accepts_default),
        cmocka_unit_test(policy_check_accepts_edge_values),
        cmocka_unit_test(policy_check_rejects_null),
        cmocka_unit_test(policy_check_rejects_unknown_order_and_packing),
        cmocka_unit_test(policy_check_rejects_non_positive_half_life),
        cmocka_unit_test(policy_check_rejects_bad_las_thresholds),
        cmocka_unit_test(policy_check_rejects_negative_grace_and_zero_default_limit),
        cmocka_unit_test(order_names_parse_back),
        cmocka_unit_test(order_parse_rejects_unknown_and_leaves_output),
        cmocka_unit_test(packing_names_parse_back),
        cmocka_unit_test(packing_parse_rejects_unknown_and_leaves_output),
        cmocka_unit_test(within_names_parse_back_and_reject_unknown),
        cmocka_unit_test_teardown(find_returns_index_by_name, fx_teardown),
        cmocka_unit_test_teardown(find_returns_enotfound_for_unknown_names, fx_teardown),
        cmocka_unit_test_teardown(team_quota_finds_entry_for_pool_and_type, fx_teardown),
        cmocka_unit_test(claim_of_whole_gpu_takes_all_compute_and_memory),
        cmocka_unit_test(claim_of_fraction_takes_that_share_of_memory),
        cmocka_unit_test(claim_of_memory_takes_its_share_of_compute_rounded_up),
        cmocka_unit_test(claim_of_more_memory_than_gpu_is_capped_at_whole_gpu),
        cmocka_unit_test(claim_of_cpu_only_job_is_zero),
        cmocka_unit_test_teardown(pass_rejects_null_arguments, fx_teardown),
        cmocka_unit_test_teardown(pass_rejects_job_id_both_queued_and_running, fx_teardown),
        cmocka_unit_test_teardown(pass_rejects_job_id_queued_twice, fx_teardown),
        cmocka_unit_test_teardown(pass_rejects_job_id_running_twice, fx_teardown),
        cmocka_unit_test_teardown(pass_rejects_running_alloc_with_gpu_out_of_range, fx_teardown),
        cmocka_unit_test_teardown(pass_rejects_running_alloc_with_node_out_of_range, fx_teardown),
        cmocka_unit_test_teardown(pass_reports_running_allocs_over_gpu_capacity, fx_teardown),
        cmocka_unit_test_teardown(pass_reports_running_alloc_over_node_cpus, fx_teardown),
        cmocka_unit_test_teardown(pass_rejects_running_job_null_or_unknown_team, fx_teardown),
        cmocka_unit_test_teardown(pass_rejects_now_before_last_pass, fx_teardown),
        cmocka_unit_test_teardown(pass_rejects_invalid_cluster_or_policy, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

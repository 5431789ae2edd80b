/* test_apply.c - the run table (core/apply.h): decisions applied in job-id
 * order with the table's own allocations, the table as the next pass's
 * running set, ends charged as sched_state_charge_end charges them, and every
 * failure (a bad decision, out of memory) leaving the table as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "base/err.h"
#include "core/apply.h"
#include "core/sched.h"
#include "fixture.h"

#define HOUR_MS (3600 * 1000)

/* One pool of `nodes` nodes with 8 H100s each, teams a and b, one class. */
static struct fx *cluster(uint32_t nodes)
{
    struct fx *fx = fx_new();
    uint32_t pool = fx_pool(fx, "main");
    uint32_t h100 = fx_type(fx, "H100-80GB");
    fx_nodes(fx, nodes, pool, h100, 8, 81920, 64, 512 * 1024);
    fx_team(fx, "a", 1, -1);
    fx_team(fx, "b", 1, -1);
    fx_class(fx, "normal", 10, true);
    return fx;
}

/* sched_job_lookup_fn over the fixture's jobs. */
static const struct sched_job *lookup(void *ctx, uint64_t id)
{
    struct fx_job *j = fx_get(ctx, id);
    return j ? &j->req : NULL;
}

static void assert_id_order(const struct sched_run_table *t)
{
    for (size_t k = 1; k < t->n; k++)
        assert_true(t->runs[k - 1].job->id < t->runs[k].job->id);
}

/* A start of `job` on `ngpus` GPUs from `first` of node 0, in caller memory. */
struct start_buf {
    struct sched_node_part part;
    struct sched_share shares[8];
    struct sched_start start;
};

static void start_make(struct start_buf *b, uint64_t job, uint32_t first, uint32_t ngpus)
{
    b->part = (struct sched_node_part){0, ngpus, 1024};
    for (uint32_t k = 0; k < ngpus; k++)
        b->shares[k] = (struct sched_share){first + k, SCHED_MILLI, 81920};
    b->start = (struct sched_start){job, {&b->part, 1, b->shares, ngpus}, false};
}

static void starts_land_in_id_order_with_their_own_allocation(void **unused)
{
    (void)unused;
    struct sched_run_table t;
    sched_run_table_init(&t);
    struct sched_job reqs[4];
    struct start_buf b[4];
    uint64_t order[4] = {30, 10, 40, 20};
    for (int k = 0; k < 4; k++) {
        reqs[k] = (struct sched_job){.id = order[k], .gpus = 2};
        start_make(&b[k], order[k], (uint32_t)(2 * k), 2);
        assert_int_equal(sched_apply_start(&t, &reqs[k], &b[k].start, 5000), 0);
    }
    assert_int_equal(t.n, 4);
    assert_id_order(&t);
    const struct sched_running *r = sched_run_table_find(&t, 30);
    assert_non_null(r);
    assert_ptr_equal(r->job, &reqs[0]);
    assert_int_equal(r->start_ms, 5000);
    assert_int_equal(r->checkpoint_ms, 5000);
    assert_false(r->preempting);
    /* The table's allocation is a copy: the caller's memory may go. */
    assert_ptr_not_equal(r->alloc.shares, b[0].shares);
    memset(&b[0], 0xff, sizeof(b[0]));
    assert_int_equal(r->alloc.nshares, 2);
    assert_int_equal(r->alloc.shares[0].gpu, 0);
    assert_int_equal(r->alloc.shares[1].gpu, 1);
    assert_int_equal(r->alloc.nodes[0].cpus, 2);
    assert_null(sched_run_table_find(&t, 25));
    struct sched_running_set rs = sched_run_table_view(&t);
    assert_ptr_equal(rs.jobs, t.runs);
    assert_int_equal(rs.njobs, 4);
    sched_run_table_release(&t);
    sched_run_table_release(NULL);
}

static void add_rejects_a_second_entry_and_bad_arguments(void **unused)
{
    (void)unused;
    struct sched_run_table t;
    sched_run_table_init(&t);
    struct sched_job req = {.id = 7, .gpus = 1};
    struct start_buf b;
    start_make(&b, 7, 0, 1);
    struct sched_running run = {.job = &req, .alloc = b.start.alloc, .start_ms = 100};
    assert_int_equal(sched_run_table_add(&t, &run), 0);
    assert_int_equal(sched_run_table_add(&t, &run), GPO_EEXIST);
    assert_int_equal(sched_apply_start(&t, &req, &b.start, 200), GPO_EEXIST);
    assert_int_equal(t.n, 1);
    assert_int_equal(t.runs[0].start_ms, 100);
    struct sched_job other = {.id = 8};
    assert_int_equal(sched_apply_start(&t, &other, &b.start, 200), GPO_EINVAL); /* 7 != 8 */
    struct sched_running bad = {.job = &other, .alloc = {NULL, 1, NULL, 0}};
    assert_int_equal(sched_run_table_add(&t, &bad), GPO_EINVAL);
    bad.job = NULL;
    assert_int_equal(sched_run_table_add(&t, &bad), GPO_EINVAL);
    assert_int_equal(sched_run_table_add(NULL, &run), GPO_EINVAL);
    assert_int_equal(t.n, 1);
    /* A job without GPUs or node parts is a valid entry. */
    struct sched_running empty = {.job = &other};
    assert_int_equal(sched_run_table_add(&t, &empty), 0);
    assert_int_equal(sched_run_table_remove(&t, 8), 0);
    assert_int_equal(sched_run_table_remove(&t, 8), GPO_ENOENT);
    assert_int_equal(sched_apply_preempt(&t, 8), GPO_ENOENT);
    sched_run_table_clear(&t);
    assert_int_equal(t.n, 0);
    assert_int_equal(sched_run_table_add(&t, &run), 0); /* the array is kept */
    sched_run_table_release(&t);
}

/* The table is the running set of the next pass: started jobs hold their
 * GPUs, and a preempted one stays until it ends. */
static void table_is_the_next_pass_running_set(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    struct sched_run_table t;
    sched_run_table_init(&t);
    fx_job(fx, 3)->gpus = 4;
    fx_job(fx, 1)->gpus = 2;
    fx_job(fx, 2)->gpus = 2;
    struct sched_queue q = {NULL, 0};
    struct sched_job queue[8];
    for (uint32_t k = 0; k < fx->njobs; k++)
        queue[k] = fx->jobs[k].req;
    q.jobs = queue;
    q.njobs = fx->njobs;
    struct sched_running_set rs = sched_run_table_view(&t);
    assert_int_equal(sched_pass(&fx->c, &q, &rs, &fx->pol, &fx->st, 1000, &fx->res), 0);
    assert_int_equal(fx->res.nstarts, 3);
    assert_int_equal(sched_apply_result(&t, &fx->res, lookup, fx, 1000), 0);
    assert_int_equal(t.n, 3);
    assert_id_order(&t);
    /* The node is full: a new job waits for GPUs the table holds. */
    fx_job(fx, 4)->gpus = 1;
    queue[0] = fx_get(fx, 4)->req;
    q.njobs = 1;
    rs = sched_run_table_view(&t);
    assert_int_equal(sched_pass(&fx->c, &q, &rs, &fx->pol, &fx->st, 2000, &fx->res), 0);
    assert_int_equal(fx->res.nstarts, 0);
    assert_int_equal(fx->res.nwaits, 1);
    assert_int_equal(fx->res.waits[0].reason, SCHED_REASON_NO_GPU);
    /* Job 1 leaves: its 2 GPUs are free for job 4 at the next pass. */
    assert_int_equal(sched_apply_preempt(&t, 1), 0);
    assert_true(sched_run_table_find(&t, 1)->preempting);
    assert_int_equal(sched_apply_end(&t, &fx->st, &fx->c, &fx->pol, 1, 3000), 0);
    assert_null(sched_run_table_find(&t, 1));
    assert_int_equal(t.n, 2);
    rs = sched_run_table_view(&t);
    assert_int_equal(sched_pass(&fx->c, &q, &rs, &fx->pol, &fx->st, 3000, &fx->res), 0);
    assert_int_equal(fx->res.nstarts, 1);
    assert_int_equal(fx->res.starts[0].job, 4);
    sched_run_table_release(&t);
    fx_free(fx);
}

static int usage_equal(const struct sched_state *a, const struct sched_state *b)
{
    if (a->nusage != b->nusage || a->nattained != b->nattained)
        return 0;
    for (size_t k = 0; k < a->nusage; k++) {
        if (a->usage[k].team_id != b->usage[k].team_id ||
            a->usage[k].gpu_type_id != b->usage[k].gpu_type_id ||
            a->usage[k].gpu_ms != b->usage[k].gpu_ms)
            return 0;
    }
    for (size_t k = 0; k < a->nattained; k++) {
        if (a->attained[k].job != b->attained[k].job ||
            a->attained[k].gpu_ms != b->attained[k].gpu_ms)
            return 0;
    }
    return 1;
}

/* sched_apply_end charges what sched_state_charge_end charges for the same
 * entry: the stretch since the later of its start and the last pass. */
static void end_charges_the_last_stretch(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    struct sched_run_table t;
    sched_run_table_init(&t);
    struct sched_job req = {.id = 5, .team = 1, .gpus = 4, .checkpointable = true};
    struct start_buf b;
    start_make(&b, 5, 0, 4);
    assert_int_equal(sched_apply_start(&t, &req, &b.start, 10 * HOUR_MS), 0);
    struct sched_state by_hand;
    sched_state_init(&by_hand);
    fx->st.last_pass_ms = by_hand.last_pass_ms = 11 * HOUR_MS;
    assert_int_equal(sched_state_add_usage(&fx->st, 1001, 100, 5.0), 0);
    assert_int_equal(sched_state_add_usage(&by_hand, 1001, 100, 5.0), 0);
    struct sched_running run = {.job = &req, .alloc = b.start.alloc, .start_ms = 10 * HOUR_MS};
    assert_int_equal(sched_state_charge_end(&by_hand, &fx->c, &fx->pol, &run, 12 * HOUR_MS), 0);
    assert_int_equal(sched_apply_end(&t, &fx->st, &fx->c, &fx->pol, 5, 12 * HOUR_MS), 0);
    assert_true(usage_equal(&fx->st, &by_hand));
    /* One hour past the last pass, on 4 GPUs. */
    assert_int_equal(sched_state_attained(&fx->st, 5), 4 * HOUR_MS);
    assert_int_equal(t.n, 0);
    assert_int_equal(sched_apply_end(&t, &fx->st, &fx->c, &fx->pol, 5, 12 * HOUR_MS), GPO_ENOENT);
    sched_state_release(&by_hand);
    sched_run_table_release(&t);
    fx_free(fx);
}

static void end_that_cannot_be_charged_keeps_the_job(void **unused)
{
    (void)unused;
    struct fx *fx = cluster(1);
    struct sched_run_table t;
    sched_run_table_init(&t);
    struct sched_job req = {.id = 5, .team = 9, .gpus = 1}; /* no team 9 */
    struct start_buf b;
    start_make(&b, 5, 0, 1);
    assert_int_equal(sched_apply_start(&t, &req, &b.start, 1000), 0);
    assert_int_equal(sched_apply_end(&t, &fx->st, &fx->c, &fx->pol, 5, 2000), GPO_EINVAL);
    assert_non_null(sched_run_table_find(&t, 5));
    assert_int_equal(fx->st.nusage, 0);
    sched_run_table_release(&t);
    fx_free(fx);
}

/* A copy of the table's entries (ids, marks, first GPU) to compare. */
struct snap {
    uint64_t id[16];
    bool preempting[16];
    uint32_t gpu0[16];
    size_t n;
};

static struct snap snap_of(const struct sched_run_table *t)
{
    struct snap s = {.n = t->n};
    for (size_t k = 0; k < t->n && k < 16; k++) {
        s.id[k] = t->runs[k].job->id;
        s.preempting[k] = t->runs[k].preempting;
        s.gpu0[k] = t->runs[k].alloc.nshares ? t->runs[k].alloc.shares[0].gpu : UINT32_MAX;
    }
    return s;
}

static void assert_snap_equal(const struct snap *a, const struct snap *b)
{
    assert_int_equal(a->n, b->n);
    for (size_t k = 0; k < a->n && k < 16; k++) {
        assert_int_equal(a->id[k], b->id[k]);
        assert_int_equal(a->preempting[k], b->preempting[k]);
        assert_int_equal(a->gpu0[k], b->gpu0[k]);
    }
}

/* A result of our own making: starts of jobs 6, 2 and 4, a preemption of 3. */
struct fake_result {
    struct sched_result r;
    struct start_buf b[3];
    struct sched_preempt p;
};

static void fake_result_make(struct fake_result *f)
{
    sched_result_init(&f->r);
    start_make(&f->b[0], 6, 0, 1);
    start_make(&f->b[1], 2, 1, 1);
    start_make(&f->b[2], 4, 2, 1);
    f->r.starts = calloc(3, sizeof(*f->r.starts));
    assert_non_null(f->r.starts);
    for (int k = 0; k < 3; k++)
        f->r.starts[k] = f->b[k].start;
    f->r.nstarts = 3;
    f->p = (struct sched_preempt){.job = 3, .for_job = 2};
    f->r.preempts = &f->p;
    f->r.npreempts = 1;
}

static void fake_result_release(struct fake_result *f)
{
    free(f->r.starts);
}

/* Jobs 1, 3 and 5 running, on GPUs 5, 6 and 7. */
static void table_with_odd_jobs(struct sched_run_table *t, struct sched_job *reqs)
{
    sched_run_table_init(t);
    for (int k = 0; k < 8; k++)
        reqs[k] = (struct sched_job){.id = (uint64_t)k, .gpus = 1};
    for (uint32_t k = 0; k < 3; k++) {
        struct start_buf b;
        start_make(&b, 2 * k + 1, 5 + k, 1);
        assert_int_equal(sched_apply_start(t, &reqs[2 * k + 1], &b.start, 0), 0);
    }
}

static struct sched_job *lookup_reqs;

static const struct sched_job *lookup_array(void *ctx, uint64_t id)
{
    (void)ctx;
    return id < 8 ? &lookup_reqs[id] : NULL;
}

static const struct sched_job *lookup_none_for_4(void *ctx, uint64_t id)
{
    return id == 4 ? NULL : lookup_array(ctx, id);
}

static void result_merges_starts_and_marks_preemptions(void **unused)
{
    (void)unused;
    struct sched_job reqs[8];
    struct sched_run_table t;
    table_with_odd_jobs(&t, reqs);
    lookup_reqs = reqs;
    struct fake_result f;
    fake_result_make(&f);
    assert_int_equal(sched_apply_result(&t, &f.r, lookup_array, NULL, 7000), 0);
    assert_int_equal(t.n, 6);
    assert_id_order(&t);
    for (uint64_t id = 1; id <= 6; id++)
        assert_non_null(sched_run_table_find(&t, id));
    assert_true(sched_run_table_find(&t, 3)->preempting);
    assert_false(sched_run_table_find(&t, 1)->preempting);
    assert_int_equal(sched_run_table_find(&t, 2)->start_ms, 7000);
    assert_int_equal(sched_run_table_find(&t, 4)->alloc.shares[0].gpu, 2);
    assert_int_equal(sched_run_table_find(&t, 5)->alloc.shares[0].gpu, 7);
    fake_result_release(&f);
    sched_run_table_release(&t);
}

static void result_with_a_bad_decision_changes_nothing(void **unused)
{
    (void)unused;
    struct sched_job reqs[8];
    struct sched_run_table t;
    table_with_odd_jobs(&t, reqs);
    lookup_reqs = reqs;
    struct snap before = snap_of(&t), after;
    struct fake_result f;
    fake_result_make(&f);
    /* No request for job 4. */
    assert_int_equal(sched_apply_result(&t, &f.r, lookup_none_for_4, NULL, 7000), GPO_EINVAL);
    after = snap_of(&t);
    assert_snap_equal(&before, &after);
    /* A preemption of a job that does not run. */
    f.p.job = 2;
    assert_int_equal(sched_apply_result(&t, &f.r, lookup_array, NULL, 7000), GPO_ENOENT);
    after = snap_of(&t);
    assert_snap_equal(&before, &after);
    /* A start of a job that runs already. */
    f.p.job = 3;
    f.r.starts[1].job = 5;
    assert_int_equal(sched_apply_result(&t, &f.r, lookup_array, NULL, 7000), GPO_EEXIST);
    after = snap_of(&t);
    assert_snap_equal(&before, &after);
    /* The same job started twice. */
    f.r.starts[1].job = 6;
    assert_int_equal(sched_apply_result(&t, &f.r, lookup_array, NULL, 7000), GPO_EINVAL);
    after = snap_of(&t);
    assert_snap_equal(&before, &after);
    assert_int_equal(sched_apply_result(NULL, &f.r, lookup_array, NULL, 7000), GPO_EINVAL);
    assert_int_equal(sched_apply_result(&t, &f.r, NULL, NULL, 7000), GPO_EINVAL);
    fake_result_release(&f);
    sched_run_table_release(&t);
}

/* Every allocation sched_apply_result makes, failed in turn: GPO_ENOMEM and
 * the table as it was; then it applies. */
static void result_out_of_memory_changes_nothing(void **unused)
{
    (void)unused;
    struct sched_job reqs[8];
    lookup_reqs = reqs;
    struct fake_result f;
    fake_result_make(&f);
    /* How many allocations a successful apply makes, from the same table. */
    struct sched_run_table t;
    table_with_odd_jobs(&t, reqs);
    uint64_t before_count = gpo_alloc_count();
    assert_int_equal(sched_apply_result(&t, &f.r, lookup_array, NULL, 7000), 0);
    uint64_t n = gpo_alloc_count() - before_count;
    sched_run_table_release(&t);
    assert_true(n >= 4); /* the starts' array, their three allocations, the sort */
    for (uint64_t at = 1; at <= n; at++) {
        table_with_odd_jobs(&t, reqs);
        struct snap before = snap_of(&t), after;
        gpo_alloc_fail_at(at);
        int rc = sched_apply_result(&t, &f.r, lookup_array, NULL, 7000);
        gpo_alloc_fail_at(0);
        if (rc != GPO_ENOMEM)
            fail_msg("allocation %llu of %llu failed, and the apply returned %d",
                     (unsigned long long)at, (unsigned long long)n, rc);
        after = snap_of(&t);
        assert_snap_equal(&before, &after);
        assert_int_equal(sched_apply_result(&t, &f.r, lookup_array, NULL, 7000), 0);
        assert_int_equal(t.n, 6);
        assert_id_order(&t);
        sched_run_table_release(&t);
    }
    fake_result_release(&f);
}

/* The hook fails exactly the allocation it was armed for, once. */
static void fault_hook_fails_the_nth_allocation_once(void **unused)
{
    (void)unused;
    uint64_t c0 = gpo_alloc_count();
    gpo_alloc_fail_at(3);
    void *a = gpo_malloc(8), *b = gpo_calloc(2, 8), *c = gpo_malloc(8), *d = gpo_malloc(8);
    assert_non_null(a);
    assert_non_null(b);
    assert_null(c);
    assert_non_null(d);
    assert_int_equal(gpo_alloc_count() - c0, 4);
    gpo_alloc_fail_at(1);
    void *r = gpo_realloc(a, 64);
    assert_null(r); /* a is still ours */
    a = gpo_realloc(a, 64);
    assert_non_null(a);
    gpo_alloc_fail_at(2);
    gpo_alloc_fail_at(0); /* disarmed */
    assert_false(gpo_alloc_fault());
    assert_false(gpo_alloc_fault());
    free(a);
    free(b);
    free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(starts_land_in_id_order_with_their_own_allocation),
        cmocka_unit_test(add_rejects_a_second_entry_and_bad_arguments),
        cmocka_unit_test(table_is_the_next_pass_running_set),
        cmocka_unit_test(end_charges_the_last_stretch),
        cmocka_unit_test(end_that_cannot_be_charged_keeps_the_job),
        cmocka_unit_test(result_merges_starts_and_marks_preemptions),
        cmocka_unit_test(result_with_a_bad_decision_changes_nothing),
        cmocka_unit_test(result_out_of_memory_changes_nothing),
        cmocka_unit_test(fault_hook_fails_the_nth_allocation_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

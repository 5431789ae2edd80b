/* test_mig_sched.c - scheduling onto MIG instances (issue 25, section 2):
 * the view's free instances and their undo, placement by mig_place's rule,
 * charge by memory slots in quota, explanations that name the profile,
 * preemption and backfill of instances, the pending demand for the
 * planner, and the validation of the MIG fields. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "core/mig.h"
#include "core/sched.h"
#include "core/view.h"
#include "fixture.h"

#define MIN_MS   (60 * 1000)
#define HOUR_MS  (60 * MIN_MS)
#define H100_MEM 81559

static const struct mig_type *h100(void)
{
    const struct mig_type *t = mig_type_find("H100-80GB");
    assert_non_null(t);
    return t;
}

static unsigned prof(const char *name)
{
    int p = mig_profile_lookup(h100(), name, NULL, 0);
    assert_true(p >= 0);
    return (unsigned)p;
}

/* Pool "gpu" of `nodes` nodes with `gpus` H100s each, one team with
 * unlimited borrowing, classes "low" (0) and "high" (10, may preempt). */
static struct fx *cluster(uint32_t nodes, uint32_t gpus)
{
    struct fx *fx = fx_new();
    uint32_t pool = fx_pool(fx, "gpu");
    uint32_t type = fx_type(fx, "H100-80GB");
    fx_nodes(fx, nodes, pool, type, gpus, H100_MEM, 64, 512 * 1024);
    fx_team(fx, "a", 1, -1);
    fx_class(fx, "low", 0, false);
    fx_class(fx, "high", 10, true);
    return fx;
}

/* Puts GPU gi in MIG mode with the instances "name@start" given, NULL-ended. */
static void layout(struct fx *fx, uint32_t gi, const char *const *inst)
{
    struct sched_gpu *g = &fx->gpus[gi];
    g->mig_slices = 7;
    g->mig_enabled = true;
    g->mig_type = h100();
    g->mig_n = 0;
    for (; *inst; inst++) {
        const char *at = strchr(*inst, '@');
        char name[32];
        size_t len = (size_t)(at - *inst);
        memcpy(name, *inst, len);
        name[len] = '\0';
        g->mig[g->mig_n++] = (struct sched_mig_instance){.profile = (uint8_t)prof(name),
                                                         .start = (uint8_t)(at[1] - '0')};
    }
}

static void layout_named(struct fx *fx, uint32_t gi, const char *name)
{
    struct mig_instance inst[MIG_MAX_INSTANCES];
    size_t n;
    bool enabled;
    assert_int_equal(mig_layout_named(h100(), name, inst, &n, &enabled, NULL, 0), 0);
    struct sched_gpu *g = &fx->gpus[gi];
    g->mig_slices = 7;
    g->mig_enabled = enabled;
    g->mig_type = h100();
    g->mig_n = (uint8_t)n;
    for (size_t k = 0; k < n; k++)
        g->mig[k] = (struct sched_mig_instance){inst[k].profile, inst[k].start};
}

/* A pending MIG-only job of profile `name` on H100s. */
static struct sched_job *mig_job(struct fx *fx, uint64_t id, const char *name)
{
    struct sched_job *j = fx_job(fx, id);
    j->gpus = 0;
    j->mig_types = (uint8_t)(1u << h100()->id);
    j->mig_profile[h100()->id] = (uint8_t)prof(name);
    return j;
}

/* Job `id` as running on GPU gi's instance at `start` (profile `name`). */
static struct fx_job *hold_instance(struct fx *fx, uint64_t id, uint32_t node, uint32_t gi,
                                    const char *name, unsigned start, int64_t ends_in)
{
    struct sched_job *req = mig_job(fx, id, name);
    struct fx_job *j = fx_get(fx, id);
    unsigned p = prof(name);
    j->shares[0] = (struct sched_share){.gpu = gi,
                                        .milli = (uint32_t)mig_profile_charge_milli(h100(), p),
                                        .mem_mib = h100()->profiles[p].mem_mib,
                                        .mig = true,
                                        .mig_start = (uint8_t)start,
                                        .mig_profile = (uint8_t)p};
    j->parts[0] = (struct sched_node_part){
        .node = node, .cpus = (uint32_t)req->cpus, .mem_mib = (uint64_t)req->mem_mib};
    j->alloc = (struct sched_alloc){j->parts, 1, j->shares, 1};
    j->started_ms = fx->now;
    j->run_ms = ends_in;
    j->ends_ms = ends_in ? fx->now + ends_in : INT64_MAX;
    return j;
}

static const struct sched_share *start_share(const struct fx *fx, uint64_t id)
{
    const struct sched_start *s = fx_start(fx, id);
    assert_non_null(s);
    assert_int_equal(s->alloc.nshares, 1);
    return &s->alloc.shares[0];
}

static void assert_reason_text(const struct fx *fx, uint64_t id, const char *want)
{
    const struct sched_wait *w = fx_wait(fx, id);
    assert_non_null(w);
    char buf[256];
    assert_true(explain_format(&fx->c, w, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, want);
}

/* The instance mig_place picks on GPU gi as the fixture has it, all free. */
static struct mig_pick expected_pick(const struct fx *fx, uint32_t gi, const char *name,
                                     uint8_t busy_mask)
{
    const struct sched_gpu *g = &fx->gpus[gi];
    struct mig_gpu mg = {.type = g->mig_type, .changed_ms = INT64_MIN, .n = g->mig_n};
    for (unsigned k = 0; k < g->mig_n; k++)
        mg.inst[k] = (struct mig_instance){g->mig[k].profile, g->mig[k].start, (busy_mask >> k) & 1,
                                           INT64_MIN};
    struct mig_pick pick;
    struct mig_request req = {.profile = name};
    assert_int_equal(mig_place(&mg, 1, &req, &pick), 0);
    return pick;
}

/* ---- placement ---- */

static void profiles_pack_onto_one_h100_where_mig_place_puts_them(void **state)
{
    struct fx *fx = cluster(1, 1);
    *state = fx;
    layout(fx, 0, (const char *const[]){"3g.40gb@0", "2g.20gb@4", "1g.10gb@6", NULL});
    mig_job(fx, 1, "1g.10gb");
    mig_job(fx, 2, "2g.20gb");
    mig_job(fx, 3, "3g.40gb");
    assert_int_equal(fx_step(fx, 1000), 0);
    const struct sched_share *s1 = start_share(fx, 1), *s2 = start_share(fx, 2),
                             *s3 = start_share(fx, 3);
    assert_true(s1->mig && s2->mig && s3->mig);
    assert_int_equal(s1->mig_start, 6);
    assert_int_equal(s1->mig_profile, prof("1g.10gb"));
    assert_int_equal(s1->milli, 125);
    assert_int_equal(s2->mig_start, 4);
    assert_int_equal(s2->milli, 250);
    assert_int_equal(s3->mig_start, 0);
    assert_int_equal(s3->milli, 500);
    assert_int_equal(s3->mem_mib, h100()->profiles[prof("3g.40gb")].mem_mib);
    /* The GPU is now full: a fourth instance job waits. */
    mig_job(fx, 4, "1g.10gb");
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_null(fx_start(fx, 4));
    assert_int_equal(fx_wait(fx, 4)->reason, SCHED_REASON_NO_MIG);
}

static void one_g_takes_the_instance_mig_place_picks(void **state)
{
    struct fx *fx = cluster(1, 1);
    *state = fx;
    layout_named(fx, 0, "all-1g.10gb");
    struct mig_pick want = expected_pick(fx, 0, "1g.10gb", 0);
    assert_int_equal(want.start, 6); /* slot 6 keeps a 4g possible at 0 */
    mig_job(fx, 1, "1g.10gb");
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(start_share(fx, 1)->mig_start, want.start);
    /* The next one where mig_place puts it beside the first. */
    struct mig_pick next = expected_pick(fx, 0, "1g.10gb", (uint8_t)(1u << want.instance));
    mig_job(fx, 2, "1g.10gb");
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_int_equal(start_share(fx, 2)->mig_start, next.start);
}

static void three_g_goes_to_slot_4_when_0_is_taken(void **state)
{
    struct fx *fx = cluster(1, 1);
    *state = fx;
    layout(fx, 0, (const char *const[]){"3g.40gb@0", "3g.40gb@4", NULL});
    /* Both free: slot 4, which leaves a 4g possible at 0. */
    mig_job(fx, 1, "3g.40gb");
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(start_share(fx, 1)->mig_start, 4);

    struct fx *fx2 = cluster(1, 1);
    layout(fx2, 0, (const char *const[]){"3g.40gb@0", "3g.40gb@4", NULL});
    hold_instance(fx2, 1, 0, 0, "3g.40gb", 0, 0);
    mig_job(fx2, 2, "3g.40gb");
    mig_job(fx2, 3, "3g.40gb");
    int rc = fx_step(fx2, 1000);
    const struct sched_start *s2 = fx_start(fx2, 2);
    bool ok = rc == 0 && s2 && s2->alloc.shares[0].mig_start == 4 && !fx_start(fx2, 3);
    fx_free(fx2);
    assert_true(ok);
}

static void placement_packs_the_fullest_gpu_first(void **state)
{
    struct fx *fx = cluster(2, 1);
    *state = fx;
    layout_named(fx, 0, "all-1g.10gb");
    layout_named(fx, 1, "all-1g.10gb");
    hold_instance(fx, 1, 1, 1, "1g.10gb", 6, 0);
    mig_job(fx, 2, "1g.10gb");
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(start_share(fx, 2)->gpu, 1); /* binpack: the GPU already in use */

    struct fx *sp = cluster(2, 1);
    sp->pol.packing = SCHED_PACK_SPREAD;
    layout_named(sp, 0, "all-1g.10gb");
    layout_named(sp, 1, "all-1g.10gb");
    hold_instance(sp, 1, 1, 1, "1g.10gb", 6, 0);
    mig_job(sp, 2, "1g.10gb");
    int rc = fx_step(sp, 1000);
    const struct sched_start *s = fx_start(sp, 2);
    bool ok = rc == 0 && s && s->alloc.shares[0].gpu == 0;
    fx_free(sp);
    assert_true(ok);
}

static void profile_that_fits_nowhere_waits_with_a_reason_naming_it(void **state)
{
    struct fx *fx = cluster(1, 1);
    *state = fx;
    layout_named(fx, 0, "all-1g.10gb");
    for (unsigned k = 0; k < 7; k++)
        hold_instance(fx, 100 + k, 0, 0, "1g.10gb", k, 0);
    mig_job(fx, 1, "1g.10gb")->pool = 0;
    mig_job(fx, 2, "3g.40gb")->pool = 0;
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx->res.nstarts, 0);
    assert_int_equal(fx_wait(fx, 1)->reason, SCHED_REASON_NO_MIG);
    assert_reason_text(fx, 1, "no free MIG 1g.10gb instance in pool gpu (H100-80GB), 0 of 7 free");
    assert_int_equal(fx_wait(fx, 2)->reason, SCHED_REASON_MIG_ABSENT);
    assert_false(explain_is_final(SCHED_REASON_MIG_ABSENT));
    assert_reason_text(fx, 2, "the MIG layout in pool gpu (H100-80GB) has no 3g.40gb instance");
}

static void mig_only_job_never_takes_a_whole_gpu(void **state)
{
    struct fx *fx = cluster(1, 2);
    *state = fx;
    layout(fx, 1, (const char *const[]){"1g.10gb@6", NULL});
    hold_instance(fx, 100, 0, 1, "1g.10gb", 6, 0);
    mig_job(fx, 1, "1g.10gb");
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_null(fx_start(fx, 1)); /* GPU 0 is free and whole, but not MIG */
    assert_int_equal(fx_wait(fx, 1)->reason, SCHED_REASON_NO_MIG);
    /* A whole GPU job takes GPU 0 (ending before the reservation job 1
     * holds the node with: reservations hold whole nodes). */
    fx_job(fx, 2)->time_limit_ms = 10 * MIN_MS;
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_int_equal(start_share(fx, 2)->gpu, 0);
    assert_null(fx_start(fx, 1));

    /* No MIG GPU of its type anywhere: final. */
    struct fx *plain = cluster(1, 2);
    mig_job(plain, 1, "1g.10gb");
    int rc = fx_step(plain, 1000);
    enum sched_reason why = fx_wait(plain, 1) ? fx_wait(plain, 1)->reason : SCHED_REASON_NONE;
    char buf[200] = "";
    if (fx_wait(plain, 1))
        explain_format(&plain->c, fx_wait(plain, 1), buf, sizeof(buf));
    fx_free(plain);
    assert_int_equal(rc, 0);
    assert_int_equal(why, SCHED_REASON_MIG_NEVER);
    assert_true(explain_is_final(why));
    assert_string_equal(buf, "no GPU is in MIG mode with a 1g.10gb profile");
}

static void whole_and_fractional_jobs_never_take_a_mig_gpu(void **state)
{
    struct fx *fx = cluster(1, 1);
    *state = fx;
    layout_named(fx, 0, "all-1g.10gb");
    fx_job(fx, 1);                       /* a whole GPU */
    struct sched_job *f = fx_job(fx, 2); /* a fraction */
    f->gpus = 0;
    f->gpu_milli = 100;
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx->res.nstarts, 0);
    assert_int_equal(fx_wait(fx, 1)->reason, SCHED_REASON_NO_GPU);
    assert_int_equal(fx_wait(fx, 2)->reason, SCHED_REASON_NO_GPU);

    /* The O(1) group test: MIG capacity admits MIG jobs only. */
    struct view v;
    struct sched_running_set none = {0};
    assert_int_equal(view_init(&v, &fx->c, &none, SCHED_PACK_BINPACK, NULL), 0);
    struct sched_job whole = {.id = 9, .gpus = 1, .pool = SCHED_ANY, .gpu_type = SCHED_ANY};
    struct sched_job mig = whole;
    mig.gpus = 0;
    mig.mig_types = (uint8_t)(1u << h100()->id);
    mig.mig_profile[h100()->id] = (uint8_t)prof("1g.10gb");
    struct sched_job mig3 = mig;
    mig3.mig_profile[h100()->id] = (uint8_t)prof("3g.40gb");
    bool w = view_group_may_fit(&v, &whole, 0, false), m = view_group_may_fit(&v, &mig, 0, false),
         m3 = view_group_may_fit(&v, &mig3, 0, false);
    int64_t cap = v.groups[0].cap_milli;
    view_release(&v);
    assert_false(w);
    assert_true(m);
    assert_false(m3); /* no 3g instance in the layout */
    assert_int_equal(cap, SCHED_MILLI);
}

static void memory_request_takes_a_shared_gpu_then_an_instance_then_a_fresh_gpu(void **state)
{
    struct fx *fx = cluster(1, 3);
    *state = fx;
    layout(fx, 2, (const char *const[]){"1g.10gb@6", NULL});
    struct sched_job *a = fx_job(fx, 1);
    a->gpus = 0;
    a->gpu_mem_mib = 9000;
    a->mig_types = (uint8_t)(1u << h100()->id);
    a->mig_profile[h100()->id] = (uint8_t)prof("1g.10gb");
    assert_int_equal(fx_step(fx, 1000), 0);
    const struct sched_share *s = start_share(fx, 1);
    assert_true(s->mig); /* an instance before a fresh GPU */
    assert_int_equal(s->gpu, 2);
    assert_int_equal(s->milli, 125);

    struct sched_job *f = fx_job(fx, 2); /* a fraction opens GPU 0 */
    f->gpus = 0;
    f->gpu_milli = 200;
    assert_int_equal(fx_step(fx, 2000), 0);
    uint32_t shared = start_share(fx, 2)->gpu;
    struct sched_job *b = fx_job(fx, 3);
    *b = *a;
    b->id = 3;
    assert_int_equal(fx_step(fx, 3000), 0);
    s = start_share(fx, 3);
    assert_false(s->mig); /* the GPU already shared comes first */
    assert_int_equal(s->gpu, shared);
}

/* ---- charge ---- */

static void instances_are_charged_by_slots_in_quota(void **state)
{
    struct fx *fx = cluster(1, 1);
    *state = fx;
    layout(fx, 0, (const char *const[]){"3g.40gb@0", "3g.40gb@4", NULL});
    fx_quota(fx, 0, 0, 0, 500, -1); /* half a GPU guaranteed */
    mig_job(fx, 1, "3g.40gb");
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(start_share(fx, 1)->milli, 500);
    assert_false(fx_start(fx, 1)->borrowed); /* 500 of 500 */
    mig_job(fx, 2, "3g.40gb");
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_true(fx_start(fx, 2)->borrowed); /* over the guarantee: borrowed */

    /* No borrowing: the second waits for quota. */
    struct fx *nb = cluster(1, 1);
    layout(nb, 0, (const char *const[]){"3g.40gb@0", "3g.40gb@4", NULL});
    fx_quota(nb, 0, 0, 0, 500, 0);
    mig_job(nb, 1, "3g.40gb");
    mig_job(nb, 2, "3g.40gb");
    int rc = fx_step(nb, 1000);
    bool ok = rc == 0 && fx_start(nb, 1) && !fx_start(nb, 2) &&
              fx_wait(nb, 2)->reason == SCHED_REASON_QUOTA;
    fx_free(nb);
    assert_true(ok);
}

/* ---- preemption and backfill ---- */

static void high_job_preempts_only_the_instance_it_needs(void **state)
{
    struct fx *fx = cluster(1, 1);
    *state = fx;
    layout(fx, 0, (const char *const[]){"3g.40gb@0", "2g.20gb@4", "1g.10gb@6", NULL});
    hold_instance(fx, 10, 0, 0, "3g.40gb", 0, 0);
    hold_instance(fx, 11, 0, 0, "1g.10gb", 6, 0);
    hold_instance(fx, 12, 0, 0, "2g.20gb", 4, 0);
    /* Job 10 lost the least work: it would go first were nodes all that counted. */
    fx_get(fx, 10)->started_ms = fx->now + 500;
    mig_job(fx, 1, "1g.10gb")->prio = 1;
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx->res.npreempts, 1);
    assert_int_equal(fx->res.preempts[0].job, 11);
    assert_int_equal(fx->res.preempts[0].for_job, 1);
    assert_int_equal(fx_wait(fx, 1)->reason, SCHED_REASON_PREEMPTING);
    /* Once it has left, the high job takes its instance. */
    assert_int_equal(fx_step(fx, 1000 + fx->pol.preempt_grace_ms), 0);
    assert_int_equal(start_share(fx, 1)->mig_start, 6);
    assert_true(fx_running(fx, 10) && fx_running(fx, 12));
}

static void small_instance_job_backfills_before_the_reservation(void **state)
{
    struct fx *fx = cluster(1, 1);
    *state = fx;
    fx->pol.order = SCHED_ORDER_FIFO;
    fx->pol.preemption = false;
    layout(fx, 0, (const char *const[]){"3g.40gb@0", "1g.10gb@4", "1g.10gb@5", NULL});
    hold_instance(fx, 10, 0, 0, "3g.40gb", 0, HOUR_MS);
    struct sched_job *h = mig_job(fx, 1, "3g.40gb");
    h->submit_ms = 1;
    struct sched_job *s = mig_job(fx, 2, "1g.10gb");
    s->submit_ms = 2;
    s->time_limit_ms = 30 * MIN_MS; /* ends before job 10 */
    struct sched_job *l = mig_job(fx, 3, "1g.10gb");
    l->submit_ms = 3;
    l->time_limit_ms = 2 * HOUR_MS; /* would hold the node past the reservation */
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_null(fx_start(fx, 1));
    assert_int_equal(fx->res.nreserves, 1);
    assert_int_equal(fx->res.reserves[0].job, 1);
    assert_non_null(fx_start(fx, 2));
    assert_null(fx_start(fx, 3));
    assert_int_equal(fx_wait(fx, 3)->reason, SCHED_REASON_RESERVED);
}

/* ---- the view ---- */

static void view_undo_restores_instances(void **state)
{
    struct fx *fx = cluster(1, 1);
    *state = fx;
    layout_named(fx, 0, "all-1g.10gb");
    struct view v;
    struct sched_running_set none = {0};
    assert_int_equal(view_init(&v, &fx->c, &none, SCHED_PACK_BINPACK, NULL), 0);
    struct sched_job j = {.id = 1, .pool = SCHED_ANY, .gpu_type = SCHED_ANY, .cpus = 1};
    j.mig_types = (uint8_t)(1u << h100()->id);
    j.mig_profile[h100()->id] = (uint8_t)prof("1g.10gb");
    uint32_t f0, t0, f1, t1, f2, t2;
    view_group_mig_count(&v, &j, 0, false, &f0, &t0);
    struct sched_node_part part = {.node = 0, .cpus = 1};
    struct sched_share sh = {.gpu = 0,
                             .milli = 125,
                             .mig = true,
                             .mig_start = 3,
                             .mig_profile = (uint8_t)prof("1g.10gb")};
    struct sched_alloc a = {&part, 1, &sh, 1};
    struct view_undo log = {0};
    assert_int_equal(view_apply_logged(&v, &a, false, &log), 0);
    uint8_t after = v.gpus[0].mig_free;
    uint16_t node_after = v.nodes[0].mig_free;
    view_group_mig_count(&v, &j, 0, false, &f1, &t1);
    bool fits_taken = view_node_fits(&v, &j, 0);
    view_undo(&v, &log);
    view_group_mig_count(&v, &j, 0, false, &f2, &t2);
    uint8_t restored = v.gpus[0].mig_free;
    /* Taking an instance twice is over capacity. */
    bool over1 = view_apply(&v, &a, false), over2 = view_apply(&v, &a, false);
    view_undo_release(&log);
    view_release(&v);
    assert_int_equal(f0, 7);
    assert_int_equal(t0, 7);
    assert_int_equal(node_after, 6);
    assert_int_equal(f1, 6);
    assert_int_equal(t1, 7);
    assert_true(fits_taken);
    assert_int_equal(f2, 7);
    assert_int_equal(restored, 0x7f);
    assert_int_equal(after, 0x7f & ~(1u << 3)); /* all-1g: instance k starts at slot k */
    assert_false(over1);
    assert_true(over2);
}

static void running_job_on_a_missing_instance_is_overcommitted(void **state)
{
    struct fx *fx = cluster(1, 1);
    *state = fx;
    layout(fx, 0, (const char *const[]){"3g.40gb@0", "3g.40gb@4", NULL});
    hold_instance(fx, 10, 0, 0, "1g.10gb", 6, 0); /* no such instance */
    mig_job(fx, 1, "3g.40gb");
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx->res.novercommitted, 1);
    assert_int_equal(fx->res.overcommitted[0], 10);
    assert_null(fx_start(fx, 1)); /* the GPU is left full */
}

/* ---- the planner's demand ---- */

static void pending_demand_is_listed_per_pool_and_profile_in_queue_order(void **state)
{
    struct fx *fx = cluster(1, 1);
    *state = fx;
    layout(fx, 0, (const char *const[]){"1g.10gb@6", NULL});
    mig_job(fx, 1, "1g.10gb"); /* starts */
    mig_job(fx, 2, "3g.40gb");
    mig_job(fx, 3, "3g.40gb");
    mig_job(fx, 4, "1g.10gb");
    fx_job(fx, 5); /* a whole GPU: no MIG demand */
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_non_null(fx_start(fx, 1));
    struct sched_queue q = {fx->queue, fx->nqueue};
    struct sched_mig_demand d[8];
    size_t n = 0;
    assert_int_equal(sched_mig_demand(&fx->c, &q, &fx->res, d, 8, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(d[0].pool, 0);
    assert_ptr_equal(d[0].demand.type, h100());
    assert_string_equal(d[0].demand.req.profile, "3g.40gb");
    assert_int_equal(d[0].demand.count, 2);
    assert_string_equal(d[1].demand.req.profile, "1g.10gb");
    assert_int_equal(d[1].demand.count, 1);
    /* Too small an array: E2BIG, and how many there are. */
    assert_int_equal(sched_mig_demand(&fx->c, &q, &fx->res, d, 1, &n), GPO_E2BIG);
    assert_int_equal(n, 2);
    /* mig_place_new finds room for the 3g the planner would create. */
    struct mig_gpu mg = {.type = h100(), .changed_ms = INT64_MIN, .n = 1};
    mg.inst[0] = (struct mig_instance){(uint8_t)prof("1g.10gb"), 6, true, INT64_MIN};
    struct mig_pick pick;
    assert_int_equal(mig_place_new(&mg, 1, &d[0].demand.req, &pick), 0);
    assert_int_equal(pick.start, 0);
}

/* ---- invariants over random workloads ---- */

/* Every running allocation as it must be: MIG shares only on instances of
 * the job's profile that exist, no instance held twice, charged its slots;
 * other shares never on a GPU in MIG mode. */
static void check_running(const struct fx *fx, uint64_t seed)
{
    uint8_t held[FX_MAX_GPUS] = {0};
    for (uint32_t i = 0; i < fx->njobs; i++) {
        const struct fx_job *j = &fx->jobs[i];
        if (j->done || j->started_ms < 0)
            continue;
        for (uint32_t k = 0; k < j->alloc.nshares; k++) {
            const struct sched_share *sh = &j->alloc.shares[k];
            const struct sched_gpu *g = &fx->gpus[sh->gpu];
            if (!sh->mig) {
                if (g->mig_enabled || sched_job_mig_only(&j->req))
                    fail_msg("seed %llu: job %llu holds a share of MIG GPU %u",
                             (unsigned long long)seed, (unsigned long long)j->req.id, sh->gpu);
                continue;
            }
            int at = -1;
            for (unsigned m = 0; m < g->mig_n; m++)
                at = g->mig[m].start == sh->mig_start && g->mig[m].profile == sh->mig_profile
                         ? (int)m
                         : at;
            if (at < 0 || sh->mig_profile != j->req.mig_profile[h100()->id] ||
                sh->milli != mig_profile_charge_milli(h100(), sh->mig_profile) ||
                (held[sh->gpu] & (1u << at)))
                fail_msg("seed %llu: job %llu: bad instance share (GPU %u, slot %u)",
                         (unsigned long long)seed, (unsigned long long)j->req.id, sh->gpu,
                         sh->mig_start);
            held[sh->gpu] |= (uint8_t)(1u << at);
        }
    }
}

static void random_workloads_keep_instances_whole(void **state)
{
    static const char *const layouts[] = {"all-1g.10gb", "all-balanced", "all-3g.40gb",
                                          "all-2g.20gb", NULL};
    static const char *const profiles[] = {"1g.10gb", "2g.20gb", "3g.40gb"};
    uint32_t mig_done = 0;
    for (uint64_t seed = 1; seed <= 12; seed++) {
        struct fx *fx = cluster(4, 2);
        *state = fx;
        uint64_t r = seed;
        if (seed % 2)
            fx->pol.packing = SCHED_PACK_SPREAD;
        for (uint32_t gi = 0; gi < 8; gi++) {
            const char *l = layouts[fx_rng_range(&r, 0, 4)];
            if (l)
                layout_named(fx, gi, l);
        }
        for (uint64_t id = 1; id <= 120; id++) {
            int64_t kind = fx_rng_range(&r, 0, 5);
            struct sched_job *j = kind < 3 ? mig_job(fx, id, profiles[kind]) : fx_job(fx, id);
            if (kind == 3) {
                j->gpus = 0;
                j->gpu_milli = 300;
            } else if (kind == 5) {
                j->gpus = 0;
                j->gpu_mem_mib = 9000;
                j->mig_types = (uint8_t)(1u << h100()->id);
                j->mig_profile[h100()->id] = (uint8_t)prof("1g.10gb");
            }
            j->prio = fx_rng_range(&r, 0, 4) == 0;
            j->submit_ms = fx_rng_range(&r, 0, 10 * MIN_MS);
            j->time_limit_ms = 20 * MIN_MS;
            fx_get(fx, id)->run_ms = fx_rng_range(&r, MIN_MS, 10 * MIN_MS);
        }
        int64_t now = 1000;
        for (int step = 0; step < 200; step++) {
            assert_int_equal(fx_step(fx, now), 0);
            assert_int_equal(fx->res.novercommitted, 0);
            check_running(fx, seed);
            int64_t next = fx_next_event(fx);
            now = next > now ? next : now + MIN_MS;
        }
        for (uint32_t i = 0; i < fx->njobs; i++)
            mig_done += fx->jobs[i].done && fx->jobs[i].req.mig_types;
        fx_free(fx);
        *state = NULL;
    }
    /* The workloads did run on instances (of 12 x 120 jobs, two in three may take one). */
    assert_true(mig_done > 600); /* 917 when written */
}

/* ---- validation ---- */

static void cluster_check_names_bad_mig_fields(void **state)
{
    struct fx *fx = cluster(2, 1);
    *state = fx;
    const char *what = NULL;
    layout_named(fx, 0, "all-1g.10gb");
    assert_int_equal(sched_cluster_check(&fx->c, &what), 0);

    fx->gpus[0].mig_n = MIG_MAX_INSTANCES + 1;
    assert_int_equal(sched_cluster_check(&fx->c, &what), GPO_E2BIG);
    assert_string_equal(what, "gpu: mig_n is over MIG_MAX_INSTANCES");

    layout_named(fx, 0, "all-1g.10gb");
    fx->gpus[0].mig_type = NULL;
    assert_int_equal(sched_cluster_check(&fx->c, &what), GPO_EINVAL);
    assert_string_equal(what, "gpu: mig_type is NULL on a MIG GPU with instances");

    layout(fx, 0, (const char *const[]){"3g.40gb@0", "1g.10gb@2", NULL});
    assert_int_equal(sched_cluster_check(&fx->c, &what), GPO_EINVAL);
    assert_string_equal(what, "gpu: mig instances break the placement table (mig_layout_check)");

    layout(fx, 0, (const char *const[]){"1g.10gb@6", NULL});
    fx->gpus[0].mig_enabled = false;
    assert_int_equal(sched_cluster_check(&fx->c, &what), GPO_EINVAL);
    assert_string_equal(what, "gpu: mig_n is set but mig_enabled is false");

    layout(fx, 0, (const char *const[]){"1g.10gb@6", NULL});
    layout(fx, 1, (const char *const[]){"1g.10gb@6", NULL});
    fx->gpus[1].mig_type = mig_type_find("A100-40GB");
    assert_int_equal(sched_cluster_check(&fx->c, &what), GPO_EINVAL);
    assert_string_equal(what, "gpu: GPUs of one gpu_type with different mig_type");
    fx->gpus[1].mig_type = h100();

    /* A pass refuses such a cluster. */
    fx->gpus[0].mig_n = MIG_MAX_INSTANCES + 1;
    assert_int_equal(fx_pass(fx, 1000), GPO_EINVAL);
}

static void bad_mig_requests_wait_as_invalid_naming_the_field(void **state)
{
    struct fx *fx = cluster(1, 1);
    *state = fx;
    layout_named(fx, 0, "all-1g.10gb");
    mig_job(fx, 1, "1g.10gb")->mig_profile[h100()->id] = 40;
    mig_job(fx, 2, "1g.10gb")->gpus = 1;
    mig_job(fx, 3, "1g.10gb")->mig_types = 0x30;
    struct sched_job *g = mig_job(fx, 4, "1g.10gb");
    g->multi_node = true;
    assert_int_equal(fx_step(fx, 1000), 0);
    static const char *const want[] = {
        "mig_profile is out of range for its MIG type",
        "a MIG profile goes alone or with gpu_mem_mib, not with gpus or gpu_milli",
        "mig_types has a bit for no MIG type of the catalogue",
        "multi_node needs a whole number of gpus",
    };
    for (uint64_t id = 1; id <= 4; id++) {
        const struct sched_wait *w = fx_wait(fx, id);
        assert_non_null(w);
        assert_int_equal(w->reason, SCHED_REASON_BAD_SIZE);
        assert_string_equal(w->field, want[id - 1]);
    }
    struct sched_job bad = {.mig_types = 1, .nodes = 2};
    const char *field = NULL;
    assert_int_equal(sched_job_mig_check(&bad, &field), GPO_EINVAL);
    assert_string_equal(field,
                        "a MIG instance is part of one GPU: no multi_node, nodes or exclusive");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(profiles_pack_onto_one_h100_where_mig_place_puts_them,
                                  fx_teardown),
        cmocka_unit_test_teardown(one_g_takes_the_instance_mig_place_picks, fx_teardown),
        cmocka_unit_test_teardown(three_g_goes_to_slot_4_when_0_is_taken, fx_teardown),
        cmocka_unit_test_teardown(placement_packs_the_fullest_gpu_first, fx_teardown),
        cmocka_unit_test_teardown(profile_that_fits_nowhere_waits_with_a_reason_naming_it,
                                  fx_teardown),
        cmocka_unit_test_teardown(mig_only_job_never_takes_a_whole_gpu, fx_teardown),
        cmocka_unit_test_teardown(whole_and_fractional_jobs_never_take_a_mig_gpu, fx_teardown),
        cmocka_unit_test_teardown(
            memory_request_takes_a_shared_gpu_then_an_instance_then_a_fresh_gpu, fx_teardown),
        cmocka_unit_test_teardown(instances_are_charged_by_slots_in_quota, fx_teardown),
        cmocka_unit_test_teardown(high_job_preempts_only_the_instance_it_needs, fx_teardown),
        cmocka_unit_test_teardown(small_instance_job_backfills_before_the_reservation, fx_teardown),
        cmocka_unit_test_teardown(view_undo_restores_instances, fx_teardown),
        cmocka_unit_test_teardown(running_job_on_a_missing_instance_is_overcommitted, fx_teardown),
        cmocka_unit_test_teardown(pending_demand_is_listed_per_pool_and_profile_in_queue_order,
                                  fx_teardown),
        cmocka_unit_test_teardown(random_workloads_keep_instances_whole, fx_teardown),
        cmocka_unit_test_teardown(cluster_check_names_bad_mig_fields, fx_teardown),
        cmocka_unit_test_teardown(bad_mig_requests_wait_as_invalid_naming_the_field, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

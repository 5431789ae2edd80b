/*
 * test_server_mig.c - the controller's MIG state (server/mig): reported
 * instances resolved into the cluster model, the plan towards a static
 * layout, which never names a busy instance, and an attempt's share of a MIG
 * instance in its stored form.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "server/mig/mig_int.h"

static const struct mig_type *h100(void)
{
    return mig_type_find("H100-80GB");
}

static int profile(const char *name)
{
    return mig_profile_lookup(h100(), name, NULL, 0);
}

static void instances_resolve_profiles_and_keep_unknown_ids(void **state)
{
    (void)state;
    struct cluster_gpu g = {
        .uuid = "GPU-x", .gpu_type = "H100-80GB", .mig_slices = 7, .mig_enabled = true};
    struct proto_mig_instance in[] = {
        {.profile_id = 9, .start = 4, .gi_id = 2, .ci_id = 0, .uuid = "MIG-a"},
        {.profile_id = 19, .start = 0, .gi_id = 7, .ci_id = PROTO_NONE, .uuid = NULL},
        {.profile_id = 33, .start = 2, .gi_id = 9, .ci_id = 0, .uuid = "MIG-c"},
    };
    assert_int_equal(migctl_gpu_set(&g, in, 3), 0);
    assert_int_equal(g.nmig, 3);
    assert_string_equal(g.mig[0].profile, "3g.40gb");
    assert_int_equal(g.mig[0].start, 4);
    assert_string_equal(g.mig[0].uuid, "MIG-a");
    assert_string_equal(g.mig[1].profile, "1g.10gb");
    assert_int_equal(g.mig[1].ci_id, -1);
    assert_null(g.mig[1].uuid);
    assert_null(g.mig[2].profile); /* 33: no H100-80GB profile */
    assert_int_equal(g.mig[2].profile_id, 33);
    /* Another report replaces them. */
    assert_int_equal(migctl_gpu_set(&g, in, 1), 0);
    assert_int_equal(g.nmig, 1);
    cluster_gpu_mig_clear(&g);
    assert_int_equal(g.nmig, 0);
}

/* A GPU of H100 instances: (profile name, start, busy). */
struct inst {
    const char *profile;
    uint8_t start;
    bool busy;
};

static struct mig_gpu gpu_of(const struct inst *v, size_t n)
{
    struct mig_gpu g = {.type = h100(), .changed_ms = INT64_MIN};
    for (size_t k = 0; k < n; k++)
        g.inst[g.n++] =
            (struct mig_instance){(uint8_t)profile(v[k].profile), v[k].start, v[k].busy, INT64_MIN};
    return g;
}

static size_t target_of(const char *layout, struct mig_instance *ret)
{
    size_t n = 0;
    bool enabled;
    assert_int_equal(mig_layout_named(h100(), layout, ret, &n, &enabled, NULL, 0), 0);
    return n;
}

static void static_plan_turns_an_idle_gpu_into_the_layout(void **state)
{
    (void)state;
    struct inst v[] = {{"7g.80gb", 0, false}};
    struct mig_gpu g = gpu_of(v, 1);
    struct mig_instance target[MIG_MAX_INSTANCES];
    size_t nt = target_of("all-1g.10gb", target);
    struct mig_gpu_plan p;
    migctl_static_plan(&g, target, nt, &p);
    assert_int_equal(p.ndestroy, 1);
    assert_int_equal(p.destroy[0].profile, profile("7g.80gb"));
    assert_int_equal(p.ncreate, 7);
    /* What it leads to is the layout, valid by the placement table. */
    assert_int_equal(mig_gpu_plan_apply(&g, &p, 1000), 0);
    assert_int_equal(g.n, 7);
    assert_int_equal(mig_layout_check(h100(), g.inst, g.n, NULL, 0), 0);
    migctl_static_plan(&g, target, nt, &p);
    assert_int_equal(p.ndestroy + p.ncreate, 0); /* reached: nothing more */
}

static void static_plan_never_names_a_busy_instance(void **state)
{
    (void)state;
    /* A busy 3g at 4, an idle 4g at 0; all-1g wants 1g everywhere: the 4g
     * goes and 1g come at 0..3, the 3g stays and nothing is made on its
     * slots. */
    struct inst v[] = {{"4g.40gb", 0, false}, {"3g.40gb", 4, true}};
    struct mig_gpu g = gpu_of(v, 2);
    struct mig_instance target[MIG_MAX_INSTANCES];
    size_t nt = target_of("all-1g.10gb", target);
    struct mig_gpu_plan p;
    migctl_static_plan(&g, target, nt, &p);
    assert_int_equal(p.ndestroy, 1);
    assert_int_equal(p.destroy[0].instance, 0);
    assert_int_equal(p.ncreate, 4);
    for (uint8_t k = 0; k < p.ncreate; k++)
        assert_true(p.create[k].start < 4);
    assert_int_equal(mig_gpu_plan_apply(&g, &p, 1000), 0);
    assert_int_equal(mig_layout_check(h100(), g.inst, g.n, NULL, 0), 0);
}

static void static_plan_waits_where_only_busy_instances_differ(void **state)
{
    (void)state;
    /* The 1g at 0..3 as wanted, a busy 3g at 4: nothing to do until it ends. */
    struct inst v[] = {{"1g.10gb", 0, false},
                       {"1g.10gb", 1, true},
                       {"1g.10gb", 2, false},
                       {"1g.10gb", 3, false},
                       {"3g.40gb", 4, true}};
    struct mig_gpu g = gpu_of(v, 5);
    struct mig_instance target[MIG_MAX_INSTANCES];
    size_t nt = target_of("all-1g.10gb", target);
    struct mig_gpu_plan p;
    migctl_static_plan(&g, target, nt, &p);
    assert_int_equal(p.ndestroy, 0);
    assert_int_equal(p.ncreate, 0);
    /* Once the 3g is idle, it goes and 1g take its slots. */
    g.inst[4].busy = false;
    migctl_static_plan(&g, target, nt, &p);
    assert_int_equal(p.ndestroy, 1);
    assert_int_equal(p.destroy[0].instance, 4);
    assert_int_equal(p.ncreate, 3);
}

static void static_plan_keeps_an_idle_instance_whose_slots_stay_blocked(void **state)
{
    (void)state;
    /* all-balanced on an H100: 2 x 1g.10gb, 2g.20gb, 3g.40gb. A busy 4g at 0
     * blocks every target instance at 0..3; an idle 3g at 4 is in the
     * target: the plan is empty (nothing destroyed for nothing). */
    struct inst v[] = {{"4g.40gb", 0, true}, {"3g.40gb", 4, false}};
    struct mig_gpu g = gpu_of(v, 2);
    struct mig_instance target[MIG_MAX_INSTANCES];
    size_t nt = target_of("all-balanced", target);
    struct mig_gpu_plan p;
    migctl_static_plan(&g, target, nt, &p);
    for (uint8_t k = 0; k < p.ndestroy; k++)
        assert_int_not_equal(p.destroy[k].instance, 0);
    for (uint8_t k = 0; k < p.ncreate; k++)
        assert_true(p.create[k].start >= 4);
    assert_int_equal(mig_gpu_plan_apply(&g, &p, 1000), 0);
    assert_int_equal(mig_layout_check(h100(), g.inst, g.n, NULL, 0), 0);
}

static void an_attempts_mig_share_is_stored_and_read_back(void **state)
{
    (void)state;
    struct attempt_share sh[2] = {
        {.node = "n1",
         .uuid = "GPU-a",
         .milli = 125,
         .mem_mib = 9984,
         .mig = true,
         .mig_start = 6,
         .mig_profile = "1g.10gb"},
        {.node = "n1", .uuid = "GPU-b", .milli = 1000, .mem_mib = 81559},
    };
    struct attempt_part part = {.node = "n1", .cpus = 1, .mem_mib = 1024};
    struct attempt a = {.n = 1, .parts = &part, .nparts = 1, .shares = sh, .nshares = 2};
    char *nodes = NULL, *gpus = NULL;
    assert_int_equal(attempt_encode(&a, &nodes, &gpus), 0);
    struct attempt b = {0};
    assert_int_equal(attempt_decode(nodes, &b), 0);
    assert_int_equal(b.nshares, 2);
    assert_true(b.shares[0].mig);
    assert_int_equal(b.shares[0].mig_start, 6);
    assert_string_equal(b.shares[0].mig_profile, "1g.10gb");
    assert_false(b.shares[1].mig); /* a whole GPU stays one */
    attempt_release(&b);
    free(nodes);
    free(gpus);
    /* A stored share whose "mig" is bad is refused, not half read. */
    struct attempt c = {0};
    assert_int_equal(attempt_decode("{\"parts\": [], \"shares\": [{\"node\": \"n1\", \"uuid\": "
                                    "\"GPU-a\", \"milli\": 125, \"mem_mib\": 1, \"mig\": "
                                    "{\"profile\": \"1g.10gb\", \"start\": 9}}]}",
                                    &c),
                     GPO_EINVAL);
    attempt_release(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(instances_resolve_profiles_and_keep_unknown_ids),
        cmocka_unit_test(static_plan_turns_an_idle_gpu_into_the_layout),
        cmocka_unit_test(static_plan_never_names_a_busy_instance),
        cmocka_unit_test(static_plan_waits_where_only_busy_instances_differ),
        cmocka_unit_test(static_plan_keeps_an_idle_instance_whose_slots_stay_blocked),
        cmocka_unit_test(an_attempts_mig_share_is_stored_and_read_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

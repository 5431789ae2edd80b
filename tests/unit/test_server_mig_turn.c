/* test_server_mig_turn.c - the MIG planning turn on a server object (a real
 * store in a directory of its own, a clock the test sets, no HTTP server and
 * no loop thread): a dynamic pool's plan from the pass's queue, the view
 * without the instances a plan in flight destroys, no second plan while one
 * is in flight, an instance a job holds never destroyed, nothing offered
 * before a node's first heartbeat. GPUORCH_MIG_TURN_NODES=N (8 GPUs each)
 * times one turn over a large pool (printed, not asserted). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "base/err.h"
#include "server/mig/mig_int.h"
#include "server/sched/sched.h"
#include "server/sched/sched_int.h"
#include "server/srv.h"
#include "tmptree.h"
#include "base/banned.h"

#define T0 1800000000000

struct env {
    char dir[64];
    int64_t now;
    struct server s;
};

static int64_t test_now(void *ctx)
{
    return ((struct env *)ctx)->now;
}

static int64_t test_mono(void)
{
    return 0;
}

static void check(int rc, const char *what, const char *err)
{
    if (rc)
        print_error("%s: %s (%s)\n", what, gpo_strerror(rc), err);
    assert_int_equal(rc, 0);
}

/* Node NAME of pool dyn: `ngpus` H100s in MIG mode, each holding the
 * instances `layout` gives ((profile id, start) pairs, -1 ends), every one
 * with a compute instance and a UUID; a heartbeat came. */
static void add_node(struct env *e, const char *name, uint32_t id, int ngpus, const int *layout)
{
    struct server *s = &e->s;
    char err[256] = "";
    struct cluster_node node = {.id = id, .cpus = 64, .mem_mib = 1 << 20};
    node.name = strdup(name);
    node.pool = strdup("dyn");
    node.gpus = calloc((size_t)ngpus, sizeof(*node.gpus));
    for (int g = 0; g < ngpus; g++) {
        char uuid[64];
        snprintf(uuid, sizeof(uuid), "GPU-%08x-0000-4000-8000-%012x", id, g);
        node.gpus[g] = (struct cluster_gpu){.index = (uint32_t)g,
                                            .uuid = strdup(uuid),
                                            .gpu_type = strdup("H100-80GB"),
                                            .mem_mib = 81559,
                                            .nvlink_domain = -1,
                                            .mig_slices = 7,
                                            .mig_enabled = true,
                                            .mig_pending = true};
        struct proto_mig_instance in[MIG_MAX_INSTANCES];
        char mig_uuids[MIG_MAX_INSTANCES][64];
        size_t n = 0;
        for (; layout[2 * n] >= 0; n++) {
            snprintf(mig_uuids[n], sizeof(mig_uuids[n]), "MIG-%08x-%04x-4000-8000-%012zx", id, g,
                     n);
            in[n] = (struct proto_mig_instance){.profile_id = (uint32_t)layout[2 * n],
                                                .start = (uint32_t)layout[2 * n + 1],
                                                .gi_id = (uint32_t)n + 1,
                                                .ci_id = 0,
                                                .uuid = mig_uuids[n]};
        }
        check(migctl_gpu_set(&node.gpus[g], in, n), "instances", "");
        node.ngpus++;
    }
    check(cluster_node_add(&s->cluster, &node, err, sizeof(err)), "node add", err);
    check(nodes_add(&s->nodes, name, e->now), "runtime", "");
    struct proto_heartbeat hb = {.sampled_at_ms = PROTO_NONE};
    nodes_heartbeat(nodes_find(&s->nodes, name), &hb, e->now, 0);
}

static const int seven_g[] = {0, 0, -1};          /* 7g.80gb at 0 */
static const int three_four[] = {9, 4, 5, 0, -1}; /* 3g.40gb at 4, 4g.40gb at 0 */

static int setup_with(void **state, int nodes, const int *layout, bool heartbeat)
{
    struct env *e = calloc(1, sizeof(*e));
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_server_mig_turn.XXXXXX");
    if (!e || !mkdtemp(e->dir))
        return -1;
    e->now = T0;
    e->s.clock = (struct srv_clock){test_now, test_mono, e};
    e->s.cfg.pass_interval_ms = 5000;
    e->s.cfg.node_timeout_ms = 600000;
    char path[128], err[256] = "";
    snprintf(path, sizeof(path), "%s/gpuorch.db", e->dir);
    if (store_open_sqlite(path, &e->s.store, err, sizeof(err)) ||
        store_epoch_acquire(e->s.store, &e->s.epoch) || srv_init(&e->s))
        return -1;
    struct server *s = &e->s;
    check(config_load(&s->config, e->now, err, sizeof(err)), "config_load", err);
    struct cluster_pool pool = {
        .id = 100,
        .mig = {.mode = CLUSTER_MIG_DYNAMIC, .settle_ms = 0, .hold_ms = 0, .min_interval_ms = 0}};
    pool.name = strdup("dyn");
    check(cluster_pool_add(&s->cluster, &pool, err, sizeof(err)), "pool", err);
    struct cluster_team team = {.id = 101, .weight = 1, .borrow_limit_milli = -1};
    team.name = strdup("ml");
    cluster_idle_default(&team.idle);
    check(cluster_team_add(&s->cluster, &team, err, sizeof(err)), "team", err);
    for (int k = 0; k < nodes; k++) {
        char name[32];
        snprintf(name, sizeof(name), "n%04d", k);
        add_node(e, name, 1000 + (uint32_t)k, nodes > 1 ? 8 : 1, layout);
        if (!heartbeat)
            nodes_find(&s->nodes, name)->has_sample = false;
    }
    check(cost_load(&s->cost, e->now, err, sizeof(err)), "cost_load", err);
    *state = e;
    return 0;
}

static int setup_one(void **state)
{
    return setup_with(state, 1, seven_g, true);
}

static int setup_busy(void **state)
{
    return setup_with(state, 1, three_four, true);
}

static int setup_silent(void **state)
{
    return setup_with(state, 1, seven_g, false);
}

static int teardown(void **state)
{
    struct env *e = *state;
    store_close(e->s.store);
    srv_release(&e->s);
    tmptree_remove(e->dir);
    free(e);
    return 0;
}

/* A stored job of team ml in pool dyn asking for one instance of `profile`. */
static struct job *submit(struct env *e, const char *profile)
{
    struct job_submit sub = {.user_id = STORE_NULL, .submit_ms = e->now, .ntasks = 1};
    snprintf(sub.user, sizeof(sub.user), "alice");
    json_t *spec = json_pack("{s:[s], s:s, s:s, s:s}", "command", "/bin/true", "mig_profile",
                             profile, "team", "ml", "pool", "dyn");
    char err[256] = "";
    check(jobspec_decode(spec, &sub.spec, err, sizeof(err)), "jobspec", err);
    json_decref(spec);
    struct store_batch *b = store_batch_new();
    check(job_submit_rows(&sub, NULL, b), "rows", "");
    int64_t id = 0;
    char msg[256] = "";
    check(store_commit_wait(e->s.store, b, &id, 1, msg, sizeof(msg)), "commit", msg);
    struct job *j = NULL;
    check(job_submit_apply(&e->s.jobs, &sub, &id, 1, &j), "apply", "");
    job_submit_release(&sub);
    return j;
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One pass as the loop runs it (the lock held), and the MIG turn after it;
 * the turn's duration in *turn_ns (may be NULL). */
static void pass(struct env *e, int64_t *turn_ns)
{
    struct server *s = &e->s;
    struct sched_input in;
    char err[256] = "";
    pthread_mutex_lock(&s->lock);
    check(sched_input(s, &in, err, sizeof(err)), "input", err);
    check(sched_decide(s, &in, e->now), "decide", "");
    struct sched_plan plan;
    check(sched_commit(s, &in, e->now, &plan), "commit", "");
    sched_apply(s, &in, &plan, e->now);
    sched_plan_release(&plan);
    int64_t t0 = mono_ns();
    migctl_pass(s, &in.view, in.reqs, in.nqueue, &s->sched->result, e->now);
    if (turn_ns)
        *turn_ns = mono_ns() - t0;
    sched_run_table_clear(&s->sched->running);
    sched_input_release(&in);
    pthread_mutex_unlock(&s->lock);
}

static size_t plans_of(struct env *e, const char *node, struct proto_mig_plan **ret)
{
    size_t n = 0;
    check(migctl_node_plans(e->s.mig, node, ret, &n), "plans", "");
    return n;
}

static void a_queue_of_1g_jobs_gets_a_plan_and_the_view_loses_what_it_destroys(void **state)
{
    struct env *e = *state;
    for (int k = 0; k < 3; k++)
        submit(e, "1g.10gb");
    pass(e, NULL);
    struct proto_mig_plan *p = NULL;
    assert_int_equal(plans_of(e, "n0000", &p), 1);
    assert_int_equal(p[0].ndestroy, 1);
    assert_int_equal(p[0].destroy[0].profile_id, 0); /* the 7g */
    assert_int_equal(p[0].ncreate, 3);
    for (size_t k = 0; k < p[0].ncreate; k++)
        assert_int_equal(p[0].create[k].profile_id, 19);
    uint64_t id = p[0].id;
    free(p);
    /* The next pass's view has no 7g to offer; no second plan meanwhile. */
    struct sched_input in;
    char err[256] = "";
    pthread_mutex_lock(&e->s.lock);
    check(sched_input(&e->s, &in, err, sizeof(err)), "input", err);
    assert_int_equal(in.view.gpus[0].mig_n, 0);
    sched_run_table_clear(&e->s.sched->running);
    sched_input_release(&in);
    pthread_mutex_unlock(&e->s.lock);
    e->now += 1000;
    pass(e, NULL);
    assert_int_equal(plans_of(e, "n0000", &p), 1);
    assert_true(p[0].id == id);
    free(p);
}

static void an_instance_a_job_holds_is_never_destroyed(void **state)
{
    struct env *e = *state;
    struct job *three = submit(e, "3g.40gb");
    pass(e, NULL); /* it starts on the 3g at 4 */
    assert_int_equal(three->att.nshares, 1);
    assert_true(three->att.shares[0].mig);
    assert_int_equal(three->att.shares[0].mig_start, 4);
    for (int k = 0; k < 4; k++)
        submit(e, "1g.10gb");
    e->now += 1000;
    pass(e, NULL);
    struct proto_mig_plan *p = NULL;
    assert_int_equal(plans_of(e, "n0000", &p), 1);
    for (size_t k = 0; k < p[0].ndestroy; k++)
        assert_int_not_equal(p[0].destroy[k].start, 4);
    assert_int_equal(p[0].ndestroy, 1); /* the idle 4g at 0 */
    assert_int_equal(p[0].destroy[0].profile_id, 5);
    for (size_t k = 0; k < p[0].ncreate; k++)
        assert_true(p[0].create[k].start < 4);
    free(p);
}

static void nothing_is_offered_before_a_nodes_first_heartbeat(void **state)
{
    struct env *e = *state;
    struct job *j = submit(e, "7g.80gb");
    pass(e, NULL);
    assert_int_equal(j->att.n, 0); /* the stored 7g is not offered yet */
    struct proto_heartbeat hb = {.sampled_at_ms = PROTO_NONE};
    nodes_heartbeat(nodes_find(&e->s.nodes, "n0000"), &hb, e->now, 0);
    e->now += 1000;
    pass(e, NULL);
    assert_int_equal(j->att.n, 1);
    assert_true(j->att.shares[0].mig);
    assert_string_equal(j->att.shares[0].mig_profile, "7g.80gb");
}

static void a_large_pools_turn_is_timed(void **state)
{
    (void)state;
    const char *v = getenv("GPUORCH_MIG_TURN_NODES");
    int nodes = v ? (int)strtol(v, NULL, 10) : 0;
    if (nodes <= 0)
        return; /* the measurement is on request only */
    void *st = NULL;
    assert_int_equal(setup_with(&st, nodes, seven_g, true), 0);
    struct env *e = st;
    int jobs = nodes * 8 * 3;
    for (int k = 0; k < jobs; k++)
        submit(e, "1g.10gb");
    int64_t t0 = mono_ns(), turn = 0;
    pass(e, &turn);
    int64_t all = mono_ns() - t0;
    print_message("# %d nodes x 8 H100, %d pending 1g.10gb jobs: pass and turn %.1f ms, the MIG "
                  "turn %.1f ms, %zu plans\n",
                  nodes, jobs, (double)all / 1e6, (double)turn / 1e6, e->s.mig->nplans);
    e->now += 1000;
    pass(e, &turn);
    print_message("# the next turn, every GPU planning: %.1f ms\n", (double)turn / 1e6);
    teardown(&st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            a_queue_of_1g_jobs_gets_a_plan_and_the_view_loses_what_it_destroys, setup_one,
            teardown),
        cmocka_unit_test_setup_teardown(an_instance_a_job_holds_is_never_destroyed, setup_busy,
                                        teardown),
        cmocka_unit_test_setup_teardown(nothing_is_offered_before_a_nodes_first_heartbeat,
                                        setup_silent, teardown),
        cmocka_unit_test(a_large_pools_turn_is_timed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

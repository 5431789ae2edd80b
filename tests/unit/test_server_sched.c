/* test_server_sched.c - the scheduling loop's steps without a daemon: a
 * server object around a real store in a directory of its own, a clock the
 * test sets, no HTTP server and no loop thread. A pass's input, decision,
 * commit and apply one by one (nothing reaches memory before its commit is
 * on disk; a job cancelled meanwhile gets its attempt killed), a failed
 * dependency, an attempt's end charged at the next pass, node timeouts,
 * GPUs named by node and UUID (a down twin record with the same UUIDs), a
 * lost node's rejoin and the hold on its GPUs, registrations that name
 * another node's UUID, node deletes, a whole turn of the loop, and when
 * the loop runs a pass: at once after a submit on an idle cluster or an end,
 * the longest gap for a submit behind a backlog, a gap that follows the
 * pass's cost, the other periodic tasks on their own timer, and the
 * passes counted by trigger. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "server/config/config_int.h"
#include "server/sched/sched.h"
#include "server/sched/sched_int.h"
#include "server/srv.h"
#include "tmptree.h"
#include "util/prom.h"
#include "base/banned.h"

#define T0   1800000000000
#define UUID "GPU-11111111-2222-3333-4444-555555555555"

struct env {
    char dir[64];
    int64_t now;  /* the server's clock */
    int64_t step; /* how far the wall clock was set ahead of the monotonic one */
    struct server s;
};

static struct env *clock_env; /* the monotonic clock takes no context */

static int64_t test_now(void *ctx)
{
    return ((struct env *)ctx)->now;
}

/* The monotonic clock, ms: the wall clock but for its steps. */
static int64_t mono_of(const struct env *e)
{
    return e->now - e->step;
}

static int64_t test_mono(void)
{
    return clock_env ? mono_of(clock_env) * 1000000 : 0;
}

static void check(int rc, const char *what, const char *err)
{
    if (rc)
        print_error("%s: %s (%s)\n", what, gpo_strerror(rc), err);
    assert_int_equal(rc, 0);
}

/* Pool main, team ml, node n1 with one GPU, and the class "normal". */
static void configure(struct env *e)
{
    struct server *s = &e->s;
    char err[256] = "";
    check(config_load(&s->config, e->now, err, sizeof(err)), "config_load", err);
    struct cluster_pool pool = {.id = 100};
    pool.name = strdup("main");
    check(cluster_pool_add(&s->cluster, &pool, err, sizeof(err)), "pool", err);
    struct cluster_team team = {.id = 101, .weight = 1, .borrow_limit_milli = -1};
    team.name = strdup("ml");
    cluster_idle_default(&team.idle);
    check(cluster_team_add(&s->cluster, &team, err, sizeof(err)), "team", err);
    json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:[{s:i, s:s, s:s, s:i}]}", "name", "n1", "pool",
                          "main", "cpus", 8, "mem_mib", 65536, "gpus", "index", 0, "uuid", UUID,
                          "gpu_type", "H100-80GB", "mem_mib", 81920);
    struct cluster_node node = {0};
    check(cluster_node_decode(o, 0, &node, err, sizeof(err)), "node", err);
    json_decref(o);
    node.id = 102;
    check(cluster_node_add(&s->cluster, &node, err, sizeof(err)), "node add", err);
    check(nodes_add(&s->nodes, "n1", e->now), "runtime", "");
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_server_sched.XXXXXX");
    if (!e || !mkdtemp(e->dir))
        return -1;
    e->now = T0;
    clock_env = e;
    e->s.clock = (struct srv_clock){test_now, test_mono, e};
    e->s.cfg.pass_interval_ms = 5000;
    e->s.cfg.node_timeout_ms = 60000;
    char path[128], err[256];
    snprintf(path, sizeof(path), "%s/gpuorch.db", e->dir);
    if (store_open_sqlite(path, &e->s.store, err, sizeof(err)) ||
        store_epoch_acquire(e->s.store, &e->s.epoch) || srv_init(&e->s))
        return -1;
    configure(e);
    check(cost_load(&e->s.cost, e->now, err, sizeof(err)), "cost_load", err);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    store_close(e->s.store);
    srv_release(&e->s);
    tmptree_remove(e->dir);
    clock_env = NULL;
    free(e);
    return 0;
}

/* A stored job of team ml asking for `gpus` whole GPUs (deps: afterok on
 * `after`, 0 for none), in memory too. */
static struct job *submit(struct env *e, int gpus, int64_t after)
{
    struct job_submit sub = {.user_id = STORE_NULL, .submit_ms = e->now, .ntasks = 1};
    snprintf(sub.user, sizeof(sub.user), "alice");
    json_t *spec =
        json_pack("{s:[s], s:i, s:s}", "command", "/bin/true", "gpus", gpus, "team", "ml");
    if (after)
        json_object_set_new(spec, "dependencies",
                            json_pack("[{s:s, s:I}]", "type", "afterok", "job", after));
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

/* The state of job `id`'s row and of its last attempt's, from the store. */
static void stored(struct env *e, int64_t id, char *job_state, char *att_state, size_t len)
{
    struct store_job row = {0};
    assert_int_equal(store_job_get(e->s.store, id, &row), 0);
    snprintf(job_state, len, "%s", row.state);
    snprintf(att_state, len, "%s",
             row.nattempts ? row.attempts[row.nattempts - 1].state : "(none)");
    store_job_release(&row);
}

/* One pass through its four steps, the lock held as the loop holds it. */
static void pass(struct env *e, bool cancel_between)
{
    struct server *s = &e->s;
    struct sched_input in;
    char err[256] = "";
    pthread_mutex_lock(&s->lock);
    check(sched_input(s, &in, err, sizeof(err)), "input", err);
    check(sched_decide(s, &in, e->now), "decide", "");
    if (cancel_between)
        for (size_t k = 0; k < in.nqueue; k++)
            in.jobs[k]->state = JOB_CANCELLED;
    struct sched_plan plan;
    check(sched_commit(s, &in, e->now, &plan), "commit", "");
    sched_apply(s, &in, &plan, e->now);
    sched_plan_release(&plan);
    sched_run_table_clear(&s->sched->running);
    sched_input_release(&in);
    pthread_mutex_unlock(&s->lock);
}

static void decisions_reach_memory_only_after_their_commit(void **state)
{
    struct env *e = *state;
    struct server *s = &e->s;
    struct job *j = submit(e, 1, 0);
    uint64_t rev = nodes_find(&s->nodes, "n1")->rev;
    struct sched_input in;
    char err[256] = "", js[32], as[32];
    pthread_mutex_lock(&s->lock);
    check(sched_input(s, &in, err, sizeof(err)), "input", err);
    assert_int_equal(in.nqueue, 1);
    assert_int_equal(s->sched->running.n, 0);
    check(sched_decide(s, &in, e->now), "decide", "");
    assert_int_equal(s->sched->result.nstarts, 1);
    assert_int_equal(s->sched->result.starts[0].job, (uint64_t)j->id);
    /* Decided, not committed: nothing changed, nothing stored. */
    assert_int_equal(j->state, JOB_PENDING);
    assert_int_equal(j->att.n, 0);
    stored(e, j->id, js, as, sizeof(js));
    assert_string_equal(js, "PENDING");
    assert_string_equal(as, "(none)");
    struct sched_plan plan;
    check(sched_commit(s, &in, e->now, &plan), "commit", "");
    /* Committed: on disk, not yet in memory or told to the agent. */
    stored(e, j->id, js, as, sizeof(js));
    assert_string_equal(js, "RUNNING");
    assert_string_equal(as, "ASSIGNED");
    assert_int_equal(j->att.n, 0);
    assert_int_equal(nodes_find(&s->nodes, "n1")->rev, rev);
    sched_apply(s, &in, &plan, e->now);
    assert_int_equal(j->state, JOB_RUNNING);
    assert_int_equal(j->att.n, 1);
    assert_string_equal(j->att.shares[0].uuid, UUID);
    assert_int_equal(j->att.start_ms, T0);
    assert_true(nodes_find(&s->nodes, "n1")->rev > rev);
    /* The run table holds what the decisions leave. */
    assert_non_null(sched_run_table_find(&s->sched->running, (uint64_t)j->id));
    sched_plan_release(&plan);
    sched_run_table_clear(&s->sched->running);
    sched_input_release(&in);
    pthread_mutex_unlock(&s->lock);

    /* The next pass sees it running and starts nothing new. */
    struct job *k = submit(e, 1, 0);
    e->now += 1000;
    pass(e, false);
    assert_int_equal(k->state, JOB_PENDING);
    assert_non_null(k->wait);
}

static void a_job_cancelled_while_the_commit_runs_gets_its_attempt_killed(void **state)
{
    struct env *e = *state;
    struct job *j = submit(e, 1, 0);
    pass(e, true);
    assert_int_equal(j->att.n, 1);
    assert_int_equal(j->att.kill, KILL_CANCELLED);
    assert_int_equal(j->att.grace_ms, e->s.sched->policy.preempt_grace_ms);
}

static void a_failed_dependency_fails_the_job_at_the_next_pass(void **state)
{
    struct env *e = *state;
    struct job *a = submit(e, 0, 0);
    struct job *b = submit(e, 0, a->id);
    a->state = JOB_FAILED; /* as its end would leave it */
    pass(e, false);
    char js[32], as[32];
    assert_int_equal(b->state, JOB_FAILED);
    assert_non_null(strstr(b->reason, "ended FAILED, not COMPLETED"));
    stored(e, b->id, js, as, sizeof(js));
    assert_string_equal(js, "FAILED");
}

static void an_end_is_committed_then_charged_by_the_next_pass(void **state)
{
    struct env *e = *state;
    struct server *s = &e->s;
    struct job *j = submit(e, 1, 0);
    pass(e, false);
    assert_int_equal(j->att.n, 1);
    e->now += 60000;
    struct store_batch *b = store_batch_new();
    struct sched_end end;
    pthread_mutex_lock(&s->lock);
    check(sched_end_plan(s, j, ATTEMPT_COMPLETED, 0, STORE_NULL, NULL, e->now, &end, b), "plan",
          "");
    assert_int_equal(j->att.n, 1); /* planned only */
    pthread_mutex_unlock(&s->lock);
    char msg[256] = "", js[32], as[32];
    check(store_commit_wait(s->store, b, NULL, 0, msg, sizeof(msg)), "commit", msg);
    pthread_mutex_lock(&s->lock);
    sched_end_apply(s, &end);
    assert_int_equal(j->state, JOB_COMPLETED);
    assert_int_equal(j->att.n, 0);
    assert_int_equal(s->sched->nended, 1);
    assert_true(s->sched->dirty);
    pthread_mutex_unlock(&s->lock);
    stored(e, j->id, js, as, sizeof(js));
    assert_string_equal(js, "COMPLETED");
    assert_string_equal(as, "COMPLETED");
    /* Its minute of GPU-time reaches fair share at the next pass. */
    pass(e, false);
    assert_int_equal(s->sched->nended, 0);
    double used = 0;
    for (size_t k = 0; k < s->sched->state.nusage; k++)
        used += s->sched->state.usage[k].gpu_ms;
    assert_true(used > 0);
}

/* Silence is counted on the monotonic clock: the wall clock set ahead ten
 * minutes (NTP, a VM's clock) ends nothing, set back an hour hides nothing. */
static void a_step_of_the_wall_clock_neither_loses_nor_hides_a_node(void **state)
{
    struct env *e = *state;
    struct server *s = &e->s;
    struct job *j = submit(e, 1, 0);
    pass(e, false);
    assert_int_equal(j->att.n, 1);
    pthread_mutex_lock(&s->lock);
    nodes_heartbeat(nodes_find(&s->nodes, "n1"), NULL, e->now, mono_of(e)); /* alive */
    e->now += 600000 + 1000; /* a second passes, the wall clock 10 minutes ahead */
    e->step += 600000;
    sched_node_timeouts(s, e->now, mono_of(e));
    assert_int_equal(cluster_node_get(&s->cluster, "n1")->state, CLUSTER_NODE_UP);
    assert_int_not_equal(j->state, JOB_NODE_FAIL);
    assert_int_equal(nodes_silence_ms(nodes_find(&s->nodes, "n1"), e->now, mono_of(e)), 1000);
    e->now += 30000 - 3600000; /* 30 s more, the wall clock an hour back */
    e->step -= 3600000;
    sched_node_timeouts(s, e->now, mono_of(e));
    assert_int_equal(cluster_node_get(&s->cluster, "n1")->state, CLUSTER_NODE_UP);
    e->now += 30000; /* 61 s of silence by the monotonic clock */
    sched_node_timeouts(s, e->now, mono_of(e));
    assert_int_equal(cluster_node_get(&s->cluster, "n1")->state, CLUSTER_NODE_DOWN);
    assert_int_equal(j->state, JOB_NODE_FAIL);
    pthread_mutex_unlock(&s->lock);
}

static void a_silent_node_is_marked_down_and_its_attempts_end_node_fail(void **state)
{
    struct env *e = *state;
    struct server *s = &e->s;
    struct job *j = submit(e, 1, 0);
    pass(e, false);
    assert_int_equal(j->att.n, 1);
    e->now += 30000; /* within the timeout: nothing */
    pthread_mutex_lock(&s->lock);
    sched_node_timeouts(s, e->now, mono_of(e));
    assert_int_equal(cluster_node_get(&s->cluster, "n1")->state, CLUSTER_NODE_UP);
    e->now += 31000;
    sched_node_timeouts(s, e->now, mono_of(e));
    assert_int_equal(cluster_node_get(&s->cluster, "n1")->state, CLUSTER_NODE_DOWN);
    assert_int_equal(j->state, JOB_NODE_FAIL);
    assert_string_equal(j->reason, "attempt 1 NODE_FAIL: node n1 stopped heartbeating");
    pthread_mutex_unlock(&s->lock);
    char js[32], as[32];
    stored(e, j->id, js, as, sizeof(js));
    assert_string_equal(js, "NODE_FAIL");
    assert_string_equal(as, "NODE_FAIL");
}

/* A second node record "n0" with n1's GPU UUID, down: what an agent leaves
 * behind when it registers the same machine again under another name. */
static void add_down_twin(struct env *e)
{
    struct server *s = &e->s;
    char err[256] = "";
    json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:[{s:i, s:s, s:s, s:i}]}", "name", "n0", "pool",
                          "main", "cpus", 8, "mem_mib", 65536, "gpus", "index", 0, "uuid", UUID,
                          "gpu_type", "H100-80GB", "mem_mib", 81920);
    struct cluster_node node = {0};
    check(cluster_node_decode(o, 0, &node, err, sizeof(err)), "twin", err);
    json_decref(o);
    node.id = 103;
    node.state = CLUSTER_NODE_DOWN;
    check(cluster_node_add(&s->cluster, &node, err, sizeof(err)), "twin add", err);
    check(nodes_add(&s->nodes, "n0", e->now), "twin runtime", "");
}

static void a_running_job_holds_its_nodes_gpu_not_a_twins(void **state)
{
    struct env *e = *state;
    add_down_twin(e);
    struct job *j = submit(e, 1, 0);
    pass(e, false);
    assert_int_equal(j->att.n, 1);
    assert_string_equal(j->att.shares[0].node, "n1");
    /* n1's one GPU is j's: the next job waits, whatever n0's record says. */
    struct job *k = submit(e, 1, 0);
    for (int round = 0; round < 3; round++) {
        e->now += 1000;
        pass(e, false);
        assert_int_equal(k->state, JOB_PENDING);
        assert_int_equal(k->att.n, 0);
    }
}

static void a_twins_dirty_gpu_does_not_hold_the_live_one(void **state)
{
    struct env *e = *state;
    struct server *s = &e->s;
    add_down_twin(e);
    char *uuid = UUID;
    nodes_dirty_add(nodes_find(&s->nodes, "n0"), &uuid, 1);
    struct job *j = submit(e, 1, 0);
    pass(e, false);
    assert_int_equal(j->att.n, 1); /* n0's dirty GPU is n0's */
    assert_string_equal(j->att.shares[0].node, "n1");
}

/* A heartbeat body naming `dirty` (NULL: none) as its dirty GPU. */
static unsigned beat(struct env *e, const char *dirty)
{
    struct node_rt *rt = nodes_find(&e->s.nodes, "n1");
    struct proto_heartbeat hb = {.sampled_at_ms = PROTO_NONE};
    if (dirty) {
        hb.dirty = calloc(2, sizeof(*hb.dirty));
        hb.dirty[0] = strdup(dirty);
        hb.ndirty = 1;
    }
    unsigned out = nodes_heartbeat(rt, &hb, e->now, mono_of(e));
    proto_heartbeat_release(&hb);
    return out;
}

/* The node times out with job j on it (the lock held). */
static void lose_node(struct env *e, const struct job *j)
{
    e->now += 61000;
    sched_node_timeouts(&e->s, e->now, mono_of(e));
    assert_int_equal(j->state, JOB_NODE_FAIL);
}

static void a_lost_node_rejoins_by_heartbeat_and_gets_work_once_its_gpus_are_clean(void **state)
{
    struct env *e = *state;
    struct server *s = &e->s;
    struct job *j = submit(e, 1, 0);
    pass(e, false);
    pthread_mutex_lock(&s->lock);
    lose_node(e, j);
    struct node_rt *rt = nodes_find(&s->nodes, "n1");
    assert_true(rt->lost);
    assert_true(rt->hold);
    /* It heartbeats again (a stopped agent continued): up at the next turn. */
    e->now += 1000;
    assert_int_equal(beat(e, NULL), NODES_BEAT_BACK);
    sched_node_timeouts(s, e->now, mono_of(e));
    assert_int_equal(cluster_node_get(&s->cluster, "n1")->state, CLUSTER_NODE_UP);
    pthread_mutex_unlock(&s->lock);
    char js[32], as[32];
    struct job *k = submit(e, 1, 0);
    pass(e, false);
    assert_int_equal(k->att.n, 0); /* held: the agent has not said its GPU is clean */
    pthread_mutex_lock(&s->lock);
    /* Heartbeats before the agent applied an answer without j's attempt
     * prove nothing, nor does the first one after (it may predate it). */
    assert_int_equal(beat(e, NULL), 0);
    nodes_polled(rt, rt->hold_rev - 1);
    assert_int_equal(beat(e, NULL), 0);
    nodes_polled(rt, rt->hold_rev);
    assert_int_equal(beat(e, NULL), 0);
    pthread_mutex_unlock(&s->lock);
    pass(e, false);
    assert_int_equal(k->att.n, 0);
    /* The next one says j's processes still occupy the GPU: dirty, held. */
    pthread_mutex_lock(&s->lock);
    assert_int_equal(beat(e, UUID), NODES_BEAT_RELEASED);
    assert_false(rt->hold);
    pthread_mutex_unlock(&s->lock);
    pass(e, false);
    assert_int_equal(k->att.n, 0);
    pthread_mutex_lock(&s->lock);
    assert_int_equal(beat(e, NULL), 0); /* clean */
    pthread_mutex_unlock(&s->lock);
    pass(e, false);
    assert_int_equal(k->att.n, 1);
    stored(e, j->id, js, as, sizeof(js));
    assert_string_equal(as, "NODE_FAIL");
}

/* A new leader (or a restarted controller) loads its nodes from the store:
 * it knows nothing of their heartbeats, so it counts their silence from its
 * own start and offers them no work until their first heartbeat to it. */
static void a_node_loaded_from_the_store_gets_work_only_after_its_first_heartbeat(void **state)
{
    struct env *e = *state;
    struct server *s = &e->s;
    char err[256] = "", msg[256] = "";
    json_t *o = cluster_node_to_json(cluster_node_get(&s->cluster, "n1"), CLUSTER_STORED);
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    struct store_batch *b = store_batch_new();
    check(store_batch_node_put(b, "n1", text, "up", e->now), "node row", "");
    free(text);
    check(store_commit_wait(s->store, b, NULL, 0, msg, sizeof(msg)), "commit", msg);
    /* Loaded anew a long silence later, as a new leader does. */
    e->now += 600000;
    pthread_mutex_lock(&s->lock);
    nodes_remove(&s->nodes, "n1");
    check(cluster_node_remove(&s->cluster, "n1"), "forget n1", "");
    check(config_nodes_load(&s->config, e->now, err, sizeof(err)), "load", err);
    struct node_rt *rt = nodes_find(&s->nodes, "n1");
    assert_non_null(rt);
    assert_true(rt->unheard);
    assert_int_equal(rt->last_heartbeat_ms, e->now);
    e->now += s->cfg.node_timeout_ms; /* silent for the timeout since the load: not more */
    sched_node_timeouts(s, e->now, mono_of(e));
    assert_int_equal(cluster_node_get(&s->cluster, "n1")->state, CLUSTER_NODE_UP);
    pthread_mutex_unlock(&s->lock);
    struct job *j = submit(e, 1, 0);
    pass(e, false);
    assert_int_equal(j->att.n, 0); /* not heard from: no work */
    pthread_mutex_lock(&s->lock);
    assert_int_equal(nodes_heartbeat(rt, NULL, e->now, mono_of(e)), 0); /* no body: nothing said */
    assert_true(rt->unheard);
    pthread_mutex_unlock(&s->lock);
    pass(e, false);
    assert_int_equal(j->att.n, 0);
    pthread_mutex_lock(&s->lock);
    assert_int_equal(beat(e, NULL), NODES_BEAT_HEARD);
    assert_false(rt->unheard);
    pthread_mutex_unlock(&s->lock);
    pass(e, false);
    assert_int_equal(j->att.n, 1);
    assert_string_equal(j->att.shares[0].uuid, UUID);
}

static void a_drained_node_that_falls_silent_stays_drained(void **state)
{
    struct env *e = *state;
    struct server *s = &e->s;
    struct job *j = submit(e, 1, 0);
    pass(e, false);
    pthread_mutex_lock(&s->lock);
    config_node_mark_apply(&s->config, "n1", CLUSTER_NODE_DRAINING);
    lose_node(e, j);
    assert_int_equal(cluster_node_get(&s->cluster, "n1")->state, CLUSTER_NODE_DRAINING);
    /* Its heartbeats do not undo an admin's drain. */
    e->now += 1000;
    assert_int_equal(beat(e, NULL), NODES_BEAT_BACK);
    sched_node_timeouts(s, e->now, mono_of(e));
    assert_int_equal(cluster_node_get(&s->cluster, "n1")->state, CLUSTER_NODE_DRAINING);
    /* Nor is it lost again every turn while it stays silent. */
    e->now += 61000;
    sched_node_timeouts(s, e->now, mono_of(e));
    assert_true(nodes_find(&s->nodes, "n1")->lost);
    sched_node_timeouts(s, e->now + 61000, mono_of(e) + 61000);
    assert_int_equal(cluster_node_get(&s->cluster, "n1")->state, CLUSTER_NODE_DRAINING);
    /* Resumed while still silent, it is marked down. */
    config_node_mark_apply(&s->config, "n1", CLUSTER_NODE_UP);
    sched_node_timeouts(s, e->now + 62000, mono_of(e) + 62000);
    assert_int_equal(cluster_node_get(&s->cluster, "n1")->state, CLUSTER_NODE_DOWN);
    pthread_mutex_unlock(&s->lock);
}

/* n2's registration, with one GPU of UUID `uuid`, planned (the lock held). */
static int register_n2(struct env *e, const char *uuid, char *err, size_t errlen)
{
    json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:[{s:i, s:s, s:s, s:i}]}", "name", "n2", "pool",
                          "main", "cpus", 8, "mem_mib", 65536, "gpus", "index", 0, "uuid", uuid,
                          "gpu_type", "H100-80GB", "mem_mib", 81920);
    struct cluster_node node = {0};
    check(cluster_node_decode(o, 0, &node, err, errlen), "n2", err);
    json_decref(o);
    struct config_write *w = NULL;
    struct store_batch *b = NULL;
    int rc = config_node_put_plan(&e->s.config, &node, "127.0.0.1", e->now, &w, &b, err, errlen);
    cluster_node_release(&node);
    if (!rc) {
        store_batch_free(b);
        config_write_drop(&e->s.config, w);
    }
    return rc;
}

static void
a_registration_with_another_nodes_uuid_is_refused_until_that_node_is_deleted(void **state)
{
    struct env *e = *state;
    struct server *s = &e->s;
    char err[512] = "";
    pthread_mutex_lock(&s->lock);
    assert_int_equal(register_n2(e, UUID, err, sizeof(err)), GPO_ESTATE);
    assert_non_null(strstr(err, "node 'n1'"));
    assert_non_null(strstr(err, UUID));
    assert_int_equal(register_n2(e, "GPU-11111111-2222-3333-4444-000000000000", err, sizeof(err)),
                     0);
    pthread_mutex_unlock(&s->lock);
    /* n1 cannot go while an attempt holds its GPU... */
    struct job *j = submit(e, 1, 0);
    pass(e, false);
    struct config_write *w = NULL;
    struct store_batch *b = NULL;
    pthread_mutex_lock(&s->lock);
    assert_int_equal(config_node_delete_plan(&s->config, "n1", e->now, &w, &b, err, sizeof(err)),
                     GPO_ESTATE);
    assert_non_null(strstr(err, "holds attempt 1"));
    /* ...and can once it ended (here: lost with its node). */
    lose_node(e, j);
    check(config_node_delete_plan(&s->config, "n1", e->now, &w, &b, err, sizeof(err)), "delete",
          err);
    pthread_mutex_unlock(&s->lock);
    char msg[256] = "";
    check(store_commit_wait(s->store, b, NULL, 0, msg, sizeof(msg)), "commit", msg);
    pthread_mutex_lock(&s->lock);
    enum config_outcome out = CONFIG_CREATED;
    json_t *body = NULL;
    check(config_write_done(&s->config, w, 0, e->now, &out, &body, err, sizeof(err)), "done", err);
    assert_int_equal(out, CONFIG_REMOVED);
    assert_null(body);
    assert_null(cluster_node_get(&s->cluster, "n1"));
    assert_null(nodes_find(&s->nodes, "n1"));
    assert_int_equal(register_n2(e, UUID, err, sizeof(err)), 0);
    pthread_mutex_unlock(&s->lock);
    struct store_node *rows = NULL;
    size_t n = 0;
    assert_int_equal(store_node_list(s->store, &rows, &n), 0);
    for (size_t k = 0; k < n; k++)
        assert_string_not_equal(rows[k].name, "n1");
    store_nodes_free(rows, n);
}

static void a_turn_runs_every_task_at_the_servers_time(void **state)
{
    struct env *e = *state;
    struct server *s = &e->s;
    char err[256];
    struct monitor_config mc = {.node_timeout_ms = 60000, .mono_ns = test_mono};
    check(monitor_init(&s->monitor, &mc, &s->lock, &s->cluster, &s->jobs, &s->nodes, s->store,
                       e->now),
          "monitor", "");
    struct job *j = submit(e, 1, 0);
    pthread_mutex_lock(&s->lock);
    s->sched->dirty = true;
    sched_turn(s, e->now);
    assert_false(s->sched->dirty);
    assert_int_equal(s->sched->passes, 1);
    assert_int_equal(s->sched->last_pass_ms, T0); /* the server's clock, not the wall's */
    assert_int_equal(j->state, JOB_RUNNING);
    pthread_mutex_unlock(&s->lock);
    (void)err;
}

static void init_monitor(struct env *e)
{
    struct server *s = &e->s;
    struct monitor_config mc = {.node_timeout_ms = 60000, .mono_ns = test_mono};
    check(monitor_init(&s->monitor, &mc, &s->lock, &s->cluster, &s->jobs, &s->nodes, s->store,
                       e->now),
          "monitor", "");
}

/* The monitor, and the loop's first tick, which runs everything: the next
 * tick's time. */
static int64_t first_tick(struct env *e)
{
    init_monitor(e);
    pthread_mutex_lock(&e->s.lock);
    int64_t next = sched_tick(&e->s, e->now);
    pthread_mutex_unlock(&e->s.lock);
    return next;
}

static void a_submit_on_an_idle_cluster_gets_a_pass_before_the_timer(void **state)
{
    struct env *e = *state;
    struct server *s = &e->s;
    struct sched *sc = s->sched;
    int64_t next = first_tick(e);
    assert_int_equal(sc->passes_by[SCHED_WHY_TIMER], 1);
    assert_int_equal(next, T0 + 5000); /* nothing pending: the timer */

    e->now += SCHED_PASS_GAP_FLOOR_MS;
    struct job *j = submit(e, 1, 0);
    pthread_mutex_lock(&s->lock);
    sched_wake(sc, SCHED_WHY_SUBMIT);
    assert_true(sched_pass_due_ms(sc, e->now) <= e->now);
    sched_tick(s, e->now);
    assert_int_equal(sc->passes_by[SCHED_WHY_SUBMIT], 1);
    assert_int_equal(sc->passes_by[SCHED_WHY_TIMER], 1);
    assert_int_equal(j->state, JOB_RUNNING);
    assert_false(sc->dirty);
    pthread_mutex_unlock(&s->lock);
}

/* The loop's marks (the last pass, the chores' last run) are the wall
 * clock's: set back an hour after them, the loop runs at its usual pace
 * rather than an hour later. */
static void the_loop_keeps_its_pace_when_the_wall_clock_steps_back(void **state)
{
    struct env *e = *state;
    struct server *s = &e->s;
    struct sched *sc = s->sched;
    first_tick(e);
    assert_int_equal(sc->passes_by[SCHED_WHY_TIMER], 1);
    e->now -= 3600000; /* an hour back, no time passing */
    e->step -= 3600000;
    struct job *j = submit(e, 1, 0);
    pthread_mutex_lock(&s->lock);
    sched_wake(sc, SCHED_WHY_SUBMIT);
    assert_true(sched_pass_due_ms(sc, e->now) <= e->now + SCHED_PASS_GAP_MAX_MS);
    e->now += SCHED_PASS_GAP_MAX_MS;
    int64_t next = sched_tick(s, e->now);
    assert_int_equal(sc->passes_by[SCHED_WHY_SUBMIT], 1);
    assert_int_equal(j->state, JOB_RUNNING);
    /* The next turn is a timer's interval on, at most: the chores too. */
    assert_true(next <= e->now + s->cfg.pass_interval_ms);
    e->now = next;
    sched_tick(s, e->now);
    assert_int_equal(sc->passes_by[SCHED_WHY_TIMER], 2);
    pthread_mutex_unlock(&s->lock);
}

static void a_submit_behind_a_backlog_waits_while_an_end_does_not(void **state)
{
    struct env *e = *state;
    struct server *s = &e->s;
    struct sched *sc = s->sched;
    init_monitor(e);
    submit(e, 1, 0);
    submit(e, 1, 0); /* n1 has one GPU: this one waits */
    pthread_mutex_lock(&s->lock);
    sched_tick(s, e->now);
    assert_true(sc->backlog);
    int64_t last = sc->last_pass_ms;
    sched_wake(sc, SCHED_WHY_SUBMIT);
    assert_int_equal(sched_pass_due_ms(sc, e->now), last + SCHED_PASS_GAP_MAX_MS);
    sched_wake(sc, SCHED_WHY_END);
    assert_int_equal(sched_pass_due_ms(sc, e->now), last + SCHED_PASS_GAP_FLOOR_MS);
    /* The gap follows the last pass's cost, up to its maximum. */
    sc->pass_cost_ns = 10 * 1000000;
    assert_int_equal(sched_pass_due_ms(sc, e->now), last + SCHED_PASS_GAP_FACTOR * 10);
    sc->pass_cost_ns = 1000 * 1000000;
    assert_int_equal(sched_pass_due_ms(sc, e->now), last + SCHED_PASS_GAP_MAX_MS);
    sc->pass_cost_ns = 0;
    e->now = last + SCHED_PASS_GAP_FLOOR_MS;
    sched_tick(s, e->now);
    assert_int_equal(sc->passes_by[SCHED_WHY_END], 1); /* counted once, by its first reason */
    assert_int_equal(sc->passes_by[SCHED_WHY_SUBMIT], 0);
    pthread_mutex_unlock(&s->lock);
}

static void the_chores_run_on_their_own_timer_not_with_every_pass(void **state)
{
    struct env *e = *state;
    struct server *s = &e->s;
    struct sched *sc = s->sched;
    first_tick(e);
    assert_int_equal(sc->chores_ms, T0);
    pthread_mutex_lock(&s->lock);
    e->now += SCHED_PASS_GAP_FLOOR_MS;
    sched_wake(sc, SCHED_WHY_END);
    int64_t next = sched_tick(s, e->now);
    assert_int_equal(sc->passes_by[SCHED_WHY_END], 1);
    assert_int_equal(sc->chores_ms, T0); /* not yet due */
    assert_int_equal(next, T0 + SCHED_PASS_GAP_MAX_MS);
    e->now = next;
    sched_tick(s, e->now);
    assert_int_equal(sc->chores_ms, next);
    assert_int_equal(sc->passes_by[SCHED_WHY_TIMER], 1); /* no pass was due */
    pthread_mutex_unlock(&s->lock);
}

static void the_metrics_count_passes_by_trigger(void **state)
{
    struct env *e = *state;
    struct sched *sc = e->s.sched;
    sc->passes_by[SCHED_WHY_SUBMIT] = 3;
    struct prom *p = prom_new();
    assert_non_null(p);
    sched_metrics(sc, p);
    size_t len = 0;
    const char *text = prom_text(p, &len);
    assert_non_null(text);
    assert_non_null(strstr(text, "gpuorch_sched_passes_total{trigger=\"submit\"} 3\n"));
    assert_non_null(strstr(text, "gpuorch_sched_passes_total{trigger=\"end\"} 0\n"));
    prom_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(decisions_reach_memory_only_after_their_commit, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            a_job_cancelled_while_the_commit_runs_gets_its_attempt_killed, setup, teardown),
        cmocka_unit_test_setup_teardown(a_failed_dependency_fails_the_job_at_the_next_pass, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(an_end_is_committed_then_charged_by_the_next_pass, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_silent_node_is_marked_down_and_its_attempts_end_node_fail,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(a_step_of_the_wall_clock_neither_loses_nor_hides_a_node,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(a_running_job_holds_its_nodes_gpu_not_a_twins, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_twins_dirty_gpu_does_not_hold_the_live_one, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            a_lost_node_rejoins_by_heartbeat_and_gets_work_once_its_gpus_are_clean, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            a_node_loaded_from_the_store_gets_work_only_after_its_first_heartbeat, setup, teardown),
        cmocka_unit_test_setup_teardown(a_drained_node_that_falls_silent_stays_drained, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            a_registration_with_another_nodes_uuid_is_refused_until_that_node_is_deleted, setup,
            teardown),
        cmocka_unit_test_setup_teardown(a_turn_runs_every_task_at_the_servers_time, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_submit_on_an_idle_cluster_gets_a_pass_before_the_timer,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(the_loop_keeps_its_pace_when_the_wall_clock_steps_back,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(a_submit_behind_a_backlog_waits_while_an_end_does_not,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(the_chores_run_on_their_own_timer_not_with_every_pass,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(the_metrics_count_passes_by_trigger, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

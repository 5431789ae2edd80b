/* test_server_jobs.c - the jobs subsystem without a daemon: the end of an
 * attempt as a state machine (every attempt state, retries, requeue, the
 * idle policy's kills, a cancel under way), the one kill path and its
 * causes through their stored reasons, attempts' stored form, and the
 * table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "server/jobs/jobs.h"
#include "base/banned.h"

#define T0 1800000000000

/* A job of team ml whose attempt 2 holds one GPU on n1. */
static struct job *job_new(int64_t id)
{
    struct job *j = calloc(1, sizeof(*j));
    assert_non_null(j);
    j->id = id;
    j->user = strdup("alice");
    j->team = strdup("ml");
    j->state = JOB_RUNNING;
    j->spec.requeue = true;
    j->attempts = 2;
    j->att.n = 2;
    j->att.start_ms = T0;
    j->att.nparts = 1;
    j->att.parts = calloc(1, sizeof(*j->att.parts));
    j->att.parts[0] = (struct attempt_part){strdup("n1"), 4, 1024, false};
    j->att.nshares = 1;
    j->att.shares = calloc(1, sizeof(*j->att.shares));
    j->att.shares[0] = (struct attempt_share){
        .node = strdup("n1"), .uuid = strdup("GPU-0"), .milli = 1000, .mem_mib = 0};
    return j;
}

static struct job_end decide(const struct job *j, enum attempt_state st, int64_t exit_code,
                             const char *reason)
{
    struct job_end e;
    job_end_decide(j, st, exit_code, STORE_NULL, reason, T0 + 5000, &e);
    assert_int_equal(e.job, j->id);
    assert_int_equal(e.attempt, j->att.n);
    assert_int_equal(e.end_ms, T0 + 5000);
    return e;
}

static void completed_ends_the_job(void **state)
{
    (void)state;
    struct job *j = job_new(1);
    struct job_end e = decide(j, ATTEMPT_COMPLETED, 0, NULL);
    assert_int_equal(e.job_state, JOB_COMPLETED);
    assert_string_equal(e.reason, "");
    assert_false(e.failure);
    job_free(j);
}

static void failures_retry_while_retries_are_left_then_end_in_their_state(void **state)
{
    (void)state;
    struct job *j = job_new(2);
    j->spec.max_retries = 1;
    struct job_end e = decide(j, ATTEMPT_FAILED, 3, "oops");
    assert_int_equal(e.job_state, JOB_PENDING);
    assert_true(e.failure);
    assert_string_equal(e.reason, "attempt 2 FAILED (exit 3): oops; retry 1 of 1");
    assert_string_equal(e.att_reason, "oops");
    j->failures = 1; /* that retry is used */
    static const struct {
        enum attempt_state att;
        enum job_state job;
        const char *reason;
    } last[] = {
        {ATTEMPT_FAILED, JOB_FAILED, "attempt 2 FAILED (exit 3)"},
        {ATTEMPT_TIMEOUT, JOB_TIMEOUT, "attempt 2 TIMEOUT (exit 3)"},
        {ATTEMPT_NODE_FAIL, JOB_NODE_FAIL, "attempt 2 NODE_FAIL (exit 3)"},
    };
    for (size_t k = 0; k < sizeof(last) / sizeof(last[0]); k++) {
        e = decide(j, last[k].att, 3, NULL);
        assert_int_equal(e.job_state, last[k].job);
        assert_string_equal(e.reason, last[k].reason);
        assert_true(e.failure);
    }
    job_free(j);
}

static void preemption_requeues_a_job_that_allows_it(void **state)
{
    (void)state;
    struct job *j = job_new(3);
    struct job_end e = decide(j, ATTEMPT_PREEMPTED, STORE_NULL, NULL);
    assert_int_equal(e.job_state, JOB_PENDING);
    assert_string_equal(e.reason, "attempt 2 preempted; requeued");
    assert_false(e.failure);
    j->spec.requeue = false;
    e = decide(j, ATTEMPT_PREEMPTED, STORE_NULL, NULL);
    assert_int_equal(e.job_state, JOB_PREEMPTED);
    assert_string_equal(e.reason, "attempt 2 preempted");
    job_free(j);
}

static void a_cancel_under_way_wins_over_how_the_attempt_ended(void **state)
{
    (void)state;
    struct job *j = job_new(4);
    assert_int_equal(attempt_kill(&j->att, KILL_CANCELLED, NULL, 3000), 0);
    struct job_end e = decide(j, ATTEMPT_FAILED, 143, NULL);
    assert_int_equal(e.job_state, JOB_CANCELLED);
    assert_string_equal(e.reason, "cancelled");
    assert_true(e.failure); /* a failed attempt is a failure, whatever the job does */
    job_free(j);
    j = job_new(5);
    e = decide(j, ATTEMPT_CANCELLED, STORE_NULL, NULL);
    assert_int_equal(e.job_state, JOB_CANCELLED);
    job_free(j);
}

static void idle_kills_requeue_or_cancel_whatever_the_job_says(void **state)
{
    (void)state;
    struct job *j = job_new(6);
    j->spec.requeue = false;
    assert_int_equal(attempt_kill(&j->att, KILL_IDLE_REQUEUE, "idle: GPUs under 5% for 30m", 0), 0);
    struct job_end e = decide(j, ATTEMPT_PREEMPTED, STORE_NULL, NULL);
    assert_int_equal(e.job_state, JOB_PENDING);
    assert_string_equal(e.reason, "attempt 2 requeued: idle: GPUs under 5% for 30m");
    assert_string_equal(e.att_reason, "idle: GPUs under 5% for 30m");
    job_free(j);

    j = job_new(7);
    assert_int_equal(attempt_kill(&j->att, KILL_IDLE_CANCEL, "idle: GPUs under 5% for 30m", 0), 0);
    e = decide(j, ATTEMPT_CANCELLED, STORE_NULL, NULL);
    assert_int_equal(e.job_state, JOB_CANCELLED);
    assert_string_equal(e.reason, "idle: GPUs under 5% for 30m");
    /* An idle kill whose attempt failed on its own is a failure like any. */
    e = decide(j, ATTEMPT_FAILED, 1, NULL);
    assert_int_equal(e.job_state, JOB_FAILED);
    job_free(j);
}

static void applying_an_end_moves_the_attempt_out(void **state)
{
    (void)state;
    struct job *j = job_new(8);
    j->spec.max_retries = 2;
    struct job_end e = decide(j, ATTEMPT_TIMEOUT, STORE_NULL, NULL);
    struct attempt att;
    job_end_apply(j, &e, &att);
    assert_int_equal(j->state, JOB_PENDING);
    assert_int_equal(j->failures, 1);
    assert_int_equal(j->queued_ms, T0 + 5000);
    assert_int_equal(j->att.n, 0);
    assert_null(j->att.parts);
    assert_string_equal(j->reason, "attempt 2 TIMEOUT; retry 1 of 2");
    assert_int_equal(att.n, 2);
    assert_string_equal(att.parts[0].node, "n1");
    attempt_release(&att);
    job_free(j);
}

static void one_kill_path_refuses_a_second_cause_but_a_cancel(void **state)
{
    (void)state;
    struct job *j = job_new(9);
    struct attempt idle = {0};
    assert_int_equal(attempt_kill(&idle, KILL_PREEMPTED, NULL, 0), GPO_ESTATE); /* holds nothing */
    assert_int_equal(attempt_kill(&j->att, KILL_NONE, NULL, 0), GPO_ESTATE);
    assert_int_equal(attempt_kill(&j->att, KILL_PREEMPTED, NULL, 30000), 0);
    assert_int_equal(j->att.grace_ms, 30000);
    assert_true(kill_cause_preempts(j->att.kill));
    assert_int_equal(attempt_kill(&j->att, KILL_PREEMPTED, NULL, 1), GPO_ESTATE);
    assert_int_equal(attempt_kill(&j->att, KILL_IDLE_CANCEL, "idle: x", 1), GPO_ESTATE);
    assert_int_equal(j->att.grace_ms, 30000);
    /* A user's cancel wins over the preemption under way. */
    assert_int_equal(attempt_kill(&j->att, KILL_CANCELLED, NULL, 5000), 0);
    assert_int_equal(j->att.kill, KILL_CANCELLED);
    assert_false(kill_cause_preempts(j->att.kill));
    assert_int_equal(attempt_kill(&j->att, KILL_CANCELLED, NULL, 1), GPO_ESTATE);
    job_free(j);
}

static void kill_causes_read_back_from_their_stored_reasons(void **state)
{
    (void)state;
    static const struct {
        enum kill_cause cause;
        const char *detail;
        const char *stored;
        bool preempted;
    } cases[] = {
        {KILL_PREEMPTED, NULL, "preempted", true},
        {KILL_CANCELLED, NULL, "cancelled", false},
        {KILL_IDLE_REQUEUE, "idle: GPUs under 10% for 2s", "preempted: idle: GPUs under 10% for 2s",
         true},
        {KILL_IDLE_CANCEL, "idle: GPUs under 10% for 2s", "idle: GPUs under 10% for 2s", false},
        {KILL_REQUEUE, NULL, "requeued", true},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct job *j = job_new(10);
        assert_int_equal(attempt_kill(&j->att, cases[k].cause, cases[k].detail, 0), 0);
        char buf[160];
        assert_string_equal(attempt_kill_reason(&j->att, buf, sizeof(buf)), cases[k].stored);
        assert_int_equal(kill_cause_preempts(cases[k].cause), cases[k].preempted);
        const char *detail = NULL;
        assert_int_equal(attempt_kill_parse(cases[k].stored, &detail), cases[k].cause);
        if (cases[k].detail)
            assert_string_equal(detail, cases[k].detail);
        else
            assert_null(detail);
        job_free(j);
    }
    const char *detail = "x";
    assert_int_equal(attempt_kill_parse(NULL, &detail), KILL_PREEMPTED); /* rows that say nothing */
    assert_null(detail);
}

/* A user's requeue sends the job back to the queue however its attempt
 * ended (the agent reports a requeue kill as PREEMPTED; one that completed
 * or failed meanwhile too), and it is not one of the job's failures. */
static void a_requeue_kill_returns_the_job_to_the_queue(void **state)
{
    (void)state;
    static const enum attempt_state ends[] = {ATTEMPT_PREEMPTED, ATTEMPT_CANCELLED,
                                              ATTEMPT_COMPLETED, ATTEMPT_FAILED, ATTEMPT_TIMEOUT};
    for (size_t k = 0; k < sizeof(ends) / sizeof(ends[0]); k++) {
        struct job *j = job_new(20);
        j->spec.requeue = false; /* the job's own setting is about preemption only */
        assert_int_equal(attempt_kill(&j->att, KILL_REQUEUE, NULL, 1000), 0);
        struct job_end e = decide(j, ends[k], 1, NULL);
        assert_int_equal(e.job_state, JOB_PENDING);
        assert_false(e.failure);
        assert_string_equal(e.reason, "attempt 2 requeued");
        struct attempt old;
        job_end_apply(j, &e, &old);
        assert_int_equal(j->queued_ms, T0 + 5000);
        assert_int_equal(j->failures, 0);
        attempt_release(&old);
        job_free(j);
    }
    /* A cancel still wins over a requeue under way. */
    struct job *j = job_new(21);
    assert_int_equal(attempt_kill(&j->att, KILL_REQUEUE, NULL, 1000), 0);
    assert_int_equal(attempt_kill(&j->att, KILL_REQUEUE, NULL, 1000), GPO_ESTATE);
    assert_int_equal(attempt_kill(&j->att, KILL_CANCELLED, NULL, 1000), 0);
    assert_int_equal(decide(j, ATTEMPT_CANCELLED, STORE_NULL, NULL).job_state, JOB_CANCELLED);
    job_free(j);
}

/* Holds by name, and a pending job kept out of the pass by a hold or a
 * begin time, with the reason it waits with. */
static void holds_and_begin_times_keep_a_job_back(void **state)
{
    (void)state;
    assert_null(job_hold_name(JOB_HOLD_NONE));
    assert_string_equal(job_hold_name(JOB_HOLD_USER), "user");
    assert_string_equal(job_hold_name(JOB_HOLD_ADMIN), "admin");
    assert_int_equal(job_hold_parse(NULL), JOB_HOLD_NONE);
    assert_int_equal(job_hold_parse("user"), JOB_HOLD_USER);
    assert_int_equal(job_hold_parse("admin"), JOB_HOLD_ADMIN);
    assert_int_equal(job_hold_parse("root"), -1);
    assert_string_equal(job_hold_wait(JOB_HOLD_USER), "hold: held by user");
    assert_string_equal(job_hold_wait(JOB_HOLD_ADMIN), "hold: held by an admin");

    struct job *j = job_new(30);
    j->state = JOB_PENDING;
    int64_t at = -1;
    assert_false(job_held_back(j, T0, &at));
    j->hold = JOB_HOLD_ADMIN;
    j->spec.begin = T0 / 1000 + 60; /* a hold says so first */
    assert_true(job_held_back(j, T0, &at));
    assert_int_equal(at, 0);
    assert_string_equal(j->wait, "hold: held by an admin");
    j->hold = JOB_HOLD_NONE;
    assert_true(job_held_back(j, T0, &at));
    assert_int_equal(at, T0 + 60000);
    assert_int_equal(j->est_start_ms, T0 + 60000);
    assert_string_equal(j->wait, "deferred: begin time not reached (starts at "
                                 "2027-01-15T08:01:00Z)");
    assert_true(job_held_back(j, T0 + 59999, &at));
    assert_false(job_held_back(j, T0 + 60000, &at)); /* its time has come */
    job_free(j);
}

static void attempts_round_trip_through_their_stored_form(void **state)
{
    (void)state;
    struct job *j = job_new(11);
    char *nodes = NULL, *gpus = NULL;
    assert_int_equal(attempt_encode(&j->att, &nodes, &gpus), 0);
    assert_string_equal(gpus, "[\"GPU-0\"]");
    struct attempt back = {0};
    assert_int_equal(attempt_decode(nodes, &back), 0);
    assert_int_equal(back.nparts, 1);
    assert_string_equal(back.parts[0].node, "n1");
    assert_int_equal(back.parts[0].cpus, 4);
    assert_int_equal(back.parts[0].mem_mib, 1024);
    assert_int_equal(back.nshares, 1);
    assert_string_equal(back.shares[0].uuid, "GPU-0");
    assert_int_equal(back.shares[0].milli, 1000);
    attempt_release(&back);
    free(nodes);
    free(gpus);
    static const char *const bad[] = {
        NULL,
        "not json",
        "{\"parts\": []}",
        "{\"parts\": [{\"node\": \"n1\", \"cpus\": -1, \"mem_mib\": 0}], \"shares\": []}",
        "{\"parts\": [], \"shares\": [{\"node\": \"n1\", \"uuid\": \"u\", \"milli\": 0, "
        "\"mem_mib\": 0}]}",
        "{\"parts\": [], \"shares\": [{\"node\": \"n1\", \"uuid\": \"u\", \"milli\": 1001, "
        "\"mem_mib\": 0}]}",
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        struct attempt a = {0};
        assert_int_equal(attempt_decode(bad[k], &a), GPO_EINVAL);
        attempt_release(&a);
    }
    job_free(j);
}

static void states_have_one_name_each(void **state)
{
    (void)state;
    for (int s = 0; s < JOB_NSTATES; s++)
        assert_int_equal(job_state_parse(job_state_name((enum job_state)s)), s);
    for (int s = 0; s < ATTEMPT_NSTATES; s++)
        assert_int_equal(attempt_state_parse(attempt_state_name((enum attempt_state)s)), s);
    assert_int_equal(job_state_parse("KILLING"), -1);
    assert_int_equal(attempt_state_parse("PENDING"), -1);
    assert_true(attempt_state_holds(ATTEMPT_ASSIGNED));
    assert_true(attempt_state_holds(ATTEMPT_KILLING));
    assert_false(attempt_state_holds(ATTEMPT_COMPLETED));
    assert_true(job_state_final(JOB_NODE_FAIL));
    assert_false(job_state_final(JOB_PENDING));
    assert_string_equal(job_state_name((enum job_state)99), "UNKNOWN");
}

static void the_table_keeps_ids_growing_and_finds_live_jobs(void **state)
{
    (void)state;
    struct jobs t;
    jobs_init(&t);
    struct job *a = job_new(5), *b = job_new(9), *c = job_new(7);
    assert_int_equal(jobs_add(&t, a), 0);
    assert_int_equal(jobs_add(&t, b), 0);
    assert_int_equal(jobs_add(&t, c), GPO_EINVAL); /* not above 9 */
    job_free(c);
    assert_ptr_equal(jobs_find(&t, 9), b);
    assert_null(jobs_find(&t, 7));
    assert_int_equal(jobs_index(&t, 6), 1);
    assert_ptr_equal(jobs_find_live(&t, "ml", NULL), a);
    a->state = JOB_COMPLETED;
    assert_ptr_equal(jobs_find_live(&t, "ml", NULL), b);
    assert_null(jobs_find_live(&t, "other", NULL));
    jobs_release(&t);
    assert_int_equal(t.n, 0);
}

/* Job id's attempt set to hold `milli` of GPU `uuid` on n1 (mig: as a MIG
 * instance, its charge by memory slots). */
static struct job *job_holding(int64_t id, const char *uuid, uint32_t milli, bool mig)
{
    struct job *j = job_new(id);
    free(j->att.shares[0].uuid);
    j->att.shares[0].uuid = strdup(uuid);
    j->att.shares[0].milli = milli;
    j->att.shares[0].mig = mig;
    return j;
}

/* GPUs in use count GPU shares: a GPU with only a 0.25 job is 0.25 in use;
 * a MIG instance its charge (1g.20gb: 250); shares of one GPU add up, to at
 * most a whole GPU; an attempt that holds nothing (ended) counts nothing. */
static void gpus_in_use_count_gpu_shares(void **state)
{
    (void)state;
    struct jobs t;
    jobs_init(&t);
    assert_int_equal(jobs_add(&t, job_holding(1, "GPU-A", 250, false)), 0);
    assert_int_equal(jobs_add(&t, job_holding(2, "GPU-B", 1000, false)), 0);
    assert_int_equal(jobs_add(&t, job_holding(3, "GPU-C", 250, true)), 0);
    assert_int_equal(jobs_add(&t, job_holding(4, "GPU-C", 500, true)), 0);
    assert_int_equal(jobs_add(&t, job_holding(5, "GPU-D", 600, false)), 0);
    assert_int_equal(jobs_add(&t, job_holding(6, "GPU-D", 600, false)), 0); /* over: capped */
    struct job *ended = job_holding(7, "GPU-E", 1000, false);
    ended->att.n = 0;
    assert_int_equal(jobs_add(&t, ended), 0);

    struct gpu_holder *v = NULL;
    size_t n = 0;
    assert_int_equal(jobs_gpu_holders(&t, &v, &n), 0);
    assert_int_equal(n, 6);
    static const struct {
        const char *uuid;
        uint32_t milli;
        size_t holders;
    } want[] = {{"GPU-A", 250, 1},  {"GPU-B", 1000, 1}, {"GPU-C", 750, 2},
                {"GPU-D", 1000, 2}, {"GPU-E", 0, 0},    {"GPU-F", 0, 0}};
    for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
        size_t lo, hi;
        jobs_gpu_holders_of(v, n, "n1", want[k].uuid, &lo, &hi);
        assert_int_equal(hi - lo, want[k].holders);
        assert_int_equal(jobs_gpu_milli_in_use(v, lo, hi), want[k].milli);
    }
    size_t lo, hi;
    jobs_gpu_holders_of(v, n, "n2", "GPU-A", &lo, &hi); /* the node counts too */
    assert_int_equal(hi - lo, 0);
    jobs_gpu_holders_of(v, n, "n1", "GPU-C", &lo, &hi); /* by job id within a GPU */
    assert_int_equal(v[lo].job->id, 3);
    assert_int_equal(v[lo + 1].job->id, 4);
    free(v);

    assert_int_equal(attempt_gpu_milli(&jobs_find(&t, 1)->att), 250);
    assert_int_equal(attempt_gpu_milli(&jobs_find(&t, 7)->att), 0);
    jobs_release(&t);
}

/* ---- a submission resolved against the configuration ---------------------- */

/* Pool "h100" (alias "gpu") with two nodes of 8 H100-80GB, 64 CPUs and
 * 512 GiB; n1 has feature "ib". */
static void resolve_cluster(struct cluster *m)
{
    static const char *const objects[] = {
        "{\"name\": \"h100\", \"aliases\": [\"gpu\"], \"node_features\": [{\"node\": \"n1\", "
        "\"features\": [\"ib\"]}]}",
        "{\"name\": \"cpu\"}",
    };
    char err[256];
    cluster_init(m);
    for (size_t i = 0; i < 2; i++) {
        struct cluster_pool p;
        json_t *j = json_loads(objects[i], 0, NULL);
        assert_int_equal(cluster_pool_decode(j, 0, &p, err, sizeof(err)), 0);
        json_decref(j);
        p.id = (uint32_t)i + 1;
        assert_int_equal(cluster_pool_add(m, &p, err, sizeof(err)), 0);
    }
    for (uint32_t n = 0; n < 2; n++) {
        struct cluster_node node = {
            .id = 10 + n, .pool = strdup("h100"), .cpus = 64, .mem_mib = 512 * 1024, .ngpus = 8};
        char name[8];
        snprintf(name, sizeof(name), "n%u", n + 1);
        node.name = strdup(name);
        node.gpus = calloc(8, sizeof(*node.gpus));
        for (uint32_t g = 0; g < 8; g++) {
            char uuid[64];
            snprintf(uuid, sizeof(uuid), "GPU-00000000-0000-0000-0000-0000000000%u%u", n, g);
            node.gpus[g] = (struct cluster_gpu){.index = g,
                                                .uuid = strdup(uuid),
                                                .gpu_type = strdup("H100-80GB"),
                                                .mem_mib = 81920,
                                                .nvlink_domain = -1};
        }
        assert_int_equal(cluster_node_add(m, &node, err, sizeof(err)), 0);
    }
}

static int resolve(const struct cluster *m, const char *json, struct jobspec *spec, char *err,
                   size_t errlen)
{
    json_t *j = json_loads(json, 0, NULL);
    assert_non_null(j);
    int rc = jobspec_decode(j, spec, err, errlen);
    json_decref(j);
    assert_int_equal(rc, 0);
    return job_submit_resolve(m, spec, err, errlen);
}

/* The short and case-folded names users write become the cluster's own. */
static void submit_resolves_short_type_names_and_pool_aliases(void **state)
{
    (void)state;
    struct cluster m;
    resolve_cluster(&m);
    struct jobspec spec;
    char err[512];
    assert_int_equal(resolve(&m,
                             "{\"command\": [\"true\"], \"gpus_per_node\": 2, "
                             "\"gpu_type\": \"h100\", \"pool\": \"gpu\"}",
                             &spec, err, sizeof(err)),
                     0);
    assert_string_equal(spec.gpu_type, "H100-80GB");
    assert_string_equal(spec.pool, "h100");
    jobspec_release(&spec);
    cluster_release(&m);
}

/* What could never run is refused at submit, naming what there is. */
static void submit_refuses_what_no_node_could_run(void **state)
{
    (void)state;
    struct cluster m;
    resolve_cluster(&m);
    static const struct {
        const char *json, *msg;
    } cases[] = {
        {"{\"command\": [\"true\"], \"gpus\": 1, \"gpu_type\": \"b200\"}",
         "field 'gpu_type': unknown GPU type 'b200' (known: H100-80GB)"},
        {"{\"command\": [\"true\"], \"pool\": \"batch\"}",
         "field 'pool': no pool 'batch' (pools: cpu, h100)"},
        {"{\"command\": [\"true\"], \"constraint\": \"nvme\"}",
         "field 'constraint': unknown feature 'nvme' (known: ib)"},
        {"{\"command\": [\"true\"], \"nodes\": 3, \"gpus_per_node\": 8}",
         "Requested node configuration is not available: 3 node(s) with 8 GPUs, 1 CPUs and "
         "1024 MiB each asked for; 2 of the 2 node(s) in any pool that match have that much"},
        {"{\"command\": [\"true\"], \"gpus_per_node\": 9}",
         "Requested node configuration is not available: 1 node(s) with 9 GPUs"},
        {"{\"command\": [\"true\"], \"nodes\": 2, \"gpus_per_node\": 8, \"constraint\": \"ib\"}",
         "Requested node configuration is not available: 2 node(s) with 8 GPUs, 1 CPUs and "
         "1024 MiB each asked for; 1 of the 1 node(s)"},
        {"{\"command\": [\"true\"], \"nodes\": 1, \"pool\": \"cpu\", \"exclusive\": true}",
         "Requested node configuration is not available: no node in cpu has the features"},
        {"{\"command\": [\"true\"], \"gpus\": 0.5, \"exclusive\": true}",
         "fields 'exclusive' and 'gpus': an exclusive job holds whole nodes"},
        {"{\"command\": [\"true\"], \"mem_per_node_mib\": 1048576, \"gpus\": 1}",
         "Requested node configuration is not available: 1 node(s) with 1 GPUs, 1 CPUs and "
         "1048576 MiB"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct jobspec spec;
        char err[512] = "";
        int rc = resolve(&m, cases[k].json, &spec, err, sizeof(err));
        if (rc != GPO_EINVAL || strncmp(err, cases[k].msg, strlen(cases[k].msg)) != 0)
            fail_msg("case %zu: rc %d '%s', want '%s'", k, rc, err, cases[k].msg);
        jobspec_release(&spec);
    }
    /* Plain requests keep waiting for nodes that may come: 16 GPUs on one node. */
    struct jobspec spec;
    char err[512];
    assert_int_equal(
        resolve(&m, "{\"command\": [\"true\"], \"gpus\": 16}", &spec, err, sizeof(err)), 0);
    jobspec_release(&spec);
    cluster_release(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(completed_ends_the_job),
        cmocka_unit_test(submit_resolves_short_type_names_and_pool_aliases),
        cmocka_unit_test(submit_refuses_what_no_node_could_run),
        cmocka_unit_test(failures_retry_while_retries_are_left_then_end_in_their_state),
        cmocka_unit_test(preemption_requeues_a_job_that_allows_it),
        cmocka_unit_test(a_cancel_under_way_wins_over_how_the_attempt_ended),
        cmocka_unit_test(idle_kills_requeue_or_cancel_whatever_the_job_says),
        cmocka_unit_test(applying_an_end_moves_the_attempt_out),
        cmocka_unit_test(one_kill_path_refuses_a_second_cause_but_a_cancel),
        cmocka_unit_test(kill_causes_read_back_from_their_stored_reasons),
        cmocka_unit_test(a_requeue_kill_returns_the_job_to_the_queue),
        cmocka_unit_test(holds_and_begin_times_keep_a_job_back),
        cmocka_unit_test(attempts_round_trip_through_their_stored_form),
        cmocka_unit_test(states_have_one_name_each),
        cmocka_unit_test(the_table_keeps_ids_growing_and_finds_live_jobs),
        cmocka_unit_test(gpus_in_use_count_gpu_shares),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

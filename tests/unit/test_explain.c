/* test_explain.c - explanations match the actual blocker: one scenario per
 * reason, checking the reason and the fields its sentence names; then
 * explain_format, explain_code and explain_is_final on their own. */
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

#define MIN_MS  (60 * 1000)
#define HOUR_MS (60 * MIN_MS)

enum { MAIN = 0, SPARE = 1 };           /* pools */
enum { H100 = 0, A100 = 1 };            /* GPU types */
enum { ALPHA = 0, BETA = 1 };           /* teams */
enum { NORMAL = 0, HIGH = 1, LOW = 2 }; /* classes */

/* Pool main: `nodes` nodes of 8 H100-80GB, 64 CPUs, 512 GiB. Pool spare: one
 * node of 4 A100-40GB. Teams alpha and beta (no limits); classes normal (10),
 * high (20, may preempt), low (0). */
static struct fx *cluster(uint32_t nodes)
{
    struct fx *fx = fx_new();
    fx_pool(fx, "main");
    fx_pool(fx, "spare");
    fx_type(fx, "H100-80GB");
    fx_type(fx, "A100-40GB");
    fx_nodes(fx, nodes, MAIN, H100, 8, 81920, 64, 512 * 1024);
    fx_nodes(fx, 1, SPARE, A100, 4, 40960, 32, 256 * 1024);
    fx_team(fx, "alpha", 1, -1);
    fx_team(fx, "beta", 1, -1);
    fx_class(fx, "normal", 10, false);
    fx_class(fx, "high", 20, true);
    fx_class(fx, "low", 0, false);
    return fx;
}

/* A job pinned to main/H100, so that its wait names them. */
static struct sched_job *job(struct fx *fx, uint64_t id, int32_t gpus)
{
    struct sched_job *j = fx_job(fx, id);
    j->pool = MAIN;
    j->gpu_type = H100;
    j->gpus = gpus;
    return j;
}

static const struct sched_wait *wait_of(const struct fx *fx, uint64_t id)
{
    const struct sched_wait *w = fx_wait(fx, id);
    if (!w)
        fail_msg("job %llu has no wait (started: %d)", (unsigned long long)id,
                 fx_start(fx, id) != NULL);
    return w;
}

static void expect_wait(const struct fx *fx, uint64_t id, enum sched_reason reason)
{
    const struct sched_wait *w = wait_of(fx, id);
    if (w->reason != reason)
        fail_msg("job %llu waits for %s (%d), expected %s (%d)", (unsigned long long)id,
                 explain_code(w->reason), (int)w->reason, explain_code(reason), (int)reason);
}

static void expect_sentence(const struct fx *fx, uint64_t id, const char *want)
{
    char buf[256];
    int n = explain_format(&fx->c, wait_of(fx, id), buf, sizeof(buf));
    assert_int_equal(n, (int)strlen(want));
    assert_string_equal(buf, want);
}

/* ---- reasons that change with load ---- */

static void quota_when_team_at_guarantee_plus_borrow_limit_while_gpus_free(void **state)
{
    struct fx *fx = *state = cluster(2);
    fx->teams[ALPHA].borrow_limit_milli = 0;
    fx_quota(fx, ALPHA, MAIN, H100, 2000, 1000); /* at most 3 GPUs */
    for (uint64_t id = 1; id <= 3; id++)
        job(fx, id, 1);
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_int_equal(fx->res.nstarts, 3);
    job(fx, 4, 1);
    job(fx, 5, 1)->team = BETA; /* 13 GPUs are free: beta starts, alpha may not */
    assert_int_equal(fx_step(fx, 2000), 0);
    assert_non_null(fx_start(fx, 5));
    expect_wait(fx, 4, SCHED_REASON_QUOTA);
    const struct sched_wait *w = wait_of(fx, 4);
    assert_int_equal(w->team, ALPHA);
    assert_int_equal(w->pool, MAIN);
    assert_int_equal(w->gpu_type, H100);
    assert_int_equal(w->other_job, 0);
    assert_int_equal(w->est_start_ms, -1);
    assert_false(explain_is_final(w->reason));
    expect_sentence(fx, 4, "team alpha has no guaranteed or borrowable GPUs left in pool main");
}

static void no_gpu_when_cluster_full_with_estimated_start(void **state)
{
    struct fx *fx = *state = cluster(1);
    job(fx, 1, 8); /* 1 h limit */
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_true(fx_running(fx, 1));
    job(fx, 2, 1);
    assert_int_equal(fx_step(fx, 2000), 0);
    expect_wait(fx, 2, SCHED_REASON_NO_GPU);
    const struct sched_wait *w = wait_of(fx, 2);
    assert_int_equal(w->pool, MAIN);
    assert_int_equal(w->gpu_type, H100);
    assert_int_equal(w->other_job, 0);
    /* The reservation promises the GPUs when job 1 reaches its limit. */
    assert_int_equal(w->est_start_ms, 1000 + HOUR_MS);
    assert_false(explain_is_final(w->reason));
    expect_sentence(fx, 2, "not enough free GPUs of type H100-80GB in pool main (need 1, 0 free)");
}

static void gang_when_free_gpus_are_spread_too_thin(void **state)
{
    struct fx *fx = *state = cluster(2);
    job(fx, 1, 6);
    assert_int_equal(fx_step(fx, 1000), 0);
    /* 2 + 8 GPUs free: 12 do not fit on any number of nodes. */
    struct sched_job *g = job(fx, 2, 12);
    g->multi_node = true;
    assert_int_equal(fx_step(fx, 2000), 0);
    expect_wait(fx, 2, SCHED_REASON_GANG);
    const struct sched_wait *w = wait_of(fx, 2);
    assert_int_equal(w->pool, MAIN);
    assert_int_equal(w->gpu_type, H100);
    assert_int_equal(w->est_start_ms, 1000 + HOUR_MS);
    /* 2 + 8 free in main: the most its group has. */
    expect_sentence(fx, 2,
                    "not enough free GPUs of type H100-80GB in pool main on few enough nodes "
                    "(need 12, 10 free)");
}

static void host_when_gpus_free_but_cpus_taken(void **state)
{
    struct fx *fx = *state = cluster(1);
    job(fx, 1, 1)->cpus = 64; /* all the node's CPUs, 1 of its 8 GPUs */
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_true(fx_running(fx, 1));
    job(fx, 2, 1)->cpus = 1;
    assert_int_equal(fx_step(fx, 2000), 0);
    expect_wait(fx, 2, SCHED_REASON_HOST);
    const struct sched_wait *w = wait_of(fx, 2);
    assert_int_equal(w->pool, MAIN);
    expect_sentence(fx, 2, "no node in pool main has the CPUs or host memory free");
    w = wait_of(fx, 2);
    assert_int_equal(w->need_milli, 0); /* no count in this sentence */
}

static void host_when_gpus_free_but_host_memory_taken(void **state)
{
    struct fx *fx = *state = cluster(1);
    job(fx, 1, 1)->mem_mib = 512 * 1024;
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_true(fx_running(fx, 1));
    job(fx, 2, 2)->mem_mib = 1024;
    assert_int_equal(fx_step(fx, 2000), 0);
    expect_wait(fx, 2, SCHED_REASON_HOST);
}

static void reserved_when_backfill_would_delay_the_head(void **state)
{
    struct fx *fx = *state = cluster(1);
    job(fx, 1, 4)->time_limit_ms = 2 * HOUR_MS;
    assert_int_equal(fx_step(fx, 0), 0);
    struct sched_job *head = job(fx, 2, 8);
    head->submit_ms = 10;
    struct sched_job *longj = job(fx, 3, 2);
    longj->time_limit_ms = 3 * HOUR_MS;
    longj->submit_ms = 20;
    assert_int_equal(fx_pass(fx, 1000), 0);
    expect_wait(fx, 2, SCHED_REASON_NO_GPU);
    assert_int_equal(wait_of(fx, 2)->est_start_ms, 2 * HOUR_MS);
    expect_wait(fx, 3, SCHED_REASON_RESERVED);
    const struct sched_wait *w = wait_of(fx, 3);
    assert_int_equal(w->other_job, 2);
    assert_int_equal(w->pool, MAIN);
    assert_int_equal(w->gpu_type, H100);
    expect_sentence(fx, 3, "behind the reservation for job 2");
}

static void priority_when_higher_ranked_job_took_the_gpus(void **state)
{
    struct fx *fx = *state = cluster(1);
    fx->pol.order = SCHED_ORDER_PRIORITY;
    job(fx, 1, 4)->prio = NORMAL; /* lower id, earlier in the array */
    job(fx, 2, 8)->prio = HIGH;
    assert_int_equal(fx_pass(fx, 1000), 0);
    /* Both fitted the empty node at pass start; the high job went first. */
    assert_non_null(fx_start(fx, 2));
    assert_int_equal(fx->res.npreempts, 0);
    expect_wait(fx, 1, SCHED_REASON_PRIORITY);
    const struct sched_wait *w = wait_of(fx, 1);
    assert_int_equal(w->pool, MAIN);
    assert_int_equal(w->gpu_type, H100);
    assert_int_equal(w->est_start_ms, 1000 + HOUR_MS);
    expect_sentence(fx, 1, "higher-ranked jobs took the free GPUs");
}

static void blocked_behind_head_job_when_backfill_off(void **state)
{
    struct fx *fx = *state = cluster(1);
    fx->pol.backfill = false;
    job(fx, 1, 4);
    assert_int_equal(fx_step(fx, 1000), 0);
    job(fx, 2, 8)->submit_ms = 1500;
    job(fx, 3, 1)->submit_ms = 1600; /* fits the 4 free GPUs */
    assert_int_equal(fx_pass(fx, 2000), 0);
    assert_int_equal(fx->res.nstarts, 0);
    assert_int_equal(fx->res.nreserves, 0);
    expect_wait(fx, 2, SCHED_REASON_NO_GPU);
    assert_int_equal(wait_of(fx, 2)->est_start_ms, -1); /* no reservation, no promise */
    expect_wait(fx, 3, SCHED_REASON_BLOCKED);
    const struct sched_wait *w = wait_of(fx, 3);
    assert_int_equal(w->other_job, 2);
    assert_int_equal(w->pool, MAIN);
    assert_int_equal(w->est_start_ms, -1);
    expect_sentence(fx, 3, "waiting behind job 2 (backfill is off)");
}

static void preempting_estimates_start_after_grace(void **state)
{
    struct fx *fx = *state = cluster(1);
    fx->pol.preempt_grace_ms = 45000;
    for (uint64_t id = 1; id <= 8; id++)
        job(fx, id, 1)->prio = LOW;
    assert_int_equal(fx_step(fx, 1000), 0);
    job(fx, 9, 1)->prio = HIGH;
    assert_int_equal(fx_step(fx, 5000), 0);
    assert_int_equal(fx->res.npreempts, 1);
    expect_wait(fx, 9, SCHED_REASON_PREEMPTING);
    const struct sched_wait *w = wait_of(fx, 9);
    assert_int_equal(w->est_start_ms, 5000 + 45000);
    assert_int_equal(w->pool, MAIN);
    assert_int_equal(w->gpu_type, H100);
    expect_sentence(fx, 9, "waiting for preempted jobs to exit");
    /* Still waiting for the victim in the next pass, within the grace. */
    assert_int_equal(fx_step(fx, 6000), 0);
    expect_wait(fx, 9, SCHED_REASON_PREEMPTING);
    assert_true(wait_of(fx, 9)->est_start_ms >= 5000 + 45000);
}

/* A reservation that waits for jobs without a time limit promises no time:
 * their end is the policy's guess, not theirs. The reservation still holds. */
static void no_estimated_start_when_running_jobs_have_no_time_limit(void **state)
{
    struct fx *fx = *state = cluster(1);
    job(fx, 1, 6)->time_limit_ms = 0;
    assert_int_equal(fx_step(fx, 1000), 0);
    assert_true(fx_running(fx, 1));
    job(fx, 2, 8);
    assert_int_equal(fx_step(fx, 2000), 0);
    expect_wait(fx, 2, SCHED_REASON_NO_GPU);
    assert_int_equal(wait_of(fx, 2)->est_start_ms, SCHED_EST_NO_LIMIT);
    assert_int_equal(fx->res.nreserves, 1);
    expect_sentence(fx, 2, "not enough free GPUs of type H100-80GB in pool main (need 8, 2 free)");
    /* With a limit, the same wait has its time. */
    struct fx *fx2 = cluster(1);
    job(fx2, 1, 6);
    assert_int_equal(fx_step(fx2, 1000), 0);
    job(fx2, 2, 8);
    assert_int_equal(fx_step(fx2, 2000), 0);
    assert_int_equal(wait_of(fx2, 2)->est_start_ms, 1000 + HOUR_MS);
    fx_free(fx2);
}

/* "resources" counts what the job asks for against what is free for it: the
 * node with the most whole GPUs, the GPU with the most left for a fraction. */
static void resources_says_what_it_needs_and_what_is_free(void **state)
{
    struct fx *fx = *state = cluster(2);
    job(fx, 1, 7);
    job(fx, 2, 6);
    assert_int_equal(fx_step(fx, 1000), 0);
    job(fx, 3, 4); /* 1 + 2 free, on two nodes */
    struct sched_job *f = job(fx, 4, 0);
    f->gpu_milli = 250;
    assert_int_equal(fx_step(fx, 2000), 0);
    expect_sentence(fx, 3, "not enough free GPUs of type H100-80GB in pool main (need 4, 2 free)");
    assert_non_null(fx_start(fx, 4)); /* a quarter fits a free GPU */

    char buf[200];
    struct sched_wait w = {.reason = SCHED_REASON_NO_GPU,
                           .pool = SCHED_ANY,
                           .gpu_type = SCHED_ANY,
                           .need_milli = 250,
                           .free_milli = 100};
    explain_format(&fx->c, &w, buf, sizeof(buf));
    assert_string_equal(buf, "not enough free GPUs (need 0.25, 0.1 free)");
    w.need_milli = 8000, w.free_milli = 2500;
    explain_format(&fx->c, &w, buf, sizeof(buf));
    assert_string_equal(buf, "not enough free GPUs (need 8, 2.5 free)");
    w.need_milli = 0; /* asked by memory: no count */
    explain_format(&fx->c, &w, buf, sizeof(buf));
    assert_string_equal(buf, "not enough free GPUs");
    w.reason = SCHED_REASON_GANG, w.need_milli = 16000, w.free_milli = 8000;
    explain_format(&fx->c, &w, buf, sizeof(buf));
    assert_string_equal(buf, "not enough free GPUs on few enough nodes (need 16, 8 free)");
}

/* Callers show "code: sentence": a sentence neither begins with its code
 * nor carries a label of its own ("priority: lower priority: ..."). */
static void no_sentence_repeats_its_code_or_has_a_label(void **state)
{
    struct fx *fx = *state = cluster(1);
    for (int r = 0; r < SCHED_REASON_COUNT; r++) {
        struct sched_wait w = {.reason = (enum sched_reason)r,
                               .team = ALPHA,
                               .pool = MAIN,
                               .gpu_type = H100,
                               .other_job = 42,
                               .field = "cpus is negative",
                               .need_milli = 8000,
                               .free_milli = 2000};
        char buf[256];
        explain_format(&fx->c, &w, buf, sizeof(buf));
        const char *code = explain_code((enum sched_reason)r);
        if (strncmp(buf, code, strlen(code)) == 0 || strchr(buf, ':'))
            fail_msg("reason %d (%s): \"%s\"", r, code, buf);
    }
}

/* ---- final reasons ---- */

/* A bad request: the job's sizes (defaults: 1 CPU, 1 GiB) and the field named. */
struct bad_case {
    struct sched_job req;
    const char *field;
};

static void bad_size_names_the_bad_field(void **state)
{
    static const struct bad_case cases[] = {
        {{.gpus = -1}, "gpus is negative"},
        {{.gpu_milli = -5}, "gpu_milli is negative"},
        {{.gpu_mem_mib = -1}, "gpu_mem_mib is negative"},
        {{.gpus = 1, .min_gpu_mem_mib = -1}, "min_gpu_mem_mib is negative"},
        {{.gpus = 1, .cpus = -2}, "cpus is negative"},
        {{.gpus = 1, .mem_mib = -1}, "mem_mib is negative"},
        {{.gpus = 1, .time_limit_ms = -1}, "time_limit_ms is negative"},
        {{.gpus = 1, .gpu_milli = 500}, "only one of gpus, gpu_milli and gpu_mem_mib"},
        {{.gpu_milli = 500, .gpu_mem_mib = 1024}, "only one of gpus, gpu_milli and gpu_mem_mib"},
        {{.gpu_milli = 1000}, "gpu_milli must be 1..999"},
        {{.gpu_milli = 500, .multi_node = true}, "multi_node needs a whole number of gpus"},
        {{.gpus = INT32_MAX, .multi_node = true}, "gpus is over the limit"},
    };
    size_t n = sizeof(cases) / sizeof(cases[0]);
    struct fx *fx = *state = cluster(1);
    for (size_t k = 0; k < n; k++) {
        struct sched_job *j = job(fx, 100 + k, 0);
        const struct sched_job *c = &cases[k].req;
        j->gpus = c->gpus;
        j->gpu_milli = c->gpu_milli;
        j->gpu_mem_mib = c->gpu_mem_mib;
        j->min_gpu_mem_mib = c->min_gpu_mem_mib;
        j->multi_node = c->multi_node;
        j->time_limit_ms = c->time_limit_ms;
        if (c->cpus)
            j->cpus = c->cpus;
        if (c->mem_mib)
            j->mem_mib = c->mem_mib;
    }
    job(fx, 1, 1); /* a good job beside them still starts */
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_non_null(fx_start(fx, 1));
    for (size_t k = 0; k < n; k++) {
        expect_wait(fx, 100 + k, SCHED_REASON_BAD_SIZE);
        const struct sched_wait *w = wait_of(fx, 100 + k);
        assert_non_null(w->field);
        if (!strstr(w->field, cases[k].field))
            fail_msg("case %zu: field \"%s\", expected \"%s\"", k, w->field, cases[k].field);
        assert_true(explain_is_final(w->reason));
    }
    expect_sentence(fx, 100, "gpus is negative");
}

static void unknown_indices_are_final(void **state)
{
    struct fx *fx = *state = cluster(1);
    job(fx, 1, 1)->pool = 2;
    job(fx, 2, 1)->gpu_type = 2;
    job(fx, 3, 1)->team = 2;
    job(fx, 4, 1)->prio = 3;
    assert_int_equal(fx_pass(fx, 1000), 0);
    assert_int_equal(fx->res.nstarts, 0);
    expect_wait(fx, 1, SCHED_REASON_UNKNOWN_POOL);
    expect_wait(fx, 2, SCHED_REASON_UNKNOWN_TYPE);
    expect_wait(fx, 3, SCHED_REASON_UNKNOWN_TEAM);
    expect_wait(fx, 4, SCHED_REASON_UNKNOWN_CLASS);
    assert_string_equal(wait_of(fx, 1)->field, "pool");
    assert_string_equal(wait_of(fx, 2)->field, "gpu_type");
    assert_string_equal(wait_of(fx, 3)->field, "team");
    assert_string_equal(wait_of(fx, 4)->field, "priority");
    for (uint64_t id = 1; id <= 4; id++)
        assert_true(explain_is_final(wait_of(fx, id)->reason));
    expect_sentence(fx, 1, "no such pool");
    expect_sentence(fx, 2, "no such GPU type");
    /* An unknown team has no name: the wait must not index past the teams. */
    expect_sentence(fx, 3, "no such team");
    expect_sentence(fx, 4, "no such priority class");
}

static void too_large_for_any_node(void **state)
{
    struct fx *fx = *state = cluster(2);
    job(fx, 1, 9);                       /* 8 GPUs a node, no multi_node */
    job(fx, 2, 1)->cpus = 65;            /* 64 CPUs a node */
    job(fx, 3, 1)->mem_mib = 513 * 1024; /* 512 GiB a node */
    struct sched_job *m = job(fx, 4, 0);
    m->gpu_mem_mib = 90000; /* 80 GiB a GPU */
    job(fx, 5, 1)->min_gpu_mem_mib = 90000;
    assert_int_equal(fx_pass(fx, 1000), 0);
    for (uint64_t id = 1; id <= 5; id++) {
        expect_wait(fx, id, SCHED_REASON_TOO_LARGE);
        const struct sched_wait *w = wait_of(fx, id);
        assert_int_equal(w->pool, MAIN);
        assert_int_equal(w->gpu_type, H100);
        assert_true(explain_is_final(w->reason));
    }
    expect_sentence(fx, 1, "larger than any node of type H100-80GB in pool main can hold");
}

static void gang_too_large_for_all_gpus_together(void **state)
{
    struct fx *fx = *state = cluster(2);
    struct sched_job *g = job(fx, 1, 17);
    g->multi_node = true;
    struct sched_job *ok = job(fx, 2, 16); /* exactly all: not final, it starts */
    ok->multi_node = true;
    assert_int_equal(fx_pass(fx, 1000), 0);
    expect_wait(fx, 1, SCHED_REASON_GANG_TOO_LARGE);
    assert_true(explain_is_final(wait_of(fx, 1)->reason));
    assert_non_null(fx_start(fx, 2));
    expect_sentence(fx, 1, "a gang larger than all GPUs of type H100-80GB in pool main together");
}

static void no_match_when_pool_has_no_gpus_of_type(void **state)
{
    struct fx *fx = *state = cluster(1);
    job(fx, 1, 1)->gpu_type = A100; /* A100s live only in spare */
    struct sched_job *ok = job(fx, 2, 1);
    ok->pool = SPARE;
    ok->gpu_type = A100;
    assert_int_equal(fx_pass(fx, 1000), 0);
    expect_wait(fx, 1, SCHED_REASON_NO_MATCH);
    const struct sched_wait *w = wait_of(fx, 1);
    assert_int_equal(w->pool, MAIN);
    assert_int_equal(w->gpu_type, A100);
    assert_true(explain_is_final(w->reason));
    assert_non_null(fx_start(fx, 2));
    expect_sentence(fx, 1, "no node in pool main has GPUs of type A100-40GB");
}

static void quota_never_when_request_over_guarantee_plus_borrow_limit(void **state)
{
    struct fx *fx = *state = cluster(2);
    fx->teams[ALPHA].borrow_limit_milli = 0;
    fx_quota(fx, ALPHA, MAIN, H100, 2000, 1000);
    job(fx, 1, 4);
    job(fx, 2, 3); /* exactly the limit: starts */
    assert_int_equal(fx_pass(fx, 1000), 0);
    expect_wait(fx, 1, SCHED_REASON_QUOTA_NEVER);
    const struct sched_wait *w = wait_of(fx, 1);
    assert_int_equal(w->team, ALPHA);
    assert_int_equal(w->pool, MAIN);
    assert_true(explain_is_final(w->reason));
    assert_non_null(fx_start(fx, 2));
    expect_sentence(fx, 1, "larger than team alpha's guarantee plus borrowing limit in pool main");
}

/* ---- explain_format, explain_code, explain_is_final ---- */

static void format_names_pools_types_and_teams(void **state)
{
    struct fx *fx = *state = cluster(1);
    char buf[200];
    struct sched_wait w = {.job = 7,
                           .reason = SCHED_REASON_QUOTA,
                           .team = BETA,
                           .pool = SPARE,
                           .gpu_type = A100,
                           .est_start_ms = -1};
    assert_int_equal(explain_format(&fx->c, &w, buf, sizeof(buf)),
                     (int)strlen("team beta has no guaranteed or borrowable GPUs "
                                 "left in pool spare"));
    assert_string_equal(buf, "team beta has no guaranteed or borrowable GPUs left in "
                             "pool spare");
    w.reason = SCHED_REASON_NO_GPU;
    explain_format(&fx->c, &w, buf, sizeof(buf));
    assert_string_equal(buf, "not enough free GPUs of type A100-40GB in pool spare");
    w.pool = SCHED_ANY;
    w.gpu_type = SCHED_ANY;
    explain_format(&fx->c, &w, buf, sizeof(buf));
    assert_string_equal(buf, "not enough free GPUs");
    w.pool = SPARE; /* any type, one pool */
    assert_int_equal(explain_format(&fx->c, &w, buf, sizeof(buf)),
                     (int)strlen("not enough free GPUs in pool spare"));
    assert_string_equal(buf, "not enough free GPUs in pool spare");
    w.pool = SCHED_ANY;
    w.reason = SCHED_REASON_RESERVED;
    w.other_job = UINT64_MAX;
    explain_format(&fx->c, &w, buf, sizeof(buf));
    assert_string_equal(buf, "behind the reservation for job 18446744073709551615");
    w.other_job = 0;
    explain_format(&fx->c, &w, buf, sizeof(buf));
    assert_string_equal(buf, "behind the reservation for job 0");
    w.reason = SCHED_REASON_BAD_SIZE;
    w.field = NULL;
    explain_format(&fx->c, &w, buf, sizeof(buf));
    assert_string_equal(buf, "?");
    w.reason = SCHED_REASON_QUOTA_NEVER;
    w.team = 99; /* out of range: no name, no crash */
    w.pool = MAIN;
    explain_format(&fx->c, &w, buf, sizeof(buf));
    assert_string_equal(buf, "larger than team ?'s guarantee plus borrowing limit in pool main");
    fx->pools[MAIN].name = NULL; /* a nameless pool */
    explain_format(&fx->c, &w, buf, sizeof(buf));
    assert_string_equal(buf, "larger than team ?'s guarantee plus borrowing limit in pool ?");
}

static void format_truncates_like_snprintf(void **state)
{
    struct fx *fx = *state = cluster(1);
    const char *full = "not enough free GPUs of type H100-80GB in pool main";
    int len = (int)strlen(full);
    struct sched_wait w = {.reason = SCHED_REASON_NO_GPU, .pool = MAIN, .gpu_type = H100};
    char buf[64];
    for (size_t size = 1; size <= (size_t)len + 1; size++) {
        memset(buf, 'X', sizeof(buf));
        assert_int_equal(explain_format(&fx->c, &w, buf, size), len);
        assert_int_equal(strlen(buf), size - 1);
        assert_memory_equal(buf, full, size - 1);
        assert_int_equal(buf[size], 'X'); /* nothing written past the buffer */
    }
    /* Size 0: only the length, the buffer untouched (it may be NULL). */
    memset(buf, 'X', sizeof(buf));
    assert_int_equal(explain_format(&fx->c, &w, buf, 0), len);
    assert_int_equal(buf[0], 'X');
    assert_int_equal(explain_format(&fx->c, &w, NULL, 0), len);
    /* Truncation inside a substituted name and inside a number. */
    w.reason = SCHED_REASON_BLOCKED;
    w.other_job = 123456;
    char small[20];
    assert_int_equal(explain_format(&fx->c, &w, small, sizeof(small)),
                     (int)strlen("waiting behind job 123456 (backfill is off)"));
    assert_string_equal(small, "waiting behind job ");
    char tiny[23];
    explain_format(&fx->c, &w, tiny, sizeof(tiny));
    assert_string_equal(tiny, "waiting behind job 123");
}

static void format_rejects_bad_arguments(void **state)
{
    struct fx *fx = *state = cluster(1);
    char buf[32];
    struct sched_wait w = {.reason = SCHED_REASON_NO_GPU};
    assert_int_equal(explain_format(NULL, &w, buf, sizeof(buf)), GPO_EINVAL);
    assert_int_equal(explain_format(&fx->c, NULL, buf, sizeof(buf)), GPO_EINVAL);
    assert_int_equal(explain_format(&fx->c, &w, NULL, 8), GPO_EINVAL);
    w.reason = SCHED_REASON_COUNT;
    assert_int_equal(explain_format(&fx->c, &w, buf, sizeof(buf)), GPO_EINVAL);
}

static void every_reason_formats_without_placeholders_left(void **state)
{
    struct fx *fx = *state = cluster(1);
    for (int r = 0; r < SCHED_REASON_COUNT; r++) {
        struct sched_wait w = {.job = 1,
                               .reason = (enum sched_reason)r,
                               .team = ALPHA,
                               .pool = MAIN,
                               .gpu_type = H100,
                               .other_job = 42,
                               .field = "cpus is negative"};
        char buf[256];
        int n = explain_format(&fx->c, &w, buf, sizeof(buf));
        assert_true(n > 0);
        assert_int_equal((size_t)n, strlen(buf));
        if (strchr(buf, '%'))
            fail_msg("reason %d: \"%s\" has a placeholder left", r, buf);
        assert_non_null(explain_code((enum sched_reason)r));
        assert_true(strlen(explain_code((enum sched_reason)r)) > 0);
    }
}

static void codes_are_stable_short_names(void **state)
{
    (void)state;
    assert_string_equal(explain_code(SCHED_REASON_NONE), "none");
    assert_string_equal(explain_code(SCHED_REASON_QUOTA), "quota");
    assert_string_equal(explain_code(SCHED_REASON_NO_GPU), "resources");
    assert_string_equal(explain_code(SCHED_REASON_GANG), "gang");
    assert_string_equal(explain_code(SCHED_REASON_HOST), "host");
    assert_string_equal(explain_code(SCHED_REASON_RESERVED), "reservation");
    assert_string_equal(explain_code(SCHED_REASON_PRIORITY), "priority");
    assert_string_equal(explain_code(SCHED_REASON_BLOCKED), "blocked");
    assert_string_equal(explain_code(SCHED_REASON_PREEMPTING), "preempting");
    assert_string_equal(explain_code(SCHED_REASON_BAD_SIZE), "invalid");
    assert_string_equal(explain_code(SCHED_REASON_UNKNOWN_POOL), "invalid");
    assert_string_equal(explain_code(SCHED_REASON_UNKNOWN_CLASS), "invalid");
    assert_string_equal(explain_code(SCHED_REASON_TOO_LARGE), "unschedulable");
    assert_string_equal(explain_code(SCHED_REASON_GANG_TOO_LARGE), "unschedulable");
    assert_string_equal(explain_code(SCHED_REASON_NO_MATCH), "unschedulable");
    assert_string_equal(explain_code(SCHED_REASON_QUOTA_NEVER), "unschedulable");
    assert_string_equal(explain_code(SCHED_REASON_COUNT), "unknown");
    assert_string_equal(explain_code((enum sched_reason) - 1), "unknown");
}

static void only_unschedulable_and_invalid_reasons_are_final(void **state)
{
    (void)state;
    for (int r = 0; r < SCHED_REASON_COUNT; r++) {
        const char *code = explain_code((enum sched_reason)r);
        bool final = strcmp(code, "invalid") == 0 || strcmp(code, "unschedulable") == 0;
        if (explain_is_final((enum sched_reason)r) != final)
            fail_msg("reason %d (%s): final %d", r, code, explain_is_final((enum sched_reason)r));
    }
    assert_false(explain_is_final(SCHED_REASON_COUNT));
}

#define T(name) cmocka_unit_test_teardown(name, fx_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(quota_when_team_at_guarantee_plus_borrow_limit_while_gpus_free),
        T(no_gpu_when_cluster_full_with_estimated_start),
        T(gang_when_free_gpus_are_spread_too_thin),
        T(no_estimated_start_when_running_jobs_have_no_time_limit),
        T(resources_says_what_it_needs_and_what_is_free),
        T(no_sentence_repeats_its_code_or_has_a_label),
        T(host_when_gpus_free_but_cpus_taken),
        T(host_when_gpus_free_but_host_memory_taken),
        T(reserved_when_backfill_would_delay_the_head),
        T(priority_when_higher_ranked_job_took_the_gpus),
        T(blocked_behind_head_job_when_backfill_off),
        T(preempting_estimates_start_after_grace),
        T(bad_size_names_the_bad_field),
        T(unknown_indices_are_final),
        T(too_large_for_any_node),
        T(gang_too_large_for_all_gpus_together),
        T(no_match_when_pool_has_no_gpus_of_type),
        T(quota_never_when_request_over_guarantee_plus_borrow_limit),
        T(format_names_pools_types_and_teams),
        T(format_truncates_like_snprintf),
        T(format_rejects_bad_arguments),
        T(every_reason_formats_without_placeholders_left),
        T(codes_are_stable_short_names),
        T(only_unschedulable_and_invalid_reasons_are_final),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

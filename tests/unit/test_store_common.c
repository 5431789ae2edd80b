/* test_store_common.c - the store's behaviour on every backend: jobs and
 * their ids, attempts, group commit (one transaction for what queued, a
 * failing batch undone alone), idempotency keys, decisions and epochs,
 * paging, arrays, users and tokens, the active scan, holds, configs, nodes,
 * meta and the scheduler's state, and close with batches still queued.
 * tests/meson.build runs it on SQLite and, under tests/tools/with_pg.py, on
 * PostgreSQL (storetest.h). The writer is held with store_pause_writer where
 * a test needs batches to meet in one group; nothing waits on a clock. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/backend.h"
#include "store/store.h"
#include "storetest.h"
#include "tmptree.h"
#include "base/banned.h"

static int setup(void **state)
{
    return storetest_setup(state, "test_store_common");
}

/* ---- durability ------------------------------------------------------------- */

static void committed_job_and_attempts_survive_reopen(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = storetest_open(e);
    int64_t id = storetest_add_job(s, "ml", "RUNNING", 3);
    struct store_batch *b = store_batch_new();
    struct store_attempt_upsert a = STORE_ATTEMPT_UPSERT_INIT;
    a.job_id = id;
    a.attempt = 1;
    a.state = "FAILED";
    a.nodes = "[\"n1\"]";
    a.gpus = "[\"GPU-1\"]";
    a.start_ms = 10;
    a.end_ms = 20;
    a.exit_code = 0; /* a real 0, not "unknown" */
    a.epoch = 1;
    assert_int_equal(store_batch_attempt_upsert(b, &a), 0);
    a.attempt = 2;
    a.state = "RUNNING";
    a.end_ms = STORE_NULL;
    a.exit_code = STORE_NULL;
    a.reason = "retry";
    assert_int_equal(store_batch_attempt_upsert(b, &a), 0);
    storetest_commit_ok(s, b);
    storetest_close(s);

    s = storetest_open(e);
    struct store_job j;
    assert_int_equal(store_job_get(s, id, &j), 0);
    assert_string_equal(j.state, "RUNNING");
    assert_string_equal(j.spec, "{\"team\":\"ml\",\"state\":\"RUNNING\"}");
    assert_int_equal(j.user_id, 3);
    assert_true(j.array_id == STORE_NULL && j.reason == NULL);
    assert_int_equal(j.nattempts, 2);
    assert_string_equal(j.attempts[0].state, "FAILED");
    assert_string_equal(j.attempts[0].gpus, "[\"GPU-1\"]");
    assert_int_equal(j.attempts[0].exit_code, 0);
    assert_true(j.attempts[0].signal == STORE_NULL);
    assert_int_equal(j.attempts[1].attempt, 2);
    assert_true(j.attempts[1].exit_code == STORE_NULL && j.attempts[1].end_ms == STORE_NULL);
    assert_string_equal(j.attempts[1].reason, "retry");
    store_job_release(&j);
    storetest_close(s);
}

static void job_ids_increase_and_are_never_reused(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = storetest_open(e);
    int64_t a = storetest_add_job(s, "ml", "PENDING", 1),
            b = storetest_add_job(s, "ml", "PENDING", 1);
    int64_t c = storetest_add_job(s, "ml", "PENDING", 1);
    assert_true(a < b && b < c);
    struct store_batch *del = store_batch_new();
    assert_int_equal(store_batch_job_delete(del, c), 0);
    storetest_commit_ok(s, del);
    storetest_close(s);

    s = storetest_open(e);
    struct store_job j;
    assert_int_equal(store_job_get(s, c, &j), GPO_ENOENT);
    assert_true(storetest_add_job(s, "ml", "PENDING", 1) > c);
    del = store_batch_new();
    assert_int_equal(store_batch_job_delete(del, c), 0);
    storetest_commit_expect(s, del, GPO_ENOENT, NULL, 0);
    storetest_close(s);
}

/* ---- group commit --------------------------------------------------------- */

#define GROUP_N 40

struct group {
    struct store *s;
    struct tally t;
    int err[GROUP_N];
    int64_t id[GROUP_N], existing[GROUP_N];
    bool visible[GROUP_N]; /* a read from the callback already sees the job */
};

struct slot {
    struct group *g;
    int k;
};

static void group_done(void *ctx, const struct store_result *r)
{
    struct slot *sl = ctx;
    struct group *g = sl->g;
    g->err[sl->k] = r->err;
    g->existing[sl->k] = r->existing_job_id;
    if (r->err == 0 && r->njob_ids == 1) {
        g->id[sl->k] = r->job_ids[0];
        struct store_job j;
        if (store_job_get(g->s, r->job_ids[0], &j) == 0) {
            g->visible[sl->k] = true;
            store_job_release(&j);
        }
    }
    tally_add(&g->t);
}

static struct group *group_new(struct store *s)
{
    struct group *g = calloc(1, sizeof(*g));
    assert_non_null(g);
    g->s = s;
    tally_init(&g->t);
    return g;
}

static void group_free(struct group *g)
{
    tally_destroy(&g->t);
    free(g);
}

static void paused_batches_commit_in_one_transaction(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = storetest_open(e);
    struct group *g = group_new(s);
    struct slot slots[GROUP_N];
    struct store_stats st0, st1;
    store_pause_writer(s);
    store_get_stats(s, &st0);
    for (int k = 0; k < GROUP_N; k++) {
        slots[k] = (struct slot){g, k};
        assert_int_equal(
            store_commit(s, storetest_job_batch("ml", "PENDING", 1, NULL), group_done, &slots[k]),
            0);
    }
    store_get_stats(s, &st1);
    assert_int_equal(st1.queued, GROUP_N);
    assert_int_equal(st1.transactions, st0.transactions);
    store_resume_writer(s);
    tally_wait(&g->t, GROUP_N);
    store_get_stats(s, &st1);
    assert_int_equal(st1.transactions - st0.transactions, 1);
    assert_int_equal(st1.batches - st0.batches, GROUP_N);
    assert_int_equal(st1.queued, 0);
    for (int k = 0; k < GROUP_N; k++) {
        assert_int_equal(g->err[k], 0);
        assert_true(g->visible[k]); /* the callback ran after COMMIT */
        if (k)
            assert_true(g->id[k] > g->id[k - 1]); /* ids in queue order */
    }
    group_free(g);
    storetest_close(s);
}

static void failing_batch_in_group_leaves_no_trace(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = storetest_open(e);
    int64_t first = 0, epoch = 0;
    storetest_commit_expect(s, storetest_job_batch("ml", "PENDING", 1, "dup"), 0, &first, 1);
    (void)storetest_new_epoch(s);
    epoch = storetest_new_epoch(s);

    struct group *g = group_new(s);
    struct slot slots[4];
    struct store_batch *b[4];
    b[0] = storetest_job_batch("ml", "PENDING", 1, NULL);
    b[1] = store_batch_new(); /* a duplicate key after a write of its own */
    assert_int_equal(store_batch_meta_put(b[1], "b-was-here", "1"), 0);
    struct store_job_insert ji = STORE_JOB_INSERT_INIT;
    ji.user_id = 1, ji.team = "ml", ji.state = "PENDING", ji.spec = "{}";
    ji.idempotency_key = "dup";
    assert_int_equal(store_batch_job_insert(b[1], &ji), 0);
    b[2] = storetest_job_batch("ml", "PENDING", 1, NULL); /* a decision under a stale epoch */
    assert_int_equal(store_batch_meta_put(b[2], "c-was-here", "1"), 0);
    assert_int_equal(store_batch_set_decision(b[2], epoch - 1), 0);
    b[3] = storetest_job_batch("ml", "PENDING", 1, NULL);

    struct store_stats st0, st1;
    store_pause_writer(s);
    store_get_stats(s, &st0);
    for (int k = 0; k < 4; k++) {
        slots[k] = (struct slot){g, k};
        assert_int_equal(store_commit(s, b[k], group_done, &slots[k]), 0);
    }
    store_resume_writer(s);
    tally_wait(&g->t, 4);
    store_get_stats(s, &st1);
    assert_int_equal(st1.transactions - st0.transactions, 1);
    assert_int_equal(st1.batches_failed - st0.batches_failed, 2);
    assert_int_equal(g->err[0], 0);
    assert_int_equal(g->err[1], GPO_EEXIST);
    assert_int_equal(g->existing[1], first);
    assert_int_equal(g->err[2], GPO_EFENCED);
    assert_int_equal(g->err[3], 0);
    assert_true(g->visible[0] && g->visible[3]);

    char *v = NULL;
    assert_int_equal(store_meta_get(s, "b-was-here", &v), GPO_ENOENT);
    assert_int_equal(store_meta_get(s, "c-was-here", &v), GPO_ENOENT);
    struct store_job *jobs = NULL;
    size_t n = storetest_list_jobs(s, &jobs);
    assert_int_equal(n, 3); /* the first job, and the two good batches' */
    assert_int_equal(jobs[0].id, first);
    assert_int_equal(jobs[1].id, g->id[0]);
    assert_int_equal(jobs[2].id, g->id[3]);
    store_jobs_free(jobs, n);
    group_free(g);
    storetest_close(s);
}

/* More batches than one round trip carries (PostgreSQL sends a group in
 * pieces), one of them failing: the others commit, in queue order. */
#define BIG_N 600

struct big {
    struct tally t;
    int err[BIG_N];
    int64_t id[BIG_N];
};

struct big_slot {
    struct big *g;
    int k;
};

static void big_done(void *ctx, const struct store_result *r)
{
    const struct big_slot *slot = ctx;
    struct big *g = slot->g;
    g->err[slot->k] = r->err;
    if (r->err == 0 && r->njob_ids == 1)
        g->id[slot->k] = r->job_ids[0];
    tally_add(&g->t);
}

static void big_group_with_a_failing_batch_commits_the_rest(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = storetest_open(e);
    int64_t first = 0;
    storetest_commit_expect(s, storetest_job_batch("ml", "PENDING", 1, "dup"), 0, &first, 1);
    struct big *g = calloc(1, sizeof(*g));
    assert_non_null(g);
    tally_init(&g->t);
    struct big_slot *slots = calloc(BIG_N, sizeof(*slots));
    assert_non_null(slots);
    store_pause_writer(s);
    struct store_stats st0, st1;
    store_get_stats(s, &st0);
    for (int k = 0; k < BIG_N; k++) {
        slots[k] = (struct big_slot){g, k};
        struct store_batch *b = storetest_job_batch("ml", "PENDING", 1, k == 450 ? "dup" : NULL);
        assert_int_equal(store_commit(s, b, big_done, &slots[k]), 0);
    }
    store_resume_writer(s);
    tally_wait(&g->t, BIG_N);
    store_get_stats(s, &st1);
    assert_int_equal(st1.transactions - st0.transactions, 1);
    assert_int_equal(st1.batches_failed - st0.batches_failed, 1);
    for (int k = 0; k < BIG_N; k++) {
        if (k == 450) {
            assert_int_equal(g->err[k], GPO_EEXIST);
            continue;
        }
        assert_int_equal(g->err[k], 0);
        if (k > 0 && k != 451)
            assert_true(g->id[k] > g->id[k - 1]);
    }
    assert_true(g->id[451] > g->id[449]);
    assert_int_equal(storetest_count_jobs(s), BIG_N); /* the first, and 599 of the group */
    tally_destroy(&g->t);
    free(slots);
    free(g);
    storetest_close(s);
}

/* One batch of more operations than a round trip carries: whole, or (one
 * operation failing far into it) not at all. */
static void big_batch_commits_whole_or_not_at_all(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = storetest_open(e);
    struct store_batch *b = store_batch_new();
    char name[32];
    for (int k = 0; k < 1000; k++) {
        snprintf(name, sizeof(name), "n%04d", k);
        assert_int_equal(store_batch_node_put(b, name, "{}", "READY", k), 0);
    }
    storetest_commit_ok(s, b);
    b = store_batch_new();
    for (int k = 0; k < 1000; k++) {
        snprintf(name, sizeof(name), "m%04d", k);
        assert_int_equal(store_batch_node_put(b, name, "{}", "READY", k), 0);
        if (k == 700)
            assert_int_equal(store_batch_node_delete(b, "no-such-node"), 0);
    }
    char msg[256] = "";
    assert_int_equal(store_commit_wait(s, b, NULL, 0, msg, sizeof(msg)), GPO_ENOENT);
    assert_non_null(strstr(msg, "operation 701"));
    struct store_node *nodes = NULL;
    size_t n = 0;
    assert_int_equal(store_node_list(s, &nodes, &n), 0);
    assert_int_equal(n, 1000);
    assert_string_equal(nodes[0].name, "n0000");
    assert_string_equal(nodes[999].name, "n0999");
    store_nodes_free(nodes, n);
    storetest_close(s);
}

struct writer_arg {
    struct store *s;
    int rc;
    int64_t id;
};

static void *writer_thread(void *p)
{
    struct writer_arg *w = p;
    w->rc =
        store_commit_wait(w->s, storetest_job_batch("ml", "PENDING", 2, NULL), &w->id, 1, NULL, 0);
    return NULL;
}

static void concurrent_writers_share_transactions(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = storetest_open(e);
    enum { N = 8 };
    pthread_t th[N];
    struct writer_arg w[N];
    struct store_stats st0, st1;
    store_pause_writer(s);
    store_get_stats(s, &st0);
    for (int k = 0; k < N; k++) {
        w[k] = (struct writer_arg){s, -100, 0};
        assert_int_equal(pthread_create(&th[k], NULL, writer_thread, &w[k]), 0);
    }
    do { /* until every writer has queued its batch */
        sched_yield();
        store_get_stats(s, &st1);
    } while (st1.queued < N);
    store_resume_writer(s);
    for (int k = 0; k < N; k++) {
        pthread_join(th[k], NULL);
        assert_int_equal(w[k].rc, 0);
        for (int i = 0; i < k; i++)
            assert_true(w[i].id != w[k].id);
    }
    store_get_stats(s, &st1);
    assert_int_equal(st1.transactions - st0.transactions, 1);
    assert_int_equal(st1.batches - st0.batches, N);
    storetest_close(s);
}

/* ---- idempotency, epochs ---------------------------------------------------- */

static void same_idempotency_key_returns_first_job(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = storetest_open(e);
    int64_t id1 = 0, id2 = 0, id3 = 0;
    char msg[256] = "";
    storetest_commit_expect(s, storetest_job_batch("ml", "PENDING", 7, "k1"), 0, &id1, 1);
    assert_int_equal(store_commit_wait(s, storetest_job_batch("ml", "PENDING", 7, "k1"), &id2, 1,
                                       msg, sizeof(msg)),
                     GPO_EEXIST);
    assert_int_equal(id2, id1);
    assert_non_null(strstr(msg, "idempotency"));
    storetest_commit_expect(s, storetest_job_batch("ml", "PENDING", 8, "k1"), 0, &id3, 1);
    assert_true(id3 != id1);
    int64_t got = 0;
    assert_int_equal(store_idempotency_get(s, 7, "k1", &got), 0);
    assert_int_equal(got, id1);
    assert_int_equal(store_idempotency_get(s, 9, "k1", &got), GPO_ENOENT);
    assert_int_equal(storetest_count_jobs(s), 2);
    storetest_close(s);
}

static void stale_epoch_is_fenced_and_changes_nothing(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = storetest_open(e);
    int64_t e1 = 0, e2 = 0, e3 = 0;
    e1 = storetest_new_epoch(s);
    e2 = storetest_new_epoch(s);
    assert_true(e2 > e1 && e1 > 0);
    int64_t id = storetest_add_job(s, "ml", "PENDING", 1);

    struct store_batch *b = store_batch_new();
    assert_int_equal(store_batch_set_decision(b, e1), 0);
    assert_int_equal(store_batch_job_update(b, id, "RUNNING", NULL, 50, NULL), 0);
    char msg[256] = "";
    assert_int_equal(store_commit_wait(s, b, NULL, 0, msg, sizeof(msg)), GPO_EFENCED);
    assert_non_null(strstr(msg, "epoch"));
    struct store_job j;
    assert_int_equal(store_job_get(s, id, &j), 0);
    assert_string_equal(j.state, "PENDING");
    assert_int_equal(j.updated_ms, 1000);
    store_job_release(&j);

    b = store_batch_new();
    assert_int_equal(store_batch_set_decision(b, e2 + 5), 0); /* never issued */
    assert_int_equal(store_batch_job_update(b, id, "RUNNING", NULL, 50, NULL), 0);
    storetest_commit_expect(s, b, GPO_EINVAL, NULL, 0);

    b = store_batch_new();
    assert_int_equal(store_batch_set_decision(b, e2), 0);
    assert_int_equal(store_batch_job_update(b, id, "RUNNING", "placed", 50, NULL), 0);
    storetest_commit_ok(s, b);
    assert_int_equal(store_job_get(s, id, &j), 0);
    assert_string_equal(j.state, "RUNNING");
    assert_string_equal(j.reason, "placed");
    store_job_release(&j);

    b = store_batch_new();
    assert_int_equal(store_batch_meta_put(b, STORE_META_EPOCH, "1000"), GPO_EINVAL);
    store_batch_free(b);
    storetest_close(s);
    s = storetest_open(e);
    e3 = storetest_new_epoch(s);
    assert_true(e3 > e2);
    storetest_close(s);
}

/* ---- reads ------------------------------------------------------------------ */

static void job_list_pages_return_each_match_once(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = storetest_open(e);
    static const char *const states[] = {"PENDING", "RUNNING", "DONE"};
    int64_t ids[60], want[60];
    size_t nwant = 0;
    struct store_batch *b = store_batch_new();
    for (int k = 0; k < 60; k++) {
        struct store_job_insert j = STORE_JOB_INSERT_INIT;
        j.user_id = k % 2 + 1;
        j.team = k % 3 ? "a" : "b";
        j.state = states[k % 3 == 1 ? 0 : k % 5 == 0 ? 2 : 1];
        j.spec = "{}";
        assert_int_equal(store_batch_job_insert(b, &j), 0);
    }
    storetest_commit_expect(s, b, 0, ids, 60);
    for (int k = 0; k < 60; k++)
        if (k % 3 && k % 2 == 0 && (k % 3 == 1 || k % 5 != 0))
            want[nwant++] = ids[k]; /* team a, user 1, PENDING or RUNNING */

    const char *const filter_states[] = {"PENDING", "RUNNING"};
    struct store_job_filter f = STORE_JOB_FILTER_INIT;
    f.team = "a";
    f.user_id = 1;
    f.states = filter_states;
    f.nstates = 2;
    f.limit = 4;
    size_t got = 0;
    for (;;) {
        struct store_job *jobs = NULL;
        size_t n = 0;
        assert_int_equal(store_job_list(s, &f, &jobs, &n), 0);
        assert_true(n <= f.limit);
        for (size_t k = 0; k < n; k++) {
            assert_true(got < nwant);
            assert_int_equal(jobs[k].id, want[got]);
            assert_string_equal(jobs[k].team, "a");
            assert_null(jobs[k].attempts);
            got++;
        }
        if (n)
            f.after_id = jobs[n - 1].id;
        store_jobs_free(jobs, n);
        if (n < f.limit)
            break;
    }
    assert_int_equal(got, nwant);

    struct store_job *jobs = NULL;
    size_t n = 0;
    f.limit = 0;
    assert_int_equal(store_job_list(s, &f, &jobs, &n), GPO_EINVAL);
    f.limit = STORE_LIST_MAX + 1;
    assert_int_equal(store_job_list(s, &f, &jobs, &n), GPO_EINVAL);
    storetest_close(s);
}

static void array_submitted_in_one_batch_is_named_after_first_job(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = storetest_open(e);
    storetest_add_job(s, "ml", "PENDING", 1);
    struct store_batch *b = store_batch_new();
    for (int k = 0; k < 3; k++) {
        struct store_job_insert j = STORE_JOB_INSERT_INIT;
        j.team = "ml", j.state = "PENDING", j.spec = "{}";
        j.array_id = STORE_ARRAY_FIRST;
        j.array_index = k;
        assert_int_equal(store_batch_job_insert(b, &j), 0);
    }
    int64_t ids[3];
    storetest_commit_expect(s, b, 0, ids, 3);
    struct store_job_filter f = STORE_JOB_FILTER_INIT;
    f.array_id = ids[0];
    struct store_job *jobs = NULL;
    size_t n = 0;
    assert_int_equal(store_job_list(s, &f, &jobs, &n), 0);
    assert_int_equal(n, 3);
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(jobs[k].id, ids[k]);
        assert_int_equal(jobs[k].array_id, ids[0]);
        assert_int_equal(jobs[k].array_index, (int64_t)k);
    }
    store_jobs_free(jobs, n);
    storetest_close(s);
}

static void token_finds_user_and_user_delete_removes_tokens(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = storetest_open(e);
    uint8_t h1[STORE_TOKEN_HASH_LEN], h2[STORE_TOKEN_HASH_LEN];
    memset(h1, 0xa1, sizeof(h1));
    memset(h2, 0xb2, sizeof(h2));
    h1[0] = 0; /* bytes, not a string */
    struct store_batch *b = store_batch_new();
    assert_int_equal(store_batch_user_put(b, "alice", "alice", "ml", "admin", 100), 0);
    assert_int_equal(store_batch_user_put(b, "carol", NULL, NULL, "user", 101), 0);
    assert_int_equal(store_batch_token_put(b, "alice", h1, "laptop", 102), 0);
    assert_int_equal(store_batch_token_put(b, "alice", h2, NULL, 103), 0);
    storetest_commit_ok(s, b);

    struct store_user u, byname;
    assert_int_equal(store_user_get_by_token(s, h1, &u), 0);
    assert_string_equal(u.name, "alice");
    assert_string_equal(u.role, "admin");
    assert_int_equal(store_user_get_by_name(s, "alice", &byname), 0);
    assert_int_equal(u.id, byname.id);
    store_user_release(&byname);
    assert_int_equal(store_user_get_by_id(s, u.id, &byname), 0);
    assert_string_equal(byname.team, "ml");
    store_user_release(&byname);
    store_user_release(&u);

    b = store_batch_new(); /* no such user */
    assert_int_equal(store_batch_token_put(b, "bob", h1, NULL, 1), 0);
    storetest_commit_expect(s, b, GPO_ENOENT, NULL, 0);
    b = store_batch_new(); /* a hash is one token */
    assert_int_equal(store_batch_token_put(b, "carol", h1, NULL, 1), 0);
    storetest_commit_expect(s, b, GPO_EEXIST, NULL, 0);

    b = store_batch_new();
    assert_int_equal(store_batch_user_delete(b, "alice"), 0);
    storetest_commit_ok(s, b);
    assert_int_equal(store_user_get_by_token(s, h1, &u), GPO_ENOENT);
    assert_int_equal(store_user_get_by_token(s, h2, &u), GPO_ENOENT);
    b = store_batch_new(); /* the hash is free again: alice's rows are gone */
    assert_int_equal(store_batch_token_put(b, "carol", h1, NULL, 1), 0);
    storetest_commit_ok(s, b);
    struct store_user *users = NULL;
    size_t n = 0;
    assert_int_equal(store_user_list(s, &users, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(users[0].name, "carol");
    assert_null(users[0].unix_user);
    store_users_free(users, n);
    storetest_close(s);
}

static int scan_collect(void *ctx, const struct store_job *j)
{
    struct store_job *out = ctx;
    size_t k = 0;
    while (out[k].id)
        k++;
    out[k].id = j->id;
    out[k].nattempts = j->nattempts;
    out[k].array_index = j->nattempts ? j->attempts[0].attempt : 0; /* the latest attempt */
    return 0;
}

static int scan_stop(void *ctx, const struct store_job *j)
{
    (void)ctx;
    (void)j;
    return 5;
}

static void scan_active_returns_unfinished_jobs_with_latest_attempt(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = storetest_open(e);
    int64_t j1 = storetest_add_job(s, "ml", "PENDING", 1),
            j2 = storetest_add_job(s, "ml", "RUNNING", 1);
    storetest_add_job(s, "ml", "DONE", 1);
    int64_t j4 = storetest_add_job(s, "ml", "PREEMPTED", 1);
    struct store_batch *b = store_batch_new();
    struct store_attempt_upsert a = STORE_ATTEMPT_UPSERT_INIT;
    a.state = "FAILED", a.epoch = 1;
    a.job_id = j2, a.attempt = 1;
    assert_int_equal(store_batch_attempt_upsert(b, &a), 0);
    a.attempt = 2, a.state = "RUNNING";
    assert_int_equal(store_batch_attempt_upsert(b, &a), 0);
    a.job_id = j4, a.attempt = 1, a.state = "PREEMPTED";
    assert_int_equal(store_batch_attempt_upsert(b, &a), 0);
    storetest_commit_ok(s, b);

    struct store_job out[8];
    memset(out, 0, sizeof(out));
    assert_int_equal(store_job_scan_active(s, scan_collect, out), 0);
    assert_int_equal(out[0].id, j1);
    assert_int_equal(out[0].nattempts, 0);
    assert_int_equal(out[1].id, j2);
    assert_int_equal(out[1].nattempts, 1);
    assert_int_equal(out[1].array_index, 2);
    assert_int_equal(out[2].id, j4);
    assert_int_equal(out[2].array_index, 1);
    assert_int_equal(out[3].id, 0);
    assert_int_equal(store_job_scan_active(s, scan_stop, NULL), 5);

    b = store_batch_new(); /* an attempt needs its job */
    a.job_id = 999;
    assert_int_equal(store_batch_attempt_upsert(b, &a), 0);
    storetest_commit_expect(s, b, GPO_ENOENT, NULL, 0);
    b = store_batch_new();
    assert_int_equal(store_batch_job_update(b, 999, "DONE", NULL, 1, NULL), 0);
    storetest_commit_expect(s, b, GPO_ENOENT, NULL, 0);
    storetest_close(s);
}

/* store_job_fn: the hold of the first two jobs ("" for none). */
static int scan_holds(void *ctx, const struct store_job *j)
{
    char(*holds)[8] = ctx;
    if (j->id <= 2)
        snprintf(holds[j->id - 1], sizeof(holds[0]), "%s", j->hold ? j->hold : "");
    return 0;
}

/* A hold is stored with the job (at insert or later), survives a reopen, is
 * read by every job read, and is one of "user" and "admin" only. */
static void job_hold_is_stored_read_back_and_checked(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = storetest_open(e);
    struct store_job_insert ins = STORE_JOB_INSERT_INIT;
    ins.team = "ml", ins.state = "PENDING", ins.submit_ms = 7, ins.spec = "{}", ins.hold = "user";
    struct store_batch *b = store_batch_new();
    assert_int_equal(store_batch_job_insert(b, &ins), 0);
    int64_t held = 0;
    storetest_commit_expect(s, b, 0, &held, 1);
    int64_t free_job = storetest_add_job(s, "ml", "PENDING", 1);
    b = store_batch_new();
    assert_int_equal(store_batch_job_hold(b, free_job, "admin"), 0);
    storetest_commit_ok(s, b);
    b = store_batch_new();
    assert_int_equal(store_batch_job_hold(b, held, NULL), 0);
    storetest_commit_ok(s, b);
    storetest_close(s);

    s = storetest_open(e);
    struct store_job j;
    assert_int_equal(store_job_get(s, held, &j), 0);
    assert_null(j.hold);
    assert_int_equal(j.updated_ms, 7); /* a hold or release keeps the job's place */
    store_job_release(&j);
    char holds[2][8] = {"?", "?"};
    assert_int_equal(store_job_scan_active(s, scan_holds, holds), 0);
    assert_string_equal(holds[0], "");
    assert_string_equal(holds[1], "admin");

    b = store_batch_new();
    assert_int_equal(store_batch_job_hold(b, free_job, "someone"), 0);
    storetest_commit_expect(s, b, GPO_EINVAL, NULL, 0);
    b = store_batch_new();
    assert_int_equal(store_batch_job_hold(b, 999, "user"), 0);
    storetest_commit_expect(s, b, GPO_ENOENT, NULL, 0);
    storetest_close(s);
}

static void config_nodes_meta_and_sched_state_round_trip(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = storetest_open(e);
    static const uint8_t blob[] = {1, 0, 2, 0, 255};
    struct store_batch *b = store_batch_new();
    assert_int_equal(store_batch_config_put(b, STORE_CONFIG_TEAMS, "ml", "{\"gpus\":8}", 1), 0);
    assert_int_equal(store_batch_config_put(b, STORE_CONFIG_TEAMS, "cv", "{}", 1), 0);
    assert_int_equal(store_batch_config_put(b, STORE_CONFIG_POOLS, "h100", "{}", 2), 0);
    assert_int_equal(store_batch_config_put(b, STORE_CONFIG_PRIORITY_CLASSES, "urgent", "{}", 3),
                     0);
    assert_int_equal(store_batch_config_put(b, STORE_CONFIG_TEAMS, "ml", "{\"gpus\":16}", 4), 0);
    assert_int_equal(store_batch_node_put(b, "n2", "{}", "READY", 5), 0);
    assert_int_equal(store_batch_node_put(b, "n1", "{}", "DOWN", 6), 0);
    assert_int_equal(store_batch_meta_put(b, "admin_token_created", "yes"), 0);
    assert_int_equal(store_batch_sched_state_put(b, 1, blob, sizeof(blob), 7), 0);
    storetest_commit_ok(s, b);

    struct store_config c;
    assert_int_equal(store_config_get(s, STORE_CONFIG_TEAMS, "ml", &c), 0);
    assert_string_equal(c.spec, "{\"gpus\":16}");
    assert_int_equal(c.updated_ms, 4);
    store_config_release(&c);
    assert_int_equal(store_config_get(s, STORE_CONFIG_POOLS, "ml", &c), GPO_ENOENT);
    struct store_config *cs = NULL;
    size_t n = 0;
    assert_int_equal(store_config_list(s, STORE_CONFIG_TEAMS, &cs, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(cs[0].name, "cv");
    store_configs_free(cs, n);
    struct store_node *nodes = NULL;
    assert_int_equal(store_node_list(s, &nodes, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(nodes[0].name, "n1");
    assert_string_equal(nodes[0].state, "DOWN");
    store_nodes_free(nodes, n);
    char *v = NULL;
    assert_int_equal(store_meta_get(s, "admin_token_created", &v), 0);
    assert_string_equal(v, "yes");
    free(v);
    struct store_sched_state ss;
    assert_int_equal(store_sched_state_get(s, &ss), 0);
    assert_int_equal(ss.len, sizeof(blob));
    assert_memory_equal(ss.blob, blob, sizeof(blob));
    store_sched_state_release(&ss);

    b = store_batch_new();
    assert_int_equal(store_batch_config_delete(b, STORE_CONFIG_TEAMS, "ml"), 0);
    assert_int_equal(store_batch_sched_state_put(b, 2, NULL, 0, 8), 0);
    storetest_commit_ok(s, b);
    assert_int_equal(store_config_get(s, STORE_CONFIG_TEAMS, "ml", &c), GPO_ENOENT);
    assert_int_equal(store_sched_state_get(s, &ss), 0);
    assert_int_equal(ss.len, 0);
    assert_int_equal(ss.epoch, 2);
    store_sched_state_release(&ss);
    b = store_batch_new();
    assert_int_equal(store_batch_config_delete(b, STORE_CONFIG_TEAMS, "ml"), 0);
    storetest_commit_expect(s, b, GPO_ENOENT, NULL, 0);
    storetest_close(s);
}

static void bad_operations_are_refused_and_leave_the_batch_unchanged(void **state)
{
    (void)state;
    char longname[STORE_MAX_NAME + 2];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    struct store_batch *b = store_batch_new();
    struct store_job_insert j = STORE_JOB_INSERT_INIT;
    j.state = "PENDING", j.spec = "{}";
    assert_int_equal(store_batch_job_insert(b, &j), GPO_EINVAL); /* no team */
    j.team = longname;
    assert_int_equal(store_batch_job_insert(b, &j), GPO_EINVAL);
    j.team = "ml", j.idempotency_key = "k"; /* a key needs a user */
    assert_int_equal(store_batch_job_insert(b, &j), GPO_EINVAL);
    assert_int_equal(store_batch_user_put(b, "", NULL, NULL, "user", 1), GPO_EINVAL);
    assert_int_equal(store_batch_config_put(b, STORE_CONFIG_COUNT, "x", "{}", 1), GPO_EINVAL);
    assert_int_equal(store_batch_token_put(b, "alice", NULL, NULL, 1), GPO_EINVAL);
    assert_int_equal(store_batch_set_decision(b, 0), GPO_EINVAL);
    assert_int_equal(b->nops, 0);
    longname[STORE_MAX_NAME] = '\0'; /* exactly the cap is fine */
    assert_int_equal(store_batch_node_put(b, longname, "{}", "READY", 1), 0);
    assert_int_equal(b->nops, 1);
    store_batch_free(b);
    store_batch_free(NULL);
}

/* ---- close ------------------------------------------------------------------ */

struct closing {
    struct store *s;
    struct tally t;
    int ok;
    int late_rc; /* store_commit from a completion while the store closes */
};

static void closing_done(void *ctx, const struct store_result *r)
{
    struct closing *c = ctx;
    if (r->err == 0)
        c->ok++;
    if (c->late_rc == 1)
        c->late_rc = store_commit(c->s, storetest_job_batch("ml", "PENDING", 1, NULL), NULL, NULL);
    tally_add(&c->t);
}

static void close_commits_queued_batches_and_refuses_new_ones(void **state)
{
    struct tmpdb *e = *state;
    struct store *s = storetest_open(e);
    struct closing c = {.s = s, .late_rc = 1};
    tally_init(&c.t);
    store_pause_writer(s); /* close must override this */
    for (int k = 0; k < 10; k++)
        assert_int_equal(
            store_commit(s, storetest_job_batch("ml", "PENDING", 1, NULL), closing_done, &c), 0);
    store_close(s);
    assert_int_equal(c.t.done, 10); /* every completion ran before close returned */
    assert_int_equal(c.ok, 10);
    assert_int_equal(c.late_rc, GPO_ESHUTDOWN);
    tally_destroy(&c.t);

    s = storetest_open(e);
    assert_int_equal(storetest_count_jobs(s), 10);
    storetest_close(s);
    store_close(NULL);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, tmpdb_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(committed_job_and_attempts_survive_reopen),
        T(job_ids_increase_and_are_never_reused),
        T(paused_batches_commit_in_one_transaction),
        T(failing_batch_in_group_leaves_no_trace),
        T(big_group_with_a_failing_batch_commits_the_rest),
        T(big_batch_commits_whole_or_not_at_all),
        T(concurrent_writers_share_transactions),
        T(same_idempotency_key_returns_first_job),
        T(stale_epoch_is_fenced_and_changes_nothing),
        T(job_list_pages_return_each_match_once),
        T(array_submitted_in_one_batch_is_named_after_first_job),
        T(token_finds_user_and_user_delete_removes_tokens),
        T(scan_active_returns_unfinished_jobs_with_latest_attempt),
        T(job_hold_is_stored_read_back_and_checked),
        T(config_nodes_meta_and_sched_state_round_trip),
        T(bad_operations_are_refused_and_leave_the_batch_unchanged),
        T(close_commits_queued_batches_and_refuses_new_ones),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

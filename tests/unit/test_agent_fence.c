/* test_agent_fence.c - the agent's fence lease (agent/fence.h), on a clock
 * the test gives: no fence without a lease (an older controller); the
 * fence at the lease counted from the last answered heartbeat's send time,
 * not before, its hook on every round with the reason and the smaller
 * grace, the unfence hook once an answer comes; an answer sent before the
 * cut-off that comes late does not end it; the settings and the last answer
 * kept on disk, so that a restarted agent fences at the same deadline
 * (another boot's file counts from the start); a file that is not ours is
 * refused by name; the heartbeat timeout follows the lease. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>

#include "agent/fence.h"
#include "tmptree.h"
#include "base/banned.h"

struct env {
    char dir[64];
    /* what the hooks saw */
    int fences, unfences;
    char reason[128];
    int64_t unreached_ms, grace_ms, at_ms;
};

static void on_fence(void *arg, const char *reason, int64_t unreached_ms, int64_t grace_ms,
                     int64_t now_ms)
{
    struct env *e = arg;
    e->fences++;
    snprintf(e->reason, sizeof(e->reason), "%s", reason);
    e->unreached_ms = unreached_ms;
    e->grace_ms = grace_ms;
    e->at_ms = now_ms;
}

static void on_unfence(void *arg)
{
    ((struct env *)arg)->unfences++;
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    if (!e)
        return -1;
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_agent_fence.XXXXXX");
    if (!mkdtemp(e->dir))
        return -1;
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    tmptree_remove(e->dir);
    free(e);
    return 0;
}

static struct fence *open_fence(struct env *e, const char *boot, int64_t now_ms)
{
    struct fence_config cfg = {
        .dir = e->dir, .fence = on_fence, .unfence = on_unfence, .arg = e, .boot_id = boot};
    struct fence *f = NULL;
    char err[256] = "";
    int rc = fence_new(&cfg, now_ms, &f, err, sizeof(err));
    if (rc)
        fail_msg("fence_new: %d %s", rc, err);
    return f;
}

static void test_no_lease_never_fences(void **state)
{
    struct env *e = *state;
    struct fence *f = open_fence(e, "boot-a", 1000);
    /* No answer yet, and then an older controller's (no fields): 0. */
    for (int64_t t = 1000; t < 1000 + 86400000; t += 3600000)
        assert_int_equal(fence_check(f, t), 100);
    fence_set(f, 0, 0);
    assert_int_equal(fence_check(f, INT64_C(1) << 50), 100);
    assert_int_equal(e->fences, 0);
    assert_false(fence_active(f));
    assert_int_equal(fence_heartbeat_timeout(f), 10000);
    fence_free(f);
    /* With no lease ever, nothing is written. */
    char path[128];
    struct stat st;
    snprintf(path, sizeof(path), "%s/fence", e->dir);
    assert_int_not_equal(stat(path, &st), 0);
}

static void test_fences_at_the_lease_from_the_last_answer_and_ends_on_the_next(void **state)
{
    struct env *e = *state;
    struct fence *f = open_fence(e, "boot-a", 0);
    fence_set(f, 3000, 10000);
    fence_answered(f, 10000);
    fence_answered(f, 9000); /* an older one answered late: the later stays */
    assert_int_equal(fence_heartbeat_timeout(f), 1000); /* a quarter of 3 s, at least 1 s */
    /* Rounds until the deadline are due at it, 100 ms at most apart. */
    assert_int_equal(fence_check(f, 10000), 100);
    assert_int_equal(fence_check(f, 12950), 50);
    assert_int_equal(fence_check(f, 12999), 1);
    assert_int_equal(e->fences, 0);
    assert_false(fence_active(f));
    assert_int_equal(fence_check(f, 13000), 100);
    assert_true(fence_active(f));
    assert_int_equal(e->fences, 1);
    assert_string_equal(e->reason, "fenced: no controller reached for 3 s");
    assert_int_equal(e->unreached_ms, 3000);
    assert_int_equal(e->grace_ms, 10000);
    assert_int_equal(e->at_ms, 13000);
    /* Every round while fenced (the SIGKILLs due), with the first reason. */
    fence_check(f, 16500);
    assert_int_equal(e->fences, 2);
    assert_string_equal(e->reason, "fenced: no controller reached for 3 s");
    assert_int_equal(e->at_ms, 16500);
    /* A heartbeat sent before the fence, answered now, is too old. */
    fence_answered(f, 12000);
    fence_check(f, 16600);
    assert_true(fence_active(f));
    assert_int_equal(e->unfences, 0);
    /* One sent within the lease ends it, once. */
    fence_answered(f, 16550);
    fence_check(f, 16700);
    assert_false(fence_active(f));
    assert_int_equal(e->unfences, 1);
    assert_int_equal(e->fences, 3);
    fence_check(f, 16800);
    assert_int_equal(e->unfences, 1);
    /* The grace comes from the latest settings. */
    fence_set(f, 2000, 500);
    assert_int_equal(fence_heartbeat_timeout(f), 1000);
    fence_check(f, 16550 + 2000);
    assert_true(fence_active(f));
    assert_int_equal(e->grace_ms, 500);
    assert_string_equal(e->reason, "fenced: no controller reached for 2 s");
    /* An answer turning fencing off ends the fence too. */
    fence_set(f, 0, 0);
    fence_check(f, 20000);
    assert_false(fence_active(f));
    assert_int_equal(e->unfences, 2);
    fence_free(f);
}

static void test_a_restart_fences_at_the_same_deadline(void **state)
{
    struct env *e = *state;
    struct fence *f = open_fence(e, "boot-a", 0);
    fence_set(f, 5000, 2000);
    fence_answered(f, 40000);
    fence_answered(f, 40200); /* not yet FENCE_SAVE_EVERY_MS later: not written */
    fence_free(f);
    /* Restarted at 43000 while cut off: due at 45000 (the file's 40000 + 5000). */
    f = open_fence(e, "boot-a", 43000);
    assert_int_equal(fence_heartbeat_timeout(f), 1250); /* a quarter of the lease */
    fence_check(f, 44999);
    assert_int_equal(e->fences, 0);
    fence_check(f, 45000);
    assert_int_equal(e->fences, 1);
    assert_int_equal(e->grace_ms, 2000);
    assert_string_equal(e->reason, "fenced: no controller reached for 5 s");
    fence_free(f);
    /* After a reboot (no job survives one) the clock is another: from the start. */
    f = open_fence(e, "boot-b", 100);
    fence_check(f, 5099);
    assert_int_equal(e->fences, 1);
    fence_check(f, 5100);
    assert_int_equal(e->fences, 2);
    fence_free(f);
    /* A file from the future of this boot's clock also counts from the start. */
    f = open_fence(e, "boot-a", 10000);
    fence_check(f, 14999);
    assert_int_equal(e->fences, 2);
    fence_check(f, 15000);
    assert_int_equal(e->fences, 3);
    fence_free(f);
}

static void test_answers_are_written_every_quarter_second_and_settings_at_once(void **state)
{
    struct env *e = *state;
    struct fence *f = open_fence(e, "boot-a", 0);
    fence_set(f, 3000, 1000);
    for (int64_t t = 1000; t <= 2900; t += 200)
        fence_answered(f, t);
    fence_free(f);
    /* What is on disk is never later than the truth (2800), and less than
     * FENCE_SAVE_EVERY_MS (250) older: 1000, 1400, 1800, 2200, 2600 were
     * written, 2800 was not; due at 2600 + 3000. */
    f = open_fence(e, "boot-a", 3000);
    fence_check(f, 5599);
    assert_int_equal(e->fences, 0);
    fence_check(f, 5600);
    assert_int_equal(e->fences, 1);
    fence_set(f, 8000, 0); /* a change of settings is written at once */
    fence_free(f);
    f = open_fence(e, "boot-a", 3000);
    assert_int_equal(fence_heartbeat_timeout(f), 2000); /* the new lease read back */
    fence_check(f, 10599);                              /* 2600 + the new lease */
    assert_int_equal(e->fences, 1);
    fence_check(f, 10600);
    assert_int_equal(e->fences, 2);
    assert_int_equal(e->grace_ms, 0);
    fence_free(f);
}

static void test_a_file_that_is_not_ours_is_refused_by_name(void **state)
{
    struct env *e = *state;
    static const char *const bad[] = {
        "not json",
        "{\"lease_ms\": 3000, \"grace_ms\": 1000, \"boot_id\": \"b\"}",
        "{\"lease_ms\": -1, \"grace_ms\": 1000, \"boot_id\": \"b\", \"answered_ms\": 1}",
        "{\"lease_ms\": 3000, \"grace_ms\": 1000, \"boot_id\": 7, \"answered_ms\": 1}",
    };
    static const char *const why[] = {"", "answered_ms", "lease_ms", "boot_id"};
    char path[128];
    snprintf(path, sizeof(path), "%s/fence", e->dir);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        fputs(bad[i], fp);
        assert_int_equal(fclose(fp), 0);
        struct fence_config cfg = {.dir = e->dir, .boot_id = "b"};
        struct fence *f = NULL;
        char err[256] = "";
        assert_int_equal(fence_new(&cfg, 0, &f, err, sizeof(err)), GPO_ECORRUPT);
        assert_null(f);
        if (!strstr(err, path) || !strstr(err, why[i]))
            fail_msg("%s: '%s'", bad[i], err);
    }
}

static void test_the_thread_fences_on_the_real_clock(void **state)
{
    struct env *e = *state;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    struct fence *f = open_fence(e, "boot-a", now);
    fence_set(f, 1000, 0);
    assert_int_equal(fence_start(f), 0);
    /* The deadline is 1 s from now; wait for it, 5 s at most. */
    for (int k = 0; k < 500 && !fence_active(f); k++) {
        struct timespec pause = {0, 10 * 1000000};
        nanosleep(&pause, NULL);
    }
    assert_true(fence_active(f));
    fence_free(f); /* stops the thread */
    assert_true(e->fences >= 1);
    assert_true(e->unreached_ms >= 1000 && e->unreached_ms < 2000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_no_lease_never_fences, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_fences_at_the_lease_from_the_last_answer_and_ends_on_the_next, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_restart_fences_at_the_same_deadline, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_answers_are_written_every_quarter_second_and_settings_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_file_that_is_not_ours_is_refused_by_name, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_the_thread_fences_on_the_real_clock, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_agent_journal.c - the attempt journal: an attempt is begun at most
 * once, across close/reopen and compaction (which leaves only the journal,
 * mode 0600, behind); started and ended are recorded and read back, and so
 * is a replica's port; a torn last line (a crash mid-append) is dropped and
 * cut off, any other malformed line names the file and line; a second
 * opener is refused; process liveness by pid and start time, with pid reuse, zombies
 * and a comm holding parentheses. Journals live in a mkdtemp directory
 * removed at the end. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/journal.h"
#include "tmptree.h"
#include "base/banned.h"

struct env {
    char base[64];
    char dir[128]; /* this test's journal directory, under base */
    int seq;
};

static int group_setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    if (!e)
        return -1;
    snprintf(e->base, sizeof(e->base), "/tmp/test_agent_journal.XXXXXX");
    if (!mkdtemp(e->base))
        return -1;
    *state = e;
    return 0;
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    tmptree_remove(e->base);
    free(e);
    return 0;
}

/* Each test gets a fresh journal directory (not yet created). */
static int test_setup(void **state)
{
    struct env *e = *state;
    snprintf(e->dir, sizeof(e->dir), "%s/state%d", e->base, e->seq++);
    return 0;
}

static struct journal *open_ok(const struct env *e)
{
    struct journal *j = NULL;
    char err[512] = "";
    int rc = journal_open(e->dir, &j, err, sizeof(err));
    if (rc)
        print_error("journal_open: %s (%s)\n", gpo_strerror(rc), err);
    assert_int_equal(rc, 0);
    assert_non_null(j);
    return j;
}

static struct journal_attempt attempt(uint64_t job, uint32_t n)
{
    struct journal_attempt a = {.job = job, .attempt = n};
    snprintf(a.dir, sizeof(a.dir), "/var/lib/gpuorch/attempts/%llu.%u", (unsigned long long)job, n);
    return a;
}

static void begin_ok(struct journal *j, uint64_t job, uint32_t n)
{
    struct journal_attempt a = attempt(job, n);
    char err[256] = "";
    assert_int_equal(journal_begin(j, &a, err, sizeof(err)), 0);
}

static void journal_path(const struct env *e, char *buf, size_t len)
{
    snprintf(buf, len, "%s/journal", e->dir);
}

static void journal_open_creates_private_directory(void **state)
{
    struct env *e = *state;
    struct journal *j = open_ok(e);
    struct stat st;
    assert_int_equal(stat(e->dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    journal_close(j);
    journal_close(NULL);
}

static void journal_begin_twice_is_refused_also_after_reopen(void **state)
{
    struct env *e = *state;
    struct journal *j = open_ok(e);
    struct journal_attempt a = attempt(7, 1);
    char err[256];
    assert_int_equal(journal_begin(j, &a, err, sizeof(err)), 0);
    assert_int_equal(journal_begin(j, &a, err, sizeof(err)), GPO_EEXIST);
    /* Another attempt of the same job is a different launch. */
    begin_ok(j, 7, 2);
    journal_close(j);

    j = open_ok(e);
    assert_int_equal(journal_begin(j, &a, err, sizeof(err)), GPO_EEXIST);
    struct journal_attempt b = attempt(7, 2);
    assert_int_equal(journal_begin(j, &b, err, sizeof(err)), GPO_EEXIST);
    journal_close(j);
}

static void journal_begin_refuses_empty_and_overlong_dirs(void **state)
{
    struct env *e = *state;
    struct journal *j = open_ok(e);
    struct journal_attempt a = {.job = 1, .attempt = 1};
    assert_int_equal(journal_begin(j, &a, NULL, 0), GPO_EINVAL);
    memset(a.dir, 'x', sizeof(a.dir)); /* no NUL within the buffer */
    assert_int_equal(journal_begin(j, &a, NULL, 0), GPO_E2BIG);
    journal_close(j);
}

static void journal_started_and_ended_are_listed_after_reopen(void **state)
{
    struct env *e = *state;
    struct journal *j = open_ok(e);
    char err[256];
    begin_ok(j, 1, 1);
    begin_ok(j, 2, 1);
    begin_ok(j, 3, 1);
    assert_int_equal(journal_started(j, 1, 1, 4242, 99, err, sizeof(err)), 0);
    /* The same values again are a no-op, others are refused. */
    assert_int_equal(journal_started(j, 1, 1, 4242, 99, err, sizeof(err)), 0);
    assert_int_equal(journal_started(j, 1, 1, 4243, 99, err, sizeof(err)), GPO_EEXIST);
    assert_int_equal(journal_started(j, 9, 1, 1, 1, err, sizeof(err)), GPO_ENOENT);
    assert_int_equal(journal_ended(j, 2, 1, err, sizeof(err)), 0);
    assert_int_equal(journal_ended(j, 2, 1, err, sizeof(err)), 0);
    assert_int_equal(journal_ended(j, 9, 1, err, sizeof(err)), GPO_ENOENT);
    assert_int_equal(journal_started(j, 2, 1, 5, 5, err, sizeof(err)), GPO_ENOENT);
    journal_close(j);

    j = open_ok(e);
    struct journal_attempt *list = NULL;
    size_t n = 0;
    assert_int_equal(journal_list(j, &list, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(list[0].job, 1);
    assert_int_equal(list[0].pid, 4242);
    assert_int_equal(list[0].start_time, 99);
    assert_string_equal(list[0].dir, "/var/lib/gpuorch/attempts/1.1");
    assert_int_equal(list[1].job, 3);
    assert_int_equal(list[1].pid, 0);
    assert_int_equal(list[1].start_time, 0);
    free(list);
    journal_close(j);
}

static void journal_compaction_keeps_live_details_and_refuses_ended(void **state)
{
    struct env *e = *state;
    struct journal *j = open_ok(e);
    char err[256];
    for (uint32_t i = 1; i <= 20; i++)
        begin_ok(j, 5, i);
    assert_int_equal(journal_started(j, 5, 20, 77, 1234, err, sizeof(err)), 0);
    for (uint32_t i = 1; i < 20; i++)
        assert_int_equal(journal_ended(j, 5, i, err, sizeof(err)), 0);
    char path[256];
    journal_path(e, path, sizeof(path));
    struct stat before, after;
    assert_int_equal(stat(path, &before), 0);
    assert_int_equal(journal_compact(j, err, sizeof(err)), 0);
    assert_int_equal(stat(path, &after), 0);
    assert_true(after.st_size < before.st_size);
    /* Appends after compaction go to the new file. */
    begin_ok(j, 6, 1);
    journal_close(j);

    j = open_ok(e);
    struct journal_attempt a = attempt(5, 3);
    assert_int_equal(journal_begin(j, &a, err, sizeof(err)), GPO_EEXIST);
    struct journal_attempt *list = NULL;
    size_t n = 0;
    assert_int_equal(journal_list(j, &list, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(list[0].job, 5);
    assert_int_equal(list[0].attempt, 20);
    assert_int_equal(list[0].pid, 77);
    assert_int_equal(list[0].start_time, 1234);
    assert_int_equal(list[1].job, 6);
    free(list);
    journal_close(j);
}

/* The --signal record: once per attempt, kept across a reopen and a
 * compaction, refused for an attempt ended or never begun. */
static void journal_signalled_is_kept_across_reopen_and_compaction(void **state)
{
    struct env *e = *state;
    struct journal *j = open_ok(e);
    char err[256];
    begin_ok(j, 8, 1);
    begin_ok(j, 8, 2);
    begin_ok(j, 9, 1);
    assert_int_equal(journal_started(j, 8, 1, 55, 99, err, sizeof(err)), 0);
    assert_int_equal(journal_signalled(j, 8, 1, err, sizeof(err)), 0);
    assert_int_equal(journal_signalled(j, 8, 1, err, sizeof(err)), 0); /* once is enough */
    assert_int_equal(journal_signalled(j, 8, 2, err, sizeof(err)), 0); /* before started */
    assert_int_equal(journal_ended(j, 9, 1, err, sizeof(err)), 0);
    assert_int_equal(journal_signalled(j, 9, 1, err, sizeof(err)), GPO_ENOENT);
    assert_int_equal(journal_signalled(j, 10, 1, err, sizeof(err)), GPO_ENOENT);
    for (int round = 0; round < 2; round++) {
        journal_close(j);
        j = open_ok(e);
        struct journal_attempt *list = NULL;
        size_t n = 0;
        assert_int_equal(journal_list(j, &list, &n), 0);
        assert_int_equal(n, 2);
        assert_true(list[0].signalled && list[0].pid == 55 && list[0].start_time == 99);
        assert_true(list[1].signalled && list[1].pid == 0);
        free(list);
        assert_int_equal(journal_compact(j, err, sizeof(err)), 0);
    }
    begin_ok(j, 11, 1);
    struct journal_attempt *list = NULL;
    size_t n = 0;
    assert_int_equal(journal_list(j, &list, &n), 0);
    assert_int_equal(n, 3);
    assert_false(list[2].signalled);
    free(list);
    journal_close(j);
}

/* The fence record: once per attempt, with how long no controller had
 * been reached, kept across a reopen and a compaction; refused for an
 * attempt ended or never begun, and for no time unreached. */
static void journal_fenced_is_kept_across_reopen_and_compaction(void **state)
{
    struct env *e = *state;
    struct journal *j = open_ok(e);
    char err[256];
    begin_ok(j, 20, 1);
    begin_ok(j, 21, 1);
    begin_ok(j, 22, 1);
    assert_int_equal(journal_started(j, 20, 1, 60, 7, err, sizeof(err)), 0);
    assert_int_equal(journal_fenced(j, 20, 1, 3100, err, sizeof(err)), 0);
    assert_int_equal(journal_fenced(j, 20, 1, 9999, err, sizeof(err)), 0); /* the first stays */
    assert_int_equal(journal_ended(j, 22, 1, err, sizeof(err)), 0);
    assert_int_equal(journal_fenced(j, 22, 1, 3100, err, sizeof(err)), GPO_ENOENT);
    assert_int_equal(journal_fenced(j, 23, 1, 3100, err, sizeof(err)), GPO_ENOENT);
    assert_int_equal(journal_fenced(j, 21, 1, 0, err, sizeof(err)), GPO_EINVAL);
    for (int round = 0; round < 2; round++) {
        journal_close(j);
        j = open_ok(e);
        struct journal_attempt *list = NULL;
        size_t n = 0;
        assert_int_equal(journal_list(j, &list, &n), 0);
        assert_int_equal(n, 2);
        assert_true(list[0].fenced && list[0].unreached_ms == 3100 && list[0].pid == 60);
        assert_false(list[1].fenced);
        assert_int_equal(list[1].unreached_ms, 0);
        free(list);
        assert_int_equal(journal_compact(j, err, sizeof(err)), 0);
    }
    /* Reported: it leaves the list, fenced or not. */
    assert_int_equal(journal_ended(j, 20, 1, err, sizeof(err)), 0);
    struct journal_attempt *list = NULL;
    size_t n = 0;
    assert_int_equal(journal_list(j, &list, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(list[0].job, 21);
    free(list);
    journal_close(j);
}

/* A serving replica's port, begun with it, reads back across a reopen and a
 * compaction; one out of range is refused before anything is written. */
static void journal_replica_port_is_kept_across_reopen_and_compaction(void **state)
{
    struct env *e = *state;
    struct journal *j = open_ok(e);
    char err[256];
    struct journal_attempt a = attempt(12, 1);
    a.port = 41234;
    assert_int_equal(journal_begin(j, &a, err, sizeof(err)), 0);
    begin_ok(j, 13, 1);
    assert_int_equal(journal_started(j, 12, 1, 77, 5, err, sizeof(err)), 0);
    struct journal_attempt bad = attempt(14, 1);
    bad.port = 65536;
    assert_int_equal(journal_begin(j, &bad, err, sizeof(err)), GPO_EINVAL);
    for (int round = 0; round < 2; round++) {
        journal_close(j);
        j = open_ok(e);
        struct journal_attempt *list = NULL;
        size_t n = 0;
        assert_int_equal(journal_list(j, &list, &n), 0);
        assert_int_equal(n, 2);
        assert_int_equal(list[0].port, 41234);
        assert_int_equal(list[0].pid, 77);
        assert_int_equal(list[1].port, 0);
        free(list);
        assert_int_equal(journal_compact(j, err, sizeof(err)), 0);
    }
    journal_close(j);
}

static void journal_compaction_leaves_only_the_private_journal(void **state)
{
    struct env *e = *state;
    struct journal *j = open_ok(e);
    char err[256];
    begin_ok(j, 8, 1);
    assert_int_equal(journal_ended(j, 8, 1, err, sizeof(err)), 0);
    mode_t old = umask(0);
    assert_int_equal(journal_compact(j, err, sizeof(err)), 0);
    umask(old);
    char path[256];
    journal_path(e, path, sizeof(path));
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    /* No temporary file stays: the journal and its lock only. */
    DIR *d = opendir(e->dir);
    assert_non_null(d);
    size_t n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        assert_true(strcmp(de->d_name, "journal") == 0 || strcmp(de->d_name, "journal.lock") == 0);
        n++;
    }
    closedir(d);
    assert_int_equal(n, 2);
    journal_close(j);
}

static void journal_list_after_crash_ignores_torn_last_line(void **state)
{
    struct env *e = *state;
    struct journal *j = open_ok(e);
    begin_ok(j, 1, 1);
    begin_ok(j, 2, 1);
    journal_close(j);
    /* A kill -9 in the middle of the second append. */
    char path[256];
    journal_path(e, path, sizeof(path));
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size - 7), 0);

    j = open_ok(e);
    struct journal_attempt *list = NULL;
    size_t n = 0;
    assert_int_equal(journal_list(j, &list, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(list[0].job, 1);
    free(list);
    /* The torn begin never returned, so that attempt was never launched. */
    begin_ok(j, 2, 1);
    begin_ok(j, 3, 1);
    journal_close(j);

    /* The torn bytes were cut off: the appends above read back cleanly. */
    j = open_ok(e);
    assert_int_equal(journal_list(j, &list, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(list[1].job, 2);
    assert_int_equal(list[2].job, 3);
    free(list);
    journal_close(j);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void journal_malformed_line_names_file_and_line(void **state)
{
    struct env *e = *state;
    struct journal *j = open_ok(e);
    journal_close(j);
    char path[256], err[512] = "", want[300];
    journal_path(e, path, sizeof(path));
    const char *cases[] = {
        "{\"op\":\"begin\",\"job\":1,\"attempt\":1,\"dir\":\"/a\"}\nnot json\n"
        "{\"op\":\"ended\",\"job\":1,\"attempt\":1}\n",
        "{\"op\":\"begin\",\"job\":1,\"attempt\":1,\"dir\":\"/a\"}\n"
        "{\"op\":\"begin\",\"job\":1,\"attempt\":1,\"dir\":\"/a\"}\n",
        "{\"op\":\"begin\",\"job\":1,\"attempt\":1,\"dir\":\"/a\"}\n"
        "{\"op\":\"started\",\"job\":2,\"attempt\":1,\"pid\":3,\"start_time\":4}\n",
        "{\"op\":\"begin\",\"job\":1,\"attempt\":1,\"dir\":\"/a\"}\n{\"op\":\"launch\"}\n",
    };
    snprintf(want, sizeof(want), "%s:2: ", path);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_file(path, cases[i]);
        j = (struct journal *)0x1;
        assert_int_equal(journal_open(e->dir, &j, err, sizeof(err)), GPO_ECORRUPT);
        assert_ptr_equal(j, (struct journal *)0x1); /* untouched on failure */
        assert_non_null(strstr(err, want));
    }
}

static void journal_second_open_is_refused_while_held(void **state)
{
    struct env *e = *state;
    struct journal *j = open_ok(e);
    struct journal *k = NULL;
    char err[512];
    assert_int_equal(journal_open(e->dir, &k, err, sizeof(err)), GPO_EBUSY);
    assert_null(k);
    journal_close(j);
    k = open_ok(e);
    journal_close(k);
}

static void journal_alive_checks_pid_and_start_time(void **state)
{
    (void)state;
    struct journal_attempt self = {.pid = getpid()};
    assert_int_equal(journal_proc_start_time(getpid(), &self.start_time), 0);
    assert_true(journal_attempt_alive(&self));
    /* Field 22 of /proc/PID/stat (starttime), not its neighbour itrealvalue
     * (always 0): this process started some ticks after boot, and it is what
     * /proc says, read here another way (the fields after the last ')'). */
    assert_true(self.start_time > 0);
    FILE *f = fopen("/proc/self/stat", "r");
    assert_non_null(f);
    char buf[1024];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')') + 2; /* field 3 */
    unsigned long long want = 0;
    for (int field = 3; field < 22; field++)
        p = strchr(p, ' ') + 1;
    want = strtoull(p, NULL, 10);
    assert_int_equal(self.start_time, want);
    /* The same pid with another start time is a reused pid. */
    struct journal_attempt reused = self;
    reused.start_time++;
    assert_false(journal_attempt_alive(&reused));

    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0)
        _exit(0);
    struct journal_attempt dead = {.pid = child};
    /* Until reaped it is a zombie: it has exited, so it is not alive. */
    siginfo_t si;
    assert_int_equal(waitid(P_PID, (id_t)child, &si, WEXITED | WNOWAIT), 0);
    assert_int_equal(journal_proc_start_time(child, &dead.start_time), 0);
    assert_false(journal_attempt_alive(&dead));
    assert_int_equal(waitpid(child, NULL, 0), child);
    uint64_t t;
    assert_int_equal(journal_proc_start_time(child, &t), GPO_ENOENT);
    assert_false(journal_attempt_alive(&dead));

    struct journal_attempt none = {0};
    assert_false(journal_attempt_alive(&none));
    assert_int_equal(journal_proc_start_time(0, &t), GPO_EINVAL);
}

static void journal_start_time_parses_comm_with_parentheses(void **state)
{
    (void)state;
    int ready[2], hold[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(hold), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        char c = 0;
        prctl(PR_SET_NAME, "a) b (c) d", 0, 0, 0);
        close(hold[1]);
        if (write(ready[1], &c, 1) != 1)
            _exit(1);
        while (read(hold[0], &c, 1) < 0 && errno == EINTR)
            ;
        _exit(0);
    }
    close(ready[1]);
    close(hold[0]);
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    uint64_t mine, theirs;
    assert_int_equal(journal_proc_start_time(getpid(), &mine), 0);
    assert_int_equal(journal_proc_start_time(child, &theirs), 0);
    assert_true(theirs >= mine);
    struct journal_attempt a = {.pid = child, .start_time = theirs};
    assert_true(journal_attempt_alive(&a));
    close(hold[1]); /* lets the child exit */
    close(ready[0]);
    assert_int_equal(waitpid(child, NULL, 0), child);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(journal_open_creates_private_directory, test_setup),
        cmocka_unit_test_setup(journal_begin_twice_is_refused_also_after_reopen, test_setup),
        cmocka_unit_test_setup(journal_begin_refuses_empty_and_overlong_dirs, test_setup),
        cmocka_unit_test_setup(journal_started_and_ended_are_listed_after_reopen, test_setup),
        cmocka_unit_test_setup(journal_compaction_keeps_live_details_and_refuses_ended, test_setup),
        cmocka_unit_test_setup(journal_compaction_leaves_only_the_private_journal, test_setup),
        cmocka_unit_test_setup(journal_signalled_is_kept_across_reopen_and_compaction, test_setup),
        cmocka_unit_test_setup(journal_fenced_is_kept_across_reopen_and_compaction, test_setup),
        cmocka_unit_test_setup(journal_replica_port_is_kept_across_reopen_and_compaction,
                               test_setup),
        cmocka_unit_test_setup(journal_list_after_crash_ignores_torn_last_line, test_setup),
        cmocka_unit_test_setup(journal_malformed_line_names_file_and_line, test_setup),
        cmocka_unit_test_setup(journal_second_open_is_refused_while_held, test_setup),
        cmocka_unit_test_setup(journal_alive_checks_pid_and_start_time, test_setup),
        cmocka_unit_test_setup(journal_start_time_parses_comm_with_parentheses, test_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

/* test_util_fsutil.c - writing files whole: write_all through short writes
 * and signals, and the atomic write (mode, content, no temporary file left,
 * replace or refuse an existing name, failures named), also the one whose
 * file stays open. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fsutil.h"
#include "tmptree.h"
#include "base/banned.h"

#define BIG (1u << 20) /* bytes through a pipe that holds far fewer */

struct env {
    char dir[64];
};

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    snprintf(e->dir, sizeof(e->dir), "/tmp/gpuorch-test-fsutil-XXXXXX");
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

static size_t count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    size_t n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    if (d)
        closedir(d);
    return n;
}

static void read_back(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* ---- write_all ---- */

struct writer {
    int fd, rc;
    unsigned char *data;
};

static void *write_thread(void *arg)
{
    struct writer *w = arg;
    w->rc = fsutil_write_all(w->fd, w->data, BIG);
    close(w->fd);
    return NULL;
}

static void on_usr1(int sig)
{
    (void)sig;
}

static void write_all_goes_on_after_short_writes_and_signals(void **state)
{
    (void)state;
    /* Signals without SA_RESTART: a write blocked on the full pipe returns
     * early, short or with EINTR, and write_all must take up where it was. */
    struct sigaction sa = {.sa_handler = on_usr1}, old;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
    int p[2];
    assert_int_equal(pipe(p), 0);
    struct writer w = {.fd = p[1], .data = malloc(BIG)};
    assert_non_null(w.data);
    for (size_t k = 0; k < BIG; k++)
        w.data[k] = (unsigned char)(k * 7 + k / 251);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, write_thread, &w), 0);
    unsigned char *got = malloc(BIG), chunk[4096];
    size_t n = 0;
    for (;;) {
        pthread_kill(t, SIGUSR1);
        ssize_t r = read(p[0], chunk, sizeof(chunk));
        if (r < 0 && errno == EINTR)
            continue;
        assert_true(r >= 0);
        if (r == 0)
            break;
        assert_true(n + (size_t)r <= BIG);
        memcpy(got + n, chunk, (size_t)r);
        n += (size_t)r;
    }
    pthread_join(t, NULL);
    close(p[0]);
    sigaction(SIGUSR1, &old, NULL);
    assert_int_equal(w.rc, 0);
    assert_int_equal(n, BIG);
    assert_memory_equal(got, w.data, BIG);
    free(got);
    free(w.data);
}

static void write_all_returns_the_errno_of_a_failed_write(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    int p[2];
    assert_int_equal(pipe(p), 0);
    close(p[0]);
    assert_int_equal(fsutil_write_all(p[1], "x", 1), -EPIPE);
    close(p[1]);
    assert_int_equal(fsutil_write_all(p[1], "x", 1), -EBADF);
    assert_int_equal(fsutil_write_all(p[1], "", 0), 0); /* nothing to write: no call */
}

/* ---- the atomic write ---- */

static void write_atomic_gives_the_name_the_whole_file_with_its_mode(void **state)
{
    struct env *e = *state;
    char path[128], buf[64], err[256];
    snprintf(path, sizeof(path), "%s/report.html", e->dir);
    mode_t old = umask(077);
    assert_int_equal(fsutil_write_atomic(path, "one\n", 4, 0644, 0, err, sizeof(err)), 0);
    umask(old);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0644); /* the umask does not apply */
    read_back(path, buf, sizeof(buf));
    assert_string_equal(buf, "one\n");
    /* Again: the name is replaced whole, and no temporary file stays. */
    assert_int_equal(fsutil_write_atomic(path, "two", 3, 0600, 0, err, sizeof(err)), 0);
    read_back(path, buf, sizeof(buf));
    assert_string_equal(buf, "two");
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(count_entries(e->dir), 1);
}

static void write_atomic_excl_never_replaces_a_name(void **state)
{
    struct env *e = *state;
    char path[128], buf[64], err[256];
    snprintf(path, sizeof(path), "%s/admin.token", e->dir);
    assert_int_equal(fsutil_write_atomic(path, "first", 5, 0600, FSUTIL_EXCL, err, sizeof(err)), 0);
    assert_int_equal(fsutil_write_atomic(path, "second", 6, 0600, FSUTIL_EXCL, err, sizeof(err)),
                     GPO_EEXIST);
    assert_non_null(strstr(err, "link "));
    assert_non_null(strstr(err, path));
    read_back(path, buf, sizeof(buf));
    assert_string_equal(buf, "first");
    assert_int_equal(count_entries(e->dir), 1);
}

static void write_atomic_failures_name_the_path_and_leave_nothing(void **state)
{
    struct env *e = *state;
    char path[160], err[256] = "";
    snprintf(path, sizeof(path), "%s/no/such/dir/f", e->dir);
    assert_int_equal(fsutil_write_atomic(path, "x", 1, 0644, 0, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "create "));
    assert_non_null(strstr(err, "/no/such/dir/f.tmp."));
    assert_non_null(strstr(err, "No such file or directory"));
    assert_int_equal(fsutil_write_atomic(NULL, "x", 1, 0644, 0, err, sizeof(err)), GPO_EINVAL);
    assert_int_equal(fsutil_write_atomic("", "x", 1, 0644, 0, err, sizeof(err)), GPO_EINVAL);
    /* A directory where the name should go: rename fails, the temporary goes. */
    snprintf(path, sizeof(path), "%s/taken", e->dir);
    assert_int_equal(mkdir(path, 0700), 0);
    char inside[200];
    snprintf(inside, sizeof(inside), "%s/taken/x", e->dir);
    FILE *f = fopen(inside, "w");
    assert_non_null(f);
    fclose(f);
    assert_true(fsutil_write_atomic(path, "x", 1, 0644, 0, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "rename "));
    assert_int_equal(count_entries(e->dir), 1);
}

static void a_stream_is_committed_or_aborted_whole(void **state)
{
    struct env *e = *state;
    char path[128], buf[64], err[256];
    snprintf(path, sizeof(path), "%s/jobs.csv", e->dir);
    struct fsutil_atomic a;
    assert_int_equal(fsutil_atomic_begin(&a, path, 0644, 0, err, sizeof(err)), 0);
    FILE *f = fsutil_atomic_stream(&a);
    assert_non_null(f);
    assert_ptr_equal(fsutil_atomic_stream(&a), f); /* the same one */
    fprintf(f, "a,%d\n", 1);
    assert_int_equal(access(path, F_OK), -1); /* not there before the commit */
    assert_int_equal(fsutil_atomic_commit(&a, err, sizeof(err)), 0);
    read_back(path, buf, sizeof(buf));
    assert_string_equal(buf, "a,1\n");
    assert_null(a.tmp);
    assert_int_equal(a.fd, -1);
    assert_int_equal(fsutil_atomic_commit(&a, err, sizeof(err)), GPO_EINVAL); /* released */

    /* Aborted: the old file stays, the temporary goes. */
    assert_int_equal(fsutil_atomic_begin(&a, path, 0644, 0, err, sizeof(err)), 0);
    fputs("half", fsutil_atomic_stream(&a));
    fsutil_atomic_abort(&a);
    fsutil_atomic_abort(&a); /* twice is fine */
    read_back(path, buf, sizeof(buf));
    assert_string_equal(buf, "a,1\n");
    assert_int_equal(count_entries(e->dir), 1);
    struct fsutil_atomic zero = {0};
    fsutil_atomic_abort(&zero);
    fsutil_atomic_abort(NULL);
}

static size_t open_fds(void)
{
    return count_entries("/proc/self/fd");
}

static void commit_keep_leaves_the_named_file_open_at_its_end(void **state)
{
    struct env *e = *state;
    char path[128], buf[64], err[256];
    snprintf(path, sizeof(path), "%s/journal", e->dir);
    struct fsutil_atomic a;
    assert_int_equal(fsutil_atomic_begin(&a, path, 0600, 0, err, sizeof(err)), 0);
    assert_int_equal(fsutil_write_all(a.fd, "one\n", 4), 0);
    int fd = -2;
    assert_int_equal(fsutil_atomic_commit_keep(&a, &fd, err, sizeof(err)), 0);
    assert_true(fd >= 0);
    assert_null(a.tmp);
    read_back(path, buf, sizeof(buf));
    assert_string_equal(buf, "one\n");
    /* The descriptor is the file under the name, close-on-exec, at its end. */
    struct stat named, held;
    assert_int_equal(stat(path, &named), 0);
    assert_int_equal(fstat(fd, &held), 0);
    assert_true(named.st_ino == held.st_ino && named.st_dev == held.st_dev);
    assert_int_equal(named.st_mode & 07777, 0600);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    assert_int_equal(fsutil_write_all(fd, "two\n", 4), 0);
    close(fd);
    read_back(path, buf, sizeof(buf));
    assert_string_equal(buf, "one\ntwo\n");
    assert_int_equal(count_entries(e->dir), 1);

    /* Through a stream: what it buffered is in, and the descriptor outlives it. */
    assert_int_equal(fsutil_atomic_begin(&a, path, 0600, 0, err, sizeof(err)), 0);
    fputs("three\n", fsutil_atomic_stream(&a));
    assert_int_equal(fsutil_atomic_commit_keep(&a, &fd, err, sizeof(err)), 0);
    assert_int_equal(fsutil_write_all(fd, "four\n", 5), 0);
    close(fd);
    read_back(path, buf, sizeof(buf));
    assert_string_equal(buf, "three\nfour\n");
    assert_int_equal(count_entries(e->dir), 1);
}

static void commit_keep_that_fails_keeps_nothing_open(void **state)
{
    struct env *e = *state;
    char path[128], inside[160], err[256] = "";
    snprintf(path, sizeof(path), "%s/taken", e->dir);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(inside, sizeof(inside), "%s/taken/x", e->dir);
    FILE *f = fopen(inside, "w");
    assert_non_null(f);
    fclose(f);
    size_t before = open_fds();
    struct fsutil_atomic a;
    assert_int_equal(fsutil_atomic_begin(&a, path, 0600, 0, err, sizeof(err)), 0);
    assert_int_equal(fsutil_write_all(a.fd, "x", 1), 0);
    int fd = -2;
    assert_true(fsutil_atomic_commit_keep(&a, &fd, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "rename "));
    assert_int_equal(fd, -2); /* untouched */
    assert_int_equal(open_fds(), before);
    assert_int_equal(count_entries(e->dir), 1);
    assert_int_equal(fsutil_atomic_commit_keep(&a, &fd, err, sizeof(err)), GPO_EINVAL);
    assert_int_equal(fd, -2);
}

static void fsync_dir_finds_the_directory_of_a_path(void **state)
{
    struct env *e = *state;
    char path[128];
    snprintf(path, sizeof(path), "%s/anything", e->dir);
    assert_int_equal(fsutil_fsync_dir(path), 0);
    assert_int_equal(fsutil_fsync_dir("bare-name"), 0); /* the current directory */
    assert_int_equal(fsutil_fsync_dir("/top"), 0);      /* the root */
    snprintf(path, sizeof(path), "%s/missing/x", e->dir);
    assert_int_equal(fsutil_fsync_dir(path), -ENOENT);
    assert_int_equal(fsutil_fsync_dir(""), GPO_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(write_all_goes_on_after_short_writes_and_signals),
        cmocka_unit_test(write_all_returns_the_errno_of_a_failed_write),
        cmocka_unit_test_setup_teardown(write_atomic_gives_the_name_the_whole_file_with_its_mode,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(write_atomic_excl_never_replaces_a_name, setup, teardown),
        cmocka_unit_test_setup_teardown(write_atomic_failures_name_the_path_and_leave_nothing,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(a_stream_is_committed_or_aborted_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(commit_keep_leaves_the_named_file_open_at_its_end, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(commit_keep_that_fails_keeps_nothing_open, setup, teardown),
        cmocka_unit_test_setup_teardown(fsync_dir_finds_the_directory_of_a_path, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

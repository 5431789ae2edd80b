/* test_agent_shim.c - `gpuorch shim`, run through shim_main in a forked
 * child: exit codes and killing signals are recorded, a missing program gives
 * 127 and the execvp error, SIGTERM to the shim reaches the command's whole
 * process group, the status and pid files appear only by rename (watched with
 * inotify), the shim keeps running and reports after its parent dies, output
 * goes to the attempt's files, environment and working directory pass through,
 * no stray descriptor reaches the command, and bad usage or bad status files
 * are refused. The test process is a child subreaper, so orphaned shims and
 * grandchildren are reaped here. No timing assertions: waits poll with a
 * deadline that only guards against a hang. Files live in a mkdtemp directory
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
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/shim.h"
#include "util/banned.h"

/* Guards against a hang only; nothing asserts how long anything takes. */
#define DEADLINE_S 60

struct env {
    char base[64];
    char dir[128]; /* this test's attempt directory */
    int seq;
};

static int group_setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    if (!e || prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
        return -1;
    snprintf(e->base, sizeof(e->base), "/tmp/test_agent_shim.XXXXXX");
    if (!mkdtemp(e->base))
        return -1;
    *state = e;
    return 0;
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        char path[600];
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (unlink(path) < 0)
            remove_tree(path);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    remove_tree(e->base);
    free(e);
    return 0;
}

static int test_setup(void **state)
{
    struct env *e = *state;
    snprintf(e->dir, sizeof(e->dir), "%s/attempt%d", e->base, e->seq++);
    return mkdir(e->dir, 0700);
}

static void sleep_a_little(void)
{
    struct timespec ts = {.tv_nsec = 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

static time_t deadline(void)
{
    return time(NULL) + DEADLINE_S;
}

/* Forks a child that runs shim_main(shim --dir DIR [extra...] -- cmd...). */
static pid_t spawn_shim(const char *dir, const char *const *extra, const char *const *cmd)
{
    const char *argv[32];
    int argc = 0;
    argv[argc++] = "shim";
    argv[argc++] = "--dir";
    argv[argc++] = dir;
    for (; extra && *extra; extra++)
        argv[argc++] = *extra;
    argv[argc++] = "--";
    for (; *cmd; cmd++)
        argv[argc++] = *cmd;
    argv[argc] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(shim_main(argc, (char **)argv));
    return pid;
}

/* Waits for `pid` (a child, or an orphan reparented to this subreaper). */
static int wait_for(pid_t pid)
{
    time_t end = deadline();
    int st;
    pid_t r;
    while ((r = waitpid(pid, &st, WNOHANG)) == 0 && time(NULL) < end)
        sleep_a_little();
    if (r == 0)
        kill(pid, SIGKILL);
    assert_int_equal(r, pid);
    return st;
}

static int run_shim(const char *dir, const char *const *cmd)
{
    int st = wait_for(spawn_shim(dir, NULL, cmd));
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static void read_status_ok(const char *dir, struct shim_status *s)
{
    char err[512] = "";
    int rc = shim_read_status(dir, s, err, sizeof(err));
    if (rc)
        print_error("shim_read_status: %s (%s)\n", shim_strerror(rc), err);
    assert_int_equal(rc, 0);
}

static long read_number(const char *path)
{
    char buf[64] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    return strtol(buf, NULL, 10);
}

static void read_text(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

static void join(char *buf, size_t len, const char *dir, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

static void shim_records_exit_codes_zero_and_three(void **state)
{
    struct env *e = *state;
    const char *ok[] = {"true", NULL};
    assert_int_equal(run_shim(e->dir, ok), 0);
    struct shim_status s;
    read_status_ok(e->dir, &s);
    assert_false(s.signaled);
    assert_int_equal(s.exit_code, 0);
    assert_string_equal(s.error, "");
    assert_true(s.pid > 0);
    assert_true(s.started_ms > 0 && s.started_ms <= s.ended_ms);
    char path[256];
    join(path, sizeof(path), e->dir, "pid");
    assert_int_equal(read_number(path), s.pid);

    const char *three[] = {"sh", "-c", "exit 3", NULL};
    assert_int_equal(run_shim(e->dir, three), 3);
    read_status_ok(e->dir, &s);
    assert_false(s.signaled);
    assert_int_equal(s.exit_code, 3);
}

static void shim_records_killing_signal(void **state)
{
    struct env *e = *state;
    const char *cmd[] = {"sh", "-c", "kill -KILL $$", NULL};
    assert_int_equal(run_shim(e->dir, cmd), 128 + SIGKILL);
    struct shim_status s;
    read_status_ok(e->dir, &s);
    assert_true(s.signaled);
    assert_int_equal(s.signal, SIGKILL);
}

static void shim_exec_of_missing_program_gives_127_and_error(void **state)
{
    struct env *e = *state;
    const char *cmd[] = {"gpuorch-no-such-program", "arg", NULL};
    assert_int_equal(run_shim(e->dir, cmd), 127);
    struct shim_status s;
    read_status_ok(e->dir, &s);
    assert_false(s.signaled);
    assert_int_equal(s.exit_code, 127);
    assert_string_equal(s.error, "execvp gpuorch-no-such-program: No such file or directory");
}

static void wait_for_file(const char *path)
{
    time_t end = deadline();
    while (access(path, F_OK) != 0 && time(NULL) < end)
        sleep_a_little();
    assert_int_equal(access(path, F_OK), 0);
}

static void shim_forwards_sigterm_to_command_group(void **state)
{
    struct env *e = *state;
    char script[1024], bgpid[256];
    join(bgpid, sizeof(bgpid), e->dir, "bg.pid");
    /* A background grandchild: only a signal to the group reaches it. */
    snprintf(script, sizeof(script), "sleep 1000 & echo $! > %s.tmp && mv %s.tmp %s; wait", bgpid,
             bgpid, bgpid);
    const char *cmd[] = {"sh", "-c", script, NULL};
    pid_t shim = spawn_shim(e->dir, NULL, cmd);
    wait_for_file(bgpid);
    pid_t bg = (pid_t)read_number(bgpid);
    assert_int_equal(kill(shim, SIGTERM), 0);
    int st = wait_for(shim);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 128 + SIGTERM);
    struct shim_status s;
    read_status_ok(e->dir, &s);
    assert_true(s.signaled);
    assert_int_equal(s.signal, SIGTERM);
    /* The orphaned sleep was reparented to this subreaper: reap it. */
    st = wait_for(bg);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGTERM);
}

/* Every inotify event on `name` in the queue, as a mask. */
static uint32_t events_on(int fd, const char *name)
{
    uint32_t mask = 0;
    char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        for (char *p = buf; p < buf + n;) {
            struct inotify_event ev;
            memcpy(&ev, p, sizeof(ev));
            if (ev.len > 0 && strcmp(p + offsetof(struct inotify_event, name), name) == 0)
                mask |= ev.mask;
            p += sizeof(struct inotify_event) + ev.len;
        }
    }
    return mask;
}

static void shim_status_and_pid_appear_only_by_rename(void **state)
{
    struct env *e = *state;
    const uint32_t watch = IN_CREATE | IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO;
    int fds[2];
    for (int i = 0; i < 2; i++) {
        fds[i] = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        assert_true(fds[i] >= 0);
        assert_true(inotify_add_watch(fds[i], e->dir, watch) >= 0);
    }
    const char *cmd[] = {"sh", "-c", "exit 5", NULL};
    assert_int_equal(run_shim(e->dir, cmd), 5);
    assert_int_equal(events_on(fds[0], "status"), IN_MOVED_TO);
    assert_int_equal(events_on(fds[1], "pid"), IN_MOVED_TO);
    close(fds[0]);
    close(fds[1]);
    char path[256];
    join(path, sizeof(path), e->dir, "status.tmp");
    assert_int_equal(access(path, F_OK), -1);
    join(path, sizeof(path), e->dir, "pid.tmp");
    assert_int_equal(access(path, F_OK), -1);
}

static void shim_survives_its_parents_death(void **state)
{
    struct env *e = *state;
    char fifo[256], script[1024];
    join(fifo, sizeof(fifo), e->dir, "go");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    snprintf(script, sizeof(script), "read line < %s; exit 4", fifo);
    const char *cmd[] = {"sh", "-c", script, NULL};
    int report[2];
    assert_int_equal(pipe(report), 0);
    pid_t parent = fork();
    assert_true(parent >= 0);
    if (parent == 0) {
        pid_t shim = spawn_shim(e->dir, NULL, cmd);
        _exit(write(report[1], &shim, sizeof(shim)) == sizeof(shim) ? 0 : 1);
    }
    close(report[1]);
    pid_t shim = 0;
    assert_int_equal(read(report[0], &shim, sizeof(shim)), sizeof(shim));
    close(report[0]);
    int st = wait_for(parent);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* The parent is gone; the command still waits on the FIFO. Opening it
     * returns once the command opened it, so the shim has called setsid. */
    int fd = open(fifo, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(getsid(shim), shim);
    assert_int_equal(write(fd, "go\n", 3), 3);
    close(fd);
    st = wait_for(shim);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 4);
    struct shim_status s;
    read_status_ok(e->dir, &s);
    assert_int_equal(s.exit_code, 4);
}

static void shim_writes_output_to_attempt_files(void **state)
{
    struct env *e = *state;
    /* cat returns at once: stdin is /dev/null, not the caller's. */
    const char *cmd[] = {"sh", "-c", "echo out; echo err >&2; cat", NULL};
    assert_int_equal(run_shim(e->dir, cmd), 0);
    assert_int_equal(run_shim(e->dir, cmd), 0);
    char path[256], text[256];
    join(path, sizeof(path), e->dir, "stdout");
    read_text(path, text, sizeof(text));
    assert_string_equal(text, "out\nout\n"); /* appended, not truncated */
    join(path, sizeof(path), e->dir, "stderr");
    read_text(path, text, sizeof(text));
    assert_string_equal(text, "err\nerr\n");
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777 & ~0640u, 0); /* at most 0640, whatever the umask */

    char out[256], err[256];
    join(out, sizeof(out), e->dir, "custom.out");
    join(err, sizeof(err), e->dir, "custom.err");
    const char *extra[] = {"--stdout", out, "--stderr", err, NULL};
    assert_int_equal(wait_for(spawn_shim(e->dir, extra, cmd)), 0);
    read_text(out, text, sizeof(text));
    assert_string_equal(text, "out\n");
    read_text(err, text, sizeof(text));
    assert_string_equal(text, "err\n");
}

static void shim_passes_environment_and_directory_through(void **state)
{
    struct env *e = *state;
    const char *cmd[] = {"sh", "-c", "echo \"$GPO_SHIM_TEST $(pwd)\"", NULL};
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setenv("GPO_SHIM_TEST", "hello", 1) < 0 || chdir(e->base) < 0)
            _exit(99);
        _exit(run_shim(e->dir, cmd));
    }
    int st = wait_for(pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    char path[256], text[256], want[256];
    join(path, sizeof(path), e->dir, "stdout");
    read_text(path, text, sizeof(text));
    snprintf(want, sizeof(want), "hello %s\n", e->base);
    assert_string_equal(text, want);
}

static void shim_command_inherits_no_stray_descriptors(void **state)
{
    struct env *e = *state;
    int fd = open("/dev/null", O_RDONLY); /* no O_CLOEXEC, as a careless agent would */
    assert_true(fd > 2);
    char script[128];
    snprintf(script, sizeof(script), "test -e /proc/self/fd/%d && exit 1; exit 0", fd);
    const char *cmd[] = {"sh", "-c", script, NULL};
    assert_int_equal(run_shim(e->dir, cmd), 0);
    close(fd);
}

static void shim_refuses_bad_usage(void **state)
{
    struct env *e = *state;
    const char *cases[][6] = {
        {"shim", "--", "true", NULL},
        {"shim", "--dir", e->dir, NULL},
        {"shim", "--dir", e->dir, "--", NULL},
        {"shim", "--bogus", "x", "--", "true", NULL},
        {"shim", "--dir", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int argc = 0;
        while (cases[i][argc])
            argc++;
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            /* Keep the usage text out of the test's output. */
            int null = open("/dev/null", O_WRONLY);
            dup2(null, 2);
            _exit(shim_main(argc, (char **)cases[i]));
        }
        int st = wait_for(pid);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), SHIM_EXIT_FAILURE);
    }
    char path[256];
    join(path, sizeof(path), e->dir, "status");
    assert_int_equal(access(path, F_OK), -1);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void shim_read_status_reports_missing_and_malformed_files(void **state)
{
    struct env *e = *state;
    struct shim_status s = {.exit_code = 42};
    char err[512] = "", path[256];
    assert_int_equal(shim_read_status(e->dir, &s, err, sizeof(err)), SHIM_ENOENT);
    assert_int_equal(s.exit_code, 42);
    join(path, sizeof(path), e->dir, "status");
    const char *bad[] = {
        "{\"exit_code\": 0, \"started_ms\": 1, \"ended_ms\": 2",
        "{\"started_ms\": 1, \"ended_ms\": 2, \"pid\": 3}",
        "{\"exit_code\": 0, \"signal\": 9, \"started_ms\": 1, \"ended_ms\": 2, \"pid\": 3}",
        "{\"exit_code\": 300, \"started_ms\": 1, \"ended_ms\": 2, \"pid\": 3}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_file(path, bad[i]);
        assert_int_equal(shim_read_status(e->dir, &s, err, sizeof(err)), SHIM_ECORRUPT);
        assert_non_null(strstr(err, path));
        assert_int_equal(s.exit_code, 42);
    }
    write_file(path, "{\"signal\": 15, \"started_ms\": 1, \"ended_ms\": 2, \"pid\": 3}\n");
    read_status_ok(e->dir, &s);
    assert_true(s.signaled);
    assert_int_equal(s.signal, 15);
    assert_int_equal(s.pid, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(shim_records_exit_codes_zero_and_three, test_setup),
        cmocka_unit_test_setup(shim_records_killing_signal, test_setup),
        cmocka_unit_test_setup(shim_exec_of_missing_program_gives_127_and_error, test_setup),
        cmocka_unit_test_setup(shim_forwards_sigterm_to_command_group, test_setup),
        cmocka_unit_test_setup(shim_status_and_pid_appear_only_by_rename, test_setup),
        cmocka_unit_test_setup(shim_survives_its_parents_death, test_setup),
        cmocka_unit_test_setup(shim_writes_output_to_attempt_files, test_setup),
        cmocka_unit_test_setup(shim_passes_environment_and_directory_through, test_setup),
        cmocka_unit_test_setup(shim_command_inherits_no_stray_descriptors, test_setup),
        cmocka_unit_test_setup(shim_refuses_bad_usage, test_setup),
        cmocka_unit_test_setup(shim_read_status_reports_missing_and_malformed_files, test_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

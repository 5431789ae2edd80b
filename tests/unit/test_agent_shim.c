/* test_agent_shim.c - `gpuorch shim`, run through shim_main in a forked
 * child: exit codes and killing signals are recorded, a missing program gives
 * 127 and the execvp error, SIGTERM to the shim reaches the command's whole
 * process group, the status and pid files appear only by rename (watched with
 * inotify), the shim keeps running and reports after its parent dies, output
 * goes to the attempt's files, environment and working directory pass through,
 * no stray descriptor reaches the command, bad usage or bad status files are
 * refused, --ready-fd reaches end-of-file once the pid file exists, and
 * --env-fd replaces the command's environment. As root, with the test
 * accounts: --user runs the command as gpuorch-test1 with only its groups,
 * its default log files owned by it and the attempt directory's group, HOME
 * and the like set unless given, --workdir entered with the user's
 * permissions, uid 0 refused without --allow-root, an unknown user reported,
 * custom output files opened as the user; with a writable cgroup v2, --cgroup
 * holds the command and a setsid grandchild but not the shim. Tests that
 * cannot run here are left out with a "# SKIP" line that says why. The test
 * process is a child subreaper, so orphaned shims and grandchildren are
 * reaped here. No timing assertions: waits poll with a deadline that only
 * guards against a hang. Files live in a mkdtemp directory (mode 0755, so
 * the test user reaches its working directories) removed at the end. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
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

#include "agent/cgroup.h"
#include "agent/fence.h"
#include "agent/shim.h"
#include "tmptree.h"
#include "base/banned.h"

/* Guards against a hang only; nothing asserts how long anything takes. */
#define DEADLINE_S 60

struct env {
    char base[64];
    char dir[128]; /* this test's attempt directory */
    int seq;
    /* What this host offers the tests of --user and --cgroup. */
    bool users;                    /* root, with the test accounts */
    char why_users[256];           /* why not */
    uid_t uid1;                    /* gpuorch-test1's */
    gid_t gid1, gid2;              /* gpuorch-test1's and gpuorch-test2's groups */
    char home1[256], shell1[256];  /* gpuorch-test1's */
    char cg_dir[CGROUP_PATH_MAX];  /* this run's cgroup root; "" when none */
    char cg_test[CGROUP_PATH_MAX]; /* the running test's cgroup, killed in its teardown */
    struct cgroup_root *cg;        /* NULL: no writable cgroup v2 */
    char why_cg[2048];             /* why not */
};

static void probe_host(struct env *e)
{
    struct passwd *p2 = getpwnam("gpuorch-test2"), *p1 = getpwnam("gpuorch-test1");
    if (geteuid() != 0)
        snprintf(e->why_users, sizeof(e->why_users), "not running as root");
    else if (!p1 || !p2)
        snprintf(e->why_users, sizeof(e->why_users),
                 "no gpuorch-test1 and gpuorch-test2 accounts (scripts/setup.sh makes them)");
    else {
        e->users = true;
        e->uid1 = p1->pw_uid;
        e->gid1 = p1->pw_gid;
        snprintf(e->home1, sizeof(e->home1), "%s", p1->pw_dir);
        snprintf(e->shell1, sizeof(e->shell1), "%s", p1->pw_shell);
        e->gid2 = p2->pw_gid;
    }
    char mnt[CGROUP_PATH_MAX - 64];
    if (cgroup_mount_find(mnt, sizeof(mnt), e->why_cg, sizeof(e->why_cg)) != 0)
        return;
    snprintf(e->cg_dir, sizeof(e->cg_dir), "%s/gpuorch-test-shim.%ld", mnt, (long)getpid());
    if (mkdir(e->cg_dir, 0755) < 0) {
        snprintf(e->why_cg, sizeof(e->why_cg), "mkdir %s: %s", e->cg_dir, strerror(errno));
        e->cg_dir[0] = '\0';
    } else if (cgroup_root_open(e->cg_dir, &e->cg, e->why_cg, sizeof(e->why_cg)) != 0) {
        e->cg = NULL;
    }
}

static int env_init(struct env *e)
{
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
        return -1;
    snprintf(e->base, sizeof(e->base), "/tmp/test_agent_shim.XXXXXX");
    /* 0755: the test user must traverse it to reach its working directories. */
    if (!mkdtemp(e->base) || chmod(e->base, 0755) < 0)
        return -1;
    probe_host(e);
    return 0;
}

static void env_release(struct env *e)
{
    tmptree_remove(e->base);
    cgroup_root_close(e->cg);
    if (e->cg_dir[0])
        cgroup_remove(e->cg_dir, NULL, 0); /* with its v1 directories */
}

static int test_setup(void **state)
{
    struct env *e = *state;
    snprintf(e->dir, sizeof(e->dir), "%s/attempt%d", e->base, e->seq++);
    return mkdir(e->dir, 0700);
}

/* Whether the test passed or not, nothing it started in a cgroup outlives it. */
static int test_teardown(void **state)
{
    struct env *e = *state;
    if (!e->cg_test[0])
        return 0;
    cgroup_kill(e->cg_test, NULL, 0);
    time_t end = time(NULL) + DEADLINE_S;
    while (cgroup_remove(e->cg_test, NULL, 0) == GPO_EBUSY && time(NULL) < end) {
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        struct timespec ts = {.tv_nsec = 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    e->cg_test[0] = '\0';
    return 0;
}

/* Waits until `pid` leads a session of its own: setsid(1) calls setsid() only
 * after the shell has reported its pid. */
static void wait_for_session(pid_t pid)
{
    time_t end = time(NULL) + DEADLINE_S;
    while (getsid(pid) != pid && time(NULL) < end) {
        struct timespec ts = {.tv_nsec = 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(getsid(pid), pid);
}

static time_t deadline(void)
{
    return time(NULL) + DEADLINE_S;
}

/* Forks a child that runs shim_main(shim --dir DIR [extra...] -- cmd...),
 * with exactly the environment `envv` unless it is NULL. */
static pid_t spawn_shim_env(const char *dir, const char *const *extra, const char *const *cmd,
                            const char *const *envv)
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
    if (pid == 0) {
        if (envv) {
            clearenv();
            for (; *envv; envv++)
                if (putenv((char *)*envv) != 0)
                    _exit(99);
        }
        _exit(shim_main(argc, (char **)argv));
    }
    return pid;
}

static pid_t spawn_shim(const char *dir, const char *const *extra, const char *const *cmd)
{
    return spawn_shim_env(dir, extra, cmd, NULL);
}

/* Waits for `pid` (a child, or an orphan reparented to this subreaper). */
static int wait_for(pid_t pid)
{
    time_t end = deadline();
    int st;
    pid_t r;
    while ((r = waitpid(pid, &st, WNOHANG)) == 0 && time(NULL) < end)
        tmptree_pause();
    if (r == 0)
        kill(pid, SIGKILL);
    if (r != pid)
        fail_msg("waitpid(%d): %s", (int)pid, r == 0 ? "still running" : strerror(errno));
    return st;
}

/* Waits until a grandchild is gone, however it was reaped: here (reparented
 * to this subreaper) with its status in *ret_st and true, or by another
 * process before it reached us (false). Fails if it is still there. */
static bool wait_gone(pid_t pid, int *ret_st)
{
    time_t end = deadline();
    for (;;) {
        pid_t r = waitpid(pid, ret_st, WNOHANG);
        if (r == pid)
            return true;
        if (r < 0 && kill(pid, 0) != 0 && errno == ESRCH)
            return false;
        if (time(NULL) >= end)
            fail_msg("process %d is still there", (int)pid);
        tmptree_pause();
    }
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
        print_error("shim_read_status: %s (%s)\n", gpo_strerror(rc), err);
    assert_int_equal(rc, 0);
}

static void join(char *buf, size_t len, const char *dir, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

/* Waits for `shim`, whose command `sig` ended: the shim exits 128 + sig
 * and its status says so (*s). */
static void wait_signaled(pid_t shim, const char *dir, int sig, struct shim_status *s)
{
    int st = wait_for(shim);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 128 + sig);
    read_status_ok(dir, s);
    assert_true(s->signaled);
    assert_int_equal(s->signal, sig);
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
    assert_int_equal(tmptree_read_number(path), s.pid);

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
    tmptree_wait_file(bgpid);
    pid_t bg = (pid_t)tmptree_read_number(bgpid);
    assert_int_equal(kill(shim, SIGTERM), 0);
    struct shim_status s;
    wait_signaled(shim, e->dir, SIGTERM, &s);
    int st;
    /* The sleep is gone: reaped here (orphaned, reparented to this
     * subreaper) or by sh's `wait` just before sh itself ended. */
    if (wait_gone(bg, &st)) {
        assert_true(WIFSIGNALED(st));
        assert_int_equal(WTERMSIG(st), SIGTERM);
    }
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

/* How many entries of dir begin with prefix. */
static size_t entries_with_prefix(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    size_t n = 0;
    for (struct dirent *de; (de = readdir(d));)
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
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
    /* No temporary file stays behind (NAME.tmp.XXXXXX). */
    assert_int_equal(entries_with_prefix(e->dir, "status.tmp"), 0);
    assert_int_equal(entries_with_prefix(e->dir, "pid.tmp"), 0);
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
    tmptree_read_text(path, text, sizeof(text));
    assert_string_equal(text, "out\nout\n"); /* appended, not truncated */
    join(path, sizeof(path), e->dir, "stderr");
    tmptree_read_text(path, text, sizeof(text));
    assert_string_equal(text, "err\nerr\n");
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777 & ~0640u, 0); /* at most 0640, whatever the umask */

    char out[256], err[256];
    join(out, sizeof(out), e->dir, "custom.out");
    join(err, sizeof(err), e->dir, "custom.err");
    const char *extra[] = {"--stdout", out, "--stderr", err, NULL};
    assert_int_equal(wait_for(spawn_shim(e->dir, extra, cmd)), 0);
    tmptree_read_text(out, text, sizeof(text));
    assert_string_equal(text, "out\n");
    tmptree_read_text(err, text, sizeof(text));
    assert_string_equal(text, "err\n");
}

/* sbatch's -o without -e: one file, both streams in the order written;
 * truncated when the attempt starts unless --append (--open-mode). Each
 * run is a fresh attempt directory's shim. */
static void shim_merges_streams_into_one_path_and_truncates_unless_append(void **state)
{
    struct env *e = *state;
    char out[256], dir[256], text[256];
    join(out, sizeof(out), e->base, "merged.out");
    const char *cmd[] = {"sh", "-c", "echo one; echo two >&2; echo three", NULL};
    const char *same[] = {"--stdout", out, "--stderr", out, NULL};
    const char *append[] = {"--stdout", out, "--stderr", out, "--append", NULL};
    const char *const *runs[] = {same, same, append};
    const char *want[] = {"one\ntwo\nthree\n", "one\ntwo\nthree\n",
                          "one\ntwo\nthree\none\ntwo\nthree\n"};
    for (size_t k = 0; k < 3; k++) {
        snprintf(dir, sizeof(dir), "%s/merge.%zu", e->base, k);
        assert_int_equal(mkdir(dir, 0750), 0);
        assert_int_equal(wait_for(spawn_shim(dir, runs[k], cmd)), 0);
        tmptree_read_text(out, text, sizeof(text));
        assert_string_equal(text, want[k]);
    }
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
    tmptree_read_text(path, text, sizeof(text));
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
    const char *cases[][8] = {
        {"shim", "--", "true", NULL},
        {"shim", "--dir", e->dir, NULL},
        {"shim", "--dir", e->dir, "--", NULL},
        {"shim", "--bogus", "x", "--", "true", NULL},
        {"shim", "--dir", NULL},
        {"shim", "--dir", e->dir, "--ready-fd", "1", "--", "true", NULL},
        {"shim", "--dir", e->dir, "--ready-fd", "987", "--", "true", NULL},
        {"shim", "--dir", e->dir, "--user", "--", "true", NULL},
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
    assert_int_equal(shim_read_status(e->dir, &s, err, sizeof(err)), GPO_ENOENT);
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
        assert_int_equal(shim_read_status(e->dir, &s, err, sizeof(err)), GPO_ECORRUPT);
        assert_non_null(strstr(err, path));
        assert_int_equal(s.exit_code, 42);
    }
    write_file(path, "{\"signal\": 15, \"started_ms\": 1, \"ended_ms\": 2, \"pid\": 3}\n");
    read_status_ok(e->dir, &s);
    assert_true(s.signaled);
    assert_int_equal(s.signal, 15);
    assert_int_equal(s.pid, 3);
}

/* ---- --user, --workdir, --cgroup, --ready-fd ---- */

/* A directory under the base, with this mode (not subject to the umask). */
/* ---- --fence: the watchdog of a dead or stopped agent ---- */

static int64_t mono_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void boot_id(char *out, size_t len)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    assert_non_null(f);
    assert_non_null(fgets(out, (int)len, f));
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

/* DIR/fence as the agent's fence.c writes it: the lease and grace, this
 * boot, a controller's last answer `ago_ms` before now. */
static void write_fence(const char *path, int64_t lease_ms, int64_t grace_ms, int64_t ago_ms)
{
    char boot[64], text[256];
    boot_id(boot, sizeof(boot));
    snprintf(text, sizeof(text),
             "{\"lease_ms\":%lld,\"grace_ms\":%lld,\"boot_id\":\"%s\",\"answered_ms\":%lld}",
             (long long)lease_ms, (long long)grace_ms, boot, (long long)(mono_now_ms() - ago_ms));
    write_file(path, text);
}

static void shim_fence_file_is_the_agents_object_and_no_other(void **state)
{
    (void)state;
    struct shim_fence f;
    const char *good = "{\"lease_ms\":29000,\"grace_ms\":10000,\"boot_id\":\"4f1c-9a\","
                       "\"answered_ms\":123456}";
    assert_int_equal(shim_fence_parse(good, strlen(good), &f), 0);
    assert_int_equal(f.lease_ms, 29000);
    assert_int_equal(f.grace_ms, 10000);
    assert_int_equal(f.answered_ms, 123456);
    assert_string_equal(f.boot_id, "4f1c-9a");
    const char *spaced = " { \"answered_ms\" : 7 , \"boot_id\":\"b\", \"grace_ms\":0,"
                         "\"lease_ms\":0 }\n";
    assert_int_equal(shim_fence_parse(spaced, strlen(spaced), &f), 0);
    assert_int_equal(f.answered_ms, 7);
    assert_int_equal(f.lease_ms, 0);
    const char *bad[] = {
        "",
        "{}",
        "{\"lease_ms\":1,\"grace_ms\":1,\"boot_id\":\"b\"}",
        "{\"lease_ms\":1,\"grace_ms\":1,\"boot_id\":\"b\",\"answered_ms\":1,\"x\":1}",
        "{\"lease_ms\":1,\"lease_ms\":1,\"boot_id\":\"b\",\"answered_ms\":1}",
        "{\"lease_ms\":-1,\"grace_ms\":1,\"boot_id\":\"b\",\"answered_ms\":1}",
        "{\"lease_ms\":\"1\",\"grace_ms\":1,\"boot_id\":\"b\",\"answered_ms\":1}",
        "{\"lease_ms\":1.5,\"grace_ms\":1,\"boot_id\":\"b\",\"answered_ms\":1}",
        "{\"lease_ms\":1,\"grace_ms\":1,\"boot_id\":\"\",\"answered_ms\":1}",
        "{\"lease_ms\":1,\"grace_ms\":1,\"boot_id\":\"a\\\"b\",\"answered_ms\":1}",
        "{\"lease_ms\":1,\"grace_ms\":1,\"boot_id\":7,\"answered_ms\":1}",
        "{\"lease_ms\":1,\"grace_ms\":1,\"boot_id\":\"b\",\"answered_ms\":1} x",
        "{\"lease_ms\":1234567890123456789,\"grace_ms\":1,\"boot_id\":\"b\",\"answered_ms\":1}",
        "{\"lease_ms\":1,\"grace_ms\":1,\"boot_id\":\"0123456789012345678901234567890123456789"
        "0123456789012345678901234\",\"answered_ms\":1}", /* 65: over MONOTIME_BOOT_ID_MAX */
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
        if (shim_fence_parse(bad[k], strlen(bad[k]), &f) != GPO_ECORRUPT)
            fail_msg("accepted: %s", bad[k]);
}

/* The watchdog's looks, by hand: lease 3000 from an answer at 1000, grace
 * 500. The file may be a save's interval behind the agent: TERM at
 * 1000 + FENCE_SAVE_EVERY_MS + 3000, KILL the grace later. */
static void shim_fence_step_terms_at_the_lease_and_kills_after_the_grace(void **state)
{
    (void)state;
    struct shim_watch w = {.boot_id = "b", .action = SHIM_WATCH_NONE};
    struct shim_fence f = {.lease_ms = 3000, .grace_ms = 500, .answered_ms = 1000, .boot_id = "b"};
    int64_t due = 1000 + FENCE_SAVE_EVERY_MS + 3000;
    assert_int_equal(shim_fence_step(&w, &f, false, 9000), SHIM_WATCH_ROUND_MS); /* no file */
    struct shim_fence off = f, other = f, ahead = f;
    off.lease_ms = 0;
    snprintf(other.boot_id, sizeof(other.boot_id), "another boot");
    ahead.answered_ms = 9001;
    assert_int_equal(shim_fence_step(&w, &off, true, 9000), SHIM_WATCH_ROUND_MS);
    assert_int_equal(shim_fence_step(&w, &other, true, 9000), SHIM_WATCH_ROUND_MS);
    assert_int_equal(shim_fence_step(&w, &ahead, true, 9000), SHIM_WATCH_ROUND_MS);
    assert_int_equal(w.action, SHIM_WATCH_NONE);
    assert_int_equal(shim_fence_step(&w, &f, true, 2000), SHIM_WATCH_ROUND_MS);
    assert_int_equal(shim_fence_step(&w, &f, true, due - 100), 100); /* woken at the lease */
    assert_int_equal(w.action, SHIM_WATCH_NONE);
    assert_int_equal(shim_fence_step(&w, &f, true, due), 500);
    assert_int_equal(w.action, SHIM_WATCH_TERM);
    assert_int_equal(w.unreached_ms, due - 1000);
    struct shim_fence renewed = f;
    renewed.answered_ms = due; /* after the SIGTERM: too late, as for the agent's fence */
    assert_int_equal(shim_fence_step(&w, &renewed, true, due + 200), 300);
    assert_int_equal(w.action, SHIM_WATCH_TERM);
    assert_int_equal(shim_fence_step(&w, &renewed, true, due + 500), -1);
    assert_int_equal(w.action, SHIM_WATCH_KILL);
    assert_int_equal(shim_fence_step(&w, &renewed, true, due + 900), -1);
    /* A renewal before the lease's end moves it. */
    struct shim_watch w2 = {.boot_id = "b", .action = SHIM_WATCH_NONE};
    assert_int_equal(shim_fence_step(&w2, &renewed, true, due + 10), SHIM_WATCH_ROUND_MS);
    assert_int_equal(w2.action, SHIM_WATCH_NONE);
}

static void shim_fence_stops_the_command_once_the_agents_lease_has_run_out(void **state)
{
    struct env *e = *state;
    char fence[256];
    join(fence, sizeof(fence), e->base, "fence");
    /* Answered 2 s ago, a lease of 1 s: the first look fences. */
    write_fence(fence, 1000, 5000, 2000);
    const char *extra[] = {"--fence", fence, NULL};
    const char *cmd[] = {"/bin/sleep", "60", NULL};
    struct shim_status s;
    wait_signaled(spawn_shim(e->dir, extra, cmd), e->dir, SIGTERM, &s);
    assert_true(s.fenced_ms >= 2000);
    /* One that ignores SIGTERM gets SIGKILL after the grace. The lease runs
     * out once its trap is set: the file is written after it says so, and
     * the shim's next look (a round later) finds it. */
    char ready[300], script[400];
    join(ready, sizeof(ready), e->base, "trapped");
    snprintf(script, sizeof(script), "trap '' TERM; : > %s; while :; do sleep 0.05; done", ready);
    const char *stubborn[] = {"/bin/sh", "-c", script, NULL};
    char dir2[256];
    snprintf(dir2, sizeof(dir2), "%s.2", e->dir);
    assert_int_equal(mkdir(dir2, 0755), 0);
    unlink(fence);
    pid_t shim = spawn_shim(dir2, extra, stubborn);
    time_t end = deadline();
    while (access(ready, F_OK) != 0 && time(NULL) < end)
        tmptree_pause();
    write_fence(fence, 1000, 200, 2000);
    wait_signaled(shim, dir2, SIGKILL, &s);
    assert_true(s.fenced_ms >= 2000);
}

static void shim_fence_leaves_a_live_lease_and_no_lease_alone(void **state)
{
    struct env *e = *state;
    char fence[256];
    join(fence, sizeof(fence), e->base, "fence");
    const char *extra[] = {"--fence", fence, NULL};
    const char *cmd[] = {"/bin/sh", "-c", "sleep 0.3; exit 4", NULL};
    /* No file (yet), not the agent's, fencing off, another boot's, a live lease. */
    enum { NO_FILE, GARBAGE, OFF, OTHER_BOOT, LIVE, NCASES };
    for (int k = 0; k < NCASES; k++) {
        char dir[256], boot[64], text[256];
        snprintf(dir, sizeof(dir), "%s.%d", e->dir, k);
        assert_int_equal(mkdir(dir, 0755), 0);
        unlink(fence);
        boot_id(boot, sizeof(boot));
        if (k == GARBAGE) {
            write_file(fence, "garbage");
        } else if (k == OFF) {
            snprintf(text, sizeof(text),
                     "{\"lease_ms\":0,\"grace_ms\":0,\"boot_id\":\"%s\",\"answered_ms\":1}", boot);
            write_file(fence, text);
        } else if (k == OTHER_BOOT) {
            write_file(fence,
                       "{\"lease_ms\":1,\"grace_ms\":0,\"boot_id\":\"another\",\"answered_ms\":1}");
        } else if (k == LIVE) {
            write_fence(fence, 60000, 1000, 0); /* answered now, a lease of a minute */
        }
        int st = wait_for(spawn_shim(dir, extra, cmd));
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 4);
        struct shim_status s;
        read_status_ok(dir, &s);
        assert_false(s.signaled);
        assert_int_equal(s.exit_code, 4);
        assert_int_equal(s.fenced_ms, 0);
    }
}

static void make_dir(const struct env *e, const char *name, mode_t mode, char *path, size_t len)
{
    snprintf(path, len, "%s/%s%d", e->base, name, e->seq);
    assert_int_equal(mkdir(path, mode), 0);
    assert_int_equal(chmod(path, mode), 0);
}

static void shim_runs_command_as_user_with_only_its_groups(void **state)
{
    struct env *e = *state;
    /* The attempt directory's group, not the user's, goes to the log files. */
    assert_int_equal(chown(e->dir, 0, e->gid2), 0);
    const char *extra[] = {"--user", "gpuorch-test1", NULL};
    const char *cmd[] = {"sh", "-c", "id -u; id -g; id -G; echo err >&2", NULL};
    assert_int_equal(wait_for(spawn_shim(e->dir, extra, cmd)), 0);
    char path[256], text[256], want[256];
    join(path, sizeof(path), e->dir, "stdout");
    tmptree_read_text(path, text, sizeof(text));
    snprintf(want, sizeof(want), "%ld\n%ld\n%ld\n", (long)e->uid1, (long)e->gid1, (long)e->gid1);
    assert_string_equal(text, want);
    const char *names[] = {"stdout", "stderr"};
    for (int i = 0; i < 2; i++) {
        struct stat st;
        join(path, sizeof(path), e->dir, names[i]);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_uid, e->uid1);
        assert_int_equal(st.st_gid, e->gid2);
        assert_int_equal(st.st_mode & 07777, 0640);
    }
    struct shim_status s;
    read_status_ok(e->dir, &s);
    assert_int_equal(s.exit_code, 0);
}

static void shim_sets_login_variables_unless_given(void **state)
{
    struct env *e = *state;
    const char *extra[] = {"--user", "gpuorch-test1", NULL};
    const char *cmd[] = {"sh", "-c", "echo \"$HOME $USER $LOGNAME $SHELL $(pwd)\"", NULL};
    const char *bare[] = {"PATH=/usr/bin:/bin", NULL};
    const char *given[] = {"PATH=/usr/bin:/bin", "HOME=/custom", "USER=someone", NULL};
    assert_int_equal(wait_for(spawn_shim_env(e->dir, extra, cmd, bare)), 0);
    assert_int_equal(wait_for(spawn_shim_env(e->dir, extra, cmd, given)), 0);
    /* Without --workdir: the home directory, or / where it cannot be entered. */
    struct stat st;
    bool home = stat(e->home1, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == e->uid1;
    char path[256], text[1024], want[2048];
    snprintf(want, sizeof(want),
             "%s gpuorch-test1 gpuorch-test1 %s %s\n/custom someone "
             "gpuorch-test1 %s %s\n",
             e->home1, e->shell1, home ? e->home1 : "/", e->shell1, home ? e->home1 : "/");
    join(path, sizeof(path), e->dir, "stdout");
    tmptree_read_text(path, text, sizeof(text));
    assert_string_equal(text, want);
}

static void shim_enters_workdir_as_the_user(void **state)
{
    struct env *e = *state;
    char open_dir[256], closed_dir[256], path[256], text[512], want[512];
    make_dir(e, "work", 0755, open_dir, sizeof(open_dir));
    make_dir(e, "private", 0700, closed_dir, sizeof(closed_dir)); /* root's */
    const char *cmd[] = {"pwd", NULL};
    const char *ok[] = {"--user", "gpuorch-test1", "--workdir", open_dir, NULL};
    assert_int_equal(wait_for(spawn_shim(e->dir, ok, cmd)), 0);
    join(path, sizeof(path), e->dir, "stdout");
    tmptree_read_text(path, text, sizeof(text));
    snprintf(want, sizeof(want), "%s\n", open_dir);
    assert_string_equal(text, want);

    const char *refused[] = {"--user", "gpuorch-test1", "--workdir", closed_dir, NULL};
    assert_int_equal(WEXITSTATUS(wait_for(spawn_shim(e->dir, refused, cmd))), 127);
    struct shim_status s;
    read_status_ok(e->dir, &s);
    assert_int_equal(s.exit_code, 127);
    snprintf(want, sizeof(want), "chdir %s: Permission denied", closed_dir);
    assert_string_equal(s.error, want);
    assert_true(s.pid > 0); /* the child was forked, and stopped before exec */
    tmptree_read_text(path, text, sizeof(text));
    snprintf(want, sizeof(want), "%s\n", open_dir); /* nothing more was run */
    assert_string_equal(text, want);
}

static void shim_refuses_root_without_allow_root(void **state)
{
    struct env *e = *state;
    const char *cmd[] = {"id", "-u", NULL};
    const char *refused[] = {"--user", "root", NULL};
    assert_int_equal(WEXITSTATUS(wait_for(spawn_shim(e->dir, refused, cmd))), 127);
    struct shim_status s;
    read_status_ok(e->dir, &s);
    assert_string_equal(s.error, "user root: uid 0 refused without --allow-root");
    assert_int_equal(s.pid, 0);
    char path[256], text[64];
    join(path, sizeof(path), e->dir, "pid");
    assert_int_equal(access(path, F_OK), -1);
    join(path, sizeof(path), e->dir, "stdout");
    assert_int_equal(access(path, F_OK), -1); /* nothing was started */

    const char *allowed[] = {"--user", "root", "--allow-root", NULL};
    assert_int_equal(wait_for(spawn_shim(e->dir, allowed, cmd)), 0);
    tmptree_read_text(path, text, sizeof(text));
    assert_string_equal(text, "0\n");
}

static void shim_reports_unknown_user_in_status(void **state)
{
    struct env *e = *state;
    const char *extra[] = {"--user", "gpuorch-no-such-user", NULL};
    const char *cmd[] = {"true", NULL};
    assert_int_equal(WEXITSTATUS(wait_for(spawn_shim(e->dir, extra, cmd))), 127);
    struct shim_status s;
    read_status_ok(e->dir, &s);
    assert_string_equal(s.error, "user gpuorch-no-such-user: no such user");
    assert_int_equal(s.pid, 0);
}

static void shim_opens_custom_output_files_as_the_user(void **state)
{
    struct env *e = *state;
    char closed_dir[256], open_dir[256], out[300], err[300];
    make_dir(e, "private", 0700, closed_dir, sizeof(closed_dir));
    make_dir(e, "public", 0777, open_dir, sizeof(open_dir));
    snprintf(out, sizeof(out), "%s/out", closed_dir);
    const char *refused[] = {"--user", "gpuorch-test1", "--stdout", out, NULL};
    const char *cmd[] = {"sh", "-c", "echo hello; echo oops >&2", NULL};
    assert_int_equal(WEXITSTATUS(wait_for(spawn_shim(e->dir, refused, cmd))), 127);
    struct shim_status s;
    read_status_ok(e->dir, &s);
    char want[512];
    snprintf(want, sizeof(want), "open %s: Permission denied", out);
    assert_string_equal(s.error, want);
    assert_int_equal(access(out, F_OK), -1); /* root did not create it for the user */

    snprintf(out, sizeof(out), "%s/out", open_dir);
    snprintf(err, sizeof(err), "%s/err", open_dir);
    const char *allowed[] = {"--user", "gpuorch-test1", "--stdout", out, "--stderr", err, NULL};
    assert_int_equal(wait_for(spawn_shim(e->dir, allowed, cmd)), 0);
    struct stat st;
    char text[64];
    assert_int_equal(stat(out, &st), 0);
    assert_int_equal(st.st_uid, e->uid1);
    tmptree_read_text(out, text, sizeof(text));
    assert_string_equal(text, "hello\n");
    assert_int_equal(stat(err, &st), 0);
    assert_int_equal(st.st_uid, e->uid1);
}

static bool has_pid(const pid_t *v, size_t n, pid_t pid)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == pid)
            return true;
    return false;
}

static void shim_cgroup_holds_command_and_setsid_grandchild_not_shim(void **state)
{
    struct env *e = *state;
    char cg[CGROUP_PATH_MAX], err[512] = "", work[256], gc_path[300];
    assert_int_equal(
        cgroup_create(e->cg, 100, (uint32_t)e->seq, 0, 0, cg, sizeof(cg), err, sizeof(err)), 0);
    snprintf(e->cg_test, sizeof(e->cg_test), "%s", cg);
    make_dir(e, "cgwork", 0777, work, sizeof(work));
    snprintf(gc_path, sizeof(gc_path), "%s/gc", work);
    /* A grandchild in a session of its own, which a process-group kill misses. */
    const char *cmd[] = {"sh", "-c", "setsid sleep 1000 & echo $! > gc.tmp && mv gc.tmp gc; wait",
                         NULL};
    const char *extra[] = {"--user", "gpuorch-test1", "--cgroup", cg, "--workdir", work, NULL};
    pid_t shim = spawn_shim(e->dir, extra, cmd);
    tmptree_wait_file(gc_path);
    pid_t gc = (pid_t)tmptree_read_number(gc_path);
    char path[256];
    join(path, sizeof(path), e->dir, "pid");
    tmptree_wait_file(path); /* the command may run before the shim writes it */
    pid_t command = (pid_t)tmptree_read_number(path);
    wait_for_session(gc);
    pid_t *pids = NULL;
    size_t n = 0;
    assert_int_equal(cgroup_pids(cg, &pids, &n, err, sizeof(err)), 0);
    assert_true(has_pid(pids, n, command));
    assert_true(has_pid(pids, n, gc));
    assert_false(has_pid(pids, n, shim));
    free(pids);

    assert_int_equal(cgroup_kill(cg, err, sizeof(err)), 0);
    struct shim_status s;
    wait_signaled(shim, e->dir, SIGKILL, &s); /* outside the cgroup: it survives and reports */
    int st;
    if (wait_gone(gc, &st)) /* orphaned, reparented to this subreaper */
        assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    time_t end = deadline();
    while (cgroup_remove(cg, err, sizeof(err)) == GPO_EBUSY && time(NULL) < end)
        tmptree_pause();
    assert_int_equal(access(cg, F_OK), -1);
    e->cg_test[0] = '\0';
}

static void shim_records_oom_kills_of_command_over_memory_limit(void **state)
{
    struct env *e = *state;
    char cg[CGROUP_PATH_MAX], err[512] = "", dir2[sizeof(e->dir) + 4];
    if (!cgroup_root_has(e->cg, "memory")) {
        print_error("%s has no memory controller (cgroup v2 or v1)\n", cgroup_root_path(e->cg));
        fail();
    }
    assert_int_equal(
        cgroup_create(e->cg, 101, (uint32_t)e->seq, 0, 32, cg, sizeof(cg), err, sizeof(err)), 0);
    snprintf(e->cg_test, sizeof(e->cg_test), "%s", cg);
    /* 96 MiB written under a 32 MiB limit: the kernel kills it. */
    const char *cmd[] = {"python3", "-c", "b = b'x' * (96 << 20)", NULL};
    const char *extra[] = {"--user", "gpuorch-test1", "--cgroup", cg, NULL};
    struct shim_status s;
    wait_signaled(spawn_shim(e->dir, extra, cmd), e->dir, SIGKILL, &s);
    assert_int_equal(s.oom_kills, 1);
    time_t end = deadline();
    while (cgroup_remove(cg, err, sizeof(err)) == GPO_EBUSY && time(NULL) < end)
        tmptree_pause();
    e->cg_test[0] = '\0';

    /* A command within its limit, in a cgroup: no "oom_kills". */
    snprintf(dir2, sizeof(dir2), "%s-b", e->dir);
    assert_int_equal(mkdir(dir2, 0700), 0);
    assert_int_equal(
        cgroup_create(e->cg, 102, (uint32_t)e->seq, 0, 32, cg, sizeof(cg), err, sizeof(err)), 0);
    snprintf(e->cg_test, sizeof(e->cg_test), "%s", cg);
    const char *small[] = {"true", NULL};
    int st = wait_for(spawn_shim(dir2, extra, small));
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    read_status_ok(dir2, &s);
    assert_int_equal(s.oom_kills, 0);
    char text[512];
    char path[sizeof(dir2) + 16];
    join(path, sizeof(path), dir2, "status");
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    assert_null(strstr(text, "oom_kills"));
}

static void shim_ready_fd_closes_once_pid_file_is_written(void **state)
{
    struct env *e = *state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    char fd[16];
    snprintf(fd, sizeof(fd), "%d", p[1]);
    const char *extra[] = {"--ready-fd", fd, NULL};
    const char *cmd[] = {"sleep", "1000", NULL};
    pid_t shim = spawn_shim(e->dir, extra, cmd);
    close(p[1]);
    char c;
    /* End of file: neither the shim nor the command holds the write end. */
    assert_int_equal(read(p[0], &c, 1), 0);
    close(p[0]);
    char path[256];
    join(path, sizeof(path), e->dir, "pid");
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(kill(shim, SIGTERM), 0);
    int st = wait_for(shim);
    assert_int_equal(WEXITSTATUS(st), 128 + SIGTERM);
}

static void shim_env_fd_replaces_command_environment(void **state)
{
    struct env *e = *state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    static const char strings[] = "A=1\0B=two words\0PATH=/usr/bin:/bin";
    assert_int_equal(write(p[1], strings, sizeof(strings)), (ssize_t)sizeof(strings));
    close(p[1]);
    char fd[16];
    snprintf(fd, sizeof(fd), "%d", p[0]);
    const char *extra[] = {"--env-fd", fd, NULL};
    const char *cmd[] = {"sh", "-c", "echo \"$A|$B|${GPO_SHIM_OWN:-unset}\"", NULL};
    /* The shim's own variable does not reach the command. */
    const char *own[] = {"GPO_SHIM_OWN=1", "PATH=/usr/bin:/bin", NULL};
    assert_int_equal(wait_for(spawn_shim_env(e->dir, extra, cmd, own)), 0);
    close(p[0]);
    char path[256], text[256];
    join(path, sizeof(path), e->dir, "stdout");
    tmptree_read_text(path, text, sizeof(text));
    assert_string_equal(text, "1|two words|unset\n");

    /* Not NAME=VALUE: refused before anything runs. */
    assert_int_equal(pipe(p), 0);
    assert_int_equal(write(p[1], "NOEQUALS", 9), 9);
    close(p[1]);
    snprintf(fd, sizeof(fd), "%d", p[0]);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 2);
        const char *argv[] = {"shim", "--dir", e->dir, "--env-fd", fd, "--", "true", NULL};
        _exit(shim_main(7, (char **)argv));
    }
    close(p[0]);
    assert_int_equal(WEXITSTATUS(wait_for(pid)), SHIM_EXIT_FAILURE);
}

enum { NEED_USERS = 1 << 0, NEED_CGROUP = 1 << 1 };

int main(void)
{
    struct env e = {0};
    if (env_init(&e) < 0)
        return 1;
#define T(f, needs)                                                                                \
    {                                                                                              \
        cmocka_unit_test_prestate_setup_teardown(f, test_setup, test_teardown, &e), needs          \
    }
    const struct {
        struct CMUnitTest t;
        unsigned needs;
    } all[] = {
        T(shim_records_exit_codes_zero_and_three, 0),
        T(shim_records_killing_signal, 0),
        T(shim_exec_of_missing_program_gives_127_and_error, 0),
        T(shim_forwards_sigterm_to_command_group, 0),
        T(shim_status_and_pid_appear_only_by_rename, 0),
        T(shim_survives_its_parents_death, 0),
        T(shim_writes_output_to_attempt_files, 0),
        T(shim_merges_streams_into_one_path_and_truncates_unless_append, 0),
        T(shim_passes_environment_and_directory_through, 0),
        T(shim_command_inherits_no_stray_descriptors, 0),
        T(shim_refuses_bad_usage, 0),
        T(shim_read_status_reports_missing_and_malformed_files, 0),
        T(shim_fence_file_is_the_agents_object_and_no_other, 0),
        T(shim_fence_step_terms_at_the_lease_and_kills_after_the_grace, 0),
        T(shim_fence_stops_the_command_once_the_agents_lease_has_run_out, 0),
        T(shim_fence_leaves_a_live_lease_and_no_lease_alone, 0),
        T(shim_ready_fd_closes_once_pid_file_is_written, 0),
        T(shim_env_fd_replaces_command_environment, 0),
        T(shim_runs_command_as_user_with_only_its_groups, NEED_USERS),
        T(shim_sets_login_variables_unless_given, NEED_USERS),
        T(shim_enters_workdir_as_the_user, NEED_USERS),
        T(shim_refuses_root_without_allow_root, NEED_USERS),
        T(shim_reports_unknown_user_in_status, 0),
        T(shim_opens_custom_output_files_as_the_user, NEED_USERS),
        T(shim_cgroup_holds_command_and_setsid_grandchild_not_shim, NEED_USERS | NEED_CGROUP),
        T(shim_records_oom_kills_of_command_over_memory_limit, NEED_USERS | NEED_CGROUP),
    };
#undef T
    /* cmocka 1.1's skip() prints "not ok ... # SKIP", which meson counts as a
     * failure: tests that cannot run here are left out, with the reason. */
    struct CMUnitTest run[sizeof(all) / sizeof(all[0])];
    size_t n = 0;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if ((all[i].needs & NEED_USERS) && !e.users)
            printf("# SKIP %s: %s\n", all[i].t.name, e.why_users);
        else if ((all[i].needs & NEED_CGROUP) && !e.cg)
            printf("# SKIP %s: no writable cgroup v2: %s\n", all[i].t.name, e.why_cg);
        else
            run[n++] = all[i].t;
    }
    fflush(stdout);
    int rc = _cmocka_run_group_tests("agent_shim", run, n, NULL, NULL);
    env_release(&e);
    return rc;
}

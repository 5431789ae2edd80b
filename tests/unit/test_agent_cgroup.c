/* test_agent_cgroup.c - cgroup v2 through cgroup.h, on the machine's real
 * cgroup2 hierarchy: a root that is not cgroup2 is refused with its path, the
 * automatic root is found, an attempt's cgroup is made (and reused), its
 * limits written where the controllers exist, a process moved in shows up in
 * its pids, cgroup_kill ends every process (a child that called setsid
 * included), cgroup_signal reaches each one, and an empty cgroup is removed
 * while a populated one is refused with GPO_EBUSY.
 *
 * The tests work under a root of their own, MOUNT/gpuorch-test.PID, removed
 * at the end. Where there is no writable cgroup v2 (not root, no cgroup2
 * mount), or the root offers neither cpu nor memory, those tests are left out
 * with a "# SKIP" line that says why. The test process is a child subreaper,
 * so processes orphaned by a kill are reaped here. No timing assertions:
 * waits poll with a deadline that only guards against a hang. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/cgroup.h"
#include "tmptree.h"
#include "base/banned.h"

/* Guards against a hang only; nothing asserts how long anything takes. */
#define DEADLINE_S 60

struct env {
    char mount[CGROUP_PATH_MAX - 64];
    char dir[CGROUP_PATH_MAX]; /* this run's root, under the mount */
    struct cgroup_root *root;  /* NULL: no writable cgroup v2 here */
    char why[2048];            /* why root is NULL */
};

/* Finds the mount and makes this run's root; e->root stays NULL (with the
 * reason in e->why) where there is no writable cgroup v2. */
static void env_init(struct env *e)
{
    if (cgroup_mount_find(e->mount, sizeof(e->mount), e->why, sizeof(e->why)) != 0)
        return;
    snprintf(e->dir, sizeof(e->dir), "%s/gpuorch-test.%ld", e->mount, (long)getpid());
    if (mkdir(e->dir, 0755) < 0) {
        snprintf(e->why, sizeof(e->why), "mkdir %s: %s", e->dir, strerror(errno));
        e->dir[0] = '\0';
        return;
    }
    if (cgroup_root_open(e->dir, &e->root, e->why, sizeof(e->why)) != 0)
        e->root = NULL;
}

static void env_release(struct env *e)
{
    if (e->dir[0]) {
        DIR *d = opendir(e->dir);
        for (struct dirent *de; d && (de = readdir(d));) {
            char path[CGROUP_PATH_MAX + 256];
            snprintf(path, sizeof(path), "%s/%s", e->dir, de->d_name);
            if (strncmp(de->d_name, "job-", 4) == 0)
                rmdir(path);
        }
        if (d)
            closedir(d);
        rmdir(e->dir);
    }
    cgroup_root_close(e->root);
}

static int wait_for(pid_t pid)
{
    time_t end = time(NULL) + DEADLINE_S;
    int st = 0;
    pid_t r;
    while ((r = waitpid(pid, &st, WNOHANG)) == 0 && time(NULL) < end)
        tmptree_pause();
    if (r == 0)
        kill(pid, SIGKILL);
    assert_int_equal(r, pid);
    return st;
}

static void wait_unpopulated(const char *path)
{
    time_t end = time(NULL) + DEADLINE_S;
    bool populated = true;
    char err[512] = "";
    while (time(NULL) < end) {
        assert_int_equal(cgroup_populated(path, &populated, err, sizeof(err)), 0);
        if (!populated)
            break;
        tmptree_pause();
    }
    assert_false(populated);
}

static void read_file(const char *dir, const char *name, char *buf, size_t len)
{
    char path[CGROUP_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

static bool has_pid(const pid_t *v, size_t n, pid_t pid)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == pid)
            return true;
    return false;
}

static void create_ok(const struct env *e, uint64_t job, uint32_t attempt, uint32_t cpu,
                      int64_t mem, char *path, size_t len)
{
    char err[512] = "";
    int rc = cgroup_create(e->root, job, attempt, cpu, mem, path, len, err, sizeof(err));
    if (rc)
        print_error("cgroup_create: %s (%s)\n", gpo_strerror(rc), err);
    assert_int_equal(rc, 0);
}

static void cgroup_root_open_refuses_directory_not_on_cgroup2(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_agent_cgroup.XXXXXX", err[512] = "";
    assert_non_null(mkdtemp(dir));
    struct cgroup_root *r = (struct cgroup_root *)1;
    assert_int_equal(cgroup_root_open(dir, &r, err, sizeof(err)), GPO_ENOTSUP);
    assert_ptr_equal(r, (struct cgroup_root *)1);
    assert_non_null(strstr(err, dir));
    assert_non_null(strstr(err, "not on a cgroup v2 filesystem"));
    assert_int_equal(cgroup_root_open("relative/dir", &r, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "relative/dir"));
    rmdir(dir);
    assert_int_equal(cgroup_root_open(dir, &r, err, sizeof(err)), GPO_ENOTSUP);
    assert_non_null(strstr(err, "No such file or directory"));
}

static void cgroup_root_open_auto_uses_cgroup2_mount(void **state)
{
    struct env *e = *state;
    char want[CGROUP_PATH_MAX + 16], err[512] = "";
    snprintf(want, sizeof(want), "%s/gpuorch", e->mount);
    bool existed = access(want, F_OK) == 0;
    struct cgroup_root *r = NULL;
    assert_int_equal(cgroup_root_open("auto", &r, err, sizeof(err)), 0);
    assert_string_equal(cgroup_root_path(r), want);
    cgroup_root_close(r);
    r = NULL;
    assert_int_equal(cgroup_root_open(NULL, &r, err, sizeof(err)), 0);
    assert_string_equal(cgroup_root_path(r), want);
    cgroup_root_close(r);
    if (!existed)
        rmdir(want);
    /* The probe child is gone again. */
    char probe[CGROUP_PATH_MAX + 64];
    snprintf(probe, sizeof(probe), "%s/gpuorch-probe.%ld", e->dir, (long)getpid());
    assert_int_equal(access(probe, F_OK), -1);
}

static void cgroup_create_makes_attempt_cgroup_and_reuses_it(void **state)
{
    struct env *e = *state;
    char path[CGROUP_PATH_MAX], again[CGROUP_PATH_MAX], want[CGROUP_PATH_MAX + 32];
    snprintf(want, sizeof(want), "%s/job-7.2", e->dir);
    create_ok(e, 7, 2, 0, 0, path, sizeof(path));
    assert_string_equal(path, want);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    create_ok(e, 7, 2, 0, 0, again, sizeof(again)); /* a restart reuses it */
    assert_string_equal(again, want);

    char err[512] = "", small[8] = "unset";
    assert_int_equal(cgroup_create(e->root, 0, 1, 0, 0, path, sizeof(path), err, sizeof(err)),
                     GPO_EINVAL);
    assert_int_equal(cgroup_create(e->root, 1, 0, 0, 0, path, sizeof(path), err, sizeof(err)),
                     GPO_EINVAL);
    assert_int_equal(cgroup_create(e->root, 1, 1, 0, -1, path, sizeof(path), err, sizeof(err)),
                     GPO_EINVAL);
    assert_int_equal(cgroup_create(e->root, 8, 1, 0, 0, small, sizeof(small), err, sizeof(err)),
                     GPO_EINVAL);
    assert_string_equal(small, "unset");
    assert_int_equal(cgroup_remove(want, err, sizeof(err)), 0);
    assert_int_equal(access(want, F_OK), -1);
    assert_int_equal(cgroup_remove(want, err, sizeof(err)), 0); /* gone already: fine */
}

static void cgroup_create_writes_limits_where_controllers_exist(void **state)
{
    struct env *e = *state;
    bool cpu = cgroup_root_has(e->root, "cpu"), mem = cgroup_root_has(e->root, "memory");
    assert_false(cgroup_root_has(e->root, "bogus"));
    char path[CGROUP_PATH_MAX], text[128], err[512] = "";
    create_ok(e, 9, 1, 1500, 256, path, sizeof(path));
    if (mem) {
        read_file(path, "memory.max", text, sizeof(text));
        assert_string_equal(text, "268435456\n");
    }
    if (cpu) {
        read_file(path, "cpu.max", text, sizeof(text));
        assert_string_equal(text, "150000 100000\n");
    }
    /* The same attempt again, without limits: they are lifted. */
    create_ok(e, 9, 1, 0, 0, path, sizeof(path));
    if (mem) {
        read_file(path, "memory.max", text, sizeof(text));
        assert_string_equal(text, "max\n");
    }
    if (cpu) {
        read_file(path, "cpu.max", text, sizeof(text));
        assert_string_equal(text, "max 100000\n");
        create_ok(e, 9, 1, 5, 0, path, sizeof(path)); /* under the kernel's minimum */
        read_file(path, "cpu.max", text, sizeof(text));
        assert_string_equal(text, "1000 100000\n");
    }
    assert_int_equal(cgroup_remove(path, err, sizeof(err)), 0);
}

static void cgroup_attached_process_shows_in_pids_and_blocks_remove(void **state)
{
    struct env *e = *state;
    char path[CGROUP_PATH_MAX], err[512] = "";
    create_ok(e, 10, 1, 0, 0, path, sizeof(path));
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        char c;
        close(p[1]);
        _exit(read(p[0], &c, 1) == 0 ? 0 : 1);
    }
    close(p[0]);
    assert_int_equal(cgroup_attach(path, child, err, sizeof(err)), 0);
    pid_t *pids = NULL;
    size_t n = 0;
    assert_int_equal(cgroup_pids(path, &pids, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 1);
    assert_int_equal(pids[0], child);
    free(pids);
    bool populated = false;
    assert_int_equal(cgroup_populated(path, &populated, err, sizeof(err)), 0);
    assert_true(populated);
    assert_int_equal(cgroup_remove(path, err, sizeof(err)), GPO_EBUSY);
    assert_non_null(strstr(err, path));

    close(p[1]); /* the child leaves */
    int st = wait_for(child);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    wait_unpopulated(path);
    assert_int_equal(cgroup_pids(path, &pids, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 0);
    assert_null(pids);
    assert_int_equal(cgroup_remove(path, err, sizeof(err)), 0);
    assert_int_equal(cgroup_attach(path, getpid(), err, sizeof(err)), GPO_ENOENT);
}

/* Forks a child that joins `path` and forks a grandchild that calls setsid;
 * both then wait forever. Returns their pids once the grandchild's setsid is
 * done. */
static void spawn_pair(const char *path, pid_t *ret_child, pid_t *ret_grandchild)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        if (cgroup_attach(path, 0, NULL, 0) != 0)
            _exit(1);
        pid_t g = fork();
        if (g == 0) {
            pid_t me = setsid();
            if (write(p[1], &me, sizeof(me)) != sizeof(me))
                _exit(1);
            for (;;)
                pause();
        }
        for (;;)
            pause();
    }
    close(p[1]);
    pid_t g = 0;
    assert_int_equal(read(p[0], &g, sizeof(g)), sizeof(g));
    close(p[0]);
    assert_true(g > 0);
    assert_int_equal(getsid(g), g);
    *ret_child = child;
    *ret_grandchild = g;
}

static void cgroup_kill_ends_every_process_including_setsid_child(void **state)
{
    struct env *e = *state;
    char path[CGROUP_PATH_MAX], err[512] = "";
    create_ok(e, 11, 1, 0, 0, path, sizeof(path));
    pid_t child, grandchild;
    spawn_pair(path, &child, &grandchild);
    pid_t *pids = NULL;
    size_t n = 0;
    assert_int_equal(cgroup_pids(path, &pids, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 2);
    assert_true(has_pid(pids, n, child) && has_pid(pids, n, grandchild));
    free(pids);

    assert_int_equal(cgroup_kill(path, err, sizeof(err)), 0);
    int st = wait_for(child);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* Orphaned by the child's death, reparented to this subreaper. */
    st = wait_for(grandchild);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    wait_unpopulated(path);
    assert_int_equal(cgroup_kill(path, err, sizeof(err)), 0); /* empty: nothing to do */
    assert_int_equal(cgroup_remove(path, err, sizeof(err)), 0);
    assert_int_equal(cgroup_kill(path, err, sizeof(err)), GPO_ENOENT);
}

static void cgroup_signal_reaches_each_process(void **state)
{
    struct env *e = *state;
    char path[CGROUP_PATH_MAX], err[512] = "";
    create_ok(e, 12, 1, 0, 0, path, sizeof(path));
    pid_t child, grandchild;
    spawn_pair(path, &child, &grandchild);
    assert_int_equal(cgroup_signal(path, 0, err, sizeof(err)), GPO_EINVAL);
    assert_int_equal(cgroup_signal(path, SIGTERM, err, sizeof(err)), 0);
    int st = wait_for(child);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
    st = wait_for(grandchild);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
    wait_unpopulated(path);
    assert_int_equal(cgroup_signal(path, SIGTERM, err, sizeof(err)), 0); /* none left */
    assert_int_equal(cgroup_remove(path, err, sizeof(err)), 0);
    assert_int_equal(cgroup_signal(path, SIGTERM, err, sizeof(err)), GPO_ENOENT);
    bool populated;
    assert_int_equal(cgroup_populated(path, &populated, err, sizeof(err)), GPO_ENOENT);
    assert_non_null(strstr(err, path));
}

enum { NEED_CGROUP = 1 << 0, NEED_LIMITS = 1 << 1 };

int main(void)
{
    struct env e = {0};
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
        return 1;
    env_init(&e);
    bool limits = e.root && (cgroup_root_has(e.root, "cpu") || cgroup_root_has(e.root, "memory"));
    const struct {
        struct CMUnitTest t;
        unsigned needs;
    } all[] = {
        {cmocka_unit_test(cgroup_root_open_refuses_directory_not_on_cgroup2), 0},
        {cmocka_unit_test_prestate(cgroup_root_open_auto_uses_cgroup2_mount, &e), NEED_CGROUP},
        {cmocka_unit_test_prestate(cgroup_create_makes_attempt_cgroup_and_reuses_it, &e),
         NEED_CGROUP},
        {cmocka_unit_test_prestate(cgroup_create_writes_limits_where_controllers_exist, &e),
         NEED_CGROUP | NEED_LIMITS},
        {cmocka_unit_test_prestate(cgroup_attached_process_shows_in_pids_and_blocks_remove, &e),
         NEED_CGROUP},
        {cmocka_unit_test_prestate(cgroup_kill_ends_every_process_including_setsid_child, &e),
         NEED_CGROUP},
        {cmocka_unit_test_prestate(cgroup_signal_reaches_each_process, &e), NEED_CGROUP},
    };
    /* cmocka 1.1's skip() prints "not ok ... # SKIP", which meson counts as a
     * failure: tests that cannot run here are left out, with the reason. */
    struct CMUnitTest run[sizeof(all) / sizeof(all[0])];
    size_t n = 0;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if ((all[i].needs & NEED_CGROUP) && !e.root)
            printf("# SKIP %s: no writable cgroup v2: %s\n", all[i].t.name, e.why);
        else if ((all[i].needs & NEED_LIMITS) && !limits)
            printf("# SKIP %s: %s offers neither cpu nor memory to its children\n", all[i].t.name,
                   e.dir);
        else
            run[n++] = all[i].t;
    }
    fflush(stdout);
    int rc = _cmocka_run_group_tests("agent_cgroup", run, n, NULL, NULL);
    env_release(&e);
    return rc;
}

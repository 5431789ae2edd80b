/* test_agent_cgroup.c - cgroups through cgroup.h, on the machine's real
 * cgroup filesystems: a root that is not on a cgroup filesystem is refused
 * with its path, the automatic root is found (and is what the layout says),
 * the root gets both the cpu and the memory controller (on cgroup v2, or
 * from their v1 hierarchies on a hybrid machine), an attempt's cgroup is made
 * (and reused, and its v1 directory made again should the root's have gone),
 * its limits written, its CPU weight proportional to its CPUs,
 * a process over its memory limit is killed by the kernel and counted, a
 * process moved in shows up in its pids, cgroup_kill ends every process (a
 * child that called setsid included; also on a root on a v1 hierarchy,
 * without cgroup.kill), cgroup_signal reaches each one, and an empty cgroup
 * is removed while a populated one is refused with GPO_EBUSY.
 *
 * The tests work under roots of their own, MOUNT/gpuorch-test.PID (the
 * cgroup2 mount's, or without one a v1 hierarchy's) and a v1 hierarchy's
 * gpuorch-test-v1.PID, and the directories the roots make in the v1
 * hierarchies; all are removed at the end. As root, a machine without the
 * cpu or memory controller fails the tests that need them, naming what is
 * missing; only without root (no cgroup writable) are the tests left out,
 * with a "# SKIP" line that says why. The test process is a child
 * subreaper, so processes orphaned by a kill are reaped here. No timing
 * assertions: waits poll with a deadline that only guards against a hang. */
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
    char mount[CGROUP_PATH_MAX - 64]; /* where the automatic root is */
    char dir[CGROUP_PATH_MAX];        /* this run's root, under the mount */
    struct cgroup_root *root;         /* NULL: no writable cgroup here */
    char why[2048];                   /* why root is NULL */
    struct cgroup_layout layout;      /* what "auto" would use */
};

/* Finds the mount and makes this run's root; e->root stays NULL (with the
 * reason in e->why) where there is no writable cgroup. */
static void env_init(struct env *e)
{
    if (cgroup_layout_read(&e->layout, e->why, sizeof(e->why)) != 0)
        return;
    snprintf(e->mount, sizeof(e->mount), "%.*s",
             (int)(strrchr(e->layout.root, '/') - e->layout.root), e->layout.root);
    snprintf(e->dir, sizeof(e->dir), "%s/gpuorch-test.%ld", e->mount, (long)getpid());
    if (mkdir(e->dir, 0755) < 0) {
        snprintf(e->why, sizeof(e->why), "mkdir %s: %s", e->dir, strerror(errno));
        e->dir[0] = '\0';
        return;
    }
    if (cgroup_root_open(e->dir, &e->root, e->why, sizeof(e->why)) != 0)
        e->root = NULL;
}

/* Removes root `dir`'s job-* cgroups and then `dir` itself, each with its
 * v1 directories. */
static void remove_root(const char *dir)
{
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        char path[CGROUP_PATH_MAX + 256];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (strncmp(de->d_name, "job-", 4) == 0)
            cgroup_remove(path, NULL, 0);
    }
    if (d)
        closedir(d);
    cgroup_remove(dir, NULL, 0);
}

static void env_release(struct env *e)
{
    if (e->dir[0])
        remove_root(e->dir);
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
    char path[2 * CGROUP_PATH_MAX];
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

static void cgroup_root_open_refuses_directory_not_on_cgroup_fs(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_agent_cgroup.XXXXXX", err[512] = "";
    assert_non_null(mkdtemp(dir));
    struct cgroup_root *r = (struct cgroup_root *)1;
    assert_int_equal(cgroup_root_open(dir, &r, err, sizeof(err)), GPO_ENOTSUP);
    assert_ptr_equal(r, (struct cgroup_root *)1);
    assert_non_null(strstr(err, dir));
    assert_non_null(strstr(err, "not on a cgroup filesystem"));
    assert_int_equal(cgroup_root_open("relative/dir", &r, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "relative/dir"));
    rmdir(dir);
    assert_int_equal(cgroup_root_open(dir, &r, err, sizeof(err)), GPO_ENOTSUP);
    assert_non_null(strstr(err, "No such file or directory"));
}

/* Whether each of the layout's directories exists now. */
static void layout_exists(const struct cgroup_layout *l, bool out[3])
{
    const char *dirs[3] = {l->root, l->cpu.dir, l->memory.dir};
    for (int i = 0; i < 3; i++)
        out[i] = dirs[i][0] && access(dirs[i], F_OK) == 0;
}

static void cgroup_root_open_auto_uses_layout_root(void **state)
{
    struct env *e = *state;
    const struct cgroup_layout *l = &e->layout;
    char err[512] = "";
    bool existed[3];
    layout_exists(l, existed);
    struct cgroup_root *r = NULL;
    assert_int_equal(cgroup_root_open("auto", &r, err, sizeof(err)), 0);
    assert_string_equal(cgroup_root_path(r), l->root);
    /* What it got is what the layout said it would. */
    assert_int_equal(cgroup_root_kind(r, "cpu"), l->cpu.kind);
    assert_int_equal(cgroup_root_kind(r, "memory"), l->memory.kind);
    if (l->memory.kind != CGROUP_NONE)
        assert_string_equal(cgroup_root_dir(r, "memory"), l->memory.dir);
    if (l->cpu.kind != CGROUP_NONE)
        assert_string_equal(cgroup_root_dir(r, "cpu"), l->cpu.dir);
    cgroup_root_close(r);
    r = NULL;
    assert_int_equal(cgroup_root_open(NULL, &r, err, sizeof(err)), 0);
    assert_string_equal(cgroup_root_path(r), l->root);
    cgroup_root_close(r);
    /* Leaves the machine as it was: what the test made goes again. */
    const char *dirs[3] = {l->root, l->cpu.dir, l->memory.dir};
    for (int i = 2; i >= 0; i--)
        if (!existed[i] && dirs[i][0])
            rmdir(dirs[i]);
    /* The probe child is gone again. */
    char probe[CGROUP_PATH_MAX + 64];
    snprintf(probe, sizeof(probe), "%s/gpuorch-probe.%ld", e->dir, (long)getpid());
    assert_int_equal(access(probe, F_OK), -1);
}

static void cgroup_root_gets_cpu_and_memory_controllers(void **state)
{
    struct env *e = *state;
    const char *names[] = {"cpu", "memory"};
    if (!e->root) {
        print_error("running as root, but no cgroup is writable here: %s\n", e->why);
        fail();
    }
    for (int i = 0; i < 2; i++) {
        if (cgroup_root_has(e->root, names[i]))
            continue;
        print_error("%s has no %s controller: cgroup2 at %s does not offer it and no cgroup v1 "
                    "hierarchy has it mounted (see /proc/self/mountinfo and /proc/cgroups)\n",
                    e->dir, names[i], e->mount);
        fail();
    }
    assert_false(cgroup_root_has(e->root, "bogus"));
    assert_int_equal(cgroup_root_kind(e->root, "bogus"), CGROUP_NONE);
    assert_null(cgroup_root_dir(e->root, "bogus"));
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

/* Reads controller `ctrl`'s file `name` of e->root's attempt `leaf`. */
static void read_limit(const struct env *e, const char *ctrl, const char *leaf, const char *name,
                       char *buf, size_t len)
{
    char dir[CGROUP_PATH_MAX + 64];
    snprintf(dir, sizeof(dir), "%s/%s", cgroup_root_dir(e->root, ctrl), leaf);
    read_file(dir, name, buf, len);
}

/* The memory limit, its swap companion and the CPU cap of attempt `leaf`,
 * in the files of the version the root has each on, as one line. */
static void limits_text(const struct env *e, const char *leaf, char *out, size_t len)
{
    char mem[64] = "", swap[64] = "", cap[64] = "";
    bool v1mem = cgroup_root_kind(e->root, "memory") == CGROUP_V1;
    bool v1cpu = cgroup_root_kind(e->root, "cpu") == CGROUP_V1;
    read_limit(e, "memory", leaf, v1mem ? "memory.limit_in_bytes" : "memory.max", mem, sizeof(mem));
    char sw[CGROUP_PATH_MAX + 128];
    snprintf(sw, sizeof(sw), "%s/%s/%s", cgroup_root_dir(e->root, "memory"), leaf,
             v1mem ? "memory.memsw.limit_in_bytes" : "memory.swap.max");
    if (access(sw, F_OK) == 0)
        read_limit(e, "memory", leaf, v1mem ? "memory.memsw.limit_in_bytes" : "memory.swap.max",
                   swap, sizeof(swap));
    read_limit(e, "cpu", leaf, v1cpu ? "cpu.cfs_quota_us" : "cpu.max", cap, sizeof(cap));
    mem[strcspn(mem, "\n")] = swap[strcspn(swap, "\n")] = cap[strcspn(cap, "\n")] = '\0';
    snprintf(out, len, "%s|%s|%s", mem, swap[0] ? swap : "-", cap);
}

static void cgroup_create_writes_memory_limit_and_cpu_cap(void **state)
{
    struct env *e = *state;
    bool v1mem = cgroup_root_kind(e->root, "memory") == CGROUP_V1;
    bool v1cpu = cgroup_root_kind(e->root, "cpu") == CGROUP_V1;
    char path[CGROUP_PATH_MAX], text[256], want[256], err[512] = "";
    create_ok(e, 9, 1, 1500, 256, path, sizeof(path));
    limits_text(e, "job-9.1", text, sizeof(text));
    /* Swap, where the kernel accounts it, does not stretch the limit. */
    snprintf(want, sizeof(want), "268435456|%s|%s", v1mem ? "268435456" : "0",
             v1cpu ? "150000" : "150000 100000");
    if (strstr(text, "|-|"))
        snprintf(want, sizeof(want), "268435456|-|%s", v1cpu ? "150000" : "150000 100000");
    assert_string_equal(text, want);
    /* The same attempt again, without limits: they are lifted (v1 reads
     * "no limit" back as the largest page-aligned value). */
    create_ok(e, 9, 1, 0, 0, path, sizeof(path));
    limits_text(e, "job-9.1", text, sizeof(text));
    const char *no_mem = v1mem ? "9223372036854771712" : "max";
    snprintf(want, sizeof(want), "%s|%s|%s", no_mem, strstr(text, "|-|") ? "-" : no_mem,
             v1cpu ? "-1" : "max 100000");
    assert_string_equal(text, want);
    create_ok(e, 9, 1, 5, 0, path, sizeof(path)); /* under the kernel's minimum */
    read_limit(e, "cpu", "job-9.1", v1cpu ? "cpu.cfs_quota_us" : "cpu.max", text, sizeof(text));
    assert_string_equal(text, v1cpu ? "1000\n" : "1000 100000\n");
    assert_int_equal(cgroup_remove(path, err, sizeof(err)), 0);
    char mem_dir[CGROUP_PATH_MAX + 32];
    snprintf(mem_dir, sizeof(mem_dir), "%s/job-9.1", cgroup_root_dir(e->root, "memory"));
    assert_int_equal(access(mem_dir, F_OK), -1); /* its v1 directories went with it */
}

static void cgroup_create_makes_vanished_v1_directory_again(void **state)
{
    struct env *e = *state;
    const char *mem = cgroup_root_dir(e->root, "memory");
    char path[CGROUP_PATH_MAX], text[64], err[512] = "";
    /* Another agent of the same name that stopped took it away. */
    assert_int_equal(rmdir(mem), 0);
    create_ok(e, 24, 1, 0, 48, path, sizeof(path));
    read_limit(e, "memory", "job-24.1", "memory.limit_in_bytes", text, sizeof(text));
    assert_string_equal(text, "50331648\n");
    assert_int_equal(cgroup_remove(path, err, sizeof(err)), 0);
}

/* An attempt's CPU weight: cpu.weight (v2) or cpu.shares (v1). */
static long cpu_weight(const struct env *e, const char *leaf)
{
    char text[64];
    bool v1 = cgroup_root_kind(e->root, "cpu") == CGROUP_V1;
    read_limit(e, "cpu", leaf, v1 ? "cpu.shares" : "cpu.weight", text, sizeof(text));
    return strtol(text, NULL, 10);
}

static void cgroup_create_sets_cpu_weight_proportional_to_cpus(void **state)
{
    struct env *e = *state;
    char one[CGROUP_PATH_MAX], four[CGROUP_PATH_MAX], half[CGROUP_PATH_MAX], none[CGROUP_PATH_MAX];
    char err[512] = "";
    create_ok(e, 20, 1, 1000, 0, one, sizeof(one));
    create_ok(e, 21, 1, 4000, 0, four, sizeof(four));
    create_ok(e, 22, 1, 500, 0, half, sizeof(half));
    create_ok(e, 23, 1, 0, 0, none, sizeof(none));
    long w1 = cpu_weight(e, "job-20.1"), w4 = cpu_weight(e, "job-21.1");
    long wh = cpu_weight(e, "job-22.1"), w0 = cpu_weight(e, "job-23.1");
    /* One CPU gets the kernel's default weight (100, or 1024 shares), as
     * does a job that asks for none. */
    assert_int_equal(w1, cgroup_root_kind(e->root, "cpu") == CGROUP_V1 ? 1024 : 100);
    assert_int_equal(w4, 4 * w1);
    assert_int_equal(wh * 2, w1);
    assert_int_equal(w0, w1);
    const char *all[] = {one, four, half, none};
    for (int i = 0; i < 4; i++)
        assert_int_equal(cgroup_remove(all[i], err, sizeof(err)), 0);
}

/* Forks a child that joins `path` and touches `mib` MiB; returns its wait
 * status. */
static int run_allocation(const char *path, size_t mib)
{
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        if (cgroup_attach(path, 0, NULL, 0) != 0)
            _exit(2);
        size_t n = mib << 20;
        volatile char *p = malloc(n);
        for (size_t i = 0; p && i < n; i += 4096)
            p[i] = 1;
        _exit(p ? 0 : 3);
    }
    return wait_for(child);
}

static void cgroup_process_over_memory_limit_is_killed_and_counted(void **state)
{
    struct env *e = *state;
    char path[CGROUP_PATH_MAX], err[512] = "";
    uint64_t kills = 99;
    create_ok(e, 30, 1, 0, 32, path, sizeof(path));
    assert_int_equal(cgroup_oom_kills(path, &kills, err, sizeof(err)), 0);
    assert_int_equal(kills, 0);
    int st = run_allocation(path, 8); /* within its limit */
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(cgroup_oom_kills(path, &kills, err, sizeof(err)), 0);
    assert_int_equal(kills, 0);
    st = run_allocation(path, 96); /* three times its limit */
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    assert_int_equal(cgroup_oom_kills(path, &kills, err, sizeof(err)), 0);
    assert_int_equal(kills, 1);
    wait_unpopulated(path);
    assert_int_equal(cgroup_remove(path, err, sizeof(err)), 0);
    assert_int_equal(cgroup_oom_kills(path, &kills, err, sizeof(err)), GPO_ENOENT);
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

/* cgroup_kill of spawn_pair's cgroup: both die of SIGKILL, the cgroup
 * empties. */
static void kill_pair_ok(const char *path, pid_t child, pid_t grandchild)
{
    char err[512] = "";
    assert_int_equal(cgroup_kill(path, err, sizeof(err)), 0);
    int st = wait_for(child);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* Orphaned by the child's death, reparented to this subreaper. */
    st = wait_for(grandchild);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    wait_unpopulated(path);
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

    kill_pair_ok(path, child, grandchild);
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

/* The mount point of the v1 hierarchy with `controller` into out; false
 * when there is none. */
static bool v1_mount(const char *controller, char *out, size_t len)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    char line[4096];
    bool found = false;
    while (f && !found && fgets(line, sizeof(line), f)) {
        char point[1024], fstype[64], src[256], opts[1024], want[80];
        const char *sep = strstr(line, " - ");
        if (!sep || sscanf(line, "%*s %*s %*s %*s %1023s", point) != 1 ||
            sscanf(sep + 3, "%63s %255s %1023s", fstype, src, opts) != 3 ||
            strcmp(fstype, "cgroup") != 0)
            continue;
        snprintf(want, sizeof(want), ",%s,", controller);
        char padded[1100];
        snprintf(padded, sizeof(padded), ",%s,", opts);
        if (strstr(padded, want) && (size_t)snprintf(out, len, "%s", point) < len)
            found = true;
    }
    if (f)
        fclose(f);
    return found;
}

/* A root on a v1 hierarchy (a machine without cgroup2, or one that names
 * such a root): its children get cpu and memory from their own hierarchies,
 * and without cgroup.kill, a kill still ends every process. */
static void cgroup_root_on_v1_hierarchy_limits_and_kills(void **state)
{
    (void)state;
    char mnt[CGROUP_PATH_MAX - 128], dir[CGROUP_PATH_MAX], err[512] = "";
    if (!v1_mount("freezer", mnt, sizeof(mnt)) && !v1_mount("memory", mnt, sizeof(mnt))) {
        print_error("no cgroup v1 freezer or memory hierarchy is mounted here\n");
        fail();
    }
    snprintf(dir, sizeof(dir), "%s/gpuorch-test-v1.%ld", mnt, (long)getpid());
    assert_int_equal(mkdir(dir, 0755), 0);
    struct cgroup_root *r = NULL;
    int rc = cgroup_root_open(dir, &r, err, sizeof(err));
    if (rc)
        print_error("cgroup_root_open %s: %s\n", dir, err);
    assert_int_equal(rc, 0);
    struct env e = {.root = r};
    assert_int_equal(cgroup_root_kind(r, "memory"), CGROUP_V1);
    assert_int_equal(cgroup_root_kind(r, "cpu"), CGROUP_V1);

    char path[CGROUP_PATH_MAX], text[64];
    assert_int_equal(cgroup_create(r, 40, 1, 2000, 16, path, sizeof(path), err, sizeof(err)), 0);
    read_limit(&e, "memory", "job-40.1", "memory.limit_in_bytes", text, sizeof(text));
    assert_string_equal(text, "16777216\n");
    assert_int_equal(cpu_weight(&e, "job-40.1"), 2048);
    pid_t child, grandchild;
    spawn_pair(path, &child, &grandchild);
    bool populated = false;
    assert_int_equal(cgroup_populated(path, &populated, err, sizeof(err)), 0);
    assert_true(populated);
    kill_pair_ok(path, child, grandchild);
    uint64_t kills = 9;
    assert_int_equal(cgroup_oom_kills(path, &kills, err, sizeof(err)), 0);
    assert_int_equal(kills, 0);
    int st = run_allocation(path, 48);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    assert_int_equal(cgroup_oom_kills(path, &kills, err, sizeof(err)), 0);
    assert_int_equal(kills, 1);
    wait_unpopulated(path);
    char mem_dir[CGROUP_PATH_MAX + 32];
    snprintf(mem_dir, sizeof(mem_dir), "%s/job-40.1", cgroup_root_dir(r, "memory"));
    assert_int_equal(cgroup_remove(path, err, sizeof(err)), 0);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(access(mem_dir, F_OK), -1);
    cgroup_root_close(r);
    remove_root(dir);
    assert_int_equal(access(dir, F_OK), -1);
}

/* NEED_ROOT: runs as root (and fails where root has no cgroup); the
 * others are left out where what they need is missing, which as root the
 * NEED_ROOT test reports as a failure. */
enum { NEED_CGROUP = 1 << 0, NEED_LIMITS = 1 << 1, NEED_ROOT = 1 << 2, NEED_V1_SIBLING = 1 << 3 };

int main(void)
{
    struct env e = {0};
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
        return 1;
    env_init(&e);
    bool limits = e.root && cgroup_root_has(e.root, "cpu") && cgroup_root_has(e.root, "memory");
    bool v1_sibling = limits && cgroup_root_kind(e.root, "memory") == CGROUP_V1 &&
                      strcmp(cgroup_root_dir(e.root, "memory"), cgroup_root_path(e.root)) != 0;
    const struct {
        struct CMUnitTest t;
        unsigned needs;
    } all[] = {
        {cmocka_unit_test(cgroup_root_open_refuses_directory_not_on_cgroup_fs), 0},
        {cmocka_unit_test_prestate(cgroup_root_open_auto_uses_layout_root, &e), NEED_CGROUP},
        {cmocka_unit_test_prestate(cgroup_root_gets_cpu_and_memory_controllers, &e), NEED_ROOT},
        {cmocka_unit_test_prestate(cgroup_create_makes_attempt_cgroup_and_reuses_it, &e),
         NEED_CGROUP},
        {cmocka_unit_test_prestate(cgroup_create_writes_memory_limit_and_cpu_cap, &e),
         NEED_CGROUP | NEED_LIMITS},
        {cmocka_unit_test_prestate(cgroup_create_sets_cpu_weight_proportional_to_cpus, &e),
         NEED_CGROUP | NEED_LIMITS},
        {cmocka_unit_test_prestate(cgroup_create_makes_vanished_v1_directory_again, &e),
         NEED_CGROUP | NEED_LIMITS | NEED_V1_SIBLING},
        {cmocka_unit_test_prestate(cgroup_process_over_memory_limit_is_killed_and_counted, &e),
         NEED_CGROUP | NEED_LIMITS},
        {cmocka_unit_test_prestate(cgroup_attached_process_shows_in_pids_and_blocks_remove, &e),
         NEED_CGROUP},
        {cmocka_unit_test_prestate(cgroup_kill_ends_every_process_including_setsid_child, &e),
         NEED_CGROUP},
        {cmocka_unit_test_prestate(cgroup_signal_reaches_each_process, &e), NEED_CGROUP},
        {cmocka_unit_test(cgroup_root_on_v1_hierarchy_limits_and_kills), NEED_ROOT},
    };
    /* cmocka 1.1's skip() prints "not ok ... # SKIP", which meson counts as a
     * failure: tests that cannot run here are left out, with the reason. */
    struct CMUnitTest run[sizeof(all) / sizeof(all[0])];
    size_t n = 0;
    bool root_user = geteuid() == 0;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if ((all[i].needs & NEED_ROOT) && !root_user)
            printf("# SKIP %s: not root, so no cgroup is writable\n", all[i].t.name);
        else if ((all[i].needs & NEED_CGROUP) && !e.root)
            printf("# %s %s: no writable cgroup: %s\n", root_user ? "left out" : "SKIP",
                   all[i].t.name, e.why);
        else if ((all[i].needs & NEED_V1_SIBLING) && limits && !v1_sibling)
            printf("# SKIP %s: memory is on cgroup v2 here, in %s itself\n", all[i].t.name, e.dir);
        else if ((all[i].needs & NEED_LIMITS) && !limits)
            printf("# left out %s: %s lacks the cpu or memory controller (the test "
                   "cgroup_root_gets_cpu_and_memory_controllers fails on it)\n",
                   all[i].t.name, e.dir);
        else
            run[n++] = all[i].t;
    }
    fflush(stdout);
    int rc = _cmocka_run_group_tests("agent_cgroup", run, n, NULL, NULL);
    env_release(&e);
    return rc;
}

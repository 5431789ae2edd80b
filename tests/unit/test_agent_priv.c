/* test_agent_priv.c - the agent's privileged half, with real processes: a
 * privileged process started here (as root) launches the built
 * `gpuorch-shim` as gpuorch-test1 (a shim others may write, or in a folder
 * others may write, is refused at start), and the status file shows the command's
 * exit; each bad field of a launch is refused with a message naming it (a
 * table), and so is each malformed wire request; an attempt is launched at
 * most once; SIGTERM then SIGKILL stop a command that ignores SIGTERM, both
 * with process groups and with cgroups, and with cgroups SIGKILL reaches a
 * child that called setsid; finished shims are reaped; shims outlive the
 * privileged process; a dead privileged process gives GPO_EPIPE; the
 * attribute request names the attempt of a command by its environment and
 * nothing for other processes; a log open passes the job's log back over
 * the socket and refuses a FIFO and another user's file without blocking;
 * the read requests' bad fields are refused by name.
 *
 * Needs root, the gpuorch-test1 and gpuorch-test2 accounts and GPUORCH_SHIM
 * (the built gpuorch-shim); the cgroup tests also a writable cgroup v2. Tests that
 * cannot run are left out with a "# SKIP" line that says why (a non-root
 * privileged side is not tested). Files live under a mkdtemp directory of
 * mode 0755, so the test user can reach its working directories; the cgroups
 * under MOUNT/gpuorch-test-priv.PID; both are removed at the end. The test
 * process is a child subreaper and reaps what its commands orphan. No timing
 * assertions: waits poll with a deadline that only guards against a hang. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
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
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "agent/cgroup.h"
#include "agent/journal.h"
#include "agent/priv.h"
#include "agent/shim.h"
#include "tmptree.h"
#include "util/fsutil.h"
#include "util/stepframe.h"
#include "base/banned.h"

/* Guards against a hang only; nothing asserts how long anything takes. */
#define DEADLINE_S 60

struct env {
    char base[64]; /* mkdtemp, 0755 */
    char bin[PATH_MAX];
    bool ok;        /* root, accounts, binary */
    char why[1024]; /* why not */
    uid_t uid1;
    gid_t gid1, gid2;
    char home1[256];
    struct priv *pg; /* process groups */
    struct priv *cg; /* cgroups; NULL when there are none */
    char cg_dir[CGROUP_PATH_MAX];
    char why_cg[2048];
    uint64_t next_job;
    int seq;
    struct {
        struct priv *p;
        uint64_t job;
    } launched[64]; /* this test's attempts, killed in its teardown */
    size_t nlaunched;
    char work[256]; /* this test's working directory, mode 0777 */
};

/* The state directory of e->pg or, with `cgroups`, of e->cg. */
static void state_dir(const struct env *e, bool cgroups, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", e->base, cgroups ? "state-cg" : "state");
}

static void attempt_path(const struct env *e, const struct priv *p, uint64_t job, uint32_t attempt,
                         const char *name, char *buf, size_t len)
{
    char st[128];
    state_dir(e, p != e->pg, st, sizeof(st));
    snprintf(buf, len, "%s/attempts/%llu.%u%s%s", st, (unsigned long long)job, attempt,
             name ? "/" : "", name ? name : "");
}

static int start_priv(const struct env *e, const char *state, const char *cgroup_root,
                      struct priv **ret, char *err, size_t errlen)
{
    if (mkdir(state, 0755) < 0 && errno != EEXIST)
        return -1;
    struct priv_config cfg = {.state_dir = state,
                              .shim_exe = e->bin,
                              .cgroup_root = cgroup_root,
                              .allow_root = false,
                              .agent_gid = e->gid2};
    return priv_start(&cfg, ret, err, errlen);
}

static void probe_host(struct env *e)
{
    const char *bin = getenv("GPUORCH_SHIM");
    struct passwd *p2 = getpwnam("gpuorch-test2"), *p1 = getpwnam("gpuorch-test1");
    if (geteuid() != 0)
        snprintf(e->why, sizeof(e->why), "not running as root");
    else if (!p1 || !p2)
        snprintf(e->why, sizeof(e->why),
                 "no gpuorch-test1 and gpuorch-test2 accounts (scripts/setup.sh makes them)");
    else if (!bin || bin[0] != '/' || access(bin, X_OK) < 0)
        snprintf(e->why, sizeof(e->why), "GPUORCH_SHIM names no built gpuorch-shim");
    else {
        e->ok = true;
        snprintf(e->bin, sizeof(e->bin), "%s", bin);
        e->uid1 = p1->pw_uid;
        e->gid1 = p1->pw_gid;
        snprintf(e->home1, sizeof(e->home1), "%s", p1->pw_dir);
        e->gid2 = p2->pw_gid;
    }
}

/* Everything the tests share, made before cmocka runs (and before any thread:
 * the privileged processes are forks of this one). */
static int env_init(struct env *e)
{
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
        return -1;
    snprintf(e->base, sizeof(e->base), "/tmp/test_agent_priv.XXXXXX");
    if (!mkdtemp(e->base) || chmod(e->base, 0755) < 0)
        return -1;
    /* The commands must not see it: their environment is the request's. */
    setenv("GPO_PRIV_TEST_LEAK", "1", 1);
    e->next_job = 1;
    probe_host(e);
    if (!e->ok)
        return 0;
    char state[128], err[PRIV_MSG_MAX];
    state_dir(e, false, state, sizeof(state));
    if (start_priv(e, state, NULL, &e->pg, err, sizeof(err)) != 0) {
        snprintf(e->why, sizeof(e->why), "priv_start: %s", err);
        e->ok = false;
        return 0;
    }
    char mnt[CGROUP_PATH_MAX - 64];
    if (cgroup_mount_find(mnt, sizeof(mnt), e->why_cg, sizeof(e->why_cg)) != 0)
        return 0;
    snprintf(e->cg_dir, sizeof(e->cg_dir), "%s/gpuorch-test-priv.%ld", mnt, (long)getpid());
    if (mkdir(e->cg_dir, 0755) < 0) {
        snprintf(e->why_cg, sizeof(e->why_cg), "mkdir %s: %s", e->cg_dir, strerror(errno));
        e->cg_dir[0] = '\0';
        return 0;
    }
    state_dir(e, true, state, sizeof(state));
    if (start_priv(e, state, e->cg_dir, &e->cg, err, sizeof(err)) != 0) {
        snprintf(e->why_cg, sizeof(e->why_cg), "priv_start: %s", err);
    } else if (!priv_has_cgroups(e->cg)) {
        snprintf(e->why_cg, sizeof(e->why_cg), "%s", priv_cgroup_note(e->cg));
        priv_stop(e->cg);
        e->cg = NULL;
    }
    return 0;
}

static void env_release(struct env *e)
{
    priv_stop(e->pg);
    priv_stop(e->cg);
    tmptree_remove(e->base);
    if (e->cg_dir[0]) {
        DIR *d = opendir(e->cg_dir);
        for (struct dirent *de; d && (de = readdir(d));) {
            char path[CGROUP_PATH_MAX + 256];
            snprintf(path, sizeof(path), "%s/%s", e->cg_dir, de->d_name);
            if (strncmp(de->d_name, "job-", 4) == 0)
                cgroup_remove(path, NULL, 0); /* with its v1 directories */
        }
        if (d)
            closedir(d);
        cgroup_remove(e->cg_dir, NULL, 0);
    }
}

static int test_setup(void **state)
{
    struct env *e = *state;
    snprintf(e->work, sizeof(e->work), "%s/work%d", e->base, e->seq++);
    if (mkdir(e->work, 0777) < 0 || chmod(e->work, 0777) < 0)
        return -1;
    return 0;
}

/* Whether the test passed or not, none of its processes outlive it. */
static int test_teardown(void **state)
{
    struct env *e = *state;
    char err[PRIV_MSG_MAX];
    for (size_t i = 0; i < e->nlaunched; i++)
        priv_signal(e->launched[i].p, e->launched[i].job, 1, SIGKILL, err, sizeof(err));
    e->nlaunched = 0;
    return 0;
}

/* Reaps what the commands orphaned (they are reparented to this subreaper),
 * but never a privileged process, which priv_stop reaps. */
static void reap_orphans(const struct env *e)
{
    pid_t keep[2] = {priv_pid(e->pg), priv_pid(e->cg)};
    DIR *d = opendir("/proc/self/task");
    for (struct dirent *de; d && (de = readdir(d));) {
        char path[300], buf[4096];
        snprintf(path, sizeof(path), "/proc/self/task/%s/children", de->d_name);
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        for (char *p = buf, *end; *p; p = end) {
            long pid = strtol(p, &end, 10);
            if (end == p)
                break;
            if (pid != keep[0] && pid != keep[1])
                waitpid((pid_t)pid, NULL, WNOHANG);
        }
    }
    if (d)
        closedir(d);
}

static void wait_status(const struct env *e, const struct priv *p, uint64_t job,
                        struct shim_status *s)
{
    char dir[512], err[512] = "";
    attempt_path(e, p, job, 1, NULL, dir, sizeof(dir));
    time_t end = time(NULL) + DEADLINE_S;
    int rc;
    while ((rc = shim_read_status(dir, s, err, sizeof(err))) == GPO_ENOENT && time(NULL) < end)
        tmptree_pause();
    if (rc)
        print_error("shim_read_status: %s\n", err);
    assert_int_equal(rc, 0);
}

/* Polls priv_cleanup until the attempt has no process left. */
static void wait_cleaned(const struct env *e, struct priv *p, uint64_t job)
{
    time_t end = time(NULL) + DEADLINE_S;
    bool empty = false;
    char err[PRIV_MSG_MAX] = "";
    while (time(NULL) < end) {
        assert_int_equal(priv_cleanup(p, job, 1, &empty, err, sizeof(err)), 0);
        if (empty)
            break;
        reap_orphans(e);
        tmptree_pause();
    }
    assert_true(empty);
}

static const char *const good_env[] = {"PATH=/usr/bin:/bin", "GPO_X=1"};

/* A request that the privileged side accepts: a shell line as gpuorch-test1,
 * in this test's working directory. */
static struct priv_launch request(const struct env *e, uint64_t job, const char *const *argv,
                                  size_t argc)
{
    return (struct priv_launch){.job = job,
                                .attempt = 1,
                                .unix_user = "gpuorch-test1",
                                .workdir = e->work,
                                .argv = argv,
                                .argc = argc,
                                .env = good_env,
                                .nenv = 2};
}

static pid_t launch_ok(struct env *e, struct priv *p, const struct priv_launch *req,
                       uint64_t *ret_start)
{
    pid_t pid = 0;
    uint64_t start = 0;
    char err[PRIV_MSG_MAX] = "";
    int rc = priv_launch(p, req, &pid, &start, err, sizeof(err));
    if (rc)
        print_error("priv_launch: %s (%s)\n", gpo_strerror(rc), err);
    assert_int_equal(rc, 0);
    assert_true(pid > 0);
    if ((p == e->pg || p == e->cg) && e->nlaunched < sizeof(e->launched) / sizeof(e->launched[0])) {
        e->launched[e->nlaunched].p = p;
        e->launched[e->nlaunched++].job = req->job;
    }
    if (ret_start)
        *ret_start = start;
    return pid;
}

static void priv_launch_runs_command_as_user_and_reports_exit_0(void **state)
{
    struct env *e = *state;
    uint64_t job = e->next_job++;
    const char *argv[] = {"sh", "-c", "id -u; echo \"$HOME $GPO_X ${GPO_PRIV_TEST_LEAK:-none}\""};
    struct priv_launch req = request(e, job, argv, 3);
    launch_ok(e, e->pg, &req, NULL);
    struct shim_status s;
    wait_status(e, e->pg, job, &s);
    assert_false(s.signaled);
    assert_int_equal(s.exit_code, 0);
    assert_string_equal(s.error, "");

    char path[512], text[512], want[512];
    attempt_path(e, e->pg, job, 1, "stdout", path, sizeof(path));
    tmptree_read_text(path, text, sizeof(text));
    snprintf(want, sizeof(want), "%ld\n%s 1 none\n", (long)e->uid1, e->home1);
    assert_string_equal(text, want);

    /* The directory and what the shim wrote in it: readable by agent_gid. */
    struct stat st;
    attempt_path(e, e->pg, job, 1, NULL, path, sizeof(path));
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 02750);
    assert_int_equal(st.st_gid, e->gid2);
    attempt_path(e, e->pg, job, 1, "status", path, sizeof(path));
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_gid, e->gid2);

    attempt_path(e, e->pg, job, 1, "attempt.json", path, sizeof(path));
    json_error_t jerr;
    json_t *o = json_load_file(path, 0, &jerr);
    assert_non_null(o);
    assert_int_equal(json_integer_value(json_object_get(o, "uid")), e->uid1);
    assert_int_equal(json_integer_value(json_object_get(o, "gid")), e->gid1);
    attempt_path(e, e->pg, job, 1, "stdout", want, sizeof(want));
    assert_string_equal(json_string_value(json_object_get(o, "stdout")), want);
    attempt_path(e, e->pg, job, 1, "stderr", want, sizeof(want));
    assert_string_equal(json_string_value(json_object_get(o, "stderr")), want);
    assert_string_equal(json_string_value(json_object_get(o, "cgroup")), "");
    json_decref(o);
}

static void priv_job_environment_reaches_command_but_not_root_shim(void **state)
{
    struct env *e = *state;
    uint64_t job = e->next_job++;
    /* Were the shim exec'd with it, ld.so would complain in shim.log. */
    const char *env[] = {"PATH=/usr/bin:/bin", "LD_PRELOAD=/gpuorch-no-such-preload.so"};
    const char *argv[] = {"sh", "-c", "echo \"$LD_PRELOAD\""};
    struct priv_launch req = request(e, job, argv, 3);
    req.env = env;
    launch_ok(e, e->pg, &req, NULL);
    struct shim_status s;
    wait_status(e, e->pg, job, &s);
    assert_int_equal(s.exit_code, 0);
    char path[512], text[4096];
    attempt_path(e, e->pg, job, 1, "stdout", path, sizeof(path));
    tmptree_read_text(path, text, sizeof(text));
    assert_string_equal(text, "/gpuorch-no-such-preload.so\n");
    attempt_path(e, e->pg, job, 1, "shim.log", path, sizeof(path));
    tmptree_read_text(path, text, sizeof(text));
    assert_null(strstr(text, "gpuorch-no-such-preload"));
}

/* One way to spoil the good request; the message must start with `field`. */
struct bad_case {
    const char *field;
    int rc;
    enum { JOB_ZERO = 1, JOB_HUGE, ATTEMPT_ZERO, NO_USER, NO_ARGV, MANY_ENV, HUGE_ARG } what;
    const char *user, *workdir, *out, *err, *arg0, *env0;
    int64_t mem;
    uint32_t cpu;
};

static const struct bad_case bad_cases[] = {
    {"job", GPO_EINVAL, .what = JOB_ZERO},
    {"job", GPO_EINVAL, .what = JOB_HUGE},
    {"attempt", GPO_EINVAL, .what = ATTEMPT_ZERO},
    {"unix_user", GPO_EINVAL, .user = "bad name"},
    {"unix_user", GPO_EINVAL, .user = "-dash"},
    {"unix_user", GPO_EINVAL, .user = "gpuorch-no-such-user"},
    {"unix_user", GPO_EINVAL, .user = "root"},
    {"unix_user", GPO_EINVAL, .what = NO_USER}, /* the agent's own: root */
    {"unix_user", GPO_EINVAL, .user = "a-user-name-longer-than-thirty-two-bytes"},
    {"workdir", GPO_EINVAL, .workdir = "relative/dir"},
    {"workdir", GPO_EINVAL, .workdir = "/tmp/../etc"},
    {"workdir", GPO_EINVAL, .workdir = "/tmp/.."},
    {"stdout_path", GPO_EINVAL, .out = "out.txt"},
    {"stderr_path", GPO_EINVAL, .err = "/var/../etc/shadow"},
    {"argc", GPO_EINVAL, .what = NO_ARGV},
    {"argv[0]", GPO_EINVAL, .arg0 = ""},
    {"env[0]", GPO_EINVAL, .env0 = "1BAD=x"},
    {"env[0]", GPO_EINVAL, .env0 = "BAD-NAME=x"},
    {"env[0]", GPO_EINVAL, .env0 = "NOEQUALS"},
    {"env[0]", GPO_EINVAL, .env0 = "=x"},
    {"mem_mib", GPO_EINVAL, .mem = -1},
    {"mem_mib", GPO_EINVAL, .mem = INT64_MAX},
    {"cpu_milli", GPO_EINVAL, .cpu = 2000000000u},
    {"argc + nenv", GPO_EINVAL, .what = MANY_ENV},
    {"argv and env", GPO_EINVAL, .what = HUGE_ARG},
};

static void priv_launch_refuses_each_bad_field_by_name(void **state)
{
    struct env *e = *state;
    size_t nenv = PRIV_STRINGS_N + 1;
    const char **many = calloc(nenv, sizeof(*many));
    char *huge = malloc(PRIV_STRINGS_MAX + 1);
    assert_non_null(many);
    assert_non_null(huge);
    for (size_t i = 0; i < nenv; i++)
        many[i] = "A=1";
    memset(huge, 'x', PRIV_STRINGS_MAX);
    huge[PRIV_STRINGS_MAX] = '\0';
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const struct bad_case *c = &bad_cases[i];
        uint64_t job = e->next_job++;
        const char *argv[] = {c->arg0 ? c->arg0 : "true", "arg"};
        const char *env[] = {c->env0 ? c->env0 : "PATH=/bin", "B=2"};
        struct priv_launch req = request(e, job, argv, 2);
        req.env = env;
        req.job = c->what == JOB_ZERO ? 0 : c->what == JOB_HUGE ? (uint64_t)INT64_MAX + 1 : job;
        req.attempt = c->what == ATTEMPT_ZERO ? 0 : 1;
        req.unix_user = c->what == NO_USER ? NULL : c->user ? c->user : req.unix_user;
        req.workdir = c->workdir ? c->workdir : req.workdir;
        req.stdout_path = c->out;
        req.stderr_path = c->err;
        req.argc = c->what == NO_ARGV ? 0 : 2;
        req.mem_mib = c->mem;
        req.cpu_milli = c->cpu;
        if (c->what == MANY_ENV) {
            req.env = many;
            req.nenv = nenv;
        }
        if (c->what == HUGE_ARG)
            argv[1] = huge;
        pid_t pid = 77;
        uint64_t start = 88;
        char err[PRIV_MSG_MAX] = "";
        int rc = priv_launch(e->pg, &req, &pid, &start, err, sizeof(err));
        print_message("# case %zu: %s\n", i, err);
        assert_int_equal(rc, c->rc);
        size_t fl = strlen(c->field);
        assert_int_equal(strncmp(err, c->field, fl), 0);
        assert_int_equal(err[fl], ':');
        assert_int_equal(pid, 77);
        assert_int_equal(start, 88);
        char dir[512];
        attempt_path(e, e->pg, job, 1, NULL, dir, sizeof(dir));
        assert_int_equal(access(dir, F_OK), -1); /* refused before anything was done */
    }
    free(many);
    free(huge);
}

static void raw_refused(struct env *e, const void *req, size_t len, const char *field)
{
    char err[PRIV_MSG_MAX] = "";
    int rc = priv_call_raw(e->pg, req, len, err, sizeof(err));
    print_message("# %s\n", err);
    assert_int_equal(rc, GPO_EINVAL);
    size_t fl = strlen(field);
    assert_int_equal(strncmp(err, field, fl), 0);
    assert_true(err[fl] == ':' || err[fl] == ' ');
}

static void priv_refuses_malformed_wire_requests(void **state)
{
    struct env *e = *state;
    uint64_t job = e->next_job++;
    struct priv_req_launch *q = calloc(1, sizeof(*q) + 64);
    assert_non_null(q);
    const struct priv_req_launch good = {.type = PRIV_REQ_LAUNCH,
                                         .job = job,
                                         .attempt = 1,
                                         .argc = 1,
                                         .strings_len = 5,
                                         .has_user = 1,
                                         .unix_user = "gpuorch-test1",
                                         .strings = "true"};
    uint8_t two[2] = {1, 0};
    raw_refused(e, two, sizeof(two), "request");
    uint32_t bogus[6] = {99};
    raw_refused(e, bogus, sizeof(bogus), "type");
    *q = good;
    raw_refused(e, q, sizeof(struct priv_req_attempt), "request");
    raw_refused(e, q, sizeof(*q) + 64, "request");
    memset(q->unix_user, 'a', sizeof(q->unix_user));
    raw_refused(e, q, sizeof(*q), "unix_user");
    *q = good;
    q->has_user = 2;
    raw_refused(e, q, sizeof(*q), "has_user");
    *q = good;
    memset(q->workdir, '/', sizeof(q->workdir));
    raw_refused(e, q, sizeof(*q), "workdir");
    *q = good;
    q->argc = 2;
    raw_refused(e, q, sizeof(*q), "strings");
    *q = good;
    q->strings_len = 0;
    raw_refused(e, q, sizeof(*q), "strings_len");
    q->strings_len = PRIV_STRINGS_MAX + 1;
    raw_refused(e, q, sizeof(*q), "strings_len");
    *q = good;
    q->strings_len = 4; /* "true" without its NUL */
    raw_refused(e, q, sizeof(*q), "strings_len");

    struct priv_req_attempt a = {.type = PRIV_REQ_SIGNAL, .job = job, .attempt = 1, .sig = 1};
    raw_refused(e, &a, sizeof(a), "sig");
    a.sig = SIGKILL;
    a.flags = 7;
    raw_refused(e, &a, sizeof(a), "flags");
    a.flags = PRIV_SIGNAL_JOB;
    raw_refused(e, &a, sizeof(a), "sig"); /* SIGKILL is not a job's own signal */
    a.flags = 0;
    a.job = 0;
    raw_refused(e, &a, sizeof(a), "job");
    a = (struct priv_req_attempt){
        .type = PRIV_REQ_CLEANUP, .job = job, .attempt = 1, .sig = SIGKILL};
    raw_refused(e, &a, sizeof(a), "sig");
    char dir[512];
    attempt_path(e, e->pg, job, 1, NULL, dir, sizeof(dir));
    assert_int_equal(access(dir, F_OK), -1);

    /* The same struct, well formed, is launched: the process still serves. */
    *q = good;
    char err[PRIV_MSG_MAX] = "";
    assert_int_equal(priv_call_raw(e->pg, q, sizeof(*q), err, sizeof(err)), 0);
    struct shim_status s;
    wait_status(e, e->pg, job, &s);
    assert_int_equal(s.exit_code, 0);
    free(q);
}

static void priv_relaunch_of_same_attempt_is_refused(void **state)
{
    struct env *e = *state;
    uint64_t job = e->next_job++;
    const char *argv[] = {"true"};
    struct priv_launch req = request(e, job, argv, 1);
    launch_ok(e, e->pg, &req, NULL);
    struct shim_status s;
    wait_status(e, e->pg, job, &s);
    pid_t pid = 0;
    uint64_t start = 0;
    char err[PRIV_MSG_MAX] = "";
    assert_int_equal(priv_launch(e->pg, &req, &pid, &start, err, sizeof(err)), GPO_EEXIST);
    assert_non_null(strstr(err, "launched already"));
    assert_int_equal(pid, 0);
}

/* A shell that traps SIGTERM (and says so in a file) survives it; SIGKILL
 * then ends it. */
static void term_then_kill(struct env *e, struct priv *p)
{
    uint64_t job = e->next_job++;
    const char *argv[] = {"sh", "-c",
                          "trap 'echo term >> trapped' TERM; echo up > ready.tmp && "
                          "mv ready.tmp ready; while :; do sleep 1000 & wait $!; done"};
    struct priv_launch req = request(e, job, argv, 3);
    launch_ok(e, p, &req, NULL);
    char ready[512], trapped[512], err[PRIV_MSG_MAX] = "";
    snprintf(ready, sizeof(ready), "%s/ready", e->work);
    snprintf(trapped, sizeof(trapped), "%s/trapped", e->work);
    tmptree_wait_file(ready);
    assert_int_equal(priv_signal(p, job, 1, SIGTERM, err, sizeof(err)), 0);
    tmptree_wait_file(trapped);
    bool empty = true;
    assert_int_equal(priv_cleanup(p, job, 1, &empty, err, sizeof(err)), 0);
    assert_false(empty); /* the shell is still there */
    assert_int_equal(priv_signal(p, job, 1, SIGKILL, err, sizeof(err)), 0);
    struct shim_status s;
    wait_status(e, p, job, &s);
    assert_true(s.signaled);
    assert_int_equal(s.signal, SIGKILL);
    wait_cleaned(e, p, job);
    assert_int_equal(priv_signal(p, job, 1, SIGKILL, err, sizeof(err)), 0); /* nothing left */
}

static void priv_sigterm_then_sigkill_stops_command_ignoring_sigterm(void **state)
{
    struct env *e = *state;
    term_then_kill(e, e->pg);
}

static void priv_sigterm_then_sigkill_stops_command_ignoring_sigterm_in_cgroup(void **state)
{
    struct env *e = *state;
    term_then_kill(e, e->cg);
}

/* How many lines of `path` are `line`; 0 when there is no file yet. */
static int count_lines(const char *path, const char *line)
{
    char text[1024] = "";
    if (access(path, F_OK) == 0)
        tmptree_read_text(path, text, sizeof(text));
    int n = 0;
    size_t len = strlen(line);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p += len)
        n += (p == text || p[-1] == '\n') && p[len] == '\n';
    return n;
}

static void wait_lines(const char *path, const char *line, int want)
{
    time_t end = time(NULL) + DEADLINE_S;
    while (count_lines(path, line) < want && time(NULL) < end)
        tmptree_pause();
    assert_int_equal(count_lines(path, line), want);
}

/* The job's own signal (--signal): to every process, or with `leader` to
 * the command's process alone, which a child of it then does not get. */
static void job_signal_reaches_group_or_leader(struct env *e, struct priv *p)
{
    uint64_t job = e->next_job++;
    const char *argv[] = {
        "sh", "-c",
        "trap 'echo leader >> got' USR1; "
        "sh -c \"trap 'echo child >> got' USR1; echo up > c.tmp && mv c.tmp cready; "
        "while :; do sleep 1000 & wait \\$!; done\" & "
        "while [ ! -e cready ]; do sleep 0.01; done; echo up > ready.tmp && mv ready.tmp ready; "
        "while :; do sleep 1000 & wait $!; done"};
    struct priv_launch req = request(e, job, argv, 3);
    launch_ok(e, p, &req, NULL);
    char ready[512], got[512], err[PRIV_MSG_MAX] = "";
    snprintf(ready, sizeof(ready), "%s/ready", e->work);
    snprintf(got, sizeof(got), "%s/got", e->work);
    tmptree_wait_file(ready);
    assert_int_equal(priv_signal_job(p, job, 1, SIGUSR1, false, err, sizeof(err)), 0);
    wait_lines(got, "leader", 1);
    wait_lines(got, "child", 1);
    assert_int_equal(priv_signal_job(p, job, 1, SIGUSR1, true, err, sizeof(err)), 0);
    wait_lines(got, "leader", 2);
    assert_int_equal(count_lines(got, "child"), 1);
    /* Not a job's signal: refused by the privileged side's checks. */
    assert_int_equal(priv_signal_job(p, job, 1, SIGKILL, true, err, sizeof(err)), GPO_EINVAL);
    assert_int_equal(priv_signal(p, job, 1, SIGKILL, err, sizeof(err)), 0);
    struct shim_status st;
    wait_status(e, p, job, &st);
    wait_cleaned(e, p, job);
}

static void priv_job_signal_reaches_every_process_or_the_leader_alone(void **state)
{
    struct env *e = *state;
    job_signal_reaches_group_or_leader(e, e->pg);
}

static void priv_job_signal_reaches_every_process_or_the_leader_alone_in_cgroup(void **state)
{
    struct env *e = *state;
    job_signal_reaches_group_or_leader(e, e->cg);
}

static void priv_sigkill_reaches_setsid_child_in_cgroup(void **state)
{
    struct env *e = *state;
    uint64_t job = e->next_job++;
    const char *argv[] = {"sh", "-c", "setsid sleep 1000 & echo $! > gc.tmp && mv gc.tmp gc; wait"};
    struct priv_launch req = request(e, job, argv, 3);
    pid_t shim = launch_ok(e, e->cg, &req, NULL);
    char path[512], cg[CGROUP_PATH_MAX + 64], err[PRIV_MSG_MAX] = "";
    snprintf(path, sizeof(path), "%s/gc", e->work);
    tmptree_wait_file(path);
    pid_t gc = (pid_t)tmptree_read_number(path);
    /* setsid(1) calls setsid() only after the shell has reported its pid. */
    time_t end = time(NULL) + DEADLINE_S;
    while (getsid(gc) != gc && time(NULL) < end)
        tmptree_pause();
    assert_int_equal(getsid(gc), gc);

    /* attempt.json names the cgroup; the shim is not in it, the grandchild is. */
    attempt_path(e, e->cg, job, 1, "attempt.json", path, sizeof(path));
    json_error_t jerr;
    json_t *o = json_load_file(path, 0, &jerr);
    assert_non_null(o);
    snprintf(cg, sizeof(cg), "%s/job-%llu.1", e->cg_dir, (unsigned long long)job);
    assert_string_equal(json_string_value(json_object_get(o, "cgroup")), cg);
    json_decref(o);
    pid_t *pids = NULL;
    size_t n = 0;
    assert_int_equal(cgroup_pids(cg, &pids, &n, err, sizeof(err)), 0);
    bool has_gc = false, has_shim = false;
    for (size_t i = 0; i < n; i++) {
        has_gc |= pids[i] == gc;
        has_shim |= pids[i] == shim;
    }
    free(pids);
    assert_true(has_gc);
    assert_false(has_shim);

    assert_int_equal(priv_signal(e->cg, job, 1, SIGKILL, err, sizeof(err)), 0);
    struct shim_status s;
    wait_status(e, e->cg, job, &s);
    assert_true(s.signaled);
    assert_int_equal(s.signal, SIGKILL);
    end = time(NULL) + DEADLINE_S;
    int st = 0;
    pid_t r;
    /* Gone: reaped here (orphaned, reparented to this subreaper) with its
     * signal, or by sh's `wait` before sh itself was killed. */
    while ((r = waitpid(gc, &st, WNOHANG)) == 0 && time(NULL) < end)
        tmptree_pause();
    if (r == gc)
        assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    else
        assert_true(r < 0 && kill(gc, 0) != 0 && errno == ESRCH);
    wait_cleaned(e, e->cg, job);
    assert_int_equal(access(cg, F_OK), -1); /* the cgroup was removed */
}

static void priv_signal_and_cleanup_of_unknown_attempt_is_enoent(void **state)
{
    struct env *e = *state;
    char err[PRIV_MSG_MAX] = "";
    bool empty = false;
    assert_int_equal(priv_signal(e->pg, 999999, 1, SIGTERM, err, sizeof(err)), GPO_ENOENT);
    assert_non_null(strstr(err, "999999.1"));
    assert_int_equal(priv_cleanup(e->pg, 999999, 1, &empty, err, sizeof(err)), GPO_ENOENT);
    assert_int_equal(priv_signal(e->pg, 999999, 1, SIGHUP, err, sizeof(err)), GPO_EINVAL);
    assert_int_equal(strncmp(err, "sig:", 4), 0);
}

static void priv_reaps_finished_shims(void **state)
{
    struct env *e = *state;
    uint64_t job = e->next_job++;
    const char *argv[] = {"true"};
    struct priv_launch req = request(e, job, argv, 1);
    pid_t shim = launch_ok(e, e->pg, &req, NULL);
    struct shim_status s;
    wait_status(e, e->pg, job, &s);
    /* A zombie still answers kill(pid, 0): only a reaped shim is gone. */
    time_t end = time(NULL) + DEADLINE_S;
    while (kill(shim, 0) == 0 && time(NULL) < end)
        tmptree_pause();
    assert_int_equal(kill(shim, 0), -1);
    assert_int_equal(errno, ESRCH);
}

static void priv_stop_leaves_running_shims_running(void **state)
{
    struct env *e = *state;
    char st_dir[512], err[PRIV_MSG_MAX] = "";
    snprintf(st_dir, sizeof(st_dir), "%s/state-stop", e->base);
    struct priv *p = NULL;
    assert_int_equal(start_priv(e, st_dir, NULL, &p, err, sizeof(err)), 0);
    const char *argv[] = {"sleep", "1000"};
    struct priv_launch req = request(e, 1, argv, 2);
    struct journal_attempt a = {.job = 1, .attempt = 1};
    a.pid = launch_ok(e, p, &req, &a.start_time);
    pid_t shim = a.pid;
    priv_stop(p);
    /* The agent's own check: the pid and start time the launch returned. */
    assert_true(journal_attempt_alive(&a));
    /* Reparented here; SIGTERM to the shim is forwarded to the command. */
    assert_int_equal(kill(shim, SIGTERM), 0);
    time_t end = time(NULL) + DEADLINE_S;
    int st = 0;
    pid_t r;
    while ((r = waitpid(shim, &st, WNOHANG)) == 0 && time(NULL) < end)
        tmptree_pause();
    assert_int_equal(r, shim);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 128 + SIGTERM);
}

static void priv_reports_edead_once_privileged_process_is_gone(void **state)
{
    struct env *e = *state;
    char st_dir[512], err[PRIV_MSG_MAX] = "";
    snprintf(st_dir, sizeof(st_dir), "%s/state-dead", e->base);
    struct priv *p = NULL;
    assert_int_equal(start_priv(e, st_dir, NULL, &p, err, sizeof(err)), 0);
    pid_t pid = priv_pid(p);
    assert_true(pid > 0);
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    assert_int_equal(priv_signal(p, 1, 1, SIGTERM, err, sizeof(err)), GPO_EPIPE);
    assert_non_null(strstr(err, "is gone"));
    bool empty;
    assert_int_equal(priv_cleanup(p, 1, 1, &empty, err, sizeof(err)), GPO_EPIPE);
    priv_stop(p);
}

static void priv_launch_without_user_runs_as_agents_own_user_when_root_is_allowed(void **state)
{
    struct env *e = *state;
    char st_dir[512], err[PRIV_MSG_MAX] = "";
    snprintf(st_dir, sizeof(st_dir), "%s/state-root", e->base);
    assert_int_equal(mkdir(st_dir, 0755), 0);
    struct priv_config cfg = {
        .state_dir = st_dir, .shim_exe = e->bin, .allow_root = true, .agent_gid = e->gid2};
    struct priv *p = NULL;
    assert_int_equal(priv_start(&cfg, &p, err, sizeof(err)), 0);
    const char *argv[] = {"sh", "-c", "id -u; echo \"$HOME $USER\""};
    struct priv_launch req = request(e, 1, argv, 3);
    req.unix_user = NULL;
    req.workdir = NULL;
    pid_t pid = 0;
    uint64_t start = 0;
    assert_int_equal(priv_launch(p, &req, &pid, &start, err, sizeof(err)), 0);
    char dir[600], path[700], text[512], want[512];
    snprintf(dir, sizeof(dir), "%s/attempts/1.1", st_dir);
    time_t end = time(NULL) + DEADLINE_S;
    struct shim_status s;
    while (shim_read_status(dir, &s, err, sizeof(err)) == GPO_ENOENT && time(NULL) < end)
        tmptree_pause();
    assert_int_equal(shim_read_status(dir, &s, err, sizeof(err)), 0);
    assert_int_equal(s.exit_code, 0);
    struct passwd *pw = getpwuid(0);
    assert_non_null(pw);
    snprintf(want, sizeof(want), "0\n%s %s\n", pw->pw_dir, pw->pw_name);
    snprintf(path, sizeof(path), "%s/stdout", dir);
    tmptree_read_text(path, text, sizeof(text));
    assert_string_equal(text, want);
    priv_stop(p);
}

/* A copy of file `from` at `to`, mode `mode`. */
static void copy_file(const char *from, const char *to, mode_t mode)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(in >= 0 && out >= 0);
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof(buf))) > 0)
        assert_int_equal(write(out, buf, (size_t)n), n);
    assert_int_equal(n, 0);
    assert_int_equal(fchmod(out, mode), 0);
    close(in);
    assert_int_equal(close(out), 0);
}

static void priv_start_refuses_bad_config_and_notes_missing_cgroups(void **state)
{
    struct env *e = *state;
    char err[PRIV_MSG_MAX] = "", st_dir[512];
    struct priv *p = NULL;
    struct priv_config cfg = {.state_dir = "relative", .shim_exe = e->bin};
    assert_int_equal(priv_start(&cfg, &p, err, sizeof(err)), GPO_EINVAL);
    assert_int_equal(strncmp(err, "state_dir:", 10), 0);
    snprintf(st_dir, sizeof(st_dir), "%s/state-cfg", e->base);
    assert_int_equal(mkdir(st_dir, 0755), 0);
    cfg = (struct priv_config){.state_dir = st_dir, .shim_exe = "/nonexistent/gpuorch-shim"};
    assert_int_equal(priv_start(&cfg, &p, err, sizeof(err)), GPO_EINVAL);
    assert_int_equal(strncmp(err, "shim_exe:", 9), 0);
    assert_null(p);

    /* A shim that others may write, or in a folder others may write, is
     * refused: a launch would run as root whatever they put there. */
    char shim[600], open_dir[560];
    snprintf(shim, sizeof(shim), "%s/shim-writable", e->base);
    copy_file(e->bin, shim, 0757);
    cfg = (struct priv_config){.state_dir = st_dir, .shim_exe = shim};
    assert_int_equal(priv_start(&cfg, &p, err, sizeof(err)), GPO_EPERM);
    assert_non_null(strstr(err, "shim-writable"));
    assert_null(p);
    snprintf(open_dir, sizeof(open_dir), "%s/open", e->base);
    assert_int_equal(mkdir(open_dir, 0777), 0);
    assert_int_equal(chmod(open_dir, 0777), 0);
    snprintf(shim, sizeof(shim), "%s/gpuorch-shim", open_dir);
    copy_file(e->bin, shim, 0755);
    cfg = (struct priv_config){.state_dir = st_dir, .shim_exe = shim};
    assert_int_equal(priv_start(&cfg, &p, err, sizeof(err)), GPO_EPERM);
    assert_non_null(strstr(err, "its directory"));
    assert_null(p);

    /* A cgroup root that is no cgroup: not an error, a note for the log. */
    cfg = (struct priv_config){.state_dir = st_dir, .shim_exe = e->bin, .cgroup_root = e->base};
    assert_int_equal(priv_start(&cfg, &p, err, sizeof(err)), 0);
    assert_false(priv_has_cgroups(p));
    assert_non_null(strstr(priv_cgroup_note(p), e->base));
    assert_non_null(strstr(priv_cgroup_note(p), "not on a cgroup filesystem"));
    priv_stop(p);
}

/* The command's own pid: its process group, from ATTEMPT_DIR/pid. */
static pid_t command_pid(const struct env *e, const struct priv *p, uint64_t job)
{
    char path[512];
    attempt_path(e, p, job, 1, "pid", path, sizeof(path));
    tmptree_wait_file(path);
    long pid = tmptree_read_number(path);
    assert_true(pid > 1);
    return (pid_t)pid;
}

static void priv_attribute_names_a_commands_attempt_and_nothing_else(void **state)
{
    struct env *e = *state;
    uint64_t job = e->next_job++;
    char job_var[64];
    snprintf(job_var, sizeof(job_var), "GPUORCH_JOB_ID=%llu", (unsigned long long)job);
    const char *env[] = {"PATH=/usr/bin:/bin", job_var, "GPUORCH_ATTEMPT=1"};
    const char *argv[] = {"sleep", "1000"};
    struct priv_launch req = request(e, job, argv, 2);
    req.env = env;
    req.nenv = 3;
    launch_ok(e, e->pg, &req, NULL);
    pid_t cmd = command_pid(e, e->pg, job);
    /* A process that names an attempt this node never launched. */
    pid_t stranger = fork();
    if (stranger == 0) {
        char *const senv[] = {"GPUORCH_JOB_ID=987654321", "GPUORCH_ATTEMPT=1", NULL};
        char *const sargv[] = {"sleep", "1000", NULL};
        execve("/bin/sleep", sargv, senv);
        _exit(127);
    }
    assert_true(stranger > 0);
    /* Its environ is the exec's once /proc shows sleep's command line. */
    char comm[64], text[64] = "";
    snprintf(comm, sizeof(comm), "/proc/%d/comm", (int)stranger);
    time_t end = time(NULL) + DEADLINE_S;
    while (strcmp(text, "sleep\n") != 0 && time(NULL) < end) {
        tmptree_read_text(comm, text, sizeof(text));
        tmptree_pause();
    }
    pid_t pids[] = {cmd, getpid(), stranger};
    uint64_t jobs[3] = {1, 1, 1};
    uint32_t atts[3] = {9, 9, 9};
    char err[PRIV_MSG_MAX] = "";
    assert_int_equal(priv_attribute(e->pg, pids, 3, jobs, atts, err, sizeof(err)), 0);
    assert_int_equal(jobs[0], job);
    assert_int_equal(atts[0], 1);
    assert_int_equal(jobs[1], 0); /* no GPUORCH_* in its environment */
    assert_int_equal(atts[1], 0);
    assert_int_equal(jobs[2], 0); /* an attempt without a directory here */
    kill(stranger, SIGKILL);
    waitpid(stranger, NULL, 0);
    assert_int_equal(priv_signal(e->pg, job, 1, SIGKILL, err, sizeof(err)), 0);
    wait_cleaned(e, e->pg, job);
    /* More pids than one request holds go in several. */
    pid_t many[PRIV_PIDS_MAX + 3];
    uint64_t mj[PRIV_PIDS_MAX + 3];
    uint32_t ma[PRIV_PIDS_MAX + 3];
    for (size_t i = 0; i < PRIV_PIDS_MAX + 3; i++)
        many[i] = getpid();
    assert_int_equal(priv_attribute(e->pg, many, PRIV_PIDS_MAX + 3, mj, ma, err, sizeof(err)), 0);
    assert_int_equal(mj[PRIV_PIDS_MAX + 2], 0);
}

/* The whole of an open descriptor's file, as text. */
static void read_fd(int fd, char *buf, size_t len)
{
    ssize_t n = pread(fd, buf, len - 1, 0);
    assert_true(n >= 0);
    buf[n] = '\0';
}

static void priv_log_open_passes_the_log_and_refuses_what_is_not_the_jobs(void **state)
{
    struct env *e = *state;
    uint64_t job = e->next_job++;
    char out[512];
    snprintf(out, sizeof(out), "%s/out-%llu.txt", e->work, (unsigned long long)job);
    const char *argv[] = {"sh", "-c", "echo hello; echo oops >&2"};
    struct priv_launch req = request(e, job, argv, 3);
    req.stdout_path = out;
    launch_ok(e, e->pg, &req, NULL);
    struct shim_status s;
    wait_status(e, e->pg, job, &s);
    int fd = -1;
    int64_t size = -1;
    char err[PRIV_MSG_MAX] = "", text[64];
    assert_int_equal(
        priv_log_open(e->pg, job, 1, PRIV_STREAM_STDOUT, 0, &fd, &size, err, sizeof(err)), 0);
    assert_int_equal(size, 6);
    read_fd(fd, text, sizeof(text));
    assert_string_equal(text, "hello\n");
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    close(fd);
    assert_int_equal(
        priv_log_open(e->pg, job, 1, PRIV_STREAM_STDERR, 0, &fd, &size, err, sizeof(err)), 0);
    read_fd(fd, text, sizeof(text));
    assert_string_equal(text, "oops\n");
    close(fd);
    /* A FIFO in its place: refused, and the open never waits for a writer. */
    assert_int_equal(unlink(out), 0);
    assert_int_equal(mkfifo(out, 0666), 0);
    assert_int_equal(chown(out, e->uid1, e->gid1), 0);
    assert_int_equal(
        priv_log_open(e->pg, job, 1, PRIV_STREAM_STDOUT, 0, &fd, &size, err, sizeof(err)),
        GPO_EPERM);
    /* A link to root's file: refused (the check is on what it opens). */
    assert_int_equal(unlink(out), 0);
    char secret[512];
    snprintf(secret, sizeof(secret), "%s/secret", e->base);
    FILE *f = fopen(secret, "w");
    assert_non_null(f);
    fputs("root only\n", f);
    fclose(f);
    assert_int_equal(symlink(secret, out), 0);
    assert_int_equal(
        priv_log_open(e->pg, job, 1, PRIV_STREAM_STDOUT, 0, &fd, &size, err, sizeof(err)),
        GPO_EPERM);
    assert_int_equal(unlink(out), 0);
    assert_int_equal(
        priv_log_open(e->pg, job, 1, PRIV_STREAM_STDOUT, 0, &fd, &size, err, sizeof(err)),
        GPO_ENOENT);
    assert_int_equal(
        priv_log_open(e->pg, 999999, 1, PRIV_STREAM_STDOUT, 0, &fd, &size, err, sizeof(err)),
        GPO_ENOENT);
    assert_int_equal(
        priv_log_open(e->pg, job, 1, (enum priv_stream)3, 0, &fd, &size, err, sizeof(err)),
        GPO_EINVAL);
    assert_int_equal(strncmp(err, "stream:", 7), 0);
}

/* Frames from a step's keeper until its EXIT: the STDOUT text into out
 * (len bytes), the exit status. */
static int32_t step_frames(int fd, char *out, size_t len)
{
    uint8_t buf[STEPFRAME_HEAD + STEPFRAME_DATA_MAX];
    size_t have = 0, used = 0;
    time_t deadline = time(NULL) + DEADLINE_S;
    out[0] = '\0';
    for (;;) {
        struct stepframe f;
        while (have >= STEPFRAME_HEAD && stepframe_parse(buf, &f) == 0 &&
               have >= STEPFRAME_HEAD + f.len) {
            if (f.type == STEPFRAME_EXIT) {
                int32_t status = 0, sig = 0;
                stepframe_exit_read(buf + STEPFRAME_HEAD, &status, &sig);
                return status;
            }
            assert_int_equal(f.type, STEPFRAME_STDOUT); /* a terminal has one stream */
            size_t n = f.len < len - 1 - used ? f.len : len - 1 - used;
            memcpy(out + used, buf + STEPFRAME_HEAD, n);
            out[used += n] = '\0';
            memmove(buf, buf + STEPFRAME_HEAD + f.len, have - STEPFRAME_HEAD - f.len);
            have -= STEPFRAME_HEAD + f.len;
        }
        assert_true(time(NULL) < deadline);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 1000) <= 0)
            continue;
        ssize_t n = read(fd, buf + have, sizeof(buf) - have);
        assert_true(n > 0);
        have += (size_t)n;
    }
}

static void send_step_frame(int fd, enum stepframe_type type, const void *data, size_t n)
{
    uint8_t head[STEPFRAME_HEAD];
    stepframe_head(&(struct stepframe){.type = type, .len = (uint32_t)n}, head);
    assert_int_equal(fsutil_write_all(fd, head, sizeof(head)), 0);
    assert_int_equal(n ? fsutil_write_all(fd, data, n) : 0, 0);
}

/* A step's task on a pseudo-terminal: its controlling terminal is a pts
 * of the job's user, what is sent as STDIN it reads, a WINSIZE sets the
 * terminal's size, and its exit status comes last. */
static void priv_step_pty_runs_task_on_users_terminal_with_input_and_size(void **state)
{
    struct env *e = *state;
    uint64_t job = e->next_job++;
    const char *hold[] = {"sleep", "60"};
    struct priv_launch req = request(e, job, hold, 2);
    launch_ok(e, e->pg, &req, NULL);
    const char *argv[] = {"sh", "-c",
                          "read x; t=$(tty); echo \"tty=$t owner=$(stat -c %u $t) size=$(stty "
                          "size) got=$x\"; exit 5"};
    struct priv_step ps = {.job = job,
                           .attempt = 1,
                           .workdir = e->work,
                           .argv = argv,
                           .argc = 3,
                           .env = good_env,
                           .nenv = 2,
                           .pty = true};
    int fd = -1;
    char err[PRIV_MSG_MAX] = "";
    int rc = priv_step_spawn(e->pg, &ps, &fd, err, sizeof(err));
    if (rc)
        print_error("priv_step_spawn: %s (%s)\n", gpo_strerror(rc), err);
    assert_int_equal(rc, 0);
    uint8_t ws[4];
    stepframe_winsize_data(21, 77, ws);
    send_step_frame(fd, STEPFRAME_WINSIZE, ws, sizeof(ws));
    send_step_frame(fd, STEPFRAME_STDIN, "hello\n", 6);
    char out[4096], want[128];
    assert_int_equal(step_frames(fd, out, sizeof(out)), 5);
    close(fd);
    snprintf(want, sizeof(want), "owner=%ld size=21 77 got=hello", (long)e->uid1);
    if (!strstr(out, "tty=/dev/pts/") || !strstr(out, want))
        print_error("the task's terminal said: %s\n", out);
    assert_non_null(strstr(out, "tty=/dev/pts/"));
    assert_non_null(strstr(out, want));
    char msg[PRIV_MSG_MAX];
    assert_int_equal(priv_signal(e->pg, job, 1, SIGKILL, msg, sizeof(msg)), 0);
    struct shim_status s;
    wait_status(e, e->pg, job, &s);
}

static void priv_refuses_malformed_read_requests(void **state)
{
    struct env *e = *state;
    struct priv_req_attribute at = {.type = PRIV_REQ_ATTRIBUTE, .n = 0};
    raw_refused(e, &at, sizeof(at), "n");
    at.n = 1;
    at.pids[0] = 1;
    raw_refused(e, &at, sizeof(at), "pids[0]");
    at.pids[0] = 42;
    at.pids[5] = 43;
    raw_refused(e, &at, sizeof(at), "pids[5]");
    raw_refused(e, &at, sizeof(at) - 4, "request");
    struct priv_req_log lg = {.type = PRIV_REQ_LOG_OPEN, .job = 1, .attempt = 1, .stream = 9};
    raw_refused(e, &lg, sizeof(lg), "stream");
    lg.stream = PRIV_STREAM_STDOUT;
    lg.pad = 1;
    raw_refused(e, &lg, sizeof(lg), "pad");
    lg.pad = 0;
    lg.job = 0;
    raw_refused(e, &lg, sizeof(lg), "job");
    uint32_t unknown[6] = {99}; /* no request has this type */
    raw_refused(e, unknown, sizeof(unknown), "type");
}

enum { NEED_CGROUP = 1 << 0 };

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
        T(priv_launch_runs_command_as_user_and_reports_exit_0, 0),
        T(priv_job_environment_reaches_command_but_not_root_shim, 0),
        T(priv_launch_refuses_each_bad_field_by_name, 0),
        T(priv_refuses_malformed_wire_requests, 0),
        T(priv_relaunch_of_same_attempt_is_refused, 0),
        T(priv_sigterm_then_sigkill_stops_command_ignoring_sigterm, 0),
        T(priv_sigterm_then_sigkill_stops_command_ignoring_sigterm_in_cgroup, NEED_CGROUP),
        T(priv_sigkill_reaches_setsid_child_in_cgroup, NEED_CGROUP),
        T(priv_job_signal_reaches_every_process_or_the_leader_alone, 0),
        T(priv_job_signal_reaches_every_process_or_the_leader_alone_in_cgroup, NEED_CGROUP),
        T(priv_signal_and_cleanup_of_unknown_attempt_is_enoent, 0),
        T(priv_reaps_finished_shims, 0),
        T(priv_stop_leaves_running_shims_running, 0),
        T(priv_reports_edead_once_privileged_process_is_gone, 0),
        T(priv_launch_without_user_runs_as_agents_own_user_when_root_is_allowed, 0),
        T(priv_start_refuses_bad_config_and_notes_missing_cgroups, 0),
        T(priv_attribute_names_a_commands_attempt_and_nothing_else, 0),
        T(priv_log_open_passes_the_log_and_refuses_what_is_not_the_jobs, 0),
        T(priv_refuses_malformed_read_requests, 0),
        T(priv_step_pty_runs_task_on_users_terminal_with_input_and_size, 0),
    };
#undef T
    /* cmocka 1.1's skip() prints "not ok ... # SKIP", which meson counts as a
     * failure: tests that cannot run here are left out, with the reason. */
    struct CMUnitTest run[sizeof(all) / sizeof(all[0])];
    size_t n = 0;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (!e.ok)
            printf("# SKIP %s: %s\n", all[i].t.name, e.why);
        else if ((all[i].needs & NEED_CGROUP) && !e.cg)
            printf("# SKIP %s: no cgroups: %s\n", all[i].t.name, e.why_cg);
        else
            run[n++] = all[i].t;
    }
    fflush(stdout);
    int rc = _cmocka_run_group_tests("agent_priv", run, n, NULL, NULL);
    env_release(&e);
    return rc;
}

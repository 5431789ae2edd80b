/* test_agent_privsrv_check.c - the privileged process's request checks as
 * plain functions: a message's type and size, every field of a launch
 * refused by name, the packed argv and env handed back, the user's uid
 * against root and the process's own, a signal's and a cleanup's fields,
 * an attempt's cgroup path, a pid file's text, an attribute request's pids,
 * the job and attempt a process's environment names, a log open's fields
 * and the file it found, a script job's file, and attempt.json's uid and
 * log paths. No process is forked. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>
#include <jansson.h>

#include "agent/privsrv_check.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* A launch of `/bin/echo hi` with PATH and HOME, as alice, in /tmp. */
static struct priv_req_launch *good_launch(void)
{
    static const char strings[] = "/bin/echo\0hi\0PATH=/bin\0HOME=/root";
    struct priv_req_launch *q = calloc(1, sizeof(*q));
    assert_non_null(q);
    *q = (struct priv_req_launch){.type = PRIV_REQ_LAUNCH,
                                  .job = 7,
                                  .attempt = 1,
                                  .mem_mib = 1024,
                                  .cpu_milli = 2000,
                                  .argc = 2,
                                  .nenv = 2,
                                  .strings_len = sizeof(strings),
                                  .has_user = 1,
                                  .has_workdir = 1,
                                  .has_stdout = 1};
    memcpy(q->strings, strings, sizeof(strings));
    snprintf(q->unix_user, sizeof(q->unix_user), "alice");
    snprintf(q->workdir, sizeof(q->workdir), "/tmp");
    snprintf(q->stdout_path, sizeof(q->stdout_path), "/tmp/7.out");
    return q;
}

static void privsrv_check_request_takes_each_type_at_its_size_only(void **state)
{
    (void)state;
    char msg[PRIV_MSG_MAX];
    uint32_t type = 0;
    struct priv_req_attempt a = {.type = PRIV_REQ_SIGNAL};
    assert_int_equal(privsrv_check_request(&a, sizeof(a), &type, msg, sizeof(msg)), 0);
    assert_int_equal(type, PRIV_REQ_SIGNAL);
    a.type = PRIV_REQ_CLEANUP;
    assert_int_equal(privsrv_check_request(&a, sizeof(a), &type, msg, sizeof(msg)), 0);
    assert_int_equal(type, PRIV_REQ_CLEANUP);
    struct priv_req_launch *q = good_launch();
    assert_int_equal(privsrv_check_request(q, sizeof(*q), &type, msg, sizeof(msg)), 0);
    assert_int_equal(type, PRIV_REQ_LAUNCH);
    type = 99;
    assert_int_equal(privsrv_check_request(q, sizeof(a), &type, msg, sizeof(msg)), GPO_EINVAL);
    char want[128];
    snprintf(want, sizeof(want), "request: launch is %zu bytes, got %zu", sizeof(*q), sizeof(a));
    assert_string_equal(msg, want);
    assert_int_equal(type, 99); /* untouched */
    assert_int_equal(privsrv_check_request(&a, 3, &type, msg, sizeof(msg)), GPO_EINVAL);
    assert_string_equal(msg, "request: 3 bytes, too short for a type");
    a.type = 42;
    assert_int_equal(privsrv_check_request(&a, sizeof(a), &type, msg, sizeof(msg)), GPO_EINVAL);
    assert_string_equal(msg, "type: 42 is not a request");
    free(q);
}

static void privsrv_check_launch_hands_back_argv_and_env(void **state)
{
    (void)state;
    struct priv_req_launch *q = good_launch();
    char **cmd = NULL;
    char msg[PRIV_MSG_MAX] = "";
    assert_int_equal(privsrv_check_launch(q, &cmd, msg, sizeof(msg)), 0);
    assert_string_equal(cmd[0], "/bin/echo");
    assert_string_equal(cmd[1], "hi");
    assert_null(cmd[2]);
    assert_string_equal(cmd[3], "PATH=/bin");
    assert_string_equal(cmd[4], "HOME=/root");
    assert_null(cmd[5]);
    assert_ptr_equal(cmd[0], q->strings); /* pointers into the request */
    free(cmd);
    free(q);
}

enum breakage {
    JOB_ZERO,
    JOB_HUGE,
    ATTEMPT_ZERO,
    MEM_NEGATIVE,
    MEM_HUGE,
    CPU_HUGE,
    USER_UNTERMINATED,
    HAS_USER_2,
    USER_BAD_NAME,
    WORKDIR_RELATIVE,
    WORKDIR_DOTDOT,
    WORKDIR_UNTERMINATED,
    HAS_STDOUT_2,
    STDERR_DOTDOT,
    ARGC_ZERO,
    TOO_MANY_STRINGS,
    STRINGS_LEN_ZERO,
    STRINGS_LEN_HUGE,
    STRINGS_UNENDED,
    STRINGS_SHORT,
    ARGV0_EMPTY,
    ENV_NO_EQUALS,
    ENV_BAD_NAME,
};

static const struct {
    enum breakage what;
    const char *field; /* the message starts with it and ':' */
} launch_cases[] = {
    {JOB_ZERO, "job"},
    {JOB_HUGE, "job"},
    {ATTEMPT_ZERO, "attempt"},
    {MEM_NEGATIVE, "mem_mib"},
    {MEM_HUGE, "mem_mib"},
    {CPU_HUGE, "cpu_milli"},
    {USER_UNTERMINATED, "unix_user"},
    {HAS_USER_2, "has_user"},
    {USER_BAD_NAME, "unix_user"},
    {WORKDIR_RELATIVE, "workdir"},
    {WORKDIR_DOTDOT, "workdir"},
    {WORKDIR_UNTERMINATED, "workdir"},
    {HAS_STDOUT_2, "has_stdout_path"},
    {STDERR_DOTDOT, "stderr_path"},
    {ARGC_ZERO, "argc"},
    {TOO_MANY_STRINGS, "argc + nenv"},
    {STRINGS_LEN_ZERO, "strings_len"},
    {STRINGS_LEN_HUGE, "strings_len"},
    {STRINGS_UNENDED, "strings_len"},
    {STRINGS_SHORT, "strings"},
    {ARGV0_EMPTY, "argv[0]"},
    {ENV_NO_EQUALS, "env[1]"},
    {ENV_BAD_NAME, "env[0]"},
};

static void breaks(struct priv_req_launch *q, enum breakage what)
{
    switch (what) {
    case JOB_ZERO:
        q->job = 0;
        break;
    case JOB_HUGE:
        q->job = (uint64_t)INT64_MAX + 1;
        break;
    case ATTEMPT_ZERO:
        q->attempt = 0;
        break;
    case MEM_NEGATIVE:
        q->mem_mib = -1;
        break;
    case MEM_HUGE:
        q->mem_mib = INT64_MAX;
        break;
    case CPU_HUGE:
        q->cpu_milli = 1000001;
        break;
    case USER_UNTERMINATED:
        memset(q->unix_user, 'a', sizeof(q->unix_user));
        break;
    case HAS_USER_2:
        q->has_user = 2;
        break;
    case USER_BAD_NAME:
        snprintf(q->unix_user, sizeof(q->unix_user), "-rf");
        break;
    case WORKDIR_RELATIVE:
        snprintf(q->workdir, sizeof(q->workdir), "tmp");
        break;
    case WORKDIR_DOTDOT:
        snprintf(q->workdir, sizeof(q->workdir), "/tmp/../etc");
        break;
    case WORKDIR_UNTERMINATED:
        memset(q->workdir, '/', sizeof(q->workdir));
        break;
    case HAS_STDOUT_2:
        q->has_stdout = 2;
        break;
    case STDERR_DOTDOT:
        q->has_stderr = 1;
        snprintf(q->stderr_path, sizeof(q->stderr_path), "/..");
        break;
    case ARGC_ZERO:
        q->argc = 0;
        break;
    case TOO_MANY_STRINGS:
        q->nenv = PRIV_STRINGS_N;
        break;
    case STRINGS_LEN_ZERO:
        q->strings_len = 0;
        break;
    case STRINGS_LEN_HUGE:
        q->strings_len = PRIV_STRINGS_MAX + 1;
        break;
    case STRINGS_UNENDED:
        q->strings_len--; /* the last string's NUL left out */
        break;
    case STRINGS_SHORT:
        q->nenv = 3;
        break;
    case ARGV0_EMPTY:
        q->strings[0] = '\0';
        q->argc = 1;
        q->nenv = 0;
        q->strings_len = 1;
        break;
    case ENV_NO_EQUALS:
        memcpy(q->strings + 27, "_", 1); /* "HOME=/root" at 23 becomes "HOME_/root" */
        break;
    case ENV_BAD_NAME:
        memcpy(q->strings + 13, "1ATH", 4); /* "1ATH=/bin" */
        break;
    }
}

static void privsrv_check_launch_refuses_each_bad_field_by_name(void **state)
{
    (void)state;
    for (size_t i = 0; i < ARRAY_LEN(launch_cases); i++) {
        struct priv_req_launch *q = good_launch();
        breaks(q, launch_cases[i].what);
        char **cmd = (char **)(uintptr_t)0x1;
        char msg[PRIV_MSG_MAX] = "";
        int rc = privsrv_check_launch(q, &cmd, msg, sizeof(msg));
        print_message("# case %zu: %s\n", i, msg);
        assert_int_equal(rc, GPO_EINVAL);
        size_t fl = strlen(launch_cases[i].field);
        if (strncmp(msg, launch_cases[i].field, fl) != 0 || msg[fl] != ':')
            fail_msg("case %zu: '%s' does not start with '%s:'", i, msg, launch_cases[i].field);
        assert_ptr_equal(cmd, (char **)(uintptr_t)0x1); /* untouched */
        free(q);
    }
}

static void privsrv_check_runas_keeps_root_and_other_users_out(void **state)
{
    (void)state;
    char msg[PRIV_MSG_MAX] = "";
    const struct privsrv_self root = {.uid = 0, .allow_root = false};
    const struct privsrv_self root_allowed = {.uid = 0, .allow_root = true};
    const struct privsrv_self user = {.uid = 1000, .allow_root = false};
    assert_int_equal(privsrv_check_runas(&root, "alice", 1001, msg, sizeof(msg)), 0);
    assert_int_equal(privsrv_check_runas(&root, "root", 0, msg, sizeof(msg)), GPO_EINVAL);
    assert_string_equal(msg, "unix_user: root has uid 0, refused (allow_root is off)");
    assert_int_equal(privsrv_check_runas(&root, NULL, 0, msg, sizeof(msg)), GPO_EINVAL);
    assert_non_null(strstr(msg, "the agent's own user"));
    assert_int_equal(privsrv_check_runas(&root_allowed, NULL, 0, msg, sizeof(msg)), 0);
    assert_int_equal(privsrv_check_runas(&user, NULL, 1000, msg, sizeof(msg)), 0);
    assert_int_equal(privsrv_check_runas(&user, "bob", 1002, msg, sizeof(msg)), GPO_EINVAL);
    assert_non_null(strstr(msg, "does not run as root"));
    /* A name from a request stays on one line. */
    assert_int_equal(privsrv_check_runas(&user, "bob\nroot", 1002, msg, sizeof(msg)), GPO_EINVAL);
    assert_null(strchr(msg, '\n'));
}

static void privsrv_check_messages_keep_request_text_on_one_line(void **state)
{
    (void)state;
    struct priv_req_launch *q = good_launch();
    snprintf(q->unix_user, sizeof(q->unix_user), "al\nice");
    char **cmd = NULL;
    char msg[PRIV_MSG_MAX] = "";
    assert_int_equal(privsrv_check_launch(q, &cmd, msg, sizeof(msg)), GPO_EINVAL);
    assert_string_equal(msg, "unix_user: \"al?ice\" is not a valid user name");
    free(q);
    q = good_launch();
    snprintf(q->workdir, sizeof(q->workdir), "tmp\n/x");
    assert_int_equal(privsrv_check_launch(q, &cmd, msg, sizeof(msg)), GPO_EINVAL);
    assert_string_equal(msg, "workdir: \"tmp?/x\" is not an absolute path");
    free(q);
}

static void privsrv_check_attempt_takes_only_its_signals_and_ids(void **state)
{
    (void)state;
    static const struct {
        struct priv_req_attempt q;
        const char *field; /* NULL: accepted */
    } cases[] = {
        {{.type = PRIV_REQ_SIGNAL, .job = 1, .attempt = 1, .sig = SIGTERM}, NULL},
        {{.type = PRIV_REQ_SIGNAL, .job = 1, .attempt = 1, .sig = SIGKILL}, NULL},
        {{.type = PRIV_REQ_CLEANUP, .job = 1, .attempt = 1}, NULL},
        {{.type = PRIV_REQ_SIGNAL, .job = 1, .attempt = 1, .sig = SIGHUP}, "sig"},
        {{.type = PRIV_REQ_SIGNAL, .job = 1, .attempt = 1}, "sig"},
        {{.type = PRIV_REQ_CLEANUP, .job = 1, .attempt = 1, .sig = SIGKILL}, "sig"},
        {{.type = PRIV_REQ_SIGNAL, .job = 0, .attempt = 1, .sig = SIGKILL}, "job"},
        {{.type = PRIV_REQ_CLEANUP, .job = 1, .attempt = 0}, "attempt"},
        {{.type = PRIV_REQ_CLEANUP, .job = 1, .attempt = 1, .flags = 7}, "flags"},
        {{.type = PRIV_REQ_SIGNAL,
          .job = 1,
          .attempt = 1,
          .sig = SIGUSR1,
          .flags = PRIV_SIGNAL_JOB},
         NULL},
        {{.type = PRIV_REQ_SIGNAL,
          .job = 1,
          .attempt = 1,
          .sig = 64,
          .flags = PRIV_SIGNAL_JOB | PRIV_SIGNAL_LEADER},
         NULL},
        {{.type = PRIV_REQ_SIGNAL,
          .job = 1,
          .attempt = 1,
          .sig = SIGUSR1,
          .flags = PRIV_SIGNAL_LEADER},
         "sig"},
        {{.type = PRIV_REQ_SIGNAL,
          .job = 1,
          .attempt = 1,
          .sig = SIGTERM,
          .flags = PRIV_SIGNAL_LEADER},
         "flags"},
        {{.type = PRIV_REQ_SIGNAL,
          .job = 1,
          .attempt = 1,
          .sig = SIGKILL,
          .flags = PRIV_SIGNAL_JOB},
         "sig"},
        {{.type = PRIV_REQ_SIGNAL,
          .job = 1,
          .attempt = 1,
          .sig = SIGSTOP,
          .flags = PRIV_SIGNAL_JOB},
         "sig"},
        {{.type = PRIV_REQ_SIGNAL, .job = 1, .attempt = 1, .sig = 65, .flags = PRIV_SIGNAL_JOB},
         "sig"},
        {{.type = PRIV_REQ_SIGNAL, .job = 1, .attempt = 1, .sig = SIGUSR1, .flags = 1u << 5},
         "sig"},
        {{.type = PRIV_REQ_CLEANUP, .job = 1, .attempt = 1, .flags = PRIV_SIGNAL_JOB}, "flags"},
        {{.type = PRIV_REQ_LAUNCH, .job = 1, .attempt = 1}, "type"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char msg[PRIV_MSG_MAX] = "";
        int rc = privsrv_check_attempt(&cases[i].q, msg, sizeof(msg));
        if (!cases[i].field) {
            assert_int_equal(rc, 0);
            continue;
        }
        assert_int_equal(rc, GPO_EINVAL);
        size_t fl = strlen(cases[i].field);
        if (strncmp(msg, cases[i].field, fl) != 0 || msg[fl] != ':')
            fail_msg("case %zu: '%s' does not start with '%s:'", i, msg, cases[i].field);
    }
}

static void privsrv_check_cgroup_knows_only_the_attempts_own(void **state)
{
    (void)state;
    assert_true(privsrv_check_cgroup("/sys/fs/cgroup/gpuorch/n1/job-7.1", 7, 1));
    assert_false(privsrv_check_cgroup("/sys/fs/cgroup/gpuorch/n1/job-7.2", 7, 1));
    assert_false(privsrv_check_cgroup("/sys/fs/cgroup/gpuorch/n1/job-17.1", 7, 1));
    assert_false(privsrv_check_cgroup("sys/fs/cgroup/job-7.1", 7, 1));
    assert_false(privsrv_check_cgroup("/sys/fs/cgroup/../../tmp/job-7.1", 7, 1));
    assert_false(privsrv_check_cgroup("/job-7.1", 7, 1)); /* not below a root */
    assert_false(privsrv_check_cgroup("", 7, 1));
}

static void privsrv_check_pgid_reads_a_pid_and_nothing_else(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        pid_t pg;
    } cases[] = {
        {"12345\n", 12345}, {"12345", 12345}, {"2\n", 2},         {"1\n", 0},
        {"0\n", 0},         {"-5\n", 0},      {"abc\n", 0},       {"", 0},
        {"12 3\n", 0},      {"123\nx", 0},    {"99999999999", 0}, {"2147483647", 2147483647},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        pid_t pg = privsrv_check_pgid(cases[i].text, strlen(cases[i].text));
        if (pg != cases[i].pg)
            fail_msg("'%s': %ld, expected %ld", cases[i].text, (long)pg, (long)cases[i].pg);
    }
    char many[64];
    memset(many, '1', sizeof(many));
    assert_int_equal(privsrv_check_pgid(many, sizeof(many)), 0);
}

static void privsrv_check_request_takes_the_read_requests_at_their_size(void **state)
{
    (void)state;
    char msg[PRIV_MSG_MAX];
    uint32_t type = 0;
    struct priv_req_attribute at = {.type = PRIV_REQ_ATTRIBUTE, .n = 1, .pids = {42}};
    assert_int_equal(privsrv_check_request(&at, sizeof(at), &type, msg, sizeof(msg)), 0);
    assert_int_equal(type, PRIV_REQ_ATTRIBUTE);
    struct priv_req_log lg = {.type = PRIV_REQ_LOG_OPEN, .job = 7, .attempt = 1, .stream = 1};
    assert_int_equal(privsrv_check_request(&lg, sizeof(lg), &type, msg, sizeof(msg)), 0);
    assert_int_equal(type, PRIV_REQ_LOG_OPEN);
    assert_int_equal(privsrv_check_request(&lg, sizeof(lg) - 1, &type, msg, sizeof(msg)),
                     GPO_EINVAL);
    assert_non_null(strstr(msg, "log_open"));
    assert_int_equal(privsrv_check_request(&at, sizeof(at) + 4, &type, msg, sizeof(msg)),
                     GPO_EINVAL);
    assert_non_null(strstr(msg, "attribute"));
}

static void privsrv_check_attribute_takes_1_to_64_real_pids_and_zeros_after(void **state)
{
    (void)state;
    char msg[PRIV_MSG_MAX];
    struct priv_req_attribute q = {.type = PRIV_REQ_ATTRIBUTE, .n = 2, .pids = {2, PRIV_PID_MAX}};
    assert_int_equal(privsrv_check_attribute(&q, msg, sizeof(msg)), 0);
    q.n = PRIV_PIDS_MAX;
    for (int i = 0; i < PRIV_PIDS_MAX; i++)
        q.pids[i] = 100 + i;
    assert_int_equal(privsrv_check_attribute(&q, msg, sizeof(msg)), 0);
    const struct {
        uint32_t n;
        int at;
        int32_t pid;
        const char *field;
    } bad[] = {
        {0, -1, 0, "n: 0"},
        {PRIV_PIDS_MAX + 1, -1, 0, "n: 65"},
        {1, 0, 1, "pids[0]: 1"},
        {1, 0, -5, "pids[0]: -5"},
        {1, 0, PRIV_PID_MAX + 1, "pids[0]"},
        {1, 3, 77, "pids[3]: 77, past n"},
    };
    for (size_t k = 0; k < ARRAY_LEN(bad); k++) {
        struct priv_req_attribute b = {.type = PRIV_REQ_ATTRIBUTE, .n = bad[k].n, .pids = {42}};
        if (bad[k].at >= 0)
            b.pids[bad[k].at] = bad[k].pid;
        msg[0] = '\0';
        assert_int_equal(privsrv_check_attribute(&b, msg, sizeof(msg)), GPO_EINVAL);
        assert_non_null(strstr(msg, bad[k].field));
    }
    q.type = PRIV_REQ_SIGNAL;
    assert_int_equal(privsrv_check_attribute(&q, msg, sizeof(msg)), GPO_EINVAL);
}

static void privsrv_check_environ_reads_whole_ids_in_range(void **state)
{
    (void)state;
    uint64_t job = 0;
    uint32_t att = 0;
    static const char good[] = "PATH=/bin\0GPUORCH_JOB_ID=42\0GPUORCH_ATTEMPT=3\0HOME=/x";
    assert_true(privsrv_check_environ(good, sizeof(good), &job, &att));
    assert_int_equal(job, 42);
    assert_int_equal(att, 3);
    /* The last of each wins: the agent sets them after the job's own. */
    static const char twice[] = "GPUORCH_JOB_ID=1\0GPUORCH_ATTEMPT=1\0GPUORCH_JOB_ID=9\0"
                                "GPUORCH_ATTEMPT=2";
    assert_true(privsrv_check_environ(twice, sizeof(twice), &job, &att));
    assert_int_equal(job, 9);
    assert_int_equal(att, 2);
    static const char max[] = "GPUORCH_JOB_ID=9223372036854775807\0GPUORCH_ATTEMPT=4294967295";
    assert_true(privsrv_check_environ(max, sizeof(max), &job, &att));
    assert_int_equal(att, UINT32_MAX);
#define TEXT(s)                                                                                    \
    {                                                                                              \
        s, sizeof(s)                                                                               \
    }
    const struct {
        const char *text;
        size_t n;
    } bad[] = {
        TEXT("GPUORCH_JOB_ID=42"),                                     /* no attempt */
        TEXT("GPUORCH_JOB_ID=0\0GPUORCH_ATTEMPT=1"),                   /* job 0 */
        TEXT("GPUORCH_JOB_ID=4x\0GPUORCH_ATTEMPT=1"),                  /* not a number */
        TEXT("GPUORCH_JOB_ID=+4\0GPUORCH_ATTEMPT=1"),                  /* a sign */
        TEXT("GPUORCH_JOB_ID=9223372036854775808\0GPUORCH_ATTEMPT=1"), /* over INT64_MAX */
        TEXT("GPUORCH_JOB_ID=1\0GPUORCH_ATTEMPT=4294967296"),          /* over UINT32_MAX */
        TEXT("GPUORCH_JOB_ID=\0GPUORCH_ATTEMPT=1"),                    /* empty */
        TEXT("XGPUORCH_JOB_ID=1\0GPUORCH_ATTEMPT=1"),                  /* another name */
    };
#undef TEXT
    for (size_t k = 0; k < ARRAY_LEN(bad); k++) {
        job = 5;
        assert_false(privsrv_check_environ(bad[k].text, bad[k].n, &job, &att));
        assert_int_equal(job, 5); /* out-parameters only on success */
    }
    /* An entry cut by the end of what was read is not read. */
    static const char cut[] = "GPUORCH_ATTEMPT=1\0GPUORCH_JOB_ID=12345";
    assert_false(privsrv_check_environ(cut, sizeof(cut) - 1, &job, &att));
    assert_false(privsrv_check_environ("", 0, &job, &att));
}

static void privsrv_check_log_takes_stdout_or_stderr_of_an_attempt(void **state)
{
    (void)state;
    char msg[PRIV_MSG_MAX];
    struct priv_req_log q = {
        .type = PRIV_REQ_LOG_OPEN, .job = 7, .attempt = 1, .stream = PRIV_STREAM_STDERR};
    assert_int_equal(privsrv_check_log(&q, msg, sizeof(msg)), 0);
    const struct {
        struct priv_req_log q;
        const char *field;
    } bad[] = {
        {{.type = PRIV_REQ_LOG_OPEN, .job = 0, .attempt = 1, .stream = 1}, "job"},
        {{.type = PRIV_REQ_LOG_OPEN, .job = 7, .attempt = 0, .stream = 1}, "attempt"},
        {{.type = PRIV_REQ_LOG_OPEN, .job = 7, .attempt = 1, .stream = 0}, "stream: 0"},
        {{.type = PRIV_REQ_LOG_OPEN, .job = 7, .attempt = 1, .stream = 3}, "stream: 3"},
        {{.type = PRIV_REQ_LOG_OPEN, .job = 7, .attempt = 1, .stream = 1, .pad = 1}, "pad"},
        {{.type = PRIV_REQ_SIGNAL, .job = 7, .attempt = 1, .stream = 1}, "type"},
    };
    for (size_t k = 0; k < ARRAY_LEN(bad); k++) {
        assert_int_equal(privsrv_check_log(&bad[k].q, msg, sizeof(msg)), GPO_EINVAL);
        assert_true(strncmp(msg, bad[k].field, strlen(bad[k].field)) == 0);
    }
    assert_int_equal(privsrv_check_log_file(S_IFREG | 0640, 1001, 1001), 0);
    assert_int_equal(privsrv_check_log_file(S_IFREG | 0640, 0, 1001), GPO_EPERM);
    assert_int_equal(privsrv_check_log_file(S_IFIFO | 0666, 1001, 1001), GPO_EPERM);
    assert_int_equal(privsrv_check_log_file(S_IFCHR | 0666, 1001, 1001), GPO_EPERM);
    assert_int_equal(privsrv_check_log_file(S_IFDIR | 0755, 1001, 1001), GPO_EPERM);
}

static void privsrv_check_mig_takes_a_create_or_a_destroy_in_range(void **state)
{
    (void)state;
    char msg[PRIV_MSG_MAX];
    uint32_t type = 0;
    struct priv_req_mig create = {
        .type = PRIV_REQ_MIG, .op = PRIV_MIG_CREATE, .gpu = 63, .profile_id = 63, .start = 7};
    struct priv_req_mig destroy = {
        .type = PRIV_REQ_MIG, .op = PRIV_MIG_DESTROY, .gpu = 0, .instance = 63};
    assert_int_equal(privsrv_check_mig(&create, msg, sizeof(msg)), 0);
    assert_int_equal(privsrv_check_mig(&destroy, msg, sizeof(msg)), 0);
    assert_int_equal(privsrv_check_request(&create, sizeof(create), &type, msg, sizeof(msg)), 0);
    assert_int_equal(type, PRIV_REQ_MIG);
    assert_int_equal(privsrv_check_request(&create, sizeof(create) - 4, &type, msg, sizeof(msg)),
                     GPO_EINVAL);
    assert_non_null(strstr(msg, "mig"));
    const struct {
        struct priv_req_mig q;
        const char *field;
    } bad[] = {
        {{.type = PRIV_REQ_MIG, .op = 0}, "op: 0"},
        {{.type = PRIV_REQ_MIG, .op = 3}, "op: 3"}, /* no mode change through here */
        {{.type = PRIV_REQ_MIG, .op = PRIV_MIG_CREATE, .gpu = 64}, "gpu: 64"},
        {{.type = PRIV_REQ_MIG, .op = PRIV_MIG_CREATE, .profile_id = 64}, "profile_id: 64"},
        {{.type = PRIV_REQ_MIG, .op = PRIV_MIG_CREATE, .start = 8}, "start: 8"},
        {{.type = PRIV_REQ_MIG, .op = PRIV_MIG_CREATE, .instance = 1}, "instance: 1, must be 0"},
        {{.type = PRIV_REQ_MIG, .op = PRIV_MIG_DESTROY, .instance = 64}, "instance: 64"},
        {{.type = PRIV_REQ_MIG, .op = PRIV_MIG_DESTROY, .profile_id = 19}, "profile_id: 19"},
        {{.type = PRIV_REQ_MIG, .op = PRIV_MIG_DESTROY, .start = 1}, "start: 1, must be 0"},
        {{.type = PRIV_REQ_SIGNAL, .op = PRIV_MIG_DESTROY}, "type"},
    };
    for (size_t k = 0; k < ARRAY_LEN(bad); k++) {
        assert_int_equal(privsrv_check_mig(&bad[k].q, msg, sizeof(msg)), GPO_EINVAL);
        if (strncmp(msg, bad[k].field, strlen(bad[k].field)) != 0)
            fail_msg("case %zu: '%s', expected '%s'", k, msg, bad[k].field);
    }
}

static void privsrv_check_mps_takes_start_or_quit_of_a_uuid_shaped_name(void **state)
{
    (void)state;
    char msg[PRIV_MSG_MAX];
    struct priv_req_mps q = {.type = PRIV_REQ_MPS,
                             .op = PRIV_MPS_START,
                             .uuid = "GPU-0000a1b2-0000-4000-8000-000000000001"};
    assert_int_equal(privsrv_check_mps(&q, msg, sizeof(msg)), 0);
    q.op = PRIV_MPS_QUIT;
    assert_int_equal(privsrv_check_mps(&q, msg, sizeof(msg)), 0);
    const struct {
        struct priv_req_mps q;
        const char *field;
    } bad[] = {
        {{.type = PRIV_REQ_MPS, .op = 0, .uuid = "GPU-a"}, "op: 0"},
        {{.type = PRIV_REQ_MPS, .op = 3, .uuid = "GPU-a"}, "op: 3"},
        {{.type = PRIV_REQ_MPS, .op = 1, .uuid = ""}, "uuid: 1 to"},
        {{.type = PRIV_REQ_MPS, .op = 1, .uuid = "../../etc"}, "uuid: letters"},
        {{.type = PRIV_REQ_MPS, .op = 1, .uuid = "GPU/a"}, "uuid: letters"},
        {{.type = PRIV_REQ_MPS, .op = 1, .uuid = "-d"}, "uuid: letters"},
        {{.type = PRIV_REQ_MPS, .op = 1, .uuid = "GPU a"}, "uuid: letters"},
        {{.type = PRIV_REQ_MPS, .op = 1, .uuid = "GPU-a\0x"}, "uuid: bytes after"},
    };
    for (size_t k = 0; k < ARRAY_LEN(bad); k++) {
        assert_int_equal(privsrv_check_mps(&bad[k].q, msg, sizeof(msg)), GPO_EINVAL);
        if (strncmp(msg, bad[k].field, strlen(bad[k].field)) != 0)
            fail_msg("case %zu: '%s', want '%s'", k, msg, bad[k].field);
    }
    memset(q.uuid, 'a', sizeof(q.uuid));
    assert_int_equal(privsrv_check_mps(&q, msg, sizeof(msg)), GPO_EINVAL);
    assert_true(strncmp(msg, "uuid: 1 to", 10) == 0);
    uint32_t type;
    assert_int_equal(privsrv_check_request(&q, sizeof(q), &type, msg, sizeof(msg)), 0);
    assert_int_equal(type, PRIV_REQ_MPS);
    assert_int_equal(privsrv_check_request(&q, sizeof(q) - 1, &type, msg, sizeof(msg)), GPO_EINVAL);
}

static void privsrv_check_script_takes_only_the_agents_own_file(void **state)
{
    (void)state;
    char msg[PRIV_MSG_MAX];
    const char *want = "/var/lib/gpuorch/agent/scripts/7.1";
    assert_int_equal(
        privsrv_check_script(want, want, S_IFREG | 0700, 994, 1, 994, msg, sizeof(msg)), 0);
    assert_int_equal(
        privsrv_check_script("/etc/shadow", want, S_IFREG | 0700, 994, 1, 994, msg, sizeof(msg)),
        GPO_EINVAL);
    assert_non_null(strstr(msg, "argv[0]"));
    assert_int_equal(privsrv_check_script(want, want, S_IFREG | 0700, 0, 1, 994, msg, sizeof(msg)),
                     GPO_EINVAL);
    assert_non_null(strstr(msg, "owned by uid 0"));
    assert_int_equal(
        privsrv_check_script(want, want, S_IFREG | 0700, 994, 2, 994, msg, sizeof(msg)),
        GPO_EINVAL);
    assert_non_null(strstr(msg, "2 links"));
    assert_int_equal(
        privsrv_check_script(want, want, S_IFLNK | 0777, 994, 1, 994, msg, sizeof(msg)),
        GPO_EINVAL);
    assert_non_null(strstr(msg, "not a regular file"));
    struct priv_req_launch *q = good_launch();
    q->has_script = 2;
    char **cmd = NULL;
    assert_int_equal(privsrv_check_launch(q, &cmd, msg, sizeof(msg)), GPO_EINVAL);
    assert_non_null(strstr(msg, "has_script"));
    q->has_script = 0;
    q->append = 2;
    assert_int_equal(privsrv_check_launch(q, &cmd, msg, sizeof(msg)), GPO_EINVAL);
    assert_non_null(strstr(msg, "append"));
    free(q);
}

static void privsrv_check_attempt_log_gives_the_uid_and_the_logs_path(void **state)
{
    (void)state;
    char msg[PRIV_MSG_MAX], path[PRIV_PATH_MAX];
    uid_t uid = 7;
    json_t *o =
        json_loads("{\"uid\": 1001, \"gid\": 1001, \"stdout\": \"/data/out.txt\"}", 0, NULL);
    assert_non_null(o);
    assert_int_equal(privsrv_check_attempt_log(o, "/s/attempts/7.1", "stdout", &uid, path,
                                               sizeof(path), msg, sizeof(msg)),
                     0);
    assert_int_equal(uid, 1001);
    assert_string_equal(path, "/data/out.txt");
    assert_int_equal(privsrv_check_attempt_log(o, "/s/attempts/7.1", "stderr", &uid, path,
                                               sizeof(path), msg, sizeof(msg)),
                     0);
    assert_string_equal(path, "/s/attempts/7.1/stderr");
    json_decref(o);
    const struct {
        const char *json, *field;
    } bad[] = {
        {"[1]", "not a JSON object"},
        {"{\"uid\": -1}", "uid"},
        {"{\"uid\": \"0\"}", "uid"},
        {"{\"uid\": 1, \"stdout\": \"rel/path\"}", "stdout"},
        {"{\"uid\": 1, \"stdout\": 5}", "stdout"},
        {"{\"uid\": 1, \"stdout\": \"/a\\u0000b\"}", "stdout"},
    };
    for (size_t k = 0; k < ARRAY_LEN(bad); k++) {
        o = json_loads(bad[k].json, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        assert_non_null(o);
        uid = 7;
        assert_int_equal(privsrv_check_attempt_log(o, "/s/attempts/7.1", "stdout", &uid, path,
                                                   sizeof(path), msg, sizeof(msg)),
                         GPO_EINVAL);
        assert_int_equal(uid, 7);
        assert_int_equal(strncmp(msg, bad[k].field, strlen(bad[k].field)), 0);
        json_decref(o);
    }
}

/* A step task: `/bin/echo hi` with PATH and HOME, in /tmp, nothing else set. */
static struct priv_req_launch *good_step(void)
{
    struct priv_req_launch *q = good_launch();
    q->type = PRIV_REQ_STEP;
    q->mem_mib = 0;
    q->cpu_milli = 0;
    q->has_user = 0;
    q->has_stdout = 0;
    memset(q->unix_user, 0, sizeof(q->unix_user));
    memset(q->stdout_path, 0, sizeof(q->stdout_path));
    return q;
}

static void privsrv_check_step_hands_back_argv_and_env(void **state)
{
    (void)state;
    char msg[PRIV_MSG_MAX];
    uint32_t type = 0;
    struct priv_req_launch *q = good_step();
    assert_int_equal(privsrv_check_request(q, sizeof(*q), &type, msg, sizeof(msg)), 0);
    assert_int_equal(type, PRIV_REQ_STEP);
    char **cmd = NULL;
    assert_int_equal(privsrv_check_step(q, &cmd, msg, sizeof(msg)), 0);
    assert_string_equal(cmd[0], "/bin/echo");
    assert_string_equal(cmd[1], "hi");
    assert_null(cmd[2]);
    assert_string_equal(cmd[3], "PATH=/bin");
    assert_string_equal(cmd[4], "HOME=/root");
    assert_null(cmd[5]);
    free(cmd);
    q->has_workdir = 0; /* the user's home */
    assert_int_equal(privsrv_check_step(q, &cmd, msg, sizeof(msg)), 0);
    free(cmd);
    /* A task on a pseudo-terminal: the same request by its own type. */
    q->type = PRIV_REQ_STEP_PTY;
    assert_int_equal(privsrv_check_request(q, sizeof(*q), &type, msg, sizeof(msg)), 0);
    assert_int_equal(type, PRIV_REQ_STEP_PTY);
    assert_int_equal(privsrv_check_step(q, &cmd, msg, sizeof(msg)), 0);
    assert_string_equal(cmd[0], "/bin/echo");
    free(cmd);
    assert_int_equal(privsrv_check_request(q, sizeof(*q) - 1, &type, msg, sizeof(msg)), GPO_EINVAL);
    assert_non_null(strstr(msg, "step_pty"));
    free(q);
}

/* A step task runs as its attempt's user, in its cgroup, its output to the
 * caller: a request that names a user, limits, files or a script is
 * refused by that field, and so is a bad id, path or string. */
static void privsrv_check_step_refuses_what_a_step_does_not_take(void **state)
{
    (void)state;
    static const struct {
        const char *field;
        void (*set)(struct priv_req_launch *q);
    } bad[] = {
        {"mem_mib", NULL},    {"cpu_milli", NULL},  {"has_user", NULL}, {"has_stdout", NULL},
        {"has_stderr", NULL}, {"has_script", NULL}, {"job", NULL},      {"attempt", NULL},
        {"workdir", NULL},    {"argc", NULL},       {"env[0]", NULL},
    };
    for (size_t k = 0; k < ARRAY_LEN(bad); k++) {
        struct priv_req_launch *q = good_step();
        const char *f = bad[k].field;
        if (strcmp(f, "mem_mib") == 0)
            q->mem_mib = 1;
        else if (strcmp(f, "cpu_milli") == 0)
            q->cpu_milli = 1000;
        else if (strcmp(f, "has_user") == 0)
            q->has_user = 1, snprintf(q->unix_user, sizeof(q->unix_user), "root");
        else if (strcmp(f, "has_stdout") == 0)
            q->has_stdout = 1, snprintf(q->stdout_path, sizeof(q->stdout_path), "/etc/shadow");
        else if (strcmp(f, "has_stderr") == 0)
            q->has_stderr = 1;
        else if (strcmp(f, "has_script") == 0)
            q->has_script = 1;
        else if (strcmp(f, "job") == 0)
            q->job = 0;
        else if (strcmp(f, "attempt") == 0)
            q->attempt = 0;
        else if (strcmp(f, "workdir") == 0)
            snprintf(q->workdir, sizeof(q->workdir), "/tmp/../etc");
        else if (strcmp(f, "argc") == 0)
            q->argc = 0;
        else if (strcmp(f, "env[0]") == 0)
            q->strings[strlen("/bin/echo") + 1 + strlen("hi") + 1 + 4] = '-'; /* "PATH-/bin" */
        char msg[PRIV_MSG_MAX] = "";
        char **cmd = (char **)&msg; /* must stay as it is */
        char **before = cmd;
        assert_int_equal(privsrv_check_step(q, &cmd, msg, sizeof(msg)), GPO_EINVAL);
        assert_ptr_equal(cmd, before);
        if (strncmp(msg, f, strlen(f)) != 0)
            fail_msg("%s: the refusal names another field: %s", f, msg);
        free(q);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(privsrv_check_request_takes_each_type_at_its_size_only),
        cmocka_unit_test(privsrv_check_launch_hands_back_argv_and_env),
        cmocka_unit_test(privsrv_check_launch_refuses_each_bad_field_by_name),
        cmocka_unit_test(privsrv_check_runas_keeps_root_and_other_users_out),
        cmocka_unit_test(privsrv_check_messages_keep_request_text_on_one_line),
        cmocka_unit_test(privsrv_check_attempt_takes_only_its_signals_and_ids),
        cmocka_unit_test(privsrv_check_cgroup_knows_only_the_attempts_own),
        cmocka_unit_test(privsrv_check_pgid_reads_a_pid_and_nothing_else),
        cmocka_unit_test(privsrv_check_request_takes_the_read_requests_at_their_size),
        cmocka_unit_test(privsrv_check_attribute_takes_1_to_64_real_pids_and_zeros_after),
        cmocka_unit_test(privsrv_check_environ_reads_whole_ids_in_range),
        cmocka_unit_test(privsrv_check_log_takes_stdout_or_stderr_of_an_attempt),
        cmocka_unit_test(privsrv_check_mig_takes_a_create_or_a_destroy_in_range),
        cmocka_unit_test(privsrv_check_mps_takes_start_or_quit_of_a_uuid_shaped_name),
        cmocka_unit_test(privsrv_check_script_takes_only_the_agents_own_file),
        cmocka_unit_test(privsrv_check_attempt_log_gives_the_uid_and_the_logs_path),
        cmocka_unit_test(privsrv_check_step_hands_back_argv_and_env),
        cmocka_unit_test(privsrv_check_step_refuses_what_a_step_does_not_take),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

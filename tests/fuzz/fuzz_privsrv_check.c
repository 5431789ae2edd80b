/* fuzz_privsrv_check.c - libFuzzer target: any bytes as a request to the
 * agent's privileged process, through its checks (privsrv_check.h). The
 * first byte picks what the rest is: 0 a whole message (its type and size
 * checked, then its fields by its type: a step task's as a launch's, a MIG
 * change's in range); 1 a launch, its fixed fields
 * first and then its user, workdir, stdout, stderr and packed strings,
 * separated by 0xff bytes; 2 a signal or cleanup; 3 a cgroup path after a
 * job and an attempt; 4 a pid file; 5 an attribute request; 6 a process's
 * environment (/proc/PID/environ); 7 a log open, then the mode, owner and
 * uid of the file it found; 8 an attempt.json's text. A refusal is one non-empty line; a launch
 * that passes yields argv and env within its strings, argv[0] not empty, every env entry
 * NAME=VALUE; an attribute request that passes has 1..64 pids in range and zeros after; an
 * environment read names a job and attempt only when it holds both variables with whole numbers.
 * tests/fuzz/run.sh builds and runs it. */
#define _GNU_SOURCE /* memmem */
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "agent/privsrv_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct priv_req_launch launch_req; /* too big for the stack of a fuzzer */

static void one_line(const char *msg)
{
    if (!msg[0] || strchr(msg, '\n'))
        abort(); /* every refusal says why, on one line */
}

static bool within(const char *p, const struct priv_req_launch *q)
{
    return p >= q->strings && p < q->strings + q->strings_len;
}

/* What a launch that passed promises. */
static void launch_ok(const struct priv_req_launch *q, char **cmd)
{
    for (uint32_t i = 0; i < q->argc; i++) {
        if (!cmd[i] || !within(cmd[i], q))
            abort();
    }
    if (!cmd[0][0] || cmd[q->argc] || cmd[q->argc + 1 + q->nenv])
        abort();
    for (uint32_t i = 0; i < q->nenv; i++) {
        const char *e = cmd[q->argc + 1 + i];
        if (!e || !within(e, q) || !strchr(e, '=') || e[0] == '=')
            abort();
    }
}

/* Fixed fields, then the arrays separated by 0xff. */
static void fuzz_launch(const uint8_t *data, size_t size)
{
    struct priv_req_launch *q = &launch_req;
    memset(q, 0, sizeof(*q));
    size_t fixed = offsetof(struct priv_req_launch, unix_user);
    size_t n = size < fixed ? size : fixed;
    memcpy(q, data, n);
    q->type = PRIV_REQ_LAUNCH;
    char *arrays[] = {q->unix_user, q->workdir, q->stdout_path, q->stderr_path, q->strings};
    size_t sizes[] = {sizeof(q->unix_user), sizeof(q->workdir), sizeof(q->stdout_path),
                      sizeof(q->stderr_path), sizeof(q->strings)};
    size_t at = n;
    for (size_t k = 0; k < 5 && at < size; k++) {
        const uint8_t *end = memchr(data + at, 0xff, size - at);
        size_t len = end ? (size_t)(end - (data + at)) : size - at;
        memcpy(arrays[k], data + at, len < sizes[k] ? len : sizes[k]);
        at += len + 1;
    }
    char **cmd = NULL;
    char msg[PRIV_MSG_MAX] = "";
    if (privsrv_check_launch(q, &cmd, msg, sizeof(msg)) == 0) {
        launch_ok(q, cmd);
        free(cmd);
    } else {
        one_line(msg);
    }
    struct privsrv_self self = {.uid = q->mem_mib & 1 ? 0 : 1000, .allow_root = q->mem_mib & 2};
    uid_t uid = (uid_t)q->cpu_milli;
    msg[0] = '\0';
    int rc = privsrv_check_runas(&self, q->has_user ? q->unix_user : NULL, uid, msg, sizeof(msg));
    if (rc)
        one_line(msg);
    else if ((uid == 0 && !self.allow_root) || (self.uid != 0 && uid != self.uid))
        abort();
}

static void fuzz_attempt(const uint8_t *data, size_t size)
{
    struct priv_req_attempt q = {0};
    memcpy(&q, data, size < sizeof(q) ? size : sizeof(q));
    char msg[PRIV_MSG_MAX] = "";
    if (privsrv_check_attempt(&q, msg, sizeof(msg)) != 0)
        one_line(msg);
    else if (!q.job || !q.attempt ||
             (q.flags & ~(uint32_t)(PRIV_SIGNAL_JOB | PRIV_SIGNAL_LEADER)) ||
             (q.flags && (q.type != PRIV_REQ_SIGNAL || !(q.flags & PRIV_SIGNAL_JOB))) ||
             (q.flags && (q.sig == SIGKILL || q.sig == SIGSTOP)))
        abort();
}

static void fuzz_attribute(const uint8_t *data, size_t size)
{
    struct priv_req_attribute q = {0};
    memcpy(&q, data, size < sizeof(q) ? size : sizeof(q));
    char msg[PRIV_MSG_MAX] = "";
    if (privsrv_check_attribute(&q, msg, sizeof(msg)) != 0) {
        one_line(msg);
        return;
    }
    if (q.type != PRIV_REQ_ATTRIBUTE || q.n < 1 || q.n > PRIV_PIDS_MAX)
        abort();
    for (uint32_t i = 0; i < PRIV_PIDS_MAX; i++) {
        if (i < q.n ? q.pids[i] < 2 || q.pids[i] > PRIV_PID_MAX : q.pids[i] != 0)
            abort();
    }
}

/* An environment names an attempt only with both variables, as numbers. */
static void fuzz_environ(const uint8_t *data, size_t size)
{
    uint64_t job = 0;
    uint32_t attempt = 0;
    const char *text = (const char *)data;
    if (!privsrv_check_environ(text, size, &job, &attempt))
        return;
    if (job < 1 || job > INT64_MAX || attempt < 1 || !memmem(text, size, "GPUORCH_JOB_ID=", 15) ||
        !memmem(text, size, "GPUORCH_ATTEMPT=", 16))
        abort();
}

static void fuzz_log(const uint8_t *data, size_t size)
{
    struct priv_req_log q = {0};
    struct {
        uint32_t mode, owner, uid;
    } file = {0};
    memcpy(&q, data, size < sizeof(q) ? size : sizeof(q));
    if (size > sizeof(q))
        memcpy(&file, data + sizeof(q),
               size - sizeof(q) < sizeof(file) ? size - sizeof(q) : sizeof(file));
    char msg[PRIV_MSG_MAX] = "";
    if (privsrv_check_log(&q, msg, sizeof(msg)) != 0)
        one_line(msg);
    else if (!q.job || !q.attempt || q.pad ||
             (q.stream != PRIV_STREAM_STDOUT && q.stream != PRIV_STREAM_STDERR))
        abort();
    int rc = privsrv_check_log_file((mode_t)file.mode, (uid_t)file.owner, (uid_t)file.uid);
    if (rc == 0 && (!S_ISREG((mode_t)file.mode) || file.owner != file.uid))
        abort();
}

/* An MPS request that passes is start or quit of a name that is safe as
 * one directory: letters, digits and '-', not first. */
static void fuzz_mps(const uint8_t *data, size_t size)
{
    struct priv_req_mps q = {0};
    memcpy(&q, data, size < sizeof(q) ? size : sizeof(q));
    char msg[PRIV_MSG_MAX] = "";
    if (privsrv_check_mps(&q, msg, sizeof(msg)) != 0) {
        one_line(msg);
        return;
    }
    size_t len = strnlen(q.uuid, sizeof(q.uuid));
    if ((q.op != PRIV_MPS_START && q.op != PRIV_MPS_QUIT) || len == 0 || len == sizeof(q.uuid) ||
        q.uuid[0] == '-' ||
        strspn(q.uuid, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                       "0123456789-") != len)
        abort();
}

/* A MIG change that passes is a create or a destroy with its fields in
 * range and the other op's 0. */
static void fuzz_mig(const uint8_t *data, size_t size)
{
    struct priv_req_mig q = {0};
    memcpy(&q, data, size < sizeof(q) ? size : sizeof(q));
    char msg[PRIV_MSG_MAX] = "";
    if (privsrv_check_mig(&q, msg, sizeof(msg)) != 0) {
        one_line(msg);
        return;
    }
    bool create = q.op == PRIV_MIG_CREATE;
    if (q.type != PRIV_REQ_MIG || (!create && q.op != PRIV_MIG_DESTROY) || q.gpu >= 64 ||
        (create &&
         (q.profile_id > PRIV_MIG_PROFILE_MAX || q.start > PRIV_MIG_SLOT_MAX || q.instance)) ||
        (!create && (q.profile_id || q.start || q.instance > PRIV_MIG_INSTANCE_MAX)))
        abort();
}

/* An attempt.json that passes names an absolute log path. */
static void fuzz_attempt_json(const uint8_t *data, size_t size)
{
    json_t *o = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    char msg[PRIV_MSG_MAX] = "", path[PRIV_PATH_MAX];
    uid_t uid = 0;
    for (int k = 0; o && k < 2; k++) {
        const char *stream = k ? "stderr" : "stdout";
        if (privsrv_check_attempt_log(o, "/s/attempts/1.1", stream, &uid, path, sizeof(path), msg,
                                      sizeof(msg)) != 0)
            one_line(msg);
        else if (path[0] != '/' || strlen(path) >= sizeof(path))
            abort();
    }
    json_decref(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *rest = data + 1;
    size_t n = size - 1;
    char msg[PRIV_MSG_MAX] = "";
    switch (data[0] % 9) {
    case 0: {
        uint32_t type;
        if (privsrv_check_request(rest, n, &type, msg, sizeof(msg)) != 0) {
            one_line(msg);
        } else if (type == PRIV_REQ_LAUNCH || type == PRIV_REQ_STEP || type == PRIV_REQ_STEP_PTY) {
            char **cmd = NULL;
            memcpy(&launch_req, rest, sizeof(launch_req));
            if ((type == PRIV_REQ_LAUNCH ? privsrv_check_launch : privsrv_check_step)(
                    &launch_req, &cmd, msg, sizeof(msg)) == 0)
                launch_ok(&launch_req, cmd);
            else
                one_line(msg);
            free(cmd);
        } else if (type == PRIV_REQ_ATTRIBUTE) {
            fuzz_attribute(rest, n);
        } else if (type == PRIV_REQ_LOG_OPEN) {
            fuzz_log(rest, n);
        } else if (type == PRIV_REQ_MPS) {
            fuzz_mps(rest, n);
        } else if (type == PRIV_REQ_MIG) {
            fuzz_mig(rest, n);
        } else {
            fuzz_attempt(rest, n);
        }
        break;
    }
    case 1:
        fuzz_launch(rest, n);
        break;
    case 2:
        fuzz_attempt(rest, n);
        break;
    case 3: {
        uint64_t job = 0;
        uint32_t attempt = 0;
        if (n < 12)
            return 0;
        memcpy(&job, rest, 8);
        memcpy(&attempt, rest + 8, 4);
        char *cg = malloc(n - 12 + 1);
        if (!cg)
            return 0;
        memcpy(cg, rest + 12, n - 12);
        cg[n - 12] = '\0';
        if (privsrv_check_cgroup(cg, job, attempt) && (cg[0] != '/' || strstr(cg, "/../")))
            abort();
        free(cg);
        break;
    }
    case 4: {
        pid_t pg = privsrv_check_pgid((const char *)rest, n);
        if (pg != 0 && pg < 2)
            abort();
        break;
    }
    case 5:
        fuzz_attribute(rest, n);
        break;
    case 6:
        fuzz_environ(rest, n);
        break;
    case 7:
        fuzz_log(rest, n);
        break;
    case 8:
        fuzz_attempt_json(rest, n);
        break;
    }
    return 0;
}

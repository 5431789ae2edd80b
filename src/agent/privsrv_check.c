/*
 * privsrv_check.c - the privileged process's request checks
 * (privsrv_check.h). Nothing here calls the system.
 */
#include "agent/privsrv_check.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent/cgroup.h"
#include "gpu/gpu.h"
#include "util/errbuf.h"
#include "util/jsonv.h"
#include "base/banned.h"

/* Upper bound of cpu_milli: a thousand CPUs. */
#define CPU_MILLI_MAX   1000000u
#define PRIV_SIGNAL_ALL (PRIV_SIGNAL_JOB | PRIV_SIGNAL_LEADER)

/* The requests: type, name, exact size. */
static const struct {
    uint32_t type;
    const char *name;
    size_t size;
} requests[] = {
    {PRIV_REQ_LAUNCH, "launch", sizeof(struct priv_req_launch)},
    {PRIV_REQ_SIGNAL, "signal", sizeof(struct priv_req_attempt)},
    {PRIV_REQ_CLEANUP, "cleanup", sizeof(struct priv_req_attempt)},
    {PRIV_REQ_ATTRIBUTE, "attribute", sizeof(struct priv_req_attribute)},
    {PRIV_REQ_LOG_OPEN, "log_open", sizeof(struct priv_req_log)},
    {PRIV_REQ_STEP, "step", sizeof(struct priv_req_launch)},
    {PRIV_REQ_STEP_PTY, "step_pty", sizeof(struct priv_req_launch)},
    {PRIV_REQ_MIG, "mig", sizeof(struct priv_req_mig)},
    {PRIV_REQ_MPS, "mps", sizeof(struct priv_req_mps)},
};

int privsrv_check_request(const void *buf, size_t n, uint32_t *ret_type, char *msg, size_t len)
{
    uint32_t type;
    if (n < sizeof(type))
        return errbuf_set(msg, len, GPO_EINVAL, "request: %zu bytes, too short for a type", n);
    memcpy(&type, buf, sizeof(type));
    for (size_t i = 0; i < sizeof(requests) / sizeof(requests[0]); i++) {
        if (requests[i].type != type)
            continue;
        if (n != requests[i].size)
            return errbuf_set(msg, len, GPO_EINVAL, "request: %s is %zu bytes, got %zu",
                              requests[i].name, requests[i].size, n);
        *ret_type = type;
        return 0;
    }
    return errbuf_set(msg, len, GPO_EINVAL, "type: %" PRIu32 " is not a request", type);
}

/* Text from a request, fit for a one-line message: control characters and
 * bytes of invalid UTF-8 as '?', long text cut. */
static const char *shown(const char *s, char out[JSONV_QUOTE_MAX + 4])
{
    return jsonv_quote(s, strlen(s), out);
}

static bool valid_user_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= PRIV_USER_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        bool ok = i == 0 ? alpha
                         : alpha || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
                               (c == '$' && i == n - 1);
        if (!ok)
            return false;
    }
    return true;
}

static bool valid_env_name(const char *s, size_t n)
{
    if (n == 0 || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return false;
    }
    return true;
}

/* A fixed array must hold its NUL. */
static int check_terminated(const char *field, const char *s, size_t size, char *msg, size_t len)
{
    if (!memchr(s, '\0', size))
        return errbuf_set(msg, len, GPO_EINVAL, "%s: not NUL-terminated within %zu bytes", field,
                          size);
    return 0;
}

/* An optional path: absolute, no ".." component. */
static int check_path(const char *field, uint8_t has, const char *s, char *msg, size_t len)
{
    int rc = check_terminated(field, s, PRIV_PATH_MAX, msg, len);
    if (rc)
        return rc;
    if (has > 1)
        return errbuf_set(msg, len, GPO_EINVAL, "has_%s: %u, expected 0 or 1", field, has);
    if (!has)
        return 0;
    char q[JSONV_QUOTE_MAX + 4];
    if (s[0] != '/')
        return errbuf_set(msg, len, GPO_EINVAL, "%s: \"%s\" is not an absolute path", field,
                          shown(s, q));
    for (const char *p = s; (p = strstr(p, "..")); p += 2)
        if (p[-1] == '/' && (p[2] == '/' || p[2] == '\0'))
            return errbuf_set(msg, len, GPO_EINVAL, "%s: \"%s\" contains \"..\"", field,
                              shown(s, q));
    return 0;
}

static int check_ids(uint64_t job, uint32_t attempt, char *msg, size_t len)
{
    if (job < 1 || job > INT64_MAX)
        return errbuf_set(msg, len, GPO_EINVAL, "job: %" PRIu64 " is out of range 1..%" PRId64, job,
                          INT64_MAX);
    if (attempt < 1)
        return errbuf_set(msg, len, GPO_EINVAL, "attempt: 0, attempts start at 1");
    return 0;
}

/* The user's fields: terminated, a flag of 0 or 1, a valid name. */
static int check_user(const struct priv_req_launch *q, char *msg, size_t len)
{
    int rc = check_terminated("unix_user", q->unix_user, sizeof(q->unix_user), msg, len);
    if (rc)
        return rc;
    if (q->has_user > 1)
        return errbuf_set(msg, len, GPO_EINVAL, "has_user: %u, expected 0 or 1", q->has_user);
    if (q->has_user && !valid_user_name(q->unix_user)) {
        char shown_user[JSONV_QUOTE_MAX + 4];
        return errbuf_set(msg, len, GPO_EINVAL, "unix_user: \"%s\" is not a valid user name",
                          shown(q->unix_user, shown_user));
    }
    return 0;
}

/* argv then env, packed in q->strings: pointers into it (privsrv_check.h). */
static int check_strings(const struct priv_req_launch *q, char ***ret_cmd, char *msg, size_t len)
{
    if (q->argc < 1)
        return errbuf_set(msg, len, GPO_EINVAL, "argc: 0, the command needs a program");
    if ((uint64_t)q->argc + q->nenv > PRIV_STRINGS_N)
        return errbuf_set(msg, len, GPO_EINVAL, "argc + nenv: %" PRIu64 " strings, over %d",
                          (uint64_t)q->argc + q->nenv, PRIV_STRINGS_N);
    if (q->strings_len < 1 || q->strings_len > PRIV_STRINGS_MAX ||
        q->strings[q->strings_len - 1] != '\0')
        return errbuf_set(msg, len, GPO_EINVAL,
                          "strings_len: %" PRIu32 " does not end a string within %d bytes",
                          q->strings_len, PRIV_STRINGS_MAX);
    size_t n = (size_t)q->argc + q->nenv;
    char **v = calloc(n + 2, sizeof(*v));
    if (!v)
        return errbuf_set(msg, len, GPO_ENOMEM, "out of memory");
    size_t k = 0, off = 0;
    while (off < q->strings_len && k < n) {
        const char *str = q->strings + off;
        /* argv[0..argc-1], NULL, env[0..nenv-1], NULL */
        v[k < q->argc ? k : k + 1] = (char *)str;
        k++;
        off += strlen(str) + 1;
    }
    int rc = 0;
    if (k != n || off != q->strings_len)
        rc = errbuf_set(msg, len, GPO_EINVAL,
                        "strings: %" PRIu32 " bytes do not hold argc + nenv = %zu strings",
                        q->strings_len, n);
    else if (v[0][0] == '\0')
        rc = errbuf_set(msg, len, GPO_EINVAL, "argv[0]: empty");
    for (size_t i = 0; !rc && i < q->nenv; i++) {
        const char *e = v[q->argc + 1 + i];
        const char *eq = strchr(e, '=');
        char q2[JSONV_QUOTE_MAX + 4];
        if (!eq)
            rc = errbuf_set(msg, len, GPO_EINVAL, "env[%zu]: \"%s\" has no '='", i, shown(e, q2));
        else if (!valid_env_name(e, (size_t)(eq - e)))
            rc = errbuf_set(msg, len, GPO_EINVAL, "env[%zu]: \"%s\": bad variable name", i,
                            shown(e, q2));
    }
    if (rc) {
        free(v);
        return rc;
    }
    *ret_cmd = v;
    return 0;
}

int privsrv_check_launch(const struct priv_req_launch *q, char ***ret_cmd, char *msg, size_t len)
{
    int rc = check_ids(q->job, q->attempt, msg, len);
    if (rc)
        return rc;
    if (q->mem_mib < 0 || q->mem_mib > CGROUP_MEM_MIB_MAX)
        return errbuf_set(msg, len, GPO_EINVAL, "mem_mib: %" PRId64 " is out of range 0..%" PRId64,
                          q->mem_mib, CGROUP_MEM_MIB_MAX);
    if (q->cpu_milli > CPU_MILLI_MAX)
        return errbuf_set(msg, len, GPO_EINVAL, "cpu_milli: %" PRIu32 " is out of range 0..%u",
                          q->cpu_milli, CPU_MILLI_MAX);
    if (q->has_script > 1)
        return errbuf_set(msg, len, GPO_EINVAL, "has_script: %u, expected 0 or 1", q->has_script);
    if (q->append > 1)
        return errbuf_set(msg, len, GPO_EINVAL, "append: %u, expected 0 or 1", q->append);
    if ((rc = check_user(q, msg, len)) ||
        (rc = check_path("workdir", q->has_workdir, q->workdir, msg, len)) ||
        (rc = check_path("stdout_path", q->has_stdout, q->stdout_path, msg, len)) ||
        (rc = check_path("stderr_path", q->has_stderr, q->stderr_path, msg, len)))
        return rc;
    return check_strings(q, ret_cmd, msg, len);
}

int privsrv_check_step(const struct priv_req_launch *q, char ***ret_cmd, char *msg, size_t len)
{
    int rc = check_ids(q->job, q->attempt, msg, len);
    if (rc)
        return rc;
    const struct {
        const char *field;
        bool set;
    } unused[] = {
        {"mem_mib", q->mem_mib != 0},       {"cpu_milli", q->cpu_milli != 0},
        {"has_user", q->has_user != 0},     {"has_stdout", q->has_stdout != 0},
        {"has_stderr", q->has_stderr != 0}, {"has_script", q->has_script != 0},
    };
    for (size_t i = 0; i < sizeof(unused) / sizeof(unused[0]); i++) {
        if (unused[i].set)
            return errbuf_set(msg, len, GPO_EINVAL,
                              "%s: a step task takes none (it runs as its "
                              "attempt's user, in its cgroup, with its output to the caller)",
                              unused[i].field);
    }
    if ((rc = check_path("workdir", q->has_workdir, q->workdir, msg, len)))
        return rc;
    return check_strings(q, ret_cmd, msg, len);
}

int privsrv_check_runas(const struct privsrv_self *self, const char *named, uid_t uid, char *msg,
                        size_t len)
{
    char q[JSONV_QUOTE_MAX + 4];
    const char *who = named ? shown(named, q) : "(the agent's own user)";
    if (uid == 0 && !self->allow_root)
        return errbuf_set(msg, len, GPO_EINVAL,
                          "unix_user: %s has uid 0, refused (allow_root is off)", who);
    if (self->uid != 0 && uid != self->uid)
        return errbuf_set(msg, len, GPO_EINVAL,
                          "unix_user: %s: the agent does not run as root, so jobs run as its own "
                          "user (uid %ld)",
                          who, (long)self->uid);
    return 0;
}

int privsrv_check_attempt(const struct priv_req_attempt *q, char *msg, size_t len)
{
    bool job_sig = q->type == PRIV_REQ_SIGNAL && q->flags == (q->flags & PRIV_SIGNAL_ALL) &&
                   (q->flags & PRIV_SIGNAL_JOB);
    if (job_sig &&
        (q->sig < 1 || q->sig > PRIVSRV_SIG_MAX || q->sig == SIGKILL || q->sig == SIGSTOP))
        return errbuf_set(msg, len, GPO_EINVAL,
                          "sig: %" PRId32 ", a job's signal is 1..%d but SIGKILL and SIGSTOP",
                          q->sig, PRIVSRV_SIG_MAX);
    if (q->type == PRIV_REQ_SIGNAL && !job_sig && q->sig != SIGTERM && q->sig != SIGKILL)
        return errbuf_set(msg, len, GPO_EINVAL,
                          "sig: %" PRId32 ", only SIGTERM (%d) or SIGKILL (%d)", q->sig, SIGTERM,
                          SIGKILL);
    if (q->type == PRIV_REQ_CLEANUP && q->sig != 0)
        return errbuf_set(msg, len, GPO_EINVAL, "sig: %" PRId32 ", must be 0 in a cleanup", q->sig);
    if (q->type != PRIV_REQ_SIGNAL && q->type != PRIV_REQ_CLEANUP)
        return errbuf_set(msg, len, GPO_EINVAL, "type: %" PRIu32 " is not a signal or cleanup",
                          q->type);
    int rc = check_ids(q->job, q->attempt, msg, len);
    if (rc)
        return rc;
    if (q->flags != 0 && !job_sig)
        return errbuf_set(msg, len, GPO_EINVAL,
                          "flags: %#" PRIx32 ", only PRIV_SIGNAL_JOB (with PRIV_SIGNAL_LEADER) in "
                          "a signal request",
                          q->flags);
    return 0;
}

bool privsrv_check_cgroup(const char *cg, uint64_t job, uint32_t attempt)
{
    char tail[64];
    int n = snprintf(tail, sizeof(tail), "/job-%" PRIu64 ".%" PRIu32, job, attempt);
    size_t len = strlen(cg);
    return cg[0] == '/' && !strstr(cg, "/../") && len > (size_t)n &&
           strcmp(cg + len - (size_t)n, tail) == 0;
}

pid_t privsrv_check_pgid(const char *text, size_t n)
{
    char buf[32];
    if (n >= sizeof(buf))
        return 0;
    memcpy(buf, text, n);
    buf[n] = '\0';
    char *end;
    long pid = strtol(buf, &end, 10);
    return pid > 1 && pid <= INT32_MAX && end != buf && (*end == '\n' || *end == '\0') &&
                   (*end == '\0' || end[1] == '\0')
               ? (pid_t)pid
               : 0;
}

int privsrv_check_attribute(const struct priv_req_attribute *q, char *msg, size_t len)
{
    if (q->type != PRIV_REQ_ATTRIBUTE)
        return errbuf_set(msg, len, GPO_EINVAL, "type: %" PRIu32 " is not an attribute request",
                          q->type);
    if (q->n < 1 || q->n > PRIV_PIDS_MAX)
        return errbuf_set(msg, len, GPO_EINVAL, "n: %" PRIu32 " is out of range 1..%d", q->n,
                          PRIV_PIDS_MAX);
    for (uint32_t i = 0; i < PRIV_PIDS_MAX; i++) {
        int32_t pid = q->pids[i];
        if (i < q->n && (pid < 2 || pid > PRIV_PID_MAX))
            return errbuf_set(msg, len, GPO_EINVAL,
                              "pids[%" PRIu32 "]: %" PRId32 " is out of range 2..%d", i, pid,
                              PRIV_PID_MAX);
        if (i >= q->n && pid != 0)
            return errbuf_set(msg, len, GPO_EINVAL,
                              "pids[%" PRIu32 "]: %" PRId32 ", past n it must be 0", i, pid);
    }
    return 0;
}

/* A whole decimal number of at most 19 digits in 1..max (text, n bytes). */
static bool parse_id(const char *text, size_t n, uint64_t max, uint64_t *ret)
{
    if (n < 1 || n > 19)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (text[i] < '0' || text[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(text[i] - '0');
    }
    if (v < 1 || v > max)
        return false;
    *ret = v;
    return true;
}

/* Whether the entry e (elen bytes, no NUL) starts with name and has a value. */
static bool named(const char *e, size_t elen, const char *name)
{
    size_t n = strlen(name);
    return elen > n && memcmp(e, name, n) == 0;
}

bool privsrv_check_environ(const char *text, size_t n, uint64_t *job, uint32_t *attempt)
{
    static const char job_name[] = "GPUORCH_JOB_ID=", att_name[] = "GPUORCH_ATTEMPT=";
    const size_t jn = sizeof(job_name) - 1, an = sizeof(att_name) - 1;
    uint64_t j = 0, a = 0;
    bool have_job = false, have_att = false;
    for (size_t off = 0; off < n;) {
        const char *e = text + off;
        const char *nul = memchr(e, '\0', n - off);
        size_t elen = nul ? (size_t)(nul - e) : n - off;
        /* An entry cut by the end of the text is not read: its value may be longer. */
        if (nul && named(e, elen, job_name))
            have_job = parse_id(e + jn, elen - jn, INT64_MAX, &j);
        else if (nul && named(e, elen, att_name))
            have_att = parse_id(e + an, elen - an, UINT32_MAX, &a);
        off += elen + 1;
    }
    if (!have_job || !have_att)
        return false;
    *job = j;
    *attempt = (uint32_t)a;
    return true;
}

int privsrv_check_attempt_log(const json_t *o, const char *dir, const char *stream, uid_t *ret_uid,
                              char *path, size_t pathlen, char *msg, size_t len)
{
    json_t *uid = json_object_get(o, "uid"), *p = json_object_get(o, stream);
    if (!json_is_object(o))
        return errbuf_set(msg, len, GPO_EINVAL, "not a JSON object");
    if (!json_is_integer(uid) || json_integer_value(uid) < 0 ||
        json_integer_value(uid) >= (json_int_t)UINT32_MAX)
        return errbuf_set(msg, len, GPO_EINVAL, "uid: expected an integer");
    if (p &&
        (!json_is_string(p) || json_string_value(p)[0] != '/' ||
         strlen(json_string_value(p)) != json_string_length(p) || json_string_length(p) >= pathlen))
        return errbuf_set(msg, len, GPO_EINVAL, "%s: expected an absolute path", stream);
    if (!p && (size_t)snprintf(path, pathlen, "%s/%s", dir, stream) >= pathlen)
        return errbuf_set(msg, len, GPO_EINVAL, "%s: the default path is too long", stream);
    if (p)
        snprintf(path, pathlen, "%s", json_string_value(p));
    *ret_uid = (uid_t)json_integer_value(uid);
    return 0;
}

int privsrv_check_log(const struct priv_req_log *q, char *msg, size_t len)
{
    if (q->type != PRIV_REQ_LOG_OPEN)
        return errbuf_set(msg, len, GPO_EINVAL, "type: %" PRIu32 " is not a log open", q->type);
    int rc = check_ids(q->job, q->attempt, msg, len);
    if (rc)
        return rc;
    if (q->stream != PRIV_STREAM_STDOUT && q->stream != PRIV_STREAM_STDERR)
        return errbuf_set(msg, len, GPO_EINVAL,
                          "stream: %" PRIu32 ", only stdout (%d) or stderr (%d)", q->stream,
                          PRIV_STREAM_STDOUT, PRIV_STREAM_STDERR);
    if (q->pad != 0)
        return errbuf_set(msg, len, GPO_EINVAL, "pad: %" PRIu32 ", must be 0", q->pad);
    return 0;
}

int privsrv_check_mig(const struct priv_req_mig *q, char *msg, size_t len)
{
    if (q->type != PRIV_REQ_MIG)
        return errbuf_set(msg, len, GPO_EINVAL, "type: %" PRIu32 " is not a MIG change", q->type);
    if (q->op != PRIV_MIG_CREATE && q->op != PRIV_MIG_DESTROY)
        return errbuf_set(msg, len, GPO_EINVAL, "op: %" PRIu32 ", only create (%d) or destroy (%d)",
                          q->op, PRIV_MIG_CREATE, PRIV_MIG_DESTROY);
    if (q->gpu >= GPU_MAX_DEVICES)
        return errbuf_set(msg, len, GPO_EINVAL, "gpu: %" PRIu32 " is out of range 0..%d", q->gpu,
                          GPU_MAX_DEVICES - 1);
    bool create = q->op == PRIV_MIG_CREATE;
    const struct {
        const char *name;
        uint32_t v, max; /* max 0: must be 0 for this op */
    } fields[] = {
        {"profile_id", q->profile_id, create ? PRIV_MIG_PROFILE_MAX : 0},
        {"start", q->start, create ? PRIV_MIG_SLOT_MAX : 0},
        {"instance", q->instance, create ? 0 : PRIV_MIG_INSTANCE_MAX},
    };
    for (size_t k = 0; k < sizeof(fields) / sizeof(fields[0]); k++) {
        if (fields[k].v > fields[k].max)
            return fields[k].max
                       ? errbuf_set(msg, len, GPO_EINVAL, "%s: %" PRIu32 " is out of range 0..%u",
                                    fields[k].name, fields[k].v, (unsigned)fields[k].max)
                       : errbuf_set(msg, len, GPO_EINVAL, "%s: %" PRIu32 ", must be 0 for a %s",
                                    fields[k].name, fields[k].v, create ? "create" : "destroy");
    }
    return 0;
}

int privsrv_check_log_file(mode_t mode, uid_t owner, uid_t uid)
{
    return S_ISREG(mode) && owner == uid ? 0 : GPO_EPERM;
}

int privsrv_check_script(const char *argv0, const char *want, mode_t mode, uid_t owner,
                         uint64_t nlink, uid_t agent_uid, char *msg, size_t len)
{
    if (strcmp(argv0, want) != 0) {
        char q[JSONV_QUOTE_MAX + 4];
        return errbuf_set(msg, len, GPO_EINVAL, "script: argv[0] \"%s\" is not %s", shown(argv0, q),
                          want);
    }
    if (!S_ISREG(mode))
        return errbuf_set(msg, len, GPO_EINVAL, "script: %s is not a regular file", want);
    if (owner != agent_uid)
        return errbuf_set(msg, len, GPO_EINVAL,
                          "script: %s is owned by uid %ld, not the agent's %ld", want, (long)owner,
                          (long)agent_uid);
    if (nlink != 1)
        return errbuf_set(msg, len, GPO_EINVAL, "script: %s has %" PRIu64 " links, expected 1",
                          want, nlink);
    return 0;
}

int privsrv_check_mps(const struct priv_req_mps *q, char *msg, size_t len)
{
    if (q->op != PRIV_MPS_START && q->op != PRIV_MPS_QUIT)
        return errbuf_set(msg, len, GPO_EINVAL, "op: %" PRIu32 " is neither start (1) nor quit (2)",
                          q->op);
    size_t n = strnlen(q->uuid, sizeof(q->uuid));
    if (n == 0 || n == sizeof(q->uuid))
        return errbuf_set(msg, len, GPO_EINVAL, "uuid: 1 to %d bytes, NUL-terminated",
                          PRIV_UUID_MAX - 1);
    for (size_t i = n; i < sizeof(q->uuid); i++)
        if (q->uuid[i])
            return errbuf_set(msg, len, GPO_EINVAL, "uuid: bytes after its end are not zero");
    for (size_t i = 0; i < n; i++) {
        char c = q->uuid[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              (c == '-' && i > 0)))
            return errbuf_set(msg, len, GPO_EINVAL,
                              "uuid: letters, digits and '-' only (not first), as NVML's");
    }
    return 0;
}

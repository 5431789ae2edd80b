/*
 * attempts.c - launches, kills and reports of the node agent's attempts
 * (attempts.h).
 */
#include "agent/attempts.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/sampler.h"
#include "agent/shim.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define REASON_MAX 120 /* the controller's limit on a report's reason */

enum phase {
    PH_RUNNING, /* launched; no outcome yet */
    PH_ENDING,  /* outcome known; leftovers killed, GPUs being checked */
    PH_FINAL,   /* final report owed */
    PH_HELD,    /* reported; some of its GPUs still run its processes (dirty) */
};

struct att {
    uint64_t job;
    uint32_t attempt;
    enum phase phase;
    char dir[JOURNAL_PATH_MAX];
    pid_t pid; /* the shim's; 0: never started */
    uint64_t start_time;
    char **uuids;
    size_t nuuids;
    bool *dirty;
    int64_t limit_ms;     /* time limit deadline; 0: none */
    bool running_owed;    /* the RUNNING report is still to be acknowledged */
    const char *kill_as;  /* NULL; "CANCELLED", "PREEMPTED", "TIMEOUT" */
    int64_t sigkill_ms;   /* when SIGTERM turns into SIGKILL; 0: sent */
    int64_t dirty_until;  /* PH_ENDING: give up waiting for the GPUs then */
    json_t *final;        /* the final report's body, once known */
    bool listed;          /* in the latest assignments answer */
    bool gone;            /* to be dropped from the table */
    int64_t report_after; /* a refused or failed report is sent again from then */
    bool recovered;       /* taken up from the journal: GPUs and limit from the next answer */
};

struct attempts {
    struct attempts_config cfg;
    char *node, *state_dir;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool woken;
    struct att **v;
    size_t n, cap;
};

static void nolog(const char *fmt, ...)
{
    (void)fmt;
}

int attempts_new(const struct attempts_config *cfg, struct attempts **ret)
{
    struct attempts *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->cfg = *cfg;
    if (!t->cfg.log)
        t->cfg.log = nolog;
    t->node = strdup(cfg->node);
    t->state_dir = strdup(cfg->state_dir);
    if (!t->node || !t->state_dir) {
        attempts_free(t);
        return -ENOMEM;
    }
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    *ret = t;
    return 0;
}

static void att_free(struct att *a)
{
    if (!a)
        return;
    for (size_t k = 0; k < a->nuuids; k++)
        free(a->uuids[k]);
    free(a->uuids);
    free(a->dirty);
    json_decref(a->final);
    free(a);
}

void attempts_free(struct attempts *t)
{
    if (!t)
        return;
    for (size_t k = 0; k < t->n; k++)
        att_free(t->v[k]);
    free(t->v);
    free(t->node);
    free(t->state_dir);
    if (t->node || t->state_dir || t->v) {
        pthread_mutex_destroy(&t->lock);
        pthread_cond_destroy(&t->cond);
    }
    free(t);
}

static struct att *find(struct attempts *t, uint64_t job, uint32_t attempt)
{
    for (size_t k = 0; k < t->n; k++) {
        if (t->v[k]->job == job && t->v[k]->attempt == attempt)
            return t->v[k];
    }
    return NULL;
}

static struct att *add(struct attempts *t, uint64_t job, uint32_t attempt)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        struct att **v = realloc(t->v, cap * sizeof(*v));
        if (!v)
            return NULL;
        t->v = v;
        t->cap = cap;
    }
    struct att *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    a->job = job;
    a->attempt = attempt;
    snprintf(a->dir, sizeof(a->dir), "%s/attempts/%" PRIu64 ".%" PRIu32, t->state_dir, job,
             attempt);
    t->v[t->n++] = a;
    return a;
}

/* Ends an attempt with a known outcome: next, its leftovers and GPUs. */
static void set_outcome(struct attempts *t, struct att *a, json_t *final, int64_t now)
{
    json_decref(a->final);
    a->final = final;
    a->phase = PH_ENDING;
    a->dirty_until = now + t->cfg.dirty_wait_ms;
}

static json_t *failed(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_t *failed(const char *fmt, ...)
{
    char reason[REASON_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    return json_pack("{s:s, s:s}", "state", "FAILED", "reason", reason);
}

/* The final report of an attempt whose shim wrote its status. */
static json_t *outcome_of(const struct att *a, const struct shim_status *st)
{
    if (st->error[0])
        return json_pack("{s:s, s:i, s:s%}", "state", "FAILED", "exit_code", st->exit_code,
                         "reason", st->error, strnlen(st->error, REASON_MAX));
    if (a->kill_as && (st->signaled || st->exit_code != 0))
        return st->signaled
                   ? json_pack("{s:s, s:i}", "state", a->kill_as, "signal", st->signal)
                   : json_pack("{s:s, s:i}", "state", a->kill_as, "exit_code", st->exit_code);
    if (st->signaled)
        return json_pack("{s:s, s:i, s:s}", "state", "FAILED", "signal", st->signal, "reason",
                         "killed by a signal");
    if (st->exit_code == 0)
        return json_pack("{s:s, s:i}", "state", "COMPLETED", "exit_code", 0);
    return json_pack("{s:s, s:i}", "state", "FAILED", "exit_code", st->exit_code);
}

/* ---- launching --------------------------------------------------------- */

struct strv {
    char **v;
    size_t n, cap;
    bool oom;
};

static void strv_add(struct strv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void strv_add(struct strv *s, const char *fmt, ...)
{
    if (s->oom)
        return;
    if (s->n + 1 >= s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 32;
        char **v = realloc(s->v, cap * sizeof(*v));
        if (!v) {
            s->oom = true;
            return;
        }
        s->v = v;
        s->cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *str = k >= 0 ? malloc((size_t)k + 1) : NULL;
    if (!str) {
        s->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(str, (size_t)k + 1, fmt, ap);
    va_end(ap);
    s->v[s->n++] = str;
    s->v[s->n] = NULL;
}

static void strv_free(struct strv *s)
{
    for (size_t k = 0; k < s->n; k++)
        free(s->v[k]);
    free(s->v);
}

static bool env_has(const struct strv *env, const char *name)
{
    size_t len = strlen(name);
    for (size_t k = 0; k < env->n; k++) {
        if (strncmp(env->v[k], name, len) == 0 && env->v[k][len] == '=')
            return true;
    }
    return false;
}

/* The command's environment: the job's own, then what gpuorch sets (which wins). */
static void build_env(struct attempts *t, const struct att *a, const json_t *asg, struct strv *env)
{
    const json_t *spec = json_object_get(asg, "spec");
    const char *name;
    json_t *v;
    /* Ours first, so that a process's /proc/PID/environ names its attempt early. */
    strv_add(env, "GPUORCH_JOB_ID=%" PRIu64, a->job);
    strv_add(env, "GPUORCH_ATTEMPT=%" PRIu32, a->attempt);
    strv_add(env, "GPUORCH_NODE=%s", t->node);
    json_object_foreach((json_t *)json_object_get(spec, "env"), name, v)
    {
        if (json_is_string(v) && strncmp(name, "GPUORCH_", 8) != 0 &&
            strcmp(name, "CUDA_VISIBLE_DEVICES") != 0 && strcmp(name, "NVIDIA_VISIBLE_DEVICES"))
            strv_add(env, "%s=%s", name, json_string_value(v));
    }
    if (!env_has(env, "PATH"))
        strv_add(env, "PATH=/usr/local/bin:/usr/bin:/bin");
    /* GPUs by UUID: CUDA's own numbering need not follow NVML's. */
    size_t len = 1;
    for (size_t k = 0; k < a->nuuids; k++)
        len += strlen(a->uuids[k]) + 1;
    char *list = calloc(1, len);
    if (!list) {
        env->oom = true;
        return;
    }
    size_t at = 0;
    for (size_t k = 0; k < a->nuuids; k++)
        at += (size_t)snprintf(list + at, len - at, "%s%s", k ? "," : "", a->uuids[k]);
    strv_add(env, "CUDA_VISIBLE_DEVICES=%s", a->nuuids ? list : "");
    strv_add(env, "NVIDIA_VISIBLE_DEVICES=%s", a->nuuids ? list : "void");
    strv_add(env, "GPUORCH_GPUS=%s", list);
    free(list);
    const json_t *gpus = json_object_get(asg, "gpus");
    const json_t *g0 = json_array_get(gpus, 0);
    if (json_is_object(g0) && json_integer_value(json_object_get(g0, "milli")) < 1000)
        strv_add(env, "GPUORCH_GPU_MILLI=%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(g0, "milli")));
    /* An array task knows its index, under Slurm's names too: #SBATCH scripts
     * read $SLURM_ARRAY_TASK_ID. */
    const json_t *arr = json_object_get(asg, "array_id");
    if (json_is_integer(arr)) {
        json_int_t idx = json_integer_value(json_object_get(asg, "array_index"));
        strv_add(env, "GPUORCH_ARRAY_JOB_ID=%" JSON_INTEGER_FORMAT, json_integer_value(arr));
        strv_add(env, "GPUORCH_ARRAY_TASK_ID=%" JSON_INTEGER_FORMAT, idx);
        strv_add(env, "SLURM_ARRAY_JOB_ID=%" JSON_INTEGER_FORMAT, json_integer_value(arr));
        strv_add(env, "SLURM_ARRAY_TASK_ID=%" JSON_INTEGER_FORMAT, idx);
    }
    /* The gang: every rank starts with the same node list and rank 0's address. */
    const json_t *gang = json_object_get(asg, "gang");
    const json_t *nodes = json_object_get(gang, "nodes");
    size_t nn = json_array_size(nodes);
    json_int_t rank = json_integer_value(json_object_get(gang, "rank"));
    char nl[8192] = "";
    size_t used = 0;
    for (size_t k = 0; k < nn && used < sizeof(nl); k++)
        used += (size_t)snprintf(nl + used, sizeof(nl) - used, "%s%s", k ? "," : "",
                                 json_string_value(json_array_get(nodes, k)));
    strv_add(env, "GPUORCH_NODELIST=%s", nn ? nl : t->node);
    strv_add(env, "GPUORCH_NUM_NODES=%zu", nn ? nn : 1);
    strv_add(env, "GPUORCH_NODE_RANK=%" JSON_INTEGER_FORMAT, rank);
    strv_add(env, "WORLD_SIZE=%zu", nn ? nn : 1);
    strv_add(env, "RANK=%" JSON_INTEGER_FORMAT, rank);
    const char *master = json_string_value(json_object_get(gang, "master_addr"));
    strv_add(env, "MASTER_ADDR=%s", master ? master : "127.0.0.1");
    strv_add(env, "MASTER_PORT=%" JSON_INTEGER_FORMAT,
             json_integer_value(json_object_get(gang, "master_port")));
}

/*
 * A job's output path with sbatch's patterns filled in: %j and %J the job id,
 * %A the array's id (else the job's), %a the array index (else 0), %x the
 * job's name, %u its user, %N this node, %% a '%'; other % sequences stay as
 * written. NULL in, NULL out; a path that would not fit is kept unexpanded.
 */
static const char *expand_path(const struct attempts *t, const struct att *a, const json_t *asg,
                               const char *path, char *buf, size_t len)
{
    if (!path || !strchr(path, '%'))
        return path;
    const json_t *spec = json_object_get(asg, "spec");
    const json_t *arr = json_object_get(asg, "array_id");
    const char *name = json_string_value(json_object_get(spec, "name"));
    const char *user = json_string_value(json_object_get(asg, "user"));
    size_t o = 0;
    for (const char *p = path; *p && o < len; p++) {
        char num[32];
        const char *put = NULL;
        if (*p != '%' || !p[1]) {
            buf[o++] = *p;
            continue;
        }
        switch (*++p) {
        case 'j':
        case 'J':
            snprintf(num, sizeof(num), "%" PRIu64, a->job), put = num;
            break;
        case 'A':
            snprintf(num, sizeof(num), "%" PRIu64,
                     json_is_integer(arr) ? (uint64_t)json_integer_value(arr) : a->job);
            put = num;
            break;
        case 'a':
            snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT,
                     json_integer_value(json_object_get(asg, "array_index")));
            put = num;
            break;
        case 'x':
            put = name ? name : "job";
            break;
        case 'u':
            put = user ? user : "";
            break;
        case 'N':
            put = t->node;
            break;
        case '%':
            put = "%";
            break;
        default:
            if (o + 2 <= len)
                buf[o++] = '%', buf[o++] = *p;
            continue;
        }
        size_t n = strlen(put);
        if (o + n >= len)
            return path;
        memcpy(buf + o, put, n);
        o += n;
    }
    if (o >= len)
        return path;
    buf[o] = '\0';
    return buf;
}

/* A script job's file: STATE/scripts/JOB.ATTEMPT, mode 0700, owned by the
 * job's user, so that its #! line picks the interpreter (a file without one
 * runs under /bin/sh, as execvp does). 0 or a message in err. */
static int write_script(struct attempts *t, const struct att *a, const char *text,
                        const char *unix_user, char *path, size_t pathlen, char *err, size_t errlen)
{
    char dir[JOURNAL_PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/scripts", t->state_dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return errbuf_set(err, errlen, -1, "mkdir %s: %s", dir, strerror(errno));
    int n = snprintf(path, pathlen, "%s/%" PRIu64 ".%" PRIu32, dir, a->job, a->attempt);
    if (n < 0 || (size_t)n >= pathlen)
        return errbuf_set(err, errlen, -1, "%s: path too long", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0700);
    if (fd < 0)
        return errbuf_set(err, errlen, -1, "%s: %s", path, strerror(errno));
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            errbuf_set(err, errlen, -1, "writing %s: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    if (unix_user && geteuid() == 0) {
        struct passwd *pw = getpwnam(unix_user);
        if (pw && fchown(fd, pw->pw_uid, pw->pw_gid) != 0) {
            errbuf_set(err, errlen, -1, "chown %s: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
    }
    close(fd);
    return 0;
}

/* The attempt's GPUs, from its assignment. */
static void set_gpus(struct att *a, const json_t *asg)
{
    const json_t *gpus = json_object_get(asg, "gpus");
    for (size_t k = 0; k < a->nuuids; k++)
        free(a->uuids[k]);
    free(a->uuids);
    free(a->dirty);
    a->nuuids = 0;
    a->uuids = calloc(json_array_size(gpus) + 1, sizeof(*a->uuids));
    a->dirty = calloc(json_array_size(gpus) + 1, sizeof(*a->dirty));
    for (size_t k = 0; a->uuids && a->dirty && k < json_array_size(gpus); k++) {
        const json_t *g = json_array_get(gpus, k);
        const char *u = json_string_value(json_is_object(g) ? json_object_get(g, "uuid") : g);
        if (u && (a->uuids[a->nuuids] = strdup(u)))
            a->nuuids++;
    }
}

/* A recovered attempt learns its GPUs and time limit from the first answer
 * that lists it; the limit counts from when its shim wrote ATTEMPT_DIR/pid. */
static void adopt(struct att *a, const json_t *asg, int64_t now)
{
    a->recovered = false;
    set_gpus(a, asg);
    json_int_t limit =
        json_integer_value(json_object_get(json_object_get(asg, "spec"), "time_limit_s"));
    char path[JOURNAL_PATH_MAX + 8];
    snprintf(path, sizeof(path), "%s/pid", a->dir);
    struct stat st;
    struct timespec real;
    if (limit <= 0 || stat(path, &st) != 0 || clock_gettime(CLOCK_REALTIME, &real) != 0)
        return;
    int64_t ran = ((int64_t)real.tv_sec - st.st_mtim.tv_sec) * 1000 +
                  (real.tv_nsec - st.st_mtim.tv_nsec) / 1000000;
    a->limit_ms = now + limit * 1000 - (ran > 0 ? ran : 0);
}

/* Launches a new attempt of assignment `asg`: journal first, then the fork.
 * Under the lock. */
static void launch(struct attempts *t, uint64_t job, uint32_t attempt, const json_t *asg,
                   int64_t now)
{
    struct att *a = add(t, job, attempt);
    if (!a) {
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": out of memory; not launched", job, attempt);
        return;
    }
    a->listed = true;
    set_gpus(a, asg);
    struct journal_attempt ja = {.job = job, .attempt = attempt};
    snprintf(ja.dir, sizeof(ja.dir), "%s", a->dir);
    char err[512] = "";
    int rc = journal_begin(t->cfg.journal, &ja, err, sizeof(err));
    if (rc) {
        /* Not journaled: nothing is launched. An attempt begun before (by an
         * earlier agent) was taken up by attempts_recover or has ended. */
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": not launched: %s", job, attempt,
                   rc == GPO_EEXIST ? "launched before" : err);
        t->v[--t->n] = NULL;
        att_free(a);
        return;
    }
    const json_t *spec = json_object_get(asg, "spec");
    /* A non-root agent runs every job as its own user (a laptop, a dev cluster). */
    const char *unix_user =
        geteuid() == 0 ? json_string_value(json_object_get(asg, "unix_user")) : NULL;
    const char *script = json_string_value(json_object_get(spec, "script"));
    struct strv argv = {0}, env = {0};
    char script_path[JOURNAL_PATH_MAX], out_path[JOURNAL_PATH_MAX], err_path[JOURNAL_PATH_MAX];
    if (script) {
        if (write_script(t, a, script, unix_user, script_path, sizeof(script_path), err,
                         sizeof(err)) == 0)
            strv_add(&argv, "%s", script_path);
    } else {
        const json_t *cmd = json_object_get(spec, "command");
        for (size_t k = 0; k < json_array_size(cmd); k++)
            strv_add(&argv, "%s",
                     json_string_value(json_array_get(cmd, k))
                         ? json_string_value(json_array_get(cmd, k))
                         : "");
    }
    build_env(t, a, asg, &env);
    json_int_t limit = json_integer_value(json_object_get(spec, "time_limit_s"));
    struct priv_launch req = {
        .job = job,
        .attempt = attempt,
        .unix_user = unix_user,
        .workdir = json_string_value(json_object_get(spec, "workdir")),
        .argv = (const char *const *)argv.v,
        .argc = argv.n,
        .env = (const char *const *)env.v,
        .nenv = env.n,
        .stdout_path = expand_path(t, a, asg, json_string_value(json_object_get(spec, "output")),
                                   out_path, sizeof(out_path)),
        .stderr_path = expand_path(t, a, asg, json_string_value(json_object_get(spec, "error")),
                                   err_path, sizeof(err_path)),
        .cpu_milli = (uint32_t)(json_integer_value(json_object_get(spec, "cpus")) * 1000),
        .mem_mib = json_integer_value(json_object_get(spec, "mem_mib")),
    };
    if (argv.oom || env.oom)
        snprintf(err, sizeof(err), "out of memory");
    else if (!argv.n && !err[0])
        snprintf(err, sizeof(err), "the assignment has no command");
    if (!err[0])
        rc = priv_launch(t->cfg.priv, &req, &a->pid, &a->start_time, err, sizeof(err));
    strv_free(&argv);
    strv_free(&env);
    a->running_owed = true;
    if (err[0] || rc) {
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": launch failed: %s", job, attempt, err);
        set_outcome(t, a, failed("launch failed: %s", err), now);
        return;
    }
    rc = journal_started(t->cfg.journal, job, attempt, a->pid, a->start_time, err, sizeof(err));
    if (rc) /* the shim runs; a restart finds it by its directory (see recover) */
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": journal: %s", job, attempt, err);
    if (limit > 0)
        a->limit_ms = now + limit * 1000;
    t->cfg.log("job %" PRIu64 ".%" PRIu32 ": started, shim pid %d, %zu GPU(s)", job, attempt,
               (int)a->pid, a->nuuids);
}

/* SIGTERM now, SIGKILL after grace_ms. Under the lock. */
static void start_kill(struct attempts *t, struct att *a, const char *as, int64_t grace_ms,
                       int64_t now)
{
    if (a->phase != PH_RUNNING || a->kill_as)
        return;
    a->kill_as = as;
    char err[256] = "";
    if (priv_signal(t->cfg.priv, a->job, a->attempt, SIGTERM, err, sizeof(err)))
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": SIGTERM: %s", a->job, a->attempt, err);
    a->sigkill_ms = now + (grace_ms > 0 ? grace_ms : 0);
    if (a->sigkill_ms == 0)
        a->sigkill_ms = 1;
    t->cfg.log("job %" PRIu64 ".%" PRIu32 ": stopping (%s): SIGTERM, SIGKILL in %" PRId64 " ms",
               a->job, a->attempt, as, grace_ms);
}

void attempts_apply(struct attempts *t, const json_t *answer, int64_t now_ms)
{
    const json_t *list = json_object_get(answer, "attempts");
    pthread_mutex_lock(&t->lock);
    for (size_t k = 0; k < t->n; k++)
        t->v[k]->listed = false;
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *e = json_array_get(list, i);
        json_int_t job = json_integer_value(json_object_get(e, "job"));
        json_int_t att = json_integer_value(json_object_get(e, "attempt"));
        const char *action = json_string_value(json_object_get(e, "action"));
        if (job <= 0 || att <= 0 || att > UINT32_MAX || !action)
            continue;
        struct att *a = find(t, (uint64_t)job, (uint32_t)att);
        if (a)
            a->listed = true;
        if (a && a->recovered && strcmp(action, "run") == 0)
            adopt(a, e, now_ms);
        if (strcmp(action, "run") == 0 && !a) {
            launch(t, (uint64_t)job, (uint32_t)att, e, now_ms);
        } else if (strcmp(action, "kill") == 0 && a) {
            const char *why = json_string_value(json_object_get(e, "reason"));
            json_int_t grace = json_integer_value(json_object_get(e, "grace_s"));
            start_kill(t, a, why && strstr(why, "preempt") ? "PREEMPTED" : "CANCELLED",
                       json_object_get(e, "grace_s") ? grace * 1000 : t->cfg.kill_grace_ms, now_ms);
        }
    }
    /* Running attempts the controller no longer lists ended there (a node
     * timeout, say): stop them; their report will be refused, which is fine. */
    for (size_t k = 0; k < t->n; k++) {
        if (!t->v[k]->listed && t->v[k]->phase == PH_RUNNING)
            start_kill(t, t->v[k], "CANCELLED", t->cfg.kill_grace_ms, now_ms);
    }
    t->woken = true;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
}

/* ---- recovery ---------------------------------------------------------- */

size_t attempts_recover(struct attempts *t, int64_t now_ms)
{
    struct journal_attempt *list = NULL;
    size_t n = 0, taken = 0;
    if (journal_list(t->cfg.journal, &list, &n))
        return 0;
    pthread_mutex_lock(&t->lock);
    for (size_t k = 0; k < n; k++) {
        const struct journal_attempt *ja = &list[k];
        struct att *a = find(t, ja->job, ja->attempt);
        if (a || !(a = add(t, ja->job, ja->attempt)))
            continue;
        taken++;
        snprintf(a->dir, sizeof(a->dir), "%s", ja->dir);
        a->pid = ja->pid;
        a->start_time = ja->start_time;
        a->running_owed = true; /* perhaps sent already: the controller takes it twice */
        a->recovered = true;
        a->listed = true; /* until the first answer says otherwise */
        a->uuids = calloc(1, sizeof(*a->uuids));
        a->dirty = calloc(1, sizeof(*a->dirty));
        struct shim_status st;
        if (shim_read_status(a->dir, &st, NULL, 0) == 0) {
            set_outcome(t, a, outcome_of(a, &st), now_ms);
        } else if (!ja->pid || !journal_attempt_alive(ja)) {
            /* Begun but never known to have started, or its shim died without a
             * status: whatever may still run of it is killed, and it is
             * reported FAILED; it is never launched again. */
            char err[256];
            priv_signal(t->cfg.priv, a->job, a->attempt, SIGKILL, err, sizeof(err));
            set_outcome(t, a,
                        failed(ja->pid ? "the shim (pid %d) ended without writing a status"
                                       : "the agent stopped while launching it",
                               (int)ja->pid),
                        now_ms);
        }
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": taken up from the journal (%s)", a->job,
                   a->attempt, a->phase == PH_RUNNING ? "running" : "ended");
    }
    pthread_mutex_unlock(&t->lock);
    free(list);
    return taken;
}

/* ---- the monitor ------------------------------------------------------- */

/* Moves one attempt on; under the lock. Returns ms until its next deadline. */
static int64_t advance(struct attempts *t, struct att *a, int64_t now)
{
    int64_t next = 1000;
    if (a->phase == PH_RUNNING) {
        struct shim_status st;
        struct journal_attempt ja = {.pid = a->pid, .start_time = a->start_time};
        if (shim_read_status(a->dir, &st, NULL, 0) == 0) {
            set_outcome(t, a, outcome_of(a, &st), now);
        } else if (!journal_attempt_alive(&ja)) {
            /* The shim may have written its status just before it exited. */
            if (shim_read_status(a->dir, &st, NULL, 0) == 0)
                set_outcome(t, a, outcome_of(a, &st), now);
            else
                set_outcome(t, a,
                            a->kill_as
                                ? json_pack("{s:s, s:i}", "state", a->kill_as, "signal", SIGKILL)
                                : failed("the shim (pid %d) ended without a status", (int)a->pid),
                            now);
        } else {
            if (a->limit_ms && now >= a->limit_ms && !a->kill_as)
                start_kill(t, a, "TIMEOUT", t->cfg.kill_grace_ms, now);
            if (a->kill_as && a->sigkill_ms && now >= a->sigkill_ms) {
                char err[256] = "";
                if (priv_signal(t->cfg.priv, a->job, a->attempt, SIGKILL, err, sizeof(err)))
                    t->cfg.log("job %" PRIu64 ".%" PRIu32 ": SIGKILL: %s", a->job, a->attempt, err);
                a->sigkill_ms = 0;
            }
            if (a->limit_ms && !a->kill_as && a->limit_ms - now < next)
                next = a->limit_ms - now;
            if (a->kill_as && a->sigkill_ms && a->sigkill_ms - now < next)
                next = a->sigkill_ms - now;
        }
    }
    if (a->phase == PH_HELD) {
        /* Reported already: the GPUs stay named in heartbeats until clear. */
        memset(a->dirty, 0, a->nuuids * sizeof(*a->dirty));
        if (sampler_attempt_dirty(t->cfg.gpus, (const char *const *)a->uuids, a->nuuids, a->job,
                                  a->attempt, a->dirty) == 0) {
            t->cfg.log("job %" PRIu64 ".%" PRIu32 ": its GPUs are clear again", a->job, a->attempt);
            a->gone = true;
        }
        return next;
    }
    if (a->phase == PH_ENDING) {
        /* Whatever the command left behind (daemons, setsid children) goes
         * with it, as Slurm's proctrack does; then its GPUs must be clear. */
        char err[256] = "";
        if (a->pid)
            priv_signal(t->cfg.priv, a->job, a->attempt, SIGKILL, err, sizeof(err));
        memset(a->dirty, 0, a->nuuids * sizeof(*a->dirty));
        int nd = a->nuuids ? sampler_attempt_dirty(t->cfg.gpus, (const char *const *)a->uuids,
                                                   a->nuuids, a->job, a->attempt, a->dirty)
                           : 0;
        if (nd != 0 && now < a->dirty_until)
            return 100 < next ? 100 : next;
        bool empty = true;
        if (a->pid)
            priv_cleanup(t->cfg.priv, a->job, a->attempt, &empty, err, sizeof(err));
        if (nd != 0) {
            json_t *list = json_array();
            for (size_t k = 0; k < a->nuuids; k++) {
                if (a->dirty[k] || nd < 0)
                    json_array_append_new(list, json_string(a->uuids[k]));
            }
            t->cfg.log("job %" PRIu64 ".%" PRIu32 ": %d GPU(s) still run its processes: held "
                       "back as dirty",
                       a->job, a->attempt, nd);
            /* The controller holds them back from this report on. */
            if (list && json_object_set_new(a->final, "dirty_gpus", list) != 0)
                t->cfg.log("job %" PRIu64 ".%" PRIu32 ": out of memory", a->job, a->attempt);
        }
        a->phase = PH_FINAL;
    }
    return next;
}

/* A report to send, copied out of the table so that HTTP runs unlocked. */
struct owed {
    uint64_t job;
    uint32_t attempt;
    json_t *body;
    bool final;
};

static bool post_report(struct attempts *t, struct httpc *c, const struct owed *o)
{
    char path[256];
    char node[HTTPC_URL_MAX];
    httpc_escape(t->node, node, sizeof(node));
    snprintf(path, sizeof(path), "/v1/nodes/%.180s/attempts/%" PRIu64 "/%" PRIu32, node, o->job,
             o->attempt);
    char *text = json_dumps(o->body, JSON_COMPACT);
    struct httpc_response r = {0};
    char err[512] = "";
    int rc = text ? httpc_request(c, "POST", path, text, strlen(text), 10000, &r, err, sizeof(err))
                  : GPO_ENOMEM;
    free(text);
    bool done = false;
    if (rc)
        t->cfg.log("report job %" PRIu64 ".%" PRIu32 ": %s (will retry)", o->job, o->attempt, err);
    else if (r.status == 200)
        done = true;
    else if (r.status == 202) /* a gang rank's COMPLETED, noted until the others end */
        done = false;
    else if (r.status == 409 || r.status == 404)
        done = true,
        t->cfg.log("report job %" PRIu64 ".%" PRIu32 " %s: controller answered %ld "
                   "(it ended the attempt already): %.200s",
                   o->job, o->attempt, json_string_value(json_object_get(o->body, "state")),
                   r.status, r.body);
    else
        t->cfg.log("report job %" PRIu64 ".%" PRIu32 ": controller answered %ld (will retry): "
                   "%.200s",
                   o->job, o->attempt, r.status, r.body);
    httpc_response_release(&r);
    return done;
}

int64_t attempts_tick(struct attempts *t, struct httpc *c, int64_t now_ms)
{
    int64_t next = 1000;
    struct owed *owed = NULL;
    size_t nowed = 0;
    pthread_mutex_lock(&t->lock);
    owed = calloc(2 * t->n + 1, sizeof(*owed));
    for (size_t k = 0; owed && k < t->n; k++) {
        struct att *a = t->v[k];
        int64_t d = advance(t, a, now_ms);
        if (d < next)
            next = d;
        if (now_ms < a->report_after)
            continue;
        if (a->running_owed && a->pid)
            owed[nowed++] =
                (struct owed){a->job, a->attempt, json_pack("{s:s}", "state", "RUNNING"), false};
        else if (a->running_owed)
            a->running_owed = false; /* never started: the final report says so */
        if (a->phase == PH_FINAL && !a->running_owed)
            owed[nowed++] = (struct owed){a->job, a->attempt, json_incref(a->final), true};
    }
    pthread_mutex_unlock(&t->lock);
    for (size_t k = 0; k < nowed; k++) {
        bool done = owed[k].body && post_report(t, c, &owed[k]);
        pthread_mutex_lock(&t->lock);
        struct att *a = find(t, owed[k].job, owed[k].attempt);
        if (a && !done)
            a->report_after = now_ms + 1000;
        if (a && done && !owed[k].final) {
            a->running_owed = false;
            if (a->phase == PH_FINAL)
                next = 0; /* its final report right after */
        } else if (a && done) {
            char err[256];
            if (journal_ended(t->cfg.journal, a->job, a->attempt, err, sizeof(err)))
                t->cfg.log("job %" PRIu64 ".%" PRIu32 ": journal: %s", a->job, a->attempt, err);
            t->cfg.log("job %" PRIu64 ".%" PRIu32 ": reported %s", a->job, a->attempt,
                       json_string_value(json_object_get(a->final, "state")));
            bool held = false;
            for (size_t g = 0; g < a->nuuids; g++)
                held |= a->dirty[g];
            a->phase = PH_HELD;
            a->gone = !held;
        }
        pthread_mutex_unlock(&t->lock);
        json_decref(owed[k].body);
    }
    free(owed);
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->n;) {
        if (t->v[i]->gone) {
            att_free(t->v[i]);
            t->v[i] = t->v[--t->n];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return next < 0 ? 0 : next;
}

json_t *attempts_dirty(struct attempts *t)
{
    json_t *list = json_array();
    pthread_mutex_lock(&t->lock);
    for (size_t k = 0; list && k < t->n; k++) {
        const struct att *a = t->v[k];
        for (size_t g = 0; (a->phase == PH_FINAL || a->phase == PH_HELD) && g < a->nuuids; g++) {
            if (a->dirty[g])
                json_array_append_new(list, json_string(a->uuids[g]));
        }
    }
    pthread_mutex_unlock(&t->lock);
    return list;
}

size_t attempts_active(struct attempts *t)
{
    pthread_mutex_lock(&t->lock);
    size_t n = t->n;
    pthread_mutex_unlock(&t->lock);
    return n;
}

void attempts_wait(struct attempts *t, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&t->lock);
    while (!t->woken) {
        if (pthread_cond_timedwait(&t->cond, &t->lock, &ts) == ETIMEDOUT)
            break;
    }
    t->woken = false;
    pthread_mutex_unlock(&t->lock);
}

void attempts_wake(struct attempts *t)
{
    pthread_mutex_lock(&t->lock);
    t->woken = true;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
}

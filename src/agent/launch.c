/*
 * launch.c - an attempt's command, environment, GPUs and files (launch.h).
 */
#include "agent/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/mps.h"
#include "agent/replica.h"
#include "agent/slurmenv.h"
#include "util/errbuf.h"
#include "util/fsutil.h"
#include "base/banned.h"

int launch_strv_add(struct launch_strv *s, const char *fmt, ...)
{
    if (s->n + 1 >= s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 32;
        char **v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            return GPO_ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *str = k >= 0 ? malloc((size_t)k + 1) : NULL;
    if (!str)
        return GPO_ENOMEM;
    va_start(ap, fmt);
    vsnprintf(str, (size_t)k + 1, fmt, ap);
    va_end(ap);
    s->v[s->n++] = str;
    s->v[s->n] = NULL;
    return 0;
}

void launch_strv_release(struct launch_strv *s)
{
    for (size_t k = 0; k < s->n; k++)
        free(s->v[k]);
    free(s->v);
    memset(s, 0, sizeof(*s));
}

void launch_gpus_read(struct launch_gpus *g, const struct gpu_backend *b)
{
    if (g->uuids)
        return;
    unsigned n = gpu_count(b);
    char **v = calloc(n + 1, sizeof(*v));
    for (unsigned k = 0; v && k < n; k++) {
        struct gpu_info info;
        if (gpu_info(b, k, &info, NULL, 0) != 0)
            info.uuid[0] = '\0';
        if (!(v[k] = strdup(info.uuid))) {
            launch_gpus_release(&(struct launch_gpus){v, k});
            return;
        }
    }
    if (v)
        *g = (struct launch_gpus){v, n};
}

void launch_gpus_release(struct launch_gpus *g)
{
    for (size_t k = 0; g->uuids && k < g->n; k++)
        free(g->uuids[k]);
    free(g->uuids);
    *g = (struct launch_gpus){0};
}

static bool env_has(const struct launch_strv *env, const char *name)
{
    size_t len = strlen(name);
    for (size_t k = 0; k < env->n; k++) {
        if (strncmp(env->v[k], name, len) == 0 && env->v[k][len] == '=')
            return true;
    }
    return false;
}

/* Names the job's env may not set: gpuorch sets them. */
static bool reserved(const char *name)
{
    return strncmp(name, "GPUORCH_", 8) == 0 || strcmp(name, "CUDA_VISIBLE_DEVICES") == 0 ||
           strcmp(name, "NVIDIA_VISIBLE_DEVICES") == 0;
}

/* The shares' UUIDs joined by commas: each one's MIG device where it has
 * one (mig), else its GPU's. Caller frees; NULL: out of memory. */
static char *uuid_list(const struct proto_attempt *a, bool mig)
{
    size_t len = 1;
    for (size_t k = 0; k < a->ngpus; k++) {
        const struct proto_share *g = &a->gpus[k];
        len += strlen(mig && g->mig_uuid ? g->mig_uuid : g->uuid) + 1;
    }
    char *list = calloc(1, len);
    size_t at = 0;
    for (size_t k = 0; list && k < a->ngpus; k++) {
        const struct proto_share *g = &a->gpus[k];
        at += (size_t)snprintf(list + at, len - at, "%s%s", k ? "," : "",
                               mig && g->mig_uuid ? g->mig_uuid : g->uuid);
    }
    return list;
}

/*
 * Which GPUs the command sees: by UUID (CUDA's own numbering need not
 * follow NVML's), and a share's size. A share on a MIG instance is seen as
 * its MIG device alone (CUDA_VISIBLE_DEVICES=MIG-...; the container
 * runtime's NVIDIA_VISIBLE_DEVICES takes the same), while GPUORCH_GPUS
 * names the GPUs, as the controller does, and GPUORCH_MIG_DEVICES the MIG
 * devices. MPS limits belong here too.
 */
static int gpu_env(const struct proto_attempt *a, struct launch_strv *env)
{
    bool on_mig = false;
    for (size_t k = 0; k < a->ngpus; k++)
        on_mig |= a->gpus[k].mig_uuid != NULL;
    char *list = uuid_list(a, false), *seen = on_mig ? uuid_list(a, true) : list;
    int rc = list && seen ? 0 : GPO_ENOMEM;
    rc = rc ? rc : launch_strv_add(env, "CUDA_VISIBLE_DEVICES=%s", seen);
    rc = rc ? rc : launch_strv_add(env, "NVIDIA_VISIBLE_DEVICES=%s", a->ngpus ? seen : "void");
    rc = rc ? rc : launch_strv_add(env, "GPUORCH_GPUS=%s", list);
    if (!rc && on_mig)
        rc = launch_strv_add(env, "GPUORCH_MIG_DEVICES=%s", seen);
    if (seen != list)
        free(seen);
    free(list);
    if (!rc && a->ngpus && a->gpus[0].milli < 1000)
        rc = launch_strv_add(env, "GPUORCH_GPU_MILLI=%" PRIu32, a->gpus[0].milli);
    return rc;
}

/* The gang: every rank starts with the same node list and rank 0's address. */
static int gang_env(const struct launch_config *cfg, const struct proto_attempt *a,
                    struct launch_strv *env)
{
    const struct proto_gang *g = &a->gang;
    char nl[8192] = "";
    size_t used = 0;
    for (size_t k = 0; k < g->nnodes && used < sizeof(nl); k++)
        used += (size_t)snprintf(nl + used, sizeof(nl) - used, "%s%s", k ? "," : "", g->nodes[k]);
    size_t nn = g->nnodes ? g->nnodes : 1;
    int rc = launch_strv_add(env, "GPUORCH_NODELIST=%s", g->nnodes ? nl : cfg->node);
    rc = rc ? rc : launch_strv_add(env, "GPUORCH_NUM_NODES=%zu", nn);
    rc = rc ? rc : launch_strv_add(env, "GPUORCH_NODE_RANK=%" PRIu32, g->rank);
    rc = rc ? rc : launch_strv_add(env, "WORLD_SIZE=%zu", nn);
    rc = rc ? rc : launch_strv_add(env, "RANK=%" PRIu32, g->rank);
    rc = rc ? rc
            : launch_strv_add(env, "MASTER_ADDR=%s", g->master_addr ? g->master_addr : "127.0.0.1");
    rc = rc ? rc : launch_strv_add(env, "MASTER_PORT=%" PRIu32, g->master_port);
    return rc;
}

/* The command's environment: ours first, the job's, then the rest of ours. */
static int build_env(const struct launch_config *cfg, const struct proto_attempt *a,
                     struct launch_strv *env)
{
    /* Slurm's first, so that the job's env may pass any SLURM_* name but
     * those, as sbatch's exported environment does. */
    struct launch_strv slurm = {0};
    struct slurmenv_task task = slurmenv_batch_task(a);
    int rc = slurmenv_add(cfg, a, &task, &slurm);
    rc = rc ? rc : launch_strv_add(env, "GPUORCH_JOB_ID=%" PRIu64, a->job);
    rc = rc ? rc : launch_strv_add(env, "GPUORCH_ATTEMPT=%" PRIu32, a->attempt);
    rc = rc ? rc : launch_strv_add(env, "GPUORCH_NODE=%s", cfg->node);
    for (size_t k = 0; !rc && k < a->spec.nenv; k++) {
        const char *name = a->spec.env[k].name;
        if (!reserved(name) && !env_has(&slurm, name) && !(cfg->port && !strcmp(name, "PORT")) &&
            !mps_reserved(a, name))
            rc = launch_strv_add(env, "%s=%s", name, a->spec.env[k].value);
    }
    if (!rc && !env_has(env, "PATH"))
        rc = launch_strv_add(env, "PATH=/usr/local/bin:/usr/bin:/bin");
    rc = rc ? rc : gpu_env(a, env);
    rc = rc ? rc : mps_env(cfg->state_dir, a, env);
    if (!rc && a->array_id != PROTO_NONE) {
        rc = launch_strv_add(env, "GPUORCH_ARRAY_JOB_ID=%" PRId64, a->array_id);
        rc = rc ? rc : launch_strv_add(env, "GPUORCH_ARRAY_TASK_ID=%" PRId64, a->array_index);
    }
    rc = rc ? rc : gang_env(cfg, a, env);
    if (!rc && cfg->port && a->spec.serve.service)
        rc = replica_env(&a->spec.serve, cfg->port, env);
    for (size_t k = 0; !rc && k < slurm.n; k++)
        rc = launch_strv_add(env, "%s", slurm.v[k]);
    launch_strv_release(&slurm);
    return rc;
}

/* A job's output path with sbatch's patterns filled in (launch.h). NULL in,
 * NULL out. */
static const char *expand_path(const struct launch_config *cfg, const struct proto_attempt *a,
                               const char *path, char *buf, size_t len)
{
    if (!path || !strchr(path, '%'))
        return path;
    size_t o = 0;
    for (const char *p = path; *p && o < len; p++) {
        char num[32];
        const char *put = num;
        if (*p != '%' || !p[1]) {
            buf[o++] = *p;
            continue;
        }
        switch (*++p) {
        case 'j':
        case 'J':
            snprintf(num, sizeof(num), "%" PRIu64, a->job);
            break;
        case 'A':
            snprintf(num, sizeof(num), "%" PRIu64,
                     a->array_id != PROTO_NONE ? (uint64_t)a->array_id : a->job);
            break;
        case 'a':
            snprintf(num, sizeof(num), "%" PRId64, a->array_id != PROTO_NONE ? a->array_index : 0);
            break;
        case 'x':
            put = a->spec.name ? a->spec.name : "job";
            break;
        case 'u':
            put = a->user ? a->user : "";
            break;
        case 'N':
            put = cfg->node;
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

/* A script job's file (launch.h), into path (pathlen bytes). */
static int write_script(const struct launch_config *cfg, const struct proto_attempt *a, char *path,
                        size_t pathlen, char *err, size_t errlen)
{
    char dir[JOURNAL_PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/scripts", cfg->state_dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return errbuf_set(err, errlen, -errno, "mkdir %s: %s", dir, strerror(errno));
    int n = snprintf(path, pathlen, "%s/%" PRIu64 ".%" PRIu32, dir, a->job, a->attempt);
    if (n < 0 || (size_t)n >= pathlen)
        return errbuf_set(err, errlen, GPO_ENAMETOOLONG, "%s: path too long", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0700);
    if (fd < 0)
        return errbuf_set(err, errlen, -errno, "%s: %s", path, strerror(errno));
    int rc = fsutil_write_all(fd, a->spec.script, strlen(a->spec.script));
    if (rc)
        errbuf_set(err, errlen, rc, "writing %s: %s", path, gpo_strerror(rc));
    close(fd);
    return rc;
}

int launch_prepare(const struct launch_config *cfg, const struct proto_attempt *a,
                   struct launch *ret, char *err, size_t errlen)
{
    struct launch *l = ret;
    memset(l, 0, sizeof(*l));
    /* A non-root agent runs every job as its own user (a laptop, a dev cluster). */
    const char *unix_user = cfg->as_root ? a->unix_user : NULL;
    int rc = 0;
    if (a->spec.script) {
        rc = write_script(cfg, a, l->script_path, sizeof(l->script_path), err, errlen);
        rc = rc ? rc : launch_strv_add(&l->argv, "%s", l->script_path);
    } else {
        for (size_t k = 0; !rc && k < a->spec.argc; k++)
            rc = launch_strv_add(&l->argv, "%s", a->spec.argv[k]);
    }
    if (!rc && (rc = build_env(cfg, a, &l->env)) != 0 && rc != GPO_ENOMEM)
        errbuf_set(err, errlen, rc, "the job's environment: %s", gpo_strerror(rc));
    if (rc == GPO_ENOMEM)
        errbuf_set(err, errlen, rc, "out of memory");
    else if (!rc && !l->argv.n)
        rc = errbuf_set(err, errlen, GPO_EINVAL, "the assignment has no command");
    if (rc) {
        launch_release(l);
        return rc;
    }
    l->req = (struct priv_launch){
        .job = a->job,
        .attempt = a->attempt,
        .unix_user = unix_user,
        .workdir = a->spec.workdir,
        .argv = (const char *const *)l->argv.v,
        .argc = l->argv.n,
        .env = (const char *const *)l->env.v,
        .nenv = l->env.n,
        .stdout_path = expand_path(cfg, a, a->spec.output, l->out_path, sizeof(l->out_path)),
        .stderr_path = expand_path(cfg, a, a->spec.error, l->err_path, sizeof(l->err_path)),
        .append = a->spec.open_mode == PROTO_OPEN_APPEND,
        .cpu_milli = a->spec.cpus * 1000,
        .mem_mib = a->spec.mem_mib,
        .script = a->spec.script != NULL,
    };
    /* sbatch: without -e, stderr goes to -o's file too. */
    if (l->req.stdout_path && !l->req.stderr_path)
        l->req.stderr_path = l->req.stdout_path;
    return 0;
}

void launch_release(struct launch *l)
{
    if (!l)
        return;
    launch_strv_release(&l->argv);
    launch_strv_release(&l->env);
    memset(&l->req, 0, sizeof(l->req));
}

/*
 * slurmenv.c - the Slurm variables of one task (slurmenv.h).
 */
#include "agent/slurmenv.h"

#include <inttypes.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/hostlist.h"
#include "base/banned.h"

/* The most array indices expanded to tell whether they are evenly spaced
 * (the controller accepts fewer in one array). */
#define ARRAY_EXPAND_MAX 65536

bool slurmenv_reserved(const char *name)
{
    return strncmp(name, "SLURM_", 6) == 0 || strncmp(name, "SLURMD_", 7) == 0;
}

/* The nodes of the attempt: its gang, or this node alone. */
static const char *const *nodes_of(const struct launch_config *cfg, const struct proto_attempt *a,
                                   size_t *ret_n)
{
    if (a->gang.nnodes) {
        *ret_n = a->gang.nnodes;
        return (const char *const *)a->gang.nodes;
    }
    *ret_n = 1;
    return &cfg->node;
}

struct slurmenv_task slurmenv_batch_task(const struct proto_attempt *a)
{
    const struct proto_spec *s = &a->spec;
    uint32_t nn = a->gang.nnodes ? (uint32_t)a->gang.nnodes : 1;
    uint32_t rank = a->gang.nnodes ? a->gang.rank : 0;
    uint32_t ntasks = s->ntasks_per_node ? s->ntasks_per_node * nn : s->ntasks ? s->ntasks : nn;
    if (ntasks < nn)
        ntasks = nn;
    /* The first task on this node: the tasks of the nodes before it. */
    uint32_t before = 0;
    for (uint32_t k = 0; k < rank; k++)
        before += s->ntasks_per_node ? s->ntasks_per_node : ntasks / nn + (k < ntasks % nn);
    if (s->launch == PROTO_LAUNCH_FIRST_NODE)
        before = 0;
    return (struct slurmenv_task){.procid = before, .localid = 0, .ntasks = ntasks, .step = -1};
}

/* The compressed host list of names[0, n), new (caller frees), or NULL
 * with *rc set. */
static char *compress(const char *const *names, size_t n, int *rc)
{
    size_t len = 1;
    for (size_t k = 0; k < n; k++)
        len += strlen(names[k]) + 3;
    char *buf = malloc(len);
    if (!buf) {
        *rc = GPO_ENOMEM;
        return NULL;
    }
    *rc = hostlist_compress(names, n, buf, len);
    if (*rc) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* Adds NAME=COUNT(xN),... for per[0, n) (Slurm's repetition form). */
static int add_counts(struct launch_strv *env, const char *name, const uint32_t *per, size_t n)
{
    char *buf = malloc(n * 24 + 1);
    if (!buf)
        return GPO_ENOMEM;
    size_t at = 0;
    for (size_t k = 0; k < n;) {
        size_t run = 1;
        while (k + run < n && per[k + run] == per[k])
            run++;
        at += (size_t)snprintf(buf + at, n * 24 + 1 - at,
                               run > 1 ? "%s%" PRIu32 "(x%zu)" : "%s%" PRIu32, k ? "," : "", per[k],
                               run);
        k += run;
    }
    buf[at] = '\0';
    int rc = launch_strv_add(env, "%s=%s", name, buf);
    free(buf);
    return rc;
}

/* t->ntasks over n nodes in blocks (the first ntasks % n take one more),
 * or ntasks_per_node on each for the batch step of a job that gave it. */
static uint32_t *tasks_per_node(const struct proto_attempt *a, const struct slurmenv_task *t,
                                size_t n)
{
    uint32_t *per = calloc(n, sizeof(*per));
    for (size_t k = 0; per && k < n; k++) {
        if (t->step < 0 && a->spec.ntasks_per_node)
            per[k] = a->spec.ntasks_per_node;
        else
            per[k] = t->ntasks / (uint32_t)n + (k < t->ntasks % n);
    }
    return per;
}

/* The job's Unix account: the one it runs as. */
static int add_user(const struct launch_config *cfg, const struct proto_attempt *a,
                    struct launch_strv *env)
{
    struct passwd pw, *res = NULL;
    char buf[4096];
    if (cfg->as_root && a->unix_user)
        getpwnam_r(a->unix_user, &pw, buf, sizeof(buf), &res);
    else
        getpwuid_r(cfg->as_root ? 0 : geteuid(), &pw, buf, sizeof(buf), &res);
    const char *name = res ? res->pw_name : cfg->as_root ? a->unix_user : NULL;
    int rc = name ? launch_strv_add(env, "SLURM_JOB_USER=%s", name) : 0;
    if (!rc && res)
        rc = launch_strv_add(env, "SLURM_JOB_UID=%u", (unsigned)res->pw_uid);
    return rc;
}

/* SLURM_JOB_GPUS: the attempt's GPUs by NVML index, when every one is
 * known. */
static int add_gpu_indices(const struct launch_config *cfg, const struct proto_attempt *a,
                           struct launch_strv *env)
{
    if (!cfg->gpu_uuids || !a->ngpus)
        return 0;
    char list[PROTO_GPUS_MAX * 4 + 1];
    size_t at = 0;
    for (size_t k = 0; k < a->ngpus && k < PROTO_GPUS_MAX; k++) {
        size_t i = 0;
        while (i < cfg->ngpu_uuids && strcmp(cfg->gpu_uuids[i], a->gpus[k].uuid) != 0)
            i++;
        if (i == cfg->ngpu_uuids)
            return 0;
        at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%zu", k ? "," : "", i);
    }
    return launch_strv_add(env, "SLURM_JOB_GPUS=%s", list);
}

/* An array's figures from Slurm's array text ("0-15:4,20%2"). */
struct array_figures {
    uint32_t count, min, max, step;
};

static int cmp_u32(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return (a > b) - (a < b);
}

/* One item "A", "A-B" or "A-B:S" at *p; advances *p past it. */
static bool array_item(const char **p, uint32_t *lo, uint32_t *hi, uint32_t *step)
{
    char *end;
    unsigned long a = strtoul(*p, &end, 10), b = a, s = 1;
    if (end == *p || a > PROTO_ARRAY_INDEX_MAX)
        return false;
    if (*end == '-') {
        const char *q = end + 1;
        b = strtoul(q, &end, 10);
        if (end == q || b < a || b > PROTO_ARRAY_INDEX_MAX)
            return false;
        if (*end == ':') {
            q = end + 1;
            s = strtoul(q, &end, 10);
            if (end == q || s == 0 || s > PROTO_ARRAY_INDEX_MAX)
                return false;
        }
    }
    *p = end;
    *lo = (uint32_t)a;
    *hi = (uint32_t)(a + (b - a) / s * s);
    *step = (uint32_t)s;
    return true;
}

/* Count, min, max and step (the indices' spacing when even, else 1).
 * False when the text does not read or holds too many indices. */
static bool array_read(const char *text, struct array_figures *ret)
{
    struct array_figures f = {.min = UINT32_MAX, .step = 1};
    uint32_t *idx = malloc(ARRAY_EXPAND_MAX * sizeof(*idx));
    const char *p = text;
    bool ok = idx != NULL;
    while (ok && *p && *p != '%') {
        uint32_t lo, hi, step;
        ok = array_item(&p, &lo, &hi, &step) && (*p == ',' || *p == '%' || !*p);
        for (uint64_t i = lo; ok && i <= hi; i += step) {
            ok = f.count < ARRAY_EXPAND_MAX;
            if (ok)
                idx[f.count++] = (uint32_t)i;
        }
        if (*p == ',')
            p++;
    }
    ok = ok && f.count > 0;
    if (ok) {
        qsort(idx, f.count, sizeof(*idx), cmp_u32);
        f.min = idx[0];
        f.max = idx[f.count - 1];
        f.step = f.count > 1 ? idx[1] - idx[0] : 1;
        for (uint32_t k = 2; k < f.count && f.step != 1; k++) {
            if (idx[k] - idx[k - 1] != f.step)
                f.step = 1;
        }
        *ret = f;
    }
    free(idx);
    return ok;
}

static int add_array(const struct proto_attempt *a, struct launch_strv *env)
{
    if (a->array_id == PROTO_NONE)
        return 0;
    int rc = launch_strv_add(env, "SLURM_ARRAY_JOB_ID=%" PRId64, a->array_id);
    rc = rc ? rc : launch_strv_add(env, "SLURM_ARRAY_TASK_ID=%" PRId64, a->array_index);
    struct array_figures f;
    if (rc || !a->spec.array || !array_read(a->spec.array, &f))
        return rc;
    rc = launch_strv_add(env, "SLURM_ARRAY_TASK_COUNT=%" PRIu32, f.count);
    rc = rc ? rc : launch_strv_add(env, "SLURM_ARRAY_TASK_MIN=%" PRIu32, f.min);
    rc = rc ? rc : launch_strv_add(env, "SLURM_ARRAY_TASK_MAX=%" PRIu32, f.max);
    return rc ? rc : launch_strv_add(env, "SLURM_ARRAY_TASK_STEP=%" PRIu32, f.step);
}

/* What the job is: ids, name, account, user, where it runs. */
static int add_job(const struct launch_config *cfg, const struct proto_attempt *a,
                   struct launch_strv *env)
{
    const struct proto_spec *s = &a->spec;
    int rc = launch_strv_add(env, "SLURM_CLUSTER_NAME=%s", SLURMENV_CLUSTER);
    rc = rc ? rc : launch_strv_add(env, "SLURM_JOB_ID=%" PRIu64, a->job);
    rc = rc ? rc : launch_strv_add(env, "SLURM_JOBID=%" PRIu64, a->job);
    rc = rc ? rc : launch_strv_add(env, "SLURM_JOB_NAME=%s", s->name ? s->name : "job");
    rc = rc ? rc : add_user(cfg, a, env);
    if (!rc && s->team)
        rc = launch_strv_add(env, "SLURM_JOB_ACCOUNT=%s", s->team);
    const char *pool = a->pool ? a->pool : s->pool;
    if (!rc && pool)
        rc = launch_strv_add(env, "SLURM_JOB_PARTITION=%s", pool);
    const char *qos = a->priority ? a->priority : s->priority;
    if (!rc && qos)
        rc = launch_strv_add(env, "SLURM_JOB_QOS=%s", qos);
    if (!rc && s->submit_dir)
        rc = launch_strv_add(env, "SLURM_SUBMIT_DIR=%s", s->submit_dir);
    if (!rc && a->attempt > 1)
        rc = launch_strv_add(env, "SLURM_RESTART_COUNT=%" PRIu32, a->attempt - 1);
    return rc ? rc : add_array(a, env);
}

/* The allocation's CPUs, GPUs and memory, as asked. */
static int add_resources(const struct launch_config *cfg, const struct proto_attempt *a, size_t nn,
                         struct launch_strv *env)
{
    const struct proto_spec *s = &a->spec;
    uint32_t cpus = s->cpus / (uint32_t)nn;
    int rc = 0;
    if (cpus) {
        rc = nn > 1 ? launch_strv_add(env, "SLURM_JOB_CPUS_PER_NODE=%" PRIu32 "(x%zu)", cpus, nn)
                    : launch_strv_add(env, "SLURM_JOB_CPUS_PER_NODE=%" PRIu32, cpus);
        rc = rc ? rc : launch_strv_add(env, "SLURM_CPUS_ON_NODE=%" PRIu32, cpus);
    }
    if (!rc && s->cpus_per_task)
        rc = launch_strv_add(env, "SLURM_CPUS_PER_TASK=%" PRIu32, s->cpus_per_task);
    rc = rc ? rc : launch_strv_add(env, "SLURM_GPUS_ON_NODE=%zu", a->ngpus);
    rc = rc ? rc : add_gpu_indices(cfg, a, env);
    if (!rc && s->gpus_per_node)
        rc = launch_strv_add(env, "SLURM_GPUS_PER_NODE=%" PRIu32, s->gpus_per_node);
    if (!rc && s->gpus_per_task)
        rc = launch_strv_add(env, "SLURM_GPUS_PER_TASK=%" PRIu32, s->gpus_per_task);
    if (!rc && s->mem_per_node_mib)
        rc = launch_strv_add(env, "SLURM_MEM_PER_NODE=%" PRId64, s->mem_per_node_mib);
    if (!rc && s->mem_per_cpu_mib)
        rc = launch_strv_add(env, "SLURM_MEM_PER_CPU=%" PRId64, s->mem_per_cpu_mib);
    if (!rc && s->mem_per_gpu_mib)
        rc = launch_strv_add(env, "SLURM_MEM_PER_GPU=%" PRId64, s->mem_per_gpu_mib);
    return rc;
}

/* The nodes and the tasks on them; a step's own variables. */
static int add_layout(const struct launch_config *cfg, const struct proto_attempt *a,
                      const struct slurmenv_task *t, struct launch_strv *env)
{
    size_t nn;
    const char *const *names = nodes_of(cfg, a, &nn);
    int rc = 0;
    char *list = compress(names, nn, &rc);
    uint32_t *per = list ? tasks_per_node(a, t, nn) : NULL;
    if (list && !per)
        rc = GPO_ENOMEM;
    const char *const vars[] = {"SLURM_JOB_NODELIST", "SLURM_NODELIST"};
    for (size_t k = 0; !rc && k < 2; k++)
        rc = launch_strv_add(env, "%s=%s", vars[k], list);
    rc = rc ? rc : launch_strv_add(env, "SLURM_JOB_NUM_NODES=%zu", nn);
    rc = rc ? rc : launch_strv_add(env, "SLURM_NNODES=%zu", nn);
    rc = rc ? rc : launch_strv_add(env, "SLURMD_NODENAME=%s", cfg->node);
    rc = rc ? rc : launch_strv_add(env, "SLURM_NODEID=%" PRIu32, a->gang.nnodes ? a->gang.rank : 0);
    rc = rc ? rc : launch_strv_add(env, "SLURM_NTASKS=%" PRIu32, t->ntasks);
    rc = rc ? rc : launch_strv_add(env, "SLURM_NPROCS=%" PRIu32, t->ntasks);
    rc = rc ? rc : add_counts(env, "SLURM_TASKS_PER_NODE", per, nn);
    if (!rc && a->spec.ntasks_per_node)
        rc = launch_strv_add(env, "SLURM_NTASKS_PER_NODE=%" PRIu32, a->spec.ntasks_per_node);
    rc = rc ? rc : launch_strv_add(env, "SLURM_PROCID=%" PRIu32, t->procid);
    rc = rc ? rc : launch_strv_add(env, "SLURM_LOCALID=%" PRIu32, t->localid);
    if (!rc && t->step >= 0) {
        rc = launch_strv_add(env, "SLURM_STEP_ID=%" PRId64, t->step);
        rc = rc ? rc : launch_strv_add(env, "SLURM_STEPID=%" PRId64, t->step);
        rc = rc ? rc : launch_strv_add(env, "SLURM_STEP_NODELIST=%s", list);
        rc = rc ? rc : launch_strv_add(env, "SLURM_STEP_NUM_NODES=%zu", nn);
        rc = rc ? rc : launch_strv_add(env, "SLURM_STEP_NUM_TASKS=%" PRIu32, t->ntasks);
        rc = rc ? rc : add_counts(env, "SLURM_STEP_TASKS_PER_NODE", per, nn);
    }
    free(per);
    free(list);
    return rc;
}

int slurmenv_add(const struct launch_config *cfg, const struct proto_attempt *a,
                 const struct slurmenv_task *t, struct launch_strv *env)
{
    if (!t->ntasks || t->procid >= t->ntasks || t->localid > t->procid)
        return GPO_EINVAL;
    size_t nn;
    nodes_of(cfg, a, &nn);
    int rc = add_job(cfg, a, env);
    rc = rc ? rc : add_layout(cfg, a, t, env);
    return rc ? rc : add_resources(cfg, a, nn, env);
}

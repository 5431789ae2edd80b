/*
 * jobspec_shape.c - Slurm's shape of a job (jobspec.h): nodes, tasks, and
 * the per-node and per-task amounts that make the totals the scheduler
 * reads; the constraint's and the signal's syntax.
 *
 * Decisions the header leaves open:
 *  - A gang is spread evenly: "nodes" N > 1 needs GPUs, CPUs, memory and
 *    tasks that divide by N, and is refused otherwise (Slurm may lay tasks
 *    out unevenly; gpuorch says so instead of doing something else).
 *  - Without "cpus" or "cpus_per_task", a job with tasks or nodes gets one
 *    CPU per task (Slurm's default); without a memory field, a gang gets
 *    1024 MiB per node.
 *  - "ntasks" and "ntasks_per_node" without "nodes" set the node count.
 *  - A constraint joins feature names with '&' (and) and '|' (or), '&'
 *    binding tighter; Slurm's brackets, counts and parentheses are refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/jobspec.h"
#include "cluster/jobspec_int.h"
#include "util/jsonv.h"
#include "util/sigspec.h"
#include "base/banned.h"

#define fail jobspec_fail

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

const char *const jobspec_open_modes[] = {"truncate", "append", NULL};
const char *const jobspec_launches[] = {"every_node", "first_node", NULL};

int32_t jobspec_tasks(const struct jobspec *spec)
{
    int32_t nodes = spec->nodes > 0 ? spec->nodes : 1;
    if (spec->ntasks > 0)
        return spec->ntasks;
    return spec->ntasks_per_node > 0 ? spec->ntasks_per_node * nodes : nodes;
}

static int check_signal(struct wire *w, char *err, size_t errlen)
{
    char msg[200];
    struct sigspec sig;
    if (!w->signal)
        return 0;
    if (sigspec_parse(w->signal, &sig, msg, sizeof(msg)) != 0)
        return fail(err, errlen, "field 'signal': %s", msg);
    w->spec.signal = sig.num;
    w->spec.signal_before_s = sig.before_s;
    w->spec.signal_batch_only = sig.batch_only;
    return 0;
}

static bool is_feature_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-' || c == ':' || c == '=';
}

static int check_constraint(const struct jobspec *s, char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    const char *t = s->constraint;
    size_t run = 0;
    for (size_t i = 0; t; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c == '&' || c == '|' || c == '\0') {
            if (run == 0)
                return fail(err, errlen,
                            "field 'constraint': '%s' has an empty feature name (features are "
                            "joined by '&' or '|')",
                            jsonv_quote(t, strlen(t), q));
            if (c == '\0')
                break;
            run = 0;
        } else if (is_feature_char(c)) {
            run++;
        } else {
            return fail(err, errlen,
                        "field 'constraint': '%c' in '%s' is not supported: give feature "
                        "names ([A-Za-z0-9._-]) joined by '&' (and) or '|' (or)",
                        c, jsonv_quote(t, strlen(t), q));
        }
    }
    return 0;
}

static int check_tasks(struct jobspec *s, char *err, size_t errlen)
{
    if (s->ntasks && s->ntasks_per_node) {
        if (!s->nodes && s->ntasks % s->ntasks_per_node == 0)
            s->nodes = s->ntasks / s->ntasks_per_node;
        if (s->ntasks != s->ntasks_per_node * (s->nodes ? s->nodes : 1))
            return fail(err, errlen,
                        "fields 'ntasks' and 'ntasks_per_node': %d tasks are not %d on each of "
                        "%d nodes",
                        (int)s->ntasks, (int)s->ntasks_per_node, (int)(s->nodes ? s->nodes : 1));
    }
    if (s->nodes > 1 && s->ntasks % s->nodes)
        return fail(err, errlen,
                    "fields 'ntasks' and 'nodes': %d tasks over %d nodes; tasks are spread "
                    "evenly, so give a multiple of %d",
                    (int)s->ntasks, (int)s->nodes, (int)s->nodes);
    if (s->nodes == 1 && s->multi_node)
        return fail(err, errlen,
                    "fields 'nodes' and 'multi_node': 1 node keeps the job on one node");
    if (s->nodes > 1 && (s->gpu_milli > 0 || s->gpu_mem_mib > 0))
        return fail(err, errlen,
                    "fields 'nodes' and 'gpus': a share of one GPU cannot span %d nodes",
                    (int)s->nodes);
    if (s->nodes > 1)
        s->multi_node = true;
    if ((int64_t)jobspec_tasks(s) > JOBSPEC_TASKS_MAX)
        return fail(err, errlen, "fields 'ntasks_per_node' and 'nodes': more than %d tasks",
                    JOBSPEC_TASKS_MAX);
    return 0;
}

/* A total given beside the per-node or per-task amounts must be theirs. */
static int agree(bool given, int64_t total, int64_t derived, const char *key, const char *from,
                 char *err, size_t errlen)
{
    if (given && total != derived)
        return fail(err, errlen, "fields '%s' and '%s' disagree: %lld and %lld", key, from,
                    (long long)total, (long long)derived);
    return 0;
}

static int check_evenly(const struct jobspec *s, const char *key, int64_t total, char *err,
                        size_t errlen)
{
    if (s->nodes > 1 && total % s->nodes)
        return fail(err, errlen,
                    "field '%s': %lld over %d nodes; a gang is spread evenly, so give a "
                    "multiple of %d",
                    key, (long long)total, (int)s->nodes, (int)s->nodes);
    return 0;
}

static int shape_gpus(struct wire *w, char *err, size_t errlen)
{
    struct jobspec *s = &w->spec;
    int64_t nodes = s->nodes ? s->nodes : 1, tasks = jobspec_tasks(s), want = -1;
    const char *from = NULL;
    if (s->gpus_per_node)
        want = s->gpus_per_node * nodes, from = "gpus_per_node";
    if (s->gpus_per_task) {
        int rc = agree(want >= 0, want, s->gpus_per_task * tasks, from ? from : "", "gpus_per_task",
                       err, errlen);
        if (rc)
            return rc;
        want = s->gpus_per_task * tasks, from = "gpus_per_task";
    }
    if (want >= 0) {
        if (want > JOBSPEC_GPUS_MAX)
            return fail(err, errlen, "field '%s': %lld GPUs in all, at most %d", from,
                        (long long)want, JOBSPEC_GPUS_MAX);
        if (s->gpu_milli > 0 || s->gpu_mem_mib > 0)
            return fail(err, errlen,
                        "field '%s': whole GPUs, not beside a fraction or 'gpu_mem_mib'", from);
        int rc = agree(w->gpus_p == JSONV_GIVEN, s->gpus, want, "gpus", from, err, errlen);
        if (rc)
            return rc;
        s->gpus = (int32_t)want;
    }
    return check_evenly(s, "gpus", s->gpus, err, errlen);
}

static int shape_cpus(struct wire *w, char *err, size_t errlen)
{
    struct jobspec *s = &w->spec;
    int64_t tasks = jobspec_tasks(s), want = -1;
    if (s->cpus_per_task)
        want = s->cpus_per_task * tasks;
    else if (w->cpus_p != JSONV_GIVEN && (s->ntasks || s->ntasks_per_node || s->nodes > 1))
        want = tasks; /* one CPU per task */
    if (want > CPUS_MAX)
        return fail(err, errlen, "field 'cpus_per_task': %lld CPUs in all, at most %d",
                    (long long)want, CPUS_MAX);
    if (want >= 0) {
        int rc = agree(w->cpus_p == JSONV_GIVEN && s->cpus_per_task, s->cpus, want, "cpus",
                       "cpus_per_task", err, errlen);
        if (rc)
            return rc;
        s->cpus = (int32_t)want;
    }
    return check_evenly(s, "cpus", s->cpus, err, errlen);
}

static int shape_mem(struct wire *w, char *err, size_t errlen)
{
    struct jobspec *s = &w->spec;
    int given = (s->mem_per_node_mib > 0) + (s->mem_per_cpu_mib > 0) + (s->mem_per_gpu_mib > 0) +
                s->mem_whole_node;
    if (given > 1)
        return fail(err, errlen,
                    "fields 'mem_per_node_mib', 'mem_per_cpu_mib', 'mem_per_gpu_mib' and "
                    "'mem_whole_node' are exclusive: give one");
    int64_t nodes = s->nodes ? s->nodes : 1, want = -1;
    const char *from = "mem_whole_node";
    if (s->mem_per_node_mib)
        want = s->mem_per_node_mib * nodes, from = "mem_per_node_mib";
    if (s->mem_per_cpu_mib)
        want = s->mem_per_cpu_mib * s->cpus, from = "mem_per_cpu_mib";
    if (s->mem_per_gpu_mib) {
        if (s->gpus <= 0)
            return fail(err, errlen, "field 'mem_per_gpu_mib': the job asks for no whole GPUs");
        want = s->mem_per_gpu_mib * s->gpus, from = "mem_per_gpu_mib";
    }
    if (s->mem_whole_node)
        want = 0;
    if (want < 0 && w->mem_p != JSONV_GIVEN && s->nodes > 1)
        want = 1024 * nodes, from = "nodes";
    if (want > HOST_MEM_MAX_MIB)
        return fail(err, errlen, "field '%s': %lld MiB in all, at most %lld", from, (long long)want,
                    (long long)HOST_MEM_MAX_MIB);
    if (want >= 0) {
        int rc = agree(w->mem_p == JSONV_GIVEN, s->mem_mib, want, "mem_mib", from, err, errlen);
        if (rc)
            return rc;
        s->mem_mib = want;
    }
    return check_evenly(s, "mem_mib", s->mem_mib, err, errlen);
}

int jobspec_check_shape(struct wire *w, char *err, size_t errlen)
{
    int rc = check_signal(w, err, errlen);
    rc = rc ? rc : check_constraint(&w->spec, err, errlen);
    rc = rc ? rc : check_tasks(&w->spec, err, errlen);
    rc = rc ? rc : shape_gpus(w, err, errlen);
    rc = rc ? rc : shape_cpus(w, err, errlen);
    rc = rc ? rc : shape_mem(w, err, errlen);
    if (!rc && w->spec.submit_dir && w->spec.submit_dir[0] != '/')
        rc = fail(err, errlen, "field 'submit_dir': must be an absolute path (start with '/')");
    return rc;
}

int jobspec_shape_json(const struct jobspec *s, json_t *o)
{
    char sig[SIGSPEC_TEXT_MAX];
    sigspec_format(&(struct sigspec){s->signal, s->signal_before_s, s->signal_batch_only}, sig,
                   sizeof(sig));
    const struct {
        const char *key;
        json_t *v;
    } kv[] = {
        {"nodes", json_integer(s->nodes)},
        {"gpus_per_node", json_integer(s->gpus_per_node)},
        {"ntasks", json_integer(s->ntasks)},
        {"ntasks_per_node", json_integer(s->ntasks_per_node)},
        {"cpus_per_task", json_integer(s->cpus_per_task)},
        {"gpus_per_task", json_integer(s->gpus_per_task)},
        {"mem_per_node_mib", json_integer(s->mem_per_node_mib)},
        {"mem_per_cpu_mib", json_integer(s->mem_per_cpu_mib)},
        {"mem_per_gpu_mib", json_integer(s->mem_per_gpu_mib)},
        {"mem_whole_node", json_boolean(s->mem_whole_node)},
        {"exclusive", json_boolean(s->exclusive)},
        {"constraint", s->constraint ? json_string(s->constraint) : json_null()},
        {"signal", sig[0] ? json_string(sig) : json_null()},
        {"open_mode", json_string(jobspec_open_modes[s->open_mode == JOBSPEC_APPEND])},
        {"launch", json_string(jobspec_launches[s->launch == JOBSPEC_FIRST_NODE])},
        {"submit_dir", s->submit_dir ? json_string(s->submit_dir) : json_null()},
        {"hold", json_boolean(s->hold)},
        {"begin", json_integer(s->begin)},
    };
    int e = 0;
    for (size_t k = 0; k < ARRAY_LEN(kv); k++)
        e |= json_object_set_new(o, kv[k].key, kv[k].v);
    return e;
}

/*
 * sampler.c - GPU inventory, heartbeat samples and dirty GPUs (sampler.h).
 */
#include "agent/sampler.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/privsrv_check.h"
#include "util/errbuf.h"
#include "base/banned.h"

/* Largest /proc/PID/environ read; the variables we look for come early in
 * practice (the agent puts them first), but a big environment is fine. */
#define ENVIRON_MAX ((size_t)256 * 1024)

/* Lowest index reachable from `start` over NVLink (the GPU's domain). */
static int nvlink_domain(const struct gpu_info *info, unsigned n, unsigned start)
{
    if (info[start].npeers == 0)
        return -1;
    bool seen[GPU_MAX_DEVICES] = {false};
    unsigned stack[GPU_MAX_DEVICES], top = 0, low = start;
    seen[start] = true;
    stack[top++] = start;
    while (top) {
        unsigned g = stack[--top];
        if (g < low)
            low = g;
        for (unsigned p = 0; p < info[g].npeers; p++) {
            unsigned q = info[g].peers[p];
            if (q < n && !seen[q]) {
                seen[q] = true;
                stack[top++] = q;
            }
        }
    }
    return (int)low;
}

int sampler_mig_instances(const struct gpu_mig *m, struct proto_mig_instance **ret, size_t *ret_n)
{
    size_t n = m->enabled ? m->ninstances : 0;
    struct proto_mig_instance *v = n ? calloc(n, sizeof(*v)) : NULL;
    if (n && !v)
        return GPO_ENOMEM;
    for (size_t k = 0; k < n; k++) {
        const struct gpu_mig_instance *g = &m->instances[k];
        const struct gpu_mig_compute *c = g->ncompute ? &g->compute[0] : NULL;
        v[k] = (struct proto_mig_instance){.profile_id = g->profile_id,
                                           .start = g->placement.start,
                                           .gi_id = g->id,
                                           .ci_id = c ? (int64_t)c->id : PROTO_NONE};
        if (c && c->uuid[0] && !(v[k].uuid = strdup(c->uuid))) {
            sampler_mig_instances_free(v, k);
            return GPO_ENOMEM;
        }
    }
    *ret = v;
    *ret_n = n;
    return 0;
}

void sampler_mig_instances_free(struct proto_mig_instance *v, size_t n)
{
    for (size_t k = 0; v && k < n; k++)
        free(v[k].uuid);
    free(v);
}

/* GPU i's MIG state into s (mig_known, mode, instances); a GPU without
 * MIG, or whose state cannot be read, stays unknown. 0 or GPO_ENOMEM. */
static int sample_mig(const struct gpu_backend *b, unsigned i, struct proto_gpu_sample *s)
{
    struct gpu_mig *m = malloc(sizeof(*m));
    if (!m)
        return GPO_ENOMEM;
    int rc = 0;
    if (gpu_mig_read(b, i, m, NULL, 0) == 0 && m->capable) {
        rc = sampler_mig_instances(m, &s->mig, &s->nmig);
        s->mig_known = rc == 0;
        s->mig_enabled = m->enabled;
        s->mig_pending = m->pending;
    }
    free(m);
    return rc;
}

int sampler_inventory(const struct gpu_backend *b, struct proto_register *reg, char *err,
                      size_t errlen)
{
    unsigned n = gpu_count(b);
    struct gpu_info *info = calloc(n ? n : 1, sizeof(*info));
    struct proto_gpu *gpus = calloc(n ? n : 1, sizeof(*gpus));
    int rc = info && gpus ? 0 : errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    for (unsigned i = 0; !rc && i < n; i++)
        rc = gpu_info(b, i, &info[i], err, errlen);
    size_t made = 0;
    for (unsigned i = 0; !rc && i < n; i++, made++) {
        const struct gpu_info *g = &info[i];
        gpus[i] = (struct proto_gpu){.index = g->index,
                                     .uuid = strdup(g->uuid),
                                     .gpu_type = strdup(g->gpu_type),
                                     .mem_mib = (uint32_t)g->memory_mib,
                                     .nvlink_domain = nvlink_domain(info, n, i),
                                     .mig_slices = g->mig_capable ? SAMPLER_MIG_SLICES : 0,
                                     .mig_enabled = g->mig_capable && g->mig_enabled,
                                     .mig_pending = g->mig_capable && g->mig_pending};
        struct proto_gpu_sample mig = {0};
        bool fine = gpus[i].uuid && gpus[i].gpu_type;
        if (fine && g->mig_capable && g->mig_enabled && sample_mig(b, i, &mig) != 0)
            fine = false;
        proto_gpu_sample_fit(&mig); /* no instance the controller would refuse */
        gpus[i].mig = mig.mig;
        gpus[i].nmig = mig.nmig;
        if (!fine)
            rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    free(info);
    if (rc) {
        struct proto_register tmp = {.gpus = gpus, .ngpus = made};
        proto_register_release(&tmp);
        return rc;
    }
    reg->gpus = gpus;
    reg->ngpus = n;
    return 0;
}

bool sampler_proc_attempt(pid_t pid, uint64_t *job, uint32_t *attempt)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char *buf = malloc(ENVIRON_MAX);
    size_t len = 0;
    ssize_t r = 0;
    while (buf && len < ENVIRON_MAX &&
           ((r = read(fd, buf + len, ENVIRON_MAX - len)) > 0 || (r < 0 && errno == EINTR)))
        len += r > 0 ? (size_t)r : 0;
    close(fd);
    bool mine = buf && privsrv_check_environ(buf, len, job, attempt);
    free(buf);
    return mine;
}

/* The attempts of a sample's processes into jobs[] and atts[] (0: none):
 * through the privileged half when there is one (other users' environments
 * are root's to read), else from /proc directly. 0, or the privileged
 * half's code (everything then 0). */
static int attribute(struct priv *p, const struct gpu_sample *s, uint64_t *jobs, uint32_t *atts)
{
    memset(jobs, 0, s->nprocs * sizeof(*jobs));
    memset(atts, 0, s->nprocs * sizeof(*atts));
    if (!p) {
        for (size_t k = 0; k < s->nprocs; k++) {
            if (!sampler_proc_attempt((pid_t)s->procs[k].pid, &jobs[k], &atts[k]))
                jobs[k] = atts[k] = 0;
        }
        return 0;
    }
    pid_t *pids = calloc(s->nprocs + 1, sizeof(*pids));
    if (!pids)
        return GPO_ENOMEM;
    /* A pid the request's check would refuse is no attempt's: left out. */
    size_t m = 0;
    for (size_t k = 0; k < s->nprocs; k++) {
        if (s->procs[k].pid >= 2 && s->procs[k].pid <= PRIV_PID_MAX)
            pids[m++] = (pid_t)s->procs[k].pid;
    }
    uint64_t *j = calloc(m + 1, sizeof(*j));
    uint32_t *a = calloc(m + 1, sizeof(*a));
    int rc = j && a ? priv_attribute(p, pids, m, j, a, NULL, 0) : GPO_ENOMEM;
    for (size_t k = 0, at = 0; !rc && k < s->nprocs; k++) {
        bool asked = s->procs[k].pid >= 2 && s->procs[k].pid <= PRIV_PID_MAX;
        if (asked) {
            jobs[k] = j[at];
            atts[k] = a[at];
            at++;
        }
    }
    free(j);
    free(a);
    free(pids);
    return rc;
}

static int64_t figure(int64_t v)
{
    return v == GPU_UNKNOWN ? PROTO_NONE : v;
}

/* GPU i's sample into *ret (its strings and processes owned by it). */
static int sample_one(const struct gpu_backend *b, struct priv *p, unsigned i,
                      struct proto_gpu_sample *ret)
{
    struct gpu_info info;
    struct gpu_sample s = {0};
    char err[256] = "";
    int rc = gpu_info(b, i, &info, err, sizeof(err));
    if (!rc)
        rc = gpu_sample(b, i, &s, err, sizeof(err));
    if (rc) {
        *ret = (struct proto_gpu_sample){.index = i, .error = strdup(err[0] ? err : "failed")};
        proto_gpu_sample_fit(ret);
        return ret->error ? 0 : GPO_ENOMEM;
    }
    struct proto_process *procs = s.nprocs ? calloc(s.nprocs, sizeof(*procs)) : NULL;
    uint64_t *jobs = calloc(s.nprocs + 1, sizeof(*jobs));
    uint32_t *atts = calloc(s.nprocs + 1, sizeof(*atts));
    if (procs && jobs && atts && s.procs_known && attribute(p, &s, jobs, atts) != 0)
        memset(jobs, 0, s.nprocs * sizeof(*jobs)); /* shown as no attempt's */
    *ret = (struct proto_gpu_sample){
        .index = i,
        .uuid = strdup(info.uuid),
        .utilization_pct = figure(s.utilization_pct),
        .memory_utilization_pct = figure(s.memory_utilization_pct),
        .memory_used_mib = figure(s.memory_used_mib),
        .memory_total_mib = figure(s.memory_total_mib),
        .power_mw = figure(s.power_mw),
        .temperature_c = figure(s.temperature_c),
        .procs_known = s.procs_known,
        .procs = procs,
        .nprocs = procs && jobs && atts && s.procs_known ? s.nprocs : 0,
    };
    for (size_t k = 0; k < ret->nprocs; k++) {
        bool mine = jobs[k] != 0;
        procs[k] = (struct proto_process){.pid = s.procs[k].pid,
                                          .memory_mib = figure(s.procs[k].memory_mib),
                                          .job = mine ? (int64_t)jobs[k] : PROTO_NONE,
                                          .attempt = mine ? atts[k] : PROTO_NONE};
    }
    bool whole = ret->uuid && (procs || !s.nprocs) && jobs && atts;
    if (info.mig_capable && sample_mig(b, i, ret) != 0)
        whole = false;
    free(jobs);
    free(atts);
    gpu_sample_release(&s);
    proto_gpu_sample_fit(ret); /* what a GPU reports out of range is not reported */
    return whole ? 0 : GPO_ENOMEM;
}

int sampler_sample(const struct gpu_backend *b, struct priv *p, struct proto_heartbeat *hb)
{
    unsigned n = gpu_count(b);
    struct proto_heartbeat h = {.gpus = calloc(n ? n : 1, sizeof(*h.gpus))};
    int rc = h.gpus ? 0 : GPO_ENOMEM;
    for (unsigned i = 0; !rc && i < n; i++) {
        rc = sample_one(b, p, i, &h.gpus[i]);
        h.ngpus++; /* released with the rest, also when it failed part way */
    }
    if (rc) {
        proto_heartbeat_release(&h);
        return rc;
    }
    hb->gpus = h.gpus;
    hb->ngpus = h.ngpus;
    return 0;
}

int sampler_attempt_dirty(const struct gpu_backend *b, struct priv *p, const char *const *uuids,
                          size_t n, uint64_t job, uint32_t attempt, bool *dirty)
{
    int count = 0, failed = 0;
    for (unsigned i = 0; i < gpu_count(b); i++) {
        struct gpu_info info;
        if (gpu_info(b, i, &info, NULL, 0))
            continue;
        size_t at = n;
        for (size_t k = 0; k < n; k++) {
            if (strcmp(uuids[k], info.uuid) == 0)
                at = k;
        }
        if (at == n)
            continue;
        struct gpu_sample s = {0};
        int rc = gpu_sample(b, i, &s, NULL, 0);
        if (rc) {
            failed = rc;
            count++;
            continue;
        }
        uint64_t *jobs = calloc(s.nprocs + 1, sizeof(*jobs));
        uint32_t *atts = calloc(s.nprocs + 1, sizeof(*atts));
        rc = jobs && atts ? attribute(p, &s, jobs, atts) : GPO_ENOMEM;
        if (rc) { /* processes we cannot attribute: the GPU is not known to be clean */
            failed = rc;
            dirty[at] = true;
        }
        for (size_t k = 0; !rc && k < s.nprocs && !dirty[at]; k++)
            dirty[at] = jobs[k] == job && atts[k] == attempt;
        count += dirty[at];
        free(jobs);
        free(atts);
        gpu_sample_release(&s);
    }
    return failed ? failed : count;
}

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
                                     .mig_enabled = g->mig_capable && g->mig_enabled};
        if (!gpus[i].uuid || !gpus[i].gpu_type)
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
    char *buf = malloc(ENVIRON_MAX + 1);
    size_t len = 0;
    ssize_t r = 0;
    while (buf && len < ENVIRON_MAX &&
           ((r = read(fd, buf + len, ENVIRON_MAX - len)) > 0 || (r < 0 && errno == EINTR)))
        len += r > 0 ? (size_t)r : 0;
    close(fd);
    if (!buf)
        return false;
    buf[len] = '\0';
    bool have_job = false, have_attempt = false;
    uint64_t j = 0;
    uint32_t a = 0;
    for (size_t off = 0; off < len; off += strlen(buf + off) + 1) {
        const char *e = buf + off;
        char *end;
        if (strncmp(e, "GPUORCH_JOB_ID=", 15) == 0) {
            errno = 0;
            unsigned long long v = strtoull(e + 15, &end, 10);
            have_job = !errno && *end == '\0' && end != e + 15 && v > 0;
            j = v;
        } else if (strncmp(e, "GPUORCH_ATTEMPT=", 16) == 0) {
            errno = 0;
            unsigned long v = strtoul(e + 16, &end, 10);
            have_attempt = !errno && *end == '\0' && end != e + 16 && v > 0 && v <= UINT32_MAX;
            a = (uint32_t)v;
        }
    }
    free(buf);
    if (!have_job || !have_attempt)
        return false;
    *job = j;
    *attempt = a;
    return true;
}

static int64_t figure(int64_t v)
{
    return v == GPU_UNKNOWN ? PROTO_NONE : v;
}

/* GPU i's sample into *ret (its strings and processes owned by it). */
static int sample_one(const struct gpu_backend *b, unsigned i, struct proto_gpu_sample *ret)
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
        .nprocs = procs && s.procs_known ? s.nprocs : 0,
    };
    for (size_t k = 0; k < ret->nprocs; k++) {
        uint64_t job;
        uint32_t att;
        bool mine = sampler_proc_attempt((pid_t)s.procs[k].pid, &job, &att);
        procs[k] = (struct proto_process){.pid = s.procs[k].pid,
                                          .memory_mib = figure(s.procs[k].memory_mib),
                                          .job = mine ? (int64_t)job : PROTO_NONE,
                                          .attempt = mine ? att : PROTO_NONE};
    }
    gpu_sample_release(&s);
    proto_gpu_sample_fit(ret); /* what a GPU reports out of range is not reported */
    return ret->uuid && (procs || !s.nprocs) ? 0 : GPO_ENOMEM;
}

int sampler_sample(const struct gpu_backend *b, struct proto_heartbeat *hb)
{
    unsigned n = gpu_count(b);
    struct proto_heartbeat h = {.gpus = calloc(n ? n : 1, sizeof(*h.gpus))};
    int rc = h.gpus ? 0 : GPO_ENOMEM;
    for (unsigned i = 0; !rc && i < n; i++) {
        rc = sample_one(b, i, &h.gpus[i]);
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

int sampler_attempt_dirty(const struct gpu_backend *b, const char *const *uuids, size_t n,
                          uint64_t job, uint32_t attempt, bool *dirty)
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
        for (size_t k = 0; k < s.nprocs && !dirty[at]; k++) {
            uint64_t j;
            uint32_t a;
            if (sampler_proc_attempt((pid_t)s.procs[k].pid, &j, &a) && j == job && a == attempt)
                dirty[at] = true;
        }
        count += dirty[at];
        gpu_sample_release(&s);
    }
    return failed ? failed : count;
}

/*
 * nvml.c - the NVML backend: libnvidia-ml.so.1 loaded with dlopen at run
 * time, so that gpuorch has no build-time NVIDIA dependency and starts
 * (with a clear error) where no driver is installed.
 *
 * There is no nvml.h on the build machines: the declarations below are this
 * file's own, copied from NVIDIA's published API reference (nvml.h, API
 * version 12), with NVIDIA's names so that each can be checked against it.
 * _Static_asserts pin every struct passed to NVML to the published header's
 * sizes and offsets on 64-bit Linux, so that a slip in a declaration fails
 * the build instead of corrupting memory at run time. The symbols resolved
 * are the versioned ones the header's #defines map the plain names to
 * (nvmlInit -> nvmlInit_v2, nvmlDeviceGetComputeRunningProcesses -> _v3, ...):
 * the plain names are older ABIs kept only for old binaries.
 *
 * Decisions the header leaves open:
 *  - Discovery is strict: a GPU that cannot be listed or whose PCI
 *    information cannot be read fails the open, since skipping it would
 *    shift every later index away from NVML's own (nvidia-smi's).
 *  - NVLink peers are found once, at open. GPU i reaches GPU j when one of
 *    i's active links ends at j's PCI address, or the other way round, or
 *    when both have a link to the same device that is not a local GPU: that
 *    is an NVSwitch, which connects every GPU it reaches (HGX boards). A
 *    link query that answers NOT_SUPPORTED, INVALID_ARGUMENT (a link number
 *    past the GPU's last) or NOT_FOUND counts as no link; other errors fail.
 *  - PCI addresses are compared as (domain, bus, device), parsed from the
 *    busId text when it parses (NVML writes 8 or 4 domain digits depending
 *    on the field), else taken from the numeric fields.
 *  - In a sample, NOT_SUPPORTED makes a figure GPU_UNKNOWN (utilization
 *    under MIG, power on some boards); any other error fails the sample.
 *    NOT_SUPPORTED or NO_PERMISSION from the process list leaves
 *    procs_known false.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "gpu/nvml_int.h"
#include "util/errbuf.h"
#include "base/banned.h"

static const struct nvml_symbol {
    const char *name;
    size_t offset; /* in struct nvml_fns */
} nvml_symbols[] = {
#define NVML_FN_SYMBOL(member, symbol, ret, params) {symbol, offsetof(struct nvml_fns, member)},
    NVML_FUNCS(NVML_FN_SYMBOL)
#undef NVML_FN_SYMBOL
};

static const struct nvml_backend *nvml_of(const struct gpu_backend *b)
{
    return (const struct nvml_backend *)b;
}

static int map_return(enum nvmlReturn_enum r)
{
    switch (r) {
#define NVML_RETURN_CASE(name, value, code)                                                        \
    case name:                                                                                     \
        return code;
        // NOLINTNEXTLINE(bugprone-branch-clone): several NVML codes map to one GPO code
        NVML_RETURN_MAP(NVML_RETURN_CASE)
#undef NVML_RETURN_CASE
    }
    return GPO_EIO;
}

int nvml_fail(const struct nvml_backend *nb, enum nvmlReturn_enum r, const char *call,
              unsigned index, char *err, size_t errlen)
{
    const char *text = nb->fn.error_string ? nb->fn.error_string(r) : NULL;
    if (!text)
        text = "unknown error";
    int code = map_return(r);
    if (code == GPO_OK) /* a success where the caller needed something else */
        code = GPO_EIO;
    if (index == NO_GPU)
        return errbuf_set(err, errlen, code, "%s: %s (NVML error %d)", call, text, (int)r);
    return errbuf_set(err, errlen, code, "%s(GPU %u): %s (NVML error %d)", call, index, text,
                      (int)r);
}

/* 0: success; 1: the GPU does not report it (the figure stays GPU_UNKNOWN);
 * else the failure's code. */
static int optional(const struct nvml_backend *nb, enum nvmlReturn_enum r, const char *call,
                    unsigned index, char *err, size_t errlen)
{
    if (r == NVML_SUCCESS)
        return 0;
    if (r == NVML_ERROR_NOT_SUPPORTED)
        return 1;
    return nvml_fail(nb, r, call, index, err, errlen);
}

void nvml_copy_text(char *dst, size_t dstlen, const char *src, size_t n)
{
    size_t len = strnlen(src, n);
    if (len >= dstlen)
        len = dstlen - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

static struct pci_key pci_key_of(const struct nvmlPciInfo_st *pci)
{
    char text[sizeof(pci->busId) + 1];
    nvml_copy_text(text, sizeof(text), pci->busId, sizeof(pci->busId));
    struct pci_key k;
    /* busId is NVML's "DOMAIN:BUS:DEVICE.FUNCTION" in short hex fields: the count is the
     * check sscanf needs, and a text that does not parse falls back to the numbers below. */
    // NOLINTNEXTLINE(cert-err34-c): NVML's own short hex fields, see above
    if (sscanf(text, "%x:%x:%x", &k.domain, &k.bus, &k.device) == 3)
        return k;
    return (struct pci_key){pci->domain, pci->bus, pci->device};
}

static bool pci_key_equal(struct pci_key a, struct pci_key b)
{
    return a.domain == b.domain && a.bus == b.bus && a.device == b.device;
}

static void nvml_close(struct gpu_backend *b)
{
    struct nvml_backend *nb = (struct nvml_backend *)b;
    if (nb->inited)
        nb->fn.shutdown();
    if (nb->dl)
        dlclose(nb->dl);
    free(nb);
}

static int load(struct nvml_backend *nb, const char *path, bool is_default, char *err,
                size_t errlen)
{
    dlerror();
    nb->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!nb->dl) {
        const char *why = dlerror();
        return errbuf_set(err, errlen, GPO_ELIBACC, "%s%s", why ? why : path,
                          is_default ? " (no NVIDIA driver?)" : "");
    }
    for (size_t i = 0; i < sizeof(nvml_symbols) / sizeof(nvml_symbols[0]); i++) {
        void *sym = dlsym(nb->dl, nvml_symbols[i].name);
        if (!sym)
            return errbuf_set(err, errlen, GPO_ELIBBAD, "%s lacks %s (NVIDIA driver too old?)",
                              path, nvml_symbols[i].name);
        memcpy((char *)&nb->fn + nvml_symbols[i].offset, &sym, sizeof(sym));
    }
    nvml_mig_resolve(nb);
    enum nvmlReturn_enum r = nb->fn.init();
    if (r != NVML_SUCCESS)
        return nvml_fail(nb, r, "nvmlInit_v2", NO_GPU, err, errlen);
    nb->inited = true;
    return 0;
}

static int discover(struct nvml_backend *nb, char *err, size_t errlen)
{
    unsigned count = 0;
    enum nvmlReturn_enum r = nb->fn.get_count(&count);
    if (r != NVML_SUCCESS)
        return nvml_fail(nb, r, "nvmlDeviceGetCount_v2", NO_GPU, err, errlen);
    if (count > GPU_MAX_DEVICES)
        return errbuf_set(err, errlen, GPO_E2BIG, "NVML reports %u GPUs; at most %d are handled",
                          count, GPU_MAX_DEVICES);
    for (unsigned i = 0; i < count; i++) {
        struct nvml_gpu *g = &nb->gpus[i];
        r = nb->fn.get_handle(i, &g->dev);
        if (r != NVML_SUCCESS)
            return nvml_fail(nb, r, "nvmlDeviceGetHandleByIndex_v2", i, err, errlen);
        struct nvmlPciInfo_st pci = {0};
        r = nb->fn.get_pci(g->dev, &pci);
        if (r != NVML_SUCCESS)
            return nvml_fail(nb, r, "nvmlDeviceGetPciInfo_v3", i, err, errlen);
        g->pci = pci_key_of(&pci);
        nvml_copy_text(g->bus_id, sizeof(g->bus_id), pci.busId, sizeof(pci.busId));
    }
    nb->base.count = count;
    return 0;
}

/* The local GPU at that PCI address, or -1. */
static int gpu_at(const struct nvml_backend *nb, struct pci_key k)
{
    for (unsigned j = 0; j < nb->base.count; j++)
        if (pci_key_equal(nb->gpus[j].pci, k))
            return (int)j;
    return -1;
}

/* A link query's answer that means "no link here". */
static bool no_link(enum nvmlReturn_enum r)
{
    return r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT ||
           r == NVML_ERROR_NOT_FOUND;
}

/* Walks GPU i's links: direct peers go into its mask, other endpoints
 * (switches) into ends[0, *ret_nends). */
static int walk_links(struct nvml_backend *nb, unsigned i, struct pci_key *ends,
                      unsigned *ret_nends, char *err, size_t errlen)
{
    struct nvml_gpu *g = &nb->gpus[i];
    unsigned nends = 0;
    for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; link++) {
        enum nvmlEnableState_enum active = NVML_FEATURE_DISABLED;
        enum nvmlReturn_enum r = nb->fn.get_link_state(g->dev, link, &active);
        if (r == NVML_ERROR_NOT_SUPPORTED)
            break; /* no NVLink on this GPU */
        if (no_link(r))
            continue;
        if (r != NVML_SUCCESS)
            return nvml_fail(nb, r, "nvmlDeviceGetNvLinkState", i, err, errlen);
        if (active != NVML_FEATURE_ENABLED)
            continue;
        struct nvmlPciInfo_st pci = {0};
        r = nb->fn.get_link_remote_pci(g->dev, link, &pci);
        if (no_link(r))
            continue;
        if (r != NVML_SUCCESS)
            return nvml_fail(nb, r, "nvmlDeviceGetNvLinkRemotePciInfo_v2", i, err, errlen);
        struct pci_key k = pci_key_of(&pci);
        int j = gpu_at(nb, k);
        if (j >= 0 && (unsigned)j != i)
            g->peers |= UINT64_C(1) << j;
        else if (j < 0)
            ends[nends++] = k;
    }
    *ret_nends = nends;
    return 0;
}

static int find_topology(struct nvml_backend *nb, char *err, size_t errlen)
{
    unsigned n = nb->base.count;
    struct pci_key(*ends)[NVML_NVLINK_MAX_LINKS] = calloc(n ? n : 1, sizeof(*ends));
    unsigned nends[GPU_MAX_DEVICES] = {0};
    if (!ends)
        return errbuf_set(err, errlen, GPO_ENOMEM, "gpu: out of memory");
    for (unsigned i = 0; i < n; i++) {
        int rc = walk_links(nb, i, ends[i], &nends[i], err, errlen);
        if (rc) {
            free(ends);
            return rc;
        }
    }
    for (unsigned i = 0; i < n; i++)
        for (unsigned j = i + 1; j < n; j++)
            for (unsigned a = 0; a < nends[i]; a++)
                for (unsigned c = 0; c < nends[j]; c++)
                    if (pci_key_equal(ends[i][a], ends[j][c]))
                        nb->gpus[i].peers |= UINT64_C(1) << j;
    free(ends);
    /* A link seen from one side only still joins both. */
    for (unsigned i = 0; i < n; i++)
        for (unsigned j = 0; j < n; j++)
            if (nb->gpus[i].peers & (UINT64_C(1) << j))
                nb->gpus[j].peers |= UINT64_C(1) << i;
    return 0;
}

int nvml_info(const struct gpu_backend *b, unsigned index, struct gpu_info *ret, char *err,
              size_t errlen)
{
    const struct nvml_backend *nb = nvml_of(b);
    const struct nvml_gpu *g = &nb->gpus[index];
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "";
    struct nvmlMemory_st mem = {0};
    unsigned current = 0, pending = 0;
    enum nvmlReturn_enum r = nb->fn.get_uuid(g->dev, uuid, sizeof(uuid));
    if (r != NVML_SUCCESS)
        return nvml_fail(nb, r, "nvmlDeviceGetUUID", index, err, errlen);
    r = nb->fn.get_name(g->dev, name, sizeof(name));
    if (r != NVML_SUCCESS)
        return nvml_fail(nb, r, "nvmlDeviceGetName", index, err, errlen);
    r = nb->fn.get_memory(g->dev, &mem);
    if (r != NVML_SUCCESS)
        return nvml_fail(nb, r, "nvmlDeviceGetMemoryInfo", index, err, errlen);
    r = nb->fn.get_mig_mode(g->dev, &current, &pending);
    int mig = optional(nb, r, "nvmlDeviceGetMigMode", index, err, errlen);
    if (mig < 0)
        return mig;

    struct gpu_info info = {.index = index, .memory_mib = (int64_t)(mem.total >> 20)};
    nvml_copy_text(info.uuid, sizeof(info.uuid), uuid, sizeof(uuid));
    nvml_copy_text(info.name, sizeof(info.name), name, sizeof(name));
    nvml_copy_text(info.pci_bus_id, sizeof(info.pci_bus_id), g->bus_id, sizeof(g->bus_id));
    info.mig_capable = mig == 0;
    info.mig_enabled = mig == 0 && current == NVML_DEVICE_MIG_ENABLE;
    info.mig_pending = mig == 0 && pending == NVML_DEVICE_MIG_ENABLE;
    int rc = gpu_type_from_name(info.name, info.memory_mib, info.gpu_type, sizeof(info.gpu_type));
    if (rc)
        return errbuf_set(err, errlen, rc, "GPU %u: no gpu_type for name '%s'", index, info.name);
    for (unsigned j = 0; j < nb->base.count; j++)
        if (g->peers & (UINT64_C(1) << j))
            info.peers[info.npeers++] = j;
    *ret = info;
    return 0;
}

static int64_t bytes_to_mib(unsigned long long bytes)
{
    if (bytes == (unsigned long long)NVML_VALUE_NOT_AVAILABLE)
        return GPU_UNKNOWN;
    return (int64_t)(bytes >> 20);
}

static int copy_procs(const struct nvmlProcessInfo_v2_st *buf, unsigned n, struct gpu_sample *s,
                      char *err, size_t errlen)
{
    s->procs_known = true;
    if (n == 0)
        return 0;
    s->procs = calloc(n, sizeof(*s->procs));
    if (!s->procs)
        return errbuf_set(err, errlen, GPO_ENOMEM, "gpu: out of memory");
    for (unsigned k = 0; k < n; k++)
        s->procs[k] = (struct gpu_process){
            .pid = buf[k].pid,
            .memory_mib = bytes_to_mib(buf[k].usedGpuMemory),
            .gpu_instance_id = buf[k].gpuInstanceId,
            .compute_instance_id = buf[k].computeInstanceId,
        };
    s->nprocs = n;
    return 0;
}

/* NVML's size protocol: a call with room for none returns the count (or
 * success when there are none); the list is then fetched with room to spare,
 * and again, larger, if processes started in between. */
static int read_procs(const struct nvml_backend *nb, unsigned index, struct gpu_sample *s,
                      char *err, size_t errlen)
{
    struct nvmlDevice_st *dev = nb->gpus[index].dev;
    struct nvmlProcessInfo_v2_st *buf = NULL;
    unsigned cap = 0;
    for (int attempt = 0; attempt < PROC_ATTEMPTS; attempt++) {
        unsigned n = cap;
        enum nvmlReturn_enum r = nb->fn.get_procs(dev, &n, buf);
        if (r == NVML_SUCCESS && n <= cap) {
            int rc = copy_procs(buf, n, s, err, errlen);
            free(buf);
            return rc;
        }
        if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_NO_PERMISSION) {
            free(buf);
            return 0; /* procs_known stays false */
        }
        if (r != NVML_SUCCESS && r != NVML_ERROR_INSUFFICIENT_SIZE) {
            free(buf);
            return nvml_fail(nb, r, "nvmlDeviceGetComputeRunningProcesses_v3", index, err, errlen);
        }
        if (n > GPU_MAX_PROCS || cap == GPU_MAX_PROCS) {
            free(buf);
            return errbuf_set(err, errlen, GPO_E2BIG, "GPU %u: over %d processes", index,
                              GPU_MAX_PROCS);
        }
        /* Room for a quarter more, in case processes start before the call. */
        unsigned want = n + n / 4 + 4;
        if (want <= cap)
            want = cap + cap / 2 + 4;
        if (want > GPU_MAX_PROCS)
            want = GPU_MAX_PROCS;
        struct nvmlProcessInfo_v2_st *grown = realloc(buf, want * sizeof(*buf));
        if (!grown) {
            free(buf);
            return errbuf_set(err, errlen, GPO_ENOMEM, "gpu: out of memory");
        }
        buf = grown;
        cap = want;
    }
    free(buf);
    return errbuf_set(err, errlen, GPO_EIO, "GPU %u: the process list grew on each of %d reads",
                      index, PROC_ATTEMPTS);
}

static int nvml_sample(const struct gpu_backend *b, unsigned index, struct gpu_sample *ret,
                       char *err, size_t errlen)
{
    const struct nvml_backend *nb = nvml_of(b);
    struct nvmlDevice_st *dev = nb->gpus[index].dev;
    struct gpu_sample s = {
        .utilization_pct = GPU_UNKNOWN,
        .memory_utilization_pct = GPU_UNKNOWN,
        .memory_used_mib = GPU_UNKNOWN,
        .memory_total_mib = GPU_UNKNOWN,
        .power_mw = GPU_UNKNOWN,
        .temperature_c = GPU_UNKNOWN,
    };
    struct nvmlUtilization_st util = {0};
    int rc = optional(nb, nb->fn.get_utilization(dev, &util), "nvmlDeviceGetUtilizationRates",
                      index, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 0) {
        s.utilization_pct = util.gpu > 100 ? 100 : (int32_t)util.gpu;
        s.memory_utilization_pct = util.memory > 100 ? 100 : (int32_t)util.memory;
    }
    struct nvmlMemory_st mem = {0};
    rc = optional(nb, nb->fn.get_memory(dev, &mem), "nvmlDeviceGetMemoryInfo", index, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 0) {
        s.memory_used_mib = (int64_t)(mem.used >> 20);
        s.memory_total_mib = (int64_t)(mem.total >> 20);
    }
    unsigned mw = 0;
    rc = optional(nb, nb->fn.get_power(dev, &mw), "nvmlDeviceGetPowerUsage", index, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 0)
        s.power_mw = mw;
    unsigned temp = 0;
    rc = optional(nb, nb->fn.get_temperature(dev, NVML_TEMPERATURE_GPU, &temp),
                  "nvmlDeviceGetTemperature", index, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 0)
        s.temperature_c = temp > INT32_MAX ? INT32_MAX : (int32_t)temp;
    rc = read_procs(nb, index, &s, err, errlen);
    if (rc < 0)
        return rc;
    *ret = s;
    return 0;
}

static const struct gpu_backend_ops nvml_ops = {
    .name = "nvml",
    .info = nvml_info,
    .sample = nvml_sample,
    .close = nvml_close,
    .mig_read = nvml_mig_read,
    .mig_create = nvml_mig_create,
    .mig_destroy = nvml_mig_destroy,
    .mig_set_mode = nvml_mig_set_mode,
};

int gpu_backend_open(const char *lib_path, struct gpu_backend **ret, char *err, size_t errlen)
{
    if (!ret)
        return errbuf_set(err, errlen, GPO_EINVAL, "gpu: NULL result");
    if (lib_path && !*lib_path)
        return errbuf_set(err, errlen, GPO_EINVAL, "gpu: empty NVML library path");
    struct nvml_backend *nb = calloc(1, sizeof(*nb));
    if (!nb)
        return errbuf_set(err, errlen, GPO_ENOMEM, "gpu: out of memory");
    nb->base.ops = &nvml_ops;
    int rc = load(nb, lib_path ? lib_path : NVML_DEFAULT_LIB, lib_path == NULL, err, errlen);
    if (rc == 0)
        rc = discover(nb, err, errlen);
    if (rc == 0)
        rc = find_topology(nb, err, errlen);
    if (rc) {
        nvml_close(&nb->base);
        return rc;
    }
    *ret = &nb->base;
    return 0;
}

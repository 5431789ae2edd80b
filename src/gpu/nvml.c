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
#include "util/errbuf.h"
#include "base/banned.h"

#define NVML_DEFAULT_LIB "libnvidia-ml.so.1"
#define PROC_ATTEMPTS    5 /* tries to read a process list that keeps growing */
#define NO_GPU           UINT_MAX

/* ---- NVML's declarations (nvml.h, API version 12) ------------------------ */

#define NVML_DEVICE_UUID_V2_BUFFER_SIZE       96
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE       96
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE    32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_NVLINK_MAX_LINKS                 18
#define NVML_DEVICE_MIG_ENABLE                1
#define NVML_VALUE_NOT_AVAILABLE              (-1) /* in unsigned long long fields: all ones */

/* nvmlReturn_t, every documented value, and the code each maps to here. */
#define NVML_RETURN_MAP(X)                                                                         \
    X(NVML_SUCCESS, 0, GPO_OK)                                                                     \
    X(NVML_ERROR_UNINITIALIZED, 1, GPO_EIO)                                                        \
    X(NVML_ERROR_INVALID_ARGUMENT, 2, GPO_EINVAL)                                                  \
    X(NVML_ERROR_NOT_SUPPORTED, 3, GPO_ENOTSUP)                                                    \
    X(NVML_ERROR_NO_PERMISSION, 4, GPO_EPERM)                                                      \
    X(NVML_ERROR_ALREADY_INITIALIZED, 5, GPO_EIO)                                                  \
    X(NVML_ERROR_NOT_FOUND, 6, GPO_ENOENT)                                                         \
    X(NVML_ERROR_INSUFFICIENT_SIZE, 7, GPO_ENOBUFS)                                                \
    X(NVML_ERROR_INSUFFICIENT_POWER, 8, GPO_EIO)                                                   \
    X(NVML_ERROR_DRIVER_NOT_LOADED, 9, GPO_ENODRIVER)                                              \
    X(NVML_ERROR_TIMEOUT, 10, GPO_EIO)                                                             \
    X(NVML_ERROR_IRQ_ISSUE, 11, GPO_EIO)                                                           \
    X(NVML_ERROR_LIBRARY_NOT_FOUND, 12, GPO_ELIBACC)                                               \
    X(NVML_ERROR_FUNCTION_NOT_FOUND, 13, GPO_ELIBBAD)                                              \
    X(NVML_ERROR_CORRUPTED_INFOROM, 14, GPO_EIO)                                                   \
    X(NVML_ERROR_GPU_IS_LOST, 15, GPO_EGPULOST)                                                    \
    X(NVML_ERROR_RESET_REQUIRED, 16, GPO_EGPULOST)                                                 \
    X(NVML_ERROR_OPERATING_SYSTEM, 17, GPO_EIO)                                                    \
    X(NVML_ERROR_LIB_RM_VERSION_MISMATCH, 18, GPO_ENODRIVER)                                       \
    X(NVML_ERROR_IN_USE, 19, GPO_EIO)                                                              \
    X(NVML_ERROR_MEMORY, 20, GPO_ENOMEM)                                                           \
    X(NVML_ERROR_NO_DATA, 21, GPO_EIO)                                                             \
    X(NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, 22, GPO_ENOTSUP)                                          \
    X(NVML_ERROR_INSUFFICIENT_RESOURCES, 23, GPO_EIO)                                              \
    X(NVML_ERROR_FREQ_NOT_SUPPORTED, 24, GPO_ENOTSUP)                                              \
    X(NVML_ERROR_ARGUMENT_VERSION_MISMATCH, 25, GPO_ENODRIVER)                                     \
    X(NVML_ERROR_DEPRECATED, 26, GPO_ENOTSUP)                                                      \
    X(NVML_ERROR_NOT_READY, 27, GPO_EIO)                                                           \
    X(NVML_ERROR_GPU_NOT_FOUND, 28, GPO_ENOENT)                                                    \
    X(NVML_ERROR_INVALID_STATE, 29, GPO_EIO)                                                       \
    X(NVML_ERROR_RESET_TYPE_NOT_SUPPORTED, 30, GPO_ENOTSUP)                                        \
    X(NVML_ERROR_UNKNOWN, 999, GPO_EIO)

enum nvmlReturn_enum {
#define NVML_RETURN_ENUM(name, value, code) name = (value),
    NVML_RETURN_MAP(NVML_RETURN_ENUM)
#undef NVML_RETURN_ENUM
};

enum nvmlEnableState_enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 };

enum nvmlTemperatureSensors_enum { NVML_TEMPERATURE_GPU = 0 };

struct nvmlDevice_st; /* opaque: nvmlDevice_t is a pointer to it */

struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
};

struct nvmlMemory_st {
    unsigned long long total; /* bytes */
    unsigned long long free;
    unsigned long long used;
};

struct nvmlUtilization_st {
    unsigned int gpu; /* percent */
    unsigned int memory;
};

/* nvmlProcessInfo_t, the layout nvmlDeviceGetComputeRunningProcesses_v3 takes. */
struct nvmlProcessInfo_v2_st {
    unsigned int pid;
    unsigned long long usedGpuMemory; /* bytes, or NVML_VALUE_NOT_AVAILABLE */
    unsigned int gpuInstanceId;       /* 0xFFFFFFFF outside MIG */
    unsigned int computeInstanceId;
};

/* The published header's values (64-bit Linux). */
_Static_assert(sizeof(enum nvmlReturn_enum) == 4, "nvmlReturn_t is an int-sized enum");
_Static_assert(sizeof(enum nvmlEnableState_enum) == 4, "nvmlEnableState_t is an int-sized enum");
_Static_assert(sizeof(enum nvmlTemperatureSensors_enum) == 4, "an int-sized enum");
_Static_assert(sizeof(struct nvmlPciInfo_st) == 68, "nvmlPciInfo_t size");
_Static_assert(offsetof(struct nvmlPciInfo_st, domain) == 16, "nvmlPciInfo_t.domain");
_Static_assert(offsetof(struct nvmlPciInfo_st, bus) == 20, "nvmlPciInfo_t.bus");
_Static_assert(offsetof(struct nvmlPciInfo_st, device) == 24, "nvmlPciInfo_t.device");
_Static_assert(offsetof(struct nvmlPciInfo_st, pciDeviceId) == 28, "nvmlPciInfo_t.pciDeviceId");
_Static_assert(offsetof(struct nvmlPciInfo_st, pciSubSystemId) == 32,
               "nvmlPciInfo_t.pciSubSystemId");
_Static_assert(offsetof(struct nvmlPciInfo_st, busId) == 36, "nvmlPciInfo_t.busId");
_Static_assert(sizeof(struct nvmlMemory_st) == 24, "nvmlMemory_t size");
_Static_assert(offsetof(struct nvmlMemory_st, free) == 8, "nvmlMemory_t.free");
_Static_assert(offsetof(struct nvmlMemory_st, used) == 16, "nvmlMemory_t.used");
_Static_assert(sizeof(struct nvmlUtilization_st) == 8, "nvmlUtilization_t size");
_Static_assert(offsetof(struct nvmlUtilization_st, memory) == 4, "nvmlUtilization_t.memory");
_Static_assert(sizeof(struct nvmlProcessInfo_v2_st) == 24, "nvmlProcessInfo_t size");
_Static_assert(offsetof(struct nvmlProcessInfo_v2_st, usedGpuMemory) == 8,
               "nvmlProcessInfo_t.usedGpuMemory");
_Static_assert(offsetof(struct nvmlProcessInfo_v2_st, gpuInstanceId) == 16,
               "nvmlProcessInfo_t.gpuInstanceId");
_Static_assert(offsetof(struct nvmlProcessInfo_v2_st, computeInstanceId) == 20,
               "nvmlProcessInfo_t.computeInstanceId");
/* Our buffers hold whatever NVML's fill. */
_Static_assert(GPU_UUID_MAX >= NVML_DEVICE_UUID_V2_BUFFER_SIZE, "UUID buffer");
_Static_assert(GPU_NAME_MAX >= NVML_DEVICE_NAME_V2_BUFFER_SIZE, "name buffer");
_Static_assert(GPU_PCI_BUS_ID_MAX >= NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE, "bus id buffer");
_Static_assert(GPU_MAX_DEVICES <= 64, "peers are a 64-bit mask");
/* dlsym's void * is stored into function pointers (POSIX guarantees it works). */
_Static_assert(sizeof(void *) == sizeof(void (*)(void)), "function pointers are data-sized");

/* Every call this backend makes: member, symbol, return type, parameters. */
#define NVML_FUNCS(X)                                                                              \
    X(init, "nvmlInit_v2", enum nvmlReturn_enum, (void))                                           \
    X(shutdown, "nvmlShutdown", enum nvmlReturn_enum, (void))                                      \
    X(error_string, "nvmlErrorString", const char *, (enum nvmlReturn_enum))                       \
    X(get_count, "nvmlDeviceGetCount_v2", enum nvmlReturn_enum, (unsigned int *))                  \
    X(get_handle, "nvmlDeviceGetHandleByIndex_v2", enum nvmlReturn_enum,                           \
      (unsigned int, struct nvmlDevice_st **))                                                     \
    X(get_uuid, "nvmlDeviceGetUUID", enum nvmlReturn_enum,                                         \
      (struct nvmlDevice_st *, char *, unsigned int))                                              \
    X(get_name, "nvmlDeviceGetName", enum nvmlReturn_enum,                                         \
      (struct nvmlDevice_st *, char *, unsigned int))                                              \
    X(get_memory, "nvmlDeviceGetMemoryInfo", enum nvmlReturn_enum,                                 \
      (struct nvmlDevice_st *, struct nvmlMemory_st *))                                            \
    X(get_pci, "nvmlDeviceGetPciInfo_v3", enum nvmlReturn_enum,                                    \
      (struct nvmlDevice_st *, struct nvmlPciInfo_st *))                                           \
    X(get_mig_mode, "nvmlDeviceGetMigMode", enum nvmlReturn_enum,                                  \
      (struct nvmlDevice_st *, unsigned int *, unsigned int *))                                    \
    X(get_link_state, "nvmlDeviceGetNvLinkState", enum nvmlReturn_enum,                            \
      (struct nvmlDevice_st *, unsigned int, enum nvmlEnableState_enum *))                         \
    X(get_link_remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2", enum nvmlReturn_enum,            \
      (struct nvmlDevice_st *, unsigned int, struct nvmlPciInfo_st *))                             \
    X(get_utilization, "nvmlDeviceGetUtilizationRates", enum nvmlReturn_enum,                      \
      (struct nvmlDevice_st *, struct nvmlUtilization_st *))                                       \
    X(get_power, "nvmlDeviceGetPowerUsage", enum nvmlReturn_enum,                                  \
      (struct nvmlDevice_st *, unsigned int *))                                                    \
    X(get_temperature, "nvmlDeviceGetTemperature", enum nvmlReturn_enum,                           \
      (struct nvmlDevice_st *, enum nvmlTemperatureSensors_enum, unsigned int *))                  \
    X(get_procs, "nvmlDeviceGetComputeRunningProcesses_v3", enum nvmlReturn_enum,                  \
      (struct nvmlDevice_st *, unsigned int *, struct nvmlProcessInfo_v2_st *))

struct nvml_fns {
#define NVML_FN_MEMBER(member, symbol, ret, params) ret(*member) params;
    NVML_FUNCS(NVML_FN_MEMBER)
#undef NVML_FN_MEMBER
};

static const struct nvml_symbol {
    const char *name;
    size_t offset; /* in struct nvml_fns */
} nvml_symbols[] = {
#define NVML_FN_SYMBOL(member, symbol, ret, params) {symbol, offsetof(struct nvml_fns, member)},
    NVML_FUNCS(NVML_FN_SYMBOL)
#undef NVML_FN_SYMBOL
};

/* ---- the backend ------------------------------------------------------- */

struct pci_key {
    unsigned domain, bus, device;
};

struct nvml_gpu {
    struct nvmlDevice_st *dev;
    struct pci_key pci;
    char bus_id[GPU_PCI_BUS_ID_MAX];
    uint64_t peers; /* bit j: reaches GPU j over NVLink */
};

struct nvml_backend {
    struct gpu_backend base; /* first: the ops receive a pointer to it */
    void *dl;
    bool inited; /* nvmlInit_v2 succeeded: nvmlShutdown owed */
    struct nvml_fns fn;
    struct nvml_gpu gpus[GPU_MAX_DEVICES];
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

/* The mapped code, with "call(GPU i): nvmlErrorString text (NVML error n)". */
static int nvml_fail(const struct nvml_backend *nb, enum nvmlReturn_enum r, const char *call,
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

/* Copies NVML's text (NUL-terminated within n bytes, or cut there). */
static void copy_text(char *dst, size_t dstlen, const char *src, size_t n)
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
    copy_text(text, sizeof(text), pci->busId, sizeof(pci->busId));
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
        copy_text(g->bus_id, sizeof(g->bus_id), pci.busId, sizeof(pci.busId));
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

static int nvml_info(const struct gpu_backend *b, unsigned index, struct gpu_info *ret, char *err,
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
    copy_text(info.uuid, sizeof(info.uuid), uuid, sizeof(uuid));
    copy_text(info.name, sizeof(info.name), name, sizeof(name));
    copy_text(info.pci_bus_id, sizeof(info.pci_bus_id), g->bus_id, sizeof(g->bus_id));
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

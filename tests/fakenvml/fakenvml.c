/*
 * fakenvml.c - a libnvidia-ml.so.1 stand-in for tests and dev mode: NVML's
 * versioned symbols with NVML's signatures, structs and return codes
 * (nvml_abi.h), over GPUs described by a JSON file (README.md documents it).
 *
 * Decisions:
 *  - NVML's API has no context argument, so this library has one state object
 *    (`fake`), guarded by one mutex: NVML is thread-safe and so is this.
 *  - The file named by FAKENVML_CONFIG is read at the first nvmlInit and
 *    re-read, if it changed, by any call that reads GPU state (gpus.c parses,
 *    validates and re-reads it). A bad file keeps the last good state and is
 *    reported on stderr; a bad file at the first nvmlInit makes it fail
 *    (UNKNOWN).
 *  - Handles point into the state's GPU array, so they stay valid across
 *    reloads; one at or past the current GPU count is a bad handle.
 *  - Processes are found in /proc/<pid>/environ (CUDA_VISIBLE_DEVICES names the
 *    GPU's UUID or index). /proc is scanned without the lock held: by every
 *    call, or, with FAKENVML_PROC_CACHE_MS=N (read at the first nvmlInit), at
 *    most once per N ms for all GPUs, less the processes that have exited
 *    since (checked at each call). Real NVML asks the driver, which costs
 *    nothing like reading every process's environment; the cache keeps that
 *    cost out of the agent's own figures (bench/agent_footprint.sh).
 *  - With FAKENVML_DRIVER=1 in a root process, a forked "driver" keeps root
 *    and does the /proc reading, as NVIDIA's kernel driver answers a caller
 *    that dropped root (driver.h).
 *  - A GPU whose file entry leaves out utilization or process memory gets
 *    them from its processes (busy.h): their CPU time, their jobs' requests.
 *  - Checks come in NVML's order: initialized, then arguments, then support.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fakenvml/busy.h"
#include "fakenvml/driver.h"
#include "fakenvml/fake_int.h"
#include "fakenvml/gpus.h"
#include "fakenvml/nvml_abi.h"
#include "base/banned.h"

#define NVML_VALUE_NOT_AVAILABLE_UINT 0xFFFFFFFFu

/* ---- the fake's state ---- */

#define MIB              (1024ull * 1024ull)
#define PCI_FIRST_BUS    0x10u
#define PCI_DEVICE_ID    0x233010DEu /* H100 SXM5 80GB, NVIDIA */
#define PCI_SUBSYSTEM_ID 0x16C110DEu
#define CVD              "CUDA_VISIBLE_DEVICES="

/* One process that names GPUs in CUDA_VISIBLE_DEVICES. */
struct proc_entry {
    struct fake_proc info;
    char *cvd; /* the value */
};

struct fakenvml {
    pthread_mutex_t lock;
    unsigned refcount;      /* nvmlInit calls not yet matched by nvmlShutdown */
    struct gpus_source src; /* FAKENVML_CONFIG at the first nvmlInit, and its GPUs */
    /* The /proc snapshot (FAKENVML_PROC_CACHE_MS), under proc_lock. */
    pthread_mutex_t proc_lock;
    long cache_ms; /* 0: scan at every call */
    struct timespec taken;
    struct proc_entry *procs;
    size_t nprocs;
};

static struct fakenvml fake = {.lock = PTHREAD_MUTEX_INITIALIZER,
                               .proc_lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- entry-point helpers ---- */

nvmlReturn_t fake_unlock(nvmlReturn_t rc)
{
    pthread_mutex_unlock(&fake.lock);
    return rc;
}

#define unlock fake_unlock

nvmlReturn_t fake_lock_ready(void)
{
    pthread_mutex_lock(&fake.lock);
    if (fake.refcount == 0)
        return unlock(NVML_ERROR_UNINITIALIZED);
    gpus_source_refresh(&fake.src);
    return NVML_SUCCESS;
}

#define lock_ready fake_lock_ready

nvmlReturn_t fake_lock_gpu(nvmlDevice_t device, const void *out, struct nvmlDevice_st **ret_gpu)
{
    nvmlReturn_t rc = lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    uintptr_t p = (uintptr_t)device, base = (uintptr_t)fake.src.cfg.gpus;
    size_t size = sizeof(fake.src.cfg.gpus[0]);
    if (!out || p < base || p >= base + fake.src.cfg.ngpus * size || (p - base) % size != 0)
        return unlock(NVML_ERROR_INVALID_ARGUMENT);
    *ret_gpu = device;
    return NVML_SUCCESS;
}

#define lock_gpu fake_lock_gpu

struct gpus_config *fake_config(void)
{
    return &fake.src.cfg;
}

/* fake_lock_gpu that also takes a MIG device handle: then *ret_mig holds the
 * MIG device and *ret_gpu is its parent; else ret_mig->uuid is "". */
static nvmlReturn_t lock_device(nvmlDevice_t device, const void *out,
                                struct nvmlDevice_st **ret_gpu, struct fake_migdev *ret_mig)
{
    ret_mig->uuid[0] = '\0';
    if (!fake_mig_is_handle(device))
        return lock_gpu(device, out, ret_gpu);
    nvmlReturn_t rc = lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    rc = out ? fake_mig_lookup(device, ret_mig) : NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return unlock(rc);
    *ret_gpu = &fake.src.cfg.gpus[ret_mig->gpu];
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_string(char *dst, unsigned int length, const char *src)
{
    size_t n = strlen(src) + 1;
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (length < n)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, n);
    return NVML_SUCCESS;
}

static void fill_pci(unsigned index, nvmlPciInfo_t *pci)
{
    memset(pci, 0, sizeof(*pci));
    pci->bus = PCI_FIRST_BUS + index;
    pci->pciDeviceId = PCI_DEVICE_ID;
    pci->pciSubSystemId = PCI_SUBSYSTEM_ID;
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", pci->domain, pci->bus,
             pci->device);
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", pci->domain, pci->bus,
             pci->device);
}

/* ---- processes, from /proc (no lock held) ---- */

/* Whether a CUDA_VISIBLE_DEVICES value names the GPU, by UUID or by index. */
static bool list_names_gpu(const char *list, const char *uuid, unsigned index)
{
    char idx[16];
    snprintf(idx, sizeof(idx), "%u", index);
    for (const char *s = list; *s;) {
        const char *end = strchr(s, ',');
        size_t n = end ? (size_t)(end - s) : strlen(s);
        if ((n == strlen(uuid) && memcmp(s, uuid, n) == 0) ||
            (n == strlen(idx) && memcmp(s, idx, n) == 0))
            return true;
        s += n + (end ? 1 : 0);
    }
    return false;
}

/* The CUDA_VISIBLE_DEVICES value of process pid (malloc'd), or NULL (gone,
 * another user's, or none), and what else its environment says in *ret
 * (busy.h). */
static char *process_cvd(unsigned pid, struct fake_proc *ret)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%u/environ", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return NULL;
    char *entry = NULL, *cvd = NULL;
    size_t cap = 0;
    busy_proc_init(ret, pid);
    while (getdelim(&entry, &cap, '\0', f) > 0) {
        if (!cvd && strncmp(entry, CVD, strlen(CVD)) == 0)
            cvd = strdup(entry + strlen(CVD));
        busy_proc_env(ret, entry);
    }
    free(entry);
    fclose(f);
    return cvd;
}

static void snapshot_free(void)
{
    for (size_t i = 0; i < fake.nprocs; i++)
        free(fake.procs[i].cvd);
    free(fake.procs);
    fake.procs = NULL;
    fake.nprocs = 0;
}

/* Rescans /proc into the snapshot when it is older than cache_ms. Under
 * proc_lock. 0, or -1 out of memory. */
static int snapshot_refresh(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long age =
        (now.tv_sec - fake.taken.tv_sec) * 1000 + (now.tv_nsec - fake.taken.tv_nsec) / 1000000;
    if (fake.procs && age >= 0 && age < fake.cache_ms)
        return 0;
    snapshot_free();
    DIR *d = opendir("/proc");
    size_t cap = 0;
    int rc = 0;
    for (struct dirent *de; d && rc == 0 && (de = readdir(d));) {
        char *end;
        unsigned long pid = strtoul(de->d_name, &end, 10);
        if (de->d_name[0] < '0' || de->d_name[0] > '9' || *end || pid > UINT_MAX)
            continue;
        struct fake_proc info;
        char *cvd = process_cvd((unsigned)pid, &info);
        if (!cvd)
            continue;
        if (fake.nprocs == cap) {
            struct proc_entry *grown = realloc(fake.procs, (cap ? cap * 2 : 16) * sizeof(*grown));
            if (!grown) {
                free(cvd);
                rc = -1;
                break;
            }
            fake.procs = grown;
            cap = cap ? cap * 2 : 16;
        }
        fake.procs[fake.nprocs++] = (struct proc_entry){info, cvd};
    }
    if (d)
        closedir(d);
    if (rc == 0 && !fake.procs)
        fake.procs = malloc(1); /* an empty snapshot is still one */
    if (rc != 0 || !fake.procs) {
        snapshot_free();
        return -1;
    }
    fake.taken = now;
    return 0;
}

static int scan_now(const struct nvmlDevice_st *g, struct fake_proc **ret_pids, unsigned *ret_n);

/* Whether pid still exists: a snapshot lists no process that has exited
 * since it was taken, as the driver forgets a process when it ends (the
 * agent's end-of-attempt check would else hold a GPU dirty until the cache
 * expires). kill(pid, 0) is one system call; EPERM means alive. */
static bool process_alive(unsigned pid)
{
    return kill((pid_t)pid, 0) == 0 || errno != ESRCH;
}

/* find_processes from the snapshot. */
static int cached_processes(const struct nvmlDevice_st *g, struct fake_proc **ret_pids,
                            unsigned *ret_n)
{
    pthread_mutex_lock(&fake.proc_lock);
    int rc = snapshot_refresh();
    struct fake_proc *pids = rc == 0 ? malloc((fake.nprocs + 1) * sizeof(*pids)) : NULL;
    unsigned n = 0;
    for (size_t i = 0; pids && i < fake.nprocs; i++) {
        if (list_names_gpu(fake.procs[i].cvd, g->uuid, g->index) &&
            process_alive(fake.procs[i].info.pid))
            pids[n++] = fake.procs[i].info;
    }
    pthread_mutex_unlock(&fake.proc_lock);
    if (!pids)
        return -1;
    *ret_pids = pids;
    *ret_n = n;
    return 0;
}

/* The GPU (uuid, index)'s processes, read here; the caller frees
 * *ret_pids. 0, or -1 out of memory. */
static int scan_processes(const char *uuid, unsigned index, struct fake_proc **ret_pids,
                          unsigned *ret_n)
{
    struct nvmlDevice_st g = {.index = index};
    snprintf(g.uuid, sizeof(g.uuid), "%s", uuid);
    if (fake.cache_ms > 0)
        return cached_processes(&g, ret_pids, ret_n);
    return scan_now(&g, ret_pids, ret_n);
}

/* The processes of the GPU (uuid, index): from the driver when one runs
 * (driver.h), else read here. The caller frees *ret. 0, or -1. */
static int find_named(const char *uuid, unsigned index, struct fake_proc **ret, unsigned *ret_n)
{
    if (driver_running())
        return driver_processes(uuid, index, ret, ret_n);
    return scan_processes(uuid, index, ret, ret_n);
}

int fake_find_named(const char *uuid, unsigned index, unsigned **ret_pids, unsigned *ret_n)
{
    struct fake_proc *procs;
    unsigned n;
    if (find_named(uuid, index, &procs, &n) != 0)
        return -1;
    unsigned *pids = malloc((n + 1) * sizeof(*pids));
    for (unsigned i = 0; pids && i < n; i++)
        pids[i] = procs[i].pid;
    free(procs);
    if (!pids)
        return -1;
    *ret_pids = pids;
    *ret_n = n;
    return 0;
}

static int find_processes(const struct nvmlDevice_st *g, struct fake_proc **ret, unsigned *ret_n)
{
    return find_named(g->uuid, g->index, ret, ret_n);
}

/* One scan of /proc for the GPU's processes. */
static int scan_now(const struct nvmlDevice_st *g, struct fake_proc **ret_pids, unsigned *ret_n)
{
    DIR *d = opendir("/proc");
    struct fake_proc *pids = NULL, info;
    unsigned n = 0, cap = 0;
    int rc = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        char *end;
        unsigned long pid = strtoul(de->d_name, &end, 10);
        if (de->d_name[0] < '0' || de->d_name[0] > '9' || *end || pid > UINT_MAX)
            continue;
        char *cvd = process_cvd((unsigned)pid, &info);
        bool mine = cvd && list_names_gpu(cvd, g->uuid, g->index);
        free(cvd);
        if (!mine)
            continue;
        if (n == cap) {
            struct fake_proc *grown = realloc(pids, (cap ? cap * 2 : 16) * sizeof(*pids));
            if (!grown) {
                rc = -1;
                break;
            }
            pids = grown;
            cap = cap ? cap * 2 : 16;
        }
        pids[n++] = info;
    }
    if (d)
        closedir(d);
    if (rc != 0) {
        free(pids);
        return rc;
    }
    *ret_pids = pids;
    *ret_n = n;
    return 0;
}

/* ---- the exported API ---- */

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
#define NVML_RETURN_TEXT(name, value, text)                                                        \
    case name:                                                                                     \
        return text;
        NVML_RETURN_CODES(NVML_RETURN_TEXT)
#undef NVML_RETURN_TEXT
    }
    return "Unknown Error";
}

/* The first nvmlInit: the GPUs come from FAKENVML_CONFIG, or are the built-in ones. */
static nvmlReturn_t first_init(void)
{
    if (gpus_source_init(&fake.src, getenv("FAKENVML_CONFIG")) != 0)
        return NVML_ERROR_UNKNOWN;
    const char *cache = getenv("FAKENVML_PROC_CACHE_MS");
    char *end = NULL;
    long ms = cache && *cache ? strtol(cache, &end, 10) : 0;
    pthread_mutex_lock(&fake.proc_lock);
    bool good = !cache || !*cache || (*end == '\0' && ms >= 0 && ms <= 60000);
    if (!good)
        fprintf(stderr,
                "fakenvml: FAKENVML_PROC_CACHE_MS: expected milliseconds from 0 to 60000, "
                "got '%s'; scanning /proc at every call\n",
                cache);
    fake.cache_ms = good ? ms : 0;
    snapshot_free();
    pthread_mutex_unlock(&fake.proc_lock);
    if (driver_start(scan_processes) != 0)
        return NVML_ERROR_UNKNOWN;
    fake_mig_init(fake.src.path);
    busy_reset();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags; /* NO_GPUS and NO_ATTACH change nothing for a file */
    pthread_mutex_lock(&fake.lock);
    nvmlReturn_t rc = fake.refcount == 0 ? first_init() : NVML_SUCCESS;
    if (rc == NVML_SUCCESS && fake.refcount < UINT_MAX)
        fake.refcount++;
    return unlock(rc);
}

nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&fake.lock);
    if (fake.refcount == 0)
        return unlock(NVML_ERROR_UNINITIALIZED);
    if (--fake.refcount == 0) {
        gpus_source_release(&fake.src);
        busy_reset(); /* nothing left behind for a dlclose */
    }
    return unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    nvmlReturn_t rc = lock_ready();
    return rc != NVML_SUCCESS ? rc
                              : unlock(copy_string(version, length, fake.src.cfg.driver_version));
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    char text[sizeof(fake.src.cfg.driver_version) + 8];
    nvmlReturn_t rc = lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    snprintf(text, sizeof(text), "12.%s", fake.src.cfg.driver_version);
    return unlock(copy_string(version, length, text));
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    nvmlReturn_t rc = lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!deviceCount)
        return unlock(NVML_ERROR_INVALID_ARGUMENT);
    *deviceCount = fake.src.cfg.ngpus;
    return unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    nvmlReturn_t rc = lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!device || index >= fake.src.cfg.ngpus)
        return unlock(NVML_ERROR_INVALID_ARGUMENT);
    *device = &fake.src.cfg.gpus[index];
    return unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    nvmlReturn_t rc = lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!uuid || !device)
        return unlock(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < fake.src.cfg.ngpus; i++) {
        if (strcmp(fake.src.cfg.gpus[i].uuid, uuid) == 0) {
            *device = &fake.src.cfg.gpus[i];
            return unlock(NVML_SUCCESS);
        }
    }
    return unlock(NVML_ERROR_NOT_FOUND);
}

/* Accepts "domain:bus:device.function" and "bus:device.function", in hex. */
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    unsigned domain = 0, bus, dev, fn;
    char tail;
    nvmlReturn_t rc = lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!pciBusId || !device ||
        (sscanf(pciBusId, "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn, &tail) != 4 &&
         sscanf(pciBusId, "%x:%x.%x%c", &bus, &dev, &fn, &tail) != 3))
        return unlock(NVML_ERROR_INVALID_ARGUMENT);
    if (domain != 0 || dev != 0 || fn != 0 || bus < PCI_FIRST_BUS ||
        bus - PCI_FIRST_BUS >= fake.src.cfg.ngpus)
        return unlock(NVML_ERROR_NOT_FOUND);
    *device = &fake.src.cfg.gpus[bus - PCI_FIRST_BUS];
    return unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = lock_gpu(device, index, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    *index = g->index;
    return unlock(NVML_SUCCESS);
}

/* A MIG device handle's is its "MIG-..." UUID, which CUDA_VISIBLE_DEVICES takes. */
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    struct nvmlDevice_st *g;
    struct fake_migdev m;
    nvmlReturn_t rc = lock_device(device, uuid, &g, &m);
    return rc != NVML_SUCCESS ? rc
                              : unlock(copy_string(uuid, length, m.uuid[0] ? m.uuid : g->uuid));
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = lock_gpu(device, name, &g);
    return rc != NVML_SUCCESS ? rc : unlock(copy_string(name, length, g->name));
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = lock_gpu(device, pci, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    fill_pci(g->index, pci);
    return unlock(NVML_SUCCESS);
}

/* Adds the processes of one device (total_mib of memory; instance ids gi,
 * ci) to the list, those not in it yet. 0, or -1 out of memory. */
static int add_found(struct busy_found **list, unsigned *n, const struct fake_proc *procs,
                     unsigned nprocs, unsigned gi, unsigned ci, unsigned long long total_mib)
{
    struct busy_found *grown = realloc(*list, (*n + nprocs + 1) * sizeof(**list));
    if (!grown)
        return -1;
    *list = grown;
    for (unsigned i = 0; i < nprocs; i++) {
        bool seen = false;
        for (unsigned j = 0; j < *n && !seen; j++)
            seen = grown[j].p.pid == procs[i].pid;
        if (seen)
            continue;
        unsigned long long ticks, start;
        if (busy_proc_stat(procs[i].pid, &ticks, &start) != 0)
            start = ULLONG_MAX;
        grown[(*n)++] = (struct busy_found){procs[i], start, gi, ci, total_mib};
    }
    return 0;
}

/* The processes of a GPU (its own, and those of the ndevs MIG devices devs,
 * with their instance ids) or of one MIG device m. 0, or -1 out of memory. */
static int device_processes(const struct nvmlDevice_st *gpu, const struct fake_migdev *m,
                            const struct fake_migdev *devs, unsigned ndevs, struct busy_found **ret,
                            unsigned *ret_n)
{
    struct busy_found *list = NULL;
    struct fake_proc *procs;
    unsigned n = 0, nprocs;
    int rc = 0;
    if (!m->uuid[0]) {
        rc = find_processes(gpu, &procs, &nprocs);
        if (rc == 0) {
            rc = add_found(&list, &n, procs, nprocs, NVML_VALUE_NOT_AVAILABLE_UINT,
                           NVML_VALUE_NOT_AVAILABLE_UINT, gpu->memory_mib);
            free(procs);
        }
    } else {
        devs = m;
        ndevs = 1;
    }
    for (unsigned d = 0; rc == 0 && d < ndevs; d++) {
        rc = find_named(devs[d].uuid, UINT_MAX, &procs, &nprocs);
        if (rc == 0) {
            rc = add_found(&list, &n, procs, nprocs, devs[d].gi, devs[d].ci, devs[d].memory);
            free(procs);
        }
    }
    if (rc == 0 && !list)
        rc = add_found(&list, &n, NULL, 0, 0, 0, 0); /* an empty list is still one */
    if (rc != 0) {
        free(list);
        return -1;
    }
    *ret = list;
    *ret_n = n;
    return 0;
}

/* The memory (MiB) process k of the list holds: process_memory_mib when the
 * file scripts it, else what its job asked (busy.h). */
static unsigned long long process_mib(const struct nvmlDevice_st *gpu,
                                      const struct busy_found *list, unsigned n, unsigned k)
{
    if (gpu->process_memory_mib != GPUS_FROM_PROCESSES)
        return gpu->process_memory_mib;
    return busy_memory_mib(list, n, k);
}

/* Total and used bytes: used is memory_used_mib, or the sum of the memory
 * of the device's own processes (process_mib; at most the total) when the
 * file leaves it out. */
static nvmlReturn_t memory_bytes(nvmlDevice_t device, const void *out,
                                 unsigned long long *ret_total, unsigned long long *ret_used)
{
    struct nvmlDevice_st *g;
    struct fake_migdev m;
    nvmlReturn_t rc = lock_device(device, out, &g, &m);
    if (rc != NVML_SUCCESS)
        return rc;
    struct nvmlDevice_st gpu = *g; /* /proc is scanned without the lock */
    unlock(NVML_SUCCESS);
    unsigned long long total = gpu.memory_mib, used = gpu.memory_used_mib;
    if (m.uuid[0]) { /* a MIG device: its GPU instance's memory, its processes' use */
        total = m.memory;
        used = GPUS_FROM_PROCESSES;
    }
    if (used == GPUS_FROM_PROCESSES) {
        struct busy_found *list;
        unsigned n;
        if (device_processes(&gpu, &m, NULL, 0, &list, &n) != 0)
            return NVML_ERROR_MEMORY;
        used = 0;
        for (unsigned k = 0; k < n && used < total; k++)
            used += process_mib(&gpu, list, n, k);
        free(list);
        used = used < total ? used : total;
    }
    *ret_total = total * MIB;
    *ret_used = used * MIB;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    unsigned long long total, used;
    nvmlReturn_t rc = memory_bytes(device, memory, &total, &used);
    if (rc == NVML_SUCCESS)
        *memory = (nvmlMemory_t){.total = total, .free = total - used, .used = used};
    return rc;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    unsigned long long total, used;
    nvmlReturn_t rc = memory_bytes(device, memory, &total, &used);
    if (rc == NVML_SUCCESS && memory->version != nvmlMemory_v2)
        rc = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (rc == NVML_SUCCESS)
        *memory = (nvmlMemory_v2_t){
            .version = nvmlMemory_v2, .total = total, .free = total - used, .used = used};
    return rc;
}

/* .gpu is utilization, or from the CPU time of the GPU's processes (its
 * own and its MIG devices') when the file leaves it out (busy.h). */
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    struct nvmlDevice_st *g;
    struct fake_migdev none = {.uuid = ""}, devs[MIG_MAX_DEVICES];
    nvmlReturn_t rc = lock_gpu(device, utilization, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    struct nvmlDevice_st gpu = *g; /* /proc is scanned without the lock */
    unsigned ndevs = gpu.utilization == GPUS_FROM_PROCESSES ? fake_mig_devices(g->index, devs) : 0;
    unlock(NVML_SUCCESS);
    unsigned long long pct = gpu.utilization;
    if (pct == GPUS_FROM_PROCESSES) {
        struct busy_found *list;
        unsigned n;
        if (device_processes(&gpu, &none, devs, ndevs, &list, &n) != 0)
            return NVML_ERROR_MEMORY;
        pct = busy_utilization(gpu.index, gpu.uuid, list, n);
        free(list);
    }
    *utilization =
        (nvmlUtilization_t){.gpu = (unsigned)pct, .memory = (unsigned)gpu.memory_utilization};
    return NVML_SUCCESS;
}

/* A GPU's utilization for the figures that follow it where the file leaves
 * them out: its scripted one, else the last one its processes gave. */
static unsigned long long follow_pct(const struct nvmlDevice_st *g)
{
    return g->utilization != GPUS_FROM_PROCESSES ? g->utilization
                                                 : busy_last_utilization(g->index, g->uuid);
}

/* From the file, else from the utilization (busy.h: 70 W idle, 700 W at 100 %). */
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = lock_gpu(device, power, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    *power = (unsigned)(g->power_mw != GPUS_FROM_PROCESSES
                            ? g->power_mw
                            : BUSY_IDLE_POWER_MW +
                                  (BUSY_FULL_POWER_MW - BUSY_IDLE_POWER_MW) * follow_pct(g) / 100);
    return unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int *temp)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = lock_gpu(device, sensorType == NVML_TEMPERATURE_GPU ? temp : NULL, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    *temp = (unsigned)(g->temperature_c != GPUS_FROM_PROCESSES
                           ? g->temperature_c
                           : BUSY_IDLE_TEMP_C +
                                 (BUSY_FULL_TEMP_C - BUSY_IDLE_TEMP_C) * follow_pct(g) / 100);
    return unlock(NVML_SUCCESS);
}

/* The size protocol, for any of the three struct versions: each entry is
 * written as the v2 layout cut to `stride` bytes (v1 is its prefix). */
static nvmlReturn_t running_processes(nvmlDevice_t device, unsigned int *infoCount, void *infos,
                                      size_t stride)
{
    struct nvmlDevice_st *g;
    struct fake_migdev m, devs[MIG_MAX_DEVICES];
    bool args_ok = infoCount && (infos || *infoCount == 0);
    nvmlReturn_t rc = lock_device(device, args_ok ? infoCount : NULL, &g, &m);
    if (rc != NVML_SUCCESS)
        return rc;
    struct nvmlDevice_st gpu = *g; /* /proc is scanned without the lock */
    unsigned ndevs = m.uuid[0] ? 0 : fake_mig_devices(g->index, devs);
    unlock(NVML_SUCCESS);
    struct busy_found *found;
    unsigned n;
    if (device_processes(&gpu, &m, devs, ndevs, &found, &n) != 0)
        return NVML_ERROR_MEMORY;
    rc = n > *infoCount ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    for (unsigned i = 0; rc == NVML_SUCCESS && i < n; i++) {
        nvmlProcessInfo_t info = {.pid = found[i].p.pid,
                                  .usedGpuMemory = process_mib(&gpu, found, n, i) * MIB,
                                  .gpuInstanceId = found[i].gi,
                                  .computeInstanceId = found[i].ci};
        memcpy((char *)infos + i * stride, &info, stride);
    }
    *infoCount = n;
    free(found);
    return rc;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    return running_processes(device, infoCount, infos, sizeof(*infos));
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    return running_processes(device, infoCount, infos, sizeof(*infos));
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos)
{
    return running_processes(device, infoCount, infos, sizeof(*infos));
}

/* Link i is active when i < the number of nvlink_peers and leads to GPU
 * peers[i]; a GPU whose entry has no nvlink_peers has no NVLink at all. */
static nvmlReturn_t lock_link(nvmlDevice_t device, unsigned link, const void *out,
                              struct nvmlDevice_st **ret_gpu)
{
    nvmlReturn_t rc = lock_gpu(device, link < NVML_NVLINK_MAX_LINKS ? out : NULL, ret_gpu);
    if (rc == NVML_SUCCESS && !(*ret_gpu)->nvlink)
        return unlock(NVML_ERROR_NOT_SUPPORTED);
    return rc;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                      nvmlEnableState_t *isActive)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = lock_link(device, link, isActive, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    *isActive = link < g->npeers ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                 nvmlPciInfo_t *pci)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = lock_link(device, link, pci, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (link >= g->npeers)
        return unlock(NVML_ERROR_NOT_SUPPORTED); /* an inactive link has no remote end */
    fill_pci(g->peers[link], pci);
    return unlock(NVML_SUCCESS);
}

/* Older names the real library still exports, where the signature is the same. */
nvmlReturn_t nvmlInit(void) __attribute__((alias("nvmlInit_v2")));
nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
    __attribute__((alias("nvmlDeviceGetCount_v2")));
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
    __attribute__((alias("nvmlDeviceGetHandleByIndex_v2")));
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
    __attribute__((alias("nvmlDeviceGetHandleByPciBusId_v2")));
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
    __attribute__((alias("nvmlDeviceGetPciInfo_v3")));
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
    __attribute__((alias("nvmlDeviceGetPciInfo_v3")));
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link,
                                              nvmlPciInfo_t *pci)
    __attribute__((alias("nvmlDeviceGetNvLinkRemotePciInfo_v2")));

/*
 * fakenvml.c - a libnvidia-ml.so.1 stand-in for tests and dev mode: NVML's
 * versioned symbols with NVML's signatures, structs and return codes
 * (nvml_abi.h), over GPUs described by a JSON file (README.md documents it).
 *
 * Decisions:
 *  - NVML's API has no context argument, so this library has one state object
 *    (`fake`), guarded by one mutex: NVML is thread-safe and so is this.
 *  - The file named by FAKENVML_CONFIG is read at the first nvmlInit and again
 *    on any call that reads GPU state once its inode, size or mtime changed, or
 *    while its mtime is within a second of the last read (a rewrite inside one
 *    timestamp tick keeps mtime and size: such a "racy" file is re-read and its
 *    bytes compared). A bad file keeps the last good state and is reported once
 *    on stderr; a bad file at the first nvmlInit makes it fail (UNKNOWN).
 *  - Handles point into the state's GPU array, so they stay valid across
 *    reloads; one at or past the current GPU count is a bad handle.
 *  - Processes are found in /proc/<pid>/environ (CUDA_VISIBLE_DEVICES names the
 *    GPU's UUID or index). /proc is scanned without the lock held.
 *  - Checks come in NVML's order: initialized, then arguments, then support.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include <jansson.h>

#include "fakenvml/nvml_abi.h"
#include "util/banned.h"

#define NVML_VALUE_NOT_AVAILABLE_UINT 0xFFFFFFFFu

/* ---- the fake's state ---- */

#define MAX_GPUS            64
#define MAX_FILE            (1u << 20)
#define MIB                 (1024ull * 1024ull)
#define RACY_NS             1000000000ll /* coarser than any file system's mtime tick */
#define MAX_MIG_DEVICES     7            /* A100, H100, H200: seven 1g slices */
#define PCI_FIRST_BUS       0x10u
#define PCI_DEVICE_ID       0x233010DEu /* H100 SXM5 80GB, NVIDIA */
#define PCI_SUBSYSTEM_ID    0x16C110DEu
#define DEFAULT_GPUS        8
#define DEFAULT_DRIVER      "550.54.15"
#define DEFAULT_NAME        "NVIDIA H100 80GB HBM3"
#define DEFAULT_UUID_FMT    "GPU-fa4e0000-0000-4000-8000-%012x"
#define USED_FROM_PROCESSES ULLONG_MAX
#define CVD                 "CUDA_VISIBLE_DEVICES="

/* One GPU as the file describes it; an nvmlDevice_t points at one of these. */
struct nvmlDevice_st {
    unsigned index;
    char uuid[NVML_DEVICE_UUID_BUFFER_SIZE];
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned long long memory_mib, memory_used_mib, utilization, memory_utilization, power_mw,
        temperature_c, process_memory_mib;
    bool mig_capable, mig_enabled;
    bool nvlink; /* nvlink_peers given: NVLink queries are supported */
    unsigned npeers;
    unsigned peers[NVML_NVLINK_MAX_LINKS]; /* link i leads to GPU peers[i] */
};

struct config {
    char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    unsigned ngpus;
    struct nvmlDevice_st gpus[MAX_GPUS];
};

struct fakenvml {
    pthread_mutex_t lock;
    unsigned refcount;    /* nvmlInit calls not yet matched by nvmlShutdown */
    char path[PATH_MAX];  /* FAKENVML_CONFIG at the first nvmlInit; "" = built-in GPUs */
    struct config cfg;    /* the last good state */
    bool seen;            /* the fields below describe the last read of path */
    struct stat st;       /* of the file read */
    long long read_at_ns; /* CLOCK_REALTIME just before that read */
    char *bytes;          /* its content, good or bad */
    size_t nbytes;
    bool bytes_ok; /* ... and whether it parsed */
};

static struct fakenvml fake = {.lock = PTHREAD_MUTEX_INITIALIZER};

enum { LOAD_OK = 0, LOAD_BAD_NEW = -1, LOAD_BAD_SAME = -2 };

/* ---- the JSON file ---- */

enum ftype { F_UINT, F_BOOL };

/* The scalar fields of a GPU object: a table, so that parsing is one loop. */
static const struct field {
    const char *key;
    enum ftype type;
    size_t off; /* of an unsigned long long (F_UINT) or a bool (F_BOOL) */
    unsigned long long min, max;
} gpu_fields[] = {
    {"memory_mib", F_UINT, offsetof(struct nvmlDevice_st, memory_mib), 1, 1ull << 24},
    {"memory_used_mib", F_UINT, offsetof(struct nvmlDevice_st, memory_used_mib), 0, 1ull << 24},
    {"utilization", F_UINT, offsetof(struct nvmlDevice_st, utilization), 0, 100},
    {"memory_utilization", F_UINT, offsetof(struct nvmlDevice_st, memory_utilization), 0, 100},
    {"power_mw", F_UINT, offsetof(struct nvmlDevice_st, power_mw), 0, 10000000},
    {"temperature_c", F_UINT, offsetof(struct nvmlDevice_st, temperature_c), 0, 200},
    {"process_memory_mib", F_UINT, offsetof(struct nvmlDevice_st, process_memory_mib), 0,
     1ull << 24},
    {"mig_capable", F_BOOL, offsetof(struct nvmlDevice_st, mig_capable), 0, 1},
    {"mig_enabled", F_BOOL, offsetof(struct nvmlDevice_st, mig_enabled), 0, 1},
};

__attribute__((format(printf, 3, 4))) static int fail(char *msg, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
    return -1;
}

static void gpu_defaults(struct nvmlDevice_st *g, unsigned index)
{
    memset(g, 0, sizeof(*g));
    g->index = index;
    snprintf(g->uuid, sizeof(g->uuid), DEFAULT_UUID_FMT, index);
    snprintf(g->name, sizeof(g->name), "%s", DEFAULT_NAME);
    g->memory_mib = 81559;
    g->memory_used_mib = USED_FROM_PROCESSES;
    g->power_mw = 70000;
    g->temperature_c = 30;
    g->process_memory_mib = 1024;
    g->mig_capable = true;
}

static void default_config(struct config *c)
{
    snprintf(c->driver_version, sizeof(c->driver_version), "%s", DEFAULT_DRIVER);
    c->ngpus = DEFAULT_GPUS;
    for (unsigned i = 0; i < DEFAULT_GPUS; i++) {
        struct nvmlDevice_st *g = &c->gpus[i];
        gpu_defaults(g, i);
        g->nvlink = true;
        for (unsigned j = 0; j < DEFAULT_GPUS; j++)
            if (j != i)
                g->peers[g->npeers++] = j;
    }
}

/* Real UUIDs read "GPU-" and 8-4-4-4-12 lower-case hex digits; agents may rely on it. */
static bool uuid_valid(const char *s)
{
    static const char shape[] = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
    if (strlen(s) != sizeof(shape) - 1)
        return false;
    for (size_t i = 0; shape[i]; i++) {
        bool hex = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f');
        if (shape[i] == 'x' ? !hex : s[i] != shape[i])
            return false;
    }
    return true;
}

static int parse_string(json_t *v, char *dst, size_t size, const char *what, char *msg, size_t len)
{
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= size)
        return fail(msg, len, "%s: must be a string of 1 to %zu bytes", what, size - 1);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return fail(msg, len, "%s: contains a NUL byte", what);
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

static int parse_peers(json_t *v, struct nvmlDevice_st *g, char *msg, size_t len)
{
    size_t i;
    json_t *p;
    if (!json_is_array(v) || json_array_size(v) > NVML_NVLINK_MAX_LINKS)
        return fail(msg, len, "gpus[%u].nvlink_peers: must be an array of at most %d GPU indexes",
                    g->index, NVML_NVLINK_MAX_LINKS);
    json_array_foreach(v, i, p)
    {
        if (!json_is_integer(p) || json_integer_value(p) < 0 || json_integer_value(p) >= MAX_GPUS ||
            json_integer_value(p) == g->index)
            return fail(msg, len, "gpus[%u].nvlink_peers[%zu]: must be another GPU's index",
                        g->index, i);
        g->peers[i] = (unsigned)json_integer_value(p);
    }
    g->npeers = (unsigned)json_array_size(v);
    g->nvlink = true;
    return 0;
}

static int parse_field(const struct field *f, json_t *v, struct nvmlDevice_st *g, char *msg,
                       size_t len)
{
    char *at = (char *)g + f->off;
    if (f->type == F_BOOL) {
        if (!json_is_boolean(v))
            return fail(msg, len, "gpus[%u].%s: must be true or false", g->index, f->key);
        *(bool *)at = json_is_true(v);
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        (unsigned long long)json_integer_value(v) < f->min ||
        (unsigned long long)json_integer_value(v) > f->max)
        return fail(msg, len, "gpus[%u].%s: must be an integer from %llu to %llu", g->index, f->key,
                    f->min, f->max);
    unsigned long long val = (unsigned long long)json_integer_value(v);
    memcpy(at, &val, sizeof(val));
    return 0;
}

static int parse_gpu(json_t *obj, unsigned index, struct nvmlDevice_st *g, char *msg, size_t len)
{
    const char *key;
    json_t *v;
    char what[320];
    gpu_defaults(g, index);
    if (!json_is_object(obj))
        return fail(msg, len, "gpus[%u]: must be an object", index);
    json_object_foreach(obj, key, v)
    {
        snprintf(what, sizeof(what), "gpus[%u].%.256s", index, key);
        const struct field *f = NULL;
        for (size_t i = 0; i < sizeof(gpu_fields) / sizeof(gpu_fields[0]) && !f; i++)
            if (strcmp(key, gpu_fields[i].key) == 0)
                f = &gpu_fields[i];
        int rc;
        if (f)
            rc = parse_field(f, v, g, msg, len);
        else if (strcmp(key, "uuid") == 0)
            rc = parse_string(v, g->uuid, sizeof(g->uuid), what, msg, len);
        else if (strcmp(key, "name") == 0)
            rc = parse_string(v, g->name, sizeof(g->name), what, msg, len);
        else if (strcmp(key, "nvlink_peers") == 0)
            rc = parse_peers(v, g, msg, len);
        else
            rc = fail(msg, len, "%s: unknown field", what);
        if (rc != 0)
            return rc;
    }
    if (!uuid_valid(g->uuid))
        return fail(msg, len,
                    "gpus[%u].uuid: must read GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx "
                    "(lower-case hex)",
                    index);
    if (g->memory_used_mib != USED_FROM_PROCESSES && g->memory_used_mib > g->memory_mib)
        return fail(msg, len, "gpus[%u].memory_used_mib: more than memory_mib", index);
    if (g->mig_enabled && !g->mig_capable)
        return fail(msg, len, "gpus[%u].mig_enabled: the GPU is not mig_capable", index);
    return 0;
}

/* The checks that need every GPU: peers exist, UUIDs are unique. */
static int check_config(const struct config *c, char *msg, size_t len)
{
    for (unsigned i = 0; i < c->ngpus; i++) {
        const struct nvmlDevice_st *g = &c->gpus[i];
        for (unsigned l = 0; l < g->npeers; l++)
            if (g->peers[l] >= c->ngpus)
                return fail(msg, len, "gpus[%u].nvlink_peers[%u]: there is no GPU %u", i, l,
                            g->peers[l]);
        for (unsigned j = 0; j < i; j++)
            if (strcmp(g->uuid, c->gpus[j].uuid) == 0)
                return fail(msg, len, "gpus[%u].uuid: the same as gpus[%u].uuid", i, j);
    }
    return 0;
}

static int parse_config(const char *bytes, size_t n, struct config *c, char *msg, size_t len)
{
    json_error_t jerr;
    json_t *root = json_loadb(bytes, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return fail(msg, len, "line %d column %d: %s", jerr.line, jerr.column, jerr.text);
    memset(c, 0, sizeof(*c));
    snprintf(c->driver_version, sizeof(c->driver_version), "%s", DEFAULT_DRIVER);
    int rc = 0;
    const char *key;
    json_t *v, *gpus = NULL;
    if (!json_is_object(root))
        rc = fail(msg, len, "the top level must be an object");
    json_object_foreach(root, key, v)
    {
        if (rc != 0)
            break;
        if (strcmp(key, "driver_version") == 0)
            /* 16 bytes at most, so that "12." + it fits NVML's version buffers */
            rc = parse_string(v, c->driver_version, 17, "driver_version", msg, len);
        else if (strcmp(key, "gpus") == 0)
            gpus = v;
        else
            rc = fail(msg, len, "%.256s: unknown field", key);
    }
    if (rc == 0 && (!json_is_array(gpus) || json_array_size(gpus) > MAX_GPUS))
        rc = fail(msg, len, "gpus: must be an array of at most %d GPUs", MAX_GPUS);
    for (size_t i = 0; rc == 0 && i < json_array_size(gpus); i++) {
        rc = parse_gpu(json_array_get(gpus, i), (unsigned)i, &c->gpus[i], msg, len);
        c->ngpus = (unsigned)i + 1;
    }
    if (rc == 0)
        rc = check_config(c, msg, len);
    json_decref(root);
    return rc;
}

/* ---- reading and re-reading the file (all with fake.lock held) ---- */

static long long ns_of(struct timespec t)
{
    return (long long)t.tv_sec * 1000000000ll + t.tv_nsec;
}

static void log_problem(const char *msg)
{
    fprintf(stderr, "fakenvml: %s: %s\n", fake.path, msg);
}

static void forget_file(void)
{
    free(fake.bytes);
    fake.bytes = NULL;
    fake.nbytes = 0;
    fake.seen = false;
}

static int read_file(char **ret_bytes, size_t *ret_n, struct stat *ret_st, char *msg, size_t len)
{
    FILE *f = fopen(fake.path, "re");
    if (!f)
        return fail(msg, len, "cannot open: %s", strerror(errno));
    char *buf = malloc(MAX_FILE + 1);
    size_t n = buf ? fread(buf, 1, MAX_FILE + 1, f) : 0;
    int rc = 0;
    if (!buf)
        rc = fail(msg, len, "out of memory");
    else if (ferror(f))
        rc = fail(msg, len, "cannot read: %s", strerror(errno));
    else if (n > MAX_FILE)
        rc = fail(msg, len, "larger than %u bytes", MAX_FILE);
    else if (fstat(fileno(f), ret_st) != 0)
        rc = fail(msg, len, "cannot stat: %s", strerror(errno));
    fclose(f);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    *ret_bytes = buf;
    *ret_n = n;
    return 0;
}

/* Reads the file; new bytes are parsed, and a good parse replaces the state. */
static int load_file(char *msg, size_t len)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char *bytes;
    size_t n;
    struct stat st;
    if (read_file(&bytes, &n, &st, msg, len) != 0)
        return LOAD_BAD_NEW;
    fake.seen = true;
    fake.st = st;
    fake.read_at_ns = ns_of(now);
    if (fake.bytes && n == fake.nbytes && memcmp(bytes, fake.bytes, n) == 0) {
        free(bytes);
        return fake.bytes_ok ? LOAD_OK : LOAD_BAD_SAME;
    }
    struct config *c = malloc(sizeof(*c));
    int rc = c ? parse_config(bytes, n, c, msg, len) : fail(msg, len, "out of memory");
    if (rc == 0)
        fake.cfg = *c;
    free(c);
    free(fake.bytes);
    fake.bytes = bytes;
    fake.nbytes = n;
    fake.bytes_ok = rc == 0;
    return rc == 0 ? LOAD_OK : LOAD_BAD_NEW;
}

static void refresh(void)
{
    struct stat st;
    char msg[512];
    if (!fake.path[0] || stat(fake.path, &st) != 0)
        return; /* built-in GPUs, or the file is gone: keep the last good state */
    bool same = fake.seen && st.st_dev == fake.st.st_dev && st.st_ino == fake.st.st_ino &&
                st.st_size == fake.st.st_size && ns_of(st.st_mtim) == ns_of(fake.st.st_mtim);
    if (same && ns_of(st.st_mtim) + RACY_NS <= fake.read_at_ns)
        return;
    if (load_file(msg, sizeof(msg)) == LOAD_BAD_NEW)
        log_problem(msg);
}

/* ---- entry-point helpers ---- */

static nvmlReturn_t unlock(nvmlReturn_t rc)
{
    pthread_mutex_unlock(&fake.lock);
    return rc;
}

/* On NVML_SUCCESS the lock is held and the state is fresh; the caller unlocks. */
static nvmlReturn_t lock_ready(void)
{
    pthread_mutex_lock(&fake.lock);
    if (fake.refcount == 0)
        return unlock(NVML_ERROR_UNINITIALIZED);
    refresh();
    return NVML_SUCCESS;
}

/* lock_ready, the handle is one of the current GPUs and `out` (the caller's
 * out-parameter, or NULL for any bad argument) is not NULL. */
static nvmlReturn_t lock_gpu(nvmlDevice_t device, const void *out, struct nvmlDevice_st **ret_gpu)
{
    nvmlReturn_t rc = lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    uintptr_t p = (uintptr_t)device, base = (uintptr_t)fake.cfg.gpus;
    size_t size = sizeof(fake.cfg.gpus[0]);
    if (!out || p < base || p >= base + fake.cfg.ngpus * size || (p - base) % size != 0)
        return unlock(NVML_ERROR_INVALID_ARGUMENT);
    *ret_gpu = device;
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

static bool process_uses_gpu(const char *pid, const char *uuid, unsigned index)
{
    char path[300];
    snprintf(path, sizeof(path), "/proc/%.256s/environ", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return false; /* gone, or another user's process */
    char *entry = NULL;
    size_t cap = 0;
    bool found = false;
    while (getdelim(&entry, &cap, '\0', f) > 0) {
        if (strncmp(entry, CVD, strlen(CVD)) == 0) {
            found = list_names_gpu(entry + strlen(CVD), uuid, index);
            break;
        }
    }
    free(entry);
    fclose(f);
    return found;
}

/* The pids of the GPU's processes; the caller frees *ret_pids. 0, or -1 out of memory. */
static int find_processes(const struct nvmlDevice_st *g, unsigned **ret_pids, unsigned *ret_n)
{
    DIR *d = opendir("/proc");
    unsigned *pids = NULL, n = 0, cap = 0;
    int rc = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        char *end;
        unsigned long pid = strtoul(de->d_name, &end, 10);
        if (de->d_name[0] < '0' || de->d_name[0] > '9' || *end || pid > UINT_MAX ||
            !process_uses_gpu(de->d_name, g->uuid, g->index))
            continue;
        if (n == cap) {
            unsigned *grown = realloc(pids, (cap ? cap * 2 : 16) * sizeof(*pids));
            if (!grown) {
                rc = -1;
                break;
            }
            pids = grown;
            cap = cap ? cap * 2 : 16;
        }
        pids[n++] = (unsigned)pid;
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
    const char *path = getenv("FAKENVML_CONFIG");
    char msg[512];
    forget_file();
    fake.path[0] = '\0';
    if (!path || !*path) {
        default_config(&fake.cfg);
        return NVML_SUCCESS;
    }
    if (strlen(path) >= sizeof(fake.path)) {
        fprintf(stderr, "fakenvml: FAKENVML_CONFIG is longer than %zu bytes\n",
                sizeof(fake.path) - 1);
        return NVML_ERROR_UNKNOWN;
    }
    memcpy(fake.path, path, strlen(path) + 1);
    if (load_file(msg, sizeof(msg)) == LOAD_OK)
        return NVML_SUCCESS;
    log_problem(msg);
    forget_file();
    return NVML_ERROR_UNKNOWN;
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
    if (--fake.refcount == 0)
        forget_file();
    return unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    nvmlReturn_t rc = lock_ready();
    return rc != NVML_SUCCESS ? rc : unlock(copy_string(version, length, fake.cfg.driver_version));
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    char text[sizeof(fake.cfg.driver_version) + 8];
    nvmlReturn_t rc = lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    snprintf(text, sizeof(text), "12.%s", fake.cfg.driver_version);
    return unlock(copy_string(version, length, text));
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    nvmlReturn_t rc = lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!deviceCount)
        return unlock(NVML_ERROR_INVALID_ARGUMENT);
    *deviceCount = fake.cfg.ngpus;
    return unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    nvmlReturn_t rc = lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!device || index >= fake.cfg.ngpus)
        return unlock(NVML_ERROR_INVALID_ARGUMENT);
    *device = &fake.cfg.gpus[index];
    return unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    nvmlReturn_t rc = lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!uuid || !device)
        return unlock(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < fake.cfg.ngpus; i++) {
        if (strcmp(fake.cfg.gpus[i].uuid, uuid) == 0) {
            *device = &fake.cfg.gpus[i];
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
        bus - PCI_FIRST_BUS >= fake.cfg.ngpus)
        return unlock(NVML_ERROR_NOT_FOUND);
    *device = &fake.cfg.gpus[bus - PCI_FIRST_BUS];
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

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = lock_gpu(device, uuid, &g);
    return rc != NVML_SUCCESS ? rc : unlock(copy_string(uuid, length, g->uuid));
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

/* Total and used bytes: used is memory_used_mib, or the GPU's processes times
 * process_memory_mib (at most the total) when the file leaves it out. */
static nvmlReturn_t memory_bytes(nvmlDevice_t device, const void *out,
                                 unsigned long long *ret_total, unsigned long long *ret_used)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = lock_gpu(device, out, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    struct nvmlDevice_st gpu = *g; /* /proc is scanned without the lock */
    unsigned *pids, n;
    unlock(NVML_SUCCESS);
    unsigned long long total = gpu.memory_mib, used = gpu.memory_used_mib;
    if (used == USED_FROM_PROCESSES) {
        if (find_processes(&gpu, &pids, &n) != 0)
            return NVML_ERROR_MEMORY;
        free(pids);
        used = n * gpu.process_memory_mib < total ? n * gpu.process_memory_mib : total;
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

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = lock_gpu(device, utilization, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    utilization->gpu = (unsigned)g->utilization;
    utilization->memory = (unsigned)g->memory_utilization;
    return unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = lock_gpu(device, power, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    *power = (unsigned)g->power_mw;
    return unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int *temp)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = lock_gpu(device, sensorType == NVML_TEMPERATURE_GPU ? temp : NULL, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    *temp = (unsigned)g->temperature_c;
    return unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = lock_gpu(device, currentMode && pendingMode ? currentMode : NULL, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!g->mig_capable)
        return unlock(NVML_ERROR_NOT_SUPPORTED);
    *currentMode = *pendingMode = g->mig_enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = lock_gpu(device, count, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    *count = g->mig_capable && g->mig_enabled ? MAX_MIG_DEVICES : 0;
    return unlock(NVML_SUCCESS);
}

/* The size protocol, for any of the three struct versions: each entry is
 * written as the v2 layout cut to `stride` bytes (v1 is its prefix). */
static nvmlReturn_t running_processes(nvmlDevice_t device, unsigned int *infoCount, void *infos,
                                      size_t stride)
{
    struct nvmlDevice_st *g;
    bool args_ok = infoCount && (infos || *infoCount == 0);
    nvmlReturn_t rc = lock_gpu(device, args_ok ? infoCount : NULL, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    struct nvmlDevice_st gpu = *g; /* /proc is scanned without the lock */
    unsigned *pids, n;
    unlock(NVML_SUCCESS);
    if (find_processes(&gpu, &pids, &n) != 0)
        return NVML_ERROR_MEMORY;
    rc = n > *infoCount ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    for (unsigned i = 0; rc == NVML_SUCCESS && i < n; i++) {
        nvmlProcessInfo_t info = {.pid = pids[i],
                                  .usedGpuMemory = gpu.process_memory_mib * MIB,
                                  .gpuInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT,
                                  .computeInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT};
        memcpy((char *)infos + i * stride, &info, stride);
    }
    *infoCount = n;
    free(pids);
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

/* test_fakenvml.c - the fake NVML, loaded as the agent loads the real one
 * (dlopen of $GPUORCH_FAKENVML, dlsym of the versioned names): reference
 * counted init and shutdown, every call's argument errors, the GPUs and figures
 * of a JSON file written here, rewrites of that file (good, malformed, in
 * place, concurrent with callers), MIG and NVLink, the processes size protocol,
 * and real child processes found through CUDA_VISIBLE_DEVICES. Files live in a
 * mkdtemp directory removed at the end. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fakenvml/nvml_abi.h"
#include "base/banned.h"

#define MIB (1024ull * 1024ull)

/* Three GPUs: 0 and 1 are NVLinked H100s (0 in MIG mode), 2 an L4 with
 * neither MIG nor NVLink and a fixed memory figure. The arguments: the three
 * UUIDs, GPU 0's utilization second. */
#define CONFIG_FMT                                                                                 \
    "{\"driver_version\": \"535.104.05\", \"gpus\": [\n"                                           \
    " {\"uuid\": \"%s\", \"name\": \"NVIDIA H100 80GB HBM3\", \"memory_mib\": 81559,\n"            \
    "  \"utilization\": %u, \"memory_utilization\": 10, \"power_mw\": 210000,\n"                   \
    "  \"temperature_c\": 41, \"mig_capable\": true, \"mig_enabled\": true,\n"                     \
    "  \"nvlink_peers\": [1], \"process_memory_mib\": 1024},\n"                                    \
    " {\"uuid\": \"%s\", \"mig_enabled\": false, \"nvlink_peers\": [0],\n"                         \
    "  \"process_memory_mib\": 2048},\n"                                                           \
    " {\"uuid\": \"%s\", \"name\": \"NVIDIA L4\", \"memory_mib\": 23034,\n"                        \
    "  \"memory_used_mib\": 100, \"utilization\": 5, \"mig_capable\": false}]}\n"

/* Every symbol the test uses, typed from nvml_abi.h's prototypes. */
#define NVML_SYMBOLS(X)                                                                            \
    X(nvmlInit_v2)                                                                                 \
    X(nvmlInit)                                                                                    \
    X(nvmlInitWithFlags)                                                                           \
    X(nvmlShutdown)                                                                                \
    X(nvmlErrorString)                                                                             \
    X(nvmlSystemGetDriverVersion)                                                                  \
    X(nvmlSystemGetNVMLVersion)                                                                    \
    X(nvmlDeviceGetCount_v2)                                                                       \
    X(nvmlDeviceGetCount)                                                                          \
    X(nvmlDeviceGetHandleByIndex_v2)                                                               \
    X(nvmlDeviceGetHandleByIndex)                                                                  \
    X(nvmlDeviceGetHandleByUUID)                                                                   \
    X(nvmlDeviceGetHandleByPciBusId_v2)                                                            \
    X(nvmlDeviceGetIndex)                                                                          \
    X(nvmlDeviceGetUUID)                                                                           \
    X(nvmlDeviceGetName)                                                                           \
    X(nvmlDeviceGetPciInfo_v3)                                                                     \
    X(nvmlDeviceGetMemoryInfo)                                                                     \
    X(nvmlDeviceGetMemoryInfo_v2)                                                                  \
    X(nvmlDeviceGetUtilizationRates)                                                               \
    X(nvmlDeviceGetPowerUsage)                                                                     \
    X(nvmlDeviceGetTemperature)                                                                    \
    X(nvmlDeviceGetMigMode)                                                                        \
    X(nvmlDeviceGetMaxMigDeviceCount)                                                              \
    X(nvmlDeviceGetComputeRunningProcesses_v3)                                                     \
    X(nvmlDeviceGetComputeRunningProcesses_v2)                                                     \
    X(nvmlDeviceGetComputeRunningProcesses)                                                        \
    X(nvmlDeviceGetNvLinkState)                                                                    \
    X(nvmlDeviceGetNvLinkRemotePciInfo_v2)                                                         \
    X(nvmlDeviceGetNvLinkRemotePciInfo)                                                            \
    X(nvmlDeviceGetPciInfo)

struct api {
#define API_MEMBER(name) __typeof__(name) *name;
    NVML_SYMBOLS(API_MEMBER)
#undef API_MEMBER
};

static const struct sym {
    const char *name;
    size_t off;
} syms[] = {
#define API_SYM(name) {#name, offsetof(struct api, name)},
    NVML_SYMBOLS(API_SYM)
#undef API_SYM
};

struct env {
    void *lib;
    struct api n;
    char dir[64];
    char path[128]; /* FAKENVML_CONFIG */
    /* Unique to this process, so that concurrent runs' children stay apart. */
    char uuid[3][NVML_DEVICE_UUID_BUFFER_SIZE];
};

/* A child process whose CUDA_VISIBLE_DEVICES is set; it exits when stdin closes. */
struct child {
    pid_t pid;
    int stdin_fd;
};

/* The children not yet reaped: a failed test's are killed by teardown (they
 * would else run on, and hold the test's stdout open). */
static pid_t live[16];

static void live_set(pid_t old, pid_t pid)
{
    for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
        if (live[i] == old) {
            live[i] = pid;
            return;
        }
    }
}

static int group_setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    const char *lib = getenv("GPUORCH_FAKENVML");
    if (!e || !lib || !*lib) {
        fprintf(stderr, "GPUORCH_FAKENVML must name libnvidia-ml.so.1\n");
        return -1;
    }
    e->lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!e->lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return -1;
    }
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *f = dlsym(e->lib, syms[i].name);
        if (!f) {
            fprintf(stderr, "dlsym %s: %s\n", syms[i].name, dlerror());
            return -1;
        }
        memcpy((char *)&e->n + syms[i].off, &f, sizeof(f));
    }
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_fakenvml.XXXXXX");
    if (!mkdtemp(e->dir))
        return -1;
    snprintf(e->path, sizeof(e->path), "%s/gpus.json", e->dir);
    setenv("FAKENVML_CONFIG", e->path, 1);
    for (unsigned i = 0; i < 3; i++)
        snprintf(e->uuid[i], sizeof(e->uuid[i]), "GPU-%08x-7e57-4000-8000-%012x",
                 (unsigned)getpid(), i);
    *state = e;
    return 0;
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    char tmp[160];
    snprintf(tmp, sizeof(tmp), "%s.tmp", e->path);
    unlink(tmp);
    unlink(e->path);
    rmdir(e->dir);
    dlclose(e->lib);
    free(e);
    return 0;
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

/* Writes a new file and renames it over the config: atomic, a new inode. */
static void write_file(const struct env *e, const char *text)
{
    char tmp[160];
    snprintf(tmp, sizeof(tmp), "%s.tmp", e->path);
    put(tmp, text);
    assert_int_equal(rename(tmp, e->path), 0);
}

/* Rewrites the config where it is and puts its mtime back: what a rewrite of
 * the same size within one timestamp tick looks like to stat. */
static void write_within_one_tick(const struct env *e, const char *text)
{
    struct stat st;
    assert_int_equal(stat(e->path, &st), 0);
    put(e->path, text);
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    assert_int_equal(utimensat(AT_FDCWD, e->path, times, 0), 0);
}

static const char *config(const struct env *e, char *buf, size_t size, unsigned utilization)
{
    snprintf(buf, size, CONFIG_FMT, e->uuid[0], utilization, e->uuid[1], e->uuid[2]);
    return buf;
}

static int setup(void **state)
{
    char buf[1024];
    write_file(*state, config(*state, buf, sizeof(buf), 35));
    return 0;
}

/* Leaves the library uninitialized, and no child running, whatever a failed
 * test left behind. */
static int teardown(void **state)
{
    struct env *e = *state;
    for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
        if (live[i] > 0 && kill(live[i], SIGKILL) == 0)
            waitpid(live[i], NULL, 0);
        live[i] = 0;
    }
    while (e->n.nvmlShutdown() == NVML_SUCCESS)
        ;
    return 0;
}

static nvmlDevice_t handle(const struct api *n, unsigned index)
{
    nvmlDevice_t h = NULL;
    assert_int_equal(n->nvmlDeviceGetHandleByIndex_v2(index, &h), NVML_SUCCESS);
    return h;
}

static unsigned gpu_utilization(const struct api *n, nvmlDevice_t h)
{
    nvmlUtilization_t u;
    assert_int_equal(n->nvmlDeviceGetUtilizationRates(h, &u), NVML_SUCCESS);
    return u.gpu;
}

/* Starts argv[0] with the environment envp and returns once it has exec'd
 * (the close-on-exec pipe then reads EOF): before that, /proc/<pid>/environ
 * would still be a copy of ours. Its stdin is a pipe that stop_child closes. */
static struct child spawn(char *const argv[], char *const envp[])
{
    int in[2], sync[2];
    assert_int_equal(pipe(in), 0);
    assert_int_equal(pipe(sync), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(fcntl(in[i], F_SETFD, FD_CLOEXEC), 0);
        assert_int_equal(fcntl(sync[i], F_SETFD, FD_CLOEXEC), 0);
    }
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (dup2(in[0], STDIN_FILENO) >= 0)
            execve(argv[0], argv, envp);
        int err = errno;
        if (write(sync[1], &err, sizeof(err)) < 0)
            _exit(126);
        _exit(127);
    }
    close(in[0]);
    close(sync[1]);
    int err = 0;
    ssize_t got;
    while ((got = read(sync[0], &err, sizeof(err))) < 0 && errno == EINTR)
        ;
    close(sync[0]);
    assert_int_equal(got, 0);
    live_set(0, pid);
    return (struct child){.pid = pid, .stdin_fd = in[1]};
}

/* /bin/cat with only CUDA_VISIBLE_DEVICES=cvd in its environment. */
static struct child spawn_child(const char *cvd)
{
    char var[128];
    snprintf(var, sizeof(var), "CUDA_VISIBLE_DEVICES=%s", cvd);
    char *const argv[] = {(char *)"/bin/cat", NULL};
    char *const envp[] = {var, NULL};
    return spawn(argv, envp);
}

/* Closes the child's stdin and reaps it: afterwards it is gone from /proc. */
static void stop_child(struct child *c)
{
    int status;
    close(c->stdin_fd);
    assert_int_equal(waitpid(c->pid, &status, 0), c->pid);
    live_set(c->pid, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* Whether pid is one of the GPU's processes (v3 call); its memory in *ret_bytes. */
static bool has_process(const struct api *n, nvmlDevice_t h, pid_t pid,
                        unsigned long long *ret_bytes)
{
    nvmlProcessInfo_t infos[256];
    unsigned count = 256;
    assert_int_equal(n->nvmlDeviceGetComputeRunningProcesses_v3(h, &count, infos), NVML_SUCCESS);
    for (unsigned i = 0; i < count; i++) {
        if (infos[i].pid == (unsigned)pid) {
            assert_int_equal(infos[i].gpuInstanceId, 0xFFFFFFFFu);
            assert_int_equal(infos[i].computeInstanceId, 0xFFFFFFFFu);
            *ret_bytes = infos[i].usedGpuMemory;
            return true;
        }
    }
    return false;
}

/* Every device call, with good out-parameters, returns `want` for handle h. */
static void expect_device_calls(const struct api *n, nvmlDevice_t h, nvmlReturn_t want)
{
    char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned u, v, room3 = 4, room2 = 4, room1 = 4;
    nvmlMemory_t mem;
    nvmlMemory_v2_t mem2 = {.version = nvmlMemory_v2};
    nvmlUtilization_t util;
    nvmlPciInfo_t pci;
    nvmlEnableState_t active;
    nvmlProcessInfo_t infos[4];
    nvmlProcessInfo_v1_t infos1[4];
    assert_int_equal(n->nvmlDeviceGetIndex(h, &u), want);
    assert_int_equal(n->nvmlDeviceGetUUID(h, buf, sizeof(buf)), want);
    assert_int_equal(n->nvmlDeviceGetName(h, buf, sizeof(buf)), want);
    assert_int_equal(n->nvmlDeviceGetPciInfo_v3(h, &pci), want);
    assert_int_equal(n->nvmlDeviceGetPciInfo(h, &pci), want);
    assert_int_equal(n->nvmlDeviceGetMemoryInfo(h, &mem), want);
    assert_int_equal(n->nvmlDeviceGetMemoryInfo_v2(h, &mem2), want);
    assert_int_equal(n->nvmlDeviceGetUtilizationRates(h, &util), want);
    assert_int_equal(n->nvmlDeviceGetPowerUsage(h, &u), want);
    assert_int_equal(n->nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU, &u), want);
    assert_int_equal(n->nvmlDeviceGetMigMode(h, &u, &v), want);
    assert_int_equal(n->nvmlDeviceGetMaxMigDeviceCount(h, &u), want);
    assert_int_equal(n->nvmlDeviceGetComputeRunningProcesses_v3(h, &room3, infos), want);
    assert_int_equal(n->nvmlDeviceGetComputeRunningProcesses_v2(h, &room2, infos), want);
    assert_int_equal(n->nvmlDeviceGetComputeRunningProcesses(h, &room1, infos1), want);
    assert_int_equal(n->nvmlDeviceGetNvLinkState(h, 0, &active), want);
    assert_int_equal(n->nvmlDeviceGetNvLinkRemotePciInfo_v2(h, 0, &pci), want);
    assert_int_equal(n->nvmlDeviceGetNvLinkRemotePciInfo(h, 0, &pci), want);
}

static void test_init_and_shutdown_are_reference_counted(void **state)
{
    const struct api *n = &((struct env *)*state)->n;
    unsigned count;
    assert_int_equal(n->nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
    assert_int_equal(n->nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    assert_int_equal(n->nvmlInitWithFlags(NVML_INIT_FLAG_NO_ATTACH), NVML_SUCCESS);
    assert_int_equal(n->nvmlInit(), NVML_SUCCESS);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(n->nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
        assert_int_equal(count, 3);
        assert_int_equal(n->nvmlShutdown(), NVML_SUCCESS);
    }
    assert_int_equal(n->nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
    assert_int_equal(n->nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
}

static void test_every_call_is_uninitialized_outside_a_session(void **state)
{
    const struct env *e = *state;
    const struct api *n = &e->n;
    char buf[96];
    unsigned count;
    nvmlDevice_t h;
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    h = handle(n, 0);
    assert_int_equal(n->nvmlShutdown(), NVML_SUCCESS);
    expect_device_calls(n, h, NVML_ERROR_UNINITIALIZED);
    assert_int_equal(n->nvmlSystemGetDriverVersion(buf, sizeof(buf)), NVML_ERROR_UNINITIALIZED);
    assert_int_equal(n->nvmlSystemGetNVMLVersion(buf, sizeof(buf)), NVML_ERROR_UNINITIALIZED);
    assert_int_equal(n->nvmlDeviceGetCount(&count), NVML_ERROR_UNINITIALIZED);
    assert_int_equal(n->nvmlDeviceGetHandleByIndex_v2(0, &h), NVML_ERROR_UNINITIALIZED);
    assert_int_equal(n->nvmlDeviceGetHandleByUUID(e->uuid[0], &h), NVML_ERROR_UNINITIALIZED);
    assert_int_equal(n->nvmlDeviceGetHandleByPciBusId_v2("00000000:10:00.0", &h),
                     NVML_ERROR_UNINITIALIZED);
    /* nvmlErrorString needs no session */
    assert_string_equal(n->nvmlErrorString(NVML_ERROR_UNINITIALIZED), "Uninitialized");
    assert_string_equal(n->nvmlErrorString(NVML_ERROR_INSUFFICIENT_SIZE), "Insufficient Size");
    assert_string_equal(n->nvmlErrorString((nvmlReturn_t)12345), "Unknown Error");
}

static void test_bad_handles_are_invalid_arguments(void **state)
{
    const struct api *n = &((struct env *)*state)->n;
    int not_a_gpu = 0;
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h = handle(n, 0);
    expect_device_calls(n, NULL, NVML_ERROR_INVALID_ARGUMENT);
    expect_device_calls(n, (nvmlDevice_t)(void *)&not_a_gpu, NVML_ERROR_INVALID_ARGUMENT);
    expect_device_calls(n, (nvmlDevice_t)(void *)((char *)h + 1), NVML_ERROR_INVALID_ARGUMENT);
    expect_device_calls(n, h, NVML_SUCCESS);
}

static void test_null_pointers_and_out_of_range_values_are_invalid_arguments(void **state)
{
    const struct env *e = *state;
    const struct api *n = &e->n;
    unsigned u = 0;
    nvmlDevice_t h;
    nvmlEnableState_t active;
    nvmlPciInfo_t pci;
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    h = handle(n, 0);
    const nvmlReturn_t bad = NVML_ERROR_INVALID_ARGUMENT;
    assert_int_equal(n->nvmlSystemGetDriverVersion(NULL, 80), bad);
    assert_int_equal(n->nvmlSystemGetNVMLVersion(NULL, 80), bad);
    assert_int_equal(n->nvmlDeviceGetCount_v2(NULL), bad);
    assert_int_equal(n->nvmlDeviceGetHandleByIndex_v2(0, NULL), bad);
    assert_int_equal(n->nvmlDeviceGetHandleByIndex_v2(3, &h), bad);
    assert_int_equal(n->nvmlDeviceGetHandleByIndex(3, &h), bad);
    assert_int_equal(n->nvmlDeviceGetHandleByUUID(NULL, &h), bad);
    assert_int_equal(n->nvmlDeviceGetHandleByUUID(e->uuid[0], NULL), bad);
    assert_int_equal(n->nvmlDeviceGetHandleByPciBusId_v2(NULL, &h), bad);
    assert_int_equal(n->nvmlDeviceGetHandleByPciBusId_v2("10:00.0", NULL), bad);
    assert_int_equal(n->nvmlDeviceGetHandleByPciBusId_v2("not a bus id", &h), bad);
    assert_int_equal(n->nvmlDeviceGetIndex(h, NULL), bad);
    assert_int_equal(n->nvmlDeviceGetUUID(h, NULL, 96), bad);
    assert_int_equal(n->nvmlDeviceGetName(h, NULL, 96), bad);
    assert_int_equal(n->nvmlDeviceGetPciInfo_v3(h, NULL), bad);
    assert_int_equal(n->nvmlDeviceGetMemoryInfo(h, NULL), bad);
    assert_int_equal(n->nvmlDeviceGetMemoryInfo_v2(h, NULL), bad);
    assert_int_equal(n->nvmlDeviceGetUtilizationRates(h, NULL), bad);
    assert_int_equal(n->nvmlDeviceGetPowerUsage(h, NULL), bad);
    assert_int_equal(n->nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU, NULL), bad);
    assert_int_equal(n->nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_COUNT, &u), bad);
    assert_int_equal(n->nvmlDeviceGetMigMode(h, NULL, &u), bad);
    assert_int_equal(n->nvmlDeviceGetMigMode(h, &u, NULL), bad);
    assert_int_equal(n->nvmlDeviceGetMaxMigDeviceCount(h, NULL), bad);
    assert_int_equal(n->nvmlDeviceGetComputeRunningProcesses_v3(h, NULL, NULL), bad);
    u = 2;
    assert_int_equal(n->nvmlDeviceGetComputeRunningProcesses_v3(h, &u, NULL), bad);
    assert_int_equal(u, 2);
    assert_int_equal(n->nvmlDeviceGetNvLinkState(h, 0, NULL), bad);
    assert_int_equal(n->nvmlDeviceGetNvLinkState(h, NVML_NVLINK_MAX_LINKS, &active), bad);
    assert_int_equal(n->nvmlDeviceGetNvLinkRemotePciInfo_v2(h, 0, NULL), bad);
    assert_int_equal(n->nvmlDeviceGetNvLinkRemotePciInfo_v2(h, NVML_NVLINK_MAX_LINKS, &pci), bad);
}

static void test_short_buffers_are_insufficient_size(void **state)
{
    const struct env *e = *state;
    const struct api *n = &e->n;
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h = handle(n, 0);
    memset(buf, 'x', sizeof(buf));
    assert_int_equal(n->nvmlDeviceGetUUID(h, buf, strlen(e->uuid[0])),
                     NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(buf[0], 'x');
    assert_int_equal(n->nvmlDeviceGetUUID(h, buf, strlen(e->uuid[0]) + 1), NVML_SUCCESS);
    assert_string_equal(buf, e->uuid[0]);
    assert_int_equal(n->nvmlDeviceGetName(h, buf, 21), NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(n->nvmlDeviceGetName(h, buf, 22), NVML_SUCCESS);
    assert_string_equal(buf, "NVIDIA H100 80GB HBM3");
    assert_int_equal(n->nvmlDeviceGetName(h, buf, 0), NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(n->nvmlSystemGetDriverVersion(buf, 10), NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(n->nvmlSystemGetDriverVersion(buf, 11), NVML_SUCCESS);
    assert_int_equal(n->nvmlSystemGetNVMLVersion(buf, 13), NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(n->nvmlSystemGetNVMLVersion(buf, 14), NVML_SUCCESS);
}

static void test_count_handles_and_lookups_follow_the_file(void **state)
{
    const struct env *e = *state;
    const struct api *n = &e->n;
    unsigned count, index;
    nvmlDevice_t h[3], found;
    nvmlPciInfo_t pci;
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    assert_int_equal(n->nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
    assert_int_equal(count, 3);
    assert_int_equal(n->nvmlDeviceGetCount(&count), NVML_SUCCESS);
    assert_int_equal(count, 3);
    for (unsigned i = 0; i < 3; i++) {
        h[i] = handle(n, i);
        assert_int_equal(n->nvmlDeviceGetHandleByIndex(i, &found), NVML_SUCCESS);
        assert_ptr_equal(found, h[i]);
        assert_int_equal(n->nvmlDeviceGetIndex(h[i], &index), NVML_SUCCESS);
        assert_int_equal(index, i);
        assert_int_equal(n->nvmlDeviceGetPciInfo_v3(h[i], &pci), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &found), NVML_SUCCESS);
        assert_ptr_equal(found, h[i]);
        assert_int_equal(n->nvmlDeviceGetHandleByPciBusId_v2(pci.busIdLegacy, &found),
                         NVML_SUCCESS);
        assert_ptr_equal(found, h[i]);
    }
    assert_ptr_not_equal(h[0], h[1]);
    assert_ptr_not_equal(h[1], h[2]);
    assert_int_equal(n->nvmlDeviceGetHandleByUUID(e->uuid[1], &found), NVML_SUCCESS);
    assert_ptr_equal(found, h[1]);
    assert_int_equal(
        n->nvmlDeviceGetHandleByUUID("GPU-7e57c0de-0000-4000-8000-00000000000f", &found),
        NVML_ERROR_NOT_FOUND);
    assert_int_equal(n->nvmlDeviceGetHandleByUUID("", &found), NVML_ERROR_NOT_FOUND);
    assert_int_equal(n->nvmlDeviceGetHandleByPciBusId_v2("00000000:7F:00.0", &found),
                     NVML_ERROR_NOT_FOUND);
}

static void test_device_figures_come_from_the_file(void **state)
{
    const struct env *e = *state;
    const struct api *n = &e->n;
    char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned u;
    nvmlMemory_t mem;
    nvmlMemory_v2_t mem2 = {.version = nvmlMemory_v2};
    nvmlUtilization_t util;
    nvmlPciInfo_t pci;
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h0 = handle(n, 0), h1 = handle(n, 1), h2 = handle(n, 2);
    assert_int_equal(n->nvmlSystemGetDriverVersion(buf, sizeof(buf)), NVML_SUCCESS);
    assert_string_equal(buf, "535.104.05");
    assert_int_equal(n->nvmlSystemGetNVMLVersion(buf, sizeof(buf)), NVML_SUCCESS);
    assert_string_equal(buf, "12.535.104.05");
    assert_int_equal(n->nvmlDeviceGetUUID(h2, buf, sizeof(buf)), NVML_SUCCESS);
    assert_string_equal(buf, e->uuid[2]);
    assert_int_equal(n->nvmlDeviceGetName(h2, buf, sizeof(buf)), NVML_SUCCESS);
    assert_string_equal(buf, "NVIDIA L4");
    assert_int_equal(n->nvmlDeviceGetName(h1, buf, sizeof(buf)), NVML_SUCCESS);
    assert_string_equal(buf, "NVIDIA H100 80GB HBM3"); /* the default */
    assert_int_equal(n->nvmlDeviceGetMemoryInfo(h0, &mem), NVML_SUCCESS);
    assert_int_equal(mem.total, 81559 * MIB);
    assert_int_equal(mem.used + mem.free, mem.total);
    assert_int_equal(n->nvmlDeviceGetMemoryInfo(h2, &mem), NVML_SUCCESS);
    assert_int_equal(mem.total, 23034 * MIB);
    assert_int_equal(mem.used, 100 * MIB);
    assert_int_equal(mem.free, (23034 - 100) * MIB);
    assert_int_equal(n->nvmlDeviceGetMemoryInfo_v2(h2, &mem2), NVML_SUCCESS);
    assert_int_equal(mem2.total, 23034 * MIB);
    assert_int_equal(mem2.used, 100 * MIB);
    mem2.version = 1;
    assert_int_equal(n->nvmlDeviceGetMemoryInfo_v2(h2, &mem2),
                     NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    assert_int_equal(n->nvmlDeviceGetUtilizationRates(h0, &util), NVML_SUCCESS);
    assert_int_equal(util.gpu, 35);
    assert_int_equal(util.memory, 10);
    assert_int_equal(n->nvmlDeviceGetPowerUsage(h0, &u), NVML_SUCCESS);
    assert_int_equal(u, 210000);
    assert_int_equal(n->nvmlDeviceGetTemperature(h0, NVML_TEMPERATURE_GPU, &u), NVML_SUCCESS);
    assert_int_equal(u, 41);
    assert_int_equal(n->nvmlDeviceGetPciInfo_v3(h1, &pci), NVML_SUCCESS);
    assert_int_equal(strlen(pci.busId), 16); /* "%08X:%02X:%02X.0" */
    assert_int_equal(strlen(pci.busIdLegacy), 12);
    assert_string_equal(pci.busId + 4, pci.busIdLegacy);
    assert_int_equal(pci.pciDeviceId & 0xFFFFu, 0x10DE); /* NVIDIA's vendor id */
}

static void test_rewriting_the_file_changes_values_on_the_next_call(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    char buf[1024];
    unsigned count;
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h0 = handle(n, 0), h2 = handle(n, 2);
    assert_int_equal(gpu_utilization(n, h0), 35);
    write_file(e, config(e, buf, sizeof(buf), 77));
    assert_int_equal(gpu_utilization(n, h0), 77);
    /* Same inode, size and mtime: still seen. */
    write_within_one_tick(e, config(e, buf, sizeof(buf), 36));
    assert_int_equal(gpu_utilization(n, h0), 36);
    write_within_one_tick(e, config(e, buf, sizeof(buf), 78));
    assert_int_equal(gpu_utilization(n, h0), 78);
    assert_ptr_equal(handle(n, 0), h0); /* handles survive reloads */
    snprintf(buf, sizeof(buf), "{\"gpus\": [{\"uuid\": \"%s\", \"utilization\": 3}]}", e->uuid[0]);
    write_file(e, buf);
    assert_int_equal(n->nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
    assert_int_equal(count, 1);
    assert_int_equal(gpu_utilization(n, h0), 3);
    assert_int_equal(n->nvmlDeviceGetPowerUsage(h2, &count), NVML_ERROR_INVALID_ARGUMENT);
}

static void test_a_malformed_rewrite_keeps_the_last_good_state(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    char buf[1024];
    static const char *const bad[] = {
        "{\"gpus\": [",
        "[]",
        "{\"gpus\": [{\"uuid\": \"GPU-1\"}]}",
        "{\"gpus\": [{\"utilization\": 5, \"colour\": \"green\"}]}",
        "{\"gpus\": [{\"mig_capable\": false, \"mig_enabled\": true}]}",
        "{\"gpus\": [{\"nvlink_peers\": [1]}]}",
        "{\"gpus\": [{}, {\"uuid\": \"GPU-fa4e0000-0000-4000-8000-000000000000\"}]}",
        "{\"gpus\": [{\"memory_mib\": 10, \"memory_used_mib\": 11}]}",
        "{\"driver_version\": 550, \"gpus\": []}",
        "",
    };
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h0 = handle(n, 0);
    assert_int_equal(gpu_utilization(n, h0), 35);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_file(e, bad[i]);
        assert_int_equal(gpu_utilization(n, h0), 35);
    }
    write_file(e, config(e, buf, sizeof(buf), 101)); /* out of range */
    assert_int_equal(gpu_utilization(n, h0), 35);
    unlink(e->path); /* gone */
    assert_int_equal(gpu_utilization(n, h0), 35);
    write_file(e, config(e, buf, sizeof(buf), 50));
    assert_int_equal(gpu_utilization(n, h0), 50);
}

static void test_a_malformed_file_makes_the_first_init_fail(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    char buf[1024];
    unsigned count;
    write_file(e, "{\"gpus\": [{\"utilization\": 200}]}");
    assert_int_equal(n->nvmlInit_v2(), NVML_ERROR_UNKNOWN);
    assert_int_equal(n->nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
    assert_int_equal(n->nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
    unlink(e->path);
    assert_int_equal(n->nvmlInit_v2(), NVML_ERROR_UNKNOWN);
    write_file(e, config(e, buf, sizeof(buf), 35));
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    assert_int_equal(n->nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
    assert_int_equal(count, 3);
}

static void test_mig_mode_is_not_supported_on_a_gpu_without_mig(void **state)
{
    const struct api *n = &((struct env *)*state)->n;
    unsigned current = 9, pending = 9, max = 9;
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h0 = handle(n, 0), h1 = handle(n, 1), h2 = handle(n, 2);
    assert_int_equal(n->nvmlDeviceGetMigMode(h0, &current, &pending), NVML_SUCCESS);
    assert_int_equal(current, NVML_DEVICE_MIG_ENABLE);
    assert_int_equal(pending, NVML_DEVICE_MIG_ENABLE);
    assert_int_equal(n->nvmlDeviceGetMaxMigDeviceCount(h0, &max), NVML_SUCCESS);
    assert_int_equal(max, 7);
    assert_int_equal(n->nvmlDeviceGetMigMode(h1, &current, &pending), NVML_SUCCESS);
    assert_int_equal(current, NVML_DEVICE_MIG_DISABLE);
    assert_int_equal(pending, NVML_DEVICE_MIG_DISABLE);
    assert_int_equal(n->nvmlDeviceGetMaxMigDeviceCount(h1, &max), NVML_SUCCESS);
    assert_int_equal(max, 0);
    current = pending = 9;
    assert_int_equal(n->nvmlDeviceGetMigMode(h2, &current, &pending), NVML_ERROR_NOT_SUPPORTED);
    assert_int_equal(current, 9);
    assert_int_equal(n->nvmlDeviceGetMaxMigDeviceCount(h2, &max), NVML_SUCCESS);
    assert_int_equal(max, 0);
}

static void test_nvlink_links_lead_to_the_listed_peers(void **state)
{
    const struct api *n = &((struct env *)*state)->n;
    nvmlEnableState_t active;
    nvmlPciInfo_t remote, peer;
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h0 = handle(n, 0), h1 = handle(n, 1), h2 = handle(n, 2);
    assert_int_equal(n->nvmlDeviceGetNvLinkState(h0, 0, &active), NVML_SUCCESS);
    assert_int_equal(active, NVML_FEATURE_ENABLED);
    assert_int_equal(n->nvmlDeviceGetNvLinkRemotePciInfo_v2(h0, 0, &remote), NVML_SUCCESS);
    assert_int_equal(n->nvmlDeviceGetPciInfo_v3(h1, &peer), NVML_SUCCESS);
    assert_string_equal(remote.busId, peer.busId);
    assert_int_equal(n->nvmlDeviceGetNvLinkRemotePciInfo(h1, 0, &remote), NVML_SUCCESS);
    assert_int_equal(n->nvmlDeviceGetPciInfo_v3(h0, &peer), NVML_SUCCESS);
    assert_string_equal(remote.busId, peer.busId);
    assert_int_equal(n->nvmlDeviceGetNvLinkState(h0, 1, &active), NVML_SUCCESS);
    assert_int_equal(active, NVML_FEATURE_DISABLED);
    assert_int_equal(n->nvmlDeviceGetNvLinkRemotePciInfo_v2(h0, 1, &remote),
                     NVML_ERROR_NOT_SUPPORTED);
    assert_int_equal(n->nvmlDeviceGetNvLinkState(h2, 0, &active), NVML_ERROR_NOT_SUPPORTED);
    assert_int_equal(n->nvmlDeviceGetNvLinkRemotePciInfo_v2(h2, 0, &remote),
                     NVML_ERROR_NOT_SUPPORTED);
}

static void test_processes_follow_the_documented_size_protocol(void **state)
{
    const struct env *e = *state;
    const struct api *n = &e->n;
    nvmlProcessInfo_t infos[64];
    struct child c[3];
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h1 = handle(n, 1), h2 = handle(n, 2);
    unsigned count = 0;
    assert_int_equal(n->nvmlDeviceGetComputeRunningProcesses_v3(h2, &count, NULL), NVML_SUCCESS);
    assert_int_equal(count, 0);
    for (int i = 0; i < 3; i++)
        c[i] = spawn_child(e->uuid[1]);
    count = 0;
    assert_int_equal(n->nvmlDeviceGetComputeRunningProcesses_v3(h1, &count, NULL),
                     NVML_ERROR_INSUFFICIENT_SIZE);
    assert_true(count >= 3);
    count = 1;
    infos[0].pid = 0;
    assert_int_equal(n->nvmlDeviceGetComputeRunningProcesses_v3(h1, &count, infos),
                     NVML_ERROR_INSUFFICIENT_SIZE);
    assert_true(count >= 3);
    assert_int_equal(infos[0].pid, 0); /* nothing written */
    count = 64;
    assert_int_equal(n->nvmlDeviceGetComputeRunningProcesses_v3(h1, &count, infos), NVML_SUCCESS);
    assert_true(count >= 3);
    for (int i = 0; i < 3; i++) {
        bool seen = false;
        for (unsigned j = 0; j < count; j++) {
            if (infos[j].pid == (unsigned)c[i].pid) {
                seen = true;
                assert_int_equal(infos[j].usedGpuMemory, 2048 * MIB);
            }
        }
        assert_true(seen);
    }
    for (int i = 0; i < 3; i++)
        stop_child(&c[i]);
}

static void test_a_child_with_the_gpu_uuid_is_its_process_until_it_exits(void **state)
{
    const struct env *e = *state;
    const struct api *n = &e->n;
    unsigned long long bytes = 0;
    nvmlMemory_t mem;
    nvmlProcessInfo_v1_t v1[64];
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h0 = handle(n, 0), h1 = handle(n, 1), h2 = handle(n, 2);
    struct child c = spawn_child(e->uuid[0]);
    assert_true(has_process(n, h0, c.pid, &bytes));
    assert_int_equal(bytes, 1024 * MIB);
    assert_false(has_process(n, h1, c.pid, &bytes));
    assert_false(has_process(n, h2, c.pid, &bytes));
    unsigned count = 64;
    assert_int_equal(n->nvmlDeviceGetComputeRunningProcesses(h0, &count, v1), NVML_SUCCESS);
    bool seen = false;
    for (unsigned i = 0; i < count; i++)
        seen = seen || (v1[i].pid == (unsigned)c.pid && v1[i].usedGpuMemory == 1024 * MIB);
    assert_true(seen);
    assert_int_equal(n->nvmlDeviceGetMemoryInfo(h0, &mem), NVML_SUCCESS);
    assert_true(mem.used >= 1024 * MIB);
    stop_child(&c);
    assert_false(has_process(n, h0, c.pid, &bytes));

    /* By index, in a list that also names a GPU that does not exist. Not
     * GPU 2: the size protocol test expects it to have no processes. */
    c = spawn_child("7,1");
    assert_true(has_process(n, h1, c.pid, &bytes));
    assert_false(has_process(n, h0, c.pid, &bytes));
    stop_child(&c);
    assert_false(has_process(n, h1, c.pid, &bytes));
}

/* FAKENVML_PROC_CACHE_MS keeps one /proc scan for every GPU: a process that
 * starts after it is seen only once the scan is older than that (60 s here,
 * far beyond the test), and at once after a shutdown without the variable;
 * one that exits is gone at once. */
static void test_the_process_cache_keeps_one_scan(void **state)
{
    const struct env *e = *state;
    const struct api *n = &e->n;
    unsigned long long bytes = 0;
    setenv("FAKENVML_PROC_CACHE_MS", "60000", 1);
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h0 = handle(n, 0);
    struct child c = spawn_child(e->uuid[0]);
    assert_true(has_process(n, h0, c.pid, &bytes)); /* the first scan, after the child began */
    struct child d = spawn_child(e->uuid[0]);
    assert_false(has_process(n, h0, d.pid, &bytes)); /* the same scan */
    stop_child(&c);
    assert_false(has_process(n, h0, c.pid, &bytes)); /* the same scan, less what exited */
    assert_int_equal(n->nvmlShutdown(), NVML_SUCCESS);
    unsetenv("FAKENVML_PROC_CACHE_MS");
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    h0 = handle(n, 0);
    assert_true(has_process(n, h0, d.pid, &bytes)); /* no cache: scanned at the call */
    stop_child(&d);
    assert_false(has_process(n, h0, d.pid, &bytes));
    assert_int_equal(n->nvmlShutdown(), NVML_SUCCESS);
}

static void test_without_a_file_there_are_eight_h100s(void **state)
{
    const struct api *n = &((struct env *)*state)->n;
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE], want[64];
    unsigned count;
    nvmlEnableState_t active;
    unsetenv("FAKENVML_CONFIG");
    nvmlReturn_t rc = n->nvmlInit_v2();
    setenv("FAKENVML_CONFIG", ((struct env *)*state)->path, 1);
    assert_int_equal(rc, NVML_SUCCESS);
    assert_int_equal(n->nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
    assert_int_equal(count, 8);
    for (unsigned i = 0; i < 8; i++) {
        nvmlDevice_t h = handle(n, i);
        assert_int_equal(n->nvmlDeviceGetName(h, buf, sizeof(buf)), NVML_SUCCESS);
        assert_string_equal(buf, "NVIDIA H100 80GB HBM3");
        assert_int_equal(n->nvmlDeviceGetUUID(h, buf, sizeof(buf)), NVML_SUCCESS);
        snprintf(want, sizeof(want), "GPU-fa4e0000-0000-4000-8000-%012x", i);
        assert_string_equal(buf, want);
        assert_int_equal(n->nvmlDeviceGetNvLinkState(h, 6, &active), NVML_SUCCESS);
        assert_int_equal(active, NVML_FEATURE_ENABLED);
        assert_int_equal(n->nvmlDeviceGetNvLinkState(h, 7, &active), NVML_SUCCESS);
        assert_int_equal(active, NVML_FEATURE_DISABLED);
    }
    assert_int_equal(n->nvmlSystemGetDriverVersion(buf, sizeof(buf)), NVML_SUCCESS);
    assert_string_equal(buf, "550.54.15");
}

/* ---- busy GPUs: figures from the processes where the file scripts none ---- */

/* A process that burns one CPU core, on the devices cvd names; kill_child
 * ends it. */
static struct child spawn_busy(const char *cvd)
{
    char var[256];
    snprintf(var, sizeof(var), "CUDA_VISIBLE_DEVICES=%s", cvd);
    char *const argv[] = {(char *)"/bin/sh", (char *)"-c", (char *)"while :; do :; done", NULL};
    char *const envp[] = {var, NULL};
    return spawn(argv, envp);
}

static void kill_child(struct child *c)
{
    int status;
    close(c->stdin_fd);
    assert_int_equal(kill(c->pid, SIGKILL), 0);
    assert_int_equal(waitpid(c->pid, &status, 0), c->pid);
    live_set(c->pid, 0);
}

/* A process's CPU ticks (utime + stime), read as proc(5) documents. */
static unsigned long long cpu_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    assert_int_equal(fclose(f), 0);
    buf[n] = '\0';
    const char *s = strrchr(buf, ')');
    assert_non_null(s);
    unsigned long long utime, stime;
    /* after the command: state (3), then fields 4..13, utime (14), stime (15) */
    assert_int_equal(
        sscanf(s + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime), 2);
    return utime + stime;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void pause_ms(long ms)
{
    struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

#define BUSY_DEADLINE_S 60.0 /* a loaded machine may starve the busy child a while */
#define BUSY_WANT       30   /* %: what the busy child's GPU must read once */
#define BUSY_TOLERANCE  15   /* %: a reading against the child's CPU time, measured here */

/* Reads the GPUs' utilization every 300 ms until GPU `busy` reads at least
 * BUSY_WANT or the deadline passes. Each reading after the first (which has
 * no interval: 0) must be within [lo[i], hi[i]], and GPU busy's must be the
 * CPU time that process pid used since the last reading, divided by share,
 * within BUSY_TOLERANCE (the machine may give it less than a core). Whether
 * GPU busy got there. */
static bool wait_busy(const struct api *n, const nvmlDevice_t *h, unsigned nh, unsigned busy,
                      pid_t pid, unsigned share, const unsigned *lo, const unsigned *hi)
{
    double until = now_s() + BUSY_DEADLINE_S, then = 0;
    unsigned long long ticks_then = 0;
    long hz = sysconf(_SC_CLK_TCK);
    for (bool first = true; now_s() < until; first = false) {
        unsigned u[4];
        unsigned long long ticks = cpu_ticks(pid);
        double t = now_s();
        for (unsigned i = 0; i < nh; i++) {
            u[i] = gpu_utilization(n, h[i]);
            if (first)
                assert_int_equal(u[i], 0); /* no interval yet */
            else if (u[i] < lo[i] || u[i] > hi[i])
                fail_msg("GPU %u read %u %%, outside %u..%u", i, u[i], lo[i], hi[i]);
        }
        if (!first) {
            double used = (double)(ticks - ticks_then) / (double)hz / (t - then) * 100 / share;
            if (used > 100)
                used = 100;
            if (u[busy] + BUSY_TOLERANCE < used || u[busy] > used + BUSY_TOLERANCE)
                fail_msg("GPU %u read %u %% while its process used %.0f %% of a core / %u", busy,
                         u[busy], used * share, share);
            if (u[busy] >= BUSY_WANT)
                return true;
        }
        ticks_then = ticks;
        then = t;
        pause_ms(300);
    }
    return false;
}

/* Without "utilization" a GPU reads its processes' CPU time: a process
 * spinning on one core makes its GPU busy, `cat` waiting on its stdin
 * leaves its GPU at 0 %; and the scripted figure wins over both. */
static void test_unscripted_utilization_follows_the_processes_cpu_time(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    char buf[1024];
    snprintf(buf, sizeof(buf),
             "{\"gpus\": [{\"uuid\": \"%s\"}, {\"uuid\": \"%s\"}, {\"uuid\": \"%s\", "
             "\"utilization\": 35}]}",
             e->uuid[0], e->uuid[1], e->uuid[2]);
    write_file(e, buf);
    struct child busy = spawn_busy(e->uuid[0]), idle = spawn_child(e->uuid[1]),
                 scripted = spawn_busy(e->uuid[2]);
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h[3] = {handle(n, 0), handle(n, 1), handle(n, 2)};
    /* GPU 2 is scripted: 35 whatever runs there (the first reading too) */
    assert_int_equal(gpu_utilization(n, h[2]), 35);
    const unsigned lo[2] = {0, 0}, hi[2] = {100, 5};
    assert_true(wait_busy(n, h, 2, 0, busy.pid, 1, lo, hi));
    for (int i = 0; i < 3; i++)
        assert_int_equal(gpu_utilization(n, h[2]), 35);
    /* Power and temperature follow each GPU's utilization (its last
     * reading, the scripted one for GPU 2): 70 W / 30 C idle to 700 W /
     * 75 C at 100 %. */
    for (int i = 0; i < 3; i++) {
        unsigned pct = gpu_utilization(n, h[i]), mw, c;
        assert_int_equal(n->nvmlDeviceGetPowerUsage(h[i], &mw), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetTemperature(h[i], NVML_TEMPERATURE_GPU, &c), NVML_SUCCESS);
        assert_int_equal(mw, 70000 + 630000 * pct / 100);
        assert_int_equal(c, 30 + 45 * pct / 100);
    }
    kill_child(&busy);
    kill_child(&scripted);
    stop_child(&idle);
    /* Its process gone, the GPU goes back to 0 at the next interval. */
    double until = now_s() + BUSY_DEADLINE_S;
    unsigned u;
    while ((u = gpu_utilization(n, h[0])) != 0 && now_s() < until)
        pause_ms(300);
    assert_int_equal(u, 0);
}

/* A process that sees two GPUs is shared between them: each reads about
 * half of its core. */
static void test_a_process_on_two_gpus_counts_half_on_each(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    char buf[1024], cvd[2 * NVML_DEVICE_UUID_BUFFER_SIZE + 2];
    snprintf(buf, sizeof(buf), "{\"gpus\": [{\"uuid\": \"%s\"}, {\"uuid\": \"%s\"}]}", e->uuid[0],
             e->uuid[1]);
    write_file(e, buf);
    snprintf(cvd, sizeof(cvd), "%s,%s", e->uuid[0], e->uuid[1]);
    struct child busy = spawn_busy(cvd);
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h[2] = {handle(n, 0), handle(n, 1)};
    const unsigned lo[2] = {0, 0}, hi[2] = {50 + BUSY_TOLERANCE, 50 + BUSY_TOLERANCE};
    assert_true(wait_busy(n, h, 2, 0, busy.pid, 2, lo, hi));
    kill_child(&busy);
}

/* The usedGpuMemory of process pid on GPU h (v3), or ~0ull if not listed. */
static unsigned long long process_mib_of(const struct api *n, nvmlDevice_t h, pid_t pid)
{
    unsigned long long bytes;
    return has_process(n, h, pid, &bytes) ? bytes / MIB : ~0ull;
}

/* Without process_memory_mib a process holds what its job asked: its
 * GPUORCH_GPU_MILLI share of the GPU (the whole GPU without it), or its
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT; once per job (its oldest process); 1024
 * MiB for a process of no job. memory_used_mib and process_memory_mib,
 * when given, win. */
static void test_unscripted_memory_is_what_the_job_asked(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    char buf[1024], cvd0[128], cvd1[128];
    snprintf(cvd0, sizeof(cvd0), "CUDA_VISIBLE_DEVICES=%s", e->uuid[0]);
    snprintf(cvd1, sizeof(cvd1), "CUDA_VISIBLE_DEVICES=%s", e->uuid[1]);
    snprintf(buf, sizeof(buf),
             "{\"gpus\": [{\"uuid\": \"%s\"}, {\"uuid\": \"%s\", \"memory_mib\": 40000}]}",
             e->uuid[0], e->uuid[1]);
    write_file(e, buf);
    char *const cat[] = {(char *)"/bin/cat", NULL};
    char *const quarter[] = {cvd0, (char *)"GPUORCH_JOB_ID=7", (char *)"GPUORCH_ATTEMPT=1",
                             (char *)"GPUORCH_GPU_MILLI=250", NULL};
    char *const mps[] = {cvd0,
                         (char *)"GPUORCH_JOB_ID=8",
                         (char *)"GPUORCH_ATTEMPT=2",
                         (char *)"GPUORCH_GPU_MILLI=500",
                         (char *)"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=5000M",
                         NULL};
    char *const whole[] = {cvd1, (char *)"GPUORCH_JOB_ID=9", (char *)"GPUORCH_ATTEMPT=1", NULL};
    char *const none[] = {cvd0, NULL};
    struct child q1 = spawn(cat, quarter), q2 = spawn(cat, quarter), m = spawn(cat, mps),
                 w = spawn(cat, whole), o = spawn(cat, none);
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h0 = handle(n, 0), h1 = handle(n, 1);
    /* job 7's quarter of 81559 MiB, held by one of its two processes */
    unsigned long long a = process_mib_of(n, h0, q1.pid), b = process_mib_of(n, h0, q2.pid);
    assert_true((a == 20389 && b == 0) || (a == 0 && b == 20389));
    assert_int_equal(process_mib_of(n, h0, m.pid), 5000);
    assert_int_equal(process_mib_of(n, h0, o.pid), 1024);
    assert_int_equal(process_mib_of(n, h1, w.pid), 40000);
    nvmlMemory_t mem;
    assert_int_equal(n->nvmlDeviceGetMemoryInfo(h0, &mem), NVML_SUCCESS);
    assert_int_equal(mem.used, (20389ull + 5000 + 1024) * MIB);
    assert_int_equal(mem.free, mem.total - mem.used);
    assert_int_equal(n->nvmlDeviceGetMemoryInfo(h1, &mem), NVML_SUCCESS);
    assert_int_equal(mem.used, 40000 * MIB);

    /* Scripted figures win. */
    snprintf(buf, sizeof(buf),
             "{\"gpus\": [{\"uuid\": \"%s\", \"process_memory_mib\": 512}, "
             "{\"uuid\": \"%s\", \"memory_mib\": 40000, \"memory_used_mib\": 100}]}",
             e->uuid[0], e->uuid[1]);
    write_file(e, buf);
    assert_int_equal(process_mib_of(n, h0, q1.pid), 512);
    assert_int_equal(process_mib_of(n, h0, q2.pid), 512);
    assert_int_equal(process_mib_of(n, h0, m.pid), 512);
    assert_int_equal(n->nvmlDeviceGetMemoryInfo(h0, &mem), NVML_SUCCESS);
    assert_int_equal(mem.used, 4 * 512 * MIB);
    assert_int_equal(n->nvmlDeviceGetMemoryInfo(h1, &mem), NVML_SUCCESS);
    assert_int_equal(mem.used, 100 * MIB);
    assert_int_equal(process_mib_of(n, h1, w.pid), 40000); /* its own figure still */
    struct child *all[] = {&q1, &q2, &m, &w, &o};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        stop_child(all[i]);
}

struct reader {
    const struct api *n;
    nvmlDevice_t h;
    int failures; /* cmocka's asserts are not thread-safe: count, check after join */
};

static void *read_utilization(void *arg)
{
    struct reader *r = arg;
    for (int i = 0; i < 2000; i++) {
        nvmlUtilization_t u;
        if (r->n->nvmlDeviceGetUtilizationRates(r->h, &u) != NVML_SUCCESS ||
            (u.gpu != 35 && u.gpu != 77) || u.memory != 10)
            r->failures++;
    }
    return NULL;
}

static void test_concurrent_callers_see_whole_states_while_the_file_changes(void **state)
{
    struct env *e = *state;
    char buf[1024];
    pthread_t t[4];
    struct reader r[4];
    assert_int_equal(e->n.nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h0 = handle(&e->n, 0);
    for (int i = 0; i < 4; i++) {
        r[i] = (struct reader){.n = &e->n, .h = h0};
        assert_int_equal(pthread_create(&t[i], NULL, read_utilization, &r[i]), 0);
    }
    for (unsigned i = 0; i < 100; i++)
        write_file(e, config(e, buf, sizeof(buf), i % 2 ? 77 : 35));
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(r[i].failures, 0);
    }
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_init_and_shutdown_are_reference_counted),
        T(test_every_call_is_uninitialized_outside_a_session),
        T(test_bad_handles_are_invalid_arguments),
        T(test_null_pointers_and_out_of_range_values_are_invalid_arguments),
        T(test_short_buffers_are_insufficient_size),
        T(test_count_handles_and_lookups_follow_the_file),
        T(test_device_figures_come_from_the_file),
        T(test_rewriting_the_file_changes_values_on_the_next_call),
        T(test_a_malformed_rewrite_keeps_the_last_good_state),
        T(test_a_malformed_file_makes_the_first_init_fail),
        T(test_mig_mode_is_not_supported_on_a_gpu_without_mig),
        T(test_nvlink_links_lead_to_the_listed_peers),
        T(test_processes_follow_the_documented_size_protocol),
        T(test_a_child_with_the_gpu_uuid_is_its_process_until_it_exits),
        T(test_the_process_cache_keeps_one_scan),
        T(test_without_a_file_there_are_eight_h100s),
        T(test_concurrent_callers_see_whole_states_while_the_file_changes),
        T(test_unscripted_utilization_follows_the_processes_cpu_time),
        T(test_a_process_on_two_gpus_counts_half_on_each),
        T(test_unscripted_memory_is_what_the_job_asked),
    };
#undef T
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

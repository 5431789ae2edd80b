/* test_fakenvml_mig.c - the fake NVML's MIG calls, loaded as the agent loads
 * the real library (dlopen of $GPUORCH_FAKENVML, dlsym of the versioned
 * names): profile ids that differ from indices, the tables of H100, H200 and
 * A100, versioned structs, placements and their overlaps, GPU and compute
 * instances with the errors NVML documents, MIG device handles and UUIDs,
 * processes on a MIG device holding it in use, MIG mode and its activation,
 * resets, and the state file shared by processes (children that fork and
 * race). The expected profile ids and placements are NVIDIA's published
 * ones (tests/fakenvml/README.md cites them). Files live in a mkdtemp
 * directory removed at the end. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fakenvml/nvml_abi.h"
#include "base/banned.h"

#define MIB (1024ull * 1024ull)

#define NVML_SYMBOLS(X)                                                                            \
    X(nvmlInit_v2)                                                                                 \
    X(nvmlShutdown)                                                                                \
    X(nvmlDeviceGetHandleByIndex_v2)                                                               \
    X(nvmlDeviceGetUUID)                                                                           \
    X(nvmlDeviceGetMemoryInfo)                                                                     \
    X(nvmlDeviceGetComputeRunningProcesses_v3)                                                     \
    X(nvmlDeviceGetMigMode)                                                                        \
    X(nvmlDeviceSetMigMode)                                                                        \
    X(nvmlDeviceGetMaxMigDeviceCount)                                                              \
    X(nvmlDeviceGetGpuInstanceProfileInfo)                                                         \
    X(nvmlDeviceGetGpuInstanceProfileInfoV)                                                        \
    X(nvmlDeviceGetGpuInstancePossiblePlacements_v2)                                               \
    X(nvmlDeviceGetGpuInstanceRemainingCapacity)                                                   \
    X(nvmlDeviceCreateGpuInstance)                                                                 \
    X(nvmlDeviceCreateGpuInstanceWithPlacement)                                                    \
    X(nvmlGpuInstanceDestroy)                                                                      \
    X(nvmlDeviceGetGpuInstances)                                                                   \
    X(nvmlDeviceGetGpuInstanceById)                                                                \
    X(nvmlGpuInstanceGetInfo)                                                                      \
    X(nvmlGpuInstanceGetComputeInstanceProfileInfo)                                                \
    X(nvmlGpuInstanceGetComputeInstanceProfileInfoV)                                               \
    X(nvmlGpuInstanceCreateComputeInstance)                                                        \
    X(nvmlComputeInstanceDestroy)                                                                  \
    X(nvmlGpuInstanceGetComputeInstances)                                                          \
    X(nvmlComputeInstanceGetInfo_v2)                                                               \
    X(nvmlDeviceGetMigDeviceHandleByIndex)                                                         \
    X(nvmlDeviceIsMigDeviceHandle)                                                                 \
    X(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)                                                \
    X(nvmlDeviceGetGpuInstanceId)                                                                  \
    X(nvmlDeviceGetComputeInstanceId)

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

/* GPU 0: an H100 in MIG mode; 1: an A100 80GB, 3: an H200, 4: an A100
 * 40GB, all in MIG mode; 2: an L4 without MIG; 5: an H100 not in MIG mode
 * (index 5, which no other test's children name in CUDA_VISIBLE_DEVICES:
 * the fake counts a process naming the index); 6: an H100 whose mode
 * changes need a reset (a pass-through VM). %s: UUIDs, and the extra
 * fields of GPUs 0 and 5. */
#define CONFIG_FMT                                                                                 \
    "{\"gpus\": [\n"                                                                               \
    " {\"uuid\": \"%s\", \"mig_enabled\": true %s},\n"                                             \
    " {\"uuid\": \"%s\", \"name\": \"NVIDIA A100-SXM4-80GB\", \"memory_mib\": 81920,\n"            \
    "  \"mig_enabled\": true},\n"                                                                  \
    " {\"uuid\": \"%s\", \"name\": \"NVIDIA L4\", \"memory_mib\": 23034, \"mig_capable\": "        \
    "false},\n"                                                                                    \
    " {\"uuid\": \"%s\", \"name\": \"NVIDIA H200\", \"memory_mib\": 143771, \"mig_enabled\": "     \
    "true},\n"                                                                                     \
    " {\"uuid\": \"%s\", \"name\": \"NVIDIA A100-SXM4-40GB\", \"memory_mib\": 40536,\n"            \
    "  \"mig_enabled\": true},\n"                                                                  \
    " {\"uuid\": \"%s\" %s},\n"                                                                    \
    " {\"uuid\": \"%s\", \"mig_reset_required\": true}]}\n"
#define NGPUS 7

struct env {
    void *lib;
    struct api n;
    char dir[64];
    char path[128];  /* FAKENVML_CONFIG */
    char state[160]; /* its .state */
    char uuid[NGPUS][NVML_DEVICE_UUID_BUFFER_SIZE];
};

struct child {
    pid_t pid;
    int stdin_fd;
};

/* Fields added to GPU 0's and GPU 5's objects. */
static void write_config2(const struct env *e, const char *gpu0_extra, const char *gpu5_extra)
{
    char text[2048], tmp[160];
    snprintf(text, sizeof(text), CONFIG_FMT, e->uuid[0], gpu0_extra, e->uuid[1], e->uuid[2],
             e->uuid[3], e->uuid[4], e->uuid[5], gpu5_extra, e->uuid[6]);
    snprintf(tmp, sizeof(tmp), "%s.tmp", e->path);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, e->path), 0);
}

static void write_config(const struct env *e, const char *gpu0_extra)
{
    write_config2(e, gpu0_extra, "");
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
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_fakenvml_mig.XXXXXX");
    if (!mkdtemp(e->dir))
        return -1;
    snprintf(e->path, sizeof(e->path), "%s/gpus.json", e->dir);
    snprintf(e->state, sizeof(e->state), "%s.state", e->path);
    setenv("FAKENVML_CONFIG", e->path, 1);
    unsetenv("FAKENVML_STATE");
    unsetenv("FAKENVML_RESET");
    for (unsigned i = 0; i < NGPUS; i++)
        snprintf(e->uuid[i], sizeof(e->uuid[i]), "GPU-%08x-3160-4000-8000-%012x",
                 (unsigned)getpid(), i);
    *state = e;
    return 0;
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    char p[200];
    unlink(e->path);
    unlink(e->state);
    snprintf(p, sizeof(p), "%s.lock", e->state);
    unlink(p);
    rmdir(e->dir);
    dlclose(e->lib);
    free(e);
    return 0;
}

/* A fresh GPU file, no state file, and the library initialized. */
static int setup(void **state)
{
    struct env *e = *state;
    unlink(e->state);
    unsetenv("FAKENVML_RESET");
    write_config(e, "");
    return e->n.nvmlInit_v2() == NVML_SUCCESS ? 0 : -1;
}

static int teardown(void **state)
{
    struct env *e = *state;
    while (e->n.nvmlShutdown() == NVML_SUCCESS)
        ;
    return 0;
}

static nvmlDevice_t gpu(const struct api *n, unsigned index)
{
    nvmlDevice_t h = NULL;
    assert_int_equal(n->nvmlDeviceGetHandleByIndex_v2(index, &h), NVML_SUCCESS);
    return h;
}

static nvmlGpuInstanceProfileInfo_v2_t profile_v2(const struct api *n, nvmlDevice_t h,
                                                  unsigned index)
{
    nvmlGpuInstanceProfileInfo_v2_t info = {.version = nvmlGpuInstanceProfileInfo_v2};
    assert_int_equal(n->nvmlDeviceGetGpuInstanceProfileInfoV(h, index, &info), NVML_SUCCESS);
    return info;
}

static nvmlGpuInstance_t create_at(const struct api *n, nvmlDevice_t h, unsigned profile_id,
                                   unsigned start, unsigned size)
{
    nvmlGpuInstancePlacement_t pl = {start, size};
    nvmlGpuInstance_t gi = NULL;
    assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(h, profile_id, &pl, &gi),
                     NVML_SUCCESS);
    return gi;
}

static unsigned gi_id(const struct api *n, nvmlGpuInstance_t gi)
{
    nvmlGpuInstanceInfo_t info;
    assert_int_equal(n->nvmlGpuInstanceGetInfo(gi, &info), NVML_SUCCESS);
    return info.id;
}

/* ---- profiles ---- */

/* nvml.h's indices and the ids drivers report for them on A100, H100 and H200. */
static const struct {
    unsigned index, id, slices;
} h100_ids[] = {
    {NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, 1},
    {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, 1},
    {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, 1},
    {NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, 2},
    {NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, 3},
    {NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, 4},
    {NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, 7},
};

static void test_profile_ids_differ_from_their_indices(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    nvmlDevice_t h = gpu(n, 0);
    static const char *const names[] = {"MIG 1g.10gb", "MIG 1g.10gb+me", "MIG 1g.20gb",
                                        "MIG 2g.20gb", "MIG 3g.40gb",    "MIG 4g.40gb",
                                        "MIG 7g.80gb"};
    for (size_t i = 0; i < sizeof(h100_ids) / sizeof(h100_ids[0]); i++) {
        nvmlGpuInstanceProfileInfo_t plain;
        assert_int_equal(n->nvmlDeviceGetGpuInstanceProfileInfo(h, h100_ids[i].index, &plain),
                         NVML_SUCCESS);
        assert_int_equal(plain.id, h100_ids[i].id);
        assert_int_equal(plain.sliceCount, h100_ids[i].slices);
        nvmlGpuInstanceProfileInfo_v2_t v2 = profile_v2(n, h, h100_ids[i].index);
        assert_int_equal(v2.version, nvmlGpuInstanceProfileInfo_v2);
        assert_int_equal(v2.id, h100_ids[i].id);
        assert_int_equal(v2.memorySizeMB, plain.memorySizeMB);
        assert_string_equal(v2.name, names[i]);
    }
    /* Only the 1g, 2g, 3g, 4g, 7g profile indices exist on an H100 ... */
    nvmlGpuInstanceProfileInfo_t info = {.id = 77};
    assert_int_equal(
        n->nvmlDeviceGetGpuInstanceProfileInfo(h, NVML_GPU_INSTANCE_PROFILE_8_SLICE, &info),
        NVML_ERROR_NOT_SUPPORTED);
    assert_int_equal(
        n->nvmlDeviceGetGpuInstanceProfileInfo(h, NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1, &info),
        NVML_ERROR_NOT_SUPPORTED);
    /* ... and an index past nvml.h's are invalid. */
    assert_int_equal(
        n->nvmlDeviceGetGpuInstanceProfileInfo(h, NVML_GPU_INSTANCE_PROFILE_COUNT, &info),
        NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(info.id, 77);
    assert_int_equal(n->nvmlDeviceGetGpuInstanceProfileInfo(h, 0, NULL),
                     NVML_ERROR_INVALID_ARGUMENT);
}

static void test_versioned_profile_info_checks_the_version(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    nvmlDevice_t h = gpu(n, 0);
    nvmlGpuInstanceProfileInfo_v3_t v3 = {.version = nvmlGpuInstanceProfileInfo_v3,
                                          .capabilities = 99};
    assert_int_equal(
        n->nvmlDeviceGetGpuInstanceProfileInfoV(h, NVML_GPU_INSTANCE_PROFILE_3_SLICE,
                                                (nvmlGpuInstanceProfileInfo_v2_t *)&v3),
        NVML_SUCCESS);
    assert_int_equal(v3.version, nvmlGpuInstanceProfileInfo_v3);
    assert_int_equal(v3.id, 9);
    assert_int_equal(v3.sliceCount, 3); /* at v3's offset, where v2 has isP2pSupported */
    assert_string_equal(v3.name, "MIG 3g.40gb");
    assert_int_equal(v3.capabilities, 0);
    nvmlGpuInstanceProfileInfo_v2_t bad = {.version = 0x01000098u, .id = 77};
    assert_int_equal(n->nvmlDeviceGetGpuInstanceProfileInfoV(h, 0, &bad),
                     NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    assert_int_equal(bad.id, 77);
    bad.version = nvmlGpuInstanceProfileInfo_v2 + 1; /* right version, wrong size */
    assert_int_equal(n->nvmlDeviceGetGpuInstanceProfileInfoV(h, 0, &bad),
                     NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
}

static void test_each_gpu_model_has_its_table(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    static const struct {
        unsigned gpu;
        const char *names[7]; /* in h100_ids' order */
    } cases[] = {
        {3,
         {"MIG 1g.18gb", "MIG 1g.18gb+me", "MIG 1g.35gb", "MIG 2g.35gb", "MIG 3g.71gb",
          "MIG 4g.71gb", "MIG 7g.141gb"}},
        {4,
         {"MIG 1g.5gb", "MIG 1g.5gb+me", "MIG 1g.10gb", "MIG 2g.10gb", "MIG 3g.20gb", "MIG 4g.20gb",
          "MIG 7g.40gb"}},
        {1,
         {"MIG 1g.10gb", "MIG 1g.10gb+me", "MIG 1g.20gb", "MIG 2g.20gb", "MIG 3g.40gb",
          "MIG 4g.40gb", "MIG 7g.80gb"}},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        nvmlDevice_t h = gpu(n, cases[c].gpu);
        for (size_t i = 0; i < 7; i++) {
            nvmlGpuInstanceProfileInfo_v2_t v2 = profile_v2(n, h, h100_ids[i].index);
            assert_int_equal(v2.id, h100_ids[i].id);
            assert_string_equal(v2.name, cases[c].names[i]);
        }
    }
    /* Memory grows with the memory slices: 1g < 1g.2x = 2g < 3g = 4g < 7g. */
    nvmlDevice_t h = gpu(n, 3);
    unsigned long long m1 = profile_v2(n, h, 0).memorySizeMB, m2 = profile_v2(n, h, 9).memorySizeMB,
                       m3 = profile_v2(n, h, 2).memorySizeMB, m7 = profile_v2(n, h, 4).memorySizeMB;
    assert_true(m1 < m2 && m2 == profile_v2(n, h, 1).memorySizeMB && m2 < m3);
    assert_true(m3 == profile_v2(n, h, 3).memorySizeMB && m3 < m7 && m7 <= 143771);
}

static void test_mig_calls_need_mig_mode(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    nvmlDevice_t off = gpu(n, 5), l4 = gpu(n, 2);
    nvmlGpuInstanceProfileInfo_t info;
    nvmlGpuInstance_t gi = NULL;
    unsigned count = 5, cur, pend;
    assert_int_equal(n->nvmlDeviceGetGpuInstanceProfileInfo(off, 0, &info),
                     NVML_ERROR_NOT_SUPPORTED);
    assert_int_equal(n->nvmlDeviceCreateGpuInstance(off, 19, &gi), NVML_ERROR_NOT_SUPPORTED);
    assert_int_equal(n->nvmlDeviceGetMaxMigDeviceCount(off, &count), NVML_SUCCESS);
    assert_int_equal(count, 0);
    nvmlDevice_t mig = NULL;
    assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(off, 0, &mig),
                     NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(n->nvmlDeviceGetMigMode(off, &cur, &pend), NVML_SUCCESS);
    assert_int_equal(cur, NVML_DEVICE_MIG_DISABLE);
    assert_int_equal(n->nvmlDeviceGetMigMode(l4, &cur, &pend), NVML_ERROR_NOT_SUPPORTED);
    nvmlReturn_t status;
    assert_int_equal(n->nvmlDeviceSetMigMode(l4, 1, &status), NVML_ERROR_NOT_SUPPORTED);
    assert_int_equal(n->nvmlDeviceGetGpuInstanceProfileInfo(l4, 0, &info),
                     NVML_ERROR_NOT_SUPPORTED);
    assert_null(gi);
}

/* ---- placements and GPU instances ---- */

static void test_possible_placements_follow_the_table(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    nvmlDevice_t h = gpu(n, 0);
    static const struct {
        unsigned id, n, size, starts[7];
    } want[] = {
        {19, 7, 1, {0, 1, 2, 3, 4, 5, 6}},
        {20, 7, 1, {0, 1, 2, 3, 4, 5, 6}},
        {15, 4, 2, {0, 2, 4, 6}},
        {14, 3, 2, {0, 2, 4}},
        {9, 2, 4, {0, 4}},
        {5, 1, 4, {0}},
        {0, 1, 8, {0}},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        unsigned count = 0;
        assert_int_equal(
            n->nvmlDeviceGetGpuInstancePossiblePlacements_v2(h, want[i].id, NULL, &count),
            NVML_SUCCESS);
        assert_int_equal(count, want[i].n);
        nvmlGpuInstancePlacement_t pl[8];
        count = 8;
        assert_int_equal(
            n->nvmlDeviceGetGpuInstancePossiblePlacements_v2(h, want[i].id, pl, &count),
            NVML_SUCCESS);
        assert_int_equal(count, want[i].n);
        for (unsigned k = 0; k < count; k++) {
            assert_int_equal(pl[k].start, want[i].starts[k]);
            assert_int_equal(pl[k].size, want[i].size);
        }
    }
    nvmlGpuInstancePlacement_t pl[1];
    unsigned count = 1;
    assert_int_equal(n->nvmlDeviceGetGpuInstancePossiblePlacements_v2(h, 9, pl, &count),
                     NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(count, 2);
    /* An id that no profile has (an index is not an id: index 2 is 3g, id 2 is nothing). */
    assert_int_equal(n->nvmlDeviceGetGpuInstancePossiblePlacements_v2(h, 2, NULL, &count),
                     NVML_ERROR_NOT_SUPPORTED);
    assert_int_equal(n->nvmlDeviceGetGpuInstancePossiblePlacements_v2(h, 9, NULL, NULL),
                     NVML_ERROR_INVALID_ARGUMENT);
}

static void test_overlapping_placements_are_insufficient_resources(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    nvmlDevice_t h = gpu(n, 0);
    nvmlGpuInstance_t g3 = create_at(n, h, 9, 4, 4);
    nvmlGpuInstanceInfo_t info;
    assert_int_equal(n->nvmlGpuInstanceGetInfo(g3, &info), NVML_SUCCESS);
    assert_ptr_equal(info.device, h);
    assert_int_equal(info.profileId, 9);
    assert_int_equal(info.placement.start, 4);
    assert_int_equal(info.placement.size, 4);
    assert_int_equal(info.id, 2); /* the second half of the slices */
    nvmlGpuInstance_t gi = NULL;
    nvmlGpuInstancePlacement_t pl = {4, 1};
    assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(h, 19, &pl, &gi),
                     NVML_ERROR_INSUFFICIENT_RESOURCES);
    pl = (nvmlGpuInstancePlacement_t){0, 8};
    assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(h, 0, &pl, &gi),
                     NVML_ERROR_INSUFFICIENT_RESOURCES);
    /* Not a placement of the profile: 3g starts at 0 or 4 and spans 4 slices. */
    pl = (nvmlGpuInstancePlacement_t){2, 4};
    assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(h, 9, &pl, &gi),
                     NVML_ERROR_INVALID_ARGUMENT);
    pl = (nvmlGpuInstancePlacement_t){0, 3};
    assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(h, 9, &pl, &gi),
                     NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(n->nvmlDeviceCreateGpuInstanceWithPlacement(h, 9, NULL, &gi),
                     NVML_ERROR_INVALID_ARGUMENT);
    assert_null(gi);
    /* The first half takes a 4g, and then nothing fits. */
    nvmlGpuInstance_t g4 = create_at(n, h, 5, 0, 4);
    assert_int_equal(gi_id(n, g4), 1);
    unsigned left = 9;
    for (size_t i = 0; i < sizeof(h100_ids) / sizeof(h100_ids[0]); i++) {
        assert_int_equal(n->nvmlDeviceGetGpuInstanceRemainingCapacity(h, h100_ids[i].id, &left),
                         NVML_SUCCESS);
        assert_int_equal(left, 0);
    }
    assert_int_equal(n->nvmlDeviceCreateGpuInstance(h, 19, &gi), NVML_ERROR_INSUFFICIENT_RESOURCES);
    assert_int_equal(n->nvmlGpuInstanceDestroy(g4), NVML_SUCCESS);
    assert_int_equal(n->nvmlGpuInstanceGetInfo(g4, &info), NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(n->nvmlGpuInstanceDestroy(g4), NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(n->nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19, &left), NVML_SUCCESS);
    assert_int_equal(left, 4);
}

static void test_instances_fill_free_slots_up_to_the_profiles_count(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    nvmlDevice_t h = gpu(n, 0);
    for (unsigned k = 0; k < 7; k++) {
        unsigned left = 0;
        assert_int_equal(n->nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19, &left), NVML_SUCCESS);
        assert_int_equal(left, 7 - k);
        nvmlGpuInstance_t gi = NULL;
        assert_int_equal(n->nvmlDeviceCreateGpuInstance(h, 19, &gi), NVML_SUCCESS);
        nvmlGpuInstanceInfo_t info;
        assert_int_equal(n->nvmlGpuInstanceGetInfo(gi, &info), NVML_SUCCESS);
        assert_int_equal(info.placement.start, k);
        assert_int_equal(info.id, 7 + k); /* an eighth of the slices: ids 7 to 14 */
    }
    nvmlGpuInstance_t gi = NULL;
    assert_int_equal(n->nvmlDeviceCreateGpuInstance(h, 19, &gi), NVML_ERROR_INSUFFICIENT_RESOURCES);
    nvmlGpuInstance_t list[7];
    unsigned count = 0;
    assert_int_equal(n->nvmlDeviceGetGpuInstances(h, 19, list, &count), NVML_SUCCESS);
    assert_int_equal(count, 7);
    assert_int_equal(n->nvmlDeviceGetGpuInstances(h, 9, list, &count), NVML_SUCCESS);
    assert_int_equal(count, 0);
    assert_int_equal(n->nvmlDeviceGetGpuInstanceById(h, 10, &gi), NVML_SUCCESS);
    assert_int_equal(gi_id(n, gi), 10);
    assert_int_equal(n->nvmlDeviceGetGpuInstanceById(h, 0, &gi), NVML_ERROR_NOT_FOUND);
    /* The media-extension profile allows one instance, 1g.20gb four. */
    nvmlDevice_t h200 = gpu(n, 3);
    create_at(n, h200, 20, 6, 1);
    assert_int_equal(n->nvmlDeviceCreateGpuInstance(h200, 20, &gi),
                     NVML_ERROR_INSUFFICIENT_RESOURCES);
    unsigned left = 0;
    assert_int_equal(n->nvmlDeviceGetGpuInstanceRemainingCapacity(h200, 15, &left), NVML_SUCCESS);
    assert_int_equal(left, 3); /* slots 0-1, 2-3, 4-5; 6-7 holds the 1g+me */
}

/* ---- compute instances and MIG devices ---- */

static void test_compute_instances_make_mig_devices(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    nvmlDevice_t h = gpu(n, 0);
    nvmlGpuInstance_t gi = create_at(n, h, 14, 2, 2); /* 2g.20gb, id 4 */
    nvmlComputeInstanceProfileInfo_t cp;
    assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceProfileInfo(
                         gi, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
                         NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &cp),
                     NVML_SUCCESS);
    assert_int_equal(cp.sliceCount, 2);
    assert_int_equal(cp.instanceCount, 1);
    assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceProfileInfo(
                         gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, 0, &cp),
                     NVML_ERROR_NOT_SUPPORTED);
    assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 1, 1, &cp),
                     NVML_ERROR_INVALID_ARGUMENT);
    nvmlComputeInstanceProfileInfo_v2_t cv = {.version = nvmlComputeInstanceProfileInfo_v2};
    assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, 0, 0, &cv), NVML_SUCCESS);
    assert_int_equal(cv.sliceCount, 1);
    assert_int_equal(cv.instanceCount, 2);
    assert_string_equal(cv.name, "MIG 1c.2g.20gb");
    nvmlComputeInstanceProfileInfo_v3_t cv3 = {.version = nvmlComputeInstanceProfileInfo_v3,
                                               .capabilities = 7};
    assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceProfileInfoV(
                         gi, 1, 0, (nvmlComputeInstanceProfileInfo_v2_t *)&cv3),
                     NVML_SUCCESS);
    assert_string_equal(cv3.name, "MIG 2g.20gb"); /* the whole GPU instance */
    assert_int_equal(cv3.capabilities, 0);
    cv.version = nvmlComputeInstanceProfileInfo_v3 - 4; /* v3's version with v2's size */
    assert_int_equal(n->nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, 0, 0, &cv),
                     NVML_ERROR_ARGUMENT_VERSION_MISMATCH);

    /* No compute instance yet: no MIG device. */
    nvmlDevice_t mig = NULL;
    assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(h, 0, &mig), NVML_ERROR_NOT_FOUND);
    nvmlComputeInstance_t ci = NULL;
    assert_int_equal(
        n->nvmlGpuInstanceCreateComputeInstance(gi, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, &ci),
        NVML_SUCCESS);
    nvmlComputeInstance_t again = NULL;
    assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(gi, 0, &again),
                     NVML_ERROR_INSUFFICIENT_RESOURCES);
    nvmlComputeInstanceInfo_t cinfo;
    assert_int_equal(n->nvmlComputeInstanceGetInfo_v2(ci, &cinfo), NVML_SUCCESS);
    assert_ptr_equal(cinfo.device, h);
    assert_ptr_equal(cinfo.gpuInstance, gi);
    assert_int_equal(cinfo.id, 0);
    assert_int_equal(cinfo.placement.size, 2);
    nvmlComputeInstance_t cis[2];
    unsigned count = 0;
    assert_int_equal(n->nvmlGpuInstanceGetComputeInstances(gi, 1, cis, &count), NVML_SUCCESS);
    assert_int_equal(count, 1);
    assert_ptr_equal(cis[0], ci);

    unsigned max = 0;
    assert_int_equal(n->nvmlDeviceGetMaxMigDeviceCount(h, &max), NVML_SUCCESS);
    assert_int_equal(max, 7);
    assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(h, 0, &mig), NVML_SUCCESS);
    nvmlDevice_t none = NULL;
    assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(h, 1, &none), NVML_ERROR_NOT_FOUND);
    assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(h, 7, &none),
                     NVML_ERROR_INVALID_ARGUMENT);
    assert_null(none);
    unsigned is = 9, id = 99;
    assert_int_equal(n->nvmlDeviceIsMigDeviceHandle(mig, &is), NVML_SUCCESS);
    assert_int_equal(is, 1);
    assert_int_equal(n->nvmlDeviceIsMigDeviceHandle(h, &is), NVML_SUCCESS);
    assert_int_equal(is, 0);
    nvmlDevice_t parent = NULL;
    assert_int_equal(n->nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig, &parent), NVML_SUCCESS);
    assert_ptr_equal(parent, h);
    assert_int_equal(n->nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h, &parent),
                     NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(n->nvmlDeviceGetGpuInstanceId(mig, &id), NVML_SUCCESS);
    assert_int_equal(id, 4);
    assert_int_equal(n->nvmlDeviceGetComputeInstanceId(mig, &id), NVML_SUCCESS);
    assert_int_equal(id, 0);
    assert_int_equal(n->nvmlDeviceGetGpuInstanceId(h, &id), NVML_ERROR_NOT_SUPPORTED);

    /* The MIG device's UUID is its own, in the form CUDA_VISIBLE_DEVICES takes. */
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], gpu_uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    assert_int_equal(n->nvmlDeviceGetUUID(mig, uuid, sizeof(uuid)), NVML_SUCCESS);
    assert_int_equal(n->nvmlDeviceGetUUID(h, gpu_uuid, sizeof(gpu_uuid)), NVML_SUCCESS);
    assert_int_equal(strlen(uuid), 40);
    assert_memory_equal(uuid, "MIG-", 4);
    assert_true(uuid[12] == '-' && uuid[17] == '-' && uuid[22] == '-' && uuid[27] == '-');
    assert_string_not_equal(uuid + 4, gpu_uuid + 4);
    nvmlMemory_t mem;
    assert_int_equal(n->nvmlDeviceGetMemoryInfo(mig, &mem), NVML_SUCCESS);
    assert_int_equal(mem.total,
                     profile_v2(n, h, NVML_GPU_INSTANCE_PROFILE_2_SLICE).memorySizeMB * MIB);

    /* A GPU instance with a compute instance is in use; its compute instance first. */
    assert_int_equal(n->nvmlGpuInstanceDestroy(gi), NVML_ERROR_IN_USE);
    assert_int_equal(n->nvmlComputeInstanceDestroy(ci), NVML_SUCCESS);
    assert_int_equal(n->nvmlComputeInstanceGetInfo_v2(ci, &cinfo), NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(n->nvmlDeviceGetUUID(mig, uuid, sizeof(uuid)), NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(h, 0, &none), NVML_ERROR_NOT_FOUND);
    assert_int_equal(n->nvmlGpuInstanceDestroy(gi), NVML_SUCCESS);
}

/* Starts /bin/cat with CUDA_VISIBLE_DEVICES=cvd; returns once it has exec'd. */
static struct child spawn_child(const char *cvd)
{
    int in[2], sync[2];
    char var[128];
    snprintf(var, sizeof(var), "CUDA_VISIBLE_DEVICES=%s", cvd);
    char *const argv[] = {(char *)"cat", NULL};
    char *const envp[] = {var, NULL};
    assert_int_equal(pipe2(in, O_CLOEXEC), 0);
    assert_int_equal(pipe2(sync, O_CLOEXEC), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (dup2(in[0], STDIN_FILENO) >= 0)
            execve("/bin/cat", argv, envp);
        _exit(127);
    }
    close(in[0]);
    close(sync[1]);
    char c;
    ssize_t got;
    while ((got = read(sync[0], &c, 1)) < 0 && errno == EINTR)
        ;
    close(sync[0]);
    assert_int_equal(got, 0);
    return (struct child){.pid = pid, .stdin_fd = in[1]};
}

static void stop_child(struct child *c)
{
    int status;
    close(c->stdin_fd);
    assert_int_equal(waitpid(c->pid, &status, 0), c->pid);
}

/* The entry of pid in the device's process list, or false. */
static bool find_process(const struct api *n, nvmlDevice_t h, pid_t pid, nvmlProcessInfo_t *ret)
{
    nvmlProcessInfo_t infos[64];
    unsigned count = 64;
    assert_int_equal(n->nvmlDeviceGetComputeRunningProcesses_v3(h, &count, infos), NVML_SUCCESS);
    for (unsigned i = 0; i < count; i++)
        if (infos[i].pid == (unsigned)pid) {
            *ret = infos[i];
            return true;
        }
    return false;
}

static void test_a_process_on_a_mig_device_holds_it_in_use(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    nvmlDevice_t h = gpu(n, 0);
    nvmlGpuInstance_t gi = create_at(n, h, 9, 0, 4); /* 3g, id 1 */
    nvmlComputeInstance_t ci = NULL;
    assert_int_equal(n->nvmlGpuInstanceCreateComputeInstance(gi, 2, &ci), NVML_SUCCESS);
    nvmlDevice_t mig = NULL;
    assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(h, 0, &mig), NVML_SUCCESS);
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    assert_int_equal(n->nvmlDeviceGetUUID(mig, uuid, sizeof(uuid)), NVML_SUCCESS);
    nvmlProcessInfo_t p;
    struct child c = spawn_child(uuid);
    assert_true(find_process(n, mig, c.pid, &p));
    assert_int_equal(p.gpuInstanceId, 1);
    assert_int_equal(p.computeInstanceId, 0);
    assert_true(find_process(n, h, c.pid, &p)); /* the parent GPU lists it too */
    assert_int_equal(p.gpuInstanceId, 1);
    nvmlMemory_t mem;
    assert_int_equal(n->nvmlDeviceGetMemoryInfo(mig, &mem), NVML_SUCCESS);
    assert_int_equal(mem.used, 1024 * MIB); /* process_memory_mib's default */
    assert_int_equal(n->nvmlComputeInstanceDestroy(ci), NVML_ERROR_IN_USE);
    nvmlReturn_t status;
    assert_int_equal(n->nvmlDeviceSetMigMode(h, 0, &status), NVML_SUCCESS);
    assert_int_equal(status, NVML_ERROR_IN_USE);
    stop_child(&c);
    assert_false(find_process(n, mig, c.pid, &p));
    assert_int_equal(n->nvmlComputeInstanceDestroy(ci), NVML_SUCCESS);
    assert_int_equal(n->nvmlGpuInstanceDestroy(gi), NVML_SUCCESS);
}

/* ---- mode, reset and the state file ---- */

static void check_mode(const struct api *n, nvmlDevice_t h, unsigned want_current,
                       unsigned want_pending, int line)
{
    unsigned cur = 9, pend = 9;
    assert_int_equal(n->nvmlDeviceGetMigMode(h, &cur, &pend), NVML_SUCCESS);
    if (cur != want_current || pend != want_pending)
        print_error("line %d: MIG mode %u pending %u, want %u pending %u\n", line, cur, pend,
                    want_current, want_pending);
    assert_int_equal(cur, want_current);
    assert_int_equal(pend, want_pending);
}

#define mode(n, h, cur, pend) check_mode(n, h, cur, pend, __LINE__)

static void test_mig_mode_changes_on_an_idle_gpu_and_waits_for_a_reset_on_a_busy_one(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    nvmlDevice_t h = gpu(n, 5);
    nvmlReturn_t status = NVML_ERROR_UNKNOWN;
    assert_int_equal(n->nvmlDeviceSetMigMode(h, 2, &status), NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(n->nvmlDeviceSetMigMode(h, 1, NULL), NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(n->nvmlDeviceSetMigMode(h, 1, &status), NVML_SUCCESS);
    assert_int_equal(status, NVML_SUCCESS);
    mode(n, h, 1, 1);
    assert_int_equal(n->nvmlDeviceSetMigMode(h, 0, &status), NVML_SUCCESS);
    assert_int_equal(status, NVML_SUCCESS);
    mode(n, h, 0, 0);
    /* A process on the GPU: the change stays pending, also once it ended. */
    struct child c = spawn_child(e->uuid[5]);
    assert_int_equal(n->nvmlDeviceSetMigMode(h, 1, &status), NVML_SUCCESS);
    assert_int_equal(status, NVML_ERROR_IN_USE);
    mode(n, h, 0, 1);
    stop_child(&c);
    mode(n, h, 0, 1);
    /* A reset (FAKENVML_RESET at the next first nvmlInit) makes it current. */
    while (n->nvmlShutdown() == NVML_SUCCESS)
        ;
    setenv("FAKENVML_RESET", "5", 1);
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    unsetenv("FAKENVML_RESET");
    h = gpu(n, 5);
    mode(n, h, 1, 1);
    /* Where the platform cannot reset (a pass-through VM), always pending. */
    nvmlDevice_t vm = gpu(n, 6);
    assert_int_equal(n->nvmlDeviceSetMigMode(vm, 1, &status), NVML_SUCCESS);
    assert_int_equal(status, NVML_ERROR_RESET_REQUIRED);
    mode(n, vm, 0, 1);
    /* Disabling while instances exist waits too. */
    create_at(n, h, 0, 0, 8);
    assert_int_equal(n->nvmlDeviceSetMigMode(h, 0, &status), NVML_SUCCESS);
    assert_int_equal(status, NVML_ERROR_IN_USE);
    mode(n, h, 1, 0);
}

static void test_state_survives_the_process_and_is_shared_by_processes(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    nvmlDevice_t h = gpu(n, 0);
    nvmlGpuInstance_t gi = create_at(n, h, 9, 4, 4);
    assert_int_equal(access(e->state, R_OK), 0);
    while (n->nvmlShutdown() == NVML_SUCCESS)
        ;
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    h = gpu(n, 0);
    nvmlGpuInstance_t again = NULL;
    assert_int_equal(n->nvmlDeviceGetGpuInstanceById(h, 2, &again), NVML_SUCCESS);
    assert_ptr_equal(again, gi);
    assert_int_equal(n->nvmlGpuInstanceDestroy(again), NVML_SUCCESS);
    /* Four processes race to fill the GPU with 1g instances: the flock keeps
     * their read-modify-writes whole, so exactly seven are made. */
    pid_t kids[4];
    for (int k = 0; k < 4; k++) {
        kids[k] = fork();
        assert_true(kids[k] >= 0);
        if (kids[k] == 0) {
            unsigned made = 0;
            nvmlGpuInstance_t g;
            while (n->nvmlDeviceCreateGpuInstance(h, 19, &g) == NVML_SUCCESS)
                made++;
            _exit((int)made);
        }
    }
    unsigned total = 0;
    for (int k = 0; k < 4; k++) {
        int status;
        assert_int_equal(waitpid(kids[k], &status, 0), kids[k]);
        assert_true(WIFEXITED(status));
        total += (unsigned)WEXITSTATUS(status);
    }
    assert_int_equal(total, 7);
    nvmlGpuInstance_t list[7];
    unsigned count = 0;
    assert_int_equal(n->nvmlDeviceGetGpuInstances(h, 19, list, &count), NVML_SUCCESS);
    assert_int_equal(count, 7);
}

static void test_the_gpu_file_seeds_instances_and_a_change_seeds_again(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    write_config(e, ", \"mig_instances\": [{\"profile_id\": 9, \"start\": 4}, "
                    "{\"profile_id\": 14, \"start\": 0}]");
    nvmlDevice_t h = gpu(n, 0), mig;
    unsigned ids[2][2], k = 0;
    for (; k < 3 && n->nvmlDeviceGetMigDeviceHandleByIndex(h, k, &mig) == NVML_SUCCESS; k++) {
        assert_int_equal(n->nvmlDeviceGetGpuInstanceId(mig, &ids[k][0]), NVML_SUCCESS);
        assert_int_equal(n->nvmlDeviceGetComputeInstanceId(mig, &ids[k][1]), NVML_SUCCESS);
    }
    assert_int_equal(k, 2);
    assert_int_equal(ids[0][0], 2); /* 3g at slot 4 */
    assert_int_equal(ids[1][0], 3); /* 2g at slot 0 */
    assert_int_equal(ids[0][1], 0);
    /* A change made through NVML is kept while the GPU file stays as it is ... */
    nvmlGpuInstance_t g1 = create_at(n, h, 19, 2, 1);
    assert_int_equal(gi_id(n, g1), 9);
    /* ... and a rewrite of the GPU's MIG fields starts it over. */
    write_config(e, ", \"mig_instances\": []");
    assert_int_equal(n->nvmlDeviceGetMigDeviceHandleByIndex(h, 0, &mig), NVML_ERROR_NOT_FOUND);
    nvmlGpuInstance_t gone;
    assert_int_equal(n->nvmlDeviceGetGpuInstanceById(h, 9, &gone), NVML_ERROR_NOT_FOUND);
}

static void test_bad_mig_fields_in_the_gpu_file_fail_the_first_init(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    while (n->nvmlShutdown() == NVML_SUCCESS)
        ;
    static const char *const bad[] = {
        ", \"mig_instances\": [{\"profile_id\": 9, \"start\": 0}, {\"profile_id\": 5, "
        "\"start\": 0}]",                                           /* overlap */
        ", \"mig_instances\": [{\"profile_id\": 4, \"start\": 0}]", /* an index, not an id */
        ", \"mig_instances\": [{\"profile_id\": 9, \"start\": 2}]", /* not a 3g placement */
        ", \"mig_instances\": [{\"profile_id\": 9}]",               /* no start */
        ", \"mig_table\": \"B200-180GB\"",                          /* no such table */
        ", \"mig_table\": 7",                                       /* not a string */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_config(e, bad[i]);
        assert_int_equal(n->nvmlInit_v2(), NVML_ERROR_UNKNOWN);
    }
    /* Instances on a GPU whose MIG mode is off. */
    write_config2(e, "", ", \"mig_instances\": [{\"profile_id\": 0, \"start\": 0}]");
    assert_int_equal(n->nvmlInit_v2(), NVML_ERROR_UNKNOWN);
    write_config(e, ", \"mig_table\": \"A100-40GB\"");
    assert_int_equal(n->nvmlInit_v2(), NVML_SUCCESS);
    assert_string_equal(profile_v2(n, gpu(n, 0), 4).name, "MIG 7g.40gb");
}

static void test_bad_instance_handles_are_invalid_arguments(void **state)
{
    struct env *e = *state;
    const struct api *n = &e->n;
    nvmlGpuInstanceInfo_t info;
    nvmlComputeInstanceInfo_t cinfo;
    int junk[4];
    assert_int_equal(n->nvmlGpuInstanceGetInfo((nvmlGpuInstance_t)(void *)junk, &info),
                     NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(n->nvmlComputeInstanceGetInfo_v2((nvmlComputeInstance_t)(void *)junk, &cinfo),
                     NVML_ERROR_INVALID_ARGUMENT);
    assert_int_equal(n->nvmlGpuInstanceDestroy(NULL), NVML_ERROR_INVALID_ARGUMENT);
    unsigned is;
    assert_int_equal(n->nvmlDeviceIsMigDeviceHandle((nvmlDevice_t)(void *)junk, &is),
                     NVML_ERROR_INVALID_ARGUMENT);
    nvmlGpuInstance_t gi = create_at(n, gpu(n, 0), 0, 0, 8);
    assert_int_equal(n->nvmlGpuInstanceGetInfo(gi, NULL), NVML_ERROR_INVALID_ARGUMENT);
    while (n->nvmlShutdown() == NVML_SUCCESS)
        ;
    assert_int_equal(n->nvmlGpuInstanceGetInfo(gi, &info), NVML_ERROR_UNINITIALIZED);
    assert_int_equal(n->nvmlGpuInstanceDestroy(gi), NVML_ERROR_UNINITIALIZED);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_profile_ids_differ_from_their_indices),
        T(test_versioned_profile_info_checks_the_version),
        T(test_each_gpu_model_has_its_table),
        T(test_mig_calls_need_mig_mode),
        T(test_possible_placements_follow_the_table),
        T(test_overlapping_placements_are_insufficient_resources),
        T(test_instances_fill_free_slots_up_to_the_profiles_count),
        T(test_compute_instances_make_mig_devices),
        T(test_a_process_on_a_mig_device_holds_it_in_use),
        T(test_mig_mode_changes_on_an_idle_gpu_and_waits_for_a_reset_on_a_busy_one),
        T(test_state_survives_the_process_and_is_shared_by_processes),
        T(test_the_gpu_file_seeds_instances_and_a_change_seeds_again),
        T(test_bad_mig_fields_in_the_gpu_file_fail_the_first_init),
        T(test_bad_instance_handles_are_invalid_arguments),
    };
#undef T
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

/*
 * fakenvml_mig.c - the fake NVML's MIG calls (nvml_abi.h, README.md "MIG"):
 * mode, profiles, placements, GPU and compute instances, MIG device handles.
 *
 * Decisions:
 *  - Every call runs under the fake's one lock and reads the MIG state
 *    afresh (mig.h: the state file, another process may have changed it).
 *    A call that changes it holds the state file's exclusive flock from the
 *    read to the write.
 *  - Handles are addresses in fixed tables indexed by (GPU, GPU instance id
 *    [, compute instance id]): a handle stays the same for the same
 *    instance, and one whose instance is gone is INVALID_ARGUMENT, as NVML
 *    documents for destroyed instances.
 *  - Without a state path (the built-in GPUs and no FAKENVML_STATE) the
 *    state lives in this process only.
 *  - Checks come in NVML's order: initialized, arguments, versions, support.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakenvml/fake_int.h"
#include "fakenvml/mig.h"
#include "fakenvml/nvml_abi.h"
#include "base/banned.h"

struct nvmlGpuInstance_st {
    unsigned char unused;
};
struct nvmlComputeInstance_st {
    unsigned char unused;
};
/* As aligned as a GPU's struct, since MIG device handles are nvmlDevice_t. */
struct mig_dev_slot {
    unsigned long long unused;
};

static struct {
    char path[PATH_MAX]; /* the state file; "" = in this process only */
    struct mig_gpu gpus[GPUS_MAX];
    char seen[GPUS_MAX][sizeof(((struct mig_seed *)0)->key) + NVML_DEVICE_UUID_BUFFER_SIZE];
    struct nvmlGpuInstance_st gi_slots[GPUS_MAX][MIG_GI_IDS];
    struct nvmlComputeInstance_st ci_slots[GPUS_MAX][MIG_GI_IDS][MIG_MAX_CI];
    struct mig_dev_slot dev_slots[GPUS_MAX][MIG_GI_IDS][MIG_MAX_CI];
} mig;

/* ---- the state ---- */

static void fill_state_gpus(struct mig_state_gpu *sg)
{
    struct gpus_config *c = fake_config();
    for (unsigned i = 0; i < c->ngpus; i++)
        sg[i] = (struct mig_state_gpu){c->gpus[i].uuid, &c->gpus[i].mig, &mig.gpus[i]};
}

/* Brings mig.gpus up to date with the state file, or, in memory, seeds the
 * GPUs whose UUID or seed changed. */
static void load(void)
{
    struct gpus_config *c = fake_config();
    struct mig_state_gpu sg[GPUS_MAX];
    fill_state_gpus(sg);
    bool changed;
    if (mig.path[0]) {
        mig_state_load(mig.path, sg, c->ngpus, &changed);
        return;
    }
    for (unsigned i = 0; i < c->ngpus; i++) {
        char key[sizeof(mig.seen[0])], msg[200];
        snprintf(key, sizeof(key), "%s %s", c->gpus[i].uuid, c->gpus[i].mig.key);
        if (strcmp(key, mig.seen[i]) == 0)
            continue;
        if (mig_seed_apply(&c->gpus[i].mig, c->gpus[i].uuid, &mig.gpus[i], msg, sizeof(msg)))
            mig.gpus[i] = (struct mig_gpu){0};
        memcpy(mig.seen[i], key, sizeof(key));
    }
}

/* Starts a change: the flock, then a fresh read. -1 when it cannot lock. */
static int begin_change(int *ret_fd)
{
    *ret_fd = -1;
    if (mig.path[0] && (*ret_fd = mig_state_lock(mig.path, true)) < 0)
        return -1;
    load();
    return 0;
}

/* Ends a change: writes the state (when `save`) and drops the flock. */
static nvmlReturn_t end_change(int fd, bool save, nvmlReturn_t rc)
{
    struct mig_state_gpu sg[GPUS_MAX];
    fill_state_gpus(sg);
    if (save && mig.path[0] && mig_state_save(mig.path, sg, fake_config()->ngpus) != 0)
        rc = NVML_ERROR_UNKNOWN;
    mig_state_unlock(fd);
    return rc;
}

void fake_mig_init(const char *config_path)
{
    const char *state = getenv("FAKENVML_STATE");
    memset(mig.seen, 0, sizeof(mig.seen));
    mig.path[0] = '\0';
    if (state && *state)
        snprintf(mig.path, sizeof(mig.path), "%s", state);
    else if (config_path && *config_path)
        snprintf(mig.path, sizeof(mig.path), "%s.state", config_path);
    const char *reset = getenv("FAKENVML_RESET");
    if (!reset || !*reset)
        return;
    /* "0,2": those GPUs are reset, as by nvidia-smi -r. */
    int fd;
    if (begin_change(&fd) != 0)
        return;
    struct gpus_config *c = fake_config();
    bool any = false;
    for (const char *p = reset; *p;) {
        char *end;
        unsigned long i = strtoul(p, &end, 10);
        if (end == p || (*end && *end != ',') || i >= c->ngpus) {
            fprintf(stderr, "fakenvml: FAKENVML_RESET: expected GPU indexes below %u, got '%s'\n",
                    c->ngpus, reset);
            break;
        }
        mig_gpu_reset(&mig.gpus[i]);
        any = true;
        p = *end ? end + 1 : end;
    }
    end_change(fd, any, NVML_SUCCESS);
}

/* ---- handles ---- */

static bool in_table(const void *p, const void *base, size_t size)
{
    return (uintptr_t)p >= (uintptr_t)base && (uintptr_t)p < (uintptr_t)base + size;
}

bool fake_mig_is_handle(nvmlDevice_t device)
{
    return in_table(device, mig.dev_slots, sizeof(mig.dev_slots));
}

static nvmlDevice_t dev_handle(unsigned gpu, unsigned gi, unsigned ci)
{
    return (nvmlDevice_t)(void *)&mig.dev_slots[gpu][gi][ci];
}

/* The GPU whose current MIG mode is on, its state and the instance a GPU
 * instance handle names; INVALID_ARGUMENT for anything else. */
static nvmlReturn_t decode_gi(nvmlGpuInstance_t h, unsigned *ret_gpu, struct mig_gi **ret_gi)
{
    if (!in_table(h, mig.gi_slots, sizeof(mig.gi_slots)))
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t k = (size_t)(h - &mig.gi_slots[0][0]);
    unsigned gpu = (unsigned)(k / MIG_GI_IDS), id = (unsigned)(k % MIG_GI_IDS);
    load();
    struct mig_gi *gi = NULL;
    if (gpu >= fake_config()->ngpus || !mig.gpus[gpu].current ||
        !(gi = mig_gi_find(&mig.gpus[gpu], id)))
        return NVML_ERROR_INVALID_ARGUMENT;
    *ret_gpu = gpu;
    *ret_gi = gi;
    return NVML_SUCCESS;
}

static nvmlReturn_t decode_ci(nvmlComputeInstance_t h, unsigned *ret_gpu, struct mig_gi **ret_gi,
                              struct mig_ci **ret_ci)
{
    if (!in_table(h, mig.ci_slots, sizeof(mig.ci_slots)))
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t k = (size_t)(h - &mig.ci_slots[0][0][0]);
    unsigned ci_id = (unsigned)(k % MIG_MAX_CI);
    nvmlReturn_t rc = decode_gi(&mig.gi_slots[0][0] + k / MIG_MAX_CI, ret_gpu, ret_gi);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!(*ret_ci = mig_ci_find(*ret_gi, ci_id)))
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

static struct fake_migdev migdev_of(unsigned gpu, const struct mig_gi *gi, const struct mig_ci *ci)
{
    struct fake_migdev d = {.gpu = gpu, .gi = gi->id, .ci = ci->id, .memory = gi->profile->memory};
    memcpy(d.uuid, ci->uuid, sizeof(d.uuid));
    return d;
}

nvmlReturn_t fake_mig_lookup(nvmlDevice_t device, struct fake_migdev *ret)
{
    if (!fake_mig_is_handle(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t k = (size_t)((struct mig_dev_slot *)(void *)device - &mig.dev_slots[0][0][0]);
    nvmlComputeInstance_t ci_h = &mig.ci_slots[0][0][0] + k;
    unsigned gpu;
    struct mig_gi *gi;
    struct mig_ci *ci;
    nvmlReturn_t rc = decode_ci(ci_h, &gpu, &gi, &ci);
    if (rc == NVML_SUCCESS)
        *ret = migdev_of(gpu, gi, ci);
    return rc;
}

/* GPU gpu's MIG devices in the state as it is in memory. */
static unsigned devices_of(unsigned gpu, struct fake_migdev *ret)
{
    const struct mig_gpu *g = &mig.gpus[gpu];
    unsigned n = 0;
    for (unsigned i = 0; g->current && i < g->ngi; i++)
        for (unsigned c = 0; c < g->gi[i].nci && n < MIG_MAX_DEVICES; c++)
            ret[n++] = migdev_of(gpu, &g->gi[i], &g->gi[i].ci[c]);
    return n;
}

unsigned fake_mig_devices(unsigned gpu, struct fake_migdev *ret)
{
    load();
    return devices_of(gpu, ret);
}

/* ---- checks ---- */

/* fake_lock_gpu, then NOT_SUPPORTED unless the GPU is in MIG mode now. */
static nvmlReturn_t lock_mig_gpu(nvmlDevice_t device, const void *out, unsigned *ret_gpu)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = fake_lock_gpu(device, out, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    load();
    if (!g->mig_capable || !mig.gpus[g->index].current)
        return fake_unlock(NVML_ERROR_NOT_SUPPORTED);
    *ret_gpu = g->index;
    return NVML_SUCCESS;
}

static enum mig_table table_of(unsigned gpu)
{
    return fake_config()->gpus[gpu].mig.table;
}

/* Whether processes run on the GPU itself or on any of its MIG devices:
 * -1 when they cannot be listed. */
static int processes_on(const char *uuid, unsigned index)
{
    unsigned *pids, n;
    if (fake_find_named(uuid, index, &pids, &n) != 0)
        return -1;
    free(pids);
    return n > 0;
}

static int gpu_busy(unsigned gpu)
{
    struct nvmlDevice_st *g = &fake_config()->gpus[gpu];
    int busy = processes_on(g->uuid, g->index);
    struct fake_migdev d[MIG_MAX_DEVICES];
    unsigned n = devices_of(gpu, d); /* within a change: no fresh read */
    for (unsigned i = 0; busy == 0 && i < n; i++)
        busy = processes_on(d[i].uuid, UINT_MAX);
    return busy;
}

/* ---- mode ---- */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = fake_lock_gpu(device, currentMode && pendingMode ? currentMode : NULL, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!g->mig_capable)
        return fake_unlock(NVML_ERROR_NOT_SUPPORTED);
    load();
    *currentMode = mig.gpus[g->index].current ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pendingMode = mig.gpus[g->index].pending ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return fake_unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode,
                                  nvmlReturn_t *activationStatus)
{
    struct nvmlDevice_st *g;
    bool ok = activationStatus && mode <= NVML_DEVICE_MIG_ENABLE;
    nvmlReturn_t rc = fake_lock_gpu(device, ok ? activationStatus : NULL, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!g->mig_capable)
        return fake_unlock(NVML_ERROR_NOT_SUPPORTED);
    int fd;
    if (begin_change(&fd) != 0)
        return fake_unlock(NVML_ERROR_UNKNOWN);
    struct mig_gpu *m = &mig.gpus[g->index];
    m->pending = mode == NVML_DEVICE_MIG_ENABLE;
    nvmlReturn_t status = NVML_SUCCESS;
    if (m->pending != m->current) {
        /* Activation resets the GPU: not while anything uses it. */
        int busy = m->ngi > 0 ? 1 : gpu_busy(g->index);
        if (busy < 0)
            return fake_unlock(end_change(fd, false, NVML_ERROR_MEMORY));
        if (g->mig_reset_required)
            status = NVML_ERROR_RESET_REQUIRED;
        else if (busy)
            status = NVML_ERROR_IN_USE;
        else
            mig_gpu_reset(m);
    }
    rc = end_change(fd, true, NVML_SUCCESS);
    if (rc == NVML_SUCCESS)
        *activationStatus = status;
    return fake_unlock(rc);
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = fake_lock_gpu(device, count, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    load();
    *count = g->mig_capable && mig.gpus[g->index].current ? MIG_MAX_DEVICES : 0;
    return fake_unlock(NVML_SUCCESS);
}

/* ---- GPU instance profiles ---- */

/* The profile of index `profile` on a GPU in MIG mode (lock held on success). */
static nvmlReturn_t lock_profile(nvmlDevice_t device, unsigned profile, const void *out,
                                 const struct mig_profile **ret)
{
    unsigned gpu;
    nvmlReturn_t rc =
        lock_mig_gpu(device, profile < NVML_GPU_INSTANCE_PROFILE_COUNT ? out : NULL, &gpu);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!(*ret = mig_profile_by_index(table_of(gpu), profile)))
        return fake_unlock(NVML_ERROR_NOT_SUPPORTED);
    return NVML_SUCCESS;
}

static void profile_name(const char *prefix, const char *name, char *out)
{
    snprintf(out, NVML_DEVICE_NAME_V2_BUFFER_SIZE, "%s%s", prefix, name);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info)
{
    const struct mig_profile *p;
    nvmlReturn_t rc = lock_profile(device, profile, info, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    *info = (nvmlGpuInstanceProfileInfo_t){.id = p->id,
                                           .sliceCount = p->slices,
                                           .instanceCount = p->instances,
                                           .multiprocessorCount = p->sms,
                                           .copyEngineCount = p->copy_engines,
                                           .decoderCount = p->decoders,
                                           .jpegCount = p->jpegs,
                                           .ofaCount = p->ofas,
                                           .memorySizeMB = p->memory};
    return fake_unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info)
{
    const struct mig_profile *p;
    unsigned gpu;
    nvmlReturn_t rc =
        lock_mig_gpu(device, profile < NVML_GPU_INSTANCE_PROFILE_COUNT ? info : NULL, &gpu);
    if (rc != NVML_SUCCESS)
        return rc;
    unsigned version = info->version;
    if (version != nvmlGpuInstanceProfileInfo_v2 && version != nvmlGpuInstanceProfileInfo_v3)
        return fake_unlock(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (!(p = mig_profile_by_index(table_of(gpu), profile)))
        return fake_unlock(NVML_ERROR_NOT_SUPPORTED);
    if (version == nvmlGpuInstanceProfileInfo_v2) {
        *info = (nvmlGpuInstanceProfileInfo_v2_t){.version = version,
                                                  .id = p->id,
                                                  .sliceCount = p->slices,
                                                  .instanceCount = p->instances,
                                                  .multiprocessorCount = p->sms,
                                                  .copyEngineCount = p->copy_engines,
                                                  .decoderCount = p->decoders,
                                                  .jpegCount = p->jpegs,
                                                  .ofaCount = p->ofas,
                                                  .memorySizeMB = p->memory};
        profile_name("MIG ", p->name, info->name);
        return fake_unlock(NVML_SUCCESS);
    }
    nvmlGpuInstanceProfileInfo_v3_t v3 = {.version = version,
                                          .id = p->id,
                                          .sliceCount = p->slices,
                                          .instanceCount = p->instances,
                                          .multiprocessorCount = p->sms,
                                          .copyEngineCount = p->copy_engines,
                                          .decoderCount = p->decoders,
                                          .jpegCount = p->jpegs,
                                          .ofaCount = p->ofas,
                                          .memorySizeMB = p->memory};
    profile_name("MIG ", p->name, v3.name);
    memcpy(info, &v3, sizeof(v3)); /* the same size: the version says which */
    return fake_unlock(NVML_SUCCESS);
}

/* The profile of id `profile_id` on a GPU in MIG mode. */
static nvmlReturn_t lock_profile_id(nvmlDevice_t device, unsigned profile_id, const void *out,
                                    unsigned *ret_gpu, const struct mig_profile **ret)
{
    nvmlReturn_t rc = lock_mig_gpu(device, out, ret_gpu);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!(*ret = mig_profile_by_id(table_of(*ret_gpu), profile_id)))
        return fake_unlock(NVML_ERROR_NOT_SUPPORTED);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device,
                                                           unsigned int profileId,
                                                           nvmlGpuInstancePlacement_t *placements,
                                                           unsigned int *count)
{
    unsigned gpu;
    const struct mig_profile *p;
    nvmlReturn_t rc = lock_profile_id(device, profileId, count, &gpu, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    if (placements && *count < p->nstarts)
        rc = NVML_ERROR_INSUFFICIENT_SIZE;
    for (unsigned i = 0; placements && rc == NVML_SUCCESS && i < p->nstarts; i++)
        placements[i] = (nvmlGpuInstancePlacement_t){p->starts[i], p->size};
    *count = p->nstarts;
    return fake_unlock(rc);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                       unsigned int *count)
{
    unsigned gpu;
    const struct mig_profile *p;
    nvmlReturn_t rc = lock_profile_id(device, profileId, count, &gpu, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    *count = mig_gi_capacity(&mig.gpus[gpu], p);
    return fake_unlock(NVML_SUCCESS);
}

/* ---- GPU instances ---- */

/* size: the placement's (0 for any); one not the profile's is INVALID_ARGUMENT. */
static nvmlReturn_t create_gi(nvmlDevice_t device, unsigned profile_id, unsigned start,
                              unsigned size, const void *out, nvmlGpuInstance_t *ret)
{
    unsigned gpu;
    const struct mig_profile *p;
    nvmlReturn_t rc = lock_profile_id(device, profile_id, out, &gpu, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    if (size != 0 && size != p->size)
        return fake_unlock(NVML_ERROR_INVALID_ARGUMENT);
    int fd;
    if (begin_change(&fd) != 0)
        return fake_unlock(NVML_ERROR_UNKNOWN);
    struct mig_gi *gi = NULL;
    rc = mig_gi_create(&mig.gpus[gpu], p, start, &gi);
    unsigned id = gi ? gi->id : 0;
    rc = end_change(fd, rc == NVML_SUCCESS, rc);
    if (rc == NVML_SUCCESS)
        *ret = &mig.gi_slots[gpu][id];
    return fake_unlock(rc);
}

nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                                         nvmlGpuInstance_t *gpuInstance)
{
    return create_gi(device, profileId, UINT_MAX, 0, gpuInstance, gpuInstance);
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t *placement,
                                                      nvmlGpuInstance_t *gpuInstance)
{
    bool ok = placement && gpuInstance && placement->start < MIG_SLOTS && placement->size > 0;
    return create_gi(device, profileId, ok ? placement->start : 0, ok ? placement->size : 0,
                     ok ? gpuInstance : NULL, gpuInstance);
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance)
{
    nvmlReturn_t rc = fake_lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    int fd;
    if (begin_change(&fd) != 0)
        return fake_unlock(NVML_ERROR_UNKNOWN);
    unsigned gpu;
    struct mig_gi *gi;
    rc = decode_gi(gpuInstance, &gpu, &gi);
    if (rc == NVML_SUCCESS && gi->nci > 0)
        rc = NVML_ERROR_IN_USE; /* its compute instances first */
    if (rc == NVML_SUCCESS)
        mig_gi_remove(&mig.gpus[gpu], gi);
    return fake_unlock(end_change(fd, rc == NVML_SUCCESS, rc));
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                       nvmlGpuInstance_t *gpuInstances, unsigned int *count)
{
    unsigned gpu;
    const struct mig_profile *p;
    nvmlReturn_t rc =
        lock_profile_id(device, profileId, gpuInstances && count ? count : NULL, &gpu, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    unsigned n = 0;
    for (unsigned i = 0; i < mig.gpus[gpu].ngi; i++)
        if (mig.gpus[gpu].gi[i].profile == p)
            gpuInstances[n++] = &mig.gi_slots[gpu][mig.gpus[gpu].gi[i].id];
    *count = n;
    return fake_unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                          nvmlGpuInstance_t *gpuInstance)
{
    unsigned gpu;
    nvmlReturn_t rc = lock_mig_gpu(device, gpuInstance, &gpu);
    if (rc != NVML_SUCCESS)
        return rc;
    if (id >= MIG_GI_IDS || !mig_gi_find(&mig.gpus[gpu], id))
        return fake_unlock(NVML_ERROR_NOT_FOUND);
    *gpuInstance = &mig.gi_slots[gpu][id];
    return fake_unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
    nvmlReturn_t rc = fake_lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    unsigned gpu;
    struct mig_gi *gi;
    rc = decode_gi(gpuInstance, &gpu, &gi);
    if (rc == NVML_SUCCESS && !info)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *info = (nvmlGpuInstanceInfo_t){.device = &fake_config()->gpus[gpu],
                                        .id = gi->id,
                                        .profileId = gi->profile->id,
                                        .placement = {gi->start, gi->profile->size}};
    return fake_unlock(rc);
}

/* ---- compute instances ---- */

/* The GPU instance of a handle, with the lock held on success. */
static nvmlReturn_t lock_gi(nvmlGpuInstance_t h, const void *out, unsigned *ret_gpu,
                            struct mig_gi **ret_gi)
{
    nvmlReturn_t rc = fake_lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    rc = decode_gi(h, ret_gpu, ret_gi);
    if (rc == NVML_SUCCESS && !out)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    return rc == NVML_SUCCESS ? rc : fake_unlock(rc);
}

struct ci_facts {
    unsigned id, slices, instances, sms;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
};

/* Compute instance profile `profile` of gi; NOT_SUPPORTED when it has none. */
static nvmlReturn_t ci_profile(const struct mig_gi *gi, unsigned profile, struct ci_facts *ret)
{
    unsigned c = mig_ci_slices(gi, profile);
    if (c == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *ret = (struct ci_facts){.id = profile,
                             .slices = c,
                             .instances = gi->profile->slices / c,
                             .sms = gi->profile->sms * c / gi->profile->slices};
    if (c == gi->profile->slices)
        snprintf(ret->name, sizeof(ret->name), "MIG %s", gi->profile->name);
    else
        snprintf(ret->name, sizeof(ret->name), "MIG %uc.%s", c, gi->profile->name);
    return NVML_SUCCESS;
}

static nvmlReturn_t lock_ci_profile(nvmlGpuInstance_t h, unsigned profile, unsigned eng,
                                    const void *out, struct mig_gi **ret_gi, struct ci_facts *ret)
{
    unsigned gpu;
    bool ok = profile < NVML_COMPUTE_INSTANCE_PROFILE_COUNT &&
              eng < NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT;
    nvmlReturn_t rc = lock_gi(h, ok ? out : NULL, &gpu, ret_gi);
    if (rc != NVML_SUCCESS)
        return rc;
    rc = ci_profile(*ret_gi, profile, ret);
    return rc == NVML_SUCCESS ? rc : fake_unlock(rc);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance,
                                                          unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t *info)
{
    struct mig_gi *gi;
    struct ci_facts f;
    nvmlReturn_t rc = lock_ci_profile(gpuInstance, profile, engProfile, info, &gi, &f);
    if (rc != NVML_SUCCESS)
        return rc;
    *info = (nvmlComputeInstanceProfileInfo_t){.id = f.id,
                                               .sliceCount = f.slices,
                                               .instanceCount = f.instances,
                                               .multiprocessorCount = f.sms,
                                               .sharedCopyEngineCount = gi->profile->copy_engines,
                                               .sharedDecoderCount = gi->profile->decoders,
                                               .sharedJpegCount = gi->profile->jpegs,
                                               .sharedOfaCount = gi->profile->ofas};
    return fake_unlock(NVML_SUCCESS);
}

nvmlReturn_t
nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                              unsigned int engProfile,
                                              nvmlComputeInstanceProfileInfo_v2_t *info)
{
    unsigned gpu;
    struct mig_gi *gi;
    bool ok = profile < NVML_COMPUTE_INSTANCE_PROFILE_COUNT &&
              engProfile < NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT;
    nvmlReturn_t rc = lock_gi(gpuInstance, ok ? info : NULL, &gpu, &gi);
    if (rc != NVML_SUCCESS)
        return rc;
    unsigned version = info->version;
    if (version != nvmlComputeInstanceProfileInfo_v2 &&
        version != nvmlComputeInstanceProfileInfo_v3)
        return fake_unlock(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    struct ci_facts f;
    if ((rc = ci_profile(gi, profile, &f)) != NVML_SUCCESS)
        return fake_unlock(rc);
    nvmlComputeInstanceProfileInfo_v3_t v3 = {.version = version,
                                              .id = f.id,
                                              .sliceCount = f.slices,
                                              .instanceCount = f.instances,
                                              .multiprocessorCount = f.sms,
                                              .sharedCopyEngineCount = gi->profile->copy_engines,
                                              .sharedDecoderCount = gi->profile->decoders,
                                              .sharedJpegCount = gi->profile->jpegs,
                                              .sharedOfaCount = gi->profile->ofas};
    memcpy(v3.name, f.name, sizeof(v3.name));
    /* v2 is v3 without the trailing capabilities: write only what the caller has. */
    memcpy(info, &v3, version == nvmlComputeInstanceProfileInfo_v2 ? sizeof(*info) : sizeof(v3));
    return fake_unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance,
                                                  unsigned int profileId,
                                                  nvmlComputeInstance_t *computeInstance)
{
    nvmlReturn_t rc = fake_lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    int fd;
    if (begin_change(&fd) != 0)
        return fake_unlock(NVML_ERROR_UNKNOWN);
    unsigned gpu;
    struct mig_gi *gi;
    struct mig_ci *ci = NULL;
    rc = decode_gi(gpuInstance, &gpu, &gi);
    if (rc == NVML_SUCCESS &&
        (!computeInstance || profileId >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        rc = mig_ci_create(&mig.gpus[gpu], fake_config()->gpus[gpu].uuid, gi, profileId, &ci);
    unsigned gid = rc == NVML_SUCCESS ? gi->id : 0, cid = ci ? ci->id : 0;
    rc = end_change(fd, rc == NVML_SUCCESS, rc);
    if (rc == NVML_SUCCESS)
        *computeInstance = &mig.ci_slots[gpu][gid][cid];
    return fake_unlock(rc);
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance)
{
    nvmlReturn_t rc = fake_lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    int fd;
    if (begin_change(&fd) != 0)
        return fake_unlock(NVML_ERROR_UNKNOWN);
    unsigned gpu;
    struct mig_gi *gi;
    struct mig_ci *ci;
    rc = decode_ci(computeInstance, &gpu, &gi, &ci);
    int busy = rc == NVML_SUCCESS ? processes_on(ci->uuid, UINT_MAX) : 0;
    if (busy < 0)
        rc = NVML_ERROR_MEMORY;
    else if (busy)
        rc = NVML_ERROR_IN_USE;
    if (rc == NVML_SUCCESS)
        mig_ci_remove(gi, ci);
    return fake_unlock(end_change(fd, rc == NVML_SUCCESS, rc));
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance,
                                                unsigned int profileId,
                                                nvmlComputeInstance_t *computeInstances,
                                                unsigned int *count)
{
    unsigned gpu;
    struct mig_gi *gi;
    bool ok = computeInstances && count && profileId < NVML_COMPUTE_INSTANCE_PROFILE_COUNT;
    nvmlReturn_t rc = lock_gi(gpuInstance, ok ? count : NULL, &gpu, &gi);
    if (rc != NVML_SUCCESS)
        return rc;
    if (mig_ci_slices(gi, profileId) == 0)
        return fake_unlock(NVML_ERROR_NOT_SUPPORTED);
    unsigned n = 0;
    for (unsigned i = 0; i < gi->nci; i++)
        if (gi->ci[i].profile == profileId)
            computeInstances[n++] = &mig.ci_slots[gpu][gi->id][gi->ci[i].id];
    *count = n;
    return fake_unlock(NVML_SUCCESS);
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                           nvmlComputeInstanceInfo_t *info)
{
    nvmlReturn_t rc = fake_lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    unsigned gpu;
    struct mig_gi *gi;
    struct mig_ci *ci;
    rc = decode_ci(computeInstance, &gpu, &gi, &ci);
    if (rc == NVML_SUCCESS && !info)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *info = (nvmlComputeInstanceInfo_t){.device = &fake_config()->gpus[gpu],
                                            .gpuInstance = &mig.gi_slots[gpu][gi->id],
                                            .id = ci->id,
                                            .profileId = ci->profile,
                                            .placement = {ci->start, ci->size}};
    return fake_unlock(rc);
}

/* ---- MIG device handles ---- */

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *migDevice)
{
    struct nvmlDevice_st *g;
    nvmlReturn_t rc = fake_lock_gpu(device, migDevice, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!g->mig_capable)
        return fake_unlock(NVML_ERROR_NOT_SUPPORTED);
    struct fake_migdev d[MIG_MAX_DEVICES];
    unsigned n = fake_mig_devices(g->index, d);
    if (index >= (mig.gpus[g->index].current ? MIG_MAX_DEVICES : 0))
        return fake_unlock(NVML_ERROR_INVALID_ARGUMENT);
    if (index >= n)
        return fake_unlock(NVML_ERROR_NOT_FOUND);
    *migDevice = dev_handle(g->index, d[index].gi, d[index].ci);
    return fake_unlock(NVML_SUCCESS);
}

/* A MIG device handle's device, with the lock held on success. */
static nvmlReturn_t lock_migdev(nvmlDevice_t device, const void *out, struct fake_migdev *ret)
{
    nvmlReturn_t rc = fake_lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    rc = out ? fake_mig_lookup(device, ret) : NVML_ERROR_INVALID_ARGUMENT;
    return rc == NVML_SUCCESS ? rc : fake_unlock(rc);
}

/* Whether `device` is a GPU handle (to tell NOT_SUPPORTED from a bad handle). */
static bool is_gpu_handle(nvmlDevice_t device)
{
    struct gpus_config *c = fake_config();
    return in_table(device, c->gpus, c->ngpus * sizeof(c->gpus[0]));
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    nvmlReturn_t rc = fake_lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    struct fake_migdev d;
    if (isMigDevice && is_gpu_handle(device))
        *isMigDevice = 0;
    else if (isMigDevice && fake_mig_lookup(device, &d) == NVML_SUCCESS)
        *isMigDevice = 1;
    else
        rc = NVML_ERROR_INVALID_ARGUMENT;
    return fake_unlock(rc);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                          nvmlDevice_t *device)
{
    struct fake_migdev d;
    nvmlReturn_t rc = lock_migdev(migDevice, device, &d);
    if (rc != NVML_SUCCESS)
        return rc;
    *device = &fake_config()->gpus[d.gpu];
    return fake_unlock(NVML_SUCCESS);
}

static nvmlReturn_t instance_id(nvmlDevice_t device, unsigned *id, bool compute)
{
    nvmlReturn_t rc = fake_lock_ready();
    if (rc != NVML_SUCCESS)
        return rc;
    struct fake_migdev d;
    if (id && is_gpu_handle(device))
        return fake_unlock(NVML_ERROR_NOT_SUPPORTED);
    rc = id ? fake_mig_lookup(device, &d) : NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *id = compute ? d.ci : d.gi;
    return fake_unlock(rc);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return instance_id(device, id, false);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return instance_id(device, id, true);
}

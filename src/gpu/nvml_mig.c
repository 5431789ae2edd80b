/*
 * nvml_mig.c - the NVML backend's MIG functions (gpu.h, "MIG"): reading a
 * GPU's MIG state, creating and destroying GPU instances with their one
 * compute instance, and asking for a MIG mode.
 *
 * Decisions:
 *  - The MIG symbols are optional (nvml_int.h's NVML_MIG_FUNCS): a driver
 *    without them still runs every other part of gpuorch.
 *  - Profiles are found by asking for every index NVML defines (0 to
 *    NVML_GPU_INSTANCE_PROFILE_COUNT - 1): NOT_SUPPORTED and
 *    INVALID_ARGUMENT mean the GPU has no profile there. The V call (v2
 *    struct) is used where the library has it, else the plain one.
 *  - A MIG device's UUID comes from walking nvmlDeviceGetMigDeviceHandleByIndex
 *    up to nvmlDeviceGetMaxMigDeviceCount (NOT_FOUND: an empty index) and
 *    matching its GPU and compute instance ids.
 *  - Creation names the compute instance profile that spans the GPU
 *    instance (the one whose sliceCount equals the GPU instance's), and
 *    undoes the GPU instance when that fails, so that a failure leaves the
 *    GPU as it was.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "gpu/nvml_int.h"
#include "util/errbuf.h"
#include "base/banned.h"

static const struct nvml_mig_symbol {
    const char *name;
    size_t offset; /* in struct nvml_mig_fns */
} mig_symbols[] = {
#define NVML_FN_SYMBOL(member, symbol, ret, params) {symbol, offsetof(struct nvml_mig_fns, member)},
    NVML_MIG_FUNCS(NVML_FN_SYMBOL)
#undef NVML_FN_SYMBOL
};

void nvml_mig_resolve(struct nvml_backend *nb)
{
    for (size_t i = 0; i < sizeof(mig_symbols) / sizeof(mig_symbols[0]); i++) {
        void *sym = dlsym(nb->dl, mig_symbols[i].name);
        memcpy((char *)&nb->mig + mig_symbols[i].offset, &sym, sizeof(sym));
    }
}

static const struct nvml_backend *nvml_of(const struct gpu_backend *b)
{
    return (const struct nvml_backend *)b;
}

/* GPO_ENOTSUP naming the first of the needed calls (offsets in struct
 * nvml_mig_fns) that the library lacks; 0 when it has them all. */
static int need(const struct nvml_backend *nb, const size_t *offsets, size_t n, char *err,
                size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        const void *sym;
        memcpy(&sym, (const char *)&nb->mig + offsets[i], sizeof(sym));
        for (size_t k = 0; !sym && k < sizeof(mig_symbols) / sizeof(mig_symbols[0]); k++)
            if (mig_symbols[k].offset == offsets[i])
                return errbuf_set(err, errlen, GPO_ENOTSUP,
                                  "NVML lacks %s (an NVIDIA driver older than this MIG API?)",
                                  mig_symbols[k].name);
    }
    return 0;
}

#define OFF(member) offsetof(struct nvml_mig_fns, member)
#define NEED(nb, err, errlen, ...)                                                                 \
    need(nb, (const size_t[]){__VA_ARGS__},                                                        \
         sizeof((const size_t[]){__VA_ARGS__}) / sizeof(size_t), err, errlen)

/* An answer that means "no such profile here". */
static bool no_profile(enum nvmlReturn_enum r)
{
    return r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT;
}

/* Profile `index` of the GPU: 1 when it has none, 0 with *ret, else an error. */
static int read_profile(const struct nvml_backend *nb, unsigned gpu, unsigned index,
                        struct gpu_mig_profile *ret, char *err, size_t errlen)
{
    struct nvmlDevice_st *dev = nb->gpus[gpu].dev;
    struct gpu_mig_profile p = {.index = index};
    enum nvmlReturn_enum r;
    const char *call;
    if (nb->mig.gi_profile_v) {
        struct nvmlGpuInstanceProfileInfo_v2_st v2 = {.version = NVML_GPU_INSTANCE_PROFILE_INFO_V2};
        call = "nvmlDeviceGetGpuInstanceProfileInfoV";
        r = nb->mig.gi_profile_v(dev, index, &v2);
        p.id = v2.id;
        p.slices = v2.sliceCount;
        p.instances_max = v2.instanceCount;
        p.memory_mib = (int64_t)v2.memorySizeMB;
    } else {
        struct nvmlGpuInstanceProfileInfo_st v1 = {0};
        call = "nvmlDeviceGetGpuInstanceProfileInfo";
        r = nb->mig.gi_profile(dev, index, &v1);
        p.id = v1.id;
        p.slices = v1.sliceCount;
        p.instances_max = v1.instanceCount;
        p.memory_mib = (int64_t)v1.memorySizeMB;
    }
    if (no_profile(r))
        return 1;
    if (r != NVML_SUCCESS)
        return nvml_fail(nb, r, call, gpu, err, errlen);
    struct nvmlGpuInstancePlacement_st pl[GPU_MIG_MAX_PLACEMENTS];
    unsigned n = GPU_MIG_MAX_PLACEMENTS;
    r = nb->mig.gi_placements(dev, p.id, pl, &n);
    if (r != NVML_SUCCESS)
        return nvml_fail(nb, r, "nvmlDeviceGetGpuInstancePossiblePlacements_v2", gpu, err, errlen);
    for (unsigned i = 0; i < n && i < GPU_MIG_MAX_PLACEMENTS; i++) {
        p.placements[i] = (struct gpu_mig_placement){pl[i].start, pl[i].size};
        p.memory_slices = pl[i].size;
    }
    p.nplacements = n < GPU_MIG_MAX_PLACEMENTS ? n : GPU_MIG_MAX_PLACEMENTS;
    *ret = p;
    return 0;
}

/* Every profile, named, into m (MIG mode on). */
static int read_profiles(const struct nvml_backend *nb, unsigned gpu, struct gpu_mig *m, char *err,
                         size_t errlen)
{
    for (unsigned index = 0; index < NVML_GPU_INSTANCE_PROFILE_COUNT; index++) {
        int rc = read_profile(nb, gpu, index, &m->profiles[m->nprofiles], err, errlen);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            if (m->profiles[m->nprofiles].memory_slices > m->memory_slices)
                m->memory_slices = m->profiles[m->nprofiles].memory_slices;
            m->nprofiles++;
        }
    }
    struct gpu_info info;
    int rc = nvml_info(&nb->base, gpu, &info, err, errlen);
    if (rc)
        return rc;
    int64_t gb = gpu_type_memory_gb(info.gpu_type);
    for (unsigned i = 0; i < m->nprofiles; i++) {
        struct gpu_mig_profile *p = &m->profiles[i];
        bool media = p->index == NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 ||
                     p->index == NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1;
        gpu_mig_profile_name(p->slices, p->memory_slices, m->memory_slices, gb, p->memory_mib,
                             media, p->name, sizeof(p->name));
    }
    return 0;
}

/* Mode: 1 when the GPU has no MIG; else 0 with current and pending. */
static int read_mode(const struct nvml_backend *nb, unsigned gpu, bool *ret_current,
                     bool *ret_pending, char *err, size_t errlen)
{
    unsigned cur = 0, pend = 0;
    enum nvmlReturn_enum r = nb->fn.get_mig_mode(nb->gpus[gpu].dev, &cur, &pend);
    if (r == NVML_ERROR_NOT_SUPPORTED)
        return 1;
    if (r != NVML_SUCCESS)
        return nvml_fail(nb, r, "nvmlDeviceGetMigMode", gpu, err, errlen);
    *ret_current = cur == NVML_DEVICE_MIG_ENABLE;
    *ret_pending = pend == NVML_DEVICE_MIG_ENABLE;
    return 0;
}

/* Calls visit(nb, ci, gpu, ctx, err, errlen) for each compute instance of
 * GPU instance gi, profile by profile; stops at the first failure (its
 * code). */
typedef int (*ci_visit_fn)(const struct nvml_backend *nb, struct nvmlComputeInstance_st *ci,
                           unsigned gpu, void *ctx, char *err, size_t errlen);
static int each_compute(const struct nvml_backend *nb, unsigned gpu, struct nvmlGpuInstance_st *gi,
                        ci_visit_fn visit, void *ctx, char *err, size_t errlen)
{
    for (unsigned index = 0; index < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; index++) {
        struct nvmlComputeInstanceProfileInfo_st cp = {0};
        enum nvmlReturn_enum r =
            nb->mig.ci_profile(gi, index, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &cp);
        if (no_profile(r))
            continue;
        if (r != NVML_SUCCESS)
            return nvml_fail(nb, r, "nvmlGpuInstanceGetComputeInstanceProfileInfo", gpu, err,
                             errlen);
        struct nvmlComputeInstance_st *cis[GPU_MIG_MAX_COMPUTE];
        unsigned n = 0;
        r = nb->mig.ci_list(gi, cp.id, cis, &n);
        if (no_profile(r))
            continue;
        if (r != NVML_SUCCESS)
            return nvml_fail(nb, r, "nvmlGpuInstanceGetComputeInstances", gpu, err, errlen);
        for (unsigned k = 0; k < n; k++) {
            int rc = visit(nb, cis[k], gpu, ctx, err, errlen);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* each_compute's visit for read_compute: one into the instance, by id. */
static int compute_add(const struct nvml_backend *nb, struct nvmlComputeInstance_st *cis,
                       unsigned gpu, void *ctx, char *err, size_t errlen)
{
    struct gpu_mig_instance *inst = ctx;
    if (inst->ncompute >= GPU_MIG_MAX_COMPUTE)
        return 0;
    struct nvmlComputeInstanceInfo_st ci = {0};
    enum nvmlReturn_enum r = nb->mig.ci_info(cis, &ci);
    if (r != NVML_SUCCESS)
        return nvml_fail(nb, r, "nvmlComputeInstanceGetInfo_v2", gpu, err, errlen);
    unsigned at = inst->ncompute++;
    while (at > 0 && inst->compute[at - 1].id > ci.id) {
        inst->compute[at] = inst->compute[at - 1];
        at--;
    }
    inst->compute[at] = (struct gpu_mig_compute){
        .id = ci.id, .profile_id = ci.profileId, .slices = ci.placement.size};
    return 0;
}

/* The compute instances of a GPU instance, ascending id. */
static int read_compute(const struct nvml_backend *nb, unsigned gpu, struct nvmlGpuInstance_st *gi,
                        struct gpu_mig_instance *inst, char *err, size_t errlen)
{
    return each_compute(nb, gpu, gi, compute_add, inst, err, errlen);
}

/* each_compute's visit for nvml_mig_destroy. */
static int compute_destroy(const struct nvml_backend *nb, struct nvmlComputeInstance_st *ci,
                           unsigned gpu, void *ctx, char *err, size_t errlen)
{
    (void)ctx;
    enum nvmlReturn_enum r = nb->mig.ci_destroy(ci);
    return r == NVML_SUCCESS ? 0 : nvml_fail(nb, r, "nvmlComputeInstanceDestroy", gpu, err, errlen);
}

/* Fills the MIG device UUIDs of m's compute instances. */
static int read_uuids(const struct nvml_backend *nb, unsigned gpu, struct gpu_mig *m, char *err,
                      size_t errlen)
{
    unsigned max = 0;
    enum nvmlReturn_enum r = nb->mig.max_mig_devices(nb->gpus[gpu].dev, &max);
    if (r != NVML_SUCCESS)
        return nvml_fail(nb, r, "nvmlDeviceGetMaxMigDeviceCount", gpu, err, errlen);
    for (unsigned i = 0; i < max; i++) {
        struct nvmlDevice_st *md = NULL;
        r = nb->mig.mig_device(nb->gpus[gpu].dev, i, &md);
        if (r == NVML_ERROR_NOT_FOUND)
            continue;
        if (r != NVML_SUCCESS)
            return nvml_fail(nb, r, "nvmlDeviceGetMigDeviceHandleByIndex", gpu, err, errlen);
        unsigned gid = 0, cid = 0;
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
        if ((r = nb->mig.mig_gi_id(md, &gid)) != NVML_SUCCESS)
            return nvml_fail(nb, r, "nvmlDeviceGetGpuInstanceId", gpu, err, errlen);
        if ((r = nb->mig.mig_ci_id(md, &cid)) != NVML_SUCCESS)
            return nvml_fail(nb, r, "nvmlDeviceGetComputeInstanceId", gpu, err, errlen);
        if ((r = nb->fn.get_uuid(md, uuid, sizeof(uuid))) != NVML_SUCCESS)
            return nvml_fail(nb, r, "nvmlDeviceGetUUID(MIG device)", gpu, err, errlen);
        for (unsigned g = 0; g < m->ninstances; g++)
            for (unsigned c = 0; m->instances[g].id == gid && c < m->instances[g].ncompute; c++)
                if (m->instances[g].compute[c].id == cid)
                    nvml_copy_text(m->instances[g].compute[c].uuid,
                                   sizeof(m->instances[g].compute[c].uuid), uuid, sizeof(uuid));
    }
    return 0;
}

/* One GPU instance's facts from its handle. */
static int read_instance(const struct nvml_backend *nb, unsigned gpu, const struct gpu_mig *m,
                         struct nvmlGpuInstance_st *gi, struct gpu_mig_instance *ret, char *err,
                         size_t errlen)
{
    struct nvmlGpuInstanceInfo_st info = {0};
    enum nvmlReturn_enum r = nb->mig.gi_info(gi, &info);
    if (r != NVML_SUCCESS)
        return nvml_fail(nb, r, "nvmlGpuInstanceGetInfo", gpu, err, errlen);
    struct gpu_mig_instance inst = {.id = info.id,
                                    .profile_id = info.profileId,
                                    .placement = {info.placement.start, info.placement.size},
                                    .memory_mib = GPU_UNKNOWN};
    for (unsigned p = 0; p < m->nprofiles; p++)
        if (m->profiles[p].id == info.profileId) {
            memcpy(inst.profile, m->profiles[p].name, sizeof(inst.profile));
            inst.memory_mib = m->profiles[p].memory_mib;
        }
    int rc = read_compute(nb, gpu, gi, &inst, err, errlen);
    if (rc == 0)
        *ret = inst;
    return rc;
}

/* The GPU instances, ascending id, into m (profiles read). */
static int read_instances(const struct nvml_backend *nb, unsigned gpu, struct gpu_mig *m, char *err,
                          size_t errlen)
{
    for (unsigned p = 0; p < m->nprofiles; p++) {
        struct nvmlGpuInstance_st *gis[GPU_MIG_MAX_INSTANCES];
        unsigned n = 0;
        enum nvmlReturn_enum r = nb->mig.gi_list(nb->gpus[gpu].dev, m->profiles[p].id, gis, &n);
        if (r != NVML_SUCCESS)
            return nvml_fail(nb, r, "nvmlDeviceGetGpuInstances", gpu, err, errlen);
        for (unsigned k = 0; k < n && m->ninstances < GPU_MIG_MAX_INSTANCES; k++) {
            struct gpu_mig_instance inst = {0};
            int rc = read_instance(nb, gpu, m, gis[k], &inst, err, errlen);
            if (rc)
                return rc;
            unsigned at = m->ninstances++;
            while (at > 0 && m->instances[at - 1].id > inst.id) {
                m->instances[at] = m->instances[at - 1];
                at--;
            }
            m->instances[at] = inst;
        }
    }
    return read_uuids(nb, gpu, m, err, errlen);
}

/* The whole state into *m; a GPU without MIG reads as capable false. */
static int read_state(const struct nvml_backend *nb, unsigned gpu, struct gpu_mig *m, char *err,
                      size_t errlen)
{
    *m = (struct gpu_mig){0};
    int rc = read_mode(nb, gpu, &m->enabled, &m->pending, err, errlen);
    if (rc == 1)
        return 0;
    m->capable = rc == 0;
    if (rc || !m->enabled)
        return rc;
    /* The plain profile call where the V one is missing. */
    rc = NEED(nb, err, errlen, nb->mig.gi_profile_v ? OFF(gi_profile_v) : OFF(gi_profile),
              OFF(gi_placements), OFF(gi_list), OFF(gi_info), OFF(ci_profile), OFF(ci_list),
              OFF(ci_info), OFF(max_mig_devices), OFF(mig_device), OFF(mig_gi_id), OFF(mig_ci_id));
    rc = rc ? rc : read_profiles(nb, gpu, m, err, errlen);
    return rc ? rc : read_instances(nb, gpu, m, err, errlen);
}

int nvml_mig_read(const struct gpu_backend *b, unsigned index, struct gpu_mig *ret, char *err,
                  size_t errlen)
{
    struct gpu_mig *m = malloc(sizeof(*m));
    if (!m)
        return errbuf_set(err, errlen, GPO_ENOMEM, "gpu: out of memory");
    int rc = read_state(nvml_of(b), index, m, err, errlen);
    if (rc == 0)
        *ret = *m;
    free(m);
    return rc;
}

/* The GPU's profile of that id, in m; GPO_EINVAL listing the ids when none. */
static int find_profile(const struct gpu_mig *m, unsigned gpu, unsigned profile_id,
                        const struct gpu_mig_profile **ret, char *err, size_t errlen)
{
    char ids[256] = "";
    size_t len = 0;
    for (unsigned i = 0; i < m->nprofiles; i++) {
        if (m->profiles[i].id == profile_id) {
            *ret = &m->profiles[i];
            return 0;
        }
        int n = snprintf(ids + len, sizeof(ids) - len, "%s%u (%s)", len ? ", " : "",
                         m->profiles[i].id, m->profiles[i].name);
        if (n > 0 && (size_t)n < sizeof(ids) - len)
            len += (size_t)n;
    }
    return errbuf_set(err, errlen, GPO_EINVAL, "GPU %u: no MIG profile id %u; it has %s", gpu,
                      profile_id, len ? ids : "none");
}

static int check_start(const struct gpu_mig_profile *p, unsigned gpu, unsigned start, char *err,
                       size_t errlen)
{
    char starts[64] = "";
    size_t len = 0;
    for (unsigned i = 0; i < p->nplacements; i++) {
        if (p->placements[i].start == start)
            return 0;
        int n = snprintf(starts + len, sizeof(starts) - len, "%s%u", len ? ", " : "",
                         p->placements[i].start);
        if (n > 0 && (size_t)n < sizeof(starts) - len)
            len += (size_t)n;
    }
    return errbuf_set(err, errlen, GPO_EINVAL,
                      "GPU %u: MIG profile %s cannot start at memory slice %u; it starts at %s",
                      gpu, p->name, start, len ? starts : "none");
}

/* The compute instance profile id that spans a GPU instance of `slices`. */
static int full_compute_profile(const struct nvml_backend *nb, unsigned gpu,
                                struct nvmlGpuInstance_st *gi, unsigned slices, unsigned *ret,
                                char *err, size_t errlen)
{
    for (unsigned index = 0; index < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; index++) {
        struct nvmlComputeInstanceProfileInfo_st cp = {0};
        enum nvmlReturn_enum r =
            nb->mig.ci_profile(gi, index, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &cp);
        if (no_profile(r))
            continue;
        if (r != NVML_SUCCESS)
            return nvml_fail(nb, r, "nvmlGpuInstanceGetComputeInstanceProfileInfo", gpu, err,
                             errlen);
        if (cp.sliceCount == slices) {
            *ret = cp.id;
            return 0;
        }
    }
    return errbuf_set(err, errlen, GPO_ENOTSUP,
                      "GPU %u: no compute instance profile spans %u slices", gpu, slices);
}

static int create(const struct nvml_backend *nb, unsigned gpu, unsigned profile_id, unsigned start,
                  struct gpu_mig *m, struct gpu_mig_instance *ret, char *err, size_t errlen)
{
    int rc = read_state(nb, gpu, m, err, errlen);
    if (rc == 0 && !m->enabled)
        rc = errbuf_set(err, errlen, GPO_ENOTSUP, "GPU %u: %s", gpu,
                        m->capable ? "not in MIG mode" : "no MIG");
    rc = rc ? rc : NEED(nb, err, errlen, OFF(gi_create_at), OFF(gi_destroy), OFF(ci_create));
    const struct gpu_mig_profile *p = NULL;
    rc = rc ? rc : find_profile(m, gpu, profile_id, &p, err, errlen);
    rc = rc ? rc : check_start(p, gpu, start, err, errlen);
    if (rc)
        return rc;
    struct nvmlGpuInstancePlacement_st pl = {start, p->memory_slices};
    struct nvmlGpuInstance_st *gi = NULL;
    enum nvmlReturn_enum r = nb->mig.gi_create_at(nb->gpus[gpu].dev, profile_id, &pl, &gi);
    if (r != NVML_SUCCESS)
        return nvml_fail(nb, r, "nvmlDeviceCreateGpuInstanceWithPlacement", gpu, err, errlen);
    unsigned ci_profile = 0;
    struct nvmlComputeInstance_st *ci = NULL;
    rc = full_compute_profile(nb, gpu, gi, p->slices, &ci_profile, err, errlen);
    if (rc == 0 && (r = nb->mig.ci_create(gi, ci_profile, &ci)) != NVML_SUCCESS)
        rc = nvml_fail(nb, r, "nvmlGpuInstanceCreateComputeInstance", gpu, err, errlen);
    if (rc) {
        nb->mig.gi_destroy(gi); /* leave the GPU as it was */
        return rc;
    }
    struct nvmlGpuInstanceInfo_st info = {0};
    if ((r = nb->mig.gi_info(gi, &info)) != NVML_SUCCESS)
        return nvml_fail(nb, r, "nvmlGpuInstanceGetInfo", gpu, err, errlen);
    rc = read_state(nb, gpu, m, err, errlen);
    for (unsigned i = 0; rc == 0 && i < m->ninstances; i++)
        if (m->instances[i].id == info.id) {
            *ret = m->instances[i];
            return 0;
        }
    return rc ? rc
              : errbuf_set(err, errlen, GPO_EIO, "GPU %u: MIG instance %u vanished once made", gpu,
                           info.id);
}

int nvml_mig_create(const struct gpu_backend *b, unsigned index, unsigned profile_id,
                    unsigned start, struct gpu_mig_instance *ret, char *err, size_t errlen)
{
    struct gpu_mig *m = malloc(sizeof(*m));
    if (!m)
        return errbuf_set(err, errlen, GPO_ENOMEM, "gpu: out of memory");
    int rc = create(nvml_of(b), index, profile_id, start, m, ret, err, errlen);
    free(m);
    return rc;
}

int nvml_mig_destroy(const struct gpu_backend *b, unsigned index, unsigned instance_id, char *err,
                     size_t errlen)
{
    const struct nvml_backend *nb = nvml_of(b);
    int rc = NEED(nb, err, errlen, OFF(gi_by_id), OFF(gi_destroy), OFF(ci_profile), OFF(ci_list),
                  OFF(ci_destroy));
    if (rc)
        return rc;
    struct nvmlGpuInstance_st *gi = NULL;
    enum nvmlReturn_enum r = nb->mig.gi_by_id(nb->gpus[index].dev, instance_id, &gi);
    if (r == NVML_ERROR_NOT_FOUND)
        return errbuf_set(err, errlen, GPO_ENOENT, "GPU %u: no MIG instance %u", index,
                          instance_id);
    if (r != NVML_SUCCESS)
        return nvml_fail(nb, r, "nvmlDeviceGetGpuInstanceById", index, err, errlen);
    rc = each_compute(nb, index, gi, compute_destroy, NULL, err, errlen);
    if (rc)
        return rc;
    r = nb->mig.gi_destroy(gi);
    if (r != NVML_SUCCESS)
        return nvml_fail(nb, r, "nvmlGpuInstanceDestroy", index, err, errlen);
    return 0;
}

int nvml_mig_set_mode(const struct gpu_backend *b, unsigned index, bool enable,
                      bool *ret_reset_pending, char *err, size_t errlen)
{
    const struct nvml_backend *nb = nvml_of(b);
    int rc = NEED(nb, err, errlen, OFF(set_mig_mode));
    if (rc)
        return rc;
    enum nvmlReturn_enum activation = NVML_SUCCESS;
    enum nvmlReturn_enum r = nb->mig.set_mig_mode(
        nb->gpus[index].dev, enable ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE,
        &activation);
    if (r != NVML_SUCCESS)
        return nvml_fail(nb, r, "nvmlDeviceSetMigMode", index, err, errlen);
    /* activation says why a change is not current yet (IN_USE, RESET_REQUIRED);
     * the mode itself is the answer. */
    bool current = false, pending = false;
    rc = read_mode(nb, index, &current, &pending, err, errlen);
    if (rc == 1)
        return errbuf_set(err, errlen, GPO_ENOTSUP, "GPU %u: no MIG", index);
    if (rc)
        return rc;
    *ret_reset_pending = current != enable;
    return 0;
}

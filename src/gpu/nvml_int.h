/*
 * nvml_int.h - the NVML backend's private header: NVIDIA's declarations as
 * this backend uses them (nvml.h, API version 12: see nvml.c's head), the
 * backend object, and what nvml.c shares with nvml_mig.c (MIG state, read
 * and changed through the optional MIG symbols).
 */
#ifndef GPUORCH_GPU_NVML_INT_H
#define GPUORCH_GPU_NVML_INT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/gpu.h"

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
    X(NVML_ERROR_IN_USE, 19, GPO_EBUSY)                                                            \
    X(NVML_ERROR_MEMORY, 20, GPO_ENOMEM)                                                           \
    X(NVML_ERROR_NO_DATA, 21, GPO_EIO)                                                             \
    X(NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, 22, GPO_ENOTSUP)                                          \
    X(NVML_ERROR_INSUFFICIENT_RESOURCES, 23, GPO_ENOSPC)                                           \
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

/* ---- MIG (nvml.h's nvmlMultiInstanceGPU group) --------------------------- */

#define NVML_DEVICE_MIG_DISABLE                     0
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1      0x7 /* media extensions: "+me" */
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1      0x8 /* likewise (A30) */
#define NVML_GPU_INSTANCE_PROFILE_COUNT             0xA
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT         0x8
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0x0

struct nvmlGpuInstance_st;     /* opaque: nvmlGpuInstance_t points to one */
struct nvmlComputeInstance_st; /* likewise nvmlComputeInstance_t */

struct nvmlGpuInstancePlacement_st {
    unsigned int start; /* first memory slice */
    unsigned int size;  /* memory slices */
};

/* The plain struct, for drivers without the V call. */
struct nvmlGpuInstanceProfileInfo_st {
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
};

struct nvmlGpuInstanceProfileInfo_v2_st {
    unsigned int version;
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
};

/* NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2) */
#define NVML_GPU_INSTANCE_PROFILE_INFO_V2                                                          \
    ((unsigned)sizeof(struct nvmlGpuInstanceProfileInfo_v2_st) | (2u << 24))

struct nvmlGpuInstanceInfo_st {
    struct nvmlDevice_st *device;
    unsigned int id;
    unsigned int profileId;
    struct nvmlGpuInstancePlacement_st placement;
};

struct nvmlComputeInstancePlacement_st {
    unsigned int start;
    unsigned int size;
};

struct nvmlComputeInstanceProfileInfo_st {
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
};

struct nvmlComputeInstanceInfo_st {
    struct nvmlDevice_st *device;
    struct nvmlGpuInstance_st *gpuInstance;
    unsigned int id;
    unsigned int profileId;
    struct nvmlComputeInstancePlacement_st placement;
};

_Static_assert(sizeof(struct nvmlGpuInstancePlacement_st) == 8, "nvmlGpuInstancePlacement_t");
_Static_assert(sizeof(struct nvmlGpuInstanceProfileInfo_st) == 48, "nvmlGpuInstanceProfileInfo_t");
_Static_assert(sizeof(struct nvmlGpuInstanceProfileInfo_v2_st) == 152 &&
                   offsetof(struct nvmlGpuInstanceProfileInfo_v2_st, memorySizeMB) == 48,
               "nvmlGpuInstanceProfileInfo_v2_t");
_Static_assert(sizeof(struct nvmlGpuInstanceInfo_st) == 24 &&
                   offsetof(struct nvmlGpuInstanceInfo_st, placement) == 16,
               "nvmlGpuInstanceInfo_t");
_Static_assert(sizeof(struct nvmlComputeInstanceProfileInfo_st) == 36,
               "nvmlComputeInstanceProfileInfo_t");
_Static_assert(sizeof(struct nvmlComputeInstanceInfo_st) == 32 &&
                   offsetof(struct nvmlComputeInstanceInfo_st, id) == 16,
               "nvmlComputeInstanceInfo_t");

/* The MIG calls: resolved when the library has them (drivers before R450
 * have none, before R470 no V call); a missing one makes the MIG functions
 * that need it GPO_ENOTSUP, naming it. */
#define NVML_MIG_FUNCS(X)                                                                          \
    X(set_mig_mode, "nvmlDeviceSetMigMode", enum nvmlReturn_enum,                                  \
      (struct nvmlDevice_st *, unsigned int, enum nvmlReturn_enum *))                              \
    X(gi_profile_v, "nvmlDeviceGetGpuInstanceProfileInfoV", enum nvmlReturn_enum,                  \
      (struct nvmlDevice_st *, unsigned int, struct nvmlGpuInstanceProfileInfo_v2_st *))           \
    X(gi_profile, "nvmlDeviceGetGpuInstanceProfileInfo", enum nvmlReturn_enum,                     \
      (struct nvmlDevice_st *, unsigned int, struct nvmlGpuInstanceProfileInfo_st *))              \
    X(gi_placements, "nvmlDeviceGetGpuInstancePossiblePlacements_v2", enum nvmlReturn_enum,        \
      (struct nvmlDevice_st *, unsigned int, struct nvmlGpuInstancePlacement_st *,                 \
       unsigned int *))                                                                            \
    X(gi_create_at, "nvmlDeviceCreateGpuInstanceWithPlacement", enum nvmlReturn_enum,              \
      (struct nvmlDevice_st *, unsigned int, const struct nvmlGpuInstancePlacement_st *,           \
       struct nvmlGpuInstance_st **))                                                              \
    X(gi_destroy, "nvmlGpuInstanceDestroy", enum nvmlReturn_enum, (struct nvmlGpuInstance_st *))   \
    X(gi_list, "nvmlDeviceGetGpuInstances", enum nvmlReturn_enum,                                  \
      (struct nvmlDevice_st *, unsigned int, struct nvmlGpuInstance_st **, unsigned int *))        \
    X(gi_by_id, "nvmlDeviceGetGpuInstanceById", enum nvmlReturn_enum,                              \
      (struct nvmlDevice_st *, unsigned int, struct nvmlGpuInstance_st **))                        \
    X(gi_info, "nvmlGpuInstanceGetInfo", enum nvmlReturn_enum,                                     \
      (struct nvmlGpuInstance_st *, struct nvmlGpuInstanceInfo_st *))                              \
    X(ci_profile, "nvmlGpuInstanceGetComputeInstanceProfileInfo", enum nvmlReturn_enum,            \
      (struct nvmlGpuInstance_st *, unsigned int, unsigned int,                                    \
       struct nvmlComputeInstanceProfileInfo_st *))                                                \
    X(ci_create, "nvmlGpuInstanceCreateComputeInstance", enum nvmlReturn_enum,                     \
      (struct nvmlGpuInstance_st *, unsigned int, struct nvmlComputeInstance_st **))               \
    X(ci_destroy, "nvmlComputeInstanceDestroy", enum nvmlReturn_enum,                              \
      (struct nvmlComputeInstance_st *))                                                           \
    X(ci_list, "nvmlGpuInstanceGetComputeInstances", enum nvmlReturn_enum,                         \
      (struct nvmlGpuInstance_st *, unsigned int, struct nvmlComputeInstance_st **,                \
       unsigned int *))                                                                            \
    X(ci_info, "nvmlComputeInstanceGetInfo_v2", enum nvmlReturn_enum,                              \
      (struct nvmlComputeInstance_st *, struct nvmlComputeInstanceInfo_st *))                      \
    X(max_mig_devices, "nvmlDeviceGetMaxMigDeviceCount", enum nvmlReturn_enum,                     \
      (struct nvmlDevice_st *, unsigned int *))                                                    \
    X(mig_device, "nvmlDeviceGetMigDeviceHandleByIndex", enum nvmlReturn_enum,                     \
      (struct nvmlDevice_st *, unsigned int, struct nvmlDevice_st **))                             \
    X(mig_gi_id, "nvmlDeviceGetGpuInstanceId", enum nvmlReturn_enum,                               \
      (struct nvmlDevice_st *, unsigned int *))                                                    \
    X(mig_ci_id, "nvmlDeviceGetComputeInstanceId", enum nvmlReturn_enum,                           \
      (struct nvmlDevice_st *, unsigned int *))

struct nvml_mig_fns {
#define NVML_FN_MEMBER(member, symbol, ret, params) ret(*member) params;
    NVML_MIG_FUNCS(NVML_FN_MEMBER)
#undef NVML_FN_MEMBER
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
    struct nvml_mig_fns mig; /* NULL members: the library lacks them */
    struct nvml_gpu gpus[GPU_MAX_DEVICES];
};

/* The mapped code, with "call(GPU i): nvmlErrorString text (NVML error n)"
 * (index NO_GPU: no GPU named). */
int nvml_fail(const struct nvml_backend *nb, enum nvmlReturn_enum r, const char *call,
              unsigned index, char *err, size_t errlen);
/* Copies NVML's text (NUL-terminated within n bytes, or cut there). */
void nvml_copy_text(char *dst, size_t dstlen, const char *src, size_t n);
/* The backend's info op (gpu.h's gpu_info). */
int nvml_info(const struct gpu_backend *b, unsigned index, struct gpu_info *ret, char *err,
              size_t errlen);

/* Resolves the MIG symbols the library has (nvml_mig.c). */
void nvml_mig_resolve(struct nvml_backend *nb);
/* The MIG ops (gpu.h's gpu_mig_*). */
int nvml_mig_read(const struct gpu_backend *b, unsigned index, struct gpu_mig *ret, char *err,
                  size_t errlen);
int nvml_mig_create(const struct gpu_backend *b, unsigned index, unsigned profile_id,
                    unsigned start, struct gpu_mig_instance *ret, char *err, size_t errlen);
int nvml_mig_destroy(const struct gpu_backend *b, unsigned index, unsigned instance_id, char *err,
                     size_t errlen);
int nvml_mig_set_mode(const struct gpu_backend *b, unsigned index, bool enable,
                      bool *ret_reset_pending, char *err, size_t errlen);

#endif

/*
 * nvml_abi.h - the part of NVIDIA's nvml.h that the fake NVML implements:
 * return codes with their documented numbers, buffer sizes, struct layouts
 * (pinned by _Static_assert to the published header) and the documented
 * signatures of the exported functions.
 *
 * The names are NVML's own (nvmlReturn_t, nvmlDevice_t, ...), typedefs
 * included, because this is a copy of an ABI, not gpuorch API. fakenvml.c
 * defines the functions; tests/unit/test_fakenvml.c takes the types from here
 * and the functions from dlsym, as the agent does.
 *
 * Contracts are NVML's: every call but nvmlErrorString returns
 * NVML_ERROR_UNINITIALIZED before nvmlInit or after the last nvmlShutdown,
 * NVML_ERROR_INVALID_ARGUMENT for a NULL pointer, a bad handle or an index out
 * of range, NVML_ERROR_INSUFFICIENT_SIZE for a short buffer. Out-parameters
 * are caller-owned and written only on NVML_SUCCESS (and *infoCount on
 * NVML_ERROR_INSUFFICIENT_SIZE). Strings returned are static.
 */
#ifndef GPUORCH_FAKENVML_NVML_ABI_H
#define GPUORCH_FAKENVML_NVML_ABI_H

#include <stddef.h>

#define NVML_RETURN_CODES(X)                                                                       \
    X(NVML_SUCCESS, 0, "Success")                                                                  \
    X(NVML_ERROR_UNINITIALIZED, 1, "Uninitialized")                                                \
    X(NVML_ERROR_INVALID_ARGUMENT, 2, "Invalid Argument")                                          \
    X(NVML_ERROR_NOT_SUPPORTED, 3, "Not Supported")                                                \
    X(NVML_ERROR_NO_PERMISSION, 4, "Insufficient Permissions")                                     \
    X(NVML_ERROR_ALREADY_INITIALIZED, 5, "Already Initialized")                                    \
    X(NVML_ERROR_NOT_FOUND, 6, "Not Found")                                                        \
    X(NVML_ERROR_INSUFFICIENT_SIZE, 7, "Insufficient Size")                                        \
    X(NVML_ERROR_INSUFFICIENT_POWER, 8, "Insufficient External Power")                             \
    X(NVML_ERROR_DRIVER_NOT_LOADED, 9, "Driver Not Loaded")                                        \
    X(NVML_ERROR_TIMEOUT, 10, "Timeout")                                                           \
    X(NVML_ERROR_IRQ_ISSUE, 11, "Interrupt Request Issue")                                         \
    X(NVML_ERROR_LIBRARY_NOT_FOUND, 12, "NVML Shared Library Not Found")                           \
    X(NVML_ERROR_FUNCTION_NOT_FOUND, 13, "Function Not Found")                                     \
    X(NVML_ERROR_CORRUPTED_INFOROM, 14, "Corrupted infoROM")                                       \
    X(NVML_ERROR_GPU_IS_LOST, 15, "GPU is lost")                                                   \
    X(NVML_ERROR_RESET_REQUIRED, 16, "GPU requires restart")                                       \
    X(NVML_ERROR_OPERATING_SYSTEM, 17, "The operating system has blocked the request.")            \
    X(NVML_ERROR_LIB_RM_VERSION_MISMATCH, 18, "RM has detected an NVML/RM version mismatch.")      \
    X(NVML_ERROR_IN_USE, 19, "In use by another client")                                           \
    X(NVML_ERROR_MEMORY, 20, "Insufficient Memory")                                                \
    X(NVML_ERROR_NO_DATA, 21, "No data")                                                           \
    X(NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, 22, "ECC is enabled")                                     \
    X(NVML_ERROR_INSUFFICIENT_RESOURCES, 23, "Insufficient resources")                             \
    X(NVML_ERROR_FREQ_NOT_SUPPORTED, 24, "Frequency not supported")                                \
    X(NVML_ERROR_ARGUMENT_VERSION_MISMATCH, 25, "Argument version mismatch")                       \
    X(NVML_ERROR_DEPRECATED, 26, "Deprecated")                                                     \
    X(NVML_ERROR_NOT_READY, 27, "System is not ready")                                             \
    X(NVML_ERROR_GPU_NOT_FOUND, 28, "No GPUs were found")                                          \
    X(NVML_ERROR_INVALID_STATE, 29, "Invalid state")                                               \
    X(NVML_ERROR_UNKNOWN, 999, "Unknown Error")

typedef enum nvmlReturn_enum {
#define NVML_RETURN_ENUM(name, value, text) name = (value),
    NVML_RETURN_CODES(NVML_RETURN_ENUM)
#undef NVML_RETURN_ENUM
} nvmlReturn_t;

#define NVML_DEVICE_UUID_BUFFER_SIZE           80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE        96
#define NVML_DEVICE_NAME_BUFFER_SIZE           64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE        96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE   80
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE     32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE  16
#define NVML_NVLINK_MAX_LINKS                  18
#define NVML_DEVICE_MIG_DISABLE                0
#define NVML_DEVICE_MIG_ENABLE                 1
#define NVML_INIT_FLAG_NO_GPUS                 1
#define NVML_INIT_FLAG_NO_ATTACH               2

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct nvmlMemory_st {
    unsigned long long total, free, used; /* bytes */
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
    unsigned int version; /* nvmlMemory_v2 */
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

/* NVML_STRUCT_VERSION(Memory, 2): the struct's size, the version in the top byte. */
#define nvmlMemory_v2 ((unsigned)sizeof(nvmlMemory_v2_t) | (2u << 24))

typedef struct nvmlUtilization_st {
    unsigned int gpu, memory; /* percent */
} nvmlUtilization_t;

typedef struct nvmlProcessInfo_v1_st {
    unsigned int pid;
    unsigned long long usedGpuMemory; /* bytes */
} nvmlProcessInfo_v1_t;

/* The layout of nvmlProcessInfo_v2_t, which _v2 and _v3 fill. */
typedef struct nvmlProcessInfo_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;     /* 0xFFFFFFFF when not in MIG mode */
    unsigned int computeInstanceId; /* likewise */
} nvmlProcessInfo_t;

typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE]; /* "%04X:%02X:%02X.0" */
    unsigned int domain, bus, device;
    unsigned int pciDeviceId; /* device id << 16 | vendor id */
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE]; /* "%08X:%02X:%02X.0" */
} nvmlPciInfo_t;

typedef enum nvmlEnableState_enum {
    NVML_FEATURE_DISABLED = 0,
    NVML_FEATURE_ENABLED = 1
} nvmlEnableState_t;

typedef enum nvmlTemperatureSensors_enum {
    NVML_TEMPERATURE_GPU = 0,
    NVML_TEMPERATURE_COUNT
} nvmlTemperatureSensors_t;

/* ---- Multi-Instance GPU (nvml.h's nvmlMultiInstanceGPU group) ---- */

/* Profile *indices*: what nvmlDeviceGetGpuInstanceProfileInfo takes. The
 * profile *id* it reports (info.id) is another number (19 for 1g on an H100). */
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE      0x0
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE      0x1
#define NVML_GPU_INSTANCE_PROFILE_3_SLICE      0x2
#define NVML_GPU_INSTANCE_PROFILE_4_SLICE      0x3
#define NVML_GPU_INSTANCE_PROFILE_7_SLICE      0x4
#define NVML_GPU_INSTANCE_PROFILE_8_SLICE      0x5
#define NVML_GPU_INSTANCE_PROFILE_6_SLICE      0x6
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 0x7 /* 1g with media extensions: "+me" */
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 0x8
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 0x9 /* 1g with two memory slices: 1g.20gb */
#define NVML_GPU_INSTANCE_PROFILE_COUNT        0xA

#define NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE      0x0
#define NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE      0x1
#define NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE      0x2
#define NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE      0x3
#define NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE      0x4
#define NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE      0x5
#define NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE      0x6
#define NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 0x7
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT        0x8

#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0x0
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT  0x1

typedef struct nvmlGpuInstance_st *nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st *nvmlComputeInstance_t;

typedef struct nvmlGpuInstancePlacement_st {
    unsigned int start; /* first memory slice */
    unsigned int size;  /* memory slices */
} nvmlGpuInstancePlacement_t;

typedef struct nvmlGpuInstanceProfileInfo_st {
    unsigned int id; /* the profile id: not the index */
    unsigned int isP2pSupported;
    unsigned int sliceCount; /* compute slices */
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB; /* MiB */
} nvmlGpuInstanceProfileInfo_t;

typedef struct nvmlGpuInstanceProfileInfo_v2_st {
    unsigned int version; /* nvmlGpuInstanceProfileInfo_v2 */
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
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE]; /* "MIG 1g.10gb" */
} nvmlGpuInstanceProfileInfo_v2_t;

/* v3 drops isP2pSupported and adds capabilities at the end (nvml.h, R545). */
typedef struct nvmlGpuInstanceProfileInfo_v3_st {
    unsigned int version; /* nvmlGpuInstanceProfileInfo_v3 */
    unsigned int id;
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
    unsigned int capabilities; /* NVML_GPU_INSTANCE_PROFILE_CAPS_*: 0 here */
} nvmlGpuInstanceProfileInfo_v3_t;

#define nvmlGpuInstanceProfileInfo_v2                                                              \
    ((unsigned)sizeof(nvmlGpuInstanceProfileInfo_v2_t) | (2u << 24))
#define nvmlGpuInstanceProfileInfo_v3                                                              \
    ((unsigned)sizeof(nvmlGpuInstanceProfileInfo_v3_t) | (3u << 24))

typedef struct nvmlGpuInstanceInfo_st {
    nvmlDevice_t device; /* the parent GPU */
    unsigned int id;     /* the GPU instance id, unique within the GPU */
    unsigned int profileId;
    nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct nvmlComputeInstancePlacement_st {
    unsigned int start; /* first compute slice within the GPU instance */
    unsigned int size;
} nvmlComputeInstancePlacement_t;

typedef struct nvmlComputeInstanceProfileInfo_st {
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

typedef struct nvmlComputeInstanceProfileInfo_v2_st {
    unsigned int version; /* nvmlComputeInstanceProfileInfo_v2 */
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlComputeInstanceProfileInfo_v2_t;

typedef struct nvmlComputeInstanceProfileInfo_v3_st {
    unsigned int version; /* nvmlComputeInstanceProfileInfo_v3 */
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned int capabilities;
} nvmlComputeInstanceProfileInfo_v3_t;

#define nvmlComputeInstanceProfileInfo_v2                                                          \
    ((unsigned)sizeof(nvmlComputeInstanceProfileInfo_v2_t) | (2u << 24))
#define nvmlComputeInstanceProfileInfo_v3                                                          \
    ((unsigned)sizeof(nvmlComputeInstanceProfileInfo_v3_t) | (3u << 24))

typedef struct nvmlComputeInstanceInfo_st {
    nvmlDevice_t device;           /* the parent GPU */
    nvmlGpuInstance_t gpuInstance; /* the parent GPU instance */
    unsigned int id;               /* unique within the GPU instance */
    unsigned int profileId;
    nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

_Static_assert(sizeof(nvmlReturn_t) == 4, "nvmlReturn_t is an int-sized enum");
_Static_assert(sizeof(nvmlGpuInstancePlacement_t) == 8, "nvmlGpuInstancePlacement_t");
_Static_assert(sizeof(nvmlGpuInstanceProfileInfo_t) == 48 &&
                   offsetof(nvmlGpuInstanceProfileInfo_t, memorySizeMB) == 40,
               "nvmlGpuInstanceProfileInfo_t layout");
_Static_assert(sizeof(nvmlGpuInstanceProfileInfo_v2_t) == 152 &&
                   offsetof(nvmlGpuInstanceProfileInfo_v2_t, memorySizeMB) == 48 &&
                   offsetof(nvmlGpuInstanceProfileInfo_v2_t, name) == 56,
               "nvmlGpuInstanceProfileInfo_v2_t layout");
_Static_assert(sizeof(nvmlGpuInstanceProfileInfo_v3_t) == 152 &&
                   offsetof(nvmlGpuInstanceProfileInfo_v3_t, memorySizeMB) == 40 &&
                   offsetof(nvmlGpuInstanceProfileInfo_v3_t, name) == 48 &&
                   offsetof(nvmlGpuInstanceProfileInfo_v3_t, capabilities) == 144,
               "nvmlGpuInstanceProfileInfo_v3_t layout");
_Static_assert(nvmlGpuInstanceProfileInfo_v2 == 0x02000098u &&
                   nvmlGpuInstanceProfileInfo_v3 == 0x03000098u,
               "the v2 and v3 versions differ only in the version byte");
_Static_assert(sizeof(nvmlGpuInstanceInfo_t) == 24 &&
                   offsetof(nvmlGpuInstanceInfo_t, placement) == 16,
               "nvmlGpuInstanceInfo_t layout");
_Static_assert(sizeof(nvmlComputeInstanceProfileInfo_t) == 36, "nvmlComputeInstanceProfileInfo_t");
_Static_assert(sizeof(nvmlComputeInstanceProfileInfo_v2_t) == 136 &&
                   sizeof(nvmlComputeInstanceProfileInfo_v3_t) == 140,
               "nvmlComputeInstanceProfileInfo_v2_t and _v3_t");
_Static_assert(sizeof(nvmlComputeInstanceInfo_t) == 32 &&
                   offsetof(nvmlComputeInstanceInfo_t, id) == 16 &&
                   offsetof(nvmlComputeInstanceInfo_t, placement) == 24,
               "nvmlComputeInstanceInfo_t layout");
_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t layout");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40 && nvmlMemory_v2 == 0x02000028u, "nvmlMemory_v2_t");
_Static_assert(sizeof(nvmlUtilization_t) == 8, "nvmlUtilization_t layout");
_Static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t layout");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24 && offsetof(nvmlProcessInfo_t, usedGpuMemory) == 8 &&
                   offsetof(nvmlProcessInfo_t, gpuInstanceId) == 16 &&
                   offsetof(nvmlProcessInfo_t, computeInstanceId) == 20,
               "nvmlProcessInfo_v2_t layout");
_Static_assert(sizeof(nvmlPciInfo_t) == 68 && offsetof(nvmlPciInfo_t, domain) == 16 &&
                   offsetof(nvmlPciInfo_t, pciSubSystemId) == 32 &&
                   offsetof(nvmlPciInfo_t, busId) == 36,
               "nvmlPciInfo_t layout");
_Static_assert(sizeof(nvmlEnableState_t) == 4 && sizeof(nvmlTemperatureSensors_t) == 4, "enums");

#define FAKENVML_EXPORT __attribute__((visibility("default")))

/* Reference counted: each successful call needs one nvmlShutdown. Flags are
 * accepted and ignored. NVML_ERROR_UNKNOWN when the GPU file cannot be used. */
FAKENVML_EXPORT nvmlReturn_t nvmlInit_v2(void);
FAKENVML_EXPORT nvmlReturn_t nvmlInit(void);
FAKENVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
FAKENVML_EXPORT nvmlReturn_t nvmlShutdown(void);
/* Any value, also before nvmlInit; unknown codes read "Unknown Error". */
FAKENVML_EXPORT const char *nvmlErrorString(nvmlReturn_t result);
FAKENVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
FAKENVML_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                           nvmlDevice_t *device);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device);
/* NVML_ERROR_NOT_FOUND for a UUID or bus id that no GPU has. */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId,
                                                              nvmlDevice_t *device);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId,
                                                           nvmlDevice_t *device);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid,
                                               unsigned int length);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name,
                                               unsigned int length);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
/* NVML_ERROR_ARGUMENT_VERSION_MISMATCH unless memory->version == nvmlMemory_v2. */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                        nvmlMemory_v2_t *memory);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                           nvmlUtilization_t *utilization);
/* Milliwatts. */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power);
/* Degrees C; NVML_ERROR_INVALID_ARGUMENT for a sensor other than NVML_TEMPERATURE_GPU. */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                                      nvmlTemperatureSensors_t sensorType,
                                                      unsigned int *temp);
/* NVML_ERROR_NOT_SUPPORTED on a GPU that is not MIG capable. */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                                  unsigned int *pendingMode);
/* 0 unless MIG is supported and enabled (as documented). */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device,
                                                            unsigned int *count);
/* MIG (README.md, "MIG"). Every call below but SetMigMode answers
 * NVML_ERROR_NOT_SUPPORTED on a GPU whose current MIG mode is disabled.
 * *activationStatus: NVML_SUCCESS (now current), NVML_ERROR_IN_USE (the GPU
 * is busy: pending until a reset) or NVML_ERROR_RESET_REQUIRED. */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode,
                                                  nvmlReturn_t *activationStatus);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(
    nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_t *info);
/* info->version: nvmlGpuInstanceProfileInfo_v2 or _v3, else
 * NVML_ERROR_ARGUMENT_VERSION_MISMATCH. */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(
    nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_v2_t *info);
/* placements NULL: *count = the number; else *count is the room, and
 * NVML_ERROR_INSUFFICIENT_SIZE (with *count = the number) when short. */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t *placements,
    unsigned int *count);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device,
                                                                       unsigned int profileId,
                                                                       unsigned int *count);
/* NVML_ERROR_INSUFFICIENT_RESOURCES when no placement is free or the
 * profile's instanceCount is reached. */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device,
                                                         unsigned int profileId,
                                                         nvmlGpuInstance_t *gpuInstance);
/* NVML_ERROR_INVALID_ARGUMENT for a placement the profile does not have;
 * NVML_ERROR_INSUFFICIENT_RESOURCES when it overlaps an instance. */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t device, unsigned int profileId, const nvmlGpuInstancePlacement_t *placement,
    nvmlGpuInstance_t *gpuInstance);
/* NVML_ERROR_IN_USE while it has compute instances or processes. */
FAKENVML_EXPORT nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance);
/* gpuInstances has room for the profile's instanceCount; *count is set. */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                                       nvmlGpuInstance_t *gpuInstances,
                                                       unsigned int *count);
/* NVML_ERROR_NOT_FOUND for an id no instance has. */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                          nvmlGpuInstance_t *gpuInstance);
FAKENVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance,
                                                    nvmlGpuInstanceInfo_t *info);
FAKENVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_t *info);
FAKENVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_v2_t *info);
FAKENVML_EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlComputeInstance_t *computeInstance);
/* NVML_ERROR_IN_USE while processes run on it. */
FAKENVML_EXPORT nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance);
FAKENVML_EXPORT nvmlReturn_t
nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                   nvmlComputeInstance_t *computeInstances, unsigned int *count);
FAKENVML_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                                           nvmlComputeInstanceInfo_t *info);
/* index < nvmlDeviceGetMaxMigDeviceCount; NVML_ERROR_NOT_FOUND when no MIG
 * device has it. MIG devices are numbered in (GPU instance id, compute
 * instance id) order. */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device,
                                                                 unsigned int index,
                                                                 nvmlDevice_t *migDevice);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device,
                                                         unsigned int *isMigDevice);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                                          nvmlDevice_t *device);
/* NVML_ERROR_NOT_SUPPORTED on a GPU handle (these are MIG device queries). */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id);
/* *infoCount in: room in infos; out: entries written, or on
 * NVML_ERROR_INSUFFICIENT_SIZE the number needed. infos may be NULL when
 * *infoCount is 0 (to ask: NVML_SUCCESS means there are none). */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                     unsigned int *infoCount,
                                                                     nvmlProcessInfo_t *infos);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                     unsigned int *infoCount,
                                                                     nvmlProcessInfo_t *infos);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                                  unsigned int *infoCount,
                                                                  nvmlProcessInfo_v1_t *infos);
/* link < NVML_NVLINK_MAX_LINKS; NVML_ERROR_NOT_SUPPORTED on a GPU without NVLink. */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                                      nvmlEnableState_t *isActive);
/* The PCI info of the GPU at the other end; NVML_ERROR_NOT_SUPPORTED on an
 * inactive link. */
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device,
                                                                 unsigned int link,
                                                                 nvmlPciInfo_t *pci);
FAKENVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device,
                                                              unsigned int link,
                                                              nvmlPciInfo_t *pci);

#endif

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

_Static_assert(sizeof(nvmlReturn_t) == 4, "nvmlReturn_t is an int-sized enum");
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

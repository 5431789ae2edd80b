/*
 * gpu.h - the GPU backend: what the node agent learns about its GPUs, and how
 * it samples them.
 *
 * A backend is opened once per agent. At open it finds the GPUs and their
 * topology (NVLink peers); after that it answers two questions per GPU:
 * gpu_info (what the GPU is: UUID, model, memory, MIG mode, peers) and
 * gpu_sample (what it is doing now: utilization, memory, power,
 * temperature, and each process's memory). The agent samples every second.
 *
 * Backends: NVML, loaded with dlopen at run time (gpu_backend_open, in
 * nvml.c), so that the agent builds and runs on machines without an NVIDIA
 * driver; tests point it at the fake libnvidia-ml.so.1 in tests/fakenvml/.
 * Every backend fills a `struct gpu_backend_ops`; the functions below check
 * their arguments and dispatch through it, so that checks and limits are the
 * same for every backend.
 *
 * Errors: functions return 0 or one of the negative GPU_* codes below (this
 * module's own table), and write a one-line message into the caller's `err`
 * buffer (errlen bytes, may be NULL/0) that names the failing call and, for
 * NVML, quotes nvmlErrorString. Out-parameters are set only on success. Out
 * of memory: GPO_ENOMEM, inputs unchanged. Nothing here logs or exits.
 *
 * Threads: NVML is thread-safe, and a backend's own state is read-only
 * after open, so gpu_count, gpu_info and gpu_sample may be called on one
 * backend from any number of threads at once. gpu_backend_close must not
 * run concurrently with any other call on the same backend.
 */
#ifndef GPUORCH_GPU_GPU_H
#define GPUORCH_GPU_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/err.h"

/* Buffer sizes, NUL included. UUID and name match NVML's V2 buffer sizes, so
 * nothing NVML returns is ever cut. */
#define GPU_UUID_MAX       96
#define GPU_NAME_MAX       96
#define GPU_TYPE_MAX       128 /* holds the type of any name NVML returns */
#define GPU_PCI_BUS_ID_MAX 32
/* Caps: a node with more GPUs fails to open (GPO_E2BIG); a GPU with more
 * processes fails to sample. Both are far above any real machine. */
#define GPU_MAX_DEVICES 64
#define GPU_MAX_PROCS   4096
/* A figure the GPU does not report (NVML_ERROR_NOT_SUPPORTED, or NVML's
 * "value not available"). */
#define GPU_UNKNOWN (-1)
/* gpu_instance_id / compute_instance_id of a process outside MIG. */
#define GPU_NO_INSTANCE UINT32_MAX

struct gpu_info {
    unsigned index;              /* NVML's (and nvidia-smi's) index: PCI bus order. CUDA numbers
                                    GPUs the same way only under CUDA_DEVICE_ORDER=PCI_BUS_ID:
                                    launch jobs by uuid */
    char uuid[GPU_UUID_MAX];     /* "GPU-8f6b..." */
    char name[GPU_NAME_MAX];     /* the driver's product name: "NVIDIA H100 80GB HBM3" */
    char gpu_type[GPU_TYPE_MAX]; /* the project's model name: "H100-80GB" (gpu_type_from_name) */
    int64_t memory_mib;          /* total memory, MiB (rounded down) */
    bool mig_capable;            /* the GPU supports MIG */
    bool mig_enabled;            /* MIG mode now */
    bool mig_pending;            /* MIG mode after the next GPU reset */
    char pci_bus_id[GPU_PCI_BUS_ID_MAX]; /* "00000000:18:00.0", as NVML writes it */
    unsigned npeers;
    unsigned peers[GPU_MAX_DEVICES]; /* indices of the GPUs it reaches over NVLink, ascending */
};

struct gpu_process {
    uint32_t pid;
    int64_t memory_mib;           /* GPU memory it uses, MiB (rounded down); GPU_UNKNOWN */
    uint32_t gpu_instance_id;     /* MIG instance; GPU_NO_INSTANCE outside MIG */
    uint32_t compute_instance_id; /* likewise */
};

struct gpu_sample {
    int32_t utilization_pct;        /* 0..100: time a kernel ran; GPU_UNKNOWN (e.g. under MIG) */
    int32_t memory_utilization_pct; /* 0..100: time memory was read or written; GPU_UNKNOWN */
    int64_t memory_used_mib;        /* rounded down; GPU_UNKNOWN */
    int64_t memory_total_mib;       /* rounded down; GPU_UNKNOWN */
    int64_t power_mw;               /* GPU_UNKNOWN */
    int32_t temperature_c;          /* GPU_UNKNOWN */
    bool procs_known;               /* false: the GPU would not list them (not supported,
                                       or no permission); then nprocs is 0 */
    size_t nprocs;
    struct gpu_process *procs; /* [nprocs], owned by the sample: gpu_sample_release */
};

/* Frees what *s holds and zeroes it; NULL is fine. */
void gpu_sample_release(struct gpu_sample *s);

struct gpu_backend;

/*
 * Opens the NVML backend: dlopen(lib_path) (NULL: "libnvidia-ml.so.1", found
 * on the library path as the driver installs it), resolves every versioned
 * symbol it needs (nvmlInit_v2, nvmlDeviceGetHandleByIndex_v2,
 * nvmlDeviceGetComputeRunningProcesses_v3, ...), calls nvmlInit_v2, finds
 * the GPUs and works out their NVLink peers. `lib_path` is borrowed.
 *
 * On success *ret is a backend the caller frees with gpu_backend_close.
 * Errors: GPO_ELIBACC when the library cannot be loaded, with dlerror's text
 * ("libnvidia-ml.so.1: cannot open shared object file: No such file or
 * directory (no NVIDIA driver?)"); GPO_ELIBBAD naming the first missing
 * symbol (a driver older than the API this file uses); the mapped code of a
 * failing NVML call, e.g. GPO_ENODRIVER from nvmlInit_v2; GPO_E2BIG for more
 * than GPU_MAX_DEVICES GPUs; GPO_ENOMEM; GPO_EINVAL for a NULL ret.
 */
int gpu_backend_open(const char *lib_path, struct gpu_backend **ret, char *err, size_t errlen);

/* Shuts the backend down (nvmlShutdown, dlclose) and frees it; NULL is fine. */
void gpu_backend_close(struct gpu_backend *b);

/* The number of GPUs found at open (0 for NULL). Indices are 0..count-1. */
unsigned gpu_count(const struct gpu_backend *b);

/* The backend's name ("nvml"); "" for NULL. Static. */
const char *gpu_backend_name(const struct gpu_backend *b);

/*
 * Describes GPU `index` into *ret. MIG mode is read on every call (it changes
 * with a GPU reset); the topology is the one found at open. Errors:
 * GPO_ENOENT for an index >= gpu_count; the mapped code of a failing
 * NVML call (GPO_EGPULOST when the GPU fell off the bus); GPO_EINVAL.
 */
int gpu_info(const struct gpu_backend *b, unsigned index, struct gpu_info *ret, char *err,
             size_t errlen);

/*
 * Samples GPU `index` now into *ret; the caller releases it with
 * gpu_sample_release. A figure the GPU does not report is GPU_UNKNOWN, not
 * an error. The process list is read with NVML's size protocol (ask for the
 * count, then fetch with room to spare, again if the count grew meanwhile).
 * Errors: GPO_ENOENT, GPO_E2BIG (over GPU_MAX_PROCS processes), the
 * mapped code of a failing NVML call, GPO_ENOMEM, GPO_EINVAL.
 */
int gpu_sample(const struct gpu_backend *b, unsigned index, struct gpu_sample *ret, char *err,
               size_t errlen);

/*
 * Turns the driver's product name into the project's gpu_type: the model,
 * a dash, and the memory in GB ("H100-80GB").
 *  1. The name is split into words at spaces, dashes and underscores.
 *  2. Brand words (NVIDIA, Tesla, GeForce, Quadro) are dropped, and so are
 *     words naming a form factor, bus or memory technology: those that start
 *     with SXM, PCIE, HBM or GDDR, and NVL (all compared without case).
 *  3. The first word of digits followed by "GB" is the memory.
 *  4. The remaining words, joined by dashes, are the model ("GPU" if none);
 *     characters other than letters, digits and dots are dropped.
 *  5. A name without a memory word takes the memory from memory_mib: drivers
 *     report a little less than the size a GPU is sold with (an L4 reports
 *     23034 MiB, an H200 143771 MiB), so the size is the smallest of the
 *     marketed sizes (..., 16, 24, 32, 40, 48, 80, 94, 96, 141, 144, ...
 *     GB) that is at least memory_mib and at most 1/8 above it; failing
 *     that, memory_mib / 1024 rounded up. memory_mib <= 0 gives the model
 *     alone.
 * Examples: "NVIDIA H100 80GB HBM3" -> "H100-80GB"; "NVIDIA A100-SXM4-40GB"
 * -> "A100-40GB"; "Tesla V100-SXM2-16GB" -> "V100-16GB"; "NVIDIA H200" with
 * 143771 MiB -> "H200-141GB"; "NVIDIA L4" with 23034 MiB -> "L4-24GB".
 * Writes the NUL-terminated result into buf. Returns 0; GPO_ENOBUFS when it
 * does not fit in len bytes (buf is then untouched); GPO_EINVAL for NULL.
 * `name` is borrowed.
 */
int gpu_type_from_name(const char *name, int64_t memory_mib, char *buf, size_t len);

/* ---- MIG ---------------------------------------------------------------
 *
 * A MIG-capable GPU in MIG mode is cut into GPU instances, each of a
 * profile (compute slices and memory slices) at a placement (its first
 * memory slice and their number); a GPU instance holds compute instances,
 * and each compute instance is a MIG device with its own "MIG-..." UUID,
 * which is what CUDA_VISIBLE_DEVICES takes. gpuorch creates every GPU
 * instance with one compute instance spanning it.
 *
 * Profiles are known by two numbers: NVML's profile *index*
 * (NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0, ...), which the profile-info call
 * takes, and the profile *id* the driver reports (19 for 1g on an H100, 9 for
 * 3g, 0 for 7g), which creation and listing take. Everything below speaks
 * ids; `index` is kept for the record.
 *
 * Names are derived, the way NVIDIA names the profiles:
 * "<compute slices>g.<memory>gb", plus "+me" for the media-extension
 * profiles (index NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 or _2_SLICE_REV1),
 * where memory = the GPU's memory in GB as gpu_type names it (80 for an
 * H100-80GB, 141 for an H200-141GB) times the profile's memory slices over
 * the GPU's, rounded half up: H100 1g.10gb 1g.20gb 2g.20gb 3g.40gb 4g.40gb
 * 7g.80gb; H200 1g.18gb 1g.35gb 2g.35gb 3g.71gb 4g.71gb 7g.141gb; A100-40GB
 * 1g.5gb ... 7g.40gb (gpu_mig_profile_name). Without a size in gpu_type,
 * the profile's memory in GiB, rounded up.
 *
 * The MIG functions call NVML's MIG API, which drivers before R470 lack in
 * part: a missing symbol makes a function GPO_ENOTSUP naming it. NVML's
 * errors map as elsewhere in this module (NVML_ERROR_IN_USE -> GPO_EBUSY,
 * NVML_ERROR_INSUFFICIENT_RESOURCES -> GPO_ENOSPC, NOT_SUPPORTED ->
 * GPO_ENOTSUP, NOT_FOUND -> GPO_ENOENT, NO_PERMISSION -> GPO_EPERM), with a
 * message naming the NVML call and the GPU. Changing MIG state needs root
 * (NVML's rule). */

#define GPU_MIG_MAX_PROFILES   10 /* NVML_GPU_INSTANCE_PROFILE_COUNT */
#define GPU_MIG_MAX_PLACEMENTS 8
#define GPU_MIG_MAX_INSTANCES  8 /* 7 on every GPU NVIDIA sells */
#define GPU_MIG_MAX_COMPUTE    8
#define GPU_MIG_NAME_MAX       32

struct gpu_mig_placement {
    unsigned start; /* first memory slice */
    unsigned size;  /* memory slices */
};

struct gpu_mig_profile {
    unsigned index;              /* NVML's profile index */
    unsigned id;                 /* the driver's profile id */
    char name[GPU_MIG_NAME_MAX]; /* "1g.10gb", "1g.10gb+me" */
    unsigned slices;             /* compute slices */
    unsigned memory_slices;      /* every placement's size */
    unsigned instances_max;      /* at once on the GPU */
    int64_t memory_mib;
    unsigned nplacements;
    struct gpu_mig_placement placements[GPU_MIG_MAX_PLACEMENTS]; /* ascending start */
};

struct gpu_mig_compute {
    unsigned id;             /* unique within its GPU instance */
    unsigned profile_id;     /* the compute instance profile's id */
    unsigned slices;         /* compute slices */
    char uuid[GPU_UUID_MAX]; /* its MIG device: "MIG-..."; "" when NVML lists none */
};

struct gpu_mig_instance {
    unsigned id;                    /* GPU instance id, unique within the GPU */
    unsigned profile_id;            /* the driver's profile id */
    char profile[GPU_MIG_NAME_MAX]; /* its name ("" for a profile the GPU does not list) */
    struct gpu_mig_placement placement;
    int64_t memory_mib; /* the profile's; GPU_UNKNOWN */
    unsigned ncompute;
    struct gpu_mig_compute compute[GPU_MIG_MAX_COMPUTE]; /* ascending id */
};

struct gpu_mig {
    bool capable;           /* MIG supported (else everything below is 0) */
    bool enabled;           /* MIG mode now */
    bool pending;           /* MIG mode after the next GPU reset */
    unsigned memory_slices; /* the GPU's (8), from its largest placement; 0 when off */
    unsigned nprofiles;     /* 0 unless enabled: NVML lists profiles only in MIG mode */
    struct gpu_mig_profile profiles[GPU_MIG_MAX_PROFILES]; /* ascending index */
    unsigned ninstances;
    struct gpu_mig_instance instances[GPU_MIG_MAX_INSTANCES]; /* ascending id */
};

/*
 * Reads GPU `index`'s MIG state: mode, profiles with their placements, GPU
 * instances with their compute instances and MIG device UUIDs. A GPU
 * without MIG is not an error (capable false). Errors: GPO_ENOENT (no such
 * GPU), the mapped code of a failing NVML call, GPO_ENOTSUP when the
 * library lacks a MIG call, GPO_EINVAL.
 */
int gpu_mig_read(const struct gpu_backend *b, unsigned index, struct gpu_mig *ret, char *err,
                 size_t errlen);

/*
 * Creates a GPU instance of profile id `profile_id` at memory slice `start`
 * on GPU `index` (in MIG mode), with one compute instance spanning it, and
 * describes it into *ret. If the compute instance cannot be made, the GPU
 * instance is destroyed again. Errors: GPO_EINVAL for a profile id the GPU
 * does not list or a start that is not one of its placements (the message
 * lists them), GPO_ENOSPC (NVML: INSUFFICIENT_RESOURCES: it overlaps an
 * instance, or the profile's count is reached), GPO_ENOTSUP (not in MIG
 * mode), GPO_EPERM (not root), other mapped NVML codes.
 */
int gpu_mig_create(const struct gpu_backend *b, unsigned index, unsigned profile_id, unsigned start,
                   struct gpu_mig_instance *ret, char *err, size_t errlen);

/*
 * Destroys GPU instance `instance_id` of GPU `index`: its compute instances
 * first, then it. Errors: GPO_ENOENT (no such instance), GPO_EBUSY (NVML:
 * IN_USE: processes run on it; what was destroyed before stays destroyed),
 * other mapped NVML codes.
 */
int gpu_mig_destroy(const struct gpu_backend *b, unsigned index, unsigned instance_id, char *err,
                    size_t errlen);

/*
 * Asks for MIG mode on or off. It becomes current at once when the driver
 * can reset the GPU (idle); otherwise it is pending until a GPU reset, which
 * this never does: *ret_reset_pending then says so (the current mode still
 * differs from the one asked for). Errors: GPO_ENOTSUP (no MIG), GPO_EPERM,
 * other mapped NVML codes.
 */
int gpu_mig_set_mode(const struct gpu_backend *b, unsigned index, bool enable,
                     bool *ret_reset_pending, char *err, size_t errlen);

/*
 * The name rule above: slices compute slices, memory_slices of the GPU's
 * gpu_memory_slices, on a GPU of gpu_gb GB (<= 0: unknown, then
 * memory_mib's GiB rounded up), "+me" when media. 0; GPO_ENOBUFS (buf
 * untouched); GPO_EINVAL for NULL or 0 slices.
 */
int gpu_mig_profile_name(unsigned slices, unsigned memory_slices, unsigned gpu_memory_slices,
                         int64_t gpu_gb, int64_t memory_mib, bool media, char *buf, size_t len);

/* The GB at the end of a gpu_type ("H100-80GB" -> 80), or -1. */
int64_t gpu_type_memory_gb(const char *gpu_type);

/* ---- for backends ------------------------------------------------------ */

/* What a backend implements. The public functions above have checked the
 * arguments (non-NULL, index < count) before calling. */
struct gpu_backend_ops {
    const char *name;
    int (*info)(const struct gpu_backend *b, unsigned index, struct gpu_info *ret, char *err,
                size_t errlen);
    int (*sample)(const struct gpu_backend *b, unsigned index, struct gpu_sample *ret, char *err,
                  size_t errlen);
    void (*close)(struct gpu_backend *b);
    /* MIG; NULL: the backend has none (the public functions: GPO_ENOTSUP). */
    int (*mig_read)(const struct gpu_backend *b, unsigned index, struct gpu_mig *ret, char *err,
                    size_t errlen);
    int (*mig_create)(const struct gpu_backend *b, unsigned index, unsigned profile_id,
                      unsigned start, struct gpu_mig_instance *ret, char *err, size_t errlen);
    int (*mig_destroy)(const struct gpu_backend *b, unsigned index, unsigned instance_id, char *err,
                       size_t errlen);
    int (*mig_set_mode)(const struct gpu_backend *b, unsigned index, bool enable,
                        bool *ret_reset_pending, char *err, size_t errlen);
};

/* A backend's object starts with this. */
struct gpu_backend {
    const struct gpu_backend_ops *ops;
    unsigned count; /* GPUs, fixed at open */
};

/* Backends write their messages with errbuf_set (util/errbuf.h). */

#endif

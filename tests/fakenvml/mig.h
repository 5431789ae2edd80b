/*
 * mig.h - the fake NVML's MIG model: NVIDIA's profile tables (README.md
 * cites them), the MIG state of each GPU (mode, GPU instances, compute
 * instances) and the state file that keeps it across processes, as the
 * driver keeps it across programs. Private to tests/fakenvml/.
 *
 * Decisions:
 *  - A GPU's state is seeded from the GPU file (mig_enabled, mig_instances)
 *    and kept in the state file (JSON, README.md "MIG"), keyed by the GPU's
 *    UUID. The seed is remembered with it: when the GPU file's MIG fields for
 *    that GPU change, the GPU is seeded again (the file was re-imaged), so a
 *    test that rewrites mig_enabled sees it as before the state file existed.
 *  - The file is replaced by rename (readers never see half a file) and
 *    changed only under an exclusive flock of STATE.lock, after re-reading it:
 *    concurrent processes' read-modify-write cycles do not lose updates.
 *  - GPU instance ids follow the memory slices they cover: the tree of the 8
 *    slices numbered as a heap (the whole GPU 0, halves 1-2, quarters 3-6,
 *    eighths 7-14), which is what nvidia-smi shows on A100 and H100 (a 7g
 *    instance is 0, 3g at slot 4 is 2, 1g at slot 0 is 7). NVML documents
 *    only that ids are unique within the GPU. Compute instance ids are the
 *    lowest free from 0.
 *  - Not thread-safe: fakenvml.c calls it under its one lock.
 */
#ifndef GPUORCH_FAKENVML_MIG_H
#define GPUORCH_FAKENVML_MIG_H

#include <stdbool.h>
#include <stddef.h>

#include "fakenvml/nvml_abi.h"

#define MIG_SLOTS       8  /* memory slices of the GPUs modelled */
#define MIG_COMPUTE     7  /* compute slices */
#define MIG_MAX_GI      7  /* GPU instances at once */
#define MIG_GI_IDS      15 /* heap ids of the slice tree */
#define MIG_MAX_CI      7  /* compute instances in one GPU instance */
#define MIG_MAX_DEVICES 7  /* nvmlDeviceGetMaxMigDeviceCount */
#define MIG_MAX_STARTS  7
#define MIG_UUID_LEN    41 /* "MIG-" + 36 + NUL */

enum mig_table { MIG_TABLE_NONE = 0, MIG_A100_40GB, MIG_A100_80GB, MIG_H100_80GB, MIG_H200_141GB };

/* One GPU instance profile of a table, as nvidia-smi mig -lgip lists it. */
struct mig_profile {
    unsigned index;            /* NVML_GPU_INSTANCE_PROFILE_* */
    unsigned id;               /* the profile id NVML reports */
    const char *name;          /* "1g.10gb", "1g.10gb+me" */
    unsigned slices;           /* compute slices */
    unsigned size;             /* memory slices: the placement's size */
    unsigned instances;        /* the most at once */
    unsigned long long memory; /* MiB */
    unsigned sms, copy_engines, decoders, jpegs, ofas;
    unsigned nstarts;
    unsigned starts[MIG_MAX_STARTS]; /* possible placements' first slice */
};

struct mig_ci {
    unsigned id;
    unsigned profile; /* NVML_COMPUTE_INSTANCE_PROFILE_* index = id (as on drivers) */
    unsigned start, size;
    char uuid[MIG_UUID_LEN]; /* the MIG device's "MIG-..." */
};

struct mig_gi {
    unsigned id;
    const struct mig_profile *profile;
    unsigned start;
    unsigned nci;
    struct mig_ci ci[MIG_MAX_CI]; /* ascending id */
};

/* One GPU's MIG state. */
struct mig_gpu {
    bool current, pending; /* MIG mode */
    unsigned serial;       /* creations so far: part of each new MIG UUID */
    unsigned ngi;
    struct mig_gi gi[MIG_MAX_GI]; /* ascending id */
};

/* "A100-40GB" ... -> the table; MIG_TABLE_NONE for an unknown text. */
enum mig_table mig_table_parse(const char *text);
/* The table a GPU of that product name and memory uses by default. */
enum mig_table mig_table_for(const char *name, unsigned long long memory_mib);
const char *mig_table_name(enum mig_table t);

/* The profile of that index (NVML_GPU_INSTANCE_PROFILE_*) or id, or NULL. */
const struct mig_profile *mig_profile_by_index(enum mig_table t, unsigned index);
const struct mig_profile *mig_profile_by_id(enum mig_table t, unsigned id);

/* The GPU instance of that id, or NULL. */
struct mig_gi *mig_gi_find(struct mig_gpu *g, unsigned id);
/* Its compute instance of that id, or NULL. */
struct mig_ci *mig_ci_find(struct mig_gi *gi, unsigned id);

/*
 * Creates a GPU instance of `p` at `start` (UINT_MAX: the first free
 * placement) with no compute instance. NVML_SUCCESS with *ret_gi;
 * NVML_ERROR_INVALID_ARGUMENT for a start that is not one of p's;
 * NVML_ERROR_INSUFFICIENT_RESOURCES when it overlaps, no placement is free
 * or p's instance count is reached. `gpu_uuid` seeds the MIG UUIDs.
 */
nvmlReturn_t mig_gi_create(struct mig_gpu *g, const struct mig_profile *p, unsigned start,
                           struct mig_gi **ret_gi);
/* Removes it (the caller checked that it is unused). */
void mig_gi_remove(struct mig_gpu *g, const struct mig_gi *gi);
/* How many more instances of p could be created now. */
unsigned mig_gi_capacity(const struct mig_gpu *g, const struct mig_profile *p);

/* Compute instance profile `index` within gi: its compute slices, or 0 when
 * the GPU instance has no such profile. */
unsigned mig_ci_slices(const struct mig_gi *gi, unsigned index);
/* Creates a compute instance of profile `index` in gi: NVML_SUCCESS with
 * *ret_ci, NVML_ERROR_NOT_SUPPORTED for a profile gi lacks,
 * NVML_ERROR_INSUFFICIENT_RESOURCES when no compute slices are free. */
nvmlReturn_t mig_ci_create(struct mig_gpu *g, const char *gpu_uuid, struct mig_gi *gi,
                           unsigned index, struct mig_ci **ret_ci);
void mig_ci_remove(struct mig_gi *gi, const struct mig_ci *ci);

/* A GPU reset: the pending mode becomes current and every instance goes. */
void mig_gpu_reset(struct mig_gpu *g);

/* One GPU as the GPU file seeds it: mode, and instances each with one full
 * compute instance. */
struct mig_seed {
    char key[256]; /* the GPU file's MIG fields as text: a change re-seeds */
    enum mig_table table;
    bool enabled;
    unsigned n;
    unsigned profile_id[MIG_MAX_GI], start[MIG_MAX_GI];
};

/* Builds the state a seed describes; 0, or -1 with msg (a layout that does
 * not fit: parse time checks it with this). */
int mig_seed_apply(const struct mig_seed *s, const char *gpu_uuid, struct mig_gpu *ret, char *msg,
                   size_t len);

/* What the state file holds for the GPUs of one GPU file. */
struct mig_state_gpu {
    const char *uuid;            /* borrowed from the GPU file */
    const struct mig_seed *seed; /* likewise */
    struct mig_gpu *state;       /* filled by mig_state_load */
};

/*
 * Fills every gpus[i].state from the state file at `path` (NULL: none),
 * seeding the GPUs it lacks or whose seed changed; *ret_changed says whether
 * that differs from the file. A missing file is an empty one; a bad one is
 * reported on stderr and treated as empty. 0, or -1 out of memory.
 */
int mig_state_load(const char *path, struct mig_state_gpu *gpus, unsigned n, bool *ret_changed);
/* Writes the file (tmp + rename), keeping the entries of other GPUs that it
 * holds. 0, or -1 with the reason on stderr. */
int mig_state_save(const char *path, const struct mig_state_gpu *gpus, unsigned n);
/* An flock of PATH.lock (exclusive, or shared): the fd, or -1 (reported). */
int mig_state_lock(const char *path, bool exclusive);
void mig_state_unlock(int fd);

#endif

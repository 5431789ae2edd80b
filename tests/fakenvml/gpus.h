/*
 * gpus.h - the fake NVML's GPUs: the built-in set, the JSON file that
 * replaces it (README.md documents the format) and re-reading that file when
 * it changes. Private to tests/fakenvml/: the library is built with hidden
 * visibility, so nothing declared here leaves libnvidia-ml.so.1.
 *
 * Decisions:
 *  - The file is read when the source is initialized (the first nvmlInit) and
 *    again by gpus_source_refresh once its inode, size or mtime changed, or
 *    while its mtime is within a second of the last read (a rewrite inside one
 *    timestamp tick keeps mtime and size: such a "racy" file is re-read and
 *    its bytes compared).
 *  - A bad file keeps the last good state and is reported once on stderr (the
 *    fake's only channel: NVML's API has nowhere to put a message).
 *  - The GPUs are kept by value in one array that a reload overwrites in place,
 *    so that nvmlDevice_t handles (pointers into it) stay valid.
 *
 * Not thread-safe: the caller serializes every call on one struct gpus_source
 * (fakenvml.c holds its one lock).
 */
#ifndef GPUORCH_FAKENVML_GPUS_H
#define GPUORCH_FAKENVML_GPUS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include "fakenvml/mig.h"
#include "fakenvml/nvml_abi.h"

#define GPUS_MAX 64 /* GPUs in one file */
/* memory_used_mib, utilization or process_memory_mib when the file leaves
 * it out: made from the GPU's processes (fakenvml.c finds them in /proc,
 * busy.h makes the figures). */
#define GPUS_FROM_PROCESSES ULLONG_MAX

/* One GPU as the file describes it; an nvmlDevice_t points at one of these. */
struct nvmlDevice_st {
    unsigned index;
    char uuid[NVML_DEVICE_UUID_BUFFER_SIZE];
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned long long memory_mib, memory_used_mib, utilization, memory_utilization, power_mw,
        temperature_c, process_memory_mib;
    bool mig_capable, mig_enabled;
    bool mig_reset_required; /* SetMigMode's activation: NVML_ERROR_RESET_REQUIRED */
    struct mig_seed mig;     /* table, mode and instances the state starts from */
    bool nvlink;             /* nvlink_peers given: NVLink queries are supported */
    unsigned npeers;
    unsigned peers[NVML_NVLINK_MAX_LINKS]; /* link i leads to GPU peers[i] */
};

/* A validated set of GPUs: UUIDs unique, every peer index below ngpus. */
struct gpus_config {
    char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    unsigned ngpus;
    struct nvmlDevice_st gpus[GPUS_MAX];
};

/* Where the GPUs come from, and the last good set of them. Embedded in the
 * caller's state; zero-filled is a valid "released" value. */
struct gpus_source {
    char path[PATH_MAX];    /* the file; "" = the built-in GPUs */
    struct gpus_config cfg; /* the last good state: read it, never write it */
    /* The rest is gpus.c's: the last read of path, to tell whether it changed. */
    bool seen;            /* the fields below describe a read */
    struct stat st;       /* of the file read */
    long long read_at_ns; /* CLOCK_REALTIME just before that read */
    char *bytes;          /* its content, good or bad; owned */
    size_t nbytes;
    bool bytes_ok; /* ... and whether it parsed */
};

/*
 * Starts over with `path` (FAKENVML_CONFIG's value, borrowed; NULL or "" for
 * the built-in GPUs: eight H100s, all NVLinked to each other). An earlier read
 * is forgotten first, so `s` may be zero-filled, released or in use.
 * Returns 0 with s->cfg filled, or -1 when the path is longer than PATH_MAX - 1
 * or the file cannot be read or is bad: the problem is then written to stderr,
 * s->cfg is left as it was and no read is remembered.
 */
int gpus_source_init(struct gpus_source *s, const char *path);

/*
 * Re-reads the file if it may have changed (see Decisions). A good new file
 * replaces s->cfg in place; a bad one leaves s->cfg alone and is reported on
 * stderr: once per content, or on every call while the file cannot be read.
 * Nothing happens for the built-in GPUs or while the file is missing.
 */
void gpus_source_refresh(struct gpus_source *s);

/* Frees the remembered read; s->path and s->cfg stay. Idempotent. */
void gpus_source_release(struct gpus_source *s);

#endif

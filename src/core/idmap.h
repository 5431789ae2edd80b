/*
 * idmap.h - job id -> index, for one pass (open addressing, linear probing).
 *
 * Pending jobs are stored as their queue index, running jobs as their index
 * in the running set with IDMAP_RUNNING added; an id is present at most once.
 * The map keeps its memory from pass to pass (the result holds it) and is
 * emptied by a generation count, not by clearing megabytes every pass.
 */
#ifndef GPUORCH_CORE_IDMAP_H
#define GPUORCH_CORE_IDMAP_H

#include <stddef.h>
#include <stdint.h>

#define IDMAP_RUNNING (1u << 31)
#define IDMAP_NONE    UINT32_MAX

struct idmap_slot;

struct idmap {
    struct idmap_slot *slots;
    size_t mask;  /* slots - 1, a power of two minus one */
    uint32_t gen; /* slots of another generation are empty */
};

/* Empties the map, with room for `n` ids; keeps the memory it has when that
 * is enough. A zeroed struct idmap is a valid empty map. 0 or GPO_ENOMEM. */
int idmap_init(struct idmap *m, size_t n);
void idmap_release(struct idmap *m);

/* Inserts id -> value. 0, or GPO_EEXIST if the id is already there. */
int idmap_put(struct idmap *m, uint64_t id, uint32_t value);

/* The value stored for id, or IDMAP_NONE. */
uint32_t idmap_get(const struct idmap *m, uint64_t id);

#endif

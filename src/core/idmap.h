/*
 * idmap.h - job id -> index, for one pass.
 *
 * Pending jobs are stored as their queue index, running jobs as their index
 * in the running set with IDMAP_RUNNING added; an id is present at most once.
 * The map keeps its memory from pass to pass (the result holds it) and is
 * emptied by a generation count, not by clearing megabytes every pass.
 *
 * Job ids are handed out in order, so the ids of one pass mostly lie in a
 * range not much wider than their number. The map remembers the range it saw
 * and gives the next pass a directly indexed window over it (plus room for
 * the ids submitted since): an id there costs one array access, and a queue
 * given in id order touches the window in order. Ids outside the window go to
 * an open-addressing hash table (linear probing).
 */
#ifndef GPUORCH_CORE_IDMAP_H
#define GPUORCH_CORE_IDMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IDMAP_RUNNING (1u << 31)
#define IDMAP_NONE    UINT32_MAX

struct idmap_slot;
struct idmap_cell;

struct idmap {
    struct idmap_slot *slots; /* the hash table */
    size_t mask;              /* slots - 1, a power of two minus one */
    uint32_t gen;             /* slots and cells of another generation are empty */
    struct idmap_cell *win;   /* the window: id base + k is cell k */
    uint64_t base;
    size_t nwin, win_cap;
    uint64_t seen_min, seen_max; /* ids put since the last init, */
    bool seen;                   /* if any */
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

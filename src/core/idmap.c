#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "core/idmap.h"
#include "base/banned.h"

struct idmap_slot {
    uint64_t id;
    uint32_t value;
    uint32_t gen; /* the map's generation when the slot was filled */
};

struct idmap_cell {
    uint32_t value;
    uint32_t gen;
};

/* The window for the next pass: the ids seen in the last one, and room for
 * about half as many new ones above them. When they were spread wider than
 * 64 cells per id (or 1 Mi cells, 8 MiB), the window covers the newest of
 * them: those below it go to the hash table. A busy queue under LAS holds
 * jobs from far back (the ones it evicted), so the window is wide: a cell
 * is 8 bytes, touched in id order, where a hash probe is a cache miss. */
static void choose_window(const struct idmap *m, size_t n, uint64_t *ret_base, size_t *ret_nwin)
{
    *ret_base = 0;
    *ret_nwin = 0;
    if (!m->seen || n == 0)
        return;
    uint64_t span = m->seen_max - m->seen_min;
    size_t room = n / 2 + 1024, widest = 64 * n + 3072;
    if (widest > ((size_t)1 << 20))
        widest = (size_t)1 << 20;
    uint64_t below = span >= widest ? span - widest + 1 : 0;
    *ret_base = m->seen_min + below;
    *ret_nwin = (size_t)(span - below) + 1 + room;
}

int idmap_init(struct idmap *m, size_t n)
{
    size_t size = 16;
    while (size < 2 * n)
        size *= 2;
    /* Grow the table when it is too small; shrink it when it is four times too
     * big, so that a queue that once was long does not spread the probes of
     * every later pass over megabytes. */
    if (!m->slots || size > m->mask + 1 || 4 * size < m->mask + 1) {
        struct idmap_slot *slots = gpo_calloc(size, sizeof(*slots));
        if (!slots)
            return GPO_ENOMEM;
        free(m->slots);
        m->slots = slots;
        m->mask = size - 1;
    }
    uint64_t base;
    size_t nwin;
    choose_window(m, n, &base, &nwin);
    if (nwin > m->win_cap) {
        size_t cap = nwin + nwin / 4;
        struct idmap_cell *win = gpo_calloc(cap, sizeof(*win));
        if (!win)
            return GPO_ENOMEM;
        free(m->win);
        m->win = win;
        m->win_cap = cap;
    }
    m->base = base;
    m->nwin = nwin;
    m->seen_min = UINT64_MAX;
    m->seen_max = 0;
    m->seen = false;
    /* New arrays come zeroed (generation 0, never current): only after 2^32
     * passes must the old stamps be cleared. */
    if (++m->gen == 0) {
        memset(m->slots, 0, (m->mask + 1) * sizeof(*m->slots));
        if (m->win)
            memset(m->win, 0, m->win_cap * sizeof(*m->win));
        m->gen = 1;
    }
    return 0;
}

void idmap_release(struct idmap *m)
{
    if (!m)
        return;
    free(m->slots);
    free(m->win);
    memset(m, 0, sizeof(*m));
}

static size_t hash(uint64_t id)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdULL;
    id ^= id >> 33;
    return (size_t)id;
}

int idmap_put(struct idmap *m, uint64_t id, uint32_t value)
{
    if (id < m->seen_min)
        m->seen_min = id;
    if (id > m->seen_max)
        m->seen_max = id;
    m->seen = true;
    uint64_t off = id - m->base;
    if (off < m->nwin) {
        struct idmap_cell *c = &m->win[off];
        if (c->gen == m->gen)
            return GPO_EEXIST;
        *c = (struct idmap_cell){value, m->gen};
        return 0;
    }
    for (size_t i = hash(id) & m->mask;; i = (i + 1) & m->mask) {
        struct idmap_slot *s = &m->slots[i];
        if (s->gen != m->gen) {
            *s = (struct idmap_slot){id, value, m->gen};
            return 0;
        }
        if (s->id == id)
            return GPO_EEXIST;
    }
}

uint32_t idmap_get(const struct idmap *m, uint64_t id)
{
    uint64_t off = id - m->base;
    if (off < m->nwin) {
        const struct idmap_cell *c = &m->win[off];
        return c->gen == m->gen ? c->value : IDMAP_NONE;
    }
    for (size_t i = hash(id) & m->mask;; i = (i + 1) & m->mask) {
        const struct idmap_slot *s = &m->slots[i];
        if (s->gen != m->gen)
            return IDMAP_NONE;
        if (s->id == id)
            return s->value;
    }
}

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/idmap.h"
#include "util/banned.h"

struct idmap_slot {
    uint64_t id;
    uint32_t value;
    uint32_t gen; /* the map's generation when the slot was filled */
};

int idmap_init(struct idmap *m, size_t n)
{
    size_t size = 16;
    while (size < 2 * n)
        size *= 2;
    if (!m->slots || size > m->mask + 1) {
        struct idmap_slot *slots = calloc(size, sizeof(*slots));
        if (!slots)
            return GPO_ENOMEM;
        free(m->slots);
        m->slots = slots;
        m->mask = size - 1;
        m->gen = 0;
    }
    if (++m->gen == 0) {
        /* 2^32 passes later: clear once, and start over. */
        memset(m->slots, 0, (m->mask + 1) * sizeof(*m->slots));
        m->gen = 1;
    }
    return 0;
}

void idmap_release(struct idmap *m)
{
    if (!m)
        return;
    free(m->slots);
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
    for (size_t i = hash(id) & m->mask;; i = (i + 1) & m->mask) {
        const struct idmap_slot *s = &m->slots[i];
        if (s->gen != m->gen)
            return IDMAP_NONE;
        if (s->id == id)
            return s->value;
    }
}

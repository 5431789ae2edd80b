#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/idmap.h"
#include "util/banned.h"

struct idmap_slot {
    uint64_t id;
    uint32_t value; /* IDMAP_NONE: empty */
};

int idmap_init(struct idmap *m, size_t n)
{
    size_t size = 16;
    while (size < 2 * n)
        size *= 2;
    m->slots = malloc(size * sizeof(*m->slots));
    if (!m->slots)
        return GPO_ENOMEM;
    /* All ones: every slot's value is IDMAP_NONE (and its id is unused). */
    memset(m->slots, 0xff, size * sizeof(*m->slots));
    m->mask = size - 1;
    return 0;
}

void idmap_release(struct idmap *m)
{
    if (!m)
        return;
    free(m->slots);
    m->slots = NULL;
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
        if (m->slots[i].value == IDMAP_NONE) {
            m->slots[i] = (struct idmap_slot){id, value};
            return 0;
        }
        if (m->slots[i].id == id)
            return GPO_EEXIST;
    }
}

uint32_t idmap_get(const struct idmap *m, uint64_t id)
{
    for (size_t i = hash(id) & m->mask;; i = (i + 1) & m->mask) {
        if (m->slots[i].value == IDMAP_NONE)
            return IDMAP_NONE;
        if (m->slots[i].id == id)
            return m->slots[i].value;
    }
}

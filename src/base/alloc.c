#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "base/banned.h"

/* The fault hook (alloc.h): the one mutable state of src/base, for tests.
 * fail_at is the value of count at which an allocation fails; 0: none. */
struct alloc_hook {
    uint64_t count;
    uint64_t fail_at;
};

static _Thread_local struct alloc_hook hook;

bool gpo_alloc_fault(void)
{
    struct alloc_hook *h = &hook;
    if (__builtin_expect(++h->count != h->fail_at, 1))
        return false;
    h->fail_at = 0;
    return true;
}

void gpo_alloc_fail_at(uint64_t n)
{
    hook.fail_at = n ? hook.count + n : 0;
}

uint64_t gpo_alloc_count(void)
{
    return hook.count;
}

void *gpo_malloc(size_t size)
{
    return gpo_alloc_fault() ? NULL : malloc(size);
}

void *gpo_calloc(size_t n, size_t size)
{
    return gpo_alloc_fault() ? NULL : calloc(n, size);
}

void *gpo_realloc(void *p, size_t size)
{
    return gpo_alloc_fault() ? NULL : realloc(p, size);
}

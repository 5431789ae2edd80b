/*
 * vec.h - growing a caller-owned array, for the core's result and state.
 */
#ifndef GPUORCH_CORE_VEC_H
#define GPUORCH_CORE_VEC_H

#include <stddef.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "base/err.h"

/* Makes *array hold at least `need` elements of `elem` bytes (doubling).
 * 0, or GPO_ENOMEM with *array and *cap unchanged. */
static inline int vec_grow(void **array, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 8;
    while (n < need)
        n *= 2;
    void *p = gpo_realloc(*array, n * elem);
    if (!p)
        return GPO_ENOMEM;
    *array = p;
    *cap = n;
    return 0;
}

#endif

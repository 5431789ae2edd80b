/*
 * sort.h - a stable merge sort with the comparison inlined, for the arrays a
 * pass sorts every time (releases, preemption candidates, attained service).
 *
 * qsort calls its comparison through a pointer, some 25 instructions per
 * compare; these arrays hold one entry per running job, so that is a
 * measurable part of a pass. SORT_DEFINE(name, type, before) defines
 *     static int name(type *a, size_t n)
 * which sorts a[0, n) so that before(x, y) holds for no y ahead of x, and
 * returns 0 or GPO_ENOMEM (the scratch buffer; a is then unchanged). A run
 * already in order costs n - 1 compares and no allocation.
 *
 * For arrays read in order only as far as needed (queue order, backfill's
 * releases), a binary min-heap: SIFT_DOWN_DEFINE(name, type, before) defines
 *     static void name(type *h, size_t n, size_t i)
 * which moves h[i] down until h[0, n) is a heap under `before` below i.
 */
#ifndef GPUORCH_CORE_SORT_H
#define GPUORCH_CORE_SORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"

#define SORT_RUN 16 /* insertion-sorted runs the merges start from */

#define SORT_DEFINE(name, type, before)                                                            \
    static void name##_insertion(type *a, size_t n)                                                \
    {                                                                                              \
        for (size_t i = 1; i < n; i++) {                                                           \
            type x = a[i];                                                                         \
            size_t k = i;                                                                          \
            for (; k > 0 && before(&x, &a[k - 1]); k--)                                            \
                a[k] = a[k - 1];                                                                   \
            a[k] = x;                                                                              \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    static int name(type *a, size_t n)                                                             \
    {                                                                                              \
        size_t sorted = 1;                                                                         \
        while (sorted < n && !before(&a[sorted], &a[sorted - 1]))                                  \
            sorted++;                                                                              \
        if (sorted >= n)                                                                           \
            return 0;                                                                              \
        type *tmp = gpo_malloc(n * sizeof(*tmp));                                                  \
        if (!tmp)                                                                                  \
            return GPO_ENOMEM;                                                                     \
        for (size_t i = 0; i < n; i += SORT_RUN)                                                   \
            name##_insertion(a + i, n - i < SORT_RUN ? n - i : SORT_RUN);                          \
        type *src = a, *dst = tmp;                                                                 \
        for (size_t width = SORT_RUN; width < n; width *= 2) {                                     \
            for (size_t lo = 0; lo < n; lo += 2 * width) {                                         \
                size_t mid = lo + width < n ? lo + width : n;                                      \
                size_t hi = lo + 2 * width < n ? lo + 2 * width : n;                               \
                size_t x = lo, y = mid, k = lo;                                                    \
                while (x < mid && y < hi)                                                          \
                    dst[k++] = before(&src[y], &src[x]) ? src[y++] : src[x++];                     \
                while (x < mid)                                                                    \
                    dst[k++] = src[x++];                                                           \
                while (y < hi)                                                                     \
                    dst[k++] = src[y++];                                                           \
            }                                                                                      \
            type *t = src;                                                                         \
            src = dst;                                                                             \
            dst = t;                                                                               \
        }                                                                                          \
        if (src != a)                                                                              \
            memcpy(a, src, n * sizeof(*a));                                                        \
        free(tmp);                                                                                 \
        return 0;                                                                                  \
    }

#define SIFT_DOWN_DEFINE(name, type, before)                                                       \
    static void name(type *h, size_t n, size_t i)                                                  \
    {                                                                                              \
        type x = h[i];                                                                             \
        for (;;) {                                                                                 \
            size_t c = 2 * i + 1;                                                                  \
            if (c >= n)                                                                            \
                break;                                                                             \
            if (c + 1 < n && before(&h[c + 1], &h[c]))                                             \
                c++;                                                                               \
            if (!before(&h[c], &x))                                                                \
                break;                                                                             \
            h[i] = h[c];                                                                           \
            i = c;                                                                                 \
        }                                                                                          \
        h[i] = x;                                                                                  \
    }

#endif

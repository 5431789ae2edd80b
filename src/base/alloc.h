/*
 * alloc.h - the allocator of gpuorch's libraries, and a fault hook that
 * makes any one allocation fail (SQLite's sqlite3FaultSim habit).
 *
 * gpo_malloc, gpo_calloc and gpo_realloc behave as malloc, calloc and
 * realloc; what they return is released with free. src/core allocates only
 * through them (tests/tools/check_core_purity.sh checks its objects), so a
 * test can fail the 1st, 2nd, ... Nth allocation of a call and show that
 * each failure is reported and undone.
 *
 * The hook is the one mutable state of src/base, and it is for tests: a
 * counter per thread of the allocations made, and the count at which the
 * next failure is due. Unarmed, it costs an allocation one thread-local
 * increment and compare. Being per thread, a test arming it sees only its
 * own thread's allocations.
 */
#ifndef GPUORCH_BASE_ALLOC_H
#define GPUORCH_BASE_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* malloc, calloc and realloc, each counting one allocation and failing
 * (NULL; gpo_realloc then leaves p as it was) when the hook says so. */
void *gpo_malloc(size_t size);
void *gpo_calloc(size_t n, size_t size);
void *gpo_realloc(void *p, size_t size);

/* Counts one allocation and says whether the hook fails it. For allocators
 * that hand out memory of their own (an arena carving a chunk): each of
 * their allocations is then one the hook can fail, as a malloc is. */
bool gpo_alloc_fault(void);

/* Test hook: the nth allocation from now on this thread fails (1: the
 * next), and only that one; 0 disarms. Arming again replaces the previous
 * setting. */
void gpo_alloc_fail_at(uint64_t n);

/* Allocations counted on this thread so far (every gpo_* call and every
 * gpo_alloc_fault): the difference around a call is how many it makes. */
uint64_t gpo_alloc_count(void);

#endif

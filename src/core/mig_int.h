/*
 * mig_int.h - what mig.c and mig_plan.c share (not for other modules).
 */
#ifndef GPUORCH_CORE_MIG_INT_H
#define GPUORCH_CORE_MIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/mig.h"

/* A bounded text writer: keeps the text NUL-terminated, counts what it could
 * not keep. buf NULL or size 0: writes nothing. */
struct mig_out {
    char *buf;
    size_t size;
    size_t len;
};
void mig_out_init(struct mig_out *o, char *buf, size_t size);
/* Formats %s, %u, %d, %llu and %% only. */
void mig_outf(struct mig_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The first n bytes of a and b equal, ignoring ASCII case (b at least n long). */
bool mig_prefix_eq(const char *a, const char *b, size_t n);
/* a[0..n) equals all of b, ignoring ASCII case. */
bool mig_name_eq(const char *a, const char *b, size_t n);

/* The slots [start, start + size) as a mask. */
static inline uint8_t mig_span(unsigned start, unsigned size)
{
    return (uint8_t)(((1u << size) - 1u) << start);
}

/* The free capacity of the slots in `free_mask` (mig.h, mig_place_new): for
 * each compute profile from the largest down, 3 bits of how many instances
 * of it alone fit there; a larger value is better. */
uint32_t mig_capacity(const struct mig_type *t, uint8_t free_mask);

/* The placement of a new `profile` instance in the slots `occ` leaves free
 * that leaves the best capacity (ties: the lower start); -1 if none.
 * *ret_score its capacity. */
int mig_best_start(const struct mig_type *t, unsigned profile, uint8_t occ, uint32_t *ret_score);

/* Does the profile have a placement starting at `start`? */
bool mig_start_ok(const struct mig_profile *p, unsigned start);

#endif

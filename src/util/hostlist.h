/*
 * hostlist.h - Slurm's host-list syntax, both ways.
 *
 * Slurm writes a set of host names as `node[01-04,07],login,gpu[1-2]`: the
 * names that share a prefix before their trailing digits go into one
 * bracket of ranges. What sinfo prints, what SLURM_JOB_NODELIST holds and
 * what `scontrol show hostnames` takes. The rules kept here:
 *
 *   - A name is a prefix and, optionally, trailing digits (at most 18, so
 *     the number fits in 64 bits; longer digit runs stay in the prefix).
 *   - Zero-padding is part of the name: node01 and node1 are two hosts. A
 *     range is written with the width of its first number when that number
 *     has a leading zero (`[08-10]` is 08, 09, 10), unpadded otherwise
 *     (`[9-10]` is 9 and 10).
 *   - Compressed output is sorted (prefix, then number, then width) with
 *     duplicates dropped; a single name of a prefix has no brackets.
 *   - Expansion also takes a suffix after the bracket (`node[1-2]-ib`) and
 *     several brackets in one name (`r[1-2]n[1-2]`, every combination in
 *     order), as Slurm does.
 */
#ifndef GPUORCH_UTIL_HOSTLIST_H
#define GPUORCH_UTIL_HOSTLIST_H

#include <stddef.h>

/* The most names one expansion returns (a bigger host list is refused with
 * GPO_E2BIG), and the longest name either direction handles. */
#define HOSTLIST_MAX_NAMES 65536
#define HOSTLIST_MAX_NAME  255

/*
 * Writes names[0, n) (borrowed; each a non-empty name of at most
 * HOSTLIST_MAX_NAME bytes without ',', '[', ']', white space or control
 * characters) in the compressed form into buf (len bytes, always
 * NUL-terminated when len > 0). n == 0 writes "".
 * Returns 0; GPO_EINVAL for a name that cannot be written (buf gets "");
 * GPO_ENOBUFS when the text does not fit (buf gets ""); GPO_ENOMEM.
 */
int hostlist_compress(const char *const *names, size_t n, char *buf, size_t len);

/*
 * Expands a host list (`node[01-03,07],login`) into its names, in the
 * order written. On success *ret is a new array of *ret_n new strings
 * (caller frees with hostlist_free); an empty text gives 0 names and a
 * NULL array. Returns 0; GPO_EINVAL with one line in err for bad syntax
 * (an unclosed bracket, an empty name or range, a range running
 * backwards, a non-digit in a range); GPO_E2BIG for more than
 * HOSTLIST_MAX_NAMES names; GPO_ENOMEM.
 */
int hostlist_expand(const char *text, char ***ret, size_t *ret_n, char *err, size_t errlen);

/* Frees what hostlist_expand returned; NULL fine. */
void hostlist_free(char **names, size_t n);

#endif

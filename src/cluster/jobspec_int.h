/*
 * jobspec_int.h - private to jobspec.c and jobspec_shape.c: what jsonv
 * decodes a submission into, and the steps they share.
 */
#ifndef GPUORCH_CLUSTER_JOBSPEC_INT_H
#define GPUORCH_CLUSTER_JOBSPEC_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cluster/jobspec.h"
#include "util/jsonv.h"

#define HOST_MEM_MAX_MIB (INT64_C(64) << 20) /* 64 TiB */
#define CPUS_MAX         4096

/* jsonv stores an enum choice through an int. */
_Static_assert(sizeof(enum jobspec_dep_type) == sizeof(int), "dep type is stored as an int");
_Static_assert(sizeof(enum jobspec_open_mode) == sizeof(int), "open mode is stored as an int");
_Static_assert(sizeof(enum jobspec_launch) == sizeof(int), "launch is stored as an int");

/* The spec itself, plus the members whose JSON and C types differ,
 * converted by the steps. */
struct wire {
    struct jobspec spec;
    bool stored; /* jobspec_decode_stored: what an earlier version accepted */
    int64_t cpus;
    enum jsonv_presence cpus_p, mem_p; /* a total given, to check against the shape */
    json_t *gpus;                      /* borrowed from the body */
    enum jsonv_presence gpus_p;
    json_t *env;   /* borrowed from the body */
    char *signal;  /* "[B:]SIG[@SECS]", malloc'd by jsonv; the decode frees it */
    json_t *serve; /* borrowed from the body */
};

/* The names of enum jobspec_open_mode and enum jobspec_launch, in order. */
extern const char *const jobspec_open_modes[];
extern const char *const jobspec_launches[];

/* GPO_EINVAL with the message in err. */
int jobspec_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#ifdef __clang_analyzer__
/* clang's static analyzer (make lint) does not follow calls into variadic
 * functions: for the analysis only, jobspec_fail says what it returns. */
#define jobspec_fail(...) __extension__({ (void)jobspec_fail(__VA_ARGS__), GPO_EINVAL; })
#endif
int jobspec_out_of_memory(char *err, size_t errlen);

/* The shape's rules (after "gpus" is read): tasks, the totals they make,
 * memory, the constraint's and the signal's syntax. */
int jobspec_check_shape(struct wire *w, char *err, size_t errlen);

/* The shape's keys into o: 0, or non-zero when out of memory. */
int jobspec_shape_json(const struct jobspec *s, json_t *o);

/* jobspec_mig.c: "mig_profile" (after the shape: it needs the totals)
 * checked, in its canonical spelling, against the fields it excludes and
 * the job's GPU type. */
int jobspec_check_mig(struct wire *w, char *err, size_t errlen);

/* jobspec_serve.c: "serve" (refused unless stored) into w->spec.serve;
 * its key into o when set (0, or non-zero when out of memory); a deep copy
 * (0 or GPO_ENOMEM, *ret untouched). */
int jobspec_check_serve(struct wire *w, char *err, size_t errlen);
int jobspec_serve_json(const struct jobspec *s, json_t *o);
int jobspec_serve_copy(const struct jobspec_serve *src, struct jobspec_serve *ret);

#endif

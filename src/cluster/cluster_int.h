/*
 * cluster_int.h - what the files of src/cluster share and nobody else uses:
 * the rules names are checked against (their text goes into messages) and
 * the field checks every kind's decoder makes. Each check returns 0, or
 * GPO_EINVAL with a message naming `field` (a path, "quotas[1].pool").
 */
#ifndef GPUORCH_CLUSTER_CLUSTER_INT_H
#define GPUORCH_CLUSTER_CLUSTER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "util/jsonv.h"

/* User text fit to quote in a message (see jsonv_quote). */
const char *cluster_quote(const char *s, char buf[JSONV_QUOTE_MAX + 4]);

#define MILLI_MAX ((int64_t)CLUSTER_GPUS_MAX * SCHED_MILLI)

#define NAME_RULE "1 to 63 bytes of a-z, 0-9, '-', '_' and '.', starting with a letter or digit"
#define TYPE_RULE                                                                                  \
    "1 to 63 bytes of letters, digits, '-', '_' and '.', starting with a letter or digit"
#define HOST_RULE                                                                                  \
    "labels of 1 to 63 letters, digits and '-' (not at either end) joined by '.', at most 253 "    \
    "bytes"
#define LOGIN_RULE "[a-z_][a-z0-9_-]*, at most 32 bytes"
#define UUID_RULE  "'GPU-' and 8-4-4-4-12 hex digits, or 'MIG-' and its instance id"
#define ADDR_RULE  "a host name, or an IPv4 or IPv6 address literal"

/* "GPU-" and 8-4-4-4-12 hex digits, or "MIG-" and its instance id. */
bool cluster_uuid_valid(const char *s);
/* A host name, or an IPv4 or IPv6 literal: where the controller reaches an agent. */
bool cluster_addr_valid(const char *s);

/* s is present and valid(s); what names the shape and rule explains it. */
int cluster_check_shape(bool (*valid)(const char *), const char *rule, const char *what,
                        const char *field, const char *s, char *err, size_t errlen);
int cluster_check_name(const char *field, const char *s, char *err, size_t errlen);
int cluster_check_type(const char *field, const char *s, char *err, size_t errlen);
/* A description of at most CLUSTER_DESC_MAX bytes (NULL is fine). */
int cluster_check_desc(const char *s, char *err, size_t errlen);
int cluster_check_range(const char *field, int64_t v, int64_t lo, int64_t hi, char *err,
                        size_t errlen);
/* A milli-GPU amount built by hand: 0..MILLI_MAX, or -1 where none_ok. */
int cluster_check_milli(const char *field, int64_t v, bool none_ok, char *err, size_t errlen);
/* A JSON number of GPUs (at most 3 decimals) as milli-GPU; -1 where none_ok. */
int cluster_gpus_to_milli(const char *field, double x, bool none_ok, int64_t *ret, char *err,
                          size_t errlen);

/* A pool's aliases and node features (cluster_pool.c): their rules; their
 * keys into o (0 or GPO_ENOMEM); freeing them. */
int cluster_pool_check_extra(const struct cluster_pool *p, char *err, size_t errlen);
int cluster_pool_extra_json(const struct cluster_pool *p, json_t *o);
void cluster_pool_extra_release(struct cluster_pool *p);
/* The rules between p and the cluster's other pools (p may replace the one
 * of its name): no alias twice, at most SCHED_MAX_FEATURES feature names. */
int cluster_pool_prepare(const struct cluster *m, const struct cluster_pool *p, char *err,
                         size_t errlen);

/* cluster_mig.c: the catalogue's spelling of MIG profile `name` on some
 * type ("MIG 1g.10gb": "1g.10gb"; static), or NULL; every profile name of
 * the catalogue once, for messages (into buf, returned). */
const char *cluster_mig_profile_name(const char *name);
const char *cluster_mig_profiles_known(char *buf, size_t size);

/* cluster_view_mig.c: j's mig_types and mig_profile[] from the spec's
 * "mig_profile" or "gpu_mem_mib" (j->gpu_type already resolved against c).
 * GPO_EINVAL with the reason where a profile by name lands on no GPU type
 * of c. */
int cluster_job_mig(const struct sched_cluster *c, const struct jobspec *spec, struct sched_job *j,
                    char *err, size_t errlen);

/* v[0..n) as a JSON array of strings: a new array, or NULL when out of
 * memory (cluster_pool.c). */
json_t *cluster_strings_json(char *const *v, size_t n);

#endif

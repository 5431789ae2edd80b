/*
 * policy.h - the policies the simulator replays: named presets, and policy
 * files that change any setting of the core's policy.
 *
 * A policy file is YAML or JSON (doc.h), one mapping; every field is
 * optional, and those left out keep the value of `base`:
 *
 *     # LAS with lower thresholds, no migration
 *     name: las-1h               # in outputs; default: the file's name less its extension
 *     base: default              # a preset below (not an oracle); default: default
 *     order: fairshare           # fifo, priority, fairshare, las
 *     within_team: las           # submit, las (under fairshare: the order within a team)
 *     packing: binpack           # binpack, spread
 *     backfill: true
 *     preemption: true
 *     migrate: false             # acts only with preemption
 *     fairshare_half_life_s: 604800         # 1 .. 315360000
 *     las_thresholds_gpu_s: [3600, 36000]   # increasing, each 1 .. 10^12; at most 7
 *     las_evict_larger: false               # LAS may evict jobs larger than it admits
 *     preempt_grace_s: 30                   # 0 .. 86400
 *     default_time_limit_s: 86400           # 1 .. 315360000
 *
 * These are the lines `gpuorch policy [NAME|FILE]` prints (sim_policy_write),
 * so its output is a policy file. An unknown field, a wrong type or value is
 * an error naming the file, line and field ("las.yaml:3: order: expected one
 * of fifo, priority, fairshare, las, got 'sjf'").
 *
 * The oracles sjf and srtf are presets only: a file describes a policy the
 * controller could run, and the controller does not know durations.
 */
#ifndef GPUORCH_SIM_POLICY_H
#define GPUORCH_SIM_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/model.h"

/* A policy's name: 1 to this many bytes of [A-Za-z0-9._+-], the first a
 * letter or digit (it goes into --jobs-out's file names). */
#define SIM_POLICY_NAME_MAX 64

enum sim_oracle {
    SIM_ORACLE_NONE = 0,
    SIM_ORACLE_SJF,  /* shortest (true) job first, not preemptive */
    SIM_ORACLE_SRTF, /* shortest (true) remaining time first, preemptive */
};

/* A policy the simulator can replay: a core policy, or an oracle. */
struct sim_policy {
    char name[SIM_POLICY_NAME_MAX + 1]; /* the preset's, or the file's */
    struct sched_policy core;
    enum sim_oracle oracle;
};

/* Finds a preset ("default", "fifo", "fifo-backfill", "priority",
 * "fairshare", "las", "spread", "sjf", "srtf"). 0, or GPO_ENOENT. */
int sim_policy_find(const char *name, struct sim_policy *ret);
/* The k-th preset's name (static); NULL past the last. */
const char *sim_policy_name(size_t k);
/* Every preset's name, "default, fifo, ..., srtf", into buf (n bytes), for
 * --help and messages. */
void sim_policy_names(char *buf, size_t n);

/* Whether --policy's item `arg` names a file rather than a preset: it has a
 * '/' or a '.' in it. */
bool sim_policy_is_file(const char *arg);

/*
 * Parses a policy file's text (len bytes, not necessarily terminated). `path`
 * is used in messages and for the default name (its last component less the
 * extension). 0 and *ret set, or an error with its one-line message in err
 * (errlen bytes): GPO_EINVAL, GPO_ENOMEM.
 */
int sim_policy_parse(struct sim_policy *ret, const char *text, size_t len, const char *path,
                     char *err, size_t errlen);
/* Reads and parses the policy file at path, likewise. */
int sim_policy_load(struct sim_policy *ret, const char *path, char *err, size_t errlen);

/*
 * What `gpuorch sim --policy` and `gpuorch policy` take: a preset by name,
 * else a policy file's path (sim_policy_is_file). 0 and *ret set, or an error
 * with its one-line message in err: an unknown name (GPO_EINVAL, listing the
 * presets) or the file's, as sim_policy_load gives it.
 */
int sim_policy_resolve(const char *arg, struct sim_policy *ret, char *err, size_t errlen);

/* Writes p as a policy file to f (an oracle: GPO_EINVAL, nothing written).
 * 0, or GPO_EINVAL if f reports an error. */
int sim_policy_write(FILE *f, const struct sim_policy *p);

#endif

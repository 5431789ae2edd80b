/*
 * spec.h - the cluster a simulation runs on: node pools and teams.
 *
 * Read from a YAML or a JSON file (the same fields; JSON if the text starts
 * with '{' after white space, YAML otherwise), or derived from a trace when no
 * file is given. docs/simulator.md documents the format; for example:
 *
 *     # Helios' replay of philly_vc: each VC on its own nodes.
 *     pools:
 *       - name: vc-6214e9
 *         nodes: 64
 *         gpus_per_node: 8
 *         gpu_type: P40-24GB
 *         gpu_mem_gib: 24
 *         cpus: 48          # per node
 *         mem_gib: 512      # per node
 *     teams:
 *       - name: vc-6214e9
 *         queues: [6214e9]  # trace queues whose jobs are this team's
 *         weight: 1
 *         borrow_limit_gpus: 0      # elsewhere (pools it has no quota in); omitted: no limit
 *         quotas:
 *           - pool: vc-6214e9
 *             guaranteed_gpus: 512
 *             borrow_limit_gpus: 0  # above the guarantee; omitted: no limit
 *     unmapped_queues: drop         # or the name of a team that takes them
 *
 * Every field is checked. An unknown field, a wrong type, an out-of-range
 * value, a duplicate name, or a reference to an unknown pool or team is an
 * error naming the file and the field ("spec.yaml:14: teams[2].quotas[0].pool:
 * no pool named 'x'"), with the line for YAML (JSON gives lines for syntax
 * errors only).
 *
 * Types follow YAML 1.2's core schema (util/yamljson.h): a quoted scalar is a
 * string; a plain one that reads as a number, true/false or null is one. The
 * exception is a queue name, which is the text as written whatever it reads
 * as: `queues: [6214e9, 103959]` are the queues "6214e9" and "103959" (in
 * JSON a queue name must be a string). Anchors, aliases and tags other than
 * !!str are errors.
 *
 * Fields, their ranges and defaults ("required" where there is none):
 *   pools (required, 1 .. SIM_SPEC_MAX_POOLS):
 *     name           required; 1 to 128 bytes, no control characters, unique
 *     nodes          required; an integer >= 1 (all pools: SIM_SPEC_MAX_NODES)
 *     gpus_per_node  required; an integer 1 .. SIM_SPEC_MAX_GPUS_PER_NODE
 *     gpu_type       a name as above; "GPU"
 *     gpu_mem_gib    a number > 0 and <= 4096 (>= 1 MiB once rounded); 80
 *     cpus           an integer 1 .. 1048576; 8 per GPU
 *     mem_gib        a number > 0 and <= 1048576; 64 per GPU
 *     nvlink         true or false; true
 *   teams (required, 1 .. SIM_SPEC_MAX_TEAMS):
 *     name           required; as a pool's name, unique among teams
 *     queues         a list of queue names (at most 1024 bytes each); none
 *     weight         an integer 1 .. 1000000; 1
 *     borrow_limit_gpus  a number 0 .. 64000000; no limit
 *     quotas         a list, at most one per pool; none
 *       pool             required; the name of a pool
 *       guaranteed_gpus  a number 0 .. 64000000; 0
 *       borrow_limit_gpus  a number 0 .. 64000000; no limit
 *   unmapped_queues  "drop" or a team's name ("drop" always means drop); drop
 * A guarantee is not checked against its pool's size, nor the guarantees of a
 * pool against each other: over-commitment is the spec's own business.
 */
#ifndef GPUORCH_SIM_SPEC_H
#define GPUORCH_SIM_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/trace.h"

/* Caps on a spec: bigger is an error. */
#define SIM_SPEC_MAX_POOLS         1024u
#define SIM_SPEC_MAX_TEAMS         4096u
#define SIM_SPEC_MAX_NODES         1000000u /* in all pools together */
#define SIM_SPEC_MAX_GPUS_PER_NODE 64u
#define SIM_SPEC_MAX_QUEUES        100000u /* queue names over all teams */
/* Milli-GPU of the largest cluster: a quota or limit above it is an error. */
#define SIM_SPEC_MAX_MILLI ((int64_t)SIM_SPEC_MAX_NODES * SIM_SPEC_MAX_GPUS_PER_NODE * 1000)

struct sim_spec_pool {
    char *name;
    uint32_t nodes;         /* >= 1 */
    uint32_t gpus_per_node; /* 1 .. SIM_SPEC_MAX_GPUS_PER_NODE */
    char *gpu_type;         /* default "GPU" */
    uint32_t gpu_mem_mib;   /* from gpu_mem_gib (may be fractional); default 80 GiB */
    uint32_t cpus;          /* per node; default 8 per GPU */
    uint64_t mem_mib;       /* per node, from mem_gib; default 64 GiB per GPU */
    bool nvlink;            /* a node's GPUs share one NVLink domain; default true */
};

/* Quotas in milli-GPU (guaranteed_gpus / borrow_limit_gpus x 1000; fractions allowed). */
struct sim_spec_quota {
    uint32_t pool;              /* index into spec->pools */
    int64_t guaranteed_milli;   /* >= 0; default 0 */
    int64_t borrow_limit_milli; /* >= 0, or -1: no limit (the default) */
};

struct sim_spec_team {
    char *name;
    uint32_t weight; /* >= 1; default 1 */
    char **queues;   /* trace queue names mapped to this team ("" is the empty queue);
                      * NULL when nqueues is 0 */
    size_t nqueues;
    struct sim_spec_quota *quotas; /* at most one per pool */
    size_t nquotas;
    int64_t borrow_limit_milli; /* in pools without a quota entry; -1: no limit (default) */
    uint32_t pool;              /* "pool": its jobs run only there (an index); SIM_NONE: any */
};

struct sim_spec {
    struct sim_spec_pool *pools;
    size_t npools;
    struct sim_spec_team *teams;
    size_t nteams;
    /* Jobs of a queue no team names: dropped (SIM_NONE, "unmapped_queues: drop",
     * the default), or given to this team. */
    uint32_t unmapped_team;
};

/* Empties *s (unmapped_team SIM_NONE). */
void sim_spec_init(struct sim_spec *s);
/* Frees what *s holds and empties it; NULL is fine. */
void sim_spec_release(struct sim_spec *s);

/*
 * Parses a spec from text (`len` bytes, not necessarily terminated; `name` is
 * used in messages, e.g. the file name; NULL: "spec"). *s is overwritten (it
 * need not be initialised): 0 with the spec, or GPO_EINVAL / GPO_E2BIG (over
 * a SIM_SPEC_MAX_* cap) / GPO_ENOMEM with one line in `err` (errlen bytes,
 * always terminated; err may be NULL) and *s empty. Requires at least one pool
 * and one team; a queue may belong to one team only. The caller frees *s with
 * sim_spec_release.
 */
int sim_spec_parse(struct sim_spec *s, const char *text, size_t len, const char *name, char *err,
                   size_t errlen);

/* Reads the file at `path` (at most 16 MiB, GPO_E2BIG above; GPO_EINVAL when
 * it cannot be read) and parses it as above, named by `path`. */
int sim_spec_load(struct sim_spec *s, const char *path, char *err, size_t errlen);

/*
 * The default cluster for a trace, documented in docs/simulator.md: one pool
 * "default" of 8-GPU nodes (80 GiB GPUs, 64 CPUs, 512 GiB per node), as many
 * nodes as hold the trace's offered load (its GPU-seconds over the span from
 * first to last submit) at 90 %, at least enough for its largest job, and at
 * least one. When every job is submitted at once the span is the sum of the
 * durations (the jobs back to back), and 1 s if that is 0 too. One team per
 * trace queue, in the trace's order, named after it and mapping it (the empty
 * queue: team "default", or "default-2", ... if a queue is named that), weight
 * 1, no guarantee, no borrowing limit. *s is overwritten as by sim_spec_parse.
 * 0 or GPO_ENOMEM / GPO_EINVAL (no jobs) / GPO_E2BIG (more queues than
 * SIM_SPEC_MAX_TEAMS, or more nodes than SIM_SPEC_MAX_NODES).
 */
int sim_spec_from_trace(struct sim_spec *s, const struct sim_trace *t, char *err, size_t errlen);

/*
 * Scales every pool's node count by `factor` (> 0), rounding to the nearest
 * node and keeping at least one, and the teams' quotas in the same proportion
 * (rounded to whole milli-GPUs): a quota entry's guarantee and borrowing limit
 * by the ratio its pool's node count actually changed (so a guarantee of a
 * whole pool stays the whole pool), a team's borrowing limit elsewhere by
 * `factor`; no limit stays no limit. Used by --load. GPO_EINVAL for a bad
 * factor (not finite or <= 0), GPO_E2BIG if the cluster would grow over the
 * caps; *s is unchanged then.
 */
int sim_spec_scale(struct sim_spec *s, double factor);

/* The team that takes jobs of the trace queue named `queue`: the team whose
 * queues name it, else unmapped_team (SIM_NONE: the jobs are dropped). */
uint32_t sim_spec_team_of_queue(const struct sim_spec *s, const char *queue);

/*
 * --load: scales the spec (sim_spec_scale) so that the offered load of the
 * trace jobs some team takes (their GPU-seconds over the span from the first
 * to the last of their submits) is `load` of its GPUs. 0 with the factor used
 * in *ret_factor; GPO_EINVAL if the trace offers no load to scale to or
 * `load` is not positive; GPO_E2BIG or GPO_ENOMEM. *s is unchanged on error.
 */
int sim_spec_set_load(struct sim_spec *s, const struct sim_trace *t, double load,
                      double *ret_factor);

#endif

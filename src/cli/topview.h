/*
 * topview.h - what `gpuorch top` (top.h) shows, apart from the terminal, so
 * that tests need neither a server nor a terminal: a snapshot is what the
 * API answered (top.c reads it), the view is what top derives from it
 * (top_view_build: which job holds which GPU, sums, fallbacks; also the
 * --json output), and top_render lays a view out as the text of a screen.
 */
#ifndef GPUORCH_CLI_TOPVIEW_H
#define GPUORCH_CLI_TOPVIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* How the jobs table is ordered; 's' cycles through them in this order. */
#define TOP_SORT_MAP(X)                                                                            \
    X(ID, "id")     /* job id, ascending */                                                        \
    X(UTIL, "util") /* GPU utilization, highest first */                                           \
    X(GPUS, "gpus") /* GPUs held, most first */                                                    \
    X(TIME, "time") /* running time, longest first */                                              \
    X(COST, "cost") /* cost so far, highest first */

enum top_sort {
#define TOP_SORT_ENUM(name, text) TOP_SORT_##name,
    TOP_SORT_MAP(TOP_SORT_ENUM)
#undef TOP_SORT_ENUM
        TOP_SORT_COUNT
};

/* The key's name ("util"); "?" for a value out of range. */
const char *top_sort_name(enum top_sort s);
/* The key named `name`: 0 and *ret, or GPO_EUSAGE. */
int top_sort_parse(const char *name, enum top_sort *ret);

/* What the API answered at one moment; every member owned (json_decref). */
struct top_snapshot {
    json_t *nodes;    /* GET /v1/nodes's "nodes" array */
    json_t *jobs;     /* GET /v1/jobs?state=PENDING,RUNNING, every page, as one array */
    json_t *cost;     /* GET /v1/cost?by=team's answer; NULL when the server has none */
    json_t *services; /* GET /v1/services's "services" array; NULL when the server has none */
    int64_t taken_ms; /* when it was read */
};

/* Releases what s holds and zeroes it; NULL and a zeroed snapshot are fine. */
void top_snapshot_release(struct top_snapshot *s);

/*
 * What top shows, as one JSON object (also the --json output); s borrowed,
 * caller json_decref's the result, NULL when out of memory:
 *   {"time": RFC 3339,
 *    "summary": {"nodes", "nodes_up", "gpus", "gpus_used", "utilization_pct",
 *                "memory_used_mib", "memory_total_mib", "power_w",
 *                "running_jobs", "pending_jobs", "cost_rate"},
 *    "nodes": [{"name", "pool", "state", "gpu_type", "gpus", "sampled_at",
 *               "utilization_pct", "memory_used_mib", "memory_total_mib", "power_w"}],
 *    "gpus": [{"node", "index", "uuid", "gpu_type", "utilization_pct",
 *              "memory_used_mib", "memory_total_mib", "power_w", "temperature_c",
 *              "error", "jobs": [{"id", "user", "team"}]}],
 *    "jobs": [{"id", "name", "user", "team", "gpus", "nodes", "utilization_pct",
 *              "memory_used_mib", "running_s", "cost", "idle"}],
 *    "services": [...] (topsvc.h: one object per service, by name; [] for none),
 *    "cost_rate": cost per hour of what runs now}
 * A figure nobody reported is null. A GPU's jobs are the running jobs whose
 * current attempt holds it, then any other job its processes belong to (a
 * member sees only their team's jobs: the others show without user and
 * team). A job's utilization and memory are the API's
 * (gpu_utilization_pct, gpu_memory_used_mib) when it gives them, else the
 * mean utilization of its GPUs and the memory of its processes.
 * top_render shows the services (a SERVICES table) only when there are any.
 */
json_t *top_view_build(const struct top_snapshot *s);

/* How to lay a view out. */
struct top_screen {
    unsigned cols, rows; /* the terminal's size; 0: no limit (a plain snapshot) */
    bool ansi;           /* a live frame: cursor home, styles, clear to end of line */
    enum top_sort sort;
    const char *server; /* shown in the title; NULL: none */
    const char *status; /* a line under the summary (a failed refresh); NULL: none */
};

/*
 * The text of one screen of `view` (borrowed, as top_view_build makes it)
 * into a new NUL-terminated buffer (caller frees): 0 with *ret and *ret_len,
 * or GPO_ENOMEM. Plain: lines ending in '\n', no byte below 0x20 but '\n'.
 * Lines are cut to cols characters and the screen to rows lines (the last
 * one then says how many were left out). ANSI: begins with ESC[H, each line
 * ends with ESC[K, the frame with ESC[J, and no newline after the last line
 * (a newline on the bottom row would scroll the screen).
 */
int top_render(const json_t *view, const struct top_screen *scr, char **ret, size_t *ret_len);

#endif

/*
 * output.h - what `gpuorch sim` prints: the summary table, the --json
 * objects, and the per-job CSV of --jobs-out.
 */
#ifndef GPUORCH_SIM_OUTPUT_H
#define GPUORCH_SIM_OUTPUT_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "sim/engine.h"
#include "sim/stats.h"
#include "sim/trace.h"

/* The summary table, one column per policy, then unschedulable jobs by
 * reason and the teams' shares. */
void sim_output_table(FILE *out, const struct sim_summary *s, size_t n);

/*
 * The --json output: one object per policy with the keys policy, jobs,
 * makespan_s, jct_avg_s, jct_p50_s, jct_p95_s, jct_p99_s, wait_avg_s,
 * wait_p99_s, gpu_utilization, jain_fairness, preemptions (and unschedulable);
 * a JSON array of them when n > 1. The same inputs give the same bytes.
 * 0 or GPO_ENOMEM.
 */
int sim_output_json(FILE *out, const struct sim_summary *s, size_t n);
/* One policy's --json object (as above); NULL: out of memory. */
json_t *sim_output_summary_json(const struct sim_summary *s);
/* v rounded to `digits` decimals (0 if not finite), so the JSON reads well
 * and compares exactly. NULL: out of memory. */
json_t *sim_output_rounded(double v, int digits);
/* Prints root (taken: released here) as the --json outputs do: indented, keys
 * in order, a newline after. 0, or GPO_ENOMEM (root NULL included). */
int sim_output_json_print(FILE *out, json_t *root);

/* The per-job CSV: job_id,team,submit_s,start_s,end_s,wait_s,gpus,placement,
 * preemptions,status. 0, or GPO_EINVAL with one line in err (a write error). */
int sim_output_jobs(FILE *out, const char *path, const struct sim_trace *t,
                    const struct sim_result *r, char *err, size_t errlen);

#endif

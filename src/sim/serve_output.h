/*
 * serve_output.h - what `gpuorch sim --serve` prints: the table of every
 * service under every policy, and the --json objects.
 */
#ifndef GPUORCH_SIM_SERVE_OUTPUT_H
#define GPUORCH_SIM_SERVE_OUTPUT_H

#include <stddef.h>
#include <stdio.h>

#include "sim/serve.h"
#include "sim/stats.h"

/* One row per summary, in the order given: service, policy, requests, SLO
 * attainment %, TTFT and end-to-end p50/p99 (s), dropped + timed out
 * (failed ones in a note), cold starts, GPU-hours, mean and peak replicas. */
void sim_serve_output_table(FILE *out, const struct sim_serve_summary *s, size_t n);

/*
 * --json: one object per summary with the keys policy, service, requests,
 * completed, slo_attainment (0..1), ttft_p50_s, ttft_p99_s, e2e_p50_s,
 * e2e_p99_s, tpot_p50_s, dropped, timed_out, failed, cold_starts, gpu_hours,
 * replicas_mean, replicas_max; an array of them when n > 1. With njobs > 0
 * (a job trace on the same cluster) the output is one object {"serving":
 * [...], "training": [...]}, training's objects those of sim_output_json.
 * The same inputs give the same bytes. 0 or GPO_ENOMEM.
 */
int sim_serve_output_json(FILE *out, const struct sim_serve_summary *s, size_t n,
                          const struct sim_summary *jobs, size_t njobs);

#endif

/*
 * eff.h - gpuorch eff JOB, as seff: a job's state, nodes, cores, elapsed
 * time, GPU-hours, mean GPU utilization and peak GPU memory. The job and
 * its attempts come from GET /v1/accounting/jobs, the GPU figures from the
 * monitor's series of the job (GET /v1/metrics/series by job over its
 * attempts' span: raw samples within the last hour, the stored one-minute
 * aggregates before). docs/slurm.md lists what it prints.
 *
 *   gpuorch eff JOB [--json]
 *
 * Returns an exit code as cli.h says; argv[0] is the command's name.
 */
#ifndef GPUORCH_CLI_EFF_H
#define GPUORCH_CLI_EFF_H

int eff_command(int argc, char **argv);

#endif

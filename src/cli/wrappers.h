/*
 * wrappers.h - Slurm's commands as scripts that run gpuorch, and Slurm's
 * host lists on the command line. docs/slurm.md lists what each wrapper
 * takes and refuses.
 *
 *   gpuorch slurm-wrappers DIR [--gpuorch PATH] [--force]
 *       writes sbatch, squeue, scancel, srun, salloc, sacct, sinfo, seff and
 *       scontrol into DIR (mode 0755), each exec'ing PATH (default: this
 *       binary's absolute path) with the gpuorch command it maps to; a file
 *       of those names that gpuorch did not write is kept unless --force.
 *   gpuorch hostlist --expand|--compress [LIST...]
 *       `scontrol show hostnames` and `show hostlist` (util/hostlist.h);
 *       LIST defaults to $SLURM_JOB_NODELIST.
 *
 * Each returns an exit code as cli.h says; argv[0] is the command's name.
 */
#ifndef GPUORCH_CLI_WRAPPERS_H
#define GPUORCH_CLI_WRAPPERS_H

int wrappers_command(int argc, char **argv);
int hostlist_command(int argc, char **argv);

#endif

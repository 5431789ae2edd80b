/*
 * driver.h - the fake NVML's stand-in for NVIDIA's kernel driver. Real NVML
 * asks the driver which processes use a GPU, and the driver answers a
 * caller that has dropped root as well as one that has not. The fake reads
 * /proc/PID/environ instead, which only root may do for other users'
 * processes; so, with FAKENVML_DRIVER=1 in a process that is root at its
 * first nvmlInit, the library forks a "driver" that keeps root and does
 * that reading for it, however the caller's credentials change later (the
 * agent's network half drops root after nvmlInit). Call nvmlInit in a
 * single-threaded process then: the driver is a fork.
 *
 * The driver closes every descriptor but its socket, dies with its parent
 * (PR_SET_PDEATHSIG) and when its socket closes. Requests are serialized.
 */
#ifndef FAKENVML_DRIVER_H
#define FAKENVML_DRIVER_H

#include <stdbool.h>

/* One process on a GPU, and what its environment (root's to read) says
 * about the job it belongs to: what the fake's figures are made of
 * (README.md, "Busy GPUs"). Plain data: the driver sends it as bytes. */
struct fake_proc {
    unsigned pid;
    unsigned ndevices;      /* entries in its CUDA_VISIBLE_DEVICES (at least 1) */
    unsigned milli;         /* GPUORCH_GPU_MILLI (1..999), else 1000: a whole GPU */
    unsigned attempt;       /* GPUORCH_ATTEMPT, 0 without */
    unsigned long long job; /* GPUORCH_JOB_ID, 0: not a gpuorch job */
    long long mps_mib;      /* CUDA_MPS_PINNED_DEVICE_MEM_LIMIT's "0=<N>M", -1: none */
};

/* The library's own lister: the processes whose CUDA_VISIBLE_DEVICES names
 * the GPU (uuid, index); the caller frees *ret. 0, or -1. */
typedef int (*driver_find_fn)(const char *uuid, unsigned index, struct fake_proc **ret,
                              unsigned *ret_n);

/* Starts the driver if FAKENVML_DRIVER is "1" and the caller is root and
 * none runs yet. 0 (started, or not asked for), -1 (it could not start:
 * reported on stderr). */
int driver_start(driver_find_fn find);

/* Whether a driver answers (driver_processes is then the lister). */
bool driver_running(void);

/* find's answer, from the driver. 0, or -1 (the driver is gone). */
int driver_processes(const char *uuid, unsigned index, struct fake_proc **ret, unsigned *ret_n);

#endif

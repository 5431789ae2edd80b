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

/* The library's own lister: the pids whose CUDA_VISIBLE_DEVICES names the
 * GPU (uuid, index); the caller frees *ret_pids. 0, or -1. */
typedef int (*driver_find_fn)(const char *uuid, unsigned index, unsigned **ret_pids,
                              unsigned *ret_n);

/* Starts the driver if FAKENVML_DRIVER is "1" and the caller is root and
 * none runs yet. 0 (started, or not asked for), -1 (it could not start:
 * reported on stderr). */
int driver_start(driver_find_fn find);

/* Whether a driver answers (driver_processes is then the lister). */
bool driver_running(void);

/* find's answer, from the driver. 0, or -1 (the driver is gone). */
int driver_processes(const char *uuid, unsigned index, unsigned **ret_pids, unsigned *ret_n);

#endif

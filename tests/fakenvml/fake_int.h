/*
 * fake_int.h - what fakenvml.c shares with fakenvml_mig.c: the one lock and
 * its checks, the GPUs, the process finder, and MIG device handles. Private
 * to tests/fakenvml/ (hidden visibility).
 */
#ifndef GPUORCH_FAKENVML_FAKE_INT_H
#define GPUORCH_FAKENVML_FAKE_INT_H

#include <stdbool.h>

#include "fakenvml/gpus.h"
#include "fakenvml/mig.h"
#include "fakenvml/nvml_abi.h"

/* Unlocks the fake's lock and returns rc. */
nvmlReturn_t fake_unlock(nvmlReturn_t rc);
/* Takes the lock; NVML_SUCCESS (lock held, GPU file fresh) or UNINITIALIZED. */
nvmlReturn_t fake_lock_ready(void);
/* fake_lock_ready, and `device` is one of the current GPUs and `out` is not
 * NULL (else INVALID_ARGUMENT, lock released). */
nvmlReturn_t fake_lock_gpu(nvmlDevice_t device, const void *out, struct nvmlDevice_st **ret_gpu);
/* The current GPUs (lock held). */
struct gpus_config *fake_config(void);
/* The pids whose CUDA_VISIBLE_DEVICES names `uuid` (or `index`; UINT_MAX
 * for none); the caller frees *ret_pids. 0, or -1 out of memory. */
int fake_find_named(const char *uuid, unsigned index, unsigned **ret_pids, unsigned *ret_n);

/* One MIG device (a compute instance), copied out of the MIG state. */
struct fake_migdev {
    unsigned gpu;              /* the parent's index */
    unsigned gi, ci;           /* ids */
    unsigned long long memory; /* MiB: its GPU instance's */
    char uuid[MIG_UUID_LEN];
};

/* The first nvmlInit: where the MIG state lives (FAKENVML_STATE, else the
 * GPU file's path + ".state"), and FAKENVML_RESET's resets. */
void fake_mig_init(const char *config_path);
/* Whether the pointer is one of the MIG device handles (valid or not). */
bool fake_mig_is_handle(nvmlDevice_t device);
/* With the lock held: the MIG device a handle names now, or
 * INVALID_ARGUMENT (its compute instance is gone). */
nvmlReturn_t fake_mig_lookup(nvmlDevice_t device, struct fake_migdev *ret);
/* With the lock held: GPU gpu's MIG devices (at most MIG_MAX_DEVICES). */
unsigned fake_mig_devices(unsigned gpu, struct fake_migdev *ret);

#endif

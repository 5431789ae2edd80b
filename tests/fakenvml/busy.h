/*
 * busy.h - the fake NVML's figures for a GPU whose JSON entry does not script
 * them (README.md, "Busy GPUs"): utilization from the CPU time its processes
 * used since the last reading, memory from what each process's job asked.
 * The fake's behaviour only: real NVML measures the GPU. Private to
 * tests/fakenvml/ (hidden visibility).
 *
 * Decisions:
 *  - CPU time is /proc/PID/stat's utime + stime (the whole process, every
 *    thread), which any user may read: a caller that dropped root needs the
 *    driver (driver.h) only for the environment.
 *  - Each GPU keeps the ticks of the processes of its last reading; the next
 *    reading adds what each process that is still the same one (pid and
 *    start time) used since, divided by the number of devices in its
 *    CUDA_VISIBLE_DEVICES, over the monotonic time between the two. The first
 *    reading has no interval: 0 %. A reading within BUSY_MIN_INTERVAL_MS of
 *    the last answers the last figure and keeps the interval open, so that
 *    the 10 ms tick does not make a quick second call read 0 or 100 %.
 *  - A job's memory request is counted once per GPU: its oldest process there
 *    (earliest start, then lowest pid) holds it, its others hold 0, as CUDA
 *    gives the memory to the process that allocated it.
 */
#ifndef GPUORCH_FAKENVML_BUSY_H
#define GPUORCH_FAKENVML_BUSY_H

#include <stdbool.h>

#include "fakenvml/driver.h"

#define BUSY_MIN_INTERVAL_MS 200
#define BUSY_OTHER_MIB       1024ull /* a process that is no gpuorch job's */

/* Reads one CUDA_VISIBLE_DEVICES, GPUORCH_GPU_MILLI, GPUORCH_JOB_ID,
 * GPUORCH_ATTEMPT or CUDA_MPS_PINNED_DEVICE_MEM_LIMIT entry ("NAME=VALUE")
 * of a process's environment into *p; other entries and values that do not
 * parse leave it alone. Start from busy_proc_init. */
void busy_proc_init(struct fake_proc *p, unsigned pid);
void busy_proc_env(struct fake_proc *p, const char *entry);

/* A process's CPU ticks (utime + stime) and start time (ticks since boot),
 * from /proc/PID/stat. 0, or -1 (gone). */
int busy_proc_stat(unsigned pid, unsigned long long *ret_ticks, unsigned long long *ret_start);

/* One process of a GPU's list, and the device it was found on. */
struct busy_found {
    struct fake_proc p;
    unsigned long long start;     /* its start time (busy_proc_stat), ULLONG_MAX if gone */
    unsigned gi, ci;              /* its MIG device's instance ids, or 0xFFFFFFFF */
    unsigned long long total_mib; /* the memory of that device (GPU or MIG device) */
};

/* GPU `index` (uuid: another GPU at that index starts over)'s utilization
 * in percent, 0..100, from its processes (see Decisions). Thread-safe. */
unsigned busy_utilization(unsigned index, const char *uuid, const struct busy_found *procs,
                          unsigned n);

/* The utilization busy_utilization last gave GPU `index` (uuid), 0 before
 * any: what power and temperature follow where the file leaves them out. */
unsigned busy_last_utilization(unsigned index, const char *uuid);

/* Power (mW) and temperature (C) of a GPU at utilization pct: an H100's
 * idle 70 W and 30 C, up to 700 W and 75 C at 100 %, in a straight line. */
#define BUSY_IDLE_POWER_MW 70000ULL
#define BUSY_FULL_POWER_MW 700000ULL
#define BUSY_IDLE_TEMP_C   30ULL
#define BUSY_FULL_TEMP_C   75ULL

/* Forgets every GPU's last reading (the first nvmlInit, the last
 * nvmlShutdown). */
void busy_reset(void);

/* The memory (MiB) process k of a device's list holds when the JSON file
 * does not script process_memory_mib: 0 when an older process of its job
 * (GPUORCH_JOB_ID and GPUORCH_ATTEMPT) is in the list; else
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT's figure, or its share (GPUORCH_GPU_MILLI
 * / 1000; the whole device without it) of its device's memory;
 * BUSY_OTHER_MIB for a process of no job. At most the device's memory. */
unsigned long long busy_memory_mib(const struct busy_found *list, unsigned n, unsigned k);

#endif

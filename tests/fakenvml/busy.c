/*
 * busy.c - the fake NVML's unscripted utilization and memory (busy.h).
 */
#include "fakenvml/busy.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fakenvml/gpus.h"
#include "base/banned.h"

/* /proc/PID/stat's fields after the command's ")": state is field 3. */
#define STAT_UTIME     14
#define STAT_STIME     15
#define STAT_STARTTIME 22

void busy_proc_init(struct fake_proc *p, unsigned pid)
{
    *p = (struct fake_proc){.pid = pid, .ndevices = 1, .milli = 1000, .mps_mib = -1};
}

/* The value of `entry` if it is NAME=..., else NULL. */
static const char *value_of(const char *entry, const char *name)
{
    size_t n = strlen(name);
    return strncmp(entry, name, n) == 0 && entry[n] == '=' ? entry + n + 1 : NULL;
}

/* A decimal number from 0 to max filling all of s (end: what may follow). */
static bool parse_number(const char *s, unsigned long long max, const char *end,
                         unsigned long long *ret)
{
    char *stop;
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, &stop, 10);
    if (errno || v > max || strcmp(stop, end) != 0)
        return false;
    *ret = v;
    return true;
}

void busy_proc_env(struct fake_proc *p, const char *entry)
{
    const char *v;
    unsigned long long n;
    if ((v = value_of(entry, "CUDA_VISIBLE_DEVICES"))) {
        p->ndevices = 1;
        for (const char *c = v; *c; c++)
            p->ndevices += *c == ',';
    } else if ((v = value_of(entry, "GPUORCH_GPU_MILLI")) && parse_number(v, 1000, "", &n) &&
               n > 0) {
        p->milli = (unsigned)n;
    } else if ((v = value_of(entry, "GPUORCH_JOB_ID")) && parse_number(v, ~0ull, "", &n)) {
        p->job = n;
    } else if ((v = value_of(entry, "GPUORCH_ATTEMPT")) && parse_number(v, ~0u, "", &n)) {
        p->attempt = (unsigned)n;
    } else if ((v = value_of(entry, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")) &&
               strncmp(v, "0=", 2) == 0 && parse_number(v + 2, 1ull << 40, "M", &n)) {
        p->mps_mib = (long long)n;
    }
}

int busy_proc_stat(unsigned pid, unsigned long long *ret_ticks, unsigned long long *ret_start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%u/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    (void)fclose(f); /* read only: nothing to lose */
    buf[n] = '\0';
    char *s = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
    unsigned long long utime = 0, stime = 0, start = 0;
    if (!s)
        return -1;
    s++;
    for (int field = 3; field <= STAT_STARTTIME; field++) {
        while (*s == ' ')
            s++;
        if (!*s)
            return -1;
        char *end;
        unsigned long long v = strtoull(s, &end, 10);
        if (field == STAT_UTIME)
            utime = v;
        else if (field == STAT_STIME)
            stime = v;
        else if (field == STAT_STARTTIME)
            start = v;
        s = strchr(s, ' ');
        if (!s && field < STAT_STARTTIME)
            return -1;
        if (!s)
            break;
    }
    *ret_ticks = utime + stime;
    *ret_start = start;
    return 0;
}

/* One process as the last reading of a GPU saw it. */
struct seen {
    unsigned pid;
    unsigned long long start, ticks;
};

static struct {
    pthread_mutex_t lock;
    struct gpu_busy {
        char uuid[NVML_DEVICE_UUID_BUFFER_SIZE];
        bool primed; /* at, seen and pct hold a reading */
        struct timespec at;
        unsigned pct;
        struct seen *seen;
        unsigned nseen;
    } gpus[GPUS_MAX];
} busy = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void forget(struct gpu_busy *g)
{
    free(g->seen);
    g->seen = NULL;
    g->nseen = 0;
    g->primed = false;
}

void busy_reset(void)
{
    pthread_mutex_lock(&busy.lock);
    for (unsigned i = 0; i < GPUS_MAX; i++)
        forget(&busy.gpus[i]);
    pthread_mutex_unlock(&busy.lock);
}

static long long ms_between(struct timespec a, struct timespec b)
{
    return (b.tv_sec - a.tv_sec) * 1000LL + (b.tv_nsec - a.tv_nsec) / 1000000;
}

/* Ticks used since `then` by the processes in both lists, each divided
 * among the devices it sees. */
static double ticks_since(const struct seen *then, unsigned nthen, const struct seen *now,
                          const struct busy_found *procs, unsigned n)
{
    double used = 0;
    for (unsigned i = 0; i < n; i++) {
        for (unsigned j = 0; j < nthen; j++) {
            if (then[j].pid == now[i].pid && then[j].start == now[i].start &&
                now[i].ticks >= then[j].ticks) {
                used += (double)(now[i].ticks - then[j].ticks) / procs[i].p.ndevices;
                break;
            }
        }
    }
    return used;
}

unsigned busy_utilization(unsigned index, const char *uuid, const struct busy_found *procs,
                          unsigned n)
{
    if (index >= GPUS_MAX)
        return 0;
    struct seen *now = calloc(n + 1, sizeof(*now));
    if (!now)
        return 0;
    for (unsigned i = 0; i < n; i++) {
        now[i].pid = procs[i].p.pid;
        if (busy_proc_stat(procs[i].p.pid, &now[i].ticks, &now[i].start) != 0)
            now[i].pid = 0; /* gone: matches no earlier reading */
    }
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long hz = sysconf(_SC_CLK_TCK);
    pthread_mutex_lock(&busy.lock);
    struct gpu_busy *g = &busy.gpus[index];
    if (strcmp(g->uuid, uuid) != 0) {
        forget(g);
        snprintf(g->uuid, sizeof(g->uuid), "%s", uuid);
    }
    long long ms = g->primed ? ms_between(g->at, t) : 0;
    if (g->primed && ms < BUSY_MIN_INTERVAL_MS) {
        unsigned pct = g->pct;
        pthread_mutex_unlock(&busy.lock);
        free(now);
        return pct;
    }
    unsigned pct = 0;
    if (g->primed && ms > 0 && hz > 0) {
        double used = ticks_since(g->seen, g->nseen, now, procs, n);
        double p = used / (double)hz * 100000.0 / (double)ms;
        pct = p >= 100 ? 100 : (unsigned)(p + 0.5);
    }
    free(g->seen);
    *g = (struct gpu_busy){.primed = true, .at = t, .pct = pct, .seen = now, .nseen = n};
    snprintf(g->uuid, sizeof(g->uuid), "%s", uuid);
    pthread_mutex_unlock(&busy.lock);
    return pct;
}

unsigned busy_last_utilization(unsigned index, const char *uuid)
{
    if (index >= GPUS_MAX)
        return 0;
    pthread_mutex_lock(&busy.lock);
    const struct gpu_busy *g = &busy.gpus[index];
    unsigned pct = g->primed && strcmp(g->uuid, uuid) == 0 ? g->pct : 0;
    pthread_mutex_unlock(&busy.lock);
    return pct;
}

/* Whether list[j] comes before list[k] (older, or as old with a lower pid). */
static bool older(const struct busy_found *list, unsigned j, unsigned k)
{
    return list[j].start < list[k].start ||
           (list[j].start == list[k].start && list[j].p.pid < list[k].p.pid);
}

unsigned long long busy_memory_mib(const struct busy_found *list, unsigned n, unsigned k)
{
    const struct fake_proc *p = &list[k].p;
    unsigned long long total = list[k].total_mib, mib;
    if (p->job == 0) {
        mib = BUSY_OTHER_MIB;
    } else {
        for (unsigned j = 0; j < n; j++) {
            if (j != k && list[j].p.job == p->job && list[j].p.attempt == p->attempt &&
                older(list, j, k))
                return 0;
        }
        mib = p->mps_mib >= 0 ? (unsigned long long)p->mps_mib : total * p->milli / 1000;
    }
    return mib < total ? mib : total;
}

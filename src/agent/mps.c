/*
 * mps.c - CUDA MPS clients and their daemons' counts (mps.h).
 */
#include "agent/mps.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/errbuf.h"
#include "base/banned.h"

#define PREFIX "CUDA_MPS_"

struct gpu_count {
    char *uuid;
    size_t clients;
};

struct mps {
    struct priv *priv;
    char *state_dir;
    struct gpu_count *v;
    size_t n, cap;
};

const char *mps_gpu(const struct proto_attempt *a)
{
    if (!a->mps || a->ngpus != 1 || a->gpus[0].milli >= 1000 || a->gpus[0].mig_uuid)
        return NULL;
    return a->gpus[0].uuid;
}

bool mps_reserved(const struct proto_attempt *a, const char *name)
{
    return mps_gpu(a) && strncmp(name, PREFIX, strlen(PREFIX)) == 0;
}

int mps_env(const char *state_dir, const struct proto_attempt *a, struct launch_strv *env)
{
    const char *uuid = mps_gpu(a);
    if (!uuid)
        return 0;
    const struct proto_share *sh = &a->gpus[0];
    uint32_t pct = (sh->milli + 9) / 10; /* ceil(milli / 10): 1..100 */
    int rc = launch_strv_add(env, PREFIX "PIPE_DIRECTORY=%s/mps/%s/pipe", state_dir, uuid);
    rc = rc ? rc : launch_strv_add(env, PREFIX "LOG_DIRECTORY=%s/mps/%s/log", state_dir, uuid);
    rc = rc ? rc : launch_strv_add(env, PREFIX "ACTIVE_THREAD_PERCENTAGE=%" PRIu32, pct);
    if (!rc && sh->mem_mib > 0)
        rc = launch_strv_add(env, PREFIX "PINNED_DEVICE_MEM_LIMIT=0=%" PRId64 "M", sh->mem_mib);
    return rc;
}

int mps_new(struct priv *priv, const char *state_dir, struct mps **ret)
{
    struct mps *m = calloc(1, sizeof(*m));
    if (!m || !(m->state_dir = strdup(state_dir))) {
        free(m);
        return GPO_ENOMEM;
    }
    m->priv = priv;
    *ret = m;
    return 0;
}

void mps_free(struct mps *m)
{
    if (!m)
        return;
    for (size_t k = 0; k < m->n; k++)
        free(m->v[k].uuid);
    free(m->v);
    free(m->state_dir);
    free(m);
}

static struct gpu_count *find(const struct mps *m, const char *uuid)
{
    for (size_t k = 0; k < m->n; k++)
        if (strcmp(m->v[k].uuid, uuid) == 0)
            return &m->v[k];
    return NULL;
}

size_t mps_clients(const struct mps *m, const char *uuid)
{
    const struct gpu_count *g = find(m, uuid);
    return g ? g->clients : 0;
}

int mps_acquire(struct mps *m, const char *uuid, char *err, size_t errlen)
{
    struct gpu_count *g = find(m, uuid);
    if (g && g->clients) {
        g->clients++;
        return 0;
    }
    if (!g && m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 8;
        struct gpu_count *v = realloc(m->v, cap * sizeof(*v));
        if (!v)
            return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
        m->v = v;
        m->cap = cap;
    }
    char *copy = g ? NULL : strdup(uuid);
    if (!g && !copy)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    int rc = priv_mps(m->priv, PRIV_MPS_START, uuid, err, errlen);
    if (rc) {
        free(copy);
        return rc;
    }
    if (!g) {
        g = &m->v[m->n++];
        g->uuid = copy;
    }
    g->clients = 1;
    return 0;
}

int mps_release(struct mps *m, const char *uuid, char *err, size_t errlen)
{
    struct gpu_count *g = find(m, uuid);
    if (!g || !g->clients)
        return 0;
    if (--g->clients)
        return 0;
    return priv_mps(m->priv, PRIV_MPS_QUIT, uuid, err, errlen);
}

void mps_sweep(struct mps *m, const char *const *uuids, size_t n,
               void (*log)(const char *fmt, ...) __attribute__((format(printf, 1, 2))))
{
    for (size_t k = 0; k < n; k++) {
        char pipe[4096], why[PRIV_MSG_MAX] = "";
        struct stat st;
        snprintf(pipe, sizeof(pipe), "%s/mps/%s/pipe", m->state_dir, uuids[k]);
        if (!uuids[k][0] || stat(pipe, &st) != 0)
            continue;
        size_t clients = mps_clients(m, uuids[k]);
        if (clients)
            log("CUDA MPS: the daemon of GPU %s is kept for %zu client(s)", uuids[k], clients);
        else if (priv_mps(m->priv, PRIV_MPS_QUIT, uuids[k], why, sizeof(why)) != 0)
            log("CUDA MPS: quitting the daemon of GPU %s: %s", uuids[k], why);
        else if (strncmp(why, "quit", 4) == 0)
            log("CUDA MPS: GPU %s has no client left: its daemon was told to quit (%s)", uuids[k],
                why);
    }
}

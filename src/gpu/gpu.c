/*
 * gpu.c - what every backend shares: error texts, the argument checks in
 * front of the backend's table, and the product-name-to-gpu_type rule.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gpu/gpu.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_WORDS    16 /* words of a product name looked at; the rest are ignored */
#define MAX_WORD     32 /* longer words are cut: no product name has one */

void gpu_sample_release(struct gpu_sample *s)
{
    if (!s)
        return;
    free(s->procs);
    *s = (struct gpu_sample){0};
}

void gpu_backend_close(struct gpu_backend *b)
{
    if (b)
        b->ops->close(b);
}

unsigned gpu_count(const struct gpu_backend *b)
{
    return b ? b->count : 0;
}

const char *gpu_backend_name(const struct gpu_backend *b)
{
    return b ? b->ops->name : "";
}

static int check_index(const struct gpu_backend *b, unsigned index, const void *ret, char *err,
                       size_t errlen)
{
    if (!b || !ret)
        return errbuf_set(err, errlen, GPO_EINVAL, "gpu: NULL backend or result");
    if (index >= b->count)
        return errbuf_set(err, errlen, GPO_ENOENT, "gpu: no GPU %u (this node has %u)", index,
                          b->count);
    return 0;
}

int gpu_info(const struct gpu_backend *b, unsigned index, struct gpu_info *ret, char *err,
             size_t errlen)
{
    int rc = check_index(b, index, ret, err, errlen);
    return rc ? rc : b->ops->info(b, index, ret, err, errlen);
}

int gpu_sample(const struct gpu_backend *b, unsigned index, struct gpu_sample *ret, char *err,
               size_t errlen)
{
    int rc = check_index(b, index, ret, err, errlen);
    return rc ? rc : b->ops->sample(b, index, ret, err, errlen);
}

/* ---- MIG ------------------------------------------------------------------ */

static int64_t memory_word_gb(const char *w); /* below, with gpu_type */

static int check_mig(const struct gpu_backend *b, unsigned index, const void *ret, bool has_op,
                     char *err, size_t errlen)
{
    int rc = check_index(b, index, ret, err, errlen);
    if (rc == 0 && !has_op)
        rc = errbuf_set(err, errlen, GPO_ENOTSUP, "gpu: the %s backend has no MIG", b->ops->name);
    return rc;
}

int gpu_mig_read(const struct gpu_backend *b, unsigned index, struct gpu_mig *ret, char *err,
                 size_t errlen)
{
    int rc = check_mig(b, index, ret, b && b->ops->mig_read, err, errlen);
    return rc ? rc : b->ops->mig_read(b, index, ret, err, errlen);
}

int gpu_mig_create(const struct gpu_backend *b, unsigned index, unsigned profile_id, unsigned start,
                   struct gpu_mig_instance *ret, char *err, size_t errlen)
{
    int rc = check_mig(b, index, ret, b && b->ops->mig_create, err, errlen);
    return rc ? rc : b->ops->mig_create(b, index, profile_id, start, ret, err, errlen);
}

int gpu_mig_destroy(const struct gpu_backend *b, unsigned index, unsigned instance_id, char *err,
                    size_t errlen)
{
    int rc = check_mig(b, index, b, b && b->ops->mig_destroy, err, errlen);
    return rc ? rc : b->ops->mig_destroy(b, index, instance_id, err, errlen);
}

int gpu_mig_set_mode(const struct gpu_backend *b, unsigned index, bool enable,
                     bool *ret_reset_pending, char *err, size_t errlen)
{
    int rc = check_mig(b, index, ret_reset_pending, b && b->ops->mig_set_mode, err, errlen);
    return rc ? rc : b->ops->mig_set_mode(b, index, enable, ret_reset_pending, err, errlen);
}

int gpu_mig_profile_name(unsigned slices, unsigned memory_slices, unsigned gpu_memory_slices,
                         int64_t gpu_gb, int64_t memory_mib, bool media, char *buf, size_t len)
{
    if (!buf || slices == 0)
        return GPO_EINVAL;
    int64_t gb;
    if (gpu_gb > 0 && memory_slices > 0 && gpu_memory_slices >= memory_slices)
        gb = (gpu_gb * memory_slices * 2 + gpu_memory_slices) / (2 * (int64_t)gpu_memory_slices);
    else
        gb = memory_mib > 0 ? (memory_mib + 1023) / 1024 : 0;
    char out[GPU_MIG_NAME_MAX];
    int n = snprintf(out, sizeof(out), "%ug.%lldgb%s", slices, (long long)gb, media ? "+me" : "");
    if (n < 0 || (size_t)n >= sizeof(out) || (size_t)n >= len)
        return GPO_ENOBUFS;
    memcpy(buf, out, (size_t)n + 1);
    return 0;
}

int64_t gpu_type_memory_gb(const char *gpu_type)
{
    const char *dash = gpu_type ? strrchr(gpu_type, '-') : NULL;
    if (!dash)
        return -1;
    int64_t gb = memory_word_gb(dash + 1);
    return gb > 0 ? gb : -1;
}

/* ---- gpu_type ------------------------------------------------------------ */

/* Sizes GPUs are sold with, in GB (which vendors mean as GiB: an "80GB" A100
 * has 81920 MiB), ascending. */
static const int64_t marketed_gb[] = {1,  2,  3,  4,  5,  6,  8,   10,  11,  12,  16,  20,  24, 32,
                                      40, 48, 64, 80, 94, 96, 128, 141, 144, 180, 192, 256, 288};

/* Words dropped wherever they appear, and prefixes that drop a word. */
static const char *const drop_words[] = {"NVIDIA", "Tesla", "GeForce", "Quadro", "NVL"};
static const char *const drop_prefixes[] = {"SXM", "PCIE", "HBM", "GDDR"};

static int64_t marketed_size_gb(int64_t memory_mib)
{
    for (size_t i = 0; i < ARRAY_LEN(marketed_gb); i++) {
        int64_t s = marketed_gb[i] * 1024;
        if (s >= memory_mib)
            return s * 8 <= memory_mib * 9 ? marketed_gb[i] : (memory_mib + 1023) / 1024;
    }
    return (memory_mib + 1023) / 1024;
}

static bool dropped(const char *w)
{
    for (size_t i = 0; i < ARRAY_LEN(drop_words); i++)
        if (strcasecmp(w, drop_words[i]) == 0)
            return true;
    for (size_t i = 0; i < ARRAY_LEN(drop_prefixes); i++)
        if (strncasecmp(w, drop_prefixes[i], strlen(drop_prefixes[i])) == 0)
            return true;
    return false;
}

/* "80GB" (any case): returns 80; else -1. */
static int64_t memory_word_gb(const char *w)
{
    int64_t v = 0;
    size_t i = 0;
    for (; w[i] >= '0' && w[i] <= '9'; i++) {
        if (v > 1000000)
            return -1;
        v = v * 10 + (w[i] - '0');
    }
    if (i == 0 || strcasecmp(w + i, "GB") != 0)
        return -1;
    return v;
}

static bool is_sep(char c)
{
    return c == ' ' || c == '-' || c == '_' || c == '\t';
}

static bool is_kept(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.';
}

int gpu_type_from_name(const char *name, int64_t memory_mib, char *buf, size_t len)
{
    if (!name || !buf)
        return GPO_EINVAL;
    char model[GPU_TYPE_MAX * 2] = "";
    size_t mlen = 0;
    int64_t gb = -1;
    const char *p = name;
    for (int nwords = 0; *p && nwords < MAX_WORDS;) {
        while (is_sep(*p))
            p++;
        if (!*p)
            break;
        char w[MAX_WORD];
        size_t wl = 0;
        for (; *p && !is_sep(*p); p++)
            if (is_kept(*p) && wl + 1 < sizeof(w))
                w[wl++] = *p;
        w[wl] = '\0';
        nwords++;
        if (wl == 0 || dropped(w))
            continue;
        int64_t word_gb = memory_word_gb(w);
        if (word_gb >= 0) {
            if (gb < 0)
                gb = word_gb;
            continue;
        }
        int n = snprintf(model + mlen, sizeof(model) - mlen, "%s%s", mlen ? "-" : "", w);
        if (n < 0 || (size_t)n >= sizeof(model) - mlen)
            return GPO_ENOBUFS;
        mlen += (size_t)n;
    }
    if (gb < 0 && memory_mib > 0)
        gb = marketed_size_gb(memory_mib);
    /* Built here and copied whole, so that buf is untouched on failure. */
    char out[sizeof(model) + 32];
    const char *m = mlen ? model : "GPU";
    int n = gb >= 0 ? snprintf(out, sizeof(out), "%s-%lldGB", m, (long long)gb)
                    : snprintf(out, sizeof(out), "%s", m);
    if (n < 0 || (size_t)n >= sizeof(out) || (size_t)n >= len)
        return GPO_ENOBUFS;
    memcpy(buf, out, (size_t)n + 1);
    return 0;
}

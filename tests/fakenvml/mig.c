/*
 * mig.c - the fake NVML's MIG model (mig.h): profile tables, placement
 * rules, and the state file.
 */
#define _GNU_SOURCE
#include "fakenvml/mig.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- the tables (README.md cites them) ---- */

/* The seven profiles of A100, H100 and H200, which differ in names, memory
 * and engines: index, id, slices, memory slices, instances and starts are
 * the same on the four GPUs. */
#define PROFILE(idx, pid, nm, sl, sz, inst, mib, sm, ce, dec, jpg, ofa, ...)                       \
    {                                                                                              \
        idx, pid, nm, sl, sz, inst, mib, sm, ce, dec, jpg, ofa,                                    \
            sizeof((unsigned[]){__VA_ARGS__}) / sizeof(unsigned),                                  \
        {                                                                                          \
            __VA_ARGS__                                                                            \
        }                                                                                          \
    }
#define STARTS_1G  0, 1, 2, 3, 4, 5, 6
#define STARTS_2X  0, 2, 4, 6
#define STARTS_2G  0, 2, 4
#define STARTS_3G  0, 4
#define STARTS_ONE 0

#define TABLE(n1, n1me, n1x2, n2, n3, n4, n7, m1, m2, m4, m8, sm1, sm1x2, sm2, sm3, sm4, sm7, ce7, \
              dec1, dec1x2, dec2, dec3, dec4, dec7, jpg7)                                          \
    {                                                                                              \
        PROFILE(NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, n1, 1, 1, 7, m1, sm1, 1, dec1, 0, 0,        \
                STARTS_1G),                                                                        \
            PROFILE(NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, n1me, 1, 1, 1, m1, sm1, 1, 1, 1,   \
                    1, STARTS_1G),                                                                 \
            PROFILE(NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, n1x2, 1, 2, 4, m2, sm1x2, 1,       \
                    dec1x2, 0, 0, STARTS_2X),                                                      \
            PROFILE(NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, n2, 2, 2, 3, m2, sm2, 2, dec2, 0, 0,    \
                    STARTS_2G),                                                                    \
            PROFILE(NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, n3, 3, 4, 2, m4, sm3, 3, dec3, 0, 0,     \
                    STARTS_3G),                                                                    \
            PROFILE(NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, n4, 4, 4, 1, m4, sm4, 4, dec4, 0, 0,     \
                    STARTS_ONE),                                                                   \
            PROFILE(NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, n7, 7, 8, 1, m8, sm7, ce7, dec7, jpg7,   \
                    1, STARTS_ONE),                                                                \
    }

#define NPROFILES 7

static const struct mig_table_def {
    const char *name;
    struct mig_profile p[NPROFILES];
} tables[] = {
    [MIG_A100_40GB] = {"A100-40GB", TABLE("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb",
                                          "4g.20gb", "7g.40gb", 4864, 9856, 19968, 40192, 14, 14,
                                          28, 42, 56, 98, 7, 0, 1, 1, 2, 2, 5, 1)},
    [MIG_A100_80GB] = {"A100-80GB", TABLE("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb",
                                          "4g.40gb", "7g.80gb", 9728, 19968, 40192, 81152, 14, 14,
                                          28, 42, 56, 98, 7, 0, 1, 1, 2, 2, 5, 1)},
    [MIG_H100_80GB] = {"H100-80GB", TABLE("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb",
                                          "4g.40gb", "7g.80gb", 9984, 20096, 40448, 81152, 16, 26,
                                          32, 60, 64, 132, 7, 1, 1, 2, 3, 4, 7, 7)},
    [MIG_H200_141GB] = {"H200-141GB",
                        TABLE("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb",
                              "7g.141gb", 16384, 32768, 66560, 133120, 16, 26, 32, 60, 64, 132, 7,
                              1, 1, 2, 3, 4, 7, 7)},
};

enum mig_table mig_table_parse(const char *text)
{
    for (size_t t = 1; t < ARRAY_LEN(tables); t++)
        if (strcmp(text, tables[t].name) == 0)
            return (enum mig_table)t;
    return MIG_TABLE_NONE;
}

const char *mig_table_name(enum mig_table t)
{
    return t > MIG_TABLE_NONE && (size_t)t < ARRAY_LEN(tables) ? tables[t].name : "none";
}

enum mig_table mig_table_for(const char *name, unsigned long long memory_mib)
{
    if (strstr(name, "H200"))
        return MIG_H200_141GB;
    if (strstr(name, "H100"))
        return MIG_H100_80GB;
    if (strstr(name, "A100"))
        return memory_mib < 60000 ? MIG_A100_40GB : MIG_A100_80GB;
    return MIG_TABLE_NONE;
}

const struct mig_profile *mig_profile_by_index(enum mig_table t, unsigned index)
{
    if (t <= MIG_TABLE_NONE || (size_t)t >= ARRAY_LEN(tables))
        return NULL;
    for (size_t i = 0; i < NPROFILES; i++)
        if (tables[t].p[i].index == index)
            return &tables[t].p[i];
    return NULL;
}

const struct mig_profile *mig_profile_by_id(enum mig_table t, unsigned id)
{
    if (t <= MIG_TABLE_NONE || (size_t)t >= ARRAY_LEN(tables))
        return NULL;
    for (size_t i = 0; i < NPROFILES; i++)
        if (tables[t].p[i].id == id)
            return &tables[t].p[i];
    return NULL;
}

/* ---- placements ---- */

/* The heap id of memory slices [start, start + size): size is a power of two. */
static unsigned heap_id(unsigned start, unsigned size)
{
    unsigned level_first = MIG_SLOTS / size - 1; /* 0, 1, 3, 7 */
    return level_first + start / size;
}

struct mig_gi *mig_gi_find(struct mig_gpu *g, unsigned id)
{
    for (unsigned i = 0; i < g->ngi; i++)
        if (g->gi[i].id == id)
            return &g->gi[i];
    return NULL;
}

struct mig_ci *mig_ci_find(struct mig_gi *gi, unsigned id)
{
    for (unsigned i = 0; i < gi->nci; i++)
        if (gi->ci[i].id == id)
            return &gi->ci[i];
    return NULL;
}

static unsigned used_slots(const struct mig_gpu *g)
{
    unsigned mask = 0;
    for (unsigned i = 0; i < g->ngi; i++)
        mask |= ((1u << g->gi[i].profile->size) - 1) << g->gi[i].start;
    return mask;
}

static unsigned count_of(const struct mig_gpu *g, const struct mig_profile *p)
{
    unsigned n = 0;
    for (unsigned i = 0; i < g->ngi; i++)
        n += g->gi[i].profile->id == p->id;
    return n;
}

static bool has_start(const struct mig_profile *p, unsigned start)
{
    for (unsigned i = 0; i < p->nstarts; i++)
        if (p->starts[i] == start)
            return true;
    return false;
}

static unsigned span(const struct mig_profile *p, unsigned start)
{
    return ((1u << p->size) - 1) << start;
}

nvmlReturn_t mig_gi_create(struct mig_gpu *g, const struct mig_profile *p, unsigned start,
                           struct mig_gi **ret_gi)
{
    unsigned used = used_slots(g);
    if (start != UINT_MAX && !has_start(p, start))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; start == UINT_MAX && i < p->nstarts; i++)
        if (!(used & span(p, p->starts[i])))
            start = p->starts[i];
    if (start == UINT_MAX || (used & span(p, start)) || count_of(g, p) >= p->instances ||
        g->ngi >= MIG_MAX_GI)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    unsigned id = heap_id(start, p->size);
    unsigned at = 0;
    while (at < g->ngi && g->gi[at].id < id)
        at++;
    memmove(&g->gi[at + 1], &g->gi[at], (g->ngi - at) * sizeof(g->gi[0]));
    g->gi[at] = (struct mig_gi){.id = id, .profile = p, .start = start};
    g->ngi++;
    *ret_gi = &g->gi[at];
    return NVML_SUCCESS;
}

void mig_gi_remove(struct mig_gpu *g, const struct mig_gi *gi)
{
    size_t at = (size_t)(gi - g->gi);
    memmove(&g->gi[at], &g->gi[at + 1], (g->ngi - at - 1) * sizeof(g->gi[0]));
    g->ngi--;
}

unsigned mig_gi_capacity(const struct mig_gpu *g, const struct mig_profile *p)
{
    /* Placements are aligned spans of a binary tree, so taking the first free
     * ones never blocks more than another choice would. */
    unsigned used = used_slots(g), n = 0, have = count_of(g, p);
    for (unsigned i = 0; i < p->nstarts && have + n < p->instances; i++) {
        if (!(used & span(p, p->starts[i]))) {
            used |= span(p, p->starts[i]);
            n++;
        }
    }
    return n;
}

/* Compute instance profiles by index: their compute slices. */
static const unsigned ci_slices[NVML_COMPUTE_INSTANCE_PROFILE_COUNT] = {1, 2, 3, 4, 7, 8, 6, 1};

unsigned mig_ci_slices(const struct mig_gi *gi, unsigned index)
{
    /* 1, 2, 3, 4 and 7 slices, no more than the GPU instance has; 8, 6 and
     * REV1 exist on no GPU modelled. */
    if (index > NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE || ci_slices[index] > gi->profile->slices)
        return 0;
    return ci_slices[index];
}

/* A UUID of the RFC 4122 shape from FNV-1a of the GPU, the ids and a serial. */
static void make_uuid(char *out, const char *gpu_uuid, unsigned gi, unsigned ci, unsigned serial)
{
    uint64_t h[2] = {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull};
    char text[160];
    snprintf(text, sizeof(text), "%s/%u/%u/%u", gpu_uuid, gi, ci, serial);
    for (int k = 0; k < 2; k++)
        for (const char *c = text; *c; c++)
            h[k] = (h[k] ^ (unsigned char)*c) * (k ? 0x100000001b3ull : 0x100000001b3ull + 2);
    snprintf(out, MIG_UUID_LEN, "MIG-%08x-%04x-5%03x-%04x-%012llx", (unsigned)(h[0] >> 32),
             (unsigned)(h[0] >> 16) & 0xffffu, (unsigned)h[0] & 0xfffu,
             0x8000u | ((unsigned)(h[1] >> 48) & 0x3fffu),
             (unsigned long long)(h[1] & 0xffffffffffffull));
}

nvmlReturn_t mig_ci_create(struct mig_gpu *g, const char *gpu_uuid, struct mig_gi *gi,
                           unsigned index, struct mig_ci **ret_ci)
{
    unsigned size = mig_ci_slices(gi, index);
    if (size == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned used = 0, same = 0;
    for (unsigned i = 0; i < gi->nci; i++) {
        used |= ((1u << gi->ci[i].size) - 1) << gi->ci[i].start;
        same += gi->ci[i].profile == index;
    }
    unsigned start = UINT_MAX;
    for (unsigned s = 0; start == UINT_MAX && s + size <= gi->profile->slices; s += size)
        if (!(used & (((1u << size) - 1) << s)))
            start = s;
    if (start == UINT_MAX || gi->nci >= MIG_MAX_CI || same >= gi->profile->slices / size)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    unsigned id = 0;
    for (unsigned i = 0; i < gi->nci && gi->ci[i].id == id; i++)
        id++;
    unsigned at = 0;
    while (at < gi->nci && gi->ci[at].id < id)
        at++;
    memmove(&gi->ci[at + 1], &gi->ci[at], (gi->nci - at) * sizeof(gi->ci[0]));
    struct mig_ci *ci = &gi->ci[at];
    *ci = (struct mig_ci){.id = id, .profile = index, .start = start, .size = size};
    make_uuid(ci->uuid, gpu_uuid, gi->id, id, g->serial++);
    gi->nci++;
    *ret_ci = ci;
    return NVML_SUCCESS;
}

void mig_ci_remove(struct mig_gi *gi, const struct mig_ci *ci)
{
    size_t at = (size_t)(ci - gi->ci);
    memmove(&gi->ci[at], &gi->ci[at + 1], (gi->nci - at - 1) * sizeof(gi->ci[0]));
    gi->nci--;
}

void mig_gpu_reset(struct mig_gpu *g)
{
    g->current = g->pending;
    g->ngi = 0;
}

/* The compute instance profile index that spans a whole GPU instance. */
static unsigned full_ci_index(const struct mig_gi *gi)
{
    for (unsigned i = 0; i <= NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE; i++)
        if (ci_slices[i] == gi->profile->slices)
            return i;
    return 0;
}

int mig_seed_apply(const struct mig_seed *s, const char *gpu_uuid, struct mig_gpu *ret, char *msg,
                   size_t len)
{
    struct mig_gpu g = {.current = s->enabled, .pending = s->enabled};
    for (unsigned i = 0; i < s->n; i++) {
        const struct mig_profile *p = mig_profile_by_id(s->table, s->profile_id[i]);
        struct mig_gi *gi = NULL;
        struct mig_ci *ci = NULL;
        if (!p) {
            snprintf(msg, len, "mig_instances[%u].profile_id: %s has no profile id %u", i,
                     mig_table_name(s->table), s->profile_id[i]);
            return -1;
        }
        nvmlReturn_t r = mig_gi_create(&g, p, s->start[i], &gi);
        if (r == NVML_ERROR_INVALID_ARGUMENT) {
            snprintf(msg, len, "mig_instances[%u].start: %s cannot start at slice %u", i, p->name,
                     s->start[i]);
            return -1;
        }
        if (r != NVML_SUCCESS) {
            snprintf(msg, len,
                     "mig_instances[%u]: %s at slice %u overlaps another instance or is one "
                     "too many",
                     i, p->name, s->start[i]);
            return -1;
        }
        mig_ci_create(&g, gpu_uuid, gi, full_ci_index(gi), &ci);
    }
    *ret = g;
    return 0;
}

/* ---- the state file ---- */

static json_t *gpu_to_json(const struct mig_state_gpu *sg)
{
    const struct mig_gpu *g = sg->state;
    json_t *gis = json_array();
    for (unsigned i = 0; gis && i < g->ngi; i++) {
        const struct mig_gi *gi = &g->gi[i];
        json_t *cis = json_array();
        for (unsigned c = 0; cis && c < gi->nci; c++)
            json_array_append_new(cis,
                                  json_pack("{s:I, s:I, s:I, s:s}", "id", (json_int_t)gi->ci[c].id,
                                            "profile", (json_int_t)gi->ci[c].profile, "start",
                                            (json_int_t)gi->ci[c].start, "uuid", gi->ci[c].uuid));
        json_array_append_new(gis, json_pack("{s:I, s:I, s:I, s:o*}", "id", (json_int_t)gi->id,
                                             "profile_id", (json_int_t)gi->profile->id, "start",
                                             (json_int_t)gi->start, "compute_instances", cis));
    }
    return json_pack("{s:s, s:b, s:b, s:I, s:o*}", "seed", sg->seed->key, "current", g->current,
                     "pending", g->pending, "serial", (json_int_t)g->serial, "gpu_instances", gis);
}

static bool uint_field(json_t *o, const char *key, unsigned max, unsigned *ret)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max)
        return false;
    *ret = (unsigned)json_integer_value(v);
    return true;
}

/* One GPU's entry; false when it does not describe a state of this GPU's
 * table (the GPU is then seeded again). */
static bool gpu_from_json(json_t *o, const struct mig_state_gpu *sg, struct mig_gpu *ret)
{
    struct mig_gpu g = {.current = json_is_true(json_object_get(o, "current")),
                        .pending = json_is_true(json_object_get(o, "pending"))};
    json_t *seed = json_object_get(o, "seed"), *gis = json_object_get(o, "gpu_instances");
    if (!json_is_string(seed) || strcmp(json_string_value(seed), sg->seed->key) != 0 ||
        !json_is_array(gis) || !uint_field(o, "serial", UINT_MAX, &g.serial))
        return false;
    size_t i;
    json_t *gj;
    json_array_foreach(gis, i, gj)
    {
        unsigned pid, start, id;
        struct mig_gi *gi;
        const struct mig_profile *p = NULL;
        json_t *cis = json_object_get(gj, "compute_instances");
        if (!uint_field(gj, "profile_id", UINT_MAX, &pid) ||
            !uint_field(gj, "start", MIG_SLOTS, &start) || !uint_field(gj, "id", 64, &id) ||
            !(p = mig_profile_by_id(sg->seed->table, pid)) ||
            mig_gi_create(&g, p, start, &gi) != NVML_SUCCESS || gi->id != id ||
            !json_is_array(cis) || json_array_size(cis) > MIG_MAX_CI)
            return false;
        size_t c;
        json_t *cj;
        unsigned used = 0;
        json_array_foreach(cis, c, cj)
        {
            struct mig_ci ci = {0};
            json_t *uuid = json_object_get(cj, "uuid");
            if (!uint_field(cj, "id", MIG_MAX_CI, &ci.id) ||
                !uint_field(cj, "profile", NVML_COMPUTE_INSTANCE_PROFILE_COUNT, &ci.profile) ||
                !uint_field(cj, "start", MIG_COMPUTE, &ci.start) || !json_is_string(uuid) ||
                json_string_length(uuid) >= MIG_UUID_LEN ||
                (ci.size = mig_ci_slices(gi, ci.profile)) == 0 || ci.start + ci.size > p->slices ||
                (used & (((1u << ci.size) - 1) << ci.start)) ||
                (gi->nci > 0 && gi->ci[gi->nci - 1].id >= ci.id))
                return false;
            used |= ((1u << ci.size) - 1) << ci.start;
            memcpy(ci.uuid, json_string_value(uuid), json_string_length(uuid) + 1);
            gi->ci[gi->nci++] = ci;
        }
    }
    *ret = g;
    return true;
}

static json_t *read_state(const char *path)
{
    if (!path)
        return NULL;
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root && access(path, F_OK) == 0)
        fprintf(stderr, "fakenvml: %s: line %d: %s; starting from the GPU file\n", path, jerr.line,
                jerr.text);
    if (root && !json_is_object(json_object_get(root, "gpus"))) {
        fprintf(stderr, "fakenvml: %s: no \"gpus\" object; starting from the GPU file\n", path);
        json_decref(root);
        root = NULL;
    }
    return root;
}

int mig_state_load(const char *path, struct mig_state_gpu *gpus, unsigned n, bool *ret_changed)
{
    json_t *root = read_state(path);
    json_t *all = root ? json_object_get(root, "gpus") : NULL;
    bool changed = false;
    char msg[256];
    for (unsigned i = 0; i < n; i++) {
        json_t *o = all ? json_object_get(all, gpus[i].uuid) : NULL;
        if (o && gpu_from_json(o, &gpus[i], gpus[i].state))
            continue;
        /* Parsing checked the seed, so applying it cannot fail. */
        if (mig_seed_apply(gpus[i].seed, gpus[i].uuid, gpus[i].state, msg, sizeof(msg)) != 0)
            *gpus[i].state = (struct mig_gpu){0};
        changed = true;
    }
    json_decref(root);
    *ret_changed = changed;
    return 0;
}

int mig_state_save(const char *path, const struct mig_state_gpu *gpus, unsigned n)
{
    json_t *root = read_state(path);
    if (!root)
        root = json_pack("{s:{}}", "gpus");
    json_t *all = root ? json_object_get(root, "gpus") : NULL;
    for (unsigned i = 0; all && i < n; i++)
        json_object_set_new(all, gpus[i].uuid, gpu_to_json(&gpus[i]));
    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
    int rc = all ? json_dump_file(root, tmp, JSON_INDENT(1) | JSON_SORT_KEYS) : -1;
    json_decref(root);
    /* Readable by every process, whoever wrote it and under any umask: the
     * driver's state is one for the machine (an agent's privileged half
     * changes it, its unprivileged half reads it). */
    if (rc == 0 && chmod(tmp, 0644) != 0)
        rc = -1;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -1;
    if (rc != 0) {
        fprintf(stderr, "fakenvml: %s: cannot write the MIG state: %s\n", path, strerror(errno));
        unlink(tmp);
    }
    return rc;
}

int mig_state_lock(const char *path, bool exclusive)
{
    char lock[PATH_MAX + 8];
    snprintf(lock, sizeof(lock), "%s.lock", path);
    /* A reader may not be the lock file's owner: flock needs no write access. */
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EACCES && !exclusive)
        fd = open(lock, O_RDONLY | O_CLOEXEC);
    else if (fd >= 0)
        (void)fchmod(fd, 0644); /* whatever the umask: others take shared locks on it */
    if (fd < 0 || flock(fd, exclusive ? LOCK_EX : LOCK_SH) != 0) {
        fprintf(stderr, "fakenvml: %s: cannot lock: %s\n", lock, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

void mig_state_unlock(int fd)
{
    if (fd >= 0)
        close(fd); /* releases the flock */
}

/*
 * gpus.c - the fake NVML's GPUs: the built-in set, parsing and validating the
 * JSON file (README.md), and re-reading it when it changes (gpus.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "fakenvml/gpus.h"
#include "base/banned.h"

#define MAX_FILE         (1u << 20)
#define RACY_NS          1000000000ll /* coarser than any file system's mtime tick */
#define DEFAULT_GPUS     8
#define DEFAULT_DRIVER   "550.54.15"
#define DEFAULT_NAME     "NVIDIA H100 80GB HBM3"
#define DEFAULT_UUID_FMT "GPU-fa4e0000-0000-4000-8000-%012x"

enum { LOAD_OK = 0, LOAD_BAD_NEW = -1, LOAD_BAD_SAME = -2 };

/* ---- the JSON file ---- */

enum ftype { F_UINT, F_BOOL };

/* The scalar fields of a GPU object: a table, so that parsing is one loop. */
static const struct field {
    const char *key;
    enum ftype type;
    size_t off; /* of an unsigned long long (F_UINT) or a bool (F_BOOL) */
    unsigned long long min, max;
} gpu_fields[] = {
    {"memory_mib", F_UINT, offsetof(struct nvmlDevice_st, memory_mib), 1, 1ull << 24},
    {"memory_used_mib", F_UINT, offsetof(struct nvmlDevice_st, memory_used_mib), 0, 1ull << 24},
    {"utilization", F_UINT, offsetof(struct nvmlDevice_st, utilization), 0, 100},
    {"memory_utilization", F_UINT, offsetof(struct nvmlDevice_st, memory_utilization), 0, 100},
    {"power_mw", F_UINT, offsetof(struct nvmlDevice_st, power_mw), 0, 10000000},
    {"temperature_c", F_UINT, offsetof(struct nvmlDevice_st, temperature_c), 0, 200},
    {"process_memory_mib", F_UINT, offsetof(struct nvmlDevice_st, process_memory_mib), 0,
     1ull << 24},
    {"mig_capable", F_BOOL, offsetof(struct nvmlDevice_st, mig_capable), 0, 1},
    {"mig_enabled", F_BOOL, offsetof(struct nvmlDevice_st, mig_enabled), 0, 1},
    {"mig_reset_required", F_BOOL, offsetof(struct nvmlDevice_st, mig_reset_required), 0, 1},
};

__attribute__((format(printf, 3, 4))) static int fail(char *msg, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
    return -1;
}

static void gpu_defaults(struct nvmlDevice_st *g, unsigned index)
{
    memset(g, 0, sizeof(*g));
    g->index = index;
    snprintf(g->uuid, sizeof(g->uuid), DEFAULT_UUID_FMT, index);
    snprintf(g->name, sizeof(g->name), "%s", DEFAULT_NAME);
    g->memory_mib = 81559;
    g->memory_used_mib = GPUS_FROM_PROCESSES;
    g->utilization = GPUS_FROM_PROCESSES;
    g->power_mw = GPUS_FROM_PROCESSES;      /* from the utilization (busy.h) */
    g->temperature_c = GPUS_FROM_PROCESSES; /* likewise */
    g->process_memory_mib = GPUS_FROM_PROCESSES;
    g->mig_capable = true;
    g->mig.table = mig_table_for(g->name, g->memory_mib);
    snprintf(g->mig.key, sizeof(g->mig.key), "%s 1 0", mig_table_name(g->mig.table));
}

static void default_config(struct gpus_config *c)
{
    snprintf(c->driver_version, sizeof(c->driver_version), "%s", DEFAULT_DRIVER);
    c->ngpus = DEFAULT_GPUS;
    for (unsigned i = 0; i < DEFAULT_GPUS; i++) {
        struct nvmlDevice_st *g = &c->gpus[i];
        gpu_defaults(g, i);
        g->nvlink = true;
        for (unsigned j = 0; j < DEFAULT_GPUS; j++)
            if (j != i)
                g->peers[g->npeers++] = j;
    }
}

/* Real UUIDs read "GPU-" and 8-4-4-4-12 lower-case hex digits; agents may rely on it. */
static bool uuid_valid(const char *s)
{
    static const char shape[] = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
    if (strlen(s) != sizeof(shape) - 1)
        return false;
    for (size_t i = 0; shape[i]; i++) {
        bool hex = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f');
        if (shape[i] == 'x' ? !hex : s[i] != shape[i])
            return false;
    }
    return true;
}

static int parse_string(json_t *v, char *dst, size_t size, const char *what, char *msg, size_t len)
{
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= size)
        return fail(msg, len, "%s: must be a string of 1 to %zu bytes", what, size - 1);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return fail(msg, len, "%s: contains a NUL byte", what);
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

static int parse_peers(json_t *v, struct nvmlDevice_st *g, char *msg, size_t len)
{
    size_t i;
    json_t *p;
    if (!json_is_array(v) || json_array_size(v) > NVML_NVLINK_MAX_LINKS)
        return fail(msg, len, "gpus[%u].nvlink_peers: must be an array of at most %d GPU indexes",
                    g->index, NVML_NVLINK_MAX_LINKS);
    json_array_foreach(v, i, p)
    {
        if (!json_is_integer(p) || json_integer_value(p) < 0 || json_integer_value(p) >= GPUS_MAX ||
            json_integer_value(p) == g->index)
            return fail(msg, len, "gpus[%u].nvlink_peers[%zu]: must be another GPU's index",
                        g->index, i);
        g->peers[i] = (unsigned)json_integer_value(p);
    }
    g->npeers = (unsigned)json_array_size(v);
    g->nvlink = true;
    return 0;
}

/* "mig_instances": [{"profile_id": 9, "start": 4}, ...]. */
static int parse_mig_instances(json_t *v, struct nvmlDevice_st *g, char *msg, size_t len)
{
    size_t i;
    json_t *o;
    if (!json_is_array(v) || json_array_size(v) > MIG_MAX_GI)
        return fail(msg, len, "gpus[%u].mig_instances: must be an array of at most %d instances",
                    g->index, MIG_MAX_GI);
    json_array_foreach(v, i, o)
    {
        json_t *pid = json_object_get(o, "profile_id"), *start = json_object_get(o, "start");
        if (!json_is_object(o) || json_object_size(o) != 2 || !json_is_integer(pid) ||
            json_integer_value(pid) < 0 || json_integer_value(pid) > 1000 ||
            !json_is_integer(start) || json_integer_value(start) < 0 ||
            json_integer_value(start) >= MIG_SLOTS)
            return fail(msg, len,
                        "gpus[%u].mig_instances[%zu]: must be {\"profile_id\": ID, \"start\": "
                        "SLICE 0-%d}",
                        g->index, i, MIG_SLOTS - 1);
        g->mig.profile_id[i] = (unsigned)json_integer_value(pid);
        g->mig.start[i] = (unsigned)json_integer_value(start);
    }
    g->mig.n = (unsigned)json_array_size(v);
    return 0;
}

/* The MIG fields once the object is read: the table, the seed and its key. */
static int finish_mig(struct nvmlDevice_st *g, const char *table, char *msg, size_t len)
{
    struct mig_seed *s = &g->mig;
    s->table = table ? mig_table_parse(table) : mig_table_for(g->name, g->memory_mib);
    s->enabled = g->mig_enabled;
    if (table && s->table == MIG_TABLE_NONE)
        return fail(msg, len,
                    "gpus[%u].mig_table: must be A100-40GB, A100-80GB, H100-80GB or H200-141GB",
                    g->index);
    if (s->n > 0 && !g->mig_enabled)
        return fail(msg, len, "gpus[%u].mig_instances: needs mig_enabled", g->index);
    if (s->n > 0 && s->table == MIG_TABLE_NONE)
        return fail(msg, len, "gpus[%u].mig_instances: no MIG profiles for '%s' (set mig_table)",
                    g->index, g->name);
    int n = snprintf(s->key, sizeof(s->key), "%s %d %d", mig_table_name(s->table),
                     (int)g->mig_capable, (int)s->enabled);
    for (unsigned i = 0; i < s->n && n > 0 && (size_t)n < sizeof(s->key); i++)
        n += snprintf(s->key + n, sizeof(s->key) - (size_t)n, " %u@%u", s->profile_id[i],
                      s->start[i]);
    struct mig_gpu check;
    char why[200];
    if (mig_seed_apply(s, g->uuid, &check, why, sizeof(why)) != 0)
        return fail(msg, len, "gpus[%u].%s", g->index, why);
    return 0;
}

static int parse_field(const struct field *f, json_t *v, struct nvmlDevice_st *g, char *msg,
                       size_t len)
{
    char *at = (char *)g + f->off;
    if (f->type == F_BOOL) {
        if (!json_is_boolean(v))
            return fail(msg, len, "gpus[%u].%s: must be true or false", g->index, f->key);
        *(bool *)at = json_is_true(v);
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        (unsigned long long)json_integer_value(v) < f->min ||
        (unsigned long long)json_integer_value(v) > f->max)
        return fail(msg, len, "gpus[%u].%s: must be an integer from %llu to %llu", g->index, f->key,
                    f->min, f->max);
    unsigned long long val = (unsigned long long)json_integer_value(v);
    memcpy(at, &val, sizeof(val));
    return 0;
}

static int parse_gpu(json_t *obj, unsigned index, struct nvmlDevice_st *g, char *msg, size_t len)
{
    const char *key;
    json_t *v;
    char what[320];
    const char *table = NULL;
    gpu_defaults(g, index);
    if (!json_is_object(obj))
        return fail(msg, len, "gpus[%u]: must be an object", index);
    json_object_foreach(obj, key, v)
    {
        snprintf(what, sizeof(what), "gpus[%u].%.256s", index, key);
        const struct field *f = NULL;
        for (size_t i = 0; i < sizeof(gpu_fields) / sizeof(gpu_fields[0]) && !f; i++)
            if (strcmp(key, gpu_fields[i].key) == 0)
                f = &gpu_fields[i];
        int rc;
        if (f)
            rc = parse_field(f, v, g, msg, len);
        else if (strcmp(key, "uuid") == 0)
            rc = parse_string(v, g->uuid, sizeof(g->uuid), what, msg, len);
        else if (strcmp(key, "name") == 0)
            rc = parse_string(v, g->name, sizeof(g->name), what, msg, len);
        else if (strcmp(key, "nvlink_peers") == 0)
            rc = parse_peers(v, g, msg, len);
        else if (strcmp(key, "mig_instances") == 0)
            rc = parse_mig_instances(v, g, msg, len);
        else if (strcmp(key, "mig_table") == 0 && json_is_string(v))
            table = json_string_value(v);
        else if (strcmp(key, "mig_table") == 0)
            rc = fail(msg, len, "%s: must be a string", what);
        else
            rc = fail(msg, len, "%s: unknown field", what);
        if (rc != 0)
            return rc;
    }
    if (!uuid_valid(g->uuid))
        return fail(msg, len,
                    "gpus[%u].uuid: must read GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx "
                    "(lower-case hex)",
                    index);
    if (g->memory_used_mib != GPUS_FROM_PROCESSES && g->memory_used_mib > g->memory_mib)
        return fail(msg, len, "gpus[%u].memory_used_mib: more than memory_mib", index);
    if (g->mig_enabled && !g->mig_capable)
        return fail(msg, len, "gpus[%u].mig_enabled: the GPU is not mig_capable", index);
    return finish_mig(g, table, msg, len);
}

/* The checks that need every GPU: peers exist, UUIDs are unique. */
static int check_config(const struct gpus_config *c, char *msg, size_t len)
{
    for (unsigned i = 0; i < c->ngpus; i++) {
        const struct nvmlDevice_st *g = &c->gpus[i];
        for (unsigned l = 0; l < g->npeers; l++)
            if (g->peers[l] >= c->ngpus)
                return fail(msg, len, "gpus[%u].nvlink_peers[%u]: there is no GPU %u", i, l,
                            g->peers[l]);
        for (unsigned j = 0; j < i; j++)
            if (strcmp(g->uuid, c->gpus[j].uuid) == 0)
                return fail(msg, len, "gpus[%u].uuid: the same as gpus[%u].uuid", i, j);
    }
    return 0;
}

static int parse_config(const char *bytes, size_t n, struct gpus_config *c, char *msg, size_t len)
{
    json_error_t jerr;
    json_t *root = json_loadb(bytes, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return fail(msg, len, "line %d column %d: %s", jerr.line, jerr.column, jerr.text);
    memset(c, 0, sizeof(*c));
    snprintf(c->driver_version, sizeof(c->driver_version), "%s", DEFAULT_DRIVER);
    int rc = 0;
    const char *key;
    json_t *v, *gpus = NULL;
    if (!json_is_object(root))
        rc = fail(msg, len, "the top level must be an object");
    json_object_foreach(root, key, v)
    {
        if (rc != 0)
            break;
        if (strcmp(key, "driver_version") == 0)
            /* 16 bytes at most, so that "12." + it fits NVML's version buffers */
            rc = parse_string(v, c->driver_version, 17, "driver_version", msg, len);
        else if (strcmp(key, "gpus") == 0)
            gpus = v;
        else
            rc = fail(msg, len, "%.256s: unknown field", key);
    }
    if (rc == 0 && (!json_is_array(gpus) || json_array_size(gpus) > GPUS_MAX))
        rc = fail(msg, len, "gpus: must be an array of at most %d GPUs", GPUS_MAX);
    for (size_t i = 0; rc == 0 && i < json_array_size(gpus); i++) {
        rc = parse_gpu(json_array_get(gpus, i), (unsigned)i, &c->gpus[i], msg, len);
        c->ngpus = (unsigned)i + 1;
    }
    if (rc == 0)
        rc = check_config(c, msg, len);
    json_decref(root);
    return rc;
}

/* ---- reading and re-reading the file ---- */

static long long ns_of(struct timespec t)
{
    return (long long)t.tv_sec * 1000000000ll + t.tv_nsec;
}

static void log_problem(const struct gpus_source *s, const char *msg)
{
    fprintf(stderr, "fakenvml: %s: %s\n", s->path, msg);
}

void gpus_source_release(struct gpus_source *s)
{
    free(s->bytes);
    s->bytes = NULL;
    s->nbytes = 0;
    s->seen = false;
}

static int read_file(const char *path, char **ret_bytes, size_t *ret_n, struct stat *ret_st,
                     char *msg, size_t len)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return fail(msg, len, "cannot open: %s", strerror(errno));
    char *buf = malloc(MAX_FILE + 1);
    size_t n = buf ? fread(buf, 1, MAX_FILE + 1, f) : 0;
    int rc = 0;
    if (!buf)
        rc = fail(msg, len, "out of memory");
    else if (ferror(f))
        rc = fail(msg, len, "cannot read: %s", strerror(errno));
    else if (n > MAX_FILE)
        rc = fail(msg, len, "larger than %u bytes", MAX_FILE);
    else if (fstat(fileno(f), ret_st) != 0)
        rc = fail(msg, len, "cannot stat: %s", strerror(errno));
    fclose(f);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    *ret_bytes = buf;
    *ret_n = n;
    return 0;
}

/* Reads the file; new bytes are parsed, and a good parse replaces the state. */
static int load_file(struct gpus_source *s, char *msg, size_t len)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char *bytes = NULL;
    size_t n = 0;
    struct stat st;
    if (read_file(s->path, &bytes, &n, &st, msg, len) != 0)
        return LOAD_BAD_NEW;
    s->seen = true;
    s->st = st;
    s->read_at_ns = ns_of(now);
    if (s->bytes && n == s->nbytes && memcmp(bytes, s->bytes, n) == 0) {
        free(bytes);
        return s->bytes_ok ? LOAD_OK : LOAD_BAD_SAME;
    }
    struct gpus_config *c = malloc(sizeof(*c));
    int rc = c ? parse_config(bytes, n, c, msg, len) : fail(msg, len, "out of memory");
    if (rc == 0)
        s->cfg = *c;
    free(c);
    free(s->bytes);
    s->bytes = bytes;
    s->nbytes = n;
    s->bytes_ok = rc == 0;
    return rc == 0 ? LOAD_OK : LOAD_BAD_NEW;
}

void gpus_source_refresh(struct gpus_source *s)
{
    struct stat st;
    char msg[512];
    if (!s->path[0] || stat(s->path, &st) != 0)
        return; /* built-in GPUs, or the file is gone: keep the last good state */
    bool same = s->seen && st.st_dev == s->st.st_dev && st.st_ino == s->st.st_ino &&
                st.st_size == s->st.st_size && ns_of(st.st_mtim) == ns_of(s->st.st_mtim);
    if (same && ns_of(st.st_mtim) + RACY_NS <= s->read_at_ns)
        return;
    if (load_file(s, msg, sizeof(msg)) == LOAD_BAD_NEW)
        log_problem(s, msg);
}

int gpus_source_init(struct gpus_source *s, const char *path)
{
    char msg[512];
    gpus_source_release(s);
    s->path[0] = '\0';
    if (!path || !*path) {
        default_config(&s->cfg);
        return 0;
    }
    if (strlen(path) >= sizeof(s->path)) {
        fprintf(stderr, "fakenvml: FAKENVML_CONFIG is longer than %zu bytes\n",
                sizeof(s->path) - 1);
        return -1;
    }
    memcpy(s->path, path, strlen(path) + 1);
    if (load_file(s, msg, sizeof(msg)) == LOAD_OK)
        return 0;
    log_problem(s, msg);
    gpus_source_release(s);
    return -1;
}

/*
 * trace.c - the trace reader: lines read through lines.h (plain or gzip
 * alike, NUL bytes and over-long lines seen), each row checked field by
 * field before anything is kept.
 *
 * Decisions the header leaves open:
 *  - Every row is validated, also those the window leaves out, and submit
 *    order is checked against the previous valid row whether it was kept or
 *    filtered: a file out of order is bad wherever the window falls. Skipped
 *    (bad) rows take no part in the order check.
 *  - Job ids must be unique among the kept rows only: remembering the ids of
 *    filtered rows would cost the memory a window is meant to save.
 *  - An empty window (from_s >= until_s >= 0) is an error, not an empty trace.
 *  - submit_time_s and duration_s are at most MAX_SECONDS, so that the
 *    simulator may add a few of them without overflowing int64_t.
 *  - Fields are split at every comma: there is no CSV quoting. A control byte
 *    (NUL, tab, a lone CR) anywhere in a row makes it bad; a CR just before
 *    the newline is a CRLF line end and is dropped.
 *  - The header line, I/O errors, a truncated gzip stream and the caps are
 *    errors even with skip_bad; everything else wrong with a row is skippable.
 */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "sim/lines.h"
#include "sim/trace.h"
#include "base/banned.h"

#define HEADER      "job_id,submit_time_s,duration_s,num_gpus,user,queue,gpu_type,status"
#define NFIELDS     8
#define MAX_SECONDS INT64_C(1000000000000000) /* 31.7 million years: sums never overflow */
#define CHUNK_SIZE  ((size_t)64 * 1024)

enum field { F_ID, F_SUBMIT, F_DURATION, F_GPUS, F_USER, F_QUEUE, F_GPU_TYPE, F_STATUS };

struct sim_trace_chunk {
    struct sim_trace_chunk *next;
    size_t used, size;
    char data[];
};

/* Open addressing from a string (owned by the trace's chunks) to an index. */
struct strslot {
    const char *key; /* NULL: empty */
    uint32_t hash;
    uint32_t val;
};

struct strmap {
    struct strslot *slots;
    size_t mask; /* slots - 1, a power of two minus one */
    size_t n;
};

struct loader {
    struct sim_lines in; /* the file, its line number and the message */
    bool skip_bad;
    int64_t from_s, until_s;
    struct sim_trace *t;
    size_t jobs_cap, queues_cap, types_cap;
    struct strmap ids, queues, types;
    int64_t last_submit; /* of the previous valid row */
    uint32_t last_line;
};

static uint32_t hash_str(const char *s)
{
    uint64_t h = UINT64_C(14695981039346656037);
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * UINT64_C(1099511628211);
    return (uint32_t)(h ^ (h >> 32));
}

/* The slot holding key, or the empty slot where it would go; NULL if none yet. */
static struct strslot *strmap_find(const struct strmap *m, const char *key, uint32_t hash)
{
    if (!m->slots)
        return NULL;
    for (size_t i = hash & m->mask;; i = (i + 1) & m->mask) {
        struct strslot *s = &m->slots[i];
        if (!s->key || (s->hash == hash && strcmp(s->key, key) == 0))
            return s;
    }
}

/* Adds a key known to be absent; keeps the load at most one half. */
static int strmap_add(struct strmap *m, const char *key, uint32_t hash, uint32_t val)
{
    if (!m->slots || (m->n + 1) * 2 > m->mask + 1) {
        size_t nslots = m->slots ? (m->mask + 1) * 2 : 64;
        struct strslot *slots = calloc(nslots, sizeof(*slots));
        if (!slots)
            return GPO_ENOMEM;
        struct strmap bigger = {slots, nslots - 1, 0};
        for (size_t i = 0; m->slots && i <= m->mask; i++)
            if (m->slots[i].key)
                *strmap_find(&bigger, m->slots[i].key, m->slots[i].hash) = m->slots[i];
        bigger.n = m->n;
        free(m->slots);
        *m = bigger;
    }
    *strmap_find(m, key, hash) = (struct strslot){key, hash, val};
    m->n++;
    return 0;
}

static void strmap_release(struct strmap *m)
{
    free(m->slots);
    *m = (struct strmap){0};
}

/* A copy of s[0, len) in the trace's chunks, so it lives as long as the trace. */
static char *store_string(struct sim_trace *t, const char *s, size_t len)
{
    struct sim_trace_chunk *c = t->chunks;
    if (!c || c->size - c->used < len + 1) {
        size_t size = len + 1 > CHUNK_SIZE ? len + 1 : CHUNK_SIZE;
        c = malloc(sizeof(*c) + size);
        if (!c)
            return NULL;
        c->next = t->chunks;
        c->used = 0;
        c->size = size;
        t->chunks = c;
    }
    char *p = c->data + c->used;
    memcpy(p, s, len);
    p[len] = '\0';
    c->used += len + 1;
    return p;
}

static int parse_seconds(struct loader *L, const char *field, const char *s, int64_t *ret)
{
    int rc = sim_lines_digits(s, MAX_SECONDS, ret);
    if (rc == -1)
        return sim_lines_bad_value(&L->in, field, s, "whole seconds >= 0");
    if (rc == -2)
        return sim_lines_bad_value(&L->in, field, s, "at most %" PRId64 " seconds", MAX_SECONDS);
    return 0;
}

/* num_gpus as milli-GPUs: a whole number ("8", "2.0"), or a fraction below 1
 * rounded to the nearest milli and at least 1 ("0.46": 460, "0.0004": 1).
 * Returns 0, -1 (not a number), -2 (above the cap), -3 (a fraction above 1). */
static int parse_gpus(const char *s, int64_t *ret)
{
    static const int64_t scale[3] = {100, 10, 1};
    int64_t whole = 0, milli = 0;
    bool frac = false;
    if (*s < '0' || *s > '9')
        return -1;
    for (; *s >= '0' && *s <= '9'; s++)
        if (whole <= SIM_TRACE_MAX_GPUS) /* saturates: no overflow on long digit runs */
            whole = whole * 10 + (*s - '0');
    if (*s == '.') {
        if (*++s < '0' || *s > '9')
            return -1;
        for (int k = 0; *s >= '0' && *s <= '9'; s++, k++) {
            int d = *s - '0';
            frac = frac || d != 0;
            if (k < 3)
                milli += d * scale[k];
            else if (k == 3)
                milli += d >= 5;
        }
    }
    if (*s)
        return -1;
    if (frac) {
        *ret = milli > 0 ? milli : 1;
        return whole > 0 ? -3 : 0;
    }
    *ret = whole * 1000;
    return whole > SIM_TRACE_MAX_GPUS ? -2 : 0;
}

/* Fills *job from the row's fields but for queue and gpu_type, which
 * add_job interns. Returns 0 or SIM_LINES_BAD. */
static int parse_row(struct loader *L, char *const fields[NFIELDS], struct sim_trace_job *job)
{
    if (!*fields[F_ID])
        return sim_lines_bad_value(&L->in, "job_id", "", "a non-empty id");
    int rc = parse_seconds(L, "submit_time_s", fields[F_SUBMIT], &job->submit_s);
    if (rc == 0)
        rc = parse_seconds(L, "duration_s", fields[F_DURATION], &job->duration_s);
    if (rc)
        return rc;
    switch (parse_gpus(fields[F_GPUS], &job->gpu_milli)) {
    case 0:
        break;
    case -2:
        return sim_lines_bad_value(&L->in, "num_gpus", fields[F_GPUS], "at most %d GPUs",
                                   SIM_TRACE_MAX_GPUS);
    case -3:
        return sim_lines_bad_value(&L->in, "num_gpus", fields[F_GPUS],
                                   "a whole number or a fraction below 1");
    default:
        return sim_lines_bad_value(&L->in, "num_gpus", fields[F_GPUS], "a number >= 0");
    }
    job->line = L->in.lineno;
    return 0;
}

/* The index of name in names[0, *n), added in order of first appearance. */
static int intern(struct loader *L, struct strmap *m, char ***names, size_t *n, size_t *cap,
                  const char *field, const char *name, uint32_t *ret)
{
    uint32_t hash = hash_str(name);
    struct strslot *slot = strmap_find(m, name, hash);
    if (slot && slot->key) {
        *ret = slot->val;
        return 0;
    }
    if (*n == SIM_TRACE_MAX_NAMES) {
        sim_lines_bad_value(&L->in, field, name, "at most %u distinct names", SIM_TRACE_MAX_NAMES);
        return GPO_E2BIG; /* a cap, not a bad row: skip_bad does not skip it */
    }
    if (*n == *cap) {
        char **p = sim_lines_grow(*names, cap, sizeof(**names));
        if (!p)
            return GPO_ENOMEM;
        *names = p;
    }
    char *copy = store_string(L->t, name, strlen(name));
    if (!copy || strmap_add(m, copy, hash, (uint32_t)*n) < 0)
        return GPO_ENOMEM;
    (*names)[*n] = copy;
    *ret = (uint32_t)(*n)++;
    return 0;
}

/* Appends a checked job: its id, queue and gpu_type into the tables. */
static int add_job(struct loader *L, struct sim_trace_job *job, char *const fields[NFIELDS],
                   uint32_t id_hash)
{
    struct sim_trace *t = L->t;
    if (t->njobs == SIM_TRACE_MAX_JOBS)
        return sim_lines_fail(&L->in, GPO_E2BIG, "row: expected at most %u jobs",
                              SIM_TRACE_MAX_JOBS);
    int rc = intern(L, &L->queues, &t->queues, &t->nqueues, &L->queues_cap, "queue",
                    fields[F_QUEUE], &job->queue);
    job->gpu_type = SIM_NONE;
    if (rc == 0 && *fields[F_GPU_TYPE])
        rc = intern(L, &L->types, &t->gpu_types, &t->ngpu_types, &L->types_cap, "gpu_type",
                    fields[F_GPU_TYPE], &job->gpu_type);
    if (rc)
        return rc;
    if (t->njobs == L->jobs_cap) {
        struct sim_trace_job *p = sim_lines_grow(t->jobs, &L->jobs_cap, sizeof(*t->jobs));
        if (!p)
            return GPO_ENOMEM;
        t->jobs = p;
    }
    job->id = store_string(t, fields[F_ID], strlen(fields[F_ID]));
    if (!job->id || strmap_add(&L->ids, job->id, id_hash, (uint32_t)t->njobs) < 0)
        return GPO_ENOMEM;
    t->jobs[t->njobs++] = *job;
    return 0;
}

/* Checks a parsed row against the rows before it and keeps it, or counts it
 * as filtered. Returns 0, SIM_LINES_BAD or an error. */
static int place_row(struct loader *L, struct sim_trace_job *job, char *const fields[NFIELDS])
{
    if (L->last_line && job->submit_s < L->last_submit)
        return sim_lines_bad_value(&L->in, "submit_time_s", fields[F_SUBMIT],
                                   ">= %" PRId64 " as on line %u (rows in submit order)",
                                   L->last_submit, (unsigned)L->last_line);
    bool keep = job->submit_s >= L->from_s && (L->until_s < 0 || job->submit_s < L->until_s);
    uint32_t hash = 0;
    if (keep) {
        hash = hash_str(fields[F_ID]);
        struct strslot *dup = strmap_find(&L->ids, fields[F_ID], hash);
        if (dup && dup->key)
            return sim_lines_bad_value(&L->in, "job_id", fields[F_ID],
                                       "a unique id (line %u has it too)",
                                       (unsigned)L->t->jobs[dup->val].line);
    }
    L->last_submit = job->submit_s;
    L->last_line = job->line;
    if (!keep) {
        L->t->nfiltered++;
        return 0;
    }
    return add_job(L, job, fields, hash);
}

static int take_row(struct loader *L, char *line, size_t len)
{
    char *fields[NFIELDS];
    struct sim_trace_job job = {0};
    int rc = sim_lines_split(&L->in, line, len, fields, NFIELDS);
    if (rc == 0)
        rc = parse_row(L, fields, &job);
    if (rc == 0)
        rc = place_row(L, &job, fields);
    return rc;
}

static int read_rows(struct loader *L)
{
    for (;;) {
        char *line;
        size_t len;
        int rc = sim_lines_next(&L->in, &line, &len);
        if (rc == 0 && !line)
            return 0;
        if (rc == 0)
            rc = take_row(L, line, len);
        rc = sim_lines_row_done(&L->in, rc, L->skip_bad, &L->t->nskipped, L->t->first_skip,
                                sizeof(L->t->first_skip));
        if (rc)
            return rc;
    }
}

static int open_trace(struct loader *L, const char *path)
{
    /* An empty window is refused rather than read into an empty trace: it is
     * what a zeroed sim_trace_opts (until_s 0) asks for by mistake. */
    if (L->until_s >= 0 && L->from_s >= L->until_s) {
        L->in.path = path;
        return sim_lines_fail(&L->in, GPO_EINVAL,
                              "window: expected from_s < until_s, got %" PRId64 " >= %" PRId64,
                              L->from_s, L->until_s);
    }
    return sim_lines_open(&L->in, path, SIM_TRACE_MAX_LINE);
}

void sim_trace_init(struct sim_trace *t)
{
    *t = (struct sim_trace){0};
}

void sim_trace_release(struct sim_trace *t)
{
    if (!t)
        return;
    while (t->chunks) {
        struct sim_trace_chunk *next = t->chunks->next;
        free(t->chunks);
        t->chunks = next;
    }
    free(t->jobs);
    free(t->queues);
    free(t->gpu_types);
    sim_trace_init(t);
}

int sim_trace_load(struct sim_trace *t, const char *path, const struct sim_trace_opts *opts,
                   char *err, size_t errlen)
{
    assert(t && path);
    struct sim_trace tmp;
    sim_trace_init(&tmp);
    struct loader L = {.t = &tmp, .until_s = -1};
    if (opts) {
        L.skip_bad = opts->skip_bad;
        L.from_s = opts->from_s;
        L.until_s = opts->until_s;
    }
    int rc = open_trace(&L, path);
    if (rc == 0)
        rc = sim_lines_header(&L.in, HEADER);
    if (rc == 0)
        rc = read_rows(&L);
    sim_lines_close(&L.in);
    strmap_release(&L.ids);
    strmap_release(&L.queues);
    strmap_release(&L.types);
    sim_trace_release(t);
    if (rc == GPO_ENOMEM) {
        L.in.lineno = 0;
        sim_lines_fail(&L.in, rc, "%s", gpo_strerror(rc));
    }
    if (rc)
        sim_trace_release(&tmp);
    *t = tmp;
    sim_lines_copy_message(err, errlen, rc ? L.in.msg : "");
    return rc;
}

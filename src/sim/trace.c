/*
 * trace.c - the trace reader: zlib's gzread (plain or gzip alike) into one
 * buffer, lines split by hand so that NUL bytes and over-long lines are seen,
 * each row checked field by field before anything is kept.
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
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "base/err.h"
#include "sim/trace.h"
#include "base/banned.h"

#define HEADER      "job_id,submit_time_s,duration_s,num_gpus,user,queue,gpu_type,status"
#define NFIELDS     8
#define MAX_SECONDS INT64_C(1000000000000000) /* 31.7 million years: sums never overflow */
#define READ_BUF    ((size_t)256 * 1024)      /* > SIM_TRACE_MAX_LINE */
#define CHUNK_SIZE  ((size_t)64 * 1024)
#define QUOTE_MAX   40 /* bytes of a bad value shown in a message */
#define ROW_BAD     1  /* internal: the row is bad (skippable); message in L->msg */

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
    const char *path;
    gzFile f;
    char *buf; /* READ_BUF bytes: [pos, len) not yet consumed */
    size_t pos, len;
    bool eof;
    bool discard; /* the rest of an over-long line is still to be dropped */
    uint32_t lineno;
    bool skip_bad;
    int64_t from_s, until_s;
    struct sim_trace *t;
    size_t jobs_cap, queues_cap, types_cap;
    struct strmap ids, queues, types;
    int64_t last_submit; /* of the previous valid row */
    uint32_t last_line;
    char msg[512];
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

/* Writes "PATH:LINE: " (or "PATH: " at line 0) and the message into L->msg;
 * returns code, so that callers can `return fail(...)`. */
__attribute__((format(printf, 3, 4))) static int fail(struct loader *L, int code, const char *fmt,
                                                      ...)
{
    int n = L->lineno ? snprintf(L->msg, sizeof(L->msg), "%s:%u: ", L->path, (unsigned)L->lineno)
                      : snprintf(L->msg, sizeof(L->msg), "%s: ", L->path);
    if (n >= 0 && (size_t)n < sizeof(L->msg)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(L->msg + n, sizeof(L->msg) - (size_t)n, fmt, ap);
        va_end(ap);
    }
    /* One line, whatever the path or the value held. */
    for (char *p = L->msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    return code;
}
#ifdef __clang_analyzer__
/* clang's static analyzer (make lint) does not follow calls into variadic
 * functions: for the analysis only, fail says that it returns its code. */
#define fail(L, code, ...)                                                                         \
    __extension__({                                                                                \
        int fail_code_ = (code);                                                                   \
        (void)fail(L, fail_code_, __VA_ARGS__), fail_code_;                                        \
    })
#endif

/* s[0, n) for a message: at most QUOTE_MAX bytes, not cutting a UTF-8
 * sequence in two, control bytes shown as '?', "..." when cut. */
static const char *quote(char out[QUOTE_MAX + 4], const char *s, size_t n)
{
    size_t k = n > QUOTE_MAX ? QUOTE_MAX : n;
    /* s[0, n) was read: the analyzer finds a line in a buffer nothing has been read into
     * yet (it does not know that memchr over 0 bytes finds nothing). */
    // cppcheck-suppress arrayIndexOutOfBoundsCond ; k < n: s[k] is inside s[0, n)
    // NOLINTNEXTLINE(clang-analyzer-core.UndefinedBinaryOperatorResult): s[k] was read
    while (k < n && k > 0 && ((unsigned char)s[k] & 0xc0) == 0x80)
        k--;
    for (size_t i = 0; i < k; i++)
        out[i] = (char)((unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i]);
    memcpy(out + k, k < n ? "..." : "", k < n ? 4 : 1);
    return out;
}

/* msg into dst[0, size), cut if need be but not inside a UTF-8 sequence. */
static void copy_message(char *dst, size_t size, const char *msg)
{
    if (!dst || size == 0)
        return;
    size_t len = strlen(msg), n = len < size ? len : size - 1;
    while (n < len && n > 0 && ((unsigned char)msg[n] & 0xc0) == 0x80)
        n--;
    memcpy(dst, msg, n);
    dst[n] = '\0';
}

/* "FIELD: expected EXPECTED, got 'VALUE'" into L->msg; returns ROW_BAD. */
__attribute__((format(printf, 4, 5))) static int bad_value(struct loader *L, const char *field,
                                                           const char *value, const char *fmt, ...)
{
    char expected[160], q[QUOTE_MAX + 4];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(expected, sizeof(expected), fmt, ap);
    va_end(ap);
    return fail(L, ROW_BAD, "%s: expected %s, got '%s'", field, expected,
                quote(q, value, strlen(value)));
}

/* Refills the buffer, keeping [pos, len). Returns 0 or an error. */
static int refill(struct loader *L)
{
    memmove(L->buf, L->buf + L->pos, L->len - L->pos);
    L->len -= L->pos;
    L->pos = 0;
    int n = gzread(L->f, L->buf + L->len, (unsigned)(READ_BUF - L->len));
    if (n > 0) {
        L->len += (size_t)n;
        return 0;
    }
    int zerr;
    const char *why = gzerror(L->f, &zerr);
    size_t plen = strlen(L->path);
    if (n == 0) {
        L->eof = true;
        if (zerr != Z_BUF_ERROR) /* else the input ended inside a gzip stream */
            return 0;
        why = "truncated gzip file";
    } else if (zerr == Z_ERRNO) {
        why = strerror(errno);
    } else if (zerr == Z_MEM_ERROR) {
        return GPO_ENOMEM;
    } else if (strncmp(why, L->path, plen) == 0 && strncmp(why + plen, ": ", 2) == 0) {
        why += plen + 2; /* zlib's message starts with the path, as ours does */
    }
    L->lineno = 0;
    return fail(L, GPO_EINVAL, "read error: %s", why);
}

/* The next line in *line (NUL-terminated in place, newline dropped) and its
 * length in *len, *line NULL at the end. Returns 0, ROW_BAD for an over-long
 * line (the next call drops the rest of it), or a read error. */
static int read_line(struct loader *L, char **line, size_t *len)
{
    for (;;) {
        char *start = L->buf + L->pos;
        size_t avail = L->len - L->pos;
        char *nl = memchr(start, '\n', avail);
        if (L->discard) {
            L->pos = nl ? L->pos + (size_t)(nl - start) + 1 : L->len;
            L->discard = !nl;
            if (nl)
                continue;
        } else if (nl || avail >= SIM_TRACE_MAX_LINE || (L->eof && avail > 0)) {
            size_t n = nl ? (size_t)(nl - start) : avail;
            if (L->lineno == UINT32_MAX)
                return fail(L, GPO_E2BIG, "expected at most %" PRIu32 " lines", UINT32_MAX);
            L->lineno++;
            L->pos = nl ? L->pos + n + 1 : L->len;
            if (n + 1 > SIM_TRACE_MAX_LINE) {
                char q[QUOTE_MAX + 4];
                L->discard = !nl;
                return fail(L, ROW_BAD,
                            "row: expected a line of at most %u bytes with its newline, got '%s'",
                            SIM_TRACE_MAX_LINE, quote(q, start, n));
            }
            start[n] = '\0'; /* over the newline, or the spare byte past a full buffer */
            *line = start;
            *len = n;
            return 0;
        }
        if (L->eof) {
            *line = NULL;
            return 0;
        }
        int rc = refill(L);
        if (rc < 0)
            return rc;
    }
}

/* Doubles an array's capacity (at least 16); NULL when out of memory, the
 * array untouched. */
static void *grow_array(void *arr, size_t *cap, size_t elem)
{
    size_t n = *cap ? *cap * 2 : 16;
    if (n > SIZE_MAX / elem)
        return NULL;
    void *p = realloc(arr, n * elem);
    if (p)
        *cap = n;
    return p;
}

/* Strips a CRLF's CR, refuses control bytes, and splits at the commas into
 * exactly NFIELDS fields. Returns 0 or ROW_BAD. */
static int split_row(struct loader *L, char *line, size_t len, char *fields[NFIELDS])
{
    if (len > 0 && line[len - 1] == '\r')
        line[--len] = '\0';
    size_t nf = 1;
    fields[0] = line;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)line[i];
        if (c == ',') {
            line[i] = '\0';
            if (nf < NFIELDS)
                fields[nf] = line + i + 1;
            nf++;
        } else if (c < 0x20 || c == 0x7f) {
            return fail(L, ROW_BAD,
                        "row: expected text without control bytes, got 0x%02x at byte %zu", c,
                        i + 1);
        }
    }
    if (nf != NFIELDS)
        return fail(L, ROW_BAD, "row: expected %d comma-separated fields, got %zu", NFIELDS, nf);
    return 0;
}

/* Decimal digits only, at most max. Returns 0, -1 (empty or not digits) or
 * -2 (above max). */
static int parse_digits(const char *s, int64_t max, int64_t *ret)
{
    int64_t v = 0;
    bool over = false;
    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        int d = *s - '0';
        if (over || v > (max - d) / 10)
            over = true;
        else
            v = v * 10 + d;
    }
    *ret = v;
    return over ? -2 : 0;
}

static int parse_seconds(struct loader *L, const char *field, const char *s, int64_t *ret)
{
    int rc = parse_digits(s, MAX_SECONDS, ret);
    if (rc == -1)
        return bad_value(L, field, s, "whole seconds >= 0");
    if (rc == -2)
        return bad_value(L, field, s, "at most %" PRId64 " seconds", MAX_SECONDS);
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
 * add_job interns. Returns 0 or ROW_BAD. */
static int parse_row(struct loader *L, char *const fields[NFIELDS], struct sim_trace_job *job)
{
    if (!*fields[F_ID])
        return bad_value(L, "job_id", "", "a non-empty id");
    int rc = parse_seconds(L, "submit_time_s", fields[F_SUBMIT], &job->submit_s);
    if (rc == 0)
        rc = parse_seconds(L, "duration_s", fields[F_DURATION], &job->duration_s);
    if (rc)
        return rc;
    switch (parse_gpus(fields[F_GPUS], &job->gpu_milli)) {
    case 0:
        break;
    case -2:
        return bad_value(L, "num_gpus", fields[F_GPUS], "at most %d GPUs", SIM_TRACE_MAX_GPUS);
    case -3:
        return bad_value(L, "num_gpus", fields[F_GPUS], "a whole number or a fraction below 1");
    default:
        return bad_value(L, "num_gpus", fields[F_GPUS], "a number >= 0");
    }
    job->line = L->lineno;
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
        bad_value(L, field, name, "at most %u distinct names", SIM_TRACE_MAX_NAMES);
        return GPO_E2BIG; /* a cap, not a bad row: skip_bad does not skip it */
    }
    if (*n == *cap) {
        char **p = grow_array(*names, cap, sizeof(**names));
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
        return fail(L, GPO_E2BIG, "row: expected at most %u jobs", SIM_TRACE_MAX_JOBS);
    int rc = intern(L, &L->queues, &t->queues, &t->nqueues, &L->queues_cap, "queue",
                    fields[F_QUEUE], &job->queue);
    job->gpu_type = SIM_NONE;
    if (rc == 0 && *fields[F_GPU_TYPE])
        rc = intern(L, &L->types, &t->gpu_types, &t->ngpu_types, &L->types_cap, "gpu_type",
                    fields[F_GPU_TYPE], &job->gpu_type);
    if (rc)
        return rc;
    if (t->njobs == L->jobs_cap) {
        struct sim_trace_job *p = grow_array(t->jobs, &L->jobs_cap, sizeof(*t->jobs));
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
 * as filtered. Returns 0, ROW_BAD or an error. */
static int place_row(struct loader *L, struct sim_trace_job *job, char *const fields[NFIELDS])
{
    if (L->last_line && job->submit_s < L->last_submit)
        return bad_value(L, "submit_time_s", fields[F_SUBMIT],
                         ">= %" PRId64 " as on line %u (rows in submit order)", L->last_submit,
                         (unsigned)L->last_line);
    bool keep = job->submit_s >= L->from_s && (L->until_s < 0 || job->submit_s < L->until_s);
    uint32_t hash = 0;
    if (keep) {
        hash = hash_str(fields[F_ID]);
        struct strslot *dup = strmap_find(&L->ids, fields[F_ID], hash);
        if (dup && dup->key)
            return bad_value(L, "job_id", fields[F_ID], "a unique id (line %u has it too)",
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
    int rc = split_row(L, line, len, fields);
    if (rc == 0)
        rc = parse_row(L, fields, &job);
    if (rc == 0)
        rc = place_row(L, &job, fields);
    return rc;
}

static int read_header(struct loader *L)
{
    char *line;
    size_t len;
    int rc = read_line(L, &line, &len);
    if (rc)
        return rc == ROW_BAD ? GPO_EINVAL : rc;
    if (!line)
        return fail(L, GPO_EINVAL, "expected the header line, got an empty file");
    if (len > 0 && line[len - 1] == '\r')
        line[--len] = '\0';
    if (len >= 3 && memcmp(line, "\xef\xbb\xbf", 3) == 0) { /* a UTF-8 byte order mark */
        line += 3;
        len -= 3;
    }
    if (len != strlen(HEADER) || memcmp(line, HEADER, len) != 0) {
        char q[QUOTE_MAX + 4];
        return fail(L, GPO_EINVAL, "header: expected '%s', got '%s'", HEADER, quote(q, line, len));
    }
    return 0;
}

static int read_rows(struct loader *L)
{
    for (;;) {
        char *line;
        size_t len;
        int rc = read_line(L, &line, &len);
        if (rc == 0 && !line)
            return 0;
        if (rc == 0)
            rc = take_row(L, line, len);
        if (rc == ROW_BAD && L->skip_bad) {
            if (L->t->nskipped++ == 0)
                copy_message(L->t->first_skip, sizeof(L->t->first_skip), L->msg);
            continue;
        }
        if (rc)
            return rc == ROW_BAD ? GPO_EINVAL : rc;
    }
}

static int open_trace(struct loader *L)
{
    /* An empty window is refused rather than read into an empty trace: it is
     * what a zeroed sim_trace_opts (until_s 0) asks for by mistake. */
    if (L->until_s >= 0 && L->from_s >= L->until_s)
        return fail(L, GPO_EINVAL, "window: expected from_s < until_s, got %" PRId64 " >= %" PRId64,
                    L->from_s, L->until_s);
    L->buf = malloc(READ_BUF + 1); /* + 1: room to terminate a last line without newline */
    if (!L->buf)
        return GPO_ENOMEM;
    errno = 0;
    L->f = gzopen(L->path, "rb");
    if (!L->f) /* errno 0: zlib could not allocate its state */
        return errno ? fail(L, GPO_EINVAL, "cannot open: %s", strerror(errno)) : GPO_ENOMEM;
    gzbuffer(L->f, 128u * 1024u);
    return 0;
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
    struct loader L = {.path = path, .t = &tmp, .until_s = -1};
    if (opts) {
        L.skip_bad = opts->skip_bad;
        L.from_s = opts->from_s;
        L.until_s = opts->until_s;
    }
    int rc = open_trace(&L);
    if (rc == 0)
        rc = read_header(&L);
    if (rc == 0)
        rc = read_rows(&L);
    if (L.f)
        gzclose(L.f);
    free(L.buf);
    strmap_release(&L.ids);
    strmap_release(&L.queues);
    strmap_release(&L.types);
    sim_trace_release(t);
    if (rc == GPO_ENOMEM) {
        L.lineno = 0;
        fail(&L, rc, "%s", gpo_strerror(rc));
    }
    if (rc)
        sim_trace_release(&tmp);
    *t = tmp;
    copy_message(err, errlen, rc ? L.msg : "");
    return rc;
}

/*
 * reqtrace.c - the request trace reader (reqtrace.h): lines through
 * lines.h, each row checked field by field before it is kept.
 *
 * Decisions the header leaves open (as trace.c's, where they meet):
 *  - Every row is validated, also those the window leaves out, and arrival
 *    order is checked against the previous valid row whether it was kept or
 *    filtered. Skipped (bad) rows take no part in the order check.
 *  - An empty window (from_ms >= until_ms >= 0) is an error, not an empty
 *    trace: it is what a zeroed sim_reqtrace_opts asks for by mistake.
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
#include "sim/reqtrace.h"
#include "base/banned.h"

#define HEADER  "request_id,arrival_ms,input_tokens,output_tokens"
#define NFIELDS 4
#define ID_MAX  128

enum field { F_ID, F_ARRIVAL, F_INPUT, F_OUTPUT };

struct loader {
    struct sim_lines in;
    bool skip_bad;
    int64_t from_ms, until_ms;
    struct sim_reqtrace *t;
    size_t cap;
    int64_t last_arrival; /* of the previous valid row */
    uint32_t last_line;   /* 0: none yet */
};

static int parse_tokens(struct loader *L, const char *field, const char *s, int32_t *ret)
{
    int64_t v;
    if (sim_lines_digits(s, SIM_REQTRACE_MAX_TOKENS, &v))
        return sim_lines_bad_value(&L->in, field, s, "a whole number 0 .. %d",
                                   SIM_REQTRACE_MAX_TOKENS);
    *ret = (int32_t)v;
    return 0;
}

static int parse_row(struct loader *L, char *const f[NFIELDS], struct sim_request *q)
{
    size_t idlen = strlen(f[F_ID]);
    if (idlen == 0 || idlen > ID_MAX)
        return sim_lines_bad_value(&L->in, "request_id", f[F_ID], "an id of 1 to %d bytes", ID_MAX);
    if (sim_lines_digits(f[F_ARRIVAL], SIM_REQTRACE_MAX_MS, &q->arrival_ms))
        return sim_lines_bad_value(&L->in, "arrival_ms", f[F_ARRIVAL],
                                   "whole milliseconds 0 .. %lld", (long long)SIM_REQTRACE_MAX_MS);
    int rc = parse_tokens(L, "input_tokens", f[F_INPUT], &q->input_tokens);
    if (rc == 0)
        rc = parse_tokens(L, "output_tokens", f[F_OUTPUT], &q->output_tokens);
    q->line = L->in.lineno;
    return rc;
}

static int place_row(struct loader *L, const struct sim_request *q, const char *arrival)
{
    if (L->last_line && q->arrival_ms < L->last_arrival)
        return sim_lines_bad_value(&L->in, "arrival_ms", arrival,
                                   ">= %" PRId64 " as on line %u (rows in arrival order)",
                                   L->last_arrival, (unsigned)L->last_line);
    L->last_arrival = q->arrival_ms;
    L->last_line = q->line;
    if (q->arrival_ms < L->from_ms || (L->until_ms >= 0 && q->arrival_ms >= L->until_ms)) {
        L->t->nfiltered++;
        return 0;
    }
    struct sim_reqtrace *t = L->t;
    if (t->n == SIM_REQTRACE_MAX_REQUESTS)
        return sim_lines_fail(&L->in, GPO_E2BIG, "row: expected at most %u requests",
                              SIM_REQTRACE_MAX_REQUESTS);
    if (t->n == L->cap) {
        struct sim_request *p = sim_lines_grow(t->v, &L->cap, sizeof(*t->v));
        if (!p)
            return GPO_ENOMEM;
        t->v = p;
    }
    t->v[t->n++] = *q;
    return 0;
}

static int read_rows(struct loader *L)
{
    for (;;) {
        char *line, *f[NFIELDS];
        size_t len;
        struct sim_request q = {0};
        int rc = sim_lines_next(&L->in, &line, &len);
        if (rc == 0 && !line)
            return 0;
        if (rc == 0)
            rc = sim_lines_split(&L->in, line, len, f, NFIELDS);
        if (rc == 0)
            rc = parse_row(L, f, &q);
        if (rc == 0)
            rc = place_row(L, &q, f[F_ARRIVAL]);
        rc = sim_lines_row_done(&L->in, rc, L->skip_bad, &L->t->nskipped, L->t->first_skip,
                                sizeof(L->t->first_skip));
        if (rc)
            return rc;
    }
}

void sim_reqtrace_init(struct sim_reqtrace *t)
{
    *t = (struct sim_reqtrace){0};
}

void sim_reqtrace_release(struct sim_reqtrace *t)
{
    if (!t)
        return;
    free(t->path);
    free(t->v);
    sim_reqtrace_init(t);
}

int sim_reqtrace_load(struct sim_reqtrace *t, const char *path,
                      const struct sim_reqtrace_opts *opts, char *err, size_t errlen)
{
    assert(t && path);
    struct sim_reqtrace tmp;
    sim_reqtrace_init(&tmp);
    struct loader L = {.t = &tmp,
                       .skip_bad = opts && opts->skip_bad,
                       .from_ms = opts ? opts->from_ms : 0,
                       .until_ms = opts ? opts->until_ms : -1};
    int rc;
    if (L.until_ms >= 0 && L.from_ms >= L.until_ms) {
        L.in.path = path;
        rc = sim_lines_fail(&L.in, GPO_EINVAL,
                            "window: expected from_ms < until_ms, got %" PRId64 " >= %" PRId64,
                            L.from_ms, L.until_ms);
    } else {
        rc = sim_lines_open(&L.in, path, SIM_REQTRACE_MAX_LINE);
        if (rc == 0)
            rc = sim_lines_header(&L.in, HEADER);
        if (rc == 0)
            rc = read_rows(&L);
        sim_lines_close(&L.in);
    }
    if (rc == 0 && !(tmp.path = strdup(path)))
        rc = GPO_ENOMEM;
    if (rc == GPO_ENOMEM) {
        L.in.path = path;
        L.in.lineno = 0;
        sim_lines_fail(&L.in, rc, "%s", gpo_strerror(rc));
    }
    if (rc)
        sim_reqtrace_release(&tmp);
    sim_reqtrace_release(t);
    *t = tmp;
    sim_lines_copy_message(err, errlen, rc ? L.in.msg : "");
    return rc;
}

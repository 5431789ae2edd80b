/*
 * reqtrace.h - reading an inference request trace (`gpuorch sim --serve`).
 *
 * The format is ../shared/traces/README.md's ("Inference request traces"):
 *
 *     request_id,arrival_ms,input_tokens,output_tokens
 *
 * one header line, then one request per line, sorted by arrival_ms (equal
 * times allowed). Plain text or gzip (zlib reads both through one call).
 * Every field is checked: a bad row is an error naming the file, the line and
 * the field ("conv.csv:12: output_tokens: expected a whole number 0 ..
 * 1000000, got 'x'"), or, with `skip_bad`, is skipped and counted. A
 * request_id is 1 to 128 bytes without control characters; duplicates are
 * not looked for (the id is not kept).
 */
#ifndef GPUORCH_SIM_REQTRACE_H
#define GPUORCH_SIM_REQTRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_REQTRACE_MAX_REQUESTS 100000000u
#define SIM_REQTRACE_MAX_LINE     4096u   /* bytes in one line, newline included */
#define SIM_REQTRACE_MAX_TOKENS   1000000 /* input_tokens, output_tokens of one request */
#define SIM_REQTRACE_MAX_MS       (400LL * 24 * 3600 * 1000) /* arrival_ms: 400 days */

struct sim_request {
    int64_t arrival_ms;    /* >= 0, non-decreasing through the trace */
    int32_t input_tokens;  /* 0 .. SIM_REQTRACE_MAX_TOKENS */
    int32_t output_tokens; /* 0 .. SIM_REQTRACE_MAX_TOKENS */
    uint32_t line;         /* its line in the file (the header is line 1) */
};

struct sim_reqtrace {
    char *path; /* as given (owned) */
    struct sim_request *v;
    size_t n;
    size_t nskipped;      /* bad rows skipped (skip_bad) */
    size_t nfiltered;     /* rows outside the window */
    char first_skip[256]; /* the message of the first skipped row ("" if none) */
};

struct sim_reqtrace_opts {
    bool skip_bad;
    /* Keep only from_ms <= arrival_ms < until_ms (until_ms < 0: no bound);
     * the kept rows' times are left as they are. */
    int64_t from_ms, until_ms;
};

void sim_reqtrace_init(struct sim_reqtrace *t);
void sim_reqtrace_release(struct sim_reqtrace *t);

/* Loads `path` into *t (initialised, empty). 0; GPO_EINVAL (no such file,
 * not a request trace, a bad row, rows out of order) or GPO_E2BIG (over a
 * cap) or GPO_ENOMEM with one line in `err`, and *t left empty. opts NULL:
 * no skipping, no window. */
int sim_reqtrace_load(struct sim_reqtrace *t, const char *path,
                      const struct sim_reqtrace_opts *opts, char *err, size_t errlen);

#endif

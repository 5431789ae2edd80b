/*
 * lines.h - the line reader the trace readers share (trace.c, reqtrace.c):
 * zlib's gzread (plain or gzip alike) into one buffer, lines split by hand
 * so that NUL bytes and over-long lines are seen, a header checked exactly,
 * rows split at their commas, and messages "PATH:LINE: ..." kept on one
 * line. Private to src/sim.
 */
#ifndef GPUORCH_SIM_LINES_H
#define GPUORCH_SIM_LINES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zlib.h>

#define SIM_LINES_BAD       1  /* a bad row (skippable); the message in in->msg */
#define SIM_LINES_QUOTE_MAX 40 /* bytes of a bad value shown in a message */

struct sim_lines {
    const char *path; /* borrowed */
    gzFile f;
    char *buf; /* [pos, len) not yet consumed */
    size_t pos, len, max_line;
    bool eof;
    bool discard; /* the rest of an over-long line is still to be dropped */
    uint32_t lineno;
    char msg[512];
};

/* Opens path for reading lines of at most max_line bytes (newline
 * included). 0, GPO_EINVAL (message in in->msg) or GPO_ENOMEM. Close it with
 * sim_lines_close in every case. */
int sim_lines_open(struct sim_lines *in, const char *path, size_t max_line);
void sim_lines_close(struct sim_lines *in);

/* The next line in *line (NUL-terminated in place, newline dropped) and its
 * length in *len, *line NULL at the end. Returns 0, SIM_LINES_BAD for an
 * over-long line (the next call drops the rest of it), or a read error. */
int sim_lines_next(struct sim_lines *in, char **line, size_t *len);

/* Reads the first line and checks it is `header` (a CRLF's CR and a UTF-8
 * byte order mark allowed). 0 or GPO_EINVAL (never SIM_LINES_BAD). */
int sim_lines_header(struct sim_lines *in, const char *header);

/* Strips a CRLF's CR, refuses control bytes, and splits at the commas into
 * exactly nfields fields. 0 or SIM_LINES_BAD. */
int sim_lines_split(struct sim_lines *in, char *line, size_t len, char **fields, size_t nfields);

/* A row's outcome rc under skip_bad: a bad row skipped (counted in
 * *nskipped, the first one's message kept in first[0, size)) gives 0;
 * otherwise rc, a bad row as GPO_EINVAL. */
int sim_lines_row_done(const struct sim_lines *in, int rc, bool skip_bad, size_t *nskipped,
                       char *first, size_t size);

/* Writes "PATH:LINE: " (or "PATH: " at line 0) and the message into
 * in->msg; returns code. */
__attribute__((format(printf, 3, 4))) int sim_lines_fail(struct sim_lines *in, int code,
                                                         const char *fmt, ...);
#if defined(__clang_analyzer__) && !defined(SIM_LINES_IMPL)
/* clang's static analyzer (make lint) does not follow calls into variadic
 * functions: for the analysis only, fail says that it returns its code. */
#define sim_lines_fail(in, code, ...)                                                              \
    __extension__({                                                                                \
        int fail_code_ = (code);                                                                   \
        (void)sim_lines_fail(in, fail_code_, __VA_ARGS__), fail_code_;                             \
    })
#endif

/* "FIELD: expected EXPECTED, got 'VALUE'" into in->msg; SIM_LINES_BAD. */
__attribute__((format(printf, 4, 5))) int sim_lines_bad_value(struct sim_lines *in,
                                                              const char *field, const char *value,
                                                              const char *fmt, ...);

/* s[0, n) for a message: at most SIM_LINES_QUOTE_MAX bytes, not cutting a
 * UTF-8 sequence in two, control bytes shown as '?', "..." when cut. */
const char *sim_lines_quote(char out[SIM_LINES_QUOTE_MAX + 4], const char *s, size_t n);

/* msg into dst[0, size), cut if need be but not inside a UTF-8 sequence. */
void sim_lines_copy_message(char *dst, size_t size, const char *msg);

/* Decimal digits only, at most max. Returns 0, -1 (empty or not digits) or
 * -2 (above max). */
int sim_lines_digits(const char *s, int64_t max, int64_t *ret);

/* Doubles an array's capacity (at least 16); NULL when out of memory, the
 * array untouched. */
void *sim_lines_grow(void *arr, size_t *cap, size_t elem);

#endif

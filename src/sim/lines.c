/*
 * lines.c - the line reader the trace readers share (lines.h).
 *
 * Decisions the header leaves open:
 *  - Fields are split at every comma: there is no CSV quoting. A control byte
 *    (NUL, tab, a lone CR) anywhere in a row makes it bad; a CR just before
 *    the newline is a CRLF line end and is dropped.
 *  - I/O errors and a truncated gzip stream are errors, never bad rows.
 */
#define SIM_LINES_IMPL
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "sim/lines.h"
#include "base/banned.h"

#define READ_BUF ((size_t)256 * 1024) /* > any max_line */

int sim_lines_fail(struct sim_lines *in, int code, const char *fmt, ...)
{
    int n = in->lineno
                ? snprintf(in->msg, sizeof(in->msg), "%s:%u: ", in->path, (unsigned)in->lineno)
                : snprintf(in->msg, sizeof(in->msg), "%s: ", in->path);
    if (n >= 0 && (size_t)n < sizeof(in->msg)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(in->msg + n, sizeof(in->msg) - (size_t)n, fmt, ap);
        va_end(ap);
    }
    /* One line, whatever the path or the value held. */
    for (char *p = in->msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    return code;
}
#ifdef __clang_analyzer__
#define sim_lines_fail(in, code, ...)                                                              \
    __extension__({                                                                                \
        int fail_code_ = (code);                                                                   \
        (void)sim_lines_fail(in, fail_code_, __VA_ARGS__), fail_code_;                             \
    })
#endif

const char *sim_lines_quote(char out[SIM_LINES_QUOTE_MAX + 4], const char *s, size_t n)
{
    size_t k = n > SIM_LINES_QUOTE_MAX ? SIM_LINES_QUOTE_MAX : n;
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

void sim_lines_copy_message(char *dst, size_t size, const char *msg)
{
    if (!dst || size == 0)
        return;
    size_t len = strlen(msg), n = len < size ? len : size - 1;
    while (n < len && n > 0 && ((unsigned char)msg[n] & 0xc0) == 0x80)
        n--;
    memcpy(dst, msg, n);
    dst[n] = '\0';
}

int sim_lines_bad_value(struct sim_lines *in, const char *field, const char *value, const char *fmt,
                        ...)
{
    char expected[160], q[SIM_LINES_QUOTE_MAX + 4];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(expected, sizeof(expected), fmt, ap);
    va_end(ap);
    return sim_lines_fail(in, SIM_LINES_BAD, "%s: expected %s, got '%s'", field, expected,
                          sim_lines_quote(q, value, strlen(value)));
}

int sim_lines_row_done(const struct sim_lines *in, int rc, bool skip_bad, size_t *nskipped,
                       char *first, size_t size)
{
    if (rc != SIM_LINES_BAD)
        return rc;
    if (!skip_bad)
        return GPO_EINVAL;
    if ((*nskipped)++ == 0)
        sim_lines_copy_message(first, size, in->msg);
    return 0;
}

/* Refills the buffer, keeping [pos, len). Returns 0 or an error. */
static int refill(struct sim_lines *in)
{
    memmove(in->buf, in->buf + in->pos, in->len - in->pos);
    in->len -= in->pos;
    in->pos = 0;
    int n = gzread(in->f, in->buf + in->len, (unsigned)(READ_BUF - in->len));
    if (n > 0) {
        in->len += (size_t)n;
        return 0;
    }
    int zerr;
    const char *why = gzerror(in->f, &zerr);
    size_t plen = strlen(in->path);
    if (n == 0) {
        in->eof = true;
        if (zerr != Z_BUF_ERROR) /* else the input ended inside a gzip stream */
            return 0;
        why = "truncated gzip file";
    } else if (zerr == Z_ERRNO) {
        why = strerror(errno);
    } else if (zerr == Z_MEM_ERROR) {
        return GPO_ENOMEM;
    } else if (strncmp(why, in->path, plen) == 0 && strncmp(why + plen, ": ", 2) == 0) {
        why += plen + 2; /* zlib's message starts with the path, as ours does */
    }
    in->lineno = 0;
    return sim_lines_fail(in, GPO_EINVAL, "read error: %s", why);
}

int sim_lines_next(struct sim_lines *in, char **line, size_t *len)
{
    for (;;) {
        char *start = in->buf + in->pos;
        size_t avail = in->len - in->pos;
        char *nl = memchr(start, '\n', avail);
        if (in->discard) {
            in->pos = nl ? in->pos + (size_t)(nl - start) + 1 : in->len;
            in->discard = !nl;
            if (nl)
                continue;
        } else if (nl || avail >= in->max_line || (in->eof && avail > 0)) {
            size_t n = nl ? (size_t)(nl - start) : avail;
            if (in->lineno == UINT32_MAX)
                return sim_lines_fail(in, GPO_E2BIG, "expected at most %" PRIu32 " lines",
                                      UINT32_MAX);
            in->lineno++;
            in->pos = nl ? in->pos + n + 1 : in->len;
            if (n + 1 > in->max_line) {
                char q[SIM_LINES_QUOTE_MAX + 4];
                in->discard = !nl;
                return sim_lines_fail(
                    in, SIM_LINES_BAD,
                    "row: expected a line of at most %zu bytes with its newline, got '%s'",
                    in->max_line, sim_lines_quote(q, start, n));
            }
            start[n] = '\0'; /* over the newline, or the spare byte past a full buffer */
            *line = start;
            *len = n;
            return 0;
        }
        if (in->eof) {
            *line = NULL;
            return 0;
        }
        int rc = refill(in);
        if (rc < 0)
            return rc;
    }
}

int sim_lines_header(struct sim_lines *in, const char *header)
{
    char *line;
    size_t len;
    int rc = sim_lines_next(in, &line, &len);
    if (rc)
        return rc == SIM_LINES_BAD ? GPO_EINVAL : rc;
    if (!line)
        return sim_lines_fail(in, GPO_EINVAL, "expected the header line, got an empty file");
    if (len > 0 && line[len - 1] == '\r')
        line[--len] = '\0';
    if (len >= 3 && memcmp(line, "\xef\xbb\xbf", 3) == 0) { /* a UTF-8 byte order mark */
        line += 3;
        len -= 3;
    }
    if (len != strlen(header) || memcmp(line, header, len) != 0) {
        char q[SIM_LINES_QUOTE_MAX + 4];
        return sim_lines_fail(in, GPO_EINVAL, "header: expected '%s', got '%s'", header,
                              sim_lines_quote(q, line, len));
    }
    return 0;
}

int sim_lines_split(struct sim_lines *in, char *line, size_t len, char **fields, size_t nfields)
{
    if (len > 0 && line[len - 1] == '\r')
        line[--len] = '\0';
    size_t nf = 1;
    fields[0] = line;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)line[i];
        if (c == ',') {
            line[i] = '\0';
            if (nf < nfields)
                fields[nf] = line + i + 1;
            nf++;
        } else if (c < 0x20 || c == 0x7f) {
            return sim_lines_fail(
                in, SIM_LINES_BAD,
                "row: expected text without control bytes, got 0x%02x at byte %zu", c, i + 1);
        }
    }
    if (nf != nfields)
        return sim_lines_fail(in, SIM_LINES_BAD,
                              "row: expected %zu comma-separated fields, got %zu", nfields, nf);
    return 0;
}

int sim_lines_digits(const char *s, int64_t max, int64_t *ret)
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

void *sim_lines_grow(void *arr, size_t *cap, size_t elem)
{
    size_t n = *cap ? *cap * 2 : 16;
    if (n > SIZE_MAX / elem)
        return NULL;
    void *p = realloc(arr, n * elem);
    if (p)
        *cap = n;
    return p;
}

int sim_lines_open(struct sim_lines *in, const char *path, size_t max_line)
{
    *in = (struct sim_lines){.path = path, .max_line = max_line};
    in->buf = malloc(READ_BUF + 1); /* + 1: room to terminate a last line without newline */
    if (!in->buf)
        return GPO_ENOMEM;
    errno = 0;
    in->f = gzopen(path, "rb");
    if (!in->f) /* errno 0: zlib could not allocate its state */
        return errno ? sim_lines_fail(in, GPO_EINVAL, "cannot open: %s", strerror(errno))
                     : GPO_ENOMEM;
    gzbuffer(in->f, 128u * 1024u);
    return 0;
}

void sim_lines_close(struct sim_lines *in)
{
    if (in->f)
        gzclose(in->f);
    in->f = NULL;
    free(in->buf);
    in->buf = NULL;
}

/*
 * errbuf.h - one line of error text into a caller's buffer.
 *
 * Library functions return a code and, where a code alone does not say
 * enough, write one line into a buffer the caller passes (err, errlen): the
 * file and line, the field, the system call. errbuf_set is that write, shared
 * so that every module cuts a long message the same way (never inside a UTF-8
 * character, always NUL-terminated) and accepts a NULL or empty buffer.
 */
#ifndef GPUORCH_UTIL_ERRBUF_H
#define GPUORCH_UTIL_ERRBUF_H

#include <stdarg.h>
#include <stddef.h>

/* Formats into err (errlen bytes; nothing when err is NULL or errlen 0) and
 * returns `code`, so that a failure path reads `return errbuf_set(...)`. */
int errbuf_set(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same with a va_list, for modules that wrap it. */
int errbuf_vset(char *err, size_t errlen, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* The length of s[0, len) without a character split at its end (s was
 * valid UTF-8 before it was cut at len). libc only, as this whole file, so
 * that the shim (libc only) can use errbuf too. */
size_t errbuf_utf8_cut(const char *s, size_t len);

#ifdef __clang_analyzer__
/* clang's static analyzer (make lint) does not follow calls into variadic
 * functions, so it would take `return errbuf_set(...)` for a return of any
 * value, 0 included, and report the out-parameters left unset on that path.
 * For the analysis only, the call says that it returns its code. Other
 * variadic helpers that return a fixed code do the same. */
#define errbuf_set(err, errlen, code, ...)                                                         \
    __extension__({                                                                                \
        int errbuf_code_ = (code);                                                                 \
        (void)errbuf_set(err, errlen, errbuf_code_, __VA_ARGS__), errbuf_code_;                    \
    })
#endif

#endif

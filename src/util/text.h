/*
 * text.h - what a name, a label or a message from others may hold: one line
 * of printable characters. The check every boundary shares (jsonv's
 * JSONV_TEXT fields, query parameters, the names cluster/ and jobspec
 * check by shape), so that a newline or an escape sequence never reaches a
 * log line, a terminal or a table cell.
 *
 * Control characters are C0 (U+0000..U+001F), DEL (U+007F) and C1
 * (U+0080..U+009F, the bytes 0xC2 0x80..0x9F in UTF-8). Text is assumed to
 * be UTF-8 (jsonv checks that first); a stray byte 0x80..0x9F outside a
 * sequence is no control character here, since it is no character at all.
 */
#ifndef GPUORCH_UTIL_TEXT_H
#define GPUORCH_UTIL_TEXT_H

#include <stddef.h>

/* The byte offset of the first control character in s[0, len), or len when
 * there is none. s may be NULL when len is 0. */
size_t text_control_at(const char *s, size_t len);

/* 0 when s (a C string, NULL fine) holds no control character; else
 * GPO_EINVAL with one line in err naming `field` (a path: "label",
 * "gpus[1].uuid"), the character and its offset:
 *     field 'label': a control character (U+000A) at byte 5 (one line of
 *     printable text is expected) */
int text_check_line(const char *field, const char *s, char *err, size_t errlen);

/* The code point of the control character at s[at] (as text_control_at
 * found it): 0x00..0x1F, 0x7F or 0x80..0x9F. */
unsigned text_control_code(const char *s, size_t at);

/* The wording every refusal shares: printf arguments field, code, offset. */
#define TEXT_CONTROL_FMT                                                                           \
    "field '%s': a control character (U+%04X) at byte %zu (one line of printable text is "         \
    "expected)"

/* Makes s (a C string, NULL fine) fit to send where text_check_line
 * applies, in place: each control character becomes '?' (a C1 character's
 * two bytes become "??"), bytes of invalid UTF-8 too, and s is cut to at
 * most max bytes, never inside a character. Returns s. */
char *text_fit_line(char *s, size_t max);

#endif

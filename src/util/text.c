/*
 * text.c - one line of printable text (text.h).
 */
#include <stdbool.h>
#include <string.h>

#include "base/err.h"
#include "util/errbuf.h"
#include "util/jsonv.h"
#include "util/text.h"
#include "base/banned.h"

static bool is_c1_at(const unsigned char *p, size_t left)
{
    return left >= 2 && p[0] == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F;
}

size_t text_control_at(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < 0x20 || p[i] == 0x7F || is_c1_at(p + i, len - i))
            return i;
    }
    return len;
}

unsigned text_control_code(const char *s, size_t at)
{
    const unsigned char *p = (const unsigned char *)s + at;
    return p[0] == 0xC2 ? p[1] : p[0];
}

int text_check_line(const char *field, const char *s, char *err, size_t errlen)
{
    if (!s)
        return 0;
    size_t len = strlen(s), at = text_control_at(s, len);
    if (at == len)
        return 0;
    return errbuf_set(err, errlen, GPO_EINVAL, TEXT_CONTROL_FMT, field, text_control_code(s, at),
                      at);
}

char *text_fit_line(char *s, size_t max)
{
    if (!s)
        return s;
    size_t len = strlen(s);
    if (jsonv_check_utf8(s, len) != 0) {
        for (char *p = s; *p; p++)
            if ((unsigned char)*p >= 0x80)
                *p = '?';
    }
    size_t at = 0;
    while ((at += text_control_at(s + at, len - at)) < len) {
        bool c1 = (unsigned char)s[at] == 0xC2;
        s[at++] = '?';
        if (c1)
            s[at++] = '?';
    }
    if (len > max)
        s[jsonv_utf8_cut(s, max)] = '\0';
    return s;
}

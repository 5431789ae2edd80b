#include <stdarg.h>
#include <stdio.h>

#include "util/errbuf.h"
#include "base/banned.h"

#undef errbuf_set /* the analyzer's stand-in (errbuf.h): this is the function */

size_t errbuf_utf8_cut(const char *s, size_t len)
{
    size_t i = len, k = 0;
    while (i > 0 && k < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
        i--;
        k++;
    }
    if (i == 0)
        return len;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return k + 1 < need ? i - 1 : len;
}

int errbuf_vset(char *err, size_t errlen, int code, const char *fmt, va_list ap)
{
    if (!err || errlen == 0)
        return code;
    int n = vsnprintf(err, errlen, fmt, ap);
    if (n < 0)
        err[0] = '\0';
    else if ((size_t)n >= errlen)
        err[errbuf_utf8_cut(err, errlen - 1)] = '\0';
    return code;
}

int errbuf_set(char *err, size_t errlen, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errbuf_vset(err, errlen, code, fmt, ap);
    va_end(ap);
    return code;
}

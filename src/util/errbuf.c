#include <stdarg.h>
#include <stdio.h>

#include "util/errbuf.h"
#include "util/jsonv.h"
#include "base/banned.h"

#undef errbuf_set /* the analyzer's stand-in (errbuf.h): this is the function */

int errbuf_vset(char *err, size_t errlen, int code, const char *fmt, va_list ap)
{
    if (!err || errlen == 0)
        return code;
    int n = vsnprintf(err, errlen, fmt, ap);
    if (n < 0)
        err[0] = '\0';
    else if ((size_t)n >= errlen)
        err[jsonv_utf8_cut(err, errlen - 1)] = '\0';
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

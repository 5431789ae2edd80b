#include <stdarg.h>
#include <stdio.h>

#include "util/errbuf.h"
#include "util/jsonv.h"
#include "util/banned.h"

int errbuf_set(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return code;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= errlen)
        err[jsonv_utf8_cut(err, errlen - 1)] = '\0';
    return code;
}

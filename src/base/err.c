#define _GNU_SOURCE /* strerrordesc_np */
#include <string.h>

#include "base/err.h"
#include "base/banned.h"

const char *gpo_strerror(int err)
{
    switch (err) {
    case GPO_OK:
        return "success";
#define GPO_ERR_CASE(name, value, text)                                                            \
    case GPO_##name:                                                                               \
        return text;
        GPO_ERRNO_MAP(GPO_ERR_CASE)
#undef GPO_ERR_CASE
    }
    /* strerrordesc_np, unlike strerror, is thread-safe and never formats. */
    const char *d = err < 0 && err > -GPO_EPROJECT ? strerrordesc_np(-err) : NULL;
    return d ? d : "unknown error";
}

const char *gpo_errname(int err)
{
    switch (err) {
#define GPO_ERR_NAME(name, value, text)                                                            \
    case GPO_##name:                                                                               \
        return #name;
        GPO_ERRNO_MAP(GPO_ERR_NAME)
#undef GPO_ERR_NAME
    }
    return NULL;
}

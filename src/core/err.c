#include "core/err.h"
#include "util/banned.h"

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
    return "unknown error";
}

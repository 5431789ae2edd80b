/*
 * cluster_names.c - the shapes names must have (cluster.h) and the checks
 * every kind's decoder shares (cluster_int.h).
 */
#include <arpa/inet.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/err.h"
#include "cluster/cluster.h"
#include "cluster/cluster_int.h"
#include "util/errbuf.h"
#include "util/jsonv.h"
#include "base/banned.h"

static bool is_lower_or_digit(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool is_alnum(char c)
{
    return is_lower_or_digit(c) || (c >= 'A' && c <= 'Z');
}

static bool is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool cluster_name_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > CLUSTER_NAME_MAX || !is_lower_or_digit(s[0]))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!is_lower_or_digit(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    return true;
}

bool cluster_gpu_type_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > CLUSTER_NAME_MAX || !is_alnum(s[0]))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    return true;
}

bool cluster_host_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > CLUSTER_HOST_MAX)
        return false;
    size_t label = 0; /* length of the current label */
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == '.') {
            if (label < 1 || label > 63 || s[i - 1] == '-')
                return false;
            label = 0;
        } else if (is_alnum(s[i]) || (s[i] == '-' && label > 0)) {
            label++;
        } else {
            return false;
        }
    }
    return true;
}

bool cluster_unix_user_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > CLUSTER_UNIX_USER_MAX || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!is_lower_or_digit(s[i]) && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

bool cluster_uuid_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n > 4 && n <= CLUSTER_UUID_MAX && strncmp(s, "MIG-", 4) == 0) {
        for (size_t i = 4; i < n; i++)
            if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '/')
                return false;
        return true;
    }
    if (n != 40 || strncmp(s, "GPU-", 4) != 0)
        return false;
    for (size_t i = 4; i < n; i++) {
        bool dash = i == 12 || i == 17 || i == 22 || i == 27; /* 8-4-4-4-12 after "GPU-" */
        if (dash ? s[i] != '-' : !is_hex(s[i]))
            return false;
    }
    return true;
}

/* Where the controller reaches a node's agent. */
bool cluster_addr_valid(const char *s)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return cluster_host_valid(s) || inet_pton(AF_INET, s, buf) == 1 ||
           inet_pton(AF_INET6, s, buf) == 1;
}

/* Shape checks with the message decode gives. `field` is the path. */
int cluster_check_shape(bool (*valid)(const char *), const char *rule, const char *what,
                        const char *field, const char *s, char *err, size_t errlen)
{
    if (!s)
        return errbuf_set(err, errlen, GPO_EINVAL, "missing required field '%s'", field);
    if (!valid(s)) {
        char q[JSONV_QUOTE_MAX + 4];
        return errbuf_set(err, errlen, GPO_EINVAL, "field '%s': '%s' is not a valid %s (%s)", field,
                          cluster_quote(s, q), what, rule);
    }
    return 0;
}

int cluster_check_name(const char *field, const char *s, char *err, size_t errlen)
{
    return cluster_check_shape(cluster_name_valid, NAME_RULE, "name", field, s, err, errlen);
}

int cluster_check_type(const char *field, const char *s, char *err, size_t errlen)
{
    return cluster_check_shape(cluster_gpu_type_valid, TYPE_RULE, "GPU type", field, s, err,
                               errlen);
}

int cluster_check_desc(const char *s, char *err, size_t errlen)
{
    if (s && strlen(s) > CLUSTER_DESC_MAX)
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'description': longer than %d bytes",
                          CLUSTER_DESC_MAX);
    return 0;
}

int cluster_check_range(const char *field, int64_t v, int64_t lo, int64_t hi, char *err,
                        size_t errlen)
{
    if (v < lo || v > hi)
        return errbuf_set(err, errlen, GPO_EINVAL, "field '%s': %lld is out of range %lld..%lld",
                          field, (long long)v, (long long)lo, (long long)hi);
    return 0;
}

/* A milli-GPU amount built by hand: 0..MILLI_MAX, or -1 where none_ok. */
int cluster_check_milli(const char *field, int64_t v, bool none_ok, char *err, size_t errlen)
{
    if ((v == -1 && none_ok) || (v >= 0 && v <= MILLI_MAX))
        return 0;
    return errbuf_set(err, errlen, GPO_EINVAL,
                      "field '%s': %lld milli-GPU is out of range (%s0..%d GPUs)", field,
                      (long long)v, none_ok ? "-1 or " : "", CLUSTER_GPUS_MAX);
}

/* A JSON number of GPUs (at most 3 decimals) as milli-GPU; -1 where none_ok. */
int cluster_gpus_to_milli(const char *field, double x, bool none_ok, int64_t *ret, char *err,
                          size_t errlen)
{
    if (x == -1 && none_ok) {
        *ret = -1;
        return 0;
    }
    if (x < 0)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field '%s': %.10g is neither -1 (no limit) nor >= 0", field, x);
    double scaled = x * SCHED_MILLI;
    long long m = llround(scaled);
    if (fabs(scaled - (double)m) > 1e-6)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field '%s': %.10g has more than 3 decimals (GPUs count in thousandths)",
                          field, x);
    *ret = m;
    return 0;
}

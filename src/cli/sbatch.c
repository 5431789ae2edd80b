/*
 * sbatch.c - the values of sbatch's flags, as the API wants them (sbatch.h).
 */
#include "cli/sbatch.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/errbuf.h"
#include "util/jsonv.h"
#include "util/opts.h"
#include "util/timefmt.h"
#include "base/banned.h"

int sbatch_parse_size_mib(const char *s, int64_t *ret_mib)
{
    int64_t v = 0;
    size_t i = 0;
    for (; s && s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > SBATCH_SIZE_MAX_MIB * 1024)
            return GPO_EUSAGE;
        v = v * 10 + (s[i] - '0');
    }
    if (i == 0)
        return GPO_EUSAGE;
    static const char units[] = "KMGT";
    const char *u = s[i] ? strchr(units, s[i] & ~0x20) : NULL;
    if (s[i] && !u)
        return GPO_EUSAGE;
    if (u) {
        const char *rest = s + i + 1;
        if (*rest && strcmp(rest, "B") != 0 && strcmp(rest, "b") != 0 && strcmp(rest, "iB") != 0)
            return GPO_EUSAGE;
    }
    int shift = u ? (int)(u - units) : 1; /* 0 K, 1 M, 2 G, 3 T */
    if (shift == 0)
        v = (v + 1023) / 1024;
    for (int k = 1; k < shift; k++)
        v = v > SBATCH_SIZE_MAX_MIB ? v : v * 1024;
    if (v > SBATCH_SIZE_MAX_MIB)
        return GPO_EUSAGE;
    *ret_mib = v;
    return 0;
}

int sbatch_parse_gpus(const char *s, int32_t *ret_milli)
{
    int64_t whole = 0, frac = 0;
    size_t i = 0, nfrac = 0;
    for (; s && s[i] >= '0' && s[i] <= '9' && whole <= SBATCH_GPUS_MAX; i++)
        whole = whole * 10 + (s[i] - '0');
    size_t nwhole = i;
    if (s && s[i] == '.') {
        for (i++; s[i] >= '0' && s[i] <= '9' && nfrac < 4; i++, nfrac++)
            frac = frac * 10 + (s[i] - '0');
    }
    if (!s || s[i] || (nwhole == 0 && nfrac == 0) || nfrac > 3 || whole > SBATCH_GPUS_MAX)
        return GPO_EUSAGE;
    for (size_t k = nfrac; k < 3; k++)
        frac *= 10;
    if (frac && whole) /* 1.5: neither whole GPUs nor a fraction of one */
        return GPO_EUSAGE;
    *ret_milli = (int32_t)(whole * 1000 + frac);
    return 0;
}

static size_t digits(const char *s, size_t len)
{
    size_t n = 0;
    while (n < len && s[n] >= '0' && s[n] <= '9')
        n++;
    return n;
}

static bool word_nocase(const char *s, size_t len, const char *lower)
{
    size_t n = strlen(lower);
    if (len < n)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((s[i] | 0x20) != lower[i])
            return false;
    return true;
}

bool sbatch_is_mig_profile(const char *s, size_t len)
{
    if (!s)
        return false;
    if (len > 4 && word_nocase(s, 3, "mig") && (s[3] == ' ' || s[3] == '-'))
        s += 4, len -= 4;
    if (len > 3 && (s[len - 3] == '+' || s[len - 3] == '.') && word_nocase(s + len - 2, 2, "me"))
        len -= 3;
    size_t n = digits(s, len); /* compute slices */
    if (n == 0 || n + 2 > len || (s[n] | 0x20) != 'g' || s[n + 1] != '.')
        return false;
    s += n + 2, len -= n + 2;
    n = digits(s, len); /* memory */
    return n > 0 && len == n + 2 && word_nocase(s + n, 2, "gb");
}

int sbatch_parse_time(const char *s, int64_t *ret_s)
{
    int64_t v;
    if (!s || timefmt_parse_duration(s, &v) != 0)
        return GPO_EUSAGE;
    *ret_s = v == TIMEFMT_UNLIMITED ? 0 : v;
    return 0;
}

int sbatch_parse_begin(const char *s, int64_t *ret_s)
{
    time_t now = time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm) || timefmt_parse_begin(s, (int64_t)now, tm.tm_gmtoff, ret_s) != 0)
        return GPO_EUSAGE;
    return 0;
}

int sbatch_parse_dependency(const char *s, json_t **ret, char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    if (!s || !*s)
        return errbuf_set(err, errlen, GPO_EUSAGE, "expected afterok:ID[:ID...][,afterany:ID]");
    if (strchr(s, '?'))
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "'?' (any one of) is not supported: every dependency must hold");
    json_t *deps = json_array();
    int rc = deps ? 0 : errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    for (const char *p = s; rc == 0;) {
        const char *end = strchr(p, ','), *colon;
        size_t len = end ? (size_t)(end - p) : strlen(p);
        colon = memchr(p, ':', len);
        size_t tlen = colon ? (size_t)(colon - p) : len;
        const char *type = tlen == 7 && memcmp(p, "afterok", 7) == 0    ? "afterok"
                           : tlen == 8 && memcmp(p, "afterany", 8) == 0 ? "afterany"
                                                                        : NULL;
        if (!type) {
            rc = errbuf_set(err, errlen, GPO_EUSAGE,
                            "'%s' is not supported (afterok:ID or afterany:ID)",
                            jsonv_quote(p, tlen, q));
            break;
        }
        if (!colon) {
            rc = errbuf_set(err, errlen, GPO_EUSAGE, "'%s' names no job (%s:ID)", type, type);
            break;
        }
        for (const char *id = colon + 1; rc == 0 && id <= p + len;) {
            const char *next = memchr(id, ':', (size_t)(p + len - id));
            size_t ilen = next ? (size_t)(next - id) : (size_t)(p + len - id);
            char buf[24];
            int64_t job;
            snprintf(buf, sizeof(buf), "%.*s", (int)(ilen < 23 ? ilen : 23), id);
            if (ilen > 20 || opts_parse_int(buf, 1, INT64_MAX, &job) != 0)
                rc = errbuf_set(err, errlen, GPO_EUSAGE, "'%s' is not a job id",
                                jsonv_quote(id, ilen, q));
            else if (json_array_append_new(
                         deps, json_pack("{s:s, s:I}", "type", type, "job", (json_int_t)job)) != 0)
                rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
            id += ilen + 1;
        }
        if (!end)
            break;
        p = end + 1;
    }
    if (rc) {
        json_decref(deps);
        return rc;
    }
    *ret = deps;
    return 0;
}

static bool env_name_ok(const char *s, size_t len)
{
    if (len == 0 || len > 128 || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return false;
    }
    return true;
}

/* Sets env[name] = value (both len-bounded) when the API takes them;
 * false when out of memory. */
static bool env_put(json_t *env, const char *name, size_t nlen, const char *value)
{
    size_t vlen = strlen(value);
    if (!env_name_ok(name, nlen) || vlen > SBATCH_ENV_VALUE_MAX ||
        jsonv_check_utf8(value, vlen) != 0)
        return true;
    char key[129];
    snprintf(key, sizeof(key), "%.*s", (int)nlen, name);
    return json_object_set_new(env, key, json_string(value)) == 0;
}

/* Every variable of envp the API takes, but ours and the GPU lists (the agent
 * sets those itself). */
static bool env_all(json_t *env, char *const *envp)
{
    for (size_t k = 0; envp && envp[k]; k++) {
        const char *eq = strchr(envp[k], '=');
        size_t n = eq ? (size_t)(eq - envp[k]) : 0;
        if (!eq || strncmp(envp[k], "GPUORCH_", 8) == 0 ||
            (n == 20 && memcmp(envp[k], "CUDA_VISIBLE_DEVICES", n) == 0) ||
            (n == 22 && memcmp(envp[k], "NVIDIA_VISIBLE_DEVICES", n) == 0))
            continue;
        if (!env_put(env, envp[k], n, eq + 1))
            return false;
    }
    return true;
}

static const char *env_value(char *const *envp, const char *name, size_t len)
{
    for (size_t k = 0; envp && envp[k]; k++)
        if (strncmp(envp[k], name, len) == 0 && envp[k][len] == '=')
            return envp[k] + len + 1;
    return NULL;
}

int sbatch_parse_export(const char *s, char *const *envp, json_t **ret, char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    if (!s)
        return errbuf_set(err, errlen, GPO_EINVAL, "sbatch_parse_export: NULL");
    json_t *env = json_object();
    int rc = env ? 0 : errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    for (const char *p = s; rc == 0;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        size_t nlen = eq ? (size_t)(eq - p) : len;
        if (len == 0) {
            rc = errbuf_set(err, errlen, GPO_EUSAGE,
                            "an empty item (ALL, NONE, NAME or NAME=VALUE)");
        } else if (!eq && len == 3 && memcmp(p, "ALL", 3) == 0) {
            rc = env_all(env, envp) ? 0 : errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
        } else if (!eq && len == 4 && memcmp(p, "NONE", 4) == 0) {
            json_object_clear(env);
        } else if (!env_name_ok(p, nlen)) {
            rc = errbuf_set(err, errlen, GPO_EUSAGE,
                            "'%s' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
                            jsonv_quote(p, nlen, q));
        } else {
            char value[SBATCH_ENV_VALUE_MAX + 1];
            const char *v = eq ? value : env_value(envp, p, nlen);
            if (eq)
                snprintf(value, sizeof(value), "%.*s", (int)(len - nlen - 1), eq + 1);
            if (eq && len - nlen - 1 > SBATCH_ENV_VALUE_MAX)
                rc = errbuf_set(err, errlen, GPO_EUSAGE, "the value of %.*s is over %d bytes",
                                (int)nlen, p, SBATCH_ENV_VALUE_MAX);
            else if (v && !env_put(env, p, nlen, v))
                rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
        }
        if (!end)
            break;
        p = end + 1;
    }
    if (rc == 0 && json_object_size(env) > SBATCH_ENV_MAX)
        rc = errbuf_set(err, errlen, GPO_EUSAGE,
                        "%zu variables, the API takes at most %d: name the ones the job needs",
                        json_object_size(env), SBATCH_ENV_MAX);
    if (rc) {
        json_decref(env);
        return rc;
    }
    *ret = env;
    return 0;
}

/*
 * jobspec_array.c - Slurm's array syntax ("0-15:4%2"): the task indices and
 * the running limit (jobspec.h).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "cluster/jobspec.h"
#include "cluster/jobspec_int.h"
#include "util/jsonv.h"
#include "base/banned.h"

#define ARRAY_INDEX_MAX 4000000u

#define fail          jobspec_fail
#define out_of_memory jobspec_out_of_memory

struct item {
    uint64_t lo, hi, step;
};

/* Reads the digits at s[*pos..len) into *ret, which stops growing past
 * ARRAY_INDEX_MAX so that it cannot overflow. False when there are none. */
static bool scan_number(const char *s, size_t len, size_t *pos, uint64_t *ret)
{
    size_t i = *pos;
    uint64_t v = 0;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++)
        if (v <= ARRAY_INDEX_MAX)
            v = v * 10 + (uint64_t)(s[i] - '0');
    if (i == *pos)
        return false;
    *pos = i;
    *ret = v;
    return true;
}

/* One comma-separated item: "A", "A-B" or "A-B:S". */
static int parse_item(const char *s, size_t len, struct item *ret, char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    struct item it = {.step = 1};
    size_t pos = 0;
    if (len == 0)
        return fail(err, errlen, "an item between commas is empty");
    bool ok = scan_number(s, len, &pos, &it.lo);
    it.hi = it.lo;
    if (ok && pos < len && s[pos] == '-') {
        pos++;
        ok = scan_number(s, len, &pos, &it.hi);
        if (ok && pos < len && s[pos] == ':') {
            pos++;
            ok = scan_number(s, len, &pos, &it.step);
        }
    }
    if (!ok || pos != len)
        return fail(err, errlen, "'%s' is not an index, a range A-B or a range with a step A-B:S",
                    jsonv_quote(s, len, q));
    if (it.lo > ARRAY_INDEX_MAX || it.hi > ARRAY_INDEX_MAX || it.step > ARRAY_INDEX_MAX)
        return fail(err, errlen, "'%s': numbers are at most %u", jsonv_quote(s, len, q),
                    ARRAY_INDEX_MAX);
    if (it.lo > it.hi)
        return fail(err, errlen, "'%s': the range goes down", jsonv_quote(s, len, q));
    if (it.step == 0)
        return fail(err, errlen, "'%s': the step must be at least 1", jsonv_quote(s, len, q));
    *ret = it;
    return 0;
}

/* Walks the items of text[0..len): counts their tasks into *ret_total and,
 * when out is not NULL, writes the indices there (the walk before checked
 * that they fit). */
static int walk_items(const char *text, size_t len, uint32_t *out, uint64_t *ret_total, char *err,
                      size_t errlen)
{
    uint64_t total = 0;
    const char *end = text + len;
    for (const char *p = text;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        size_t ilen = comma ? (size_t)(comma - p) : (size_t)(end - p);
        struct item it = {0};
        int rc = parse_item(p, ilen, &it, err, errlen);
        if (rc < 0)
            return rc;
        for (uint64_t i = it.lo; out && i <= it.hi; i += it.step)
            out[total++] = (uint32_t)i;
        if (!out)
            total += (it.hi - it.lo) / it.step + 1;
        if (!comma)
            break;
        p = comma + 1;
    }
    *ret_total = total;
    return 0;
}

static int parse_limit(const char *s, size_t len, uint32_t *ret, char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    size_t pos = 0;
    uint64_t v;
    if (len == 0)
        return fail(err, errlen, "the running limit after '%%' is missing");
    if (!scan_number(s, len, &pos, &v) || pos != len)
        return fail(err, errlen, "the running limit '%%%s' is not a number",
                    jsonv_quote(s, len, q));
    if (v < 1 || v > JOBSPEC_ARRAY_MAX)
        return fail(err, errlen, "the running limit '%%%s' is out of range 1..%d",
                    jsonv_quote(s, len, q), JOBSPEC_ARRAY_MAX);
    *ret = (uint32_t)v;
    return 0;
}

static int compare_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

int jobspec_array_parse(const char *text, struct jobspec_array *ret, char *err, size_t errlen)
{
    if (!text || !ret)
        return fail(err, errlen, "no array given");
    size_t len = strlen(text);
    const char *pct = memchr(text, '%', len);
    size_t speclen = pct ? (size_t)(pct - text) : len;
    uint32_t max_running = 0;
    if (speclen == 0)
        return fail(err, errlen, "no task indices given");
    int rc = pct ? parse_limit(pct + 1, len - speclen - 1, &max_running, err, errlen) : 0;
    uint64_t n = 0;
    if (rc == 0)
        rc = walk_items(text, speclen, NULL, &n, err, errlen);
    if (rc < 0)
        return rc;
    if (n > JOBSPEC_ARRAY_MAX)
        return fail(err, errlen, "%llu tasks, at most %d allowed", (unsigned long long)n,
                    JOBSPEC_ARRAY_MAX);
    uint32_t *index = malloc(n * sizeof(*index));
    if (!index)
        return out_of_memory(err, errlen);
    walk_items(text, speclen, index, &n, NULL, 0);
    qsort(index, n, sizeof(*index), compare_u32);
    for (size_t i = 1; i < n; i++) {
        if (index[i] == index[i - 1]) {
            rc = fail(err, errlen, "index %u is given twice", index[i]);
            free(index);
            return rc;
        }
    }
    *ret = (struct jobspec_array){.index = index, .n = n, .max_running = max_running};
    return 0;
}

/*
 * slurm.c - Slurm's states, sacct's and squeue's fields, sacct's times and
 * squeue's array rows (slurm.h).
 */
#include "cli/slurm.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/err.h"
#include "client/client.h"
#include "util/errbuf.h"
#include "util/hostlist.h"
#include "util/opts.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static const char *const state_names[] = {
#define SLURM_STATE_NAME(name, code) #name,
    SLURM_STATES(SLURM_STATE_NAME)
#undef SLURM_STATE_NAME
};
static const char *const state_codes[] = {
#define SLURM_STATE_CODE(name, code) code,
    SLURM_STATES(SLURM_STATE_CODE)
#undef SLURM_STATE_CODE
};

const char *slurm_state_name(enum slurm_state s)
{
    return (unsigned)s < ARRAY_LEN(state_names) ? state_names[s] : "?";
}

const char *slurm_state_code(enum slurm_state s)
{
    return (unsigned)s < ARRAY_LEN(state_codes) ? state_codes[s] : "?";
}

static const char *str_of(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

enum slurm_state slurm_job_state(const json_t *job)
{
    const char *st = str_of(job, "state");
    const char *reason = str_of(job, "reason");
    for (size_t k = 0; st && k < ARRAY_LEN(state_names); k++) {
        if (strcmp(st, state_names[k]) != 0)
            continue;
        if (k == SLURM_PENDING && json_integer_value(json_object_get(job, "attempts_made")) > 0)
            return SLURM_REQUEUED;
        if (k == SLURM_FAILED && reason && strncmp(reason, "out of memory", 13) == 0)
            return SLURM_OUT_OF_MEMORY;
        return (enum slurm_state)k;
    }
    return SLURM_FAILED;
}

int slurm_states_parse(const char *text, unsigned *ret_bits, char *err, size_t errlen)
{
    unsigned bits = 0;
    for (const char *p = text ? text : "";;) {
        size_t n = strcspn(p, ",");
        int found = -1;
        for (size_t k = 0; k < ARRAY_LEN(state_names) && found < 0; k++)
            if ((strlen(state_names[k]) == n && strncasecmp(p, state_names[k], n) == 0) ||
                (strlen(state_codes[k]) == n && strncasecmp(p, state_codes[k], n) == 0))
                found = (int)k;
        if (found < 0)
            return errbuf_set(err, errlen, GPO_EUSAGE,
                              "'%.*s' is not a job state (PENDING, RUNNING, COMPLETED, FAILED, "
                              "CANCELLED, TIMEOUT, PREEMPTED, REQUEUED, OUT_OF_MEMORY, "
                              "NODE_FAIL, or PD, R, CD, F, CA, TO, PR, RQ, OOM, NF)",
                              (int)(n < 40 ? n : 40), p);
        bits |= 1u << found;
        if (!p[n])
            break;
        p += n + 1;
    }
    *ret_bits = bits;
    return 0;
}

int64_t slurm_spec_nodes(const json_t *spec)
{
    json_int_t n = json_integer_value(json_object_get(spec, "nodes"));
    return n > 1 ? n : 1;
}

unsigned slurm_api_states(unsigned bits)
{
    static const enum client_job_state api_of[SLURM_STATE_COUNT] = {
        [SLURM_PENDING] = CLIENT_JOB_PENDING,      [SLURM_RUNNING] = CLIENT_JOB_RUNNING,
        [SLURM_COMPLETED] = CLIENT_JOB_COMPLETED,  [SLURM_FAILED] = CLIENT_JOB_FAILED,
        [SLURM_CANCELLED] = CLIENT_JOB_CANCELLED,  [SLURM_TIMEOUT] = CLIENT_JOB_TIMEOUT,
        [SLURM_PREEMPTED] = CLIENT_JOB_PREEMPTED,  [SLURM_REQUEUED] = CLIENT_JOB_PENDING,
        [SLURM_OUT_OF_MEMORY] = CLIENT_JOB_FAILED, [SLURM_NODE_FAIL] = CLIENT_JOB_NODE_FAIL,
    };
    unsigned api = 0;
    for (int k = 0; k < SLURM_STATE_COUNT; k++)
        if (bits & (1u << k))
            api |= 1u << api_of[k];
    return api;
}

bool slurm_in_list(const char *list, const char *word, bool nocase)
{
    if (!list)
        return true;
    size_t n = word ? strlen(word) : 0;
    for (const char *p = list;;) {
        size_t len = strcspn(p, ",");
        if (word && len == n && (nocase ? strncasecmp(p, word, n) : strncmp(p, word, n)) == 0)
            return true;
        if (!p[len])
            return false;
        p += len + 1;
    }
}

/* ---- sacct ------------------------------------------------------------------ */

static const struct {
    const char *header;
    int width;
} fields[] = {
#define SACCT_FIELD_ROW(name, header, width) {header, width},
    SACCT_FIELDS(SACCT_FIELD_ROW)
#undef SACCT_FIELD_ROW
};

const char *sacct_field_header(enum sacct_field f)
{
    return (unsigned)f < ARRAY_LEN(fields) ? fields[f].header : "?";
}

/* One "Name%N" word p[0, n) into *col. */
static int format_word(const char *p, size_t n, struct sacct_col *col, char *err, size_t errlen)
{
    size_t name_n = strcspn(p, "%");
    if (name_n > n)
        name_n = n;
    int found = -1;
    for (size_t k = 0; k < ARRAY_LEN(fields) && found < 0; k++)
        if (strlen(fields[k].header) == name_n && strncasecmp(p, fields[k].header, name_n) == 0)
            found = (int)k;
    if (found < 0) {
        char known[1024];
        size_t at = 0;
        for (size_t k = 0; k < ARRAY_LEN(fields) && at < sizeof(known); k++)
            at += (size_t)snprintf(known + at, sizeof(known) - at, "%s%s", k ? ", " : "",
                                   fields[k].header);
        return errbuf_set(err, errlen, GPO_EUSAGE, "--format: no field '%.*s' (known: %s)",
                          (int)(name_n < 40 ? name_n : 40), p, known);
    }
    *col = (struct sacct_col){.field = (enum sacct_field)found,
                              .width = fields[found].width,
                              .left = found == SACCT_JOBID || found == SACCT_JOBIDRAW};
    if (name_n == n)
        return 0;
    const char *w = p + name_n + 1;
    size_t wn = n - name_n - 1;
    bool left = wn > 0 && w[0] == '-';
    char digits[8];
    if (left) {
        w++;
        wn--;
    }
    int64_t width;
    if (wn == 0 || wn >= sizeof(digits))
        return errbuf_set(err, errlen, GPO_EUSAGE, "--format: '%.*s': expected a width after %%",
                          (int)(n < 40 ? n : 40), p);
    memcpy(digits, w, wn);
    digits[wn] = '\0';
    char *end;
    width = strtoll(digits, &end, 10);
    if (*end || width < 1 || width > 1000 || !isdigit((unsigned char)digits[0]))
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "--format: '%.*s': the width is 1 to 1000 characters",
                          (int)(n < 40 ? n : 40), p);
    col->width = (int)width;
    col->left = left || col->left;
    return 0;
}

int sacct_format_parse(const char *text, struct sacct_col *cols, size_t *ret_n, char *err,
                       size_t errlen)
{
    size_t n = 0;
    for (const char *p = text ? text : ""; *p;) {
        size_t len = strcspn(p, ", ");
        if (len > 0) {
            if (n == SACCT_COLS_MAX)
                return errbuf_set(err, errlen, GPO_EUSAGE, "--format: more than %d fields",
                                  SACCT_COLS_MAX);
            int rc = format_word(p, len, &cols[n], err, errlen);
            if (rc)
                return rc;
            n++;
        }
        p += len;
        if (*p)
            p++;
    }
    if (n == 0)
        return errbuf_set(err, errlen, GPO_EUSAGE, "--format: no fields");
    *ret_n = n;
    return 0;
}

const char *slurm_cell(const char *text, int width, bool left, char *buf, size_t len)
{
    const char *t = text ? text : "";
    size_t tn = strlen(t);
    if (width <= 0 || len == 0) {
        snprintf(buf, len, "%s", t);
        return buf;
    }
    if (tn > (size_t)width)
        snprintf(buf, len, "%.*s+", width - 1, t);
    else
        snprintf(buf, len, left ? "%-*s" : "%*s", width, t);
    return buf;
}

/* The job's last attempt: the last of "attempts", else "current_attempt". */
static const json_t *last_attempt(const json_t *job)
{
    const json_t *atts = json_object_get(job, "attempts");
    size_t n = json_array_size(atts);
    return n ? json_array_get(atts, n - 1) : json_object_get(job, "current_attempt");
}

static int64_t time_of(const json_t *o, const char *key)
{
    int64_t ms;
    return timefmt_parse_rfc3339(str_of(o, key), &ms) == 0 ? ms : -1;
}

const char *slurm_time_text(int64_t ms, char *buf, size_t len)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (ms < 0 || !localtime_r(&t, &tm) || strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm) == 0)
        snprintf(buf, len, "Unknown");
    return buf;
}

/* Seconds the last attempt ran (to now while it runs); -1: never started. */
static int64_t elapsed_s(const json_t *job, int64_t now_ms)
{
    const json_t *a = last_attempt(job);
    int64_t start = time_of(a, "started_at"), end = time_of(a, "ended_at");
    if (start < 0)
        return -1;
    if (end < 0)
        end = now_ms;
    return end > start ? (end - start) / 1000 : 0;
}

const char *slurm_nodelist(const json_t *nodes, const char *none, char *buf, size_t len,
                           size_t *ret_n)
{
    const char *names[256];
    size_t n = 0;
    for (size_t k = 0; k < json_array_size(nodes) && n < ARRAY_LEN(names); k++)
        if (json_string_value(json_array_get(nodes, k)))
            names[n++] = json_string_value(json_array_get(nodes, k));
    *ret_n = n;
    if (n == 0 || hostlist_compress(names, n, buf, len) != 0)
        snprintf(buf, len, "%s", n ? names[0] : none);
    return buf;
}

/* The last attempt's nodes in Slurm's host-list form. */
static const char *nodelist_text(const json_t *job, char *buf, size_t len, size_t *ret_n)
{
    return slurm_nodelist(json_object_get(last_attempt(job), "nodes"), "None assigned", buf, len,
                          ret_n);
}

static void jobid_text(const json_t *job, bool raw, char *buf, size_t len)
{
    const json_t *arr = json_object_get(job, "array_id");
    if (!raw && json_is_integer(arr))
        snprintf(buf, len, "%" JSON_INTEGER_FORMAT "_%" JSON_INTEGER_FORMAT,
                 json_integer_value(arr), json_integer_value(json_object_get(job, "array_index")));
    else
        snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(job, "id")));
}

static const char *mem_text(int64_t mib, char *buf, size_t len)
{
    if (mib > 0 && mib % 1024 == 0)
        snprintf(buf, len, "%" PRId64 "G", mib / 1024);
    else
        snprintf(buf, len, "%" PRId64 "M", mib);
    return buf;
}

/* "billing=8,cpu=8,gres/gpu=2,mem=64G,node=1" for a job that ran. */
static const char *tres_text(const json_t *job, char *buf, size_t len)
{
    const json_t *spec = json_object_get(job, "spec"), *a = last_attempt(job);
    size_t nn = json_array_size(json_object_get(a, "nodes"));
    if (!a || nn == 0) {
        buf[0] = '\0';
        return buf;
    }
    json_int_t cpus = json_integer_value(json_object_get(spec, "cpus"));
    size_t gpus = json_array_size(json_object_get(a, "gpus"));
    char mem[32];
    mem_text(json_integer_value(json_object_get(spec, "mem_mib")), mem, sizeof(mem));
    snprintf(buf, len,
             "billing=%" JSON_INTEGER_FORMAT ",cpu=%" JSON_INTEGER_FORMAT
             ",gres/gpu=%zu,mem=%s,node=%zu",
             cpus, cpus, gpus, mem, nn);
    return buf;
}

static const char *exit_text(const json_t *job, char *buf, size_t len)
{
    const json_t *a = last_attempt(job);
    snprintf(buf, len, "%" JSON_INTEGER_FORMAT ":%" JSON_INTEGER_FORMAT,
             json_integer_value(json_object_get(a, "exit_code")),
             json_integer_value(json_object_get(a, "signal")));
    return buf;
}

static const char *limit_text(const json_t *spec, char *buf, size_t len)
{
    json_int_t limit = json_integer_value(json_object_get(spec, "time_limit_s"));
    if (limit <= 0 || timefmt_duration(limit, buf, len) != 0)
        snprintf(buf, len, "UNLIMITED");
    return buf;
}

static void copy_text(char *buf, size_t len, const char *s)
{
    snprintf(buf, len, "%s", s ? s : "");
}

const char *sacct_field_text(enum sacct_field f, const json_t *job, int64_t now_ms, char *buf,
                             size_t len)
{
    const json_t *spec = json_object_get(job, "spec");
    const json_t *a = last_attempt(job);
    int64_t e, t;
    size_t nn;
    buf[0] = '\0';
    switch (f) {
    case SACCT_JOBID:
    case SACCT_JOBIDRAW:
        jobid_text(job, f == SACCT_JOBIDRAW, buf, len);
        break;
    case SACCT_JOBNAME:
        copy_text(buf, len, str_of(spec, "name"));
        break;
    case SACCT_PARTITION:
        copy_text(buf, len, str_of(spec, "pool"));
        break;
    case SACCT_ACCOUNT:
        copy_text(buf, len, str_of(job, "team"));
        break;
    case SACCT_USER:
        copy_text(buf, len, str_of(job, "user"));
        break;
    case SACCT_STATE:
        snprintf(buf, len, "%s", slurm_state_name(slurm_job_state(job)));
        break;
    case SACCT_EXITCODE:
        exit_text(job, buf, len);
        break;
    case SACCT_ELAPSED:
    case SACCT_ELAPSEDRAW:
        e = elapsed_s(job, now_ms);
        if (f == SACCT_ELAPSEDRAW)
            snprintf(buf, len, "%" PRId64, e < 0 ? 0 : e);
        else
            timefmt_duration(e < 0 ? 0 : e, buf, len);
        break;
    case SACCT_START:
    case SACCT_END:
    case SACCT_SUBMIT:
        t = f == SACCT_SUBMIT ? time_of(job, "submitted_at")
                              : time_of(a, f == SACCT_START ? "started_at" : "ended_at");
        slurm_time_text(t, buf, len);
        break;
    case SACCT_NNODES:
        nodelist_text(job, buf, len, &nn);
        snprintf(buf, len, "%" PRId64, nn ? (int64_t)nn : slurm_spec_nodes(spec));
        break;
    case SACCT_NODELIST:
        nodelist_text(job, buf, len, &nn);
        break;
    case SACCT_ALLOCTRES:
        tres_text(job, buf, len);
        break;
    case SACCT_ALLOCCPUS:
    case SACCT_NCPUS:
        snprintf(buf, len, "%" JSON_INTEGER_FORMAT,
                 a || f == SACCT_NCPUS ? json_integer_value(json_object_get(spec, "cpus")) : 0);
        break;
    case SACCT_REQMEM:
        mem_text(json_integer_value(json_object_get(spec, "mem_mib")), buf, len);
        break;
    case SACCT_TIMELIMIT:
        limit_text(spec, buf, len);
        break;
    case SACCT_QOS:
        snprintf(buf, len, "%s", str_of(spec, "priority") ? str_of(spec, "priority") : "normal");
        break;
    case SACCT_REASON:
        snprintf(buf, len, "%s",
                 str_of(job, "wait_reason")
                     ? str_of(job, "wait_reason")
                     : (str_of(job, "reason") ? str_of(job, "reason") : "None"));
        break;
    case SACCT_WORKDIR:
        copy_text(buf, len, str_of(spec, "workdir"));
        break;
    case SACCT_ARRAYJOBID:
    case SACCT_ARRAYTASKID:
        if (json_is_integer(json_object_get(job, "array_id")))
            snprintf(buf, len, "%" JSON_INTEGER_FORMAT,
                     json_integer_value(
                         json_object_get(job, f == SACCT_ARRAYJOBID ? "array_id" : "array_index")));
        else if (f == SACCT_ARRAYJOBID)
            jobid_text(job, true, buf, len);
        else
            snprintf(buf, len, "N/A");
        break;
    case SACCT_FIELD_COUNT:
        break;
    }
    return buf;
}

/* ---- times -------------------------------------------------------------------- */

/* Local midnight of the day of now_ms, plus h:m:s; -1 when mktime fails. */
static int64_t local_at(int64_t now_ms, int y, int mo, int d, int h, int mi, int s)
{
    time_t now = (time_t)(now_ms / 1000);
    struct tm tm;
    if (!localtime_r(&now, &tm))
        return -1;
    if (y >= 0) {
        tm.tm_year = y - 1900;
        tm.tm_mon = mo - 1;
        tm.tm_mday = d;
    }
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = s;
    tm.tm_isdst = -1;
    time_t t = mktime(&tm);
    return t == (time_t)-1 ? -1 : (int64_t)t * 1000;
}

/* now[+|-]COUNT[unit] */
static int relative_time(const char *p, int64_t now_ms, int64_t *ret)
{
    static const struct {
        const char *unit;
        int64_t secs;
    } units[] = {
        {"seconds", 1}, {"minutes", 60}, {"hours", 3600}, {"days", 86400}, {"weeks", 604800}};
    if (!*p) {
        *ret = now_ms;
        return 0;
    }
    if (*p != '+' && *p != '-')
        return GPO_EUSAGE;
    int sign = *p == '-' ? -1 : 1;
    char *end;
    long long n = strtoll(p + 1, &end, 10);
    if (end == p + 1 || !isdigit((unsigned char)p[1]) || n < 0 || n > 100000000)
        return GPO_EUSAGE;
    int64_t mult = 1;
    if (*end) {
        size_t un = strlen(end);
        mult = 0;
        for (size_t k = 0; k < ARRAY_LEN(units) && !mult; k++)
            if (un <= strlen(units[k].unit) && strncasecmp(end, units[k].unit, un) == 0)
                mult = units[k].secs;
        if (!mult)
            return GPO_EUSAGE;
    }
    *ret = now_ms + sign * (int64_t)n * mult * 1000;
    return 0;
}

/* Reads min..max digits at *p into *ret, moving *p past them. */
static bool read_digits(const char **p, size_t min, size_t max, int *ret)
{
    size_t n = 0;
    int v = 0;
    while (n < max && isdigit((unsigned char)(*p)[n]))
        v = v * 10 + ((*p)[n++] - '0');
    if (n < min)
        return false;
    *p += n;
    *ret = v;
    return true;
}

static bool read_char(const char **p, char c)
{
    if (**p != c)
        return false;
    (*p)++;
    return true;
}

/* "HH:MM[:SS]" at p, the whole of the rest: into h, mi, s. */
static bool read_clock(const char *p, int *h, int *mi, int *s)
{
    *s = 0;
    if (!read_digits(&p, 1, 2, h) || !read_char(&p, ':') || !read_digits(&p, 2, 2, mi))
        return false;
    if (read_char(&p, ':') && !read_digits(&p, 2, 2, s))
        return false;
    return !*p && *h < 24 && *mi < 60 && *s < 61;
}

/* The date forms: YYYY-MM-DD, MMDD[YY], MM/DD[/YY], MM.DD[.YY]; then
 * nothing, or -HH:MM[:SS] (T for the first form too). */
static int date_time(const char *p, int64_t now_ms, int64_t *ret)
{
    int y = -1, mo = 0, d = 0, h = 0, mi = 0, s = 0, yy;
    time_t now = (time_t)(now_ms / 1000);
    struct tm tm;
    const char *q = p;
    size_t nd = strspn(p, "0123456789");
    if (!localtime_r(&now, &tm))
        return GPO_EUSAGE;
    if (nd == 4 && p[4] == '-' && read_digits(&q, 4, 4, &y) && read_char(&q, '-') &&
        read_digits(&q, 2, 2, &mo) && read_char(&q, '-') && read_digits(&q, 2, 2, &d)) {
        /* YYYY-MM-DD */
    } else if (nd == 4 || nd == 6) {
        read_digits(&q, 2, 2, &mo);
        read_digits(&q, 2, 2, &d);
        y = nd == 6 && read_digits(&q, 2, 2, &yy) ? 2000 + yy : tm.tm_year + 1900;
    } else if (read_digits(&q, 1, 2, &mo) && (*q == '/' || *q == '.')) {
        char sep = *q++;
        if (!read_digits(&q, 1, 2, &d))
            return GPO_EUSAGE;
        y = read_char(&q, sep) && read_digits(&q, 2, 2, &yy) ? 2000 + yy : tm.tm_year + 1900;
    } else {
        return GPO_EUSAGE;
    }
    if (*q && ((*q != '-' && !(*q == 'T' && y >= 0 && nd == 4)) || !read_clock(q + 1, &h, &mi, &s)))
        return GPO_EUSAGE;
    if (mo < 1 || mo > 12 || d < 1 || d > 31)
        return GPO_EUSAGE;
    int64_t t = local_at(now_ms, y, mo, d, h, mi, s);
    if (t < 0)
        return GPO_EUSAGE;
    *ret = t;
    return 0;
}

int slurm_time_parse(const char *text, int64_t now_ms, int64_t *ret_ms)
{
    int64_t t;
    int h, mi, s;
    if (!text || !*text)
        return GPO_EUSAGE;
    if (strncasecmp(text, "now", 3) == 0)
        return relative_time(text + 3, now_ms, ret_ms);
    bool midnight = strcasecmp(text, "today") == 0 || strcasecmp(text, "midnight") == 0;
    if (timefmt_parse_rfc3339(text, &t) == 0 && strlen(text) > 10) {
        *ret_ms = t;
        return 0;
    }
    if (midnight || strcasecmp(text, "noon") == 0)
        t = local_at(now_ms, -1, 0, 0, midnight ? 0 : 12, 0, 0);
    else if (strchr(text, ':') && strspn(text, "0123456789:") == strlen(text))
        t = read_clock(text, &h, &mi, &s) ? local_at(now_ms, -1, 0, 0, h, mi, s) : -1;
    else
        return date_time(text, now_ms, ret_ms);
    if (t < 0)
        return GPO_EUSAGE;
    *ret_ms = t;
    return 0;
}

int slurm_ranges_text(const int64_t *v, size_t n, char *buf, size_t len)
{
    size_t at = 0;
    if (len == 0)
        return GPO_ENOBUFS;
    buf[0] = '\0';
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && v[j + 1] == v[j] + 1)
            j++;
        int k =
            j > i ? snprintf(buf + at, len - at, "%s%" PRId64 "-%" PRId64, i ? "," : "", v[i], v[j])
                  : snprintf(buf + at, len - at, "%s%" PRId64, i ? "," : "", v[i]);
        if (k < 0 || (size_t)k >= len - at) {
            buf[0] = '\0';
            return GPO_ENOBUFS;
        }
        at += (size_t)k;
        i = j + 1;
    }
    return 0;
}

/* ---- job selectors ------------------------------------------------------------ */

int slurm_jobs_parse(const char *text, struct slurm_job_sel *sel, size_t *ret_n, char *err,
                     size_t errlen)
{
    size_t n = 0;
    for (const char *p = text ? text : "";;) {
        size_t len = strcspn(p, ",");
        char word[48];
        int64_t id, index = -1;
        if (len == 0 || len >= sizeof(word) || n == SLURM_JOB_SELS_MAX)
            return errbuf_set(err, errlen, GPO_EUSAGE,
                              "'%.*s' is not a job id (JOB or ARRAY_INDEX, at most %d)",
                              (int)(len < 40 ? len : 40), p, SLURM_JOB_SELS_MAX);
        memcpy(word, p, len);
        word[len] = '\0';
        char *us = strchr(word, '_');
        if (us)
            *us = '\0';
        if ((us && (!isdigit((unsigned char)us[1]) ||
                    opts_parse_int(us + 1, 0, UINT32_MAX, &index) != 0)) ||
            !isdigit((unsigned char)word[0]) || opts_parse_int(word, 1, INT64_MAX, &id) != 0)
            return errbuf_set(err, errlen, GPO_EUSAGE,
                              "'%.*s' is not a job id (JOB or ARRAY_INDEX, at most %d)",
                              (int)(len < 40 ? len : 40), p, SLURM_JOB_SELS_MAX);
        sel[n++] = (struct slurm_job_sel){.id = id, .index = index};
        if (!p[len])
            break;
        p += len + 1;
    }
    *ret_n = n;
    return 0;
}

bool slurm_job_selected(const struct slurm_job_sel *sel, size_t n, const json_t *job)
{
    json_int_t id = json_integer_value(json_object_get(job, "id"));
    const json_t *arr = json_object_get(job, "array_id");
    json_int_t aid = json_is_integer(arr) ? json_integer_value(arr) : -1;
    json_int_t index = json_integer_value(json_object_get(job, "array_index"));
    for (size_t k = 0; k < n; k++) {
        if (sel[k].index < 0 ? sel[k].id == id || sel[k].id == aid
                             : sel[k].id == aid && sel[k].index == index)
            return true;
    }
    return n == 0;
}

/*
 * squeue.c - squeue's -o fields and its rows of job arrays (slurm.h).
 */
#include "cli/slurm.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "util/errbuf.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static const struct {
    char code;
    const char *header;
} fields[] = {
#define SQUEUE_FIELD_ROW(code, header) {code, header},
    SQUEUE_FIELDS(SQUEUE_FIELD_ROW)
#undef SQUEUE_FIELD_ROW
};

const char *squeue_field_header(char code)
{
    for (size_t k = 0; k < ARRAY_LEN(fields); k++)
        if (fields[k].code == code)
            return fields[k].header;
    return NULL;
}

static int add_item(struct squeue_item *items, size_t *n, struct squeue_item it, char *err,
                    size_t errlen)
{
    if (*n == SQUEUE_ITEMS_MAX)
        return errbuf_set(err, errlen, GPO_EUSAGE, "--format: more than %d items",
                          SQUEUE_ITEMS_MAX);
    items[(*n)++] = it;
    return 0;
}

int squeue_format_parse(const char *text, struct squeue_item *items, size_t *ret_n, char *err,
                        size_t errlen)
{
    size_t n = 0;
    int rc = 0;
    for (const char *p = text ? text : ""; *p && rc == 0;) {
        if (*p != '%' || p[1] == '%') {
            size_t len = p[0] == '%' ? 1 : strcspn(p, "%");
            rc = add_item(items, &n, (struct squeue_item){.text = p, .len = len}, err, errlen);
            p += p[0] == '%' ? 2 : len;
            continue;
        }
        struct squeue_item it = {0};
        p++;
        if (*p == '.') {
            it.right = true;
            p++;
        }
        while (*p >= '0' && *p <= '9' && it.width < 1000)
            it.width = it.width * 10 + (*p++ - '0');
        if (!*p || !squeue_field_header(*p)) {
            char known[128];
            size_t at = 0;
            for (size_t k = 0; k < ARRAY_LEN(fields); k++)
                at += (size_t)snprintf(known + at, sizeof(known) - at, "%s%%%c", k ? " " : "",
                                       fields[k].code);
            return errbuf_set(err, errlen, GPO_EUSAGE,
                              "--format: '%%%c' is not a field gpuorch knows (%s)", *p ? *p : '?',
                              known);
        }
        it.code = *p++;
        rc = add_item(items, &n, it, err, errlen);
    }
    if (rc)
        return rc;
    *ret_n = n;
    return 0;
}

static const char *str_of(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* squeue's time: "M:SS", "H:MM:SS", "D-HH:MM:SS". */
static void squeue_time(int64_t s, char *buf, size_t len)
{
    if (s < 0)
        s = 0;
    int64_t d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60, sec = s % 60;
    if (d)
        snprintf(buf, len, "%" PRId64 "-%02" PRId64 ":%02" PRId64 ":%02" PRId64, d, h, m, sec);
    else if (h)
        snprintf(buf, len, "%" PRId64 ":%02" PRId64 ":%02" PRId64, h, m, sec);
    else
        snprintf(buf, len, "%" PRId64 ":%02" PRId64, m, sec);
}

static const char *nodelist(const json_t *job, char *buf, size_t len, size_t *ret_n)
{
    return slurm_nodelist(json_object_get(json_object_get(job, "current_attempt"), "nodes"), "",
                          buf, len, ret_n);
}

static enum slurm_state queue_state(const json_t *job)
{
    enum slurm_state s = slurm_job_state(job);
    return s == SLURM_REQUEUED ? SLURM_PENDING : s;
}

/* GPUs per node: "gres/gpu:H100-80GB:2", "gres/gpu:0.25", "gres/gpu:1g.10gb:1"
 * (a MIG instance), "N/A". */
static const char *gres_text(const json_t *spec, char *buf, size_t len)
{
    const json_t *g = json_object_get(spec, "gpus");
    const char *type = str_of(spec, "gpu_type");
    json_int_t per = json_integer_value(json_object_get(spec, "gpus_per_node"));
    if (per <= 0)
        per = json_integer_value(g) / slurm_spec_nodes(spec);
    const char *mig = str_of(spec, "mig_profile");
    if (mig) /* Slurm's MIG gres: the profile as the type, one of it */
        snprintf(buf, len, "gres/gpu:%s:1", mig);
    else if (json_is_real(g))
        snprintf(buf, len, "gres/gpu%s%s:%g", type ? ":" : "", type ? type : "",
                 json_real_value(g));
    else if (per > 0)
        snprintf(buf, len, "gres/gpu%s%s:%" JSON_INTEGER_FORMAT, type ? ":" : "", type ? type : "",
                 per);
    else
        snprintf(buf, len, "N/A");
    return buf;
}

static int64_t running_s(const json_t *job, int64_t now_ms)
{
    int64_t since;
    if (queue_state(job) != SLURM_RUNNING ||
        timefmt_parse_rfc3339(str_of(job, "updated_at"), &since) != 0)
        return 0;
    return now_ms > since ? (now_ms - since) / 1000 : 0;
}

const char *squeue_field_text(char code, const struct queue_row *r, int64_t now_ms, char *buf,
                              size_t len)
{
    const json_t *job = r->job, *spec = json_object_get(job, "spec");
    const char *wait = str_of(job, "wait_reason");
    bool pending = queue_state(job) == SLURM_PENDING;
    json_int_t limit;
    int64_t t;
    size_t nn;
    buf[0] = '\0';
    switch (code) {
    case 'i':
        snprintf(buf, len, "%s", r->id);
        break;
    case 'j':
    case 'u':
    case 'a':
    case 'P': {
        const char *v = code == 'j'   ? str_of(spec, "name")
                        : code == 'u' ? str_of(job, "user")
                        : code == 'a' ? str_of(job, "team")
                                      : str_of(spec, "pool");
        snprintf(buf, len, "%s", v ? v : "");
        break;
    }
    case 't':
    case 'T':
        snprintf(buf, len, "%s",
                 code == 't' ? slurm_state_code(queue_state(job))
                             : slurm_state_name(queue_state(job)));
        break;
    case 'M':
        squeue_time(running_s(job, now_ms), buf, len);
        break;
    case 'l':
        limit = json_integer_value(json_object_get(spec, "time_limit_s"));
        if (limit > 0)
            squeue_time(limit, buf, len);
        else
            snprintf(buf, len, "UNLIMITED");
        break;
    case 'D':
        nodelist(job, buf, len, &nn);
        snprintf(buf, len, "%" PRId64, nn ? (int64_t)nn : slurm_spec_nodes(spec));
        break;
    case 'C':
        snprintf(buf, len, "%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(spec, "cpus")));
        break;
    case 'N':
        nodelist(job, buf, len, &nn);
        break;
    case 'r':
        snprintf(buf, len, "%s", pending && wait ? wait : "None");
        break;
    case 'R':
        if (pending)
            snprintf(buf, len, "(%s)", wait ? wait : "None");
        else
            nodelist(job, buf, len, &nn);
        break;
    case 'b':
        gres_text(spec, buf, len);
        break;
    case 'V':
        t = -1;
        timefmt_parse_rfc3339(str_of(job, "submitted_at"), &t);
        slurm_time_text(t, buf, len);
        break;
    default:
        break;
    }
    return buf;
}

/* ---- array rows ----------------------------------------------------------------- */

/* The pending tasks of one array gathered into one row. */
struct group {
    int64_t array_id;
    size_t row; /* its row */
    int64_t *index;
    size_t n, cap;
};

static int group_add(struct group *g, int64_t index)
{
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        int64_t *v = realloc(g->index, cap * sizeof(*v));
        if (!v)
            return GPO_ENOMEM;
        g->index = v;
        g->cap = cap;
    }
    g->index[g->n++] = index;
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* "41_[5-20%4]" for group g of tasks of job (its first pending task). */
static void group_id(struct group *g, const json_t *job, char *buf, size_t len)
{
    qsort(g->index, g->n, sizeof(*g->index), cmp_i64);
    if (g->n == 1) {
        snprintf(buf, len, "%" PRId64 "_%" PRId64, g->array_id, g->index[0]);
        return;
    }
    char ranges[64];
    if (slurm_ranges_text(g->index, g->n, ranges, sizeof(ranges)) != 0)
        snprintf(ranges, sizeof(ranges), "%" PRId64 "-%" PRId64 ",...", g->index[0],
                 g->index[g->n - 1]);
    const char *text = str_of(json_object_get(job, "spec"), "array");
    const char *cap = text ? strchr(text, '%') : NULL;
    snprintf(buf, len, "%" PRId64 "_[%s%s]", g->array_id, ranges, cap ? cap : "");
}

static struct group *group_find(struct group *groups, size_t n, int64_t array_id)
{
    for (size_t k = n; k > 0; k--)
        if (groups[k - 1].array_id == array_id)
            return &groups[k - 1];
    return NULL;
}

int slurm_queue_rows(const json_t *jobs, bool expand, struct queue_row **ret, size_t *ret_n)
{
    size_t n = json_array_size(jobs), nrows = 0, ngroups = 0;
    struct queue_row *rows = calloc(n ? n : 1, sizeof(*rows));
    struct group *groups = calloc(n ? n : 1, sizeof(*groups));
    int rc = rows && groups ? 0 : GPO_ENOMEM;
    for (size_t k = 0; rc == 0 && k < n; k++) {
        const json_t *j = json_array_get(jobs, k);
        const json_t *arr = json_object_get(j, "array_id");
        int64_t index = json_integer_value(json_object_get(j, "array_index"));
        if (!json_is_integer(arr)) {
            rows[nrows].job = j;
            snprintf(rows[nrows++].id, sizeof(rows[0].id), "%" JSON_INTEGER_FORMAT,
                     json_integer_value(json_object_get(j, "id")));
            continue;
        }
        int64_t aid = json_integer_value(arr);
        if (expand || queue_state(j) != SLURM_PENDING) {
            rows[nrows].job = j;
            snprintf(rows[nrows++].id, sizeof(rows[0].id), "%" PRId64 "_%" PRId64, aid, index);
            continue;
        }
        struct group *g = group_find(groups, ngroups, aid);
        if (!g) {
            g = &groups[ngroups++];
            *g = (struct group){.array_id = aid, .row = nrows};
            rows[nrows++].job = j;
        }
        rc = group_add(g, index);
    }
    for (size_t k = 0; k < ngroups; k++) {
        if (rc == 0)
            group_id(&groups[k], rows[groups[k].row].job, rows[groups[k].row].id,
                     sizeof(rows[0].id));
        free(groups[k].index);
    }
    free(groups);
    if (rc) {
        free(rows);
        return rc;
    }
    *ret = rows;
    *ret_n = nrows;
    return 0;
}

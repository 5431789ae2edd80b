/*
 * topview.c - what `gpuorch top` shows: from what the API answered to the
 * view object, and from the view to the text of a screen (topview.h).
 */
#define _GNU_SOURCE /* vasprintf, qsort_r */
#include "cli/topview.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/table.h"
#include "cli/topsvc.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define BAR_MIN   10 /* characters inside a utilization bar, at the least */
#define BAR_MAX   40
#define BAR_PLAIN 20 /* ... in a plain snapshot */
#define JOBS_ROOM 24 /* characters a GPU row keeps for its jobs when sizing the bar */
#define GPU_FIXED 42 /* characters of a GPU row besides its bar and jobs */

static const char *const sort_names[] = {
#define TOP_SORT_NAME(name, text) text,
    TOP_SORT_MAP(TOP_SORT_NAME)
#undef TOP_SORT_NAME
};

const char *top_sort_name(enum top_sort s)
{
    return (unsigned)s < ARRAY_LEN(sort_names) ? sort_names[s] : "?";
}

int top_sort_parse(const char *name, enum top_sort *ret)
{
    for (size_t k = 0; name && k < ARRAY_LEN(sort_names); k++)
        if (strcmp(name, sort_names[k]) == 0) {
            *ret = (enum top_sort)k;
            return 0;
        }
    return GPO_EUSAGE;
}

/* ---- the snapshot ------------------------------------------------------- */

void top_snapshot_release(struct top_snapshot *s)
{
    if (!s)
        return;
    json_decref(s->nodes);
    json_decref(s->jobs);
    json_decref(s->cost);
    json_decref(s->services);
    *s = (struct top_snapshot){0};
}

/* ---- the view ----------------------------------------------------------- */

/* A copy of v, or JSON null for NULL. */
static json_t *copy_or_null(const json_t *v)
{
    return v ? json_deep_copy(v) : json_null();
}

/* The sample of GPU `uuid` among a node's gpu_samples (borrowed), or NULL. */
static json_t *sample_of(const json_t *node, const char *uuid)
{
    const json_t *samples = json_object_get(node, "gpu_samples");
    for (size_t k = 0; uuid && k < json_array_size(samples); k++) {
        json_t *g = json_array_get(samples, k);
        const char *u = cli_json_str(g, "uuid");
        if (u && strcmp(u, uuid) == 0)
            return g;
    }
    return NULL;
}

static bool has_job(const json_t *list, json_int_t id)
{
    for (size_t k = 0; k < json_array_size(list); k++)
        if (json_integer_value(json_object_get(json_array_get(list, k), "id")) == id)
            return true;
    return false;
}

static bool is_running(const json_t *job)
{
    const char *st = cli_json_str(job, "state");
    return st && strcmp(st, "RUNNING") == 0;
}

/* The jobs on one GPU: running jobs whose current attempt holds it, then
 * the jobs its processes belong to that the user cannot see. */
static json_t *gpu_jobs(const json_t *jobs, const char *uuid, const json_t *sample)
{
    json_t *list = json_array();
    for (size_t k = 0; list && uuid && k < json_array_size(jobs); k++) {
        const json_t *j = json_array_get(jobs, k);
        const json_t *held = json_object_get(json_object_get(j, "current_attempt"), "gpus");
        for (size_t g = 0; is_running(j) && g < json_array_size(held); g++) {
            const char *u = json_string_value(json_array_get(held, g));
            if (u && strcmp(u, uuid) == 0) {
                json_array_append_new(list,
                                      json_pack("{s:I, s:o, s:o}", "id",
                                                json_integer_value(json_object_get(j, "id")),
                                                "user", top_json_str(cli_json_str(j, "user")),
                                                "team", top_json_str(cli_json_str(j, "team"))));
                break;
            }
        }
    }
    const json_t *procs = json_object_get(sample, "processes");
    for (size_t k = 0; list && k < json_array_size(procs); k++) {
        const json_t *id = json_object_get(json_array_get(procs, k), "job");
        if (json_is_integer(id) && !has_job(list, json_integer_value(id)))
            json_array_append_new(
                list, json_pack("{s:I, s:n, s:n}", "id", json_integer_value(id), "user", "team"));
    }
    return list;
}

/* Running sums of GPU figures (a node's, the cluster's). */
struct sums {
    double util;
    size_t util_n;
    int64_t mem_used, mem_total, power_mw;
    bool mem_known, power_known;
    size_t gpus;
    int64_t used_milli; /* GPUs in use, in GPU shares (milli-GPU) */
};

static void sums_add(struct sums *t, const json_t *sample, int64_t total_mib, int64_t used_milli)
{
    const json_t *u = json_object_get(sample, "utilization_pct");
    const json_t *m = json_object_get(sample, "memory_used_mib");
    const json_t *p = json_object_get(sample, "power_mw");
    t->gpus++;
    t->used_milli += used_milli;
    if (json_is_number(u)) {
        t->util += json_number_value(u);
        t->util_n++;
    }
    if (json_is_integer(m)) {
        t->mem_used += json_integer_value(m);
        t->mem_total += total_mib;
        t->mem_known = true;
    }
    if (json_is_integer(p)) {
        t->power_mw += json_integer_value(p);
        t->power_known = true;
    }
}

/* Sets the figures of t into o: utilization_pct, memory_*_mib, power_w. */
static int sums_set(json_t *o, const struct sums *t)
{
    int e = json_object_set_new(o, "utilization_pct",
                                t->util_n ? json_real(t->util / (double)t->util_n) : json_null());
    e |= json_object_set_new(o, "memory_used_mib",
                             t->mem_known ? json_integer(t->mem_used) : json_null());
    e |= json_object_set_new(o, "memory_total_mib",
                             t->mem_known ? json_integer(t->mem_total) : json_null());
    e |= json_object_set_new(
        o, "power_w", t->power_known ? json_real((double)t->power_mw / 1000.0) : json_null());
    return e;
}

/* One GPU's entry; adds its figures to both sums. */
static json_t *gpu_entry(const json_t *node, const json_t *inv, const json_t *jobs,
                         struct sums *node_sums, struct sums *all)
{
    const char *uuid = cli_json_str(inv, "uuid");
    const json_t *sample = sample_of(node, uuid);
    const json_t *total = json_object_get(sample, "memory_total_mib");
    int64_t total_mib = json_is_integer(total)
                            ? json_integer_value(total)
                            : json_integer_value(json_object_get(inv, "mem_mib"));
    json_t *list = gpu_jobs(jobs, uuid, sample);
    const json_t *p = json_object_get(sample, "power_mw");
    json_t *g =
        list
            ? json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:o, s:o, s:o, s:o}", "node",
                        top_json_str(cli_json_str(node, "name")), "index",
                        top_json_int(json_object_get(inv, "index")), "uuid", top_json_str(uuid),
                        "gpu_type", top_json_str(cli_json_str(inv, "gpu_type")), "utilization_pct",
                        top_json_num(json_object_get(sample, "utilization_pct")), "memory_used_mib",
                        top_json_int(json_object_get(sample, "memory_used_mib")),
                        "memory_total_mib", (json_int_t)total_mib, "power_w",
                        json_is_integer(p) ? json_real((double)json_integer_value(p) / 1000.0)
                                           : json_null(),
                        "temperature_c", top_json_int(json_object_get(sample, "temperature_c")),
                        "error", top_json_str(cli_json_str(sample, "error")), "jobs", list)
            : NULL;
    /* How much of it is in use, in GPU shares, as the controller counts it
     * ("share_in_use": 0.25 for a 0.25 job, whoever's it is); from an older
     * controller without it, a GPU held at all ("in_use", maybe by a job this
     * token may not see) counts whole. */
    const json_t *share = json_object_get(inv, "share_in_use");
    bool held = json_array_size(list) > 0 || json_is_true(json_object_get(inv, "in_use"));
    int64_t used = json_is_number(share) ? (int64_t)(json_number_value(share) * 1000.0 + 0.5)
                   : held                ? 1000
                                         : 0;
    sums_add(node_sums, sample, total_mib, used);
    sums_add(all, sample, total_mib, used);
    return g;
}

/* One node's entry, its GPUs appended to gpus. */
static json_t *node_entry(const json_t *n, const json_t *jobs, json_t *gpus, struct sums *all)
{
    struct sums t = {0};
    const json_t *inv = json_object_get(n, "gpus");
    const char *type = NULL;
    bool mixed = false;
    int e = 0;
    for (size_t k = 0; k < json_array_size(inv); k++) {
        const json_t *g = json_array_get(inv, k);
        const char *ty = cli_json_str(g, "gpu_type");
        if (ty && type && strcmp(ty, type) != 0)
            mixed = true;
        type = type ? type : ty;
        e |= json_array_append_new(gpus, gpu_entry(n, g, jobs, &t, all));
    }
    json_t *o = json_pack(
        "{s:o, s:o, s:o, s:o, s:I, s:o}", "name", top_json_str(cli_json_str(n, "name")), "pool",
        top_json_str(cli_json_str(n, "pool")), "state", top_json_str(cli_json_str(n, "state")),
        "gpu_type", top_json_str(mixed ? "mixed" : type), "gpus", (json_int_t)t.gpus, "sampled_at",
        top_json_str(cli_json_str(n, "sampled_at")));
    if (o && (e || sums_set(o, &t))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* A running job's utilization from the samples when the API gives none:
 * the mean of its GPUs' (gpus: the view's entries); null when unknown. */
static json_t *job_util_from_samples(json_int_t id, const json_t *gpus)
{
    double util = 0;
    size_t n = 0;
    for (size_t k = 0; k < json_array_size(gpus); k++) {
        const json_t *g = json_array_get(gpus, k);
        const json_t *u = json_object_get(g, "utilization_pct");
        if (has_job(json_object_get(g, "jobs"), id) && json_is_number(u)) {
            util += json_number_value(u);
            n++;
        }
    }
    return n ? json_real(util / (double)n) : json_null();
}

/* The memory of job id's processes over every node's samples, or -1. */
static int64_t job_process_mib(const json_t *nodes, json_int_t id)
{
    int64_t mem = -1;
    for (size_t k = 0; k < json_array_size(nodes); k++) {
        const json_t *samples = json_object_get(json_array_get(nodes, k), "gpu_samples");
        for (size_t g = 0; g < json_array_size(samples); g++) {
            const json_t *procs = json_object_get(json_array_get(samples, g), "processes");
            for (size_t p = 0; p < json_array_size(procs); p++) {
                const json_t *pr = json_array_get(procs, p);
                const json_t *m = json_object_get(pr, "memory_mib");
                if (json_integer_value(json_object_get(pr, "job")) == id && json_is_integer(m))
                    mem = (mem < 0 ? 0 : mem) + json_integer_value(m);
            }
        }
    }
    return mem;
}

static json_t *job_entry(const json_t *j, const json_t *nodes, const json_t *gpus, int64_t now)
{
    const json_t *cur = json_object_get(j, "current_attempt");
    json_int_t id = json_integer_value(json_object_get(j, "id"));
    const json_t *api_util = json_object_get(j, "gpu_utilization_pct");
    const json_t *api_mem = json_object_get(j, "gpu_memory_used_mib");
    json_t *util = json_is_number(api_util) ? json_real(json_number_value(api_util))
                                            : job_util_from_samples(id, gpus);
    int64_t pmem = json_is_integer(api_mem) ? -1 : job_process_mib(nodes, id);
    json_t *mem = json_is_integer(api_mem) ? json_integer(json_integer_value(api_mem))
                  : pmem >= 0              ? json_integer(pmem)
                                           : json_null();
    int64_t since;
    json_t *running = timefmt_parse_rfc3339(cli_json_str(j, "updated_at"), &since) == 0
                          ? json_integer(now > since ? (now - since) / 1000 : 0)
                          : json_null();
    const json_t *cost = json_object_get(j, "cost"), *idle = json_object_get(j, "idle");
    /* Its GPUs in GPU shares (a 0.25 job: 0.25); an older controller's
     * attempt without "gpu_shares": one per GPU it names. */
    const json_t *shares = json_object_get(cur, "gpu_shares");
    double ngpus = json_is_number(shares) ? json_number_value(shares)
                                          : (double)json_array_size(json_object_get(cur, "gpus"));
    return json_pack("{s:I, s:o, s:o, s:o, s:f, s:o, s:o, s:o, s:o, s:o, s:o}", "id", id, "name",
                     top_json_str(cli_json_str(json_object_get(j, "spec"), "name")), "user",
                     top_json_str(cli_json_str(j, "user")), "team",
                     top_json_str(cli_json_str(j, "team")), "gpus", ngpus, "nodes",
                     copy_or_null(json_object_get(cur, "nodes")), "utilization_pct", util,
                     "memory_used_mib", mem, "running_s", running, "cost", top_json_num(cost),
                     "idle", copy_or_null(json_is_object(idle) ? idle : NULL));
}

/* MIG instances of the nodes' GPUs in MIG mode, and those a job holds. */
static void mig_count(const json_t *nodes, json_int_t *ret_total, json_int_t *ret_used)
{
    json_int_t total = 0, used = 0;
    for (size_t k = 0; k < json_array_size(nodes); k++) {
        const json_t *gpus = json_object_get(json_array_get(nodes, k), "gpus");
        for (size_t g = 0; g < json_array_size(gpus); g++) {
            const json_t *gpu = json_array_get(gpus, g);
            const json_t *mig = json_object_get(gpu, "mig");
            if (!json_is_true(json_object_get(gpu, "mig_enabled")))
                continue;
            total += (json_int_t)json_array_size(mig);
            for (size_t i = 0; i < json_array_size(mig); i++)
                used += json_is_true(json_object_get(json_array_get(mig, i), "in_use"));
        }
    }
    *ret_total = total;
    *ret_used = used;
}

json_t *top_view_build(const struct top_snapshot *s)
{
    struct sums all = {0};
    size_t up = 0, running = 0, pending = 0;
    char now[TIMEFMT_RFC3339_LEN] = "";
    timefmt_rfc3339(s->taken_ms - s->taken_ms % 1000, now, sizeof(now)); /* whole seconds */
    json_t *nodes = json_array(), *gpus = json_array(), *jobs = json_array();
    json_t *services = top_services_view(s->services);
    int e = !nodes || !gpus || !jobs || !services;
    for (size_t k = 0; !e && k < json_array_size(s->nodes); k++) {
        const json_t *n = json_array_get(s->nodes, k);
        const char *st = cli_json_str(n, "state");
        up += st && strcmp(st, "up") == 0;
        e |= json_array_append_new(nodes, node_entry(n, s->jobs, gpus, &all));
    }
    for (size_t k = 0; !e && k < json_array_size(s->jobs); k++) {
        const json_t *j = json_array_get(s->jobs, k);
        const char *st = cli_json_str(j, "state");
        pending += st && strcmp(st, "PENDING") == 0;
        if (is_running(j)) {
            running++;
            e |= json_array_append_new(jobs, job_entry(j, s->nodes, gpus, s->taken_ms));
        }
    }
    json_t *rate = top_json_num(json_object_get(s->cost, "rate_per_hour"));
    json_int_t mig_total, mig_used;
    mig_count(s->nodes, &mig_total, &mig_used);
    json_t *sum =
        json_pack("{s:I, s:I, s:I, s:f, s:I, s:I, s:O, s:I, s:I}", "nodes",
                  (json_int_t)json_array_size(s->nodes), "nodes_up", (json_int_t)up, "gpus",
                  (json_int_t)all.gpus, "gpus_used", (double)all.used_milli / 1000.0,
                  "running_jobs", (json_int_t)running, "pending_jobs", (json_int_t)pending,
                  "cost_rate", rate, "mig_instances", mig_total, "mig_instances_used", mig_used);
    e |= !sum || sums_set(sum, &all);
    json_t *view =
        e ? NULL
          : json_pack("{s:s, s:O, s:O, s:O, s:O, s:O, s:O}", "time", now, "summary", sum, "nodes",
                      nodes, "gpus", gpus, "jobs", jobs, "services", services, "cost_rate", rate);
    json_decref(sum);
    json_decref(rate);
    json_decref(nodes);
    json_decref(gpus);
    json_decref(jobs);
    json_decref(services);
    return view;
}

/* ---- the screen ---------------------------------------------------------- */

enum style { STYLE_NONE, STYLE_TITLE, STYLE_HEAD, STYLE_NODE };

static const char *const style_on[] = {"", "\x1b[7m", "\x1b[1m", "\x1b[1m"};

struct line {
    char *text;
    enum style style;
};

struct lines {
    struct line *v;
    size_t n, cap;
    bool oom;
};

static void lines_add(struct lines *L, enum style st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void lines_add(struct lines *L, enum style st, const char *fmt, ...)
{
    if (L->oom)
        return;
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 64;
        struct line *v = realloc(L->v, cap * sizeof(*v));
        if (!v) {
            L->oom = true;
            return;
        }
        L->v = v;
        L->cap = cap;
    }
    char *text = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&text, fmt, ap);
    va_end(ap);
    if (n < 0) {
        L->oom = true;
        return;
    }
    L->v[L->n++] = (struct line){text, st};
}

static void lines_release(struct lines *L)
{
    for (size_t k = 0; k < L->n; k++)
        free(L->v[k].text);
    free(L->v);
}

/* "45%", or "-" when unknown. */
static const char *pct_text(const json_t *v, char *buf, size_t len)
{
    if (!json_is_number(v))
        return "-";
    snprintf(buf, len, "%.0f%%", json_number_value(v));
    return buf;
}

/* MiB as a short size: "512M", "80G", "1.5G", "1.2T". */
/* GPUs in GPU shares as a number reads: "2", "0.25", "0.125", "1.5" (to
 * the milli-GPU, trailing zeros dropped); "-" when not a number. */
static const char *shares_text(const json_t *v, char *buf, size_t len)
{
    if (!json_is_number(v)) {
        snprintf(buf, len, "-");
        return buf;
    }
    snprintf(buf, len, "%.3f", json_number_value(v));
    char *dot = strchr(buf, '.');
    if (dot) {
        char *end = buf + strlen(buf);
        while (end > dot + 1 && end[-1] == '0')
            *--end = '\0';
        if (end == dot + 1)
            *dot = '\0';
    }
    return buf;
}

static const char *mib_text(int64_t mib, char *buf, size_t len)
{
    if (mib < 1024)
        snprintf(buf, len, "%" PRId64 "M", mib);
    else if (mib < INT64_C(1024) * 1024 && mib % 1024 == 0)
        snprintf(buf, len, "%" PRId64 "G", mib / 1024);
    else if (mib < INT64_C(1024) * 1024)
        snprintf(buf, len, "%.1fG", (double)mib / 1024.0);
    else
        snprintf(buf, len, "%.1fT", (double)mib / (1024.0 * 1024.0));
    return buf;
}

/* "1.5G/80G" from an object's memory_used_mib and memory_total_mib. */
static const char *mem_text(const json_t *o, char *buf, size_t len)
{
    const json_t *used = json_object_get(o, "memory_used_mib");
    const json_t *total = json_object_get(o, "memory_total_mib");
    char u[32] = "-", t[32] = "-";
    if (json_is_integer(used))
        mib_text(json_integer_value(used), u, sizeof(u));
    if (json_is_integer(total) && json_integer_value(total) > 0)
        mib_text(json_integer_value(total), t, sizeof(t));
    snprintf(buf, len, "%s/%s", u, t);
    return buf;
}

static const char *power_text(const json_t *w, char *buf, size_t len)
{
    if (!json_is_number(w))
        return "-";
    double v = json_number_value(w);
    if (v < 1000)
        snprintf(buf, len, "%.0fW", v);
    else
        snprintf(buf, len, "%.1fkW", v / 1000.0);
    return buf;
}

static const char *money_text(const json_t *v, const char *unit, char *buf, size_t len)
{
    if (!json_is_number(v))
        return "-";
    snprintf(buf, len, "%.2f%s", json_number_value(v), unit);
    return buf;
}

/* A utilization bar as nvtop draws one: "[||||||      ]", w characters
 * inside; empty when the figure is unknown. */
static const char *bar_text(const json_t *pct, unsigned w, char *buf, size_t len)
{
    double v = json_is_number(pct) ? json_number_value(pct) : 0;
    v = v < 0 ? 0 : v > 100 ? 100 : v;
    unsigned fill = (unsigned)(v * w / 100.0 + 0.5); /* v is in 0..100 */
    size_t at = 0;
    if (len < (size_t)w + 3)
        return "[]";
    buf[at++] = '[';
    for (unsigned k = 0; k < w; k++)
        buf[at++] = k < fill ? '|' : ' ';
    buf[at++] = ']';
    buf[at] = '\0';
    return buf;
}

/* "12 alice/research, 13 bob/vision"; a job the user cannot see: "14". */
static const char *jobs_text(const json_t *jobs, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < json_array_size(jobs) && at < len; k++) {
        const json_t *j = json_array_get(jobs, k);
        const char *user = cli_json_str(j, "user"), *team = cli_json_str(j, "team");
        at +=
            (size_t)snprintf(buf + at, len - at, "%s%" JSON_INTEGER_FORMAT "%s%s%s%s",
                             k ? ", " : "", json_integer_value(json_object_get(j, "id")),
                             user ? " " : "", user ? user : "", team ? "/" : "", team ? team : "");
    }
    return at ? buf : "-";
}

static unsigned bar_width(const struct top_screen *scr)
{
    if (scr->cols == 0)
        return BAR_PLAIN;
    long w = (long)scr->cols - GPU_FIXED - JOBS_ROOM;
    return w < BAR_MIN ? BAR_MIN : w > BAR_MAX ? BAR_MAX : (unsigned)w;
}

static void add_summary(struct lines *L, const json_t *view, const struct top_screen *scr)
{
    const json_t *s = json_object_get(view, "summary");
    char util[16], mem[64], power[32], rate[48], used[32];
    const char *time = cli_json_str(view, "time");
    if (scr->ansi)
        lines_add(L, STYLE_TITLE, "gpuorch top  %s  %s  sort: %s  (q quit, s sort)",
                  scr->server ? scr->server : "", time ? time : "", top_sort_name(scr->sort));
    else
        lines_add(L, STYLE_TITLE, "gpuorch top  %s  %s", scr->server ? scr->server : "",
                  time ? time : "");
    char mig[64] = "";
    json_int_t mig_total = json_integer_value(json_object_get(s, "mig_instances"));
    if (mig_total > 0)
        snprintf(mig, sizeof(mig), "  MIG %" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT " used",
                 json_integer_value(json_object_get(s, "mig_instances_used")), mig_total);
    lines_add(L, STYLE_NONE,
              "nodes %" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT
              " up  GPUs %s/%" JSON_INTEGER_FORMAT
              " used%s  util %s  mem %s  power %s  jobs %" JSON_INTEGER_FORMAT
              " running, %" JSON_INTEGER_FORMAT " pending  cost %s",
              json_integer_value(json_object_get(s, "nodes_up")),
              json_integer_value(json_object_get(s, "nodes")),
              shares_text(json_object_get(s, "gpus_used"), used, sizeof(used)),
              json_integer_value(json_object_get(s, "gpus")), mig,
              pct_text(json_object_get(s, "utilization_pct"), util, sizeof(util)),
              mem_text(s, mem, sizeof(mem)),
              power_text(json_object_get(s, "power_w"), power, sizeof(power)),
              json_integer_value(json_object_get(s, "running_jobs")),
              json_integer_value(json_object_get(s, "pending_jobs")),
              money_text(json_object_get(view, "cost_rate"), "/h", rate, sizeof(rate)));
    if (scr->status)
        lines_add(L, STYLE_NONE, "%s", scr->status);
}

static void add_gpus(struct lines *L, const json_t *view, const struct top_screen *scr, int64_t now)
{
    const json_t *nodes = json_object_get(view, "nodes"), *gpus = json_object_get(view, "gpus");
    unsigned w = bar_width(scr);
    lines_add(L, STYLE_NONE, "%s", "");
    lines_add(L, STYLE_HEAD, "  %3s %-*s  %-13s %6s %4s  %s", "GPU", (int)w + 7, "UTIL", "MEM",
              "POWER", "TEMP", "JOBS");
    for (size_t k = 0; k < json_array_size(nodes); k++) {
        const json_t *n = json_array_get(nodes, k);
        const char *name = cli_json_str(n, "name"), *type = cli_json_str(n, "gpu_type");
        char util[16], mem[64], power[32], age[32];
        lines_add(L, STYLE_NODE,
                  "%s  %s  %s  %" JSON_INTEGER_FORMAT "x %s  util %s  mem %s  power %s  "
                  "sampled %s",
                  name ? name : "?", cli_json_str(n, "pool") ? cli_json_str(n, "pool") : "-",
                  cli_json_str(n, "state") ? cli_json_str(n, "state") : "?",
                  json_integer_value(json_object_get(n, "gpus")), type ? type : "GPU",
                  pct_text(json_object_get(n, "utilization_pct"), util, sizeof(util)),
                  mem_text(n, mem, sizeof(mem)),
                  power_text(json_object_get(n, "power_w"), power, sizeof(power)),
                  cli_age(cli_json_str(n, "sampled_at"), now, age, sizeof(age)));
        for (size_t g = 0; name && g < json_array_size(gpus); g++) {
            const json_t *gpu = json_array_get(gpus, g);
            const char *gnode = cli_json_str(gpu, "node"), *error = cli_json_str(gpu, "error");
            if (!gnode || strcmp(gnode, name) != 0)
                continue;
            const json_t *t = json_object_get(gpu, "temperature_c");
            char idx[24], temp[24] = "-";
            snprintf(idx, sizeof(idx), "%" JSON_INTEGER_FORMAT,
                     json_integer_value(json_object_get(gpu, "index")));
            if (json_is_integer(t))
                snprintf(temp, sizeof(temp), "%" JSON_INTEGER_FORMAT "C", json_integer_value(t));
            if (error) {
                lines_add(L, STYLE_NONE, "  %3s error: %s", idx, error);
                continue;
            }
            char bar[BAR_MAX + 8], jobs[512];
            lines_add(L, STYLE_NONE, "  %3s %s %4s  %-13s %6s %4s  %s", idx,
                      bar_text(json_object_get(gpu, "utilization_pct"), w, bar, sizeof(bar)),
                      pct_text(json_object_get(gpu, "utilization_pct"), util, sizeof(util)),
                      mem_text(gpu, mem, sizeof(mem)),
                      power_text(json_object_get(gpu, "power_w"), power, sizeof(power)), temp,
                      jobs_text(json_object_get(gpu, "jobs"), jobs, sizeof(jobs)));
        }
    }
}

/* The key of a job for sort s: higher sorts first (the id: lower first). */
static double sort_key(const json_t *j, enum top_sort s)
{
    static const char *const field[] = {"id", "utilization_pct", "gpus", "running_s", "cost"};
    const json_t *v = json_object_get(j, field[(unsigned)s < ARRAY_LEN(field) ? s : 0]);
    double x = json_is_number(v) ? json_number_value(v) : -1;
    return s == TOP_SORT_ID ? -x : x;
}

static int job_cmp(const void *a, const void *b, void *arg)
{
    const json_t *x = *(const json_t *const *)a, *y = *(const json_t *const *)b;
    enum top_sort s = *(const enum top_sort *)arg;
    double kx = sort_key(x, s), ky = sort_key(y, s);
    if (kx != ky)
        return kx > ky ? -1 : 1;
    json_int_t ix = json_integer_value(json_object_get(x, "id"));
    json_int_t iy = json_integer_value(json_object_get(y, "id"));
    return ix < iy ? -1 : ix > iy;
}

static int job_row(struct table *t, const json_t *j, int64_t now)
{
    const json_t *idle = json_object_get(j, "idle"), *rs = json_object_get(j, "running_s");
    char id[24], gpus[24], util[16], mem[32] = "-", time[TIMEFMT_DURATION_LEN] = "-", cost[48],
                                     idletext[64] = "-";
    snprintf(id, sizeof(id), "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(j, "id")));
    shares_text(json_object_get(j, "gpus"), gpus, sizeof(gpus));
    if (json_is_integer(json_object_get(j, "memory_used_mib")))
        mib_text(json_integer_value(json_object_get(j, "memory_used_mib")), mem, sizeof(mem));
    if (json_is_integer(rs))
        timefmt_duration(json_integer_value(rs), time, sizeof(time));
    if (json_is_object(idle)) {
        /* How long it has been idle, and what will happen when not "report". */
        const char *action = cli_json_str(idle, "action");
        char age[32];
        cli_age(cli_json_str(idle, "since"), now, age, sizeof(age));
        char *ago = strstr(age, " ago");
        if (ago)
            *ago = '\0';
        snprintf(idletext, sizeof(idletext), "idle %s%s%s", strcmp(age, "-") != 0 ? age : "",
                 action && strcmp(action, "report") != 0 ? " " : "",
                 action && strcmp(action, "report") != 0 ? action : "");
    }
    const char *cells[] = {id,
                           cli_json_str(j, "user"),
                           cli_json_str(j, "team"),
                           gpus,
                           pct_text(json_object_get(j, "utilization_pct"), util, sizeof(util)),
                           mem,
                           time,
                           money_text(json_object_get(j, "cost"), "", cost, sizeof(cost)),
                           idletext};
    return table_add(t, cells);
}

/* Text (borrowed) line by line; line `head` (from 0) is a table's header. */
static void add_text(struct lines *L, const char *text, size_t head)
{
    size_t k = 0;
    for (const char *p = text, *end; p && *p; p = end + 1, k++) {
        end = strchr(p, '\n');
        if (!end)
            end = p + strlen(p) - 1;
        lines_add(L, k == head ? STYLE_HEAD : STYLE_NONE, "%.*s", (int)(end - p + (*end != '\n')),
                  p);
    }
}

/* The jobs table, printed by table.c into memory and taken line by line. */
static void add_jobs(struct lines *L, const json_t *view, const struct top_screen *scr, int64_t now)
{
    static const char *const head[] = {"JOB", "USER", "TEAM", "GPUS", "UTIL%",
                                       "MEM", "TIME", "COST", "IDLE"};
    const json_t *jobs = json_object_get(view, "jobs");
    size_t n = json_array_size(jobs);
    lines_add(L, STYLE_NONE, "%s", "");
    lines_add(L, STYLE_NONE, "jobs: %zu running, sorted by %s", n, top_sort_name(scr->sort));
    if (n == 0)
        return;
    // NOLINTNEXTLINE(bugprone-sizeof-expression): *p is a pointer (an array of them)
    const json_t **order = calloc(n, sizeof(*order));
    struct table *t = table_new(ARRAY_LEN(head), head);
    char *text = NULL;
    size_t len = 0;
    FILE *mem = order && t ? open_memstream(&text, &len) : NULL;
    int rc = mem ? 0 : GPO_ENOMEM;
    for (size_t k = 0; order && k < n; k++)
        order[k] = json_array_get(jobs, k);
    enum top_sort sort = scr->sort;
    if (order)
        // NOLINTNEXTLINE(bugprone-sizeof-expression): *p is a pointer (an array of them)
        qsort_r(order, n, sizeof(*order), job_cmp, &sort);
    for (size_t k = 0; rc == 0 && k < n; k++)
        rc = job_row(t, order[k], now);
    if (rc == 0)
        table_print(t, mem);
    if (mem && fclose(mem) != 0)
        rc = GPO_ENOMEM;
    if (rc == 0)
        add_text(L, text, 0);
    L->oom |= rc != 0;
    free(text);
    table_free(t);
    free((void *)order);
}

/* The services' block (topsvc.c), when there are any. */
static void add_services(struct lines *L, const json_t *view)
{
    char *text = NULL;
    if (top_services_text(json_object_get(view, "services"), &text) != 0)
        L->oom = true;
    else
        add_text(L, text, TOP_SERVICES_HEAD_LINE);
    free(text);
}

/* Writes s as it may reach a terminal: control characters as '?', at most
 * `max` characters (0: no limit); returns the characters written. */
static size_t put_clipped(FILE *out, const char *s, size_t max)
{
    size_t chars = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        bool starts = (*p & 0xC0) != 0x80;
        if (starts && max && chars == max)
            break;
        chars += starts;
        if (*p < 0x20 || *p == 0x7f)
            fputc('?', out);
        else if (*p == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F) {
            fputs("??", out); /* a C1 control character */
            chars++;
            p++;
        } else
            fputc(*p, out);
    }
    return chars;
}

static int compose(const struct lines *L, const struct top_screen *scr, char **ret, size_t *ret_len)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    if (!out)
        return GPO_ENOMEM;
    size_t shown = L->n, rows = scr->rows;
    bool cut = rows && L->n > rows;
    if (cut)
        shown = rows - 1;
    if (scr->ansi)
        fputs("\x1b[H", out);
    for (size_t k = 0; k < shown + cut; k++) {
        char more[96];
        snprintf(more, sizeof(more), "... %zu more lines", L->n - shown);
        const struct line *l = k < shown ? &L->v[k] : &(struct line){more, STYLE_NONE};
        if (scr->ansi)
            fputs(style_on[l->style], out);
        size_t w = put_clipped(out, l->text, scr->cols);
        if (scr->ansi && l->style == STYLE_TITLE)
            fprintf(out, "%*s", (int)(scr->cols > w ? scr->cols - w : 0), "");
        if (scr->ansi)
            fputs(l->style ? "\x1b[0m\x1b[K" : "\x1b[K", out);
        if (!scr->ansi || k + 1 < shown + cut)
            fputc('\n', out);
    }
    if (scr->ansi)
        fputs("\x1b[J", out);
    if (fclose(out) != 0) {
        free(text);
        return GPO_ENOMEM;
    }
    *ret = text;
    *ret_len = len;
    return 0;
}

/* Moves the lines of src to the end of dst, at most `room` of them: when
 * more are there, the last one shown says how many were left out. */
static void take(struct lines *dst, struct lines *src, size_t room)
{
    bool cut = src->n > room;
    size_t n = cut ? (room ? room - 1 : 0) : src->n;
    for (size_t k = 0; k < n; k++) {
        lines_add(dst, src->v[k].style, "%s", src->v[k].text);
    }
    if (cut && room)
        lines_add(dst, STYLE_NONE, "... %zu more lines", src->n - n);
}

int top_render(const json_t *view, const struct top_screen *scr, char **ret, size_t *ret_len)
{
    struct lines head = {0}, gpus = {0}, jobs = {0}, all = {0};
    int64_t now = cli_now_ms();
    int64_t t;
    if (timefmt_parse_rfc3339(cli_json_str(view, "time"), &t) == 0)
        now = t; /* ages as of the snapshot: the same view renders the same text */
    add_summary(&head, view, scr);
    add_gpus(&gpus, view, scr, now);
    add_services(&jobs, view); /* with the jobs: a large cluster's GPUs do not push them off */
    add_jobs(&jobs, view, scr, now);
    size_t gpu_room = SIZE_MAX, job_room = SIZE_MAX;
    if (scr->rows && head.n + gpus.n + jobs.n > scr->rows) {
        /* Too tall: the jobs keep up to half of the rows the summary leaves,
         * so that a large cluster's GPUs do not push them off the screen. */
        size_t left = scr->rows > head.n ? scr->rows - head.n : 0;
        job_room = jobs.n < left / 2 ? jobs.n : left / 2;
        gpu_room = left - job_room;
        if (gpus.n < gpu_room) {
            job_room += gpu_room - gpus.n;
            gpu_room = gpus.n;
        }
    }
    take(&all, &head, SIZE_MAX);
    take(&all, &gpus, gpu_room);
    take(&all, &jobs, job_room);
    bool oom = head.oom || gpus.oom || jobs.oom || all.oom;
    int rc = oom ? GPO_ENOMEM : compose(&all, scr, ret, ret_len);
    lines_release(&head);
    lines_release(&gpus);
    lines_release(&jobs);
    lines_release(&all);
    return rc;
}

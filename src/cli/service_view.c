/*
 * service_view.c - what `gpuorch service` reads and writes without the
 * server (service.h): the apply file, the list's table, show's text, and
 * which replica's log to read.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/jobs.h"
#include "cli/service.h"
#include "cli/table.h"
#include "util/errbuf.h"
#include "util/jsonv.h"
#include "util/yamljson.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define CELL_LEN     64
#define TEXT_LEN     512
#define SHORT_UUID   12 /* "GPU-1a2b3c4d": enough to tell a node's GPUs apart */

/* What GET shows and PUT does not take. */
static const char *const server_set[] = {"status", "generation", "user"};

/* ---- the apply file ------------------------------------------------------ */

static int file_root(const char *text, size_t len, const char *name, struct yamljson *y,
                     json_t **ret, char *err, size_t errlen)
{
    struct yamljson_error ye;
    int rc = yamljson_parse(y, text, len, &ye);
    if (rc == GPO_ENOMEM)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    if (rc == 0) {
        *ret = json_incref(y->root);
        return 0;
    }
    size_t i = 0;
    while (i < len && strchr(" \t\r\n", text[i]))
        i++;
    /* JSON that YAML refuses (tabs, say) is still JSON. */
    json_t *root = i < len && (text[i] == '{' || text[i] == '[')
                       ? json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL)
                       : NULL;
    if (!root)
        return ye.line
                   ? errbuf_set(err, errlen, GPO_EUSAGE, "%s:%ld: %s", name, ye.line, ye.problem)
                   : errbuf_set(err, errlen, GPO_EUSAGE, "%s: %s", name, ye.problem);
    *ret = root;
    return 0;
}

/* The services of the document and the path prefix of their nodes. */
static const json_t *file_services(const json_t *root, const char **ret_prefix)
{
    if (json_is_array(root)) {
        *ret_prefix = "";
        return root;
    }
    const json_t *list = json_object_get(root, "services");
    if (json_is_object(root) && !json_object_get(root, "name") && json_is_array(list)) {
        *ret_prefix = "services";
        return list;
    }
    *ret_prefix = NULL;
    return root;
}

/* Checks each service and copies it without the server-set keys. */
static int file_copy(const json_t *list, const char *prefix, const struct yamljson *y,
                     const char *name, json_t *out, json_t *lines, char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    size_t count = prefix ? json_array_size(list) : 1;
    for (size_t i = 0; i < count; i++) {
        const json_t *o = prefix ? json_array_get(list, i) : list;
        char path[64] = "";
        if (prefix)
            snprintf(path, sizeof(path), "%s[%zu]", prefix, i);
        long line = y->lines ? yamljson_line(y, path) : 0;
        const char *n = cli_json_str(o, "name");
        char at[CLI_ERR_MAX / 2];
        if (line)
            snprintf(at, sizeof(at), "%s:%ld: %s%s", name, line, path, path[0] ? ": " : "");
        else
            snprintf(at, sizeof(at), "%s: %s%s", name, path, path[0] ? ": " : "");
        if (!json_is_object(o) || !n || !n[0])
            return errbuf_set(err, errlen, GPO_EUSAGE,
                              "%sexpected a service: an object with a "
                              "'name'",
                              at);
        for (size_t j = 0; j < json_array_size(out); j++)
            if (strcmp(cli_json_str(json_array_get(out, j), "name"), n) == 0)
                return errbuf_set(err, errlen, GPO_EUSAGE, "%sservice '%s' is given twice", at,
                                  jsonv_quote(n, strlen(n), q));
        json_t *copy = json_copy((json_t *)o);
        if (!copy || json_array_append_new(out, copy) ||
            json_array_append_new(lines, json_integer(line)))
            return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
        for (size_t k = 0; k < ARRAY_LEN(server_set); k++)
            json_object_del(copy, server_set[k]);
    }
    return 0;
}

int service_file_parse(const char *text, size_t len, const char *name, json_t **ret_list,
                       json_t **ret_lines, char *err, size_t errlen)
{
    struct yamljson y = {0};
    json_t *root = NULL;
    int rc = file_root(text, len, name, &y, &root, err, errlen);
    if (rc)
        return rc;
    const char *prefix;
    const json_t *list = file_services(root, &prefix);
    json_t *out = json_array(), *lines = json_array();
    if (!out || !lines)
        rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    else if (prefix && json_array_size(list) == 0)
        rc = errbuf_set(err, errlen, GPO_EUSAGE, "%s: no service in it", name);
    else if (prefix && json_array_size(list) > SERVICE_MAX)
        rc = errbuf_set(err, errlen, GPO_EUSAGE, "%s: %zu services, at most %d", name,
                        json_array_size(list), SERVICE_MAX);
    else
        rc = file_copy(list, prefix, &y, name, out, lines, err, errlen);
    json_decref(root);
    yamljson_release(&y);
    if (rc) {
        json_decref(out);
        json_decref(lines);
        return rc;
    }
    *ret_list = out;
    *ret_lines = lines;
    return 0;
}

/* ---- small formats ----------------------------------------------------------- */

static const json_t *field(const json_t *o, const char *a, const char *b)
{
    return json_object_get(json_object_get(o, a), b);
}

/* v to `digits` significant digits ("%g"), or "-" when it is not a number. */
static const char *num_digits(const json_t *v, int digits, char *buf, size_t len)
{
    if (!json_is_number(v))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.*g", digits, json_number_value(v));
    return buf;
}

/* A number as people read it: 2, 0.8, 3.25; "-" when it is not one. */
static const char *num_text(const json_t *v, char *buf, size_t len)
{
    return num_digits(v, 6, buf, len);
}

/* Seconds to three significant digits ("0.0432"), or "-". */
static const char *secs_text(const json_t *v, char *buf, size_t len)
{
    return num_digits(v, 3, buf, len);
}

static const char *str_or(const json_t *o, const char *key, const char *dflt)
{
    const char *s = cli_json_str(o, key);
    return s && s[0] ? s : dflt;
}

/* list[k] when a string, else "?". */
static const char *elem_text(const json_t *list, size_t k)
{
    const char *s = json_string_value(json_array_get(list, k));
    return s ? s : "?";
}

/* "12 s ago", "5 min ago", "3 h ago", "in 20 s" from ms times. */
static const char *ago_text(int64_t at_ms, int64_t now_ms, char *buf, size_t len)
{
    int64_t s = (now_ms - at_ms) / 1000;
    int64_t a = s >= 0 ? s : -s;
    const char *unit = "s";
    if (a >= 172800)
        a /= 86400, unit = "d";
    else if (a >= 7200)
        a /= 3600, unit = "h";
    else if (a >= 120)
        a /= 60, unit = "min";
    if (s >= 0)
        snprintf(buf, len, "%" PRId64 " %s ago", a, unit);
    else
        snprintf(buf, len, "in %" PRId64 " %s", a, unit);
    return buf;
}

/* The autoscaling metric: "concurrency", "rps", or the replica's metric. */
static const char *metric_text(const json_t *svc)
{
    const json_t *as = json_object_get(svc, "autoscaling");
    const char *m = str_or(as, "metric", "concurrency");
    return strcmp(m, "replica") == 0 ? str_or(as, "replica_metric", "replica") : m;
}

/* ---- list ------------------------------------------------------------------ */

static int list_row(struct table *t, const json_t *s)
{
    char rd[CELL_LEN], mm[CELL_LEN], target[CELL_LEN], r[CELL_LEN / 2], d[CELL_LEN / 2];
    const json_t *st = json_object_get(s, "status");
    snprintf(rd, sizeof(rd), "%s/%s", num_text(json_object_get(st, "ready"), r, sizeof(r)),
             num_text(json_object_get(st, "desired"), d, sizeof(d)));
    snprintf(mm, sizeof(mm), "%s-%s", num_text(json_object_get(s, "min"), r, sizeof(r)),
             num_text(json_object_get(s, "max"), d, sizeof(d)));
    const char *cells[] = {str_or(s, "name", "?"),
                           str_or(s, "team", "-"),
                           str_or(s, "model", "-"),
                           rd,
                           mm,
                           metric_text(s),
                           num_text(field(s, "autoscaling", "target"), target, sizeof(target))};
    return table_add(t, cells);
}

int service_list_render(FILE *out, const json_t *answer)
{
    static const char *const head[] = {"NAME",    "TEAM",   "MODEL", "READY/DESIRED",
                                       "MIN-MAX", "METRIC", "TARGET"};
    struct table *t = table_new(ARRAY_LEN(head), head);
    if (!t)
        return GPO_ENOMEM;
    const json_t *list = json_object_get(answer, "services"), *s;
    size_t k;
    int rc = 0;
    json_array_foreach(list, k, s)
    {
        if ((rc = list_row(t, s)) != 0)
            break;
    }
    if (!rc)
        table_print(t, out);
    table_free(t);
    return rc;
}

/* ---- show ------------------------------------------------------------------ */

/* "GPU-1a2b3c4d,GPU-5e6f7a8b" (each UUID's start), "-" for none. */
static const char *gpus_text(const json_t *gpus, char *buf, size_t len)
{
    size_t at = 0;
    snprintf(buf, len, "-");
    for (size_t k = 0; k < json_array_size(gpus) && at < len; k++) {
        const char *u = json_string_value(json_array_get(gpus, k));
        at += (size_t)snprintf(buf + at, len - at, "%s%.*s", k ? "," : "", SHORT_UUID, u ? u : "?");
    }
    return buf;
}

static int replica_row(struct table *t, const json_t *r)
{
    char rep[CELL_LEN], job[CELL_LEN], gpus[TEXT_LEN], inflight[CELL_LEN];
    const json_t *jid = json_object_get(r, "job");
    const char *cells[] = {num_text(json_object_get(r, "replica"), rep, sizeof(rep)),
                           json_integer_value(jid) > 0 ? num_text(jid, job, sizeof(job)) : "-",
                           str_or(r, "node", "-"),
                           gpus_text(json_object_get(r, "gpus"), gpus, sizeof(gpus)),
                           str_or(r, "state", "?"),
                           num_text(json_object_get(r, "inflight"), inflight, sizeof(inflight)),
                           str_or(r, "reason", "-")};
    return table_add(t, cells);
}

static int replicas_render(FILE *out, const json_t *replicas)
{
    static const char *const head[] = {"REPLICA", "JOB",      "NODE",  "GPUS",
                                       "STATE",   "INFLIGHT", "REASON"};
    if (json_array_size(replicas) == 0) {
        fprintf(out, "\nNo replicas.\n");
        return 0;
    }
    struct table *t = table_new(ARRAY_LEN(head), head);
    if (!t)
        return GPO_ENOMEM;
    const json_t *r;
    size_t k;
    int rc = 0;
    json_array_foreach(replicas, k, r)
    {
        if ((rc = replica_row(t, r)) != 0)
            break;
    }
    if (!rc) {
        fputc('\n', out);
        table_print(t, out);
    }
    table_free(t);
    return rc;
}

static void spec_render(FILE *out, const json_t *s)
{
    char a[CELL_LEN], b[CELL_LEN], c[CELL_LEN], size[32];
    const json_t *res = json_object_get(s, "resources"), *as = json_object_get(s, "autoscaling");
    const json_t *cmd = json_object_get(s, "command"), *st = json_object_get(s, "status");
    fprintf(out, "Service:      %s (generation %s)\n", str_or(s, "name", "?"),
            num_text(json_object_get(s, "generation"), a, sizeof(a)));
    fprintf(out, "Team:         %s, project %s, user %s\n", str_or(s, "team", "-"),
            str_or(s, "project", "-"), str_or(s, "user", "-"));
    fprintf(out, "Model:        %s\n", str_or(s, "model", "-"));
    fprintf(out, "Command:     ");
    if (json_is_array(cmd))
        for (size_t k = 0; k < json_array_size(cmd); k++)
            fprintf(out, " %s", elem_text(cmd, k));
    else
        fprintf(out, " %s", json_is_string(json_object_get(s, "script")) ? "(a script)" : "-");
    fputc('\n', out);
    char gpus[TEXT_LEN];
    json_int_t mem = json_integer_value(json_object_get(res, "mem_mib"));
    fprintf(out, "Resources:    GPUs %s, CPUs %s, memory %s, pool %s, priority %s\n",
            jobs_gpus_text(res, gpus, sizeof(gpus)),
            num_text(json_object_get(res, "cpus"), a, sizeof(a)),
            mem > 0 ? cli_size_text(mem, size, sizeof(size)) : "-", str_or(res, "pool", "-"),
            str_or(s, "priority", "serving"));
    fprintf(out, "Replicas:     %s ready, %s desired (min %s, max %s)\n",
            num_text(json_object_get(st, "ready"), a, sizeof(a)),
            num_text(json_object_get(st, "desired"), b, sizeof(b)),
            num_text(json_object_get(s, "min"), c, sizeof(c)),
            num_text(json_object_get(s, "max"), size, sizeof(size)));
    fprintf(out, "Autoscaling:  %s, target %s per replica", metric_text(s),
            num_text(json_object_get(as, "target"), a, sizeof(a)));
    if (json_is_number(json_object_get(s, "concurrency_limit")))
        fprintf(out, ", at most %s in flight per replica",
                num_text(json_object_get(s, "concurrency_limit"), b, sizeof(b)));
    fputc('\n', out);
    const json_t *obs = json_object_get(st, "observed");
    if (json_is_object(obs))
        fprintf(out, "Observed:     concurrency %s, %s requests/s, %s queued\n",
                num_text(json_object_get(obs, "concurrency"), a, sizeof(a)),
                num_text(json_object_get(obs, "rps"), b, sizeof(b)),
                num_text(json_object_get(obs, "queued"), c, sizeof(c)));
    const json_t *lat = json_is_object(obs) ? json_object_get(obs, "latency") : NULL;
    if (json_is_object(lat))
        fprintf(out, "Latency:      p50 %s s, p99 %s s (%s answers in the last %s s)\n",
                secs_text(json_object_get(lat, "p50_s"), a, sizeof(a)),
                secs_text(json_object_get(lat, "p99_s"), b, sizeof(b)),
                num_text(json_object_get(lat, "requests"), c, sizeof(c)),
                num_text(json_object_get(lat, "window_s"), size, sizeof(size)));
    const json_t *hosts = json_object_get(s, "hosts");
    if (json_array_size(hosts)) {
        fprintf(out, "Hosts:       ");
        for (size_t k = 0; k < json_array_size(hosts); k++)
            fprintf(out, " %s", elem_text(hosts, k));
        fputc('\n', out);
    }
}

/* "Last decision: 3 -> 5: REASON (12 s ago)"; the reason begins with the
 * counts as the autoscaler writes it; a reason that does not gets them. */
static void decision_render(FILE *out, const json_t *d, int64_t now_ms)
{
    if (!json_is_object(d))
        return;
    char counts[CELL_LEN + 8], a[CELL_LEN / 2], b[CELL_LEN / 2];
    snprintf(counts, sizeof(counts), "%s -> %s", num_text(json_object_get(d, "from"), a, sizeof(a)),
             num_text(json_object_get(d, "to"), b, sizeof(b)));
    const char *reason = str_or(d, "reason", "");
    bool has_counts = strncmp(reason, counts, strlen(counts)) == 0;
    fprintf(out, "\nLast decision: %s%s%s%s", has_counts ? "" : counts,
            has_counts || !reason[0] ? "" : ": ", reason,
            json_is_true(json_object_get(d, "panic")) && !strstr(reason, "panic") ? " (panic)"
                                                                                  : "");
    const json_t *at = json_object_get(d, "at_ms");
    if (json_is_integer(at)) {
        char ago[CELL_LEN];
        fprintf(out, " (%s)", ago_text(json_integer_value(at), now_ms, ago, sizeof(ago)));
    }
    fputc('\n', out);
}

static void backoff_render(FILE *out, const json_t *b, int64_t now_ms)
{
    if (!json_is_object(b))
        return;
    char n[CELL_LEN];
    fprintf(out, "Back-off:      %s failures",
            num_text(json_object_get(b, "failures"), n, sizeof(n)));
    const json_t *until = json_object_get(b, "until_ms");
    if (json_is_integer(until)) {
        char when[CELL_LEN];
        fprintf(out, ", next try %s",
                ago_text(json_integer_value(until), now_ms, when, sizeof(when)));
    }
    if (cli_json_str(b, "reason"))
        fprintf(out, ": %s", cli_json_str(b, "reason"));
    fputc('\n', out);
}

int service_show_render(FILE *out, const json_t *svc, int64_t now_ms)
{
    const json_t *st = json_object_get(svc, "status");
    spec_render(out, svc);
    int rc = replicas_render(out, json_object_get(st, "replicas"));
    if (rc)
        return rc;
    decision_render(out, json_object_get(st, "decision"), now_ms);
    backoff_render(out, json_object_get(st, "backoff"), now_ms);
    if (cli_json_str(st, "blocked"))
        fprintf(out, "Blocked:       %s\n", cli_json_str(st, "blocked"));
    const json_t *cost = json_object_get(st, "cost");
    if (json_is_object(cost)) {
        char h[CELL_LEN], c[CELL_LEN];
        snprintf(h, sizeof(h), "%.2f", json_number_value(json_object_get(cost, "gpu_hours")));
        snprintf(c, sizeof(c), "%.2f", json_number_value(json_object_get(cost, "cost")));
        fprintf(out, "Cost:          %s GPU-hours, %s\n", h, c);
    }
    return 0;
}

/* ---- which replica's log ------------------------------------------------------ */

static json_int_t replica_number(const json_t *r)
{
    return json_integer_value(json_object_get(r, "replica"));
}

static bool replica_ready(const json_t *r)
{
    return strcmp(str_or(r, "state", ""), "ready") == 0;
}

int service_replica_job(const json_t *svc, int64_t replica, int64_t *ret_job, char *err,
                        size_t errlen)
{
    const json_t *list = field(svc, "status", "replicas"), *r, *pick = NULL;
    const char *name = str_or(svc, "name", "?");
    size_t k;
    json_array_foreach(list, k, r)
    {
        if (replica) {
            if (replica_number(r) == replica)
                pick = r;
        } else if (!pick || (replica_ready(r) != replica_ready(pick)
                                 ? replica_ready(r)
                                 : replica_number(r) < replica_number(pick))) {
            pick = r;
        }
    }
    if (!pick && replica)
        return errbuf_set(err, errlen, GPO_ENOENT, "service '%s' has no replica %" PRId64, name,
                          replica);
    if (!pick)
        return errbuf_set(err, errlen, GPO_ENOENT, "service '%s' has no replicas", name);
    json_int_t job = json_integer_value(json_object_get(pick, "job"));
    if (job <= 0)
        return errbuf_set(err, errlen, GPO_ENOENT,
                          "replica %" JSON_INTEGER_FORMAT " of service '%s' has no job yet",
                          replica_number(pick), name);
    *ret_job = job;
    return 0;
}

/*
 * topsvc.c - the services of `gpuorch top` (topsvc.h).
 */
#define _GNU_SOURCE /* open_memstream */
#include "cli/topsvc.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/table.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

json_t *top_json_num(const json_t *v)
{
    return json_is_number(v) ? json_real(json_number_value(v)) : json_null();
}

json_t *top_json_int(const json_t *v)
{
    return json_is_integer(v) ? json_integer(json_integer_value(v)) : json_null();
}

json_t *top_json_str(const char *s)
{
    return s ? json_string(s) : json_null();
}

/* The sum of the replicas' in-flight requests; null without replicas. */
static json_t *inflight_of(const json_t *status)
{
    const json_t *reps = json_object_get(status, "replicas");
    if (!json_is_array(reps))
        return json_null();
    json_int_t sum = 0;
    for (size_t k = 0; k < json_array_size(reps); k++) {
        const json_t *n = json_object_get(json_array_get(reps, k), "inflight");
        sum += json_is_integer(n) ? json_integer_value(n) : 0;
    }
    return json_integer(sum);
}

static json_t *service_entry(const json_t *svc)
{
    const json_t *st = json_object_get(svc, "status");
    const json_t *obs = json_object_get(st, "observed"), *dec = json_object_get(st, "decision");
    const json_t *panic = json_object_get(dec, "panic");
    return json_pack(
        "{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b, s:o, s:o, s:o}", "name",
        top_json_str(cli_json_str(svc, "name")), "model", top_json_str(cli_json_str(svc, "model")),
        "team", top_json_str(cli_json_str(svc, "team")), "ready",
        top_json_int(json_object_get(st, "ready")), "desired",
        top_json_int(json_object_get(st, "desired")), "min",
        top_json_int(json_object_get(svc, "min")), "max", top_json_int(json_object_get(svc, "max")),
        "inflight", inflight_of(st), "queued", top_json_int(json_object_get(obs, "queued")),
        "concurrency", top_json_num(json_object_get(obs, "concurrency")), "rps",
        top_json_num(json_object_get(obs, "rps")), "decision",
        top_json_str(cli_json_str(dec, "reason")), "panic", json_is_true(panic), "backoff",
        top_json_str(cli_json_str(json_object_get(st, "backoff"), "reason")), "blocked",
        top_json_str(cli_json_str(st, "blocked")), "cost",
        top_json_num(json_object_get(json_object_get(st, "cost"), "cost")));
}

static int by_name(const void *a, const void *b)
{
    const char *x = cli_json_str(*(json_t *const *)a, "name");
    const char *y = cli_json_str(*(json_t *const *)b, "name");
    return strcmp(x ? x : "", y ? y : "");
}

json_t *top_services_view(const json_t *services)
{
    size_t n = json_is_array(services) ? json_array_size(services) : 0;
    json_t *list = json_array();
    // NOLINTNEXTLINE(bugprone-sizeof-expression): *p is a pointer (an array of them)
    json_t **v = n ? calloc(n, sizeof(*v)) : NULL;
    int e = !list || (n && !v);
    for (size_t k = 0; !e && k < n; k++)
        e |= !(v[k] = service_entry(json_array_get(services, k)));
    if (!e && n)
        // NOLINTNEXTLINE(bugprone-sizeof-expression): *p is a pointer (an array of them)
        qsort((void *)v, n, sizeof(*v), by_name);
    for (size_t k = 0; !e && k < n; k++) {
        e |= json_array_append_new(list, v[k]);
        v[k] = NULL;
    }
    for (size_t k = 0; v && k < n; k++)
        json_decref(v[k]);
    free((void *)v);
    if (e) {
        json_decref(list);
        return NULL;
    }
    return list;
}

/* "3", or "-" for null. */
static const char *int_text(const json_t *v, char *buf, size_t len)
{
    if (!json_is_integer(v))
        return "-";
    snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    return buf;
}

static int service_row(struct table *t, const json_t *s)
{
    char ready[24], desired[24], rd[64], inflight[24], fl[64], rps[32] = "-", dec[640];
    const json_t *queued = json_object_get(s, "queued"), *r = json_object_get(s, "rps");
    snprintf(rd, sizeof(rd), "%s/%s", int_text(json_object_get(s, "ready"), ready, sizeof(ready)),
             int_text(json_object_get(s, "desired"), desired, sizeof(desired)));
    const char *in = int_text(json_object_get(s, "inflight"), inflight, sizeof(inflight));
    if (json_integer_value(queued) > 0)
        snprintf(fl, sizeof(fl), "%s +%" JSON_INTEGER_FORMAT " queued", in,
                 json_integer_value(queued));
    else
        snprintf(fl, sizeof(fl), "%s", in);
    if (json_is_number(r))
        snprintf(rps, sizeof(rps), "%.1f", json_number_value(r));
    /* A crash loop says more than the last decision: it is why nothing scales. */
    const char *backoff = cli_json_str(s, "backoff"), *reason = cli_json_str(s, "decision");
    const char *blocked = cli_json_str(s, "blocked");
    bool panic = json_is_true(json_object_get(s, "panic"));
    if (backoff)
        snprintf(dec, sizeof(dec), "backoff: %s", backoff);
    else if (blocked)
        snprintf(dec, sizeof(dec), "blocked: %s", blocked);
    else if (reason)
        snprintf(dec, sizeof(dec), "%s%s", reason,
                 panic && !strstr(reason, "panic") ? " (panic)" : "");
    else
        snprintf(dec, sizeof(dec), "-");
    const char *cells[] = {cli_json_str(s, "name"), rd, fl, rps, dec};
    return table_add(t, cells);
}

int top_services_text(const json_t *view_services, char **ret)
{
    static const char *const head[] = {"NAME", "READY/DESIRED", "INFLIGHT", "RPS", "DECISION"};
    size_t n = json_array_size(view_services);
    if (n == 0) {
        *ret = strdup("");
        return *ret ? 0 : GPO_ENOMEM;
    }
    json_int_t ready = 0, desired = 0;
    struct table *t = table_new(ARRAY_LEN(head), head);
    int rc = t ? 0 : GPO_ENOMEM;
    for (size_t k = 0; rc == 0 && k < n; k++) {
        const json_t *s = json_array_get(view_services, k);
        ready += json_integer_value(json_object_get(s, "ready"));
        desired += json_integer_value(json_object_get(s, "desired"));
        rc = service_row(t, s);
    }
    char *text = NULL;
    size_t len = 0;
    FILE *out = rc == 0 ? open_memstream(&text, &len) : NULL;
    if (rc == 0 && !out)
        rc = GPO_ENOMEM;
    if (out) {
        fprintf(out,
                "\nservices: %zu, replicas %" JSON_INTEGER_FORMAT " ready of %" JSON_INTEGER_FORMAT
                " desired\n",
                n, ready, desired);
        table_print(t, out);
        if (fclose(out) != 0)
            rc = GPO_ENOMEM;
    }
    table_free(t);
    if (rc == 0)
        *ret = text;
    else
        free(text);
    return rc;
}

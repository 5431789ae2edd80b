/*
 * policy.c - the simulator's policy presets and policy files (policy.h).
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "core/model.h"
#include "sim/doc.h"
#include "sim/policy.h"
#include "base/banned.h"

/* ---- presets: a table ---- */

struct policy_row {
    const char *name;
    enum sched_order order;
    enum sched_within within;
    bool backfill, preemption;
    enum sched_packing packing;
    enum sim_oracle oracle;
};

static const struct policy_row policy_rows[] = {
    {"default", SCHED_ORDER_FAIRSHARE, SCHED_WITHIN_LAS, true, true, SCHED_PACK_BINPACK,
     SIM_ORACLE_NONE},
    {"fifo", SCHED_ORDER_FIFO, SCHED_WITHIN_SUBMIT, false, false, SCHED_PACK_BINPACK,
     SIM_ORACLE_NONE},
    {"fifo-backfill", SCHED_ORDER_FIFO, SCHED_WITHIN_SUBMIT, true, false, SCHED_PACK_BINPACK,
     SIM_ORACLE_NONE},
    {"priority", SCHED_ORDER_PRIORITY, SCHED_WITHIN_SUBMIT, true, true, SCHED_PACK_BINPACK,
     SIM_ORACLE_NONE},
    {"fairshare", SCHED_ORDER_FAIRSHARE, SCHED_WITHIN_SUBMIT, true, true, SCHED_PACK_BINPACK,
     SIM_ORACLE_NONE},
    {"las", SCHED_ORDER_LAS, SCHED_WITHIN_SUBMIT, true, true, SCHED_PACK_BINPACK, SIM_ORACLE_NONE},
    {"spread", SCHED_ORDER_FAIRSHARE, SCHED_WITHIN_LAS, true, true, SCHED_PACK_SPREAD,
     SIM_ORACLE_NONE},
    {"sjf", SCHED_ORDER_FIFO, SCHED_WITHIN_SUBMIT, true, false, SCHED_PACK_BINPACK, SIM_ORACLE_SJF},
    {"srtf", SCHED_ORDER_PRIORITY, SCHED_WITHIN_SUBMIT, true, true, SCHED_PACK_BINPACK,
     SIM_ORACLE_SRTF},
};

#define NPOLICIES (sizeof(policy_rows) / sizeof(policy_rows[0]))

const char *sim_policy_name(size_t k)
{
    return k < NPOLICIES ? policy_rows[k].name : NULL;
}

void sim_policy_names(char *buf, size_t n)
{
    for (size_t k = 0, at = 0; n && k < NPOLICIES && at < n; k++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s", k ? ", " : "", policy_rows[k].name);
}

int sim_policy_find(const char *name, struct sim_policy *ret)
{
    for (size_t k = 0; name && k < NPOLICIES; k++) {
        const struct policy_row *row = &policy_rows[k];
        if (strcmp(row->name, name) != 0)
            continue;
        struct sim_policy p = {.oracle = row->oracle};
        snprintf(p.name, sizeof(p.name), "%s", row->name);
        sched_policy_default(&p.core);
        p.core.order = row->order;
        p.core.within = row->within;
        p.core.backfill = row->backfill;
        p.core.preemption = row->preemption;
        p.core.packing = row->packing;
        *ret = p;
        return 0;
    }
    return GPO_ENOENT;
}

bool sim_policy_is_file(const char *arg)
{
    return arg && (strchr(arg, '/') || strchr(arg, '.'));
}

/* ---- policy files ---- */

#define MAX_SECONDS 315360000 /* ten years */

static const char *const file_keys[] = {"name",
                                        "base",
                                        "order",
                                        "within_team",
                                        "packing",
                                        "backfill",
                                        "preemption",
                                        "migrate",
                                        "fairshare_half_life_s",
                                        "las_thresholds_gpu_s",
                                        "las_evict_larger",
                                        "preempt_grace_s",
                                        "default_time_limit_s",
                                        NULL};

static const struct sim_doc_num R_HALF_LIFE = {true, 1, false, MAX_SECONDS, 1, GPO_EINVAL};
static const struct sim_doc_num R_THRESHOLD = {true, 1, false, 1e12, 1, GPO_EINVAL};
static const struct sim_doc_num R_GRACE = {true, 0, false, 86400, 1, GPO_EINVAL};
static const struct sim_doc_num R_LIMIT = {true, 1, false, MAX_SECONDS, 1, GPO_EINVAL};

/* 1 to SIM_POLICY_NAME_MAX of [A-Za-z0-9._+-], starting with a letter or digit
 * (no hidden file or ".." in --jobs-out's names). */
static bool name_ok(const char *s, size_t len)
{
    if (len < 1 || len > SIM_POLICY_NAME_MAX || !isalnum((unsigned char)s[0]))
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '+' || c == '-'))
            return false;
    }
    return true;
}

/* "name", or the file's name less its extension. */
static int decode_name(struct sim_doc *d, const json_t *root, const char *path,
                       struct sim_policy *p)
{
    const char *name;
    int rc = sim_doc_get_str(d, root, "name", false, true, &name);
    if (rc != 0)
        return rc;
    if (name) {
        size_t mark = sim_doc_key(d, "name");
        if (!name_ok(name, strlen(name)))
            return sim_doc_fail(d, GPO_EINVAL,
                                "expected 1 to %d letters, digits or '._+-', the first a "
                                "letter or digit, got '%.64s'",
                                SIM_POLICY_NAME_MAX, name);
        sim_doc_pop(d, mark);
        snprintf(p->name, sizeof(p->name), "%s", name);
        return 0;
    }
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    const char *dot = strrchr(base, '.');
    size_t len = dot && dot > base ? (size_t)(dot - base) : strlen(base);
    if (!name_ok(base, len))
        return sim_doc_fail_at(d, GPO_EINVAL, 0,
                               "the file's name does not make a policy name (1 to %d letters, "
                               "digits or '._+-' before the extension): give it a 'name'",
                               SIM_POLICY_NAME_MAX);
    snprintf(p->name, sizeof(p->name), "%.*s", (int)len, base);
    return 0;
}

/* "base": the preset the file starts from. */
static int decode_base(struct sim_doc *d, const json_t *root, struct sim_policy *p)
{
    const char *base;
    int rc = sim_doc_get_str(d, root, "base", false, true, &base);
    if (rc != 0)
        return rc;
    size_t mark = sim_doc_key(d, "base");
    if (sim_policy_find(base ? base : "default", p) != 0)
        return sim_doc_fail(d, GPO_EINVAL, "expected a preset ('gpuorch sim --help'), got '%.64s'",
                            base);
    if (p->oracle != SIM_ORACLE_NONE)
        return sim_doc_fail(d, GPO_EINVAL,
                            "'%s' is an oracle that knows durations, not a policy to start from",
                            base);
    sim_doc_pop(d, mark);
    return 0;
}

/* Field `key` names a choice the core's parser did not take. */
static int bad_choice(struct sim_doc *d, const char *key, const char *names, const char *got)
{
    sim_doc_key(d, key);
    return sim_doc_fail(d, GPO_EINVAL, "expected one of %s, got '%.64s'", names, got);
}

static int decode_thresholds(struct sim_doc *d, const json_t *root, struct sched_policy *c)
{
    json_t *list;
    int rc = sim_doc_get_list(d, root, "las_thresholds_gpu_s", false, SCHED_LAS_MAX_QUEUES - 1,
                              GPO_EINVAL, &list);
    if (rc != 0 || !list)
        return rc;
    c->nlas_thresholds = 0;
    for (size_t i = 0; i < json_array_size(list); i++) {
        size_t mark = sim_doc_key(d, "las_thresholds_gpu_s");
        sim_doc_index(d, i);
        int64_t s;
        rc = sim_doc_num(d, json_array_get(list, i), &R_THRESHOLD, &s);
        if (rc != 0)
            return rc;
        if (i > 0 && s * 1000 <= c->las_thresholds_gpu_ms[i - 1])
            return sim_doc_fail(d, GPO_EINVAL, "expected more than the threshold before (%lld)",
                                (long long)(c->las_thresholds_gpu_ms[i - 1] / 1000));
        c->las_thresholds_gpu_ms[c->nlas_thresholds++] = s * 1000;
        sim_doc_pop(d, mark);
    }
    return 0;
}

/* Seconds field `key` into *ms, by rule r; left as it is when absent. */
static int decode_seconds(struct sim_doc *d, const json_t *root, const char *key,
                          const struct sim_doc_num *r, int64_t *ms)
{
    int64_t s = *ms / 1000;
    int rc = sim_doc_get_num(d, root, key, r, s, &s);
    if (rc == 0 && json_object_get(root, key))
        *ms = s * 1000;
    return rc;
}

static int decode_root(struct sim_doc *d, const json_t *root, const char *path,
                       struct sim_policy *p)
{
    const char *order, *within, *packing;
    int rc = sim_doc_check_object(d, root, file_keys);
    rc = rc ? rc : decode_base(d, root, p);
    rc = rc ? rc : decode_name(d, root, path, p);
    if (rc != 0)
        return rc;
    struct sched_policy *c = &p->core;
    rc = sim_doc_get_str(d, root, "order", false, true, &order);
    rc = rc ? rc : sim_doc_get_str(d, root, "within_team", false, true, &within);
    rc = rc ? rc : sim_doc_get_str(d, root, "packing", false, true, &packing);
    /* The core's parsers leave the field as it is on failure. */
    if (!rc && order && sched_order_parse(order, &c->order))
        rc = bad_choice(d, "order", "fifo, priority, fairshare, las", order);
    if (!rc && within && sched_within_parse(within, &c->within))
        rc = bad_choice(d, "within_team", "submit, las", within);
    if (!rc && packing && sched_packing_parse(packing, &c->packing))
        rc = bad_choice(d, "packing", "binpack, spread", packing);
    rc = rc ? rc : sim_doc_get_bool(d, root, "backfill", c->backfill, &c->backfill);
    rc = rc ? rc : sim_doc_get_bool(d, root, "preemption", c->preemption, &c->preemption);
    rc = rc ? rc : sim_doc_get_bool(d, root, "migrate", c->migrate, &c->migrate);
    rc = rc ? rc
            : decode_seconds(d, root, "fairshare_half_life_s", &R_HALF_LIFE,
                             &c->fairshare_half_life_ms);
    rc = rc ? rc : decode_thresholds(d, root, c);
    rc = rc ? rc
            : sim_doc_get_bool(d, root, "las_evict_larger", c->las_evict_larger,
                               &c->las_evict_larger);
    rc = rc ? rc : decode_seconds(d, root, "preempt_grace_s", &R_GRACE, &c->preempt_grace_ms);
    rc = rc ? rc
            : decode_seconds(d, root, "default_time_limit_s", &R_LIMIT, &c->default_time_limit_ms);
    if (rc != 0)
        return rc;
    const char *field = NULL;
    if (sched_policy_check(c, &field) != 0) /* the ranges above should have caught it */
        return sim_doc_fail_at(d, GPO_EINVAL, 0, "the policy is not valid: %s",
                               field ? field : "?");
    return 0;
}

int sim_policy_parse(struct sim_policy *ret, const char *text, size_t len, const char *path,
                     char *err, size_t errlen)
{
    struct sim_doc d;
    struct sim_policy p;
    json_t *root = NULL;
    path = path ? path : "policy";
    sim_doc_init(&d, path, err, errlen);
    int rc = sim_doc_parse(&d, text, len, &root);
    rc = rc ? rc : decode_root(&d, root, path, &p);
    sim_doc_release(&d);
    if (rc == 0)
        *ret = p;
    return rc;
}

int sim_policy_load(struct sim_policy *ret, const char *path, char *err, size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    int rc = sim_doc_read_file(path, &text, &len, err, errlen);
    if (rc == 0)
        rc = sim_policy_parse(ret, text, len, path, err, errlen);
    free(text);
    return rc;
}

int sim_policy_resolve(const char *arg, struct sim_policy *ret, char *err, size_t errlen)
{
    if (sim_policy_find(arg, ret) == 0)
        return 0;
    if (sim_policy_is_file(arg))
        return sim_policy_load(ret, arg, err, errlen);
    char names[256];
    sim_policy_names(names, sizeof(names));
    if (err && errlen) {
        snprintf(err, errlen,
                 "expected a preset (%s) or a policy file's path (with a '/' or a '.'), "
                 "got '%.64s'",
                 names, arg ? arg : "");
        sim_doc_one_line(err);
    }
    return GPO_EINVAL;
}

int sim_policy_write(FILE *f, const struct sim_policy *p)
{
    if (!f || !p || p->oracle != SIM_ORACLE_NONE)
        return GPO_EINVAL;
    const struct sched_policy *c = &p->core;
    fprintf(f,
            "# gpuorch scheduling policy (docs/simulator.md, \"Policy files\")\n"
            "name: %s\norder: %s\nwithin_team: %s\npacking: %s\n"
            "backfill: %s\npreemption: %s\nmigrate: %s\nfairshare_half_life_s: %lld\n"
            "las_thresholds_gpu_s: [",
            p->name, sched_order_name(c->order), sched_within_name(c->within),
            sched_packing_name(c->packing), c->backfill ? "true" : "false",
            c->preemption ? "true" : "false", c->migrate ? "true" : "false",
            (long long)(c->fairshare_half_life_ms / 1000));
    for (uint32_t i = 0; i < c->nlas_thresholds; i++)
        fprintf(f, "%s%lld", i ? ", " : "", (long long)(c->las_thresholds_gpu_ms[i] / 1000));
    fprintf(f, "]\nlas_evict_larger: %s\npreempt_grace_s: %lld\ndefault_time_limit_s: %lld\n",
            c->las_evict_larger ? "true" : "false", (long long)(c->preempt_grace_ms / 1000),
            (long long)(c->default_time_limit_ms / 1000));
    return ferror(f) ? GPO_EINVAL : 0;
}

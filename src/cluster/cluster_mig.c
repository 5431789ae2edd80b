/*
 * cluster_mig.c - "mig" of a pool or node (cluster.h: struct cluster_mig):
 * its JSON both ways, its rules, the layout it means on one GPU type, and
 * its check against the MIG types of a pool's nodes.
 *
 * Decisions the header leaves open:
 *  - A duration is whole seconds (a JSON integer) or a duration string
 *    (util/timefmt.h: "30s", "5m", "2h", "00:05:00"), as the idle policy's;
 *    at most CLUSTER_MIG_DURATION_MAX_S. to_json writes the largest unit
 *    that says it exactly ("5m", "90s"), which decodes to the same.
 *  - Profiles of a count layout are kept in the catalogue's spelling
 *    ("MIG 1g.10gb" is "1g.10gb"), so that one profile cannot be listed
 *    twice under two spellings. A named layout is kept as given (core/mig.h
 *    reads it case-insensitively).
 *  - {"dynamic": false} is neither off nor a layout: refused, naming both
 *    ways to say what is meant.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "cluster/cluster.h"
#include "cluster/cluster_int.h"
#include "core/mig.h"
#include "util/errbuf.h"
#include "util/jsonv.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define KNOWN_TYPES_MAX 200

#define DURATION_FORMS "seconds, or e.g. \"30s\", \"5m\", \"2h\", \"00:05:00\""

static const char *const static_keys[] = {"layout"};
static const char *const dynamic_keys[] = {"dynamic",      "settle",    "hold",
                                           "min_interval", "keep_free", "max_repartitions"};

const char *cluster_mig_profile_name(const char *name)
{
    for (unsigned t = 0; name && t < MIG_NTYPES; t++) {
        const struct mig_type *mt = mig_type_at(t);
        int k = mig_profile_lookup(mt, name, NULL, 0);
        if (k >= 0)
            return mt->profiles[k].name;
    }
    return NULL;
}

const char *cluster_mig_profiles_known(char *buf, size_t size)
{
    const char *seen[MIG_NTYPES * MIG_MAX_PROFILES];
    size_t nseen = 0, at = 0;
    buf[0] = '\0';
    for (unsigned t = 0; t < MIG_NTYPES; t++) {
        const struct mig_type *mt = mig_type_at(t);
        for (unsigned k = 0; k < mt->nprofiles; k++) {
            const char *p = mt->profiles[k].name;
            bool dup = false;
            for (size_t i = 0; i < nseen && !dup; i++)
                dup = strcmp(seen[i], p) == 0;
            if (dup)
                continue;
            seen[nseen++] = p;
            int n = snprintf(buf + at, size - at, "%s%s", at ? ", " : "", p);
            if (n < 0 || (size_t)n >= size - at)
                return buf;
            at += (size_t)n;
        }
    }
    return buf;
}

void cluster_mig_release(struct cluster_mig *m)
{
    if (!m)
        return;
    free(m->layout);
    for (size_t i = 0; m->counts && i < m->ncounts; i++)
        free(m->counts[i].profile);
    free(m->counts);
    memset(m, 0, sizeof(*m));
}

static char *copy_text(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    return p ? memcpy(p, s, n) : NULL;
}

int cluster_mig_copy(const struct cluster_mig *m, struct cluster_mig *ret)
{
    struct cluster_mig c = *m;
    c.layout = NULL;
    c.counts = NULL;
    c.ncounts = 0;
    bool ok = !m->layout || (c.layout = copy_text(m->layout)) != NULL;
    if (ok && m->ncounts)
        ok = (c.counts = calloc(m->ncounts, sizeof(*c.counts))) != NULL;
    for (size_t i = 0; ok && i < m->ncounts; i++, c.ncounts++) {
        c.counts[i].count = m->counts[i].count;
        ok = (c.counts[i].profile = copy_text(m->counts[i].profile)) != NULL;
    }
    if (!ok) {
        cluster_mig_release(&c);
        return GPO_ENOMEM;
    }
    *ret = c;
    return 0;
}

/* ---- decoding ------------------------------------------------------------ */

static int decode_duration(const char *field, const char *key, const json_t *v, int64_t *ret_ms,
                           char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    int64_t s = -1;
    if (json_is_integer(v))
        s = json_integer_value(v);
    else if (json_is_string(v) &&
             (timefmt_parse_duration(json_string_value(v), &s) != 0 || s == TIMEFMT_UNLIMITED))
        return errbuf_set(err, errlen, GPO_EINVAL, "field '%s.%s': '%s' is not a duration (%s)",
                          field, key, jsonv_quote(json_string_value(v), json_string_length(v), q),
                          DURATION_FORMS);
    else if (!json_is_string(v))
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field '%s.%s': expected a duration (%s), got %s", field, key,
                          DURATION_FORMS, jsonv_type_name(v));
    if (s < 0 || s > CLUSTER_MIG_DURATION_MAX_S)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field '%s.%s': %" PRId64 " s is out of range 0 s..30 days", field, key,
                          s);
    *ret_ms = s * 1000;
    return 0;
}

static int decode_count(const char *field, const char *key, const json_t *v, uint32_t max,
                        uint32_t *ret, char *err, size_t errlen)
{
    if (!json_is_integer(v))
        return errbuf_set(err, errlen, GPO_EINVAL, "field '%s.%s': expected an integer, got %s",
                          field, key, jsonv_type_name(v));
    json_int_t n = json_integer_value(v);
    if (n < 0 || n > (json_int_t)max)
        return errbuf_set(err, errlen, GPO_EINVAL, "field '%s.%s': %lld is out of range 0..%u",
                          field, key, (long long)n, max);
    *ret = (uint32_t)n;
    return 0;
}

/* {"1g.10gb": 2, ...} into m->counts (freed by the caller on failure). */
static int decode_counts(const char *field, const json_t *v, struct cluster_mig *m, char *err,
                         size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4], known[400];
    size_t n = json_object_size(v);
    if (n == 0 || n > CLUSTER_MIG_COUNTS_MAX)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field '%s.layout': %zu profiles, expected 1..%d (a count per profile, "
                          "as {\"1g.10gb\": 2, \"3g.40gb\": 1})",
                          field, n, CLUSTER_MIG_COUNTS_MAX);
    if (!(m->counts = calloc(n, sizeof(*m->counts))))
        return GPO_ENOMEM;
    const char *key;
    const json_t *x;
    json_object_foreach((json_t *)v, key, x)
    {
        char sub[64];
        const char *name = cluster_mig_profile_name(key);
        if (!name)
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field '%s.layout': no GPU type has MIG profile '%s' (known: %s)",
                              field, jsonv_quote(key, strlen(key), q),
                              cluster_mig_profiles_known(known, sizeof(known)));
        for (size_t i = 0; i < m->ncounts; i++)
            if (strcmp(m->counts[i].profile, name) == 0)
                return errbuf_set(err, errlen, GPO_EINVAL,
                                  "field '%s.layout': profile %s is listed twice ('%s')", field,
                                  name, jsonv_quote(key, strlen(key), q));
        snprintf(sub, sizeof(sub), "layout.%s", name);
        struct cluster_mig_count *c = &m->counts[m->ncounts];
        int rc = decode_count(field, sub, x, MIG_MAX_INSTANCES, &c->count, err, errlen);
        if (rc)
            return rc;
        if (!(c->profile = copy_text(name)))
            return GPO_ENOMEM;
        m->ncounts++;
    }
    return 0;
}

static int decode_layout(const char *field, const json_t *v, struct cluster_mig *m, char *err,
                         size_t errlen)
{
    m->mode = CLUSTER_MIG_STATIC;
    if (json_is_object(v))
        return decode_counts(field, v, m, err, errlen);
    size_t len = json_is_string(v) ? json_string_length(v) : 0;
    if (!json_is_string(v) || len == 0 || len > CLUSTER_NAME_MAX ||
        strlen(json_string_value(v)) != len)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field '%s.layout': expected a named layout (all-1g.10gb, "
                          "all-balanced, ...) or a count per profile ({\"1g.10gb\": 2}), got %s",
                          field,
                          json_is_string(v) ? "an empty or too long string" : jsonv_type_name(v));
    return (m->layout = copy_text(json_string_value(v))) ? 0 : GPO_ENOMEM;
}

static bool among(const char *key, const char *const *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(key, keys[i]) == 0)
            return true;
    return false;
}

static int decode_dynamic_key(const char *field, const char *key, const json_t *v,
                              struct cluster_mig *m, char *err, size_t errlen)
{
    if (strcmp(key, "dynamic") == 0) {
        if (!json_is_boolean(v))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field '%s.dynamic': expected a boolean, got %s", field,
                              jsonv_type_name(v));
        if (!json_is_true(v))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field '%s.dynamic': false: give '%s: off' for no layout, or "
                              "'%s.layout' for a static one",
                              field, field, field);
        return 0;
    }
    if (strcmp(key, "settle") == 0)
        return decode_duration(field, key, v, &m->settle_ms, err, errlen);
    if (strcmp(key, "hold") == 0)
        return decode_duration(field, key, v, &m->hold_ms, err, errlen);
    if (strcmp(key, "min_interval") == 0)
        return decode_duration(field, key, v, &m->min_interval_ms, err, errlen);
    if (strcmp(key, "keep_free") == 0)
        return decode_count(field, key, v, CLUSTER_MIG_KEEP_FREE_MAX, &m->keep_free, err, errlen);
    return decode_count(field, key, v, CLUSTER_MIG_REPARTITIONS_MAX, &m->max_repartitions, err,
                        errlen);
}

/* The object form: keys of one mode only. */
static int decode_object(const char *field, const json_t *v, struct cluster_mig *m, char *err,
                         size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    const char *key, *first_static = NULL, *first_dynamic = NULL;
    const json_t *x;
    json_object_foreach((json_t *)v, key, x)
    {
        if (among(key, static_keys, ARRAY_LEN(static_keys)))
            first_static = first_static ? first_static : key;
        else if (among(key, dynamic_keys, ARRAY_LEN(dynamic_keys)))
            first_dynamic = first_dynamic ? first_dynamic : key;
        else
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "unknown field '%s.%s' (expected layout for a static layout; "
                              "dynamic, settle, hold, min_interval, keep_free, max_repartitions "
                              "for a dynamic one)",
                              field, jsonv_quote(key, strlen(key), q));
    }
    if (first_static && first_dynamic)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "fields '%s.layout' and '%s.%s': a static layout and the dynamic "
                          "planner's settings exclude each other: give one",
                          field, field, first_dynamic);
    if (first_static)
        return decode_layout(field, json_object_get(v, "layout"), m, err, errlen);
    if (!first_dynamic || !json_object_get(v, "dynamic"))
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field '%s': expected 'layout' (static) or 'dynamic: true' (the "
                          "planner's settings beside it)",
                          field);
    struct mig_plan_spec d;
    mig_plan_spec_default(&d);
    *m = (struct cluster_mig){.mode = CLUSTER_MIG_DYNAMIC,
                              .settle_ms = d.settle_ms,
                              .hold_ms = d.hold_ms,
                              .min_interval_ms = d.min_interval_ms,
                              .keep_free = d.keep_free,
                              .max_repartitions = d.max_repartitions};
    json_object_foreach((json_t *)v, key, x)
    {
        int rc = decode_dynamic_key(field, key, x, m, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

int cluster_mig_decode(const json_t *v, const char *field, struct cluster_mig *ret, char *err,
                       size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    struct cluster_mig m = {0};
    int rc = 0;
    if (!v || json_is_null(v) || json_is_false(v) ||
        (json_is_string(v) && strcmp(json_string_value(v), "off") == 0))
        rc = 0;
    else if (json_is_object(v))
        rc = decode_object(field, v, &m, err, errlen);
    else if (json_is_string(v))
        rc = errbuf_set(err, errlen, GPO_EINVAL,
                        "field '%s': '%s' is not 'off' (a layout is {layout: NAME}, the planner "
                        "{dynamic: true})",
                        field, jsonv_quote(json_string_value(v), json_string_length(v), q));
    else
        rc = errbuf_set(err, errlen, GPO_EINVAL,
                        "field '%s': expected 'off' or an object ({layout: ...} or {dynamic: "
                        "true, ...}), got %s",
                        field, jsonv_type_name(v));
    rc = rc ? rc : cluster_mig_check_types(&m, field, NULL, 0, "the catalogue", err, errlen);
    if (rc == GPO_ENOMEM)
        rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    if (rc) {
        cluster_mig_release(&m);
        return rc;
    }
    *ret = m;
    return 0;
}

/* ---- layouts on GPU types ---------------------------------------------------- */

int cluster_mig_layout(const struct cluster_mig *m, const struct mig_type *t,
                       struct mig_instance *ret, size_t *ret_n, bool *ret_enabled, char *err,
                       size_t errlen)
{
    if (!m || !t || m->mode != CLUSTER_MIG_STATIC)
        return errbuf_set(err, errlen, GPO_EINVAL, "no static MIG layout");
    if (m->layout)
        return mig_layout_named(t, m->layout, ret, ret_n, ret_enabled, err, errlen);
    uint32_t counts[MIG_MAX_PROFILES] = {0};
    for (size_t i = 0; i < m->ncounts; i++) {
        int k = mig_profile_lookup(t, m->counts[i].profile, err, errlen);
        if (k < 0)
            return k;
        counts[k] = m->counts[i].count;
    }
    int rc = mig_layout_from_counts(t, counts, t->nprofiles, ret, ret_n, err, errlen);
    if (rc == 0)
        *ret_enabled = true;
    return rc;
}

int cluster_mig_check_types(const struct cluster_mig *m, const char *field,
                            const struct mig_type *const *types, size_t ntypes, const char *whose,
                            char *err, size_t errlen)
{
    const struct mig_type *all[MIG_NTYPES];
    if (!m || m->mode != CLUSTER_MIG_STATIC)
        return 0;
    if (!types || !ntypes) {
        for (unsigned t = 0; t < MIG_NTYPES; t++)
            all[t] = mig_type_at(t);
        types = all, ntypes = MIG_NTYPES;
    }
    char why[MIG_NTYPES][300];
    size_t unnamed = 0; /* types that do not know the named layout */
    for (size_t i = 0; i < ntypes; i++) {
        struct mig_instance inst[MIG_MAX_INSTANCES];
        size_t n;
        bool on;
        const char *missing = NULL; /* a profile of the counts the type lacks */
        for (size_t k = 0; !m->layout && !missing && k < m->ncounts; k++)
            if (mig_profile_lookup(types[i], m->counts[k].profile, NULL, 0) < 0)
                missing = m->counts[k].profile;
        int rc = missing ? GPO_ENOENT
                         : cluster_mig_layout(m, types[i], inst, &n, &on, why[i], sizeof(why[i]));
        if (rc == 0)
            return 0;
        if (missing) /* shorter than the core's list of the type's profiles */
            snprintf(why[i], sizeof(why[i]), "%s has no %s", types[i]->name, missing);
        unnamed += m->layout && rc == GPO_ENOENT;
    }
    if (unnamed == ntypes && ntypes > 1)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field '%s.layout': no MIG layout '%s' on any MIG GPU type of %s "
                          "(named layouts: all-disabled, all-enabled, all-balanced, and all- "
                          "with a profile of the type, as all-1g.10gb)",
                          field, m->layout, whose);
    if (ntypes == 1)
        return errbuf_set(err, errlen, GPO_EINVAL, "field '%s.layout': %s", field, why[0]);
    /* Valid on no type: each type's reason, as far as the line holds. */
    char line[1024];
    size_t at = 0;
    for (size_t i = 0; i < ntypes && at < sizeof(line); i++) {
        int k = snprintf(line + at, sizeof(line) - at, "%s%s", i ? "; " : "", why[i]);
        at = k < 0 ? sizeof(line) : at + (size_t)k;
    }
    return errbuf_set(err, errlen, GPO_EINVAL,
                      "field '%s.layout': valid on no MIG GPU type of %s (a layout must be valid "
                      "on at least one): %s",
                      field, whose, line);
}

int cluster_pool_mig_check(const struct cluster *m, const struct cluster_pool *p, char *err,
                           size_t errlen)
{
    const struct mig_type *types[MIG_NTYPES];
    size_t n = 0;
    for (size_t i = 0; m && p && i < m->nnodes; i++) {
        const struct cluster_node *node = &m->nodes[i];
        if (strcmp(node->pool, p->name) != 0 || !node->ngpus)
            continue;
        const struct mig_type *t = mig_type_find(node->gpus[0].gpu_type);
        bool seen = !t;
        for (size_t k = 0; k < n && !seen; k++)
            seen = types[k] == t;
        if (!seen)
            types[n++] = t;
    }
    if (!n || !p)
        return 0; /* no MIG type known yet: decode checked it against the catalogue */
    char whose[CLUSTER_NAME_MAX + 16];
    snprintf(whose, sizeof(whose), "pool '%s'", p->name);
    return cluster_mig_check_types(&p->mig, "mig", types, n, whose, err, errlen);
}

/* ---- a node's own setting ------------------------------------------------------ */

int cluster_node_mig_decode(const json_t *v, struct cluster_mig **ret, char *err, size_t errlen)
{
    if (!v || json_is_null(v)) {
        *ret = NULL;
        return 0;
    }
    struct cluster_mig *m = calloc(1, sizeof(*m));
    if (!m)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    int rc = cluster_mig_decode(v, "mig", m, err, errlen);
    if (rc) {
        free(m);
        return rc;
    }
    *ret = m;
    return 0;
}

int cluster_node_mig_check(const struct cluster_node *n, const struct cluster_mig *mig, char *err,
                           size_t errlen)
{
    if (!mig || mig->mode == CLUSTER_MIG_OFF)
        return 0;
    const struct mig_type *t = n->ngpus ? mig_type_find(n->gpus[0].gpu_type) : NULL;
    if (!t) {
        char types[KNOWN_TYPES_MAX];
        const char *names[MIG_NTYPES];
        for (unsigned k = 0; k < MIG_NTYPES; k++)
            names[k] = mig_type_at(k)->name;
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'mig': node '%s' has no MIG GPU (its GPUs: %s; MIG GPU types: "
                          "%s)",
                          n->name, n->ngpus ? n->gpus[0].gpu_type : "none",
                          cluster_names_list(names, MIG_NTYPES, types, sizeof(types)));
    }
    char whose[CLUSTER_HOST_MAX + 16];
    snprintf(whose, sizeof(whose), "node '%s'", n->name);
    return cluster_mig_check_types(mig, "mig", &t, 1, whose, err, errlen);
}

/* ---- encoding -------------------------------------------------------------- */

/* The largest unit that says s seconds exactly: "5m", "90s", "2h", "1d". */
static json_t *duration_json(int64_t ms)
{
    static const struct {
        int64_t s;
        char unit;
    } units[] = {{86400, 'd'}, {3600, 'h'}, {60, 'm'}, {1, 's'}};
    int64_t s = ms / 1000;
    char buf[32];
    for (size_t i = 0; i < ARRAY_LEN(units); i++) {
        if (s % units[i].s == 0 && (s != 0 || units[i].unit == 's')) {
            snprintf(buf, sizeof(buf), "%" PRId64 "%c", s / units[i].s, units[i].unit);
            return json_string(buf);
        }
    }
    return json_integer(s);
}

json_t *cluster_mig_to_json(const struct cluster_mig *m)
{
    if (m->mode == CLUSTER_MIG_DYNAMIC)
        return json_pack("{s:b, s:o, s:o, s:o, s:I, s:I}", "dynamic", 1, "settle",
                         duration_json(m->settle_ms), "hold", duration_json(m->hold_ms),
                         "min_interval", duration_json(m->min_interval_ms), "keep_free",
                         (json_int_t)m->keep_free, "max_repartitions",
                         (json_int_t)m->max_repartitions);
    if (m->mode != CLUSTER_MIG_STATIC)
        return json_string("off");
    if (m->layout)
        return json_pack("{s:s}", "layout", m->layout);
    json_t *counts = json_object();
    for (size_t i = 0; counts && i < m->ncounts; i++) {
        if (json_object_set_new(counts, m->counts[i].profile, json_integer(m->counts[i].count))) {
            json_decref(counts);
            return NULL;
        }
    }
    return counts ? json_pack("{s:o}", "layout", counts) : NULL;
}

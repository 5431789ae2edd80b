/*
 * cluster_cost.c - the JSON of what GPU time costs: prices per GPU type and
 * teams' budgets. Money is held as int64 millionths of the price unit, so
 * sums are exact; the API speaks JSON numbers with at most 6 decimals.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "cluster/cluster.h"
#include "cluster/cluster_int.h"
#include "util/errbuf.h"
#include "util/jsonv.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

int cluster_money_micro(double x, const char *field, int64_t max_micro, int64_t *ret, char *err,
                        size_t errlen)
{
    double max = (double)max_micro / 1e6;
    if (!isfinite(x) || x < 0)
        return errbuf_set(err, errlen, GPO_EINVAL, "field '%s': %g is negative; expected 0..%.0f",
                          field, x, max);
    if (x > max)
        return errbuf_set(err, errlen, GPO_EINVAL, "field '%s': %g is over the maximum %.0f", field,
                          x, max);
    double y = x * 1e6, r = nearbyint(y);
    /* Doubles carry ~16 digits: allow their rounding, not a 7th decimal. */
    if (fabs(y - r) > 1e-6 + fabs(y) * 1e-13)
        return errbuf_set(err, errlen, GPO_EINVAL, "field '%s': %.10g has more than 6 decimals",
                          field, x);
    *ret = (int64_t)r;
    return 0;
}

json_t *cluster_money_json(int64_t micro)
{
    return json_real((double)micro / 1e6);
}

/* ---- prices ------------------------------------------------------------ */

struct price_wire {
    uint32_t id;
    char *name;
    json_t *per_gpu_hour; /* borrowed */
    char *description;
};

static const struct jsonv_field price_fields[] = {
    {.name = "id",
     .kind = JSONV_UINT32,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct price_wire, id),
     .min = 1,
     .max = UINT32_MAX},
    {.name = "name",
     .kind = JSONV_STRING,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct price_wire, name),
     .min = 1,
     .max = CLUSTER_NAME_MAX},
    {.name = "per_gpu_hour",
     .kind = JSONV_RAW,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct price_wire, per_gpu_hour)},
    {.name = "description",
     .kind = JSONV_STRING,
     .offset = offsetof(struct price_wire, description),
     .min = 0,
     .max = CLUSTER_DESC_MAX},
};

int cluster_price_check(const struct cluster_price *p, char *err, size_t errlen)
{
    if (!p)
        return errbuf_set(err, errlen, GPO_EINVAL, "no price");
    if (!cluster_gpu_type_valid(p->name))
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'name': not a GPU type name (1 to 63 bytes of letters, digits, "
                          "'-', '_' and '.', starting with a letter or digit)");
    if (p->per_gpu_hour_micro < 0 || p->per_gpu_hour_micro > CLUSTER_PRICE_MAX_MICRO)
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'per_gpu_hour': out of 0..1000000");
    if (p->description && strlen(p->description) > CLUSTER_DESC_MAX)
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'description': longer than %d bytes",
                          CLUSTER_DESC_MAX);
    return 0;
}

int cluster_price_decode(const json_t *obj, unsigned flags, struct cluster_price *ret, char *err,
                         size_t errlen)
{
    if (flags & ~(unsigned)CLUSTER_STORED)
        return errbuf_set(err, errlen, GPO_EINVAL, "cluster: unknown decode flags %#x", flags);
    bool stored = flags & CLUSTER_STORED;
    struct price_wire w = {0};
    int rc = jsonv_decode(obj, stored ? price_fields : price_fields + 1,
                          stored ? ARRAY_LEN(price_fields) : ARRAY_LEN(price_fields) - 1, &w, err,
                          errlen);
    rc = rc == 0 ? 0 : rc == GPO_ENOMEM ? GPO_ENOMEM : GPO_EINVAL;
    struct cluster_price p = {.id = w.id};
    if (!rc && !json_is_number(w.per_gpu_hour))
        rc = errbuf_set(err, errlen, GPO_EINVAL,
                        "field 'per_gpu_hour': expected a number (the price of one GPU-hour)");
    if (!rc)
        rc = cluster_money_micro(json_number_value(w.per_gpu_hour), "per_gpu_hour",
                                 CLUSTER_PRICE_MAX_MICRO, &p.per_gpu_hour_micro, err, errlen);
    if (!rc) {
        p.name = w.name;
        p.description = w.description;
        w.name = w.description = NULL;
        rc = cluster_price_check(&p, err, errlen);
    }
    free(w.name);
    free(w.description);
    if (rc) {
        cluster_price_release(&p);
        return rc;
    }
    *ret = p;
    return 0;
}

json_t *cluster_price_to_json(const struct cluster_price *p, unsigned flags)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int e = (flags & CLUSTER_STORED) ? json_object_set_new(o, "id", json_integer(p->id)) : 0;
    e |= json_object_set_new(o, "name", json_string(p->name));
    e |= json_object_set_new(o, "per_gpu_hour", cluster_money_json(p->per_gpu_hour_micro));
    if (p->description)
        e |= json_object_set_new(o, "description", json_string(p->description));
    if (e) {
        json_decref(o);
        return NULL;
    }
    return o;
}

void cluster_price_release(struct cluster_price *p)
{
    if (!p)
        return;
    free(p->name);
    free(p->description);
    memset(p, 0, sizeof(*p));
}

/* ---- budgets ----------------------------------------------------------- */

#define BUDGET_MAX_MICRO (INT64_C(1000000000000) * 1000000) /* 1e12 a month */

int cluster_budget_check(const struct cluster_budget *b, char *err, size_t errlen)
{
    if (!b || !b->set)
        return 0;
    if (b->monthly_micro <= 0 || b->monthly_micro > BUDGET_MAX_MICRO)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'budget.monthly': expected an amount > 0 (at most 1e12)");
    if (b->alert_permille < 1 || b->alert_permille > 1000)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'budget.alert_at': expected a fraction in (0, 1]");
    if (b->block_below && !cluster_name_valid(b->block_below))
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'budget.block_below': not a priority class name");
    return 0;
}

int cluster_budget_decode(const json_t *obj, struct cluster_budget *ret, char *err, size_t errlen)
{
    struct cluster_budget b = {0};
    if (!obj || json_is_null(obj)) {
        *ret = b;
        return 0;
    }
    if (!json_is_object(obj))
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'budget': expected an object {\"monthly\": 10000, \"alert_at\": "
                          "0.8, \"block_below\": \"normal\"}");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        if (strcmp(key, "monthly") != 0 && strcmp(key, "alert_at") != 0 &&
            strcmp(key, "block_below") != 0) {
            char q[JSONV_QUOTE_MAX + 4];
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'budget': unknown field '%s' (known: monthly, alert_at, "
                              "block_below)",
                              cluster_quote(key, q));
        }
    }
    b.set = true;
    b.alert_permille = 800;
    json_t *monthly = json_object_get(obj, "monthly");
    json_t *alert = json_object_get(obj, "alert_at");
    json_t *below = json_object_get(obj, "block_below");
    if (!monthly)
        return errbuf_set(err, errlen, GPO_EINVAL, "missing required field 'budget.monthly'");
    if (!json_is_number(monthly))
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'budget.monthly': expected a number");
    if (json_number_value(monthly) <= 0)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'budget.monthly': %g is not positive; expected an amount > 0",
                          json_number_value(monthly));
    int rc = cluster_money_micro(json_number_value(monthly), "budget.monthly", BUDGET_MAX_MICRO,
                                 &b.monthly_micro, err, errlen);
    if (rc)
        return rc;
    if (alert && !json_is_null(alert)) {
        double x = json_is_number(alert) ? json_number_value(alert) : -1;
        int64_t micro = 0;
        if (!json_is_number(alert) || !(x > 0 && x <= 1))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'budget.alert_at': expected a fraction in (0, 1], like 0.8");
        if ((rc = cluster_money_micro(x, "budget.alert_at", 1000000, &micro, err, errlen)))
            return rc;
        /* Held in permille; finer fractions round up so 0.0001 still alerts. */
        b.alert_permille = (uint32_t)((micro + 999) / 1000);
    }
    if (below && !json_is_null(below)) {
        if (!json_is_string(below) || !cluster_name_valid(json_string_value(below)))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'budget.block_below': expected a priority class name");
        if (!(b.block_below = strdup(json_string_value(below))))
            return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    *ret = b;
    return 0;
}

json_t *cluster_budget_to_json(const struct cluster_budget *b)
{
    if (!b || !b->set)
        return json_null();
    json_t *o = json_object();
    if (!o)
        return NULL;
    int e = json_object_set_new(o, "monthly", cluster_money_json(b->monthly_micro));
    e |= json_object_set_new(o, "alert_at", json_real(b->alert_permille / 1000.0));
    if (b->block_below)
        e |= json_object_set_new(o, "block_below", json_string(b->block_below));
    if (e) {
        json_decref(o);
        return NULL;
    }
    return o;
}

void cluster_budget_release(struct cluster_budget *b)
{
    if (!b)
        return;
    free(b->block_below);
    memset(b, 0, sizeof(*b));
}

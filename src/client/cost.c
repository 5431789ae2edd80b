/*
 * cost.c - the cost and metrics calls (client.h): the cost report, budgets
 * and metric series.
 */
#include <string.h>

#include "client/client.h"
#include "client/internal.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static const char *const by_names[] = {
#define CLIENT_COST_BY_NAME(name, text) text,
    CLIENT_COST_BY_MAP(CLIENT_COST_BY_NAME)
#undef CLIENT_COST_BY_NAME
};

const char *client_cost_by_name(enum client_cost_by by)
{
    return (unsigned)by < ARRAY_LEN(by_names) ? by_names[by] : "?";
}

int client_cost_by_parse(const char *name, enum client_cost_by *ret)
{
    for (size_t k = 0; name && k < ARRAY_LEN(by_names); k++)
        if (strcmp(name, by_names[k]) == 0) {
            *ret = (enum client_cost_by)k;
            return 0;
        }
    return GPO_ENOENT;
}

int client_cost(struct client *c, const struct client_cost_query *q, json_t **ret, char *err,
                size_t errlen)
{
    struct client_path p;
    int rc = 0;
    client_path_init(&p, "/v1/cost");
    client_path_param(&p, "by", client_cost_by_name(q->by));
    client_path_param(&p, "since", q->since);
    client_path_param(&p, "until", q->until);
    const char *path = client_path_done(&p, &rc, err, errlen);
    return path ? client_call(c, "GET", path, NULL, ret, err, errlen) : rc;
}

int client_budgets(struct client *c, json_t **ret, char *err, size_t errlen)
{
    return client_call(c, "GET", "/v1/budgets", NULL, ret, err, errlen);
}

int client_metrics_series(struct client *c, const struct client_series_query *q, json_t **ret,
                          char *err, size_t errlen)
{
    if (!q->metric)
        return errbuf_set(err, errlen, GPO_EINVAL, "a series needs a metric");
    struct client_path p;
    int rc = 0;
    client_path_init(&p, "/v1/metrics/series");
    client_path_param(&p, "metric", q->metric);
    client_path_param(&p, "by", q->by);
    client_path_param(&p, "key", q->key);
    client_path_param(&p, "since", q->since);
    client_path_param(&p, "until", q->until);
    client_path_param(&p, "step", q->step);
    const char *path = client_path_done(&p, &rc, err, errlen);
    return path ? client_call(c, "GET", path, NULL, ret, err, errlen) : rc;
}

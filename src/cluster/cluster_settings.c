/*
 * cluster_settings.c - the cluster-wide settings (cluster.h: struct
 * cluster_settings) as JSON: "private_data", what members do not see of
 * other teams.
 */
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "cluster/cluster.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* In the order to_json lists them. */
static const struct {
    enum cluster_private bit;
    const char *name;
} kinds[] = {
    {CLUSTER_PRIVATE_JOBS, "jobs"},
    {CLUSTER_PRIVATE_USAGE, "usage"},
    {CLUSTER_PRIVATE_NODES, "nodes"},
    {CLUSTER_PRIVATE_TEAMS, "teams"},
};

#define EXPECTED "true, false, or a list of jobs, usage, nodes, teams"

const char *cluster_private_name(enum cluster_private bit)
{
    for (size_t k = 0; k < ARRAY_LEN(kinds); k++)
        if (kinds[k].bit == bit)
            return kinds[k].name;
    return NULL;
}

bool cluster_settings_private(const struct cluster_settings *s, enum cluster_private what)
{
    return (s->open & (unsigned)what) == 0;
}

/* The list form: the bits it keeps private. */
static int decode_list(const json_t *v, unsigned *ret_private, char *err, size_t errlen)
{
    unsigned priv = 0;
    for (size_t i = 0; i < json_array_size(v); i++) {
        const char *name = json_string_value(json_array_get(v, i));
        size_t k = 0;
        while (name && k < ARRAY_LEN(kinds) && strcmp(kinds[k].name, name) != 0)
            k++;
        if (!name || k == ARRAY_LEN(kinds))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'private_data[%zu]': expected jobs, usage, nodes or teams", i);
        if (priv & (unsigned)kinds[k].bit)
            return errbuf_set(err, errlen, GPO_EINVAL, "field 'private_data[%zu]': '%s' twice", i,
                              name);
        priv |= (unsigned)kinds[k].bit;
    }
    *ret_private = priv;
    return 0;
}

int cluster_settings_decode(const json_t *obj, struct cluster_settings *ret, char *err,
                            size_t errlen)
{
    if (!json_is_object(obj))
        return errbuf_set(err, errlen, GPO_EINVAL, "expected an object with 'private_data'");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        if (strcmp(key, "private_data") != 0)
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "unknown field '%.64s' (expected 'private_data')", key);
    }
    unsigned priv = CLUSTER_PRIVATE_ALL;
    v = json_object_get(obj, "private_data");
    if (json_is_boolean(v)) {
        priv = json_is_true(v) ? CLUSTER_PRIVATE_ALL : 0;
    } else if (json_is_array(v)) {
        int rc = decode_list(v, &priv, err, errlen);
        if (rc)
            return rc;
    } else if (v && !json_is_null(v)) {
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'private_data': expected " EXPECTED);
    }
    *ret = (struct cluster_settings){.open = CLUSTER_PRIVATE_ALL & ~priv};
    return 0;
}

json_t *cluster_settings_to_json(const struct cluster_settings *s)
{
    unsigned priv = CLUSTER_PRIVATE_ALL & ~s->open;
    if (priv == CLUSTER_PRIVATE_ALL || priv == 0)
        return json_pack("{s:b}", "private_data", priv != 0);
    json_t *list = json_array();
    for (size_t k = 0; list && k < ARRAY_LEN(kinds); k++) {
        if ((priv & (unsigned)kinds[k].bit) &&
            json_array_append_new(list, json_string(kinds[k].name)) != 0) {
            json_decref(list);
            list = NULL;
        }
    }
    return list ? json_pack("{s:o}", "private_data", list) : NULL;
}

/*
 * config_settings.c - the cluster-wide settings (config.h): loaded from the
 * store's meta row at start, written through it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/config/config_int.h"
#include "util/errbuf.h"
#include "base/banned.h"

json_t *config_settings_json(const struct config *c)
{
    return cluster_settings_to_json(&c->cluster->settings);
}

int config_settings_plan(struct config *c, const json_t *body, struct config_write **ret_w,
                         struct store_batch **ret_batch, char *err, size_t errlen)
{
    struct cluster_settings set;
    int rc = cluster_settings_decode(body, &set, err, errlen);
    if (rc)
        return rc;
    if (c->busy)
        return errbuf_set(err, errlen, GPO_EBUSY,
                          "another configuration change is being stored; retry");
    json_t *o = cluster_settings_to_json(&set);
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    struct config_write *w = text ? calloc(1, sizeof(*w)) : NULL;
    struct store_batch *b = w ? store_batch_new() : NULL;
    if (!b || store_batch_meta_put(b, CONFIG_META_SETTINGS, text) != 0) {
        store_batch_free(b);
        free(w);
        free(text);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    free(text);
    w->kind = CONFIG_WRITE_SETTINGS;
    w->replace = true;
    w->item.settings = set;
    snprintf(w->name, sizeof(w->name), "settings");
    c->busy = true;
    *ret_w = w;
    *ret_batch = b;
    return 0;
}

int config_settings_done(struct config *c, struct config_write *w, enum config_outcome *ret_outcome,
                         json_t **ret_body, char *err, size_t errlen)
{
    c->cluster->settings = w->item.settings;
    json_t *o = config_settings_json(c);
    if (!o)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    *ret_outcome = CONFIG_REPLACED;
    *ret_body = o;
    return 0;
}

int config_settings_load(struct config *c, char *err, size_t errlen)
{
    char *text = NULL;
    int rc = store_meta_get(c->store, CONFIG_META_SETTINGS, &text);
    c->cluster->settings = (struct cluster_settings){0};
    if (rc == GPO_ENOENT)
        return 0; /* never set: the defaults */
    if (rc)
        return errbuf_set(err, errlen, rc, "store: reading meta '%s': %s", CONFIG_META_SETTINGS,
                          gpo_strerror(rc));
    json_error_t jerr;
    json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    char msg[256] = "";
    bool parsed = o != NULL;
    rc =
        parsed ? cluster_settings_decode(o, &c->cluster->settings, msg, sizeof(msg)) : GPO_ECORRUPT;
    json_decref(o);
    if (rc)
        return errbuf_set(err, errlen, GPO_ECORRUPT, "store: meta '%s': %s", CONFIG_META_SETTINGS,
                          parsed ? msg : jerr.text);
    return 0;
}

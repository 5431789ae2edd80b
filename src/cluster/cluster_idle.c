/*
 * cluster_idle.c - a team's "idle" policy (cluster.h: struct cluster_idle)
 * as JSON: defaults, checks, decoding with durations as seconds or strings.
 */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "cluster/cluster.h"
#include "util/errbuf.h"
#include "util/jsonv.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static const char *const action_names[] = {[CLUSTER_IDLE_REPORT] = "report",
                                           [CLUSTER_IDLE_REQUEUE] = "requeue",
                                           [CLUSTER_IDLE_CANCEL] = "cancel",
                                           NULL};

const char *cluster_idle_action_name(enum cluster_idle_action a)
{
    return (unsigned)a < ARRAY_LEN(action_names) - 1 ? action_names[a] : NULL;
}

void cluster_idle_default(struct cluster_idle *ret)
{
    *ret = (struct cluster_idle){.threshold_pct = CLUSTER_IDLE_THRESHOLD_DEFAULT,
                                 .window_s = CLUSTER_IDLE_WINDOW_DEFAULT_S,
                                 .action = CLUSTER_IDLE_REPORT,
                                 .warning_s = CLUSTER_IDLE_WARNING_DEFAULT_S};
}

int cluster_idle_check(const struct cluster_idle *p, char *err, size_t errlen)
{
    if (p->threshold_pct > 100)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'idle.threshold_pct': %u is out of range 0..100 (percent)",
                          p->threshold_pct);
    if (p->window_s < 1 || p->window_s > CLUSTER_IDLE_WINDOW_MAX_S)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'idle.window_s': %" PRId64 " s is out of range 1 s..30 days",
                          p->window_s);
    if (p->warning_s < 0 || p->warning_s > CLUSTER_IDLE_WARNING_MAX_S)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'idle.warning_s': %" PRId64 " s is out of range 0 s..1 day",
                          p->warning_s);
    if (!cluster_idle_action_name(p->action))
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'idle.action': expected 'report', 'requeue' or 'cancel'");
    return 0;
}

/* A duration field: whole seconds, or a duration string ("30m", "00:30:00"). */
static int decode_seconds(const char *key, const json_t *v, int64_t *ret, char *err, size_t errlen)
{
    if (json_is_integer(v)) {
        *ret = json_integer_value(v);
        return 0;
    }
    if (json_is_string(v)) {
        char q[JSONV_QUOTE_MAX + 4];
        int64_t sec;
        const char *text = json_string_value(v);
        if (timefmt_parse_duration(text, &sec) == 0 && sec != TIMEFMT_UNLIMITED) {
            *ret = sec;
            return 0;
        }
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'idle.%s': '%s' is not a duration (seconds, or e.g. \"90s\", "
                          "\"30m\", \"2h\", \"00:30:00\")",
                          key, jsonv_quote(text, json_string_length(v), q));
    }
    return errbuf_set(err, errlen, GPO_EINVAL,
                      "field 'idle.%s': expected an integer of seconds or a duration string, "
                      "got %s",
                      key, jsonv_type_name(v));
}

static const char *const field_names[] = {"threshold_pct", "window_s", "action", "warning_s"};

static int decode_field(const char *key, const json_t *v, struct cluster_idle *p, char *err,
                        size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    if (strcmp(key, "threshold_pct") == 0) {
        if (!json_is_integer(v))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'idle.threshold_pct': expected an integer, got %s",
                              jsonv_type_name(v));
        json_int_t x = json_integer_value(v);
        if (x < 0 || x > 100)
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'idle.threshold_pct': %lld is out of range 0..100 (percent)",
                              (long long)x);
        p->threshold_pct = (uint32_t)x;
        return 0;
    }
    if (strcmp(key, "window_s") == 0)
        return decode_seconds(key, v, &p->window_s, err, errlen);
    if (strcmp(key, "warning_s") == 0)
        return decode_seconds(key, v, &p->warning_s, err, errlen);
    if (strcmp(key, "action") == 0) {
        for (size_t k = 0; json_is_string(v) && action_names[k]; k++)
            if (strcmp(json_string_value(v), action_names[k]) == 0) {
                p->action = (enum cluster_idle_action)k;
                return 0;
            }
        if (!json_is_string(v))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "field 'idle.action': expected a string, got %s", jsonv_type_name(v));
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'idle.action': '%s' is not one of 'report', 'requeue', 'cancel'",
                          jsonv_quote(json_string_value(v), json_string_length(v), q));
    }
    return errbuf_set(err, errlen, GPO_EINVAL,
                      "unknown field 'idle.%s' (expected threshold_pct, window_s, action, "
                      "warning_s)",
                      jsonv_quote(key, strlen(key), q));
}

int cluster_idle_decode(const json_t *v, struct cluster_idle *ret, char *err, size_t errlen)
{
    struct cluster_idle p;
    cluster_idle_default(&p);
    if (v && !json_is_null(v)) {
        if (!json_is_object(v))
            return errbuf_set(err, errlen, GPO_EINVAL, "field 'idle': expected an object, got %s",
                              jsonv_type_name(v));
        const char *key;
        const json_t *x;
        json_object_foreach((json_t *)v, key, x)
        {
            /* null: that field's default; an unknown key is refused even so */
            bool known = false;
            for (size_t k = 0; k < ARRAY_LEN(field_names); k++)
                known |= strcmp(key, field_names[k]) == 0;
            int rc = json_is_null(x) && known ? 0 : decode_field(key, x, &p, err, errlen);
            if (rc)
                return rc;
        }
    }
    int rc = cluster_idle_check(&p, err, errlen);
    if (rc == 0)
        *ret = p;
    return rc;
}

json_t *cluster_idle_to_json(const struct cluster_idle *p)
{
    const char *action = cluster_idle_action_name(p->action);
    return json_pack("{s:I, s:I, s:s, s:I}", "threshold_pct", (json_int_t)p->threshold_pct,
                     "window_s", (json_int_t)p->window_s, "action", action ? action : "report",
                     "warning_s", (json_int_t)p->warning_s);
}

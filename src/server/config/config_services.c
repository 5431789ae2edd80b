/*
 * config_services.c - services as configuration: what a service names must
 * exist (team, priority class, pool, GPU type: canonical names stored, as
 * for a job's submission), what a service names cannot go, and the
 * generation a write gives it (config_int.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "server/config/config_int.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define KNOWN_MAX 200 /* bytes of a "(known: ...)" list */

/* "a, b, c" of the names of n objects of `size` bytes whose name is at
 * name_off, into buf. */
static const char *known(const void *items, size_t n, size_t size, size_t name_off, char *buf,
                         size_t len)
{
    const char *names[64];
    size_t k = 0;
    for (; k < n && k < sizeof(names) / sizeof(names[0]); k++)
        memcpy(&names[k], (const char *)items + k * size + name_off, sizeof(names[k]));
    return cluster_names_list(names, k, buf, len);
}

static int check_names(const struct cluster *m, const struct jobspec *r, char *err, size_t errlen)
{
    char buf[KNOWN_MAX];
    if (!cluster_team_get(m, r->team))
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'team': unknown team '%s' (known: %s)",
                          r->team,
                          known(m->teams, m->nteams, sizeof(*m->teams),
                                offsetof(struct cluster_team, name), buf, sizeof(buf)));
    if (!cluster_class_get(m, r->priority))
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'priority': unknown priority class '%s' (known: %s)", r->priority,
                          known(m->classes, m->nclasses, sizeof(*m->classes),
                                offsetof(struct cluster_class, name), buf, sizeof(buf)));
    return 0;
}

int config_service_refs(const struct config *c, const void *item, const char *name, char *err,
                        size_t errlen)
{
    (void)c;
    (void)item;
    (void)name;
    (void)err;
    (void)errlen;
    return 0; /* nothing refers to a service; what it names, settle checks */
}

int config_service_settle(const struct config *c, void *item, const void *old, char *err,
                          size_t errlen)
{
    struct cluster_service *svc = item;
    const struct cluster_service *prev = old;
    int rc = check_names(c->cluster, &svc->replica, err, errlen);
    if (rc)
        return rc;
    char msg[512] = "";
    rc = job_submit_resolve(c->cluster, &svc->replica, msg, sizeof(msg));
    if (rc == GPO_ENOMEM)
        return errbuf_set(err, errlen, rc, "out of memory");
    if (rc) {
        cluster_service_job_message(msg, err, errlen);
        return GPO_EINVAL;
    }
    svc->generation = !prev                                   ? 1
                      : cluster_service_same_shape(prev, svc) ? prev->generation
                                                              : prev->generation + 1;
    return 0;
}

int config_service_naming(const struct config *c, enum config_kind k, const char *name, char *err,
                          size_t errlen)
{
    const struct cluster *m = c->cluster;
    for (size_t i = 0; i < m->nservices; i++) {
        const struct cluster_service *svc = &m->services[i];
        const struct jobspec *r = &svc->replica;
        const char *named = k == CONFIG_TEAMS ? r->team : k == CONFIG_POOLS ? r->pool : r->priority;
        if (named && strcmp(named, name) == 0)
            return errbuf_set(err, errlen, GPO_ESTATE, "service '%s' has %s '%s'", svc->name,
                              config_kind_label(k), name);
    }
    return 0;
}

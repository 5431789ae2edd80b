/*
 * follower.c - what a controller that does not lead answers (lead.h): its
 * health, a redirect to the leader, or 503 while none is known; and the
 * role fields of every controller's health.
 */
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "server/lead/lead.h"
#include "base/banned.h"

#define ROLE_HEADER "X-Gpuorch-Role"

int lead_health_fields(struct lead *l, json_t *o)
{
    char url[STORE_LEASE_ADDRESS_MAX + 1];
    int64_t epoch = 0;
    bool leads = lead_leading(l);
    if (leads) {
        pthread_mutex_lock(&l->mu);
        snprintf(url, sizeof(url), "%s", l->address);
        pthread_mutex_unlock(&l->mu);
        epoch = lead_epoch(l);
    } else {
        lead_leader(l, url, sizeof(url), &epoch);
    }
    int rc = json_object_set_new(o, "role", json_string(leads ? "leader" : "follower"));
    rc |= json_object_set_new(o, "leader", url[0] ? json_string(url) : json_null());
    rc |= json_object_set_new(o, "epoch", json_integer(epoch));
    return rc ? GPO_ENOMEM : 0;
}

static int health(struct http_request *req, void *ctx)
{
    json_t *o = json_object();
    if (!o || json_object_set_new(o, "status", json_string("ok")) ||
        lead_health_fields(ctx, o) != 0) {
        json_decref(o);
        return http_request_error(req, 500, "internal", "out of memory");
    }
    return http_request_respond_json(req, 200, o);
}

const struct http_route lead_follower_routes[] = {
    {"GET", LEAD_HEALTH_PATH, health, HTTP_ROUTE_PUBLIC, NULL},
};
const size_t lead_nfollower_routes = sizeof(lead_follower_routes) / sizeof(lead_follower_routes[0]);

static bool is_health(struct http_request *req)
{
    const char *m = http_request_method(req);
    return strcmp(http_request_path(req), LEAD_HEALTH_PATH) == 0 &&
           (strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0);
}

/* 503 + Retry-After, as a controller that knows no leader answers. */
static bool unavailable(struct http_request *req, const char *message)
{
    http_request_add_header(req, ROLE_HEADER, "follower");
    http_request_add_header(req, "Retry-After", "1");
    http_request_error(req, 503, "no_leader", "%s", message);
    return false;
}

bool lead_follower_admit(struct http_request *req, void *ctx)
{
    struct lead *l = ctx;
    if (is_health(req))
        return true;
    char url[STORE_LEASE_ADDRESS_MAX + 1];
    int64_t epoch;
    if (!lead_leader(l, url, sizeof(url), &epoch))
        return unavailable(req, "no leader yet");
    const char *query = http_request_raw_query(req);
    char location[STORE_LEASE_ADDRESS_MAX + 8192];
    size_t ulen = strlen(url);
    /* The leader's URL ends without a slash; the path starts with one. */
    if (ulen && url[ulen - 1] == '/')
        url[--ulen] = '\0';
    int n = snprintf(location, sizeof(location), "%s%s%s%s", url, http_request_path(req),
                     query[0] ? "?" : "", query);
    if (n < 0 || (size_t)n >= sizeof(location))
        return unavailable(req, "the request's target is too long to redirect");
    http_request_add_header(req, "Location", location);
    http_request_add_header(req, ROLE_HEADER, "follower");
    http_request_error(req, 307, "not_leader", "not the leader; the leader is %s", url);
    return false;
}

bool lead_admit(struct lead *l, struct http_request *req)
{
    if (lead_leading(l) || is_health(req))
        return true;
    return unavailable(req, "this controller is no longer the leader");
}

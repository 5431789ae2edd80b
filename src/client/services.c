/*
 * services.c - the service calls (client.h): PUT, GET and DELETE of
 * /v1/services and /v1/services/NAME.
 */
#include "client/client.h"
#include "client/internal.h"
#include "base/banned.h"

/* METHOD /v1/services/NAME. */
static int service_call(struct client *c, const char *method, const char *name, const json_t *body,
                        json_t **ret, char *err, size_t errlen)
{
    struct client_path p;
    int rc = 0;
    client_path_init(&p, "/v1/services");
    client_path_segment(&p, name);
    const char *path = client_path_done(&p, &rc, err, errlen);
    return path ? client_call(c, method, path, body, ret, err, errlen) : rc;
}

int client_services_put(struct client *c, const char *name, const json_t *spec, json_t **ret,
                        char *err, size_t errlen)
{
    return service_call(c, "PUT", name, spec, ret, err, errlen);
}

int client_services_list(struct client *c, json_t **ret, char *err, size_t errlen)
{
    return client_call(c, "GET", "/v1/services", NULL, ret, err, errlen);
}

int client_services_get(struct client *c, const char *name, json_t **ret, char *err, size_t errlen)
{
    return service_call(c, "GET", name, NULL, ret, err, errlen);
}

int client_services_delete(struct client *c, const char *name, char *err, size_t errlen)
{
    return service_call(c, "DELETE", name, NULL, NULL, err, errlen);
}

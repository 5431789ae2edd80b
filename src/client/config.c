/*
 * config.c - the configuration calls (client.h): pools, priority classes,
 * teams, prices and users by name, and users' tokens.
 */
#include "client/client.h"
#include "client/internal.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static const char *const kind_paths[] = {
#define CLIENT_KIND_PATH(name, path) path,
    CLIENT_KIND_MAP(CLIENT_KIND_PATH)
#undef CLIENT_KIND_PATH
};

const char *client_kind_path(enum client_kind k)
{
    return (unsigned)k < ARRAY_LEN(kind_paths) ? kind_paths[k] : "?";
}

/* METHOD /v1/KIND[/NAME]. */
static int kind_call(struct client *c, const char *method, enum client_kind k, const char *name,
                     const json_t *body, json_t **ret, char *err, size_t errlen)
{
    struct client_path p;
    int rc = 0;
    client_path_init(&p, "/v1");
    client_path_segment(&p, client_kind_path(k));
    if (name)
        client_path_segment(&p, name);
    const char *path = client_path_done(&p, &rc, err, errlen);
    return path ? client_call(c, method, path, body, ret, err, errlen) : rc;
}

int client_config_get(struct client *c, enum client_kind k, const char *name, json_t **ret,
                      char *err, size_t errlen)
{
    return kind_call(c, "GET", k, name, NULL, ret, err, errlen);
}

int client_config_put(struct client *c, enum client_kind k, const char *name, const json_t *obj,
                      json_t **ret, char *err, size_t errlen)
{
    return kind_call(c, "PUT", k, name, obj, ret, err, errlen);
}

int client_config_delete(struct client *c, enum client_kind k, const char *name, char *err,
                         size_t errlen)
{
    return kind_call(c, "DELETE", k, name, NULL, NULL, err, errlen);
}

int client_users_token_issue(struct client *c, const char *user, const char *label, json_t **ret,
                             char *err, size_t errlen)
{
    struct client_path p;
    int rc = 0;
    client_path_init(&p, "/v1/users");
    client_path_segment(&p, user);
    client_path_raw(&p, "/tokens");
    client_path_param(&p, "label", label);
    const char *path = client_path_done(&p, &rc, err, errlen);
    return path ? client_call(c, "POST", path, NULL, ret, err, errlen) : rc;
}

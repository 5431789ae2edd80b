/*
 * nodes.c - the node calls (client.h): list, drain, resume, delete, a
 * node's own MIG setting.
 */
#include "client/client.h"
#include "client/internal.h"
#include "util/errbuf.h"
#include "base/banned.h"

int client_nodes_list(struct client *c, json_t **ret, char *err, size_t errlen)
{
    return client_call(c, "GET", "/v1/nodes", NULL, ret, err, errlen);
}

/* POST /v1/nodes/NAME/ACTION. */
static int node_action(struct client *c, const char *name, const char *action, json_t **ret,
                       char *err, size_t errlen)
{
    struct client_path p;
    int rc = 0;
    client_path_init(&p, "/v1/nodes");
    client_path_segment(&p, name);
    client_path_raw(&p, action);
    const char *path = client_path_done(&p, &rc, err, errlen);
    return path ? client_call(c, "POST", path, NULL, ret, err, errlen) : rc;
}

int client_nodes_drain(struct client *c, const char *name, json_t **ret, char *err, size_t errlen)
{
    return node_action(c, name, "/drain", ret, err, errlen);
}

int client_nodes_resume(struct client *c, const char *name, json_t **ret, char *err, size_t errlen)
{
    return node_action(c, name, "/resume", ret, err, errlen);
}

int client_nodes_delete(struct client *c, const char *name, char *err, size_t errlen)
{
    struct client_path p;
    int rc = 0;
    client_path_init(&p, "/v1/nodes");
    client_path_segment(&p, name);
    const char *path = client_path_done(&p, &rc, err, errlen);
    return path ? client_call(c, "DELETE", path, NULL, NULL, err, errlen) : rc;
}

int client_nodes_mig(struct client *c, const char *name, const json_t *mig, json_t **ret, char *err,
                     size_t errlen)
{
    struct client_path p;
    int rc = 0;
    client_path_init(&p, "/v1/nodes");
    client_path_segment(&p, name);
    client_path_raw(&p, "/mig");
    const char *path = client_path_done(&p, &rc, err, errlen);
    json_t *body = path ? json_pack("{s:O}", "mig", mig ? mig : json_null()) : NULL;
    if (path && !body)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    rc = path ? client_call(c, "PUT", path, body, ret, err, errlen) : rc;
    json_decref(body);
    return rc;
}

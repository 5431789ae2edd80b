/*
 * internal.h - what the files of src/client share and nobody else sees: a
 * request's path, put together with every name and value escaped.
 */
#ifndef GPUORCH_CLIENT_INTERNAL_H
#define GPUORCH_CLIENT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "client/client.h"

/* A path being put together; `full` once something did not fit. */
struct client_path {
    char buf[CLIENT_PATH_MAX];
    size_t len;
    bool query; /* a '?' is in it: the next parameter begins with '&' */
    bool full;
};

/* Starts p with `prefix` (written as is: "/v1/jobs"). */
void client_path_init(struct client_path *p, const char *prefix);
/* Appends "/" and `segment` percent-encoded. */
void client_path_segment(struct client_path *p, const char *segment);
/* Appends text as is ("/cancel"). */
void client_path_raw(struct client_path *p, const char *text);
/* Appends "?key=value" or "&key=value", value percent-encoded; nothing for
 * a NULL value. */
void client_path_param(struct client_path *p, const char *key, const char *value);
/* The path, or NULL with GPO_ENAMETOOLONG in *ret_rc and err when it did
 * not fit. */
const char *client_path_done(struct client_path *p, int *ret_rc, char *err, size_t errlen);

#endif

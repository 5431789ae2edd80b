/*
 * steps.c - a job's steps through the API (client.h: client_jobs_step).
 */
#include <inttypes.h>
#include <stdio.h>

#include "client/client.h"
#include "client/internal.h"
#include "base/banned.h"

int client_jobs_step(struct client *c, int64_t id, json_t **ret, char *err, size_t errlen)
{
    char path[64];
    snprintf(path, sizeof(path), "/v1/jobs/%" PRId64 "/step", id);
    return client_call(c, "GET", path, NULL, ret, err, errlen);
}

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
/* Appends text as is ("/cancel"; a query in it is continued with '&'). */
void client_path_raw(struct client_path *p, const char *text);
/* Appends "?key=value" or "&key=value", value percent-encoded; nothing for
 * a NULL value. */
void client_path_param(struct client_path *p, const char *key, const char *value);
/* The path, or NULL with GPO_ENAMETOOLONG in *ret_rc and err when it did
 * not fit. */
const char *client_path_done(struct client_path *p, int *ret_rc, char *err, size_t errlen);

/* "PENDING,RUNNING" for the state bits (1 << enum client_job_state) into
 * buf; "" for none (jobs.c). */
void client_states_text(unsigned states, char *buf, size_t len);

/* Every page of a keyset-paged job list (GET /v1/jobs, /v1/accounting/jobs):
 * `query` (borrowed: the path with its filters, no limit or after), then
 * "limit=page&after=ID" per request; each answer's "jobs" appended to all,
 * until its "next_after" no longer moves forward (jobs.c). */
int client_jobs_pages(struct client *c, const char *query, int page, json_t *all, char *err,
                      size_t errlen);

#endif

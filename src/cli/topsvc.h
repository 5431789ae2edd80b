/*
 * topsvc.h - the services of `gpuorch top` (topview.h): what it keeps of
 * GET /v1/services's answer for the view, and the SERVICES table it prints.
 */
#ifndef GPUORCH_CLI_TOPSVC_H
#define GPUORCH_CLI_TOPSVC_H

#include <stdio.h>

#include <jansson.h>

/* A new JSON number (real), integer or string of v (borrowed), or JSON null
 * when v is not one (NULL included); NULL when out of memory. */
json_t *top_json_num(const json_t *v);
json_t *top_json_int(const json_t *v);
json_t *top_json_str(const char *s);

/*
 * The view's "services" from the API's "services" array (borrowed; NULL or
 * not an array: none), as a new array the caller json_decref's, NULL when
 * out of memory: one object per service, by name,
 *   {"name", "model", "team", "ready", "desired", "min", "max", "inflight",
 *    "queued", "concurrency", "rps", "decision", "panic", "backoff", "cost"}
 * "inflight" sums the replicas' in-flight requests; "decision" is the
 * autoscaler's last reason, "backoff" a crash loop's. Figures the API did not
 * give (a service without status) are null.
 */
json_t *top_services_view(const json_t *services);

/* The line of top_services_text's block that is the table's header. */
#define TOP_SERVICES_HEAD_LINE 2

/*
 * The view's services (borrowed, as top_services_view makes them) as lines
 * of text into a new string (caller frees): nothing when there are none,
 * else an empty line, "services: N, replicas R ready of D desired", and the
 * table NAME READY/DESIRED INFLIGHT RPS DECISION with its header. 0 and
 * *ret, or GPO_ENOMEM.
 */
int top_services_text(const json_t *view_services, char **ret);

#endif

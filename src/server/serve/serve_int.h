/*
 * serve_int.h - what the files of src/server/serve share (serve.h says what
 * they do): the runtimes by name and by job, and the back-off's step. Under
 * the state lock.
 */
#ifndef GPUORCH_SERVER_SERVE_SERVE_INT_H
#define GPUORCH_SERVER_SERVE_SERVE_INT_H

#include "server/serve/serve.h"

/* The runtime of service `name`, made (its autoscaler at now_ms) when
 * `create` and new; NULL when not found or out of memory. */
struct serve_service *serve_service_get(struct serve *sv, const char *name, bool create,
                                        int64_t now_ms);
/* Forgets runtime k (its replicas). */
void serve_service_drop(struct serve *sv, size_t k);
/* The replica that is job `job`, and its service in *ret_svc; NULL if none. */
struct serve_replica *serve_replica_find(const struct serve *sv, int64_t job,
                                         struct serve_service **ret_svc);
/* Adds a replica record (copied); 0 or GPO_ENOMEM. */
int serve_replica_add(struct serve_service *svc, const struct serve_replica *r);
/* A replica failed at now_ms: one more failure in a row, and the back-off. */
void serve_failed(struct serve_service *svc, int64_t now_ms, const char *why);

/* Each service's figures now (ready and desired replicas, requests per
 * second, latency) to the monitor's series (monitor_services): the end of
 * each reconcile (status.c). */
void serve_monitor_points(struct server *s, int64_t now_ms);

#endif

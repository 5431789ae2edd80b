/*
 * service.h - `gpuorch service`: model-serving services (docs/user-guide.md,
 * "Serving a model"), over /v1/services.
 *
 *   gpuorch service apply -f FILE   PUT /v1/services/NAME for each service of
 *                                   FILE (YAML or JSON: one service object, a
 *                                   list of them, or {"services": [...]})
 *   gpuorch service list            NAME TEAM MODEL READY/DESIRED MIN-MAX
 *                                   METRIC TARGET
 *   gpuorch service show NAME       the spec in short, each replica (REPLICA
 *                                   JOB NODE GPUS STATE INFLIGHT REASON), the
 *                                   autoscaler's last decision, back-off, cost
 *   gpuorch service delete NAME     drains and stops its replicas, forgets it
 *   gpuorch service logs NAME [--replica N] [-f] [--stderr]
 *                                   a replica's job's log (default: the first
 *                                   ready replica), as `gpuorch logs JOB`
 * --json on apply, list, show and delete prints the API's JSON.
 *
 * The parsing and rendering functions are public for the unit tests; they
 * print nothing.
 */
#ifndef GPUORCH_CLI_SERVICE_H
#define GPUORCH_CLI_SERVICE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#define SERVICE_FILE_MAX (4u << 20) /* bytes of an apply file */
#define SERVICE_MAX      1000       /* services in one file */

/*
 * Reads an apply file's text[0..len) (borrowed) as YAML (JSON is YAML too;
 * JSON that YAML refuses is read as JSON): one service object, a list of
 * them, or an object with a list `services`. Every service must be an object
 * with a non-empty string `name`, each name once. What GET adds and PUT does
 * not take (`status`, `generation`, `user`) is left out, so that `show
 * --json` output applies again. `name` names the file in messages. 0 and
 * *ret_list (a new array; caller decrefs) with *ret_lines (a new array of
 * each service's line, 0 when not known; caller decrefs); GPO_EUSAGE with
 * "NAME:LINE: ..." in err; GPO_ENOMEM.
 */
int service_file_parse(const char *text, size_t len, const char *name, json_t **ret_list,
                       json_t **ret_lines, char *err, size_t errlen);

/* Writes GET /v1/services's answer (borrowed) as the list's table. 0, or
 * GPO_ENOMEM. */
int service_list_render(FILE *out, const json_t *answer);

/* Writes GET /v1/services/NAME's answer (borrowed) as `show` does; ages
 * ("12 s ago") from now_ms. 0, or GPO_ENOMEM. */
int service_show_render(FILE *out, const json_t *svc, int64_t now_ms);

/*
 * The job of a service's replica (svc borrowed: GET /v1/services/NAME's
 * answer): replica number `replica`, or with 0 the first ready one (by
 * replica number), else the first one. 0 and *ret_job; GPO_ENOENT with the
 * reason in err (no such replica, none at all, a replica with no job yet).
 */
int service_replica_job(const json_t *svc, int64_t replica, int64_t *ret_job, char *err,
                        size_t errlen);

/* `gpuorch service ...`: exit codes as cli.h. */
int service_command(int argc, char **argv);

#endif

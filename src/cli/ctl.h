/*
 * ctl.h - scontrol's job commands:
 *
 *   gpuorch hold JOB...       keep pending jobs from starting ("held by user";
 *                             an admin's hold only an admin releases)
 *   gpuorch release JOB...    let held jobs be scheduled again
 *   gpuorch requeue JOB...    put running or ended jobs back in the queue
 *                             (a running attempt is stopped; the id stays)
 *   gpuorch update JOB FIELD=VALUE...
 *                             TimeLimit=DURATION, Priority=CLASS,
 *                             Dependency=afterok:ID[:ID][,afterany:ID]
 *
 * JOB is a job id, ARRAY_TASK (41_7) for one task, or an array's id for
 * every task of it. One line per job changed; --json prints the API's
 * answers. Each returns an exit code as cli.h says (1 if any JOB failed).
 */
#ifndef GPUORCH_CLI_CTL_H
#define GPUORCH_CLI_CTL_H

#include <jansson.h>

int ctl_hold_command(int argc, char **argv);
int ctl_release_command(int argc, char **argv);
int ctl_requeue_command(int argc, char **argv);
int ctl_update_command(int argc, char **argv);

/*
 * The fields of `gpuorch update` (words "NAME=VALUE", names in any case:
 * TimeLimit or time_limit, Priority, Dependency or dependencies) as the
 * PATCH body: a new object into *ret. GPO_EUSAGE naming the word; GPO_ENOMEM.
 */
int ctl_update_fields(const char *const *words, size_t n, json_t **ret, char *err, size_t errlen);

#endif

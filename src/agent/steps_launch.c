/*
 * steps_launch.c - what an attempt's launch needs for steps (steps.h):
 * rank 0's step variables, and a first_node rank's hold.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/steps.h"
#include "util/errbuf.h"
#include "base/banned.h"

int steps_launch_env(const struct proto_attempt *a, struct launch *l)
{
    if (!a->step.key)
        return 0;
    size_t len = 1;
    for (size_t k = 0; k < a->step.naddrs; k++)
        len += strlen(a->step.addrs[k]) + 1;
    char *addrs = calloc(1, len);
    if (!addrs)
        return GPO_ENOMEM;
    size_t at = 0;
    for (size_t k = 0; k < a->step.naddrs; k++)
        at += (size_t)snprintf(addrs + at, len - at, "%s%s", k ? "," : "", a->step.addrs[k]);
    int rc = launch_strv_add(&l->env, "GPUORCH_STEP_KEY=%s", a->step.key);
    rc = rc ? rc : launch_strv_add(&l->env, "GPUORCH_STEP_ADDRS=%s", addrs);
    free(addrs);
    const struct {
        const char *name;
        uint32_t value;
    } shape[] = {{"GPUORCH_NTASKS", a->spec.ntasks},
                 {"GPUORCH_NTASKS_PER_NODE", a->spec.ntasks_per_node},
                 {"GPUORCH_GPUS_PER_TASK", a->spec.gpus_per_task}};
    for (size_t k = 0; !rc && k < sizeof(shape) / sizeof(shape[0]); k++) {
        if (shape[k].value)
            rc = launch_strv_add(&l->env, "%s=%" PRIu32, shape[k].name, shape[k].value);
    }
    l->req.env = (const char *const *)l->env.v;
    l->req.nenv = l->env.n;
    return rc;
}

int steps_launch_hold(struct launch *l)
{
    for (size_t k = 0; k < l->argv.n; k++)
        free(l->argv.v[k]);
    l->argv.n = 0;
    int rc = launch_strv_add(&l->argv, "sleep");
    rc = rc ? rc : launch_strv_add(&l->argv, "infinity");
    l->req.argv = (const char *const *)l->argv.v;
    l->req.argc = l->argv.n;
    l->req.script = false;
    l->req.stdout_path = NULL; /* the attempt's directory: not the job's -o file */
    l->req.stderr_path = NULL;
    return rc;
}

int steps_launch(struct steps *s, const struct proto_attempt *a, struct launch *l, char *err,
                 size_t errlen)
{
    if (!s)
        return 0;
    bool hold = a->spec.launch == PROTO_LAUNCH_FIRST_NODE && a->gang.rank > 0;
    int rc = steps_attempt_add(s, a);
    rc = rc ? rc : steps_launch_env(a, l);
    rc = rc || !hold ? rc : steps_launch_hold(l);
    if (rc) {
        steps_attempt_remove(s, a->job, a->attempt);
        launch_release(l);
        return errbuf_set(err, errlen, rc, "out of memory");
    }
    return 0;
}

/*
 * migplan.h - the agent's side of MIG repartitions: the plans of the
 * assignments answer (proto.h's struct proto_mig_plan) applied to this
 * node's GPUs, and their results (struct proto_mig_result) sent to
 * POST /v1/nodes/NAME/mig/ID.
 *
 * Plans are applied one at a time (so one GPU at a time), in id order, each
 * id once. A plan destroys only the instances it names (each by profile id
 * and start slot) and creates the ones it names, each a GPU instance at its
 * placement with one compute instance spanning it. Before destroying
 * anything it checks every instance it would destroy: one that a process
 * runs on (NVML lists it with that GPU instance id) or that an attempt of
 * this agent was given (its MIG UUID in the attempt's shares) fails the
 * plan, and nothing is destroyed. A plan that names an instance no longer
 * there, or one to create that is there already, skips it, so that a plan
 * applied again after a crash ends as it would have. A failure halfway
 * leaves what the GPU holds then, and the result reports that layout: the
 * controller schedules on it. MIG mode is never changed and no GPU is
 * reset: a GPU not in MIG mode fails the plan, saying so.
 *
 * Each result is written to DIR/ID.json (fsync'd) before it is sent, and
 * renamed to DIR/ID.done once the controller has it (2xx; also 404, 409
 * and 410: the controller no longer wants it), so that a restarted agent
 * neither applies a plan twice nor loses a result. A done record is
 * forgotten once an answer no longer lists its plan (the controller has
 * let go of it too).
 *
 * Changing MIG state needs root (NVML's rule): the changes go through the
 * privileged half (priv_mig_create, priv_mig_destroy), the reads through
 * the agent's own backend.
 *
 * One thread uses a migplan (the agent's long-poll loop). Nothing here
 * exits; it logs through cfg.log.
 */
#ifndef GPUORCH_AGENT_MIGPLAN_H
#define GPUORCH_AGENT_MIGPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/attempts.h"
#include "agent/priv.h"
#include "gpu/gpu.h"
#include "proto/proto.h"
#include "util/httpc.h"

struct migplan_config {
    const char *dir;                /* the records (copied); made (0700) if missing */
    const struct gpu_backend *gpus; /* borrowed */
    struct attempts *att;           /* borrowed; NULL: no attempt holds an instance */
    struct priv *priv;              /* borrowed: makes the changes (NVML wants root); NULL:
                                       through gpus directly */
    void (*log)(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
};

struct migplan;

/* Reads DIR's records. 0 and *ret (free with migplan_free), or the error
 * (DIR cannot be made or read: -errno; GPO_ENOMEM) with err. */
int migplan_new(const struct migplan_config *cfg, struct migplan **ret, char *err, size_t errlen);
void migplan_free(struct migplan *m);

/* Applies the answer's plans (borrowed) that no record names, in id order,
 * recording each result; forgets done records the answer does not list. */
void migplan_apply(struct migplan *m, const struct proto_assignments *answer);

/* Sends every result the controller does not have yet with c, to
 * PREFIX/ID (prefix: "/v1/nodes/NAME/mig", borrowed). Returns how many are
 * still owed. */
size_t migplan_report(struct migplan *m, struct httpc *c, const char *prefix);

/* Whether plan `id` has a record (applied), for tests and the log. */
bool migplan_applied(const struct migplan *m, uint64_t id);

/*
 * One plan on the GPUs of b, as migplan_apply does it, without records:
 * *ret (release with proto_mig_result_release) says how it went and what
 * the GPU holds afterwards. att and priv may be NULL. 0, or GPO_ENOMEM (*ret
 * untouched).
 */
int migplan_run(const struct gpu_backend *b, struct attempts *att, struct priv *priv,
                const struct proto_mig_plan *p, struct proto_mig_result *ret);

#endif

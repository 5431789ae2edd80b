/*
 * serve_spec.h - the service a serving replay runs: the YAML (or JSON) of
 * `gpuorch service apply -f`, read by the same decoder as the controller's
 * (cluster_service_decode: the same fields, defaults and messages), plus a
 * `simulate:` section that only the simulator reads:
 *
 *     simulate:
 *       prefill_tps: 10000        # prompt tokens per second, > 0
 *       decode_tps: 2400          # a batch's total decode rate, > 0
 *       decode_tps_request: 80    # the most one request decodes at; default decode_tps
 *       max_batch: 32             # 1 .. 4096
 *       startup_s: 60             # placement to ready; >= 0
 *       slo:                      # at least one part
 *         ttft_s: 2
 *         tpot_ms: 100
 *         e2e_s: 30
 *
 * Every field is checked; a bad one is an error naming the file, the line
 * (YAML) and the field ("chat.yaml:31: simulate.max_batch: expected a whole
 * number 1 .. 4096, got '0'"). A spec without `simulate:` is an error that
 * says what to add.
 */
#ifndef GPUORCH_SIM_SERVE_SPEC_H
#define GPUORCH_SIM_SERVE_SPEC_H

#include <stddef.h>

#include "sim/serve.h"

/* Parses `len` bytes of text (named `name` in messages) into *ret. 0, or
 * GPO_EINVAL / GPO_ENOMEM with one line in `err`. */
int sim_serve_spec_parse(const char *text, size_t len, const char *name,
                         struct sim_serve_service *ret, char *err, size_t errlen);
/* Reads the file at `path` (at most 1 MiB) and parses it as above. */
int sim_serve_spec_load(const char *path, struct sim_serve_service *ret, char *err, size_t errlen);

#endif

/*
 * serve_report.h - the HTML report of a serving replay (`gpuorch sim --serve
 * ... --report FILE.html`): one self-contained page, the same machinery as
 * the job replay's (report_page.h), with for each service the policies side
 * by side:
 * - replicas (ready and all holding GPUs) and the request rate over time;
 * - the CDFs of time to first token and of end-to-end latency;
 * - the summary table, and the parameters (services, replica model, SLO);
 * and, with a job trace on the same cluster, the job replay's figures.
 */
#ifndef GPUORCH_SIM_SERVE_REPORT_H
#define GPUORCH_SIM_SERVE_REPORT_H

#include <stddef.h>

#include "sim/report.h"
#include "sim/serve.h"

struct sim_serve_report_run {
    const struct sim_serve_summary *summary; /* borrowed */
    const struct sim_serve_result *result;   /* borrowed */
    const struct sim_serve_service *service; /* borrowed */
};

/*
 * Writes the page to `path` (atomically, 0644, as sim_report_write). `runs`
 * are the service/policy replays, grouped by service in the order given;
 * `jobs` (njobs, may be 0) the training replays of a shared cluster, one per
 * serving policy. Long series are thinned to 2,000 points per run over time
 * (each the highest of its stretch) and 1,000 on a CDF. 0, GPO_EINVAL (no
 * path, a run without its parts, a file that cannot be written) or
 * GPO_ENOMEM, with one line in err.
 */
int sim_serve_report_write(const char *path, const char *title,
                           const struct sim_serve_report_run *runs, size_t nruns,
                           const struct sim_report_run *jobs, size_t njobs, char *err,
                           size_t errlen);

#endif

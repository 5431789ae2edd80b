/*
 * report.h - the HTML report of one or more replays: one self-contained page,
 * viewable offline, with the charting library (uPlot, from npm) and its
 * license notice inlined at build time.
 *
 * Charts, each with the replayed policies side by side (one series or one
 * panel per policy):
 * - GPU utilization and queue length over time (from the result's samples);
 * - the CDF of job completion times;
 * - the average queueing delay per team;
 * and the summary table of every policy.
 */
#ifndef GPUORCH_SIM_REPORT_H
#define GPUORCH_SIM_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "sim/engine.h"
#include "sim/stats.h"

struct sim_report_run {
    const struct sim_summary *summary; /* borrowed */
    const struct sim_result *result;   /* borrowed */
};

/*
 * Writes the page for `nruns` replays of the trace named `title` to `path`
 * (replacing it atomically with util/fsutil: a temporary file next to it,
 * fsync, rename, fsync of the directory; mode 0644). Every run's summary and result are read, never
 * kept. Names (title, policies, teams) are escaped for HTML, and for the <script> element that
 * holds the data as JSON. The same input gives the same bytes.
 * Long series are thinned, so the page stays small (a few hundred kB beyond
 * uPlot's ~53 kB) whatever the trace: at most 2,000 points per policy over
 * time (each the highest value of its stretch of time) and 1,000 on the CDF.
 * 0; or GPO_EINVAL (a NULL or empty path, a run without its summary or
 * result, a file that cannot be written) or GPO_ENOMEM, with one line in
 * `err` such as "cannot write out/r.html: No such file or directory".
 */
int sim_report_write(const char *path, const char *title, const struct sim_report_run *runs,
                     size_t nruns, char *err, size_t errlen);

/* What the replay ran with, stated at the top of the page with a one-line
 * conclusion per comparison of the first policy with each other one
 * (sim_report_conclusion). */
struct sim_report_params {
    const char *cluster;     /* the spec's path; NULL: derived from the trace */
    double load;             /* --load; 0: none */
    int64_t from_s, until_s; /* the window; until_s < 0: no end */
    int64_t restart_penalty_s;
};
/* sim_report_write with the parameters (NULL: none stated but the cluster's
 * size and the policies). */
int sim_report_write_params(const char *path, const char *title,
                            const struct sim_report_params *params,
                            const struct sim_report_run *runs, size_t nruns, char *err,
                            size_t errlen);
/* "default cut average JCT 10.2x against fifo at equal utilization (45.1% and
 * 45.3%)": a against b, equal meaning within one point. */
void sim_report_conclusion(char *buf, size_t len, const struct sim_summary *a,
                           const struct sim_summary *b);

#endif

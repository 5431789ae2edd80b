/*
 * report_page.h - the page machinery the simulator's HTML reports share
 * (report.c for job replays, serve_report.c for serving): escaping for HTML
 * and for JSON inside a <script> element, duration cells with one unit per
 * column, the page's head and foot with uPlot inlined, and the atomic write.
 */
#ifndef GPUORCH_SIM_REPORT_PAGE_H
#define GPUORCH_SIM_REPORT_PAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* The page's own style, and the script helpers every page's charts use
 * (D the data; color, dash, width, empty, chart, dur, pct, count, series). */
extern const char sim_page_css[];
extern const char sim_page_js_prelude[];

/* s (n bytes) with the five HTML specials escaped. */
void sim_page_html_n(FILE *f, const char *s, size_t n);
void sim_page_html(FILE *f, const char *s);
/* s as a JSON string safe inside <script>: "</" is "<\/", "<!" is "\u003c!". */
void sim_page_json_str(FILE *f, const char *s);
/* A JSON number; null for what JSON cannot hold. */
void sim_page_json_num(FILE *f, double x);

/* A unit for durations: the one that suits `max_s` (s, min, h, d), so a
 * column shows all its cells in one unit. */
struct sim_page_unit {
    const char *name;
    double seconds;
};
struct sim_page_unit sim_page_unit_for(double max_s);
/* A duration cell in `u`, its seconds in the title; "-" when !known. */
void sim_page_duration_cell(FILE *f, double s, bool known, struct sim_page_unit u);

/* <!DOCTYPE html> through <h1>title</h1>. */
void sim_page_head(FILE *f, const char *title);
/* The footer (uPlot's version and license), uPlot's script, the data
 * (written by data(f, ctx) into <script id="gpo-data">), then `js` (after
 * sim_page_js_prelude) and the end of the page. data's error is returned. */
int sim_page_foot(FILE *f, int (*data)(FILE *f, const void *ctx), const void *ctx, const char *js);

/* Writes the page body(f, ctx) to `path`, atomically (a temporary file next
 * to it, fsync, rename, fsync of the directory), mode 0644. 0, or GPO_EINVAL /
 * GPO_ENOMEM with "cannot write PATH: why" in err. */
int sim_page_write(const char *path, int (*body)(FILE *f, const void *ctx), const void *ctx,
                   char *err, size_t errlen);

#endif

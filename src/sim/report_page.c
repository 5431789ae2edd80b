/*
 * report_page.c - the page machinery of the simulator's reports (report_page.h).
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "sim/assets.h"
#include "sim/report_page.h"
#include "util/fsutil.h"
#include "base/banned.h"

/* The page's own style. Charts are uPlot's; the script only feeds them. */
const char sim_page_css[] =
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:1.5em auto;"
    "max-width:1200px;padding:0 1em;color:#222}\n"
    "h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.8em}h3{font-size:1em}\n"
    "table{border-collapse:collapse;font-size:.9em}\n"
    "th,td{border:1px solid #ccc;padding:.25em .6em}td{text-align:right}\n"
    "td.name,th.name{text-align:left}th{background:#f3f3f3}\n"
    ".chart{width:100%;min-height:2em}.note{color:#555;font-size:.9em}\n"
    ".side{display:flex;flex-wrap:wrap;gap:1em}.side>div{flex:1 1 480px;min-width:320px}\n"
    "pre{white-space:pre-wrap;font-size:.85em}footer{margin-top:2.5em}\n";

/* Opens the page's function; sim_page_foot closes it. */
const char sim_page_js_prelude[] =
    "(function () {\n"
    "'use strict';\n"
    "var D = JSON.parse(document.getElementById('gpo-data').textContent);\n"
    "var COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b',\n"
    "              '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];\n"
    "var charts = [];\n"
    "function color(i) { return COLORS[i % COLORS.length]; }\n"
    "function dash(i) { return i < COLORS.length ? undefined : [6, 3]; }\n"
    "function width(el) { return Math.max(320, el.clientWidth || 900); }\n"
    "function empty(id, text) {\n"
    "  var p = document.createElement('p');\n"
    "  p.className = 'note';\n"
    "  p.textContent = text;\n"
    "  document.getElementById(id).appendChild(p);\n"
    "}\n"
    "function chart(id, height, opts, data) {\n"
    "  var el = document.getElementById(id);\n"
    "  opts.width = width(el);\n"
    "  opts.height = height;\n"
    "  charts.push({u: new uPlot(opts, data, el), el: el, height: height});\n"
    "}\n"
    "function dur(s) {\n"
    "  if (s == null) return '-';\n"
    "  if (s < 120) return +s.toFixed(1) + ' s';\n"
    "  if (s < 7200) return +(s / 60).toFixed(1) + ' min';\n"
    "  if (s < 172800) return +(s / 3600).toFixed(1) + ' h';\n"
    "  return +(s / 86400).toFixed(1) + ' d';\n"
    "}\n"
    "function pct(v) { return v == null ? '-' : +(v * 100).toFixed(1) + '%'; }\n"
    "function count(v) { return v == null ? '-' : String(Math.round(v)); }\n"
    "function hours(t) { return t.map(function (v) { return v / 3600; }); }\n";

void sim_page_html_n(FILE *f, const char *s, size_t n)
{
    for (const char *end = s + n; s < end; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&#39;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

void sim_page_html(FILE *f, const char *s)
{
    if (s)
        sim_page_html_n(f, s, strlen(s));
}

void sim_page_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '<' && s[1] == '/')
            fputs("<\\", f);
        else if (c == '<' && s[1] == '!')
            fputs("\\u003c", f);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

void sim_page_json_num(FILE *f, double x)
{
    if (isfinite(x))
        fprintf(f, "%.6g", x);
    else
        fputs("null", f);
}

struct sim_page_unit sim_page_unit_for(double max_s)
{
    if (!(max_s >= 120))
        return (struct sim_page_unit){"s", 1};
    if (max_s < 7200)
        return (struct sim_page_unit){"min", 60};
    if (max_s < 172800)
        return (struct sim_page_unit){"h", 3600};
    return (struct sim_page_unit){"d", 86400};
}

void sim_page_duration_cell(FILE *f, double s, bool known, struct sim_page_unit u)
{
    if (!known || !isfinite(s)) {
        fputs("<td>-</td>", f);
        return;
    }
    double v = s / u.seconds;
    fprintf(f, "<td title=\"%.0f s\">%.*f %s</td>", s, u.seconds >= 3600 ? 2 : 1, v, u.name);
}

void sim_page_head(FILE *f, const char *title)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
          "<title>gpuorch sim: ",
          f);
    sim_page_html(f, title);
    fputs("</title>\n<style>\n", f);
    /* A failed write stays in f's error flag, which fsutil_atomic_commit reports. */
    (void)fwrite(sim_asset_uplot_css, 1, sim_asset_uplot_css_len, f);
    fputs("\n</style>\n<style>\n", f);
    fputs(sim_page_css, f);
    fputs("</style>\n</head>\n<body>\n<h1>gpuorch sim: ", f);
    sim_page_html(f, title);
    fputs("</h1>\n", f);
}

int sim_page_foot(FILE *f, int (*data)(FILE *f, const void *ctx), const void *ctx, const char *js)
{
    fputs("<footer>\n<p class=\"note\">Charts: uPlot ", f);
    sim_page_html(f, sim_asset_uplot_version);
    fputs(" (MIT license, below), inlined in this page, which loads nothing from the "
          "network.</p>\n<details><summary>uPlot license</summary>\n<pre>",
          f);
    sim_page_html_n(f, (const char *)sim_asset_uplot_license, sim_asset_uplot_license_len);
    fputs("</pre>\n</details>\n</footer>\n<script>\n", f);
    (void)fwrite(sim_asset_uplot_js, 1, sim_asset_uplot_js_len, f); /* as the CSS */
    fputs("\n</script>\n<script id=\"gpo-data\" type=\"application/json\">\n", f);
    int e = data(f, ctx);
    if (e)
        return e;
    fputs("\n</script>\n<script>\n", f);
    fputs(sim_page_js_prelude, f);
    fputs(js, f);
    fputs("window.addEventListener('resize', function () {\n"
          "  charts.forEach(function (c) { c.u.setSize({width: width(c.el), height: c.height}); "
          "});\n"
          "});\n"
          "})();\n</script>\n</body>\n</html>\n",
          f);
    return 0;
}

static int fail(char *err, size_t errlen, int code, const char *path, int errnum)
{
    if (err && errlen)
        snprintf(err, errlen, "cannot write %s: %s", path,
                 code == GPO_ENOMEM ? gpo_strerror(code) : strerror(errnum));
    return code;
}

int sim_page_write(const char *path, int (*body)(FILE *f, const void *ctx), const void *ctx,
                   char *err, size_t errlen)
{
    if (!path || !*path)
        return fail(err, errlen, GPO_EINVAL, "(no path)", EINVAL);
    /* Written whole or not at all; 0644: a report is for sharing, like any
     * file fopen makes. */
    struct fsutil_atomic a;
    int rc = fsutil_atomic_begin(&a, path, 0644, 0, NULL, 0);
    FILE *f = rc ? NULL : fsutil_atomic_stream(&a);
    if (rc || !f) {
        fsutil_atomic_abort(&a);
        return rc == GPO_ENOMEM || !rc ? fail(err, errlen, GPO_ENOMEM, path, ENOMEM)
                                       : fail(err, errlen, GPO_EINVAL, path, -rc);
    }
    rc = body(f, ctx);
    if (rc) {
        fsutil_atomic_abort(&a);
        rc = fail(err, errlen, rc, path, ENOMEM);
    } else if ((rc = fsutil_atomic_commit(&a, NULL, 0)) != 0) {
        rc = fail(err, errlen, GPO_EINVAL, path, rc == GPO_ENOMEM ? ENOMEM : -rc);
    }
    return rc;
}

/*
 * web.h - the dashboard: one self-contained page served at GET / (web/,
 * with uPlot inlined, embedded in the binary at build time by
 * tools/embed_web.py; docs/dashboard.md), at /, /jobs/ID, /nodes/NAME and
 * /history: the same page, which shows the page its path names.
 *
 * The page holds no data: it asks for a token and reads the API with it, so
 * its routes are public. It is answered with a strict Content-Security-Policy
 * (inline scripts and styles allowed by their hashes only, connections to
 * this origin only), nosniff, no framing, and an ETag so that a reload costs
 * a 304.
 */
#ifndef GPUORCH_SERVER_API_WEB_H
#define GPUORCH_SERVER_API_WEB_H

#include <stddef.h>

/* Generated (web_assets.c): the page, its CSP header value and its ETag
 * (quoted, as the header carries it). */
extern const unsigned char web_page_html[];
extern const size_t web_page_html_len;
extern const char web_page_csp[];
extern const char web_page_etag[];

/* The routes (api_web_routes, api.h): GET / and the pages' paths (HEAD too), the page, 304 when
 * If-None-Match names its ETag; GET /favicon.ico, 204, so that browsers stop
 * asking (the page sets none). Both public. */

#endif

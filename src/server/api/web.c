/*
 * web.c - the dashboard's page and favicon (web.h).
 */
#include <string.h>

#include "base/err.h"
#include "server/api/api.h"
#include "server/api/web.h"
#include "base/banned.h"

/* The headers every answer of the page carries. no-cache: the browser keeps
 * the page but asks each time (a new binary serves a new page), and the
 * ETag turns that question into a 304. */
static int add_page_headers(struct http_request *req)
{
    static const char *const fixed[][2] = {
        {"Cache-Control", "no-cache"},
        {"X-Content-Type-Options", "nosniff"},
        {"X-Frame-Options", "DENY"},
        {"Referrer-Policy", "no-referrer"},
    };
    int rc = http_request_add_header(req, "Content-Security-Policy", web_page_csp);
    rc = rc ? rc : http_request_add_header(req, "ETag", web_page_etag);
    for (size_t i = 0; !rc && i < sizeof(fixed) / sizeof(fixed[0]); i++)
        rc = http_request_add_header(req, fixed[i][0], fixed[i][1]);
    return rc;
}

/* Whether an If-None-Match value names our ETag: "*", or a comma-separated
 * list of tags, each maybe weak (W/"..."), as RFC 9110 13.1.2 has it. */
static bool etag_matches(const char *header)
{
    size_t taglen = strlen(web_page_etag);
    const char *p = header;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (*p == '*')
            return true;
        if (p[0] == 'W' && p[1] == '/')
            p += 2;
        if (strncmp(p, web_page_etag, taglen) == 0 &&
            (p[taglen] == '\0' || p[taglen] == ',' || p[taglen] == ' ' || p[taglen] == '\t'))
            return true;
        while (*p && *p != ',')
            p++;
    }
    return false;
}

static int web_index(struct http_request *req, void *ctx)
{
    (void)ctx;
    static const char ctype[] = "text/html; charset=utf-8";
    int rc = add_page_headers(req);
    if (rc)
        return http_request_error(req, 500, "internal", "%s", gpo_strerror(rc));
    const char *inm = http_request_header(req, "If-None-Match");
    if (inm && etag_matches(inm))
        return http_request_respond_static(req, 304, ctype, NULL, 0);
    return http_request_respond_static(req, 200, ctype, web_page_html, web_page_html_len);
}

static int web_favicon(struct http_request *req, void *ctx)
{
    (void)ctx;
    int rc = http_request_add_header(req, "Cache-Control", "max-age=86400");
    if (rc)
        return http_request_error(req, 500, "internal", "%s", gpo_strerror(rc));
    return http_request_respond_static(req, 204, "image/x-icon", NULL, 0);
}

/* The page is served at each of its pages' paths (web/js/main.js shows the
 * one the path names), so that a link to a job can be shared and reloaded. */
static const struct http_route routes[] = {
    {"GET", "/", web_index, HTTP_ROUTE_PUBLIC, NULL},
    {"GET", "/jobs/{id}", web_index, HTTP_ROUTE_PUBLIC, NULL},
    {"GET", "/nodes/{name}", web_index, HTTP_ROUTE_PUBLIC, NULL},
    {"GET", "/history", web_index, HTTP_ROUTE_PUBLIC, NULL},
    {"GET", "/favicon.ico", web_favicon, HTTP_ROUTE_PUBLIC, NULL},
};
const struct api_routes api_web_routes = {routes, sizeof(routes) / sizeof(routes[0])};
